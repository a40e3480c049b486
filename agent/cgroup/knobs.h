// knobs.h — the one owner of each CPU knob's write and restore semantics on cgroup v1 and v2.
//
// The enforcer decides *what* a pod should hold (idle, a weight, a quota, a cpuset) and keeps
// the journal; this table decides *how* that lands in files: which file(s) a version-neutral
// value goes to and in which order, which other files the kernel changes as a side effect of a
// write, and in which order recorded originals are put back. Pure functions: current file
// contents come in through a read callback, nothing is written here.
//
// Kernel rules encoded here (kernel_facts.h has the names):
//   * weight: v2 `cpu.weight` 1..10000; v1 `cpu.shares`, converted with kubelet's map.
//   * idle: `cpu.idle` 0/1 on both versions. Writing it resets the group's weight (1 → the
//     minimum: v1 shares read 3, v2 weight reads 0 or 1; 0 → the default 1024 / 100), and while
//     it is 1 the kernel refuses weight writes (EINVAL). So a weight is restored after idle.
//   * quota: v2 `cpu.max` "<quota|max> <period>" (clamped to the parent's, never refused);
//     v1 `cpu.cfs_quota_us` + `cpu.cfs_period_us`, checked as a ratio against parent and
//     children: a parent below a child, or a child above its parent, is EINVAL. An unlimited
//     quota (-1) is always accepted, so v1 changes go through it when a period changes, and a
//     pod-level quota fence first lifts children whose own limit is above it.
//   * burst: v2 `cpu.max.burst` / v1 `cpu.cfs_burst_us` (µs, kernel ≥ 5.14), per group. Both
//     versions refuse (EINVAL) a finite quota below the group's burst and a burst above its
//     quota. A quota fence lowers the burst to 0 first (a fence caps every period; a burst would
//     let the neighbour spend saved quota on top of the cap, exactly the spikes a trainer
//     feels), journaled like any knob; restores put the burst back last, after the quota.
//   * cpuset: v1 refuses a set outside the parent's (EACCES) and a parent change that strands a
//     child (EBUSY): grow parents first, shrink children first (cpuset_order.h plans the
//     forward writes; OrderRestores does the same for a restore).
//
// Example:
//   auto w = CpuKnobWrites(CgroupVersion::kV1, pod_dir, {.idle = true}, read);
//   // → {pod_dir/cpu.idle = "1"}; SideEffectOf(kV1, pod_dir + "/cpu.idle", "1")
//   // → {pod_dir/cpu.shares, {"3"}}: checkpoint it before the write.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/cgroup/cgroups.h"
#include "agent/cgroup/kernel_facts.h"
#include "agent/pod/pod.h"
#include "feedguard/common/status.h"

namespace feedguard::agent::cgroup {

// A cgroup's CPU-controller knobs, version neutral (weight on the v2 scale 1..10000).
// Unset fields are left as they are.
struct CpuKnobs {
  std::optional<bool> idle;
  std::optional<uint64_t> weight;
  std::optional<CpuQuota> quota;
};

// One ordered write. `force`: write even if the file already holds the value (a v1 quota
// re-set after its period changed underneath it).
struct KnobWrite {
  std::string path;
  std::string value;
  bool force = false;
  friend bool operator==(const KnobWrite&, const KnobWrite&) = default;
};

// Reads a file's current bytes (the enforcer passes its cached reader).
using ReadFn = std::function<Result<std::string>(const std::string& path)>;

// The weight file of a cpu dir on this version ("cpu.shares" / "cpu.weight").
std::string WeightFile(CgroupVersion v, const std::string& cpu_dir);
// The file holding a dir's quota ("cpu.cfs_quota_us" / "cpu.max").
std::string QuotaFile(CgroupVersion v, const std::string& cpu_dir);
// The file holding a dir's CFS burst ("cpu.cfs_burst_us" / "cpu.max.burst").
std::string BurstFile(CgroupVersion v, const std::string& cpu_dir);
// The bytes that make the weight file hold `weight` (v2 scale): v1 shares by kubelet's map.
std::string WeightValue(CgroupVersion v, uint64_t weight);

// The ordered writes that make `cpu_dir` hold `want`. A finite quota: the burst to 0 first
// (when the kernel has the file). v1 quota: period before quota; when the period changes under a
// set quota the quota goes through unlimited first. Fails (with the read error) only when a file
// the ordering needs cannot be read (a burst file that does not exist is no error).
Result<std::vector<KnobWrite>> CpuKnobWrites(CgroupVersion v, const std::string& cpu_dir,
                                             const CpuKnobs& want, const ReadFn& read);

// v1 only (v2 clamps instead): the writes that let a quota fence `fence` land on a pod whose
// containers (their cpu dirs, parents before children) hold a limit above it. Each such dir is
// set to unlimited, deepest first, so it inherits the pod's fence; a dir that cannot be read is
// skipped (the pod write then reports the kernel's refusal). Empty on v2.
std::vector<KnobWrite> LiftChildQuotas(CgroupVersion v, const std::vector<std::string>& child_dirs,
                                       const CpuQuota& fence, const ReadFn& read);

// What the kernel does to other files when `value` lands in `path`: cpu.idle resets the weight.
// `values` are every value the other file may then read, the expected one first.
struct SideEffect {
  std::string path;
  std::vector<std::string> values;
};
std::optional<SideEffect> SideEffectOf(CgroupVersion v, const std::string& path,
                                       std::string_view value);
// True if `value` in weight file `path` is what the kernel leaves there when the group leaves
// idle (the default weight) — written by nobody: whoever set cpu.idle=0 (systemd re-applying a
// unit does, then writes the unit's weight) caused it. Never another writer's value to adopt.
bool IsWeightResetByLeavingIdle(CgroupVersion v, const std::string& path, std::string_view value);

// A file to put back: its recorded original and what it holds now.
struct RestoreItem {
  std::string path;
  std::string original;
  std::string current;
};
// The ordered writes that put every item back, never passing through a state the kernel
// refuses: cpusets grown top-down to current ∪ original, then set bottom-up to the original;
// v1 bandwidth per dir, parents first (unlimited, period, quota when the period changes);
// cpu.idle; then weights and everything else; bursts last (after their quota). A weight file in the
// same dir as an idle item is written after it even if it holds its original now (leaving idle
// resets it): callers pass such weight files with current == original. Values that are not
// originals (unions, unlimited) are intermediates the caller must journal before writing
// (IntermediatesOf).
std::vector<FileWrite> OrderRestores(CgroupVersion v, const std::vector<RestoreItem>& items);
// cgroup v2: an empty cpuset.cpus / cpuset.mems original means "the parent's", which the kernel
// refuses to restore on a cgroup with tasks (ENOSPC). For each such item, the set it inherited:
// the effective set of the nearest ancestor that `items` does not restore (read through `read`).
// path → value to write instead when the empty write is refused. Empty on v1.
std::map<std::string, std::string> InheritedCpusets(CgroupVersion v,
                                                    const std::vector<RestoreItem>& items,
                                                    const ReadFn& read);
// cgroup v2: the two writes into `dir`'s cgroup.subtree_control (cpuset off, then on) that give
// every child of `dir` an empty cpuset.cpus and cpuset.mems again — the exact bytes a populated
// child cannot get back by writing "" (kernel_facts.h, kCpusetOff). Whatever else a child's sets
// held is lost too, so callers use it only when every child's sets are empty or being restored
// to empty. An interrupted pair is finished by the second write alone (.back()).
std::vector<FileWrite> CpusetResetWrites(const std::string& dir);
// The dir whose cgroup.subtree_control resets cpuset file `file` (its cgroup's parent: the pod dir
// for a container's file).
std::string CpusetResetDirOf(const std::string& file);
// Whether cgroup.subtree_control / cgroup.controllers contents list the cpuset controller.
bool ListsCpuset(std::string_view controllers);
// Every value a restore sequence passes through for a file besides its original: the
// intermediates written, and each side effect of the sequence's writes. path → values.
std::vector<std::pair<std::string, std::string>> IntermediatesOf(
    CgroupVersion v, const std::vector<RestoreItem>& items, const std::vector<FileWrite>& writes);

// True if two contents of knob file `file` mean the same value (whitespace-insensitive;
// cpuset lists compared as sets, so "0,1,2" equals "0-2\n").
bool KnobValuesEquivalent(const std::string& file, const std::string& a, const std::string& b);
bool IsCpusetFile(const std::string& path);
bool IsIdleFile(const std::string& path);
bool IsWeightFile(const std::string& path);
// CFS bandwidth: cpu.cfs_quota_us / cpu.cfs_period_us / cpu.cfs_burst_us (v1), cpu.max /
// cpu.max.burst (v2).
bool IsBandwidthFile(const std::string& path);
bool IsBurstFile(const std::string& path);
// True if `path` names a file this table writes on version `v`: cpu.idle, the weight
// (cpu.shares / cpu.weight), the quota (cpu.cfs_quota_us + cpu.cfs_period_us / cpu.max), the
// burst (cpu.cfs_burst_us / cpu.max.burst), cpuset.cpus, cpuset.mems. Nothing else is ever a
// fence's to write: the enforcer refuses any other name, e.g. a tampered checkpoint entry for a
// pod's cgroup.procs (writing a PID there would move a process).
bool IsKnobFile(CgroupVersion v, const std::string& path);

}  // namespace feedguard::agent::cgroup
