#include "agent/enforcer/enforcer.h"

#include <algorithm>
#include <sstream>
#include <string_view>
#include <utility>

#include "agent/cgroup/kernel_facts.h"
#include "agent/cgroup/knobs.h"
#include "agent/cgroup/kubelet_facts.h"
#include "common/locked.h"
#include "common/strings.h"

namespace feedguard::agent {
namespace {

namespace kf = cgroup;
using cgroup::IsCpusetFile;

// Maps a write/read failure to a stable reason code.
std::string ReasonFor(const Status& st, const std::string& file) {
  switch (st.code()) {
    case StatusCode::kNotFound:
      return cgroup::IsIdleFile(file) ? reason::kKernelLacksCpuIdle : reason::kCgroupNotFound;
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

// ---- per-Apply bookkeeping ---------------------------------------------------------------------

struct Enforcer::Scratch {
  ApplyReport* report = nullptr;
  std::set<std::string> keep;       // files the plan still wants: never reverted by this Apply
  std::set<std::string> keep_pods;  // pods whose files could not be looked at: keep them all
  std::map<std::string, std::string> verified;  // path → value the file holds and we want
  std::set<std::string> counted;                // overwrites already counted in this pass
  // Weight files of pods whose Idle fence holds after this pass → the pod's CPU request.
  std::map<std::string, int64_t> requests;
};

struct Enforcer::PodWork {
  feedguard::v1::PodReport result;  // what the node reports for this pod (the one snapshot)
  uint64_t files_written = 0;       // (dry-run: files that would be written)
  bool failed = false;
  bool contested = false;
  bool dry_run = false;   // the entry's policy is DryRun: report only
  bool yielding = false;  // Idle fence lifted for kubelet's resize
  // An Idle fence: its weight file and the pod's CPU request now.
  std::optional<std::pair<std::string, int64_t>> idle_request;
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
  // The journal entries of this pod's files before this Apply (nullopt: none), for rollback.
  std::map<std::string, std::optional<CheckpointEntry>> prior;
  // v1 cpuset files made below an already fenced pod (a restarted container: the kernel gives a
  // new cgroup a copy of its parent's, i.e. the fence's, set). Not written by us, yet ours to
  // widen when the fence goes: path → the original to restore (the pod dir's).
  std::map<std::string, std::string> adopted;

  void Fail(std::string why, std::string msg) {
    if (failed) return;
    failed = true;
    result.set_reason(std::move(why));
    result.set_message(std::move(msg));
  }
  // The pod's identity in the report.
  void Identify(const Target& t) {
    result.set_uid(t.pod.uid);
    result.set_namespace_(t.pod.ns);
    result.set_name(t.pod.name);
    result.set_policy(t.policy);
    result.set_role(t.role);
  }
};

Enforcer::Enforcer(cgroup::CgroupsPtr cgroups, CheckpointStorePtr checkpoint,
                   EnforcerOptions options)
    : cgroups_(std::move(cgroups)),
      checkpoint_(std::move(checkpoint)),
      options_(std::move(options)),
      clock_(options_.time_source ? options_.time_source : std::make_shared<RealTimeSource>()) {}

// The bytes kubelet puts in a pod's weight file for a CPU request (kubelet_facts.h).
std::string Enforcer::KubeletsWeightValue(cgroup::CgroupVersion v, int64_t request_milli) {
  return std::to_string(v == cgroup::CgroupVersion::kV1
                            ? cgroup::MilliCpuToShares(request_milli)
                            : cgroup::PodWeightForRequest(request_milli));
}

bool Enforcer::idle_reads_zero() const { return LockedCopy(mu_, idle_reads_zero_); }

bool Enforcer::ready() const { return LockedCopy(mu_, ready_); }

std::vector<std::string> Enforcer::OwnedFiles() const {
  std::vector<std::string> out;
  for (const auto& e : checkpoint_->Entries()) out.push_back(e.path);
  return out;
}

std::map<std::string, uint64_t> Enforcer::OverwriteCounts() const {
  return LockedCopy(mu_, pod_overwrites_);
}

std::map<std::string, uint64_t> Enforcer::RestatementCounts() const {
  return LockedCopy(mu_, pod_restatements_);
}

uint64_t Enforcer::writes_made() const { return LockedCopy(mu_, writes_made_); }

std::set<std::string> Enforcer::ContestedPods() const {
  std::lock_guard<std::mutex> l(mu_);
  std::set<std::string> out;
  for (const auto& [path, st] : file_state_) {
    if (!st.contested) continue;
    if (auto e = checkpoint_->Get(path)) out.insert(e->pod_uid);
  }
  return out;
}

std::vector<Enforcer::Target> Enforcer::TargetsOf(const Plan& plan) {
  std::vector<Target> out;
  // What every entry carries, trainer or neighbour.
  auto target = [&](const auto& entry, feedguard::v1::PodReport::Role role) {
    Target x;
    x.pod = entry.pod;
    x.policy = entry.policy;
    x.role = role;
    x.weight = entry.weight;
    x.dry_run = plan.dry_run || entry.dry_run;
    return x;
  };
  for (const auto& t : plan.trainers) {
    Target x = target(t, feedguard::v1::PodReport::TRAINER);
    if (!t.cpus.empty()) x.cpus = t.cpus;
    if (!t.mems.empty()) x.mems = t.mems;
    out.push_back(std::move(x));
  }
  for (const auto& n : plan.neighbours) {
    Target x = target(n, feedguard::v1::PodReport::NEIGHBOUR);
    x.idle = n.idle;
    x.quota = n.quota;
    x.cpus = n.cpus;
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

// The rail: a file may be written only if it is a knob file (cgroup::IsKnobFile) inside the
// cgroup of the pod it is for (its dir, or a container dir below it) under one of this node's
// mounts, spelled without "." or ".." components, and not in a dir kubelet owns. A checkpoint entry
// (a file on disk anyone with root could edit) that names anything else is refused, not followed.
Status Enforcer::CheckWritable(const std::string& file, const std::string& pod_uid) const {
  const std::string dir = Dirname(file);
  if (dir.empty() || cgroups_->IsKubeletOwned(dir)) {
    return PermissionDenied("refusing to write " + file + ": not a pod or container cgroup");
  }
  if (file.empty() || file[0] != '/') {
    return PermissionDenied("refusing to write " + file + ": not an absolute path");
  }
  if (!cgroup::IsKnobFile(cgroups_->layout().version, file)) {
    return PermissionDenied("refusing to write " + file + ": not a knob file feedguard writes");
  }
  for (size_t i = 1; i <= file.size();) {
    const size_t slash = std::min(file.find('/', i), file.size());
    const std::string_view part(file.data() + i, slash - i);
    if (part.empty() || part == "." || part == "..") {
      return PermissionDenied("refusing to write " + file +
                              ": path has an empty, '.' or '..' part");
    }
    i = slash + 1;
  }
  const auto& layout = cgroups_->layout();
  for (const std::string& mount : {layout.cpu_mount, layout.cpuacct_mount, layout.cpuset_mount}) {
    if (mount.empty()) continue;
    for (QosClass q : {QosClass::kGuaranteed, QosClass::kBurstable, QosClass::kBestEffort}) {
      const std::string pod_dir =
          JoinPath(mount, cgroup::PodRelPath(layout.driver, layout.cgroup_root, q, pod_uid));
      if (file.size() > pod_dir.size() + 1 && file.compare(0, pod_dir.size(), pod_dir) == 0 &&
          file[pod_dir.size()] == '/') {
        return OkStatus();
      }
    }
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

// Only systemd re-applies a unit's attributes on its own (daemon-reload, a property change of
// the unit), and only where it owns the pod slices. Elsewhere a writer that keeps putting the
// same value back — runc, a CPU manager, an NRI plugin — is contesting the fence.
bool Enforcer::IsRestatementLocked(const CheckpointEntry& e, const std::string& current) const {
  return cgroups_->layout().driver == cgroup::KubeletDriver::kSystemd &&
         KnobValuesEquivalent(e.path, current, e.original);
}

// The weight beside an idle file we own, reading the default: the kernel's reset as the group
// left idle — systemd's re-application writes cpu.idle=0 first and the unit's weight after it
// (which may then fail, the fence being back). Nobody wrote that value: not adopted, not counted.
bool Enforcer::IsIdleResetLocked(const CheckpointEntry& e, const std::string& current) const {
  const auto v = cgroups_->layout().version;
  return cgroup::IsWeightResetByLeavingIdle(v, e.path, current) &&
         !KnobValuesEquivalent(e.path, current, e.original) &&
         checkpoint_->Get(JoinPath(Dirname(e.path), std::string(kf::v2::kIdle))).has_value();
}

bool Enforcer::RecordOverwriteLocked(const std::string& path, const std::string& uid,
                                     bool restatement) {
  const auto now = clock_->MonotonicNow();
  FileState& st = file_state_[path];
  auto& times = restatement ? st.restatements : st.overwrites;
  times.push_back(now);
  while (!times.empty() && now - times.front() > options_.contest_window) times.pop_front();
  ++(restatement ? pod_restatements_ : pod_overwrites_)[uid];
  const int limit = restatement ? options_.restate_limit : options_.contest_threshold;
  if (static_cast<int>(times.size()) >= limit) st.contested = true;
  st.theirs_standing = true;
  return st.contested;
}

bool Enforcer::SeenBeforeLocked(const std::string& path, const std::string& current,
                                const CheckpointEntry& e) const {
  auto it = file_state_.find(path);
  return it != file_state_.end() && it->second.theirs_standing &&
         KnobValuesEquivalent(path, current, e.original);
}

Status Enforcer::WriteCountedLocked(const std::string& path, const std::string& value) {
  Status st = cgroups_->WriteRaw(path, value);
  ++writes_made_;
  if (options_.after_write) options_.after_write(writes_made_, path);
  return st;
}

Status Enforcer::WriteVerifyLocked(const std::string& path, const std::string& value) {
  if (Status st = WriteCountedLocked(path, value); !st.ok()) return st;
  if (auto it = file_state_.find(path); it != file_state_.end()) it->second.theirs_standing = false;
  auto back = cgroups_->ReadRaw(path);
  if (!back.ok()) return back.status();
  if (!KnobValuesEquivalent(path, *back, value)) {
    return Aborted("verify " + path + ": wrote '" + std::string(Trim(value)) + "', reads '" +
                   std::string(Trim(*back)) + "'");
  }
  return OkStatus();
}

// One pod's judgement in progress: what PreparePodLocked's steps share.
struct Enforcer::PodJudge {
  const Target& t;
  Scratch& s;
  PodWork& w;
  const cgroup::ResolvedPod& pod;
  cgroup::CgroupVersion version;
  bool v1;
};

Result<std::string> Enforcer::JudgeReadLocked(PodJudge& j, const std::string& path) {
  if (auto it = j.w.current.find(path); it != j.w.current.end()) return it->second;
  auto r = cgroups_->ReadRaw(path);
  if (r.ok()) j.w.current[path] = *r;
  return r;
}

bool Enforcer::OverwrittenLocked(PodJudge& j, const std::string& path, const std::string& current,
                                 bool* contested) {
  *contested = file_state_.count(path) && file_state_[path].contested;
  auto e = checkpoint_->Get(path);
  if (!e || KnobValuesEquivalent(path, current, e->written) || IsOursLocked(*e, current) ||
      IsIdleResetLocked(*e, current)) {
    return false;
  }
  // The overwrite already counted, its value still standing: nothing new to adopt or count.
  if (SeenBeforeLocked(path, current, *e)) return true;
  // The recorded original written back (systemd re-stating kubelet's value) is no contest.
  const bool restated = IsRestatementLocked(*e, current);
  if (!KnobValuesEquivalent(path, current, e->original)) NoteQuotaResizeLocked(*e);
  AdoptOriginalLocked(*e, current, *j.s.report);
  // A contested file still holding the other writer's value is not a new overwrite.
  if (!*contested && !j.s.counted.count(path)) {
    j.s.counted.insert(path);
    *contested = RecordOverwriteLocked(path, j.t.pod.uid, restated);
  }
  return true;
}

void Enforcer::KeepOursLocked(PodJudge& j, const std::string& path) {
  j.s.keep.insert(path);
  auto e = checkpoint_->Get(path);
  if (!e) return;
  auto cur = JudgeReadLocked(j, path);
  if (!cur.ok()) return;
  bool contested = false;
  if (KnobValuesEquivalent(path, *cur, e->written)) {
    j.s.verified[path] = e->written;
  } else if (OverwrittenLocked(j, path, *cur, &contested) && contested) {
    j.w.contested = true;
  }
}

bool Enforcer::ResizeStepAsideLocked(PodJudge& j) {
  // kubelet's in-place resize of an Idle-fenced pod: the kernel refuses its weight write while
  // the group is idle (EINVAL; kubelet_facts.h says what kubelet does next). When the pod's CPU
  // request differs from the one its fence was put in place with:
  //  - where kubelet retries (v1), the fence steps aside (cpu.idle back to 0) until kubelet's
  //    write lands in the weight file — adopted as the new original — or
  //    `resize_yield_timeout` passes; then it is put back. (In memory: a resize pending across
  //    an agent restart waits for the next change.)
  //  - where kubelet never writes again (v2), the weight kubelet meant for the new request is
  //    taken as the original at once and the fence stays: the revert then gives the pod its
  //    resized weight, not the pre-resize one.
  const std::string& uid = j.t.pod.uid;
  const int64_t req = j.t.pod.cpu_request_milli;
  const std::string weight_file = cgroup::WeightFile(j.version, j.pod.dirs.cpu);
  const auto recorded = checkpoint_->Get(weight_file);
  if (recorded && recorded->request_milli >= 0 && recorded->request_milli != req &&
      !yielding_.count(uid)) {
    if (cgroup::KubeletRetriesRefusedPodWeightWrite(j.version)) {
      yielding_[uid] = {req, clock_->MonotonicNow(), weight_file};
    } else {
      AdoptOriginalLocked(
          *recorded, cgroup::WeightValue(j.version, cgroup::PodWeightForRequest(req)), *j.s.report);
      j.w.result.set_message("resized in place to a CPU request of " + std::to_string(req) +
                             "m under the Idle fence: kubelet's refused weight write taken as the "
                             "original");
    }
  }
  auto y = yielding_.find(uid);
  if (y == yielding_.end()) return false;
  auto e = checkpoint_->Get(weight_file);
  auto cur = JudgeReadLocked(j, weight_file);
  // Landed: a value that is not ours, or any write at all (Verify saw the event) — for a resize
  // to 1000m kubelet writes 1024 shares, exactly what leaving idle left there.
  const bool landed =
      e && cur.ok() &&
      (y->second.written ||
       (!KnobValuesEquivalent(weight_file, *cur, e->written) && !IsOursLocked(*e, *cur)) ||
       (KnobValuesEquivalent(weight_file, *cur, KubeletsWeightValue(j.version, req)) &&
        clock_->MonotonicNow() - y->second.since >= options_.resize_settle));
  const bool expired = clock_->MonotonicNow() - y->second.since > options_.resize_yield_timeout;
  if (landed) {
    // kubelet's value is the pod's from now on, whatever the journal called it, and the resize
    // is over: the request the fence now holds with is journaled with it, so an agent killed
    // before its cpu.idle=1 write lands does not step aside again after a restart.
    CheckpointEntry landed_entry = *e;
    landed_entry.original = *cur;
    landed_entry.request_milli = req;
    if (!(landed_entry == *e)) {
      Status st = checkpoint_->Commit({landed_entry}, {});
      if (!st.ok() && j.s.report->checkpoint_status.ok()) j.s.report->checkpoint_status = st;
    }
    yielding_.erase(y);
  } else if (expired) {
    yielding_.erase(y);
  } else if (y->second.request_milli != req) {  // resized again: wait afresh
    y->second = {req, clock_->MonotonicNow(), weight_file};
  }
  return yielding_.count(uid) > 0;
}

std::optional<CpuQuota> Enforcer::QuotaWantedLocked(PodJudge& j) {
  const Target& t = j.t;
  if (!t.quota || !j.v1 || t.dry_run) return t.quota;
  auto q = quota_settling_.find(t.pod.uid);
  if (q == quota_settling_.end()) return t.quota;
  if (clock_->MonotonicNow() - q->second >= options_.resize_settle) {
    quota_settling_.erase(q);
    return t.quota;
  }
  // kubelet and runc are resizing the pod: their writes land unfenced; every bandwidth file of
  // ours stays ours (nothing is reverted meanwhile) and the fence returns after.
  for (const auto& e : checkpoint_->Entries()) {
    if (e.pod_uid == t.pod.uid && cgroup::IsBandwidthFile(e.path)) j.s.keep.insert(e.path);
  }
  j.w.yielding = true;
  j.w.result.set_message(
      "kubelet is resizing this pod in place; its Quota fence waits until "
      "kubelet's and runc's quota writes have landed");
  return std::nullopt;
}

bool Enforcer::PlanCpuKnobsLocked(PodJudge& j, const cgroup::CpuKnobs& want) {
  PodWork& w = j.w;
  auto read = [&](const std::string& path) { return JudgeReadLocked(j, path); };
  // The pod's container dirs (and their process-holding children), parents first.
  std::vector<std::string> child_cpu_dirs;
  for (const auto& c : j.pod.containers) {
    child_cpu_dirs.push_back(c.dirs.cpu);
    for (const auto& child : c.children) child_cpu_dirs.push_back(child.cpu);
  }
  // Plain knobs, in the cgroup layer's order. v1 refuses a pod quota below a container's own
  // limit: such containers are lifted to unlimited first (they then inherit the pod's fence),
  // and stay ours while the fence holds.
  std::vector<cgroup::KnobWrite> simple;
  if (want.quota && j.v1) {
    simple = cgroup::LiftChildQuotas(j.version, child_cpu_dirs, *want.quota, read);
    for (const auto& dir : child_cpu_dirs) {
      const std::string f = cgroup::QuotaFile(j.version, dir);
      if (std::none_of(simple.begin(), simple.end(), [&](const auto& k) { return k.path == f; }))
        KeepOursLocked(j, f);
    }
  }
  auto knob_writes = cgroup::CpuKnobWrites(j.version, j.pod.dirs.cpu, want, read);
  if (!knob_writes.ok()) {
    w.Fail(ReasonFor(knob_writes.status(), j.pod.dirs.cpu), knob_writes.status().ToString());
    return false;
  }
  simple.insert(simple.end(), knob_writes->begin(), knob_writes->end());
  for (const auto& [path, value, force] : simple) {
    j.s.keep.insert(path);
    auto cur = read(path);
    if (!cur.ok()) {
      w.Fail(ReasonFor(cur.status(), path), cur.status().ToString());
      return false;
    }
    if (!force && !w.finals.count(path) && KnobValuesEquivalent(path, *cur, value)) {
      if (checkpoint_->Get(path)) j.s.verified[path] = value;
      continue;
    }
    bool contested = false;
    if (OverwrittenLocked(j, path, *cur, &contested) && contested) {
      w.contested = true;
      continue;
    }
    w.writes.push_back({path, value});
    w.finals[path] = value;
  }
  // Files the kernel changes as a side effect of these writes (cpu.idle resets the weight,
  // losing kubelet's value): owned too, so the restore can put kubelet's exact bytes back.
  for (const auto& fw : w.writes) {
    auto se = cgroup::SideEffectOf(j.version, fw.path, fw.value);
    if (!se || w.finals.count(se->path)) continue;
    j.s.keep.insert(se->path);
    auto cur = read(se->path);
    if (!cur.ok()) {
      w.Fail(ReasonFor(cur.status(), se->path), cur.status().ToString());
      return false;
    }
    bool contested = false;
    OverwrittenLocked(j, se->path, *cur, &contested);  // kubelet wrote it since: the original
    w.side_effects[se->path] = se->values;
  }
  return true;
}

void Enforcer::PlanCpusetLocked(PodJudge& j, cgroup::Knob knob, const CpuSet& target) {
  PodWork& w = j.w;
  const cgroup::CgroupPaths& dirs = j.pod.dirs;
  // The pod dir and everything below it (the sandbox's dir too), ordered for v1.
  auto files = cgroups_->CpusetTreeFiles(dirs, knob);
  if (!files.ok()) {
    w.Fail(ReasonFor(files.status(), JoinPath(dirs.cpuset, kf::v1::kCpusetCpus)),
           files.status().ToString());
    return;
  }
  std::set<std::string> skip;
  const std::string pod_file = files->empty() ? "" : files->front();  // parents first
  const auto pod_entry = checkpoint_->Get(pod_file);
  for (const auto& f : *files) {
    j.s.keep.insert(f);
    auto cur = JudgeReadLocked(j, f);
    if (!cur.ok()) continue;  // PlanCpusetTree reports it
    if (KnobValuesEquivalent(f, *cur, target.ToString())) {
      if (checkpoint_->Get(f)) {
        j.s.verified[f] = target.ToString();
      } else if (j.v1 && f != pod_file && pod_entry) {
        // Created under the fence (v1 copies the parent's set into a new cgroup): widened to
        // the pod's own original on revert, like every dir we wrote.
        w.adopted[f] = pod_entry->original;
      }
      continue;
    }
    bool contested = false;
    if (OverwrittenLocked(j, f, *cur, &contested) && contested) {
      w.contested = true;
      skip.insert(f);
    }
  }
  if (!j.v1 && knob == cgroup::Knob::kCpusetCpus) {
    w.effective_cpus.push_back({dirs.cpuset, target});
    for (const auto& c : j.pod.containers) w.effective_cpus.push_back({c.dirs.cpuset, target});
  }
  auto planned = cgroups_->PlanCpusetTree(dirs, knob, target);
  if (!planned.ok()) {
    w.Fail(ReasonFor(planned.status(), JoinPath(dirs.cpuset, kf::v1::kCpusetCpus)),
           planned.status().ToString());
    return;
  }
  for (auto& fw : *planned) {
    if (skip.count(fw.path)) continue;
    j.s.keep.insert(fw.path);
    if (!JudgeReadLocked(j, fw.path).ok()) {
      w.Fail(reason::kCgroupNotFound, "cannot read " + fw.path);
      return;
    }
    w.finals[fw.path] = fw.value;
    w.writes.push_back(std::move(fw));
  }
}

Enforcer::PodWork Enforcer::PreparePodLocked(const Target& t, Scratch& s) {
  PodWork w;
  w.dry_run = t.dry_run;
  w.Identify(t);
  if (t.cpus) w.result.set_cpus(t.cpus->ToString());

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
  const cgroup::CgroupVersion version = layout.version;
  PodJudge j{t, s, w, *resolved, version, version == cgroup::CgroupVersion::kV1};

  if (t.idle && !layout.caps.cpu_idle) {
    w.Fail(reason::kKernelLacksCpuIdle, std::string(kf::kIdleMissingMessage));
    return w;
  }
  std::optional<bool> want_idle = t.idle;
  std::optional<uint64_t> want_weight = t.weight;
  const bool idle_as_weight =
      t.idle && *t.idle && !j.v1 && idle_reads_zero_ && !options_.idle_when_weight_reads_zero;
  if (idle_as_weight) {
    want_idle.reset();  // a stale cpu.idle of ours is reverted by Apply
    want_weight = kf::v2::kWeightMin;
  }
  const bool yielding =
      t.idle && *t.idle && !t.dry_run && !idle_as_weight && ResizeStepAsideLocked(j);
  if (yielding) want_idle = false;
  const std::optional<CpuQuota> want_quota = QuotaWantedLocked(j);
  if (!PlanCpuKnobsLocked(j, {want_idle, want_weight, want_quota})) return w;

  if (want_idle && *want_idle) {
    w.idle_request = {cgroup::WeightFile(version, dirs.cpu), t.pod.cpu_request_milli};
  }
  if (idle_as_weight) {
    w.result.set_message(
        "Idle fence held as the lowest CPU weight (cpu.weight 1): on this kernel an idle "
        "cgroup's cpu.weight reads 0, which kubelet >= 1.36 reports as ~1.8e15 CPUs requested "
        "(the node then looks full to the scheduler and to kubelet's admission)");
  }
  if (yielding) {
    w.yielding = true;
    w.result.set_message("kubelet is resizing this pod in place (CPU request now " +
                         std::to_string(t.pod.cpu_request_milli) +
                         "m); its Idle fence is lifted until kubelet's write lands");
  }
  // An idle pod whose idle file needs no write still owns the weight file written back then.
  if (t.idle && !idle_as_weight) {
    const std::string weight_file = cgroup::WeightFile(version, dirs.cpu);
    if (!w.finals.count(weight_file) && !w.side_effects.count(weight_file)) {
      KeepOursLocked(j, weight_file);
    }
  }
  if (t.cpus && !w.failed) PlanCpusetLocked(j, cgroup::Knob::kCpusetCpus, *t.cpus);
  if (t.mems && !w.failed) PlanCpusetLocked(j, cgroup::Knob::kCpusetMems, *t.mems);

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
  if (w.failed) return;
  for (const auto& [path, original] : w.adopted) {
    if (pending.count(path) || checkpoint_->Get(path)) continue;
    CheckpointEntry e;
    e.path = path;
    e.knob = Basename(path);
    e.original = original;
    e.written = ValueOr(w.current, path);
    e.pod_uid = w.result.uid();
    pending[path] = std::move(e);
  }
  if (w.writes.empty()) return;
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
    e.pod_uid = w.result.uid();
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
    w.files_written = w.finals.size();
    w.result.set_reason(reason::kDryRun);
    w.result.set_message("would write " + std::to_string(w.finals.size()) + " file(s)");
  }
  if (dry_run_plan) return;  // every entry is dry-run: nothing to checkpoint or write
  // Checkpoint first, once for the whole batch (one temp file + two fsyncs however many pods):
  // originals of files never written before, and every value a file may hold if we die between
  // here and the last verified write.
  std::map<std::string, CheckpointEntry> pending;
  for (auto& w : work) {
    if (w.dry_run || w.failed || (w.writes.empty() && w.adopted.empty())) continue;
    // What the journal held before, so a pod that fails half-way can be rolled back exactly.
    for (const auto& [path, v] : w.adopted) w.prior[path] = checkpoint_->Get(path);
    for (const auto& [path, v] : w.finals) w.prior[path] = checkpoint_->Get(path);
    for (const auto& [path, v] : w.side_effects) w.prior[path] = checkpoint_->Get(path);
    CheckpointUpsertsLocked(w, pending);
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
  std::vector<cgroup::FileWrite> undo;         // each write's inverse, in write order
  std::map<std::string, std::string> holding;  // path → what our last write left in it
  for (const auto& fw : w.writes) {
    Status st = WriteVerifyLocked(fw.path, fw.value);
    if (!st.ok()) {
      w.Fail(ReasonFor(st, fw.path), st.ToString());
      RollbackPodLocked(w, undo, r);
      return;
    }
    auto h = holding.find(fw.path);
    undo.push_back({fw.path, h != holding.end() ? h->second : ValueOr(w.current, fw.path)});
    holding[fw.path] = fw.value;
    r.writes.push_back(fw);
    written.insert(fw.path);
  }
  w.files_written = written.size();
  r.files_written += written.size();
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
    w.result.set_reason(reason::kContested);
    w.result.set_message("another writer keeps rewriting some of this pod's files; left to it");
    return;
  }
  if (w.yielding) {
    w.result.set_reason(reason::kResizePending);
    return;
  }
  if (w.idle_request) s.requests[w.idle_request->first] = w.idle_request->second;
  w.result.set_enforced(true);
}

// A pod whose writes failed half-way is put back exactly as this Apply found it: each write
// undone in reverse (so v1's cpuset and quota rules hold at every step, as they did going
// forward), files the kernel changed as a side effect set back afterwards, and the journal
// entries returned to what they were. Every value passed through is already journaled as ours,
// so a crash in here is finished by the next Apply.
void Enforcer::RollbackPodLocked(PodWork& w, const std::vector<cgroup::FileWrite>& undo,
                                 ApplyReport& r) {
  size_t undone = 0;
  std::string trouble;
  for (auto it = undo.rbegin(); it != undo.rend(); ++it) {
    Status st = WriteVerifyLocked(it->path, it->value);
    if (st.ok()) {
      ++undone;
      r.writes.push_back(*it);
    } else if (trouble.empty()) {
      trouble = st.ToString();
    }
  }
  for (const auto& [path, candidates] : w.side_effects) {
    const std::string& before = ValueOr(w.current, path);
    auto now = cgroups_->ReadRaw(path);
    if (now.ok() && KnobValuesEquivalent(path, *now, before)) continue;
    Status st = WriteVerifyLocked(path, before);
    if (st.ok()) {
      ++undone;
      r.writes.push_back({path, before});
    } else if (trouble.empty()) {
      trouble = st.ToString();
    }
  }
  if (trouble.empty()) {
    std::vector<CheckpointEntry> upserts;
    std::vector<std::string> removals;
    for (const auto& [path, prior] : w.prior) {
      if (prior) {
        upserts.push_back(*prior);
      } else {
        removals.push_back(path);
      }
    }
    Status st = checkpoint_->Commit(upserts, removals);
    if (!st.ok() && r.checkpoint_status.ok()) r.checkpoint_status = st;
    // An interrupted earlier attempt (the agent killed mid-sequence) may have left files of this
    // pod holding our values that this Apply did not write — a container quota lifted before the
    // pod's refused write. Their entries are unsettled (values beside `written` still recorded);
    // a pod that ends unfenced gets them back too, as the uninterrupted sequence would have.
    std::vector<CheckpointEntry> leftovers;
    for (const auto& e : checkpoint_->Entries()) {
      if (e.pod_uid == w.result.uid() && !e.also_ours.empty() && !w.prior.count(e.path)) {
        leftovers.push_back(e);
      }
    }
    if (!leftovers.empty()) {
      ApplyReport lr;
      RevertLocked(leftovers, lr);
      undone += lr.files_reverted;
      r.writes.insert(r.writes.end(), lr.writes.begin(), lr.writes.end());
      if (!lr.checkpoint_status.ok() && r.checkpoint_status.ok()) {
        r.checkpoint_status = lr.checkpoint_status;
      }
    }
  }
  w.result.mutable_message()->append(
      trouble.empty() ? "; rolled back (" + std::to_string(undone) + " write(s) undone)"
                      : "; rollback incomplete, kept for the next apply: " + trouble);
  w.files_written = 0;
}

// The ownership rule: a file we fenced that another writer (kubelet, runc) has since rewritten
// takes that writer's value as its original — the value to restore when the fence goes.
void Enforcer::AdoptOriginalLocked(const CheckpointEntry& entry, const std::string& value,
                                   ApplyReport& r) {
  if (KnobValuesEquivalent(entry.path, entry.original, value)) return;
  CheckpointEntry e = entry;
  e.original = value;
  Status st = checkpoint_->Commit({e}, {});
  if (!st.ok() && r.checkpoint_status.ok()) r.checkpoint_status = st;
}

// A journal entry the revert writes back.
struct Enforcer::Restore {
  CheckpointEntry entry;
  std::string current;
  bool theirs = false;  // another writer's value, written back after cpu.idle resets it
};

std::vector<Enforcer::Restore> Enforcer::RestoresOfLocked(
    const std::vector<CheckpointEntry>& entries, ApplyReport& r,
    std::vector<std::string>& removals) {
  // Pass 1: which entries are ours to put back (rails, gone, already original, someone else's).
  struct Judged {
    const CheckpointEntry* entry;
    std::string current;
    std::string outcome;  // empty: to restore
    std::string message;
  };
  std::vector<Judged> judged;
  std::set<std::string> idle_dirs;  // dirs whose cpu.idle this revert writes
  for (const auto& e : entries) {
    Judged j{&e, "", "", ""};
    Status rail = CheckWritable(e.path, e.pod_uid);
    if (!rail.ok()) {
      j.outcome = reason::kRevertFailed;
      j.message = rail.message();
    } else if (auto cur = cgroups_->ReadRaw(e.path); !cur.ok()) {
      j.outcome =
          cur.status().code() == StatusCode::kNotFound ? reason::kGone : reason::kRevertFailed;
      if (j.outcome == reason::kRevertFailed) j.message = cur.status().ToString();
    } else {
      j.current = *cur;
      if (KnobValuesEquivalent(e.path, *cur, e.original)) {
        j.outcome = reason::kAlreadyOriginal;
      } else if (!IsOursLocked(e, *cur)) {
        j.outcome = reason::kOverwrittenByOther;
        j.message = "holds '" + std::string(Trim(*cur)) + "', we wrote '" +
                    std::string(Trim(e.written)) + "'; left as is";
      } else if (cgroup::IsIdleFile(e.path)) {
        idle_dirs.insert(Dirname(e.path));
      }
    }
    judged.push_back(std::move(j));
  }
  // Pass 2: leaving idle resets the weight beside it, so that weight file is written back after
  // the idle file even when it reads its original now (an original of 3 shares reads the same
  // as an idle group) or holds another writer's value (kept: theirs is the original now).
  std::vector<Restore> restores;
  for (auto& j : judged) {
    const CheckpointEntry& e = *j.entry;
    const bool beside_idle = cgroup::IsWeightFile(e.path) && idle_dirs.count(Dirname(e.path));
    if (beside_idle &&
        (j.outcome == reason::kAlreadyOriginal || j.outcome == reason::kOverwrittenByOther)) {
      CheckpointEntry kept = e;
      const bool theirs = j.outcome == reason::kOverwrittenByOther;
      if (theirs) kept.original = j.current;
      restores.push_back({std::move(kept), j.current, theirs});
      continue;
    }
    if (j.outcome.empty()) {
      restores.push_back({e, j.current});
      continue;
    }
    if (j.outcome == reason::kOverwrittenByOther) ++r.overwritten_by_other;
    if (j.outcome != reason::kRevertFailed) removals.push_back(e.path);
    r.reverts.push_back({e.path, e.pod_uid, e.knob, j.outcome, j.message});
  }
  return restores;
}

Status Enforcer::JournalRestoresLocked(
    const std::vector<Restore>& restores,
    const std::vector<std::pair<std::string, std::string>>& intermediates) {
  // Every value the sequence may leave in a file we own (intermediates, and what the kernel
  // resets as a side effect — also in files this revert does not restore, such as a weight that
  // the plan keeps) is recorded as ours before the first write, so a crash anywhere in the
  // sequence is finished by the next start instead of mistaken for another writer.
  std::map<std::string, CheckpointEntry> journal;
  for (const auto& x : restores) journal[x.entry.path] = x.entry;
  for (const auto& [path, value] : intermediates) {
    auto it = journal.find(path);
    if (it == journal.end()) {
      auto e = checkpoint_->Get(path);
      if (!e) continue;
      it = journal.emplace(path, std::move(*e)).first;
    }
    AddUnique(it->second.also_ours, value);
  }
  std::vector<CheckpointEntry> upserts;
  for (auto& [path, e] : journal) {
    auto stored = checkpoint_->Get(path);
    if (!stored || !(*stored == e)) upserts.push_back(e);
  }
  return upserts.empty() ? OkStatus() : checkpoint_->Commit(upserts, {});
}

void Enforcer::RevertLocked(const std::vector<CheckpointEntry>& entries, ApplyReport& r) {
  const cgroup::CgroupVersion version = cgroups_->layout().version;
  std::vector<std::string> removals;
  std::vector<Restore> restores = RestoresOfLocked(entries, r, removals);

  // The order and the intermediate values come from the cgroup layer.
  std::vector<cgroup::RestoreItem> items;
  for (const auto& x : restores) items.push_back({x.entry.path, x.entry.original, x.current});
  std::vector<cgroup::FileWrite> plan = cgroup::OrderRestores(version, items);

  // v2: an empty cpuset original the kernel refuses to restore on a populated cgroup gets the
  // set it inherited instead (same CPUs, not the same bytes; said in the report).
  const std::map<std::string, std::string> inherited = cgroup::InheritedCpusets(
      version, items, [this](const std::string& p) { return cgroups_->ReadRaw(p); });

  // Journal first.
  auto intermediates = cgroup::IntermediatesOf(version, items, plan);
  for (const auto& [path, value] : inherited) intermediates.emplace_back(path, value);
  if (Status st = JournalRestoresLocked(restores, intermediates); !st.ok()) {
    if (r.checkpoint_status.ok()) r.checkpoint_status = st;
    for (const auto& x : restores) {
      r.reverts.push_back(
          {x.entry.path, x.entry.pod_uid, x.entry.knob, reason::kRevertFailed, st.ToString()});
    }
    plan.clear();
    restores.clear();
  }
  std::map<std::string, Status> failures;
  std::map<std::string, std::string> substituted;  // path → the inherited set written instead
  // v2: the empty originals the kernel refused, by the dir their cgroup is a child of.
  std::map<std::string, std::vector<cgroup::FileWrite>> refused;
  std::map<std::string, std::string> no_reset;  // path → why the exact way was not taken
  for (const auto& fw : plan) {
    if (failures.count(fw.path)) continue;
    Status st = WriteVerifyLocked(fw.path, fw.value);
    if (st.code() == StatusCode::kFailedPrecondition && inherited.count(fw.path) &&
        Trim(fw.value).empty()) {
      refused[cgroup::CpusetResetDirOf(fw.path)].push_back(fw);
      continue;
    }
    if (!st.ok()) {
      failures[fw.path] = st;
      continue;
    }
    r.writes.push_back(fw);
  }
  // The exact bytes through the parent's subtree_control where that loses nothing; else the set
  // each file inherited (v2 cpusets have no order to keep among themselves).
  for (const auto& [dir, writes] : refused) {
    std::set<std::string> emptied;
    for (const auto& fw : writes) emptied.insert(fw.path);
    Status reset = ResetChildCpusetsLocked(dir, emptied);
    if (reset.ok()) {
      r.writes.insert(r.writes.end(), writes.begin(), writes.end());
      continue;
    }
    for (const auto& fw : writes) {
      no_reset[fw.path] = reset.message();
      const cgroup::FileWrite done{fw.path, inherited.at(fw.path)};
      Status st = WriteVerifyLocked(done.path, done.value);
      if (!st.ok()) {
        failures[fw.path] = st;
        continue;
      }
      substituted[fw.path] = done.value;
      r.writes.push_back(done);
    }
  }
  for (const auto& x : restores) {
    RevertResult rr{x.entry.path, x.entry.pod_uid, x.entry.knob, reason::kRestored, ""};
    if (auto it = substituted.find(x.entry.path); it != substituted.end()) {
      rr.message =
          "the original was empty (inherit the parent's set), which the kernel refuses "
          "on a cgroup with tasks; set to the inherited set " +
          it->second + " (no cpuset reset in the parent: " + no_reset[x.entry.path] + ")";
    }
    if (auto it = failures.find(x.entry.path); it != failures.end()) {
      rr.outcome = reason::kRevertFailed;
      rr.message = it->second.ToString();
    } else if (x.theirs) {
      rr.outcome = reason::kOverwrittenByOther;
      rr.message = "another writer's value; written back after cpu.idle reset it";
      ++r.overwritten_by_other;
      removals.push_back(x.entry.path);
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

Status Enforcer::ResetChildCpusetsLocked(const std::string& dir,
                                         const std::set<std::string>& emptied) {
  if (cgroups_->layout().version != cgroup::CgroupVersion::kV2) {
    return FailedPrecondition("cgroup v1 has no subtree_control");
  }
  const std::string control = JoinPath(dir, kf::v2::kSubtreeControl);
  FG_ASSIGN_OR_RETURN(std::string on, cgroups_->ReadRaw(control));
  if (!cgroup::ListsCpuset(on)) return FailedPrecondition("cpuset is not on in " + control);
  FG_ASSIGN_OR_RETURN(std::vector<std::string> children, cgroups_->ChildDirs(dir));
  for (const auto& name : children) {
    const std::string child = JoinPath(dir, name);
    // The kernel refuses the off write (EBUSY) while a child passes cpuset further down.
    if (auto sub = cgroups_->ReadRaw(JoinPath(child, kf::v2::kSubtreeControl));
        sub.ok() && cgroup::ListsCpuset(*sub)) {
      return FailedPrecondition(child + " has cpuset on for its own children");
    }
    const cgroup::CgroupPaths d{child, child, child};
    for (cgroup::Knob k : {cgroup::Knob::kCpusetCpus, cgroup::Knob::kCpusetMems}) {
      const std::string f = cgroups_->KnobFiles(d, k).front();
      if (emptied.count(f)) continue;
      auto cur = cgroups_->ReadRaw(f);
      if (cur.ok() && !Trim(*cur).empty()) {
        return FailedPrecondition(f + " holds '" + std::string(Trim(*cur)) +
                                  "', which the reset would empty");
      }
    }
  }
  FG_RETURN_IF_ERROR(checkpoint_->SetCpusetReset(dir, true));
  const std::vector<cgroup::FileWrite> toggle = cgroup::CpusetResetWrites(dir);
  if (Status st = WriteCountedLocked(toggle[0].path, toggle[0].value); !st.ok()) {
    checkpoint_->SetCpusetReset(dir, false).IgnoreError();  // nothing changed
    return st;
  }
  // If this fails the journal keeps the dir: every pass tries to turn cpuset on again.
  FG_RETURN_IF_ERROR(WriteCountedLocked(toggle[1].path, toggle[1].value));
  for (const auto& f : emptied) {
    auto cur = cgroups_->ReadRaw(f);
    if (!cur.ok()) return cur.status();
    if (!Trim(*cur).empty()) {
      return Aborted("after the reset " + f + " reads '" + std::string(Trim(*cur)) + "'");
    }
  }
  return checkpoint_->SetCpusetReset(dir, false);
}

void Enforcer::FinishCpusetResetsLocked() {
  for (const auto& dir : checkpoint_->cpuset_resets()) {
    const std::string control = JoinPath(dir, kf::v2::kSubtreeControl);
    auto on = cgroups_->ReadRaw(control);
    if (on.ok() && !cgroup::ListsCpuset(*on)) {
      const cgroup::FileWrite w = cgroup::CpusetResetWrites(dir).back();
      if (!WriteCountedLocked(w.path, w.value).ok()) continue;  // kept; the next pass retries
    } else if (!on.ok() && on.status().code() != StatusCode::kNotFound) {
      continue;  // unreadable now; the next pass tries again
    }
    checkpoint_->SetCpusetReset(dir, false).IgnoreError();  // the next pass retries
  }
}

std::vector<std::string> Enforcer::ChildWatchDirs() const { return ChildWatchDirs(OwnedFiles()); }

std::vector<std::string> Enforcer::ChildWatchDirs(const std::vector<std::string>& owned) const {
  if (cgroups_->layout().version != cgroup::CgroupVersion::kV2) return {};
  std::set<std::string> dirs;
  for (const auto& path : owned) {
    if (cgroup::IsCpusetFile(path)) dirs.insert(cgroup::CpusetResetDirOf(path));
  }
  return {dirs.begin(), dirs.end()};
}

VerifyReport Enforcer::ChildrenAppeared(const std::vector<std::string>& dirs) {
  std::lock_guard<std::mutex> l(mu_);
  VerifyReport vr;
  if (!last_plan_) return vr;
  const std::set<std::string> parents(dirs.begin(), dirs.end());
  std::set<std::string> pods;
  for (const auto& e : checkpoint_->Entries()) {
    if (cgroup::IsCpusetFile(e.path) && parents.count(cgroup::CpusetResetDirOf(e.path))) {
      pods.insert(e.pod_uid);
    }
  }
  ApplyReport r;
  Scratch s;
  s.report = &r;
  // The plan names the containers kubelet reported; a restarted one's new cgroup is found by the
  // cpuset tree walk, the old one's (gone) is left out rather than failing the pod.
  ReapplyLocked(std::move(pods), s, vr, /*skip_gone_containers=*/true);
  return vr;
}

// The journal entries a pass settles: files verified to hold our value need no other "ours"
// values any more, and Idle fences record the request they now hold with.
std::vector<CheckpointEntry> Enforcer::SettledLocked(const Scratch& s) const {
  std::map<std::string, CheckpointEntry> out;
  for (const auto& [path, value] : s.verified) {
    auto e = checkpoint_->Get(path);
    if (!e || (e->also_ours.empty() && e->written == value)) continue;
    e->written = value;
    e->also_ours.clear();
    out[path] = std::move(*e);
  }
  for (const auto& [path, req] : s.requests) {
    auto it = out.find(path);
    if (it == out.end()) {
      auto e = checkpoint_->Get(path);
      if (!e || e->request_milli == req) continue;
      it = out.emplace(path, std::move(*e)).first;
    }
    it->second.request_milli = req;
  }
  std::vector<CheckpointEntry> v;
  for (auto& [path, e] : out) v.push_back(std::move(e));
  return v;
}

namespace {
// One Apply made of two passes (the second after a kernel fact was learnt): the pods' outcomes
// are the second pass's; the writes, reverts and counts are both passes'.
ApplyReport MergeReports(ApplyReport first, ApplyReport second) {
  std::vector<cgroup::FileWrite> writes = std::move(first.writes);
  writes.insert(writes.end(), second.writes.begin(), second.writes.end());
  second.writes = std::move(writes);
  std::vector<RevertResult> reverts = std::move(first.reverts);
  reverts.insert(reverts.end(), second.reverts.begin(), second.reverts.end());
  second.reverts = std::move(reverts);
  if (first.pod_files_written.size() == second.pod_files_written.size()) {
    for (size_t i = 0; i < second.pod_files_written.size(); ++i)
      second.pod_files_written[i] += first.pod_files_written[i];
  }
  second.files_written += first.files_written;
  second.files_reverted += first.files_reverted;
  second.overwritten_by_other += first.overwritten_by_other;
  if (!first.checkpoint_status.ok() && second.checkpoint_status.ok())
    second.checkpoint_status = first.checkpoint_status;
  return second;
}
}  // namespace

ApplyReport Enforcer::Apply(const Plan& plan) {
  std::lock_guard<std::mutex> l(mu_);
  ApplyReport r = ApplyLocked(plan);
  // cgroup v2: on this kernel an idle group's cpu.weight may read 0, which kubelet ≥ 1.36 reads
  // back (InPlacePodLevelResourcesVerticalScaling) into pod.status.resources as ~1.8e15 CPUs —
  // the scheduler and kubelet's admission then see the node full (kernel_facts.h). Looked at
  // once, on the first Idle fence this Enforcer holds; then every Idle fence is held as the
  // lowest weight instead (unless the operator says kubelet does not read it back).
  if (cgroups_->layout().version == cgroup::CgroupVersion::kV2 && !idle_weight_checked_ &&
      !plan.dry_run) {
    for (const auto& [path, req] : idle_weights_last_) {
      auto w = cgroups_->ReadRaw(path);
      if (!w.ok()) continue;
      idle_weight_checked_ = true;
      if (Trim(*w) == kf::kIdleWeightReadsZero) {
        idle_reads_zero_ = true;
        if (!options_.idle_when_weight_reads_zero)
          r = MergeReports(std::move(r), ApplyLocked(plan));
      }
      break;
    }
  }
  return r;
}

ApplyReport Enforcer::ApplyLocked(const Plan& plan) {
  FinishCpusetResetsLocked();
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
  auto prepare_all = [&]() {
    std::vector<PodWork> work;
    std::set<std::string> seen;
    for (const Target& t : targets) {
      if (!seen.insert(t.pod.uid).second) {
        PodWork w;
        w.Identify(t);
        w.Fail(reason::kDuplicatePod, "pod appears more than once in the plan; first entry wins");
        work.push_back(std::move(w));
        continue;
      }
      work.push_back(PreparePodLocked(t, s));
    }
    return work;
  };
  std::vector<PodWork> work = prepare_all();
  // 2. Revert what the plan no longer wants first (e.g. cpu.idle before cpu.shares on v1).
  std::vector<CheckpointEntry> stale;
  for (const auto& e : checkpoint_->Entries()) {
    if (withdrawn_paths.count(e.path)) continue;  // step 0 already tried it
    if (!s.keep.count(e.path) && !s.keep_pods.count(e.pod_uid)) stale.push_back(e);
  }
  const uint64_t writes_before_stale = writes_made_;
  RevertLocked(stale, r);
  if (writes_made_ != writes_before_stale) {
    // The restores may have changed files the plan keeps (leaving idle resets the weight):
    // judge every pod again against what the files hold now.
    std::set<std::string> counted = std::move(s.counted);
    s = Scratch{};
    s.report = &r;
    s.counted = std::move(counted);
    work = prepare_all();
  }
  // 3. Checkpoint (one commit), then write.
  ExecuteLocked(work, plan.dry_run, s);
  for (auto& w : work) {
    w.result.set_overwrites(pod_overwrites_[w.result.uid()]);
    w.result.set_planned(w.result.reason() == reason::kDryRun);
    if (w.result.enforced()) {
      ++r.enforced;
    } else if (w.result.reason() != reason::kDryRun && w.result.reason() != reason::kProtectedPod &&
               w.result.reason() != reason::kResizePending) {
      ++r.failed;  // a protected pod is the rail at work, not a failure
    }
    r.pod_files_written.push_back(w.files_written);
    r.pods.push_back(std::move(w.result));
  }
  if (plan.dry_run) {
    last_plan_.reset();  // nothing is enforced: Verify has nothing to re-apply
    ready_ = true;
    return r;
  }
  // Resize bookkeeping only for pods still in the plan.
  {
    std::set<std::string> uids;
    for (const Target& t : targets) uids.insert(t.pod.uid);
    std::erase_if(yielding_, [&](const auto& kv) { return !uids.count(kv.first); });
    std::erase_if(quota_settling_, [&](const auto& kv) { return !uids.count(kv.first); });
  }
  idle_weights_last_ = s.requests;
  // 4. Settle: files verified to hold our value need no other "ours" values any more.
  Status st = checkpoint_->Commit(SettledLocked(s), {});
  if (st.ok()) st = checkpoint_->SetAppliedVersion(plan.fence_version);
  if (!st.ok() && r.checkpoint_status.ok()) r.checkpoint_status = st;
  last_plan_ = plan;
  ready_ = r.checkpoint_status.ok();
  return r;
}

ApplyReport Enforcer::RevertAll() {
  std::lock_guard<std::mutex> l(mu_);
  FinishCpusetResetsLocked();
  ApplyReport r;
  RevertLocked(checkpoint_->Entries(), r);
  last_plan_.reset();
  yielding_.clear();
  quota_settling_.clear();
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
  // Idle fences stepped aside for kubelet's resize: a write to the pod's weight file is kubelet's
  // retry (any value); a sweep puts back those whose wait timed out. Either way: fence again.
  const std::set<std::string> written(paths.begin(), paths.end());
  const auto now = clock_->MonotonicNow();
  for (auto& [uid, y] : yielding_) {
    if (written.count(y.weight_file)) y.written = true;
    if (y.written || (paths.empty() && now - y.since > options_.resize_yield_timeout)) {
      pods.insert(uid);
    }
  }
  for (const auto& e : entries) {
    auto cur = cgroups_->ReadRaw(e.path);
    if (!cur.ok()) continue;  // gone: the next Apply settles it
    ++vr.checked;
    if (KnobValuesEquivalent(e.path, *cur, e.written)) continue;
    if (auto it = file_state_.find(e.path); it != file_state_.end() && it->second.contested) {
      ++vr.contested;  // already left to the other writer; not a new overwrite
      continue;
    }
    if (SeenBeforeLocked(e.path, *cur, e)) {
      pods.insert(e.pod_uid);  // counted already; the fence goes back when it may
      continue;
    }
    if (IsIdleResetLocked(e, *cur)) {
      // The kernel's reset as another writer cleared cpu.idle (whose own event re-fences).
      if (auto idle = checkpoint_->Get(JoinPath(Dirname(e.path), std::string(kf::v2::kIdle)))) {
        pods.insert(idle->pod_uid);
      }
      continue;
    }
    // Not ours: the other writer's value is the original from now on (see Adopt...). The
    // original itself written back is a restatement (systemd's reload), never a contest.
    const bool ours = IsOursLocked(e, *cur);
    const bool restated = !ours && IsRestatementLocked(e, *cur);
    if (!ours && !KnobValuesEquivalent(e.path, *cur, e.original)) NoteQuotaResizeLocked(e);
    if (!ours) AdoptOriginalLocked(e, *cur, r);
    ++vr.overwrites;
    if (restated) ++vr.restatements;
    vr.overwritten.push_back({e.path, std::string(Trim(*cur)), e.written, restated});
    s.counted.insert(e.path);
    if (RecordOverwriteLocked(e.path, e.pod_uid, restated)) {
      ++vr.contested;
    } else {
      pods.insert(e.pod_uid);
    }
  }
  ReapplyLocked(std::move(pods), s, vr);
  return vr;
}

void Enforcer::ReapplyLocked(std::set<std::string> uids, Scratch& s, VerifyReport& vr,
                             bool skip_gone_containers) {
  if (uids.empty() || !last_plan_) return;
  std::vector<Target> targets;
  for (const Target& t : TargetsOf(*last_plan_)) {
    if (!uids.count(t.pod.uid)) continue;
    uids.erase(t.pod.uid);  // first entry wins, as in Apply
    targets.push_back(t);
    if (!skip_gone_containers) continue;
    // A container restarted: the plan still names the old one, whose cgroup is gone.
    std::vector<std::string> ids;
    for (const auto& cid : t.pod.container_ids) {
      PodIdentity one = t.pod;
      one.container_ids = {cid};
      if (cgroups_->ResolvePod(one).ok()) ids.push_back(cid);
    }
    targets.back().pod.container_ids = std::move(ids);
  }
  std::vector<PodWork> work;
  for (const Target& t : targets) work.push_back(PreparePodLocked(t, s));
  ExecuteLocked(work, /*dry_run=*/false, s);
  for (const auto& w : work) vr.reapplied += w.files_written;
  checkpoint_->Commit(SettledLocked(s), {}).IgnoreError();  // next Apply retries
}

void Enforcer::NoteQuotaResizeLocked(const CheckpointEntry& e) {
  const auto& layout = cgroups_->layout();
  // kubelet writes the quota and its period on a resize, never the burst.
  if (layout.version != cgroup::CgroupVersion::kV1 || !cgroup::IsBandwidthFile(e.path) ||
      cgroup::IsBurstFile(e.path)) {
    return;
  }
  const std::string dir = Dirname(e.path);
  for (QosClass q : {QosClass::kGuaranteed, QosClass::kBurstable, QosClass::kBestEffort}) {
    if (dir == JoinPath(layout.cpu_mount,
                        cgroup::PodRelPath(layout.driver, layout.cgroup_root, q, e.pod_uid))) {
      quota_settling_[e.pod_uid] = clock_->MonotonicNow();
      return;
    }
  }
}

VerifyReport Enforcer::Tick() {
  std::lock_guard<std::mutex> l(mu_);
  VerifyReport vr;
  if (!last_plan_ || (quota_settling_.empty() && yielding_.empty())) return vr;
  const auto now = clock_->MonotonicNow();
  std::set<std::string> due;
  for (const auto& [uid, since] : quota_settling_) {
    if (now - since >= options_.resize_settle) due.insert(uid);
  }
  for (const auto& [uid, y] : yielding_) {
    if (y.written || now - y.since > options_.resize_yield_timeout) {
      due.insert(uid);
    } else if (now - y.since >= options_.resize_settle) {
      // kubelet's value already in place (nothing will be written): PreparePodLocked lands it.
      auto cur = cgroups_->ReadRaw(y.weight_file);
      const auto v = cgroups_->layout().version;
      if (cur.ok() &&
          KnobValuesEquivalent(y.weight_file, *cur, KubeletsWeightValue(v, y.request_milli))) {
        due.insert(uid);
      }
    }
  }
  if (due.empty()) return vr;
  ApplyReport r;
  Scratch s;
  s.report = &r;
  ReapplyLocked(std::move(due), s, vr);
  return vr;
}

}  // namespace feedguard::agent
