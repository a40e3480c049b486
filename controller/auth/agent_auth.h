// agent_auth.h — which node an agent's bearer token speaks for (docs/DESIGN.md §5, "Node-bound
// agent identity").
//
// Every agent presents its pod's projected ServiceAccount token (an audience of feedguard's own,
// about an hour of life, re-read from the file on every connect: the kubelet rotates it) as
// `authorization: Bearer <token>` call metadata. The controller asks the API server's
// TokenReview and accepts the hello only when the token is authenticated for the audience, its
// user is system:serviceaccount:<agent namespace>:<agent ServiceAccount> and its
// `authentication.kubernetes.io/node-name` extra (set in pod-bound tokens since Kubernetes 1.30,
// ServiceAccountTokenPodNodeInfo) equals the node the hello names. A certificate shared by every
// agent therefore no longer lets one node act for another: only the kubelet of node A can hand
// out a token that names A.
//
// AgentAuthenticator is the seam: the Distributor asks Cached() once per hello on its grpc thread
// and, when that cannot tell, Authenticate() on a review worker of its own (never on a grpc
// thread: a TokenReview is an API round trip); distributor tests use a fake,
// TokenReviewAuthenticator is the real one. Positive reviews are cached (bounded) until the token
// expires, at most `max_cache_ttl` (so a token of a deleted pod stops working within that even
// though it has not expired).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "controller/auth/authenticator.h"
#include "controller/kube/client.h"
#include "feedguard/common/status.h"
#include "feedguard/common/time_source.h"

namespace feedguard::controller {

inline constexpr std::string_view kNodeNameExtra = "authentication.kubernetes.io/node-name";

struct TokenReviewOptions {
  std::string audience = "feedguard";     // the agents' projected tokens carry this audience
  std::string service_account_namespace;  // the agents' ServiceAccount
  std::string service_account_name;
  size_t max_cache_entries = 10'000;        // one per agent is enough
  std::chrono::seconds max_cache_ttl{300};  // positive reviews live at most this long
  size_t max_token_bytes = 16 * 1024;       // longer: refused without asking the API server
  TimeSourcePtr clock;                      // default: real
};

// The `exp` claim (seconds since the epoch) of a JWT, read without verifying the signature (use
// only after the API server authenticated the token). nullopt when it cannot be read.
std::optional<int64_t> JwtExpiry(std::string_view token);

// Judges a TokenReview `status` object: OK, or kPermissionDenied naming the first rule broken.
Status JudgeTokenReview(const nlohmann::json& review_status, const TokenReviewOptions& options,
                        const std::string& node);

class TokenReviewAuthenticator final : public AgentAuthenticator {
 public:
  // Fails when the ServiceAccount or the audience is not set.
  static Result<std::shared_ptr<TokenReviewAuthenticator>> Create(kube::ClientPtr client,
                                                                  TokenReviewOptions options);
  Status Authenticate(std::string_view token, const std::string& node) override;
  // A live cache entry's verdict, or a refusal of an empty or oversize token; nullopt otherwise.
  std::optional<Status> Cached(std::string_view token, const std::string& node) override;

  uint64_t reviews() const;   // TokenReviews sent (tests: the cache spares the API server)
  size_t cache_size() const;  // bounded by max_cache_entries

 private:
  TokenReviewAuthenticator(kube::ClientPtr client, TokenReviewOptions options);
  struct Entry {
    std::string node;
    std::chrono::system_clock::time_point expires;
  };
  void InsertLocked(std::string key, Entry e, std::chrono::system_clock::time_point now);
  // The verdict Cached() gives for the token whose hash is `key` (requires mu_).
  std::optional<Status> LookupLocked(const std::string& key, const std::string& node,
                                     std::chrono::system_clock::time_point now);

  const kube::ClientPtr client_;
  const TokenReviewOptions options_;
  mutable std::mutex mu_;
  std::map<std::string, Entry> cache_;  // guarded by mu_; SHA-256 of the token → verdict
  uint64_t reviews_ = 0;                // guarded by mu_
};

}  // namespace feedguard::controller
