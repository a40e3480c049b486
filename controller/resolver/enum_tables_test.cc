// The FencePolicy spec's enums: their CRD spellings (fence_policy.h, label_selector.h) and their
// twins on the wire (resolver.h).
#include <gtest/gtest.h>

#include "common/enum_names_testing.h"
#include "controller/policy/fence_policy.h"
#include "controller/policy/label_selector.h"
#include "controller/resolver/resolver.h"

namespace feedguard::controller {
namespace {

using feedguard::testing::ExpectRoundTrip;

TEST(EnumTablesTest, CrdSpellings) {
  ExpectRoundTrip(kPolicyModeNames, std::string_view());
  ExpectRoundTrip(kCpuPlacementNames, std::string_view());
  ExpectRoundTrip(kNumaModeNames, std::string_view());
  ExpectRoundTrip(kNeighbourFenceNames, std::string_view());
  ExpectRoundTrip(kLabelOpNames, std::string_view());
  EXPECT_EQ(FromName(kPolicyModeNames, "DryRun"), PolicyMode::kDryRun);
  EXPECT_EQ(FromName(kNumaModeNames, "PreferGPULocal"), NumaMode::kPreferGpuLocal);
  EXPECT_EQ(FromName(kNumaModeNames, "PreferGpuLocal"), std::nullopt);
  EXPECT_EQ(FromName(kNeighbourFenceNames, "idle"), std::nullopt);
  EXPECT_EQ(FromName(kLabelOpNames, "DoesNotExist"), LabelSelector::Op::kDoesNotExist);
  EXPECT_EQ(FromName(kLabelOpNames, "Exist"), std::nullopt);
}

TEST(EnumTablesTest, WireTwins) {
  ExpectRoundTrip(kModeWire, v1::MODE_UNSPECIFIED);
  ExpectRoundTrip(kPlacementWire, v1::PLACEMENT_UNSPECIFIED);
  ExpectRoundTrip(kNumaWire, v1::NUMA_POLICY_UNSPECIFIED);
  ExpectRoundTrip(kNeighbourFenceWire, v1::NEIGHBOUR_FENCE_UNSPECIFIED);
  EXPECT_EQ(ValueOf(kModeWire, PolicyMode::kDryRun, v1::ENFORCE), v1::DRY_RUN);
  EXPECT_EQ(ValueOf(kNumaWire, NumaMode::kIgnore, v1::NUMA_POLICY_UNSPECIFIED), v1::IGNORE);
  EXPECT_EQ(
      ValueOf(kNeighbourFenceWire, NeighbourFenceMode::kQuota, v1::NEIGHBOUR_FENCE_UNSPECIFIED),
      v1::QUOTA);
  // No spec value maps to the wire's UNSPECIFIED zero.
  EXPECT_EQ(KeyOf(kModeWire, v1::MODE_UNSPECIFIED), std::nullopt);
  EXPECT_EQ(KeyOf(kNeighbourFenceWire, v1::NEIGHBOUR_FENCE_UNSPECIFIED), std::nullopt);
}

}  // namespace
}  // namespace feedguard::controller
