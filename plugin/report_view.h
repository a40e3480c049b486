// report_view.h — the StarvationReport (crds/starvationreport.yaml, docs/DESIGN.md §4b) as
// `kubectl feedguard top` reads it: the object's JSON parsed leniently into plain structs, the
// starving GPU pods ranked worst first, and the ranking rendered as a table or as JSON.
//
// Pure: no I/O; the clock is passed in. A member that is absent or of the wrong type reads as
// zero / empty (the API server validated the object against the CRD; the plugin must still not
// throw on an older or newer controller's report).
//
// Example:
//   auto report = ParseStarvationReport(obj);             // obj: GET …/starvationreports/cluster
//   TopView view = BuildTop(*report, {.ns = "ml", .limit = 20});
//   std::cout << RenderTopTable(*report, view, std::chrono::system_clock::now());
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "feedguard/common/starvation.h"
#include "feedguard/common/status.h"

namespace feedguard::plugin {

using Json = nlohmann::json;

// The report's contract (crds/starvationreport.yaml).
inline constexpr int kReportMaxPods = kStarvationReportMaxPods;    // status.pods maxItems
inline constexpr int kReportMaxNodes = kStarvationReportMaxNodes;  // status.nodes maxItems
// "5%": the rule as the tables and messages say it.
inline std::string StarvingPercent() { return std::to_string(kStarvingWaitPercent) + "%"; }
inline constexpr int64_t kWindow1m = 60;
inline constexpr int64_t kWindow10m = 600;
inline constexpr int64_t kWindow1h = 3600;

// Said when there is no StarvationReport/cluster (HTTP 404).
inline constexpr char kNoReportMessage[] =
    "no StarvationReport yet: is feedguard installed with observation on (helm value "
    "observe.enabled) and has an agent reported?";

struct Contender {
  std::string kind;  // "Pod" or "Node" (system daemons, kubelet, host processes)
  std::string ns;
  std::string name;
  std::string uid;
  double cpu_seconds = 0;
};

// One window of one pod (60 s, 600 s or 3600 s of the newest samples).
struct ReportWindow {
  int64_t seconds = 0;
  double covered_seconds = 0;
  double wait_seconds = 0;
  double wait_fraction = 0;
  std::string wait_source;  // "psi" or "schedstat"
  // Of the wait, the part behind other workloads and of that the pods' part (the whole wait where
  // an older controller wrote none: it did not split the wait).
  double wait_behind_others_seconds = 0;
  double wait_behind_pods_seconds = 0;
  double cpu_seconds = 0;
  double throttled_seconds = 0;
  bool gpu_sampled = false;
  double gpu_busy_fraction = 0;
  double gpu_lost_seconds = 0;
  double gpu_lost_min_seconds = 0;
  double gpu_lost_max_seconds = 0;
  std::vector<Contender> contenders;  // by CPU-seconds, most first
};

struct ReportPod {
  std::string ns;
  std::string name;
  std::string uid;
  std::string node;
  int64_t cpu_request_milli = 0;
  std::string policy;  // the FencePolicy that covers it as a trainer, "" when none
  std::vector<ReportWindow> windows;
  Json raw;  // the entry as the controller wrote it (explain -o json prints it)

  // The window of that many seconds, or null when the report has none.
  const ReportWindow* Window(int64_t seconds) const;
};

struct ClusterTotals {
  int64_t nodes_reporting = 0;
  int64_t gpu_pods = 0;
  int64_t starving_pods = 0;
  int64_t gpu_pods_not_observed = 0;
  double wait_seconds_10m = 0;
  double wait_behind_others_seconds_10m = 0;
  double gpu_lost_seconds_10m = 0;
  double gpu_lost_seconds_1h = 0;
};

// One of the report's worst nodes (status.nodes: every node whose agent reported, worst 20).
struct ReportNode {
  std::string name;
  int64_t gpu_pods = 0;
  int64_t starving_pods = 0;
  double wait_seconds_10m = 0;
  double gpu_lost_seconds_10m = 0;
};

struct StarvationReport {
  bool has_status = false;  // false: the object exists but no controller has written it yet
  std::string updated;      // RFC 3339, as written
  ClusterTotals cluster;
  std::vector<ReportPod> pods;    // in the report's order
  std::vector<ReportNode> nodes;  // worst first

  // The entry for namespace/name, or null.
  const ReportPod* Find(std::string_view ns, std::string_view name) const;
};

// Reads a StarvationReport object (the whole object, as GET returns it). Fails only when `obj`
// is not a JSON object or is of another kind.
Result<StarvationReport> ParseStarvationReport(const Json& obj);

// ---- top ------------------------------------------------------------------------------------

struct TopOptions {
  std::string ns;  // "" = every namespace (-A)
  int limit = 20;  // rows at most; 0 = all
};

struct TopRow {
  const ReportPod* pod = nullptr;
  double wait_fraction_10m = 0;
  double wait_seconds_10m = 0;
  // Of the wait, as fractions of the window: behind other pods, behind the node's processes,
  // behind its own threads (the three add up to wait_fraction_10m).
  double behind_pods_fraction_10m = 0;
  double behind_node_fraction_10m = 0;
  double own_fraction_10m = 0;
  double behind_others_seconds_10m = 0;
  std::optional<double> gpu_lost_10m;  // nullopt: no NVML sample for the pod's GPUs (wait only)
  std::optional<double> gpu_lost_1h;
  std::vector<Contender> contenders;  // the 10 min window's, most CPU-seconds first, at most 3
};

struct TopView {
  std::string ns;  // the filter ("" = all namespaces)
  std::vector<TopRow> rows;
  int starving_elsewhere = 0;  // starving pods in the report that the namespace filter hid
  int omitted_by_limit = 0;    // starving pods past --limit
  bool wait_only = false;      // some row has no GPU figure (no NVML on its node)
};

// Starving over a window: waited behind others at least kStarvingWaitPercent % of the time it
// covers (the controller's rule, feedguard/common/starvation.h IsStarving).
bool Starving(const ReportWindow& w);

// The starving pods (10 min window) of `opts.ns` (or all), worst first in the controller's order
// (controller/observe/starvation_report.h): GPU seconds lost over 10 min (0 where NVML did not
// sample the GPUs), then wait behind others over 10 min, then namespace/name. At most
// `opts.limit` rows.
TopView BuildTop(const StarvationReport& report, const TopOptions& opts);

// The header line: cluster totals and the report's age.
std::string RenderTopHeader(const StarvationReport& report,
                            std::chrono::system_clock::time_point now);
// Header, the table (NAMESPACE POD NODE WAIT% BY-PODS BY-NODE OWN GPU-LOST-10M GPU-LOST-1H TOP
// CONTENDERS: the wait over 10 min and its three parts) and footer lines (the parts, wait only,
// hidden namespaces, limit). Ends with a newline.
std::string RenderTopTable(const StarvationReport& report, const TopView& view,
                           std::chrono::system_clock::time_point now);
// The same as one JSON object with stable camelCase names:
//   {updated, ageSeconds, cluster:{...}, namespace (null = all), pods:[{namespace, name, uid, node,
//    waitFraction10m, waitSeconds10m, waitBehindPodsFraction10m, waitBehindNodeFraction10m,
//    ownWaitFraction10m, waitBehindOthersSeconds10m, gpuSampled, gpuLostSeconds10m,
//    gpuLostSeconds1h (null without NVML), contenders:[{kind, namespace, name, cpuSeconds}]}],
//    starvingElsewhere, omittedByLimit}
Json TopJson(const StarvationReport& report, const TopView& view,
             std::chrono::system_clock::time_point now);

// ---- formatting shared with explain --------------------------------------------------------

// "ns/name (12.3s)" for a Pod, "node (4.1s)" for the node itself, "pod <uid> (1.0s)" for a pod
// the controller could not name (gone when it wrote the report).
std::string ContenderLabel(const Contender& c);
// "12.3s"; minutes from 10 min on ("12m5s"), hours from 1 h ("1h2m").
std::string FormatSeconds(double s);
// "12.3%".
std::string FormatPercent(double fraction);
// kubectl-style age: "45s", "3m12s", "17m", "2h5m", "3d4h".
std::string FormatAge(std::chrono::seconds age);
// RFC 3339 (kube's "2026-11-28T10:00:00Z", fractional seconds and offsets accepted).
std::optional<std::chrono::system_clock::time_point> ParseRfc3339(std::string_view s);
// `text` broken at spaces into lines of at most `width` characters (a longer word stands alone).
std::vector<std::string> WrapText(std::string_view text, size_t width = 96);
// Columns padded to their widest cell, three spaces apart (kubectl's printer); the last column
// is not padded.
std::string RenderColumns(const std::vector<std::vector<std::string>>& rows,
                          std::string_view line_prefix = "");

}  // namespace feedguard::plugin
