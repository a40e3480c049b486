// authenticator.h — the seam between the Distributor and whatever proves an agent's node
// (agent_auth.h: the API server's TokenReview; tests: a fake). Header only, no dependencies, so
// the distributor library does not pull in the Kubernetes client.
#pragma once

#include <cctype>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "feedguard/common/status.h"

namespace feedguard::controller {

class AgentAuthenticator {
 public:
  virtual ~AgentAuthenticator() = default;
  // OK when `token` (the bearer token of the agent's stream, "" when it sent none) proves its
  // bearer is the agent of `node`. kPermissionDenied (the message says why, never the token)
  // when it does not; kUnavailable when it cannot be judged now (API server unreachable): the
  // agent retries. May block for one API round trip; thread-safe.
  virtual Status Authenticate(std::string_view token, const std::string& node) = 0;
  // The verdict when it is known without a round trip (a cached review, a token refused on its
  // face); nullopt when only Authenticate can tell. Never blocks: the Distributor calls it on a
  // grpc thread and sends only the rest to its review workers. Thread-safe.
  virtual std::optional<Status> Cached(std::string_view /*token*/, const std::string& /*node*/) {
    return std::nullopt;
  }
};
using AgentAuthenticatorPtr = std::shared_ptr<AgentAuthenticator>;

// The token of an `authorization` header "Bearer <token>" (scheme case-insensitive, surrounding
// blanks dropped); "" for anything else.
inline std::string BearerToken(std::string_view header) {
  constexpr std::string_view kScheme = "bearer ";
  if (header.size() <= kScheme.size()) return "";
  for (size_t i = 0; i < kScheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(header[i])) != kScheme[i]) return "";
  }
  header.remove_prefix(kScheme.size());
  while (!header.empty() && header.front() == ' ') header.remove_prefix(1);
  while (!header.empty() &&
         (header.back() == ' ' || header.back() == '\n' || header.back() == '\r')) {
    header.remove_suffix(1);
  }
  return std::string(header);
}

}  // namespace feedguard::controller
