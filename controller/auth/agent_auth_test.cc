#include "controller/auth/agent_auth.h"

#include <gtest/gtest.h>

#include "controller/auth/base64url_testing.h"
#include "controller/kube/fake_transport.h"

namespace feedguard::controller {
namespace {

using feedguard::testing::B64UrlEncode;
using nlohmann::json;

// A JWT-shaped token (the signature is not checked here: the API server does that).
std::string Token(int64_t exp, const std::string& salt = "") {
  return B64UrlEncode(R"({"alg":"RS256"})") + "." +
         B64UrlEncode(json{{"exp", exp}, {"sub", "x" + salt}}.dump()) + ".sig";
}

TokenReviewOptions Opts(TimeSourcePtr clock = nullptr) {
  TokenReviewOptions o;
  o.audience = "feedguard";
  o.service_account_namespace = "fg";
  o.service_account_name = "agent";
  o.clock = std::move(clock);
  return o;
}

json Review(const std::string& node, const std::string& user = "system:serviceaccount:fg:agent",
            const std::string& audience = "feedguard") {
  json st = {{"authenticated", true},
             {"audiences", {audience}},
             {"user", {{"username", user}, {"extra", json::object()}}}};
  if (!node.empty()) st["user"]["extra"][std::string(kNodeNameExtra)] = {node};
  return st;
}

TEST(BearerTokenTest, ParsesTheSchemeCaseInsensitively) {
  EXPECT_EQ(BearerToken("Bearer abc"), "abc");
  EXPECT_EQ(BearerToken("bearer  abc \n"), "abc");
  EXPECT_EQ(BearerToken("Basic abc"), "");
  EXPECT_EQ(BearerToken("Bearer "), "");
  EXPECT_EQ(BearerToken(""), "");
}

TEST(JwtExpiryTest, ReadsExpOrNothing) {
  EXPECT_EQ(JwtExpiry(Token(1'700'000'123)), 1'700'000'123);
  EXPECT_EQ(JwtExpiry("not-a-jwt"), std::nullopt);
  EXPECT_EQ(JwtExpiry("a.!!!.c"), std::nullopt);
  EXPECT_EQ(JwtExpiry("a." + B64UrlEncode(R"({"exp":"soon"})") + ".c"), std::nullopt);
}

TEST(JudgeTokenReviewTest, AcceptsOnlyTheAgentAccountBoundToTheHelloNode) {
  const auto o = Opts();
  EXPECT_TRUE(JudgeTokenReview(Review("gpu-1"), o, "gpu-1").ok());
  // Another node's token.
  Status s = JudgeTokenReview(Review("gpu-2"), o, "gpu-1");
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(s.message().find("bound to node gpu-2, not gpu-1"), std::string::npos) << s.message();
  // Another ServiceAccount.
  s = JudgeTokenReview(Review("gpu-1", "system:serviceaccount:fg:other"), o, "gpu-1");
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(s.message().find("system:serviceaccount:fg:other"), std::string::npos);
  // Another audience (the server would not authenticate it; also checked here).
  EXPECT_EQ(JudgeTokenReview(Review("gpu-1", "system:serviceaccount:fg:agent", "other"), o, "gpu-1")
                .code(),
            StatusCode::kPermissionDenied);
  // Not pod-bound (no node-name extra).
  s = JudgeTokenReview(Review(""), o, "gpu-1");
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(s.message().find("names no node"), std::string::npos);
  // Not authenticated: the server's reason is passed on.
  s = JudgeTokenReview({{"authenticated", false}, {"error", "token has expired"}}, o, "gpu-1");
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(s.message().find("token has expired"), std::string::npos);
  // Wrong JSON types anywhere: refused, never thrown.
  for (const json& bad : {json(nullptr), json{{"authenticated", "true"}},
                          json{{"authenticated", true}, {"audiences", "feedguard"}},
                          json{{"authenticated", true}, {"audiences", {"feedguard"}}, {"user", 5}},
                          json{{"authenticated", true},
                               {"audiences", {"feedguard"}},
                               {"user",
                                {{"username", "system:serviceaccount:fg:agent"},
                                 {"extra", {{std::string(kNodeNameExtra), "gpu-1"}}}}}}}) {
    EXPECT_EQ(JudgeTokenReview(bad, o, "gpu-1").code(), StatusCode::kPermissionDenied)
        << bad.dump();
  }
  // Two node names: refused.
  json two = Review("gpu-1");
  two["user"]["extra"][std::string(kNodeNameExtra)] = {"gpu-1", "gpu-2"};
  EXPECT_EQ(JudgeTokenReview(two, o, "gpu-1").code(), StatusCode::kPermissionDenied);
}

class TokenReviewAuthenticatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    transport_ = std::make_shared<kube::FakeTransport>([this](const kube::HttpRequest& r) {
      kube::FakeReply reply;
      last_body_ = json::parse(r.body, nullptr, false);
      if (down_) {
        reply.response = Unavailable("connection refused");
        return reply;
      }
      reply.response = kube::HttpResponse{201, json{{"status", verdict_}}.dump()};
      return reply;
    });
    auto a =
        TokenReviewAuthenticator::Create(std::make_shared<kube::Client>(transport_), Opts(clock_));
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    auth_ = *a;
  }
  int64_t Now() const {
    return std::chrono::duration_cast<std::chrono::seconds>(clock_->WallNow().time_since_epoch())
        .count();
  }

  std::shared_ptr<ManualTimeSource> clock_ = std::make_shared<ManualTimeSource>();
  std::shared_ptr<kube::FakeTransport> transport_;
  std::shared_ptr<TokenReviewAuthenticator> auth_;
  json verdict_ = Review("gpu-1");
  json last_body_;
  bool down_ = false;
};

TEST_F(TokenReviewAuthenticatorTest, SendsTheTokenAndAudienceAndCachesUntilExpiry) {
  const std::string token = Token(Now() + 120);
  ASSERT_TRUE(auth_->Authenticate(token, "gpu-1").ok());
  ASSERT_EQ(transport_->requests().size(), 1u);
  EXPECT_EQ(transport_->requests()[0].method, "POST");
  EXPECT_EQ(transport_->requests()[0].path, "/apis/authentication.k8s.io/v1/tokenreviews");
  EXPECT_EQ(last_body_["spec"]["token"], token);
  EXPECT_EQ(last_body_["spec"]["audiences"], json({"feedguard"}));
  // Cached: no second review; a hello for another node with the same token is still refused.
  EXPECT_TRUE(auth_->Authenticate(token, "gpu-1").ok());
  EXPECT_EQ(auth_->Authenticate(token, "gpu-2").code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(auth_->reviews(), 1u);
  // Past the token's expiry: reviewed again (and the server now says no).
  clock_->Advance(std::chrono::seconds(121));
  verdict_ = {{"authenticated", false}, {"error", "token has expired"}};
  EXPECT_EQ(auth_->Authenticate(token, "gpu-1").code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(auth_->reviews(), 2u);
}

TEST_F(TokenReviewAuthenticatorTest, CachedAnswersOnlyWithoutARoundTrip) {
  const std::string token = Token(Now() + 120);
  // Not reviewed yet: only Authenticate can tell (the Distributor sends it to a worker).
  EXPECT_FALSE(auth_->Cached(token, "gpu-1").has_value());
  EXPECT_EQ(transport_->requests().size(), 0u);
  // Refused on its face: no review needed.
  ASSERT_TRUE(auth_->Cached("", "gpu-1").has_value());
  EXPECT_EQ(auth_->Cached("", "gpu-1")->code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(auth_->Cached(std::string(20'000, 'x'), "gpu-1")->code(),
            StatusCode::kPermissionDenied);
  ASSERT_TRUE(auth_->Authenticate(token, "gpu-1").ok());
  ASSERT_TRUE(auth_->Cached(token, "gpu-1").has_value());
  EXPECT_TRUE(auth_->Cached(token, "gpu-1")->ok());
  EXPECT_EQ(auth_->Cached(token, "gpu-2")->code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(auth_->reviews(), 1u);
  clock_->Advance(std::chrono::seconds(121));  // expired: unknown again
  EXPECT_FALSE(auth_->Cached(token, "gpu-1").has_value());
  EXPECT_EQ(transport_->requests().size(), 1u);
}

TEST_F(TokenReviewAuthenticatorTest, CacheLivesAtMostTheTtlEvenForLongTokens) {
  const std::string token = Token(Now() + 86'400);
  ASSERT_TRUE(auth_->Authenticate(token, "gpu-1").ok());
  clock_->Advance(std::chrono::seconds(301));
  verdict_ = {{"authenticated", false}, {"error", "pod deleted"}};
  EXPECT_EQ(auth_->Authenticate(token, "gpu-1").code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(auth_->reviews(), 2u);
}

TEST_F(TokenReviewAuthenticatorTest, NegativeVerdictsAreNotCachedAndOutagesAreUnavailable) {
  verdict_ = Review("gpu-2");
  const std::string token = Token(Now() + 600);
  EXPECT_EQ(auth_->Authenticate(token, "gpu-1").code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(auth_->cache_size(), 0u);
  down_ = true;
  EXPECT_EQ(auth_->Authenticate(Token(Now() + 600, "b"), "gpu-1").code(), StatusCode::kUnavailable);
  EXPECT_EQ(auth_->Authenticate("", "gpu-1").code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(auth_->Authenticate(std::string(20'000, 'x'), "gpu-1").code(),
            StatusCode::kPermissionDenied);
}

TEST_F(TokenReviewAuthenticatorTest, CacheIsBounded) {
  auto small = Opts(clock_);
  small.max_cache_entries = 3;
  auto a = TokenReviewAuthenticator::Create(std::make_shared<kube::Client>(transport_), small);
  ASSERT_TRUE(a.ok());
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE((*a)->Authenticate(Token(Now() + 100 + i, std::to_string(i)), "gpu-1").ok());
    EXPECT_LE((*a)->cache_size(), 3u);
  }
  // The newest stays cached.
  const uint64_t before = (*a)->reviews();
  EXPECT_TRUE((*a)->Authenticate(Token(Now() + 109, "9"), "gpu-1").ok());
  EXPECT_EQ((*a)->reviews(), before);
}

TEST(TokenReviewAuthenticatorCreateTest, NeedsServiceAccountAndAudience) {
  auto client = std::make_shared<kube::Client>(std::make_shared<kube::FakeTransport>(
      [](const kube::HttpRequest&) { return kube::FakeReply{}; }));
  auto o = Opts();
  o.service_account_name.clear();
  EXPECT_FALSE(TokenReviewAuthenticator::Create(client, o).ok());
  o = Opts();
  o.audience.clear();
  EXPECT_FALSE(TokenReviewAuthenticator::Create(client, o).ok());
}

}  // namespace
}  // namespace feedguard::controller
