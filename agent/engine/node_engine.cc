#include "agent/engine/node_engine.h"

#include "agent/cgroup/kernel_facts.h"

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>

#include <google/protobuf/util/json_util.h>
#include <spdlog/spdlog.h>
#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>

#include "common/locked.h"
#include "common/yaml_bounds.h"

namespace feedguard::agent {
namespace {

namespace v1 = feedguard::v1;

// Limits on a fence file: far above any real NodeFence (a node runs ≤ 110 pods by kubelet's
// default, a few hundred at most), far below what could hurt the agent. YAML aliases share a
// node, so a few hundred bytes of nested anchors expand exponentially, and one large scalar
// under many aliases multiplies the bytes: the tree is checked as expanded before it is
// converted (common/yaml_bounds.h).
constexpr size_t kMaxFenceFileBytes = 8u << 20;
constexpr YamlLimits kFenceYamlLimits{.max_input_bytes = kMaxFenceFileBytes,
                                      .max_nodes = 200'000,  // ~10,000 pods
                                      .max_expanded_bytes = 2 * kMaxFenceFileBytes,
                                      .max_depth = 64};

// A tree CheckYamlBounds accepted: its expanded size is bounded.
nlohmann::json YamlToJson(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map: {
      nlohmann::json o = nlohmann::json::object();
      for (const auto& kv : n) o[kv.first.as<std::string>()] = YamlToJson(kv.second);
      return o;
    }
    case YAML::NodeType::Sequence: {
      nlohmann::json a = nlohmann::json::array();
      for (const auto& e : n) a.push_back(YamlToJson(e));
      return a;
    }
    case YAML::NodeType::Scalar: {
      const std::string& s = n.Scalar();
      if (n.Tag() == "!") return s;  // quoted
      if (s == "true" || s == "false") return s == "true";
      // Integers stay integers (proto3 JSON accepts numbers for int64 fields too).
      char* end = nullptr;
      errno = 0;
      long long v = std::strtoll(s.c_str(), &end, 10);
      if (!s.empty() && end && *end == '\0' && errno != ERANGE) return v;
      return s;
    }
    default:
      return nullptr;
  }
}

}  // namespace

Result<v1::NodeFence> ParseNodeFence(const std::string& text, const std::string& origin) {
  if (text.size() > kMaxFenceFileBytes) {
    return InvalidArgument(origin + ": " + std::to_string(text.size()) +
                           " bytes; a fence is at most " + std::to_string(kMaxFenceFileBytes));
  }
  std::string json_text;
  size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '{') {
    json_text = text;
  } else {
    auto root = LoadYamlBounded(text, kFenceYamlLimits);
    if (!root.ok()) return root.status().Annotate(origin);
    try {
      // Invalid UTF-8 in the YAML is replaced, not thrown on (dump's default throws).
      json_text = YamlToJson(*root).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    } catch (const YAML::Exception& e) {
      return InvalidArgument(origin + ": not valid YAML or JSON: " + e.what());
    }
  }
  v1::NodeFence fence;
  google::protobuf::util::JsonParseOptions opts;
  opts.ignore_unknown_fields = false;
  auto st = google::protobuf::util::JsonStringToMessage(json_text, &fence, opts);
  if (!st.ok()) {
    return InvalidArgument(origin + ": not a NodeFence: " + std::string(st.message()));
  }
  // Semantic checks the proto cannot express.
  std::map<std::string, const v1::PolicyOptions*> policies;
  for (const auto& p : fence.policies()) {
    if (p.name().empty()) return InvalidArgument(origin + ": policies[].name is required");
    policies[p.name()] = &p;
    if (p.trainer_cpu().cores() < 0 || p.trainer_cpu().cores_per_gpu() < 0) {
      return InvalidArgument(origin + ": policy " + p.name() + ": cores must be ≥ 0");
    }
    if (p.trainer_cpu().weight() < 0 ||
        static_cast<uint64_t>(p.trainer_cpu().weight()) > cgroup::v2::kWeightMax) {
      return InvalidArgument(
          origin + ": policy " + p.name() + ": trainerCpu.weight must be 0 (unset) or " +
          std::to_string(cgroup::v2::kWeightMin) + ".." + std::to_string(cgroup::v2::kWeightMax));
    }
    if (p.neighbour_max_cpu_percent() < 0 || p.neighbour_max_cpu_percent() > 100) {
      return InvalidArgument(origin + ": policy " + p.name() +
                             ": neighbourMaxCpuPercent must be 0..100");
    }
  }
  std::set<std::string> uids;
  auto check_pod = [&](const v1::PodRef& pod, const std::string& policy,
                       const char* role) -> Status {
    std::string who = std::string(role) + " " + pod.namespace_() + "/" + pod.name();
    if (pod.uid().empty()) return InvalidArgument(origin + ": " + who + ": pod.uid is required");
    if (!uids.insert(pod.uid()).second) {
      return InvalidArgument(origin + ": pod uid " + pod.uid() + " appears twice");
    }
    if (!policies.count(policy)) {
      return InvalidArgument(origin + ": " + who + ": policy \"" + policy +
                             "\" is not in policies[]");
    }
    if (pod.cpu_request_milli() < 0 || pod.cpu_limit_milli() < 0) {
      return InvalidArgument(origin + ": " + who +
                             ": cpuRequestMilli and cpuLimitMilli must be ≥ 0");
    }
    return OkStatus();
  };
  for (const auto& t : fence.trainers())
    FG_RETURN_IF_ERROR(check_pod(t.pod(), t.policy(), "trainer"));
  for (const auto& n : fence.neighbours())
    FG_RETURN_IF_ERROR(check_pod(n.pod(), n.policy(), "neighbour"));
  return fence;
}

Result<v1::NodeFence> LoadNodeFenceFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound("cannot read fence file " + path);
  std::string text(kMaxFenceFileBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  return ParseNodeFence(text, path);
}

// Why the checkpoint and not a plan file of our own: the checkpoint is what the node actually
// holds — the enforcer records every value before it writes it, atomically, and drops entries it
// reverted — so the previous placement can never disagree with the cgroups, needs no second file
// kept in step (a crash between two saves), and is already there after an upgrade from a version
// that never wrote a plan file. A trainer's shallowest cpuset.cpus is its placement: the pod
// dir's on v1, a child's on v2, where the pod dir's own set is never written (the enforcer
// writes the same set to every one). Neighbours fenced by cpuset appear too;
// the planner only looks up trainers, and re-validates every incumbent (size, shape, still free)
// before keeping it. DryRun trainers are never written, so they are re-placed after a restart —
// harmless, nothing of theirs is on the node.
Plan PreviousPlanFromCheckpoint(const std::vector<CheckpointEntry>& entries) {
  std::map<std::string, std::pair<size_t, CpuSet>> best;  // uid → (path length, cpus)
  for (const auto& e : entries) {
    if (e.knob != "cpuset.cpus" || e.pod_uid.empty()) continue;
    std::string value = e.written;
    while (!value.empty() && (value.back() == '\n' || value.back() == ' ')) value.pop_back();
    auto cpus = CpuSet::Parse(value);
    if (!cpus.ok() || cpus->empty()) continue;
    auto it = best.find(e.pod_uid);
    // The shortest path of a pod: its pod-level cgroup on v1, a container's on v2.
    if (it == best.end() || e.path.size() < it->second.first) {
      best[e.pod_uid] = {e.path.size(), *cpus};
    }
  }
  std::map<std::string, CpuSet> by_uid;
  for (auto& [uid, v] : best) by_uid[uid] = v.second;
  return PreviousPlanFromCpusets(by_uid);
}

Result<std::optional<Plan>> LoadPreviousPlan(const std::string& state_dir) {
  const std::string path = state_dir + "/checkpoint.json";
  std::ifstream in(path);
  if (!in) {
    std::error_code ec;
    if (!std::filesystem::exists(state_dir, ec)) {
      return NotFound("state dir " + state_dir + " does not exist");
    }
    return std::optional<Plan>();  // nothing written yet
  }
  std::stringstream text;
  text << in.rdbuf();
  std::map<std::string, CheckpointEntry> entries;
  uint64_t version = 0;
  FG_RETURN_IF_ERROR(CheckpointStore::Parse(text.str(), &entries, &version).Annotate(path));
  std::vector<CheckpointEntry> list;
  for (auto& [k, e] : entries) list.push_back(std::move(e));
  return std::optional<Plan>(PreviousPlanFromCheckpoint(list));
}

NodeEngine::NodeEngine(NodeEngineOptions options) : options_(std::move(options)) {
  if (!options_.state_dir.empty()) {
    auto prev = LoadPreviousPlan(options_.state_dir);
    // Unreadable: plan from scratch (the enforcer refuses a corrupt checkpoint on its own).
    if (prev.ok()) restart_plan_ = std::move(prev).value();
  }
}

Result<Plan> NodeEngine::MakePlanFor(const v1::NodeFence& fence) {
  PlanInput in;
  in.fence = fence;
  in.reserved_cpus = options_.reserved_cpus;
  in.protected_pods = options_.protected_pods;
  if (!options_.cpu_manager_state_path.empty()) {
    auto cm = LoadCpuManagerState(options_.cpu_manager_state_path);
    if (cm.ok()) {
      in.cpu_manager = std::move(cm).value();
      const CpuSet unknown = in.cpu_manager.ExclusiveCpus().Minus(options_.topology.AllPus());
      if (!unknown.empty()) {
        return InvalidArgument("kubelet CPU manager state " + options_.cpu_manager_state_path +
                               " names CPUs this machine does not have (" + unknown.ToString() +
                               "; it has " + options_.topology.AllPus().ToString() + ")");
      }
    } else if (cm.status().code() != StatusCode::kNotFound) {
      return cm.status().Annotate("kubelet CPU manager state");
    }
  }
  // GPUs: what the fence says, else what kubelet says.
  std::optional<PodGpuMap> from_kubelet;
  for (const auto& t : fence.trainers()) {
    std::vector<std::string> ids(t.gpu_ids().begin(), t.gpu_ids().end());
    if (ids.empty() && options_.pod_resources) {
      if (!from_kubelet) {
        auto m = options_.pod_resources->ListPodGpus();
        from_kubelet = m.ok() ? std::move(m).value() : PodGpuMap{};
      }
      auto it = from_kubelet->find(PodKey{t.pod().namespace_(), t.pod().name()});
      if (it != from_kubelet->end()) ids = it->second;
    }
    if (ids.empty()) continue;
    if (options_.gpu_resolver) {
      in.trainer_gpus[t.pod().uid()] = options_.gpu_resolver->ResolveAll(ids);
    } else {
      std::vector<ResolvedGpu> unresolved;
      for (const auto& id : ids) unresolved.push_back({id, "", "no NVIDIA driver information"});
      in.trainer_gpus[t.pod().uid()] = unresolved;
    }
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    in.previous = last_plan_ ? last_plan_ : restart_plan_;
    trainer_bus_ids_.clear();
    for (const auto& [uid, gpus] : in.trainer_gpus) {
      for (const auto& g : gpus) {
        if (!g.bus_id.empty()) trainer_bus_ids_[uid].insert(g.bus_id);
      }
    }
  }
  Plan plan = feedguard::agent::MakePlan(options_.topology, in);
  // CPUs the planner was told to avoid must exist on this machine.
  if (!options_.reserved_cpus.IsSubsetOf(options_.topology.AllPus())) {
    return InvalidArgument("reserved CPUs " + options_.reserved_cpus.ToString() +
                           " are not all on this machine (" +
                           options_.topology.AllPus().ToString() + ")");
  }
  return plan;
}

Status NodeEngine::CheckPodsExist(const v1::NodeFence& fence) const {
  // The message names the first few only: a fence of 150k unknown pods must not make a
  // 31 MB error.
  constexpr size_t kMaxNamed = 20;
  std::string missing;
  size_t count = 0, shown = 0;
  auto check = [&](const v1::PodRef& ref) {
    auto r = options_.cgroups->ResolvePod(ToPodIdentity(ref));
    if (r.ok()) return;
    ++count;
    if (shown == kMaxNamed) return;
    ++shown;
    missing += "\n  " + ref.namespace_() + "/" + ref.name() + " (uid " + ref.uid() +
               "): " + std::string(r.status().message().substr(0, 512));
  };
  for (const auto& t : fence.trainers()) check(t.pod());
  for (const auto& n : fence.neighbours()) check(n.pod());
  if (!missing.empty()) {
    return NotFound("pods without cgroups on this node" +
                    (shown < count
                         ? " (first " + std::to_string(shown) + " of " + std::to_string(count) + ")"
                         : std::string()) +
                    ":" + missing);
  }
  return OkStatus();
}

void NodeEngine::LogDecisions(const Plan& plan, const ApplyReport& r) {
  if (!options_.decision_log) return;
  for (const Decision& d : decisions_.Observe(plan, r, options_.enforcer->OverwriteCounts())) {
    if (d.warn) {
      options_.decision_log->warn("{}", d.text);
    } else {
      options_.decision_log->info("{}", d.text);
    }
  }
}

Result<v1::NodeReport> NodeEngine::Apply(const v1::NodeFence& fence) {
  std::lock_guard<std::mutex> serial(apply_mu_);
  if (options_.observer) options_.observer->SetPods(fence.observe());
  FG_ASSIGN_OR_RETURN(Plan plan, MakePlanFor(fence));
  ApplyReport r = options_.enforcer->Apply(plan);
  LogDecisions(plan, r);
  if (!r.checkpoint_status.ok()) {
    // Without a checkpoint nothing can be restored later: refuse (the controller sees a NACK).
    return r.checkpoint_status.Annotate("checkpoint");
  }
  v1::NodeReport report = ToReport(r, plan);
  AddObservations(&report);
  AddObservedPods(&report);
  std::lock_guard<std::mutex> l(mu_);
  SampleNeighbourUsageLocked(&plan);
  last_plan_ = plan;
  restart_plan_.reset();
  last_apply_ = r;
  last_report_ = report;
  return report;
}

std::optional<v1::NodeReport> NodeEngine::CurrentReport() {
  std::lock_guard<std::mutex> serial(apply_mu_);
  std::optional<v1::NodeReport> report;
  std::optional<Plan> plan;
  {
    std::lock_guard<std::mutex> l(mu_);
    report = last_report_;
    plan = last_plan_;
  }
  if (!report) return std::nullopt;
  const bool waiting = std::any_of(
      report->pods().begin(), report->pods().end(),
      [](const v1::PodReport& p) { return !p.enforced() && p.reason() == reason::kResizePending; });
  if (waiting && plan) {
    // A fence lifted for kubelet's resize comes back without a new fence version (the watcher
    // re-applies it once kubelet's write lands, or the resize times out): judge the node again
    // against the same plan (idempotent: writes only what differs) and report that.
    ApplyReport r = options_.enforcer->Apply(*plan);
    LogDecisions(*plan, r);
    if (r.checkpoint_status.ok()) {
      report = ToReport(r, *plan);
      std::lock_guard<std::mutex> l(mu_);
      last_report_ = report;
      last_apply_ = r;
    }
  } else {
    options_.enforcer->Verify();
  }
  auto counts = options_.enforcer->OverwriteCounts();
  const std::set<std::string> contested = options_.enforcer->ContestedPods();
  uint64_t total = 0;
  for (auto& pod : *report->mutable_pods()) {
    auto it = counts.find(pod.uid());
    pod.set_overwrites(it == counts.end() ? 0 : it->second);
    total += pod.overwrites();
    // A file left to another writer since the last Apply: not enforced any more, say so now
    // rather than at the next fence version.
    if (pod.enforced() && contested.count(pod.uid())) {
      pod.set_enforced(false);
      pod.set_reason(reason::kContested);
      pod.set_message("another writer keeps rewriting some of this pod's files; left to it");
    }
  }
  report->set_overwrites_total(total);
  // Overwrites the watcher re-applied since the last report, said once.
  if (plan && options_.decision_log) {
    ApplyReport seen;
    seen.pods.assign(report->pods().begin(), report->pods().end());
    LogDecisions(*plan, seen);
  }
  AddObservations(&*report);
  AddObservedPods(&*report);
  return report;
}

std::optional<ApplyReport> NodeEngine::last_apply() const { return LockedCopy(mu_, last_apply_); }

ApplyReport NodeEngine::RevertAll() {
  std::lock_guard<std::mutex> serial(apply_mu_);
  ApplyReport r = options_.enforcer->RevertAll();
  LogDecisions(Plan{}, r);
  std::lock_guard<std::mutex> l(mu_);
  SampleNeighbourUsageLocked(nullptr);
  last_plan_.reset();
  restart_plan_.reset();
  last_report_.reset();
  return r;
}

double NodeEngine::NeighbourCpuSeconds() {
  std::lock_guard<std::mutex> l(mu_);
  SampleNeighbourUsageLocked(last_plan_ ? &*last_plan_ : nullptr);
  return static_cast<double>(neighbour_cpu_ns_) / 1e9;
}

void NodeEngine::SampleNeighbourUsageLocked(const Plan* next_plan) {
  // Each pod read once: the fenced ones (last_plan_) add their growth; the pods of `next_plan`
  // become the new baselines. A dry run fences nobody, nor does a DryRun policy's entry.
  auto fenced = [](const Plan* p) { return p != nullptr && !p->dry_run; };
  std::set<std::string> keep;
  if (fenced(next_plan)) {
    for (const auto& n : next_plan->neighbours) {
      if (!n.dry_run) keep.insert(n.pod.uid);
    }
  }
  std::vector<const PodIdentity*> pods;
  std::set<std::string> seen;
  const Plan* current = last_plan_ ? &*last_plan_ : nullptr;
  for (const Plan* p : {current, next_plan}) {
    if (!fenced(p)) continue;
    for (const auto& n : p->neighbours) {
      if (!n.dry_run && seen.insert(n.pod.uid).second) pods.push_back(&n.pod);
    }
  }
  std::map<std::string, uint64_t> next;
  for (const PodIdentity* pod : pods) {
    auto resolved = options_.cgroups->ResolvePod(*pod);
    if (!resolved.ok()) continue;  // gone since the last apply
    auto usage = options_.cgroups->ReadUsage(resolved->dirs);
    if (!usage.ok()) continue;
    auto it = neighbour_usage_ns_.find(pod->uid);
    // A usage counter only grows; a smaller value is a recreated cgroup: a new baseline.
    if (it != neighbour_usage_ns_.end() && usage->usage_ns >= it->second) {
      neighbour_cpu_ns_ += usage->usage_ns - it->second;
    }
    if (keep.count(pod->uid)) next[pod->uid] = usage->usage_ns;
  }
  neighbour_usage_ns_ = std::move(next);
}

v1::NodeReport NodeEngine::ToReport(const ApplyReport& r, const Plan& plan) const {
  v1::NodeReport out;
  out.set_applied_version(r.fence_version);
  out.set_dry_run(r.dry_run);
  for (const auto& p : r.pods) *out.add_pods() = p;  // the enforcer's reports, as they are
  // Planner diagnostics for pods the enforcer still enforced (e.g. NUMAFallback) are advice; a
  // trainer the planner could not pin keeps its fence but says why.
  for (const auto& d : plan.diagnostics) {
    for (auto& pr : *out.mutable_pods()) {
      if (pr.uid() == d.pod_uid && pr.enforced() && pr.message().empty()) {
        pr.set_message(d.reason + ": " + d.message);
      }
    }
  }
  // Otherwise a pinned trainer's message says why it sits where it sits ("GPULocal: ...",
  // "IncumbentKept: ...", "NUMAFallback: ..."), so operators read placement from the report.
  std::map<std::string, const std::string*> why;
  for (const auto& t : plan.trainers) {
    if (!t.why.empty()) why[t.pod.uid] = &t.why;
  }
  for (auto& pr : *out.mutable_pods()) {
    if (pr.role() != v1::PodReport::TRAINER || !pr.enforced() || !pr.message().empty()) continue;
    if (auto it = why.find(pr.uid()); it != why.end()) pr.set_message(*it->second);
  }
  return out;
}

void NodeEngine::AddObservedPods(v1::NodeReport* report) const {
  report->clear_observations();  // the last report's, kept with it
  if (!options_.observer) return;
  for (v1::PodObservation& o : options_.observer->Observations()) {
    *report->add_observations() = std::move(o);
  }
}

void NodeEngine::AddObservations(v1::NodeReport* report) const {
  // The GPU's own signal: each trainer's GPUs' mean utilisation, when NVML is there.
  std::map<std::string, gpu::GpuSample> samples;
  std::map<std::string, std::set<std::string>> bus_ids;
  if (options_.gpu_monitor) {
    auto s = options_.gpu_monitor->Sample();
    if (s.ok()) samples = std::move(s).value();
    std::lock_guard<std::mutex> l(mu_);
    bus_ids = trainer_bus_ids_;
  }
  for (auto& pod : *report->mutable_pods()) {
    if (pod.role() != v1::PodReport::TRAINER) continue;
    if (auto it = bus_ids.find(pod.uid()); it != bus_ids.end()) {
      double sum = 0;
      uint32_t n = 0;
      for (const auto& bdf : it->second) {
        auto sample = samples.find(bdf);
        if (sample == samples.end()) continue;
        sum += sample->second.gpu_percent;
        ++n;
      }
      pod.set_gpus_sampled(n);
      pod.set_gpu_busy_percent(n > 0 ? sum / n : 0.0);
    }
    PodIdentity id;
    id.uid = pod.uid();
    id.ns = pod.namespace_();
    id.name = pod.name();
    // The QoS class decides the path; try each (a trainer is rarely BestEffort).
    for (QosClass q : {QosClass::kBurstable, QosClass::kGuaranteed, QosClass::kBestEffort}) {
      id.qos = q;
      auto resolved = options_.cgroups->ResolvePod(id);
      if (!resolved.ok()) continue;
      auto psi = options_.cgroups->ReadPressure(resolved->dirs);
      if (psi.ok() && psi->has_value()) {
        pod.set_cpu_pressure_some_avg10((*psi)->some.avg10);
      }
      break;
    }
  }
}

}  // namespace feedguard::agent
