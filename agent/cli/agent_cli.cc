#include "agent/cli/agent_cli.h"

#include <CLI/CLI.hpp>
#include <charconv>
#include <functional>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "agent/app/agent_app.h"
#include "agent/app/node_setup.h"
#include "agent/cgroup/kubelet_facts.h"
#include "feedguard/common/wire_limits.h"

namespace feedguard::agent {
namespace {

constexpr char kDescription[] =
    "feedguard-agent: the feedguard node agent (`run`) and the local commands that run its node "
    "engine with no controller, for operators debugging a node.";
constexpr char kFooter[] =
    "`feedguard-agent COMMAND --help` lists the flags.\n"
    "Exit codes: 0 ok, 1 runtime failure (some pod not enforced), 2 bad input (nothing written).\n"
    "JSON output uses camelCase keys, as Kubernetes objects do.";

int Fail(const Status& st, int code) {
  std::cerr << "feedguard-agent: " << st.message() << "\n";
  return code;
}

// ---- typed flag values: CLI11 checks each value as it parses it (a bad one exits 2) ----------

// A flag whose value `parse` checks (its error is CLI11's, so the command exits 2) and stores.
template <typename T>
CLI::Option* AddParsed(CLI::App* app, const std::string& name, std::string help, T* out,
                       std::function<Result<T>(const std::string&)> parse,
                       const std::string& type_name) {
  CLI::Validator check(
      [parse](std::string& v) {
        auto r = parse(v);
        return r.ok() ? std::string() : std::string(r.status().message());
      },
      "", type_name);
  return app
      ->add_option_function<std::string>(
          name, [out, parse](const std::string& v) { *out = std::move(parse(v)).value(); },
          std::move(help))
      ->type_name(type_name)
      ->check(check);
}

// An optional enum: "" leaves it unset.
template <typename E>
CLI::Option* AddChoice(CLI::App* app, const std::string& name, std::string help,
                       std::optional<E>* out, std::function<Result<E>(std::string_view)> parse,
                       const std::string& choices) {
  std::function<Result<std::optional<E>>(const std::string&)> opt =
      [parse](const std::string& v) -> Result<std::optional<E>> {
    if (v.empty()) return std::optional<E>();
    FG_ASSIGN_OR_RETURN(E e, parse(v));
    return std::optional<E>(e);
  };
  return AddParsed<std::optional<E>>(app, name, std::move(help), out, opt, choices);
}

Result<std::chrono::milliseconds> ParseMillis(const std::string& v) {
  int64_t n = 0;
  const char* end = v.data() + v.size();
  auto [ptr, ec] = std::from_chars(v.data(), end, n);
  if (v.empty() || ec != std::errc() || ptr != end || n < 0) {
    return InvalidArgument("\"" + v + "\" is not a whole number of milliseconds (0 or more)");
  }
  return std::chrono::milliseconds(n);
}

Result<cgroup::CgroupVersion> ParseCgroupVersion(std::string_view v) {
  if (auto c = FromName(cgroup::kCgroupVersionNames, v)) return *c;
  return InvalidArgument("unknown cgroup version \"" + std::string(v) + "\" (want v1 or v2)");
}

// "--name=" means an empty value (CLI11 would call the value missing): hand it over as
// "--name" "". CLI11 takes the arguments in reverse order.
std::vector<std::string> ReversedArgs(int argc, char** argv) {
  std::vector<std::string> args;
  for (int i = argc - 1; i >= 1; --i) {
    const std::string a = argv[i];
    if (a.size() > 3 && a.rfind("--", 0) == 0 && a.find('=') == a.size() - 1) {
      args.emplace_back("");
      args.push_back(a.substr(0, a.size() - 1));
    } else {
      args.push_back(a);
    }
  }
  return args;
}

// The flags every command shares (the node's settings), bound to `c`.
void AddNodeFlags(CLI::App* app, NodeConfig* c, std::string* log_level) {
  app->add_option("--state-dir", c->state_dir, "where original cgroup values are checkpointed")
      ->capture_default_str();
  app->add_option("--cgroup-root", c->cgroup_root, "kubelet --cgroup-root (prefix of kubepods)");
  AddChoice<cgroup::KubeletDriver>(app, "--cgroup-driver",
                                   "kubelet's cgroup driver (default: detect)", &c->cgroup_driver,
                                   cgroup::ParseDriver, "systemd|cgroupfs");
  AddChoice<cgroup::CgroupVersion>(app, "--cgroup-version",
                                   "cgroup version (default: detect per controller)",
                                   &c->cgroup_version, ParseCgroupVersion, "v1|v2");
  app->add_option("--cgroup-mount", c->cgroup_mount,
                  "v2: the unified mount; v1: directory holding cpu/, cpuacct/, cpuset/");
  AddChoice<cgroup::Runtime>(
      app, "--runtime", "container runtime, for container ids without a scheme (default: none)",
      &c->runtime, cgroup::ParseRuntime, "containerd|crio|docker");
  app->add_option("--kubelet-config", c->kubelet_config,
                  "KubeletConfiguration file (cgroupDriver tie-breaker)");
  app->add_option("--topology-xml", c->topology_xml,
                  "load the topology from an hwloc XML file instead of this machine");
  AddParsed<CpuSet>(
      app, "--reserved-cpus", "CPUs kubelet reserves for the system (kernel list format)",
      &c->reserved_cpus, [](const std::string& v) { return CpuSet::Parse(v); }, "CPUS");
  app->add_option("--cpu-manager-state", c->cpu_manager_state,
                  "kubelet's static CPU manager state file (\"\" = none)")
      ->capture_default_str();
  app->add_option("--pod-resources", c->pod_resources,
                  "kubelet PodResources endpoint (\"\" = do not ask kubelet)");
  app->add_option("--nvidia-proc-root", c->nvidia_proc_root, "NVIDIA driver's per-GPU info")
      ->capture_default_str();
  app->add_option("--nvml-library", c->nvml_library,
                  "NVML library for per-trainer GPU utilisation (\"\" = off; absent = off)")
      ->capture_default_str();
  app->add_option("--dra-resource-slices", c->dra_resource_slices,
                  "JSON of the GPU DRA driver's ResourceSlices (kubectl get resourceslices -o "
                  "json): device name -> uuid/pcieBusID for DRA-allocated GPUs (\"\" = by minor "
                  "number)");
  app->add_option("--self-pod-uid", c->self_pod_uid, "the agent's own pod uid (never fenced)");
  app->add_flag("--idle-when-weight-reads-zero", c->idle_when_weight_reads_zero,
                "cgroup v2: keep cpu.idle on kernels where an idle cgroup's cpu.weight reads 0. "
                "Off (default): such Idle fences are held as the lowest weight, because kubelet "
                ">= 1.36 reads that 0 back as ~1.8e15 CPUs requested and the node looks full. "
                "Safe only with kubelet <= 1.35 or InPlacePodLevelResourcesVerticalScaling off");
  app->add_option("--log-level", *log_level, "trace | debug | info | warn | error")
      ->capture_default_str();
}

void AddRunFlags(CLI::App* app, AgentConfig* c) {
  app->add_option("--controller", c->controller, "controller gRPC address host:port")
      ->type_name("HOST:PORT")
      ->required();
  app->add_option("--node-name", c->node.node_name,
                  "this node's name (must match the client certificate)")
      ->required();
  app->add_option("--tls-ca", c->tls_ca, "CA bundle that signs the controller's certificate");
  app->add_option("--tls-cert", c->tls_cert, "this agent's client certificate");
  app->add_option("--tls-key", c->tls_key, "this agent's client key");
  app->add_option("--tls-server-name", c->tls_server_name,
                  "name to verify on the controller's certificate");
  app->add_option("--token-file", c->token_file,
                  "projected ServiceAccount token sent on every (re)connect as the agent's "
                  "node-bound identity (re-read each time; \"\" = none)");
  app->add_flag("--insecure", c->insecure, "no TLS (local demos only; the controller must agree)");
  AddParsed<std::chrono::milliseconds>(app, "--report-interval-ms",
                                       "how often to send a fresh report (default: 10000)",
                                       &c->report_interval, ParseMillis, "MS");
  AddParsed<std::chrono::milliseconds>(
      app, "--verify-interval-ms",
      "sweep: how often to re-read every file we wrote (inotify catches most rewrites) "
      "(default: 60000)",
      &c->verify_interval, ParseMillis, "MS");
  app->add_option("--max-fence-bytes", c->max_fence_bytes,
                  "largest message read from the controller; at least the controller's "
                  "--max-fence-bytes (wire_limits.h)")
      ->capture_default_str();
  app->add_option("--metrics-addr", c->metrics_addr,
                  "/metrics, /healthz, /readyz (host:port; \"\" = off)");
  // Observation of the node's GPU pods with no policy (docs/DESIGN.md §4b).
  app->add_flag("--observe", c->observe.enabled,
                "observe the GPU pods the controller names (NodeFence.observe): their CPU "
                "feeders' wait, who ran on their CPUs, the GPU time that cost; reads only, "
                "writes nothing (default: on; --observe=false turns it off)");
  app->add_option_function<int64_t>(
         "--observe-period-s", [c](int64_t s) { c->observe.period = std::chrono::seconds(s); },
         "seconds per observation interval (NVML read every 2 s and averaged over it)")
      ->type_name("S")
      ->default_str(std::to_string(c->observe.period.count()))
      ->check(CLI::Range(kMinObservePeriod.count(), kMaxObservePeriod.count()));
  app->add_option("--observe-top-k", c->observe.top_k,
                  "contenders kept per observed pod and window, and per node on /metrics")
      ->capture_default_str()
      ->check(CLI::Range(size_t{1}, kMaxObservedContenders));
  app->add_option("--host-proc", c->observe.host_proc,
                  "the host's procfs, read only: /proc/stat, and where a pod has no PSI its "
                  "processes (each /proc/<pid>/cgroup, scanned when this is not the agent's own "
                  "PID namespace's /proc) and their run delay (the chart mounts the host's /proc "
                  "at /host/proc)")
      ->capture_default_str();
}

// ---- the commands -----------------------------------------------------------------------

// Pretty JSON. Text from the node (cgroup paths a tenant named, kernel messages) need not be
// UTF-8: an invalid sequence is printed as U+FFFD instead of aborting the command.
std::string Dump(const nlohmann::json& j) {
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
}

nlohmann::json ApplyReportJson(const ApplyReport& r) {
  nlohmann::json pods = nlohmann::json::array();
  for (size_t i = 0; i < r.pods.size(); ++i) {
    const feedguard::v1::PodReport& p = r.pods[i];
    nlohmann::json j = {
        {"pod", p.namespace_() + "/" + p.name()},
        {"uid", p.uid()},
        {"policy", p.policy()},
        {"role", p.role() == feedguard::v1::PodReport::TRAINER ? "trainer" : "neighbour"},
        {"enforced", p.enforced()},
        {"filesWritten", i < r.pod_files_written.size() ? r.pod_files_written[i] : 0}};
    if (!p.cpus().empty()) j["cpus"] = p.cpus();
    if (!p.reason().empty()) j["reason"] = p.reason();
    if (!p.message().empty()) j["message"] = p.message();
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

int CmdTopology(const NodeConfig& c, bool json) {
  auto topo = LoadNodeTopology(c);
  // Same exit codes as `plan` for the same bad input: 2 for a bad file, 1 otherwise.
  if (!topo.ok()) {
    return Fail(topo.status(), topo.status().code() == StatusCode::kInvalidArgument ? 2 : 1);
  }
  std::cout << (json ? Dump(TopologyToJson(*topo)) + "\n" : TopologyToTable(*topo));
  return 0;
}

int CmdPlanOrApply(const NodeConfig& c, const std::string& fence_file, bool apply) {
  if (fence_file.empty()) return Fail(InvalidArgument("--fence FILE is required"), 2);
  auto fence = LoadNodeFenceFile(fence_file);
  if (!fence.ok()) return Fail(fence.status(), 2);
  // Bad input writes nothing, not even the state dir: every pod must exist and the plan must
  // be computable before the state dir is opened and the first file is written.
  auto options = NodeEngineOptionsFor(c);
  if (!options.ok()) {
    return Fail(options.status(), options.status().code() == StatusCode::kInvalidArgument ? 2 : 1);
  }
  NodeParts probe = MakeNodeParts(*options);
  if (Status st = probe.engine->CheckPodsExist(*fence); !st.ok()) return Fail(st, 2);
  auto plan = probe.engine->MakePlanFor(*fence);
  if (!plan.ok()) return Fail(plan.status(), 2);
  if (!apply) {
    std::cout << Dump(PlanToJson(*plan)) << "\n";
    return 0;
  }
  // Valid: now open the state dir (the topology is not loaded again).
  if (Status st = OpenState(c, *options); !st.ok()) return Fail(st, 1);
  NodeParts node = MakeNodeParts(std::move(options).value());
  auto report = node.engine->Apply(*fence);
  if (!report.ok()) return Fail(report.status(), 1);
  auto full = node.engine->last_apply();
  std::cout << Dump(ApplyReportJson(*full)) << "\n";
  return full->failed == 0 ? 0 : 1;
}

int CmdRevert(const NodeConfig& c) {
  auto node = BuildNode(c);
  if (!node.ok()) return Fail(node.status(), 1);
  ApplyReport r = node->engine->RevertAll();
  std::cout << Dump(ApplyReportJson(r)) << "\n";
  for (const auto& v : r.reverts) {
    if (v.outcome == reason::kRevertFailed) return 1;
  }
  return 0;
}

int CmdRun(AgentConfig c) {
  if (Status st = AgentApp::Validate(c); !st.ok()) return Fail(st, 2);
  auto app = AgentApp::Create(std::move(c));
  if (!app.ok()) return Fail(app.status(), 1);
  if (Status st = (*app)->Start(); !st.ok()) return Fail(st, 2);
  const int rc = (*app)->Wait();
  (*app)->Stop();
  return rc;
}

}  // namespace

int RunAgentCli(int argc, char** argv) {
  // Every command's values, filled by CLI11; only the chosen command's are read.
  AgentConfig config;  // config.node: the node flags, shared by all commands
  std::string log_level = "info";
  std::string fence_file;
  std::string previous;
  bool json = false;

  CLI::App app(kDescription, "feedguard-agent");
  app.footer(kFooter);
  app.require_subcommand(1);
  // A flag given twice: the last value wins (also in the subcommands, which inherit this).
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);

  CLI::App* run = app.add_subcommand(
      "run", "the node agent: dial the controller, enforce each NodeFence, report");
  AddRunFlags(run, &config);
  AddNodeFlags(run, &config.node, &log_level);

  CLI::App* topology =
      app.add_subcommand("topology", "print this node's cores, NUMA nodes and GPUs");
  topology->add_flag("--json", json, "print JSON instead of a table");
  AddNodeFlags(topology, &config.node, &log_level);

  CLI::App* plan = app.add_subcommand(
      "plan",
      "print what a fence file would do here (and why each trainer sits where it sits; "
      "--previous STATE_DIR: as a restarted agent would); writes nothing");
  plan->add_option("--fence", fence_file, "NodeFence file (JSON or YAML)")->required();
  CLI::Option* previous_flag = plan->add_option(
      "--previous", previous,
      "a state dir: plan as an agent restarted over it would (its trainers are incumbents)");
  AddNodeFlags(plan, &config.node, &log_level);

  CLI::App* apply =
      app.add_subcommand("apply", "enforce a fence file (JSON or YAML NodeFence) on this node");
  apply->add_option("--fence", fence_file, "NodeFence file (JSON or YAML)")->required();
  AddNodeFlags(apply, &config.node, &log_level);

  CLI::App* revert = app.add_subcommand(
      "revert", "restore every original value the agent replaced (unfence the node)");
  AddNodeFlags(revert, &config.node, &log_level);

  if (argc < 2) {  // no command: the overview, as an error
    std::cout << app.help();
    return 2;
  }
  std::vector<std::string> args = ReversedArgs(argc, argv);
  if (args.size() == 1 && args[0] == "help") args[0] = "--help";
  if (const std::string& cmd = args.back(); cmd.rfind("-", 0) != 0) {
    try {
      app.get_subcommand(cmd);
    } catch (const CLI::OptionNotFound&) {
      std::cerr << "feedguard-agent: unknown command \"" << cmd << "\"\n\n" << app.help();
      return 2;
    }
  }
  try {
    app.parse(args);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();  // the chosen command's help, or the overview
    return 0;
  } catch (const CLI::CallForAllHelp&) {
    std::cout << app.help("", CLI::AppFormatMode::All);
    return 0;
  } catch (const CLI::ParseError& e) {
    std::cerr << "feedguard-agent: " << e.what() << " (see --help)\n";
    return 2;
  }

  spdlog::set_level(spdlog::level::from_str(log_level));
  if (*topology) return CmdTopology(config.node, json);
  if (*plan) {
    if (previous_flag->count() > 0) config.node.previous = previous;
    return CmdPlanOrApply(config.node, fence_file, /*apply=*/false);
  }
  if (*apply) return CmdPlanOrApply(config.node, fence_file, /*apply=*/true);
  if (*revert) return CmdRevert(config.node);
  return CmdRun(std::move(config));
}

}  // namespace feedguard::agent
