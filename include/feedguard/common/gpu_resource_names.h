// gpu_resource_names.h — what is a GPU: the device-plugin resource names and the DRA drivers, in
// one place.
//
// A pod gets a GPU through a device plugin's extended resource (container limits, and the same
// names in kubelet's PodResources `devices[].resource_name`) or through a DRA ResourceClaim
// (PodResources `dynamic_resources`, see agent/topology/podresources_client.h). The names:
//   nvidia.com/gpu         NVIDIA device plugin: a whole GPU, or a time-sliced / MPS replica
//                          ("<uuid>::<n>") when sharing is configured without renaming;
//   nvidia.com/gpu.shared  the same replicas when sharing is configured with renameByDefault
//                          (time-slicing or MPS, GPU Operator / device plugin ≥ 0.12);
//   nvidia.com/mig-<profile>  MIG slices under the "mixed" strategy (e.g. nvidia.com/mig-1g.5gb);
//   amd.com/gpu            AMD's device plugin;
//   gpu.intel.com/i915, gpu.intel.com/xe  Intel's GPU plugin (i915 and xe kernel drivers).
// A configured list entry ending in '-' or '*' is a prefix ("nvidia.com/mig-", "nvidia.com/mig-*");
// any other entry is an exact name. The controller counts a pod's GPUs from these (trainer
// selection: requireGPU); the agent reads the NVIDIA ones from PodResources (its locality data
// are NVIDIA's: /proc/driver/nvidia, PCI vendor 0x10de).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace feedguard {

// The default list, as the controller's --gpu-resource-names and the chart's
// controller.gpuResourceNames spell it.
inline constexpr std::string_view kDefaultGpuResourceNames =
    "nvidia.com/gpu,nvidia.com/gpu.shared,nvidia.com/mig-,amd.com/gpu,gpu.intel.com/i915,"
    "gpu.intel.com/xe";
// The NVIDIA subset the agent asks kubelet about.
inline constexpr std::string_view kNvidiaGpuResourceNames =
    "nvidia.com/gpu,nvidia.com/gpu.shared,nvidia.com/mig-";

// Calls `entry` with each entry of a comma-separated list, blanks around it trimmed, empty ones
// skipped; stops at (and returns) the first false.
template <typename F>
bool ForEachListEntry(std::string_view list, F entry) {
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t comma = list.find(',', pos);
    if (comma == std::string_view::npos) comma = list.size();
    std::string_view e = list.substr(pos, comma - pos);
    pos = comma + 1;
    while (!e.empty() && (e.front() == ' ' || e.front() == '\t')) e.remove_prefix(1);
    while (!e.empty() && (e.back() == ' ' || e.back() == '\t')) e.remove_suffix(1);
    if (!e.empty() && !entry(e)) return false;
  }
  return true;
}

struct GpuResourceNames {
  std::vector<std::string> exact;
  std::vector<std::string> prefixes;

  bool Matches(std::string_view name) const {
    for (const auto& e : exact) {
      if (name == e) return true;
    }
    for (const auto& p : prefixes) {
      if (name.substr(0, p.size()) == p) return true;
    }
    return false;
  }

  // Parses a comma-separated list (blanks around entries ignored, empty entries skipped). An
  // entry is a resource name, "<domain>/<name>"; one ending in '-' or '*' is a prefix (the '*' is
  // dropped). Returns false, with `error` set, for an entry without a '/' or with a blank inside.
  static bool Parse(std::string_view list, GpuResourceNames* out, std::string* error) {
    GpuResourceNames names;
    const bool ok = ForEachListEntry(list, [&](std::string_view e) {
      const auto slash = e.find('/');
      if (slash == std::string_view::npos || slash == 0 || slash + 1 == e.size() ||
          e.find_first_of(" \t") != std::string_view::npos) {
        *error = "GPU resource name \"" + std::string(e) +
                 "\" is not <domain>/<name> (a trailing - or * makes it a prefix)";
        return false;
      }
      if (e.back() == '*') {
        names.prefixes.emplace_back(e.substr(0, e.size() - 1));
      } else if (e.back() == '-') {
        names.prefixes.emplace_back(e);
      } else {
        names.exact.emplace_back(e);
      }
      return true;
    });
    if (ok) *out = std::move(names);
    return ok;
  }

  static GpuResourceNames Defaults() {
    GpuResourceNames n;
    std::string ignored;
    Parse(kDefaultGpuResourceNames, &n, &ignored);
    return n;
  }
};

// DRA: the drivers whose allocated devices are GPUs (a ResourceClaim's
// status.allocation.devices.results[].driver; resource.k8s.io/v1, GA in Kubernetes 1.34):
//   gpu.nvidia.com  NVIDIA's DRA driver for GPUs, whole GPUs and MIG devices alike
//                   (compute-domain.nvidia.com, its ComputeDomain channels, are not GPUs);
//   gpu.amd.com     AMD's; gpu.intel.com  Intel's.
// The controller's --gpu-dra-drivers and the chart's controller.gpuDraDrivers spell the list.
inline constexpr std::string_view kDefaultGpuDraDrivers =
    "gpu.nvidia.com,gpu.amd.com,gpu.intel.com";

// Parses a comma-separated list of DRA driver names (blanks around entries ignored, empty
// entries skipped; an empty list turns DRA counting off). A driver name is a DNS subdomain:
// lowercase letters, digits, '-' and '.'. Returns false, with `error` set, for anything else.
inline bool ParseDraDrivers(std::string_view list, std::vector<std::string>* out,
                            std::string* error) {
  std::vector<std::string> drivers;
  const bool ok = ForEachListEntry(list, [&](std::string_view e) {
    bool dns = e.size() <= 253 && e.front() != '.' && e.front() != '-' && e.back() != '.' &&
               e.back() != '-';
    for (char c : e) {
      dns = dns && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.');
    }
    if (!dns) {
      *error = "DRA driver name \"" + std::string(e) +
               "\" is not a DNS subdomain (lowercase letters, digits, '-' and '.')";
      return false;
    }
    drivers.emplace_back(e);
    return true;
  });
  if (ok) *out = std::move(drivers);
  return ok;
}

}  // namespace feedguard
