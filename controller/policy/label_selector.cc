#include "controller/policy/label_selector.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace feedguard::controller {

Result<LabelSelector> LabelSelector::FromJson(const nlohmann::json& j, const std::string& field) {
  LabelSelector s;
  if (j.is_null()) return s;
  if (!j.is_object()) return InvalidArgument(field + ": must be an object");
  if (auto it = j.find("matchLabels"); it != j.end() && !it->is_null()) {
    if (!it->is_object()) return InvalidArgument(field + ".matchLabels: must be a map");
    for (auto& [k, v] : it->items()) {
      if (!v.is_string())
        return InvalidArgument(field + ".matchLabels." + k + ": must be a string");
      s.match_labels_[k] = v.get<std::string>();
    }
  }
  if (auto it = j.find("matchExpressions"); it != j.end() && !it->is_null()) {
    if (!it->is_array()) return InvalidArgument(field + ".matchExpressions: must be a list");
    int i = 0;
    for (const auto& e : *it) {
      std::string f = field + ".matchExpressions[" + std::to_string(i++) + "]";
      Requirement r;
      r.key = e.value("key", "");
      if (r.key.empty()) return InvalidArgument(f + ".key: required");
      std::string op = e.value("operator", "");
      if (op == "In")
        r.op = Op::kIn;
      else if (op == "NotIn")
        r.op = Op::kNotIn;
      else if (op == "Exists")
        r.op = Op::kExists;
      else if (op == "DoesNotExist")
        r.op = Op::kDoesNotExist;
      else
        return InvalidArgument(f + ".operator: \"" + op +
                               "\" is not In, NotIn, Exists or DoesNotExist");
      if (auto v = e.find("values"); v != e.end() && v->is_array()) {
        for (const auto& x : *v) r.values.push_back(x.get<std::string>());
      }
      bool needs_values = r.op == Op::kIn || r.op == Op::kNotIn;
      if (needs_values && r.values.empty())
        return InvalidArgument(f + ".values: required for " + op);
      if (!needs_values && !r.values.empty())
        return InvalidArgument(f + ".values: must be empty for " + op);
      s.expressions_.push_back(std::move(r));
    }
  }
  return s;
}

bool LabelSelector::Matches(const Labels& labels) const {
  for (const auto& [k, v] : match_labels_) {
    auto it = labels.find(k);
    if (it == labels.end() || it->second != v) return false;
  }
  for (const auto& r : expressions_) {
    auto it = labels.find(r.key);
    bool has = it != labels.end();
    bool in = has && std::find(r.values.begin(), r.values.end(), it->second) != r.values.end();
    switch (r.op) {
      case Op::kIn:
        if (!in) return false;
        break;
      case Op::kNotIn:
        if (in) return false;
        break;
      case Op::kExists:
        if (!has) return false;
        break;
      case Op::kDoesNotExist:
        if (has) return false;
        break;
    }
  }
  return true;
}

Labels LabelsFromJson(const nlohmann::json& j) {
  Labels out;
  if (!j.is_object()) return out;
  for (auto& [k, v] : j.items())
    if (v.is_string()) out[k] = v.get<std::string>();
  return out;
}

}  // namespace feedguard::controller
