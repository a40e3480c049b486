// controller_fuzz.h — what the controller-side fuzz targets share: a Reconciler wired to fakes
// that check every output the controller would send to the API server or an agent, and a small
// cluster (a GPU node, a trainer, a neighbour, a policy) for fuzzed objects to land in.
//
// Outputs checked: every status written is serialisable JSON (nlohmann throws on invalid UTF-8)
// within the CRD's bounds (condition reasons CamelCase and at most 1024 bytes, messages at most
// 32768, at most 32 failures with reasons that match the CRD's pattern); every Event's reason is
// CamelCase; every NodeFence handed to the distributor serialises.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "controller/reconciler/reconciler.h"
#include "controller/sanitize/sanitize.h"
#include "tests/fuzz/fuzz_util.h"

namespace feedguard::fuzz {

// Serialises `j` the way the client does before a PUT; a throw (invalid UTF-8) is a finding.
inline std::string MustDump(const nlohmann::json& j) {
  try {
    return j.dump();
  } catch (const nlohmann::json::exception& e) {
    std::fprintf(stderr, "json dump failed: %s\n", e.what());
    std::abort();
  }
}

inline bool IsConditionReason(const std::string& r) {
  // metav1.Condition reason: ^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$, at most 1024 bytes.
  if (r.empty() || r.size() > 1024) return false;
  auto ok = [](char c, bool first) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
           (!first && ((c >= '0' && c <= '9') || c == '_' || c == ',' || c == ':'));
  };
  if (!ok(r.front(), true)) return false;
  for (char c : r) {
    if (!ok(c, false)) return false;
  }
  return r.back() != ',' && r.back() != ':';
}

inline void CheckStatus(const nlohmann::json& st) {
  MustDump(st);
  FG_FUZZ_CHECK(st.is_object());
  FG_FUZZ_CHECK(st.contains("conditions") && st["conditions"].is_array());
  for (const auto& c : st["conditions"]) {
    FG_FUZZ_CHECK(IsConditionReason(c.value("reason", "")));
    FG_FUZZ_CHECK(c.value("message", "").size() <= 32768);
  }
  if (st.contains("failures")) {
    FG_FUZZ_CHECK(st["failures"].is_array() && st["failures"].size() <= 32);
    for (const auto& f : st["failures"]) {
      const std::string reason = f.value("reason", "");
      FG_FUZZ_CHECK(controller::IsCamelCaseReason(reason));
      FG_FUZZ_CHECK(reason.size() <= controller::kMaxReasonLength);
      FG_FUZZ_CHECK(f.value("message", "").size() <= 1024);
    }
  }
}

class CheckingSink final : public controller::FenceSink {
 public:
  Status SetDesired(feedguard::controller::NodeFencePtr fence) override {
    // What an agent receives: the bytes parse back into a NodeFence of that node and version.
    feedguard::v1::NodeFence parsed;
    FG_FUZZ_CHECK(parsed.ParseFromString(fence->unversioned()));
    parsed.set_version(fence->version());
    FG_FUZZ_CHECK(parsed.node_name() == fence->node_name());
    FG_FUZZ_CHECK(parsed.version() == fence->version());
    fences[fence->node_name()] = std::move(parsed);
    return OkStatus();
  }
  std::optional<controller::AgentView> GetAgent(const std::string& node) const override {
    auto it = agents.find(node);
    if (it == agents.end()) return std::nullopt;
    return it->second;
  }
  std::map<std::string, feedguard::v1::NodeFence> fences;
  std::map<std::string, controller::AgentView> agents;
};

class CheckingWriter final : public controller::PolicyWriter {
 public:
  Status WriteStatus(const std::string& name, const nlohmann::json& status) override {
    CheckStatus(status);
    statuses[name] = status;
    return OkStatus();
  }
  Status AddFinalizer(const std::string&) override { return OkStatus(); }
  Status RemoveFinalizer(const std::string&) override { return OkStatus(); }
  void Event(const std::string&, const std::string&, const std::string& reason,
             const std::string& message) override {
    FG_FUZZ_CHECK(controller::IsCamelCaseReason(reason));
    MustDump(nlohmann::json{{"reason", reason}, {"message", message}});
    ++events;
  }
  std::map<std::string, nlohmann::json> statuses;
  int events = 0;
};

// The small cluster every target starts from (shapes as kube-apiserver serves them).
inline nlohmann::json SeedNode() {
  return nlohmann::json::parse(R"({"apiVersion":"v1","kind":"Node","metadata":{
    "name":"gpu-node-1","uid":"3c2b7f64-5d43-4a55-9d0e-0b8f4d1f0a11","resourceVersion":"210",
    "labels":{"kubernetes.io/hostname":"gpu-node-1","nvidia.com/gpu.present":"true"}}})");
}
inline nlohmann::json SeedNamespace() {
  return nlohmann::json::parse(R"({"apiVersion":"v1","kind":"Namespace","metadata":{
    "name":"ml","uid":"b0e2c1d4-2f1e-4c8a-a7a5-5b0b52a3d101","resourceVersion":"12",
    "labels":{"kubernetes.io/metadata.name":"ml","feedguard.io/trainers":"allowed"}}})");
}
inline nlohmann::json SeedPod(const std::string& name, const std::string& uid,
                              const std::string& role, int gpus) {
  nlohmann::json limits = {{"cpu", "4"}, {"memory", "8Gi"}};
  if (gpus > 0) limits["nvidia.com/gpu"] = std::to_string(gpus);
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata",
           {{"name", name},
            {"namespace", "ml"},
            {"uid", uid},
            {"resourceVersion", "300"},
            {"labels", {{"app.kubernetes.io/role", role}}}}},
          {"spec",
           {{"nodeName", "gpu-node-1"},
            {"containers",
             {{{"name", "main"},
               {"image", "registry.example/train:1.0"},
               {"resources",
                {{"limits", limits}, {"requests", {{"cpu", "4"}, {"memory", "8Gi"}}}}}}}}}},
          {"status",
           {{"phase", "Running"},
            {"qosClass", "Guaranteed"},
            {"containerStatuses",
             {{{"name", "main"}, {"containerID", "containerd://" + std::string(64, 'a')}}}}}}};
}
inline nlohmann::json SeedPolicy() {
  return nlohmann::json::parse(R"({"apiVersion":"feedguard.io/v1alpha1","kind":"FencePolicy",
    "metadata":{"name":"protect-trainers","uid":"9a1d9e0c-7b6a-4f7e-8f57-3b1f2c8e4d22",
      "resourceVersion":"400","generation":1,"finalizers":["feedguard.io/revert-fences"]},
    "spec":{"priority":0,"mode":"Enforce",
      "nodeSelector":{"matchLabels":{"nvidia.com/gpu.present":"true"}},
      "trainers":{"podSelector":{"matchLabels":{"app.kubernetes.io/role":"trainer"}},
        "cpu":{"coresPerGPU":4}},
      "neighbours":{"fence":"Idle","exclude":{"namespaces":["kube-system"]}}}})");
}

// A Reconciler on fakes, holding the seed cluster, with the given agent report for gpu-node-1.
struct FuzzCluster {
  std::shared_ptr<CheckingSink> sink = std::make_shared<CheckingSink>();
  std::shared_ptr<CheckingWriter> writer = std::make_shared<CheckingWriter>();
  std::shared_ptr<ManualTimeSource> clock = std::make_shared<ManualTimeSource>();
  std::unique_ptr<controller::Reconciler> reconciler;

  FuzzCluster() {
    spdlog::set_level(spdlog::level::off);  // millions of inputs: no log lines
    controller::ReconcilerOptions o;
    o.clock = clock;
    o.status_interval = std::chrono::milliseconds(0);
    reconciler = std::make_unique<controller::Reconciler>(sink, writer, o);
    reconciler->UpsertNode(SeedNode());
    reconciler->UpsertNamespace(SeedNamespace());
    reconciler->UpsertPolicy(SeedPolicy());
    reconciler->UpsertPod(
        SeedPod("trainer-0", "5f0c3c1e-1d2b-4a7e-9c1f-000000000001", "trainer", 1));
    reconciler->UpsertPod(SeedPod("etl-0", "5f0c3c1e-1d2b-4a7e-9c1f-000000000002", "etl", 0));
    controller::AgentView a;
    a.connected = true;
    sink->agents["gpu-node-1"] = a;
    reconciler->MarkInformersSynced();
  }
  // Resolves, sends fences, writes statuses (all outputs checked by the fakes).
  void Settle() {
    for (int i = 0; i < 3; ++i) {
      clock->Advance(std::chrono::seconds(2));
      reconciler->Step();
    }
  }
};

}  // namespace feedguard::fuzz
