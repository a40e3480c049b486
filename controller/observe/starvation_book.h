// starvation_book.h — what the agents saw of their nodes' GPU pods (NodeReport.observations),
// kept for the StarvationReport (docs/DESIGN.md §4b).
//
// One entry per node: its last report's observations, compacted. Every observed pod keeps four
// numbers for the totals (wait and GPU time lost over 10 min, lost over 1 h, whether a GPU was
// read); only pods that starved (waited behind others ≥ kStarvingWaitPercent, 5 %, of a window)
// keep their windows and contenders, so the memory follows the starving pods, not the cluster's
// size. Bounded per node by what the wire carries (wire_limits.h: kMaxObservedPodsPerNode,
// kMaxObservedContenders); anything past the bounds in a hostile report is dropped. A node that has
// not reported for `max_age` is forgotten. Thread-safe (its own lock): the Distributor's threads
// record, the report writer reads.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "controller/fence/agent_observer.h"
#include "feedguard/common/time_source.h"
#include "feedguard/v1/nodefence.pb.h"

namespace feedguard::controller {

// One window of one starving pod, as the agent sent it.
struct SeenWindow {
  uint32_t seconds = 0;
  float covered_s = 0, wait_s = 0, cpu_s = 0, throttled_s = 0;
  // Of wait_s, the part behind other workloads and of that the pods' part (the whole wait where
  // the agent does not split it: an older agent).
  float behind_others_s = 0, behind_pods_s = 0;
  // PSI, SCHEDSTAT, or WAIT_SOURCE_UNSPECIFIED where the agent could not measure the wait (no
  // PSI and the pod's tasks not seen: its wait_s is no measurement) or sent something else.
  feedguard::v1::ObservationWindow::WaitSource source =
      feedguard::v1::ObservationWindow::WAIT_SOURCE_UNSPECIFIED;
  bool gpu_sampled = false;
  float gpu_busy = 0, gpu_lost_s = 0, gpu_lost_min_s = 0, gpu_lost_max_s = 0;
  std::vector<std::pair<std::string, float>> contenders;  // pod uid ("" = the node), CPU-s
};

struct SeenPod {
  std::string uid;
  float wait_10m_s = 0;
  float behind_others_10m_s = 0;
  float lost_10m_s = 0;
  float lost_1h_s = 0;
  bool gpu_sampled = false;
  // Waited behind others ≥ 5 % (feedguard/common/starvation.h) of the 10 min window, as measured:
  // a window whose wait was not measured is no starvation.
  bool starving = false;
  std::vector<SeenWindow> windows;  // starving pods only
};

struct SeenNode {
  std::chrono::steady_clock::time_point at;
  std::vector<SeenPod> pods;
};

class StarvationBook final : public AgentObserver {
 public:
  explicit StarvationBook(TimeSourcePtr clock,
                          std::chrono::seconds max_age = std::chrono::seconds(600));

  // AgentObserver: only reports matter; a disconnected node's last observations stay until
  // max_age (its agent keeps observing and reconnects).
  void OnConnected(const std::string&, const feedguard::v1::AgentHello&) override {}
  void OnDisconnected(const std::string&) override {}
  void OnAck(const std::string&, uint64_t) override {}
  void OnNack(const std::string&, uint64_t, const std::string&) override {}
  void OnReport(const std::string& node, const feedguard::v1::NodeReport& report) override;
  void OnUnreadable(const std::string&, const std::string&) override {}

  // A Node object went away.
  void ForgetNode(const std::string& node);
  // Every node's latest observations (nodes past max_age dropped first).
  std::map<std::string, SeenNode> Snapshot();
  size_t nodes() const;

 private:
  const TimeSourcePtr clock_;
  const std::chrono::seconds max_age_;
  mutable std::mutex mu_;
  std::map<std::string, SeenNode> nodes_;  // guarded by mu_
};

}  // namespace feedguard::controller
