#include "common/backoff.h"

#include <algorithm>
#include <condition_variable>

namespace feedguard {

Backoff::Backoff(BackoffPolicy policy, uint64_t seed)
    : policy_(policy), rng_(seed), base_ms_(static_cast<double>(policy.initial.count())) {
  policy_.multiplier = std::max(1.0, policy_.multiplier);
  policy_.jitter_below = std::clamp(policy_.jitter_below, 0.0, 1.0);
  policy_.jitter_above = std::clamp(policy_.jitter_above, 0.0, 1.0);
}

std::chrono::milliseconds Backoff::Next() {
  const double capped = std::min(base_ms_, static_cast<double>(policy_.max.count()));
  double factor = 1.0;
  if (policy_.jitter_below > 0 || policy_.jitter_above > 0) {
    std::uniform_real_distribution<double> u(1.0 - policy_.jitter_below,
                                             1.0 + policy_.jitter_above);
    factor = u(rng_);
  }
  base_ms_ = std::min(capped * policy_.multiplier, static_cast<double>(policy_.max.count()));
  ++failures_;
  return std::chrono::milliseconds(static_cast<int64_t>(capped * factor));
}

void Backoff::Reset() {
  base_ms_ = static_cast<double>(policy_.initial.count());
  failures_ = 0;
}

std::chrono::milliseconds Backoff::base() const {
  return std::chrono::milliseconds(
      static_cast<int64_t>(std::min(base_ms_, static_cast<double>(policy_.max.count()))));
}

KeyedBackoff::KeyedBackoff(BackoffPolicy policy, uint64_t seed)
    : policy_(policy), next_seed_(seed) {}

bool KeyedBackoff::Due(const std::string& key, TimePoint now) const {
  const std::optional<TimePoint> at = DueAt(key);
  return !at || now >= *at;
}

std::chrono::milliseconds KeyedBackoff::Failed(const std::string& key, TimePoint now) {
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    it = entries_.emplace(key, Entry{Backoff(policy_, next_seed_++), now}).first;
  }
  const auto delay = it->second.backoff.Next();
  it->second.due = now + delay;
  return delay;
}

void KeyedBackoff::Forget(const std::string& key) { entries_.erase(key); }

int KeyedBackoff::failures(const std::string& key) const {
  auto it = entries_.find(key);
  return it == entries_.end() ? 0 : it->second.backoff.failures();
}

std::optional<KeyedBackoff::TimePoint> KeyedBackoff::DueAt(const std::string& key) const {
  auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  return it->second.due;
}

void Wakeup::Notify() {
  {
    std::lock_guard l(mu_);
    notified_ = true;
  }
  cv_.notify_all();
}

bool Wakeup::WaitFor(std::chrono::nanoseconds d, const std::stop_token& stop) {
  std::unique_lock l(mu_);
  cv_.wait_for(l, stop, d, [&] { return notified_; });
  notified_ = false;
  return !stop.stop_requested();
}

void Wakeup::Loop(const std::stop_token& stop, const std::function<void()>& pass,
                  const std::function<std::chrono::nanoseconds()>& next_wait,
                  const std::function<void(const std::exception&)>& on_error) {
  while (!stop.stop_requested()) {
    try {
      pass();
    } catch (const std::exception& e) {
      on_error(e);
    }
    if (!WaitFor(next_wait(), stop)) return;
  }
}

bool SleepFor(std::chrono::nanoseconds d, const std::stop_token& stop) {
  if (stop.stop_requested()) return false;
  std::mutex mu;
  std::condition_variable_any cv;
  std::unique_lock lock(mu);
  // Waits until the deadline or a stop request (which notifies cv through a stop_callback).
  cv.wait_for(lock, stop, d, [] { return false; });
  return !stop.stop_requested();
}

bool FakeSleeper::Sleep(std::chrono::nanoseconds d, std::stop_token stop) {
  if (stop.stop_requested()) return false;
  {
    std::lock_guard lock(mu_);
    sleeps_.push_back(d);
  }
  clock_->Advance(d);
  return !stop.stop_requested();
}

std::vector<std::chrono::nanoseconds> FakeSleeper::sleeps() const {
  std::lock_guard lock(mu_);
  return sleeps_;
}

}  // namespace feedguard
