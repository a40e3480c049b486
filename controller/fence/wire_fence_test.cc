#include "controller/fence/wire_fence.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

namespace feedguard::controller {
namespace {

namespace v1 = feedguard::v1;

v1::NodeFence Sample(uint64_t version) {
  v1::NodeFence f;
  f.set_node_name("gpu-1");
  f.set_version(version);
  auto* p = f.add_policies();
  p->set_name("vision");
  p->set_generation(3);
  auto* t = f.add_trainers();
  t->set_policy("vision");
  t->mutable_pod()->set_uid("0b5c1c1e-8f4e-4d0a-9a55-1f7c2a3b4c5d");
  t->mutable_pod()->set_namespace_("ml");
  t->mutable_pod()->set_name("train-0");
  auto* c = t->mutable_pod()->add_containers();
  c->set_name("main");
  c->set_container_id("containerd://" + std::string(64, 'a'));
  auto* n = f.add_neighbours();
  n->set_policy("vision");
  n->mutable_pod()->set_uid("u2");
  n->mutable_pod()->set_name("spin-0");
  return f;
}

TEST(WireFenceTest, AgentReceivesTheFenceWithItsVersion) {
  for (uint64_t version : {uint64_t{0}, uint64_t{1}, uint64_t{127}, uint64_t{128},
                           uint64_t{1} << 35, std::numeric_limits<uint64_t>::max()}) {
    const v1::NodeFence f = Sample(version);
    auto w = WireFence::From(f);
    EXPECT_EQ(w->node_name(), "gpu-1");
    EXPECT_EQ(w->version(), version);
    EXPECT_EQ(w->Parse().SerializeAsString(), f.SerializeAsString()) << version;
  }
}

TEST(WireFenceTest, VersionIsNotInTheComparedBytes) {
  auto a = WireFence::From(Sample(3));
  auto b = WireFence::From(Sample(9));
  EXPECT_TRUE(a->Same(*b));
  EXPECT_EQ(a->unversioned(), WireFence::Serialize(Sample(0)));
  v1::NodeFence other = Sample(3);
  other.mutable_neighbours(0)->set_policy("other");
  EXPECT_FALSE(a->Same(*WireFence::From(other)));
}

}  // namespace
}  // namespace feedguard::controller
