// checkpoint.h — the enforcer's crash-safe record of every cgroup file it has written.
//
// Before the enforcer first writes a cgroup file it records here the file's exact original
// bytes, the value it is about to write, the pod and the knob (docs/DESIGN.md §4 "Crash safety").
// Every change is persisted atomically before the call returns: the whole record is written to a
// temporary file, fsync'ed, renamed over `checkpoint.json` and the directory is fsync'ed. A
// restarted agent opens the store, gets back exactly what it had written and reconciles.
//
// A leftover temporary file (a crash during a save) is ignored and removed on Open; the
// committed file is never partially written. A committed file that does not parse is an error,
// never silently dropped: it holds the only copy of the originals.
//
// One store per state dir: Open takes an exclusive flock on `<state_dir>/checkpoint.lock`, held
// for the store's lifetime (the kernel drops it when the process dies, so kill -9 is fine).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "feedguard/common/status.h"

namespace feedguard::agent {

struct CheckpointEntry {
  std::string path;      // absolute path of the cgroup file (the key)
  std::string knob;      // file name as the kernel spells it, e.g. "cpu.shares", "cpuset.cpus"
  std::string pod_uid;   // the pod the write was for
  std::string original;  // exact bytes the file held before our first write
  std::string written;   // the bytes we wrote (or are about to write) last
  // Other values the file may hold because of us if we die mid-sequence: the value it held
  // before a write we are about to make (the original, or what we wrote earlier) and the
  // intermediate unions of a v1 cpuset reordering. Cleared once the writes are verified.
  std::vector<std::string> also_ours;
  // The weight file of an Idle-fenced pod: the pod's CPU request (milli) when the fence was put
  // in place; a different request later means kubelet is resizing the pod. -1: not recorded.
  int64_t request_milli = -1;

  friend bool operator==(const CheckpointEntry&, const CheckpointEntry&) = default;
};

class CheckpointStore {
 public:
  // Creates `state_dir` if needed (one level), locks it, removes a stale temp file and loads
  // `checkpoint.json` if present. kAborted when another live store holds the lock.
  static Result<std::unique_ptr<CheckpointStore>> Open(const std::string& state_dir);
  ~CheckpointStore();
  CheckpointStore(const CheckpointStore&) = delete;
  CheckpointStore& operator=(const CheckpointStore&) = delete;

  std::optional<CheckpointEntry> Get(const std::string& path) const;
  // Every entry, ordered by path.
  std::vector<CheckpointEntry> Entries() const;
  std::vector<CheckpointEntry> EntriesForPod(const std::string& pod_uid) const;
  size_t size() const;
  // The NodeFence version last applied in full (0 if none); persisted with the entries.
  uint64_t applied_version() const;

  // Upserts `upserts` (keyed by path) and removes `removals`, then persists, all or nothing:
  // on error the in-memory view is left as it was before the call.
  Status Commit(const std::vector<CheckpointEntry>& upserts,
                const std::vector<std::string>& removals);
  Status Put(const CheckpointEntry& entry) { return Commit({entry}, {}); }
  Status Remove(const std::string& path) { return Commit({}, {path}); }
  Status SetAppliedVersion(uint64_t version);
  // cgroup v2 cpuset resets begun and not known to be finished: dirs whose cgroup.subtree_control
  // the enforcer is turning cpuset off and on in (an exact revert of emptied container sets,
  // Enforcer::ResetChildCpusetsLocked). A restarted agent turns cpuset on again in each.
  std::set<std::string> cpuset_resets() const;
  Status SetCpusetReset(const std::string& dir, bool pending);

  const std::string& state_dir() const { return state_dir_; }
  std::string file_path() const;
  // How many times the record was persisted (tests and metrics).
  uint64_t saves() const;

  // Exposed for tests: the file format.
  static std::string Serialize(const std::map<std::string, CheckpointEntry>& entries,
                               uint64_t applied_version,
                               const std::set<std::string>& cpuset_resets = {});
  static Status Parse(const std::string& text, std::map<std::string, CheckpointEntry>* entries,
                      uint64_t* applied_version, std::set<std::string>* cpuset_resets = nullptr);

 private:
  CheckpointStore(std::string state_dir, int lock_fd);
  Status SaveLocked(const std::map<std::string, CheckpointEntry>& entries, uint64_t applied_version,
                    const std::set<std::string>& cpuset_resets);  // requires mu_

  const std::string state_dir_;
  const int lock_fd_;
  mutable std::mutex mu_;
  std::map<std::string, CheckpointEntry> entries_;  // guarded by mu_
  uint64_t applied_version_ = 0;                    // guarded by mu_
  std::set<std::string> cpuset_resets_;             // guarded by mu_
  uint64_t saves_ = 0;                              // guarded by mu_
};

using CheckpointStorePtr = std::shared_ptr<CheckpointStore>;

}  // namespace feedguard::agent
