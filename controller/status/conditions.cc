#include "controller/status/conditions.h"

#include <algorithm>

#include "common/json_member.h"
#include "controller/sanitize/sanitize.h"
#include "controller/status/policy_status.h"

namespace feedguard::controller {
namespace {

// Bound well inside the CRD's (conditions[].message ≤ 32768).
constexpr size_t kMaxConditionMessage = 4096;

bool IsType(const nlohmann::json& c, ConditionType t) {
  const nlohmann::json& type = JsonMember(c, "type");
  return type.is_string() && type.get_ref<const std::string&>() == ConditionTypeName(t);
}

// When condition `t` took the status `status`: its lastTransitionTime in `previous` if it had
// that status there, else `now`.
std::string Since(const nlohmann::json& previous, ConditionType t, const std::string& status,
                  const std::string& now) {
  const nlohmann::json* c = FindCondition(previous, t);
  if (c == nullptr || JsonStringOr(*c, "status", "") != status) return now;
  return JsonStringOr(*c, "lastTransitionTime", now);
}

// The conditions array of `status` (created empty when missing or not an array).
nlohmann::json& ConditionsOf(nlohmann::json& status) {
  if (!status.is_object()) status = nlohmann::json::object();
  nlohmann::json& conds = status["conditions"];
  if (!conds.is_array()) conds = nlohmann::json::array();
  return conds;
}

}  // namespace

const nlohmann::json* FindCondition(const nlohmann::json& status, ConditionType t) {
  const nlohmann::json& conds = JsonMember(status, "conditions");
  if (!conds.is_array()) return nullptr;
  for (const auto& c : conds) {
    if (IsType(c, t)) return &c;
  }
  return nullptr;
}

std::string ConditionStatus(const nlohmann::json& status, ConditionType t) {
  const nlohmann::json* c = FindCondition(status, t);
  return c ? JsonStringOr(*c, "status", "") : "";
}

std::string ConditionMessage(const nlohmann::json& status, ConditionType t) {
  const nlohmann::json* c = FindCondition(status, t);
  return c ? JsonStringOr(*c, "message", "") : "";
}

nlohmann::json MakeCondition(const nlohmann::json& previous, ConditionType t, bool value,
                             std::string_view reason, const std::string& message,
                             int64_t generation, const std::string& now) {
  const std::string status = value ? "True" : "False";
  return {{"type", ConditionTypeName(t)},
          {"status", status},
          {"reason", reason},
          {"message", SafeText(message, kMaxConditionMessage)},
          {"lastTransitionTime", Since(previous, t, status, now)},
          {"observedGeneration", generation}};
}

void MarkSuspended(nlohmann::json& status, const nlohmann::json& previous, size_t held,
                   int64_t generation, std::chrono::system_clock::time_point now,
                   const std::string& unrecognised) {
  std::string msg =
      std::string(kSuspendedWhy) +
      (held == 0 ? "; every node reverted"
                 : "; " + std::to_string(held) + " nodes still hold this policy's fence");
  if (!unrecognised.empty()) {
    msg += " (the annotation's value \"" + SafeText(unrecognised, 64) +
           "\" is no spelling of true or false and is taken as true: set it to true, or remove "
           "it to fence again)";
  }
  const std::string ts = Rfc3339(now);
  nlohmann::json& conds = ConditionsOf(status);
  for (auto& c : conds) {
    if (!IsType(c, ConditionType::kReady)) continue;
    c["status"] = "False";
    c["reason"] = "Suspended";
    c["message"] = msg;
    c["lastTransitionTime"] = Since(previous, ConditionType::kReady, "False", ts);
  }
  conds.push_back(
      MakeCondition(previous, ConditionType::kSuspended, true, "OffSwitch", msg, generation, ts));
}

std::string RevertingMessage(const std::string& policy, const std::vector<std::string>& waiting,
                             const std::vector<std::string>& unreachable) {
  auto list = [](const std::vector<std::string>& nodes) {
    std::string out;
    for (size_t i = 0; i < nodes.size() && i < 10; ++i) out += (i ? ", " : "") + nodes[i];
    if (nodes.size() > 10) out += ", and " + std::to_string(nodes.size() - 10) + " more";
    return out;
  };
  std::string msg =
      "deleting: the finalizer waits until every node has restored the original "
      "values; " +
      std::to_string(waiting.size() + unreachable.size()) + " node(s) still hold it";
  if (!waiting.empty()) msg += "; reverting now: " + list(waiting);
  if (!unreachable.empty()) {
    msg += "; without a connected agent (each reverts once its agent reconnects): " +
           list(unreachable) + ". To stop waiting for them: kubectl patch fencepolicy " + policy +
           " --type=json -p '[{\"op\":\"remove\",\"path\":\"/metadata/finalizers\"}]' (their "
           "fence then stays until their agent is back and receives a fence without the policy)";
  }
  return msg;
}

void MarkReverting(nlohmann::json& status, const std::string& message, int64_t generation,
                   std::chrono::system_clock::time_point now) {
  nlohmann::json& conds = ConditionsOf(status);
  nlohmann::json reverting = MakeCondition(status, ConditionType::kReverting, true,
                                           "WaitingForNodes", message, generation, Rfc3339(now));
  conds.erase(
      std::remove_if(conds.begin(), conds.end(),
                     [](const nlohmann::json& c) { return IsType(c, ConditionType::kReverting); }),
      conds.end());
  conds.push_back(std::move(reverting));
}

std::vector<PolicyEvent> EventsFor(const nlohmann::json& prev, const nlohmann::json& next,
                                   const std::vector<FieldError>& invalid, size_t held) {
  auto is_true = [](const nlohmann::json& st, ConditionType t) {
    return ConditionStatus(st, t) == "True";
  };
  auto became = [&](ConditionType t) { return is_true(next, t) && !is_true(prev, t); };
  std::vector<PolicyEvent> events;
  if (became(ConditionType::kInvalid)) {
    events.push_back({"Warning", "InvalidSpec", JoinFieldErrors(invalid)});
  }
  if (became(ConditionType::kReady)) {
    const nlohmann::json& enforced = JsonMember(JsonMember(next, "nodes"), "enforced");
    const int n = enforced.is_number_integer() ? enforced.get<int>() : 0;
    events.push_back({"Normal", "Enforced", std::to_string(n) + " nodes enforced"});
  }
  if (became(ConditionType::kDegraded)) {
    events.push_back({"Warning", "Degraded", "some nodes failed or are stale"});
  }
  if (became(ConditionType::kConflicting)) {
    events.push_back({"Warning", "Conflicting", "pods claimed by a higher-ranked policy"});
  }
  if (became(ConditionType::kSuspended)) events.push_back({"Warning", "Suspended", kSuspendedWhy});
  const bool was_suspended = is_true(prev, ConditionType::kSuspended);
  const bool is_suspended = is_true(next, ConditionType::kSuspended);
  if (is_suspended && was_suspended && held == 0 &&
      ConditionMessage(prev, ConditionType::kSuspended) !=
          ConditionMessage(next, ConditionType::kSuspended)) {
    events.push_back({"Normal", "Withdrawn", "every node reverted this policy's fences"});
  }
  if (!is_suspended && was_suspended) {
    events.push_back({"Normal", "Resumed", "off switch cleared: fences are applied again"});
  }
  return events;
}

}  // namespace feedguard::controller
