#include "agent/cgroup/knobs.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <set>

#include "agent/cgroup/kubelet_facts.h"
#include "common/cpuset.h"
#include "common/strings.h"

namespace feedguard::agent::cgroup {
namespace {

// What the weight file reads after a cpu.idle write (kernel: an idle group gets the minimum
// weight, WEIGHT_IDLEPRIO = 3 shares; leaving idle resets it to the default). v1 cpu.shares reads
// "3" (kernel 6.18). v2 cpu.weight reads round(3 * 100 / 1024) = "0" on kernel 6.1 (measured in
// the qemu VM); kernels that clamp the read-back to 1..10000 read "1". The first value is the
// expectation; every one is journaled as ours.
const std::vector<std::string> kIdleSharesV1 = {"3"};
const std::vector<std::string> kIdleWeightV2 = {"0", "1"};

std::string DefaultWeightValue(CgroupVersion v) {
  return std::to_string(v == CgroupVersion::kV1 ? v1::kSharesDefault : v2::kWeightDefault);
}

size_t Depth(const std::string& path) { return std::count(path.begin(), path.end(), '/'); }

std::optional<int64_t> ParseInt(std::string_view s) {
  s = Trim(s);
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

// A v1 bandwidth limit as a comparable ratio (quota per period); nullopt = unlimited/unknown.
std::optional<double> Ratio(int64_t quota_us, int64_t period_us) {
  if (quota_us < 0 || period_us <= 0) return std::nullopt;
  return static_cast<double>(quota_us) / static_cast<double>(period_us);
}

}  // namespace

bool IsCpusetFile(const std::string& path) { return Basename(path).rfind("cpuset.", 0) == 0; }
bool IsIdleFile(const std::string& path) { return Basename(path) == v1::kIdle; }
bool IsWeightFile(const std::string& path) {
  const std::string b = Basename(path);
  return b == v1::kShares || b == v2::kWeight;
}

bool IsBandwidthFile(const std::string& path) {
  const std::string b = Basename(path);
  return b == v1::kCfsQuotaUs || b == v1::kCfsPeriodUs || b == v2::kMax || IsBurstFile(path);
}

bool IsKnobFile(CgroupVersion v, const std::string& path) {
  const std::string b = Basename(path);
  if (v == CgroupVersion::kV1) {
    return b == v1::kIdle || b == v1::kShares || b == v1::kCfsQuotaUs || b == v1::kCfsPeriodUs ||
           b == v1::kCfsBurstUs || b == v1::kCpusetCpus || b == v1::kCpusetMems;
  }
  return b == v2::kIdle || b == v2::kWeight || b == v2::kMax || b == v2::kMaxBurst ||
         b == v2::kCpusetCpus || b == v2::kCpusetMems;
}

bool KnobValuesEquivalent(const std::string& file, const std::string& a, const std::string& b) {
  std::string_view ta = Trim(a), tb = Trim(b);
  if (ta == tb) return true;
  if (IsCpusetFile(file)) {
    auto sa = CpuSet::Parse(ta);
    auto sb = CpuSet::Parse(tb);
    return sa.ok() && sb.ok() && *sa == *sb;
  }
  return Fields(ta) == Fields(tb);
}

std::string WeightFile(CgroupVersion v, const std::string& cpu_dir) {
  return JoinPath(cpu_dir, v == CgroupVersion::kV1 ? v1::kShares : v2::kWeight);
}

std::string QuotaFile(CgroupVersion v, const std::string& cpu_dir) {
  return JoinPath(cpu_dir, v == CgroupVersion::kV1 ? v1::kCfsQuotaUs : v2::kMax);
}

std::string BurstFile(CgroupVersion v, const std::string& cpu_dir) {
  return JoinPath(cpu_dir, v == CgroupVersion::kV1 ? v1::kCfsBurstUs : v2::kMaxBurst);
}

bool IsBurstFile(const std::string& path) {
  const std::string b = Basename(path);
  return b == v1::kCfsBurstUs || b == v2::kMaxBurst;
}

std::string WeightValue(CgroupVersion v, uint64_t weight) {
  return std::to_string(v == CgroupVersion::kV1 ? WeightToShares(weight) : weight);
}

Result<std::vector<KnobWrite>> CpuKnobWrites(CgroupVersion v, const std::string& cpu_dir,
                                             const CpuKnobs& want, const ReadFn& read) {
  std::vector<KnobWrite> out;
  // Idle before the weight: while a group is idle its weight cannot be written, and leaving
  // idle resets it. (A plan never asks for both on one pod; the order keeps it correct if one
  // does.)
  if (want.idle) out.push_back({JoinPath(cpu_dir, v1::kIdle), *want.idle ? "1" : "0"});
  if (want.weight) out.push_back({WeightFile(v, cpu_dir), WeightValue(v, *want.weight)});
  if (want.quota) {
    const CpuQuota& q = *want.quota;
    // The burst first: the kernel refuses a quota below the group's burst (EINVAL, both
    // versions), and a fence caps every period, so it holds no burst at all. Written whatever
    // it reads now (the caller skips a write that changes nothing) so that the file stays the
    // fence's while it holds; a kernel without burst (< 5.14) has no file and nothing to lower.
    if (q.quota_us >= 0) {
      const std::string burst_file = BurstFile(v, cpu_dir);
      auto burst = read(burst_file);
      if (burst.ok()) {
        out.push_back({burst_file, "0"});
      } else if (burst.status().code() != StatusCode::kNotFound) {
        return burst.status();
      }
    }
    if (v == CgroupVersion::kV2) {
      const std::string quota =
          q.quota_us < 0 ? std::string(v2::kMaxKeyword) : std::to_string(q.quota_us);
      out.push_back({JoinPath(cpu_dir, v2::kMax), quota + " " + std::to_string(q.period_us)});
    } else {
      // Period first, quota last: the limit takes effect with the final write. A period change
      // under a set quota goes through an unlimited quota, which the parent always accepts.
      const std::string period_file = JoinPath(cpu_dir, v1::kCfsPeriodUs);
      const std::string quota_file = JoinPath(cpu_dir, v1::kCfsQuotaUs);
      const std::string period = std::to_string(q.period_us);
      const std::string unlimited = std::to_string(v1::kQuotaUnlimited);
      FG_ASSIGN_OR_RETURN(std::string cur_period, read(period_file));
      FG_ASSIGN_OR_RETURN(std::string cur_quota, read(quota_file));
      const bool period_changes = !KnobValuesEquivalent(period_file, cur_period, period);
      if (period_changes && !KnobValuesEquivalent(quota_file, cur_quota, unlimited)) {
        out.push_back({quota_file, unlimited});
      }
      out.push_back({period_file, period});
      out.push_back(
          {quota_file, q.quota_us < 0 ? unlimited : std::to_string(q.quota_us), period_changes});
    }
  }
  return out;
}

std::vector<KnobWrite> LiftChildQuotas(CgroupVersion v, const std::vector<std::string>& child_dirs,
                                       const CpuQuota& fence, const ReadFn& read) {
  std::vector<KnobWrite> out;
  if (v != CgroupVersion::kV1) return out;
  const auto limit = Ratio(fence.quota_us, fence.period_us);
  if (!limit) return out;  // an unlimited fence is above every child
  std::vector<std::string> dirs = child_dirs;
  std::stable_sort(dirs.begin(), dirs.end(), [](const std::string& a, const std::string& b) {
    return Depth(a) > Depth(b);  // deepest first: a child is never above its parent meanwhile
  });
  for (const auto& dir : dirs) {
    const std::string quota_file = QuotaFile(v, dir);
    auto quota = read(quota_file);
    auto period = read(JoinPath(dir, v1::kCfsPeriodUs));
    if (!quota.ok() || !period.ok()) continue;
    auto q = ParseInt(*quota), p = ParseInt(*period);
    if (!q || !p) continue;
    auto r = Ratio(*q, *p);
    if (r && *r > *limit) out.push_back({quota_file, std::to_string(v1::kQuotaUnlimited)});
  }
  return out;
}

std::optional<SideEffect> SideEffectOf(CgroupVersion v, const std::string& path,
                                       std::string_view value) {
  if (!IsIdleFile(path)) return std::nullopt;
  SideEffect e;
  e.path = WeightFile(v, Dirname(path));
  if (Trim(value) == "1") {
    e.values = v == CgroupVersion::kV1 ? kIdleSharesV1 : kIdleWeightV2;
  } else {
    e.values = {DefaultWeightValue(v)};
  }
  return e;
}

bool IsWeightResetByLeavingIdle(CgroupVersion v, const std::string& path, std::string_view value) {
  return IsWeightFile(path) && Trim(value) == DefaultWeightValue(v);
}

std::vector<FileWrite> OrderRestores(CgroupVersion /*v*/, const std::vector<RestoreItem>& items) {
  std::vector<const RestoreItem*> sorted;
  for (const auto& x : items) sorted.push_back(&x);
  std::stable_sort(sorted.begin(), sorted.end(), [](const RestoreItem* a, const RestoreItem* b) {
    return Depth(a->path) < Depth(b->path);
  });
  std::vector<FileWrite> plan;

  // 1. cpusets: top-down to current ∪ original, then bottom-up to the original (v1 never sees a
  //    child outside its parent; v2 is fine with either).
  for (const RestoreItem* x : sorted) {
    if (!IsCpusetFile(x->path)) continue;
    auto orig = CpuSet::Parse(x->original);
    auto cur = CpuSet::Parse(x->current);
    if (orig.ok() && cur.ok() && !orig->IsSubsetOf(*cur)) {
      plan.push_back({x->path, cur->Union(*orig).ToString()});
    }
  }
  for (auto it = sorted.rbegin(); it != sorted.rend(); ++it) {
    if (IsCpusetFile((*it)->path)) plan.push_back({(*it)->path, (*it)->original});
  }

  // 2. v1 bandwidth, per dir, parents first: when the period changes under a set quota, the
  //    quota goes through unlimited; then the period; then the quota. Each dir ends at its
  //    original, which (with its children's originals) the kernel accepted before.
  std::map<std::string, const RestoreItem*> quota_of, period_of;
  std::vector<std::string> bw_dirs;
  for (const RestoreItem* x : sorted) {
    const std::string base = Basename(x->path);
    if (base != v1::kCfsQuotaUs && base != v1::kCfsPeriodUs) continue;
    const std::string dir = Dirname(x->path);
    if (!quota_of.count(dir) && !period_of.count(dir)) bw_dirs.push_back(dir);
    (base == v1::kCfsQuotaUs ? quota_of : period_of)[dir] = x;
  }
  for (const auto& dir : bw_dirs) {
    const RestoreItem* q = quota_of.count(dir) ? quota_of[dir] : nullptr;
    const RestoreItem* p = period_of.count(dir) ? period_of[dir] : nullptr;
    const bool period_changes = p && !KnobValuesEquivalent(p->path, p->current, p->original);
    const std::string unlimited = std::to_string(v1::kQuotaUnlimited);
    if (period_changes && q && !KnobValuesEquivalent(q->path, q->current, unlimited)) {
      plan.push_back({q->path, unlimited});
    }
    if (p) plan.push_back({p->path, p->original});
    if (q) plan.push_back({q->path, q->original});
  }

  // 3. cpu.idle before the weight: leaving idle resets the weight, restored after it.
  for (const RestoreItem* x : sorted) {
    if (IsIdleFile(x->path)) plan.push_back({x->path, x->original});
  }
  // 4. The rest (weights, cpu.max) as they come, parents first.
  for (const RestoreItem* x : sorted) {
    const std::string base = Basename(x->path);
    if (IsCpusetFile(x->path) || IsIdleFile(x->path) || IsBurstFile(x->path) ||
        base == v1::kCfsQuotaUs || base == v1::kCfsPeriodUs) {
      continue;
    }
    plan.push_back({x->path, x->original});
  }
  // 5. Bursts last: the kernel accepts a burst only up to the group's quota, so it follows the
  //    quota's restore (the original pair was accepted together).
  for (const RestoreItem* x : sorted) {
    if (IsBurstFile(x->path)) plan.push_back({x->path, x->original});
  }
  return plan;
}

std::map<std::string, std::string> InheritedCpusets(CgroupVersion v,
                                                    const std::vector<RestoreItem>& items,
                                                    const ReadFn& read) {
  std::map<std::string, std::string> out;
  if (v != CgroupVersion::kV2) return out;
  std::set<std::string> restored_dirs;
  for (const auto& x : items) {
    if (IsCpusetFile(x.path)) restored_dirs.insert(Dirname(x.path));
  }
  for (const auto& x : items) {
    const std::string base = Basename(x.path);
    const bool cpus = base == v2::kCpusetCpus;
    if ((!cpus && base != v2::kCpusetMems) || !Trim(x.original).empty()) continue;
    std::string dir = Dirname(x.path);
    while (!dir.empty() && restored_dirs.count(dir)) dir = Dirname(dir);
    auto eff = read(JoinPath(dir, cpus ? v2::kCpusetCpusEffective : v2::kCpusetMemsEffective));
    if (eff.ok() && !Trim(*eff).empty()) out[x.path] = std::string(Trim(*eff));
  }
  return out;
}

std::vector<FileWrite> CpusetResetWrites(const std::string& dir) {
  const std::string file = JoinPath(dir, v2::kSubtreeControl);
  return {{file, std::string(v2::kCpusetOff)}, {file, std::string(v2::kCpusetOn)}};
}

std::string CpusetResetDirOf(const std::string& file) { return Dirname(Dirname(file)); }

bool ListsCpuset(std::string_view controllers) {
  for (std::string_view t : Fields(controllers)) {
    if (t == v2::kCpusetController) return true;
  }
  return false;
}

std::vector<std::pair<std::string, std::string>> IntermediatesOf(
    CgroupVersion v, const std::vector<RestoreItem>& items, const std::vector<FileWrite>& writes) {
  std::map<std::string, std::string> original;
  for (const auto& x : items) original[x.path] = x.original;
  std::vector<std::pair<std::string, std::string>> out;
  std::set<std::pair<std::string, std::string>> seen;
  auto add = [&](const std::string& path, const std::string& value) {
    if (seen.insert({path, value}).second) out.emplace_back(path, value);
  };
  for (const auto& w : writes) {
    if (auto it = original.find(w.path); it == original.end() || it->second != w.value) {
      add(w.path, w.value);
    }
    if (auto e = SideEffectOf(v, w.path, w.value)) {
      for (const auto& val : e->values) add(e->path, val);
    }
  }
  return out;
}

}  // namespace feedguard::agent::cgroup
