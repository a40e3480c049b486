#include "controller/distributor/fence_slot.h"

#include <gtest/gtest.h>

namespace feedguard::controller {
namespace {

NodeFencePtr Fence(uint64_t version, const std::string& policy = "") {
  feedguard::v1::NodeFence f;
  f.set_node_name("gpu-1");
  f.set_version(version);
  if (!policy.empty()) f.add_policies()->set_name(policy);
  return WireFence::From(f);
}

// `slot` takes the fence of `version` as desired and hands it out on the stream `nonce`.
::testing::AssertionResult Sent(FenceSlot& slot, uint64_t version, const std::string& nonce) {
  if (auto st = slot.SetDesired(Fence(version)); !st.ok()) {
    return ::testing::AssertionFailure() << st.ToString();
  }
  if (!slot.TakeNext(nonce).has_value()) return ::testing::AssertionFailure() << "nothing due";
  return ::testing::AssertionSuccess();
}

const auto kNow = std::chrono::steady_clock::time_point(std::chrono::seconds(5));

TEST(FenceSlotTest, NothingDueWithoutDesired) {
  FenceSlot slot;
  EXPECT_FALSE(slot.HasDue());
  EXPECT_FALSE(slot.TakeNext("n1").has_value());
  EXPECT_EQ(slot.sends(), 0u);
}

TEST(FenceSlotTest, SendsDesiredOnceAndAckMarksApplied) {
  FenceSlot slot;
  ASSERT_TRUE(slot.SetDesired(Fence(3)).ok());
  auto u = slot.TakeNext("n1");
  ASSERT_TRUE(u.has_value());
  EXPECT_EQ(u->fence->version(), 3u);
  EXPECT_EQ(u->nonce, "n1");
  EXPECT_FALSE(slot.TakeNext("n2").has_value()) << "only one in flight";
  EXPECT_EQ(slot.OnAck(3, "n1"), AnswerResult::kAccepted);
  EXPECT_EQ(slot.acked_version(), 3u);
  EXPECT_FALSE(slot.in_flight().has_value());
  EXPECT_FALSE(slot.TakeNext("n3").has_value()) << "an acked fence is not resent";
}

TEST(FenceSlotTest, AnUnansweredFenceIsNotKeptBesideANewerOne) {
  FenceSlot slot;
  NodeFencePtr first = Fence(1);
  std::weak_ptr<const WireFence> alive = first;
  ASSERT_TRUE(slot.SetDesired(std::move(first)).ok());
  auto u = slot.TakeNext("n1");
  ASSERT_TRUE(u.has_value());
  u.reset();  // grpc has written it; the agent has not answered yet
  ASSERT_TRUE(slot.SetDesired(Fence(2)).ok());
  EXPECT_TRUE(alive.expired()) << "the slot still holds the fence in flight";
  ASSERT_TRUE(slot.in_flight().has_value());
  EXPECT_EQ(slot.in_flight()->version, 1u);
  EXPECT_EQ(slot.OnAck(1, "n1"), AnswerResult::kAccepted);  // still matched by version + nonce
  auto next = slot.TakeNext("n2");
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->fence->version(), 2u);
}

TEST(FenceSlotTest, NewerDesiredReplacesUnsentOneNotQueued) {
  FenceSlot slot;
  ASSERT_TRUE(slot.SetDesired(Fence(1)).ok());
  auto first = slot.TakeNext("a");
  ASSERT_TRUE(first.has_value());
  for (uint64_t v = 2; v <= 100; ++v) ASSERT_TRUE(slot.SetDesired(Fence(v)).ok());
  EXPECT_FALSE(slot.HasDue()) << "waits for the answer to version 1";
  EXPECT_EQ(slot.OnAck(1, "a"), AnswerResult::kAccepted);
  auto next = slot.TakeNext("b");
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->fence->version(), 100u) << "skips straight to the latest";
  EXPECT_EQ(slot.OnAck(100, "b"), AnswerResult::kAccepted);
  EXPECT_FALSE(slot.TakeNext("c").has_value());
  EXPECT_EQ(slot.sends(), 2u);
}

TEST(FenceSlotTest, AckMustMatchVersionAndNonce) {
  FenceSlot slot;
  ASSERT_TRUE(Sent(slot, 7, "good"));
  EXPECT_EQ(slot.OnAck(7, "old-nonce"), AnswerResult::kStale);
  EXPECT_EQ(slot.OnAck(6, "good"), AnswerResult::kStale);
  EXPECT_EQ(slot.OnNack(7, "bad", "x", kNow), AnswerResult::kStale);
  EXPECT_EQ(slot.acked_version(), 0u);
  EXPECT_TRUE(slot.in_flight().has_value());
  EXPECT_EQ(slot.stale_answers(), 3u);
  EXPECT_EQ(slot.OnAck(7, "good"), AnswerResult::kAccepted);
}

TEST(FenceSlotTest, NackIsRecordedAndNotResentUntilNewerOrNewStream) {
  FenceSlot slot;
  ASSERT_TRUE(Sent(slot, 2, "n"));
  EXPECT_EQ(slot.OnNack(2, "n", "cgroup not found", kNow), AnswerResult::kAccepted);
  ASSERT_TRUE(slot.last_nack().has_value());
  EXPECT_EQ(slot.last_nack()->version, 2u);
  EXPECT_EQ(slot.last_nack()->error, "cgroup not found");
  EXPECT_EQ(slot.last_nack()->at, kNow);
  EXPECT_EQ(slot.acked_version(), 0u);
  EXPECT_FALSE(slot.TakeNext("m").has_value()) << "a NACKed version is not retried blindly";

  ASSERT_TRUE(slot.SetDesired(Fence(3)).ok());
  auto u = slot.TakeNext("m");
  ASSERT_TRUE(u.has_value());
  EXPECT_EQ(u->fence->version(), 3u);
}

TEST(FenceSlotTest, NewStreamResendsDesiredAndForgetsInFlight) {
  FenceSlot slot;
  ASSERT_TRUE(Sent(slot, 4, "s1"));
  slot.ResetStream();
  EXPECT_FALSE(slot.in_flight().has_value());
  EXPECT_EQ(slot.OnAck(4, "s1"), AnswerResult::kStale) << "answers from the old stream";
  auto u = slot.TakeNext("s2");
  ASSERT_TRUE(u.has_value());
  EXPECT_EQ(u->fence->version(), 4u);
  EXPECT_EQ(u->nonce, "s2");
}

TEST(FenceSlotTest, RejectsNonIncreasingVersions) {
  FenceSlot slot;
  ASSERT_TRUE(slot.SetDesired(Fence(5)).ok());
  Status s = slot.SetDesired(Fence(5, "another"));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << "the same version for another fence";
  EXPECT_TRUE(slot.SetDesired(Fence(5)).ok()) << "the same fence again changes nothing";
  EXPECT_EQ(slot.SetDesired(Fence(4)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(slot.SetDesired(nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(slot.desired_version(), 5u);
}

// An acknowledged fence is not kept (the agent holds it): only its version. A new stream then
// needs it again, and the same version handed back is taken as its refill.
TEST(FenceSlotTest, DropsAnAcknowledgedFenceAndTakesItBackForANewStream) {
  FenceSlot slot;
  NodeFencePtr fence = Fence(6, "p");
  std::weak_ptr<const WireFence> alive = fence;
  ASSERT_TRUE(slot.SetDesired(std::move(fence)).ok());
  auto u = slot.TakeNext("s1");
  ASSERT_TRUE(u.has_value());
  u.reset();  // grpc has written it
  EXPECT_FALSE(alive.expired()) << "held until the agent answers";
  EXPECT_FALSE(slot.NeedsRefill());
  ASSERT_EQ(slot.OnAck(6, "s1"), AnswerResult::kAccepted);
  EXPECT_TRUE(alive.expired()) << "an acknowledged fence's bytes are dropped";
  EXPECT_EQ(slot.desired_version(), 6u);
  EXPECT_FALSE(slot.NeedsRefill()) << "this stream's agent has it";
  EXPECT_TRUE(slot.SetDesired(Fence(6, "p")).ok()) << "a refill nobody needs";
  EXPECT_FALSE(slot.desired()) << "is not held";

  slot.ResetStream();
  EXPECT_TRUE(slot.NeedsRefill());
  EXPECT_FALSE(slot.HasDue());
  EXPECT_EQ(slot.SetDesired(Fence(5, "p")).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(slot.SetDesired(Fence(6, "p")).ok());
  EXPECT_FALSE(slot.NeedsRefill());
  auto again = slot.TakeNext("s2");
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->fence->version(), 6u);
  EXPECT_EQ(again->fence->Parse().policies(0).name(), "p");

  // A NACKed fence is kept (a new stream resends it without asking anyone).
  ASSERT_TRUE(slot.SetDesired(Fence(7, "q")).ok());
  ASSERT_EQ(slot.OnAck(6, "s2"), AnswerResult::kAccepted);
  auto u7 = slot.TakeNext("s2b");
  ASSERT_TRUE(u7.has_value());
  ASSERT_EQ(slot.OnNack(7, "s2b", "no", kNow), AnswerResult::kAccepted);
  slot.ResetStream();
  EXPECT_FALSE(slot.NeedsRefill());
  EXPECT_TRUE(slot.HasDue());
}

}  // namespace
}  // namespace feedguard::controller
