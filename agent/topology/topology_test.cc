// topology_test.cc — hwloc XML fixtures load into the expected Topology; rendering.
#include "agent/topology/topology.h"
#include "tests/fixtures/status_testing.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace feedguard::agent {
namespace {

const std::string kDir = FEEDGUARD_TOPOLOGY_FIXTURES;

Topology Load(const std::string& name) {
  auto t = LoadTopologyFromXmlFile(kDir + "/" + name);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? *t : Topology{};
}

TEST(TopologyTest, TwoSocketServerHasSmtSiblingsNumaAndEightGpus) {
  const Topology t = Load("server-2s-8gpu.xml");
  ASSERT_EQ(t.numa_nodes.size(), 2u);
  EXPECT_EQ(t.numa_nodes[0].cpus.ToString(), "0-31,64-95");
  EXPECT_EQ(t.numa_nodes[1].cpus.ToString(), "32-63,96-127");
  ASSERT_EQ(t.cores.size(), 64u);
  EXPECT_EQ(t.AllPus().size(), 128u);
  EXPECT_TRUE(t.HasSmt());
  // Linux numbering: the siblings of CPU 5 are 5 and 69.
  const Core* c = t.CoreOfPu(69);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->pus.ToString(), "5,69");
  EXPECT_EQ(c->numa, 0);
  EXPECT_EQ(c->package, 0);
  EXPECT_EQ(t.CoreOfPu(40)->numa, 1);
  EXPECT_EQ(t.CoreOfPu(40)->package, 1);
  // Only the NVIDIA 3D controllers count: not the InfiniBand NICs, not the ASPEED VGA.
  ASSERT_EQ(t.gpus.size(), 8u);
  EXPECT_EQ(t.gpus[0].bdf, "0000:1b:00.0");
  EXPECT_EQ(t.gpus[0].vendor_id, 0x10de);
  EXPECT_EQ(t.gpus[0].device_id, 0x20b0);
  EXPECT_EQ(t.gpus[0].class_id, 0x0302);
  for (int i = 0; i < 8; ++i) {
    const int want = i < 4 ? 0 : 1;
    EXPECT_EQ(t.gpus[i].numa, want) << t.gpus[i].bdf;
    EXPECT_EQ(t.gpus[i].local_cpus, t.numa_nodes[want].cpus) << t.gpus[i].bdf;
  }
  EXPECT_EQ(t.allowed_cpus.ToString(), "0-127");
  ASSERT_NE(t.FindGpu("0000:ca:00.0"), nullptr);
  EXPECT_EQ(t.FindGpu("0000:0c:00.0"), nullptr);  // the NIC
}

TEST(TopologyTest, WorkstationVgaGpuIsKept) {
  const Topology t = Load("ws-1s-1gpu.xml");
  EXPECT_EQ(t.numa_nodes.size(), 1u);
  EXPECT_EQ(t.cores.size(), 8u);
  ASSERT_EQ(t.gpus.size(), 1u);
  EXPECT_EQ(t.gpus[0].class_id, 0x0300);
  EXPECT_EQ(t.gpus[0].numa, 0);
  EXPECT_EQ(t.gpus[0].local_cpus.ToString(), "0-15");
}

TEST(TopologyTest, NonSmtVm) {
  const Topology t = Load("vm-nosmt-1gpu.xml");
  EXPECT_FALSE(t.HasSmt());
  ASSERT_EQ(t.cores.size(), 4u);
  for (const Core& c : t.cores) EXPECT_EQ(c.pus.size(), 1u);
  ASSERT_EQ(t.gpus.size(), 1u);
  EXPECT_EQ(t.gpus[0].bdf, "0000:00:04.0");
}

TEST(TopologyTest, GpuWithoutLocalityHasNumaMinusOneAndMachineCpus) {
  const Topology t = Load("nonuma-gpu-2s.xml");
  ASSERT_EQ(t.numa_nodes.size(), 2u);
  ASSERT_EQ(t.gpus.size(), 1u);
  EXPECT_EQ(t.gpus[0].numa, -1);
  EXPECT_EQ(t.gpus[0].local_cpus.ToString(), "0-15");
}

TEST(TopologyTest, BadXmlIsAnError) {
  EXPECT_FALSE(LoadTopologyFromXmlBuffer("<topology>nope").ok());
  EXPECT_FALSE(LoadTopologyFromXmlBuffer("").ok());
  auto missing = LoadTopologyFromXmlFile(kDir + "/does-not-exist.xml");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

// Issue 15 (small): each kind of bad file says what it is, not one generic message.
TEST(TopologyTest, BadTopologyFilesSayWhatIsWrong) {
  auto not_xml = LoadTopologyFromXmlBuffer("pack:2 core:4 pu:2");
  ASSERT_FALSE(not_xml.ok());
  EXPECT_NE(not_xml.status().message().find("not an XML file"), std::string::npos)
      << not_xml.status().ToString();
  auto svg = LoadTopologyFromXmlBuffer("<?xml version=\"1.0\"?><svg></svg>");
  ASSERT_FALSE(svg.ok());
  EXPECT_NE(svg.status().message().find("without a <topology> element"), std::string::npos)
      << svg.status().ToString();
  auto malformed = LoadTopologyFromXmlBuffer("<topology>nope");
  ASSERT_TRUE(feedguard::testing::FailsWith(malformed, StatusCode::kInvalidArgument, "malformed"));
}

TEST(TopologyTest, LiveMachineLoads) {
  auto t = LoadLiveTopology();
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_FALSE(t->cores.empty());
  EXPECT_FALSE(t->allowed_cpus.empty());
  EXPECT_TRUE(t->allowed_cpus.IsSubsetOf(t->AllPus()));
}

TEST(TopologyTest, JsonAndTable) {
  const Topology t = Load("server-2s-8gpu.xml");
  const nlohmann::json j = TopologyToJson(t);
  EXPECT_EQ(j["summary"]["cores"], 64);
  EXPECT_EQ(j["summary"]["pus"], 128);
  EXPECT_EQ(j["summary"]["gpus"], 8);
  EXPECT_EQ(j["summary"]["smt"], true);
  EXPECT_EQ(j["gpus"][4]["bdf"], "0000:9c:00.0");
  EXPECT_EQ(j["gpus"][4]["numa"], 1);
  EXPECT_EQ(j["gpus"][4]["vendor"], "10de");
  EXPECT_EQ(j["gpus"][4]["class"], "0302");
  EXPECT_EQ(j["cores"][0]["pus"], "0,64");
  const std::string table = TopologyToTable(t);
  EXPECT_NE(table.find("numa_nodes=2 cores=64 pus=128 gpus=8 smt=yes"), std::string::npos) << table;
  EXPECT_NE(table.find("0000:ca:00.0"), std::string::npos) << table;
  const std::string nonuma = TopologyToTable(Load("nonuma-gpu-2s.xml"));
  EXPECT_NE(nonuma.find("0000:00:1e.0   10de:1eb8   0302   -"), std::string::npos) << nonuma;
}

// Issue 15: kubelet's static CPU manager gave a Guaranteed pod CPUs 0, 8 and 9, so they are not
// in the agent's cpuset. They are still the machine's: core 1 is {1,9}, not a one-thread core.
TEST(TopologyTest, DisallowedCpusStayInTheirCores) {
  const Topology t = Load("cpumgr-1s-smt.xml");
  EXPECT_EQ(t.AllPus().ToString(), "0-15");
  EXPECT_EQ(t.allowed_cpus.ToString(), "1-7,10-15");
  ASSERT_EQ(t.cores.size(), 8u);
  ASSERT_NE(t.CoreOfPu(1), nullptr);
  EXPECT_EQ(t.CoreOfPu(1)->pus.ToString(), "1,9");
  ASSERT_NE(t.CoreOfPu(0), nullptr);
  EXPECT_EQ(t.CoreOfPu(0)->pus.ToString(), "0,8");
  EXPECT_EQ(t.numa_nodes.at(0).cpus.ToString(), "0-15");
}

// Issue 15: a cluster with a DRAM and an HBM node (KNL SNC-2 flat), and a socket with two
// sub-NUMA clusters: the GPU's locality is its ancestor's cores' node(s), not "unknown".
TEST(TopologyTest, GpuLocalityWithSeveralLocalNumaNodes) {
  const Topology knl = Load("knl-snc2-hbm.xml");
  ASSERT_EQ(knl.numa_nodes.size(), 4u);
  EXPECT_EQ(knl.CoreOfPu(1)->numa, 0);   // DRAM node of cluster 0, not -1
  EXPECT_EQ(knl.CoreOfPu(13)->numa, 2);  // DRAM node of cluster 1
  ASSERT_EQ(knl.gpus.size(), 1u);
  EXPECT_EQ(knl.gpus[0].local_cpus.ToString(), "4-7,12-15");
  EXPECT_EQ(knl.gpus[0].numa, 2);
  EXPECT_EQ(knl.gpus[0].local_numa, std::vector<int>{2});
  EXPECT_EQ(knl.numa_nodes[1].subtype, "MCDRAM");
  EXPECT_EQ(TopologyToJson(knl)["numaNodes"][3]["subtype"], "MCDRAM");

  const Topology snc = Load("snc-4numa-dist.xml");
  const GpuDevice* socket_gpu = snc.FindGpu("0000:01:00.0");
  ASSERT_NE(socket_gpu, nullptr);
  EXPECT_EQ(socket_gpu->local_numa, (std::vector<int>{0, 1}));
  EXPECT_EQ(socket_gpu->numa, 0);
  const GpuDevice* cluster_gpu = snc.FindGpu("0000:81:00.0");
  ASSERT_NE(cluster_gpu, nullptr);
  EXPECT_EQ(cluster_gpu->local_numa, std::vector<int>{2});
  EXPECT_EQ(cluster_gpu->local_cpus.ToString(), "8-11,24-27");

  // No locality stays no locality: a GPU on the root of a two-node machine.
  const Topology nonuma = Load("nonuma-gpu-2s.xml");
  ASSERT_EQ(nonuma.gpus.size(), 1u);
  EXPECT_TRUE(nonuma.gpus[0].local_numa.empty());
  EXPECT_EQ(nonuma.gpus[0].numa, -1);
}

TEST(TopologyTest, NumaDistancesComeFromTheOsMatrix) {
  const Topology t = Load("snc-4numa-dist.xml");
  EXPECT_EQ(t.Distance(2, 2), std::optional<uint64_t>(10));
  EXPECT_EQ(t.Distance(2, 3), std::optional<uint64_t>(12));
  EXPECT_EQ(t.Distance(2, 0), std::optional<uint64_t>(21));
  EXPECT_EQ(t.Distance(0, 7), std::nullopt);
  const auto j = TopologyToJson(t);
  EXPECT_EQ(j["numaDistances"].dump(), "[[10,12,21,21],[12,10,21,21],[21,21,10,12],[21,21,12,10]]");
  // Fixtures without a matrix have none.
  EXPECT_TRUE(Load("server-2s-8gpu.xml").numa_distances.empty());
}

TEST(TopologyTest, SyntheticDescriptionsLoad) {
  auto t = LoadSyntheticTopology("pack:2 numa:2 core:3 pu:2");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->numa_nodes.size(), 4u);
  EXPECT_EQ(t->cores.size(), 12u);
  EXPECT_EQ(t->AllPus().size(), 24u);
  for (const Core& c : t->cores) EXPECT_GE(c.numa, 0);
  EXPECT_FALSE(LoadSyntheticTopology("pack:x").ok());
  EXPECT_FALSE(LoadSyntheticTopology("").ok());
}

}  // namespace
}  // namespace feedguard::agent
