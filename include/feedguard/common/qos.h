// qos.h — Kubernetes' pod QoS classes, one spelling for the controller and the agent.
//
// The controller reads a pod's class from status.qosClass; the agent finds kubelet's cgroup tier
// by it. Both spell it here, in one table that the name and the parse both read.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "feedguard/common/enum_names.h"

namespace feedguard {

enum class QosClass : uint8_t { kGuaranteed, kBurstable, kBestEffort };

// Kubernetes' spelling: "Guaranteed" | "Burstable" | "BestEffort".
inline constexpr EnumNames<QosClass, 3> kQosClassNames{{{QosClass::kGuaranteed, "Guaranteed"},
                                                        {QosClass::kBurstable, "Burstable"},
                                                        {QosClass::kBestEffort, "BestEffort"}}};
static_assert(EnumTableComplete(kQosClassNames));

constexpr std::string_view QosClassName(QosClass q) { return NameOf(kQosClassNames, q, "Unknown"); }

// The class Kubernetes spells `name`; nullopt for any other string.
constexpr std::optional<QosClass> QosClassFromName(std::string_view name) {
  return FromName(kQosClassNames, name);
}

}  // namespace feedguard
