// backoff.h — jittered exponential reconnect backoff, and an interruptible sleeper.
//
// Backoff: the delay before reconnect attempt n is min(initial·multiplierⁿ, max) scaled by a
// uniform factor in [1-jitter, 1+jitter], so a fleet of agents that lost the controller at the
// same moment does not come back in lockstep. Pure and seeded: tests check the sequence.
// Sleeper: how the client waits between attempts — injectable, so tests can record the delays;
// Interrupt() ends the current and every later sleep at once (used on shutdown).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>

namespace feedguard::agent {

struct BackoffPolicy {
  std::chrono::milliseconds initial{500};
  double multiplier = 2.0;
  std::chrono::milliseconds max{30'000};
  double jitter = 0.2;  // ± fraction of the delay
};

class Backoff {
 public:
  Backoff(BackoffPolicy policy, uint64_t seed);
  // The delay to wait before the next attempt; grows the base for the one after.
  std::chrono::milliseconds Next();
  // After a healthy connection: start again from `initial`.
  void Reset();
  int failures() const { return failures_; }

 private:
  BackoffPolicy policy_;
  std::mt19937_64 rng_;
  double base_ms_;
  int failures_ = 0;
};

class Sleeper {
 public:
  virtual ~Sleeper() = default;
  // Waits up to `d`. Returns false if interrupted (now or before).
  virtual bool SleepFor(std::chrono::nanoseconds d) = 0;
  virtual void Interrupt() = 0;
};
using SleeperPtr = std::shared_ptr<Sleeper>;

class RealSleeper final : public Sleeper {
 public:
  bool SleepFor(std::chrono::nanoseconds d) override;
  void Interrupt() override;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool interrupted_ = false;  // guarded by mu_
};

}  // namespace feedguard::agent
