#include "agent/observe/node_observer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "agent/cgroup/fake_tree.h"
#include "agent/cgroup/fs_cgroups.h"
#include "agent/cgroup/kubelet_facts.h"
#include "tests/fixtures/temp_dir.h"

namespace feedguard::agent::observe {
namespace {

using cgroup::CgroupVersion;
using cgroup::KubeletDriver;
namespace fs = std::filesystem;

constexpr char kTrainer[] = "11111111-aaaa-4bbb-8ccc-000000000001";
constexpr char kNeighbour[] = "11111111-aaaa-4bbb-8ccc-000000000002";
constexpr char kCalm[] = "11111111-aaaa-4bbb-8ccc-000000000003";

// A v2 node (systemd driver, as fleets run it) in a temp dir: three pods, a fake /proc/stat.
class NodeObserverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto l = cgroup::MakeFakeLayout(dir_.path() + "/cg", CgroupVersion::kV2,
                                    KubeletDriver::kSystemd, "/");
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    layout_ = *l;
    cg_ = cgroup::NewFsCgroups(layout_);
    for (auto [uid, q] :
         {std::pair{kTrainer, QosClass::kBurstable}, std::pair{kNeighbour, QosClass::kBestEffort},
          std::pair{kCalm, QosClass::kGuaranteed}}) {
      dirs_[uid] = layout_.cpu_mount + "/" + cgroup::PodRelPath(layout_.driver, "/", q, uid);
      ASSERT_TRUE(cgroup::MakeFakeCgroupDir(dirs_[uid], CgroupVersion::kV2, "cpu").ok());
      Set(uid, 0, 0);
    }
    fs::create_directories(dir_.path() + "/proc");
    Stat(0);
  }
  void Set(const std::string& uid, double usage_s, double psi_some_s) {
    cgroup::Put(dirs_[uid] + "/cpu.stat", "usage_usec " +
                                              std::to_string(static_cast<uint64_t>(usage_s * 1e6)) +
                                              "\nnr_periods 0\nnr_throttled 0\nthrottled_usec 0\n");
    cgroup::Put(dirs_[uid] + "/cpu.pressure",
                "some avg10=0.00 avg60=0.00 avg300=0.00 total=" +
                    std::to_string(static_cast<uint64_t>(psi_some_s * 1e6)) +
                    "\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n");
  }
  // CPUs 0-3 each `busy_s` seconds busy (user time, USER_HZ 100).
  void Stat(double busy_s) {
    std::string text = "cpu  0 0 0 0 0 0 0 0 0 0\n";
    for (int c = 0; c < 4; ++c) {
      text += "cpu" + std::to_string(c) + " " + std::to_string(static_cast<int>(busy_s * 100)) +
              " 0 0 100000 0 0 0 0 0 0\n";
    }
    cgroup::Put(dir_.path() + "/proc/stat", text);
  }
  // Every file under the cgroup tree with its bytes.
  std::map<std::string, std::string> Tree() {
    std::map<std::string, std::string> out;
    for (const auto& e : fs::recursive_directory_iterator(dir_.path() + "/cg")) {
      if (e.is_regular_file()) out[e.path().string()] = cgroup::Slurp(e.path().string());
    }
    return out;
  }
  NodeObserver Observer() {
    NodeObserverOptions o;
    o.proc_root = dir_.path() + "/proc";
    return NodeObserver(cg_.get(), layout_, o);
  }

  feedguard::testing::TempDir dir_;
  cgroup::CgroupLayout layout_;
  cgroup::CgroupsPtr cg_;
  std::map<std::string, std::string> dirs_;
};

TEST_F(NodeObserverTest, ListsEveryPodCgroupByUid) {
  auto pods = ListPodCgroups(layout_);
  ASSERT_EQ(pods.size(), 3u);
  EXPECT_EQ(pods.at(kTrainer).cpu, dirs_[kTrainer]);
  EXPECT_EQ(pods.at(kCalm).cpu, dirs_[kCalm]);
}

TEST_F(NodeObserverTest, NamesWhoRanWhileThePodWaitedAndWhatItCostTheGpu) {
  NodeObserver o = Observer();
  o.Observe({kTrainer, kCalm, "22222222-0000-4000-8000-00000000000f"});
  auto problems = o.Step(10, {});
  ASSERT_EQ(problems.size(), 1u) << "the pod with no cgroup here is said";
  EXPECT_NE(problems[0].find("no cgroup"), std::string::npos) << problems[0];
  EXPECT_TRUE(o.Summaries(std::chrono::seconds(60)).empty()) << "the first interval is a baseline";
  EXPECT_TRUE(o.last_samples().empty());

  // Over 10 s: the trainer used 4 s and waited 3 s; the neighbour took 6 s on the same CPUs;
  // the four CPUs were busy 12 s in all (so the node itself took 12 - 4 - 6 - 0 = 2 s).
  Set(kTrainer, 4, 3);
  Set(kNeighbour, 6, 0);
  Stat(3);
  const auto written = Tree();
  EXPECT_TRUE(o.Step(10, {{kTrainer, 0.5}}).size() == 1);  // still the missing pod
  EXPECT_EQ(Tree(), written) << "observing writes nothing";
  // The interval's own samples, as the step added them.
  ASSERT_EQ(o.last_samples().size(), 2u);
  EXPECT_DOUBLE_EQ(o.last_samples().at(kTrainer).wait_s, 3);
  EXPECT_EQ(o.last_samples().at(kTrainer).gpu_busy, 0.5);
  EXPECT_FALSE(o.last_samples().at(kCalm).gpu_busy);

  auto s = o.Summaries(std::chrono::seconds(60));
  ASSERT_TRUE(s.count(kTrainer));
  const Summary& t = s.at(kTrainer);
  EXPECT_DOUBLE_EQ(t.wait_s, 3);
  EXPECT_EQ(t.source, WaitSource::kPsi);
  ASSERT_TRUE(t.gpu_lost);
  EXPECT_DOUBLE_EQ(t.gpu_lost->estimate_s, 3 * 5 / 10.0);
  ASSERT_EQ(t.contenders.size(), 2u);
  EXPECT_EQ(t.contenders[0], (Contention{kNeighbour, 6}));
  EXPECT_EQ(t.contenders[1].contender, kNodeContender);
  EXPECT_NEAR(t.contenders[1].cpu_s, 2, 1e-6);
  // The calm pod did not wait: no contenders, no GPU figure (no reading given).
  const Summary& c = s.at(kCalm);
  EXPECT_DOUBLE_EQ(c.wait_s, 0);
  EXPECT_TRUE(c.contenders.empty());
  EXPECT_FALSE(c.gpu_lost);
}

// A pod with more runnable threads than CPUs waits behind itself: of its 8 s wait only what the
// others ran on its CPUs (and it left unused) counts as behind them.
TEST_F(NodeObserverTest, SplitsTheWaitBehindOthersFromTheWaitBehindItself) {
  NodeObserver o = Observer();
  o.Observe({kTrainer});
  o.Step(10, {});
  // Over 10 s on 4 CPUs (40 CPU-s): the trainer used 39, the neighbour 0.5, the node the rest.
  Set(kTrainer, 39, 8);
  Set(kNeighbour, 0.5, 0);
  Stat(10);
  o.Step(10, {{kTrainer, 0.0}});
  const PodSample& t = o.last_samples().at(kTrainer);
  EXPECT_DOUBLE_EQ(t.wait_s, 8);
  EXPECT_NEAR(t.behind_others_s, 1.0, 1e-6);
  EXPECT_NEAR(t.behind_pods_s, 0.5, 1e-6);
  const Summary s = o.Summaries(std::chrono::seconds(60)).at(kTrainer);
  EXPECT_NEAR(s.behind_others_s, 1.0, 1e-6);
  ASSERT_TRUE(s.gpu_lost);
  EXPECT_NEAR(s.gpu_lost->high_s, 1.0, 1e-6) << "an idle GPU lost at most the wait behind others";
  EXPECT_EQ(s.contenders.size(), 2u) << "1 s of 10 behind others: named";
}

TEST_F(NodeObserverTest, APodNoLongerObservedIsDropped) {
  NodeObserver o = Observer();
  o.Observe({kTrainer});
  o.Step(10, {});
  Set(kTrainer, 1, 0);
  o.Step(10, {});
  EXPECT_EQ(o.Summaries(std::chrono::seconds(60)).size(), 1u);
  EXPECT_EQ(o.last_samples().size(), 1u);
  o.Observe({});
  EXPECT_TRUE(o.Summaries(std::chrono::seconds(60)).empty());
  EXPECT_TRUE(o.last_samples().empty()) << "a dropped pod's last sample goes with it";
}

// A v1 node (no per-cgroup PSI; cgroupfs driver, containerd) seen by an agent in a PID namespace
// of its own: the pods' cgroup.procs give it none of their processes; the host's /proc (here a
// fixture, which is not this process's PID namespace's procfs: scanned) names each process's
// cgroup, and the pods' waits come out of it.
class NodeObserverHostProcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cgroup::FakeCgroupOptions no_psi;
    no_psi.psi = false;
    auto l = cgroup::MakeFakeLayout(dir_.path() + "/cg", CgroupVersion::kV1,
                                    KubeletDriver::kCgroupfs, "/", no_psi);
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    layout_ = *l;
    cg_ = cgroup::NewFsCgroups(layout_);
    for (auto [uid, q] :
         {std::pair{kTrainer, QosClass::kBurstable}, std::pair{kNeighbour, QosClass::kBestEffort},
          std::pair{kCalm, QosClass::kBurstable}}) {
      rel_[uid] = cgroup::PodRelPath(layout_.driver, "/", q, uid);
      for (const auto& [mount, controller] :
           {std::pair{layout_.cpu_mount, "cpu"}, std::pair{layout_.cpuacct_mount, "cpuacct"},
            std::pair{layout_.cpuset_mount, "cpuset"}}) {
        ASSERT_TRUE(cgroup::MakeFakeCgroupDir(mount + "/" + rel_[uid], CgroupVersion::kV1,
                                              controller, no_psi)
                        .ok());
      }
      Usage(uid, 0);
    }
    proc_ = dir_.path() + "/proc";
    fs::create_directories(proc_);
    cgroup::Put(proc_ + "/stat", "cpu  0 0 0 0 0 0 0 0 0 0\ncpu0 1 0 0 1 0 0 0 0 0 0\n");
    // The trainer: its sandbox, a two-thread process in c1, one in crun's child of c2. The
    // neighbour (not observed) waits a lot. The calm pod has no process in the host's /proc
    // (read as unseen). The host's init and a daemon.
    Process(100, "/" + rel_[kTrainer] + "/pause", {100});
    Process(101, "/" + rel_[kTrainer] + "/c1", {101, 111});
    Process(102, "/" + rel_[kTrainer] + "/c2/container", {102});
    Process(301, "/" + rel_[kNeighbour] + "/n1", {301});
    Process(1, "/", {1});
    Process(410, "/system.slice/containerd.service", {410});
  }
  void Usage(const std::string& uid, double s) {
    cgroup::Put(layout_.cpuacct_mount + "/" + rel_[uid] + "/cpuacct.usage",
                std::to_string(static_cast<uint64_t>(s * 1e9)) + "\n");
  }
  void Process(int pid, const std::string& cgroup, std::vector<int> tids) {
    const std::string d = proc_ + "/" + std::to_string(pid);
    fs::create_directories(d);
    cgroup::Put(d + "/cgroup", "5:cpuset:" + cgroup + "\n4:cpu,cpuacct:" + cgroup + "\n");
    for (int tid : tids) {
      fs::create_directories(d + "/task/" + std::to_string(tid));
      Delay(pid, tid, 0);
    }
  }
  void Delay(int pid, int tid, double s) {
    cgroup::Put(proc_ + "/" + std::to_string(pid) + "/task/" + std::to_string(tid) + "/schedstat",
                "1 " + std::to_string(static_cast<uint64_t>(s * 1e9)) + " 1\n");
  }
  static bool Says(const std::vector<std::string>& problems, const std::string& uid,
                   const std::string& what) {
    for (const auto& p : problems) {
      if (p.find(uid) != std::string::npos && p.find(what) != std::string::npos) return true;
    }
    return false;
  }

  feedguard::testing::TempDir dir_;
  cgroup::CgroupLayout layout_;
  cgroup::CgroupsPtr cg_;
  std::map<std::string, std::string> rel_;
  std::string proc_;
};

TEST_F(NodeObserverHostProcTest, WithoutPsiTheWaitIsTheHostsTasksRunDelay) {
  NodeObserverOptions o;
  o.proc_root = proc_;
  NodeObserver obs(cg_.get(), layout_, o);
  obs.Observe({kTrainer, kCalm});
  obs.Step(10, {});
  // 10 s on: the trainer's tasks waited 0.5 + 1 + 0.25 + 0.75 s, the neighbour's 9 s; the
  // trainer and the calm pod both used CPU.
  Delay(100, 100, 0.5);
  Delay(101, 101, 1);
  Delay(101, 111, 0.25);
  Delay(102, 102, 0.75);
  Delay(301, 301, 9);
  Usage(kTrainer, 4);
  Usage(kCalm, 2);
  auto problems = obs.Step(10, {});
  const PodSample& t = obs.last_samples().at(kTrainer);
  EXPECT_EQ(t.source, WaitSource::kSchedstat);
  EXPECT_NEAR(t.wait_s, 2.5, 1e-9) << "its four tasks, no one else's";
  // The calm pod ran, but none of its tasks is in the host's /proc: not measured, and said.
  const PodSample& c = obs.last_samples().at(kCalm);
  EXPECT_EQ(c.source, WaitSource::kUnknown);
  EXPECT_DOUBLE_EQ(c.wait_s, 0);
  EXPECT_TRUE(Says(problems, kCalm, "not measured")) << ::testing::PrintToString(problems);
  EXPECT_FALSE(Says(problems, kTrainer, "not measured"));
  EXPECT_EQ(obs.Summaries(std::chrono::seconds(60)).at(kCalm).source, WaitSource::kUnknown);

  // Said once: the next interval still unknown is not said again. A process gone since the last
  // scan (102) takes its wait with it; the others go on.
  fs::remove_all(proc_ + "/102");
  Delay(101, 101, 2);
  Usage(kTrainer, 8);
  Usage(kCalm, 3);
  problems = obs.Step(10, {});
  EXPECT_FALSE(Says(problems, kCalm, "not measured")) << ::testing::PrintToString(problems);
  EXPECT_NEAR(obs.last_samples().at(kTrainer).wait_s, 1, 1e-9);
  EXPECT_EQ(obs.last_samples().at(kCalm).source, WaitSource::kUnknown);
}

// The same node read the old way, from the pods' own cgroup.procs (which, from the agent's PID
// namespace, name none of the pods' processes): the waits are not measured, and say so, rather
// than reading 0 as if measured.
TEST_F(NodeObserverHostProcTest, FromCgroupProcsThatNameNoneTheWaitIsUnknownNotZero) {
  NodeObserverOptions o;
  o.proc_root = proc_;
  o.tasks = TaskLookup::kCgroupProcs;
  NodeObserver obs(cg_.get(), layout_, o);
  obs.Observe({kTrainer});
  obs.Step(10, {});
  Delay(101, 101, 3);
  Usage(kTrainer, 4);
  auto problems = obs.Step(10, {});
  EXPECT_EQ(obs.last_samples().at(kTrainer).source, WaitSource::kUnknown);
  EXPECT_TRUE(Says(problems, kTrainer, "--host-proc")) << ::testing::PrintToString(problems);
}

TEST_F(NodeObserverHostProcTest, AScanCutShortIsSaidOnce) {
  NodeObserverOptions o;
  o.proc_root = proc_;
  o.max_scanned_pids = 2;
  NodeObserver obs(cg_.get(), layout_, o);
  obs.Observe({kTrainer});
  auto first = obs.Step(10, {});
  EXPECT_TRUE(Says(first, "tasks", "only the first 2 processes"))
      << ::testing::PrintToString(first);
  EXPECT_FALSE(Says(obs.Step(10, {}), "tasks", "only the first")) << "said once";
}

}  // namespace
}  // namespace feedguard::agent::observe
