#include "controller/distributor/distributor.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <random>
#include <utility>

#include <grpcpp/grpcpp.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <spdlog/spdlog.h>

#include "controller/distributor/fence_update.h"
#include "controller/distributor/peer_identity.h"
#include "controller/distributor/tls_buffers.h"
#include "controller/sanitize/sanitize.h"
#include "feedguard/v1/nodefence.grpc.pb.h"

namespace feedguard::controller {

void UseClassicGrpcReader() {
  // setenv with overwrite 0 keeps a value the operator set, even an empty one.
  ::setenv("GRPC_EXPERIMENTS", "-tcp_read_chunks", 0);
}
namespace {

using feedguard::v1::AgentMessage;
using Events = std::vector<std::function<void(AgentObserver&)>>;

// Agent-sent text kept for status and logs (NACK errors) is cut to this.
constexpr size_t kMaxAgentText = 1024;

std::string RandomHex(size_t bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::random_device rd;
  std::string out;
  for (size_t i = 0; i < bytes; ++i) {
    unsigned v = rd() & 0xffu;
    out.push_back(kHex[v >> 4]);
    out.push_back(kHex[v & 0xfu]);
  }
  return out;
}

Status CheckReadable(const std::string& what, const std::string& path) {
  if (path.empty()) return InvalidArgument("TLS " + what + " file not set (or pass insecure)");
  std::ifstream in(path);
  if (!in) return NotFound("cannot read TLS " + what + " file " + path);
  return OkStatus();
}

// The address of a grpc peer ("ipv4:10.0.0.1:4711", "ipv6:[fd00::1]:4711") without its port.
std::string PeerAddress(const std::string& peer) {
  const size_t colon = peer.rfind(':');
  const size_t scheme = peer.find(':');
  if (colon == std::string::npos || colon == scheme) return peer;
  return peer.substr(0, colon);
}

// Peer addresses whose refused-token bucket is remembered at most (full buckets go first).
constexpr size_t kMaxRefusedTokenPeers = 10'000;

}  // namespace

// One agent stream. Every field, and every StartRead/StartWrite/Finish call, is under the
// Distributor's mu_; grpc never runs these reactions inline in those calls (it dispatches them
// to its executor), so holding mu_ there cannot deadlock. The object deletes itself in OnDone.
//
// Raw messages (grpc::ByteBuffer) both ways, so that an agent's message that does not parse is
// this stream's to count, log and report (a typed reactor would cancel the stream without a
// word). Both directions are (de)serialized with grpc's own SerializationTraits, as the typed
// service would: the bytes on the wire are the same.
class Distributor::AgentStream final
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  AgentStream(Distributor* d, std::vector<std::string> identities, std::string peer,
              std::string token)
      : d_(d),
        identities_(std::move(identities)),
        peer_(std::move(peer)),
        address_(PeerAddress(peer_)),
        token_(std::move(token)),
        opened_(d->options_.clock->MonotonicNow()) {
    std::lock_guard lock(d_->mu_);
    d_->live_.insert(this);
    if (d_->shut_down_) {
      FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "controller shutting down"));
      return;
    }
    if (auto refusal = d_->AdmitNewStreamLocked(peer_, address_, opened_)) {
      FinishLocked(std::move(*refusal));
      return;
    }
    pending_ = true;
    ++d_->pending_hellos_;
    ++d_->pending_by_connection_[peer_];
    ++d_->pending_by_address_[address_];
    StartRead(&in_buf_);
  }

  // requires d_->mu_. Still without hello past the deadline: ended.
  void CheckHelloDeadlineLocked(std::chrono::steady_clock::time_point now) {
    if (finished_ || !node_.empty() || now - opened_ < d_->options_.hello_timeout) return;
    FinishLocked(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "no hello in time"));
  }

  void OnReadDone(bool ok) override {
    std::string auth_node;  // a hello whose token is to be judged
    {
      Events events;
      std::unique_lock lock(d_->mu_);
      if (!ok) {
        // The agent closed its side, was cancelled, or we already finished the call.
        FinishLocked(grpc::Status::OK);
        return;
      }
      // What grpc's typed handler would do; the size bound was applied before (grpc's
      // max receive message size).
      const size_t bytes = in_buf_.Length();
      if (!grpc::SerializationTraits<AgentMessage>::Deserialize(&in_buf_, &in_).ok()) {
        UnreadableLocked(bytes, events);
        lock.unlock();
        Notify(events);
        return;
      }
      if (d_->options_.authenticator && node_.empty() && in_.msg_case() == AgentMessage::kHello &&
          IsDnsSubdomain(in_.hello().node_name())) {
        auth_node = in_.hello().node_name();
      }
    }
    std::optional<Status> verdict;
    if (!auth_node.empty()) {
      // A verdict known without a round trip is taken here; anything else goes to a review
      // worker (a TokenReview must not hold a grpc thread), which calls Continue. in_ is not
      // touched meanwhile: the next read starts only after the hello is handled.
      verdict = d_->options_.authenticator->Cached(token_, auth_node);
      if (!verdict) {
        std::lock_guard lock(d_->mu_);
        if (finished_) return;
        if (auto refusal = d_->EnqueueReviewLocked(this, token_, auth_node)) {
          FinishLocked(std::move(*refusal));
        }
        return;
      }
    }
    Continue(verdict);
  }

  // Handles the message in in_ (with the token's verdict for a hello), then reads the next.
  void Continue(const std::optional<Status>& verdict) {
    Events events;
    {
      std::lock_guard lock(d_->mu_);
      if (finished_) return;  // ended meanwhile (shutdown, hello deadline, replaced)
      HandleLocked(events, verdict);
    }
    Notify(events);
    std::lock_guard lock(d_->mu_);
    if (!finished_) StartRead(&in_buf_);  // read the next only after notifying: keeps order
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard lock(d_->mu_);
    write_pending_ = false;
    out_.Clear();  // lets go of the fence, unless grpc still holds its slice
    if (!ok) {
      FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "write failed"));
      return;
    }
    if (Node* n = RegisteredNodeLocked()) MaybeSendLocked(*n);
  }

  void OnDone() override {
    Events events;
    {
      std::lock_guard lock(d_->mu_);
      if (Node* n = RegisteredNodeLocked()) {
        n->stream = nullptr;
        n->last_seen = d_->options_.clock->MonotonicNow();
        n->slot.ResetStream();  // nothing is in flight without a stream
        events.push_back([node = node_](AgentObserver& o) { o.OnDisconnected(node); });
      }
    }
    Notify(events);
    {
      std::lock_guard lock(d_->mu_);
      d_->awaiting_review_.erase(this);
      done_ = true;
      if (delivering_) return;  // the worker handing over a verdict deletes it (EndDelivery)
      UnlistLocked();
    }
    delete this;
  }

  // requires d_->mu_. A review worker is about to call Continue: OnDone must not delete.
  void BeginDeliveryLocked() { delivering_ = true; }
  // requires d_->mu_. The worker is done with the stream; true: the caller deletes it.
  bool EndDeliveryLocked() {
    delivering_ = false;
    if (!done_) return false;
    UnlistLocked();
    return true;
  }

  // requires d_->mu_
  void FinishLocked(grpc::Status status) {
    if (finished_) return;
    finished_ = true;
    EndPendingLocked();
    Finish(std::move(status));
  }

  const std::string& peer() const { return peer_; }

  // requires d_->mu_
  void MaybeSendLocked(Node& n) {
    if (finished_ || write_pending_ || !n.slot.HasDue()) return;
    std::optional<PendingUpdate> next = n.slot.TakeNext(d_->NextNonceLocked());
    if (!next) return;
    // The fence is held serialized (wire_fence.h); the update is built from it for this write.
    out_.Clear();
    if (Status st = SerializeFenceUpdate(*next->fence, next->nonce, &out_); !st.ok()) {
      spdlog::error("distributor: fence for {} not sent: {}", next->fence->node_name(),
                    st.ToString());
      return;
    }
    write_pending_ = true;
    StartWrite(&out_);
  }

 private:
  // requires d_->mu_. The node entry this stream is the current stream of, if any.
  Node* RegisteredNodeLocked() {
    if (node_.empty()) return nullptr;
    auto it = d_->nodes_.find(node_);
    if (it == d_->nodes_.end() || it->second.stream != this) return nullptr;
    return &it->second;
  }

  // requires d_->mu_. The agent sent bytes that are no AgentMessage (e.g. a proto3 string that
  // is not UTF-8, which C++ protobuf serializes but does not parse): counted, logged
  // (rate-limited), the node (once known) reported failing until a report of it parses again,
  // and the stream ended; the agent reconnects.
  void UnreadableLocked(size_t bytes, Events& events) {
    ++d_->counters_.unreadable_messages;
    const std::string error = "a message of " + std::to_string(bytes) +
                              " bytes did not parse as an AgentMessage (not protobuf, or a string "
                              "field that is not UTF-8)";
    Node* n = RegisteredNodeLocked();
    if (n != nullptr) {
      ++n->unreadable_messages;
      n->unreadable_error = error;
      events.push_back([node = node_, e = error](AgentObserver& o) { o.OnUnreadable(node, e); });
    }
    if (auto held = d_->unreadable_log_.Allow()) {
      const std::string who = n != nullptr ? "node " + node_ + " (" + peer_ + ", " +
                                                 std::to_string(n->unreadable_messages) +
                                                 " since its last readable report)"
                                           : "a stream before its hello (" + peer_ + ")";
      spdlog::warn("distributor: {}: {}; stream ended{}{}", who, error,
                   n != nullptr ? ", node reported failing" : "", LogLimiter::HeldBack(*held));
    }
    FinishLocked(grpc::Status(grpc::StatusCode::INTERNAL, "cannot parse the agent's message"));
  }

  // requires d_->mu_
  void HandleLocked(Events& events, const std::optional<Status>& verdict) {
    const auto now = d_->options_.clock->MonotonicNow();
    if (node_.empty()) {
      HandleHelloLocked(now, events, verdict);
      return;
    }
    Node* n = RegisteredNodeLocked();
    if (n == nullptr) {  // replaced or forgotten; its Finish is already under way
      FinishLocked(grpc::Status(grpc::StatusCode::ABORTED, "stream replaced"));
      return;
    }
    n->last_seen = now;
    switch (in_.msg_case()) {
      case AgentMessage::kAck: {
        const auto& ack = in_.ack();
        if (n->slot.OnAck(ack.version(), ack.nonce()) == AnswerResult::kAccepted) {
          events.push_back(
              [node = node_, v = ack.version()](AgentObserver& o) { o.OnAck(node, v); });
        } else {
          spdlog::debug("distributor: stale ACK from {} (version {})", node_, ack.version());
        }
        MaybeSendLocked(*n);
        break;
      }
      case AgentMessage::kNack: {
        const auto& nack = in_.nack();
        // The agent's text, made safe once here for the slot, logs, status and Events.
        std::string error = SafeText(nack.error(), kMaxAgentText);
        if (n->slot.OnNack(nack.version(), nack.nonce(), error, now) == AnswerResult::kAccepted) {
          spdlog::warn("distributor: node {} rejected fence version {}: {}", node_, nack.version(),
                       error);
          events.push_back([node = node_, v = nack.version(),
                            e = std::move(error)](AgentObserver& o) { o.OnNack(node, v, e); });
        }
        MaybeSendLocked(*n);
        break;
      }
      case AgentMessage::kReport: {
        auto report =
            std::make_shared<const feedguard::v1::NodeReport>(std::move(*in_.mutable_report()));
        n->last_report =
            ReportSummary{report->applied_version(), report->dry_run(), report->overwrites_total(),
                          static_cast<size_t>(report->pods_size())};
        if (n->unreadable_messages > 0) {  // the agent speaks readably again
          n->unreadable_messages = 0;
          n->unreadable_error.clear();
          events.push_back([node = node_](AgentObserver& o) { o.OnUnreadable(node, ""); });
        }
        events.push_back(
            [node = node_, r = std::move(report)](AgentObserver& o) { o.OnReport(node, *r); });
        break;
      }
      case AgentMessage::kHello:
        FinishLocked(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "second hello on stream"));
        break;
      case AgentMessage::MSG_NOT_SET:
        break;  // a newer agent's message kind we do not know: ignore
    }
  }

  // requires d_->mu_
  void HandleHelloLocked(std::chrono::steady_clock::time_point now, Events& events,
                         const std::optional<Status>& verdict) {
    if (in_.msg_case() != AgentMessage::kHello) {
      FinishLocked(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "first message must be hello"));
      return;
    }
    const std::string& name = in_.hello().node_name();
    if (name.empty()) {
      FinishLocked(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "hello without node_name"));
      return;
    }
    if (!IsDnsSubdomain(name)) {
      FinishLocked(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                "hello node_name is not a valid node name"));
      return;
    }
    if (!d_->options_.insecure && !d_->options_.trust_hello_node_name &&
        !MayActForNode(identities_, name)) {
      std::string names;
      for (const std::string& id : identities_) names += (names.empty() ? "" : ", ") + id;
      if (auto held = d_->refusal_log_.Allow()) {
        spdlog::warn("distributor: refused hello for node {} from {}: certificate names [{}]{}",
                     name, peer_, names, LogLimiter::HeldBack(*held));
      }
      FinishLocked(grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                                "client certificate does not name node " + name));
      return;
    }
    if (d_->options_.authenticator) {
      const Status v = verdict.value_or(Internal("token not checked"));
      if (!v.ok()) {
        if (auto held = d_->refusal_log_.Allow()) {
          spdlog::warn("distributor: refused hello for node {} from {}: {}{}", name, peer_,
                       v.ToString(), LogLimiter::HeldBack(*held));
        }
        const auto code = v.code() == StatusCode::kUnavailable
                              ? grpc::StatusCode::UNAVAILABLE
                              : grpc::StatusCode::PERMISSION_DENIED;
        if (code == grpc::StatusCode::PERMISSION_DENIED) d_->ChargeRefusedTokenLocked(peer_);
        FinishLocked(
            grpc::Status(code, "agent token refused for node " + name + ": " + v.message()));
        return;
      }
    }
    if (d_->options_.admit_node && !d_->options_.admit_node(name)) {
      spdlog::debug("distributor: refused hello for node {} from {}: no such Node", name, peer_);
      FinishLocked(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                "node " + name + " has no Node object"));
      return;
    }
    node_ = name;
    EndPendingLocked();
    Node& n = d_->nodes_[name];
    if (n.stream != nullptr && n.stream != this) {
      n.stream->FinishLocked(
          grpc::Status(grpc::StatusCode::ABORTED, "replaced by a newer stream for this node"));
    }
    n.stream = this;
    auto hello = std::make_shared<const feedguard::v1::AgentHello>(std::move(*in_.mutable_hello()));
    n.hello = hello;
    n.peer = peer_;
    n.last_seen = now;
    ++n.streams;
    n.slot.ResetStream();
    events.push_back(
        [node = node_, h = std::move(hello)](AgentObserver& o) { o.OnConnected(node, *h); });
    if (n.slot.NeedsRefill()) {
      events.push_back([node = node_, v = n.slot.desired_version()](AgentObserver& o) {
        o.OnFenceWanted(node, v);
      });
    }
    MaybeSendLocked(n);
  }

  void Notify(Events& events) {
    if (!d_->options_.observer) return;
    for (auto& e : events) e(*d_->options_.observer);
  }

  // requires d_->mu_. The stream no longer counts as a hello in progress.
  void EndPendingLocked() {
    if (!pending_) return;
    pending_ = false;
    --d_->pending_hellos_;
    auto release = [](std::map<std::string, size_t, std::less<>>& by, const std::string& key) {
      auto it = by.find(key);
      if (it != by.end() && --it->second == 0) by.erase(it);
    };
    release(d_->pending_by_connection_, peer_);
    release(d_->pending_by_address_, address_);
  }

  // requires d_->mu_
  void UnlistLocked() {
    d_->live_.erase(this);
    if (d_->live_.empty()) d_->streams_done_.notify_all();
  }

  Distributor* const d_;
  const std::vector<std::string> identities_;
  const std::string peer_;     // grpc's peer: "ipv4:10.0.0.1:4711", one per connection
  const std::string address_;  // the peer's address without its port
  const std::string token_;    // bearer token of the call ("" when none); judged at hello
  const std::chrono::steady_clock::time_point opened_;
  // All below guarded by d_->mu_.
  std::string node_;  // set once the hello is accepted
  bool finished_ = false;
  bool pending_ = false;     // counted in d_->pending_hellos_
  bool delivering_ = false;  // a review worker is calling Continue
  bool done_ = false;        // OnDone ran
  bool write_pending_ = false;
  grpc::ByteBuffer in_buf_;  // the message being read
  AgentMessage in_;          // and parsed
  grpc::ByteBuffer out_;     // the update being written
};

class Distributor::Service final
    : public feedguard::v1::FenceDistribution::WithRawCallbackMethod_Stream<
          feedguard::v1::FenceDistribution::Service> {
 public:
  explicit Service(Distributor* d) : d_(d) {}
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Stream(
      grpc::CallbackServerContext* ctx) override {
    std::vector<std::string> identities;
    if (auto auth = ctx->auth_context()) identities = NodeNamesFromAuthContext(*auth);
    std::string token;
    if (d_->options_.authenticator) {
      const auto& md = ctx->client_metadata();
      if (auto it = md.find("authorization"); it != md.end()) {
        token = BearerToken(std::string_view(it->second.data(), it->second.size()));
      }
    }
    return new AgentStream(d_, std::move(identities), ctx->peer(), std::move(token));
  }

 private:
  Distributor* const d_;
};

Distributor::Distributor(DistributorOptions options)
    : options_(std::move(options)), nonce_prefix_(RandomHex(8)) {}

Result<std::unique_ptr<Distributor>> Distributor::Start(DistributorOptions options) {
  if (!options.clock) options.clock = std::make_shared<RealTimeSource>();
  if (!options.insecure) {
    FG_RETURN_IF_ERROR(CheckReadable("CA", options.tls.ca_file));
    FG_RETURN_IF_ERROR(CheckReadable("certificate", options.tls.cert_file));
    FG_RETURN_IF_ERROR(CheckReadable("key", options.tls.key_file));
  }
  // Built before anything below starts grpc's threads, so they see it fully constructed.
  std::unique_ptr<Distributor> d(new Distributor(std::move(options)));
  const DistributorOptions& o = d->options_;
  std::shared_ptr<grpc::ServerCredentials> creds;
  if (o.insecure) {
    spdlog::warn("distributor: INSECURE mode — no TLS, agents' node names are not verified");
    creds = grpc::InsecureServerCredentials();
  } else {
    auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
        o.tls.key_file, o.tls.cert_file, o.tls.ca_file,
        static_cast<unsigned>(std::max<int64_t>(1, o.cert_refresh_interval.count())));
    grpc::experimental::TlsServerCredentialsOptions tls(provider);
    tls.watch_root_certs();
    tls.watch_identity_key_cert_pairs();
    tls.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    creds = grpc::experimental::TlsServerCredentials(tls);
    if (o.tls_release_idle_buffers && !ReleaseIdleTlsBuffers()) {
      spdlog::warn(
          "distributor: OpenSSL refused the callback that frees idle TLS buffers; each "
          "agent connection keeps ~33 KiB of record buffers");
    }
  }

  d->service_ = std::make_unique<Service>(d.get());
  grpc::ServerBuilder builder;
  builder.AddListeningPort(o.listen_address, creds, &d->port_);
  builder.SetMaxReceiveMessageSize(o.max_receive_message_bytes);
  if (o.max_streams_per_connection > 0) {
    builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, o.max_streams_per_connection);
  }
  builder.RegisterService(d->service_.get());
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS,
                             static_cast<int>(o.keepalive_time.count()));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                             static_cast<int>(o.keepalive_timeout.count()));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             static_cast<int>(o.min_client_ping_interval.count()));
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // grpc keeps channelz records (socket node, counters) per connection by default; nothing
  // here serves the channelz service, so nobody could read them: ~0.45 KB per agent.
  builder.AddChannelArgument(GRPC_ARG_ENABLE_CHANNELZ, 0);
  if (o.handshake_timeout.count() > 0) {
    builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                               static_cast<int>(o.handshake_timeout.count()));
  }
  if (o.tls_max_frame_bytes > 0) {
    builder.AddChannelArgument(GRPC_ARG_TSI_MAX_FRAME_SIZE, o.tls_max_frame_bytes);
  }
  if (o.tcp_read_chunk_bytes > 0) {
    // Each read is at most this size and at least a quarter of it (256 bytes at least). It does
    // not grow: a busy connection reads in more calls instead, since the unused rest of the
    // last read stays allocated per connection (grown to 4-8 KiB by an agent's reports, that
    // rest was ~3 KB per agent after the first policy edits: docs/controller-limits.md).
    const int chunk = std::min(o.tcp_read_chunk_bytes, 8192);
    builder.AddChannelArgument(GRPC_ARG_TCP_READ_CHUNK_SIZE, chunk);
    builder.AddChannelArgument(GRPC_ARG_TCP_MIN_READ_CHUNK_SIZE, std::max(256, chunk / 4));
    builder.AddChannelArgument(GRPC_ARG_TCP_MAX_READ_CHUNK_SIZE, chunk);
  }
  if (o.memory_quota_bytes > 0) {
    grpc::ResourceQuota quota("feedguard-distributor");
    quota.Resize(o.memory_quota_bytes);
    builder.SetResourceQuota(quota);
  }
  for (const auto& [name, value] : o.extra_grpc_args) builder.AddChannelArgument(name, value);
  d->server_ = builder.BuildAndStart();
  if (!d->server_ || d->port_ == 0) {
    return Unavailable("cannot listen on " + o.listen_address);
  }
  spdlog::info("distributor: listening on {} (port {}, {})", o.listen_address, d->port_,
               o.insecure ? "insecure" : "mTLS");
  Distributor* raw = d.get();
  if (o.authenticator) {
    for (size_t i = 0; i < std::max<size_t>(1, o.review_workers); ++i) {
      d->reviewers_.emplace_back([raw] { raw->ReviewLoop(); });
    }
  }
  d->sweeper_ = std::thread([raw] {
    std::unique_lock lock(raw->mu_);
    while (!raw->shut_down_) {
      raw->sweep_wake_.wait_for(lock, raw->options_.sweep_interval);
      if (!raw->shut_down_) raw->SweepLocked();
    }
  });
  return d;
}

Distributor::~Distributor() { Shutdown(); }

void Distributor::Shutdown() {
  {
    std::lock_guard lock(mu_);
    if (shut_down_) return;
    shut_down_ = true;
    // Every stream, including those that have not said hello yet.
    for (AgentStream* s : live_) {
      s->FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "controller shutting down"));
    }
  }
  sweep_wake_.notify_all();
  review_wake_.notify_all();
  if (sweeper_.joinable()) sweeper_.join();
  // A worker in the middle of a review finishes it (one API round trip at most); its stream is
  // finished already, so the verdict is dropped.
  for (std::thread& t : reviewers_) t.join();
  if (server_) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    server_->Wait();
  }
  // grpc has released every call by now; this only guards against a reaction still returning.
  std::unique_lock lock(mu_);
  streams_done_.wait_for(lock, std::chrono::seconds(5), [this] { return live_.empty(); });
}

// Token bucket: refills at `rate` per second up to `burst`; takes one token when there is one.
bool Distributor::TakeToken(Bucket& b, double rate, double burst,
                            std::chrono::steady_clock::time_point now) {
  if (b.at == std::chrono::steady_clock::time_point{}) {
    b.tokens = burst;
  } else if (now > b.at) {
    b.tokens = std::min(burst, b.tokens + rate * std::chrono::duration<double>(now - b.at).count());
  }
  b.at = now;
  if (b.tokens < 1.0) return false;
  b.tokens -= 1.0;
  return true;
}

std::optional<grpc::Status> Distributor::AdmitNewStreamLocked(
    const std::string& connection, const std::string& address,
    std::chrono::steady_clock::time_point now) {
  const DistributorOptions& o = options_;
  auto refuse = [&](uint64_t& counter, const char* what) {
    ++counter;
    if (auto held = refusal_log_.Allow()) {
      spdlog::warn("distributor: refused a new stream from {}: {}{}", connection, what,
                   LogLimiter::HeldBack(*held));
    }
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        std::string(what) + "; retry with backoff");
  };
  if (live_.size() > o.max_streams) {
    return refuse(counters_.refused_streams, "too many agent streams");
  }
  if (o.new_streams_per_second > 0 && !TakeToken(new_streams_, o.new_streams_per_second,
                                                 std::max(1.0, o.new_streams_per_second), now)) {
    return refuse(counters_.refused_rate, "too many new agent streams");
  }
  // One connection, then one address, then everyone: the narrowest bound that is full names
  // the refusal, and a connection or host at its share cannot take the places left to others.
  auto at = [](const auto& by, const std::string& key, size_t bound) {
    if (bound == 0) return false;
    auto it = by.find(key);
    return it != by.end() && it->second >= bound;
  };
  if (at(pending_by_connection_, connection, o.max_pending_hellos_per_connection)) {
    return refuse(counters_.refused_per_connection,
                  "too many agent hellos in progress on this connection");
  }
  if (at(pending_by_address_, address, o.max_pending_hellos_per_address)) {
    return refuse(counters_.refused_per_address,
                  "too many agent hellos in progress from this address");
  }
  if (o.max_pending_hellos > 0 && pending_hellos_ >= o.max_pending_hellos) {
    return refuse(counters_.refused_pending_total, "too many agent hellos in progress");
  }
  return std::nullopt;
}

DistributorCounters Distributor::Counters() const {
  std::lock_guard lock(mu_);
  DistributorCounters c = counters_;
  c.hellos_pending = pending_hellos_;
  return c;
}

std::optional<grpc::Status> Distributor::EnqueueReviewLocked(AgentStream* s,
                                                             const std::string& token,
                                                             const std::string& node) {
  if (shut_down_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "controller shutting down");
  if (RefusedTokensExhaustedLocked(s->peer())) {
    if (auto held = refusal_log_.Allow()) {
      spdlog::warn(
          "distributor: hello for node {} from {} refused unreviewed: too many refused tokens "
          "from that address{}",
          node, s->peer(), LogLimiter::HeldBack(*held));
    }
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        "too many refused agent tokens from this address; retry later");
  }
  if (reviews_.size() >= options_.review_queue) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        "too many agent tokens awaiting review; retry with backoff");
  }
  const uint64_t ticket = ++review_tickets_;
  awaiting_review_[s] = ticket;
  reviews_.push_back(Review{s, ticket, token, node});
  review_wake_.notify_one();
  return std::nullopt;
}

// A review worker: judges queued tokens outside the lock and hands each verdict to its stream,
// which may have ended meanwhile (then the verdict is dropped) or end while it is being handed
// over (then OnDone leaves the delete to this worker).
void Distributor::ReviewLoop() {
  std::unique_lock lock(mu_);
  for (;;) {
    review_wake_.wait(lock, [this] { return shut_down_ || !reviews_.empty(); });
    if (shut_down_) return;
    Review r = std::move(reviews_.front());
    reviews_.pop_front();
    lock.unlock();
    const Status verdict = options_.authenticator->Authenticate(r.token, r.node);
    lock.lock();
    auto it = awaiting_review_.find(r.stream);
    if (it == awaiting_review_.end() || it->second != r.ticket) continue;  // stream gone
    awaiting_review_.erase(it);
    r.stream->BeginDeliveryLocked();
    lock.unlock();
    r.stream->Continue(verdict);
    lock.lock();
    if (r.stream->EndDeliveryLocked()) {
      lock.unlock();
      delete r.stream;
      lock.lock();
    }
  }
}

bool Distributor::RefusedTokensExhaustedLocked(const std::string& peer) {
  if (options_.refused_token_burst == 0) return false;
  auto it = refused_tokens_.find(PeerAddress(peer));
  if (it == refused_tokens_.end()) return false;
  Bucket probe = it->second;  // look, do not take
  return !TakeToken(probe, options_.refused_tokens_per_minute / 60.0,
                    static_cast<double>(options_.refused_token_burst),
                    options_.clock->MonotonicNow());
}

void Distributor::ChargeRefusedTokenLocked(const std::string& peer) {
  if (options_.refused_token_burst == 0) return;
  const auto now = options_.clock->MonotonicNow();
  const double rate = options_.refused_tokens_per_minute / 60.0;
  const double burst = static_cast<double>(options_.refused_token_burst);
  if (refused_tokens_.size() >= kMaxRefusedTokenPeers) {
    std::erase_if(refused_tokens_, [&](const auto& kv) {  // buckets full again: forgotten
      Bucket probe = kv.second;
      return TakeToken(probe, rate, burst, now) && probe.tokens + 1.0 >= burst;
    });
    if (refused_tokens_.size() >= kMaxRefusedTokenPeers) {
      refused_tokens_.erase(refused_tokens_.begin());
    }
  }
  TakeToken(refused_tokens_[PeerAddress(peer)], rate, burst, now);
}

std::string Distributor::NextNonceLocked() {
  return nonce_prefix_ + "-" + std::to_string(++nonce_seq_);
}

Status Distributor::SetDesired(const feedguard::v1::NodeFence& fence) {
  return SetDesired(WireFence::From(fence));
}

Status Distributor::SetDesired(NodeFencePtr ptr) {
  if (ptr == nullptr || ptr->node_name().empty()) {
    return InvalidArgument("NodeFence without node_name");
  }
  std::lock_guard lock(mu_);
  auto [it, inserted] = nodes_.try_emplace(ptr->node_name());
  Node& n = it->second;
  if (inserted) n.last_seen = options_.clock->MonotonicNow();
  FG_RETURN_IF_ERROR(n.slot.SetDesired(std::move(ptr)));
  if (n.stream) n.stream->MaybeSendLocked(n);
  return OkStatus();
}

Status Distributor::Disconnect(const std::string& node) {
  std::lock_guard lock(mu_);
  auto it = nodes_.find(node);
  if (it == nodes_.end() || it->second.stream == nullptr) {
    return NotFound("node " + node + " has no stream");
  }
  it->second.stream->FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "disconnected"));
  return OkStatus();
}

void Distributor::Forget(const std::string& node) {
  std::lock_guard lock(mu_);
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return;
  if (it->second.stream) {
    it->second.stream->FinishLocked(grpc::Status(grpc::StatusCode::NOT_FOUND, "node forgotten"));
  }
  nodes_.erase(it);
}

void Distributor::RevalidateNodes() {
  std::lock_guard lock(mu_);
  if (!options_.admit_node) return;
  size_t dropped = 0;
  for (auto it = nodes_.begin(); it != nodes_.end();) {
    if (options_.admit_node(it->first)) {
      ++it;
      continue;
    }
    if (it->second.stream) {
      it->second.stream->FinishLocked(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                                   "node " + it->first + " has no Node object"));
    }
    it = nodes_.erase(it);
    ++dropped;
  }
  if (dropped > 0) spdlog::info("distributor: forgot {} agents of nodes without a Node", dropped);
}

void Distributor::Sweep() {
  std::lock_guard lock(mu_);
  SweepLocked();
}

void Distributor::SweepLocked() {
  const auto now = options_.clock->MonotonicNow();
  for (AgentStream* s : live_) s->CheckHelloDeadlineLocked(now);
  for (auto it = nodes_.begin(); it != nodes_.end();) {
    Node& n = it->second;
    if (n.stream != nullptr || now - n.last_seen <= options_.forget_after) {
      ++it;
      continue;
    }
    if (n.slot.desired_version() == 0) {
      it = nodes_.erase(it);  // nothing the controller wants there: nothing worth keeping
      continue;
    }
    // The fence stays (the agent gets it when it comes back); what the agent sent goes.
    n.hello.reset();
    n.last_report.reset();
    ++it;
  }
}

size_t Distributor::NodeCount() const {
  std::lock_guard lock(mu_);
  return nodes_.size();
}

AgentState Distributor::SnapshotLocked(const std::string& name, const Node& n) const {
  AgentState s;
  s.node = name;
  s.connected = n.stream != nullptr;
  s.stale = !s.connected && options_.clock->MonotonicNow() - n.last_seen > options_.stale_after;
  s.hello = n.hello;
  s.peer = n.peer;
  s.desired_version = n.slot.desired_version();
  s.acked_version = n.slot.acked_version();
  s.in_flight_version = n.slot.in_flight() ? n.slot.in_flight()->version : 0;
  s.last_nack = n.slot.last_nack();
  s.last_report = n.last_report;
  s.last_seen = n.last_seen;
  s.streams = n.streams;
  s.sends = n.slot.sends();
  s.unreadable_messages = n.unreadable_messages;
  s.unreadable_error = n.unreadable_error;
  return s;
}

std::optional<AgentState> Distributor::GetAgent(const std::string& node) const {
  std::lock_guard lock(mu_);
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return std::nullopt;
  return SnapshotLocked(it->first, it->second);
}

std::vector<AgentState> Distributor::ListAgents() const {
  std::lock_guard lock(mu_);
  std::vector<AgentState> out;
  out.reserve(nodes_.size());
  for (const auto& [name, n] : nodes_) out.push_back(SnapshotLocked(name, n));
  return out;
}

size_t Distributor::ConnectedCount() const {
  std::lock_guard lock(mu_);
  size_t c = 0;
  for (const auto& [name, n] : nodes_) c += n.stream != nullptr ? 1 : 0;
  return c;
}

}  // namespace feedguard::controller
