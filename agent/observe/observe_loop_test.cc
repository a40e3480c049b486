#include "agent/observe/observe_loop.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "agent/cgroup/fake_tree.h"
#include "agent/cgroup/fs_cgroups.h"
#include "agent/cgroup/kubelet_facts.h"
#include "feedguard/common/wire_limits.h"
#include "tests/fixtures/temp_dir.h"

namespace feedguard::agent::observe {
namespace {

using cgroup::CgroupVersion;
using cgroup::KubeletDriver;
using std::chrono::seconds;
namespace fs = std::filesystem;

constexpr char kA[] = "11111111-aaaa-4bbb-8ccc-00000000000a";
constexpr char kB[] = "11111111-aaaa-4bbb-8ccc-00000000000b";
constexpr char kC[] = "11111111-aaaa-4bbb-8ccc-00000000000c";
constexpr char kGpu0[] = "0000:01:00.0";
constexpr char kGpu1[] = "0000:02:00.0";
constexpr char kUuid0[] = "GPU-00000000-0000-4000-8000-000000000001";
constexpr char kUuid1[] = "GPU-00000000-0000-4000-8000-000000000002";

// NVML as a test sets it: each GPU's utilisation, counted readings.
class FakeGpus final : public gpu::GpuMonitor {
 public:
  void Set(const std::string& bdf, unsigned percent) {
    std::lock_guard l(mu_);
    percent_[bdf] = percent;
  }
  Result<std::map<std::string, gpu::GpuSample>> Sample() override {
    std::lock_guard l(mu_);
    ++readings_;
    std::map<std::string, gpu::GpuSample> out;
    for (const auto& [bdf, p] : percent_) out[bdf] = {"", bdf, p, 0};
    return out;
  }
  int readings() const {
    std::lock_guard l(mu_);
    return readings_;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::string, unsigned> percent_;  // guarded by mu_
  int readings_ = 0;                         // guarded by mu_
};

// kubelet's PodResources as a test sets it.
class FakeKubelet final : public PodResourcesSource {
 public:
  void Give(const std::string& ns, const std::string& name, std::vector<std::string> ids) {
    std::lock_guard l(mu_);
    gpus_[PodKey{ns, name}] = std::move(ids);
  }
  Result<PodGpuMap> ListPodGpus() override {
    std::lock_guard l(mu_);
    ++calls_;
    return gpus_;
  }
  int calls() const {
    std::lock_guard l(mu_);
    return calls_;
  }

 private:
  mutable std::mutex mu_;
  PodGpuMap gpus_;  // guarded by mu_
  int calls_ = 0;   // guarded by mu_
};

// The node's cgroups, counting what the loop asks of them.
class CountingCgroups final : public cgroup::Cgroups {
 public:
  explicit CountingCgroups(cgroup::CgroupsPtr inner) : inner_(std::move(inner)) {}
  const cgroup::CgroupLayout& layout() const override { return inner_->layout(); }
  Result<cgroup::ResolvedPod> ResolvePod(const PodIdentity& pod) const override {
    ++reads;
    return inner_->ResolvePod(pod);
  }
  bool IsKubeletOwned(const std::string& dir) const override { return inner_->IsKubeletOwned(dir); }
  std::vector<std::string> KnobFiles(const cgroup::CgroupPaths& dirs,
                                     cgroup::Knob knob) const override {
    return inner_->KnobFiles(dirs, knob);
  }
  Result<std::string> ReadRaw(const std::string& file) const override {
    ++reads;
    return inner_->ReadRaw(file);
  }
  Status WriteRaw(const std::string& file, std::string_view bytes) override {
    ++writes;
    return inner_->WriteRaw(file, bytes);
  }
  Result<CpuSet> ReadEffectiveCpus(const cgroup::CgroupPaths& dirs) const override {
    ++reads;
    return inner_->ReadEffectiveCpus(dirs);
  }
  Result<std::vector<cgroup::FileWrite>> PlanCpusetTree(const cgroup::CgroupPaths& dirs,
                                                        cgroup::Knob knob,
                                                        const CpuSet& target) const override {
    ++reads;
    return inner_->PlanCpusetTree(dirs, knob, target);
  }
  Result<std::vector<std::string>> CpusetTreeFiles(const cgroup::CgroupPaths& dirs,
                                                   cgroup::Knob knob) const override {
    ++reads;
    return inner_->CpusetTreeFiles(dirs, knob);
  }
  Result<std::vector<std::string>> ChildDirs(const std::string& dir) const override {
    ++reads;
    return inner_->ChildDirs(dir);
  }
  Status ApplyWrites(const std::vector<cgroup::FileWrite>& w) override {
    ++writes;
    return inner_->ApplyWrites(w);
  }
  Result<cgroup::CpuUsage> ReadUsage(const cgroup::CgroupPaths& dirs) const override {
    ++reads;
    return inner_->ReadUsage(dirs);
  }
  Result<std::optional<cgroup::CpuPressure>> ReadPressure(
      const cgroup::CgroupPaths& dirs) const override {
    ++reads;
    return inner_->ReadPressure(dirs);
  }
  Result<std::vector<int>> ListPids(const cgroup::CgroupPaths& dirs) const override {
    ++reads;
    return inner_->ListPids(dirs);
  }

  mutable std::atomic<int> reads{0};
  std::atomic<int> writes{0};

 private:
  cgroup::CgroupsPtr inner_;
};

v1::PodRef Ref(const std::string& uid) {
  v1::PodRef r;
  r.set_uid(uid);
  r.set_namespace_("ml");
  r.set_name("pod-" + uid.substr(uid.size() < 2 ? 0 : uid.size() - 2));
  return r;
}
google::protobuf::RepeatedPtrField<v1::PodRef> Refs(const std::vector<std::string>& uids) {
  google::protobuf::RepeatedPtrField<v1::PodRef> out;
  for (const auto& u : uids) *out.Add() = Ref(u);
  return out;
}

const v1::PodObservation* Find(const std::vector<v1::PodObservation>& obs, const std::string& uid) {
  for (const auto& o : obs) {
    if (o.uid() == uid) return &o;
  }
  return nullptr;
}

// A node in a temp dir (v1 or v2, systemd driver): pods made on demand with their counters, a
// fake /proc (stat, and on v1 one task per pod whose schedstat run delay is the pod's wait, its
// /proc/<pid>/cgroup naming the pod's cgroup as the host's procfs would: a fake /proc is not the
// test's own PID namespace's, so the loop scans it, as the agent scans the host's).
class ObserveLoopTest : public ::testing::TestWithParam<CgroupVersion> {
 protected:
  void SetUp() override {
    auto l = cgroup::MakeFakeLayout(dir_.path() + "/cg", GetParam(), KubeletDriver::kSystemd, "/");
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    layout_ = *l;
    cg_ = cgroup::NewFsCgroups(layout_);
    fs::create_directories(dir_.path() + "/proc");
    Stat(0);
    gpus_ = std::make_shared<FakeGpus>();
    kubelet_ = std::make_shared<FakeKubelet>();
  }
  bool v1() const { return GetParam() == CgroupVersion::kV1; }

  void AddPod(const std::string& uid, QosClass q = QosClass::kBurstable) {
    const std::string rel = cgroup::PodRelPath(layout_.driver, "/", q, uid);
    cgroup::CgroupPaths d{layout_.cpu_mount + "/" + rel, layout_.cpuacct_mount + "/" + rel,
                          layout_.cpuset_mount + "/" + rel};
    ASSERT_TRUE(cgroup::MakeFakeCgroupDir(d.cpu, GetParam(), "cpu").ok());
    if (v1()) {
      ASSERT_TRUE(cgroup::MakeFakeCgroupDir(d.cpuacct, GetParam(), "cpuacct").ok());
      ASSERT_TRUE(cgroup::MakeFakeCgroupDir(d.cpuset, GetParam(), "cpuset").ok());
      const int pid = 1000 + static_cast<int>(dirs_.size());
      pids_[uid] = pid;
      cgroup::Put(d.cpu + "/cgroup.procs", std::to_string(pid) + "\n");
      fs::create_directories(dir_.path() + "/proc/" + std::to_string(pid) + "/task/" +
                             std::to_string(pid));
      cgroup::Put(dir_.path() + "/proc/" + std::to_string(pid) + "/cgroup",
                  "5:cpuset:/" + rel + "\n4:cpu,cpuacct:/" + rel + "\n1:name=systemd:/\n");
    }
    dirs_[uid] = d;
    Set(uid, 0, 0);
  }
  // The pod's cumulative CPU use and wait, in seconds, as its version's files hold them.
  void Set(const std::string& uid, double usage_s, double wait_s) {
    const auto us = [](double s) { return std::to_string(static_cast<uint64_t>(s * 1e6)); };
    const auto ns = [](double s) { return std::to_string(static_cast<uint64_t>(s * 1e9)); };
    const cgroup::CgroupPaths& d = dirs_.at(uid);
    if (v1()) {
      cgroup::Put(d.cpuacct + "/cpuacct.usage", ns(usage_s) + "\n");
      cgroup::Put(d.cpu + "/cpu.stat", "nr_periods 0\nnr_throttled 0\nthrottled_time 0\n");
      const std::string pid = std::to_string(pids_.at(uid));
      cgroup::Put(dir_.path() + "/proc/" + pid + "/task/" + pid + "/schedstat",
                  ns(usage_s) + " " + ns(wait_s) + " 10\n");
    } else {
      cgroup::Put(d.cpu + "/cpu.stat", "usage_usec " + us(usage_s) +
                                           "\nnr_periods 0\nnr_throttled 0\nthrottled_usec 0\n");
      if (unseen_.count(uid)) return;  // no PSI: its wait is its unseen tasks'
      cgroup::Put(d.cpu + "/cpu.pressure",
                  "some avg10=0.00 avg60=0.00 avg300=0.00 total=" + us(wait_s) +
                      "\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n");
    }
  }
  // A pod without PSI whose tasks the agent cannot see: on v1 its process's /proc/<pid>/cgroup
  // unreadable (the scan places it in no pod); on v2 its cgroup without cpu.pressure (a kernel
  // booted with psi=0) and no process of it in /proc.
  void Unseen(const std::string& uid) {
    unseen_.insert(uid);
    if (v1()) {
      fs::remove(dir_.path() + "/proc/" + std::to_string(pids_.at(uid)) + "/cgroup");
    } else {
      fs::remove(dirs_.at(uid).cpu + "/cpu.pressure");
    }
  }
  // CPUs 0-3 each `busy_s` seconds busy (user time, USER_HZ 100).
  void Stat(double busy_s) {
    std::string text = "cpu  0 0 0 0 0 0 0 0 0 0\n";
    for (int c = 0; c < 4; ++c) {
      text += "cpu" + std::to_string(c) + " " + std::to_string(static_cast<int64_t>(busy_s * 100)) +
              " 0 0 100000 0 0 0 0 0 0\n";
    }
    cgroup::Put(dir_.path() + "/proc/stat", text);
  }
  std::map<std::string, std::string> Tree() const {
    std::map<std::string, std::string> out;
    for (const auto& e : fs::recursive_directory_iterator(dir_.path())) {
      if (e.is_regular_file()) out[e.path().string()] = cgroup::Slurp(e.path().string());
    }
    return out;
  }

  ObserveLoopOptions Options(bool with_gpus) {
    ObserveLoopOptions o;
    o.cgroups = cg_;
    if (with_gpus) {
      o.gpu_monitor = gpus_;
      o.pod_resources = kubelet_;
      o.gpu_resolver = std::make_shared<GpuIdResolver>(
          std::map<std::string, std::string>{{"gpu-00000000-0000-4000-8000-000000000001", kGpu0},
                                             {"gpu-00000000-0000-4000-8000-000000000002", kGpu1}},
          MigParentTable{});
    }
    o.proc_root = dir_.path() + "/proc";
    o.clock = clock_;
    return o;
  }
  // Moves the clock `s` seconds on and ticks (as the thread would when the tick is due).
  void After(ObserveLoop& loop, double s) {
    clock_->Advance(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(s)));
    loop.Tick();
  }

  feedguard::testing::TempDir dir_;
  cgroup::CgroupLayout layout_;
  cgroup::CgroupsPtr cg_;
  std::map<std::string, cgroup::CgroupPaths> dirs_;
  std::map<std::string, int> pids_;
  std::set<std::string> unseen_;
  std::shared_ptr<ManualTimeSource> clock_ = std::make_shared<ManualTimeSource>();
  std::shared_ptr<FakeGpus> gpus_;
  std::shared_ptr<FakeKubelet> kubelet_;
};

TEST_P(ObserveLoopTest, PodsComeAndGoWithTheirWindows) {
  AddPod(kA);
  AddPod(kB);
  ObserveLoop loop(Options(false));
  loop.SetPods(Refs({kA, kB}));
  loop.Tick();  // baseline
  EXPECT_TRUE(loop.Observations().empty()) << "the first reading is a baseline";
  Set(kA, 5, 2);
  Set(kB, 5, 1);
  After(loop, 10);
  auto obs = loop.Observations();
  ASSERT_EQ(obs.size(), 2u);
  ASSERT_TRUE(Find(obs, kA));
  EXPECT_DOUBLE_EQ(Find(obs, kA)->windows(0).wait_seconds(), 2);
  EXPECT_EQ(loop.Metrics().pods.size(), 2u);

  // B leaves: gone from both surfaces at once, before any further tick.
  loop.SetPods(Refs({kA}));
  obs = loop.Observations();
  ASSERT_EQ(obs.size(), 1u);
  EXPECT_EQ(obs[0].uid(), kA);
  ASSERT_EQ(loop.Metrics().pods.size(), 1u);
  EXPECT_EQ(loop.Metrics().pods[0].uid, kA);
  Set(kA, 6, 3);
  Set(kB, 9, 4);
  After(loop, 10);
  ASSERT_EQ(loop.Observations().size(), 1u);

  // B back: a new pod to the loop, from a fresh baseline (its windows went with it).
  loop.SetPods(Refs({kA, kB}));
  After(loop, 10);
  EXPECT_FALSE(Find(loop.Observations(), kB)) << "B's first interval back is a baseline";
  Set(kB, 10, 4.5);
  After(loop, 10);
  obs = loop.Observations();
  ASSERT_TRUE(Find(obs, kB));
  EXPECT_DOUBLE_EQ(Find(obs, kB)->windows(2).covered_seconds(), 10);
  EXPECT_DOUBLE_EQ(Find(obs, kB)->windows(2).wait_seconds(), 0.5);
}

TEST_P(ObserveLoopTest, WindowsAreTheReportsAndTheWorstComesFirst) {
  for (const char* uid : {kA, kB, kC}) AddPod(uid);
  ObserveLoop loop(Options(false));
  loop.SetPods(Refs({kA, kB, kC}));
  loop.Tick();
  // Seven 10 s intervals: A waits 1 s each, B 3 s, C 1 s (a tie with A: by uid).
  for (int i = 1; i <= 7; ++i) {
    Set(kA, 2 * i, 1 * i);
    Set(kB, 2 * i, 3 * i);
    Set(kC, 2 * i, 1 * i);
    After(loop, 10);
  }
  auto obs = loop.Observations();
  ASSERT_EQ(obs.size(), 3u);
  EXPECT_EQ(obs[0].uid(), kB);
  EXPECT_EQ(obs[1].uid(), kA);
  EXPECT_EQ(obs[2].uid(), kC);
  const v1::PodObservation& b = obs[0];
  ASSERT_EQ(b.windows_size(), 3);
  const auto want_source = v1() ? v1::ObservationWindow::SCHEDSTAT : v1::ObservationWindow::PSI;
  const std::pair<uint32_t, double> expect[] = {{60, 60}, {600, 70}, {3600, 70}};
  for (int w = 0; w < 3; ++w) {
    const auto& win = b.windows(w);
    EXPECT_EQ(win.window_seconds(), expect[w].first);
    EXPECT_DOUBLE_EQ(win.covered_seconds(), expect[w].second) << win.window_seconds();
    EXPECT_NEAR(win.wait_seconds(), 0.3 * expect[w].second, 1e-6) << win.window_seconds();
    EXPECT_NEAR(win.cpu_seconds(), 0.2 * expect[w].second, 1e-6) << win.window_seconds();
    EXPECT_EQ(win.wait_source(), want_source);
    EXPECT_FALSE(win.gpu_sampled()) << "no NVML here";
  }
  // The metrics' 10 min ratio, and the counters since the pod was first observed.
  ObserveMetrics m = loop.Metrics();
  ASSERT_EQ(m.pods.size(), 3u);
  const ObservedPodMetrics& pb = m.pods[1];
  EXPECT_EQ(pb.uid, kB);
  EXPECT_EQ(pb.ns, "ml");
  EXPECT_EQ(pb.name, "pod-0b");
  ASSERT_TRUE(pb.wait_ratio_10m);
  EXPECT_NEAR(*pb.wait_ratio_10m, 0.3, 1e-9);
  const WaitSource src = v1() ? WaitSource::kSchedstat : WaitSource::kPsi;
  ASSERT_EQ(pb.wait_s_total.size(), 1u);
  EXPECT_NEAR(pb.wait_s_total.at(src), 21, 1e-6);
  EXPECT_FALSE(pb.gpu_lost_s_total) << "no GPU reading, no GPU figure";
}

// Without PSI a pod none of whose tasks can be seen while it runs (Unseen) has its wait reported
// as not measured (WAIT_SOURCE_UNSPECIFIED, the controller's "unknown"), not as a measured 0: no
// wait counter, no ratio, no GPU time lost.
TEST_P(ObserveLoopTest, AWaitNotMeasuredIsReportedAsSuchNotAsZero) {
  AddPod(kA);
  AddPod(kB);
  Unseen(kB);
  kubelet_->Give("ml", "pod-0b", {kUuid0});
  gpus_->Set(kGpu0, 50);
  ObserveLoop loop(Options(true));
  loop.SetPods(Refs({kA, kB}));
  loop.Tick();
  for (int i = 1; i <= 3; ++i) {
    Set(kA, 2 * i, 1 * i);
    Set(kB, 2 * i, 5 * i);  // it did wait, unseen
    for (int t = 0; t < 5; ++t) After(loop, 2);
  }
  auto obs = loop.Observations();
  ASSERT_EQ(obs.size(), 2u);
  EXPECT_EQ(obs[0].uid(), kA) << "the measured wait ranks first";
  const v1::PodObservation* b = Find(obs, kB);
  ASSERT_TRUE(b);
  for (const auto& w : b->windows()) {
    EXPECT_EQ(w.wait_source(), v1::ObservationWindow::WAIT_SOURCE_UNSPECIFIED)
        << w.window_seconds();
    EXPECT_EQ(w.wait_seconds(), 0);
    EXPECT_DOUBLE_EQ(w.covered_seconds(), 30);
    EXPECT_NEAR(w.cpu_seconds(), 6, 1e-6) << "its CPU use is measured";
    EXPECT_FALSE(w.gpu_sampled()) << "no GPU time lost without a wait";
  }
  for (const auto& w : Find(obs, kA)->windows()) {
    EXPECT_EQ(w.wait_source(),
              v1() ? v1::ObservationWindow::SCHEDSTAT : v1::ObservationWindow::PSI);
    EXPECT_NEAR(w.wait_seconds(), 3, 1e-6);
  }
  ObserveMetrics m = loop.Metrics();
  ASSERT_EQ(m.pods.size(), 2u);
  EXPECT_EQ(m.pods[0].uid, kA);
  ASSERT_TRUE(m.pods[0].wait_ratio_10m);
  EXPECT_EQ(m.pods[1].uid, kB);
  EXPECT_TRUE(m.pods[1].wait_s_total.empty()) << "no wait counted for an unmeasured interval";
  EXPECT_FALSE(m.pods[1].wait_ratio_10m);
  EXPECT_FALSE(m.pods[1].gpu_lost_s_total);
}

TEST_P(ObserveLoopTest, CountersKeepGrowingPastTheWindowsAndThroughARecreatedCgroup) {
  AddPod(kA);
  ObserveLoopOptions o = Options(false);
  o.period = std::chrono::minutes(20);  // three intervals fill the hour window
  ObserveLoop loop(o);
  loop.SetPods(Refs({kA}));
  loop.Tick();
  double last = 0;
  double wait = 0;
  for (int i = 1; i <= 5; ++i) {
    wait += 100;
    Set(kA, 10 * i, wait);
    After(loop, 1200);
    const double total = loop.Metrics().pods.at(0).wait_s_total.begin()->second;
    EXPECT_NEAR(total, 100 * i, 1e-6) << "interval " << i;
    EXPECT_GE(total, last);
    last = total;
  }
  EXPECT_NEAR(loop.Observations().at(0).windows(2).wait_seconds(), 300, 1e-6)
      << "the hour window holds three intervals";
  // The cgroup re-created (its counters back near zero): the counter still only grows.
  Set(kA, 1, 50);
  After(loop, 1200);
  EXPECT_NEAR(loop.Metrics().pods.at(0).wait_s_total.begin()->second, 550, 1e-6);
}

TEST_P(ObserveLoopTest, GpuBusyIsTheMeanOfTheReadingsOverThePeriod) {
  AddPod(kA);
  AddPod(kB);
  AddPod(kC);
  kubelet_->Give("ml", "pod-0a", {kUuid0});
  kubelet_->Give("ml", "pod-0b", {std::string(kUuid0) + "::1", kUuid1});  // two GPUs
  // C: kubelet names no GPU of it (e.g. another vendor's): no GPU figure.
  ObserveLoop loop(Options(true));
  loop.SetPods(Refs({kA, kB, kC}));
  loop.Tick();  // baseline; the next reading in 2 s
  const int before = gpus_->readings();
  // Over the next 10 s, readings at 2, 4, 6, 8, 10 s: GPU 0 at 100, 0, 100, 20, 0 (mean 0.44,
  // neither the first nor the last); GPU 1 always at 90.
  const unsigned gpu0[] = {100, 0, 100, 20, 0};
  Set(kA, 4, 4);
  Set(kB, 4, 2);
  Set(kC, 4, 4);
  for (unsigned p : gpu0) {
    gpus_->Set(kGpu0, p);
    gpus_->Set(kGpu1, 90);
    After(loop, 2);
  }
  EXPECT_EQ(gpus_->readings() - before, 5) << "one NVML reading every 2 s";
  auto obs = loop.Observations();
  ASSERT_EQ(obs.size(), 3u);
  const auto& a = Find(obs, kA)->windows(0);
  ASSERT_TRUE(a.gpu_sampled());
  EXPECT_NEAR(a.gpu_busy_fraction(), 0.44, 1e-9);
  // Waited 4 s of 10 with the GPU idle 5.6 s: lost ≈ 4·5.6/10, between max(0, 4+5.6-10) and
  // min(4, 5.6).
  EXPECT_NEAR(a.gpu_lost_seconds(), 2.24, 1e-9);
  EXPECT_NEAR(a.gpu_lost_min_seconds(), 0, 1e-9);
  EXPECT_NEAR(a.gpu_lost_max_seconds(), 4, 1e-9);
  const auto& b = Find(obs, kB)->windows(0);
  ASSERT_TRUE(b.gpu_sampled());
  EXPECT_NEAR(b.gpu_busy_fraction(), (0.44 + 0.9) / 2, 1e-9) << "the mean of its two GPUs";
  EXPECT_FALSE(Find(obs, kC)->windows(0).gpu_sampled());
  ObserveMetrics m = loop.Metrics();
  ASSERT_EQ(m.pods.size(), 3u);
  ASSERT_TRUE(m.pods[0].gpu_lost_s_total);
  EXPECT_NEAR(*m.pods[0].gpu_lost_s_total, 2.24, 1e-9);
  EXPECT_FALSE(m.pods[2].gpu_lost_s_total);

  // kubelet is asked again only for the pod it has not named: C (once per step).
  const int calls = kubelet_->calls();
  const int readings = gpus_->readings();
  After(loop, 10);  // a tick 8 s late: one reading, and the next one 2 s on, not a burst
  EXPECT_EQ(gpus_->readings(), readings + 1);
  EXPECT_EQ(loop.Tick(), seconds(2));
  EXPECT_EQ(kubelet_->calls(), calls + 1);
  kubelet_->Give("ml", "pod-0c", {kUuid1});
  After(loop, 10);
  After(loop, 10);
  EXPECT_EQ(kubelet_->calls(), calls + 2) << "C named: kubelet is not asked again";
}

TEST_P(ObserveLoopTest, WithoutNvmlThereIsNoGpuFigureAndNoReading) {
  AddPod(kA);
  ObserveLoopOptions o = Options(true);
  o.gpu_monitor = nullptr;
  kubelet_->Give("ml", "pod-0a", {kUuid0});
  ObserveLoop loop(o);
  loop.SetPods(Refs({kA}));
  EXPECT_EQ(loop.Tick(), seconds(10)) << "nothing to read between steps";
  Set(kA, 4, 4);
  After(loop, 10);
  auto obs = loop.Observations();
  ASSERT_EQ(obs.size(), 1u);
  for (const auto& w : obs[0].windows()) {
    EXPECT_FALSE(w.gpu_sampled());
    EXPECT_EQ(w.gpu_lost_seconds(), 0);
  }
  EXPECT_EQ(kubelet_->calls(), 0) << "no NVML: kubelet is not asked which GPUs pods have";
  EXPECT_FALSE(loop.Metrics().pods.at(0).gpu_lost_s_total);
}

TEST_P(ObserveLoopTest, ContendersAreCappedAndTheNodeIsTheEmptyUid) {
  AddPod(kA);
  std::vector<std::string> others;
  for (int i = 0; i < 10; ++i) {
    others.push_back("22222222-aaaa-4bbb-8ccc-0000000000" + std::to_string(10 + i));
    AddPod(others.back(), QosClass::kBestEffort);
  }
  ObserveLoopOptions o = Options(false);
  o.top_k = 50;  // more than the wire carries: held to kMaxObservedContenders
  ObserveLoop loop(o);
  loop.SetPods(Refs({kA}));
  loop.Tick();
  // 10 s: A used 4 s and waited 5 s; the ten others took 1, 1.1, …, 1.9 s on the same CPUs;
  // the CPUs were busy 40 s in all, so the node itself took 40 - 4 - 14.5 = 21.5 s.
  Set(kA, 4, 5);
  for (int i = 0; i < 10; ++i) Set(others[i], 1 + 0.1 * i, 0);
  Stat(10);
  After(loop, 10);
  auto obs = loop.Observations();
  ASSERT_EQ(obs.size(), 1u);
  for (const auto& w : obs[0].windows()) {
    ASSERT_EQ(static_cast<size_t>(w.contenders_size()), kMaxObservedContenders);
    EXPECT_EQ(w.contenders(0).pod_uid(), "") << "the node itself";
    EXPECT_NEAR(w.contenders(0).cpu_seconds(), 21.5, 1e-6);
    EXPECT_EQ(w.contenders(1).pod_uid(), others[9]);
    EXPECT_NEAR(w.contenders(1).cpu_seconds(), 1.9, 1e-6);
  }
  ObserveMetrics m = loop.Metrics();
  ASSERT_EQ(m.contenders.size(), kMaxObservedContenders);
  EXPECT_EQ(m.contenders[0].contender, kNodeContender);

  // The per-node list for /metrics keeps top_k.
  o.top_k = 2;
  ObserveLoop small(o);
  small.SetPods(Refs({kA}));
  small.Tick();
  Set(kA, 8, 10);
  for (int i = 0; i < 10; ++i) Set(others[i], 2 + 0.2 * i, 0);
  Stat(20);
  After(small, 10);
  m = small.Metrics();
  ASSERT_EQ(m.contenders.size(), 2u);
  EXPECT_EQ(m.contenders[1].contender, others[9]);
  EXPECT_EQ(small.Observations().at(0).windows(0).contenders_size(), 2);
}

TEST_P(ObserveLoopTest, ObservingWritesNothing) {
  for (const char* uid : {kA, kB}) AddPod(uid);
  kubelet_->Give("ml", "pod-0a", {kUuid0});
  gpus_->Set(kGpu0, 40);
  ObserveLoop loop(Options(true));
  loop.SetPods(Refs({kA, kB}));
  loop.Tick();
  Set(kA, 3, 2);
  Set(kB, 3, 1);
  Stat(5);
  const auto before = Tree();
  for (int i = 0; i < 12; ++i) After(loop, 2);
  loop.SetPods(Refs({kB}));
  After(loop, 10);
  ASSERT_FALSE(loop.Observations().empty());
  EXPECT_EQ(Tree(), before) << "observing wrote to the cgroup tree or /proc";
}

TEST_P(ObserveLoopTest, WithNoPodToObserveNothingIsReadAndNeverAnythingWritten) {
  AddPod(kA);
  AddPod(kB);
  auto counting = std::make_shared<CountingCgroups>(cg_);
  ObserveLoopOptions o = Options(true);
  o.cgroups = counting;
  ObserveLoop loop(o);
  loop.Tick();
  for (int i = 0; i < 30; ++i) After(loop, 2);  // six periods, no pod named
  EXPECT_EQ(counting->reads, 0) << "an idle loop reads the node's cgroups";
  EXPECT_EQ(gpus_->readings(), 0);
  loop.SetPods(Refs({kA}));
  for (int i = 0; i < 10; ++i) After(loop, 2);
  EXPECT_GT(counting->reads, 0);
  EXPECT_EQ(loop.Observations().size(), 1u);
  loop.SetPods(Refs({}));
  const int reads = counting->reads;
  for (int i = 0; i < 10; ++i) After(loop, 2);
  EXPECT_EQ(counting->reads, reads) << "the last pod gone, reading stops";
  EXPECT_TRUE(loop.Observations().empty());
  EXPECT_EQ(counting->writes, 0);
}

TEST_P(ObserveLoopTest, AtMostTheWireLimitOfPodsTheFirstGiven) {
  std::vector<std::string> pods;
  for (size_t i = 0; i < kMaxObservedPodsPerNode + 6; ++i) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "33333333-aaaa-4bbb-8ccc-%012zu", 999 - i);  // descending
    pods.push_back(buf);
    AddPod(pods.back());
  }
  // As given: the first pod, one without a uid and a repeat (both skipped), then the rest.
  std::vector<std::string> given = {pods[0], "", pods[0]};
  given.insert(given.end(), pods.begin() + 1, pods.end());
  ObserveLoop loop(Options(false));
  loop.SetPods(Refs(given));
  loop.Tick();
  After(loop, 10);
  auto obs = loop.Observations();
  ASSERT_EQ(obs.size(), kMaxObservedPodsPerNode);
  std::set<std::string> seen;
  for (const auto& o : obs) seen.insert(o.uid());
  for (size_t i = 0; i < kMaxObservedPodsPerNode; ++i) EXPECT_TRUE(seen.count(pods[i])) << i;
  EXPECT_EQ(loop.Metrics().pods.size(), kMaxObservedPodsPerNode);
}

INSTANTIATE_TEST_SUITE_P(Version, ObserveLoopTest,
                         ::testing::Values(CgroupVersion::kV1, CgroupVersion::kV2),
                         [](const auto& info) {
                           return info.param == CgroupVersion::kV1 ? std::string("v1")
                                                                   : std::string("v2");
                         });

// The loop on its own thread with the real clock, while the fence, the report and /metrics use
// it from others (TSan runs this: label `threaded`).
TEST(ObserveLoopThreadTest, RunsOnItsOwnThreadUntilStopped) {
  feedguard::testing::TempDir dir;
  auto l =
      cgroup::MakeFakeLayout(dir.path() + "/cg", CgroupVersion::kV2, KubeletDriver::kSystemd, "/");
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  const std::string pod =
      l->cpu_mount + "/" + cgroup::PodRelPath(l->driver, "/", QosClass::kBurstable, kA);
  ASSERT_TRUE(cgroup::MakeFakeCgroupDir(pod, CgroupVersion::kV2, "cpu").ok());
  fs::create_directories(dir.path() + "/proc");
  cgroup::Put(dir.path() + "/proc/stat", "cpu  0 0 0 0 0 0 0 0 0 0\ncpu0 1 0 0 1 0 0 0 0 0 0\n");
  auto gpus = std::make_shared<FakeGpus>();
  gpus->Set(kGpu0, 70);
  auto kubelet = std::make_shared<FakeKubelet>();
  kubelet->Give("ml", "pod-0a", {kUuid0});

  ObserveLoopOptions o;
  o.cgroups = cgroup::NewFsCgroups(*l);
  o.gpu_monitor = gpus;
  o.pod_resources = kubelet;
  o.gpu_resolver = std::make_shared<GpuIdResolver>(
      std::map<std::string, std::string>{{"gpu-00000000-0000-4000-8000-000000000001", kGpu0}},
      MigParentTable{});
  o.proc_root = dir.path() + "/proc";
  o.period = std::chrono::milliseconds(20);
  o.gpu_sample_interval = std::chrono::milliseconds(5);
  auto loop = std::make_unique<ObserveLoop>(o);
  ASSERT_TRUE(loop->Start().ok());
  ASSERT_TRUE(loop->Start().ok()) << "a second Start is a no-op";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  bool sampled = false;
  for (int i = 0; std::chrono::steady_clock::now() < deadline; ++i) {
    loop->SetPods(Refs(i % 2 ? std::vector<std::string>{kA} : std::vector<std::string>{kA, kB}));
    auto obs = loop->Observations();
    (void)loop->Metrics();
    if (!obs.empty() && obs[0].windows(0).gpu_sampled()) {
      EXPECT_NEAR(obs[0].windows(0).gpu_busy_fraction(), 0.7, 1e-9);
      sampled = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_TRUE(sampled) << "no interval with a GPU reading within 20 s";
  loop->Stop();
  const int readings = gpus->readings();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(gpus->readings(), readings) << "nothing runs after Stop";
  loop->Stop();  // idempotent; the destructor stops once more
  loop.reset();
}

}  // namespace
}  // namespace feedguard::agent::observe
