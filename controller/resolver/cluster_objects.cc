#include "controller/resolver/cluster_objects.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>

#include <nlohmann/json.hpp>

namespace feedguard::controller {
namespace {

std::string Str(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return "";
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

const nlohmann::json& Obj(const nlohmann::json& j, const char* key) {
  static const nlohmann::json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

// Bounds that keep every sum below int64/int32 overflow whatever a pod spec says.
constexpr int64_t kMaxCpuCores = 1'000'000'000;
constexpr int64_t kMaxGpusPerContainer = 1024;

int64_t SaturatingAdd(int64_t a, int64_t b) {
  int64_t r = 0;
  return __builtin_add_overflow(a, b, &r) ? INT64_MAX : r;
}

bool IsGpuResource(const std::string& name) {
  return name == "nvidia.com/gpu" || name.rfind("nvidia.com/mig-", 0) == 0;
}

}  // namespace

Result<int64_t> ParseCpuMilli(const std::string& q) {
  if (q.empty()) return InvalidArgument("empty CPU quantity");
  if (q.back() == 'm') {
    int64_t v = 0;
    auto [p, ec] = std::from_chars(q.data(), q.data() + q.size() - 1, v);
    if (ec != std::errc() || p != q.data() + q.size() - 1 || v < 0 || v > kMaxCpuCores * 1000) {
      return InvalidArgument("bad CPU quantity \"" + q + "\"");
    }
    return v;
  }
  double v = 0;
  auto [p, ec] = std::from_chars(q.data(), q.data() + q.size(), v);
  // from_chars also reads "inf" and "nan"; and a huge value would overflow int64 millicores
  // (undefined behaviour): no node has a billion cores.
  if (ec != std::errc() || p != q.data() + q.size() || !std::isfinite(v) || v < 0 ||
      v > kMaxCpuCores) {
    return InvalidArgument("bad CPU quantity \"" + q + "\"");
  }
  // Kubernetes rounds fractional millicores up.
  return static_cast<int64_t>(std::ceil(v * 1000.0 - 1e-9));
}

PodInfo PodFromJson(const nlohmann::json& pod) {
  PodInfo p;
  const auto& meta = Obj(pod, "metadata");
  const auto& spec = Obj(pod, "spec");
  const auto& status = Obj(pod, "status");
  p.uid = Str(meta, "uid");
  p.ns = Str(meta, "namespace");
  p.name = Str(meta, "name");
  p.labels = LabelsFromJson(Obj(meta, "labels"));
  p.terminating = !Obj(meta, "deletionTimestamp").is_null();
  p.node_name = Str(spec, "nodeName");
  p.priority_class = Str(spec, "priorityClassName");
  p.phase = Str(status, "phase");

  bool every_limited = true, any_resources = false, guaranteed = true;
  int64_t gpus = 0;
  const auto& containers = Obj(spec, "containers");
  if (containers.is_array()) {
    for (const auto& c : containers) {
      p.containers.push_back({Str(c, "name"), ""});
      const auto& res = Obj(c, "resources");
      const auto& req = Obj(res, "requests");
      const auto& lim = Obj(res, "limits");
      // A request defaults to the limit when only the limit is given.
      std::string rq = Str(req, "cpu"), lm = Str(lim, "cpu");
      if (rq.empty()) rq = lm;
      int64_t rq_m = 0, lm_m = 0;
      if (auto v = ParseCpuMilli(rq); !rq.empty() && v.ok()) rq_m = *v;
      if (auto v = ParseCpuMilli(lm); !lm.empty() && v.ok()) lm_m = *v;
      p.cpu_request_milli = SaturatingAdd(p.cpu_request_milli, rq_m);
      p.cpu_limit_milli = SaturatingAdd(p.cpu_limit_milli, lm_m);
      if (lm_m == 0) every_limited = false;
      if (!rq.empty() || !lm.empty() || !Str(req, "memory").empty() || !Str(lim, "memory").empty())
        any_resources = true;
      // Guaranteed: every container has cpu and memory limits equal to their requests.
      std::string rm = Str(req, "memory"), lmem = Str(lim, "memory");
      if (rm.empty()) rm = lmem;
      if (lm_m == 0 || rq_m != lm_m || lmem.empty() || rm != lmem) guaranteed = false;
      if (lim.is_object()) {
        for (auto& [name, v] : lim.items()) {
          if (!IsGpuResource(name)) continue;
          int64_t n = 0;
          if (v.is_string()) {
            const std::string t = v.get<std::string>();
            auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), n);
            if (ec != std::errc() || end != t.data() + t.size()) n = 0;
          } else if (v.is_number_integer() && !v.is_number_unsigned()) {
            n = v.get<int64_t>();
          } else if (v.is_number_unsigned()) {
            n = kMaxGpusPerContainer;
          }
          gpus = SaturatingAdd(gpus, std::clamp<int64_t>(n, 0, kMaxGpusPerContainer));
        }
      }
    }
  }
  if (!every_limited) p.cpu_limit_milli = 0;
  p.gpus = static_cast<int32_t>(std::min<int64_t>(gpus, INT32_MAX));
  std::string qos = Str(status, "qosClass");
  if (qos == "Guaranteed")
    p.qos = PodQos::kGuaranteed;
  else if (qos == "Burstable")
    p.qos = PodQos::kBurstable;
  else if (qos == "BestEffort")
    p.qos = PodQos::kBestEffort;
  else
    p.qos = !any_resources ? PodQos::kBestEffort
            : guaranteed   ? PodQos::kGuaranteed
                           : PodQos::kBurstable;

  const auto& statuses = Obj(status, "containerStatuses");
  if (statuses.is_array()) {
    for (const auto& s : statuses) {
      std::string name = Str(s, "name"), id = Str(s, "containerID");
      for (auto& c : p.containers)
        if (c.name == name) c.id = id;
    }
  }
  return p;
}

NodeInfo NodeFromJson(const nlohmann::json& node) {
  const auto& meta = Obj(node, "metadata");
  return {Str(meta, "name"), LabelsFromJson(Obj(meta, "labels"))};
}

NamespaceInfo NamespaceFromJson(const nlohmann::json& ns) {
  const auto& meta = Obj(ns, "metadata");
  return {Str(meta, "name"), LabelsFromJson(Obj(meta, "labels"))};
}

}  // namespace feedguard::controller
