#include "agent/engine/decision_log.h"

#include <set>

#include "feedguard/common/reasons.h"

namespace feedguard::agent {
namespace {

namespace v1 = feedguard::v1;

// How the plan fences a pod, in words an operator knows from the policy.
std::map<std::string, std::string> FenceWords(const Plan& plan) {
  std::map<std::string, std::string> out;
  for (const auto& t : plan.trainers) {
    std::string how = t.cpus.empty() ? "not pinned" : "pinned to cpus " + t.cpus.ToString();
    if (t.weight) how += ", cpu weight " + std::to_string(*t.weight);
    out.emplace(t.pod.uid, std::move(how));
  }
  for (const auto& n : plan.neighbours) {
    std::string how;
    switch (n.fence) {
      case NeighbourFence::kIdle:
        how = "Idle (cpu.idle=1)";
        break;
      case NeighbourFence::kWeight:
        how = "Weight (" + std::to_string(n.weight.value_or(0)) + ")";
        break;
      case NeighbourFence::kCpuset:
        how = "Cpuset (cpus " + (n.cpus ? n.cpus->ToString() : std::string("?")) + ")";
        break;
      case NeighbourFence::kQuota:
        how = n.quota ? "Quota (" + std::to_string(n.quota->quota_us) + " µs per " +
                            std::to_string(n.quota->period_us) + " µs, no burst)"
                      : "Quota";
        break;
    }
    // An Idle fallback (no CPUs left for a Cpuset fence, a CPU-manager pod) says so.
    if (n.fence != NeighbourFence::kIdle && n.idle && *n.idle) how += ", Idle";
    out.emplace(n.pod.uid, std::move(how));
  }
  return out;
}

struct Reverted {
  int restored = 0, theirs = 0, failed = 0;
  int noted = 0;  // restored, with a note (v2: the inherited set instead of an empty original)
  std::string first_failure, first_note;
};

// ", 2 failed (path: why)" and the like: what a withdrawal line adds to "N file(s) restored".
std::string RevertDetail(const Reverted& x) {
  std::string text;
  if (x.noted > 0) {
    text += " (" + std::to_string(x.noted) + " not byte-exact: " + x.first_note + ")";
  }
  if (x.theirs > 0) text += ", " + std::to_string(x.theirs) + " left to another writer";
  if (x.failed > 0) text += ", " + std::to_string(x.failed) + " failed (" + x.first_failure + ")";
  return text;
}

}  // namespace

std::vector<Decision> DecisionLog::Observe(const Plan& plan, const ApplyReport& report,
                                           const std::map<std::string, uint64_t>& overwrites) {
  std::vector<Decision> out;
  const auto words = FenceWords(plan);
  std::map<std::string, Reverted> reverted;
  for (const auto& r : report.reverts) {
    Reverted& x = reverted[r.pod_uid];
    if (r.outcome == reason::kRestored || r.outcome == reason::kAlreadyOriginal ||
        r.outcome == reason::kGone) {
      ++x.restored;
      if (r.outcome == reason::kRestored && !r.message.empty() && x.noted++ == 0) {
        x.first_note = r.path + ": " + r.message;
      }
    } else if (r.outcome == reason::kOverwrittenByOther) {
      ++x.theirs;
    } else {
      if (x.failed++ == 0) x.first_failure = r.path + ": " + r.message;
    }
  }

  std::set<std::string> in_report;
  for (const v1::PodReport& p : report.pods) {
    if (!in_report.insert(p.uid()).second) continue;  // a duplicate entry: the first one counts
    const std::string name = p.namespace_() + "/" + p.name();
    const std::string who = "pod " + name + " (policy " + p.policy() + ")";
    const char* role = p.role() == v1::PodReport::TRAINER ? "trainer" : "neighbour";
    auto w = words.find(p.uid());
    const std::string how = w == words.end() ? std::string() : w->second;
    const std::string verdict = p.enforced() ? "fenced: " + how : p.reason();
    Seen& s = seen_[p.uid()];
    const std::string before = s.verdict;
    s.name = name;
    if (verdict != before) {
      s.verdict = verdict;
      if (p.enforced()) {
        std::string text = who + ": " + role +
                           (p.role() == v1::PodReport::TRAINER ? " protected: " : " fenced: ") +
                           how;
        if (before == reason::kResizePending) {
          text += " (again, after kubelet's in-place resize)";
        } else if (!before.empty()) {
          text += " (was " + (before.rfind("fenced: ", 0) == 0 ? before.substr(8) : before) + ")";
        }
        out.push_back({false, std::move(text)});
      } else if (p.reason() == reason::kResizePending) {
        out.push_back(
            {false, who + ": fence lifted for kubelet's in-place resize: " + p.message()});
      } else if (p.reason() == reason::kDryRun || p.reason() == reason::kProtectedPod) {
        out.push_back({false, who + ": not fenced (" + p.reason() + "): " + p.message()});
      } else {
        out.push_back({true, who + ": not fenced (" + p.reason() + "): " + p.message()});
      }
    }
    // Another writer rewrote some of its files; the watcher re-applied the fence (unless the
    // file is contested, which the verdict above says).
    auto o = overwrites.find(p.uid());
    const uint64_t now = o == overwrites.end() ? 0 : o->second;
    if (now > s.overwrites) {
      out.push_back({false, who + ": another writer rewrote " + std::to_string(now - s.overwrites) +
                                " of its fenced files; their values are the originals now" +
                                (p.enforced() ? " and the fence was re-applied" : "") + " (" +
                                std::to_string(now) + " overwrites so far)"});
    }
    s.overwrites = now;
  }

  // Pods that left the plan: their fence was withdrawn (files restored, or left to another
  // writer that rewrote them since).
  for (auto it = seen_.begin(); it != seen_.end();) {
    if (in_report.count(it->first)) {
      ++it;
      continue;
    }
    const Reverted& x = reverted[it->first];
    std::string text = "pod " + it->second.name + ": fence withdrawn, " +
                       std::to_string(x.restored) + " file(s) restored" + RevertDetail(x);
    out.push_back({x.failed > 0, std::move(text)});
    reverted.erase(it->first);
    it = seen_.erase(it);
  }
  // Restores of pods this log never saw fenced (an agent restarted over its checkpoint).
  for (const auto& [uid, x] : reverted) {
    if (in_report.count(uid) || uid.empty()) continue;
    std::string text = "pod uid " + uid + ": fence withdrawn, " + std::to_string(x.restored) +
                       " file(s) restored" + RevertDetail(x);
    out.push_back({x.failed > 0, std::move(text)});
  }
  return out;
}

}  // namespace feedguard::agent
