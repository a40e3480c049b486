// nvml.h — each GPU's utilisation through NVML, loaded at run time (no build dependency).
//
// `libnvidia-ml.so.1` ships with the NVIDIA driver, not with feedguard: OpenNvml dlopen()s it
// when present and resolves the few entry points used (nvmlInit_v2, nvmlDeviceGetCount_v2,
// nvmlDeviceGetHandleByIndex_v2, nvmlDeviceGetUUID, nvmlDeviceGetPciInfo_v3,
// nvmlDeviceGetUtilizationRates, nvmlShutdown), declared here from NVML's public ABI. On a node
// without the library OpenNvml says NotFound and the agent reports no GPU utilisation — no
// error, nothing else changes. `GpuMonitor` is the seam: the engine holds one, tests use the
// stand-in library in agent/gpu/testdata (or a fake).
#pragma once

#include <map>
#include <memory>
#include <string>

#include "feedguard/common/status.h"

namespace feedguard::agent::gpu {

inline constexpr char kDefaultNvmlLibrary[] = "libnvidia-ml.so.1";

// One GPU as NVML samples it. Utilisation is NVML's: the percent of the last sample period
// (1/6 s to 1 s, by product) during which a kernel ran (gpu), or device memory was read or
// written (memory).
struct GpuSample {
  std::string uuid;    // "gpu-…", lower-case
  std::string bus_id;  // "0000:3b:00.0", lower-case, as Topology spells it
  unsigned gpu_percent = 0;
  unsigned memory_percent = 0;
};

class GpuMonitor {
 public:
  virtual ~GpuMonitor() = default;
  // Every GPU's current utilisation, keyed by PCI address. A GPU NVML cannot read (lost, being
  // reset) is left out; an error means none could be read.
  virtual Result<std::map<std::string, GpuSample>> Sample() = 0;
};
using GpuMonitorPtr = std::shared_ptr<GpuMonitor>;

// dlopen()s `library` (a file name searched the usual way, or a path) and initialises NVML.
// NotFound when the library is absent (the feature is then off); Unavailable when it loads but
// lacks an entry point or nvmlInit fails (no driver, no device access). Thread-safe once open
// (calls are serialised). The library is shut down and closed on destruction.
Result<GpuMonitorPtr> OpenNvml(const std::string& library = kDefaultNvmlLibrary);

}  // namespace feedguard::agent::gpu
