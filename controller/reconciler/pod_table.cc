#include "controller/reconciler/pod_table.h"

#include <functional>
#include <utility>

namespace feedguard::controller {

size_t PodTable::Hash::operator()(const Key& k) const noexcept {
  const size_t h = std::hash<std::string_view>{}(k.ns);
  return h * 1000003u ^ std::hash<std::string_view>{}(k.name);
}

PodInfo* PodTable::Find(std::string_view ns, std::string_view name) {
  auto it = pods_.find(Key{ns, name});
  // A set hands out its elements as const because their hash must not change. The element is
  // not a const object; writes through this pointer go through Replace, which keeps the
  // namespace and name (the hash) as they are.
  return it == pods_.end() ? nullptr : const_cast<PodInfo*>(&*it);
}

const PodInfo& PodTable::Insert(PodInfo pod) { return *pods_.insert(std::move(pod)).first; }

bool PodTable::Replace(PodInfo& stored, PodInfo pod) {
  if (!Eq::Same(KeyOf(stored), KeyOf(pod))) return false;
  stored = std::move(pod);
  return true;
}

void PodTable::Erase(const PodInfo& stored) {
  if (auto it = pods_.find(KeyOf(stored)); it != pods_.end()) pods_.erase(it);
}

}  // namespace feedguard::controller
