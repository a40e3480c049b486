#include "controller/kube/curl_transport.h"

#include <curl/curl.h>

#include <mutex>

namespace feedguard::kube {
namespace {

struct Transfer {
  CURL* curl = nullptr;
  const ChunkHandler* on_chunk = nullptr;
  std::stop_token stop;
  std::string body;
  bool streaming = false;  // decided on the first body byte from the status code
  bool decided = false;
  bool handler_stopped = false;  // on_chunk asked to end the stream
  bool delivered = false;        // some bytes reached on_chunk
};

size_t WriteCallback(char* data, size_t size, size_t nmemb, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t n = size * nmemb;
  if (!t->decided) {
    long code = 0;
    curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &code);
    t->streaming = t->on_chunk != nullptr && code >= 200 && code < 300;
    t->decided = true;
  }
  if (!t->streaming) {
    t->body.append(data, n);
    return n;
  }
  t->delivered = true;
  if (!(*t->on_chunk)(std::string_view(data, n))) {
    t->handler_stopped = true;
    return 0;  // makes libcurl abort with CURLE_WRITE_ERROR
  }
  return n;
}

int ProgressCallback(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* t = static_cast<Transfer*>(user);
  return t->stop.stop_requested() ? 1 : 0;
}

struct HeaderList {
  curl_slist* list = nullptr;
  ~HeaderList() { curl_slist_free_all(list); }
  void Add(const std::string& h) { list = curl_slist_append(list, h.c_str()); }
};

void InitCurlOnce() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

}  // namespace

Result<std::shared_ptr<CurlTransport>> CurlTransport::Create(RestConfig config, TimeSourcePtr clock,
                                                             CurlTransportOptions options) {
  if (config.server.rfind("https://", 0) != 0 && config.server.rfind("http://", 0) != 0) {
    return InvalidArgument("server must be an http(s) URL: '" + config.server + "'");
  }
  InitCurlOnce();
  auto tokens = std::make_shared<TokenSource>(config.token, config.token_file, std::move(clock));
  return std::shared_ptr<CurlTransport>(
      new CurlTransport(std::move(config), std::move(tokens), std::move(options)));
}

CurlTransport::CurlTransport(RestConfig config, TokenSourcePtr tokens, CurlTransportOptions options)
    : config_(std::move(config)), tokens_(std::move(tokens)), options_(std::move(options)) {}

CurlTransport::~CurlTransport() {
  for (void* h : idle_) curl_easy_cleanup(static_cast<CURL*>(h));
}

void* CurlTransport::Acquire() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_.empty()) {
      void* h = idle_.back();
      idle_.pop_back();
      return h;
    }
  }
  return curl_easy_init();
}

void CurlTransport::Release(void* handle) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (idle_.size() < options_.max_idle_handles) {
      idle_.push_back(handle);
      return;
    }
  }
  curl_easy_cleanup(static_cast<CURL*>(handle));
}

Result<HttpResponse> CurlTransport::Do(const HttpRequest& request) {
  return Perform(request, nullptr, {});
}

Result<HttpResponse> CurlTransport::Stream(const HttpRequest& request, const ChunkHandler& on_chunk,
                                           std::stop_token stop) {
  return Perform(request, &on_chunk, stop);
}

Result<HttpResponse> CurlTransport::Perform(const HttpRequest& request,
                                            const ChunkHandler* on_chunk, std::stop_token stop) {
  bool streamed = false;
  auto r = PerformOnce(request, on_chunk, stop, &streamed);
  // A rotated service-account token: re-read it and try once more.
  if (r.ok() && r->status == 401 && !streamed && !config_.token_file.empty()) {
    tokens_->Invalidate();
    r = PerformOnce(request, on_chunk, stop, &streamed);
  }
  return r;
}

Result<HttpResponse> CurlTransport::PerformOnce(const HttpRequest& request,
                                                const ChunkHandler* on_chunk, std::stop_token stop,
                                                bool* streamed) {
  CURL* curl = static_cast<CURL*>(Acquire());
  if (curl == nullptr) return Internal("curl_easy_init failed");
  curl_easy_reset(curl);
  Transfer t;
  t.curl = curl;
  t.on_chunk = on_chunk;
  t.stop = std::move(stop);

  const std::string url = config_.server + request.path;
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_USERAGENT, options_.user_agent.c_str());
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(options_.connect_timeout.count()));
  if (request.timeout.count() > 0) {
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(request.timeout.count()));
  }
  curl_easy_setopt(curl, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(curl, CURLOPT_TCP_KEEPIDLE, 30L);
  curl_easy_setopt(curl, CURLOPT_TCP_KEEPINTVL, 10L);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &WriteCallback);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, &ProgressCallback);
  curl_easy_setopt(curl, CURLOPT_XFERINFODATA, &t);
  curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, request.method.c_str());
  if (request.method == "HEAD") curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
  if (!request.body.empty() || request.method == "POST" || request.method == "PUT" ||
      request.method == "PATCH") {
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, request.body.data());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE,
                     static_cast<curl_off_t>(request.body.size()));
  }

  // TLS.
  if (config_.insecure_skip_tls_verify) {
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 0L);
  }
  curl_blob ca{const_cast<char*>(config_.ca_pem.data()), config_.ca_pem.size(), CURL_BLOB_COPY};
  if (!config_.ca_pem.empty()) curl_easy_setopt(curl, CURLOPT_CAINFO_BLOB, &ca);
  curl_blob cert{const_cast<char*>(config_.client_cert_pem.data()), config_.client_cert_pem.size(),
                 CURL_BLOB_COPY};
  curl_blob key{const_cast<char*>(config_.client_key_pem.data()), config_.client_key_pem.size(),
                CURL_BLOB_COPY};
  if (!config_.client_cert_pem.empty()) {
    curl_easy_setopt(curl, CURLOPT_SSLCERT_BLOB, &cert);
    curl_easy_setopt(curl, CURLOPT_SSLCERTTYPE, "PEM");
    curl_easy_setopt(curl, CURLOPT_SSLKEY_BLOB, &key);
    curl_easy_setopt(curl, CURLOPT_SSLKEYTYPE, "PEM");
  }

  HeaderList headers;
  headers.Add("Accept: " +
              (request.accept.empty() ? std::string("application/json") : request.accept));
  if (!request.content_type.empty()) headers.Add("Content-Type: " + request.content_type);
  if (!tokens_->empty()) {
    auto token = tokens_->Token();
    if (!token.ok()) {
      Release(curl);
      return token.status().Annotate("bearer token");
    }
    if (!token->empty()) headers.Add("Authorization: Bearer " + *token);
  }
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers.list);

  const CURLcode rc = curl_easy_perform(curl);
  long code = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &code);
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, nullptr);
  Release(curl);
  *streamed = t.delivered;

  if (rc == CURLE_WRITE_ERROR && t.handler_stopped) {
    return HttpResponse{code, std::move(t.body)};
  }
  if (rc == CURLE_ABORTED_BY_CALLBACK) return Aborted("request stopped");
  if (rc == CURLE_OPERATION_TIMEDOUT) {
    return Status(StatusCode::kDeadlineExceeded,
                  request.method + " " + request.path + ": " + curl_easy_strerror(rc));
  }
  if (rc != CURLE_OK) {
    return Unavailable(request.method + " " + request.path + ": " + curl_easy_strerror(rc));
  }
  return HttpResponse{code, std::move(t.body)};
}

}  // namespace feedguard::kube
