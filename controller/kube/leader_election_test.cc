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

// A sleeper that runs `before(n)` before its n-th sleep (n from 1), then sleeps on `inner`.
class ScriptedSleeper : public Sleeper {
 public:
  ScriptedSleeper(std::shared_ptr<FakeSleeper> inner, std::function<void(int)> before)
      : inner_(std::move(inner)), before_(std::move(before)) {}
  bool Sleep(std::chrono::nanoseconds d, std::stop_token stop) override {
    before_(++n_);
    return inner_->Sleep(d, stop);
  }

 private:
  std::shared_ptr<FakeSleeper> inner_;
  std::function<void(int)> before_;
  int n_ = 0;
};

// A standby is told when the holder stops renewing (its record unchanged for silent_after), when
// it renews again, when the Lease cannot be read, and no more once it leads.
TEST(LeaderElectionTest, StandbyToldWhenTheLeaderFallsSilentAndWhenItSpeaksAgain) {
  Fixture f;
  LeaderElector a = f.Elector("a");
  ASSERT_TRUE(a.TryAcquireOrRenew());
  auto cfg = f.Config("b");  // retry 2 s, lease 15 s
  cfg.silent_after = seconds(3);
  std::vector<std::pair<int, bool>> told;  // (sleeps so far, silent)
  int sleeps = 0;
  std::stop_source stop;
  cfg.on_leader_silent = [&](bool silent) { told.emplace_back(sleeps, silent); };
  bool led = false;
  cfg.on_started_leading = [&] {
    led = true;
    stop.request_stop();
  };
  // Watching for silence, b reads the Lease every half retry period: t = 0, 1, 2, ... (read n
  // after sleep n). a renews during sleep 2 (t = 1) and sleep 6 (t = 5) only; the API server
  // fails read 10 (t = 10).
  auto sleeper = std::make_shared<ScriptedSleeper>(f.sleeper, [&](int n) {
    sleeps = n;
    f.server.fail = false;
    if (n == 2 || n == 6) {
      EXPECT_TRUE(a.TryAcquireOrRenew());
    }
    if (n == 10) f.server.fail = true;
  });
  LeaderElector b(f.client, cfg, f.clock, sleeper);
  b.Run(stop.get_token());
  EXPECT_TRUE(led);
  // Read 2 (t = 2) sees a's renewal; read 5 (t = 5): unchanged for 3 s, silent. Read 6 (t = 6)
  // sees the next renewal: not silent; read 9 (t = 9): silent again; read 10 fails: not silent;
  // read 11: silent; read 21 (t = 21): 15 s after read 6, b takes the Lease and is told nothing
  // more.
  const std::vector<std::pair<int, bool>> want = {
      {5, true}, {6, false}, {9, true}, {10, false}, {11, true}};
  EXPECT_EQ(told, want);
  const auto sleeps_taken = f.sleeper->sleeps();
  ASSERT_GE(sleeps_taken.size(), 21u);
  for (size_t i = 0; i < 21; ++i) EXPECT_EQ(sleeps_taken[i], seconds(1)) << i;
}

TEST(LeaderElectionTest, NoSilenceWithoutAHolderOrWhenDisabled) {
  Fixture f;
  auto cfg = f.Config("b");
  int told = 0;
  cfg.silent_after = seconds(3);
  cfg.on_leader_silent = [&](bool) { ++told; };
  std::stop_source stop;
  cfg.on_started_leading = [&] { stop.request_stop(); };
  LeaderElector b(f.client, cfg, f.clock, f.sleeper);  // no lease yet: b creates it and leads
  b.Run(stop.get_token());
  EXPECT_EQ(told, 0);

  Fixture g;
  LeaderElector a = g.Elector("a");
  ASSERT_TRUE(a.TryAcquireOrRenew());
  auto off = g.Config("b");  // silent_after 0: never told, even while a is silent
  off.on_leader_silent = [&](bool) { ++told; };
  std::stop_source stop2;
  bool led = false;
  off.on_started_leading = [&] {
    led = true;
    stop2.request_stop();
  };
  LeaderElector b2(g.client, off, g.clock, g.sleeper);
  b2.Run(stop2.get_token());
  EXPECT_EQ(told, 0);
  EXPECT_TRUE(led);  // after a's Lease ran out
}

TEST(LeaderElectionTest, TimeFormats) {
  const auto t = std::chrono::system_clock::time_point(std::chrono::microseconds(1700000000123456));
  EXPECT_EQ(FormatMicroTime(t), "2023-11-14T22:13:20.123456Z");
  EXPECT_EQ(FormatTime(t), "2023-11-14T22:13:20Z");
}

}  // namespace
}  // namespace feedguard::kube
