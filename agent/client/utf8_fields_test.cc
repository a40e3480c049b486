#include "agent/client/utf8_fields.h"

#include <gtest/gtest.h>

#include "feedguard/v1/nodefence.pb.h"

namespace feedguard::agent {
namespace {

namespace v1 = feedguard::v1;

bool Parses(const v1::AgentMessage& m) {
  std::string bytes;
  // C++ protobuf serializes an invalid proto3 string (it logs), the controller's parser refuses.
  if (!m.SerializeToString(&bytes)) return false;
  v1::AgentMessage back;
  return back.ParseFromString(bytes);
}

TEST(Utf8FieldsTest, ReportWithATenantsCgroupNameParsesOnceEscaped) {
  v1::AgentMessage m;
  auto* pod = m.mutable_report()->add_pods();
  pod->set_uid("u1");
  pod->set_reason("CgroupNotFound");
  pod->set_message("no cgroup at /sys/fs/cgroup/kubepods/podu1/c1/\xff\xfe/cpuset.cpus");
  m.mutable_report()->add_pods()->set_message("fine");
  EXPECT_FALSE(StringFieldsAreUtf8(m));
  EXPECT_FALSE(Parses(m));
  EXPECT_EQ(EscapeInvalidUtf8Fields(&m), 1u);
  EXPECT_TRUE(StringFieldsAreUtf8(m));
  EXPECT_TRUE(Parses(m));
  EXPECT_EQ(m.report().pods(0).message(),
            "no cgroup at /sys/fs/cgroup/kubepods/podu1/c1/\\xFF\\xFE/cpuset.cpus");
  EXPECT_EQ(m.report().pods(0).reason(), "CgroupNotFound");
  EXPECT_EQ(m.report().pods(1).message(), "fine");
}

TEST(Utf8FieldsTest, EveryKindOfStringFieldIsCovered) {
  v1::AgentMessage hello;
  hello.mutable_hello()->set_agent_version("1.0\xc3");
  hello.mutable_hello()->add_capabilities("cpu.idle");
  hello.mutable_hello()->add_capabilities("\xfe");
  hello.mutable_hello()->mutable_topology()->set_allowed_cpus("0-3\xff");
  EXPECT_EQ(EscapeInvalidUtf8Fields(&hello), 3u);
  EXPECT_TRUE(Parses(hello));
  EXPECT_EQ(hello.hello().capabilities(0), "cpu.idle");
  EXPECT_EQ(hello.hello().capabilities(1), "\\xFE");
  EXPECT_EQ(hello.hello().topology().allowed_cpus(), "0-3\\xFF");

  v1::AgentMessage nack;
  nack.mutable_nack()->set_error("write /x/\xff: Permission denied");
  EXPECT_EQ(EscapeInvalidUtf8Fields(&nack), 1u);
  EXPECT_TRUE(Parses(nack));
}

TEST(Utf8FieldsTest, ValidMessagesAreLeftAsTheyAre) {
  v1::AgentMessage m;
  m.mutable_report()->add_pods()->set_message("caf\xc3\xa9 \xe2\x82\xac");
  const std::string before = m.SerializeAsString();
  EXPECT_TRUE(StringFieldsAreUtf8(m));
  EXPECT_EQ(EscapeInvalidUtf8Fields(&m), 0u);
  EXPECT_EQ(m.SerializeAsString(), before);
}

}  // namespace
}  // namespace feedguard::agent
