#include "controller/resolver/cluster_objects.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <ctime>

#include <nlohmann/json.hpp>

#include "kubernetes/core/v1/pod.pb.h"

#include "common/json_member.h"
#include "controller/sanitize/sanitize.h"

namespace feedguard::controller {
namespace {

std::string Str(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return "";
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

// Bounds that keep every sum below int64/int32 overflow whatever a pod spec says.
constexpr int64_t kMaxCpuCores = 1'000'000'000;
constexpr int64_t kMaxGpusPerContainer = 1024;
constexpr size_t kMaxClaimsPerPod = 32;  // the API server allows 32 pod.spec.resourceClaims

int64_t SaturatingAdd(int64_t a, int64_t b) {
  int64_t r = 0;
  return __builtin_add_overflow(a, b, &r) ? INT64_MAX : r;
}

}  // namespace

Result<int64_t> ParseCpuMilli(const std::string& q) {
  // A resource.Quantity (<sign><digits>[.<digits>]<suffix>, suffix a decimal SI prefix n u m k M
  // G T P E, a binary one Ki…Ei, or an exponent e<int>/E<int>) read exactly as decimal digits,
  // never through floating point, and rounded up to whole millicores as Kubernetes does.
  // The API server stores a quantity in canonical form (at most 9 fractional digits): a few
  // dozen bytes at most, "1000000000" cores is 10.
  constexpr size_t kMaxQuantityLength = 64;
  auto bad = [&q] { return InvalidArgument("bad CPU quantity \"" + SafeText(q, 64) + "\""); };
  if (q.empty() || q.size() > kMaxQuantityLength) return bad();
  size_t i = 0;
  bool negative = false;
  if (q[i] == '+' || q[i] == '-') negative = q[i++] == '-';
  std::string digits;  // the number without its point
  int64_t exp10 = 3;   // value in millicores = digits × 10^exp10 × 2^exp2
  int exp2 = 0;
  size_t int_digits = 0, frac_digits = 0;
  for (; i < q.size() && q[i] >= '0' && q[i] <= '9'; ++i, ++int_digits) digits += q[i];
  if (i < q.size() && q[i] == '.') {
    for (++i; i < q.size() && q[i] >= '0' && q[i] <= '9'; ++i, ++frac_digits) digits += q[i];
  }
  if (int_digits + frac_digits == 0) return bad();
  exp10 -= static_cast<int64_t>(frac_digits);
  const std::string suffix = q.substr(i);
  static constexpr std::pair<const char*, int> kDecimal[] = {
      {"", 0},  {"n", -9}, {"u", -6}, {"m", -3}, {"k", 3},
      {"M", 6}, {"G", 9},  {"T", 12}, {"P", 15}, {"E", 18}};
  static constexpr std::pair<const char*, int> kBinary[] = {{"Ki", 10}, {"Mi", 20}, {"Gi", 30},
                                                            {"Ti", 40}, {"Pi", 50}, {"Ei", 60}};
  bool known = false;
  for (const auto& [s, e] : kDecimal) {
    if (suffix == s) exp10 += e, known = true;
  }
  for (const auto& [s, e] : kBinary) {
    if (suffix == s) exp2 = e, known = true;
  }
  if (!known && suffix.size() >= 2 && (suffix[0] == 'e' || suffix[0] == 'E')) {
    int64_t e = 0;
    size_t k = 1;
    const bool neg_e = suffix[k] == '-';
    if (suffix[k] == '+' || suffix[k] == '-') ++k;
    if (k == suffix.size()) return bad();
    for (; k < suffix.size(); ++k) {
      if (suffix[k] < '0' || suffix[k] > '9') return bad();
      if (e < 1'000'000) e = e * 10 + (suffix[k] - '0');  // saturates: no overflow
    }
    exp10 += neg_e ? -e : e;
    known = true;
  }
  if (!known) return bad();
  digits.erase(0, std::min(digits.find_first_not_of('0'), digits.size()));
  if (digits.empty()) return int64_t{0};  // zero, whatever its sign and suffix
  if (negative) return bad();
  // × 2^exp2, on the decimal digits.
  for (int b = 0; b < exp2; ++b) {
    int carry = 0;
    for (size_t k = digits.size(); k-- > 0;) {
      const int d = (digits[k] - '0') * 2 + carry;
      digits[k] = static_cast<char>('0' + d % 10);
      carry = d / 10;
    }
    if (carry) digits.insert(digits.begin(), static_cast<char>('0' + carry));
  }
  // × 10^exp10, rounding a fraction of a millicore up.
  constexpr size_t kMaxDigits = 13;  // 10^12 millicores = kMaxCpuCores
  std::string whole;
  bool round_up = false;
  if (exp10 >= 0) {
    if (static_cast<int64_t>(digits.size()) + exp10 > static_cast<int64_t>(kMaxDigits))
      return bad();
    whole = digits + std::string(static_cast<size_t>(exp10), '0');
  } else if (static_cast<uint64_t>(-exp10) >= digits.size()) {
    round_up = true;  // 0.<digits>: below one millicore, not zero
  } else {
    const size_t cut = digits.size() - static_cast<size_t>(-exp10);
    whole = digits.substr(0, cut);
    round_up = digits.find_first_not_of('0', cut) != std::string::npos;
  }
  if (whole.size() > kMaxDigits) return bad();
  int64_t milli = 0;
  for (char c : whole) milli = milli * 10 + (c - '0');
  if (round_up) ++milli;
  if (milli > kMaxCpuCores * 1000) return bad();
  return milli;
}

namespace {

// `digits` (lowercase hex, two per byte) into `out`; false when one is not, or when they are all
// zero (kept as text, so that all-zero bytes can mean "not packed").
template <size_t N>
bool PackHex(std::string_view digits, std::array<uint8_t, N>& out) {
  if (digits.size() != 2 * N) return false;
  std::array<uint8_t, N> bytes{};
  uint8_t any = 0;
  for (size_t i = 0; i < digits.size(); ++i) {
    const char c = digits[i];
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return false;
    bytes[i / 2] = static_cast<uint8_t>(bytes[i / 2] | (i % 2 ? d : d << 4));
    any |= static_cast<uint8_t>(d);
  }
  if (any == 0) return false;
  out = bytes;
  return true;
}

template <size_t N>
bool Packed(const std::array<uint8_t, N>& bytes) {
  return std::any_of(bytes.begin(), bytes.end(), [](uint8_t b) { return b != 0; });
}

// Writes 2 * N digits at `out`.
template <size_t N>
void WriteHex(const std::array<uint8_t, N>& bytes, char* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  for (uint8_t b : bytes) {
    *out++ = kHex[b >> 4];
    *out++ = kHex[b & 15];
  }
}

// 8-4-4-4-12: where a canonical UUID's hyphens are.
constexpr std::array<size_t, 4> kUuidDashes = {8, 13, 18, 23};
constexpr size_t kUuidLength = 36;
constexpr std::string_view kSchemeEnd = "://";

}  // namespace

void PodUid::Assign(std::string_view uid) {
  bool canonical = uid.size() == kUuidLength;
  char digits[kUuidLength];  // the hex digits without the hyphens (no allocation per pod)
  size_t n = 0;
  for (size_t i = 0; canonical && i < uid.size(); ++i) {
    if (std::find(kUuidDashes.begin(), kUuidDashes.end(), i) != kUuidDashes.end()) {
      canonical = uid[i] == '-';
    } else {
      digits[n++] = uid[i];
    }
  }
  if (!canonical || !PackHex(std::string_view(digits, n), bytes_)) other_ = std::string(uid);
}

std::string PodUid::str() const {
  if (!Packed(bytes_)) return other_.get();
  char digits[32];
  WriteHex(bytes_, digits);
  std::string out(kUuidLength, '-');
  for (size_t i = 0, d = 0; i < kUuidLength; ++i) {
    if (std::find(kUuidDashes.begin(), kUuidDashes.end(), i) == kUuidDashes.end()) {
      out[i] = digits[d++];
    }
  }
  return out;
}

bool PodUid::empty() const { return !Packed(bytes_) && other_.empty(); }

void ContainerId::Assign(std::string_view id) {
  const size_t scheme = id.find(kSchemeEnd);
  const size_t digits = scheme == std::string_view::npos ? id.size() : scheme + kSchemeEnd.size();
  if (PackHex(id.substr(digits), hex_)) {
    text_ = std::string(id.substr(0, digits));
  } else {
    text_ = std::string(id);
  }
}

void ContainerId::InternPrefix(InternPool<std::string>& pool) {
  if (Packed(hex_)) text_ = pool.Intern(std::move(text_));
}

std::string ContainerId::str() const {
  if (!Packed(hex_)) return text_.get();
  const std::string& prefix = text_.get();
  std::string out(prefix.size() + 2 * hex_.size(), '\0');
  std::copy(prefix.begin(), prefix.end(), out.begin());
  WriteHex(hex_, out.data() + prefix.size());
  return out;
}

PodInfo PodFromJson(const nlohmann::json& pod) {
  static const GpuResourceNames kDefaults = GpuResourceNames::Defaults();
  return PodFromJson(pod, kDefaults);
}

namespace {

// What one container's spec says of CPU (millicores; a request defaults to the limit, as the API
// server defaults it), its GPUs, and the QoS inputs.
struct ContainerResources {
  int64_t cpu_request = 0;
  int64_t cpu_limit = 0;  // 0: none
  int64_t gpus = 0;
  bool any = false;         // states a CPU or memory request or limit
  bool guaranteed = false;  // CPU and memory limits equal to their requests
};

ContainerResources ReadResources(const nlohmann::json& c, const GpuResourceNames& gpu_names) {
  ContainerResources out;
  const auto& res = JsonMember(c, "resources");
  const auto& req = JsonMember(res, "requests");
  const auto& lim = JsonMember(res, "limits");
  std::string rq = Str(req, "cpu"), lm = Str(lim, "cpu");
  if (rq.empty()) rq = lm;
  if (auto v = ParseCpuMilli(rq); !rq.empty() && v.ok()) out.cpu_request = *v;
  if (auto v = ParseCpuMilli(lm); !lm.empty() && v.ok()) out.cpu_limit = *v;
  std::string rm = Str(req, "memory"), lmem = Str(lim, "memory");
  out.any = !rq.empty() || !lm.empty() || !rm.empty() || !lmem.empty();
  if (rm.empty()) rm = lmem;
  out.guaranteed =
      out.cpu_limit != 0 && out.cpu_request == out.cpu_limit && !lmem.empty() && rm == lmem;
  if (lim.is_object()) {
    for (auto& [name, v] : lim.items()) {
      if (!gpu_names.Matches(name)) continue;
      int64_t n = 0;
      if (v.is_string()) {
        const std::string t = v.get<std::string>();
        auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), n);
        if (ec != std::errc() || end != t.data() + t.size()) n = 0;
      } else if (v.is_number_integer() && !v.is_number_unsigned()) {
        n = v.get<int64_t>();
      } else if (v.is_number_unsigned()) {  // nlohmann reads every positive integer so
        n = static_cast<int64_t>(
            std::min<uint64_t>(v.get<uint64_t>(), static_cast<uint64_t>(kMaxGpusPerContainer)));
      }
      out.gpus = SaturatingAdd(out.gpus, std::clamp<int64_t>(n, 0, kMaxGpusPerContainer));
    }
  }
  return out;
}

// A native sidecar: an init container with restartPolicy Always (GA in Kubernetes 1.33). It
// starts before the containers and runs beside them for the pod's life.
bool IsSidecar(const nlohmann::json& init_container) {
  return Str(init_container, "restartPolicy") == "Always";
}

}  // namespace

PodInfo PodFromJson(const nlohmann::json& pod, const GpuResourceNames& gpu_names) {
  PodInfo p;
  const auto& meta = JsonMember(pod, "metadata");
  const auto& spec = JsonMember(pod, "spec");
  const auto& status = JsonMember(pod, "status");
  p.uid = Str(meta, "uid");
  p.ns = Str(meta, "namespace");
  p.name = Str(meta, "name");
  p.labels = LabelSet(LabelsFromJson(JsonMember(meta, "labels")));
  p.terminating = !JsonMember(meta, "deletionTimestamp").is_null();
  p.node_name = Str(spec, "nodeName");
  p.priority_class = Str(spec, "priorityClassName");
  p.phase = Str(status, "phase");

  // The pod's CPU request and limit as kubelet sizes its pod cgroup (component-helpers'
  // PodRequests / PodLimits, without overhead): the containers' sum plus the sidecars', or, if
  // larger, what the largest init container needs beside the sidecars declared before it. The
  // pod has a limit only if every container — and every init container with the sidecars before
  // it — has one (kubelet writes no pod quota otherwise).
  bool every_limited = true, any_resources = false, guaranteed = true;
  int64_t gpus = 0;
  int64_t request = 0, limit = 0;
  const auto& containers = JsonMember(spec, "containers");
  if (containers.is_array()) {
    for (const auto& c : containers) {
      p.containers.push_back({Str(c, "name"), ""});
      const ContainerResources r = ReadResources(c, gpu_names);
      request = SaturatingAdd(request, r.cpu_request);
      limit = SaturatingAdd(limit, r.cpu_limit);
      if (r.cpu_limit == 0) every_limited = false;
      any_resources |= r.any;
      guaranteed &= r.guaranteed;
      gpus = SaturatingAdd(gpus, r.gpus);
    }
  }
  const auto& init_containers = JsonMember(spec, "initContainers");
  if (init_containers.is_array()) {
    int64_t sidecars_request = 0, sidecars_limit = 0;  // of the sidecars declared so far
    int64_t init_request = 0, init_limit = 0;          // the most any init step needs
    for (const auto& c : init_containers) {
      const ContainerResources r = ReadResources(c, gpu_names);
      any_resources |= r.any;
      guaranteed &= r.guaranteed;
      int64_t step_request = 0, step_limit = 0;
      if (IsSidecar(c)) {
        // A container of the pod: fenced, its dir lifted and pinned like any other.
        p.containers.push_back({Str(c, "name"), ""});
        request = SaturatingAdd(request, r.cpu_request);
        limit = SaturatingAdd(limit, r.cpu_limit);
        sidecars_request = SaturatingAdd(sidecars_request, r.cpu_request);
        sidecars_limit = SaturatingAdd(sidecars_limit, r.cpu_limit);
        step_request = sidecars_request;
        step_limit = sidecars_limit;
        gpus = SaturatingAdd(gpus, r.gpus);  // held for the pod's life
      } else {
        step_request = SaturatingAdd(r.cpu_request, sidecars_request);
        step_limit = SaturatingAdd(r.cpu_limit, sidecars_limit);
      }
      if (step_limit == 0) every_limited = false;
      init_request = std::max(init_request, step_request);
      init_limit = std::max(init_limit, step_limit);
    }
    request = std::max(request, init_request);
    limit = std::max(limit, init_limit);
  }
  p.cpu_request_milli = request;
  p.cpu_limit_milli = every_limited ? limit : 0;
  p.gpus = static_cast<int32_t>(std::min<int64_t>(gpus, INT32_MAX));
  std::string qos = Str(status, "qosClass");
  if (auto q = QosClassFromName(qos))
    p.qos = *q;
  else
    p.qos = !any_resources ? QosClass::kBestEffort
            : guaranteed   ? QosClass::kGuaranteed
                           : QosClass::kBurstable;

  // DRA claims: named in the spec, or made from a template and named in the status.
  auto add_claim = [&](const nlohmann::json& entry) {
    std::string claim = Str(entry, "resourceClaimName");
    if (claim.empty() || std::find(p.claims.begin(), p.claims.end(), claim) != p.claims.end()) {
      return;
    }
    if (p.claims.size() < kMaxClaimsPerPod) p.claims.push_back(std::move(claim));
  };
  for (const auto* list :
       {&JsonMember(spec, "resourceClaims"), &JsonMember(status, "resourceClaimStatuses")}) {
    if (!list->is_array()) continue;
    for (const auto& entry : *list) add_claim(entry);
  }

  // Container ids: the containers' and the sidecars' (names are unique across both lists).
  for (const char* list : {"containerStatuses", "initContainerStatuses"}) {
    const auto& statuses = JsonMember(status, list);
    if (!statuses.is_array()) continue;
    for (const auto& s : statuses) {
      std::string name = Str(s, "name"), id = Str(s, "containerID");
      for (auto& c : p.containers)
        if (c.name == name) c.id = id;
    }
  }
  return p;
}

std::shared_ptr<const kube::FieldSet> PodFields() {
  return kube::FieldSet::Only({"metadata.name",
                               "metadata.namespace",
                               "metadata.uid",
                               "metadata.resourceVersion",
                               "metadata.labels",
                               "metadata.deletionTimestamp",  //
                               "spec.nodeName",
                               "spec.priorityClassName",  //
                               "spec.containers.name",
                               "spec.containers.resources",  //
                               "spec.initContainers.name",
                               "spec.initContainers.restartPolicy",
                               "spec.initContainers.resources",  //
                               "status.phase",
                               "status.qosClass",  //
                               "status.containerStatuses.name",
                               "status.containerStatuses.containerID",
                               "status.initContainerStatuses.name",
                               "status.initContainerStatuses.containerID",
                               "spec.resourceClaims.resourceClaimName",
                               "status.resourceClaimStatuses.resourceClaimName"});
}

namespace {

namespace k8s = feedguard::kubernetes::core::v1;

// JSON leaves out empty strings of omitempty fields; the protobuf encoding writes them.
void PutString(nlohmann::json& obj, const char* key, const std::string& value) {
  if (!value.empty()) obj[key] = value;
}

nlohmann::json QuantitiesJson(const google::protobuf::Map<std::string, k8s::Quantity>& m) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, q] : m) out[name] = q.string();
  return out;
}

nlohmann::json ContainersJson(const google::protobuf::RepeatedPtrField<k8s::Container>& cs,
                              bool init) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& c : cs) {
    nlohmann::json j = {{"name", c.name()}};
    if (init && c.has_restart_policy()) j["restartPolicy"] = c.restart_policy();
    if (c.has_resources()) {
      nlohmann::json r = nlohmann::json::object();
      if (!c.resources().limits().empty()) r["limits"] = QuantitiesJson(c.resources().limits());
      if (!c.resources().requests().empty()) {
        r["requests"] = QuantitiesJson(c.resources().requests());
      }
      j["resources"] = std::move(r);
    }
    out.push_back(std::move(j));
  }
  return out;
}

nlohmann::json StatusesJson(const google::protobuf::RepeatedPtrField<k8s::ContainerStatus>& ss) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& s : ss) {
    nlohmann::json j = {{"name", s.name()}};
    PutString(j, "containerID", s.container_id());
    out.push_back(std::move(j));
  }
  return out;
}

// spec.resourceClaims / status.resourceClaimStatuses: each entry's resourceClaimName, if set.
template <typename Claims>
nlohmann::json ClaimNamesJson(const Claims& claims) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& c : claims) {
    nlohmann::json j = nlohmann::json::object();
    if (c.has_resource_claim_name()) j["resourceClaimName"] = c.resource_claim_name();
    out.push_back(std::move(j));
  }
  return out;
}

// metav1.Time as JSON writes it (RFC 3339, seconds, UTC).
std::string TimeJson(const k8s::Time& t) {
  const std::time_t secs = static_cast<std::time_t>(t.seconds());
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

nlohmann::json PodJsonFromProtobuf(std::string_view bytes) {
  k8s::Pod pod;
  if (!pod.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return nlohmann::json(nlohmann::json::value_t::discarded);
  }
  nlohmann::json meta = nlohmann::json::object();
  const auto& m = pod.metadata();
  PutString(meta, "name", m.name());
  PutString(meta, "namespace", m.namespace_());
  PutString(meta, "uid", m.uid());
  PutString(meta, "resourceVersion", m.resource_version());
  if (m.has_deletion_timestamp()) meta["deletionTimestamp"] = TimeJson(m.deletion_timestamp());
  if (!m.labels().empty()) {
    nlohmann::json labels = nlohmann::json::object();
    for (const auto& [k, v] : m.labels()) labels[k] = v;
    meta["labels"] = std::move(labels);
  }
  nlohmann::json out = {{"metadata", std::move(meta)}};
  if (pod.has_spec()) {
    const auto& s = pod.spec();
    nlohmann::json spec = nlohmann::json::object();
    PutString(spec, "nodeName", s.node_name());
    PutString(spec, "priorityClassName", s.priority_class_name());
    if (!s.containers().empty()) spec["containers"] = ContainersJson(s.containers(), false);
    if (!s.init_containers().empty()) {
      spec["initContainers"] = ContainersJson(s.init_containers(), true);
    }
    if (!s.resource_claims().empty()) spec["resourceClaims"] = ClaimNamesJson(s.resource_claims());
    out["spec"] = std::move(spec);
  }
  if (pod.has_status()) {
    const auto& s = pod.status();
    nlohmann::json status = nlohmann::json::object();
    PutString(status, "phase", s.phase());
    PutString(status, "qosClass", s.qos_class());
    if (!s.container_statuses().empty()) {
      status["containerStatuses"] = StatusesJson(s.container_statuses());
    }
    if (!s.init_container_statuses().empty()) {
      status["initContainerStatuses"] = StatusesJson(s.init_container_statuses());
    }
    if (!s.resource_claim_statuses().empty()) {
      status["resourceClaimStatuses"] = ClaimNamesJson(s.resource_claim_statuses());
    }
    out["status"] = std::move(status);
  }
  return out;
}

std::shared_ptr<const kube::FieldSet> ClaimFields() {
  return kube::FieldSet::Only({"metadata.name", "metadata.namespace", "metadata.uid",
                               "metadata.resourceVersion",
                               "status.allocation.devices.results.driver"});
}

ClaimInfo ClaimFromJson(const nlohmann::json& claim, const std::vector<std::string>& gpu_drivers) {
  ClaimInfo c;
  const auto& meta = JsonMember(claim, "metadata");
  c.ns = Str(meta, "namespace");
  c.name = Str(meta, "name");
  const auto& results = JsonMember(
      JsonMember(JsonMember(JsonMember(claim, "status"), "allocation"), "devices"), "results");
  if (!results.is_array()) return c;
  for (const auto& r : results) {
    const std::string driver = Str(r, "driver");
    if (std::find(gpu_drivers.begin(), gpu_drivers.end(), driver) != gpu_drivers.end() &&
        c.gpus < kMaxGpusPerContainer) {
      ++c.gpus;
    }
  }
  return c;
}

std::shared_ptr<const kube::FieldSet> NodeFields() {
  return kube::FieldSet::Only({"metadata.name", "metadata.uid", "metadata.resourceVersion",
                               "metadata.labels", "metadata.deletionTimestamp"});
}

NodeInfo NodeFromJson(const nlohmann::json& node) {
  const auto& meta = JsonMember(node, "metadata");
  return {Str(meta, "name"), LabelsFromJson(JsonMember(meta, "labels"))};
}

NamespaceInfo NamespaceFromJson(const nlohmann::json& ns) {
  const auto& meta = JsonMember(ns, "metadata");
  return {Str(meta, "name"), LabelsFromJson(JsonMember(meta, "labels"))};
}

}  // namespace feedguard::controller
