// starvation_report.h — the StarvationReport's status (crds/starvationreport.yaml) from what the
// agents saw (StarvationBook): the starving GPU pods worst first with their windows and named
// contenders, the worst nodes and namespaces, the cluster's totals. Pure.
//
// Order: GPU time lost over 10 min (the estimate) where NVML read the pod's GPUs, else its wait
// over 10 min (which bounds that loss from above); then wait; then namespace/name.
// A pod, contender or node the controller's cache no longer knows keeps its uid and an empty
// name (it went away since the agent sampled it).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include <set>

#include "controller/observe/starvation_book.h"
#include "feedguard/common/starvation.h"

namespace feedguard::controller {

struct PodName {
  std::string ns, name;
  int64_t cpu_request_milli = 0;
};
// The pods of `uids` the controller knows on `node`, by uid (unknown ones left out). Asked per
// node for its observed pods and the contenders of its starving ones only: naming every pod of
// every reporting node each pass held ~10 MB at 2,000 nodes (bench/results/scale-observe.md).
using PodNamer = std::function<std::map<std::string, PodName>(const std::string& node,
                                                              const std::set<std::string>& uids)>;

struct StarvationReportLimits {
  size_t pods = kStarvationReportMaxPods;
  size_t nodes = kStarvationReportMaxNodes;
  size_t namespaces = kStarvationReportMaxNamespaces;
};

// `not_observed`: GPU pods over the per-node cap (--max-observed-pods), cluster-wide. The
// result has no `updated` (the writer stamps it when it writes).
nlohmann::json RenderStarvationStatus(const std::map<std::string, SeenNode>& nodes,
                                      const PodNamer& names, size_t not_observed,
                                      const StarvationReportLimits& limits = {});

}  // namespace feedguard::controller
