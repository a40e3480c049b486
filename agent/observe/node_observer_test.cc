#include "agent/observe/node_observer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>

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

}  // namespace
}  // namespace feedguard::agent::observe
