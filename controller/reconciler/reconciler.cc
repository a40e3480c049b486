#include "controller/reconciler/reconciler.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <thread>

#include <spdlog/spdlog.h>

#include "common/strings.h"
#include "controller/kube/resource.h"
#include "controller/sanitize/sanitize.h"
#include "controller/status/policy_status.h"

namespace feedguard::controller {
namespace {

std::string NameOf(const nlohmann::json& obj) {
  if (!obj.is_object()) return "";
  auto m = obj.find("metadata");
  if (m == obj.end() || !m->is_object()) return "";
  auto n = m->find("name");
  return n != m->end() && n->is_string() ? n->get<std::string>() : "";
}

// The value of kSuspendAnnotation on a Namespace object; nullopt when it has none (type-checked:
// a value that is no string reads as "", which is no spelling of false).
std::optional<std::string> SuspendAnnotation(const nlohmann::json& ns) {
  if (!ns.is_object()) return std::nullopt;
  auto m = ns.find("metadata");
  if (m == ns.end() || !m->is_object()) return std::nullopt;
  auto a = m->find("annotations");
  if (a == m->end() || !a->is_object()) return std::nullopt;
  auto v = a->find(kSuspendAnnotation);
  if (v == a->end()) return std::nullopt;
  return v->is_string() ? v->get<std::string>() : std::string();
}

std::set<std::string> PoliciesIn(const feedguard::v1::NodeFence& f) {
  std::set<std::string> out;
  for (const auto& p : f.policies()) out.insert(p.name());
  return out;
}

}  // namespace

SuspendValue ParseSuspendValue(std::string_view value) {
  std::string v(Trim(value));
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const char* t : {"true", "1", "yes", "on", "y", "t"}) {
    if (v == t) return SuspendValue::kOn;
  }
  for (const char* f : {"false", "0", "no", "off", "n", "f", ""}) {
    if (v == f) return SuspendValue::kOff;
  }
  return SuspendValue::kUnrecognised;
}

Reconciler::Reconciler(FenceSinkPtr sink, PolicyWriterPtr writer, ReconcilerOptions options)
    : sink_(std::move(sink)),
      options_(std::move(options)),
      clock_(options_.clock ? options_.clock : std::make_shared<RealTimeSource>()),
      retry_(options_.retry, /*seed=*/1),
      writes_(std::move(writer), this, sink_.get(), clock_,
              PolicyWritesOptions{options_.status_interval, options_.retry, options_.idle_wait}) {
  // Versions must grow across controller restarts and leader changes: start from the wall
  // clock in microseconds (an agent only compares versions for equality and freshness).
  version_counter_ = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(clock_->WallNow().time_since_epoch())
          .count());
}

uint64_t Reconciler::NextVersionLocked() { return ++version_counter_; }

bool Reconciler::SuspendedLocked() const { return options_.suspended || suspend_annotation_; }

bool Reconciler::Suspended() const {
  std::lock_guard<std::mutex> l(mu_);
  return SuspendedLocked();
}

void Reconciler::SetSuspendAnnotationLocked(const std::optional<std::string>& value) {
  const SuspendValue v = value ? ParseSuspendValue(*value) : SuspendValue::kOff;
  const std::string unrecognised = v == SuspendValue::kUnrecognised ? *value : "";
  if (unrecognised != suspend_unrecognised_) {
    suspend_unrecognised_ = unrecognised;
    writes_.MarkAllDirty();  // the condition names the value
    if (!unrecognised.empty()) {
      spdlog::error(
          "reconciler: {} on namespace {} is \"{}\", no spelling of true or false: taken as "
          "true (fencing suspended); set it to true, or remove it to fence again",
          kSuspendAnnotation, options_.rails.agent_namespace, SafeText(unrecognised, 64));
    }
  }
  const bool on = v != SuspendValue::kOff;
  if (on == suspend_annotation_) return;
  const bool before = SuspendedLocked();
  suspend_annotation_ = on;
  if (SuspendedLocked() == before) return;  // --suspend holds it either way
  spdlog::warn("reconciler: off switch {} ({} on namespace {}): {}", on ? "ON" : "off",
               kSuspendAnnotation, options_.rails.agent_namespace,
               on ? "withdrawing every fence from every node" : "re-applying fences");
  MarkAllNodesDirtyLocked();
  writes_.MarkAllDirty();
}

size_t Reconciler::NodesAckedHoldingLocked(const std::string& policy) const {
  size_t held = 0;
  for (const auto& [node, n] : nodes_) {
    held += n.acked_policies.count(policy);  // its agent's last acknowledged fence holds it
  }
  return held;
}

void Reconciler::MarkAllNodesDirtyLocked() {
  for (const auto& [name, n] : nodes_) dirty_nodes_.insert(name);
  WakeFences();
}

// ---- informer side ----

void Reconciler::UpsertPolicy(const nlohmann::json& obj) {
  ParsedPolicy parsed = ParseFencePolicy(obj);
  if (parsed.policy.name.empty()) {
    spdlog::warn("reconciler: skipping a FencePolicy without metadata.name");
    return;
  }
  std::vector<FieldError> invalid = parsed.errors;
  for (auto& e : ValidateFencePolicy(parsed.policy)) invalid.push_back(e);
  std::lock_guard<std::mutex> l(mu_);
  PolicyEntry& e = policies_[parsed.policy.name];
  bool first = e.policy.name.empty();
  // Our own status writes come back as MODIFIED events with the same generation: they change
  // nothing any node needs, so they must not trigger a cluster-wide recompute.
  const bool affects_nodes = first || e.policy.generation != parsed.policy.generation ||
                             e.policy.deleting != parsed.policy.deleting;
  if (!first && !affects_nodes && e.policy.finalizers == parsed.policy.finalizers) {
    e.policy.resource_version = parsed.policy.resource_version;
    return;
  }
  e.policy = std::move(parsed.policy);
  e.invalid = std::move(invalid);
  const nlohmann::json* status = nullptr;
  if (first && obj.contains("status")) status = &obj["status"];
  writes_.Upsert(e.policy, status);
  if (affects_nodes) MarkAllNodesDirtyLocked();
}

void Reconciler::DeletePolicy(const nlohmann::json& obj) {
  const std::string name = NameOf(obj);
  std::lock_guard<std::mutex> l(mu_);
  policies_.erase(name);
  per_policy_.erase(name);
  writes_.Erase(name);
  MarkAllNodesDirtyLocked();
}

void Reconciler::UpsertPod(const nlohmann::json& obj) {
  PodInfo pod = PodFromJson(obj, options_.gpu_resource_names);
  if (pod.uid.empty()) {
    spdlog::warn("reconciler: skipping pod {}/{} without metadata.uid", pod.ns.get(), pod.name);
    return;
  }
  ChangeCache([&](ClusterCache::NodeSet* dirty) { cache_.UpsertPod(std::move(pod), dirty); });
}

void Reconciler::DeletePod(const nlohmann::json& obj) {
  const std::string ns = kube::NamespaceOf(obj), name = kube::NameOf(obj);
  ChangeCache([&](ClusterCache::NodeSet* dirty) { cache_.DeletePod(ns, name, dirty); });
}

void Reconciler::UpsertClaim(const nlohmann::json& obj) {
  ClaimInfo claim = ClaimFromJson(obj, options_.gpu_dra_drivers);
  ChangeCache([&](ClusterCache::NodeSet* dirty) { cache_.UpsertClaim(claim, dirty); });
}

void Reconciler::DeleteClaim(const nlohmann::json& obj) {
  const std::string ns = kube::NamespaceOf(obj), name = kube::NameOf(obj);
  ChangeCache([&](ClusterCache::NodeSet* dirty) { cache_.DeleteClaim(ns, name, dirty); });
}

void Reconciler::UpsertNode(const nlohmann::json& obj) {
  NodeInfo info = NodeFromJson(obj);
  if (info.name.empty()) {
    spdlog::warn("reconciler: skipping a Node without metadata.name");
    return;
  }
  {
    std::lock_guard<std::mutex> l(admission_mu_);
    admissible_nodes_.insert(info.name);
  }
  std::lock_guard<std::mutex> l(mu_);
  const std::string name = info.name;
  nodes_.try_emplace(name);
  if (cache_.UpsertNode(std::move(info))) {
    dirty_nodes_.insert(name);
    WakeFences();
  }
}

void Reconciler::DeleteNode(const nlohmann::json& obj) {
  std::string name = NameOf(obj);
  if (name.empty()) return;
  {
    std::lock_guard<std::mutex> l(admission_mu_);
    admissible_nodes_.erase(name);
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    cache_.DeleteNode(name);
    nodes_.erase(name);
    dirty_nodes_.erase(name);
    fence_retries_.erase(name);
    retry_.Forget("fence/" + name);
    for (auto& [p, per_node] : per_policy_) per_node.erase(name);
    writes_.MarkAllDirty();
  }
  sink_->Forget(name);  // outside mu_: the distributor calls NodeAdmissible under its own lock
}

void Reconciler::UpsertNamespace(const nlohmann::json& obj) {
  NamespaceInfo ns = NamespaceFromJson(obj);
  if (ns.name.empty()) return;
  std::lock_guard<std::mutex> l(mu_);
  if (ns.name == options_.rails.agent_namespace) SetSuspendAnnotationLocked(SuspendAnnotation(obj));
  // Only namespace selectors care; they are rare enough to recompute everything.
  if (cache_.UpsertNamespace(std::move(ns))) MarkAllNodesDirtyLocked();
}

void Reconciler::DeleteNamespace(const nlohmann::json& obj) {
  std::lock_guard<std::mutex> l(mu_);
  if (NameOf(obj) == options_.rails.agent_namespace) SetSuspendAnnotationLocked(std::nullopt);
  cache_.DeleteNamespace(NameOf(obj));
}

// ---- agent side ----

void Reconciler::MarkNodePoliciesDirtyLocked(const std::string& node) {
  // A policy's status reads an agent only where the policy's node selector matched the node
  // (per_policy_); an agent's ACK, NACK or (dis)connection changes no other policy's status.
  for (auto& [policy, per_node] : per_policy_) {
    if (per_node.count(node)) writes_.MarkDirty(policy);
  }
}

void Reconciler::OnConnected(const std::string& node, const feedguard::v1::AgentHello&) {
  std::lock_guard<std::mutex> l(mu_);
  if (auto it = nodes_.find(node); it != nodes_.end()) it->second.agent_connected = true;
  MarkNodePoliciesDirtyLocked(node);
  writes_.NodeConnected(node);
}

void Reconciler::OnDisconnected(const std::string& node) {
  std::lock_guard<std::mutex> l(mu_);
  if (auto it = nodes_.find(node); it != nodes_.end()) it->second.agent_connected = false;
  MarkNodePoliciesDirtyLocked(node);
  writes_.NodeDisconnected(node);
}

void Reconciler::OnAck(const std::string& node, uint64_t version) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = nodes_.find(node);
  if (it != nodes_.end()) {
    NodeEntry& n = it->second;
    if (auto s = n.sent_policies.find(version); s != n.sent_policies.end()) {
      // Policies that left or entered this node's acknowledged fence: their status counts
      // nodes still holding them (off switch) even where they no longer match.
      for (const auto& p : n.acked_policies) {
        if (!s->second.count(p)) writes_.MarkDirty(p);
      }
      for (const auto& p : s->second) {
        if (!n.acked_policies.count(p)) writes_.MarkDirty(p);
      }
      n.acked_policies = s->second;
      n.ack_known = true;
      n.sent_policies.erase(n.sent_policies.begin(), std::next(s));
    }
  }
  MarkNodePoliciesDirtyLocked(node);
}

void Reconciler::OnFenceWanted(const std::string& node, uint64_t version) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return;  // no Node object: nothing to send
  spdlog::debug("reconciler: {} wants its fence (version {}) again", node, version);
  it->second.wanted = true;
  dirty_nodes_.insert(node);
  WakeFences();
}

void Reconciler::OnNack(const std::string& node, uint64_t version, const std::string& error) {
  spdlog::warn("agent on {} rejected fence version {}: {}", node, version, error);
  std::lock_guard<std::mutex> l(mu_);
  MarkNodePoliciesDirtyLocked(node);
}

void Reconciler::OnReport(const std::string& node, const feedguard::v1::NodeReport& report) {
  // What the policies' status reads of the report (policy_status.h); the report itself is not
  // kept. Usage counters, overwrite counts and pressure below the starved threshold are not in
  // it, so the periodic report of a steady node changes nothing.
  ReportTallies tallies = TallyReport(report);
  std::lock_guard<std::mutex> l(mu_);
  auto it = nodes_.find(node);
  if (it == nodes_.end()) {
    for (const auto& [policy, t] : tallies) writes_.MarkDirty(policy);
    return;
  }
  auto& prev = it->second.tallies;
  for (const auto& [policy, t] : tallies) {
    auto p = prev.find(policy);
    if (p == prev.end() || !p->second.SameForStatus(t)) writes_.MarkDirty(policy);
  }
  for (const auto& [policy, t] : prev) {
    if (!tallies.count(policy)) writes_.MarkDirty(policy);
  }
  prev = std::move(tallies);
}

void Reconciler::OnUnreadable(const std::string& node, const std::string& error) {
  // The state itself is the distributor's (AgentView::unreadable_error); the policies
  // reading this node recompute their status.
  (void)error;
  std::lock_guard<std::mutex> l(mu_);
  MarkNodePoliciesDirtyLocked(node);
}

// ---- the loop ----

std::string Reconciler::FenceTooBig(const NodeResolution& r, size_t bytes) const {
  if (bytes <= options_.max_fence_bytes) return "";
  size_t containers = 0;
  for (const auto& t : r.fence.trainers()) containers += t.pod().containers_size();
  for (const auto& nb : r.fence.neighbours()) containers += nb.pod().containers_size();
  return "the node's fence would be " + std::to_string(bytes) + " bytes, over the " +
         std::to_string(options_.max_fence_bytes) + " agents accept (" +
         std::to_string(r.fence.trainers_size() + r.fence.neighbours_size()) + " pods, " +
         std::to_string(containers) + " container ids): not sent, the agent keeps its last fence";
}

void Reconciler::RecomputeNodeLocked(const std::string& node, std::vector<NodeFencePtr>* to_send) {
  const NodeInfo* info = cache_.Node(node);
  auto it = nodes_.find(node);
  if (info == nullptr || it == nodes_.end()) return;  // no Node object (any more)
  NodeEntry& n = it->second;
  NodeResolution r = ResolveNodeLocked(*info);
  stats_.node_recomputes++;
  n.gpu_pods_not_observed = r.gpu_pods_not_observed;
  // Held serialized (wire_fence.h); an unchanged resolution has the same bytes.
  std::string bytes = WireFence::Serialize(r.fence);
  // Bigger than the agents read (wire_limits.h): not sent. The agent keeps its last fence (fail
  // static) and each policy on the node says why, instead of the node looking enforced while
  // every send is refused.
  const std::string fence_error = FenceTooBig(r, bytes.size());
  if (!fence_error.empty() && n.fence_error.empty()) {
    spdlog::warn("reconciler: node {}: {}", node, fence_error);
  } else if (fence_error.empty() && !n.fence_error.empty()) {
    spdlog::info("reconciler: node {}: its fence fits again ({} bytes)", node, bytes.size());
  }
  n.fence_error = fence_error;
  for (auto& [policy, on] : r.policies) {
    on.fence_error = fence_error;
    auto& slot = per_policy_[policy][node];
    bool changed = slot.node_matched != on.node_matched || slot.trainers != on.trainers ||
                   slot.neighbours != on.neighbours || slot.lost.size() != on.lost.size() ||
                   slot.fence_error != on.fence_error ||
                   slot.pods_over_container_cap != on.pods_over_container_cap;
    slot = on;
    if (changed) writes_.MarkDirty(policy);
  }
  // Policies no longer considered (deleting/invalid) drop this node from their view.
  for (auto& [policy, per_node] : per_policy_) {
    if (!r.policies.count(policy)) per_node.erase(node);
  }
  if (!fence_error.empty()) return;
  const FenceDigest digest = WireFence::Digest(bytes);
  // Unchanged: nothing to send, unless its agent's new stream asked for it again after the sink
  // dropped the bytes at the last ACK; then the same fence under the same version (the agent
  // acknowledges it without applying it again).
  const bool unchanged = n.sent && n.digest == digest;
  if (unchanged && !n.wanted) return;
  if (!unchanged) {
    n.version = NextVersionLocked();
    n.digest = digest;
    n.sent_policies[n.version] = PoliciesIn(r.fence);
    // Bound the bookkeeping: the sink keeps one slot, older unacked versions never get acked.
    while (n.sent_policies.size() > 8) n.sent_policies.erase(n.sent_policies.begin());
  }
  auto fence = std::make_shared<const WireFence>(node, n.version, std::move(bytes));
  n.desired = fence;
  n.sent = true;
  n.wanted = false;
  to_send->push_back(std::move(fence));
}

NodeResolution Reconciler::ResolveNodeLocked(const NodeInfo& info) const {
  std::vector<const FencePolicy*> active;
  for (const auto& [name, e] : policies_) {
    // Suspended: no policy is active, every node gets a fence without policies (reverted).
    if (e.invalid.empty() && !e.policy.deleting && !SuspendedLocked()) active.push_back(&e.policy);
  }
  return ResolveNode(info, cache_.PodsOn(info.name), active, cache_.namespaces(), options_.rails,
                     options_.fence_limits);
}

bool Reconciler::Step() {
  bool fences = StepFences();
  bool writes = StepApiWrites();
  return fences || writes;
}

std::vector<std::string> Reconciler::TakeDirtyNodesLocked() {
  // Nodes whose SetDesired failed come back once their backoff has passed.
  const auto now = clock_->MonotonicNow();
  for (auto it = fence_retries_.begin(); it != fence_retries_.end();) {
    if (!retry_.Due("fence/" + *it, now)) {
      ++it;
      continue;
    }
    dirty_nodes_.insert(*it);
    it = fence_retries_.erase(it);
  }
  std::vector<std::string> dirty(dirty_nodes_.begin(), dirty_nodes_.end());
  dirty_nodes_.clear();
  return dirty;
}

bool Reconciler::StepFences() {
  bool first_resolution = false;
  std::vector<std::string> dirty;
  {
    std::lock_guard<std::mutex> l(mu_);
    // Before every informer delivered its initial list, a fence would be computed from a
    // partial view (e.g. the nodes but not yet their pods) and withdraw what agents enforce.
    if (!informers_synced_) return false;
    if (!resolved_) {
      MarkAllNodesDirtyLocked();
      first_resolution = true;
    }
    dirty = TakeDirtyNodesLocked();
  }
  // In chunks, the lock released in between: informer events and agent ACKs/reports wait for
  // one chunk at most (not for a whole-cluster recompute after a policy edit), and the first
  // agents get their fence while later nodes are still being resolved.
  size_t sent = 0;
  const size_t chunk = std::max<size_t>(1, options_.fence_chunk);
  for (size_t begin = 0; begin < dirty.size(); begin += chunk) {
    const size_t end = std::min(dirty.size(), begin + chunk);
    std::vector<NodeFencePtr> to_send;
    {
      std::lock_guard<std::mutex> l(mu_);
      for (size_t i = begin; i < end; ++i) RecomputeNodeLocked(dirty[i], &to_send);
      stats_.fences_sent += to_send.size();
    }
    SendFences(to_send);
    sent += to_send.size();
  }
  if (first_resolution) {
    {
      std::lock_guard<std::mutex> l(mu_);
      resolved_ = true;
    }
    {
      std::lock_guard<std::mutex> l(admission_mu_);
      nodes_known_ = true;
    }
    spdlog::info("reconciler: initial lists delivered and every node resolved; {} fences out",
                 sent);
    sink_->OnNodesKnown();
    writes_.MarkAllDirty();  // statuses and finalizers may be judged now
  }
  return sent > 0 || first_resolution;
}

void Reconciler::SendFences(const std::vector<NodeFencePtr>& to_send) {
  std::vector<std::pair<std::string, Status>> results;
  for (const auto& f : to_send) results.emplace_back(f->node_name(), sink_->SetDesired(f));
  if (results.empty()) return;
  std::lock_guard<std::mutex> l(mu_);
  const auto now = clock_->MonotonicNow();
  for (const auto& [node, st] : results) {
    if (st.ok()) {
      retry_.Forget("fence/" + node);
      continue;
    }
    // Not handed over: send a fresh version of this node's fence once the backoff passed.
    const auto delay = retry_.Failed("fence/" + node, now);
    if (auto it = nodes_.find(node); it != nodes_.end()) it->second.sent = false;
    fence_retries_.insert(node);
    spdlog::warn("SetDesired({}): {} (retry in {} ms)", node, st.ToString(), delay.count());
  }
}

void Reconciler::MarkInformersSynced() {
  {
    std::lock_guard<std::mutex> l(mu_);
    informers_synced_ = true;
  }
  WakeFences();
}

bool Reconciler::Synced() const {
  std::lock_guard<std::mutex> l(mu_);
  return resolved_;
}

bool Reconciler::Resolved() const { return Synced(); }

bool Reconciler::NodeAdmissible(const std::string& node) const {
  std::lock_guard<std::mutex> l(admission_mu_);
  return !nodes_known_ || admissible_nodes_.count(node) > 0;
}

void Reconciler::NodesHolding(const std::string& policy, std::vector<std::string>* waiting,
                              std::vector<std::string>* unreachable) const {
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& [node, n] : nodes_) {
    bool holds = n.acked_policies.count(policy) > 0;
    // A connected agent that has not yet acknowledged anything from this process (a restart, a
    // failover) may still hold the policy from the last leader.
    if (!n.ack_known && n.agent_connected) holds = true;
    for (const auto& [v, ps] : n.sent_policies)
      if (ps.count(policy)) holds = true;
    if (!holds) continue;
    (n.agent_connected ? waiting : unreachable)->push_back(node);
  }
}

std::optional<StatusJob> Reconciler::StatusJobOf(const std::string& name) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = policies_.find(name);
  if (it == policies_.end()) return std::nullopt;
  StatusJob job;
  job.policy = it->second.policy;
  job.suspended = SuspendedLocked();
  job.suspend_unrecognised = suspend_unrecognised_;
  job.held = job.suspended ? NodesAckedHoldingLocked(name) : 0;
  job.in.invalid = it->second.invalid;
  if (auto p = per_policy_.find(name); p != per_policy_.end()) job.in.per_node = p->second;
  for (const auto& [node, on] : job.in.per_node) {
    if (!on.node_matched) continue;
    auto n = nodes_.find(node);
    if (n == nodes_.end()) continue;
    auto t = n->second.tallies.find(name);
    if (t != n->second.tallies.end()) job.tallies.emplace(node, t->second);
  }
  return job;
}

bool Reconciler::StepApiWrites() { return writes_.Step(); }

std::chrono::nanoseconds Reconciler::NextFenceWait() const {
  const auto now = clock_->MonotonicNow();
  auto next = now + options_.idle_wait;
  std::lock_guard<std::mutex> l(mu_);
  // Nothing is resolved before every informer delivered its list (MarkInformersSynced wakes
  // the loop): the initial list's pods only mark nodes dirty meanwhile.
  if (!informers_synced_) return options_.idle_wait;
  if (!dirty_nodes_.empty()) return std::chrono::nanoseconds::zero();
  for (const auto& node : fence_retries_) {
    if (auto due = retry_.DueAt("fence/" + node)) next = std::min(next, *due);
  }
  return std::max<std::chrono::nanoseconds>(next - now, std::chrono::nanoseconds::zero());
}

void Reconciler::Run(std::stop_token stop) {
  // API writes (status, finalizers, Events) take round trips to the API server; they run on
  // their own thread so a slow write never delays the next NodeFence.
  std::jthread writes([this, stop](std::stop_token) { writes_.Run(stop); });
  // Every input is type-checked where it is read; an exception that still escapes a pass is
  // logged and the loop goes on.
  fence_wakeup_.Loop(
      stop, [this] { StepFences(); }, [this] { return NextFenceWait(); },
      [](const std::exception& e) {
        spdlog::error("reconciler: fence pass failed: {}", e.what());
      });
}

ReconcilerStats Reconciler::stats() const {
  const PolicyWritesStats w = writes_.stats();
  std::lock_guard<std::mutex> l(mu_);
  ReconcilerStats s = stats_;
  s.status_writes = w.status_writes;
  s.status_computes = w.status_computes;
  s.nodes = nodes_.size();
  s.pods = cache_.pod_count();
  s.policies = policies_.size();
  for (const auto& [name, n] : nodes_) s.gpu_pods_not_observed += n.gpu_pods_not_observed;
  return s;
}

void Reconciler::ForEachPodOn(const std::string& node,
                              const std::function<void(const PodInfo&)>& fn) const {
  std::lock_guard<std::mutex> l(mu_);
  for (const PodInfo* p : cache_.PodsOn(node)) fn(*p);
}

std::optional<feedguard::v1::NodeFence> Reconciler::DesiredFence(const std::string& node) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = nodes_.find(node);
  if (it == nodes_.end() || !it->second.sent) return std::nullopt;
  if (auto held = it->second.desired.lock()) return held->Parse();
  const NodeInfo* info = cache_.Node(node);
  if (info == nullptr) return std::nullopt;
  feedguard::v1::NodeFence fence = ResolveNodeLocked(*info).fence;
  fence.set_version(it->second.version);
  return fence;
}

}  // namespace feedguard::controller
