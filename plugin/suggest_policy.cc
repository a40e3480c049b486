#include "plugin/suggest_policy.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>

#include "common/json_member.h"
#include "plugin/report_view.h"

namespace feedguard::plugin {
namespace {

using Json = nlohmann::json;

constexpr size_t kMaxNameLength = 63;
constexpr size_t kMaxMatchLabels = 64;  // the CRD's matchLabels maxProperties
constexpr char kRoleLabel[] = "feedguard.io/role";
constexpr char kNamespaceNameLabel[] = "kubernetes.io/metadata.name";

constexpr std::array<std::string_view, 7> kPerInstanceLabels = {
    "pod-template-hash",
    "controller-revision-hash",
    "statefulset.kubernetes.io/pod-name",
    "apps.kubernetes.io/pod-index",
    "batch.kubernetes.io/controller-uid",
    "controller-uid",
    "batch.kubernetes.io/job-completion-index",
};

uint32_t Fnv1a(std::string_view s) {
  uint32_t h = 2166136261u;
  for (unsigned char c : s) {
    h ^= c;
    h *= 16777619u;
  }
  return h;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// A string YAML reads back as that same string without quotes: starts with a letter, holds
// only letters, digits and -_./, and is none of YAML 1.1's booleans or null.
bool PlainSafe(std::string_view s) {
  if (s.empty() || !std::isalpha(static_cast<unsigned char>(s.front()))) return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.' &&
        c != '/') {
      return false;
    }
  }
  static constexpr std::array<std::string_view, 9> kReserved = {"y",   "n",    "yes",   "no",  "on",
                                                                "off", "true", "false", "null"};
  const std::string lower = Lower(s);
  return std::find(kReserved.begin(), kReserved.end(), lower) == kReserved.end();
}

// A JSON string literal is a valid YAML double-quoted scalar with the same value.
std::string YamlString(const std::string& s) { return PlainSafe(s) ? s : Json(s).dump(); }

std::string YamlScalar(const Json& v) {
  if (v.is_string()) return YamlString(v.get<std::string>());
  if (v.is_null()) return "null";
  return v.dump();  // booleans and numbers read back as themselves
}

void EmitComments(const std::map<std::string, std::vector<std::string>>& comments,
                  const std::string& ptr, const std::string& pad, std::string* out) {
  auto it = comments.find(ptr);
  if (it == comments.end()) return;
  for (const auto& text : it->second) {
    if (text.empty()) *out += pad + "#\n";
    for (const auto& line : WrapText(text, 96 - pad.size())) *out += pad + "# " + line + "\n";
  }
}

void EmitObject(const Json& obj, size_t indent, const std::string& ptr,
                const std::map<std::string, std::vector<std::string>>& comments, std::string* out);

// The value of a key or a list item, after "key:" / "-" has been written.
void EmitValue(const Json& v, size_t indent, const std::string& ptr,
               const std::map<std::string, std::vector<std::string>>& comments, std::string* out) {
  if (v.is_object() && !v.empty()) {
    *out += "\n";
    EmitObject(v, indent + 2, ptr, comments, out);
  } else if (v.is_object()) {
    *out += " {}\n";
  } else if (v.is_array() && !v.empty()) {
    *out += "\n";
    const std::string pad(indent + 2, ' ');
    for (size_t i = 0; i < v.size(); ++i) {
      const Json& item = v[i];
      const std::string item_ptr = ptr + "/" + std::to_string(i);
      if (item.is_object() && !item.empty()) {
        // "- " then the item's keys two further in, the first on the dash's line.
        std::string sub;
        EmitObject(item, indent + 4, item_ptr, comments, &sub);
        sub.replace(0, indent + 4, pad + "- ");
        *out += sub;
      } else {
        *out += pad + "-";
        EmitValue(item, indent + 2, item_ptr, comments, out);
      }
    }
  } else if (v.is_array()) {
    *out += " []\n";
  } else {
    *out += " " + YamlScalar(v) + "\n";
  }
}

void EmitObject(const Json& obj, size_t indent, const std::string& ptr,
                const std::map<std::string, std::vector<std::string>>& comments, std::string* out) {
  const std::string pad(indent, ' ');
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    // JSON pointer escaping: "~" → "~0", "/" → "~1" (label keys hold '/').
    std::string escaped;
    for (char c : it.key()) {
      if (c == '~') {
        escaped += "~0";
      } else if (c == '/') {
        escaped += "~1";
      } else {
        escaped += c;
      }
    }
    const std::string child = ptr + "/" + escaped;
    EmitComments(comments, child, pad, out);
    *out += pad + YamlString(it.key()) + ":";
    EmitValue(it.value(), indent, child, comments, out);
  }
}

std::string Joined(const Labels& labels) {
  std::string out;
  for (const auto& [k, v] : labels) {
    if (!out.empty()) out += ", ";
    out += k + "=" + v;
  }
  return out;
}

}  // namespace

bool IsPerInstanceLabel(std::string_view key) {
  return std::find(kPerInstanceLabels.begin(), kPerInstanceLabels.end(), key) !=
         kPerInstanceLabels.end();
}

Labels StableLabels(const Json& pod) {
  Labels out;
  const Json& labels = JsonMember(JsonMember(pod, "metadata"), "labels");
  if (!labels.is_object()) return out;
  for (auto it = labels.begin(); it != labels.end(); ++it) {
    if (!it.value().is_string() || IsPerInstanceLabel(it.key())) continue;
    out.emplace(it.key(), it.value().get<std::string>());
  }
  return out;
}

Labels CommonLabels(const std::vector<Labels>& label_sets) {
  if (label_sets.empty()) return {};
  Labels common = label_sets.front();
  for (size_t i = 1; i < label_sets.size() && !common.empty(); ++i) {
    for (auto it = common.begin(); it != common.end();) {
      auto found = label_sets[i].find(it->first);
      if (found == label_sets[i].end() || found->second != it->second) {
        it = common.erase(it);
      } else {
        ++it;
      }
    }
  }
  return common;
}

std::string FencePolicyName(std::string_view pod_name) {
  std::string name = "fence-";
  for (char c : Lower(pod_name)) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
    name += ok ? c : '-';
  }
  auto trim = [](std::string* s) {
    while (!s->empty() && s->back() == '-') s->pop_back();
  };
  trim(&name);
  if (name.size() <= kMaxNameLength) return name;
  char hash[16];
  std::snprintf(hash, sizeof hash, "-%08x", Fnv1a(pod_name));
  name.resize(kMaxNameLength - 9);
  trim(&name);
  return name + hash;
}

PolicySuggestion SuggestPolicy(const SuggestInput& in) {
  PolicySuggestion s;
  const Json& meta = JsonMember(in.trainer, "metadata");
  const std::string ns = JsonStringOr(meta, "namespace", "default");
  const std::string name = JsonStringOr(meta, "name", "");

  // Trainers: this pod's labels that its replacement will carry too.
  Labels trainer = StableLabels(in.trainer);
  if (trainer.empty()) {
    s.trainer_labelled = false;
    trainer[kRoleLabel] = "trainer";
    s.notes.push_back(
        "The pod carries no label that its replacement would carry too: label it "
        "(and the template it comes from) so that this policy selects it:");
    s.notes.push_back("kubectl label pod -n " + ns + " " + name + " " + kRoleLabel + "=trainer");
  } else if (trainer.size() > kMaxMatchLabels) {
    trainer.erase(std::next(trainer.begin(), kMaxMatchLabels), trainer.end());
    s.notes.push_back("trainers: the first " + std::to_string(kMaxMatchLabels) +
                      " of the pod's labels (a selector holds at most " +
                      std::to_string(kMaxMatchLabels) + ").");
  }

  Json spec = Json::object();
  spec["mode"] = "DryRun";
  spec["trainers"] = {
      {"podSelector", {{"matchLabels", Json(trainer)}}},
      {"namespaceSelector", {{"matchLabels", {{kNamespaceNameLabel, ns}}}}},
      {"requireGPU", true},
  };

  // Neighbours: the labels every contender pod shares, else every other pod.
  std::vector<Labels> contender_labels;
  for (const Json& pod : in.contenders) contender_labels.push_back(StableLabels(pod));
  Labels common = CommonLabels(contender_labels);
  if (common.size() > kMaxMatchLabels) {
    common.erase(std::next(common.begin(), kMaxMatchLabels), common.end());
  }
  Json neighbours = {{"fence", "Idle"}};
  if (!common.empty()) {
    s.neighbours_by_label = true;
    neighbours["podSelector"] = {{"matchLabels", Json(common)}};
    s.notes.push_back(in.contenders.size() == 1
                          ? "neighbours: the one contender pod found carries " + Joined(common) +
                                "."
                          : "neighbours: the " + std::to_string(in.contenders.size()) +
                                " contender pods found all carry " + Joined(common) + ".");
  } else {
    s.neighbours_comment =
        "No podSelector: every other pod on the trainer's nodes is a neighbour (this policy fences "
        "neighbours only on nodes where it protects a trainer; kube-system, system-critical pods "
        "and the feedguard agent are never fenced).";
    s.notes.push_back(in.contenders.empty()
                          ? "neighbours: no contender pod left to select by label."
                          : "neighbours: the contender pods share no label.");
  }
  auto list_note = [&s](const std::vector<std::string>& pods, const std::string& what) {
    if (pods.empty()) return;
    std::string names;
    for (const auto& p : pods) names += (names.empty() ? "" : ", ") + p;
    s.notes.push_back(what + " (not considered): " + names + ".");
  };
  list_note(in.contenders_gone, "Contender pods that no longer exist");
  list_note(in.contenders_unreadable, "Contender pods you may not read (get pods)");
  spec["neighbours"] = std::move(neighbours);

  s.policy = {{"apiVersion", "feedguard.io/v1alpha1"},
              {"kind", "FencePolicy"},
              {"metadata", {{"name", FencePolicyName(name)}}},
              {"spec", std::move(spec)}};
  return s;
}

std::string JsonToYaml(const Json& v,
                       const std::map<std::string, std::vector<std::string>>& comments) {
  std::string out;
  if (v.is_object()) {
    EmitObject(v, 0, "", comments, &out);
  } else {
    out = YamlScalar(v) + "\n";
  }
  return out;
}

std::string RenderPolicyYaml(const PolicySuggestion& s) {
  std::string out;
  for (const auto& n : s.notes) {
    for (const auto& line : WrapText(n)) out += "# " + line + "\n";
  }
  std::map<std::string, std::vector<std::string>> comments;
  if (!s.neighbours_comment.empty()) comments["/spec/neighbours"] = {s.neighbours_comment};
  out += JsonToYaml(s.policy, comments);
  return out;
}

}  // namespace feedguard::plugin
