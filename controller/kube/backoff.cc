#include "controller/kube/backoff.h"

#include <algorithm>

namespace feedguard::kube {

void StopSignal::Notify() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    set_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
}

bool StopSignal::WaitFor(std::chrono::nanoseconds d) const {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, d, [this] { return set_.load(std::memory_order_acquire); });
}

bool FakeSleeper::Sleep(std::chrono::nanoseconds d, const StopSignal& stop) {
  if (stop.IsSet()) return false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    sleeps_.push_back(d);
  }
  clock_->Advance(d);
  return !stop.IsSet();
}

std::vector<std::chrono::nanoseconds> FakeSleeper::sleeps() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sleeps_;
}

Backoff::Backoff(BackoffOptions options, uint64_t seed)
    : options_(options), current_(options.initial), rng_(seed) {}

std::chrono::milliseconds Backoff::Next() {
  const auto base = std::min(current_, options_.cap);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const double jittered = static_cast<double>(base.count()) * (1.0 + options_.jitter * u(rng_));
  const auto grown = static_cast<double>(current_.count()) * options_.factor;
  current_ = std::chrono::milliseconds(
      static_cast<int64_t>(std::min(grown, static_cast<double>(options_.cap.count()))));
  return std::chrono::milliseconds(static_cast<int64_t>(jittered));
}

}  // namespace feedguard::kube
