#include "controller/policy/label_selector.h"

#include <algorithm>
#include <set>

#include <nlohmann/json.hpp>

#include "controller/sanitize/sanitize.h"

namespace feedguard::controller {
namespace {

bool IsAlnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

// A label name or value: [A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?, at most 63 characters.
bool IsLabelName(const std::string& s) {
  if (s.empty() || s.size() > 63 || !IsAlnum(s.front()) || !IsAlnum(s.back())) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return IsAlnum(c) || c == '-' || c == '_' || c == '.'; });
}

}  // namespace

bool LabelSelector::Holds(Op op, bool has, bool in) {
  switch (op) {
    case LabelSelector::Op::kIn:
      return in;
    case LabelSelector::Op::kNotIn:
      return !in;
    case LabelSelector::Op::kExists:
      return has;
    case LabelSelector::Op::kDoesNotExist:
      return !has;
  }
  return false;
}

namespace {

// What one selector allows for one label key, all its requirements on that key combined.
struct KeyDomain {
  bool present = false;  // the label must be present (matchLabels, In, Exists)
  bool absent = false;   // the label must be absent (DoesNotExist)
  bool finite = false;   // `allowed` bounds the values (matchLabels, In)
  std::set<std::string> allowed;
  std::set<std::string> excluded;  // NotIn

  // The values the label may have (meaningful when finite).
  std::set<std::string> Values() const {
    std::set<std::string> out;
    for (const auto& v : allowed)
      if (!excluded.count(v)) out.insert(v);
    return out;
  }
  // Every label state this domain allows (absent, or one of its values) satisfies the
  // requirement `op values` on the same key.
  bool Satisfies(LabelSelector::Op op, const std::vector<std::string>& values) const {
    const std::set<std::string> b(values.begin(), values.end());
    const std::set<std::string> mine = Values();
    const bool no_values = absent || (finite && mine.empty());
    switch (op) {
      case LabelSelector::Op::kIn:
        if (!present || no_values || !finite) return false;
        return std::includes(b.begin(), b.end(), mine.begin(), mine.end());
      case LabelSelector::Op::kNotIn:
        if (no_values) return true;
        if (finite) {
          for (const auto& v : mine)
            if (b.count(v)) return false;
          return true;
        }
        return std::includes(excluded.begin(), excluded.end(), b.begin(), b.end());
      case LabelSelector::Op::kExists:
        return present;
      case LabelSelector::Op::kDoesNotExist:
        return no_values;
    }
    return false;
  }
};

// Every key `s` constrains, with what it allows there.
std::map<std::string, KeyDomain> Domains(const LabelSelector& s) {
  using Op = LabelSelector::Op;
  std::map<std::string, KeyDomain> out;
  auto narrow = [&](const std::string& key, const std::vector<std::string>& values) {
    auto& d = out[key];
    const std::set<std::string> in(values.begin(), values.end());
    if (!d.finite) {
      d.allowed = in;
      d.finite = true;
    } else {
      std::set<std::string> both;
      for (const auto& v : d.allowed)
        if (in.count(v)) both.insert(v);
      d.allowed = std::move(both);
    }
    d.present = true;
  };
  for (const auto& [k, v] : s.match_labels()) narrow(k, {v});
  for (const auto& r : s.expressions()) {
    switch (r.op) {
      case Op::kIn:
        narrow(r.key, r.values);
        break;
      case Op::kNotIn:
        out[r.key].excluded.insert(r.values.begin(), r.values.end());
        break;
      case Op::kExists:
        out[r.key].present = true;
        break;
      case Op::kDoesNotExist:
        out[r.key].absent = true;
        break;
    }
  }
  return out;
}

}  // namespace

std::string CheckLabelKey(const std::string& key) {
  if (key.empty()) return "must not be empty";
  if (key.size() > 317) return "must be at most 317 characters";
  std::string name = key;
  if (auto slash = key.find('/'); slash != std::string::npos) {
    if (!IsDnsSubdomain(key.substr(0, slash))) {
      return "prefix before \"/\" must be a DNS subdomain (lowercase, at most 253 characters)";
    }
    name = key.substr(slash + 1);
  }
  if (!IsLabelName(name)) {
    return "name must be at most 63 characters of letters, digits, \"-\", \"_\" and \".\", "
           "starting and ending with a letter or digit";
  }
  return "";
}

std::string CheckLabelValue(const std::string& value) {
  if (value.empty() || IsLabelName(value)) return "";
  return "must be at most 63 characters of letters, digits, \"-\", \"_\" and \".\", starting "
         "and ending with a letter or digit";
}

Result<LabelSelector> LabelSelector::FromJson(const nlohmann::json& j, const std::string& field) {
  LabelSelector s;
  if (j.is_null()) return s;
  if (!j.is_object()) return InvalidArgument(field + ": expected object");
  if (auto it = j.find("matchLabels"); it != j.end() && !it->is_null()) {
    const std::string f = field + ".matchLabels";
    if (!it->is_object()) return InvalidArgument(f + ": expected map of strings");
    if (it->size() > kMaxMatchLabels) {
      return InvalidArgument(f + ": at most " + std::to_string(kMaxMatchLabels) + " entries");
    }
    for (auto& [k, v] : it->items()) {
      const std::string kf = f + "." + SafeText(k, 317);
      if (std::string why = CheckLabelKey(k); !why.empty()) {
        return InvalidArgument(kf + ": label key " + why);
      }
      if (!v.is_string()) return InvalidArgument(kf + ": expected string");
      if (std::string why = CheckLabelValue(v.get<std::string>()); !why.empty()) {
        return InvalidArgument(kf + ": label value " + why);
      }
      s.match_labels_[k] = v.get<std::string>();
    }
  }
  if (auto it = j.find("matchExpressions"); it != j.end() && !it->is_null()) {
    if (!it->is_array()) return InvalidArgument(field + ".matchExpressions: expected list");
    if (it->size() > kMaxMatchExpressions) {
      return InvalidArgument(field + ".matchExpressions: at most " +
                             std::to_string(kMaxMatchExpressions) + " entries");
    }
    int i = 0;
    for (const auto& e : *it) {
      std::string f = field + ".matchExpressions[" + std::to_string(i++) + "]";
      if (!e.is_object()) return InvalidArgument(f + ": expected object");
      Requirement r;
      auto key = e.find("key");
      if (key == e.end() || key->is_null()) return InvalidArgument(f + ".key: required");
      if (!key->is_string()) return InvalidArgument(f + ".key: expected string");
      r.key = key->get<std::string>();
      if (std::string why = CheckLabelKey(r.key); !why.empty()) {
        return InvalidArgument(f + ".key: label key " + why);
      }
      auto opj = e.find("operator");
      if (opj == e.end() || opj->is_null()) return InvalidArgument(f + ".operator: required");
      if (!opj->is_string()) return InvalidArgument(f + ".operator: expected string");
      const std::string op = opj->get<std::string>();
      if (auto parsed = FromName(kLabelOpNames, op)) {
        r.op = *parsed;
      } else {
        return InvalidArgument(f + ".operator: \"" + SafeText(op, 64) +
                               "\" is not In, NotIn, Exists or DoesNotExist");
      }
      if (auto v = e.find("values"); v != e.end() && !v->is_null()) {
        if (!v->is_array()) return InvalidArgument(f + ".values: expected list of strings");
        if (v->size() > kMaxExpressionValues) {
          return InvalidArgument(f + ".values: at most " + std::to_string(kMaxExpressionValues) +
                                 " entries");
        }
        int k = 0;
        for (const auto& x : *v) {
          const std::string xf = f + ".values[" + std::to_string(k++) + "]";
          if (!x.is_string()) return InvalidArgument(xf + ": expected string");
          if (std::string why = CheckLabelValue(x.get<std::string>()); !why.empty()) {
            return InvalidArgument(xf + ": label value " + why);
          }
          r.values.push_back(x.get<std::string>());
        }
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
  return MatchesBy([&labels](const std::string& key) -> const std::string* {
    auto it = labels.find(key);
    return it == labels.end() ? nullptr : &it->second;
  });
}

bool LabelSelector::HasPositiveRequirement() const {
  if (!match_labels_.empty()) return true;
  return std::any_of(expressions_.begin(), expressions_.end(),
                     [](const Requirement& r) { return r.op == Op::kIn || r.op == Op::kExists; });
}

bool LabelSelector::Equivalent(const LabelSelector& other) const {
  auto canonical = [](const LabelSelector& s) {
    std::vector<std::string> out;
    for (const auto& [k, v] : s.match_labels_) out.push_back(k + "\n=\n" + v);
    for (const auto& r : s.expressions_) {
      std::vector<std::string> values = r.values;
      std::sort(values.begin(), values.end());
      values.erase(std::unique(values.begin(), values.end()), values.end());
      std::string one = r.key + "\n" + std::string(NameOf(kLabelOpNames, r.op, ""));
      for (const auto& v : values) one += "\n" + v;
      out.push_back(std::move(one));
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  };
  return canonical(*this) == canonical(other);
}

std::string LabelSelector::WhyUnsatisfiable() const {
  for (const auto& [key, d] : Domains(*this)) {
    if (d.present && d.absent) {
      return "label \"" + key + "\" is required both to exist and not to exist";
    }
    if (d.finite && d.Values().empty()) {
      return "no value of label \"" + key + "\" satisfies every requirement on it";
    }
  }
  return "";
}

bool LabelSelector::Implies(const LabelSelector& other) const {
  const auto mine = Domains(*this);
  static const KeyDomain kUnconstrained;
  auto domain = [&](const std::string& key) -> const KeyDomain& {
    auto it = mine.find(key);
    return it == mine.end() ? kUnconstrained : it->second;
  };
  for (const auto& [k, v] : other.match_labels_) {
    if (!domain(k).Satisfies(Op::kIn, {v})) return false;
  }
  for (const auto& r : other.expressions_) {
    if (!domain(r.key).Satisfies(r.op, r.values)) return false;
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
