#include "agent/client/backoff.h"

#include <set>
#include <thread>

#include <gtest/gtest.h>

namespace feedguard::agent {
namespace {

using std::chrono::milliseconds;

TEST(BackoffTest, GrowsByMultiplierWithinJitterUpToMax) {
  Backoff b(BackoffPolicy{milliseconds(500), 2.0, milliseconds(30'000), 0.2}, 42);
  double base = 500;
  for (int i = 0; i < 12; ++i) {
    const auto d = b.Next().count();
    EXPECT_GE(d, static_cast<int64_t>(base * 0.8) - 1) << "attempt " << i;
    EXPECT_LE(d, static_cast<int64_t>(base * 1.2) + 1) << "attempt " << i;
    base = std::min(base * 2, 30'000.0);
  }
  EXPECT_EQ(b.failures(), 12);
  // After 12 doublings the base sits at the cap: 30 s ± 20 %.
  const auto d = b.Next().count();
  EXPECT_GE(d, 24'000);
  EXPECT_LE(d, 36'000);
}

TEST(BackoffTest, ResetStartsOver) {
  Backoff b(BackoffPolicy{milliseconds(100), 2.0, milliseconds(10'000), 0.0}, 1);
  EXPECT_EQ(b.Next(), milliseconds(100));
  EXPECT_EQ(b.Next(), milliseconds(200));
  EXPECT_EQ(b.Next(), milliseconds(400));
  b.Reset();
  EXPECT_EQ(b.failures(), 0);
  EXPECT_EQ(b.Next(), milliseconds(100));
}

TEST(BackoffTest, JitterSpreadsAFleet) {
  // 50 agents that lost the controller together must not all retry at the same instant.
  std::set<int64_t> first_delays;
  for (uint64_t seed = 1; seed <= 50; ++seed) {
    Backoff b(BackoffPolicy{}, seed);
    first_delays.insert(b.Next().count());
  }
  EXPECT_GT(first_delays.size(), 25u);
  EXPECT_GE(*first_delays.begin(), 400);
  EXPECT_LE(*first_delays.rbegin(), 600);
}

TEST(RealSleeperTest, InterruptEndsSleepAndLaterSleeps) {
  RealSleeper s;
  EXPECT_TRUE(s.SleepFor(milliseconds(1)));
  std::thread t([&] {
    std::this_thread::sleep_for(milliseconds(20));
    s.Interrupt();
  });
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(s.SleepFor(std::chrono::seconds(30)));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  t.join();
  EXPECT_FALSE(s.SleepFor(std::chrono::seconds(30)));
}

}  // namespace
}  // namespace feedguard::agent
