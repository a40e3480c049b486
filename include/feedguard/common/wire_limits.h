// wire_limits.h — the sizes both ends of the controller⇄agent stream hold each other to,
// defined once so that each side's limit is set against the other's (issue 28, item 2).
//
//   controller → agent   a NodeFence is at most kMaxFenceBytes serialized: the reconciler does
//                        not send a bigger one (the node keeps its last fence and is reported
//                        failing, reason FenceTooLarge); the agent accepts messages up to
//                        kAgentMaxReceiveBytes, which is larger by more than an update's
//                        envelope, so every fence the controller sends is one the agent reads.
//   pods in a fence      at most kMaxFenceContainersPerPod container ids per pod: a pod with
//                        more goes without them (its pod-level cgroup is still fenced) and is
//                        reported (TooManyContainers); a tenant's pod of thousands of containers
//                        cannot push its node's fence over the limit.
//   observation          a fence names at most kMaxObservedPodsPerNode GPU pods to observe (the
//                        controller keeps the first by namespace/name and counts the rest); a
//                        report carries at most kMaxObservedContenders contenders per window,
//                        so the observations of a full node stay ~60 KB, well inside a report.
//   agent → controller   the controller's receive limit (DistributorOptions::
//                        max_receive_message_bytes) is kMaxAgentMessageBytes; the agent fits
//                        every report under it (FitReportToLimit, agent/client/fence_client.h).
//
// Both binaries take flags that override these; the chart sets the agent's receive limit from
// the controller's fence limit (charts/feedguard/values.yaml `limits`).
#pragma once

#include <cstddef>

namespace feedguard {

// Below grpc's default receive limit (4 MiB) by more than an envelope, so that agents that set
// no limit of their own (older ones) read every fence too.
inline constexpr size_t kMaxFenceBytes = (4u << 20) - (64u << 10);
inline constexpr size_t kAgentMaxReceiveBytes = 8u << 20;
inline constexpr size_t kGrpcDefaultMaxReceiveBytes = 4u << 20;
inline constexpr size_t kMaxFenceContainersPerPod = 64;
inline constexpr size_t kMaxAgentMessageBytes = 256u << 10;
inline constexpr size_t kMaxObservedPodsPerNode = 64;
inline constexpr size_t kMaxObservedContenders = 8;
// FenceUpdate around a fence: its tag and length, the nonce, the oneof's tag and length.
inline constexpr size_t kFenceUpdateEnvelopeBytes = 1024;

static_assert(kAgentMaxReceiveBytes >= kMaxFenceBytes + kFenceUpdateEnvelopeBytes,
              "the agent must read every fence the controller sends");
static_assert(kGrpcDefaultMaxReceiveBytes >= kMaxFenceBytes + kFenceUpdateEnvelopeBytes,
              "an agent with grpc's default limit must read every fence the controller sends");

}  // namespace feedguard
