#include "agent/client/fence_client.h"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <utility>

#include <google/protobuf/util/message_differencer.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_certificate_verifier.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <spdlog/spdlog.h>

#include "agent/client/utf8_fields.h"
#include "common/log_limiter.h"
#include "feedguard/v1/nodefence.grpc.pb.h"

namespace feedguard::agent {
namespace {

using feedguard::v1::AgentMessage;
using feedguard::v1::ControllerMessage;

Status CheckReadable(const std::string& what, const std::string& path) {
  if (path.empty()) return InvalidArgument("TLS " + what + " file not set (or pass insecure)");
  std::ifstream in(path);
  if (!in) return NotFound("cannot read TLS " + what + " file " + path);
  return OkStatus();
}

// The token file's content without surrounding blanks; an error when unreadable, empty or not
// one printable line (a token is sent as a header value).
Result<std::string> ReadToken(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot read the ServiceAccount token file " + path);
  std::string token((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (token.size() > 64 * 1024) return InvalidArgument("token file " + path + " is too large");
  const auto blank = [](char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; };
  while (!token.empty() && blank(token.back())) token.pop_back();
  size_t start = 0;
  while (start < token.size() && blank(token[start])) ++start;
  token.erase(0, start);
  if (token.empty()) return FailedPrecondition("token file " + path + " is empty");
  for (char c : token) {
    if (c < 0x21 || c > 0x7e) return InvalidArgument("token file " + path + " is not one token");
  }
  return token;
}

}  // namespace

// One stream. `rw` is written by one thread at a time (write_mu); reads happen only on the run
// thread, concurrently with writes, which grpc's sync streams allow.
struct FenceClient::StreamHandle {
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReaderWriter<AgentMessage, ControllerMessage>> rw;
  std::mutex write_mu;
  bool closed = false;               // guarded by write_mu; no Write after Finish
  LogLimiter* escape_log = nullptr;  // the client's: lines about escaped strings
  uint64_t last_version = 0;         // run thread only: the newest fence version on this stream

  // Every message leaves the agent here: a string that is not UTF-8 (a cgroup path a tenant
  // named) is escaped first, or the controller could parse none of the message (utf8_fields.h).
  bool Write(const AgentMessage& m) {
    if (!StringFieldsAreUtf8(m)) {
      AgentMessage fixed = m;
      const size_t n = EscapeInvalidUtf8Fields(&fixed);
      const auto* kind = fixed.GetReflection()->GetOneofFieldDescriptor(
          fixed, fixed.GetDescriptor()->FindOneofByName("msg"));
      if (auto held = escape_log->Allow()) {
        spdlog::warn("fence client: escaped {} string(s) that were not UTF-8 in a {} message{}", n,
                     kind != nullptr ? kind->name() : "empty", LogLimiter::HeldBack(*held));
      }
      std::lock_guard lock(write_mu);
      return !closed && rw->Write(fixed);
    }
    std::lock_guard lock(write_mu);
    return !closed && rw->Write(m);
  }
  void Close() {
    std::lock_guard lock(write_mu);
    closed = true;
  }
};

Result<std::unique_ptr<FenceClient>> FenceClient::Start(FenceClientOptions options,
                                                        FenceApplierPtr applier) {
  if (options.target.empty()) return InvalidArgument("FenceClient: no controller target");
  if (options.hello.node_name().empty()) return InvalidArgument("FenceClient: hello has no node");
  if (!applier) return InvalidArgument("FenceClient: no applier");
  if (!options.sleeper) options.sleeper = std::make_shared<RealSleeper>();
  if (!options.clock) options.clock = std::make_shared<RealTimeSource>();
  if (options.jitter_seed == 0) options.jitter_seed = std::random_device{}() | 1u;

  std::shared_ptr<grpc::ChannelCredentials> creds;
  std::shared_ptr<grpc::experimental::CertificateProviderInterface> provider;
  if (options.insecure) {
    spdlog::warn("fence client: INSECURE mode — no TLS to the controller");
    creds = grpc::InsecureChannelCredentials();
  } else {
    FG_RETURN_IF_ERROR(CheckReadable("CA", options.tls.ca_file));
    FG_RETURN_IF_ERROR(CheckReadable("certificate", options.tls.cert_file));
    FG_RETURN_IF_ERROR(CheckReadable("key", options.tls.key_file));
    provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
        options.tls.key_file, options.tls.cert_file, options.tls.ca_file,
        static_cast<unsigned>(std::max<int64_t>(1, options.cert_refresh_interval.count())));
    grpc::experimental::TlsChannelCredentialsOptions tls;
    tls.set_certificate_provider(provider);
    tls.watch_root_certs();
    tls.watch_identity_key_cert_pairs();
    tls.set_verify_server_certs(true);
    tls.set_certificate_verifier(
        std::make_shared<grpc::experimental::HostNameCertificateVerifier>());
    creds = grpc::experimental::TlsCredentials(tls);
    if (!creds) return Internal("FenceClient: cannot build TLS credentials");
  }
  std::unique_ptr<FenceClient> c(
      new FenceClient(std::move(options), std::move(applier), std::move(creds), provider));
  c->run_thread_ = std::jthread([p = c.get()](std::stop_token stop) { p->RunLoop(stop); });
  c->report_thread_ = std::thread([p = c.get()] { p->ReportLoop(); });
  return c;
}

FenceClient::FenceClient(FenceClientOptions options, FenceApplierPtr applier,
                         std::shared_ptr<grpc::ChannelCredentials> creds,
                         std::shared_ptr<grpc::experimental::CertificateProviderInterface> provider)
    : options_(std::move(options)),
      applier_(std::move(applier)),
      provider_(std::move(provider)),
      creds_(std::move(creds)) {
  stats_.applied_version = options_.hello.last_applied_version();
}

FenceClient::~FenceClient() { Stop(); }

void FenceClient::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    if (dialing_) dialing_->ctx.TryCancel();
  }
  run_thread_.request_stop();
  report_cv_.notify_all();
  if (run_thread_.joinable()) run_thread_.join();
  if (report_thread_.joinable()) report_thread_.join();
}

void FenceClient::PushReport(feedguard::v1::NodeReport report) {
  {
    std::lock_guard lock(mu_);
    last_report_ = std::move(report);
    report_dirty_ = true;
  }
  report_cv_.notify_all();
}

FenceClient::Stats FenceClient::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

bool DialReachedController(const grpc::Status& status, grpc_connectivity_state channel_state) {
  return status.ok() || channel_state == GRPC_CHANNEL_READY || channel_state == GRPC_CHANNEL_IDLE ||
         channel_state == GRPC_CHANNEL_SHUTDOWN;
}

ReconnectPacer::ReconnectPacer(BackoffPolicy policy, uint64_t jitter_seed,
                               std::chrono::milliseconds unreached_cap)
    : answered_(policy, jitter_seed), unreached_(answered_), unreached_cap_(unreached_cap) {}

std::chrono::milliseconds ReconnectPacer::Next(StreamEnd end) {
  if (end == StreamEnd::kUnreached) {
    last_ = &unreached_;
    return std::min(unreached_.Next(), unreached_cap_);
  }
  if (end == StreamEnd::kHealthy) answered_.Reset();
  last_ = &answered_;
  const auto delay = answered_.Next();
  unreached_ = answered_;  // dials that reach nobody next go on from here
  return delay;
}

void FenceClient::RunLoop(std::stop_token stop) {
  ReconnectPacer pacer(options_.backoff, options_.jitter_seed, options_.unreached_backoff_cap);
  for (uint64_t attempt = 1;; ++attempt) {
    const StreamEnd end = RunStream(attempt);
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
    }
    const auto delay = pacer.Next(end);
    spdlog::info("fence client: reconnecting to {} in {} ms (failure {})", options_.target,
                 delay.count(), pacer.failures());
    if (!options_.sleeper->Sleep(delay, stop)) return;  // Stop() was called
  }
}

StreamEnd FenceClient::RunStream(uint64_t attempt) {
  auto h = std::make_shared<StreamHandle>();
  h->escape_log = &escape_log_;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return StreamEnd::kFailed;
    dialing_ = h;
    ++stats_.attempts;
  }
  const auto started = options_.clock->MonotonicNow();

  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, static_cast<int>(options_.keepalive_time.count()));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, static_cast<int>(options_.keepalive_timeout.count()));
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // Our own backoff decides when to redial: no subchannel (and its backoff) shared across dials.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetMaxReceiveMessageSize(static_cast<int>(
      std::min<size_t>(options_.max_receive_message_bytes, std::numeric_limits<int>::max())));
  if (!options_.tls_server_name.empty()) args.SetSslTargetNameOverride(options_.tls_server_name);
  auto channel = grpc::CreateCustomChannel(options_.target, creds_, args);
  auto stub = feedguard::v1::FenceDistribution::NewStub(channel);

  if (!options_.token_file.empty()) {
    Result<std::string> token = ReadToken(options_.token_file);
    if (!token.ok()) {
      std::lock_guard lock(mu_);
      dialing_.reset();
      stats_.last_error = token.status().ToString();
      spdlog::warn("fence client: stream {}: {}", attempt, stats_.last_error);
      return StreamEnd::kFailed;
    }
    h->ctx.AddMetadata("authorization", "Bearer " + *token);
  }
  h->rw = stub->Stream(&h->ctx);
  AgentMessage hello;
  *hello.mutable_hello() = options_.hello;
  {
    std::lock_guard lock(mu_);
    hello.mutable_hello()->set_last_applied_version(stats_.applied_version);
  }
  bool got_update = false;
  if (h->Write(hello)) {
    {
      std::lock_guard lock(mu_);
      ++stats_.hellos;
      stats_.connected = true;
      stream_ = h;
      if (last_report_) report_dirty_ = true;  // the controller gets our state right away
    }
    report_cv_.notify_all();
    ControllerMessage in;
    while (h->rw->Read(&in)) {
      if (in.has_update()) {
        got_update = true;
        HandleUpdate(*h, in.update());
      }
    }
  }
  h->Close();
  {
    std::lock_guard lock(mu_);
    stream_.reset();
    stats_.connected = false;
  }
  const grpc::Status status = h->rw->Finish();
  const bool healthy =
      got_update || options_.clock->MonotonicNow() - started >= options_.healthy_after;
  const bool reached = DialReachedController(status, channel->GetState(false));
  std::lock_guard lock(mu_);
  dialing_.reset();
  stats_.last_error = status.ok()
                          ? "stream closed by controller"
                          : std::to_string(status.error_code()) + ": " + status.error_message();
  if (!stopping_) {
    spdlog::warn("fence client: stream {} to {} ended: {} (keeping the applied fence)", attempt,
                 options_.target, stats_.last_error);
  }
  if (healthy) return StreamEnd::kHealthy;
  return reached ? StreamEnd::kFailed : StreamEnd::kUnreached;
}

void FenceClient::HandleUpdate(StreamHandle& h, const feedguard::v1::FenceUpdate& update) {
  const feedguard::v1::NodeFence& fence = update.fence();
  AgentMessage answer;
  // The fence's own metadata is checked, not trusted (issue 28, item 7): it must be this node's,
  // and on one stream its versions only grow (a controller numbers each node's fences upward;
  // a new stream may be another controller, which numbers afresh). Refused: NACKed, not applied.
  std::string refusal;
  if (fence.node_name() != options_.hello.node_name()) {
    refusal = "fence for node \"" + fence.node_name() + "\" sent to the agent of node " +
              options_.hello.node_name();
  } else if (h.last_version > 0 && fence.version() < h.last_version) {
    refusal = "fence version " + std::to_string(fence.version()) + " is older than version " +
              std::to_string(h.last_version) + " received before on this stream";
  }
  if (!refusal.empty()) {
    answer.mutable_nack()->set_version(fence.version());
    answer.mutable_nack()->set_nonce(update.nonce());
    answer.mutable_nack()->set_error(refusal);
    spdlog::warn("fence client: refused a fence: {}", refusal);
    if (h.Write(answer)) {
      std::lock_guard lock(mu_);
      ++stats_.nacks;
    }
    return;
  }
  h.last_version = fence.version();
  if (last_fence_ && google::protobuf::util::MessageDifferencer::Equals(*last_fence_, fence)) {
    // Resent after a reconnect: already in place.
    answer.mutable_ack()->set_version(fence.version());
    answer.mutable_ack()->set_nonce(update.nonce());
    if (h.Write(answer)) {
      std::lock_guard lock(mu_);
      ++stats_.acks;
    }
    return;
  }
  Result<feedguard::v1::NodeReport> result = applier_->Apply(fence);
  if (!result.ok()) {
    answer.mutable_nack()->set_version(fence.version());
    answer.mutable_nack()->set_nonce(update.nonce());
    answer.mutable_nack()->set_error(result.status().ToString());
    spdlog::warn("fence client: fence version {} failed: {}", fence.version(),
                 result.status().ToString());
    {
      std::lock_guard lock(mu_);
      ++stats_.applies;
    }
    if (h.Write(answer)) {
      std::lock_guard lock(mu_);
      ++stats_.nacks;
    }
    return;
  }
  last_fence_ = fence;
  feedguard::v1::NodeReport report = std::move(result).value();
  report.set_applied_version(fence.version());
  {
    std::lock_guard lock(mu_);
    ++stats_.applies;
    stats_.applied_version = fence.version();
    last_report_ = report;
    report_dirty_ = false;  // sent just below
  }
  answer.mutable_ack()->set_version(fence.version());
  answer.mutable_ack()->set_nonce(update.nonce());
  if (h.Write(answer)) {
    std::lock_guard lock(mu_);
    ++stats_.acks;
  }
  SendReport(h, report);
}

size_t FitReportToLimit(feedguard::v1::NodeReport* report, size_t max_bytes) {
  // The AgentMessage around the report adds its tag and length.
  const size_t budget = max_bytes > 16 ? max_bytes - 16 : 0;
  auto fits = [&] { return report->ByteSizeLong() <= budget; };
  if (fits()) return 0;
  constexpr size_t kMaxMessage = 512;
  for (auto& pod : *report->mutable_pods()) {
    if (pod.message().size() > kMaxMessage) {
      std::string m = pod.message().substr(0, kMaxMessage);
      while (!m.empty() && (static_cast<unsigned char>(m.back()) & 0xC0) == 0x80) m.pop_back();
      if (!m.empty() && static_cast<unsigned char>(m.back()) >= 0xC0) m.pop_back();  // a cut lead
      pod.set_message(std::move(m));
    }
  }
  if (fits()) return 0;
  for (auto& pod : *report->mutable_pods()) {
    if (pod.enforced()) pod.clear_message();
  }
  size_t dropped = 0;
  // Observations before any pod's outcome: the agent sends them worst first, so the pods that
  // waited least go first.
  auto* obs = report->mutable_observations();
  while (!obs->empty() && !fits()) {
    obs->RemoveLast();
    ++dropped;
  }
  for (bool enforced : {true, false}) {
    auto* pods = report->mutable_pods();
    for (int i = pods->size() - 1; i >= 0 && !fits(); --i) {
      if (pods->Get(i).enforced() != enforced) continue;
      pods->DeleteSubrange(i, 1);
      ++dropped;
    }
  }
  return dropped;
}

bool FenceClient::SendReport(StreamHandle& h, const feedguard::v1::NodeReport& report) {
  AgentMessage m;
  *m.mutable_report() = report;
  EscapeInvalidUtf8Fields(&m);  // before fitting: escaping lengthens what it rewrites
  if (const size_t dropped = FitReportToLimit(m.mutable_report(), kMaxAgentMessageBytes)) {
    if (auto held = escape_log_.Allow()) {
      spdlog::error(
          "fence client: report of {} pods over the controller's {} byte limit: {} left out{}",
          report.pods_size(), kMaxAgentMessageBytes, dropped, LogLimiter::HeldBack(*held));
    }
  }
  if (!h.Write(m)) return false;
  std::lock_guard lock(mu_);
  ++stats_.reports;
  return true;
}

void FenceClient::ReportLoop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    const bool on_change = report_cv_.wait_for(lock, options_.report_interval, [this] {
      return stopping_ || (report_dirty_ && stream_ != nullptr);
    });
    if (stopping_) return;
    std::shared_ptr<StreamHandle> h = stream_;
    if (!h) continue;
    std::optional<feedguard::v1::NodeReport> report;
    if (!on_change) {
      lock.unlock();
      report = applier_->CurrentReport();
      lock.lock();
      if (report) {
        report->set_applied_version(stats_.applied_version);
        last_report_ = report;
      }
    }
    if (!report) report = last_report_;
    report_dirty_ = false;
    if (!report) continue;
    lock.unlock();
    SendReport(*h, *report);
    lock.lock();
  }
}

}  // namespace feedguard::agent
