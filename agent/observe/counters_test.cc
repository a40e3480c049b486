#include "agent/observe/counters.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include <unistd.h>

namespace feedguard::agent::observe {
namespace {

TEST(ProcStatTest, BusyIsUserNiceSystemIrqSoftirqStealPerCpu) {
  const char* stat =
      "cpu  4267018 512022 644677 3124129 24852 0 18294 2281 1 0\n"
      "cpu0 200 10 30 1000 50 1 2 3 0 0\n"
      "cpu1 100 0 0 5000 0 0 0 0 7 7\n"
      "intr 123 4 5\n";
  auto busy = ParseProcStatBusy(stat, 100);
  ASSERT_TRUE(busy.ok()) << busy.status().ToString();
  ASSERT_EQ(busy->size(), 2u) << "the aggregate line is not a CPU";
  EXPECT_DOUBLE_EQ(busy->at(0), (200 + 10 + 30 + 1 + 2 + 3) / 100.0);  // not idle 1000, iowait 50
  EXPECT_DOUBLE_EQ(busy->at(1), 1.0);  // guest time is already in user
  EXPECT_FALSE(ParseProcStatBusy("cpu0 1 2\n", 100).ok());
  EXPECT_FALSE(ParseProcStatBusy("cpu0 a b c d e f g h\n", 100).ok());
  EXPECT_FALSE(ParseProcStatBusy("intr 1\n", 100).ok());
  EXPECT_FALSE(ParseProcStatBusy(stat, 0).ok());
}

TEST(ProcStatTest, ReadsThisMachine) {
  std::ifstream f("/proc/stat");
  std::stringstream b;
  b << f.rdbuf();
  auto busy = ParseProcStatBusy(b.str(), sysconf(_SC_CLK_TCK));
  ASSERT_TRUE(busy.ok()) << busy.status().ToString();
  EXPECT_EQ(busy->size(), static_cast<size_t>(sysconf(_SC_NPROCESSORS_CONF)));
}

TEST(ProcStatTest, BusyOnSumsTheCpusAsked) {
  std::map<int, double> t0{{0, 10}, {1, 20}, {2, 30}}, t1{{0, 12}, {1, 25}, {2, 31}};
  EXPECT_DOUBLE_EQ(BusyOn(t0, t1, CpuSet{0, 1}), 7);
  EXPECT_DOUBLE_EQ(BusyOn(t0, t1, CpuSet{2, 9}), 1) << "a CPU not in both readings counts 0";
}

TEST(SampleBetweenTest, PsiWhenBothReadingsHaveItElseRunDelayCapped) {
  PodCounters a{.cpu_s = 10, .throttled_s = 1, .psi_some_s = 100.0, .cpus = {}};
  PodCounters b{.cpu_s = 14, .throttled_s = 1.5, .psi_some_s = 103.0, .cpus = {}};
  PodSample s = SampleBetween(a, b, 10, 99);
  EXPECT_EQ(s.source, WaitSource::kPsi);
  EXPECT_DOUBLE_EQ(s.wait_s, 3);
  EXPECT_DOUBLE_EQ(s.cpu_s, 4);
  EXPECT_DOUBLE_EQ(s.throttled_s, 0.5);
  b.psi_some_s.reset();
  s = SampleBetween(a, b, 10, 12.5);
  EXPECT_EQ(s.source, WaitSource::kSchedstat);
  EXPECT_DOUBLE_EQ(s.wait_s, 10) << "summed run delay is capped at the interval";
  // A re-created cgroup's counters start again: the interval counts from zero, not negative.
  PodCounters fresh{.cpu_s = 2, .throttled_s = 0, .psi_some_s = std::nullopt, .cpus = {}};
  EXPECT_DOUBLE_EQ(SampleBetween(b, fresh, 10, 0).cpu_s, 2);
}

TEST(SampleBetweenTest, NoTaskSeenWhileThePodUsedCpuIsNoMeasurement) {
  PodCounters a{.cpu_s = 10, .throttled_s = 0, .psi_some_s = std::nullopt, .cpus = {}};
  PodCounters b{.cpu_s = 14, .throttled_s = 0, .psi_some_s = std::nullopt, .cpus = {}};
  PodSample s = SampleBetween(a, b, 10, std::nullopt);
  EXPECT_EQ(s.source, WaitSource::kUnknown) << "its tasks ran unseen: the wait is not known";
  EXPECT_DOUBLE_EQ(s.wait_s, 0);
  EXPECT_DOUBLE_EQ(s.cpu_s, 4);
  // Nothing seen and nothing ran: nothing waited either.
  s = SampleBetween(a, a, 10, std::nullopt);
  EXPECT_EQ(s.source, WaitSource::kSchedstat);
  EXPECT_DOUBLE_EQ(s.wait_s, 0);
  // PSI needs no task list.
  a.psi_some_s = 1.0;
  b.psi_some_s = 3.0;
  EXPECT_EQ(SampleBetween(a, b, 10, std::nullopt).source, WaitSource::kPsi);
}

}  // namespace
}  // namespace feedguard::agent::observe
