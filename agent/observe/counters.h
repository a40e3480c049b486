// counters.h — the cumulative counters an observation interval is the difference of, and the
// difference itself.
//
// Per pod: CPU used and throttled (cgroup), its feeders' wait as PSI "some" total (where the
// cgroup has cpu.pressure) or as its tasks' run delay (schedstat, RunDelayTracker), and the
// CPUs it may use. Per node: each CPU's busy time from /proc/stat. A sample is two readings
// apart; a counter that went back (a cgroup re-created under the same path) restarts from zero
// rather than yielding a negative interval.
#pragma once

#include <map>
#include <optional>
#include <string_view>

#include "agent/observe/starvation.h"
#include "common/cpuset.h"
#include "feedguard/common/status.h"

namespace feedguard::agent::observe {

struct PodCounters {
  double cpu_s = 0;
  double throttled_s = 0;
  std::optional<double> psi_some_s;  // cumulative; nullopt where the cgroup has no cpu.pressure
  CpuSet cpus;                       // effective
};

// A cumulative counter's growth between two readings; one that went back (its cgroup or task
// was re-created) counts from zero.
template <typename T>
constexpr T CounterDelta(T before, T after) {
  return after >= before ? after - before : after;
}

// Busy seconds per CPU from /proc/stat's "cpuN" lines (user, nice, system, irq, softirq, steal;
// not idle or iowait), in USER_HZ ticks of `user_hz` per second.
Result<std::map<int, double>> ParseProcStatBusy(std::string_view proc_stat, long user_hz);
// The busy seconds of `cpus` between two readings.
double BusyOn(const std::map<int, double>& before, const std::map<int, double>& after,
              const CpuSet& cpus);

// One interval of a pod from two readings `dt_s` apart: CPU, throttling, and the wait from PSI
// when both readings have it, else `run_delay_s` (the tracker's figure), capped at the interval.
// `run_delay_s` nullopt: none of the pod's tasks was seen; if its cgroup used CPU meanwhile they
// exist unseen, and the wait is WaitSource::kUnknown (0, not a measurement); if not, nothing
// ran, and the wait is a schedstat 0.
PodSample SampleBetween(const PodCounters& before, const PodCounters& after, double dt_s,
                        std::optional<double> run_delay_s);

}  // namespace feedguard::agent::observe
