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
//   fg-pod-memory [N [PODS.json]]   (default 20000; with the dumped pods, the realistic shape too)
#include <malloc.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
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

// The realistic shape: pod i is a copy of the real cluster's pods (bench/scale/shapes/pods.json,
// as load.py --pod-shape realistic copies them): each node's first pod the training-operator
// worker (the trainer), the rest the other dumped pods in turn; fresh name, uid, uid-bearing
// labels and container ids; the fields the watch delivers and the controller parses away
// (managedFields, the spec's volumes and env) kept, as the informer receives them.
json RealisticPod(size_t i, const json& trainer, const std::vector<json>& others) {
  json p = i % 30 == 0 ? trainer : others[(i % 30 - 1) % others.size()];
  json& meta = p["metadata"];
  const std::string name = meta.value("name", "pod") + "-" + Hex(i, 8);
  meta["name"] = name;
  meta["namespace"] = "team-" + std::to_string(i % 40);
  meta["uid"] = Hex(i, 8) + "-1111-2222-3333-" + Hex(i, 12);
  meta["resourceVersion"] = std::to_string(100000 + i);
  json& labels = meta["labels"];
  for (const char* k : {"controller-uid", "batch.kubernetes.io/controller-uid"}) {
    if (labels.contains(k)) labels[k] = Hex(i, 8) + "-aaaa-bbbb-cccc-" + Hex(i, 12);
  }
  for (const char* k : {"job-name", "batch.kubernetes.io/job-name"}) {
    if (labels.contains(k)) labels[k] = name;
  }
  if (labels.contains("statefulset.kubernetes.io/pod-name")) {
    labels["statefulset.kubernetes.io/pod-name"] = name;
  }
  if (i % 30 == 0) {
    labels["feedguard.io/role"] = "trainer";
  } else {
    labels.erase("feedguard.io/role");
  }
  p["spec"]["nodeName"] = "node-" + std::to_string(i / 30);
  for (const char* list : {"containerStatuses", "initContainerStatuses"}) {
    if (!p["status"].contains(list)) continue;
    int c = 0;
    for (json& cs : p["status"][list]) {
      cs["containerID"] = "containerd://" + Hex(i, 32) + Hex(i + static_cast<size_t>(++c), 32);
    }
  }
  return p;
}

enum class Shape { kLoader, kDeployment, kRealistic };
const char* ShapeName(Shape s) {
  return s == Shape::kLoader ? "loader" : s == Shape::kDeployment ? "deployment" : "realistic";
}

struct RealisticTemplates {
  json trainer;
  std::vector<json> others;
};
// `t`: the dumped pods, for Shape::kRealistic only.
json PodOf(size_t i, Shape s, const RealisticTemplates* t) {
  if (s == Shape::kRealistic) return RealisticPod(i, t->trainer, t->others);
  return Pod(i, s == Shape::kDeployment);
}

void Measure(size_t n, Shape shape, const RealisticTemplates* t = nullptr) {
  // The informer's store as the controller fills it: versions only (no JSON kept).
  const size_t base = HeapInUse();
  auto store = std::make_shared<fk::Store>(fk::StoreOptions{false, {}});
  for (size_t i = 0; i < n; ++i) store->Put(std::make_shared<const json>(PodOf(i, shape, t)));
  const size_t after_store = HeapInUse();
  fc::Reconciler rc(std::make_shared<NullSink>(), std::make_shared<feedguard::bench::NullWriter>(),
                    {});
  for (size_t i = 0; i < n; ++i) rc.UpsertPod(PodOf(i, shape, t));
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
  const size_t raw_one = PodOf(1, shape, t).dump().size();
  std::printf(
      "{\"shape\":\"%s\",\"pods\":%zu,\"pod_json_bytes\":%zu,\"store_bytes_per_pod\":%.0f,"
      "\"reconciler_bytes_per_pod\":%.0f,\"nodes\":%zu,\"fenced_pods\":%zu,"
      "\"fences_held_bytes_per_pod\":%.0f,\"fences_parsed_bytes_per_pod\":%.0f,"
      "\"report_tallies_bytes_per_pod\":%.0f,\"reports_parsed_bytes_per_pod\":%.0f}\n",
      ShapeName(shape), n, raw_one, static_cast<double>(after_store - base) / per,
      static_cast<double>(after_rc - after_store) / per, nodes, fenced_pods,
      static_cast<double>(after_fences - before_fences) / per,
      static_cast<double>(fence_parsed) / per,
      static_cast<double>(after_reports - before_reports) / per,
      static_cast<double>(report_parsed) / per);
}

}  // namespace

int main(int argc, char** argv) {
  const size_t n = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 20000;
  Measure(n, Shape::kLoader);
  Measure(n, Shape::kDeployment);
  if (argc > 2) {  // the dumped pods (bench/scale/shapes/pods.json): the realistic shape too
    std::ifstream in(argv[2]);
    json items = json::parse(in, nullptr, /*allow_exceptions=*/false);
    RealisticTemplates t;
    if (!items.is_object() || !items["items"].is_array()) {
      std::fprintf(stderr, "fg-pod-memory: %s is not a pod list\n", argv[2]);
      return 1;
    }
    for (const json& p : items["items"]) {
      const json labels = p["metadata"].value("labels", json::object());
      if (labels.contains("training.kubeflow.org/job-name")) {
        t.trainer = p;
      } else {
        t.others.push_back(p);
      }
    }
    if (t.trainer.is_null() || t.others.empty()) {
      std::fprintf(stderr, "fg-pod-memory: %s has no training-operator pod or no others\n",
                   argv[2]);
      return 1;
    }
    Measure(n, Shape::kRealistic, &t);
  }
  return 0;
}
