// enforcer.h — applies an agent::Plan to pod cgroups, crash-safely, and takes it back.
//
// Apply(plan) resolves every pod of the plan to its cgroup dirs (cgroup::Cgroups), computes the
// exact bytes each knob file must hold, and for every file that differs: records the file's
// original bytes in the CheckpointStore (persisted before the first write), writes, reads back
// and verifies. Trainers get cpuset.cpus/.mems on every container dir, and on v1 the pod dir
// too (v1 ordering: grow parents first, shrink children first; v2 writes no pod dir's set, so
// that a revert can give the children their empty sets back through the pod dir's
// cgroup.subtree_control, and a container made later is pinned on its IN_CREATE; v2 clips a set
// to the parent's effective cpus instead of rejecting it, so cpuset.cpus.effective is checked and
// a clipped set is reported as CpusetNotSubset like v1's EACCES); neighbours get idle / weight /
// quota at the pod level and cpuset like trainers. Files of pods that left the plan,
// and knobs a pod no longer needs, are reverted: the checkpointed original is restored only if
// the file still holds a value we wrote; otherwise someone else owns it now ("OverwrittenBy
// Other") and it is left alone.
//
// Rails no plan can override: only files inside the dir of the pod they are for are written,
// never kubelet's kubepods / QoS-tier dirs; protected pods (the agent's own pod, pods of a
// system-*-critical priority class, and by default every kube-system pod) are never written.
//
// Idempotent: a second Apply of the same plan writes nothing. DryRun entries (one DryRun
// policy's pods, or every pod of a plan whose policies are all DryRun) hold no fence: what an
// earlier Enforce wrote for them is restored, then the fence writes they would need are
// reported and nothing of theirs is written or checkpointed.
// A new Enforcer over an existing checkpoint is not ready() until its first Apply (the
// reconcile against the current plan) has completed.
//
// Overwrites and ownership: a file we own that no longer holds a value of ours was rewritten by
// someone else (runc on UpdateContainerResources, kubelet on an in-place resize). The rule:
// **the other writer's latest value becomes the file's original** — kubelet owns the pod's
// resources, so what it wrote last is what the pod holds once the fence goes; the fence is
// then re-applied on top. Verify() (called by the Watcher, and implicitly by Apply) counts the
// overwrite per pod, adopts the new original, re-applies, and after `contest_threshold`
// overwrites of one file within `contest_window` stops re-applying that file and reports the
// pod "Contested" instead of flip-flopping with the other writer.
// Where systemd owns the pod slices (the systemd cgroup driver), a write that puts back exactly
// the value recorded as the file's original is a *restatement*, not a contest: systemd re-applies
// every unit's cgroup attributes on `daemon-reload`, on `daemon-reexec` and on any property change
// of the unit (with systemd ≥ 252 that includes `cpu.idle=0` beside kubelet's `cpu.weight`),
// re-stating kubelet's values over the fence. The fence is re-applied at once and the restatement
// is counted apart (RestatementCounts); only beyond `restate_limit` restatements of one file within
// `contest_window` (a writer looping, not systemd reloading) is the file left as contested.
//
// Crash-exactness: the checkpoint is a journal. Before any write, every value a file may be
// left holding by the sequence — intermediates (v1 cpuset unions, an unlimited quota) and what
// the kernel changes as a side effect (cpu.idle resets the weight) — is recorded as ours, so a
// restarted agent can tell an interrupted sequence of its own from another writer and finish
// it. A pod whose writes fail half-way (e.g. v1 refusing a quota) is rolled back to exactly
// what this Apply found. How each knob is written, ordered and restored is the cgroup layer's
// (cgroup/knobs.h); the enforcer decides what and keeps the journal.
//
// Thread-safe: every public method takes the enforcer's lock.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "agent/cgroup/cgroups.h"
#include "agent/cgroup/knobs.h"
#include "agent/enforcer/checkpoint.h"
#include "agent/planner/plan.h"
#include "feedguard/common/reasons.h"
#include "feedguard/common/status.h"
#include "feedguard/common/time_source.h"
#include "feedguard/v1/nodefence.pb.h"

namespace feedguard::agent {

// Reason codes: feedguard/common/reasons.h (feedguard::reason).

struct EnforcerOptions {
  // The agent's own pod (downward API); never written.
  std::string self_pod_uid;
  // Pods with these priority classes, and pods in these namespaces, are never written, whatever
  // a fence says: the rail of docs/DESIGN.md §3, whose defaults and meaning are PodRails'
  // (agent/pod/pod.h; the planner reserves no core for such a pod either).
  std::vector<std::string> protected_priority_classes = PodRails{}.priority_classes;
  std::vector<std::string> protected_namespaces = PodRails{}.namespaces;
  TimeSourcePtr time_source;  // null: the real clock
  // Overwrite rate limit per file.
  int contest_threshold = 3;
  std::chrono::seconds contest_window{600};
  // Restatements (another writer putting back the recorded original: systemd's reloads) per
  // file within contest_window before the file is left as contested.
  int restate_limit = 120;
  // How long an Idle fence steps aside for kubelet's in-place resize of the pod (the kernel
  // refuses weight writes to an idle group, so kubelet's own write would fail until then).
  std::chrono::seconds resize_yield_timeout{60};
  // cgroup v1, Quota fences and kubelet's in-place resize: kubelet writes the pod's quota, then
  // runc each container's (an increase; a decrease the other way round). A container limit above
  // a re-fenced pod's quota is refused (EINVAL) and kubelet retries until the file is contested.
  // So after another writer's new value lands in a v1 pod's bandwidth files the fence waits this
  // long for kubelet and runc to finish (ResizePending), then goes back on with their values as
  // the originals. The same wait ends an Idle step-aside whose weight file already holds what
  // kubelet wants for the new request (v1: 1000m is 1024 shares, what leaving idle leaves —
  // kubelet then sees its value in place and writes nothing).
  std::chrono::milliseconds resize_settle{3000};
  // cgroup v2 kernels where an idle group's cpu.weight reads 0 (6.1 measured; kernel_facts.h):
  // false (default) holds Idle fences as the lowest weight instead, because kubelet >= 1.36
  // reads that 0 back as ~1.8e15 CPUs requested; true keeps cpu.idle (kubelet <= 1.35, or
  // InPlacePodLevelResourcesVerticalScaling off).
  bool idle_when_weight_reads_zero = false;
  // Test hook, called after each cgroup write(2) with the running count of writes made by this
  // Enforcer and the file's path (crash tests SIGKILL themselves from here).
  std::function<void(uint64_t, const std::string&)> after_write;
};

struct RevertResult {
  std::string path;
  std::string pod_uid;
  std::string knob;
  std::string outcome;  // reason::kRestored, kAlreadyOriginal, kOverwrittenByOther, kGone, ...
  std::string message;
};

struct ApplyReport {
  uint64_t fence_version = 0;
  bool dry_run = false;
  // Each pod's outcome, as the node reports it (feedguard::v1::PodReport, the one per-pod snapshot:
  // the enforcer fills identity, role, enforced/reason/message, cpus, overwrites and planned; the
  // engine adds its observations and sends it; the CLI prints it). In plan order.
  std::vector<feedguard::v1::PodReport> pods;
  // pod_files_written[i]: files written for pods[i] by this Apply (dry run: would be written).
  std::vector<uint64_t> pod_files_written;
  std::vector<RevertResult> reverts;
  // Every write performed, in order. Dry-run: the fence writes that would be performed (the
  // restores a dry run does make — it withdraws earlier fences — are listed in `reverts`).
  std::vector<cgroup::FileWrite> writes;
  size_t enforced = 0;
  size_t failed = 0;
  size_t files_written = 0;
  size_t files_reverted = 0;
  size_t overwritten_by_other = 0;
  Status checkpoint_status;  // the first checkpoint error, if any
};

struct VerifyReport {
  size_t checked = 0;
  size_t overwrites = 0;    // files found holding someone else's value
  size_t restatements = 0;  // of which: the recorded original written back (not a contest)
  size_t reapplied = 0;     // files written back
  size_t contested = 0;     // files left alone because they are contested
  struct Overwrite {
    std::string path;
    std::string found;  // what the other writer left
    std::string ours;   // what the fence had written
    bool restated = false;
  };
  std::vector<Overwrite> overwritten;
};

class Enforcer {
 public:
  Enforcer(cgroup::CgroupsPtr cgroups, CheckpointStorePtr checkpoint, EnforcerOptions options);

  // Makes the node hold `plan`: restores what the plan no longer wants (pods gone, knobs
  // dropped, and every pod whose policy is DryRun — a dry run withdraws earlier fences), then
  // checkpoints and writes the rest. DryRun pods are reported with what they would write.
  ApplyReport Apply(const Plan& plan);
  // True once this Enforcer saw an idle group's cpu.weight read 0 (cgroup v2): Idle fences are
  // then held as the lowest weight unless idle_when_weight_reads_zero.
  bool idle_reads_zero() const;
  // Reverts every file in the checkpoint and forgets the plan (unfence the whole node).
  ApplyReport RevertAll();
  // Re-reads the given files we own (all owned files if `paths` is empty); any that no longer
  // hold our value are counted as overwrites and re-applied unless contested. `paths` are files
  // something wrote (the Watcher's inotify events): a write to the weight file of a pod whose
  // Idle fence stepped aside for kubelet's resize is kubelet's retry landing, even when the value
  // did not change; the pod is fenced again. A sweep (empty `paths`) also puts back fences whose
  // step-aside outlived `resize_yield_timeout`.
  VerifyReport Verify(const std::vector<std::string>& paths = {});

  // Puts fences back whose wait for kubelet is over: Idle fences stepped aside past
  // resize_yield_timeout (or whose weight file kubelet has written) and v1 Quota fences past
  // resize_settle. Cheap when nothing waits; the Watcher calls it every round.
  VerifyReport Tick();

  // True once an Apply has reconciled the checkpoint with a plan.
  bool ready() const;
  // Absolute paths of every file we currently own (the checkpoint's keys).
  std::vector<std::string> OwnedFiles() const;
  // Overwrites seen per pod uid since this Enforcer started (restatements not included).
  std::map<std::string, uint64_t> OverwriteCounts() const;
  // Restatements seen per pod uid since this Enforcer started: another writer put back the
  // value recorded as a file's original (systemd re-applying a unit's attributes).
  std::map<std::string, uint64_t> RestatementCounts() const;
  uint64_t writes_made() const;
  // Pods (uids) with a file left to another writer since this Enforcer started.
  std::set<std::string> ContestedPods() const;
  // cgroup v2: the dirs whose new children must be fenced as soon as they appear — the pod dir
  // above every cpuset file we own. A v2 Cpuset fence or trainer pinning lives in the pod's
  // child dirs only (cgroups.h ChildDirs says why), so a container created under a fenced pod
  // (a restart, an ephemeral container) starts with the pod's full set until it is pinned.
  std::vector<std::string> ChildWatchDirs() const;
  // The same, from the owned files a caller already holds (OwnedFiles()): no lock, no checkpoint
  // read (the Watcher asks every round).
  std::vector<std::string> ChildWatchDirs(const std::vector<std::string>& owned) const;
  // Something made a dir under `dirs` (the Watcher's IN_CREATE): the pods whose cpusets live
  // there are prepared and written again, the new child included.
  VerifyReport ChildrenAppeared(const std::vector<std::string>& dirs);

 private:
  struct Target {
    PodIdentity pod;
    std::string policy;
    feedguard::v1::PodReport::Role role = feedguard::v1::PodReport::NEIGHBOUR;
    std::optional<bool> idle;
    std::optional<uint64_t> weight;
    std::optional<CpuQuota> quota;
    std::optional<CpuSet> cpus;
    std::optional<CpuSet> mems;
    // The entry's policy is DryRun, or the whole plan is: reported as "would write", never
    // written (even when the rest of the plan is enforced).
    bool dry_run = false;
  };
  struct FileState {
    std::deque<std::chrono::steady_clock::time_point> overwrites;
    std::deque<std::chrono::steady_clock::time_point> restatements;
    bool contested = false;
    // Another writer's value was counted and adopted as the original and the fence has not
    // written the file since: judgements that find that value again (a sweep, the next Apply,
    // a fence waiting out kubelet's resize) see the same overwrite, not a new one.
    bool theirs_standing = false;
  };
  // Whether `current` in `path` is the overwrite already counted (FileState::theirs_standing).
  bool SeenBeforeLocked(const std::string& path, const std::string& current,
                        const CheckpointEntry& e) const;
  struct Scratch;  // per-Apply bookkeeping, defined in the .cc
  struct PodWork;  // one pod's computed writes, defined in the .cc

  static std::vector<Target> TargetsOf(const Plan& plan);
  static std::string KubeletsWeightValue(cgroup::CgroupVersion v, int64_t request_milli);
  ApplyReport ApplyLocked(const Plan& plan);
  bool IsProtected(const PodIdentity& pod) const;
  Status CheckWritable(const std::string& file, const std::string& pod_uid) const;
  bool IsOursLocked(const CheckpointEntry& e, const std::string& current) const;
  // True if `current` (not ours) is the recorded original written back by systemd re-applying
  // the unit (systemd driver only).
  bool IsRestatementLocked(const CheckpointEntry& e, const std::string& current) const;
  // True if `current` in a weight file is the kernel's reset beside an idle file we own.
  bool IsIdleResetLocked(const CheckpointEntry& e, const std::string& current) const;
  // Records an overwrite of `path` (pod `uid`), or a restatement of its original; returns true
  // if the file is now contested.
  bool RecordOverwriteLocked(const std::string& path, const std::string& uid, bool restatement);
  // Resolves the pod and computes its writes; writes nothing. Sequences the steps below, which
  // share one pod's judgement in progress (PodJudge, defined in the .cc).
  PodWork PreparePodLocked(const Target& t, Scratch& s);
  struct PodJudge;
  // Reads a file about to be judged; records its pre-write bytes.
  Result<std::string> JudgeReadLocked(PodJudge& j, const std::string& path);
  // The ownership rule. True if `path` is one we own that someone else has rewritten: counts it
  // once per pass and makes the other writer's value the file's original (kubelet or runc
  // writing after us — an in-place resize — states what the pod should hold without us). A
  // value we journaled ourselves (an interrupted sequence), the kernel's idle reset and
  // systemd restating the original are no overwrite. Sets *contested when the file is now
  // contested (it is then left alone).
  bool OverwrittenLocked(PodJudge& j, const std::string& path, const std::string& current,
                         bool* contested);
  // A file the plan still wants that we own: judged as ours (and settled) if it holds our value.
  void KeepOursLocked(PodJudge& j, const std::string& path);
  // kubelet's in-place resize of an Idle-fenced pod (see the .cc): true while the fence steps
  // aside for kubelet's weight write to land.
  bool ResizeStepAsideLocked(PodJudge& j);
  // The quota the fence wants now: none while kubelet and runc resize the pod (v1).
  std::optional<CpuQuota> QuotaWantedLocked(PodJudge& j);
  // The cpu knobs' writes (and the kernel's side effects); false when the pod failed.
  bool PlanCpuKnobsLocked(PodJudge& j, const cgroup::CpuKnobs& want);
  // A cpuset knob over the pod's tree.
  void PlanCpusetLocked(PodJudge& j, cgroup::Knob knob, const CpuSet& target);
  // Checkpoints every enforced pod's files in one commit, then writes and verifies pod by pod;
  // dry-run pods are only reported. `dry_run_plan`: their would-be writes go to the report's
  // `writes` (an enforced plan lists there only the writes performed).
  void ExecuteLocked(std::vector<PodWork>& work, bool dry_run_plan, Scratch& s);
  // Adds the checkpoint entries `w` needs before its writes to `pending` (path → entry).
  void CheckpointUpsertsLocked(const PodWork& w,
                               std::map<std::string, CheckpointEntry>& pending) const;
  // Writes and verifies one pod's files (already checkpointed).
  void WritePodLocked(PodWork& w, Scratch& s);
  // Restores the originals of `entries` (those still holding our values) and drops them from
  // the checkpoint; files someone else rewrote are left alone and dropped too.
  void RevertLocked(const std::vector<CheckpointEntry>& entries, ApplyReport& r);
  struct Restore;
  // RevertLocked's judgement: the entries to write back; the others reported (and those not
  // failed added to `removals`).
  std::vector<Restore> RestoresOfLocked(const std::vector<CheckpointEntry>& entries, ApplyReport& r,
                                        std::vector<std::string>& removals);
  // Journals every value a restore sequence may leave in our files before its first write.
  Status JournalRestoresLocked(
      const std::vector<Restore>& restores,
      const std::vector<std::pair<std::string, std::string>>& intermediates);
  // Undoes a failed pod's writes of this Apply (`undo`: each write's inverse, in write order)
  // and returns its journal entries to what they were.
  void RollbackPodLocked(PodWork& w, const std::vector<cgroup::FileWrite>& undo, ApplyReport& r);
  // Makes `value` (another writer's) the original of `entry`'s file and persists it.
  void AdoptOriginalLocked(const CheckpointEntry& entry, const std::string& value, ApplyReport& r);
  Status WriteVerifyLocked(const std::string& path, const std::string& value);
  // One cgroup write, counted (writes_made, after_write) like every other, not read back.
  Status WriteCountedLocked(const std::string& path, const std::string& value);
  // cgroup v2: gives the emptied cpuset files `emptied` (children of `dir`, each refused the
  // empty write) their empty original back by turning cpuset off and on in `dir`'s
  // cgroup.subtree_control, journaled first (CheckpointStore::cpuset_resets). Refused
  // (FailedPrecondition, nothing written) unless cpuset is on in `dir` and off in every child's
  // subtree_control, and every other cpuset file of `dir`'s children is empty already: the reset
  // empties them all.
  Status ResetChildCpusetsLocked(const std::string& dir, const std::set<std::string>& emptied);
  // Turns cpuset on again in every dir whose reset a crash interrupted (start of each pass).
  void FinishCpusetResetsLocked();
  std::vector<CheckpointEntry> SettledLocked(const Scratch& s) const;
  // Prepares and writes the pods `uids` of the last plan again (Verify, Tick, ChildrenAppeared);
  // with `skip_gone_containers`, a container of the plan whose cgroup is gone is left out.
  void ReapplyLocked(std::set<std::string> uids, Scratch& s, VerifyReport& vr,
                     bool skip_gone_containers = false);
  // v1: another writer's new value in a pod dir's (not a container's) bandwidth file — kubelet
  // resizing the pod; the Quota fence then waits resize_settle.
  void NoteQuotaResizeLocked(const CheckpointEntry& e);

  const cgroup::CgroupsPtr cgroups_;
  const CheckpointStorePtr checkpoint_;
  const EnforcerOptions options_;
  const TimeSourcePtr clock_;

  mutable std::mutex mu_;
  bool ready_ = false;                                // guarded by mu_
  std::optional<Plan> last_plan_;                     // guarded by mu_
  std::map<std::string, FileState> file_state_;       // guarded by mu_
  std::map<std::string, uint64_t> pod_overwrites_;    // guarded by mu_
  std::map<std::string, uint64_t> pod_restatements_;  // guarded by mu_
  // Idle fences and kubelet's in-place resize: the pods whose fence is lifted while kubelet's
  // resize lands (the request each fence was put in place with is in the checkpoint).
  struct Yield {
    int64_t request_milli = 0;
    std::chrono::steady_clock::time_point since;
    std::string weight_file;  // the pod's weight file kubelet's retry writes
    // A write reached the weight file since the fence stepped aside (Verify was told of it):
    // kubelet's retry, whatever the value — 1000m is 1024 shares, what leaving idle leaves too.
    bool written = false;
  };
  std::map<std::string, Yield> yielding_;  // guarded by mu_
  // v1 Quota fences waiting for kubelet's resize to finish: pod uid → when its new value landed.
  std::map<std::string, std::chrono::steady_clock::time_point> quota_settling_;  // guarded by mu_
  uint64_t writes_made_ = 0;                                                     // guarded by mu_
  // The weight files of the pods the last Apply left Idle-fenced (→ request), and what their
  // read-back says about this kernel (see Apply).
  std::map<std::string, int64_t> idle_weights_last_;  // guarded by mu_
  bool idle_weight_checked_ = false;                  // guarded by mu_
  bool idle_reads_zero_ = false;                      // guarded by mu_
};

using EnforcerPtr = std::shared_ptr<Enforcer>;

// Knob values are compared by the cgroup layer's rule (cgroup/knobs.h).
using cgroup::KnobValuesEquivalent;

}  // namespace feedguard::agent
