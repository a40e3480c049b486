#include "plugin/suggest_policy.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <regex>

#include "common/json_member.h"
#include "plugin/testdata/fixtures.h"

namespace feedguard::plugin {
namespace {

using Json = nlohmann::json;
using testing::PodFixture;

// ---- crds/fencepolicy.yaml's structural schema, checked on a value ---------------------------
// The subset the suggested policies touch: type, required, properties (an unknown field is an
// error: the API server prunes or, under kubectl's strict decoding, refuses it),
// additionalProperties, enum, pattern, min/maxLength, maxProperties, maxItems, items.
void Validate(const YAML::Node& schema, const Json& v, const std::string& path,
              std::vector<std::string>* errors) {
  auto fail = [&](const std::string& what) { errors->push_back(path + ": " + what); };
  if (schema["x-kubernetes-int-or-string"]) return;
  const std::string type = schema["type"] ? schema["type"].as<std::string>() : "";
  if (type == "object") {
    if (!v.is_object()) return fail("not an object");
    if (schema["required"]) {
      for (const auto& r : schema["required"]) {
        if (!v.contains(r.as<std::string>())) fail("required field " + r.as<std::string>());
      }
    }
    if (schema["maxProperties"] && v.size() > schema["maxProperties"].as<size_t>()) {
      fail("too many properties");
    }
    for (auto it = v.begin(); it != v.end(); ++it) {
      const std::string child = path + "." + it.key();
      if (schema["properties"] && schema["properties"][it.key()]) {
        Validate(schema["properties"][it.key()], it.value(), child, errors);
      } else if (schema["additionalProperties"]) {
        Validate(schema["additionalProperties"], it.value(), child, errors);
      } else if (schema["properties"]) {
        fail("unknown field " + it.key());
      }
    }
  } else if (type == "string") {
    if (!v.is_string()) return fail("not a string");
    const std::string s = v.get<std::string>();
    if (schema["enum"]) {
      bool found = false;
      for (const auto& e : schema["enum"]) found |= e.as<std::string>() == s;
      if (!found) fail("\"" + s + "\" not in the enum");
    }
    if (schema["pattern"] &&
        !std::regex_search(s, std::regex(schema["pattern"].as<std::string>()))) {
      fail("\"" + s + "\" does not match " + schema["pattern"].as<std::string>());
    }
    if (schema["maxLength"] && s.size() > schema["maxLength"].as<size_t>()) fail("too long");
    if (schema["minLength"] && s.size() < schema["minLength"].as<size_t>()) fail("too short");
  } else if (type == "boolean") {
    if (!v.is_boolean()) fail("not a boolean");
  } else if (type == "integer") {
    if (!v.is_number_integer()) fail("not an integer");
  } else if (type == "array") {
    if (!v.is_array()) return fail("not an array");
    if (schema["maxItems"] && v.size() > schema["maxItems"].as<size_t>()) fail("too many items");
    for (size_t i = 0; i < v.size(); ++i) {
      Validate(schema["items"], v[i], path + "[" + std::to_string(i) + "]", errors);
    }
  }
}

const YAML::Node& FencePolicySchema() {
  static const YAML::Node kSchema =
      YAML::LoadFile(std::string(FG_SOURCE_DIR) +
                     "/crds/fencepolicy.yaml")["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
  return kSchema;
}

// The matchLabels key rule (a CEL rule in the CRD): its regular expression, read from the rule.
std::regex LabelKeyRule() {
  const std::string rule = FencePolicySchema()["properties"]["spec"]["properties"]["trainers"]
                                              ["properties"]["podSelector"]["properties"]
                                              ["matchLabels"]["x-kubernetes-validations"][0]["rule"]
                                                  .as<std::string>();
  const std::string open = "k.matches(\"";
  const size_t b = rule.find(open) + open.size();
  return std::regex(rule.substr(b, rule.find("\")", b) - b));
}

void CheckLabelKeys(const Json& selector, const std::string& path,
                    std::vector<std::string>* errors) {
  static const std::regex kKey = LabelKeyRule();
  const Json& labels = JsonMember(selector, "matchLabels");
  if (!labels.is_object()) return;
  for (auto it = labels.begin(); it != labels.end(); ++it) {
    if (!std::regex_search(it.key(), kKey)) errors->push_back(path + ": label key " + it.key());
  }
}

// Everything the API server would check that a test can: the structural schema, the name, and
// the CEL rules the suggested policies could trip.
std::vector<std::string> SchemaErrors(const Json& policy) {
  std::vector<std::string> errors;
  Validate(FencePolicySchema(), policy, "", &errors);
  const std::string name = JsonStringOr(JsonMember(policy, "metadata"), "name", "");
  static const std::regex kDnsSubdomain(
      "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$");
  if (name.empty() || name.size() > 253 || !std::regex_search(name, kDnsSubdomain)) {
    errors.push_back("metadata.name \"" + name + "\" is not a DNS-1123 subdomain");
  }
  if (JsonStringOr(policy, "apiVersion", "") != "feedguard.io/v1alpha1") {
    errors.push_back("apiVersion");
  }
  if (JsonStringOr(policy, "kind", "") != "FencePolicy") errors.push_back("kind");
  const Json& spec = JsonMember(policy, "spec");
  const Json& trainers = JsonMember(spec, "trainers");
  const Json& ps = JsonMember(trainers, "podSelector");
  const Json& labels = JsonMember(ps, "matchLabels");
  const Json& exprs = JsonMember(ps, "matchExpressions");
  if ((!labels.is_object() || labels.empty()) && (!exprs.is_array() || exprs.empty())) {
    errors.push_back("trainers.podSelector must not be empty");
  }
  CheckLabelKeys(ps, "trainers.podSelector", &errors);
  CheckLabelKeys(JsonMember(trainers, "namespaceSelector"), "trainers.namespaceSelector", &errors);
  const Json& n = JsonMember(spec, "neighbours");
  CheckLabelKeys(JsonMember(n, "podSelector"), "neighbours.podSelector", &errors);
  if (JsonStringOr(n, "fence", "") == "Cpuset") errors.push_back("Cpuset needs trainers.cpu");
  if (!JsonMember(n, "maxCPU").is_null()) errors.push_back("maxCPU without Quota");
  return errors;
}

SuggestInput TrainerA() {
  SuggestInput in;
  in.trainer = PodFixture("ml", "trainer-a");
  in.contenders = {PodFixture("batch", "spin-a"), PodFixture("batch", "spin-c"),
                   PodFixture("etl", "loader-0")};
  in.contenders_gone = {"batch/spin-gone"};
  return in;
}

TEST(SuggestPolicyTest, PerInstanceLabels) {
  for (const char* k :
       {"pod-template-hash", "controller-revision-hash", "statefulset.kubernetes.io/pod-name",
        "apps.kubernetes.io/pod-index", "batch.kubernetes.io/controller-uid", "controller-uid",
        "batch.kubernetes.io/job-completion-index"}) {
    EXPECT_TRUE(IsPerInstanceLabel(k)) << k;
  }
  for (const char* k : {"app", "job-name", "batch.kubernetes.io/job-name", "pod-template",
                        "app.kubernetes.io/instance", ""}) {
    EXPECT_FALSE(IsPerInstanceLabel(k)) << k;
  }
  EXPECT_EQ(StableLabels(PodFixture("ml", "trainer-a")),
            (Labels{{"app", "trainer"}, {"job-name", "resnet"}, {"team", "vision"}}));
  EXPECT_EQ(StableLabels(PodFixture("etl", "loader-0")),
            (Labels{{"app", "loader"}, {"tier", "batch"}}));
  EXPECT_TRUE(StableLabels(PodFixture("vision", "trainer-c")).empty());
  EXPECT_TRUE(StableLabels(Json::parse(R"({"metadata": {"labels": {"a": 1}}})")).empty());
  EXPECT_TRUE(StableLabels(Json::array()).empty());
}

TEST(SuggestPolicyTest, CommonLabels) {
  EXPECT_TRUE(CommonLabels({}).empty());
  EXPECT_EQ(CommonLabels({{{"a", "1"}, {"b", "2"}}}), (Labels{{"a", "1"}, {"b", "2"}}));
  EXPECT_EQ(CommonLabels({{{"a", "1"}, {"b", "2"}}, {{"a", "1"}, {"b", "3"}}, {{"a", "1"}}}),
            (Labels{{"a", "1"}}));
  EXPECT_TRUE(CommonLabels({{{"a", "1"}}, {{"a", "2"}}}).empty());
  EXPECT_TRUE(CommonLabels({{{"a", "1"}}, {}}).empty());
}

TEST(SuggestPolicyTest, NamesAreValidAndDistinct) {
  static const std::regex kDnsLabel("^[a-z0-9]([-a-z0-9]*[a-z0-9])?$");
  EXPECT_EQ(FencePolicyName("trainer-a"), "fence-trainer-a");
  EXPECT_EQ(FencePolicyName("Resnet.Worker_0"), "fence-resnet-worker-0");
  EXPECT_EQ(FencePolicyName("x-"), "fence-x");
  const std::string long_a = std::string(120, 'a') + "-0";
  const std::string long_b = std::string(120, 'a') + "-1";
  const std::string a = FencePolicyName(long_a);
  const std::string b = FencePolicyName(long_b);
  EXPECT_EQ(a.size(), 63u);
  EXPECT_NE(a, b);
  EXPECT_EQ(a.substr(0, 54), "fence-" + std::string(48, 'a'));
  EXPECT_EQ(a, FencePolicyName(long_a));  // stable
  // Cut at a '-' or '.': no "--" before the hash, still valid.
  const std::string dashy =
      FencePolicyName(std::string(47, 'b') + "-.-.-.-" + std::string(50, 'c'));
  EXPECT_LE(dashy.size(), 63u);
  for (const auto& n :
       {a, b, dashy, FencePolicyName("trainer-a"), FencePolicyName(std::string(253, 'z')),
        FencePolicyName("a.b.c"), FencePolicyName("")}) {
    EXPECT_TRUE(std::regex_search(n, kDnsLabel)) << n;
    EXPECT_LE(n.size(), 63u) << n;
  }
}

// trainer-a: its labels minus the Job's per-instance ones; neighbours: the one label its three
// contender pods (two ReplicaSet pods, one StatefulSet pod) share.
TEST(SuggestPolicyTest, PolicyFromRealLabels) {
  const PolicySuggestion s = SuggestPolicy(TrainerA());
  const Json want = Json::parse(R"({
    "apiVersion": "feedguard.io/v1alpha1", "kind": "FencePolicy",
    "metadata": {"name": "fence-trainer-a"},
    "spec": {
      "mode": "DryRun",
      "trainers": {
        "podSelector": {"matchLabels": {"app": "trainer", "job-name": "resnet", "team": "vision"}},
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ml"}},
        "requireGPU": true},
      "neighbours": {"fence": "Idle", "podSelector": {"matchLabels": {"tier": "batch"}}}}})");
  EXPECT_EQ(s.policy, want) << s.policy.dump(2);
  EXPECT_TRUE(s.trainer_labelled);
  EXPECT_TRUE(s.neighbours_by_label);
  EXPECT_TRUE(s.neighbours_comment.empty());
  ASSERT_EQ(s.notes.size(), 2u);
  EXPECT_EQ(s.notes[0], "neighbours: the 3 contender pods found all carry tier=batch.");
  EXPECT_EQ(s.notes[1], "Contender pods that no longer exist (not considered): batch/spin-gone.");
  EXPECT_EQ(SchemaErrors(s.policy), std::vector<std::string>{});

  // Two ReplicaSet pods of one Deployment share app and tier (their hashes differ, and are
  // per-instance anyway).
  SuggestInput b;
  b.trainer = PodFixture("ml", "trainer-b");
  b.contenders = {PodFixture("batch", "spin-a"), PodFixture("batch", "spin-b")};
  const PolicySuggestion sb = SuggestPolicy(b);
  EXPECT_EQ(sb.policy["spec"]["neighbours"]["podSelector"]["matchLabels"],
            Json({{"app", "spin"}, {"tier", "batch"}}));
  EXPECT_EQ(sb.policy["spec"]["trainers"]["podSelector"]["matchLabels"],
            Json({{"app", "trainer"}, {"team", "nlp"}}));
}

TEST(SuggestPolicyTest, NoSharedLabelSelectsEveryOtherPod) {
  SuggestInput in = TrainerA();
  in.contenders.push_back(PodFixture("ml", "notebook"));  // app=notebook, no tier
  in.contenders_gone.clear();
  in.contenders_unreadable = {"secret/x"};
  const PolicySuggestion s = SuggestPolicy(in);
  EXPECT_FALSE(s.neighbours_by_label);
  EXPECT_EQ(s.policy["spec"]["neighbours"], Json({{"fence", "Idle"}}));
  EXPECT_NE(s.neighbours_comment.find("every other pod on the trainer's nodes"), std::string::npos);
  EXPECT_EQ(s.notes[0], "neighbours: the contender pods share no label.");
  EXPECT_EQ(s.notes[1], "Contender pods you may not read (get pods) (not considered): secret/x.");
  EXPECT_EQ(SchemaErrors(s.policy), std::vector<std::string>{});
  // The comment stands right above `neighbours:` in the YAML.
  const std::string yaml = RenderPolicyYaml(s);
  const size_t at = yaml.find("\n  neighbours:\n");
  ASSERT_NE(at, std::string::npos) << yaml;
  const size_t line = yaml.rfind('\n', at - 1);
  EXPECT_EQ(yaml.substr(line + 1, 4), "  # ") << yaml;
  EXPECT_NE(yaml.find("  # No podSelector: every other pod on the trainer's nodes"),
            std::string::npos)
      << yaml;

  SuggestInput none;
  none.trainer = PodFixture("ml", "trainer-b");
  const PolicySuggestion n = SuggestPolicy(none);
  EXPECT_FALSE(n.neighbours_by_label);
  EXPECT_EQ(n.notes[0], "neighbours: no contender pod left to select by label.");
}

// trainer-c has no labels at all: a label is suggested (the CRD refuses an empty podSelector).
TEST(SuggestPolicyTest, UnlabelledTrainerGetsARoleLabel) {
  SuggestInput in;
  in.trainer = PodFixture("vision", "trainer-c");
  in.contenders = {PodFixture("batch", "spin-c")};
  const PolicySuggestion s = SuggestPolicy(in);
  EXPECT_FALSE(s.trainer_labelled);
  EXPECT_EQ(s.policy["spec"]["trainers"]["podSelector"]["matchLabels"],
            Json({{"feedguard.io/role", "trainer"}}));
  EXPECT_EQ(s.notes[1], "kubectl label pod -n vision trainer-c feedguard.io/role=trainer");
  EXPECT_EQ(SchemaErrors(s.policy), std::vector<std::string>{});
}

// Label values YAML would read as booleans, numbers or null stay strings; keys with '/' and
// '.' stay plain; the YAML reads back as the same object.
TEST(SuggestPolicyTest, YamlReadsBackAsThePolicy) {
  SuggestInput in;
  in.trainer = Json::parse(R"({"metadata": {"namespace": "ml", "name": "Weird.Name",
      "labels": {"enabled": "true", "version": "1.10", "n": "no", "empty": "", "octal": "0755",
                 "example.com/role": "trainer", "x": "null"}}})");
  const PolicySuggestion s = SuggestPolicy(in);
  EXPECT_EQ(SchemaErrors(s.policy), std::vector<std::string>{});
  const std::string yaml = RenderPolicyYaml(s);
  const YAML::Node doc = YAML::Load(yaml);
  const YAML::Node labels = doc["spec"]["trainers"]["podSelector"]["matchLabels"];
  for (auto it = s.policy["spec"]["trainers"]["podSelector"]["matchLabels"].begin();
       it != s.policy["spec"]["trainers"]["podSelector"]["matchLabels"].end(); ++it) {
    ASSERT_TRUE(labels[it.key()]) << it.key() << "\n" << yaml;
    EXPECT_EQ(labels[it.key()].as<std::string>(), it.value().get<std::string>()) << yaml;
    // Quoted ("!") or a plain scalar ("?") only where it is a plain word.
    const bool plain = labels[it.key()].Tag() == "?";
    EXPECT_EQ(plain, it.value() == "trainer") << it.key() << " in\n" << yaml;
  }
  EXPECT_EQ(doc["spec"]["trainers"]["requireGPU"].Tag(), "?");
  EXPECT_EQ(doc["spec"]["trainers"]["requireGPU"].as<std::string>(), "true");
  EXPECT_EQ(doc["metadata"]["name"].as<std::string>(), "fence-weird-name");
  EXPECT_EQ(doc["spec"]["mode"].as<std::string>(), "DryRun");
  EXPECT_EQ(doc["spec"]["neighbours"]["fence"].as<std::string>(), "Idle");
  EXPECT_EQ(JsonToYaml(Json::parse(R"({"a": {}, "b": [], "c": [1, "x", {"d": "e", "f": 2}]})")),
            "a: {}\nb: []\nc:\n  - 1\n  - x\n  - d: e\n    f: 2\n");
}

// The checker itself: a policy the CRD refuses is refused here too.
TEST(SuggestPolicyTest, SchemaCheckCatchesWhatTheCrdRefuses) {
  Json p = SuggestPolicy(TrainerA()).policy;
  ASSERT_TRUE(SchemaErrors(p).empty());
  auto errors_with = [&](auto edit) {
    Json q = p;
    edit(q);
    return SchemaErrors(q).size();
  };
  EXPECT_GT(errors_with([](Json& q) { q["spec"]["mode"] = "Dryrun"; }), 0u);
  EXPECT_GT(errors_with([](Json& q) { q["spec"]["neighbours"]["fence"] = "Sleep"; }), 0u);
  EXPECT_GT(errors_with([](Json& q) { q["spec"]["trainers"].erase("podSelector"); }), 0u);
  EXPECT_GT(errors_with([](Json& q) { q["spec"].erase("trainers"); }), 0u);
  EXPECT_GT(errors_with([](Json& q) {
              q["spec"]["trainers"]["podSelector"]["matchLabels"] = Json::object();
            }),
            0u);
  EXPECT_GT(errors_with([](Json& q) { q["spec"]["trainers"]["requireGpu"] = true; }), 0u);
  EXPECT_GT(errors_with([](Json& q) { q["spec"]["trainers"]["requireGPU"] = "true"; }), 0u);
  EXPECT_GT(errors_with([](Json& q) {
              q["spec"]["neighbours"]["podSelector"]["matchLabels"]["x"] = std::string(64, 'v');
            }),
            0u);
  EXPECT_GT(errors_with([](Json& q) {
              q["spec"]["neighbours"]["podSelector"]["matchLabels"]["Bad_Prefix/x"] = "v";
            }),
            0u);
  EXPECT_GT(errors_with([](Json& q) { q["metadata"]["name"] = "Fence_A"; }), 0u);
}

}  // namespace
}  // namespace feedguard::plugin
