#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "controller/observe/starvation_book.h"
#include "controller/observe/starvation_report.h"
#include "feedguard/common/wire_limits.h"

namespace feedguard::controller {
namespace {

using feedguard::v1::NodeReport;
using feedguard::v1::ObservationWindow;

// One observed pod's three windows; the 10 min one waited `wait_10m` of 600 s and lost
// `lost_10m` of GPU time (lost < 0: no GPU reading).
void AddPod(NodeReport* r, const std::string& uid, double wait_10m, double lost_10m,
            std::vector<std::pair<std::string, double>> contenders = {}) {
  auto* o = r->add_observations();
  o->set_uid(uid);
  for (uint32_t s : {60u, 600u, 3600u}) {
    auto* w = o->add_windows();
    w->set_window_seconds(s);
    w->set_covered_seconds(s);
    const double scale = s / 600.0;
    w->set_wait_seconds(wait_10m * scale);
    w->set_wait_source(ObservationWindow::PSI);
    w->set_cpu_seconds(s * 0.5);
    if (lost_10m >= 0) {
      w->set_gpu_sampled(true);
      w->set_gpu_busy_fraction(0.6);
      w->set_gpu_lost_seconds(lost_10m * scale);
      w->set_gpu_lost_min_seconds(lost_10m * scale / 2);
      w->set_gpu_lost_max_seconds(lost_10m * scale * 1.5);
    }
    for (const auto& [c, cpu] : contenders) {
      auto* k = w->add_contenders();
      k->set_pod_uid(c);
      k->set_cpu_seconds(cpu * scale);
    }
  }
}

// Names what it is asked for of `by_node`, and records what it was asked for.
PodNamer Names(std::map<std::string, std::map<std::string, PodName>> by_node,
               std::map<std::string, std::set<std::string>>* asked = nullptr) {
  return [by_node, asked](const std::string& node, const std::set<std::string>& uids) {
    if (asked) (*asked)[node] = uids;
    std::map<std::string, PodName> out;
    auto it = by_node.find(node);
    if (it == by_node.end()) return out;
    for (const auto& [uid, name] : it->second) {
      if (uids.count(uid)) out[uid] = name;
    }
    return out;
  };
}

class StarvationReportTest : public ::testing::Test {
 protected:
  std::shared_ptr<ManualTimeSource> clock_ = std::make_shared<ManualTimeSource>();
  StarvationBook book_{clock_};
};

TEST_F(StarvationReportTest, WorstFirstWithNamedContendersAndTotals) {
  NodeReport a, b;
  AddPod(&a, "t1", 120, 60, {{"n1", 90}, {"", 10}});  // 20 % wait, 60 s lost
  AddPod(&a, "t2", 1, 0.5);                           // 0.17 %: not starving
  AddPod(&b, "t3", 300, 200, {{"n2", 250}});          // the worst
  AddPod(&b, "t4", 100, -1);  // no NVML: ranked by its wait, which bounds its loss
  book_.OnReport("node-a", a);
  book_.OnReport("node-b", b);
  std::map<std::string, std::set<std::string>> asked;
  auto names = Names({{"node-a",
                       {{"t1", {"ml", "trainer-1", 4000}},
                        {"t2", {"ml", "trainer-2", 4000}},
                        {"n1", {"batch", "etl-7", 500}},
                        {"idle-1", {"batch", "idle-1", 100}}}},
                      {"node-b",
                       {{"t3", {"ml", "trainer-3", 8000}},
                        {"t4", {"research", "nb-1", 1000}},
                        {"n2", {"batch", "etl-9", 500}}}}},
                     &asked);
  auto s = RenderStarvationStatus(book_.Snapshot(), names, 3);
  // Only the observed pods and the starving ones' contenders are looked up, not every pod.
  EXPECT_EQ(asked["node-a"], (std::set<std::string>{"n1", "t1", "t2"}));
  EXPECT_EQ(asked["node-b"], (std::set<std::string>{"n2", "t3", "t4"}));

  ASSERT_EQ(s["pods"].size(), 3u) << s.dump(2);  // t2 did not starve
  EXPECT_EQ(s["pods"][0]["name"], "trainer-3");
  EXPECT_EQ(s["pods"][1]["name"], "nb-1");  // no GPU figure: its 100 s wait outranks a 60 s loss
  EXPECT_EQ(s["pods"][2]["name"], "trainer-1");
  const auto& w10 = s["pods"][2]["windows"][1];
  EXPECT_EQ(w10["seconds"], 600);
  EXPECT_DOUBLE_EQ(w10["waitFraction"].get<double>(), 0.2);
  EXPECT_EQ(w10["waitSource"], "psi");
  EXPECT_DOUBLE_EQ(w10["gpuLostSeconds"].get<double>(), 60);
  EXPECT_DOUBLE_EQ(w10["gpuLostMinSeconds"].get<double>(), 30);
  EXPECT_DOUBLE_EQ(w10["gpuLostMaxSeconds"].get<double>(), 90);
  ASSERT_EQ(w10["contenders"].size(), 2u);
  EXPECT_EQ(w10["contenders"][0]["kind"], "Pod");
  EXPECT_EQ(w10["contenders"][0]["namespace"], "batch");
  EXPECT_EQ(w10["contenders"][0]["name"], "etl-7");
  EXPECT_EQ(w10["contenders"][1]["kind"], "Node");
  EXPECT_FALSE(w10["contenders"][1].contains("uid"));
  EXPECT_FALSE(s["pods"][1]["windows"][1]["gpuSampled"].get<bool>());
  EXPECT_FALSE(s["pods"][1]["windows"][1].contains("gpuLostSeconds"));

  const auto& c = s["cluster"];
  EXPECT_EQ(c["nodesReporting"], 2);
  EXPECT_EQ(c["gpuPods"], 4);
  EXPECT_EQ(c["starvingPods"], 3);
  EXPECT_EQ(c["gpuPodsNotObserved"], 3);
  EXPECT_DOUBLE_EQ(c["gpuLostSeconds10m"].get<double>(), 260.5);
  EXPECT_DOUBLE_EQ(c["gpuLostSeconds1h"].get<double>(), 1563);
  EXPECT_EQ(s["nodes"][0]["name"], "node-b");
  EXPECT_EQ(s["namespaces"][0]["name"], "ml");
  EXPECT_EQ(s["namespaces"][0]["gpuPods"], 3);
  EXPECT_EQ(s["namespaces"][1]["name"], "research");
}

TEST_F(StarvationReportTest, BoundedAndRenderedTheSameTwice) {
  NodeReport r;
  for (int i = 0; i < 80; ++i) AddPod(&r, "p" + std::to_string(i), 10 + i, i);
  book_.OnReport("n", r);
  StarvationReportLimits limits;
  limits.pods = 5;
  auto s = RenderStarvationStatus(book_.Snapshot(), nullptr, 0, limits);
  EXPECT_EQ(s["cluster"]["gpuPods"], static_cast<int>(kMaxObservedPodsPerNode));
  ASSERT_EQ(s["pods"].size(), 5u);
  EXPECT_EQ(s["pods"][0]["uid"], "p63");  // the worst of those the wire bound kept
  EXPECT_FALSE(s["pods"][0].contains("name")) << "no pod cache: uid only";
  EXPECT_EQ(s, RenderStarvationStatus(book_.Snapshot(), nullptr, 0, limits));
}

TEST_F(StarvationReportTest, HostileFiguresAreCleanedAndDuplicateWindowsIgnored) {
  NodeReport r;
  auto* o = r.add_observations();
  o->set_uid("x");
  for (int rep = 0; rep < 2; ++rep) {
    auto* w = o->add_windows();
    w->set_window_seconds(600);
    w->set_covered_seconds(600);
    w->set_wait_seconds(rep == 0 ? 1e12 : 1);  // more than it sampled
    w->set_wait_source(ObservationWindow::SCHEDSTAT);
    w->set_gpu_sampled(true);
    w->set_gpu_busy_fraction(std::numeric_limits<double>::quiet_NaN());
    w->set_gpu_lost_seconds(-5);
    w->set_gpu_lost_max_seconds(std::numeric_limits<double>::infinity());
    w->add_contenders()->set_pod_uid("bad\xff\xfe-uid");  // not UTF-8: dropped, not dumped
    w->add_contenders()->set_pod_uid("../etc");
    for (int i = 0; i < 40; ++i) w->add_contenders()->set_pod_uid("c" + std::to_string(i));
    w->add_contenders()->set_pod_uid(std::string(500, 'u'));
  }
  auto* odd = o->add_windows();
  odd->set_window_seconds(7);  // not a window the report shows
  odd->set_covered_seconds(7);
  r.add_observations()->set_uid("");                   // no uid: dropped
  r.add_observations()->set_uid("\xc3\x28-not-utf8");  // not a uid: dropped
  book_.OnReport("n", r);
  auto s = RenderStarvationStatus(book_.Snapshot(), nullptr, 0);
  ASSERT_EQ(s["cluster"]["gpuPods"], 1) << s.dump(2);
  ASSERT_EQ(s["pods"].size(), 1u);
  ASSERT_EQ(s["pods"][0]["windows"].size(), 1u);
  const auto& w = s["pods"][0]["windows"][0];
  EXPECT_DOUBLE_EQ(w["waitSeconds"].get<double>(), 600);
  EXPECT_DOUBLE_EQ(w["gpuBusyFraction"].get<double>(), 0);
  EXPECT_DOUBLE_EQ(w["gpuLostSeconds"].get<double>(), 0);
  EXPECT_LE(w["gpuLostMaxSeconds"].get<double>(), 600);
  EXPECT_EQ(w["contenders"].size(), kMaxObservedContenders);
  EXPECT_EQ(w["contenders"][0]["uid"], "c0");
  EXPECT_NO_THROW(s.dump());
}

// An agent that could not measure a pod's wait (no PSI, its tasks not seen) sends
// WAIT_SOURCE_UNSPECIFIED: such a window is "unknown" and never makes the pod starving, whatever
// wait it carries (what it sums is the measured part only).
TEST_F(StarvationReportTest, AWaitNotMeasuredIsUnknownAndNoStarvation) {
  NodeReport r;
  AddPod(&r, "blind", 0, -1);
  AddPod(&r, "partly", 300, -1);  // waited half of each window, but not all of it measured
  AddPod(&r, "recent", 120, -1);  // its newest minute not measured, the 10 min window measured
  for (int i = 0; i < 2; ++i) {
    for (auto& w : *r.mutable_observations(i)->mutable_windows()) {
      w.set_wait_source(ObservationWindow::WAIT_SOURCE_UNSPECIFIED);
    }
  }
  r.mutable_observations(2)->mutable_windows(0)->set_wait_source(
      ObservationWindow::WAIT_SOURCE_UNSPECIFIED);
  book_.OnReport("n", r);
  auto snap = book_.Snapshot();
  ASSERT_EQ(snap.at("n").pods.size(), 3u);
  EXPECT_FALSE(snap.at("n").pods[0].starving);
  EXPECT_FALSE(snap.at("n").pods[1].starving) << "an unmeasured window is no starvation";
  EXPECT_TRUE(snap.at("n").pods[2].starving);
  auto s = RenderStarvationStatus(snap, nullptr, 0);
  EXPECT_EQ(s["cluster"]["gpuPods"], 3);
  EXPECT_EQ(s["cluster"]["starvingPods"], 1);
  ASSERT_EQ(s["pods"].size(), 1u) << s.dump(2);
  EXPECT_EQ(s["pods"][0]["uid"], "recent");
  const auto& windows = s["pods"][0]["windows"];
  ASSERT_EQ(windows.size(), 3u);
  EXPECT_EQ(windows[0]["seconds"], 60);
  EXPECT_EQ(windows[0]["waitSource"], "unknown");
  EXPECT_EQ(windows[1]["waitSource"], "psi");
  // A source the wire does not know (a newer agent's) is no measurement either.
  NodeReport odd;
  AddPod(&odd, "future", 300, -1);
  for (auto& w : *odd.mutable_observations(0)->mutable_windows()) {
    w.set_wait_source(static_cast<ObservationWindow::WaitSource>(7));
  }
  book_.OnReport("m", odd);
  EXPECT_FALSE(book_.Snapshot().at("m").pods[0].starving);
}

// The agent splits the wait: only the part behind other workloads makes a pod starving, ranks it
// and bounds its GPU time lost; an agent that sends no split (older) has all of it count.
TEST_F(StarvationReportTest, OnlyTheWaitBehindOthersStarves) {
  NodeReport r;
  AddPod(&r, "own", 300, 100);      // half its time waiting, almost all behind its own threads
  AddPod(&r, "crowded", 120, 50);   // 20 %, all of it behind the neighbours
  AddPod(&r, "old-agent", 60, -1);  // 10 %, no split sent
  for (auto& w : *r.mutable_observations(0)->mutable_windows()) {
    w.set_wait_behind_others_seconds(w.wait_seconds() / 100);  // 0.5 %
    w.set_wait_behind_pods_seconds(w.wait_seconds() / 200);
  }
  for (auto& w : *r.mutable_observations(1)->mutable_windows()) {
    w.set_wait_behind_others_seconds(w.wait_seconds());
    w.set_wait_behind_pods_seconds(w.wait_seconds() * 0.75);
  }
  book_.OnReport("n", r);
  const auto snap = book_.Snapshot();
  const auto& pods = snap.at("n").pods;
  ASSERT_EQ(pods.size(), 3u);
  EXPECT_FALSE(pods[0].starving) << "waiting behind itself is not starving";
  EXPECT_FLOAT_EQ(pods[0].wait_10m_s, 300);
  EXPECT_FLOAT_EQ(pods[0].behind_others_10m_s, 3);
  EXPECT_FLOAT_EQ(pods[0].lost_10m_s, 3) << "GPU time lost held to the wait behind others";
  EXPECT_TRUE(pods[1].starving);
  EXPECT_TRUE(pods[2].starving);
  EXPECT_FLOAT_EQ(pods[2].behind_others_10m_s, 60) << "no split: all of the wait";
  auto s = RenderStarvationStatus(snap, nullptr, 0);
  EXPECT_EQ(s["cluster"]["starvingPods"], 2);
  EXPECT_DOUBLE_EQ(s["cluster"]["waitSeconds10m"].get<double>(), 480);
  EXPECT_DOUBLE_EQ(s["cluster"]["waitBehindOthersSeconds10m"].get<double>(), 183);
  ASSERT_EQ(s["pods"].size(), 2u) << s.dump(2);
  // crowded lost 50 s of GPU time; old-agent has no GPU figure and ranks by its 60 s wait.
  EXPECT_EQ(s["pods"][0]["uid"], "old-agent");
  EXPECT_EQ(s["pods"][1]["uid"], "crowded");
  const auto& w10 = s["pods"][1]["windows"][1];
  EXPECT_DOUBLE_EQ(w10["waitBehindOthersSeconds"].get<double>(), 120);
  EXPECT_DOUBLE_EQ(w10["waitBehindPodsSeconds"].get<double>(), 90);
  // A split over the wait (hostile) is held to it, and the pods' part to the others'.
  NodeReport h;
  AddPod(&h, "liar", 60, -1);
  for (auto& w : *h.mutable_observations(0)->mutable_windows()) {
    w.set_wait_behind_others_seconds(1e9);
    w.set_wait_behind_pods_seconds(2e9);
  }
  book_.OnReport("h", h);
  const auto hostile = book_.Snapshot();
  const auto& liar = hostile.at("h").pods[0];
  EXPECT_FLOAT_EQ(liar.behind_others_10m_s, 60);
  ASSERT_FALSE(liar.windows.empty());
  EXPECT_FLOAT_EQ(liar.windows[1].behind_pods_s, 60);
}

TEST_F(StarvationReportTest, NodesAgeOutAndAnEmptyReportClearsTheNode) {
  NodeReport r;
  AddPod(&r, "t", 100, 50);
  book_.OnReport("old", r);
  clock_->Advance(std::chrono::minutes(11));
  book_.OnReport("fresh", r);
  auto snap = book_.Snapshot();
  EXPECT_EQ(snap.size(), 1u);
  EXPECT_TRUE(snap.count("fresh"));
  book_.OnReport("fresh", NodeReport{});
  EXPECT_TRUE(book_.Snapshot().empty());
  book_.OnReport("gone", r);
  book_.ForgetNode("gone");
  EXPECT_EQ(book_.nodes(), 0u);
}

}  // namespace
}  // namespace feedguard::controller
