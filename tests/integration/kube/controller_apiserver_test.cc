// feedguard-controller against a real kube-apiserver + etcd (tests/testbed), each test on a
// private test bed (it installs CRDs of its own, one of them deliberately loose): the process
// as shipped, an agent's stream spoken by a raw gRPC client.
//
// - Never withdraw on start (issue 14): a controller started on a cluster that already holds a
//   policy and its pods sends a node nothing until it knows them all: the first fence an agent
//   gets already holds the policy.
// - No object can crash it (issue 13): under a CRD that validates nothing, malformed
//   FencePolicies become Invalid conditions naming the field; the process stays up.
// - Policies that can never fence (issue 13 item 4) are Invalid with an Event; requireGPU holds.
// - Observe first (issue 30): a node's GPU pods are in its fence's observe list with no policy;
//   what its agent reports of them becomes the StarvationReport `cluster`, contenders named,
//   written again only when it changed.
//
// These FAIL, never skip, when the test bed cannot start: they run only under `apiserver`.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "controller/kube/client.h"
#include "controller/kube/curl_transport.h"
#include "controller/kube/kubeconfig.h"
#include "feedguard/v1/nodefence.grpc.pb.h"
#include "tests/integration/kube/process_util.h"

namespace feedguard::kube {
namespace {

namespace fs = std::filesystem;
namespace v1 = feedguard::v1;
using namespace std::chrono_literals;
using feedguard::testing::FreePort;
using feedguard::testing::Shell;

const Gvr kFencePolicies{"feedguard.io", "v1alpha1", "fencepolicies"};
const Gvr kNamespaces{"", "v1", "namespaces"};
const Gvr kStarvationReports{"feedguard.io", "v1alpha1", "starvationreports"};

// The controller process: started with fork/exec, stopped (SIGTERM, then SIGKILL) by its pid.
class ControllerProcess {
 public:
  ControllerProcess(const std::string& kubeconfig, const std::string& log, int grpc_port,
                    int metrics_port) {
    pid_ = ::fork();
    if (pid_ == 0) {
      FILE* f = std::freopen(log.c_str(), "w", stdout);
      (void)f;
      ::dup2(::fileno(stdout), 2);
      const std::string g = "127.0.0.1:" + std::to_string(grpc_port);
      const std::string m = "127.0.0.1:" + std::to_string(metrics_port);
      // FG_CONTROLLER_BIN in the environment runs another build (e.g. an older one, to show
      // what these tests catch).
      const char* env = std::getenv("FG_CONTROLLER_BIN");
      const char* bin = env && *env ? env : FG_CONTROLLER_BIN;
      ::execl(bin, bin, "--kubeconfig", kubeconfig.c_str(), "--insecure", "--listen-grpc",
              g.c_str(), "--metrics-addr", m.c_str(), "--status-interval-ms", "200",
              "--observe-interval-ms", "1000", static_cast<char*>(nullptr));
      std::_Exit(127);
    }
  }
  ~ControllerProcess() { Stop(); }
  ControllerProcess(const ControllerProcess&) = delete;
  ControllerProcess& operator=(const ControllerProcess&) = delete;

  // Whether it is still running (reaps it if not).
  bool Alive() {
    if (pid_ <= 0) return false;
    int st = 0;
    if (::waitpid(pid_, &st, WNOHANG) == pid_) {
      exit_status_ = st;
      pid_ = -1;
      return false;
    }
    return true;
  }
  int exit_status() const { return exit_status_; }
  void Stop() {
    if (!Alive()) return;
    ::kill(pid_, SIGTERM);
    for (int i = 0; i < 100 && Alive(); ++i) std::this_thread::sleep_for(50ms);
    if (Alive()) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }

 private:
  pid_t pid_ = -1;
  int exit_status_ = 0;
};

class ControllerApiserverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::string(FG_PRIVATE_TESTBED_BASE) + "-ctrl-" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    Script("down");  // leftovers of a crashed run (stops only what that run started)
    ASSERT_EQ(Script("up"), 0) << "testbed.sh up " << dir_ << " failed";
    up_ = true;
    kubeconfig_ = dir_ + "/kubeconfig";
    auto cfg = LoadKubeconfig(kubeconfig_);
    ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
    auto transport = CurlTransport::Create(*cfg, std::make_shared<RealTimeSource>());
    ASSERT_TRUE(transport.ok()) << transport.status().ToString();
    client_ = std::make_shared<Client>(*transport);
  }
  void TearDown() override {
    controller_.reset();
    if (HasFailure() && fs::exists(dir_ + "/controller.log")) {
      std::ifstream in(dir_ + "/controller.log");
      std::string line;
      int n = 0;
      std::cerr << "---- controller.log (head) ----\n";
      while (std::getline(in, line) && n++ < 200) std::cerr << line << "\n";
    }
    if (up_) {
      EXPECT_EQ(Script("down"), 0);
    }
    // What this test wrote there itself (the log was printed above on failure).
    std::error_code ec;
    fs::remove(dir_ + "/controller.log", ec);
    fs::remove(dir_ + "/loose-crd.json", ec);
    fs::remove(dir_, ec);  // only if empty
  }
  int Script(const std::string& verb) {
    return Shell(std::string(FG_TESTBED_SH) + " " + verb + " " + dir_ + " >/dev/null 2>&1");
  }
  int Kubectl(const std::string& args) {
    return Shell("kubectl --kubeconfig " + kubeconfig_ + " --request-timeout=30s " + args +
                 " >/dev/null 2>&1");
  }
  void InstallCrd(const std::string& file, const Gvr& gvr = kFencePolicies) {
    ASSERT_EQ(Kubectl("apply -f " + file), 0) << file;
    ASSERT_EQ(Kubectl("wait --for=condition=Established --timeout=60s crd/" + gvr.resource + "." +
                      gvr.group),
              0);
    // The new resource is served a moment after Established.
    for (int i = 0; i < 100; ++i) {
      if (client_->List(gvr, "", {}).ok()) return;
      std::this_thread::sleep_for(100ms);
    }
    FAIL() << gvr.resource << " never served";
  }
  void StartController() {
    grpc_port_ = FreePort();
    metrics_port_ = FreePort();
    ASSERT_GT(grpc_port_, 0);
    ASSERT_GT(metrics_port_, 0);
    controller_ = std::make_unique<ControllerProcess>(kubeconfig_, dir_ + "/controller.log",
                                                      grpc_port_, metrics_port_);
  }
  Json Node(const std::string& name) {
    return {{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", name}}}};
  }
  // A fake agent of `node` on the controller's stream (plaintext), its hello sent.
  struct FakeAgent {
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<v1::FenceDistribution::Stub> stub;
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientReaderWriter<v1::AgentMessage, v1::ControllerMessage>> rw;
    // ACKs an update as the real agent does (version and nonce).
    bool Ack(const v1::ControllerMessage& in) {
      v1::AgentMessage ack;
      ack.mutable_ack()->set_version(in.update().fence().version());
      ack.mutable_ack()->set_nonce(in.update().nonce());
      return rw->Write(ack);
    }
  };
  std::unique_ptr<FakeAgent> ConnectAgent(const std::string& node, std::chrono::seconds deadline) {
    auto a = std::make_unique<FakeAgent>();
    a->channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(grpc_port_),
                                     grpc::InsecureChannelCredentials());
    a->stub = v1::FenceDistribution::NewStub(a->channel);
    a->ctx.set_wait_for_ready(true);
    a->ctx.set_deadline(std::chrono::system_clock::now() + deadline);
    a->rw = a->stub->Stream(&a->ctx);
    v1::AgentMessage hello;
    hello.mutable_hello()->set_node_name(node);
    if (!a->rw->Write(hello)) return nullptr;
    return a;
  }
  Json Pod(const std::string& ns, const std::string& name, const std::string& node,
           const std::string& role) {
    Json p = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", {{"name", name}, {"namespace", ns}}},
              {"spec",
               {{"nodeName", node},
                {"containers", {{{"name", "main"}, {"image", "registry.invalid/none"}}}}}}};
    if (!role.empty()) p["metadata"]["labels"]["feedguard.io/role"] = role;
    return p;
  }

  std::string dir_;
  std::string kubeconfig_;
  bool up_ = false;
  ClientPtr client_;
  std::unique_ptr<ControllerProcess> controller_;
  int grpc_port_ = 0;
  int metrics_port_ = 0;
};

TEST_F(ControllerApiserverTest, FirstFenceAfterStartAlreadyHoldsThePolicy) {
  InstallCrd(FG_CRD_FILE);
  ASSERT_TRUE(client_->Create(kNamespaces, "", {{"metadata", {{"name", "ml"}}}}).ok());
  ASSERT_TRUE(client_->Create(NodesGvr(), "", Node("fg-n1")).ok());
  const Json sel = {{"matchLabels", {{"feedguard.io/role", "trainer"}}}};
  Json policy = {{"apiVersion", "feedguard.io/v1alpha1"},
                 {"kind", "FencePolicy"},
                 {"metadata", {{"name", "start-test"}}},
                 {"spec", {{"trainers", {{"podSelector", sel}}}}}};
  ASSERT_TRUE(client_->Create(kFencePolicies, "", policy).ok());
  ASSERT_TRUE(client_->Create(PodsGvr(), "ml", Pod("ml", "trainer", "fg-n1", "trainer")).ok());
  ASSERT_TRUE(client_->Create(PodsGvr(), "ml", Pod("ml", "spinner", "fg-n1", "")).ok());
  // Enough other pods, heavy enough (a 200 KB annotation each: ~80 MB to list), that listing
  // them takes a while: the window in which a controller that does not wait knows the node and
  // the policy but not yet the node's pods.
  for (int n = 0; n < 20; ++n) {
    ASSERT_TRUE(client_->Create(NodesGvr(), "", Node("fg-other-" + std::to_string(n))).ok());
  }
  const std::string ballast(200 * 1000, 'x');
  for (int i = 0; i < 400; ++i) {
    Json pod = Pod("ml", "filler-" + std::to_string(i), "fg-other-" + std::to_string(i % 20), "");
    pod["metadata"]["annotations"]["ballast"] = ballast;
    auto r = client_->Create(PodsGvr(), "ml", pod);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }

  StartController();
  // The agent of fg-n1 dials at once and waits for the server (wait_for_ready), ACKs every
  // fence, and records them all for a few seconds after the first.
  grpc::ChannelArguments args;  // dial again every few ms until the controller listens
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 5);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 5);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 20);
  auto channel = grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(grpc_port_),
                                           grpc::InsecureChannelCredentials(), args);
  auto stub = v1::FenceDistribution::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_wait_for_ready(true);
  ctx.set_deadline(std::chrono::system_clock::now() + 120s);
  auto rw = stub->Stream(&ctx);
  v1::AgentMessage hello;
  hello.mutable_hello()->set_node_name("fg-n1");
  ASSERT_TRUE(rw->Write(hello));
  std::vector<v1::NodeFence> fences;
  std::atomic<bool> first{false};
  std::thread stopper([&] {
    for (int i = 0; i < 1200 && !first; ++i) std::this_thread::sleep_for(100ms);
    std::this_thread::sleep_for(4s);
    ctx.TryCancel();
  });
  v1::ControllerMessage in;
  while (rw->Read(&in)) {
    fences.push_back(in.update().fence());
    first = true;
    v1::AgentMessage ack;
    ack.mutable_ack()->set_version(in.update().fence().version());
    ack.mutable_ack()->set_nonce(in.update().nonce());
    rw->Write(ack);
  }
  stopper.join();
  ASSERT_FALSE(fences.empty()) << "no fence within the deadline";
  for (size_t i = 0; i < fences.size(); ++i) {
    const auto& f = fences[i];
    ASSERT_EQ(f.policies_size(), 1) << "fence #" << i << " (version " << f.version()
                                    << ") drops the policy: " << f.ShortDebugString();
    EXPECT_EQ(f.policies(0).name(), "start-test");
    EXPECT_EQ(f.trainers_size(), 1) << "fence #" << i;
    EXPECT_EQ(f.neighbours_size(), 1) << "fence #" << i;
  }
  EXPECT_TRUE(controller_->Alive());
  // /readyz says ready by now (the synced flag is set with the first full resolution).
  EXPECT_EQ(Shell("curl -fsS -m 2 http://127.0.0.1:" + std::to_string(metrics_port_) +
                  "/readyz >/dev/null"),
            0);
}

// A CRD with no schema to speak of: the API server stores whatever it is given, as an old or
// hand-edited CRD would let through.
constexpr char kLooseCrd[] = R"({
  "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
  "metadata": {"name": "fencepolicies.feedguard.io"},
  "spec": {"group": "feedguard.io", "scope": "Cluster",
    "names": {"kind": "FencePolicy", "listKind": "FencePolicyList", "plural": "fencepolicies",
              "singular": "fencepolicy"},
    "versions": [{"name": "v1alpha1", "served": true, "storage": true,
      "subresources": {"status": {}},
      "schema": {"openAPIV3Schema": {"type": "object",
                                     "x-kubernetes-preserve-unknown-fields": true}}}]}})";

TEST_F(ControllerApiserverTest, MalformedPoliciesUnderALooseCrdNeverCrashTheController) {
  const std::string crd = dir_ + "/loose-crd.json";
  { std::ofstream(crd) << kLooseCrd; }
  InstallCrd(crd);
  ASSERT_TRUE(client_->Create(NodesGvr(), "", Node("fg-n1")).ok());
  StartController();

  struct Bad {
    std::string name;
    std::string spec;   // JSON
    std::string field;  // the Invalid message must name it
  };
  const std::string sel = R"("podSelector": {"matchLabels": {"feedguard.io/role": "trainer"}})";
  const std::vector<Bad> bad = {
      {"bad-key-type",
       R"({"trainers": {"podSelector": {"matchExpressions": [{"key": 7, "operator": "In",
           "values": ["a"]}]}}})",
       "spec.trainers.podSelector.matchExpressions[0].key: expected string"},
      {"bad-operator-type",
       R"({"trainers": {"podSelector": {"matchExpressions": [{"key": "k", "operator": [1]}]}}})",
       "spec.trainers.podSelector.matchExpressions[0].operator: expected string"},
      {"bad-values-type",
       R"({"trainers": {"podSelector": {"matchExpressions": [{"key": "k", "operator": "In",
           "values": [1, 2]}]}}})",
       "spec.trainers.podSelector.matchExpressions[0].values[0]: expected string"},
      {"bad-spec-type", R"("a string")", "spec: expected object"},
      {"bad-trainers-type", R"({"trainers": 5})", "spec.trainers: expected object"},
      {"bad-cores-zero", R"({"trainers": {)" + sel + R"(, "cpu": {"cores": 0}}})",
       "spec.trainers.cpu.cores: must be between 1 and 1024"},
      {"bad-cores-huge", R"({"trainers": {)" + sel + R"(, "cpu": {"cores": 1099511627776}}})",
       "spec.trainers.cpu.cores: must be between 1 and 1024"},
      {"bad-mode", R"({"mode": 1, "trainers": {)" + sel + "}}", "spec.mode: expected string"},
      {"bad-maxcpu", R"({"trainers": {)" + sel + R"(}, "neighbours": {"maxCPU": 4.5}})",
       "spec.neighbours.maxCPU"},
      {"bad-exclude",
       R"({"trainers": {)" + sel + R"(}, "neighbours": {"exclude": {"namespaces": "x"}}})",
       "spec.neighbours.exclude.namespaces: expected list of strings"},
      {"bad-notin-only",
       R"({"trainers": {"podSelector": {"matchExpressions": [{"key": "k", "operator": "NotIn",
           "values": ["a"]}]}}})",
       "spec.trainers.podSelector: needs a positive condition"},
  };
  for (const auto& b : bad) {
    Json obj = {{"apiVersion", "feedguard.io/v1alpha1"},
                {"kind", "FencePolicy"},
                {"metadata", {{"name", b.name}}},
                {"spec", Json::parse(b.spec)}};
    auto r = client_->Create(kFencePolicies, "", obj);
    ASSERT_TRUE(r.ok()) << b.name << ": " << r.status().ToString();
  }
  // A good policy beside them still gets its status.
  Json good = {{"apiVersion", "feedguard.io/v1alpha1"},
               {"kind", "FencePolicy"},
               {"metadata", {{"name", "good"}}},
               {"spec", Json::parse("{\"trainers\": {" + sel + "}}")}};
  ASSERT_TRUE(client_->Create(kFencePolicies, "", good).ok());

  auto invalid_message = [&](const std::string& name) -> std::string {
    auto got = client_->Get(kFencePolicies, "", name);
    if (!got.ok() || !(*got).contains("status")) return "";
    const Json& st = (*got)["status"];
    if (!st.is_object() || !st.contains("conditions")) return "";
    for (const auto& c : st["conditions"]) {
      if (c.value("type", "") == "Invalid" && c.value("status", "") == "True") {
        return c.value("message", "");
      }
    }
    return "";
  };
  for (const auto& b : bad) {
    std::string msg;
    for (int i = 0; i < 300 && msg.empty(); ++i) {
      ASSERT_TRUE(controller_->Alive())
          << "controller died (status " << controller_->exit_status() << ") on " << b.name;
      msg = invalid_message(b.name);
      if (msg.empty()) std::this_thread::sleep_for(100ms);
    }
    EXPECT_NE(msg.find(b.field), std::string::npos)
        << b.name << ": Invalid message \"" << msg << "\" does not name " << b.field;
  }
  // The valid one: a status without Invalid=True.
  std::optional<Json> good_status;
  for (int i = 0; i < 100 && !good_status; ++i) {
    auto got = client_->Get(kFencePolicies, "", "good");
    if (got.ok() && got->contains("status")) good_status = (*got)["status"];
    if (!good_status) std::this_thread::sleep_for(100ms);
  }
  ASSERT_TRUE(good_status.has_value());
  EXPECT_TRUE(invalid_message("good").empty());
  EXPECT_TRUE(controller_->Alive());
  EXPECT_EQ(Shell("curl -fsS -m 2 http://127.0.0.1:" + std::to_string(metrics_port_) +
                  "/healthz >/dev/null"),
            0);
}

// Policy semantics (issue 13 item 4) under the real CRD: a policy whose trainer and neighbour
// sets can never differ, or whose selector can never match, passes the schema but is reported
// Invalid (condition, Ready=False/InvalidSpec shown in the printer columns, an InvalidSpec
// Event), never Ready; requireGPU keeps a trainer-labelled pod without a GPU a neighbour.
TEST_F(ControllerApiserverTest, PoliciesThatCanNeverFenceAreReportedAndRequireGpuHolds) {
  InstallCrd(FG_CRD_FILE);
  ASSERT_TRUE(client_->Create(kNamespaces, "", {{"metadata", {{"name", "ml"}}}}).ok());
  ASSERT_TRUE(client_->Create(NodesGvr(), "", Node("fg-n1")).ok());
  auto policy = [](const std::string& name, const Json& spec) {
    return Json{{"apiVersion", "feedguard.io/v1alpha1"},
                {"kind", "FencePolicy"},
                {"metadata", {{"name", name}}},
                {"spec", spec}};
  };
  struct Case {
    std::string name;
    Json spec;
    std::string message;  // in the Invalid condition and the Event
  };
  const std::string trainers = R"("trainers": {"podSelector": {"matchLabels":
      {"feedguard.io/role": "trainer"}}})";
  const std::vector<Case> never = {
      {"same-sets",
       Json::parse("{" + trainers + R"(, "neighbours": {"podSelector": {"matchExpressions": [
           {"key": "feedguard.io/role", "operator": "In", "values": ["trainer"]}]}}})"),
       "spec.neighbours.podSelector: selects the same pods as spec.trainers.podSelector"},
      {"never-matches", Json::parse(R"({"trainers": {"podSelector": {
           "matchLabels": {"feedguard.io/role": "trainer"},
           "matchExpressions": [{"key": "feedguard.io/role", "operator": "NotIn",
                                 "values": ["trainer"]}]}}})"),
       "spec.trainers.podSelector: can never match a pod"},
      {"neighbours-exist-and-not",
       Json::parse("{" + trainers + R"(, "neighbours": {"podSelector": {"matchExpressions": [
           {"key": "tier", "operator": "Exists"}, {"key": "tier", "operator": "DoesNotExist"}]}}})"),
       "spec.neighbours.podSelector: can never match a pod"},
  };
  for (const auto& c : never) {
    auto r = client_->Create(kFencePolicies, "", policy(c.name, c.spec));
    ASSERT_TRUE(r.ok()) << c.name << " rejected by the CRD: " << r.status().ToString();
  }
  // The working policy: requireGPU, one trainer-labelled pod with a GPU, one without.
  ASSERT_TRUE(client_
                  ->Create(kFencePolicies, "",
                           policy("gpu-trainers", Json::parse(R"({"trainers": {"requireGPU": true,
                               "podSelector": {"matchLabels": {"feedguard.io/role": "trainer"}}}})")))
                  .ok());
  Json with_gpu = Pod("ml", "with-gpu", "fg-n1", "trainer");
  with_gpu["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "1";
  ASSERT_TRUE(client_->Create(PodsGvr(), "ml", with_gpu).ok());
  ASSERT_TRUE(
      client_->Create(PodsGvr(), "ml", Pod("ml", "labelled-no-gpu", "fg-n1", "trainer")).ok());
  StartController();

  auto condition = [&](const std::string& name, const std::string& type) -> Json {
    auto got = client_->Get(kFencePolicies, "", name);
    if (!got.ok() || !got->contains("status") || !(*got)["status"].is_object()) return nullptr;
    for (const auto& c : (*got)["status"].value("conditions", Json::array())) {
      if (c.value("type", "") == type) return c;
    }
    return nullptr;
  };
  for (const auto& c : never) {
    Json invalid;
    for (int i = 0; i < 300; ++i) {
      ASSERT_TRUE(controller_->Alive()) << "controller died on " << c.name;
      invalid = condition(c.name, "Invalid");
      if (invalid.is_object() && invalid.value("status", "") == "True") break;
      std::this_thread::sleep_for(100ms);
    }
    ASSERT_TRUE(invalid.is_object()) << c.name << ": no Invalid condition";
    EXPECT_EQ(invalid.value("status", ""), "True") << c.name;
    EXPECT_NE(invalid.value("message", "").find(c.message), std::string::npos)
        << c.name << ": " << invalid.value("message", "");
    const Json ready = condition(c.name, "Ready");
    ASSERT_TRUE(ready.is_object()) << c.name;
    EXPECT_EQ(ready.value("status", ""), "False") << c.name;
    EXPECT_EQ(ready.value("reason", ""), "InvalidSpec") << c.name;
    // The Event (recorded for the cluster-scoped object, any namespace).
    bool event = false;
    for (int i = 0; i < 100 && !event; ++i) {
      auto evs = client_->List({"", "v1", "events"}, "", {});
      ASSERT_TRUE(evs.ok()) << evs.status().ToString();
      for (const auto& e : evs->items) {
        if (e.contains("involvedObject") && e["involvedObject"].value("name", "") == c.name &&
            e.value("reason", "") == "InvalidSpec" &&
            e.value("message", "").find(c.message) != std::string::npos) {
          event = true;
        }
      }
      if (!event) std::this_thread::sleep_for(100ms);
    }
    EXPECT_TRUE(event) << c.name << ": no InvalidSpec Event naming " << c.message;
  }
  // The printer columns say why (kubectl get: Ready False, Reason InvalidSpec; -o wide: the
  // message).
  const std::string out = dir_ + "/get-wide.txt";
  ASSERT_EQ(Shell("kubectl --kubeconfig " + kubeconfig_ +
                  " get fencepolicy never-matches -o wide > " + out + " 2>&1"),
            0);
  {
    std::ifstream in(out);
    const std::string table((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(table.find("InvalidSpec"), std::string::npos) << table;
    EXPECT_NE(table.find("can never match a pod"), std::string::npos) << table;
  }
  fs::remove(out);

  // requireGPU: the agent of fg-n1 gets a fence whose only trainer is the pod with a GPU; the
  // labelled pod without one is a neighbour. No invalid policy appears in it.
  auto agent = ConnectAgent("fg-n1", 60s);
  ASSERT_TRUE(agent);
  auto& rw = agent->rw;
  v1::ControllerMessage in;
  std::optional<v1::NodeFence> fence;
  while (rw->Read(&in)) {
    const auto& f = in.update().fence();
    agent->Ack(in);
    if (f.trainers_size() > 0) {
      fence = f;
      break;
    }
  }
  agent->ctx.TryCancel();
  ASSERT_TRUE(fence.has_value()) << "no fence with a trainer";
  ASSERT_EQ(fence->trainers_size(), 1) << fence->ShortDebugString();
  EXPECT_EQ(fence->trainers(0).pod().name(), "with-gpu");
  ASSERT_EQ(fence->neighbours_size(), 1) << fence->ShortDebugString();
  EXPECT_EQ(fence->neighbours(0).pod().name(), "labelled-no-gpu");
  ASSERT_EQ(fence->policies_size(), 1);
  EXPECT_EQ(fence->policies(0).name(), "gpu-trainers");
  EXPECT_TRUE(controller_->Alive());
}

// A GPU pod whose GPU comes from a DRA ResourceClaim (resource.k8s.io/v1, as the NVIDIA DRA driver
// allocates it): not a GPU pod while its claim is unallocated, observed once the claim's status
// names a device of the gpu.nvidia.com driver — the real API server validating both objects.
TEST_F(ControllerApiserverTest, ADraClaimedGpuPodIsObservedOnceItsClaimIsAllocated) {
  const Gvr claims{"resource.k8s.io", "v1", "resourceclaims"};
  InstallCrd(FG_CRD_FILE);
  InstallCrd(FG_STARVATION_CRD_FILE, kStarvationReports);
  ASSERT_TRUE(client_->Create(kNamespaces, "", {{"metadata", {{"name", "ml"}}}}).ok());
  ASSERT_TRUE(client_->Create(NodesGvr(), "", Node("fg-n1")).ok());
  Json claim = {
      {"apiVersion", "resource.k8s.io/v1"},
      {"kind", "ResourceClaim"},
      {"metadata", {{"name", "one-gpu"}, {"namespace", "ml"}}},
      {"spec",
       {{"devices",
         {{"requests",
           {{{"name", "gpu"}, {"exactly", {{"deviceClassName", "gpu.nvidia.com"}}}}}}}}}}};
  auto created = client_->Create(claims, "ml", claim);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  Json pod = Pod("ml", "dra-trainer", "fg-n1", "");
  pod["spec"]["resourceClaims"] = {{{"name", "gpu"}, {"resourceClaimName", "one-gpu"}}};
  pod["spec"]["containers"][0]["resources"] = {{"claims", {{{"name", "gpu"}}}}};
  auto p = client_->Create(PodsGvr(), "ml", pod);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  const std::string uid = (*p)["metadata"]["uid"];
  StartController();

  auto agent = ConnectAgent("fg-n1", 120s);
  ASSERT_TRUE(agent);
  v1::ControllerMessage in;
  ASSERT_TRUE(agent->rw->Read(&in));
  EXPECT_EQ(in.update().fence().observe_size(), 0)
      << "unallocated: no GPU yet " << in.update().fence().ShortDebugString();
  ASSERT_TRUE(agent->Ack(in));

  // The scheduler's allocation, as it writes it: one device of NVIDIA's driver.
  Json allocated = *created;
  allocated["status"] = {{"allocation",
                          {{"devices",
                            {{"results",
                              {{{"request", "gpu"},
                                {"driver", "gpu.nvidia.com"},
                                {"pool", "fg-n1"},
                                {"device", "gpu-0"}}}}}}}}};
  auto st = client_->UpdateStatus(claims, "ml", allocated);
  ASSERT_TRUE(st.ok()) << st.status().ToString();

  bool observed = false;
  while (!observed && agent->rw->Read(&in)) {
    if (!in.has_update()) continue;
    const v1::NodeFence& f = in.update().fence();
    observed = f.observe_size() == 1 && f.observe(0).uid() == uid;
    ASSERT_TRUE(agent->Ack(in));
  }
  EXPECT_TRUE(observed) << "the pod never became an observed GPU pod";
  agent->ctx.TryCancel();
}

TEST_F(ControllerApiserverTest, ObservationsBecomeTheStarvationReport) {
  InstallCrd(FG_CRD_FILE);
  InstallCrd(FG_STARVATION_CRD_FILE, kStarvationReports);
  ASSERT_TRUE(client_->Create(kNamespaces, "", {{"metadata", {{"name", "ml"}}}}).ok());
  ASSERT_TRUE(client_->Create(kNamespaces, "", {{"metadata", {{"name", "batch"}}}}).ok());
  ASSERT_TRUE(client_->Create(NodesGvr(), "", Node("fg-n1")).ok());
  Json trainer = Pod("ml", "trainer", "fg-n1", "");
  trainer["spec"]["containers"][0]["resources"] = {{"limits", {{"nvidia.com/gpu", "1"}}},
                                                   {"requests", {{"cpu", "2"}}}};
  auto t = client_->Create(PodsGvr(), "ml", trainer);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto etl = client_->Create(PodsGvr(), "batch", Pod("batch", "etl", "fg-n1", ""));
  ASSERT_TRUE(etl.ok()) << etl.status().ToString();
  const std::string trainer_uid = (*t)["metadata"]["uid"];
  const std::string etl_uid = (*etl)["metadata"]["uid"];
  StartController();

  auto agent = ConnectAgent("fg-n1", 120s);
  ASSERT_TRUE(agent);
  auto& rw = agent->rw;
  v1::ControllerMessage in;
  ASSERT_TRUE(rw->Read(&in));
  const v1::NodeFence& fence = in.update().fence();
  EXPECT_EQ(fence.trainers_size() + fence.neighbours_size(), 0) << "no policy: nothing fenced";
  ASSERT_EQ(fence.observe_size(), 1) << fence.ShortDebugString();
  EXPECT_EQ(fence.observe(0).uid(), trainer_uid);
  EXPECT_EQ(fence.observe(0).cpu_request_milli(), 2000);
  ASSERT_TRUE(agent->Ack(in));

  // The agent's report: the trainer waited 20 % of 10 min, its GPU idle 40 %, etl and the node
  // on its CPUs meanwhile.
  v1::AgentMessage report;
  auto* r = report.mutable_report();
  r->set_applied_version(fence.version());
  auto* o = r->add_observations();
  o->set_uid(trainer_uid);
  for (uint32_t s : {60u, 600u, 3600u}) {
    auto* w = o->add_windows();
    w->set_window_seconds(s);
    w->set_covered_seconds(s);
    w->set_wait_seconds(0.2 * s);
    w->set_wait_source(v1::ObservationWindow::SCHEDSTAT);
    w->set_cpu_seconds(1.5 * s);
    w->set_gpu_sampled(true);
    w->set_gpu_busy_fraction(0.6);
    w->set_gpu_lost_seconds(0.08 * s);
    w->set_gpu_lost_min_seconds(0);
    w->set_gpu_lost_max_seconds(0.2 * s);
    auto* c = w->add_contenders();
    c->set_pod_uid(etl_uid);
    c->set_cpu_seconds(0.15 * s);
    w->add_contenders()->set_cpu_seconds(0.01 * s);  // the node itself
  }
  ASSERT_TRUE(rw->Write(report));

  Json status;
  for (int i = 0; i < 300; ++i) {
    auto got = client_->Get(kStarvationReports, "", "cluster");
    if (got.ok() && got->contains("status") && !(*got)["status"]["pods"].empty()) {
      status = (*got)["status"];
      break;
    }
    std::this_thread::sleep_for(100ms);
  }
  ASSERT_FALSE(status.is_null()) << "no StarvationReport/cluster with pods within 30 s";
  EXPECT_EQ(status["cluster"]["nodesReporting"], 1);
  EXPECT_EQ(status["cluster"]["gpuPods"], 1);
  EXPECT_EQ(status["cluster"]["starvingPods"], 1);
  EXPECT_DOUBLE_EQ(status["cluster"]["gpuLostSeconds10m"].get<double>(), 48);
  const Json& pod = status["pods"][0];
  EXPECT_EQ(pod["namespace"], "ml");
  EXPECT_EQ(pod["name"], "trainer");
  EXPECT_EQ(pod["node"], "fg-n1");
  EXPECT_EQ(pod["cpuRequestMilli"], 2000);
  ASSERT_EQ(pod["windows"].size(), 3u);
  const Json& w10 = pod["windows"][1];
  EXPECT_EQ(w10["waitSource"], "schedstat");
  EXPECT_DOUBLE_EQ(w10["waitFraction"].get<double>(), 0.2);
  ASSERT_EQ(w10["contenders"].size(), 2u);
  EXPECT_EQ(w10["contenders"][0]["namespace"], "batch");
  EXPECT_EQ(w10["contenders"][0]["name"], "etl");
  EXPECT_EQ(w10["contenders"][1]["kind"], "Node");
  EXPECT_EQ(status["namespaces"][0]["name"], "ml");
  EXPECT_FALSE(status["updated"].get<std::string>().empty());

  // The same report again (agents send one every 10 s): the object is not written again.
  auto before = client_->Get(kStarvationReports, "", "cluster");
  ASSERT_TRUE(before.ok());
  ASSERT_TRUE(rw->Write(report));
  std::this_thread::sleep_for(3s);  // three writer passes
  auto after = client_->Get(kStarvationReports, "", "cluster");
  ASSERT_TRUE(after.ok());
  EXPECT_EQ((*after)["metadata"]["resourceVersion"], (*before)["metadata"]["resourceVersion"]);
  agent->ctx.TryCancel();
  EXPECT_TRUE(controller_->Alive());
}

}  // namespace
}  // namespace feedguard::kube
