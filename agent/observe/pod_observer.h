// pod_observer.h — one GPU pod observed: each interval its counters are read through the
// Cgroups interface (CPU used and throttled, cpu.pressure where the cgroup has it, the CPUs it
// may use) and, where it has no PSI, its tasks' run delay (/proc schedstat); the difference from
// the last reading is the interval's PodSample. The node-level sampler adds the GPU reading and
// the contenders (ContendersOn) before the sample goes into the pod's windows.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "agent/cgroup/cgroups.h"
#include "agent/observe/counters.h"
#include "agent/observe/schedstat.h"
#include "agent/observe/starvation.h"
#include "feedguard/common/status.h"

namespace feedguard::agent::observe {

// The pod's cumulative counters now (no PSI: psi_some_s empty).
Result<PodCounters> ReadPodCounters(const cgroup::Cgroups& cgroups, const cgroup::CgroupPaths& pod);

// Every process of the pod: kubelet's pod cgroup holds none itself (they sit in its containers'
// cgroups and below, e.g. crun's "container" child), so each cgroup.procs of the pod's subtree
// under the cpu mount. The pids are as the reader's PID namespace numbers them: an agent in a
// PID namespace of its own gets none of another pod's — there the host's procfs is scanned
// instead (host_tasks.h; NodeObserver chooses).
Result<std::vector<int>> ListPodPids(const cgroup::Cgroups& cgroups,
                                     const cgroup::CgroupPaths& pod);

class PodObserver {
 public:
  // `pod`: the pod cgroup's directories; `proc_root`: /proc (tests: a fixture).
  PodObserver(cgroup::CgroupPaths pod, std::string proc_root);

  // Reads the counters; returns the interval since the previous successful Read, `dt_s` long
  // (nullopt on the first). A failed read (the pod went away) leaves the previous reading.
  // Without PSI the wait is the run delay of the tasks of `pids` (processes as `proc_root`
  // numbers them: the host scan's), or with nullopt of those ListPodPids finds; none seen while
  // the pod used CPU makes the interval's wait WaitSource::kUnknown.
  Result<std::optional<PodSample>> Read(const cgroup::Cgroups& cgroups, double dt_s,
                                        std::optional<std::vector<int>> pids = std::nullopt);
  // Whether the last reading had PSI; nullopt before the first.
  std::optional<bool> had_psi() const {
    return last_ ? std::optional<bool>(last_->psi_some_s.has_value()) : std::nullopt;
  }
  // The CPUs the pod may use, as of the last reading.
  const CpuSet& cpus() const { return last_ ? last_->cpus : empty_; }
  const cgroup::CgroupPaths& dirs() const { return pod_; }

 private:
  cgroup::CgroupPaths pod_;
  std::string proc_root_;
  std::optional<PodCounters> last_;
  RunDelayTracker run_delay_;
  CpuSet empty_;
};

}  // namespace feedguard::agent::observe
