// strings.h — the small string and path helpers every component shares (one spelling each).
//
// Paths here are plain '/'-separated strings as the kernel and kubelet spell them (cgroup dirs,
// file names): no normalisation, no filesystem access. For anything that touches the
// filesystem use std::filesystem.
//
// Example:
//   Basename("/sys/fs/cgroup/cpu/kubepods/pod1/cpu.shares")  → "cpu.shares"
//   Dirname("/sys/fs/cgroup/cpu/kubepods/pod1/cpu.shares")   → "/sys/fs/cgroup/cpu/kubepods/pod1"
//   JoinPath("/a/b", "c")                                    → "/a/b/c"
//   Trim("  1024\n")                                         → "1024"
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace feedguard {

// Leading and trailing spaces, tabs, CR and LF removed.
inline std::string_view Trim(std::string_view s) {
  constexpr std::string_view kWs = " \t\r\n";
  const size_t b = s.find_first_not_of(kWs);
  if (b == std::string_view::npos) return {};
  const size_t e = s.find_last_not_of(kWs);
  return s.substr(b, e - b + 1);
}

// Whitespace-separated fields.
inline std::vector<std::string_view> Fields(std::string_view s) {
  std::vector<std::string_view> out;
  size_t i = 0;
  auto ws = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (i < s.size()) {
    while (i < s.size() && ws(s[i])) ++i;
    const size_t b = i;
    while (i < s.size() && !ws(s[i])) ++i;
    if (i > b) out.push_back(s.substr(b, i - b));
  }
  return out;
}

// The last component of a '/'-separated path ("a/b" → "b", "b" → "b").
inline std::string Basename(std::string_view path) {
  const size_t slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

// Everything before the last '/' ("a/b" → "a", "b" → "", "/b" → "").
inline std::string Dirname(std::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? std::string() : std::string(path.substr(0, slash));
}

// dir + "/" + name; an empty dir gives name alone, an empty name dir alone.
inline std::string JoinPath(std::string_view dir, std::string_view name) {
  if (name.empty()) return std::string(dir);
  if (dir.empty()) return std::string(name);
  std::string out(dir);
  if (out.back() != '/') out += '/';
  out += name;
  return out;
}

}  // namespace feedguard
