// fence_loop — the controller's CPU per node for a policy edit, in isolation (issue 14 item 3).
//
// A Reconciler with N nodes × P pods (the scale loader's shapes: 1 trainer + P-1 neighbours per
// node) and one policy; then E edits (generation + 1 each): every node is resolved again and gets
// a new fence. Reports the wall time of the fence pass per edit and per node (median and spread
// over the edits), and of the status pass that follows once every agent acknowledged. No API
// server, no gRPC: the reconciler's own cost, which the scale ladder's edit latency contains.
//
//   fg-fence-loop [NODES] [PODS_PER_NODE] [EDITS]     (default 1000 30 15)
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/scale/null_writer.h"
#include "controller/reconciler/reconciler.h"

namespace fc = feedguard::controller;
using nlohmann::json;

namespace {

// Keeps what the distributor would hand back: desired and acknowledged versions per node.
class AckingSink : public fc::FenceSink {
 public:
  feedguard::Status SetDesired(fc::NodeFencePtr f) override {
    std::lock_guard<std::mutex> l(mu_);
    auto& a = agents_[f->node_name()];
    a.desired_version = f->version();
    a.connected = true;
    return feedguard::OkStatus();
  }
  std::optional<fc::AgentView> GetAgent(const std::string& node) const override {
    std::lock_guard<std::mutex> l(mu_);
    auto it = agents_.find(node);
    if (it == agents_.end()) return std::nullopt;
    return it->second;
  }
  // Every agent acknowledges its desired version (what the simulator does on receipt).
  void AckAll(fc::Reconciler& rc) {
    std::map<std::string, uint64_t> v;
    {
      std::lock_guard<std::mutex> l(mu_);
      for (auto& [n, a] : agents_) {
        a.acked_version = a.desired_version;
        v[n] = a.desired_version;
      }
    }
    for (const auto& [n, ver] : v) rc.OnAck(n, ver);
  }

 private:
  mutable std::mutex mu_;
  std::map<std::string, fc::AgentView> agents_;
};

json Policy(int64_t generation) {
  return {{"metadata",
           {{"name", "scale"},
            {"generation", generation},
            {"finalizers", {"feedguard.io/revert-fences"}}}},
          {"spec",
           {{"priority", generation % 100},
            {"trainers", {{"podSelector", {{"matchLabels", {{"feedguard.io/role", "trainer"}}}}}}},
            {"neighbours", {{"fence", "Idle"}}}}}};
}

json Pod(int node, int i) {
  const bool trainer = i == 0;
  const std::string name = "p-" + std::to_string(node) + "-" + std::to_string(i);
  json labels =
      trainer ? json{{"feedguard.io/role", "trainer"}, {"app", "train"}} : json{{"app", "batch"}};
  json res = trainer ? json{{"requests", {{"cpu", "4"}, {"memory", "1Gi"}}},
                            {"limits", {{"cpu", "4"}, {"memory", "1Gi"}}}}
                     : json{{"requests", {{"cpu", "100m"}}}};
  char id[80];
  std::snprintf(id, sizeof id, "containerd://%064x", node * 1000 + i);
  return {{"metadata",
           {{"name", name}, {"namespace", "scale"}, {"uid", "uid-" + name}, {"labels", labels}}},
          {"spec",
           {{"nodeName", "node-" + std::to_string(node)},
            {"containers", {{{"name", "main"}, {"resources", res}}}}}},
          {"status",
           {{"phase", "Running"},
            {"qosClass", trainer ? "Guaranteed" : "Burstable"},
            {"containerStatuses", {{{"name", "main"}, {"containerID", id}}}}}}};
}

double Ms(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

}  // namespace

int main(int argc, char** argv) {
  const int nodes = argc > 1 ? std::atoi(argv[1]) : 1000;
  const int pods = argc > 2 ? std::atoi(argv[2]) : 30;
  const int edits = argc > 3 ? std::atoi(argv[3]) : 15;
  auto sink = std::make_shared<AckingSink>();
  fc::ReconcilerOptions o;
  o.status_interval = std::chrono::milliseconds(0);
  fc::Reconciler rc(sink, std::make_shared<feedguard::bench::NullWriter>(), o);
  for (int n = 0; n < nodes; ++n) {
    rc.UpsertNode({{"metadata", {{"name", "node-" + std::to_string(n)}}}});
    rc.OnConnected("node-" + std::to_string(n), {});
    for (int i = 0; i < pods; ++i) rc.UpsertPod(Pod(n, i));
  }
  rc.UpsertPolicy(Policy(1));
  rc.MarkInformersSynced();
  rc.StepFences();
  sink->AckAll(rc);
  rc.StepApiWrites();

  std::vector<double> fence_ms, status_ms;
  for (int e = 0; e < edits; ++e) {
    rc.UpsertPolicy(Policy(2 + e));
    const auto t0 = std::chrono::steady_clock::now();
    rc.StepFences();
    const auto t1 = std::chrono::steady_clock::now();
    sink->AckAll(rc);
    const auto t2 = std::chrono::steady_clock::now();
    rc.StepApiWrites();
    const auto t3 = std::chrono::steady_clock::now();
    fence_ms.push_back(Ms(t1 - t0));
    status_ms.push_back(Ms(t3 - t2));
  }
  auto stats = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return std::array<double, 3>{v.front(), v[v.size() / 2], v.back()};
  };
  const auto f = stats(fence_ms), s = stats(status_ms);
  std::printf(
      "{\"nodes\":%d,\"pods_per_node\":%d,\"edits\":%d,\"fence_pass_ms\":{\"min\":%.2f,"
      "\"median\":%.2f,\"max\":%.2f},\"fence_us_per_node_median\":%.1f,\"status_pass_ms\":{"
      "\"min\":%.2f,\"median\":%.2f,\"max\":%.2f},\"fences_sent\":%llu}\n",
      nodes, pods, edits, f[0], f[1], f[2], 1000.0 * f[1] / nodes, s[0], s[1], s[2],
      static_cast<unsigned long long>(rc.stats().fences_sent));
  return 0;
}
