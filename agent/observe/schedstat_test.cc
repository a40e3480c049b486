#include "agent/observe/schedstat.h"

#include <gtest/gtest.h>

#include <unistd.h>

namespace feedguard::agent::observe {
namespace {

TEST(SchedstatTest, ParsesTheThreeFieldsAndRefusesOthers) {
  auto s = ParseSchedstat("192706 74662 1\n");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->run_ns, 192706u);
  EXPECT_EQ(s->run_delay_ns, 74662u);
  EXPECT_EQ(s->timeslices, 1u);
  for (const char* bad : {"", "1 2", "a b c", "-1 2 3", "1 2 x"}) {
    EXPECT_FALSE(ParseSchedstat(bad).ok()) << bad;
  }
}

TEST(RunDelayTrackerTest, CountsWhatEachTaskAddedAndNewTasksWhole) {
  RunDelayTracker t;
  EXPECT_DOUBLE_EQ(t.Sample({{10, 5'000'000'000}, {11, 1'000'000'000}}), 0) << "first: a baseline";
  // 10 added 0.5 s, 11 exited (its last interval is lost), 12 is new with 0.25 s.
  EXPECT_DOUBLE_EQ(t.Sample({{10, 5'500'000'000}, {12, 250'000'000}}), 0.75);
  // A counter that went back (a reused tid) counts from zero.
  EXPECT_DOUBLE_EQ(t.Sample({{10, 100'000'000}, {12, 250'000'000}}), 0.1);
}

TEST(RunDelayTrackerTest, ReadsThisProcessesTasks) {
  auto delays = ReadRunDelays("/proc", {getpid()});
  EXPECT_TRUE(delays.count(getpid())) << "the main thread's tid is the pid";
  EXPECT_TRUE(ReadRunDelays("/proc", {-5}).empty());
}

}  // namespace
}  // namespace feedguard::agent::observe
