#include "controller/policy/fence_policy.h"

#include <algorithm>
#include <charconv>

#include <nlohmann/json.hpp>

namespace feedguard::controller {
namespace {

const nlohmann::json& Child(const nlohmann::json& j, const char* key) {
  static const nlohmann::json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

template <typename Enum>
std::optional<Enum> EnumFrom(const std::string& s,
                             std::initializer_list<std::pair<const char*, Enum>> table) {
  for (const auto& [name, value] : table)
    if (s == name) return value;
  return std::nullopt;
}

// Reads an optional string enum; absent → keeps the default.
template <typename Enum>
void ReadEnum(const nlohmann::json& j, const char* key, const std::string& field, Enum* out,
              std::initializer_list<std::pair<const char*, Enum>> table,
              std::vector<FieldError>* errors) {
  const auto& v = Child(j, key);
  if (v.is_null()) return;
  std::string allowed;
  for (const auto& [name, value] : table)
    allowed += (allowed.empty() ? "" : ", ") + std::string(name);
  if (!v.is_string()) {
    errors->push_back({field, "must be one of " + allowed});
    return;
  }
  if (auto e = EnumFrom(v.get<std::string>(), table)) {
    *out = *e;
  } else {
    errors->push_back({field, "\"" + v.get<std::string>() + "\" is not one of " + allowed});
  }
}

void ReadInt(const nlohmann::json& j, const char* key, const std::string& field, int32_t* out,
             std::vector<FieldError>* errors) {
  const auto& v = Child(j, key);
  if (v.is_null()) return;
  if (!v.is_number_integer()) {
    errors->push_back({field, "must be an integer"});
    return;
  }
  *out = v.get<int32_t>();
}

void ReadSelector(const nlohmann::json& j, const char* key, const std::string& field,
                  LabelSelector* out, std::vector<FieldError>* errors) {
  auto s = LabelSelector::FromJson(Child(j, key), field);
  if (s.ok()) {
    *out = std::move(s).value();
  } else {
    // The selector's own message already starts with the field path.
    const std::string& m = s.status().message();
    auto colon = m.find(": ");
    errors->push_back(colon == std::string::npos
                          ? FieldError{field, m}
                          : FieldError{m.substr(0, colon), m.substr(colon + 2)});
  }
}

void ReadStrings(const nlohmann::json& j, const char* key, const std::string& field,
                 std::vector<std::string>* out, std::vector<FieldError>* errors) {
  const auto& v = Child(j, key);
  if (v.is_null()) return;
  if (!v.is_array()) {
    errors->push_back({field, "must be a list of strings"});
    return;
  }
  for (const auto& s : v) {
    if (!s.is_string()) {
      errors->push_back({field, "must be a list of strings"});
      return;
    }
    out->push_back(s.get<std::string>());
  }
}

}  // namespace

bool FencePolicy::HasFinalizer() const {
  return std::find(finalizers.begin(), finalizers.end(), kFencePolicyFinalizer) != finalizers.end();
}

Result<int32_t> ParsePercent(const nlohmann::json& value, const std::string& field) {
  if (value.is_number_integer()) {
    int v = value.get<int>();
    if (v < 1 || v > 100) return InvalidArgument(field + ": must be between 1% and 100%");
    return v;
  }
  if (!value.is_string()) return InvalidArgument(field + ": must be a percentage such as \"75%\"");
  std::string s = value.get<std::string>();
  if (s.empty() || s.back() != '%') {
    return InvalidArgument(field + ": \"" + s + "\" must be a percentage such as \"75%\"");
  }
  int v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size() - 1, v);
  if (ec != std::errc() || p != s.data() + s.size() - 1 || v < 1 || v > 100) {
    return InvalidArgument(field + ": \"" + s + "\" must be between 1% and 100%");
  }
  return v;
}

ParsedPolicy ParseFencePolicy(const nlohmann::json& object) {
  ParsedPolicy out;
  FencePolicy& p = out.policy;
  auto& errors = out.errors;
  const auto& meta = Child(object, "metadata");
  p.name = Child(meta, "name").is_string() ? Child(meta, "name").get<std::string>() : "";
  p.uid = Child(meta, "uid").is_string() ? Child(meta, "uid").get<std::string>() : "";
  p.resource_version = Child(meta, "resourceVersion").is_string()
                           ? Child(meta, "resourceVersion").get<std::string>()
                           : "";
  p.generation =
      Child(meta, "generation").is_number_integer() ? Child(meta, "generation").get<int64_t>() : 0;
  p.deleting = !Child(meta, "deletionTimestamp").is_null();
  ReadStrings(meta, "finalizers", "metadata.finalizers", &p.finalizers, &errors);

  const auto& spec = Child(object, "spec");
  ReadInt(spec, "priority", "spec.priority", &p.priority, &errors);
  ReadEnum(spec, "mode", "spec.mode", &p.mode,
           {{"Enforce", PolicyMode::kEnforce}, {"DryRun", PolicyMode::kDryRun}}, &errors);
  ReadSelector(spec, "nodeSelector", "spec.nodeSelector", &p.node_selector, &errors);

  const auto& tr = Child(spec, "trainers");
  ReadSelector(tr, "namespaceSelector", "spec.trainers.namespaceSelector",
               &p.trainers.namespace_selector, &errors);
  ReadSelector(tr, "podSelector", "spec.trainers.podSelector", &p.trainers.pod_selector, &errors);
  const auto& cpu = Child(tr, "cpu");
  ReadInt(cpu, "coresPerGPU", "spec.trainers.cpu.coresPerGPU", &p.trainers.cores_per_gpu, &errors);
  ReadInt(cpu, "cores", "spec.trainers.cpu.cores", &p.trainers.cores, &errors);
  ReadEnum(cpu, "placement", "spec.trainers.cpu.placement", &p.trainers.placement,
           {{"WholeCores", CpuPlacement::kWholeCores}, {"Threads", CpuPlacement::kThreads}},
           &errors);
  ReadEnum(cpu, "numa", "spec.trainers.cpu.numa", &p.trainers.numa,
           {{"PreferGPULocal", NumaMode::kPreferGpuLocal},
            {"RequireGPULocal", NumaMode::kRequireGpuLocal},
            {"Ignore", NumaMode::kIgnore}},
           &errors);
  ReadInt(cpu, "weight", "spec.trainers.cpu.weight", &p.trainers.weight, &errors);

  const auto& nb = Child(spec, "neighbours");
  ReadSelector(nb, "podSelector", "spec.neighbours.podSelector", &p.neighbours.pod_selector,
               &errors);
  const auto& ex = Child(nb, "exclude");
  ReadStrings(ex, "namespaces", "spec.neighbours.exclude.namespaces",
              &p.neighbours.exclude_namespaces, &errors);
  ReadStrings(ex, "priorityClasses", "spec.neighbours.exclude.priorityClasses",
              &p.neighbours.exclude_priority_classes, &errors);
  ReadEnum(nb, "fence", "spec.neighbours.fence", &p.neighbours.fence,
           {{"Idle", NeighbourFenceMode::kIdle},
            {"Weight", NeighbourFenceMode::kWeight},
            {"Cpuset", NeighbourFenceMode::kCpuset},
            {"Quota", NeighbourFenceMode::kQuota}},
           &errors);
  if (const auto& mc = Child(nb, "maxCPU"); !mc.is_null()) {
    auto v = ParsePercent(mc, "spec.neighbours.maxCPU");
    if (v.ok()) {
      p.neighbours.max_cpu_percent = *v;
    } else {
      errors.push_back(
          {"spec.neighbours.maxCPU",
           v.status().message().substr(std::string("spec.neighbours.maxCPU: ").size())});
    }
  }
  return out;
}

std::vector<FieldError> ValidateFencePolicy(const FencePolicy& p) {
  std::vector<FieldError> e;
  if (p.name.empty()) e.push_back({"metadata.name", "required"});
  if (p.priority < 0 || p.priority > 1'000'000) {
    e.push_back({"spec.priority", "must be between 0 and 1000000"});
  }
  if (p.trainers.cores != 0 && p.trainers.cores_per_gpu != 0) {
    e.push_back({"spec.trainers.cpu", "set at most one of cores and coresPerGPU"});
  }
  if (p.trainers.cores < 0) e.push_back({"spec.trainers.cpu.cores", "must be at least 1"});
  if (p.trainers.cores_per_gpu < 0) {
    e.push_back({"spec.trainers.cpu.coresPerGPU", "must be at least 1"});
  }
  if (p.trainers.weight < 0 || p.trainers.weight > 10000) {
    e.push_back({"spec.trainers.cpu.weight", "must be between 1 and 10000"});
  }
  if (p.trainers.pod_selector.empty()) {
    // An empty trainer selector would make every pod on the node a trainer: nothing would be
    // fenced and every pod would be pinned. Almost certainly a mistake.
    e.push_back({"spec.trainers.podSelector",
                 "must select something: an empty selector makes every pod a trainer"});
  }
  if (p.neighbours.fence == NeighbourFenceMode::kQuota && p.neighbours.max_cpu_percent == 0) {
    // Allowed: the agent uses its default cap. Nothing to report.
  }
  if (p.neighbours.fence == NeighbourFenceMode::kCpuset && p.trainers.cores == 0 &&
      p.trainers.cores_per_gpu == 0) {
    e.push_back({"spec.neighbours.fence",
                 "Cpuset keeps neighbours off the trainers' cores, so it needs "
                 "spec.trainers.cpu.cores or coresPerGPU"});
  }
  return e;
}

std::string JoinFieldErrors(const std::vector<FieldError>& errors) {
  std::string out;
  for (const auto& e : errors) {
    if (!out.empty()) out += "; ";
    out += e.field + ": " + e.message;
  }
  return out;
}

}  // namespace feedguard::controller
