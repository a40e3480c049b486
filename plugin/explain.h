// explain.h — `kubectl feedguard explain POD`: one GPU pod's entry in the StarvationReport (its
// windows, contenders per window) said as YAML comments above the FencePolicy that would fence
// those contenders (suggest_policy.h), so that the whole output is one YAML document ready for
// `kubectl apply -f -`; and, for a pod the report does not hold, why not.
//
// Pure: the report, the pod and its contender pods are passed in.
//
// Example:
//   const ReportPod* entry = report.Find("ml", "trainer-0");
//   for (auto& [ns, name] : ContenderPods(*entry)) ...GET each...
//   std::cout << RenderExplain(*entry, SuggestPolicy(input));
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "plugin/report_view.h"
#include "plugin/suggest_policy.h"

namespace feedguard::plugin {

// A pod requests a GPU: a GPU extended resource (the controller's default
// --gpu-resource-names, include/feedguard/common/gpu_resource_names.h) in the limits of one of
// its containers or init containers.
bool IsGpuPod(const nlohmann::json& pod);

// The contender pods named in any of the entry's windows, as (namespace, name), each once, most
// CPU-seconds first (the 10 min window's order, then the others'); the pod itself left out.
std::vector<std::pair<std::string, std::string>> ContenderPods(const ReportPod& pod);

// The top contender of the 10 min window (else the 1 h, else the 1 min one); null when none.
const Contender* MainContender(const ReportPod& pod);

// What to tell about a pod when its node itself is the main contender: host processes cannot be
// fenced by a FencePolicy; kubelet's reservations can keep them apart. Empty when it is not.
std::vector<std::string> NodeContenderAdvice(const ReportPod& pod);

// The explanation as comment lines ("# …") followed by the suggested FencePolicy; `policy` null:
// the pod no longer exists, so no policy (its labels are unknown) — said instead.
std::string RenderExplain(const ReportPod& pod, const PolicySuggestion* policy);

// {pod: <the report's entry>, suggestedPolicy: <policy or null>, notes: [...],
//  mainContender: {kind, namespace, name, cpuSeconds} | null, advice: [...]}
nlohmann::json ExplainJson(const ReportPod& pod, const PolicySuggestion* policy);

// Why the report holds no entry for a pod.
enum class Absence {
  kPodNotFound,    // no such pod (an error: exit 1)
  kNotAGpuPod,     // it requests no GPU: not observed
  kNotRunning,     // not on a node / ended: not observed
  kNoReportYet,    // the report has no status yet
  kNotObserved,    // its node's agent reports no observations (the node is not in status.nodes)
  kNotAmongWorst,  // the report is full (50 starving pods) and this one is not among them
  kNotStarving,  // its node reports, the report has room: it waited < kStarvingWaitPercent % of 10
                 // min
  kNotReported,  // either of the last two: its node is not among the 20 nodes listed
};
std::string_view AbsenceName(Absence a);

struct AbsenceExplained {
  Absence absence;
  std::string message;
};

// `pod`: the pod as the API server has it; nullopt when it does not exist (404).
AbsenceExplained ExplainAbsence(const StarvationReport& report, std::string_view ns,
                                std::string_view name, const std::optional<nlohmann::json>& pod);

}  // namespace feedguard::plugin
