#include "agent/engine/node_engine.h"

#include <gtest/gtest.h>

#include <chrono>
#include <sstream>

#include <spdlog/logger.h>
#include <spdlog/sinks/ostream_sink.h>

#include "agent/enforcer/fake_node.h"
#include "agent/engine/engine_testing.h"
#include "agent/observe/observe_loop.h"
#include "agent/topology/topology.h"
#include "tests/fixtures/temp_dir.h"

namespace feedguard::agent {
namespace {

using cgroup::CgroupVersion;
using cgroup::KubeletDriver;
using testutil::FakeNode;
using testutil::Put;
using testutil::Slurp;
namespace v1 = feedguard::v1;

v1::PodRef Ref(const PodIdentity& p) {
  v1::PodRef r;
  r.set_uid(p.uid);
  r.set_namespace_(p.ns);
  r.set_name(p.name);
  r.set_qos_class(p.qos == QosClass::kGuaranteed   ? v1::GUARANTEED
                  : p.qos == QosClass::kBestEffort ? v1::BEST_EFFORT
                                                   : v1::BURSTABLE);
  for (const auto& id : p.container_ids) r.add_containers()->set_container_id(id);
  return r;
}

// One trainer and two Burstable neighbours on a fake v1 node (cgroupfs layout), a 1-socket
// SMT-2 topology, and an engine wired as the agent wires it (no kubelet, no NVIDIA driver).
class NodeEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StartEngine();

    trainer_ = node_.AddPod("aaaaaaaa-0001", QosClass::kBurstable, {"t1"}, "ml");
    n1_ = node_.AddPod("bbbbbbbb-0001", QosClass::kBurstable, {"n1"}, "batch");
    n2_ = node_.AddPod("bbbbbbbb-0002", QosClass::kBurstable, {"n2"}, "batch");
  }

  // As the agent starts: checkpoint store opened (locked) in the state dir, then the engine
  // over the same dir. Call again after engine_.reset() to simulate an agent restart.
  void StartEngine(std::shared_ptr<spdlog::logger> decision_log = nullptr) {
    auto o = testutil::FakeNodeEngineOptions(
        node_, std::string(FEEDGUARD_TOPOLOGY_FIXTURES) + "/ws-1s-1gpu.xml");
    ASSERT_TRUE(o.enforcer);
    o.state_dir = node_.state_dir();
    o.decision_log = std::move(decision_log);
    engine_ = std::make_shared<NodeEngine>(std::move(o));
  }

  v1::NodeFence Fence(uint64_t version, std::vector<PodIdentity> neighbours,
                      bool dry_run = false) const {
    v1::NodeFence f;
    f.set_node_name("node-a");
    f.set_version(version);
    auto* p = f.add_policies();
    p->set_name("p");
    p->set_mode(dry_run ? v1::DRY_RUN : v1::ENFORCE);
    p->set_neighbour_fence(v1::IDLE);
    auto* t = f.add_trainers();
    *t->mutable_pod() = Ref(trainer_);
    t->set_policy("p");
    for (const auto& n : neighbours) {
      auto* nb = f.add_neighbours();
      *nb->mutable_pod() = Ref(n);
      nb->set_policy("p");
    }
    return f;
  }

  void SetUsage(const PodIdentity& p, uint64_t ns) {
    Put(node_.CpuacctFile(p, "cpuacct.usage"), std::to_string(ns) + "\n");
  }

  FakeNode node_{CgroupVersion::kV1, KubeletDriver::kCgroupfs};
  NodeEnginePtr engine_;
  PodIdentity trainer_, n1_, n2_;
};

TEST_F(NodeEngineTest, AppliesIdleFenceAndReportsEveryPod) {
  auto report = engine_->Apply(Fence(3, {n1_, n2_}));
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->applied_version(), 3u);
  ASSERT_EQ(report->pods_size(), 3);
  int neighbours = 0;
  for (const auto& p : report->pods()) {
    if (p.role() != v1::PodReport::NEIGHBOUR) continue;
    ++neighbours;
    EXPECT_TRUE(p.enforced()) << p.uid() << ": " << p.reason() << " " << p.message();
  }
  EXPECT_EQ(neighbours, 2);
  EXPECT_EQ(Slurp(node_.CpuFile(n1_, "cpu.idle")), "1");
  EXPECT_EQ(Slurp(node_.CpuFile(n2_, "cpu.idle")), "1");
  EXPECT_EQ(Slurp(node_.CpuFile(trainer_, "cpu.idle")), "0\n");  // trainers are never idled

  engine_->RevertAll();
  EXPECT_EQ(Slurp(node_.CpuFile(n1_, "cpu.idle")), "0\n");
  EXPECT_EQ(Slurp(node_.CpuFile(n2_, "cpu.idle")), "0\n");
}

TEST_F(NodeEngineTest, TrainerWeightFromThePolicyIsWrittenAndReverted) {
  auto fence = Fence(4, {n1_});
  fence.mutable_policies(0)->mutable_trainer_cpu()->set_weight(10000);
  const std::string shares = node_.CpuFile(trainer_, "cpu.shares");
  const std::string before = Slurp(shares);
  auto report = engine_->Apply(fence);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(Slurp(shares), "262144");  // v2 weight 10000 ↔ v1 shares 262144
  EXPECT_EQ(Slurp(node_.CpuFile(n1_, "cpu.idle")), "1");
  engine_->RevertAll();
  EXPECT_EQ(Slurp(shares), before);
}

// The policy switched from Enforce to DryRun: the agent restores kubelet's bytes and reports
// every pod as planned (what Enforce would do), which the controller's status counts, not as
// failures.
TEST_F(NodeEngineTest, DryRunAfterEnforceRestoresAndReportsPlannedPods) {
  const std::string idle = node_.CpuFile(n1_, "cpu.idle");
  const std::string before = Slurp(idle);
  ASSERT_TRUE(engine_->Apply(Fence(5, {n1_, n2_})).ok());
  ASSERT_EQ(Slurp(idle), "1");
  auto report = engine_->Apply(Fence(6, {n1_, n2_}, /*dry_run=*/true));
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->dry_run());
  EXPECT_EQ(Slurp(idle), before);
  EXPECT_EQ(Slurp(node_.CpuFile(n2_, "cpu.idle")), before);
  ASSERT_EQ(report->pods_size(), 3);
  for (const auto& p : report->pods()) {
    EXPECT_FALSE(p.enforced()) << p.uid();
    EXPECT_TRUE(p.planned()) << p.uid() << ": " << p.reason();
    EXPECT_EQ(p.reason(), "DryRun") << p.uid();
  }
  // Enforce again: the same fence from the same originals.
  ASSERT_TRUE(engine_->Apply(Fence(7, {n1_, n2_})).ok());
  EXPECT_EQ(Slurp(idle), "1");
  auto enforced = engine_->Apply(Fence(8, {n1_, n2_}));
  ASSERT_TRUE(enforced.ok()) << enforced.status().ToString();
  for (const auto& p : enforced->pods()) EXPECT_FALSE(p.planned()) << p.uid();
}

TEST(ParseNodeFenceTest, TrainerWeightOutsideTheKernelRangeIsRejected) {
  const std::string head = R"({"nodeName":"n","version":"1","policies":[{"name":"p",)";
  EXPECT_TRUE(ParseNodeFence(head + R"("trainerCpu":{"weight":10000}}]})", "t").ok());
  EXPECT_TRUE(ParseNodeFence(head + R"("trainerCpu":{}}]})", "t").ok());
  for (const char* bad :
       {R"("trainerCpu":{"weight":10001}}]})", R"("trainerCpu":{"weight":-5}}]})"}) {
    auto r = ParseNodeFence(head + bad, "t");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("trainerCpu.weight must be 0 (unset) or 1..10000"),
              std::string::npos)
        << r.status().ToString();
  }
}

TEST(ParseNodeFenceTest, YamlAnchorBombIsRefusedFast) {
  // Each level doubles the last: 2^40 scalars once expanded, from a few hundred bytes.
  std::string y = "a0: &a0 [x, x]\n";
  for (int i = 1; i <= 40; ++i) {
    y += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [*a" + std::to_string(i - 1) +
         ", *a" + std::to_string(i - 1) + "]\n";
  }
  ASSERT_LT(y.size(), 1200u);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = ParseNodeFence(y, "bomb.yaml");
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("YAML refused"), std::string::npos) << r.status().ToString();
  // Generous bound for a loaded 2-core machine; unbounded it took 108 s and 964 MB.
  EXPECT_LT(std::chrono::duration_cast<std::chrono::seconds>(took).count(), 10);
  std::string deep;
  for (int i = 0; i < 200; ++i) deep += "[";
  EXPECT_FALSE(ParseNodeFence("a: " + deep, "deep.yaml").ok());
  EXPECT_FALSE(ParseNodeFence(std::string(9u << 20, ' ') + "{}", "huge").ok());
}

// A byte bomb: one large scalar under 1,000 aliases (a NodeFence-shaped file of 1 or 4 MiB).
// Unbounded, 1 MiB took 8.6 s and 2 GB to convert and 4 MiB aborted with bad_alloc; the
// expanded bytes are bounded before anything is copied.
TEST(ParseNodeFenceTest, YamlByteBombIsRefusedByItsExpandedBytes) {
  for (size_t mib : {1u, 4u}) {
    std::string y = "nodeName: &a \"" + std::string(mib << 20, 'n') + "\"\npolicies:\n";
    for (int i = 0; i < 1000; ++i) y += "  - {name: *a}\n";
    const auto t0 = std::chrono::steady_clock::now();
    auto r = ParseNodeFence(y, "bytes.yaml");
    const auto took = std::chrono::steady_clock::now() - t0;
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("bytes of keys and scalars once aliases are expanded"),
              std::string::npos)
        << r.status().ToString().substr(0, 300);
    EXPECT_NE(r.status().message().find("bytes.yaml"), std::string::npos);
    // Generous for a loaded 2-core machine (measured: well under a second).
    EXPECT_LT(std::chrono::duration_cast<std::chrono::seconds>(took).count(), 10);
  }
}

TEST(ParseNodeFenceTest, NegativeCpuMilliIsRejected) {
  const std::string head =
      R"({"nodeName":"n","version":"1","policies":[{"name":"p"}],"neighbours":[{"policy":"p","pod":{"uid":"u","namespace":"ns","name":"x",)";
  EXPECT_TRUE(ParseNodeFence(head + R"("cpuRequestMilli":"5"}}]})", "t").ok());
  for (const char* bad : {R"("cpuRequestMilli":"-1"}}]})", R"("cpuLimitMilli":"-100"}}]})"}) {
    auto r = ParseNodeFence(head + bad, "t");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("must be ≥ 0"), std::string::npos) << r.status().ToString();
  }
}

TEST_F(NodeEngineTest, AContestedPodIsReportedAsSuchBeforeTheNextFenceVersion) {
  ASSERT_TRUE(engine_->Apply(Fence(3, {n1_})).ok());
  const std::string idle = node_.CpuFile(n1_, "cpu.idle");
  // Another writer keeps putting its value back: the third overwrite within the window makes
  // the file contested, and the enforcer leaves it.
  for (int i = 0; i < 3; ++i) {
    Put(idle, "0\n");
    ASSERT_TRUE(engine_->CurrentReport().has_value());
  }
  ASSERT_EQ(Slurp(idle), "0\n");
  auto report = engine_->CurrentReport();
  ASSERT_TRUE(report.has_value());
  bool seen = false;
  for (const auto& p : report->pods()) {
    if (p.uid() != n1_.uid) continue;
    seen = true;
    EXPECT_FALSE(p.enforced());
    EXPECT_EQ(p.reason(), "Contested");
  }
  EXPECT_TRUE(seen);
}

const v1::PodReport* PodIn(const v1::NodeReport& r, const std::string& uid) {
  for (const auto& p : r.pods()) {
    if (p.uid() == uid) return &p;
  }
  return nullptr;
}

// kubelet resizes an Idle-fenced pod in place (v1): the fence steps aside (ResizePending), and
// the watcher puts it back as soon as kubelet's write lands — no new fence version comes. The
// report must follow the node then, not stay at the last fence's ResizePending (the policy read
// "ResizePending, 0 enforced" for 75 s on the real node while the pod was fenced again).
TEST_F(NodeEngineTest, AFenceBackAfterKubeletsResizeIsReportedWithoutANewFence) {
  auto fence = Fence(3, {n1_});
  fence.mutable_neighbours(0)->mutable_pod()->set_cpu_request_milli(250);
  ASSERT_TRUE(engine_->Apply(fence).ok());
  auto resized = Fence(4, {n1_});
  resized.mutable_neighbours(0)->mutable_pod()->set_cpu_request_milli(1500);
  auto during = engine_->Apply(resized);
  ASSERT_TRUE(during.ok()) << during.status().ToString();
  ASSERT_NE(PodIn(*during, n1_.uid), nullptr);
  EXPECT_FALSE(PodIn(*during, n1_.uid)->enforced());
  EXPECT_EQ(PodIn(*during, n1_.uid)->reason(), reason::kResizePending);
  EXPECT_EQ(Slurp(node_.CpuFile(n1_, "cpu.idle")), "0");
  // Still waiting: the periodic report says so.
  auto waiting = engine_->CurrentReport();
  ASSERT_TRUE(waiting.has_value());
  EXPECT_EQ(PodIn(*waiting, n1_.uid)->reason(), reason::kResizePending);
  // kubelet's retry lands (1.5 CPU → 1536 shares).
  Put(node_.CpuFile(n1_, "cpu.shares"), "1536\n");
  auto after = engine_->CurrentReport();
  ASSERT_TRUE(after.has_value());
  const v1::PodReport* p = PodIn(*after, n1_.uid);
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(p->enforced()) << p->reason() << ": " << p->message();
  EXPECT_EQ(p->reason(), "");
  EXPECT_EQ(after->applied_version(), 4u);
  EXPECT_EQ(Slurp(node_.CpuFile(n1_, "cpu.idle")), "1");
  // And it stays so, report after report.
  auto later = engine_->CurrentReport();
  ASSERT_TRUE(later.has_value());
  EXPECT_TRUE(PodIn(*later, n1_.uid)->enforced());
  engine_->RevertAll();
  EXPECT_EQ(Slurp(node_.CpuFile(n1_, "cpu.shares")), "1536\n");  // kubelet's resize survives
  EXPECT_EQ(Slurp(node_.CpuFile(n1_, "cpu.idle")), "0\n");
}

// Each decision is said once at info level, naming the pod and the reason — never once per
// report or sweep.
TEST_F(NodeEngineTest, EachDecisionIsLoggedOnceNamingThePodAndTheReason) {
  std::ostringstream out;
  auto log = std::make_shared<spdlog::logger>(
      "decisions", std::make_shared<spdlog::sinks::ostream_sink_mt>(out));
  log->set_pattern("%l %v");
  engine_.reset();
  StartEngine(log);
  auto lines = [&] {
    std::vector<std::string> v;
    std::istringstream in(out.str());
    for (std::string l; std::getline(in, l);) v.push_back(l);
    out.str("");
    return v;
  };
  // The lines logged since the last look are one, holding `text`.
  auto one_line = [&](const std::string& text) -> ::testing::AssertionResult {
    const auto v = lines();
    if (v.size() != 1) return ::testing::AssertionFailure() << v.size() << " lines, not 1";
    if (v[0].find(text) == std::string::npos) return ::testing::AssertionFailure() << v[0];
    return ::testing::AssertionSuccess();
  };
  auto fence = Fence(3, {n1_, n2_});
  fence.mutable_neighbours(1)->mutable_pod()->set_cpu_request_milli(250);
  ASSERT_TRUE(engine_->Apply(fence).ok());
  auto first = lines();
  ASSERT_EQ(first.size(), 3u) << out.str();
  EXPECT_NE(first[0].find("info pod ml/" + trainer_.name + " (policy p): trainer protected"),
            std::string::npos)
      << first[0];
  EXPECT_NE(first[1].find("pod batch/" + n1_.name + " (policy p): neighbour fenced: Idle"),
            std::string::npos)
      << first[1];
  // The same fence again, and reports: nothing new to say.
  fence.set_version(4);
  ASSERT_TRUE(engine_->Apply(fence).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(engine_->CurrentReport().has_value());
  EXPECT_TRUE(lines().empty()) << out.str();
  // Another writer rewrites n1's idle file: re-applied, said once.
  Put(node_.CpuFile(n1_, "cpu.idle"), "0\n");
  ASSERT_TRUE(engine_->CurrentReport().has_value());
  ASSERT_TRUE(engine_->CurrentReport().has_value());
  ASSERT_TRUE(one_line(n1_.name +
                       " (policy p): another writer rewrote 1 of its fenced files; their values "
                       "are the originals now and the fence was re-applied"));
  // kubelet resizes n2 in place: the step-aside and the return, each once.
  fence.set_version(5);
  fence.mutable_neighbours(1)->mutable_pod()->set_cpu_request_milli(1500);
  ASSERT_TRUE(engine_->Apply(fence).ok());
  ASSERT_TRUE(engine_->CurrentReport().has_value());
  ASSERT_TRUE(one_line(n2_.name + " (policy p): fence lifted for kubelet's in-place resize"));
  Put(node_.CpuFile(n2_, "cpu.shares"), "1536\n");
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(engine_->CurrentReport().has_value());
  auto back = lines();
  ASSERT_GE(back.size(), 1u) << out.str();
  EXPECT_NE(back[0].find(n2_.name + " (policy p): neighbour fenced: Idle (cpu.idle=1) (again, "
                                    "after kubelet's in-place resize)"),
            std::string::npos)
      << back[0];
  // n1 leaves the fence; then everything is reverted.
  auto without_n1 = Fence(6, {n2_});
  without_n1.mutable_neighbours(0)->mutable_pod()->set_cpu_request_milli(1500);
  ASSERT_TRUE(engine_->Apply(without_n1).ok());
  ASSERT_TRUE(one_line("info pod batch/" + n1_.name + ": fence withdrawn, 2 file(s) restored"));
  engine_->RevertAll();
  EXPECT_EQ(lines().size(), 2u);  // the trainer and n2
  // A pod that cannot be fenced is a warning, said once.
  auto missing = Fence(7, {n1_});
  missing.mutable_neighbours(0)->mutable_pod()->set_uid("cccccccc-0404");
  ASSERT_TRUE(engine_->Apply(missing).ok());
  ASSERT_TRUE(engine_->Apply(missing).ok());
  auto warn = lines();
  ASSERT_EQ(std::count_if(warn.begin(), warn.end(),
                          [](const std::string& l) { return l.rfind("warning ", 0) == 0; }),
            1)
      << out.str();
}

TEST_F(NodeEngineTest, NeighbourCpuSecondsCountsOnlyWhileFencedAndNeverDecreases) {
  SetUsage(n1_, 5'000'000'000);  // CPU before the fence: not counted
  SetUsage(n2_, 1'000'000'000);
  SetUsage(trainer_, 9'000'000'000);
  EXPECT_EQ(engine_->NeighbourCpuSeconds(), 0.0);  // nothing fenced yet

  ASSERT_TRUE(engine_->Apply(Fence(1, {n1_, n2_})).ok());
  EXPECT_DOUBLE_EQ(engine_->NeighbourCpuSeconds(), 0.0);
  SetUsage(n1_, 7'000'000'000);
  SetUsage(n2_, 1'500'000'000);
  SetUsage(trainer_, 19'000'000'000);  // the trainer's CPU is never neighbour CPU
  EXPECT_DOUBLE_EQ(engine_->NeighbourCpuSeconds(), 2.5);

  // n2 leaves the fence: what it got up to the Apply counts, nothing after.
  SetUsage(n2_, 2'000'000'000);
  ASSERT_TRUE(engine_->Apply(Fence(2, {n1_})).ok());
  EXPECT_DOUBLE_EQ(engine_->NeighbourCpuSeconds(), 3.0);
  SetUsage(n2_, 9'000'000'000);
  SetUsage(n1_, 7'250'000'000);
  EXPECT_DOUBLE_EQ(engine_->NeighbourCpuSeconds(), 3.25);

  // n1's cgroup recreated (usage restarts at a smaller value): a new baseline, no decrease.
  SetUsage(n1_, 100'000'000);
  EXPECT_DOUBLE_EQ(engine_->NeighbourCpuSeconds(), 3.25);
  SetUsage(n1_, 600'000'000);
  EXPECT_DOUBLE_EQ(engine_->NeighbourCpuSeconds(), 3.75);

  // A dry run fences nobody, so it counts nobody; unfencing keeps the total.
  ASSERT_TRUE(engine_->Apply(Fence(3, {n1_, n2_}, /*dry_run=*/true)).ok());
  SetUsage(n1_, 5'600'000'000);
  EXPECT_DOUBLE_EQ(engine_->NeighbourCpuSeconds(), 3.75);
  engine_->RevertAll();
  EXPECT_DOUBLE_EQ(engine_->NeighbourCpuSeconds(), 3.75);
}

// Issue 15: trainers do not move across an agent restart. The new engine plans its first fence
// from the cpusets the checkpoint says were written, so a newcomer that sorts first (and would
// take the incumbent's cores in a plan from scratch) gets other cores.
TEST_F(NodeEngineTest, TrainersKeepTheirCoresAcrossAnAgentRestart) {
  const PodIdentity newcomer = node_.AddPod("aaaaaaaa-0000", QosClass::kBurstable, {"t0"}, "ml");
  auto fence = Fence(5, {n1_});
  fence.mutable_policies(0)->mutable_trainer_cpu()->set_cores(2);
  auto first = engine_->Apply(fence);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  const std::string incumbent_cpus = node_.CpusetFile(trainer_, "cpuset.cpus");
  ASSERT_EQ(Slurp(incumbent_cpus), "0-1,8-9");

  engine_.reset();  // the agent dies (the checkpoint lock goes with its store)
  StartEngine();    // and comes back over the same state dir
  ASSERT_TRUE(engine_);
  auto plan_only = engine_->MakePlanFor(fence);
  ASSERT_TRUE(plan_only.ok()) << plan_only.status().ToString();
  ASSERT_EQ(plan_only->trainers.size(), 1u);
  EXPECT_EQ(plan_only->trainers[0].why.rfind("IncumbentKept:", 0), 0u)
      << plan_only->trainers[0].why;

  fence.set_version(6);
  auto* t = fence.add_trainers();
  *t->mutable_pod() = Ref(newcomer);
  t->set_policy("p");
  auto second = engine_->Apply(fence);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(Slurp(incumbent_cpus), "0-1,8-9");
  // The report says why each trainer sits where it sits.
  for (const auto& p : second->pods()) {
    if (p.uid() != trainer_.uid) continue;
    EXPECT_EQ(p.message().rfind("IncumbentKept:", 0), 0u) << p.message();
  }
  EXPECT_EQ(Slurp(node_.CpusetFile(newcomer, "cpuset.cpus")), "2-3,10-11");

  // And again, now that both are incumbents.
  engine_.reset();
  StartEngine();
  fence.set_version(7);
  ASSERT_TRUE(engine_->Apply(fence).ok());
  EXPECT_EQ(Slurp(incumbent_cpus), "0-1,8-9");
  EXPECT_EQ(Slurp(node_.CpusetFile(newcomer, "cpuset.cpus")), "2-3,10-11");
}

TEST(PreviousPlanTest, ReadsEachPodsPodLevelCpusetFromTheCheckpoint) {
  std::vector<CheckpointEntry> entries = {
      {"/cg/cpuset/kubepods/podA/cpuset.cpus", "cpuset.cpus", "A", "0-15\n", "2-3,10-11", {}},
      {"/cg/cpuset/kubepods/podA/c1/cpuset.cpus", "cpuset.cpus", "A", "0-15\n", "2-3,10-11", {}},
      {"/cg/cpuset/kubepods/podA/cpuset.mems", "cpuset.mems", "A", "0\n", "0", {}},
      {"/cg/cpu/kubepods/podB/cpu.shares", "cpu.shares", "B", "1024\n", "2", {}},
      {"/cg/cpuset/kubepods/podC/cpuset.cpus", "cpuset.cpus", "C", "0-15\n", "not-a-list", {}},
  };
  const Plan p = PreviousPlanFromCheckpoint(entries);
  ASSERT_EQ(p.trainers.size(), 1u);
  EXPECT_EQ(p.trainers[0].pod.uid, "A");
  EXPECT_EQ(p.trainers[0].cpus.ToString(), "2-3,10-11");

  auto none = LoadPreviousPlan("/nonexistent-feedguard-state");
  EXPECT_FALSE(none.ok());
}

// Issue 15: under kubelet's static CPU manager the Guaranteed pods' exclusive CPUs are outside the
// agent's cpuset. They are the machine's all the same: planning must neither refuse the CPU
// manager's state ("CPUs this machine does not have") nor hand out the half-taken core 1 = {1,9}.
TEST(NodeEngineCpuManagerTest, ExclusiveCpusOutsideTheAgentsCpusetAreTakenNotUnknown) {
  FakeNode node{CgroupVersion::kV1, KubeletDriver::kCgroupfs};
  auto topo =
      LoadTopologyFromXmlFile(std::string(FEEDGUARD_TOPOLOGY_FIXTURES) + "/cpumgr-1s-smt.xml");
  ASSERT_TRUE(topo.ok()) << topo.status().ToString();
  const std::string cm = node.state_dir() + "-cpu_manager_state";
  Put(cm, R"({"policyName":"static","defaultCpuSet":"1-7,10-15",)"
          R"("entries":{"guaranteed-uid":{"main":"0,8-9"}},"checksum":1})");
  NodeEngineOptions o;
  o.topology = std::move(*topo);
  o.cgroups = node.cgroups();
  o.cpu_manager_state_path = cm;
  NodeEngine engine(std::move(o));
  v1::NodeFence f;
  f.set_version(1);
  auto* p = f.add_policies();
  p->set_name("p");
  p->mutable_trainer_cpu()->set_cores(2);
  auto* t = f.add_trainers();
  t->mutable_pod()->set_uid("trainer-uid");
  t->mutable_pod()->set_namespace_("ml");
  t->mutable_pod()->set_name("trainer");
  t->set_policy("p");
  auto plan = engine.MakePlanFor(f);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->trainers.size(), 1u);
  EXPECT_EQ(plan->trainers[0].cpus.ToString(), "2-3,10-11");
  EXPECT_EQ(plan->off_limits.ToString(), "0,8-9");
}

// A fence that only names pods to observe (no policy covers them) changes no file on the node:
// neither applying it nor the observer's readings after it write anything. The reports carry
// the observations, once each (a periodic report replaces the last one's).
TEST_F(NodeEngineTest, AnObserveOnlyFenceWritesNothing) {
  feedguard::testing::TempDir proc;
  Put(proc.path() + "/stat", "cpu  0 0 0 0 0 0 0 0 0 0\ncpu0 100 0 0 1000 0 0 0 0 0 0\n");
  auto clock = std::make_shared<ManualTimeSource>();
  observe::ObserveLoopOptions oo;
  oo.cgroups = node_.cgroups();
  oo.proc_root = proc.path();
  oo.clock = clock;
  auto observer = std::make_shared<observe::ObserveLoop>(oo);
  engine_.reset();  // one engine over the state dir: this one, with the observer
  auto o = testutil::FakeNodeEngineOptions(
      node_, std::string(FEEDGUARD_TOPOLOGY_FIXTURES) + "/ws-1s-1gpu.xml");
  ASSERT_TRUE(o.enforcer);
  o.state_dir = node_.state_dir();
  o.observer = observer;
  auto engine = std::make_shared<NodeEngine>(std::move(o));

  const auto before = node_.Snapshot();
  v1::NodeFence f;
  f.set_node_name("node-a");
  f.set_version(1);
  *f.add_observe() = Ref(trainer_);
  *f.add_observe() = Ref(n1_);
  auto r = engine->Apply(f);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->pods_size(), 0);
  EXPECT_EQ(r->observations_size(), 0) << "nothing read yet";
  observer->Tick();  // the baseline
  EXPECT_EQ(node_.Snapshot(), before) << "applying an observe-only fence wrote to the node";
  // The pods run (the test writes their usage counters, as the kernel would) ...
  SetUsage(trainer_, 4'000'000'000);
  SetUsage(n1_, 1'000'000'000);
  const auto running = node_.Snapshot();
  // ... and from here on nothing but the kernel may change a file.
  clock->Advance(std::chrono::seconds(10));
  observer->Tick();
  for (int i = 0; i < 2; ++i) {  // twice: the last report's observations are replaced, not added to
    auto current = engine->CurrentReport();
    ASSERT_TRUE(current.has_value());
    EXPECT_EQ(current->pods_size(), 0);
    ASSERT_EQ(current->observations_size(), 2);
    for (const auto& obs : current->observations()) {
      if (obs.uid() == trainer_.uid) {
        EXPECT_DOUBLE_EQ(obs.windows(0).cpu_seconds(), 4);
      }
    }
  }
  // A later fence (a new version) with the same observe list: observed as before.
  f.set_version(2);
  r = engine->Apply(f);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->observations_size(), 2);
  EXPECT_EQ(engine->CurrentReport()->observations_size(), 2) << "the fence's report's, replaced";
  EXPECT_EQ(node_.Snapshot(), running) << "observing, or a second observe-only fence, wrote";

  // Observation off in the controller: the next fence names none, and the report carries none.
  f.clear_observe();
  f.set_version(3);
  r = engine->Apply(f);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->observations_size(), 0);
  EXPECT_EQ(engine->CurrentReport()->observations_size(), 0);
}

}  // namespace
}  // namespace feedguard::agent
