// pod_table.h — the reconciler's one copy of each scheduled pod, found by the informer's key
// (namespace and name) without holding that key a second time: the table is hashed on the
// record's own namespace and name (150,000 pods: ~10 MB of keys not kept).
#pragma once

#include <cstddef>
#include <string_view>
#include <unordered_set>

#include "controller/resolver/cluster_objects.h"

namespace feedguard::controller {

class PodTable {
 public:
  // The stored pod of that namespace and name, or null. Records never move while stored (the
  // reconciler's per-node lists point at them).
  PodInfo* Find(std::string_view ns, std::string_view name);
  // Stores a pod whose key is not present yet; returns the stored record.
  const PodInfo& Insert(PodInfo pod);
  // Replaces a stored record in place with a pod of the same namespace and name; false (and
  // nothing changed) for a pod of another.
  [[nodiscard]] bool Replace(PodInfo& stored, PodInfo pod);
  void Erase(const PodInfo& stored);
  size_t size() const { return pods_.size(); }

 private:
  struct Key {
    std::string_view ns, name;
  };
  static Key KeyOf(const PodInfo& p) { return {p.ns.get(), p.name}; }
  // noexcept, so the set does not cache each record's hash beside it (libstdc++ keeps it only
  // for hashes that may throw): 16 bytes less per pod (fg-pod-memory), for a rehash that hashes
  // names again.
  struct Hash {
    using is_transparent = void;
    size_t operator()(const Key& k) const noexcept;
    size_t operator()(const PodInfo& p) const noexcept { return (*this)(KeyOf(p)); }
  };
  struct Eq {
    using is_transparent = void;
    static bool Same(const Key& a, const Key& b) { return a.ns == b.ns && a.name == b.name; }
    bool operator()(const PodInfo& a, const PodInfo& b) const { return Same(KeyOf(a), KeyOf(b)); }
    bool operator()(const Key& a, const PodInfo& b) const { return Same(a, KeyOf(b)); }
    bool operator()(const PodInfo& a, const Key& b) const { return Same(KeyOf(a), b); }
  };
  std::unordered_set<PodInfo, Hash, Eq> pods_;
};

}  // namespace feedguard::controller
