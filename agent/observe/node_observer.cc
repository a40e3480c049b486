#include "agent/observe/node_observer.h"

#include <filesystem>
#include <set>
#include <utility>

#include "agent/cgroup/fs_cgroups.h"
#include "agent/cgroup/kubelet_facts.h"
#include "agent/observe/counters.h"
#include "common/strings.h"

namespace feedguard::agent::observe {

std::map<std::string, cgroup::CgroupPaths> ListPodCgroups(const cgroup::CgroupLayout& layout) {
  std::map<std::string, cgroup::CgroupPaths> out;
  for (QosClass q : {QosClass::kGuaranteed, QosClass::kBurstable, QosClass::kBestEffort}) {
    const std::string tier = cgroup::QosTierRelPath(layout.driver, layout.cgroup_root, q);
    std::error_code ec;
    for (const auto& e :
         std::filesystem::directory_iterator(JoinPath(layout.cpu_mount, tier), ec)) {
      if (!e.is_directory(ec)) continue;
      const std::string name = e.path().filename().string();
      auto uid = cgroup::PodUidFromDirName(layout.driver, name);
      if (!uid) continue;
      const std::string rel = tier + "/" + name;
      out[*uid] = {JoinPath(layout.cpu_mount, rel), JoinPath(layout.cpuacct_mount, rel),
                   JoinPath(layout.cpuset_mount, rel)};
    }
  }
  return out;
}

NodeObserver::NodeObserver(const cgroup::Cgroups* cgroups, cgroup::CgroupLayout layout,
                           NodeObserverOptions options)
    : cgroups_(cgroups), layout_(std::move(layout)), options_(std::move(options)) {}

void NodeObserver::Observe(const std::vector<std::string>& uids) {
  const std::set<std::string> want(uids.begin(), uids.end());
  std::erase_if(pods_, [&](const auto& p) { return !want.count(p.first); });
  std::erase_if(last_samples_, [&](const auto& p) { return !want.count(p.first); });
  for (const auto& uid : want) {
    if (!pods_.count(uid)) {
      pods_.emplace(
          uid, Observed{nullptr, PodWindows(options_.period, options_.horizon, options_.top_k)});
    }
  }
}

std::vector<std::string> NodeObserver::Step(double dt_s,
                                            const std::map<std::string, double>& gpu_busy) {
  std::vector<std::string> problems;
  last_samples_.clear();
  // The node's per-CPU busy time and every pod cgroup's usage now, against the last interval.
  std::optional<std::map<int, double>> busy;
  auto stat = cgroup::ReadCgroupFile(options_.proc_root + "/stat");
  Result<std::map<int, double>> parsed = stat.ok() ? ParseProcStatBusy(*stat, options_.user_hz)
                                                   : Result<std::map<int, double>>(stat.status());
  if (parsed.ok()) {
    busy = std::move(*parsed);
  } else {
    problems.push_back(parsed.status().ToString());
  }
  const auto cgroups = ListPodCgroups(layout_);
  std::map<std::string, OtherUsage> usage;
  std::vector<CgroupUsage> deltas;
  for (const auto& [uid, dirs] : cgroups) {
    auto u = cgroups_->ReadUsage(dirs);
    auto cpus = cgroups_->ReadEffectiveCpus(dirs);
    if (!u.ok() || !cpus.ok()) continue;  // went away meanwhile
    OtherUsage now{static_cast<double>(u->usage_ns) / 1e9, std::move(*cpus)};
    if (auto last = last_usage_.find(uid); last != last_usage_.end()) {
      deltas.push_back({uid, CounterDelta(last->second.cpu_s, now.cpu_s), now.cpus});
    }
    usage.emplace(uid, std::move(now));
  }
  for (auto& [uid, pod] : pods_) {
    if (!pod.reader) {
      auto it = cgroups.find(uid);
      if (it == cgroups.end()) {
        problems.push_back("pod " + uid + ": no cgroup on this node (yet)");
        continue;
      }
      pod.reader = std::make_unique<PodObserver>(it->second, options_.proc_root);
    }
    auto sample = pod.reader->Read(*cgroups_, dt_s);
    if (!sample.ok()) {
      problems.push_back("pod " + uid + ": " + sample.status().ToString());
      pod.reader.reset();  // found again next interval if it still exists
      continue;
    }
    if (!sample->has_value()) continue;  // a baseline
    PodSample s = std::move(**sample);
    if (auto g = gpu_busy.find(uid); g != gpu_busy.end()) s.gpu_busy = g->second;
    if (WaitedIn(s) && busy && last_busy_) {
      std::vector<CgroupUsage> others;
      for (const auto& d : deltas) {
        if (d.contender != uid) others.push_back(d);
      }
      const CpuSet& cpus = pod.reader->cpus();
      s.contenders =
          ContendersOn(cpus, s.cpu_s, others, BusyOn(*last_busy_, *busy, cpus), options_.top_k);
    }
    last_samples_[uid] = s;
    pod.windows.Add(std::move(s));
  }
  last_usage_ = std::move(usage);
  if (busy) last_busy_ = std::move(busy);
  return problems;
}

std::map<std::string, Summary> NodeObserver::Summaries(std::chrono::seconds window) const {
  std::map<std::string, Summary> out;
  for (const auto& [uid, pod] : pods_) {
    if (pod.windows.samples() > 0) out.emplace(uid, pod.windows.Over(window));
  }
  return out;
}

}  // namespace feedguard::agent::observe
