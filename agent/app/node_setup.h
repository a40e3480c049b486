// node_setup.h — from the node's settings (the flags every `feedguard-agent` command shares) to
// the node's parts: the cgroup layout, the topology, the GPU id resolver, the checkpoint store,
// the enforcer and the node engine. Used by the daemon (AgentApp) and by the local commands
// (`plan`, `apply`, `revert`) alike, so they see the node the same way.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "agent/cgroup/cgroups.h"
#include "agent/cgroup/detect.h"
#include "agent/enforcer/enforcer.h"
#include "agent/engine/node_engine.h"
#include "agent/gpu/nvml.h"
#include "agent/observe/observe_loop.h"
#include "agent/topology/topology.h"
#include "common/cpuset.h"
#include "feedguard/common/status.h"

namespace feedguard::agent {

// The node's settings, already typed (the CLI checks each value as it parses it).
struct NodeConfig {
  std::string state_dir = "/var/lib/feedguard";  // where original cgroup values are checkpointed
  std::string cgroup_root;                       // kubelet --cgroup-root (prefix of kubepods)
  std::optional<cgroup::KubeletDriver> cgroup_driver;   // unset: detect
  std::optional<cgroup::CgroupVersion> cgroup_version;  // unset: detect per controller
  // v2: the unified mount; v1: the directory holding cpu/, cpuacct/ and cpuset/ ("" = detect).
  std::string cgroup_mount;
  std::optional<cgroup::Runtime> runtime;  // for container ids without a scheme
  std::string kubelet_config;              // KubeletConfiguration file (driver tie-breaker)
  std::string topology_xml;                // "" = this machine's live topology
  CpuSet reserved_cpus;                    // CPUs kubelet reserves for the system
  std::string cpu_manager_state = "/var/lib/kubelet/cpu_manager_state";  // "" = none
  std::string pod_resources;  // kubelet PodResources endpoint ("" = do not ask kubelet)
  std::string nvidia_proc_root = "/proc/driver/nvidia/gpus";
  std::string nvml_library = gpu::kDefaultNvmlLibrary;  // "" = off; absent library = off
  std::string dra_resource_slices;                      // ResourceSlices JSON ("" = by minor)
  std::string node_name;     // picks this node's ResourceSlices ("" = all)
  std::string self_pod_uid;  // the agent's own pod (never fenced)
  // cgroup v2 kernels whose idle cpu.weight reads 0: keep cpu.idle anyway (EnforcerOptions).
  bool idle_when_weight_reads_zero = false;
  // `plan --previous DIR`: plan as an agent restarted over DIR's checkpoint would.
  std::optional<std::string> previous;
  // The daemon logs each fence decision once (NodeEngineOptions::decision_log, to the default
  // logger); the local commands print their report instead.
  bool log_decisions = false;
};

// The daemon's observation of the node's GPU pods with no policy (docs/DESIGN.md §4b): the
// `run` flags --observe, --observe-period-s, --observe-top-k, --host-proc. The local commands
// observe nothing.
struct ObserveConfig {
  bool enabled = true;
  std::chrono::seconds period{10};  // one interval per pod: 1..300 s
  size_t top_k = 5;                 // contenders per pod and window, and on /metrics
  // The host's procfs (/proc/stat, the tasks' schedstat): in the agent's pod the host's /proc
  // mounted read-only (the chart: /host/proc), scanned for the pods' processes when it is not
  // this process's own PID namespace's (observe/host_tasks.h).
  std::string host_proc = "/proc";
};
inline constexpr std::chrono::seconds kMinObservePeriod{1}, kMaxObservePeriod{300};

struct NodeParts {
  NodeEnginePtr engine;
  cgroup::CgroupsPtr cgroups;
  EnforcerPtr enforcer;
  Topology topology;
  // The engine's observer (NodeEngineOptions::observer), its thread not started; null: off.
  std::shared_ptr<observe::ObserveLoop> observer;
};

// The topology the config names: the hwloc XML file, else this machine.
Result<Topology> LoadNodeTopology(const NodeConfig& c);

// The engine's options, nothing created on disk: the cgroup layout (detected), the topology, the
// reserved CPUs (checked against the topology), the GPU id resolver, and with `previous` the plan
// read (without locking) from that state dir. No enforcer yet: see OpenState.
Result<NodeEngineOptions> NodeEngineOptionsFor(const NodeConfig& c);

// Opens (creates, locks) the state dir and gives `o` an enforcer over it.
Status OpenState(const NodeConfig& c, NodeEngineOptions& o);

NodeParts MakeNodeParts(NodeEngineOptions o);

// Everything, state dir opened; with NVML when the library is there (absent is no error); with
// `observe` enabled, the observer over the same cgroups, kubelet client, GPU ids and NVML.
Result<NodeParts> BuildNode(const NodeConfig& c,
                            std::optional<ObserveConfig> observe = std::nullopt);

}  // namespace feedguard::agent
