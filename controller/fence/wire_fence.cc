#include "controller/fence/wire_fence.h"

#include <utility>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

namespace feedguard::controller {

namespace pbio = google::protobuf::io;

std::string WireFence::Serialize(const feedguard::v1::NodeFence& fence) {
  std::string out;
  if (fence.version() != 0) {
    feedguard::v1::NodeFence copy = fence;
    copy.clear_version();
    return Serialize(copy);
  }
  out.reserve(fence.ByteSizeLong());
  {
    pbio::StringOutputStream zero_copy(&out);
    pbio::CodedOutputStream coded(&zero_copy);
    coded.SetSerializationDeterministic(true);
    fence.SerializeWithCachedSizes(&coded);
  }
  out.shrink_to_fit();
  return out;
}

std::shared_ptr<const WireFence> WireFence::From(const feedguard::v1::NodeFence& fence) {
  return std::make_shared<const WireFence>(fence.node_name(), fence.version(), Serialize(fence));
}

WireFence::WireFence(std::string node_name, uint64_t version, std::string unversioned)
    : node_name_(std::move(node_name)), version_(version), bytes_(std::move(unversioned)) {}

size_t WireFence::WriteVersionField(uint8_t (&out)[kMaxVersionFieldBytes]) const {
  // Field 2 (version), wire type 0 (varint): one tag byte and at most ten bytes of varint.
  static_assert(feedguard::v1::NodeFence::kVersionFieldNumber == 2);
  constexpr uint8_t kVersionTag = (2 << 3) | 0;
  if (version_ == 0) return 0;  // proto3: a zero scalar is not written
  out[0] = kVersionTag;
  uint8_t* end = pbio::CodedOutputStream::WriteVarint64ToArray(version_, out + 1);
  return static_cast<size_t>(end - out);
}

void WireFence::AppendVersioned(std::string* out) const {
  uint8_t field[kMaxVersionFieldBytes];
  const size_t n = WriteVersionField(field);
  out->reserve(out->size() + bytes_.size() + n);
  out->append(bytes_);
  out->append(reinterpret_cast<const char*>(field), n);
}

feedguard::v1::NodeFence WireFence::Parse() const {
  feedguard::v1::NodeFence f;
  (void)f.ParseFromString(bytes_);  // our own serialization: it parses
  f.set_version(version_);
  return f;
}

}  // namespace feedguard::controller
