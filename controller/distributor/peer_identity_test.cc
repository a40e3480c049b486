#include "controller/distributor/peer_identity.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace feedguard::controller {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(PeerIdentityTest, KubeletStyleSubject) {
  EXPECT_THAT(NodeNamesFromCertificate({"system:node:gpu-17"}, {"system:nodes"}),
              ElementsAre("gpu-17"));
}

TEST(PeerIdentityTest, TheNodeCommonNameWithoutTheNodesOrganizationNamesNoNode) {
  // Issue 28, item 5: the CA may sign other certificates too; only the kubelet's subject says
  // "this is a node".
  EXPECT_THAT(NodeNamesFromCertificate({"system:node:gpu-17"}, {}), IsEmpty());
  EXPECT_THAT(NodeNamesFromCertificate({"system:node:gpu-17"}, {"tenants"}), IsEmpty());
}

TEST(PeerIdentityTest, CommonNameWithoutPrefixNamesNoNode) {
  EXPECT_THAT(NodeNamesFromCertificate({"gpu-17"}, {"system:nodes"}), IsEmpty());
  EXPECT_THAT(NodeNamesFromCertificate({"system:node:"}, {"system:nodes"}), IsEmpty());
  EXPECT_THAT(NodeNamesFromCertificate({"admin"}, {"system:nodes"}), IsEmpty());
}

TEST(PeerIdentityTest, SubjectAttributesFromRfc2253) {
  EXPECT_THAT(SubjectAttribute("O=system:nodes,CN=system:node:gpu-1", "O"),
              ElementsAre("system:nodes"));
  EXPECT_THAT(SubjectAttribute("O=system:nodes,CN=system:node:gpu-1", "CN"),
              ElementsAre("system:node:gpu-1"));
  EXPECT_THAT(SubjectAttribute("CN=tenant-app", "O"), IsEmpty());
  // Escapes: a comma inside a value, a hex pair, multi-valued RDNs.
  EXPECT_THAT(SubjectAttribute("O=system:nodes\\, really,CN=x", "O"),
              ElementsAre("system:nodes, really"));
  EXPECT_THAT(SubjectAttribute("O=a\\2Cb+O=system:nodes,CN=x", "O"),
              ElementsAre("a,b", "system:nodes"));
  EXPECT_THAT(SubjectAttribute("", "O"), IsEmpty());
  EXPECT_THAT(SubjectAttribute("garbage", "O"), IsEmpty());
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
