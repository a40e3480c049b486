// topology.h — the node's CPU/NUMA/GPU topology as a plain value, loaded with hwloc 2.x.
//
// A `Topology` is what the planner needs and nothing more: NUMA nodes, physical cores with their
// hardware threads (PUs, by Linux logical CPU id), and NVIDIA GPU PCI devices with their NUMA node
// and local CPUs. Load it from the live machine or from an hwloc XML export (tests use the
// synthetic machines in tests/fixtures/topologies/). `TopologyToJson` / `TopologyToTable` render
// it for `feedguard-agent topology`.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/cpuset.h"
#include "feedguard/common/status.h"

namespace feedguard::agent {

struct NumaNode {
  int id = 0;   // OS index (as in /sys/devices/system/node/node<id>)
  CpuSet cpus;  // PUs local to this node
};

struct Core {
  int index = 0;     // logical index, unique on the machine, ascending in hwloc order
  int os_index = 0;  // kernel core_id (not unique across packages)
  int package = 0;   // OS index of the package (socket), -1 when unknown
  int numa = -1;     // OS index of its NUMA node, -1 when the core spans or lacks one
  CpuSet pus;        // hardware threads: Linux logical CPU ids (SMT siblings together)
};

struct GpuDevice {
  std::string bdf;  // PCI address "0000:3b:00.0" (lower-case hex)
  uint16_t vendor_id = 0;
  uint16_t device_id = 0;
  uint16_t class_id = 0;  // e.g. 0x0302 (3D controller), 0x0300 (VGA)
  int numa = -1;          // -1: unknown / no locality (sysfs numa_node -1)
  CpuSet local_cpus;      // cpuset of the closest non-I/O ancestor (whole machine if no locality)
};

struct Topology {
  std::vector<NumaNode> numa_nodes;  // ascending id
  std::vector<Core> cores;           // ascending index
  std::vector<GpuDevice> gpus;       // ascending bdf
  CpuSet allowed_cpus;               // PUs this process may use (hwloc allowed cpuset)

  CpuSet AllPus() const;
  // nullptr when absent.
  const Core* CoreOfPu(int pu) const;
  const GpuDevice* FindGpu(std::string_view bdf) const;
  const NumaNode* FindNuma(int id) const;
  // True when some core has more than one PU.
  bool HasSmt() const;
};

// Loads the machine this process runs on (hwloc Linux backend, I/O objects kept).
Result<Topology> LoadLiveTopology();
// Loads an hwloc XML export (e.g. `lstopo --of xml`) from a file or from memory.
Result<Topology> LoadTopologyFromXmlFile(const std::string& path);
Result<Topology> LoadTopologyFromXmlBuffer(std::string_view xml);

// True for NVIDIA display/3D controllers: PCI vendor 0x10de and base class 0x03.
bool IsNvidiaGpu(uint16_t vendor_id, uint16_t class_id);

// Renders for `feedguard-agent topology`. JSON shape:
// {"numa_nodes":[{"id":0,"cpus":"0-31,64-95"}],"cores":[{"index":0,"os_index":0,"package":0,
//  "numa":0,"pus":"0,64"}],"gpus":[{"bdf":"0000:1b:00.0","vendor":"10de","device":"20b0",
//  "class":"0302","numa":0,"local_cpus":"0-31,64-95"}],"allowed_cpus":"0-127",
//  "summary":{"numa_nodes":2,"cores":64,"pus":128,"gpus":8,"smt":true}}
nlohmann::json TopologyToJson(const Topology& topology);
// A human table: a summary line, one row per NUMA node (cpus, cores, GPUs), one row per GPU.
std::string TopologyToTable(const Topology& topology);

}  // namespace feedguard::agent
