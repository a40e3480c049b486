// podresources_client.cc — grpc++ client for kubelet's PodResourcesLister.List.
#include "agent/topology/podresources_client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cctype>
#include <set>
#include <tuple>

#include "kubelet/podresources/v1/api.grpc.pb.h"

namespace feedguard::agent {

bool GpuResourceFilter::Matches(std::string_view name) const {
  for (const auto& e : exact) {
    if (name == e) return true;
  }
  for (const auto& p : prefixes) {
    if (name.substr(0, p.size()) == p) return true;
  }
  return false;
}

bool GpuResourceFilter::MatchesDraDriver(std::string_view name) const {
  for (const auto& d : dra_drivers) {
    if (name == d) return true;
  }
  return false;
}

namespace {

bool IStartsWith(std::string_view s, std::string_view p) {
  if (s.size() < p.size()) return false;
  for (size_t i = 0; i < p.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(s[i])) != p[i]) return false;
  }
  return true;
}

// A CDI device name is "<vendor>/<class>=<name>"; the NVIDIA DRA driver's vendor is
// "k8s.<driver>" ("k8s.gpu.nvidia.com/device=gpu-0", per-claim "k8s.gpu.nvidia.com/claim=
// <claim uid>-gpu-0"). Returns the driver the vendor names ("" when not of that form).
std::string DriverOfCdiName(std::string_view cdi) {
  const auto slash = cdi.find('/');
  if (slash == std::string_view::npos || !IStartsWith(cdi, "k8s.")) return "";
  return std::string(cdi.substr(4, slash - 4));
}

bool IsHex(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isxdigit(static_cast<unsigned char>(c)) != 0;
  });
}

// "GPU-<uuid>" / "MIG-<uuid>" (a 36-character UUID after the prefix), as opposed to the DRA
// driver's canonical names ("gpu-0", "gpu-0-mig-9-4-2", "gpu-vfio-0").
bool LooksLikeUuid(std::string_view s) {
  if (!(IStartsWith(s, "gpu-") || IStartsWith(s, "mig-")) || s.size() < 4 + 36) return false;
  return IsHex(s.substr(4, 8)) && s[12] == '-';
}

// Per-claim CDI specs name the device "<claim uid>-<device>": drops the UID.
std::string_view WithoutClaimUid(std::string_view name) {
  if (name.size() > 37 && name[8] == '-' && name[13] == '-' && name[18] == '-' && name[23] == '-' &&
      name[36] == '-' && IsHex(name.substr(0, 8))) {
    return name.substr(37);
  }
  return name;
}

}  // namespace

std::string DraDeviceId(std::string_view driver, std::string_view device_name,
                        const std::vector<std::string>& cdi_names) {
  // A UUID in a CDI name names the GPU outright; else the driver's device name; else the
  // canonical name a CDI name carries.
  std::string from_cdi;
  for (const std::string& cdi : cdi_names) {
    const auto eq = cdi.find('=');
    if (eq == std::string::npos) continue;
    const std::string_view name = WithoutClaimUid(std::string_view(cdi).substr(eq + 1));
    if (LooksLikeUuid(name)) return std::string(name);
    if (from_cdi.empty()) from_cdi = std::string(name);
  }
  return std::string(driver) + "/" + std::string(device_name.empty() ? from_cdi : device_name);
}

PodGpuMap ExtractPodGpus(const ::v1::ListPodResourcesResponse& response,
                         const GpuResourceFilter& filter) {
  PodGpuMap out;
  for (const auto& pod : response.pod_resources()) {
    std::vector<std::string> ids;
    // (claim namespace, claim name, driver, pool, device): a claim two containers share is one.
    std::set<std::tuple<std::string, std::string, std::string, std::string, std::string>> seen;
    for (const auto& container : pod.containers()) {
      for (const auto& devices : container.devices()) {
        if (!filter.Matches(devices.resource_name())) continue;
        ids.insert(ids.end(), devices.device_ids().begin(), devices.device_ids().end());
      }
      for (const auto& claim : container.dynamic_resources()) {
        for (const auto& r : claim.claim_resources()) {
          std::vector<std::string> cdi;
          for (const auto& c : r.cdi_devices()) cdi.push_back(c.name());
          std::string driver = r.driver_name();
          if (driver.empty() && !cdi.empty()) driver = DriverOfCdiName(cdi.front());
          if (!filter.MatchesDraDriver(driver)) continue;
          const std::string device =
              r.device_name().empty() && !cdi.empty() ? cdi.front() : r.device_name();
          if (!seen.emplace(claim.claim_namespace(), claim.claim_name(), driver, r.pool_name(),
                            device)
                   .second) {
            continue;
          }
          ids.push_back(DraDeviceId(driver, r.device_name(), cdi));
        }
      }
    }
    if (!ids.empty()) {
      auto& slot = out[PodKey{pod.namespace_(), pod.name()}];
      slot.insert(slot.end(), ids.begin(), ids.end());
    }
  }
  return out;
}

struct PodResourcesClient::Impl {
  std::unique_ptr<::v1::PodResourcesLister::Stub> stub;
};

PodResourcesClient::PodResourcesClient(PodResourcesClientOptions options)
    : options_(std::move(options)), impl_(std::make_unique<Impl>()) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options_.max_receive_bytes);
  impl_->stub = ::v1::PodResourcesLister::NewStub(
      grpc::CreateCustomChannel(options_.endpoint, grpc::InsecureChannelCredentials(), args));
}

PodResourcesClient::~PodResourcesClient() = default;

Result<PodGpuMap> PodResourcesClient::ListPodGpus() {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + options_.timeout);
  ::v1::ListPodResourcesRequest req;
  ::v1::ListPodResourcesResponse resp;
  const grpc::Status s = impl_->stub->List(&ctx, req, &resp);
  if (!s.ok()) {
    const std::string msg = "PodResources List on " + options_.endpoint + ": " + s.error_message();
    switch (s.error_code()) {
      case grpc::StatusCode::UNAVAILABLE:
        return Unavailable(msg);
      case grpc::StatusCode::DEADLINE_EXCEEDED:
        return Status(StatusCode::kDeadlineExceeded, msg);
      case grpc::StatusCode::UNIMPLEMENTED:
        return Unimplemented(msg);
      case grpc::StatusCode::PERMISSION_DENIED:
        return PermissionDenied(msg);
      default:
        return Internal(msg);
    }
  }
  return ExtractPodGpus(resp, options_.filter);
}

}  // namespace feedguard::agent
