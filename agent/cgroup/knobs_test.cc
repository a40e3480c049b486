// knobs_test.cc — the cgroup layer's knob table: translation, order, side effects, restores.
#include "agent/cgroup/knobs.h"

#include <gtest/gtest.h>

#include <map>

namespace feedguard::agent::cgroup {
namespace {

ReadFn FromMap(const std::map<std::string, std::string>& files) {
  return [files](const std::string& path) -> Result<std::string> {
    auto it = files.find(path);
    if (it == files.end()) return NotFound("no " + path);
    return it->second;
  };
}

TEST(KnobValuesEquivalentTest, Normalises) {
  EXPECT_TRUE(KnobValuesEquivalent("/x/cpu.shares", "1024\n", "1024"));
  EXPECT_FALSE(KnobValuesEquivalent("/x/cpu.shares", "1024\n", "102"));
  EXPECT_TRUE(KnobValuesEquivalent("/x/cpuset.cpus", "0-3\n", "0,1,2,3"));
  EXPECT_FALSE(KnobValuesEquivalent("/x/cpuset.cpus", "0-3\n", "0-2"));
  EXPECT_TRUE(KnobValuesEquivalent("/x/cpuset.mems", "\n", ""));
  EXPECT_TRUE(KnobValuesEquivalent("/x/cpu.max", "max  100000\n", "max 100000"));
  EXPECT_FALSE(KnobValuesEquivalent("/x/cpu.max", "max 100000\n", "50000 100000"));
}

TEST(CpuKnobWritesTest, WeightIsConvertedOnV1AndWrittenAsIsOnV2) {
  auto none = FromMap({});
  auto v1 = CpuKnobWrites(CgroupVersion::kV1, "/p", {.weight = 1}, none);
  ASSERT_TRUE(v1.ok());
  EXPECT_EQ(*v1, (std::vector<KnobWrite>{{"/p/cpu.shares", "2"}}));
  auto v2 = CpuKnobWrites(CgroupVersion::kV2, "/p", {.weight = 1}, none);
  ASSERT_TRUE(v2.ok());
  EXPECT_EQ(*v2, (std::vector<KnobWrite>{{"/p/cpu.weight", "1"}}));
}

TEST(CpuKnobWritesTest, V1QuotaUnderAnotherPeriodGoesThroughUnlimited) {
  auto read = FromMap({{"/p/cpu.cfs_period_us", "250000\n"}, {"/p/cpu.cfs_quota_us", "50000\n"}});
  auto w = CpuKnobWrites(CgroupVersion::kV1, "/p", {.quota = CpuQuota{20000, 100000}}, read);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(*w, (std::vector<KnobWrite>{{"/p/cpu.cfs_quota_us", "-1"},
                                        {"/p/cpu.cfs_period_us", "100000"},
                                        {"/p/cpu.cfs_quota_us", "20000", true}}));
  // Same period: quota alone after the (no-op) period.
  auto same = FromMap({{"/p/cpu.cfs_period_us", "100000\n"}, {"/p/cpu.cfs_quota_us", "50000\n"}});
  auto w2 = CpuKnobWrites(CgroupVersion::kV1, "/p", {.quota = CpuQuota{20000, 100000}}, same);
  ASSERT_TRUE(w2.ok());
  EXPECT_EQ(*w2, (std::vector<KnobWrite>{{"/p/cpu.cfs_period_us", "100000"},
                                         {"/p/cpu.cfs_quota_us", "20000"}}));
  auto v2 = CpuKnobWrites(CgroupVersion::kV2, "/p", {.quota = CpuQuota{-1, 100000}}, same);
  ASSERT_TRUE(v2.ok());
  EXPECT_EQ(*v2, (std::vector<KnobWrite>{{"/p/cpu.max", "max 100000"}}));
}

// The kernel refuses a finite quota below the group's burst (both versions): a quota fence
// lowers the burst to 0 before any bandwidth write, and only where the kernel has the file.
TEST(CpuKnobWritesTest, AQuotaFenceLowersTheBurstFirst) {
  auto v1 = FromMap({{"/p/cpu.cfs_period_us", "250000\n"},
                     {"/p/cpu.cfs_quota_us", "-1\n"},
                     {"/p/cpu.cfs_burst_us", "50000\n"}});
  auto w = CpuKnobWrites(CgroupVersion::kV1, "/p", {.quota = CpuQuota{20000, 100000}}, v1);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(*w, (std::vector<KnobWrite>{{"/p/cpu.cfs_burst_us", "0"},
                                        {"/p/cpu.cfs_period_us", "100000"},
                                        {"/p/cpu.cfs_quota_us", "20000", true}}));
  auto v2 = FromMap({{"/p/cpu.max", "max 100000\n"}, {"/p/cpu.max.burst", "30000\n"}});
  auto w2 = CpuKnobWrites(CgroupVersion::kV2, "/p", {.quota = CpuQuota{20000, 100000}}, v2);
  ASSERT_TRUE(w2.ok()) << w2.status().ToString();
  EXPECT_EQ(*w2,
            (std::vector<KnobWrite>{{"/p/cpu.max.burst", "0"}, {"/p/cpu.max", "20000 100000"}}));
  // Listed even when it already reads 0, so the file stays the fence's while it holds (the
  // enforcer skips a write that changes nothing).
  auto zero = FromMap({{"/p/cpu.max", "max 100000\n"}, {"/p/cpu.max.burst", "0\n"}});
  auto w3 = CpuKnobWrites(CgroupVersion::kV2, "/p", {.quota = CpuQuota{20000, 100000}}, zero);
  ASSERT_TRUE(w3.ok());
  EXPECT_EQ(w3->front(), (KnobWrite{"/p/cpu.max.burst", "0"}));
  // An unlimited quota is never below a burst: left alone.
  auto w4 = CpuKnobWrites(CgroupVersion::kV2, "/p", {.quota = CpuQuota{-1, 100000}}, v2);
  ASSERT_TRUE(w4.ok());
  EXPECT_EQ(*w4, (std::vector<KnobWrite>{{"/p/cpu.max", "max 100000"}}));
  // A burst file that cannot be read for another reason than its absence is an error.
  ReadFn denied = [](const std::string& path) -> Result<std::string> {
    if (path == "/p/cpu.max.burst") return PermissionDenied("cannot read " + path);
    return std::string("max 100000\n");
  };
  EXPECT_FALSE(
      CpuKnobWrites(CgroupVersion::kV2, "/p", {.quota = CpuQuota{20000, 100000}}, denied).ok());
}

TEST(LiftChildQuotasTest, OnlyChildrenAboveTheFenceAreLiftedDeepestFirst) {
  auto read = FromMap({{"/p/a/cpu.cfs_quota_us", "50000"},  // 0.2 of 250000: above 0.1
                       {"/p/a/cpu.cfs_period_us", "250000"},
                       {"/p/a/x/cpu.cfs_quota_us", "90000"},  // 0.9: above
                       {"/p/a/x/cpu.cfs_period_us", "100000"},
                       {"/p/b/cpu.cfs_quota_us", "5000"},  // 0.05: below, left alone
                       {"/p/b/cpu.cfs_period_us", "100000"},
                       {"/p/c/cpu.cfs_quota_us", "-1"},  // unlimited: inherits, left alone
                       {"/p/c/cpu.cfs_period_us", "100000"}});
  auto w = LiftChildQuotas(CgroupVersion::kV1, {"/p/a", "/p/a/x", "/p/b", "/p/c"},
                           CpuQuota{10000, 100000}, read);
  EXPECT_EQ(w, (std::vector<KnobWrite>{{"/p/a/x/cpu.cfs_quota_us", "-1"},
                                       {"/p/a/cpu.cfs_quota_us", "-1"}}));
  EXPECT_TRUE(LiftChildQuotas(CgroupVersion::kV2, {"/p/a"}, CpuQuota{10000, 100000}, read).empty());
}

TEST(SideEffectOfTest, IdleResetsTheWeight) {
  auto on = SideEffectOf(CgroupVersion::kV1, "/p/cpu.idle", "1");
  ASSERT_TRUE(on.has_value());
  EXPECT_EQ(on->path, "/p/cpu.shares");
  EXPECT_EQ(on->values, std::vector<std::string>{"3"});
  auto off = SideEffectOf(CgroupVersion::kV2, "/p/cpu.idle", "0\n");
  ASSERT_TRUE(off.has_value());
  EXPECT_EQ(off->path, "/p/cpu.weight");
  EXPECT_EQ(off->values, std::vector<std::string>{"100"});
  EXPECT_FALSE(SideEffectOf(CgroupVersion::kV1, "/p/cpu.shares", "2").has_value());
}

TEST(OrderRestoresTest, IdleBeforeWeightAndCpusetsLevelled) {
  std::vector<RestoreItem> items = {
      {"/p/cpu.shares", "3", "3"},  // reads its original now, but idle will reset it
      {"/p/cpu.idle", "0", "1"},
      {"/p/c/cpuset.cpus", "0-1", "1"},
      {"/p/cpuset.cpus", "0-1", "1"},
  };
  auto plan = OrderRestores(CgroupVersion::kV1, items);
  EXPECT_EQ(plan, (std::vector<FileWrite>{{"/p/cpuset.cpus", "0-1"},
                                          {"/p/c/cpuset.cpus", "0-1"},
                                          {"/p/c/cpuset.cpus", "0-1"},
                                          {"/p/cpuset.cpus", "0-1"},
                                          {"/p/cpu.idle", "0"},
                                          {"/p/cpu.shares", "3"}}));
  // Journal: the idle write's side effect (1024) is an intermediate of the shares file.
  auto mid = IntermediatesOf(CgroupVersion::kV1, items, plan);
  EXPECT_NE(std::find(mid.begin(), mid.end(),
                      std::make_pair(std::string("/p/cpu.shares"), std::string("1024"))),
            mid.end());
}

TEST(OrderRestoresTest, V1BandwidthParentsFirstThroughUnlimitedWhenThePeriodChanges) {
  std::vector<RestoreItem> items = {
      {"/p/c/cpu.cfs_quota_us", "50000", "-1"},
      {"/p/cpu.cfs_quota_us", "50000", "20000"},
      {"/p/cpu.cfs_period_us", "250000", "100000"},
  };
  auto plan = OrderRestores(CgroupVersion::kV1, items);
  EXPECT_EQ(plan, (std::vector<FileWrite>{{"/p/cpu.cfs_quota_us", "-1"},
                                          {"/p/cpu.cfs_period_us", "250000"},
                                          {"/p/cpu.cfs_quota_us", "50000"},
                                          {"/p/c/cpu.cfs_quota_us", "50000"}}));
  auto mid = IntermediatesOf(CgroupVersion::kV1, items, plan);
  EXPECT_EQ(mid, (std::vector<std::pair<std::string, std::string>>{{"/p/cpu.cfs_quota_us", "-1"}}));
}

// Bursts come back after their quota whatever order the journal lists them in (the kernel
// accepts a burst only up to the quota the group holds at that moment).
TEST(OrderRestoresTest, BurstsAreRestoredAfterTheirQuota) {
  std::vector<RestoreItem> v2_items = {
      {"/p/cpu.max.burst", "30000\n", "0"},
      {"/p/cpu.max", "max 100000\n", "20000 100000"},
  };
  EXPECT_EQ(
      OrderRestores(CgroupVersion::kV2, v2_items),
      (std::vector<FileWrite>{{"/p/cpu.max", "max 100000\n"}, {"/p/cpu.max.burst", "30000\n"}}));
  std::vector<RestoreItem> v1_items = {
      {"/p/cpu.cfs_burst_us", "50000\n", "0"},
      {"/p/c/cpu.cfs_quota_us", "60000\n", "-1"},
      {"/p/cpu.cfs_quota_us", "100000\n", "20000"},
      {"/p/cpu.cfs_period_us", "250000\n", "100000"},
  };
  EXPECT_EQ(OrderRestores(CgroupVersion::kV1, v1_items),
            (std::vector<FileWrite>{{"/p/cpu.cfs_quota_us", "-1"},
                                    {"/p/cpu.cfs_period_us", "250000\n"},
                                    {"/p/cpu.cfs_quota_us", "100000\n"},
                                    {"/p/c/cpu.cfs_quota_us", "60000\n"},
                                    {"/p/cpu.cfs_burst_us", "50000\n"}}));
}

TEST(IsKnobFileTest, OnlyTheFilesTheTableWritesOnThatVersion) {
  for (const char* f : {"cpu.idle", "cpu.shares", "cpu.cfs_quota_us", "cpu.cfs_period_us",
                        "cpu.cfs_burst_us", "cpuset.cpus", "cpuset.mems"}) {
    EXPECT_TRUE(IsKnobFile(CgroupVersion::kV1, std::string("/k/pod1/") + f)) << f;
  }
  for (const char* f :
       {"cpu.idle", "cpu.weight", "cpu.max", "cpu.max.burst", "cpuset.cpus", "cpuset.mems"}) {
    EXPECT_TRUE(IsKnobFile(CgroupVersion::kV2, std::string("/k/pod1/c1/") + f)) << f;
  }
  for (const char* f : {"cgroup.procs", "tasks", "cgroup.subtree_control", "cpu.stat",
                        "cpuset.cpus.effective", "cpuset.cpus.exclusive", "cpu.weight.nice",
                        "notify_on_release", "release_agent", "cpu.pressure", "memory.max", ""}) {
    EXPECT_FALSE(IsKnobFile(CgroupVersion::kV1, std::string("/k/pod1/") + f)) << f;
    EXPECT_FALSE(IsKnobFile(CgroupVersion::kV2, std::string("/k/pod1/") + f)) << f;
  }
  // A name of the other version is not this version's knob.
  EXPECT_FALSE(IsKnobFile(CgroupVersion::kV1, "/k/pod1/cpu.weight"));
  EXPECT_FALSE(IsKnobFile(CgroupVersion::kV2, "/k/pod1/cpu.shares"));
}

}  // namespace
}  // namespace feedguard::agent::cgroup
