// suggest_policy.h — the FencePolicy (crds/fencepolicy.yaml) that would fence a starving GPU
// pod's contenders, built from the pod's real labels and its contender pods' labels, in DryRun,
// rendered as YAML ready for `kubectl apply -f -` (docs/DESIGN.md §4b: observe, then fence).
//
// Pure: the pods are passed in as the API server returned them.
//   trainers.podSelector.matchLabels   the pod's labels minus per-instance ones
//   (IsPerInstanceLabel) trainers.namespaceSelector         kubernetes.io/metadata.name: <the pod's
//   namespace> trainers.requireGPU                true neighbours.podSelector             the
//   key=value pairs every contender pod shares, else absent
//                                      (every other pod on the trainer's nodes, said in a comment)
//   neighbours.fence                   Idle;  mode: DryRun;  name: fence-<pod> (FencePolicyName)
//
// Example:
//   PolicySuggestion s = SuggestPolicy({.trainer = pod_json, .contenders = {spin_1, spin_2}});
//   std::cout << RenderPolicyYaml(s);
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace feedguard::plugin {

using Labels = std::map<std::string, std::string>;

// Labels a controller sets per pod (pod-template-hash, controller-revision-hash, the StatefulSet
// pod name and index, the Job's controller uid and completion index): a selector on them would
// select this one pod instance, not its replacement.
bool IsPerInstanceLabel(std::string_view key);

// metadata.labels of a pod without the per-instance ones (non-string values skipped).
Labels StableLabels(const nlohmann::json& pod);

// The key=value pairs every one of `label_sets` has; empty when `label_sets` is.
Labels CommonLabels(const std::vector<Labels>& label_sets);

// "fence-<pod>" as a valid object name (DNS-1123 subdomain, here at most 63 characters so it is
// also a label value): lower-cased, characters other than [a-z0-9.-] turned into '-', and when
// too long cut and suffixed with 8 hex digits of the full name's hash, so two long names that
// share a prefix do not collide.
std::string FencePolicyName(std::string_view pod_name);

struct SuggestInput {
  nlohmann::json trainer;                          // the pod (GET /api/v1/namespaces/NS/pods/NAME)
  std::vector<nlohmann::json> contenders;          // its contender pods that still exist
  std::vector<std::string> contenders_gone;        // "ns/name" of contender pods no longer there
  std::vector<std::string> contenders_unreadable;  // "ns/name": GET refused (RBAC)
};

struct PolicySuggestion {
  nlohmann::json policy;  // the FencePolicy object (apiVersion, kind, metadata, spec)
  // Said above the policy, one line each (why the selectors are what they are).
  std::vector<std::string> notes;
  // Said above `neighbours:` when its podSelector is absent.
  std::string neighbours_comment;
  bool trainer_labelled = true;      // false: the pod has no stable label; a label is suggested
  bool neighbours_by_label = false;  // neighbours.podSelector set from the contenders' labels
};

PolicySuggestion SuggestPolicy(const SuggestInput& in);

// The policy as block YAML, `notes` as comment lines above it and `neighbours_comment` above
// `neighbours:`. A string is plain where YAML reads it back as that string, else double-quoted.
std::string RenderPolicyYaml(const PolicySuggestion& s);

// Block YAML of a JSON object (keys in the object's order); `comments` maps a JSON pointer
// ("/spec/neighbours") to lines said, as `# ` comments, above that key.
std::string JsonToYaml(const nlohmann::json& v,
                       const std::map<std::string, std::vector<std::string>>& comments = {});

}  // namespace feedguard::plugin
