// fence_sink.h — where the reconciler's desired fences go and where it learns what each node's
// agent did with them. The Distributor is the sink in production (controller/app's
// DistributorSink adapts it); tests and benchmarks bring their own.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "controller/fence/agent_view.h"
#include "controller/fence/wire_fence.h"
#include "feedguard/common/status.h"

namespace feedguard::controller {

class FenceSink {
 public:
  virtual ~FenceSink() = default;
  // The fence is shared, never copied: the reconciler keeps the same immutable, serialized
  // object (wire_fence.h).
  virtual Status SetDesired(NodeFencePtr fence) = 0;
  // nullopt: no agent ever connected for this node.
  virtual std::optional<AgentView> GetAgent(const std::string& node) const = 0;
  // The Node object is gone: drop everything held for it (ends its agent's stream).
  virtual void Forget(const std::string& node) { (void)node; }
  // The first full resolution ran: nodes are known from now on (streams of agents for nodes
  // without a Node object may be ended).
  virtual void OnNodesKnown() {}
};
using FenceSinkPtr = std::shared_ptr<FenceSink>;

}  // namespace feedguard::controller
