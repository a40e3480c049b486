// cluster_objects_fuzz.cc — Pods, Nodes and Namespaces as the API server serves them, into the
// controller's records (controller/resolver/cluster_objects: PodFromJson, NodeFromJson,
// NamespaceFromJson), the only copy the controller keeps of them.
//
// Properties: never a throw; the records of objects trimmed to PodFields()/NodeFields() while
// parsing (as the informers do) equal those of the whole objects; parsing is deterministic (two
// records of one object are equal, label sets interned or not); counts are never negative; the
// object then lands in a live Reconciler whose outputs are checked.
#include <string>
#include <utility>

#include "controller/resolver/cluster_objects.h"
#include "tests/fuzz/controller_fuzz.h"

using feedguard::controller::PodInfo;

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, size_t size) {
  namespace controller = feedguard::controller;
  const nlohmann::json j = nlohmann::json::parse(AsText(data, size), nullptr, false);
  if (j.is_discarded()) return 0;

  const PodInfo pod = controller::PodFromJson(j);
  FG_FUZZ_CHECK(pod.cpu_request_milli >= 0 && pod.cpu_limit_milli >= 0 && pod.gpus >= 0);
  FG_FUZZ_CHECK(pod == controller::PodFromJson(j));
  feedguard::controller::LabelSetPool pool;
  feedguard::controller::InternPool<std::string> strings;
  PodInfo interned = controller::PodFromJson(j);
  interned.labels = pool.Intern(interned.labels.get().Interned(strings));
  FG_FUZZ_CHECK(pod == interned);
  // The set finds every label the parsed map has, with its value, and nothing else.
  const feedguard::controller::Labels map = interned.labels.get().ToMap();
  FG_FUZZ_CHECK(map.size() == interned.labels.get().size());
  for (const auto& [k, v] : map) {
    const std::string* got = interned.labels.get().Find(k);
    FG_FUZZ_CHECK(got != nullptr && *got == v);
    const std::string absent = k + "\x01";
    FG_FUZZ_CHECK(map.count(absent) != 0 || interned.labels.get().Find(absent) == nullptr);
  }

  // The informers parse pods and nodes down to PodFields()/NodeFields(): the records of the
  // trimmed objects must equal those of the whole ones.
  const nlohmann::json pod_trimmed =
      feedguard::kube::ParseFields(AsText(data, size), controller::PodFields().get());
  FG_FUZZ_CHECK(!pod_trimmed.is_discarded());
  FG_FUZZ_CHECK(pod == controller::PodFromJson(pod_trimmed));

  const auto node = controller::NodeFromJson(j);
  FG_FUZZ_CHECK(node.name == controller::NodeFromJson(j).name);
  const nlohmann::json node_trimmed =
      feedguard::kube::ParseFields(AsText(data, size), controller::NodeFields().get());
  FG_FUZZ_CHECK(!node_trimmed.is_discarded());
  const auto node_of_trimmed = controller::NodeFromJson(node_trimmed);
  FG_FUZZ_CHECK(node.name == node_of_trimmed.name && node.labels == node_of_trimmed.labels);
  (void)controller::NamespaceFromJson(j);

  feedguard::fuzz::FuzzCluster cluster;
  cluster.reconciler->UpsertPod(j);
  cluster.reconciler->UpsertNode(j);
  cluster.reconciler->UpsertNamespace(j);
  cluster.Settle();
  cluster.reconciler->DeletePod(j);
  cluster.reconciler->DeleteNode(j);
  cluster.Settle();
  return 0;
}
