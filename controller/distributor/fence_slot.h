// fence_slot.h — the controller's "latest desired NodeFence" slot for one node (docs/DESIGN.md §5).
//
// Pure bookkeeping, no I/O: the slot holds at most one desired fence (a newer one replaces an
// unsent one — never a queue), lets at most one update be in flight per stream, matches ACK/NACK
// by version and nonce, and remembers the last NACK. Once the agent acknowledged the desired
// fence the slot drops its bytes and keeps its version: an agent that holds its fence needs no
// copy here (~5 KB per node). A new stream then needs the fence again, which the slot says
// (NeedsRefill) and its owner asks the fence's maker for (AgentObserver::OnFenceWanted); the
// maker hands the same version back (SetDesired accepts it as a refill). The Distributor owns one
// slot per node and drives it from its gRPC stream reactors under its own lock; the slot itself is
// not thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "controller/fence/wire_fence.h"
#include "feedguard/common/status.h"

namespace feedguard::controller {

// One update handed to a stream: the fence and the nonce that its ACK/NACK must echo.
struct PendingUpdate {
  NodeFencePtr fence;
  std::string nonce;
};

// What the slot remembers of the update in flight: enough to match its ACK/NACK. Not the fence:
// the write holds that until grpc has sent it, and a newer desired fence need not sit beside an
// older one while a slow agent has yet to answer.
struct InFlight {
  uint64_t version = 0;
  std::string nonce;
};

struct NackRecord {
  uint64_t version = 0;
  std::string nonce;
  std::string error;
  std::chrono::steady_clock::time_point at;
};

enum class AnswerResult {
  kAccepted,  // matched the update in flight; the slot may send the next one
  kStale,     // no update in flight, or version/nonce do not match it: ignored
};

class FenceSlot {
 public:
  // Replaces the desired fence (sent or not). Versions must strictly increase per node, except
  // that the desired version itself is taken back once its bytes were dropped (a refill) and is
  // a no-op while they are held.
  Status SetDesired(NodeFencePtr fence);

  // A new stream for this node: nothing is in flight any more and the desired fence (if any)
  // is sent again on it — the agent may have restarted or missed it; applying is idempotent.
  void ResetStream();

  // The update to write now, if one is due: nothing in flight and the desired fence not yet
  // sent on this stream. Marks it in flight under `nonce` (callers pass a fresh one each time).
  std::optional<PendingUpdate> TakeNext(std::string nonce);
  // Whether TakeNext would hand out an update now.
  bool HasDue() const { return !in_flight_ && desired_ && !desired_sent_; }
  // The desired fence is due on this stream but its bytes were dropped after an ACK: whoever
  // made it must hand it back (SetDesired with the same version).
  bool NeedsRefill() const { return desired_version_ != 0 && !desired_ && !desired_sent_; }

  AnswerResult OnAck(uint64_t version, const std::string& nonce);
  AnswerResult OnNack(uint64_t version, const std::string& nonce, std::string error,
                      std::chrono::steady_clock::time_point now);

  // The desired fence's bytes: null when there is none or once its agent acknowledged it.
  const NodeFencePtr& desired() const { return desired_; }
  uint64_t desired_version() const { return desired_version_; }
  uint64_t acked_version() const { return acked_version_; }
  const std::optional<InFlight>& in_flight() const { return in_flight_; }
  const std::optional<NackRecord>& last_nack() const { return last_nack_; }
  uint64_t sends() const { return sends_; }
  uint64_t stale_answers() const { return stale_answers_; }

 private:
  bool Matches(uint64_t version, const std::string& nonce) const;

  NodeFencePtr desired_;
  uint64_t desired_version_ = 0;  // 0: no fence desired yet
  bool desired_sent_ = false;     // on the current stream
  std::optional<InFlight> in_flight_;
  uint64_t acked_version_ = 0;
  std::optional<NackRecord> last_nack_;
  uint64_t sends_ = 0;
  uint64_t stale_answers_ = 0;
};

}  // namespace feedguard::controller
