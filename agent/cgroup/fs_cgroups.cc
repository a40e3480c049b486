#include "agent/cgroup/fs_cgroups.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "agent/cgroup/cpuset_order.h"
#include "common/file_kind.h"
#include "common/strings.h"

namespace feedguard::agent::cgroup {
namespace {

template <typename T>
Result<T> ParseNumber(std::string_view text, const std::string& what) {
  std::string t(Trim(text));
  T v{};
  auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec != std::errc() || ptr != t.data() + t.size() || t.empty()) {
    return InvalidArgument("cannot parse \"" + t + "\" in " + what + " as a number");
  }
  return v;
}

// Parses "key value" lines (cpu.stat).
std::optional<uint64_t> StatField(std::string_view text, std::string_view key) {
  std::istringstream in{std::string(text)};
  std::string k;
  uint64_t v;
  while (in >> k >> v) {
    if (k == key) return v;
  }
  return std::nullopt;
}

class FsCgroups final : public Cgroups {
 public:
  explicit FsCgroups(CgroupLayout layout) : layout_(std::move(layout)) {
    for (const auto& rel : QosTierRelPaths(layout_.driver, layout_.cgroup_root)) {
      for (const auto* mount :
           {&layout_.cpu_mount, &layout_.cpuacct_mount, &layout_.cpuset_mount}) {
        owned_.push_back(Normal(JoinPath(*mount, rel)));
      }
    }
  }

  const CgroupLayout& layout() const override { return layout_; }

  CgroupPaths PathsFor(const std::string& rel) const {
    return {JoinPath(layout_.cpu_mount, rel), JoinPath(layout_.cpuacct_mount, rel),
            JoinPath(layout_.cpuset_mount, rel)};
  }

  Result<ResolvedPod> ResolvePod(const PodIdentity& pod) const override {
    if (pod.uid.empty() || pod.uid.find('/') != std::string::npos) {
      return InvalidArgument("bad pod uid \"" + pod.uid + "\"");
    }
    ResolvedPod out;
    out.uid = pod.uid;
    const std::string rel = PodRelPath(layout_.driver, layout_.cgroup_root, pod.qos, pod.uid);
    out.dirs = PathsFor(rel);
    for (const std::string* d : {&out.dirs.cpu, &out.dirs.cpuacct, &out.dirs.cpuset}) {
      if (!IsDir(*d)) {
        return NotFound("pod " + pod.ns + "/" + pod.name + " (" + pod.uid + "): no cgroup at " +
                        *d);
      }
    }
    for (const auto& cid : pod.container_ids) {
      FG_ASSIGN_OR_RETURN(ContainerRef ref, ParseContainerId(cid, layout_.runtime));
      std::vector<std::string> names = ContainerLeafNames(layout_.driver, ref);
      std::optional<std::string> found;
      for (const auto& n : names) {
        if (IsDir(JoinPath(out.dirs.cpu, n))) {
          found = n;
          break;
        }
      }
      if (!found) {
        std::string tried;
        for (const auto& n : names)
          tried += (tried.empty() ? "" : ", ") + JoinPath(out.dirs.cpu, n);
        return NotFound("container " + cid + " of pod " + pod.uid + ": no cgroup at " + tried);
      }
      ResolvedContainer rc;
      rc.container_id = cid;
      rc.dirs = PathsFor(rel + "/" + *found);
      for (const std::string* d : {&rc.dirs.cpuacct, &rc.dirs.cpuset}) {
        if (!IsDir(*d)) return NotFound("container " + cid + ": no cgroup at " + *d);
      }
      CgroupPaths child = PathsFor(rel + "/" + *found + "/" + std::string(kCrunContainerChild));
      if (IsDir(child.cpu)) rc.children.push_back(child);
      out.containers.push_back(std::move(rc));
    }
    return out;
  }

  bool IsKubeletOwned(const std::string& dir) const override {
    const std::string d = Normal(dir);
    for (const auto& owned : owned_) {
      // The tier itself, or any ancestor of it (a prefix at a '/' boundary).
      if (d == owned) return true;
      if (owned.size() > d.size() && owned.compare(0, d.size(), d) == 0 && owned[d.size()] == '/') {
        return true;
      }
    }
    return false;
  }

  std::vector<std::string> KnobFiles(const CgroupPaths& d, Knob knob) const override {
    const bool v1 = layout_.version == CgroupVersion::kV1;
    switch (knob) {
      case Knob::kWeight:
        return {JoinPath(d.cpu, v1 ? v1::kShares : v2::kWeight)};
      case Knob::kIdle:
        return {JoinPath(d.cpu, v1 ? v1::kIdle : v2::kIdle)};
      case Knob::kQuota:
        if (v1) return {JoinPath(d.cpu, v1::kCfsQuotaUs), JoinPath(d.cpu, v1::kCfsPeriodUs)};
        return {JoinPath(d.cpu, v2::kMax)};
      case Knob::kBurst:
        return {JoinPath(d.cpu, v1 ? v1::kCfsBurstUs : v2::kMaxBurst)};
      case Knob::kCpusetCpus:
        return {JoinPath(d.cpuset, v1 ? v1::kCpusetCpus : v2::kCpusetCpus)};
      case Knob::kCpusetMems:
        return {JoinPath(d.cpuset, v1 ? v1::kCpusetMems : v2::kCpusetMems)};
    }
    return {};
  }

  Result<std::string> ReadRaw(const std::string& file) const override {
    auto r = ReadCgroupFile(file);
    if (!r.ok() && Basename(file) == kIdle() && IsDir(Dirname(file))) {
      return Status(StatusCode::kUnimplemented, std::string(kIdleMissingMessage) + ": " + file);
    }
    return r;
  }

  Status WriteRaw(const std::string& file, std::string_view bytes) override {
    if (IsKubeletOwned(Dirname(file))) {
      return PermissionDenied("refusing to write " + file +
                              ": kubelet owns the QoS-tier cgroups and rewrites them");
    }
    Status s = WriteCgroupFile(file, bytes);
    if (s.code() == StatusCode::kNotFound && Basename(file) == kIdle() && IsDir(Dirname(file))) {
      return Status(StatusCode::kUnimplemented, std::string(kIdleMissingMessage) + ": " + file);
    }
    return s;
  }

  Result<CpuSet> ReadSet(const std::string& file) const {
    FG_ASSIGN_OR_RETURN(std::string raw, ReadRaw(file));
    auto set = CpuSet::Parse(raw);
    if (!set.ok()) return set.status().Annotate(file);
    return set;
  }

  Result<CpuSet> ReadEffectiveCpus(const CgroupPaths& d) const override {
    return ReadSet(JoinPath(d.cpuset, layout_.version == CgroupVersion::kV1
                                          ? v1::kCpusetEffectiveCpus
                                          : v2::kCpusetCpusEffective));
  }
  // The dir's cpuset file and every one below it, breadth-first (parents before children),
  // with each node's parent index and current set. A dir below without the file is no cpuset
  // of its own (on v2: a child a tenant made in a delegated container cgroup without enabling
  // cpuset in its parent's subtree_control; its tasks use the nearest ancestor's set, and no
  // dir below it can have one either): it and its subtree are skipped, not a failure of the pod
  // (a failure would leave the pod, a Cpuset-fenced neighbour, unconfined).
  Result<std::vector<CpusetNode>> CpusetNodes(const CgroupPaths& d, Knob knob) const {
    if (knob != Knob::kCpusetCpus && knob != Knob::kCpusetMems) {
      return InvalidArgument("cpuset tree wants kCpusetCpus or kCpusetMems");
    }
    const std::string name = Basename(KnobFiles(d, knob)[0]);
    if (!IsDir(d.cpuset)) return NotFound("no cgroup at " + d.cpuset);
    std::vector<CpusetNode> nodes;
    std::vector<std::pair<std::string, int>> queue = {{d.cpuset, -1}};
    constexpr size_t kMaxNodes = 4096;
    for (size_t qi = 0; qi < queue.size(); ++qi) {
      if (nodes.size() >= kMaxNodes)
        return Internal("cgroup tree under " + d.cpuset + " too large");
      const auto [dir, parent] = queue[qi];
      const std::string file = JoinPath(dir, name);
      if (parent >= 0 && !IsRegularFile(file)) continue;
      FG_ASSIGN_OR_RETURN(CpuSet cur, ReadSet(file));
      nodes.push_back({JoinPath(dir, name), parent, cur});
      const int me = static_cast<int>(nodes.size()) - 1;
      FG_ASSIGN_OR_RETURN(std::vector<std::string> children, ChildDirs(dir));
      for (const auto& c : children) queue.push_back({JoinPath(dir, c), me});
    }
    return nodes;
  }

  Result<std::vector<std::string>> CpusetTreeFiles(const CgroupPaths& d, Knob knob) const override {
    FG_ASSIGN_OR_RETURN(std::vector<CpusetNode> nodes, CpusetNodes(d, knob));
    std::vector<std::string> out;
    for (size_t i = TopWritten() ? 0 : 1; i < nodes.size(); ++i) out.push_back(nodes[i].file);
    return out;
  }

  Result<std::vector<FileWrite>> PlanCpusetTree(const CgroupPaths& d, Knob knob,
                                                const CpuSet& target) const override {
    FG_ASSIGN_OR_RETURN(std::vector<CpusetNode> nodes, CpusetNodes(d, knob));
    std::vector<FileWrite> writes = PlanCpusetWrites(nodes, target);
    if (!TopWritten()) {
      // v2 has no subset rule, so the children's writes stand without the top's.
      std::erase_if(writes, [&](const FileWrite& w) { return w.path == nodes.front().file; });
    }
    return writes;
  }

  Result<std::vector<std::string>> ChildDirs(const std::string& dir) const override {
    DIR* dp = ::opendir(dir.c_str());
    if (dp == nullptr) return NotFound("cannot list " + dir + ": " + std::strerror(errno));
    std::vector<std::string> children;
    while (dirent* e = ::readdir(dp)) {
      std::string n = e->d_name;
      if (n == "." || n == "..") continue;
      if (IsDir(JoinPath(dir, n))) children.push_back(n);
    }
    ::closedir(dp);
    std::sort(children.begin(), children.end());
    return children;
  }

  Status ApplyWrites(const std::vector<FileWrite>& writes) override {
    for (size_t i = 0; i < writes.size(); ++i) {
      Status s = WriteRaw(writes[i].path, writes[i].value);
      if (!s.ok()) {
        return s.Annotate("write " + std::to_string(i + 1) + " of " +
                          std::to_string(writes.size()));
      }
    }
    return OkStatus();
  }

  Result<CpuUsage> ReadUsage(const CgroupPaths& d) const override {
    CpuUsage u;
    if (auto idle =
            ReadRaw(JoinPath(d.cpu, layout_.version == CgroupVersion::kV1 ? v1::kIdle : v2::kIdle));
        idle.ok()) {
      u.idle = Trim(*idle) == "1";
    }
    if (layout_.version == CgroupVersion::kV1) {
      const std::string uf = JoinPath(d.cpuacct, v1::kCpuacctUsage);
      FG_ASSIGN_OR_RETURN(std::string usage, ReadRaw(uf));
      FG_ASSIGN_OR_RETURN(u.usage_ns, ParseNumber<uint64_t>(usage, uf));
      FG_ASSIGN_OR_RETURN(std::string stat, ReadRaw(JoinPath(d.cpu, v1::kCpuStat)));
      u.nr_periods = StatField(stat, kStatNrPeriods).value_or(0);
      u.nr_throttled = StatField(stat, kStatNrThrottled).value_or(0);
      u.throttled_ns = StatField(stat, v1::kStatThrottledTime).value_or(0);
      return u;
    }
    const std::string sf = JoinPath(d.cpu, v2::kCpuStat);
    FG_ASSIGN_OR_RETURN(std::string stat, ReadRaw(sf));
    auto usage = StatField(stat, v2::kStatUsageUsec);
    if (!usage) return InvalidArgument(sf + " has no usage_usec");
    u.usage_ns = *usage * 1000;
    u.nr_periods = StatField(stat, kStatNrPeriods).value_or(0);
    u.nr_throttled = StatField(stat, kStatNrThrottled).value_or(0);
    u.throttled_ns = StatField(stat, v2::kStatThrottledUsec).value_or(0) * 1000;
    return u;
  }

  Result<std::optional<CpuPressure>> ReadPressure(const CgroupPaths& d) const override {
    const std::string f = JoinPath(
        d.cpu, layout_.version == CgroupVersion::kV1 ? v1::kCpuPressure : v2::kCpuPressure);
    auto raw = ReadCgroupFile(f);
    if (!raw.ok()) {
      if (raw.status().code() == StatusCode::kNotFound && IsDir(d.cpu)) {
        return std::optional<CpuPressure>();
      }
      // v2 with psi disabled at boot: the file exists but reads fail with EOPNOTSUPP.
      if (raw.status().code() == StatusCode::kUnimplemented) return std::optional<CpuPressure>();
      return raw.status();
    }
    FG_ASSIGN_OR_RETURN(CpuPressure p, ParsePressure(*raw));
    return std::optional<CpuPressure>(p);
  }

  Result<std::vector<int>> ListPids(const CgroupPaths& d) const override {
    const std::string f =
        JoinPath(d.cpu, layout_.version == CgroupVersion::kV1 ? v1::kProcs : v2::kProcs);
    FG_ASSIGN_OR_RETURN(std::string raw, ReadRaw(f));
    std::vector<int> pids;
    std::istringstream in(raw);
    int pid;
    while (in >> pid) pids.push_back(pid);
    return pids;
  }

 private:
  static std::string_view kIdle() { return v1::kIdle; }  // same name on v1 and v2
  // Whether a pod's own dir gets its cpuset written (Cgroups::ChildDirs says why v2 does not).
  bool TopWritten() const { return layout_.version == CgroupVersion::kV1; }

  static std::string Normal(std::string p) {
    while (p.size() > 1 && p.back() == '/') p.pop_back();
    return p;
  }

  CgroupLayout layout_;
  std::vector<std::string> owned_;  // kubepods + QoS-tier dirs on each mount
};

}  // namespace

Result<std::string> ReadCgroupFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT) return NotFound("no such file " + path);
    if (err == EACCES || err == EPERM) return PermissionDenied("cannot read " + path);
    return Internal("open " + path + ": " + std::strerror(err));
  }
  std::string out;
  char buf[4096];
  for (int i = 0; i < 4096; ++i) {  // bounded: 16 MiB
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      if (err == EOPNOTSUPP) return Unimplemented("reading " + path + " is not supported here");
      return Internal("read " + path + ": " + std::strerror(err));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

Status WriteErrnoToStatus(int err, const std::string& path, std::string_view value) {
  const std::string what = "writing \"" + std::string(Trim(value)) + "\" to " + path;
  const std::string name = Basename(path);
  const bool cpuset = name.rfind("cpuset.", 0) == 0;
  switch (err) {
    case ENOENT:
      return NotFound(what + ": no such file");
    case EINVAL:
      if (name == v1::kCfsQuotaUs || name == v2::kMax || name == v1::kCfsPeriodUs) {
        return InvalidArgument(what +
                               ": rejected by the kernel (invalid value, a child quota above "
                               "its parent's, a parent below a child's, or a quota below the "
                               "group's burst)");
      }
      if (name == v1::kCfsBurstUs || name == v2::kMaxBurst) {
        return InvalidArgument(what +
                               ": rejected by the kernel (invalid value, or a burst above the "
                               "group's quota)");
      }
      if (name == v1::kShares || name == v2::kWeight) {
        return InvalidArgument(what +
                               ": invalid value (or the group has cpu.idle=1, which makes "
                               "the kernel refuse weight writes: clear cpu.idle first)");
      }
      return InvalidArgument(what + ": invalid value");
    case ERANGE:
      return InvalidArgument(what + ": value out of range");
    case EACCES:
    case EPERM:
      if (cpuset) {
        return PermissionDenied(what + ": not a subset of parent's " + name +
                                " (v1: grow the parent first)");
      }
      return PermissionDenied(what + ": permission denied");
    case EBUSY:
      return FailedPrecondition(what + ": would strand a child cgroup's " + name +
                                " (v1: shrink children first)");
    case ENOSPC:
      return FailedPrecondition(what + ": the cgroup has tasks and the set would be empty");
    case ENODEV:
    case EOPNOTSUPP:
      return Unimplemented(what + ": not supported by this kernel/controller");
    default:
      return Internal(what + ": " + std::strerror(err));
  }
}

namespace {

// A quota write the kernel refused (EINVAL) because the group's own burst is above it (both
// versions refuse a finite quota below the burst): says so, naming the burst file and value.
// nullopt when that is not the cause (or the burst cannot be read).
std::optional<std::string> BurstAboveQuota(const std::string& path, std::string_view value) {
  const std::string name = Basename(path);
  std::string_view quota = Trim(value);
  std::string_view burst_name;
  if (name == v1::kCfsQuotaUs) {
    burst_name = v1::kCfsBurstUs;
  } else if (name == v2::kMax) {
    burst_name = v2::kMaxBurst;
    quota = quota.substr(0, quota.find(' '));  // "<quota|max> <period>"
  } else {
    return std::nullopt;
  }
  auto q = ParseNumber<int64_t>(quota, path);
  if (!q.ok() || *q < 0) return std::nullopt;  // unlimited: never below a burst
  const std::string burst_file = JoinPath(Dirname(path), burst_name);
  auto raw = ReadCgroupFile(burst_file);
  if (!raw.ok()) return std::nullopt;
  auto b = ParseNumber<int64_t>(*raw, burst_file);
  if (!b.ok() || *b <= *q) return std::nullopt;
  return "rejected by the kernel: the group's burst (" + std::string(burst_name) + " " +
         std::to_string(*b) +
         " µs) is above this quota, and the kernel accepts no quota below "
         "its burst (lower the burst first)";
}

}  // namespace

Status WriteCgroupFile(const std::string& path, std::string_view bytes) {
  int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  if (fd < 0) return WriteErrnoToStatus(errno, path, bytes);
  ssize_t n;
  do {
    n = ::write(fd, bytes.data(), bytes.size());
  } while (n < 0 && errno == EINTR);
  int err = errno;
  ::close(fd);
  if (n < 0 && err == EINVAL) {
    if (auto why = BurstAboveQuota(path, bytes)) {
      return InvalidArgument("writing \"" + std::string(Trim(bytes)) + "\" to " + path + ": " +
                             *why);
    }
  }
  if (n < 0) return WriteErrnoToStatus(err, path, bytes);
  if (static_cast<size_t>(n) != bytes.size()) {
    return Internal("short write to " + path + " (" + std::to_string(n) + " of " +
                    std::to_string(bytes.size()) + " bytes)");
  }
  return OkStatus();
}

Result<CpuPressure> ParsePressure(std::string_view text) {
  CpuPressure p;
  bool some = false;
  std::istringstream in{std::string(text)};
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string kind, field;
    ls >> kind;
    if (kind != "some" && kind != "full") continue;
    PressureLine pl;
    // Each of the four fields exactly once; averages are finite percentages ≥ 0 (the kernel's
    // own range; "nan", "-1.5" or "2x" are refused, not passed on as pressure).
    unsigned seen = 0;
    while (ls >> field) {
      size_t eq = field.find('=');
      if (eq == std::string::npos) continue;
      const std::string k = field.substr(0, eq), v = field.substr(eq + 1);
      const unsigned bit = k == "avg10"    ? 1u
                           : k == "avg60"  ? 2u
                           : k == "avg300" ? 4u
                           : k == "total"  ? 8u
                                           : 0u;
      if (bit == 0) continue;
      if (seen & bit) return InvalidArgument("repeated PSI field \"" + field + "\"");
      seen |= bit;
      try {
        size_t used = 0;
        if (bit == 8u) {
          if (v.empty() || v[0] == '-') throw std::invalid_argument("negative");
          pl.total_us = std::stoull(v, &used);
        } else {
          const double x = std::stod(v, &used);
          if (!std::isfinite(x) || x < 0) throw std::out_of_range("range");
          (bit == 1u ? pl.avg10 : bit == 2u ? pl.avg60 : pl.avg300) = x;
        }
        if (used != v.size()) throw std::invalid_argument("trailing");
      } catch (const std::exception&) {
        return InvalidArgument("bad PSI field \"" + field + "\"");
      }
    }
    if (seen != 15u) return InvalidArgument("incomplete PSI line \"" + line + "\"");
    if (kind == "some") {
      p.some = pl;
      some = true;
    } else {
      p.full = pl;
    }
  }
  if (!some) return InvalidArgument("no \"some\" line in PSI text");
  return p;
}

std::string_view KnobName(Knob k) { return NameOf(kKnobNames, k, "unknown"); }

CgroupsPtr NewFsCgroups(CgroupLayout layout) {
  return std::make_shared<FsCgroups>(std::move(layout));
}

}  // namespace feedguard::agent::cgroup
