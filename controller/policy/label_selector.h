// label_selector.h — Kubernetes metav1.LabelSelector: parse from JSON and match label sets.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

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
  // `field` names the selector in error messages, e.g. "spec.trainers.podSelector".
  static Result<LabelSelector> FromJson(const nlohmann::json& j, const std::string& field);

  bool Matches(const Labels& labels) const;
  bool empty() const { return match_labels_.empty() && expressions_.empty(); }

 private:
  Labels match_labels_;
  std::vector<Requirement> expressions_;
};

Labels LabelsFromJson(const nlohmann::json& j);  // metadata.labels; missing → empty

}  // namespace feedguard::controller
