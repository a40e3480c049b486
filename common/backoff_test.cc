#include "common/backoff.h"

#include <set>
#include <stdexcept>
#include <stop_token>
#include <thread>

#include <gtest/gtest.h>

namespace feedguard {
namespace {

using std::chrono::milliseconds;

// ---- the agent's reconnect policy (±20 %) ----

TEST(BackoffTest, GrowsByMultiplierWithinJitterUpToMax) {
  Backoff b(BackoffPolicy{milliseconds(500), 2.0, milliseconds(30'000), 0.2, 0.2}, 42);
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
  Backoff b(BackoffPolicy{milliseconds(100), 2.0, milliseconds(10'000), 0.0, 0.0}, 1);
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

// ---- the reflector's re-watch policy (client-go style: [d, 2d)) ----

BackoffPolicy ClientGoPolicy() {
  return BackoffPolicy{milliseconds(800), 2.0, milliseconds(30'000), 0.0, 1.0};
}

TEST(BackoffTest, DoublesFromInitialUpToCapWithJitter) {
  Backoff b(ClientGoPolicy(), 42);
  int64_t base = 800;
  for (int i = 0; i < 12; ++i) {
    const auto d = b.Next().count();
    EXPECT_GE(d, base) << "step " << i;
    EXPECT_LT(d, 2 * base) << "step " << i;  // jitter 1.0: [d, 2d)
    base = std::min<int64_t>(base * 2, 30000);
  }
  EXPECT_EQ(b.base(), milliseconds(30000));
  b.Reset();
  EXPECT_EQ(b.base(), milliseconds(800));
  const auto d = b.Next().count();
  EXPECT_GE(d, 800);
  EXPECT_LT(d, 1600);
}

TEST(BackoffTest, JitterVaries) {
  Backoff a(ClientGoPolicy(), 1), b(ClientGoPolicy(), 2);
  bool differ = false;
  for (int i = 0; i < 5; ++i) differ |= a.Next() != b.Next();
  EXPECT_TRUE(differ);
}

TEST(BackoffTest, NoJitterIsExact) {
  BackoffPolicy o = ClientGoPolicy();
  o.jitter_above = 0;
  Backoff b(o, 7);
  EXPECT_EQ(b.Next(), milliseconds(800));
  EXPECT_EQ(b.Next(), milliseconds(1600));
  EXPECT_EQ(b.Next(), milliseconds(3200));
}

// ---- per-key pacing ----

TEST(KeyedBackoffTest, EachKeyWaitsItsOwnGrowingDelayAndSuccessForgets) {
  KeyedBackoff k(BackoffPolicy{milliseconds(10), 2.0, milliseconds(80), 0.0, 0.0}, 1);
  const auto t0 = std::chrono::steady_clock::time_point{} + std::chrono::hours(1);
  EXPECT_TRUE(k.Due("a", t0));
  EXPECT_EQ(k.Failed("a", t0), milliseconds(10));
  EXPECT_FALSE(k.Due("a", t0 + milliseconds(9)));
  EXPECT_TRUE(k.Due("a", t0 + milliseconds(10)));
  EXPECT_TRUE(k.Due("b", t0));  // other keys are not held up
  EXPECT_EQ(k.Failed("a", t0 + milliseconds(10)), milliseconds(20));
  EXPECT_EQ(k.Failed("a", t0 + milliseconds(30)), milliseconds(40));
  EXPECT_EQ(k.Failed("a", t0 + milliseconds(70)), milliseconds(80));
  EXPECT_EQ(k.Failed("a", t0 + milliseconds(150)), milliseconds(80));  // capped
  EXPECT_EQ(k.failures("a"), 5);
  k.Forget("a");
  EXPECT_EQ(k.failures("a"), 0);
  EXPECT_TRUE(k.Due("a", t0));
  EXPECT_EQ(k.Failed("a", t0), milliseconds(10));
}

// ---- sleeping ----

TEST(RealSleeperTest, StopEndsSleepAndLaterSleeps) {
  RealSleeper s;
  std::stop_source stop;
  EXPECT_TRUE(s.Sleep(milliseconds(1), stop.get_token()));
  std::thread t([&] {
    std::this_thread::sleep_for(milliseconds(20));
    stop.request_stop();
  });
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(s.Sleep(std::chrono::seconds(30), stop.get_token()));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  t.join();
  EXPECT_TRUE(stop.stop_requested());
  EXPECT_FALSE(s.Sleep(std::chrono::seconds(30), stop.get_token()));
}

TEST(FakeSleeperTest, AdvancesClock) {
  auto clock = std::make_shared<ManualTimeSource>();
  FakeSleeper s(clock);
  std::stop_source stop;
  const auto t0 = clock->MonotonicNow();
  EXPECT_TRUE(s.Sleep(milliseconds(1500), stop.get_token()));
  EXPECT_EQ(clock->MonotonicNow() - t0, milliseconds(1500));
  ASSERT_EQ(s.sleeps().size(), 1u);
}

}  // namespace
}  // namespace feedguard

namespace feedguard {
namespace {

TEST(KeyedBackoffTest, DueAtIsWhenAFailedKeyMayBeTriedAgain) {
  KeyedBackoff k(
      BackoffPolicy{std::chrono::milliseconds(10), 2.0, std::chrono::seconds(1), 0.0, 0.0}, 1);
  const KeyedBackoff::TimePoint t0{};
  EXPECT_FALSE(k.DueAt("a").has_value());
  k.Failed("a", t0);
  EXPECT_EQ(k.DueAt("a"), t0 + std::chrono::milliseconds(10));
  k.Forget("a");
  EXPECT_FALSE(k.DueAt("a").has_value());
}

TEST(WakeupTest, ANotifyWhileBusyIsKeptAndEndsTheNextWait) {
  Wakeup w;
  std::stop_source stop;
  w.Notify();  // the loop was busy: the next wait returns at once
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(w.WaitFor(std::chrono::seconds(30), stop.get_token()));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  // Consumed: a wait with no notify times out.
  EXPECT_TRUE(w.WaitFor(std::chrono::milliseconds(20), stop.get_token()));
  std::thread notifier([&] { w.Notify(); });
  EXPECT_TRUE(w.WaitFor(std::chrono::seconds(30), stop.get_token()));
  notifier.join();
  std::thread stopper([&] { stop.request_stop(); });
  EXPECT_FALSE(w.WaitFor(std::chrono::seconds(30), stop.get_token()));
  stopper.join();
}

TEST(WakeupTest, LoopRunsPassesUntilStopAndSurvivesAThrowingPass) {
  Wakeup w;
  std::stop_source stop;
  int passes = 0, errors = 0;
  w.Loop(
      stop.get_token(),
      [&] {
        if (++passes == 2) throw std::runtime_error("bad input");
        if (passes == 4) stop.request_stop();
      },
      [] { return std::chrono::nanoseconds::zero(); },
      [&](const std::exception& e) {
        ++errors;
        EXPECT_STREQ(e.what(), "bad input");
      });
  EXPECT_EQ(passes, 4);
  EXPECT_EQ(errors, 1);
}

}  // namespace
}  // namespace feedguard
