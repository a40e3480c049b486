// reconciler.h — the controller's core loop: watched FencePolicies, Pods, Nodes and Namespaces
// in; one versioned NodeFence per node out (to the distributor); FencePolicy status, finalizers
// and Events back to the API server.
//
// Informer callbacks and agent callbacks only record what changed (cheap, any thread). One
// loop thread (Run) recomputes the dirty nodes, hands changed fences to the sink, and writes
// coalesced status at most once per `status_interval` per policy, only when it changed.
// Deletion: a policy being deleted leaves every NodeFence; its finalizer is removed once no
// agent's acknowledged fence still contains it (nodes that no longer exist do not block).
//
// Never withdraw on start: until MarkInformersSynced() (every informer has delivered its
// initial list) the loop hands no fence to the sink and writes nothing to the API server; the
// first pass after it resolves every node, and only then are fences sent and Synced() true. A
// fresh leader therefore never sends a fence computed from a partial view (agents keep their
// last fence meanwhile: they are fail-static).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/backoff.h"
#include "controller/fence/agent_observer.h"
#include "controller/fence/fence_sink.h"
#include "controller/fence/wire_fence.h"
#include "controller/policy/fence_policy.h"
#include "controller/reconciler/pod_table.h"
#include "controller/resolver/resolver.h"
#include "controller/status/policy_status.h"
#include "feedguard/common/status.h"
#include "feedguard/common/time_source.h"
#include "feedguard/v1/nodefence.pb.h"

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

// The emergency off switch at runtime (docs/DESIGN.md "Emergency off switch"): this annotation,
// "true" on the agent namespace (Rails::agent_namespace, the release namespace), withdraws every
// fence from every node (each gets a NodeFence without policies: agents revert to the
// checkpointed originals), keeps policies, finalizers and the install, and says so in every
// policy's status (condition Suspended=True, Ready=False reason Suspended) and Events. Removing
// it (or any other value) re-applies.
inline constexpr char kSuspendAnnotation[] = "feedguard.io/suspend";

// How an annotation value reads as the off switch. The usual spellings of true (true, 1, yes,
// on, y, t; any case) switch it on, those of false (false, 0, no, off, n, f, "") leave it off; any
// other value switches it on as well — whoever annotated the namespace meant to stop fencing —
// and is named in every policy's Suspended condition and a warning, so the typo is seen.
enum class SuspendValue { kOff, kOn, kUnrecognised };
SuspendValue ParseSuspendValue(std::string_view value);

struct ReconcilerOptions {
  Rails rails;
  std::chrono::milliseconds status_interval{1000};
  std::chrono::milliseconds tick{10};
  // Nodes resolved per hold of the reconciler's lock in one fence pass (then their fences go
  // out and the lock is released before the next chunk).
  size_t fence_chunk = 64;
  // Emergency off switch from the command line (--suspend): as if the agent namespace carried
  // kSuspendAnnotation=true. Either source suspends.
  bool suspended = false;
  // Pacing of a failed write, per key (a policy's finalizer edit, a node's SetDesired), as
  // controller-runtime's per-item rate limiter: 10 ms doubling up to 30 s, forgotten on success.
  BackoffPolicy retry{std::chrono::milliseconds(10), 2.0, std::chrono::milliseconds(30'000),
                      /*jitter_below=*/0.0, /*jitter_above=*/0.0};
  TimeSourcePtr clock;  // default: real
  // Extended resources that count as GPUs in a pod's limits (--gpu-resource-names).
  GpuResourceNames gpu_resource_names = GpuResourceNames::Defaults();
  // What a NodeFence may carry (feedguard/common/wire_limits.h, --max-fence-bytes and
  // --max-fence-containers-per-pod): a bigger fence is not sent (the node keeps its last one
  // and every policy on it reports FenceTooLarge); a pod with more containers goes without
  // their ids (TooManyContainers).
  size_t max_fence_bytes = kMaxFenceBytes;
  FenceLimits fence_limits;
};

struct ReconcilerStats {
  uint64_t node_recomputes = 0;
  uint64_t fences_sent = 0;
  uint64_t status_writes = 0;
  uint64_t status_computes = 0;  // policy statuses recomputed (most find nothing to write)
  size_t nodes = 0;
  size_t pods = 0;
  size_t policies = 0;
};

class Reconciler final : public AgentObserver {
 public:
  Reconciler(FenceSinkPtr sink, PolicyWriterPtr writer, ReconcilerOptions options);

  // ---- informer side (raw API objects) ----
  void UpsertPolicy(const nlohmann::json& obj);
  void DeletePolicy(const nlohmann::json& obj);
  void UpsertPod(const nlohmann::json& obj);
  void DeletePod(const nlohmann::json& obj);
  void UpsertNode(const nlohmann::json& obj);
  void DeleteNode(const nlohmann::json& obj);
  void UpsertNamespace(const nlohmann::json& obj);
  void DeleteNamespace(const nlohmann::json& obj);
  // Every informer has delivered its initial list (call once; later calls are no-ops).
  void MarkInformersSynced();
  // True once a full resolution ran after MarkInformersSynced(): fences may flow (/readyz).
  bool Synced() const;
  // Whether an agent may speak for `node`: true while nodes are not known yet (before the
  // first full resolution), then only when a Node object of that name exists.
  bool NodeAdmissible(const std::string& node) const;

  // ---- AgentObserver ----
  void OnConnected(const std::string& node, const feedguard::v1::AgentHello& hello) override;
  void OnDisconnected(const std::string& node) override;
  void OnAck(const std::string& node, uint64_t version) override;
  void OnNack(const std::string& node, uint64_t version, const std::string& error) override;
  void OnReport(const std::string& node, const feedguard::v1::NodeReport& report) override;
  void OnUnreadable(const std::string& node, const std::string& error) override;

  // One pass: recompute dirty nodes, send, finalizers, due status writes. Returns true if it
  // did anything.
  bool Step();
  // The two halves of Step: fences to the sink (fast, in memory) and API writes (round trips).
  bool StepFences();
  bool StepApiWrites();
  // Until `stop`: StepFences on this thread, StepApiWrites on a second one.
  void Run(std::stop_token stop);

  ReconcilerStats stats() const;
  // Whether the off switch is on (flag or annotation): no policy is enforced anywhere.
  bool Suspended() const;
  // The current desired fence of a node (tests, debugging).
  std::optional<feedguard::v1::NodeFence> DesiredFence(const std::string& node) const;

 private:
  struct PolicyEntry {
    FencePolicy policy;
    std::vector<FieldError> invalid;
    nlohmann::json last_status;  // what we last wrote (or read)
    std::chrono::steady_clock::time_point last_write{};
    bool status_dirty = true;
    bool finalizer_pending = false;  // AddFinalizer in flight / failed, retried
    // Deleting: the Reverting condition's message last written ("" none yet): which nodes the
    // finalizer still waits for, and the way out for those without a connected agent.
    std::string reverting_written;
  };
  struct NodeEntry {
    NodeInfo info;
    bool exists = false;   // a Node object exists
    NodeFencePtr desired;  // shared with the sink
    bool sent = false;
    // Policies contained in each sent version not yet acknowledged, and in the acked one.
    std::map<uint64_t, std::set<std::string>> sent_policies;
    std::set<std::string> acked_policies;
    // Whether acked_policies is known: false until the agent acknowledges a fence this process
    // sent (after a restart or a failover, what an agent holds from the last leader is unknown).
    bool ack_known = false;
    bool agent_connected = false;  // its agent has a stream to this process now
    // Why the newest resolution was not sent (too big for the agents); "" when it was.
    std::string fence_error;
    // Per policy, what its status reads of this node's last report (counters and failed pods,
    // policy_status.h): the report itself is not kept.
    ReportTallies tallies;
  };

  // What StepApiWrites has to do this pass, decided under the lock; written after it.
  struct ApiWritesDue {
    std::vector<std::string> finalizers_to_add, finalizers_to_remove;
    std::vector<std::pair<std::string, std::string>> reverting;  // policy, condition message
    std::vector<std::string> status;                             // policies whose status is due
  };
  // Everything one policy's status is computed from, copied under the lock.
  struct StatusJob {
    FencePolicy policy;
    PolicyStatusInput in;  // in.policy and in.agents filled outside the lock
    // This policy's tallies of the matched nodes' last reports (counters and failed pods).
    std::map<std::string, ReportTally> tallies;
    bool suspended = false;
    std::string suspend_unrecognised;
    size_t held = 0;  // suspended: nodes whose agent has not yet acknowledged the withdrawal
  };
  // nullopt until the first full resolution (a partial view would judge finalizers wrongly).
  std::optional<ApiWritesDue> ApiWritesDueNow();
  // Disconnected nodes whose agent has since turned stale (or reconnected).
  std::vector<std::string> NodesTurnedStale() const;
  // Whether any node may still hold `policy`'s fence: those with a connected agent in
  // `waiting`, the others in `unreachable`.
  bool StillFencedLocked(const std::string& policy, std::vector<std::string>* waiting,
                         std::vector<std::string>* unreachable) const;
  void WriteReverting(const std::string& policy, const std::string& msg);
  void AddFinalizer(const std::string& policy);
  void RemoveFinalizer(const std::string& policy);
  std::optional<StatusJob> StatusJobLocked(const std::string& policy);
  // Computes the policy's status, writes it if it changed, and the Events its conditions'
  // transitions call for.
  void WriteStatus(const std::string& policy);

  void MarkAllNodesDirtyLocked();
  bool SuspendedLocked() const;
  void SetSuspendAnnotationLocked(const std::optional<std::string>& value);
  // Nodes whose agent's last acknowledged fence still holds `policy` (the withdrawal not yet
  // acknowledged).
  size_t NodesHoldingLocked(const std::string& policy) const;
  void MarkPolicyDirtyLocked(const std::string& name);
  // Every policy whose status reads this node's agent.
  void MarkNodePoliciesDirtyLocked(const std::string& node);
  void RecomputeNodeLocked(const std::string& node, std::vector<NodeFencePtr>* to_send);
  // Hands fences to the sink; a failed one is retried with per-node backoff.
  void SendFences(const std::vector<NodeFencePtr>& to_send);
  // Takes `pod` out of its node's list and marks the node dirty (the caller erases it).
  void UnlinkPodLocked(const PodInfo& pod);
  uint64_t NextVersionLocked();

  const FenceSinkPtr sink_;
  const PolicyWriterPtr writer_;
  const ReconcilerOptions options_;
  const TimeSourcePtr clock_;

  mutable std::mutex mu_;
  std::map<std::string, PolicyEntry> policies_;  // guarded by mu_
  std::map<std::string, NodeEntry> nodes_;       // guarded by mu_
  // One copy of each scheduled pod, by namespace and name (the informer's key: a pod recreated
  // under the same name replaces its predecessor), and each node's pods by pointer (records in
  // the table never move).
  PodTable pods_;                                                           // guarded by mu_
  std::unordered_map<std::string, std::vector<const PodInfo*>> node_pods_;  // guarded by mu_
  LabelSetPool label_sets_;                                                 // guarded by mu_
  // Namespace, node, priority-class, phase and container names of the pods, one copy each.
  InternPool<std::string> names_;             // guarded by mu_
  std::map<std::string, Labels> namespaces_;  // guarded by mu_
  std::set<std::string> dirty_nodes_;         // guarded by mu_
  bool suspend_annotation_ = false;   // guarded by mu_; kSuspendAnnotation on the agent namespace
  std::string suspend_unrecognised_;  // guarded by mu_; its value when no spelling of a boolean
  // Nodes whose agent disconnected and is not yet stale: StepApiWrites recomputes the status
  // once the distributor's grace period (stale_after) has passed for one of them.
  std::set<std::string> disconnected_;  // guarded by mu_
  // policy → node → what the policy got there (for status).
  std::map<std::string, std::map<std::string, PolicyOnNode>> per_policy_;  // guarded by mu_
  uint64_t version_counter_ = 0;                                           // guarded by mu_
  // Failed writes wait here before their next try: keys "fence/<node>" (SetDesired),
  // "finalizer-add/<policy>", "finalizer-remove/<policy>", "status/<policy>".
  KeyedBackoff retry_;                   // guarded by mu_
  std::set<std::string> fence_retries_;  // guarded by mu_; nodes whose SetDesired failed
  ReconcilerStats stats_;                // guarded by mu_
  bool informers_synced_ = false;        // guarded by mu_
  bool resolved_ = false;                // guarded by mu_
  // Node names for NodeAdmissible, under a lock of their own: the distributor asks on every
  // hello under its lock, which must never wait for a long recompute under mu_.
  mutable std::mutex admission_mu_;
  std::set<std::string> admissible_nodes_;  // guarded by admission_mu_
  bool nodes_known_ = false;                // guarded by admission_mu_
};
using ReconcilerPtr = std::shared_ptr<Reconciler>;

// An Event a status change calls for.
struct PolicyEvent {
  const char* type;  // Normal | Warning
  const char* reason;
  std::string message;
};
// The Events of the condition transitions from `prev` (what the API server held: may be anything)
// to `next`: InvalidSpec, Enforced, Degraded, Conflicting, Suspended, Withdrawn (suspended and
// every node reverted: `held` == 0), Resumed.
std::vector<PolicyEvent> EventsFor(const nlohmann::json& prev, const nlohmann::json& next,
                                   const std::vector<FieldError>& invalid, size_t held);

}  // namespace feedguard::controller
