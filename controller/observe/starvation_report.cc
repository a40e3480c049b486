#include "controller/observe/starvation_report.h"

#include <algorithm>
#include <cmath>
#include <tuple>
#include <vector>

namespace feedguard::controller {
namespace {

using nlohmann::json;

// Seconds with millisecond resolution: what the agents measure, without float noise in the
// object (and so no rewrite for a change in the 7th digit).
double Ms(double s) { return std::round(s * 1000.0) / 1000.0; }

// StarvationRankSeconds (feedguard/common/starvation.h) of one observed pod.
double RankSeconds(const SeenPod& p) {
  return StarvationRankSeconds(p.gpu_sampled, p.lost_10m_s, p.behind_others_10m_s);
}

struct Tally {
  int64_t gpu_pods = 0, starving = 0;
  double wait_10m = 0, behind_others_10m = 0, lost_10m = 0, lost_1h = 0, rank = 0;
  void Add(const SeenPod& p) {
    ++gpu_pods;
    if (p.starving) ++starving;
    wait_10m += p.wait_10m_s;
    behind_others_10m += p.behind_others_10m_s;
    lost_10m += p.lost_10m_s;
    lost_1h += p.lost_1h_s;
    rank += RankSeconds(p);
  }
  json ToJson(const std::string& name) const {
    return {{"name", name},
            {"gpuPods", gpu_pods},
            {"starvingPods", starving},
            {"waitSeconds10m", Ms(wait_10m)},
            {"waitBehindOthersSeconds10m", Ms(behind_others_10m)},
            {"gpuLostSeconds10m", Ms(lost_10m)}};
  }
};

// Worst first: the rank (RankSeconds), then wait behind others, then the name given.
bool Worse(double rank_a, double wait_a, const std::string& a, double rank_b, double wait_b,
           const std::string& b) {
  return std::tie(rank_b, wait_b, a) < std::tie(rank_a, wait_a, b);
}

template <typename T, typename Key>
std::vector<std::pair<std::string, T>> TopOf(const std::map<std::string, T>& all, size_t k,
                                             Key key) {
  std::vector<std::pair<std::string, T>> v(all.begin(), all.end());
  std::sort(v.begin(), v.end(), [&](const auto& a, const auto& b) {
    auto [la, wa] = key(a.second);
    auto [lb, wb] = key(b.second);
    return Worse(la, wa, a.first, lb, wb, b.first);
  });
  if (v.size() > k) v.resize(k);
  return v;
}

// The CRD's waitSource: "unknown" where the agent could not measure the wait.
const char* WaitSourceName(feedguard::v1::ObservationWindow::WaitSource s) {
  switch (s) {
    case feedguard::v1::ObservationWindow::PSI:
      return "psi";
    case feedguard::v1::ObservationWindow::SCHEDSTAT:
      return "schedstat";
    default:
      return "unknown";
  }
}

json WindowJson(const SeenWindow& w, const std::map<std::string, PodName>& on_node) {
  json j = {{"seconds", w.seconds},
            {"coveredSeconds", Ms(w.covered_s)},
            {"waitSeconds", Ms(w.wait_s)},
            {"waitFraction", w.covered_s > 0 ? Ms(w.wait_s / w.covered_s) : 0.0},
            {"waitSource", WaitSourceName(w.source)},
            {"waitBehindOthersSeconds", Ms(w.behind_others_s)},
            {"waitBehindPodsSeconds", Ms(w.behind_pods_s)},
            {"cpuSeconds", Ms(w.cpu_s)},
            {"throttledSeconds", Ms(w.throttled_s)},
            {"gpuSampled", w.gpu_sampled}};
  if (w.gpu_sampled) {
    j["gpuBusyFraction"] = Ms(w.gpu_busy);
    j["gpuLostSeconds"] = Ms(w.gpu_lost_s);
    j["gpuLostMinSeconds"] = Ms(w.gpu_lost_min_s);
    j["gpuLostMaxSeconds"] = Ms(w.gpu_lost_max_s);
  }
  json contenders = json::array();
  for (const auto& [uid, cpu_s] : w.contenders) {
    if (uid.empty()) {
      contenders.push_back({{"kind", "Node"}, {"cpuSeconds", Ms(cpu_s)}});
      continue;
    }
    json c = {{"kind", "Pod"}, {"uid", uid}, {"cpuSeconds", Ms(cpu_s)}};
    if (auto it = on_node.find(uid); it != on_node.end()) {
      c["namespace"] = it->second.ns;
      c["name"] = it->second.name;
    }
    contenders.push_back(std::move(c));
  }
  j["contenders"] = std::move(contenders);
  return j;
}

}  // namespace

json RenderStarvationStatus(const std::map<std::string, SeenNode>& nodes, const PodNamer& names,
                            size_t not_observed, const StarvationReportLimits& limits) {
  Tally cluster;
  std::map<std::string, Tally> by_node, by_ns;
  struct Candidate {
    const std::string* node;
    const SeenPod* pod;
    std::string key;  // namespace/name, or the uid when unknown
  };
  std::vector<Candidate> starving;
  std::map<std::string, std::map<std::string, PodName>> named;  // node → its pods
  for (const auto& [node, seen] : nodes) {
    std::set<std::string> wanted;
    for (const auto& p : seen.pods) {
      wanted.insert(p.uid);
      for (const auto& w : p.windows) {  // starving pods only
        for (const auto& [uid, cpu_s] : w.contenders) {
          if (!uid.empty()) wanted.insert(uid);
        }
      }
    }
    const auto& on_node = named[node] =
        names ? names(node, wanted) : std::map<std::string, PodName>{};
    for (const auto& p : seen.pods) {
      cluster.Add(p);
      by_node[node].Add(p);
      auto it = on_node.find(p.uid);
      const std::string ns = it == on_node.end() ? "" : it->second.ns;
      by_ns[ns].Add(p);
      if (p.starving && !p.windows.empty()) {
        starving.push_back({&node, &p, it == on_node.end() ? p.uid : ns + "/" + it->second.name});
      }
    }
  }
  std::sort(starving.begin(), starving.end(), [](const Candidate& a, const Candidate& b) {
    return Worse(RankSeconds(*a.pod), a.pod->behind_others_10m_s, a.key, RankSeconds(*b.pod),
                 b.pod->behind_others_10m_s, b.key);
  });
  if (starving.size() > limits.pods) starving.resize(limits.pods);

  json pods = json::array();
  for (const Candidate& c : starving) {
    const auto& on_node = named[*c.node];
    json p = {{"uid", c.pod->uid}, {"node", *c.node}};
    if (auto it = on_node.find(c.pod->uid); it != on_node.end()) {
      p["namespace"] = it->second.ns;
      p["name"] = it->second.name;
      p["cpuRequestMilli"] = it->second.cpu_request_milli;
    }
    json windows = json::array();
    for (const auto& w : c.pod->windows) windows.push_back(WindowJson(w, on_node));
    p["windows"] = std::move(windows);
    pods.push_back(std::move(p));
  }
  auto key = [](const Tally& t) { return std::pair{t.rank, t.behind_others_10m}; };
  json top_nodes = json::array();
  for (const auto& [name, t] : TopOf(by_node, limits.nodes, key)) {
    top_nodes.push_back(t.ToJson(name));
  }
  json top_ns = json::array();
  by_ns.erase("");  // pods the cache no longer knows: counted in the cluster only
  for (const auto& [name, t] : TopOf(by_ns, limits.namespaces, key)) {
    top_ns.push_back(t.ToJson(name));
  }
  return {{"cluster",
           {{"nodesReporting", static_cast<int64_t>(nodes.size())},
            {"gpuPods", cluster.gpu_pods},
            {"starvingPods", cluster.starving},
            {"gpuPodsNotObserved", static_cast<int64_t>(not_observed)},
            {"waitSeconds10m", Ms(cluster.wait_10m)},
            {"waitBehindOthersSeconds10m", Ms(cluster.behind_others_10m)},
            {"gpuLostSeconds10m", Ms(cluster.lost_10m)},
            {"gpuLostSeconds1h", Ms(cluster.lost_1h)}}},
          {"pods", std::move(pods)},
          {"nodes", std::move(top_nodes)},
          {"namespaces", std::move(top_ns)}};
}

}  // namespace feedguard::controller
