// metrics.h — Prometheus text-format metrics and the small HTTP endpoint serving them together
// with /healthz and /readyz (cpp-httplib), shared by the controller and the agent.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "feedguard/common/status.h"

namespace httplib {
class Server;
}

namespace feedguard {

// A cumulative histogram (Prometheus semantics: le buckets, _sum, _count). Thread-safe.
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void Observe(double value);
  // "# HELP/# TYPE" lines plus the series.
  std::string Render(const std::string& name, const std::string& help) const;

 private:
  const std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // guarded by mu_; per bucket (non-cumulative)
  double sum_ = 0;                // guarded by mu_
  uint64_t count_ = 0;            // guarded by mu_
};

// One counter summing the counters of several sources (e.g. every agent's overwrites_total),
// which never decreases: each source adds its growth since its previous value; a source whose
// value fell (it restarted) adds its new value; a source that goes away keeps what it added.
// Thread-safe.
class CounterSum {
 public:
  // Folds in the current value of each source (key → its own counter) and returns the total.
  double Update(const std::map<std::string, double>& current);

 private:
  std::mutex mu_;
  std::map<std::string, double> last_;  // guarded by mu_
  double total_ = 0;                    // guarded by mu_
};

// Builds one metric family in text format.
std::string RenderGauge(const std::string& name, const std::string& help, double value,
                        const std::string& type = "gauge");
std::string RenderLabelled(const std::string& name, const std::string& help,
                           const std::string& type,
                           const std::vector<std::pair<std::string, double>>& label_values,
                           const std::string& label);

// How the endpoint stands up to slow or idle clients (cpp-httplib's own settings). Each open
// connection holds one worker thread while it is read, so the pool is sized well above what
// probes and scrapes need, and every read and write has a deadline: an idle connection is
// closed after `keep_alive_timeout`, a request that stalls for `read_timeout` between bytes is
// dropped. A client that trickles a byte just inside `read_timeout` keeps its thread, so more
// than `threads` such clients at once can still delay probes: bind to a private address or
// admit only the kubelet and Prometheus (the chart's NetworkPolicy) where that matters.
struct MetricsServerOptions {
  size_t threads = 64;
  std::chrono::milliseconds read_timeout{2'000};
  std::chrono::milliseconds write_timeout{5'000};
  std::chrono::seconds keep_alive_timeout{2};
  size_t keep_alive_max_requests = 100;
  size_t max_request_body_bytes = 4096;  // GET only: nothing legitimate sends a body
};

// Serves GET /metrics (collector output), /healthz (always 200 while serving) and /readyz
// (200 when `ready()` is true, else 503).
class MetricsServer {
 public:
  using Collector = std::function<std::string()>;
  using Ready = std::function<bool()>;
  // `address` is "host:port" (the bind address: "0.0.0.0:8080" every interface, "127.0.0.1:8080"
  // loopback only); port 0 picks a free port (see port()).
  static Result<std::unique_ptr<MetricsServer>> Start(const std::string& address,
                                                      Collector collector, Ready ready,
                                                      MetricsServerOptions options = {});
  ~MetricsServer();
  int port() const { return port_; }

 private:
  MetricsServer() = default;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace feedguard
