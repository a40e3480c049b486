#include "controller/reconciler/reconciler.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace feedguard::controller {
namespace {

using nlohmann::json;

class FakeSink : public FenceSink {
 public:
  Status SetDesired(NodeFencePtr fence) override {
    sent.push_back(fence->Parse());
    agents[fence->node_name()].desired_version = fence->version();
    return OkStatus();
  }
  // As DistributorSink: an agent that never said hello is absent.
  std::optional<AgentView> GetAgent(const std::string& node) const override {
    auto it = agents.find(node);
    if (it == agents.end() || hello.count(node) == 0) return std::nullopt;
    return it->second;
  }
  void Forget(const std::string& node) override { forgotten.push_back(node); }
  void OnNodesKnown() override { ++nodes_known; }
  std::vector<feedguard::v1::NodeFence> sent;
  std::map<std::string, AgentView> agents;
  std::set<std::string> hello;  // nodes whose agent connected at least once
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
    sink_->hello.insert(node);
    a.acked_version = a.desired_version;
    r_->OnAck(node, a.desired_version);
  }
  std::shared_ptr<FakeSink> sink_ = std::make_shared<FakeSink>();
  std::shared_ptr<FakeWriter> writer_ = std::make_shared<FakeWriter>();
  std::shared_ptr<ManualTimeSource> clock_;
  ReconcilerPtr r_;
};

// The reconciler keeps no fence the sink dropped (its agent acknowledged it), only its digest and
// version: a resolution that did not change sends nothing, and a sink that asks for the fence
// again (a new stream) gets the same version with the same bytes.
TEST_F(ReconcilerTest, AFenceTheSinkDroppedIsHandedBackUnderTheSameVersion) {
  r_->UpsertPolicy(PolicyJson(true));
  r_->UpsertPod(PodJson("train", "gpu-1", {{"role", "trainer"}}));
  r_->UpsertPod(PodJson("spin", "gpu-1"));
  r_->Step();
  auto first = std::find_if(sink_->sent.begin(), sink_->sent.end(),
                            [](const auto& f) { return f.node_name() == "gpu-1"; });
  ASSERT_NE(first, sink_->sent.end());
  const feedguard::v1::NodeFence sent = *first;
  Ack("gpu-1");
  sink_->sent.clear();

  r_->UpsertPod(PodJson("spin", "gpu-1"));  // the same pod again: the same fence
  r_->Step();
  EXPECT_TRUE(sink_->sent.empty()) << "an unchanged resolution is not sent";

  r_->OnFenceWanted("gpu-1", sent.version());
  r_->OnFenceWanted("gpu-9", 1);  // no such node: nothing
  r_->Step();
  ASSERT_EQ(sink_->sent.size(), 1u);
  EXPECT_EQ(sink_->sent[0].version(), sent.version()) << "the same version";
  EXPECT_EQ(sink_->sent[0].SerializeAsString(), sent.SerializeAsString()) << "the same bytes";
  sink_->sent.clear();
  r_->Step();
  EXPECT_TRUE(sink_->sent.empty()) << "asked once, sent once";

  // Wanted while the pods changed: the new fence, under a new version.
  r_->OnFenceWanted("gpu-1", sent.version());
  r_->DeletePod(PodJson("spin", "gpu-1"));
  r_->Step();
  ASSERT_EQ(sink_->sent.size(), 1u);
  EXPECT_GT(sink_->sent[0].version(), sent.version());
  EXPECT_EQ(sink_->sent[0].neighbours_size(), 0);
}

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

// A native sidecar (an init container with restartPolicy: Always) reaches the agent as a
// container of its pod, id and all, and counts in the pod's request: the agent lifts its own
// quota under a Quota fence and pins or confines it with the pod like any other container.
TEST_F(ReconcilerTest, NativeSidecarsReachTheAgentAsContainersOfTheirPod) {
  r_->UpsertPolicy(PolicyJson(true));
  r_->UpsertPod(PodJson("train", "gpu-1", {{"role", "trainer"}}));
  json pod = PodJson("web", "gpu-1");
  pod["spec"]["containers"][0]["resources"] = {{"limits", {{"cpu", "1"}}}};
  pod["spec"]["initContainers"] = {
      {{"name", "mesh"}, {"restartPolicy", "Always"}, {"resources", {{"limits", {{"cpu", "2"}}}}}}};
  pod["status"]["qosClass"] = "Burstable";
  pod["status"]["containerStatuses"] = {{{"name", "main"}, {"containerID", "containerd://aaaa"}}};
  pod["status"]["initContainerStatuses"] = {
      {{"name", "mesh"}, {"containerID", "containerd://eeee"}}};
  r_->UpsertPod(pod);
  r_->Step();
  auto fence = r_->DesiredFence("gpu-1");
  ASSERT_TRUE(fence.has_value());
  ASSERT_EQ(fence->neighbours_size(), 1);
  const auto& ref = fence->neighbours(0).pod();
  ASSERT_EQ(ref.containers_size(), 2);
  EXPECT_EQ(ref.containers(0).container_id(), "containerd://aaaa");
  EXPECT_EQ(ref.containers(1).name(), "mesh");
  EXPECT_EQ(ref.containers(1).container_id(), "containerd://eeee");
  EXPECT_EQ(ref.cpu_request_milli(), 3000);
  EXPECT_EQ(ref.cpu_limit_milli(), 3000);
  // The sidecar starting later (its id appears in initContainerStatuses) re-sends the fence.
  const size_t sent = sink_->sent.size();
  pod["status"]["initContainerStatuses"][0]["containerID"] = "containerd://ffff";
  r_->UpsertPod(pod);
  r_->Step();
  ASSERT_EQ(sink_->sent.size(), sent + 1);
  EXPECT_EQ(r_->DesiredFence("gpu-1")->neighbours(0).pod().containers(1).container_id(),
            "containerd://ffff");
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

// An agent that disconnects keeps its last answer through the grace period; when the
// distributor reports it stale (no event of its own), the next pass rewrites the status.
TEST_F(ReconcilerTest, DisconnectedNodeTurnsStaleAfterTheGracePeriod) {
  r_->UpsertPolicy(PolicyJson(true));
  r_->UpsertPod(PodJson("train", "gpu-1", {{"role", "trainer"}}));
  r_->Step();
  Ack("gpu-1");
  Ack("gpu-2");
  clock_->Advance(std::chrono::milliseconds(1500));
  r_->Step();
  EXPECT_EQ(writer_->statuses["vision"].back()["nodes"]["enforced"], 2);
  const size_t writes = writer_->statuses["vision"].size();

  sink_->agents["gpu-1"].connected = false;
  r_->OnDisconnected("gpu-1");
  clock_->Advance(std::chrono::milliseconds(1500));
  r_->Step();  // within the grace period: still enforced, nothing new to write
  EXPECT_EQ(writer_->statuses["vision"].size(), writes);
  EXPECT_EQ(writer_->statuses["vision"].back()["nodes"]["stale"], 0);

  sink_->agents["gpu-1"].stale = true;  // the grace period ended
  clock_->Advance(std::chrono::milliseconds(1500));
  r_->Step();
  ASSERT_EQ(writer_->statuses["vision"].size(), writes + 1);
  EXPECT_EQ(writer_->statuses["vision"].back()["nodes"]["stale"], 1);
  EXPECT_EQ(writer_->statuses["vision"].back()["nodes"]["enforced"], 1);

  sink_->agents["gpu-1"].stale = false;
  Ack("gpu-1");
  r_->OnConnected("gpu-1", {});
  clock_->Advance(std::chrono::milliseconds(1500));
  r_->Step();
  EXPECT_EQ(writer_->statuses["vision"].back()["nodes"]["stale"], 0);
  EXPECT_EQ(writer_->statuses["vision"].back()["nodes"]["enforced"], 2);
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

TEST_F(StartTest, AfterARestartTheFinalizerWaitsForConnectedAgentsToAcknowledge) {
  // A restarted controller does not know what its agents hold from the last leader: a policy
  // deleted meanwhile keeps its finalizer until every connected agent acknowledged a fence from
  // this process; a node whose agent is not connected does not block.
  r_->UpsertPolicy(PolicyJson(true, /*deleting=*/true));
  r_->UpsertNode({{"metadata", {{"name", "gpu-1"}}}});
  r_->UpsertNode({{"metadata", {{"name", "gpu-2"}}}});
  r_->OnConnected("gpu-1", {});
  r_->MarkInformersSynced();
  r_->Step();
  ASSERT_EQ(sink_->sent.size(), 2u);
  for (int i = 0; i < 3; ++i) {
    clock_->Advance(std::chrono::milliseconds(1500));
    r_->Step();
  }
  EXPECT_TRUE(writer_->removed.empty()) << "finalizer removed before gpu-1 acknowledged";
  r_->OnAck("gpu-1", sink_->agents["gpu-1"].desired_version);
  clock_->Advance(std::chrono::milliseconds(1500));
  r_->Step();
  EXPECT_EQ(writer_->removed, std::vector<std::string>{"vision"});
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
  r_->OnReport("gpu-1", report);
  EXPECT_EQ(step(), after_first + 1);
  EXPECT_EQ(writer_->statuses["vision"].back()["trainers"]["starved"], 1);
}

// The status follows the node's latest report, not the fence it last acknowledged: an Idle
// fence lifted for kubelet's in-place resize (ResizePending) and put back by the agent without a
// new fence version reads enforced again as soon as the agent's next report says so.
TEST_F(ReconcilerTest, StatusFollowsTheNodesLatestReportWithoutANewFence) {
  r_->UpsertPolicy(PolicyJson(true));
  r_->UpsertPod(PodJson("train", "gpu-1", {{"role", "trainer"}}));
  r_->UpsertPod(PodJson("spin", "gpu-1"));
  r_->Step();
  Ack("gpu-1");
  Ack("gpu-2");
  feedguard::v1::NodeReport report;
  report.set_applied_version(sink_->agents["gpu-1"].acked_version);
  auto* trainer = report.add_pods();
  trainer->set_uid("uid-train");
  trainer->set_policy("vision");
  trainer->set_role(feedguard::v1::PodReport::TRAINER);
  trainer->set_enforced(true);
  auto* spin = report.add_pods();
  spin->set_uid("uid-spin");
  spin->set_namespace_("ml");
  spin->set_name("spin");
  spin->set_policy("vision");
  spin->set_role(feedguard::v1::PodReport::NEIGHBOUR);
  spin->set_reason("ResizePending");
  spin->set_message("kubelet is resizing this pod in place");
  r_->OnReport("gpu-1", report);
  clock_->Advance(std::chrono::milliseconds(1500));
  r_->Step();
  json st = writer_->statuses["vision"].back();
  EXPECT_EQ(st["nodes"]["enforced"], 1) << st.dump();  // the empty gpu-2 only
  EXPECT_EQ(st["nodes"]["failed"], 1) << st.dump();
  ASSERT_EQ(st["failures"].size(), 1u) << st.dump();
  EXPECT_EQ(st["failures"][0]["reason"], "ResizePending");
  // The agent re-fenced the pod (kubelet's write landed): same fence version, no ACK, a report.
  spin->set_enforced(true);
  spin->clear_reason();
  spin->clear_message();
  r_->OnReport("gpu-1", report);
  clock_->Advance(std::chrono::milliseconds(1500));
  r_->Step();
  st = writer_->statuses["vision"].back();
  EXPECT_EQ(st["nodes"]["enforced"], 2) << st.dump();
  EXPECT_EQ(st["nodes"]["failed"], 0) << st.dump();
  EXPECT_EQ(st["neighbours"]["fenced"], 1) << st.dump();
  EXPECT_TRUE(st["failures"].empty()) << st.dump();
  for (const auto& c : st["conditions"]) {
    if (c["type"] == "Ready") {
      EXPECT_EQ(c["status"], "True") << st.dump();
    }
  }
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

// Failed writes are retried per key with a growing delay (10 ms, 20 ms, 40 ms, ...), not on
// every 10 ms pass; a success resets the key and other keys are never held up.
class FlakyWriter : public FakeWriter {
 public:
  Status AddFinalizer(const std::string& name) override {
    FakeWriter::AddFinalizer(name).IgnoreError();  // records the attempt
    return fail_add-- > 0 ? Unavailable("apiserver down") : OkStatus();
  }
  Status WriteStatus(const std::string& name, const json& status) override {
    ++status_attempts;
    if (fail_status-- > 0) return Unavailable("apiserver down");
    return FakeWriter::WriteStatus(name, status);
  }
  int fail_add = 0;
  int fail_status = 0;
  int status_attempts = 0;
};

class FlakySink : public FakeSink {
 public:
  Status SetDesired(NodeFencePtr fence) override {
    attempts.push_back(fence->node_name());
    if (fence->node_name() == fail_node && fail-- > 0) return Unavailable("no slot");
    return FakeSink::SetDesired(std::move(fence));
  }
  std::string fail_node;
  int fail = 0;
  std::vector<std::string> attempts;
};

TEST(ReconcilerRetryTest, FailedWritesBackOffPerKey) {
  auto clock = std::make_shared<ManualTimeSource>();
  auto sink = std::make_shared<FlakySink>();
  auto writer = std::make_shared<FlakyWriter>();
  sink->fail_node = "gpu-1";
  sink->fail = 3;
  writer->fail_add = 3;
  ReconcilerOptions o;
  o.clock = clock;
  auto r = std::make_shared<Reconciler>(sink, writer, o);
  r->UpsertNode({{"metadata", {{"name", "gpu-1"}}}});
  r->UpsertNode({{"metadata", {{"name", "gpu-2"}}}});
  r->MarkInformersSynced();
  r->UpsertPolicy(PolicyJson(false));
  r->UpsertPod(PodJson("train", "gpu-1", {{"role", "trainer"}}));

  // Passes every 5 ms for 200 ms: failures at 0, 10, 30 ms; the 4th try (at 70 ms) succeeds.
  std::vector<int64_t> add_at, fence_at;
  for (int64_t t = 0; t <= 200; t += 5) {
    const size_t adds = writer->added.size();
    const size_t sets = sink->attempts.size();
    r->Step();
    if (writer->added.size() > adds) add_at.push_back(t);
    for (size_t i = sets; i < sink->attempts.size(); ++i) {
      if (sink->attempts[i] == "gpu-1") fence_at.push_back(t);
    }
    clock->Advance(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(add_at, (std::vector<int64_t>{0, 10, 30, 70}));
  EXPECT_EQ(fence_at, (std::vector<int64_t>{0, 10, 30, 70}));
  // gpu-2 got its fence on the first pass, once: not held up by gpu-1's failures.
  EXPECT_EQ(std::count(sink->attempts.begin(), sink->attempts.end(), "gpu-2"), 1);
  ASSERT_TRUE(r->DesiredFence("gpu-1").has_value());
  EXPECT_EQ(sink->sent.back().node_name(), "gpu-1");
  EXPECT_EQ(r->DesiredFence("gpu-1")->trainers_size(), 1);
}

TEST(ReconcilerRetryTest, FailedStatusWritesBackOffPerPolicy) {
  auto clock = std::make_shared<ManualTimeSource>();
  auto sink = std::make_shared<FakeSink>();
  auto writer = std::make_shared<FlakyWriter>();
  writer->fail_status = 3;
  ReconcilerOptions o;
  o.clock = clock;
  o.status_interval = std::chrono::milliseconds(0);  // pacing by the backoff alone
  auto r = std::make_shared<Reconciler>(sink, writer, o);
  r->UpsertNode({{"metadata", {{"name", "gpu-1"}}}});
  r->MarkInformersSynced();
  r->UpsertPolicy(PolicyJson(true));
  // Passes every 5 ms: failures at 0, 10, 30 ms; the 4th write (at 70 ms) lands, then no more.
  std::vector<int64_t> write_at;
  for (int64_t t = 0; t <= 200; t += 5) {
    const int before = writer->status_attempts;
    r->Step();
    if (writer->status_attempts > before) write_at.push_back(t);
    clock->Advance(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(write_at, (std::vector<int64_t>{0, 10, 30, 70}));
  EXPECT_EQ(writer->statuses["vision"].size(), 1u);
}

// The emergency off switch (issue 13, item 9): the annotation on the agent namespace withdraws
// every fence, says so in status and Events, and clearing it re-applies.
json Cond(const json& st, const std::string& type) {
  for (const auto& c : st["conditions"]) {
    if (c["type"] == type) return c;
  }
  return json();
}

TEST_F(ReconcilerTest, ADeletionWaitingForANodeWithoutAgentSaysSoAndHowToStopWaiting) {
  // Issue 28, item 8: `kubectl delete fp` hung without a word while a node that applied the
  // policy had no connected agent.
  r_->UpsertPolicy(PolicyJson(true));
  r_->UpsertPod(PodJson("train", "gpu-1", {{"role", "trainer"}}));
  r_->Step();
  Ack("gpu-1");
  Ack("gpu-2");
  r_->Step();
  sink_->agents["gpu-1"].connected = false;  // its agent is gone
  r_->OnDisconnected("gpu-1");
  r_->UpsertPolicy(PolicyJson(true, /*deleting=*/true));
  clock_->Advance(std::chrono::seconds(2));
  r_->Step();
  EXPECT_TRUE(writer_->removed.empty());
  ASSERT_FALSE(writer_->statuses["vision"].empty());
  json st = writer_->statuses["vision"].back();
  const json c = Cond(st, "Reverting");
  ASSERT_FALSE(c.is_null()) << st.dump();
  EXPECT_EQ(c["status"], "True");
  EXPECT_EQ(c["reason"], "WaitingForNodes");
  const std::string msg = c["message"].get<std::string>();
  EXPECT_NE(msg.find("without a connected agent (each reverts once its agent reconnects): gpu-1"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("kubectl patch fencepolicy vision --type=json"), std::string::npos) << msg;
  // Written once, not on every pass.
  const size_t writes = writer_->statuses["vision"].size();
  clock_->Advance(std::chrono::seconds(2));
  r_->Step();
  EXPECT_EQ(writer_->statuses["vision"].size(), writes);
  // The agent comes back and acknowledges the fence without the policy: the finalizer goes.
  Ack("gpu-1");
  r_->OnConnected("gpu-1", {});
  r_->Step();
  EXPECT_EQ(writer_->removed, std::vector<std::string>{"vision"});
}

TEST_F(ReconcilerTest, OffSwitchWithdrawsEveryFenceSaysSoAndReapplies) {
  const std::string ns = ReconcilerOptions().rails.agent_namespace;
  ASSERT_FALSE(ns.empty());
  r_->UpsertPolicy(PolicyJson(true));
  r_->UpsertPod(PodJson("train", "gpu-1", {{"role", "trainer"}}));
  r_->UpsertPod(PodJson("spin", "gpu-1"));
  r_->Step();
  Ack("gpu-1");
  Ack("gpu-2");
  clock_->Advance(std::chrono::seconds(2));
  r_->Step();
  ASSERT_EQ(r_->DesiredFence("gpu-1")->policies_size(), 1);
  EXPECT_EQ(Cond(writer_->statuses["vision"].back(), "Ready")["status"], "True");
  EXPECT_FALSE(r_->Suspended());

  // Another namespace's annotation, or a spelling of false, is no switch.
  r_->UpsertNamespace(
      {{"metadata", {{"name", "ml"}, {"annotations", {{kSuspendAnnotation, "true"}}}}}});
  r_->UpsertNamespace(
      {{"metadata", {{"name", ns}, {"annotations", {{kSuspendAnnotation, "false"}}}}}});
  r_->Step();
  EXPECT_FALSE(r_->Suspended());
  EXPECT_EQ(r_->DesiredFence("gpu-1")->policies_size(), 1);

  // On: every node gets a fence without policies.
  r_->UpsertNamespace(
      {{"metadata", {{"name", ns}, {"annotations", {{kSuspendAnnotation, "true"}}}}}});
  EXPECT_TRUE(r_->Suspended());
  clock_->Advance(std::chrono::seconds(2));
  r_->Step();
  for (const std::string node : {"gpu-1", "gpu-2"}) {
    auto f = r_->DesiredFence(node);
    ASSERT_TRUE(f);
    EXPECT_EQ(f->policies_size(), 0) << node;
    EXPECT_EQ(f->trainers_size() + f->neighbours_size(), 0) << node;
  }
  json st = writer_->statuses["vision"].back();
  EXPECT_EQ(Cond(st, "Suspended")["status"], "True");
  EXPECT_EQ(Cond(st, "Ready")["status"], "False");
  EXPECT_EQ(Cond(st, "Ready")["reason"], "Suspended");
  EXPECT_NE(Cond(st, "Suspended")["message"].get<std::string>().find("1 nodes still hold"),
            std::string::npos)
      << st.dump();
  EXPECT_NE(std::find(writer_->events.begin(), writer_->events.end(), "vision/Warning/Suspended"),
            writer_->events.end());
  EXPECT_TRUE(writer_->removed.empty());  // the policy and its finalizer stay

  // The agent acknowledges the withdrawal: status says every node reverted.
  Ack("gpu-1");
  clock_->Advance(std::chrono::seconds(2));
  r_->Step();
  st = writer_->statuses["vision"].back();
  EXPECT_NE(Cond(st, "Suspended")["message"].get<std::string>().find("every node reverted"),
            std::string::npos)
      << st.dump();
  EXPECT_NE(std::find(writer_->events.begin(), writer_->events.end(), "vision/Normal/Withdrawn"),
            writer_->events.end());

  // Off again: the policy comes back on gpu-1, the Suspended condition goes.
  r_->UpsertNamespace({{"metadata", {{"name", ns}, {"annotations", json::object()}}}});
  EXPECT_FALSE(r_->Suspended());
  clock_->Advance(std::chrono::seconds(2));
  r_->Step();
  EXPECT_EQ(r_->DesiredFence("gpu-1")->policies_size(), 1);
  EXPECT_EQ(r_->DesiredFence("gpu-1")->neighbours_size(), 1);
  Ack("gpu-1");
  clock_->Advance(std::chrono::seconds(2));
  r_->Step();
  st = writer_->statuses["vision"].back();
  EXPECT_TRUE(Cond(st, "Suspended").is_null()) << st.dump();
  EXPECT_EQ(Cond(st, "Ready")["status"], "True");
  EXPECT_NE(std::find(writer_->events.begin(), writer_->events.end(), "vision/Normal/Resumed"),
            writer_->events.end());
}

TEST_F(ReconcilerTest, OffSwitchTakesTheUsualSpellingsOfTrueAndNamesAnUnknownValue) {
  // Issue 28, item 8: feedguard.io/suspend=True (or 1, yes) left fencing on.
  const std::string ns = ReconcilerOptions().rails.agent_namespace;
  auto annotate = [&](const std::string& v) {
    r_->UpsertNamespace({{"metadata", {{"name", ns}, {"annotations", {{kSuspendAnnotation, v}}}}}});
  };
  for (const std::string v : {"true", "True", "TRUE", "1", "yes", "Yes", "on", " true "}) {
    annotate(v);
    EXPECT_TRUE(r_->Suspended()) << "'" << v << "'";
    annotate("false");
    EXPECT_FALSE(r_->Suspended()) << "'" << v << "' then false";
  }
  for (const std::string v : {"false", "False", "0", "no", "off"}) {
    annotate(v);
    EXPECT_FALSE(r_->Suspended()) << "'" << v << "'";
  }
  // A typo suspends too (whoever annotated meant to stop fencing), and the status names it.
  r_->UpsertPolicy(PolicyJson(true));
  r_->UpsertPod(PodJson("train", "gpu-1", {{"role", "trainer"}}));
  annotate("ture");
  EXPECT_TRUE(r_->Suspended());
  clock_->Advance(std::chrono::seconds(2));
  r_->Step();
  EXPECT_EQ(r_->DesiredFence("gpu-1")->policies_size(), 0);
  const json st = writer_->statuses["vision"].back();
  const std::string msg = Cond(st, "Suspended")["message"].get<std::string>();
  EXPECT_NE(msg.find("\"ture\" is no spelling of true or false"), std::string::npos) << msg;
  EXPECT_EQ(ParseSuspendValue("ture"), SuspendValue::kUnrecognised);
  EXPECT_EQ(ParseSuspendValue(""), SuspendValue::kOff);  // an emptied annotation
}

TEST_F(ReconcilerTest, AFenceTooLargeForTheAgentsIsNotSentAndSaysSo) {
  // Issue 28, item 2: 11 pods x 6,000 containers made one node's fence 4.42 MB, every send was
  // refused by the agent (4 MiB), and the node read as enforced on its old fence. Here with a
  // small limit: the fence is not sent, the node keeps its last one and is reported failing.
  ReconcilerOptions o;
  o.clock = clock_;
  o.max_fence_bytes = 1500;
  auto r = std::make_shared<Reconciler>(sink_, writer_, o);
  r->UpsertNode({{"metadata", {{"name", "gpu-1"}}}});
  r->UpsertPolicy(PolicyJson(true));
  r->UpsertPod(PodJson("train", "gpu-1", {{"role", "trainer"}}));
  r->UpsertPod(PodJson("spin", "gpu-1"));
  r->MarkInformersSynced();
  r->Step();
  ASSERT_EQ(sink_->sent.size(), 1u);
  const uint64_t v1 = sink_->sent.back().version();
  Ack("gpu-1");
  r->OnAck("gpu-1", v1);
  json wide = PodJson("wide", "gpu-1");
  for (int i = 0; i < 40; ++i) {
    wide["spec"]["containers"].push_back({{"name", "c" + std::to_string(i)}});
    wide["status"]["containerStatuses"].push_back(
        {{"name", "c" + std::to_string(i)},
         {"containerID", "containerd://" + std::string(64, 'a' + static_cast<char>(i % 26))}});
  }
  r->UpsertPod(wide);
  clock_->Advance(std::chrono::seconds(2));
  r->Step();
  EXPECT_EQ(sink_->sent.size(), 1u) << "a fence over the limit went out";
  EXPECT_EQ(r->DesiredFence("gpu-1")->version(), v1);  // the agent keeps its last one
  json st = writer_->statuses["vision"].back();
  EXPECT_EQ(st["nodes"]["failed"], 1) << st.dump();
  EXPECT_EQ(st["nodes"]["enforced"], 0);
  ASSERT_EQ(st["failures"].size(), 1u);
  EXPECT_EQ(st["failures"][0]["reason"], "FenceTooLarge");
  EXPECT_NE(st["failures"][0]["message"].get<std::string>().find("over the 1500"),
            std::string::npos)
      << st.dump();
  // The pod goes: the fence fits again. It is the one the agent kept (nothing to send), and the
  // failure goes.
  r->DeletePod(wide);
  clock_->Advance(std::chrono::seconds(2));
  r->Step();
  EXPECT_EQ(sink_->sent.size(), 1u);
  st = writer_->statuses["vision"].back();
  EXPECT_EQ(st["failures"].size(), 0u) << st.dump();
  EXPECT_EQ(st["nodes"]["enforced"], 1);
}

TEST_F(ReconcilerTest, SuspendFlagHoldsRegardlessOfTheAnnotation) {
  ReconcilerOptions o;
  o.clock = clock_;
  o.suspended = true;
  auto r = std::make_shared<Reconciler>(sink_, writer_, o);
  r->UpsertNode({{"metadata", {{"name", "gpu-1"}}}});
  r->UpsertPolicy(PolicyJson(true));
  r->UpsertPod(PodJson("train", "gpu-1", {{"role", "trainer"}}));
  r->UpsertPod(PodJson("spin", "gpu-1"));
  r->MarkInformersSynced();
  r->UpsertNamespace({{"metadata", {{"name", o.rails.agent_namespace}}}});
  r->Step();
  EXPECT_TRUE(r->Suspended());
  EXPECT_EQ(r->DesiredFence("gpu-1")->policies_size(), 0);
}

}  // namespace
}  // namespace feedguard::controller
