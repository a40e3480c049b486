// starvation.h — the StarvationReport's shared facts (docs/DESIGN.md §4b), one owner for the
// controller that writes it (controller/observe) and the kubectl plugin that reads it (plugin/):
// the one object, what counts as starving, how pods rank.
#pragma once

namespace feedguard {

// StarvationReport/cluster (crds/starvationreport.yaml): one cluster-scoped object.
inline constexpr char kStarvationReportResource[] = "starvationreports";
inline constexpr char kStarvationReportName[] = "cluster";
// Its bounds (the CRD's maxItems): the worst pods, nodes and namespaces it lists.
inline constexpr int kStarvationReportMaxPods = 50;
inline constexpr int kStarvationReportMaxNodes = 20;
inline constexpr int kStarvationReportMaxNamespaces = 20;

// Starving: its feeders waited for a CPU behind other workloads (the wait less what it waited
// behind its own threads: agent/observe/starvation.h SplitWait) at least kStarvingWaitPercent %
// of the time a window covers (the 10 min window decides). A pod that waits only behind its own
// threads needs more CPU, not a fence, and is not starving. Not 1 %: on a real node a busy pod that
// fits its request still waits ~1 % in scheduling latency behind the node's own processes
// (measured: a one-thread pod with a 1-CPU request on a 2-CPU kubelet node, node tier), which is
// noise, not starvation; the starving trainers measured wait 10-50 %.
inline constexpr int kStarvingWaitPercent = 5;
inline constexpr double kStarvingWaitFraction = kStarvingWaitPercent / 100.0;

inline bool IsStarving(double wait_s, double covered_s) {
  return covered_s > 0 && wait_s >= kStarvingWaitFraction * covered_s;
}

// What ranks a pod, worst first: its GPU time lost where NVML read its GPUs, else its wait behind
// others, which bounds that loss from above (the GPU cannot have lost more than its feeders
// waited). Ranking a pod with no GPU figure by 0 would put one that waited half its time below any
// measured loss. Ties: more wait behind others first, then namespace/name.
inline double StarvationRankSeconds(bool gpu_sampled, double lost_s, double wait_s) {
  return gpu_sampled ? lost_s : wait_s;
}

}  // namespace feedguard
