// watcher.h — notices when someone else rewrites a cgroup file the enforcer owns, and has the
// enforcer put it back (docs/DESIGN.md §4 "Who else writes").
//
// Two detectors feed Enforcer::Verify:
//  - inotify IN_MODIFY on every owned file. On the cgroup v1 host this was built on (kernel
//    6.18) a write(2) to a v1 knob file by any process raises IN_MODIFY on that file (the VFS
//    write path notifies, kernfs or not); the cgroup_v1 integration test checks it. Changes the
//    kernel makes on its own (e.g. cpuset.effective_* after hotplug) raise nothing, hence:
//  - a slow periodic sweep that re-reads every owned file (interval injectable, driven by a
//    TimeSource so tests move time by hand).
// And one for new cgroups (cgroup v2): inotify IN_CREATE on the pod dirs whose children hold a
// Cpuset fence or a trainer's pinning (Enforcer::ChildWatchDirs), so a container created there
// (a restart) is pinned at once (Enforcer::ChildrenAppeared); mkdir(2) on cgroupfs raises it
// like on any filesystem. The sweep re-fences those pods too, for events lost to an overflow.
// The enforcer rate-limits re-applies (contested files are left alone), so the two writers
// never flip-flop.
//
// Start() runs a thread that calls RunOnce() until Stop(); tests may call RunOnce() directly.
// Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "agent/enforcer/enforcer.h"
#include "feedguard/common/status.h"
#include "feedguard/common/time_source.h"

namespace feedguard::agent {

struct WatcherOptions {
  std::chrono::milliseconds sweep_interval{60000};
  // How long one RunOnce of the thread waits for inotify events (and so how late a sweep or a
  // Stop() may be noticed).
  std::chrono::milliseconds poll_timeout{200};
  bool use_inotify = true;
  TimeSourcePtr time_source;  // null: the real clock
};

struct WatcherStats {
  uint64_t events = 0;  // inotify events on owned files
  uint64_t sweeps = 0;
  uint64_t overwrites = 0;  // divergences found (events and sweeps)
  uint64_t reapplied = 0;
  uint64_t contested = 0;
  uint64_t children = 0;  // inotify events for dirs made under watched pod dirs
};

class Watcher {
 public:
  Watcher(EnforcerPtr enforcer, WatcherOptions options);
  ~Watcher();
  Watcher(const Watcher&) = delete;
  Watcher& operator=(const Watcher&) = delete;

  // Opens the inotify instance (if used) and starts the thread.
  Status Start();
  // Stops and joins the thread; idempotent.
  void Stop();

  // One round: re-syncs the watch list with the enforcer's owned files, waits up to `wait` for
  // inotify events, verifies the files they name, then sweeps everything if a sweep is due.
  // Opens the inotify instance on first use.
  Status RunOnce(std::chrono::milliseconds wait);

  WatcherStats stats() const;
  size_t watched_files() const;

 private:
  Status EnsureInotifyLocked();
  void SyncWatchesLocked();
  void Account(const VerifyReport& r);  // requires mu_

  const EnforcerPtr enforcer_;
  const WatcherOptions options_;
  const TimeSourcePtr clock_;

  mutable std::mutex mu_;                  // serialises RunOnce; guards everything below
  int inotify_fd_ = -1;                    // guarded by mu_
  std::map<int, std::string> wd_to_path_;  // guarded by mu_
  std::map<std::string, int> path_to_wd_;  // guarded by mu_
  std::map<int, std::string> wd_to_dir_;   // guarded by mu_ (IN_CREATE watches)
  std::map<std::string, int> dir_to_wd_;   // guarded by mu_
  std::chrono::steady_clock::time_point next_sweep_{};  // guarded by mu_
  bool sweep_scheduled_ = false;                        // guarded by mu_
  WatcherStats stats_;                                  // guarded by mu_

  std::atomic<bool> stop_{false};
  std::thread thread_;  // touched only by Start/Stop (owner's thread)
};

}  // namespace feedguard::agent
