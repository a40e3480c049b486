// cluster_objects_fuzz.cc — Pods, Nodes and Namespaces as the API server serves them, into the
// controller's records (controller/resolver/cluster_objects: PodFromJson, NodeFromJson,
// NamespaceFromJson) and through the informers' transforms (SlimPod, MetadataOnly).
//
// Properties: never a throw; the transform keeps everything the controller reads (a record
// built from the slimmed object equals one built from the full object); counts are never
// negative; the object then lands in a live Reconciler whose outputs are checked.
#include <string>

#include "controller/app/kube_adapters.h"
#include "controller/resolver/cluster_objects.h"
#include "tests/fuzz/controller_fuzz.h"

namespace {

using feedguard::controller::PodInfo;

bool SamePod(const PodInfo& a, const PodInfo& b) {
  if (a.containers.size() != b.containers.size()) return false;
  for (size_t i = 0; i < a.containers.size(); ++i) {
    if (a.containers[i].name != b.containers[i].name || a.containers[i].id != b.containers[i].id)
      return false;
  }
  return a.uid == b.uid && a.ns == b.ns && a.name == b.name && a.node_name == b.node_name &&
         a.priority_class == b.priority_class && a.phase == b.phase && a.labels == b.labels &&
         a.qos == b.qos && a.cpu_request_milli == b.cpu_request_milli &&
         a.cpu_limit_milli == b.cpu_limit_milli && a.gpus == b.gpus &&
         a.terminating == b.terminating;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, size_t size) {
  namespace controller = feedguard::controller;
  const nlohmann::json j = nlohmann::json::parse(AsText(data, size), nullptr, false);
  if (j.is_discarded()) return 0;

  const PodInfo pod = controller::PodFromJson(j);
  FG_FUZZ_CHECK(pod.cpu_request_milli >= 0 && pod.cpu_limit_milli >= 0 && pod.gpus >= 0);
  const nlohmann::json slim = controller::SlimPod(j);
  FG_FUZZ_CHECK(SamePod(pod, controller::PodFromJson(slim)));

  const auto node = controller::NodeFromJson(j);
  const auto node_slim = controller::NodeFromJson(controller::MetadataOnly(j));
  FG_FUZZ_CHECK(node.name == node_slim.name && node.labels == node_slim.labels);
  const auto ns = controller::NamespaceFromJson(controller::MetadataOnly(j));
  (void)ns;

  feedguard::fuzz::FuzzCluster cluster;
  cluster.reconciler->UpsertPod(slim);
  cluster.reconciler->UpsertNode(controller::MetadataOnly(j));
  cluster.reconciler->UpsertNamespace(controller::MetadataOnly(j));
  cluster.Settle();
  cluster.reconciler->DeletePod(slim);
  cluster.reconciler->DeleteNode(controller::MetadataOnly(j));
  cluster.Settle();
  return 0;
}
