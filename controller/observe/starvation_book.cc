#include "controller/observe/starvation_book.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "feedguard/common/starvation.h"
#include "feedguard/common/wire_limits.h"

namespace feedguard::controller {
namespace {

constexpr uint32_t kTenMinutes = 600;
constexpr uint32_t kOneHour = 3600;
// An agent's figures are seconds within an hour's window: anything else is not a measurement.
constexpr double kMaxSeconds = 4 * 3600.0;

// A pod uid as the API server writes them (a UUID); anything else an agent sends (non-UTF-8
// bytes that would make the report's JSON unwritable, a path, a megabyte) is not a uid.
bool LooksLikeUid(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-';
  });
}

float Clean(double v) {
  if (!std::isfinite(v) || v < 0) return 0;
  return static_cast<float>(std::min(v, kMaxSeconds));
}

SeenWindow FromWire(const feedguard::v1::ObservationWindow& w) {
  SeenWindow s;
  s.seconds = w.window_seconds();
  s.covered_s = Clean(w.covered_seconds());
  s.wait_s = std::min(Clean(w.wait_seconds()), s.covered_s);
  s.behind_others_s = w.has_wait_behind_others_seconds()
                          ? std::min(Clean(w.wait_behind_others_seconds()), s.wait_s)
                          : s.wait_s;
  s.behind_pods_s = w.has_wait_behind_pods_seconds()
                        ? std::min(Clean(w.wait_behind_pods_seconds()), s.behind_others_s)
                        : s.behind_others_s;
  s.cpu_s = Clean(w.cpu_seconds());
  s.throttled_s = Clean(w.throttled_seconds());
  if (w.wait_source() == feedguard::v1::ObservationWindow::PSI ||
      w.wait_source() == feedguard::v1::ObservationWindow::SCHEDSTAT) {
    s.source = w.wait_source();
  }
  s.gpu_sampled = w.gpu_sampled();
  if (s.gpu_sampled) {
    const double busy = w.gpu_busy_fraction();
    s.gpu_busy = std::isfinite(busy) ? static_cast<float>(std::clamp(busy, 0.0, 1.0)) : 0.0F;
    s.gpu_lost_s = std::min(Clean(w.gpu_lost_seconds()), s.behind_others_s);
    s.gpu_lost_min_s = std::min(Clean(w.gpu_lost_min_seconds()), s.gpu_lost_s);
    s.gpu_lost_max_s =
        std::max(std::min(Clean(w.gpu_lost_max_seconds()), s.behind_others_s), s.gpu_lost_s);
  }
  for (const auto& c : w.contenders()) {
    if (s.contenders.size() >= kMaxObservedContenders) break;
    if (!c.pod_uid().empty() && !LooksLikeUid(c.pod_uid())) continue;  // "" is the node
    s.contenders.emplace_back(c.pod_uid(), Clean(c.cpu_seconds()));
  }
  return s;
}

}  // namespace

StarvationBook::StarvationBook(TimeSourcePtr clock, std::chrono::seconds max_age)
    : clock_(clock ? std::move(clock) : std::make_shared<RealTimeSource>()), max_age_(max_age) {}

void StarvationBook::OnReport(const std::string& node, const feedguard::v1::NodeReport& report) {
  SeenNode seen;
  seen.at = clock_->MonotonicNow();
  for (const auto& o : report.observations()) {
    if (seen.pods.size() >= kMaxObservedPodsPerNode) break;
    if (!LooksLikeUid(o.uid())) continue;
    SeenPod p;
    p.uid = o.uid();
    std::vector<SeenWindow> windows;
    for (const auto& w : o.windows()) {
      if (w.window_seconds() != 60 && w.window_seconds() != kTenMinutes &&
          w.window_seconds() != kOneHour) {
        continue;
      }
      if (std::any_of(windows.begin(), windows.end(),
                      [&](const SeenWindow& s) { return s.seconds == w.window_seconds(); })) {
        continue;  // one of each
      }
      windows.push_back(FromWire(w));
    }
    for (const auto& w : windows) {
      p.gpu_sampled = p.gpu_sampled || w.gpu_sampled;
      if (w.seconds == kTenMinutes) {
        p.wait_10m_s = w.wait_s;
        p.behind_others_10m_s = w.behind_others_s;
        p.lost_10m_s = w.gpu_lost_s;
        p.starving = w.source != feedguard::v1::ObservationWindow::WAIT_SOURCE_UNSPECIFIED &&
                     IsStarving(w.behind_others_s, w.covered_s);
      } else if (w.seconds == kOneHour) {
        p.lost_1h_s = w.gpu_lost_s;
      }
    }
    if (p.starving) {
      std::sort(windows.begin(), windows.end(),
                [](const SeenWindow& a, const SeenWindow& b) { return a.seconds < b.seconds; });
      p.windows = std::move(windows);
    }
    seen.pods.push_back(std::move(p));
  }
  std::lock_guard<std::mutex> l(mu_);
  if (seen.pods.empty()) {
    nodes_.erase(node);
  } else {
    nodes_[node] = std::move(seen);
  }
}

void StarvationBook::ForgetNode(const std::string& node) {
  std::lock_guard<std::mutex> l(mu_);
  nodes_.erase(node);
}

std::map<std::string, SeenNode> StarvationBook::Snapshot() {
  const auto now = clock_->MonotonicNow();
  std::lock_guard<std::mutex> l(mu_);
  std::erase_if(nodes_, [&](const auto& kv) { return now - kv.second.at > max_age_; });
  return nodes_;
}

size_t StarvationBook::nodes() const {
  std::lock_guard<std::mutex> l(mu_);
  return nodes_.size();
}

}  // namespace feedguard::controller
