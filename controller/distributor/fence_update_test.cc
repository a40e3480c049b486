#include "controller/distributor/fence_update.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <google/protobuf/util/message_differencer.h>
#include <grpcpp/support/slice.h>

#include "feedguard/v1/nodefence.pb.h"

namespace feedguard::controller {
namespace {

namespace v1 = feedguard::v1;

// A fence of `neighbours` loader-shaped pods (~180 bytes each on the wire).
v1::NodeFence Sample(uint64_t version, int neighbours) {
  v1::NodeFence f;
  f.set_node_name("gpu-1");
  f.set_version(version);
  f.add_policies()->set_name("vision");
  auto* t = f.add_trainers();
  t->set_policy("vision");
  t->mutable_pod()->set_uid("0b5c1c1e-8f4e-4d0a-9a55-1f7c2a3b4c5d");
  t->mutable_pod()->add_containers()->set_container_id("containerd://" + std::string(64, 'a'));
  for (int i = 0; i < neighbours; ++i) {
    auto* n = f.add_neighbours();
    n->set_policy("vision");
    n->mutable_pod()->set_uid("u-" + std::to_string(i));
    n->mutable_pod()->set_name("spin-" + std::to_string(i));
    n->mutable_pod()->add_containers()->set_container_id("containerd://" + std::string(64, 'b'));
  }
  return f;
}

std::string Bytes(const grpc::ByteBuffer& b) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(b.Dump(&slices).ok());
  std::string out;
  for (const auto& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

TEST(FenceUpdateTest, ParsesAsTheTypedMessage) {
  // Sizes whose length prefixes take one, two and three varint bytes; versions that are not
  // written (0), short and the longest.
  for (int neighbours : {0, 1, 100}) {
    for (uint64_t version : {uint64_t{0}, uint64_t{7}, std::numeric_limits<uint64_t>::max()}) {
      for (const char* nonce : {"", "n-1f3a-42"}) {
        SCOPED_TRACE(testing::Message() << neighbours << " " << version << " '" << nonce << "'");
        const v1::NodeFence fence = Sample(version, neighbours);
        grpc::ByteBuffer buffer;
        ASSERT_TRUE(SerializeFenceUpdate(*WireFence::From(fence), nonce, &buffer).ok());

        v1::ControllerMessage got;
        ASSERT_TRUE(got.ParseFromString(Bytes(buffer)));
        v1::ControllerMessage want;
        *want.mutable_update()->mutable_fence() = fence;
        want.mutable_update()->set_nonce(nonce);
        EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(got, want))
            << got.DebugString();
        EXPECT_EQ(buffer.Length(), want.ByteSizeLong());  // nothing more, nothing less
        EXPECT_TRUE(got.GetReflection()->GetUnknownFields(got).empty());
      }
    }
  }
}

TEST(FenceUpdateTest, HeldBytesThatDoNotParseAreAnError) {
  WireFence broken("gpu-1", 3, std::string("\xff\xff\xff", 3));
  grpc::ByteBuffer buffer;
  Status st = SerializeFenceUpdate(broken, "n", &buffer);
  EXPECT_EQ(st.code(), StatusCode::kInternal) << st.ToString();
}

}  // namespace
}  // namespace feedguard::controller
