// cgroups.h — the agent's pure interface to pod cgroups: resolve a pod to its directories,
// read and write raw bytes of its files, plan ordered cpuset-tree writes, observe usage/PSI.
//
// One implementation (fs_cgroups.h) works on any directory tree: real cgroup v1 mounts, the
// v2 unified mount, or plain directories in a temp dir that stand in for them in unit tests.
// This layer holds no CPU-knob semantics: which file(s) a version-neutral weight, idle flag or
// quota lands in, converted how and in which order (v1 period before quota, through unlimited
// when the period changes; the burst lowered before a quota), is knobs.h's alone (CpuKnobWrites,
// LiftChildQuotas, OrderRestores); its writes land through WriteRaw (the enforcer, journaled one
// by one) or ApplyWrites. Write errors map errno to Status codes (WriteErrnoToStatus,
// fs_cgroups.h):
//   EINVAL/ERANGE → InvalidArgument (e.g. v1 child quota above its parent),
//   EACCES on cpuset files → PermissionDenied "... not a subset of parent's ...",
//   EBUSY → FailedPrecondition (a parent change would strand a child),
//   ENOENT → NotFound, a missing cpu.idle → Unimplemented "kernel lacks cpu.idle (needs ≥ 5.15)".
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/cgroup/kernel_facts.h"
#include "agent/cgroup/kubelet_facts.h"
#include "agent/pod/pod.h"
#include "common/cpuset.h"
#include "feedguard/common/enum_names.h"
#include "feedguard/common/status.h"

namespace feedguard::agent::cgroup {

// The directories (absolute paths) of one cgroup for each controller the agent uses.
// On v2 all three are the same directory.
struct CgroupPaths {
  std::string cpu;      // cpu.shares / cpu.weight, cpu.idle, quota, burst, cpu.stat
  std::string cpuacct;  // cpuacct.usage (v1)
  std::string cpuset;   // cpuset.cpus, cpuset.mems
  friend bool operator==(const CgroupPaths&, const CgroupPaths&) = default;
};

struct ResolvedContainer {
  std::string container_id;  // as given in PodIdentity ("containerd://<id>")
  CgroupPaths dirs;
  // Child cgroups below the container dir that hold processes (crun's "container" child).
  std::vector<CgroupPaths> children;
};

struct ResolvedPod {
  std::string uid;
  CgroupPaths dirs;
  std::vector<ResolvedContainer> containers;
};

// What the kernel under this tree supports.
struct Capabilities {
  bool cpu_idle = false;  // cpu.idle exists (kernel ≥ 5.15)
  bool burst = false;     // cpu.max.burst / cpu.cfs_burst_us
  bool psi = false;       // per-cgroup cpu.pressure
  friend bool operator==(const Capabilities&, const Capabilities&) = default;
};

// Everything the implementation needs to know about the host (detect.h fills it).
struct CgroupLayout {
  CgroupVersion version = CgroupVersion::kV1;
  // Absolute mount points. v2: all three are the unified mount. v1: cpu and cpuacct may be the
  // same directory when co-mounted ("cpu,cpuacct").
  std::string cpu_mount;
  std::string cpuacct_mount;
  std::string cpuset_mount;
  KubeletDriver driver = KubeletDriver::kSystemd;
  std::string cgroup_root;         // normalised (NormalizeCgroupRoot)
  std::optional<Runtime> runtime;  // for container ids without a scheme
  Capabilities caps;
};

// The version-neutral CPU knobs.
enum class Knob { kWeight, kIdle, kQuota, kBurst, kCpusetCpus, kCpusetMems };
inline constexpr EnumNames<Knob, 6> kKnobNames{{{Knob::kWeight, "weight"},
                                                {Knob::kIdle, "idle"},
                                                {Knob::kQuota, "quota"},
                                                {Knob::kBurst, "burst"},
                                                {Knob::kCpusetCpus, "cpus"},
                                                {Knob::kCpusetMems, "mems"}}};
static_assert(EnumTableComplete(kKnobNames));
std::string_view KnobName(Knob k);  // "weight", "idle", "quota", "burst", "cpus", "mems"

// One raw file write (used for ordered multi-file operations, e.g. cpuset trees).
struct FileWrite {
  std::string path;
  std::string value;
  friend bool operator==(const FileWrite&, const FileWrite&) = default;
};

struct CpuUsage {
  uint64_t usage_ns = 0;  // v1 cpuacct.usage; v2 cpu.stat usage_usec * 1000
  uint64_t nr_periods = 0;
  uint64_t nr_throttled = 0;
  uint64_t throttled_ns = 0;
  // The dir's cpu.idle reads 1 (kernel_facts.h: SCHED_IDLE for the group); false where the file
  // is missing (kernels < 5.15) or unreadable.
  bool idle = false;
};

struct PressureLine {
  double avg10 = 0, avg60 = 0, avg300 = 0;
  uint64_t total_us = 0;
};
struct CpuPressure {
  PressureLine some;
  std::optional<PressureLine> full;
};
// Parses the PSI format ("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull ...").
Result<CpuPressure> ParsePressure(std::string_view text);

class Cgroups {
 public:
  virtual ~Cgroups() = default;

  virtual const CgroupLayout& layout() const = 0;

  // Finds the pod's cgroup and each of its containers' cgroups (per controller on v1).
  // NotFound naming the path tried when the pod dir or a container dir does not exist.
  virtual Result<ResolvedPod> ResolvePod(const PodIdentity& pod) const = 0;
  // True for kubepods itself and the QoS-tier dirs (and anything above them): kubelet owns
  // and rewrites those, the enforcer must refuse to write them.
  virtual bool IsKubeletOwned(const std::string& dir) const = 0;

  // The files a knob lives in, in the order a knob's writes touch them — so a test or a caller
  // can checkpoint exact bytes first. v1 kQuota → {cfs_quota_us, cfs_period_us}; v2 → {cpu.max}.
  virtual std::vector<std::string> KnobFiles(const CgroupPaths& dirs, Knob knob) const = 0;

  // Raw bytes, exactly as the kernel returns / as given (one write(2) call, no newline added).
  // Refuses (PermissionDenied) to write kubelet's tiers (IsKubeletOwned).
  virtual Result<std::string> ReadRaw(const std::string& file) const = 0;
  virtual Status WriteRaw(const std::string& file, std::string_view bytes) = 0;

  // The usable CPUs of one dir (v1 cpuset.effective_cpus, v2 cpuset.cpus.effective).
  virtual Result<CpuSet> ReadEffectiveCpus(const CgroupPaths& dirs) const = 0;

  // The ordered writes that set `dirs.cpuset` (v1 only, see ChildDirs) and every cgroup below
  // it to `target`
  // (knob = kCpusetCpus or kCpusetMems) without violating v1's rules: growing → parents first,
  // shrinking → children first, mixed → grow parents to the union, set children, shrink
  // parents. Reads the current tree; writes nothing. Dirs already at `target` are skipped.
  virtual Result<std::vector<FileWrite>> PlanCpusetTree(const CgroupPaths& dirs, Knob knob,
                                                        const CpuSet& target) const = 0;
  // The cpuset file (knob = kCpusetCpus or kCpusetMems) of `dirs.cpuset` (v1 only) and of every
  // cgroup below it — also those no container names, such as the sandbox (pause) container's —
  // parents first. Reads only.
  virtual Result<std::vector<std::string>> CpusetTreeFiles(const CgroupPaths& dirs,
                                                           Knob knob) const = 0;
  // cgroup v2 cpusets of a pod are written in its child dirs only (containers, the sandbox and
  // what is below them), never in the pod's own dir: an emptied child set comes back exactly
  // through the pod dir's cgroup.subtree_control (CpusetResetWrites, knobs.h), the pod's own
  // only through its QoS tier's, which every pod shares. v1 writes the pod dir too (a child must
  // be a subset of its parent there). The names of the dirs directly below `dir`, sorted.
  virtual Result<std::vector<std::string>> ChildDirs(const std::string& dir) const = 0;
  // Applies writes in order; stops at the first failure and returns it (annotated with the
  // index reached). PlanCpusetTree + ApplyWrites sets a cpuset tree; CpuKnobWrites (knobs.h)
  // + ApplyWrites sets a cpu dir's weight, idle flag and quota.
  virtual Status ApplyWrites(const std::vector<FileWrite>& writes) = 0;

  // Observation.
  virtual Result<CpuUsage> ReadUsage(const CgroupPaths& dirs) const = 0;
  // nullopt when the kernel does not expose per-cgroup cpu.pressure here.
  virtual Result<std::optional<CpuPressure>> ReadPressure(const CgroupPaths& dirs) const = 0;
  virtual Result<std::vector<int>> ListPids(const CgroupPaths& dirs) const = 0;  // cgroup.procs
};
using CgroupsPtr = std::shared_ptr<Cgroups>;

}  // namespace feedguard::agent::cgroup
