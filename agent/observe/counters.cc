#include "agent/observe/counters.h"

#include <algorithm>
#include <charconv>
#include <string>
#include <vector>

#include "common/strings.h"

namespace feedguard::agent::observe {
Result<std::map<int, double>> ParseProcStatBusy(std::string_view proc_stat, long user_hz) {
  if (user_hz <= 0) return InvalidArgument("USER_HZ must be positive");
  std::map<int, double> busy;
  size_t at = 0;
  while (at < proc_stat.size()) {
    size_t end = proc_stat.find('\n', at);
    if (end == std::string_view::npos) end = proc_stat.size();
    const std::string_view line = proc_stat.substr(at, end - at);
    at = end + 1;
    if (line.size() < 4 || line.substr(0, 3) != "cpu" || line[3] < '0' || line[3] > '9') continue;
    std::vector<std::string_view> f = Fields(line);
    int cpu = 0;
    const std::string_view id = f[0].substr(3);
    if (std::from_chars(id.data(), id.data() + id.size(), cpu).ec != std::errc() || f.size() < 9) {
      return InvalidArgument("/proc/stat: unreadable line \"" + std::string(line.substr(0, 80)) +
                             "\"");
    }
    uint64_t ticks = 0;
    // Fields after the name: user nice system idle iowait irq softirq steal [guest guest_nice].
    for (size_t i : {1, 2, 3, 6, 7, 8}) {
      uint64_t v = 0;
      if (std::from_chars(f[i].data(), f[i].data() + f[i].size(), v).ec != std::errc()) {
        return InvalidArgument("/proc/stat: not a number in \"" + std::string(line.substr(0, 80)) +
                               "\"");
      }
      ticks += v;
    }
    busy[cpu] = static_cast<double>(ticks) / static_cast<double>(user_hz);
  }
  if (busy.empty()) return InvalidArgument("/proc/stat: no cpuN lines");
  return busy;
}

double BusyOn(const std::map<int, double>& before, const std::map<int, double>& after,
              const CpuSet& cpus) {
  double s = 0;
  for (int cpu : cpus) {
    auto b = before.find(cpu), a = after.find(cpu);
    if (b != before.end() && a != after.end()) s += CounterDelta(b->second, a->second);
  }
  return s;
}

PodSample SampleBetween(const PodCounters& before, const PodCounters& after, double dt_s,
                        std::optional<double> run_delay_s) {
  PodSample s;
  s.dt_s = dt_s;
  s.cpu_s = CounterDelta(before.cpu_s, after.cpu_s);
  s.throttled_s = CounterDelta(before.throttled_s, after.throttled_s);
  if (before.psi_some_s && after.psi_some_s) {
    s.source = WaitSource::kPsi;
    s.wait_s = CounterDelta(*before.psi_some_s, *after.psi_some_s);
  } else if (run_delay_s || s.cpu_s <= 0) {
    s.source = WaitSource::kSchedstat;
    s.wait_s = std::max(0.0, run_delay_s.value_or(0));
  } else {
    s.source = WaitSource::kUnknown;
    s.wait_s = 0;
  }
  s.wait_s = std::min(s.wait_s, dt_s);
  return s;
}

}  // namespace feedguard::agent::observe
