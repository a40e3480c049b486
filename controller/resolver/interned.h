// interned.h — values that pod records share: one copy of each label set, label key and value,
// namespace, node, priority class and phase among 150,000 pods (Shared<T>, InternPool<T>).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <string>
#include <type_traits>
#include <unordered_set>
#include <utility>

namespace feedguard::controller {

// An immutable value that records share: the replicas of one ReplicaSet, Job or StatefulSet
// carry the same labels (a Deployment pod's six labels are ~800 bytes as a map of their own),
// and 150,000 pods name a few thousand nodes and namespaces, a handful of priority classes and
// phases. InternPool hands equal values one copy. One pointer (8 bytes; a pod record holds
// seven) to the value and its reference count, counted atomically as a shared_ptr's is; reads
// as `const T&`. An empty value holds nothing.
template <class T>
class Shared {
 public:
  Shared() = default;
  Shared(T value)  // NOLINT(google-explicit-constructor): a T is a value to share
      : n_(value.empty() ? nullptr : new Node(std::move(value))) {}
  // Strings from literals (tests, constants).
  Shared(const char* s)  // NOLINT(google-explicit-constructor)
      requires std::is_same_v<T, std::string> : Shared(T(s)) {}
  Shared(const Shared& o) noexcept : n_(o.n_) {
    if (n_ != nullptr) n_->refs.fetch_add(1, std::memory_order_relaxed);
  }
  Shared(Shared&& o) noexcept : n_(std::exchange(o.n_, nullptr)) {}
  Shared& operator=(Shared o) noexcept {
    std::swap(n_, o.n_);
    return *this;
  }
  ~Shared() {
    // As shared_ptr: the last owner's release is ordered after every other owner's use.
    if (n_ != nullptr && n_->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete n_;
  }

  operator const T&() const { return get(); }  // NOLINT(google-explicit-constructor)
  const T& get() const { return n_ != nullptr ? n_->value : Empty(); }
  bool empty() const { return n_ == nullptr; }
  bool operator==(const Shared& o) const { return n_ == o.n_ || get() == o.get(); }
  bool operator==(const T& v) const { return get() == v; }
  bool operator==(const char* s) const requires std::is_same_v<T, std::string> {
    return get() == s;
  }

 private:
  template <class>
  friend class InternPool;
  struct Node {
    explicit Node(T v) : value(std::move(v)) {}
    std::atomic<size_t> refs{1};
    const T value;
  };
  size_t use_count() const { return n_ != nullptr ? n_->refs.load(std::memory_order_acquire) : 0; }
  static const T& Empty() {
    static const T kEmpty;  // an immutable constant, not state
    return kEmpty;
  }
  Node* n_ = nullptr;
};
using SharedString = Shared<std::string>;

size_t InternHash(const std::string& s);

// Interns values so equal ones share one copy. Not thread-safe (the reconciler calls it under
// its lock). Values no record uses any more are dropped when the pool has doubled since the last
// sweep.
template <class T>
class InternPool {
 public:
  Shared<T> Intern(Shared<T> value) {
    if (value.empty()) return value;
    auto [it, inserted] = values_.insert(std::move(value));
    Shared<T> out = *it;
    if (inserted && values_.size() >= sweep_at_) {
      // Only the pool holds a value no record uses (count 1); `out` holds the new one.
      std::erase_if(values_, [](const Shared<T>& v) { return v.use_count() == 1; });
      sweep_at_ = std::max<size_t>(1024, 2 * values_.size());
    }
    return out;
  }
  size_t size() const { return values_.size(); }

 private:
  struct Hash {
    size_t operator()(const Shared<T>& v) const { return InternHash(v.get()); }
  };
  struct Eq {
    bool operator()(const Shared<T>& a, const Shared<T>& b) const { return a.get() == b.get(); }
  };
  std::unordered_set<Shared<T>, Hash, Eq> values_;
  size_t sweep_at_ = 1024;
};

}  // namespace feedguard::controller
