#include "agent/app/agent_app.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "agent/app/node_setup.h"
#include "agent/enforcer/fake_node.h"
#include "feedguard/common/wire_limits.h"
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

TEST(AgentAppTest, ValidateHoldsTheObserveFlagsToTheirRanges) {
  auto refused = [](const Status& st, const std::string& flag) {
    return st.code() == StatusCode::kInvalidArgument &&
           st.message().find(flag) != std::string::npos;
  };
  AgentConfig c;
  c.node.node_name = "n1";
  c.controller = "127.0.0.1:1";
  for (int s : {0, 301}) {
    c.observe.period = std::chrono::seconds(s);
    EXPECT_TRUE(refused(AgentApp::Validate(c), "--observe-period-s")) << s;
  }
  c.observe.period = std::chrono::seconds(300);
  for (size_t k : {size_t{0}, kMaxObservedContenders + 1}) {
    c.observe.top_k = k;
    EXPECT_TRUE(refused(AgentApp::Validate(c), "--observe-top-k")) << k;
  }
  c.observe.top_k = kMaxObservedContenders;
  EXPECT_TRUE(AgentApp::Validate(c).ok());
}

// Every line of one family in Prometheus text: its label names, per series.
std::vector<std::set<std::string>> LabelNames(const std::string& text, const std::string& family) {
  std::vector<std::set<std::string>> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(family + "{", 0) != 0) continue;
    std::set<std::string> names;
    const std::string labels = line.substr(family.size() + 1, line.find('}') - family.size() - 1);
    for (size_t at = 0; at < labels.size();) {
      const size_t eq = labels.find('=', at);
      names.insert(labels.substr(at, eq - at));
      at = labels.find("\",", eq);
      at = at == std::string::npos ? labels.size() : at + 2;
    }
    out.push_back(names);
  }
  return out;
}

TEST(ObservedMetricsTest, PerPodSeriesAndOnlyTheNodesTopContenders) {
  observe::ObserveMetrics m;
  observe::ObservedPodMetrics a;
  a.uid = "u-a";
  a.ns = "ml";
  a.name = "trainer-0";
  a.wait_s_total = {{observe::WaitSource::kPsi, 12.5}};
  a.gpu_lost_s_total = 3;
  a.wait_ratio_10m = 0.25;
  observe::ObservedPodMetrics b;
  b.uid = "u-b";
  b.ns = "ml";
  b.name = "trainer-1";
  b.wait_s_total = {{observe::WaitSource::kSchedstat, 4}};
  b.wait_ratio_10m = 0.1;  // no NVML reading: no GPU series
  m.pods = {a, b};
  m.contenders = {{observe::kNodeContender, 30}, {"u-x", 12}};
  const std::string text = RenderObservedMetrics(m);
  for (const char* line :
       {"# TYPE feedguard_observed_pod_cpu_wait_seconds_total counter\n",
        "feedguard_observed_pod_cpu_wait_seconds_total{namespace=\"ml\",pod=\"trainer-0\","
        "source=\"psi\"} 12.5\n",
        "feedguard_observed_pod_cpu_wait_seconds_total{namespace=\"ml\",pod=\"trainer-1\","
        "source=\"schedstat\"} 4\n",
        "# TYPE feedguard_observed_pod_gpu_lost_seconds_total counter\n",
        "feedguard_observed_pod_gpu_lost_seconds_total{namespace=\"ml\",pod=\"trainer-0\"} 3\n",
        "# TYPE feedguard_observed_pod_wait_ratio gauge\n",
        "feedguard_observed_pod_wait_ratio{namespace=\"ml\",pod=\"trainer-0\",window=\"10m\"} "
        "0.25\n",
        "# TYPE feedguard_observed_contender_cpu_seconds gauge\n",
        "feedguard_observed_contender_cpu_seconds{contender_uid=\"node\",window=\"10m\"} 30\n",
        "feedguard_observed_contender_cpu_seconds{contender_uid=\"u-x\",window=\"10m\"} 12\n"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "\nnot in:\n" << text;
  }
  EXPECT_EQ(text.find("trainer-1\"}"), std::string::npos) << "a pod with no GPU reading has no "
                                                             "GPU series:\n"
                                                          << text;
  // Bounded labels: the pod series by namespace and pod (no uid), the node's by contender only.
  using Names = std::set<std::string>;
  const std::map<std::string, std::pair<Names, size_t>> want = {
      {"feedguard_observed_pod_cpu_wait_seconds_total", {{"namespace", "pod", "source"}, 2}},
      {"feedguard_observed_pod_gpu_lost_seconds_total", {{"namespace", "pod"}, 1}},
      {"feedguard_observed_pod_wait_ratio", {{"namespace", "pod", "window"}, 2}},
      {"feedguard_observed_contender_cpu_seconds", {{"contender_uid", "window"}, 2}}};
  for (const auto& [family, expect] : want) {
    auto series = LabelNames(text, family);
    EXPECT_EQ(series.size(), expect.second) << family;
    for (const auto& names : series) EXPECT_EQ(names, expect.first) << family;
  }
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

TEST(NodeSetupTest, TheObserverIsBuiltOnlyForTheDaemonWithObservationOn) {
  FakeNode node(CgroupVersion::kV1, KubeletDriver::kCgroupfs);
  NodeConfig c = ConfigFor(node);
  {
    auto local = BuildNode(c);  // the local commands
    ASSERT_TRUE(local.ok()) << local.status().ToString();
    EXPECT_FALSE(local->observer);
  }
  {
    ObserveConfig off;
    off.enabled = false;
    auto built = BuildNode(c, off);
    ASSERT_TRUE(built.ok()) << built.status().ToString();
    EXPECT_FALSE(built->observer);
  }
  auto built = BuildNode(c, ObserveConfig{});
  ASSERT_TRUE(built.ok()) << built.status().ToString();
  ASSERT_TRUE(built->observer);
  // The engine hands it each fence's observe list.
  feedguard::v1::NodeFence f;
  f.set_version(1);
  auto* pod = f.add_observe();
  pod->set_uid("cccccccc-0002");
  pod->set_namespace_("ml");
  pod->set_name("t");
  ASSERT_TRUE(built->engine->Apply(f).ok());
  built->observer->Tick();
  built->observer->Tick();
  EXPECT_TRUE(built->observer->Observations().empty()) << "no interval yet";
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
