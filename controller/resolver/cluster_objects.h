// cluster_objects.h — the few fields of Pods, Nodes and Namespaces the controller keeps.
//
// The controller watches every pod of the cluster (150k is the design point), so it keeps a
// compact projection of each, built once from the API server's JSON and never the JSON itself.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <concepts>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_set>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "controller/kube/field_set.h"
#include "controller/policy/label_selector.h"
#include "controller/resolver/interned.h"
#include "controller/resolver/label_set.h"
#include "feedguard/common/gpu_resource_names.h"
#include "feedguard/common/qos.h"
#include "feedguard/common/status.h"

namespace feedguard::controller {

// A pod's metadata.uid: 16 bytes for the canonical (lowercase, hyphenated) UUID every API server
// writes, the string itself otherwise. 32 bytes instead of a 36-character heap string.
class PodUid {
 public:
  PodUid() = default;
  // From a uid's text (a std::string_view, std::string or literal); implicit on purpose.
  template <std::convertible_to<std::string_view> Text>
  PodUid(const Text& uid) {
    Assign(uid);
  }
  std::string str() const;
  bool empty() const;
  bool operator==(const PodUid&) const = default;

 private:
  void Assign(std::string_view uid);
  // Canonical: `bytes_`, not all zero (the all-zero UUID is kept as text). Else `other_`.
  std::array<uint8_t, 16> bytes_{};
  SharedString other_;
};

// A container's status.containerStatuses[].containerID. The form every CRI runtime writes,
// "<runtime>://<64 lowercase hex>", is held as the runtime prefix (interned by the reconciler)
// and 32 bytes; anything else as its text. 48 bytes instead of a 77-character heap string.
class ContainerId {
 public:
  ContainerId() = default;
  // From an id's text (a std::string_view, std::string or literal); implicit on purpose.
  template <std::convertible_to<std::string_view> Text>
  ContainerId(const Text& id) {
    Assign(id);
  }
  std::string str() const;
  bool empty() const { return text_.empty(); }
  bool operator==(const ContainerId& o) const = default;
  // Shares the runtime prefix with every other container's ("containerd://"); an id kept as
  // text is left alone (no other container has it).
  void InternPrefix(InternPool<std::string>& pool);

 private:
  void Assign(std::string_view id);
  // Packed (`hex_` not all zero): the prefix up to and including "://". Else the whole id (an
  // id whose 64 digits are all zero is kept as text).
  SharedString text_;
  std::array<uint8_t, 32> hex_{};
};

// The compact projection of a Pod: what the resolver reads, nothing else (no JSON is kept).
// Names that many pods repeat (namespace, node, priority class, phase, container names) are
// SharedStrings, interned by the reconciler.
struct PodContainer {
  SharedString name;
  ContainerId id;  // empty until the container started
  bool operator==(const PodContainer&) const = default;
};

struct PodInfo {
  PodUid uid;
  SharedString ns;
  std::string name;
  SharedString node_name;
  SharedString priority_class;
  SharedString phase;  // Pending | Running | Succeeded | Failed | Unknown
  SharedLabelSet labels;
  std::vector<PodContainer> containers;
  int64_t cpu_request_milli = 0;
  int64_t cpu_limit_milli = 0;  // 0 when any container has no limit
  // Limits of the GPU resources (GpuResourceNames: nvidia.com/gpu, nvidia.com/gpu.shared,
  // nvidia.com/mig-*, amd.com/gpu, gpu.intel.com/{i915,xe} by default), summed over containers.
  int32_t gpus = 0;
  // DRA: the ResourceClaims (in the pod's namespace) it uses — spec.resourceClaims[]
  // .resourceClaimName, and status.resourceClaimStatuses[].resourceClaimName for the claims made
  // from its templates — and the GPU devices allocated to them (ClusterCache fills claim_gpus from
  // the claims: ClaimFromJson).
  std::vector<std::string> claims;
  int32_t claim_gpus = 0;
  QosClass qos = QosClass::kBestEffort;
  bool terminating = false;

  // Its GPUs, from device plugins and DRA claims alike: what requireGPU and observation go by.
  int32_t AllGpus() const {
    return static_cast<int32_t>(std::min<int64_t>(int64_t{gpus} + claim_gpus, INT32_MAX));
  }

  std::string Key() const { return ns.get() + "/" + name; }
  bool operator==(const PodInfo&) const = default;
};

// A ResourceClaim as far as GPUs go: how many of its allocated devices come from a GPU driver
// (--gpu-dra-drivers). 0 until it is allocated.
struct ClaimInfo {
  std::string ns;
  std::string name;
  int32_t gpus = 0;
};

struct NodeInfo {
  std::string name;
  Labels labels;
};

struct NamespaceInfo {
  std::string name;
  Labels labels;
};

// The fields of a Pod / Node the records below read, plus what an informer needs (name,
// namespace, resourceVersion): the informers parse nothing else of these objects (a Node's
// image list, a Pod's volumes, env, probes, conditions, managedFields never reach memory).
// Kept beside the parsers so that a field read there is a field listed here; tested by
// comparing the records of full and trimmed objects (cluster_objects_test, fuzz).
std::shared_ptr<const kube::FieldSet> PodFields();
// A Pod in the API server's protobuf encoding (one item of a PodList, proto/kubernetes/core/v1/
// pod.proto) made into the JSON the pod's JSON trimmed to PodFields() is: the same members,
// omitted where the JSON omits them. A discarded Json when the bytes do not parse.
nlohmann::json PodJsonFromProtobuf(std::string_view bytes);
std::shared_ptr<const kube::FieldSet> NodeFields();
std::shared_ptr<const kube::FieldSet> ClaimFields();

// Kubernetes CPU quantity ("250m", "2", "1.5", "0.1") → millicores.
Result<int64_t> ParseCpuMilli(const std::string& quantity);

// `gpu_names`: which extended resources count as GPUs (PodInfo::gpus); default
// GpuResourceNames::Defaults().
PodInfo PodFromJson(const nlohmann::json& pod);
PodInfo PodFromJson(const nlohmann::json& pod, const GpuResourceNames& gpu_names);
NodeInfo NodeFromJson(const nlohmann::json& node);
// `gpu_drivers`: the DRA drivers whose devices are GPUs (ParseDraDrivers).
ClaimInfo ClaimFromJson(const nlohmann::json& claim, const std::vector<std::string>& gpu_drivers);
NamespaceInfo NamespaceFromJson(const nlohmann::json& ns);

}  // namespace feedguard::controller
