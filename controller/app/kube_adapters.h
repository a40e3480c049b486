// kube_adapters.h — the reconciler's seams bound to real parts: PolicyWriter over the
// Kubernetes client (status subresource, finalizers, Events) and FenceSink over the
// Distributor.
#pragma once

#include <atomic>
#include <memory>

#include "controller/distributor/distributor.h"
#include "controller/kube/client.h"
#include "controller/kube/events.h"
#include "controller/reconciler/reconciler.h"

namespace feedguard::controller {

kube::Gvr FencePolicyGvr();

class KubePolicyWriter final : public PolicyWriter {
 public:
  KubePolicyWriter(kube::ClientPtr client, std::shared_ptr<kube::EventRecorder> events)
      : client_(std::move(client)), events_(std::move(events)) {}
  Status WriteStatus(const std::string& name, const nlohmann::json& status) override;
  Status AddFinalizer(const std::string& name) override;
  Status RemoveFinalizer(const std::string& name) override;
  void Event(const std::string& policy, const std::string& type, const std::string& reason,
             const std::string& message) override;

 private:
  // GET, edit, PUT with resourceVersion; retried on conflict.
  Status EditFinalizers(const std::string& name, bool add);
  kube::ClientPtr client_;
  std::shared_ptr<kube::EventRecorder> events_;
};

// Forwards to a Distributor that may be started after the reconciler exists.
class DistributorSink final : public FenceSink {
 public:
  void Attach(Distributor* d) { distributor_.store(d); }
  Status SetDesired(NodeFencePtr fence) override;
  std::optional<AgentView> GetAgent(const std::string& node) const override;
  void Forget(const std::string& node) override;
  void OnNodesKnown() override;

 private:
  std::atomic<Distributor*> distributor_{nullptr};
};

}  // namespace feedguard::controller
