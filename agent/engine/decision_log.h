// decision_log.h — what the agent decided for each pod, said once.
//
// An operator reading the agent's log at info level sees every decision the node made, each
// once, naming the pod and the reason: a pod fenced (and how: Idle, a weight, a quota, a cpuset,
// cores for a trainer), a fence lifted while kubelet resizes the pod in place and put back after,
// a fence re-applied after another writer (kubelet, runc) rewrote a file, a pod that could not
// be fenced (why), and a fence withdrawn (how many files were restored). The periodic report and
// the overwrite sweep re-judge the node often; only changes are said, never once per sweep.
//
// Pure: Observe() is handed what the enforcer reported and returns the lines; the engine writes
// them to its logger.
//
// Example:
//   DecisionLog log;
//   for (const auto& d : log.Observe(plan, enforcer->Apply(plan), enforcer->OverwriteCounts()))
//     d.warn ? logger->warn(d.text) : logger->info(d.text);
//   // "pod batch/spin-1 (policy vision): neighbour fenced: Idle (cpu.idle=1)"
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "agent/enforcer/enforcer.h"
#include "agent/planner/plan.h"

namespace feedguard::agent {

struct Decision {
  bool warn = false;  // the pod is not fenced for a reason an operator must act on
  std::string text;
};

class DecisionLog {
 public:
  // What changed since the last call, for every pod of `report` (enforced pods and why not) and
  // every pod whose files `report` restored; `overwrites`: the enforcer's counts per pod uid.
  // `plan` is the one `report` applied (it says what each fence is).
  std::vector<Decision> Observe(const Plan& plan, const ApplyReport& report,
                                const std::map<std::string, uint64_t>& overwrites);

 private:
  struct Seen {
    std::string name;     // "ns/name"
    std::string verdict;  // what was said last: "fenced: <how>" or the reason
    uint64_t overwrites = 0;
  };
  std::map<std::string, Seen> seen_;  // pod uid → last said
};

}  // namespace feedguard::agent
