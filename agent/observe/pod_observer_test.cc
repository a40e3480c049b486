#include "agent/observe/pod_observer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#include "agent/cgroup/fake_tree.h"
#include "agent/cgroup/fs_cgroups.h"
#include "tests/fixtures/temp_dir.h"

namespace feedguard::agent::observe {
namespace {

using cgroup::CgroupVersion;
using cgroup::KubeletDriver;

class PodObserverTest : public ::testing::TestWithParam<CgroupVersion> {
 protected:
  void SetUp() override {
    auto l = cgroup::MakeFakeLayout(dir_.path(), GetParam(), KubeletDriver::kCgroupfs, "fg");
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    layout_ = *l;
    cg_ = cgroup::NewFsCgroups(layout_);
    const bool v1 = GetParam() == CgroupVersion::kV1;
    pod_ = {layout_.cpu_mount + "/pod", layout_.cpuacct_mount + "/pod",
            layout_.cpuset_mount + "/pod"};
    ASSERT_TRUE(cgroup::MakeFakeCgroupDir(pod_.cpu, GetParam(), "cpu").ok());
    if (v1) {
      ASSERT_TRUE(cgroup::MakeFakeCgroupDir(pod_.cpuacct, GetParam(), "cpuacct").ok());
      ASSERT_TRUE(cgroup::MakeFakeCgroupDir(pod_.cpuset, GetParam(), "cpuset").ok());
    }
  }
  // The pod's usage and throttled time in microseconds, as its version's files hold them.
  void SetUsage(uint64_t usage_us, uint64_t throttled_us) {
    if (GetParam() == CgroupVersion::kV1) {
      cgroup::Put(pod_.cpuacct + "/cpuacct.usage", std::to_string(usage_us * 1000) + "\n");
      cgroup::Put(pod_.cpu + "/cpu.stat", "nr_periods 10\nnr_throttled 2\nthrottled_time " +
                                              std::to_string(throttled_us * 1000) + "\n");
    } else {
      cgroup::Put(pod_.cpu + "/cpu.stat", "usage_usec " + std::to_string(usage_us) +
                                              "\nnr_periods 10\nnr_throttled 2\nthrottled_usec " +
                                              std::to_string(throttled_us) + "\n");
    }
  }
  void SetPsiSomeTotal(uint64_t us) {
    cgroup::Put(pod_.cpu + "/cpu.pressure",
                "some avg10=0.00 avg60=0.00 avg300=0.00 total=" + std::to_string(us) +
                    "\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n");
  }

  feedguard::testing::TempDir dir_;
  cgroup::CgroupLayout layout_;
  cgroup::CgroupsPtr cg_;
  cgroup::CgroupPaths pod_;
};

TEST_P(PodObserverTest, TheIntervalIsTheDifferenceOfTwoReadings) {
  const bool psi = GetParam() == CgroupVersion::kV2;  // the fake v2 tree has cpu.pressure
  if (psi) SetPsiSomeTotal(1'000'000);
  cgroup::Put(pod_.cpu + "/cgroup.procs", std::to_string(getpid()) + "\n");
  SetUsage(5'000'000, 100'000);
  PodObserver o(pod_, "/proc");
  auto first = o.Read(*cg_, 10);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_FALSE(first->has_value()) << "the first reading is a baseline";
  EXPECT_EQ(o.cpus(), CpuSet::Range(0, 3));
  SetUsage(9'000'000, 400'000);
  if (psi) SetPsiSomeTotal(3'500'000);
  auto next = o.Read(*cg_, 10);
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  ASSERT_TRUE(next->has_value());
  const PodSample& s = **next;
  EXPECT_DOUBLE_EQ(s.cpu_s, 4);
  EXPECT_DOUBLE_EQ(s.throttled_s, 0.3);
  if (psi) {
    EXPECT_EQ(s.source, WaitSource::kPsi);
    EXPECT_DOUBLE_EQ(s.wait_s, 2.5);
  } else {
    // v1: no cpu.pressure; the wait is this test process's own run delay since the first read.
    EXPECT_EQ(s.source, WaitSource::kSchedstat);
    EXPECT_GE(s.wait_s, 0);
    EXPECT_LE(s.wait_s, 10);
  }
}

TEST_P(PodObserverTest, APodThatWentAwayIsAnErrorAndKeepsTheLastReading) {
  SetUsage(1'000'000, 0);
  PodObserver o(pod_, "/proc");
  ASSERT_TRUE(o.Read(*cg_, 10).ok());
  std::filesystem::remove_all(pod_.cpu);
  EXPECT_FALSE(o.Read(*cg_, 10).ok());
  EXPECT_EQ(o.cpus(), CpuSet::Range(0, 3));
}

// kubelet's pod cgroup holds no process itself: they sit in its containers' cgroups and below
// (crun's "container" child). Without PSI the wait is their run delay, found through the pod's
// whole subtree — reading the pod cgroup's own cgroup.procs alone found none, on every real node.
TEST(PodObserverTasksTest, WithoutPsiTheWaitIsEveryContainersTasksRunDelay) {
  for (CgroupVersion v : {CgroupVersion::kV1, CgroupVersion::kV2}) {
    SCOPED_TRACE(v == CgroupVersion::kV1 ? "v1" : "v2");
    feedguard::testing::TempDir dir;
    cgroup::FakeCgroupOptions no_psi;
    no_psi.psi = false;
    auto l = cgroup::MakeFakeLayout(dir.path() + "/cg", v, KubeletDriver::kCgroupfs, "fg", no_psi);
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    auto cg = cgroup::NewFsCgroups(*l);
    const cgroup::CgroupPaths pod{l->cpu_mount + "/pod", l->cpuacct_mount + "/pod",
                                  l->cpuset_mount + "/pod"};
    for (const auto& [mount, controller] :
         {std::pair{pod.cpu, "cpu"}, std::pair{pod.cpuacct, "cpuacct"},
          std::pair{pod.cpuset, "cpuset"}}) {
      ASSERT_TRUE(cgroup::MakeFakeCgroupDir(mount, v, controller, no_psi).ok());
    }
    ASSERT_TRUE(cgroup::MakeFakeCgroupDir(pod.cpu + "/c1", v, "cpu", no_psi).ok());
    ASSERT_TRUE(cgroup::MakeFakeCgroupDir(pod.cpu + "/c2/container", v, "cpu", no_psi).ok());
    cgroup::Put(pod.cpu + "/c1/cgroup.procs", "101\n");
    cgroup::Put(pod.cpu + "/c2/container/cgroup.procs", "102\n");
    const std::string proc = dir.path() + "/proc";
    // Process 101 has two threads; 102 one. Run delays in ns.
    auto delays = [&](uint64_t a, uint64_t b, uint64_t c) {
      for (const auto& [task, ns] : {std::pair{"101/task/101", a}, std::pair{"101/task/111", b},
                                     std::pair{"102/task/102", c}}) {
        std::filesystem::create_directories(proc + "/" + task);
        cgroup::Put(proc + "/" + task + "/schedstat", "5000 " + std::to_string(ns) + " 7\n");
      }
    };
    delays(1'000'000'000, 0, 500'000'000);
    auto pids = ListPodPids(*cg, pod);
    ASSERT_TRUE(pids.ok()) << pids.status().ToString();
    std::sort(pids->begin(), pids->end());
    EXPECT_EQ(*pids, (std::vector<int>{101, 102}));

    PodObserver o(pod, proc);
    ASSERT_TRUE(o.Read(*cg, 10).ok());
    delays(2'000'000'000, 500'000'000, 2'500'000'000);  // +1 s, +0.5 s, +2 s
    auto s = o.Read(*cg, 10);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ASSERT_TRUE(s->has_value());
    EXPECT_EQ((*s)->source, WaitSource::kSchedstat);
    EXPECT_NEAR((*s)->wait_s, 3.5, 1e-9);
  }
}

// The pids the node's scan of the host's /proc found (numbered as that proc root numbers them),
// given to the pod: their tasks' run delay is the wait; none seen while the pod's cgroup used CPU
// is no measurement (kUnknown), none seen while it used none is a schedstat 0.
TEST(PodObserverTasksTest, GivenPidsAreTheTasksAndNoneSeenWhileRunningIsNotMeasured) {
  feedguard::testing::TempDir dir;
  cgroup::FakeCgroupOptions no_psi;
  no_psi.psi = false;
  auto l = cgroup::MakeFakeLayout(dir.path() + "/cg", CgroupVersion::kV1, KubeletDriver::kCgroupfs,
                                  "", no_psi);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  auto cg = cgroup::NewFsCgroups(*l);
  const cgroup::CgroupPaths pod{l->cpu_mount + "/pod", l->cpuacct_mount + "/pod",
                                l->cpuset_mount + "/pod"};
  for (const auto& [mount, controller] :
       {std::pair{pod.cpu, "cpu"}, std::pair{pod.cpuacct, "cpuacct"},
        std::pair{pod.cpuset, "cpuset"}}) {
    ASSERT_TRUE(cgroup::MakeFakeCgroupDir(mount, CgroupVersion::kV1, controller, no_psi).ok());
  }
  // Its cgroup.procs, read from this PID namespace, names none of them (the agent's case).
  const std::string proc = dir.path() + "/proc";
  auto at = [&](double usage_s, uint64_t delay_ns) {
    cgroup::Put(pod.cpuacct + "/cpuacct.usage",
                std::to_string(static_cast<uint64_t>(usage_s * 1e9)) + "\n");
    for (const char* task : {"501/task/501", "501/task/502"}) {
      std::filesystem::create_directories(proc + "/" + task);
      cgroup::Put(proc + "/" + task + "/schedstat", "1 " + std::to_string(delay_ns) + " 1\n");
    }
  };
  PodObserver o(pod, proc);
  at(1, 100'000'000);
  ASSERT_TRUE(o.Read(*cg, 10, std::vector<int>{501}).ok());
  EXPECT_EQ(o.had_psi(), false);
  at(3, 1'100'000'000);  // +1 s on each of its two threads
  auto s = o.Read(*cg, 10, std::vector<int>{501});
  ASSERT_TRUE(s.ok() && s->has_value());
  EXPECT_EQ((*s)->source, WaitSource::kSchedstat);
  EXPECT_NEAR((*s)->wait_s, 2, 1e-9);

  at(5, 2'100'000'000);
  s = o.Read(*cg, 10, std::vector<int>{});  // the scan found none of its processes
  ASSERT_TRUE(s.ok() && s->has_value());
  EXPECT_EQ((*s)->source, WaitSource::kUnknown) << "it used 2 s of CPU: its tasks exist, unseen";
  EXPECT_DOUBLE_EQ((*s)->wait_s, 0);
  s = o.Read(*cg, 10, std::vector<int>{});  // and its cgroup used no CPU since
  ASSERT_TRUE(s.ok() && s->has_value());
  EXPECT_EQ((*s)->source, WaitSource::kSchedstat);
  EXPECT_DOUBLE_EQ((*s)->wait_s, 0);
  // Without pids given, its own cgroup.procs: empty here, so nothing seen either.
  at(6, 2'100'000'000);
  s = o.Read(*cg, 10);
  ASSERT_TRUE(s.ok() && s->has_value());
  EXPECT_EQ((*s)->source, WaitSource::kUnknown);
}

INSTANTIATE_TEST_SUITE_P(Version, PodObserverTest,
                         ::testing::Values(CgroupVersion::kV1, CgroupVersion::kV2),
                         [](const auto& info) {
                           return info.param == CgroupVersion::kV1 ? std::string("v1")
                                                                   : std::string("v2");
                         });

}  // namespace
}  // namespace feedguard::agent::observe
