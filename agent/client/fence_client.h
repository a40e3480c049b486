// fence_client.h — the agent's end of the controller⇄agent stream (docs/DESIGN.md §5).
//
// FenceClient dials the controller, says hello (node name, version, topology, cgroup facts,
// capabilities, last applied version), hands each NodeFence it receives to a FenceApplier,
// ACKs on success or NACKs with the error, and sends reports: right after each apply, on
// change (PushReport) and every report_interval. When the stream breaks it reconnects with
// jittered exponential backoff (500 ms ×2 to 30 s by default) and does nothing else: the last
// fence stays applied (fail static; never revert because the controller is unreachable).
// mTLS with the agent's client certificate; the CA, certificate and key files are re-read on
// change by grpc's FileWatcherCertificateProvider, and every reconnect uses the current ones.
// `insecure` is an explicit opt-out for local demos. Thread-safe; the destructor stops it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>

#include <grpc/impl/codegen/connectivity_state.h>

#include "agent/client/fence_applier.h"
#include "common/backoff.h"
#include "common/log_limiter.h"
#include "feedguard/common/status.h"
#include "feedguard/common/time_source.h"
#include "feedguard/common/wire_limits.h"
#include "feedguard/v1/nodefence.pb.h"

namespace grpc {
class ChannelCredentials;
class Status;
}  // namespace grpc
namespace grpc::experimental {
class CertificateProviderInterface;
}

namespace feedguard::agent {

struct ClientTlsFiles {
  std::string ca_file;  // PEM CA bundle that signs the controller's certificate
  std::string
      cert_file;  // PEM client certificate (cert mode: CN system:node:<node>, O system:nodes)
  std::string key_file;  // PEM private key of cert_file
};

struct FenceClientOptions {
  std::string target;  // "host:port" of the controller Service
  // Explicit opt-out of TLS for local demos (the controller must be insecure too).
  bool insecure = false;
  ClientTlsFiles tls;
  std::string tls_server_name;  // optional: name to verify instead of the target's host
  std::chrono::seconds cert_refresh_interval{10};
  // Node-bound identity: the projected ServiceAccount token file (audience of the controller's
  // --agent-token-audience). Read again for every stream (the kubelet rotates it) and sent as
  // `authorization: Bearer <token>`; an unreadable or empty file fails the attempt (backoff).
  // "" = send no token.
  std::string token_file;
  // node_name is required; last_applied_version is filled in by the client on every connect.
  feedguard::v1::AgentHello hello;
  std::chrono::milliseconds report_interval{30'000};
  BackoffPolicy backoff;
  // A stream that lived this long (or delivered a fence) resets the backoff.
  std::chrono::milliseconds healthy_after{10'000};
  // A dial that never reached a controller (connection refused or not established: nothing
  // listens where the Service sent it) waits at most this long before the next, whatever the
  // backoff has grown to: behind one Service the next dial may reach another replica (a standby
  // that leads now), and a refused connection costs no controller anything. Refusals by a
  // controller (RESOURCE_EXHAUSTED, UNAVAILABLE, …) keep the full backoff, which dials that
  // reached nobody do not grow: a new leader refusing while it reviews every agent's token is
  // retried after the first step, not 10-30 s later (bench/results/scale-failover-2026-11-29.md).
  std::chrono::milliseconds unreached_backoff_cap{5'000};
  std::chrono::milliseconds keepalive_time{30'000};
  std::chrono::milliseconds keepalive_timeout{10'000};
  // Largest message read from the controller: at least its largest fence (wire_limits.h), or
  // every send of a bigger one is refused and the node keeps its old fence.
  size_t max_receive_message_bytes = kAgentMaxReceiveBytes;
  SleeperPtr sleeper;        // default: RealSleeper; Stop() ends the sleep between attempts
  TimeSourcePtr clock;       // default: RealTimeSource
  uint64_t jitter_seed = 0;  // 0: random
};

// Whether a dial reached a controller: the stream ended OK, or the dial's own channel (a local
// subchannel pool: one channel per dial) had a connection — READY, or IDLE/SHUTDOWN after the
// controller closed it. Still CONNECTING or in TRANSIENT_FAILURE: nothing answered (the
// FenceClientOptions::unreached_backoff_cap case).
bool DialReachedController(const grpc::Status& status, grpc_connectivity_state channel_state);

// How a stream to the controller ended, as far as the next dial's wait is concerned.
enum class StreamEnd {
  kHealthy,    // delivered a fence or lived healthy_after: resets the backoff
  kFailed,     // a controller answered, then the stream ended early (a refusal included)
  kUnreached,  // the channel never connected: at most unreached_backoff_cap until the next
};

// When to dial again after a stream ended: FenceClient's pacing, one owner for the agent and
// the scale simulator. Two backoffs: one paces streams a controller answered and grows with its
// refusals; the other paces dials that reached nobody (capped at unreached_cap), going on from
// where the first stood at the last dial that reached a controller. Dials that reached nobody
// never grow the first: after a failover (the old leader gone, the new one listening 15 s
// later), a refusal by the new leader while it reviews every agent's token is retried after an
// early step, not after the 10-30 s those dials would have grown it to. Behind one Service with
// a standby that does not listen, refusals still grow it whatever unreached dials come between.
class ReconnectPacer {
 public:
  ReconnectPacer(BackoffPolicy policy, uint64_t jitter_seed,
                 std::chrono::milliseconds unreached_cap);
  ReconnectPacer(const ReconnectPacer&) = delete;  // last_ points into this object
  ReconnectPacer& operator=(const ReconnectPacer&) = delete;
  // The wait before the next dial after a stream that ended so.
  std::chrono::milliseconds Next(StreamEnd end);
  // Failures counted by the backoff the last Next() used.
  int failures() const { return last_->failures(); }

 private:
  Backoff answered_;
  Backoff unreached_;
  std::chrono::milliseconds unreached_cap_;
  const Backoff* last_ = &answered_;
};

// Makes `report` fit in `max_bytes` serialized (the controller's receive limit, wire_limits.h:
// a bigger message ends the stream before the controller reads it, after the ACK that made the
// node look enforced). Steps, each only while still too big: every pod's message is cut to 512
// bytes (what status shows of it), then enforced pods lose their message, then observations are
// dropped from the end (the agent sends them worst first), then pods from the end, enforced ones
// before failed ones. Returns how many observations and pods were dropped.
size_t FitReportToLimit(feedguard::v1::NodeReport* report, size_t max_bytes);

class FenceClient {
 public:
  struct Stats {
    bool connected = false;        // a stream is open (hello sent)
    uint64_t applied_version = 0;  // last fence applied successfully (0: none)
    uint64_t attempts = 0;         // streams started
    uint64_t hellos = 0;           // streams on which the hello went out
    uint64_t applies = 0;          // Apply() calls
    uint64_t acks = 0;
    uint64_t nacks = 0;
    uint64_t reports = 0;    // reports written
    std::string last_error;  // status of the last stream that ended
  };

  // Validates the options, then connects in the background.
  static Result<std::unique_ptr<FenceClient>> Start(FenceClientOptions options,
                                                    FenceApplierPtr applier);
  ~FenceClient();  // Stop()
  FenceClient(const FenceClient&) = delete;
  FenceClient& operator=(const FenceClient&) = delete;

  // An on-change report (e.g. an overwrite was seen): sent as soon as a stream is open.
  void PushReport(feedguard::v1::NodeReport report);
  Stats stats() const;
  // Ends the stream and joins the threads; the applied fence is left in place. Idempotent.
  void Stop();

 private:
  struct StreamHandle;
  FenceClient(FenceClientOptions options, FenceApplierPtr applier,
              std::shared_ptr<grpc::ChannelCredentials> creds,
              std::shared_ptr<grpc::experimental::CertificateProviderInterface> provider);
  void RunLoop(std::stop_token stop);
  void ReportLoop();
  // One stream from dial to end.
  StreamEnd RunStream(uint64_t attempt);
  void HandleUpdate(StreamHandle& h, const feedguard::v1::FenceUpdate& update);
  bool SendReport(StreamHandle& h, const feedguard::v1::NodeReport& report);

  const FenceClientOptions options_;
  const FenceApplierPtr applier_;
  const std::shared_ptr<grpc::experimental::CertificateProviderInterface> provider_;
  const std::shared_ptr<grpc::ChannelCredentials> creds_;

  mutable std::mutex mu_;
  std::condition_variable report_cv_;
  bool stopping_ = false;                                 // guarded by mu_
  std::shared_ptr<StreamHandle> dialing_;                 // guarded by mu_; cancelled by Stop()
  std::shared_ptr<StreamHandle> stream_;                  // guarded by mu_; open (hello sent)
  std::optional<feedguard::v1::NodeReport> last_report_;  // guarded by mu_
  bool report_dirty_ = false;                             // guarded by mu_: send last_report_ now
  // Lines about messages changed before sending (strings escaped, a report cut to the limit).
  LogLimiter escape_log_;
  Stats stats_;  // guarded by mu_
  // Touched only by the run thread:
  std::optional<feedguard::v1::NodeFence> last_fence_;  // last fence applied successfully

  std::jthread run_thread_;  // RunLoop; Stop() requests its stop (ends a backoff sleep)
  std::thread report_thread_;
};

}  // namespace feedguard::agent
