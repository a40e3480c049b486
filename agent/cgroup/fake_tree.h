// fake_tree.h — test helper: plain directories that look like cgroup directories (interface
// files with kernel defaults), so Cgroups, the enforcer and the kubelet stand-in can run in a
// temp dir without root; and knob writes the production way (the knob table, knobs.h) for tests
// of fake or real trees. Test-only (library fg_cgroup_testing).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

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

// A Cgroups that passes every call on to `inner`: tests derive from it and override the calls they
// count or change (a kernel rule the plain-file fake lacks, say).
class ForwardingCgroups : public Cgroups {
 public:
  explicit ForwardingCgroups(CgroupsPtr inner) : inner_(std::move(inner)) {}
  const CgroupLayout& layout() const override { return inner_->layout(); }
  Result<ResolvedPod> ResolvePod(const PodIdentity& pod) const override {
    return inner_->ResolvePod(pod);
  }
  bool IsKubeletOwned(const std::string& dir) const override { return inner_->IsKubeletOwned(dir); }
  std::vector<std::string> KnobFiles(const CgroupPaths& dirs, Knob knob) const override {
    return inner_->KnobFiles(dirs, knob);
  }
  Result<std::string> ReadRaw(const std::string& file) const override {
    return inner_->ReadRaw(file);
  }
  Status WriteRaw(const std::string& file, std::string_view bytes) override {
    return inner_->WriteRaw(file, bytes);
  }
  Result<CpuSet> ReadEffectiveCpus(const CgroupPaths& dirs) const override {
    return inner_->ReadEffectiveCpus(dirs);
  }
  Result<std::vector<FileWrite>> PlanCpusetTree(const CgroupPaths& dirs, Knob knob,
                                                const CpuSet& target) const override {
    return inner_->PlanCpusetTree(dirs, knob, target);
  }
  Result<std::vector<std::string>> CpusetTreeFiles(const CgroupPaths& dirs,
                                                   Knob knob) const override {
    return inner_->CpusetTreeFiles(dirs, knob);
  }
  Result<std::vector<std::string>> ChildDirs(const std::string& dir) const override {
    return inner_->ChildDirs(dir);
  }
  Status ApplyWrites(const std::vector<FileWrite>& writes) override {
    return inner_->ApplyWrites(writes);
  }
  Result<CpuUsage> ReadUsage(const CgroupPaths& dirs) const override {
    return inner_->ReadUsage(dirs);
  }
  Result<std::optional<CpuPressure>> ReadPressure(const CgroupPaths& dirs) const override {
    return inner_->ReadPressure(dirs);
  }
  Result<std::vector<int>> ListPids(const CgroupPaths& dirs) const override {
    return inner_->ListPids(dirs);
  }

 private:
  CgroupsPtr inner_;
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
