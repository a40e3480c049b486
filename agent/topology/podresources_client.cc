// podresources_client.cc — grpc++ client for kubelet's PodResourcesLister.List.
#include "agent/topology/podresources_client.h"

#include <grpcpp/grpcpp.h>

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

PodGpuMap ExtractPodGpus(const ::v1::ListPodResourcesResponse& response,
                         const GpuResourceFilter& filter) {
  PodGpuMap out;
  for (const auto& pod : response.pod_resources()) {
    std::vector<std::string> ids;
    for (const auto& container : pod.containers()) {
      for (const auto& devices : container.devices()) {
        if (!filter.Matches(devices.resource_name())) continue;
        ids.insert(ids.end(), devices.device_ids().begin(), devices.device_ids().end());
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
