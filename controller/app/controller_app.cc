#include "controller/app/controller_app.h"

#include <unistd.h>

#include <atomic>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <stop_token>
#include <thread>

#include <spdlog/spdlog.h>

#include "common/flags.h"
#include "common/metrics.h"
#include "common/signals.h"
#include "controller/app/kube_adapters.h"
#include "controller/auth/agent_auth.h"
#include "controller/kube/curl_transport.h"
#include "controller/kube/kubeconfig.h"
#include "controller/kube/leader_election.h"
#include "controller/kube/reflector.h"
#include "feedguard/common/gpu_resource_names.h"

namespace feedguard::controller {
namespace {

void DefineFlags(Flags& f) {
  f.Define("kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)");
  f.Define("listen-grpc", "0.0.0.0:9443", "address agents dial (host:port)");
  f.Define("metrics-addr", "0.0.0.0:8080",
           "bind address (host:port) of /metrics, /healthz and /readyz; all interfaces by "
           "default so the kubelet's probes and Prometheus reach the pod IP; 127.0.0.1:PORT "
           "keeps them local");
  f.DefineBool("leader-elect", "run only while holding the Lease (for 2+ replicas)");
  f.Define("lease-namespace", "feedguard-system", "namespace of the leader-election Lease");
  f.Define("lease-name", "feedguard-controller", "name of the leader-election Lease");
  f.Define("identity", "", "this replica's name in the Lease (default: hostname-pid)");
  f.Define("tls-cert", "", "controller's serving certificate (PEM)");
  f.Define("tls-key", "", "controller's serving key (PEM)");
  f.Define("tls-client-ca", "", "CA that signs agent client certificates (PEM)");
  f.DefineBool("insecure", "no TLS and no agent authentication (local demos only)");
  f.Define("agent-identity", "token",
           "token: the agent's projected ServiceAccount token, checked by TokenReview, must be "
           "bound to the node its hello names (mTLS still required for the channel); cert: the "
           "agent's client certificate must name its node (CN system:node:<name> with O "
           "system:nodes, signed by --tls-client-ca, which must sign node identities only); "
           "shared-cert (INSECURE): any certificate from the CA may speak for any node");
  f.Define("agent-token-audience", "feedguard", "audience of the agents' projected tokens");
  f.Define("agent-service-account", "feedguard-agent",
           "the agents' ServiceAccount (in --agent-namespace); token mode accepts only its tokens");
  f.DefineBool("suspend",
               "emergency off switch: withdraw every fence from every node and keep it so (also "
               "at runtime: annotation feedguard.io/suspend=true on --agent-namespace)");
  f.Define("agent-namespace", "feedguard-system", "namespace of the agent pods (never fenced)");
  f.Define("stale-after-ms", "60000", "an agent disconnected this long is reported stale");
  f.Define("agent-memory-quota-mb", "512",
           "cap on gRPC's memory for agent connections (buffers, calls); past it new connections "
           "are refused (agents retry); about 60 KiB counted per mTLS agent (raise it past ~8,000 "
           "agents); 0: no cap");
  f.Define("list-page-size", "0",
           "informers' lists: 0 = one unpaginated list, parsed item by item as it arrives, items "
           "unchanged since the last list not parsed at all (served from the API server's watch "
           "cache, Kubernetes >= 1.31; no continue token for etcd compaction to expire); N = "
           "pages of N objects, each parsed whole (for API servers that would read an "
           "unpaginated list from etcd in one piece)");
  f.Define("status-interval-ms", "1000", "at most one status write per policy per interval");
  f.Define("max-fence-bytes", std::to_string(kMaxFenceBytes),
           "largest NodeFence sent to an agent (serialized); a node whose fence is bigger keeps "
           "its last one and is reported FenceTooLarge. Keep it below every agent's "
           "--max-fence-bytes (grpc's default 4 MiB for agents that set none)");
  f.Define("max-fence-containers-per-pod", std::to_string(kMaxFenceContainersPerPod),
           "container ids carried per pod in a fence; a pod with more is fenced at the pod "
           "level only and reported TooManyContainers");
  f.Define("gpu-resource-names", std::string(kDefaultGpuResourceNames),
           "extended resources that count as GPUs, comma-separated; a trailing - or * makes an "
           "entry a prefix (e.g. nvidia.com/mig-)");
  f.Define("log-level", "info", "trace | debug | info | warn | error");
  f.DefineBool("help", "show this help");
}

std::string Hostname() {
  char buf[256] = {};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

// The controller process once its flags are valid. Start() starts the parts in the order their
// members are declared below; Stop() stops them in reverse:
//
//   signals_     SIGTERM/SIGINT, blocked before any thread exists (taken only by Wait())
//   informers_   four reflectors (FencePolicies, Pods, Nodes, Namespaces) → reconciler_
//   metrics_     /metrics, /healthz, /readyz
//   elector_     leader election (--leader-elect), or lead at once; on leading:
//   distributor_   the gRPC server agents dial
//   loop_          the reconciler loop (fences, then status/finalizer/Event writes)
//
// Stop: loop_ → elector_ (releases the Lease) → distributor_ → informers_ → metrics_.
class ControllerApp {
 public:
  // Builds the API client and the reconciler (no thread yet). Errors: bad flags/kubeconfig.
  static Result<std::unique_ptr<ControllerApp>> Create(const Flags& f);
  ~ControllerApp() { Stop(); }
  ControllerApp(const ControllerApp&) = delete;
  ControllerApp& operator=(const ControllerApp&) = delete;

  Status Start();
  // Until SIGTERM/SIGINT (returns 0) or lost leadership / could not serve agents (returns 1).
  int Wait();
  void Stop();  // idempotent

 private:
  struct Informer {
    std::unique_ptr<kube::Reflector> reflector;
    std::jthread thread;
  };
  explicit ControllerApp(const Flags& f) : f_(f) {}
  void Watch(kube::Gvr gvr, std::function<void(const nlohmann::json&)> upsert,
             std::function<void(const nlohmann::json&)> remove,
             std::shared_ptr<const kube::FieldSet> fields = nullptr);
  void StartLeading();
  void Lose() {  // leadership lost or agents cannot be served: Wait() returns 1
    lost_ = true;
    signals_.Interrupt();
  }
  std::string RenderMetrics();

  const Flags& f_;
  TerminationSignals signals_;  // first: every later thread inherits the blocked mask
  // Built by Create():
  std::shared_ptr<RealTimeSource> clock_ = std::make_shared<RealTimeSource>();
  SleeperPtr sleeper_ = std::make_shared<RealSleeper>();
  kube::ClientPtr client_;
  std::string identity_;
  std::shared_ptr<DistributorSink> sink_ = std::make_shared<DistributorSink>();
  std::shared_ptr<Reconciler> reconciler_;
  std::chrono::milliseconds stale_after_{0};
  // Started by Start(), in this order:
  // Fences flow only once every informer delivered its initial list (Reconciler: never
  // withdraw on start). Each reflector calls on_synced once, after its handlers saw the list.
  static constexpr int kInformers = 4;
  std::atomic<int> informers_synced_{0};
  std::vector<Informer> informers_;
  CounterSum overwrites_sum_;  // used by the metrics collector
  std::unique_ptr<MetricsServer> metrics_;
  std::unique_ptr<kube::LeaderElector> elector_;
  std::jthread elector_thread_;
  std::atomic<bool> leading_{false};
  std::atomic<bool> lost_{false};
  std::unique_ptr<Distributor> distributor_;
  std::jthread loop_;
};

Result<std::unique_ptr<ControllerApp>> ControllerApp::Create(const Flags& f) {
  std::unique_ptr<ControllerApp> app(new ControllerApp(f));
  FG_RETURN_IF_ERROR(app->signals_.status());
  FG_ASSIGN_OR_RETURN(const std::chrono::milliseconds status_interval,
                      f.GetMillis("status-interval-ms"));
  FG_ASSIGN_OR_RETURN(app->stale_after_, f.GetMillis("stale-after-ms"));
  FG_ASSIGN_OR_RETURN(kube::RestConfig config, f.Get("kubeconfig").empty()
                                                   ? kube::LoadDefaultConfig()
                                                   : kube::LoadKubeconfig(f.Get("kubeconfig")));
  FG_ASSIGN_OR_RETURN(auto transport, kube::CurlTransport::Create(config, app->clock_));
  app->client_ = std::make_shared<kube::Client>(transport);
  app->identity_ =
      f.Get("identity").empty() ? Hostname() + "-" + std::to_string(getpid()) : f.Get("identity");
  auto events = std::make_shared<kube::EventRecorder>(app->client_, "feedguard-controller",
                                                      app->identity_, app->clock_);

  auto writer = std::make_shared<KubePolicyWriter>(app->client_, events);
  ReconcilerOptions ro;
  ro.rails.agent_namespace = f.Get("agent-namespace");
  ro.status_interval = status_interval;
  ro.suspended = f.GetBool("suspend");
  FG_ASSIGN_OR_RETURN(const int64_t max_fence_bytes, f.GetInt("max-fence-bytes"));
  FG_ASSIGN_OR_RETURN(const int64_t max_containers, f.GetInt("max-fence-containers-per-pod"));
  if (max_fence_bytes < 1024 || max_fence_bytes > (int64_t{1} << 30) || max_containers < 0) {
    return InvalidArgument(
        "--max-fence-bytes must be 1024-1073741824, --max-fence-containers-per-pod >= 0");
  }
  ro.max_fence_bytes = static_cast<size_t>(max_fence_bytes);
  ro.fence_limits.max_containers_per_pod = static_cast<size_t>(max_containers);
  {
    std::string error;
    if (!GpuResourceNames::Parse(f.Get("gpu-resource-names"), &ro.gpu_resource_names, &error)) {
      return InvalidArgument("--gpu-resource-names: " + error);
    }
  }
  app->reconciler_ = std::make_shared<Reconciler>(app->sink_, writer, ro);
  return app;
}

Status ControllerApp::Start() {
  auto rc = reconciler_.get();
  // The reconciler keeps its own compact record of each object; the informers keep only
  // resourceVersions (no JSON is held after a handler returns).
  Watch(
      FencePolicyGvr(), [rc](const auto& o) { rc->UpsertPolicy(o); },
      [rc](const auto& o) { rc->DeletePolicy(o); });
  // Pods and Nodes are parsed down to the fields their records read (PodFields, NodeFields):
  // most of a Pod's JSON and a Node's image list never reach memory.
  Watch(
      kube::PodsGvr(), [rc](const auto& o) { rc->UpsertPod(o); },
      [rc](const auto& o) { rc->DeletePod(o); }, PodFields());
  Watch(
      kube::NodesGvr(), [rc](const auto& o) { rc->UpsertNode(o); },
      [rc](const auto& o) { rc->DeleteNode(o); }, NodeFields());
  Watch(
      {"", "v1", "namespaces"}, [rc](const auto& o) { rc->UpsertNamespace(o); },
      [rc](const auto& o) { rc->DeleteNamespace(o); });

  FG_ASSIGN_OR_RETURN(metrics_, MetricsServer::Start(
                                    f_.Get("metrics-addr"), [this] { return RenderMetrics(); },
                                    // Ready only once the first full resolution ran (never before
                                    // the initial lists).
                                    [this] { return leading_.load() && reconciler_->Synced(); }));

  if (!f_.GetBool("leader-elect")) {
    StartLeading();
    return OkStatus();
  }
  kube::LeaderElectionConfig lc;
  lc.lease_namespace = f_.Get("lease-namespace");
  lc.lease_name = f_.Get("lease-name");
  lc.identity = identity_;
  lc.on_started_leading = [this] { StartLeading(); };
  lc.on_stopped_leading = [this] {
    if (leading_) Lose();
  };
  lc.on_new_leader = [](const std::string& who) { spdlog::info("leader is now {}", who); };
  elector_ = std::make_unique<kube::LeaderElector>(client_, lc, clock_, sleeper_);
  elector_thread_ = std::jthread([this](std::stop_token stop) { elector_->Run(stop); });
  return OkStatus();
}

void ControllerApp::Watch(kube::Gvr gvr, std::function<void(const nlohmann::json&)> upsert,
                          std::function<void(const nlohmann::json&)> remove,
                          std::shared_ptr<const kube::FieldSet> fields) {
  kube::ReflectorOptions o;
  o.gvr = gvr;
  o.fields = std::move(fields);
  if (auto n = f_.GetInt("list-page-size"); n.ok()) o.page_size = *n;  // checked in RunController
  kube::ResourceEventHandlers h;
  h.on_add = [upsert](const kube::ObjectPtr& obj) { upsert(*obj); };
  h.on_update = [upsert](const kube::ObjectPtr&, const kube::ObjectPtr& obj) { upsert(*obj); };
  h.on_delete = [remove](const kube::ObjectPtr& obj) { remove(*obj); };
  h.on_synced = [this, name = gvr.resource] {
    spdlog::info("informer {}: initial list delivered", name);
    if (++informers_synced_ == kInformers) reconciler_->MarkInformersSynced();
  };
  Informer inf;
  inf.reflector = std::make_unique<kube::Reflector>(
      client_, std::make_shared<kube::Store>(kube::StoreOptions{.keep_objects = false}), o, h,
      clock_, sleeper_);
  inf.thread = std::jthread([r = inf.reflector.get()](std::stop_token stop) { r->Run(stop); });
  informers_.push_back(std::move(inf));
}

// Leading: the distributor, then the reconciler loop.
void ControllerApp::StartLeading() {
  const Flags& f = f_;
  auto rc = reconciler_.get();
  DistributorOptions o;
  o.listen_address = f.Get("listen-grpc");
  o.insecure = f.GetBool("insecure");
  // token: the certificate secures the channel, the token names the node.
  o.trust_hello_node_name = f.Get("agent-identity") != "cert";
  if (f.Get("agent-identity") == "token" && !o.insecure) {
    TokenReviewOptions to;
    to.audience = f.Get("agent-token-audience");
    to.service_account_namespace = f.Get("agent-namespace");
    to.service_account_name = f.Get("agent-service-account");
    to.clock = clock_;
    auto auth = TokenReviewAuthenticator::Create(client_, to);
    if (!auth.ok()) {
      spdlog::error("agent identity: {}", auth.status().ToString());
      Lose();
      return;
    }
    o.authenticator = *auth;
  } else if (f.Get("agent-identity") == "shared-cert" && !o.insecure) {
    spdlog::warn("--agent-identity shared-cert: INSECURE, any agent may act for any node");
  }
  o.tls = {f.Get("tls-client-ca"), f.Get("tls-cert"), f.Get("tls-key")};
  o.stale_after = stale_after_;
  if (auto quota_mb = f.GetInt("agent-memory-quota-mb"); quota_mb.ok() && *quota_mb > 0) {
    o.memory_quota_bytes = static_cast<size_t>(*quota_mb) << 20;  // checked in RunController
  }
  o.observer = reconciler_;
  // Agents may speak only for nodes that have a Node object (checked once nodes are known).
  o.admit_node = [rc](const std::string& node) { return rc->NodeAdmissible(node); };
  auto d = Distributor::Start(o);
  if (!d.ok()) {
    spdlog::error("cannot serve agents on {}: {}", o.listen_address, d.status().ToString());
    Lose();
    return;
  }
  distributor_ = std::move(d).value();
  sink_->Attach(distributor_.get());
  spdlog::info("leading: serving agents on port {}", distributor_->port());
  loop_ = std::jthread([this](std::stop_token stop) { reconciler_->Run(stop); });
  leading_ = true;
}

std::string ControllerApp::RenderMetrics() {
  std::string out;
  auto s = reconciler_->stats();
  size_t connected = distributor_ ? distributor_->ConnectedCount() : 0;
  out += RenderGauge("feedguard_controller_leader", "1 while this replica leads", leading_ ? 1 : 0);
  out += RenderGauge("feedguard_suspended",
                     "1 while the off switch withdraws every fence (--suspend or the "
                     "feedguard.io/suspend annotation)",
                     reconciler_->Suspended() ? 1 : 0);
  out += RenderGauge("feedguard_agents_connected", "agents with an open stream",
                     static_cast<double>(connected));
  out += RenderGauge("feedguard_nodes_known", "nodes watched", static_cast<double>(s.nodes));
  out += RenderGauge("feedguard_pods_known", "pods watched", static_cast<double>(s.pods));
  out +=
      RenderGauge("feedguard_policies", "FencePolicies watched", static_cast<double>(s.policies));
  out += RenderGauge("feedguard_fences_sent_total", "NodeFence versions handed out",
                     static_cast<double>(s.fences_sent), "counter");
  out += RenderGauge("feedguard_status_writes_total", "FencePolicy status writes",
                     static_cast<double>(s.status_writes), "counter");
  if (distributor_) {
    double enforced = 0, failed = 0, stale = 0;
    std::map<std::string, double> overwrites_by_node;
    for (const auto& a : distributor_->ListAgents()) {
      // As in policy status: a disconnected agent counts by its last answer until the grace
      // period (--stale-after-ms) ends; its fences are still in place (fail static).
      if (a.stale)
        stale++;
      else if ((a.last_nack && a.last_nack->version == a.desired_version) ||
               a.unreadable_messages > 0)
        failed++;
      else if (a.acked_version >= a.desired_version)
        enforced++;
      if (a.last_report) {
        overwrites_by_node[a.node] = static_cast<double>(a.last_report->overwrites_total);
      }
    }
    out += RenderLabelled("feedguard_nodes", "nodes by enforcement state", "gauge",
                          {{"enforced", enforced}, {"failed", failed}, {"stale", stale}}, "state");
    out += RenderGauge("feedguard_overwrites_total",
                       "cgroup values rewritten by others, summed over agents' reports",
                       overwrites_sum_.Update(overwrites_by_node), "counter");
    const DistributorCounters c = distributor_->Counters();
    out += RenderGauge("feedguard_agent_hellos_pending",
                       "agent streams open but not yet past their hello",
                       static_cast<double>(c.hellos_pending));
    out += RenderLabelled(
        "feedguard_agent_streams_refused_total",
        "agent streams refused before anything was read, by the bound that refused them", "counter",
        {{"connection", static_cast<double>(c.refused_per_connection)},
         {"address", static_cast<double>(c.refused_per_address)},
         {"pending", static_cast<double>(c.refused_pending_total)},
         {"streams", static_cast<double>(c.refused_streams)},
         {"rate", static_cast<double>(c.refused_rate)}},
        "bound");
    out += RenderGauge("feedguard_agent_messages_unreadable_total",
                       "agent messages that did not parse (each ended its stream)",
                       static_cast<double>(c.unreadable_messages), "counter");
  }
  return out;
}

int ControllerApp::Wait() {
  signals_.Wait();
  if (!lost_) return 0;
  spdlog::error("lost leadership (or could not serve): exiting so a fresh replica takes over");
  return 1;
}

void ControllerApp::Stop() {
  if (loop_.joinable()) {  // no more fences or API writes
    loop_.request_stop();
    loop_.join();
  }
  for (auto& i : informers_) i.thread.request_stop();
  if (elector_thread_.joinable()) {  // hands the Lease back (release_on_stop)
    elector_thread_.request_stop();
    elector_thread_.join();
  }
  sink_->Attach(nullptr);
  if (distributor_) distributor_->Shutdown();
  for (auto& i : informers_) {
    if (i.thread.joinable()) i.thread.join();
  }
  metrics_.reset();
}

}  // namespace

int RunController(int argc, char** argv) {
  Flags f;
  DefineFlags(f);
  if (Status st = f.Parse(argc, argv, 1); !st.ok()) {
    std::cerr << "feedguard-controller: " << st.message() << "\n";
    return 2;
  }
  if (f.GetBool("help")) {
    std::cout << "usage: feedguard-controller [flags]\n\nflags:\n" << f.Help();
    return 0;
  }
  spdlog::set_level(spdlog::level::from_str(f.Get("log-level")));
  if (f.Get("agent-identity") != "token" && f.Get("agent-identity") != "cert" &&
      f.Get("agent-identity") != "shared-cert") {
    std::cerr << "feedguard-controller: --agent-identity must be token, cert or shared-cert\n";
    return 2;
  }
  if (auto n = f.GetInt("list-page-size"); !n.ok() || *n < 0 || *n > 100000) {
    std::cerr << "feedguard-controller: --list-page-size must be 0 (streamed) or 1-100000\n";
    return 2;
  }
  if (auto q = f.GetInt("agent-memory-quota-mb"); !q.ok() || *q < 0 || *q > (1 << 20)) {
    std::cerr << "feedguard-controller: --agent-memory-quota-mb must be 0 or a size in MiB\n";
    return 2;
  }
  if (!f.GetBool("insecure") &&
      (f.Get("tls-cert").empty() || f.Get("tls-key").empty() || f.Get("tls-client-ca").empty())) {
    std::cerr << "feedguard-controller: --tls-cert, --tls-key and --tls-client-ca are required "
                 "(or --insecure for a local demo)\n";
    return 2;
  }

  auto app = ControllerApp::Create(f);
  if (!app.ok()) {
    std::cerr << "feedguard-controller: " << app.status().message() << "\n";
    return 2;
  }
  if (Status st = (*app)->Start(); !st.ok()) {
    (*app)->Stop();
    std::cerr << "feedguard-controller: " << st.message() << "\n";
    return 2;
  }
  const int code = (*app)->Wait();
  (*app)->Stop();
  return code;
}

}  // namespace feedguard::controller
