// curl_transport.h — the real HttpTransport: libcurl over TLS (CA, client certificate and key
// passed as in-memory blobs), bearer tokens from a TokenSource (re-read on 401), a pool of easy
// handles so many threads can issue requests at once.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "controller/kube/kubeconfig.h"
#include "controller/kube/transport.h"

namespace feedguard::kube {

struct CurlTransportOptions {
  std::chrono::milliseconds connect_timeout{10000};
  size_t max_idle_handles = 16;
  std::string user_agent = "feedguard/0.1";
};

class CurlTransport final : public HttpTransport {
 public:
  static Result<std::shared_ptr<CurlTransport>> Create(RestConfig config, TimeSourcePtr clock,
                                                       CurlTransportOptions options = {});
  ~CurlTransport() override;
  CurlTransport(const CurlTransport&) = delete;
  CurlTransport& operator=(const CurlTransport&) = delete;

  Result<HttpResponse> Do(const HttpRequest& request) override;
  Result<HttpResponse> Stream(const HttpRequest& request, const ChunkHandler& on_chunk,
                              std::stop_token stop) override;

  const RestConfig& config() const { return config_; }

 private:
  CurlTransport(RestConfig config, TokenSourcePtr tokens, CurlTransportOptions options);
  Result<HttpResponse> Perform(const HttpRequest& request, const ChunkHandler* on_chunk,
                               std::stop_token stop);
  Result<HttpResponse> PerformOnce(const HttpRequest& request, const ChunkHandler* on_chunk,
                                   std::stop_token stop, bool* streamed);
  void* Acquire();
  void Release(void* handle);

  const RestConfig config_;
  const TokenSourcePtr tokens_;
  const CurlTransportOptions options_;
  std::mutex mu_;
  std::vector<void*> idle_;  // guarded by mu_; CURL* easy handles ready for reuse
};

}  // namespace feedguard::kube
