// node_fence_fuzz.cc — fence files (`feedguard-agent plan|apply --fence`, JSON or YAML): never
// crash, throw, or take unbounded time or memory (libFuzzer's -timeout and -rss_limit_mb catch
// the latter); an accepted fence round-trips through its JSON form.
#include <google/protobuf/util/json_util.h>

#include "agent/engine/node_engine.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, size_t size) {
  auto fence = feedguard::agent::ParseNodeFence(std::string(AsText(data, size)), "fuzz");
  if (!fence.ok()) return 0;
  std::string json;
  FG_FUZZ_CHECK(google::protobuf::util::MessageToJsonString(*fence, &json).ok());
  auto again = feedguard::agent::ParseNodeFence(json, "fuzz-roundtrip");
  FG_FUZZ_CHECK(again.ok());
  FG_FUZZ_CHECK(again->SerializeAsString() == fence->SerializeAsString());
  return 0;
}
