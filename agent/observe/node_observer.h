// node_observer.h — every observed GPU pod on the node, one interval at a time: each pod's
// sample (PodObserver), the CPU time every other pod cgroup and the node itself took on its CPUs
// while it waited (ContendersOn, from per-cgroup usage deltas and /proc/stat), its GPUs' busy
// fraction (given by the caller: NVML), into its windows. Reads only; writes nothing anywhere.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/cgroup/cgroups.h"
#include "agent/observe/host_tasks.h"
#include "agent/observe/pod_observer.h"
#include "agent/observe/starvation.h"

namespace feedguard::agent::observe {

// Every pod cgroup kubelet made on this node, by pod uid (the Guaranteed pods directly in
// kubepods, the burstable and besteffort tiers), found by their directory names
// (PodUidFromDirName) under the cpu mount: the path relative to the mounts (PodRelPath's form),
// and the directories.
std::map<std::string, std::string> ListPodCgroupRelPaths(const cgroup::CgroupLayout& layout);
std::map<std::string, cgroup::CgroupPaths> ListPodCgroups(const cgroup::CgroupLayout& layout);

// Where a pod without PSI has its tasks listed from.
enum class TaskLookup : uint8_t {
  // kProcScan unless `proc_root` is this process's own PID namespace's procfs
  // (ProcRootIsOwnPidNamespace): decided once, when the observer is made.
  kAuto,
  kCgroupProcs,  // the pod subtree's cgroup.procs (ListPodPids): pids as this process numbers them
  kProcScan,     // every <proc_root>/<pid>/cgroup, once per step for all pods (HostTasks)
};

struct NodeObserverOptions {
  std::chrono::seconds period{10};
  std::chrono::seconds horizon{3600};
  size_t top_k = 5;
  // /proc/stat and the tasks' schedstat; in the agent's pod the host's procfs (--host-proc).
  std::string proc_root = "/proc";
  long user_hz = 100;  // sysconf(_SC_CLK_TCK)
  TaskLookup tasks = TaskLookup::kAuto;
  size_t max_scanned_pids = kMaxScannedPids;
};

class NodeObserver {
 public:
  NodeObserver(const cgroup::Cgroups* cgroups, cgroup::CgroupLayout layout,
               NodeObserverOptions options);
  // The GPU pods to observe, by uid (their cgroups are found on the node); others are dropped
  // with their windows.
  void Observe(const std::vector<std::string>& uids);
  // One interval `dt_s` long; `gpu_busy`: each pod's GPUs' busy fraction over it, where known.
  // Returns what could not be read (a pod not found yet, a read that failed), one line each; a
  // pod whose wait could not be measured (WaitSource::kUnknown) and a scan of the proc root that
  // fell short are said once each, when they start.
  std::vector<std::string> Step(double dt_s, const std::map<std::string, double>& gpu_busy);
  // Each observed pod's summary over `window` (pods with no interval yet are left out).
  std::map<std::string, Summary> Summaries(std::chrono::seconds window) const;
  // The samples the last Step added, by pod uid (a pod that got none, a baseline or a failed
  // read, is absent): what cumulative counters add up.
  const std::map<std::string, PodSample>& last_samples() const { return last_samples_; }

 private:
  struct Observed {
    std::unique_ptr<PodObserver> reader;  // null until its cgroup is found
    PodWindows windows;
    bool unmeasured_said = false;  // its kUnknown intervals were said; again after a measured one
  };
  struct OtherUsage {
    double cpu_s = 0;  // cumulative
    CpuSet cpus;
    bool idle = false;  // cpu.idle = 1 now
  };

  // Processes by observed pod from one scan of the proc root (kProcScan), for the pods that
  // need them (no PSI in their last reading, or none yet on a node without PSI).
  std::map<std::string, std::vector<int>> ScanTasks(const std::map<std::string, std::string>& rel,
                                                    std::vector<std::string>& problems);

  const cgroup::Cgroups* const cgroups_;
  const cgroup::CgroupLayout layout_;
  const NodeObserverOptions options_;
  std::unique_ptr<HostTasks> host_tasks_;  // null: kCgroupProcs
  std::string scan_said_;                  // the scan's shortfall as last said ("" when none)
  std::map<std::string, Observed> pods_;
  std::map<std::string, PodSample> last_samples_;
  std::map<std::string, OtherUsage> last_usage_;  // every pod cgroup, by uid
  std::optional<std::map<int, double>> last_busy_;
};

}  // namespace feedguard::agent::observe
