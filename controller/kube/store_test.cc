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

}  // namespace
}  // namespace feedguard::kube
