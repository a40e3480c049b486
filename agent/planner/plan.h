// plan.h — what the agent intends to write on a node: the planner's output, the enforcer's input.
//
// A Plan is pure data. Values are cgroup-version neutral (weights on the v2 1..10000 scale,
// quotas in microseconds); the cgroup layer translates them for v1.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/pod/pod.h"
#include "common/cpuset.h"
#include "feedguard/common/neighbour_fence.h"

namespace feedguard::agent {

using feedguard::NeighbourFence;  // feedguard/common/neighbour_fence.h

// Something the planner could not do as asked, and why. `reason` is a stable CamelCase code
// that ends up in FencePolicy.status.failures (e.g. "NotEnoughCores", "GPUNotFound").
struct Diagnostic {
  std::string pod_uid;  // empty for node-wide diagnostics
  std::string policy;
  std::string reason;
  std::string message;
};

struct TrainerPlacement {
  PodIdentity pod;
  std::string policy;
  std::vector<std::string> gpu_ids;
  // Empty `cpus` = not pinned (the policy asked for no cores, or none could be found).
  CpuSet cpus;
  CpuSet mems;
  bool gpu_local = false;  // every chosen core is on a NUMA node local to the pod's GPUs
  // The pod cgroup's CPU weight while protected (v2 scale 1..10000); unset = kubelet's is kept.
  std::optional<uint64_t> weight;
  // The pod's policy is DryRun: planned and reported, but the enforcer writes nothing for it.
  bool dry_run = false;
  // Why it sits where it sits, for operators: a CamelCase code, ": ", then the details, e.g.
  // "GPULocal: NUMA node 0, local to its GPUs", "NUMAFallback: ... node 3 at distance 12",
  // "IncumbentKept: ...", "ReturnedToGPUNode: ...". Empty when not pinned (see diagnostics).
  std::string why;
};

struct NeighbourAction {
  PodIdentity pod;
  std::string policy;
  NeighbourFence fence = NeighbourFence::kIdle;
  // Exactly the knobs to write; unset ones are left alone.
  std::optional<bool> idle;
  std::optional<uint64_t> weight;  // v2 scale 1..10000
  std::optional<CpuQuota> quota;
  std::optional<CpuSet> cpus;
  // The pod's policy is DryRun: planned and reported, but the enforcer writes nothing for it.
  bool dry_run = false;
};

struct Plan {
  uint64_t fence_version = 0;
  bool dry_run = false;
  std::vector<TrainerPlacement> trainers;
  std::vector<NeighbourAction> neighbours;
  std::vector<Diagnostic> diagnostics;
  // CPUs no neighbour fence may take and no trainer may get (reserved + static CPU manager).
  CpuSet off_limits;
};

}  // namespace feedguard::agent
