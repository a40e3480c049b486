// node_engine.h — the node-side pipeline in one object: NodeFence → GPUs → Plan → cgroup writes
// → NodeReport. Used by the agent daemon (as the stream client's FenceApplier) and by the
// `feedguard-agent plan|apply|revert` commands.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "agent/cgroup/cgroups.h"
#include "agent/client/fence_applier.h"
#include "agent/enforcer/enforcer.h"
#include "agent/engine/decision_log.h"
#include "agent/gpu/nvml.h"
#include "agent/observe/observe_loop.h"
#include "agent/planner/planner.h"
#include "agent/topology/gpu_ids.h"
#include "agent/topology/podresources_client.h"
#include "agent/topology/topology.h"
#include "feedguard/v1/nodefence.pb.h"

namespace spdlog {
class logger;
}

namespace feedguard::agent {

struct NodeEngineOptions {
  Topology topology;
  cgroup::CgroupsPtr cgroups;
  EnforcerPtr enforcer;
  // Which GPUs each trainer got. Null: only NodeFence.trainers[].gpu_ids are used.
  PodResourcesSourcePtr pod_resources;
  std::shared_ptr<const GpuIdResolver> gpu_resolver;  // null: GPU ids stay unresolved
  // Each GPU's utilisation (NVML). Null: not reported (no NVML on this node).
  gpu::GpuMonitorPtr gpu_monitor;
  CpuSet reserved_cpus;
  // Pods never pinned (PlanInput::protected_pods); the enforcer's rail names the same pods.
  PodRails protected_pods;
  std::string cpu_manager_state_path;  // "" = no static CPU manager
  // The enforcer's state dir ("" = none). At construction the engine reads the checkpoint there
  // (read-only) and plans its first fence from the trainers' last written cpusets, so trainers
  // keep their cores across agent restarts and upgrades (LoadPreviousPlan).
  std::string state_dir;
  // Where each fence decision is said once (decision_log.h): info, warn for pods not fenced for
  // a reason to act on. Null: not logged (the local commands print their report instead).
  std::shared_ptr<spdlog::logger> decision_log;
  // The node's GPU pods observed with no policy (docs/DESIGN.md §4b): each Apply hands it the
  // fence's `observe` list, each report carries its observations. Null: observation off.
  std::shared_ptr<observe::ObserveLoop> observer;
};

class NodeEngine final : public FenceApplier {
 public:
  explicit NodeEngine(NodeEngineOptions options);

  // Plans without writing anything.
  Result<Plan> MakePlanFor(const feedguard::v1::NodeFence& fence);
  // Checks that every pod in the fence has its cgroups on this node; NotFound naming the pods
  // that do not. (The daemon reports such pods per pod instead; the CLI refuses the whole file.)
  Status CheckPodsExist(const feedguard::v1::NodeFence& fence) const;

  // FenceApplier: plan, enforce, report. The fence's `observe` list goes to the observer first
  // (whatever the plan's fate): observing writes nothing, so a fence that only names pods to
  // observe changes no file on the node.
  Result<feedguard::v1::NodeReport> Apply(const feedguard::v1::NodeFence& fence) override;
  // The last fence's report as the node holds it now: overwrite counts and contested pods, and,
  // while a pod's fence waits on kubelet (ResizePending: lifted for an in-place resize), the
  // node judged again against the last plan — the watcher puts such a fence back as soon as
  // kubelet's write lands, without a new fence version, and the report must say so then, not
  // at the next fence.
  std::optional<feedguard::v1::NodeReport> CurrentReport() override;

  // The full outcome of the last Apply (for the CLI's output).
  std::optional<ApplyReport> last_apply() const;
  // Unfences the node: restores every original still holding our value.
  ApplyReport RevertAll();
  // CPU time (seconds) pods received while fenced as neighbours, since this engine started: a
  // counter (never decreases). Each Apply and each call samples the fenced pods' usage counters
  // (cpuacct.usage on v1, cpu.stat usage_usec on v2) and adds what they grew by since the last
  // sample; a pod counts from the Apply that fenced it to the last sample before it was unfenced.
  double NeighbourCpuSeconds();

 private:
  feedguard::v1::NodeReport ToReport(const ApplyReport& r, const Plan& plan) const;
  // Each trainer's GPU busy % (NVML) and cpu.pressure avg10.
  void AddObservations(feedguard::v1::NodeReport* report) const;
  // The observer's pods (NodeReport.observations), replacing any the report held.
  void AddObservedPods(feedguard::v1::NodeReport* report) const;
  // Adds the growth of every fenced neighbour's (last_plan_'s) usage since the previous sample
  // to neighbour_cpu_ns_ and makes the neighbours of `next_plan` (null: none) the baselines.
  void SampleNeighbourUsageLocked(const Plan* next_plan);
  // Says what changed (decision_log.h); requires apply_mu_.
  void LogDecisions(const Plan& plan, const ApplyReport& r);

  NodeEngineOptions options_;
  // Serialises the enforcer's Applies and reverts (a fence, the report's re-judging, RevertAll):
  // a re-judged last plan must never land after a newer fence. Taken before mu_.
  std::mutex apply_mu_;
  DecisionLog decisions_;  // guarded by apply_mu_
  mutable std::mutex mu_;
  std::optional<Plan> last_plan_;     // guarded by mu_
  std::optional<Plan> restart_plan_;  // from the checkpoint, until the first Apply; guarded by mu_
  std::optional<ApplyReport> last_apply_;                 // guarded by mu_
  std::optional<feedguard::v1::NodeReport> last_report_;  // guarded by mu_
  std::map<std::string, uint64_t> neighbour_usage_ns_;    // uid → last sample; guarded by mu_
  uint64_t neighbour_cpu_ns_ = 0;                         // guarded by mu_
  // Trainer uid → PCI addresses of its physical GPUs, from the last plan; guarded by mu_.
  std::map<std::string, std::set<std::string>> trainer_bus_ids_;
};
using NodeEnginePtr = std::shared_ptr<NodeEngine>;

// The previous plan a restarted agent plans from: for each pod in the checkpoint, the value last
// written to its shallowest cpuset.cpus (PreviousPlanFromCpusets). Read-only, no lock taken (the
// checkpoint is replaced by atomic rename). nullopt when `state_dir` has no checkpoint yet.
Result<std::optional<Plan>> LoadPreviousPlan(const std::string& state_dir);
Plan PreviousPlanFromCheckpoint(const std::vector<CheckpointEntry>& entries);

// Reads a NodeFence from a JSON or YAML file (proto3 JSON mapping; unknown fields rejected).
Result<feedguard::v1::NodeFence> LoadNodeFenceFile(const std::string& path);
Result<feedguard::v1::NodeFence> ParseNodeFence(const std::string& text, const std::string& origin);

}  // namespace feedguard::agent
