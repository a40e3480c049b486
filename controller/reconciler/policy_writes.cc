#include "controller/reconciler/policy_writes.h"

#include <algorithm>
#include <exception>

#include <spdlog/spdlog.h>

#include "controller/status/conditions.h"

namespace feedguard::controller {
namespace {

std::string AddKey(const std::string& policy) { return "finalizer-add/" + policy; }
std::string RemoveKey(const std::string& policy) { return "finalizer-remove/" + policy; }
std::string StatusKey(const std::string& policy) { return "status/" + policy; }

}  // namespace

PolicyWrites::PolicyWrites(PolicyWriterPtr writer, const PolicyFacts* facts,
                           const FenceSink* agents, TimeSourcePtr clock,
                           PolicyWritesOptions options)
    : writer_(std::move(writer)),
      facts_(facts),
      agents_(agents),
      clock_(std::move(clock)),
      options_(options),
      retry_(options_.retry, /*seed=*/1) {}

void PolicyWrites::Upsert(const FencePolicy& policy, const nlohmann::json* status) {
  {
    std::lock_guard l(mu_);
    Entry& e = policies_[policy.name];
    if (status != nullptr && status->is_object()) e.last_status = *status;
    e.generation = policy.generation;
    e.deleting = policy.deleting;
    e.has_finalizer = policy.HasFinalizer();
    e.status_dirty = true;
    if (!e.deleting && !e.has_finalizer) e.finalizer_pending = true;
  }
  wakeup_.Notify();
}

void PolicyWrites::Erase(const std::string& policy) {
  std::lock_guard l(mu_);
  policies_.erase(policy);
  retry_.Forget(AddKey(policy));
  retry_.Forget(StatusKey(policy));
  retry_.Forget(RemoveKey(policy));
}

void PolicyWrites::MarkDirty(const std::string& policy) {
  {
    std::lock_guard l(mu_);
    auto it = policies_.find(policy);
    if (it == policies_.end() || it->second.status_dirty) return;
    it->second.status_dirty = true;
  }
  wakeup_.Notify();
}

void PolicyWrites::MarkAllDirty() {
  {
    std::lock_guard l(mu_);
    for (auto& [name, e] : policies_) e.status_dirty = true;
  }
  wakeup_.Notify();
}

void PolicyWrites::NodeDisconnected(const std::string& node) {
  {
    std::lock_guard l(mu_);
    disconnected_.insert(node);
  }
  wakeup_.Notify();
}

void PolicyWrites::NodeConnected(const std::string& node) {
  std::lock_guard l(mu_);
  disconnected_.erase(node);
}

void PolicyWrites::CheckTurnedStale() {
  // A disconnected agent turns stale only when its grace period ends, with no event of its own:
  // look at the (few) disconnected nodes.
  std::vector<std::string> waiting;
  {
    std::lock_guard l(mu_);
    waiting.assign(disconnected_.begin(), disconnected_.end());
  }
  std::vector<std::string> turned;
  for (const auto& node : waiting) {
    auto agent = agents_->GetAgent(node);
    if (!agent || agent->stale || agent->connected) turned.push_back(node);
  }
  std::lock_guard l(mu_);
  for (const auto& node : turned) {
    if (disconnected_.erase(node) == 0) continue;  // reconnected meanwhile: already dirty
    for (auto& [name, e] : policies_) e.status_dirty = true;
  }
}

PolicyWrites::Due PolicyWrites::DueNow() {
  const auto now = clock_->MonotonicNow();
  Due due;
  std::lock_guard l(mu_);
  for (auto& [name, e] : policies_) {
    if (e.finalizer_pending && retry_.Due(AddKey(name), now)) due.finalizers_to_add.push_back(name);
    if (e.deleting && e.has_finalizer && retry_.Due(RemoveKey(name), now)) {
      due.deleting.push_back(name);
    }
    if (e.status_dirty && now - e.last_write >= options_.status_interval &&
        retry_.Due(StatusKey(name), now)) {
      due.status.push_back(name);
    }
  }
  return due;
}

bool PolicyWrites::Step() {
  CheckTurnedStale();
  if (!facts_->Resolved()) return false;
  const Due due = DueNow();
  for (const auto& name : due.deleting) FinishDeleting(name);
  for (const auto& name : due.finalizers_to_add) AddFinalizer(name);
  for (const auto& name : due.status) WriteStatus(name);
  return !due.status.empty() || !due.finalizers_to_add.empty() || !due.deleting.empty();
}

void PolicyWrites::FinishDeleting(const std::string& name) {
  std::vector<std::string> waiting, unreachable;  // nodes held up; those without agent
  facts_->NodesHolding(name, &waiting, &unreachable);
  if (waiting.empty() && unreachable.empty()) {
    RemoveFinalizer(name);
    return;
  }
  std::string msg = RevertingMessage(name, waiting, unreachable);
  {
    std::lock_guard l(mu_);
    auto it = policies_.find(name);
    if (it == policies_.end() || it->second.reverting_written == msg) return;
  }
  WriteReverting(name, msg);
}

void PolicyWrites::WriteReverting(const std::string& name, const std::string& msg) {
  // A deleting policy whose finalizer waits says for which nodes, and how to stop waiting for
  // one whose agent is gone (issue 28, item 8: `kubectl delete` hung without a word).
  nlohmann::json st;
  int64_t generation = 0;
  {
    std::lock_guard l(mu_);
    auto it = policies_.find(name);
    if (it == policies_.end()) return;
    st = it->second.last_status.is_object() ? it->second.last_status : nlohmann::json::object();
    generation = it->second.generation;
  }
  MarkReverting(st, msg, generation, clock_->WallNow());
  Status ws = writer_->WriteStatus(name, st);
  std::lock_guard l(mu_);
  auto it = policies_.find(name);
  if (it == policies_.end()) return;
  if (ws.ok()) {
    it->second.last_status = st;
    it->second.reverting_written = msg;
  } else {
    retry_.Failed(RemoveKey(name), clock_->MonotonicNow());  // paces the retry
  }
}

void PolicyWrites::AddFinalizer(const std::string& name) {
  Status st = writer_->AddFinalizer(name);
  std::lock_guard l(mu_);
  if (!st.ok()) {
    const auto delay = retry_.Failed(AddKey(name), clock_->MonotonicNow());
    spdlog::warn("adding finalizer to {}: {} (retry in {} ms)", name, st.ToString(), delay.count());
    return;
  }
  retry_.Forget(AddKey(name));
  if (auto it = policies_.find(name); it != policies_.end()) it->second.finalizer_pending = false;
}

void PolicyWrites::RemoveFinalizer(const std::string& name) {
  Status st = writer_->RemoveFinalizer(name);
  if (st.ok()) {
    writer_->Event(name, "Normal", "Reverted", "every node reverted this policy's fences");
    std::lock_guard l(mu_);
    retry_.Forget(RemoveKey(name));
    if (auto it = policies_.find(name); it != policies_.end()) it->second.has_finalizer = false;
    return;
  }
  std::lock_guard l(mu_);
  const auto delay = retry_.Failed(RemoveKey(name), clock_->MonotonicNow());
  if (st.code() != StatusCode::kNotFound) {  // NotFound: gone already, its DELETE event is due
    spdlog::warn("removing finalizer from {}: {} (retry in {} ms)", name, st.ToString(),
                 delay.count());
  }
}

void PolicyWrites::WriteStatus(const std::string& name) {
  nlohmann::json previous;
  {
    std::lock_guard l(mu_);
    auto it = policies_.find(name);
    if (it == policies_.end()) return;
    it->second.status_dirty = false;
    previous = it->second.last_status;
  }
  std::optional<StatusJob> job = facts_->StatusJobOf(name);
  if (!job || job->policy.deleting) return;  // nothing to report on an object about to go
  PolicyStatusInput& in = job->in;
  in.policy = &job->policy;
  in.now = clock_->WallNow();
  in.previous_status = std::move(previous);
  for (const auto& [node, on] : in.per_node) {
    if (!on.node_matched) continue;
    auto agent = agents_->GetAgent(node);
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
    std::lock_guard l(mu_);
    stats_.status_computes++;
  }
  if (st == in.previous_status) return;
  Status ws = writer_->WriteStatus(name, st);
  // Events take API round trips: decided under the lock, written after it.
  std::vector<PolicyEvent> events;
  {
    std::lock_guard l(mu_);
    auto it = policies_.find(name);
    if (it == policies_.end()) return;
    it->second.last_write = clock_->MonotonicNow();
    if (ws.ok()) {
      stats_.status_writes++;
      retry_.Forget(StatusKey(name));
      events = EventsFor(it->second.last_status, st, in.invalid, job->held);
      it->second.last_status = std::move(st);
    } else {
      // Retried with this policy's own backoff (status_interval at the least).
      it->second.status_dirty = true;
      const auto delay = retry_.Failed(StatusKey(name), clock_->MonotonicNow());
      spdlog::warn("writing status of {}: {} (retry in {} ms)", name, ws.ToString(),
                   std::max<int64_t>(delay.count(), options_.status_interval.count()));
    }
  }
  for (const auto& e : events) writer_->Event(name, e.type, e.reason, e.message);
}

std::chrono::nanoseconds PolicyWrites::NextWait() {
  using Clock = std::chrono::steady_clock;
  // Nothing is written before the first full resolution; the reconciler marks every status
  // dirty then, which wakes this thread.
  if (!facts_->Resolved()) return options_.idle_wait;
  const Clock::time_point now = clock_->MonotonicNow();
  Clock::time_point next = now + options_.idle_wait;
  auto due = [&](const std::string& key, Clock::time_point at) {
    if (auto r = retry_.DueAt(key)) at = std::max(at, *r);
    next = std::min(next, at);
  };
  std::lock_guard l(mu_);
  // A disconnected agent turns stale without an event: looked at once per status interval.
  if (!disconnected_.empty()) next = std::min(next, now + options_.status_interval);
  for (const auto& [name, e] : policies_) {
    if (e.finalizer_pending) due(AddKey(name), now);
    // A deleting policy waits for its nodes' ACKs (each wakes this thread through MarkDirty);
    // its Reverting message is looked at again once per status interval as well.
    if (e.deleting && e.has_finalizer) due(RemoveKey(name), now + options_.status_interval);
    if (e.status_dirty) due(StatusKey(name), e.last_write + options_.status_interval);
  }
  return std::max(next - now, Clock::duration::zero());
}

void PolicyWrites::Run(std::stop_token stop) {
  wakeup_.Loop(
      stop, [this] { Step(); }, [this] { return NextWait(); },
      [](const std::exception& e) { spdlog::error("policy writes: pass failed: {}", e.what()); });
}

PolicyWritesStats PolicyWrites::stats() const {
  std::lock_guard l(mu_);
  return stats_;
}

}  // namespace feedguard::controller
