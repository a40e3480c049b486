#include "plugin/explain.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "common/json_member.h"
#include "feedguard/common/enum_names.h"
#include "feedguard/common/gpu_resource_names.h"

namespace feedguard::plugin {
namespace {

using Json = nlohmann::json;

constexpr EnumNames<Absence, 8> kAbsenceNames{{{Absence::kPodNotFound, "PodNotFound"},
                                               {Absence::kNotAGpuPod, "NotAGPUPod"},
                                               {Absence::kNotRunning, "NotRunning"},
                                               {Absence::kNoReportYet, "NoReportYet"},
                                               {Absence::kNotObserved, "NotObserved"},
                                               {Absence::kNotAmongWorst, "NotAmongWorst"},
                                               {Absence::kNotStarving, "NotStarving"},
                                               {Absence::kNotReported, "NotReported"}}};
static_assert(EnumTableComplete(kAbsenceNames));

std::string WindowName(int64_t seconds) {
  if (seconds > 0 && seconds % 3600 == 0) return std::to_string(seconds / 3600) + "h";
  if (seconds > 0 && seconds % 60 == 0) return std::to_string(seconds / 60) + "m";
  return std::to_string(seconds) + "s";
}

std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// A quantity that is not zero ("1", "2", "500m"; "0" and "" are none).
bool NonZeroQuantity(const Json& q) {
  if (q.is_number()) return q.get<double>() > 0;
  if (!q.is_string()) return false;
  const std::string s = q.get<std::string>();
  return !s.empty() && s.find_first_not_of("0.") != std::string::npos && s[0] != '-';
}

bool ContainerHasGpu(const Json& c, const GpuResourceNames& names) {
  const Json& res = JsonMember(c, "resources");
  for (const char* kind : {"limits", "requests"}) {
    const Json& m = JsonMember(res, kind);
    if (!m.is_object()) continue;
    for (auto it = m.begin(); it != m.end(); ++it) {
      if (names.Matches(it.key()) && NonZeroQuantity(it.value())) return true;
    }
  }
  return false;
}

void WrapInto(const std::string& text, std::vector<std::string>* lines) {
  for (auto& l : WrapText(text)) lines->push_back(std::move(l));
}

std::string CpuUsed(const ReportWindow& w, int64_t request_milli) {
  if (w.covered_seconds <= 0) return "-";
  std::string out = Fixed(w.cpu_seconds / w.covered_seconds, 2) + " cores";
  if (request_milli > 0) {
    out += " of " + Fixed(static_cast<double>(request_milli) / 1000.0, 2) + " requested";
  } else {
    out += ", no request";
  }
  return out;
}

Json ContenderJson(const Contender& c) {
  Json j = {{"kind", c.kind}, {"name", c.name}, {"cpuSeconds", c.cpu_seconds}};
  j["namespace"] = c.ns.empty() ? Json() : Json(c.ns);
  return j;
}

}  // namespace

std::string_view AbsenceName(Absence a) { return NameOf(kAbsenceNames, a, "Unknown"); }

bool IsGpuPod(const Json& pod) {
  static const GpuResourceNames kNames = GpuResourceNames::Defaults();
  const Json& spec = JsonMember(pod, "spec");
  // A pod with DRA claims may hold GPUs through them (the controller counts the allocated devices
  // of GPU drivers; the plugin does not read claims): not said to be GPU-less.
  if (const Json& claims = JsonMember(spec, "resourceClaims"); claims.is_array() && !claims.empty())
    return true;
  for (const char* list : {"containers", "initContainers"}) {
    const Json& cs = JsonMember(spec, list);
    if (!cs.is_array()) continue;
    for (const Json& c : cs) {
      if (ContainerHasGpu(c, kNames)) return true;
    }
  }
  return false;
}

std::vector<std::pair<std::string, std::string>> ContenderPods(const ReportPod& pod) {
  std::vector<const ReportWindow*> order;
  for (int64_t s : {kWindow10m, kWindow1h, kWindow1m}) {
    if (const ReportWindow* w = pod.Window(s)) order.push_back(w);
  }
  for (const auto& w : pod.windows) {
    if (std::find(order.begin(), order.end(), &w) == order.end()) order.push_back(&w);
  }
  std::vector<std::pair<std::string, std::string>> out;
  std::set<std::pair<std::string, std::string>> seen;
  for (const ReportWindow* w : order) {
    for (const auto& c : w->contenders) {
      if (c.kind != "Pod" || c.name.empty()) continue;
      if (c.ns == pod.ns && c.name == pod.name) continue;
      if (seen.insert({c.ns, c.name}).second) out.emplace_back(c.ns, c.name);
    }
  }
  return out;
}

const Contender* MainContender(const ReportPod& pod) {
  for (int64_t s : {kWindow10m, kWindow1h, kWindow1m}) {
    const ReportWindow* w = pod.Window(s);
    if (w != nullptr && !w->contenders.empty()) return &w->contenders.front();
  }
  return nullptr;
}

std::vector<std::string> NodeContenderAdvice(const ReportPod& pod) {
  const Contender* main = MainContender(pod);
  if (main == nullptr || main->kind != "Node") return {};
  std::vector<std::string> lines;
  WrapInto(
      "The main contender is the node itself: system daemons, kubelet and other host "
      "processes ran " +
          FormatSeconds(main->cpu_seconds) +
          " on this pod's CPUs while it waited. A FencePolicy cannot fence host processes "
          "(it fences pods only). Keep them apart with kubelet's reservations: "
          "--system-reserved=cpu=... / --kube-reserved=cpu=... (systemReserved, "
          "kubeReserved in the KubeletConfiguration) and, with the static CPU manager, "
          "--reserved-cpus (reservedSystemCPUs) to give them CPUs of their own.",
      &lines);
  return lines;
}

std::string RenderExplain(const ReportPod& pod, const PolicySuggestion* policy) {
  std::vector<std::string> lines;
  std::string head = "GPU pod " + pod.ns + "/" + pod.name;
  if (!pod.node.empty()) head += " on node " + pod.node;
  head += ", CPU request " +
          (pod.cpu_request_milli > 0
               ? Fixed(static_cast<double>(pod.cpu_request_milli) / 1000.0, 2) + " cores."
               : std::string("none."));
  WrapInto(head, &lines);
  if (!pod.policy.empty())
    lines.push_back("FencePolicy " + pod.policy + " covers it as a trainer.");
  lines.push_back("");

  // The windows.
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"WINDOW", "COVERED", "WAIT", "BY PODS", "BY NODE", "OWN", "SOURCE", "CPU USED",
                  "THROTTLED", "GPU BUSY", "GPU LOST (MIN..MAX)"});
  bool wait_only = false;
  for (const auto& w : pod.windows) {
    std::string lost = "n/a";
    std::string busy = "n/a";
    if (w.gpu_sampled) {
      lost = FormatSeconds(w.gpu_lost_seconds) + " (" + FormatSeconds(w.gpu_lost_min_seconds) +
             ".." + FormatSeconds(w.gpu_lost_max_seconds) + ")";
      busy = Fixed(w.gpu_busy_fraction * 100, 0) + "%";
    } else {
      wait_only = true;
    }
    auto part = [&](double s) {
      return w.covered_seconds > 0 ? FormatPercent(s / w.covered_seconds) : std::string("-");
    };
    rows.push_back({WindowName(w.seconds), FormatSeconds(w.covered_seconds),
                    FormatSeconds(w.wait_seconds) + " (" + FormatPercent(w.wait_fraction) + ")",
                    part(w.wait_behind_pods_seconds),
                    part(w.wait_behind_others_seconds - w.wait_behind_pods_seconds),
                    part(w.wait_seconds - w.wait_behind_others_seconds),
                    w.wait_source.empty() ? "-" : w.wait_source, CpuUsed(w, pod.cpu_request_milli),
                    FormatSeconds(w.throttled_seconds), busy, lost});
  }
  std::string table = RenderColumns(rows);
  size_t pos = 0;
  while (pos < table.size()) {
    const size_t nl = table.find('\n', pos);
    lines.push_back(table.substr(pos, nl - pos));
    pos = nl == std::string::npos ? table.size() : nl + 1;
  }
  WrapInto(
      "WAIT: time at least one of its tasks was runnable and not running (psi: the pod "
      "cgroup's cpu.pressure; schedstat: its tasks' run delay summed, an upper bound), in "
      "three parts: BY PODS while other pods ran on its CPUs (what a FencePolicy takes back), "
      "BY NODE while the node's own processes did, OWN behind its own threads (it needs more "
      "CPU; no fence helps); the first two are upper bounds. GPU LOST: GPU idle time that "
      "overlapped the wait behind others, an estimate within its bounds.",
      &lines);
  if (wait_only) lines.push_back("n/a: no NVML on its node: wait only.");
  lines.push_back("");

  // Contenders per window.
  lines.push_back("Contenders (who ran on its CPUs while it waited, CPU-seconds):");
  for (const auto& w : pod.windows) {
    std::string who;
    for (const auto& c : w.contenders) who += (who.empty() ? "" : ", ") + ContenderLabel(c);
    if (who.empty()) who = "none";
    lines.push_back("  " + WindowName(w.seconds) + ": " + who);  // one line each: greppable
  }
  const std::vector<std::string> advice = NodeContenderAdvice(pod);
  if (!advice.empty()) {
    lines.push_back("");
    lines.insert(lines.end(), advice.begin(), advice.end());
  }
  lines.push_back("");

  std::string out;
  for (const auto& l : lines) out += l.empty() ? "#\n" : "# " + l + "\n";
  if (policy == nullptr) {
    out += "# The pod no longer exists: no FencePolicy can be built from its labels.\n";
    return out;
  }
  const std::string name = JsonStringOr(JsonMember(policy->policy, "metadata"), "name", "");
  std::vector<std::string> intro;
  WrapInto(
      "The FencePolicy that would fence them, in DryRun: it plans and reports on every "
      "node and writes nothing. Apply it with `kubectl feedguard explain " +
          pod.name + " -n " + pod.ns +
          " | kubectl apply -f -`, read `kubectl describe fencepolicy " + name +
          "`, then set mode: Enforce.",
      &intro);
  for (const auto& l : intro) out += "# " + l + "\n";
  out += RenderPolicyYaml(*policy);
  return out;
}

Json ExplainJson(const ReportPod& pod, const PolicySuggestion* policy) {
  Json j = Json::object();
  j["pod"] = pod.raw;
  j["suggestedPolicy"] = policy != nullptr ? policy->policy : Json();
  Json notes = Json::array();
  if (policy != nullptr) {
    for (const auto& n : policy->notes) notes.push_back(n);
    if (!policy->neighbours_comment.empty()) notes.push_back(policy->neighbours_comment);
  } else {
    notes.push_back("The pod no longer exists: no FencePolicy can be built from its labels.");
  }
  j["notes"] = std::move(notes);
  const Contender* main = MainContender(pod);
  j["mainContender"] = main != nullptr ? ContenderJson(*main) : Json();
  std::string advice;
  for (const auto& l : NodeContenderAdvice(pod)) advice += (advice.empty() ? "" : " ") + l;
  j["advice"] = advice.empty() ? Json::array() : Json::array({advice});
  return j;
}

AbsenceExplained ExplainAbsence(const StarvationReport& report, std::string_view ns,
                                std::string_view name, const std::optional<Json>& pod) {
  const std::string who = "pod " + std::string(ns) + "/" + std::string(name);
  if (!pod) return {Absence::kPodNotFound, who + " not found"};
  if (!IsGpuPod(*pod)) {
    return {Absence::kNotAGpuPod,
            who +
                " is not in the StarvationReport: it is not a GPU pod (no GPU resource such as "
                "nvidia.com/gpu in its containers' limits, and no DRA ResourceClaim), and "
                "feedguard observes GPU pods only."};
  }
  const Json& spec = JsonMember(*pod, "spec");
  const std::string node = JsonStringOr(spec, "nodeName", "");
  const std::string phase = JsonStringOr(JsonMember(*pod, "status"), "phase", "");
  if (node.empty()) {
    return {Absence::kNotRunning,
            who +
                " is not in the StarvationReport: it is not observed, because it is not on a "
                "node yet (not scheduled)."};
  }
  if (phase == "Succeeded" || phase == "Failed") {
    return {Absence::kNotRunning,
            who +
                " is not in the StarvationReport: it is not observed, because it has ended "
                "(phase " +
                phase + ")."};
  }
  if (!report.has_status) {
    return {Absence::kNoReportYet,
            who +
                " is not in the StarvationReport: no agent has reported yet (the report has no "
                "status)."};
  }
  // The report lists only starving pods (>= kStarvingWaitPercent % of 10 min), the worst 50; its
  // nodes are every node whose agent reported observations, the worst 20.
  const ReportNode* reporting = nullptr;
  for (const auto& n : report.nodes) {
    if (n.name == node) reporting = &n;
  }
  const bool nodes_complete = report.nodes.size() < static_cast<size_t>(kReportMaxNodes);
  const std::string cap_note =
      report.cluster.gpu_pods_not_observed > 0
          ? " (unless it is one of the " + std::to_string(report.cluster.gpu_pods_not_observed) +
                " GPU pods over their node's --max-observed-pods, not observed)"
          : "";
  if (reporting == nullptr && nodes_complete) {
    return {Absence::kNotObserved,
            who +
                " is not in the StarvationReport: it is not observed, because no agent on its "
                "node " +
                node +
                " has reported observations (the agent not running there, or observation off)."};
  }
  if (report.pods.size() >= static_cast<size_t>(kReportMaxPods)) {
    return {Absence::kNotAmongWorst,
            who + " is not among the " + std::to_string(kReportMaxPods) +
                " GPU pods with the most wait behind others; it did not starve noticeably" +
                cap_note + "."};
  }
  if (reporting != nullptr) {
    return {Absence::kNotStarving,
            who +
                " is not in the StarvationReport: it did not starve noticeably (waited behind "
                "others less than " +
                StarvingPercent() + " of the last 10 min; its node " + node + " reports " +
                std::to_string(reporting->gpu_pods) + " GPU pods, " +
                std::to_string(reporting->starving_pods) + " starving)" + cap_note + "."};
  }
  return {Absence::kNotReported, who +
                                     " is not in the StarvationReport: it did not starve "
                                     "noticeably (waited behind others less "
                                     "than " +
                                     StarvingPercent() +
                                     " of the last 10 min), or no agent on its node " + node +
                                     " observes it" + cap_note + "."};
}

}  // namespace feedguard::plugin
