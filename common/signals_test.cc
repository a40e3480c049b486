#include "common/signals.h"

#include <pthread.h>

#include <chrono>
#include <thread>

#include <gtest/gtest.h>

namespace feedguard {
namespace {

TEST(TerminationSignalsTest, SignalEndsWait) {
  TerminationSignals s;
  ASSERT_TRUE(s.status().ok()) << s.status().ToString();
  // Directed at this thread, where it is blocked: it stays pending until Wait() takes it.
  ASSERT_EQ(pthread_kill(pthread_self(), SIGTERM), 0);
  EXPECT_EQ(s.Wait(), SIGTERM);
  ASSERT_EQ(pthread_kill(pthread_self(), SIGINT), 0);
  EXPECT_EQ(s.Wait(), SIGINT);
}

TEST(TerminationSignalsTest, InterruptFromAnotherThreadEndsWait) {
  TerminationSignals s;
  ASSERT_TRUE(s.status().ok());
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    s.Interrupt();
  });
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(s.Wait(), 0);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  t.join();
  s.Interrupt();  // before Wait(): counts
  EXPECT_EQ(s.Wait(), 0);
}

TEST(TerminationSignalsTest, RestoresTheMask) {
  sigset_t before, after;
  pthread_sigmask(SIG_SETMASK, nullptr, &before);
  { TerminationSignals s; }
  pthread_sigmask(SIG_SETMASK, nullptr, &after);
  EXPECT_EQ(sigismember(&before, SIGTERM), sigismember(&after, SIGTERM));
  EXPECT_EQ(sigismember(&before, SIGINT), sigismember(&after, SIGINT));
}

}  // namespace
}  // namespace feedguard
