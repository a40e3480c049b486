// nvml.cc — the NVML GpuMonitor: dlopen, a handful of entry points, and their C ABI.
#include "agent/gpu/nvml.h"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <mutex>

#include "agent/gpu/nvml_abi.h"
#include "agent/topology/gpu_ids.h"

namespace feedguard::agent::gpu {
namespace {

using namespace nvml_abi;  // NOLINT(google-build-using-namespace): the C ABI's names

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// Closes the handle it owns.
struct DlCloser {
  void operator()(void* h) const {
    if (h != nullptr) dlclose(h);
  }
};
using DlHandle = std::unique_ptr<void, DlCloser>;

class NvmlMonitor final : public GpuMonitor {
 public:
  NvmlMonitor(DlHandle lib, ShutdownFn shutdown, GetCountFn count, GetHandleByIndexFn by_index,
              GetUuidFn uuid, GetPciInfoFn pci, GetUtilizationFn util)
      : lib_(std::move(lib)),
        shutdown_(shutdown),
        count_(count),
        by_index_(by_index),
        uuid_(uuid),
        pci_(pci),
        util_(util) {}
  ~NvmlMonitor() override { shutdown_(); }
  NvmlMonitor(const NvmlMonitor&) = delete;
  NvmlMonitor& operator=(const NvmlMonitor&) = delete;

  Result<std::map<std::string, GpuSample>> Sample() override {
    std::lock_guard<std::mutex> l(mu_);
    unsigned int n = 0;
    if (const nvmlReturn_t r = count_(&n); r != kSuccess) {
      return Unavailable("nvmlDeviceGetCount_v2 failed (NVML error " + std::to_string(r) + ")");
    }
    std::map<std::string, GpuSample> out;
    for (unsigned int i = 0; i < n; ++i) {
      nvmlDevice_t dev = nullptr;
      if (by_index_(i, &dev) != kSuccess) continue;
      nvmlPciInfo_t pci{};
      if (pci_(dev, &pci) != kSuccess) continue;
      pci.busId[sizeof pci.busId - 1] = '\0';
      GpuSample s;
      s.bus_id = NormalizePciBusId(pci.busId);
      if (s.bus_id.empty()) continue;
      char uuid[kUuidBufferSize] = {};
      if (uuid_(dev, uuid, kUuidBufferSize) == kSuccess) {
        uuid[kUuidBufferSize - 1] = '\0';
        s.uuid = Lower(uuid);
      }
      nvmlUtilization_t u{};
      if (util_(dev, &u) != kSuccess) continue;
      s.gpu_percent = std::min(u.gpu, 100u);
      s.memory_percent = std::min(u.memory, 100u);
      out[s.bus_id] = std::move(s);
    }
    return out;
  }

 private:
  DlHandle lib_;  // destroyed after shutdown_() ran in the destructor body
  ShutdownFn shutdown_;
  GetCountFn count_;
  GetHandleByIndexFn by_index_;
  GetUuidFn uuid_;
  GetPciInfoFn pci_;
  GetUtilizationFn util_;
  std::mutex mu_;
};

template <typename Fn>
Fn Symbol(void* lib, const char* name, std::string* missing) {
  void* p = dlsym(lib, name);
  if (p == nullptr) *missing += std::string(missing->empty() ? "" : ", ") + name;
  return reinterpret_cast<Fn>(p);
}

}  // namespace

Result<GpuMonitorPtr> OpenNvml(const std::string& library) {
  DlHandle lib(dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL));
  if (!lib) {
    const char* err = dlerror();
    return NotFound("NVML library " + library + " not loaded" +
                    (err != nullptr ? std::string(": ") + err : std::string()));
  }
  std::string missing;
  auto init = Symbol<InitFn>(lib.get(), "nvmlInit_v2", &missing);
  auto shutdown = Symbol<ShutdownFn>(lib.get(), "nvmlShutdown", &missing);
  auto count = Symbol<GetCountFn>(lib.get(), "nvmlDeviceGetCount_v2", &missing);
  auto by_index = Symbol<GetHandleByIndexFn>(lib.get(), "nvmlDeviceGetHandleByIndex_v2", &missing);
  auto uuid = Symbol<GetUuidFn>(lib.get(), "nvmlDeviceGetUUID", &missing);
  auto pci = Symbol<GetPciInfoFn>(lib.get(), "nvmlDeviceGetPciInfo_v3", &missing);
  auto util = Symbol<GetUtilizationFn>(lib.get(), "nvmlDeviceGetUtilizationRates", &missing);
  if (!missing.empty()) return Unavailable(library + " lacks " + missing);
  if (const nvmlReturn_t r = init(); r != kSuccess) {
    return Unavailable("nvmlInit_v2 failed (NVML error " + std::to_string(r) + ")");
  }
  return GpuMonitorPtr(
      std::make_shared<NvmlMonitor>(std::move(lib), shutdown, count, by_index, uuid, pci, util));
}

}  // namespace feedguard::agent::gpu
