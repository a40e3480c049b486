// podresources_client.h — which GPU devices each pod got, from kubelet's PodResources v1 API.
//
// kubelet serves PodResourcesLister on a unix socket; `List` names pods by namespace + name (no
// UID) and lists, per container, the device ids of each extended resource. We keep the NVIDIA
// ones: "nvidia.com/gpu", "nvidia.com/gpu.shared" (time-slicing renamed) and "nvidia.com/mig-*".
// `PodResourcesSource` is the seam: the agent holds one, tests can fake it.
#pragma once

#include <chrono>
#include <compare>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

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

// Pod → its GPU device ids, in container order then kubelet's order; pods without GPUs absent.
using PodGpuMap = std::map<PodKey, std::vector<std::string>>;

struct GpuResourceFilter {
  std::vector<std::string> exact = {"nvidia.com/gpu", "nvidia.com/gpu.shared"};
  std::vector<std::string> prefixes = {"nvidia.com/mig-"};
  bool Matches(std::string_view resource_name) const;
};

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
