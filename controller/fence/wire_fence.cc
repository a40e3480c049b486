#include "controller/fence/wire_fence.h"

#include <utility>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <openssl/sha.h>

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

FenceDigest WireFence::Digest(const std::string& unversioned) {
  FenceDigest d{};
  SHA256(reinterpret_cast<const unsigned char*>(unversioned.data()), unversioned.size(), d.data());
  return d;
}

std::shared_ptr<const WireFence> WireFence::From(const feedguard::v1::NodeFence& fence) {
  return std::make_shared<const WireFence>(fence.node_name(), fence.version(), Serialize(fence));
}

WireFence::WireFence(std::string node_name, uint64_t version, std::string unversioned)
    : node_name_(std::move(node_name)), version_(version), bytes_(std::move(unversioned)) {}

feedguard::v1::NodeFence WireFence::Parse() const {
  feedguard::v1::NodeFence f;
  (void)f.ParseFromString(bytes_);  // our own serialization: it parses
  f.set_version(version_);
  return f;
}

}  // namespace feedguard::controller
