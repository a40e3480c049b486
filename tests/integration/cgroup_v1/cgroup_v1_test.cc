// Real cgroup v1: the kernel obeys what the cgroup layer writes into kubelet-shaped trees.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "agent/cgroup/detect.h"
#include "agent/cgroup/fs_cgroups.h"
#include "tests/fixtures/kubelet/kubelet_standin.h"

namespace feedguard::testing {
namespace {

namespace cg = agent::cgroup;
namespace fs = std::filesystem;
using agent::QosClass;

std::string HexId(char c) { return std::string(64, c); }

class CgroupV1Test : public ::testing::TestWithParam<cg::KubeletDriver> {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root to create cgroups";
    if (!fs::exists("/sys/fs/cgroup/cpu/cpu.shares") ||
        !fs::exists("/sys/fs/cgroup/cpuset/cpuset.cpus")) {
      GTEST_SKIP() << "no cgroup v1 cpu/cpuset mounts at /sys/fs/cgroup";
    }
    cg::CgroupOptions o;
    o.driver = GetParam();
    auto layout = cg::DetectLayout(o);
    ASSERT_TRUE(layout.ok()) << layout.status().ToString();
    if (layout->version != cg::CgroupVersion::kV1) GTEST_SKIP() << "cpu controller is not v1";
    root_ = "feedguard-test-" + std::to_string(::getpid()) + "-" +
            std::to_string(std::random_device{}() % 1000000);
    StandinOptions so;
    so.layout = *layout;
    so.layout.cgroup_root = root_;
    auto s = KubeletStandin::Create(so);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    standin_ = std::move(*s);
    // The agent's view: detect again with the root, letting the driver be found from the tree.
    o.driver.reset();
    o.cgroup_root = root_;
    auto agent_layout = cg::DetectLayout(o);
    ASSERT_TRUE(agent_layout.ok()) << agent_layout.status().ToString();
    ASSERT_EQ(agent_layout->driver, GetParam());
    cgroups_ = cg::NewFsCgroups(*agent_layout);
    auto all =
        CpuSet::Parse(cg::ReadCgroupFile(standin_->RootDirs().back() + "/cpuset.cpus").value());
    all_cpus_ = all.value();
  }
  void TearDown() override {
    standin_.reset();  // kills pods, removes the root on every controller
    for (const char* m : {"cpu", "cpuacct", "cpuset"}) {
      if (!root_.empty()) {
        EXPECT_FALSE(fs::exists(std::string("/sys/fs/cgroup/") + m + "/" + root_));
      }
    }
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
  uint64_t Usage(const cg::ResolvedPod& p) { return cgroups_->ReadUsage(p.dirs).value().usage_ns; }

  std::string root_;
  std::unique_ptr<KubeletStandin> standin_;
  cg::CgroupsPtr cgroups_;
  CpuSet all_cpus_;
};

TEST_P(CgroupV1Test, ResolvesContainerdAndCrioPods) {
  auto a = Start(Pod("11111111-aaaa", QosClass::kGuaranteed, 'a', 500, 500, {}));
  auto b = Start(Pod("22222222-bbbb", QosClass::kBestEffort, 'b', 0, 0, {}, "cri-o://"));
  ASSERT_EQ(a.containers.size(), 1u);
  ASSERT_EQ(b.containers.size(), 1u);
  EXPECT_TRUE(fs::is_directory(a.containers[0].dirs.cpuset));
  EXPECT_NE(b.containers[0].dirs.cpu.find("crio-" + HexId('b')), std::string::npos);
  // kubelet's values, read back through the typed API.
  EXPECT_EQ(cgroups_->ReadQuota(a.dirs).value().quota_us, 50000);
  EXPECT_EQ(cgroups_->ReadWeight(a.dirs).value(), cg::SharesToWeight(512));
  EXPECT_EQ(cgroups_->ReadWeight(b.dirs).value(), 1u);  // BestEffort: shares 2
  EXPECT_TRUE(cgroups_->IsKubeletOwned(
      "/sys/fs/cgroup/cpu/" + cg::QosTierRelPath(GetParam(), root_, QosClass::kBurstable)));
  agent::PodIdentity gone = Pod("33333333-cccc", QosClass::kBurstable, 'c', 1, 0, {}).ToIdentity();
  auto r = cgroups_->ResolvePod(gone);
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find(root_), std::string::npos) << r.status().message();
}

// (a) cpu.idle=1 on a spinner pod next to a busy trainer on one CPU → the idle pod gets < 10%.
TEST_P(CgroupV1Test, IdlePodYieldsToTrainerOnSharedCpu) {
  if (!fs::exists("/sys/fs/cgroup/cpu/cpu.idle")) GTEST_SKIP() << "kernel lacks cpu.idle";
  auto trainer = Start(Pod("aaaa0000-0001", QosClass::kBurstable, 'a', 1000, 0, Spin(1, 6)));
  auto spinner = Start(Pod("bbbb0000-0002", QosClass::kBurstable, 'b', 1000, 0, Spin(1, 6)));
  const CpuSet one = {*all_cpus_.ToVector().rbegin()};
  ASSERT_TRUE(cgroups_->SetCpusetTree(trainer.dirs, cg::Knob::kCpusetCpus, one).ok());
  ASSERT_TRUE(cgroups_->SetCpusetTree(spinner.dirs, cg::Knob::kCpusetCpus, one).ok());

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
  ASSERT_TRUE(cgroups_->WriteIdle(spinner.dirs, true).ok());
  EXPECT_TRUE(cgroups_->ReadIdle(spinner.dirs).value());
  measure(&fenced);
  EXPECT_LT(fenced, 0.10) << "the idle pod took " << fenced * 100 << "% of the trainer's CPU time";
}

// (b) a cpuset write confines every thread of a multi-threaded process.
TEST_P(CgroupV1Test, CpusetConfinesEveryThread) {
  auto pod = Start(Pod("cccc0000-0003", QosClass::kGuaranteed, 'c', 1000, 1000, Spin(4, 5)));
  std::this_thread::sleep_for(std::chrono::milliseconds(150));  // let the threads start
  const int target = *all_cpus_.ToVector().rbegin();
  ASSERT_TRUE(cgroups_->SetCpusetTree(pod.dirs, cg::Knob::kCpusetCpus, {target}).ok());
  auto pids = cgroups_->ListPids(pod.containers[0].dirs);
  ASSERT_TRUE(pids.ok());
  ASSERT_EQ(pids->size(), 1u);
  int threads = 0;
  for (const auto& t : fs::directory_iterator("/proc/" + std::to_string((*pids)[0]) + "/task")) {
    std::ifstream in(t.path() / "status");
    std::string line, allowed;
    while (std::getline(in, line)) {
      if (line.rfind("Cpus_allowed_list:", 0) == 0) allowed = line.substr(18);
    }
    EXPECT_EQ(CpuSet::Parse(allowed).value(), CpuSet({target})) << t.path();
    ++threads;
  }
  EXPECT_EQ(threads, 5);  // main + 4 spinners
}

// (c) v1 cpuset ordering: the helper's order succeeds, the wrong order fails with the right code.
TEST_P(CgroupV1Test, CpusetOrderingRules) {
  if (all_cpus_.size() < 2) GTEST_SKIP() << "needs two CPUs";
  auto v = all_cpus_.ToVector();
  const CpuSet a = {v[0]}, b = {v[1]}, both = {v[0], v[1]};
  auto pod = Start(Pod("dddd0000-0004", QosClass::kBurstable, 'd', 100, 0, {}));
  const auto& ctr = pod.containers[0].dirs;
  ASSERT_TRUE(cgroups_->SetCpusetTree(pod.dirs, cg::Knob::kCpusetCpus, both).ok());
  // Shrink: parent first strands the child → EBUSY.
  Status s = cgroups_->WriteCpus(pod.dirs, a);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  ASSERT_TRUE(cgroups_->SetCpusetTree(pod.dirs, cg::Knob::kCpusetCpus, a).ok());
  EXPECT_EQ(cgroups_->ReadCpus(ctr).value(), a);
  EXPECT_EQ(cgroups_->ReadCpus(pod.dirs).value(), a);
  // Grow: child first is not a subset of the parent → EACCES.
  s = cgroups_->WriteCpus(ctr, both);
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << s.ToString();
  EXPECT_NE(s.message().find("not a subset of parent's"), std::string::npos) << s.message();
  // Mixed (a → b): union first, then shrink, in the helper's order.
  ASSERT_TRUE(cgroups_->SetCpusetTree(pod.dirs, cg::Knob::kCpusetCpus, b).ok());
  EXPECT_EQ(cgroups_->ReadCpus(ctr).value(), b);
  EXPECT_EQ(cgroups_->ReadCpus(pod.dirs).value(), b);
  ASSERT_TRUE(cgroups_->SetCpusetTree(pod.dirs, cg::Knob::kCpusetCpus, both).ok());
  EXPECT_EQ(cgroups_->ReadCpus(ctr).value(), both);
  // mems go through the same helper.
  auto mems = cgroups_->ReadMems(pod.dirs).value();
  EXPECT_TRUE(cgroups_->SetCpusetTree(pod.dirs, cg::Knob::kCpusetMems, mems).ok());
}

// (d) v1 rejects a child quota above its parent's.
TEST_P(CgroupV1Test, ChildQuotaAboveParentIsInvalidArgument) {
  auto pod = Start(Pod("eeee0000-0005", QosClass::kGuaranteed, 'e', 1000, 1000, {}));
  EXPECT_EQ(cgroups_->ReadQuota(pod.dirs).value().quota_us, 100000);
  Status s = cgroups_->WriteQuota(pod.containers[0].dirs, {200000, 100000});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_TRUE(cgroups_->WriteQuota(pod.containers[0].dirs, {50000, 100000}).ok());
  // A period change goes through "unlimited" and lands.
  EXPECT_TRUE(cgroups_->WriteQuota(pod.containers[0].dirs, {25000, 50000}).ok());
  auto q = cgroups_->ReadQuota(pod.containers[0].dirs).value();
  EXPECT_EQ(q.quota_us, 25000);
  EXPECT_EQ(q.period_us, 50000);
}

// (e) exact original bytes come back after a typed write and a raw restore.
TEST_P(CgroupV1Test, RawRestoreGivesBackExactBytes) {
  auto pod = Start(Pod("ffff0000-0006", QosClass::kBurstable, 'f', 700, 0, {}));
  std::vector<cg::Knob> knobs = {cg::Knob::kWeight, cg::Knob::kQuota, cg::Knob::kCpusetCpus};
  if (fs::exists(pod.dirs.cpu + "/cpu.idle")) knobs.push_back(cg::Knob::kIdle);
  if (fs::exists(pod.dirs.cpu + "/cpu.cfs_burst_us")) knobs.push_back(cg::Knob::kBurst);
  std::map<std::string, std::string> original;
  for (auto k : knobs) {
    for (const auto& f : cgroups_->KnobFiles(pod.dirs, k))
      original[f] = cgroups_->ReadRaw(f).value();
  }
  ASSERT_TRUE(cgroups_->WriteWeight(pod.dirs, 5000).ok());
  ASSERT_TRUE(cgroups_->WriteQuota(pod.dirs, {30000, 50000}).ok());
  ASSERT_TRUE(
      cgroups_->SetCpusetTree(pod.dirs, cg::Knob::kCpusetCpus, {*all_cpus_.ToVector().begin()})
          .ok());
  if (fs::exists(pod.dirs.cpu + "/cpu.idle")) {
    ASSERT_TRUE(cgroups_->WriteIdle(pod.dirs, true).ok());
  }
  if (fs::exists(pod.dirs.cpu + "/cpu.cfs_burst_us")) {
    ASSERT_TRUE(cgroups_->WriteBurst(pod.dirs, 10000).ok());
  }
  EXPECT_NE(cgroups_->ReadRaw(cgroups_->KnobFiles(pod.dirs, cg::Knob::kWeight)[0]).value(),
            original[cgroups_->KnobFiles(pod.dirs, cg::Knob::kWeight)[0]]);
  if (fs::exists(pod.dirs.cpu + "/cpu.idle")) {
    // Kernel fact: an idle group refuses weight writes, so a revert clears idle first.
    Status s = cgroups_->WriteWeight(pod.dirs, 100);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  }
  // Restore in reverse order of the writes: idle, cpuset (grown back parent first), quota
  // (period before quota), weight.
  ASSERT_TRUE(cgroups_->SetCpusetTree(pod.dirs, cg::Knob::kCpusetCpus, all_cpus_).ok());
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

INSTANTIATE_TEST_SUITE_P(Drivers, CgroupV1Test,
                         ::testing::Values(cg::KubeletDriver::kSystemd,
                                           cg::KubeletDriver::kCgroupfs),
                         [](const auto& info) { return std::string(cg::DriverName(info.param)); });

}  // namespace
}  // namespace feedguard::testing
