// agent_sim.cc — fg-agent-sim: N simulated feedguard agents in one process (issue 14, item 2).
//
// Each simulated agent is a real FenceDistribution.Stream to the controller with the real
// protocol (DESIGN §5): hello (node name, version, topology summary, cgroup facts, last applied
// version), ACK of every FenceUpdate by version + nonce (or NACK, on request), a NodeReport
// right after each apply and every --report-interval-ms, shaped like the real agent's (one
// PodReport per trainer and neighbour of the fence, marked enforced), and the real agent's
// reconnect pacing (agent::ReconnectPacer, linked from agent/client: 500 ms ×2 to 30 s, ±20 %;
// reset after a healthy stream; at most 5 s after a dial that reached no controller, as
// FenceClient's unreached_backoff_cap), with a new channel (own TCP connection) per attempt.
// Plaintext by default; --tls-ca/--tls-cert/--tls-key: mTLS as the real agent (one handshake per
// attempt).
// --token-dir DIR: the chart's default identity (token): each agent reads DIR/<node> (a
// pod-bound ServiceAccount token) again for every attempt, as the real agent re-reads its
// projected token, and sends it as `authorization: Bearer <token>`.
//
// Built on grpc's callback API: no thread per stream; grpc's own pool runs the reactions, one
// timer thread runs reconnects and periodic reports, one thread reads commands from stdin.
//
// Output: one JSON object per line on stdout (the driver, bench/scale/driver.py, reads it):
//   {"ev":"ready","agents":N}
//   {"ev":"hello","a":I,"t":MS,"s":STREAM}                    hello written on stream S of agent I
//   {"ev":"fence","a":I,"t":MS,"s":S,"v":VER,"np":P,"tr":T,"nb":B,"g":GEN,"ack":1,"drop":"..."}
//        GEN: generation of policy --watch-policy in that fence (-1: absent); drop: policies
//        whose trainers+neighbours in this fence are fewer than in this agent's previous fence
//   {"ev":"end","a":I,"t":MS,"s":S,"code":C,"msg":"..."}       stream ended (grpc status)
//   {"ev":"stats",...}                                         answer to "stats"
// Times are wall-clock milliseconds since the epoch (the driver compares them with its own).
// Commands on stdin, one per line:
//   storm          cancel every open stream at once (each agent reconnects with its backoff)
//   nack K         the agents 0..K-1 NACK the next fence they receive
//   stats          print a stats line
//   quit           cancel everything and exit (also on stdin EOF)
#include <grpc/grpc_security.h>
#include <grpcpp/grpcpp.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <queue>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/client/fence_client.h"
#include "bench/scale/sim_report.h"
#include "common/backoff.h"
#include "common/mutex_checks.h"
#include "common/strings.h"
#include "feedguard/v1/nodefence.grpc.pb.h"

namespace feedguard::bench {
namespace {

using feedguard::v1::AgentMessage;
using feedguard::v1::ControllerMessage;
using Clock = std::chrono::steady_clock;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct Options {
  std::string target;
  int agents = 10;
  std::string node_prefix = "node-";
  int node_digits = 5;
  int first_index = 0;
  int64_t report_interval_ms = 30'000;
  int observe_starving_percent = 20;  // < 0: reports carry no observations
  int64_t healthy_after_ms = 10'000;
  int64_t unreached_backoff_cap_ms =  // the real agent's
      feedguard::agent::FenceClientOptions{}.unreached_backoff_cap.count();
  std::string watch_policy = "bench";
  int64_t start_spread_ms = 0;  // agents start uniformly spread over this window
  uint64_t seed = 1;
  // mTLS (all three set) instead of plaintext; the server's certificate is checked against
  // tls_server_name when set (else the target's host).
  std::string tls_ca, tls_cert, tls_key, tls_server_name;
  // With mTLS: each agent keeps the TLS session tickets the controller sends (grpc's client
  // session cache, one per agent, as one agent process has one) and resumes with them on its
  // next attempt against the same controller process.
  bool tls_session_cache = false;
  std::string token_dir;  // "": no token
};

struct SessionCacheFree {
  void operator()(grpc_ssl_session_cache* c) const { grpc_ssl_session_cache_destroy(c); }
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// Stdout JSON lines, one writer at a time.
class EventLog {
 public:
  void Write(const nlohmann::json& j) {
    const std::string line = j.dump() + "\n";
    std::lock_guard lock(mu_);
    std::fwrite(line.data(), 1, line.size(), stdout);
    std::fflush(stdout);
  }

 private:
  std::mutex mu_;
};

// One thread running due callbacks in time order.
class Timer {
 public:
  Timer() : thread_([this] { Loop(); }) {}
  ~Timer() { Stop(); }
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

  void After(std::chrono::milliseconds d, std::function<void()> fn) {
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
      q_.push(Item{Clock::now() + d, seq_++, std::move(fn)});
    }
    cv_.notify_one();
  }
  void Stop() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_one();
    if (thread_.joinable()) thread_.join();
  }

 private:
  struct Item {
    Clock::time_point due;
    uint64_t seq;
    std::function<void()> fn;
    bool operator>(const Item& o) const { return due != o.due ? due > o.due : seq > o.seq; }
  };
  void Loop() {
    std::unique_lock lock(mu_);
    while (!stopping_) {
      if (q_.empty()) {
        cv_.wait(lock);
        continue;
      }
      const auto due = q_.top().due;
      if (Clock::now() < due) {
        cv_.wait_until(lock, due);
        continue;
      }
      std::function<void()> fn = q_.top().fn;
      q_.pop();
      lock.unlock();
      fn();
      lock.lock();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::priority_queue<Item, std::vector<Item>, std::greater<>> q_;
  uint64_t seq_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

class Sim;

// One stream of one agent; deletes itself in OnDone.
class Stream final : public grpc::ClientBidiReactor<AgentMessage, ControllerMessage> {
 public:
  Stream(Sim* sim, int agent, uint64_t stream_no) : sim_(sim), agent_(agent), no_(stream_no) {}
  // `token`: sent as `authorization: Bearer <token>` ("": nothing sent).
  void Start(feedguard::v1::FenceDistribution::Stub* stub, AgentMessage hello,
             const std::string& token);
  void Send(AgentMessage m);
  void Cancel() { ctx_.TryCancel(); }
  uint64_t number() const { return no_; }

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnDone(const grpc::Status& s) override;

 private:
  Sim* const sim_;
  const int agent_;
  const uint64_t no_;
  grpc::ClientContext ctx_;
  ControllerMessage in_;
  std::mutex mu_;
  std::deque<AgentMessage> out_;  // guarded by mu_; front is being written
  bool write_failed_ = false;     // guarded by mu_
  bool hello_logged_ = false;     // guarded by mu_
  bool closed_ = false;           // guarded by mu_: read side ended, no more writes (hold gone)
  Clock::time_point started_ = Clock::now();
  bool got_update_ = false;  // read side only
};

struct AgentState {
  std::string node;
  std::unique_ptr<feedguard::agent::ReconnectPacer> pacer;  // the real agent's
  std::mutex mu;
  Stream* stream = nullptr;  // guarded by mu; open stream (owned by grpc until OnDone)
  uint64_t streams = 0;      // guarded by mu
  uint64_t applied_version = 0;
  bool nack_next = false;
  std::map<std::string, int> pods_per_policy;  // of the last fence received
  feedguard::v1::NodeReport report;            // last report (pods of the last applied fence)
  bool has_report = false;
  std::shared_ptr<grpc::Channel> channel;  // of the current attempt
  std::unique_ptr<feedguard::v1::FenceDistribution::Stub> stub;
  std::unique_ptr<grpc_ssl_session_cache, SessionCacheFree> session_cache;  // --tls-session-cache
};

class Sim {
 public:
  explicit Sim(Options o) : opt_(std::move(o)), agents_(static_cast<size_t>(opt_.agents)) {
    if (!opt_.tls_ca.empty()) {
      grpc::SslCredentialsOptions ssl;
      ssl.pem_root_certs = ReadFile(opt_.tls_ca);
      ssl.pem_cert_chain = ReadFile(opt_.tls_cert);
      ssl.pem_private_key = ReadFile(opt_.tls_key);
      creds_ = grpc::SslCredentials(ssl);
    } else {
      creds_ = grpc::InsecureChannelCredentials();
    }
    std::mt19937_64 rng(opt_.seed);
    for (int i = 0; i < opt_.agents; ++i) {
      auto& a = agents_[static_cast<size_t>(i)];
      char buf[32];
      std::snprintf(buf, sizeof buf, "%0*d", opt_.node_digits, opt_.first_index + i);
      a.node = opt_.node_prefix + buf;
      a.pacer = std::make_unique<feedguard::agent::ReconnectPacer>(
          BackoffPolicy{}, rng() | 1u, std::chrono::milliseconds(opt_.unreached_backoff_cap_ms));
      if (opt_.tls_session_cache && !opt_.tls_ca.empty()) {
        a.session_cache.reset(grpc_ssl_session_cache_create_lru(1));
      }
    }
  }

  void StartAll() {
    std::mt19937_64 rng(opt_.seed ^ 0x5eedULL);
    std::uniform_int_distribution<int64_t> spread(0, std::max<int64_t>(0, opt_.start_spread_ms));
    std::uniform_int_distribution<int64_t> phase(0, opt_.report_interval_ms);
    for (int i = 0; i < opt_.agents; ++i) {
      timer_.After(std::chrono::milliseconds(spread(rng)), [this, i] { Connect(i); });
      timer_.After(std::chrono::milliseconds(phase(rng)), [this, i] { ReportTick(i); });
    }
    log_.Write({{"ev", "ready"}, {"agents", opt_.agents}, {"t", NowMs()}});
  }

  void Connect(int i) {
    if (stopping_.load()) return;
    auto& a = agents_[static_cast<size_t>(i)];
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 30'000);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10'000);
    args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    if (!opt_.tls_server_name.empty()) args.SetSslTargetNameOverride(opt_.tls_server_name);
    if (a.session_cache) {  // the cache outlives every channel of this agent (AgentState)
      const grpc_arg arg = grpc_ssl_session_cache_create_channel_arg(a.session_cache.get());
      args.SetPointerWithVtable(arg.key, arg.value.pointer.p, arg.value.pointer.vtable);
    }
    auto channel = grpc::CreateCustomChannel(opt_.target, creds_, args);
    auto stub = feedguard::v1::FenceDistribution::NewStub(channel);
    AgentMessage hello;
    auto* h = hello.mutable_hello();
    h->set_node_name(a.node);
    h->set_agent_version("fg-agent-sim/0.1");
    h->mutable_topology()->set_numa_nodes(2);
    h->mutable_topology()->set_cores(32);
    h->mutable_topology()->set_pus(64);
    h->mutable_topology()->set_gpus(8);
    h->mutable_topology()->set_allowed_cpus("0-63");
    h->set_cgroup_version("v2");
    h->set_cgroup_driver("systemd");
    h->add_capabilities("cpu.idle");
    h->add_capabilities("cpu.max.burst");
    std::string token;
    if (!opt_.token_dir.empty()) {
      token = std::string(Trim(ReadFile(opt_.token_dir + "/" + a.node)));
    }
    Stream* s = nullptr;
    {
      std::lock_guard lock(a.mu);
      h->set_last_applied_version(a.applied_version);
      s = new Stream(this, i, ++a.streams);
      a.stream = s;
      a.channel = std::move(channel);  // the previous channel (if any) goes with its last stream
      a.stub = std::move(stub);
      s->Start(a.stub.get(), std::move(hello), token);
      if (a.has_report) {  // as FenceClient: the controller gets our state right after hello
        AgentMessage m;
        *m.mutable_report() = a.report;
        s->Send(std::move(m));
      }
    }
  }

  // Called on a grpc thread for each FenceUpdate.
  void OnUpdate(int i, Stream* s, const feedguard::v1::FenceUpdate& u) {
    auto& a = agents_[static_cast<size_t>(i)];
    const auto& f = u.fence();
    std::map<std::string, int> per_policy;
    for (const auto& t : f.trainers()) ++per_policy[t.policy()];
    for (const auto& n : f.neighbours()) ++per_policy[n.policy()];
    int64_t gen = -1;
    for (const auto& p : f.policies()) {
      if (p.name() == opt_.watch_policy) gen = p.generation();
    }
    std::string drop;
    AgentMessage answer;
    bool nacked = false;
    {
      std::lock_guard lock(a.mu);
      for (const auto& [policy, n] : a.pods_per_policy) {
        auto it = per_policy.find(policy);
        const int now = it == per_policy.end() ? 0 : it->second;
        if (now < n) {
          if (!drop.empty()) drop += ",";
          drop += policy + ":" + std::to_string(n) + "->" + std::to_string(now);
        }
      }
      a.pods_per_policy = per_policy;
      if (a.nack_next) {
        a.nack_next = false;
        nacked = true;
        answer.mutable_nack()->set_version(f.version());
        answer.mutable_nack()->set_nonce(u.nonce());
        answer.mutable_nack()->set_error("fg-agent-sim: NACK requested");
      } else {
        answer.mutable_ack()->set_version(f.version());
        answer.mutable_ack()->set_nonce(u.nonce());
        a.applied_version = f.version();
        a.report = feedguard::bench::SimReport(f, opt_.observe_starving_percent);
        a.has_report = true;
      }
    }
    s->Send(answer);
    if (!nacked) {
      AgentMessage m;
      {
        std::lock_guard lock(a.mu);
        *m.mutable_report() = a.report;
      }
      s->Send(std::move(m));
    }
    nlohmann::json ev = {{"ev", "fence"},
                         {"a", i},
                         {"t", NowMs()},
                         {"s", s->number()},
                         {"v", f.version()},
                         {"np", f.policies_size()},
                         {"tr", f.trainers_size()},
                         {"nb", f.neighbours_size()},
                         {"g", gen},
                         {"ack", nacked ? 0 : 1}};
    if (!drop.empty()) ev["drop"] = drop;
    log_.Write(ev);
    fences_.fetch_add(1);
  }

  void OnHelloWritten(int i, Stream* s) {
    log_.Write({{"ev", "hello"}, {"a", i}, {"t", NowMs()}, {"s", s->number()}});
  }

  // Called from Stream::OnDone (grpc thread) before the stream deletes itself.
  void OnStreamDone(int i, Stream* s, const grpc::Status& st, bool healthy) {
    auto& a = agents_[static_cast<size_t>(i)];
    std::chrono::milliseconds delay{0};
    {
      std::lock_guard lock(a.mu);
      if (a.stream == s) a.stream = nullptr;
      using feedguard::agent::StreamEnd;
      const bool reached = feedguard::agent::DialReachedController(
          st, a.channel ? a.channel->GetState(false) : GRPC_CHANNEL_TRANSIENT_FAILURE);
      delay = a.pacer->Next(healthy   ? StreamEnd::kHealthy
                            : reached ? StreamEnd::kFailed
                                      : StreamEnd::kUnreached);
    }
    std::string msg = st.error_message();
    if (msg.size() > 200) msg.resize(200);
    log_.Write({{"ev", "end"},
                {"a", i},
                {"t", NowMs()},
                {"s", s->number()},
                {"code", static_cast<int>(st.error_code())},
                {"msg", msg},
                {"next_ms", delay.count()}});
    if (!stopping_.load()) timer_.After(delay, [this, i] { Connect(i); });
    if (--open_streams_ == 0) done_cv_.notify_all();
  }
  void StreamOpened() { ++open_streams_; }

  void ReportTick(int i) {
    if (stopping_.load()) return;
    auto& a = agents_[static_cast<size_t>(i)];
    {
      std::lock_guard lock(a.mu);
      if (a.stream != nullptr && a.has_report) {
        AgentMessage m;
        *m.mutable_report() = a.report;
        a.stream->Send(std::move(m));
        reports_.fetch_add(1);
      }
    }
    timer_.After(std::chrono::milliseconds(opt_.report_interval_ms), [this, i] { ReportTick(i); });
  }

  void Storm() {
    int n = 0;
    for (auto& a : agents_) {
      std::lock_guard lock(a.mu);
      if (a.stream != nullptr) {
        a.stream->Cancel();
        ++n;
      }
    }
    log_.Write({{"ev", "storm"}, {"t", NowMs()}, {"cancelled", n}});
  }

  void NackNext(int k) {
    for (int i = 0; i < k && i < opt_.agents; ++i) {
      auto& a = agents_[static_cast<size_t>(i)];
      std::lock_guard lock(a.mu);
      a.nack_next = true;
    }
    log_.Write({{"ev", "nack_armed"}, {"t", NowMs()}, {"agents", std::min(k, opt_.agents)}});
  }

  void Stats() {
    int connected = 0;
    for (auto& a : agents_) {
      std::lock_guard lock(a.mu);
      if (a.stream != nullptr) ++connected;
    }
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    const double cpu = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                       static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
    log_.Write({{"ev", "stats"},
                {"t", NowMs()},
                {"agents", opt_.agents},
                {"streams_open", connected},
                {"fences", fences_.load()},
                {"periodic_reports", reports_.load()},
                {"cpu_s", cpu},
                {"maxrss_kb", ru.ru_maxrss}});
  }

  void Shutdown() {
    stopping_.store(true);
    timer_.Stop();
    for (auto& a : agents_) {
      std::lock_guard lock(a.mu);
      if (a.stream != nullptr) a.stream->Cancel();
    }
    std::unique_lock lock(done_mu_);
    done_cv_.wait_for(lock, std::chrono::seconds(10), [this] { return open_streams_.load() == 0; });
  }

  const Options& options() const { return opt_; }

 private:
  const Options opt_;
  std::shared_ptr<grpc::ChannelCredentials> creds_;
  std::vector<AgentState> agents_;
  EventLog log_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> open_streams_{0};
  std::atomic<uint64_t> fences_{0};
  std::atomic<uint64_t> reports_{0};
  std::mutex done_mu_;
  std::condition_variable done_cv_;
  Timer timer_;  // last: stopped (joined) before the rest goes
};

void Stream::Start(feedguard::v1::FenceDistribution::Stub* stub, AgentMessage hello,
                   const std::string& token) {
  if (!token.empty()) ctx_.AddMetadata("authorization", "Bearer " + token);
  sim_->StreamOpened();
  stub->async()->Stream(&ctx_, this);
  // The hold keeps OnDone away until the read side has ended and closed_ forbids new writes,
  // so a report timer can never start a write on a finished reactor.
  AddHold();
  StartRead(&in_);
  Send(std::move(hello));
  StartCall();
}

void Stream::Send(AgentMessage m) {
  std::lock_guard lock(mu_);
  if (write_failed_ || closed_) return;
  out_.push_back(std::move(m));
  if (out_.size() == 1) StartWrite(&out_.front());
}

void Stream::OnWriteDone(bool ok) {
  bool log_hello = false;
  {
    std::lock_guard lock(mu_);
    if (!hello_logged_ && ok) {
      hello_logged_ = true;
      log_hello = true;
    }
    out_.pop_front();
    if (!ok) {
      write_failed_ = true;
      out_.clear();
    } else if (!out_.empty()) {
      StartWrite(&out_.front());
    }
  }
  if (log_hello) sim_->OnHelloWritten(agent_, this);
}

void Stream::OnReadDone(bool ok) {
  if (!ok) {
    {
      std::lock_guard lock(mu_);
      closed_ = true;
    }
    RemoveHold();  // OnDone follows once the last write (if any) is done
    return;
  }
  if (in_.has_update()) {
    got_update_ = true;
    sim_->OnUpdate(agent_, this, in_.update());
  }
  StartRead(&in_);
}

void Stream::OnDone(const grpc::Status& s) {
  const bool healthy =
      got_update_ ||
      Clock::now() - started_ >= std::chrono::milliseconds(sim_->options().healthy_after_ms);
  sim_->OnStreamDone(agent_, this, s, healthy);
  delete this;
}

int Usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s --target HOST:PORT --agents N [--node-prefix node-] [--node-digits 5]\n"
               "          [--first-index 0] [--report-interval-ms 30000] "
               "[--observe-starving-percent 20] [--watch-policy bench]\n"
               "          [--start-spread-ms 0] [--seed 1]\n"
               "          [--tls-ca F --tls-cert F --tls-key F [--tls-server-name N]] "
               "[--tls-session-cache 1] [--token-dir DIR]\n",
               argv0);
  return 2;
}

int Main(int argc, char** argv) {
  feedguard::SkipMutexLockOrderTracking();  // as the agent (common/mutex_checks.h)
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (i + 1 >= argc) return Usage(argv[0]);
    const std::string v = argv[++i];
    try {
      if (k == "--target") {
        o.target = v;
      } else if (k == "--agents") {
        o.agents = std::stoi(v);
      } else if (k == "--node-prefix") {
        o.node_prefix = v;
      } else if (k == "--node-digits") {
        o.node_digits = std::stoi(v);
      } else if (k == "--first-index") {
        o.first_index = std::stoi(v);
      } else if (k == "--report-interval-ms") {
        o.report_interval_ms = std::stoll(v);
      } else if (k == "--observe-starving-percent") {
        o.observe_starving_percent = std::stoi(v);
      } else if (k == "--watch-policy") {
        o.watch_policy = v;
      } else if (k == "--start-spread-ms") {
        o.start_spread_ms = std::stoll(v);
      } else if (k == "--tls-ca") {
        o.tls_ca = v;
      } else if (k == "--tls-cert") {
        o.tls_cert = v;
      } else if (k == "--tls-key") {
        o.tls_key = v;
      } else if (k == "--tls-server-name") {
        o.tls_server_name = v;
      } else if (k == "--tls-session-cache") {
        o.tls_session_cache = v == "1";
      } else if (k == "--token-dir") {
        o.token_dir = v;
      } else if (k == "--seed") {
        o.seed = std::stoull(v);
      } else {
        return Usage(argv[0]);
      }
    } catch (const std::exception&) {
      std::fprintf(stderr, "bad value for %s: %s\n", k.c_str(), v.c_str());
      return 2;
    }
  }
  if (o.target.empty() || o.agents <= 0 || o.report_interval_ms <= 0) return Usage(argv[0]);
  if (!o.tls_ca.empty() && (o.tls_cert.empty() || o.tls_key.empty())) return Usage(argv[0]);
  auto sim = std::make_unique<Sim>(o);
  sim->StartAll();
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line == "storm") {
      sim->Storm();
    } else if (line.rfind("nack ", 0) == 0) {
      sim->NackNext(std::atoi(line.c_str() + 5));
    } else if (line == "stats") {
      sim->Stats();
    } else if (line == "quit") {
      break;
    }
  }
  sim->Stats();
  sim->Shutdown();
  return 0;
}

}  // namespace
}  // namespace feedguard::bench

int main(int argc, char** argv) { return feedguard::bench::Main(argc, argv); }
