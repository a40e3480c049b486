// Node-bound agent identity (issue 13, item 1) against a real kube-apiserver's TokenReview, on a
// private test bed: Nodes, agent Pods bound to them (spec.nodeName, no kubelet), ServiceAccounts,
// and tokens from the real TokenRequest API (pod-bound, audience "feedguard"), so the
// `authentication.kubernetes.io/node-name` extra is the API server's own.
//
// 1. TokenReviewAuthenticator alone: the right token passes only for its node; a token of
//    another node, another ServiceAccount, another audience, a deleted pod, or an expired one
//    (the API server's own claims re-signed with the test bed's service-account key and an `exp`
//    in the past: TokenRequest will not mint a token shorter than 10 minutes) is refused.
// 2. feedguard-controller (the binary, mTLS, default --agent-identity token): the impostor
//    sequence with a valid client certificate is refused with PERMISSION_DENIED; the real
//    agent's token gets its node's fence.
//
// These FAIL, never skip, when the test bed cannot start: they run only under `apiserver`.
#include <grpcpp/grpcpp.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "controller/auth/agent_auth.h"
#include "controller/auth/base64url_testing.h"
#include "controller/kube/client.h"
#include "controller/kube/curl_transport.h"
#include "controller/kube/kubeconfig.h"
#include "feedguard/v1/nodefence.grpc.pb.h"
#include "tests/integration/grpc/test_pki.h"
#include "tests/integration/kube/process_util.h"

namespace feedguard::kube {
namespace {

namespace fs = std::filesystem;
namespace v1 = feedguard::v1;
using controller::TokenReviewAuthenticator;
using controller::TokenReviewOptions;
using namespace std::chrono_literals;
using feedguard::testing::B64UrlEncode;
using feedguard::testing::FreePort;
using feedguard::testing::Shell;

constexpr char kNs[] = "feedguard-system";
constexpr char kAgentSa[] = "feedguard-agent";
constexpr char kOtherSa[] = "not-the-agent";
const Gvr kFencePolicies{"feedguard.io", "v1alpha1", "fencepolicies"};
const Gvr kServiceAccounts{"", "v1", "serviceaccounts"};

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string B64UrlDecode(const std::string& in) {
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    int v = c >= 'A' && c <= 'Z'   ? c - 'A'
            : c >= 'a' && c <= 'z' ? c - 'a' + 26
            : c >= '0' && c <= '9' ? c - '0' + 52
            : c == '-'             ? 62
            : c == '_'             ? 63
                                   : -1;
    if (v < 0) break;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xffu));
    }
  }
  return out;
}

class ControllerProcess {
 public:
  ControllerProcess(const std::vector<std::string>& args, const std::string& log) {
    pid_ = ::fork();
    if (pid_ == 0) {
      FILE* f = std::freopen(log.c_str(), "w", stdout);
      (void)f;
      ::dup2(::fileno(stdout), 2);
      std::vector<char*> argv;
      const char* env = std::getenv("FG_CONTROLLER_BIN");
      std::string bin = env && *env ? env : FG_CONTROLLER_BIN;
      argv.push_back(bin.data());
      std::vector<std::string> copy = args;
      for (auto& a : copy) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(bin.c_str(), argv.data());
      std::_Exit(127);
    }
  }
  ~ControllerProcess() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    for (int i = 0; i < 100; ++i) {
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) return;
      std::this_thread::sleep_for(50ms);
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  ControllerProcess(const ControllerProcess&) = delete;
  ControllerProcess& operator=(const ControllerProcess&) = delete;
  bool Alive() { return pid_ > 0 && ::waitpid(pid_, nullptr, WNOHANG) == 0; }

 private:
  pid_t pid_ = -1;
};

// One private test bed for the whole suite (it takes seconds to start).
class AgentIdentityApiserverTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(std::string(FG_PRIVATE_TESTBED_BASE) + "-identity");
    Script("down");
    up_ = Script("up") == 0;
    if (!up_) return;
    auto cfg = LoadKubeconfig(*dir_ + "/kubeconfig");
    if (!cfg.ok()) return;
    auto transport = CurlTransport::Create(*cfg, std::make_shared<RealTimeSource>());
    if (!transport.ok()) return;
    client_ = new ClientPtr(std::make_shared<Client>(*transport));
  }
  static void TearDownTestSuite() {
    if (up_) Script("down");
    std::error_code ec;
    fs::remove(*dir_ + "/controller.log", ec);
    fs::remove(*dir_, ec);
    delete client_;
    client_ = nullptr;
    delete dir_;
  }
  static int Script(const std::string& verb) {
    return Shell(std::string(FG_TESTBED_SH) + " " + verb + " " + *dir_ + " >/dev/null 2>&1");
  }
  void SetUp() override {
    ASSERT_TRUE(up_) << "testbed.sh up " << *dir_ << " failed";
    ASSERT_NE(client_, nullptr);
    if (!objects_made_) {
      MakeObjects();
      objects_made_ = true;
    }
  }
  Client& C() { return **client_; }

  static void Ok(const Result<Json>& r, const std::string& what) {
    ASSERT_TRUE(r.ok() || r.status().code() == StatusCode::kAlreadyExists)
        << what << ": " << r.status().ToString();
  }
  void MakeObjects() {
    Ok(C().Create({"", "v1", "namespaces"}, "", {{"metadata", {{"name", kNs}}}}), "namespace");
    Ok(C().Create({"", "v1", "namespaces"}, "", {{"metadata", {{"name", "ml"}}}}), "namespace");
    for (const char* sa : {kAgentSa, kOtherSa}) {
      Ok(C().Create(kServiceAccounts, kNs, {{"metadata", {{"name", sa}}}}), sa);
    }
    for (const char* node : {"node-a", "node-b"}) {
      Ok(C().Create(NodesGvr(), "", {{"metadata", {{"name", node}}}}), node);
    }
    Ok(C().Create(PodsGvr(), kNs, Pod("agent-a", "node-a", kAgentSa)), "agent-a");
    Ok(C().Create(PodsGvr(), kNs, Pod("agent-b", "node-b", kAgentSa)), "agent-b");
    Ok(C().Create(PodsGvr(), kNs, Pod("impostor-a", "node-a", kOtherSa)), "impostor-a");
  }
  static Json Pod(const std::string& name, const std::string& node, const std::string& sa) {
    return {{"apiVersion", "v1"},
            {"kind", "Pod"},
            {"metadata", {{"name", name}}},
            {"spec",
             {{"nodeName", node},
              {"serviceAccountName", sa},
              {"containers", {{{"name", "main"}, {"image", "registry.invalid/none"}}}}}}};
  }
  // A token from the TokenRequest API, bound to pod `pod` (empty: not bound).
  std::string Token(const std::string& sa, const std::string& pod,
                    const std::string& audience = "feedguard") {
    Json spec = {{"expirationSeconds", 600}};
    if (!audience.empty()) spec["audiences"] = {audience};
    if (!pod.empty()) {
      auto p = C().Get(PodsGvr(), kNs, pod);
      EXPECT_TRUE(p.ok()) << p.status().ToString();
      if (!p.ok()) return "";
      spec["boundObjectRef"] = {
          {"kind", "Pod"}, {"apiVersion", "v1"}, {"name", pod}, {"uid", UidOf(*p)}};
    }
    HttpRequest req;
    req.method = "POST";
    req.path = ObjectPath(kServiceAccounts, kNs, sa, "token");
    req.content_type = "application/json";
    req.body =
        Json{{"apiVersion", "authentication.k8s.io/v1"}, {"kind", "TokenRequest"}, {"spec", spec}}
            .dump();
    auto resp = C().transport()->Do(req);
    EXPECT_TRUE(resp.ok()) << resp.status().ToString();
    if (!resp.ok()) return "";
    EXPECT_EQ(resp->status, 201) << resp->body;
    Json j = Json::parse(resp->body, nullptr, false);
    if (!j.is_object() || !j.contains("status")) return "";
    return j["status"].value("token", "");
  }
  // The same token's claims, edited, re-signed with the test bed's service-account key (RS256),
  // exactly as the API server signs its own.
  std::string Resign(const std::string& token, const std::function<void(Json&)>& edit) {
    const size_t a = token.find('.'), b = token.find('.', a + 1);
    Json claims = Json::parse(B64UrlDecode(token.substr(a + 1, b - a - 1)), nullptr, false);
    EXPECT_TRUE(claims.is_object());
    edit(claims);
    const std::string signing_input = token.substr(0, a) + "." + B64UrlEncode(claims.dump());
    const std::string in = *dir_ + "/jwt.in", sig = *dir_ + "/jwt.sig";
    { std::ofstream(in, std::ios::binary) << signing_input; }
    EXPECT_EQ(Shell("openssl dgst -sha256 -sign " + *dir_ + "/pki/sa.key -out " + sig + " " + in),
              0);
    const std::string out = signing_input + "." + B64UrlEncode(Slurp(sig));
    fs::remove(in);
    fs::remove(sig);
    return out;
  }
  std::shared_ptr<TokenReviewAuthenticator> Authenticator() {
    TokenReviewOptions o;
    o.audience = "feedguard";
    o.service_account_namespace = kNs;
    o.service_account_name = kAgentSa;
    auto a = TokenReviewAuthenticator::Create(*client_, o);
    EXPECT_TRUE(a.ok()) << a.status().ToString();
    return a.ok() ? *a : nullptr;
  }

  static std::string* dir_;
  static bool up_;
  static ClientPtr* client_;
  static bool objects_made_;
};
std::string* AgentIdentityApiserverTest::dir_ = nullptr;
bool AgentIdentityApiserverTest::up_ = false;
ClientPtr* AgentIdentityApiserverTest::client_ = nullptr;
bool AgentIdentityApiserverTest::objects_made_ = false;

TEST_F(AgentIdentityApiserverTest, TokenReviewAcceptsOnlyTheAgentOfTheHelloNode) {
  const std::string token_a = Token(kAgentSa, "agent-a");
  ASSERT_FALSE(token_a.empty());
  // The API server's own view: the node-name extra is there (Kubernetes >= 1.30).
  auto raw = C().ReviewToken(token_a, {"feedguard"});
  ASSERT_TRUE(raw.ok()) << raw.status().ToString();
  ASSERT_EQ(raw->value("authenticated", false), true) << raw->dump();
  EXPECT_EQ((*raw)["user"]["extra"]["authentication.kubernetes.io/node-name"], Json({"node-a"}))
      << raw->dump();

  auto auth = Authenticator();
  ASSERT_TRUE(auth);
  Status s = auth->Authenticate(token_a, "node-a");
  EXPECT_TRUE(s.ok()) << s.ToString();
  // Another node's hello with A's token.
  s = auth->Authenticate(token_a, "node-b");
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(s.message().find("bound to node node-a, not node-b"), std::string::npos)
      << s.ToString();
  // Another ServiceAccount, on the right node.
  s = auth->Authenticate(Token(kOtherSa, "impostor-a"), "node-a");
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(s.message().find("not-the-agent"), std::string::npos) << s.ToString();
  // Another audience (the API server's default one), and none.
  for (const std::string& aud : {std::string("someone-else"), std::string("")}) {
    s = auth->Authenticate(Token(kAgentSa, "agent-a", aud), "node-a");
    EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << aud;
    EXPECT_NE(s.message().find("not authenticated"), std::string::npos) << s.ToString();
  }
  // A token not bound to a pod carries no node.
  s = auth->Authenticate(Token(kAgentSa, ""), "node-a");
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(s.message().find("names no node"), std::string::npos) << s.ToString();
  // Garbage.
  EXPECT_EQ(auth->Authenticate("not.a.token", "node-a").code(), StatusCode::kPermissionDenied);
}

TEST_F(AgentIdentityApiserverTest, ExpiredAndRevokedTokensAreRefused) {
  const std::string token_a = Token(kAgentSa, "agent-a");
  ASSERT_FALSE(token_a.empty());
  // Control: the same claims re-signed unchanged are accepted — the re-signing is sound.
  const std::string same = Resign(token_a, [](Json&) {});
  EXPECT_TRUE(Authenticator()->Authenticate(same, "node-a").ok());
  // Expired an hour ago.
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  const std::string expired = Resign(token_a, [now](Json& c) {
    c["iat"] = now - 7200;
    c["nbf"] = now - 7200;
    c["exp"] = now - 3600;
  });
  Status s = Authenticator()->Authenticate(expired, "node-a");
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(s.message().find("not authenticated"), std::string::npos) << s.ToString();
  // The pod it was bound to is deleted: the API server no longer accepts the token.
  Ok(C().Create(PodsGvr(), kNs, Pod("agent-gone", "node-a", kAgentSa)), "agent-gone");
  const std::string token_gone = Token(kAgentSa, "agent-gone");
  EXPECT_TRUE(Authenticator()->Authenticate(token_gone, "node-a").ok());
  // Removed at once (no kubelet here to finish a graceful deletion).
  ASSERT_EQ(Shell("kubectl --kubeconfig " + *dir_ + "/kubeconfig -n " + kNs +
                  " delete pod agent-gone --grace-period=0 --force >/dev/null 2>&1"),
            0);
  bool refused = false;
  // kube-apiserver caches successful token authentications for 10 s: wait that out.
  for (int i = 0; i < 300 && !refused; ++i) {
    refused =
        Authenticator()->Authenticate(token_gone, "node-a").code() == StatusCode::kPermissionDenied;
    if (!refused) std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(refused) << "token of a deleted pod still accepted";
}

// A stream as an agent speaks it: mTLS with a client certificate from the agents' CA, the token
// as call metadata, a hello. Returns the final status and the first fence, if any.
struct Attempt {
  grpc::Status status;
  std::optional<v1::NodeFence> fence;
};

TEST_F(AgentIdentityApiserverTest, ControllerRefusesTheImpostorSequenceAndServesTheAgent) {
  // Cluster: the CRD, a policy, a trainer and a neighbour on node-a.
  ASSERT_EQ(Shell("kubectl --kubeconfig " + *dir_ + "/kubeconfig apply -f " + FG_CRD_FILE +
                  " >/dev/null && kubectl --kubeconfig " + *dir_ +
                  "/kubeconfig wait --for=condition=Established --timeout=60s "
                  "crd/fencepolicies.feedguard.io >/dev/null"),
            0);
  for (int i = 0; i < 100 && !C().List(kFencePolicies, "", {}).ok(); ++i) {
    std::this_thread::sleep_for(100ms);
  }
  const Json sel = {{"matchLabels", {{"feedguard.io/role", "trainer"}}}};
  Ok(C().Create(kFencePolicies, "",
                {{"apiVersion", "feedguard.io/v1alpha1"},
                 {"kind", "FencePolicy"},
                 {"metadata", {{"name", "identity-test"}}},
                 {"spec", {{"trainers", {{"podSelector", sel}}}}}}),
     "policy");
  Json trainer = Pod("trainer", "node-a", "default");
  trainer["metadata"]["labels"]["feedguard.io/role"] = "trainer";
  trainer["spec"].erase("serviceAccountName");
  Json spinner = Pod("spinner", "node-a", "default");
  spinner["spec"].erase("serviceAccountName");
  Ok(C().Create(PodsGvr(), "ml", trainer), "trainer");
  Ok(C().Create(PodsGvr(), "ml", spinner), "spinner");

  // PKI: the controller's serving certificate, one client certificate shared by every agent
  // (CN names no node: the token does).
  auto pki = testing::TestPki::Create();
  ASSERT_TRUE(pki.ok()) << pki.status().ToString();
  ASSERT_TRUE((*pki)->MakeCa("ca").ok());
  ASSERT_TRUE(
      (*pki)->MakeLeaf("ca", "server", "feedguard-controller", {"IP:127.0.0.1"}, true).ok());
  ASSERT_TRUE((*pki)->MakeLeaf("ca", "agent", "feedguard-agent", {}, false).ok());

  const int grpc_port = FreePort(), metrics_port = FreePort();
  ASSERT_GT(grpc_port, 0);
  ASSERT_GT(metrics_port, 0);
  ControllerProcess controller(
      {"--kubeconfig", *dir_ + "/kubeconfig", "--listen-grpc",
       "127.0.0.1:" + std::to_string(grpc_port), "--metrics-addr",
       "127.0.0.1:" + std::to_string(metrics_port), "--tls-cert", (*pki)->Path("server.crt"),
       "--tls-key", (*pki)->Path("server.key"), "--tls-client-ca", (*pki)->Path("ca.crt"),
       "--agent-namespace", kNs, "--status-interval-ms", "200"},
      *dir_ + "/controller.log");

  auto provider = std::make_shared<grpc::experimental::StaticDataCertificateProvider>(
      Slurp((*pki)->Path("ca.crt")),
      std::vector<grpc::experimental::IdentityKeyCertPair>{
          {Slurp((*pki)->Path("agent.key")), Slurp((*pki)->Path("agent.crt"))}});
  grpc::experimental::TlsChannelCredentialsOptions tls;
  tls.set_certificate_provider(provider);
  tls.watch_root_certs();
  tls.watch_identity_key_cert_pairs();
  auto creds = grpc::experimental::TlsCredentials(tls);
  ASSERT_TRUE(creds);
  auto dial = [&](const std::string& token, const std::string& node) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    auto stub = v1::FenceDistribution::NewStub(
        grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(grpc_port), creds, args));
    grpc::ClientContext ctx;
    ctx.set_wait_for_ready(true);
    ctx.set_deadline(std::chrono::system_clock::now() + 30s);
    if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
    auto rw = stub->Stream(&ctx);
    v1::AgentMessage hello;
    hello.mutable_hello()->set_node_name(node);
    rw->Write(hello);
    Attempt out;
    v1::ControllerMessage in;
    if (rw->Read(&in)) {
      out.fence = in.update().fence();
      v1::AgentMessage ack;
      ack.mutable_ack()->set_version(in.update().fence().version());
      ack.mutable_ack()->set_nonce(in.update().nonce());
      rw->Write(ack);
      rw->WritesDone();
      ctx.TryCancel();
    }
    while (rw->Read(&in)) {
    }
    out.status = rw->Finish();
    return out;
  };

  const std::string token_a = Token(kAgentSa, "agent-a");
  const std::string token_b = Token(kAgentSa, "agent-b");
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  struct Impostor {
    std::string what;
    std::string token;
  };
  const std::vector<Impostor> impostors = {
      {"token of a pod on another node", token_b},
      {"expired token", Resign(token_a,
                               [now](Json& c) {
                                 c["iat"] = now - 7200;
                                 c["nbf"] = now - 7200;
                                 c["exp"] = now - 3600;
                               })},
      {"token of another audience", Token(kAgentSa, "agent-a", "someone-else")},
      {"token of another ServiceAccount", Token(kOtherSa, "impostor-a")},
      {"no token", ""},
  };
  // The first dial waits for the controller to listen; a refusal must be for the token.
  for (const auto& imp : impostors) {
    Attempt a = dial(imp.token, "node-a");
    EXPECT_EQ(a.status.error_code(), grpc::StatusCode::PERMISSION_DENIED)
        << imp.what << ": " << a.status.error_code() << " " << a.status.error_message();
    EXPECT_NE(a.status.error_message().find("agent token refused for node node-a"),
              std::string::npos)
        << imp.what << ": " << a.status.error_message();
    EXPECT_FALSE(a.fence.has_value()) << imp.what << " got a fence";
  }
  // The real agent of node-a: accepted, and its fence holds the policy (the neighbour fenced).
  // Until the controller's first full resolution it may get an early fence; dial until fenced.
  std::optional<v1::NodeFence> fence;
  for (int i = 0; i < 60; ++i) {
    Attempt a = dial(token_a, "node-a");
    ASSERT_NE(a.status.error_code(), grpc::StatusCode::PERMISSION_DENIED)
        << a.status.error_message();
    if (a.fence && a.fence->neighbours_size() > 0) {
      fence = a.fence;
      break;
    }
    std::this_thread::sleep_for(500ms);
  }
  ASSERT_TRUE(fence.has_value()) << "the real agent never got a fence with its neighbour";
  EXPECT_EQ(fence->node_name(), "node-a");
  ASSERT_EQ(fence->policies_size(), 1);
  EXPECT_EQ(fence->policies(0).name(), "identity-test");
  EXPECT_EQ(fence->trainers_size(), 1);
  EXPECT_EQ(fence->neighbours_size(), 1);
  // node-b's real agent is served too (its fence holds nothing: no pods there).
  Attempt b = dial(token_b, "node-b");
  EXPECT_TRUE(b.fence.has_value()) << b.status.error_message();
  EXPECT_TRUE(controller.Alive());
}

}  // namespace
}  // namespace feedguard::kube
