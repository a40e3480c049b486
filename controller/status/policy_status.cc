#include "controller/status/policy_status.h"

#include "feedguard/common/reasons.h"

#include "common/json_member.h"
#include "controller/sanitize/sanitize.h"
#include "controller/status/conditions.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <map>
#include <tuple>

namespace feedguard::controller {
namespace {

namespace v1 = feedguard::v1;

// Bound well inside the CRD's (failures[].message ≤ 1024).
constexpr size_t kMaxFailureMessage = 512;

struct Failure {
  std::string node;
  std::string reason;
  std::string message;
};

// A previous status comes from the API server, maybe under a looser CRD: every read is typed.
const nlohmann::json& ArrayMember(const nlohmann::json& j, const char* key) {
  static const nlohmann::json kEmpty = nlohmann::json::array();
  const nlohmann::json& v = JsonMember(j, key);
  return v.is_array() ? v : kEmpty;
}

std::string PreviousSince(const nlohmann::json& previous, const Failure& f,
                          const std::string& now) {
  for (const auto& p : ArrayMember(previous, "failures")) {
    if (JsonStringOr(p, "node", "") == f.node && JsonStringOr(p, "reason", "") == f.reason) {
      return JsonStringOr(p, "since", now);
    }
  }
  return now;
}

// What an agent said about one pod, made fit for status: a reason outside the CRD's pattern
// becomes AgentReported (the original, made safe, leads the message), all text valid UTF-8 and
// bounded.
ReportTally::Failure AgentFailure(const v1::PodReport& pod) {
  std::string reason = pod.reason().empty() ? "NotEnforced" : SafeReason(pod.reason());
  std::string message = SafeText(pod.namespace_(), 63) + "/" + SafeText(pod.name(), 253) + ": ";
  if (reason != pod.reason() && !pod.reason().empty()) {
    message += "(" + SafeText(pod.reason(), 64) + ") ";
  }
  message += SafeText(pod.message(), kMaxFailureMessage);
  return {std::move(reason), SafeText(message, kMaxFailureMessage)};
}

// The status's GPU busy figures move in whole steps of 5 %.
int BusyBucket(double percent) { return static_cast<int>(percent / 5); }

// At most `max` bytes of `s`, cut on a UTF-8 character boundary (a status object with a split
// character is not valid JSON).
std::string TruncateUtf8(const std::string& s, size_t max) {
  if (s.size() <= max) return s;
  size_t cut = max;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return s.substr(0, cut);
}

// Merges the failures of each node into one entry: the node's most frequent reason (ties: the
// first by name) and a message naming every failed pod, "k failures: a; b; …".
std::vector<Failure> OnePerNode(std::vector<Failure> all) {
  std::sort(all.begin(), all.end(), [](const Failure& a, const Failure& b) {
    return std::tie(a.node, a.reason, a.message) < std::tie(b.node, b.reason, b.message);
  });
  std::vector<Failure> out;
  for (size_t i = 0; i < all.size();) {
    size_t j = i;
    while (j < all.size() && all[j].node == all[i].node) ++j;
    if (j - i == 1) {
      out.push_back(std::move(all[i]));
      i = j;
      continue;
    }
    std::map<std::string, int> count;
    for (size_t k = i; k < j; ++k) ++count[all[k].reason];
    std::string reason = count.begin()->first;
    for (const auto& [r, c] : count) {
      if (c > count[reason]) reason = r;
    }
    std::string message = std::to_string(j - i) + " failures: ";
    for (size_t k = i; k < j; ++k) {
      if (k > i) message += "; ";
      message += all[k].reason == reason ? all[k].message : all[k].reason + " " + all[k].message;
    }
    out.push_back({all[i].node, reason, std::move(message)});
    i = j;
  }
  return out;
}

}  // namespace

std::string Rfc3339(std::chrono::system_clock::time_point t) {
  std::time_t tt = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

bool ReportTally::SameForStatus(const ReportTally& o) const {
  return protected_trainers == o.protected_trainers && starved == o.starved && fenced == o.fenced &&
         gpu_sampled == o.gpu_sampled && BusyBucket(gpu_busy_sum) == BusyBucket(o.gpu_busy_sum) &&
         BusyBucket(gpu_busy_min) == BusyBucket(o.gpu_busy_min) && failures == o.failures;
}

ReportTallies TallyReport(const v1::NodeReport& report) {
  ReportTallies out;
  for (const auto& pod : report.pods()) {
    ReportTally& t = out[pod.policy()];
    const bool trainer = pod.role() == v1::PodReport::TRAINER;
    if (pod.planned()) {  // DryRun: what Enforce would protect / fence, not a failure
      ++(trainer ? t.protected_trainers : t.fenced);
      continue;
    }
    if (!pod.enforced()) {
      t.failures.push_back(AgentFailure(pod));
    } else if (!trainer) {
      ++t.fenced;
    } else {
      ++t.protected_trainers;
      if (TrainerStarved(pod)) ++t.starved;
      // An agent's number, checked: NaN or infinity counts as not sampled.
      if (pod.gpus_sampled() > 0 && std::isfinite(pod.gpu_busy_percent())) {
        const double busy = std::clamp(pod.gpu_busy_percent(), 0.0, 100.0);
        ++t.gpu_sampled;
        t.gpu_busy_sum += busy;
        t.gpu_busy_min = std::min(t.gpu_busy_min, busy);
      }
    }
  }
  return out;
}

bool TrainerStarved(const v1::PodReport& pod) {
  if (pod.cpu_pressure_some_avg10() <= kStarvedPressurePercent) return false;
  return pod.gpus_sampled() == 0 || pod.gpu_busy_percent() < kUnderBusyGpuPercent;
}

namespace {

// What a policy's status counts across its nodes.
struct NodeCounts {
  int matched = 0, enforced = 0, failed = 0, stale = 0;
  int protected_trainers = 0, starved = 0, fenced = 0, conflicts = 0, cross_tier = 0;
  // GPU busy % of protected trainers whose agent reads NVML (aggregate: count, mean, minimum).
  int gpu_sampled = 0;
  double gpu_busy_sum = 0, gpu_busy_min = 100;
  std::vector<Failure> failures;
  std::string first_conflict, first_cross_tier;
};

// One matched node's verdict: failing (before its agent's answer counts), stale, in flight, or
// its agent's answer with the report's tallies added to `c`.
void CountMatchedNode(const std::string& node, const PolicyOnNode& on, const PolicyStatusInput& in,
                      NodeCounts& c) {
  // The controller did not send the node's fence (too big for the agents): failing, whatever
  // the agent acknowledged of an older one.
  if (!on.fence_error.empty()) {
    ++c.failed;
    c.failures.push_back(
        {node, reason::kFenceTooLarge, SafeText(on.fence_error, kMaxFailureMessage)});
    return;
  }
  auto it = in.agents.find(node);
  // Stale only after the grace period: an agent that just lost its stream (a rollout, a
  // controller failover) still holds its fences, so its last answer counts until then.
  if (it == in.agents.end() || it->second.stale) {
    ++c.stale;
    if (on.trainers > 0) {
      c.failures.push_back(
          {node, reason::kAgentNotConnected, "no feedguard agent is connected for this node"});
    }
    return;
  }
  const AgentOnNode& a = it->second;
  if (!a.nack_error.empty()) {
    ++c.failed;
    c.failures.push_back(
        {node, reason::kFenceRejected, SafeText(a.nack_error, kMaxFailureMessage)});
    return;
  }
  // A message the controller could not read (e.g. a report whose text is not UTF-8): the node
  // is failing whatever it acknowledged before, never counted enforced.
  if (!a.unreadable_error.empty()) {
    ++c.failed;
    c.failures.push_back({node, reason::kAgentMessageUnreadable,
                          "the controller cannot read this node's agent: " +
                              SafeText(a.unreadable_error, kMaxFailureMessage)});
    return;
  }
  if (a.acked_version < a.desired_version) return;  // in flight: neither yet
  bool node_ok = true;
  if (const ReportTally* t = a.tally) {
    c.protected_trainers += t->protected_trainers;
    c.starved += t->starved;
    c.fenced += t->fenced;
    if (t->gpu_sampled > 0) {
      c.gpu_sampled += t->gpu_sampled;
      c.gpu_busy_sum += t->gpu_busy_sum;
      c.gpu_busy_min = std::min(c.gpu_busy_min, t->gpu_busy_min);
    }
    for (const auto& f : t->failures) {
      node_ok = false;
      c.failures.push_back({node, f.reason, f.message});
    }
  }
  if (on.pods_over_container_cap > 0) {
    node_ok = false;
    c.failures.push_back(
        {node, reason::kTooManyContainers,
         std::to_string(on.pods_over_container_cap) + " pod(s) with more containers than a " +
             "fence carries, e.g. " + SafeText(on.over_container_cap_example, 300) +
             ": fenced at the pod level only, its containers' cgroups not one by one"});
  }
  ++(node_ok ? c.enforced : c.failed);
}

NodeCounts CountNodes(const PolicyStatusInput& in) {
  NodeCounts c;
  if (!in.invalid.empty()) return c;
  for (const auto& [node, on] : in.per_node) {
    c.conflicts += static_cast<int>(on.lost.size());
    if (c.first_conflict.empty() && !on.lost.empty()) {
      c.first_conflict =
          on.lost[0].pod + " is claimed by higher-ranked policy " + on.lost[0].winner;
    }
    if (!on.node_matched) continue;
    ++c.matched;
    if (on.cross_tier_neighbours > 0 && c.first_cross_tier.empty())
      c.first_cross_tier = on.cross_tier_example;
    c.cross_tier += on.cross_tier_neighbours;
    CountMatchedNode(node, on, in, c);
  }
  return c;
}

// The failures list: one entry per node (the list is a map keyed by node: the API server
// rejects a status with two entries for one node), sorted for a stable object (no status churn
// from map order), at most kMaxFailures (the rest counted in failuresOmitted).
void PutFailures(std::vector<Failure> failures, const nlohmann::json& prev, const std::string& now,
                 nlohmann::json& st) {
  failures = OnePerNode(std::move(failures));
  nlohmann::json fl = nlohmann::json::array();
  for (size_t i = 0; i < failures.size() && i < kMaxFailures; ++i) {
    const Failure& f = failures[i];
    fl.push_back({{"node", f.node},
                  {"reason", f.reason},
                  {"message", TruncateUtf8(f.message, 512)},
                  {"since", PreviousSince(prev, f, now)}});
  }
  st["failures"] = fl;
  if (failures.size() > kMaxFailures) st["failuresOmitted"] = failures.size() - kMaxFailures;
}

nlohmann::json Conditions(const PolicyStatusInput& in, const NodeCounts& c,
                          const std::string& now) {
  const FencePolicy& p = *in.policy;
  const bool dry_run = p.mode == PolicyMode::kDryRun;
  const int64_t gen = p.generation;
  nlohmann::json conds = nlohmann::json::array();
  const auto& prev = in.previous_status;
  if (!in.invalid.empty()) {
    std::string msg = JoinFieldErrors(in.invalid);
    conds.push_back(
        MakeCondition(prev, ConditionType::kInvalid, true, "InvalidSpec", msg, gen, now));
    conds.push_back(
        MakeCondition(prev, ConditionType::kReady, false, "InvalidSpec", msg, gen, now));
    conds.push_back(
        MakeCondition(prev, ConditionType::kDegraded, false, "InvalidSpec", "", gen, now));
  } else {
    conds.push_back(MakeCondition(prev, ConditionType::kInvalid, false, "Valid", "", gen, now));
    bool ready = c.failed == 0 && c.stale == 0 && c.enforced == c.matched;
    std::string summary = std::to_string(c.enforced) + "/" + std::to_string(c.matched) + " nodes " +
                          (dry_run ? "planned (DryRun)" : "enforced");
    conds.push_back(MakeCondition(prev, ConditionType::kReady, ready,
                                  ready ? (dry_run ? "DryRun" : "Enforced") : "Progressing",
                                  summary, gen, now));
    bool degraded = c.failed > 0 || c.stale > 0 || c.starved > 0;
    std::string why = std::to_string(c.failed) + " failed, " + std::to_string(c.stale) +
                      " stale, " + std::to_string(c.starved) + " starved trainers";
    conds.push_back(MakeCondition(prev, ConditionType::kDegraded, degraded,
                                  degraded ? "NodesUnhealthy" : "AsExpected", degraded ? why : "",
                                  gen, now));
  }
  // Issue 28, item 6: a default that leaves a door open is said, not silent.
  const bool open = p.trainers.namespace_selector.empty() && !p.trainers.require_gpu;
  conds.push_back(MakeCondition(
      prev, ConditionType::kTrainersUnrestricted, open,
      open ? reason::kAnyPodAuthorCanClaimTrainer : reason::kTrainersRestricted,
      open ? "neither spec.trainers.namespaceSelector nor spec.trainers.requireGPU is set: "
             "whoever can create a pod matching spec.trainers.podSelector (in any namespace, "
             "with or without a GPU) makes it a trainer and has its node's neighbours fenced "
             "for it; set one of them (docs/DESIGN.md §3, \"Who can become a trainer\")"
           : "",
      gen, now));
  conds.push_back(MakeCondition(
      prev, ConditionType::kConflicting, c.conflicts > 0,
      c.conflicts > 0 ? "PodsClaimedElsewhere" : "NoConflicts",
      c.conflicts > 0 ? std::to_string(c.conflicts) + " pods: " + c.first_conflict : "", gen, now));
  // Where a fence cannot reach: said, not failed (the fence still does what it can in-tier).
  conds.push_back(MakeCondition(
      prev, ConditionType::kCrossTier, c.cross_tier > 0,
      c.cross_tier > 0 ? reason::kNeighboursInOtherQoSTier : reason::kSameQoSTier,
      c.cross_tier > 0
          ? std::to_string(c.cross_tier) +
                " neighbours sit in another QoS tier than their node's trainers (e.g. " +
                c.first_cross_tier +
                "): an Idle or Weight fence ranks a pod only among its own tier's siblings, so "
                "against the trainer they keep their tier's CPU share (kubelet sets the tier "
                "weights); a Cpuset or Quota fence bounds them across tiers"
          : "",
      gen, now));
  return conds;
}

}  // namespace

nlohmann::json ComputePolicyStatus(const PolicyStatusInput& in) {
  const std::string now = Rfc3339(in.now);
  NodeCounts c = CountNodes(in);
  nlohmann::json st;
  st["observedGeneration"] = in.policy->generation;
  st["nodes"] = {
      {"matched", c.matched}, {"enforced", c.enforced}, {"failed", c.failed}, {"stale", c.stale}};
  st["trainers"] = {{"protected", c.protected_trainers}, {"starved", c.starved}};
  if (c.gpu_sampled > 0) {
    // Whole percents, rounded down to a multiple of 5: the status changes when the picture does,
    // not with every sample.
    auto bucket = [](double v) { return BusyBucket(v) * 5; };
    st["trainers"]["gpuBusy"] = {{"sampled", c.gpu_sampled},
                                 {"avgPercent", bucket(c.gpu_busy_sum / c.gpu_sampled)},
                                 {"minPercent", bucket(c.gpu_busy_min)}};
  }
  st["neighbours"] = {{"fenced", c.fenced}};
  PutFailures(std::move(c.failures), in.previous_status, now, st);
  st["conditions"] = Conditions(in, c, now);
  return st;
}

}  // namespace feedguard::controller
