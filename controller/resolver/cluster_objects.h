// cluster_objects.h — the few fields of Pods, Nodes and Namespaces the controller keeps.
//
// The controller watches every pod of the cluster (150k is the design point), so it keeps a
// compact projection of each, built once from the API server's JSON and never the JSON itself.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "controller/kube/field_set.h"
#include "controller/policy/label_selector.h"
#include "feedguard/common/gpu_resource_names.h"
#include "feedguard/common/status.h"

namespace feedguard::controller {

enum class PodQos { kGuaranteed, kBurstable, kBestEffort };

struct PodContainer {
  std::string name;
  std::string id;  // "containerd://…"; empty until the container started
  bool operator==(const PodContainer&) const = default;
};

// An immutable label set that pods share: the replicas of one ReplicaSet, Job or StatefulSet
// carry the same labels, and LabelSetPool hands them one map (a Deployment pod's six labels are
// ~800 bytes as a map of their own). Reads as `const Labels&`.
class SharedLabels {
 public:
  SharedLabels() = default;
  SharedLabels(Labels labels)  // NOLINT(google-explicit-constructor): a Labels is a label set
      : p_(labels.empty() ? nullptr : std::make_shared<const Labels>(std::move(labels))) {}
  operator const Labels&() const { return get(); }  // NOLINT(google-explicit-constructor)
  const Labels& get() const;
  bool operator==(const SharedLabels& o) const { return p_ == o.p_ || get() == o.get(); }

 private:
  friend class LabelSetPool;
  std::shared_ptr<const Labels> p_;  // null: no labels
};

// Interns label sets so equal ones share one map. Not thread-safe (the reconciler calls it
// under its lock). Sets no pod uses any more are dropped when the pool has doubled since the
// last sweep.
class LabelSetPool {
 public:
  SharedLabels Intern(SharedLabels labels);

 private:
  struct Hash {
    size_t operator()(const std::shared_ptr<const Labels>& l) const;
  };
  struct Eq {
    bool operator()(const std::shared_ptr<const Labels>& a,
                    const std::shared_ptr<const Labels>& b) const {
      return *a == *b;
    }
  };
  std::unordered_set<std::shared_ptr<const Labels>, Hash, Eq> sets_;
  size_t sweep_at_ = 1024;
};

// The compact projection of a Pod: what the resolver reads, nothing else (no JSON is kept).
struct PodInfo {
  std::string uid;
  std::string ns;
  std::string name;
  std::string node_name;
  std::string priority_class;
  std::string phase;  // Pending | Running | Succeeded | Failed | Unknown
  SharedLabels labels;
  PodQos qos = PodQos::kBestEffort;
  std::vector<PodContainer> containers;
  int64_t cpu_request_milli = 0;
  int64_t cpu_limit_milli = 0;  // 0 when any container has no limit
  // Limits of the GPU resources (GpuResourceNames: nvidia.com/gpu, nvidia.com/gpu.shared,
  // nvidia.com/mig-*, amd.com/gpu, gpu.intel.com/{i915,xe} by default), summed over containers.
  int32_t gpus = 0;
  bool terminating = false;

  std::string Key() const { return ns + "/" + name; }
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
