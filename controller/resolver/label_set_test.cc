#include "controller/resolver/label_set.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace feedguard::controller {
namespace {

const Labels kJobPod = {
    {"batch.kubernetes.io/controller-uid", "6f1c2d3e-aaaa-bbbb-cccc-0123456789ab"},
    {"batch.kubernetes.io/job-name", "train-resnet"},
    {"controller-uid", "6f1c2d3e-aaaa-bbbb-cccc-0123456789ab"},
    {"job-name", "train-resnet"},
    {"role", ""}};

TEST(LabelSetTest, FindsEveryLabelAndNothingElse) {
  const LabelSet set(kJobPod);
  EXPECT_EQ(set.size(), kJobPod.size());
  for (const auto& [k, v] : kJobPod) {
    ASSERT_NE(set.Find(k), nullptr) << k;
    EXPECT_EQ(*set.Find(k), v);
  }
  EXPECT_EQ(set.Find("job"), nullptr);
  EXPECT_EQ(set.Find("job-names"), nullptr);
  EXPECT_EQ(set.Find(""), nullptr);
  EXPECT_EQ(set.Find("zzz"), nullptr);
  EXPECT_EQ(set.ToMap(), kJobPod);
  EXPECT_TRUE(LabelSet().empty());
  EXPECT_EQ(LabelSet().Find("role"), nullptr);
}

TEST(LabelSetTest, InterningSharesEveryKeyAndValueAndKeepsTheSet) {
  InternPool<std::string> strings;
  const LabelSet a = LabelSet(kJobPod).Interned(strings);
  Labels other = kJobPod;
  other["job-name"] = "train-vit";
  const LabelSet b = LabelSet(other).Interned(strings);
  EXPECT_EQ(a, LabelSet(kJobPod)) << "interning changes no label";
  EXPECT_FALSE(a == b);
  // One copy of each string among both sets: the keys, and the values they have in common.
  EXPECT_EQ(a.Find("controller-uid"), b.Find("controller-uid"));
  EXPECT_EQ(a.Find("controller-uid"), a.Find("batch.kubernetes.io/controller-uid"));
  EXPECT_NE(a.Find("job-name"), b.Find("job-name"));
  EXPECT_EQ(*b.Find("job-name"), "train-vit");
  // 5 keys, the uid, 2 job names ("" is no string at all).
  EXPECT_EQ(strings.size(), 8u);
}

TEST(LabelSetTest, SelectorsMatchItAsTheyMatchTheMap) {
  const LabelSet set(kJobPod);
  const std::vector<nlohmann::json> selectors = {
      nlohmann::json::object(),
      {{"matchLabels", {{"job-name", "train-resnet"}}}},
      {{"matchLabels", {{"job-name", "train-vit"}}}},
      {{"matchLabels", {{"role", ""}}}},
      {{"matchExpressions",
        {{{"key", "job-name"}, {"operator", "In"}, {"values", {"a", "train-resnet"}}}}}},
      {{"matchExpressions",
        {{{"key", "job-name"}, {"operator", "NotIn"}, {"values", {"train-resnet"}}}}}},
      {{"matchExpressions", {{{"key", "app"}, {"operator", "NotIn"}, {"values", {"web"}}}}}},
      {{"matchExpressions", {{{"key", "app"}, {"operator", "Exists"}}}}},
      {{"matchExpressions", {{{"key", "controller-uid"}, {"operator", "Exists"}}}}},
      {{"matchExpressions", {{{"key", "controller-uid"}, {"operator", "DoesNotExist"}}}}},
  };
  int matched = 0;
  for (const auto& j : selectors) {
    auto sel = LabelSelector::FromJson(j, "sel");
    ASSERT_TRUE(sel.ok()) << j.dump();
    EXPECT_EQ(sel->Matches(set), sel->Matches(kJobPod)) << j.dump();
    matched += sel->Matches(set) ? 1 : 0;
  }
  EXPECT_EQ(matched, 6);
}

}  // namespace
}  // namespace feedguard::controller
