#include "agent/observe/schedstat.h"

#include <charconv>
#include <filesystem>
#include <vector>

#include "agent/cgroup/fs_cgroups.h"
#include "agent/observe/counters.h"

namespace feedguard::agent::observe {
namespace {

bool NextNumber(std::string_view& text, uint64_t* out) {
  size_t i = 0;
  while (i < text.size() && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n')) ++i;
  text.remove_prefix(i);
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  if (ec != std::errc() || end == text.data()) return false;
  text.remove_prefix(static_cast<size_t>(end - text.data()));
  return true;
}

}  // namespace

Result<Schedstat> ParseSchedstat(std::string_view text) {
  Schedstat s;
  std::string_view rest = text;
  if (!NextNumber(rest, &s.run_ns) || !NextNumber(rest, &s.run_delay_ns) ||
      !NextNumber(rest, &s.timeslices)) {
    return InvalidArgument("schedstat: want three numbers, got \"" +
                           std::string(text.substr(0, 64)) + "\"");
  }
  return s;
}

double RunDelayTracker::Sample(const std::map<int, uint64_t>& run_delay_ns) {
  uint64_t delta = 0;
  if (primed_) {
    for (const auto& [tid, ns] : run_delay_ns) {
      auto it = last_.find(tid);
      delta += it != last_.end() ? CounterDelta(it->second, ns) : ns;
    }
  }
  last_ = run_delay_ns;
  primed_ = true;
  return static_cast<double>(delta) / 1e9;
}

std::map<int, uint64_t> ReadRunDelays(const std::string& proc_root, const std::vector<int>& pids) {
  std::map<int, uint64_t> out;
  namespace fs = std::filesystem;
  for (int pid : pids) {
    std::error_code ec;
    const fs::path tasks = fs::path(proc_root) / std::to_string(pid) / "task";
    for (const auto& entry : fs::directory_iterator(tasks, ec)) {
      int tid = 0;
      const std::string name = entry.path().filename().string();
      auto [end, perr] = std::from_chars(name.data(), name.data() + name.size(), tid);
      if (perr != std::errc() || end != name.data() + name.size()) continue;
      auto text = cgroup::ReadCgroupFile((entry.path() / "schedstat").string());
      if (!text.ok()) continue;  // exited meanwhile
      if (auto s = ParseSchedstat(*text); s.ok()) out[tid] = s->run_delay_ns;
    }
  }
  return out;
}

}  // namespace feedguard::agent::observe
