// time_source.h — an injectable clock, so tests can drive time instead of sleeping.
#pragma once

#include <chrono>
#include <memory>

namespace feedguard {

class TimeSource {
 public:
  virtual ~TimeSource() = default;
  virtual std::chrono::steady_clock::time_point MonotonicNow() const = 0;
  virtual std::chrono::system_clock::time_point WallNow() const = 0;
};
using TimeSourcePtr = std::shared_ptr<TimeSource>;

// The real clock.
class RealTimeSource final : public TimeSource {
 public:
  std::chrono::steady_clock::time_point MonotonicNow() const override {
    return std::chrono::steady_clock::now();
  }
  std::chrono::system_clock::time_point WallNow() const override {
    return std::chrono::system_clock::now();
  }
};

// A clock that moves only when told to.
class ManualTimeSource final : public TimeSource {
 public:
  std::chrono::steady_clock::time_point MonotonicNow() const override { return mono_; }
  std::chrono::system_clock::time_point WallNow() const override { return wall_; }
  void Advance(std::chrono::nanoseconds d) {
    mono_ += d;
    wall_ += std::chrono::duration_cast<std::chrono::system_clock::duration>(d);
  }

 private:
  std::chrono::steady_clock::time_point mono_{std::chrono::seconds(1000)};
  std::chrono::system_clock::time_point wall_{std::chrono::seconds(1'700'000'000)};
};

}  // namespace feedguard
