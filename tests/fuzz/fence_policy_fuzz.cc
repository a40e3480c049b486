// fence_policy_fuzz.cc — FencePolicy objects (possibly stored under an older or looser CRD)
// into the controller: ParseFencePolicy + ValidateFencePolicy, then a live Reconciler that
// resolves them against a small cluster and writes their status (checked by controller_fuzz.h).
//
// Properties: never a throw; every field error names a field under metadata or spec; an
// accepted policy's trainers on the seed node all match its trainer selector; an Invalid policy
// reports Invalid=True with its message in status and is never sent to an agent; the selector
// algebra behind the semantic checks (WhyUnsatisfiable, Implies) is sound on every selector.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "controller/policy/fence_policy.h"
#include "tests/fuzz/controller_fuzz.h"

namespace {

using feedguard::controller::Labels;
using feedguard::controller::LabelSelector;

// Soundness of the selector algebra the semantic checks rest on, by enumeration: over every
// label set built from the keys and values the two selectors mention (each key absent, or one
// of their values, or a value neither mentions), a selector said to be unsatisfiable matches
// none, and `a.Implies(b)` means every set `a` matches `b` matches too.
void CheckSelectorAlgebra(const LabelSelector& a, const LabelSelector& b) {
  std::map<std::string, std::set<std::string>> keys;
  for (const LabelSelector* s : {&a, &b}) {
    for (const auto& [k, v] : s->match_labels()) keys[k].insert(v);
    for (const auto& r : s->expressions()) keys[r.key].insert(r.values.begin(), r.values.end());
  }
  if (keys.size() > 4) return;
  std::vector<std::pair<std::string, std::vector<std::string>>> dims;
  size_t combos = 1;
  for (auto& [k, vs] : keys) {
    std::vector<std::string> options(vs.begin(), vs.end());
    options.push_back("zz-none-of-them");
    options.push_back("");  // the empty value (valid); "absent" is the index past the end
    combos *= options.size() + 1;
    dims.push_back({k, std::move(options)});
  }
  if (combos > 20000) return;
  const bool a_never = !a.WhyUnsatisfiable().empty();
  const bool b_never = !b.WhyUnsatisfiable().empty();
  const bool a_implies_b = a.Implies(b);
  std::vector<size_t> idx(dims.size(), 0);
  for (;;) {
    Labels l;
    for (size_t d = 0; d < dims.size(); ++d) {
      // Index == options.size(): the label is absent.
      if (idx[d] < dims[d].second.size()) l[dims[d].first] = dims[d].second[idx[d]];
    }
    const bool am = a.Matches(l), bm = b.Matches(l);
    if (a_never) FG_FUZZ_CHECK(!am);
    if (b_never) FG_FUZZ_CHECK(!bm);
    if (a_implies_b && am) FG_FUZZ_CHECK(bm);
    size_t d = 0;
    while (d < dims.size() && ++idx[d] > dims[d].second.size()) idx[d++] = 0;
    if (d == dims.size()) break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, size_t size) {
  namespace controller = feedguard::controller;
  nlohmann::json j = nlohmann::json::parse(AsText(data, size), nullptr, false);
  if (j.is_discarded()) return 0;

  // A second policy beside the seed one: a fuzzed object whose metadata lacks a string name
  // gets one, so it is not dropped before reaching the reconciler (a metadata that is no
  // object stays as it is: its "expected object" error is fuzzed too).
  if (j.is_object() && (!j.contains("metadata") ||
                        (j["metadata"].is_object() &&
                         !(j["metadata"].contains("name") && j["metadata"]["name"].is_string())))) {
    j["metadata"]["name"] = "fuzzed";
  }
  controller::ParsedPolicy parsed = controller::ParseFencePolicy(j);
  std::vector<controller::FieldError> errors = parsed.errors;
  for (auto& e : controller::ValidateFencePolicy(parsed.policy)) errors.push_back(e);
  for (const auto& e : errors) {
    FG_FUZZ_CHECK(e.field.empty() || e.field.rfind("spec", 0) == 0 ||
                  e.field.rfind("metadata", 0) == 0);
    FG_FUZZ_CHECK(!e.message.empty());
  }
  feedguard::fuzz::MustDump(nlohmann::json(controller::JoinFieldErrors(errors)));
  CheckSelectorAlgebra(parsed.policy.neighbours.pod_selector, parsed.policy.trainers.pod_selector);
  CheckSelectorAlgebra(parsed.policy.trainers.pod_selector, parsed.policy.node_selector);

  feedguard::fuzz::FuzzCluster cluster;
  cluster.reconciler->UpsertPolicy(j);
  cluster.Settle();
  const std::string name = controller::ParseFencePolicy(j).policy.name;
  if (name.empty() || name == "protect-trainers") return 0;
  auto st = cluster.writer->statuses.find(name);
  if (st == cluster.writer->statuses.end()) return 0;  // deleting: no status written
  std::string invalid;
  for (const auto& c : st->second["conditions"]) {
    if (c.value("type", "") == "Invalid") invalid = c.value("status", "");
  }
  FG_FUZZ_CHECK(invalid == (errors.empty() ? "False" : "True"));
  // Nothing of an invalid policy reaches a node.
  if (!errors.empty()) {
    for (const auto& [node, fence] : cluster.sink->fences) {
      for (const auto& t : fence.trainers()) FG_FUZZ_CHECK(t.policy() != name);
      for (const auto& p : fence.policies()) FG_FUZZ_CHECK(p.name() != name);
    }
  }
  return 0;
}
