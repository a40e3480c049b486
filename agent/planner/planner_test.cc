// planner_test.cc — MakePlan over the synthetic hwloc topologies in tests/fixtures/topologies and
// hwloc's own exports of real machines in tests/fixtures/topologies/hwloc.
#include "agent/planner/planner.h"

#include "feedguard/common/reasons.h"
#include "tests/fixtures/status_testing.h"

#include <gtest/gtest.h>
#include <hwloc.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <random>

namespace feedguard::agent {
namespace {

namespace pb = feedguard::v1;
const std::string kDir = FEEDGUARD_TOPOLOGY_FIXTURES;

Topology Topo(const std::string& name) {
  auto t = LoadTopologyFromXmlFile(kDir + "/" + name + ".xml");
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? *t : Topology{};
}

// Server GPUs: node 0 holds the first four, node 1 the last four.
const std::vector<std::string> kServerGpus = {"0000:1b:00.0", "0000:29:00.0", "0000:3d:00.0",
                                              "0000:4a:00.0", "0000:9c:00.0", "0000:ab:00.0",
                                              "0000:bd:00.0", "0000:ca:00.0"};

struct PolicySpec {
  std::string name = "p";
  int priority = 0;
  int cores = 0;
  int cores_per_gpu = 0;
  pb::Placement placement = pb::WHOLE_CORES;
  pb::NumaPolicy numa = pb::PREFER_GPU_LOCAL;
  pb::NeighbourFenceKind fence = pb::IDLE;
  pb::Mode mode = pb::ENFORCE;
  int max_cpu_percent = 0;
  int weight = 0;
};

class Input {
 public:
  Input& Policy(const PolicySpec& s) {
    auto* p = in_.fence.add_policies();
    p->set_name(s.name);
    p->set_priority(s.priority);
    p->set_mode(s.mode);
    p->mutable_trainer_cpu()->set_cores(s.cores);
    p->mutable_trainer_cpu()->set_cores_per_gpu(s.cores_per_gpu);
    p->mutable_trainer_cpu()->set_placement(s.placement);
    p->mutable_trainer_cpu()->set_numa(s.numa);
    p->mutable_trainer_cpu()->set_weight(s.weight);
    p->set_neighbour_fence(s.fence);
    p->set_neighbour_max_cpu_percent(s.max_cpu_percent);
    return *this;
  }
  // `gpus`: PCI addresses, one per allocated device (device ids are made up from them).
  Input& Trainer(const std::string& uid, const std::string& policy,
                 const std::vector<std::string>& gpus = {}, const std::string& ns = "ml") {
    auto* t = in_.fence.add_trainers();
    Pod(t->mutable_pod(), uid, ns, 0, 0);
    t->set_policy(policy);
    auto& resolved = in_.trainer_gpus[uid];
    for (size_t i = 0; i < gpus.size(); ++i) {
      const std::string id = "GPU-" + gpus[i] + "::" + std::to_string(i);
      t->add_gpu_ids(id);
      resolved.push_back({id, gpus[i], ""});
    }
    return *this;
  }
  Input& Neighbour(const std::string& uid, const std::string& policy, int64_t request = 0,
                   int64_t limit = 0) {
    auto* n = in_.fence.add_neighbours();
    Pod(n->mutable_pod(), uid, "batch", request, limit);
    n->set_policy(policy);
    return *this;
  }
  Input& Reserved(const std::string& cpus) {
    in_.reserved_cpus = *CpuSet::Parse(cpus);
    return *this;
  }
  PlanInput& get() { return in_; }
  Plan Make(const std::string& topo) { return MakePlan(Topo(topo), in_); }

 private:
  static void Pod(pb::PodRef* p, const std::string& uid, const std::string& ns, int64_t req,
                  int64_t lim) {
    p->set_uid(uid);
    p->set_namespace_(ns);
    p->set_name(uid);
    p->set_qos_class(pb::BURSTABLE);
    p->add_containers()->set_container_id("containerd://" + uid);
    p->set_cpu_request_milli(req);
    p->set_cpu_limit_milli(lim);
  }
  PlanInput in_;
};

// The entry of pod `uid` in `entries` (a failure, and an empty entry, when there is none).
template <typename Entry>
const Entry& ByUid(const std::vector<Entry>& entries, const std::string& uid, const char* what) {
  for (const auto& e : entries) {
    if (e.pod.uid == uid) return e;
  }
  static const Entry kNone;
  ADD_FAILURE() << "no " << what << " " << uid;
  return kNone;
}

const TrainerPlacement& T(const Plan& plan, const std::string& uid) {
  return ByUid(plan.trainers, uid, "trainer");
}

const NeighbourAction& N(const Plan& plan, const std::string& uid) {
  return ByUid(plan.neighbours, uid, "neighbour");
}

bool HasDiag(const Plan& plan, const std::string& uid, const std::string& reason) {
  return std::any_of(plan.diagnostics.begin(), plan.diagnostics.end(),
                     [&](const Diagnostic& d) { return d.pod_uid == uid && d.reason == reason; });
}

// Each trainer pinned in `previous` with its placement in `plan` (none without a previous plan).
std::vector<std::pair<const TrainerPlacement&, const TrainerPlacement&>> Incumbents(
    const std::optional<Plan>& previous, const Plan& plan) {
  std::vector<std::pair<const TrainerPlacement&, const TrainerPlacement&>> out;
  if (!previous) return out;
  for (const auto& before : previous->trainers) {
    if (before.cpus.empty()) continue;
    for (const auto& now : plan.trainers) {
      if (now.pod.uid == before.pod.uid) out.emplace_back(before, now);
    }
  }
  return out;
}

// An incumbent off its GPUs' node(s) that went back to them, saying so.
bool ReturnedToGpuNode(const TrainerPlacement& before, const TrainerPlacement& now) {
  return !before.gpu_local && now.gpu_local && now.why.rfind("ReturnedToGPUNode:", 0) == 0;
}

// An incumbent that kept every CPU and grew in place, saying so (not a move).
bool GrewInPlace(const TrainerPlacement& before, const TrainerPlacement& now) {
  return before.cpus.IsSubsetOf(now.cpus) && now.why.find("GrewInPlace:") != std::string::npos;
}

std::string Diags(const Plan& plan) { return PlanToJson(plan)["diagnostics"].dump(); }

// Invariants every plan must hold, whatever the input.
void CheckRails(const Topology& t, const PlanInput& in, const Plan& plan) {
  CpuSet used;
  for (const auto& tr : plan.trainers) {
    EXPECT_FALSE(tr.cpus.Intersects(used)) << "overlap at " << tr.pod.uid;
    used = used.Union(tr.cpus);
    EXPECT_FALSE(tr.cpus.Intersects(in.reserved_cpus)) << tr.pod.uid;
    EXPECT_FALSE(tr.cpus.Intersects(in.cpu_manager.ExclusiveCpus())) << tr.pod.uid;
    EXPECT_TRUE(tr.cpus.IsSubsetOf(t.allowed_cpus)) << tr.pod.uid;
  }
  int free_whole = 0;
  for (const Core& c : t.cores) {
    if (!c.pus.Intersects(used) && !c.pus.Intersects(plan.off_limits) &&
        c.pus.IsSubsetOf(t.allowed_cpus)) {
      ++free_whole;
    }
  }
  if (!used.empty()) {
    EXPECT_GE(free_whole, 1) << "no whole core left for other pods";
  }
}

TEST(PlannerTest, WholeCoresKeepSmtSiblingsTogether) {
  Input in;
  in.Policy({.name = "p", .cores = 4}).Trainer("a", "p", {kServerGpus[0]});
  const Plan plan = in.Make("server-2s-8gpu");
  const auto& a = T(plan, "a");
  EXPECT_EQ(a.cpus.ToString(), "0-3,64-67");
  EXPECT_EQ(a.mems.ToString(), "0");
  EXPECT_TRUE(a.gpu_local);
  const Topology topo = Topo("server-2s-8gpu");
  for (int pu : a.cpus) EXPECT_TRUE(topo.CoreOfPu(pu)->pus.IsSubsetOf(a.cpus)) << pu;
  EXPECT_TRUE(plan.diagnostics.empty()) << Diags(plan);
  CheckRails(Topo("server-2s-8gpu"), in.get(), plan);
}

TEST(PlannerTest, ThreadsCountHardwareThreadsAndFillSiblingsFirst) {
  Input in;
  in.Policy({.name = "thr", .cores = 3, .placement = pb::THREADS})
      .Trainer("a", "thr", {kServerGpus[0]})
      .Trainer("b", "thr", {kServerGpus[1]});
  const Plan plan = in.Make("server-2s-8gpu");
  // a: core 0 (0,64) + one thread of core 1; b: the other thread of core 1 + core 2.
  EXPECT_EQ(T(plan, "a").cpus.ToString(), "0-1,64");
  EXPECT_EQ(T(plan, "b").cpus.ToString(), "2,65-66");
}

TEST(PlannerTest, CoresPerGpuFollowTheGpusNumaNodes) {
  Input in;
  in.Policy({.name = "p", .cores_per_gpu = 3})
      .Trainer("one", "p", {kServerGpus[5]})                   // node 1
      .Trainer("two", "p", {kServerGpus[1], kServerGpus[6]});  // one GPU per node
  const Plan plan = in.Make("server-2s-8gpu");
  const auto& one = T(plan, "one");
  EXPECT_EQ(one.cpus.size(), 6u);
  EXPECT_EQ(one.mems.ToString(), "1");
  EXPECT_TRUE(one.gpu_local);
  const auto& two = T(plan, "two");
  EXPECT_EQ(two.cpus.size(), 12u);
  EXPECT_EQ(two.cpus.Intersect(Topo("server-2s-8gpu").numa_nodes[0].cpus).size(), 6u);
  EXPECT_EQ(two.cpus.Intersect(Topo("server-2s-8gpu").numa_nodes[1].cpus).size(), 6u);
  EXPECT_EQ(two.mems.ToString(), "0-1");
  EXPECT_TRUE(two.gpu_local);
}

TEST(PlannerTest, TimeSlicedReplicasCountOncePerReplica) {
  Input in;
  // Two replicas of the same physical GPU: 2 devices → 2 × 2 cores, all on that GPU's node.
  in.Policy({.name = "p", .cores_per_gpu = 2}).Trainer("r", "p", {kServerGpus[4], kServerGpus[4]});
  const Plan plan = in.Make("server-2s-8gpu");
  EXPECT_EQ(T(plan, "r").cpus.ToString(), "32-35,96-99");
  EXPECT_EQ(T(plan, "r").gpu_ids.size(), 2u);
}

TEST(PlannerTest, PreferFallsBackToOtherNodeWithDiagnostic) {
  Input in;
  in.Policy({.name = "big", .priority = 10, .cores = 30, .numa = pb::REQUIRE_GPU_LOCAL})
      .Policy({.name = "pref", .cores = 4})
      .Trainer("big", "big", {kServerGpus[4]})
      .Trainer("late", "pref", {kServerGpus[5]});
  const Plan plan = in.Make("server-2s-8gpu");
  EXPECT_EQ(T(plan, "big").cpus.size(), 60u);
  const auto& late = T(plan, "late");
  EXPECT_EQ(late.cpus.size(), 8u);
  EXPECT_EQ(late.cpus.Intersect(Topo("server-2s-8gpu").numa_nodes[1].cpus).size(), 4u);
  EXPECT_EQ(late.mems.ToString(), "0-1");
  EXPECT_FALSE(late.gpu_local);
  EXPECT_TRUE(HasDiag(plan, "late", "NUMAFallback")) << Diags(plan);
  CheckRails(Topo("server-2s-8gpu"), in.get(), plan);
}

TEST(PlannerTest, RequireFailsTheTrainerWhenLocalCoresRunOut) {
  Input in;
  in.Policy({.name = "big", .priority = 10, .cores = 30, .numa = pb::REQUIRE_GPU_LOCAL})
      .Policy({.name = "req", .cores = 4, .numa = pb::REQUIRE_GPU_LOCAL})
      .Trainer("big", "big", {kServerGpus[4]})
      .Trainer("late", "req", {kServerGpus[5]});
  const Plan plan = in.Make("server-2s-8gpu");
  EXPECT_TRUE(T(plan, "late").cpus.empty());
  EXPECT_TRUE(HasDiag(plan, "late", "NotEnoughLocalCores")) << Diags(plan);
}

TEST(PlannerTest, IgnoreBestFitsOneNode) {
  Input in;
  in.Policy({.name = "big", .priority = 10, .cores = 28})
      .Policy({.name = "ign", .cores = 4, .numa = pb::IGNORE})
      .Trainer("big", "big", {kServerGpus[0]})
      .Trainer("x", "ign", {kServerGpus[1]});
  const Plan plan = in.Make("server-2s-8gpu");
  // Node 0 has 4 free cores left, node 1 has 32: best fit is node 0.
  EXPECT_EQ(T(plan, "x").cpus.ToString(), "28-31,92-95");
  EXPECT_TRUE(plan.diagnostics.empty()) << Diags(plan);
}

TEST(PlannerTest, GpuWithoutNumaNode) {
  Input in;
  in.Policy({.name = "pref", .cores = 2})
      .Policy({.name = "req", .cores = 2, .numa = pb::REQUIRE_GPU_LOCAL})
      .Policy({.name = "ign", .cores = 2, .numa = pb::IGNORE})
      .Trainer("p", "pref", {"0000:00:1e.0"})
      .Trainer("r", "req", {"0000:00:1e.0"})
      .Trainer("i", "ign", {"0000:00:1e.0"});
  const Plan plan = in.Make("nonuma-gpu-2s");
  EXPECT_EQ(T(plan, "p").cpus.size(), 4u);
  EXPECT_FALSE(T(plan, "p").gpu_local);
  EXPECT_TRUE(HasDiag(plan, "p", "GPULocalityUnknown")) << Diags(plan);
  EXPECT_TRUE(T(plan, "r").cpus.empty());
  EXPECT_TRUE(HasDiag(plan, "r", "GPULocalityUnknown")) << Diags(plan);
  EXPECT_EQ(T(plan, "i").cpus.size(), 4u);
  EXPECT_FALSE(HasDiag(plan, "i", "GPULocalityUnknown"));
}

TEST(PlannerTest, SingleNumaNodeIsAlwaysLocal) {
  Input in;
  in.Policy({.name = "req", .cores_per_gpu = 3, .numa = pb::REQUIRE_GPU_LOCAL})
      .Trainer("a", "req", {"0000:01:00.0"});
  const Plan plan = in.Make("ws-1s-1gpu");
  EXPECT_EQ(T(plan, "a").cpus.ToString(), "0-2,8-10");
  EXPECT_TRUE(T(plan, "a").gpu_local);
}

TEST(PlannerTest, UnknownGpuIsDiagnosed) {
  Input in;
  in.Policy({.name = "p", .cores_per_gpu = 1}).Trainer("a", "p", {"0000:77:00.0"});
  const Plan plan = in.Make("server-2s-8gpu");
  EXPECT_TRUE(HasDiag(plan, "a", "GPUNotFound")) << Diags(plan);
  EXPECT_EQ(T(plan, "a").cpus.size(), 2u);  // still sized by the device it got
  // Issue 15 (small): the diagnostic names the PCI address the id resolved to (here the BMC's
  // ASPEED VGA, a PCI device that is no NVIDIA GPU).
  Input vga;
  vga.Policy({.name = "p", .cores_per_gpu = 1}).Trainer("a", "p", {"0000:03:00.0"});
  EXPECT_NE(Diags(vga.Make("server-2s-8gpu")).find("PCI 0000:03:00.0"), std::string::npos)
      << Diags(vga.Make("server-2s-8gpu"));  // ... and says what is there: another device (vendor,
                                             // device, class) or nothing at all.
  EXPECT_NE(Diags(vga.Make("server-2s-8gpu"))
                .find("not an NVIDIA GPU but another device (vendor 1a03, device 2000, class "
                      "0300)"),
            std::string::npos)
      << Diags(vga.Make("server-2s-8gpu"));
  Input nic;
  nic.Policy({.name = "p", .cores_per_gpu = 1}).Trainer("a", "p", {"0000:0c:00.0"});
  EXPECT_NE(Diags(nic.Make("server-2s-8gpu")).find("vendor 15b3"), std::string::npos)
      << Diags(nic.Make("server-2s-8gpu"));
  EXPECT_NE(Diags(plan).find("PCI 0000:77:00.0, which this node's topology does not have"),
            std::string::npos)
      << Diags(plan);
}

TEST(PlannerTest, NoCoresAskedMeansNotPinnedAndNoDiagnostic) {
  Input in;
  in.Policy({.name = "p"}).Trainer("a", "p", {kServerGpus[0]});
  const Plan plan = in.Make("server-2s-8gpu");
  EXPECT_TRUE(T(plan, "a").cpus.empty());
  EXPECT_TRUE(plan.diagnostics.empty()) << Diags(plan);
}

TEST(PlannerTest, TrainerWeightComesFromItsPolicyPinnedOrNot) {
  Input in;
  in.Policy({.name = "boost", .weight = 10000})
      .Policy({.name = "pinned", .cores = 2, .weight = 400})
      .Policy({.name = "plain"})
      .Trainer("a", "boost", {kServerGpus[0]})
      .Trainer("b", "pinned", {kServerGpus[1]})
      .Trainer("c", "plain", {kServerGpus[2]});
  const Plan plan = in.Make("server-2s-8gpu");
  EXPECT_EQ(T(plan, "a").weight, std::optional<uint64_t>(10000));
  EXPECT_TRUE(T(plan, "a").cpus.empty());
  EXPECT_EQ(T(plan, "b").weight, std::optional<uint64_t>(400));
  EXPECT_FALSE(T(plan, "b").cpus.empty());
  EXPECT_FALSE(T(plan, "c").weight.has_value());
  EXPECT_EQ(PlanToJson(plan)["trainers"][0].value("weight", 0), 10000);
}

TEST(PlannerTest, RailsReservedCpusAndOneWholeCoreForOthers) {
  {
    Input in;  // 4-core VM, core 0 reserved: at most 2 cores for trainers.
    in.Reserved("0").Policy({.name = "p", .cores = 3}).Trainer("a", "p", {"0000:00:04.0"});
    const Plan plan = in.Make("vm-nosmt-1gpu");
    EXPECT_TRUE(T(plan, "a").cpus.empty());
    EXPECT_TRUE(HasDiag(plan, "a", "NotEnoughCores")) << Diags(plan);
    EXPECT_EQ(plan.off_limits.ToString(), "0");
  }
  {
    Input in;
    in.Reserved("0").Policy({.name = "p", .cores = 2}).Trainer("a", "p", {"0000:00:04.0"});
    const Plan plan = in.Make("vm-nosmt-1gpu");
    EXPECT_EQ(T(plan, "a").cpus.ToString(), "1-2");
    CheckRails(Topo("vm-nosmt-1gpu"), in.get(), plan);
  }
  {
    Input in;  // every core asked for: refused, one must stay.
    in.Policy({.name = "p", .cores = 64, .numa = pb::IGNORE}).Trainer("a", "p");
    const Plan plan = in.Make("server-2s-8gpu");
    EXPECT_TRUE(T(plan, "a").cpus.empty());
    EXPECT_TRUE(HasDiag(plan, "a", "NotEnoughCores"));
  }
  {
    Input in;  // a reserved thread spoils its whole core for WHOLE_CORES.
    in.Reserved("0").Policy({.name = "p", .cores = 62, .numa = pb::IGNORE}).Trainer("a", "p");
    const Plan plan = in.Make("server-2s-8gpu");
    EXPECT_EQ(T(plan, "a").cpus.size(), 124u);
    EXPECT_FALSE(T(plan, "a").cpus.Contains(64));
    CheckRails(Topo("server-2s-8gpu"), in.get(), plan);
  }
  {
    Input in;  // everything reserved: nothing pinned, node-wide diagnostic.
    in.Reserved("0-3").Policy({.name = "p", .cores = 1}).Trainer("a", "p");
    const Plan plan = in.Make("vm-nosmt-1gpu");
    EXPECT_TRUE(T(plan, "a").cpus.empty());
    EXPECT_TRUE(HasDiag(plan, "", "NoFreeCore")) << Diags(plan);
  }
}

TEST(PlannerTest, OverSubscriptionDropsTheLowestPriorityThenLastByName) {
  Input in;  // 4 cores, one must stay free: 3 to share.
  in.Policy({.name = "hi", .priority = 10, .cores = 2})
      .Policy({.name = "lo", .priority = 5, .cores = 1})
      .Trainer("c", "lo", {}, "ns-b")
      .Trainer("b", "lo", {}, "ns-a")
      .Trainer("a", "hi", {}, "ns-z");
  const Plan plan = in.Make("vm-nosmt-1gpu");
  EXPECT_EQ(T(plan, "a").cpus.size(), 2u);
  EXPECT_EQ(T(plan, "b").cpus.size(), 1u);
  EXPECT_TRUE(T(plan, "c").cpus.empty());
  EXPECT_TRUE(HasDiag(plan, "c", "NotEnoughCores")) << Diags(plan);
  EXPECT_FALSE(HasDiag(plan, "a", "NotEnoughCores"));
  // Trainers come out in (priority desc, namespace, name) order.
  ASSERT_EQ(plan.trainers.size(), 3u);
  EXPECT_EQ(plan.trainers[0].pod.uid, "a");
  EXPECT_EQ(plan.trainers[1].pod.uid, "b");
  EXPECT_EQ(plan.trainers[2].pod.uid, "c");
}

TEST(PlannerTest, NeighbourFenceKinds) {
  Input in;
  in.Reserved("0,8")
      .Policy({.name = "idle", .cores = 4, .fence = pb::IDLE})
      .Policy({.name = "unspec", .fence = pb::NEIGHBOUR_FENCE_UNSPECIFIED})
      .Policy({.name = "weight", .fence = pb::WEIGHT})
      .Policy({.name = "cpuset", .fence = pb::CPUSET})
      .Policy({.name = "quota", .fence = pb::QUOTA, .max_cpu_percent = 50})
      .Policy({.name = "quota75", .fence = pb::QUOTA})
      .Trainer("t", "idle", {"0000:01:00.0"})
      .Neighbour("n-idle", "idle")
      .Neighbour("n-unspec", "unspec")
      .Neighbour("n-weight", "weight")
      .Neighbour("n-cpuset", "cpuset")
      .Neighbour("q1", "quota", 1000)
      .Neighbour("q3", "quota", 3000)
      .Neighbour("q-lim", "quota", 0, 100)
      .Neighbour("q75-a", "quota75")
      .Neighbour("q75-b", "quota75");
  const Plan plan = in.Make("ws-1s-1gpu");
  // Trainer: 4 whole cores avoiding reserved core 0 (0,8) → cores 1-4.
  EXPECT_EQ(T(plan, "t").cpus.ToString(), "1-4,9-12");
  EXPECT_EQ(N(plan, "n-idle").fence, NeighbourFence::kIdle);
  EXPECT_EQ(N(plan, "n-idle").idle, std::optional<bool>(true));
  EXPECT_FALSE(N(plan, "n-idle").weight.has_value());
  EXPECT_EQ(N(plan, "n-unspec").idle, std::optional<bool>(true));
  EXPECT_EQ(N(plan, "n-weight").weight, std::optional<uint64_t>(1));
  EXPECT_FALSE(N(plan, "n-weight").idle.has_value());
  ASSERT_TRUE(N(plan, "n-cpuset").cpus.has_value());
  EXPECT_EQ(N(plan, "n-cpuset").cpus->ToString(), "5-7,13-15");
  // Left after trainers and off-limits: 6 CPUs. quota: 50% → 300000 us over requests 1:3:0.
  ASSERT_TRUE(N(plan, "q1").quota.has_value());
  EXPECT_EQ(N(plan, "q1").quota->quota_us, 75000);
  EXPECT_EQ(N(plan, "q1").quota->period_us, 100000);
  EXPECT_EQ(N(plan, "q3").quota->quota_us, 225000);
  EXPECT_EQ(N(plan, "q-lim").quota->quota_us, 1000);  // no request: the floor
  // quota75: default 75% of 6 CPUs = 450000 us, split equally (no requests).
  EXPECT_EQ(N(plan, "q75-a").quota->quota_us, 225000);
  EXPECT_EQ(N(plan, "q75-b").quota->quota_us, 225000);
  EXPECT_TRUE(plan.diagnostics.empty()) << Diags(plan);
}

TEST(PlannerTest, QuotaNeverExceedsThePodsOwnLimit) {
  Input in;
  in.Policy({.name = "quota", .fence = pb::QUOTA}).Neighbour("n", "quota", 500, 500);
  const Plan plan = in.Make("ws-1s-1gpu");
  EXPECT_EQ(N(plan, "n").quota->quota_us, 50000);  // 0.5 CPU limit, not 75% of 16
}

TEST(PlannerTest, AbsurdRequestsAndLimitsDoNotOverflowTheQuotaSplit) {
  // The controller forwards requests up to INT64_MAX (a saturated per-pod sum); the split must
  // stay exact and bounded (UBSan flagged the 64-bit products before).
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  Input in;
  in.Policy({.name = "quota", .fence = pb::QUOTA})
      .Neighbour("huge-a", "quota", kMax, kMax)
      .Neighbour("huge-b", "quota", kMax)
      .Neighbour("tiny", "quota", 1);
  const Plan plan = in.Make("ws-1s-1gpu");
  // 75% of 16 CPUs = 1200000 us, split by request (exact, rounded down): the two saturated pods
  // just under half each (the 1m pod's share of the weight), the 1m pod the floor.
  EXPECT_EQ(N(plan, "huge-a").quota->quota_us, 599999);
  EXPECT_EQ(N(plan, "huge-b").quota->quota_us, 599999);
  EXPECT_EQ(N(plan, "tiny").quota->quota_us, 1000);
}

TEST(PlannerTest, EmptyNeighbourCpusetFallsBackToIdle) {
  Input in;
  in.Reserved("0-3").Policy({.name = "cs", .fence = pb::CPUSET}).Neighbour("n", "cs");
  const Plan plan = in.Make("vm-nosmt-1gpu");
  EXPECT_EQ(N(plan, "n").fence, NeighbourFence::kIdle);
  EXPECT_EQ(N(plan, "n").idle, std::optional<bool>(true));
  EXPECT_FALSE(N(plan, "n").cpus.has_value());
  EXPECT_TRUE(HasDiag(plan, "n", "NoCpusForNeighbours")) << Diags(plan);
}

TEST(PlannerTest, CpuManagerCpusAreOffLimitsAndItsPodsAreNotPinned) {
  Input in;
  in.get().cpu_manager.policy_name = "static";
  in.get().cpu_manager.entries["guaranteed-pod"]["main"] = CpuSet{0, 1, 8, 9};
  in.get().cpu_manager.entries["owned-trainer"]["main"] = CpuSet{2, 10};
  in.Policy({.name = "p", .cores = 2, .fence = pb::CPUSET})
      .Trainer("a", "p", {"0000:01:00.0"})
      .Trainer("owned-trainer", "p", {"0000:01:00.0"})
      .Neighbour("n", "p");
  const Plan plan = in.Make("ws-1s-1gpu");
  EXPECT_EQ(plan.off_limits.ToString(), "0-2,8-10");
  EXPECT_EQ(T(plan, "a").cpus.ToString(), "3-4,11-12");
  EXPECT_TRUE(T(plan, "owned-trainer").cpus.empty());
  EXPECT_TRUE(HasDiag(plan, "owned-trainer", "CpuManagerOwnsPod")) << Diags(plan);
  EXPECT_EQ(N(plan, "n").cpus->ToString(), "5-7,13-15");
  CheckRails(Topo("ws-1s-1gpu"), in.get(), plan);
}

TEST(PlannerTest, CpusetFenceNeverMovesANeighbourTheCpuManagerPinned) {
  Input in;
  in.get().cpu_manager.policy_name = "static";
  in.get().cpu_manager.entries["pinned-nb"]["main"] = CpuSet{1, 9};
  in.Policy({.name = "p", .fence = pb::CPUSET}).Neighbour("pinned-nb", "p").Neighbour("n", "p");
  const Plan plan = in.Make("ws-1s-1gpu");
  EXPECT_FALSE(N(plan, "pinned-nb").cpus.has_value());
  EXPECT_EQ(N(plan, "pinned-nb").fence, NeighbourFence::kIdle);
  EXPECT_EQ(N(plan, "pinned-nb").idle, std::optional<bool>(true));
  EXPECT_TRUE(HasDiag(plan, "pinned-nb", "CpuManagerOwnsPod")) << Diags(plan);
  ASSERT_TRUE(N(plan, "n").cpus.has_value());
  EXPECT_FALSE(N(plan, "n").cpus->Intersects(CpuSet{1, 9}));
}

// The rail no fence overrides: a protected pod (kube-system, a system-*-critical priority class,
// the agent itself) named as a trainer — by a fence file, or a controller with other rails — is
// never pinned, so it reserves no core: neighbours' cpusets keep every core it would have taken,
// and it gets no trainer weight. As an incumbent (an older agent's checkpoint) it loses its cores.
TEST(PlannerTest, ProtectedPodsNamedAsTrainersReserveNoCore) {
  Input in;
  in.Policy({.name = "p", .cores = 2, .fence = pb::CPUSET, .weight = 500})
      .Trainer("sys", "p", {"0000:01:00.0"}, "kube-system")
      .Trainer("critical", "p", {"0000:01:00.0"})
      .Trainer("real", "p", {"0000:01:00.0"})
      .Neighbour("n", "p");
  in.get().fence.mutable_trainers(1)->mutable_pod()->set_priority_class_name(
      "system-node-critical");
  in.get().previous = PreviousPlanFromCpusets({{"sys", *CpuSet::Parse("2-3,10-11")}});
  const Plan plan = in.Make("ws-1s-1gpu");
  for (const char* uid : {"sys", "critical"}) {
    EXPECT_TRUE(T(plan, uid).cpus.empty()) << uid << ": " << T(plan, uid).cpus.ToString();
    EXPECT_FALSE(T(plan, uid).weight.has_value()) << uid;
    EXPECT_TRUE(HasDiag(plan, uid, reason::kProtectedPod)) << Diags(plan);
  }
  EXPECT_EQ(T(plan, "real").cpus.ToString(), "0-1,8-9");
  EXPECT_EQ(T(plan, "real").weight, std::optional<uint64_t>(500));
  ASSERT_TRUE(N(plan, "n").cpus.has_value());
  EXPECT_EQ(N(plan, "n").cpus->ToString(), "2-7,10-15");
  CheckRails(Topo("ws-1s-1gpu"), in.get(), plan);
}

TEST(PlannerTest, TheAgentsOwnPodNamedAsATrainerReservesNoCore) {
  Input in;
  in.Policy({.name = "p", .cores = 1, .fence = pb::CPUSET})
      .Trainer("agent-pod", "p", {"0000:01:00.0"}, "feedguard-system")
      .Neighbour("n", "p");
  in.get().protected_pods.self_pod_uid = "agent-pod";
  const Plan plan = in.Make("ws-1s-1gpu");
  EXPECT_TRUE(T(plan, "agent-pod").cpus.empty()) << T(plan, "agent-pod").cpus.ToString();
  EXPECT_TRUE(HasDiag(plan, "agent-pod", reason::kProtectedPod)) << Diags(plan);
  EXPECT_EQ(N(plan, "n").cpus->ToString(), "0-15");
  // Without the rail (another agent's pod) the same pod is an ordinary trainer.
  in.get().protected_pods.self_pod_uid = "someone-else";
  EXPECT_EQ(T(in.Make("ws-1s-1gpu"), "agent-pod").cpus.ToString(), "0,8");
}

TEST(PlannerTest, TrainerAndNeighbourIsATrainer) {
  Input in;
  in.Policy({.name = "p", .cores = 1}).Trainer("a", "p").Neighbour("a", "p").Neighbour("b", "p");
  const Plan plan = in.Make("ws-1s-1gpu");
  EXPECT_EQ(T(plan, "a").cpus.size(), 2u);
  ASSERT_EQ(plan.neighbours.size(), 1u);
  EXPECT_EQ(plan.neighbours[0].pod.uid, "b");
  EXPECT_TRUE(HasDiag(plan, "a", "TrainerAndNeighbour")) << Diags(plan);
}

TEST(PlannerTest, UnknownPolicyIsDiagnosed) {
  Input in;
  in.Policy({.name = "p", .cores = 1}).Trainer("a", "nope").Neighbour("b", "nope");
  const Plan plan = in.Make("ws-1s-1gpu");
  EXPECT_TRUE(plan.trainers.empty());
  EXPECT_TRUE(plan.neighbours.empty());
  EXPECT_TRUE(HasDiag(plan, "a", "PolicyNotFound"));
  EXPECT_TRUE(HasDiag(plan, "b", "PolicyNotFound"));
}

TEST(PlannerTest, DryRunIsPlannedAfterEnforcedAndMarked) {
  Input in;  // 4-core VM, 3 to share; the dry-run trainer sorts first by priority.
  in.Policy({.name = "dry", .priority = 100, .cores = 2, .fence = pb::CPUSET, .mode = pb::DRY_RUN})
      .Policy({.name = "enf", .cores = 2, .fence = pb::CPUSET})
      .Trainer("d", "dry")
      .Trainer("e", "enf")
      .Neighbour("nd", "dry")
      .Neighbour("ne", "enf");
  const Plan plan = in.Make("vm-nosmt-1gpu");
  EXPECT_FALSE(plan.dry_run);
  EXPECT_EQ(T(plan, "e").cpus.ToString(), "0-1");
  EXPECT_FALSE(T(plan, "e").dry_run);
  EXPECT_TRUE(T(plan, "d").dry_run);
  EXPECT_TRUE(T(plan, "d").cpus.empty());  // only one core would remain: refused
  EXPECT_TRUE(HasDiag(plan, "d", "NotEnoughCores"));
  EXPECT_TRUE(N(plan, "nd").dry_run);
  EXPECT_FALSE(N(plan, "ne").dry_run);
  EXPECT_EQ(N(plan, "ne").cpus->ToString(), "2-3");

  Input all_dry;
  all_dry.Policy({.name = "dry", .cores = 1, .mode = pb::DRY_RUN}).Trainer("d", "dry");
  const Plan dry_plan = all_dry.Make("vm-nosmt-1gpu");
  EXPECT_TRUE(dry_plan.dry_run);
  EXPECT_EQ(T(dry_plan, "d").cpus.ToString(), "0");
}

TEST(PlannerTest, DeterministicAndIndependentOfInputOrder) {
  Input in;
  in.Reserved("0,64")
      .Policy({.name = "a", .priority = 1, .cores_per_gpu = 3, .fence = pb::QUOTA})
      .Policy({.name = "b", .cores = 5, .placement = pb::THREADS, .fence = pb::CPUSET});
  for (int i = 0; i < 8; ++i) {
    in.Trainer("t" + std::to_string(i), i % 2 ? "a" : "b", {kServerGpus[(i * 3) % 8]});
    in.Neighbour("n" + std::to_string(i), i % 2 ? "a" : "b", 100 * i);
  }
  const std::string first = PlanToJson(in.Make("server-2s-8gpu")).dump();
  EXPECT_EQ(first, PlanToJson(in.Make("server-2s-8gpu")).dump());

  PlanInput shuffled = in.get();
  std::mt19937 rng(7);
  std::shuffle(shuffled.fence.mutable_trainers()->begin(), shuffled.fence.mutable_trainers()->end(),
               rng);
  std::shuffle(shuffled.fence.mutable_neighbours()->begin(),
               shuffled.fence.mutable_neighbours()->end(), rng);
  EXPECT_EQ(first, PlanToJson(MakePlan(Topo("server-2s-8gpu"), shuffled)).dump());
}

TEST(PlannerTest, IncumbentsKeepTheirCoresWhenOthersComeAndGo) {
  Input in;
  in.Policy({.name = "p", .cores = 2}).Trainer("b", "p", {kServerGpus[0]});
  Plan p1 = in.Make("server-2s-8gpu");
  EXPECT_EQ(T(p1, "b").cpus.ToString(), "0-1,64-65");
  // "a" sorts before "b": from scratch it would take b's cores; with the previous plan, b stays.
  Input in2;
  in2.Policy({.name = "p", .cores = 2})
      .Trainer("a", "p", {kServerGpus[0]})
      .Trainer("b", "p", {kServerGpus[0]});
  in2.get().previous = p1;
  Plan p2 = in2.Make("server-2s-8gpu");
  EXPECT_EQ(T(p2, "b").cpus.ToString(), "0-1,64-65");
  EXPECT_EQ(T(p2, "a").cpus.ToString(), "2-3,66-67");
  // An incumbent whose cores became reserved is re-placed.
  in2.get().previous = p2;
  in2.Reserved("1");
  Plan p3 = in2.Make("server-2s-8gpu");
  EXPECT_EQ(T(p3, "a").cpus.ToString(), "2-3,66-67");
  EXPECT_FALSE(T(p3, "b").cpus.Contains(1));
  EXPECT_EQ(T(p3, "b").cpus.size(), 4u);
}

// Property: over many random add/remove steps, a trainer placed in the previous plan never
// moves, and every plan keeps the rails.
TEST(PlannerTest, StabilityUnderChurnProperty) {
  const Topology topo = Topo("server-2s-8gpu");
  std::mt19937 rng(20240611);
  struct Pod {
    std::string uid;
    std::string policy;
    std::vector<std::string> gpus;
  };
  std::vector<Pod> universe;
  const std::vector<std::string> policies = {"prefer", "ignore", "require", "threads"};
  for (int i = 0; i < 40; ++i) {
    Pod p;
    p.uid = "pod-" + std::to_string(i);
    p.policy = policies[rng() % policies.size()];
    const int gpus = 1 + static_cast<int>(rng() % 3);
    for (int g = 0; g < gpus; ++g) p.gpus.push_back(kServerGpus[rng() % kServerGpus.size()]);
    universe.push_back(p);
  }
  std::vector<bool> present(universe.size(), false);
  std::optional<Plan> previous;
  int moves_checked = 0;
  int placed_total = 0;
  for (int step = 0; step < 400; ++step) {
    const size_t k = rng() % universe.size();
    present[k] = !present[k];
    Input in;
    in.Reserved("0,64")
        .Policy({.name = "prefer", .priority = 3, .cores_per_gpu = 2})
        .Policy({.name = "ignore", .priority = 1, .cores = 3, .numa = pb::IGNORE})
        .Policy(
            {.name = "require", .priority = 2, .cores_per_gpu = 2, .numa = pb::REQUIRE_GPU_LOCAL})
        .Policy({.name = "threads", .cores = 3, .placement = pb::THREADS});
    for (size_t i = 0; i < universe.size(); ++i) {
      if (present[i]) in.Trainer(universe[i].uid, universe[i].policy, universe[i].gpus);
    }
    in.get().previous = previous;
    const Plan plan = MakePlan(topo, in.get());
    CheckRails(topo, in.get(), plan);
    for (const auto& [before, now] : Incumbents(previous, plan)) {
      ++moves_checked;
      // The one allowed move: a PreferGPULocal trainer off its GPUs' node(s) going back.
      if (now.policy != "ignore" && ReturnedToGpuNode(before, now)) continue;
      // Not a move: one holding less than it asks keeps every CPU and grows in place.
      if (GrewInPlace(before, now)) continue;
      ASSERT_EQ(now.cpus, before.cpus) << "step " << step << " moved " << now.pod.uid;
    }
    for (const auto& t : plan.trainers) placed_total += t.cpus.empty() ? 0 : 1;
    // Same input → same plan.
    ASSERT_EQ(PlanToJson(plan).dump(), PlanToJson(MakePlan(topo, in.get())).dump());
    previous = plan;
  }
  EXPECT_GT(moves_checked, 1000);  // the property was exercised, not vacuous
  EXPECT_GT(placed_total, 1000);
}

// ---- Issue 15: placement on machines as they really are ----

// Every core that holds a PU of `cpus` lies wholly inside `cpus`.
bool WholeCoresOnly(const Topology& t, const CpuSet& cpus) {
  for (int pu : cpus) {
    const Core* c = t.CoreOfPu(pu);
    if (c == nullptr || !c->pus.IsSubsetOf(cpus)) return false;
  }
  return true;
}

// kubelet's static CPU manager gave a Guaranteed pod CPUs 0, 8 and 9 (outside the agent's
// cpuset): core 1 = {1,9} is half taken and must not be handed out as a whole core.
TEST(PlannerTest, NeverHandsOutACoreWhoseSiblingIsTaken) {
  Input in;
  in.Policy({.name = "p", .cores = 2}).Trainer("a", "p", {"0000:01:00.0"});
  const Topology topo = Topo("cpumgr-1s-smt");
  const Plan plan = MakePlan(topo, in.get());
  EXPECT_EQ(T(plan, "a").cpus.ToString(), "2-3,10-11");
  EXPECT_TRUE(WholeCoresOnly(topo, T(plan, "a").cpus));
  CheckRails(topo, in.get(), plan);

  // The same half-taken core through kubelet's checkpoint (agent cpuset = whole machine).
  Input cm;
  cm.get().cpu_manager.policy_name = "static";
  cm.get().cpu_manager.entries["guaranteed"]["main"] = CpuSet{0, 8, 9};
  cm.Policy({.name = "p", .cores = 2}).Trainer("a", "p", {"0000:01:00.0"});
  const Plan cm_plan = cm.Make("ws-1s-1gpu");
  EXPECT_EQ(T(cm_plan, "a").cpus.ToString(), "2-3,10-11");

  // Neighbours never get CPUs outside the agent's cpuset.
  Input nb;
  nb.Policy({.name = "cs", .fence = pb::CPUSET}).Neighbour("n", "cs");
  const Plan nb_plan = MakePlan(topo, nb.get());
  ASSERT_TRUE(N(nb_plan, "n").cpus.has_value());
  EXPECT_EQ(N(nb_plan, "n").cpus->ToString(), "1-7,10-15");
}

// snc-4numa-dist: nodes 0,1 on socket 0, nodes 2,3 on socket 1; distance 12 within a socket, 21
// across. GPU 0000:81:00.0 is on node 2.
TEST(PlannerTest, FallbackSpillsToTheNearestNumaNode) {
  Input in;
  in.Policy({.name = "big", .priority = 10, .cores = 3, .numa = pb::REQUIRE_GPU_LOCAL})
      .Policy({.name = "pref", .cores = 2})
      .Trainer("big", "big", {"0000:81:00.0"})
      .Trainer("late", "pref", {"0000:81:00.0"});
  const Topology topo = Topo("snc-4numa-dist");
  const Plan plan = MakePlan(topo, in.get());
  EXPECT_EQ(T(plan, "big").cpus.ToString(), "8-10,24-26");
  // One core left on node 2, the other from node 3 (distance 12), not node 0 (distance 21).
  EXPECT_EQ(T(plan, "late").cpus.ToString(), "11-12,27-28");
  EXPECT_EQ(T(plan, "late").mems.ToString(), "2-3");
  EXPECT_FALSE(T(plan, "late").gpu_local);
  EXPECT_TRUE(HasDiag(plan, "late", "NUMAFallback")) << Diags(plan);
  EXPECT_NE(Diags(plan).find("node 3 at distance 12"), std::string::npos) << Diags(plan);
  EXPECT_EQ(T(plan, "late").why.rfind("NUMAFallback:", 0), 0u) << T(plan, "late").why;
  CheckRails(topo, in.get(), plan);
}

// Without a distance matrix, the GPU's own socket comes before lower-numbered nodes elsewhere.
TEST(PlannerTest, FallbackWithoutDistancesPrefersTheSameSocket) {
  Topology topo = Topo("snc-4numa-dist");
  topo.numa_distances.clear();
  Input in;
  in.Policy({.name = "big", .priority = 10, .cores = 4, .numa = pb::REQUIRE_GPU_LOCAL})
      .Policy({.name = "pref", .cores = 1})
      .Trainer("big", "big", {"0000:81:00.0"})
      .Trainer("late", "pref", {"0000:81:00.0"});
  const Plan plan = MakePlan(topo, in.get());
  EXPECT_EQ(T(plan, "late").cpus.ToString(), "12,28");
}

// A GPU whose core group has two local NUMA nodes: KNL-style SNC-2 with HBM beside DRAM, and a
// socket-attached GPU on a sub-NUMA-clustered socket.
TEST(PlannerTest, GpuLocalWhenItsCoreGroupHasTwoNumaNodes) {
  {
    Input in;
    in.Policy({.name = "pref", .cores = 2})
        .Policy({.name = "req", .cores = 1, .numa = pb::REQUIRE_GPU_LOCAL})
        .Trainer("p", "pref", {"0000:41:00.0"})
        .Trainer("r", "req", {"0000:41:00.0"});
    const Topology topo = Topo("knl-snc2-hbm");
    const Plan plan = MakePlan(topo, in.get());
    EXPECT_FALSE(HasDiag(plan, "p", "GPULocalityUnknown")) << Diags(plan);
    EXPECT_FALSE(HasDiag(plan, "r", "GPULocalityUnknown")) << Diags(plan);
    EXPECT_EQ(T(plan, "p").cpus.ToString(), "4-5,12-13");
    EXPECT_TRUE(T(plan, "p").gpu_local);
    // Issue 28, item 9: the cluster's MCDRAM node (3, CPU-less) is as local as its DRAM (2).
    EXPECT_EQ(T(plan, "p").mems.ToString(), "2-3");
    EXPECT_EQ(T(plan, "r").mems.ToString(), "2-3");
    EXPECT_EQ(T(plan, "r").cpus.ToString(), "6,14");
    EXPECT_TRUE(T(plan, "r").gpu_local);
    CheckRails(topo, in.get(), plan);
  }
  {
    Input in;
    in.Policy({.name = "req", .cores_per_gpu = 4, .numa = pb::REQUIRE_GPU_LOCAL})
        .Trainer("s", "req", {"0000:01:00.0"});
    const Topology topo = Topo("snc-4numa-dist");
    const Plan plan = MakePlan(topo, in.get());
    EXPECT_FALSE(HasDiag(plan, "s", "GPULocalityUnknown")) << Diags(plan);
    EXPECT_TRUE(T(plan, "s").gpu_local);
    EXPECT_EQ(T(plan, "s").cpus.size(), 8u);
    EXPECT_TRUE(T(plan, "s").cpus.IsSubsetOf(*CpuSet::Parse("0-7,16-23")));
  }
}

// ---------------------------------------------------------------------------------------------
// hwloc's own XML exports of real and unusual machines (tests/fixtures/topologies/hwloc/, taken
// unmodified from open-mpi/hwloc's tests/hwloc/xml; see the README there). Issue 28, item 9: a
// pinned trainer's mems are every NUMA node local to its cores — the DRAM node and the CPU-less
// MCDRAM/HBM/CXL nodes hwloc gives those cores' cpuset — and none local only to other cores.
// The expectation is computed from hwloc's own objects (hwloc_cpuset_to_nodeset on a separate
// hwloc load of the same file), not from Topology or the planner, and also hard-coded from
// reading the XML.

const std::string kHwlocDir = kDir + "/hwloc";

Topology HwlocTopo(const std::string& file) {
  auto t = LoadTopologyFromXmlFile(kHwlocDir + "/" + file);
  EXPECT_TRUE(t.ok()) << file << ": " << t.status().ToString();
  return t.ok() ? *t : Topology{};
}

// The same XML loaded straight into hwloc, to ask hwloc (not the code under test) which NUMA
// nodes are local to a set of CPUs and which PUs make up a core.
class HwlocXml {
 public:
  explicit HwlocXml(const std::string& file) {
    hwloc_topology_init(&topo_);
    hwloc_topology_set_flags(topo_, HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED);
    const bool ok = hwloc_topology_set_xml(topo_, (kHwlocDir + "/" + file).c_str()) == 0 &&
                    hwloc_topology_load(topo_) == 0;
    EXPECT_TRUE(ok) << file;
  }
  ~HwlocXml() { hwloc_topology_destroy(topo_); }
  HwlocXml(const HwlocXml&) = delete;
  HwlocXml& operator=(const HwlocXml&) = delete;

  // hwloc's nodeset for `cpus`: every NUMA node whose locality (cpuset) intersects them.
  CpuSet LocalNodes(const CpuSet& cpus) const {
    hwloc_bitmap_t cs = ToBitmap(cpus);
    hwloc_bitmap_t ns = hwloc_bitmap_alloc();
    hwloc_cpuset_to_nodeset(topo_, cs, ns);
    CpuSet out = FromBitmap(ns);
    hwloc_bitmap_free(ns);
    hwloc_bitmap_free(cs);
    return out;
  }
  // NUMA nodes (OS index) local to no PU of `cpus` but to other PUs (the other clusters' DRAM
  // and MCDRAM).
  CpuSet NodesLocalOnlyElsewhere(const CpuSet& cpus) const {
    return NodesWhere(cpus, [](hwloc_obj_t n, hwloc_const_bitmap_t cs) {
      return !hwloc_bitmap_iszero(n->cpuset) && !hwloc_bitmap_intersects(n->cpuset, cs);
    });
  }
  // The CPU-less memory nodes (hwloc subtype MCDRAM/HBM/..., or sharing their locality with a
  // DRAM node) whose cpuset covers all of `cpus`.
  CpuSet MemoryOnlyNodesCovering(const CpuSet& cpus) const {
    return NodesWhere(cpus, [](hwloc_obj_t n, hwloc_const_bitmap_t cs) {
      const bool memory_only = n->subtype != nullptr && std::string(n->subtype) != "DRAM";
      return memory_only && hwloc_bitmap_isincluded(cs, n->cpuset);
    });
  }
  // True when every PU of `cpus` comes with all of its hwloc core's PUs (SMT siblings together).
  bool WholeCores(const CpuSet& cpus) const {
    for (int pu : cpus) {
      hwloc_obj_t p = hwloc_get_pu_obj_by_os_index(topo_, static_cast<unsigned>(pu));
      if (p == nullptr) return false;
      hwloc_obj_t core = hwloc_get_ancestor_obj_by_type(topo_, HWLOC_OBJ_CORE, p);
      if (core != nullptr && !FromBitmap(core->cpuset).IsSubsetOf(cpus)) return false;
    }
    return true;
  }
  CpuSet NodeCpus(int os_index) const {
    hwloc_obj_t n = hwloc_get_numanode_obj_by_os_index(topo_, static_cast<unsigned>(os_index));
    return n != nullptr ? FromBitmap(n->cpuset) : CpuSet{};
  }

 private:
  // The NUMA nodes (OS index) `pick(node, cpus as a bitmap)` chooses.
  template <typename Pick>
  CpuSet NodesWhere(const CpuSet& cpus, Pick pick) const {
    CpuSet out;
    hwloc_bitmap_t cs = ToBitmap(cpus);
    for (hwloc_obj_t n = hwloc_get_next_obj_by_type(topo_, HWLOC_OBJ_NUMANODE, nullptr);
         n != nullptr; n = hwloc_get_next_obj_by_type(topo_, HWLOC_OBJ_NUMANODE, n)) {
      if (pick(n, cs)) out.Insert(static_cast<int>(n->os_index));
    }
    hwloc_bitmap_free(cs);
    return out;
  }
  static hwloc_bitmap_t ToBitmap(const CpuSet& cpus) {
    hwloc_bitmap_t b = hwloc_bitmap_alloc();
    for (int id : cpus) hwloc_bitmap_set(b, static_cast<unsigned>(id));
    return b;
  }
  static CpuSet FromBitmap(hwloc_const_bitmap_t b) {
    CpuSet out;
    for (int id = hwloc_bitmap_first(b); id >= 0; id = hwloc_bitmap_next(b, id)) out.Insert(id);
    return out;
  }
  hwloc_topology_t topo_ = nullptr;
};

// One hwloc export read both ways: by the code under test (`topo`) and by hwloc itself (`hw`).
struct HwlocMachine {
  explicit HwlocMachine(const std::string& file) : topo(HwlocTopo(file)), hw(file) {}
  // The plan for `in` on `topo`, its rails checked.
  Plan RailedPlan(const PlanInput& in) const {
    Plan plan = MakePlan(topo, in);
    CheckRails(topo, in, plan);
    return plan;
  }
  Topology topo;
  const HwlocXml hw;
};

// A fake NVIDIA GPU (these exports have none) whose locality is the cores of NUMA node `node`.
void AttachFakeGpu(Topology& topo, const std::string& bdf, int node) {
  GpuDevice g;
  g.bdf = bdf;
  g.vendor_id = 0x10de;
  g.device_id = 0x20b0;
  g.class_id = 0x0302;
  g.local_cpus = topo.FindNuma(node)->cpus;
  g.local_numa = {node};
  g.numa = node;
  topo.gpus.push_back(g);
  std::sort(topo.gpus.begin(), topo.gpus.end(),
            [](const GpuDevice& a, const GpuDevice& b) { return a.bdf < b.bdf; });
}

// What every hwloc-XML placement must satisfy: whole cores, mems = hwloc's nodeset of the cores
// (so every memory-only node covering them is in), and no node local only to other cores.
void ExpectMemsFromHwloc(const HwlocXml& hw, const TrainerPlacement& t) {
  ASSERT_FALSE(t.cpus.empty()) << t.pod.uid;
  EXPECT_TRUE(hw.WholeCores(t.cpus)) << t.pod.uid << " " << t.cpus.ToString();
  EXPECT_EQ(t.mems.ToString(), hw.LocalNodes(t.cpus).ToString()) << t.pod.uid;
  EXPECT_TRUE(hw.MemoryOnlyNodesCovering(t.cpus).IsSubsetOf(t.mems))
      << t.pod.uid << " mems " << t.mems.ToString();
  EXPECT_FALSE(hw.NodesLocalOnlyElsewhere(t.cpus).Intersects(t.mems))
      << t.pod.uid << " mems " << t.mems.ToString();
}

// `t` holds `cpus` (gpu_local as said) and `mems`, and satisfies ExpectMemsFromHwloc.
void ExpectPlaced(const HwlocXml& hw, const TrainerPlacement& t, const std::string& cpus,
                  bool gpu_local, const std::string& mems) {
  EXPECT_EQ(t.cpus.ToString(), cpus) << t.pod.uid;
  EXPECT_EQ(t.gpu_local, gpu_local) << t.pod.uid;
  EXPECT_EQ(t.mems.ToString(), mems) << t.pod.uid;
  ExpectMemsFromHwloc(hw, t);
}

// hwloc's fake KNL (Xeon Phi, 64 PUs = 16 cores x SMT-4) in SNC-4 + hybrid memory
// mode, v2 export. Read in the XML: one package, four L3 "MemorySideCache" clusters, each holding
// a DRAM node and an MCDRAM node with the same cpuset; core k has PUs k, k+16, k+32, k+48.
//   cluster 0: cores 0-3   PUs 0-3,16-19,32-35,48-51    DRAM node 0, MCDRAM node 7
//   cluster 1: cores 4-7   PUs 4-7,20-23,36-39,52-55    DRAM node 1, MCDRAM node 4
//   cluster 2: cores 8-11  PUs 8-11,24-27,40-43,56-59  DRAM node 2, MCDRAM node 5
//   cluster 3: cores 12-15 PUs 12-15,28-31,44-47,60-63 DRAM node 3, MCDRAM node 6
// (the MCDRAM ids are not DRAM id + 4). No distance matrix, no PCI devices.
TEST(PlannerHwlocXmlTest, KnlSnc4HybridMemsAreTheClustersDramAndMcdram) {
  HwlocMachine machine("64intel64-fakeKNL-SNC4-hybrid.xml");
  auto& [topo, hw] = machine;
  ASSERT_EQ(topo.numa_nodes.size(), 8u);
  ASSERT_EQ(topo.cores.size(), 16u);
  // Each core's home node is its cluster's DRAM node, not the MCDRAM node of the same cpuset.
  for (const Core& c : topo.cores) {
    EXPECT_EQ(c.numa, c.index / 4) << "core " << c.index;
    EXPECT_EQ(c.pus.size(), 4u) << "core " << c.index;
  }
  EXPECT_EQ(topo.FindNuma(5)->subtype, "MCDRAM");
  EXPECT_EQ(topo.FindNuma(5)->cpus.ToString(), "8-11,24-27,40-43,56-59");
  AttachFakeGpu(topo, "0000:41:00.0", 1);
  AttachFakeGpu(topo, "0000:81:00.0", 2);
  AttachFakeGpu(topo, "0000:82:00.0", 2);

  Input in;
  in.Policy({.name = "pref", .cores = 2})
      .Policy({.name = "req", .cores = 3, .numa = pb::REQUIRE_GPU_LOCAL})
      .Policy({.name = "big", .cores = 4})
      .Trainer("a", "pref", {"0000:81:00.0"})
      .Trainer("b", "req", {"0000:41:00.0"})
      .Trainer("c", "big", {"0000:82:00.0"});
  const Plan plan = machine.RailedPlan(in.get());
  const auto& a = T(plan, "a");
  // Mems: cluster 2's DRAM 2 + MCDRAM 5 (before: "2").
  ExpectPlaced(hw, a, "8-9,24-25,40-41,56-57", /*gpu_local=*/true, "2,5");
  const auto& b = T(plan, "b");
  // Mems: cluster 1's DRAM 1 + MCDRAM 4 (before: "1").
  ExpectPlaced(hw, b, "4-6,20-22,36-38,52-54", /*gpu_local=*/true, "1,4");
  // c wants 4 cores near cluster 2, which has 2 left (10-11): without a distance matrix it
  // spills onto cluster 0 (cores 0-1), and its mems are both clusters' DRAM and MCDRAM nodes
  // (before: "0,2").
  ExpectPlaced(hw, T(plan, "c"), "0-1,10-11,16-17,26-27,32-33,42-43,48-49,58-59",
               /*gpu_local=*/false, "0,2,5,7");
  EXPECT_EQ(hw.MemoryOnlyNodesCovering(a.cpus).ToString(), "5");
  EXPECT_EQ(hw.MemoryOnlyNodesCovering(b.cpus).ToString(), "4");
}

// hwloc's fake KNL in all-to-all + hybrid mode with both NUMA nodes attached to the machine root
// (8 PUs, 4 cores x SMT-2 with scattered sibling ids). Read in the XML: NUMA node 0 (48 GB DRAM)
// and node 1 (8 GB, subtype MCDRAM, behind a memory-side cache) both have the machine's cpuset
// 0-2,13-14,50,109-110; cores are {0,109}, {50,110}, {1,13}, {2,14}. One CPU node: all-local.
TEST(PlannerHwlocXmlTest, KnlAllToAllRootAttachedMcdramIsInMems) {
  HwlocMachine machine("8intel64-fakeKNL-A2A-hybrid.rootattachednumas.xml");
  auto& [topo, hw] = machine;
  ASSERT_EQ(topo.numa_nodes.size(), 2u);
  ASSERT_EQ(topo.cores.size(), 4u);
  EXPECT_EQ(topo.FindNuma(1)->subtype, "MCDRAM");
  for (const Core& c : topo.cores) EXPECT_EQ(c.numa, 0) << "core " << c.index;
  AttachFakeGpu(topo, "0000:01:00.0", 0);

  Input in;
  in.Policy({.name = "p", .cores = 2}).Trainer("a", "p", {"0000:01:00.0"});
  const Plan plan = machine.RailedPlan(in.get());
  const auto& a = T(plan, "a");
  EXPECT_EQ(a.cpus.size(), 4u) << a.cpus.ToString();
  EXPECT_TRUE(a.gpu_local);
  EXPECT_EQ(a.mems.ToString(), "0-1");  // DRAM 0 + MCDRAM 1 (before: "0")
  ExpectMemsFromHwloc(hw, a);
  EXPECT_EQ(hw.MemoryOnlyNodesCovering(a.cpus).ToString(), "1");
}

// hwloc's v1-to-v2 conversion of an Itanium (ia64) machine: two NUMA nodes with CPUs (node 0:
// PUs 0-3, node 2: PUs 16-19, one PU per core, two packages each) and a third, node 16 (996 MB),
// with an empty cpuset, i.e. local to no CPU. It is never a trainer's memory.
TEST(PlannerHwlocXmlTest, Ia64MemoryNodeLocalToNoCpuIsNoTrainersMems) {
  HwlocMachine machine("8ia64-2n2s2c+1n.v1tov2.xml");
  auto& [topo, hw] = machine;
  ASSERT_EQ(topo.numa_nodes.size(), 3u);
  ASSERT_NE(topo.FindNuma(16), nullptr);
  EXPECT_TRUE(topo.FindNuma(16)->cpus.empty());
  EXPECT_TRUE(hw.NodeCpus(16).empty());
  AttachFakeGpu(topo, "0000:02:00.0", 2);

  Input in;
  in.Policy({.name = "p", .cores = 2, .numa = pb::REQUIRE_GPU_LOCAL})
      .Trainer("a", "p", {"0000:02:00.0"});
  const Plan plan = machine.RailedPlan(in.get());
  ExpectPlaced(hw, T(plan, "a"), "16-17", /*gpu_local=*/true, "2");
}

// hwloc's QEMU machine with four CXL type-3 memory expanders (v2 export): 4 cores (PUs 0-3), one
// NUMA node 0 (2920 MB). Read in the XML: the expanders are PCI devices of class 0502 (CXLMem)
// with Block "mem0".."mem3" OS devices and a "dax0.0" soft-reserved DAX device — the CXL memory
// is not onlined as a NUMA node on this machine, so mems stay node 0. The CXL devices are not
// GPUs. (Passes on the old behaviour too: there is no memory-only node here.)
TEST(PlannerHwlocXmlTest, CxlExpandersAsDaxDevicesLeaveMemsOnTheDramNode) {
  HwlocMachine machine("cxlmem+dax.v2.xml");
  auto& [topo, hw] = machine;
  ASSERT_EQ(topo.numa_nodes.size(), 1u);
  EXPECT_EQ(topo.cores.size(), 4u);
  EXPECT_TRUE(topo.gpus.empty());
  EXPECT_EQ(hw.LocalNodes(topo.AllPus()).ToString(), "0");

  Input in;
  in.Policy({.name = "p", .cores = 2}).Trainer("a", "p", {"0000:01:00.0"});
  const Plan plan = machine.RailedPlan(in.get());
  ExpectPlaced(hw, T(plan, "a"), "0-1", /*gpu_local=*/true, "0");  // one NUMA node: all-local
}

// hwloc's IBM POWER8 "Minsky" with four NVLink P100 GPUs (v2 export, real PCI devices): two
// packages, each with one NUMA node and 4 cores of 2 PUs. Read in the XML: node 0 = PUs
// 0-1,8-9,16-17,24-25 with GPUs 0002:01:00.0 and 0003:01:00.0; node 1 = PUs 80-81,88-89,
// 96-97,104-105 with GPUs 000a:01:00.0 and 000b:01:00.0. The GPUs' memory is not a NUMA node on
// POWER8 (only POWER9/NVLink2 onlines it), so mems are the GPU's package node only. (Passes on
// the old behaviour too.)
TEST(PlannerHwlocXmlTest, Power8NvlinkGpuTrainerGetsItsPackagesNode) {
  HwlocMachine machine("power8gpudistances.xml");
  auto& [topo, hw] = machine;
  ASSERT_EQ(topo.numa_nodes.size(), 2u);
  ASSERT_EQ(topo.gpus.size(), 4u);
  ASSERT_NE(topo.FindGpu("000a:01:00.0"), nullptr);
  EXPECT_EQ(topo.FindGpu("000a:01:00.0")->local_numa, std::vector<int>{1});
  EXPECT_EQ(topo.FindGpu("0002:01:00.0")->local_numa, std::vector<int>{0});

  Input in;
  in.Policy({.name = "req", .cores = 2, .numa = pb::REQUIRE_GPU_LOCAL})
      .Trainer("a", "req", {"000a:01:00.0"})
      .Trainer("b", "req", {"0003:01:00.0"});
  const Plan plan = machine.RailedPlan(in.get());
  ExpectPlaced(hw, T(plan, "a"), "80-81,88-89", /*gpu_local=*/true, "1");
  const auto& b = T(plan, "b");
  EXPECT_EQ(b.cpus.ToString(), "0-1,8-9");
  EXPECT_EQ(b.mems.ToString(), "0");
  ExpectMemsFromHwloc(hw, b);
}

// hwloc's current 64intel64-heteromem.xml (the KNL SNC-4 machine without its KNL specifics) is a
// version 3.0 export (hwloc 3.0 development): hwloc 2.x cannot import it, and the loader says so
// instead of loading a wrong machine.
TEST(PlannerHwlocXmlTest, HwlocV3ExportIsRefusedWithTheReason) {
  auto t = LoadTopologyFromXmlFile(kHwlocDir + "/64intel64-heteromem.xml");
  ASSERT_TRUE(feedguard::testing::FailsWith(t, StatusCode::kInvalidArgument, "cannot import"));
}

// A PreferGPULocal trainer that fell back keeps saying so on every plan, and goes back to its
// GPU's node once room appears there.
TEST(PlannerTest, FallenBackTrainerReturnsWhenRoomAppears) {
  const Topology topo = Topo("snc-4numa-dist");
  auto make = [&](bool with_big, const std::optional<Plan>& previous) {
    Input in;
    in.Policy({.name = "big", .priority = 10, .cores = 3, .numa = pb::REQUIRE_GPU_LOCAL})
        .Policy({.name = "pref", .cores = 2});
    if (with_big) in.Trainer("big", "big", {"0000:81:00.0"});
    in.Trainer("late", "pref", {"0000:81:00.0"});
    in.get().previous = previous;
    return MakePlan(topo, in.get());
  };
  const Plan p1 = make(true, std::nullopt);
  ASSERT_FALSE(T(p1, "late").gpu_local);
  ASSERT_TRUE(HasDiag(p1, "late", "NUMAFallback")) << Diags(p1);
  const Plan p2 = make(true, p1);  // nothing changed: it stays, and still says why
  EXPECT_EQ(T(p2, "late").cpus, T(p1, "late").cpus);
  EXPECT_TRUE(HasDiag(p2, "late", "NUMAFallback")) << Diags(p2);
  const Plan p3 = make(false, p2);  // the big trainer left: node 2 has room
  EXPECT_TRUE(T(p3, "late").gpu_local);
  EXPECT_EQ(T(p3, "late").cpus.ToString(), "8,11,24,27");  // keeps core 11, adds core 8
  EXPECT_EQ(T(p3, "late").mems.ToString(), "2");
  EXPECT_FALSE(HasDiag(p3, "late", "NUMAFallback")) << Diags(p3);
  EXPECT_EQ(T(p3, "late").why.rfind("ReturnedToGPUNode:", 0), 0u) << T(p3, "late").why;
  const Plan p4 = make(false, p3);  // and then it stays
  EXPECT_EQ(T(p4, "late").cpus, T(p3, "late").cpus);
  EXPECT_EQ(T(p4, "late").why.rfind("IncumbentKept:", 0), 0u) << T(p4, "late").why;
}

// What the engine rebuilds from the checkpoint after a restart is enough to keep incumbents.
TEST(PlannerTest, IncumbentsFromWrittenCpusetsKeepTheirCores) {
  Input in;
  in.Policy({.name = "p", .cores = 2}).Trainer("b", "p", {kServerGpus[0]});
  const Plan p1 = in.Make("server-2s-8gpu");
  Input in2;
  in2.Policy({.name = "p", .cores = 2})
      .Trainer("a", "p", {kServerGpus[0]})
      .Trainer("b", "p", {kServerGpus[0]});
  in2.get().previous = PreviousPlanFromCpusets({{"b", T(p1, "b").cpus}});
  const Plan p2 = in2.Make("server-2s-8gpu");
  EXPECT_EQ(T(p2, "b").cpus.ToString(), "0-1,64-65");
  EXPECT_EQ(T(p2, "a").cpus.ToString(), "2-3,66-67");
  EXPECT_TRUE(T(p2, "b").gpu_local);
}

// MPS / time-slicing / one shared ResourceClaim: trainers holding the same GPU whose sizes do not
// all fit on its NUMA node split its local cores fairly, instead of the first taking its full
// size and the next spilling off-node (PREFER) or failing (REQUIRE).
TEST(PlannerTest, TrainersSharingAGpuSplitItsLocalCores) {
  const Topology topo = Topo("server-2s-8gpu");
  for (pb::NumaPolicy numa : {pb::PREFER_GPU_LOCAL, pb::REQUIRE_GPU_LOCAL}) {
    Input in;
    // 20 cores each asked, 32 on GPU 0's node 0.
    in.Policy({.name = "p", .cores_per_gpu = 20, .numa = numa})
        .Trainer("mps-a", "p", {kServerGpus[0]})
        .Trainer("mps-b", "p", {kServerGpus[0]});
    const Plan plan = MakePlan(topo, in.get());
    for (const char* uid : {"mps-a", "mps-b"}) {
      const auto& t = T(plan, uid);
      EXPECT_EQ(t.cpus.size(), 32u) << uid << " " << t.cpus.ToString();  // 16 cores, SMT
      EXPECT_TRUE(t.cpus.IsSubsetOf(topo.numa_nodes[0].cpus)) << uid << " " << t.cpus.ToString();
      EXPECT_TRUE(t.gpu_local) << uid;
      EXPECT_TRUE(HasDiag(plan, uid, "GPUSharedSplit")) << Diags(plan);
      EXPECT_NE(t.why.find("GPUSharedSplit: holds 16 of 20 cores"), std::string::npos) << t.why;
    }
    EXPECT_FALSE(T(plan, "mps-a").cpus.Intersects(T(plan, "mps-b").cpus));
    EXPECT_FALSE(HasDiag(plan, "mps-b", "NUMAFallback")) << Diags(plan);
    EXPECT_FALSE(HasDiag(plan, "mps-b", "NotEnoughLocalCores")) << Diags(plan);
    CheckRails(topo, in.get(), plan);
  }
}

TEST(PlannerTest, SharedGpuSplitIsInProportionToWhatEachAsks) {
  const Topology topo = Topo("server-2s-8gpu");
  Input in;
  // Two replicas of GPU 4 (32 cores asked) and one (16): 48 asked, 32 on node 1 → 21 + 11.
  in.Policy({.name = "p", .cores_per_gpu = 16})
      .Trainer("big", "p", {kServerGpus[4], kServerGpus[4]})
      .Trainer("small", "p", {kServerGpus[4]})
      .Trainer("z-other", "p", {kServerGpus[5]});  // same node, another GPU: not in the split
  const Plan plan = MakePlan(topo, in.get());
  EXPECT_EQ(T(plan, "big").cpus.size() + T(plan, "small").cpus.size(), 64u);
  EXPECT_EQ(T(plan, "big").cpus.size(), 42u);
  EXPECT_EQ(T(plan, "small").cpus.size(), 22u);
  EXPECT_TRUE(T(plan, "big").cpus.IsSubsetOf(topo.numa_nodes[1].cpus));
  EXPECT_TRUE(T(plan, "small").cpus.IsSubsetOf(topo.numa_nodes[1].cpus));
  // The third trainer comes after them by name and finds node 1 full: it falls back.
  EXPECT_EQ(T(plan, "z-other").cpus.size(), 32u);
  EXPECT_TRUE(HasDiag(plan, "z-other", "NUMAFallback")) << Diags(plan);
  CheckRails(topo, in.get(), plan);
}

TEST(PlannerTest, SharedGpuWithNoLocalCoreLeftSaysSo) {
  Input in;
  // Node 0 keeps one free core (31): two trainers sharing GPU 0 → one gets it, the other none.
  in.Policy({.name = "p", .cores_per_gpu = 2})
      .Trainer("s1", "p", {kServerGpus[0]})
      .Trainer("s2", "p", {kServerGpus[0]})
      .Reserved("0-30,64-94");
  const Plan plan = in.Make("server-2s-8gpu");
  EXPECT_EQ(T(plan, "s1").cpus.ToString(), "31,95");
  EXPECT_TRUE(HasDiag(plan, "s1", "GPUSharedSplit")) << Diags(plan);
  EXPECT_TRUE(HasDiag(plan, "s2", "GPUSharedNoLocalCore")) << Diags(plan);
  EXPECT_TRUE(HasDiag(plan, "s2", "NUMAFallback")) << Diags(plan);
  EXPECT_EQ(T(plan, "s2").cpus.size(), 4u);  // its full size, off-node
  CheckRails(Topo("server-2s-8gpu"), in.get(), plan);
}

TEST(PlannerTest, SharedGpuSplitIsStableAcrossPlansAndRestartsAndGrowsBack) {
  const Topology topo = Topo("server-2s-8gpu");
  Input in;
  in.Policy({.name = "p", .cores_per_gpu = 20})
      .Trainer("mps-a", "p", {kServerGpus[0]})
      .Trainer("mps-b", "p", {kServerGpus[0]});
  const Plan p1 = MakePlan(topo, in.get());
  // The next plan, and a restarted agent's (cpusets from the checkpoint), keep both as they are.
  in.get().previous = p1;
  const Plan p2 = MakePlan(topo, in.get());
  in.get().previous =
      PreviousPlanFromCpusets({{"mps-a", T(p1, "mps-a").cpus}, {"mps-b", T(p1, "mps-b").cpus}});
  const Plan p3 = MakePlan(topo, in.get());
  for (const char* uid : {"mps-a", "mps-b"}) {
    EXPECT_EQ(T(p2, uid).cpus, T(p1, uid).cpus) << uid;
    EXPECT_EQ(T(p3, uid).cpus, T(p1, uid).cpus) << uid;
    EXPECT_TRUE(HasDiag(p3, uid, "GPUSharedSplit")) << Diags(p3);
  }
  // b leaves: a keeps its 16 cores and grows to the 20 it asks, on its GPU's node.
  Input solo;
  solo.Policy({.name = "p", .cores_per_gpu = 20}).Trainer("mps-a", "p", {kServerGpus[0]});
  solo.get().previous = p3;
  const Plan p4 = MakePlan(topo, solo.get());
  EXPECT_TRUE(T(p1, "mps-a").cpus.IsSubsetOf(T(p4, "mps-a").cpus));
  EXPECT_EQ(T(p4, "mps-a").cpus.size(), 40u);
  EXPECT_TRUE(T(p4, "mps-a").cpus.IsSubsetOf(topo.numa_nodes[0].cpus));
  EXPECT_FALSE(HasDiag(p4, "mps-a", "GPUSharedSplit")) << Diags(p4);
}

// Property over random machines (hwloc synthetic: packages, NUMA nodes per package, cores, SMT
// 1/2, GPUs on random nodes, a random OS distance matrix, CPUs outside the agent's cpuset,
// reserved and CPU-manager CPUs) and churn (trainers with 0-8 GPUs coming and going, agent
// restarts between steps): every rail and stability hold on every step.
TEST(PlannerTest, RandomTopologiesChurnAndRestartsProperty) {
  std::mt19937 rng(15);
  auto pick = [&](int lo, int hi) { return lo + static_cast<int>(rng() % (hi - lo + 1)); };
  int plans = 0, checked_incumbents = 0, restarts = 0, returns = 0, pinned = 0;
  for (int machine = 0; machine < 40; ++machine) {
    const int packages = pick(1, 2), numa = pick(1, 2), cores = pick(2, 6), smt = pick(1, 2);
    const std::string desc = "pack:" + std::to_string(packages) + " numa:" + std::to_string(numa) +
                             " core:" + std::to_string(cores) + " pu:" + std::to_string(smt);
    auto loaded = LoadSyntheticTopology(desc);
    ASSERT_TRUE(loaded.ok()) << desc << ": " << loaded.status().ToString();
    Topology topo = *loaded;
    const int nodes = static_cast<int>(topo.numa_nodes.size());
    ASSERT_EQ(nodes, packages * numa) << desc;
    if (pick(0, 2) > 0) {  // an OS latency matrix, mostly
      for (int a = 0; a < nodes; ++a) {
        for (int b = a; b < nodes; ++b) {
          const uint64_t d = a == b ? 10 : static_cast<uint64_t>(pick(11, 40));
          topo.numa_distances[{a, b}] = d;
          topo.numa_distances[{b, a}] = d;
        }
      }
    }
    std::vector<std::string> gpus;
    for (int g = 0; g < pick(1, 8); ++g) {
      GpuDevice dev;
      char bus[8];
      std::snprintf(bus, sizeof(bus), "%02x", (0x10 + g) & 0xff);
      dev.bdf = std::string("0000:") + bus + ":00.0";
      dev.vendor_id = 0x10de;
      dev.class_id = 0x0302;
      const int node = pick(0, nodes - 1);
      dev.local_numa = {node};
      dev.numa = node;
      dev.local_cpus = topo.FindNuma(node)->cpus;
      gpus.push_back(dev.bdf);
      topo.gpus.push_back(std::move(dev));
    }
    const CpuSet all = topo.AllPus();
    const std::vector<int> pus(all.begin(), all.end());
    CpuSet reserved, exclusive;
    if (pick(0, 1)) reserved.Insert(pus.front());
    if (pick(0, 2) == 0) topo.allowed_cpus = all.Minus(CpuSet{pus[pick(0, (int)pus.size() - 1)]});
    if (pick(0, 2) == 0) exclusive.Insert(pus[pick(0, (int)pus.size() - 1)]);

    struct Pod {
      std::string uid, policy;
      std::vector<std::string> gpus;
    };
    const std::vector<std::string> policies = {"prefer", "require", "ignore", "threads", "fixed"};
    std::vector<Pod> universe;
    for (int i = 0; i < 10; ++i) {
      Pod p{"m" + std::to_string(machine) + "-" + std::to_string(i),
            policies[rng() % policies.size()],
            {}};
      for (int g = pick(0, 8); g > 0; --g) p.gpus.push_back(gpus[rng() % gpus.size()]);
      universe.push_back(p);
    }
    std::vector<bool> present(universe.size(), false);
    std::optional<Plan> previous;
    std::map<std::string, std::string> policy_of;
    for (int step = 0; step < 40; ++step) {
      for (int flips = pick(1, 2); flips > 0; --flips) {
        const size_t k = rng() % present.size();
        present[k] = !present[k];
      }
      Input in;
      in.Policy({.name = "prefer", .priority = 3, .cores_per_gpu = 1})
          .Policy(
              {.name = "require", .priority = 2, .cores_per_gpu = 1, .numa = pb::REQUIRE_GPU_LOCAL})
          .Policy({.name = "ignore", .priority = 1, .cores = 2, .numa = pb::IGNORE})
          .Policy({.name = "threads", .cores = 3, .placement = pb::THREADS})
          .Policy({.name = "fixed", .priority = 1, .cores = 1});
      in.get().reserved_cpus = reserved;
      if (!exclusive.empty()) {
        in.get().cpu_manager.policy_name = "static";
        in.get().cpu_manager.entries["someone-else"]["c"] = exclusive;
      }
      for (size_t i = 0; i < universe.size(); ++i) {
        if (!present[i]) continue;
        in.Trainer(universe[i].uid, universe[i].policy, universe[i].gpus);
        policy_of[universe[i].uid] = universe[i].policy;
      }
      // A restart: all the new agent knows is what the checkpoint says was written.
      // Stability is checked against the plan before the restart, not against what survived it.
      const bool restart = previous && pick(0, 3) == 0;
      in.get().previous = previous;
      if (restart) {
        ++restarts;
        std::map<std::string, CpuSet> written;
        for (const auto& t : previous->trainers) written[t.pod.uid] = t.cpus;
        in.get().previous = PreviousPlanFromCpusets(written);
      }
      const Plan plan = MakePlan(topo, in.get());
      ++plans;
      const std::string where = desc + " machine " + std::to_string(machine) + " step " +
                                std::to_string(step) + (restart ? " (restart)" : "");
      CheckRails(topo, in.get(), plan);
      for (const auto& t : plan.trainers) {
        if (t.cpus.empty()) continue;
        ++pinned;
        const std::string& pol = policy_of[t.pod.uid];
        EXPECT_FALSE(t.cpus.Intersects(all.Minus(topo.allowed_cpus))) << where;
        EXPECT_FALSE(t.why.empty()) << where << " " << t.pod.uid;
        if (pol != "threads") {
          ASSERT_TRUE(WholeCoresOnly(topo, t.cpus)) << where << " half a core to " << t.pod.uid;
        }
        if (pol == "require") {
          EXPECT_TRUE(t.gpu_local) << where;
        }
        // A compromise always says why: off its GPUs' node(s) ⇒ NUMAFallback.
        if (pol != "require" && pol != "ignore" && !t.gpu_local && !t.gpu_ids.empty()) {
          EXPECT_TRUE(HasDiag(plan, t.pod.uid, "NUMAFallback")) << where << Diags(plan);
        }
      }
      for (const auto& [before, now] : Incumbents(previous, plan)) {
        ++checked_incumbents;
        // The one allowed move: a PreferGPULocal trainer (every policy here but "require" and
        // "ignore") going back to its GPUs' node(s).
        const std::string& pol = policy_of[now.pod.uid];
        if (now.cpus != before.cpus && pol != "require" && pol != "ignore" &&
            ReturnedToGpuNode(before, now)) {
          ++returns;  // the one allowed move
          continue;
        }
        // Not a move: an incumbent holding less than it asks (its share of a shared GPU) keeps
        // every CPU and grows in place.
        if (GrewInPlace(before, now)) continue;
        ASSERT_EQ(now.cpus.ToString(), before.cpus.ToString())
            << where << ": incumbent " << now.pod.uid
            << " moved\nbefore: " << PlanToJson(*previous).dump()
            << "\nnow: " << PlanToJson(plan).dump();
      }
      ASSERT_EQ(PlanToJson(plan).dump(), PlanToJson(MakePlan(topo, in.get())).dump()) << where;
      previous = plan;
    }
  }
  std::printf("plans=%d incumbents_checked=%d restarts=%d returns=%d pinned=%d\n", plans,
              checked_incumbents, restarts, returns, pinned);
  // The property was exercised, not vacuous.
  EXPECT_EQ(plans, 1600);
  EXPECT_GT(checked_incumbents, 1000);
  EXPECT_GT(restarts, 200);
  EXPECT_GT(pinned, 1500);
  EXPECT_GT(returns, 0);
}

TEST(PlannerTest, ToPodIdentityConvertsEveryField) {
  pb::PodRef ref;
  ref.set_uid("u");
  ref.set_namespace_("ns");
  ref.set_name("n");
  ref.set_qos_class(pb::GUARANTEED);
  ref.add_containers()->set_container_id("containerd://abc");
  ref.set_cpu_request_milli(1500);
  ref.set_cpu_limit_milli(2000);
  const PodIdentity id = ToPodIdentity(ref);
  EXPECT_EQ(id.uid, "u");
  EXPECT_EQ(id.ns, "ns");
  EXPECT_EQ(id.name, "n");
  EXPECT_EQ(id.qos, QosClass::kGuaranteed);
  EXPECT_EQ(id.container_ids, std::vector<std::string>{"containerd://abc"});
  EXPECT_EQ(id.cpu_request_milli, 1500);
  EXPECT_EQ(id.cpu_limit_milli, 2000);
}

}  // namespace
}  // namespace feedguard::agent
