#include "controller/reconciler/cluster_cache.h"

#include <gtest/gtest.h>

namespace feedguard::controller {
namespace {

PodInfo Pod(const std::string& ns, const std::string& name, const std::string& node,
            std::vector<std::string> claims) {
  PodInfo p;
  p.uid = name + "-uid";
  p.ns = ns;
  p.name = name;
  p.node_name = node;
  p.phase = "Running";
  p.claims = std::move(claims);
  return p;
}

const PodInfo* On(const ClusterCache& c, const std::string& node, const std::string& name) {
  for (const PodInfo* p : c.PodsOn(node)) {
    if (p->name == name) return p;
  }
  return nullptr;
}

// A DRA pod's GPUs come from its claims, whenever the claim is allocated: before the pod is seen
// or after, and a change marks the node of every pod that uses the claim.
TEST(ClusterCacheTest, ClaimedGpusFollowTheClaims) {
  ClusterCache c;
  ClusterCache::NodeSet dirty;
  c.UpsertClaim({"ml", "early", 1}, &dirty);
  EXPECT_TRUE(dirty.empty()) << "nobody uses it yet";
  c.UpsertPod(Pod("ml", "a", "n1", {"early", "late"}), &dirty);
  c.UpsertPod(Pod("ml", "b", "n2", {"late"}), &dirty);
  c.UpsertPod(Pod("other", "c", "n3", {"late"}), &dirty);  // same claim name, another namespace
  ASSERT_NE(On(c, "n1", "a"), nullptr);
  EXPECT_EQ(On(c, "n1", "a")->AllGpus(), 1);
  EXPECT_EQ(On(c, "n2", "b")->AllGpus(), 0);

  dirty.clear();
  c.UpsertClaim({"ml", "late", 2}, &dirty);  // allocated now
  EXPECT_EQ(dirty, (ClusterCache::NodeSet{"n1", "n2"}));
  EXPECT_EQ(On(c, "n1", "a")->AllGpus(), 3);
  EXPECT_EQ(On(c, "n2", "b")->AllGpus(), 2);
  EXPECT_EQ(On(c, "n3", "c")->AllGpus(), 0) << "claims are namespaced";

  dirty.clear();
  c.UpsertClaim({"ml", "late", 2}, &dirty);
  EXPECT_TRUE(dirty.empty()) << "the same count changes nothing";

  // The pod moves to other claims; the old one's changes no longer reach it.
  dirty.clear();
  c.UpsertPod(Pod("ml", "b", "n2", {"early"}), &dirty);
  EXPECT_EQ(On(c, "n2", "b")->AllGpus(), 1);
  dirty.clear();
  c.DeleteClaim("ml", "late", &dirty);
  EXPECT_EQ(dirty, (ClusterCache::NodeSet{"n1"}));
  EXPECT_EQ(On(c, "n1", "a")->AllGpus(), 1);
  EXPECT_EQ(On(c, "n2", "b")->AllGpus(), 1);

  // A deleted pod is no user; a pod not yet scheduled is not kept (nor counted as one).
  c.DeletePod("ml", "a", &dirty);
  c.UpsertPod(Pod("ml", "pending", "", {"early"}), &dirty);
  dirty.clear();
  c.UpsertClaim({"ml", "early", 4}, &dirty);
  EXPECT_EQ(dirty, (ClusterCache::NodeSet{"n2"}));
  EXPECT_EQ(On(c, "n2", "b")->AllGpus(), 4);
  // A claim without a name or namespace (hostile) is ignored.
  dirty.clear();
  c.UpsertClaim({"", "early", 9}, &dirty);
  c.UpsertClaim({"ml", "", 9}, &dirty);
  EXPECT_TRUE(dirty.empty());
  EXPECT_EQ(On(c, "n2", "b")->AllGpus(), 4);
}

}  // namespace
}  // namespace feedguard::controller
