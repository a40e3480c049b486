// cluster_objects.h — the few fields of Pods, Nodes and Namespaces the controller keeps.
//
// The controller watches every pod of the cluster (150k is the design point), so it keeps a
// compact projection of each, built once from the API server's JSON and never the JSON itself.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
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
#include "feedguard/common/gpu_resource_names.h"
#include "feedguard/common/qos.h"
#include "feedguard/common/status.h"

namespace feedguard::controller {

// An immutable value that records share: the replicas of one ReplicaSet, Job or StatefulSet
// carry the same labels (a Deployment pod's six labels are ~800 bytes as a map of their own),
// and 150,000 pods name a few thousand nodes and namespaces, a handful of priority classes and
// phases. InternPool hands equal values one copy. One pointer (8 bytes; a pod record holds
// seven) to the value and its reference count, counted atomically as a shared_ptr's is; reads
// as `const T&`. An empty value holds nothing.
template <class T>
class Shared {
 public:
  Shared() = default;
  Shared(T value)  // NOLINT(google-explicit-constructor): a T is a value to share
      : n_(value.empty() ? nullptr : new Node(std::move(value))) {}
  // Strings from literals (tests, constants).
  Shared(const char* s)  // NOLINT(google-explicit-constructor)
      requires std::is_same_v<T, std::string> : Shared(T(s)) {}
  Shared(const Shared& o) noexcept : n_(o.n_) {
    if (n_ != nullptr) n_->refs.fetch_add(1, std::memory_order_relaxed);
  }
  Shared(Shared&& o) noexcept : n_(std::exchange(o.n_, nullptr)) {}
  Shared& operator=(Shared o) noexcept {
    std::swap(n_, o.n_);
    return *this;
  }
  ~Shared() {
    // As shared_ptr: the last owner's release is ordered after every other owner's use.
    if (n_ != nullptr && n_->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete n_;
  }

  operator const T&() const { return get(); }  // NOLINT(google-explicit-constructor)
  const T& get() const { return n_ != nullptr ? n_->value : Empty(); }
  bool empty() const { return n_ == nullptr; }
  bool operator==(const Shared& o) const { return n_ == o.n_ || get() == o.get(); }
  bool operator==(const T& v) const { return get() == v; }
  bool operator==(const char* s) const requires std::is_same_v<T, std::string> {
    return get() == s;
  }

 private:
  template <class>
  friend class InternPool;
  struct Node {
    explicit Node(T v) : value(std::move(v)) {}
    std::atomic<size_t> refs{1};
    const T value;
  };
  size_t use_count() const { return n_ != nullptr ? n_->refs.load(std::memory_order_acquire) : 0; }
  static const T& Empty() {
    static const T kEmpty;  // an immutable constant, not state
    return kEmpty;
  }
  Node* n_ = nullptr;
};
using SharedLabels = Shared<Labels>;
using SharedString = Shared<std::string>;

size_t InternHash(const Labels& labels);
size_t InternHash(const std::string& s);

// Interns values so equal ones share one copy. Not thread-safe (the reconciler calls it under
// its lock). Values no record uses any more are dropped when the pool has doubled since the last
// sweep.
template <class T>
class InternPool {
 public:
  Shared<T> Intern(Shared<T> value) {
    if (value.empty()) return value;
    auto [it, inserted] = values_.insert(std::move(value));
    Shared<T> out = *it;
    if (inserted && values_.size() >= sweep_at_) {
      // Only the pool holds a value no record uses (count 1); `out` holds the new one.
      std::erase_if(values_, [](const Shared<T>& v) { return v.use_count() == 1; });
      sweep_at_ = std::max<size_t>(1024, 2 * values_.size());
    }
    return out;
  }
  size_t size() const { return values_.size(); }

 private:
  struct Hash {
    size_t operator()(const Shared<T>& v) const { return InternHash(v.get()); }
  };
  struct Eq {
    bool operator()(const Shared<T>& a, const Shared<T>& b) const { return a.get() == b.get(); }
  };
  std::unordered_set<Shared<T>, Hash, Eq> values_;
  size_t sweep_at_ = 1024;
};
using LabelSetPool = InternPool<Labels>;

// A pod's metadata.uid: 16 bytes for the canonical (lowercase, hyphenated) UUID every API server
// writes, the string itself otherwise. 32 bytes instead of a 36-character heap string.
class PodUid {
 public:
  PodUid() = default;
  PodUid(std::string_view uid);   // NOLINT(google-explicit-constructor): a uid's text
  PodUid(const std::string& uid)  // NOLINT(google-explicit-constructor)
      : PodUid(std::string_view(uid)) {}
  PodUid(const char* uid)  // NOLINT(google-explicit-constructor)
      : PodUid(std::string_view(uid)) {}
  std::string str() const;
  bool empty() const;
  bool operator==(const PodUid&) const = default;

 private:
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
  ContainerId(std::string_view id);   // NOLINT(google-explicit-constructor): an id's text
  ContainerId(const std::string& id)  // NOLINT(google-explicit-constructor)
      : ContainerId(std::string_view(id)) {}
  ContainerId(const char* id)  // NOLINT(google-explicit-constructor)
      : ContainerId(std::string_view(id)) {}
  std::string str() const;
  bool empty() const { return text_.empty(); }
  bool operator==(const ContainerId& o) const = default;
  // Shares the runtime prefix with every other container's ("containerd://"); an id kept as
  // text is left alone (no other container has it).
  void InternPrefix(InternPool<std::string>& pool);

 private:
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
  SharedLabels labels;
  std::vector<PodContainer> containers;
  int64_t cpu_request_milli = 0;
  int64_t cpu_limit_milli = 0;  // 0 when any container has no limit
  // Limits of the GPU resources (GpuResourceNames: nvidia.com/gpu, nvidia.com/gpu.shared,
  // nvidia.com/mig-*, amd.com/gpu, gpu.intel.com/{i915,xe} by default), summed over containers.
  int32_t gpus = 0;
  QosClass qos = QosClass::kBestEffort;
  bool terminating = false;

  std::string Key() const { return ns.get() + "/" + name; }
  bool operator==(const PodInfo&) const = default;
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
std::shared_ptr<const kube::FieldSet> NodeFields();

// Kubernetes CPU quantity ("250m", "2", "1.5", "0.1") → millicores.
Result<int64_t> ParseCpuMilli(const std::string& quantity);

// `gpu_names`: which extended resources count as GPUs (PodInfo::gpus); default
// GpuResourceNames::Defaults().
PodInfo PodFromJson(const nlohmann::json& pod);
PodInfo PodFromJson(const nlohmann::json& pod, const GpuResourceNames& gpu_names);
NodeInfo NodeFromJson(const nlohmann::json& node);
NamespaceInfo NamespaceFromJson(const nlohmann::json& ns);

}  // namespace feedguard::controller
