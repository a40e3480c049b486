// label_set.h — a pod's labels as the controller keeps them: sorted (key, value) pairs of shared
// strings in one array.
//
// Pods of real workloads carry labels that differ per pod or per workload instance
// (controller-uid, job-name, batch.kubernetes.io/job-completion-index, pod-template-hash,
// statefulset.kubernetes.io/pod-name), so their label sets are seldom shared whole. As a
// std::map each label cost a 96-byte tree node plus a heap copy of every key and value over 15
// characters, for every distinct set. Here a label is two SharedStrings (16 bytes) and the
// strings themselves are interned across all pods (ClusterCache): the keys and most values
// exist once in the cluster.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "controller/policy/label_selector.h"
#include "controller/resolver/interned.h"

namespace feedguard::controller {

class LabelSet {
 public:
  using Entry = std::pair<SharedString, SharedString>;  // key, value

  LabelSet() = default;
  // From parsed labels (metadata.labels): the strings are this set's own until Interned().
  explicit LabelSet(const Labels& labels);

  // The value of `key`, or null.
  const std::string* Find(std::string_view key) const;
  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  std::vector<Entry>::const_iterator begin() const { return entries_.begin(); }
  std::vector<Entry>::const_iterator end() const { return entries_.end(); }
  // The same labels (keys and values compared as text).
  bool operator==(const LabelSet& other) const;
  // The same labels with every key and value taken from `strings` (one copy each among all
  // pods).
  LabelSet Interned(InternPool<std::string>& strings) const;
  Labels ToMap() const;

 private:
  std::vector<Entry> entries_;  // sorted by key, keys unique
};

using SharedLabelSet = Shared<LabelSet>;
using LabelSetPool = InternPool<LabelSet>;

size_t InternHash(const LabelSet& labels);

}  // namespace feedguard::controller
