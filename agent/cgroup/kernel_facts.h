// kernel_facts.h — the one place for cgroup kernel facts: interface file names per cgroup
// version, value ranges and defaults, filesystem magic numbers and keywords (docs/DESIGN.md §4).
//
// Nothing else in the tree spells a cgroup file name; it names the constant here.
#pragma once

#include <cstdint>
#include <string_view>

#include "feedguard/common/enum_names.h"

namespace feedguard::agent::cgroup {

enum class CgroupVersion { kV1, kV2 };
inline constexpr EnumNames<CgroupVersion, 2> kCgroupVersionNames{
    {{CgroupVersion::kV1, "v1"}, {CgroupVersion::kV2, "v2"}}};
static_assert(EnumTableComplete(kCgroupVersionNames));
inline constexpr std::string_view CgroupVersionName(CgroupVersion v) {
  return NameOf(kCgroupVersionNames, v, "v2");
}

// statfs(2) f_type of a cgroup mount (linux/magic.h).
inline constexpr int64_t kCgroupSuperMagic = 0x27e0eb;     // CGROUP_SUPER_MAGIC (v1)
inline constexpr int64_t kCgroup2SuperMagic = 0x63677270;  // CGROUP2_SUPER_MAGIC ("cgrp")

// mountinfo filesystem types.
inline constexpr std::string_view kFsTypeV1 = "cgroup";
inline constexpr std::string_view kFsTypeV2 = "cgroup2";

// v1 controller names as they appear in mount options and under /sys/fs/cgroup.
inline constexpr std::string_view kControllerCpu = "cpu";
inline constexpr std::string_view kControllerCpuacct = "cpuacct";
inline constexpr std::string_view kControllerCpuset = "cpuset";

// cpu.stat keys both versions write (cpu.stat is the cpu controller's file in each).
inline constexpr std::string_view kStatNrPeriods = "nr_periods";
inline constexpr std::string_view kStatNrThrottled = "nr_throttled";

namespace v2 {
inline constexpr std::string_view kWeight = "cpu.weight";
inline constexpr std::string_view kIdle = "cpu.idle";
inline constexpr std::string_view kMax = "cpu.max";  // "<quota|max> <period>"
inline constexpr std::string_view kMaxBurst = "cpu.max.burst";
inline constexpr std::string_view kCpusetCpus = "cpuset.cpus";
inline constexpr std::string_view kCpusetMems = "cpuset.mems";
inline constexpr std::string_view kCpusetCpusEffective = "cpuset.cpus.effective";
inline constexpr std::string_view kCpusetMemsEffective = "cpuset.mems.effective";
inline constexpr std::string_view kCpuPressure = "cpu.pressure";
inline constexpr std::string_view kCpuStat = "cpu.stat";
inline constexpr std::string_view kProcs = "cgroup.procs";
inline constexpr std::string_view kControllers = "cgroup.controllers";
inline constexpr std::string_view kSubtreeControl = "cgroup.subtree_control";
inline constexpr std::string_view kMaxKeyword = "max";  // unlimited quota in cpu.max
// The cpuset controller's name in cgroup.controllers / cgroup.subtree_control, and the two
// writes that turn it off and on for a dir's children. Turning it off drops every child's cpuset
// state (its tasks run on the dir's effective set); turning it on makes it afresh with empty
// cpuset.cpus / cpuset.mems ("the parent's"). It is the one way a populated child gets its empty
// set back (measured on 6.1: tests/vm/probes/cpuset_empty_again.sh). The kernel refuses the off
// write (EBUSY) while a child has cpuset on in its own subtree_control.
inline constexpr std::string_view kCpusetController = "cpuset";
inline constexpr std::string_view kCpusetOff = "-cpuset";
inline constexpr std::string_view kCpusetOn = "+cpuset";
// cpu.stat keys of v2 alone (kStatNrPeriods, kStatNrThrottled: both versions).
inline constexpr std::string_view kStatUsageUsec = "usage_usec";
inline constexpr std::string_view kStatThrottledUsec = "throttled_usec";

inline constexpr uint64_t kWeightMin = 1;
inline constexpr uint64_t kWeightMax = 10000;
inline constexpr uint64_t kWeightDefault = 100;
}  // namespace v2

namespace v1 {
inline constexpr std::string_view kShares = "cpu.shares";
inline constexpr std::string_view kIdle = "cpu.idle";
inline constexpr std::string_view kCfsQuotaUs = "cpu.cfs_quota_us";  // -1 = unlimited
inline constexpr std::string_view kCfsPeriodUs = "cpu.cfs_period_us";
inline constexpr std::string_view kCfsBurstUs = "cpu.cfs_burst_us";
inline constexpr std::string_view kCpusetCpus = "cpuset.cpus";
inline constexpr std::string_view kCpusetMems = "cpuset.mems";
inline constexpr std::string_view kCpusetEffectiveCpus = "cpuset.effective_cpus";
inline constexpr std::string_view kCpuacctUsage = "cpuacct.usage";  // nanoseconds
inline constexpr std::string_view kCpuStat = "cpu.stat";
inline constexpr std::string_view kTasks = "tasks";
inline constexpr std::string_view kProcs = "cgroup.procs";
inline constexpr std::string_view kCpuPressure = "cpu.pressure";  // only with psi v1 support
// cpu.stat key of v1 alone, in ns (kStatNrPeriods, kStatNrThrottled: both versions).
inline constexpr std::string_view kStatThrottledTime = "throttled_time";

inline constexpr uint64_t kSharesMin = 2;
inline constexpr uint64_t kSharesMax = 262144;
inline constexpr uint64_t kSharesDefault = 1024;
inline constexpr int64_t kQuotaUnlimited = -1;
}  // namespace v1

// CFS bandwidth, both versions.
inline constexpr int64_t kDefaultPeriodUs = 100000;
inline constexpr int64_t kMinQuotaUs = 1000;
inline constexpr int64_t kMinPeriodUs = 1000;
inline constexpr int64_t kMaxPeriodUs = 1000000;

// cpu.idle: kernel ≥ 5.15, v1 and v2; 0 or 1. While a group is idle the kernel rejects writes
// of cpu.shares / cpu.weight with EINVAL (sched_group_set_shares on an idle group), so a revert
// must clear cpu.idle before restoring the weight. Measured on this project's 6.18 host (v1)
// and on the 6.1 cloud kernel in the qemu VM (v2): there cpu.weight of an idle group reads "0"
// (the minimum shares, 3, scaled to the weight range and rounded), writes of cpu.weight fail with
// EINVAL, and cpu.idle=0 resets cpu.weight to 100 (v1: cpu.shares to 1024).
// What an idle group does to others (kernel/sched/fair.c, check_preempt_wakeup_fair: where the
// two meet in the hierarchy, a waking entity that is not idle preempts an idle one at once; an
// idle group weighs the minimum, 3): its tasks run on time its non-idle siblings leave, so the
// observer (agent/observe/starvation.h) counts an idle pod's CPU time as taken from no one.
// cpuset on v2: an empty cpuset.cpus / cpuset.mems means "use the parent's effective set"
// (kubelet leaves pod and container cgroups so). Once a populated cgroup's set is non-empty the
// kernel refuses to make it empty again while it has tasks (ENOSPC, validate_change in
// kernel/cgroup/cpuset.c): only cpuset turned off and on in the parent's subtree_control
// (kCpusetOff / kCpusetOn) gives it back, else it is restored as the inherited set.
inline constexpr std::string_view kIdleMissingMessage = "kernel lacks cpu.idle (needs ≥ 5.15)";

// cgroup v2: what an idle group's cpu.weight reads on kernels that do not clamp the read-back to
// 1..10000 (the 6.1 cloud kernel in the qemu VM). kubelet >= 1.36 (InPlacePodLevelResources-
// VerticalScaling, beta, on by default) reads a pod cgroup's cpu.weight back into
// pod.status.resources.requests.cpu through cpuWeightToCPUShares, whose (w - 1) wraps for 0
// (uint64): ~1.8e15 millicores. The scheduler and kubelet's admission take max(spec, status):
// the node looks full — new pods stay Pending, and after a kubelet restart every pod is
// rejected OutOfcpu (seen on the systemd VM node, kubelet v1.37.2, tests/vm/node_shape.sh).
inline constexpr std::string_view kIdleWeightReadsZero = "0";

}  // namespace feedguard::agent::cgroup
