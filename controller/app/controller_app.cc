#include "controller/app/controller_app.h"

#include <unistd.h>

#include <csignal>
#include <iostream>
#include <map>
#include <thread>

#include <spdlog/spdlog.h>

#include "common/flags.h"
#include "common/metrics.h"
#include "controller/app/kube_adapters.h"
#include "controller/kube/curl_transport.h"
#include "controller/kube/kubeconfig.h"
#include "controller/kube/leader_election.h"
#include "controller/kube/reflector.h"

namespace feedguard::controller {
namespace {

volatile std::sig_atomic_t g_signalled = 0;  // the one global a signal handler needs
void OnSignal(int) { g_signalled = 1; }

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
  f.Define("agent-identity", "cert",
           "cert: the agent's client certificate must name its node (CN system:node:<name> or a "
           "DNS SAN); shared-cert: any certificate from the CA may speak for the node its hello "
           "names");
  f.Define("agent-namespace", "feedguard-system", "namespace of the agent pods (never fenced)");
  f.Define("stale-after-ms", "60000", "an agent disconnected this long is reported stale");
  f.Define("status-interval-ms", "1000", "at most one status write per policy per interval");
  f.Define("log-level", "info", "trace | debug | info | warn | error");
  f.DefineBool("help", "show this help");
}

std::string Hostname() {
  char buf[256] = {};
  gethostname(buf, sizeof buf - 1);
  return buf;
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
  if (f.Get("agent-identity") != "cert" && f.Get("agent-identity") != "shared-cert") {
    std::cerr << "feedguard-controller: --agent-identity must be cert or shared-cert\n";
    return 2;
  }
  if (!f.GetBool("insecure") &&
      (f.Get("tls-cert").empty() || f.Get("tls-key").empty() || f.Get("tls-client-ca").empty())) {
    std::cerr << "feedguard-controller: --tls-cert, --tls-key and --tls-client-ca are required "
                 "(or --insecure for a local demo)\n";
    return 2;
  }

  auto config = f.Get("kubeconfig").empty() ? kube::LoadDefaultConfig()
                                            : kube::LoadKubeconfig(f.Get("kubeconfig"));
  if (!config.ok()) {
    std::cerr << "feedguard-controller: " << config.status().message() << "\n";
    return 2;
  }
  auto clock = std::make_shared<RealTimeSource>();
  auto sleeper = std::make_shared<kube::RealSleeper>();
  auto transport = kube::CurlTransport::Create(*config, clock);
  if (!transport.ok()) {
    std::cerr << "feedguard-controller: " << transport.status().message() << "\n";
    return 2;
  }
  auto client = std::make_shared<kube::Client>(*transport);
  const std::string identity =
      f.Get("identity").empty() ? Hostname() + "-" + std::to_string(getpid()) : f.Get("identity");
  auto events =
      std::make_shared<kube::EventRecorder>(client, "feedguard-controller", identity, clock);

  auto sink = std::make_shared<DistributorSink>();
  auto writer = std::make_shared<KubePolicyWriter>(client, events);
  ReconcilerOptions ro;
  ro.rails.agent_namespace = f.Get("agent-namespace");
  ro.status_interval = std::chrono::milliseconds(std::stoi(f.Get("status-interval-ms")));
  auto reconciler = std::make_shared<Reconciler>(sink, writer, ro);

  kube::StopSignal stop;
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);

  // ---- informers ----
  struct Informer {
    std::unique_ptr<kube::Reflector> reflector;
    std::thread thread;
  };
  std::vector<Informer> informers;
  // Fences flow only once every informer delivered its initial list (Reconciler: never
  // withdraw on start). Each reflector calls on_synced once, after its handlers saw the list.
  constexpr int kInformers = 4;
  std::atomic<int> informers_synced{0};
  auto watch = [&](kube::Gvr gvr, std::function<void(const nlohmann::json&)> upsert,
                   std::function<void(const nlohmann::json&)> remove, kube::TransformFunc tf) {
    kube::ReflectorOptions o;
    o.gvr = gvr;
    o.transform = std::move(tf);
    kube::ResourceEventHandlers h;
    h.on_add = [upsert](const kube::ObjectPtr& obj) { upsert(*obj); };
    h.on_update = [upsert](const kube::ObjectPtr&, const kube::ObjectPtr& obj) { upsert(*obj); };
    h.on_delete = [remove](const kube::ObjectPtr& obj) { remove(*obj); };
    h.on_synced = [&informers_synced, rc = reconciler.get(), name = gvr.resource] {
      spdlog::info("informer {}: initial list delivered", name);
      if (++informers_synced == kInformers) rc->MarkInformersSynced();
    };
    Informer inf;
    inf.reflector = std::make_unique<kube::Reflector>(client, std::make_shared<kube::Store>(), o, h,
                                                      clock, sleeper);
    kube::Reflector* r = inf.reflector.get();
    inf.thread = std::thread([r, &stop] { r->Run(stop); });
    informers.push_back(std::move(inf));
  };
  auto rc = reconciler.get();
  watch(
      FencePolicyGvr(), [rc](const auto& o) { rc->UpsertPolicy(o); },
      [rc](const auto& o) { rc->DeletePolicy(o); }, nullptr);
  watch(
      kube::PodsGvr(), [rc](const auto& o) { rc->UpsertPod(o); },
      [rc](const auto& o) { rc->DeletePod(o); }, SlimPod);
  watch(
      kube::NodesGvr(), [rc](const auto& o) { rc->UpsertNode(o); },
      [rc](const auto& o) { rc->DeleteNode(o); }, MetadataOnly);
  watch(
      {"", "v1", "namespaces"}, [rc](const auto& o) { rc->UpsertNamespace(o); },
      [rc](const auto& o) { rc->DeleteNamespace(o); }, MetadataOnly);

  // ---- leading: distributor + reconciler loop ----
  std::atomic<bool> leading{false};
  std::atomic<bool> lost{false};
  std::unique_ptr<Distributor> distributor;
  std::thread loop;
  kube::StopSignal loop_stop;
  auto start_leading = [&] {
    DistributorOptions o;
    o.listen_address = f.Get("listen-grpc");
    o.insecure = f.GetBool("insecure");
    o.trust_hello_node_name = f.Get("agent-identity") == "shared-cert";
    o.tls = {f.Get("tls-client-ca"), f.Get("tls-cert"), f.Get("tls-key")};
    o.stale_after = std::chrono::milliseconds(std::stoi(f.Get("stale-after-ms")));
    o.observer = reconciler;
    // Agents may speak only for nodes that have a Node object (checked once nodes are known).
    o.admit_node = [rc](const std::string& node) { return rc->NodeAdmissible(node); };
    auto d = Distributor::Start(o);
    if (!d.ok()) {
      spdlog::error("cannot serve agents on {}: {}", o.listen_address, d.status().ToString());
      lost = true;
      return;
    }
    distributor = std::move(d).value();
    sink->Attach(distributor.get());
    spdlog::info("leading: serving agents on port {}", distributor->port());
    loop = std::thread([&] { reconciler->Run(loop_stop); });
    leading = true;
  };

  CounterSum overwrites_sum;  // outlives `metrics`, whose collector uses it
  auto metrics = MetricsServer::Start(
      f.Get("metrics-addr"),
      [&]() {
        std::string out;
        auto s = reconciler->stats();
        size_t connected = distributor ? distributor->ConnectedCount() : 0;
        out += RenderGauge("feedguard_controller_leader", "1 while this replica leads",
                           leading ? 1 : 0);
        out += RenderGauge("feedguard_agents_connected", "agents with an open stream",
                           static_cast<double>(connected));
        out += RenderGauge("feedguard_nodes_known", "nodes watched", static_cast<double>(s.nodes));
        out += RenderGauge("feedguard_pods_known", "pods watched", static_cast<double>(s.pods));
        out += RenderGauge("feedguard_policies", "FencePolicies watched",
                           static_cast<double>(s.policies));
        out += RenderGauge("feedguard_fences_sent_total", "NodeFence versions handed out",
                           static_cast<double>(s.fences_sent), "counter");
        out += RenderGauge("feedguard_status_writes_total", "FencePolicy status writes",
                           static_cast<double>(s.status_writes), "counter");
        if (distributor) {
          double enforced = 0, failed = 0, stale = 0;
          std::map<std::string, double> overwrites_by_node;
          for (const auto& a : distributor->ListAgents()) {
            if (a.stale || !a.connected)
              stale++;
            else if (a.last_nack && a.last_nack->version == a.desired_version)
              failed++;
            else if (a.acked_version >= a.desired_version)
              enforced++;
            if (a.last_report) {
              overwrites_by_node[a.node] = static_cast<double>(a.last_report->overwrites_total());
            }
          }
          out += RenderLabelled("feedguard_nodes", "nodes by enforcement state", "gauge",
                                {{"enforced", enforced}, {"failed", failed}, {"stale", stale}},
                                "state");
          out += RenderGauge("feedguard_overwrites_total",
                             "cgroup values rewritten by others, summed over agents' reports",
                             overwrites_sum.Update(overwrites_by_node), "counter");
        }
        return out;
      },
      // Ready only once the first full resolution ran (never before the initial lists).
      [&]() { return leading.load() && reconciler->Synced(); });
  if (!metrics.ok()) {
    std::cerr << "feedguard-controller: " << metrics.status().message() << "\n";
    stop.Notify();
    for (auto& i : informers) i.thread.join();
    return 2;
  }

  std::unique_ptr<kube::LeaderElector> elector;
  std::thread elector_thread;
  if (f.GetBool("leader-elect")) {
    kube::LeaderElectionConfig lc;
    lc.lease_namespace = f.Get("lease-namespace");
    lc.lease_name = f.Get("lease-name");
    lc.identity = identity;
    lc.on_started_leading = [&] { start_leading(); };
    lc.on_stopped_leading = [&] {
      if (leading) lost = true;
    };
    lc.on_new_leader = [](const std::string& who) { spdlog::info("leader is now {}", who); };
    elector = std::make_unique<kube::LeaderElector>(client, lc, clock, sleeper);
    elector_thread = std::thread([&] { elector->Run(stop); });
  } else {
    start_leading();
  }

  int code = 0;
  while (!g_signalled && !lost) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  if (lost) {
    spdlog::error("lost leadership (or could not serve): exiting so a fresh replica takes over");
    code = 1;
  }
  loop_stop.Notify();
  if (loop.joinable()) loop.join();
  stop.Notify();
  if (elector_thread.joinable()) elector_thread.join();
  sink->Attach(nullptr);
  if (distributor) distributor->Shutdown();
  for (auto& i : informers) i.thread.join();
  return code;
}

}  // namespace feedguard::controller
