#include "agent/observe/starvation.h"

#include <algorithm>
#include <map>
#include <utility>

namespace feedguard::agent::observe {
namespace {

constexpr double kMinWaitFraction = 0.01;
constexpr double kMinContentionS = 0.001;

// Most first, then by name (a stable order for equal figures), at most `top_k`.
std::vector<Contention> Ranked(std::map<std::string, double> by_contender, size_t top_k) {
  std::vector<Contention> out;
  for (auto& [who, s] : by_contender) {
    if (s >= kMinContentionS) out.push_back({who, s});
  }
  std::sort(out.begin(), out.end(), [](const Contention& a, const Contention& b) {
    return a.cpu_s != b.cpu_s ? a.cpu_s > b.cpu_s : a.contender < b.contender;
  });
  if (out.size() > top_k) out.resize(top_k);
  return out;
}

}  // namespace

void SplitWait(PodSample& s, size_t cpus, const OthersOnCpus& others) {
  const double wait = std::clamp(s.wait_s, 0.0, std::max(0.0, s.dt_s));
  double c = wait;
  if (others.node_s) c = std::min(c, std::max(0.0, others.pods_s + *others.node_s));
  if (cpus > 0) c = std::min(c, std::max(0.0, static_cast<double>(cpus) * s.dt_s - s.cpu_s));
  s.behind_others_s = c;
  s.behind_pods_s = std::min(c, std::max(0.0, others.pods_s));
}

std::optional<GpuLost> GpuLostIn(const PodSample& s) {
  if (!s.gpu_busy || s.dt_s <= 0 || s.source == WaitSource::kUnknown) return std::nullopt;
  const double dt = s.dt_s;
  const double wait = std::clamp(s.behind_others_s, 0.0, dt);
  const double idle = (1.0 - std::clamp(*s.gpu_busy, 0.0, 1.0)) * dt;
  GpuLost l;
  l.low_s = std::max(0.0, wait + idle - dt);
  l.high_s = std::min(wait, idle);
  l.estimate_s = wait * idle / dt;
  return l;
}

bool WaitedIn(const PodSample& s) {
  return s.dt_s > 0 && s.behind_others_s >= kMinWaitFraction * s.dt_s;
}

ContentionOnCpus ContendersOn(const CpuSet& cpus, double own_cpu_s,
                              const std::vector<CgroupUsage>& others,
                              std::optional<double> node_busy_on_cpus_s, size_t top_k) {
  ContentionOnCpus out;
  std::map<std::string, double> by;
  for (const CgroupUsage& u : others) {
    if (u.cpus.empty() || u.cpu_s <= 0) continue;
    const size_t overlap = u.cpus.Intersect(cpus).size();
    if (overlap == 0) continue;
    const double share =
        u.cpu_s * static_cast<double>(overlap) / static_cast<double>(u.cpus.size());
    if (u.idle) {
      out.total.idle_pods_s += share;
      continue;
    }
    by[u.contender] += share;
    out.total.pods_s += share;
  }
  if (node_busy_on_cpus_s) {
    const double node_s =
        std::max(0.0, *node_busy_on_cpus_s - own_cpu_s - out.total.pods_s - out.total.idle_pods_s);
    out.total.node_s = node_s;
    if (node_s > 0) by[kNodeContender] += node_s;
  }
  out.top = Ranked(std::move(by), top_k);
  return out;
}

PodWindows::PodWindows(std::chrono::seconds period, std::chrono::seconds horizon, size_t top_k)
    : capacity_(static_cast<size_t>(std::max<int64_t>(
          1, (horizon.count() + period.count() - 1) / std::max<int64_t>(1, period.count())))),
      top_k_(top_k) {}

void PodWindows::Add(PodSample s) {
  if (!WaitedIn(s)) {
    s.contenders.clear();  // named only where it waited
  } else if (s.contenders.size() > top_k_) {
    s.contenders.resize(top_k_);
  }
  samples_.push_back(std::move(s));
  while (samples_.size() > capacity_) samples_.pop_front();
}

Summary PodWindows::Over(std::chrono::seconds window) const {
  Summary sum;
  const double want = static_cast<double>(window.count());
  double busy_s = 0, busy_dt = 0;
  std::map<std::string, double> contenders;
  for (auto it = samples_.rbegin(); it != samples_.rend() && sum.window_s < want; ++it) {
    const PodSample& s = *it;
    if (!sum.source || s.source == WaitSource::kUnknown) sum.source = s.source;
    sum.window_s += s.dt_s;
    sum.wait_s += std::clamp(s.wait_s, 0.0, s.dt_s);
    sum.behind_others_s += std::clamp(s.behind_others_s, 0.0, s.dt_s);
    sum.behind_pods_s += std::clamp(s.behind_pods_s, 0.0, s.dt_s);
    sum.cpu_s += s.cpu_s;
    sum.throttled_s += s.throttled_s;
    if (auto lost = GpuLostIn(s)) {
      if (!sum.gpu_lost) sum.gpu_lost = GpuLost{};
      sum.gpu_lost->estimate_s += lost->estimate_s;
      sum.gpu_lost->low_s += lost->low_s;
      sum.gpu_lost->high_s += lost->high_s;
      busy_s += std::clamp(*s.gpu_busy, 0.0, 1.0) * s.dt_s;
      busy_dt += s.dt_s;
    }
    for (const Contention& c : s.contenders) contenders[c.contender] += c.cpu_s;
  }
  if (sum.window_s > 0) sum.wait_fraction = sum.wait_s / sum.window_s;
  if (busy_dt > 0) sum.gpu_busy = busy_s / busy_dt;
  sum.contenders = Ranked(std::move(contenders), top_k_);
  return sum;
}

}  // namespace feedguard::agent::observe
