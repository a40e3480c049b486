// FitReportToLimit: a report never goes out bigger than the controller reads (issue 28: limits
// on both sides of the boundary set against each other).
#include <gtest/gtest.h>

#include <cstdint>

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

// A full node's observations (kMaxObservedPodsPerNode pods, three windows each with
// kMaxObservedContenders contenders), sent worst first.
void AddObservations(v1::NodeReport* r, size_t pods) {
  for (size_t i = 0; i < pods; ++i) {
    auto* o = r->add_observations();
    o->set_uid("11111111-0000-0000-0000-" + std::to_string(100000000000 + i));
    for (uint32_t w : {60u, 600u, 3600u}) {
      auto* win = o->add_windows();
      win->set_window_seconds(w);
      win->set_covered_seconds(w);
      win->set_wait_seconds(w / 2.0);
      win->set_wait_source(v1::ObservationWindow::PSI);
      win->set_gpu_sampled(true);
      win->set_gpu_busy_fraction(0.4);
      for (size_t c = 0; c < kMaxObservedContenders; ++c) {
        win->add_contenders()->set_pod_uid("22222222-0000-0000-0000-" +
                                           std::to_string(100000000000 + c));
        win->mutable_contenders(static_cast<int>(c))->set_cpu_seconds(1.5);
      }
    }
  }
}

TEST(ReportFitTest, ObservationsGoBeforeAnyPodTheLeastStarvedFirst) {
  v1::NodeReport r = Report(100, 3, 100);
  AddObservations(&r, kMaxObservedPodsPerNode);
  const v1::NodeReport full = r;
  const size_t limit = 48u << 10;
  ASSERT_GT(r.ByteSizeLong(), limit);
  ASSERT_LT(Report(100, 3, 100).ByteSizeLong(), limit / 2) << "the pods alone fit";
  const size_t dropped = FitReportToLimit(&r, limit);
  EXPECT_LE(r.ByteSizeLong(), limit);
  EXPECT_EQ(r.pods_size(), 103) << "every pod's outcome stays while observations can go";
  ASSERT_GT(r.observations_size(), 0) << "only as many observations go as the limit needs";
  EXPECT_EQ(dropped, kMaxObservedPodsPerNode - static_cast<size_t>(r.observations_size()));
  for (int i = 0; i < r.observations_size(); ++i) {  // the first (the worst) kept, in order
    EXPECT_EQ(r.observations(i).uid(), full.observations(i).uid());
  }
  // No more went than needed: the next one back would not fit (16 bytes: the envelope).
  v1::NodeReport plus = r;
  *plus.add_observations() = full.observations(r.observations_size());
  EXPECT_GT(plus.ByteSizeLong(), limit - 16);
}

TEST(ReportFitTest, PodsGoOnlyOnceEveryObservationIsGone) {
  v1::NodeReport r = Report(3000, 5, 100);
  AddObservations(&r, 10);
  const size_t dropped = FitReportToLimit(&r, 64u << 10);
  EXPECT_LE(r.ByteSizeLong(), 64u << 10);
  EXPECT_EQ(r.observations_size(), 0);
  EXPECT_LT(r.pods_size(), 3005);
  EXPECT_EQ(dropped, 10u + (3005u - static_cast<size_t>(r.pods_size())));
}

}  // namespace
}  // namespace feedguard::agent
