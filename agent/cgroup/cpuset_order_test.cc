#include "agent/cgroup/cpuset_order.h"

#include <gtest/gtest.h>

#include <map>

namespace feedguard::agent::cgroup {
namespace {

// Replays writes against cgroup v1's rules (child ⊆ parent: EACCES; parent ⊇ children: EBUSY).
// Returns the index of the first write the kernel would reject, or -1.
int ReplayV1(std::vector<CpusetNode> nodes, const CpuSet& parent_of_top,
             const std::vector<FileWrite>& writes) {
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < nodes.size(); ++i) index[nodes[i].file] = i;
  for (size_t w = 0; w < writes.size(); ++w) {
    size_t i = index.at(writes[w].path);
    CpuSet v = CpuSet::Parse(writes[w].value).value();
    const CpuSet& parent = nodes[i].parent < 0 ? parent_of_top : nodes[nodes[i].parent].current;
    if (!v.IsSubsetOf(parent)) return static_cast<int>(w);
    for (const auto& c : nodes) {
      if (c.parent == static_cast<int>(i) && !c.current.IsSubsetOf(v)) return static_cast<int>(w);
    }
    nodes[i].current = v;
  }
  return -1;
}

std::vector<CpusetNode> PodTree(CpuSet pod, CpuSet c1, CpuSet c2, CpuSet grandchild) {
  return {{"/pod/cpuset.cpus", -1, pod},
          {"/pod/c1/cpuset.cpus", 0, c1},
          {"/pod/c2/cpuset.cpus", 0, c2},
          {"/pod/c2/container/cpuset.cpus", 2, grandchild}};
}

TEST(PlanCpusetWritesTest, GrowWritesParentsFirstOncePerDir) {
  auto nodes = PodTree({0, 1}, {0, 1}, {0, 1}, {0});
  CpuSet target = CpuSet::Range(0, 3);
  auto writes = PlanCpusetWrites(nodes, target);
  ASSERT_EQ(writes.size(), 4u);
  EXPECT_EQ(writes[0], (FileWrite{"/pod/cpuset.cpus", "0-3"}));
  EXPECT_EQ(writes[3], (FileWrite{"/pod/c2/container/cpuset.cpus", "0-3"}));
  EXPECT_EQ(ReplayV1(nodes, CpuSet::Range(0, 7), writes), -1);
}

TEST(PlanCpusetWritesTest, ShrinkWritesChildrenFirst) {
  auto nodes = PodTree(CpuSet::Range(0, 3), CpuSet::Range(0, 3), CpuSet::Range(0, 3), {0, 1});
  CpuSet target = {2, 3};
  auto writes = PlanCpusetWrites(nodes, target);
  // {0,1} lacks 2,3 → the grandchild first grows to 0-3, then everyone shrinks leaf first.
  ASSERT_EQ(writes.size(), 5u);
  EXPECT_EQ(writes[0], (FileWrite{"/pod/c2/container/cpuset.cpus", "0-3"}));
  EXPECT_EQ(writes.back(), (FileWrite{"/pod/cpuset.cpus", "2-3"}));
  EXPECT_EQ(ReplayV1(nodes, CpuSet::Range(0, 7), writes), -1);
}

TEST(PlanCpusetWritesTest, PureShrinkIsBottomUpOnly) {
  auto nodes =
      PodTree(CpuSet::Range(0, 3), CpuSet::Range(0, 3), CpuSet::Range(0, 3), CpuSet::Range(0, 3));
  auto writes = PlanCpusetWrites(nodes, {1});
  ASSERT_EQ(writes.size(), 4u);
  EXPECT_EQ(writes[0].path, "/pod/c2/container/cpuset.cpus");
  EXPECT_EQ(writes[3].path, "/pod/cpuset.cpus");
  EXPECT_EQ(ReplayV1(nodes, CpuSet::Range(0, 3), writes), -1);
  // The naive order (parent first) is what the kernel rejects.
  std::vector<FileWrite> naive = {{"/pod/cpuset.cpus", "1"}};
  EXPECT_EQ(ReplayV1(nodes, CpuSet::Range(0, 3), naive), 0);
}

TEST(PlanCpusetWritesTest, MixedChangeGrowsToUnionThenShrinks) {
  auto nodes = PodTree({0, 1}, {0, 1}, {0}, {0});
  CpuSet target = {2, 3};
  auto writes = PlanCpusetWrites(nodes, target);
  // Four unions top-down, four targets bottom-up.
  ASSERT_EQ(writes.size(), 8u);
  EXPECT_EQ(writes[0], (FileWrite{"/pod/cpuset.cpus", "0-3"}));
  EXPECT_EQ(writes[2], (FileWrite{"/pod/c2/cpuset.cpus", "0,2-3"}));
  EXPECT_EQ(writes[4], (FileWrite{"/pod/c2/container/cpuset.cpus", "2-3"}));
  EXPECT_EQ(writes[7], (FileWrite{"/pod/cpuset.cpus", "2-3"}));
  EXPECT_EQ(ReplayV1(nodes, CpuSet::Range(0, 3), writes), -1);
}

TEST(PlanCpusetWritesTest, NothingToDoWhenAlreadyAtTarget) {
  auto nodes = PodTree({2}, {2}, {2}, {2});
  EXPECT_TRUE(PlanCpusetWrites(nodes, {2}).empty());
}

TEST(PlanCpusetWritesTest, EmptyChildIsOnlyGrownOnce) {
  // A fresh v1 cpuset child starts with an empty cpuset.cpus.
  std::vector<CpusetNode> nodes = {{"/p", -1, {0, 1}}, {"/p/c", 0, {}}};
  auto writes = PlanCpusetWrites(nodes, {1});
  ASSERT_EQ(writes.size(), 2u);
  EXPECT_EQ(writes[0], (FileWrite{"/p/c", "1"}));
  EXPECT_EQ(writes[1], (FileWrite{"/p", "1"}));
  EXPECT_EQ(ReplayV1(nodes, {0, 1}, writes), -1);
}

}  // namespace
}  // namespace feedguard::agent::cgroup
