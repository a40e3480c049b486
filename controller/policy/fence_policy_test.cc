#include "controller/policy/fence_policy.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace feedguard::controller {
namespace {

nlohmann::json Valid() {
  return nlohmann::json::parse(R"({
    "apiVersion": "feedguard.io/v1alpha1", "kind": "FencePolicy",
    "metadata": {"name": "vision", "generation": 3, "resourceVersion": "17",
                 "finalizers": ["feedguard.io/revert-fences"]},
    "spec": {
      "priority": 100, "mode": "DryRun",
      "nodeSelector": {"matchLabels": {"nvidia.com/gpu.present": "true"}},
      "trainers": {"podSelector": {"matchLabels": {"feedguard.io/role": "trainer"}},
                   "cpu": {"coresPerGPU": 6, "placement": "Threads", "numa": "RequireGPULocal",
                           "weight": 10000}},
      "neighbours": {"exclude": {"namespaces": ["kube-system"],
                                 "priorityClasses": ["system-node-critical"]},
                     "fence": "Quota", "maxCPU": "75%"}
    }})");
}

TEST(FencePolicyTest, ParsesEveryField) {
  auto parsed = ParseFencePolicy(Valid());
  ASSERT_TRUE(parsed.errors.empty()) << JoinFieldErrors(parsed.errors);
  const FencePolicy& p = parsed.policy;
  EXPECT_EQ(p.name, "vision");
  EXPECT_EQ(p.generation, 3);
  EXPECT_TRUE(p.HasFinalizer());
  EXPECT_FALSE(p.deleting);
  EXPECT_EQ(p.priority, 100);
  EXPECT_EQ(p.mode, PolicyMode::kDryRun);
  EXPECT_EQ(p.trainers.cores_per_gpu, 6);
  EXPECT_EQ(p.trainers.placement, CpuPlacement::kThreads);
  EXPECT_EQ(p.trainers.numa, NumaMode::kRequireGpuLocal);
  EXPECT_EQ(p.trainers.weight, 10000);
  EXPECT_EQ(p.neighbours.fence, NeighbourFenceMode::kQuota);
  EXPECT_EQ(p.neighbours.max_cpu_percent, 75);
  EXPECT_EQ(p.neighbours.exclude_namespaces, std::vector<std::string>{"kube-system"});
  EXPECT_TRUE(p.node_selector.Matches({{"nvidia.com/gpu.present", "true"}}));
  EXPECT_FALSE(p.node_selector.Matches({}));
  EXPECT_TRUE(ValidateFencePolicy(p).empty());
}

TEST(FencePolicyTest, DefaultsWhenFieldsAreAbsent) {
  auto j = nlohmann::json::parse(R"({"metadata":{"name":"x"},"spec":{"trainers":{
      "podSelector":{"matchLabels":{"a":"b"}}}}})");
  auto parsed = ParseFencePolicy(j);
  ASSERT_TRUE(parsed.errors.empty());
  EXPECT_EQ(parsed.policy.mode, PolicyMode::kEnforce);
  EXPECT_EQ(parsed.policy.neighbours.fence, NeighbourFenceMode::kIdle);
  EXPECT_EQ(parsed.policy.trainers.placement, CpuPlacement::kWholeCores);
  EXPECT_EQ(parsed.policy.trainers.numa, NumaMode::kPreferGpuLocal);
  EXPECT_EQ(parsed.policy.neighbours.max_cpu_percent, 0);
  EXPECT_EQ(parsed.policy.trainers.weight, 0);  // kubelet's weight is kept
}

TEST(FencePolicyTest, TypeErrorsNameTheField) {
  auto j = Valid();
  j["spec"]["mode"] = "Sometimes";
  j["spec"]["trainers"]["cpu"]["cores"] = "six";
  j["spec"]["neighbours"]["maxCPU"] = "150%";
  j["spec"]["trainers"]["podSelector"]["matchExpressions"] =
      nlohmann::json::parse(R"([{"key":"k","operator":"In"}])");
  auto parsed = ParseFencePolicy(j);
  std::string all = JoinFieldErrors(parsed.errors);
  EXPECT_NE(all.find("spec.mode: \"Sometimes\" is not one of Enforce, DryRun"), std::string::npos)
      << all;
  EXPECT_NE(all.find("spec.trainers.cpu.cores: must be an integer"), std::string::npos) << all;
  EXPECT_NE(all.find("spec.neighbours.maxCPU: \"150%\" must be between 1% and 100%"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("spec.trainers.podSelector.matchExpressions[0].values: required for In"),
            std::string::npos)
      << all;
}

TEST(FencePolicyTest, SemanticValidation) {
  auto p = ParseFencePolicy(Valid()).policy;
  p.trainers.cores = 4;  // both cores and coresPerGPU
  p.trainers.pod_selector = LabelSelector();
  auto errors = ValidateFencePolicy(p);
  std::string all = JoinFieldErrors(errors);
  EXPECT_NE(all.find("spec.trainers.cpu: set at most one of cores and coresPerGPU"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("spec.trainers.podSelector: must select something"), std::string::npos) << all;

  auto q = ParseFencePolicy(Valid()).policy;
  q.trainers.cores_per_gpu = 0;
  q.neighbours.fence = NeighbourFenceMode::kCpuset;
  all = JoinFieldErrors(ValidateFencePolicy(q));
  EXPECT_NE(all.find("spec.neighbours.fence: Cpuset keeps neighbours off"), std::string::npos)
      << all;

  for (int bad : {-1, 10001}) {
    auto w = ParseFencePolicy(Valid()).policy;
    w.trainers.weight = bad;
    all = JoinFieldErrors(ValidateFencePolicy(w));
    EXPECT_NE(all.find("spec.trainers.cpu.weight: must be between 1 and 10000"), std::string::npos)
        << bad << ": " << all;
  }
}

TEST(LabelSelectorTest, Expressions) {
  auto s = LabelSelector::FromJson(nlohmann::json::parse(R"({"matchExpressions":[
      {"key":"tier","operator":"In","values":["batch","best"]},
      {"key":"gpu","operator":"DoesNotExist"},
      {"key":"team","operator":"NotIn","values":["ml"]},
      {"key":"zone","operator":"Exists"}]})"),
                                   "sel");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(s->Matches({{"tier", "batch"}, {"zone", "a"}}));
  EXPECT_FALSE(s->Matches({{"tier", "batch"}, {"zone", "a"}, {"gpu", "1"}}));
  EXPECT_FALSE(s->Matches({{"tier", "batch"}, {"zone", "a"}, {"team", "ml"}}));
  EXPECT_FALSE(s->Matches({{"tier", "web"}, {"zone", "a"}}));
  EXPECT_FALSE(s->Matches({{"tier", "batch"}}));
  EXPECT_TRUE(LabelSelector().Matches({}));
  auto bad = LabelSelector::FromJson(
      nlohmann::json::parse(R"({"matchExpressions":[{"key":"a","operator":"Near"}]})"), "sel");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "sel.matchExpressions[0].operator: \"Near\" is not In, NotIn, Exists or DoesNotExist");
}

}  // namespace
}  // namespace feedguard::controller
