#include "common/log_limiter.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace feedguard {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

TEST(LogLimiterTest, BurstThenHeldBackThenCounted) {
  LogLimiter l(3, 1s);
  const Clock::time_point t0 = Clock::now();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(l.Allow(t0), std::optional<uint64_t>(0)) << i;
  for (int i = 0; i < 100; ++i) EXPECT_FALSE(l.Allow(t0 + 10ms).has_value()) << i;
  // One line's worth refilled: the next line says how many were held back.
  EXPECT_EQ(l.Allow(t0 + 1010ms), std::optional<uint64_t>(100));
  EXPECT_FALSE(l.Allow(t0 + 1020ms).has_value());
  EXPECT_EQ(l.Allow(t0 + 1h), std::optional<uint64_t>(1));
}

TEST(LogLimiterTest, RefillIsCappedAtTheBurst) {
  LogLimiter l(2, 1s);
  const Clock::time_point t0 = Clock::now();
  EXPECT_TRUE(l.Allow(t0).has_value());
  int allowed = 0;
  for (int i = 0; i < 10; ++i) allowed += l.Allow(t0 + 1h).has_value() ? 1 : 0;
  EXPECT_EQ(allowed, 2);
}

TEST(LogLimiterTest, HeldBackNote) {
  EXPECT_EQ(LogLimiter::HeldBack(0), "");
  EXPECT_EQ(LogLimiter::HeldBack(1), " (1 similar line held back)");
  EXPECT_EQ(LogLimiter::HeldBack(7), " (7 similar lines held back)");
}

TEST(LogLimiterTest, ThreadsShareOneBudget) {
  LogLimiter l(50, 1h);
  std::atomic<int> allowed{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t) {
    ts.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) allowed += l.Allow().has_value() ? 1 : 0;
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(allowed.load(), 50);
}

}  // namespace
}  // namespace feedguard
