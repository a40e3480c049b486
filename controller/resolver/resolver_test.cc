#include "controller/resolver/resolver.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace feedguard::controller {
namespace {

FencePolicy Policy(const std::string& name, int priority, const std::string& role) {
  auto parsed = ParseFencePolicy(nlohmann::json{
      {"metadata", {{"name", name}, {"generation", 1}}},
      {"spec",
       {{"priority", priority},
        {"nodeSelector", {{"matchLabels", {{"gpu", "true"}}}}},
        {"trainers",
         {{"podSelector", {{"matchLabels", {{"role", role}}}}}, {"cpu", {{"coresPerGPU", 2}}}}},
        {"neighbours", {{"exclude", {{"namespaces", {"kube-system"}}}}, {"fence", "Idle"}}}}}});
  EXPECT_TRUE(parsed.errors.empty()) << JoinFieldErrors(parsed.errors);
  return parsed.policy;
}

PodInfo Pod(const std::string& ns, const std::string& name, Labels labels = {}) {
  PodInfo p;
  p.uid = "uid-" + ns + "-" + name;
  p.ns = ns;
  p.name = name;
  p.node_name = "gpu-1";
  p.phase = "Running";
  p.labels = LabelSet(labels);
  p.qos = QosClass::kBurstable;
  p.cpu_request_milli = 500;
  p.containers = {{"main", "containerd://" + name}};
  return p;
}

class ResolverTest : public ::testing::Test {
 protected:
  NodeResolution Resolve() {
    std::vector<const PodInfo*> pp;
    for (auto& p : pods_) pp.push_back(&p);
    std::vector<const FencePolicy*> ps;
    for (auto& p : policies_) ps.push_back(&p);
    return ResolveNode(node_, pp, ps, namespaces_, rails_);
  }
  NodeInfo node_{"gpu-1", {{"gpu", "true"}}};
  std::vector<PodInfo> pods_;
  std::vector<FencePolicy> policies_;
  std::map<std::string, Labels> namespaces_;
  Rails rails_;
};

TEST_F(ResolverTest, TrainersAndNeighbours) {
  policies_ = {Policy("vision", 10, "trainer")};
  policies_[0].trainers.weight = 750;
  pods_ = {Pod("ml", "train-0", {{"role", "trainer"}}), Pod("batch", "spin-0"),
           Pod("batch", "spin-1"), Pod("kube-system", "dns")};
  auto r = Resolve();
  ASSERT_EQ(r.fence.trainers_size(), 1);
  EXPECT_EQ(r.fence.trainers(0).pod().name(), "train-0");
  EXPECT_EQ(r.fence.trainers(0).policy(), "vision");
  EXPECT_EQ(r.fence.trainers(0).pod().containers(0).container_id(), "containerd://train-0");
  ASSERT_EQ(r.fence.neighbours_size(), 2);  // kube-system excluded
  EXPECT_EQ(r.fence.neighbours(0).pod().name(), "spin-0");
  ASSERT_EQ(r.fence.policies_size(), 1);
  EXPECT_EQ(r.fence.policies(0).trainer_cpu().cores_per_gpu(), 2);
  EXPECT_EQ(r.fence.policies(0).trainer_cpu().weight(), 750);
  EXPECT_EQ(r.fence.policies(0).neighbour_fence(), feedguard::v1::IDLE);
  EXPECT_TRUE(r.policies["vision"].node_matched);
  EXPECT_EQ(r.policies["vision"].trainers, 1);
  EXPECT_EQ(r.policies["vision"].neighbours, 2);
}

TEST_F(ResolverTest, APodWithMoreContainersThanAFenceCarriesGoesWithoutThem) {
  // Issue 28, item 2: a tenant's pod of thousands of containers must not push its node's fence
  // past what agents read; it is fenced at the pod level and counted.
  policies_ = {Policy("vision", 10, "trainer")};
  PodInfo wide = Pod("batch", "wide");
  wide.containers.clear();
  for (int i = 0; i < 65; ++i) {
    wide.containers.push_back({"c" + std::to_string(i), "containerd://w" + std::to_string(i)});
  }
  PodInfo fits = Pod("batch", "fits");
  fits.containers.clear();
  for (int i = 0; i < 64; ++i) {
    fits.containers.push_back({"c" + std::to_string(i), "containerd://f" + std::to_string(i)});
  }
  pods_ = {Pod("ml", "train-0", {{"role", "trainer"}}), wide, fits};
  auto r = Resolve();
  ASSERT_EQ(r.fence.neighbours_size(), 2);
  EXPECT_EQ(r.fence.neighbours(0).pod().name(), "fits");
  EXPECT_EQ(r.fence.neighbours(0).pod().containers_size(), 64);
  EXPECT_EQ(r.fence.neighbours(1).pod().name(), "wide");
  EXPECT_EQ(r.fence.neighbours(1).pod().containers_size(), 0);  // the pod itself is still fenced
  EXPECT_EQ(r.policies["vision"].pods_over_container_cap, 1);
  EXPECT_EQ(r.policies["vision"].over_container_cap_example, "batch/wide (65 containers)");
  // The cap is a parameter (--max-fence-containers-per-pod).
  std::vector<const PodInfo*> pp;
  for (auto& p : pods_) pp.push_back(&p);
  std::vector<const FencePolicy*> ps = {&policies_[0]};
  auto r2 = ResolveNode(node_, pp, ps, namespaces_, rails_, FenceLimits{100});
  EXPECT_EQ(r2.fence.neighbours(1).pod().containers_size(), 65);
  EXPECT_EQ(r2.policies["vision"].pods_over_container_cap, 0);
}

// Observe first (DESIGN §4b): every live GPU pod is named in the observe list, policy or not,
// without becoming a trainer or neighbour; past the cap the rest are counted; 0 turns it off.
TEST_F(ResolverTest, EveryLiveGpuPodIsObservedWithOrWithoutAPolicy) {
  auto gpu = [&](const std::string& ns, const std::string& name, int gpus = 1) {
    PodInfo p = Pod(ns, name);
    p.gpus = gpus;
    return p;
  };
  PodInfo done = gpu("ml", "finished");
  done.phase = "Succeeded";
  pods_ = {gpu("ml", "b-train"), gpu("research", "a-notebook", 2), Pod("batch", "spin-0"), done};
  auto r = Resolve();  // no policy at all
  EXPECT_EQ(r.fence.trainers_size(), 0);
  EXPECT_EQ(r.fence.neighbours_size(), 0);
  ASSERT_EQ(r.fence.observe_size(), 2);
  EXPECT_EQ(r.fence.observe(0).name(), "b-train");  // by namespace, then name
  EXPECT_EQ(r.fence.observe(1).name(), "a-notebook");
  EXPECT_EQ(r.fence.observe(1).uid(), "uid-research-a-notebook");
  EXPECT_EQ(r.fence.observe(0).cpu_request_milli(), 500);
  EXPECT_EQ(r.gpu_pods_not_observed, 0u);

  FenceLimits one;
  one.max_observed_pods = 1;
  std::vector<const PodInfo*> pp;
  for (auto& p : pods_) pp.push_back(&p);
  auto capped = ResolveNode(node_, pp, {}, namespaces_, rails_, one);
  ASSERT_EQ(capped.fence.observe_size(), 1);
  EXPECT_EQ(capped.gpu_pods_not_observed, 1u);
  FenceLimits off;
  off.max_observed_pods = 0;
  auto none = ResolveNode(node_, pp, {}, namespaces_, rails_, off);
  EXPECT_EQ(none.fence.observe_size(), 0);
  EXPECT_EQ(none.gpu_pods_not_observed, 0u);
}

TEST_F(ResolverTest, NodeSelectorMissMeansNothing) {
  policies_ = {Policy("vision", 10, "trainer")};
  node_.labels.clear();
  pods_ = {Pod("ml", "train-0", {{"role", "trainer"}}), Pod("batch", "spin-0")};
  auto r = Resolve();
  EXPECT_EQ(r.fence.trainers_size(), 0);
  EXPECT_EQ(r.fence.neighbours_size(), 0);
  EXPECT_FALSE(r.policies["vision"].node_matched);
}

TEST_F(ResolverTest, NoTrainerNoNeighbourFence) {
  policies_ = {Policy("vision", 10, "trainer")};
  pods_ = {Pod("batch", "spin-0"), Pod("batch", "spin-1")};
  auto r = Resolve();
  EXPECT_EQ(r.fence.neighbours_size(), 0);
  EXPECT_EQ(r.fence.policies_size(), 0);
}

TEST_F(ResolverTest, HigherPriorityWinsTiesByNameAndLoserIsReported) {
  policies_ = {Policy("b-low", 1, "trainer"), Policy("a-high", 5, "trainer"),
               Policy("c-high", 5, "trainer")};
  pods_ = {Pod("ml", "train-0", {{"role", "trainer"}}), Pod("batch", "spin-0")};
  auto r = Resolve();
  ASSERT_EQ(r.fence.trainers_size(), 1);
  EXPECT_EQ(r.fence.trainers(0).policy(), "a-high");
  EXPECT_EQ(r.fence.neighbours(0).policy(), "a-high");
  ASSERT_EQ(r.policies["c-high"].lost.size(), 1u);
  EXPECT_EQ(r.policies["c-high"].lost[0].winner, "a-high");
  EXPECT_EQ(r.policies["b-low"].lost.size(), 1u);
  EXPECT_TRUE(r.policies["a-high"].lost.empty());
}

TEST_F(ResolverTest, TrainerOfOnePolicyIsNeverANeighbourOfAnother) {
  policies_ = {Policy("vision", 1, "trainer"), Policy("speech", 9, "speech")};
  pods_ = {Pod("ml", "train-0", {{"role", "trainer"}}), Pod("ml", "asr", {{"role", "speech"}}),
           Pod("batch", "spin-0")};
  auto r = Resolve();
  EXPECT_EQ(r.fence.trainers_size(), 2);
  ASSERT_EQ(r.fence.neighbours_size(), 1);
  EXPECT_EQ(r.fence.neighbours(0).pod().name(), "spin-0");
  EXPECT_EQ(r.fence.neighbours(0).policy(), "speech");
}

TEST_F(ResolverTest, SafetyRailsCannotBeOverridden) {
  policies_ = {Policy("vision", 10, "trainer")};
  policies_[0].neighbours.exclude_namespaces.clear();
  auto critical = Pod("batch", "node-exporter");
  critical.priority_class = "system-node-critical";
  auto agent = Pod("feedguard-system", "feedguard-agent-x");
  auto done = Pod("batch", "finished");
  done.phase = "Succeeded";
  auto dying = Pod("batch", "dying");
  dying.terminating = true;
  pods_ = {Pod("ml", "train-0", {{"role", "trainer"}}),
           critical,
           agent,
           done,
           dying,
           Pod("batch", "spin-0")};
  auto r = Resolve();
  ASSERT_EQ(r.fence.neighbours_size(), 1);
  EXPECT_EQ(r.fence.neighbours(0).pod().name(), "spin-0");
}

TEST_F(ResolverTest, DeterministicRegardlessOfInputOrder) {
  policies_ = {Policy("vision", 10, "trainer")};
  pods_ = {Pod("batch", "z"), Pod("ml", "train-0", {{"role", "trainer"}}), Pod("batch", "a")};
  auto r1 = Resolve();
  std::reverse(pods_.begin(), pods_.end());
  auto r2 = Resolve();
  // The controller compares resolutions by their bytes (WireFence): equal inputs, equal bytes.
  EXPECT_EQ(r1.fence.SerializeAsString(), r2.fence.SerializeAsString());
  ASSERT_EQ(r1.fence.neighbours_size(), 2);
  EXPECT_EQ(r1.fence.neighbours(0).pod().name(), "a");
  EXPECT_EQ(r1.fence.neighbours(1).pod().name(), "z");
}

// A Guaranteed trainer beside Burstable/BestEffort neighbours: an Idle fence cannot rank them
// below it (other tiers); a Guaranteed neighbour's fence reaches every tier; Cpuset/Quota
// fences bound neighbours whatever the tier.
TEST_F(ResolverTest, CrossTierNeighboursAreCountedForIdleAndWeightOnly) {
  policies_ = {Policy("vision", 10, "trainer")};
  pods_ = {Pod("ml", "train-0", {{"role", "trainer"}}), Pod("batch", "spin-b"),
           Pod("batch", "spin-be"), Pod("batch", "spin-g")};
  pods_[0].qos = QosClass::kGuaranteed;
  pods_[2].qos = QosClass::kBestEffort;
  pods_[3].qos = QosClass::kGuaranteed;
  auto r = Resolve();
  EXPECT_EQ(r.policies["vision"].neighbours, 3);
  EXPECT_EQ(r.policies["vision"].cross_tier_neighbours, 2);
  EXPECT_EQ(r.policies["vision"].cross_tier_example,
            "batch/spin-b (Burstable) vs trainer ml/train-0 (Guaranteed)");

  pods_[0].qos = QosClass::kBurstable;  // same tier as spin-b: only the BestEffort one is out
  r = Resolve();
  EXPECT_EQ(r.policies["vision"].cross_tier_neighbours, 1);
  EXPECT_EQ(r.policies["vision"].cross_tier_example,
            "batch/spin-be (BestEffort) vs trainer ml/train-0 (Burstable)");

  pods_[0].qos = QosClass::kGuaranteed;
  policies_[0].neighbours.fence = NeighbourFenceMode::kCpuset;
  EXPECT_EQ(Resolve().policies["vision"].cross_tier_neighbours, 0);
}

TEST(ClusterObjectsTest, PodProjection) {
  auto pod = PodFromJson(nlohmann::json::parse(R"({
    "metadata": {"uid": "u-1", "namespace": "ml", "name": "t", "labels": {"role": "trainer"}},
    "spec": {"nodeName": "gpu-1", "priorityClassName": "high",
      "containers": [
        {"name": "main", "resources": {"requests": {"cpu": "1500m", "memory": "1Gi"},
                                       "limits": {"nvidia.com/gpu": "2", "memory": "1Gi"}}},
        {"name": "side", "resources": {"requests": {"cpu": "0.5"}}}]},
    "status": {"phase": "Running", "qosClass": "Burstable",
      "containerStatuses": [{"name": "main", "containerID": "containerd://abc"}]}})"));
  EXPECT_EQ(pod.uid, "u-1");
  EXPECT_EQ(pod.cpu_request_milli, 2000);
  EXPECT_EQ(pod.cpu_limit_milli, 0);
  EXPECT_EQ(pod.gpus, 2);
  EXPECT_EQ(pod.qos, QosClass::kBurstable);
  ASSERT_EQ(pod.containers.size(), 2u);
  EXPECT_EQ(pod.containers[0].id, "containerd://abc");
  EXPECT_EQ(pod.containers[1].id, "");
  EXPECT_EQ(pod.node_name, "gpu-1");
}

// Native sidecars (initContainers with restartPolicy: Always) run beside the containers for the
// pod's life: they are containers of the pod (so the agent lifts their own quota under a Quota
// fence and pins or confines them with the pod), and kubelet counts them in the pod's request
// and limit. Run-to-completion init containers are not containers of the running pod; they only
// raise the pod's request or limit when one needs more than the rest (with the sidecars
// declared before it).
TEST(ClusterObjectsTest, NativeSidecarsAreContainersOfThePod) {
  auto pod = PodFromJson(nlohmann::json::parse(R"({
    "metadata": {"uid": "u-2", "namespace": "batch", "name": "web"},
    "spec": {"nodeName": "gpu-1",
      "initContainers": [
        {"name": "proxy", "restartPolicy": "Always",
         "resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "500m"}}},
        {"name": "setup", "resources": {"limits": {"cpu": "1"}}},
        {"name": "log", "restartPolicy": "Always", "resources": {"limits": {"cpu": "250m"}}}],
      "containers": [{"name": "main", "resources": {"limits": {"cpu": "1"}}}]},
    "status": {"phase": "Running", "qosClass": "Burstable",
      "containerStatuses": [{"name": "main", "containerID": "containerd://aaaa"}],
      "initContainerStatuses": [
        {"name": "proxy", "containerID": "containerd://pppp"},
        {"name": "setup", "containerID": "containerd://ssss"},
        {"name": "log", "containerID": "containerd://llll"}]}})"));
  ASSERT_EQ(pod.containers.size(), 3u);
  EXPECT_EQ(pod.containers[0].name, "main");
  EXPECT_EQ(pod.containers[0].id, "containerd://aaaa");
  EXPECT_EQ(pod.containers[1].name, "proxy");
  EXPECT_EQ(pod.containers[1].id, "containerd://pppp");
  EXPECT_EQ(pod.containers[2].name, "log");
  EXPECT_EQ(pod.containers[2].id, "containerd://llll");
  // main 1000 + proxy 500 + log 250; the init step "setup" needs 1000 + proxy's 500 = 1500.
  EXPECT_EQ(pod.cpu_request_milli, 1750);
  EXPECT_EQ(pod.cpu_limit_milli, 1750);

  // An init container that needs more than the rest sets the pod's request and limit, counted
  // with the sidecars declared before it.
  auto big = PodFromJson(nlohmann::json::parse(R"({"metadata": {"uid": "u-3"}, "spec": {
      "initContainers": [
        {"name": "proxy", "restartPolicy": "Always", "resources": {"limits": {"cpu": "1"}}},
        {"name": "migrate", "resources": {"limits": {"cpu": "4"}}}],
      "containers": [{"name": "main", "resources": {"limits": {"cpu": "1"}}}]}})"));
  EXPECT_EQ(big.cpu_request_milli, 5000);
  EXPECT_EQ(big.cpu_limit_milli, 5000);
  EXPECT_EQ(big.containers.size(), 2u);

  // A sidecar without a CPU limit: kubelet writes no pod quota, so the pod has no limit.
  auto open = PodFromJson(nlohmann::json::parse(R"({"metadata": {"uid": "u-4"}, "spec": {
      "initContainers": [{"name": "proxy", "restartPolicy": "Always",
                          "resources": {"requests": {"cpu": "100m"}}}],
      "containers": [{"name": "main", "resources": {"limits": {"cpu": "1"}}}]}})"));
  EXPECT_EQ(open.cpu_request_milli, 1100);
  EXPECT_EQ(open.cpu_limit_milli, 0);
  // ... nor does a run-to-completion init container without one (and no sidecar before it).
  auto init_open = PodFromJson(nlohmann::json::parse(R"({"metadata": {"uid": "u-5"}, "spec": {
      "initContainers": [{"name": "setup"}],
      "containers": [{"name": "main", "resources": {"limits": {"cpu": "1"}}}]}})"));
  EXPECT_EQ(init_open.cpu_limit_milli, 0);
  EXPECT_EQ(init_open.containers.size(), 1u);
  // A sidecar's GPUs are held for the pod's life; its absent QoS class is derived from every
  // container (here: all limited and equal → Guaranteed).
  auto gpu = PodFromJson(nlohmann::json::parse(R"({"metadata": {"uid": "u-6"}, "spec": {
      "initContainers": [{"name": "feeder", "restartPolicy": "Always", "resources": {
        "limits": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}}}],
      "containers": [{"name": "main", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}})"));
  EXPECT_EQ(gpu.gpus, 1);
  EXPECT_EQ(gpu.qos, QosClass::kGuaranteed);
}

// Every way a device plugin spells a GPU counts by default: time-slicing/MPS replicas renamed
// by renameByDefault (nvidia.com/gpu.shared), MIG slices, AMD and Intel GPUs.
TEST(ClusterObjectsTest, PodUidKeepsEveryUidExactly) {
  // The canonical form the API server writes is held as 16 bytes and reads back the same.
  const std::string canonical = "6dcb31a9-064c-43d6-886d-022e736aae1f";
  EXPECT_EQ(PodUid(canonical).str(), canonical);
  EXPECT_EQ(PodUid(canonical), PodUid(std::string(canonical)));
  EXPECT_FALSE(PodUid(canonical).empty());
  EXPECT_NE(PodUid(canonical), PodUid("6dcb31a9-064c-43d6-886d-022e736aae1e"));
  // Anything else is kept as its text: upper case, no hyphens, wrong length, odd bytes, the
  // all-zero UUID, the empty uid.
  for (const std::string& uid : std::vector<std::string>{
           "6DCB31A9-064C-43D6-886D-022E736AAE1F", "6dcb31a9064c43d6886d022e736aae1f", "u-1",
           "6dcb31a9-064c-43d6-886d-022e736aae1f0", "6dcb31a9-064c-43d6-886d_022e736aae1f",
           std::string("6dcb31a9-064c-43d6-886d-022e736aae1\0", 36),
           "00000000-0000-0000-0000-000000000000", ""}) {
    SCOPED_TRACE(uid);
    EXPECT_EQ(PodUid(uid).str(), uid);
    EXPECT_EQ(PodUid(uid), PodUid(uid));
    EXPECT_EQ(PodUid(uid).empty(), uid.empty());
    EXPECT_NE(PodUid(uid), PodUid(canonical));
  }
  EXPECT_NE(PodUid("6DCB31A9-064C-43D6-886D-022E736AAE1F"), PodUid(canonical));
}

TEST(ClusterObjectsTest, ContainerIdKeepsEveryIdExactly) {
  const std::string hex64 = "4dfdfbc5ca1414116bf58456f266d24ba0e4acaa29a3817bf16ee572f281b6ef";
  for (const std::string& id : std::vector<std::string>{
           "containerd://" + hex64, "cri-o://" + hex64, "docker://" + hex64,
           "containerd://" + hex64.substr(1), "containerd://" + hex64 + "0",
           "containerd://4DFDFBC5" + hex64.substr(8), "containerd://" + std::string(64, '0'), hex64,
           "containerd://abc", "://" + hex64, "", "x"}) {
    SCOPED_TRACE(id);
    EXPECT_EQ(ContainerId(id).str(), id);
    EXPECT_EQ(ContainerId(id), ContainerId(id));
    EXPECT_EQ(ContainerId(id).empty(), id.empty());
  }
  EXPECT_NE(ContainerId("containerd://" + hex64), ContainerId("cri-o://" + hex64));
  EXPECT_NE(ContainerId("containerd://" + hex64),
            ContainerId("containerd://" + hex64.substr(0, 63) + "e"));
  // Interning shares the runtime prefix and changes nothing else.
  InternPool<std::string> pool;
  ContainerId a("containerd://" + hex64), b(a);
  a.InternPrefix(pool);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.str(), "containerd://" + hex64);
}

TEST(ClusterObjectsTest, InternPoolsHandEqualValuesOneCopy) {
  InternPool<std::string> names;
  SharedString a = names.Intern(std::string("node-1")), b = names.Intern(SharedString("node-1"));
  EXPECT_EQ(&a.get(), &b.get());
  EXPECT_EQ(a, "node-1");
  EXPECT_TRUE(names.Intern(SharedString()).empty());
  // Values no record holds any more are swept once the pool has doubled.
  for (int i = 0; i < 3000; ++i) names.Intern(SharedString("gone-" + std::to_string(i)));
  EXPECT_LT(names.size(), 1100u);
  EXPECT_EQ(&names.Intern(SharedString("node-1")).get(), &a.get());
}

TEST(ClusterObjectsTest, GpuResourceNamesDefaultAndConfigured) {
  auto pod_with = [](const std::string& resource, int n) {
    return nlohmann::json{
        {"metadata", {{"uid", "u"}}},
        {"spec",
         {{"containers",
           {{{"name", "a"}, {"resources", {{"limits", {{resource, std::to_string(n)}}}}}}}}}}};
  };
  for (const char* name :
       {"nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-1g.5gb",
        "nvidia.com/mig-3g.20gb", "amd.com/gpu", "gpu.intel.com/i915", "gpu.intel.com/xe"}) {
    EXPECT_EQ(PodFromJson(pod_with(name, 2)).gpus, 2) << name;
  }
  for (const char* name :
       {"nvidia.com/gpux", "nvidia.com/gpu-ts", "example.com/gpu", "gpu.intel.com/millicores"}) {
    EXPECT_EQ(PodFromJson(pod_with(name, 2)).gpus, 0) << name;
  }

  GpuResourceNames custom;
  std::string error;
  ASSERT_TRUE(
      GpuResourceNames::Parse(" nvidia.com/gpu-ts , example.com/accel-* ,", &custom, &error))
      << error;
  EXPECT_EQ(custom.exact, std::vector<std::string>{"nvidia.com/gpu-ts"});
  EXPECT_EQ(custom.prefixes, std::vector<std::string>{"example.com/accel-"});
  EXPECT_EQ(PodFromJson(pod_with("nvidia.com/gpu-ts", 3), custom).gpus, 3);
  EXPECT_EQ(PodFromJson(pod_with("example.com/accel-x1", 1), custom).gpus, 1);
  EXPECT_EQ(PodFromJson(pod_with("nvidia.com/gpu", 1), custom).gpus, 0);  // not listed

  GpuResourceNames defaults;
  ASSERT_TRUE(GpuResourceNames::Parse(kDefaultGpuResourceNames, &defaults, &error));
  EXPECT_EQ(defaults.prefixes, std::vector<std::string>{"nvidia.com/mig-"});
  EXPECT_EQ(defaults.exact.size(), 5u);
  for (const char* bad : {"gpu", "nvidia.com/", "/gpu", "nvidia.com/g pu"}) {
    GpuResourceNames ignored;
    EXPECT_FALSE(GpuResourceNames::Parse(bad, &ignored, &error)) << bad;
    EXPECT_NE(error.find("not <domain>/<name>"), std::string::npos) << error;
  }
}

TEST(ClusterObjectsTest, DraClaimsOfAPodAndTheGpusAllocatedToAClaim) {
  // The claims a pod names: in its spec, and (made from a template) in its status; once each.
  auto pod = PodFromJson(nlohmann::json::parse(R"({"metadata":{"uid":"1"},"spec":{
    "resourceClaims":[{"name":"a","resourceClaimName":"c1"},{"name":"b",
      "resourceClaimTemplateName":"t"},{"name":"c","resourceClaimName":"c1"},{"name":7},"x"]},
    "status":{"resourceClaimStatuses":[{"name":"b","resourceClaimName":"pod-b-x1"},{"name":"z"}]}})"));
  EXPECT_EQ(pod.claims, (std::vector<std::string>{"c1", "pod-b-x1"}));
  EXPECT_EQ(pod.gpus, 0);
  pod.claim_gpus = 2;
  EXPECT_EQ(pod.AllGpus(), 2);
  pod.gpus = INT32_MAX;
  EXPECT_EQ(pod.AllGpus(), INT32_MAX) << "saturates";
  // At most 32 (the API server's bound), whatever a hostile object says.
  nlohmann::json many = {{"metadata", {{"uid", "1"}}},
                         {"spec", {{"resourceClaims", nlohmann::json::array()}}}};
  for (int i = 0; i < 100; ++i) {
    many["spec"]["resourceClaims"].push_back(
        {{"name", "n"}, {"resourceClaimName", "c" + std::to_string(i)}});
  }
  EXPECT_EQ(PodFromJson(many).claims.size(), 32u);

  std::vector<std::string> drivers;
  std::string error;
  ASSERT_TRUE(ParseDraDrivers(kDefaultGpuDraDrivers, &drivers, &error)) << error;
  EXPECT_EQ(drivers, (std::vector<std::string>{"gpu.nvidia.com", "gpu.amd.com", "gpu.intel.com"}));
  // Allocated: two GPUs of NVIDIA's driver, a NIC of another; a ComputeDomain channel is no GPU.
  const std::string claim_text = R"({"metadata":{"name":"c1","namespace":"ml","uid":"u",
    "resourceVersion":"5","managedFields":[{"manager":"kube-scheduler"}]},
    "spec":{"devices":{"requests":[{"name":"gpus","exactly":{"deviceClassName":"gpu.nvidia.com","count":2}}]}},
    "status":{"allocation":{"devices":{"results":[
      {"request":"gpus","driver":"gpu.nvidia.com","pool":"node-1","device":"gpu-0"},
      {"request":"gpus","driver":"gpu.nvidia.com","pool":"node-1","device":"gpu-1-mig-1g10gb-0"},
      {"request":"nic","driver":"dra.net","pool":"node-1","device":"eth1"},
      {"request":"cd","driver":"compute-domain.nvidia.com","pool":"node-1","device":"channel-0"}]},
      "nodeSelector":{"nodeSelectorTerms":[]}},
      "reservedFor":[{"resource":"pods","name":"p","uid":"1"}]}})";
  const nlohmann::json whole = nlohmann::json::parse(claim_text);
  const ClaimInfo c = ClaimFromJson(whole, drivers);
  EXPECT_EQ(c.ns, "ml");
  EXPECT_EQ(c.name, "c1");
  EXPECT_EQ(c.gpus, 2);
  const nlohmann::json trimmed = kube::ParseFields(claim_text, ClaimFields().get());
  EXPECT_EQ(ClaimFromJson(trimmed, drivers).gpus, 2) << trimmed.dump();
  EXPECT_EQ(trimmed["metadata"]["resourceVersion"], "5");
  EXPECT_FALSE(trimmed.contains("spec")) << trimmed.dump();
  // Not allocated yet, malformed, or no GPU driver configured: no GPUs.
  EXPECT_EQ(
      ClaimFromJson(nlohmann::json::parse(R"({"metadata":{"name":"c"},"status":{}})"), drivers)
          .gpus,
      0);
  EXPECT_EQ(ClaimFromJson(
                nlohmann::json::parse(R"({"status":{"allocation":{"devices":{"results":"x"}}}})"),
                drivers)
                .gpus,
            0);
  EXPECT_EQ(ClaimFromJson(whole, {}).gpus, 0);
  for (const char* bad : {"GPU.nvidia.com", "gpu nvidia", "gpu.nvidia.com/x", "-gpu", "gpu."}) {
    std::vector<std::string> ignored;
    EXPECT_FALSE(ParseDraDrivers(bad, &ignored, &error)) << bad;
    EXPECT_NE(error.find("not a DNS subdomain"), std::string::npos) << error;
  }
  ASSERT_TRUE(ParseDraDrivers(" , ", &drivers, &error));
  EXPECT_TRUE(drivers.empty()) << "an empty list turns DRA off";
}

TEST(ClusterObjectsTest, QosDerivedWhenStatusLacksIt) {
  auto g = PodFromJson(nlohmann::json::parse(R"({"metadata":{"uid":"1"},"spec":{"containers":[
    {"name":"a","resources":{"limits":{"cpu":"2","memory":"1Gi"}}}]}})"));
  EXPECT_EQ(g.qos, QosClass::kGuaranteed);
  EXPECT_EQ(g.cpu_request_milli, 2000);
  EXPECT_EQ(g.cpu_limit_milli, 2000);
  auto be = PodFromJson(nlohmann::json::parse(R"({"metadata":{"uid":"1"},"spec":{"containers":[
    {"name":"a"}]}})"));
  EXPECT_EQ(be.qos, QosClass::kBestEffort);
}

TEST(ClusterObjectsTest, CpuQuantities) {
  EXPECT_EQ(*ParseCpuMilli("250m"), 250);
  EXPECT_EQ(*ParseCpuMilli("2"), 2000);
  EXPECT_EQ(*ParseCpuMilli("0.1"), 100);
  EXPECT_EQ(*ParseCpuMilli("1.0005"), 1001);
  EXPECT_FALSE(ParseCpuMilli("two").ok());
  EXPECT_FALSE(ParseCpuMilli("").ok());
  EXPECT_FALSE(ParseCpuMilli("-1").ok());
}

TEST(ClusterObjectsTest, CpuQuantitiesAreExactAndTakeEverySuffix) {
  // Found by fuzz_cpu_quantity: read through a double, 200.101000000001 cores lost its last
  // fraction of a millicore (200101, not 200102 as Kubernetes rounds up).
  EXPECT_EQ(*ParseCpuMilli("200.1010000000010"), 200102);
  EXPECT_EQ(*ParseCpuMilli("2.0000000000001"), 2001);
  EXPECT_EQ(*ParseCpuMilli("0.0001"), 1);
  EXPECT_EQ(*ParseCpuMilli(".5"), 500);
  EXPECT_EQ(*ParseCpuMilli("+1"), 1000);
  EXPECT_EQ(*ParseCpuMilli("0"), 0);
  EXPECT_EQ(*ParseCpuMilli("-0"), 0);
  // Quantities the API server stores in canonical form: "1k" CPUs, "100u" (rounded up to 1m).
  EXPECT_EQ(*ParseCpuMilli("1k"), 1'000'000);
  EXPECT_EQ(*ParseCpuMilli("100u"), 1);
  EXPECT_EQ(*ParseCpuMilli("500000n"), 1);
  EXPECT_EQ(*ParseCpuMilli("2E3"), 2'000'000);
  EXPECT_EQ(*ParseCpuMilli("15e-1"), 1500);
  EXPECT_EQ(*ParseCpuMilli("1Ki"), 1'024'000);
  EXPECT_EQ(*ParseCpuMilli("1.5Ki"), 1'536'000);
  for (const char* q : {"1e", "1e+", "1x", "1.2.3", ".", "m", "1mm", "1 ", " 1", "1ki",
                        "1e99999999999999999999999", "1Ei"}) {
    EXPECT_FALSE(ParseCpuMilli(q).ok()) << q;
  }
}

TEST(ClusterObjectsTest, QuantitiesThatWouldOverflowAreRejected) {
  for (const char* q :
       {"inf", "nan", "-inf", "1e300", "9223372036854775807", "99999999999999999999m", "1e16"}) {
    EXPECT_FALSE(ParseCpuMilli(q).ok()) << q;
  }
  EXPECT_EQ(*ParseCpuMilli("1e3"), 1'000'000);
}

TEST(ClusterObjectsTest, MalformedPodsProjectWithoutThrowing) {
  const nlohmann::json pods[] = {
      nullptr,
      1,
      "pod",
      nlohmann::json::array(),
      {{"metadata", "x"}, {"spec", 1}, {"status", {1, 2}}},
      {{"metadata", {{"uid", 1}, {"labels", {1}}}},
       {"spec", {{"containers", {1, "x", {{"resources", 5}}, {{"resources", {{"limits", 7}}}}}}}}},
      {{"metadata", {{"uid", "u"}}},
       {"spec",
        {{"containers",
          {{{"name", "a"},
            {"resources",
             {{"requests", {{"cpu", "1e300"}}},
              {"limits",
               {{"cpu", 5},
                {"nvidia.com/gpu", "99999999999"},
                {"nvidia.com/mig-1g", -4},
                {"nvidia.com/mig-2g", 18446744073709551615ull}}}}}}}}}},
       {"status", {{"containerStatuses", {1, {{"name", 2}}}}}}},
  };
  for (const auto& j : pods) {
    PodInfo p;
    ASSERT_NO_THROW(p = PodFromJson(j)) << j.dump();
    EXPECT_GE(p.gpus, 0);
    EXPECT_GE(p.cpu_request_milli, 0);
    EXPECT_NO_THROW(NodeFromJson(j));
    EXPECT_NO_THROW(NamespaceFromJson(j));
  }
  // Many huge containers: the sums saturate instead of overflowing.
  nlohmann::json big = {{"metadata", {{"uid", "u"}}},
                        {"spec", {{"containers", nlohmann::json::array()}}}};
  for (int i = 0; i < 20; ++i) {
    big["spec"]["containers"].push_back(
        {{"name", "c" + std::to_string(i)},
         {"resources", {{"limits", {{"cpu", "999999999"}, {"nvidia.com/gpu", "1024"}}}}}});
  }
  PodInfo p = PodFromJson(big);
  EXPECT_GT(p.cpu_request_milli, 0);
  EXPECT_GT(p.cpu_limit_milli, 0);
  EXPECT_EQ(p.gpus, 20 * 1024);
}

// The informers parse Pods and Nodes down to PodFields() / NodeFields(). Whatever the records
// read must survive that: the record of the trimmed object equals the record of the whole one.
// The pod is shaped as the API server serves a Deployment's (defaults, volumes, env, probes,
// conditions, managedFields) with every field the record reads set.
TEST(ClusterObjectsTest, RecordsOfTrimmedObjectsEqualRecordsOfWholeOnes) {
  const std::string pod_text = R"({"kind": "Pod", "apiVersion": "v1",
    "metadata": {"name": "train-7d9f-x2", "generateName": "train-7d9f-", "namespace": "ml",
      "uid": "6dcb31a9-064c-43d6-886d-022e736aae1f", "resourceVersion": "225", "generation": 1,
      "creationTimestamp": "2026-11-23T15:49:19Z", "deletionTimestamp": "2026-11-23T16:00:00Z",
      "labels": {"app": "train", "pod-template-hash": "7d9f", "feedguard.io/role": "trainer"},
      "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-11-23T15:00:00Z"},
      "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "train-7d9f",
                           "uid": "11111111-2222-3333-4444-555555555555", "controller": true}],
      "managedFields": [{"manager": "kube-controller-manager", "operation": "Update",
                         "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {}}}}]},
    "spec": {
      "volumes": [{"name": "kube-api-access-x", "projected": {"sources": [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}], "defaultMode": 420}}],
      "initContainers": [{"name": "init", "image": "busybox", "resources": {"requests": {"cpu": "8"}}},
        {"name": "proxy", "image": "envoy", "restartPolicy": "Always", "ports": [{"containerPort": 9901}],
         "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}}],
      "containers": [
        {"name": "main", "image": "registry.example/train:1.0",
         "env": [{"name": "NCCL_DEBUG", "value": "INFO"}],
         "resources": {"limits": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "2"},
                       "requests": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "2"}},
         "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080}},
         "volumeMounts": [{"name": "kube-api-access-x", "readOnly": true,
                           "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
         "terminationMessagePath": "/dev/termination-log", "imagePullPolicy": "IfNotPresent"},
        {"name": "loader", "image": "registry.example/loader:1.0",
         "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"amd.com/gpu": 1}}}],
      "restartPolicy": "Always", "dnsPolicy": "ClusterFirst", "nodeName": "gpu-node-1",
      "priorityClassName": "training", "priority": 1000, "schedulerName": "default-scheduler",
      "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "two-gpus"},
                         {"name": "shared", "resourceClaimName": "shared-gpu"}],
      "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
    "status": {"phase": "Running", "qosClass": "Burstable", "hostIP": "10.0.0.7",
      "conditions": [{"type": "Ready", "status": "True"}],
      "containerStatuses": [
        {"name": "loader", "containerID": "containerd://bbbb", "ready": true, "restartCount": 0,
         "state": {"running": {"startedAt": "2026-11-23T15:49:25Z"}}},
        {"name": "main", "containerID": "containerd://aaaa", "ready": true}],
      "initContainerStatuses": [{"name": "init", "containerID": "containerd://cccc"},
        {"name": "proxy", "containerID": "containerd://dddd", "ready": true, "started": true}],
      "resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": "train-7d9f-x2-gpus-k2x9p"}]}})";
  const nlohmann::json whole = nlohmann::json::parse(pod_text);
  const nlohmann::json trimmed = kube::ParseFields(pod_text, PodFields().get());
  EXPECT_LT(trimmed.dump().size() * 2, whole.dump().size()) << trimmed.dump();
  const PodInfo a = PodFromJson(whole), b = PodFromJson(trimmed);
  EXPECT_EQ(a, b);
  // The record is the interesting one (not defaults on both sides).
  EXPECT_EQ(b.uid, "6dcb31a9-064c-43d6-886d-022e736aae1f");
  EXPECT_EQ(b.ns.get() + "/" + b.name + "@" + b.node_name.get() + ":" + b.priority_class.get() +
                ":" + b.phase.get(),
            "ml/train-7d9f-x2@gpu-node-1:training:Running");
  EXPECT_TRUE(b.terminating);
  EXPECT_EQ(b.gpus, 3);
  EXPECT_EQ(b.cpu_request_milli, 8750);  // main, loader and the proxy sidecar
  EXPECT_EQ(b.claims, (std::vector<std::string>{"shared-gpu", "train-7d9f-x2-gpus-k2x9p"}));
  EXPECT_EQ(b.qos, QosClass::kBurstable);
  ASSERT_EQ(b.containers.size(), 3u);
  EXPECT_EQ(b.containers[1].id, "containerd://bbbb");
  EXPECT_EQ(b.containers[2].name, "proxy");
  EXPECT_EQ(b.containers[2].id, "containerd://dddd");
  EXPECT_EQ(b.labels.get().size(), 3u);
  ASSERT_NE(b.labels.get().Find("pod-template-hash"), nullptr);
  EXPECT_EQ(*b.labels.get().Find("pod-template-hash"), "7d9f");
  EXPECT_EQ(b.labels.get().Find("pod-template"), nullptr);
  EXPECT_EQ(trimmed["metadata"]["resourceVersion"], "225");

  const std::string node_text = R"({"kind": "Node", "metadata": {"name": "gpu-node-1",
    "uid": "u", "resourceVersion": "9", "labels": {"nvidia.com/gpu.present": "true"},
    "managedFields": [{"manager": "kubelet"}]},
    "spec": {"podCIDR": "10.1.0.0/24", "taints": [{"key": "k", "effect": "NoSchedule"}]},
    "status": {"images": [{"names": ["registry.example/train:1.0"], "sizeBytes": 123456789}],
               "capacity": {"cpu": "64"}}})";
  const nlohmann::json node_whole = nlohmann::json::parse(node_text);
  const nlohmann::json node_trimmed = kube::ParseFields(node_text, NodeFields().get());
  EXPECT_FALSE(node_trimmed.contains("status"));
  const NodeInfo n1 = NodeFromJson(node_whole), n2 = NodeFromJson(node_trimmed);
  EXPECT_EQ(n1.name, n2.name);
  EXPECT_EQ(n1.labels, n2.labels);
  EXPECT_EQ(n2.labels.size(), 1u);
}

}  // namespace
}  // namespace feedguard::controller
