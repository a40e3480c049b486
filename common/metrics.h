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

#include "common/http_endpoint.h"
#include "feedguard/common/status.h"

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

// One series of a family: its labels (name, value) in the order given, and its value.
struct Series {
  std::vector<std::pair<std::string, std::string>> labels;
  double value = 0;
};
// A family whose series carry any number of labels; label values are escaped as the text
// format asks (backslash, double quote, line feed).
//
// Example:
//   RenderSeries("x_total", "help", "counter", {{{{"pod", "a"}, {"source", "psi"}}, 2}})
//   → "# HELP x_total help\n# TYPE x_total counter\nx_total{pod=\"a\",source=\"psi\"} 2\n"
std::string RenderSeries(const std::string& name, const std::string& help, const std::string& type,
                         const std::vector<Series>& series);

// How the endpoint stands up to slow, idle or hostile clients: http_endpoint.h (one event loop,
// deadlines per request, a bounded number of connections, a deep listen backlog; the collector
// on a thread of its own so /healthz never waits for it).
using MetricsServerOptions = HttpEndpointOptions;

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
  int port() const { return endpoint_->port(); }
  HttpEndpointStats stats() const { return endpoint_->stats(); }

 private:
  explicit MetricsServer(std::unique_ptr<HttpEndpoint> e) : endpoint_(std::move(e)) {}
  std::unique_ptr<HttpEndpoint> endpoint_;
};

}  // namespace feedguard
