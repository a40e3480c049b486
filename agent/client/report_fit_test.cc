// FitReportToLimit: a report never goes out bigger than the controller reads (issue 28: limits
// on both sides of the boundary set against each other).
#include <gtest/gtest.h>

#include "agent/client/fence_client.h"
#include "feedguard/common/wire_limits.h"

namespace feedguard::agent {
namespace {

namespace v1 = feedguard::v1;

v1::NodeReport Report(int enforced, int failed, size_t message_bytes) {
  v1::NodeReport r;
  r.set_applied_version(7);
  for (int i = 0; i < enforced + failed; ++i) {
    auto* p = r.add_pods();
    p->set_uid("00000000-0000-0000-0000-" + std::to_string(100000000000 + i));
    p->set_namespace_("batch");
    p->set_name("pod-" + std::to_string(i));
    p->set_policy("vision");
    p->set_enforced(i < enforced);
    if (i >= enforced) p->set_reason("CgroupNotFound");
    p->set_message(std::string(message_bytes, 'm'));
  }
  return r;
}

TEST(ReportFitTest, ASmallReportIsLeftAsItIs) {
  v1::NodeReport r = Report(110, 2, 300);
  const std::string before = r.SerializeAsString();
  EXPECT_EQ(FitReportToLimit(&r, kMaxAgentMessageBytes), 0u);
  EXPECT_EQ(r.SerializeAsString(), before);
}

TEST(ReportFitTest, LongMessagesAreCutFirst) {
  v1::NodeReport r = Report(250, 10, 4000);  // ~1 MB
  ASSERT_GT(r.ByteSizeLong(), kMaxAgentMessageBytes);
  EXPECT_EQ(FitReportToLimit(&r, kMaxAgentMessageBytes), 0u);
  EXPECT_LE(r.ByteSizeLong(), kMaxAgentMessageBytes);
  EXPECT_EQ(r.pods_size(), 260);
  EXPECT_EQ(r.pods(259).message().size(), 512u);
  EXPECT_EQ(r.pods(259).reason(), "CgroupNotFound");
}

TEST(ReportFitTest, PastThatEnforcedPodsGoFirstAndFailuresStay) {
  v1::NodeReport r = Report(3000, 5, 100);
  ASSERT_GT(r.ByteSizeLong(), 64u << 10);
  const size_t dropped = FitReportToLimit(&r, 64u << 10);
  EXPECT_GT(dropped, 0u);
  EXPECT_LE(r.ByteSizeLong(), 64u << 10);
  int failed = 0;
  for (const auto& p : r.pods()) failed += p.enforced() ? 0 : 1;
  EXPECT_EQ(failed, 5);  // every failure is still reported
  EXPECT_EQ(static_cast<size_t>(r.pods_size()) + dropped, 3005u);
}

}  // namespace
}  // namespace feedguard::agent
