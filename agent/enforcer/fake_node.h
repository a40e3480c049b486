// fake_node.h — test helper: a node's kubelet-shaped cgroup tree as plain files in a temp dir
// (cgroup v1 or v2, systemd or cgroupfs driver), pods added the way kubelet lays them out, plus
// the byte-level file helpers the enforcer, watcher and engine tests share. Test-only (library
// fg_enforcer_testing); removes its temp dir when destroyed.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "agent/cgroup/cgroups.h"
#include "agent/cgroup/fake_tree.h"
#include "agent/planner/plan.h"

namespace feedguard::agent::testutil {

using cgroup::Put;
using cgroup::Slurp;

class FakeNode {
 public:
  FakeNode(cgroup::CgroupVersion version, cgroup::KubeletDriver driver, bool cpu_idle = true);
  ~FakeNode();
  FakeNode(const FakeNode&) = delete;
  FakeNode& operator=(const FakeNode&) = delete;

  // Creates the pod's cgroup dirs (and one containerd container per id) and returns its identity.
  PodIdentity AddPod(const std::string& uid, QosClass qos, std::vector<std::string> ids,
                     const std::string& ns = "default");
  // Creates `rel` (relative to each controller mount) with a fresh cgroup's files.
  void MakeDirs(const std::string& rel);

  // A file in the pod's dir (or `sub`, e.g. ContainerSub(id)) under the cpu / cpuacct / cpuset
  // mount (all one dir on v2).
  std::string CpuFile(const PodIdentity& p, const std::string& file,
                      const std::string& sub = "") const;
  std::string CpuacctFile(const PodIdentity& p, const std::string& file,
                          const std::string& sub = "") const;
  std::string CpusetFile(const PodIdentity& p, const std::string& file,
                         const std::string& sub = "") const;
  std::string ContainerSub(const std::string& id) const;

  // Every regular file under the tree (not the state dir), path → bytes.
  std::map<std::string, std::string> Snapshot() const;

  std::string state_dir() const { return root_ + "/state"; }
  const cgroup::CgroupsPtr& cgroups() const { return cgroups_; }
  const cgroup::CgroupLayout& layout() const { return layout_; }

 private:
  std::string PodFile(const std::string& mount, const PodIdentity& p, const std::string& file,
                      const std::string& sub) const;

  cgroup::CgroupVersion version_;
  cgroup::KubeletDriver driver_;
  std::string root_;
  cgroup::FakeCgroupOptions options_;
  cgroup::CgroupLayout layout_;
  cgroup::CgroupsPtr cgroups_;
};

}  // namespace feedguard::agent::testutil
