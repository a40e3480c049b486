// schedstat.h — a pod's feeders' CPU wait where the kernel has no per-cgroup PSI (cgroup v1, or
// v2 without psi): each task's run delay from /proc/<pid>/task/<tid>/schedstat, the second
// field, nanoseconds spent runnable on a run queue but not running (kernel
// Documentation/scheduler/sched-stats.rst). The same quantity PSI's "some" is built from,
// summed over tasks instead of merged into wall time.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "feedguard/common/status.h"

namespace feedguard::agent::observe {

struct Schedstat {
  uint64_t run_ns = 0;        // on a CPU
  uint64_t run_delay_ns = 0;  // runnable, waiting for a CPU
  uint64_t timeslices = 0;
};
// Parses a schedstat file ("<run ns> <run delay ns> <timeslices>\n").
Result<Schedstat> ParseSchedstat(std::string_view text);

// Run delay per task between samples. Tasks come and go: a task seen before counts what it
// added since (a counter that went back, a reused tid, counts from zero); a new task counts all
// it has (it started within the interval, or its earlier wait is unknown: an upper bound).
// Exited tasks' last interval is lost (a lower bound): the two are why the result is an
// estimate, stated as such wherever it is shown.
class RunDelayTracker {
 public:
  // `run_delay_ns` by tid now; returns the seconds of run delay since the previous call (0 on
  // the first) and remembers these.
  double Sample(const std::map<int, uint64_t>& run_delay_ns);

 private:
  std::map<int, uint64_t> last_;
  bool primed_ = false;
};

// The run delay of every task of the processes in `pids`, read from `proc_root` (/proc):
// tid → nanoseconds. Tasks that vanish while being read are skipped.
std::map<int, uint64_t> ReadRunDelays(const std::string& proc_root, const std::vector<int>& pids);

}  // namespace feedguard::agent::observe
