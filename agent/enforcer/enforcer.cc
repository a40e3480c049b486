#include "agent/enforcer/enforcer.h"

#include <algorithm>
#include <sstream>
#include <string_view>
#include <utility>

#include "agent/cgroup/kernel_facts.h"
#include "agent/cgroup/kubelet_facts.h"

namespace feedguard::agent {
namespace {

namespace kf = cgroup;

std::string_view Trim(std::string_view s) {
  const char* ws = " \t\n\r";
  size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  size_t e = s.find_last_not_of(ws);
  return s.substr(b, e - b + 1);
}

std::string Basename(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string Dirname(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash);
}

std::string Join(const std::string& dir, std::string_view file) {
  return dir + "/" + std::string(file);
}

bool IsCpusetFile(const std::string& path) { return Basename(path).rfind("cpuset.", 0) == 0; }

size_t Depth(const std::string& path) { return std::count(path.begin(), path.end(), '/'); }

std::vector<std::string_view> Tokens(std::string_view s) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n')) ++i;
    size_t b = i;
    while (i < s.size() && !(s[i] == ' ' || s[i] == '\t' || s[i] == '\n')) ++i;
    if (i > b) out.push_back(s.substr(b, i - b));
  }
  return out;
}

// What the weight file reads after a cpu.idle write (kernel: an idle group gets the minimum
// weight, WEIGHT_IDLEPRIO = 3 shares; leaving idle resets it to the default). v1 cpu.shares reads
// "3" (kernel 6.18). v2 cpu.weight reads round(3 * 100 / 1024) = "0" on kernel 6.1 (measured in
// the qemu VM, tests/integration/cgroup_v1); kernels that clamp the read-back to the 1..10000
// range read "1". The first value is the expectation, the others are also accepted as ours (a
// crash before the read-back must not make a revert take the file for someone else's).
const std::vector<std::string> kIdleSharesV1 = {"3"};
const std::vector<std::string> kIdleWeightV2 = {"0", "1"};
const std::vector<std::string> kDefaultSharesV1 = {"1024"};
const std::vector<std::string> kDefaultWeightV2 = {"100"};

// Maps a write/read failure to a stable reason code.
std::string ReasonFor(const Status& st, const std::string& file) {
  const std::string base = Basename(file);
  switch (st.code()) {
    case StatusCode::kNotFound:
      return base == kf::v1::kIdle ? reason::kKernelLacksCpuIdle : reason::kCgroupNotFound;
    case StatusCode::kUnimplemented:
      return reason::kKernelLacksCpuIdle;
    case StatusCode::kPermissionDenied:
      return IsCpusetFile(file) ? reason::kCpusetNotSubset : reason::kWriteFailed;
    case StatusCode::kFailedPrecondition:
      return IsCpusetFile(file) ? reason::kCpusetBusy : reason::kWriteFailed;
    case StatusCode::kInvalidArgument:
      return reason::kValueRejected;
    case StatusCode::kAborted:
      return reason::kVerifyFailed;
    default:
      return reason::kWriteFailed;
  }
}

void AddUnique(std::vector<std::string>& list, const std::string& v) {
  if (std::find(list.begin(), list.end(), v) == list.end()) list.push_back(v);
}

const std::string& ValueOr(const std::map<std::string, std::string>& m, const std::string& key) {
  static const std::string kEmpty;
  auto it = m.find(key);
  return it == m.end() ? kEmpty : it->second;
}

}  // namespace

bool KnobValuesEquivalent(const std::string& file, const std::string& a, const std::string& b) {
  std::string_view ta = Trim(a), tb = Trim(b);
  if (ta == tb) return true;
  if (IsCpusetFile(file)) {
    auto sa = CpuSet::Parse(ta);
    auto sb = CpuSet::Parse(tb);
    return sa.ok() && sb.ok() && *sa == *sb;
  }
  return Tokens(ta) == Tokens(tb);
}

// ---- per-Apply bookkeeping ---------------------------------------------------------------------

struct Enforcer::Scratch {
  ApplyReport* report = nullptr;
  std::set<std::string> keep;       // files the plan still wants: never reverted by this Apply
  std::set<std::string> keep_pods;  // pods whose files could not be looked at: keep them all
  std::map<std::string, std::string> verified;  // path → value the file holds and we want
  std::set<std::string> counted;                // overwrites already counted in this pass
};

struct Enforcer::PodWork {
  PodResult result;
  bool failed = false;
  bool contested = false;
  bool dry_run = false;                        // the entry's policy is DryRun: report only
  std::vector<cgroup::FileWrite> writes;       // in order, intermediates included
  std::map<std::string, std::string> finals;   // path → last value written to it
  std::map<std::string, std::string> current;  // path → bytes before any write of this Apply
  // Files the kernel changes as a side effect of our writes (cpu.idle resets the weight): not
  // written by us, but checkpointed like our own files (path → the values it may read; the
  // first is the one we expect).
  std::map<std::string, std::vector<std::string>> side_effects;
  // v2 only: dirs whose cpuset.cpus.effective must equal the planned set after the writes
  // (v2 accepts any cpuset.cpus and clips it to the parent's effective set instead of failing).
  std::vector<std::pair<std::string, CpuSet>> effective_cpus;

  void Fail(std::string why, std::string msg) {
    if (failed) return;
    failed = true;
    result.reason = std::move(why);
    result.message = std::move(msg);
  }
};

Enforcer::Enforcer(cgroup::CgroupsPtr cgroups, CheckpointStorePtr checkpoint,
                   EnforcerOptions options)
    : cgroups_(std::move(cgroups)),
      checkpoint_(std::move(checkpoint)),
      options_(std::move(options)),
      clock_(options_.time_source ? options_.time_source : std::make_shared<RealTimeSource>()) {}

bool Enforcer::ready() const {
  std::lock_guard<std::mutex> l(mu_);
  return ready_;
}

std::vector<std::string> Enforcer::OwnedFiles() const {
  std::vector<std::string> out;
  for (const auto& e : checkpoint_->Entries()) out.push_back(e.path);
  return out;
}

std::map<std::string, uint64_t> Enforcer::OverwriteCounts() const {
  std::lock_guard<std::mutex> l(mu_);
  return pod_overwrites_;
}

uint64_t Enforcer::writes_made() const {
  std::lock_guard<std::mutex> l(mu_);
  return writes_made_;
}

std::vector<Enforcer::Target> Enforcer::TargetsOf(const Plan& plan) {
  std::vector<Target> out;
  for (const auto& t : plan.trainers) {
    Target x;
    x.pod = t.pod;
    x.policy = t.policy;
    x.role = PodRole::kTrainer;
    x.weight = t.weight;
    x.dry_run = plan.dry_run || t.dry_run;
    if (!t.cpus.empty()) x.cpus = t.cpus;
    if (!t.mems.empty()) x.mems = t.mems;
    out.push_back(std::move(x));
  }
  for (const auto& n : plan.neighbours) {
    Target x;
    x.pod = n.pod;
    x.policy = n.policy;
    x.role = PodRole::kNeighbour;
    x.idle = n.idle;
    x.weight = n.weight;
    x.quota = n.quota;
    x.cpus = n.cpus;
    x.dry_run = plan.dry_run || n.dry_run;
    out.push_back(std::move(x));
  }
  return out;
}

bool Enforcer::IsProtected(const PodIdentity& pod) const {
  if (!options_.self_pod_uid.empty() && pod.uid == options_.self_pod_uid) return true;
  const auto& classes = options_.protected_priority_classes;
  if (!pod.priority_class.empty() &&
      std::find(classes.begin(), classes.end(), pod.priority_class) != classes.end()) {
    return true;
  }
  return std::find(options_.protected_namespaces.begin(), options_.protected_namespaces.end(),
                   pod.ns) != options_.protected_namespaces.end();
}

// The rail: a file may be written only if it sits in the dir of the pod it is for (or below
// it, a container dir) and that dir is not one kubelet owns.
Status Enforcer::CheckWritable(const std::string& file, const std::string& pod_uid) const {
  const std::string dir = Dirname(file);
  if (dir.empty() || cgroups_->IsKubeletOwned(dir)) {
    return PermissionDenied("refusing to write " + file + ": not a pod or container cgroup");
  }
  const auto& layout = cgroups_->layout();
  std::set<std::string> pod_dir_names;
  for (QosClass q : {QosClass::kGuaranteed, QosClass::kBurstable, QosClass::kBestEffort}) {
    pod_dir_names.insert(
        Basename(cgroup::PodRelPath(layout.driver, layout.cgroup_root, q, pod_uid)));
  }
  std::stringstream ss(dir);
  std::string component;
  while (std::getline(ss, component, '/')) {
    if (pod_dir_names.count(component)) return OkStatus();
  }
  return PermissionDenied("refusing to write " + file + ": not inside pod " + pod_uid +
                          "'s cgroup");
}

bool Enforcer::IsOursLocked(const CheckpointEntry& e, const std::string& current) const {
  if (KnobValuesEquivalent(e.path, current, e.written)) return true;
  for (const auto& v : e.also_ours) {
    if (KnobValuesEquivalent(e.path, current, v)) return true;
  }
  return false;
}

bool Enforcer::RecordOverwriteLocked(const std::string& path, const std::string& uid) {
  const auto now = clock_->MonotonicNow();
  FileState& st = file_state_[path];
  st.overwrites.push_back(now);
  while (!st.overwrites.empty() && now - st.overwrites.front() > options_.contest_window) {
    st.overwrites.pop_front();
  }
  ++pod_overwrites_[uid];
  if (static_cast<int>(st.overwrites.size()) >= options_.contest_threshold) st.contested = true;
  return st.contested;
}

Status Enforcer::WriteVerifyLocked(const std::string& path, const std::string& value) {
  Status st = cgroups_->WriteRaw(path, value);
  ++writes_made_;
  if (options_.after_write) options_.after_write(writes_made_, path);
  if (!st.ok()) return st;
  auto back = cgroups_->ReadRaw(path);
  if (!back.ok()) return back.status();
  if (!KnobValuesEquivalent(path, *back, value)) {
    return Aborted("verify " + path + ": wrote '" + std::string(Trim(value)) + "', reads '" +
                   std::string(Trim(*back)) + "'");
  }
  return OkStatus();
}

Enforcer::PodWork Enforcer::PreparePodLocked(const Target& t, Scratch& s) {
  PodWork w;
  w.dry_run = t.dry_run;
  w.result.uid = t.pod.uid;
  w.result.ns = t.pod.ns;
  w.result.name = t.pod.name;
  w.result.policy = t.policy;
  w.result.role = t.role;
  if (t.cpus) w.result.cpus = t.cpus->ToString();

  if (IsProtected(t.pod)) {
    w.Fail(reason::kProtectedPod,
           "pod " + t.pod.ns + "/" + t.pod.name +
               " is protected (the agent's own pod, a system-critical priority class or a "
               "system namespace)");
    return w;
  }
  auto resolved = cgroups_->ResolvePod(t.pod);
  if (!resolved.ok()) {
    s.keep_pods.insert(t.pod.uid);
    w.Fail(resolved.status().code() == StatusCode::kNotFound ? reason::kCgroupNotFound
                                                             : reason::kWriteFailed,
           resolved.status().ToString());
    return w;
  }
  const cgroup::CgroupPaths& dirs = resolved->dirs;
  if (cgroups_->IsKubeletOwned(dirs.cpu) || cgroups_->IsKubeletOwned(dirs.cpuset)) {
    w.Fail(reason::kNotPodCgroup, "resolved to a kubelet-owned dir: " + dirs.cpu);
    return w;
  }
  const auto& layout = cgroups_->layout();
  const bool v1 = layout.version == cgroup::CgroupVersion::kV1;

  // Reads a file we are about to judge; records its pre-write bytes.
  auto read = [&](const std::string& path) -> Result<std::string> {
    if (auto it = w.current.find(path); it != w.current.end()) return it->second;
    auto r = cgroups_->ReadRaw(path);
    if (r.ok()) w.current[path] = *r;
    return r;
  };
  // True if `path` is one we own that someone else has rewritten; counts it once per pass.
  // Sets *contested when the file is now contested (we then leave it alone).
  auto overwritten = [&](const std::string& path, const std::string& current,
                         bool* contested) -> bool {
    *contested = file_state_.count(path) && file_state_[path].contested;
    // Strict: only the value we last wrote counts as ours here. (also_ours matters for reverts
    // after a crash; right after a restart a file still at its pre-write value is thus counted
    // once as an overwrite, which only bumps a counter.)
    auto e = checkpoint_->Get(path);
    if (!e || KnobValuesEquivalent(path, current, e->written)) return false;
    // A contested file still holding the other writer's value is not a new overwrite.
    if (!*contested && !s.counted.count(path)) {
      s.counted.insert(path);
      *contested = RecordOverwriteLocked(path, t.pod.uid);
    }
    return true;
  };

  // Plain knobs: an ordered list of writes; `force` writes even if the file already holds the
  // value (a v1 quota re-set after its period changed).
  struct Simple {
    std::string path;
    std::string value;
    bool force = false;
  };
  std::vector<Simple> simple;
  if (t.idle) {
    if (!layout.caps.cpu_idle) {
      w.Fail(reason::kKernelLacksCpuIdle, std::string(kf::kIdleMissingMessage));
      return w;
    }
    simple.push_back({Join(dirs.cpu, kf::v1::kIdle), *t.idle ? "1" : "0"});
  }
  if (t.weight) {
    if (v1) {
      simple.push_back(
          {Join(dirs.cpu, kf::v1::kShares), std::to_string(cgroup::WeightToShares(*t.weight))});
    } else {
      simple.push_back({Join(dirs.cpu, kf::v2::kWeight), std::to_string(*t.weight)});
    }
  }
  if (t.quota) {
    if (v1) {
      // Period first, quota last: the limit takes effect with the final write. A period change
      // under a set quota goes through an unlimited quota, which the parent always accepts.
      const std::string period_file = Join(dirs.cpu, kf::v1::kCfsPeriodUs);
      const std::string quota_file = Join(dirs.cpu, kf::v1::kCfsQuotaUs);
      const std::string period = std::to_string(t.quota->period_us);
      const std::string unlimited = std::to_string(kf::v1::kQuotaUnlimited);
      auto cur_period = read(period_file);
      auto cur_quota = read(quota_file);
      const bool period_changes =
          cur_period.ok() && !KnobValuesEquivalent(period_file, *cur_period, period);
      if (period_changes && cur_quota.ok() &&
          !KnobValuesEquivalent(quota_file, *cur_quota, unlimited)) {
        simple.push_back({quota_file, unlimited});
      }
      simple.push_back({period_file, period});
      simple.push_back({quota_file,
                        t.quota->quota_us < 0 ? unlimited : std::to_string(t.quota->quota_us),
                        period_changes});
    } else {
      std::string q = t.quota->quota_us < 0 ? std::string(kf::v2::kMaxKeyword)
                                            : std::to_string(t.quota->quota_us);
      simple.push_back(
          {Join(dirs.cpu, kf::v2::kMax), q + " " + std::to_string(t.quota->period_us)});
    }
  }
  for (const auto& [path, value, force] : simple) {
    s.keep.insert(path);
    auto cur = read(path);
    if (!cur.ok()) {
      w.Fail(ReasonFor(cur.status(), path), cur.status().ToString());
      return w;
    }
    if (!force && !w.finals.count(path) && KnobValuesEquivalent(path, *cur, value)) {
      if (checkpoint_->Get(path)) s.verified[path] = value;
      continue;
    }
    bool contested = false;
    if (overwritten(path, *cur, &contested) && contested) {
      w.contested = true;
      continue;
    }
    w.writes.push_back({path, value});
    w.finals[path] = value;
  }

  // cpu.idle resets the group's weight: 1 → the minimum (v1 cpu.shares reads 3), 0 → the
  // default (1024 / 100), losing kubelet's value. Own the weight file too, so reverting idle
  // can put kubelet's exact bytes back.
  if (t.idle && !w.failed) {
    const std::string weight_file =
        v1 ? Join(dirs.cpu, kf::v1::kShares) : Join(dirs.cpu, kf::v2::kWeight);
    s.keep.insert(weight_file);
    const std::string idle_file = Join(dirs.cpu, kf::v1::kIdle);
    if (w.finals.count(idle_file) && !w.finals.count(weight_file)) {
      auto cur = read(weight_file);
      if (!cur.ok()) {
        w.Fail(ReasonFor(cur.status(), weight_file), cur.status().ToString());
        return w;
      }
      w.side_effects[weight_file] = *t.idle ? (v1 ? kIdleSharesV1 : kIdleWeightV2)
                                            : (v1 ? kDefaultSharesV1 : kDefaultWeightV2);
    } else if (auto e = checkpoint_->Get(weight_file); e && !w.finals.count(weight_file)) {
      auto cur = read(weight_file);
      if (cur.ok() && KnobValuesEquivalent(weight_file, *cur, e->written)) {
        s.verified[weight_file] = e->written;
      }
    }
  }

  // cpusets: the pod dir and everything below it, ordered for v1.
  auto tree = [&](cgroup::Knob knob, const CpuSet& target) {
    std::vector<std::string> files = cgroups_->KnobFiles(dirs, knob);
    for (const auto& c : resolved->containers) {
      for (const auto& f : cgroups_->KnobFiles(c.dirs, knob)) files.push_back(f);
      for (const auto& child : c.children) {
        for (const auto& f : cgroups_->KnobFiles(child, knob)) files.push_back(f);
      }
    }
    std::set<std::string> skip;
    for (const auto& f : files) {
      s.keep.insert(f);
      auto cur = read(f);
      if (!cur.ok()) continue;  // PlanCpusetTree reports it
      if (KnobValuesEquivalent(f, *cur, target.ToString())) {
        if (checkpoint_->Get(f)) s.verified[f] = target.ToString();
        continue;
      }
      bool contested = false;
      if (overwritten(f, *cur, &contested) && contested) {
        w.contested = true;
        skip.insert(f);
      }
    }
    if (!v1 && knob == cgroup::Knob::kCpusetCpus) {
      w.effective_cpus.push_back({dirs.cpuset, target});
      for (const auto& c : resolved->containers)
        w.effective_cpus.push_back({c.dirs.cpuset, target});
    }
    auto planned = cgroups_->PlanCpusetTree(dirs, knob, target);
    if (!planned.ok()) {
      w.Fail(ReasonFor(planned.status(), Join(dirs.cpuset, kf::v1::kCpusetCpus)),
             planned.status().ToString());
      return;
    }
    for (auto& fw : *planned) {
      if (skip.count(fw.path)) continue;
      s.keep.insert(fw.path);
      if (!read(fw.path).ok()) {
        w.Fail(reason::kCgroupNotFound, "cannot read " + fw.path);
        return;
      }
      w.finals[fw.path] = fw.value;
      w.writes.push_back(std::move(fw));
    }
  };
  if (t.cpus && !w.failed) tree(cgroup::Knob::kCpusetCpus, *t.cpus);
  if (t.mems && !w.failed) tree(cgroup::Knob::kCpusetMems, *t.mems);

  for (const auto& fw : w.writes) {
    Status rail = CheckWritable(fw.path, t.pod.uid);
    if (!rail.ok()) {
      w.Fail(reason::kNotPodCgroup, rail.message());
      w.writes.clear();
      break;
    }
  }
  return w;
}

void Enforcer::CheckpointUpsertsLocked(const PodWork& w,
                                       std::map<std::string, CheckpointEntry>& pending) const {
  if (w.failed || w.writes.empty()) return;
  // The entry to extend: one already pending in this batch, the stored one (whose last value is
  // now also ours), or a new one recording the file's current bytes as its original.
  auto entry_for = [&](const std::string& path, const std::string& current) {
    CheckpointEntry e;
    if (auto it = pending.find(path); it != pending.end()) {
      e = it->second;
      AddUnique(e.also_ours, e.written);
    } else if (auto existing = checkpoint_->Get(path)) {
      e = *existing;
      AddUnique(e.also_ours, e.written);
    } else {
      e.path = path;
      e.knob = Basename(path);
      e.original = current;
    }
    e.pod_uid = w.result.uid;
    return e;
  };
  for (const auto& [path, final_value] : w.finals) {
    const std::string& current = ValueOr(w.current, path);
    CheckpointEntry e = entry_for(path, current);
    e.written = final_value;
    AddUnique(e.also_ours, current);
    for (const auto& fw : w.writes) {
      if (fw.path == path && fw.value != final_value) AddUnique(e.also_ours, fw.value);
    }
    pending[path] = std::move(e);
  }
  for (const auto& [path, candidates] : w.side_effects) {
    const std::string& current = ValueOr(w.current, path);
    CheckpointEntry e = entry_for(path, current);
    e.written = candidates.front();
    AddUnique(e.also_ours, current);
    for (size_t i = 1; i < candidates.size(); ++i) AddUnique(e.also_ours, candidates[i]);
    pending[path] = std::move(e);
  }
}

void Enforcer::ExecuteLocked(std::vector<PodWork>& work, bool dry_run_plan, Scratch& s) {
  ApplyReport& r = *s.report;
  // Dry-run entries (the whole plan, or one DryRun policy's pods in an enforced plan) are
  // reported, never checkpointed or written.
  for (auto& w : work) {
    if (w.failed || !w.dry_run) continue;
    // ApplyReport.writes lists what would be written only when nothing is: in an enforced
    // plan it is the writes performed.
    if (dry_run_plan) r.writes.insert(r.writes.end(), w.writes.begin(), w.writes.end());
    w.result.files_written = w.finals.size();
    w.result.reason = reason::kDryRun;
    w.result.message = "would write " + std::to_string(w.finals.size()) + " file(s)";
  }
  if (dry_run_plan) return;  // every entry is dry-run: nothing to checkpoint or write
  // Checkpoint first, once for the whole batch (one temp file + two fsyncs however many pods):
  // originals of files never written before, and every value a file may hold if we die between
  // here and the last verified write.
  std::map<std::string, CheckpointEntry> pending;
  for (const auto& w : work) {
    if (!w.dry_run) CheckpointUpsertsLocked(w, pending);
  }
  if (!pending.empty()) {
    std::vector<CheckpointEntry> upserts;
    upserts.reserve(pending.size());
    for (auto& [path, e] : pending) upserts.push_back(std::move(e));
    Status st = checkpoint_->Commit(upserts, {});
    if (!st.ok()) {
      if (r.checkpoint_status.ok()) r.checkpoint_status = st;
      for (auto& w : work) {
        if (!w.dry_run && !w.writes.empty()) w.Fail(reason::kCheckpointFailed, st.ToString());
      }
      return;
    }
  }
  for (auto& w : work) {
    if (!w.dry_run) WritePodLocked(w, s);
  }
}

void Enforcer::WritePodLocked(PodWork& w, Scratch& s) {
  ApplyReport& r = *s.report;
  if (w.failed) return;
  std::set<std::string> written;
  for (const auto& fw : w.writes) {
    Status st = WriteVerifyLocked(fw.path, fw.value);
    if (!st.ok()) {
      w.Fail(ReasonFor(st, fw.path), st.ToString());
      break;
    }
    r.writes.push_back(fw);
    written.insert(fw.path);
  }
  w.result.files_written = written.size();
  r.files_written += written.size();
  if (w.failed) return;
  for (const auto& [path, value] : w.finals) s.verified[path] = value;
  for (const auto& [path, candidates] : w.side_effects) {
    auto now = cgroups_->ReadRaw(path);
    s.verified[path] = now.ok() ? *now : candidates.front();
  }
  // v2 clips instead of failing: a cpuset outside the parent's effective set is accepted and
  // silently narrowed (or, with no overlap, replaced by the parent's). Report it as v1's
  // EACCES would be; the files stay checkpointed and are reverted with the rest.
  for (const auto& [dir, want] : w.effective_cpus) {
    cgroup::CgroupPaths d{dir, dir, dir};
    auto eff = cgroups_->ReadEffectiveCpus(d);
    if (!eff.ok()) {
      if (eff.status().code() == StatusCode::kNotFound) continue;  // plain-dir fakes
      w.Fail(reason::kWriteFailed, eff.status().ToString());
      return;
    }
    // Clipping leaves want ∩ parent's (a strict part of want) or, with no overlap, the
    // parent's set: either way `want` is not inside the effective set.
    if (!want.IsSubsetOf(*eff)) {
      w.Fail(reason::kCpusetNotSubset,
             dir + ": cpuset.cpus.effective is " + eff->ToString() + ", wanted " + want.ToString() +
                 " (cgroup v2 clipped the set to the parent's effective cpus: not a subset)");
      return;
    }
  }
  if (w.contested) {
    w.result.reason = reason::kContested;
    w.result.message = "another writer keeps rewriting some of this pod's files; left to it";
    return;
  }
  w.result.enforced = true;
}

void Enforcer::RevertLocked(const std::vector<CheckpointEntry>& entries, ApplyReport& r) {
  std::vector<std::string> removals;
  struct Restore {
    CheckpointEntry entry;
    std::string current;
  };
  std::vector<Restore> restores;
  for (const auto& e : entries) {
    RevertResult rr{e.path, e.pod_uid, e.knob, "", ""};
    Status rail = CheckWritable(e.path, e.pod_uid);
    if (!rail.ok()) {
      rr.outcome = reason::kRevertFailed;
      rr.message = rail.message();
      r.reverts.push_back(std::move(rr));
      continue;
    }
    auto cur = cgroups_->ReadRaw(e.path);
    if (!cur.ok()) {
      if (cur.status().code() == StatusCode::kNotFound) {
        rr.outcome = reason::kGone;
        removals.push_back(e.path);
      } else {
        rr.outcome = reason::kRevertFailed;
        rr.message = cur.status().ToString();
      }
      r.reverts.push_back(std::move(rr));
      continue;
    }
    if (KnobValuesEquivalent(e.path, *cur, e.original)) {
      rr.outcome = reason::kAlreadyOriginal;
      removals.push_back(e.path);
      r.reverts.push_back(std::move(rr));
      continue;
    }
    if (!IsOursLocked(e, *cur)) {
      rr.outcome = reason::kOverwrittenByOther;
      rr.message = "holds '" + std::string(Trim(*cur)) + "', we wrote '" +
                   std::string(Trim(e.written)) + "'; left as is";
      ++r.overwritten_by_other;
      removals.push_back(e.path);
      r.reverts.push_back(std::move(rr));
      continue;
    }
    restores.push_back({e, *cur});
  }

  // Order: cpuset files top-down to current ∪ original, then bottom-up to the original (v1
  // never sees a child outside its parent); quota before period; the rest as they come.
  std::stable_sort(restores.begin(), restores.end(), [](const Restore& a, const Restore& b) {
    return Depth(a.entry.path) < Depth(b.entry.path);
  });
  std::vector<cgroup::FileWrite> plan;
  std::map<std::string, std::string> intermediates;
  for (const auto& x : restores) {
    if (!IsCpusetFile(x.entry.path)) continue;
    auto orig = CpuSet::Parse(x.entry.original);
    auto cur = CpuSet::Parse(x.current);
    if (orig.ok() && cur.ok() && !orig->IsSubsetOf(*cur)) {
      std::string u = cur->Union(*orig).ToString();
      plan.push_back({x.entry.path, u});
      intermediates[x.entry.path] = u;
    }
  }
  for (auto it = restores.rbegin(); it != restores.rend(); ++it) {
    if (IsCpusetFile(it->entry.path)) plan.push_back({it->entry.path, it->entry.original});
  }
  for (const auto& x : restores) {
    if (Basename(x.entry.path) == kf::v1::kCfsQuotaUs) {
      plan.push_back({x.entry.path, x.entry.original});
    }
  }
  // cpu.idle before the weight: leaving idle resets the weight, which we restore after it.
  for (const auto& x : restores) {
    if (Basename(x.entry.path) == kf::v1::kIdle) plan.push_back({x.entry.path, x.entry.original});
  }
  for (const auto& x : restores) {
    const std::string base = Basename(x.entry.path);
    if (!IsCpusetFile(x.entry.path) && base != kf::v1::kCfsQuotaUs && base != kf::v1::kIdle) {
      plan.push_back({x.entry.path, x.entry.original});
    }
  }

  if (!intermediates.empty()) {
    std::vector<CheckpointEntry> upserts;
    for (const auto& x : restores) {
      if (auto it = intermediates.find(x.entry.path); it != intermediates.end()) {
        CheckpointEntry e = x.entry;
        AddUnique(e.also_ours, it->second);
        upserts.push_back(std::move(e));
      }
    }
    Status st = checkpoint_->Commit(upserts, {});
    if (!st.ok()) {
      if (r.checkpoint_status.ok()) r.checkpoint_status = st;
      for (const auto& x : restores) {
        r.reverts.push_back(
            {x.entry.path, x.entry.pod_uid, x.entry.knob, reason::kRevertFailed, st.ToString()});
      }
      plan.clear();
      restores.clear();
    }
  }
  std::map<std::string, Status> failures;
  for (const auto& fw : plan) {
    if (failures.count(fw.path)) continue;
    Status st = WriteVerifyLocked(fw.path, fw.value);
    if (!st.ok()) {
      failures[fw.path] = st;
      continue;
    }
    r.writes.push_back(fw);
  }
  for (const auto& x : restores) {
    RevertResult rr{x.entry.path, x.entry.pod_uid, x.entry.knob, reason::kRestored, ""};
    if (auto it = failures.find(x.entry.path); it != failures.end()) {
      rr.outcome = reason::kRevertFailed;
      rr.message = it->second.ToString();
    } else {
      ++r.files_reverted;
      removals.push_back(x.entry.path);
    }
    r.reverts.push_back(std::move(rr));
  }
  Status st = checkpoint_->Commit({}, removals);
  if (!st.ok() && r.checkpoint_status.ok()) r.checkpoint_status = st;
  for (const auto& path : removals) file_state_.erase(path);
}

ApplyReport Enforcer::Apply(const Plan& plan) {
  std::lock_guard<std::mutex> l(mu_);
  ApplyReport r;
  r.fence_version = plan.fence_version;
  r.dry_run = plan.dry_run;
  Scratch s;
  s.report = &r;

  // 0. A pod whose policy is DryRun (every pod of a dry-run plan) holds no fence: what an
  //    earlier Enforce wrote for it is restored now, as if its policy were gone. Switching a
  //    policy to DryRun withdraws its fences, and the pod's "would write" below is then judged
  //    against kubelet's values, not ours.
  const std::vector<Target> targets = TargetsOf(plan);
  std::set<std::string> report_only;  // pod uids; the first entry of a pod decides, as below
  {
    std::set<std::string> first;
    for (const Target& t : targets) {
      if (first.insert(t.pod.uid).second && t.dry_run) report_only.insert(t.pod.uid);
    }
  }
  std::set<std::string> withdrawn_paths;
  {
    std::vector<CheckpointEntry> withdrawn;
    for (const auto& e : checkpoint_->Entries()) {
      if (!plan.dry_run && !report_only.count(e.pod_uid)) continue;
      withdrawn_paths.insert(e.path);
      withdrawn.push_back(e);
    }
    RevertLocked(withdrawn, r);
    // A dry-run report's `writes` are the fence writes it would make; the restores it made
    // are in `reverts`.
    if (plan.dry_run) r.writes.clear();
  }

  // 1. Work out every pod's writes (nothing written yet).
  std::vector<PodWork> work;
  std::set<std::string> seen;
  for (const Target& t : targets) {
    if (!seen.insert(t.pod.uid).second) {
      PodWork w;
      w.result.uid = t.pod.uid;
      w.result.ns = t.pod.ns;
      w.result.name = t.pod.name;
      w.result.policy = t.policy;
      w.result.role = t.role;
      w.Fail("DuplicatePod", "pod appears more than once in the plan; first entry wins");
      work.push_back(std::move(w));
      continue;
    }
    work.push_back(PreparePodLocked(t, s));
  }
  // 2. Revert what the plan no longer wants first (e.g. cpu.idle before cpu.shares on v1).
  std::vector<CheckpointEntry> stale;
  for (const auto& e : checkpoint_->Entries()) {
    if (withdrawn_paths.count(e.path)) continue;  // step 0 already tried it
    if (!s.keep.count(e.path) && !s.keep_pods.count(e.pod_uid)) stale.push_back(e);
  }
  RevertLocked(stale, r);
  // 3. Checkpoint (one commit), then write.
  ExecuteLocked(work, plan.dry_run, s);
  for (auto& w : work) {
    w.result.overwrites = pod_overwrites_[w.result.uid];
    if (w.result.enforced) {
      ++r.enforced;
    } else if (w.result.reason != reason::kDryRun) {
      ++r.failed;
    }
    r.pods.push_back(std::move(w.result));
  }
  if (plan.dry_run) {
    last_plan_.reset();  // nothing is enforced: Verify has nothing to re-apply
    ready_ = true;
    return r;
  }
  // 4. Settle: files verified to hold our value need no other "ours" values any more.
  std::vector<CheckpointEntry> settled;
  for (const auto& [path, value] : s.verified) {
    auto e = checkpoint_->Get(path);
    if (!e) continue;
    if (e->also_ours.empty() && e->written == value) continue;
    e->written = value;
    e->also_ours.clear();
    settled.push_back(std::move(*e));
  }
  Status st = checkpoint_->Commit(settled, {});
  if (st.ok()) st = checkpoint_->SetAppliedVersion(plan.fence_version);
  if (!st.ok() && r.checkpoint_status.ok()) r.checkpoint_status = st;
  last_plan_ = plan;
  ready_ = r.checkpoint_status.ok();
  return r;
}

ApplyReport Enforcer::RevertAll() {
  std::lock_guard<std::mutex> l(mu_);
  ApplyReport r;
  RevertLocked(checkpoint_->Entries(), r);
  last_plan_.reset();
  return r;
}

VerifyReport Enforcer::Verify(const std::vector<std::string>& paths) {
  std::lock_guard<std::mutex> l(mu_);
  VerifyReport vr;
  if (!last_plan_) return vr;
  std::vector<CheckpointEntry> entries;
  if (paths.empty()) {
    entries = checkpoint_->Entries();
  } else {
    for (const auto& p : paths) {
      if (auto e = checkpoint_->Get(p)) entries.push_back(std::move(*e));
    }
  }
  ApplyReport r;
  Scratch s;
  s.report = &r;
  std::set<std::string> pods;
  for (const auto& e : entries) {
    auto cur = cgroups_->ReadRaw(e.path);
    if (!cur.ok()) continue;  // gone: the next Apply settles it
    ++vr.checked;
    if (KnobValuesEquivalent(e.path, *cur, e.written)) continue;
    if (auto it = file_state_.find(e.path); it != file_state_.end() && it->second.contested) {
      ++vr.contested;  // already left to the other writer; not a new overwrite
      continue;
    }
    ++vr.overwrites;
    vr.overwritten_paths.push_back(e.path);
    s.counted.insert(e.path);
    if (RecordOverwriteLocked(e.path, e.pod_uid)) {
      ++vr.contested;
    } else {
      pods.insert(e.pod_uid);
    }
  }
  if (pods.empty()) return vr;
  std::vector<PodWork> work;
  for (const Target& t : TargetsOf(*last_plan_)) {
    if (!pods.count(t.pod.uid)) continue;
    pods.erase(t.pod.uid);  // first entry wins, as in Apply
    work.push_back(PreparePodLocked(t, s));
  }
  ExecuteLocked(work, /*dry_run=*/false, s);
  for (const auto& w : work) vr.reapplied += w.result.files_written;
  std::vector<CheckpointEntry> settled;
  for (const auto& [path, value] : s.verified) {
    auto e = checkpoint_->Get(path);
    if (!e || (e->also_ours.empty() && e->written == value)) continue;
    e->written = value;
    e->also_ours.clear();
    settled.push_back(std::move(*e));
  }
  checkpoint_->Commit(settled, {}).IgnoreError();  // next Apply retries
  return vr;
}

}  // namespace feedguard::agent
