// planner_test.cc — MakePlan over the synthetic hwloc topologies in tests/fixtures/topologies.
#include "agent/planner/planner.h"

#include <gtest/gtest.h>

#include <algorithm>
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

const TrainerPlacement& T(const Plan& plan, const std::string& uid) {
  for (const auto& t : plan.trainers) {
    if (t.pod.uid == uid) return t;
  }
  static const TrainerPlacement kNone;
  ADD_FAILURE() << "no trainer " << uid;
  return kNone;
}

const NeighbourAction& N(const Plan& plan, const std::string& uid) {
  for (const auto& n : plan.neighbours) {
    if (n.pod.uid == uid) return n;
  }
  static const NeighbourAction kNone;
  ADD_FAILURE() << "no neighbour " << uid;
  return kNone;
}

bool HasDiag(const Plan& plan, const std::string& uid, const std::string& reason) {
  return std::any_of(plan.diagnostics.begin(), plan.diagnostics.end(),
                     [&](const Diagnostic& d) { return d.pod_uid == uid && d.reason == reason; });
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
    if (previous) {
      for (const auto& before : previous->trainers) {
        if (before.cpus.empty()) continue;
        for (const auto& now : plan.trainers) {
          if (now.pod.uid != before.pod.uid) continue;
          ++moves_checked;
          ASSERT_EQ(now.cpus, before.cpus) << "step " << step << " moved " << now.pod.uid;
        }
      }
    }
    for (const auto& t : plan.trainers) placed_total += t.cpus.empty() ? 0 : 1;
    // Same input → same plan.
    ASSERT_EQ(PlanToJson(plan).dump(), PlanToJson(MakePlan(topo, in.get())).dump());
    previous = plan;
  }
  EXPECT_GT(moves_checked, 1000);  // the property was exercised, not vacuous
  EXPECT_GT(placed_total, 1000);
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
