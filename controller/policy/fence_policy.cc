#include "controller/policy/fence_policy.h"

#include <algorithm>
#include <charconv>
#include <cstdint>

#include <nlohmann/json.hpp>

#include "common/json_member.h"
#include "controller/sanitize/sanitize.h"

namespace feedguard::controller {
namespace {

// An optional object member: null when absent, the object when it is one; an error (and null)
// when it is something else.
const nlohmann::json& ReadObject(const nlohmann::json& j, const char* key, const std::string& field,
                                 std::vector<FieldError>* errors) {
  static const nlohmann::json kNull;
  const auto& v = JsonMember(j, key);
  if (v.is_null() || v.is_object()) return v;
  errors->push_back({field, "expected object"});
  return kNull;
}

// Reads an optional string enum; absent → keeps the default.
template <typename Enum, size_t N>
void ReadEnum(const nlohmann::json& j, const char* key, const std::string& field, Enum* out,
              const EnumNames<Enum, N>& table, std::vector<FieldError>* errors) {
  const auto& v = JsonMember(j, key);
  if (v.is_null()) return;
  std::string allowed;
  for (const auto& row : table) allowed += (allowed.empty() ? "" : ", ") + std::string(row.second);
  if (!v.is_string()) {
    errors->push_back({field, "expected string, one of " + allowed});
    return;
  }
  if (auto e = FromName(table, v.get<std::string>())) {
    *out = *e;
  } else {
    errors->push_back(
        {field, "\"" + SafeText(v.get<std::string>(), 64) + "\" is not one of " + allowed});
  }
}

// Reads an optional integer in [min, max]; absent → keeps the default. An explicit value out of
// range (0 included where 0 is not allowed) is an error, never "unset"; so is a value that does
// not fit (2^40 for an int32 field) or a fraction.
void ReadInt(const nlohmann::json& j, const char* key, const std::string& field, int32_t* out,
             int64_t min, int64_t max, std::vector<FieldError>* errors) {
  const auto& v = JsonMember(j, key);
  if (v.is_null()) return;
  if (!v.is_number_integer()) {
    errors->push_back({field, "expected integer"});
    return;
  }
  const std::string range =
      "must be between " + std::to_string(min) + " and " + std::to_string(max);
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(max)) {
    errors->push_back({field, range});
    return;
  }
  const int64_t x = v.get<int64_t>();
  if (x < min || x > max) {
    errors->push_back({field, range});
    return;
  }
  *out = static_cast<int32_t>(x);
}

// Reads an optional boolean; absent → keeps the default.
void ReadBool(const nlohmann::json& j, const char* key, const std::string& field, bool* out,
              std::vector<FieldError>* errors) {
  const auto& v = JsonMember(j, key);
  if (v.is_null()) return;
  if (!v.is_boolean()) {
    errors->push_back({field, "expected boolean"});
    return;
  }
  *out = v.get<bool>();
}

void ReadSelector(const nlohmann::json& j, const char* key, const std::string& field,
                  LabelSelector* out, std::vector<FieldError>* errors) {
  auto s = LabelSelector::FromJson(JsonMember(j, key), field);
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

// A namespace name: DNS-1123 label, at most 63 characters.
bool IsDnsLabel(const std::string& s) {
  return s.size() <= 63 && s.find('.') == std::string::npos && IsDnsSubdomain(s);
}

// An optional list of distinct strings, each accepted by `valid`, at most `max_items`.
void ReadStrings(const nlohmann::json& j, const char* key, const std::string& field,
                 std::vector<std::string>* out, size_t max_items, bool (*valid)(const std::string&),
                 const char* what, std::vector<FieldError>* errors) {
  const auto& v = JsonMember(j, key);
  if (v.is_null()) return;
  if (!v.is_array()) {
    errors->push_back({field, "expected list of strings"});
    return;
  }
  if (v.size() > max_items) {
    errors->push_back({field, "at most " + std::to_string(max_items) + " entries"});
    return;
  }
  std::vector<std::string> got;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string f = field + "[" + std::to_string(i) + "]";
    if (!v[i].is_string()) {
      errors->push_back({f, "expected string"});
      return;
    }
    const std::string s = v[i].get<std::string>();
    if (valid && !valid(s)) {
      errors->push_back({f, "\"" + SafeText(s, 64) + "\" is not " + what});
      return;
    }
    if (std::find(got.begin(), got.end(), s) != got.end()) {
      errors->push_back({f, "duplicate \"" + s + "\""});
      return;
    }
    got.push_back(s);
  }
  *out = std::move(got);
}

bool IsNamespaceName(const std::string& s) { return IsDnsLabel(s); }
bool IsPriorityClassName(const std::string& s) { return IsDnsSubdomain(s); }

}  // namespace

bool FencePolicy::HasFinalizer() const {
  return std::find(finalizers.begin(), finalizers.end(), kFencePolicyFinalizer) != finalizers.end();
}

Result<int32_t> ParsePercent(const nlohmann::json& value, const std::string& field) {
  if (value.is_number_integer()) {
    // Compared as 64-bit (unsigned first): 2^32 + 50 must not pass as 50.
    if (value.is_number_unsigned() ? value.get<uint64_t>() > 100
                                   : (value.get<int64_t>() < 1 || value.get<int64_t>() > 100)) {
      return InvalidArgument(field + ": must be between 1% and 100%");
    }
    const auto v = static_cast<int32_t>(value.get<int64_t>());
    if (v < 1) return InvalidArgument(field + ": must be between 1% and 100%");
    return v;
  }
  if (!value.is_string()) {
    return InvalidArgument(field + ": expected a percentage string such as \"75%\" or an integer");
  }
  std::string s = value.get<std::string>();
  const std::string shown = SafeText(s, 64);
  // The CRD's rule: ^[0-9]{1,3}%$, 1 to 100.
  if (s.size() < 2 || s.size() > 4 || s.back() != '%' ||
      !std::all_of(s.begin(), s.end() - 1, [](char c) { return c >= '0' && c <= '9'; })) {
    return InvalidArgument(field + ": \"" + shown + "\" must be a percentage such as \"75%\"");
  }
  int v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size() - 1, v);
  if (ec != std::errc() || p != s.data() + s.size() - 1 || v < 1 || v > 100) {
    return InvalidArgument(field + ": \"" + shown + "\" must be between 1% and 100%");
  }
  return v;
}

ParsedPolicy ParseFencePolicy(const nlohmann::json& object) {
  // Every member is type-checked and range-checked as the CRD does: an installed CRD may be
  // older or looser than this code (helm never upgrades CRDs), so nothing the schema would have
  // rejected may reach the resolver, and no malformed value may throw.
  ParsedPolicy out;
  FencePolicy& p = out.policy;
  auto& errors = out.errors;
  if (!object.is_object()) {
    errors.push_back({"", "expected object"});
    return out;
  }
  const auto& meta = ReadObject(object, "metadata", "metadata", &errors);
  auto meta_string = [&](const char* key) {
    const auto& v = JsonMember(meta, key);
    return v.is_string() ? v.get<std::string>() : std::string();
  };
  p.name = meta_string("name");
  p.uid = meta_string("uid");
  p.resource_version = meta_string("resourceVersion");
  if (const auto& g = JsonMember(meta, "generation");
      g.is_number_integer() && !g.is_number_unsigned()) {
    p.generation = g.get<int64_t>();
  } else if (g.is_number_unsigned()) {
    p.generation = static_cast<int64_t>(std::min<uint64_t>(g.get<uint64_t>(), INT64_MAX));
  }
  p.deleting = !JsonMember(meta, "deletionTimestamp").is_null();
  ReadStrings(meta, "finalizers", "metadata.finalizers", &p.finalizers, 1024, nullptr, "", &errors);

  const auto& spec = JsonMember(object, "spec");
  if (spec.is_null()) {
    errors.push_back({"spec", "required"});
    return out;
  }
  if (!spec.is_object()) {
    errors.push_back({"spec", "expected object"});
    return out;
  }
  ReadInt(spec, "priority", "spec.priority", &p.priority, 0, 1'000'000, &errors);
  ReadEnum(spec, "mode", "spec.mode", &p.mode, kPolicyModeNames, &errors);
  ReadSelector(spec, "nodeSelector", "spec.nodeSelector", &p.node_selector, &errors);

  const auto& tr = JsonMember(spec, "trainers");
  if (tr.is_null()) {
    errors.push_back({"spec.trainers", "required"});
  } else if (!tr.is_object()) {
    errors.push_back({"spec.trainers", "expected object"});
  } else {
    ReadSelector(tr, "namespaceSelector", "spec.trainers.namespaceSelector",
                 &p.trainers.namespace_selector, &errors);
    ReadBool(tr, "requireGPU", "spec.trainers.requireGPU", &p.trainers.require_gpu, &errors);
    if (JsonMember(tr, "podSelector").is_null()) {
      errors.push_back({"spec.trainers.podSelector", "required"});
    } else {
      ReadSelector(tr, "podSelector", "spec.trainers.podSelector", &p.trainers.pod_selector,
                   &errors);
    }
    const auto& cpu = ReadObject(tr, "cpu", "spec.trainers.cpu", &errors);
    ReadInt(cpu, "coresPerGPU", "spec.trainers.cpu.coresPerGPU", &p.trainers.cores_per_gpu, 1, 256,
            &errors);
    ReadInt(cpu, "cores", "spec.trainers.cpu.cores", &p.trainers.cores, 1, 1024, &errors);
    ReadEnum(cpu, "placement", "spec.trainers.cpu.placement", &p.trainers.placement,
             kCpuPlacementNames, &errors);
    ReadEnum(cpu, "numa", "spec.trainers.cpu.numa", &p.trainers.numa, kNumaModeNames, &errors);
    ReadInt(cpu, "weight", "spec.trainers.cpu.weight", &p.trainers.weight, 1, 10000, &errors);
  }

  const auto& nb = ReadObject(spec, "neighbours", "spec.neighbours", &errors);
  ReadSelector(nb, "podSelector", "spec.neighbours.podSelector", &p.neighbours.pod_selector,
               &errors);
  const auto& ex = ReadObject(nb, "exclude", "spec.neighbours.exclude", &errors);
  ReadStrings(ex, "namespaces", "spec.neighbours.exclude.namespaces",
              &p.neighbours.exclude_namespaces, 256, IsNamespaceName,
              "a namespace name (DNS-1123 label)", &errors);
  ReadStrings(ex, "priorityClasses", "spec.neighbours.exclude.priorityClasses",
              &p.neighbours.exclude_priority_classes, 64, IsPriorityClassName,
              "a PriorityClass name (DNS-1123 subdomain)", &errors);
  ReadEnum(nb, "fence", "spec.neighbours.fence", &p.neighbours.fence, kNeighbourFenceNames,
           &errors);
  if (const auto& mc = JsonMember(nb, "maxCPU"); !mc.is_null()) {
    auto v = ParsePercent(mc, "spec.neighbours.maxCPU");
    if (v.ok()) {
      p.neighbours.max_cpu_percent = *v;
    } else {
      errors.push_back(
          {"spec.neighbours.maxCPU",
           v.status().message().substr(std::string("spec.neighbours.maxCPU: ").size())});
    }
  } else if (p.neighbours.fence == NeighbourFenceMode::kQuota) {
    // Documented default of a Quota fence, sent explicitly (the agent never guesses).
    p.neighbours.max_cpu_percent = kDefaultQuotaMaxCpuPercent;
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
  } else if (!p.trainers.pod_selector.HasPositiveRequirement()) {
    // NotIn / DoesNotExist alone match every pod that lacks a label: any tenant's pod.
    e.push_back({"spec.trainers.podSelector",
                 "needs a positive condition (a matchLabels entry, or a matchExpressions entry "
                 "with In or Exists): NotIn and DoesNotExist alone match every pod without the "
                 "label"});
  } else if (std::string why = p.trainers.pod_selector.WhyUnsatisfiable(); !why.empty()) {
    e.push_back({"spec.trainers.podSelector", "can never match a pod: " + why});
  } else if (p.trainers.namespace_selector.empty() && !p.trainers.require_gpu &&
             p.neighbours.pod_selector.Implies(p.trainers.pod_selector)) {
    // Every pod the neighbour selector matches is a trainer first: nothing is ever fenced.
    // (With a namespace selector or requireGPU, pods outside them stay neighbours.)
    e.push_back({"spec.neighbours.podSelector",
                 p.trainers.pod_selector.Implies(p.neighbours.pod_selector)
                     ? "selects the same pods as spec.trainers.podSelector: every such pod is a "
                       "trainer, so no neighbour would ever be fenced"
                     : "selects only pods that spec.trainers.podSelector selects too: every such "
                       "pod is a trainer, so no neighbour would ever be fenced"});
  }
  if (std::string why = p.trainers.namespace_selector.WhyUnsatisfiable(); !why.empty()) {
    e.push_back({"spec.trainers.namespaceSelector", "can never match a namespace: " + why});
  }
  if (std::string why = p.neighbours.pod_selector.WhyUnsatisfiable(); !why.empty()) {
    e.push_back({"spec.neighbours.podSelector",
                 "can never match a pod, so no neighbour would ever be fenced: " + why});
  }
  if (std::string why = p.node_selector.WhyUnsatisfiable(); !why.empty()) {
    e.push_back({"spec.nodeSelector", "can never match a node: " + why});
  }
  if (p.trainers.numa == NumaMode::kRequireGpuLocal && p.trainers.cores == 0 &&
      p.trainers.cores_per_gpu == 0) {
    e.push_back({"spec.trainers.cpu.numa",
                 "numa RequireGPULocal places reserved cores, so it needs cores or coresPerGPU"});
  }
  if (p.neighbours.max_cpu_percent != 0 && p.neighbours.fence != NeighbourFenceMode::kQuota) {
    // Only a Quota fence caps the neighbours' CPU; for the others the field would be ignored.
    e.push_back({"spec.neighbours.maxCPU",
                 "only fence Quota caps the neighbours' CPU; remove maxCPU or use fence Quota"});
  }
  if (p.neighbours.max_cpu_percent < 0 || p.neighbours.max_cpu_percent > 100) {
    e.push_back({"spec.neighbours.maxCPU", "must be between 1% and 100%"});
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
