#include "controller/kube/store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

namespace feedguard::kube {
namespace {

ObjectPtr Pod(const std::string& ns, const std::string& name, const std::string& node) {
  Json p = {{"metadata", {{"namespace", ns}, {"name", name}}}};
  if (!node.empty()) p["spec"]["nodeName"] = node;
  return std::make_shared<const Json>(std::move(p));
}

TEST(StoreTest, GetListAndNodeIndexFollowUpdates) {
  Store s({{"node", PodNodeNameIndex()}});
  EXPECT_EQ(s.Upsert(Pod("a", "p1", "n1")), nullptr);
  s.Upsert(Pod("a", "p2", "n1"));
  s.Upsert(Pod("b", "p1", ""));
  EXPECT_EQ(s.size(), 3u);
  ASSERT_NE(s.Get("a/p1"), nullptr);
  EXPECT_EQ(s.Get("zz"), nullptr);
  EXPECT_EQ(s.ByIndex("node", "n1").size(), 2u);
  // p2 moves to n2: the index follows.
  EXPECT_NE(s.Upsert(Pod("a", "p2", "n2")), nullptr);
  EXPECT_EQ(s.ByIndex("node", "n1").size(), 1u);
  ASSERT_EQ(s.ByIndex("node", "n2").size(), 1u);
  EXPECT_EQ(NameOf(*s.ByIndex("node", "n2")[0]), "p2");
  EXPECT_NE(s.Remove("a/p1"), nullptr);
  EXPECT_EQ(s.Remove("a/p1"), nullptr);
  EXPECT_TRUE(s.ByIndex("node", "n1").empty());
  EXPECT_TRUE(s.ByIndex("nosuchindex", "n1").empty());
  s.Replace({Pod("c", "x", "n9")});
  EXPECT_EQ(s.Keys(), std::vector<std::string>{"c/x"});
  EXPECT_TRUE(s.ByIndex("node", "n2").empty());
  EXPECT_EQ(s.ByIndex("node", "n9").size(), 1u);
}

TEST(StoreTest, ConcurrentWritersAndReaders) {
  Store s({{"node", PodNodeNameIndex()}});
  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&s, w] {
      for (int i = 0; i < 500; ++i) {
        s.Upsert(Pod("ns", "p" + std::to_string(w * 1000 + i), "n" + std::to_string(i % 7)));
        s.ByIndex("node", "n3");
        s.List();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(s.size(), 2000u);
  size_t total = 0;
  for (int n = 0; n < 7; ++n) total += s.ByIndex("node", "n" + std::to_string(n)).size();
  EXPECT_EQ(total, 2000u);
}

TEST(StoreTest, VersionsOnlyStoreTracksVersionsAndSweepsUnseen) {
  Store s(StoreOptions{false, {}});
  auto cm = [](const std::string& name, const std::string& rv) {
    return std::make_shared<const Json>(
        Json{{"metadata", {{"namespace", "ns"}, {"name", name}, {"resourceVersion", rv}}}});
  };
  EXPECT_FALSE(s.Put(cm("a", "5"), 1).existed);
  EXPECT_FALSE(s.Put(cm("b", "6"), 1).existed);
  Store::Previous p = s.Put(cm("a", "7"), 1);
  EXPECT_TRUE(p.existed);
  EXPECT_EQ(p.object, nullptr);
  EXPECT_EQ(s.Get("ns/a"), nullptr);
  EXPECT_TRUE(s.Contains("ns/a"));
  // Pass 2 sees a unchanged and nothing of b.
  EXPECT_TRUE(s.MarkIfSame("ns/a", "7", 2));
  EXPECT_FALSE(s.MarkIfSame("ns/a", "8", 2));
  EXPECT_FALSE(s.MarkIfSame("ns/zz", "7", 2));
  auto gone = s.SweepOlderThan(2);
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0].first, "ns/b");
  EXPECT_EQ(gone[0].second, nullptr);
  EXPECT_EQ(s.Keys(), std::vector<std::string>{"ns/a"});
  EXPECT_TRUE(s.Erase("ns/a").existed);
  EXPECT_FALSE(s.Erase("ns/a").existed);
}

TEST(StoreTest, VersionFingerprintIsExactForDecimalsAndNeverConfusesThemWithStrings) {
  EXPECT_EQ(VersionFingerprint("12345"), 12345u);
  EXPECT_NE(VersionFingerprint("12345"), VersionFingerprint("12346"));
  EXPECT_NE(VersionFingerprint("abc"), VersionFingerprint("abd"));
  EXPECT_EQ(VersionFingerprint("abc"), VersionFingerprint("abc"));
  // 19 digits and more may not fit below 2^63: hashed, and hashed values have the top bit set.
  EXPECT_NE(VersionFingerprint("9999999999999999999") >> 63, 0u);
  EXPECT_EQ(VersionFingerprint("999999999999999999"), 999999999999999999u);
  EXPECT_NE(VersionFingerprint(""), 0u);
}

}  // namespace
}  // namespace feedguard::kube
