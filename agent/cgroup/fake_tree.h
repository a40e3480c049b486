// fake_tree.h — test helper: plain directories that look like cgroup directories (interface
// files with kernel defaults), so Cgroups, the enforcer and the kubelet stand-in can run in a
// temp dir without root; and knob writes the production way (the knob table, knobs.h) for tests
// of fake or real trees. Test-only (library fg_cgroup_testing).
#pragma once

#include <string>
#include <string_view>

#include "agent/cgroup/cgroups.h"
#include "agent/cgroup/kernel_facts.h"
#include "agent/cgroup/knobs.h"
#include "feedguard/common/status.h"

namespace feedguard::agent::cgroup {

struct FakeCgroupOptions {
  bool cpu_idle = true;  // create cpu.idle (false: a kernel older than 5.15)
  bool burst = true;
  bool psi = true;  // v2 only: cpu.pressure
  std::string cpus = "0-3";
  std::string mems = "0";
};

// Whole file as bytes ("" if it cannot be read); replaces a file's bytes (creates it if
// missing). For tests that look at cgroup files, fake or real.
std::string Slurp(const std::string& path);
void Put(const std::string& path, const std::string& data);

// Creates `dir` (and missing parents, each populated too) with the files a fresh cgroup has.
// v1: `controller` is "cpu", "cpuacct" or "cpuset" (the mount the dir is under); v2: ignored.
Status MakeFakeCgroupDir(const std::string& dir, CgroupVersion version, std::string_view controller,
                         const FakeCgroupOptions& options = {});

// A layout whose mounts are plain dirs under `root` (created and populated):
// v1 → root/cpu, root/cpuacct, root/cpuset; v2 → root/unified. Capabilities from `options`.
Result<CgroupLayout> MakeFakeLayout(const std::string& root, CgroupVersion version,
                                    KubeletDriver driver, std::string_view cgroup_root,
                                    const FakeCgroupOptions& options = {});

// The knob table's writes (CpuKnobWrites) that make `cpu_dir` hold `want`, current bytes read
// through `cgroups.ReadRaw`, kept as the enforcer keeps them: a write that leaves the file as it
// is, is dropped unless forced or the file was written earlier in the same plan. For tests that
// set CPU knobs, on fake or real trees, the way the agent does.
Result<std::vector<FileWrite>> PlanKnobs(const Cgroups& cgroups, const std::string& cpu_dir,
                                         const CpuKnobs& want);
// PlanKnobs, then Cgroups::ApplyWrites (the first failure, with its code, is returned).
Status SetKnobs(Cgroups& cgroups, const std::string& cpu_dir, const CpuKnobs& want);
// PlanCpusetTree, then Cgroups::ApplyWrites: `dirs.cpuset` and every cpuset below it to `target`.
Status ApplyCpusetTree(Cgroups& cgroups, const CgroupPaths& dirs, Knob knob, const CpuSet& target);

}  // namespace feedguard::agent::cgroup
