#include "controller/resolver/resolver.h"

#include <algorithm>
#include <tuple>

#include "feedguard/common/qos_wire.h"

namespace feedguard::controller {
namespace {

namespace v1 = feedguard::v1;

bool Contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// Higher priority first; ties broken by name so the outcome never depends on watch order.
bool Outranks(const FencePolicy* a, const FencePolicy* b) {
  if (a->priority != b->priority) return a->priority > b->priority;
  return a->name < b->name;
}

// Returns false when the pod's containers were left out (more than max_containers).
bool FillPodRef(const PodInfo& p, v1::PodRef* ref, size_t max_containers) {
  ref->set_uid(p.uid.str());
  ref->set_namespace_(p.ns);
  ref->set_name(p.name);
  ref->set_qos_class(QosClassToWire(p.qos));
  ref->set_cpu_request_milli(p.cpu_request_milli);
  ref->set_cpu_limit_milli(p.cpu_limit_milli);
  ref->set_priority_class_name(p.priority_class);
  if (p.containers.size() > max_containers) return false;
  for (const auto& c : p.containers) {
    auto* cr = ref->add_containers();
    cr->set_name(c.name);
    cr->set_container_id(c.id.str());
  }
  return true;
}

void CountOverCap(const PodInfo& p, PolicyOnNode& on) {
  if (on.pods_over_container_cap++ == 0) {
    on.over_container_cap_example =
        p.Key() + " (" + std::to_string(p.containers.size()) + " containers)";
  }
}

void FillOptions(const FencePolicy& p, v1::PolicyOptions* o) {
  o->set_name(p.name);
  o->set_generation(p.generation);
  o->set_priority(p.priority);
  o->set_mode(ValueOf(kModeWire, p.mode, v1::ENFORCE));
  auto* cpu = o->mutable_trainer_cpu();
  cpu->set_cores(p.trainers.cores);
  cpu->set_cores_per_gpu(p.trainers.cores_per_gpu);
  cpu->set_weight(p.trainers.weight);
  cpu->set_placement(ValueOf(kPlacementWire, p.trainers.placement, v1::WHOLE_CORES));
  cpu->set_numa(ValueOf(kNumaWire, p.trainers.numa, v1::NUMA_POLICY_UNSPECIFIED));
  o->set_neighbour_fence(
      ValueOf(kNeighbourFenceWire, p.neighbours.fence, v1::NEIGHBOUR_FENCE_UNSPECIFIED));
  o->set_neighbour_max_cpu_percent(p.neighbours.max_cpu_percent);
}

// Idle and Weight act on the neighbour's pod cgroup, inside its QoS tier's cgroup (kubepods/
// burstable, kubepods/besteffort); a Guaranteed pod's cgroup sits beside those tiers under
// kubepods, so its fence reaches every tier. A Burstable/BestEffort neighbour's fence reaches a
// trainer only in the same tier. Cpuset and Quota bound the neighbour whatever the tier.
const PodInfo* TrainerInOtherTier(const PodInfo& neighbour, const FencePolicy& p,
                                  const std::vector<const PodInfo*>& trainers) {
  if (p.neighbours.fence != NeighbourFenceMode::kIdle &&
      p.neighbours.fence != NeighbourFenceMode::kWeight) {
    return nullptr;
  }
  if (neighbour.qos == QosClass::kGuaranteed) return nullptr;
  for (const PodInfo* t : trainers)
    if (t->qos != neighbour.qos) return t;
  return nullptr;
}

bool Protected(const PodInfo& pod, const Rails& rails) {
  if (Contains(rails.protected_priority_classes, pod.priority_class)) return true;
  if (pod.ns.get() == rails.agent_namespace && rails.agent_selector.Matches(pod.labels.get()))
    return true;
  return false;
}

bool IsTrainer(const std::vector<const PodUid*>& trainers, const PodUid& uid) {
  return std::any_of(trainers.begin(), trainers.end(), [&](const PodUid* t) { return *t == uid; });
}

// Only live pods can be fenced: terminal or terminating pods have (or soon lose) their cgroups.
bool Live(const PodInfo& pod) {
  return !pod.terminating && pod.phase.get() != "Succeeded" && pod.phase.get() != "Failed" &&
         !pod.uid.empty();
}

}  // namespace

NodeResolution ResolveNode(const NodeInfo& node, const std::vector<const PodInfo*>& pods,
                           const std::vector<const FencePolicy*>& policies,
                           const std::map<std::string, Labels>& namespaces, const Rails& rails,
                           const FenceLimits& limits) {
  NodeResolution out;
  out.fence.set_node_name(node.name);

  std::vector<const FencePolicy*> ranked;
  for (const FencePolicy* p : policies) {
    PolicyOnNode& on = out.policies[p->name];
    on.node_matched = p->node_selector.Matches(node.labels);
    if (on.node_matched) ranked.push_back(p);
  }
  std::sort(ranked.begin(), ranked.end(), Outranks);

  std::vector<const PodInfo*> sorted = pods;
  std::sort(sorted.begin(), sorted.end(), [](const PodInfo* a, const PodInfo* b) {
    return std::tie(a->ns.get(), a->name) < std::tie(b->ns.get(), b->name);  // no allocation
  });

  static const Labels kNoLabels;
  auto ns_labels = [&](const std::string& ns) -> const Labels& {
    auto it = namespaces.find(ns);
    return it == namespaces.end() ? kNoLabels : it->second;
  };

  // Pass 1: trainers. The highest-ranked policy whose trainer selectors match takes the pod.
  std::vector<const PodUid*> trainer_uids;  // few per node: a linear search
  std::map<std::string, int> trainers_per_policy;
  std::map<std::string, std::vector<const PodInfo*>> trainer_pods;  // policy → its trainers
  for (const PodInfo* pod : sorted) {
    if (!Live(*pod) || Protected(*pod, rails)) continue;
    const FencePolicy* winner = nullptr;
    for (const FencePolicy* p : ranked) {
      if (!p->trainers.namespace_selector.Matches(ns_labels(pod->ns))) continue;
      if (!p->trainers.pod_selector.Matches(pod->labels.get())) continue;
      // requireGPU: a pod without a GPU never becomes a trainer (it stays a neighbour).
      if (p->trainers.require_gpu && pod->AllGpus() <= 0) continue;
      if (!winner) {
        winner = p;
      } else {
        out.policies[p->name].lost.push_back({pod->Key(), winner->name, p->name});
      }
    }
    if (!winner) continue;
    trainer_uids.push_back(&pod->uid);
    trainers_per_policy[winner->name]++;
    trainer_pods[winner->name].push_back(pod);
    auto* t = out.fence.add_trainers();
    if (!FillPodRef(*pod, t->mutable_pod(), limits.max_containers_per_pod)) {
      CountOverCap(*pod, out.policies[winner->name]);
    }
    t->set_policy(winner->name);
  }

  // Pass 2: neighbours, only for policies that protect at least one trainer on this node —
  // fencing neighbours where nothing needs protection would only cost them.
  for (const PodInfo* pod : sorted) {
    if (!Live(*pod) || Protected(*pod, rails) || IsTrainer(trainer_uids, pod->uid)) continue;
    const FencePolicy* winner = nullptr;
    for (const FencePolicy* p : ranked) {
      if (trainers_per_policy[p->name] == 0) continue;
      const NeighbourSpec& n = p->neighbours;
      if (Contains(n.exclude_namespaces, pod->ns)) continue;
      if (Contains(n.exclude_priority_classes, pod->priority_class)) continue;
      if (!n.pod_selector.Matches(pod->labels.get())) continue;
      if (!winner) {
        winner = p;
      } else {
        out.policies[p->name].lost.push_back({pod->Key(), winner->name, p->name});
      }
    }
    if (!winner) continue;
    PolicyOnNode& on = out.policies[winner->name];
    on.neighbours++;
    if (const PodInfo* t = TrainerInOtherTier(*pod, *winner, trainer_pods[winner->name])) {
      if (on.cross_tier_neighbours++ == 0) {
        on.cross_tier_example = pod->Key() + " (" + std::string(QosClassName(pod->qos)) +
                                ") vs trainer " + t->Key() + " (" +
                                std::string(QosClassName(t->qos)) + ")";
      }
    }
    auto* n = out.fence.add_neighbours();
    if (!FillPodRef(*pod, n->mutable_pod(), limits.max_containers_per_pod)) CountOverCap(*pod, on);
    n->set_policy(winner->name);
  }

  for (const FencePolicy* p : ranked) {
    int t = trainers_per_policy[p->name];
    out.policies[p->name].trainers = t;
    if (t > 0) FillOptions(*p, out.fence.add_policies());
  }

  // Pass 3: every live GPU pod, policy or not, observed (nothing is written for it). The agent's
  // own pods hold no GPU; protected pods are observed too: observing writes nothing.
  for (const PodInfo* pod : sorted) {
    if (!Live(*pod) || pod->AllGpus() <= 0) continue;
    if (static_cast<size_t>(out.fence.observe_size()) >= limits.max_observed_pods) {
      if (limits.max_observed_pods > 0) ++out.gpu_pods_not_observed;
      continue;
    }
    FillPodRef(*pod, out.fence.add_observe(), limits.max_containers_per_pod);
  }
  return out;
}

}  // namespace feedguard::controller
