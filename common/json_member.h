// json_member.h — reading a member of untrusted JSON (an API server's object) without throwing.
//
// Example:
//   JsonMember(pod, "spec")                      → pod["spec"], or null when pod has none
//   JsonMember(JsonMember(pod, "spec"), "x")     → null all the way down, never an exception
//   JsonStringOr(cond, "status", "")             → cond.status when it is a string, else ""
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace feedguard {

// The member `key` of `j` when `j` is an object that has it; null otherwise (never throws).
inline const nlohmann::json& JsonMember(const nlohmann::json& j, const char* key) {
  static const nlohmann::json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

// The string member `key` of `j`, or `fallback` when `j` is no object, has no such member or
// the member is no string (never throws).
inline std::string JsonStringOr(const nlohmann::json& j, const char* key, std::string fallback) {
  const nlohmann::json& v = JsonMember(j, key);
  return v.is_string() ? v.get<std::string>() : fallback;
}

}  // namespace feedguard
