// For tests: a NodeEngine's options over a FakeNode (agent/enforcer/fake_node.h).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "agent/enforcer/fake_node.h"
#include "agent/engine/node_engine.h"
#include "agent/topology/topology.h"

namespace feedguard::agent::testutil {

// As the agent starts on `node`: the topology read from `topology_xml`, the node's cgroups, and
// an enforcer over a checkpoint store opened (locked) in its state dir. A failure is reported and
// leaves the options without an enforcer.
inline NodeEngineOptions FakeNodeEngineOptions(const FakeNode& node,
                                               const std::string& topology_xml) {
  NodeEngineOptions o;
  auto topo = LoadTopologyFromXmlFile(topology_xml);
  EXPECT_TRUE(topo.ok()) << topo.status().ToString();
  auto store = CheckpointStore::Open(node.state_dir());
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  if (!topo.ok() || !store.ok()) return o;
  o.topology = std::move(*topo);
  o.cgroups = node.cgroups();
  o.enforcer = std::make_shared<Enforcer>(node.cgroups(), CheckpointStorePtr(std::move(*store)),
                                          EnforcerOptions{});
  return o;
}

}  // namespace feedguard::agent::testutil
