#include "agent/observe/observe_loop.h"

#include <algorithm>
#include <exception>
#include <system_error>
#include <utility>

#include <spdlog/spdlog.h>

#include "common/backoff.h"
#include "feedguard/common/wire_limits.h"

namespace feedguard::agent::observe {
namespace {

using std::chrono::duration;
using std::chrono::duration_cast;
using std::chrono::nanoseconds;

NodeObserverOptions NodeOptionsFor(const ObserveLoopOptions& o) {
  NodeObserverOptions n;
  // The windows keep an hour of samples: as many as an hour holds at this period (whole seconds,
  // at least one).
  n.period =
      std::max(std::chrono::seconds(1), std::chrono::duration_cast<std::chrono::seconds>(o.period));
  n.horizon = kReportWindows[std::size(kReportWindows) - 1];
  n.top_k = std::clamp<size_t>(o.top_k, 1, kMaxObservedContenders);
  n.proc_root = o.proc_root;
  n.tasks = o.tasks;
  n.user_hz = o.user_hz;
  return n;
}

v1::ObservationWindow ToWire(std::chrono::seconds window, const Summary& s) {
  v1::ObservationWindow w;
  w.set_window_seconds(static_cast<uint32_t>(window.count()));
  w.set_covered_seconds(s.window_s);
  w.set_wait_seconds(s.wait_s);
  w.set_wait_behind_others_seconds(s.behind_others_s);
  w.set_wait_behind_pods_seconds(s.behind_pods_s);
  if (s.source) {
    w.set_wait_source(
        ValueOf(kWaitSourceWire, *s.source, v1::ObservationWindow::WAIT_SOURCE_UNSPECIFIED));
  }
  w.set_cpu_seconds(s.cpu_s);
  w.set_throttled_seconds(s.throttled_s);
  if (s.gpu_busy && s.gpu_lost) {
    w.set_gpu_sampled(true);
    w.set_gpu_busy_fraction(*s.gpu_busy);
    w.set_gpu_lost_seconds(s.gpu_lost->estimate_s);
    w.set_gpu_lost_min_seconds(s.gpu_lost->low_s);
    w.set_gpu_lost_max_seconds(s.gpu_lost->high_s);
  }
  for (const Contention& c : s.contenders) {  // at most top_k ≤ kMaxObservedContenders
    auto* out = w.add_contenders();
    out->set_pod_uid(c.contender == kNodeContender ? std::string() : c.contender);
    out->set_cpu_seconds(c.cpu_s);
  }
  return w;
}

double Seconds(nanoseconds d) { return duration<double>(d).count(); }

}  // namespace

ObserveLoop::ObserveLoop(ObserveLoopOptions options)
    : options_(std::move(options)),
      clock_(options_.clock ? options_.clock : std::make_shared<RealTimeSource>()),
      gpu_on_(options_.gpu_monitor != nullptr && options_.pod_resources != nullptr),
      node_(options_.cgroups.get(), options_.cgroups->layout(), NodeOptionsFor(options_)) {}

ObserveLoop::~ObserveLoop() { Stop(); }

void ObserveLoop::SetPods(const google::protobuf::RepeatedPtrField<v1::PodRef>& pods) {
  std::map<std::string, v1::PodRef> want;
  for (const v1::PodRef& p : pods) {
    if (want.size() == kMaxObservedPodsPerNode) break;
    if (p.uid().empty() || want.count(p.uid())) continue;
    want.emplace(p.uid(), p);
  }
  std::lock_guard l(mu_);
  if (want.size() == wanted_.size() &&
      std::equal(want.begin(), want.end(), wanted_.begin(), [](const auto& a, const auto& b) {
        return a.first == b.first && a.second.namespace_() == b.second.namespace_() &&
               a.second.name() == b.second.name();
      })) {
    return;  // the same pods (a new fence for the trainers' sake)
  }
  wanted_ = std::move(want);
  ++wanted_generation_;
  // Pods that left are gone from the surfaces now, not at the next step.
  std::erase_if(published_, [&](const auto& p) { return !wanted_.count(p.first); });
}

Status ObserveLoop::Start() {
  if (thread_.joinable()) return OkStatus();
  try {
    thread_ = std::jthread([this](std::stop_token stop) { Run(std::move(stop)); });
  } catch (const std::system_error& e) {
    return Internal(std::string("observe: cannot start its thread: ") + e.what());
  }
  return OkStatus();
}

void ObserveLoop::Stop() {
  if (!thread_.joinable()) return;
  thread_.request_stop();
  thread_.join();
}

void ObserveLoop::Run(std::stop_token stop) {
  // Nothing escapes this thread: a pass that throws is logged and the next one comes on time.
  while (!stop.stop_requested()) {
    nanoseconds wait = options_.period;
    try {
      wait = Tick();
    } catch (const std::exception& e) {
      spdlog::error("observe: pass failed: {}", e.what());
    } catch (...) {
      spdlog::error("observe: pass failed");
    }
    wait = std::clamp<nanoseconds>(wait, std::chrono::milliseconds(1), options_.period);
    if (!SleepFor(wait, stop)) return;
  }
}

nanoseconds ObserveLoop::Tick() {
  std::lock_guard tick(tick_mu_);
  const auto now = clock_->MonotonicNow();
  TakePodsLocked();
  if (!baseline_done_) {
    baseline_done_ = true;
    StepLocked(0);  // every counter's first reading
    last_step_ = now;
    next_step_ = now + options_.period;
    next_gpu_ = now + options_.gpu_sample_interval;
  }
  if (gpu_on_ && now >= next_gpu_) {
    ReadGpusLocked();
    next_gpu_ += options_.gpu_sample_interval;
    if (next_gpu_ <= now) next_gpu_ = now + options_.gpu_sample_interval;
  }
  if (now >= next_step_) {
    StepLocked(Seconds(now - last_step_));
    last_step_ = now;
    next_step_ = now + options_.period;
  }
  auto next = next_step_;
  if (gpu_on_) next = std::min(next, next_gpu_);
  return std::max(nanoseconds::zero(), duration_cast<nanoseconds>(next - now));
}

void ObserveLoop::TakePodsLocked() {
  std::vector<std::string> uids;
  {
    std::lock_guard l(mu_);
    if (wanted_generation_ == pods_taken_) return;
    pods_taken_ = wanted_generation_;
    for (const auto& [uid, ref] : wanted_) uids.push_back(uid);
  }
  node_.Observe(uids);
  std::erase_if(pods_, [&](const auto& p) {
    return !std::binary_search(uids.begin(), uids.end(), p.first);  // uids are sorted (a map's)
  });
  for (const auto& uid : uids) pods_.try_emplace(uid);
  ResolveGpusLocked();
}

void ObserveLoop::ResolveGpusLocked() {
  if (!gpu_on_) return;
  if (std::none_of(pods_.begin(), pods_.end(), [](const auto& p) { return !p.second.bus_ids; })) {
    return;
  }
  std::map<std::string, PodKey> keys;
  {
    std::lock_guard l(mu_);
    for (const auto& [uid, ref] : wanted_) keys.emplace(uid, PodKey{ref.namespace_(), ref.name()});
  }
  auto listed = options_.pod_resources->ListPodGpus();
  if (!listed.ok()) {
    LogProblem("kubelet PodResources: " + listed.status().ToString());
    return;  // asked again at the next step
  }
  for (auto& [uid, pod] : pods_) {
    if (pod.bus_ids) continue;
    auto key = keys.find(uid);
    if (key == keys.end()) continue;
    auto ids = listed->find(key->second);
    // Not listed (yet): kubelet names a pod's devices once it admitted it; asked again.
    if (ids == listed->end()) continue;
    std::set<std::string> bus;
    if (options_.gpu_resolver) {
      for (const ResolvedGpu& g : options_.gpu_resolver->ResolveAll(ids->second)) {
        if (!g.bus_id.empty()) bus.insert(g.bus_id);
      }
    }
    pod.bus_ids = std::move(bus);  // possibly none known here: then no GPU figure
  }
}

void ObserveLoop::ReadGpusLocked() {
  if (std::none_of(pods_.begin(), pods_.end(),
                   [](const auto& p) { return p.second.bus_ids && !p.second.bus_ids->empty(); })) {
    return;
  }
  auto sample = options_.gpu_monitor->Sample();
  if (!sample.ok()) {
    LogProblem("NVML: " + sample.status().ToString());
    return;
  }
  for (auto& [uid, pod] : pods_) {
    if (!pod.bus_ids) continue;
    double sum = 0;
    int n = 0;
    for (const auto& bdf : *pod.bus_ids) {
      auto g = sample->find(bdf);
      if (g == sample->end()) continue;
      sum += std::clamp(g->second.gpu_percent, 0u, 100u) / 100.0;
      ++n;
    }
    if (n == 0) continue;
    pod.gpu_busy_sum += sum / n;  // the pod's GPUs' mean
    ++pod.gpu_readings;
  }
}

void ObserveLoop::StepLocked(double dt_s) {
  // No pod to observe: nothing is read (a pod named later starts from a baseline anyway).
  if (pods_.empty()) {
    PublishLocked();
    return;
  }
  std::map<std::string, double> gpu_busy;
  for (auto& [uid, pod] : pods_) {
    if (pod.gpu_readings > 0) gpu_busy[uid] = pod.gpu_busy_sum / pod.gpu_readings;
    pod.gpu_busy_sum = 0;
    pod.gpu_readings = 0;
  }
  for (const std::string& line : node_.Step(dt_s, gpu_busy)) LogProblem(line);
  for (const auto& [uid, s] : node_.last_samples()) {
    auto pod = pods_.find(uid);
    if (pod == pods_.end()) continue;
    if (s.source != WaitSource::kUnknown) {
      pod->second.wait_s_total[s.source] += std::clamp(s.wait_s, 0.0, s.dt_s);
      pod->second.behind_others_s_total[s.source] += std::clamp(s.behind_others_s, 0.0, s.dt_s);
    }
    if (auto lost = GpuLostIn(s)) {
      pod->second.gpu_lost_s_total = pod->second.gpu_lost_s_total.value_or(0) + lost->estimate_s;
    }
  }
  ResolveGpusLocked();  // pods kubelet had not named yet
  PublishLocked();
}

void ObserveLoop::PublishLocked() {
  std::map<std::chrono::seconds, std::map<std::string, Summary>> windows;
  for (auto w : kReportWindows) windows[w] = node_.Summaries(w);
  std::map<std::string, Published> next;
  for (const auto& [uid, hour] : windows.at(kReportWindows[std::size(kReportWindows) - 1])) {
    Published p;
    p.observation.set_uid(uid);
    for (auto w : kReportWindows) {
      *p.observation.add_windows() = ToWire(w, windows.at(w).at(uid));
    }
    p.behind_others_1h_s = hour.behind_others_s;
    const Summary& ten = windows.at(kMetricsWindow).at(uid);
    if (ten.source != WaitSource::kUnknown) {
      p.wait_ratio_10m = ten.wait_fraction;
      if (ten.window_s > 0) p.behind_others_ratio_10m = ten.behind_others_s / ten.window_s;
    }
    p.contenders_10m = ten.contenders;
    if (auto pod = pods_.find(uid); pod != pods_.end()) {
      p.wait_s_total = pod->second.wait_s_total;
      p.behind_others_s_total = pod->second.behind_others_s_total;
      p.gpu_lost_s_total = pod->second.gpu_lost_s_total;
    }
    next.emplace(uid, std::move(p));
  }
  std::lock_guard l(mu_);
  // A pod the fence dropped since this pass took the list is not published again.
  std::erase_if(next, [&](const auto& p) { return !wanted_.count(p.first); });
  published_ = std::move(next);
}

void ObserveLoop::LogProblem(const std::string& line) {
  spdlog::debug("observe: {}", line);
  if (auto held = problems_log_.Allow()) {
    spdlog::info("observe: {}{}", line, LogLimiter::HeldBack(*held));
  }
}

std::vector<v1::PodObservation> ObserveLoop::Observations() const {
  std::vector<const Published*> order;
  std::lock_guard l(mu_);
  for (const auto& [uid, p] : published_) order.push_back(&p);
  std::sort(order.begin(), order.end(), [](const Published* a, const Published* b) {
    if (a->behind_others_1h_s != b->behind_others_1h_s) {
      return a->behind_others_1h_s > b->behind_others_1h_s;
    }
    return a->observation.uid() < b->observation.uid();
  });
  std::vector<v1::PodObservation> out;
  out.reserve(order.size());
  for (const Published* p : order) out.push_back(p->observation);
  return out;
}

ObserveMetrics ObserveLoop::Metrics() const {
  ObserveMetrics m;
  std::map<std::string, double> contenders;
  std::lock_guard l(mu_);
  for (const auto& [uid, p] : published_) {
    auto ref = wanted_.find(uid);
    if (ref == wanted_.end()) continue;
    ObservedPodMetrics pod;
    pod.uid = uid;
    pod.ns = ref->second.namespace_();
    pod.name = ref->second.name();
    pod.wait_s_total = p.wait_s_total;
    pod.behind_others_s_total = p.behind_others_s_total;
    pod.gpu_lost_s_total = p.gpu_lost_s_total;
    pod.wait_ratio_10m = p.wait_ratio_10m;
    pod.behind_others_ratio_10m = p.behind_others_ratio_10m;
    m.pods.push_back(std::move(pod));
    for (const Contention& c : p.contenders_10m) contenders[c.contender] += c.cpu_s;
  }
  for (auto& [who, s] : contenders) m.contenders.push_back({who, s});
  std::sort(m.contenders.begin(), m.contenders.end(), [](const auto& a, const auto& b) {
    return a.cpu_s != b.cpu_s ? a.cpu_s > b.cpu_s : a.contender < b.contender;
  });
  const size_t k = std::clamp<size_t>(options_.top_k, 1, kMaxObservedContenders);
  if (m.contenders.size() > k) m.contenders.resize(k);
  return m;
}

}  // namespace feedguard::agent::observe
