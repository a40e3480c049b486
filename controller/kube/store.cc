#include "controller/kube/store.h"

#include <charconv>

namespace feedguard::kube {

IndexFunc PodNodeNameIndex() {
  return [](const Json& pod) -> std::vector<std::string> {
    auto spec = pod.find("spec");
    if (spec == pod.end() || !spec->is_object()) return {};
    auto node = spec->find("nodeName");
    if (node == spec->end() || !node->is_string() || node->get<std::string>().empty()) return {};
    return {node->get<std::string>()};
  };
}

uint64_t VersionFingerprint(const std::string& rv) {
  uint64_t n = 0;
  if (!rv.empty() && rv.size() <= 18 && rv.find_first_not_of("0123456789") == std::string::npos) {
    std::from_chars(rv.data(), rv.data() + rv.size(), n);
    return n;
  }
  // Never equal to a decimal one (those are < 10^18 < 2^63: top bit clear).
  return std::hash<std::string>{}(rv) | (uint64_t{1} << 63);
}

Store::Store(std::map<std::string, IndexFunc> indexers)
    : Store(StoreOptions{true, std::move(indexers)}) {}

Store::Store(StoreOptions options) : options_(std::move(options)) {
  if (options_.keep_objects) {
    for (const auto& [name, fn] : options_.indexers) indexes_[name];
  }
}

void Store::IndexLocked(const std::string& key, const Json& obj) {
  for (const auto& [name, fn] : options_.indexers) {
    for (const auto& v : fn(obj)) indexes_[name][v].insert(key);
  }
}

void Store::UnindexLocked(const std::string& key, const Json& obj) {
  for (const auto& [name, fn] : options_.indexers) {
    auto& idx = indexes_[name];
    for (const auto& v : fn(obj)) {
      auto it = idx.find(v);
      if (it == idx.end()) continue;
      it->second.erase(key);
      if (it->second.empty()) idx.erase(it);
    }
  }
}

ObjectPtr Store::TakeObjectLocked(const std::string& key) {
  if (!options_.keep_objects) return nullptr;  // a versions-only store: no lookup per event
  auto it = objects_.find(key);
  if (it == objects_.end()) return nullptr;
  ObjectPtr obj = std::move(it->second);
  objects_.erase(it);
  UnindexLocked(key, *obj);
  return obj;
}

Store::Previous Store::Put(ObjectPtr obj, uint64_t epoch) {
  std::string key = ObjectKey(*obj);
  const uint64_t version = VersionFingerprint(ResourceVersionOf(*obj));
  std::unique_lock lock(mu_);
  auto [it, inserted] = items_.try_emplace(std::move(key));
  it->second = Entry{version, epoch};
  Previous prev{!inserted, nullptr};
  if (options_.keep_objects) {
    prev.object = TakeObjectLocked(it->first);
    IndexLocked(it->first, *obj);
    objects_.emplace(it->first, std::move(obj));
  }
  return prev;
}

Store::Previous Store::Erase(const std::string& key) {
  std::unique_lock lock(mu_);
  auto it = items_.find(key);
  if (it == items_.end()) return {};
  Previous prev{true, TakeObjectLocked(key)};
  items_.erase(it);
  return prev;
}

bool Store::MarkIfSame(const std::string& key, const std::string& rv, uint64_t epoch) {
  std::unique_lock lock(mu_);
  auto it = items_.find(key);
  if (it == items_.end()) return false;
  it->second.epoch = epoch;
  return it->second.version == VersionFingerprint(rv);
}

std::vector<std::pair<std::string, ObjectPtr>> Store::SweepOlderThan(uint64_t epoch) {
  std::vector<std::pair<std::string, ObjectPtr>> gone;
  std::unique_lock lock(mu_);
  for (auto it = items_.begin(); it != items_.end();) {
    if (it->second.epoch >= epoch) {
      ++it;
      continue;
    }
    ObjectPtr obj = TakeObjectLocked(it->first);
    gone.emplace_back(it->first, std::move(obj));
    it = items_.erase(it);
  }
  return gone;
}

void Store::Replace(std::vector<ObjectPtr> objects) {
  {
    std::unique_lock lock(mu_);
    items_.clear();
    objects_.clear();
    for (auto& [name, idx] : indexes_) idx.clear();
    items_.reserve(objects.size());
  }
  for (auto& o : objects) Put(std::move(o));
}

bool Store::Contains(const std::string& key) const {
  std::shared_lock lock(mu_);
  return items_.count(key) > 0;
}

ObjectPtr Store::Get(const std::string& key) const {
  std::shared_lock lock(mu_);
  auto it = objects_.find(key);
  return it == objects_.end() ? nullptr : it->second;
}

std::vector<ObjectPtr> Store::List() const {
  std::shared_lock lock(mu_);
  std::vector<ObjectPtr> out;
  out.reserve(objects_.size());
  for (const auto& [k, o] : objects_) out.push_back(o);
  return out;
}

std::vector<std::string> Store::Keys() const {
  std::shared_lock lock(mu_);
  std::vector<std::string> out;
  out.reserve(items_.size());
  for (const auto& [k, v] : items_) out.push_back(k);
  return out;
}

std::vector<ObjectPtr> Store::ByIndex(const std::string& index, const std::string& value) const {
  std::shared_lock lock(mu_);
  std::vector<ObjectPtr> out;
  auto idx = indexes_.find(index);
  if (idx == indexes_.end()) return out;
  auto keys = idx->second.find(value);
  if (keys == idx->second.end()) return out;
  for (const auto& k : keys->second) out.push_back(objects_.at(k));
  return out;
}

size_t Store::size() const {
  std::shared_lock lock(mu_);
  return items_.size();
}

}  // namespace feedguard::kube
