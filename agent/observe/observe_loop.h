// observe_loop.h — the agent's observation as it runs (docs/DESIGN.md §4b): the GPU pods the
// controller names in NodeFence.observe, whether or not a policy covers them, sampled every
// `period` on a thread of the loop's own (NodeObserver: the pod's cgroup counters, its PSI or
// its tasks' run delay, who ran on its CPUs), with its GPUs' busy fraction from NVML sampled
// every `gpu_sample_interval` and averaged over the period — NVML's utilisation covers the last
// 1/6 s to 1 s only, so one reading per period would be noise. It gives the node report each
// pod's windows (1 min, 10 min, 1 h) worst first, and /metrics the counters since the agent
// first observed each pod. Reads only: it writes nothing anywhere.
//
// A pod's GPUs are found as the engine finds a trainer's: kubelet's PodResources by namespace
// and name (PodResourcesSource::ListPodGpus), device ids to PCI addresses (GpuIdResolver),
// NVML's samples keyed by PCI address. Without NVML, without PodResources, or for a pod whose
// GPUs are not found, there is no GPU figure (ObservationWindow.gpu_sampled false).
// A pod's first interval is a baseline: its figures start one period after its first reading.
//
// Threads: SetPods (the fence), Observations (the report), Metrics (/metrics) and Tick (the
// loop's thread, or a test driving a ManualTimeSource instead of starting it) may run at once.
//
// Example:
//   ObserveLoopOptions o;
//   o.cgroups = cgroups;  o.gpu_monitor = nvml;  o.pod_resources = kubelet;  o.gpu_resolver = r;
//   auto loop = std::make_shared<ObserveLoop>(std::move(o));
//   loop->Start();                     // Stop() (or the destructor) joins the thread
//   loop->SetPods(fence.observe());    // each fence; pods that leave go with their windows
//   for (auto& p : loop->Observations()) *report.add_observations() = std::move(p);
#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "agent/cgroup/cgroups.h"
#include "agent/gpu/nvml.h"
#include "agent/observe/node_observer.h"
#include "agent/observe/starvation.h"
#include "agent/topology/gpu_ids.h"
#include "agent/topology/podresources_client.h"
#include "common/log_limiter.h"
#include "feedguard/common/enum_names.h"
#include "feedguard/common/status.h"
#include "feedguard/common/time_source.h"
#include "feedguard/v1/nodefence.pb.h"

namespace feedguard::agent::observe {

// WaitSource and its twin on the wire (not measured: WAIT_SOURCE_UNSPECIFIED).
inline constexpr EnumTable<WaitSource, v1::ObservationWindow::WaitSource, 3> kWaitSourceWire{
    {{WaitSource::kPsi, v1::ObservationWindow::PSI},
     {WaitSource::kSchedstat, v1::ObservationWindow::SCHEDSTAT},
     {WaitSource::kUnknown, v1::ObservationWindow::WAIT_SOURCE_UNSPECIFIED}}};
static_assert(EnumTableComplete(kWaitSourceWire));

// The windows each report carries per pod, and the one /metrics shows.
inline constexpr std::chrono::seconds kReportWindows[] = {
    std::chrono::seconds(60), std::chrono::seconds(600), std::chrono::seconds(3600)};
inline constexpr std::chrono::seconds kMetricsWindow{600};

struct ObserveLoopOptions {
  cgroup::CgroupsPtr cgroups;  // required: the node's pod cgroups (read only)
  // Which GPUs each pod got (kubelet). Null: no GPU figure for any pod.
  PodResourcesSourcePtr pod_resources;
  std::shared_ptr<const GpuIdResolver> gpu_resolver;     // device id → PCI address; null: none
  gpu::GpuMonitorPtr gpu_monitor;                        // NVML. Null: no GPU figure for any pod.
  std::chrono::milliseconds period{10'000};              // one interval per pod (at least 1 ms)
  std::chrono::milliseconds gpu_sample_interval{2'000};  // NVML readings averaged per period
  // Contenders kept per pod and window, and per node on /metrics: 1..kMaxObservedContenders
  // (outside: clamped).
  size_t top_k = 5;
  // /proc/stat and the tasks' schedstat: in the agent's pod the host's procfs (--host-proc), whose
  // processes are then mapped to pods by their /proc/<pid>/cgroup (host_tasks.h).
  std::string proc_root = "/proc";
  TaskLookup tasks = TaskLookup::kAuto;  // NodeObserverOptions::tasks
  long user_hz = 100;                    // sysconf(_SC_CLK_TCK)
  TimeSourcePtr clock;                   // null: the real clock
};

// One observed pod as /metrics shows it.
struct ObservedPodMetrics {
  std::string uid, ns, name;
  // Feeder wait since this agent first observed the pod, by where each interval's figure came
  // from (a counter per source: never decreases while the pod is observed). Intervals whose wait
  // was not measured (WaitSource::kUnknown) add to none.
  std::map<WaitSource, double> wait_s_total;
  // Of it, the part behind other workloads (starvation.h SplitWait), the same way.
  std::map<WaitSource, double> behind_others_s_total;
  // GPU time lost (the estimate) over the same time; nullopt until an interval had a GPU reading.
  std::optional<double> gpu_lost_s_total;
  // Over its newest kMetricsWindow of samples; nullopt where that window's wait is not known.
  std::optional<double> wait_ratio_10m;
  std::optional<double> behind_others_ratio_10m;
};
struct ObserveMetrics {
  std::vector<ObservedPodMetrics> pods;  // those with at least one interval, by uid
  // Who ran on the observed pods' CPUs while they waited, over their kMetricsWindow windows,
  // summed over the pods (a contender on CPUs two observed pods share counts for each), most
  // first, at most top_k; kNodeContender for the node itself.
  std::vector<Contention> contenders;
};

class ObserveLoop {
 public:
  explicit ObserveLoop(ObserveLoopOptions options);
  ~ObserveLoop();  // Stop()
  ObserveLoop(const ObserveLoop&) = delete;
  ObserveLoop& operator=(const ObserveLoop&) = delete;

  // The pods to observe (NodeFence.observe): at most kMaxObservedPodsPerNode, the first given
  // (the controller sends no more); entries without a uid and repeats are skipped. A pod not
  // named any more is dropped with its windows and counters at once; new ones are read from
  // the next tick on. Cheap: no I/O.
  void SetPods(const google::protobuf::RepeatedPtrField<v1::PodRef>& pods);

  // Starts the loop's thread: Tick, then sleep until the next reading is due, until Stop().
  // Start and Stop are called from one thread. Internal when the thread cannot be created.
  Status Start();
  void Stop();  // idempotent; joins the thread

  // One pass at the clock's now: takes up a changed pod list, reads the GPUs when a reading is
  // due and steps every pod when `period` has passed since the last step (the interval is the
  // time that really passed). The first pass is every counter's baseline. With no pod to
  // observe nothing is read. Returns how long until the next reading is due. The thread calls
  // it; tests call it with a ManualTimeSource.
  std::chrono::nanoseconds Tick();

  // Each observed pod with at least one interval: its windows (kReportWindows) with at most
  // kMaxObservedContenders contenders each (the node as pod_uid ""), worst first — the most
  // feeder wait behind others over the hour, then by uid — so a report cut to size drops the least
  // starved.
  std::vector<v1::PodObservation> Observations() const;
  ObserveMetrics Metrics() const;

 private:
  struct PodState {  // one observed pod, as the loop knows it
    // PCI addresses of its GPUs; nullopt until kubelet has named them.
    std::optional<std::set<std::string>> bus_ids;
    double gpu_busy_sum = 0;  // this period's readings (fractions)
    int gpu_readings = 0;
    std::map<WaitSource, double> wait_s_total;
    std::map<WaitSource, double> behind_others_s_total;
    std::optional<double> gpu_lost_s_total;
  };
  struct Published {  // one pod's figures as of the last step
    v1::PodObservation observation;
    double behind_others_1h_s = 0;
    std::map<WaitSource, double> wait_s_total;
    std::map<WaitSource, double> behind_others_s_total;
    std::optional<double> gpu_lost_s_total;
    std::optional<double> wait_ratio_10m;
    std::optional<double> behind_others_ratio_10m;
    std::vector<Contention> contenders_10m;
  };

  void Run(std::stop_token stop);
  // Require tick_mu_.
  void TakePodsLocked();
  void ResolveGpusLocked();
  void ReadGpusLocked();
  void StepLocked(double dt_s);
  void PublishLocked();
  void LogProblem(const std::string& line);

  const ObserveLoopOptions options_;
  const TimeSourcePtr clock_;
  const bool gpu_on_;  // NVML and PodResources both there

  // Held by Tick for the whole pass (the loop's thread; a test's thread instead). Taken before mu_.
  std::mutex tick_mu_;
  NodeObserver node_;                     // guarded by tick_mu_
  std::map<std::string, PodState> pods_;  // guarded by tick_mu_; by uid
  uint64_t pods_taken_ = 0;               // guarded by tick_mu_: generation of pods_
  bool baseline_done_ = false;            // guarded by tick_mu_
  std::chrono::steady_clock::time_point last_step_, next_step_, next_gpu_;  // guarded by tick_mu_
  LogLimiter problems_log_{5, std::chrono::milliseconds(60'000)};

  mutable std::mutex mu_;
  std::map<std::string, v1::PodRef> wanted_;    // guarded by mu_; by uid
  uint64_t wanted_generation_ = 0;              // guarded by mu_; bumped by each SetPods
  std::map<std::string, Published> published_;  // guarded by mu_; by uid

  std::jthread thread_;  // Run; Start and Stop only
};
using ObserveLoopPtr = std::shared_ptr<ObserveLoop>;

}  // namespace feedguard::agent::observe
