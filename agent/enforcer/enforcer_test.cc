#include "agent/enforcer/enforcer.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "agent/cgroup/fs_cgroups.h"
#include "agent/cgroup/kubelet_facts.h"
#include "agent/enforcer/fake_node.h"
#include "common/strings.h"

namespace feedguard::agent {
namespace {

namespace fs = std::filesystem;
using cgroup::CgroupVersion;
using cgroup::KubeletDriver;

using testutil::FakeNode;
using testutil::Put;
using testutil::Slurp;

CheckpointStorePtr OpenStore(const std::string& dir) {
  auto s = CheckpointStore::Open(dir);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return CheckpointStorePtr(std::move(*s));
}

// The knobs of a neighbour's fence; unset ones are left alone.
struct Knobs {
  std::optional<bool> idle;
  std::optional<uint64_t> weight;
  std::optional<CpuQuota> quota;
  std::optional<CpuSet> cpus;
};

NeighbourAction Neighbour(const PodIdentity& p, const Knobs& k = {}) {
  NeighbourAction n;
  n.pod = p;
  n.policy = "p1";
  n.idle = k.idle;
  n.weight = k.weight;
  n.quota = k.quota;
  n.cpus = k.cpus;
  return n;
}

// A plan fencing each of `pods` with the same knobs.
Plan FencePlan(const std::vector<PodIdentity>& pods, const Knobs& k) {
  Plan plan;
  for (const auto& p : pods) plan.neighbours.push_back(Neighbour(p, k));
  return plan;
}

// Idle fences on `pods`, each planned with the CPU request `req_milli` (what kubelet's in-place
// resize changes).
Plan IdlePlan(std::vector<PodIdentity> pods, int64_t req_milli) {
  for (auto& p : pods) p.cpu_request_milli = req_milli;
  return FencePlan(pods, {.idle = true});
}

// Options whose time is `clock`'s.
EnforcerOptions Clocked(std::shared_ptr<ManualTimeSource> clock) {
  EnforcerOptions o;
  o.time_source = std::move(clock);
  return o;
}

// A checkpoint store in the node's state dir and an enforcer over it: `auto [store, enf] =
// Rig(node);` (a prvalue, so the pair is built in place).
struct Rig {
  explicit Rig(const FakeNode& node, EnforcerOptions o = {})
      : store(OpenStore(node.state_dir())), enf(node.cgroups(), store, std::move(o)) {}
  CheckpointStorePtr store;
  Enforcer enf;
};

TrainerPlacement Trainer(const PodIdentity& p, const std::string& policy = "vision") {
  TrainerPlacement t;
  t.pod = p;
  t.policy = policy;
  return t;
}

class EnforcerV1Test : public ::testing::Test {
 protected:
  // Two burstable pods for kubelet's in-place resize of Idle fences, and a clock: `pod`, whose
  // weight file holds kubelet's 256 (a 250m request), and `slow`.
  struct ResizeScene {
    std::shared_ptr<ManualTimeSource> clock;
    PodIdentity pod, slow;
    std::string shares, idle;  // `pod`'s
    // Both Idle-fenced, planned with the request `req_milli`.
    Plan At(int64_t req_milli) const { return IdlePlan({pod, slow}, req_milli); }
  };
  ResizeScene AddResizeScene(const std::string& tag) {
    ResizeScene s{std::make_shared<ManualTimeSource>(),
                  node_.AddPod("88888888-" + tag, QosClass::kBurstable, {"c1"}),
                  node_.AddPod("99999999-" + tag, QosClass::kBurstable, {"c1"})};
    s.shares = node_.CpuFile(s.pod, "cpu.shares");
    s.idle = node_.CpuFile(s.pod, "cpu.idle");
    Put(s.shares, "256\n");
    return s;
  }

  FakeNode node_{CgroupVersion::kV1, KubeletDriver::kCgroupfs};
};

TEST_F(EnforcerV1Test, IdleNeighbourIsWrittenVerifiedCheckpointedAndIdempotent) {
  auto pod = node_.AddPod("11111111-aaaa", QosClass::kBestEffort, {"c1"});
  auto [store, enf] = Rig(node_);
  EXPECT_FALSE(enf.ready());
  Plan plan = FencePlan({pod}, {.idle = true});
  plan.fence_version = 4;

  const std::string idle = node_.CpuFile(pod, "cpu.idle");
  auto r = enf.Apply(plan);
  ASSERT_EQ(r.pods.size(), 1u);
  EXPECT_TRUE(r.pods[0].enforced()) << r.pods[0].reason() << ": " << r.pods[0].message();
  EXPECT_EQ(r.enforced, 1u);
  EXPECT_EQ(r.files_written, 1u);
  EXPECT_EQ(Slurp(idle), "1");
  EXPECT_TRUE(enf.ready());
  auto e = store->Get(idle);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->original, "0\n");
  EXPECT_EQ(e->written, "1");
  EXPECT_EQ(e->pod_uid, pod.uid);
  EXPECT_EQ(e->knob, "cpu.idle");
  EXPECT_TRUE(e->also_ours.empty());
  EXPECT_EQ(store->applied_version(), 4u);
  // cpu.idle, plus the weight file the kernel resets when idle changes (checkpointed so a
  // revert can restore kubelet's value; plain files here, so it still reads 1024).
  const std::string shares = node_.CpuFile(pod, "cpu.shares");
  EXPECT_EQ(enf.OwnedFiles(), (std::vector<std::string>{idle, shares}));
  EXPECT_EQ(store->Get(shares)->original, "1024\n");
  EXPECT_EQ(Slurp(shares), "1024\n");

  const uint64_t writes = enf.writes_made();
  const uint64_t saves = store->saves();
  auto again = enf.Apply(plan);
  EXPECT_EQ(again.files_written, 0u);
  EXPECT_TRUE(again.writes.empty());
  EXPECT_EQ(again.enforced, 1u);
  EXPECT_EQ(enf.writes_made(), writes);
  EXPECT_EQ(store->saves(), saves);
}

TEST_F(EnforcerV1Test, ManyPodsAreCheckpointedInOneCommitBeforeAnyWrite) {
  // Each commit is a temp file, an fsync, a rename and a directory fsync: on a busy disk that is
  // the cost of an Apply, so it must not grow with the number of pods.
  auto [store, enf] = Rig(node_);
  Plan plan;
  plan.fence_version = 9;
  std::vector<std::string> idle_files;
  for (int i = 0; i < 16; ++i) {
    char uid[32];
    std::snprintf(uid, sizeof uid, "%08d-cccc", i);
    auto pod = node_.AddPod(uid, QosClass::kBurstable, {"c1"});
    plan.neighbours.push_back(Neighbour(pod, {.idle = true}));
    idle_files.push_back(node_.CpuFile(pod, "cpu.idle"));
  }
  const uint64_t saves = store->saves();
  auto r = enf.Apply(plan);
  EXPECT_EQ(r.enforced, 16u);
  EXPECT_EQ(r.failed, 0u);
  for (const auto& f : idle_files) EXPECT_EQ(Slurp(f), "1") << f;
  // One commit before the writes, one to settle, one for the applied version.
  EXPECT_LE(store->saves() - saves, 3u);
  EXPECT_EQ(store->size(), 32u);  // cpu.idle + cpu.shares per pod
  auto back = enf.RevertAll();
  // Leaving idle resets the weight on a real kernel, so cpu.shares is written back after each
  // cpu.idle even where (as on these plain files) it still reads its original.
  EXPECT_EQ(back.files_reverted, 32u);
  EXPECT_EQ(store->size(), 0u);
  for (const auto& f : idle_files) EXPECT_EQ(Slurp(f), "0\n") << f;
}

TEST_F(EnforcerV1Test, WeightAndQuotaUseV1FilesAndRevertToExactBytes) {
  auto pod = node_.AddPod("22222222-bbbb", QosClass::kBurstable, {"c1"});
  const auto before = node_.Snapshot();
  auto [store, enf] = Rig(node_);
  Plan plan = FencePlan({pod}, {.weight = 1, .quota = CpuQuota{50000, 100000}});
  auto r = enf.Apply(plan);
  ASSERT_TRUE(r.pods[0].enforced()) << r.pods[0].message();
  EXPECT_EQ(Slurp(node_.CpuFile(pod, "cpu.shares")), std::to_string(cgroup::WeightToShares(1)));
  EXPECT_EQ(Slurp(node_.CpuFile(pod, "cpu.cfs_quota_us")), "50000");
  // The period already held 100000: not rewritten.
  EXPECT_EQ(Slurp(node_.CpuFile(pod, "cpu.cfs_period_us")), "100000\n");
  EXPECT_EQ(store->size(), 2u);
  // The container dirs are untouched (pod-level fence).
  EXPECT_EQ(Slurp(node_.CpuFile(pod, "cpu.shares", node_.ContainerSub("c1"))), "1024\n");

  auto rv = enf.Apply(Plan{});
  EXPECT_EQ(rv.files_reverted, 2u);
  EXPECT_EQ(store->size(), 0u);
  EXPECT_EQ(node_.Snapshot(), before);
}

// A pod with a CFS burst above its quota share (the kernel would refuse the fence's quota:
// EINVAL on v1 and v2): the fence lowers the burst to 0 before the quota, journals it like any
// knob, keeps it while the fence holds, and the revert puts every byte back, burst last.
TEST_F(EnforcerV1Test, QuotaFenceLowersTheBurstAndRestoresItExactly) {
  auto pod = node_.AddPod("22222222-dddd", QosClass::kBurstable, {"c1"});
  const std::string burst = node_.CpuFile(pod, "cpu.cfs_burst_us");
  const std::string quota = node_.CpuFile(pod, "cpu.cfs_quota_us");
  Put(burst, "50000\n");
  const auto before = node_.Snapshot();
  auto [store, enf] = Rig(node_);
  Plan plan = FencePlan({pod}, {.quota = CpuQuota{20000, 100000}});
  auto r = enf.Apply(plan);
  ASSERT_TRUE(r.pods[0].enforced()) << r.pods[0].message();
  ASSERT_EQ(r.writes.size(), 2u);
  EXPECT_EQ(r.writes[0], (cgroup::FileWrite{burst, "0"}));
  EXPECT_EQ(r.writes[1], (cgroup::FileWrite{quota, "20000"}));
  EXPECT_EQ(Slurp(burst), "0");
  auto e = store->Get(burst);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->original, "50000\n");
  EXPECT_EQ(e->written, "0");
  // Idempotent, and the burst stays the fence's (not reverted as a knob no longer wanted).
  auto again = enf.Apply(plan);
  EXPECT_EQ(again.files_written, 0u);
  EXPECT_TRUE(again.reverts.empty());
  EXPECT_TRUE(store->Get(burst).has_value());
  // Another writer raising the burst under the fence: its value is the original, the fence
  // lowers it again.
  Put(burst, "40000\n");
  auto v = enf.Verify();
  EXPECT_EQ(v.overwrites, 1u);
  EXPECT_EQ(Slurp(burst), "0");
  EXPECT_EQ(store->Get(burst)->original, "40000\n");
  Put(burst, "50000\n");  // and back to the pod's own value
  enf.Verify();
  auto rv = enf.Apply(Plan{});
  EXPECT_EQ(rv.files_reverted, 2u);
  ASSERT_GE(rv.writes.size(), 2u);
  EXPECT_EQ(rv.writes.back(), (cgroup::FileWrite{burst, "50000\n"}));  // after the quota
  EXPECT_EQ(store->size(), 0u);
  EXPECT_EQ(node_.Snapshot(), before);
}

// Switching a pod from a Quota fence to Idle gives the burst back with the quota.
TEST_F(EnforcerV1Test, LeavingTheQuotaFenceGivesTheBurstBack) {
  auto pod = node_.AddPod("22222222-eeee", QosClass::kBurstable, {"c1"});
  const std::string burst = node_.CpuFile(pod, "cpu.cfs_burst_us");
  Put(burst, "50000\n");
  auto [store, enf] = Rig(node_);
  Plan plan = FencePlan({pod}, {.quota = CpuQuota{20000, 100000}});
  ASSERT_TRUE(enf.Apply(plan).pods[0].enforced());
  EXPECT_EQ(Slurp(burst), "0");
  plan.neighbours[0].quota.reset();
  plan.neighbours[0].idle = true;
  auto r = enf.Apply(plan);
  ASSERT_TRUE(r.pods[0].enforced()) << r.pods[0].message();
  EXPECT_EQ(Slurp(burst), "50000\n");
  EXPECT_EQ(Slurp(node_.CpuFile(pod, "cpu.cfs_quota_us")), "-1\n");
  EXPECT_FALSE(store->Get(burst).has_value());
}

TEST_F(EnforcerV1Test, PeriodChangeUnderASetQuotaGoesThroughUnlimited) {
  auto pod = node_.AddPod("22222222-cccc", QosClass::kBurstable, {});
  Put(node_.CpuFile(pod, "cpu.cfs_quota_us"), "200000\n");
  auto [store, enf] = Rig(node_);
  Plan plan = FencePlan({pod}, {.quota = CpuQuota{25000, 50000}});
  auto r = enf.Apply(plan);
  ASSERT_TRUE(r.pods[0].enforced()) << r.pods[0].message();
  ASSERT_EQ(r.writes.size(), 3u);
  EXPECT_EQ(r.writes[0].value, "-1");
  EXPECT_EQ(r.writes[1].value, "50000");
  EXPECT_EQ(r.writes[2].value, "25000");
  auto rv = enf.RevertAll();
  EXPECT_EQ(Slurp(node_.CpuFile(pod, "cpu.cfs_quota_us")), "200000\n");
  EXPECT_EQ(Slurp(node_.CpuFile(pod, "cpu.cfs_period_us")), "100000\n");
  // Quota is restored before the period.
  ASSERT_GE(rv.writes.size(), 2u);
  EXPECT_NE(rv.writes[0].path.find("cfs_quota_us"), std::string::npos);
}

TEST_F(EnforcerV1Test, TrainerCpusetOnPodAndContainersThenRevert) {
  auto pod = node_.AddPod("33333333-cccc", QosClass::kGuaranteed, {"a", "b"});
  const auto before = node_.Snapshot();
  auto [store, enf] = Rig(node_);
  Plan plan;
  auto t = Trainer(pod);
  t.cpus = CpuSet::Range(2, 5);
  t.mems = CpuSet{0};
  plan.trainers.push_back(t);
  auto r = enf.Apply(plan);
  ASSERT_TRUE(r.pods[0].enforced()) << r.pods[0].reason() << " " << r.pods[0].message();
  EXPECT_EQ(r.pods[0].cpus(), "2-5");
  EXPECT_EQ(r.pods[0].role(), feedguard::v1::PodReport::TRAINER);
  for (std::string sub : {std::string(), node_.ContainerSub("a"), node_.ContainerSub("b")}) {
    EXPECT_EQ(Slurp(node_.CpusetFile(pod, "cpuset.cpus", sub)), "2-5") << sub;
    EXPECT_EQ(Slurp(node_.CpusetFile(pod, "cpuset.mems", sub)), "0") << sub;
  }
  // Shrinking: children before the pod dir.
  ASSERT_EQ(r.writes.size(), 6u);
  EXPECT_EQ(r.writes[2].path, node_.CpusetFile(pod, "cpuset.cpus"));
  EXPECT_EQ(store->size(), 6u);

  // Moving the trainer to disjoint CPUs: the pod dir grows to the union first.
  plan.trainers[0].cpus = CpuSet::Range(6, 7);
  auto moved = enf.Apply(plan);
  ASSERT_TRUE(moved.pods[0].enforced()) << moved.pods[0].message();
  ASSERT_FALSE(moved.writes.empty());
  EXPECT_EQ(moved.writes[0].path, node_.CpusetFile(pod, "cpuset.cpus"));
  EXPECT_EQ(moved.writes[0].value, "2-7");
  EXPECT_EQ(Slurp(node_.CpusetFile(pod, "cpuset.cpus", node_.ContainerSub("a"))), "6-7");

  auto rv = enf.RevertAll();
  EXPECT_EQ(rv.files_reverted, 6u);
  // Growing back: the pod dir is restored before its containers.
  ASSERT_FALSE(rv.writes.empty());
  EXPECT_EQ(rv.writes[0].path, node_.CpusetFile(pod, "cpuset.cpus"));
  EXPECT_EQ(node_.Snapshot(), before);
  EXPECT_EQ(store->size(), 0u);
}

TEST_F(EnforcerV1Test, TrainerWeightIsWrittenOnThePodDirAndRestored) {
  auto pod = node_.AddPod("33333333-dddd", QosClass::kBurstable, {"main"});
  const auto before = node_.Snapshot();
  auto [store, enf] = Rig(node_);
  Plan plan;
  auto t = Trainer(pod);
  t.weight = 10000;  // not pinned: weight only
  plan.trainers.push_back(t);
  auto r = enf.Apply(plan);
  ASSERT_TRUE(r.pods[0].enforced()) << r.pods[0].reason() << " " << r.pods[0].message();
  EXPECT_EQ(Slurp(node_.CpuFile(pod, "cpu.shares")), "262144");
  EXPECT_EQ(Slurp(node_.CpuFile(pod, "cpu.shares", node_.ContainerSub("main"))), "1024\n");
  EXPECT_EQ(store->size(), 1u);
  // The pod stops being a trainer: kubelet's bytes come back.
  auto rv = enf.Apply(Plan{});
  EXPECT_EQ(rv.files_reverted, 1u);
  EXPECT_EQ(node_.Snapshot(), before);
}

// A node can carry an enforced policy and a DryRun one: the DryRun policy's pods are reported
// as "would write" and nothing of theirs is written or checkpointed.
TEST_F(EnforcerV1Test, DryRunEntriesOfAnEnforcedPlanAreNotWritten) {
  auto fenced = node_.AddPod("55555555-0001", QosClass::kBurstable, {});
  auto watched = node_.AddPod("55555555-0002", QosClass::kBurstable, {});
  auto trainer = node_.AddPod("55555555-0003", QosClass::kBurstable, {"t"});
  const std::string watched_idle = node_.CpuFile(watched, "cpu.idle");
  const std::string trainer_shares = node_.CpuFile(trainer, "cpu.shares");
  const std::string watched_before = Slurp(watched_idle);
  const std::string trainer_before = Slurp(trainer_shares);
  const std::string trainer_cpus =
      node_.CpusetFile(trainer, "cpuset.cpus", node_.ContainerSub("t"));
  const std::string trainer_cpus_before = Slurp(trainer_cpus);
  auto [store, enf] = Rig(node_);
  Plan plan = FencePlan({fenced}, {.idle = true});  // plan.dry_run stays false: one is enforced
  auto d = Neighbour(watched, {.idle = true});
  d.policy = "try-it";
  d.dry_run = true;
  plan.neighbours.push_back(d);
  auto t = Trainer(trainer, "try-it");
  t.weight = 10000;
  t.cpus = CpuSet::Range(2, 3);
  t.dry_run = true;
  plan.trainers.push_back(t);
  auto r = enf.Apply(plan);
  EXPECT_FALSE(r.dry_run);
  EXPECT_EQ(Slurp(node_.CpuFile(fenced, "cpu.idle")), "1");
  EXPECT_EQ(Slurp(watched_idle), watched_before);
  EXPECT_EQ(Slurp(trainer_shares), trainer_before);
  EXPECT_EQ(Slurp(trainer_cpus), trainer_cpus_before);
  // Only the enforced neighbour's files: cpu.idle and (v1 side effect) cpu.shares.
  EXPECT_EQ(store->size(), 2u);
  for (const auto& e : store->Entries()) EXPECT_EQ(e.pod_uid, fenced.uid) << e.path;
  EXPECT_EQ(r.enforced, 1u);
  EXPECT_EQ(r.failed, 0u);
  EXPECT_EQ(r.files_written, 1u);
  ASSERT_EQ(r.writes.size(), 1u);  // the writes performed, not the would-be ones
  EXPECT_EQ(r.writes[0].path, node_.CpuFile(fenced, "cpu.idle"));
  int dry = 0;
  ASSERT_EQ(r.pod_files_written.size(), r.pods.size());
  for (size_t i = 0; i < r.pods.size(); ++i) {
    const auto& p = r.pods[i];
    if (p.uid() == fenced.uid) continue;
    ++dry;
    EXPECT_FALSE(p.enforced()) << p.name();
    EXPECT_EQ(p.reason(), reason::kDryRun) << p.name();
    EXPECT_GT(r.pod_files_written[i], 0u) << p.name();  // would write
  }
  EXPECT_EQ(dry, 2);
}

TEST_F(EnforcerV1Test, SwitchingIdleToWeightRevertsIdleBeforeWritingShares) {
  auto pod = node_.AddPod("44444444-dddd", QosClass::kBurstable, {});
  auto [store, enf] = Rig(node_);
  Plan plan = FencePlan({pod}, {.idle = true});
  ASSERT_TRUE(enf.Apply(plan).pods[0].enforced());
  plan.neighbours[0].idle.reset();
  plan.neighbours[0].weight = 1;
  auto r = enf.Apply(plan);
  ASSERT_TRUE(r.pods[0].enforced()) << r.pods[0].message();
  ASSERT_EQ(r.writes.size(), 2u);
  EXPECT_EQ(r.writes[0].path, node_.CpuFile(pod, "cpu.idle"));
  EXPECT_EQ(r.writes[0].value, "0\n");
  EXPECT_EQ(r.writes[1].path, node_.CpuFile(pod, "cpu.shares"));
  EXPECT_EQ(Slurp(node_.CpuFile(pod, "cpu.idle")), "0\n");
  EXPECT_FALSE(store->Get(node_.CpuFile(pod, "cpu.idle")).has_value());
}

TEST_F(EnforcerV1Test, TamperedCheckpointPathsAreRefusedNotFollowed) {
  auto victim = node_.AddPod("66666666-ffff", QosClass::kBurstable, {});
  auto other = node_.AddPod("77777777-ffff", QosClass::kBurstable, {});
  const std::string victim_shares = node_.CpuFile(victim, "cpu.shares");
  const std::string other_shares = node_.CpuFile(other, "cpu.shares");
  Put(victim_shares, "2\n");
  Put(other_shares, "2\n");
  // Entries naming the pod "other" but pointing elsewhere: through "..", and at another pod.
  const std::string dotdot = node_.CpuFile(other, "../pod" + victim.uid + "/cpu.shares");
  {
    auto store = OpenStore(node_.state_dir());
    ASSERT_TRUE(store->Put({dotdot, "cpu.shares", other.uid, "999", "2", {}}).ok());
    ASSERT_TRUE(store->Put({victim_shares, "cpu.shares", other.uid, "998", "2", {}}).ok());
  }
  auto [store, enf] = Rig(node_);
  auto r = enf.RevertAll();
  ASSERT_EQ(r.reverts.size(), 2u);
  for (const auto& x : r.reverts) {
    EXPECT_EQ(x.outcome, reason::kRevertFailed) << x.path;
    EXPECT_NE(x.message.find("refusing to write"), std::string::npos) << x.message;
  }
  EXPECT_EQ(Slurp(victim_shares), "2\n");
  EXPECT_EQ(Slurp(other_shares), "2\n");
}

// A checkpoint is a file anyone with root can edit. An entry inside the right pod's dir for a
// file that is no knob — the pod's cgroup.procs, whose "original" is another process's PID —
// would make a revert move that process into the pod: refused, never written, by a revert and
// by an Apply that finds the entry stale.
TEST_F(EnforcerV1Test, TamperedCheckpointEntryForAFileThatIsNoKnobIsRefused) {
  auto pod = node_.AddPod("66666666-eeee", QosClass::kBurstable, {"c1"});
  const std::string procs = node_.CpuFile(pod, "cgroup.procs");
  const std::string tasks = node_.CpusetFile(pod, "tasks", node_.ContainerSub("c1"));
  Put(procs, "");
  Put(tasks, "");
  {
    auto store = OpenStore(node_.state_dir());
    ASSERT_TRUE(store->Put({procs, "cgroup.procs", pod.uid, "4242", "", {}}).ok());
    ASSERT_TRUE(store->Put({tasks, "tasks", pod.uid, "4243", "", {}}).ok());
  }
  auto [store, enf] = Rig(node_);
  for (const ApplyReport& r : {enf.Apply(Plan{}), enf.RevertAll()}) {
    ASSERT_EQ(r.reverts.size(), 2u);
    for (const auto& x : r.reverts) {
      EXPECT_EQ(x.outcome, reason::kRevertFailed) << x.path;
      EXPECT_NE(x.message.find("not a knob file"), std::string::npos) << x.message;
    }
    EXPECT_TRUE(r.writes.empty());
  }
  EXPECT_EQ(Slurp(procs), "");
  EXPECT_EQ(Slurp(tasks), "");
}

// kubelet's in-place resize of an Idle-fenced pod: its weight write would fail while the group
// is idle, so the fence steps aside when the pod's request changes, kubelet's value is adopted
// as the original once it lands, and the fence comes back.
TEST_F(EnforcerV1Test, IdleFenceStepsAsideForKubeletsResizeThenReturns) {
  const auto scene = AddResizeScene("aaaa");
  const auto& [clock, pod, slow, shares, idle] = scene;
  auto [store, enf] = Rig(node_, Clocked(clock));
  ASSERT_EQ(enf.Apply(scene.At(250)).enforced, 2u);
  ASSERT_EQ(Slurp(idle), "1");
  // kubelet accepted a resize to 400m: the fence steps aside.
  auto r = enf.Apply(scene.At(400));
  EXPECT_EQ(r.failed, 0u);
  for (const auto& p : r.pods) {
    EXPECT_FALSE(p.enforced());
    EXPECT_EQ(p.reason(), reason::kResizePending) << p.uid();
  }
  EXPECT_EQ(Slurp(idle), "0");
  // kubelet's retry lands for `pod`; `slow` never sees it.
  Put(shares, "409\n");
  r = enf.Apply(scene.At(400));
  EXPECT_TRUE(r.pods[0].enforced()) << r.pods[0].reason();
  EXPECT_EQ(r.pods[1].reason(), reason::kResizePending);
  EXPECT_EQ(Slurp(idle), "1");
  EXPECT_EQ(store->Get(shares)->original, "409\n");
  // Past the timeout the fence comes back without kubelet's write.
  clock->Advance(std::chrono::seconds(61));
  r = enf.Apply(scene.At(400));
  EXPECT_EQ(r.enforced, 2u);
  EXPECT_EQ(Slurp(node_.CpuFile(slow, "cpu.idle")), "1");
  // Withdrawn: kubelet's resized value stays.
  enf.RevertAll();
  EXPECT_EQ(Slurp(shares), "409\n");
  EXPECT_EQ(Slurp(idle), "0\n");
}

// kubelet resizes an Idle-fenced pod: the write to the weight file (the Watcher's event) is the
// landing, and the fence goes back on with kubelet's value as the original. A pod whose write
// never comes is fenced again by the sweep once resize_yield_timeout has passed (before, only a
// new fence version or an overwrite would look at it again).
TEST_F(EnforcerV1Test, IdleResizeLandsOnKubeletsWriteAndTheSweepTimesOut) {
  const auto scene = AddResizeScene("bbbb");
  const auto& [clock, pod, slow, shares, idle] = scene;
  const std::string slow_idle = node_.CpuFile(slow, "cpu.idle");
  Put(node_.CpuFile(slow, "cpu.shares"), "256\n");
  auto [store, enf] = Rig(node_, Clocked(clock));
  ASSERT_EQ(enf.Apply(scene.At(250)).enforced, 2u);
  // Resized to 1000m: the fences step aside. (On a real kernel leaving idle resets shares to
  // 1024; tests/integration/enforcer checks that case. These plain files keep 256.)
  auto r = enf.Apply(scene.At(1000));
  EXPECT_EQ(r.pods[0].reason(), reason::kResizePending);
  EXPECT_EQ(Slurp(idle), "0");
  // A sweep before anything was written and before the timeout: still waiting.
  EXPECT_EQ(enf.Verify().reapplied, 0u);
  EXPECT_EQ(Slurp(idle), "0");
  // kubelet's retry writes 1024: the pod is fenced again, kubelet's value its original.
  Put(shares, "1024\n");
  auto v = enf.Verify({shares});
  EXPECT_GE(v.reapplied, 1u);
  EXPECT_EQ(Slurp(idle), "1");
  EXPECT_EQ(store->Get(shares)->original, "1024\n");
  EXPECT_EQ(Slurp(slow_idle), "0");  // nothing was written to `slow`'s weight
  // `slow` never sees kubelet's write: the sweep puts its fence back after the timeout.
  clock->Advance(std::chrono::seconds(61));
  enf.Verify();
  EXPECT_EQ(Slurp(slow_idle), "1");
  EXPECT_EQ(enf.Apply(scene.At(1000)).enforced, 2u);
  enf.RevertAll();
  EXPECT_EQ(Slurp(shares), "1024\n");
  EXPECT_EQ(Slurp(idle), "0\n");
}

// v1 Quota fence, kubelet resizes the pod in place (a limit change): kubelet writes the pod's
// quota, then runc the container's — refused under a re-fenced pod, retried until contested. So a
// new value in the pod's bandwidth file makes the fence wait resize_settle (ResizePending),
// leaving kubelet's and runc's writes alone; then it returns with their values as the originals.
TEST_F(EnforcerV1Test, QuotaFenceWaitsForKubeletsResizeThenReturns) {
  auto clock = std::make_shared<ManualTimeSource>();
  auto pod = node_.AddPod("77777777-aaaa", QosClass::kBurstable, {"c1"});
  const std::string pod_quota = node_.CpuFile(pod, "cpu.cfs_quota_us");
  const std::string ctr_quota = node_.CpuFile(pod, "cpu.cfs_quota_us", node_.ContainerSub("c1"));
  Put(pod_quota, "100000\n");  // limit 1 CPU
  Put(ctr_quota, "100000\n");
  auto o = Clocked(clock);
  o.contest_threshold = 3;
  auto [store, enf] = Rig(node_, o);
  Plan plan = FencePlan({pod}, {.quota = CpuQuota{50000, 100000}});
  ASSERT_TRUE(enf.Apply(plan).pods[0].enforced());
  ASSERT_EQ(Slurp(pod_quota), "50000");
  ASSERT_EQ(Slurp(ctr_quota), "-1");  // lifted: inherits the pod's fence
  // kubelet resizes to a 1.5 CPU limit: pod first, then runc the container.
  Put(pod_quota, "150000\n");
  auto v = enf.Verify({pod_quota});
  EXPECT_EQ(Slurp(pod_quota), "150000\n") << "re-fenced under kubelet's resize";
  Put(ctr_quota, "150000\n");
  v = enf.Verify({ctr_quota});
  EXPECT_EQ(Slurp(ctr_quota), "150000\n");
  auto r = enf.Apply(plan);  // the controller's fence for the resized pod, meanwhile
  EXPECT_EQ(r.pods[0].reason(), reason::kResizePending);
  EXPECT_EQ(Slurp(pod_quota), "150000\n");
  EXPECT_EQ(enf.Tick().reapplied, 0u);  // still settling
  clock->Advance(std::chrono::seconds(4));
  EXPECT_GE(enf.Tick().reapplied, 1u);
  EXPECT_EQ(Slurp(pod_quota), "50000");
  EXPECT_EQ(Slurp(ctr_quota), "-1");
  EXPECT_TRUE(enf.ContestedPods().empty());
  r = enf.Apply(plan);
  EXPECT_TRUE(r.pods[0].enforced()) << r.pods[0].reason() << ": " << r.pods[0].message();
  enf.RevertAll();
  EXPECT_EQ(Slurp(pod_quota), "150000\n");
  EXPECT_EQ(Slurp(ctr_quota), "150000\n");
}

// The order a loaded node showed (node_kubelet_ops step 3 under CI load): kubelet's and runc's
// writes are seen at once, the controller's fence for the resized pod arrives only after the
// settle, and the sweeps keep running. Each of kubelet's and runc's writes is one overwrite,
// however many judgements see it before the fence is back; the fence returns and is not
// Contested.
TEST_F(EnforcerV1Test, AResizeSeenByManyJudgementsIsOneOverwrite) {
  auto clock = std::make_shared<ManualTimeSource>();
  auto pod = node_.AddPod("77777777-cccc", QosClass::kBurstable, {"c1"});
  const std::string pod_quota = node_.CpuFile(pod, "cpu.cfs_quota_us");
  const std::string ctr_quota = node_.CpuFile(pod, "cpu.cfs_quota_us", node_.ContainerSub("c1"));
  Put(pod_quota, "100000\n");
  Put(ctr_quota, "100000\n");
  auto o = Clocked(clock);
  o.contest_threshold = 3;
  auto [store, enf] = Rig(node_, o);
  Plan plan = FencePlan({pod}, {.quota = CpuQuota{50000, 100000}});
  ASSERT_TRUE(enf.Apply(plan).pods[0].enforced());
  Put(pod_quota, "150000\n");  // kubelet
  Put(ctr_quota, "150000\n");  // runc
  auto v = enf.Verify({pod_quota, ctr_quota});
  EXPECT_EQ(v.overwrites, 2u);
  EXPECT_EQ(enf.Verify().overwrites, 0u) << "a sweep during the settle saw the same writes again";
  clock->Advance(std::chrono::seconds(4));
  // The controller's fence for the resized pod, after the settle, before any Tick.
  auto r = enf.Apply(plan);
  EXPECT_TRUE(r.pods[0].enforced()) << r.pods[0].reason() << ": " << r.pods[0].message();
  EXPECT_EQ(Slurp(pod_quota), "50000");
  EXPECT_EQ(Slurp(ctr_quota), "-1");
  EXPECT_EQ(enf.Tick().overwrites, 0u);
  clock->Advance(std::chrono::seconds(10));
  v = enf.Verify();
  EXPECT_EQ(v.overwrites, 0u);
  EXPECT_TRUE(enf.ContestedPods().empty());
  EXPECT_EQ(enf.OverwriteCounts()[pod.uid], 2u);
  enf.RevertAll();
  EXPECT_EQ(Slurp(pod_quota), "150000\n");
  EXPECT_EQ(Slurp(ctr_quota), "150000\n");
}

TEST_F(EnforcerV1Test, AResizeIsSeenAcrossAnAgentRestart) {
  auto pod = node_.AddPod("88888888-bbbb", QosClass::kBurstable, {"c1"});
  auto plan_with = [&](int64_t req) { return IdlePlan({pod}, req); };
  {
    auto [store, enf] = Rig(node_);
    ASSERT_EQ(enf.Apply(plan_with(250)).enforced, 1u);
  }
  auto [store, enf] = Rig(node_);
  auto r = enf.Apply(plan_with(400));  // resized while the agent was down (the CLI: every call)
  ASSERT_EQ(r.pods.size(), 1u);
  EXPECT_EQ(r.pods[0].reason(), reason::kResizePending);
  EXPECT_EQ(Slurp(node_.CpuFile(pod, "cpu.idle")), "0");
}

TEST_F(EnforcerV1Test, OverwrittenFileIsLeftAloneOnRevert) {
  auto pod = node_.AddPod("55555555-eeee", QosClass::kBurstable, {});
  auto [store, enf] = Rig(node_);
  Plan plan = FencePlan({pod}, {.idle = true, .weight = 1});
  ASSERT_TRUE(enf.Apply(plan).pods[0].enforced());
  Put(node_.CpuFile(pod, "cpu.shares"), "777\n");  // kubelet resized the pod
  auto r = enf.Apply(Plan{});
  EXPECT_EQ(r.overwritten_by_other, 1u);
  EXPECT_EQ(r.files_reverted, 1u);
  EXPECT_EQ(Slurp(node_.CpuFile(pod, "cpu.shares")), "777\n");
  EXPECT_EQ(Slurp(node_.CpuFile(pod, "cpu.idle")), "0\n");
  bool saw = false;
  for (const auto& rr : r.reverts) {
    if (rr.outcome == reason::kOverwrittenByOther) {
      saw = true;
      EXPECT_EQ(rr.path, node_.CpuFile(pod, "cpu.shares"));
    }
  }
  EXPECT_TRUE(saw);
  EXPECT_EQ(store->size(), 0u);
}

TEST_F(EnforcerV1Test, DryRunWritesNothingAndReportsWhatItWould) {
  auto pod = node_.AddPod("66666666-ffff", QosClass::kBurstable, {"x"});
  const auto before = node_.Snapshot();
  auto [store, enf] = Rig(node_);
  Plan plan = FencePlan({pod}, {.idle = true, .cpus = CpuSet::Range(4, 7)});
  plan.dry_run = true;
  auto r = enf.Apply(plan);
  EXPECT_TRUE(r.dry_run);
  ASSERT_EQ(r.pods.size(), 1u);
  EXPECT_FALSE(r.pods[0].enforced());
  EXPECT_EQ(r.pods[0].reason(), reason::kDryRun);
  ASSERT_EQ(r.pod_files_written.size(), 1u);
  EXPECT_EQ(r.pod_files_written[0], 3u);  // cpu.idle, pod + container cpuset.cpus
  EXPECT_EQ(r.writes.size(), 3u);
  EXPECT_EQ(r.failed, 0u);
  EXPECT_EQ(enf.writes_made(), 0u);
  EXPECT_EQ(store->size(), 0u);
  EXPECT_FALSE(fs::exists(store->file_path()));
  EXPECT_EQ(node_.Snapshot(), before);
}

// Switching one policy from Enforce to DryRun withdraws that policy's fences (kubelet's bytes
// come back, as if the policy were deleted) while the other policy's fences stay; the DryRun
// pods then report what an Enforce would write, judged from kubelet's values.
TEST_F(EnforcerV1Test, SwitchingAPolicyToDryRunWithdrawsItsFences) {
  auto kept = node_.AddPod("88888888-0001", QosClass::kBurstable, {});
  auto nb = node_.AddPod("88888888-0002", QosClass::kBurstable, {});
  auto trainer = node_.AddPod("88888888-0003", QosClass::kBurstable, {"t"});
  const auto before = node_.Snapshot();
  const std::string nb_idle = node_.CpuFile(nb, "cpu.idle");
  const std::string trainer_shares = node_.CpuFile(trainer, "cpu.shares");
  const std::string nb_idle_before = Slurp(nb_idle);
  const std::string trainer_shares_before = Slurp(trainer_shares);
  auto [store, enf] = Rig(node_);
  Plan plan = FencePlan({kept, nb}, {.idle = true});
  plan.neighbours[1].policy = "vision";
  auto t = Trainer(trainer, "vision");
  t.weight = 10000;
  plan.trainers.push_back(t);
  auto r1 = enf.Apply(plan);
  ASSERT_EQ(r1.enforced, 3u);
  ASSERT_EQ(Slurp(nb_idle), "1");
  ASSERT_EQ(Slurp(trainer_shares), "262144");

  plan.neighbours[1].dry_run = true;  // policy "vision" is now DryRun
  plan.trainers[0].dry_run = true;
  auto r2 = enf.Apply(plan);
  EXPECT_FALSE(r2.dry_run);
  EXPECT_EQ(Slurp(nb_idle), nb_idle_before);
  EXPECT_EQ(Slurp(trainer_shares), trainer_shares_before);
  EXPECT_EQ(Slurp(node_.CpuFile(kept, "cpu.idle")), "1");  // the enforced policy's fence stays
  // Only the enforced neighbour's files are still ours.
  for (const auto& e : store->Entries()) EXPECT_EQ(e.pod_uid, kept.uid) << e.path;
  // nb's cpu.idle and the trainer's cpu.shares are restored, and nb's cpu.shares (the v1 side
  // effect of cpu.idle) is written back after its cpu.idle, which resets it on a real kernel.
  EXPECT_EQ(r2.files_reverted, 3u);
  ASSERT_EQ(r2.reverts.size(), 3u);
  for (const auto& rr : r2.reverts) {
    EXPECT_TRUE(rr.outcome == reason::kRestored || rr.outcome == reason::kAlreadyOriginal)
        << rr.path << ": " << rr.outcome;
    EXPECT_NE(rr.pod_uid, kept.uid) << rr.path;
  }
  EXPECT_EQ(r2.enforced, 1u);
  EXPECT_EQ(r2.failed, 0u);
  ASSERT_EQ(r2.pod_files_written.size(), r2.pods.size());
  for (size_t i = 0; i < r2.pods.size(); ++i) {
    const auto& p = r2.pods[i];
    if (p.uid() == kept.uid) continue;
    EXPECT_EQ(p.reason(), reason::kDryRun) << p.name();
    EXPECT_EQ(r2.pod_files_written[i], 1u) << p.name();  // would write cpu.idle / cpu.shares again
  }

  // Back to Enforce: the same fences again, from the same originals.
  plan.neighbours[1].dry_run = false;
  plan.trainers[0].dry_run = false;
  ASSERT_EQ(enf.Apply(plan).enforced, 3u);
  EXPECT_EQ(Slurp(nb_idle), "1");
  // And every policy gone: the node is as kubelet left it.
  enf.Apply(Plan{});
  EXPECT_EQ(node_.Snapshot(), before);
}

// A plan whose every policy is DryRun withdraws every fence an earlier Enforce wrote; its
// `writes` are the would-be fence writes, and Verify has nothing to put back.
TEST_F(EnforcerV1Test, DryRunPlanAfterEnforceRestoresEveryFile) {
  auto a = node_.AddPod("99999999-0001", QosClass::kBurstable, {"x"});
  auto b = node_.AddPod("99999999-0002", QosClass::kBurstable, {});
  const auto before = node_.Snapshot();
  auto [store, enf] = Rig(node_);
  Plan plan = FencePlan({a}, {.idle = true, .cpus = CpuSet::Range(4, 7)});
  plan.neighbours.push_back(Neighbour(b, {.weight = 1}));
  ASSERT_EQ(enf.Apply(plan).enforced, 2u);
  ASSERT_NE(node_.Snapshot(), before);

  plan.dry_run = true;
  for (auto& x : plan.neighbours) x.dry_run = true;
  auto r = enf.Apply(plan);
  EXPECT_TRUE(r.dry_run);
  EXPECT_EQ(node_.Snapshot(), before);
  EXPECT_EQ(store->size(), 0u);
  EXPECT_GE(r.files_reverted, 4u);  // cpu.idle (+ v1 cpu.shares), 2 cpuset.cpus, cpu.shares
  EXPECT_EQ(r.enforced, 0u);
  EXPECT_EQ(r.failed, 0u);
  // What an Enforce would write from kubelet's values: cpu.idle, pod + container cpuset.cpus,
  // and b's cpu.shares.
  EXPECT_EQ(r.writes.size(), 4u);
  for (const auto& p : r.pods) EXPECT_EQ(p.reason(), reason::kDryRun) << p.name();
  const uint64_t writes = enf.writes_made();
  auto vr = enf.Verify();
  EXPECT_EQ(vr.checked, 0u);
  EXPECT_EQ(vr.reapplied, 0u);
  EXPECT_EQ(enf.writes_made(), writes);
  EXPECT_EQ(node_.Snapshot(), before);
}

TEST_F(EnforcerV1Test, ReportsReasonsPerPod) {
  auto ok = node_.AddPod("77777777-0001", QosClass::kBurstable, {});
  PodIdentity missing = ok;
  missing.uid = "77777777-0002";
  missing.name = "gone";
  auto missing_container = node_.AddPod("77777777-0003", QosClass::kBurstable, {});
  missing_container.container_ids.push_back("containerd://nope");
  auto [store, enf] = Rig(node_);
  Plan plan = FencePlan({ok, missing, missing_container}, {.idle = true});
  auto r = enf.Apply(plan);
  ASSERT_EQ(r.pods.size(), 3u);
  EXPECT_TRUE(r.pods[0].enforced());
  EXPECT_EQ(r.pods[1].reason(), reason::kCgroupNotFound);
  EXPECT_NE(r.pods[1].message().find("77777777-0002"), std::string::npos);
  EXPECT_EQ(r.pods[2].reason(), reason::kCgroupNotFound);
  EXPECT_EQ(r.enforced, 1u);
  EXPECT_EQ(r.failed, 2u);
}

TEST(EnforcerNoIdleTest, KernelWithoutCpuIdleIsReported) {
  FakeNode node(CgroupVersion::kV1, KubeletDriver::kCgroupfs, /*cpu_idle=*/false);
  auto pod = node.AddPod("88888888-0001", QosClass::kBurstable, {});
  auto [store, enf] = Rig(node);
  Plan plan = FencePlan({pod}, {.idle = true});
  auto r = enf.Apply(plan);
  ASSERT_EQ(r.pods.size(), 1u);
  EXPECT_FALSE(r.pods[0].enforced());
  EXPECT_EQ(r.pods[0].reason(), reason::kKernelLacksCpuIdle);
  EXPECT_EQ(enf.writes_made(), 0u);
}

TEST_F(EnforcerV1Test, ProtectedPodsAreNeverWrittenAndLoseEarlierFences) {
  auto sys = node_.AddPod("99999999-0001", QosClass::kBurstable, {}, "kube-system");
  auto self = node_.AddPod("99999999-0002", QosClass::kBurstable, {}, "feedguard");
  auto other = node_.AddPod("99999999-0003", QosClass::kBurstable, {}, "batch");
  auto critical = node_.AddPod("99999999-0004", QosClass::kBurstable, {}, "monitoring");
  critical.priority_class = "system-node-critical";  // outside kube-system: the class decides
  const auto before = node_.Snapshot();
  {
    // An earlier agent (without the self uid configured) fenced `self`.
    auto [store, enf] = Rig(node_);
    Plan plan = FencePlan({self}, {.idle = true});
    ASSERT_TRUE(enf.Apply(plan).pods[0].enforced());
  }
  EnforcerOptions o;
  o.self_pod_uid = self.uid;
  auto [store, enf] = Rig(node_, o);
  Plan plan = FencePlan({sys, self, other, critical}, {.idle = true});
  auto r = enf.Apply(plan);
  EXPECT_EQ(r.pods[0].reason(), reason::kProtectedPod);
  EXPECT_EQ(r.pods[1].reason(), reason::kProtectedPod);
  EXPECT_TRUE(r.pods[2].enforced());
  EXPECT_EQ(r.pods[3].reason(), reason::kProtectedPod);
  EXPECT_EQ(Slurp(node_.CpuFile(critical, "cpu.idle")), "0\n");
  EXPECT_EQ(Slurp(node_.CpuFile(sys, "cpu.idle")), "0\n");
  EXPECT_EQ(Slurp(node_.CpuFile(self, "cpu.idle")), "0\n");  // reverted
  EXPECT_EQ(Slurp(node_.CpuFile(other, "cpu.idle")), "1");
  enf.RevertAll();
  EXPECT_EQ(node_.Snapshot(), before);
}

TEST_F(EnforcerV1Test, RefusesToTouchKubeletOwnedDirsEvenFromACheckpoint) {
  auto pod = node_.AddPod("aaaaaaaa-0001", QosClass::kBurstable, {});
  const std::string tier = node_.layout().cpu_mount + "/kubepods/burstable/cpu.shares";
  const std::string tier_before = Slurp(tier);
  ASSERT_FALSE(tier_before.empty());
  auto store = OpenStore(node_.state_dir());
  // A checkpoint entry that claims the QoS tier (corrupt or hand-edited) and one that names
  // a file outside the pod it claims.
  ASSERT_TRUE(store->Put({tier, "cpu.shares", pod.uid, "2\n", "1024", {}}).ok());
  Put(tier, "1024\n");
  const std::string foreign = node_.CpuFile(pod, "cpu.shares");
  ASSERT_TRUE(store->Put({foreign, "cpu.shares", "someone-else", "5\n", "1024", {}}).ok());
  Enforcer enf(node_.cgroups(), store, {});
  auto r = enf.RevertAll();
  ASSERT_EQ(r.reverts.size(), 2u);
  for (const auto& rr : r.reverts) EXPECT_EQ(rr.outcome, reason::kRevertFailed) << rr.path;
  EXPECT_EQ(Slurp(tier), "1024\n");
  EXPECT_EQ(Slurp(foreign), "1024\n");
  EXPECT_EQ(enf.writes_made(), 0u);
}

TEST_F(EnforcerV1Test, RestartReconcilesBeforeReady) {
  auto a = node_.AddPod("bbbbbbbb-0001", QosClass::kBurstable, {});
  auto b = node_.AddPod("bbbbbbbb-0002", QosClass::kBurstable, {});
  const auto before = node_.Snapshot();
  Plan plan = FencePlan({a, b}, {.idle = true});
  plan.fence_version = 9;
  {
    auto [store, enf] = Rig(node_);
    ASSERT_EQ(enf.Apply(plan).enforced, 2u);
  }
  auto store = OpenStore(node_.state_dir());
  EXPECT_EQ(store->size(), 4u);  // cpu.idle + the weight it resets, per pod
  EXPECT_EQ(store->applied_version(), 9u);
  Enforcer enf(node_.cgroups(), store, {});
  EXPECT_FALSE(enf.ready());
  plan.neighbours.pop_back();  // b left while we were down
  plan.fence_version = 10;
  auto r = enf.Apply(plan);
  EXPECT_TRUE(enf.ready());
  EXPECT_EQ(r.files_written, 0u);
  EXPECT_EQ(r.files_reverted, 2u);  // b's cpu.idle, then the weight that leaving idle resets
  EXPECT_EQ(Slurp(node_.CpuFile(b, "cpu.idle")), "0\n");
  EXPECT_EQ(Slurp(node_.CpuFile(a, "cpu.idle")), "1");
  enf.RevertAll();
  EXPECT_EQ(node_.Snapshot(), before);
}

TEST_F(EnforcerV1Test, VanishedPodIsForgottenOnRevert) {
  auto pod = node_.AddPod("cccccccc-0001", QosClass::kBurstable, {});
  auto [store, enf] = Rig(node_);
  Plan plan = FencePlan({pod}, {.idle = true});
  ASSERT_TRUE(enf.Apply(plan).pods[0].enforced());
  // The pod is deleted: kubelet removes its cgroup, then the plan drops it.
  fs::remove_all(fs::path(node_.CpuFile(pod, "cpu.idle")).parent_path());
  auto r = enf.Apply(Plan{});
  ASSERT_EQ(r.reverts.size(), 2u);  // cpu.idle and cpu.shares
  for (const auto& rr : r.reverts) EXPECT_EQ(rr.outcome, reason::kGone) << rr.path;
  EXPECT_EQ(store->size(), 0u);
}

TEST_F(EnforcerV1Test, VerifyReappliesOverwritesAndStopsWhenContested) {
  auto pod = node_.AddPod("dddddddd-0001", QosClass::kBurstable, {"c"});
  auto clock = std::make_shared<ManualTimeSource>();
  auto o = Clocked(clock);
  o.contest_threshold = 3;
  o.contest_window = std::chrono::seconds(60);
  auto [store, enf] = Rig(node_, o);
  Plan plan = FencePlan({pod}, {.idle = true, .cpus = CpuSet::Range(4, 7)});
  ASSERT_TRUE(enf.Apply(plan).pods[0].enforced());
  const std::string ccpus = node_.CpusetFile(pod, "cpuset.cpus", node_.ContainerSub("c"));
  EXPECT_EQ(enf.Verify().overwrites, 0u);

  // runc rewrote the container's cpuset twice, far apart: each time re-applied.
  for (int i = 0; i < 2; ++i) {
    Put(ccpus, "1-7\n");
    auto v = enf.Verify({ccpus});
    EXPECT_EQ(v.overwrites, 1u);
    EXPECT_EQ(v.reapplied, 1u);
    EXPECT_EQ(v.contested, 0u);
    EXPECT_EQ(Slurp(ccpus), "4-7");
    clock->Advance(std::chrono::seconds(61));
  }
  EXPECT_EQ(enf.OverwriteCounts()[pod.uid], 2u);
  // Three within the window: the third makes the file contested, and we stop fighting.
  Put(ccpus, "1-7\n");
  EXPECT_EQ(enf.Verify().reapplied, 1u);
  clock->Advance(std::chrono::seconds(1));
  Put(ccpus, "1-7\n");
  EXPECT_EQ(enf.Verify().reapplied, 1u);
  clock->Advance(std::chrono::seconds(1));
  Put(ccpus, "1-7\n");
  auto v = enf.Verify();
  EXPECT_EQ(v.contested, 1u);
  EXPECT_EQ(v.reapplied, 0u);
  EXPECT_EQ(Slurp(ccpus), "1-7\n");
  // Apply reports the pod contested, and still does not write the file.
  auto r = enf.Apply(plan);
  EXPECT_FALSE(r.pods[0].enforced());
  EXPECT_EQ(r.pods[0].reason(), reason::kContested);
  EXPECT_EQ(r.pods[0].overwrites(), 5u);
  // A later sweep sees the same foreign value: still contested, not a new overwrite.
  auto later = enf.Verify();
  EXPECT_EQ(later.overwrites, 0u);
  EXPECT_EQ(later.contested, 1u);
  EXPECT_EQ(enf.OverwriteCounts()[pod.uid], 5u);
  EXPECT_EQ(Slurp(ccpus), "1-7\n");
  // Unfencing leaves the other writer's value: by the ownership rule it became the original.
  auto rv = enf.RevertAll();
  bool already = false;
  for (const auto& x : rv.reverts)
    already |= x.path == ccpus && x.outcome == reason::kAlreadyOriginal;
  EXPECT_TRUE(already);
  EXPECT_EQ(Slurp(ccpus), "1-7\n");
  EXPECT_EQ(Slurp(node_.CpuFile(pod, "cpu.idle")), "0\n");
}

// systemd re-applies a slice's attributes on every daemon-reload (and on any property change of
// the unit): cpu.idle back to 0 and cpu.weight to the unit's value — kubelet's, the recorded
// original. That is a restatement, re-applied at once and never counted toward Contested; a
// writer putting something *else* there still is an overwrite with the ownership rule.
TEST(EnforcerV2Test, SystemdRestatingTheOriginalIsReappliedAndNeverContested) {
  FakeNode node(CgroupVersion::kV2, KubeletDriver::kSystemd);
  auto pod = node.AddPod("eeeeeeee-0002", QosClass::kBurstable, {"c"});
  const std::string idle = node.CpuFile(pod, "cpu.idle");
  const std::string weight = node.CpuFile(pod, "cpu.weight");
  Put(weight, "10\n");  // kubelet's value for a 250m request
  auto clock = std::make_shared<ManualTimeSource>();
  auto o = Clocked(clock);
  o.contest_threshold = 3;
  o.contest_window = std::chrono::seconds(600);
  o.restate_limit = 50;
  auto [store, enf] = Rig(node, o);
  Plan plan = FencePlan({pod}, {.idle = true});
  ASSERT_TRUE(enf.Apply(plan).pods[0].enforced());
  ASSERT_EQ(Slurp(idle), "1");
  // (These plain files do not play the kernel: cpu.weight keeps kubelet's 10 under cpu.idle=1.)

  // 20 reloads, 10 of them back to back: every one re-applied, none an overwrite.
  for (int i = 0; i < 20; ++i) {
    Put(idle, "0\n");
    Put(weight, "10\n");
    auto v = enf.Verify({idle, weight});
    EXPECT_EQ(v.contested, 0u) << "reload " << i;
    EXPECT_GE(v.restatements, 1u) << "reload " << i;
    EXPECT_EQ(Slurp(idle), "1") << "reload " << i;
    if (i >= 10) clock->Advance(std::chrono::seconds(1));
  }
  EXPECT_EQ(enf.OverwriteCounts()[pod.uid], 0u);
  EXPECT_GE(enf.RestatementCounts()[pod.uid], 20u);
  EXPECT_TRUE(enf.ContestedPods().empty());
  EXPECT_TRUE(enf.Apply(plan).pods[0].enforced());

  // The race seen on the real node: the agent looks between systemd's two writes, when leaving
  // idle has reset the weight to the default (100) and the unit's weight is not yet written (it
  // then fails: the group is idle again). 100 is nobody's value: not adopted, not counted.
  for (int i = 0; i < 5; ++i) {
    Put(idle, "0\n");
    Put(weight, "100\n");
    auto v = enf.Verify({idle, weight});
    EXPECT_EQ(v.contested, 0u) << "race " << i;
    EXPECT_EQ(Slurp(idle), "1") << "race " << i;
  }
  EXPECT_EQ(enf.OverwriteCounts()[pod.uid], 0u);
  EXPECT_EQ(store->Get(weight)->original, "10\n");
  Put(weight, "10\n");

  // A resize through systemd (kubelet sets CPUWeight=39): a new value, adopted as the original,
  // counted as an overwrite; the fence goes back on.
  Put(idle, "0\n");
  Put(weight, "39\n");
  auto v = enf.Verify({idle, weight});
  EXPECT_EQ(v.contested, 0u);
  EXPECT_EQ(Slurp(idle), "1");
  EXPECT_EQ(enf.OverwriteCounts()[pod.uid], 1u);
  EXPECT_EQ(store->Get(weight)->original, "39\n");

  // Revert: kubelet's latest weight, not the one before the resize.
  enf.RevertAll();
  EXPECT_EQ(Slurp(idle), "0\n");
  EXPECT_EQ(Slurp(weight), "39\n");
}

// A v2 kernel whose idle group's cpu.weight reads 0 (6.1): kubelet >= 1.36 reads that back as
// ~1.8e15 CPUs requested and the node looks full. Seen once, the Idle fence is held as the
// lowest weight instead — in the same Apply — and the revert is exact; an operator who knows
// kubelet does not read it back keeps cpu.idle.
TEST(EnforcerV2Test, IdleOnAKernelWhoseIdleWeightReadsZeroIsHeldAsTheLowestWeight) {
  for (bool keep_idle : {false, true}) {
    FakeNode node(CgroupVersion::kV2, KubeletDriver::kSystemd);
    auto pod =
        node.AddPod(keep_idle ? "eeeeeeee-0005" : "eeeeeeee-0004", QosClass::kBurstable, {"c"});
    const std::string idle = node.CpuFile(pod, "cpu.idle");
    const std::string weight = node.CpuFile(pod, "cpu.weight");
    Put(weight, "10\n");
    EnforcerOptions o;
    o.idle_when_weight_reads_zero = keep_idle;
    // The kernel, as 6.1 does it: an idle group's weight reads 0; leaving idle resets it to 100.
    o.after_write = [&](uint64_t, const std::string& path) {
      if (path == idle) Put(weight, Slurp(idle) == "1" ? "0\n" : "100\n");
    };
    auto [store, enf] = Rig(node, o);
    Plan plan = FencePlan({pod}, {.idle = true});
    auto r = enf.Apply(plan);
    ASSERT_TRUE(r.pods[0].enforced()) << r.pods[0].reason() << " " << r.pods[0].message();
    EXPECT_TRUE(enf.idle_reads_zero());
    if (keep_idle) {
      EXPECT_EQ(Slurp(idle), "1");
    } else {
      EXPECT_EQ(Trim(Slurp(idle)), "0");
      EXPECT_EQ(Slurp(weight), "1");
      EXPECT_NE(r.pods[0].message().find("lowest CPU weight"), std::string::npos);
      // Later Applies stay on the weight; nothing flips back.
      EXPECT_EQ(enf.Apply(plan).files_written, 0u);
    }
    enf.RevertAll();
    EXPECT_EQ(Trim(Slurp(idle)), "0");
    EXPECT_EQ(Slurp(weight), "10\n");
  }
}

// A writer that keeps putting the original back in a loop is not systemd reloading: beyond
// restate_limit within the window the file is left to it (Contested), not fought forever.
TEST(EnforcerV2Test, ALoopingRestaterIsContestedAfterTheLimit) {
  FakeNode node(CgroupVersion::kV2, KubeletDriver::kSystemd);
  auto pod = node.AddPod("eeeeeeee-0003", QosClass::kBurstable, {"c"});
  const std::string idle = node.CpuFile(pod, "cpu.idle");
  auto clock = std::make_shared<ManualTimeSource>();
  auto o = Clocked(clock);
  o.restate_limit = 5;
  auto [store, enf] = Rig(node, o);
  Plan plan = FencePlan({pod}, {.idle = true});
  ASSERT_TRUE(enf.Apply(plan).pods[0].enforced());
  size_t contested = 0;
  for (int i = 0; i < 5; ++i) {
    Put(idle, "0\n");
    contested += enf.Verify({idle}).contested;
  }
  EXPECT_EQ(contested, 1u);
  EXPECT_EQ(Slurp(idle), "0\n");
  EXPECT_EQ(enf.ContestedPods().count(pod.uid), 1u);
}

TEST(EnforcerV2Test, UsesV2FilesWithSystemdLayout) {
  FakeNode node(CgroupVersion::kV2, KubeletDriver::kSystemd);
  auto pod = node.AddPod("eeeeeeee-0001", QosClass::kBurstable, {"c"});
  const auto before = node.Snapshot();
  auto [store, enf] = Rig(node);
  Plan plan = FencePlan({pod}, {.weight = 5, .quota = CpuQuota{-1, 100000}, .cpus = CpuSet{6, 7}});
  auto r = enf.Apply(plan);
  ASSERT_TRUE(r.pods[0].enforced()) << r.pods[0].reason() << " " << r.pods[0].message();
  EXPECT_EQ(Slurp(node.CpuFile(pod, "cpu.weight")), "5");
  EXPECT_EQ(Slurp(node.CpuFile(pod, "cpu.max")), "max 100000\n");  // already so: untouched
  EXPECT_EQ(Slurp(node.CpusetFile(pod, "cpuset.cpus", node.ContainerSub("c"))), "6-7");
  EXPECT_NE(node.CpuFile(pod, "cpu.weight").find("kubepods-burstable-podeeeeeeee_0001.slice"),
            std::string::npos);
  enf.RevertAll();
  EXPECT_EQ(node.Snapshot(), before);
}

// The cgroup v2 kernel's cpuset rules that plain files lack (kernel/cgroup/cpuset.c, measured in
// tests/vm/probes/cpuset_empty_again.sh): a populated cgroup's non-empty cpuset.cpus / .mems
// cannot be emptied (ENOSPC, which FsCgroups maps to FailedPrecondition); cpuset turned off in a
// dir's cgroup.subtree_control drops its children's cpuset files (refused, EBUSY, while a child
// has cpuset on for its own children), and turned on again gives them empty ones.
class V2CpusetKernel final : public cgroup::ForwardingCgroups {
 public:
  V2CpusetKernel(cgroup::CgroupsPtr inner, std::set<std::string> populated)
      : ForwardingCgroups(inner), plain_(std::move(inner)), populated_(std::move(populated)) {}
  Status WriteRaw(const std::string& file, std::string_view bytes) override {
    const std::string dir = Dirname(file);
    const std::string name = Basename(file);
    if ((name == "cpuset.cpus" || name == "cpuset.mems") && Trim(bytes).empty() &&
        populated_.count(dir) && !Trim(Slurp(file)).empty()) {
      return FailedPrecondition(file + ": No space left on device (a populated cgroup)");
    }
    if (name != "cgroup.subtree_control") return plain_->WriteRaw(file, bytes);
    ++subtree_writes;
    auto kids = plain_->ChildDirs(dir);
    if (!kids.ok()) return kids.status();
    if (bytes == "-cpuset") {
      for (const auto& k : *kids) {
        if (cgroup::ListsCpuset(Slurp(dir + "/" + k + "/cgroup.subtree_control"))) {
          return FailedPrecondition(file + ": Device or resource busy");
        }
      }
      for (const auto& k : *kids) {
        fs::remove(dir + "/" + k + "/cpuset.cpus");
        fs::remove(dir + "/" + k + "/cpuset.mems");
      }
      Put(file, "cpu\n");
      return OkStatus();
    }
    if (bytes == "+cpuset") {
      for (const auto& k : *kids) {
        for (const char* f : {"/cpuset.cpus", "/cpuset.mems"}) {
          if (!fs::exists(dir + "/" + k + f)) Put(dir + "/" + k + f, "\n");
        }
      }
      Put(file, "cpuset cpu\n");
      return OkStatus();
    }
    return InvalidArgument(file + ": " + std::string(bytes));
  }
  Status ApplyWrites(const std::vector<cgroup::FileWrite>& writes) override {
    for (const auto& w : writes) FG_RETURN_IF_ERROR(WriteRaw(w.path, w.value));
    return OkStatus();
  }

  int subtree_writes = 0;

 private:
  cgroup::CgroupsPtr plain_;
  std::set<std::string> populated_;
};

// A v2 node whose pods' containers all hold tasks: `pod` (two containers) and `trainer`.
struct PopulatedV2Node {
  PopulatedV2Node() {
    pod = node.AddPod("abababab-0001", QosClass::kBurstable, {"c1", "c2"});
    trainer = node.AddPod("abababab-0002", QosClass::kGuaranteed, {"t1"});
    std::set<std::string> populated;
    for (const auto& [p, ids] : {std::pair{pod, std::vector<std::string>{"c1", "c2"}},
                                 std::pair{trainer, std::vector<std::string>{"t1"}}}) {
      for (const auto& id : ids) {
        populated.insert(Dirname(node.CpusetFile(p, "cpuset.cpus", node.ContainerSub(id))));
      }
    }
    kernel = std::make_shared<V2CpusetKernel>(node.cgroups(), populated);
  }
  // The neighbour confined to 6-7, the trainer pinned to 0-1 and memory node 0.
  Plan FencePlanOf() const {
    Plan plan = FencePlan({pod}, {.cpus = CpuSet{6, 7}});
    TrainerPlacement t = Trainer(trainer);
    t.cpus = CpuSet{0, 1};
    t.mems = CpuSet{0};
    plan.trainers.push_back(t);
    return plan;
  }
  std::string PodDir(const PodIdentity& p) const { return Dirname(node.CpusetFile(p, "x")); }

  FakeNode node{CgroupVersion::kV2, KubeletDriver::kSystemd};
  PodIdentity pod, trainer;
  std::shared_ptr<V2CpusetKernel> kernel;
};

// Issue 26: v2 pins a pod's containers, never the pod dir, and gets each emptied set back byte
// for byte by turning cpuset off and on in the pod dir's subtree_control.
TEST(EnforcerV2Test, EmptiedContainerCpusetsComeBackExactThroughTheSubtreeControl) {
  PopulatedV2Node n;
  const auto before = n.node.Snapshot();
  auto store = OpenStore(n.node.state_dir());
  Enforcer enf(n.kernel, store, {});
  auto r = enf.Apply(n.FencePlanOf());
  ASSERT_EQ(r.enforced, 2u);
  EXPECT_EQ(Slurp(n.node.CpusetFile(n.pod, "cpuset.cpus")), "\n");  // the pod dir: untouched
  EXPECT_EQ(Slurp(n.node.CpusetFile(n.pod, "cpuset.cpus", n.node.ContainerSub("c2"))), "6-7");
  EXPECT_EQ(Slurp(n.node.CpusetFile(n.trainer, "cpuset.mems", n.node.ContainerSub("t1"))), "0");
  // The kernel's refusal of the plain empty write is what the fake models.
  EXPECT_EQ(
      n.kernel->WriteRaw(n.node.CpusetFile(n.pod, "cpuset.cpus", n.node.ContainerSub("c1")), "")
          .code(),
      StatusCode::kFailedPrecondition);
  EXPECT_EQ(enf.ChildWatchDirs(), (std::vector<std::string>{n.PodDir(n.pod), n.PodDir(n.trainer)}));

  auto rv = enf.RevertAll();
  for (const auto& x : rv.reverts) {
    EXPECT_EQ(x.outcome, reason::kRestored) << x.path << " " << x.message;
    EXPECT_EQ(x.message, "") << x.path;
  }
  EXPECT_EQ(n.kernel->subtree_writes, 4);  // off and on, in each pod dir
  EXPECT_EQ(n.node.Snapshot(), before);
  EXPECT_EQ(store->size(), 0u);
  EXPECT_TRUE(store->cpuset_resets().empty());
}

// A reset would also empty a set that is not being restored (here a container's memory nodes,
// someone else's): the revert writes the inherited set instead and says so.
TEST(EnforcerV2Test, AResetThatWouldEmptyAnotherSetFallsBackToTheInheritedSet) {
  PopulatedV2Node n;
  const std::string mems = n.node.CpusetFile(n.pod, "cpuset.mems", n.node.ContainerSub("c2"));
  Put(mems, "0\n");
  auto store = OpenStore(n.node.state_dir());
  Enforcer enf(n.kernel, store, {});
  ASSERT_EQ(enf.Apply(FencePlan({n.pod}, {.cpus = CpuSet{6, 7}})).enforced, 1u);
  auto rv = enf.RevertAll();
  ASSERT_EQ(rv.reverts.size(), 2u);
  for (const auto& x : rv.reverts) {
    EXPECT_EQ(x.outcome, reason::kRestored) << x.path;
    EXPECT_NE(x.message.find("inherited set"), std::string::npos) << x.message;
    EXPECT_NE(x.message.find("which the reset would empty"), std::string::npos) << x.message;
    EXPECT_EQ(Trim(Slurp(x.path)), Trim(Slurp(n.node.CpusetFile(n.pod, "cpuset.cpus.effective"))));
  }
  EXPECT_EQ(n.kernel->subtree_writes, 0);
  EXPECT_EQ(Slurp(mems), "0\n");
  EXPECT_EQ(store->size(), 0u);
}

// Killed between turning cpuset off and on again: the journal names the dir, and the next pass
// turns it on first; every byte comes back.
TEST(EnforcerV2Test, AKillBetweenTheTwoSubtreeWritesIsFinishedByTheNextPass) {
  PopulatedV2Node n;
  const auto before = n.node.Snapshot();
  const std::string control = n.PodDir(n.pod) + "/cgroup.subtree_control";
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto store = CheckpointStore::Open(n.node.state_dir());
    if (!store.ok()) ::_exit(2);
    EnforcerOptions o;
    o.after_write = [&control](uint64_t, const std::string& path) {
      if (path == control) ::kill(::getpid(), SIGKILL);
    };
    Enforcer enf(n.kernel, CheckpointStorePtr(std::move(*store)), o);
    enf.Apply(n.FencePlanOf());
    enf.RevertAll();
    ::_exit(0);
  }
  int ws = 0;
  ASSERT_EQ(::waitpid(pid, &ws, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL) << "child status " << ws;
  EXPECT_EQ(Slurp(control), "cpu\n");  // killed with cpuset off
  auto store = OpenStore(n.node.state_dir());
  EXPECT_EQ(store->cpuset_resets(), (std::set<std::string>{n.PodDir(n.pod)}));
  Enforcer enf(n.kernel, store, {});
  auto rv = enf.RevertAll();
  for (const auto& x : rv.reverts) {
    EXPECT_TRUE(x.outcome == reason::kRestored || x.outcome == reason::kAlreadyOriginal)
        << x.path << " " << x.outcome << " " << x.message;
  }
  EXPECT_EQ(n.node.Snapshot(), before);
  EXPECT_EQ(store->size(), 0u);
  EXPECT_TRUE(store->cpuset_resets().empty());
}

// A crash (SIGKILL) after the k-th write, for every k: a restarted enforcer converges to the
// plan and then restores every byte.
TEST(EnforcerCrashTest, KillAfterEveryWriteThenRestartConvergesAndReverts) {
  for (int k = 1; k <= 12; ++k) {
    SCOPED_TRACE("crash after write " + std::to_string(k));
    FakeNode node(CgroupVersion::kV1, KubeletDriver::kCgroupfs);
    std::vector<PodIdentity> pods;
    for (int i = 0; i < 3; ++i) {
      pods.push_back(node.AddPod("ffffffff-000" + std::to_string(i), QosClass::kBurstable, {"c"}));
    }
    auto trainer = node.AddPod("ffffffff-0100", QosClass::kGuaranteed, {"t1", "t2"});
    const auto before = node.Snapshot();
    Plan plan = FencePlan(pods, {.idle = true, .weight = 1, .cpus = CpuSet::Range(4, 7)});
    TrainerPlacement t;
    t.pod = trainer;
    t.cpus = CpuSet::Range(0, 3);
    plan.trainers.push_back(t);
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto store = CheckpointStore::Open(node.state_dir());
      if (!store.ok()) ::_exit(2);
      EnforcerOptions o;
      o.after_write = [k](uint64_t n, const std::string&) {
        if (n == static_cast<uint64_t>(k)) ::kill(::getpid(), SIGKILL);
      };
      Enforcer enf(node.cgroups(), CheckpointStorePtr(std::move(*store)), o);
      enf.Apply(plan);
      ::_exit(0);
    }
    int ws = 0;
    ASSERT_EQ(::waitpid(pid, &ws, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL) << "child status " << ws;
    auto store = OpenStore(node.state_dir());
    ASSERT_GT(store->size(), 0u);
    Enforcer enf(node.cgroups(), store, {});
    auto r = enf.Apply(plan);
    EXPECT_EQ(r.enforced, 4u);
    EXPECT_EQ(r.overwritten_by_other, 0u);
    EXPECT_TRUE(enf.ready());
    auto again = enf.Apply(plan);
    EXPECT_EQ(again.files_written, 0u);
    auto rv = enf.RevertAll();
    EXPECT_EQ(rv.overwritten_by_other, 0u);
    EXPECT_EQ(store->size(), 0u);
    EXPECT_EQ(node.Snapshot(), before);
  }
}

}  // namespace
}  // namespace feedguard::agent
