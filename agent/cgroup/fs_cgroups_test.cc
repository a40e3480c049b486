#include "agent/cgroup/fs_cgroups.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "agent/cgroup/fake_tree.h"
#include "agent/cgroup/knobs.h"
#include "common/strings.h"

namespace feedguard::agent::cgroup {
namespace {

namespace fs = std::filesystem;

class FsCgroupsTest : public ::testing::TestWithParam<std::tuple<CgroupVersion, KubeletDriver>> {
 protected:
  void SetUp() override {
    root_ = (fs::temp_directory_path() /
             ("fg-cgroup-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++)))
                .string();
    fs::create_directories(root_);
    auto [version, driver] = GetParam();
    auto l = MakeFakeLayout(root_, version, driver, "myroot", opts_);
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    layout_ = *l;
    cg_ = NewFsCgroups(layout_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // Creates a kubelet-shaped pod with one containerd container; returns its identity.
  PodIdentity MakePod(QosClass qos, const std::string& cid = "abc") {
    PodIdentity p;
    p.uid = "1111-2222";
    p.ns = "ns";
    p.name = "p";
    p.qos = qos;
    p.container_ids = {"containerd://" + cid};
    std::string rel = PodRelPath(layout_.driver, layout_.cgroup_root, qos, p.uid);
    std::string leaf = ContainerLeafNames(layout_.driver, {Runtime::kContainerd, cid})[0];
    for (auto [mount, ctrl] : Mounts()) {
      EXPECT_TRUE(MakeFakeCgroupDir(mount + "/" + rel + "/" + leaf, layout_.version, ctrl).ok());
    }
    return p;
  }
  std::vector<std::pair<std::string, std::string>> Mounts() const {
    if (layout_.version == CgroupVersion::kV2) return {{layout_.cpu_mount, ""}};
    return {{layout_.cpu_mount, "cpu"},
            {layout_.cpuacct_mount, "cpuacct"},
            {layout_.cpuset_mount, "cpuset"}};
  }
  bool v1() const { return layout_.version == CgroupVersion::kV1; }

  static inline int counter_ = 0;
  FakeCgroupOptions opts_;
  std::string root_;
  CgroupLayout layout_;
  CgroupsPtr cg_;
};

TEST_P(FsCgroupsTest, ResolvesPodAndContainerOnEveryController) {
  PodIdentity p = MakePod(QosClass::kBurstable);
  auto r = cg_->ResolvePod(p);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::string rel = PodRelPath(layout_.driver, "myroot", QosClass::kBurstable, p.uid);
  EXPECT_EQ(r->dirs.cpu, layout_.cpu_mount + "/" + rel);
  EXPECT_EQ(r->dirs.cpuset, layout_.cpuset_mount + "/" + rel);
  EXPECT_EQ(r->dirs.cpuacct, layout_.cpuacct_mount + "/" + rel);
  ASSERT_EQ(r->containers.size(), 1u);
  EXPECT_EQ(r->containers[0].container_id, "containerd://abc");
  EXPECT_TRUE(fs::is_directory(r->containers[0].dirs.cpuset));
  EXPECT_TRUE(r->containers[0].children.empty());
}

TEST_P(FsCgroupsTest, MissingPodAndContainerAreNotFoundNamingThePath) {
  PodIdentity p = MakePod(QosClass::kGuaranteed);
  PodIdentity other = p;
  other.qos = QosClass::kBestEffort;  // that dir does not exist
  auto r = cg_->ResolvePod(other);
  ASSERT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(
      r.status().message().find(PodRelPath(layout_.driver, "myroot", QosClass::kBestEffort, p.uid)),
      std::string::npos)
      << r.status().message();
  p.container_ids.push_back("containerd://nothere");
  r = cg_->ResolvePod(p);
  ASSERT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("nothere"), std::string::npos);
}

// CPU knobs go through the knob table (knobs.h CpuKnobWrites) and Cgroups::ApplyWrites, the
// agent's one path: the bytes land in the right file on each version, and read back.
TEST_P(FsCgroupsTest, KnobTableWritesLandInTheRightFiles) {
  auto pod = cg_->ResolvePod(MakePod(QosClass::kBurstable)).value();
  const CgroupVersion v = layout_.version;
  const std::string weight = WeightFile(v, pod.dirs.cpu);
  EXPECT_EQ(weight, pod.dirs.cpu + (v1() ? "/cpu.shares" : "/cpu.weight"));
  ASSERT_TRUE(SetKnobs(*cg_, pod.dirs.cpu, {.weight = 500}).ok());
  EXPECT_EQ(Slurp(weight), v1() ? std::to_string(WeightToShares(500)) : "500");
  const uint64_t raw_weight = std::stoull(cg_->ReadRaw(weight).value());
  EXPECT_EQ(v1() ? SharesToWeight(raw_weight) : raw_weight, 500u);  // round trip on v1 too
  // Out-of-range weights: v1 clamps into shares 2..262144 (WeightToShares); v2 passes the value
  // on and the kernel refuses it (EINVAL → InvalidArgument, see WriteErrnoTest). The plan's
  // weights are checked upstream (the engine refuses a trainer weight outside 1..10000).
  EXPECT_EQ(WeightValue(CgroupVersion::kV1, 0), WeightValue(CgroupVersion::kV1, 1));
  EXPECT_EQ(WeightValue(CgroupVersion::kV1, 1), "2");

  const std::string idle = pod.dirs.cpu + "/cpu.idle";
  EXPECT_EQ(Trim(cg_->ReadRaw(idle).value()), "0");
  ASSERT_TRUE(SetKnobs(*cg_, pod.dirs.cpu, {.idle = true}).ok());
  EXPECT_EQ(Slurp(idle), "1");
  EXPECT_EQ(Trim(cg_->ReadRaw(idle).value()), "1");

  // A finite quota: the burst goes to 0 first (the kernel refuses a quota below the burst).
  const std::string burst = BurstFile(v, pod.dirs.cpu);
  EXPECT_EQ(burst, pod.dirs.cpu + (v1() ? "/cpu.cfs_burst_us" : "/cpu.max.burst"));
  ASSERT_TRUE(cg_->WriteRaw(burst, "20000").ok());
  EXPECT_EQ(cg_->ReadRaw(burst).value(), "20000");
  const std::string quota = QuotaFile(v, pod.dirs.cpu);
  const std::string period = pod.dirs.cpu + "/cpu.cfs_period_us";
  auto plan = PlanKnobs(*cg_, pod.dirs.cpu, {.quota = CpuQuota{50000, 100000}});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  if (v1()) {  // the period already holds 100000: only the quota changes
    EXPECT_EQ(*plan, (std::vector<FileWrite>{{burst, "0"}, {quota, "50000"}}));
  } else {
    EXPECT_EQ(*plan, (std::vector<FileWrite>{{burst, "0"}, {quota, "50000 100000"}}));
  }
  ASSERT_TRUE(cg_->ApplyWrites(*plan).ok());
  EXPECT_EQ(Slurp(burst), "0");
  if (v1()) {
    EXPECT_EQ(Slurp(quota), "50000");
    EXPECT_EQ(Trim(Slurp(period)), "100000");
  } else {
    EXPECT_EQ(Slurp(quota), "50000 100000");
  }
  // Unlimited under another period. v1: the quota goes through unlimited, the period changes,
  // the quota is set last (forced, though it reads -1 already).
  plan = PlanKnobs(*cg_, pod.dirs.cpu, {.quota = CpuQuota{-1, 200000}});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  if (v1()) {
    EXPECT_EQ(*plan, (std::vector<FileWrite>{{quota, "-1"}, {period, "200000"}, {quota, "-1"}}));
  } else {
    EXPECT_EQ(*plan, (std::vector<FileWrite>{{quota, "max 200000"}}));
  }
  ASSERT_TRUE(cg_->ApplyWrites(*plan).ok());
  if (v1()) {
    EXPECT_EQ(Slurp(quota), "-1");
    EXPECT_EQ(Slurp(period), "200000");
  } else {
    EXPECT_EQ(Slurp(quota), "max 200000");
  }

  // cpusets through the tree plan: the container's, and on v1 the pod dir's too (v2 leaves the
  // pod's own set alone, Cgroups::ChildDirs).
  const std::string pod_cpus_before = Slurp(pod.dirs.cpuset + "/cpuset.cpus");
  ASSERT_TRUE(ApplyCpusetTree(*cg_, pod.dirs, Knob::kCpusetCpus, {1, 2}).ok());
  if (v1()) {
    EXPECT_EQ(Slurp(pod.dirs.cpuset + "/cpuset.cpus"), "1-2");
    EXPECT_EQ(CpuSet::Parse(cg_->ReadRaw(pod.dirs.cpuset + "/cpuset.cpus").value()).value(),
              (CpuSet{1, 2}));
  } else {
    EXPECT_EQ(Slurp(pod.dirs.cpuset + "/cpuset.cpus"), pod_cpus_before);
  }
  EXPECT_EQ(Slurp(pod.containers[0].dirs.cpuset + "/cpuset.cpus"), "1-2");
  Put(pod.dirs.cpuset + "/cpuset.mems", "0-1\n");
  Put(pod.containers[0].dirs.cpuset + "/cpuset.mems", "0-1\n");
  ASSERT_TRUE(ApplyCpusetTree(*cg_, pod.dirs, Knob::kCpusetMems, {0}).ok());
  EXPECT_EQ(CpuSet::Parse(cg_->ReadRaw(pod.dirs.cpuset + "/cpuset.mems").value()).value(),
            (v1() ? CpuSet{0} : CpuSet{0, 1}));
  EXPECT_EQ(Slurp(pod.containers[0].dirs.cpuset + "/cpuset.mems"), "0");
}

// A write that fails stops ApplyWrites there, its code kept, the index reached named.
TEST_P(FsCgroupsTest, ApplyWritesStopsAtTheFirstFailure) {
  auto pod = cg_->ResolvePod(MakePod(QosClass::kBurstable)).value();
  const std::string weight = WeightFile(layout_.version, pod.dirs.cpu);
  const std::string before = Slurp(weight);
  Status s = cg_->ApplyWrites(
      {{pod.dirs.cpu + "/cpu.idle", "1"}, {pod.dirs.cpu + "/no.such.file", "1"}, {weight, "7"}});
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
  EXPECT_NE(s.message().find("write 2 of 3"), std::string::npos) << s.ToString();
  EXPECT_EQ(Slurp(pod.dirs.cpu + "/cpu.idle"), "1");
  EXPECT_EQ(Slurp(weight), before);
}

TEST_P(FsCgroupsTest, KnobFilesNameTheKernelFiles) {
  auto pod = cg_->ResolvePod(MakePod(QosClass::kBurstable)).value();
  auto files = cg_->KnobFiles(pod.dirs, Knob::kQuota);
  if (v1()) {
    EXPECT_EQ(files, (std::vector<std::string>{pod.dirs.cpu + "/cpu.cfs_quota_us",
                                               pod.dirs.cpu + "/cpu.cfs_period_us"}));
  } else {
    EXPECT_EQ(files, (std::vector<std::string>{pod.dirs.cpu + "/cpu.max"}));
  }
  EXPECT_EQ(cg_->KnobFiles(pod.dirs, Knob::kCpusetCpus)[0], pod.dirs.cpuset + "/cpuset.cpus");
  EXPECT_EQ(cg_->KnobFiles(pod.dirs, Knob::kIdle)[0], pod.dirs.cpu + "/cpu.idle");
  // The same names as the knob table's.
  const CgroupVersion v = layout_.version;
  EXPECT_EQ(files[0], QuotaFile(v, pod.dirs.cpu));
  EXPECT_EQ(cg_->KnobFiles(pod.dirs, Knob::kWeight)[0], WeightFile(v, pod.dirs.cpu));
  EXPECT_EQ(cg_->KnobFiles(pod.dirs, Knob::kBurst)[0], BurstFile(v, pod.dirs.cpu));
  for (Knob k : {Knob::kWeight, Knob::kIdle, Knob::kQuota, Knob::kBurst, Knob::kCpusetCpus,
                 Knob::kCpusetMems}) {
    for (const auto& f : cg_->KnobFiles(pod.dirs, k)) EXPECT_TRUE(IsKnobFile(v, f)) << f;
  }
}

TEST_P(FsCgroupsTest, RawBytesAreExact) {
  auto pod = cg_->ResolvePod(MakePod(QosClass::kBurstable)).value();
  const std::string f = cg_->KnobFiles(pod.dirs, Knob::kWeight)[0];
  Put(f, "1234\n");
  EXPECT_EQ(cg_->ReadRaw(f).value(), "1234\n");
  ASSERT_TRUE(cg_->WriteRaw(f, "77\n").ok());
  EXPECT_EQ(Slurp(f), "77\n");
}

TEST_P(FsCgroupsTest, MissingIdleIsUnimplemented) {
  auto pod = cg_->ResolvePod(MakePod(QosClass::kBurstable)).value();
  fs::remove(pod.dirs.cpu + "/cpu.idle");
  // The knob table plans the write; reading the file (to skip a no-op) or writing it says why.
  auto w = CpuKnobWrites(layout_.version, pod.dirs.cpu, {.idle = true},
                         [&](const std::string& p) { return cg_->ReadRaw(p); });
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_EQ(w->size(), 1u);
  EXPECT_EQ((*w)[0], (KnobWrite{pod.dirs.cpu + "/cpu.idle", "1"}));
  Status s = cg_->ApplyWrites({{(*w)[0].path, (*w)[0].value}});
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("kernel lacks cpu.idle (needs ≥ 5.15)"), std::string::npos);
  EXPECT_EQ(SetKnobs(*cg_, pod.dirs.cpu, {.idle = true}).code(), StatusCode::kUnimplemented);
  EXPECT_EQ(cg_->ReadRaw(pod.dirs.cpu + "/cpu.idle").status().code(), StatusCode::kUnimplemented);
  // A missing directory is NotFound, not Unimplemented.
  const std::string gone = root_ + "/gone";
  EXPECT_EQ(cg_->WriteRaw(gone + "/cpu.idle", "1").code(), StatusCode::kNotFound);
  EXPECT_EQ(cg_->ReadRaw(gone + "/cpu.idle").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(SetKnobs(*cg_, gone, {.idle = true}).code(), StatusCode::kNotFound);
}

TEST_P(FsCgroupsTest, RefusesKubeletOwnedTiers) {
  auto pod = cg_->ResolvePod(MakePod(QosClass::kBurstable)).value();
  const std::string tier =
      layout_.cpu_mount + "/" + QosTierRelPath(layout_.driver, "myroot", QosClass::kBurstable);
  EXPECT_TRUE(cg_->IsKubeletOwned(tier));
  EXPECT_TRUE(cg_->IsKubeletOwned(tier + "/"));
  EXPECT_TRUE(cg_->IsKubeletOwned(layout_.cpu_mount + "/myroot"));
  EXPECT_FALSE(cg_->IsKubeletOwned(pod.dirs.cpu));
  EXPECT_EQ(SetKnobs(*cg_, tier, {.idle = true}).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(cg_->WriteRaw(tier + "/cpu.idle", "1").code(), StatusCode::kPermissionDenied);
}

TEST_P(FsCgroupsTest, CpusetTreePlanCoversCrunChild) {
  PodIdentity p = MakePod(QosClass::kGuaranteed);
  auto pod0 = cg_->ResolvePod(p).value();
  for (auto [mount, ctrl] : Mounts()) {
    std::string c = pod0.containers[0].dirs.cpu;
    c.replace(0, layout_.cpu_mount.size(), mount);
    ASSERT_TRUE(MakeFakeCgroupDir(c + "/container", layout_.version, ctrl).ok());
  }
  auto pod = cg_->ResolvePod(p).value();
  ASSERT_EQ(pod.containers[0].children.size(), 1u);
  Put(pod.dirs.cpuset + "/cpuset.cpus", "0-3\n");
  Put(pod.containers[0].dirs.cpuset + "/cpuset.cpus", "0-3\n");
  Put(pod.containers[0].children[0].cpuset + "/cpuset.cpus", "0-3\n");
  auto plan = cg_->PlanCpusetTree(pod.dirs, Knob::kCpusetCpus, {2, 3});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  // Children first (shrinking); the pod dir last, and on v1 only.
  ASSERT_EQ(plan->size(), v1() ? 3u : 2u);
  EXPECT_EQ((*plan)[0].path, pod.containers[0].children[0].cpuset + "/cpuset.cpus");
  EXPECT_EQ((*plan)[1].path, pod.containers[0].dirs.cpuset + "/cpuset.cpus");
  if (v1()) {
    EXPECT_EQ((*plan)[2].path, pod.dirs.cpuset + "/cpuset.cpus");
  }
  for (const auto& w : *plan) EXPECT_EQ(w.value, "2-3") << w.path;
  ASSERT_TRUE(cg_->ApplyWrites(*plan).ok());
  EXPECT_EQ(Slurp(pod.containers[0].children[0].cpuset + "/cpuset.cpus"), "2-3");
  EXPECT_EQ(Slurp(pod.dirs.cpuset + "/cpuset.cpus"), v1() ? "2-3" : "0-3\n");
  EXPECT_EQ(cg_->PlanCpusetTree(pod.dirs, Knob::kCpusetCpus, {2, 3}).value().size(), 0u);
}

TEST_P(FsCgroupsTest, CpusetTreeSkipsChildDirsWithoutCpusetFiles) {
  // Issue 28, item 3: a container with a delegated cgroup makes child dirs below itself without
  // enabling cpuset for them (v2: no cpuset.cpus there), one named with bytes that are not
  // UTF-8. They are no cpusets of their own: skipped, and the pod's tree is still planned (a
  // failure here left a Cpuset-fenced neighbour unconfined).
  PodIdentity p = MakePod(QosClass::kBurstable);
  auto pod = cg_->ResolvePod(p).value();
  const std::string container = pod.containers[0].dirs.cpuset;
  fs::create_directories(container + "/\xff\xfe/nested");
  fs::create_directories(container + "/tenant-made");
  Put(pod.dirs.cpuset + "/cpuset.cpus", "0-3\n");
  Put(container + "/cpuset.cpus", "0-3\n");
  auto files = cg_->CpusetTreeFiles(pod.dirs, Knob::kCpusetCpus);
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  std::vector<std::string> want_files = {container + "/cpuset.cpus"};
  if (v1()) want_files.insert(want_files.begin(), pod.dirs.cpuset + "/cpuset.cpus");
  EXPECT_EQ(*files, want_files);
  auto plan = cg_->PlanCpusetTree(pod.dirs, Knob::kCpusetCpus, {2, 3});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_TRUE(cg_->ApplyWrites(*plan).ok());
  EXPECT_EQ(Slurp(container + "/cpuset.cpus"), "2-3");
  EXPECT_EQ(Slurp(pod.dirs.cpuset + "/cpuset.cpus"), v1() ? "2-3" : "0-3\n");
  // A child that is a cpuset of its own (cpuset enabled for it) is still in the tree.
  ASSERT_TRUE(MakeFakeCgroupDir(container + "/own", layout_.version, v1() ? "cpuset" : "").ok());
  Put(container + "/own/cpuset.cpus", "0-3\n");
  auto again = cg_->PlanCpusetTree(pod.dirs, Knob::kCpusetCpus, {2, 3});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  ASSERT_EQ(again->size(), 1u);
  EXPECT_EQ((*again)[0].path, container + "/own/cpuset.cpus");
}

TEST_P(FsCgroupsTest, UsagePidsAndPressure) {
  auto pod = cg_->ResolvePod(MakePod(QosClass::kBurstable)).value();
  if (v1()) {
    Put(pod.dirs.cpuacct + "/cpuacct.usage", "123456789\n");
    Put(pod.dirs.cpu + "/cpu.stat", "nr_periods 10\nnr_throttled 3\nthrottled_time 5000\n");
  } else {
    Put(pod.dirs.cpu + "/cpu.stat",
        "usage_usec 123456\nnr_periods 10\nnr_throttled 3\nthrottled_usec 5\n");
  }
  auto u = cg_->ReadUsage(pod.dirs).value();
  EXPECT_EQ(u.usage_ns, v1() ? 123456789u : 123456000u);
  EXPECT_EQ(u.nr_periods, 10u);
  EXPECT_EQ(u.nr_throttled, 3u);
  EXPECT_EQ(u.throttled_ns, 5000u);
  EXPECT_FALSE(u.idle);
  Put(pod.dirs.cpu + "/cpu.idle", "1\n");
  EXPECT_TRUE(cg_->ReadUsage(pod.dirs).value().idle);
  fs::remove(pod.dirs.cpu + "/cpu.idle");  // a kernel without cpu.idle: not idle, not an error
  EXPECT_FALSE(cg_->ReadUsage(pod.dirs).value().idle);
  Put(pod.dirs.cpu + "/cgroup.procs", "12\n34\n");
  EXPECT_EQ(cg_->ListPids(pod.dirs).value(), (std::vector<int>{12, 34}));
  auto p = cg_->ReadPressure(pod.dirs);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->has_value(), !v1());  // the v1 fake has no cpu.pressure
}

INSTANTIATE_TEST_SUITE_P(
    AllLayouts, FsCgroupsTest,
    ::testing::Combine(::testing::Values(CgroupVersion::kV1, CgroupVersion::kV2),
                       ::testing::Values(KubeletDriver::kSystemd, KubeletDriver::kCgroupfs)));

TEST(WriteErrnoTest, MapsErrnoToCodes) {
  EXPECT_EQ(WriteErrnoToStatus(EINVAL, "/x/cpu.cfs_quota_us", "5").code(),
            StatusCode::kInvalidArgument);
  Status s = WriteErrnoToStatus(EACCES, "/x/cpuset.cpus", "7\n");
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(s.message().find("not a subset of parent's cpuset.cpus"), std::string::npos);
  EXPECT_EQ(WriteErrnoToStatus(EBUSY, "/x/cpuset.cpus", "1").code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(WriteErrnoToStatus(ENOENT, "/x/cpu.weight", "1").code(), StatusCode::kNotFound);
  // What the kernel answers out-of-range knob values with (the typed writers refused them before
  // writing; the knob table passes the plan's values on).
  EXPECT_EQ(WriteErrnoToStatus(EINVAL, "/x/cpu.weight", "0").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(WriteErrnoToStatus(EINVAL, "/x/cpu.max", "10 100000").code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(WriteErrnoToStatus(ERANGE, "/x/cpu.cfs_period_us", "1").code(),
            StatusCode::kInvalidArgument);
}

TEST(ParsePressureTest, ParsesSomeAndFull) {
  auto p = ParsePressure(
      "some avg10=1.50 avg60=0.25 avg300=0.00 total=12345\n"
      "full avg10=0.10 avg60=0.00 avg300=0.00 total=99\n");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_DOUBLE_EQ(p->some.avg10, 1.5);
  EXPECT_EQ(p->some.total_us, 12345u);
  ASSERT_TRUE(p->full.has_value());
  EXPECT_EQ(p->full->total_us, 99u);
  EXPECT_FALSE(ParsePressure("full avg10=0 avg60=0 avg300=0 total=0\n").ok());
  EXPECT_FALSE(ParsePressure("some avg10=x avg60=0 avg300=0 total=0\n").ok());
}

// Found by fuzz_cgroup_files: a negative average (and a field given twice standing in for a
// missing one) was accepted and passed on as pressure.
TEST(ParsePressureTest, RefusesOutOfRangeRepeatedAndTrailingValues) {
  EXPECT_FALSE(ParsePressure("some avg10=-1.50 avg60=0.25 avg60=0.00 total=1\n").ok());
  EXPECT_FALSE(ParsePressure("some avg10=-1.50 avg60=0.25 avg300=0.00 total=1\n").ok());
  EXPECT_FALSE(ParsePressure("some avg10=nan avg60=0 avg300=0 total=1\n").ok());
  EXPECT_FALSE(ParsePressure("some avg10=inf avg60=0 avg300=0 total=1\n").ok());
  EXPECT_FALSE(ParsePressure("some avg10=1.5x avg60=0 avg300=0 total=1\n").ok());
  EXPECT_FALSE(ParsePressure("some avg10=1 avg60=0 avg300=0 total=-1\n").ok());
  EXPECT_TRUE(ParsePressure("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n").ok());
}

}  // namespace
}  // namespace feedguard::agent::cgroup
