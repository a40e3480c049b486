// pod_memory — heap bytes the controller keeps per pod, per holder (issue 14 item 3).
//
// Builds N pods shaped like the scale loader's (1 container, 1–2 labels) and like a typical
// Deployment pod (6 labels, 2 containers), feeds them through what the controller does with a
// watched pod — the informer's store and the reconciler — and reports the glibc heap in use
// (mallinfo2().uordblks) after each holder is filled, divided by N. One JSON line per shape.
// (Before issue 14's rework the store kept a trimmed JSON copy of each pod: 4.2 / 6.7 KB per pod
// for these two shapes, and the reconciler 1.0 / 1.9 KB.)
//
// Then, as in the scale bench, one node per 30 pods, a FencePolicy whose trainer is each node's
// first pod and whose neighbours are the rest: the heap the nodes' desired fences add (held
// serialized, wire_fence.h), and the heap one report per node adds (the reconciler keeps its
// tallies, policy_status.h). For comparison, protobuf's SpaceUsedLong() of the same fences and
// reports parsed: what holding them as messages would cost.
//
//   fg-pod-memory [N]      (default 20000)
#include <malloc.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/scale/null_writer.h"
#include "bench/scale/sim_report.h"
#include "controller/kube/store.h"
#include "controller/reconciler/reconciler.h"

namespace fc = feedguard::controller;
namespace fk = feedguard::kube;
using nlohmann::json;

namespace {

class NullSink : public fc::FenceSink {
 public:
  feedguard::Status SetDesired(fc::NodeFencePtr) override { return feedguard::OkStatus(); }
  std::optional<fc::AgentView> GetAgent(const std::string&) const override { return std::nullopt; }
};

size_t HeapInUse() { return mallinfo2().uordblks; }

// `width` hex digits (at most: a uid's groups have their exact lengths, as the API server's).
std::string Hex(size_t i, int width) {
  uint64_t v = i * 2654435761u;
  if (width < 16) v &= (uint64_t{1} << (4 * width)) - 1;
  char buf[80];
  std::snprintf(buf, sizeof buf, "%0*llx", width, static_cast<unsigned long long>(v));
  return buf;
}

json Pod(size_t i, bool rich) {
  const std::string node = "node-" + std::to_string(i / 30);
  const std::string uid = Hex(i, 8) + "-1111-2222-3333-" + Hex(i, 12);
  json labels = {{"app", "batch"}};
  if (rich) {
    labels = {{"app.kubernetes.io/name", "batch-worker"}, {"app.kubernetes.io/instance", "team-a"},
              {"app.kubernetes.io/component", "worker"},  {"app.kubernetes.io/managed-by", "Helm"},
              {"pod-template-hash", Hex(i / 100, 10)},    {"team", "ml-platform"}};
  }
  if (i % 30 == 0) labels["feedguard.io/role"] = "trainer";  // each node's first pod
  json containers = json::array();
  json statuses = json::array();
  for (int c = 0; c < (rich ? 2 : 1); ++c) {
    const std::string name = c == 0 ? "main" : "sidecar";
    containers.push_back({{"name", name},
                          {"image", "registry.invalid/team/batch:1.2.3"},
                          {"resources",
                           {{"requests", {{"cpu", "100m"}, {"memory", "256Mi"}}},
                            {"limits", {{"memory", "512Mi"}}}}}});
    statuses.push_back({{"name", name},
                        {"containerID", "containerd://" + Hex(i, 32) + Hex(i + c, 32)},
                        {"ready", true},
                        {"restartCount", 0},
                        {"state", {{"running", {{"startedAt", "2026-11-23T10:00:00Z"}}}}}});
  }
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata",
           {{"name", "batch-" + Hex(i, 10)},
            {"namespace", "team-" + std::to_string(i % 40)},
            {"uid", uid},
            {"resourceVersion", std::to_string(100000 + i)},
            {"labels", labels}}},
          {"spec", {{"nodeName", node}, {"containers", containers}}},
          {"status",
           {{"phase", "Running"}, {"qosClass", "Burstable"}, {"containerStatuses", statuses}}}};
}

void Measure(size_t n, bool rich) {
  // The informer's store as the controller fills it: versions only (no JSON kept).
  const size_t base = HeapInUse();
  auto store = std::make_shared<fk::Store>(fk::StoreOptions{false, {}});
  for (size_t i = 0; i < n; ++i) store->Put(std::make_shared<const json>(Pod(i, rich)));
  const size_t after_store = HeapInUse();
  fc::Reconciler rc(std::make_shared<NullSink>(), std::make_shared<feedguard::bench::NullWriter>(),
                    {});
  for (size_t i = 0; i < n; ++i) rc.UpsertPod(Pod(i, rich));
  const size_t after_rc = HeapInUse();

  // Fences: nodes, the policy, one full resolution.
  const size_t nodes = (n + 29) / 30;
  for (size_t k = 0; k < nodes; ++k) {
    rc.UpsertNode({{"metadata",
                    {{"name", "node-" + std::to_string(k)},
                     {"resourceVersion", "1"},
                     {"labels", {{"nvidia.com/gpu.present", "true"}}}}}});
  }
  rc.UpsertPolicy(
      {{"apiVersion", "feedguard.io/v1alpha1"},
       {"kind", "FencePolicy"},
       {"metadata", {{"name", "bench"}, {"generation", 1}, {"resourceVersion", "1"}}},
       {"spec",
        {{"nodeSelector", {{"matchLabels", {{"nvidia.com/gpu.present", "true"}}}}},
         {"trainers", {{"podSelector", {{"matchLabels", {{"feedguard.io/role", "trainer"}}}}}}},
         {"neighbours", {{"fence", "Idle"}}}}}});
  rc.MarkInformersSynced();
  const size_t before_fences = HeapInUse();
  while (rc.StepFences()) {
  }
  const size_t after_fences = HeapInUse();
  size_t fence_parsed = 0, report_parsed = 0, fenced_pods = 0;
  std::vector<feedguard::v1::NodeReport> reports;
  reports.reserve(nodes);
  for (size_t k = 0; k < nodes; ++k) {
    auto f = rc.DesiredFence("node-" + std::to_string(k));
    if (!f) continue;
    fence_parsed += f->SpaceUsedLong();
    fenced_pods += static_cast<size_t>(f->trainers_size() + f->neighbours_size());
    reports.push_back(feedguard::bench::SimReport(*f));
    report_parsed += reports.back().SpaceUsedLong();
  }
  const size_t before_reports = HeapInUse();
  for (size_t k = 0; k < reports.size(); ++k) rc.OnReport("node-" + std::to_string(k), reports[k]);
  const size_t after_reports = HeapInUse();

  const double per = static_cast<double>(n);
  const size_t raw_one = Pod(1, rich).dump().size();
  std::printf(
      "{\"shape\":\"%s\",\"pods\":%zu,\"pod_json_bytes\":%zu,\"store_bytes_per_pod\":%.0f,"
      "\"reconciler_bytes_per_pod\":%.0f,\"nodes\":%zu,\"fenced_pods\":%zu,"
      "\"fences_held_bytes_per_pod\":%.0f,\"fences_parsed_bytes_per_pod\":%.0f,"
      "\"report_tallies_bytes_per_pod\":%.0f,\"reports_parsed_bytes_per_pod\":%.0f}\n",
      rich ? "deployment" : "loader", n, raw_one, static_cast<double>(after_store - base) / per,
      static_cast<double>(after_rc - after_store) / per, nodes, fenced_pods,
      static_cast<double>(after_fences - before_fences) / per,
      static_cast<double>(fence_parsed) / per,
      static_cast<double>(after_reports - before_reports) / per,
      static_cast<double>(report_parsed) / per);
}

}  // namespace

int main(int argc, char** argv) {
  const size_t n = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 20000;
  Measure(n, false);
  Measure(n, true);
  return 0;
}
