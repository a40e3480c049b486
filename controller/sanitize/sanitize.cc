#include "controller/sanitize/sanitize.h"

#include <algorithm>
#include <cstdint>

#include "common/utf8.h"

namespace feedguard::controller {
namespace {

constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD

bool IsAsciiAlpha(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }
bool IsAsciiDigit(char c) { return c >= '0' && c <= '9'; }

}  // namespace

std::string SafeText(std::string_view s, size_t max_bytes) {
  std::string out;
  out.reserve(std::min(s.size(), max_bytes));
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = 0;
    size_t n = Utf8SequenceLength(s, i, &cp);
    std::string_view piece;
    if (n == 0) {
      piece = kReplacement;
      n = 1;
    } else if (cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp < 0xA0)) {
      piece = " ";
    } else {
      piece = s.substr(i, n);
    }
    if (out.size() + piece.size() > max_bytes) break;
    out.append(piece);
    i += n;
  }
  return out;
}

bool IsCamelCaseReason(std::string_view r) {
  if (r.empty() || r.size() > kMaxReasonLength || !IsAsciiAlpha(r.front())) return false;
  for (char c : r) {
    if (!IsAsciiAlpha(c) && !IsAsciiDigit(c) && c != '_') return false;
  }
  return r.back() != '_';
}

std::string SafeReason(std::string_view reason) {
  return IsCamelCaseReason(reason) ? std::string(reason) : std::string(kAgentReportedReason);
}

bool IsDnsSubdomain(std::string_view name) {
  if (name.empty() || name.size() > 253) return false;
  size_t label_start = 0;
  for (size_t i = 0; i <= name.size(); ++i) {
    if (i == name.size() || name[i] == '.') {
      if (i == label_start) return false;  // empty label
      const char first = name[label_start], last = name[i - 1];
      if (first == '-' || last == '-') return false;
      label_start = i + 1;
      continue;
    }
    const char c = name[i];
    if (!(c >= 'a' && c <= 'z') && !IsAsciiDigit(c) && c != '-') return false;
  }
  return true;
}

}  // namespace feedguard::controller
