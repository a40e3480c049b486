// gpu_ids.h — from the GPU device ids kubelet hands out to the PCI address of the physical GPU.
//
// Device ids, as NVIDIA's device plugin reports them through PodResources:
//   "GPU-<uuid>"            a whole GPU;
//   "MIG-<uuid>"            a MIG slice (driver ≥ R470). Its parent GPU cannot be derived from the
//                           id: it comes from a MigParentTable, which the agent fills from
//                           `nvidia-smi -L` output (ParseNvidiaSmiList) or a mapping file;
//   "MIG-GPU-<uuid>/<gi>/<ci>"  the legacy MIG form (R450): the parent UUID is embedded;
//   "<id>::<n>"             time-sliced replica n of <id> (any of the forms above): same GPU.
// UUID → PCI address comes from /proc/driver/nvidia/gpus/<bdf>/information ("GPU UUID:" line);
// PCI address → NUMA node / local CPUs from hwloc (Topology) or, as a fallback, sysfs
// /sys/bus/pci/devices/<bdf>/{numa_node,local_cpulist}. Every root path is injectable.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/cpuset.h"
#include "feedguard/common/status.h"

namespace feedguard::agent {

inline constexpr std::string_view kNvidiaProcGpusRoot = "/proc/driver/nvidia/gpus";
inline constexpr std::string_view kSysfsPciDevicesRoot = "/sys/bus/pci/devices";

struct GpuDeviceId {
  std::string raw;         // as given
  std::string base;        // without the "::<n>" replica suffix, lower-case
  bool mig = false;        // "MIG-…"
  std::string parent_gpu;  // legacy MIG form only: "gpu-<uuid>" (lower-case); else empty
  int replica = -1;        // n of "::<n>", -1 when not a replica
};

// Parses one device id (see the banner). Lower-cases hex; rejects empty ids and bad suffixes.
Result<GpuDeviceId> ParseGpuDeviceId(std::string_view id);

// UUID ("gpu-…", lower-case) → PCI address ("0000:3b:00.0", lower-case), read from
// <root>/<bdf>/information. A missing root is NotFound (no NVIDIA driver on this node).
Result<std::map<std::string, std::string>> ReadNvidiaProcGpus(
    const std::string& root = std::string(kNvidiaProcGpusRoot));

// MIG device UUID ("mig-…") → parent GPU UUID ("gpu-…"), both lower-case.
using MigParentTable = std::map<std::string, std::string>;

// Parses `nvidia-smi -L`:
//   GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-5d5b…)
//     MIG 1g.5gb      Device  0: (UUID: MIG-c6d4…)
// Each MIG line belongs to the GPU line above it.
Result<MigParentTable> ParseNvidiaSmiList(std::string_view text);
// Reads a file holding `nvidia-smi -L` output (e.g. written by an init container, or a hand-made
// mapping in the same format). A missing file is NotFound.
Result<MigParentTable> LoadMigParentTable(const std::string& path);

// NUMA node and local CPUs of a PCI device from sysfs. numa_node "-1" (or absent) → numa = -1.
struct PciLocality {
  int numa = -1;
  CpuSet local_cpus;
};
Result<PciLocality> ReadSysfsPciLocality(
    std::string_view bdf, const std::string& root = std::string(kSysfsPciDevicesRoot));

// One GPU device a pod got, with the PCI address of its physical GPU ("" when unresolved).
struct ResolvedGpu {
  std::string device_id;
  std::string bus_id;
  std::string error;  // why bus_id is empty
};

// Maps device ids to PCI addresses with the tables above (immutable once built).
class GpuIdResolver {
 public:
  GpuIdResolver(std::map<std::string, std::string> uuid_to_bdf, MigParentTable mig_parents)
      : uuid_to_bdf_(std::move(uuid_to_bdf)), mig_parents_(std::move(mig_parents)) {}

  // PCI address of the physical GPU behind `device_id` (replicas and MIG slices → their GPU).
  Result<std::string> BusIdOf(std::string_view device_id) const;
  std::vector<ResolvedGpu> ResolveAll(const std::vector<std::string>& device_ids) const;

 private:
  std::map<std::string, std::string> uuid_to_bdf_;
  MigParentTable mig_parents_;
};

}  // namespace feedguard::agent
