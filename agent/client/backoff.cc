#include "agent/client/backoff.h"

#include <algorithm>

namespace feedguard::agent {

Backoff::Backoff(BackoffPolicy policy, uint64_t seed)
    : policy_(policy), rng_(seed), base_ms_(static_cast<double>(policy.initial.count())) {
  policy_.multiplier = std::max(1.0, policy_.multiplier);
  policy_.jitter = std::clamp(policy_.jitter, 0.0, 1.0);
}

std::chrono::milliseconds Backoff::Next() {
  const double capped = std::min(base_ms_, static_cast<double>(policy_.max.count()));
  std::uniform_real_distribution<double> factor(1.0 - policy_.jitter, 1.0 + policy_.jitter);
  const double delay = capped * factor(rng_);
  base_ms_ = std::min(capped * policy_.multiplier, static_cast<double>(policy_.max.count()));
  ++failures_;
  return std::chrono::milliseconds(static_cast<int64_t>(delay));
}

void Backoff::Reset() {
  base_ms_ = static_cast<double>(policy_.initial.count());
  failures_ = 0;
}

bool RealSleeper::SleepFor(std::chrono::nanoseconds d) {
  std::unique_lock lock(mu_);
  return !cv_.wait_for(lock, d, [this] { return interrupted_; });
}

void RealSleeper::Interrupt() {
  {
    std::lock_guard lock(mu_);
    interrupted_ = true;
  }
  cv_.notify_all();
}

}  // namespace feedguard::agent
