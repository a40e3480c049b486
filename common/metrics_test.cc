#include "common/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

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

TEST(RenderSeriesTest, LabelsInOrderAndValuesEscaped) {
  EXPECT_EQ(RenderSeries("x_total", "what it counts", "counter",
                         {{{{"namespace", "ml"}, {"pod", "a"}}, 2.5},
                          {{{"namespace", "ml"}, {"pod", "q\"uo\\te\nd"}}, 0}}),
            "# HELP x_total what it counts\n# TYPE x_total counter\n"
            "x_total{namespace=\"ml\",pod=\"a\"} 2.5\n"
            "x_total{namespace=\"ml\",pod=\"q\\\"uo\\\\te\\nd\"} 0\n");
  EXPECT_EQ(RenderSeries("y", "h", "gauge", {{{}, 1}}), "# HELP y h\n# TYPE y gauge\ny 1\n");
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

// A connected TCP socket to 127.0.0.1:port (closed on destruction).
class RawConnection {
 public:
  explicit RawConnection(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = fd_ >= 0 && ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~RawConnection() {
    if (fd_ >= 0) ::close(fd_);
  }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;
  bool connected() const { return connected_; }
  // False once the server has closed the connection (the send fails).
  bool Send(const std::string& s) {
    return connected_ &&
           ::send(fd_, s.data(), s.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(s.size());
  }
  // Whether the server closed the connection within `wait` (EOF or reset).
  bool PeerClosed(std::chrono::milliseconds wait) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(wait.count())) <= 0) return false;
    char buf[256];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

// A server on a free loopback port, always ready, whose /metrics says feedguard_up 1.
auto StartReadyServer() {
  return MetricsServer::Start(
      "127.0.0.1:0", [] { return RenderGauge("feedguard_up", "1 when serving", 1); },
      [] { return true; });
}

TEST(MetricsServerTest, ProbesAnswerWhileManyClientsAreSlowOrIdle) {
  auto s = StartReadyServer();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const int port = (*s)->port();
  // 16 connections that never say anything and 16 that trickle a /metrics request header one
  // byte at a time (slowloris), all open before the first probe.
  std::vector<std::unique_ptr<RawConnection>> idle, slow;
  for (int i = 0; i < 16; ++i) {
    idle.push_back(std::make_unique<RawConnection>(port));
    slow.push_back(std::make_unique<RawConnection>(port));
    ASSERT_TRUE(idle.back()->connected() && slow.back()->connected());
    slow.back()->Send("GET /metrics HTTP/1.1\r\nHost: x\r\n");
  }
  std::atomic<bool> done{false};
  std::thread trickler([&] {
    while (!done) {
      for (auto& c : slow) c->Send("X");
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // let the server take them all
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(std::chrono::seconds(1));
  c.set_read_timeout(std::chrono::seconds(1));
  for (int probe = 0; probe < 12; ++probe) {  // ~3 s: past the server's read/idle timeouts
    for (const char* path : {"/healthz", "/readyz"}) {
      const auto t0 = std::chrono::steady_clock::now();
      auto r = c.Get(path);
      const auto took = std::chrono::steady_clock::now() - t0;
      ASSERT_TRUE(r) << path << " probe " << probe << " got no answer";
      EXPECT_EQ(r->status, 200) << path;
      EXPECT_LT(took, std::chrono::seconds(1)) << path << " probe " << probe;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  done = true;
  trickler.join();
}

TEST(MetricsServerTest, IdleConnectionsAreClosed) {
  MetricsServerOptions o;
  o.keep_alive_timeout = std::chrono::seconds(1);
  auto s = MetricsServer::Start("127.0.0.1:0", nullptr, nullptr, o);
  ASSERT_TRUE(s.ok());
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>((*s)->port()));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  // The server hangs up on a connection that sends nothing: recv sees EOF, well before 5 s.
  const auto t0 = std::chrono::steady_clock::now();
  char buf[16];
  const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
  ::close(fd);
  EXPECT_EQ(n, 0) << "expected the server to close the idle connection";
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(4));
}

// A probe as the kubelet sends it: a new connection, GET, at most `timeout` for the answer.
bool ProbeAnswers(int port, const char* path, std::chrono::milliseconds timeout) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(timeout);
  c.set_read_timeout(timeout);
  auto r = c.Get(path);
  return r && r->status == 200;
}

TEST(MetricsServerTest, HealthzAnswersDuring200SlowConnections) {
  // Issue 28, item 4: ~65 connections sending a byte a second kept the port busy and at 70
  // every /healthz timed out (a thread per connection, a listen backlog of 5). 200 slowloris
  // connections, re-opened as the server drops them, and 50 that never send anything: every
  // probe is answered within its one second.
  auto s = StartReadyServer();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const int port = (*s)->port();
  constexpr int kSlow = 200;
  std::vector<std::unique_ptr<RawConnection>> slow, idle;
  for (int i = 0; i < kSlow; ++i) {
    slow.push_back(std::make_unique<RawConnection>(port));
    slow.back()->Send("GET /metrics HTTP/1.1\r\n");
  }
  for (int i = 0; i < 50; ++i) idle.push_back(std::make_unique<RawConnection>(port));
  std::atomic<bool> done{false};
  std::thread trickler([&] {
    while (!done) {
      for (auto& c : slow) {
        if (!c->Send("X")) {  // dropped by the server: the attacker opens another
          c = std::make_unique<RawConnection>(port);
          c->Send("GET /metrics HTTP/1.1\r\n");
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  int answered = 0, probes = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(6);
  while (std::chrono::steady_clock::now() < end) {  // past the request deadline (2 s) twice
    ++probes;
    answered += ProbeAnswers(port, "/healthz", std::chrono::seconds(1)) ? 1 : 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  done = true;
  trickler.join();
  EXPECT_EQ(answered, probes);
  EXPECT_GE(probes, 10);
}

TEST(MetricsServerTest, ATricklingRequestIsClosedAtItsDeadlineNotKeptByEachByte) {
  MetricsServerOptions o;
  o.request_timeout = std::chrono::milliseconds(1000);
  auto s = MetricsServer::Start("127.0.0.1:0", nullptr, nullptr, o);
  ASSERT_TRUE(s.ok());
  RawConnection c((*s)->port());
  ASSERT_TRUE(c.connected());
  const auto t0 = std::chrono::steady_clock::now();
  bool closed = false;
  // A byte every 200 ms, well inside any per-byte timeout: the whole request is due in 1 s.
  while (!closed && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5)) {
    closed = !c.Send("G") || c.PeerClosed(std::chrono::milliseconds(200));
  }
  EXPECT_TRUE(closed);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(2500));
}

TEST(MetricsServerTest, PastTheConnectionCapTheOldestWaitingConnectionMakesRoom) {
  MetricsServerOptions o;
  o.max_connections = 8;
  o.request_timeout = std::chrono::seconds(30);  // only the cap sheds them here
  auto s = MetricsServer::Start(
      "127.0.0.1:0", nullptr, [] { return true; }, o);
  ASSERT_TRUE(s.ok());
  const int port = (*s)->port();
  std::vector<std::unique_ptr<RawConnection>> held;
  for (int i = 0; i < 20; ++i) {
    held.push_back(std::make_unique<RawConnection>(port));
    held.back()->Send("GET /readyz HTTP/1.1\r\n");
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_LE((*s)->stats().open, 8u);
  EXPECT_TRUE(ProbeAnswers(port, "/readyz", std::chrono::seconds(1)));
  EXPECT_TRUE(held.front()->PeerClosed(std::chrono::milliseconds(500)));  // the oldest went
}

TEST(MetricsServerTest, RequestsWithABodyOrOtherMethodsAreRefused) {
  auto s = MetricsServer::Start("127.0.0.1:0", nullptr, nullptr);
  ASSERT_TRUE(s.ok());
  httplib::Client c("127.0.0.1", (*s)->port());
  auto post = c.Post("/healthz", std::string(100, 'x'), "text/plain");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 413);
  auto head = c.Head("/healthz");
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  EXPECT_EQ(c.Get("/nothing")->status, 404);
  EXPECT_EQ(c.Get("/healthz?verbose=1")->status, 200);
}

TEST(MetricsServerTest, ASlowCollectorDoesNotDelayTheProbes) {
  std::atomic<bool> release{false};
  auto s = MetricsServer::Start(
      "127.0.0.1:0",
      [&] {
        while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        return std::string("slow 1\n");
      },
      [] { return true; });
  ASSERT_TRUE(s.ok());
  const int port = (*s)->port();
  std::thread scrape([&] { ProbeAnswers(port, "/metrics", std::chrono::seconds(10)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_TRUE(ProbeAnswers(port, "/healthz", std::chrono::milliseconds(500)));
  EXPECT_TRUE(ProbeAnswers(port, "/readyz", std::chrono::milliseconds(500)));
  release = true;
  scrape.join();
}

}  // namespace
}  // namespace feedguard
