// agent_view.h — what the controller's loop and its statuses know of one node's agent.
//
// The one snapshot of an agent outside the gRPC side: the Distributor keeps more (its hello,
// stream counters, the last report's header: distributor.h AgentState) and hands this out through
// FenceSink::GetAgent; a policy's status reads it per node (policy_status.h).
#pragma once

#include <cstdint>
#include <string>

namespace feedguard::controller {

struct AgentView {
  bool connected = false;
  bool stale = false;            // no stream for longer than the grace period
  uint64_t desired_version = 0;  // latest NodeFence version for the node
  uint64_t acked_version = 0;
  std::string nack_error;  // the agent's NACK of desired_version, if any
  // The agent's last message did not parse (and no readable report came since): what of it.
  // Non-empty: the node is failing, never enforced.
  std::string unreadable_error;
};

}  // namespace feedguard::controller
