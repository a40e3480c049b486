// reasons.h — every stable reason code feedguard reports, defined once.
//
// A reason is a CamelCase word (the CRD's pattern for `status.failures[].reason`, ≤ 128 chars)
// that travels from where it is decided to where a user reads it:
//   agent planner / enforcer → PodReport.reason (NodeReport) → controller status →
//   FencePolicy.status.failures[].reason, Events, `feedguard-agent apply` JSON.
// Pick the one that tells an operator what to do; add new ones here, never as a literal.
//
// Example:
//   w.Fail(reason::kCgroupNotFound, "no cgroup at " + dir);
#pragma once

namespace feedguard::reason {

// ---- enforcer: writing a pod's fence ------------------------------------------------------
inline constexpr char kCgroupNotFound[] = "CgroupNotFound";          // pod/container dir absent
inline constexpr char kKernelLacksCpuIdle[] = "KernelLacksCpuIdle";  // kernel < 5.15: use Weight
inline constexpr char kCpusetNotSubset[] = "CpusetNotSubset";        // outside the parent's set
inline constexpr char kCpusetBusy[] = "CpusetBusy";                  // would strand a child (EBUSY)
inline constexpr char kValueRejected[] = "ValueRejected";  // EINVAL/ERANGE (e.g. v1 quota)
inline constexpr char kWriteFailed[] = "WriteFailed";
inline constexpr char kVerifyFailed[] = "VerifyFailed";          // read back another value
inline constexpr char kCheckpointFailed[] = "CheckpointFailed";  // originals could not be saved
inline constexpr char kProtectedPod[] = "ProtectedPod";          // a rail: never written
inline constexpr char kNotPodCgroup[] = "NotPodCgroup";          // resolved to a kubelet-owned dir
inline constexpr char kContested[] = "Contested";                // another writer keeps rewriting
inline constexpr char kDryRun[] = "DryRun";                      // planned, not written
// kubelet is resizing the pod in place: its Idle fence is lifted until kubelet's write lands.
inline constexpr char kResizePending[] = "ResizePending";
inline constexpr char kDuplicatePod[] = "DuplicatePod";  // listed twice; first kept
// Revert outcomes.
inline constexpr char kRestored[] = "Restored";
inline constexpr char kAlreadyOriginal[] = "AlreadyOriginal";
inline constexpr char kOverwrittenByOther[] = "OverwrittenByOther";
inline constexpr char kGone[] = "Gone";  // the cgroup no longer exists (pod deleted)
inline constexpr char kRevertFailed[] = "RevertFailed";

// ---- planner: placing trainers, choosing neighbour fences ----------------------------------
inline constexpr char kGPUNotFound[] = "GPUNotFound";
inline constexpr char kGPULocalityUnknown[] = "GPULocalityUnknown";
inline constexpr char kNUMAFallback[] = "NUMAFallback";
inline constexpr char kNoGPUs[] = "NoGPUs";
inline constexpr char kNoFreeCore[] = "NoFreeCore";
inline constexpr char kNotEnoughCores[] = "NotEnoughCores";
inline constexpr char kNotEnoughLocalCores[] = "NotEnoughLocalCores";
inline constexpr char kNoCpusForNeighbours[] = "NoCpusForNeighbours";
inline constexpr char kCpuManagerOwnsPod[] = "CpuManagerOwnsPod";
inline constexpr char kTrainerAndNeighbour[] = "TrainerAndNeighbour";
inline constexpr char kPolicyNotFound[] = "PolicyNotFound";
// Trainers sharing one GPU (MPS, time-slicing, a shared ResourceClaim) whose sizes do not all fit
// on the GPU's NUMA node(s): its free local cores are split between them, fewer than asked.
inline constexpr char kGPUSharedSplit[] = "GPUSharedSplit";
// ... and too few free local cores for this one to get even one of them.
inline constexpr char kGPUSharedNoLocalCore[] = "GPUSharedNoLocalCore";
// An incumbent on its GPUs' node(s) holds fewer cores than its policy asks (kept, not moved); it
// grows in place when room appears.
inline constexpr char kFewerCoresThanAsked[] = "FewerCoresThanAsked";

// ---- controller: a node as a whole ---------------------------------------------------------
inline constexpr char kAgentNotConnected[] = "AgentNotConnected";
inline constexpr char kFenceRejected[] = "FenceRejected";  // the agent NACKed the fence
inline constexpr char kAgentReported[] = "AgentReported";  // an agent's reason outside the pattern
// A message of the node's agent did not parse (e.g. a string that is not UTF-8): its stream is
// ended each time, so nothing it says (reports, ACKs) is trusted until a report parses again.
inline constexpr char kAgentMessageUnreadable[] = "AgentMessageUnreadable";
// The node's fence is bigger than its agent reads (wire_limits.h): not sent; the node keeps its
// last fence.
inline constexpr char kFenceTooLarge[] = "FenceTooLarge";
// A pod has more containers than a fence carries ids for: fenced at the pod level only.
inline constexpr char kTooManyContainers[] = "TooManyContainers";

// ---- controller: the TrainersUnrestricted condition of a policy ----------------------------
// Neither trainers.namespaceSelector nor trainers.requireGPU: whoever can create a pod can label
// it a trainer and have its node's neighbours fenced for it (pod labels are the pod author's).
inline constexpr char kAnyPodAuthorCanClaimTrainer[] = "AnyPodAuthorCanClaimTrainer";
inline constexpr char kTrainersRestricted[] = "TrainersRestricted";

// ---- controller: the CrossTier condition of a policy ---------------------------------------
// Idle/Weight-fenced Burstable or BestEffort neighbours beside a trainer of another QoS tier:
// the fence ranks them only among their own tier's siblings (kubelet's tier weights decide
// between tiers). Cpuset or Quota bound them across tiers.
inline constexpr char kNeighboursInOtherQoSTier[] = "NeighboursInOtherQoSTier";
inline constexpr char kSameQoSTier[] = "SameQoSTier";

}  // namespace feedguard::reason
