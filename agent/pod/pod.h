// pod.h — the agent's pod vocabulary, shared by the planner, the cgroup layer and the enforcer:
// enough of a pod to find its cgroups (QoS class, container ids) and to name it in reports, and a
// version-neutral CPU quota. Pure data; it depends on nothing else in the agent.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "feedguard/common/qos.h"

namespace feedguard::agent {

// The QoS classes and their spelling are shared with the controller (feedguard/common/qos.h).
using ::feedguard::QosClass;
using ::feedguard::QosClassName;

// Enough of a pod to find its cgroups and name it in reports.
struct PodIdentity {
  std::string uid;
  std::string ns;
  std::string name;
  QosClass qos = QosClass::kBurstable;
  // As in Pod status: "containerd://<id>", "cri-o://<id>".
  std::vector<std::string> container_ids;
  int64_t cpu_request_milli = 0;
  int64_t cpu_limit_milli = 0;  // 0 = none
  std::string priority_class;   // spec.priorityClassName; rails refuse system-*-critical
};

// The rail no plan overrides (docs/DESIGN.md §3): pods feedguard never writes and never plans
// for — the agent's own pod, pods of a system-*-critical priority class and, a conservative extra
// (kube-system also runs pods without a critical class, e.g. CNI helpers, that a node cannot
// lose), every pod of a protected namespace. The planner gives such a pod no core even when a
// fence names it a trainer; the enforcer refuses to write it (ProtectedPod).
//
// Example:
//   PodRails rails;                 // the defaults below
//   rails.self_pod_uid = "1f0c…";   // the agent's own pod (downward API)
//   if (rails.Protects(pod)) …      // never pinned, never written
struct PodRails {
  std::string self_pod_uid;  // "" = unknown
  std::vector<std::string> priority_classes = {"system-node-critical", "system-cluster-critical"};
  std::vector<std::string> namespaces = {"kube-system"};

  bool Protects(const PodIdentity& pod) const {
    if (!self_pod_uid.empty() && pod.uid == self_pod_uid) return true;
    if (!pod.priority_class.empty() && std::find(priority_classes.begin(), priority_classes.end(),
                                                 pod.priority_class) != priority_classes.end()) {
      return true;
    }
    return std::find(namespaces.begin(), namespaces.end(), pod.ns) != namespaces.end();
  }
};

struct CpuQuota {
  int64_t quota_us = -1;  // -1 = unlimited ("max")
  int64_t period_us = 100000;
};

}  // namespace feedguard::agent
