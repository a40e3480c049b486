// host_tasks.h — which processes belong to which observed pod, found in a procfs of the host's
// PID namespace (the chart mounts the host's /proc read-only at /host/proc; `run --host-proc`)
// where the agent's own PID namespace hides them (docs/DESIGN.md §4b).
//
// Without per-cgroup PSI (cgroup v1, or v2 booted with psi=0) a pod's wait is its tasks' run
// delay (schedstat.h). The agent has no hostPID, so a pod cgroup's cgroup.procs, read from the
// agent's PID namespace, names none of another pod's processes. The host's procfs numbers every
// process, and each one's /proc/<pid>/cgroup names its cgroup: one scan per observation step (not
// per pod) reads them all, at most kMaxScannedPids, and gives each process to the observed pod
// whose cgroup is its cgroup or an ancestor of it (a container, crun's "container" child below
// it, anything deeper). Processes that exit meanwhile are skipped; nothing is written.
//
// Cgroup namespaces: /proc/<pid>/cgroup shows a path relative to the READER's cgroup-namespace
// root. In the host's namespace (v1 with containerd: the agent normally shares it) that is the
// host path the Cgroups layer knows (relative to the mount). In a private one (v2's default for
// containers) a cgroup outside the reader's shows as "/../../<rest>" (up from the reader's root to
// the common ancestor, then down): resolved against where the reader's namespace is rooted,
// found once as the cgroup below kubepods whose cgroup.procs lists the agent itself (its own
// /proc/self/cgroup then says how far below that root it sits). Not covered: a reader whose
// namespace root is not below kubepods (an agent run outside a pod, in a private namespace):
// its ".." paths stay unplaced (HostTaskScan::unplaced) and those pods' waits read as unknown.
//
// Example:
//   if (!ProcRootIsOwnPidNamespace("/host/proc")) {   // the agent in its own PID namespace
//     HostTasks tasks("/host/proc", layout);
//     auto scan = tasks.Scan({{uid, "kubepods.slice/kubepods-burstable.slice/"
//                                   "kubepods-burstable-pod<U>.slice"}});
//     if (scan.ok()) delays = ReadRunDelays("/host/proc", scan->pids[uid]);
//   }
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/cgroup/cgroups.h"
#include "feedguard/common/status.h"

namespace feedguard::agent::observe {

// Entries of the proc root read per scan, at most: a node with more processes has the rest
// unscanned (HostTaskScan::truncated), and the pods whose processes were among them read less.
inline constexpr size_t kMaxScannedPids = 65'536;

// The cpu hierarchy's path in a /proc/<pid>/cgroup text: v1 the line whose controller list holds
// "cpu" (else "cpuacct"), e.g. "4:cpu,cpuacct:/kubepods/burstable/pod<U>/<id>"; v2 the "0::"
// line. nullopt where there is none.
std::optional<std::string_view> CpuCgroupOf(std::string_view proc_pid_cgroup,
                                            cgroup::CgroupVersion version);

// A path as /proc/<pid>/cgroup shows it, made relative to the hierarchy's root (no leading '/',
// "" for the root itself): `ns_root` is where the reader's cgroup namespace is rooted, relative
// to the hierarchy's root ("" in the host's namespace). nullopt for a path that climbs above
// the root (a wrong `ns_root`).
//   ResolveCgroupPath("/kubepods/pod1/c1", "")                     → "kubepods/pod1/c1"
//   ResolveCgroupPath("/../../kubepods-burstable.slice/p.slice", "kubepods.slice/a.slice/b.scope")
//                                          → "kubepods.slice/kubepods-burstable.slice/p.slice"
//   (the reader's root two below kubepods.slice: up two to it, then down)
std::optional<std::string> ResolveCgroupPath(std::string_view shown, std::string_view ns_root);

// Whether `proc_root` is a procfs of this process's own PID namespace: its "self" names the pid
// getpid() gives. Then it numbers pids as cgroup.procs does when this process reads it; else
// (the host's /proc mounted in the agent's container, or a test's fixture) it does not.
bool ProcRootIsOwnPidNamespace(const std::string& proc_root);

struct HostTaskScan {
  std::map<std::string, std::vector<int>> pids;  // by pod uid: its processes, as proc_root numbers
  size_t processes = 0;                          // entries of proc_root read
  bool truncated = false;                        // stopped at the bound
  size_t unplaced = 0;  // outside the reader's cgroup namespace, which could not be placed
};

class HostTasks {
 public:
  // `proc_root`: the host's procfs; `layout`: the node's cgroups as the Cgroups layer has them
  // (its version picks the line; its cpu mount and kubepods path are where the agent's own cgroup
  // is looked for); `self_pid`: this process as its own PID namespace numbers it (getpid()).
  HostTasks(std::string proc_root, cgroup::CgroupLayout layout, int self_pid,
            size_t max_pids = kMaxScannedPids);

  // One scan: every process of `pods` (uid → its pod cgroup's path relative to the hierarchy's
  // root, as PodRelPath gives it). An error only where `proc_root` cannot be listed at all.
  // Never throws.
  Result<HostTaskScan> Scan(const std::map<std::string, std::string>& pods);

  // Where this process's cgroup namespace is rooted, once a ".." path needed it and it was found.
  const std::optional<std::string>& ns_root() const { return ns_root_; }

 private:
  Result<HostTaskScan> ScanOrThrow(const std::map<std::string, std::string>& pods);
  std::optional<std::string> FindNsRoot() const;

  const std::string proc_root_;
  const cgroup::CgroupLayout layout_;
  const int self_pid_;
  const size_t max_pids_;
  std::optional<std::string> ns_root_;  // found once, kept: a container's cgroup does not move
};

}  // namespace feedguard::agent::observe
