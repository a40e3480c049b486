// fence_policy.h — the FencePolicy custom resource (feedguard.io/v1alpha1) as a C++ value:
// parsed from the API server's JSON, then checked for what the CRD schema cannot express.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "controller/policy/label_selector.h"
#include "feedguard/common/enum_names.h"
#include "feedguard/common/neighbour_fence.h"
#include "feedguard/common/status.h"

namespace feedguard::controller {

inline constexpr char kFencePolicyGroup[] = "feedguard.io";
inline constexpr char kFencePolicyVersion[] = "v1alpha1";
inline constexpr char kFencePolicyResource[] = "fencepolicies";
inline constexpr char kFencePolicyKind[] = "FencePolicy";
// Set on every FencePolicy so deletion waits until every node reverted its fences.
inline constexpr char kFencePolicyFinalizer[] = "feedguard.io/revert-fences";
// spec.neighbours.maxCPU of a Quota fence when the policy does not set it.
inline constexpr int32_t kDefaultQuotaMaxCpuPercent = 75;
// spec.trainers.requireGPU when the policy does not set it.
inline constexpr bool kDefaultTrainersRequireGpu = false;

// The spec's enums. The wire (proto/feedguard/v1) has a twin of each, with an UNSPECIFIED zero
// these never take; the resolver maps one to the other (resolver.h).
enum class PolicyMode { kEnforce, kDryRun };
enum class CpuPlacement { kWholeCores, kThreads };
enum class NumaMode { kPreferGpuLocal, kRequireGpuLocal, kIgnore };
// spec.neighbours.fence: the agent plans by the same enum (feedguard/common/neighbour_fence.h).
using NeighbourFenceMode = NeighbourFence;

// Their spellings in the CRD (and kNeighbourFenceNames).
inline constexpr EnumNames<PolicyMode, 2> kPolicyModeNames{
    {{PolicyMode::kEnforce, "Enforce"}, {PolicyMode::kDryRun, "DryRun"}}};
inline constexpr EnumNames<CpuPlacement, 2> kCpuPlacementNames{
    {{CpuPlacement::kWholeCores, "WholeCores"}, {CpuPlacement::kThreads, "Threads"}}};
inline constexpr EnumNames<NumaMode, 3> kNumaModeNames{
    {{NumaMode::kPreferGpuLocal, "PreferGPULocal"},
     {NumaMode::kRequireGpuLocal, "RequireGPULocal"},
     {NumaMode::kIgnore, "Ignore"}}};
static_assert(EnumTableComplete(kPolicyModeNames) && EnumTableComplete(kCpuPlacementNames) &&
              EnumTableComplete(kNumaModeNames));

struct TrainerSpec {
  LabelSelector namespace_selector;
  LabelSelector pod_selector;
  int32_t cores_per_gpu = 0;  // 0 = unset
  int32_t cores = 0;          // 0 = unset
  CpuPlacement placement = CpuPlacement::kWholeCores;
  NumaMode numa = NumaMode::kPreferGpuLocal;
  int32_t weight = 0;  // cgroup v2 cpu.weight scale 1..10000; 0 = unset (kubelet's weight kept)
  // spec.trainers.requireGPU: only pods that request a GPU (nvidia.com/gpu or a MIG profile in
  // their limits) can be trainers, so a tenant who copies the trainer label onto an ordinary pod
  // gains nothing. See docs/DESIGN.md "Who can become a trainer".
  bool require_gpu = kDefaultTrainersRequireGpu;
};

struct NeighbourSpec {
  LabelSelector pod_selector;
  std::vector<std::string> exclude_namespaces;
  std::vector<std::string> exclude_priority_classes;
  NeighbourFenceMode fence = NeighbourFenceMode::kIdle;
  // Quota only: the cap on all neighbours together, percent of the CPUs left after trainers
  // (kDefaultQuotaMaxCpuPercent when absent). 0 for the other fences (maxCPU is rejected there).
  int32_t max_cpu_percent = 0;
};

struct FencePolicy {
  std::string name;
  std::string uid;
  std::string resource_version;
  int64_t generation = 0;
  bool deleting = false;  // metadata.deletionTimestamp set
  std::vector<std::string> finalizers;

  int32_t priority = 0;
  PolicyMode mode = PolicyMode::kEnforce;
  LabelSelector node_selector;
  TrainerSpec trainers;
  NeighbourSpec neighbours;

  bool HasFinalizer() const;
};

// A problem with one field: `field` is the JSON path ("spec.trainers.cpu.cores").
struct FieldError {
  std::string field;
  std::string message;
};

// Parses a FencePolicy object. Never throws: every member is type-checked and validated as the
// CRD would (types, enums, ranges, required fields, label syntax, list sizes), because the
// installed CRD may be older or looser than this code. Problems are returned as field errors in
// `errors` ("spec.trainers.cpu.cores: must be between 1 and 1024"); an explicit zero or
// out-of-range value is an error, never "unset". The result is still usable for its metadata.
struct ParsedPolicy {
  FencePolicy policy;
  std::vector<FieldError> errors;
};
ParsedPolicy ParseFencePolicy(const nlohmann::json& object);

// Semantic checks beyond the CRD schema (e.g. a selector that can match nothing useful).
std::vector<FieldError> ValidateFencePolicy(const FencePolicy& policy);

// "spec.x: message; spec.y: message".
std::string JoinFieldErrors(const std::vector<FieldError>& errors);

// Parses a percentage "75%" (1..100) or a bare integer; error message names `field`.
Result<int32_t> ParsePercent(const nlohmann::json& value, const std::string& field);

}  // namespace feedguard::controller
