// cluster_cache.h — the reconciler's view of the cluster: the scheduled pods (one record each,
// names and label sets interned), each node's pods, the Node objects' labels and the
// namespaces' labels, as the informers delivered them.
//
// Every change says which nodes' fences it may change: a pod's node (both nodes when it moved),
// a node whose labels changed; a namespace whose labels changed may change any node's fence
// (namespace selectors), which the caller learns from UpsertNamespace's result. Not
// thread-safe: its owner's lock guards it (the Reconciler's mu_).
#pragma once

#include <cstddef>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "controller/reconciler/pod_table.h"
#include "controller/resolver/cluster_objects.h"
#include "controller/resolver/interned.h"

namespace feedguard::controller {

class ClusterCache {
 public:
  using NodeSet = std::set<std::string>;

  // A pod as the informer delivered it (its strings not yet interned). Adds to `dirty` the
  // nodes whose pods changed as far as a fence can tell (most pod updates change nothing).
  void UpsertPod(PodInfo pod, NodeSet* dirty);
  void DeletePod(std::string_view ns, std::string_view name, NodeSet* dirty);
  // True when the node is new or its labels changed (its fence must be resolved again).
  bool UpsertNode(NodeInfo node);
  void DeleteNode(const std::string& name);
  // A ResourceClaim's GPU devices (DRA). The pods that use it get them as claim_gpus; adds to
  // `dirty` the nodes of those whose count changed. DeleteClaim: as if it had none.
  void UpsertClaim(const ClaimInfo& claim, NodeSet* dirty);
  void DeleteClaim(const std::string& ns, const std::string& name, NodeSet* dirty);
  // True when the namespace's labels changed: any node's fence may change.
  bool UpsertNamespace(NamespaceInfo ns);
  void DeleteNamespace(const std::string& name);

  // The Node object of that name, or null when there is none.
  const NodeInfo* Node(const std::string& name) const;
  const std::map<std::string, NodeInfo>& nodes() const { return nodes_; }
  // The pods scheduled to `node` (records never move while stored).
  const std::vector<const PodInfo*>& PodsOn(const std::string& node) const;
  const std::map<std::string, Labels>& namespaces() const { return namespaces_; }
  size_t pod_count() const { return pods_.size(); }

 private:
  // Takes `pod` out of its node's list and marks the node dirty (the caller erases it).
  void Unlink(const PodInfo& pod, NodeSet* dirty);
  // "ns/name" of a claim.
  static std::string ClaimKey(std::string_view ns, std::string_view name);
  // The GPUs of the claims a pod names, as the claims stand now.
  int32_t ClaimGpus(std::string_view ns, const std::vector<std::string>& claims) const;
  // Who uses which claim (stored pods only), kept with pods_.
  void Use(const PodInfo& pod, bool uses);
  void SetClaimGpus(const std::string& key, int32_t gpus, NodeSet* dirty);

  // One copy of each scheduled pod, by namespace and name (the informer's key: a pod recreated
  // under the same name replaces its predecessor), and each node's pods by pointer.
  PodTable pods_;
  std::unordered_map<std::string, std::vector<const PodInfo*>> node_pods_;
  LabelSetPool label_sets_;
  // Namespace, node, priority-class, phase and container names of the pods and their label keys
  // and values, one copy each.
  InternPool<std::string> names_;
  std::map<std::string, NodeInfo> nodes_;
  // DRA: each claim's GPU devices (claims with none are not kept) and the names of the stored pods
  // (in the claim's namespace) that use it, by "ns/name".
  std::unordered_map<std::string, int32_t> claim_gpus_;
  std::unordered_map<std::string, std::set<std::string>> claim_users_;
  std::map<std::string, Labels> namespaces_;
};

}  // namespace feedguard::controller
