// detect.h — finds the host's cgroup layout: per-controller mounts and versions (mountinfo +
// statfs magic), the kubelet cgroup driver, and kernel capabilities. Every guess can be
// overridden through CgroupOptions, which the agent CLI fills from flags.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/cgroup/cgroups.h"
#include "agent/cgroup/kernel_facts.h"
#include "agent/cgroup/kubelet_facts.h"
#include "feedguard/common/status.h"

namespace feedguard::agent::cgroup {

struct CgroupOptions {
  std::optional<CgroupVersion> version;  // unset: detect per controller
  std::optional<KubeletDriver> driver;   // unset: detect from kubepods(.slice), then config
  std::string cgroup_root;               // kubelet --cgroup-root ("" = none)
  std::optional<Runtime> runtime;        // default for container ids without a scheme
  std::string mountinfo_path = "/proc/self/mountinfo";
  std::string kubelet_config_path;  // optional KubeletConfiguration (YAML/JSON, cgroupDriver)
  // Mount point overrides ("" = from mountinfo). With `version` = v2 only cpu_mount is needed
  // (or unified_mount); with v1 each controller's mount. Plain dirs are fine when `version` is
  // set (unit tests); otherwise the mount's statfs magic decides the version.
  std::string cpu_mount;
  std::string cpuacct_mount;
  std::string cpuset_mount;
  std::string unified_mount;
};

// One line of /proc/self/mountinfo, the parts we need.
struct MountEntry {
  std::string mount_point;
  std::string fs_type;                     // "cgroup", "cgroup2", ...
  std::vector<std::string> super_options;  // e.g. {"rw", "cpu", "cpuacct"}
};
Result<std::vector<MountEntry>> ParseMountInfo(std::string_view text);

// The version a directory's filesystem has, by statfs magic. NotFound if it does not exist,
// FailedPrecondition if it is not a cgroup filesystem.
Result<CgroupVersion> VersionByMagic(const std::string& path);

// Finds mounts and versions (hybrid hosts are v1 for cpu/cpuset), the driver, the root, and
// probes capabilities.
Result<CgroupLayout> DetectLayout(const CgroupOptions& options);

// Reads `cgroupDriver` from a KubeletConfiguration file. NotFound if the file or field is absent.
Result<KubeletDriver> DriverFromKubeletConfig(const std::string& path);

// Probes cpu.idle, burst and PSI files in kubepods (or the first existing QoS dir, or the mount).
Capabilities ProbeCapabilities(const CgroupLayout& layout);

}  // namespace feedguard::agent::cgroup
