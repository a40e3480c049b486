#include "controller/kube/leader_election.h"

#include <gtest/gtest.h>

#include "controller/kube/fake_transport.h"

namespace feedguard::kube {
namespace {

using std::chrono::seconds;

// An in-memory lease endpoint with optimistic concurrency, like the API server's.
class LeaseServer {
 public:
  FakeReply Handle(const HttpRequest& r) {
    std::lock_guard<std::mutex> lock(mu_);
    if (fail) return FakeReply{HttpResponse{500, "{}"}};
    if (r.method == "GET") {
      if (lease_.is_null()) return FakeReply{HttpResponse{404, R"({"message":"not found"})"}};
      return FakeReply{HttpResponse{200, lease_.dump()}};
    }
    Json body = Json::parse(r.body);
    if (r.method == "POST") {
      if (!lease_.is_null()) return FakeReply{HttpResponse{409, R"({"reason":"AlreadyExists"})"}};
    } else if (r.method == "PUT") {
      if (ResourceVersionOf(body) != ResourceVersionOf(lease_)) {
        return FakeReply{HttpResponse{409, R"({"reason":"Conflict","message":"stale"})"}};
      }
    }
    body["metadata"]["resourceVersion"] = std::to_string(++rv_);
    lease_ = body;
    return FakeReply{HttpResponse{200, lease_.dump()}};
  }
  Json lease() {
    std::lock_guard<std::mutex> lock(mu_);
    return lease_;
  }
  bool fail = false;

 private:
  std::mutex mu_;
  Json lease_;
  int rv_ = 0;
};

struct Fixture {
  LeaseServer server;
  std::shared_ptr<ManualTimeSource> clock = std::make_shared<ManualTimeSource>();
  ClientPtr client = std::make_shared<Client>(
      std::make_shared<FakeTransport>([this](const HttpRequest& r) { return server.Handle(r); }));
  std::shared_ptr<FakeSleeper> sleeper = std::make_shared<FakeSleeper>(clock);
  // A candidate `id` on this server, clock and sleeper.
  LeaderElector Elector(const std::string& id) {
    return LeaderElector(client, Config(id), clock, sleeper);
  }
  LeaderElectionConfig Config(const std::string& id) {
    LeaderElectionConfig c;
    c.lease_namespace = "kube-system";
    c.lease_name = "feedguard";
    c.identity = id;
    return c;
  }
};

// Candidates "a" and "b" on one lease.
class LeaderElectionTwoCandidatesTest : public ::testing::Test {
 protected:
  Fixture f;
  LeaderElector a = f.Elector("a");
  LeaderElector b = f.Elector("b");
};

TEST_F(LeaderElectionTwoCandidatesTest, OneHolderTakeoverAfterExpiryCountsTransitions) {
  EXPECT_TRUE(a.TryAcquireOrRenew());
  EXPECT_FALSE(b.TryAcquireOrRenew());
  EXPECT_EQ(b.ObservedLeader(), "a");
  Json l = f.server.lease();
  EXPECT_EQ(l["spec"]["holderIdentity"], "a");
  EXPECT_EQ(l["spec"]["leaseDurationSeconds"], 15);
  EXPECT_EQ(l["spec"]["leaseTransitions"], 0);
  const std::string acquired = l["spec"]["acquireTime"];

  f.clock->Advance(seconds(5));
  EXPECT_TRUE(a.TryAcquireOrRenew());  // renew keeps acquireTime
  EXPECT_EQ(f.server.lease()["spec"]["acquireTime"], acquired);
  EXPECT_NE(f.server.lease()["spec"]["renewTime"], acquired);
  f.clock->Advance(seconds(14));
  EXPECT_FALSE(b.TryAcquireOrRenew());  // b saw a renewal 0 s ago (its own observation)
  f.clock->Advance(seconds(14));
  EXPECT_FALSE(b.TryAcquireOrRenew());  // 14 s since b saw the record change
  f.clock->Advance(seconds(2));
  EXPECT_TRUE(b.TryAcquireOrRenew());  // a silent for > 15 s
  l = f.server.lease();
  EXPECT_EQ(l["spec"]["holderIdentity"], "b");
  EXPECT_EQ(l["spec"]["leaseTransitions"], 1);
  EXPECT_FALSE(a.TryAcquireOrRenew());  // a sees b's fresh record
}

TEST_F(LeaderElectionTwoCandidatesTest, ReleaseLetsOtherTakeOverAtOnce) {
  ASSERT_TRUE(a.TryAcquireOrRenew());
  ASSERT_FALSE(b.TryAcquireOrRenew());
  ASSERT_TRUE(a.Release().ok());
  EXPECT_EQ(f.server.lease()["spec"]["holderIdentity"], "");
  EXPECT_TRUE(b.TryAcquireOrRenew());
}

TEST(LeaderElectionTest, RunLosesLeadershipAfterRenewDeadline) {
  Fixture f;
  auto cfg = f.Config("a");
  int started = 0, stopped = 0;
  std::chrono::steady_clock::time_point started_at, stopped_at;
  int renewals = 0;
  cfg.on_started_leading = [&] {
    ++started;
    started_at = f.clock->MonotonicNow();
  };
  cfg.on_stopped_leading = [&] {
    ++stopped;
    stopped_at = f.clock->MonotonicNow();
  };
  // The API server starts failing during the third sleep (after two renewals).
  std::stop_source stop;
  class FlipSleeper : public Sleeper {
   public:
    FlipSleeper(std::shared_ptr<FakeSleeper> inner, LeaseServer* s, int* n)
        : inner_(std::move(inner)), s_(s), n_(n) {}
    bool Sleep(std::chrono::nanoseconds d, std::stop_token stop) override {
      if (++*n_ == 3) s_->fail = true;
      return inner_->Sleep(d, stop);
    }
    std::shared_ptr<FakeSleeper> inner_;
    LeaseServer* s_;
    int* n_;
  };
  LeaderElector runner(f.client, cfg, f.clock,
                       std::make_shared<FlipSleeper>(f.sleeper, &f.server, &renewals));
  runner.Run(stop.get_token());
  EXPECT_EQ(started, 1);
  EXPECT_EQ(stopped, 1);
  EXPECT_FALSE(runner.IsLeader());
  // Last good renew at 2 retries (4 s); failures from there for ≥ 10 s.
  EXPECT_GE(stopped_at - started_at, seconds(14));
  EXPECT_LE(stopped_at - started_at, seconds(16));
  for (auto d : f.sleeper->sleeps()) EXPECT_EQ(d, seconds(2));
}

TEST(LeaderElectionTest, TimeFormats) {
  const auto t = std::chrono::system_clock::time_point(std::chrono::microseconds(1700000000123456));
  EXPECT_EQ(FormatMicroTime(t), "2023-11-14T22:13:20.123456Z");
  EXPECT_EQ(FormatTime(t), "2023-11-14T22:13:20Z");
}

}  // namespace
}  // namespace feedguard::kube
