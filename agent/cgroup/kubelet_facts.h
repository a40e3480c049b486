// kubelet_facts.h — the one place for kubelet facts: where kubelet puts pod and container
// cgroups for each cgroup driver, QoS class and container runtime, and the formulas kubelet
// uses to turn CPU requests/limits into cgroup values (docs/DESIGN.md §4).
//
// Paths here are relative to a controller's mount point (v1) or the unified mount (v2) and
// include the `--cgroup-root` prefix when one is given. They never start with '/'.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/cgroup/kernel_facts.h"
#include "agent/pod/pod.h"
#include "feedguard/common/enum_names.h"
#include "feedguard/common/status.h"

namespace feedguard::agent::cgroup {

enum class KubeletDriver { kSystemd, kCgroupfs };
inline constexpr EnumNames<KubeletDriver, 2> kKubeletDriverNames{
    {{KubeletDriver::kSystemd, "systemd"}, {KubeletDriver::kCgroupfs, "cgroupfs"}}};
static_assert(EnumTableComplete(kKubeletDriverNames));

enum class Runtime { kContainerd, kCrio, kDocker };
inline constexpr EnumNames<Runtime, 3> kRuntimeNames{
    {{Runtime::kContainerd, "containerd"}, {Runtime::kCrio, "crio"}, {Runtime::kDocker, "docker"}}};
static_assert(EnumTableComplete(kRuntimeNames));

std::string_view DriverName(KubeletDriver d);  // "systemd" | "cgroupfs"
Result<KubeletDriver> ParseDriver(std::string_view s);
std::string_view RuntimeName(Runtime r);           // "containerd" | "crio" | "docker"
Result<Runtime> ParseRuntime(std::string_view s);  // also accepts "cri-o"
// QosClassName (feedguard/common/qos.h) spells a QoS class; this parses it, as an error value.
Result<QosClass> ParseQos(std::string_view s);

// A container id as found in Pod status ("containerd://<id>", "cri-o://<id>", "docker://<id>").
struct ContainerRef {
  Runtime runtime = Runtime::kContainerd;
  std::string id;  // hex id without the scheme
};
// A bare id (no "://") takes `default_runtime`; a bare id without a default is InvalidArgument.
Result<ContainerRef> ParseContainerId(std::string_view s,
                                      std::optional<Runtime> default_runtime = std::nullopt);

// Normalises a --cgroup-root value: "" and "/" → "", otherwise no leading/trailing '/'.
std::string NormalizeCgroupRoot(std::string_view cgroup_root);

// The pod UID as systemd slice names carry it: '-' → '_'.
std::string SystemdEscapeUid(std::string_view uid);

// "<root>/kubepods.slice" (systemd) or "<root>/kubepods" (cgroupfs).
std::string KubepodsRelPath(KubeletDriver d, std::string_view cgroup_root);
// The QoS-tier directory a pod of class `q` lives under. Guaranteed pods sit directly in
// kubepods, so for kGuaranteed this is KubepodsRelPath.
std::string QosTierRelPath(KubeletDriver d, std::string_view cgroup_root, QosClass q);
// Every directory kubelet owns and rewrites (kubepods and the burstable/besteffort tiers).
// The enforcer must never write these.
std::vector<std::string> QosTierRelPaths(KubeletDriver d, std::string_view cgroup_root);
// The pod's own cgroup, e.g.
// "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<U>.slice".
std::string PodRelPath(KubeletDriver d, std::string_view cgroup_root, QosClass q,
                       std::string_view uid);
// The pod UID a pod cgroup's directory name carries, the inverse of PodRelPath's last part:
// "pod<uid>" (cgroupfs), "kubepods[-burstable|-besteffort]-pod<uid with '_'>.slice" (systemd);
// nullopt for any other name (a QoS tier, a container, anything else kubelet did not make).
std::optional<std::string> PodUidFromDirName(KubeletDriver d, std::string_view name);
// Candidate leaf names of a container's cgroup under its pod dir, most likely first:
// containerd: "cri-containerd-<id>.scope" | "<id>"; CRI-O: "crio-<id>.scope" | "crio-<id>";
// docker (cri-dockerd): "docker-<id>.scope" | "<id>".
std::vector<std::string> ContainerLeafNames(KubeletDriver d, const ContainerRef& c);
// CRI-O's monitor cgroup next to the container: "crio-conmon-<id>.scope" | "crio-conmon-<id>".
std::string CrioConmonLeafName(KubeletDriver d, std::string_view id);
// With crun (and systemd), processes may live in this child of the container cgroup.
inline constexpr std::string_view kCrunContainerChild = "container";

// ---- formulas -------------------------------------------------------------------------------
// kubelet: shares = clamp(milli*1024/1000, 2, 262144). A zero request gives the minimum, 2.
uint64_t MilliCpuToShares(int64_t milli);
// kubelet: quota = max(milli*period/1000, 1000). milli ≤ 0 means no limit → -1.
int64_t MilliCpuToQuota(int64_t milli, int64_t period_us = 100000);
// The linear v1→v2 map kubelet/systemd use for pod and QoS cgroups:
// weight = 1 + (shares-2)*9999/262142 (shares clamped into range first).
uint64_t SharesToWeight(uint64_t shares);
// Inverse used for our own writes of a v2-scale weight on v1: the smallest shares value that
// maps back to `weight` (so SharesToWeight(WeightToShares(w)) == w for every w in 1..10000).
uint64_t WeightToShares(uint64_t weight);

// ---- in-place resize of a pod whose cgroup has cpu.idle=1 ------------------------------------
// The kernel refuses any weight write to an idle group (EINVAL). What kubelet v1.33 then does
// (seen on the real node tier and in the cgroup v2 VM, tests/vm/kubelet_v2.sh):
//  - v1: the idle group's cpu.shares reads 3, kubelet takes the resize as an increase, writes the
//    pod cgroup first, fails, and retries the whole resize on every sync until the write lands;
//  - v2: the idle group's cpu.weight reads 0, kubelet's weight→shares conversion wraps (unsigned)
//    into a huge value, it takes the resize as a decrease (containers first), records the
//    containers as resized after the pod write fails once, and never writes the pod file again.
// So on v1 the fence can step aside and wait for kubelet's retry; on v2 nobody will write the
// pod's new weight, and the agent must take it (PodWeightAfterResize) as the new original.
inline bool KubeletRetriesRefusedPodWeightWrite(CgroupVersion v) { return v == CgroupVersion::kV1; }
// The weight (v2 scale) kubelet gives a pod cgroup whose containers request `milli` in total.
inline uint64_t PodWeightForRequest(int64_t milli) {
  return SharesToWeight(MilliCpuToShares(milli));
}

}  // namespace feedguard::agent::cgroup
