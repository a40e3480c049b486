// sim_report.h — the NodeReport a simulated agent sends for a fence it applied: one PodReport
// per trainer and neighbour, enforced, with usage and (trainers) a cpuset and PSI below the
// starved threshold, as the real agent reports a healthy node; and, with observation, the
// observed GPU pods' windows as the real agent sends them (NodeFence.observe: 60 s, 600 s, 1 h,
// each with the most contenders the wire allows), `starving_percent` % of them starving (a
// 30 % wait behind others), the rest waiting 1 %. fg-agent-sim sends it; fg-pod-memory measures
// what the controller keeps of it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "feedguard/common/wire_limits.h"
#include "feedguard/v1/nodefence.pb.h"

namespace feedguard::bench {

// starving_percent < 0: no observations (an agent with observation off).
inline feedguard::v1::NodeReport SimReport(const feedguard::v1::NodeFence& f,
                                           int starving_percent = -1) {
  feedguard::v1::NodeReport r;
  r.set_applied_version(f.version());
  int core = 0;
  for (const auto& t : f.trainers()) {
    auto* p = r.add_pods();
    p->set_uid(t.pod().uid());
    p->set_namespace_(t.pod().namespace_());
    p->set_name(t.pod().name());
    p->set_policy(t.policy());
    p->set_role(feedguard::v1::PodReport::TRAINER);
    p->set_enforced(true);
    p->set_cpus(std::to_string(core) + "-" + std::to_string(core + 3));
    core += 4;
    p->set_cpu_pressure_some_avg10(0.5);
    p->set_cpu_usage_cores(3.8);
  }
  for (const auto& n : f.neighbours()) {
    auto* p = r.add_pods();
    p->set_uid(n.pod().uid());
    p->set_namespace_(n.pod().namespace_());
    p->set_name(n.pod().name());
    p->set_policy(n.policy());
    p->set_role(feedguard::v1::PodReport::NEIGHBOUR);
    p->set_enforced(true);
    p->set_cpu_usage_cores(0.2);
  }
  if (starving_percent < 0) return r;
  for (const auto& pod : f.observe()) {
    // Which pods starve: a stable pick by uid, starving_percent of them.
    const bool starving =
        static_cast<int>(std::hash<std::string>{}(pod.uid()) % 100) < starving_percent;
    auto* o = r.add_observations();
    o->set_uid(pod.uid());
    for (uint32_t s : {60u, 600u, 3600u}) {
      auto* w = o->add_windows();
      const double dt = s;
      w->set_window_seconds(s);
      w->set_covered_seconds(dt);
      w->set_wait_seconds((starving ? 0.45 : 0.02) * dt);
      w->set_wait_behind_others_seconds((starving ? 0.30 : 0.01) * dt);
      w->set_wait_behind_pods_seconds((starving ? 0.25 : 0.005) * dt);
      w->set_wait_source(feedguard::v1::ObservationWindow::PSI);
      w->set_cpu_seconds(3.5 * dt);
      w->set_throttled_seconds(0);
      w->set_gpu_sampled(true);
      w->set_gpu_busy_fraction(starving ? 0.55 : 0.95);
      w->set_gpu_lost_seconds((starving ? 0.135 : 0.0005) * dt);
      w->set_gpu_lost_min_seconds(0);
      w->set_gpu_lost_max_seconds((starving ? 0.30 : 0.01) * dt);
      int k = 0;
      for (const auto& n : f.neighbours()) {
        if (k + 1 >= static_cast<int>(feedguard::kMaxObservedContenders)) break;
        auto* c = w->add_contenders();
        c->set_pod_uid(n.pod().uid());
        c->set_cpu_seconds((0.3 - 0.02 * k) * dt);
        ++k;
      }
      w->add_contenders()->set_cpu_seconds(0.05 * dt);  // the node itself
    }
  }
  return r;
}

}  // namespace feedguard::bench
