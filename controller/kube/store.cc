#include "controller/kube/store.h"

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

Store::Store(std::map<std::string, IndexFunc> indexers) : indexers_(std::move(indexers)) {
  for (const auto& [name, fn] : indexers_) indexes_[name];
}

void Store::IndexLocked(const std::string& key, const Json& obj) {
  for (const auto& [name, fn] : indexers_) {
    for (const auto& v : fn(obj)) indexes_[name][v].insert(key);
  }
}

void Store::UnindexLocked(const std::string& key, const Json& obj) {
  for (const auto& [name, fn] : indexers_) {
    auto& idx = indexes_[name];
    for (const auto& v : fn(obj)) {
      auto it = idx.find(v);
      if (it == idx.end()) continue;
      it->second.erase(key);
      if (it->second.empty()) idx.erase(it);
    }
  }
}

ObjectPtr Store::Upsert(ObjectPtr obj) {
  const std::string key = ObjectKey(*obj);
  std::unique_lock lock(mu_);
  ObjectPtr& slot = items_[key];
  ObjectPtr old = std::move(slot);
  if (old) UnindexLocked(key, *old);
  IndexLocked(key, *obj);
  slot = std::move(obj);
  return old;
}

ObjectPtr Store::Remove(const std::string& key) {
  std::unique_lock lock(mu_);
  auto it = items_.find(key);
  if (it == items_.end()) return nullptr;
  ObjectPtr old = std::move(it->second);
  items_.erase(it);
  UnindexLocked(key, *old);
  return old;
}

void Store::Replace(std::vector<ObjectPtr> objects) {
  std::unique_lock lock(mu_);
  items_.clear();
  for (auto& [name, idx] : indexes_) idx.clear();
  items_.reserve(objects.size());
  for (auto& o : objects) {
    const std::string key = ObjectKey(*o);
    IndexLocked(key, *o);
    items_[key] = std::move(o);
  }
}

ObjectPtr Store::Get(const std::string& key) const {
  std::shared_lock lock(mu_);
  auto it = items_.find(key);
  return it == items_.end() ? nullptr : it->second;
}

std::vector<ObjectPtr> Store::List() const {
  std::shared_lock lock(mu_);
  std::vector<ObjectPtr> out;
  out.reserve(items_.size());
  for (const auto& [k, v] : items_) out.push_back(v);
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
  for (const auto& k : keys->second) out.push_back(items_.at(k));
  return out;
}

size_t Store::size() const {
  std::shared_lock lock(mu_);
  return items_.size();
}

}  // namespace feedguard::kube
