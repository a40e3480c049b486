#include "controller/distributor/fence_slot.h"

#include <utility>

namespace feedguard::controller {

Status FenceSlot::SetDesired(NodeFencePtr fence) {
  if (!fence) return InvalidArgument("null NodeFence");
  const bool same_version = desired_version_ != 0 && fence->version() == desired_version_;
  if (same_version && (!desired_ || desired_->Same(*fence))) {
    // A refill of the bytes dropped after the ACK, or one that crossed another refill or came
    // after the agent acknowledged the version on this stream: the same fence, held again only
    // while this stream still needs it.
    if (!desired_ && !desired_sent_) desired_ = std::move(fence);
    return OkStatus();
  }
  if (fence->version() <= desired_version_ && desired_version_ != 0) {
    return InvalidArgument("NodeFence version " + std::to_string(fence->version()) + " for node " +
                           fence->node_name() + " is not above " +
                           std::to_string(desired_version_));
  }
  desired_version_ = fence->version();
  desired_ = std::move(fence);
  desired_sent_ = false;
  return OkStatus();
}

void FenceSlot::ResetStream() {
  in_flight_.reset();
  desired_sent_ = false;
}

std::optional<PendingUpdate> FenceSlot::TakeNext(std::string nonce) {
  if (!HasDue()) return std::nullopt;
  in_flight_ = InFlight{desired_->version(), nonce};
  desired_sent_ = true;
  ++sends_;
  return PendingUpdate{desired_, std::move(nonce)};
}

bool FenceSlot::Matches(uint64_t version, const std::string& nonce) const {
  return in_flight_ && in_flight_->version == version && in_flight_->nonce == nonce;
}

AnswerResult FenceSlot::OnAck(uint64_t version, const std::string& nonce) {
  if (!Matches(version, nonce)) {
    ++stale_answers_;
    return AnswerResult::kStale;
  }
  acked_version_ = version;
  in_flight_.reset();
  // The agent holds it now: keep the version, not the bytes.
  if (version == desired_version_) desired_.reset();
  return AnswerResult::kAccepted;
}

AnswerResult FenceSlot::OnNack(uint64_t version, const std::string& nonce, std::string error,
                               std::chrono::steady_clock::time_point now) {
  if (!Matches(version, nonce)) {
    ++stale_answers_;
    return AnswerResult::kStale;
  }
  last_nack_ = NackRecord{version, nonce, std::move(error), now};
  in_flight_.reset();
  return AnswerResult::kAccepted;
}

}  // namespace feedguard::controller
