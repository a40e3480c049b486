#include "agent/observe/host_tasks.h"

#include <unistd.h>

#include <charconv>
#include <exception>
#include <filesystem>
#include <system_error>
#include <utility>

#include "agent/cgroup/fs_cgroups.h"
#include "agent/cgroup/kubelet_facts.h"
#include "common/strings.h"

namespace feedguard::agent::observe {
namespace {

namespace fs = std::filesystem;

// Directories below kubepods searched for the agent's own cgroup: tier, pod, container, crun's
// child (a Guaranteed pod sits one level higher), and how many at most.
constexpr int kOwnCgroupDepth = 4;
constexpr size_t kOwnCgroupDirs = 20'000;

std::optional<int> ParsePid(std::string_view s) {
  int pid = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), pid);
  if (ec != std::errc() || end != s.data() + s.size() || pid <= 0) return std::nullopt;
  return pid;
}

// The next '\n'-terminated line of `text` (the last may lack it), consumed.
std::string_view NextLine(std::string_view& text) {
  const size_t nl = text.find('\n');
  const std::string_view line = text.substr(0, nl);
  text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
  return line;
}

bool ListsPid(std::string_view procs, int pid) {
  while (!procs.empty()) {
    if (ParsePid(Trim(NextLine(procs))) == pid) return true;
  }
  return false;
}

// "/.." or "/../…": a cgroup outside the reader's namespace.
bool OutsideNamespace(std::string_view shown) {
  return shown == "/.." || shown.substr(0, 4) == "/../";
}

// The observed pod whose cgroup is `path` or one of its ancestors.
const std::string* PodOf(std::string_view path,
                         const std::map<std::string, std::string, std::less<>>& uid_by_path) {
  for (size_t i = 0; i <= path.size(); ++i) {
    if (i < path.size() && path[i] != '/') continue;
    if (auto it = uid_by_path.find(path.substr(0, i)); it != uid_by_path.end()) {
      return &it->second;
    }
  }
  return nullptr;
}

}  // namespace

std::optional<std::string_view> CpuCgroupOf(std::string_view text, cgroup::CgroupVersion version) {
  std::optional<std::string_view> cpuacct;
  while (!text.empty()) {
    const std::string_view line = NextLine(text);
    // "<hierarchy id>:<controllers>:<path>"; the path may itself hold ':'.
    const size_t a = line.find(':');
    if (a == std::string_view::npos) continue;
    const size_t b = line.find(':', a + 1);
    if (b == std::string_view::npos) continue;
    const std::string_view id = line.substr(0, a), controllers = line.substr(a + 1, b - a - 1);
    const std::string_view path = line.substr(b + 1);
    if (version == cgroup::CgroupVersion::kV2) {
      if (id == "0" && controllers.empty()) return path;
      continue;
    }
    for (std::string_view rest = controllers; !rest.empty();) {
      const size_t comma = rest.find(',');
      const std::string_view c = rest.substr(0, comma);
      rest.remove_prefix(comma == std::string_view::npos ? rest.size() : comma + 1);
      if (c == "cpu") return path;
      if (c == "cpuacct" && !cpuacct) cpuacct = path;
    }
  }
  return cpuacct;
}

std::optional<std::string> ResolveCgroupPath(std::string_view shown, std::string_view ns_root) {
  std::vector<std::string_view> parts;
  auto push = [&](std::string_view path) -> bool {
    while (!path.empty()) {
      const size_t slash = path.find('/');
      const std::string_view c = path.substr(0, slash);
      path.remove_prefix(slash == std::string_view::npos ? path.size() : slash + 1);
      if (c.empty() || c == ".") continue;
      if (c == "..") {
        if (parts.empty()) return false;
        parts.pop_back();
      } else {
        parts.push_back(c);
      }
    }
    return true;
  };
  if (!push(ns_root) || !push(shown)) return std::nullopt;
  std::string out;
  for (std::string_view c : parts) {
    if (!out.empty()) out += '/';
    out += c;
  }
  return out;
}

bool ProcRootIsOwnPidNamespace(const std::string& proc_root) {
  std::error_code ec;
  const fs::path self = fs::read_symlink(fs::path(proc_root) / "self", ec);
  if (ec) return false;
  return ParsePid(self.filename().string()) == static_cast<int>(::getpid());
}

HostTasks::HostTasks(std::string proc_root, cgroup::CgroupLayout layout, int self_pid,
                     size_t max_pids)
    : proc_root_(std::move(proc_root)),
      layout_(std::move(layout)),
      self_pid_(self_pid),
      max_pids_(max_pids) {}

Result<HostTaskScan> HostTasks::Scan(const std::map<std::string, std::string>& pods) {
  try {
    return ScanOrThrow(pods);
  } catch (const std::exception& e) {  // std::bad_alloc; the filesystem calls take error codes
    return Internal(std::string("scanning ") + proc_root_ + ": " + e.what());
  }
}

Result<HostTaskScan> HostTasks::ScanOrThrow(const std::map<std::string, std::string>& pods) {
  std::map<std::string, std::string, std::less<>> uid_by_path;
  for (const auto& [uid, path] : pods) uid_by_path.emplace(path, uid);
  HostTaskScan out;
  std::error_code ec;
  fs::directory_iterator it(proc_root_, ec);
  if (ec) return NotFound("cannot list " + proc_root_ + ": " + ec.message());
  bool searched = false;  // for the namespace root, in this scan
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const std::optional<int> pid = ParsePid(name);
    if (!pid) continue;  // "self", "stat", "driver", …
    if (out.processes == max_pids_) {
      out.truncated = true;
      break;
    }
    ++out.processes;
    // ENOENT / ESRCH: the process exited since the listing; any other error alike.
    const auto text = cgroup::ReadCgroupFile(JoinPath(JoinPath(proc_root_, name), "cgroup"));
    if (!text.ok()) continue;
    const auto shown = CpuCgroupOf(*text, layout_.version);
    if (!shown) continue;
    if (OutsideNamespace(*shown) && !ns_root_ && !searched) {
      searched = true;
      ns_root_ = FindNsRoot();
    }
    const auto path = ResolveCgroupPath(*shown, ns_root_.value_or(""));
    if (!path) {
      ++out.unplaced;
      continue;
    }
    if (const std::string* uid = PodOf(*path, uid_by_path)) out.pids[*uid].push_back(*pid);
  }
  return out;
}

std::optional<std::string> HostTasks::FindNsRoot() const {
  // Where this process sits, relative to its own namespace's root ("/" for a container's).
  auto self = cgroup::ReadCgroupFile(JoinPath(proc_root_, "self/cgroup"));
  std::string_view own = "/";
  if (self.ok()) {
    if (auto s = CpuCgroupOf(*self, layout_.version)) own = *s;
  }
  auto own_rel = ResolveCgroupPath(own, "");
  if (!own_rel || OutsideNamespace(own)) return std::nullopt;
  // The cgroup below kubepods whose cgroup.procs (read from this PID namespace) lists this
  // process: the agent's container.
  const std::string kubepods = cgroup::KubepodsRelPath(layout_.driver, layout_.cgroup_root);
  const fs::path top = fs::path(layout_.cpu_mount) / kubepods;
  std::error_code ec;
  fs::recursive_directory_iterator it(top, fs::directory_options::skip_permission_denied, ec);
  size_t dirs = 0;
  for (; !ec && it != fs::recursive_directory_iterator() && dirs < kOwnCgroupDirs;
       it.increment(ec)) {
    if (!it->is_directory(ec)) continue;
    ++dirs;
    if (it.depth() + 1 >= kOwnCgroupDepth) it.disable_recursion_pending();
    auto procs = cgroup::ReadCgroupFile((it->path() / "cgroup.procs").string());
    if (!procs.ok() || !ListsPid(*procs, self_pid_)) continue;
    // Found: <kubepods>/<below>; the namespace root is that less where this process sits in it.
    std::string found = JoinPath(kubepods, it->path().lexically_relative(top).string());
    if (own_rel->empty()) return found;
    if (found.size() <= own_rel->size() ||
        found.compare(found.size() - own_rel->size(), own_rel->size(), *own_rel) != 0 ||
        found[found.size() - own_rel->size() - 1] != '/') {
      return std::nullopt;
    }
    found.resize(found.size() - own_rel->size() - 1);
    return found;
  }
  return std::nullopt;
}

}  // namespace feedguard::agent::observe
