// The Distributor's bounds against hostile or broken agents (issue 13): a real server on
// 127.0.0.1 (insecure: identity is tested in tests/integration/grpc) and raw gRPC streams.
#include "controller/distributor/distributor.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "feedguard/v1/nodefence.grpc.pb.h"

namespace feedguard::controller {
namespace {

namespace v1 = feedguard::v1;
using namespace std::chrono_literals;

// Records OnUnreadable calls: "<node> unreadable" / "<node> readable".
class UnreadableObserver final : public AgentObserver {
 public:
  void OnConnected(const std::string&, const v1::AgentHello&) override {}
  void OnDisconnected(const std::string&) override {}
  void OnAck(const std::string&, uint64_t) override {}
  void OnNack(const std::string&, uint64_t, const std::string&) override {}
  void OnReport(const std::string&, const v1::NodeReport&) override {}
  void OnUnreadable(const std::string& node, const std::string& error) override {
    std::lock_guard l(mu_);
    events_.push_back(node + (error.empty() ? " readable" : " unreadable"));
  }
  std::vector<std::string> Events() {
    std::lock_guard l(mu_);
    return events_;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> events_;  // guarded by mu_
};

using AgentStream = grpc::ClientReaderWriter<v1::AgentMessage, v1::ControllerMessage>;

// A stub on a channel of its own to the server on 127.0.0.1:`port`.
std::unique_ptr<v1::FenceDistribution::Stub> Stub(int port) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetMaxSendMessageSize(64 << 20);
  return v1::FenceDistribution::NewStub(grpc::CreateCustomChannel(
      "127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials(), args));
}

// One stream: its context (deadline 10s) and the stream, opened on `stub`.
struct Call {
  explicit Call(v1::FenceDistribution::Stub& stub) {
    ctx.set_deadline(std::chrono::system_clock::now() + 10s);
    rw = stub.Stream(&ctx);
  }
  grpc::ClientContext ctx;
  std::unique_ptr<AgentStream> rw;
};

// Streams to the server at `port`, each on a channel of its own, held open until Close() or the
// end of the test.
class Streams {
 public:
  explicit Streams(int port) : port_(port) {}
  // A new stream (with an "authorization: Bearer <token>" header when `token` is not empty).
  AgentStream& Open(const std::string& token = "") {
    stubs_.push_back(Stub(port_));
    ctxs_.push_back(std::make_unique<grpc::ClientContext>());
    if (!token.empty()) ctxs_.back()->AddMetadata("authorization", "Bearer " + token);
    streams_.push_back(stubs_.back()->Stream(ctxs_.back().get()));
    return *streams_.back();
  }
  void CancelAll() {
    for (auto& c : ctxs_) c->TryCancel();
  }
  // Cancels every stream and reads each to its end.
  void Close() {
    CancelAll();
    v1::ControllerMessage in;
    for (auto& rw : streams_) {
      while (rw->Read(&in)) {
      }
      rw->Finish();
    }
  }
  const std::vector<std::unique_ptr<AgentStream>>& streams() const { return streams_; }

 private:
  int port_;
  std::vector<std::unique_ptr<v1::FenceDistribution::Stub>> stubs_;
  std::vector<std::unique_ptr<grpc::ClientContext>> ctxs_;
  std::vector<std::unique_ptr<AgentStream>> streams_;
};

// Polls `done` every `step`, at most `tries` times; returns its last answer.
template <typename Pred>
bool Eventually(Pred done, int tries = 100, std::chrono::milliseconds step = 20ms) {
  for (int i = 0; i < tries; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(step);
  }
  return done();
}

class DistributorBoundsTest : public ::testing::Test {
 protected:
  // Insecure; admits the nodes AddNode() made; with `authenticator` when one is given.
  DistributorOptions Options(std::shared_ptr<AgentAuthenticator> authenticator = nullptr) {
    DistributorOptions o;
    o.insecure = true;
    o.authenticator = std::move(authenticator);
    o.admit_node = [this](const std::string& node) {
      std::lock_guard l(mu_);
      return nodes_.count(node) > 0;
    };
    return o;
  }
  std::unique_ptr<Distributor> Start(DistributorOptions o) {
    auto d = Distributor::Start(std::move(o));
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    return d.ok() ? std::move(d).value() : nullptr;
  }
  // Sends `messages`, half-closes, drains, returns the final status.
  grpc::Status Exchange(v1::FenceDistribution::Stub& stub,
                        const std::vector<v1::AgentMessage>& messages) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 10s);
    auto rw = stub.Stream(&ctx);
    for (const auto& m : messages) rw->Write(m);
    rw->WritesDone();
    v1::ControllerMessage in;
    while (rw->Read(&in)) {
    }
    return rw->Finish();
  }
  // An agent of `node` that says hello gets its fence of `version`.
  void ExpectServed(v1::FenceDistribution::Stub& stub, const std::string& node, uint64_t version) {
    Call call(stub);
    v1::ControllerMessage in;
    ASSERT_TRUE(HelloAndRead(*call.rw, node, in));
    EXPECT_EQ(in.update().fence().version(), version);
    call.ctx.TryCancel();
  }
  // Says hello as `node` on `rw` and reads the first update into `in`.
  static ::testing::AssertionResult HelloAndRead(AgentStream& rw, const std::string& node,
                                                 v1::ControllerMessage& in) {
    if (!rw.Write(Hello(node))) return ::testing::AssertionFailure() << "hello not written";
    if (!rw.Read(&in)) return ::testing::AssertionFailure() << "no update read";
    return ::testing::AssertionSuccess();
  }
  // The ACK of the update `in`.
  static v1::AgentMessage AckOf(const v1::ControllerMessage& in) {
    v1::AgentMessage ack;
    ack.mutable_ack()->set_version(in.update().fence().version());
    ack.mutable_ack()->set_nonce(in.update().nonce());
    return ack;
  }
  static v1::AgentMessage Hello(const std::string& node) {
    v1::AgentMessage m;
    m.mutable_hello()->set_node_name(node);
    return m;
  }
  static v1::NodeFence Fence(const std::string& node, uint64_t version) {
    v1::NodeFence f;
    f.set_node_name(node);
    f.set_version(version);
    return f;
  }
  // A distributor with `o` that admits gpu-1 and holds its fence of `version`; null (the
  // failure reported) when either does not work.
  std::unique_ptr<Distributor> StartServingGpu1(DistributorOptions o, uint64_t version = 1) {
    AddNode("gpu-1");
    auto d = Start(std::move(o));
    if (d) {
      auto st = d->SetDesired(Fence("gpu-1", version));
      EXPECT_TRUE(st.ok()) << st.ToString();
      if (!st.ok()) return nullptr;
    }
    return d;
  }
  void AddNode(const std::string& n) {
    std::lock_guard l(mu_);
    nodes_.insert(n);
  }
  void RemoveNode(const std::string& n) {
    std::lock_guard l(mu_);
    nodes_.erase(n);
  }

  std::mutex mu_;
  std::set<std::string> nodes_;  // guarded by mu_: the "Node objects"
};

TEST_F(DistributorBoundsTest, FloodOfInventedNodeNamesLeavesPerNodeStateBounded) {
  auto d = StartServingGpu1(Options());
  ASSERT_TRUE(d);
  auto stub = Stub(d->port());
  for (int i = 0; i < 300; ++i) {
    grpc::Status st = Exchange(*stub, {Hello("invented-" + std::to_string(i))});
    ASSERT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
        << i << ": " << st.error_message();
  }
  EXPECT_EQ(d->NodeCount(), 1u);  // gpu-1's slot only
  EXPECT_FALSE(d->GetAgent("invented-0").has_value());
  // The real agent is still served: it gets its fence.
  ExpectServed(*stub, "gpu-1", 1);
}

TEST_F(DistributorBoundsTest, HelloNodeNameMustBeANodeName) {
  auto d = Start(Options());
  ASSERT_TRUE(d);
  auto stub = Stub(d->port());
  for (const std::string& bad :
       {std::string(254, 'a'), std::string("UPPER"), std::string("a/b"), std::string("a b")}) {
    EXPECT_EQ(Exchange(*stub, {Hello(bad)}).error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << bad.substr(0, 20);
  }
  EXPECT_EQ(d->NodeCount(), 0u);
}

TEST_F(DistributorBoundsTest, OversizeMessageEndsTheStreamAndIsNotKept) {
  AddNode("gpu-1");
  auto d = Start(Options());
  ASSERT_TRUE(d);
  auto stub = Stub(d->port());
  v1::AgentMessage report;
  auto* pod = report.mutable_report()->add_pods();
  pod->set_message(std::string(300 * 1024, 'x'));  // over the 256 KiB cap
  grpc::Status st = Exchange(*stub, {Hello("gpu-1"), report});
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  auto a = d->GetAgent("gpu-1");
  ASSERT_TRUE(a.has_value());
  EXPECT_FALSE(a->last_report.has_value());
}

TEST_F(DistributorBoundsTest, UnparseableMessageEndsTheStreamAndIsNotKept) {
  // The stream parses agents' messages itself (raw method): bytes that are no AgentMessage end
  // it, as grpc's typed handler would. A proto3 string must be UTF-8; C++ protobuf still
  // serializes one that is not (it only logs), the parser refuses it.
  auto d = StartServingGpu1(Options());
  ASSERT_TRUE(d);
  auto stub = Stub(d->port());
  grpc::Status st = Exchange(*stub, {Hello("gpu-\xff\xfe")});
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INTERNAL) << st.error_message();
  v1::AgentMessage report;
  report.mutable_report()->add_pods()->set_message("\xc3\x28");
  st = Exchange(*stub, {Hello("gpu-1"), report});
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INTERNAL) << st.error_message();
  auto a = d->GetAgent("gpu-1");
  ASSERT_TRUE(a.has_value());
  EXPECT_FALSE(a->last_report.has_value());
  EXPECT_EQ(d->NodeCount(), 1u);
  // A well-formed agent is still served.
  ExpectServed(*stub, "gpu-1", 1);
}

TEST_F(DistributorBoundsTest, AnUnreadableMessageIsCountedAndMarksItsNodeUntilAReportParses) {
  // Issue 28, item 3: a message the controller cannot parse is counted, logged and the node
  // reported failing — also after its ACK — until a report of it parses again.
  auto observer = std::make_shared<UnreadableObserver>();
  auto o = Options();
  o.observer = observer;
  auto d = StartServingGpu1(o);
  ASSERT_TRUE(d);
  auto stub = Stub(d->port());
  {
    Call call(*stub);
    auto& rw = call.rw;
    v1::ControllerMessage in;
    ASSERT_TRUE(HelloAndRead(*rw, "gpu-1", in));
    ASSERT_TRUE(rw->Write(AckOf(in)));
    v1::AgentMessage report;
    report.mutable_report()->set_applied_version(1);
    report.mutable_report()->add_pods()->set_message("no cgroup at /x/\xff\xfe/cpuset.cpus");
    ASSERT_TRUE(rw->Write(report));
    EXPECT_FALSE(rw->Read(&in));
    EXPECT_EQ(rw->Finish().error_code(), grpc::StatusCode::INTERNAL);
  }
  auto a = d->GetAgent("gpu-1");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->acked_version, 1u);        // the ACK came first ...
  EXPECT_EQ(a->unreadable_messages, 1u);  // ... and the node is failing all the same
  EXPECT_NE(a->unreadable_error.find("did not parse"), std::string::npos);
  EXPECT_EQ(d->Counters().unreadable_messages, 1u);
  // The observer hears of it on the grpc thread, maybe just after the client saw the end.
  Eventually([&] { return !observer->Events().empty(); }, 100, 10ms);
  EXPECT_EQ(observer->Events(), (std::vector<std::string>{"gpu-1 unreadable"}));
  // Before its hello a stream has no node: counted only.
  EXPECT_EQ(Exchange(*stub, {Hello("gpu-\xff")}).error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_EQ(d->Counters().unreadable_messages, 2u);
  EXPECT_EQ(d->GetAgent("gpu-1")->unreadable_messages, 1u);
  // A readable report clears it.
  v1::AgentMessage good;
  good.mutable_report()->set_applied_version(1);
  good.mutable_report()->add_pods()->set_message("no cgroup at /x/\\xFF\\xFE/cpuset.cpus");
  EXPECT_EQ(Exchange(*stub, {Hello("gpu-1"), good}).error_code(), grpc::StatusCode::OK);
  EXPECT_EQ(d->GetAgent("gpu-1")->unreadable_messages, 0u);
  EXPECT_TRUE(d->GetAgent("gpu-1")->unreadable_error.empty());
  EXPECT_EQ(observer->Events(), (std::vector<std::string>{"gpu-1 unreadable", "gpu-1 readable"}));
}

TEST_F(DistributorBoundsTest, StreamWithoutHelloIsEndedAtTheDeadline) {
  auto o = Options();
  o.hello_timeout = 300ms;
  o.sweep_interval = 50ms;
  auto d = Start(o);
  ASSERT_TRUE(d);
  auto stub = Stub(d->port());
  const auto t0 = std::chrono::steady_clock::now();
  Call call(*stub);  // says nothing
  auto& rw = call.rw;
  v1::ControllerMessage in;
  EXPECT_FALSE(rw->Read(&in));
  grpc::Status st = rw->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << st.error_message();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
}

TEST_F(DistributorBoundsTest, StreamsAreCapped) {
  for (int i = 0; i < 3; ++i) AddNode("gpu-" + std::to_string(i));
  auto o = Options();
  o.max_streams = 3;
  auto d = Start(o);
  ASSERT_TRUE(d);
  Streams streams(d->port());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(streams.Open().Write(Hello("gpu-" + std::to_string(i))));
  Eventually([&] { return d->ConnectedCount() >= 3; });
  ASSERT_EQ(d->ConnectedCount(), 3u);
  auto extra = Stub(d->port());
  EXPECT_EQ(Exchange(*extra, {Hello("gpu-0")}).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  streams.CancelAll();
}

TEST_F(DistributorBoundsTest, HellosInProgressAreBounded) {
  auto o = Options();
  o.max_pending_hellos = 2;
  auto d = StartServingGpu1(o);
  ASSERT_TRUE(d);
  // Two streams that never say hello hold both places.
  Streams silent(d->port());
  for (int i = 0; i < 2; ++i) silent.Open();
  std::this_thread::sleep_for(300ms);  // both reach the server
  auto agent = Stub(d->port());
  grpc::Status st = Exchange(*agent, {Hello("gpu-1")});
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  // Once they are gone, the agent (retrying) gets its fence.
  silent.CancelAll();
  bool served = false;
  for (int i = 0; i < 50 && !served; ++i) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 5s);
    auto rw = agent->Stream(&ctx);
    rw->Write(Hello("gpu-1"));
    v1::ControllerMessage in;
    served = rw->Read(&in) && in.update().fence().version() == 1u;
    ctx.TryCancel();
    rw->Finish();
    if (!served) std::this_thread::sleep_for(50ms);
  }
  EXPECT_TRUE(served);
}

// Streams that never say hello, all on one channel (one TCP connection), opened through grpc's
// callback API: opening one does not wait for the server (a sync Stream() would block on a
// stream the connection's concurrency limit keeps queued).
class SilentStreams {
 public:
  SilentStreams(v1::FenceDistribution::Stub& stub, int n) {
    for (int i = 0; i < n; ++i) streams_.push_back(std::make_unique<Silent>(stub));
  }
  ~SilentStreams() {
    for (auto& s : streams_) s->ctx.TryCancel();
    for (auto& s : streams_) s->Await();
  }
  // Streams the server has ended so far, by code.
  std::map<grpc::StatusCode, int> Ended() {
    std::map<grpc::StatusCode, int> out;
    for (auto& s : streams_) {
      if (auto st = s->Status()) ++out[st->error_code()];
    }
    return out;
  }

 private:
  struct Silent final : grpc::ClientBidiReactor<v1::AgentMessage, v1::ControllerMessage> {
    explicit Silent(v1::FenceDistribution::Stub& stub) {
      ctx.set_deadline(std::chrono::system_clock::now() + 60s);
      stub.async()->Stream(&ctx, this);
      StartRead(&in);
      StartCall();
    }
    void OnReadDone(bool ok) override {
      if (ok) StartRead(&in);
    }
    void OnDone(const grpc::Status& s) override {
      std::lock_guard l(mu);
      status = s;
      cv.notify_all();
    }
    std::optional<grpc::Status> Status() {
      std::lock_guard l(mu);
      return status;
    }
    void Await() {
      std::unique_lock l(mu);
      cv.wait(l, [this] { return status.has_value(); });
    }
    grpc::ClientContext ctx;
    v1::ControllerMessage in;
    std::mutex mu;
    std::condition_variable cv;
    std::optional<grpc::Status> status;  // guarded by mu
  };
  std::vector<std::unique_ptr<Silent>> streams_;
};

TEST_F(DistributorBoundsTest, OneConnectionsSilentStreamsDoNotLockOutOtherAgents) {
  // Issue 28, item 1: one connection (the chart's shared certificate, no token) opens more
  // streams than the bound on hellos in progress and never says hello. Every other agent must
  // still be served: the bound is per connection as well as in total.
  auto o = Options();
  o.max_pending_hellos = 8;
  auto d = StartServingGpu1(o);
  ASSERT_TRUE(d);
  auto attacker = Stub(d->port());
  SilentStreams silent(*attacker, 20);
  std::this_thread::sleep_for(500ms);  // every stream that will reach the server has
  auto agent = Stub(d->port());
  ExpectServed(*agent, "gpu-1", 1);
  // The attacker's connection keeps at most its own share.
  EXPECT_LE(d->Counters().hellos_pending, o.max_pending_hellos_per_connection);
}

TEST_F(DistributorBoundsTest, StreamsPerConnectionAreCapped) {
  // A client that honours HTTP/2's SETTINGS_MAX_CONCURRENT_STREAMS (grpc's own) gets no more
  // than max_streams_per_connection streams at once to the server; the rest wait in the client.
  AddNode("gpu-1");
  auto o = Options();
  o.max_pending_hellos_per_connection = 100;  // the stream cap alone
  o.max_streams_per_connection = 3;
  auto d = Start(o);
  ASSERT_TRUE(d);
  auto attacker = Stub(d->port());
  SilentStreams silent(*attacker, 10);
  std::this_thread::sleep_for(500ms);
  EXPECT_EQ(d->Counters().hellos_pending, 3u);
  EXPECT_TRUE(silent.Ended().empty());
}

TEST_F(DistributorBoundsTest, HellosInProgressAreBoundedPerAddress) {
  // Many connections from one address hold at most max_pending_hellos_per_address places (the
  // rest of max_pending_hellos stays for agents elsewhere; on loopback every peer is 127.0.0.1,
  // so here the bound itself is shown, and that the address gets places back as they free).
  auto o = Options();
  o.max_pending_hellos = 8;
  o.max_pending_hellos_per_address = 4;
  auto d = StartServingGpu1(o);
  ASSERT_TRUE(d);
  std::vector<std::unique_ptr<v1::FenceDistribution::Stub>> conns;
  std::vector<std::unique_ptr<SilentStreams>> silent;
  for (int i = 0; i < 10; ++i) {
    conns.push_back(Stub(d->port()));
    silent.push_back(std::make_unique<SilentStreams>(*conns.back(), 1));
  }
  std::this_thread::sleep_for(500ms);
  EXPECT_EQ(d->Counters().hellos_pending, 4u);
  EXPECT_EQ(d->Counters().refused_per_address, 6u);
  int refused = 0;
  for (auto& s : silent) refused += s->Ended()[grpc::StatusCode::RESOURCE_EXHAUSTED];
  EXPECT_EQ(refused, 6);
  auto agent = Stub(d->port());
  EXPECT_EQ(Exchange(*agent, {Hello("gpu-1")}).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  silent.clear();  // the silent streams go: their places come back
  ExpectServed(*agent, "gpu-1", 1);
}

TEST_F(DistributorBoundsTest, NewStreamsAreRateLimited) {
  AddNode("gpu-1");
  auto o = Options();
  o.new_streams_per_second = 2;  // burst: 2
  auto d = Start(o);
  ASSERT_TRUE(d);
  auto stub = Stub(d->port());
  int refused = 0, accepted = 0;
  for (int i = 0; i < 6; ++i) {
    grpc::Status st = Exchange(*stub, {Hello("gpu-1")});
    if (st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      ++refused;
    } else {
      ++accepted;
    }
  }
  // Six in well under a second: the burst (2, plus what refilled meanwhile) gets through.
  EXPECT_GE(accepted, 2);
  EXPECT_LE(accepted, 4);
  EXPECT_GE(refused, 2);
  std::this_thread::sleep_for(1100ms);  // refilled
  EXPECT_EQ(Exchange(*stub, {Hello("gpu-1")}).error_code(), grpc::StatusCode::OK);
}

TEST_F(DistributorBoundsTest, ForgetEndsTheStreamAndDropsTheNode) {
  AddNode("gpu-1");
  auto d = Start(Options());
  ASSERT_TRUE(d);
  auto stub = Stub(d->port());
  Call call(*stub);
  auto& rw = call.rw;
  ASSERT_TRUE(rw->Write(Hello("gpu-1")));
  Eventually([&] { return d->ConnectedCount() >= 1; });
  ASSERT_EQ(d->ConnectedCount(), 1u);
  RemoveNode("gpu-1");
  d->Forget("gpu-1");  // the Node was deleted
  v1::ControllerMessage in;
  EXPECT_FALSE(rw->Read(&in));
  EXPECT_EQ(rw->Finish().error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(d->NodeCount(), 0u);
}

TEST_F(DistributorBoundsTest, RevalidateForgetsNodesAdmittedBeforeNodesWereKnown) {
  std::atomic<bool> known{false};
  auto o = Options();
  o.admit_node = [&](const std::string& node) { return !known || node == "gpu-1"; };
  auto d = Start(o);
  ASSERT_TRUE(d);
  auto stub = Stub(d->port());
  grpc::ClientContext ctx;
  auto rw = stub->Stream(&ctx);
  ASSERT_TRUE(rw->Write(Hello("ghost")));
  Eventually([&] { return d->ConnectedCount() >= 1; });
  ASSERT_EQ(d->ConnectedCount(), 1u);
  known = true;
  d->RevalidateNodes();
  v1::ControllerMessage in;
  EXPECT_FALSE(rw->Read(&in));
  EXPECT_EQ(rw->Finish().error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(d->NodeCount(), 0u);
}

TEST_F(DistributorBoundsTest, LongGoneAgentsShedTheirState) {
  AddNode("gpu-1");
  AddNode("gpu-2");
  auto clock = std::make_shared<ManualTimeSource>();
  auto o = Options();
  o.clock = clock;
  o.forget_after = 10min;
  o.sweep_interval = 1h;  // sweeps only when the test says
  auto d = Start(o);
  ASSERT_TRUE(d);
  ASSERT_TRUE(d->SetDesired(Fence("gpu-2", 5)).ok());
  auto stub = Stub(d->port());
  v1::AgentMessage report;
  report.mutable_report()->set_overwrites_total(7);
  for (const char* n : {"gpu-1", "gpu-2"}) {
    grpc::ClientContext ctx;
    auto rw = stub->Stream(&ctx);
    ASSERT_TRUE(rw->Write(Hello(n)));
    ASSERT_TRUE(rw->Write(report));
    Eventually([&] {
      auto a = d->GetAgent(n);
      return a && a->last_report;
    });
    ctx.TryCancel();
    (void)rw->Finish();
  }
  Eventually([&] { return d->ConnectedCount() == 0; });
  ASSERT_EQ(d->ConnectedCount(), 0u);
  clock->Advance(9min);
  d->Sweep();
  EXPECT_EQ(d->NodeCount(), 2u);  // within the grace period: kept
  ASSERT_TRUE(d->GetAgent("gpu-1")->last_report.has_value());
  clock->Advance(2min);
  d->Sweep();
  EXPECT_FALSE(d->GetAgent("gpu-1").has_value());  // no fence held: gone entirely
  auto g2 = d->GetAgent("gpu-2");
  ASSERT_TRUE(g2.has_value());  // the fence stays for when the agent comes back
  EXPECT_EQ(g2->desired_version, 5u);
  EXPECT_TRUE(g2->hello == nullptr);
  EXPECT_FALSE(g2->last_report.has_value());
}

TEST_F(DistributorBoundsTest, NackErrorIsMadeSafe) {
  auto d = StartServingGpu1(Options(), 3);
  ASSERT_TRUE(d);
  auto stub = Stub(d->port());
  Call call(*stub);
  auto& [ctx, rw] = call;
  v1::ControllerMessage in;
  ASSERT_TRUE(HelloAndRead(*rw, "gpu-1", in));
  v1::AgentMessage nack;
  nack.mutable_nack()->set_version(3);
  nack.mutable_nack()->set_nonce(in.update().nonce());
  nack.mutable_nack()->set_error("line one\nforged log line " + std::string(5000, 'e'));
  ASSERT_TRUE(rw->Write(nack));
  std::optional<AgentState> a;
  Eventually([&] {
    a = d->GetAgent("gpu-1");
    return a && a->last_nack;
  });
  ASSERT_TRUE(a && a->last_nack);
  EXPECT_EQ(a->last_nack->error.find('\n'), std::string::npos);
  EXPECT_LE(a->last_nack->error.size(), 1024u);
  ctx.TryCancel();
}

// Node-bound identity through the AgentAuthenticator seam (the real TokenReview path is tested
// against a real API server in tests/integration/kube/agent_identity_apiserver_test.cc).
class FakeAuthenticator final : public AgentAuthenticator {
 public:
  // token → node it is bound to
  explicit FakeAuthenticator(std::map<std::string, std::string> tokens)
      : tokens_(std::move(tokens)) {}
  Status Authenticate(std::string_view token, const std::string& node) override {
    std::lock_guard l(mu_);
    ++calls_;
    if (down_) return Unavailable("API server unreachable");
    auto it = tokens_.find(std::string(token));
    if (it == tokens_.end()) return PermissionDenied("token not authenticated");
    if (it->second != node) return PermissionDenied("token is bound to node " + it->second);
    return OkStatus();
  }
  int calls() {
    std::lock_guard l(mu_);
    return calls_;
  }
  void SetDown(bool down) {
    std::lock_guard l(mu_);
    down_ = down;
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::string> tokens_;  // guarded by mu_
  int calls_ = 0;                              // guarded by mu_
  bool down_ = false;                          // guarded by mu_
};

class DistributorIdentityTest : public DistributorBoundsTest {
 protected:
  // Options whose token reviews go to `auth` on `workers` threads, `queue` waiting at most.
  DistributorOptions ReviewOptions(std::shared_ptr<AgentAuthenticator> auth, size_t workers,
                                   size_t queue) {
    auto o = Options(std::move(auth));
    o.review_workers = workers;
    o.review_queue = queue;
    return o;
  }
  // A stream with `authorization` metadata (none when `header` is empty); returns the first
  // fence received (or nullopt) and the final status.
  std::pair<std::optional<v1::NodeFence>, grpc::Status> Dial(v1::FenceDistribution::Stub& stub,
                                                             const std::string& header,
                                                             const std::string& node,
                                                             const Distributor* ack_to = nullptr) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 10s);
    if (!header.empty()) ctx.AddMetadata("authorization", header);
    auto rw = stub.Stream(&ctx);
    rw->Write(Hello(node));
    std::optional<v1::NodeFence> got;
    v1::ControllerMessage in;
    if (rw->Read(&in)) {
      got = in.update().fence();
      if (ack_to != nullptr) {
        rw->Write(AckOf(in));
        // Cancelling at once could overtake the ACK: wait until the Distributor has it.
        Eventually(
            [&] {
              auto a = ack_to->GetAgent(node);
              return a && a->acked_version == in.update().fence().version();
            },
            200, 10ms);
      }
      rw->WritesDone();
      ctx.TryCancel();
    }
    while (rw->Read(&in)) {
    }
    return {got, rw->Finish()};
  }
};

TEST_F(DistributorIdentityTest, OnlyATokenBoundToTheHelloNodeGetsItsFence) {
  AddNode("gpu-2");
  auto auth = std::make_shared<FakeAuthenticator>(
      std::map<std::string, std::string>{{"tok-1", "gpu-1"}, {"tok-2", "gpu-2"}});
  auto d = StartServingGpu1(Options(auth), 7);
  ASSERT_TRUE(d);
  auto stub = Stub(d->port());
  // The impostor: a hello for gpu-1 with gpu-2's token, with no token, with a bad one, with a
  // header of another scheme.
  for (const std::string& header : {std::string("Bearer tok-2"), std::string(""),
                                    std::string("Bearer forged"), std::string("Basic tok-1")}) {
    auto [fence, st] = Dial(*stub, header, "gpu-1");
    EXPECT_FALSE(fence.has_value()) << header;
    EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << header;
    EXPECT_NE(st.error_message().find("agent token refused for node gpu-1"), std::string::npos)
        << st.error_message();
  }
  EXPECT_FALSE(d->GetAgent("gpu-1")->connected);
  EXPECT_EQ(d->GetAgent("gpu-1")->streams, 0u);
  // The real agent.
  auto [fence, st] = Dial(*stub, "Bearer tok-1", "gpu-1", /*ack_to=*/d.get());
  ASSERT_TRUE(fence.has_value()) << st.error_message();
  EXPECT_EQ(fence->version(), 7u);
  Eventually([&] { return d->GetAgent("gpu-1")->acked_version == 7; });
  EXPECT_EQ(d->GetAgent("gpu-1")->acked_version, 7u);
}

TEST_F(DistributorIdentityTest, UnjudgeableTokenIsUnavailableAndNodeChecksStillApply) {
  AddNode("gpu-1");
  auto auth = std::make_shared<FakeAuthenticator>(
      std::map<std::string, std::string>{{"tok-1", "gpu-1"}, {"tok-x", "ghost"}});
  auto d = Start(Options(auth));
  ASSERT_TRUE(d);
  auto stub = Stub(d->port());
  auth->SetDown(true);
  EXPECT_EQ(Dial(*stub, "Bearer tok-1", "gpu-1").second.error_code(),
            grpc::StatusCode::UNAVAILABLE);
  auth->SetDown(false);
  // A valid token for a node with no Node object: still refused as before.
  EXPECT_EQ(Dial(*stub, "Bearer tok-x", "ghost").second.error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  // An invalid node name is refused before the authenticator is asked.
  const int calls = auth->calls();
  EXPECT_EQ(Dial(*stub, "Bearer tok-1", "UPPER").second.error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(auth->calls(), calls);
  EXPECT_EQ(d->NodeCount(), 0u);
}

// Reviews of the token "slow" wait until Release(); "fast" is bound to gpu-2 and known without
// a review (a cached verdict); anything else is refused after a review.
class GatedAuthenticator final : public AgentAuthenticator {
 public:
  Status Authenticate(std::string_view token, const std::string& node) override {
    std::unique_lock l(mu_);
    ++reviews_;
    cv_.notify_all();
    if (token == "slow") {
      cv_.wait(l, [this] { return released_; });
      return node == "gpu-1" ? OkStatus() : PermissionDenied("bound to gpu-1");
    }
    return PermissionDenied("token not authenticated");
  }
  std::optional<Status> Cached(std::string_view token, const std::string& node) override {
    if (token == "fast") return node == "gpu-2" ? OkStatus() : PermissionDenied("bound to gpu-2");
    return std::nullopt;
  }
  void Release() {
    std::lock_guard l(mu_);
    released_ = true;
    cv_.notify_all();
  }
  bool WaitReviews(int n) {
    std::unique_lock l(mu_);
    return cv_.wait_for(l, 5s, [&] { return reviews_ >= n; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int reviews_ = 0;        // guarded by mu_
  bool released_ = false;  // guarded by mu_
};

TEST_F(DistributorIdentityTest, SlowTokenReviewDoesNotDelayAnotherStreamsHello) {
  AddNode("gpu-1");
  AddNode("gpu-2");
  auto auth = std::make_shared<GatedAuthenticator>();
  auto d = Start(ReviewOptions(auth, /*workers=*/2, /*queue=*/100));
  ASSERT_TRUE(d);
  ASSERT_TRUE(d->SetDesired(Fence("gpu-1", 1)).ok());
  ASSERT_TRUE(d->SetDesired(Fence("gpu-2", 2)).ok());
  // Many hellos whose token review hangs (more than grpc's callback threads would survive if
  // each held one), each on its own channel.
  constexpr int kSlow = 40;
  Streams slow(d->port());
  for (int i = 0; i < kSlow; ++i) ASSERT_TRUE(slow.Open("slow").Write(Hello("gpu-1")));
  ASSERT_TRUE(auth->WaitReviews(2));  // both workers are stuck
  // Another agent, whose verdict is known, gets its fence at once.
  const auto t0 = std::chrono::steady_clock::now();
  auto stub = Stub(d->port());
  auto [fence, st] = Dial(*stub, "Bearer fast", "gpu-2");
  ASSERT_TRUE(fence.has_value()) << st.error_message();
  EXPECT_EQ(fence->version(), 2u);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  EXPECT_FALSE(d->GetAgent("gpu-1")->connected);
  // Released: the slow hellos are judged; the last one for gpu-1 holds the node's stream.
  auth->Release();
  v1::ControllerMessage in;
  int fenced = 0;
  for (auto& rw : slow.streams()) fenced += rw->Read(&in) ? 1 : 0;
  EXPECT_GE(fenced, 1);
  slow.Close();
}

TEST_F(DistributorIdentityTest, FullReviewQueueIsUnavailable) {
  AddNode("gpu-1");
  auto auth = std::make_shared<GatedAuthenticator>();
  auto d = Start(ReviewOptions(auth, /*workers=*/1, /*queue=*/2));
  ASSERT_TRUE(d);
  Streams slow(d->port());
  for (int i = 0; i < 3; ++i) {  // one under review, two queued
    ASSERT_TRUE(slow.Open("slow").Write(Hello("gpu-1")));
    if (i == 0) {
      ASSERT_TRUE(auth->WaitReviews(1));
    }
  }
  std::this_thread::sleep_for(300ms);  // the two queued hellos have arrived
  auto stub = Stub(d->port());
  auto [fence, st] = Dial(*stub, "Bearer other", "gpu-1");
  EXPECT_FALSE(fence.has_value());
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << st.error_message();
  auth->Release();
  slow.Close();
}

TEST_F(DistributorIdentityTest, RefusedTokensFromOneAddressAreRateLimited) {
  AddNode("gpu-1");
  auto auth =
      std::make_shared<FakeAuthenticator>(std::map<std::string, std::string>{{"tok-1", "gpu-1"}});
  auto o = Options(auth);
  o.refused_token_burst = 3;
  o.refused_tokens_per_minute = 0.01;  // no refill within the test
  auto d = Start(o);
  ASSERT_TRUE(d);
  ASSERT_TRUE(d->SetDesired(Fence("gpu-1", 1)).ok());
  auto stub = Stub(d->port());
  // Within the burst every forged token is reviewed and refused.
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(Dial(*stub, "Bearer forged-" + std::to_string(i), "gpu-1").second.error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
  }
  EXPECT_EQ(auth->calls(), 3);
  // Then this address gets no more reviews: refused before the API server is asked.
  for (int i = 0; i < 20; ++i) {
    auto [fence, st] = Dial(*stub, "Bearer forged-x" + std::to_string(i), "gpu-1");
    EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  }
  EXPECT_EQ(auth->calls(), 3);
  // Limit off: every refused token is reviewed again.
  auto o2 = Options(auth);
  o2.refused_token_burst = 0;
  auto d2 = Start(o2);
  ASSERT_TRUE(d2);
  auto stub2 = Stub(d2->port());
  for (int i = 0; i < 5; ++i) Dial(*stub2, "Bearer forged", "gpu-1");
  EXPECT_EQ(auth->calls(), 8);
}

}  // namespace
}  // namespace feedguard::controller
