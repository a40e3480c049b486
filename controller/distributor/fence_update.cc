#include "controller/distributor/fence_update.h"

#include <utility>

#include <grpcpp/impl/codegen/proto_utils.h>

#include "feedguard/v1/nodefence.pb.h"

namespace feedguard::controller {

Status SerializeFenceUpdate(const WireFence& fence, std::string nonce, grpc::ByteBuffer* out) {
  feedguard::v1::ControllerMessage m;
  feedguard::v1::FenceUpdate* u = m.mutable_update();
  if (!u->mutable_fence()->ParseFromString(fence.unversioned())) {
    return Internal("held fence of node " + fence.node_name() + " does not parse");
  }
  u->mutable_fence()->set_version(fence.version());
  u->set_nonce(std::move(nonce));
  bool own_buffer = false;
  grpc::Status st =
      grpc::SerializationTraits<feedguard::v1::ControllerMessage>::Serialize(m, out, &own_buffer);
  if (!st.ok()) return Internal("serializing the fence update: " + st.error_message());
  return OkStatus();
}

}  // namespace feedguard::controller
