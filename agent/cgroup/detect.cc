#include "agent/cgroup/detect.h"

#include <sys/stat.h>
#include <sys/statfs.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>

#include "agent/cgroup/fs_cgroups.h"
#include "common/file_kind.h"
#include "common/yaml_bounds.h"

namespace feedguard::agent::cgroup {
namespace {

std::string Join(const std::string& dir, std::string_view rel) {
  if (rel.empty()) return dir;
  return dir + "/" + std::string(rel);
}

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string Unescape(std::string_view s) {
  auto oct = [](char c) { return c >= '0' && c <= '7'; };
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && oct(s[i + 1]) && oct(s[i + 2]) && oct(s[i + 3])) {
      out.push_back(
          static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0')));
      i += 3;
      continue;
    }
    out.push_back(s[i]);
  }
  return out;
}

std::vector<std::string> Split(std::string_view s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(sep, start);
    if (end == std::string_view::npos) end = s.size();
    out.emplace_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

bool HasToken(const std::vector<std::string>& v, std::string_view t) {
  return std::find(v.begin(), v.end(), t) != v.end();
}

}  // namespace

Result<std::vector<MountEntry>> ParseMountInfo(std::string_view text) {
  std::vector<MountEntry> out;
  std::istringstream in{std::string(text)};
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty()) continue;
    // id parent maj:min root mount-point mount-options [optional...] - fstype source super-options
    std::istringstream ls(line);
    std::vector<std::string> f;
    std::string tok;
    while (ls >> tok) f.push_back(tok);
    auto dash = std::find(f.begin(), f.end(), "-");
    if (f.size() < 6 || dash == f.end() || f.end() - dash < 4) {
      return InvalidArgument("mountinfo line " + std::to_string(lineno) + " malformed: " + line);
    }
    MountEntry e;
    e.mount_point = Unescape(f[4]);
    e.fs_type = *(dash + 1);
    e.super_options = Split(*(dash + 3), ',');
    out.push_back(std::move(e));
  }
  return out;
}

Result<CgroupVersion> VersionByMagic(const std::string& path) {
  struct statfs st;
  if (::statfs(path.c_str(), &st) != 0) {
    int err = errno;
    if (err == ENOENT) return NotFound("no such mount " + path);
    return Internal("statfs " + path + ": " + std::strerror(err));
  }
  const auto magic = static_cast<int64_t>(st.f_type);
  if (magic == kCgroupSuperMagic) return CgroupVersion::kV1;
  if (magic == kCgroup2SuperMagic) return CgroupVersion::kV2;
  return FailedPrecondition(path + " is not a cgroup filesystem (statfs magic 0x" + [&] {
    std::ostringstream o;
    o << std::hex << magic;
    return o.str();
  }() + ")");
}

Result<KubeletDriver> DriverFromKubeletConfig(const std::string& path) {
  if (!PathExists(path)) return NotFound("no kubelet config at " + path);
  // A KubeletConfiguration is a few KB: bounded like any YAML we did not write.
  static constexpr YamlLimits kKubeletConfigLimits{.max_input_bytes = 1u << 20,
                                                   .max_nodes = 100'000,
                                                   .max_expanded_bytes = 4u << 20,
                                                   .max_depth = 64};
  auto loaded = LoadYamlFileBounded(path, kKubeletConfigLimits);
  if (!loaded.ok()) {
    return loaded.status().code() == StatusCode::kNotFound
               ? loaded.status()
               : InvalidArgument("kubelet config " + loaded.status().message());
  }
  try {
    const YAML::Node& root = *loaded;
    if (!root.IsMap() || !root["cgroupDriver"]) {
      return NotFound("kubelet config " + path + " has no cgroupDriver");
    }
    auto d = ParseDriver(root["cgroupDriver"].as<std::string>());
    if (!d.ok()) return d.status().Annotate(path);
    return d;
  } catch (const YAML::Exception& e) {
    return InvalidArgument("kubelet config " + path + ": " + e.what());
  }
}

Capabilities ProbeCapabilities(const CgroupLayout& layout) {
  // Look in the most specific existing dir: interface files like cpu.idle are absent from the
  // v2 root cgroup.
  std::string dir = layout.cpu_mount;
  for (const auto& rel : QosTierRelPaths(layout.driver, layout.cgroup_root)) {
    if (IsDir(Join(layout.cpu_mount, rel))) {
      dir = Join(layout.cpu_mount, rel);
      break;
    }
  }
  if (dir == layout.cpu_mount && !layout.cgroup_root.empty() &&
      IsDir(Join(layout.cpu_mount, layout.cgroup_root))) {
    dir = Join(layout.cpu_mount, layout.cgroup_root);
  }
  Capabilities c;
  const bool v1 = layout.version == CgroupVersion::kV1;
  c.cpu_idle = PathExists(Join(dir, v1 ? v1::kIdle : v2::kIdle));
  c.burst = PathExists(Join(dir, v1 ? v1::kCfsBurstUs : v2::kMaxBurst));
  if (PathExists(Join(dir, v1 ? v1::kCpuPressure : v2::kCpuPressure))) {
    // With psi=0 on the command line the file exists but cannot be read.
    c.psi = ReadCgroupFile(Join(dir, v1 ? v1::kCpuPressure : v2::kCpuPressure)).ok();
  }
  return c;
}

Result<CgroupLayout> DetectLayout(const CgroupOptions& o) {
  CgroupLayout l;
  l.cgroup_root = NormalizeCgroupRoot(o.cgroup_root);
  l.runtime = o.runtime;

  // 1. Mounts. Overrides first, the rest from mountinfo.
  std::string cpu = o.cpu_mount, cpuacct = o.cpuacct_mount, cpuset = o.cpuset_mount;
  std::string unified = o.unified_mount;
  const bool need_mountinfo = o.version == CgroupVersion::kV2
                                  ? (cpu.empty() && unified.empty())
                                  : (cpu.empty() || cpuacct.empty() || cpuset.empty());
  if (need_mountinfo) {
    auto text = ReadCgroupFile(o.mountinfo_path);
    if (!text.ok()) return text.status().Annotate("reading mountinfo");
    FG_ASSIGN_OR_RETURN(auto mounts, ParseMountInfo(*text));
    std::string v1cpu, v1cpuacct, v1cpuset;
    for (const auto& m : mounts) {
      if (m.fs_type == kFsTypeV1) {
        if (v1cpu.empty() && HasToken(m.super_options, kControllerCpu)) v1cpu = m.mount_point;
        if (v1cpuacct.empty() && HasToken(m.super_options, kControllerCpuacct)) {
          v1cpuacct = m.mount_point;
        }
        if (v1cpuset.empty() && HasToken(m.super_options, kControllerCpuset)) {
          v1cpuset = m.mount_point;
        }
      } else if (m.fs_type == kFsTypeV2 && unified.empty()) {
        unified = m.mount_point;
      }
    }
    // A v1 cpu controller wins: on a hybrid host the cgroup2 mount has no cpu controller.
    const bool use_v1 = o.version ? *o.version == CgroupVersion::kV1 : !v1cpu.empty();
    if (use_v1) {
      if (cpu.empty()) cpu = v1cpu;
      if (cpuacct.empty()) cpuacct = v1cpuacct;
      if (cpuset.empty()) cpuset = v1cpuset;
      if (cpu.empty()) return NotFound("no cgroup v1 cpu controller mount in " + o.mountinfo_path);
      if (cpuacct.empty()) return NotFound("no cgroup v1 cpuacct mount in " + o.mountinfo_path);
      if (cpuset.empty()) return NotFound("no cgroup v1 cpuset mount in " + o.mountinfo_path);
    } else {
      if (unified.empty()) return NotFound("no cgroup mount with a cpu controller found");
    }
  }
  if (o.version == CgroupVersion::kV2 || (!o.version && cpu.empty())) {
    if (cpu.empty()) cpu = unified;
    cpuacct = cpuset = cpu;
  }
  while (cpu.size() > 1 && cpu.back() == '/') cpu.pop_back();
  while (cpuacct.size() > 1 && cpuacct.back() == '/') cpuacct.pop_back();
  while (cpuset.size() > 1 && cpuset.back() == '/') cpuset.pop_back();
  l.cpu_mount = cpu;
  l.cpuacct_mount = cpuacct;
  l.cpuset_mount = cpuset;

  // 2. Version: forced, or by statfs magic per controller (they must agree).
  if (o.version) {
    l.version = *o.version;
  } else {
    FG_ASSIGN_OR_RETURN(l.version, VersionByMagic(cpu));
    for (const std::string* m : {&cpuacct, &cpuset}) {
      FG_ASSIGN_OR_RETURN(CgroupVersion v, VersionByMagic(*m));
      if (v != l.version) {
        return FailedPrecondition(
            "cpu controller is cgroup " + std::string(CgroupVersionName(l.version)) + " but " + *m +
            " is " + std::string(CgroupVersionName(v)) + "; mixed hierarchies are not supported");
      }
    }
    if (l.version == CgroupVersion::kV2) {
      auto ctrls = ReadCgroupFile(Join(cpu, v2::kControllers));
      if (ctrls.ok()) {
        std::istringstream in(*ctrls);
        std::vector<std::string> names;
        std::string n;
        while (in >> n) names.push_back(n);
        if (!HasToken(names, kControllerCpu) || !HasToken(names, kControllerCpuset)) {
          return FailedPrecondition(cpu + " (cgroup v2) lacks the cpu or cpuset controller");
        }
      }
    }
  }

  // 3. Driver: forced, or from what exists, with the kubelet config as the tie-breaker.
  if (o.driver) {
    l.driver = *o.driver;
  } else {
    const bool systemd = IsDir(Join(cpu, KubepodsRelPath(KubeletDriver::kSystemd, l.cgroup_root)));
    const bool cgroupfs =
        IsDir(Join(cpu, KubepodsRelPath(KubeletDriver::kCgroupfs, l.cgroup_root)));
    if (systemd != cgroupfs) {
      l.driver = systemd ? KubeletDriver::kSystemd : KubeletDriver::kCgroupfs;
    } else if (!o.kubelet_config_path.empty()) {
      auto d = DriverFromKubeletConfig(o.kubelet_config_path);
      if (!d.ok()) return d.status().Annotate("cannot tell the kubelet cgroup driver");
      l.driver = *d;
    } else {
      return NotFound(std::string(systemd ? "both " : "neither ") +
                      Join(cpu, KubepodsRelPath(KubeletDriver::kSystemd, l.cgroup_root)) +
                      (systemd ? " and " : " nor ") +
                      Join(cpu, KubepodsRelPath(KubeletDriver::kCgroupfs, l.cgroup_root)) +
                      " exist(s) and no kubelet config was given: set the cgroup driver");
    }
  }

  // 4. Capabilities.
  l.caps = ProbeCapabilities(l);
  return l;
}

}  // namespace feedguard::agent::cgroup
