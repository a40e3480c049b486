// Real Distributor + real FenceClient over gRPC on 127.0.0.1 (port 0), mTLS with certificates
// made by the openssl CLI for each test.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "agent/client/fence_client.h"
#include "common/fd.h"
#include "controller/distributor/distributor.h"
#include "controller/distributor/tls_buffers.h"
#include "feedguard/v1/nodefence.grpc.pb.h"
#include "tests/integration/grpc/test_pki.h"

namespace feedguard {
namespace {

using agent::FenceClient;
using agent::FenceClientOptions;
using controller::AgentState;
using controller::Distributor;
using controller::DistributorOptions;
using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::TestPki;

// ---- fixtures ---------------------------------------------------------------------------------

// Polls `pred` every 5 ms for at most `limit`.
template <typename Pred>
bool WaitUntil(Pred pred, milliseconds limit = milliseconds(15'000)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return pred();
}

// A manual clock that is safe to advance while grpc threads read it.
class TestClock final : public TimeSource {
 public:
  std::chrono::steady_clock::time_point MonotonicNow() const override {
    return std::chrono::steady_clock::time_point(std::chrono::nanoseconds(now_ns_.load()));
  }
  std::chrono::system_clock::time_point WallNow() const override {
    return std::chrono::system_clock::time_point(
        std::chrono::duration_cast<std::chrono::system_clock::duration>(
            std::chrono::nanoseconds(now_ns_.load())));
  }
  void Advance(std::chrono::nanoseconds d) { now_ns_ += d.count(); }

 private:
  std::atomic<int64_t> now_ns_{int64_t{1'000'000'000'000}};
};

class FakeApplier final : public agent::FenceApplier {
 public:
  Result<v1::NodeReport> Apply(const v1::NodeFence& fence) override {
    if (delay_.count() > 0) std::this_thread::sleep_for(delay_);
    std::lock_guard lock(mu_);
    seen_.push_back(fence.version());
    if (fail_.count(fence.version())) return NotFound("CgroupNotFound: pod cgroup missing");
    applied_ = fence;
    v1::NodeReport report;
    auto* pod = report.add_pods();
    pod->set_uid("uid-1");
    pod->set_enforced(true);
    pod->set_cpus("0-3");
    pod->set_message(message_);
    return report;
  }
  void set_delay(milliseconds d) { delay_ = d; }
  void set_message(std::string m) { message_ = std::move(m); }  // before the client starts
  void FailVersion(uint64_t v) {
    std::lock_guard lock(mu_);
    fail_.insert(v);
  }
  std::vector<uint64_t> seen() const {
    std::lock_guard lock(mu_);
    return seen_;
  }
  uint64_t applied_version() const {
    std::lock_guard lock(mu_);
    return applied_.version();
  }
  v1::NodeFence applied() const {
    std::lock_guard lock(mu_);
    return applied_;
  }

 private:
  milliseconds delay_{0};  // set before the client starts
  std::string message_;    // set before the client starts
  mutable std::mutex mu_;
  std::vector<uint64_t> seen_;  // guarded by mu_
  std::set<uint64_t> fail_;     // guarded by mu_
  v1::NodeFence applied_;       // guarded by mu_; what is "on the node"
};

class RecordingObserver final : public controller::AgentObserver {
 public:
  void OnConnected(const std::string& node, const v1::AgentHello& hello) override {
    Add("connected " + node + " last_applied=" + std::to_string(hello.last_applied_version()));
  }
  void OnDisconnected(const std::string& node) override { Add("disconnected " + node); }
  void OnAck(const std::string& node, uint64_t v) override {
    Add("ack " + node + " " + std::to_string(v));
  }
  void OnNack(const std::string& node, uint64_t v, const std::string& e) override {
    Add("nack " + node + " " + std::to_string(v) + " " + e);
  }
  void OnReport(const std::string& node, const v1::NodeReport& r) override {
    Add("report " + node + " " + std::to_string(r.applied_version()) +
        (r.pods_size() > 0 ? " cpus=" + r.pods(0).cpus() : "") +
        (r.pods_size() > 0 ? " message=" + r.pods(0).message() : ""));
  }
  void OnUnreadable(const std::string& node, const std::string& e) override {
    Add("unreadable " + node + " " + e);
  }
  // The distributor dropped an acknowledged fence and a new stream needs it: `refill` (set by
  // the test before any agent connects) hands it back, as the reconciler does.
  void OnFenceWanted(const std::string& node, uint64_t v) override {
    Add("wanted " + node + " " + std::to_string(v));
    if (refill) refill(node, v);
  }
  std::function<void(const std::string&, uint64_t)> refill;
  bool Has(const std::string& prefix) const {
    std::lock_guard lock(mu_);
    for (const auto& e : events_)
      if (e.rfind(prefix, 0) == 0) return true;
    return false;
  }
  std::vector<std::string> events() const {
    std::lock_guard lock(mu_);
    return events_;
  }

 private:
  void Add(std::string e) {
    std::lock_guard lock(mu_);
    events_.push_back(std::move(e));
  }
  mutable std::mutex mu_;
  std::vector<std::string> events_;  // guarded by mu_
};

// Sleeps for real (the delays are short in tests) and records every delay asked for.
class RecordingSleeper final : public Sleeper {
 public:
  bool Sleep(std::chrono::nanoseconds d, std::stop_token stop) override {
    std::function<void()> hook;
    {
      std::lock_guard lock(mu_);
      delays_.push_back(std::chrono::duration_cast<milliseconds>(d));
      hook = before_sleep_;
    }
    if (hook) hook();  // on the sleeping (client's) thread, between two dials
    return real_.Sleep(d, stop);
  }
  // Runs at each Sleep, after the delay is recorded and before it is slept.
  void set_before_sleep(std::function<void()> hook) {
    std::lock_guard lock(mu_);
    before_sleep_ = std::move(hook);
  }
  std::vector<milliseconds> delays() const {
    std::lock_guard lock(mu_);
    return delays_;
  }

 private:
  RealSleeper real_;
  mutable std::mutex mu_;
  std::vector<milliseconds> delays_;    // guarded by mu_
  std::function<void()> before_sleep_;  // guarded by mu_
};

// A loopback port bound but never listened on: every dial to it is refused, and no other
// process (a server of a test running beside this one) can take the port while this holds it.
// port() is 0 when the socket could not be made.
class UnlistenedPort {
 public:
  UnlistenedPort() : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    if (fd_.get() < 0) return;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (bind(fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      return;
    }
    port_ = ntohs(addr.sin_port);
  }
  int port() const { return port_; }

 private:
  Fd fd_;
  int port_ = 0;
};

v1::NodeFence Fence(const std::string& node, uint64_t version) {
  v1::NodeFence f;
  f.set_node_name(node);
  f.set_version(version);
  auto* p = f.add_policies();
  p->set_name("vision-trainers");
  p->set_neighbour_fence(v1::IDLE);
  auto* t = f.add_trainers();
  t->mutable_pod()->set_uid("uid-1");
  t->set_policy("vision-trainers");
  return f;
}

// A TCP relay on 127.0.0.1 between clients and the server that reads the TLS record headers
// (type, version, 2-byte length) of everything the server sends and keeps each record's length,
// per connection in the order sent. It decrypts nothing: it sees what a network observer sees.
class TlsRecordTap {
 public:
  explicit TlsRecordTap(int server_port) : server_port_(server_port) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
        listen(listen_fd_, 8) != 0 ||
        getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      return;
    }
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] { Accept(); });
  }
  ~TlsRecordTap() {
    stop_ = true;
    shutdown(listen_fd_, SHUT_RDWR);
    if (acceptor_.joinable()) acceptor_.join();
    {
      std::lock_guard lock(mu_);
      for (int fd : fds_) shutdown(fd, SHUT_RDWR);
    }
    for (auto& t : pumps_) t.join();
    for (int fd : fds_) close(fd);
    close(listen_fd_);
  }
  int port() const { return port_; }
  // Lengths of the records the server sent on each connection so far.
  std::vector<std::vector<size_t>> ServerRecords() const {
    std::lock_guard lock(mu_);
    return records_;
  }

 private:
  void Accept() {
    while (!stop_) {
      const int client = accept(listen_fd_, nullptr, nullptr);
      if (client < 0) return;
      const int server = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      addr.sin_port = htons(static_cast<uint16_t>(server_port_));
      std::lock_guard lock(mu_);
      fds_.push_back(client);
      fds_.push_back(server);
      if (connect(server, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
        shutdown(client, SHUT_RDWR);
        continue;
      }
      const size_t conn = records_.size();
      records_.emplace_back();
      pumps_.emplace_back([client, server] { Pump(client, server); });
      pumps_.emplace_back([this, server, client, conn] { Pump(server, client, conn); });
    }
  }
  static void Pump(int from, int to) {
    char buf[16384];
    ssize_t n;
    while ((n = read(from, buf, sizeof buf)) > 0) {
      if (!WriteAll(to, buf, static_cast<size_t>(n))) break;
    }
    shutdown(to, SHUT_WR);
  }
  // From the server: also splits the byte stream into records.
  void Pump(int from, int to, size_t conn) {
    char buf[16384];
    unsigned char header[5];
    size_t header_got = 0, body_left = 0;
    ssize_t n;
    while ((n = read(from, buf, sizeof buf)) > 0) {
      for (ssize_t i = 0; i < n;) {
        if (body_left > 0) {
          const size_t take = std::min(body_left, static_cast<size_t>(n - i));
          body_left -= take;
          i += static_cast<ssize_t>(take);
          continue;
        }
        header[header_got++] = static_cast<unsigned char>(buf[i++]);
        if (header_got == 5) {
          body_left = (size_t{header[3]} << 8) | header[4];
          header_got = 0;
          std::lock_guard lock(mu_);
          records_[conn].push_back(body_left);
        }
      }
      if (!WriteAll(to, buf, static_cast<size_t>(n))) break;
    }
    shutdown(to, SHUT_WR);
  }
  static bool WriteAll(int fd, const char* p, size_t n) {
    while (n > 0) {
      const ssize_t w = write(fd, p, n);
      if (w <= 0) return false;
      p += w;
      n -= static_cast<size_t>(w);
    }
    return true;
  }

  const int server_port_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  mutable std::mutex mu_;
  std::vector<int> fds_;                      // guarded by mu_
  std::vector<std::thread> pumps_;            // guarded by mu_ (joined after acceptor_)
  std::vector<std::vector<size_t>> records_;  // guarded by mu_
};

// Fence() with `neighbours` neighbour pods of ~78 bytes each on the wire.
v1::NodeFence BigFence(const std::string& node, uint64_t version, int neighbours) {
  v1::NodeFence f = Fence(node, version);
  for (int i = 0; i < neighbours; ++i) {
    auto* n = f.add_neighbours();
    const std::string k = std::to_string(version) + "-" + std::to_string(i);
    n->mutable_pod()->set_uid("0b1e7c3a-5d2f-4e8a-9c61-" + k);
    n->mutable_pod()->set_namespace_("batch");
    n->mutable_pod()->set_name("neighbour-" + k);
    n->set_policy("vision-trainers");
  }
  return f;
}

class GrpcStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto pki = TestPki::Create();
    ASSERT_TRUE(pki.ok()) << pki.status().ToString();
    pki_ = std::move(pki).value();
    ASSERT_TRUE(pki_->MakeCa("ca").ok());
    ASSERT_TRUE(
        pki_->MakeLeaf("ca", "server", "feedguard-controller", {"IP:127.0.0.1"}, true).ok());
    Status s = pki_->MakeLeaf("ca", "gpu-1", "system:node:gpu-1", {}, false, "system:nodes");
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_TRUE(pki_->CopyAtomically("ca.crt", "server-trust.crt").ok());
  }

  DistributorOptions ServerOptions() {
    DistributorOptions o;
    o.tls = {pki_->Path("server-trust.crt"), pki_->Path("server.crt"), pki_->Path("server.key")};
    o.cert_refresh_interval = seconds(1);
    o.observer = observer_;
    o.keepalive_time = milliseconds(10'000);
    o.min_client_ping_interval = milliseconds(5'000);
    return o;
  }

  // A server with ServerOptions() that holds `fence` as its node's desired one; null (the
  // failure reported) when either does not work.
  std::unique_ptr<Distributor> StartServerHolding(const v1::NodeFence& fence) {
    auto server = StartServer(ServerOptions());
    if (server) {
      auto st = server->SetDesired(fence);
      EXPECT_TRUE(st.ok()) << st.ToString();
      if (!st.ok()) return nullptr;
    }
    return server;
  }
  std::unique_ptr<Distributor> StartServer(DistributorOptions o) {
    auto d = Distributor::Start(std::move(o));
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    return d.ok() ? std::move(d).value() : nullptr;
  }

  // gpu-1's client whose backoff starts at 20 ms, doubling up to 5 s (with `jitter`), and whose
  // dials that reach nobody wait at most 50 ms.
  FenceClientOptions FastBackoffOptions(int port, double jitter) {
    auto o = ClientOptions("gpu-1", port);
    o.backoff = {milliseconds(20), 2.0, milliseconds(5'000), jitter};
    o.unreached_backoff_cap = milliseconds(50);
    return o;
  }

  FenceClientOptions ClientOptions(const std::string& node, int port,
                                   const std::string& cert = "gpu-1") {
    FenceClientOptions o;
    o.target = "127.0.0.1:" + std::to_string(port);
    o.tls = {pki_->Path("ca.crt"), pki_->Path(cert + ".crt"), pki_->Path(cert + ".key")};
    o.cert_refresh_interval = seconds(1);
    o.hello.set_node_name(node);
    o.hello.set_agent_version("0.1.0-test");
    o.hello.set_cgroup_version("v1");
    o.hello.set_cgroup_driver("cgroupfs");
    o.hello.add_capabilities("cpu.idle");
    o.hello.mutable_topology()->set_cores(8);
    o.backoff = {milliseconds(20), 2.0, milliseconds(200), 0.2};
    o.report_interval = milliseconds(60'000);
    o.keepalive_time = milliseconds(10'000);
    o.sleeper = sleeper_;
    return o;
  }

  std::unique_ptr<FenceClient> StartClient(FenceClientOptions o) {
    auto c = FenceClient::Start(std::move(o), applier_);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(c).value() : nullptr;
  }

  // A raw stub over a TLS channel with the given client identity ("" = none).
  std::unique_ptr<v1::FenceDistribution::Stub> RawStub(int port, const std::string& cert) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = Read("ca.crt");
    if (!cert.empty()) {
      ssl.pem_cert_chain = Read(cert + ".crt");
      ssl.pem_private_key = Read(cert + ".key");
    }
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    return v1::FenceDistribution::NewStub(grpc::CreateCustomChannel(
        "127.0.0.1:" + std::to_string(port), grpc::SslCredentials(ssl), args));
  }

  // Opens a stream, sends a hello for `node`, half-closes, and returns the final status.
  grpc::Status HelloAndFinish(v1::FenceDistribution::Stub& stub, const std::string& node) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + seconds(10));
    auto rw = stub.Stream(&ctx);
    v1::AgentMessage hello;
    hello.mutable_hello()->set_node_name(node);
    rw->Write(hello);
    rw->WritesDone();
    v1::ControllerMessage m;
    while (rw->Read(&m)) {
    }
    return rw->Finish();
  }

  std::string Read(const std::string& file) {
    std::ifstream in(pki_->Path(file));
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  std::unique_ptr<TestPki> pki_;
  std::shared_ptr<RecordingObserver> observer_ = std::make_shared<RecordingObserver>();
  std::shared_ptr<FakeApplier> applier_ = std::make_shared<FakeApplier>();
  std::shared_ptr<RecordingSleeper> sleeper_ = std::make_shared<RecordingSleeper>();
};

// ---- tests --------------------------------------------------------------------------------------

TEST_F(GrpcStreamTest, HelloFenceAckRoundTrip) {
  auto server = StartServerHolding(Fence("gpu-1", 1));  // before the agent connects
  ASSERT_TRUE(server);
  auto client = StartClient(ClientOptions("gpu-1", server->port()));
  ASSERT_TRUE(client);

  ASSERT_TRUE(WaitUntil([&] { return server->GetAgent("gpu-1")->acked_version == 1; }));
  EXPECT_EQ(applier_->applied_version(), 1u);
  ASSERT_TRUE(server->SetDesired(Fence("gpu-1", 2)).ok());  // while connected
  ASSERT_TRUE(WaitUntil([&] { return server->GetAgent("gpu-1")->acked_version == 2; }));
  ASSERT_TRUE(WaitUntil([&] { return observer_->Has("report gpu-1 2"); }));

  AgentState st = *server->GetAgent("gpu-1");
  EXPECT_TRUE(st.connected);
  EXPECT_FALSE(st.stale);
  ASSERT_NE(st.hello, nullptr);
  EXPECT_EQ(st.hello->agent_version(), "0.1.0-test");
  EXPECT_EQ(st.hello->cgroup_version(), "v1");
  EXPECT_EQ(st.hello->cgroup_driver(), "cgroupfs");
  ASSERT_EQ(st.hello->capabilities_size(), 1);
  EXPECT_EQ(st.hello->capabilities(0), "cpu.idle");
  EXPECT_EQ(st.hello->topology().cores(), 8);
  EXPECT_EQ(st.in_flight_version, 0u);
  EXPECT_EQ(st.sends, 2u);
  // The distributor keeps the report's header; the observer got the whole report.
  ASSERT_TRUE(st.last_report.has_value());
  EXPECT_EQ(st.last_report->applied_version, 2u);
  EXPECT_EQ(st.last_report->pods, 1u);
  EXPECT_TRUE(observer_->Has("report gpu-1 2 cpus=0-3"));
  EXPECT_TRUE(observer_->Has("connected gpu-1 last_applied=0"));
  EXPECT_TRUE(observer_->Has("ack gpu-1 1"));
  EXPECT_TRUE(observer_->Has("ack gpu-1 2"));
  EXPECT_EQ(applier_->seen(), (std::vector<uint64_t>{1, 2}));
  const auto cs = client->stats();
  EXPECT_TRUE(cs.connected);
  EXPECT_EQ(cs.applied_version, 2u);
  EXPECT_EQ(cs.acks, 2u);
  EXPECT_EQ(server->ConnectedCount(), 1u);
}

TEST_F(GrpcStreamTest, LargeFencesCrossMtlsWhileIdleTlsBuffersAreReleased) {
  // The Distributor frees OpenSSL's record buffers while a TLS connection idles (tls_buffers.h;
  // SSL_MODE_RELEASE_BUFFERS on every SSL object made after its Start): each record is then
  // written and read through buffers allocated for it. Fences of ~0.6 MiB (some 600 TLS frames
  // of 1 KiB) still arrive whole, one after another on one connection, and are ACKed.
  constexpr int kNeighbours = 8'000;
  auto server = StartServerHolding(BigFence("gpu-1", 1, kNeighbours));
  ASSERT_TRUE(server);
  EXPECT_TRUE(controller::NewTlsConnectionsReleaseIdleBuffers());
  auto client = StartClient(ClientOptions("gpu-1", server->port()));
  ASSERT_TRUE(client);
  ASSERT_TRUE(WaitUntil([&] { return server->GetAgent("gpu-1")->acked_version == 1; }));
  EXPECT_EQ(applier_->applied().neighbours_size(), kNeighbours);
  const v1::NodeFence second = BigFence("gpu-1", 2, kNeighbours);
  ASSERT_GT(second.ByteSizeLong(), 600'000u);
  ASSERT_TRUE(server->SetDesired(second).ok());
  ASSERT_TRUE(WaitUntil([&] { return server->GetAgent("gpu-1")->acked_version == 2; }));
  const v1::NodeFence got = applier_->applied();
  ASSERT_EQ(got.neighbours_size(), kNeighbours);
  EXPECT_EQ(got.neighbours(kNeighbours - 1).pod().name(),
            second.neighbours(kNeighbours - 1).pod().name());
  EXPECT_EQ(applier_->seen(), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(server->GetAgent("gpu-1")->streams, 1u);  // one connection throughout
}

TEST_F(GrpcStreamTest, TheServerSendsTlsRecordsOfAtMostTheFrameSize) {
  // DistributorOptions::tls_max_frame_bytes (GRPC_ARG_TSI_MAX_FRAME_SIZE) sizes the buffer grpc
  // keeps per connection for the records it writes: a ~0.6 MiB fence must go out in records of
  // at most 1 KiB (each frame = a 5-byte header and a record of <= 1,019 bytes), seen on the
  // wire by a relay between the agent and the server.
  auto o = ServerOptions();
  ASSERT_EQ(o.tls_max_frame_bytes, 1024);  // the default
  auto server = StartServer(std::move(o));
  ASSERT_TRUE(server);
  ASSERT_TRUE(server->SetDesired(BigFence("gpu-1", 1, 8'000)).ok());
  TlsRecordTap tap(server->port());
  ASSERT_NE(tap.port(), 0);
  auto client = StartClient(ClientOptions("gpu-1", tap.port()));
  ASSERT_TRUE(client);
  ASSERT_TRUE(WaitUntil([&] { return server->GetAgent("gpu-1")->acked_version == 1; }));
  const auto conns = tap.ServerRecords();
  ASSERT_EQ(conns.size(), 1u);
  const std::vector<size_t>& records = conns[0];
  ASSERT_GT(records.size(), 600u);  // ~0.6 MiB in frames of 1 KiB
  // The handshake's records (ServerHello, the encrypted flight with the certificate, session
  // tickets) come before the frame protector exists; every record after them is a frame.
  size_t largest = 0;
  for (size_t i = 10; i < records.size(); ++i) largest = std::max(largest, records[i]);
  EXPECT_LE(largest, 1019u);
  EXPECT_GE(largest, 900u);  // full frames, not single bytes
}

TEST_F(GrpcStreamTest, AReportNamingANonUtf8CgroupReachesTheControllerReadable) {
  // Issue 28, item 3: a tenant's child cgroup named with bytes that are not UTF-8 ended up in
  // a pod's message; the controller could not parse the report and ended the stream, again and
  // again, while the node's ACK (sent first) made it look enforced. The agent escapes it.
  applier_->set_message(
      "CgroupNotFound: no cgroup at /sys/fs/cgroup/cpuset/kubepods/podu1/c1/"
      "\xff\xfe/cpuset.cpus");
  auto server = StartServerHolding(Fence("gpu-1", 1));
  ASSERT_TRUE(server);
  auto client = StartClient(ClientOptions("gpu-1", server->port()));
  ASSERT_TRUE(client);
  ASSERT_TRUE(WaitUntil([&] { return observer_->Has("report gpu-1 1"); }, milliseconds(5'000)))
      << "the report never arrived readable";
  EXPECT_TRUE(
      observer_->Has("report gpu-1 1 cpus=0-3 message=CgroupNotFound: no cgroup at "
                     "/sys/fs/cgroup/cpuset/kubepods/podu1/c1/\\xFF\\xFE/cpuset.cpus"));
  EXPECT_FALSE(observer_->Has("unreadable"));
  EXPECT_EQ(server->GetAgent("gpu-1")->streams, 1u);  // never ended and redialled
}

TEST_F(GrpcStreamTest, TheAgentRefusesAFenceForAnotherNodeOrAnOlderVersionOnItsStream) {
  // Issue 28, item 7: the fence's metadata is checked, not trusted. A controller that routes
  // gpu-2's fence to gpu-1's stream (held here as gpu-1's, its bytes naming gpu-2) is NACKed.
  auto server = StartServerHolding(Fence("gpu-1", 5));
  ASSERT_TRUE(server);
  auto client = StartClient(ClientOptions("gpu-1", server->port()));
  ASSERT_TRUE(WaitUntil([&] { return server->GetAgent("gpu-1")->acked_version == 5; }));
  const auto other = controller::WireFence::From(Fence("gpu-2", 6));
  ASSERT_TRUE(server
                  ->SetDesired(std::make_shared<const controller::WireFence>(
                      "gpu-1", 6, std::string(other->unversioned())))
                  .ok());
  ASSERT_TRUE(WaitUntil([&] { return observer_->Has("nack gpu-1 6 fence for node \"gpu-2\""); }))
      << ::testing::PrintToString(observer_->events());
  EXPECT_EQ(applier_->seen(), (std::vector<uint64_t>{5}));  // never applied
  EXPECT_EQ(client->stats().applied_version, 5u);
  // Its own fence again, newer: applied.
  ASSERT_TRUE(server->SetDesired(Fence("gpu-1", 7)).ok());
  ASSERT_TRUE(WaitUntil([&] { return server->GetAgent("gpu-1")->acked_version == 7; }));
  EXPECT_EQ(applier_->seen(), (std::vector<uint64_t>{5, 7}));
}

TEST_F(GrpcStreamTest, BurstWhileAgentIsSlowSendsLatestNotEveryVersion) {
  applier_->set_delay(milliseconds(100));
  auto server = StartServer(ServerOptions());
  ASSERT_TRUE(server);
  auto client = StartClient(ClientOptions("gpu-1", server->port()));
  ASSERT_TRUE(WaitUntil([&] { return server->ConnectedCount() == 1; }));

  for (uint64_t v = 1; v <= 1000; ++v) ASSERT_TRUE(server->SetDesired(Fence("gpu-1", v)).ok());
  ASSERT_TRUE(WaitUntil([&] { return server->GetAgent("gpu-1")->acked_version == 1000; }));

  const std::vector<uint64_t> seen = applier_->seen();
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back(), 1000u);
  EXPECT_LE(seen.size(), 10u) << "a slot, not a queue";
  for (size_t i = 1; i < seen.size(); ++i) EXPECT_LT(seen[i - 1], seen[i]);
  EXPECT_EQ(server->GetAgent("gpu-1")->sends, seen.size()) << "every send was applied once";
  std::printf("burst of 1000 versions: agent applied %zu of them:", seen.size());
  for (auto v : seen) std::printf(" %llu", static_cast<unsigned long long>(v));
  std::printf("\n");
}

TEST_F(GrpcStreamTest, NackIsRecordedThenNewerVersionIsSent) {
  applier_->FailVersion(2);
  auto server = StartServer(ServerOptions());
  ASSERT_TRUE(server);
  auto client = StartClient(ClientOptions("gpu-1", server->port()));
  ASSERT_TRUE(server->SetDesired(Fence("gpu-1", 1)).ok());
  ASSERT_TRUE(WaitUntil([&] { return server->GetAgent("gpu-1")->acked_version == 1; }));
  ASSERT_TRUE(server->SetDesired(Fence("gpu-1", 2)).ok());
  ASSERT_TRUE(WaitUntil([&] { return server->GetAgent("gpu-1")->last_nack.has_value(); }));

  AgentState st = *server->GetAgent("gpu-1");
  EXPECT_EQ(st.last_nack->version, 2u);
  EXPECT_NE(st.last_nack->error.find("CgroupNotFound"), std::string::npos) << st.last_nack->error;
  EXPECT_EQ(st.acked_version, 1u);
  EXPECT_EQ(st.in_flight_version, 0u);
  EXPECT_EQ(applier_->applied_version(), 1u) << "the failed fence did not replace the applied one";
  ASSERT_TRUE(WaitUntil([&] { return observer_->Has("nack gpu-1 2 NotFound: CgroupNotFound"); }));
  ASSERT_TRUE(WaitUntil([&] { return client->stats().nacks == 1; }));

  ASSERT_TRUE(server->SetDesired(Fence("gpu-1", 3)).ok());
  ASSERT_TRUE(WaitUntil([&] { return server->GetAgent("gpu-1")->acked_version == 3; }));
  EXPECT_EQ(applier_->seen(), (std::vector<uint64_t>{1, 2, 3}));
}

TEST_F(GrpcStreamTest, ControllerGoneAgentKeepsFenceBacksOffAndGetsLatest) {
  auto server = StartServer(ServerOptions());
  ASSERT_TRUE(server);
  const int port = server->port();
  ASSERT_TRUE(server->SetDesired(Fence("gpu-1", 1)).ok());
  auto client = StartClient(ClientOptions("gpu-1", port));
  ASSERT_TRUE(WaitUntil([&] { return server->GetAgent("gpu-1")->acked_version == 1; }));

  server.reset();  // the controller goes away
  ASSERT_TRUE(WaitUntil([&] { return !client->stats().connected; }));
  // Connection refused, again and again: the delays grow (20 ms ×2 ±20 %, capped at 200 ms).
  ASSERT_TRUE(WaitUntil([&] { return sleeper_->delays().size() >= 5; }));
  const auto delays = sleeper_->delays();
  for (size_t i = 1; i < 4; ++i) {
    EXPECT_GT(delays[i], delays[i - 1]) << "attempt " << i;
  }
  EXPECT_GE(delays[0], milliseconds(16));
  EXPECT_LE(delays[0], milliseconds(24));
  for (auto d : delays) EXPECT_LE(d, milliseconds(240));
  // Fail static: nothing was re-applied or reverted while the controller was away.
  EXPECT_EQ(applier_->seen(), (std::vector<uint64_t>{1}));
  EXPECT_EQ(applier_->applied_version(), 1u);

  // A new controller incarnation on the same port, with a newer fence.
  auto o = ServerOptions();
  o.listen_address = "127.0.0.1:" + std::to_string(port);
  auto server2 = StartServer(std::move(o));
  ASSERT_TRUE(server2);
  ASSERT_TRUE(server2->SetDesired(Fence("gpu-1", 2)).ok());
  ASSERT_TRUE(WaitUntil([&] { return server2->GetAgent("gpu-1")->acked_version == 2; }));
  EXPECT_EQ(applier_->applied_version(), 2u);
  EXPECT_EQ(server2->GetAgent("gpu-1")->hello->last_applied_version(), 1u)
      << "the agent told the new controller what it kept applied";
  EXPECT_GE(client->stats().attempts, 6u);
}

// Behind one Service, a dial can land on a replica that does not listen (a standby): a refused
// connection must not grow the wait to the full backoff, the next dial may reach the leader.
TEST_F(GrpcStreamTest, UnreachedDialsWaitAtMostTheUnreachedCap) {
  // (A port merely freed could be reused, and a dial that reaches anyone keeps the full
  // backoff.)
  UnlistenedPort unlistened;
  ASSERT_GT(unlistened.port(), 0);
  auto client = StartClient(FastBackoffOptions(unlistened.port(), /*jitter=*/0.2));
  ASSERT_TRUE(client);
  ASSERT_TRUE(WaitUntil([&] { return sleeper_->delays().size() >= 6; }));
  const auto delays = sleeper_->delays();
  for (size_t i = 0; i < 6; ++i) EXPECT_LE(delays[i], milliseconds(50)) << "attempt " << i;
  EXPECT_EQ(delays[5], milliseconds(50)) << "the backoff grew underneath, the cap held";
}

// A failover: the agent dialled nobody long enough for its backoff to grow underneath the cap,
// then a controller listens at that address and refuses (as a new leader does while every
// agent's token is being reviewed). Dials that reached nobody do not grow the backoff that paces
// a controller's refusals: the first refusal waits 20 ms, then 40 (each plus jitter), not what
// the unreached dials grew to (20 ms x 2^6 and more: over a second).
TEST_F(GrpcStreamTest, FirstControllerAfterUnreachedDialsStartsTheBackoffAgain) {
  int port = 0;
  std::unique_ptr<FenceClient> client;
  {
    UnlistenedPort unlistened;
    port = unlistened.port();
    ASSERT_GT(port, 0);
    client = StartClient(FastBackoffOptions(port, /*jitter=*/0.0));
    ASSERT_TRUE(client);
    ASSERT_TRUE(WaitUntil([&] { return sleeper_->delays().size() >= 8; }));
  }  // the port is free now; the controller takes it
  const size_t unreached = sleeper_->delays().size();
  auto so = ServerOptions();
  so.listen_address = "127.0.0.1:" + std::to_string(port);
  so.admit_node = [](const std::string&) { return false; };
  auto server = StartServer(std::move(so));
  ASSERT_TRUE(server) << "port " << port << " was taken meanwhile";
  // The first wait that is not the unreached cap follows the first refusal.
  auto refused_delays = [&] {
    std::vector<milliseconds> out;
    const auto d = sleeper_->delays();
    for (size_t i = unreached; i < d.size(); ++i) {
      if (!out.empty() || d[i] != milliseconds(50)) out.push_back(d[i]);
    }
    return out;
  };
  ASSERT_TRUE(WaitUntil([&] { return refused_delays().size() >= 2; }));
  const auto d = refused_delays();
  // 20 ms and 40 ms, plus the policy's jitter above (the grown backoff would be >= 1,280 ms).
  EXPECT_GE(d[0], milliseconds(20)) << "the backoff starts again at the first refusal";
  EXPECT_LT(d[0], milliseconds(40)) << "the backoff starts again at the first refusal";
  EXPECT_GE(d[1], milliseconds(40)) << "and grows from there";
  EXPECT_LT(d[1], milliseconds(80)) << "and grows from there";
  EXPECT_EQ(client->stats().last_error.rfind("9: ", 0), 0u) << client->stats().last_error;
}

// Behind one Service, dials alternate between a standby that does not listen and a leader that
// refuses the agent: the refusals must still back off (20, 40, 80, 160 ms here), whatever
// unreached dials come between them, and the unreached ones stay under their cap.
TEST_F(GrpcStreamTest, RefusalsBackOffThroughUnreachedDialsBetweenThem) {
  auto refusing = [this] {
    auto o = ServerOptions();
    o.admit_node = [](const std::string&) { return false; };
    return o;
  };
  std::unique_ptr<Distributor> server = StartServer(refusing());
  ASSERT_TRUE(server);
  const int port = server->port();
  std::mutex mu;
  std::vector<bool> refused;  // guarded by mu: per delay, whether its dial reached the server
  bool port_lost = false;     // guarded by mu
  sleeper_->set_before_sleep([&] {
    std::lock_guard lock(mu);
    if (port_lost) return;
    refused.push_back(server != nullptr);
    if (server) {
      server.reset();  // the next dial reaches nobody
    } else {
      auto o = refusing();
      o.listen_address = "127.0.0.1:" + std::to_string(port);
      auto d = Distributor::Start(std::move(o));
      if (d.ok()) {
        server = std::move(d).value();
      } else {
        port_lost = true;  // another process took the port meanwhile
      }
    }
  });
  auto client = StartClient(FastBackoffOptions(port, /*jitter=*/0.0));
  ASSERT_TRUE(client);
  ASSERT_TRUE(WaitUntil([&] { return sleeper_->delays().size() >= 8; }));
  client.reset();
  sleeper_->set_before_sleep(nullptr);
  std::lock_guard lock(mu);
  ASSERT_FALSE(port_lost) << "port " << port << " was taken while the server was down";
  const auto delays = sleeper_->delays();
  std::vector<milliseconds> after_refusal;
  for (size_t i = 0; i < refused.size() && i < delays.size(); ++i) {
    if (refused[i]) {
      after_refusal.push_back(delays[i]);
    } else {
      EXPECT_LE(delays[i], milliseconds(50)) << "an unreached dial's wait, delay " << i;
    }
  }
  ASSERT_GE(after_refusal.size(), 4u);
  for (size_t i = 1; i < 4; ++i) {
    EXPECT_GT(after_refusal[i], after_refusal[i - 1])
        << "refusal " << i << " did not back off further (20, 40, 80, 160 ms plus jitter)";
  }
  EXPECT_GE(after_refusal[3], milliseconds(160));
}

// A controller that answers and refuses (here: no Node object for the agent's node) keeps the
// agent on the full backoff: the cap is only for dials that reached nobody.
TEST_F(GrpcStreamTest, RefusalByAControllerKeepsTheFullBackoff) {
  auto so = ServerOptions();
  so.admit_node = [](const std::string&) { return false; };
  auto server = StartServer(std::move(so));
  ASSERT_TRUE(server);
  auto client = StartClient(FastBackoffOptions(server->port(), /*jitter=*/0.0));
  ASSERT_TRUE(client);
  ASSERT_TRUE(WaitUntil([&] { return sleeper_->delays().size() >= 4; }));
  const auto delays = sleeper_->delays();
  EXPECT_GE(delays[3], milliseconds(160)) << "20, 40, 80, 160 (+jitter): past the 50 ms cap";
  EXPECT_EQ(client->stats().last_error.rfind("9: ", 0), 0u)  // FAILED_PRECONDITION
      << client->stats().last_error;
}

TEST_F(GrpcStreamTest, ServerDisconnectThenReconnectAndResendIsIdempotent) {
  auto server = StartServerHolding(Fence("gpu-1", 1));
  ASSERT_TRUE(server);
  observer_->refill = [&server](const std::string& node, uint64_t v) {
    EXPECT_TRUE(server->SetDesired(Fence(node, v)).ok());
  };
  auto client = StartClient(ClientOptions("gpu-1", server->port()));
  ASSERT_TRUE(WaitUntil([&] { return server->GetAgent("gpu-1")->acked_version == 1; }));
  EXPECT_FALSE(observer_->Has("wanted")) << "the first stream had the fence";
  ASSERT_TRUE(server->Disconnect("gpu-1").ok());
  ASSERT_TRUE(WaitUntil([&] { return server->GetAgent("gpu-1")->streams == 2; }));
  // The acknowledged fence was dropped; the new stream asks for it, gets the same version and
  // ACKs it without applying it again.
  ASSERT_TRUE(WaitUntil([&] { return observer_->Has("wanted gpu-1 1"); }));
  ASSERT_TRUE(WaitUntil([&] { return client->stats().acks == 2; }));
  EXPECT_EQ(applier_->seen(), (std::vector<uint64_t>{1}));
  EXPECT_EQ(server->GetAgent("gpu-1")->sends, 2u);
  EXPECT_EQ(server->Disconnect("gpu-9").code(), StatusCode::kNotFound);
}

TEST_F(GrpcStreamTest, StaleOnlyAfterGracePeriodWithoutStream) {
  auto clock = std::make_shared<TestClock>();
  auto o = ServerOptions();
  o.clock = clock;
  o.stale_after = seconds(60);
  auto server = StartServer(std::move(o));
  ASSERT_TRUE(server);
  ASSERT_TRUE(server->SetDesired(Fence("gpu-never", 1)).ok());
  auto client = StartClient(ClientOptions("gpu-1", server->port()));
  ASSERT_TRUE(WaitUntil([&] { return server->ConnectedCount() == 1; }));

  clock->Advance(std::chrono::minutes(10));
  EXPECT_FALSE(server->GetAgent("gpu-1")->stale) << "connected agents are never stale";
  EXPECT_TRUE(server->GetAgent("gpu-never")->stale) << "a fence nobody picked up for 10 min";

  client->Stop();
  ASSERT_TRUE(WaitUntil([&] { return !server->GetAgent("gpu-1")->connected; }));
  ASSERT_TRUE(WaitUntil([&] { return observer_->Has("disconnected gpu-1"); }));
  clock->Advance(seconds(59));
  EXPECT_FALSE(server->GetAgent("gpu-1")->stale);
  clock->Advance(seconds(2));
  EXPECT_TRUE(server->GetAgent("gpu-1")->stale);
}

TEST_F(GrpcStreamTest, HelloForAnotherNodeIsRejected) {
  auto server = StartServer(ServerOptions());
  ASSERT_TRUE(server);
  auto stub = RawStub(server->port(), "gpu-1");
  grpc::Status s = HelloAndFinish(*stub, "gpu-2");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_FALSE(server->GetAgent("gpu-2").has_value());
  // The same certificate may speak for its own node.
  s = HelloAndFinish(*stub, "gpu-1");
  EXPECT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
  EXPECT_TRUE(server->GetAgent("gpu-1").has_value());

  // A FenceClient configured with the wrong node never gets a fence.
  ASSERT_TRUE(server->SetDesired(Fence("gpu-2", 1)).ok());
  auto client = StartClient(ClientOptions("gpu-2", server->port(), "gpu-1"));
  ASSERT_TRUE(WaitUntil([&] { return client->stats().attempts >= 3; }));
  EXPECT_TRUE(applier_->seen().empty());
  EXPECT_EQ(client->stats().last_error.rfind("7:", 0), 0u) << client->stats().last_error;
  EXPECT_FALSE(server->GetAgent("gpu-2")->connected);
}

TEST_F(GrpcStreamTest, OnlyAKubeletStyleSubjectNamesANode) {
  // Issue 28, item 5: a CA-signed "CN=tenant-app, DNS:node-b" without O=system:nodes was served
  // node-b's fence. Neither a DNS SAN nor the node CN without the nodes' organisation names one.
  ASSERT_TRUE(pki_->MakeLeaf("ca", "san", "tenant-app", {"DNS:gpu-san"}, false).ok());
  ASSERT_TRUE(pki_->MakeLeaf("ca", "no-org", "system:node:gpu-san", {}, false).ok());
  ASSERT_TRUE(pki_->MakeLeaf("ca", "node", "system:node:gpu-san", {}, false, "system:nodes").ok());
  auto server = StartServerHolding(Fence("gpu-san", 1));
  ASSERT_TRUE(server);
  auto san = RawStub(server->port(), "san");
  EXPECT_EQ(HelloAndFinish(*san, "gpu-san").error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(HelloAndFinish(*san, "tenant-app").error_code(), grpc::StatusCode::PERMISSION_DENIED);
  auto no_org = RawStub(server->port(), "no-org");
  EXPECT_EQ(HelloAndFinish(*no_org, "gpu-san").error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_FALSE(server->GetAgent("gpu-san")->hello);
  auto node = RawStub(server->port(), "node");
  grpc::Status s = HelloAndFinish(*node, "gpu-san");
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(server->GetAgent("gpu-san")->hello);
}

TEST_F(GrpcStreamTest, SharedCertificateModeTrustsHelloButStillNeedsTheCa) {
  // The chart issues one agent certificate (CN feedguard-agent) that names no node.
  ASSERT_TRUE(pki_->MakeLeaf("ca", "shared", "feedguard-agent", {}, false).ok());
  auto opts = ServerOptions();
  opts.trust_hello_node_name = true;
  auto server = StartServer(opts);
  ASSERT_TRUE(server);
  auto stub = RawStub(server->port(), "shared");
  grpc::Status s = HelloAndFinish(*stub, "gpu-7");
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(server->GetAgent("gpu-7").has_value());
  // No certificate at all is still refused.
  auto anonymous = RawStub(server->port(), "");
  EXPECT_EQ(HelloAndFinish(*anonymous, "gpu-8").error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_FALSE(server->GetAgent("gpu-8").has_value());
}

TEST_F(GrpcStreamTest, ClientWithoutCertificateIsRejected) {
  auto server = StartServer(ServerOptions());
  ASSERT_TRUE(server);
  auto stub = RawStub(server->port(), "");
  grpc::Status s = HelloAndFinish(*stub, "gpu-1");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  // Plaintext is refused too.
  auto plain = v1::FenceDistribution::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(server->port()), grpc::InsecureChannelCredentials()));
  s = HelloAndFinish(*plain, "gpu-1");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_TRUE(server->ListAgents().empty());
}

TEST_F(GrpcStreamTest, ClientRefusesServerCertificateForAnotherName) {
  auto server = StartServer(ServerOptions());
  ASSERT_TRUE(server);
  auto o = ClientOptions("gpu-1", server->port());
  o.tls_server_name = "controller.example";  // the server certificate only names 127.0.0.1
  auto client = StartClient(std::move(o));
  ASSERT_TRUE(WaitUntil([&] { return client->stats().attempts >= 2; }));
  EXPECT_EQ(client->stats().hellos, 0u) << client->stats().last_error;
  EXPECT_EQ(server->ConnectedCount(), 0u);
}

TEST_F(GrpcStreamTest, SecondStreamForNodeReplacesFirst) {
  auto server = StartServer(ServerOptions());
  ASSERT_TRUE(server);
  auto stub = RawStub(server->port(), "gpu-1");
  grpc::ClientContext ctx1;
  auto first = stub->Stream(&ctx1);
  v1::AgentMessage hello;
  hello.mutable_hello()->set_node_name("gpu-1");
  ASSERT_TRUE(first->Write(hello));
  ASSERT_TRUE(WaitUntil([&] { return server->ConnectedCount() == 1; }));

  auto client = StartClient(ClientOptions("gpu-1", server->port()));
  ASSERT_TRUE(WaitUntil([&] { return server->GetAgent("gpu-1")->streams == 2; }));
  v1::ControllerMessage m;
  while (first->Read(&m)) {
  }
  grpc::Status s = first->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ABORTED) << s.error_message();
  // The new stream is the one that gets fences.
  ASSERT_TRUE(server->SetDesired(Fence("gpu-1", 5)).ok());
  ASSERT_TRUE(WaitUntil([&] { return server->GetAgent("gpu-1")->acked_version == 5; }));
  EXPECT_EQ(server->ConnectedCount(), 1u);
}

TEST_F(GrpcStreamTest, ServerTrustRotationByFileWatch) {
  ASSERT_TRUE(pki_->MakeCa("ca2").ok());
  ASSERT_TRUE(
      pki_->MakeLeaf("ca2", "gpu-1-ca2", "system:node:gpu-1", {}, false, "system:nodes").ok());
  auto server = StartServer(ServerOptions());  // trusts ca only
  ASSERT_TRUE(server);
  auto stub = RawStub(server->port(), "gpu-1-ca2");
  EXPECT_EQ(HelloAndFinish(*stub, "gpu-1").error_code(), grpc::StatusCode::UNAVAILABLE);

  // The chart rotates the agents' CA: the server's trust bundle now holds both.
  ASSERT_TRUE(pki_->ConcatAtomically({"ca.crt", "ca2.crt"}, "server-trust.crt").ok());
  bool accepted = WaitUntil(
      [&] {
        auto fresh = RawStub(server->port(), "gpu-1-ca2");  // a new connection each try
        return HelloAndFinish(*fresh, "gpu-1").ok();
      },
      milliseconds(10'000));
  EXPECT_TRUE(accepted) << "new connections use the re-read CA bundle";
  EXPECT_TRUE(server->GetAgent("gpu-1").has_value());
}

TEST_F(GrpcStreamTest, AgentCertificateRotationByFileWatch) {
  ASSERT_TRUE(pki_->MakeCa("ca2").ok());
  ASSERT_TRUE(
      pki_->MakeLeaf("ca2", "gpu-1-ca2", "system:node:gpu-1", {}, false, "system:nodes").ok());
  ASSERT_TRUE(pki_->CopyAtomically("gpu-1-ca2.key", "agent.key").ok());
  ASSERT_TRUE(pki_->CopyAtomically("gpu-1-ca2.crt", "agent.crt").ok());
  auto server = StartServer(ServerOptions());  // trusts ca only
  ASSERT_TRUE(server);
  ASSERT_TRUE(server->SetDesired(Fence("gpu-1", 1)).ok());
  auto client = StartClient(ClientOptions("gpu-1", server->port(), "agent"));
  ASSERT_TRUE(WaitUntil([&] { return client->stats().attempts >= 2; }));
  EXPECT_EQ(client->stats().applied_version, 0u) << "untrusted certificate";

  // The agent's certificate is re-issued by the trusted CA (key first, then certificate).
  ASSERT_TRUE(pki_->CopyAtomically("gpu-1.key", "agent.key").ok());
  ASSERT_TRUE(pki_->CopyAtomically("gpu-1.crt", "agent.crt").ok());
  ASSERT_TRUE(WaitUntil([&] { return server->GetAgent("gpu-1")->acked_version == 1; }));
  EXPECT_EQ(applier_->applied_version(), 1u);
}

TEST_F(GrpcStreamTest, PeriodicAndOnChangeReports) {
  auto server = StartServerHolding(Fence("gpu-1", 1));
  ASSERT_TRUE(server);
  auto o = ClientOptions("gpu-1", server->port());
  o.report_interval = milliseconds(50);
  auto client = StartClient(std::move(o));
  ASSERT_TRUE(WaitUntil([&] { return server->GetAgent("gpu-1")->acked_version == 1; }));
  // Periodic: the last report goes out again every 50 ms.
  ASSERT_TRUE(WaitUntil([&] { return client->stats().reports >= 5; }));

  // On change (e.g. the enforcer saw an overwrite).
  v1::NodeReport changed;
  changed.set_applied_version(1);
  changed.set_overwrites_total(7);
  client->PushReport(changed);
  ASSERT_TRUE(WaitUntil([&] {
    auto st = server->GetAgent("gpu-1");
    return st->last_report && st->last_report->overwrites_total == 7;
  }));
}

int ThreadCount() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return -1;
}

// Many agents on one controller: streams cost no thread each (grpc's callback API), and every
// node gets its own fence. (The 5,000-agent figure is for the benchmark; this is the smoke.)
TEST_F(GrpcStreamTest, ManyStreamsWithoutAThreadPerStream) {
  constexpr int kAgents = 300;
  DistributorOptions o;
  o.insecure = true;
  // 300 agents multiplexed on one connection stand for 300 connections here (the thread count
  // is the point); the per-connection bounds, which would hold them to a few, are tested in
  // distributor_test.
  o.max_streams_per_connection = 0;
  o.max_pending_hellos_per_connection = 0;
  auto server = StartServer(o);
  ASSERT_TRUE(server);
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(server->port()),
                                     grpc::InsecureChannelCredentials());
  auto stub = v1::FenceDistribution::NewStub(channel);
  const int threads_before = ThreadCount();
  struct Agent {
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientReaderWriter<v1::AgentMessage, v1::ControllerMessage>> rw;
  };
  std::vector<std::unique_ptr<Agent>> agents;
  for (int i = 0; i < kAgents; ++i) {
    auto a = std::make_unique<Agent>();
    a->rw = stub->Stream(&a->ctx);
    v1::AgentMessage hello;
    hello.mutable_hello()->set_node_name("node-" + std::to_string(i));
    ASSERT_TRUE(a->rw->Write(hello));
    agents.push_back(std::move(a));
  }
  ASSERT_TRUE(WaitUntil([&] { return server->ConnectedCount() == kAgents; }));
  const int threads_after = ThreadCount();
  EXPECT_LT(threads_after - threads_before, 50)
      << "threads before " << threads_before << ", after " << threads_after;

  for (int i = 0; i < kAgents; ++i) {
    ASSERT_TRUE(server->SetDesired(Fence("node-" + std::to_string(i), 100 + i)).ok());
  }
  for (int i = 0; i < kAgents; ++i) {
    v1::ControllerMessage m;
    ASSERT_TRUE(agents[i]->rw->Read(&m));
    EXPECT_EQ(m.update().fence().node_name(), "node-" + std::to_string(i));
    EXPECT_EQ(m.update().fence().version(), static_cast<uint64_t>(100 + i));
    v1::AgentMessage ack;
    ack.mutable_ack()->set_version(m.update().fence().version());
    ack.mutable_ack()->set_nonce(m.update().nonce());
    ASSERT_TRUE(agents[i]->rw->Write(ack));
  }
  ASSERT_TRUE(WaitUntil([&] {
    for (const AgentState& st : server->ListAgents()) {
      if (st.acked_version == 0) return false;
    }
    return true;
  }));
  std::set<std::string> nodes;
  for (const AgentState& st : server->ListAgents()) {
    EXPECT_EQ(st.acked_version, st.desired_version) << st.node;
    nodes.insert(st.node);
  }
  EXPECT_EQ(nodes.size(), static_cast<size_t>(kAgents));
  std::printf("%d streams: process threads %d -> %d\n", kAgents, threads_before, threads_after);
  for (auto& a : agents) a->ctx.TryCancel();
  for (auto& a : agents) (void)a->rw->Finish();
}

TEST_F(GrpcStreamTest, InsecureModeIsExplicit) {
  DistributorOptions o;  // no TLS files and insecure not set
  auto refused = Distributor::Start(o);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);

  o.insecure = true;
  auto server = StartServer(o);
  ASSERT_TRUE(server);
  FenceClientOptions co = ClientOptions("demo-node", server->port());
  co.tls = {};
  EXPECT_FALSE(FenceClient::Start(co, applier_).ok()) << "no TLS files and not insecure";
  co.insecure = true;
  auto client = StartClient(co);
  ASSERT_TRUE(server->SetDesired(Fence("demo-node", 1)).ok());
  ASSERT_TRUE(WaitUntil([&] { return server->GetAgent("demo-node")->acked_version == 1; }));
}

// Node-bound identity (issue 13): the agent sends its token file's current content on every
// stream, so a token the kubelet rotated is what the next reconnect presents.
class RecordingAuthenticator final : public controller::AgentAuthenticator {
 public:
  Status Authenticate(std::string_view token, const std::string& node) override {
    std::lock_guard l(mu_);
    seen_.emplace_back(token);
    if (node == "gpu-1" && (token == "tok-1" || token == "tok-2")) return OkStatus();
    return PermissionDenied("token not for " + node);
  }
  std::vector<std::string> seen() {
    std::lock_guard l(mu_);
    return seen_;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> seen_;  // guarded by mu_
};

TEST_F(GrpcStreamTest, AgentPresentsItsTokenFileAndRereadsItOnReconnect) {
  ASSERT_TRUE(pki_->MakeLeaf("ca", "shared", "feedguard-agent", {}, false).ok());
  auto auth = std::make_shared<RecordingAuthenticator>();
  auto opts = ServerOptions();
  opts.trust_hello_node_name = true;  // shared certificate: the token names the node
  opts.authenticator = auth;
  auto server = StartServer(opts);
  ASSERT_TRUE(server);
  const std::string token_file = pki_->Path("token");
  { std::ofstream(token_file) << "tok-1\n"; }
  auto co = ClientOptions("gpu-1", server->port(), "shared");
  co.token_file = token_file;
  auto client = StartClient(co);
  ASSERT_TRUE(client);
  ASSERT_TRUE(WaitUntil([&] { return server->ConnectedCount() == 1; }));
  EXPECT_EQ(auth->seen(), std::vector<std::string>{"tok-1"});
  // The kubelet rotates the token; the next stream presents the new one.
  { std::ofstream(token_file) << "tok-2"; }
  ASSERT_TRUE(server->Disconnect("gpu-1").ok());
  ASSERT_TRUE(WaitUntil([&] { return auth->seen().size() >= 2 && server->ConnectedCount() == 1; }));
  EXPECT_EQ(auth->seen().back(), "tok-2");
  // A token for nobody: refused with PERMISSION_DENIED, the agent keeps retrying.
  { std::ofstream(token_file) << "stolen"; }
  ASSERT_TRUE(server->Disconnect("gpu-1").ok());
  ASSERT_TRUE(WaitUntil([&] {
    return client->stats().last_error.find("agent token refused for node gpu-1") !=
           std::string::npos;
  })) << client->stats().last_error;
  EXPECT_EQ(server->ConnectedCount(), 0u);
  // An unreadable token file fails the attempt before dialing.
  std::remove(token_file.c_str());
  ASSERT_TRUE(WaitUntil([&] {
    return client->stats().last_error.find("cannot read the ServiceAccount token file") !=
           std::string::npos;
  })) << client->stats().last_error;
}

}  // namespace
}  // namespace feedguard
