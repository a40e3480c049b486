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

#include "controller/fence/agent_view.h"
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

// What one policy's status reads of one node's report: counters, and the pods the agent could
// not enforce. Taken from each report as it arrives (TallyReport); the controller keeps this,
// never the report (a 30-pod NodeReport is ~13 KB parsed, ~0.3 KB per pod across a cluster).
struct ReportTally {
  int protected_trainers = 0;  // trainers enforced, or planned (DryRun)
  int starved = 0;             // of those enforced, TrainerStarved
  int fenced = 0;              // neighbours enforced, or planned (DryRun)
  int gpu_sampled = 0;         // enforced trainers whose agent reads their GPUs (NVML)
  double gpu_busy_sum = 0;     // their GPU busy %, each clamped to [0, 100]
  double gpu_busy_min = 100;
  struct Failure {
    std::string reason;   // a CamelCase reason (SafeReason), "NotEnforced" when none was given
    std::string message;  // "namespace/name: what the agent said", bounded, valid UTF-8
    bool operator==(const Failure&) const = default;
  };
  std::vector<Failure> failures;  // pods not enforced, in report order

  // Equal as far as a status can tell (GPU busy compared in the status's 5 % steps): a report
  // that changes nothing else does not make the policy's status be recomputed.
  bool SameForStatus(const ReportTally& other) const;
};
using ReportTallies = std::map<std::string, ReportTally>;  // by policy name

// One tally per policy named in the report's pods.
ReportTallies TallyReport(const feedguard::v1::NodeReport& report);

// What a policy's status reads of one node: its agent (agent_view.h) and the policy's pods in the
// node's last report.
struct AgentOnNode : AgentView {
  // Null: no report, or none of the policy's pods in it.
  const ReportTally* tally = nullptr;
};

struct PolicyStatusInput {
  const FencePolicy* policy = nullptr;
  std::vector<FieldError> invalid;               // non-empty → Invalid, nothing enforced
  std::map<std::string, PolicyOnNode> per_node;  // node → what this policy got there
  std::map<std::string, AgentOnNode> agents;     // node → agent state (absent = no agent)
  nlohmann::json previous_status;                // to keep lastTransitionTime / since stable
  std::chrono::system_clock::time_point now;
};

nlohmann::json ComputePolicyStatus(const PolicyStatusInput& in);

// RFC 3339 UTC with seconds, as metav1.Time serialises.
std::string Rfc3339(std::chrono::system_clock::time_point t);

}  // namespace feedguard::controller
