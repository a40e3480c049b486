// pod.h — the agent's pod vocabulary, shared by the planner, the cgroup layer and the enforcer:
// enough of a pod to find its cgroups (QoS class, container ids) and to name it in reports, and a
// version-neutral CPU quota. Pure data; it depends on nothing else in the agent.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace feedguard::agent {

enum class QosClass { kGuaranteed, kBurstable, kBestEffort };

// Kubernetes' spelling of a QoS class: "Guaranteed" | "Burstable" | "BestEffort".
inline std::string_view QosClassName(QosClass q) {
  switch (q) {
    case QosClass::kGuaranteed:
      return "Guaranteed";
    case QosClass::kBurstable:
      return "Burstable";
    case QosClass::kBestEffort:
      return "BestEffort";
  }
  return "Unknown";
}

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

struct CpuQuota {
  int64_t quota_us = -1;  // -1 = unlimited ("max")
  int64_t period_us = 100000;
};

}  // namespace feedguard::agent
