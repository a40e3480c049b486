#include "plugin/cli.h"

#include <gtest/gtest.h>

#include <sstream>

#include "controller/kube/fake_transport.h"
#include "plugin/report_view.h"
#include "plugin/testdata/fixtures.h"

namespace feedguard::plugin {
namespace {

using Json = nlohmann::json;
using kube::FakeReply;
using kube::FakeTransport;
using kube::HttpRequest;
using kube::HttpResponse;
using testing::PodFixture;
using testing::ReportFixture;

constexpr char kReportPath[] = "/apis/feedguard.io/v1alpha1/starvationreports/cluster";

FakeReply StatusReply(long code, const std::string& reason, const std::string& message) {
  return {HttpResponse{code, Json({{"kind", "Status"},
                                   {"apiVersion", "v1"},
                                   {"status", "Failure"},
                                   {"reason", reason},
                                   {"message", message},
                                   {"code", code}})
                                 .dump()}};
}

// An API server holding the fixtures: the report and the pods of pods.json.
FakeReply FixtureServer(const HttpRequest& r) {
  if (r.method != "GET") return StatusReply(405, "MethodNotAllowed", "read only");
  if (r.path == kReportPath) return {HttpResponse{200, ReportFixture().dump()}};
  const std::string prefix = "/api/v1/namespaces/";
  if (r.path.rfind(prefix, 0) == 0) {
    const std::string rest = r.path.substr(prefix.size());
    const size_t slash = rest.find("/pods/");
    if (slash != std::string::npos) {
      const std::string ns = rest.substr(0, slash);
      const std::string name = rest.substr(slash + 6);
      const Json pod = PodFixture(ns, name);
      if (!pod.is_null()) return {HttpResponse{200, pod.dump()}};
      return StatusReply(404, "NotFound", "pods \"" + name + "\" not found");
    }
  }
  return {HttpResponse{404, "404 page not found"}};
}

struct Outcome {
  int code = -1;
  std::string out;
  std::string err;
};

class PluginCliTest : public ::testing::Test {
 protected:
  Outcome Exec(std::vector<std::string> args) {
    PluginEnv env;
    env.connect = [this](const ConnectFlags& f) -> Result<Connection> {
      connects_++;
      flags_ = f;
      if (!connect_error_.ok()) return connect_error_;
      Connection c;
      c.client = std::make_shared<kube::Client>(transport_);
      c.server = "https://fake:6443";
      c.default_namespace = "ml";
      return c;
    };
    env.now = [] { return *ParseRfc3339("2026-11-28T10:02:15Z"); };
    std::ostringstream out, err;
    Outcome r;
    r.code = RunPlugin(args, env, out, err);
    r.out = out.str();
    r.err = err.str();
    return r;
  }

  std::vector<std::string> Paths() const {
    std::vector<std::string> out;
    for (const auto& r : transport_->requests()) out.push_back(r.path);
    return out;
  }

  FakeTransport::Handler handler_ = FixtureServer;
  std::shared_ptr<FakeTransport> transport_ =
      std::make_shared<FakeTransport>([this](const HttpRequest& r) { return handler_(r); });
  Status connect_error_;
  ConnectFlags flags_;
  int connects_ = 0;
};

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST_F(PluginCliTest, TopInTheContextsNamespace) {
  const Outcome r = Exec({"top"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_TRUE(Has(r.out, "StarvationReport/cluster (updated 2m15s ago): 2 nodes reporting"))
      << r.out;
  const size_t a = r.out.find("\nml          trainer-a");
  const size_t b = r.out.find("\nml          trainer-b");
  ASSERT_NE(a, std::string::npos) << r.out;
  ASSERT_NE(b, std::string::npos) << r.out;
  EXPECT_LT(a, b);
  EXPECT_FALSE(Has(r.out, "trainer-c"));
  EXPECT_TRUE(Has(r.out, "1 starving pod in other namespaces (-A shows every namespace)"));
  EXPECT_EQ(Paths(), std::vector<std::string>{kReportPath});
  EXPECT_EQ(flags_.kubeconfig, "");
  EXPECT_EQ(flags_.context, "");
}

TEST_F(PluginCliTest, TopFlagsBeforeOrAfterTheCommand) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"-n", "vision", "top"}, {"top", "-n", "vision"}, {"top", "--namespace=vision"}}) {
    const Outcome r = Exec(args);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_TRUE(Has(r.out, "vision      trainer-c")) << r.out;
    EXPECT_FALSE(Has(r.out, "trainer-a")) << r.out;
  }
  const Outcome r =
      Exec({"--kubeconfig", "/k/config", "top", "--context=prod", "-A", "--limit", "2"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(flags_.kubeconfig, "/k/config");
  EXPECT_EQ(flags_.context, "prod");
  EXPECT_TRUE(Has(r.out, "trainer-c")) << r.out;
  EXPECT_TRUE(Has(r.out, "trainer-a")) << r.out;
  EXPECT_FALSE(Has(r.out, "trainer-b")) << r.out;
  EXPECT_TRUE(Has(r.out, "1 more starving pod not shown (--limit 0 shows all)")) << r.out;
}

TEST_F(PluginCliTest, TopJson) {
  const Outcome r = Exec({"top", "-A", "-o", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const Json j = Json::parse(r.out);
  ASSERT_EQ(j["pods"].size(), 3u);
  EXPECT_EQ(j["pods"][0]["name"], "trainer-c");  // no GPU figure: ranked by its 90 s wait
  EXPECT_EQ(j["pods"][1]["name"], "trainer-a");
  EXPECT_EQ(j["pods"][2]["name"], "trainer-b");
  EXPECT_EQ(j["ageSeconds"], 135);
}

TEST_F(PluginCliTest, NoReport) {
  handler_ = [](const HttpRequest&) {
    return StatusReply(404, "NotFound", "starvationreports.feedguard.io \"cluster\" not found");
  };
  for (const char* cmd : {"top", "explain"}) {
    std::vector<std::string> args = {cmd};
    if (std::string(cmd) == "explain") args.push_back("trainer-a");
    const Outcome r = Exec(args);
    EXPECT_EQ(r.code, 1);
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(r.err, std::string("kubectl-feedguard: ") + kNoReportMessage + "\n");
  }
  // The CRD itself is not installed: the API server answers 404 without a Status.
  handler_ = [](const HttpRequest&) { return FakeReply{HttpResponse{404, "404 page not found"}}; };
  const Outcome r = Exec({"top"});
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(Has(r.err, kNoReportMessage)) << r.err;
  EXPECT_TRUE(Has(r.err, "the CRD crds/starvationreport.yaml is not installed")) << r.err;
}

TEST_F(PluginCliTest, ApiErrorsSayWhatIsMissing) {
  handler_ = [](const HttpRequest&) {
    return StatusReply(403, "Forbidden",
                       "starvationreports.feedguard.io \"cluster\" is forbidden: User \"dev\" "
                       "cannot get resource \"starvationreports\" in API group \"feedguard.io\" "
                       "at the cluster scope");
  };
  Outcome r = Exec({"top"});
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(Has(r.err,
                  "kubectl-feedguard: forbidden: you need RBAC permission to get "
                  "starvationreports.feedguard.io cluster-wide (GET " +
                      std::string(kReportPath) + ": starvationreports.feedguard.io"))
      << r.err;

  handler_ = [](const HttpRequest&) { return StatusReply(401, "Unauthorized", "Unauthorized"); };
  r = Exec({"top"});
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(Has(r.err,
                  "the API server at https://fake:6443 did not accept your credentials "
                  "(401 Unauthorized)"))
      << r.err;

  handler_ = [](const HttpRequest& req) {
    return FakeReply{Status(StatusCode::kUnavailable, req.path + ": Couldn't connect to server")};
  };
  r = Exec({"top"});
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(Has(r.err, "cannot reach the API server at https://fake:6443: ")) << r.err;
  EXPECT_TRUE(Has(r.err, "Couldn't connect to server")) << r.err;

  handler_ = [](const HttpRequest&) { return StatusReply(500, "InternalError", "etcd down"); };
  r = Exec({"top"});
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(Has(r.err, "etcd down")) << r.err;

  // explain: reading the pod is refused.
  handler_ = [](const HttpRequest& req) {
    if (req.path == kReportPath) return FixtureServer(req);
    return StatusReply(403, "Forbidden", "pods \"trainer-a\" is forbidden");
  };
  r = Exec({"explain", "trainer-a"});
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(Has(r.err, "forbidden: you need RBAC permission to get pods in namespace ml"))
      << r.err;

  connect_error_ = NotFound("cannot load the kubeconfig: context 'x' not found");
  r = Exec({"top"});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, "kubectl-feedguard: cannot load the kubeconfig: context 'x' not found\n");
}

TEST_F(PluginCliTest, BadFlagsAreRefusedBeforeAnythingIsDialled) {
  for (const auto& args : std::vector<std::vector<std::string>>{{},
                                                                {"top", "-o", "yaml"},
                                                                {"top", "--limit", "-1"},
                                                                {"top", "--limit", "many"},
                                                                {"explain"},
                                                                {"explain", "-o", "table", "x"},
                                                                {"top", "--no-such-flag"},
                                                                {"frobnicate"}}) {
    const Outcome r = Exec(args);
    EXPECT_EQ(r.code, 2) << ::testing::PrintToString(args) << r.err;
    EXPECT_FALSE(r.err.empty()) << ::testing::PrintToString(args);
  }
  EXPECT_EQ(connects_, 0);
  const Outcome help = Exec({"--help"});
  EXPECT_EQ(help.code, 0);
  EXPECT_TRUE(Has(help.out, "--kubeconfig")) << help.out;
  EXPECT_TRUE(Has(help.out, "--context")) << help.out;
  EXPECT_TRUE(Has(help.out, "-A,--all-namespaces")) << help.out;
  EXPECT_TRUE(Has(help.out, "get starvationreports.feedguard.io")) << help.out;
  const Outcome explain_help = Exec({"explain", "--help"});
  EXPECT_EQ(explain_help.code, 0);
  EXPECT_TRUE(Has(explain_help.out, "yaml")) << explain_help.out;
  EXPECT_EQ(connects_, 0);
}

TEST_F(PluginCliTest, ExplainAPodOfTheReport) {
  const Outcome r = Exec({"explain", "trainer-a"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(Has(r.out, "# GPU pod ml/trainer-a on node gpu-node-1")) << r.out;
  EXPECT_TRUE(Has(r.out, "\napiVersion: feedguard.io/v1alpha1\nkind: FencePolicy\n")) << r.out;
  EXPECT_TRUE(Has(r.out, "      matchLabels:\n        tier: batch\n")) << r.out;
  EXPECT_TRUE(Has(r.out,
                  "Contender pods that no longer exist (not considered): "
                  "batch/spin-gone."))
      << r.out;
  // The pod, then each contender pod, once.
  EXPECT_EQ(Paths(), (std::vector<std::string>{kReportPath, "/api/v1/namespaces/ml/pods/trainer-a",
                                               "/api/v1/namespaces/batch/pods/spin-a",
                                               "/api/v1/namespaces/batch/pods/spin-c",
                                               "/api/v1/namespaces/etl/pods/loader-0",
                                               "/api/v1/namespaces/batch/pods/spin-gone"}));

  const Outcome j = Exec({"explain", "trainer-a", "-o", "json"});
  ASSERT_EQ(j.code, 0) << j.err;
  const Json doc = Json::parse(j.out);
  EXPECT_EQ(doc["pod"]["name"], "trainer-a");
  EXPECT_EQ(doc["suggestedPolicy"]["metadata"]["name"], "fence-trainer-a");
  EXPECT_EQ(doc["suggestedPolicy"]["spec"]["mode"], "DryRun");
}

TEST_F(PluginCliTest, ExplainFindsThePodInAnyNamespace) {
  const Outcome r = Exec({"explain", "-A", "trainer-c"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(Has(r.out, "# GPU pod vision/trainer-c")) << r.out;
  EXPECT_TRUE(Has(r.out, "cannot fence host processes")) << r.out;
  const Outcome none = Exec({"explain", "-A", "trainer-z"});
  EXPECT_EQ(none.code, 0);
  EXPECT_TRUE(Has(none.out, "no pod named trainer-z in the StarvationReport in any namespace"));
}

TEST_F(PluginCliTest, ExplainAPodOutsideTheReport) {
  Outcome r = Exec({"explain", "trainer-e"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(Has(r.out,
                  "pod ml/trainer-e is not in the StarvationReport: it did not starve "
                  "noticeably"))
      << r.out;
  r = Exec({"explain", "notebook", "-o", "json"});
  EXPECT_EQ(r.code, 0) << r.err;
  const Json j = Json::parse(r.out);
  EXPECT_TRUE(j["pod"].is_null());
  EXPECT_EQ(j["absence"], "NotAGPUPod");
  r = Exec({"explain", "ghost"});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, "kubectl-feedguard: pod ml/ghost not found\n");
}

// The pod is in the report but has been deleted since: its windows, and no policy.
TEST_F(PluginCliTest, ExplainAPodThatIsGone) {
  handler_ = [](const HttpRequest& req) {
    if (req.path == kReportPath) return FixtureServer(req);
    return StatusReply(404, "NotFound", "gone");
  };
  const Outcome r = Exec({"explain", "-n", "ml", "trainer-b"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(Has(r.out, "# The pod no longer exists")) << r.out;
  EXPECT_FALSE(Has(r.out, "apiVersion")) << r.out;
  EXPECT_EQ(transport_->requests().size(), 2u);  // no contender is read
}

}  // namespace
}  // namespace feedguard::plugin
