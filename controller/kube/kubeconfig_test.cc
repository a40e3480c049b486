#include "controller/kube/kubeconfig.h"
#include "tests/fixtures/status_testing.h"
#include "tests/fixtures/temp_dir.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace feedguard::kube {
namespace {

namespace fs = std::filesystem;
using feedguard::testing::TempDir;

std::string Slurp(const std::string& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void Write(const std::string& p, const std::string& s) { std::ofstream(p) << s; }

std::string Base64(const std::string& in) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out.push_back(k[(v >> s) & 63]);
  }
  if (i < in.size()) {
    uint32_t v = uint8_t(in[i]) << 16;
    if (i + 1 < in.size()) v |= uint8_t(in[i + 1]) << 8;
    out.push_back(k[(v >> 18) & 63]);
    out.push_back(k[(v >> 12) & 63]);
    out.push_back(i + 1 < in.size() ? k[(v >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

// A self-signed certificate and key made with the openssl CLI.
class KubeconfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    const std::string cmd =
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
        "-nodes -days 1 -subj /CN=fg-test -keyout " +
        dir_.path() + "/key.pem -out " + dir_.path() + "/cert.pem >/dev/null 2>&1";
    if (std::system(cmd.c_str()) != 0) GTEST_SKIP() << "openssl CLI unavailable";
    cert_ = Slurp(dir_.path() + "/cert.pem");
    key_ = Slurp(dir_.path() + "/key.pem");
    ASSERT_NE(cert_.find("BEGIN CERTIFICATE"), std::string::npos);
  }
  TempDir dir_;
  std::string cert_, key_;
};

TEST(Base64Test, RoundTrip) {
  for (std::string s : {"", "a", "ab", "abc", "abcd", "hello\nworld\x01\xff"}) {
    auto d = Base64Decode(Base64(s));
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(*d, s);
  }
  EXPECT_FALSE(Base64Decode("ab$c").ok());
  auto wrapped = Base64Decode("aGVs\nbG8=");
  ASSERT_TRUE(wrapped.ok());
  EXPECT_EQ(*wrapped, "hello");
}

TEST_F(KubeconfigTest, DataFormsAndCurrentContext) {
  const std::string yaml = R"(apiVersion: v1
kind: Config
current-context: dev
clusters:
- name: prod
  cluster: {server: "https://prod:6443", insecure-skip-tls-verify: true}
- name: devc
  cluster:
    server: https://127.0.0.1:6443/
    certificate-authority-data: )" +
                           Base64(cert_) + R"(
users:
- name: admin
  user:
    client-certificate-data: )" +
                           Base64(cert_) + R"(
    client-key-data: )" + Base64(key_) +
                           R"(
contexts:
- name: prodctx
  context: {cluster: prod, user: admin}
- name: dev
  context: {cluster: devc, user: admin, namespace: team-a}
)";
  auto cfg = ParseKubeconfig(yaml, dir_.path());
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ(cfg->server, "https://127.0.0.1:6443");
  EXPECT_EQ(cfg->ca_pem, cert_);
  EXPECT_EQ(cfg->client_cert_pem, cert_);
  EXPECT_EQ(cfg->client_key_pem, key_);
  EXPECT_FALSE(cfg->insecure_skip_tls_verify);
  EXPECT_EQ(cfg->default_namespace, "team-a");

  auto prod = ParseKubeconfig(yaml, dir_.path(), "prodctx");
  ASSERT_TRUE(prod.ok()) << prod.status().ToString();
  EXPECT_EQ(prod->server, "https://prod:6443");
  EXPECT_TRUE(prod->insecure_skip_tls_verify);
  EXPECT_TRUE(prod->ca_pem.empty());

  auto missing = ParseKubeconfig(yaml, dir_.path(), "nope");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

TEST_F(KubeconfigTest, OversizeFilesAreRefusedNotRead) {
  // 5 MiB where a kubeconfig is expected: refused with a message, never parsed.
  Write(dir_.path() + "/huge", std::string(5 << 20, '#'));
  auto r = LoadKubeconfig(dir_.path() + "/huge");
  ASSERT_TRUE(feedguard::testing::FailsWith(r, StatusCode::kInvalidArgument, "larger than 4 MiB"));
  // Just under the limit is read (and then judged as YAML).
  Write(dir_.path() + "/big", "# " + std::string((4 << 20) - 3, 'x') + "\n");
  auto b = LoadKubeconfig(dir_.path() + "/big");
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().message().find("larger than"), std::string::npos) << b.status().ToString();
}

// A kubeconfig-shaped byte bomb: one 1 MiB server URL under 1,000 aliases (a 1 MiB file). The
// expanded bytes are bounded before any field is read.
TEST(KubeconfigBoundsTest, YamlByteBombIsRefused) {
  std::string y = "current-context: c\nclusters:\n- name: x\n  cluster: {server: &s \"https://" +
                  std::string(1 << 20, 'h') + "\"}\n";
  for (int i = 0; i < 1000; ++i)
    y += "- name: c" + std::to_string(i) + "\n  cluster: {server: *s}\n";
  y += "contexts:\n- name: c\n  context: {cluster: c999}\n";
  auto r = ParseKubeconfig(y, "", "");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("bytes of keys and scalars once aliases are expanded"),
            std::string::npos)
      << r.status().ToString().substr(0, 300);
  // Not YAML at all is still said as such.
  auto bad = ParseKubeconfig("clusters: [", "", "");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("not valid YAML"), std::string::npos)
      << bad.status().ToString();
}

TEST_F(KubeconfigTest, FileFormsRelativeToKubeconfigAndTokens) {
  Write(dir_.path() + "/tok", "  secret-1\n");
  const std::string yaml = R"(current-context: c
clusters:
- name: k
  cluster: {server: "https://h:1", certificate-authority: cert.pem}
users:
- name: u
  user: {client-certificate: cert.pem, client-key: )" +
                           dir_.path() + R"(/key.pem, tokenFile: tok}
- name: t
  user: {token: abc}
contexts:
- name: c
  context: {cluster: k, user: u}
- name: t
  context: {cluster: k, user: t}
)";
  Write(dir_.path() + "/kubeconfig", yaml);
  auto cfg = LoadKubeconfig(dir_.path() + "/kubeconfig");
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ(cfg->ca_pem, cert_);
  EXPECT_EQ(cfg->client_key_pem, key_);
  EXPECT_EQ(cfg->token_file, dir_.path() + "/tok");
  auto t = LoadKubeconfig(dir_.path() + "/kubeconfig", "t");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->token, "abc");
}

// Sets an environment variable for one scope (nullptr: unset), then puts the old value back.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = getenv(name);
    if (old) old_ = old;
    had_ = old != nullptr;
    if (value) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_, old_.c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

// kubectl's --context through LoadDefaultConfig: the default stays the current-context; a named
// context is taken from $KUBECONFIG (or ~/.kube/config); without a kubeconfig a context is
// refused by name instead of silently falling back to in-cluster configuration.
TEST(KubeconfigDefaultTest, TakesANamedContext) {
  TempDir dir_;
  ASSERT_FALSE(dir_.path().empty());
  const std::string yaml = R"(current-context: a
clusters:
- {name: ka, cluster: {server: "https://a:1"}}
- {name: kb, cluster: {server: "https://b:2"}}
users: [{name: u, user: {token: t}}]
contexts:
- {name: a, context: {cluster: ka, user: u}}
- {name: b, context: {cluster: kb, user: u, namespace: team-b}}
)";
  Write(dir_.path() + "/kc", yaml);
  {
    ScopedEnv kubeconfig("KUBECONFIG", (dir_.path() + "/kc").c_str());
    auto current = LoadDefaultConfig();
    ASSERT_TRUE(current.ok()) << current.status().ToString();
    EXPECT_EQ(current->server, "https://a:1");
    EXPECT_EQ(current->default_namespace, "default");
    auto b = LoadDefaultConfig("b");
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    EXPECT_EQ(b->server, "https://b:2");
    EXPECT_EQ(b->default_namespace, "team-b");
    EXPECT_TRUE(
        feedguard::testing::FailsWith(LoadDefaultConfig("c"), StatusCode::kNotFound, "'c'"));
  }
  // ~/.kube/config when $KUBECONFIG is unset.
  fs::create_directories(dir_.path() + "/home/.kube");
  Write(dir_.path() + "/home/.kube/config", yaml);
  ScopedEnv no_kubeconfig("KUBECONFIG", nullptr);
  {
    ScopedEnv home("HOME", (dir_.path() + "/home").c_str());
    auto b = LoadDefaultConfig("b");
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    EXPECT_EQ(b->server, "https://b:2");
  }
  // No kubeconfig anywhere: a context is refused by name, even where in-cluster would work.
  ScopedEnv home("HOME", (dir_.path() + "/nohome").c_str());
  ScopedEnv host("KUBERNETES_SERVICE_HOST", "10.96.0.1");
  ScopedEnv port("KUBERNETES_SERVICE_PORT", "443");
  EXPECT_TRUE(feedguard::testing::FailsWith(LoadDefaultConfig("b"), StatusCode::kNotFound,
                                            "context 'b' asked for, but there is no kubeconfig"));
}

TEST_F(KubeconfigTest, CertWithoutKeyIsInvalid) {
  const std::string yaml = R"(current-context: c
clusters: [{name: k, cluster: {server: "https://h:1"}}]
users: [{name: u, user: {client-certificate-data: )" +
                           Base64(cert_) + R"(}}]
contexts: [{name: c, context: {cluster: k, user: u}}]
)";
  EXPECT_EQ(ParseKubeconfig(yaml, "").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseKubeconfig("[1, 2", "").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(LoadKubeconfig(dir_.path() + "/absent").status().code(), StatusCode::kNotFound);
}

TEST_F(KubeconfigTest, InClusterFromInjectedRoot) {
  const std::string sa = dir_.path() + "/var/run/secrets/kubernetes.io/serviceaccount";
  fs::create_directories(sa);
  Write(sa + "/token", "tok-1\n");
  Write(sa + "/ca.crt", cert_);
  Write(sa + "/namespace", "feedguard-system");
  auto cfg = LoadInClusterConfig({"10.96.0.1", "443", dir_.path()});
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ(cfg->server, "https://10.96.0.1:443");
  EXPECT_EQ(cfg->ca_pem, cert_);
  EXPECT_EQ(cfg->default_namespace, "feedguard-system");
  EXPECT_EQ(cfg->token_file, sa + "/token");
  auto v6 = LoadInClusterConfig({"fd00::1", "443", dir_.path()});
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->server, "https://[fd00::1]:443");
  EXPECT_EQ(LoadInClusterConfig({"", "", dir_.path()}).status().code(),
            StatusCode::kFailedPrecondition);

  // The token is re-read after a minute, and at once after Invalidate (a 401).
  auto clock = std::make_shared<ManualTimeSource>();
  TokenSource tokens("", cfg->token_file, clock);
  EXPECT_EQ(*tokens.Token(), "tok-1");
  Write(sa + "/token", "tok-2\n");
  clock->Advance(std::chrono::seconds(30));
  EXPECT_EQ(*tokens.Token(), "tok-1");  // cached
  clock->Advance(std::chrono::seconds(31));
  EXPECT_EQ(*tokens.Token(), "tok-2");
  Write(sa + "/token", "tok-3\n");
  tokens.Invalidate();
  EXPECT_EQ(*tokens.Token(), "tok-3");
}

}  // namespace
}  // namespace feedguard::kube
