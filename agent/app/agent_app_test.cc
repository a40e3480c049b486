#include "agent/app/agent_app.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "agent/app/node_setup.h"
#include "agent/enforcer/fake_node.h"
#include "tests/fixtures/status_testing.h"

namespace feedguard::agent {
namespace {

namespace fs = std::filesystem;
using cgroup::CgroupVersion;
using cgroup::KubeletDriver;
using testutil::FakeNode;

// The node settings the CLI would produce for a fake v1 cgroupfs node (plain dirs) and the
// 1-socket SMT-2 fixture topology; no kubelet, no NVIDIA driver, no NVML.
NodeConfig ConfigFor(const FakeNode& node) {
  NodeConfig c;
  const std::string cpu_mount = node.layout().cpu_mount;
  EXPECT_EQ(fs::path(cpu_mount).filename(), "cpu") << cpu_mount;
  c.cgroup_mount = fs::path(cpu_mount).parent_path().string();
  c.cgroup_version = CgroupVersion::kV1;
  c.cgroup_driver = KubeletDriver::kCgroupfs;
  c.state_dir = node.state_dir();
  c.topology_xml = std::string(FEEDGUARD_TOPOLOGY_FIXTURES) + "/ws-1s-1gpu.xml";
  c.cpu_manager_state = "";
  c.nvidia_proc_root = node.state_dir() + "-no-nvidia";
  c.nvml_library = "";
  return c;
}

TEST(AgentAppTest, ValidateNamesTheMissingFlag) {
  AgentConfig c;
  c.node.node_name = "n1";
  Status st = AgentApp::Validate(c);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("--controller"), std::string::npos) << st.ToString();
  c.controller = "127.0.0.1:1";
  c.node.node_name = "";
  st = AgentApp::Validate(c);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("--node-name"), std::string::npos) << st.ToString();
  c.node.node_name = "n1";
  EXPECT_TRUE(AgentApp::Validate(c).ok());
}

TEST(NodeSetupTest, ReservedCpusOutsideTheMachineAreRefusedBeforeAnythingIsCreated) {
  FakeNode node(CgroupVersion::kV1, KubeletDriver::kCgroupfs);
  NodeConfig c = ConfigFor(node);
  c.reserved_cpus = CpuSet::Range(900, 901);
  auto o = NodeEngineOptionsFor(c);
  ASSERT_TRUE(feedguard::testing::FailsWith(o, StatusCode::kInvalidArgument, "does not have"));
  auto built = BuildNode(c);
  EXPECT_FALSE(built.ok());
  EXPECT_FALSE(fs::exists(c.state_dir)) << "a refused node created its state dir";
}

TEST(NodeSetupTest, BuildNodeOpensTheStateDirAndSeesThePods) {
  FakeNode node(CgroupVersion::kV1, KubeletDriver::kCgroupfs);
  const PodIdentity pod = node.AddPod("cccccccc-0001", QosClass::kBurstable, {"c1"}, "batch");
  NodeConfig c = ConfigFor(node);
  c.reserved_cpus = CpuSet::Range(0, 0);
  auto built = BuildNode(c);
  ASSERT_TRUE(built.ok()) << built.status().ToString();
  EXPECT_TRUE(fs::exists(c.state_dir));
  ASSERT_TRUE(built->cgroups && built->enforcer && built->engine);
  EXPECT_EQ(built->cgroups->layout().version, CgroupVersion::kV1);
  EXPECT_EQ(built->topology.AllPus().size(), 16u);
  EXPECT_TRUE(built->cgroups->ResolvePod(pod).ok());
}

TEST(AgentAppTest, StartsWithAnUnreachableControllerAndStopsOnce) {
  FakeNode node(CgroupVersion::kV1, KubeletDriver::kCgroupfs);
  AgentConfig c;
  c.node = ConfigFor(node);
  c.node.node_name = "n1";
  c.controller = "127.0.0.1:1";  // nothing listens: the client keeps retrying (fail static)
  c.insecure = true;
  c.metrics_addr = "127.0.0.1:0";
  c.report_interval = std::chrono::milliseconds(100);
  c.verify_interval = std::chrono::milliseconds(100);
  auto app = AgentApp::Create(c);
  ASSERT_TRUE(app.ok()) << app.status().ToString();
  EXPECT_TRUE(fs::exists(c.node.state_dir));  // Create built the node: state dir opened
  ASSERT_TRUE((*app)->Start().ok());
  (*app)->Stop();
  (*app)->Stop();  // idempotent; the destructor stops once more
}

TEST(AgentAppTest, CreateFailsWhenTheNodeCannotBeBuilt) {
  FakeNode node(CgroupVersion::kV1, KubeletDriver::kCgroupfs);
  AgentConfig c;
  c.node = ConfigFor(node);
  c.node.node_name = "n1";
  c.controller = "127.0.0.1:1";
  c.node.topology_xml = node.state_dir() + "-absent.xml";
  auto app = AgentApp::Create(c);
  ASSERT_FALSE(app.ok());
  EXPECT_NE(app.status().message().find("topology"), std::string::npos) << app.status().ToString();
}

}  // namespace
}  // namespace feedguard::agent
