// topology.h — the node's CPU/NUMA/GPU topology as a plain value, loaded with hwloc 2.x.
//
// A `Topology` is what the planner needs and nothing more: NUMA nodes, physical cores with their
// hardware threads (PUs, by Linux logical CPU id), and NVIDIA GPU PCI devices with their NUMA node
// and local CPUs. Load it from the live machine or from an hwloc XML export (tests use the
// synthetic machines in tests/fixtures/topologies/). `TopologyToJson` / `TopologyToTable` render
// it for `feedguard-agent topology`.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/cpuset.h"
#include "feedguard/common/status.h"

namespace feedguard::agent {

struct NumaNode {
  int id = 0;           // OS index (as in /sys/devices/system/node/node<id>)
  CpuSet cpus;          // PUs local to this node (disallowed ones included)
  std::string subtype;  // hwloc's memory subtype ("MCDRAM", "HBM", ...); "" for plain DRAM
};

struct Core {
  int index = 0;     // logical index, unique on the machine, ascending in hwloc order
  int os_index = 0;  // kernel core_id (not unique across packages)
  int package = 0;   // OS index of the package (socket), -1 when unknown
  // OS index of its NUMA node: among the nodes local to the core, the one local to the fewest
  // CPUs, then the lowest id (with sub-NUMA clustering plus HBM/CXL memory a core has several
  // local nodes; this picks its cluster's DRAM node). -1 when it has none.
  int numa = -1;
  CpuSet pus;  // hardware threads: Linux logical CPU ids (SMT siblings together)
};

struct GpuDevice {
  std::string bdf;  // PCI address "0000:3b:00.0" (lower-case hex)
  uint16_t vendor_id = 0;
  uint16_t device_id = 0;
  uint16_t class_id = 0;  // e.g. 0x0302 (3D controller), 0x0300 (VGA)
  // The NUMA nodes (Core::numa of each local core) of the closest non-I/O ancestor's CPUs; empty
  // when the GPU has no locality (attached to the machine root of a multi-node machine). A
  // package-attached GPU on a sub-NUMA-clustered package has several.
  std::vector<int> local_numa;
  int numa = -1;      // the lowest of local_numa; -1: unknown / no locality
  CpuSet local_cpus;  // cpuset of the closest non-I/O ancestor (whole machine if no locality)
};

// A PCI device that is not an NVIDIA GPU (a NIC, a BMC's VGA, another vendor's GPU): kept so
// that a GPU id resolving to it is diagnosed by what it is.
struct PciDevice {
  std::string bdf;  // "0000:0c:00.0"
  uint16_t vendor_id = 0;
  uint16_t device_id = 0;
  uint16_t class_id = 0;
};

struct Topology {
  std::vector<NumaNode> numa_nodes;  // ascending id
  std::vector<Core> cores;           // ascending index
  std::vector<GpuDevice> gpus;       // ascending bdf
  std::vector<PciDevice> other_pci;  // ascending bdf; hwloc's "important" PCI devices only
  // PUs this process may use (hwloc allowed cpuset). `cores` lists every PU of the machine,
  // disallowed ones too (HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED): a CPU outside this set is
  // somebody else's (e.g. a Guaranteed pod's under kubelet's static CPU manager) — taken, not
  // absent, so its SMT sibling is never mistaken for a one-thread core.
  CpuSet allowed_cpus;
  // NUMA latency matrix from the OS (ACPI SLIT via hwloc, HWLOC_DISTANCES_KIND_FROM_OS and
  // MEANS_LATENCY), keyed by (from, to) OS index; empty when the machine exposes none.
  std::map<std::pair<int, int>, uint64_t> numa_distances;

  CpuSet AllPus() const;
  // nullptr when absent.
  const Core* CoreOfPu(int pu) const;
  const GpuDevice* FindGpu(std::string_view bdf) const;
  const PciDevice* FindOtherPci(std::string_view bdf) const;
  const NumaNode* FindNuma(int id) const;
  // True when some core has more than one PU.
  bool HasSmt() const;
  // Distance between two NUMA nodes from numa_distances; nullopt when unknown.
  std::optional<uint64_t> Distance(int from, int to) const;
};

// Loads the machine this process runs on (hwloc Linux backend, I/O objects kept).
Result<Topology> LoadLiveTopology();
// Loads an hwloc synthetic description, e.g. "pack:2 numa:2 core:4 pu:2" (tests).
Result<Topology> LoadSyntheticTopology(const std::string& description);
// Loads an hwloc XML export (e.g. `lstopo --of xml`) from a file or from memory.
Result<Topology> LoadTopologyFromXmlFile(const std::string& path);
Result<Topology> LoadTopologyFromXmlBuffer(std::string_view xml);

// True for NVIDIA display/3D controllers: PCI vendor 0x10de and base class 0x03.
bool IsNvidiaGpu(uint16_t vendor_id, uint16_t class_id);

// Renders for `feedguard-agent topology`. JSON shape:
// {"numa_nodes":[{"id":0,"cpus":"0-31,64-95"}],  (+ "subtype" for HBM/MCDRAM/CXL
// nodes)"cores":[{"index":0,"os_index":0,"package":0,
//  "numa":0,"pus":"0,64"}],"gpus":[{"bdf":"0000:1b:00.0","vendor":"10de","device":"20b0",
//  "class":"0302","numa":0,"local_numa":[0],"local_cpus":"0-31,64-95"}],"allowed_cpus":"0-127",
//  "numa_distances":[[10,21],[21,10]] (rows/columns in numa_nodes order; absent when unknown),
//  "summary":{"numa_nodes":2,"cores":64,"pus":128,"gpus":8,"smt":true}}
nlohmann::json TopologyToJson(const Topology& topology);
// A human table: a summary line, one row per NUMA node (cpus, cores, GPUs), one row per GPU.
std::string TopologyToTable(const Topology& topology);

}  // namespace feedguard::agent
