// policy_status.h — FencePolicy.status from what the resolver decided and what agents reported.
//
// Aggregate and bounded (docs/DESIGN.md §3): counters plus at most kMaxFailures failure entries, so
// a 5,000-node cluster fits in one object. Pure: the controller decides when to write it.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "controller/policy/fence_policy.h"
#include "controller/resolver/resolver.h"
#include "feedguard/v1/nodefence.pb.h"

namespace feedguard::controller {

inline constexpr size_t kMaxFailures = 20;
// A trainer whose cgroup's PSI "some avg10" stays above this while fenced is reported starved.
inline constexpr double kStarvedPressurePercent = 20.0;
// ... unless its agent reads its GPUs' utilisation (NVML) and they are at least this busy: a busy
// GPU is fed, whatever the CPU pressure.
inline constexpr double kUnderBusyGpuPercent = 60.0;

// Starved: the trainer's feeders wait for CPU (PSI some avg10 > kStarvedPressurePercent) and,
// where its GPU busy % is known (PodReport.gpus_sampled > 0), its GPUs are under-busy
// (< kUnderBusyGpuPercent). Without NVML on the node: CPU pressure alone.
bool TrainerStarved(const feedguard::v1::PodReport& pod);

// What the controller knows of one node's agent.
struct AgentView {
  bool connected = false;
  bool stale = false;            // no stream for longer than the grace period
  uint64_t desired_version = 0;  // latest NodeFence version for the node
  uint64_t acked_version = 0;
  std::string nack_error;                             // last NACK for desired_version, if any
  const feedguard::v1::NodeReport* report = nullptr;  // last report, may be null
};

struct PolicyStatusInput {
  const FencePolicy* policy = nullptr;
  std::vector<FieldError> invalid;               // non-empty → Invalid, nothing enforced
  std::map<std::string, PolicyOnNode> per_node;  // node → what this policy got there
  std::map<std::string, AgentView> agents;       // node → agent state (absent = no agent)
  nlohmann::json previous_status;                // to keep lastTransitionTime / since stable
  std::chrono::system_clock::time_point now;
};

nlohmann::json ComputePolicyStatus(const PolicyStatusInput& in);

// RFC 3339 UTC with seconds, as metav1.Time serialises.
std::string Rfc3339(std::chrono::system_clock::time_point t);

}  // namespace feedguard::controller
