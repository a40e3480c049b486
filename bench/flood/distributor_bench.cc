// distributor_bench.cc — fg-distributor-bench: the controller's Distributor alone, in a process
// of its own, for memory and flood measurements (issues 13 and 14; bench/flood/README.md).
//
// Starts a Distributor (insecure, as the scale bench's controller) that admits the nodes
// <prefix>00000 … (--nodes of them) and holds one desired NodeFence per node (--pods-per-node
// trainers+neighbours, shaped like the controller's). fg-agent-sim (bench/scale) connects real
// agents to it; fg-flood (flooder.cc) sends hostile traffic. No API server, no reconciler: what
// is measured is the Distributor's and grpc's cost per stream. --review-latency-ms L adds a
// stand-in authenticator: each node's first hello needs a "TokenReview" of L ms (on the review
// workers), later ones are cached.
//
// stdout: JSON lines. {"ev":"ready","port":P,"metrics_port":M,"fence_bytes":B} once listening
// (M: 0 without --metrics-addr, which serves the controller's /metrics, /healthz, /readyz; B:
// node 0's fence on the wire); on "stats":
//   {"ev":"stats","rss_kb":…,"heap_in_use":…,"heap_arena":…,"connected":…,"nodes":…,"acked":…,
//    "hellos_pending":…,"refused":{"connection":…,"address":…,"pending":…,…},"unreadable":…}
// heap_* from glibc's mallinfo2 (bytes in use / obtained from the system by malloc).
// stdin: "stats", "bump" (a new fence version for every node, then a "bumped" stats line),
// "drop" (the server ends every agent's stream, as a network blip would: they reconnect),
// "trim" (malloc_trim, then stats), "quit" (also on EOF).
#include <malloc.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/metrics.h"
#include "controller/distributor/distributor.h"

namespace feedguard::bench {
namespace {

using controller::Distributor;
using controller::DistributorOptions;

struct Args {
  int port = 0;
  int nodes = 1000;
  std::string prefix = "node-";
  int digits = 5;
  int pods_per_node = 1;
  DistributorOptions d;
};

long VmRssKb() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

std::string NodeName(const Args& a, int i) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%0*d", a.digits, i);
  return a.prefix + buf;
}

feedguard::v1::NodeFence MakeFence(const Args& a, int i) {
  feedguard::v1::NodeFence f;
  f.set_node_name(NodeName(a, i));
  f.set_version(1);
  auto* p = f.add_policies();
  p->set_name("bench");
  p->set_generation(1);
  for (int k = 0; k < a.pods_per_node; ++k) {
    feedguard::v1::PodRef* ref =
        k == 0 ? f.add_trainers()->mutable_pod() : f.add_neighbours()->mutable_pod();
    ref->set_uid("00000000-0000-0000-0000-" + std::to_string(1'000'000'000'000LL + i * 100 + k));
    ref->set_namespace_("bench");
    ref->set_name(f.node_name() + "-pod-" + std::to_string(k));
    ref->set_cpu_request_milli(k == 0 ? 4000 : 100);
  }
  for (auto& t : *f.mutable_trainers()) t.set_policy("bench");
  for (auto& n : *f.mutable_neighbours()) n.set_policy("bench");
  return f;
}

class CountingObserver final : public controller::AgentObserver {
 public:
  void OnConnected(const std::string&, const feedguard::v1::AgentHello&) override {}
  void OnDisconnected(const std::string&) override {}
  void OnAck(const std::string&, uint64_t) override { acks.fetch_add(1); }
  void OnNack(const std::string&, uint64_t, const std::string&) override {}
  void OnReport(const std::string&, const feedguard::v1::NodeReport&) override {
    reports.fetch_add(1);
  }
  void OnUnreadable(const std::string&, const std::string& error) override {
    if (!error.empty()) unreadable.fetch_add(1);
  }
  // A reconnecting agent's acknowledged fence was dropped: hand it back (as the reconciler does).
  void OnFenceWanted(const std::string& node, uint64_t version) override {
    if (refill) refill(node, version);
  }
  std::function<void(const std::string&, uint64_t)> refill;  // set before any agent connects
  std::atomic<uint64_t> unreadable{0};
  std::atomic<uint64_t> acks{0};
  std::atomic<uint64_t> reports{0};
};

// Stands in for the TokenReview authenticator: every first hello of a node takes a review of
// `latency` (an API round trip) on the Distributor's review workers; later ones are known at once
// (as a cached review). Accepts every token.
class SlowAuthenticator final : public controller::AgentAuthenticator {
 public:
  explicit SlowAuthenticator(std::chrono::milliseconds latency) : latency_(latency) {}
  Status Authenticate(std::string_view, const std::string& node) override {
    std::this_thread::sleep_for(latency_);
    std::lock_guard l(mu_);
    reviewed_.insert(node);
    ++reviews;
    return OkStatus();
  }
  std::optional<Status> Cached(std::string_view, const std::string& node) override {
    std::lock_guard l(mu_);
    if (reviewed_.count(node) > 0) return OkStatus();
    return std::nullopt;
  }
  std::atomic<uint64_t> reviews{0};

 private:
  const std::chrono::milliseconds latency_;
  std::mutex mu_;
  std::set<std::string> reviewed_;  // guarded by mu_
};

int Usage(const char* argv0) {
  std::fprintf(
      stderr,
      "usage: %s [--port 0] [--nodes 1000] [--node-prefix node-] [--node-digits 5]\n"
      "  [--pods-per-node 1] [--memory-quota-mb M]\n"
      "  [--max-pending-hellos N] [--new-streams-per-second R] [--max-streams N]\n"
      "  [--max-pending-hellos-per-connection N] [--max-pending-hellos-per-address N]\n"
      "  [--max-streams-per-connection N] [--metrics-addr 127.0.0.1:0]\n"
      "  [--max-receive-bytes B] [--hello-timeout-ms T] [--review-latency-ms L]\n"
      "  [--review-workers W] [--review-queue Q] [--tls-ca F --tls-cert F --tls-key F]\n"
      "  [--tsi-max-frame-bytes B] [--tcp-read-chunk-bytes B (0: grpc's)]\n"
      "  [--grpc-arg NAME=INT ...]\n"
      "GRPC_EXPERIMENTS, when set, is kept; else grpc's classic socket reader is selected\n"
      "as in the controller (GRPC_EXPERIMENTS= for grpc 1.51's default reader).\n",
      argv0);
  return 2;
}

int Main(int argc, char** argv) {
  controller::UseClassicGrpcReader();  // as the controller's main() does
  Args a;
  a.d.insecure = true;
  int64_t review_latency_ms = -1;  // <0: no authenticator
  std::string metrics_addr;        // "": none
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (i + 1 >= argc) return Usage(argv[0]);
    const std::string v = argv[++i];
    try {
      if (k == "--port") {
        a.port = std::stoi(v);
      } else if (k == "--nodes") {
        a.nodes = std::stoi(v);
      } else if (k == "--node-prefix") {
        a.prefix = v;
      } else if (k == "--node-digits") {
        a.digits = std::stoi(v);
      } else if (k == "--pods-per-node") {
        a.pods_per_node = std::stoi(v);
      } else if (k == "--memory-quota-mb") {
        a.d.memory_quota_bytes = std::stoull(v) << 20;
      } else if (k == "--max-pending-hellos") {
        a.d.max_pending_hellos = std::stoull(v);
      } else if (k == "--new-streams-per-second") {
        a.d.new_streams_per_second = std::stod(v);
      } else if (k == "--max-streams") {
        a.d.max_streams = std::stoull(v);
      } else if (k == "--max-pending-hellos-per-connection") {
        a.d.max_pending_hellos_per_connection = std::stoull(v);
      } else if (k == "--max-pending-hellos-per-address") {
        a.d.max_pending_hellos_per_address = std::stoull(v);
      } else if (k == "--max-streams-per-connection") {
        a.d.max_streams_per_connection = std::stoi(v);
      } else if (k == "--metrics-addr") {  // the controller's /metrics, /healthz, /readyz server
        metrics_addr = v;
      } else if (k == "--max-receive-bytes") {
        a.d.max_receive_message_bytes = std::stoi(v);
      } else if (k == "--tls-ca") {  // mTLS; any certificate of the CA may speak for any node
        a.d.insecure = false;
        a.d.trust_hello_node_name = true;
        a.d.tls.ca_file = v;
      } else if (k == "--tls-cert") {
        a.d.tls.cert_file = v;
      } else if (k == "--tls-key") {
        a.d.tls.key_file = v;
      } else if (k == "--grpc-arg") {  // e.g. grpc.minimal_stack=1 (experiments)
        const size_t eq = v.find('=');
        if (eq == std::string::npos) return Usage(argv[0]);
        a.d.extra_grpc_args[v.substr(0, eq)] = std::stoi(v.substr(eq + 1));
      } else if (k == "--tcp-read-chunk-bytes") {
        a.d.tcp_read_chunk_bytes = std::stoi(v);
      } else if (k == "--tsi-max-frame-bytes") {
        a.d.tls_max_frame_bytes = std::stoi(v);
      } else if (k == "--review-latency-ms") {
        review_latency_ms = std::stoll(v);
      } else if (k == "--review-workers") {
        a.d.review_workers = std::stoull(v);
      } else if (k == "--review-queue") {
        a.d.review_queue = std::stoull(v);
      } else if (k == "--hello-timeout-ms") {
        a.d.hello_timeout = std::chrono::milliseconds(std::stoll(v));
      } else {
        return Usage(argv[0]);
      }
    } catch (const std::exception&) {
      std::fprintf(stderr, "bad value for %s: %s\n", k.c_str(), v.c_str());
      return 2;
    }
  }
  a.d.listen_address = "127.0.0.1:" + std::to_string(a.port);
  std::vector<bool> admitted;  // read-only once the server runs
  const std::string prefix = a.prefix;
  const int nodes = a.nodes;
  const int digits = a.digits;
  a.d.admit_node = [prefix, nodes, digits](const std::string& node) {
    if (node.size() != prefix.size() + static_cast<size_t>(digits) || node.rfind(prefix, 0) != 0)
      return false;
    int n = 0;
    for (size_t i = prefix.size(); i < node.size(); ++i) {
      if (node[i] < '0' || node[i] > '9') return false;
      n = n * 10 + (node[i] - '0');
    }
    return n < nodes;
  };
  std::shared_ptr<SlowAuthenticator> auth;
  if (review_latency_ms >= 0) {
    auth = std::make_shared<SlowAuthenticator>(std::chrono::milliseconds(review_latency_ms));
    a.d.authenticator = auth;
  }
  auto observer = std::make_shared<CountingObserver>();
  a.d.observer = observer;
  const long rss_before = VmRssKb();
  auto started = Distributor::Start(a.d);
  if (!started.ok()) {
    std::fprintf(stderr, "%s\n", started.status().ToString().c_str());
    return 1;
  }
  std::unique_ptr<Distributor> d = std::move(started).value();
  observer->refill = [&a, &d](const std::string& node, uint64_t version) {
    auto f = MakeFence(a, std::stoi(node.substr(a.prefix.size())));
    f.set_version(version);
    (void)d->SetDesired(f);
  };
  for (int i = 0; i < a.nodes; ++i) {
    if (auto st = d->SetDesired(MakeFence(a, i)); !st.ok()) {
      std::fprintf(stderr, "%s\n", st.ToString().c_str());
      return 1;
    }
  }
  auto stats = [&](const char* ev) {
    const struct mallinfo2 mi = mallinfo2();
    nlohmann::json j = {{"ev", ev},
                        {"rss_kb", VmRssKb()},
                        {"rss_kb_before_server", rss_before},
                        {"heap_in_use", mi.uordblks},
                        {"heap_arena", mi.arena + mi.hblkhd},
                        {"connected", d->ConnectedCount()},
                        {"nodes", d->NodeCount()},
                        {"acks", observer->acks.load()},
                        {"reports", observer->reports.load()},
                        {"reviews", auth ? auth->reviews.load() : 0}};
    const controller::DistributorCounters c = d->Counters();
    j["hellos_pending"] = c.hellos_pending;
    j["refused"] = {{"connection", c.refused_per_connection},
                    {"address", c.refused_per_address},
                    {"pending", c.refused_pending_total},
                    {"streams", c.refused_streams},
                    {"rate", c.refused_rate}};
    j["unreadable"] = c.unreadable_messages;
    std::cout << j.dump() << std::endl;
  };
  // The probe endpoint the controller serves (common/metrics.h), here with a small collector.
  std::unique_ptr<MetricsServer> metrics;
  if (!metrics_addr.empty()) {
    auto m = MetricsServer::Start(
        metrics_addr,
        [&] {
          return RenderGauge("feedguard_agents_connected", "agents with an open stream",
                             static_cast<double>(d->ConnectedCount()));
        },
        [] { return true; });
    if (!m.ok()) {
      std::fprintf(stderr, "%s\n", m.status().ToString().c_str());
      return 1;
    }
    metrics = std::move(m).value();
  }
  std::cout << nlohmann::json({{"ev", "ready"},
                               {"port", d->port()},
                               {"metrics_port", metrics ? metrics->port() : 0},
                               {"fence_bytes", MakeFence(a, 0).ByteSizeLong()}})
                   .dump()
            << std::endl;
  stats("stats");
  uint64_t version = 1;
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line == "stats") {
      stats("stats");
    } else if (line == "bump") {  // a new fence version for every node
      ++version;
      for (int i = 0; i < a.nodes; ++i) {
        auto f = MakeFence(a, i);
        f.set_version(version);
        (void)d->SetDesired(std::move(f));
      }
      stats("bumped");
    } else if (line == "drop") {  // ends every agent's stream (a blip): the agents reconnect
      for (const auto& agent : d->ListAgents()) (void)d->Disconnect(agent.node);
      stats("dropped");
    } else if (line == "trim") {
      malloc_trim(0);
      stats("stats");
    } else if (line == "quit") {
      break;
    }
  }
  d->Shutdown();
  return 0;
}

}  // namespace
}  // namespace feedguard::bench

int main(int argc, char** argv) { return feedguard::bench::Main(argc, argv); }
