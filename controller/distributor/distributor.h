// distributor.h — the controller's gRPC server that streams one NodeFence per node to agents.
//
// docs/DESIGN.md §5. Agents dial in (FenceDistribution.Stream) and say hello first; the Distributor
// checks the hello's node name against the agent's client certificate (peer_identity.h) and,
// when an authenticator is set, against the agent's ServiceAccount token (controller/auth), then
// keeps one "latest desired NodeFence" slot per node (fence_slot.h): SetDesired() replaces an
// unsent fence, one update is in flight per stream, each send carries a fresh nonce, ACK marks
// it applied, NACK records the error, and a newer fence goes out once the in-flight one is
// answered. Reports, ACKs, NACKs and (dis)connections go to an AgentObserver. A second stream
// for a node replaces the first; a node with no stream for longer than `stale_after` is stale.
//
// Bounded (a controller that every agent dials must not be exhausted by one of them): received
// messages are capped at `max_receive_message_bytes`; a stream that has not said hello within
// `hello_timeout` is ended (DEADLINE_EXCEEDED); at most `max_streams` streams are open at once
// (more: RESOURCE_EXHAUSTED), at most `max_pending_hellos` of them before their hello — and of
// those at most `max_pending_hellos_per_connection` on one connection and
// `max_pending_hellos_per_address` from one peer address, so that one hostile connection or host
// cannot hold every place while real agents reconnect —, at most `max_streams_per_connection`
// streams per connection (HTTP/2's own limit), and optionally `new_streams_per_second`; grpc's
// own memory is capped by `memory_quota_bytes`; a
// hello's node name must be a DNS subdomain of at most 253
// characters (INVALID_ARGUMENT) and, through `admit_node`, have a Node object. A hello for a
// node without one is refused with FAILED_PRECONDITION, not PERMISSION_DENIED: it is a state
// that usually passes (an agent that starts before its kubelet registered the Node retries with
// backoff), whereas PERMISSION_DENIED means the caller's identity does not allow it. Per-node
// state goes when the Node is deleted (Forget) and, for a node whose agent stayed away longer
// than `forget_after`, the stored hello and report go (the whole entry when no fence is held).
//
// Tokens: a hello's token verdict is taken on the grpc thread only when the authenticator knows
// it without a round trip (Cached: a cached review); otherwise the hello waits, without holding
// any thread, for one of `review_workers` threads that run the TokenReview (bounded queue; full:
// UNAVAILABLE). Refused tokens are limited per peer address (refused_token_burst), so an
// impostor's retries do not turn into a TokenReview each. bench/flood/README.md has the numbers.
//
// Built on grpc's callback API: no thread per stream (grpc's own executor runs the reactions),
// so one process can hold thousands of agents. mTLS with the client certificate required and
// all three files (CA, cert, key) re-read on change by grpc's FileWatcherCertificateProvider;
// `insecure` is an explicit opt-out for local demos only.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/log_limiter.h"
#include "controller/auth/authenticator.h"
#include "controller/distributor/fence_slot.h"
#include "controller/fence/agent_observer.h"
#include "feedguard/common/status.h"
#include "feedguard/common/time_source.h"
#include "feedguard/common/wire_limits.h"
#include "feedguard/v1/nodefence.pb.h"

namespace grpc {
class Server;
class Status;
}  // namespace grpc

namespace feedguard::controller {

struct ServerTlsFiles {
  std::string ca_file;    // PEM bundle of the CA(s) that sign agent certificates
  std::string cert_file;  // PEM server certificate chain
  std::string key_file;   // PEM private key of cert_file
};

struct DistributorOptions {
  std::string listen_address = "127.0.0.1:0";  // port 0: grpc picks, see Distributor::port()
  // Explicit opt-out of TLS for local demos: no client authentication, the hello's node name
  // is trusted as sent. Never the default.
  bool insecure = false;
  // mTLS still required, but any client certificate signed by the CA may speak for the node
  // its hello names (for a chart-issued certificate shared by every agent). Default: the node
  // must be named by the certificate (CN "system:node:<name>" with O "system:nodes";
  // peer_identity.h).
  bool trust_hello_node_name = false;
  // Node-bound identity (controller/auth): every hello must come with call metadata
  // `authorization: Bearer <token>` that this judges for the hello's node; a refusal ends the
  // stream with PERMISSION_DENIED (UNAVAILABLE when the token cannot be judged now). Checked
  // once per stream, outside the Distributor's lock: on the grpc thread when Cached() knows the
  // verdict, else on a review worker (review_workers). Unset: none.
  AgentAuthenticatorPtr authenticator;
  ServerTlsFiles tls;
  // How often grpc re-reads the TLS files (grpc's minimum is 1 s). Replace the key and the
  // certificate atomically (write + rename), or a mismatched pair is skipped until the next read.
  std::chrono::seconds cert_refresh_interval{10};
  std::chrono::milliseconds keepalive_time{30'000};
  std::chrono::milliseconds keepalive_timeout{10'000};
  // Agents may ping this often (their keepalive_time must not be shorter).
  std::chrono::milliseconds min_client_ping_interval{10'000};
  std::chrono::milliseconds stale_after{60'000};
  // Largest message accepted from an agent (hello, report, NACK; wire_limits.h). A NodeReport
  // of a node with 250 pods is about 100 KiB; grpc's default (4 MiB) let each agent pin megabytes.
  int max_receive_message_bytes = static_cast<int>(kMaxAgentMessageBytes);
  // A stream that sends no hello within this is ended.
  std::chrono::milliseconds hello_timeout{10'000};
  // Open streams at once, including those still before their hello.
  size_t max_streams = 10'000;
  // Streams one connection may have open at once (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS; an
  // agent opens one per connection). A client that honours the setting (grpc does) queues the
  // rest on its side; one that ignores it meets max_pending_hellos_per_connection. 0: no limit
  // of grpc's own (max_streams still bounds the total).
  int max_streams_per_connection = 4;
  // Largest TLS frame grpc's frame protector uses per connection (GRPC_ARG_TSI_MAX_FRAME_SIZE;
  // each connection holds a buffer of this size less 100 bytes; grpc's default 16 KiB, its
  // lower bound 1 KiB). 4 KiB saved ~8 KB of RSS per agent against 16 KiB, 1 KiB ~4 KB more
  // (the frame's buffer, and fewer pages of OpenSSL's buffers touched), at no CPU cost that
  // the edit fan-out shows (docs/controller-limits.md); fences still go out whole, in more
  // frames. 0: grpc's default.
  int tls_max_frame_bytes = 1024;
  // Free OpenSSL's read and write record buffers (~16.7 KiB each) while a TLS connection has
  // nothing in them (SSL_MODE_RELEASE_BUFFERS, set through ReleaseIdleTlsBuffers() in
  // tls_buffers.h; grpc 1.51 has no option for it). Process-wide from the first TLS Start() on:
  // every SSL object the process makes afterwards gets the mode, and false cannot take it back.
  bool tls_release_idle_buffers = true;
  // Size of the buffer each connection reads into (GRPC_ARG_TCP_READ_CHUNK_SIZE, also the most
  // one read takes: a longer message takes more reads). The unused part of the last buffer stays
  // allocated while the connection idles, so this is most of what an idle agent's socket costs.
  // Honoured only by grpc's classic reader, which UseClassicGrpcReader() selects (grpc 1.51's
  // default reader allocates 8 KiB whatever this says). 1 KiB holds an ACK in one read: ~4 KB
  // less RSS per agent than 8 KiB, ~3 KB more once agents have sent reports if grpc may grow it
  // (docs/controller-limits.md). 0: grpc's defaults (8 KiB, growing).
  int tcp_read_chunk_bytes = 1024;
  // Cap on the memory grpc may use for its connections and calls (grpc::ResourceQuota); past it
  // grpc refuses new connections and shrinks buffers. It counts ~9 KB of a plaintext and ~60 KB
  // of an mTLS connection (not OpenSSL's own buffers): size it for every agent with room to
  // spare. 0: no quota (grpc's default).
  size_t memory_quota_bytes = 0;
  // A connection that has not finished its TLS and HTTP/2 setup within this is closed (grpc's
  // default: 120 s; each one holds ~80 KB of handshake state meanwhile).
  std::chrono::milliseconds handshake_timeout{20'000};
  // Connection setup (a reconnect storm of every agent must converge, a flood of streams that
  // never say hello must stay small): streams open but not yet past their hello (no hello yet,
  // or its token under review) at most this many at once; more: RESOURCE_EXHAUSTED before
  // anything is read, the agent retries with backoff. Each costs ~40 KiB (grpc's call and
  // connection state) until hello_timeout ends it. 0: no bound.
  size_t max_pending_hellos = 1024;
  // Of those, at most this many on one connection (grpc's peer: address and port; an agent has
  // one stream per connection, so 2 covers a reconnect that overlaps the old stream) and from
  // one peer address (IP; agents behind one source NAT share it, as the benchmarks' simulated
  // agents on loopback do): one host can hold at most half the places, so agents elsewhere
  // still get through. More: RESOURCE_EXHAUSTED before anything is read. 0: no such bound.
  size_t max_pending_hellos_per_connection = 2;
  size_t max_pending_hellos_per_address = 512;  // half of max_pending_hellos: the rest is others'
  // New streams accepted per second (token bucket, burst of one second's worth); more:
  // RESOURCE_EXHAUSTED before anything is read. 0: no limit.
  double new_streams_per_second = 0;
  // Token reviews (authenticator) run on this many threads of the Distributor's own, never on a
  // grpc thread; verdicts known without a round trip (cached) are taken on the spot. At most
  // `review_queue` hellos wait for a worker; more: UNAVAILABLE (the agent retries).
  size_t review_workers = 4;
  size_t review_queue = 1024;
  // Refused tokens (PERMISSION_DENIED) per peer address (IP, port ignored): a bucket of
  // `refused_token_burst` that refills at `refused_tokens_per_minute`; while it is empty, hellos
  // from that address are refused with RESOURCE_EXHAUSTED before their token is reviewed, so an
  // impostor cannot make the controller send the API server a TokenReview per attempt.
  // 0 burst: no limit. Agents behind one source NAT share a bucket.
  size_t refused_token_burst = 20;
  double refused_tokens_per_minute = 12;
  // An agent disconnected this long loses its stored hello and report (and its whole entry when
  // the node holds no fence).
  std::chrono::milliseconds forget_after{600'000};
  // How often streams without hello and long-gone agents are looked for.
  std::chrono::milliseconds sweep_interval{1'000};
  // Further integer grpc channel arguments for the server, set after the ones above (bench
  // experiments: bench/flood `--grpc-arg NAME=VALUE`).
  std::map<std::string, int> extra_grpc_args;
  // Whether an agent may speak for this node (e.g. a Node object of that name exists). Called
  // under the Distributor's lock: it must not call back into the Distributor. Unset: any node.
  std::function<bool(const std::string& node)> admit_node;
  TimeSourcePtr clock;        // default: RealTimeSource
  AgentObserverPtr observer;  // optional
};

// What the Distributor keeps of an agent's last report: its header, not its pods (the
// AgentObserver is handed the whole report; the reconciler keeps only what status reads).
struct ReportSummary {
  uint64_t applied_version = 0;
  bool dry_run = false;
  uint64_t overwrites_total = 0;
  size_t pods = 0;
};

// Counts for metrics and tests (a snapshot).
struct DistributorCounters {
  size_t hellos_pending = 0;  // open streams before their hello (or its token's verdict)
  // Streams refused before anything was read, by the bound that refused them.
  uint64_t refused_per_connection = 0;  // max_pending_hellos_per_connection
  uint64_t refused_per_address = 0;     // max_pending_hellos_per_address
  uint64_t refused_pending_total = 0;   // max_pending_hellos
  uint64_t refused_streams = 0;         // max_streams
  uint64_t refused_rate = 0;            // new_streams_per_second
  // Agent messages that did not parse (the stream was ended each time).
  uint64_t unreadable_messages = 0;
};

// A snapshot of what the controller knows about one node's agent.
struct AgentState {
  std::string node;
  bool connected = false;
  bool stale = false;  // not connected for longer than stale_after
  // The last accepted hello, shared with the Distributor (never copied per read).
  std::shared_ptr<const feedguard::v1::AgentHello> hello;
  std::string peer;  // address of the current or last stream
  uint64_t desired_version = 0;
  uint64_t acked_version = 0;
  uint64_t in_flight_version = 0;  // 0: nothing awaiting an answer
  std::optional<NackRecord> last_nack;
  std::optional<ReportSummary> last_report;
  std::chrono::steady_clock::time_point last_seen;  // last message, connect or disconnect
  uint64_t streams = 0;                             // streams accepted for this node so far
  uint64_t sends = 0;                               // updates written to this node so far
  // Messages of this node's agent that did not parse since its last readable report (each
  // ended its stream), and what the last one was. Non-zero: the node is reported failing.
  uint64_t unreadable_messages = 0;
  std::string unreadable_error;
};

// grpc 1.51 reads sockets through one of two code paths, chosen per process by the
// experiment `tcp_read_chunks` (environment variable GRPC_EXPERIMENTS, read once, on grpc's
// first use). Its default reader allocates 8 KiB per read and keeps the unused rest per
// connection; the classic one (the default before 1.50) sizes reads by the connection's
// GRPC_ARG_TCP_*READ_CHUNK_SIZE (DistributorOptions::tcp_read_chunk_bytes). Selects the classic
// reader unless GRPC_EXPERIMENTS is already set (an operator's setting wins). Call from main()
// before any thread starts and before grpc is first used; it changes the process environment.
void UseClassicGrpcReader();

class Distributor {
 public:
  // Builds the server and starts listening. Fails on unreadable TLS files or a bad address.
  static Result<std::unique_ptr<Distributor>> Start(DistributorOptions options);
  ~Distributor();  // Shutdown()
  Distributor(const Distributor&) = delete;
  Distributor& operator=(const Distributor&) = delete;

  int port() const { return port_; }

  // Replaces the desired fence of fence.node_name() and sends it if the node's stream is idle.
  // Versions must strictly increase per node.
  Status SetDesired(const feedguard::v1::NodeFence& fence);
  // The same, sharing the caller's immutable serialized fence (the reconciler's is the only one).
  Status SetDesired(NodeFencePtr fence);
  // Ends the node's current stream (the agent reconnects); NotFound if it has none.
  Status Disconnect(const std::string& node);
  // Drops everything known about the node (e.g. the Node object was deleted) and ends its stream.
  void Forget(const std::string& node);
  // Re-asks `admit_node` for every known node and forgets those it refuses (call when the set
  // of nodes becomes known, e.g. after the controller's initial lists).
  void RevalidateNodes();
  // One sweep now: ends streams past the hello deadline, sheds state of long-gone agents (also
  // run every sweep_interval by a thread of its own).
  void Sweep();
  // Node entries held (bounded: tests and metrics).
  size_t NodeCount() const;

  std::optional<AgentState> GetAgent(const std::string& node) const;
  std::vector<AgentState> ListAgents() const;
  size_t ConnectedCount() const;
  DistributorCounters Counters() const;

  // Ends every stream and stops the server; idempotent.
  void Shutdown();

 private:
  class AgentStream;
  class Service;
  struct Node {
    FenceSlot slot;
    AgentStream* stream = nullptr;  // current stream; it unregisters itself in OnDone
    std::shared_ptr<const feedguard::v1::AgentHello> hello;
    std::optional<ReportSummary> last_report;
    std::string peer;
    std::chrono::steady_clock::time_point last_seen;
    uint64_t streams = 0;
    uint64_t unreadable_messages = 0;  // since the last readable report
    std::string unreadable_error;
  };

  struct Bucket {  // token bucket: `tokens` as of `at`
    double tokens = 0;
    std::chrono::steady_clock::time_point at;
  };
  struct Review {  // a hello's token waiting for a review worker
    AgentStream* stream;
    uint64_t ticket;
    std::string token;
    std::string node;
  };

  explicit Distributor(DistributorOptions options);
  void ReviewLoop();
  // requires mu_. Whether a new stream from `connection` (grpc's peer string) at `address`
  // may wait for its hello: the refusal (counted, logged rate-limited) when a bound is full.
  std::optional<grpc::Status> AdmitNewStreamLocked(const std::string& connection,
                                                   const std::string& address,
                                                   std::chrono::steady_clock::time_point now);
  // requires mu_. Queues the stream's token for a worker; the refusal when it cannot.
  std::optional<grpc::Status> EnqueueReviewLocked(AgentStream* s, const std::string& token,
                                                  const std::string& node);
  static bool TakeToken(Bucket& b, double rate, double burst,
                        std::chrono::steady_clock::time_point now);
  void ChargeRefusedTokenLocked(const std::string& peer);                   // requires mu_
  bool RefusedTokensExhaustedLocked(const std::string& peer);               // requires mu_
  void SweepLocked();                                                       // requires mu_
  std::string NextNonceLocked();                                            // requires mu_
  AgentState SnapshotLocked(const std::string& name, const Node& n) const;  // requires mu_

  const DistributorOptions options_;
  const std::string nonce_prefix_;
  int port_ = 0;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;

  mutable std::mutex mu_;
  std::map<std::string, Node, std::less<>> nodes_;  // guarded by mu_
  uint64_t nonce_seq_ = 0;                          // guarded by mu_
  std::set<AgentStream*> live_;                     // guarded by mu_; every open stream
  bool shut_down_ = false;                          // guarded by mu_
  std::condition_variable streams_done_;            // signalled when live_ becomes empty
  std::condition_variable sweep_wake_;              // signalled on shutdown
  std::thread sweeper_;
  // Connection setup (all guarded by mu_).
  size_t pending_hellos_ = 0;  // open streams not yet accepted nor finished
  // The same per connection (grpc's peer string) and per peer address; entries at zero go.
  std::map<std::string, size_t, std::less<>> pending_by_connection_;
  std::map<std::string, size_t, std::less<>> pending_by_address_;
  DistributorCounters counters_;  // hellos_pending is pending_hellos_ (filled in by Counters())
  LogLimiter refusal_log_;        // refused streams and hellos: a warning each, rate-limited
  LogLimiter unreadable_log_;     // agent messages that did not parse
  Bucket new_streams_;            // of new_streams_per_second
  std::map<std::string, Bucket, std::less<>> refused_tokens_;  // per peer address
  // Token reviews (guarded by mu_): the queue, and each stream awaiting a verdict with the
  // ticket of its review (a verdict is delivered only to the stream and ticket it was for).
  std::deque<Review> reviews_;
  std::map<AgentStream*, uint64_t> awaiting_review_;
  uint64_t review_tickets_ = 0;
  std::condition_variable review_wake_;
  std::vector<std::thread> reviewers_;
};

}  // namespace feedguard::controller
