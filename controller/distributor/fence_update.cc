#include "controller/distributor/fence_update.h"

#include <cstdint>
#include <string>

#include <google/protobuf/io/coded_stream.h>
#include <grpcpp/support/slice.h>

#include "feedguard/v1/nodefence.pb.h"

namespace feedguard::controller {
namespace {

namespace pbio = google::protobuf::io;

// Length-delimited (wire type 2) tags of the fields written here.
constexpr uint8_t LenTag(int field) { return static_cast<uint8_t>((field << 3) | 2); }
static_assert(feedguard::v1::ControllerMessage::kUpdateFieldNumber == 1);
static_assert(feedguard::v1::FenceUpdate::kFenceFieldNumber == 1);
static_assert(feedguard::v1::FenceUpdate::kNonceFieldNumber == 2);
constexpr uint8_t kUpdateTag = LenTag(1);
constexpr uint8_t kFenceTag = LenTag(1);
constexpr uint8_t kNonceTag = LenTag(2);

void ReleaseFence(void* held) { delete static_cast<NodeFencePtr*>(held); }

}  // namespace

grpc::ByteBuffer FenceUpdateBuffer(const NodeFencePtr& fence, std::string_view nonce) {
  const std::string& bytes = fence->unversioned();
  uint8_t version[WireFence::kMaxVersionFieldBytes];
  const size_t version_len = fence->WriteVersionField(version);

  // Tail: the fence's version field, then the nonce field (proto3 writes no empty string).
  std::string tail(reinterpret_cast<const char*>(version), version_len);
  if (!nonce.empty()) {
    uint8_t head[1 + 5];
    head[0] = kNonceTag;
    uint8_t* end = pbio::CodedOutputStream::WriteVarint32ToArray(
        static_cast<uint32_t>(nonce.size()), head + 1);
    tail.append(reinterpret_cast<const char*>(head), static_cast<size_t>(end - head));
    tail.append(nonce);
  }
  const size_t fence_len = bytes.size() + version_len;
  const size_t nonce_len = tail.size() - version_len;
  const size_t update_len =
      1 + pbio::CodedOutputStream::VarintSize64(fence_len) + fence_len + nonce_len;

  uint8_t head[2 * (1 + 10)];
  uint8_t* p = head;
  *p++ = kUpdateTag;
  p = pbio::CodedOutputStream::WriteVarint64ToArray(update_len, p);
  *p++ = kFenceTag;
  p = pbio::CodedOutputStream::WriteVarint64ToArray(fence_len, p);

  grpc::Slice slices[3] = {
      grpc::Slice(head, static_cast<size_t>(p - head)),
      // grpc reads the slice and calls ReleaseFence once it is done with it, on any thread.
      grpc::Slice(const_cast<char*>(bytes.data()), bytes.size(), &ReleaseFence,
                  new NodeFencePtr(fence)),
      grpc::Slice(tail),
  };
  return grpc::ByteBuffer(slices, 3);
}

}  // namespace feedguard::controller
