// planner.cc — MakePlan: trainer placement (stable, NUMA-aware, SMT-aware), rails, neighbour
// fences.
#include "agent/planner/planner.h"

#include "feedguard/common/qos_wire.h"
#include "feedguard/common/reasons.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <set>
#include <tuple>

namespace feedguard::agent {
namespace {

namespace pb = feedguard::v1;

constexpr int64_t kPeriodUs = 100000;
constexpr int64_t kMinQuotaUs = 1000;
constexpr int kDefaultMaxCpuPercent = 75;

bool WholeCores(const pb::PolicyOptions& p) { return p.trainer_cpu().placement() != pb::THREADS; }

pb::NumaPolicy Numa(const pb::PolicyOptions& p) {
  return p.trainer_cpu().numa() == pb::NUMA_POLICY_UNSPECIFIED ? pb::PREFER_GPU_LOCAL
                                                               : p.trainer_cpu().numa();
}

bool DryRun(const pb::PolicyOptions& p) { return p.mode() == pb::DRY_RUN; }

// Free-CPU bookkeeping over one topology. Units are whole cores (WHOLE_CORES) or PUs (THREADS).
class Allocator {
 public:
  Allocator(const Topology& t, CpuSet usable) : t_(t), usable_(std::move(usable)) {
    for (const Core& c : t_.cores) nodes_.insert(c.numa);
  }

  bool PuFree(int pu) const { return usable_.Contains(pu) && !taken_.Contains(pu); }
  bool CoreFree(const Core& c, const CpuSet& also_taken) const {
    for (int pu : c.pus) {
      if (!PuFree(pu) || also_taken.Contains(pu)) return false;
    }
    return true;
  }
  int WholeFreeCores(const CpuSet& also_taken = {}) const {
    int n = 0;
    for (const Core& c : t_.cores) n += CoreFree(c, also_taken) ? 1 : 0;
    return n;
  }
  void Take(const CpuSet& s) { taken_ = taken_.Union(s); }
  void Release(const CpuSet& s) { taken_ = taken_.Minus(s); }
  const std::set<int>& nodes() const { return nodes_; }

  // Free units on `node`, in pick order, excluding `exclude`.
  std::vector<CpuSet> Units(bool whole, int node, const CpuSet& exclude) const {
    std::vector<CpuSet> out;
    if (whole) {
      for (const Core& c : t_.cores) {
        if (c.numa == node && CoreFree(c, exclude)) out.push_back(c.pus);
      }
      return out;
    }
    // Threads: first the free PUs of cores someone already broke into, then whole cores with
    // their siblings adjacent, so odd counts break as few cores as possible.
    std::vector<CpuSet> whole_cores;
    for (const Core& c : t_.cores) {
      if (c.numa != node) continue;
      if (CoreFree(c, exclude)) {
        for (int pu : c.pus) whole_cores.push_back(CpuSet{pu});
      } else {
        for (int pu : c.pus) {
          if (PuFree(pu) && !exclude.Contains(pu)) out.push_back(CpuSet{pu});
        }
      }
    }
    out.insert(out.end(), whole_cores.begin(), whole_cores.end());
    return out;
  }

  // The incumbent `cpus` as `n` units, if they are still all free and of the right shape.
  bool StillValid(const CpuSet& cpus, bool whole, int n) const {
    if (cpus.empty()) return false;
    for (int pu : cpus) {
      if (!PuFree(pu)) return false;
    }
    if (!whole) return static_cast<int>(cpus.size()) == n;
    int cores = 0;
    for (const Core& c : t_.cores) {
      if (!c.pus.Intersects(cpus)) continue;
      if (!c.pus.IsSubsetOf(cpus)) return false;  // a sibling is missing
      ++cores;
    }
    return cores == n;
  }

  // `cpus` counted in units: whole cores (-1 when a core is split) or threads.
  int UnitsIn(const CpuSet& cpus, bool whole) const {
    if (!whole) return static_cast<int>(cpus.size());
    int cores = 0;
    for (const Core& c : t_.cores) {
      if (!c.pus.Intersects(cpus)) continue;
      if (!c.pus.IsSubsetOf(cpus)) return -1;
      ++cores;
    }
    return cores;
  }

  int NumaOfPu(int pu) const {
    const Core* c = t_.CoreOfPu(pu);
    return c == nullptr ? -1 : c->numa;
  }

 private:
  const Topology& t_;
  CpuSet usable_;
  CpuSet taken_;
  std::set<int> nodes_;
};

// A GPU local to k NUMA nodes (a package-attached GPU on a sub-NUMA-clustered socket) counts
// kGpuShare / k on each: shares stay integers for k ≤ 6 and sum to kGpuShare per GPU.
constexpr int kGpuShare = 60;

std::string NodeList(const std::set<int>& nodes) {
  std::string out;
  for (int n : nodes) out += (out.empty() ? "" : ",") + std::to_string(n);
  return out;
}

struct TrainerWork {
  const pb::Trainer* trainer = nullptr;
  const pb::PolicyOptions* policy = nullptr;
  TrainerPlacement placement;
  int units = 0;                  // 0 = do not pin
  int demand = 0;                 // units before any split of a shared GPU's cores
  std::set<std::string> bus_ids;  // PCI addresses of its physical GPUs found in the topology
  bool shared = false;            // holds a GPU another trainer of this fence holds too
  int co_holders = 0;             // other trainers holding one of its GPUs (max over its GPUs)
  bool split_done = false;        // its shared GPUs' local cores were split (SplitShared)
  std::map<int, int> gpu_nodes;   // NUMA node → GPU shares on it (kGpuShare per GPU)
  bool locality_unknown = false;  // some GPU's node is unknown
  bool skip = false;              // already failed (diagnostic emitted)
};

class Planner {
 public:
  Planner(const Topology& t, const PlanInput& in) : t_(t), in_(in) {
    for (const Core& c : t_.cores) {
      if (c.numa < 0) continue;
      cpu_nodes_.insert(c.numa);
      node_package_.emplace(c.numa, c.package);
    }
  }

  Plan Run() {
    plan_.fence_version = in_.fence.version();
    for (const auto& p : in_.fence.policies()) policies_.emplace(p.name(), &p);
    plan_.dry_run =
        !policies_.empty() && std::all_of(policies_.begin(), policies_.end(),
                                          [](const auto& kv) { return DryRun(*kv.second); });
    plan_.off_limits = in_.reserved_cpus.Union(in_.cpu_manager.ExclusiveCpus());
    Allocator alloc(t_, t_.allowed_cpus.Minus(plan_.off_limits));

    std::vector<TrainerWork> work = CollectTrainers();
    if (alloc.WholeFreeCores() < 1) {
      Diag("", "", reason::kNoFreeCore,
           "no whole core is left outside reserved and CPU-manager CPUs; no trainer is pinned");
    }
    // Enforced first, then dry-run; within each: incumbents, then newcomers.
    for (bool dry : {false, true}) {
      for (TrainerWork& w : work) {
        if (w.placement.dry_run == dry) KeepIncumbent(alloc, w);
      }
      // Incumbents off their GPUs' node(s) go back as soon as the whole trainer fits there,
      // before any newcomer takes the room (they never take an incumbent's cores).
      for (TrainerWork& w : work) {
        if (w.placement.dry_run == dry) TryReturn(alloc, w);
      }
      for (TrainerWork& w : work) {
        if (w.placement.dry_run != dry || !w.placement.cpus.empty()) continue;
        SplitShared(alloc, work, w);
        PlaceNew(alloc, w);
      }
      for (TrainerWork& w : work) {
        if (w.placement.dry_run == dry) GrowInPlace(alloc, w);
      }
    }
    for (TrainerWork& w : work) ReportShort(w);
    // Every plan says why a trainer is off its GPUs' node(s), not only the one that put it there.
    for (TrainerWork& w : work) ReportFallback(w);
    CpuSet enforced_trainers;
    for (TrainerWork& w : work) {
      if (!w.placement.dry_run) enforced_trainers = enforced_trainers.Union(w.placement.cpus);
      plan_.trainers.push_back(std::move(w.placement));
    }
    PlanNeighbours(enforced_trainers);
    return std::move(plan_);
  }

 private:
  void Diag(const std::string& uid, const std::string& policy, const std::string& reason,
            const std::string& message) {
    plan_.diagnostics.push_back({uid, policy, reason, message});
  }

  const pb::PolicyOptions* FindPolicy(const std::string& name) const {
    auto it = policies_.find(name);
    return it == policies_.end() ? nullptr : it->second;
  }

  const TrainerPlacement* Previous(const std::string& uid) const {
    if (!in_.previous) return nullptr;
    for (const auto& p : in_.previous->trainers) {
      if (p.pod.uid == uid) return &p;
    }
    return nullptr;
  }

  std::vector<TrainerWork> CollectTrainers() {
    std::vector<TrainerWork> work;
    std::set<std::string> seen;
    for (const pb::Trainer& tr : in_.fence.trainers()) {
      const pb::PolicyOptions* pol = FindPolicy(tr.policy());
      if (pol == nullptr) {
        Diag(tr.pod().uid(), tr.policy(), reason::kPolicyNotFound,
             "trainer " + tr.pod().namespace_() + "/" + tr.pod().name() +
                 " names a policy absent from the NodeFence");
        continue;
      }
      if (!seen.insert(tr.pod().uid()).second) {
        Diag(tr.pod().uid(), tr.policy(), reason::kDuplicatePod,
             "trainer listed twice; first kept");
        continue;
      }
      TrainerWork w;
      w.trainer = &tr;
      w.policy = pol;
      w.placement.pod = ToPodIdentity(tr.pod());
      w.placement.policy = pol->name();
      w.placement.dry_run = DryRun(*pol);
      if (pol->trainer_cpu().weight() > 0) {
        w.placement.weight = static_cast<uint64_t>(pol->trainer_cpu().weight());
      }
      work.push_back(std::move(w));
    }
    std::sort(work.begin(), work.end(), [](const TrainerWork& a, const TrainerWork& b) {
      const auto ka = std::make_tuple(-a.policy->priority(), a.placement.pod.ns,
                                      a.placement.pod.name, a.placement.pod.uid);
      const auto kb = std::make_tuple(-b.policy->priority(), b.placement.pod.ns,
                                      b.placement.pod.name, b.placement.pod.uid);
      return ka < kb;
    });
    for (TrainerWork& w : work) Size(w);
    MarkShared(work);
    return work;
  }

  // GPUs, unit count and preferred NUMA nodes of one trainer.
  void Size(TrainerWork& w) {
    const std::string& uid = w.placement.pod.uid;
    std::vector<ResolvedGpu> gpus;
    if (auto it = in_.trainer_gpus.find(uid); it != in_.trainer_gpus.end()) {
      gpus = it->second;
    } else {
      for (const auto& id : w.trainer->gpu_ids()) gpus.push_back({id, "", "PCI address unknown"});
    }
    for (const auto& g : gpus) w.placement.gpu_ids.push_back(g.device_id);

    // Nodes with CPUs: memory-only nodes (HBM, CXL) never make a machine multi-node.
    const bool single_node = cpu_nodes_.size() <= 1;
    for (const auto& g : gpus) {
      const GpuDevice* dev = g.bus_id.empty() ? nullptr : t_.FindGpu(g.bus_id);
      if (dev != nullptr) w.bus_ids.insert(dev->bdf);
      if (dev == nullptr) {
        std::string what;
        if (g.bus_id.empty()) {
          what = " not found on this node";
        } else if (const PciDevice* other = t_.FindOtherPci(g.bus_id)) {
          char ids[64];
          std::snprintf(ids, sizeof ids, " (vendor %04x, device %04x, class %04x)",
                        static_cast<unsigned>(other->vendor_id),
                        static_cast<unsigned>(other->device_id),
                        static_cast<unsigned>(other->class_id));
          what = " resolves to PCI " + g.bus_id + ", which is not an NVIDIA GPU but another " +
                 "device" + ids;
        } else {
          what = " resolves to PCI " + g.bus_id + ", which this node's topology does not have";
        }
        Diag(uid, w.placement.policy, reason::kGPUNotFound,
             "GPU " + g.device_id + what + (g.error.empty() ? "" : (": " + g.error)));
      }
      if (single_node && !cpu_nodes_.empty()) {
        w.gpu_nodes[*cpu_nodes_.begin()] += kGpuShare;
      } else if (dev != nullptr && !dev->local_numa.empty()) {
        const int k = static_cast<int>(dev->local_numa.size());
        for (int node : dev->local_numa) w.gpu_nodes[node] += std::max(1, kGpuShare / k);
      } else {
        w.locality_unknown = true;
      }
    }

    const auto& cpu = w.policy->trainer_cpu();
    if (in_.protected_pods.Protects(w.placement.pod)) {
      // The rail: never written, so never given cores that neighbours are then kept off.
      Diag(uid, w.placement.policy, reason::kProtectedPod,
           "trainer " + w.placement.pod.ns + "/" + w.placement.pod.name +
               " is protected (the agent's own pod, a system-critical priority class or a "
               "system namespace): not pinned, no core reserved");
      w.placement.weight.reset();
      w.skip = true;
      return;
    }
    if (in_.cpu_manager.OwnsCpusOf(uid)) {
      Diag(uid, w.placement.policy, reason::kCpuManagerOwnsPod,
           "kubelet's static CPU manager pins this pod; feedguard leaves its cpuset alone");
      w.skip = true;
      return;
    }
    if (cpu.cores() > 0) {
      w.units = cpu.cores();
    } else if (cpu.cores_per_gpu() > 0) {
      w.units = cpu.cores_per_gpu() * static_cast<int>(gpus.size());
      if (gpus.empty()) {
        Diag(uid, w.placement.policy, reason::kNoGPUs,
             "policy sizes cores per GPU but the pod has no GPU devices");
        w.skip = true;
      }
    }
    if (w.units > 0 && Numa(*w.policy) == pb::REQUIRE_GPU_LOCAL && w.gpu_nodes.empty()) {
      Diag(uid, w.placement.policy, reason::kGPULocalityUnknown,
           "RequireGPULocal but the NUMA node of the pod's GPUs is unknown");
      w.skip = true;
    }
    w.demand = w.units;
  }

  // Trainers that place near their GPUs and hold a GPU another such trainer holds (MPS,
  // time-slicing, one shared ResourceClaim): their GPU's local cores are split between them.
  static bool Shares(const TrainerWork& w) {
    return !w.skip && w.units > 0 && !w.bus_ids.empty() && !w.gpu_nodes.empty() &&
           Numa(*w.policy) != pb::IGNORE;
  }
  static void MarkShared(std::vector<TrainerWork>& work) {
    std::map<std::string, int> holders;
    for (const TrainerWork& w : work) {
      if (!Shares(w)) continue;
      for (const auto& bdf : w.bus_ids) ++holders[bdf];
    }
    for (TrainerWork& w : work) {
      if (!Shares(w)) continue;
      for (const auto& bdf : w.bus_ids) w.co_holders = std::max(w.co_holders, holders[bdf] - 1);
      w.shared = w.co_holders > 0;
    }
  }

  bool LocalTo(const TrainerWork& w, const CpuSet& cpus, const Allocator& alloc) const {
    if (w.gpu_nodes.empty() || cpus.empty()) return false;
    for (int pu : cpus) {
      if (w.gpu_nodes.count(alloc.NumaOfPu(pu)) == 0) return false;
    }
    return true;
  }

  void Finish(TrainerWork& w, const CpuSet& cpus, Allocator& alloc) {
    alloc.Take(cpus);
    w.placement.cpus = cpus;
    w.placement.mems = LocalMems(cpus);
    w.placement.gpu_local = LocalTo(w, cpus, alloc);
  }

  // The memory nodes local to `cpus`: every NUMA node whose locality holds one of them — the
  // cores' own DRAM node and the CPU-less memory nodes beside it (KNL MCDRAM, HBM in flat mode,
  // CXL expanders, a Grace-Hopper GPU's memory), which hwloc gives the cpuset of the cores
  // they are local to (issue 28, item 9: only the closest CPU node was kept, so a trainer bound
  // to its HBM node failed or silently fell back while fenced).
  CpuSet LocalMems(const CpuSet& cpus) const {
    CpuSet mems;
    for (const NumaNode& n : t_.numa_nodes) {
      if (n.cpus.Intersects(cpus)) mems.Insert(n.id);
    }
    return mems;
  }

  std::set<int> GpuNodes(const TrainerWork& w) const {
    std::set<int> out;
    for (const auto& [node, share] : w.gpu_nodes) out.insert(node);
    return out;
  }

  // Nearest distance from any of the trainer's GPU nodes to `node`; nullopt when unknown.
  std::optional<uint64_t> DistanceFromGpus(const TrainerWork& w, int node) const {
    std::optional<uint64_t> best;
    for (const auto& [g, share] : w.gpu_nodes) {
      const auto d = t_.Distance(g, node);
      if (d && (!best || *d < *best)) best = d;
    }
    return best;
  }

  // Other NUMA nodes, nearest first: by the OS latency matrix (SLIT) when the machine has one,
  // then same package before other packages, then lowest id.
  std::vector<int> FallbackOrder(const TrainerWork& w, const Allocator& alloc) const {
    std::set<int> gpu_packages;
    for (const auto& [g, share] : w.gpu_nodes) {
      if (auto it = node_package_.find(g); it != node_package_.end())
        gpu_packages.insert(it->second);
    }
    std::vector<std::tuple<uint64_t, int, int>> order;  // (distance, other package?, node)
    for (int node : alloc.nodes()) {
      if (w.gpu_nodes.count(node) != 0) continue;
      const auto d = DistanceFromGpus(w, node);
      auto pkg = node_package_.find(node);
      const int other_pkg =
          pkg != node_package_.end() && gpu_packages.count(pkg->second) != 0 ? 0 : 1;
      order.emplace_back(d.value_or(UINT64_MAX), other_pkg, node);
    }
    std::sort(order.begin(), order.end());
    std::vector<int> out;
    for (const auto& [d, other, node] : order) out.push_back(node);
    return out;
  }

  // "node 3 at distance 12, node 0 at distance 21" for the nodes of `cpus` off the GPUs' nodes.
  std::string OffNodeDetail(const TrainerWork& w, const CpuSet& cpus) const {
    std::map<int, int> per_node;
    for (int pu : cpus) {
      const Core* c = t_.CoreOfPu(pu);
      ++per_node[c == nullptr ? -1 : c->numa];
    }
    std::string out;
    for (const auto& [node, count] : per_node) {
      if (w.gpu_nodes.count(node) != 0) continue;
      const auto d = DistanceFromGpus(w, node);
      out += (out.empty() ? "" : ", ") + std::to_string(count) + " CPU(s) on node " +
             std::to_string(node) +
             (d ? " at distance " + std::to_string(*d) : std::string(" (distance unknown)"));
    }
    return out;
  }

  std::string LocalWhy(const TrainerWork& w) const {
    return "GPULocal: on NUMA node(s) " + NodeList(GpuNodes(w)) + ", local to its GPUs";
  }

  void KeepIncumbent(Allocator& alloc, TrainerWork& w) {
    if (w.skip || w.units <= 0) return;
    const TrainerPlacement* prev = Previous(w.placement.pod.uid);
    if (prev == nullptr || prev->cpus.empty()) return;
    const bool whole = WholeCores(*w.policy);
    // An incumbent on its GPUs' node(s) holding fewer units than it asks (its share of a shared
    // GPU's local cores, or its policy asks more now) keeps them and grows there when room
    // appears (GrowInPlace): it never moves to get its full size.
    int n = w.units;
    const int held = alloc.UnitsIn(prev->cpus, whole);
    if (held > 0 && held < w.units && Numa(*w.policy) != pb::IGNORE &&
        LocalTo(w, prev->cpus, alloc)) {
      n = held;
    }
    if (!alloc.StillValid(prev->cpus, whole, n)) return;
    const bool local = LocalTo(w, prev->cpus, alloc);
    const auto numa = Numa(*w.policy);
    if (numa == pb::REQUIRE_GPU_LOCAL && !local) return;
    if (numa == pb::PREFER_GPU_LOCAL && prev->gpu_local && !local) return;
    if (alloc.WholeFreeCores(prev->cpus) < 1) return;
    w.units = n;
    Finish(w, prev->cpus, alloc);
    w.placement.why = "IncumbentKept: keeps the CPUs it had" +
                      (w.placement.gpu_local ? std::string(", local to its GPUs (node(s) ") +
                                                   NodeList(GpuNodes(w)) + ")"
                                             : std::string());
  }

  // An incumbent kept off its GPUs' node(s) under PreferGPULocal moves back when the whole
  // trainer fits there now: its cores already there stay, the rest come from free local cores.
  void TryReturn(Allocator& alloc, TrainerWork& w) {
    if (w.skip || w.units <= 0 || w.placement.cpus.empty() || w.placement.gpu_local) return;
    if (w.gpu_nodes.empty() || Numa(*w.policy) != pb::PREFER_GPU_LOCAL) return;
    const bool whole = WholeCores(*w.policy);
    const int n = w.units;
    const CpuSet old = w.placement.cpus;
    alloc.Release(old);
    CpuSet chosen;
    int got = 0;
    if (whole) {
      for (const Core& c : t_.cores) {
        if (got < n && w.gpu_nodes.count(c.numa) != 0 && c.pus.IsSubsetOf(old)) {
          chosen = chosen.Union(c.pus);
          ++got;
        }
      }
    } else {
      for (int pu : old) {
        if (got < n && w.gpu_nodes.count(alloc.NumaOfPu(pu)) != 0) {
          chosen.Insert(pu);
          ++got;
        }
      }
    }
    for (const auto& [node, share] : w.gpu_nodes) {
      if (got < n) got += TakeFrom(alloc, whole, node, n - got, chosen);
    }
    if (got < n || alloc.WholeFreeCores(chosen) < 1) {
      alloc.Take(old);
      return;
    }
    const std::string from = OffNodeDetail(w, old);
    Finish(w, chosen, alloc);
    w.placement.why = "ReturnedToGPUNode: room appeared on its GPUs' NUMA node(s) " +
                      NodeList(GpuNodes(w)) + "; moved back from " + from;
  }

  void ReportFallback(const TrainerWork& w) {
    if (w.placement.cpus.empty() || w.placement.gpu_local || w.gpu_nodes.empty()) return;
    if (Numa(*w.policy) != pb::PREFER_GPU_LOCAL) return;
    Diag(w.placement.pod.uid, w.placement.policy, reason::kNUMAFallback,
         "not enough free cores on its GPUs' NUMA node(s) " + NodeList(GpuNodes(w)) + "; placed " +
             OffNodeDetail(w, w.placement.cpus) + "; it moves back when room appears there");
  }

  // Takes up to `want` units from `node` into `chosen`; returns how many it took.
  static int TakeFrom(const Allocator& alloc, bool whole, int node, int want, CpuSet& chosen) {
    int got = 0;
    for (const CpuSet& u : alloc.Units(whole, node, chosen)) {
      if (got == want) break;
      chosen = chosen.Union(u);
      ++got;
    }
    return got;
  }

  void PlaceNew(Allocator& alloc, TrainerWork& w) {
    if (w.skip || w.units <= 0) return;
    const std::string& uid = w.placement.pod.uid;
    const bool whole = WholeCores(*w.policy);
    if (w.units < w.demand) {
      // Its share of a shared GPU's local cores, which others of higher rank took meanwhile: a
      // share is only ever held on the GPU's node, so it is placed at its full size instead.
      size_t local_free = 0;
      for (const auto& [node, count] : w.gpu_nodes) {
        local_free += alloc.Units(whole, node, {}).size();
      }
      if (local_free < static_cast<size_t>(w.units)) w.units = w.demand;
    }
    const auto numa = Numa(*w.policy);
    const int n = w.units;
    CpuSet chosen;
    int got = 0;

    if (numa != pb::IGNORE && !w.gpu_nodes.empty()) {
      // Split over the GPUs' nodes in proportion to GPUs per node (largest remainder).
      int total_gpus = 0;
      for (const auto& [node, count] : w.gpu_nodes) total_gpus += count;
      std::map<int, int> share;
      std::vector<std::pair<int, int>> remainders;  // (-remainder, node)
      int assigned = 0;
      for (const auto& [node, count] : w.gpu_nodes) {
        share[node] = n * count / total_gpus;
        assigned += share[node];
        remainders.push_back({-(n * count % total_gpus), node});
      }
      std::sort(remainders.begin(), remainders.end());
      for (size_t i = 0; assigned < n; i = (i + 1) % remainders.size()) {
        ++share[remainders[i].second];
        ++assigned;
      }
      for (const auto& [node, want] : share) got += TakeFrom(alloc, whole, node, want, chosen);
      for (const auto& [node, count] : w.gpu_nodes) {
        if (got < n) got += TakeFrom(alloc, whole, node, n - got, chosen);
      }
      if (got < n && numa == pb::REQUIRE_GPU_LOCAL) {
        Diag(uid, w.placement.policy, reason::kNotEnoughLocalCores,
             "RequireGPULocal: only " + std::to_string(got) + " of " + std::to_string(n) +
                 (whole ? " cores" : " threads") + " free on the GPUs' NUMA node(s)");
        return;
      }
      if (got < n) {
        for (int node : FallbackOrder(w, alloc)) {
          if (got < n) got += TakeFrom(alloc, whole, node, n - got, chosen);
        }
      }
    } else {
      if (numa == pb::PREFER_GPU_LOCAL && w.locality_unknown) {
        Diag(uid, w.placement.policy, reason::kGPULocalityUnknown,
             "the NUMA node of the pod's GPUs is unknown; placed without locality");
      }
      // Best fit on one node, else spread from the emptiest node down.
      std::vector<std::pair<int, int>> free;  // (free units, node)
      for (int node : alloc.nodes()) {
        free.push_back({static_cast<int>(alloc.Units(whole, node, {}).size()), node});
      }
      int best = -2;
      int best_free = 0;
      for (const auto& [f, node] : free) {
        if (f >= n && (best == -2 || f < best_free)) {
          best = node;
          best_free = f;
        }
      }
      if (best != -2) {
        got = TakeFrom(alloc, whole, best, n, chosen);
      } else {
        std::stable_sort(free.begin(), free.end(),
                         [](const auto& a, const auto& b) { return a.first > b.first; });
        for (const auto& [f, node] : free) {
          if (got < n) got += TakeFrom(alloc, whole, node, n - got, chosen);
        }
      }
    }

    if (got < n || alloc.WholeFreeCores(chosen) < 1) {
      Diag(uid, w.placement.policy, reason::kNotEnoughCores,
           "needs " + std::to_string(n) + (whole ? " whole cores" : " threads") +
               "; not enough free while leaving one whole core for other pods");
      return;
    }
    // The NUMAFallback diagnostic comes from ReportFallback, on this plan and every later one.
    Finish(w, chosen, alloc);
    if (w.placement.gpu_local) {
      w.placement.why =
          cpu_nodes_.size() <= 1 ? "SingleNUMANode: the machine has one NUMA node" : LocalWhy(w);
    } else if (!w.gpu_nodes.empty() && numa != pb::IGNORE) {
      w.placement.why = "NUMAFallback: " + OffNodeDetail(w, chosen) +
                        ", nearest to its GPUs' node(s) " + NodeList(GpuNodes(w));
    } else if (w.locality_unknown && numa != pb::IGNORE) {
      w.placement.why = "GPULocalityUnknown: best fit on node(s) " +
                        NodeList(NodesOf(chosen, alloc)) + ", its GPUs' NUMA node is unknown";
    } else if (w.placement.gpu_ids.empty()) {
      w.placement.why = "NoGPUs: best fit on node(s) " + NodeList(NodesOf(chosen, alloc)) +
                        " (no GPU to be near)";
    } else {
      w.placement.why = "NUMAIgnored: best fit on node(s) " + NodeList(NodesOf(chosen, alloc));
    }
  }

  // NUMA nodes a GPU's cores come from (as in Size).
  std::set<int> NodesOfGpu(const std::string& bdf) const {
    if (cpu_nodes_.size() <= 1) return cpu_nodes_;
    const GpuDevice* dev = t_.FindGpu(bdf);
    if (dev == nullptr) return {};
    return std::set<int>(dev->local_numa.begin(), dev->local_numa.end());
  }

  static std::string BusList(const std::set<std::string>& bdfs) {
    std::string out;
    for (const auto& b : bdfs) out += (out.empty() ? "" : ",") + b;
    return out;
  }

  // MPS / time-sliced sharing: before the first newcomer holding a shared GPU is placed, the
  // GPU's free local units are split between the newcomers of the same priority holding it, in
  // proportion to what each asks (largest remainder), when they do not all fit (a higher
  // priority still goes first, whole). Incumbents keep what they hold (a newcomer
  // never evicts one); a trainer left with no local unit keeps its size and falls back (PREFER) or
  // fails (REQUIRE), with GPUSharedNoLocalCore.
  void SplitShared(const Allocator& alloc, std::vector<TrainerWork>& work, TrainerWork& w) {
    if (!w.shared || w.split_done) return;
    const bool whole = WholeCores(*w.policy);
    size_t pus_per_core = 1;
    for (const Core& c : t_.cores) pus_per_core = std::max(pus_per_core, c.pus.size());
    std::vector<TrainerWork*> members_all;
    for (const std::string& bdf : w.bus_ids) {
      std::vector<TrainerWork*> group;
      for (TrainerWork& o : work) {
        if (!o.shared || o.bus_ids.count(bdf) == 0 || o.split_done || o.skip || o.units <= 0 ||
            !o.placement.cpus.empty() || o.placement.dry_run != w.placement.dry_run ||
            WholeCores(*o.policy) != whole || o.policy->priority() != w.policy->priority()) {
          continue;
        }
        group.push_back(&o);
      }
      members_all.insert(members_all.end(), group.begin(), group.end());
      const std::set<int> nodes = NodesOfGpu(bdf);
      if (group.size() < 2 || nodes.empty()) continue;
      int capacity = 0;
      for (int node : nodes) capacity += static_cast<int>(alloc.Units(whole, node, {}).size());
      // The rail: one whole core stays free for everyone else.
      int free_here = 0;
      for (const Core& c : t_.cores) {
        if (nodes.count(c.numa) != 0 && alloc.CoreFree(c, {})) ++free_here;
      }
      if (alloc.WholeFreeCores() - free_here < 1) {
        capacity -= whole ? 1 : static_cast<int>(pus_per_core);
      }
      capacity = std::max(capacity, 0);
      int demand = 0;
      for (const TrainerWork* o : group) demand += o->units;
      if (demand <= capacity) continue;
      std::vector<int> share(group.size());
      std::vector<std::pair<int, size_t>> remainders;  // (-remainder, member)
      int assigned = 0;
      for (size_t i = 0; i < group.size(); ++i) {
        share[i] = capacity * group[i]->units / demand;
        assigned += share[i];
        remainders.push_back({-(capacity * group[i]->units % demand), i});
      }
      std::sort(remainders.begin(), remainders.end());
      for (size_t k = 0; assigned < capacity && k < remainders.size(); ++k) {
        ++share[remainders[k].second];
        ++assigned;
      }
      for (size_t i = 0; i < group.size(); ++i) {
        TrainerWork& o = *group[i];
        if (share[i] == 0) {
          Diag(o.placement.pod.uid, o.placement.policy, reason::kGPUSharedNoLocalCore,
               "GPU " + bdf + " is shared by " + std::to_string(group.size()) +
                   " newcomers asking " + std::to_string(demand) + (whole ? " cores" : " threads") +
                   "; its NUMA node(s) " + NodeList(nodes) + " have " + std::to_string(capacity) +
                   " free: none is left for this one");
        } else if (share[i] < o.units) {
          o.units = share[i];
        }
      }
    }
    for (TrainerWork* o : members_all) o->split_done = true;
    w.split_done = true;
  }

  // A trainer holding less than it asks (its share of a shared GPU) grows on its GPUs' node(s)
  // when room appears there; the cores it holds stay.
  void GrowInPlace(Allocator& alloc, TrainerWork& w) {
    if (w.placement.cpus.empty() || w.units >= w.demand || !w.placement.gpu_local) return;
    const bool whole = WholeCores(*w.policy);
    CpuSet chosen = w.placement.cpus;
    const int before = w.units;
    int got = w.units;
    for (const auto& [node, count] : w.gpu_nodes) {
      for (const CpuSet& u : alloc.Units(whole, node, chosen)) {
        if (got == w.demand) break;
        const CpuSet more = chosen.Union(u);
        if (alloc.WholeFreeCores(more) < 1) break;
        chosen = more;
        ++got;
      }
    }
    if (got == before) return;
    w.units = got;
    Finish(w, chosen, alloc);
    w.placement.why += "; GrewInPlace: from " + std::to_string(before) + " to " +
                       std::to_string(got) + (whole ? " cores" : " threads") +
                       " on its GPUs' node(s) " + NodeList(GpuNodes(w)) + ", keeping those it had";
  }

  // Every plan says why a trainer holds less than it asks.
  void ReportShort(TrainerWork& w) {
    if (w.placement.cpus.empty() || w.units >= w.demand) return;
    const bool whole = WholeCores(*w.policy);
    const std::string held = "holds " + std::to_string(w.units) + " of " +
                             std::to_string(w.demand) + (whole ? " cores" : " threads");
    std::string msg;
    const char* code = reason::kGPUSharedSplit;
    if (w.shared) {
      msg = held + ": GPU " + BusList(w.bus_ids) + " is shared with " +
            std::to_string(w.co_holders) + " other trainer(s) and its NUMA node(s) " +
            NodeList(GpuNodes(w)) + " have too few free cores for all of them; it grows there " +
            "when room appears";
    } else {
      code = reason::kFewerCoresThanAsked;
      msg = held + " on its GPUs' NUMA node(s) " + NodeList(GpuNodes(w)) +
            " (kept from an earlier plan rather than moved); it grows there when room appears";
    }
    Diag(w.placement.pod.uid, w.placement.policy, code, msg);
    w.placement.why += std::string("; ") + code + ": " + msg;
  }

  static std::set<int> NodesOf(const CpuSet& cpus, const Allocator& alloc) {
    std::set<int> out;
    for (int pu : cpus) out.insert(alloc.NumaOfPu(pu));
    return out;
  }

  void PlanNeighbours(const CpuSet& enforced_trainers) {
    std::set<std::string> trainer_uids;
    for (const auto& tr : in_.fence.trainers()) trainer_uids.insert(tr.pod().uid());
    const CpuSet left = t_.allowed_cpus.Minus(enforced_trainers).Minus(plan_.off_limits);

    std::vector<NeighbourAction> actions;
    std::set<std::string> seen;
    for (const pb::Neighbour& nb : in_.fence.neighbours()) {
      const std::string& uid = nb.pod().uid();
      if (trainer_uids.count(uid) != 0) {
        Diag(uid, nb.policy(), reason::kTrainerAndNeighbour,
             "pod is both a trainer and a neighbour; treated as a trainer");
        continue;
      }
      const pb::PolicyOptions* pol = FindPolicy(nb.policy());
      if (pol == nullptr) {
        Diag(uid, nb.policy(), reason::kPolicyNotFound,
             "neighbour names a policy absent from the NodeFence; not fenced");
        continue;
      }
      if (!seen.insert(uid).second) {
        Diag(uid, nb.policy(), reason::kDuplicatePod, "neighbour listed twice; first kept");
        continue;
      }
      NeighbourAction a;
      a.pod = ToPodIdentity(nb.pod());
      a.policy = pol->name();
      a.dry_run = DryRun(*pol);
      switch (pol->neighbour_fence()) {
        case pb::WEIGHT:
          a.fence = NeighbourFence::kWeight;
          a.weight = 1;
          break;
        case pb::CPUSET:
          if (in_.cpu_manager.OwnsCpusOf(uid)) {
            // kubelet's static CPU manager pinned a container of this pod to exclusive CPUs:
            // moving it would fight kubelet (and strand its exclusive CPU). Fence its share of
            // the pool with Idle instead; its cpusets stay kubelet's.
            Diag(uid, pol->name(), reason::kCpuManagerOwnsPod,
                 "kubelet's static CPU manager pins this pod; fenced with Idle, cpuset left to "
                 "kubelet");
            a.fence = NeighbourFence::kIdle;
            a.idle = true;
          } else if (left.empty()) {
            Diag(uid, pol->name(), reason::kNoCpusForNeighbours,
                 "no CPU is left outside trainers and off-limits CPUs; fenced with Idle instead");
            a.fence = NeighbourFence::kIdle;
            a.idle = true;
          } else {
            a.fence = NeighbourFence::kCpuset;
            a.cpus = left;
          }
          break;
        case pb::QUOTA:
          a.fence = NeighbourFence::kQuota;  // quota filled in below, per policy
          break;
        default:
          a.fence = NeighbourFence::kIdle;
          a.idle = true;
          break;
      }
      actions.push_back(std::move(a));
    }

    // QUOTA: per policy, split the cap in proportion to CPU requests.
    std::map<std::string, std::vector<NeighbourAction*>> by_policy;
    for (auto& a : actions) {
      if (a.fence == NeighbourFence::kQuota) by_policy[a.policy].push_back(&a);
    }
    for (auto& [name, group] : by_policy) {
      const pb::PolicyOptions* pol = FindPolicy(name);
      const int pct = pol->neighbour_max_cpu_percent() > 0 ? pol->neighbour_max_cpu_percent()
                                                           : kDefaultMaxCpuPercent;
      const int64_t total = static_cast<int64_t>(left.size()) * kPeriodUs * pct / 100;
      // Requests and limits come from the controller unchecked (up to INT64_MAX when a pod's
      // sum saturates): the sum and the products are taken in 128 bits, so no request, however
      // absurd, overflows the split; each share is at most `total`, which fits.
      __extension__ using Wide = unsigned __int128;
      Wide weights = 0;
      for (auto* a : group)
        weights += static_cast<Wide>(std::max<int64_t>(a->pod.cpu_request_milli, 0));
      for (auto* a : group) {
        const Wide req = static_cast<Wide>(std::max<int64_t>(a->pod.cpu_request_milli, 0));
        int64_t q = weights > 0 ? static_cast<int64_t>(static_cast<Wide>(total) * req / weights)
                                : total / static_cast<int64_t>(group.size());
        if (a->pod.cpu_limit_milli > 0) {
          const Wide cap = static_cast<Wide>(a->pod.cpu_limit_milli) * kPeriodUs / 1000;
          if (cap < static_cast<Wide>(q)) q = static_cast<int64_t>(cap);
        }
        a->quota = CpuQuota{std::max(q, kMinQuotaUs), kPeriodUs};
      }
    }

    std::sort(actions.begin(), actions.end(), [](const auto& a, const auto& b) {
      return std::tie(a.pod.ns, a.pod.name, a.pod.uid) < std::tie(b.pod.ns, b.pod.name, b.pod.uid);
    });
    plan_.neighbours = std::move(actions);
  }

  const Topology& t_;
  const PlanInput& in_;
  std::set<int> cpu_nodes_;          // NUMA nodes that have cores
  std::map<int, int> node_package_;  // NUMA node → package of its first core
  Plan plan_;
  std::map<std::string, const pb::PolicyOptions*> policies_;
};

}  // namespace

PodIdentity ToPodIdentity(const feedguard::v1::PodRef& pod) {
  PodIdentity id;
  id.uid = pod.uid();
  id.ns = pod.namespace_();
  id.name = pod.name();
  id.qos = QosClassFromWire(pod.qos_class());
  for (const auto& c : pod.containers()) id.container_ids.push_back(c.container_id());
  id.cpu_request_milli = pod.cpu_request_milli();
  id.cpu_limit_milli = pod.cpu_limit_milli();
  id.priority_class = pod.priority_class_name();
  return id;
}

Plan MakePlan(const Topology& topology, const PlanInput& input) {
  return Planner(topology, input).Run();
}

Plan PreviousPlanFromCpusets(const std::map<std::string, CpuSet>& cpus_by_pod_uid) {
  Plan plan;
  for (const auto& [uid, cpus] : cpus_by_pod_uid) {
    if (cpus.empty()) continue;
    TrainerPlacement t;
    t.pod.uid = uid;
    t.cpus = cpus;
    plan.trainers.push_back(std::move(t));
  }
  return plan;
}

namespace {

nlohmann::json PodJson(const PodIdentity& p) {
  return {{"uid", p.uid},
          {"namespace", p.ns},
          {"name", p.name},
          {"qos", std::string(QosClassName(p.qos))},
          {"containerIds", p.container_ids},
          {"cpuRequestMilli", p.cpu_request_milli},
          {"cpuLimitMilli", p.cpu_limit_milli}};
}

}  // namespace

nlohmann::json PlanToJson(const Plan& plan) {
  nlohmann::json j;
  j["fenceVersion"] = plan.fence_version;
  j["dryRun"] = plan.dry_run;
  j["offLimits"] = plan.off_limits.ToString();
  j["trainers"] = nlohmann::json::array();
  for (const auto& t : plan.trainers) {
    nlohmann::json a = {{"pod", PodJson(t.pod)},     {"policy", t.policy},
                        {"gpuIds", t.gpu_ids},       {"cpus", t.cpus.ToString()},
                        {"mems", t.mems.ToString()}, {"gpuLocal", t.gpu_local},
                        {"dryRun", t.dry_run}};
    if (t.weight) a["weight"] = *t.weight;
    if (!t.why.empty()) a["why"] = t.why;
    j["trainers"].push_back(std::move(a));
  }
  j["neighbours"] = nlohmann::json::array();
  for (const auto& n : plan.neighbours) {
    nlohmann::json a = {{"pod", PodJson(n.pod)},
                        {"policy", n.policy},
                        {"fence", std::string(NameOf(kNeighbourFenceNames, n.fence, "Idle"))},
                        {"dryRun", n.dry_run}};
    if (n.idle) a["idle"] = *n.idle;
    if (n.weight) a["weight"] = *n.weight;
    if (n.quota) a["quota"] = {{"quotaUs", n.quota->quota_us}, {"periodUs", n.quota->period_us}};
    if (n.cpus) a["cpus"] = n.cpus->ToString();
    j["neighbours"].push_back(std::move(a));
  }
  j["diagnostics"] = nlohmann::json::array();
  for (const auto& d : plan.diagnostics) {
    j["diagnostics"].push_back({{"podUid", d.pod_uid},
                                {"policy", d.policy},
                                {"reason", d.reason},
                                {"message", d.message}});
  }
  return j;
}

}  // namespace feedguard::agent
