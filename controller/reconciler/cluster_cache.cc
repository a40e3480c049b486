#include "controller/reconciler/cluster_cache.h"

#include <algorithm>
#include <cstdint>
#include <utility>

namespace feedguard::controller {

void ClusterCache::UpsertPod(PodInfo pod, NodeSet* dirty) {
  pod.labels = label_sets_.Intern(pod.labels.get().Interned(names_));
  pod.ns = names_.Intern(std::move(pod.ns));
  pod.node_name = names_.Intern(std::move(pod.node_name));
  pod.priority_class = names_.Intern(std::move(pod.priority_class));
  pod.phase = names_.Intern(std::move(pod.phase));
  for (auto& c : pod.containers) {
    c.name = names_.Intern(std::move(c.name));
    c.id.InternPrefix(names_);
  }
  pod.claim_gpus = ClaimGpus(pod.ns.get(), pod.claims);
  if (PodInfo* cur = pods_.Find(pod.ns.get(), pod.name)) {
    // Most pod updates (conditions, restarts, probes) change nothing a fence reads.
    if (*cur == pod) return;
    Use(*cur, false);
    if (cur->node_name == pod.node_name) {
      // In place: node_pods_ keeps pointing at it (found by this key, so Replace holds).
      if (pods_.Replace(*cur, std::move(pod))) dirty->insert(cur->node_name);
      Use(*cur, true);
      return;
    }
    Unlink(*cur, dirty);
    pods_.Erase(*cur);
  }
  if (pod.node_name.empty()) return;  // not scheduled yet: nothing to fence
  const PodInfo& p = pods_.Insert(std::move(pod));
  Use(p, true);
  node_pods_[p.node_name].push_back(&p);
  dirty->insert(p.node_name);
}

std::string ClusterCache::ClaimKey(std::string_view ns, std::string_view name) {
  std::string key(ns);
  key += '/';
  key += name;
  return key;
}

int32_t ClusterCache::ClaimGpus(std::string_view ns, const std::vector<std::string>& claims) const {
  int64_t sum = 0;
  for (const auto& c : claims) {
    auto it = claim_gpus_.find(ClaimKey(ns, c));
    if (it != claim_gpus_.end()) sum += it->second;
  }
  return static_cast<int32_t>(std::min<int64_t>(sum, INT32_MAX));
}

void ClusterCache::Use(const PodInfo& pod, bool uses) {
  for (const auto& c : pod.claims) {
    const std::string key = ClaimKey(pod.ns.get(), c);
    if (uses) {
      claim_users_[key].insert(pod.name);
      continue;
    }
    auto it = claim_users_.find(key);
    if (it == claim_users_.end()) continue;
    it->second.erase(pod.name);
    if (it->second.empty()) claim_users_.erase(it);
  }
}

void ClusterCache::SetClaimGpus(const std::string& key, int32_t gpus, NodeSet* dirty) {
  auto cur = claim_gpus_.find(key);
  if ((cur == claim_gpus_.end() ? 0 : cur->second) == gpus) return;
  if (gpus > 0) {
    claim_gpus_[key] = gpus;
  } else {
    claim_gpus_.erase(key);
  }
  auto users = claim_users_.find(key);
  if (users == claim_users_.end()) return;
  const std::string_view ns = std::string_view(key).substr(0, key.find('/'));
  for (const auto& name : users->second) {
    PodInfo* pod = pods_.Find(ns, name);
    if (pod == nullptr) continue;
    const int32_t now = ClaimGpus(ns, pod->claims);
    if (pod->claim_gpus == now) continue;
    pod->claim_gpus = now;  // not part of the table's key: changed in place
    dirty->insert(pod->node_name);
  }
}

void ClusterCache::UpsertClaim(const ClaimInfo& claim, NodeSet* dirty) {
  if (claim.ns.empty() || claim.name.empty()) return;
  SetClaimGpus(ClaimKey(claim.ns, claim.name), std::max(0, claim.gpus), dirty);
}

void ClusterCache::DeleteClaim(const std::string& ns, const std::string& name, NodeSet* dirty) {
  SetClaimGpus(ClaimKey(ns, name), 0, dirty);
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
  Use(*pod, false);
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
