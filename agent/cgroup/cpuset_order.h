// cpuset_order.h — pure ordering of cpuset writes over a cgroup subtree so that cgroup v1's
// rules hold at every step: a child must be a subset of its parent (else EACCES) and a parent
// may not drop CPUs a child still uses (else EBUSY). Grow parents first, shrink children first;
// a mixed change grows every dir to (current ∪ target) top-down, then sets target bottom-up.
#pragma once

#include <string>
#include <vector>

#include "agent/cgroup/cgroups.h"
#include "common/cpuset.h"

namespace feedguard::agent::cgroup {

struct CpusetNode {
  std::string file;  // absolute path of the cpuset.cpus / cpuset.mems file
  int parent = -1;   // index into the vector; -1 for the subtree's top. Parents precede children.
  CpuSet current;
};

// The ordered writes that bring every node to `target`. Nodes already at `target` are never
// written; each node is written at most twice (union, then target).
std::vector<FileWrite> PlanCpusetWrites(const std::vector<CpusetNode>& nodes, const CpuSet& target);

}  // namespace feedguard::agent::cgroup
