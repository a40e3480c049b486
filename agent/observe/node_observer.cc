#include "agent/observe/node_observer.h"

#include <unistd.h>

#include <filesystem>
#include <set>
#include <utility>

#include "agent/cgroup/fs_cgroups.h"
#include "agent/cgroup/kubelet_facts.h"
#include "agent/observe/counters.h"
#include "common/strings.h"

namespace feedguard::agent::observe {

std::map<std::string, std::string> ListPodCgroupRelPaths(const cgroup::CgroupLayout& layout) {
  std::map<std::string, std::string> out;
  for (QosClass q : {QosClass::kGuaranteed, QosClass::kBurstable, QosClass::kBestEffort}) {
    const std::string tier = cgroup::QosTierRelPath(layout.driver, layout.cgroup_root, q);
    std::error_code ec;
    for (const auto& e :
         std::filesystem::directory_iterator(JoinPath(layout.cpu_mount, tier), ec)) {
      if (!e.is_directory(ec)) continue;
      const std::string name = e.path().filename().string();
      auto uid = cgroup::PodUidFromDirName(layout.driver, name);
      if (!uid) continue;
      out[*uid] = tier + "/" + name;
    }
  }
  return out;
}

namespace {

cgroup::CgroupPaths DirsOf(const cgroup::CgroupLayout& layout, const std::string& rel) {
  return {JoinPath(layout.cpu_mount, rel), JoinPath(layout.cpuacct_mount, rel),
          JoinPath(layout.cpuset_mount, rel)};
}

}  // namespace

std::map<std::string, cgroup::CgroupPaths> ListPodCgroups(const cgroup::CgroupLayout& layout) {
  std::map<std::string, cgroup::CgroupPaths> out;
  for (const auto& [uid, rel] : ListPodCgroupRelPaths(layout)) out[uid] = DirsOf(layout, rel);
  return out;
}

NodeObserver::NodeObserver(const cgroup::Cgroups* cgroups, cgroup::CgroupLayout layout,
                           NodeObserverOptions options)
    : cgroups_(cgroups), layout_(std::move(layout)), options_(std::move(options)) {
  // The pod cgroups' cgroup.procs number pids as this process's PID namespace does; a proc root
  // of another PID namespace (the host's, mounted into the agent's pod) is scanned instead.
  const bool scan =
      options_.tasks == TaskLookup::kProcScan ||
      (options_.tasks == TaskLookup::kAuto && !ProcRootIsOwnPidNamespace(options_.proc_root));
  if (scan) {
    host_tasks_ = std::make_unique<HostTasks>(
        options_.proc_root, layout_, static_cast<int>(::getpid()), options_.max_scanned_pids);
  }
}

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
  const auto rel = ListPodCgroupRelPaths(layout_);
  std::map<std::string, OtherUsage> usage;
  std::vector<CgroupUsage> deltas;
  for (const auto& [uid, path] : rel) {
    const cgroup::CgroupPaths dirs = DirsOf(layout_, path);
    auto u = cgroups_->ReadUsage(dirs);
    auto cpus = cgroups_->ReadEffectiveCpus(dirs);
    if (!u.ok() || !cpus.ok()) continue;  // went away meanwhile
    OtherUsage now{static_cast<double>(u->usage_ns) / 1e9, std::move(*cpus), u->idle};
    if (auto last = last_usage_.find(uid); last != last_usage_.end()) {
      // Idle now: counted so for the whole interval (a fence lands within one interval of 10 s
      // by default; the interval it lands in leans towards the fence).
      deltas.push_back({uid, CounterDelta(last->second.cpu_s, now.cpu_s), now.cpus, now.idle});
    }
    usage.emplace(uid, std::move(now));
  }
  // kProcScan: every observed pod's processes from one scan, before any pod is read.
  std::optional<std::map<std::string, std::vector<int>>> scanned;
  if (host_tasks_) scanned = ScanTasks(rel, problems);
  for (auto& [uid, pod] : pods_) {
    if (!pod.reader) {
      auto it = rel.find(uid);
      if (it == rel.end()) {
        problems.push_back("pod " + uid + ": no cgroup on this node (yet)");
        continue;
      }
      pod.reader = std::make_unique<PodObserver>(DirsOf(layout_, it->second), options_.proc_root);
    }
    std::optional<std::vector<int>> pids;
    if (scanned) {
      auto it = scanned->find(uid);
      pids = it != scanned->end() ? std::move(it->second) : std::vector<int>();
    }
    auto sample = pod.reader->Read(*cgroups_, dt_s, std::move(pids));
    if (!sample.ok()) {
      problems.push_back("pod " + uid + ": " + sample.status().ToString());
      pod.reader.reset();  // found again next interval if it still exists
      continue;
    }
    if (!sample->has_value()) continue;  // a baseline
    PodSample s = std::move(**sample);
    if (s.source != WaitSource::kUnknown) {
      pod.unmeasured_said = false;
    } else if (!pod.unmeasured_said) {
      pod.unmeasured_said = true;
      problems.push_back(
          "pod " + uid + ": its wait is not measured (no PSI, and none of its tasks seen in " +
          options_.proc_root + " while it used CPU" +
          (host_tasks_ ? std::string()
                       : std::string(", this agent's own PID namespace's procfs: where that is "
                                     "not the host's it hides other pods' processes; give the "
                                     "agent the host's /proc, --host-proc")) +
          ")");
    }
    if (auto g = gpu_busy.find(uid); g != gpu_busy.end()) s.gpu_busy = g->second;
    {
      std::vector<CgroupUsage> others;
      for (const auto& d : deltas) {
        if (d.contender != uid) others.push_back(d);
      }
      const CpuSet& cpus = pod.reader->cpus();
      std::optional<double> node_busy;
      if (busy && last_busy_) node_busy = BusyOn(*last_busy_, *busy, cpus);
      ContentionOnCpus on = ContendersOn(cpus, s.cpu_s, others, node_busy, options_.top_k);
      SplitWait(s, cpus.size(), on.total);
      if (WaitedIn(s) && node_busy) s.contenders = std::move(on.top);
    }
    last_samples_[uid] = s;
    pod.windows.Add(std::move(s));
  }
  last_usage_ = std::move(usage);
  if (busy) last_busy_ = std::move(busy);
  return problems;
}

std::map<std::string, std::vector<int>> NodeObserver::ScanTasks(
    const std::map<std::string, std::string>& rel, std::vector<std::string>& problems) {
  std::map<std::string, std::string> wanted;
  for (const auto& [uid, pod] : pods_) {
    auto it = rel.find(uid);
    if (it == rel.end()) continue;
    const bool psi = (pod.reader ? pod.reader->had_psi() : std::nullopt).value_or(layout_.caps.psi);
    if (!psi) wanted.emplace(uid, it->second);
  }
  if (wanted.empty()) return {};
  auto scan = host_tasks_->Scan(wanted);
  std::string shortfall;
  if (!scan.ok()) {
    shortfall = "tasks: " + scan.status().ToString();
  } else if (scan->truncated) {
    shortfall = "tasks: read only the first " + std::to_string(scan->processes) + " processes of " +
                options_.proc_root + "; pods with tasks among the rest read less";
  } else if (scan->unplaced > 0) {
    shortfall = "tasks: " + std::to_string(scan->unplaced) + " processes of " + options_.proc_root +
                " are in cgroups outside this agent's cgroup namespace, whose root was not found "
                "below kubepods; they are counted for no pod";
  }
  if (shortfall != scan_said_) {
    if (!shortfall.empty()) problems.push_back(shortfall);
    scan_said_ = shortfall;
  }
  if (!scan.ok()) return {};
  return std::move(scan->pids);
}

std::map<std::string, Summary> NodeObserver::Summaries(std::chrono::seconds window) const {
  std::map<std::string, Summary> out;
  for (const auto& [uid, pod] : pods_) {
    if (pod.windows.samples() > 0) out.emplace(uid, pod.windows.Over(window));
  }
  return out;
}

}  // namespace feedguard::agent::observe
