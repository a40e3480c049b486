// agent_app.h — `feedguard-agent run`: the node agent daemon as one object. It builds the node
// (agent/app/node_setup.h), dials the controller (FenceClient hands each NodeFence to the node
// engine), observes the node's GPU pods the controller names (observe::ObserveLoop, reads only),
// watches the files it wrote (Watcher) and serves /metrics, /healthz and /readyz, until
// SIGTERM/SIGINT. Fences stay in place when it stops (`feedguard-agent revert` removes them).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "agent/app/node_setup.h"
#include "agent/client/fence_client.h"
#include "agent/enforcer/watcher.h"
#include "common/metrics.h"
#include "common/signals.h"
#include "feedguard/common/status.h"

namespace feedguard::agent {

struct AgentConfig {
  NodeConfig node;         // node.node_name: this node's name (must match the client certificate)
  std::string controller;  // the controller's gRPC address, host:port
  bool insecure = false;   // no TLS (local demos only; the controller must agree)
  std::string tls_ca;      // CA bundle that signs the controller's certificate
  std::string tls_cert;    // this agent's client certificate
  std::string tls_key;     // this agent's client key
  std::string tls_server_name;  // name to verify on the controller's certificate
  std::string token_file;       // projected ServiceAccount token ("" = none)
  std::chrono::milliseconds report_interval{10'000};  // how often to send a fresh report
  std::chrono::milliseconds verify_interval{60'000};  // sweep: re-read every file we wrote
  std::string metrics_addr;  // /metrics, /healthz, /readyz (host:port; "" = off)
  // Largest message read from the controller (≥ the controller's --max-fence-bytes).
  size_t max_fence_bytes = kAgentMaxReceiveBytes;
  ObserveConfig observe;  // the GPU pods of NodeFence.observe (docs/DESIGN.md §4b)
};

// The /metrics families of the observed GPU pods (docs/DESIGN.md §4b), of bounded cardinality:
// per observed pod (at most kMaxObservedPodsPerNode) its feeder wait and estimated GPU time lost
// since the agent first observed it, and its wait ratio over 10 min; per node only the top-k
// contenders over 10 min, by uid ("node" for the node itself: dashboards join kube_pod_info on
// uid for names).
std::string RenderObservedMetrics(const observe::ObserveMetrics& m);

class TimedApplier;

// The parts, in the order their members are declared below and Create()/Start() bring them up:
//
//   signals_   SIGTERM/SIGINT, blocked before any thread exists (taken only by Wait())
//   node_      cgroups, topology, enforcer (state dir opened and locked), engine, and the
//              observer the engine hands each fence's observe list (--observe)   [Create]
//   client_    the stream to the controller: hello, fences → engine, ACK/NACK, reports
//   node_.observer's thread: a reading of the observed pods every --observe-period-s
//   watcher_   inotify + periodic sweep over the files we wrote (overwrites → write back)
//   metrics_   /metrics, /healthz, /readyz (--metrics-addr)
//
// Stop: watcher_ → the observer's thread → client_ (the applied fence stays) → metrics_ (last:
// probes answered until the end); the node and then the signal mask go with the object.
class AgentApp {
 public:
  // Bad input (InvalidArgument), checked before anything is built: the CLI exits 2 for it.
  static Status Validate(const AgentConfig& config);
  // Blocks SIGTERM/SIGINT (before any thread exists) and builds the node; no thread is started.
  // Errors: the node cannot be built (cgroups, topology, state dir).
  static Result<std::unique_ptr<AgentApp>> Create(AgentConfig config);
  ~AgentApp() { Stop(); }
  AgentApp(const AgentApp&) = delete;
  AgentApp& operator=(const AgentApp&) = delete;

  // Starts the stream client, the observer, the overwrite watcher and the metrics server, in
  // that order.
  Status Start();
  // Until SIGTERM or SIGINT; returns 0.
  int Wait();
  void Stop();  // idempotent; leaves every fence in place

 private:
  explicit AgentApp(AgentConfig config);
  FenceClientOptions ClientOptions() const;
  std::string RenderMetrics() const;

  const AgentConfig config_;
  TerminationSignals signals_;  // first: every later thread inherits the blocked mask
  NodeParts node_;              // built by Create()
  // Started by Start(), in this order:
  Histogram apply_seconds_{{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}};
  std::shared_ptr<TimedApplier> applier_;
  std::unique_ptr<FenceClient> client_;
  std::unique_ptr<Watcher> watcher_;
  std::unique_ptr<MetricsServer> metrics_;
  bool stopped_ = false;  // Stop() ran (Stop and the destructor run on the same thread)
};

}  // namespace feedguard::agent
