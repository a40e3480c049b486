// cpuset.h — a set of CPU (or NUMA node) ids with the kernel's list syntax ("0-3,8,10-11").
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "feedguard/common/status.h"

namespace feedguard {

class CpuSet {
 public:
  CpuSet() = default;
  CpuSet(std::initializer_list<int> ids) : ids_(ids) {}
  static CpuSet Range(int first, int last);  // inclusive

  // Parses the kernel list format used by cpuset.cpus, Cpus_allowed_list, local_cpulist.
  // Whitespace and a trailing newline are accepted; an empty string is the empty set.
  static Result<CpuSet> Parse(std::string_view text);
  // The canonical kernel list format, e.g. "0-3,8". Empty set → "".
  std::string ToString() const;

  bool empty() const { return ids_.empty(); }
  size_t size() const { return ids_.size(); }
  bool Contains(int id) const { return ids_.count(id) != 0; }
  bool IsSubsetOf(const CpuSet& other) const;
  bool Intersects(const CpuSet& other) const;
  void Insert(int id) { ids_.insert(id); }
  void Erase(int id) { ids_.erase(id); }
  CpuSet Union(const CpuSet& other) const;
  CpuSet Intersect(const CpuSet& other) const;
  CpuSet Minus(const CpuSet& other) const;
  std::vector<int> ToVector() const { return {ids_.begin(), ids_.end()}; }
  auto begin() const { return ids_.begin(); }
  auto end() const { return ids_.end(); }

  friend bool operator==(const CpuSet& a, const CpuSet& b) { return a.ids_ == b.ids_; }

 private:
  std::set<int> ids_;
};

}  // namespace feedguard
