// podresources_client.h — which GPU devices each pod got, from kubelet's PodResources v1 API.
//
// kubelet serves PodResourcesLister on a unix socket; `List` names pods by namespace + name (no
// UID) and lists, per container, the device ids of each extended resource. We keep the NVIDIA
// ones: "nvidia.com/gpu", "nvidia.com/gpu.shared" (time-slicing renamed) and "nvidia.com/mig-*".
// GPUs a pod got through a ResourceClaim (Dynamic Resource Allocation) come in the container's
// `dynamic_resources` instead: per claim, the allocated devices with their DRA driver, pool,
// device name and CDI device names. Those of a GPU driver ("gpu.nvidia.com") become device ids
// "<driver>/<device>" (e.g. "gpu.nvidia.com/gpu-0", resolved by GpuIdResolver), or the GPU's
// UUID when only a CDI name carries one ("k8s.gpu.nvidia.com/gpu=GPU-…").
// `PodResourcesSource` is the seam: the agent holds one, tests can fake it.
#pragma once

#include <chrono>
#include <compare>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "feedguard/common/gpu_resource_names.h"
#include "feedguard/common/status.h"

namespace v1 {
class ListPodResourcesResponse;
}  // namespace v1

namespace feedguard::agent {

inline constexpr std::string_view kDefaultPodResourcesEndpoint =
    "unix:/var/lib/kubelet/pod-resources/kubelet.sock";

struct PodKey {
  std::string ns;
  std::string name;
  friend auto operator<=>(const PodKey&, const PodKey&) = default;
};

// Pod → its GPU device ids, in container order then kubelet's order (device plugin devices, then
// DRA devices; a claim shared by several containers of the pod counts once); pods without GPUs
// absent.
using PodGpuMap = std::map<PodKey, std::vector<std::string>>;

// Device-plugin resources that are GPUs; defaults: the NVIDIA names of
// feedguard/common/gpu_resource_names.h (nvidia.com/gpu, nvidia.com/gpu.shared, nvidia.com/mig-*).
struct GpuResourceFilter {
  std::vector<std::string> exact = NvidiaNames().exact;
  std::vector<std::string> prefixes = NvidiaNames().prefixes;
  // DRA drivers whose devices are GPUs (ClaimResource.driver_name).
  std::vector<std::string> dra_drivers = {"gpu.nvidia.com"};
  bool Matches(std::string_view resource_name) const;
  bool MatchesDraDriver(std::string_view driver_name) const;

 private:
  static GpuResourceNames NvidiaNames() {
    GpuResourceNames n;
    std::string ignored;
    GpuResourceNames::Parse(kNvidiaGpuResourceNames, &n, &ignored);
    return n;
  }
};

// The device id of one DRA-allocated device: the GPU/MIG UUID when a CDI name carries one
// ("k8s.gpu.nvidia.com/gpu=GPU-…"), else "<driver>/<device name>" (the device name, else the
// name in a CDI name: "k8s.gpu.nvidia.com/device=gpu-0" → "gpu.nvidia.com/gpu-0"). Exposed for
// tests. `cdi_names` in kubelet's order.
std::string DraDeviceId(std::string_view driver, std::string_view device_name,
                        const std::vector<std::string>& cdi_names);

// Pure: the GPU devices in a List response.
PodGpuMap ExtractPodGpus(const ::v1::ListPodResourcesResponse& response,
                         const GpuResourceFilter& filter = {});

class PodResourcesSource {
 public:
  virtual ~PodResourcesSource() = default;
  virtual Result<PodGpuMap> ListPodGpus() = 0;
};
using PodResourcesSourcePtr = std::shared_ptr<PodResourcesSource>;

struct PodResourcesClientOptions {
  std::string endpoint = std::string(kDefaultPodResourcesEndpoint);  // any gRPC target
  std::chrono::milliseconds timeout{5000};                           // per call
  int max_receive_bytes = 16 * 1024 * 1024;                          // kubelet's own cap
  GpuResourceFilter filter;
};

// gRPC client (thread-safe: the stub is; no other state changes after construction).
class PodResourcesClient : public PodResourcesSource {
 public:
  explicit PodResourcesClient(PodResourcesClientOptions options = {});
  ~PodResourcesClient() override;
  PodResourcesClient(const PodResourcesClient&) = delete;
  PodResourcesClient& operator=(const PodResourcesClient&) = delete;

  Result<PodGpuMap> ListPodGpus() override;

 private:
  struct Impl;
  PodResourcesClientOptions options_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace feedguard::agent
