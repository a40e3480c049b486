#include "common/cpuset.h"

#include <gtest/gtest.h>

namespace feedguard {
namespace {

TEST(CpuSetTest, ParsesKernelListFormat) {
  auto s = CpuSet::Parse("0-3,8,10-11\n");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->size(), 7u);
  EXPECT_TRUE(s->Contains(8));
  EXPECT_FALSE(s->Contains(9));
  EXPECT_EQ(s->ToString(), "0-3,8,10-11");
}

TEST(CpuSetTest, EmptyStringIsEmptySet) {
  auto s = CpuSet::Parse("\n");
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->empty());
  EXPECT_EQ(s->ToString(), "");
}

TEST(CpuSetTest, RejectsGarbage) {
  for (const char* bad : {"a", "1-", "-1", "3-1", "1,,2", "99999999", "1-2-3"}) {
    auto s = CpuSet::Parse(bad);
    EXPECT_FALSE(s.ok()) << bad;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(CpuSetTest, SetAlgebra) {
  CpuSet a = CpuSet::Range(0, 5), b{4, 5, 6};
  EXPECT_EQ(a.Intersect(b).ToString(), "4-5");
  EXPECT_EQ(a.Minus(b).ToString(), "0-3");
  EXPECT_EQ(a.Union(b).ToString(), "0-6");
  EXPECT_TRUE(CpuSet({1, 2}).IsSubsetOf(a));
  EXPECT_FALSE(b.IsSubsetOf(a));
  EXPECT_TRUE(a.Intersects(b));
  EXPECT_FALSE(CpuSet({7}).Intersects(a));
}

}  // namespace
}  // namespace feedguard
