#include "controller/status/policy_status.h"

#include <gtest/gtest.h>

#include <cctype>
#include <cmath>

namespace feedguard::controller {
namespace {

namespace v1 = feedguard::v1;

const nlohmann::json* FindCondition(const nlohmann::json& st, const std::string& type) {
  for (const auto& c : st["conditions"])
    if (c["type"] == type) return &c;
  return nullptr;
}

// Each counter of `st`, named by a JSON pointer ("/nodes/enforced"), holds its number.
void ExpectCounts(const nlohmann::json& st, std::vector<std::pair<std::string, int>> want) {
  for (const auto& [pointer, n] : want) {
    EXPECT_EQ(st.value(nlohmann::json::json_pointer(pointer), nlohmann::json()), n) << pointer;
  }
}

// The statuses of the Ready and Degraded conditions.
void ExpectReadyDegraded(const nlohmann::json& st, const std::string& ready,
                         const std::string& degraded) {
  EXPECT_EQ((*FindCondition(st, "Ready"))["status"], ready);
  EXPECT_EQ((*FindCondition(st, "Degraded"))["status"], degraded);
}

class PolicyStatusTest : public ::testing::Test {
 protected:
  PolicyStatusTest() {
    policy_.name = "vision";
    policy_.generation = 4;
    in_.policy = &policy_;
    in_.now = std::chrono::system_clock::time_point(std::chrono::seconds(1'700'000'000));
  }
  void Node(const std::string& name, int trainers, bool connected, uint64_t desired,
            uint64_t acked) {
    PolicyOnNode on;
    on.node_matched = true;
    on.trainers = trainers;
    in_.per_node[name] = on;
    AgentOnNode a;
    a.connected = connected;
    a.desired_version = desired;
    a.acked_version = acked;
    in_.agents[name] = a;
  }
  v1::NodeReport* Report(const std::string& node) {
    reports_[node] = v1::NodeReport();
    (void)in_.agents[node];
    return &reports_[node];
  }
  // As the controller does: each node's report tallied (TallyReport), the status computed from
  // the policy's tallies.
  nlohmann::json Compute() {
    tallies_.clear();
    for (const auto& [node, r] : reports_) {
      ReportTallies& all = tallies_[node] = TallyReport(r);
      auto t = all.find(policy_.name);
      in_.agents[node].tally = t == all.end() ? nullptr : &t->second;
    }
    return ComputePolicyStatus(in_);
  }
  static void AddPod(v1::NodeReport* r, const std::string& name, v1::PodReport::Role role,
                     bool enforced, const std::string& reason = "", double psi = 0) {
    auto* p = r->add_pods();
    p->set_name(name);
    p->set_namespace_("ml");
    p->set_policy("vision");
    p->set_role(role);
    p->set_enforced(enforced);
    p->set_reason(reason);
    p->set_cpu_pressure_some_avg10(psi);
  }
  FencePolicy policy_;
  PolicyStatusInput in_;
  std::map<std::string, v1::NodeReport> reports_;
  std::map<std::string, ReportTallies> tallies_;
};

TEST_F(PolicyStatusTest, AllEnforcedIsReady) {
  Node("a", 1, true, 3, 3);
  auto* r = Report("a");
  AddPod(r, "t", v1::PodReport::TRAINER, true);
  AddPod(r, "n1", v1::PodReport::NEIGHBOUR, true);
  AddPod(r, "n2", v1::PodReport::NEIGHBOUR, true);
  auto st = Compute();
  EXPECT_EQ(st["observedGeneration"], 4);
  ExpectCounts(st, {{"/nodes/matched", 1},
                    {"/nodes/enforced", 1},
                    {"/trainers/protected", 1},
                    {"/neighbours/fenced", 2}});
  ExpectReadyDegraded(st, "True", "False");
  EXPECT_TRUE(st["failures"].empty());
}

// With NVML on the node, "starved" is the GPU under-busy while its feeders wait for CPU; the
// status carries a bounded GPU busy aggregate (count, mean, minimum).
TEST_F(PolicyStatusTest, GpuBusyAggregateAndStarvedUsesIt) {
  Node("a", 3, true, 3, 3);
  auto* r = Report("a");
  auto gpu = [&](const std::string& name, double psi, double busy) {
    AddPod(r, name, v1::PodReport::TRAINER, true, "", psi);
    r->mutable_pods(r->pods_size() - 1)->set_gpus_sampled(1);
    r->mutable_pods(r->pods_size() - 1)->set_gpu_busy_percent(busy);
  };
  gpu("waits-and-gpu-idle", 55.0, 23.0);  // starved
  gpu("waits-but-gpu-busy", 55.0, 97.0);  // fed: not starved (was starved by PSI alone)
  gpu("no-wait-gpu-idle", 2.0, 41.0);     // under-busy for another reason: not starved
  AddPod(r, "no-nvml", v1::PodReport::TRAINER, true, "", 35.0);  // PSI alone decides
  auto st = Compute();
  ExpectCounts(st, {{"/trainers/protected", 4}, {"/trainers/starved", 2}});
  EXPECT_EQ(st["trainers"]["gpuBusy"]["sampled"], 3);
  EXPECT_EQ(st["trainers"]["gpuBusy"]["avgPercent"], 50);  // (23+97+41)/3 = 53.7 → 50
  EXPECT_EQ(st["trainers"]["gpuBusy"]["minPercent"], 20);
  // An agent's nonsense is not sampled.
  r->mutable_pods(0)->set_gpu_busy_percent(std::nan(""));
  st = Compute();
  EXPECT_EQ(st["trainers"]["gpuBusy"]["sampled"], 2);
  // No trainer sampled: no aggregate at all.
  for (auto& p : *r->mutable_pods()) p.set_gpus_sampled(0);
  st = Compute();
  EXPECT_FALSE(st["trainers"].contains("gpuBusy"));
  EXPECT_EQ(st["trainers"]["starved"], 3);  // PSI alone again
}

TEST_F(PolicyStatusTest, FailuresStaleAndStarved) {
  Node("a", 1, true, 3, 3);
  AddPod(Report("a"), "t", v1::PodReport::TRAINER, true, "", 55.0);
  Node("b", 1, false, 2, 1);
  in_.agents["b"].stale = true;  // disconnected past the grace period
  Node("c", 1, true, 5, 5);
  AddPod(Report("c"), "t2", v1::PodReport::TRAINER, false, "CgroupNotFound");
  Node("d", 1, true, 6, 6);
  in_.agents["d"].nack_error = "bad fence";
  Node("e", 1, true, 7, 6);  // in flight
  auto st = Compute();
  ExpectCounts(st, {{"/nodes/matched", 5},
                    {"/nodes/enforced", 1},
                    {"/nodes/failed", 2},
                    {"/nodes/stale", 1},
                    {"/trainers/starved", 1}});
  ExpectReadyDegraded(st, "False", "True");
  ASSERT_EQ(st["failures"].size(), 3u);
  EXPECT_EQ(st["failures"][0]["node"], "b");
  EXPECT_EQ(st["failures"][0]["reason"], "AgentNotConnected");
  EXPECT_EQ(st["failures"][1]["reason"], "CgroupNotFound");
  EXPECT_EQ(st["failures"][2]["reason"], "FenceRejected");
}

// An agent that lost its stream but is still within the grace period (a rollout, a failover)
// counts by its last answer: neither stale nor Degraded; once stale, it is.
TEST_F(PolicyStatusTest, DisconnectedIsStaleOnlyAfterGrace) {
  Node("a", 1, false, 3, 3);
  AddPod(Report("a"), "t", v1::PodReport::TRAINER, true);
  auto st = Compute();
  ExpectCounts(st, {{"/nodes/enforced", 1}, {"/nodes/stale", 0}});
  ExpectReadyDegraded(st, "True", "False");
  in_.agents["a"].stale = true;
  st = Compute();
  ExpectCounts(st, {{"/nodes/enforced", 0}, {"/nodes/stale", 1}});
  ExpectReadyDegraded(st, "False", "True");
  ASSERT_EQ(st["failures"].size(), 1u);
  EXPECT_EQ(st["failures"][0]["reason"], "AgentNotConnected");
}

// Neighbours the resolver found in another QoS tier than their trainers: the CrossTier
// condition says so (with an example) without touching Ready or Degraded.
TEST_F(PolicyStatusTest, CrossTierNeighboursAreSaid) {
  Node("a", 1, true, 3, 3);
  AddPod(Report("a"), "t", v1::PodReport::TRAINER, true);
  auto st = Compute();
  EXPECT_EQ((*FindCondition(st, "CrossTier"))["status"], "False");
  EXPECT_EQ((*FindCondition(st, "CrossTier"))["reason"], "SameQoSTier");
  in_.per_node["a"].cross_tier_neighbours = 2;
  in_.per_node["a"].cross_tier_example = "b/n (Burstable) vs trainer ml/t (Guaranteed)";
  st = Compute();
  const auto& c = *FindCondition(st, "CrossTier");
  EXPECT_EQ(c["status"], "True");
  EXPECT_EQ(c["reason"], "NeighboursInOtherQoSTier");
  EXPECT_NE(c["message"].get<std::string>().find("2 neighbours"), std::string::npos);
  EXPECT_NE(c["message"].get<std::string>().find("(Guaranteed)"), std::string::npos);
  ExpectReadyDegraded(st, "True", "False");
}

// A DryRun policy's pods come back planned (reason DryRun, not enforced): counted as what
// Enforce would protect and fence, and the policy is Ready, not Degraded.
TEST_F(PolicyStatusTest, DryRunPodsArePlannedNotFailures) {
  policy_.mode = PolicyMode::kDryRun;
  Node("a", 1, true, 3, 3);
  auto* r = Report("a");
  AddPod(r, "t", v1::PodReport::TRAINER, false, "DryRun");
  AddPod(r, "n1", v1::PodReport::NEIGHBOUR, false, "DryRun");
  AddPod(r, "n2", v1::PodReport::NEIGHBOUR, false, "DryRun");
  for (auto& p : *r->mutable_pods()) p.set_planned(true);
  auto st = Compute();
  ExpectCounts(st, {{"/nodes/enforced", 1},
                    {"/nodes/failed", 0},
                    {"/trainers/protected", 1},
                    {"/neighbours/fenced", 2}});
  EXPECT_TRUE(st["failures"].empty());
  const auto& ready = *FindCondition(st, "Ready");
  EXPECT_EQ(ready["status"], "True");
  EXPECT_EQ(ready["reason"], "DryRun");
  EXPECT_EQ((*FindCondition(st, "Degraded"))["status"], "False");
}

// Several failed pods on one node make one entry for the node (failures is a list-map keyed by
// node: two entries for one node would make the API server reject the whole status).
TEST_F(PolicyStatusTest, FailuresOfOneNodeAreOneEntry) {
  Node("a", 1, true, 3, 3);
  auto* r = Report("a");
  AddPod(r, "t", v1::PodReport::TRAINER, false, "CgroupNotFound");
  AddPod(r, "n1", v1::PodReport::NEIGHBOUR, false, "CgroupNotFound");
  AddPod(r, "n2", v1::PodReport::NEIGHBOUR, false, "WriteFailed");
  Node("b", 1, true, 3, 3);
  AddPod(Report("b"), "t2", v1::PodReport::TRAINER, false, "ProtectedPod");
  auto st = Compute();
  EXPECT_EQ(st["nodes"]["failed"], 2);
  ASSERT_EQ(st["failures"].size(), 2u);
  EXPECT_EQ(st["failures"][0]["node"], "a");
  EXPECT_EQ(st["failures"][0]["reason"], "CgroupNotFound");  // the most frequent
  const std::string msg = st["failures"][0]["message"];
  EXPECT_EQ(msg.rfind("3 failures: ", 0), 0u) << msg;
  EXPECT_NE(msg.find("ml/t:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("ml/n1:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("WriteFailed ml/n2:"), std::string::npos) << msg;
  EXPECT_EQ(st["failures"][1]["node"], "b");
  EXPECT_EQ(st["failures"][1]["reason"], "ProtectedPod");
}

// A long message is cut to 512 bytes on a character boundary: the status stays valid UTF-8.
TEST_F(PolicyStatusTest, LongFailureMessageIsCutOnACharacterBoundary) {
  Node("a", 1, true, 3, 3);
  auto* r = Report("a");
  AddPod(r, "t", v1::PodReport::TRAINER, false, "KernelLacksCpuIdle");
  // "ml/t: " + "abc" + blocks of 16 bytes with a 3-byte character at 6..8: byte 512 is the
  // character's second byte, so a plain cut at 512 would split it.
  std::string m = "abc";
  while (m.size() < 600) m += "needs \u2265 5.15; ";
  r->mutable_pods(0)->set_message(m);
  auto st = Compute();
  const std::string msg = st["failures"][0]["message"];
  EXPECT_LE(msg.size(), 512u);
  EXPECT_GT(msg.size(), 500u);
  EXPECT_NO_THROW((void)st.dump());
}

TEST_F(PolicyStatusTest, FailureListIsBoundedAndSinceIsKept) {
  for (int i = 0; i < 100; ++i) {
    Node("n" + std::to_string(1000 + i), 1, false, 1, 0);
    in_.agents["n" + std::to_string(1000 + i)].stale = true;
  }
  auto st = Compute();
  EXPECT_EQ(st["failures"].size(), kMaxFailures);
  EXPECT_EQ(st["failuresOmitted"], 80);
  std::string first_since = st["failures"][0]["since"];
  std::string ready_since = (*FindCondition(st, "Ready"))["lastTransitionTime"];
  in_.previous_status = st;
  in_.now += std::chrono::minutes(5);
  auto st2 = Compute();
  EXPECT_EQ(st2["failures"][0]["since"], first_since);
  EXPECT_EQ((*FindCondition(st2, "Ready"))["lastTransitionTime"], ready_since);
  EXPECT_EQ(st2, st);  // nothing changed → identical object → no write needed
}

TEST_F(PolicyStatusTest, InvalidNamesTheField) {
  in_.invalid = {{"spec.trainers.cpu", "set at most one of cores and coresPerGPU"}};
  Node("a", 1, true, 1, 1);
  auto st = Compute();
  const auto* inv = FindCondition(st, "Invalid");
  ASSERT_NE(inv, nullptr);
  EXPECT_EQ((*inv)["status"], "True");
  EXPECT_EQ((*inv)["message"], "spec.trainers.cpu: set at most one of cores and coresPerGPU");
  EXPECT_EQ(st["nodes"]["matched"], 0);
}

TEST_F(PolicyStatusTest, ConflictsAreReported) {
  Node("a", 0, true, 1, 1);
  in_.per_node["a"].lost.push_back({"ml/t", "other", "vision"});
  auto st = Compute();
  const auto* c = FindCondition(st, "Conflicting");
  EXPECT_EQ((*c)["status"], "True");
  EXPECT_EQ((*c)["message"], "1 pods: ml/t is claimed by higher-ranked policy other");
}

// What the CRD accepts for status.failures[] (the API server rejects the whole status
// otherwise, for good: every later write of the policy carries the same entry).
bool FailureFitsTheCrd(const nlohmann::json& f) {
  const std::string reason = f["reason"];
  if (reason.empty() || reason.size() > 128) return false;
  if (!std::isalpha(static_cast<unsigned char>(reason.front())) || reason.back() == '_') {
    return false;
  }
  for (char c : reason) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return f["message"].get<std::string>().size() <= 1024 &&
         f["node"].get<std::string>().size() <= 253;
}

TEST_F(PolicyStatusTest, HostileReportStillGivesAStatusTheCrdAccepts) {
  Node("a", 1, true, 3, 3);
  Node("b", 1, true, 3, 3);
  auto* r = Report("a");
  AddPod(r, "t", v1::PodReport::TRAINER, false, "not camel\ncase " + std::string(500, 'x'));
  r->mutable_pods(0)->set_message(std::string(100000, '\xff'));
  r->mutable_pods(0)->set_name("pod\xc3");
  auto* r2 = Report("b");
  AddPod(r2, "t\x80", v1::PodReport::TRAINER, false, "Bad\xfeReason");
  r2->mutable_pods(0)->set_cpu_pressure_some_avg10(1e308);
  r2->set_overwrites_total(UINT64_MAX);
  in_.agents["b"].nack_error.clear();
  nlohmann::json st;
  ASSERT_NO_THROW(st = Compute());
  ASSERT_NO_THROW((void)st.dump());  // what the status write does first
  ASSERT_EQ(st["failures"].size(), 2u);
  for (const auto& f : st["failures"]) {
    EXPECT_TRUE(FailureFitsTheCrd(f)) << f.dump(-1, ' ', true);
    EXPECT_EQ(f["reason"], "AgentReported");
  }
  // The agent's own reason is not lost: it leads the message, made safe.
  EXPECT_NE(st["failures"][0]["message"].get<std::string>().find("(not camel case"),
            std::string::npos)
      << st["failures"][0]["message"];
}

TEST_F(PolicyStatusTest, NackErrorIsMadeSafeForStatus) {
  Node("a", 1, true, 3, 2);
  in_.agents["a"].nack_error = "bad\xff\nline " + std::string(5000, 'e');
  nlohmann::json st = Compute();
  ASSERT_NO_THROW((void)st.dump());
  ASSERT_EQ(st["failures"].size(), 1u);
  EXPECT_TRUE(FailureFitsTheCrd(st["failures"][0]));
  EXPECT_EQ(st["failures"][0]["message"].get<std::string>().find('\n'), std::string::npos);
}

}  // namespace
}  // namespace feedguard::controller

namespace feedguard::controller {
namespace {

TEST_F(PolicyStatusTest, AnUnreadableAgentIsFailingNeverEnforced) {
  // Issue 28, item 3: its ACK came before the message the controller could not parse.
  Node("a", 1, true, 3, 3);
  AddPod(Report("a"), "t", v1::PodReport::TRAINER, true);
  in_.agents["a"].unreadable_error = "a message of 120 bytes did not parse";
  auto st = Compute();
  ExpectCounts(st, {{"/nodes/enforced", 0}, {"/nodes/failed", 1}});
  ASSERT_EQ(st["failures"].size(), 1u);
  EXPECT_EQ(st["failures"][0]["reason"], "AgentMessageUnreadable");
  EXPECT_NE(st["failures"][0]["message"].get<std::string>().find("did not parse"),
            std::string::npos);
  ExpectReadyDegraded(st, "False", "True");
}

TEST_F(PolicyStatusTest, AFenceTooLargeToSendIsAFailureOfItsNode) {
  // Issue 28, item 2: the node keeps its last (acknowledged) fence, which must not read as
  // enforced.
  Node("a", 1, true, 3, 3);
  AddPod(Report("a"), "t", v1::PodReport::TRAINER, true);
  in_.per_node["a"].fence_error = "the node's fence would be 4420000 bytes, over the 4128768";
  Node("b", 1, true, 2, 2);
  AddPod(Report("b"), "t", v1::PodReport::TRAINER, true);
  auto st = Compute();
  ExpectCounts(st, {{"/nodes/enforced", 1}, {"/nodes/failed", 1}});
  ASSERT_EQ(st["failures"].size(), 1u);
  EXPECT_EQ(st["failures"][0]["node"], "a");
  EXPECT_EQ(st["failures"][0]["reason"], "FenceTooLarge");
}

TEST_F(PolicyStatusTest, PodsOverTheContainerCapAreNamed) {
  Node("a", 1, true, 3, 3);
  AddPod(Report("a"), "t", v1::PodReport::TRAINER, true);
  in_.per_node["a"].pods_over_container_cap = 2;
  in_.per_node["a"].over_container_cap_example = "batch/wide (6000 containers)";
  auto st = Compute();
  EXPECT_EQ(st["nodes"]["failed"], 1);
  ASSERT_EQ(st["failures"].size(), 1u);
  EXPECT_EQ(st["failures"][0]["reason"], "TooManyContainers");
  EXPECT_NE(st["failures"][0]["message"].get<std::string>().find("batch/wide (6000 containers)"),
            std::string::npos);
}

TEST_F(PolicyStatusTest, AnUnrestrictedTrainerSelectorIsSaid) {
  // Issue 28, item 6: without namespaceSelector and requireGPU any pod author makes trainers.
  Node("a", 1, true, 3, 3);
  auto st = Compute();
  const auto* c = FindCondition(st, "TrainersUnrestricted");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ((*c)["status"], "True");
  EXPECT_EQ((*c)["reason"], "AnyPodAuthorCanClaimTrainer");
  EXPECT_EQ((*FindCondition(st, "Ready"))["status"], "True");  // a warning, not a failure
  policy_.trainers.require_gpu = true;
  EXPECT_EQ((*FindCondition(Compute(), "TrainersUnrestricted"))["status"], "False");
  policy_.trainers.require_gpu = false;
  auto sel = LabelSelector::FromJson({{"matchLabels", {{"team", "ml"}}}}, "ns");
  ASSERT_TRUE(sel.ok());
  policy_.trainers.namespace_selector = *sel;
  EXPECT_EQ((*FindCondition(Compute(), "TrainersUnrestricted"))["status"], "False");
}

TEST(ReportTallyTest, CountsWhatStatusReadsAndComparesInItsSteps) {
  v1::NodeReport r;
  auto add = [&](const std::string& policy, v1::PodReport::Role role, bool enforced) {
    auto* p = r.add_pods();
    p->set_policy(policy);
    p->set_role(role);
    p->set_enforced(enforced);
    p->set_namespace_("ml");
    p->set_name("p" + std::to_string(r.pods_size()));
    return p;
  };
  auto* t = add("vision", v1::PodReport::TRAINER, true);
  t->set_gpus_sampled(1);
  t->set_gpu_busy_percent(71);
  add("vision", v1::PodReport::NEIGHBOUR, true);
  add("vision", v1::PodReport::NEIGHBOUR, false)->set_reason("CgroupNotFound");
  add("speech", v1::PodReport::TRAINER, false)->set_planned(true);
  const ReportTallies a = TallyReport(r);
  ASSERT_EQ(a.size(), 2u);
  const ReportTally& v = a.at("vision");
  EXPECT_EQ(v.protected_trainers, 1);
  EXPECT_EQ(v.fenced, 1);
  EXPECT_EQ(v.gpu_sampled, 1);
  EXPECT_DOUBLE_EQ(v.gpu_busy_sum, 71);
  ASSERT_EQ(v.failures.size(), 1u);
  EXPECT_EQ(v.failures[0].reason, "CgroupNotFound");
  EXPECT_EQ(v.failures[0].message, "ml/p3: ");
  EXPECT_EQ(a.at("speech").protected_trainers, 1);  // planned (DryRun)
  EXPECT_TRUE(a.at("speech").failures.empty());

  t->set_gpu_busy_percent(73);  // same 5 % step: the status would not change
  EXPECT_TRUE(TallyReport(r).at("vision").SameForStatus(v));
  t->set_gpu_busy_percent(76);
  EXPECT_FALSE(TallyReport(r).at("vision").SameForStatus(v));
  t->set_gpu_busy_percent(71);
  r.mutable_pods(2)->set_message("gone");
  EXPECT_FALSE(TallyReport(r).at("vision").SameForStatus(v));
}

}  // namespace
}  // namespace feedguard::controller
