#include "agent/enforcer/watcher.h"

#include <gtest/gtest.h>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "agent/cgroup/fake_tree.h"
#include "agent/cgroup/fs_cgroups.h"
#include "agent/cgroup/kubelet_facts.h"
#include "agent/enforcer/fake_node.h"
#include "common/strings.h"

namespace feedguard::agent {
namespace {

namespace fs = std::filesystem;
using cgroup::CgroupVersion;
using cgroup::KubeletDriver;

using testutil::Put;
using testutil::Slurp;

// One fenced neighbour (cpu.idle=1, cpuset 4-7 on pod + container) in a fake v1 tree.
class WatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "fg-watcher-XXXXXX").string();
    root_ = ::mkdtemp(tmpl.data());
    cgroup::FakeCgroupOptions o;
    o.cpus = "0-7";
    auto layout =
        cgroup::MakeFakeLayout(root_, CgroupVersion::kV1, KubeletDriver::kCgroupfs, "", o);
    ASSERT_TRUE(layout.ok()) << layout.status().ToString();
    const std::string rel = "kubepods/burstable/podw1/c1";
    for (auto [mount, ctrl] :
         {std::pair{layout->cpu_mount, "cpu"}, std::pair{layout->cpuacct_mount, "cpuacct"},
          std::pair{layout->cpuset_mount, "cpuset"}}) {
      ASSERT_TRUE(cgroup::MakeFakeCgroupDir(mount + "/" + rel, CgroupVersion::kV1, ctrl, o).ok());
    }
    idle_ = layout->cpu_mount + "/kubepods/burstable/podw1/cpu.idle";
    ccpus_ = layout->cpuset_mount + "/" + rel + "/cpuset.cpus";
    auto store = CheckpointStore::Open(root_ + "/state");
    ASSERT_TRUE(store.ok());
    EnforcerOptions eo;
    eo.time_source = clock_;
    eo.contest_threshold = 3;
    eo.contest_window = std::chrono::seconds(60);
    enforcer_ = std::make_shared<Enforcer>(cgroup::NewFsCgroups(*layout),
                                           CheckpointStorePtr(std::move(*store)), eo);
    NeighbourAction n;
    n.pod.uid = "w1";
    n.pod.ns = "batch";
    n.pod.name = "spinner";
    n.pod.qos = QosClass::kBurstable;
    n.pod.container_ids = {"containerd://c1"};
    n.idle = true;
    n.cpus = CpuSet::Range(4, 7);
    plan_.neighbours.push_back(n);
    auto r = enforcer_->Apply(plan_);
    ASSERT_EQ(r.enforced, 1u) << (r.pods.empty() ? "" : r.pods[0].message());
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  std::string root_, idle_, ccpus_;
  std::shared_ptr<ManualTimeSource> clock_ = std::make_shared<ManualTimeSource>();
  EnforcerPtr enforcer_;
  Plan plan_;
};

TEST_F(WatcherTest, InotifySeesAnOverwriteAndTheThreadPutsItBack) {
  WatcherOptions o;
  o.sweep_interval = std::chrono::hours(1);  // only inotify can notice within this test
  o.poll_timeout = std::chrono::milliseconds(20);
  o.time_source = clock_;
  Watcher w(enforcer_, o);
  ASSERT_TRUE(w.Start().ok());
  // Wait until the thread watches the owned files (bounded).
  for (int i = 0; i < 250 && w.watched_files() < 4; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // cpu.idle, cpu.shares (reset by the kernel when idle changes), pod and container cpus.
  ASSERT_EQ(w.watched_files(), 4u);
  Put(ccpus_, "0-7\n");  // runc's UpdateContainerResources
  bool restored = false;
  for (int i = 0; i < 250 && !restored; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    restored = Slurp(ccpus_) == "4-7";
  }
  w.Stop();
  EXPECT_TRUE(restored) << "file holds " << Slurp(ccpus_);
  const auto st = w.stats();
  EXPECT_GE(st.events, 1u);
  EXPECT_EQ(st.overwrites, 1u);
  EXPECT_EQ(st.reapplied, 1u);
  EXPECT_EQ(st.sweeps, 0u);
  EXPECT_EQ(enforcer_->OverwriteCounts()["w1"], 1u);
}

// cgroup v2: a Cpuset fence lives in the pod's child dirs, so a container made under a fenced
// pod (a restart) starts unconfined; IN_CREATE on the pod dir has it pinned in the same round.
TEST(WatcherV2Test, AContainerMadeUnderACpusetFencedPodIsPinnedAtOnce) {
  testutil::FakeNode node(CgroupVersion::kV2, KubeletDriver::kSystemd);
  auto pod = node.AddPod("cdcdcdcd-0001", QosClass::kBurstable, {"c1"});
  auto store = CheckpointStore::Open(node.state_dir());
  ASSERT_TRUE(store.ok());
  auto enforcer = std::make_shared<Enforcer>(node.cgroups(), CheckpointStorePtr(std::move(*store)),
                                             EnforcerOptions{});
  Plan plan;
  NeighbourAction n;
  n.pod = pod;
  n.cpus = CpuSet{6, 7};
  plan.neighbours.push_back(n);
  ASSERT_EQ(enforcer->Apply(plan).enforced, 1u);
  WatcherOptions o;
  o.sweep_interval = std::chrono::hours(1);  // only inotify can notice within this test
  o.time_source = std::make_shared<ManualTimeSource>();
  Watcher w(enforcer, o);
  ASSERT_TRUE(w.RunOnce(std::chrono::milliseconds(0)).ok());  // watches set up
  const std::string pod_dir = Dirname(node.CpusetFile(pod, "cpuset.cpus"));
  // The old container's cgroup goes (the plan still names it: kubelet has not reported the new
  // one yet), then the new one's appears.
  fs::remove_all(pod_dir + "/" + node.ContainerSub("c1"));
  const std::string restarted = pod_dir + "/" + node.ContainerSub("c1-restarted");
  ASSERT_TRUE(cgroup::MakeFakeCgroupDir(restarted, CgroupVersion::kV2, "").ok());
  EXPECT_EQ(Slurp(restarted + "/cpuset.cpus"), "\n");
  ASSERT_TRUE(w.RunOnce(std::chrono::milliseconds(2000)).ok());
  EXPECT_EQ(Slurp(restarted + "/cpuset.cpus"), "6-7");
  EXPECT_EQ(w.stats().children, 1u);
  EXPECT_EQ(Slurp(pod_dir + "/cpuset.cpus"), "\n");
  // Withdrawn: the new container's set is restored with the rest, and nothing is watched.
  enforcer->RevertAll();
  EXPECT_EQ(Slurp(restarted + "/cpuset.cpus"), "\n");
  EXPECT_TRUE(enforcer->ChildWatchDirs().empty());
}

TEST_F(WatcherTest, SweepFindsWhatInotifyWouldMissOnlyWhenDue) {
  WatcherOptions o;
  o.use_inotify = false;  // stand-in for a change the kernel makes without notifying
  o.sweep_interval = std::chrono::seconds(30);
  o.time_source = clock_;
  Watcher w(enforcer_, o);
  ASSERT_TRUE(w.RunOnce(std::chrono::milliseconds(0)).ok());  // schedules the first sweep
  Put(idle_, "0\n");
  ASSERT_TRUE(w.RunOnce(std::chrono::milliseconds(0)).ok());
  EXPECT_EQ(Slurp(idle_), "0\n");  // not due yet
  EXPECT_EQ(w.stats().sweeps, 0u);
  clock_->Advance(std::chrono::seconds(31));
  ASSERT_TRUE(w.RunOnce(std::chrono::milliseconds(0)).ok());
  EXPECT_EQ(w.stats().sweeps, 1u);
  EXPECT_EQ(Slurp(idle_), "1");
  EXPECT_EQ(w.stats().overwrites, 1u);
}

TEST_F(WatcherTest, ConcurrentApplyVerifyAndOverwritesNeverFlipFlopForever) {
  WatcherOptions o;
  o.sweep_interval = std::chrono::milliseconds(0);  // sweep every round
  o.poll_timeout = std::chrono::milliseconds(1);
  o.time_source = clock_;
  Watcher w(enforcer_, o);
  ASSERT_TRUE(w.Start().ok());
  // A second writer that keeps fighting over the container cpuset while the agent re-applies
  // the plan from another thread.
  std::thread fighter([&] {
    for (int i = 0; i < 200; ++i) {
      Put(ccpus_, "0-7\n");
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
  });
  std::thread applier([&] {
    for (int i = 0; i < 50; ++i) enforcer_->Apply(plan_);
  });
  fighter.join();
  applier.join();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  w.Stop();
  // The window is 60 s of a clock that never moves: after 3 overwrites the file is contested
  // and left to the other writer.
  EXPECT_EQ(Slurp(ccpus_), "0-7\n");
  EXPECT_EQ(enforcer_->OverwriteCounts()["w1"], 3u);
  auto r = enforcer_->Apply(plan_);
  EXPECT_EQ(r.pods[0].reason(), reason::kContested);
  EXPECT_EQ(Slurp(idle_), "1");  // the uncontested knob stays enforced
}

}  // namespace
}  // namespace feedguard::agent
