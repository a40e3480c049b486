#include "agent/cli/agent_cli.h"

#include <cstdio>
#include <iostream>
#include <thread>

#include <google/protobuf/util/json_util.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "agent/cgroup/detect.h"
#include "agent/cgroup/fs_cgroups.h"
#include "agent/client/fence_client.h"
#include "agent/enforcer/watcher.h"
#include "agent/engine/node_engine.h"
#include "agent/gpu/nvml.h"
#include "agent/topology/podresources_client.h"
#include "common/flags.h"
#include "common/metrics.h"
#include "common/signals.h"

namespace feedguard::agent {
namespace {

constexpr char kUsage[] =
    "usage: feedguard-agent COMMAND [flags]\n"
    "\n"
    "commands:\n"
    "  run        the node agent: dial the controller, enforce each NodeFence, report\n"
    "  topology   print this node's cores, NUMA nodes and GPUs\n"
    "  plan       print what a fence file would do here (and why each trainer sits where it\n"
    "             sits; --previous STATE_DIR: as a restarted agent would); writes nothing\n"
    "  apply      enforce a fence file (JSON or YAML NodeFence) on this node\n"
    "  revert     restore every original value the agent replaced (unfence the node)\n"
    "\n"
    "`feedguard-agent COMMAND --help` lists the flags.\n";

void DefineNodeFlags(Flags& f) {
  f.Define("state-dir", "/var/lib/feedguard", "where original cgroup values are checkpointed");
  f.Define("cgroup-root", "", "kubelet --cgroup-root (prefix of kubepods)");
  f.Define("cgroup-driver", "", "systemd | cgroupfs (default: detect)");
  f.Define("cgroup-version", "", "v1 | v2 (default: detect per controller)");
  f.Define("cgroup-mount", "",
           "v2: the unified mount; v1: directory holding cpu/, cpuacct/, cpuset/");
  f.Define("runtime", "", "containerd | crio, for container ids without a scheme");
  f.Define("kubelet-config", "", "KubeletConfiguration file (cgroupDriver tie-breaker)");
  f.Define("topology-xml", "", "load the topology from an hwloc XML file instead of this machine");
  f.Define("reserved-cpus", "", "CPUs kubelet reserves for the system (kernel list format)");
  f.Define("cpu-manager-state", "/var/lib/kubelet/cpu_manager_state",
           "kubelet's static CPU manager state file (\"\" = none)");
  f.Define("pod-resources", "", "kubelet PodResources endpoint (\"\" = do not ask kubelet)");
  f.Define("nvidia-proc-root", "/proc/driver/nvidia/gpus", "NVIDIA driver's per-GPU info");
  f.Define("nvml-library", gpu::kDefaultNvmlLibrary,
           "NVML library for per-trainer GPU utilisation (\"\" = off; absent = off)");
  f.Define("dra-resource-slices", "",
           "JSON of the GPU DRA driver's ResourceSlices (kubectl get resourceslices -o json): "
           "device name -> uuid/pcieBusID for DRA-allocated GPUs (\"\" = by minor number)");
  f.Define("self-pod-uid", "", "the agent's own pod uid (never fenced)");
  f.Define("log-level", "info", "trace | debug | info | warn | error");
  f.DefineBool("help", "show this help");
}

Result<cgroup::CgroupLayout> LayoutFromFlags(const Flags& f) {
  cgroup::CgroupOptions o;
  o.cgroup_root = f.Get("cgroup-root");
  o.kubelet_config_path = f.Get("kubelet-config");
  const std::string& drv = f.Get("cgroup-driver");
  if (drv == "systemd")
    o.driver = cgroup::KubeletDriver::kSystemd;
  else if (drv == "cgroupfs")
    o.driver = cgroup::KubeletDriver::kCgroupfs;
  else if (!drv.empty())
    return InvalidArgument("--cgroup-driver must be systemd or cgroupfs");
  const std::string& ver = f.Get("cgroup-version");
  if (ver == "v1")
    o.version = cgroup::CgroupVersion::kV1;
  else if (ver == "v2")
    o.version = cgroup::CgroupVersion::kV2;
  else if (!ver.empty())
    return InvalidArgument("--cgroup-version must be v1 or v2");
  const std::string& rt = f.Get("runtime");
  if (rt == "containerd")
    o.runtime = cgroup::Runtime::kContainerd;
  else if (rt == "crio")
    o.runtime = cgroup::Runtime::kCrio;
  else if (!rt.empty())
    return InvalidArgument("--runtime must be containerd or crio");
  if (const std::string& m = f.Get("cgroup-mount"); !m.empty()) {
    if (o.version == cgroup::CgroupVersion::kV2) {
      o.unified_mount = m;
    } else {
      o.cpu_mount = m + "/cpu";
      o.cpuacct_mount = m + "/cpuacct";
      o.cpuset_mount = m + "/cpuset";
    }
  }
  return cgroup::DetectLayout(o);
}

struct Node {
  NodeEnginePtr engine;
  cgroup::CgroupsPtr cgroups;
  EnforcerPtr enforcer;
  Topology topology;
};

// Times every Apply for the fence_apply_seconds histogram.
class TimedApplier final : public FenceApplier {
 public:
  TimedApplier(NodeEnginePtr engine, Histogram* h) : engine_(std::move(engine)), h_(h) {}
  Result<feedguard::v1::NodeReport> Apply(const feedguard::v1::NodeFence& fence) override {
    auto t0 = std::chrono::steady_clock::now();
    auto r = engine_->Apply(fence);
    h_->Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (r.ok()) {
      std::lock_guard<std::mutex> l(mu_);
      last_ = *r;
    }
    return r;
  }
  std::optional<feedguard::v1::NodeReport> CurrentReport() override {
    auto r = engine_->CurrentReport();
    if (r) {
      std::lock_guard<std::mutex> l(mu_);
      last_ = *r;
    }
    return r;
  }
  std::optional<feedguard::v1::NodeReport> last() const {
    std::lock_guard<std::mutex> l(mu_);
    return last_;
  }

 private:
  NodeEnginePtr engine_;
  Histogram* h_;
  mutable std::mutex mu_;
  std::optional<feedguard::v1::NodeReport> last_;  // guarded by mu_
};

// Opens (creates, locks) the state dir and gives `o` an enforcer over it.
Status OpenState(const Flags& f, NodeEngineOptions& o) {
  auto store = CheckpointStore::Open(f.Get("state-dir"));
  if (!store.ok()) return store.status().Annotate("state dir " + f.Get("state-dir"));
  EnforcerOptions eo;
  eo.self_pod_uid = f.Get("self-pod-uid");
  o.enforcer =
      std::make_shared<Enforcer>(o.cgroups, CheckpointStorePtr(std::move(store).value()), eo);
  o.state_dir = f.Get("state-dir");
  return OkStatus();
}

Node MakeNode(NodeEngineOptions o) {
  Node n;
  n.cgroups = o.cgroups;
  n.enforcer = o.enforcer;
  n.topology = o.topology;
  n.engine = std::make_shared<NodeEngine>(std::move(o));
  return n;
}

// The node's engine options from the flags. `open_state`: open the state dir too (OpenState).
// Commands that only read (plan) or have not yet validated their input pass false: nothing is
// created on disk.
Result<NodeEngineOptions> NodeOptions(const Flags& f, bool open_state) {
  FG_ASSIGN_OR_RETURN(cgroup::CgroupLayout layout, LayoutFromFlags(f));
  Result<Topology> topo = f.Get("topology-xml").empty()
                              ? LoadLiveTopology()
                              : LoadTopologyFromXmlFile(f.Get("topology-xml"));
  if (!topo.ok()) return topo.status().Annotate("topology");
  FG_ASSIGN_OR_RETURN(CpuSet reserved, CpuSet::Parse(f.Get("reserved-cpus")));
  if (!reserved.IsSubsetOf(topo->AllPus())) {
    return InvalidArgument("--reserved-cpus " + reserved.ToString() +
                           " names CPUs this machine does not have (it has " +
                           topo->AllPus().ToString() + ")");
  }
  NodeEngineOptions o;
  o.topology = std::move(topo).value();
  o.cgroups = cgroup::NewFsCgroups(layout);
  o.reserved_cpus = reserved;
  o.cpu_manager_state_path = f.Get("cpu-manager-state");
  // Plan from what the checkpoint says was written (trainers keep their cores across restarts).
  // `plan --previous DIR` reads DIR's checkpoint without locking or creating anything.
  if (open_state) {
    FG_RETURN_IF_ERROR(OpenState(f, o));
  } else if (f.IsSet("previous")) {
    auto prev = LoadPreviousPlan(f.Get("previous"));
    if (!prev.ok()) return prev.status().Annotate("--previous");
    o.state_dir = f.Get("previous");
  }
  if (!f.Get("pod-resources").empty()) {
    PodResourcesClientOptions po;
    po.endpoint = f.Get("pod-resources");
    o.pod_resources = std::make_shared<PodResourcesClient>(po);
  }
  auto uuids = ReadNvidiaProcGpus(f.Get("nvidia-proc-root"));
  auto resolver = std::make_shared<GpuIdResolver>(
      uuids.ok() ? std::move(uuids).value() : std::map<std::string, std::string>{},
      MigParentTable{});
  // DRA device names ("gpu.nvidia.com/gpu-0"): by the driver's ResourceSlices, else by minor.
  if (auto minors = ReadNvidiaProcMinors(f.Get("nvidia-proc-root")); minors.ok()) {
    resolver->SetMinors(std::move(minors).value());
  }
  if (!f.Get("dra-resource-slices").empty()) {
    auto slices = LoadResourceSlices(f.Get("dra-resource-slices"),
                                     f.IsSet("node-name") ? f.Get("node-name") : "");
    if (!slices.ok()) return slices.status().Annotate("--dra-resource-slices");
    resolver->SetDraDevices(std::move(slices).value());
  }
  o.gpu_resolver = std::move(resolver);
  return o;
}

Result<Node> BuildNode(const Flags& f) {
  FG_ASSIGN_OR_RETURN(NodeEngineOptions o, NodeOptions(f, /*open_state=*/true));
  // The GPU's own signal (per-trainer GPU busy %) where NVML is present; absent is no error.
  if (!f.Get("nvml-library").empty()) {
    auto nvml = gpu::OpenNvml(f.Get("nvml-library"));
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
  return MakeNode(std::move(o));
}

nlohmann::json ApplyReportJson(const ApplyReport& r) {
  nlohmann::json pods = nlohmann::json::array();
  for (const auto& p : r.pods) {
    nlohmann::json j = {{"pod", p.ns + "/" + p.name},
                        {"uid", p.uid},
                        {"policy", p.policy},
                        {"role", p.role == PodRole::kTrainer ? "trainer" : "neighbour"},
                        {"enforced", p.enforced},
                        {"filesWritten", p.files_written}};
    if (!p.cpus.empty()) j["cpus"] = p.cpus;
    if (!p.reason.empty()) j["reason"] = p.reason;
    if (!p.message.empty()) j["message"] = p.message;
    pods.push_back(j);
  }
  nlohmann::json writes = nlohmann::json::array();
  for (const auto& w : r.writes) writes.push_back({{"file", w.path}, {"value", w.value}});
  nlohmann::json reverts = nlohmann::json::array();
  for (const auto& v : r.reverts) {
    reverts.push_back({{"file", v.path}, {"outcome", v.outcome}, {"message", v.message}});
  }
  return {{"fenceVersion", r.fence_version},
          {"dryRun", r.dry_run},
          {"enforced", r.enforced},
          {"failed", r.failed},
          {"filesWritten", r.files_written},
          {"filesReverted", r.files_reverted},
          {"pods", pods},
          {"writes", writes},
          {"reverts", reverts}};
}

int Fail(const Status& st, int code) {
  std::cerr << "feedguard-agent: " << st.message() << "\n";
  return code;
}

int CmdPlanOrApply(Flags& f, bool apply) {
  if (f.Get("fence").empty()) return Fail(InvalidArgument("--fence FILE is required"), 2);
  auto fence = LoadNodeFenceFile(f.Get("fence"));
  if (!fence.ok()) return Fail(fence.status(), 2);
  // Bad input writes nothing, not even the state dir: every pod must exist and the plan must
  // be computable before the state dir is opened and the first file is written.
  auto options = NodeOptions(f, /*open_state=*/false);
  if (!options.ok()) {
    return Fail(options.status(), options.status().code() == StatusCode::kInvalidArgument ? 2 : 1);
  }
  Node probe = MakeNode(*options);
  if (Status st = probe.engine->CheckPodsExist(*fence); !st.ok()) return Fail(st, 2);
  auto plan = probe.engine->MakePlanFor(*fence);
  if (!plan.ok()) return Fail(plan.status(), 2);
  if (!apply) {
    std::cout << PlanToJson(*plan).dump(2) << "\n";
    return 0;
  }
  // Valid: now open the state dir (the topology is not loaded again).
  if (Status st = OpenState(f, *options); !st.ok()) return Fail(st, 1);
  Node node = MakeNode(std::move(options).value());
  auto report = node.engine->Apply(*fence);
  if (!report.ok()) return Fail(report.status(), 1);
  auto full = node.engine->last_apply();
  std::cout << ApplyReportJson(*full).dump(2) << "\n";
  return full->failed == 0 ? 0 : 1;
}

int CmdRevert(Flags& f) {
  auto node = BuildNode(f);
  if (!node.ok()) return Fail(node.status(), 1);
  ApplyReport r = node->engine->RevertAll();
  std::cout << ApplyReportJson(r).dump(2) << "\n";
  for (const auto& v : r.reverts) {
    if (v.outcome == reason::kRevertFailed) return 1;
  }
  return 0;
}

int CmdRun(Flags& f) {
  // First, before any thread: SIGTERM/SIGINT stay blocked everywhere and only Wait() takes them.
  TerminationSignals signals;
  if (!signals.status().ok()) return Fail(signals.status(), 1);
  if (f.Get("controller").empty())
    return Fail(InvalidArgument("--controller HOST:PORT is required"), 2);
  if (f.Get("node-name").empty()) return Fail(InvalidArgument("--node-name is required"), 2);
  auto report_interval = f.GetMillis("report-interval-ms");
  if (!report_interval.ok()) return Fail(report_interval.status(), 2);
  auto verify_interval = f.GetMillis("verify-interval-ms");
  if (!verify_interval.ok()) return Fail(verify_interval.status(), 2);
  auto node = BuildNode(f);
  if (!node.ok()) return Fail(node.status(), 1);
  FenceClientOptions o;
  o.target = f.Get("controller");
  o.insecure = f.GetBool("insecure");
  o.tls = {f.Get("tls-ca"), f.Get("tls-cert"), f.Get("tls-key")};
  o.tls_server_name = f.Get("tls-server-name");
  o.token_file = f.Get("token-file");
  o.hello.set_node_name(f.Get("node-name"));
  o.hello.set_agent_version(FEEDGUARD_VERSION);
  const auto& layout = node->cgroups->layout();
  o.hello.set_cgroup_version(layout.version == cgroup::CgroupVersion::kV2 ? "v2" : "v1");
  o.hello.set_cgroup_driver(layout.driver == cgroup::KubeletDriver::kSystemd ? "systemd"
                                                                             : "cgroupfs");
  if (layout.caps.cpu_idle) o.hello.add_capabilities("cpu.idle");
  if (layout.caps.burst) o.hello.add_capabilities("cpu.burst");
  if (layout.caps.psi) o.hello.add_capabilities("cpu.pressure");
  o.report_interval = *report_interval;
  auto* summary = o.hello.mutable_topology();
  summary->set_numa_nodes(static_cast<int>(node->topology.numa_nodes.size()));
  summary->set_cores(static_cast<int>(node->topology.cores.size()));
  summary->set_pus(static_cast<int>(node->topology.AllPus().size()));
  summary->set_gpus(static_cast<int>(node->topology.gpus.size()));
  summary->set_allowed_cpus(node->topology.allowed_cpus.ToString());

  Histogram apply_seconds({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5});
  auto applier = std::make_shared<TimedApplier>(node->engine, &apply_seconds);
  auto client = FenceClient::Start(o, applier);
  if (!client.ok()) return Fail(client.status(), 2);
  spdlog::info("feedguard-agent: node {} dialing {}", f.Get("node-name"), o.target);

  WatcherOptions wo;
  wo.sweep_interval = *verify_interval;
  Watcher watcher(node->enforcer, wo);
  if (Status st = watcher.Start(); !st.ok()) spdlog::warn("overwrite watcher: {}", st.ToString());

  std::unique_ptr<MetricsServer> metrics;
  if (!f.Get("metrics-addr").empty()) {
    auto m = MetricsServer::Start(
        f.Get("metrics-addr"),
        [&]() {
          auto cs = (*client)->stats();
          std::string out;
          out += RenderGauge("feedguard_agent_connected",
                             "1 while a stream to the controller is open", cs.connected ? 1 : 0);
          out += RenderGauge("feedguard_agent_applied_version", "last NodeFence version applied",
                             static_cast<double>(cs.applied_version));
          out += apply_seconds.Render("feedguard_fence_apply_seconds",
                                      "time to plan and write one NodeFence");
          uint64_t overwrites = 0;
          for (const auto& [uid, n] : node->enforcer->OverwriteCounts()) overwrites += n;
          out += RenderGauge("feedguard_overwrites_total",
                             "cgroup values we wrote that someone else rewrote",
                             static_cast<double>(overwrites), "counter");
          out += RenderGauge("feedguard_neighbour_cpu_seconds_total",
                             "CPU time pods received while fenced as neighbours",
                             node->engine->NeighbourCpuSeconds(), "counter");
          out += RenderGauge("feedguard_owned_files", "cgroup files holding a value we wrote",
                             static_cast<double>(node->enforcer->OwnedFiles().size()));
          if (auto r = applier->last()) {
            std::vector<std::pair<std::string, double>> psi;
            for (const auto& p : r->pods()) {
              if (p.role() == feedguard::v1::PodReport::TRAINER) {
                psi.push_back({p.namespace_() + "/" + p.name(), p.cpu_pressure_some_avg10() / 100});
              }
            }
            out += RenderLabelled("feedguard_trainer_cpu_pressure_ratio",
                                  "share of the last 10 s some trainer task waited for CPU (PSI)",
                                  "gauge", psi, "pod");
            std::vector<std::pair<std::string, double>> busy;
            for (const auto& p : r->pods()) {
              if (p.role() == feedguard::v1::PodReport::TRAINER && p.gpus_sampled() > 0) {
                busy.push_back({p.namespace_() + "/" + p.name(), p.gpu_busy_percent() / 100});
              }
            }
            if (!busy.empty()) {
              out += RenderLabelled("feedguard_trainer_gpu_busy_ratio",
                                    "mean NVML utilisation of the GPUs a trainer holds (0-1)",
                                    "gauge", busy, "pod");
            }
          }
          return out;
        },
        [&]() { return node->enforcer->ready(); });
    if (!m.ok()) return Fail(m.status(), 2);
    metrics = std::move(m).value();
  }

  // The client's report thread asks the applier for a fresh report every report interval.
  signals.Wait();
  watcher.Stop();
  spdlog::info("feedguard-agent: stopping; fences stay in place (use `revert` to remove them)");
  (*client)->Stop();
  return 0;
}

}  // namespace

int RunAgentCli(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "help") {
    std::cout << kUsage;
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  Flags f;
  DefineNodeFlags(f);
  if (cmd == "plan" || cmd == "apply") f.Define("fence", "", "NodeFence file (JSON or YAML)");
  if (cmd == "plan") {
    f.Define("previous", "",
             "a state dir: plan as an agent restarted over it would (its trainers are incumbents)");
  }
  if (cmd == "run") {
    f.Define("controller", "", "controller gRPC address host:port");
    f.Define("node-name", "", "this node's name (must match the client certificate)");
    f.Define("tls-ca", "", "CA bundle that signs the controller's certificate");
    f.Define("tls-cert", "", "this agent's client certificate");
    f.Define("tls-key", "", "this agent's client key");
    f.Define("tls-server-name", "", "name to verify on the controller's certificate");
    f.Define("token-file", "",
             "projected ServiceAccount token sent on every (re)connect as the agent's node-bound "
             "identity (re-read each time; \"\" = none)");
    f.DefineBool("insecure", "no TLS (local demos only; the controller must agree)");
    f.Define("report-interval-ms", "10000", "how often to send a fresh report");
    f.Define("verify-interval-ms", "60000",
             "sweep: how often to re-read every file we wrote (inotify catches most rewrites)");
    f.Define("metrics-addr", "", "/metrics, /healthz, /readyz (host:port; \"\" = off)");
  }
  if (cmd == "topology") {
    // topology needs only --topology-xml, declared with the node flags.
  } else if (cmd != "plan" && cmd != "apply" && cmd != "revert" && cmd != "run") {
    std::cerr << "feedguard-agent: unknown command \"" << cmd << "\"\n\n" << kUsage;
    return 2;
  }
  if (cmd == "topology") f.DefineBool("json", "print JSON instead of a table");
  if (Status st = f.Parse(argc, argv, 2); !st.ok()) return Fail(st, 2);
  if (f.GetBool("help")) {
    std::cout << "usage: feedguard-agent " << cmd << " [flags]\n\nflags:\n" << f.Help();
    return 0;
  }
  if (!f.positional().empty()) {
    return Fail(InvalidArgument("unexpected argument \"" + f.positional()[0] + "\""), 2);
  }
  spdlog::set_level(spdlog::level::from_str(f.Get("log-level")));
  if (cmd == "topology") {
    auto topo = f.Get("topology-xml").empty() ? LoadLiveTopology()
                                              : LoadTopologyFromXmlFile(f.Get("topology-xml"));
    // Same exit codes as `plan` for the same bad input: 2 for a bad file, 1 otherwise.
    if (!topo.ok()) {
      return Fail(topo.status(), topo.status().code() == StatusCode::kInvalidArgument ? 2 : 1);
    }
    std::cout << (f.GetBool("json") ? TopologyToJson(*topo).dump(2) + "\n"
                                    : TopologyToTable(*topo));
    return 0;
  }
  if (cmd == "plan") return CmdPlanOrApply(f, false);
  if (cmd == "apply") return CmdPlanOrApply(f, true);
  if (cmd == "revert") return CmdRevert(f);
  return CmdRun(f);
}

}  // namespace feedguard::agent
