// wake_latency.cc — fg-wake-latency: a feeder-shaped probe of wake-up and run-queue latency.
//
// A DataLoader worker alternates CPU work with short sleeps (waiting for a free slot or the next
// batch). This probe does the same with fixed lengths: `--busy-us` of wall-clock spinning, then
// an absolute CLOCK_MONOTONIC sleep of `--sleep-us`, `--cycles` times. Each wake-up's lateness
// (actual wake − requested time) is how long it waited for a CPU after its timer fired (plus the
// timer's own slack, the same in every arm). Busy time is wall time, so a preemption while
// "busy" does not stretch the cycle: wall time over cycles measures only the wake-up waits.
// Prints one JSON line: wall and CPU seconds, lateness mean/p50/p90/p99/max (µs), the number of
// wake-ups later than 1 ms, and the run-queue wait from /proc/self/schedstat.
// Used by wake_latency.py (bench/results/wedge-spill/).
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "bench/wedge/wedge_common.h"

namespace feedguard::bench::wedge {
namespace {

uint64_t NowNs() {
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<uint64_t>(t.tv_sec) * 1'000'000'000ULL + static_cast<uint64_t>(t.tv_nsec);
}

struct Options {
  int busy_us = 1000;
  int sleep_us = 500;
  int cycles = 3000;
};

int Run(const Options& o) {
  std::vector<uint64_t> late(static_cast<size_t>(o.cycles));
  const double delay0 = ProcessRunDelaySeconds(0).value_or(0);
  const double cpu0 = ProcessCpuSeconds(0).value_or(0);
  const uint64_t t0 = NowNs();
  volatile uint64_t sink = 0;
  for (int i = 0; i < o.cycles; ++i) {
    const uint64_t start = NowNs();
    while (NowNs() - start < static_cast<uint64_t>(o.busy_us) * 1000) sink = sink + 1;
    const uint64_t want = NowNs() + static_cast<uint64_t>(o.sleep_us) * 1000;
    timespec ts{static_cast<time_t>(want / 1'000'000'000ULL),
                static_cast<long>(want % 1'000'000'000ULL)};
    while (::clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) != 0) {
    }
    late[static_cast<size_t>(i)] = NowNs() - want;
  }
  const double wall = static_cast<double>(NowNs() - t0) / 1e9;
  const double cpu = ProcessCpuSeconds(0).value_or(0) - cpu0;
  const double delay = ProcessRunDelaySeconds(0).value_or(0) - delay0;
  std::vector<uint64_t> sorted = late;
  std::sort(sorted.begin(), sorted.end());
  double sum = 0;
  int over_1ms = 0;
  for (uint64_t v : late) {
    sum += static_cast<double>(v);
    if (v > 1'000'000) ++over_1ms;
  }
  const size_t n = sorted.size();
  auto us = [](uint64_t ns) { return static_cast<double>(ns) / 1e3; };
  std::printf(
      "{\"wall_s\":%s,\"cpu_s\":%s,\"run_delay_s\":%s,\"cycles\":%d,\"busy_us\":%d,"
      "\"sleep_us\":%d,\"late_mean_us\":%s,\"late_p50_us\":%s,\"late_p90_us\":%s,"
      "\"late_p99_us\":%s,\"late_max_us\":%s,\"late_over_1ms\":%d}\n",
      JsonNum(wall).c_str(), JsonNum(cpu).c_str(), JsonNum(delay).c_str(), o.cycles, o.busy_us,
      o.sleep_us, JsonNum(sum / static_cast<double>(n) / 1e3).c_str(),
      JsonNum(us(sorted[n / 2])).c_str(), JsonNum(us(sorted[n * 9 / 10])).c_str(),
      JsonNum(us(sorted[n * 99 / 100])).c_str(), JsonNum(us(sorted[n - 1])).c_str(), over_1ms);
  return 0;
}

}  // namespace
}  // namespace feedguard::bench::wedge

int main(int argc, char** argv) {
  using namespace feedguard::bench::wedge;
  Flags f(argc, argv, {});
  Options o;
  o.busy_us = f.Int("busy-us", o.busy_us);
  o.sleep_us = f.Int("sleep-us", o.sleep_us);
  o.cycles = f.Int("cycles", o.cycles);
  std::vector<std::string> errors = f.Errors();
  if (o.busy_us < 0 || o.busy_us > 1'000'000) errors.push_back("--busy-us 0..1000000");
  if (o.sleep_us < 1 || o.sleep_us > 1'000'000) errors.push_back("--sleep-us 1..1000000");
  if (o.cycles < 10 || o.cycles > 10'000'000) errors.push_back("--cycles 10..10000000");
  if (!errors.empty()) {
    for (const auto& e : errors) std::fprintf(stderr, "fg-wake-latency: %s\n", e.c_str());
    std::fprintf(stderr,
                 "usage: fg-wake-latency [--busy-us 1000] [--sleep-us 500] [--cycles 3000]\n");
    return 2;
  }
  return Run(o);
}
