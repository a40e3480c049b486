// fence_update.h — the ControllerMessage a node's held fence goes out as.
//
// Built and serialized as grpc's typed stream would (a ControllerMessage, then
// SerializationTraits): the held WireFence is parsed into the message for the send and the
// message dropped once serialized. A hand-written encoder that referred to the held bytes
// instead (no copy per write) was measured at the scale ladder's peak and did not pay
// (docs/DESIGN.md "Fences held serialized"), so the message is protobuf's to encode: a field
// added to ControllerMessage or FenceUpdate needs no second writer.
#pragma once

#include <string>

#include <grpcpp/support/byte_buffer.h>

#include "controller/fence/wire_fence.h"
#include "feedguard/common/status.h"

namespace feedguard::controller {

// ControllerMessage{update: FenceUpdate{fence: `fence` with its version, nonce: `nonce`}},
// serialized into `out` as grpc's typed writer does. An error only when the held bytes do not
// parse (WireFence serialized them, so: a bug) or serialization fails.
Status SerializeFenceUpdate(const WireFence& fence, std::string nonce, grpc::ByteBuffer* out);

}  // namespace feedguard::controller
