#include "common/log_limiter.h"

#include <algorithm>

namespace feedguard {

LogLimiter::LogLimiter(uint64_t burst, std::chrono::milliseconds refill)
    : burst_(std::max<uint64_t>(1, burst)),
      refill_(std::max(refill, std::chrono::milliseconds(1))),
      tokens_(static_cast<double>(burst_)) {}

std::optional<uint64_t> LogLimiter::Allow(std::chrono::steady_clock::time_point now) {
  std::lock_guard lock(mu_);
  if (at_ != std::chrono::steady_clock::time_point{} && now > at_) {
    const double refilled =
        std::chrono::duration<double>(now - at_) / std::chrono::duration<double>(refill_);
    tokens_ = std::min(static_cast<double>(burst_), tokens_ + refilled);
  }
  at_ = std::max(at_, now);
  if (tokens_ < 1.0) {
    ++held_;
    return std::nullopt;
  }
  tokens_ -= 1.0;
  const uint64_t held = held_;
  held_ = 0;
  return held;
}

std::string LogLimiter::HeldBack(uint64_t held) {
  if (held == 0) return "";
  return " (" + std::to_string(held) + " similar line" + (held == 1 ? "" : "s") + " held back)";
}

}  // namespace feedguard
