#include "controller/reconciler/cluster_cache.h"

#include <utility>

namespace feedguard::controller {

void ClusterCache::UpsertPod(PodInfo pod, NodeSet* dirty) {
  pod.labels = label_sets_.Intern(std::move(pod.labels));
  pod.ns = names_.Intern(std::move(pod.ns));
  pod.node_name = names_.Intern(std::move(pod.node_name));
  pod.priority_class = names_.Intern(std::move(pod.priority_class));
  pod.phase = names_.Intern(std::move(pod.phase));
  for (auto& c : pod.containers) {
    c.name = names_.Intern(std::move(c.name));
    c.id.InternPrefix(names_);
  }
  if (PodInfo* cur = pods_.Find(pod.ns.get(), pod.name)) {
    // Most pod updates (conditions, restarts, probes) change nothing a fence reads.
    if (*cur == pod) return;
    if (cur->node_name == pod.node_name) {
      // In place: node_pods_ keeps pointing at it (found by this key, so Replace holds).
      if (pods_.Replace(*cur, std::move(pod))) dirty->insert(cur->node_name);
      return;
    }
    Unlink(*cur, dirty);
    pods_.Erase(*cur);
  }
  if (pod.node_name.empty()) return;  // not scheduled yet: nothing to fence
  const PodInfo& p = pods_.Insert(std::move(pod));
  node_pods_[p.node_name].push_back(&p);
  dirty->insert(p.node_name);
}

void ClusterCache::Unlink(const PodInfo& pod, NodeSet* dirty) {
  auto n = node_pods_.find(pod.node_name);
  if (n != node_pods_.end()) {
    std::erase(n->second, &pod);
    if (n->second.empty()) node_pods_.erase(n);
  }
  dirty->insert(pod.node_name);
}

void ClusterCache::DeletePod(std::string_view ns, std::string_view name, NodeSet* dirty) {
  PodInfo* pod = pods_.Find(ns, name);
  if (pod == nullptr) return;
  Unlink(*pod, dirty);
  pods_.Erase(*pod);
}

bool ClusterCache::UpsertNode(NodeInfo node) {
  auto [it, added] = nodes_.try_emplace(node.name);
  const bool changed = added || it->second.labels != node.labels;
  it->second = std::move(node);
  return changed;
}

void ClusterCache::DeleteNode(const std::string& name) { nodes_.erase(name); }

bool ClusterCache::UpsertNamespace(NamespaceInfo ns) {
  Labels& labels = namespaces_[ns.name];
  if (labels == ns.labels) return false;
  labels = std::move(ns.labels);
  return true;
}

void ClusterCache::DeleteNamespace(const std::string& name) { namespaces_.erase(name); }

const NodeInfo* ClusterCache::Node(const std::string& name) const {
  auto it = nodes_.find(name);
  return it == nodes_.end() ? nullptr : &it->second;
}

const std::vector<const PodInfo*>& ClusterCache::PodsOn(const std::string& node) const {
  static const std::vector<const PodInfo*> kNoPods;
  auto it = node_pods_.find(node);
  return it == node_pods_.end() ? kNoPods : it->second;
}

}  // namespace feedguard::controller
