#include "controller/distributor/peer_identity.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace feedguard::controller {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(PeerIdentityTest, KubeletStyleCommonName) {
  EXPECT_THAT(NodeNamesFromCertificate({"system:node:gpu-17"}, {}), ElementsAre("gpu-17"));
}

TEST(PeerIdentityTest, CommonNameWithoutPrefixNamesNoNode) {
  EXPECT_THAT(NodeNamesFromCertificate({"gpu-17"}, {}), IsEmpty());
  EXPECT_THAT(NodeNamesFromCertificate({"system:node:"}, {}), IsEmpty());
  EXPECT_THAT(NodeNamesFromCertificate({"admin"}, {}), IsEmpty());
}

TEST(PeerIdentityTest, DnsSansWithOrWithoutPrefixDeduplicated) {
  EXPECT_THAT(NodeNamesFromCertificate({"system:node:a"}, {"a", "b", "system:node:c", ""}),
              ElementsAre("a", "b", "c"));
}

TEST(PeerIdentityTest, MayActOnlyForListedNonEmptyNode) {
  const std::vector<std::string> allowed = {"gpu-1", "gpu-1.example"};
  EXPECT_TRUE(MayActForNode(allowed, "gpu-1"));
  EXPECT_FALSE(MayActForNode(allowed, "gpu-2"));
  EXPECT_FALSE(MayActForNode(allowed, "gpu"));
  EXPECT_FALSE(MayActForNode(allowed, ""));
  EXPECT_FALSE(MayActForNode({}, "gpu-1"));
}

}  // namespace
}  // namespace feedguard::controller
