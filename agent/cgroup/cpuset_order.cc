#include "agent/cgroup/cpuset_order.h"

namespace feedguard::agent::cgroup {

std::vector<FileWrite> PlanCpusetWrites(const std::vector<CpusetNode>& nodes,
                                        const CpuSet& target) {
  std::vector<FileWrite> writes;
  std::vector<CpuSet> state;
  state.reserve(nodes.size());
  for (const auto& n : nodes) state.push_back(n.current);

  // Phase 1, top-down (parents precede children in `nodes`): grow each dir that lacks some of
  // `target` to current ∪ target. The parent already holds the child's union, so each write is a
  // subset of the parent and only adds CPUs (no child can be stranded).
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (target.IsSubsetOf(state[i])) continue;
    state[i] = state[i].Union(target);
    writes.push_back({nodes[i].file, state[i].ToString()});
  }
  // Phase 2, bottom-up: shrink each dir to exactly `target`. Its children are already `target`.
  for (size_t i = nodes.size(); i-- > 0;) {
    if (state[i] == target) continue;
    state[i] = target;
    writes.push_back({nodes[i].file, target.ToString()});
  }
  return writes;
}

}  // namespace feedguard::agent::cgroup
