// agent_observer.h — what the Distributor tells the rest of the controller about agents.
//
// A pure interface: the status aggregator implements it to turn NodeReports, ACKs and NACKs
// into FencePolicy.status. The Distributor calls it from its gRPC callback threads, never while
// holding its own lock (so an observer may call back into the Distributor); calls for one node
// arrive in stream order. Implementations must be thread-safe and should return quickly.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "feedguard/v1/nodefence.pb.h"

namespace feedguard::controller {

class AgentObserver {
 public:
  virtual ~AgentObserver() = default;
  // A stream for `node` passed the hello and identity checks (it replaces any older one).
  virtual void OnConnected(const std::string& node, const feedguard::v1::AgentHello& hello) = 0;
  // The node's current stream ended (it may reconnect; it is stale after the grace period).
  virtual void OnDisconnected(const std::string& node) = 0;
  virtual void OnAck(const std::string& node, uint64_t version) = 0;
  virtual void OnNack(const std::string& node, uint64_t version, const std::string& error) = 0;
  virtual void OnReport(const std::string& node, const feedguard::v1::NodeReport& report) = 0;
  // The node's agent sent a message that did not parse (`error` says what; its stream was
  // ended): the node is failing until a report of it parses again, which is told with an empty
  // `error` (after that report's OnReport).
  virtual void OnUnreadable(const std::string& node, const std::string& error) = 0;
  // A new stream for `node` needs its desired fence, `version`, whose bytes the distributor
  // dropped once the agent had acknowledged it (fence_slot.h): whoever made the fence hands the
  // same version back (FenceSink::SetDesired). The reconciler does; others need not.
  virtual void OnFenceWanted(const std::string& node, uint64_t version) {
    (void)node;
    (void)version;
  }
};
using AgentObserverPtr = std::shared_ptr<AgentObserver>;

// Tells each of `observers`, in order (the policy statuses, then the observations' book).
class AgentObserverTee final : public AgentObserver {
 public:
  explicit AgentObserverTee(std::vector<AgentObserverPtr> observers)
      : observers_(std::move(observers)) {}
  void OnConnected(const std::string& node, const feedguard::v1::AgentHello& hello) override {
    for (const auto& o : observers_) o->OnConnected(node, hello);
  }
  void OnDisconnected(const std::string& node) override {
    for (const auto& o : observers_) o->OnDisconnected(node);
  }
  void OnAck(const std::string& node, uint64_t version) override {
    for (const auto& o : observers_) o->OnAck(node, version);
  }
  void OnNack(const std::string& node, uint64_t version, const std::string& error) override {
    for (const auto& o : observers_) o->OnNack(node, version, error);
  }
  void OnReport(const std::string& node, const feedguard::v1::NodeReport& report) override {
    for (const auto& o : observers_) o->OnReport(node, report);
  }
  void OnUnreadable(const std::string& node, const std::string& error) override {
    for (const auto& o : observers_) o->OnUnreadable(node, error);
  }
  void OnFenceWanted(const std::string& node, uint64_t version) override {
    for (const auto& o : observers_) o->OnFenceWanted(node, version);
  }

 private:
  const std::vector<AgentObserverPtr> observers_;
};

}  // namespace feedguard::controller
