// cgroup_files_fuzz.cc — the parsers of kernel files the agent reads: /proc/self/mountinfo
// (cgroup detection) and cpu.pressure (PSI). Never crash; accepted PSI has finite, non-negative
// averages.
#include <cmath>

#include "agent/cgroup/cgroups.h"
#include "agent/cgroup/detect.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, size_t size) {
  const std::string_view text = AsText(data, size);
  (void)feedguard::agent::cgroup::ParseMountInfo(text);
  auto psi = feedguard::agent::cgroup::ParsePressure(text);
  if (psi.ok()) {
    for (double v : {psi->some.avg10, psi->some.avg60, psi->some.avg300}) {
      FG_FUZZ_CHECK(std::isfinite(v) && v >= 0);
    }
  }
  return 0;
}
