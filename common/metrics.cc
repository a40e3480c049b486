#include "common/metrics.h"

#include <algorithm>
#include <cstdio>

#include <httplib.h>

namespace feedguard {
namespace {

std::string Num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double value) {
  size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  std::lock_guard<std::mutex> l(mu_);
  counts_[i]++;
  sum_ += value;
  count_++;
}

std::string Histogram::Render(const std::string& name, const std::string& help) const {
  std::lock_guard<std::mutex> l(mu_);
  std::string out = "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    out += name + "_bucket{le=\"" + Num(bounds_[i]) + "\"} " + std::to_string(cum) + "\n";
  }
  cum += counts_.back();
  out += name + "_bucket{le=\"+Inf\"} " + std::to_string(cum) + "\n";
  out += name + "_sum " + Num(sum_) + "\n";
  out += name + "_count " + std::to_string(count_) + "\n";
  return out;
}

double CounterSum::Update(const std::map<std::string, double>& current) {
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& [source, value] : current) {
    auto it = last_.find(source);
    if (it == last_.end() || value < it->second) {
      total_ += value;  // new source, or its counter restarted from zero
    } else {
      total_ += value - it->second;
    }
    last_[source] = value;
  }
  return total_;
}

std::string RenderGauge(const std::string& name, const std::string& help, double value,
                        const std::string& type) {
  return "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " +
         Num(value) + "\n";
}

std::string RenderLabelled(const std::string& name, const std::string& help,
                           const std::string& type,
                           const std::vector<std::pair<std::string, double>>& label_values,
                           const std::string& label) {
  std::string out = "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  for (const auto& [lv, v] : label_values) {
    out += name + "{" + label + "=\"" + lv + "\"} " + Num(v) + "\n";
  }
  return out;
}

Result<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string& address,
                                                            Collector collector, Ready ready,
                                                            MetricsServerOptions options) {
  auto colon = address.rfind(':');
  if (colon == std::string::npos) {
    return InvalidArgument("metrics address \"" + address + "\" must be host:port");
  }
  std::string host = address.substr(0, colon);
  if (host.empty()) host = "0.0.0.0";
  int port = std::atoi(address.c_str() + colon + 1);
  std::unique_ptr<MetricsServer> s(new MetricsServer());
  s->server_ = std::make_unique<httplib::Server>();
  // Slow clients must not starve the probes (see MetricsServerOptions).
  const size_t threads = std::max<size_t>(options.threads, 2);
  s->server_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  s->server_->set_read_timeout(options.read_timeout);
  s->server_->set_write_timeout(options.write_timeout);
  s->server_->set_keep_alive_timeout(std::max<time_t>(1, options.keep_alive_timeout.count()));
  s->server_->set_keep_alive_max_count(options.keep_alive_max_requests);
  s->server_->set_payload_max_length(options.max_request_body_bytes);
  s->server_->Get("/metrics", [collector](const httplib::Request&, httplib::Response& res) {
    try {
      res.set_content(collector ? collector() : "", "text/plain; version=0.0.4");
    } catch (const std::exception& e) {  // never let a collector end the serving thread
      res.status = 500;
      res.set_content(std::string("collector failed: ") + e.what() + "\n", "text/plain");
    }
  });
  s->server_->Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  s->server_->Get("/readyz", [ready](const httplib::Request&, httplib::Response& res) {
    bool ok = false;
    try {
      ok = !ready || ready();
    } catch (const std::exception&) {
      ok = false;
    }
    res.status = ok ? 200 : 503;
    res.set_content(ok ? "ready\n" : "not ready\n", "text/plain");
  });
  if (port == 0) {
    s->port_ = s->server_->bind_to_any_port(host);
  } else {
    s->port_ = s->server_->bind_to_port(host, port) ? port : -1;
  }
  if (s->port_ <= 0) return Unavailable("cannot listen on " + address);
  httplib::Server* raw = s->server_.get();
  s->thread_ = std::thread([raw] { raw->listen_after_bind(); });
  return s;
}

MetricsServer::~MetricsServer() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace feedguard
