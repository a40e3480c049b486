// wire_fence.h — a node's desired NodeFence as the controller holds it: serialized.
//
// A fence is shared between the reconciler, the node's FenceSlot and the write in flight, and
// held only until the node's agent has acknowledged it (docs/DESIGN.md §5, "a fence is held
// until acknowledged"): then the slot drops it and the reconciler keeps its digest, so that the
// next resolution of the node compares against 32 bytes, not ~5 KB of fence per node. As a
// parsed protobuf, each fenced pod cost ~0.7 KB (a heap std::string per field, a message per
// pod and per container); as wire bytes ~0.2 KB, and the bytes are what every send needs
// anyway. The version is kept beside the bytes, not in them: two resolutions of a node compare
// byte for byte (Same(), or their digests); a send parses the bytes into its message and sets
// the version.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "feedguard/v1/nodefence.pb.h"

namespace feedguard::controller {

// SHA-256 of a fence's unversioned bytes: equal digests, same fence.
using FenceDigest = std::array<uint8_t, 32>;

class WireFence {
 public:
  // Serializes `fence` deterministically; its version is taken out of the bytes and kept beside.
  static std::shared_ptr<const WireFence> From(const feedguard::v1::NodeFence& fence);
  // `unversioned`: a NodeFence serialized with version 0 (e.g. Serialize(), or the bytes of
  // another WireFence), `version` its version.
  WireFence(std::string node_name, uint64_t version, std::string unversioned);

  const std::string& node_name() const { return node_name_; }
  uint64_t version() const { return version_; }
  // The NodeFence without its version.
  const std::string& unversioned() const { return bytes_; }
  // Whether two fences ask for the same thing (everything but the version equal).
  bool Same(const WireFence& other) const { return bytes_ == other.bytes_; }
  // The parsed NodeFence, version included: what a send puts into its FenceUpdate
  // (controller/distributor/fence_update.h) and what the agent receives.
  feedguard::v1::NodeFence Parse() const;

  // `fence` serialized deterministically with its version left out (what Same() compares).
  static std::string Serialize(const feedguard::v1::NodeFence& fence);
  // The digest of such bytes.
  static FenceDigest Digest(const std::string& unversioned);

 private:
  std::string node_name_;
  uint64_t version_ = 0;
  std::string bytes_;
};

using NodeFencePtr = std::shared_ptr<const WireFence>;

}  // namespace feedguard::controller
