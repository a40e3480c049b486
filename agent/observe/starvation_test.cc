#include "agent/observe/starvation.h"

#include <gtest/gtest.h>

namespace feedguard::agent::observe {
namespace {

using std::chrono::seconds;

PodSample Sample(double wait_s, std::optional<double> busy, double dt = 10) {
  PodSample s;
  s.dt_s = dt;
  s.wait_s = wait_s;
  s.behind_others_s = wait_s;  // all of it behind others unless a test splits it
  s.behind_pods_s = wait_s;
  s.gpu_busy = busy;
  return s;
}

TEST(GpuLostTest, BoundsAndEstimateOfTheOverlapOfWaitAndIdle) {
  // Waited 4 s of 10, GPU idle 5 s of 10: the overlap is 0..4 s, 2 s if independent.
  auto l = GpuLostIn(Sample(4, 0.5));
  ASSERT_TRUE(l);
  EXPECT_DOUBLE_EQ(l->low_s, 0);
  EXPECT_DOUBLE_EQ(l->high_s, 4);
  EXPECT_DOUBLE_EQ(l->estimate_s, 2);
  // Waited 8 s and idle 6 s of 10: at least 4 s of them coincide.
  l = GpuLostIn(Sample(8, 0.4));
  EXPECT_DOUBLE_EQ(l->low_s, 4);
  EXPECT_DOUBLE_EQ(l->high_s, 6);
  EXPECT_NEAR(l->estimate_s, 4.8, 1e-9);
  // A busy GPU loses nothing whatever the wait; no wait loses nothing whatever the idle.
  EXPECT_DOUBLE_EQ(GpuLostIn(Sample(9, 1.0))->high_s, 0);
  EXPECT_DOUBLE_EQ(GpuLostIn(Sample(0, 0.0))->high_s, 0);
  // Readings out of range are clamped, not trusted.
  l = GpuLostIn(Sample(25, -3));
  EXPECT_DOUBLE_EQ(l->high_s, 10);
  EXPECT_DOUBLE_EQ(l->low_s, 10);
  // Without a GPU reading there is no GPU figure.
  EXPECT_FALSE(GpuLostIn(Sample(4, std::nullopt)));
}

TEST(ContendersTest, SharesByCpuOverlapAndTheNodeAsTheRest) {
  const CpuSet mine = CpuSet::Range(0, 3);  // 4 CPUs
  std::vector<CgroupUsage> others = {
      {"pod-a", 8.0, CpuSet::Range(0, 7)},     // half its CPUs are mine: 4 s
      {"pod-b", 2.0, CpuSet::Range(2, 3)},     // all mine: 2 s
      {"pod-c", 5.0, CpuSet::Range(4, 7)},     // none mine
      {"pod-d", 0.0005, CpuSet::Range(0, 3)},  // under 1 ms: dropped
  };
  // My CPUs were busy 15 s in the interval; I used 6 s; pods 6 s: the node took 3 s.
  auto on = ContendersOn(mine, 6.0, others, 15.0, 8);
  const auto& c = on.top;
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0], (Contention{"pod-a", 4.0}));
  EXPECT_EQ(c[1].contender, kNodeContender);
  EXPECT_NEAR(c[1].cpu_s, 3.0 - 0.0005, 1e-9);  // pod-d ran, though too little to be named
  EXPECT_EQ(c[2], (Contention{"pod-b", 2.0}));
  // The totals keep what the top drops.
  EXPECT_NEAR(on.total.pods_s, 6.0005, 1e-9);
  ASSERT_TRUE(on.total.node_s);
  EXPECT_NEAR(*on.total.node_s, 3.0 - 0.0005, 1e-9);
  EXPECT_EQ(ContendersOn(mine, 6.0, others, 15.0, 1).top.size(), 1u) << "top k";
  EXPECT_NEAR(ContendersOn(mine, 6.0, others, 15.0, 1).total.pods_s, 6.0005, 1e-9);
  // Nothing else ran: no contenders (the node's rest is not negative).
  auto none = ContendersOn(mine, 6.0, {}, 5.0, 8);
  EXPECT_TRUE(none.top.empty());
  EXPECT_EQ(none.total.node_s, 0.0);
  // Without /proc/stat: the pods only, and no figure for the node.
  auto blind = ContendersOn(mine, 6.0, others, std::nullopt, 8);
  EXPECT_FALSE(blind.total.node_s);
  EXPECT_EQ(blind.top.size(), 2u);
  EXPECT_EQ(blind.top[0], (Contention{"pod-a", 4.0}));
}

TEST(ContendersTest, AnIdlePodTookNothingNeitherAsAPodNorAsTheNode) {
  // The demo fenced on 2 CPUs over 10 s: the trainer used 17.5 CPU-s, the node's daemons 1,
  // eight idle neighbours soaked up the 1.3 CPU-s left (cpu.idle = 1), one neighbour was not
  // fenced yet (0.2).
  const CpuSet mine = CpuSet::Range(0, 1);
  std::vector<CgroupUsage> others = {{"pod-plain", 0.2, CpuSet::Range(0, 1)}};
  for (int i = 0; i < 8; ++i) {
    others.push_back({"pod-idle-" + std::to_string(i), 1.3 / 8, CpuSet::Range(0, 1), true});
  }
  auto on = ContendersOn(mine, 17.5, others, 20.0, 8);
  EXPECT_NEAR(on.total.pods_s, 0.2, 1e-9);
  EXPECT_NEAR(on.total.idle_pods_s, 1.3, 1e-9);
  ASSERT_TRUE(on.total.node_s);
  EXPECT_NEAR(*on.total.node_s, 1.0, 1e-9) << "the idle pods' time is not the node's either";
  ASSERT_EQ(on.top.size(), 2u) << "no idle pod named";
  EXPECT_EQ(on.top[0].contender, kNodeContender);
  EXPECT_EQ(on.top[1], (Contention{"pod-plain", 0.2}));
  // It waited 6 s, mostly behind its own threads: of the 2.5 CPU-s it left unused only the
  // node's and the plain pod's could have held it up.
  PodSample s;
  s.dt_s = 10;
  s.wait_s = 6;
  s.cpu_s = 17.5;
  SplitWait(s, 2, on.total);
  EXPECT_NEAR(s.behind_others_s, 1.2, 1e-9);
  EXPECT_NEAR(s.behind_pods_s, 0.2, 1e-9);
}

PodSample Used(double wait_s, double cpu_s, double dt = 10) {
  PodSample s;
  s.dt_s = dt;
  s.wait_s = wait_s;
  s.cpu_s = cpu_s;
  return s;
}

TEST(SplitWaitTest, BehindOthersIsBoundedByWhatOthersRanAndWhatThePodLeftUnused) {
  // The demo's shapes on 2 CPUs over 10 s. Among neighbours under plain CFS: it used 10 CPU-s,
  // waited 8 s; the pods ran 9 CPU-s on its CPUs, the node 1: all 8 s could be theirs.
  PodSample cfs = Used(8, 10);
  SplitWait(cfs, 2, {9, 1.0});
  EXPECT_DOUBLE_EQ(cfs.behind_others_s, 8);
  EXPECT_DOUBLE_EQ(cfs.behind_pods_s, 8);
  // Fenced: it used 18.4 of its 20 CPU-s and still waited 8 s (4 threads on 2 CPUs); the pods
  // ran 0.4, the node 1.5. At most the 1.6 CPU-s it left unused were others' while it waited;
  // of that at most the pods' 0.4. The other 6.4 s it waited behind its own threads.
  PodSample fenced = Used(8, 18.4);
  SplitWait(fenced, 2, {0.4, 1.5});
  EXPECT_NEAR(fenced.behind_others_s, 1.6, 1e-9);
  EXPECT_NEAR(fenced.behind_pods_s, 0.4, 1e-9);
  // Alone on the node: only the node's 0.2 CPU-s could have held it up.
  PodSample alone = Used(5, 15);
  SplitWait(alone, 2, {0, 0.2});
  EXPECT_NEAR(alone.behind_others_s, 0.2, 1e-9);
  EXPECT_DOUBLE_EQ(alone.behind_pods_s, 0);
  // Others ran much, it waited little: never more than the wait.
  PodSample brief = Used(0.5, 2);
  SplitWait(brief, 2, {12, 3});
  EXPECT_DOUBLE_EQ(brief.behind_others_s, 0.5);
  EXPECT_DOUBLE_EQ(brief.behind_pods_s, 0.5);
}

TEST(SplitWaitTest, WithoutTheNodeOrTheCpusTheBoundsThatAreLeftHold) {
  // No /proc/stat: others are not bounded by the node's figure, only by what it left unused.
  PodSample s = Used(8, 14);
  SplitWait(s, 2, {1.0, std::nullopt});
  EXPECT_DOUBLE_EQ(s.behind_others_s, 6);
  EXPECT_DOUBLE_EQ(s.behind_pods_s, 1);
  // No CPU count (its cpuset not read): not bounded by it.
  PodSample t = Used(8, 14);
  SplitWait(t, 0, {1.0, 9.0});
  EXPECT_DOUBLE_EQ(t.behind_others_s, 8);
  // Hostile readings: negative figures bound nothing below 0, the wait stays the ceiling.
  PodSample h = Used(30, -5);
  SplitWait(h, 2, {-3, -1});
  EXPECT_DOUBLE_EQ(h.behind_others_s, 0);
  EXPECT_DOUBLE_EQ(h.behind_pods_s, 0);
  PodSample over = Used(30, 0);
  SplitWait(over, 64, {100, 100});
  EXPECT_DOUBLE_EQ(over.behind_others_s, 10) << "a wait over the interval is capped at it";
}

TEST(SplitWaitTest, GpuLossAndNamedContendersFollowTheWaitBehindOthers) {
  // Waited 8 s of 10, 2 s of it behind others; the GPU idle 5 s: at most 2 s lost.
  PodSample s = Used(8, 18);
  s.gpu_busy = 0.5;
  SplitWait(s, 2, {2, 0.5});
  ASSERT_TRUE(GpuLostIn(s));
  EXPECT_DOUBLE_EQ(GpuLostIn(s)->high_s, 2);
  EXPECT_DOUBLE_EQ(GpuLostIn(s)->estimate_s, 1);
  EXPECT_TRUE(WaitedIn(s));
  // All of its wait behind its own threads (it used every CPU-second it had): no contenders.
  PodSample own = Used(8, 20);
  SplitWait(own, 2, {0.5, 0.5});
  EXPECT_DOUBLE_EQ(own.behind_others_s, 0);
  EXPECT_FALSE(WaitedIn(own)) << "a pod waiting only behind itself names no contender";
  PodWindows w(seconds(10), seconds(600), 3);
  own.contenders = {{"pod-x", 0.5}};
  w.Add(own);
  w.Add(s);
  auto sum = w.Over(seconds(600));
  EXPECT_DOUBLE_EQ(sum.wait_s, 16);
  EXPECT_DOUBLE_EQ(sum.behind_others_s, 2);
  EXPECT_DOUBLE_EQ(sum.behind_pods_s, 2);
  EXPECT_TRUE(sum.contenders.empty());
}

TEST(PodWindowsTest, WindowsSumTheNewestSamplesOnly) {
  PodWindows w(seconds(10), seconds(3600), 3);
  for (int i = 0; i < 400; ++i) w.Add(Sample(i < 394 ? 0 : 5, 0.5));  // the last minute waited
  EXPECT_EQ(w.samples(), 360u) << "an hour of 10 s samples, no more";
  auto minute = w.Over(seconds(60));
  EXPECT_DOUBLE_EQ(minute.window_s, 60);
  EXPECT_DOUBLE_EQ(minute.wait_s, 30);
  EXPECT_DOUBLE_EQ(minute.wait_fraction, 0.5);
  ASSERT_TRUE(minute.gpu_lost);
  EXPECT_DOUBLE_EQ(minute.gpu_lost->estimate_s, 6 * 2.5);
  EXPECT_DOUBLE_EQ(*minute.gpu_busy, 0.5);
  auto hour = w.Over(seconds(3600));
  EXPECT_DOUBLE_EQ(hour.window_s, 3600);
  EXPECT_DOUBLE_EQ(hour.wait_s, 30);
  EXPECT_NEAR(hour.wait_fraction, 30.0 / 3600, 1e-12);
  // Asking for more than is kept covers what is kept, and says so.
  EXPECT_DOUBLE_EQ(w.Over(seconds(7200)).window_s, 3600);
}

TEST(PodWindowsTest, ContendersOnlyFromIntervalsItWaitedSummedAndRanked) {
  PodWindows w(seconds(10), seconds(600), 2);
  PodSample calm = Sample(0.05, std::nullopt);  // 0.5 % of the interval: not waiting
  calm.contenders = {{"pod-x", 9.0}};
  w.Add(calm);
  PodSample a = Sample(3, std::nullopt);
  a.contenders = {{"pod-y", 2.0}, {"pod-z", 1.0}, {"node", 0.5}};
  w.Add(a);
  PodSample b = Sample(4, std::nullopt);
  b.contenders = {{"pod-z", 2.5}};
  w.Add(b);
  auto s = w.Over(seconds(600));
  EXPECT_EQ(s.contenders, (std::vector<Contention>{{"pod-z", 3.5}, {"pod-y", 2.0}}));
  EXPECT_FALSE(s.gpu_lost) << "no GPU reading, no GPU figure";
  EXPECT_EQ(s.source, WaitSource::kPsi);
  EXPECT_TRUE(PodWindows(seconds(10), seconds(60), 3).Over(seconds(60)).contenders.empty());
}

TEST(PodWindowsTest, AWindowWithAnIntervalNotMeasuredIsNotMeasured) {
  PodWindows w(seconds(10), seconds(600), 2);
  PodSample unseen = Sample(0, 0.2);
  unseen.source = WaitSource::kUnknown;
  EXPECT_FALSE(GpuLostIn(unseen)) << "an unknown wait gives no GPU time lost";
  w.Add(Sample(3, 0.5));
  w.Add(unseen);
  w.Add(Sample(2, 0.5));  // the newest measured again
  auto s = w.Over(seconds(600));
  EXPECT_EQ(s.source, WaitSource::kUnknown) << "any interval not measured: the window is not";
  EXPECT_DOUBLE_EQ(s.wait_s, 5) << "the measured intervals' wait";
  ASSERT_TRUE(s.gpu_lost);
  EXPECT_DOUBLE_EQ(s.gpu_lost->estimate_s, 1.5 + 1.0) << "from the measured intervals only";
  EXPECT_DOUBLE_EQ(*s.gpu_busy, 0.5);
  EXPECT_EQ(w.Over(seconds(10)).source, WaitSource::kPsi) << "the newest interval alone";
}

}  // namespace
}  // namespace feedguard::agent::observe
