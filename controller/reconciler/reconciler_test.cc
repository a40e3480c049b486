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
  std::vector<feedguard::v1::NodeFence> sent;
  std::map<std::string, Agent> agents;
};

class FakeWriter : public PolicyWriter {
 public:
  Status WriteStatus(const std::string& name, const json& status) override {
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

}  // namespace
}  // namespace feedguard::controller
