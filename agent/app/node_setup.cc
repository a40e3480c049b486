#include "agent/app/node_setup.h"

#include <map>
#include <memory>
#include <string>
#include <utility>

#include <spdlog/spdlog.h>
#include <unistd.h>

#include "agent/cgroup/fs_cgroups.h"
#include "agent/cgroup/kernel_facts.h"
#include "agent/topology/gpu_ids.h"
#include "agent/topology/podresources_client.h"

namespace feedguard::agent {
namespace {

Result<cgroup::CgroupLayout> DetectNodeLayout(const NodeConfig& c) {
  cgroup::CgroupOptions o;
  o.cgroup_root = c.cgroup_root;
  o.kubelet_config_path = c.kubelet_config;
  o.driver = c.cgroup_driver;
  o.version = c.cgroup_version;
  o.runtime = c.runtime;
  if (!c.cgroup_mount.empty()) {
    if (o.version == cgroup::CgroupVersion::kV2) {
      o.unified_mount = c.cgroup_mount;
    } else {
      o.cpu_mount = c.cgroup_mount + "/" + std::string(cgroup::kControllerCpu);
      o.cpuacct_mount = c.cgroup_mount + "/" + std::string(cgroup::kControllerCpuacct);
      o.cpuset_mount = c.cgroup_mount + "/" + std::string(cgroup::kControllerCpuset);
    }
  }
  return cgroup::DetectLayout(o);
}

}  // namespace

Result<Topology> LoadNodeTopology(const NodeConfig& c) {
  return c.topology_xml.empty() ? LoadLiveTopology() : LoadTopologyFromXmlFile(c.topology_xml);
}

Result<NodeEngineOptions> NodeEngineOptionsFor(const NodeConfig& c) {
  FG_ASSIGN_OR_RETURN(cgroup::CgroupLayout layout, DetectNodeLayout(c));
  Result<Topology> topo = LoadNodeTopology(c);
  if (!topo.ok()) return topo.status().Annotate("topology");
  if (!c.reserved_cpus.IsSubsetOf(topo->AllPus())) {
    return InvalidArgument("--reserved-cpus " + c.reserved_cpus.ToString() +
                           " names CPUs this machine does not have (it has " +
                           topo->AllPus().ToString() + ")");
  }
  NodeEngineOptions o;
  o.topology = std::move(topo).value();
  o.cgroups = cgroup::NewFsCgroups(layout);
  o.reserved_cpus = c.reserved_cpus;
  o.protected_pods.self_pod_uid = c.self_pod_uid;
  if (c.log_decisions) o.decision_log = spdlog::default_logger();
  o.cpu_manager_state_path = c.cpu_manager_state;
  // Plan from what the checkpoint says was written (trainers keep their cores across restarts).
  // `plan --previous DIR` reads DIR's checkpoint without locking or creating anything.
  if (c.previous) {
    auto prev = LoadPreviousPlan(*c.previous);
    if (!prev.ok()) return prev.status().Annotate("--previous");
    o.state_dir = *c.previous;
  }
  if (!c.pod_resources.empty()) {
    PodResourcesClientOptions po;
    po.endpoint = c.pod_resources;
    o.pod_resources = std::make_shared<PodResourcesClient>(po);
  }
  auto uuids = ReadNvidiaProcGpus(c.nvidia_proc_root);
  auto resolver = std::make_shared<GpuIdResolver>(
      uuids.ok() ? std::move(uuids).value() : std::map<std::string, std::string>{},
      MigParentTable{});
  // DRA device names ("gpu.nvidia.com/gpu-0"): by the driver's ResourceSlices, else by minor.
  if (auto minors = ReadNvidiaProcMinors(c.nvidia_proc_root); minors.ok()) {
    resolver->SetMinors(std::move(minors).value());
  }
  if (!c.dra_resource_slices.empty()) {
    auto slices = LoadResourceSlices(c.dra_resource_slices, c.node_name);
    if (!slices.ok()) return slices.status().Annotate("--dra-resource-slices");
    resolver->SetDraDevices(std::move(slices).value());
  }
  o.gpu_resolver = std::move(resolver);
  return o;
}

Status OpenState(const NodeConfig& c, NodeEngineOptions& o) {
  auto store = CheckpointStore::Open(c.state_dir);
  if (!store.ok()) return store.status().Annotate("state dir " + c.state_dir);
  // One set of protected pods for the planner and the enforcer (NodeEngineOptionsFor).
  EnforcerOptions eo;
  eo.self_pod_uid = o.protected_pods.self_pod_uid;
  eo.protected_priority_classes = o.protected_pods.priority_classes;
  eo.protected_namespaces = o.protected_pods.namespaces;
  eo.idle_when_weight_reads_zero = c.idle_when_weight_reads_zero;
  o.enforcer =
      std::make_shared<Enforcer>(o.cgroups, CheckpointStorePtr(std::move(store).value()), eo);
  o.state_dir = c.state_dir;
  return OkStatus();
}

NodeParts MakeNodeParts(NodeEngineOptions o) {
  NodeParts n;
  n.cgroups = o.cgroups;
  n.enforcer = o.enforcer;
  n.topology = o.topology;
  n.observer = o.observer;
  n.engine = std::make_shared<NodeEngine>(std::move(o));
  return n;
}

Result<NodeParts> BuildNode(const NodeConfig& c, std::optional<ObserveConfig> observe) {
  FG_ASSIGN_OR_RETURN(NodeEngineOptions o, NodeEngineOptionsFor(c));
  FG_RETURN_IF_ERROR(OpenState(c, o));
  // The GPU's own signal (per-trainer GPU busy %) where NVML is present; absent is no error.
  if (!c.nvml_library.empty()) {
    auto nvml = gpu::OpenNvml(c.nvml_library);
    if (nvml.ok()) {
      o.gpu_monitor = std::move(nvml).value();
    } else if (nvml.status().code() == StatusCode::kNotFound) {
      spdlog::debug("feedguard-agent: no NVML ({}); GPU utilisation not reported",
                    nvml.status().message());
    } else {
      spdlog::warn("feedguard-agent: NVML unusable ({}); GPU utilisation not reported",
                   nvml.status().message());
    }
  }
  if (observe && observe->enabled) {
    observe::ObserveLoopOptions oo;
    oo.cgroups = o.cgroups;
    oo.pod_resources = o.pod_resources;
    oo.gpu_resolver = o.gpu_resolver;
    oo.gpu_monitor = o.gpu_monitor;
    oo.period = observe->period;
    oo.top_k = observe->top_k;
    oo.proc_root = observe->host_proc;
    if (const long hz = ::sysconf(_SC_CLK_TCK); hz > 0) oo.user_hz = hz;
    o.observer = std::make_shared<observe::ObserveLoop>(std::move(oo));
  }
  return MakeNodeParts(std::move(o));
}

}  // namespace feedguard::agent
