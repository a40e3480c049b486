#include "controller/status/conditions.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

namespace feedguard::controller {
namespace {

using std::chrono::seconds;
using std::chrono::system_clock;

// EventsFor is pure: a status's condition transitions, the previous status whatever the API
// server held.
nlohmann::json WithConditions(std::initializer_list<std::pair<const char*, const char*>> cs,
                              int enforced = 0) {
  nlohmann::json st = {{"nodes", {{"enforced", enforced}}},
                       {"conditions", nlohmann::json::array()}};
  for (const auto& [type, status] : cs) {
    st["conditions"].push_back({{"type", type}, {"status", status}, {"message", ""}});
  }
  return st;
}
std::vector<std::string> Reasons(const std::vector<PolicyEvent>& events) {
  std::vector<std::string> out;
  for (const auto& e : events) out.push_back(std::string(e.type) + "/" + e.reason);
  return out;
}

TEST(EventsForTest, TransitionsOnlyAndHostilePreviousStatuses) {
  const auto ready = WithConditions({{"Ready", "True"}, {"Degraded", "False"}}, 3);
  EXPECT_EQ(Reasons(EventsFor(nlohmann::json(), ready, {}, 0)),
            (std::vector<std::string>{"Normal/Enforced"}));
  EXPECT_EQ(EventsFor(nlohmann::json(), ready, {}, 0)[0].message, "3 nodes enforced");
  EXPECT_TRUE(EventsFor(ready, ready, {}, 0).empty()) << "no transition, no Event";
  // Whatever the API server held (a loose CRD): no throw, read as no condition.
  for (const auto& prev : {nlohmann::json("x"), nlohmann::json({{"conditions", 5}}),
                           nlohmann::json({{"conditions", {1, "a", nullptr}}}),
                           nlohmann::json({{"conditions", {{{"type", 7}, {"status", true}}}}})}) {
    EXPECT_EQ(Reasons(EventsFor(prev, ready, {}, 0)), (std::vector<std::string>{"Normal/Enforced"}))
        << prev.dump();
  }
  const auto degraded = WithConditions({{"Ready", "False"}, {"Degraded", "True"}});
  EXPECT_EQ(Reasons(EventsFor(ready, degraded, {}, 0)),
            (std::vector<std::string>{"Warning/Degraded"}));
  auto suspended = WithConditions({{"Ready", "False"}, {"Suspended", "True"}});
  EXPECT_EQ(Reasons(EventsFor(ready, suspended, {}, 2)),
            (std::vector<std::string>{"Warning/Suspended"}));
  auto reverted = suspended;
  reverted["conditions"][1]["message"] = "every node reverted";
  EXPECT_EQ(Reasons(EventsFor(suspended, reverted, {}, 0)),
            (std::vector<std::string>{"Normal/Withdrawn"}));
  EXPECT_TRUE(EventsFor(suspended, reverted, {}, 1).empty()) << "a node still holds the fence";
  EXPECT_EQ(Reasons(EventsFor(suspended, ready, {}, 0)),
            (std::vector<std::string>{"Normal/Enforced", "Normal/Resumed"}));
  const auto invalid = WithConditions({{"Invalid", "True"}, {"Ready", "False"}});
  auto ev = EventsFor(ready, invalid, {{"spec.fence", "must be one of Idle, Weight"}}, 0);
  ASSERT_EQ(Reasons(ev), (std::vector<std::string>{"Warning/InvalidSpec"}));
  EXPECT_NE(ev[0].message.find("spec.fence"), std::string::npos) << ev[0].message;
}

TEST(ConditionsTest, TypedLookupsReadAnyStatusWithoutThrowing) {
  const auto st = WithConditions({{"Ready", "True"}, {"Suspended", "False"}});
  EXPECT_EQ(ConditionStatus(st, ConditionType::kReady), "True");
  EXPECT_EQ(ConditionStatus(st, ConditionType::kSuspended), "False");
  EXPECT_EQ(ConditionStatus(st, ConditionType::kDegraded), "");
  EXPECT_EQ(FindCondition(st, ConditionType::kDegraded), nullptr);
  for (const auto& hostile :
       {nlohmann::json(), nlohmann::json(3), nlohmann::json({{"conditions", "x"}}),
        nlohmann::json({{"conditions", {{{"type", "Ready"}, {"status", 1}}}}})}) {
    EXPECT_EQ(ConditionStatus(hostile, ConditionType::kReady), "") << hostile.dump();
    EXPECT_EQ(ConditionMessage(hostile, ConditionType::kReady), "") << hostile.dump();
  }
  for (const auto& [t, name] : kConditionTypeNames) EXPECT_EQ(ConditionTypeName(t), name);
}

TEST(ConditionsTest, TransitionTimeKeptWhileTheStatusHolds) {
  nlohmann::json prev = {
      {"conditions", {{{"type", "Ready"}, {"status", "True"}, {"lastTransitionTime", "T0"}}}}};
  auto same = MakeCondition(prev, ConditionType::kReady, true, "Enforced", "m", 3, "T1");
  EXPECT_EQ(same["lastTransitionTime"], "T0");
  EXPECT_EQ(same["type"], "Ready");
  EXPECT_EQ(same["observedGeneration"], 3);
  auto flipped = MakeCondition(prev, ConditionType::kReady, false, "Progressing", "m", 3, "T1");
  EXPECT_EQ(flipped["lastTransitionTime"], "T1");
  EXPECT_EQ(flipped["status"], "False");
}

TEST(ConditionsTest, SuspendedTurnsReadyFalseAndSaysHowManyNodesHold) {
  const system_clock::time_point now{seconds(1'700'000'000)};
  nlohmann::json st = WithConditions({{"Ready", "True"}});
  MarkSuspended(st, nlohmann::json(), 2, 5, now, "maybe");
  EXPECT_EQ(ConditionStatus(st, ConditionType::kReady), "False");
  EXPECT_EQ((*FindCondition(st, ConditionType::kReady))["reason"], "Suspended");
  EXPECT_EQ(ConditionStatus(st, ConditionType::kSuspended), "True");
  const std::string msg = ConditionMessage(st, ConditionType::kSuspended);
  EXPECT_NE(msg.find("2 nodes still hold"), std::string::npos) << msg;
  EXPECT_NE(msg.find("\"maybe\""), std::string::npos) << msg;
  nlohmann::json none = nlohmann::json::object();
  MarkSuspended(none, nlohmann::json(), 0, 5, now, "");
  EXPECT_NE(ConditionMessage(none, ConditionType::kSuspended).find("every node reverted"),
            std::string::npos);
}

TEST(ConditionsTest, RevertingReplacesItselfAndKeepsItsStart) {
  const system_clock::time_point t0{seconds(1'700'000'000)}, t1 = t0 + seconds(30);
  nlohmann::json st = WithConditions({{"Ready", "True"}});
  MarkReverting(st, RevertingMessage("p", {"a"}, {}), 1, t0);
  const std::string since = (*FindCondition(st, ConditionType::kReverting))["lastTransitionTime"];
  MarkReverting(st, RevertingMessage("p", {}, {"b"}), 1, t1);
  size_t reverting = 0;
  for (const auto& c : st["conditions"]) reverting += c["type"] == "Reverting";
  EXPECT_EQ(reverting, 1u);
  EXPECT_EQ((*FindCondition(st, ConditionType::kReverting))["lastTransitionTime"], since);
  const std::string msg = ConditionMessage(st, ConditionType::kReverting);
  EXPECT_NE(msg.find("kubectl patch fencepolicy p"), std::string::npos) << msg;
}

}  // namespace
}  // namespace feedguard::controller
