// conditions.h — FencePolicy.status.conditions: their types, reading them back from whatever
// status the API server held (a loose CRD: every step type-checked), building them, the two
// edits the controller makes on top of a computed status (the off switch's Suspended, a deleting
// policy's Reverting), and the Events their transitions call for.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "controller/policy/fence_policy.h"
#include "feedguard/common/enum_names.h"

namespace feedguard::controller {

enum class ConditionType : uint8_t {
  kInvalid,
  kReady,
  kDegraded,
  kTrainersUnrestricted,
  kConflicting,
  kCrossTier,
  kSuspended,
  kReverting,
};
inline constexpr EnumNames<ConditionType, 8> kConditionTypeNames{{
    {ConditionType::kInvalid, "Invalid"},
    {ConditionType::kReady, "Ready"},
    {ConditionType::kDegraded, "Degraded"},
    {ConditionType::kTrainersUnrestricted, "TrainersUnrestricted"},
    {ConditionType::kConflicting, "Conflicting"},
    {ConditionType::kCrossTier, "CrossTier"},
    {ConditionType::kSuspended, "Suspended"},
    {ConditionType::kReverting, "Reverting"},
}};
static_assert(EnumTableComplete(kConditionTypeNames));
constexpr std::string_view ConditionTypeName(ConditionType t) {
  return NameOf(kConditionTypeNames, t, "Unknown");
}

// The condition of type `t` in `status`; null when there is none.
const nlohmann::json* FindCondition(const nlohmann::json& status, ConditionType t);
// Its status ("True", "False"; "" when absent or no string) and message ("" likewise).
std::string ConditionStatus(const nlohmann::json& status, ConditionType t);
std::string ConditionMessage(const nlohmann::json& status, ConditionType t);
// A metav1.Condition. lastTransitionTime is kept from `previous` when the condition had the
// same status there, else `now`. The message is made safe and bounded.
nlohmann::json MakeCondition(const nlohmann::json& previous, ConditionType t, bool value,
                             std::string_view reason, const std::string& message,
                             int64_t generation, const std::string& now);

// The off switch's Suspended condition's opening words.
inline constexpr char kSuspendedWhy[] =
    "fencing suspended by the off switch (annotation feedguard.io/suspend=true on the agent "
    "namespace, or --suspend): every fence withdrawn";
// A status computed as usual, turned into the off switch's: Ready=False (reason Suspended) and
// Suspended=True saying how many nodes still hold the policy's fence (`held`), and naming an
// annotation value that is no spelling of a boolean (`unrecognised`, "" for none).
void MarkSuspended(nlohmann::json& status, const nlohmann::json& previous, size_t held,
                   int64_t generation, std::chrono::system_clock::time_point now,
                   const std::string& unrecognised);
// The Reverting condition's message of a deleting policy whose finalizer waits for nodes: those
// reverting now (`waiting`, agent connected) and those without a connected agent, with the way
// to stop waiting for them.
std::string RevertingMessage(const std::string& policy, const std::vector<std::string>& waiting,
                             const std::vector<std::string>& unreachable);
// `status` with Reverting=True (reason WaitingForNodes) carrying `message`.
void MarkReverting(nlohmann::json& status, const std::string& message, int64_t generation,
                   std::chrono::system_clock::time_point now);

// An Event a status change calls for.
struct PolicyEvent {
  const char* type;  // Normal | Warning
  const char* reason;
  std::string message;
};
// The Events of the condition transitions from `prev` (what the API server held: may be anything)
// to `next`: InvalidSpec, Enforced, Degraded, Conflicting, Suspended, Withdrawn (suspended and
// every node reverted: `held` == 0), Resumed.
std::vector<PolicyEvent> EventsFor(const nlohmann::json& prev, const nlohmann::json& next,
                                   const std::vector<FieldError>& invalid, size_t held);

}  // namespace feedguard::controller
