// backoff.h — the one jittered exponential backoff, per-key retry pacing built on it, and
// stop-aware sleeping. Used by the agent's reconnects (agent/client), the Kubernetes reflector's
// re-watch and leader-election retries (controller/kube) and the reconciler's retries of failed
// API writes (controller/reconciler).
//
// Backoff: the delay before attempt n is min(initial·multiplierⁿ, max) times a factor drawn
// uniformly from [1 - jitter_below, 1 + jitter_above]. The default (±20 %) spreads a fleet of
// agents that lost the controller at the same moment; client-go's wait.Jitter(d, 1.0) — a delay
// in [d, 2d) — is {jitter_below = 0, jitter_above = 1}. Seeded: tests check the sequence.
//
// KeyedBackoff: one Backoff per key that failed (controller-runtime's per-item exponential
// failure rate limiter): a failing write waits its own growing delay, a success forgets the key,
// other keys are not held up.
//
// Sleeper: how a loop waits between attempts, ended early by a std::stop_token. Injectable, so
// tests can record the delays (FakeSleeper advances a ManualTimeSource instead of sleeping).
//
// Example:
//   Backoff b(BackoffPolicy{}, seed);
//   while (!Connect()) {
//     if (!sleeper->Sleep(b.Next(), stop_token)) return;  // stop requested
//   }
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <stop_token>
#include <string>
#include <vector>

#include "feedguard/common/time_source.h"

namespace feedguard {

struct BackoffPolicy {
  std::chrono::milliseconds initial{500};
  double multiplier = 2.0;  // values below 1 count as 1
  std::chrono::milliseconds max{30'000};
  // The capped base is scaled by a factor drawn from [1 - jitter_below, 1 + jitter_above]
  // (each clamped to [0, 1]).
  double jitter_below = 0.2;
  double jitter_above = 0.2;
};

// Not thread-safe (one per loop).
class Backoff {
 public:
  Backoff(BackoffPolicy policy, uint64_t seed);
  // The delay to wait before the next attempt; grows the base for the one after.
  std::chrono::milliseconds Next();
  // After a success: start again from `initial`.
  void Reset();
  // Next() calls since the last Reset().
  int failures() const { return failures_; }
  // The un-jittered (capped) base the next call will use.
  std::chrono::milliseconds base() const;

 private:
  BackoffPolicy policy_;
  std::mt19937_64 rng_;
  double base_ms_;
  int failures_ = 0;
};

// Per-key retry pacing. Not thread-safe (callers hold their own lock).
class KeyedBackoff {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  KeyedBackoff(BackoffPolicy policy, uint64_t seed);
  // Whether `key` may be tried at `now` (always for a key that has not failed).
  bool Due(const std::string& key, TimePoint now) const;
  // `key` failed at `now`: returns the delay before it is due again.
  std::chrono::milliseconds Failed(const std::string& key, TimePoint now);
  // `key` succeeded (or no longer exists): forget its failures.
  void Forget(const std::string& key);
  // Consecutive failures of `key` (0: none).
  int failures(const std::string& key) const;
  // When `key` is due again; nullopt for a key that has not failed (due now).
  std::optional<TimePoint> DueAt(const std::string& key) const;

 private:
  struct Entry {
    Backoff backoff;
    TimePoint due;
  };
  BackoffPolicy policy_;
  uint64_t next_seed_;
  std::map<std::string, Entry> entries_;
};

// Sleeps `d` unless `stop` is (or becomes) requested. Returns false when stop was requested.
bool SleepFor(std::chrono::nanoseconds d, const std::stop_token& stop);

// A loop's wait that other threads end early: Notify() wakes the loop's current or next
// WaitFor, and a notification that comes while the loop is busy is kept (one pending at most),
// so no change waits for the timeout. Thread-safe.
class Wakeup {
 public:
  void Notify();
  // Waits up to `d`, until a Notify() (since the last wait) or until `stop` is requested.
  // Returns false when stop was requested.
  bool WaitFor(std::chrono::nanoseconds d, const std::stop_token& stop);
  // The loop of a thread that acts on changes, until `stop`: `pass`, then WaitFor(next_wait()).
  // An exception that escapes a pass is handed to `on_error` and the loop goes on (it must not
  // end the thread: std::terminate).
  void Loop(const std::stop_token& stop, const std::function<void()>& pass,
            const std::function<std::chrono::nanoseconds()>& next_wait,
            const std::function<void(const std::exception&)>& on_error);

 private:
  std::mutex mu_;
  std::condition_variable_any cv_;
  bool notified_ = false;  // guarded by mu_
};

class Sleeper {
 public:
  virtual ~Sleeper() = default;
  // Sleeps `d` or until `stop` is requested. Returns false when stop was requested.
  virtual bool Sleep(std::chrono::nanoseconds d, std::stop_token stop) = 0;
};
using SleeperPtr = std::shared_ptr<Sleeper>;

class RealSleeper final : public Sleeper {
 public:
  bool Sleep(std::chrono::nanoseconds d, std::stop_token stop) override {
    return SleepFor(d, stop);
  }
};

// Test sleeper: records every requested duration and advances a ManualTimeSource by it.
class FakeSleeper final : public Sleeper {
 public:
  explicit FakeSleeper(std::shared_ptr<ManualTimeSource> clock) : clock_(std::move(clock)) {}
  bool Sleep(std::chrono::nanoseconds d, std::stop_token stop) override;
  std::vector<std::chrono::nanoseconds> sleeps() const;

 private:
  std::shared_ptr<ManualTimeSource> clock_;
  mutable std::mutex mu_;
  std::vector<std::chrono::nanoseconds> sleeps_;  // guarded by mu_
};

}  // namespace feedguard
