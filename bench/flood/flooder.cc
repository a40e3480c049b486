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
// plus --raw-connections plain TCP connections that never speak HTTP/2, held for the whole run.
// Prints one JSON line at the end: attempts and final grpc codes per kind.
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
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
  if (o.port == 0 || o.threads <= 0 || o.kinds.empty()) {
    std::fprintf(stderr,
                 "usage: %s --port P [--host 127.0.0.1] [--threads 8] [--duration-s 30]\n"
                 "  [--kinds invented,oversize,report,halfopen] [--oversize-bytes 307200]\n"
                 "  [--raw-connections 0] [--halfopen-batch 200]\n",
                 argv[0]);
    return 2;
  }
  std::vector<int> raw;
  for (int i = 0; i < o.raw_connections; ++i) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) break;
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(o.port));
    inet_pton(AF_INET, o.host.c_str(), &sa.sin_addr);
    if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
      close(fd);
      break;
    }
    raw.push_back(fd);
  }
  Tally tally;
  std::atomic<uint64_t> seq{0};
  const auto end = Clock::now() + std::chrono::duration<double>(o.duration_s);
  std::vector<std::thread> threads;
  for (int t = 0; t < o.threads; ++t) {
    threads.emplace_back([&, t] {
      const std::string& kind = o.kinds[static_cast<size_t>(t) % o.kinds.size()];
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
                        {"codes", tally.Json()}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace
}  // namespace feedguard::bench

int main(int argc, char** argv) { return feedguard::bench::Main(argc, argv); }
