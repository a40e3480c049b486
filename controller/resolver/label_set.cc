#include "controller/resolver/label_set.h"

#include <algorithm>
#include <functional>

namespace feedguard::controller {

LabelSet::LabelSet(const Labels& labels) {
  entries_.reserve(labels.size());
  for (const auto& [k, v] : labels) entries_.emplace_back(SharedString(k), SharedString(v));
  // A map is sorted by key already; entries_ keeps that order.
}

const std::string* LabelSet::Find(std::string_view key) const {
  auto it = std::lower_bound(entries_.begin(), entries_.end(), key,
                             [](const Entry& e, std::string_view k) { return e.first.get() < k; });
  if (it == entries_.end() || it->first.get() != key) return nullptr;
  return &it->second.get();
}

bool LabelSet::operator==(const LabelSet& other) const { return entries_ == other.entries_; }

LabelSet LabelSet::Interned(InternPool<std::string>& strings) const {
  LabelSet out;
  out.entries_.reserve(entries_.size());
  for (const auto& [k, v] : entries_)
    out.entries_.emplace_back(strings.Intern(k), strings.Intern(v));
  return out;
}

Labels LabelSet::ToMap() const {
  Labels out;
  for (const auto& [k, v] : entries_) out.emplace(k.get(), v.get());
  return out;
}

size_t InternHash(const LabelSet& labels) {
  size_t h = labels.size();
  for (const auto& [k, v] : labels) {
    h = h * 1000003u ^ std::hash<std::string>{}(k.get());
    h = h * 1000003u ^ std::hash<std::string>{}(v.get());
  }
  return h;
}

}  // namespace feedguard::controller
