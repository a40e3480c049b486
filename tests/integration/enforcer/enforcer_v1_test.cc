// enforcer_v1_test.cc — the enforcer against real cgroup files, parameterised over the cgroup
// version: v1 (root and the host's v1 cpu/cpuacct/cpuset mounts; label cgroup_v1) and v2 (where
// FEEDGUARD_CGROUP2_ROOT names a cgroup2 mount: the qemu VM, label vm). Each case skips, with the
// reason, where its version is absent. Everything happens under roots of our own
// (<mount>/feedguard-test-<pid>-<rand>), removed afterwards even on failure; no process is moved
// into any cgroup.
//
// The crash tests re-execute this binary (/proc/self/exe, the hidden EnforcerCrashChild test) as
// a child that applies a large plan and is SIGKILLed mid-apply (after its k-th write, or after a
// random delay); a fresh enforcer restarts from the checkpoint, converges, reverts, and every
// knob file must hold its exact original bytes.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <thread>

#include "agent/cgroup/detect.h"
#include "agent/cgroup/fake_tree.h"
#include "agent/cgroup/fs_cgroups.h"
#include "agent/cgroup/kernel_facts.h"
#include "agent/cgroup/kubelet_facts.h"
#include "agent/enforcer/enforcer.h"
#include "agent/enforcer/watcher.h"
#include "common/strings.h"
#include "tests/integration/enforcer/real_tree.h"

extern char** environ;

namespace feedguard::agent {
namespace {

using namespace realcg;  // NOLINT: the shared real-tree test helpers
namespace kf = cgroup;
using cgroup::CgroupVersion;

// A large plan: one trainer (2 containers) pinned to the first CPU, `n` neighbours, half idle,
// half weight + quota, all confined to the last CPU. Deterministic: the crash child rebuilds the
// same plan over the parent's tree.
Plan BigPlan(Tree& tree, int n) {
  const CpuSet all = tree.CpuList();
  const int first = all.ToVector().front(), last = all.ToVector().back();
  Plan plan;
  plan.fence_version = 1;
  TrainerPlacement t;
  t.pod = tree.AddPod("trainer-0001", QosClass::kGuaranteed, 2, 2048, 200000);
  t.policy = "vision";
  t.cpus = CpuSet{first};
  plan.trainers.push_back(t);
  for (int i = 0; i < n; ++i) {
    NeighbourAction a;
    a.pod = tree.AddPod("nb-" + std::to_string(1000 + i),
                        i % 3 == 0 ? QosClass::kBestEffort : QosClass::kBurstable, 1, 100 + i,
                        i % 2 ? -1 : 30000 + i);
    a.policy = "vision";
    if (i % 2 == 0) {
      a.idle = true;
    } else {
      a.weight = 1;
      a.quota = CpuQuota{20000, 100000};
    }
    a.cpus = CpuSet{last};
    plan.neighbours.push_back(a);
  }
  return plan;
}

void ExpectEnforced(const ApplyReport& r, size_t pods) {
  EXPECT_EQ(r.enforced, pods);
  for (const auto& p : r.pods) {
    EXPECT_TRUE(p.enforced()) << p.uid() << ": " << p.reason() << " " << p.message();
  }
}

class EnforcerCgroupTest : public ::testing::TestWithParam<CgroupVersion> {
 protected:
  void SetUp() override {
    std::string why = SkipReason(GetParam());
    if (!why.empty()) GTEST_SKIP() << why;
  }
};

TEST_P(EnforcerCgroupTest, AppliesVerifiesAndRevertsRealFiles) {
  Tree tree(GetParam());
  Plan plan = BigPlan(tree, 6);
  const auto before = tree.Snapshot();
  auto [state, store, enf] = Rig(tree);
  auto r = enf.Apply(plan);
  ExpectEnforced(r, 7);
  EXPECT_GE(r.files_written, 20u);  // v2 writes no pod dir's cpuset
  // The idle neighbours' weight file is owned too, at what the kernel shows while idle.
  const std::string idle_weight =
      tree.Mount("cpu") + "/kubepods/besteffort/podnb-1000/" + tree.WeightFile();
  auto e = store->Get(idle_weight);
  ASSERT_TRUE(e.has_value()) << idle_weight;
  auto chomp = [](std::string v) {
    while (!v.empty() && v.back() == '\n') v.pop_back();
    return v;
  };
  EXPECT_EQ(chomp(e->written), chomp(Slurp(idle_weight)));
  if (tree.v2() && enf.idle_reads_zero()) {
    // This kernel (6.1) shows an idle group's weight as 0, which kubelet >= 1.36 reads back
    // into pod status: by default the Idle fence is then held as the lowest weight instead.
    EXPECT_EQ(Slurp(idle_weight), "1\n");
    EXPECT_EQ(Slurp(tree.Mount("cpu") + "/kubepods/besteffort/podnb-1000/cpu.idle"), "0\n");
  } else {
    EXPECT_EQ(Slurp(idle_weight), tree.v2() ? "0\n" : "3\n");
  }
  auto again = enf.Apply(plan);
  EXPECT_EQ(again.files_written, 0u);
  auto rv = enf.RevertAll();
  EXPECT_EQ(rv.overwritten_by_other, 0u);
  EXPECT_EQ(store->size(), 0u);
  EXPECT_EQ(tree.Snapshot(), before);
}

// v1 refuses a cpuset outside the parent's (EACCES); v2 accepts the write and clips the
// effective set to the parent's. Both must be reported as CpusetNotSubset.
TEST_P(EnforcerCgroupTest, CpusetOutsideTheParentIsReportedNotSubset) {
  Tree tree(GetParam());
  const CpuSet all = tree.CpuList();
  if (all.size() < 2) GTEST_SKIP() << "needs at least 2 CPUs";
  auto pod = tree.AddPod("nb-subset", QosClass::kBurstable, 1, 100, -1);
  // Narrow the QoS tier (and so the pod and its container) to the first CPU, then ask for the
  // last: the tier is kubelet's, never ours to widen.
  const std::string tier = tree.Mount("cpuset") + "/kubepods/burstable";
  const std::string pod_dir = tier + "/podnb-subset";
  const std::string first = std::to_string(all.ToVector().front());
  ASSERT_TRUE(WriteKnob(pod_dir + "/nb-subsetc0/cpuset.cpus", first));
  ASSERT_TRUE(WriteKnob(pod_dir + "/cpuset.cpus", first));
  ASSERT_TRUE(WriteKnob(tier + "/cpuset.cpus", first));
  const auto before = tree.Snapshot();
  auto [state, store, enf] = Rig(tree);
  Plan plan;
  NeighbourAction a;
  a.pod = pod;
  a.cpus = CpuSet{all.ToVector().back()};
  plan.neighbours.push_back(a);
  auto r = enf.Apply(plan);
  ASSERT_EQ(r.pods.size(), 1u);
  EXPECT_FALSE(r.pods[0].enforced());
  EXPECT_EQ(r.pods[0].reason(), reason::kCpusetNotSubset) << r.pods[0].message();
  if (tree.v2()) {
    // The kernel took the write but runs the pod on the tier's CPU.
    EXPECT_NE(r.pods[0].message().find("clipped"), std::string::npos) << r.pods[0].message();
    EXPECT_EQ(Slurp(pod_dir + "/cpuset.cpus.effective"), first + "\n");
  }
  EXPECT_EQ(Slurp(tier + "/cpuset.cpus"), first + "\n");  // the tier was not touched
  auto rv = enf.RevertAll();
  EXPECT_EQ(rv.overwritten_by_other, 0u);
  EXPECT_EQ(Slurp(pod_dir + "/cpuset.cpus"), first + "\n");
  EXPECT_EQ(tree.Snapshot(), before);
}

TEST_P(EnforcerCgroupTest, InotifyReportsWritesByAnotherProcessAndWatcherRestores) {
  Tree tree(GetParam());
  TempDir state;
  Plan plan = BigPlan(tree, 2);
  auto store = OpenStore(state.path());
  auto enf = std::make_shared<Enforcer>(tree.cgroups(), store, EnforcerOptions{});
  ExpectEnforced(enf->Apply(plan), 3);
  // neighbour 1 has weight: its cpu.shares / cpu.weight is ours.
  const std::string weight =
      tree.Mount("cpu") + "/kubepods/burstable/podnb-1001/" + tree.WeightFile();
  const std::string ours = Slurp(weight);
  WatcherOptions wo;
  wo.sweep_interval = std::chrono::hours(1);  // inotify alone must catch it
  wo.poll_timeout = std::chrono::milliseconds(20);
  Watcher w(enf, wo);
  ASSERT_TRUE(w.Start().ok());
  for (int i = 0; i < 250 && w.watched_files() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_GT(w.watched_files(), 0u);
  // Another process (as runc would) rewrites the knob.
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) ::_exit(WriteKnob(weight, "4096") ? 0 : 1);
  int ws = 0;
  ASSERT_EQ(::waitpid(pid, &ws, 0), pid);
  ASSERT_TRUE(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
  bool restored = false;
  for (int i = 0; i < 250 && !restored; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    restored = Slurp(weight) == ours;
  }
  w.Stop();
  EXPECT_TRUE(restored) << weight << " holds " << Slurp(weight);
  EXPECT_GE(w.stats().events, 1u) << "no IN_MODIFY for a write to a cgroup file";
  EXPECT_EQ(w.stats().sweeps, 0u);
  EXPECT_EQ(enf->OverwriteCounts()["nb-1001"], 1u);
  enf->RevertAll();
}

// ---- crash tests: the child is this binary, re-executed ---------------------------------------

constexpr char kEnvTree[] = "FG_CRASH_TREE";

// Sets a dir's bandwidth limit the way kubelet/runc leave it (v1: period, then quota).
// Withdrawing every fence leaves each file of the tree as it was in `before`.
void ExpectRevertedToExactly(Enforcer& enf, const Tree& tree,
                             const std::map<std::string, std::string>& before) {
  enf.RevertAll();
  EXPECT_EQ(tree.Snapshot(), before);
}

void SetLimit(const Tree& tree, const std::string& dir, int64_t quota, int64_t period) {
  if (tree.v2()) {
    ASSERT_TRUE(WriteKnob(dir + "/cpu.max", std::to_string(quota) + " " + std::to_string(period)))
        << dir;
    return;
  }
  ASSERT_TRUE(WriteKnob(dir + "/cpu.cfs_period_us", std::to_string(period))) << dir;
  ASSERT_TRUE(WriteKnob(dir + "/cpu.cfs_quota_us", std::to_string(quota))) << dir;
}

// A plan fencing one pod of policy "p" as `set` says.
Plan OneNeighbour(const PodIdentity& pod, const std::function<void(NeighbourAction&)>& set) {
  Plan plan;
  NeighbourAction a;
  a.pod = pod;
  a.policy = "p";
  set(a);
  plan.neighbours.push_back(a);
  return plan;
}

// A plan with one trainer, `pod`, pinned to `cpus`.
Plan PinnedTrainer(const PodIdentity& pod, const CpuSet& cpus) {
  Plan plan;
  TrainerPlacement t;
  t.pod = pod;
  t.policy = "p";
  t.cpus = cpus;
  plan.trainers.push_back(t);
  return plan;
}

// An Idle fence on `pod`, planned with the pod's CPU request `req_milli` (what kubelet's in-place
// resize changes).
Plan IdlePlan(const PodIdentity& pod, int64_t req_milli) {
  return OneNeighbour(pod, [req_milli](NeighbourAction& a) {
    a.idle = true;
    a.pod.cpu_request_milli = req_milli;
  });
}

// kubelet resizes a fenced pod in place: its value becomes the original, the fence comes back,
// and withdrawing the fence leaves kubelet's new value (not the pre-resize one).
TEST_P(EnforcerCgroupTest, KubeletResizeDuringAFenceSurvivesTheRevert) {
  Tree tree(GetParam());
  PodIdentity pod = tree.AddPod("resize-0001", QosClass::kBurstable, 1, 256, -1);
  const std::string weight = tree.PodDir(pod) + "/" + tree.WeightFile();
  const std::string original = Slurp(weight);
  auto [state, store, enf] = Rig(tree);
  Plan plan = OneNeighbour(pod, [](NeighbourAction& a) { a.weight = 1; });
  ExpectEnforced(enf.Apply(plan), 1);
  ASSERT_NE(Slurp(weight), original);
  // kubelet: a resize to 1.5 CPU.
  const std::string resized = tree.v2() ? std::to_string(cgroup::SharesToWeight(1536)) : "1536";
  ASSERT_TRUE(WriteKnob(weight, resized));
  const std::string kubelets = Slurp(weight);
  auto v = enf.Verify();
  EXPECT_EQ(v.overwrites, 1u);
  EXPECT_EQ(v.reapplied, 1u);
  EXPECT_NE(Slurp(weight), kubelets);  // fenced again
  auto rv = enf.RevertAll();
  EXPECT_EQ(Slurp(weight), kubelets) << "the revert undid kubelet's resize";
  EXPECT_EQ(store->size(), 0u);
}

// kubelet resizes an Idle-fenced pod in place (kubelet_facts.h): the kernel refuses kubelet's pod
// weight write while the group is idle. v1: the fence steps aside until kubelet's retry lands;
// v2 (where kubelet never retries, seen in tests/vm/kubelet_v2.sh): the weight kubelet meant is
// taken as the original at once. Either way the revert leaves the resized weight.
TEST_P(EnforcerCgroupTest, IdleFencedPodResizedInPlaceEndsWithKubeletsNewWeight) {
  Tree tree(GetParam());
  PodIdentity pod = tree.AddPod("resize-idle1", QosClass::kBurstable, 1, 256, -1);
  const std::string dir = tree.PodDir(pod);
  const std::string weight = dir + "/" + tree.WeightFile();
  // The kernel's cpu.idle itself (on a 6.1 kernel only an operator's opt-in keeps it there:
  // IdleHeldAsTheLowestWeightFollowsAnInPlaceResize covers the default).
  EnforcerOptions o;
  o.idle_when_weight_reads_zero = true;
  auto [state, store, enf] = Rig(tree, o);
  auto plan_with = [&](int64_t req) { return IdlePlan(pod, req); };
  ExpectEnforced(enf.Apply(plan_with(250)), 1);
  ASSERT_EQ(Slurp(dir + "/cpu.idle"), "1\n");
  const std::string kubelets = tree.v2() ? std::to_string(cgroup::PodWeightForRequest(400))
                                         : std::to_string(cgroup::MilliCpuToShares(400));
  EXPECT_FALSE(WriteKnob(weight, kubelets)) << "the kernel took a weight write on an idle group";
  auto r = enf.Apply(plan_with(400));
  ASSERT_EQ(r.pods.size(), 1u);
  if (tree.v2()) {
    ExpectEnforced(r, 1);
    EXPECT_EQ(Slurp(dir + "/cpu.idle"), "1\n");
  } else {
    EXPECT_EQ(r.pods[0].reason(), reason::kResizePending);
    EXPECT_EQ(Slurp(dir + "/cpu.idle"), "0\n");
    ASSERT_TRUE(WriteKnob(weight, kubelets));  // kubelet's retry lands
    ExpectEnforced(enf.Apply(plan_with(400)), 1);
    EXPECT_EQ(Slurp(dir + "/cpu.idle"), "1\n");
  }
  enf.RevertAll();
  EXPECT_EQ(Slurp(weight), kubelets + "\n") << "the revert did not leave kubelet's resized weight";
  EXPECT_EQ(Slurp(dir + "/cpu.idle"), "0\n");
  EXPECT_EQ(store->size(), 0u);
}

// The default on a kernel whose idle cgroup's cpu.weight reads 0 (6.1, the VM's): the Idle
// fence is held as the lowest weight, cpu.idle stays 0 — kubelet's resize write then lands (the
// group is not idle), is adopted as the new original and fenced again; the revert leaves
// kubelet's resized weight. Where the kernel shows an idle weight other than 0 this is the
// plain Idle fence and the test says so.
TEST_P(EnforcerCgroupTest, IdleHeldAsTheLowestWeightFollowsAnInPlaceResize) {
  Tree tree(GetParam());
  if (!tree.v2()) GTEST_SKIP() << "cgroup v1 shows an idle group's shares as they were";
  PodIdentity pod = tree.AddPod("resize-idle-w", QosClass::kBurstable, 1, 256, -1);
  const std::string dir = tree.PodDir(pod);
  const std::string weight = dir + "/" + tree.WeightFile();
  const std::string original = Slurp(weight);
  auto [state, store, enf] = Rig(tree);
  auto plan_with = [&](int64_t req) { return IdlePlan(pod, req); };
  auto r = enf.Apply(plan_with(250));
  ExpectEnforced(r, 1);
  if (!enf.idle_reads_zero()) GTEST_SKIP() << "this kernel does not show an idle weight as 0";
  EXPECT_EQ(Slurp(dir + "/cpu.idle"), "0\n");
  EXPECT_EQ(Slurp(weight), "1\n");
  EXPECT_EQ(r.files_written, 2u) << "cpu.idle=1 and the weight: both passes count";
  EXPECT_EQ(r.files_reverted, 1u) << "cpu.idle back to 0";
  // kubelet resizes to 400m: the kernel takes its weight write on a group that is not idle.
  const std::string kubelets = std::to_string(cgroup::PodWeightForRequest(400));
  ASSERT_TRUE(WriteKnob(weight, kubelets));
  auto v = enf.Verify({weight});
  EXPECT_EQ(v.reapplied, 1u);
  EXPECT_EQ(Slurp(weight), "1\n");
  ExpectEnforced(enf.Apply(plan_with(400)), 1);
  EXPECT_EQ(Slurp(weight), "1\n");
  enf.RevertAll();
  EXPECT_EQ(Slurp(weight), kubelets + "\n") << "the revert did not leave kubelet's resized weight";
  EXPECT_NE(Slurp(weight), original);
  EXPECT_EQ(Slurp(dir + "/cpu.idle"), "0\n");
  EXPECT_EQ(store->size(), 0u);
}

// The resize to exactly 1000m (issue seen on the real node): on v1, leaving idle resets the
// pod's shares to 1024 — kubelet's value for `cpu: 1`. Its retry writes the same bytes, so the
// value never "changes"; the write itself (what the Watcher passes to Verify) is the landing.
// Before: the fence stayed lifted (ResizePending) and the revert wrote the pre-resize 256 back.
TEST_P(EnforcerCgroupTest, IdleFencedPodResizedToOneCpuIsFencedAgainOnKubeletsWrite) {
  if (GetParam() == CgroupVersion::kV2) {
    GTEST_SKIP()
        << "v2: kubelet does not retry the refused write (kubelet_facts.h); the weight "
           "it meant is adopted at once (IdleFencedPodResizedInPlaceEndsWithKubeletsNewWeight)";
  }
  {
    Tree tree(GetParam());
    PodIdentity pod = tree.AddPod("resize-1cpu", QosClass::kBurstable, 1, 256, -1);
    const std::string dir = tree.PodDir(pod);
    const std::string weight = dir + "/" + tree.WeightFile();
    auto [state, store, enf] = Rig(tree);
    auto plan_with = [&](int64_t req) { return IdlePlan(pod, req); };
    ExpectEnforced(enf.Apply(plan_with(250)), 1);
    auto r = enf.Apply(plan_with(1000));
    ASSERT_EQ(r.pods.size(), 1u);
    EXPECT_EQ(r.pods[0].reason(), reason::kResizePending);
    EXPECT_EQ(Slurp(dir + "/cpu.idle"), "0\n");
    EXPECT_EQ(Slurp(weight), "1024\n");  // the kernel's reset: kubelet's value for 1000m
    ASSERT_TRUE(WriteKnob(weight, std::to_string(cgroup::MilliCpuToShares(1000))));  // kubelet
    enf.Verify({weight});
    EXPECT_EQ(Slurp(dir + "/cpu.idle"), "1\n") << "kubelet's write did not bring the fence back";
    ExpectEnforced(enf.Apply(plan_with(1000)), 1);
    enf.RevertAll();
    EXPECT_EQ(Slurp(weight), "1024\n") << "the revert lost kubelet's resized weight";
    EXPECT_EQ(Slurp(dir + "/cpu.idle"), "0\n");
    EXPECT_EQ(store->size(), 0u);
  }
}

// cpu.shares 3 is kubelet's value for a 3m request and also what v1 shows while cpu.idle is 1;
// leaving idle resets the weight to the default, which must not stay.
TEST_P(EnforcerCgroupTest, OddOriginalWeightsComeBackExactAfterIdle) {
  Tree tree(GetParam());
  std::vector<PodIdentity> pods;
  for (int64_t shares : {3, 2, 170, 262144}) {
    pods.push_back(
        tree.AddPod("odd-" + std::to_string(shares), QosClass::kBurstable, 1, shares, -1));
  }
  const auto before = tree.Snapshot();
  auto [state, store, enf] = Rig(tree);
  Plan plan;
  for (const auto& p : pods) {
    NeighbourAction a;
    a.pod = p;
    a.policy = "p";
    a.idle = true;
    plan.neighbours.push_back(a);
  }
  ExpectEnforced(enf.Apply(plan), pods.size());
  ExpectRevertedToExactly(enf, tree, before);
  // Idle → Weight on the same pods, then withdrawn.
  ExpectEnforced(enf.Apply(plan), pods.size());
  for (auto& a : plan.neighbours) {
    a.idle.reset();
    a.weight = 1;
  }
  ExpectEnforced(enf.Apply(plan), pods.size());
  ExpectRevertedToExactly(enf, tree, before);
}

// v1 refuses a pod quota below a container's own limit: the fence lifts the container (it then
// inherits the pod's fence), and the revert puts both back, periods included.
TEST_P(EnforcerCgroupTest, QuotaFenceLandsOnPodsWhoseContainersHaveLimitsAndPeriods) {
  Tree tree(GetParam());
  PodIdentity pod = tree.AddPod("limited-0001", QosClass::kBurstable, 2, 512, -1);
  const std::string pod_dir = tree.PodDir(pod);
  SetLimit(tree, pod_dir, 100000, 250000);
  SetLimit(tree, tree.ContainerDir(pod, 0), 60000, 250000);
  SetLimit(tree, tree.ContainerDir(pod, 1), 40000, 250000);
  const auto before = tree.Snapshot();
  auto [state, store, enf] = Rig(tree);
  Plan plan = OneNeighbour(pod, [](NeighbourAction& a) { a.quota = CpuQuota{10000, 100000}; });
  ExpectEnforced(enf.Apply(plan), 1);
  EXPECT_EQ(enf.Apply(plan).files_written, 0u);  // idempotent, nothing reverted either
  ExpectRevertedToExactly(enf, tree, before);
}

// A pod whose CFS burst is above its quota share: the kernel refuses the fence's quota below
// the burst (EINVAL, v1 and v2), so the fence lowers the burst to 0 first, and the revert gives
// back every byte (the burst after the quota).
TEST_P(EnforcerCgroupTest, QuotaFenceLandsOnAPodWithABurstAboveItsShare) {
  Tree tree(GetParam());
  PodIdentity pod = tree.AddPod("burst-0001", QosClass::kBurstable, 1, 512, -1);
  const std::string pod_dir = tree.PodDir(pod);
  const std::string burst = pod_dir + (tree.v2() ? "/cpu.max.burst" : "/cpu.cfs_burst_us");
  if (!fs::exists(burst)) GTEST_SKIP() << "kernel lacks CFS burst (" << burst << ")";
  SetLimit(tree, pod_dir, 100000, 100000);
  ASSERT_TRUE(WriteKnob(burst, "50000")) << burst << ": " << std::strerror(errno);
  const auto before = tree.Snapshot();
  ASSERT_EQ(Trim(before.at(burst)), "50000");
  auto [state, store, enf] = Rig(tree);
  Plan plan = OneNeighbour(pod, [](NeighbourAction& a) { a.quota = CpuQuota{20000, 100000}; });
  ExpectEnforced(enf.Apply(plan), 1);
  EXPECT_EQ(Trim(Slurp(burst)), "0");
  EXPECT_EQ(Trim(Slurp(pod_dir + (tree.v2() ? "/cpu.max" : "/cpu.cfs_quota_us"))),
            tree.v2() ? "20000 100000" : "20000");
  EXPECT_EQ(enf.Apply(plan).files_written, 0u);
  ExpectRevertedToExactly(enf, tree, before);
  EXPECT_EQ(store->size(), 0u);
}

// A pod whose fence the kernel refuses half-way is left exactly as it was (here v1 refuses the
// pod quota because a dir no container names — a sandbox — has a limit above it).
TEST_P(EnforcerCgroupTest, RefusedQuotaFenceRollsBackToTheExactBytes) {
  if (GetParam() == CgroupVersion::kV2) GTEST_SKIP() << "v2 clamps instead of refusing";
  Tree tree(GetParam());
  PodIdentity pod = tree.AddPod("refused-0001", QosClass::kBurstable, 1, 512, -1);
  const std::string pod_dir = tree.PodDir(pod);
  SetLimit(tree, pod_dir, 50000, 250000);
  tree.AddDir(tree.PodRel(pod) + "/sandbox");
  SetLimit(tree, pod_dir + "/sandbox", 50000, 250000);
  const auto before = tree.Snapshot();
  auto [state, store, enf] = Rig(tree);
  Plan plan = OneNeighbour(pod, [](NeighbourAction& a) { a.quota = CpuQuota{10000, 100000}; });
  auto r = enf.Apply(plan);
  ASSERT_EQ(r.pods.size(), 1u);
  EXPECT_FALSE(r.pods[0].enforced());
  EXPECT_EQ(r.pods[0].reason(), reason::kValueRejected);
  EXPECT_NE(r.pods[0].message().find("rolled back"), std::string::npos) << r.pods[0].message();
  EXPECT_EQ(tree.Snapshot(), before);
  EXPECT_EQ(store->size(), 0u);
}

// The sandbox (pause) dir holds the target cpuset after the first apply: re-applies and a
// restart must keep it ours, not try to revert it.
TEST_P(EnforcerCgroupTest, SandboxDirAlreadyAtTheTargetStaysOursAcrossReapplyAndRestart) {
  Tree tree(GetParam());
  const CpuSet all = tree.CpuList();
  PodIdentity pod = tree.AddPod("pinned-0001", QosClass::kBurstable, 1, 512, -1);
  tree.AddDir(tree.PodRel(pod) + "/sandbox");
  const auto before = tree.Snapshot();
  TempDir state;
  Plan plan = PinnedTrainer(pod, CpuSet{all.ToVector().front()});
  {
    auto store = OpenStore(state.path());
    Enforcer enf(tree.cgroups(), store, {});
    ExpectEnforced(enf.Apply(plan), 1);
    auto again = enf.Apply(plan);
    EXPECT_TRUE(again.reverts.empty());
    EXPECT_EQ(again.files_written, 0u);
  }
  auto store = OpenStore(state.path());
  Enforcer enf(tree.cgroups(), store, {});
  auto r = enf.Apply(plan);
  ExpectEnforced(r, 1);
  EXPECT_TRUE(r.reverts.empty());
  ExpectRevertedToExactly(enf, tree, before);
}

// A pinned trainer whose pod has a running process: withdrawing the pinning must not fail. On
// v2 kubelet leaves cpuset.cpus empty ("the parent's"), which the kernel refuses to restore on
// a cgroup with tasks: the agent writes the inherited set instead and says so.
// The same resize when kubelet writes nothing: it reads its own 1024 back from the pod cgroup
// (leaving idle left it there) and counts the resize done. Once resize_settle has passed with
// kubelet's value in place, the fence goes back on (Tick) with 1024 as the original — before, it
// waited resize_yield_timeout (60 s) and the revert then wrote the pre-resize 256.
TEST_P(EnforcerCgroupTest, IdleFencedPodResizedToOneCpuWithoutAWriteIsFencedAfterTheSettle) {
  if (GetParam() == CgroupVersion::kV2) GTEST_SKIP() << "v1 only (see above)";
  Tree tree(GetParam());
  PodIdentity pod = tree.AddPod("resize-1cpu-q", QosClass::kBurstable, 1, 256, -1);
  const std::string dir = tree.PodDir(pod);
  const std::string weight = dir + "/" + tree.WeightFile();
  auto clock = std::make_shared<ManualTimeSource>();
  EnforcerOptions o;
  o.time_source = clock;
  auto [state, store, enf] = Rig(tree, o);
  auto plan_with = [&](int64_t req) { return IdlePlan(pod, req); };
  ExpectEnforced(enf.Apply(plan_with(250)), 1);
  EXPECT_EQ(enf.Apply(plan_with(1000)).pods[0].reason(), reason::kResizePending);
  EXPECT_EQ(Slurp(weight), "1024\n");
  enf.Tick();
  EXPECT_EQ(Slurp(dir + "/cpu.idle"), "0\n") << "fenced again before kubelet could look";
  clock->Advance(o.resize_settle + std::chrono::milliseconds(1));
  enf.Tick();
  EXPECT_EQ(Slurp(dir + "/cpu.idle"), "1\n");
  EXPECT_EQ(store->Get(weight)->original, "1024\n");
  ExpectEnforced(enf.Apply(plan_with(1000)), 1);
  enf.RevertAll();
  EXPECT_EQ(Slurp(weight), "1024\n");
  EXPECT_EQ(Slurp(dir + "/cpu.idle"), "0\n");
}

// A container restarted inside a Cpuset-fenced pod (crash loop, liveness probe, OOM kill): on v1
// runc's new cgroup starts with a copy of the pod's, i.e. the fence's, set. Nothing wrote it, yet
// it must be widened when the fence goes — before, it stayed confined until its next restart.
TEST_P(EnforcerCgroupTest, ContainerRestartedUnderACpusetFenceIsWidenedOnRevert) {
  if (GetParam() == CgroupVersion::kV2) {
    GTEST_SKIP() << "v2: a new cgroup's cpuset.cpus is empty (inherits the parent's effective "
                    "set), so the pod dir's revert frees it";
  }
  Tree tree(GetParam());
  const CpuSet all = tree.CpuList();
  if (all.size() < 2) GTEST_SKIP() << "needs at least 2 CPUs";
  PodIdentity pod = tree.AddPod("restart-0001", QosClass::kBurstable, 1, 512, -1);
  const auto before = tree.Snapshot();
  auto [state, store, enf] = Rig(tree);
  auto plan_for = [&](const PodIdentity& p) {
    return OneNeighbour(p, [&](NeighbourAction& a) { a.cpus = CpuSet{all.ToVector().back()}; });
  };
  ExpectEnforced(enf.Apply(plan_for(pod)), 1);
  // The restart: a new container id, a new dir made as runc makes it on v1 (the kernel starts it
  // empty; runc copies the parent's set — the fence's).
  const std::string id = pod.uid + "c9";
  pod.container_ids.push_back("containerd://" + id);
  struct Dirs {
    std::vector<std::string> made;
    ~Dirs() {
      for (auto it = made.rbegin(); it != made.rend(); ++it) ::rmdir(it->c_str());
    }
  } dirs;
  for (const char* c : kControllers) {
    const std::string d = tree.ContainerDir(pod, 1, c);
    ASSERT_EQ(::mkdir(d.c_str(), 0755), 0) << d;
    dirs.made.push_back(d);
  }
  const std::string pod_cpuset = tree.PodDir(pod, "cpuset");
  for (const char* f : {"/cpuset.mems", "/cpuset.cpus"}) {
    ASSERT_TRUE(WriteKnob(tree.ContainerDir(pod, 1, "cpuset") + f,
                          std::string(Trim(Slurp(pod_cpuset + f)))));
  }
  const std::string fresh = tree.ContainerDir(pod, 1, "cpuset") + "/cpuset.cpus";
  ASSERT_EQ(Trim(Slurp(fresh)), CpuSet{all.ToVector().back()}.ToString());
  ExpectEnforced(enf.Apply(plan_for(pod)), 1);
  enf.RevertAll();
  EXPECT_EQ(Trim(Slurp(fresh)), Trim(tree.cpus())) << "the restarted container stayed confined";
  EXPECT_EQ(store->size(), 0u);
  auto after = tree.Snapshot();
  for (const auto& [path, bytes] : before) EXPECT_EQ(after[path], bytes) << path;
}

TEST_P(EnforcerCgroupTest, PinningIsWithdrawnFromAPodWithRunningProcesses) {
  Tree tree(GetParam());
  const CpuSet all = tree.CpuList();
  if (all.size() < 2) GTEST_SKIP() << "needs at least 2 CPUs";
  PodIdentity pod = tree.AddPod("busy-0001", QosClass::kBurstable, 1, 512, -1);
  const std::string ctr = tree.ContainerDir(pod, 0);
  const std::string ctr_cpuset = tree.ContainerDir(pod, 0, "cpuset");
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::pause();
    ::_exit(0);
  }
  struct Reap {
    pid_t pid;
    ~Reap() {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  } reap{child};
  if (tree.v2()) {
    ASSERT_TRUE(WriteKnob(ctr + "/cgroup.procs", std::to_string(child)));
  } else {
    for (const char* c : kControllers) {
      const std::string d = tree.ContainerDir(pod, 0, c);
      ASSERT_TRUE(WriteKnob(d + "/cgroup.procs", std::to_string(child))) << d;
    }
  }
  const std::string before = Slurp(ctr_cpuset + "/cpuset.cpus");
  auto [state, store, enf] = Rig(tree);
  Plan plan = PinnedTrainer(pod, CpuSet{all.ToVector().front()});
  ExpectEnforced(enf.Apply(plan), 1);
  auto rv = enf.RevertAll();
  for (const auto& x : rv.reverts) {
    EXPECT_EQ(x.outcome, reason::kRestored) << x.path << ": " << x.message;
  }
  EXPECT_EQ(store->size(), 0u);
  const std::string after = Slurp(ctr_cpuset + "/cpuset.cpus");
  if (tree.v2() && Trim(before).empty() && !Trim(after).empty()) {
    // The inherited set: what the container's effective set was before the fence.
    EXPECT_EQ(Trim(after),
              Trim(Slurp(tree.Mount("cpu") + "/kubepods/burstable/cpuset.cpus.effective")));
  } else {
    EXPECT_EQ(after, before);
  }
}

constexpr char kEnvVersion[] = "FG_CRASH_VERSION";
constexpr char kEnvState[] = "FG_CRASH_STATE";
constexpr char kEnvKillAfterWrite[] = "FG_CRASH_KILL_AFTER_WRITE";
constexpr char kEnvNeighbours[] = "FG_CRASH_NEIGHBOURS";
constexpr char kEnvReadyFd[] = "FG_CRASH_READY_FD";
constexpr int kCrashNeighbours = 30;

enum class ChildEnd { kKilled, kExitedOk, kOther };

// Re-executes /proc/self/exe as the crash child over `tree` (which rebuilds BigPlan(tree, 30)),
// which SIGKILLs itself after write `kill_after_write` (0: never); or the parent kills it
// `kill_after` (zero: never) after the child said it is about to Apply. `ran` gets the time from
// that moment to the child's end.
ChildEnd RunChild(const Tree& tree, const std::string& state, uint64_t kill_after_write,
                  std::chrono::microseconds kill_after, std::chrono::microseconds* ran = nullptr) {
  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) return ChildEnd::kOther;
  // Everything the child needs is built before fork (only async-signal-safe calls after it).
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "FG_CRASH_", 9) != 0) env.emplace_back(*e);
  }
  env.push_back(std::string(kEnvTree) + "=" + tree.name());
  env.push_back(std::string(kEnvVersion) + "=" + (tree.v2() ? "v2" : "v1"));
  env.push_back(std::string(kEnvState) + "=" + state);
  env.push_back(std::string(kEnvKillAfterWrite) + "=" + std::to_string(kill_after_write));
  env.push_back(std::string(kEnvNeighbours) + "=" + std::to_string(kCrashNeighbours));
  env.push_back(std::string(kEnvReadyFd) + "=" + std::to_string(ready[1]));
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string a0 = "enforcer-crash-child",
              a1 = "--gtest_filter=EnforcerCrashChild.DISABLED_ApplyRevertApply",
              a2 = "--gtest_also_run_disabled_tests", a3 = "--gtest_brief=1";
  char* argv[] = {a0.data(), a1.data(), a2.data(), a3.data(), nullptr};
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(ready[0]);
    ::close(ready[1]);
    return ChildEnd::kOther;
  }
  if (pid == 0) {
    ::fcntl(ready[1], F_SETFD, 0);  // the one fd the child keeps across exec
    ::execve("/proc/self/exe", argv, envp.data());
    ::_exit(127);
  }
  ::close(ready[1]);
  char byte = 0;
  ssize_t n;
  do {
    n = ::read(ready[0], &byte, 1);  // the child's "applying now", or EOF if it died first
  } while (n < 0 && errno == EINTR);
  ::close(ready[0]);
  const auto t0 = std::chrono::steady_clock::now();
  if (n == 1 && kill_after.count() > 0) {
    std::this_thread::sleep_for(kill_after);
    ::kill(pid, SIGKILL);
  }
  int ws = 0;
  if (::waitpid(pid, &ws, 0) != pid) return ChildEnd::kOther;
  if (ran != nullptr) {
    *ran = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() -
                                                                 t0);
  }
  if (WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL) return ChildEnd::kKilled;
  if (WIFEXITED(ws) && WEXITSTATUS(ws) == 0 && n == 1) return ChildEnd::kExitedOk;
  return ChildEnd::kOther;
}

// The crash child. Hidden (DISABLED_) and inert unless re-executed by RunChild with its
// environment; it never returns to gtest: it exits 0 after Apply, RevertAll, Apply.
TEST(EnforcerCrashChild, DISABLED_ApplyRevertApply) {
  const char* name = std::getenv(kEnvTree);
  if (name == nullptr) GTEST_SKIP() << "helper of the crash tests: runs only when re-executed";
  const CgroupVersion v =
      std::string(std::getenv(kEnvVersion)) == "v2" ? CgroupVersion::kV2 : CgroupVersion::kV1;
  Tree tree(v, name);
  Plan plan = BigPlan(tree, std::atoi(std::getenv(kEnvNeighbours)));
  auto store = CheckpointStore::Open(std::getenv(kEnvState));
  if (!store.ok()) ::_exit(2);
  const uint64_t kill_after_write = std::strtoull(std::getenv(kEnvKillAfterWrite), nullptr, 10);
  EnforcerOptions o;
  o.after_write = [kill_after_write](uint64_t n, const std::string&) {
    if (n == kill_after_write) ::kill(::getpid(), SIGKILL);
  };
  Enforcer enf(tree.cgroups(), CheckpointStorePtr(std::move(*store)), o);
  const int ready = std::atoi(std::getenv(kEnvReadyFd));
  if (::write(ready, "r", 1) != 1) ::_exit(3);
  ::close(ready);
  // Apply, unfence and fence again, so a kill can land in a revert as well.
  enf.Apply(plan);
  enf.RevertAll();
  enf.Apply(plan);
  ::_exit(0);
}

void RestartConvergeRevert(Tree& tree, const std::string& state, const Plan& plan,
                           const std::map<std::string, std::string>& before) {
  auto store = OpenStore(state);
  ASSERT_NE(store, nullptr);
  Enforcer enf(tree.cgroups(), store, {});
  EXPECT_FALSE(enf.ready());
  auto r = enf.Apply(plan);
  EXPECT_TRUE(enf.ready());
  ExpectEnforced(r, plan.trainers.size() + plan.neighbours.size());
  EXPECT_EQ(r.overwritten_by_other, 0u);
  EXPECT_EQ(enf.Apply(plan).files_written, 0u);
  auto rv = enf.RevertAll();
  EXPECT_EQ(rv.overwritten_by_other, 0u);
  for (const auto& x : rv.reverts) {
    EXPECT_TRUE(x.outcome == reason::kRestored || x.outcome == reason::kAlreadyOriginal)
        << x.path << ": " << x.outcome << " " << x.message;
  }
  EXPECT_EQ(store->size(), 0u);
  EXPECT_EQ(tree.Snapshot(), before);
}

TEST_P(EnforcerCgroupTest, KillAfterKthWriteThenRestartRestoresEveryByte) {
  Tree tree(GetParam());
  Plan plan = BigPlan(tree, kCrashNeighbours);
  const auto before = tree.Snapshot();
  for (uint64_t k : {1, 2, 3, 7, 40, 99, 150}) {
    SCOPED_TRACE("killed after write " + std::to_string(k));
    TempDir state;
    ASSERT_EQ(RunChild(tree, state.path(), k, std::chrono::microseconds(0)), ChildEnd::kKilled)
        << "child was not killed";
    RestartConvergeRevert(tree, state.path(), plan, before);
    ASSERT_EQ(tree.Snapshot(), before);
  }
}

TEST_P(EnforcerCgroupTest, KillAtRandomTimesThenRestartRestoresEveryByte) {
  Tree tree(GetParam());
  Plan plan = BigPlan(tree, kCrashNeighbours);
  const auto before = tree.Snapshot();
  // How long a full child run takes here (from its "applying now"), to spread the kills over it.
  std::chrono::microseconds full{0};
  {
    TempDir state;
    ASSERT_EQ(RunChild(tree, state.path(), 0, std::chrono::microseconds(0), &full),
              ChildEnd::kExitedOk);
    RestartConvergeRevert(tree, state.path(), plan, before);
  }
  std::mt19937 rng(12345);
  int killed = 0;
  for (int i = 0; i < 8; ++i) {
    auto delay = std::chrono::microseconds(1 + rng() % std::max<int64_t>(1, full.count() / 2));
    SCOPED_TRACE("kill after " + std::to_string(delay.count()) + "us of ~" +
                 std::to_string(full.count()) + "us");
    TempDir state;
    ChildEnd end = RunChild(tree, state.path(), 0, delay);
    ASSERT_NE(end, ChildEnd::kOther);
    killed += end == ChildEnd::kKilled;
    RestartConvergeRevert(tree, state.path(), plan, before);
    ASSERT_EQ(tree.Snapshot(), before);
  }
  EXPECT_GT(killed, 0) << "no run was killed mid-way";
  std::cout << "[ info ] full run " << full.count() << "us, killed " << killed << "/8\n";
}

INSTANTIATE_TEST_SUITE_P(Version, EnforcerCgroupTest, BothVersions(), VersionName);

}  // namespace
}  // namespace feedguard::agent
