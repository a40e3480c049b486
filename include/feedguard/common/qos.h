// qos.h — Kubernetes' pod QoS classes, one spelling for the controller and the agent.
//
// The controller reads a pod's class from status.qosClass; the agent finds kubelet's cgroup tier
// by it. Both spell it here; the parse is derived from the names (no second table to keep in
// step).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace feedguard {

enum class QosClass : uint8_t { kGuaranteed, kBurstable, kBestEffort };

// Kubernetes' spelling: "Guaranteed" | "Burstable" | "BestEffort".
constexpr std::string_view QosClassName(QosClass q) {
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

// The class Kubernetes spells `name`; nullopt for any other string.
constexpr std::optional<QosClass> QosClassFromName(std::string_view name) {
  for (QosClass q : {QosClass::kGuaranteed, QosClass::kBurstable, QosClass::kBestEffort}) {
    if (QosClassName(q) == name) return q;
  }
  return std::nullopt;
}

}  // namespace feedguard
