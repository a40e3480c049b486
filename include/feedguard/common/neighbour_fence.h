// neighbour_fence.h — how a neighbour is held back from trainers' CPUs (FencePolicy
// spec.neighbours.fence), one enum and one spelling for the controller and the agent.
//
// The controller parses it from a FencePolicy; the agent plans by it and spells it in its plan's
// JSON. On the wire between them it is feedguard.v1.NeighbourFenceKind (whose UNSPECIFIED zero
// this never takes).
#pragma once

#include <string_view>

#include "feedguard/common/enum_names.h"

namespace feedguard {

enum class NeighbourFence { kIdle, kWeight, kCpuset, kQuota };

// The CRD's spelling: "Idle" | "Weight" | "Cpuset" | "Quota".
inline constexpr EnumNames<NeighbourFence, 4> kNeighbourFenceNames{
    {{NeighbourFence::kIdle, "Idle"},
     {NeighbourFence::kWeight, "Weight"},
     {NeighbourFence::kCpuset, "Cpuset"},
     {NeighbourFence::kQuota, "Quota"}}};
static_assert(EnumTableComplete(kNeighbourFenceNames));

}  // namespace feedguard
