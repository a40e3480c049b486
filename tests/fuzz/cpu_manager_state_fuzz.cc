// cpu_manager_state_fuzz.cc — kubelet's /var/lib/kubelet/cpu_manager_state (JSON written by
// kubelet, read by the agent from a host mount): never crashes or throws.
#include "agent/planner/cpu_manager_state.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, size_t size) {
  auto st = feedguard::agent::ParseCpuManagerState(AsText(data, size));
  if (st.ok()) (void)st->ExclusiveCpus();
  return 0;
}
