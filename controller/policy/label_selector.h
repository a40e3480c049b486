// label_selector.h — Kubernetes metav1.LabelSelector: parse from JSON and match label sets.
#pragma once

#include <algorithm>
#include <concepts>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "feedguard/common/enum_names.h"
#include "feedguard/common/status.h"

namespace feedguard::controller {

using Labels = std::map<std::string, std::string>;

class LabelSelector {
 public:
  enum class Op { kIn, kNotIn, kExists, kDoesNotExist };
  struct Requirement {
    std::string key;
    Op op = Op::kIn;
    std::vector<std::string> values;
  };

  // An empty selector ({}) matches everything, as in Kubernetes.
  LabelSelector() = default;
  // `field` names the selector in error messages, e.g. "spec.trainers.podSelector". Every
  // member is type-checked and validated as the CRD does (label key and value syntax, list and
  // map sizes, values required for In/NotIn and forbidden for Exists/DoesNotExist); the error
  // names the offending field: "sel.matchExpressions[0].key: expected string".
  static Result<LabelSelector> FromJson(const nlohmann::json& j, const std::string& field);

  bool Matches(const Labels& labels) const;
  // Any other label set with `const std::string* Find(key)` (null: no such label), e.g. the
  // pods' LabelSet (controller/resolver/label_set.h).
  template <class Set>
  requires requires(const Set& set, const std::string& key) {
    { set.Find(key) } -> std::convertible_to<const std::string*>;
  }
  bool Matches(const Set& labels) const {
    return MatchesBy([&labels](const std::string& key) { return labels.Find(key); });
  }
  bool empty() const { return match_labels_.empty() && expressions_.empty(); }
  // Whether some condition requires a label to be present (a matchLabels entry, In or Exists).
  // A selector without one (only NotIn / DoesNotExist) matches every pod that lacks a label.
  bool HasPositiveRequirement() const;
  // Same requirements (order of matchExpressions and of their values ignored).
  bool Equivalent(const LabelSelector& other) const;
  // Whether some label set matches: "" when one does, else why none can (contradictory
  // requirements on one key: `In [a]` with `NotIn [a]`, `Exists` with `DoesNotExist`, two
  // matchLabels/In sets without a common value). Exact for every selector.
  std::string WhyUnsatisfiable() const;
  // Whether every label set this selector matches is matched by `other` too (this ⊆ other).
  // Sound, not complete: true only when it follows key by key from the requirements (e.g.
  // {a: x, b: y} implies {a: x}; `In [x]` implies `Exists` and `NotIn [z]`).
  bool Implies(const LabelSelector& other) const;

  const Labels& match_labels() const { return match_labels_; }
  const std::vector<Requirement>& expressions() const { return expressions_; }

 private:
  // Whether a label set satisfies the requirement `op`: `has` the key, its value `in` the values.
  static bool Holds(Op op, bool has, bool in);
  // `find(key)`: the set's value of that label, null when it has none.
  template <class Find>
  bool MatchesBy(const Find& find) const {
    for (const auto& [k, v] : match_labels_) {
      const std::string* got = find(k);
      if (got == nullptr || *got != v) return false;
    }
    for (const auto& r : expressions_) {
      const std::string* got = find(r.key);
      const bool has = got != nullptr;
      const bool in = has && std::find(r.values.begin(), r.values.end(), *got) != r.values.end();
      if (!Holds(r.op, has, in)) return false;
    }
    return true;
  }

  Labels match_labels_;
  std::vector<Requirement> expressions_;
};

// matchExpressions[].operator as Kubernetes spells it.
inline constexpr EnumNames<LabelSelector::Op, 4> kLabelOpNames{
    {{LabelSelector::Op::kIn, "In"},
     {LabelSelector::Op::kNotIn, "NotIn"},
     {LabelSelector::Op::kExists, "Exists"},
     {LabelSelector::Op::kDoesNotExist, "DoesNotExist"}}};
static_assert(EnumTableComplete(kLabelOpNames));

Labels LabelsFromJson(const nlohmann::json& j);  // metadata.labels; missing → empty

// Kubernetes label syntax: a key is an optional DNS-subdomain prefix and "/" followed by a
// name of at most 63 characters ([A-Za-z0-9][-A-Za-z0-9_.]*[A-Za-z0-9]); a value is empty or
// such a name. An empty string when valid, else what is wrong.
std::string CheckLabelKey(const std::string& key);
std::string CheckLabelValue(const std::string& value);

// Selector limits (the CRD's maxProperties / maxItems).
inline constexpr size_t kMaxMatchLabels = 64;
inline constexpr size_t kMaxMatchExpressions = 32;
inline constexpr size_t kMaxExpressionValues = 64;

}  // namespace feedguard::controller
