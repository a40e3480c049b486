// planner.h — the pure planning function: topology + NodeFence (+ rails, + last plan) → Plan.
//
// MakePlan has no side effects and no hidden inputs: the same PlanInput on the same Topology gives
// the same Plan, byte for byte. Decisions it makes (docs/DESIGN.md §3, §4):
//
// Trainer size. `cores` if set (it wins over cores_per_gpu), else cores_per_gpu × #GPU devices the
//   pod got. Every device id counts once: a time-sliced replica ("<uuid>::<n>") or a MIG slice is
//   one unit of GPU the pod asked for, so a pod holding two replicas of one GPU gets 2×
//   cores_per_gpu — its feeders are sized by its share, while locality is that of the physical GPU.
//   WHOLE_CORES counts physical cores (SMT siblings always together); THREADS counts hardware
//   threads (siblings of one core are still filled together when possible).
// Locality. The preferred NUMA nodes are those of the pod's GPUs (by PCI address in Topology);
//   cores are split over them in proportion to the GPUs on each. A machine with one NUMA node is
//   all-local (memory-only nodes do not count). A GPU local to several nodes (sub-NUMA clusters)
//   counts on each. A GPU with no local node has unknown locality: PREFER places anywhere
//   (Diagnostic "GPULocalityUnknown"), REQUIRE fails. PREFER falls back to other nodes, nearest
//   first by the OS distance matrix (then same package, then id) ("NUMAFallback");
//   REQUIRE fails the trainer ("NotEnoughLocalCores"); IGNORE best-fits one node, else spreads.
//   mems = every NUMA node local to the chosen cores: their DRAM node and the memory-only nodes
//   beside it (HBM/MCDRAM, CXL, a GPU's memory), not only the nearest CPU node.
// Stability. Trainers placed in `previous` keep exactly their CPUs while still valid (same size,
//   still usable, locality still acceptable); they are placed first, in priority order, so adding
//   or removing a trainer never moves another. `previous` survives agent restarts (the engine
//   rebuilds it from the checkpoint, PreviousPlanFromCpusets). The one move: a PreferGPULocal
//   incumbent off its GPUs' node(s) goes back once the whole trainer fits there (before
//   newcomers); while it is off-node every plan carries its "NUMAFallback" diagnostic. A newcomer
//   never evicts an incumbent, even one of lower priority: it gets "NotEnoughCores" until cores
//   free up. Newcomers take the lowest free cores of their node(s).
// Rails (no policy overrides them). Reserved CPUs, the static CPU manager's exclusive CPUs and
//   CPUs outside Topology::allowed_cpus are off-limits (a core with any such thread is never a
//   free whole core); at least one whole free core outside them always remains for everyone else; a
//   pod that owns CPU-manager CPUs is not pinned by us ("CpuManagerOwnsPod"); a protected pod
//   (PlanInput::protected_pods) named as a trainer is neither pinned nor weighted and takes no
//   core from neighbours' cpusets ("ProtectedPod"), even as an incumbent. When trainers do not
//   fit, the last by (priority desc, namespace, name) get "NotEnoughCores" and stay unpinned
//   (their neighbours are still fenced).
// Trainer weight. A policy's trainer_cpu.weight (> 0) is copied to each of its trainers, pinned
//   or not (a CPU-manager pod too): the pod cgroup's weight while it is protected.
// DryRun. Enforced trainers are placed before dry-run ones, so a dry-run policy never takes cores
//   from an enforced one; neighbour cpusets/quotas count only enforced trainers' cores. Entries
//   carry dry_run; plan.dry_run is true when every policy in the fence is DryRun.
// Neighbours. IDLE → idle=1; WEIGHT → weight=1; CPUSET → allowed − enforced trainers − off-limits
//   (empty → "NoCpusForNeighbours", falls back to IDLE); QUOTA → per policy, max_cpu_percent
//   (default 75) of the CPUs left after trainers, split in proportion to CPU requests (equally
//   when all are 0), at least 1000 us per 100000 us, never above the pod's own limit. A pod that
//   is both trainer and neighbour is a trainer ("TrainerAndNeighbour").
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/planner/cpu_manager_state.h"
#include "agent/planner/plan.h"
#include "agent/topology/gpu_ids.h"
#include "agent/topology/topology.h"
#include "feedguard/v1/nodefence.pb.h"

namespace feedguard::agent {

struct PlanInput {
  feedguard::v1::NodeFence fence;
  // Pod uid → the GPU devices it got, with their PCI addresses (GpuIdResolver::ResolveAll). A
  // trainer absent here falls back to Trainer.gpu_ids with unknown PCI addresses.
  std::map<std::string, std::vector<ResolvedGpu>> trainer_gpus;
  CpuSet reserved_cpus;  // kubelet reservedSystemCPUs / system CPUs
  CpuManagerState cpu_manager;
  std::optional<Plan> previous;
  // Pods no fence may pin (the agent itself, kube-system, system-*-critical): named as trainers
  // they reserve no core and get no weight ("ProtectedPod"); the enforcer refuses them too.
  PodRails protected_pods;
};

PodIdentity ToPodIdentity(const feedguard::v1::PodRef& pod);

Plan MakePlan(const Topology& topology, const PlanInput& input);

// The previous plan as a restarted agent knows it: pod uid → the cpuset last written for it (the
// enforcer's checkpoint). Only uid and cpus are set; MakePlan treats them as incumbents (kept
// while still valid, moved back to their GPUs' node when PreferGPULocal and room appears).
Plan PreviousPlanFromCpusets(const std::map<std::string, CpuSet>& cpus_by_pod_uid);

// Every field of a Plan as JSON (for `feedguard-agent plan` and for comparing plans): CPU sets
// in kernel list format, unset optional knobs omitted, order as in the Plan.
nlohmann::json PlanToJson(const Plan& plan);

}  // namespace feedguard::agent
