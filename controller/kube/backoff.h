// backoff.h — stop signals, injectable sleeping and jittered exponential backoff for the
// Kubernetes client (reflector re-watch: 800 ms ×2 up to 30 s; leader-election retry period).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <random>
#include <vector>

#include "feedguard/common/time_source.h"

namespace feedguard::kube {

// A one-shot, thread-safe "please stop" flag that sleepers can wait on.
class StopSignal {
 public:
  void Notify();
  bool IsSet() const { return set_.load(std::memory_order_acquire); }
  // Waits up to `d`; returns true when the signal was (or becomes) set.
  bool WaitFor(std::chrono::nanoseconds d) const;

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;  // signalled under mu_
  std::atomic<bool> set_{false};
};

// Sleeping, injectable so state machines can be driven by a manual clock in tests.
class Sleeper {
 public:
  virtual ~Sleeper() = default;
  // Sleeps `d` or until `stop` is set. Returns false when stopped.
  virtual bool Sleep(std::chrono::nanoseconds d, const StopSignal& stop) = 0;
};
using SleeperPtr = std::shared_ptr<Sleeper>;

class RealSleeper final : public Sleeper {
 public:
  bool Sleep(std::chrono::nanoseconds d, const StopSignal& stop) override {
    return !stop.WaitFor(d);
  }
};

// Test sleeper: records every requested duration and advances a ManualTimeSource by it.
class FakeSleeper final : public Sleeper {
 public:
  explicit FakeSleeper(std::shared_ptr<ManualTimeSource> clock) : clock_(std::move(clock)) {}
  bool Sleep(std::chrono::nanoseconds d, const StopSignal& stop) override;
  std::vector<std::chrono::nanoseconds> sleeps() const;

 private:
  std::shared_ptr<ManualTimeSource> clock_;
  mutable std::mutex mu_;
  std::vector<std::chrono::nanoseconds> sleeps_;  // guarded by mu_
};

struct BackoffOptions {
  std::chrono::milliseconds initial{800};
  double factor = 2.0;
  std::chrono::milliseconds cap{30000};
  double jitter = 1.0;  // each delay is d + U[0, jitter·d), d capped first (client-go style)
};

// Exponential backoff with jitter. Not thread-safe (one per loop).
class Backoff {
 public:
  Backoff(BackoffOptions options, uint64_t seed);
  // The next delay to wait; grows the base for the call after.
  std::chrono::milliseconds Next();
  // Back to the initial delay (after a success).
  void Reset() { current_ = options_.initial; }
  // The un-jittered base the next call will use.
  std::chrono::milliseconds base() const { return current_; }

 private:
  BackoffOptions options_;
  std::chrono::milliseconds current_;
  std::mt19937_64 rng_;
};

}  // namespace feedguard::kube
