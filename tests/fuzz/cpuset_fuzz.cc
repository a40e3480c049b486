// cpuset_fuzz.cc — CpuSet::Parse (kernel list format: cpuset.cpus, --reserved-cpus, kubelet's
// cpu_manager_state): never crashes, and whatever it accepts prints back to a list that parses
// to the same set.
#include "common/cpuset.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, size_t size) {
  auto set = feedguard::CpuSet::Parse(AsText(data, size));
  if (!set.ok()) return 0;
  const std::string text = set->ToString();
  auto again = feedguard::CpuSet::Parse(text);
  FG_FUZZ_CHECK(again.ok());
  FG_FUZZ_CHECK(*again == *set);
  FG_FUZZ_CHECK(again->ToString() == text);
  return 0;
}
