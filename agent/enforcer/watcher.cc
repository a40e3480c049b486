#include "agent/enforcer/watcher.h"

#include <poll.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>
#include <vector>

#include <spdlog/spdlog.h>

#include "common/locked.h"

namespace feedguard::agent {

Watcher::Watcher(EnforcerPtr enforcer, WatcherOptions options)
    : enforcer_(std::move(enforcer)),
      options_(std::move(options)),
      clock_(options_.time_source ? options_.time_source : std::make_shared<RealTimeSource>()) {}

Watcher::~Watcher() {
  Stop();
  std::lock_guard<std::mutex> l(mu_);
  if (inotify_fd_ >= 0) ::close(inotify_fd_);
}

Status Watcher::Start() {
  if (thread_.joinable()) return FailedPrecondition("watcher already started");
  {
    std::lock_guard<std::mutex> l(mu_);
    FG_RETURN_IF_ERROR(EnsureInotifyLocked());
  }
  stop_ = false;
  thread_ = std::thread([this] {
    while (!stop_.load()) {
      RunOnce(options_.poll_timeout).IgnoreError();  // a failed round is retried next round
    }
  });
  return OkStatus();
}

void Watcher::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

WatcherStats Watcher::stats() const { return LockedCopy(mu_, stats_); }

size_t Watcher::watched_files() const {
  std::lock_guard<std::mutex> l(mu_);
  return path_to_wd_.size();
}

Status Watcher::EnsureInotifyLocked() {
  if (!options_.use_inotify || inotify_fd_ >= 0) return OkStatus();
  inotify_fd_ = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (inotify_fd_ < 0) return Internal(std::string("inotify_init1: ") + std::strerror(errno));
  return OkStatus();
}

namespace {

// Makes the inotify watches of `fd` in `by_path` / `by_wd` exactly `want`, each with `mask`.
void SyncWatchSet(int fd, const std::vector<std::string>& want_list, uint32_t mask,
                  std::map<std::string, int>& by_path, std::map<int, std::string>& by_wd) {
  const std::set<std::string> want(want_list.begin(), want_list.end());
  for (auto it = by_path.begin(); it != by_path.end();) {
    if (want.count(it->first)) {
      ++it;
      continue;
    }
    ::inotify_rm_watch(fd, it->second);
    by_wd.erase(it->second);
    it = by_path.erase(it);
  }
  for (const auto& path : want) {
    if (by_path.count(path)) continue;
    int wd = ::inotify_add_watch(fd, path.c_str(), mask);
    if (wd < 0) continue;  // gone already; the next Apply settles it
    by_wd[wd] = path;
    by_path[path] = wd;
  }
}

}  // namespace

void Watcher::SyncWatchesLocked() {
  if (inotify_fd_ < 0) return;
  const std::vector<std::string> owned = enforcer_->OwnedFiles();
  SyncWatchSet(inotify_fd_, owned, IN_MODIFY, path_to_wd_, wd_to_path_);
  SyncWatchSet(inotify_fd_, enforcer_->ChildWatchDirs(owned), IN_CREATE | IN_ONLYDIR, dir_to_wd_,
               wd_to_dir_);
}

void Watcher::Account(const VerifyReport& r) {
  stats_.overwrites += r.overwrites;
  stats_.reapplied += r.reapplied;
  stats_.contested += r.contested;
  for (const auto& o : r.overwritten) {
    spdlog::debug("watcher: {} holds '{}', not the fence's '{}'{}", o.path, o.found, o.ours,
                  o.restated ? " (the recorded original, restated)" : "");
  }
}

Status Watcher::RunOnce(std::chrono::milliseconds wait) {
  std::lock_guard<std::mutex> l(mu_);
  FG_RETURN_IF_ERROR(EnsureInotifyLocked());
  const auto now = clock_->MonotonicNow();
  if (!sweep_scheduled_) {
    next_sweep_ = now + options_.sweep_interval;
    sweep_scheduled_ = true;
  }
  SyncWatchesLocked();
  if (inotify_fd_ >= 0) {
    pollfd p{inotify_fd_, POLLIN, 0};
    int n = ::poll(&p, 1, static_cast<int>(wait.count()));
    if (n < 0 && errno != EINTR) return Internal(std::string("poll: ") + std::strerror(errno));
    std::set<std::string> changed;
    std::set<std::string> parents;  // watched dirs something made a dir in
    alignas(inotify_event) char buf[16384];
    for (int round = 0; n > 0 && round < 64; ++round) {  // bounded drain
      ssize_t len = ::read(inotify_fd_, buf, sizeof buf);
      if (len <= 0) break;
      for (char* ptr = buf; ptr < buf + len;) {
        auto* ev = reinterpret_cast<inotify_event*>(ptr);
        ptr += sizeof(inotify_event) + ev->len;
        if (auto d = wd_to_dir_.find(ev->wd); d != wd_to_dir_.end()) {
          if (ev->mask & IN_IGNORED) {  // the pod's cgroup went away
            dir_to_wd_.erase(d->second);
            wd_to_dir_.erase(d);
          } else if ((ev->mask & IN_CREATE) && (ev->mask & IN_ISDIR)) {
            ++stats_.children;
            parents.insert(d->second);
          }
          continue;
        }
        auto it = wd_to_path_.find(ev->wd);
        if (it == wd_to_path_.end()) continue;
        if (ev->mask & IN_IGNORED) {  // the file went away (cgroup removed)
          path_to_wd_.erase(it->second);
          wd_to_path_.erase(it);
          continue;
        }
        if (ev->mask & IN_MODIFY) {
          ++stats_.events;
          changed.insert(it->second);
        }
      }
    }
    if (!parents.empty()) {
      Account(
          enforcer_->ChildrenAppeared(std::vector<std::string>(parents.begin(), parents.end())));
    }
    if (!changed.empty()) {
      Account(enforcer_->Verify(std::vector<std::string>(changed.begin(), changed.end())));
    }
  } else if (wait.count() > 0) {
    std::this_thread::sleep_for(std::min(wait, std::chrono::milliseconds(50)));
  }
  // Fences waiting for kubelet's resize (an Idle step-aside, a v1 Quota settle) come back on
  // time, not at the next sweep.
  Account(enforcer_->Tick());
  if (clock_->MonotonicNow() >= next_sweep_) {
    ++stats_.sweeps;
    next_sweep_ = clock_->MonotonicNow() + options_.sweep_interval;
    Account(enforcer_->Verify());
    if (const auto dirs = enforcer_->ChildWatchDirs(); !dirs.empty()) {
      Account(enforcer_->ChildrenAppeared(dirs));
    }
  }
  return OkStatus();
}

}  // namespace feedguard::agent
