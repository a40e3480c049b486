#include "controller/app/controller_app.h"

#include <unistd.h>

#include <atomic>
#include <charconv>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <stop_token>
#include <thread>

#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include "common/metrics.h"
#include "common/signals.h"
#include "controller/app/kube_adapters.h"
#include "controller/auth/agent_auth.h"
#include "controller/kube/curl_transport.h"
#include "controller/kube/kubeconfig.h"
#include "controller/kube/leader_election.h"
#include "controller/kube/reflector.h"
#include "controller/observe/report_writer.h"
#include "feedguard/common/gpu_resource_names.h"

namespace feedguard::controller {
namespace {

// Every flag of feedguard-controller, typed; CLI11 checks ranges and choices.
struct ControllerConfig {
  std::string kubeconfig;
  std::string listen_grpc = "0.0.0.0:9443";
  std::string metrics_addr = "0.0.0.0:8080";
  bool leader_elect = false;
  std::string lease_namespace = "feedguard-system";
  std::string lease_name = "feedguard-controller";
  int64_t lease_duration_ms = kube::LeaderElectionConfig{}.lease_duration.count();
  int64_t renew_deadline_ms = kube::LeaderElectionConfig{}.renew_deadline.count();
  int64_t retry_period_ms = kube::LeaderElectionConfig{}.retry_period.count();
  int64_t standby_arm_after_ms = -1;  // < 0: 1.5 x retry_period_ms
  std::string identity;
  std::string tls_cert, tls_key, tls_client_ca;
  bool insecure = false;
  std::string agent_identity = "token";
  std::string agent_token_audience = "feedguard";
  std::string agent_service_account = "feedguard-agent";
  bool suspend = false;
  std::string agent_namespace = "feedguard-system";
  int64_t stale_after_ms = 60000;
  int64_t agent_memory_quota_mb = 512;
  int64_t list_page_size = 0;
  std::string list_encoding = "protobuf";
  int64_t status_interval_ms = 1000;
  int64_t max_fence_bytes = kMaxFenceBytes;
  int64_t max_fence_containers_per_pod = kMaxFenceContainersPerPod;
  int64_t max_observed_pods = kMaxObservedPodsPerNode;
  int64_t observe_interval_ms = 30000;
  std::string gpu_resource_names = std::string(kDefaultGpuResourceNames);
  std::string gpu_dra_drivers = std::string(kDefaultGpuDraDrivers);
  std::string log_level = "info";
};

// A whole number in [lo, hi], said plainly when it is not ("--x: \"abc\" is not a whole number
// from 0 to 100000").
CLI::Validator Whole(int64_t lo, int64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& v) -> std::string {
        int64_t n = 0;
        auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
        if (ec == std::errc() && end == v.data() + v.size() && n >= lo && n <= hi) return "";
        return "\"" + v + "\" is not a whole number from " + std::to_string(lo) + " to " +
               std::to_string(hi);
      },
      "", "whole number");
}
constexpr int64_t kNoLimit = std::numeric_limits<int64_t>::max();

void AddFlags(CLI::App& app, ControllerConfig* c) {
  auto opt = [&](const char* name, auto& value, const char* help) {
    return app.add_option(name, value, help)->capture_default_str();
  };
  opt("--kubeconfig", c->kubeconfig,
      "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)");
  opt("--listen-grpc", c->listen_grpc, "address agents dial (host:port)");
  opt("--metrics-addr", c->metrics_addr,
      "bind address (host:port) of /metrics, /healthz and /readyz; all interfaces by default so "
      "the kubelet's probes and Prometheus reach the pod IP; 127.0.0.1:PORT keeps them local");
  app.add_flag("--leader-elect", c->leader_elect,
               "run only while holding the Lease (for 2+ replicas)");
  opt("--lease-namespace", c->lease_namespace, "namespace of the leader-election Lease");
  opt("--lease-name", c->lease_name, "name of the leader-election Lease");
  opt("--lease-duration-ms", c->lease_duration_ms,
      "how long a standby waits after the leader's last renewal before it takes the Lease: "
      "the floor of a failover after a leader dies without releasing it")
      ->check(Whole(1000, 3'600'000));
  opt("--renew-deadline-ms", c->renew_deadline_ms,
      "the leader steps down (and exits) when it could not renew for this long; < "
      "--lease-duration-ms")
      ->check(Whole(500, 3'600'000));
  opt("--retry-period-ms", c->retry_period_ms,
      "how often the leader renews and a standby tries to take the Lease; < --renew-deadline-ms")
      ->check(Whole(100, 600'000));
  opt("--standby-arm-after-ms", c->standby_arm_after_ms,
      "a standby whose reads of the Lease show the leader's record unchanged for this long "
      "starts serving agents before it leads: it accepts their streams (TLS, token review, "
      "hello) and holds them, so that they are fenced the moment it takes the Lease, and ends "
      "them if the leader renews again. < --lease-duration-ms; 0: never; default 1.5 x "
      "--retry-period-ms (the leader renews every retry period)")
      ->check(CLI::Range(int64_t{-1}, int64_t{3'600'000}));
  opt("--identity", c->identity, "this replica's name in the Lease (default: hostname-pid)");
  opt("--tls-cert", c->tls_cert, "controller's serving certificate (PEM)");
  opt("--tls-key", c->tls_key, "controller's serving key (PEM)");
  opt("--tls-client-ca", c->tls_client_ca, "CA that signs agent client certificates (PEM)");
  app.add_flag("--insecure", c->insecure, "no TLS and no agent authentication (local demos only)");
  opt("--agent-identity", c->agent_identity,
      "token: the agent's projected ServiceAccount token, checked by TokenReview, must be bound "
      "to the node its hello names (mTLS still required for the channel); cert: the agent's "
      "client certificate must name its node (CN system:node:<name> with O system:nodes, signed "
      "by --tls-client-ca, which must sign node identities only); shared-cert (INSECURE): any "
      "certificate from the CA may speak for any node")
      ->check(CLI::IsMember({"token", "cert", "shared-cert"}));
  opt("--agent-token-audience", c->agent_token_audience,
      "audience of the agents' projected tokens");
  opt("--agent-service-account", c->agent_service_account,
      "the agents' ServiceAccount (in --agent-namespace); token mode accepts only its tokens");
  app.add_flag("--suspend", c->suspend,
               "emergency off switch: withdraw every fence from every node and keep it so (also "
               "at runtime: annotation feedguard.io/suspend=true on --agent-namespace)");
  opt("--agent-namespace", c->agent_namespace, "namespace of the agent pods (never fenced)");
  opt("--stale-after-ms", c->stale_after_ms, "an agent disconnected this long is reported stale")
      ->check(Whole(0, kNoLimit));
  opt("--agent-memory-quota-mb", c->agent_memory_quota_mb,
      "cap on gRPC's memory for agent connections (buffers, calls); past it new connections are "
      "refused (agents retry); about 60 KiB counted per mTLS agent (raise it past ~8,000 "
      "agents); 0: no cap")
      ->check(Whole(0, int64_t{1} << 20));
  opt("--list-page-size", c->list_page_size,
      "informers' lists: 0 = one unpaginated list, parsed item by item as it arrives, items "
      "unchanged since the last list not parsed at all (served from the API server's watch "
      "cache, Kubernetes >= 1.31; no continue token for etcd compaction to expire); N = pages "
      "of N objects, each parsed whole (for API servers that would read an unpaginated list "
      "from etcd in one piece)")
      ->check(Whole(0, 100000));
  opt("--list-encoding", c->list_encoding,
      "how the unpaginated list of Pods is asked for: protobuf (the API server's binary "
      "encoding: a third of JSON's bytes and, unlike JSON, streamed from the first byte) or "
      "json. Watches, paged lists and the other kinds are JSON")
      ->check(CLI::IsMember({"protobuf", "json"}));
  opt("--status-interval-ms", c->status_interval_ms,
      "at most one status write per policy per interval")
      ->check(Whole(0, kNoLimit));
  opt("--max-fence-bytes", c->max_fence_bytes,
      "largest NodeFence sent to an agent (serialized); a node whose fence is bigger keeps its "
      "last one and is reported FenceTooLarge. Keep it below every agent's --max-fence-bytes "
      "(grpc's default 4 MiB for agents that set none)")
      ->check(Whole(1024, int64_t{1} << 30));
  opt("--max-fence-containers-per-pod", c->max_fence_containers_per_pod,
      "container ids carried per pod in a fence; a pod with more is fenced at the pod level "
      "only and reported TooManyContainers")
      ->check(Whole(0, kNoLimit));
  opt("--max-observed-pods", c->max_observed_pods,
      "GPU pods per node the agent observes with no policy (CPU wait, contenders, GPU time lost; "
      "docs/DESIGN.md §4b), the first by namespace/name; 0 turns observation off")
      ->check(Whole(0, static_cast<int64_t>(kMaxObservedPodsPerNode)));
  opt("--observe-interval-ms", c->observe_interval_ms,
      "at most one write of the StarvationReport `cluster` per interval (only when what the "
      "agents saw changed)")
      ->check(Whole(1000, kNoLimit));
  opt("--gpu-resource-names", c->gpu_resource_names,
      "extended resources that count as GPUs, comma-separated; a trailing - or * makes an entry "
      "a prefix (e.g. nvidia.com/mig-)");
  opt("--gpu-dra-drivers", c->gpu_dra_drivers,
      "DRA drivers whose devices allocated to a pod's ResourceClaims count as its GPUs, "
      "comma-separated; empty: DRA claims are not read (no resourceclaims watch)");
  opt("--log-level", c->log_level, "trace | debug | info | warn | error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}));
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
//   distributor_   the gRPC server agents dial (a standby starts it early, "armed", when the
//                  leader stops renewing: it holds the agents' streams until it leads)
//   loop_          the reconciler loop (fences, then status/finalizer/Event writes)
//
// Stop: loop_ → elector_ (releases the Lease) → distributor_ → informers_ → metrics_.
class ControllerApp {
 public:
  // Builds the API client and the reconciler (no thread yet). Errors: bad flags/kubeconfig.
  static Result<std::unique_ptr<ControllerApp>> Create(ControllerConfig c);
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
  explicit ControllerApp(ControllerConfig c) : c_(std::move(c)) {}
  void Watch(kube::Gvr gvr, std::function<void(const nlohmann::json&)> upsert,
             std::function<void(const nlohmann::json&)> remove,
             std::shared_ptr<const kube::FieldSet> fields = nullptr,
             std::function<nlohmann::json(std::string_view)> protobuf_item = nullptr);
  // Whether to watch ResourceClaims: DRA drivers configured and the API listable.
  bool WatchClaims();
  void StartLeading();
  // Builds the Distributor's options and starts it (the gRPC server agents dial).
  Status StartDistributor();
  // The leader fell silent (true) or spoke again (false): start or end serving agents' streams
  // before leading (elector thread).
  void ArmStandby(bool silent);
  std::shared_ptr<Distributor> distributor() const {
    std::lock_guard<std::mutex> l(distributor_mu_);
    return distributor_;
  }
  void Lose() {  // leadership lost or agents cannot be served: Wait() returns 1
    lost_ = true;
    signals_.Interrupt();
  }
  std::string RenderMetrics();

  const ControllerConfig c_;
  TerminationSignals signals_;  // first: every later thread inherits the blocked mask
  // Built by Create():
  std::shared_ptr<RealTimeSource> clock_ = std::make_shared<RealTimeSource>();
  SleeperPtr sleeper_ = std::make_shared<RealSleeper>();
  kube::ClientPtr client_;
  std::string identity_;
  std::shared_ptr<DistributorSink> sink_ = std::make_shared<DistributorSink>();
  std::shared_ptr<Reconciler> reconciler_;
  std::chrono::milliseconds stale_after_{0};
  std::chrono::milliseconds arm_after_{0};
  // Started by Start(), in this order:
  // Fences flow only once every informer delivered its initial list (Reconciler: never
  // withdraw on start). Each reflector calls on_synced once, after its handlers saw the list.
  int informers_expected_ = 0;  // set by Start() before the first informer starts
  std::atomic<int> informers_synced_{0};
  std::vector<Informer> informers_;
  CounterSum overwrites_sum_;  // used by the metrics collector
  std::unique_ptr<MetricsServer> metrics_;
  std::unique_ptr<kube::LeaderElector> elector_;
  std::jthread elector_thread_;
  std::atomic<bool> leading_{false};
  std::atomic<bool> lost_{false};
  std::atomic<bool> armed_{false};  // a standby serving agents before it leads
  // Set and reset on the elector thread (or before it runs); read by /metrics.
  mutable std::mutex distributor_mu_;
  std::shared_ptr<Distributor> distributor_;  // guarded by distributor_mu_
  std::jthread loop_;
  // Observation: the agents' observations (fed by the distributor) and the StarvationReport's
  // writer (its thread runs while leading); none with --max-observed-pods=0. Built by Start().
  std::shared_ptr<StarvationBook> book_;
  std::unique_ptr<StarvationReportWriter> starvation_writer_;
  std::jthread starvation_thread_;
};

Result<std::unique_ptr<ControllerApp>> ControllerApp::Create(ControllerConfig config) {
  std::unique_ptr<ControllerApp> app(new ControllerApp(std::move(config)));
  const ControllerConfig& c = app->c_;
  FG_RETURN_IF_ERROR(app->signals_.status());
  // Every value checked before anything is read or dialled.
  ReconcilerOptions ro;
  {
    std::string error;
    if (!GpuResourceNames::Parse(c.gpu_resource_names, &ro.gpu_resource_names, &error)) {
      return InvalidArgument("--gpu-resource-names: " + error);
    }
    if (!ParseDraDrivers(c.gpu_dra_drivers, &ro.gpu_dra_drivers, &error)) {
      return InvalidArgument("--gpu-dra-drivers: " + error);
    }
  }
  if (!(c.retry_period_ms < c.renew_deadline_ms && c.renew_deadline_ms < c.lease_duration_ms)) {
    return InvalidArgument("leader election needs --retry-period-ms (" +
                           std::to_string(c.retry_period_ms) + ") < --renew-deadline-ms (" +
                           std::to_string(c.renew_deadline_ms) + ") < --lease-duration-ms (" +
                           std::to_string(c.lease_duration_ms) + ")");
  }
  app->arm_after_ = std::chrono::milliseconds(c.standby_arm_after_ms < 0 ? c.retry_period_ms * 3 / 2
                                                                         : c.standby_arm_after_ms);
  if (app->arm_after_.count() >= c.lease_duration_ms) {
    return InvalidArgument("--standby-arm-after-ms (" + std::to_string(app->arm_after_.count()) +
                           ") must be < --lease-duration-ms (" +
                           std::to_string(c.lease_duration_ms) + "), or 0 (never)");
  }
  app->stale_after_ = std::chrono::milliseconds(c.stale_after_ms);
  FG_ASSIGN_OR_RETURN(kube::RestConfig rest, c.kubeconfig.empty()
                                                 ? kube::LoadDefaultConfig()
                                                 : kube::LoadKubeconfig(c.kubeconfig));
  FG_ASSIGN_OR_RETURN(auto transport, kube::CurlTransport::Create(rest, app->clock_));
  app->client_ = std::make_shared<kube::Client>(transport);
  app->identity_ = c.identity.empty() ? Hostname() + "-" + std::to_string(getpid()) : c.identity;
  auto events = std::make_shared<kube::EventRecorder>(app->client_, "feedguard-controller",
                                                      app->identity_, app->clock_);

  auto writer = std::make_shared<KubePolicyWriter>(app->client_, events);
  ro.rails.agent_namespace = c.agent_namespace;
  ro.status_interval = std::chrono::milliseconds(c.status_interval_ms);
  ro.suspended = c.suspend;
  ro.max_fence_bytes = static_cast<size_t>(c.max_fence_bytes);
  ro.fence_limits.max_containers_per_pod = static_cast<size_t>(c.max_fence_containers_per_pod);
  ro.fence_limits.max_observed_pods = static_cast<size_t>(c.max_observed_pods);
  app->reconciler_ = std::make_shared<Reconciler>(app->sink_, writer, ro);
  return app;
}

Status ControllerApp::Start() {
  auto rc = reconciler_.get();
  // DRA claims are watched only where they can be listed: fences wait for every informer's first
  // list, and a watch of an API the server does not serve (or RBAC does not grant) would hold
  // them back for good.
  const bool claims = WatchClaims();
  informers_expected_ = claims ? 5 : 4;
  // The reconciler keeps its own compact record of each object; the informers keep only
  // resourceVersions (no JSON is held after a handler returns).
  Watch(
      FencePolicyGvr(), [rc](const auto& o) { rc->UpsertPolicy(o); },
      [rc](const auto& o) { rc->DeletePolicy(o); });
  // Pods and Nodes are parsed down to the fields their records read (PodFields, NodeFields):
  // most of a Pod's JSON and a Node's image list never reach memory.
  Watch(
      kube::PodsGvr(), [rc](const auto& o) { rc->UpsertPod(o); },
      [rc](const auto& o) { rc->DeletePod(o); }, PodFields(),
      c_.list_encoding == "protobuf" ? PodJsonFromProtobuf : nullptr);
  Watch(
      kube::NodesGvr(), [rc](const auto& o) { rc->UpsertNode(o); },
      [rc](const auto& o) { rc->DeleteNode(o); }, NodeFields());
  Watch(
      {"", "v1", "namespaces"}, [rc](const auto& o) { rc->UpsertNamespace(o); },
      [rc](const auto& o) { rc->DeleteNamespace(o); });
  if (claims) {
    Watch(
        kube::ResourceClaimsGvr(), [rc](const auto& o) { rc->UpsertClaim(o); },
        [rc](const auto& o) { rc->DeleteClaim(o); }, ClaimFields());
  }

  if (c_.max_observed_pods > 0) {
    book_ = std::make_shared<StarvationBook>(clock_);
    PodNamer names = [rc](const std::string& node, const std::set<std::string>& uids) {
      std::map<std::string, PodName> out;
      rc->ForEachPodOn(node, [&](const PodInfo& p) {
        std::string uid = p.uid.str();
        if (uids.count(uid)) out[std::move(uid)] = {p.ns.get(), p.name, p.cpu_request_milli};
      });
      return out;
    };
    StarvationWriterOptions wo;
    wo.interval = std::chrono::milliseconds(c_.observe_interval_ms);
    starvation_writer_ = std::make_unique<StarvationReportWriter>(
        client_, book_, std::move(names), [rc] { return rc->stats().gpu_pods_not_observed; },
        clock_, wo);
  }
  FG_ASSIGN_OR_RETURN(metrics_, MetricsServer::Start(
                                    c_.metrics_addr, [this] { return RenderMetrics(); },
                                    // Ready only once the first full resolution ran (never before
                                    // the initial lists).
                                    [this] { return leading_.load() && reconciler_->Synced(); }));

  if (!c_.leader_elect) {
    StartLeading();
    return OkStatus();
  }
  kube::LeaderElectionConfig lc;
  lc.lease_namespace = c_.lease_namespace;
  lc.lease_name = c_.lease_name;
  lc.lease_duration = std::chrono::milliseconds(c_.lease_duration_ms);
  lc.renew_deadline = std::chrono::milliseconds(c_.renew_deadline_ms);
  lc.retry_period = std::chrono::milliseconds(c_.retry_period_ms);
  lc.identity = identity_;
  lc.on_started_leading = [this] { StartLeading(); };
  lc.on_stopped_leading = [this] {
    if (leading_) Lose();
  };
  lc.on_new_leader = [](const std::string& who) { spdlog::info("leader is now {}", who); };
  lc.silent_after = arm_after_;
  lc.on_leader_silent = [this](bool silent) { ArmStandby(silent); };
  elector_ = std::make_unique<kube::LeaderElector>(client_, lc, clock_, sleeper_);
  elector_thread_ = std::jthread([this](std::stop_token stop) { elector_->Run(stop); });
  return OkStatus();
}

bool ControllerApp::WatchClaims() {
  if (c_.gpu_dra_drivers.find_first_not_of(" \t,") == std::string::npos) {
    spdlog::info(
        "DRA: --gpu-dra-drivers is empty: GPUs allocated through ResourceClaims are not "
        "counted");
    return false;
  }
  kube::ListOptions one;
  one.limit = 1;
  auto probe = client_->ListOnePage(kube::ResourceClaimsGvr(), "", one);
  if (!probe.ok()) {
    spdlog::warn(
        "DRA: cannot list resourceclaims.resource.k8s.io/v1 ({}): GPUs allocated through "
        "ResourceClaims are not counted (requireGPU, observation); Kubernetes >= 1.34 "
        "serves the API, the chart's ClusterRole grants it; restart the controller once "
        "both hold",
        probe.status().ToString());
    return false;
  }
  return true;
}

void ControllerApp::Watch(kube::Gvr gvr, std::function<void(const nlohmann::json&)> upsert,
                          std::function<void(const nlohmann::json&)> remove,
                          std::shared_ptr<const kube::FieldSet> fields,
                          std::function<nlohmann::json(std::string_view)> protobuf_item) {
  kube::ReflectorOptions o;
  o.gvr = gvr;
  o.fields = std::move(fields);
  o.protobuf_item = std::move(protobuf_item);
  o.page_size = c_.list_page_size;
  kube::ResourceEventHandlers h;
  h.on_add = [upsert](const kube::ObjectPtr& obj) { upsert(*obj); };
  h.on_update = [upsert](const kube::ObjectPtr&, const kube::ObjectPtr& obj) { upsert(*obj); };
  h.on_delete = [remove](const kube::ObjectPtr& obj) { remove(*obj); };
  h.on_synced = [this, name = gvr.resource] {
    spdlog::info("informer {}: initial list delivered", name);
    if (++informers_synced_ == informers_expected_) reconciler_->MarkInformersSynced();
  };
  Informer inf;
  inf.reflector = std::make_unique<kube::Reflector>(
      client_, std::make_shared<kube::Store>(kube::StoreOptions{.keep_objects = false}), o, h,
      clock_, sleeper_);
  inf.thread = std::jthread([r = inf.reflector.get()](std::stop_token stop) { r->Run(stop); });
  informers_.push_back(std::move(inf));
}

Status ControllerApp::StartDistributor() {
  const ControllerConfig& c = c_;
  DistributorOptions o;
  o.listen_address = c.listen_grpc;
  o.insecure = c.insecure;
  // token: the certificate secures the channel, the token names the node.
  o.trust_hello_node_name = c.agent_identity != "cert";
  if (c.agent_identity == "token" && !o.insecure) {
    TokenReviewOptions to;
    to.audience = c.agent_token_audience;
    to.service_account_namespace = c.agent_namespace;
    to.service_account_name = c.agent_service_account;
    to.clock = clock_;
    auto auth = TokenReviewAuthenticator::Create(client_, to);
    if (!auth.ok())
      return Status(auth.status().code(), "agent identity: " + auth.status().message());
    o.authenticator = *auth;
  } else if (c.agent_identity == "shared-cert" && !o.insecure) {
    spdlog::warn("--agent-identity shared-cert: INSECURE, any agent may act for any node");
  }
  o.tls = {c.tls_client_ca, c.tls_cert, c.tls_key};
  o.stale_after = stale_after_;
  if (c.agent_memory_quota_mb > 0) {
    o.memory_quota_bytes = static_cast<size_t>(c.agent_memory_quota_mb) << 20;
  }
  o.observer = reconciler_;
  if (book_) {
    o.observer =
        std::make_shared<AgentObserverTee>(std::vector<AgentObserverPtr>{reconciler_, book_});
  }
  // Agents may speak only for nodes that have a Node object (checked once nodes are known).
  auto rc = reconciler_.get();
  o.admit_node = [rc](const std::string& node) { return rc->NodeAdmissible(node); };
  const std::string address = o.listen_address;
  auto d = Distributor::Start(std::move(o));
  if (!d.ok()) {
    return Status(d.status().code(),
                  "cannot serve agents on " + address + ": " + d.status().message());
  }
  std::lock_guard<std::mutex> l(distributor_mu_);
  distributor_ = std::move(d).value();
  return OkStatus();
}

// A standby whose leader stopped renewing serves agents' streams before it leads: the agents
// the dead leader dropped redial (to whichever replica listens), and their TLS handshakes and
// token reviews, the most of a failover at thousands of agents, happen while the Lease runs
// out instead of after. No fence goes out until this replica leads (the sink is attached only
// then); if the leader renews again, the held streams are ended and their agents redial.
void ControllerApp::ArmStandby(bool silent) {
  if (leading_) return;
  if (silent) {
    if (distributor()) return;
    if (Status st = StartDistributor(); !st.ok()) {
      spdlog::warn("standby: the leader has not renewed for {} ms, but {}", arm_after_.count(),
                   st.ToString());
      return;
    }
    spdlog::info(
        "standby: the leader has not renewed the Lease for {} ms: holding agents' streams on "
        "port {} until this replica leads or the leader renews",
        arm_after_.count(), distributor()->port());
    armed_ = true;  // after the line: tests read the port from it once the gauge says armed
    return;
  }
  std::shared_ptr<Distributor> d;
  {
    std::lock_guard<std::mutex> l(distributor_mu_);
    d = std::move(distributor_);
  }
  armed_ = false;
  if (!d) return;
  const size_t held = d->ConnectedCount();
  d->Shutdown();
  spdlog::info("standby: the leader renewed the Lease again: ended {} held agent streams", held);
}

// Leading: the distributor (unless armed already), then the reconciler loop.
void ControllerApp::StartLeading() {
  if (auto d = distributor()) {
    spdlog::info("leading: {} agents' streams already held", d->ConnectedCount());
  } else if (Status st = StartDistributor(); !st.ok()) {
    spdlog::error("{}", st.ToString());
    Lose();
    return;
  }
  auto d = distributor();
  sink_->Attach(d.get());
  armed_ = false;
  spdlog::info("leading: serving agents on port {}", d->port());
  loop_ = std::jthread([this](std::stop_token stop) { reconciler_->Run(stop); });
  if (starvation_writer_) {
    starvation_thread_ =
        std::jthread([w = starvation_writer_.get()](std::stop_token stop) { w->Run(stop); });
  }
  leading_ = true;
}

std::string ControllerApp::RenderMetrics() {
  std::string out;
  auto s = reconciler_->stats();
  const std::shared_ptr<Distributor> distributor = this->distributor();
  size_t connected = distributor ? distributor->ConnectedCount() : 0;
  out += RenderGauge("feedguard_controller_leader", "1 while this replica leads", leading_ ? 1 : 0);
  out += RenderGauge("feedguard_controller_standby_armed",
                     "1 while this standby holds agents' streams because the leader stopped "
                     "renewing the Lease (--standby-arm-after-ms)",
                     armed_ ? 1 : 0);
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
  if (starvation_writer_) {
    const StarvationWriterStats w = starvation_writer_->stats();
    out += RenderGauge("feedguard_observed_nodes",
                       "nodes whose agent reported observations in the last 10 min",
                       static_cast<double>(book_->nodes()));
    out += RenderGauge("feedguard_gpu_pods_not_observed",
                       "GPU pods over the per-node cap (--max-observed-pods), not observed",
                       static_cast<double>(s.gpu_pods_not_observed));
    out += RenderLabelled("feedguard_starvation_report_writes_total",
                          "passes of the StarvationReport writer, by outcome", "counter",
                          {{"written", static_cast<double>(w.writes)},
                           {"unchanged", static_cast<double>(w.unchanged)},
                           {"failed", static_cast<double>(w.failures)}},
                          "outcome");
  }
  if (distributor) {
    double enforced = 0, failed = 0, stale = 0;
    std::map<std::string, double> overwrites_by_node;
    for (const auto& a : distributor->ListAgents()) {
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
    const DistributorCounters c = distributor->Counters();
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
  if (starvation_thread_.joinable()) {
    starvation_thread_.request_stop();
    starvation_thread_.join();
  }
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
  if (auto d = distributor()) d->Shutdown();
  for (auto& i : informers_) {
    if (i.thread.joinable()) i.thread.join();
  }
  metrics_.reset();
}

}  // namespace

int RunController(int argc, char** argv) {
  ControllerConfig config;
  CLI::App cli("watches FencePolicies, streams each node's NodeFence to its agent, reports status",
               "feedguard-controller");
  // A flag given twice: the last value wins.
  cli.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  AddFlags(cli, &config);
  try {
    cli.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << cli.help();
    return 0;
  } catch (const CLI::ParseError& e) {
    std::cerr << "feedguard-controller: " << e.what() << " (see --help)\n";
    return 2;
  }
  spdlog::set_level(spdlog::level::from_str(config.log_level));
  if (!config.insecure &&
      (config.tls_cert.empty() || config.tls_key.empty() || config.tls_client_ca.empty())) {
    std::cerr << "feedguard-controller: --tls-cert, --tls-key and --tls-client-ca are required "
                 "(or --insecure for a local demo)\n";
    return 2;
  }

  auto app = ControllerApp::Create(std::move(config));
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
