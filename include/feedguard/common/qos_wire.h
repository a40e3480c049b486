// qos_wire.h — QosClass (qos.h) and its twin on the controller⇄agent wire, feedguard.v1.QosClass
// (proto/feedguard/v1/nodefence.proto): one table that the controller writes a PodRef by and the
// agent reads it back by. For targets that link fg_nodefence_proto.
//
// Example:
//   QosClassToWire(QosClass::kBestEffort)         → v1::BEST_EFFORT
//   QosClassFromWire(v1::GUARANTEED)               → QosClass::kGuaranteed
//   QosClassFromWire(v1::QOS_CLASS_UNSPECIFIED)    → QosClass::kBurstable
#pragma once

#include "feedguard/common/enum_names.h"
#include "feedguard/common/qos.h"
#include "feedguard/v1/nodefence.pb.h"

namespace feedguard {

inline constexpr EnumTable<QosClass, v1::QosClass, 3> kQosClassWire{
    {{QosClass::kGuaranteed, v1::GUARANTEED},
     {QosClass::kBurstable, v1::BURSTABLE},
     {QosClass::kBestEffort, v1::BEST_EFFORT}}};
static_assert(EnumTableComplete(kQosClassWire));

constexpr v1::QosClass QosClassToWire(QosClass q) {
  return ValueOf(kQosClassWire, q, v1::QOS_CLASS_UNSPECIFIED);
}

// QOS_CLASS_UNSPECIFIED, and a value a newer peer sends that this build does not know, read as
// Burstable: the middle tier, neither kubepods itself nor its besteffort child.
constexpr QosClass QosClassFromWire(v1::QosClass q) {
  return KeyOf(kQosClassWire, q).value_or(QosClass::kBurstable);
}

}  // namespace feedguard
