// gpu_ids_fuzz.cc — GPU device ids as kubelet's PodResources reports them (UUIDs, MIG-…,
// <uuid>::<n> replicas) and `nvidia-smi -L` output: never crash.
#include "agent/topology/gpu_ids.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, size_t size) {
  const std::string_view text = AsText(data, size);
  (void)feedguard::agent::ParseGpuDeviceId(text);
  (void)feedguard::agent::ParseNvidiaSmiList(text);
  return 0;
}
