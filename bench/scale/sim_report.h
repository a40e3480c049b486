// sim_report.h — the NodeReport a simulated agent sends for a fence it applied: one PodReport
// per trainer and neighbour, enforced, with usage and (trainers) a cpuset and PSI below the
// starved threshold, as the real agent reports a healthy node. fg-agent-sim sends it;
// fg-pod-memory measures what the controller keeps of it.
#pragma once

#include <string>

#include "feedguard/v1/nodefence.pb.h"

namespace feedguard::bench {

inline feedguard::v1::NodeReport SimReport(const feedguard::v1::NodeFence& f) {
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
  return r;
}

}  // namespace feedguard::bench
