#include "controller/policy/fence_policy.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <charconv>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

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
  EXPECT_NE(all.find("spec.trainers.cpu.cores: expected integer"), std::string::npos) << all;
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

// ---- a corpus of malformed policies: wrong JSON type in every field (issue 13) ----

// A policy with every field of the schema set (selectors with both matchLabels and
// matchExpressions), so that every path below exists.
nlohmann::json EveryField() {
  return nlohmann::json::parse(R"({
    "apiVersion": "feedguard.io/v1alpha1", "kind": "FencePolicy",
    "metadata": {"name": "every", "generation": 1, "finalizers": ["feedguard.io/revert-fences"]},
    "spec": {
      "priority": 5, "mode": "Enforce",
      "nodeSelector": {"matchLabels": {"nvidia.com/gpu.present": "true"},
                       "matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
      "trainers": {
        "requireGPU": true,
        "namespaceSelector": {"matchLabels": {"team": "ml"},
                              "matchExpressions": [{"key": "tier", "operator": "Exists"}]},
        "podSelector": {"matchLabels": {"feedguard.io/role": "trainer"},
                        "matchExpressions": [{"key": "gpu", "operator": "In",
                                              "values": ["a100"]}]},
        "cpu": {"cores": 4, "placement": "WholeCores", "numa": "PreferGPULocal", "weight": 200}},
      "neighbours": {
        "podSelector": {"matchLabels": {"tier": "batch"},
                        "matchExpressions": [{"key": "x", "operator": "NotIn",
                                              "values": ["y"]}]},
        "exclude": {"namespaces": ["kube-system"], "priorityClasses": ["system-node-critical"]},
        "fence": "Quota", "maxCPU": "50%"}
    }})");
}

std::vector<nlohmann::json> WrongTypesFor(const nlohmann::json& v) {
  const std::vector<nlohmann::json> all = {
      true, 42, 4.5, "text", nlohmann::json::array({1}), nlohmann::json{{"k", 1}}};
  std::vector<nlohmann::json> out;
  for (const auto& w : all) {
    const bool same =
        w.type() == v.type() || (w.is_number() && v.is_number_integer() && w.is_number_integer());
    if (!same) out.push_back(w);
  }
  return out;
}

// Every path under `j` ("spec.trainers.cpu.cores", "...matchExpressions[0].key"), depth first.
void Paths(const nlohmann::json& j, const std::string& at,
           std::vector<std::pair<std::string, nlohmann::json::json_pointer>>* out,
           const nlohmann::json::json_pointer& ptr) {
  if (!at.empty()) out->push_back({at, ptr});
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) Paths(v, at.empty() ? k : at + "." + k, out, ptr / k);
  } else if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i) {
      Paths(j[i], at + "[" + std::to_string(i) + "]", out, ptr / i);
    }
  }
}

TEST(MalformedPolicyCorpusTest, WrongJsonTypeInEveryFieldIsAFieldErrorNeverAThrow) {
  const nlohmann::json base = EveryField();
  {
    auto parsed = ParseFencePolicy(base);
    auto errors = parsed.errors;
    for (auto& e : ValidateFencePolicy(parsed.policy)) errors.push_back(e);
    ASSERT_TRUE(errors.empty()) << JoinFieldErrors(errors);
  }
  std::vector<std::pair<std::string, nlohmann::json::json_pointer>> paths;
  Paths(base["spec"], "spec", &paths, nlohmann::json::json_pointer("/spec"));
  paths.push_back({"metadata.finalizers", nlohmann::json::json_pointer("/metadata/finalizers")});
  paths.push_back(
      {"metadata.finalizers[0]", nlohmann::json::json_pointer("/metadata/finalizers/0")});
  int cases = 0;
  for (const auto& [path, ptr] : paths) {
    for (const auto& wrong : WrongTypesFor(base[ptr])) {
      // maxCPU is int-or-string: an integer percentage is valid.
      if (path == "spec.neighbours.maxCPU" && wrong.is_number_integer()) continue;
      nlohmann::json bad = base;
      bad[ptr] = wrong;
      ParsedPolicy parsed;
      ASSERT_NO_THROW(parsed = ParseFencePolicy(bad)) << path << " = " << wrong.dump();
      std::vector<FieldError> errors = parsed.errors;
      ASSERT_NO_THROW(for (auto& e : ValidateFencePolicy(parsed.policy)) errors.push_back(e));
      const std::string all = JoinFieldErrors(errors);
      // The message names the field itself (or, for a map key's value, the entry).
      bool named = false;
      for (const auto& e : errors) named = named || e.field.rfind(path, 0) == 0;
      EXPECT_TRUE(named) << path << " = " << wrong.dump() << " gave: " << all;
      ++cases;
    }
  }
  EXPECT_GT(cases, 150);  // the corpus is not accidentally empty
}

TEST(MalformedPolicyCorpusTest, NamedMessagesForTheIssueExamples) {
  auto j = EveryField();
  j["spec"]["trainers"]["podSelector"]["matchExpressions"][0]["key"] = 7;
  auto parsed = ParseFencePolicy(j);
  EXPECT_EQ(JoinFieldErrors(parsed.errors),
            "spec.trainers.podSelector.matchExpressions[0].key: expected string");
  j = EveryField();
  j["spec"]["trainers"]["podSelector"]["matchExpressions"][0]["operator"] = {1};
  EXPECT_EQ(JoinFieldErrors(ParseFencePolicy(j).errors),
            "spec.trainers.podSelector.matchExpressions[0].operator: expected string");
  j = EveryField();
  j["spec"]["trainers"]["podSelector"]["matchExpressions"][0]["values"][0] = nullptr;
  EXPECT_EQ(JoinFieldErrors(ParseFencePolicy(j).errors),
            "spec.trainers.podSelector.matchExpressions[0].values[0]: expected string");
}

// Explicit zeros and out-of-range values are errors, not "unset" (nor truncated).
TEST(MalformedPolicyCorpusTest, ZerosAndOutOfRangeValuesAreErrors) {
  struct Case {
    const char* pointer;
    nlohmann::json value;
    const char* field;
  };
  const int64_t two40 = int64_t{1} << 40;
  const uint64_t wraps_to_5 = (uint64_t{1} << 32) + 5;  // int32 truncation would read 5
  const Case cases[] = {
      {"/spec/trainers/cpu/cores", 0, "spec.trainers.cpu.cores"},
      {"/spec/trainers/cpu/cores", -3, "spec.trainers.cpu.cores"},
      {"/spec/trainers/cpu/cores", two40, "spec.trainers.cpu.cores"},
      {"/spec/trainers/cpu/cores", 1025, "spec.trainers.cpu.cores"},
      {"/spec/trainers/cpu/cores", wraps_to_5, "spec.trainers.cpu.cores"},
      {"/spec/trainers/cpu/cores", UINT64_MAX, "spec.trainers.cpu.cores"},
      {"/spec/trainers/cpu/weight", 0, "spec.trainers.cpu.weight"},
      {"/spec/trainers/cpu/weight", 10001, "spec.trainers.cpu.weight"},
      {"/spec/priority", -1, "spec.priority"},
      {"/spec/priority", two40, "spec.priority"},
      {"/spec/priority", wraps_to_5, "spec.priority"},
      {"/spec/neighbours/maxCPU", 0, "spec.neighbours.maxCPU"},
      {"/spec/neighbours/maxCPU", 101, "spec.neighbours.maxCPU"},
      {"/spec/neighbours/maxCPU", (uint64_t{1} << 32) + 50, "spec.neighbours.maxCPU"},
      {"/spec/neighbours/maxCPU", "0%", "spec.neighbours.maxCPU"},
      {"/spec/neighbours/maxCPU", "101%", "spec.neighbours.maxCPU"},
      {"/spec/neighbours/maxCPU", "0050%", "spec.neighbours.maxCPU"},
      {"/spec/neighbours/maxCPU", "50", "spec.neighbours.maxCPU"},
      {"/spec/neighbours/maxCPU", "-5%", "spec.neighbours.maxCPU"},
      {"/spec/mode", "enforce", "spec.mode"},
      {"/spec/neighbours/fence", "", "spec.neighbours.fence"},
      {"/spec/trainers/cpu/placement", "Cores", "spec.trainers.cpu.placement"},
      {"/spec/trainers/podSelector/matchLabels", nlohmann::json{{"bad key!", "x"}},
       "spec.trainers.podSelector.matchLabels.bad key!"},
      {"/spec/trainers/podSelector/matchLabels", nlohmann::json{{"ok", "bad value!"}},
       "spec.trainers.podSelector.matchLabels.ok"},
      {"/spec/trainers/podSelector/matchLabels", nlohmann::json{{"ok", std::string(64, 'v')}},
       "spec.trainers.podSelector.matchLabels.ok"},
      {"/spec/trainers/podSelector/matchExpressions/0/key", "", "spec.trainers.podSelector"},
      {"/spec/neighbours/exclude/namespaces", nlohmann::json{"Kube_System"},
       "spec.neighbours.exclude.namespaces[0]"},
      {"/spec/neighbours/exclude/namespaces", nlohmann::json{"a", "a"},
       "spec.neighbours.exclude.namespaces[1]"},
      {"/spec/neighbours/exclude/priorityClasses", nlohmann::json{"UPPER"},
       "spec.neighbours.exclude.priorityClasses[0]"},
      {"/spec/trainers/podSelector", nullptr, "spec.trainers.podSelector"},
      {"/spec/trainers", nullptr, "spec.trainers"},
      {"/spec", nullptr, "spec"},
  };
  for (const auto& c : cases) {
    auto j = EveryField();
    j[nlohmann::json::json_pointer(c.pointer)] = c.value;
    if (c.value.is_null())
      j[nlohmann::json::json_pointer(c.pointer).parent_pointer()].erase(
          nlohmann::json::json_pointer(c.pointer).back());
    auto parsed = ParseFencePolicy(j);
    auto errors = parsed.errors;
    for (auto& e : ValidateFencePolicy(parsed.policy)) errors.push_back(e);
    bool named = false;
    for (const auto& e : errors) named = named || e.field.rfind(c.field, 0) == 0;
    EXPECT_TRUE(named) << c.pointer << " = " << c.value.dump()
                       << " gave: " << JoinFieldErrors(errors);
  }
  // Too many entries (the CRD's maxItems / maxProperties).
  auto j = EveryField();
  for (int i = 0; i < 33; ++i) {
    j["spec"]["nodeSelector"]["matchExpressions"].push_back(
        {{"key", "k" + std::to_string(i)}, {"operator", "Exists"}});
  }
  EXPECT_NE(JoinFieldErrors(ParseFencePolicy(j).errors).find("spec.nodeSelector.matchExpressions"),
            std::string::npos);
}

// ---- policy semantics (issue 13 item 4) ----

TEST(PolicySemanticsTest, TrainerSelectorNeedsAPositiveCondition) {
  for (const char* sel : {R"({"matchExpressions":[{"key":"x","operator":"NotIn","values":["y"]}]})",
                          R"({"matchExpressions":[{"key":"x","operator":"DoesNotExist"}]})"}) {
    auto j = EveryField();
    j["spec"]["trainers"]["podSelector"] = nlohmann::json::parse(sel);
    auto parsed = ParseFencePolicy(j);
    ASSERT_TRUE(parsed.errors.empty()) << JoinFieldErrors(parsed.errors);
    std::string all = JoinFieldErrors(ValidateFencePolicy(parsed.policy));
    EXPECT_NE(all.find("spec.trainers.podSelector: needs a positive condition"), std::string::npos)
        << sel << ": " << all;
  }
  for (
      const char* sel :
      {R"({"matchLabels":{"a":"b"}})",
       R"({"matchExpressions":[{"key":"x","operator":"In","values":["y"]}]})",
       R"({"matchExpressions":[{"key":"x","operator":"Exists"},{"key":"y","operator":"DoesNotExist"}]})"}) {
    auto j = EveryField();
    j["spec"]["trainers"]["podSelector"] = nlohmann::json::parse(sel);
    auto parsed = ParseFencePolicy(j);
    EXPECT_TRUE(ValidateFencePolicy(parsed.policy).empty())
        << sel << ": " << JoinFieldErrors(ValidateFencePolicy(parsed.policy));
  }
}

TEST(PolicySemanticsTest, IdenticalTrainerAndNeighbourSelectorsAreReported) {
  auto j = EveryField();
  j["spec"]["trainers"].erase("namespaceSelector");
  j["spec"]["trainers"].erase("requireGPU");
  j["spec"]["neighbours"]["podSelector"] = nlohmann::json::parse(
      R"({"matchExpressions":[{"key":"gpu","operator":"In","values":["a100","a100"]}],
          "matchLabels":{"feedguard.io/role":"trainer"}})");
  auto parsed = ParseFencePolicy(j);
  ASSERT_TRUE(parsed.errors.empty()) << JoinFieldErrors(parsed.errors);
  std::string all = JoinFieldErrors(ValidateFencePolicy(parsed.policy));
  EXPECT_NE(all.find("spec.neighbours.podSelector: selects the same pods as "
                     "spec.trainers.podSelector"),
            std::string::npos)
      << all;
  // A namespaceSelector on the trainers makes the sets differ (trainer-labelled pods elsewhere
  // are neighbours): allowed.
  j["spec"]["trainers"]["namespaceSelector"] = {{"matchLabels", {{"team", "ml"}}}};
  EXPECT_TRUE(ValidateFencePolicy(ParseFencePolicy(j).policy).empty());
}

LabelSelector Sel(const char* json) {
  auto s = LabelSelector::FromJson(nlohmann::json::parse(json), "sel");
  EXPECT_TRUE(s.ok()) << json;
  return s.ok() ? *s : LabelSelector();
}

TEST(LabelSelectorTest, UnsatisfiableSelectorsSayWhy) {
  for (
      const char* never : {
          R"({"matchExpressions":[{"key":"a","operator":"In","values":["x"]},
                                  {"key":"a","operator":"NotIn","values":["x"]}]})",
          R"({"matchExpressions":[{"key":"a","operator":"Exists"},
                                  {"key":"a","operator":"DoesNotExist"}]})",
          R"({"matchLabels":{"a":"x"},"matchExpressions":[{"key":"a","operator":"DoesNotExist"}]})",
          R"({"matchLabels":{"a":"x"},"matchExpressions":[{"key":"a","operator":"In","values":["y","z"]}]})",
          R"({"matchExpressions":[{"key":"a","operator":"In","values":["x","y"]},
                                  {"key":"a","operator":"NotIn","values":["y","x"]}]})"}) {
    EXPECT_NE(Sel(never).WhyUnsatisfiable(), "") << never;
  }
  for (const char* can : {R"({})", R"({"matchLabels":{"a":"x","b":"y"}})",
                          R"({"matchExpressions":[{"key":"a","operator":"In","values":["x","y"]},
                                  {"key":"a","operator":"NotIn","values":["x"]}]})",
                          R"({"matchExpressions":[{"key":"a","operator":"Exists"},
                                  {"key":"a","operator":"NotIn","values":["x"]}]})",
                          R"({"matchExpressions":[{"key":"a","operator":"NotIn","values":["x"]},
                                  {"key":"a","operator":"DoesNotExist"}]})"}) {
    EXPECT_EQ(Sel(can).WhyUnsatisfiable(), "") << can;
  }
  EXPECT_NE(Sel(R"({"matchExpressions":[{"key":"a","operator":"Exists"},
                                        {"key":"a","operator":"DoesNotExist"}]})")
                .WhyUnsatisfiable()
                .find("\"a\""),
            std::string::npos);
}

TEST(LabelSelectorTest, ImpliesIsSoundKeyByKey) {
  struct Case {
    const char* a;
    const char* b;
    bool a_implies_b;
  };
  const Case cases[] = {
      {R"({"matchLabels":{"role":"trainer","team":"x"}})", R"({"matchLabels":{"role":"trainer"}})",
       true},
      {R"({"matchLabels":{"role":"trainer"}})", R"({"matchLabels":{"role":"trainer","team":"x"}})",
       false},
      {R"({"matchLabels":{"role":"trainer"}})",
       R"({"matchExpressions":[{"key":"role","operator":"In","values":["trainer","t2"]}]})", true},
      {R"({"matchExpressions":[{"key":"role","operator":"In","values":["trainer","t2"]}]})",
       R"({"matchLabels":{"role":"trainer"}})", false},
      {R"({"matchLabels":{"role":"trainer"}})",
       R"({"matchExpressions":[{"key":"role","operator":"Exists"}]})", true},
      {R"({"matchLabels":{"role":"trainer"}})",
       R"({"matchExpressions":[{"key":"role","operator":"NotIn","values":["etl"]}]})", true},
      {R"({"matchExpressions":[{"key":"role","operator":"Exists"}]})",
       R"({"matchExpressions":[{"key":"role","operator":"NotIn","values":["etl"]}]})", false},
      {R"({"matchExpressions":[{"key":"role","operator":"NotIn","values":["etl","db"]}]})",
       R"({"matchExpressions":[{"key":"role","operator":"NotIn","values":["etl"]}]})", true},
      {R"({"matchExpressions":[{"key":"role","operator":"DoesNotExist"}]})",
       R"({"matchExpressions":[{"key":"role","operator":"NotIn","values":["etl"]}]})", true},
      {R"({"matchExpressions":[{"key":"role","operator":"DoesNotExist"}]})",
       R"({"matchExpressions":[{"key":"role","operator":"Exists"}]})", false},
      {R"({})", R"({"matchLabels":{"role":"trainer"}})", false},
      {R"({"matchLabels":{"role":"trainer"}})", R"({})", true},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(Sel(c.a).Implies(Sel(c.b)), c.a_implies_b) << c.a << " => " << c.b;
  }
}

TEST(PolicySemanticsTest, SelectorsThatCanNeverMatchAreReported) {
  struct Case {
    const char* where;
    const char* selector;
    const char* field;
  };
  const Case cases[] = {
      {"trainers",
       R"({"matchLabels":{"feedguard.io/role":"trainer"},"matchExpressions":[
           {"key":"feedguard.io/role","operator":"NotIn","values":["trainer"]}]})",
       "spec.trainers.podSelector: can never match a pod"},
      {"trainers",
       R"({"matchExpressions":[{"key":"gpu","operator":"Exists"},
                               {"key":"gpu","operator":"DoesNotExist"}]})",
       "spec.trainers.podSelector: can never match a pod"},
      {"neighbours",
       R"({"matchExpressions":[{"key":"tier","operator":"In","values":["batch"]},
                               {"key":"tier","operator":"NotIn","values":["batch"]}]})",
       "spec.neighbours.podSelector: can never match a pod"},
      {"nodes", R"({"matchExpressions":[{"key":"gpu","operator":"Exists"},
                                         {"key":"gpu","operator":"DoesNotExist"}]})",
       "spec.nodeSelector: can never match a node"},
  };
  for (const auto& c : cases) {
    auto j = EveryField();
    const auto sel = nlohmann::json::parse(c.selector);
    if (std::string(c.where) == "trainers") j["spec"]["trainers"]["podSelector"] = sel;
    if (std::string(c.where) == "neighbours") j["spec"]["neighbours"]["podSelector"] = sel;
    if (std::string(c.where) == "nodes") j["spec"]["nodeSelector"] = sel;
    auto parsed = ParseFencePolicy(j);
    ASSERT_TRUE(parsed.errors.empty()) << JoinFieldErrors(parsed.errors);
    std::string all = JoinFieldErrors(ValidateFencePolicy(parsed.policy));
    EXPECT_NE(all.find(c.field), std::string::npos) << c.selector << ": " << all;
  }
}

TEST(PolicySemanticsTest, NeighbourSelectorInsideTheTrainerSelectorIsReported) {
  auto j = EveryField();
  j["spec"]["trainers"].erase("namespaceSelector");
  j["spec"]["trainers"]["requireGPU"] = false;
  j["spec"]["trainers"]["podSelector"] = {{"matchLabels", {{"feedguard.io/role", "trainer"}}}};
  // Narrower than the trainers: every pod it selects is a trainer first.
  j["spec"]["neighbours"]["podSelector"] = {
      {"matchLabels", {{"feedguard.io/role", "trainer"}, {"team", "vision"}}}};
  std::string all = JoinFieldErrors(ValidateFencePolicy(ParseFencePolicy(j).policy));
  EXPECT_NE(all.find("spec.neighbours.podSelector: selects only pods that "
                     "spec.trainers.podSelector selects too"),
            std::string::npos)
      << all;
  // The same set written differently (matchLabels vs In): "the same pods".
  j["spec"]["neighbours"]["podSelector"] = {
      {"matchExpressions",
       {{{"key", "feedguard.io/role"}, {"operator", "In"}, {"values", {"trainer"}}}}}};
  all = JoinFieldErrors(ValidateFencePolicy(ParseFencePolicy(j).policy));
  EXPECT_NE(all.find("spec.neighbours.podSelector: selects the same pods as "
                     "spec.trainers.podSelector"),
            std::string::npos)
      << all;
  // Wider than the trainers (the usual case): fine.
  j["spec"]["neighbours"]["podSelector"] = {
      {"matchExpressions", {{{"key", "feedguard.io/role"}, {"operator", "Exists"}}}}};
  EXPECT_TRUE(ValidateFencePolicy(ParseFencePolicy(j).policy).empty());
  // With requireGPU, trainer-labelled pods without a GPU stay neighbours: the sets differ.
  j["spec"]["neighbours"]["podSelector"] = {
      {"matchLabels", {{"feedguard.io/role", "trainer"}, {"team", "vision"}}}};
  j["spec"]["trainers"]["requireGPU"] = true;
  EXPECT_TRUE(ValidateFencePolicy(ParseFencePolicy(j).policy).empty());
}

TEST(PolicySemanticsTest, RequireGpuIsABooleanDefaultingToTheConstant) {
  auto j = EveryField();
  j["spec"]["trainers"].erase("requireGPU");
  EXPECT_EQ(ParseFencePolicy(j).policy.trainers.require_gpu, kDefaultTrainersRequireGpu);
  j["spec"]["trainers"]["requireGPU"] = true;
  EXPECT_TRUE(ParseFencePolicy(j).policy.trainers.require_gpu);
  j["spec"]["trainers"]["requireGPU"] = "true";
  EXPECT_EQ(JoinFieldErrors(ParseFencePolicy(j).errors),
            "spec.trainers.requireGPU: expected boolean");
}

TEST(PolicySemanticsTest, MaxCpuOnlyWithQuotaAndQuotaDefaultIsExplicit) {
  for (const char* fence : {"Idle", "Weight", "Cpuset"}) {
    auto j = EveryField();
    j["spec"]["neighbours"]["fence"] = fence;
    std::string all = JoinFieldErrors(ValidateFencePolicy(ParseFencePolicy(j).policy));
    EXPECT_NE(all.find("spec.neighbours.maxCPU: only fence Quota"), std::string::npos)
        << fence << ": " << all;
  }
  auto j = EveryField();
  j["spec"]["neighbours"].erase("maxCPU");
  auto parsed = ParseFencePolicy(j);
  EXPECT_TRUE(parsed.errors.empty());
  EXPECT_TRUE(ValidateFencePolicy(parsed.policy).empty());
  EXPECT_EQ(parsed.policy.neighbours.max_cpu_percent, kDefaultQuotaMaxCpuPercent);
  j["spec"]["neighbours"]["fence"] = "Idle";
  EXPECT_EQ(ParseFencePolicy(j).policy.neighbours.max_cpu_percent, 0);
}

TEST(PolicySemanticsTest, RequireGpuLocalNeedsReservedCores) {
  auto j = EveryField();
  j["spec"]["trainers"]["cpu"] = {{"numa", "RequireGPULocal"}};
  j["spec"]["neighbours"]["fence"] = "Idle";
  j["spec"]["neighbours"].erase("maxCPU");
  std::string all = JoinFieldErrors(ValidateFencePolicy(ParseFencePolicy(j).policy));
  EXPECT_NE(all.find("spec.trainers.cpu.numa: numa RequireGPULocal"), std::string::npos) << all;
}

// ---- the CRD's samples: the schema and the controller agree ----

// YAML → JSON as the API server would store it: plain scalars typed (int, bool, null), quoted
// scalars strings.
nlohmann::json FromYaml(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map: {
      nlohmann::json o = nlohmann::json::object();
      for (const auto& kv : n) o[kv.first.as<std::string>()] = FromYaml(kv.second);
      return o;
    }
    case YAML::NodeType::Sequence: {
      nlohmann::json a = nlohmann::json::array();
      for (const auto& x : n) a.push_back(FromYaml(x));
      return a;
    }
    case YAML::NodeType::Scalar: {
      const std::string v = n.Scalar();
      if (n.Tag() == "!") return v;  // quoted
      if (v == "true" || v == "false") return v == "true";
      if (v == "null" || v == "~") return nullptr;
      int64_t i = 0;
      auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), i);
      if (ec == std::errc() && end == v.data() + v.size()) return i;
      return v;
    }
    default:
      return nullptr;
  }
}

std::vector<FieldError> AllErrors(const nlohmann::json& j) {
  auto parsed = ParseFencePolicy(j);
  auto errors = parsed.errors;
  for (auto& e : ValidateFencePolicy(parsed.policy)) errors.push_back(e);
  return errors;
}

TEST(CrdSamplesTest, ValidSamplesAreValidForTheController) {
  int n = 0;
  for (const auto& f :
       std::filesystem::directory_iterator(std::string(FG_CRD_SAMPLES_DIR) + "/valid")) {
    auto errors = AllErrors(FromYaml(YAML::LoadFile(f.path().string())));
    EXPECT_TRUE(errors.empty()) << f.path() << ": " << JoinFieldErrors(errors);
    ++n;
  }
  EXPECT_GE(n, 5);
}

TEST(CrdSamplesTest, ExamplesAreValidAndRestrictWhoCanBeATrainer) {
  // examples/ are what users copy: valid for the controller too, and safe by default (trainers
  // restricted by namespace and to pods with a GPU).
  int n = 0;
  for (const auto& f : std::filesystem::directory_iterator(FG_EXAMPLES_DIR)) {
    if (f.path().extension() != ".yaml") continue;
    for (const auto& doc : YAML::LoadAllFromFile(f.path().string())) {
      if (!doc.IsMap() || !doc["kind"] || doc["kind"].as<std::string>() != "FencePolicy") continue;
      const auto j = FromYaml(doc);
      auto errors = AllErrors(j);
      EXPECT_TRUE(errors.empty()) << f.path() << ": " << JoinFieldErrors(errors);
      const FencePolicy p = ParseFencePolicy(j).policy;
      const std::string name = f.path().filename().string();
      if (name.rfind("01-", 0) == 0 || name.rfind("02-", 0) == 0 || name.rfind("03-", 0) == 0 ||
          name.rfind("05-", 0) == 0) {
        EXPECT_TRUE(p.trainers.require_gpu) << name;
        EXPECT_FALSE(p.trainers.namespace_selector.empty()) << name;
      }
      ++n;
    }
  }
  EXPECT_GE(n, 5);
}

TEST(CrdSamplesTest, InvalidSamplesAreInvalidForTheControllerNamingTheField) {
  // What only the API server enforces: unknown fields are pruned by a structural schema and
  // ignored by the controller (they cannot change what it does).
  const std::set<std::string> schema_only = {"16-cpu-unknown-field.yaml"};
  int n = 0;
  for (const auto& f :
       std::filesystem::directory_iterator(std::string(FG_CRD_SAMPLES_DIR) + "/invalid")) {
    const std::string name = f.path().filename().string();
    if (schema_only.count(name)) continue;
    std::ifstream in(f.path());
    std::string line, expect;
    while (std::getline(in, line)) {
      if (line.rfind("# expect: ", 0) == 0) expect = line.substr(10);
    }
    ASSERT_FALSE(expect.empty()) << name;
    auto errors = AllErrors(FromYaml(YAML::LoadFile(f.path().string())));
    bool named = false;
    for (const auto& e : errors) named = named || e.field.rfind(expect, 0) == 0;
    EXPECT_TRUE(named) << name << ": want an error on " << expect
                       << ", got: " << JoinFieldErrors(errors);
    ++n;
  }
  EXPECT_GE(n, 30);
}

}  // namespace
}  // namespace feedguard::controller
