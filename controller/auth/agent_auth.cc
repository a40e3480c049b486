#include "controller/auth/agent_auth.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cctype>

#include <spdlog/spdlog.h>

namespace feedguard::controller {
namespace {

// What of a server's message goes into a status or a log: short, printable.
std::string Clip(std::string_view s, size_t max = 256) {
  std::string out;
  for (char c : s.substr(0, max)) {
    out.push_back(std::isprint(static_cast<unsigned char>(c)) ? c : '?');
  }
  if (s.size() > max) out += "...";
  return out;
}

std::optional<std::string> Base64UrlDecode(std::string_view in) {
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    int v;
    if (c >= 'A' && c <= 'Z') {
      v = c - 'A';
    } else if (c >= 'a' && c <= 'z') {
      v = c - 'a' + 26;
    } else if (c >= '0' && c <= '9') {
      v = c - '0' + 52;
    } else if (c == '-' || c == '+') {
      v = 62;
    } else if (c == '_' || c == '/') {
      v = 63;
    } else if (c == '=') {
      break;
    } else {
      return std::nullopt;
    }
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xffu));
    }
  }
  return out;
}

std::string Sha256(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr) != 1) return {};
  return std::string(reinterpret_cast<const char*>(md), len);
}

}  // namespace

std::optional<int64_t> JwtExpiry(std::string_view token) {
  const size_t a = token.find('.');
  if (a == std::string_view::npos) return std::nullopt;
  const size_t b = token.find('.', a + 1);
  if (b == std::string_view::npos) return std::nullopt;
  auto payload = Base64UrlDecode(token.substr(a + 1, b - a - 1));
  if (!payload) return std::nullopt;
  const nlohmann::json claims = nlohmann::json::parse(*payload, nullptr, false);
  if (!claims.is_object()) return std::nullopt;
  auto exp = claims.find("exp");
  if (exp == claims.end() || !exp->is_number_integer()) return std::nullopt;
  return exp->get<int64_t>();
}

Status JudgeTokenReview(const nlohmann::json& st, const TokenReviewOptions& o,
                        const std::string& node) {
  if (!st.is_object()) return PermissionDenied("token review returned no status");
  auto err = st.find("error");
  auto auth = st.find("authenticated");
  if (auth == st.end() || !auth->is_boolean() || !auth->get<bool>()) {
    std::string why = err != st.end() && err->is_string() ? Clip(err->get<std::string>()) : "";
    return PermissionDenied("token not authenticated for audience \"" + o.audience + "\"" +
                            (why.empty() ? "" : ": " + why));
  }
  auto auds = st.find("audiences");
  bool audience_ok = false;
  if (auds != st.end() && auds->is_array()) {
    for (const auto& a : *auds) audience_ok = audience_ok || (a.is_string() && a == o.audience);
  }
  if (!audience_ok) {
    return PermissionDenied("token is not for audience \"" + o.audience + "\"");
  }
  const std::string want =
      "system:serviceaccount:" + o.service_account_namespace + ":" + o.service_account_name;
  std::string user;
  if (auto u = st.find("user"); u != st.end() && u->is_object()) {
    if (auto n = u->find("username"); n != u->end() && n->is_string()) user = *n;
  }
  if (user != want) {
    return PermissionDenied("token belongs to \"" + Clip(user, 128) +
                            "\", not the agent ServiceAccount " + o.service_account_namespace +
                            "/" + o.service_account_name);
  }
  std::vector<std::string> nodes;
  if (auto u = st.find("user"); u != st.end() && u->is_object()) {
    if (auto ex = u->find("extra"); ex != u->end() && ex->is_object()) {
      if (auto nn = ex->find(std::string(kNodeNameExtra)); nn != ex->end() && nn->is_array()) {
        for (const auto& v : *nn) {
          if (v.is_string()) nodes.push_back(v);
        }
      }
    }
  }
  if (nodes.empty()) {
    return PermissionDenied(
        "token names no node (not a pod-bound token, or Kubernetes older than 1.30)");
  }
  if (nodes.size() != 1 || nodes[0] != node) {
    return PermissionDenied("token is bound to node " + Clip(nodes[0], 253) + ", not " + node);
  }
  return OkStatus();
}

TokenReviewAuthenticator::TokenReviewAuthenticator(kube::ClientPtr client,
                                                   TokenReviewOptions options)
    : client_(std::move(client)), options_(std::move(options)) {}

Result<std::shared_ptr<TokenReviewAuthenticator>> TokenReviewAuthenticator::Create(
    kube::ClientPtr client, TokenReviewOptions options) {
  if (!client) return InvalidArgument("token review: no API client");
  if (options.audience.empty()) return InvalidArgument("token review: no audience");
  if (options.service_account_namespace.empty() || options.service_account_name.empty()) {
    return InvalidArgument("token review: the agent ServiceAccount (namespace/name) is not set");
  }
  if (!options.clock) options.clock = std::make_shared<RealTimeSource>();
  if (options.max_cache_entries == 0) options.max_cache_entries = 1;
  return std::shared_ptr<TokenReviewAuthenticator>(
      new TokenReviewAuthenticator(std::move(client), std::move(options)));
}

std::optional<Status> TokenReviewAuthenticator::LookupLocked(
    const std::string& key, const std::string& node, std::chrono::system_clock::time_point now) {
  auto it = cache_.find(key);
  if (it == cache_.end()) return std::nullopt;
  if (it->second.expires <= now) {
    cache_.erase(it);
    return std::nullopt;
  }
  if (it->second.node == node) return OkStatus();
  return PermissionDenied("token is bound to node " + it->second.node + ", not " + node);
}

std::optional<Status> TokenReviewAuthenticator::Cached(std::string_view token,
                                                       const std::string& node) {
  if (token.empty()) {
    return PermissionDenied("no bearer token (the agent must send its ServiceAccount token)");
  }
  if (token.size() > options_.max_token_bytes) return PermissionDenied("bearer token too long");
  const std::string key = Sha256(token);
  if (key.empty()) return Internal("cannot hash the token");
  std::lock_guard lock(mu_);
  return LookupLocked(key, node, options_.clock->WallNow());
}

Status TokenReviewAuthenticator::Authenticate(std::string_view token, const std::string& node) {
  if (token.empty() || token.size() > options_.max_token_bytes) return *Cached(token, node);
  const std::string key = Sha256(token);
  if (key.empty()) return Internal("cannot hash the token");
  const auto now = options_.clock->WallNow();
  {
    std::lock_guard lock(mu_);
    if (auto v = LookupLocked(key, node, now)) return *v;
    ++reviews_;
  }
  auto review = client_->ReviewToken(std::string(token), {options_.audience});
  if (!review.ok()) {
    spdlog::warn("token review failed: {}", review.status().ToString());
    return Unavailable("cannot review the agent's token now: " + Clip(review.status().message()));
  }
  FG_RETURN_IF_ERROR(JudgeTokenReview(*review, options_, node));
  // Authenticated: the claims are the API server's, so `exp` can be trusted.
  auto expires = now + options_.max_cache_ttl;
  if (auto exp = JwtExpiry(token)) {
    expires = std::min(expires, std::chrono::system_clock::time_point(std::chrono::seconds(*exp)));
  } else {
    return OkStatus();  // no expiry to bound the cache entry by: review it every time
  }
  std::lock_guard lock(mu_);
  InsertLocked(key, Entry{node, expires}, now);
  return OkStatus();
}

void TokenReviewAuthenticator::InsertLocked(std::string key, Entry e,
                                            std::chrono::system_clock::time_point now) {
  if (cache_.size() >= options_.max_cache_entries) {
    std::erase_if(cache_, [now](const auto& kv) { return kv.second.expires <= now; });
  }
  while (cache_.size() >= options_.max_cache_entries) {
    // Still full of live entries: drop the one that expires first.
    auto victim = std::min_element(cache_.begin(), cache_.end(), [](const auto& a, const auto& b) {
      return a.second.expires < b.second.expires;
    });
    cache_.erase(victim);
  }
  cache_[std::move(key)] = std::move(e);
}

uint64_t TokenReviewAuthenticator::reviews() const {
  std::lock_guard lock(mu_);
  return reviews_;
}

size_t TokenReviewAuthenticator::cache_size() const {
  std::lock_guard lock(mu_);
  return cache_.size();
}

}  // namespace feedguard::controller
