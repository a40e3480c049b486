// starvation.h — one GPU pod observed with no policy: how long its CPU feeders waited for a CPU,
// how much GPU time that cost, and who ran on the CPUs it may use while it waited.
//
// The agent samples each GPU pod every `period` (a PodSample per interval) and keeps an hour of
// them (PodWindows); a Summary is any window up to that hour (the surfaces use 1 min, 10 min and
// 1 h). Pure: the readers (cgroup usage and PSI, /proc schedstat, NVML) fill the samples.
//
// Wait behind others (docs/DESIGN.md §4b): the wait counts a task that waits behind the pod's own
// threads as much as one that waits behind a neighbour. In one interval of length dt on n
// allowed CPUs, where the pod used u CPU-seconds and everything else ran o CPU-seconds on those
// CPUs, the part of the wait w in which another workload could have held the CPU is at most
//   c = min(w, o, n·dt − u)
// (an instant in which a task of the pod waits because another runs needs another running on one
// of its CPUs, and a CPU of its own not running it). The rest, w − c, it waited behind its own
// threads (or its own quota): more CPU for the pod, not a fence, is its cure. Of c, the pods' part
// is at most min(c, the other pods' CPU-seconds on those CPUs); the node (system daemons, kubelet)
// has the rest. A pod whose cgroup is idle (cpu.idle = 1: a fenced neighbour) runs only on time
// the others leave and is preempted at once by a waking task that is not idle
// (agent/cgroup/kernel_facts.h): its CPU time is left out of o, of the pods' part and of the
// contenders — it took that time from no one.
//
// GPU time lost: in one interval the feeders waited c seconds behind others and the GPU was idle
// i = (1 - busy)·dt. Where within the interval the two fell is not known, so the lost time L,
// the overlap of the two, is bounded by max(0, c + i - dt) ≤ L ≤ min(c, i); the estimate takes
// them as independent within the interval, L ≈ c·i/dt. Without a GPU reading there is no GPU
// figure: only the wait.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "common/cpuset.h"
#include "feedguard/common/enum_names.h"

namespace feedguard::agent::observe {

// Where a wait figure came from: the pod cgroup's cpu.pressure ("some" total: wall time in
// which at least one of its tasks waited), or the tasks' own run delay (/proc/<pid>/task/<tid>/
// schedstat, summed over the pod's tasks and capped at the interval: an upper bound of "some").
// kUnknown: not measured — no PSI, and none of the pod's tasks could be seen while its cgroup
// used CPU (an agent in its own PID namespace without the host's /proc, host_tasks.h); its wait
// then reads 0 and is no measurement.
enum class WaitSource : uint8_t { kPsi, kSchedstat, kUnknown };
inline constexpr EnumNames<WaitSource, 3> kWaitSourceNames{{{WaitSource::kPsi, "psi"},
                                                            {WaitSource::kSchedstat, "schedstat"},
                                                            {WaitSource::kUnknown, "unknown"}}};
static_assert(EnumTableComplete(kWaitSourceNames));

// Who took CPU time on a pod's CPUs: another pod (its uid) or the node itself (system daemons,
// kubelet, anything outside the pods' cgroups).
inline constexpr char kNodeContender[] = "node";
struct Contention {
  std::string contender;  // a pod uid, or kNodeContender
  double cpu_s = 0;
  friend bool operator==(const Contention&, const Contention&) = default;
};

struct PodSample {
  double dt_s = 0;
  double wait_s = 0;  // ≤ dt_s
  WaitSource source = WaitSource::kPsi;
  // Of wait_s, the part in which others could have held its CPUs, and of that the pods' part
  // (set by SplitWait).
  double behind_others_s = 0;
  double behind_pods_s = 0;
  double cpu_s = 0;                // CPU the pod used
  double throttled_s = 0;          // its cpu.stat throttled time
  std::optional<double> gpu_busy;  // fraction of the interval its GPUs were busy (NVML), [0, 1]
  // Only for an interval in which the pod waited (WaitedIn): who ran on its CPUs, most first.
  std::vector<Contention> contenders;
};

struct GpuLost {
  double estimate_s = 0, low_s = 0, high_s = 0;
};
// What ran on a pod's CPUs in one interval besides the pod: the other pods' shares and the node's
// rest, in CPU-seconds; nullopt for the node where /proc/stat could not be read.
struct OthersOnCpus {
  double pods_s = 0;
  std::optional<double> node_s;
  // Idle pods' CPU-seconds on those CPUs (see the top): in neither part, kept to say so.
  double idle_pods_s = 0;
};
// Splits s.wait_s (see the top of this file): behind_others_s = min(w, pods + node, n·dt − u),
// behind_pods_s = min(that, pods). Without the node's figure, o is not bounded by it.
void SplitWait(PodSample& s, size_t cpus, const OthersOnCpus& others);

// The GPU time one interval lost to its feeders' wait behind others; nullopt without a GPU
// reading or where the wait was not measured (WaitSource::kUnknown).
std::optional<GpuLost> GpuLostIn(const PodSample& s);

// Whether the pod waited behind others in an interval enough to name who ran meanwhile: at least
// 1 % of it (after SplitWait).
bool WaitedIn(const PodSample& s);

// Another cgroup's CPU time over one interval and the CPUs it may use.
struct CgroupUsage {
  std::string contender;  // pod uid
  double cpu_s = 0;
  CpuSet cpus;
  bool idle = false;  // its cgroup's cpu.idle is 1 (see the top of this file)
};
// Who ran on `cpus` (the observed pod's allowed CPUs) during the interval: each other pod's usage
// × |its CPUs ∩ cpus| / |its CPUs| (its usage taken as spread evenly over the CPUs it may use),
// and the node's busy time on `cpus` (/proc/stat; nullopt: not read) less the observed pod's own
// use and all those shares as kNodeContender. An idle pod's share goes to total.idle_pods_s only:
// not a contender, not the node's. `top`: most first, at most `top_k`, entries below
// 1 ms dropped; `total`: every share, none dropped.
struct ContentionOnCpus {
  std::vector<Contention> top;
  OthersOnCpus total;
};
ContentionOnCpus ContendersOn(const CpuSet& cpus, double own_cpu_s,
                              const std::vector<CgroupUsage>& others,
                              std::optional<double> node_busy_on_cpus_s, size_t top_k);

struct Summary {
  double window_s = 0;  // covered by samples (≤ the window asked for)
  double wait_s = 0;
  double wait_fraction = 0;                       // wait_s / window_s
  double behind_others_s = 0, behind_pods_s = 0;  // of wait_s (SplitWait)
  // Of the newest sample; kUnknown where any sample in the window was not measured (wait_s then
  // sums the measured ones only: the window's wait is not known).
  std::optional<WaitSource> source;
  double cpu_s = 0, throttled_s = 0;
  std::optional<double> gpu_busy;  // time-weighted over the intervals that had a reading
  std::optional<GpuLost> gpu_lost;
  std::vector<Contention> contenders;  // summed over the intervals it waited, most first, top k
};

class PodWindows {
 public:
  // `period`: the sampling interval; `horizon`: the longest window kept; `top_k`: contenders kept
  // per sample and per summary.
  PodWindows(std::chrono::seconds period, std::chrono::seconds horizon, size_t top_k);
  void Add(PodSample s);
  // The newest samples covering up to `window`.
  Summary Over(std::chrono::seconds window) const;
  size_t samples() const { return samples_.size(); }

 private:
  size_t capacity_;
  size_t top_k_;
  std::deque<PodSample> samples_;
};

}  // namespace feedguard::agent::observe
