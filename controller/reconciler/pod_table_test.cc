#include "controller/reconciler/pod_table.h"

#include <gtest/gtest.h>

namespace feedguard::controller {
namespace {

PodInfo Pod(const std::string& ns, const std::string& name, const std::string& node) {
  PodInfo p;
  p.uid = "uid-" + ns + "-" + name;
  p.ns = ns;
  p.name = name;
  p.node_name = node;
  return p;
}

TEST(PodTableTest, FindsByNamespaceAndNameAndKeepsRecordsInPlace) {
  PodTable t;
  const PodInfo& a = t.Insert(Pod("ns", "a", "n1"));
  t.Insert(Pod("ns", "b", "n1"));
  // "a/b" + "c" and "a" + "b/c" were one key when the key was "<ns>/<name>"; they are two pods.
  t.Insert(Pod("x/y", "z", "n2"));
  t.Insert(Pod("x", "y/z", "n2"));
  EXPECT_EQ(t.size(), 4u);
  ASSERT_NE(t.Find("ns", "a"), nullptr);
  EXPECT_EQ(t.Find("ns", "a"), &a);
  EXPECT_EQ(t.Find("x/y", "z")->uid.str(), "uid-x/y-z");
  EXPECT_EQ(t.Find("x", "y/z")->uid.str(), "uid-x-y/z");
  EXPECT_EQ(t.Find("ns", "c"), nullptr);
  EXPECT_EQ(t.Find("other", "a"), nullptr);

  // Replace keeps the record where it is (the per-node lists point at it) and refuses a pod of
  // another key.
  PodInfo moved = Pod("ns", "a", "n2");
  EXPECT_TRUE(t.Replace(*t.Find("ns", "a"), moved));
  EXPECT_EQ(t.Find("ns", "a"), &a);
  EXPECT_EQ(a.node_name, "n2");
  EXPECT_FALSE(t.Replace(*t.Find("ns", "a"), Pod("ns", "b", "n3")));
  EXPECT_EQ(a.node_name, "n2");

  t.Erase(*t.Find("ns", "b"));
  EXPECT_EQ(t.Find("ns", "b"), nullptr);
  EXPECT_EQ(t.size(), 3u);
}

}  // namespace
}  // namespace feedguard::controller
