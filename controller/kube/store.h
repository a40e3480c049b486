// store.h — what a Reflector has delivered, keyed by "<namespace>/<name>": the resourceVersion of
// every object (so a relist emits only the difference and a replayed watch event is skipped) and,
// when the store keeps objects, the object itself with secondary indexes (e.g. pods by node name).
//
// A controller whose handlers keep their own compact projection (feedguard's reconciler) uses a
// versions-only store (`StoreOptions::keep_objects = false`): ~110 bytes per object with its key
// (fg-pod-memory), no JSON kept, so the informer does not hold a second copy of 150,000 pods.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "controller/kube/resource.h"

namespace feedguard::kube {

using ObjectPtr = std::shared_ptr<const Json>;
// Index values an object is filed under (none, one or several).
using IndexFunc = std::function<std::vector<std::string>(const Json&)>;

// Index pods by spec.nodeName (unscheduled pods are not indexed).
IndexFunc PodNodeNameIndex();

// A resourceVersion reduced to 64 bits for equality checks: the number itself when it is a
// decimal of at most 18 digits (etcd revisions, every version kube-apiserver hands out), else a
// hash of the string (opaque versions of an aggregated API; a collision — odds 2^-64 per change —
// would hide one update from a relist, never from a watch).
uint64_t VersionFingerprint(const std::string& resource_version);

struct StoreOptions {
  bool keep_objects = true;  // false: versions only (Get/List/ByIndex return nothing)
  std::map<std::string, IndexFunc> indexers;  // only with keep_objects
};

class Store {
 public:
  explicit Store(std::map<std::string, IndexFunc> indexers = {});
  explicit Store(StoreOptions options);

  // What was there before a Put or an Erase.
  struct Previous {
    bool existed = false;
    ObjectPtr object;  // null in a versions-only store
  };

  // Records `obj` (its key and resourceVersion) as seen in list pass `epoch`.
  Previous Put(ObjectPtr obj, uint64_t epoch = 0);
  // Removes by key.
  Previous Erase(const std::string& key);
  // Whether `key` is present with exactly this resourceVersion; if present at all, marks it as
  // seen in list pass `epoch` (a relist that finds it unchanged).
  bool MarkIfSame(const std::string& key, const std::string& resource_version, uint64_t epoch);
  // Removes every entry not seen in list pass `epoch`; returns their keys and objects (objects
  // null in a versions-only store).
  std::vector<std::pair<std::string, ObjectPtr>> SweepOlderThan(uint64_t epoch);

  // Inserts or replaces; returns the previous object (null when new or versions-only).
  ObjectPtr Upsert(ObjectPtr obj) { return Put(std::move(obj)).object; }
  // Removes by key; returns the removed object (null when absent or versions-only).
  ObjectPtr Remove(const std::string& key) { return Erase(key).object; }
  // Replaces the whole content.
  void Replace(std::vector<ObjectPtr> objects);

  bool Contains(const std::string& key) const;
  ObjectPtr Get(const std::string& key) const;
  std::vector<ObjectPtr> List() const;
  std::vector<std::string> Keys() const;
  // Objects filed under `value` in index `index` (empty for an unknown index).
  std::vector<ObjectPtr> ByIndex(const std::string& index, const std::string& value) const;
  size_t size() const;

 private:
  struct Entry {
    uint64_t version = 0;  // VersionFingerprint
    uint64_t epoch = 0;    // the last list pass that saw it
  };
  // noexcept, so that the map does not keep each key's hash beside it (libstdc++ caches the
  // hash only for hashes that may throw, or std::hash<std::string>): with the objects kept apart
  // a versions-only entry is one 64-byte allocation besides its key (fg-pod-memory).
  struct KeyHash {
    using is_transparent = void;
    size_t operator()(std::string_view key) const noexcept {
      return std::hash<std::string_view>{}(key);
    }
  };
  void IndexLocked(const std::string& key, const Json& obj);
  void UnindexLocked(const std::string& key, const Json& obj);
  // The kept object of `key` taken out of objects_ (null when none, or versions-only), unindexed.
  ObjectPtr TakeObjectLocked(const std::string& key);

  const StoreOptions options_;
  mutable std::shared_mutex mu_;
  std::unordered_map<std::string, Entry, KeyHash, std::equal_to<>> items_;  // guarded by mu_
  // Only with keep_objects: the objects, by key; guarded by mu_.
  std::unordered_map<std::string, ObjectPtr> objects_;
  // index name → value → keys; guarded by mu_
  std::map<std::string, std::unordered_map<std::string, std::set<std::string>>> indexes_;
};
using StorePtr = std::shared_ptr<Store>;

}  // namespace feedguard::kube
