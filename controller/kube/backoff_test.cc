#include "controller/kube/backoff.h"

#include <gtest/gtest.h>

#include <thread>

namespace feedguard::kube {
namespace {

using std::chrono::milliseconds;

TEST(BackoffTest, DoublesFromInitialUpToCapWithJitter) {
  Backoff b(BackoffOptions{}, 42);
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
  Backoff a(BackoffOptions{}, 1), b(BackoffOptions{}, 2);
  bool differ = false;
  for (int i = 0; i < 5; ++i) differ |= a.Next() != b.Next();
  EXPECT_TRUE(differ);
}

TEST(BackoffTest, NoJitterIsExact) {
  BackoffOptions o;
  o.jitter = 0;
  Backoff b(o, 7);
  EXPECT_EQ(b.Next(), milliseconds(800));
  EXPECT_EQ(b.Next(), milliseconds(1600));
  EXPECT_EQ(b.Next(), milliseconds(3200));
}

TEST(StopSignalTest, WakesSleeper) {
  StopSignal stop;
  RealSleeper sleeper;
  std::thread t([&] {
    std::this_thread::sleep_for(milliseconds(20));
    stop.Notify();
  });
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(sleeper.Sleep(std::chrono::seconds(30), stop));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  t.join();
  EXPECT_TRUE(stop.IsSet());
}

TEST(FakeSleeperTest, AdvancesClock) {
  auto clock = std::make_shared<ManualTimeSource>();
  FakeSleeper s(clock);
  StopSignal stop;
  const auto t0 = clock->MonotonicNow();
  EXPECT_TRUE(s.Sleep(milliseconds(1500), stop));
  EXPECT_EQ(clock->MonotonicNow() - t0, milliseconds(1500));
  ASSERT_EQ(s.sleeps().size(), 1u);
}

}  // namespace
}  // namespace feedguard::kube
