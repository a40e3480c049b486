// fence_update.h — a FenceUpdate as grpc sends it, built around the node's held WireFence.
//
// Every send of a node's fence used to copy its bytes twice: into the outgoing message, then
// into the buffer grpc serializes that message to, and both copies lived until the write was
// done. In a burst (a controller start, a policy edit) every agent has a write in flight at once
// (~11 KB each at 30 pods per node). Here the buffer refers to the held bytes instead; only the
// message's and fields' headers and the version and nonce fields are written anew.
#pragma once

#include <string_view>

#include <grpcpp/support/byte_buffer.h>

#include "controller/fence/wire_fence.h"

namespace feedguard::controller {

// ControllerMessage{update: FenceUpdate{fence: `fence` with its version, nonce: `nonce`}},
// serialized, as three slices: the message and field headers, the fence's bytes (not copied:
// the buffer keeps `fence` alive until grpc releases the slice) and the version and nonce
// fields. It parses as that ControllerMessage, fields in field-number order.
grpc::ByteBuffer FenceUpdateBuffer(const NodeFencePtr& fence, std::string_view nonce);

}  // namespace feedguard::controller
