#include "common/cpuset.h"

#include "common/strings.h"

#include <algorithm>
#include <charconv>

namespace feedguard {
namespace {

constexpr int kMaxCpuId = 1 << 16;  // far above any real machine; rejects garbage like "0-4e9"

// Why not hwloc_bitmap_list_sscanf: it accepts what a kernel cpu list never holds and the tests
// require rejected ("1-" is an infinite range in hwloc's list syntax) and reports no reason for
// a bad item; checking first would be this same parser, and common/ stays free of hwloc.

Result<int> ParseId(std::string_view s, std::string_view whole) {
  int v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size() || v < 0 || v > kMaxCpuId) {
    return InvalidArgument("bad cpu list \"" + std::string(whole) + "\": \"" + std::string(s) +
                           "\" is not a CPU id");
  }
  return v;
}

}  // namespace

CpuSet CpuSet::Range(int first, int last) {
  CpuSet s;
  for (int i = first; i <= last; ++i) s.ids_.insert(i);
  return s;
}

Result<CpuSet> CpuSet::Parse(std::string_view text) {
  CpuSet out;
  std::string_view rest = Trim(text);
  while (!rest.empty()) {
    size_t comma = rest.find(',');
    std::string_view item = Trim(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    if (item.empty())
      return InvalidArgument("bad cpu list \"" + std::string(text) + "\": empty item");
    size_t dash = item.find('-');
    if (dash == std::string_view::npos) {
      FG_ASSIGN_OR_RETURN(int id, ParseId(item, text));
      out.ids_.insert(id);
      continue;
    }
    FG_ASSIGN_OR_RETURN(int lo, ParseId(item.substr(0, dash), text));
    FG_ASSIGN_OR_RETURN(int hi, ParseId(item.substr(dash + 1), text));
    if (hi < lo) {
      return InvalidArgument("bad cpu list \"" + std::string(text) + "\": range " +
                             std::string(item) + " runs backwards");
    }
    for (int i = lo; i <= hi; ++i) out.ids_.insert(i);
  }
  return out;
}

std::string CpuSet::ToString() const {
  std::string out;
  auto it = ids_.begin();
  while (it != ids_.end()) {
    int lo = *it, hi = *it;
    for (++it; it != ids_.end() && *it == hi + 1; ++it) hi = *it;
    if (!out.empty()) out += ',';
    out += std::to_string(lo);
    if (hi != lo) out += '-' + std::to_string(hi);
  }
  return out;
}

bool CpuSet::IsSubsetOf(const CpuSet& other) const {
  return std::includes(other.ids_.begin(), other.ids_.end(), ids_.begin(), ids_.end());
}

bool CpuSet::Intersects(const CpuSet& other) const {
  for (int id : ids_)
    if (other.Contains(id)) return true;
  return false;
}

CpuSet CpuSet::Union(const CpuSet& other) const {
  CpuSet out = *this;
  out.ids_.insert(other.ids_.begin(), other.ids_.end());
  return out;
}

CpuSet CpuSet::Intersect(const CpuSet& other) const {
  CpuSet out;
  for (int id : ids_)
    if (other.Contains(id)) out.ids_.insert(id);
  return out;
}

CpuSet CpuSet::Minus(const CpuSet& other) const {
  CpuSet out;
  for (int id : ids_)
    if (!other.Contains(id)) out.ids_.insert(id);
  return out;
}

}  // namespace feedguard
