// json_member.h — reading a member of untrusted JSON (an API server's object) without throwing.
//
// Example:
//   JsonMember(pod, "spec")                      → pod["spec"], or null when pod has none
//   JsonMember(JsonMember(pod, "spec"), "x")     → null all the way down, never an exception
#pragma once

#include <nlohmann/json.hpp>

namespace feedguard {

// The member `key` of `j` when `j` is an object that has it; null otherwise (never throws).
inline const nlohmann::json& JsonMember(const nlohmann::json& j, const char* key) {
  static const nlohmann::json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

}  // namespace feedguard
