// sanitize.h — strings an agent sent (reasons, messages, pod and node names in reports, NACK
// errors, hello node names) made safe before they reach FencePolicy.status, Events, logs or
// metric labels.
//
// An agent is one node's process: whatever it sends must not be able to make the API server
// reject every later status write of a policy (the CRD bounds and patterns), break JSON
// serialisation (nlohmann::json throws on invalid UTF-8), forge log lines (newlines) or grow
// memory without bound.
#pragma once

#include "feedguard/common/reasons.h"

#include <cstddef>
#include <string>
#include <string_view>

namespace feedguard::controller {

// The reason used when an agent's reason does not fit the CRD's pattern.
inline constexpr const char* kAgentReportedReason = reason::kAgentReported;
// status.failures[].reason: ^[A-Za-z]([A-Za-z0-9_]*[A-Za-z0-9])?$, at most 128 characters.
inline constexpr size_t kMaxReasonLength = 128;

// Valid UTF-8 of at most `max_bytes` bytes: every invalid byte sequence (bad lead or
// continuation bytes, overlong forms, surrogates, code points above U+10FFFF) becomes U+FFFD,
// every control character (C0, DEL, C1) a space, and the result is cut on a character boundary.
std::string SafeText(std::string_view s, size_t max_bytes);

// `reason` if it is a CamelCase reason the CRD accepts, else kAgentReportedReason.
std::string SafeReason(std::string_view reason);
bool IsCamelCaseReason(std::string_view reason);

// A Kubernetes object name that is a DNS subdomain (RFC 1123): at most 253 characters of
// [a-z0-9.-], each dot-separated label starting and ending with [a-z0-9]. Node names are.
bool IsDnsSubdomain(std::string_view name);

}  // namespace feedguard::controller
