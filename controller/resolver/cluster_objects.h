// cluster_objects.h — the few fields of Pods, Nodes and Namespaces the controller keeps.
//
// The controller watches every pod of the cluster (150k is the design point), so it keeps a
// compact projection of each, built once from the API server's JSON and never the JSON itself.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "controller/policy/label_selector.h"
#include "feedguard/common/gpu_resource_names.h"
#include "feedguard/common/status.h"

namespace feedguard::controller {

enum class PodQos { kGuaranteed, kBurstable, kBestEffort };

struct PodContainer {
  std::string name;
  std::string id;  // "containerd://…"; empty until the container started
};

struct PodInfo {
  std::string uid;
  std::string ns;
  std::string name;
  std::string node_name;
  std::string priority_class;
  std::string phase;  // Pending | Running | Succeeded | Failed | Unknown
  Labels labels;
  PodQos qos = PodQos::kBestEffort;
  std::vector<PodContainer> containers;
  int64_t cpu_request_milli = 0;
  int64_t cpu_limit_milli = 0;  // 0 when any container has no limit
  // Limits of the GPU resources (GpuResourceNames: nvidia.com/gpu, nvidia.com/gpu.shared,
  // nvidia.com/mig-*, amd.com/gpu, gpu.intel.com/{i915,xe} by default), summed over containers.
  int32_t gpus = 0;
  bool terminating = false;

  std::string Key() const { return ns + "/" + name; }
};

struct NodeInfo {
  std::string name;
  Labels labels;
};

struct NamespaceInfo {
  std::string name;
  Labels labels;
};

// Kubernetes CPU quantity ("250m", "2", "1.5", "0.1") → millicores.
Result<int64_t> ParseCpuMilli(const std::string& quantity);

// `gpu_names`: which extended resources count as GPUs (PodInfo::gpus); default
// GpuResourceNames::Defaults().
PodInfo PodFromJson(const nlohmann::json& pod);
PodInfo PodFromJson(const nlohmann::json& pod, const GpuResourceNames& gpu_names);
NodeInfo NodeFromJson(const nlohmann::json& node);
NamespaceInfo NamespaceFromJson(const nlohmann::json& ns);

}  // namespace feedguard::controller
