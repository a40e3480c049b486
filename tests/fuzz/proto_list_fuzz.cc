// proto_list_fuzz.cc — the Pods list in the API server's protobuf encoding
// (controller/kube/proto_list, resolver's PodJsonFromProtobuf): a body cut into chunks at
// arbitrary positions. Properties: the outcome (items, resourceVersion, or the error) does not
// depend on the chunking; no item exceeds the limit; each item either does not parse (the
// client refuses it) or becomes an object whose metadata is an object.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "controller/kube/proto_list.h"
#include "controller/resolver/cluster_objects.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

struct Outcome {
  std::vector<std::string> items;
  std::string rv;
  bool ok = true;
};

Outcome Run(std::string_view body, size_t max_item, uint32_t seed) {
  feedguard::kube::ProtoListSplitter splitter(max_item, 4096);
  Outcome out;
  uint32_t x = seed * 2654435761u + 1;
  for (size_t pos = 0; pos < body.size();) {
    x = x * 1103515245u + 12345u;
    const size_t n = std::min<size_t>(1 + (x >> 8) % 64, body.size() - pos);
    auto r = splitter.Feed(body.substr(pos, n), [&](std::string_view item) {
      FG_FUZZ_CHECK(item.size() <= max_item);
      out.items.emplace_back(item);
      return true;
    });
    if (!r.ok()) {
      out.ok = false;
      return out;
    }
    pos += n;
  }
  auto rv = splitter.Finish();
  out.ok = rv.ok();
  if (rv.ok()) out.rv = *rv;
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, size_t size) {
  // Byte 0: the item limit (16..16336 bytes: the fuzzer reaches it, a real pod of ~4.7 KB fits
  // under most); byte 1: a chunking seed.
  if (size < 2) return 0;
  const size_t max_item = 16 + 64 * static_cast<size_t>(data[0]);
  const std::string_view body = AsText(data + 2, size - 2);
  const Outcome a = Run(body, max_item, data[1]);
  const Outcome b = Run(body, max_item, data[1] + 7919u);
  FG_FUZZ_CHECK(a.ok == b.ok && a.items == b.items && a.rv == b.rv);
  for (const auto& item : a.items) {
    const nlohmann::json pod = feedguard::controller::PodJsonFromProtobuf(item);
    if (pod.is_discarded()) continue;
    FG_FUZZ_CHECK(pod.is_object() && pod["metadata"].is_object());
    (void)feedguard::controller::PodFromJson(pod);
  }
  return 0;
}
