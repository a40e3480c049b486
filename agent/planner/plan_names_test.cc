// The neighbour fences as the plan's JSON (and the CRD) spells them (neighbour_fence.h).
#include <gtest/gtest.h>

#include "agent/planner/plan.h"
#include "common/enum_names_testing.h"

namespace feedguard::agent {
namespace {

TEST(PlanNamesTest, NeighbourFence) {
  feedguard::testing::ExpectRoundTrip(kNeighbourFenceNames, std::string_view("Idle"));
  EXPECT_EQ(NameOf(kNeighbourFenceNames, NeighbourFence::kCpuset, "Idle"), "Cpuset");
  EXPECT_EQ(NameOf(kNeighbourFenceNames, static_cast<NeighbourFence>(4), "Idle"), "Idle");
  EXPECT_EQ(FromName(kNeighbourFenceNames, "quota"), std::nullopt);
}

}  // namespace
}  // namespace feedguard::agent
