#include "agent/cgroup/fake_tree.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

namespace feedguard::agent::cgroup {
namespace {

Status PutFile(const std::string& path, const std::string& content) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) return OkStatus();  // keep what a test wrote
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << content;
  out.close();
  if (!out) return Internal("cannot create fake cgroup file " + path);
  return OkStatus();
}

Status MakeOne(const std::string& dir, CgroupVersion version, std::string_view controller,
               const FakeCgroupOptions& o) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return Internal("mkdir " + dir + ": " + std::strerror(errno));
  }
  std::vector<std::pair<std::string_view, std::string>> files;
  if (version == CgroupVersion::kV2) {
    files = {{v2::kWeight, "100\n"},
             {v2::kMax, "max 100000\n"},
             {v2::kCpusetCpus, "\n"},
             {v2::kCpusetMems, "\n"},
             {v2::kCpusetCpusEffective, o.cpus + "\n"},
             {v2::kCpusetMemsEffective, o.mems + "\n"},
             {v2::kCpuStat,
              "usage_usec 0\nuser_usec 0\nsystem_usec 0\nnr_periods 0\n"
              "nr_throttled 0\nthrottled_usec 0\n"},
             {v2::kProcs, ""},
             {v2::kControllers, "cpuset cpu\n"}};
    // As the kernel and its managers leave them: controllers on for the children of a dir that
    // has some, off in a leaf (a container's cgroup).
    files.push_back({v2::kSubtreeControl, ""});
    const std::string parent = dir.substr(0, dir.find_last_of('/'));
    const std::string parent_sub = parent + "/" + std::string(v2::kSubtreeControl);
    struct stat st;
    if (::stat((parent + "/" + std::string(v2::kControllers)).c_str(), &st) == 0 &&
        ::stat(parent_sub.c_str(), &st) == 0 && st.st_size == 0) {
      std::ofstream out(parent_sub, std::ios::binary | std::ios::trunc);
      out << "cpuset cpu\n";
      if (!out) return Internal("cannot write fake cgroup file " + parent_sub);
    }
    if (o.cpu_idle) files.push_back({v2::kIdle, "0\n"});
    if (o.burst) files.push_back({v2::kMaxBurst, "0\n"});
    if (o.psi) {
      files.push_back({v2::kCpuPressure,
                       "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
                       "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"});
    }
  } else if (controller == kControllerCpu) {
    files = {{v1::kShares, "1024\n"},
             {v1::kCfsQuotaUs, "-1\n"},
             {v1::kCfsPeriodUs, "100000\n"},
             {v1::kCpuStat, "nr_periods 0\nnr_throttled 0\nthrottled_time 0\n"},
             {v1::kProcs, ""},
             {v1::kTasks, ""}};
    if (o.cpu_idle) files.push_back({v1::kIdle, "0\n"});
    if (o.burst) files.push_back({v1::kCfsBurstUs, "0\n"});
  } else if (controller == kControllerCpuacct) {
    files = {{v1::kCpuacctUsage, "0\n"}, {v1::kProcs, ""}, {v1::kTasks, ""}};
  } else if (controller == kControllerCpuset) {
    files = {{v1::kCpusetCpus, o.cpus + "\n"},
             {v1::kCpusetMems, o.mems + "\n"},
             {v1::kCpusetEffectiveCpus, o.cpus + "\n"},
             {v1::kProcs, ""},
             {v1::kTasks, ""}};
  } else {
    return InvalidArgument("unknown v1 controller \"" + std::string(controller) + "\"");
  }
  for (const auto& [name, content] : files) {
    FG_RETURN_IF_ERROR(PutFile(dir + "/" + std::string(name), content));
  }
  return OkStatus();
}

}  // namespace

Status MakeFakeCgroupDir(const std::string& dir, CgroupVersion version, std::string_view controller,
                         const FakeCgroupOptions& options) {
  if (dir.empty() || dir[0] != '/') return InvalidArgument("fake cgroup dir must be absolute");
  // Create and populate each missing ancestor below the first existing one.
  std::vector<std::string> missing;
  std::string d = dir;
  for (int i = 0; i < 64 && !d.empty(); ++i) {
    struct stat st;
    if (::stat(d.c_str(), &st) == 0) break;
    missing.push_back(d);
    d = d.substr(0, d.find_last_of('/'));
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    FG_RETURN_IF_ERROR(MakeOne(*it, version, controller, options));
  }
  return MakeOne(dir, version, controller, options);
}

Result<CgroupLayout> MakeFakeLayout(const std::string& root, CgroupVersion version,
                                    KubeletDriver driver, std::string_view cgroup_root,
                                    const FakeCgroupOptions& options) {
  CgroupLayout l;
  l.version = version;
  l.driver = driver;
  l.cgroup_root = NormalizeCgroupRoot(cgroup_root);
  if (version == CgroupVersion::kV2) {
    l.cpu_mount = l.cpuacct_mount = l.cpuset_mount = root + "/unified";
    FG_RETURN_IF_ERROR(MakeFakeCgroupDir(l.cpu_mount, version, "", options));
  } else {
    l.cpu_mount = root + "/cpu";
    l.cpuacct_mount = root + "/cpuacct";
    l.cpuset_mount = root + "/cpuset";
    FG_RETURN_IF_ERROR(MakeFakeCgroupDir(l.cpu_mount, version, kControllerCpu, options));
    FG_RETURN_IF_ERROR(MakeFakeCgroupDir(l.cpuacct_mount, version, kControllerCpuacct, options));
    FG_RETURN_IF_ERROR(MakeFakeCgroupDir(l.cpuset_mount, version, kControllerCpuset, options));
  }
  l.caps.cpu_idle = options.cpu_idle;
  l.caps.burst = options.burst;
  l.caps.psi = version == CgroupVersion::kV2 && options.psi;
  return l;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void Put(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << data;
}

Result<std::vector<FileWrite>> PlanKnobs(const Cgroups& cgroups, const std::string& cpu_dir,
                                         const CpuKnobs& want) {
  const ReadFn read = [&](const std::string& path) { return cgroups.ReadRaw(path); };
  FG_ASSIGN_OR_RETURN(std::vector<KnobWrite> writes,
                      CpuKnobWrites(cgroups.layout().version, cpu_dir, want, read));
  std::vector<FileWrite> out;
  for (const auto& w : writes) {
    const bool written =
        std::any_of(out.begin(), out.end(), [&](const FileWrite& f) { return f.path == w.path; });
    if (!w.force && !written) {
      FG_ASSIGN_OR_RETURN(std::string cur, read(w.path));
      if (KnobValuesEquivalent(w.path, cur, w.value)) continue;
    }
    out.push_back({w.path, w.value});
  }
  return out;
}

Status SetKnobs(Cgroups& cgroups, const std::string& cpu_dir, const CpuKnobs& want) {
  FG_ASSIGN_OR_RETURN(std::vector<FileWrite> writes, PlanKnobs(cgroups, cpu_dir, want));
  return cgroups.ApplyWrites(writes);
}

Status ApplyCpusetTree(Cgroups& cgroups, const CgroupPaths& dirs, Knob knob, const CpuSet& target) {
  FG_ASSIGN_OR_RETURN(std::vector<FileWrite> writes, cgroups.PlanCpusetTree(dirs, knob, target));
  return cgroups.ApplyWrites(writes);
}

}  // namespace feedguard::agent::cgroup
