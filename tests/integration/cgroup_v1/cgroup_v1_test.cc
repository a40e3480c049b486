// Real cgroups: the kernel obeys what the cgroup layer writes into kubelet-shaped trees.
// Parameterised over the cgroup version and the kubelet driver: the v1 cases run on a host with
// v1 cpu/cpuset mounts (label cgroup_v1), the v2 cases where FEEDGUARD_CGROUP2_ROOT names a
// cgroup2 mount — inside the qemu VM (tests/vm, label vm). Each case skips, with the reason,
// where its version is absent. Where v2 differs from v1 (cpusets and quotas are clipped rather
// than rejected, no internal processes, cpu.weight while idle) the v2 behaviour is asserted.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "agent/cgroup/detect.h"
#include "agent/cgroup/fake_tree.h"
#include "agent/cgroup/fs_cgroups.h"
#include "agent/cgroup/knobs.h"
#include "common/strings.h"
#include "tests/fixtures/kubelet/kubelet_standin.h"

namespace feedguard::testing {
namespace {

namespace cg = agent::cgroup;
namespace fs = std::filesystem;
using agent::QosClass;

std::string HexId(char c) { return std::string(64, c); }

struct Param {
  cg::CgroupVersion version;
  cg::KubeletDriver driver;
};

std::string Cgroup2Root() {
  const char* env = std::getenv("FEEDGUARD_CGROUP2_ROOT");
  return env != nullptr ? env : "";
}

class CgroupTest : public ::testing::TestWithParam<Param> {
 protected:
  bool v2() const { return GetParam().version == cg::CgroupVersion::kV2; }

  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root to create cgroups";
    cg::CgroupOptions o;
    o.driver = GetParam().driver;
    if (v2()) {
      const std::string root = Cgroup2Root();
      if (root.empty()) GTEST_SKIP() << "FEEDGUARD_CGROUP2_ROOT unset (v2 cases run in the VM)";
      auto magic = cg::VersionByMagic(root);
      ASSERT_TRUE(magic.ok() && *magic == cg::CgroupVersion::kV2)
          << "FEEDGUARD_CGROUP2_ROOT=" << root << " is not a cgroup2 mount";
      o.version = cg::CgroupVersion::kV2;
      o.unified_mount = root;
    } else if (!fs::exists("/sys/fs/cgroup/cpu/cpu.shares") ||
               !fs::exists("/sys/fs/cgroup/cpuset/cpuset.cpus")) {
      GTEST_SKIP() << "no cgroup v1 cpu/cpuset mounts at /sys/fs/cgroup";
    }
    auto layout = cg::DetectLayout(o);
    ASSERT_TRUE(layout.ok()) << layout.status().ToString();
    if (layout->version != GetParam().version) {
      GTEST_SKIP() << "cpu controller is not " << cg::CgroupVersionName(GetParam().version);
    }
    root_ = "feedguard-test-" + std::to_string(::getpid()) + "-" +
            std::to_string(std::random_device{}() % 1000000);
    StandinOptions so;
    so.layout = *layout;
    so.layout.cgroup_root = root_;
    auto s = KubeletStandin::Create(so);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    standin_ = std::move(*s);
    roots_ = standin_->RootDirs();
    // The agent's view: detect again with the root, letting the driver be found from the tree.
    o.driver.reset();
    o.cgroup_root = root_;
    auto agent_layout = cg::DetectLayout(o);
    ASSERT_TRUE(agent_layout.ok()) << agent_layout.status().ToString();
    ASSERT_EQ(agent_layout->driver, GetParam().driver);
    cgroups_ = cg::NewFsCgroups(*agent_layout);
    // v1: a cpuset dir holds its set explicitly; v2: cpuset.cpus starts empty ("inherit"), the
    // usable set is the effective one.
    const std::string top = roots_.back();
    auto all = v2() ? cgroups_->ReadEffectiveCpus({top, top, top})
                    : CpuSet::Parse(cg::ReadCgroupFile(top + "/cpuset.cpus").value());
    ASSERT_TRUE(all.ok()) << all.status().ToString();
    all_cpus_ = *all;
    ASSERT_FALSE(all_cpus_.empty());
  }
  void TearDown() override {
    standin_.reset();  // kills pods, removes the root on every controller
    for (const auto& r : roots_) EXPECT_FALSE(fs::exists(r)) << r;
  }

  StandinPod Pod(const std::string& uid, QosClass qos, char id, int64_t req, int64_t lim,
                 std::vector<std::string> cmd, const std::string& scheme = "containerd://") {
    StandinPod p;
    p.uid = uid;
    p.name = uid;
    p.qos = qos;
    p.containers = {{"main", scheme + HexId(id), req, lim, std::move(cmd)}};
    return p;
  }
  static std::vector<std::string> Spin(int threads, double seconds) {
    return {FG_SPINNER, "--threads", std::to_string(threads), "--seconds", std::to_string(seconds)};
  }
  cg::ResolvedPod Start(const StandinPod& p) {
    auto rp = standin_->StartPod(p);
    EXPECT_TRUE(rp.ok()) << rp.status().ToString();
    auto r = cgroups_->ResolvePod(p.ToIdentity());
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : cg::ResolvedPod{};
  }
  uint64_t Usage(const cg::CgroupPaths& d) { return cgroups_->ReadUsage(d).value().usage_ns; }
  uint64_t Usage(const cg::ResolvedPod& p) { return Usage(p.dirs); }
  std::string File(const cg::CgroupPaths& d, cg::Knob k) { return cgroups_->KnobFiles(d, k)[0]; }
  CpuSet Effective(const cg::CgroupPaths& d) { return cgroups_->ReadEffectiveCpus(d).value(); }
  // CPU knobs the agent's way: the knob table's writes (knobs.h), applied in order.
  Status SetKnobs(const cg::CgroupPaths& d, const cg::CpuKnobs& want) {
    return cg::SetKnobs(*cgroups_, d.cpu, want);
  }
  Status SetCpuset(const cg::CgroupPaths& d, cg::Knob k, const CpuSet& target) {
    return cg::ApplyCpusetTree(*cgroups_, d, k, target);
  }
  // What the files hold, read raw and interpreted here.
  std::string Raw(const std::string& f) { return cgroups_->ReadRaw(f).value(); }
  uint64_t Weight(const cg::CgroupPaths& d) {  // v2 scale
    const uint64_t v = std::stoull(Raw(cg::WeightFile(GetParam().version, d.cpu)));
    return v2() ? v : cg::SharesToWeight(v);
  }
  agent::CpuQuota Quota(const cg::CgroupPaths& d) {  // -1 = unlimited
    if (v2()) {
      const std::string raw = Raw(d.cpu + "/cpu.max");
      const auto f = Fields(raw);
      EXPECT_EQ(f.size(), 2u);
      if (f.size() != 2) return {};
      return {f[0] == "max" ? -1 : std::stoll(std::string(f[0])), std::stoll(std::string(f[1]))};
    }
    const int64_t q = std::stoll(Raw(d.cpu + "/cpu.cfs_quota_us"));
    return {q < 0 ? -1 : q, std::stoll(Raw(d.cpu + "/cpu.cfs_period_us"))};
  }
  CpuSet Set(const cg::CgroupPaths& d, cg::Knob k) {
    return CpuSet::Parse(Raw(File(d, k))).value();
  }

  std::string root_;
  std::vector<std::string> roots_;
  std::unique_ptr<KubeletStandin> standin_;
  cg::CgroupsPtr cgroups_;
  CpuSet all_cpus_;
};

TEST_P(CgroupTest, ResolvesContainerdAndCrioPods) {
  auto a = Start(Pod("11111111-aaaa", QosClass::kGuaranteed, 'a', 500, 500, {}));
  auto b = Start(Pod("22222222-bbbb", QosClass::kBestEffort, 'b', 0, 0, {}, "cri-o://"));
  ASSERT_EQ(a.containers.size(), 1u);
  ASSERT_EQ(b.containers.size(), 1u);
  EXPECT_TRUE(fs::is_directory(a.containers[0].dirs.cpuset));
  EXPECT_NE(b.containers[0].dirs.cpu.find("crio-" + HexId('b')), std::string::npos);
  // kubelet's values, read back raw.
  EXPECT_EQ(Quota(a.dirs).quota_us, 50000);
  EXPECT_EQ(Weight(a.dirs), cg::SharesToWeight(512));
  EXPECT_EQ(Weight(b.dirs), 1u);  // BestEffort: shares 2
  EXPECT_TRUE(
      cgroups_->IsKubeletOwned(cgroups_->layout().cpu_mount + "/" +
                               cg::QosTierRelPath(GetParam().driver, root_, QosClass::kBurstable)));
  agent::PodIdentity gone = Pod("33333333-cccc", QosClass::kBurstable, 'c', 1, 0, {}).ToIdentity();
  auto r = cgroups_->ResolvePod(gone);
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find(root_), std::string::npos) << r.status().message();
}

// (a) cpu.idle=1 on a spinner pod next to a busy trainer on one CPU → the idle pod gets < 10%
// (v1 host) / < 20% (v2 in the VM: 2 emulated vCPUs, noisier clocks).
TEST_P(CgroupTest, IdlePodYieldsToTrainerOnSharedCpu) {
  auto trainer = Start(Pod("aaaa0000-0001", QosClass::kBurstable, 'a', 1000, 0, Spin(1, 6)));
  auto spinner = Start(Pod("bbbb0000-0002", QosClass::kBurstable, 'b', 1000, 0, Spin(1, 6)));
  if (!fs::exists(File(spinner.dirs, cg::Knob::kIdle))) GTEST_SKIP() << "kernel lacks cpu.idle";
  const CpuSet one = {*all_cpus_.ToVector().rbegin()};
  ASSERT_TRUE(SetCpuset(trainer.dirs, cg::Knob::kCpusetCpus, one).ok());
  ASSERT_TRUE(SetCpuset(spinner.dirs, cg::Knob::kCpusetCpus, one).ok());

  auto measure = [&](double* ratio) {
    uint64_t t0 = Usage(trainer), s0 = Usage(spinner);
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    uint64_t t1 = Usage(trainer), s1 = Usage(spinner);
    ASSERT_GT(t1 - t0, 0u);
    *ratio = static_cast<double>(s1 - s0) / static_cast<double>(t1 - t0);
    std::cout << "    trainer " << (t1 - t0) / 1000000 << " ms, spinner " << (s1 - s0) / 1000000
              << " ms, ratio " << *ratio << "\n";
  };
  double control = 0, fenced = 0;
  measure(&control);  // equal shares: roughly half each
  EXPECT_GT(control, 0.5) << "without the fence both pods should share the CPU";
  ASSERT_TRUE(SetKnobs(spinner.dirs, {.idle = true}).ok());
  EXPECT_EQ(Raw(File(spinner.dirs, cg::Knob::kIdle)), "1\n");
  measure(&fenced);
  const double limit = v2() ? 0.20 : 0.10;
  EXPECT_LT(fenced, limit) << "the idle pod took " << fenced * 100 << "% of the trainer's CPU time";
}

// Kernel fact the enforcer relies on: cpu.idle=1 drops the group to the minimum weight (v1
// cpu.shares reads 3; v2 cpu.weight reads 0 — 3 shares scaled and rounded — or 1 where the
// kernel clamps), weight writes are refused while idle, and idle=0 resets the weight to the
// default (1024 / 100): kubelet's value is lost, so whoever sets idle must restore the weight.
TEST_P(CgroupTest, IdleOverridesAndThenResetsTheWeight) {
  auto pod = Start(Pod("abab0000-0007", QosClass::kBurstable, 'a', 700, 0, {}));
  if (!fs::exists(File(pod.dirs, cg::Knob::kIdle))) GTEST_SKIP() << "kernel lacks cpu.idle";
  const std::string wf = File(pod.dirs, cg::Knob::kWeight);
  const std::string kubelet_value = cgroups_->ReadRaw(wf).value();
  EXPECT_EQ(Weight(pod.dirs), cg::SharesToWeight(cg::MilliCpuToShares(700)));
  const std::string idle_file = File(pod.dirs, cg::Knob::kIdle);
  ASSERT_TRUE(SetKnobs(pod.dirs, {.idle = true}).ok());
  const std::string idle_value = cgroups_->ReadRaw(wf).value();
  // The knob table's side-effect fact holds on this kernel.
  auto effect = cg::SideEffectOf(GetParam().version, idle_file, "1");
  ASSERT_TRUE(effect.has_value());
  EXPECT_EQ(effect->path, wf);
  EXPECT_NE(std::find(effect->values.begin(), effect->values.end(), Trim(idle_value)),
            effect->values.end())
      << idle_value;
  std::cout << "    " << wf.substr(wf.find_last_of('/') + 1) << " while idle: " << idle_value;
  if (v2()) {
    EXPECT_TRUE(idle_value == "0\n" || idle_value == "1\n") << idle_value;
  } else {
    EXPECT_EQ(idle_value, "3\n");
  }
  EXPECT_EQ(SetKnobs(pod.dirs, {.weight = 50}).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(SetKnobs(pod.dirs, {.idle = false}).ok());
  EXPECT_EQ(cgroups_->ReadRaw(wf).value(), v2() ? "100\n" : "1024\n");
  auto left = cg::SideEffectOf(GetParam().version, idle_file, "0");
  ASSERT_TRUE(left.has_value());
  EXPECT_EQ(left->values, (std::vector<std::string>{v2() ? "100" : "1024"}));
  EXPECT_TRUE(cg::IsWeightResetByLeavingIdle(GetParam().version, wf, Raw(wf)));
  EXPECT_NE(cgroups_->ReadRaw(wf).value(), kubelet_value);
  ASSERT_TRUE(cgroups_->WriteRaw(wf, kubelet_value).ok());
  EXPECT_EQ(cgroups_->ReadRaw(wf).value(), kubelet_value);
}

// (b) a cpuset write confines every thread of a multi-threaded process.
TEST_P(CgroupTest, CpusetConfinesEveryThread) {
  auto pod = Start(Pod("cccc0000-0003", QosClass::kGuaranteed, 'c', 1000, 1000, Spin(4, 5)));
  auto pids = cgroups_->ListPids(pod.containers[0].dirs);
  ASSERT_TRUE(pids.ok());
  ASSERT_EQ(pids->size(), 1u);
  const std::string tasks = "/proc/" + std::to_string((*pids)[0]) + "/task";
  auto count = [&] {
    int n = 0;
    for (const auto& t : fs::directory_iterator(tasks)) n += t.is_directory() ? 1 : 0;
    return n;
  };
  // Let the threads start (bounded: 5 s; the VM's emulated CPUs are slow to get there).
  for (int i = 0; i < 100 && count() < 5; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const int target = *all_cpus_.ToVector().rbegin();
  ASSERT_TRUE(SetCpuset(pod.dirs, cg::Knob::kCpusetCpus, {target}).ok());
  int threads = 0;
  for (const auto& t : fs::directory_iterator(tasks)) {
    std::ifstream in(t.path() / "status");
    std::string line, allowed;
    while (std::getline(in, line)) {
      if (line.rfind("Cpus_allowed_list:", 0) == 0) allowed = line.substr(18);
    }
    EXPECT_EQ(CpuSet::Parse(allowed).value(), CpuSet({target})) << t.path();
    ++threads;
  }
  EXPECT_EQ(threads, 5);  // main + 4 spinners
  if (v2()) {
    // v2's "no internal processes": the pod dir has a populated child and enables controllers
    // for its children, so it cannot take a process itself (EBUSY). The container dir is a
    // leaf (the stand-in enables nothing below it) and holds the process.
    EXPECT_EQ(cgroups_->ReadRaw(pod.dirs.cpu + "/cgroup.subtree_control").value(), "cpuset cpu\n");
    EXPECT_EQ(cgroups_->ReadRaw(pod.containers[0].dirs.cpu + "/cgroup.subtree_control").value(),
              "");
    Status s = cgroups_->WriteRaw(pod.dirs.cpu + "/cgroup.procs", std::to_string((*pids)[0]));
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();  // EBUSY
    EXPECT_EQ(cgroups_->ListPids(pod.containers[0].dirs).value(), *pids);
  }
}

// (c) v1 cpuset ordering: the helper's order succeeds, the wrong order fails with the right code.
TEST_P(CgroupTest, CpusetOrderingRules) {
  if (all_cpus_.size() < 2) GTEST_SKIP() << "needs two CPUs";
  auto v = all_cpus_.ToVector();
  const CpuSet a = {v[0]}, b = {v[1]}, both = {v[0], v[1]};
  auto pod = Start(Pod("dddd0000-0004", QosClass::kBurstable, 'd', 100, 0, {}));
  const auto& ctr = pod.containers[0].dirs;
  const auto cpus = cg::Knob::kCpusetCpus;
  // One dir's file alone, in no order (the wrong order, where v1 refuses it).
  auto write_one = [&](const cg::CgroupPaths& d, const CpuSet& set) {
    return cgroups_->WriteRaw(File(d, cpus), set.ToString());
  };
  ASSERT_TRUE(SetCpuset(pod.dirs, cpus, both).ok());
  if (v2()) {
    // v2 rejects neither order: it clips. Shrinking the parent first is accepted; the child
    // keeps its requested set but its effective set follows the parent's.
    ASSERT_TRUE(write_one(pod.dirs, a).ok());
    EXPECT_EQ(Set(ctr, cpus), both);
    EXPECT_EQ(Effective(ctr), a);
    // A child set outside the parent's effective set is accepted too; with no overlap the
    // child falls back to the parent's effective set.
    ASSERT_TRUE(write_one(ctr, b).ok());
    EXPECT_EQ(Set(ctr, cpus), b);
    EXPECT_EQ(Effective(ctr), a);
    // On v2 the helper (the agent's tree plan) writes the pod's children only, never the pod
    // dir (Cgroups::ChildDirs): with the pod dir widened again by hand, it lands the child.
    ASSERT_TRUE(write_one(pod.dirs, both).ok());
    ASSERT_TRUE(SetCpuset(pod.dirs, cpus, b).ok());
    EXPECT_EQ(Set(pod.dirs, cpus), both);
    EXPECT_EQ(Effective(ctr), b);
    ASSERT_TRUE(SetCpuset(pod.dirs, cpus, both).ok());
    EXPECT_EQ(Effective(ctr), both);
    auto eff_mems = CpuSet::Parse(
        cgroups_->ReadRaw(pod.dirs.cpuset + "/" + std::string(cg::v2::kCpusetMemsEffective))
            .value());
    ASSERT_TRUE(eff_mems.ok());
    EXPECT_TRUE(SetCpuset(pod.dirs, cg::Knob::kCpusetMems, *eff_mems).ok());
    EXPECT_EQ(Set(ctr, cg::Knob::kCpusetMems), *eff_mems);
    return;
  }
  // Shrink: parent first strands the child → EBUSY.
  Status s = write_one(pod.dirs, a);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  // The plan shrinks children first.
  auto plan = cgroups_->PlanCpusetTree(pod.dirs, cpus, a);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_GE(plan->size(), 2u);
  EXPECT_EQ(plan->back().path, File(pod.dirs, cpus));
  ASSERT_TRUE(cgroups_->ApplyWrites(*plan).ok());
  EXPECT_EQ(Set(ctr, cpus), a);
  EXPECT_EQ(Set(pod.dirs, cpus), a);
  // Grow: child first is not a subset of the parent → EACCES.
  s = write_one(ctr, both);
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << s.ToString();
  EXPECT_NE(s.message().find("not a subset of parent's"), std::string::npos) << s.message();
  // Mixed (a → b): union first, then shrink, in the helper's order.
  ASSERT_TRUE(SetCpuset(pod.dirs, cpus, b).ok());
  EXPECT_EQ(Set(ctr, cpus), b);
  EXPECT_EQ(Set(pod.dirs, cpus), b);
  // Grow: the plan grows parents first.
  plan = cgroups_->PlanCpusetTree(pod.dirs, cpus, both);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_GE(plan->size(), 2u);
  EXPECT_EQ(plan->front().path, File(pod.dirs, cpus));
  ASSERT_TRUE(cgroups_->ApplyWrites(*plan).ok());
  EXPECT_EQ(Set(ctr, cpus), both);
  // mems go through the same helper.
  auto mems = Set(pod.dirs, cg::Knob::kCpusetMems);
  EXPECT_TRUE(SetCpuset(pod.dirs, cg::Knob::kCpusetMems, mems).ok());
}

// (d) v1 rejects a child quota above its parent's; v2 accepts it and the parent's limit still
// holds (hierarchical bandwidth).
TEST_P(CgroupTest, ChildQuotaAboveParentIsInvalidArgument) {
  auto pod = Start(Pod("eeee0000-0005", QosClass::kGuaranteed, 'e', 1000, 1000,
                       v2() ? Spin(2, 8) : std::vector<std::string>{}));
  EXPECT_EQ(Quota(pod.dirs).quota_us, 100000);
  const auto& ctr = pod.containers[0].dirs;
  if (v2()) {
    ASSERT_TRUE(SetKnobs(ctr, {.quota = agent::CpuQuota{200000, 100000}}).ok());
    EXPECT_EQ(Raw(ctr.cpu + "/cpu.max"), "200000 100000\n");
    // Two spinning threads, a child allowing 2 CPUs, a pod allowing 1: the pod's limit wins.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const auto t0 = std::chrono::steady_clock::now();
    const uint64_t u0 = Usage(ctr);
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    const uint64_t u1 = Usage(ctr);
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double cpus = static_cast<double>(u1 - u0) / 1e9 / wall;
    std::cout << "    child (cpu.max 200000 100000) under pod (100000 100000) used " << cpus
              << " CPUs\n";
    EXPECT_LT(cpus, 1.25) << "the parent's quota did not hold";
    EXPECT_GT(cpus, 0.3) << "the spinner did not run";
    EXPECT_GT(cgroups_->ReadUsage(pod.dirs).value().nr_throttled, 0u);
    EXPECT_TRUE(SetKnobs(ctr, {.quota = agent::CpuQuota{25000, 50000}}).ok());
    EXPECT_EQ(Raw(ctr.cpu + "/cpu.max"), "25000 50000\n");
    // A quota below the kernel's 1 ms minimum is refused (EINVAL → InvalidArgument).
    Status tiny = SetKnobs(ctr, {.quota = agent::CpuQuota{10, 100000}});
    EXPECT_EQ(tiny.code(), StatusCode::kInvalidArgument) << tiny.ToString();
    EXPECT_EQ(Raw(ctr.cpu + "/cpu.max"), "25000 50000\n");
    return;
  }
  Status s = SetKnobs(ctr, {.quota = agent::CpuQuota{200000, 100000}});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_TRUE(SetKnobs(ctr, {.quota = agent::CpuQuota{50000, 100000}}).ok());
  // A period change goes through "unlimited" and lands.
  auto plan = cg::PlanKnobs(*cgroups_, ctr.cpu, {.quota = agent::CpuQuota{25000, 50000}});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const std::string quota = ctr.cpu + "/cpu.cfs_quota_us", period = ctr.cpu + "/cpu.cfs_period_us";
  std::vector<cg::FileWrite> bandwidth;  // less the burst's (to 0, where the kernel has it)
  for (const auto& w : *plan) {
    if (!cg::IsBurstFile(w.path)) bandwidth.push_back(w);
  }
  EXPECT_EQ(bandwidth,
            (std::vector<cg::FileWrite>{{quota, "-1"}, {period, "50000"}, {quota, "25000"}}));
  EXPECT_TRUE(cgroups_->ApplyWrites(*plan).ok());
  auto q = Quota(ctr);
  EXPECT_EQ(q.quota_us, 25000);
  EXPECT_EQ(q.period_us, 50000);
  EXPECT_EQ(Raw(quota), "25000\n");
  EXPECT_EQ(Raw(period), "50000\n");
  // A quota below the kernel's 1 ms minimum is refused (EINVAL → InvalidArgument).
  Status tiny = SetKnobs(ctr, {.quota = agent::CpuQuota{10, 50000}});
  EXPECT_EQ(tiny.code(), StatusCode::kInvalidArgument) << tiny.ToString();
  EXPECT_EQ(Raw(quota), "25000\n");
  // A pod fence below the container's own limit: refused alone (a parent below its child);
  // with the knob table's LiftChildQuotas first (the container to unlimited), it lands.
  const agent::CpuQuota fence{20000, 100000};
  EXPECT_EQ(SetKnobs(pod.dirs, {.quota = fence}).code(), StatusCode::kInvalidArgument);
  auto lift = cg::LiftChildQuotas(GetParam().version, {ctr.cpu}, fence,
                                  [&](const std::string& f) { return cgroups_->ReadRaw(f); });
  ASSERT_EQ(lift, (std::vector<cg::KnobWrite>{{quota, "-1"}}));
  ASSERT_TRUE(cgroups_->ApplyWrites({{lift[0].path, lift[0].value}}).ok());
  EXPECT_TRUE(SetKnobs(pod.dirs, {.quota = fence}).ok());
  EXPECT_EQ(Raw(pod.dirs.cpu + "/cpu.cfs_quota_us"), "20000\n");
}

// The kernel refuses a finite quota below the group's own burst (EINVAL, v1 and v2): the error
// names the burst, not "a child quota above its parent's", and a burst above the quota is
// refused as such.
TEST_P(CgroupTest, QuotaBelowTheBurstIsRefusedNamingTheBurst) {
  auto pod = Start(Pod("eeee0000-0007", QosClass::kBurstable, 'e', 500, 0, {}));
  const std::string burst = File(pod.dirs, cg::Knob::kBurst);
  if (!fs::exists(burst)) GTEST_SKIP() << "kernel lacks CFS burst (" << burst << ")";
  const std::string quota = File(pod.dirs, cg::Knob::kQuota);
  ASSERT_TRUE(cg::WriteCgroupFile(burst, "50000").ok());
  const std::string fence = v2() ? "20000 100000" : "20000";
  Status s = cg::WriteCgroupFile(quota, fence);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find(v2() ? "cpu.max.burst 50000" : "cpu.cfs_burst_us 50000"),
            std::string::npos)
      << s.ToString();
  EXPECT_EQ(s.message().find("child quota"), std::string::npos) << s.ToString();
  // Burst lowered first: the quota lands; a burst above it is then refused, naming the burst.
  ASSERT_TRUE(cg::WriteCgroupFile(burst, "0").ok());
  ASSERT_TRUE(cg::WriteCgroupFile(quota, fence).ok());
  Status b = cg::WriteCgroupFile(burst, "50000");
  EXPECT_EQ(b.code(), StatusCode::kInvalidArgument) << b.ToString();
  EXPECT_NE(b.message().find("burst above the group's quota"), std::string::npos) << b.ToString();
}

// (e) exact original bytes come back after the knob table's writes and a raw restore.
TEST_P(CgroupTest, RawRestoreGivesBackExactBytes) {
  auto pod = Start(Pod("ffff0000-0006", QosClass::kBurstable, 'f', 700, 0, {}));
  std::vector<cg::Knob> knobs = {cg::Knob::kWeight, cg::Knob::kQuota, cg::Knob::kCpusetCpus};
  const bool idle = fs::exists(File(pod.dirs, cg::Knob::kIdle));
  const bool burst = fs::exists(File(pod.dirs, cg::Knob::kBurst));
  if (idle) knobs.push_back(cg::Knob::kIdle);
  if (burst) knobs.push_back(cg::Knob::kBurst);
  std::map<std::string, std::string> original;
  for (auto k : knobs) {
    for (const auto& f : cgroups_->KnobFiles(pod.dirs, k))
      original[f] = cgroups_->ReadRaw(f).value();
  }
  ASSERT_TRUE(SetKnobs(pod.dirs, {.weight = 5000}).ok());
  ASSERT_TRUE(SetKnobs(pod.dirs, {.quota = agent::CpuQuota{30000, 50000}}).ok());
  ASSERT_TRUE(SetCpuset(pod.dirs, cg::Knob::kCpusetCpus, {*all_cpus_.ToVector().begin()}).ok());
  if (idle) {
    ASSERT_TRUE(SetKnobs(pod.dirs, {.idle = true}).ok());
  }
  if (burst) {  // the knob table only ever lowers a burst: a raw write raises it
    ASSERT_TRUE(cgroups_->WriteRaw(File(pod.dirs, cg::Knob::kBurst), "10000").ok());
    EXPECT_EQ(Raw(File(pod.dirs, cg::Knob::kBurst)), "10000\n");
  }
  EXPECT_NE(cgroups_->ReadRaw(cgroups_->KnobFiles(pod.dirs, cg::Knob::kWeight)[0]).value(),
            original[cgroups_->KnobFiles(pod.dirs, cg::Knob::kWeight)[0]]);
  if (idle) {
    // Kernel fact: an idle group refuses weight writes, so a revert clears idle first.
    Status s = SetKnobs(pod.dirs, {.weight = 100});
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  }
  // Restore in reverse order of the writes: idle, cpuset (grown back parent first), quota
  // (period before quota), weight.
  ASSERT_TRUE(SetCpuset(pod.dirs, cg::Knob::kCpusetCpus, all_cpus_).ok());
  for (auto k = knobs.rbegin(); k != knobs.rend(); ++k) {
    auto files = cgroups_->KnobFiles(pod.dirs, *k);
    for (auto f = files.rbegin(); f != files.rend(); ++f) {
      if (*k == cg::Knob::kCpusetCpus) continue;  // the pod dir itself is rewritten below
      Status s = cgroups_->WriteRaw(*f, original[*f]);
      ASSERT_TRUE(s.ok()) << s.ToString();
    }
  }
  const std::string cpus_file = cgroups_->KnobFiles(pod.dirs, cg::Knob::kCpusetCpus)[0];
  ASSERT_TRUE(cgroups_->WriteRaw(cpus_file, original[cpus_file]).ok());
  for (const auto& [f, bytes] : original) {
    EXPECT_EQ(cgroups_->ReadRaw(f).value(), bytes) << f;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cgroup, CgroupTest,
    ::testing::Values(Param{cg::CgroupVersion::kV1, cg::KubeletDriver::kSystemd},
                      Param{cg::CgroupVersion::kV1, cg::KubeletDriver::kCgroupfs},
                      Param{cg::CgroupVersion::kV2, cg::KubeletDriver::kSystemd},
                      Param{cg::CgroupVersion::kV2, cg::KubeletDriver::kCgroupfs}),
    [](const auto& info) {
      return std::string(cg::CgroupVersionName(info.param.version)) + "_" +
             std::string(cg::DriverName(info.param.driver));
    });

}  // namespace
}  // namespace feedguard::testing
