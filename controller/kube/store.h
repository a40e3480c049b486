// store.h — a thread-safe object cache keyed by "<namespace>/<name>" with secondary indexes
// (e.g. pods by node name), filled by a Reflector. Objects are shared immutable JSON so readers
// and handlers never copy them.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "controller/kube/resource.h"

namespace feedguard::kube {

using ObjectPtr = std::shared_ptr<const Json>;
// Index values an object is filed under (none, one or several).
using IndexFunc = std::function<std::vector<std::string>(const Json&)>;

// Index pods by spec.nodeName (unscheduled pods are not indexed).
IndexFunc PodNodeNameIndex();

class Store {
 public:
  explicit Store(std::map<std::string, IndexFunc> indexers = {});

  // Inserts or replaces; returns the previous object (null when new).
  ObjectPtr Upsert(ObjectPtr obj);
  // Removes by key; returns the removed object (null when absent).
  ObjectPtr Remove(const std::string& key);
  // Replaces the whole content (a relist).
  void Replace(std::vector<ObjectPtr> objects);

  ObjectPtr Get(const std::string& key) const;
  std::vector<ObjectPtr> List() const;
  std::vector<std::string> Keys() const;
  // Objects filed under `value` in index `index` (empty for an unknown index).
  std::vector<ObjectPtr> ByIndex(const std::string& index, const std::string& value) const;
  size_t size() const;

 private:
  void IndexLocked(const std::string& key, const Json& obj);
  void UnindexLocked(const std::string& key, const Json& obj);

  const std::map<std::string, IndexFunc> indexers_;
  mutable std::shared_mutex mu_;
  std::unordered_map<std::string, ObjectPtr> items_;  // guarded by mu_
  // index name → value → keys; guarded by mu_
  std::map<std::string, std::unordered_map<std::string, std::set<std::string>>> indexes_;
};
using StorePtr = std::shared_ptr<Store>;

}  // namespace feedguard::kube
