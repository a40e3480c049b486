// log_limiter.h — at most a burst of log lines from one site, refilled over time, with a count
// of the lines held back in between: a hostile peer must not turn each of its attempts (a
// refused hello, a message that does not parse) into a log line of its own.
//
// A token bucket: `burst` lines at once, then one more every `refill`. Thread-safe.
//
// Example:
//   LogLimiter limiter{10, std::chrono::seconds(6)};  // 10 at once, then 10 a minute
//   if (auto held = limiter.Allow()) {
//     spdlog::warn("refused hello from {}{}", peer, LogLimiter::HeldBack(*held));
//   }
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

namespace feedguard {

class LogLimiter {
 public:
  explicit LogLimiter(uint64_t burst = 10,
                      std::chrono::milliseconds refill = std::chrono::milliseconds(6'000));

  // nullopt: hold this line back (it is counted). Otherwise log it: the value is how many lines
  // were held back since the last one allowed.
  std::optional<uint64_t> Allow(
      std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now());
  // "" for 0, else " (N similar lines held back)": appended to the allowed line.
  static std::string HeldBack(uint64_t held);

 private:
  const uint64_t burst_;
  const std::chrono::milliseconds refill_;
  std::mutex mu_;
  double tokens_;                               // guarded by mu_
  std::chrono::steady_clock::time_point at_{};  // guarded by mu_; of `tokens_`
  uint64_t held_ = 0;                           // guarded by mu_
};

}  // namespace feedguard
