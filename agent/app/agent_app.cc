#include "agent/app/agent_app.h"

#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "feedguard/common/wire_limits.h"

namespace feedguard::agent {

// The engine as the client's FenceApplier, timing every Apply for fence_apply_seconds and
// keeping the last report for the per-trainer gauges.
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

Status AgentApp::Validate(const AgentConfig& c) {
  if (c.controller.empty()) return InvalidArgument("--controller HOST:PORT is required");
  if (c.node.node_name.empty()) return InvalidArgument("--node-name is required");
  if (c.max_fence_bytes < (64u << 10) || c.max_fence_bytes > (1u << 30)) {
    return InvalidArgument("--max-fence-bytes must be between 65536 and 1073741824");
  }
  if (c.observe.period < kMinObservePeriod || c.observe.period > kMaxObservePeriod) {
    return InvalidArgument("--observe-period-s must be between " +
                           std::to_string(kMinObservePeriod.count()) + " and " +
                           std::to_string(kMaxObservePeriod.count()));
  }
  if (c.observe.top_k < 1 || c.observe.top_k > kMaxObservedContenders) {
    return InvalidArgument("--observe-top-k must be between 1 and " +
                           std::to_string(kMaxObservedContenders));
  }
  return OkStatus();
}

AgentApp::AgentApp(AgentConfig config) : config_(std::move(config)) {}

Result<std::unique_ptr<AgentApp>> AgentApp::Create(AgentConfig config) {
  FG_RETURN_IF_ERROR(Validate(config));
  config.node.log_decisions = true;  // the daemon says each decision once (info)
  std::unique_ptr<AgentApp> app(new AgentApp(std::move(config)));
  FG_RETURN_IF_ERROR(app->signals_.status());
  FG_ASSIGN_OR_RETURN(app->node_, BuildNode(app->config_.node, app->config_.observe));
  return app;
}

FenceClientOptions AgentApp::ClientOptions() const {
  FenceClientOptions o;
  o.target = config_.controller;
  o.insecure = config_.insecure;
  o.tls = {config_.tls_ca, config_.tls_cert, config_.tls_key};
  o.tls_server_name = config_.tls_server_name;
  o.token_file = config_.token_file;
  o.report_interval = config_.report_interval;
  o.max_receive_message_bytes = config_.max_fence_bytes;
  o.hello.set_node_name(config_.node.node_name);
  o.hello.set_agent_version(FEEDGUARD_VERSION);
  const auto& layout = node_.cgroups->layout();
  o.hello.set_cgroup_version(std::string(cgroup::CgroupVersionName(layout.version)));
  o.hello.set_cgroup_driver(std::string(cgroup::DriverName(layout.driver)));
  if (layout.caps.cpu_idle) o.hello.add_capabilities("cpu.idle");
  if (layout.caps.burst) o.hello.add_capabilities("cpu.burst");
  if (layout.caps.psi) o.hello.add_capabilities("cpu.pressure");
  auto* summary = o.hello.mutable_topology();
  summary->set_numa_nodes(static_cast<int>(node_.topology.numa_nodes.size()));
  summary->set_cores(static_cast<int>(node_.topology.cores.size()));
  summary->set_pus(static_cast<int>(node_.topology.AllPus().size()));
  summary->set_gpus(static_cast<int>(node_.topology.gpus.size()));
  summary->set_allowed_cpus(node_.topology.allowed_cpus.ToString());
  return o;
}

Status AgentApp::Start() {
  applier_ = std::make_shared<TimedApplier>(node_.engine, &apply_seconds_);
  // The client's report thread asks the applier for a fresh report every report interval.
  FG_ASSIGN_OR_RETURN(client_, FenceClient::Start(ClientOptions(), applier_));
  spdlog::info("feedguard-agent: node {} dialing {}", config_.node.node_name, config_.controller);

  // Observation is a report's extra, never worth the agent: a thread that cannot start is said.
  if (node_.observer) {
    if (Status st = node_.observer->Start(); !st.ok()) {
      spdlog::warn("observer: {}", st.ToString());
    } else {
      spdlog::info("feedguard-agent: observing the GPU pods the controller names every {} s",
                   config_.observe.period.count());
    }
  }

  WatcherOptions wo;
  wo.sweep_interval = config_.verify_interval;
  watcher_ = std::make_unique<Watcher>(node_.enforcer, wo);
  if (Status st = watcher_->Start(); !st.ok()) {
    spdlog::warn("overwrite watcher: {}", st.ToString());
  }

  if (!config_.metrics_addr.empty()) {
    FG_ASSIGN_OR_RETURN(metrics_, MetricsServer::Start(
                                      config_.metrics_addr, [this] { return RenderMetrics(); },
                                      [this] { return node_.enforcer->ready(); }));
  }
  return OkStatus();
}

int AgentApp::Wait() {
  signals_.Wait();
  return 0;
}

void AgentApp::Stop() {
  if (stopped_) return;
  stopped_ = true;
  if (watcher_) watcher_->Stop();
  if (node_.observer) node_.observer->Stop();
  if (client_) {
    spdlog::info("feedguard-agent: stopping; fences stay in place (use `revert` to remove them)");
    client_->Stop();
  }
  metrics_.reset();
}

std::string RenderObservedMetrics(const observe::ObserveMetrics& m) {
  std::vector<Series> wait, behind, lost, ratio, behind_ratio, contenders;
  for (const observe::ObservedPodMetrics& p : m.pods) {
    auto by_source = [&](const std::map<observe::WaitSource, double>& totals,
                         std::vector<Series>& into) {
      for (const auto& [source, s] : totals) {
        into.push_back(
            {{{"namespace", p.ns},
              {"pod", p.name},
              {"source", std::string(NameOf(observe::kWaitSourceNames, source, "unknown"))}},
             s});
      }
    };
    by_source(p.wait_s_total, wait);
    by_source(p.behind_others_s_total, behind);
    if (p.gpu_lost_s_total) {
      lost.push_back({{{"namespace", p.ns}, {"pod", p.name}}, *p.gpu_lost_s_total});
    }
    if (p.wait_ratio_10m) {  // not where the wait was not measured
      ratio.push_back(
          {{{"namespace", p.ns}, {"pod", p.name}, {"window", "10m"}}, *p.wait_ratio_10m});
    }
    if (p.behind_others_ratio_10m) {
      behind_ratio.push_back(
          {{{"namespace", p.ns}, {"pod", p.name}, {"window", "10m"}}, *p.behind_others_ratio_10m});
    }
  }
  for (const observe::Contention& c : m.contenders) {
    contenders.push_back({{{"contender_uid", c.contender}, {"window", "10m"}}, c.cpu_s});
  }
  std::string out;
  out += RenderSeries("feedguard_observed_pod_cpu_wait_seconds_total",
                      "time an observed GPU pod's CPU feeders waited for a CPU since the agent "
                      "first observed it (source psi: cpu.pressure some; schedstat: its tasks' run "
                      "delay, an upper bound)",
                      "counter", wait);
  out += RenderSeries("feedguard_observed_pod_cpu_wait_behind_others_seconds_total",
                      "of that wait, the part in which other workloads could have held the pod's "
                      "CPUs (an upper bound; the rest it waited behind its own threads)",
                      "counter", behind);
  out += RenderSeries("feedguard_observed_pod_gpu_lost_seconds_total",
                      "estimated GPU time an observed pod lost to its feeders' CPU wait behind "
                      "other workloads (that wait x GPU idle / interval, per interval; pods with "
                      "an NVML reading only)",
                      "counter", lost);
  out += RenderSeries("feedguard_observed_pod_wait_ratio",
                      "share of the window an observed GPU pod's feeders waited for a CPU (absent "
                      "while its wait is not measured: no PSI and its tasks not seen)",
                      "gauge", ratio);
  out += RenderSeries("feedguard_observed_pod_wait_behind_others_ratio",
                      "share of the window an observed GPU pod's feeders waited while other "
                      "workloads could have held its CPUs (absent while its wait is not measured)",
                      "gauge", behind_ratio);
  out += RenderSeries("feedguard_observed_contender_cpu_seconds",
                      "CPU time the node's top contenders took on observed pods' CPUs while they "
                      "waited, summed over those pods (contender_uid: a pod uid, or node)",
                      "gauge", contenders);
  return out;
}

std::string AgentApp::RenderMetrics() const {
  auto cs = client_->stats();
  std::string out;
  out += RenderGauge("feedguard_agent_connected", "1 while a stream to the controller is open",
                     cs.connected ? 1 : 0);
  out += RenderGauge("feedguard_agent_applied_version", "last NodeFence version applied",
                     static_cast<double>(cs.applied_version));
  out += apply_seconds_.Render("feedguard_fence_apply_seconds",
                               "time to plan and write one NodeFence");
  uint64_t overwrites = 0;
  for (const auto& [uid, n] : node_.enforcer->OverwriteCounts()) overwrites += n;
  out +=
      RenderGauge("feedguard_overwrites_total", "cgroup values we wrote that someone else rewrote",
                  static_cast<double>(overwrites), "counter");
  uint64_t restatements = 0;
  for (const auto& [uid, n] : node_.enforcer->RestatementCounts()) restatements += n;
  out += RenderGauge("feedguard_restatements_total",
                     "cgroup values we wrote that another writer replaced by the recorded original "
                     "(systemd re-applying a unit on daemon-reload); re-applied, never contested",
                     static_cast<double>(restatements), "counter");
  out += RenderGauge("feedguard_neighbour_cpu_seconds_total",
                     "CPU time pods received while fenced as neighbours",
                     node_.engine->NeighbourCpuSeconds(), "counter");
  out += RenderGauge("feedguard_owned_files", "cgroup files holding a value we wrote",
                     static_cast<double>(node_.enforcer->OwnedFiles().size()));
  if (auto r = applier_->last()) {
    std::vector<std::pair<std::string, double>> psi;
    std::vector<std::pair<std::string, double>> busy;
    for (const auto& p : r->pods()) {
      if (p.role() != feedguard::v1::PodReport::TRAINER) continue;
      psi.push_back({p.namespace_() + "/" + p.name(), p.cpu_pressure_some_avg10() / 100});
      if (p.gpus_sampled() > 0) {
        busy.push_back({p.namespace_() + "/" + p.name(), p.gpu_busy_percent() / 100});
      }
    }
    out += RenderLabelled("feedguard_trainer_cpu_pressure_ratio",
                          "share of the last 10 s some trainer task waited for CPU (PSI)", "gauge",
                          psi, "pod");
    if (!busy.empty()) {
      out += RenderLabelled("feedguard_trainer_gpu_busy_ratio",
                            "mean NVML utilisation of the GPUs a trainer holds (0-1)", "gauge",
                            busy, "pod");
    }
  }
  if (node_.observer) out += RenderObservedMetrics(node_.observer->Metrics());
  return out;
}

}  // namespace feedguard::agent
