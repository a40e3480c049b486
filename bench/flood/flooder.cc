// flooder.cc — fg-flood: hostile traffic against a controller's agent port (issue 13, "a flood
// of invented node names, oversize hellos/reports and half-open streams"; bench/flood/README.md).
//
// For --duration-s, --threads threads each loop over one kind of attack, a new channel (own TCP
// connection) per attempt, round-robin over the kinds:
//   invented   hello for a node that does not exist (a fresh name each time)
//   oversize   a hello of --oversize-bytes (over the controller's message cap)
//   report     hello for an invented node followed at once by an oversize report
//   halfopen   --halfopen-batch streams that never say hello, each on its own connection, held
//              until the server ends them (its hello deadline or its bounds), then again
//   badreport  once per thread: hello for --node (a real node), ACK of the fence the server
//              sends, then a report whose text is not UTF-8 (issue 28, item 3: what an agent
//              sent for a tenant's cgroup named "\xff\xfe"); the server's final code
//   onesock    --onesock-streams streams that never say hello, all on ONE connection (issue 28,
//              item 1: the chart's shared certificate, no token, 1,100 streams), each re-opened
//              as soon as the server ends it, for the whole run (one thread runs it)
// plus --raw-connections plain TCP connections that never speak HTTP/2, held for the whole run,
// and --slowloris N connections to --slowloris-port (the metrics/health port, issue 28, item 4)
// that send a request line and then one header byte every --slowloris-interval-ms, never
// finishing the request, each re-opened as soon as the server closes it.
// Prints one JSON line at the end: attempts and final grpc codes per kind, slowloris re-opens.
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <poll.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "feedguard/v1/nodefence.grpc.pb.h"

namespace feedguard::bench {
namespace {

using feedguard::v1::AgentMessage;
using feedguard::v1::ControllerMessage;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string host = "127.0.0.1";
  int port = 0;
  int threads = 8;
  double duration_s = 30;
  int oversize_bytes = 300 * 1024;
  int raw_connections = 0;
  int halfopen_batch = 200;  // half-open streams one "halfopen" thread holds at once
  int onesock_streams = 1100;
  std::string node;  // badreport
  int slowloris = 0;
  int slowloris_port = 0;
  int slowloris_interval_ms = 1000;
  std::vector<std::string> kinds = {"invented", "oversize", "report", "halfopen"};
};

class Tally {
 public:
  void Add(const std::string& kind, int code) {
    std::lock_guard l(mu_);
    ++codes_[kind][std::to_string(code)];
  }
  nlohmann::json Json() {
    std::lock_guard l(mu_);
    return codes_;
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::map<std::string, int>> codes_;
};

AgentMessage Hello(const std::string& node, size_t pad = 0) {
  AgentMessage m;
  m.mutable_hello()->set_node_name(node);
  if (pad > 0) m.mutable_hello()->set_agent_version(std::string(pad, 'x'));
  return m;
}

int Attack(const Options& o, const std::string& kind, uint64_t n) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetMaxSendMessageSize(64 << 20);
  auto channel = grpc::CreateCustomChannel(o.host + ":" + std::to_string(o.port),
                                           grpc::InsecureChannelCredentials(), args);
  auto stub = feedguard::v1::FenceDistribution::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto rw = stub->Stream(&ctx);
  const std::string invented = "invented-" + std::to_string(n);
  if (kind == "invented") {
    rw->Write(Hello(invented));
  } else if (kind == "oversize") {
    rw->Write(Hello(invented, static_cast<size_t>(o.oversize_bytes)));
  } else if (kind == "report") {  // refused at the hello unless the name is admitted
    rw->Write(Hello(invented));
    AgentMessage r;
    auto* pod = r.mutable_report()->add_pods();
    pod->set_message(std::string(static_cast<size_t>(o.oversize_bytes), 'r'));
    rw->Write(r);
  }  // halfopen: says nothing; the server's hello deadline (or its bounds) ends it
  ControllerMessage in;
  while (rw->Read(&in)) {
  }
  return static_cast<int>(rw->Finish().error_code());
}

// "badreport": a node's stream that ACKs its fence and then sends a report the controller cannot
// parse (a proto3 string that is not UTF-8: C++ protobuf serializes it, with a logged error).
int BadReport(const Options& o) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto stub = feedguard::v1::FenceDistribution::NewStub(grpc::CreateCustomChannel(
      o.host + ":" + std::to_string(o.port), grpc::InsecureChannelCredentials(), args));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto rw = stub->Stream(&ctx);
  rw->Write(Hello(o.node));
  ControllerMessage in;
  if (rw->Read(&in) && in.has_update()) {
    AgentMessage ack;
    ack.mutable_ack()->set_version(in.update().fence().version());
    ack.mutable_ack()->set_nonce(in.update().nonce());
    rw->Write(ack);
    AgentMessage report;
    report.mutable_report()->set_applied_version(in.update().fence().version());
    auto* pod = report.mutable_report()->add_pods();
    pod->set_reason("CgroupNotFound");
    pod->set_message("no cgroup at /sys/fs/cgroup/cpuset/kubepods/pod1/c1/\xff\xfe/cpuset.cpus");
    rw->Write(report);
  }
  while (rw->Read(&in)) {
  }
  return static_cast<int>(rw->Finish().error_code());
}

// One batch of half-open streams: opened one after another, then each drained to its end.
void HalfOpenBatch(const Options& o, Tally& tally) {
  struct Open {
    std::unique_ptr<feedguard::v1::FenceDistribution::Stub> stub;
    std::unique_ptr<grpc::ClientContext> ctx;
    std::unique_ptr<grpc::ClientReaderWriter<AgentMessage, ControllerMessage>> rw;
  };
  std::vector<Open> open;
  for (int i = 0; i < o.halfopen_batch; ++i) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    Open x;
    x.stub = feedguard::v1::FenceDistribution::NewStub(grpc::CreateCustomChannel(
        o.host + ":" + std::to_string(o.port), grpc::InsecureChannelCredentials(), args));
    x.ctx = std::make_unique<grpc::ClientContext>();
    x.ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    x.rw = x.stub->Stream(x.ctx.get());
    open.push_back(std::move(x));
  }
  for (auto& x : open) {
    ControllerMessage in;
    while (x.rw->Read(&in)) {
    }
    tally.Add("halfopen", static_cast<int>(x.rw->Finish().error_code()));
  }
}

// "onesock": streams that never say hello, all multiplexed on one channel (one connection), each
// re-opened when the server ends it, until `end` (every stream's own deadline: they all go then;
// those are not counted as the server's answer). grpc's callback API: opening one does not wait.
void OneConnection(const Options& o, Tally& tally, std::atomic<uint64_t>& seq,
                   Clock::time_point end) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto stub = feedguard::v1::FenceDistribution::NewStub(grpc::CreateCustomChannel(
      o.host + ":" + std::to_string(o.port), grpc::InsecureChannelCredentials(), args));
  const auto wall_end = std::chrono::system_clock::now() + (end - Clock::now());
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    int open = 0;  // guarded by mu
  } shared;
  struct Silent final : grpc::ClientBidiReactor<AgentMessage, ControllerMessage> {
    Silent(feedguard::v1::FenceDistribution::Stub& s, Tally& t, Shared& sh,
           std::chrono::system_clock::time_point deadline, Clock::time_point e)
        : tally(t), shared(sh), end(e) {
      ctx.set_deadline(deadline);
      s.async()->Stream(&ctx, this);
      StartRead(&in);
      StartCall();
    }
    void OnReadDone(bool ok) override {
      if (ok) StartRead(&in);
    }
    void OnDone(const grpc::Status& st) override {
      if (Clock::now() + std::chrono::milliseconds(200) < end) {
        tally.Add("onesock", static_cast<int>(st.error_code()));
      }
      {
        std::lock_guard l(shared.mu);
        --shared.open;
      }
      shared.cv.notify_all();
      delete this;
    }
    grpc::ClientContext ctx;
    ControllerMessage in;
    Tally& tally;
    Shared& shared;
    const Clock::time_point end;
  };
  std::unique_lock l(shared.mu);
  while (Clock::now() + std::chrono::milliseconds(200) < end) {
    while (shared.open < o.onesock_streams) {
      ++shared.open;
      seq.fetch_add(1);
      l.unlock();
      new Silent(*stub, tally, shared, wall_end, end);  // deletes itself in OnDone
      l.lock();
    }
    shared.cv.wait_until(l, std::min(end, Clock::now() + std::chrono::milliseconds(100)));
  }
  shared.cv.wait_for(l, std::chrono::seconds(30), [&] { return shared.open == 0; });
}

// A raw TCP connection to host:port (-1 on failure).
int Dial(const std::string& host, int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, host.c_str(), &sa.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// --slowloris: N connections that send a request line at once and then trickle an endless
// header, a byte per interval each (the classic slowloris), never finishing the request; a
// connection the server answers or closes is re-opened at once. Returns how many times one was
// re-opened.
uint64_t Slowloris(const Options& o, Clock::time_point end) {
  static const std::string kLine = "GET /metrics HTTP/1.1\r\nHost: probe\r\n";
  static const std::string kHeader = "X-Slow: ";
  struct Conn {
    int fd = -1;
    size_t sent = 0;
  };
  std::vector<Conn> conns(static_cast<size_t>(o.slowloris));
  uint64_t reopened = 0;
  auto next = [&](Conn& c) {  // one more byte of the header that never ends
    const char b = c.sent < kHeader.size() ? kHeader[c.sent] : 'x';
    ++c.sent;
    return send(c.fd, &b, 1, MSG_NOSIGNAL) == 1;
  };
  auto open = [&](Conn& c) {
    c.fd = Dial(o.host, o.slowloris_port);
    c.sent = 0;
    if (c.fd >= 0) (void)!send(c.fd, kLine.data(), kLine.size(), MSG_NOSIGNAL);
  };
  for (Conn& c : conns) open(c);
  while (Clock::now() < end) {
    for (Conn& c : conns) {
      bool alive = c.fd >= 0;
      if (alive) {
        pollfd p{c.fd, POLLIN, 0};
        if (poll(&p, 1, 0) > 0) alive = false;  // the server answered or closed: start over
      }
      if (alive && !next(c)) alive = false;
      if (!alive) {
        if (c.fd >= 0) close(c.fd);
        open(c);
        ++reopened;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(o.slowloris_interval_ms));
  }
  for (Conn& c : conns) {
    if (c.fd >= 0) close(c.fd);
  }
  return reopened;
}

int Main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--host") {
      o.host = v;
    } else if (k == "--port") {
      o.port = std::stoi(v);
    } else if (k == "--threads") {
      o.threads = std::stoi(v);
    } else if (k == "--duration-s") {
      o.duration_s = std::stod(v);
    } else if (k == "--oversize-bytes") {
      o.oversize_bytes = std::stoi(v);
    } else if (k == "--halfopen-batch") {
      o.halfopen_batch = std::stoi(v);
    } else if (k == "--raw-connections") {
      o.raw_connections = std::stoi(v);
    } else if (k == "--node") {
      o.node = v;
    } else if (k == "--onesock-streams") {
      o.onesock_streams = std::stoi(v);
    } else if (k == "--slowloris") {
      o.slowloris = std::stoi(v);
    } else if (k == "--slowloris-port") {
      o.slowloris_port = std::stoi(v);
    } else if (k == "--slowloris-interval-ms") {
      o.slowloris_interval_ms = std::stoi(v);
    } else if (k == "--kinds") {
      o.kinds.clear();
      size_t start = 0;
      while (start <= v.size()) {
        size_t end = v.find(',', start);
        if (end == std::string::npos) end = v.size();
        if (end > start) o.kinds.push_back(v.substr(start, end - start));
        start = end + 1;
      }
    } else {
      std::fprintf(stderr, "unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  if ((o.port == 0 && !o.kinds.empty()) || o.threads < 0 ||
      (o.slowloris > 0 && o.slowloris_port == 0)) {
    std::fprintf(stderr,
                 "usage: %s --port P [--host 127.0.0.1] [--threads 8] [--duration-s 30]\n"
                 "  [--kinds invented,oversize,report,halfopen,onesock,badreport]\n"
                 "  [--oversize-bytes 307200] [--node NAME (badreport)]\n"
                 "  [--raw-connections 0] [--halfopen-batch 200] [--onesock-streams 1100]\n"
                 "  [--slowloris N --slowloris-port P [--slowloris-interval-ms 1000]]\n"
                 "  (--kinds '' for none)\n",
                 argv[0]);
    return 2;
  }
  std::vector<int> raw;
  for (int i = 0; i < o.raw_connections; ++i) {
    const int fd = Dial(o.host, o.port);
    if (fd < 0) break;
    raw.push_back(fd);
  }
  Tally tally;
  std::atomic<uint64_t> seq{0};
  const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(o.duration_s));
  std::vector<std::thread> threads;
  std::atomic<uint64_t> slowloris_reopened{0};
  if (o.slowloris > 0) {
    threads.emplace_back([&] { slowloris_reopened = Slowloris(o, end); });
  }
  for (int t = 0; t < o.threads && !o.kinds.empty(); ++t) {
    threads.emplace_back([&, t] {
      const std::string& kind = o.kinds[static_cast<size_t>(t) % o.kinds.size()];
      if (kind == "onesock") {
        OneConnection(o, tally, seq, end);
        return;
      }
      if (kind == "badreport") {
        seq.fetch_add(1);
        tally.Add(kind, BadReport(o));
        return;
      }
      while (Clock::now() < end) {
        if (kind == "halfopen") {
          seq.fetch_add(static_cast<uint64_t>(o.halfopen_batch));
          HalfOpenBatch(o, tally);
        } else {
          tally.Add(kind, Attack(o, kind, seq.fetch_add(1)));
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int fd : raw) close(fd);
  nlohmann::json out = {{"ev", "flood"},
                        {"attempts", seq.load()},
                        {"raw_connections", raw.size()},
                        {"slowloris", o.slowloris},
                        {"slowloris_reopened", slowloris_reopened.load()},
                        {"codes", tally.Json()}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace
}  // namespace feedguard::bench

int main(int argc, char** argv) { return feedguard::bench::Main(argc, argv); }
