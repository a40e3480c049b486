#include "common/metrics.h"

#include <gtest/gtest.h>
#include <httplib.h>

namespace feedguard {
namespace {

TEST(HistogramTest, CumulativeBuckets) {
  Histogram h({0.01, 0.1, 1});
  h.Observe(0.005);
  h.Observe(0.05);
  h.Observe(0.05);
  h.Observe(5);
  std::string out = h.Render("fence_apply_seconds", "time to apply");
  EXPECT_NE(out.find("fence_apply_seconds_bucket{le=\"0.01\"} 1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("fence_apply_seconds_bucket{le=\"0.10000000000000001\"} 3\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("fence_apply_seconds_bucket{le=\"+Inf\"} 4\n"), std::string::npos) << out;
  EXPECT_NE(out.find("fence_apply_seconds_count 4\n"), std::string::npos) << out;
  EXPECT_NE(out.find("# TYPE fence_apply_seconds histogram"), std::string::npos);
}

TEST(CounterSumTest, NeverDecreasesAcrossRestartsAndDepartures) {
  CounterSum sum;
  EXPECT_EQ(sum.Update({}), 0);
  EXPECT_EQ(sum.Update({{"a", 3}, {"b", 1}}), 4);
  EXPECT_EQ(sum.Update({{"a", 5}, {"b", 1}}), 6);
  EXPECT_EQ(sum.Update({{"a", 5}}), 6);            // b disconnected: what it added stays
  EXPECT_EQ(sum.Update({{"a", 5}, {"b", 1}}), 6);  // b back with the same count: not twice
  EXPECT_EQ(sum.Update({{"a", 2}, {"b", 1}}), 8);  // a restarted and counted 2 since
  EXPECT_EQ(sum.Update({{"a", 2}, {"b", 4}, {"c", 1}}), 12);
}

TEST(MetricsServerTest, ServesMetricsHealthAndReadiness) {
  std::atomic<bool> ready{false};
  auto s = MetricsServer::Start(
      "127.0.0.1:0", [] { return RenderGauge("feedguard_up", "1 when serving", 1); },
      [&] { return ready.load(); });
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  httplib::Client c("127.0.0.1", (*s)->port());
  auto m = c.Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 200);
  EXPECT_NE(m->body.find("feedguard_up 1\n"), std::string::npos);
  EXPECT_EQ(c.Get("/healthz")->status, 200);
  EXPECT_EQ(c.Get("/readyz")->status, 503);
  ready = true;
  EXPECT_EQ(c.Get("/readyz")->status, 200);
}

}  // namespace
}  // namespace feedguard
