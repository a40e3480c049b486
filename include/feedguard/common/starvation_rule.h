// starvation_rule.h — what counts as a starving GPU pod (docs/DESIGN.md §4b), one rule for the
// controller's StarvationReport and the kubectl plugin that reads it.
//
// Starving: its feeders waited for a CPU at least kStarvingWaitPercent % of the time a window
// covers (the 10 min window decides). Not 1 %: on a real node a busy pod that fits its request
// still waits ~1 % in scheduling latency behind the node's own processes (measured: a one-thread
// pod with a 1-CPU request on a 2-CPU kubelet node, node tier), which is noise, not starvation;
// the starving trainers measured wait 10-50 %.
#pragma once

namespace feedguard {

inline constexpr int kStarvingWaitPercent = 5;
inline constexpr double kStarvingWaitFraction = kStarvingWaitPercent / 100.0;

}  // namespace feedguard
