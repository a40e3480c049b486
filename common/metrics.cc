#include "common/metrics.h"

#include <algorithm>
#include <cstdio>

namespace feedguard {
namespace {

std::string Num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string EscapeLabelValue(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
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

std::string RenderSeries(const std::string& name, const std::string& help, const std::string& type,
                         const std::vector<Series>& series) {
  std::string out = "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  for (const Series& s : series) {
    out += name;
    if (!s.labels.empty()) {
      out += '{';
      for (size_t i = 0; i < s.labels.size(); ++i) {
        if (i > 0) out += ',';
        out += s.labels[i].first + "=\"" + EscapeLabelValue(s.labels[i].second) + "\"";
      }
      out += '}';
    }
    out += " " + Num(s.value) + "\n";
  }
  return out;
}

Result<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string& address,
                                                            Collector collector, Ready ready,
                                                            MetricsServerOptions options) {
  std::vector<HttpRoute> routes;
  // The collector reads other components' state under their locks: on the endpoint's worker
  // thread, so a slow one never delays the probes.
  routes.push_back(
      {"/metrics", /*blocking=*/true, [collector] {
         return HttpResponse{200, "text/plain; version=0.0.4", collector ? collector() : ""};
       }});
  routes.push_back({"/healthz", false, [] { return HttpResponse{200, "text/plain", "ok\n"}; }});
  routes.push_back({"/readyz", false, [ready] {
                      bool ok = false;
                      try {
                        ok = !ready || ready();
                      } catch (const std::exception&) {
                        ok = false;
                      }
                      return ok ? HttpResponse{200, "text/plain", "ready\n"}
                                : HttpResponse{503, "text/plain", "not ready\n"};
                    }});
  FG_ASSIGN_OR_RETURN(auto endpoint, HttpEndpoint::Start(address, std::move(routes), options));
  return std::unique_ptr<MetricsServer>(new MetricsServer(std::move(endpoint)));
}

}  // namespace feedguard
