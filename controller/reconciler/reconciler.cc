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

constexpr char kSuspendedWhy[] =
    "fencing suspended by the off switch (annotation feedguard.io/suspend=true on the agent "
    "namespace, or --suspend): every fence withdrawn";

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

// The message of condition `type` in a status ("" if none).
std::string StatusMessage(const nlohmann::json& st, const std::string& type) {
  if (!st.is_object() || !st.contains("conditions") || !st["conditions"].is_array()) return "";
  for (const auto& c : st["conditions"]) {
    if (c.is_object() && c.value("type", nlohmann::json()) == type) {
      auto m = c.find("message");
      return m != c.end() && m->is_string() ? m->get<std::string>() : "";
    }
  }
  return "";
}

// A status computed as usual, turned into the off switch's: Ready=False (reason Suspended) and a
// Suspended=True condition saying how many nodes still hold the policy's fence.
void MarkSuspended(nlohmann::json& st, const nlohmann::json& prev, size_t held, int64_t generation,
                   std::chrono::system_clock::time_point now, const std::string& unrecognised) {
  std::string msg =
      std::string(kSuspendedWhy) +
      (held == 0 ? "; every node reverted"
                 : "; " + std::to_string(held) + " nodes still hold this policy's fence");
  if (!unrecognised.empty()) {
    msg += " (the annotation's value \"" + SafeText(unrecognised, 64) +
           "\" is no spelling of true or false and is taken as true: set it to true, or remove "
           "it to fence again)";
  }
  const std::string ts = Rfc3339(now);
  auto since = [&](const std::string& type, const std::string& status) {
    if (prev.is_object() && prev.contains("conditions") && prev["conditions"].is_array()) {
      for (const auto& c : prev["conditions"]) {
        if (c.is_object() && c.value("type", nlohmann::json()) == type &&
            c.value("status", nlohmann::json()) == status) {
          auto t = c.find("lastTransitionTime");
          if (t != c.end() && t->is_string()) return t->get<std::string>();
        }
      }
    }
    return ts;
  };
  if (!st.contains("conditions") || !st["conditions"].is_array()) {
    st["conditions"] = nlohmann::json::array();
  }
  for (auto& c : st["conditions"]) {
    if (c.is_object() && c.value("type", nlohmann::json()) == "Ready") {
      c["status"] = "False";
      c["reason"] = "Suspended";
      c["message"] = msg;
      c["lastTransitionTime"] = since("Ready", "False");
    }
  }
  st["conditions"].push_back({{"type", "Suspended"},
                              {"status", "True"},
                              {"reason", "OffSwitch"},
                              {"message", msg},
                              {"lastTransitionTime", since("Suspended", "True")},
                              {"observedGeneration", generation}});
}

// The Reverting condition's message of a deleting policy whose finalizer waits for nodes.
std::string RevertingMessage(const std::string& policy, const std::vector<std::string>& waiting,
                             const std::vector<std::string>& unreachable) {
  auto list = [](const std::vector<std::string>& nodes) {
    std::string out;
    for (size_t i = 0; i < nodes.size() && i < 10; ++i) out += (i ? ", " : "") + nodes[i];
    if (nodes.size() > 10) out += ", and " + std::to_string(nodes.size() - 10) + " more";
    return out;
  };
  std::string msg =
      "deleting: the finalizer waits until every node has restored the original "
      "values; " +
      std::to_string(waiting.size() + unreachable.size()) + " node(s) still hold it";
  if (!waiting.empty()) msg += "; reverting now: " + list(waiting);
  if (!unreachable.empty()) {
    msg += "; without a connected agent (each reverts once its agent reconnects): " +
           list(unreachable) + ". To stop waiting for them: kubectl patch fencepolicy " + policy +
           " --type=json -p '[{\"op\":\"remove\",\"path\":\"/metadata/finalizers\"}]' (their "
           "fence then stays until their agent is back and receives a fence without the policy)";
  }
  return msg;
}

// `st` with a Reverting=True condition (reason WaitingForNodes) carrying `msg`.
void MarkReverting(nlohmann::json& st, const std::string& msg, int64_t generation,
                   std::chrono::system_clock::time_point now) {
  if (!st.contains("conditions") || !st["conditions"].is_array()) {
    st["conditions"] = nlohmann::json::array();
  }
  std::string since = Rfc3339(now);
  auto& conds = st["conditions"];
  for (auto it = conds.begin(); it != conds.end();) {
    if (it->is_object() && it->value("type", nlohmann::json()) == "Reverting") {
      if (it->value("status", nlohmann::json()) == "True") {
        auto t = it->find("lastTransitionTime");
        if (t != it->end() && t->is_string()) since = t->get<std::string>();
      }
      it = conds.erase(it);
    } else {
      ++it;
    }
  }
  conds.push_back({{"type", "Reverting"},
                   {"status", "True"},
                   {"reason", "WaitingForNodes"},
                   {"message", SafeText(msg, 4096)},
                   {"lastTransitionTime", since},
                   {"observedGeneration", generation}});
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
      writer_(std::move(writer)),
      options_(std::move(options)),
      clock_(options_.clock ? options_.clock : std::make_shared<RealTimeSource>()),
      retry_(options_.retry, /*seed=*/1) {
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
    for (auto& [name, e] : policies_) e.status_dirty = true;  // the condition names the value
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
  for (auto& [name, e] : policies_) e.status_dirty = true;
}

size_t Reconciler::NodesHoldingLocked(const std::string& policy) const {
  size_t held = 0;
  for (const auto& [node, n] : nodes_) {
    if (!n.exists) continue;
    held += n.acked_policies.count(policy);  // its agent's last acknowledged fence holds it
  }
  return held;
}

void Reconciler::MarkAllNodesDirtyLocked() {
  for (const auto& [name, n] : nodes_) dirty_nodes_.insert(name);
}

void Reconciler::MarkPolicyDirtyLocked(const std::string& name) {
  if (auto it = policies_.find(name); it != policies_.end()) it->second.status_dirty = true;
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
  if (first && obj.contains("status") && obj["status"].is_object()) e.last_status = obj["status"];
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
  e.status_dirty = true;
  if (!e.policy.deleting && !e.policy.HasFinalizer()) e.finalizer_pending = true;
  if (affects_nodes) MarkAllNodesDirtyLocked();
}

void Reconciler::DeletePolicy(const nlohmann::json& obj) {
  std::lock_guard<std::mutex> l(mu_);
  policies_.erase(NameOf(obj));
  per_policy_.erase(NameOf(obj));
  retry_.Forget("finalizer-add/" + NameOf(obj));
  retry_.Forget("status/" + NameOf(obj));
  retry_.Forget("finalizer-remove/" + NameOf(obj));
  MarkAllNodesDirtyLocked();
}

void Reconciler::UpsertPod(const nlohmann::json& obj) {
  PodInfo pod = PodFromJson(obj, options_.gpu_resource_names);
  if (pod.uid.empty()) {
    spdlog::warn("reconciler: skipping pod {}/{} without metadata.uid", pod.ns.get(), pod.name);
    return;
  }
  std::lock_guard<std::mutex> l(mu_);
  pod.labels = label_sets_.Intern(std::move(pod.labels));
  pod.ns = names_.Intern(std::move(pod.ns));
  pod.node_name = names_.Intern(std::move(pod.node_name));
  pod.priority_class = names_.Intern(std::move(pod.priority_class));
  pod.phase = names_.Intern(std::move(pod.phase));
  for (auto& c : pod.containers) {
    c.name = names_.Intern(std::move(c.name));
    c.id.InternPrefix(names_);
  }
  if (PodInfo* cur = pods_.Find(pod.ns.get(), pod.name)) {
    // Most pod updates (conditions, restarts, probes) change nothing a fence reads.
    if (*cur == pod) return;
    if (cur->node_name == pod.node_name) {
      // In place: node_pods_ keeps pointing at it (found by this key, so Replace holds).
      if (pods_.Replace(*cur, std::move(pod))) dirty_nodes_.insert(cur->node_name);
      return;
    }
    UnlinkPodLocked(*cur);
    pods_.Erase(*cur);
  }
  if (pod.node_name.empty()) return;  // not scheduled yet: nothing to fence
  const PodInfo& p = pods_.Insert(std::move(pod));
  node_pods_[p.node_name].push_back(&p);
  dirty_nodes_.insert(p.node_name);
}

void Reconciler::UnlinkPodLocked(const PodInfo& pod) {
  auto n = node_pods_.find(pod.node_name);
  if (n != node_pods_.end()) {
    std::erase(n->second, &pod);
    if (n->second.empty()) node_pods_.erase(n);
  }
  dirty_nodes_.insert(pod.node_name);
}

void Reconciler::DeletePod(const nlohmann::json& obj) {
  const std::string ns = kube::NamespaceOf(obj), name = kube::NameOf(obj);
  std::lock_guard<std::mutex> l(mu_);
  PodInfo* pod = pods_.Find(ns, name);
  if (pod == nullptr) return;
  UnlinkPodLocked(*pod);
  pods_.Erase(*pod);
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
  NodeEntry& n = nodes_[info.name];
  n.exists = true;
  if (n.info.labels != info.labels || n.info.name.empty()) dirty_nodes_.insert(info.name);
  n.info = std::move(info);
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
    nodes_.erase(name);
    dirty_nodes_.erase(name);
    fence_retries_.erase(name);
    retry_.Forget("fence/" + name);
    for (auto& [p, per_node] : per_policy_) per_node.erase(name);
    for (auto& [p, e] : policies_) e.status_dirty = true;
  }
  sink_->Forget(name);  // outside mu_: the distributor calls NodeAdmissible under its own lock
}

void Reconciler::UpsertNamespace(const nlohmann::json& obj) {
  NamespaceInfo ns = NamespaceFromJson(obj);
  if (ns.name.empty()) return;
  std::lock_guard<std::mutex> l(mu_);
  if (ns.name == options_.rails.agent_namespace) SetSuspendAnnotationLocked(SuspendAnnotation(obj));
  auto& labels = namespaces_[ns.name];
  if (labels != ns.labels) {
    labels = ns.labels;
    // Only namespace selectors care; they are rare enough to recompute everything.
    MarkAllNodesDirtyLocked();
  }
}

void Reconciler::DeleteNamespace(const nlohmann::json& obj) {
  std::lock_guard<std::mutex> l(mu_);
  if (NameOf(obj) == options_.rails.agent_namespace) SetSuspendAnnotationLocked(std::nullopt);
  namespaces_.erase(NameOf(obj));
}

// ---- agent side ----

void Reconciler::MarkNodePoliciesDirtyLocked(const std::string& node) {
  // A policy's status reads an agent only where the policy's node selector matched the node
  // (per_policy_); an agent's ACK, NACK or (dis)connection changes no other policy's status.
  for (auto& [policy, per_node] : per_policy_) {
    if (per_node.count(node)) MarkPolicyDirtyLocked(policy);
  }
}

void Reconciler::OnConnected(const std::string& node, const feedguard::v1::AgentHello&) {
  std::lock_guard<std::mutex> l(mu_);
  if (auto it = nodes_.find(node); it != nodes_.end()) it->second.agent_connected = true;
  MarkNodePoliciesDirtyLocked(node);
  disconnected_.erase(node);
}

void Reconciler::OnDisconnected(const std::string& node) {
  std::lock_guard<std::mutex> l(mu_);
  if (auto it = nodes_.find(node); it != nodes_.end()) it->second.agent_connected = false;
  MarkNodePoliciesDirtyLocked(node);
  disconnected_.insert(node);
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
        if (!s->second.count(p)) MarkPolicyDirtyLocked(p);
      }
      for (const auto& p : s->second) {
        if (!n.acked_policies.count(p)) MarkPolicyDirtyLocked(p);
      }
      n.acked_policies = s->second;
      n.ack_known = true;
      n.sent_policies.erase(n.sent_policies.begin(), std::next(s));
    }
  }
  MarkNodePoliciesDirtyLocked(node);
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
    for (const auto& [policy, t] : tallies) MarkPolicyDirtyLocked(policy);
    return;
  }
  auto& prev = it->second.tallies;
  for (const auto& [policy, t] : tallies) {
    auto p = prev.find(policy);
    if (p == prev.end() || !p->second.SameForStatus(t)) MarkPolicyDirtyLocked(policy);
  }
  for (const auto& [policy, t] : prev) {
    if (!tallies.count(policy)) MarkPolicyDirtyLocked(policy);
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

void Reconciler::RecomputeNodeLocked(const std::string& node, std::vector<NodeFencePtr>* to_send) {
  NodeEntry& n = nodes_[node];
  static const std::vector<const PodInfo*> kNoPods;
  auto np = node_pods_.find(node);
  const std::vector<const PodInfo*>& pods = np == node_pods_.end() ? kNoPods : np->second;
  std::vector<const FencePolicy*> active;
  for (const auto& [name, e] : policies_) {
    // Suspended: no policy is active, every node gets a fence without policies (reverted).
    if (e.invalid.empty() && !e.policy.deleting && !SuspendedLocked()) active.push_back(&e.policy);
  }
  NodeResolution r =
      ResolveNode(n.info, pods, active, namespaces_, options_.rails, options_.fence_limits);
  stats_.node_recomputes++;
  // Held serialized (wire_fence.h); an unchanged resolution has the same bytes.
  std::string bytes = WireFence::Serialize(r.fence);
  // Bigger than the agents read (wire_limits.h): not sent. The agent keeps its last fence (fail
  // static) and each policy on the node says why, instead of the node looking enforced while
  // every send is refused.
  std::string fence_error;
  if (bytes.size() > options_.max_fence_bytes) {
    size_t containers = 0;
    for (const auto& t : r.fence.trainers()) containers += t.pod().containers_size();
    for (const auto& nb : r.fence.neighbours()) containers += nb.pod().containers_size();
    fence_error =
        "the node's fence would be " + std::to_string(bytes.size()) + " bytes, over the " +
        std::to_string(options_.max_fence_bytes) + " agents accept (" +
        std::to_string(r.fence.trainers_size() + r.fence.neighbours_size()) + " pods, " +
        std::to_string(containers) + " container ids): not sent, the agent keeps its last fence";
    if (n.fence_error.empty()) spdlog::warn("reconciler: node {}: {}", node, fence_error);
  } else if (!n.fence_error.empty()) {
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
    if (changed) MarkPolicyDirtyLocked(policy);
  }
  // Policies no longer considered (deleting/invalid) drop this node from their view.
  for (auto& [policy, per_node] : per_policy_) {
    if (!r.policies.count(policy)) per_node.erase(node);
  }
  if (!fence_error.empty()) return;
  if (n.sent && n.desired && n.desired->unversioned() == bytes) return;
  const uint64_t version = NextVersionLocked();
  n.sent_policies[version] = PoliciesIn(r.fence);
  // Bound the bookkeeping: the sink keeps one slot, older unacked versions never get acked.
  while (n.sent_policies.size() > 8) n.sent_policies.erase(n.sent_policies.begin());
  n.desired = std::make_shared<const WireFence>(node, version, std::move(bytes));
  n.sent = true;
  to_send->push_back(n.desired);
}

bool Reconciler::Step() {
  bool fences = StepFences();
  bool writes = StepApiWrites();
  return fences || writes;
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
    dirty.assign(dirty_nodes_.begin(), dirty_nodes_.end());
    dirty_nodes_.clear();
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
      for (size_t i = begin; i < end; ++i) {
        auto it = nodes_.find(dirty[i]);
        if (it != nodes_.end() && it->second.exists) RecomputeNodeLocked(dirty[i], &to_send);
      }
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
  std::lock_guard<std::mutex> l(mu_);
  informers_synced_ = true;
}

bool Reconciler::Synced() const {
  std::lock_guard<std::mutex> l(mu_);
  return resolved_;
}

bool Reconciler::NodeAdmissible(const std::string& node) const {
  std::lock_guard<std::mutex> l(admission_mu_);
  return !nodes_known_ || admissible_nodes_.count(node) > 0;
}

namespace {

// The status of condition `type` in a status ("" if none). `st` may be whatever the API server
// held (a loose CRD): every step is type-checked.
std::string ConditionStatus(const nlohmann::json& st, const std::string& type) {
  if (!st.is_object()) return "";
  auto cs = st.find("conditions");
  if (cs == st.end() || !cs->is_array()) return "";
  for (const auto& c : *cs) {
    if (!c.is_object()) continue;
    auto t = c.find("type"), v = c.find("status");
    if (t == c.end() || !t->is_string() || *t != type) continue;
    return v != c.end() && v->is_string() ? v->get<std::string>() : "";
  }
  return "";
}

}  // namespace

std::vector<PolicyEvent> EventsFor(const nlohmann::json& prev, const nlohmann::json& next,
                                   const std::vector<FieldError>& invalid, size_t held) {
  auto became = [&](const char* type) {
    return ConditionStatus(next, type) == "True" && ConditionStatus(prev, type) != "True";
  };
  std::vector<PolicyEvent> events;
  if (became("Invalid")) events.push_back({"Warning", "InvalidSpec", JoinFieldErrors(invalid)});
  if (became("Ready")) {
    const auto& nodes = next.contains("nodes") ? next["nodes"] : nlohmann::json();
    const int enforced = nodes.is_object() ? nodes.value("enforced", 0) : 0;
    events.push_back({"Normal", "Enforced", std::to_string(enforced) + " nodes enforced"});
  }
  if (became("Degraded")) {
    events.push_back({"Warning", "Degraded", "some nodes failed or are stale"});
  }
  if (became("Conflicting")) {
    events.push_back({"Warning", "Conflicting", "pods claimed by a higher-ranked policy"});
  }
  if (became("Suspended")) events.push_back({"Warning", "Suspended", kSuspendedWhy});
  const bool was_suspended = ConditionStatus(prev, "Suspended") == "True";
  const bool is_suspended = ConditionStatus(next, "Suspended") == "True";
  if (is_suspended && was_suspended && held == 0 &&
      StatusMessage(prev, "Suspended") != StatusMessage(next, "Suspended")) {
    events.push_back({"Normal", "Withdrawn", "every node reverted this policy's fences"});
  }
  if (!is_suspended && was_suspended) {
    events.push_back({"Normal", "Resumed", "off switch cleared: fences are applied again"});
  }
  return events;
}

std::vector<std::string> Reconciler::NodesTurnedStale() const {
  // A disconnected agent turns stale only when its grace period ends, with no event of its own:
  // look at the (few) disconnected nodes.
  std::vector<std::string> waiting;
  {
    std::lock_guard<std::mutex> l(mu_);
    waiting.assign(disconnected_.begin(), disconnected_.end());
  }
  std::vector<std::string> turned;
  for (const auto& node : waiting) {
    auto agent = sink_->GetAgent(node);
    if (!agent || agent->stale || agent->connected) turned.push_back(node);
  }
  return turned;
}

bool Reconciler::StillFencedLocked(const std::string& policy, std::vector<std::string>* waiting,
                                   std::vector<std::string>* unreachable) const {
  bool still_fenced = false;
  for (const auto& [node, n] : nodes_) {
    if (!n.exists) continue;
    bool holds = n.acked_policies.count(policy) > 0;
    // A connected agent that has not yet acknowledged anything from this process (a restart, a
    // failover) may still hold the policy from the last leader.
    if (!n.ack_known && n.agent_connected) holds = true;
    for (const auto& [v, ps] : n.sent_policies)
      if (ps.count(policy)) holds = true;
    if (!holds) continue;
    still_fenced = true;
    (n.agent_connected ? waiting : unreachable)->push_back(node);
  }
  return still_fenced;
}

std::optional<Reconciler::ApiWritesDue> Reconciler::ApiWritesDueNow() {
  const std::vector<std::string> turned = NodesTurnedStale();
  const auto now = clock_->MonotonicNow();
  ApiWritesDue due;
  std::lock_guard<std::mutex> l(mu_);
  // Status and finalizers judged from a partial view would be wrong (a deleting policy's
  // finalizer removed before its nodes are even known): wait for the first full resolution.
  if (!resolved_) return std::nullopt;
  for (const auto& node : turned) {
    if (disconnected_.erase(node) == 0) continue;  // reconnected meanwhile: already dirty
    for (auto& [name, e] : policies_) e.status_dirty = true;
  }
  for (auto& [name, e] : policies_) {
    if (e.finalizer_pending && retry_.Due("finalizer-add/" + name, now)) {
      due.finalizers_to_add.push_back(name);
    }
    if (e.policy.deleting && e.policy.HasFinalizer() &&
        retry_.Due("finalizer-remove/" + name, now)) {
      std::vector<std::string> waiting, unreachable;  // nodes held up; those without agent
      if (!StillFencedLocked(name, &waiting, &unreachable)) {
        due.finalizers_to_remove.push_back(name);
      } else if (std::string msg = RevertingMessage(name, waiting, unreachable);
                 msg != e.reverting_written) {
        due.reverting.emplace_back(name, std::move(msg));
      }
    }
    if (e.status_dirty && now - e.last_write >= options_.status_interval &&
        retry_.Due("status/" + name, now)) {
      due.status.push_back(name);
    }
  }
  return due;
}

void Reconciler::WriteReverting(const std::string& name, const std::string& msg) {
  // A deleting policy whose finalizer waits says for which nodes, and how to stop waiting for
  // one whose agent is gone (issue 28, item 8: `kubectl delete` hung without a word).
  nlohmann::json st;
  int64_t generation = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = policies_.find(name);
    if (it == policies_.end()) return;
    st = it->second.last_status.is_object() ? it->second.last_status : nlohmann::json::object();
    generation = it->second.policy.generation;
  }
  MarkReverting(st, msg, generation, clock_->WallNow());
  Status ws = writer_->WriteStatus(name, st);
  std::lock_guard<std::mutex> l(mu_);
  auto it = policies_.find(name);
  if (it == policies_.end()) return;
  if (ws.ok()) {
    it->second.last_status = st;
    it->second.reverting_written = msg;
  } else {
    retry_.Failed("finalizer-remove/" + name, clock_->MonotonicNow());  // paces the retry
  }
}

void Reconciler::AddFinalizer(const std::string& name) {
  Status st = writer_->AddFinalizer(name);
  std::lock_guard<std::mutex> l(mu_);
  if (!st.ok()) {
    const auto delay = retry_.Failed("finalizer-add/" + name, clock_->MonotonicNow());
    spdlog::warn("adding finalizer to {}: {} (retry in {} ms)", name, st.ToString(), delay.count());
    return;
  }
  retry_.Forget("finalizer-add/" + name);
  if (auto it = policies_.find(name); it != policies_.end()) {
    it->second.finalizer_pending = false;
  }
}

void Reconciler::RemoveFinalizer(const std::string& name) {
  Status st = writer_->RemoveFinalizer(name);
  if (st.ok()) {
    writer_->Event(name, "Normal", "Reverted", "every node reverted this policy's fences");
    std::lock_guard<std::mutex> l(mu_);
    retry_.Forget("finalizer-remove/" + name);
    if (auto it = policies_.find(name); it != policies_.end()) {
      auto& f = it->second.policy.finalizers;
      f.erase(std::remove(f.begin(), f.end(), kFencePolicyFinalizer), f.end());
    }
    return;
  }
  std::lock_guard<std::mutex> l(mu_);
  const auto delay = retry_.Failed("finalizer-remove/" + name, clock_->MonotonicNow());
  if (st.code() != StatusCode::kNotFound) {  // NotFound: gone already, its DELETE event is due
    spdlog::warn("removing finalizer from {}: {} (retry in {} ms)", name, st.ToString(),
                 delay.count());
  }
}

std::optional<Reconciler::StatusJob> Reconciler::StatusJobLocked(const std::string& name) {
  auto it = policies_.find(name);
  if (it == policies_.end()) return std::nullopt;
  StatusJob job;
  job.policy = it->second.policy;
  job.suspended = SuspendedLocked();
  job.suspend_unrecognised = suspend_unrecognised_;
  job.held = job.suspended ? NodesHoldingLocked(name) : 0;
  job.in.invalid = it->second.invalid;
  job.in.per_node = per_policy_[name];
  job.in.previous_status = it->second.last_status;
  it->second.status_dirty = false;
  for (const auto& [node, on] : job.in.per_node) {
    if (!on.node_matched) continue;
    auto n = nodes_.find(node);
    if (n == nodes_.end()) continue;
    auto t = n->second.tallies.find(name);
    if (t != n->second.tallies.end()) job.tallies.emplace(node, t->second);
  }
  return job;
}

void Reconciler::WriteStatus(const std::string& name) {
  std::optional<StatusJob> job;
  {
    std::lock_guard<std::mutex> l(mu_);
    job = StatusJobLocked(name);
  }
  if (!job || job->policy.deleting) return;  // nothing to report on an object about to go
  PolicyStatusInput& in = job->in;
  in.policy = &job->policy;
  in.now = clock_->WallNow();
  for (const auto& [node, on] : in.per_node) {
    if (!on.node_matched) continue;
    auto agent = sink_->GetAgent(node);
    if (!agent) continue;
    AgentOnNode v;
    static_cast<AgentView&>(v) = std::move(*agent);
    auto t = job->tallies.find(node);
    v.tally = t == job->tallies.end() ? nullptr : &t->second;
    in.agents[node] = v;
  }
  nlohmann::json st = ComputePolicyStatus(in);
  if (job->suspended) {
    MarkSuspended(st, in.previous_status, job->held, job->policy.generation, in.now,
                  job->suspend_unrecognised);
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    stats_.status_computes++;
  }
  if (st == in.previous_status) return;
  Status ws = writer_->WriteStatus(name, st);
  // Events take API round trips: decided under the lock, written after it.
  std::vector<PolicyEvent> events;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = policies_.find(name);
    if (it == policies_.end()) return;
    it->second.last_write = clock_->MonotonicNow();
    if (ws.ok()) {
      stats_.status_writes++;
      retry_.Forget("status/" + name);
      events = EventsFor(it->second.last_status, st, in.invalid, job->held);
      it->second.last_status = std::move(st);
    } else {
      // Retried with this policy's own backoff (status_interval at the least).
      it->second.status_dirty = true;
      const auto delay = retry_.Failed("status/" + name, clock_->MonotonicNow());
      spdlog::warn("writing status of {}: {} (retry in {} ms)", name, ws.ToString(),
                   std::max<int64_t>(delay.count(), options_.status_interval.count()));
    }
  }
  for (const auto& e : events) writer_->Event(name, e.type, e.reason, e.message);
}

bool Reconciler::StepApiWrites() {
  std::optional<ApiWritesDue> due = ApiWritesDueNow();
  if (!due) return false;
  for (const auto& [name, msg] : due->reverting) WriteReverting(name, msg);
  for (const auto& name : due->finalizers_to_add) AddFinalizer(name);
  for (const auto& name : due->finalizers_to_remove) RemoveFinalizer(name);
  for (const auto& name : due->status) WriteStatus(name);
  return !due->status.empty() || !due->finalizers_to_add.empty() ||
         !due->finalizers_to_remove.empty() || !due->reverting.empty();
}

void Reconciler::Run(std::stop_token stop) {
  // Last line of defence: every input is type-checked where it is read, but an exception that
  // still escaped a pass must not end the thread (std::terminate): log it and go on.
  auto guarded = [](const char* what, const std::function<void()>& step) {
    try {
      step();
    } catch (const std::exception& e) {
      spdlog::error("reconciler: {} pass failed: {}", what, e.what());
    }
  };
  // API writes (status, finalizers, Events) take round trips to the API server; they run on
  // their own thread so a slow write never delays the next NodeFence.
  std::thread writes([&] {
    while (!stop.stop_requested()) {
      guarded("status", [&] { StepApiWrites(); });
      SleepFor(options_.tick, stop);
    }
  });
  while (!stop.stop_requested()) {
    guarded("fence", [&] { StepFences(); });
    SleepFor(options_.tick, stop);
  }
  writes.join();
}

ReconcilerStats Reconciler::stats() const {
  std::lock_guard<std::mutex> l(mu_);
  ReconcilerStats s = stats_;
  s.nodes = nodes_.size();
  s.pods = pods_.size();
  s.policies = policies_.size();
  return s;
}

std::optional<feedguard::v1::NodeFence> Reconciler::DesiredFence(const std::string& node) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = nodes_.find(node);
  if (it == nodes_.end() || !it->second.sent || !it->second.desired) return std::nullopt;
  return it->second.desired->Parse();
}

}  // namespace feedguard::controller
