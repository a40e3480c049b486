#include "agent/observe/pod_observer.h"

#include <filesystem>
#include <map>
#include <system_error>
#include <utility>

namespace feedguard::agent::observe {

Result<std::vector<int>> ListPodPids(const cgroup::Cgroups& cgroups,
                                     const cgroup::CgroupPaths& pod) {
  FG_ASSIGN_OR_RETURN(std::vector<int> pids, cgroups.ListPids(pod));
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::recursive_directory_iterator it(pod.cpu, fs::directory_options::skip_permission_denied, ec);
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_directory(ec)) continue;
    const std::string dir = it->path().string();
    // A container that went away meanwhile is skipped.
    if (auto more = cgroups.ListPids({dir, dir, dir}); more.ok()) {
      pids.insert(pids.end(), more->begin(), more->end());
    }
  }
  return pids;
}

Result<PodCounters> ReadPodCounters(const cgroup::Cgroups& cgroups,
                                    const cgroup::CgroupPaths& pod) {
  PodCounters c;
  FG_ASSIGN_OR_RETURN(cgroup::CpuUsage usage, cgroups.ReadUsage(pod));
  c.cpu_s = static_cast<double>(usage.usage_ns) / 1e9;
  c.throttled_s = static_cast<double>(usage.throttled_ns) / 1e9;
  FG_ASSIGN_OR_RETURN(std::optional<cgroup::CpuPressure> psi, cgroups.ReadPressure(pod));
  if (psi) c.psi_some_s = static_cast<double>(psi->some.total_us) / 1e6;
  FG_ASSIGN_OR_RETURN(c.cpus, cgroups.ReadEffectiveCpus(pod));
  return c;
}

PodObserver::PodObserver(cgroup::CgroupPaths pod, std::string proc_root)
    : pod_(std::move(pod)), proc_root_(std::move(proc_root)) {}

Result<std::optional<PodSample>> PodObserver::Read(const cgroup::Cgroups& cgroups, double dt_s,
                                                   std::optional<std::vector<int>> pids) {
  FG_ASSIGN_OR_RETURN(PodCounters now, ReadPodCounters(cgroups, pod_));
  std::optional<double> run_delay_s;
  if (!now.psi_some_s) {
    // No PSI for this cgroup: the tasks' own run delay, per task (schedstat.h).
    if (!pids) {
      FG_ASSIGN_OR_RETURN(pids, ListPodPids(cgroups, pod_));
    }
    const std::map<int, uint64_t> delays = ReadRunDelays(proc_root_, *pids);
    const double s = run_delay_.Sample(delays);
    if (!delays.empty()) run_delay_s = s;  // else none of its tasks was seen
  }
  std::optional<PodSample> sample;
  if (last_) sample = SampleBetween(*last_, now, dt_s, run_delay_s);
  last_ = std::move(now);
  return sample;
}

}  // namespace feedguard::agent::observe
