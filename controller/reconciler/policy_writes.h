// policy_writes.h — what the controller writes back to the API server about FencePolicies:
// finalizers added and removed, statuses (computed outside every lock, written only when
// changed, at most once per status_interval per policy, a failed write retried with the
// policy's own backoff), a deleting policy's Reverting condition, and the Events the status
// transitions call for (conditions.h).
//
// Its own state (per policy: what was last written, whether it may have changed, the finalizer
// to add or remove) under its own lock, and its own thread (Run), woken when a policy's status
// may have changed instead of polling. What a status is computed from stays the reconciler's:
// it is asked for it through PolicyFacts, never while this unit holds its lock (lock order:
// the reconciler's lock, then this one).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stop_token>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/backoff.h"
#include "controller/fence/fence_sink.h"
#include "controller/policy/fence_policy.h"
#include "controller/status/policy_status.h"
#include "feedguard/common/status.h"
#include "feedguard/common/time_source.h"

namespace feedguard::controller {

// The API-server side effects, behind an interface so the loop can be unit tested.
class PolicyWriter {
 public:
  virtual ~PolicyWriter() = default;
  // Replaces the status of policy `name` (resourceVersion conflicts handled inside).
  virtual Status WriteStatus(const std::string& name, const nlohmann::json& status) = 0;
  virtual Status AddFinalizer(const std::string& name) = 0;
  virtual Status RemoveFinalizer(const std::string& name) = 0;
  virtual void Event(const std::string& policy, const std::string& type, const std::string& reason,
                     const std::string& message) = 0;
};
using PolicyWriterPtr = std::shared_ptr<PolicyWriter>;

// Everything one policy's status is computed from but the agents' views and the previous
// status, copied under the reconciler's lock.
struct StatusJob {
  FencePolicy policy;
  PolicyStatusInput in;  // in.policy, in.agents, in.previous_status and in.now filled after
  // This policy's tallies of the matched nodes' last reports (counters and failed pods).
  std::map<std::string, ReportTally> tallies;
  bool suspended = false;
  std::string suspend_unrecognised;
  size_t held = 0;  // suspended: nodes whose agent has not yet acknowledged the withdrawal
};

// What the writes read of the reconciler; each call takes the reconciler's lock.
class PolicyFacts {
 public:
  virtual ~PolicyFacts() = default;
  // Whether the first full resolution ran: status and finalizers judged from a partial view
  // would be wrong (a deleting policy's finalizer removed before its nodes are even known).
  virtual bool Resolved() const = 0;
  virtual std::optional<StatusJob> StatusJobOf(const std::string& policy) const = 0;
  // The nodes that may still hold `policy`'s fence: with a connected agent (`waiting`) and
  // without one (`unreachable`).
  virtual void NodesHolding(const std::string& policy, std::vector<std::string>* waiting,
                            std::vector<std::string>* unreachable) const = 0;
};

struct PolicyWritesOptions {
  std::chrono::milliseconds status_interval{1000};
  // Pacing of a failed write, per policy and kind (controller-runtime's per-item limiter).
  BackoffPolicy retry;
  // The longest the thread sleeps with nothing due (it is woken for every change).
  std::chrono::milliseconds idle_wait{60'000};
};

struct PolicyWritesStats {
  uint64_t status_writes = 0;
  uint64_t status_computes = 0;  // statuses recomputed (most find nothing to write)
};

class PolicyWrites {
 public:
  // `agents`: the agents' views the statuses read (the distributor, through the sink).
  PolicyWrites(PolicyWriterPtr writer, const PolicyFacts* facts, const FenceSink* agents,
               TimeSourcePtr clock, PolicyWritesOptions options);

  // ---- told by the reconciler (any thread, its lock may be held) ----
  // A policy as the informer delivered it (its status dirty). `status`: what the API server
  // holds, passed only when the policy is first seen (later events carry our own writes back).
  void Upsert(const FencePolicy& policy, const nlohmann::json* status);
  void Erase(const std::string& policy);
  // The policy's status may have changed.
  void MarkDirty(const std::string& policy);
  void MarkAllDirty();
  // A node's agent stream ended / came back: once its grace period has passed (the sink says
  // `stale`), every status is computed again.
  void NodeDisconnected(const std::string& node);
  void NodeConnected(const std::string& node);

  // One pass: finalizers, Reverting messages, due statuses. True if it wrote anything.
  bool Step();
  // Step until `stop`, sleeping until the next due write or a change.
  void Run(std::stop_token stop);
  PolicyWritesStats stats() const;

 private:
  struct Entry {
    int64_t generation = 0;
    bool deleting = false;
    bool has_finalizer = false;
    bool finalizer_pending = false;  // AddFinalizer in flight / failed, retried
    nlohmann::json last_status;      // what we last wrote (or read)
    std::chrono::steady_clock::time_point last_write{};
    bool status_dirty = true;
    // Deleting: the Reverting condition's message last written ("" none yet).
    std::string reverting_written;
  };
  // What a pass has to do, decided under the lock; written after it.
  struct Due {
    std::vector<std::string> finalizers_to_add, deleting, status;
  };
  Due DueNow();
  // Nodes disconnected whose agent has since turned stale (or reconnected): forgotten, and
  // every status made dirty.
  void CheckTurnedStale();
  // A deleting policy: its finalizer removed when no node holds its fence any more, else the
  // Reverting condition says which nodes it waits for.
  void FinishDeleting(const std::string& policy);
  void WriteReverting(const std::string& policy, const std::string& msg);
  void AddFinalizer(const std::string& policy);
  void RemoveFinalizer(const std::string& policy);
  void WriteStatus(const std::string& policy);
  // How long Run may sleep before something is due.
  std::chrono::nanoseconds NextWait();

  const PolicyWriterPtr writer_;
  const PolicyFacts* const facts_;
  const FenceSink* const agents_;
  const TimeSourcePtr clock_;
  const PolicyWritesOptions options_;
  Wakeup wakeup_;

  mutable std::mutex mu_;
  std::map<std::string, Entry> policies_;  // guarded by mu_
  std::set<std::string> disconnected_;     // guarded by mu_
  // Keys "finalizer-add/<policy>", "finalizer-remove/<policy>", "status/<policy>".
  KeyedBackoff retry_;       // guarded by mu_
  PolicyWritesStats stats_;  // guarded by mu_
};

}  // namespace feedguard::controller
