// gpu_ids.h — from the GPU device ids kubelet hands out to the PCI address of the physical GPU.
//
// Device ids, as NVIDIA's device plugin reports them through PodResources:
//   "GPU-<uuid>"            a whole GPU;
//   "MIG-<uuid>"            a MIG slice (driver ≥ R470). Its parent GPU cannot be derived from the
//                           id: it comes from a MigParentTable, which the agent fills from
//                           `nvidia-smi -L` output (ParseNvidiaSmiList) or a mapping file;
//   "MIG-GPU-<uuid>/<gi>/<ci>"  the legacy MIG form (R450): the parent UUID is embedded;
//   "<id>::<n>"             time-sliced replica n of <id> (any of the forms above): same GPU.
// Device ids of a DRA-allocated GPU, as ExtractPodGpus builds them from PodResources'
// dynamic_resources (docs/DESIGN.md §3):
//   "<driver>/<device>"     e.g. "gpu.nvidia.com/gpu-0": the device name the NVIDIA DRA driver
//                           publishes in its ResourceSlice ("gpu-<minor>" for a whole GPU,
//                           "gpu-<minor>-mig-<profile>-<start>-<size>" for a MIG slice, whose
//                           parent is GPU <minor>). Resolved by the ResourceSlice's uuid /
//                           pcieBusID attributes (DraDeviceTable) when the agent has them, else by
//                           the minor number ("Device Minor:" in /proc/driver/nvidia).
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
  // DRA form only ("<driver>/<device>"): the driver ("gpu.nvidia.com"), the device name as
  // published ("gpu-0"), and the GPU minor number it encodes (-1 when it encodes none, e.g.
  // "gpu-vfio-0").
  std::string dra_driver;
  std::string dra_device;
  int minor = -1;
};

inline constexpr std::string_view kNvidiaDraDriver = "gpu.nvidia.com";

// Parses one device id (see the banner). Lower-cases hex; rejects empty ids and bad suffixes.
Result<GpuDeviceId> ParseGpuDeviceId(std::string_view id);

// UUID ("gpu-…", lower-case) → PCI address ("0000:3b:00.0", lower-case), read from
// <root>/<bdf>/information. A missing root is NotFound (no NVIDIA driver on this node).
Result<std::map<std::string, std::string>> ReadNvidiaProcGpus(
    const std::string& root = std::string(kNvidiaProcGpusRoot));

// GPU minor number ("Device Minor:", the N of /dev/nvidiaN) → PCI address, from the same files.
Result<std::map<int, std::string>> ReadNvidiaProcMinors(
    const std::string& root = std::string(kNvidiaProcGpusRoot));

// What a DRA driver's ResourceSlices say about one device.
struct DraDevice {
  std::string uuid;         // attribute "uuid", lower-case ("gpu-…" / "mig-…"); "" when absent
  std::string bus_id;       // attribute "pcieBusID", normalised like Topology ("0000:3b:00.0")
  std::string parent_uuid;  // attribute "parentUUID" (MIG devices), lower-case
};
// "<driver>/<device name>" → its attributes.
using DraDeviceTable = std::map<std::string, DraDevice>;

// Parses ResourceSlices as `kubectl get resourceslices -o json` prints them (a List), one
// ResourceSlice object, or a JSON array of them; resource.k8s.io v1 (devices[].attributes) and
// v1beta1 (devices[].basic.attributes) shapes. Slices of another node (spec.nodeName set and not
// `node_name`, when `node_name` is given) are skipped. Attribute names may be bare ("uuid") or
// qualified with the driver ("gpu.nvidia.com/uuid").
Result<DraDeviceTable> ParseResourceSlices(std::string_view json, std::string_view node_name = {});
Result<DraDeviceTable> LoadResourceSlices(const std::string& path, std::string_view node_name = {});

// "00000000:3B:00.0" (NVML's 8-digit domain) or "0000:3b:00.0" → "0000:3b:00.0"; "" when the text
// is not a PCI address.
std::string NormalizePciBusId(std::string_view bus_id);

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

// Maps device ids to PCI addresses with the tables above (set up before use, then read-only).
class GpuIdResolver {
 public:
  GpuIdResolver(std::map<std::string, std::string> uuid_to_bdf, MigParentTable mig_parents)
      : uuid_to_bdf_(std::move(uuid_to_bdf)), mig_parents_(std::move(mig_parents)) {}
  // DRA ids: by the driver's ResourceSlice attributes first, then by GPU minor number.
  void SetMinors(std::map<int, std::string> minor_to_bdf) {
    minor_to_bdf_ = std::move(minor_to_bdf);
  }
  void SetDraDevices(DraDeviceTable table) { dra_devices_ = std::move(table); }

  // PCI address of the physical GPU behind `device_id` (replicas and MIG slices → their GPU).
  Result<std::string> BusIdOf(std::string_view device_id) const;
  std::vector<ResolvedGpu> ResolveAll(const std::vector<std::string>& device_ids) const;

 private:
  Result<std::string> BusIdOfUuid(const std::string& uuid) const;
  Result<std::string> BusIdOfDra(const GpuDeviceId& id) const;

  std::map<std::string, std::string> uuid_to_bdf_;
  MigParentTable mig_parents_;
  std::map<int, std::string> minor_to_bdf_;
  DraDeviceTable dra_devices_;
};

}  // namespace feedguard::agent
