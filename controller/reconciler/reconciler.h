// reconciler.h — the controller's core loop: watched FencePolicies, Pods, Nodes and Namespaces
// in; one versioned NodeFence per node out (to the distributor); FencePolicy status, finalizers
// and Events back to the API server.
//
// Three parts, each with its own state: the ClusterCache (pods, nodes, namespaces as the
// informers delivered them; cluster_cache.h), the fence loop here (which nodes are dirty, what
// each was last sent and acknowledged, per policy what it got on each node), and PolicyWrites
// (finalizers, statuses, Events; policy_writes.h), which reads the loop's state through
// PolicyFacts. Informer and agent callbacks only record what changed (cheap, any thread) and
// wake the thread that acts on it: the fence loop (Run) recomputes the dirty nodes and hands
// changed fences to the sink; PolicyWrites, on a thread of its own, writes coalesced status at
// most once per `status_interval` per policy, only when it changed.
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
#include <functional>
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
#include "controller/reconciler/cluster_cache.h"
#include "controller/reconciler/policy_writes.h"
#include "controller/resolver/resolver.h"
#include "controller/status/policy_status.h"
#include "feedguard/common/status.h"
#include "feedguard/common/time_source.h"
#include "feedguard/v1/nodefence.pb.h"

namespace feedguard::controller {

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
  // The longest either thread sleeps with nothing to do (each is woken for every change).
  std::chrono::milliseconds idle_wait{60'000};
  // Nodes resolved per hold of the reconciler's lock in one fence pass (then their fences go
  // out and the lock is released before the next chunk).
  size_t fence_chunk = 64;
  // Emergency off switch from the command line (--suspend): as if the agent namespace carried
  // kSuspendAnnotation=true. Either source suspends.
  bool suspended = false;
  // Pacing of a failed write, per key (a node's SetDesired; a policy's finalizer edit or status
  // write in PolicyWrites), as controller-runtime's per-item rate limiter: 10 ms doubling up to
  // 30 s, forgotten on success.
  BackoffPolicy retry{std::chrono::milliseconds(10), 2.0, std::chrono::milliseconds(30'000),
                      /*jitter_below=*/0.0, /*jitter_above=*/0.0};
  TimeSourcePtr clock;  // default: real
  // Extended resources that count as GPUs in a pod's limits (--gpu-resource-names).
  GpuResourceNames gpu_resource_names = GpuResourceNames::Defaults();
  // DRA drivers whose allocated devices count as GPUs (--gpu-dra-drivers; ParseDraDrivers).
  std::vector<std::string> gpu_dra_drivers;
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
  // GPU pods left out of their node's observe list (FenceLimits::max_observed_pods).
  size_t gpu_pods_not_observed = 0;
};

class Reconciler final : public AgentObserver, private PolicyFacts {
 public:
  Reconciler(FenceSinkPtr sink, PolicyWriterPtr writer, ReconcilerOptions options);

  // ---- informer side (raw API objects) ----
  void UpsertPolicy(const nlohmann::json& obj);
  void DeletePolicy(const nlohmann::json& obj);
  void UpsertPod(const nlohmann::json& obj);
  void DeletePod(const nlohmann::json& obj);
  void UpsertNode(const nlohmann::json& obj);
  void DeleteNode(const nlohmann::json& obj);
  // ResourceClaims (resource.k8s.io/v1): their GPU devices count as their pods' GPUs.
  void UpsertClaim(const nlohmann::json& obj);
  void DeleteClaim(const nlohmann::json& obj);
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
  void OnFenceWanted(const std::string& node, uint64_t version) override;

  // One pass: recompute dirty nodes, send, finalizers, due status writes. Returns true if it
  // did anything.
  bool Step();
  // The two halves of Step: fences to the sink (fast, in memory) and API writes (round trips).
  bool StepFences();
  bool StepApiWrites();
  // Until `stop`: the fence loop on this thread, PolicyWrites on a second one; each sleeps
  // until woken by a change or its next retry is due.
  void Run(std::stop_token stop);

  ReconcilerStats stats() const;
  // Whether the off switch is on (flag or annotation): no policy is enforced anywhere.
  bool Suspended() const;
  // The current desired fence of a node (tests, debugging): the one the sink holds, else (its
  // agent acknowledged it) the node resolved again with the version last sent.
  std::optional<feedguard::v1::NodeFence> DesiredFence(const std::string& node) const;
  // Calls `fn` with each pod the cache holds on `node`, under the reconciler's lock (`fn` must
  // not call back into the reconciler): how observations name the uids agents report.
  void ForEachPodOn(const std::string& node, const std::function<void(const PodInfo&)>& fn) const;

 private:
  struct PolicyEntry {
    FencePolicy policy;
    std::vector<FieldError> invalid;
  };
  // What the fence loop knows of one node (a Node object exists: the cache has its labels).
  struct NodeEntry {
    // The newest fence handed to the sink: its version and digest, and the fence itself only
    // while the sink holds it (until the agent acknowledges it: fence_slot.h).
    std::weak_ptr<const WireFence> desired;
    uint64_t version = 0;
    FenceDigest digest{};
    bool sent = false;
    // The sink asked for the fence again (a new stream after it dropped the bytes).
    bool wanted = false;
    // Policies contained in each sent version not yet acknowledged, and in the acked one.
    std::map<uint64_t, std::set<std::string>> sent_policies;
    std::set<std::string> acked_policies;
    // Whether acked_policies is known: false until the agent acknowledges a fence this process
    // sent (after a restart or a failover, what an agent holds from the last leader is unknown).
    bool ack_known = false;
    bool agent_connected = false;  // its agent has a stream to this process now
    // Why the newest resolution was not sent (too big for the agents); "" when it was.
    std::string fence_error;
    size_t gpu_pods_not_observed = 0;  // of the newest resolution
    // Per policy, what its status reads of this node's last report (counters and failed pods,
    // policy_status.h): the report itself is not kept.
    ReportTallies tallies;
  };

  // ---- PolicyFacts (each takes mu_) ----
  bool Resolved() const override;
  std::optional<StatusJob> StatusJobOf(const std::string& policy) const override;
  void NodesHolding(const std::string& policy, std::vector<std::string>* waiting,
                    std::vector<std::string>* unreachable) const override;

  void MarkAllNodesDirtyLocked();
  bool SuspendedLocked() const;
  void SetSuspendAnnotationLocked(const std::optional<std::string>& value);
  // Nodes whose agent's last acknowledged fence still holds `policy` (the withdrawal not yet
  // acknowledged).
  size_t NodesAckedHoldingLocked(const std::string& policy) const;
  // Every policy whose status reads this node's agent.
  void MarkNodePoliciesDirtyLocked(const std::string& node);
  // The fence loop has work (dirty nodes): wake it.
  void WakeFences() { fence_wakeup_.Notify(); }
  // Runs `change(&dirty_nodes_)` on the cache under mu_ and wakes the fence loop when it marked
  // a node dirty.
  template <typename Change>
  void ChangeCache(Change change) {
    std::lock_guard<std::mutex> l(mu_);
    const size_t before = dirty_nodes_.size();
    change(&dirty_nodes_);
    if (dirty_nodes_.size() != before) WakeFences();
  }
  // The nodes dirty now and those whose SetDesired retry is due; empties the set.
  std::vector<std::string> TakeDirtyNodesLocked();
  void RecomputeNodeLocked(const std::string& node, std::vector<NodeFencePtr>* to_send);
  // The node's fence under the policies in force now (requires mu_).
  NodeResolution ResolveNodeLocked(const NodeInfo& info) const;
  // A resolution over the fence size agents accept: why it is not sent ("" when it fits).
  std::string FenceTooBig(const NodeResolution& r, size_t bytes) const;
  // Hands fences to the sink; a failed one is retried with per-node backoff.
  void SendFences(const std::vector<NodeFencePtr>& to_send);
  // How long the fence loop may sleep: until the next SetDesired retry, else idle_wait.
  std::chrono::nanoseconds NextFenceWait() const;
  uint64_t NextVersionLocked();

  const FenceSinkPtr sink_;
  const ReconcilerOptions options_;
  const TimeSourcePtr clock_;
  Wakeup fence_wakeup_;

  mutable std::mutex mu_;
  std::map<std::string, PolicyEntry> policies_;  // guarded by mu_
  std::map<std::string, NodeEntry> nodes_;       // guarded by mu_; one per Node object
  ClusterCache cache_;                           // guarded by mu_
  std::set<std::string> dirty_nodes_;            // guarded by mu_
  bool suspend_annotation_ = false;   // guarded by mu_; kSuspendAnnotation on the agent namespace
  std::string suspend_unrecognised_;  // guarded by mu_; its value when no spelling of a boolean
  // policy → node → what the policy got there (for status).
  std::map<std::string, std::map<std::string, PolicyOnNode>> per_policy_;  // guarded by mu_
  uint64_t version_counter_ = 0;                                           // guarded by mu_
  // Failed SetDesired calls wait here before their next try: keys "fence/<node>".
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

  // Last: it reads the state above (PolicyFacts) and is destroyed first.
  PolicyWrites writes_;
};
using ReconcilerPtr = std::shared_ptr<Reconciler>;

}  // namespace feedguard::controller
