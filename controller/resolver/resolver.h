// resolver.h — which pods on a node are trainers and which are neighbours, under which policy:
// FencePolicies + the node's pods → that node's desired NodeFence (docs/DESIGN.md §2, §3).
//
// Pure and per node, so the controller recomputes only the nodes whose inputs changed.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "controller/policy/fence_policy.h"
#include "controller/resolver/cluster_objects.h"
#include "feedguard/common/enum_names.h"
#include "feedguard/common/wire_limits.h"
#include "feedguard/v1/nodefence.pb.h"

namespace feedguard::controller {

// The spec's enums (fence_policy.h) and their twins on the wire, in the NodeFence's
// PolicyOptions.
inline constexpr EnumTable<PolicyMode, v1::Mode, 2> kModeWire{
    {{PolicyMode::kEnforce, v1::ENFORCE}, {PolicyMode::kDryRun, v1::DRY_RUN}}};
static_assert(EnumTableComplete(kModeWire));
inline constexpr EnumTable<CpuPlacement, v1::Placement, 2> kPlacementWire{
    {{CpuPlacement::kWholeCores, v1::WHOLE_CORES}, {CpuPlacement::kThreads, v1::THREADS}}};
static_assert(EnumTableComplete(kPlacementWire));
inline constexpr EnumTable<NumaMode, v1::NumaPolicy, 3> kNumaWire{
    {{NumaMode::kPreferGpuLocal, v1::PREFER_GPU_LOCAL},
     {NumaMode::kRequireGpuLocal, v1::REQUIRE_GPU_LOCAL},
     {NumaMode::kIgnore, v1::IGNORE}}};
static_assert(EnumTableComplete(kNumaWire));
inline constexpr EnumTable<NeighbourFenceMode, v1::NeighbourFenceKind, 4> kNeighbourFenceWire{
    {{NeighbourFenceMode::kIdle, v1::IDLE},
     {NeighbourFenceMode::kWeight, v1::WEIGHT},
     {NeighbourFenceMode::kCpuset, v1::CPUSET},
     {NeighbourFenceMode::kQuota, v1::QUOTA}}};
static_assert(EnumTableComplete(kNeighbourFenceWire));

// Safety rails no FencePolicy can override.
struct Rails {
  // Pods of these priority classes are never trainers' victims nor trainers.
  std::vector<std::string> protected_priority_classes = {"system-node-critical",
                                                         "system-cluster-critical"};
  // The agent's own pods: namespace + selector (never fenced).
  std::string agent_namespace = "feedguard-system";
  LabelSelector agent_selector;  // empty = every pod in agent_namespace
};

// A pod that two policies wanted; `winner` took it.
struct Conflict {
  std::string pod;  // namespace/name
  std::string winner;
  std::string loser;
};

// What one policy got on one node.
struct PolicyOnNode {
  bool node_matched = false;
  int trainers = 0;
  int neighbours = 0;
  std::vector<Conflict> lost;  // pods this policy wanted but a higher one took
  // Neighbours an Idle/Weight fence cannot rank below this policy's trainers on the node: a
  // Burstable or BestEffort pod beside a trainer of another QoS tier. cpu.idle / cpu.weight
  // order a pod among its own tier's siblings only; between tiers kubelet's tier weights decide.
  int cross_tier_neighbours = 0;
  std::string cross_tier_example;  // "ns/neighbour (Burstable) vs trainer ns/name (Guaranteed)"
  // This policy's pods whose container ids were left out of the fence (FenceLimits): fenced at
  // the pod level only (container cgroups are not written one by one).
  int pods_over_container_cap = 0;
  std::string over_container_cap_example;  // "ns/name (6000 containers)"
  // Set by the reconciler, not the resolver: why the node's newest fence was not sent (it was
  // bigger than the agents accept); the node keeps its last fence and counts as failed.
  std::string fence_error;
};

// What one NodeFence may carry (feedguard/common/wire_limits.h).
struct FenceLimits {
  // Container ids per pod; a pod with more goes without them (pod-level fence only) and is
  // counted in PolicyOnNode::pods_over_container_cap.
  size_t max_containers_per_pod = kMaxFenceContainersPerPod;
  // GPU pods named in the fence's observe list (docs/DESIGN.md §4b), the first by
  // namespace/name; 0 turns observation off (the controller's --observe=false).
  size_t max_observed_pods = kMaxObservedPodsPerNode;
};

struct NodeResolution {
  feedguard::v1::NodeFence fence;                // version left 0: the caller versions it
  std::map<std::string, PolicyOnNode> policies;  // by policy name, every policy given
  size_t gpu_pods_not_observed = 0;              // beyond FenceLimits::max_observed_pods
};

// `policies` must be the valid, non-deleting policies (the controller filters Invalid ones and
// those being deleted: their absence makes agents revert). `namespaces`: name → labels.
NodeResolution ResolveNode(const NodeInfo& node, const std::vector<const PodInfo*>& pods,
                           const std::vector<const FencePolicy*>& policies,
                           const std::map<std::string, Labels>& namespaces, const Rails& rails,
                           const FenceLimits& limits = {});

}  // namespace feedguard::controller
