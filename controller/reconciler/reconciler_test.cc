#include "controller/reconciler/reconciler.h"

#include <gtest/gtest.h>

namespace feedguard::controller {
namespace {

using nlohmann::json;

class FakeSink : public FenceSink {
 public:
  Status SetDesired(feedguard::v1::NodeFence fence) override {
    sent.push_back(fence);
    agents[fence.node_name()].desired_version = fence.version();
    return OkStatus();
  }
  std::optional<Agent> GetAgent(const std::string& node) const override {
    auto it = agents.find(node);
    if (it == agents.end()) return std::nullopt;
    return it->second;
  }
  void Forget(const std::string& node) override { forgotten.push_back(node); }
  void OnNodesKnown() override { ++nodes_known; }
  std::vector<feedguard::v1::NodeFence> sent;
  std::map<std::string, Agent> agents;
  std::vector<std::string> forgotten;
  int nodes_known = 0;
};

class FakeWriter : public PolicyWriter {
 public:
  Status WriteStatus(const std::string& name, const json& status) override {
    // What the real writer does with it: serialise (throws on invalid UTF-8).
    serialised.push_back(status.dump());
    statuses[name].push_back(status);
    return OkStatus();
  }
  Status AddFinalizer(const std::string& name) override {
    added.push_back(name);
    return OkStatus();
  }
  Status RemoveFinalizer(const std::string& name) override {
    removed.push_back(name);
    return OkStatus();
  }
  void Event(const std::string& policy, const std::string& type, const std::string& reason,
             const std::string&) override {
    events.push_back(policy + "/" + type + "/" + reason);
  }
  std::map<std::string, std::vector<json>> statuses;
  std::vector<std::string> serialised;
  std::vector<std::string> added, removed, events;
};

json PolicyJson(bool with_finalizer, bool deleting = false, int64_t generation = 1) {
  json p = {{"metadata", {{"name", "vision"}, {"generation", generation}}},
            {"spec",
             {{"trainers", {{"podSelector", {{"matchLabels", {{"role", "trainer"}}}}}}},
              {"neighbours", {{"fence", "Idle"}}}}}};
  if (with_finalizer) p["metadata"]["finalizers"] = {"feedguard.io/revert-fences"};
  if (deleting) p["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z";
  return p;
}

json PodJson(const std::string& name, const std::string& node, json labels = json::object()) {
  return {{"metadata",
           {{"uid", "uid-" + name}, {"namespace", "ml"}, {"name", name}, {"labels", labels}}},
          {"spec", {{"nodeName", node}, {"containers", {{{"name", "main"}}}}}},
          {"status", {{"phase", "Running"}, {"qosClass", "BestEffort"}}}};
}

class ReconcilerTest : public ::testing::Test {
 protected:
  ReconcilerTest() {
    clock_ = std::make_shared<ManualTimeSource>();
    ReconcilerOptions o;
    o.clock = clock_;
    o.status_interval = std::chrono::milliseconds(1000);
    r_ = std::make_shared<Reconciler>(sink_, writer_, o);
    r_->UpsertNode({{"metadata", {{"name", "gpu-1"}}}});
    r_->UpsertNode({{"metadata", {{"name", "gpu-2"}}}});
    r_->MarkInformersSynced();
  }
  void Ack(const std::string& node) {
    auto& a = sink_->agents[node];
    a.connected = true;
    a.acked_version = a.desired_version;
    r_->OnAck(node, a.desired_version);
  }
  std::shared_ptr<FakeSink> sink_ = std::make_shared<FakeSink>();
  std::shared_ptr<FakeWriter> writer_ = std::make_shared<FakeWriter>();
  std::shared_ptr<ManualTimeSource> clock_;
  ReconcilerPtr r_;
};

TEST_F(ReconcilerTest, SendsOnlyChangedFencesWithGrowingVersions) {
  r_->UpsertPolicy(PolicyJson(true));
  r_->UpsertPod(PodJson("train", "gpu-1", {{"role", "trainer"}}));
  r_->UpsertPod(PodJson("spin", "gpu-1"));
  r_->Step();
  // Both nodes get a fence (gpu-2's is empty: nothing to enforce there).
  ASSERT_EQ(sink_->sent.size(), 2u);
  auto f1 = *r_->DesiredFence("gpu-1");
  EXPECT_EQ(f1.trainers_size(), 1);
  EXPECT_EQ(f1.neighbours_size(), 1);
  EXPECT_EQ(r_->DesiredFence("gpu-2")->trainers_size(), 0);

  // Nothing changed → nothing sent.
  r_->UpsertPod(PodJson("spin", "gpu-1"));
  r_->Step();
  EXPECT_EQ(sink_->sent.size(), 2u);

  // A new neighbour on gpu-1 → only gpu-1 recomputed and re-sent with a higher version.
  r_->UpsertPod(PodJson("spin2", "gpu-1"));
  r_->Step();
  ASSERT_EQ(sink_->sent.size(), 3u);
  EXPECT_EQ(sink_->sent.back().node_name(), "gpu-1");
  EXPECT_GT(sink_->sent.back().version(), f1.version());
  EXPECT_EQ(sink_->sent.back().neighbours_size(), 2);
}

TEST_F(ReconcilerTest, AddsFinalizerAndWritesCoalescedStatus) {
  r_->UpsertPolicy(PolicyJson(false));
  r_->UpsertPod(PodJson("train", "gpu-1", {{"role", "trainer"}}));
  r_->Step();
  EXPECT_EQ(writer_->added, std::vector<std::string>{"vision"});
  ASSERT_EQ(writer_->statuses["vision"].size(), 1u);
  EXPECT_EQ(writer_->statuses["vision"][0]["nodes"]["stale"], 2);  // no agents yet

  Ack("gpu-1");
  Ack("gpu-2");
  r_->Step();  // within status_interval: coalesced, not written yet
  EXPECT_EQ(writer_->statuses["vision"].size(), 1u);
  clock_->Advance(std::chrono::milliseconds(1500));
  r_->Step();
  ASSERT_EQ(writer_->statuses["vision"].size(), 2u);
  const json& st = writer_->statuses["vision"][1];
  EXPECT_EQ(st["nodes"]["matched"], 2);
  EXPECT_EQ(st["nodes"]["enforced"], 2);
  clock_->Advance(std::chrono::milliseconds(1500));
  r_->Step();  // unchanged → no write
  EXPECT_EQ(writer_->statuses["vision"].size(), 2u);
}

TEST_F(ReconcilerTest, InvalidPolicyIsNotEnforcedAndSaysWhy) {
  json p = PolicyJson(true);
  p["spec"]["trainers"]["cpu"] = {{"cores", 2}, {"coresPerGPU", 2}};
  r_->UpsertPolicy(p);
  r_->UpsertPod(PodJson("train", "gpu-1", {{"role", "trainer"}}));
  r_->Step();
  EXPECT_EQ(r_->DesiredFence("gpu-1")->trainers_size(), 0);
  ASSERT_EQ(writer_->statuses["vision"].size(), 1u);
  bool found = false;
  for (const auto& c : writer_->statuses["vision"][0]["conditions"]) {
    if (c["type"] == "Invalid") {
      EXPECT_EQ(c["status"], "True");
      EXPECT_EQ(c["message"], "spec.trainers.cpu: set at most one of cores and coresPerGPU");
      found = true;
    }
  }
  EXPECT_TRUE(found);
  EXPECT_NE(std::find(writer_->events.begin(), writer_->events.end(), "vision/Warning/InvalidSpec"),
            writer_->events.end());
}

TEST_F(ReconcilerTest, FinalizerLeavesOnlyAfterAgentsAckTheRevert) {
  r_->UpsertPolicy(PolicyJson(true));
  r_->UpsertPod(PodJson("train", "gpu-1", {{"role", "trainer"}}));
  r_->Step();
  Ack("gpu-1");
  Ack("gpu-2");
  r_->Step();

  r_->UpsertPolicy(PolicyJson(true, /*deleting=*/true));
  r_->Step();
  // gpu-1 got a fence without the policy, not yet acknowledged → finalizer stays.
  EXPECT_EQ(r_->DesiredFence("gpu-1")->trainers_size(), 0);
  EXPECT_TRUE(writer_->removed.empty());
  Ack("gpu-1");
  r_->Step();
  EXPECT_EQ(writer_->removed, std::vector<std::string>{"vision"});
}

TEST_F(ReconcilerTest, StatusEchoDoesNotRecomputeNodesButSpecChangeDoes) {
  r_->UpsertPolicy(PolicyJson(true));
  r_->UpsertPod(PodJson("train", "gpu-1", {{"role", "trainer"}}));
  r_->Step();
  const auto before = r_->stats().node_recomputes;
  json echo = PolicyJson(true);
  echo["status"] = {{"observedGeneration", 1}};
  r_->UpsertPolicy(echo);  // our status write coming back through the watch
  r_->Step();
  EXPECT_EQ(r_->stats().node_recomputes, before);
  r_->UpsertPolicy(PolicyJson(true, false, /*generation=*/2));  // a spec edit
  r_->Step();
  EXPECT_EQ(r_->stats().node_recomputes, before + 2);
}

TEST_F(ReconcilerTest, PodMovingNodesAndDeletion) {
  r_->UpsertPolicy(PolicyJson(true));
  r_->UpsertPod(PodJson("train", "gpu-1", {{"role", "trainer"}}));
  r_->Step();
  EXPECT_EQ(r_->DesiredFence("gpu-1")->trainers_size(), 1);
  r_->DeletePod(PodJson("train", "gpu-1"));
  r_->Step();
  EXPECT_EQ(r_->DesiredFence("gpu-1")->trainers_size(), 0);
  EXPECT_EQ(r_->stats().pods, 0u);
}

// ---- never withdraw on start (issue 14) ----

class StartTest : public ::testing::Test {
 protected:
  StartTest() {
    ReconcilerOptions o;
    o.clock = clock_;
    r_ = std::make_shared<Reconciler>(sink_, writer_, o);
  }
  std::shared_ptr<FakeSink> sink_ = std::make_shared<FakeSink>();
  std::shared_ptr<FakeWriter> writer_ = std::make_shared<FakeWriter>();
  std::shared_ptr<ManualTimeSource> clock_ = std::make_shared<ManualTimeSource>();
  ReconcilerPtr r_;
};

TEST_F(StartTest, NothingIsDistributedUntilEveryInformerDeliveredItsList) {
  // The order a restarted controller sees its lists in: policies and nodes first, the pods of
  // a big cluster last. A fence computed in between would drop the policy on every node.
  r_->UpsertPolicy(PolicyJson(true));
  r_->UpsertNode({{"metadata", {{"name", "gpu-1"}}}});
  r_->UpsertNode({{"metadata", {{"name", "gpu-2"}}}});
  for (int i = 0; i < 3; ++i) {
    r_->Step();
    clock_->Advance(std::chrono::milliseconds(1500));
  }
  EXPECT_TRUE(sink_->sent.empty()) << "a fence left before the pods were known";
  EXPECT_TRUE(writer_->statuses.empty()) << "status judged from a partial view";
  EXPECT_FALSE(r_->Synced());
  EXPECT_TRUE(r_->NodeAdmissible("not-a-node-yet"));  // nodes are not known yet

  r_->UpsertPod(PodJson("train", "gpu-1", {{"role", "trainer"}}));
  r_->UpsertPod(PodJson("spin", "gpu-1"));
  r_->Step();
  EXPECT_TRUE(sink_->sent.empty());
  r_->MarkInformersSynced();
  EXPECT_FALSE(r_->Synced());  // not before the full resolution ran
  r_->Step();
  EXPECT_TRUE(r_->Synced());
  EXPECT_EQ(sink_->nodes_known, 1);
  ASSERT_EQ(sink_->sent.size(), 2u);  // every node, once
  for (const auto& f : sink_->sent) {
    if (f.node_name() != "gpu-1") continue;
    ASSERT_EQ(f.policies_size(), 1);
    EXPECT_EQ(f.policies(0).name(), "vision");
    EXPECT_EQ(f.trainers_size(), 1);
    EXPECT_EQ(f.neighbours_size(), 1);
  }
  EXPECT_FALSE(r_->NodeAdmissible("not-a-node"));
  EXPECT_TRUE(r_->NodeAdmissible("gpu-1"));
  EXPECT_FALSE(writer_->statuses.empty());  // status flows from now on
}

TEST_F(StartTest, DeletingPolicyKeepsItsFinalizerUntilNodesAreKnown) {
  // A policy being deleted while the controller was down: before the lists arrive nothing says
  // whether an agent still enforces it, so its finalizer must stay.
  r_->UpsertPolicy(PolicyJson(true, /*deleting=*/true));
  for (int i = 0; i < 3; ++i) {
    r_->Step();
    clock_->Advance(std::chrono::milliseconds(1500));
  }
  EXPECT_TRUE(writer_->removed.empty());
  EXPECT_TRUE(writer_->added.empty());
}

TEST_F(StartTest, DeletedNodeIsForgottenByTheSink) {
  r_->UpsertNode({{"metadata", {{"name", "gpu-1"}}}});
  r_->MarkInformersSynced();
  r_->Step();
  r_->DeleteNode({{"metadata", {{"name", "gpu-1"}}}});
  EXPECT_EQ(sink_->forgotten, std::vector<std::string>{"gpu-1"});
  EXPECT_FALSE(r_->NodeAdmissible("gpu-1"));
}

// ---- no object can crash the controller (issue 13) ----

TEST_F(ReconcilerTest, MalformedObjectsAreSkippedOrInvalidNeverThrown) {
  const json garbage[] = {json(),
                          json(7),
                          json("x"),
                          json::array({1, 2}),
                          json{{"metadata", 5}},
                          json{{"metadata", {{"name", 5}, {"uid", {1}}, {"labels", "x"}}}},
                          json{{"metadata", {{"name", "p"}, {"uid", "u"}}}, {"spec", "x"}},
                          json{{"metadata", {{"name", "p"}, {"uid", "u"}}},
                               {"spec", {{"nodeName", 3}, {"containers", {1, "x", json()}}}}}};
  for (const auto& g : garbage) {
    EXPECT_NO_THROW(r_->UpsertPolicy(g)) << g.dump();
    EXPECT_NO_THROW(r_->UpsertPod(g)) << g.dump();
    EXPECT_NO_THROW(r_->DeletePod(g)) << g.dump();
    EXPECT_NO_THROW(r_->UpsertNode(g)) << g.dump();
    EXPECT_NO_THROW(r_->DeleteNode(g)) << g.dump();
    EXPECT_NO_THROW(r_->UpsertNamespace(g)) << g.dump();
    EXPECT_NO_THROW(r_->DeletePolicy(g)) << g.dump();
  }
  EXPECT_NO_THROW(r_->Step());
  // A named policy with a wrong type inside: Invalid, the message names the field.
  json p = PolicyJson(true);
  p["spec"]["trainers"]["podSelector"]["matchExpressions"] = {{{"key", 7}, {"operator", "In"}}};
  EXPECT_NO_THROW(r_->UpsertPolicy(p));
  EXPECT_NO_THROW(r_->Step());
  ASSERT_FALSE(writer_->statuses["vision"].empty());
  std::string invalid;
  for (const auto& c : writer_->statuses["vision"].back()["conditions"]) {
    if (c["type"] == "Invalid" && c["status"] == "True") invalid = c["message"];
  }
  EXPECT_NE(invalid.find("spec.trainers.podSelector.matchExpressions[0].key: expected string"),
            std::string::npos)
      << invalid;
}

TEST_F(ReconcilerTest, MalformedPreviousStatusDoesNotStopStatusWrites) {
  // The object's status as a looser CRD may hold it: wrong types everywhere.
  json p = PolicyJson(true);
  p["status"] = {{"conditions", {1, {{"type", 3}, {"status", {1}}}, "x"}},
                 {"failures", {{{"node", 1}, {"reason", {}}}, 2}}};
  r_->UpsertPolicy(p);
  EXPECT_NO_THROW(r_->Step());
  EXPECT_EQ(writer_->statuses["vision"].size(), 1u);
}

TEST_F(ReconcilerTest, UnchangedPeriodicReportsDoNotRecomputeStatus) {
  r_->UpsertPolicy(PolicyJson(true));
  r_->UpsertPod(PodJson("train", "gpu-1", {{"role", "trainer"}}));
  r_->Step();
  Ack("gpu-1");
  Ack("gpu-2");
  clock_->Advance(std::chrono::milliseconds(1500));
  r_->Step();
  feedguard::v1::NodeReport report;
  auto* pod = report.add_pods();
  pod->set_uid("uid-train");
  pod->set_policy("vision");
  pod->set_role(feedguard::v1::PodReport::TRAINER);
  pod->set_enforced(true);
  pod->set_cpu_pressure_some_avg10(3.0);
  sink_->agents["gpu-1"].report = report;
  auto step = [&] {
    clock_->Advance(std::chrono::milliseconds(1500));
    r_->Step();
    return r_->stats().status_computes;
  };
  r_->OnReport("gpu-1", report);
  const uint64_t after_first = step();
  // The same report again, and one whose only change is below the starved threshold: nothing
  // the status reads changed.
  r_->OnReport("gpu-1", report);
  EXPECT_EQ(step(), after_first);
  pod->set_cpu_pressure_some_avg10(7.0);
  pod->set_overwrites(4);
  r_->OnReport("gpu-1", report);
  EXPECT_EQ(step(), after_first);
  // Starved now: recomputed.
  pod->set_cpu_pressure_some_avg10(90.0);
  sink_->agents["gpu-1"].report = report;
  r_->OnReport("gpu-1", report);
  EXPECT_EQ(step(), after_first + 1);
  EXPECT_EQ(writer_->statuses["vision"].back()["trainers"]["starved"], 1);
}

TEST_F(ReconcilerTest, HostileReportLeavesStatusWritable) {
  r_->UpsertPolicy(PolicyJson(true));
  r_->UpsertPod(PodJson("train", "gpu-1", {{"role", "trainer"}}));
  r_->Step();
  Ack("gpu-1");
  Ack("gpu-2");
  feedguard::v1::NodeReport report;
  report.set_overwrites_total(UINT64_MAX);
  for (int i = 0; i < 1000; ++i) {
    auto* pod = report.add_pods();
    pod->set_policy("vision");
    pod->set_role(feedguard::v1::PodReport::TRAINER);
    pod->set_enforced(false);
    pod->set_reason(i % 2 ? "not camel case\n" + std::string(300, 'x') : "Bad\xff\xfeReason");
    pod->set_namespace_("ns\xc3");
    pod->set_name(std::string(5000, 'n') + "\x80");
    pod->set_message(std::string(100000, '\xff'));
    pod->set_cpu_pressure_some_avg10(1e308);
    pod->set_overwrites(UINT64_MAX);
  }
  sink_->agents["gpu-1"].report = report;
  r_->OnReport("gpu-1", report);
  clock_->Advance(std::chrono::milliseconds(1500));
  ASSERT_NO_THROW(r_->Step());
  ASSERT_GE(writer_->statuses["vision"].size(), 2u);
  const json& st = writer_->statuses["vision"].back();
  EXPECT_NO_THROW((void)st.dump());
  ASSERT_EQ(st["failures"].size(), 1u);  // one entry per node
  const json& f = st["failures"][0];
  const std::string reason = f["reason"];
  EXPECT_EQ(reason, "AgentReported");
  EXPECT_LE(f["message"].get<std::string>().size(), 1024u);
  EXPECT_EQ(st["nodes"]["failed"], 1);
}

}  // namespace
}  // namespace feedguard::controller
