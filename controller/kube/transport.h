// transport.h — the pure HTTP seam under the Kubernetes client. The client speaks paths and
// bodies; a transport adds the server address, TLS and authentication. CurlTransport is the real
// one; tests script a fake.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <stop_token>
#include <string>
#include <string_view>

#include "feedguard/common/status.h"

namespace feedguard::kube {

struct HttpRequest {
  std::string method = "GET";  // GET, POST, PUT, PATCH, DELETE
  std::string path;            // absolute path with query, e.g. "/api/v1/pods?limit=500"
  std::string body;
  std::string content_type;  // for requests with a body
  std::string accept;        // media type of the answer; "" = application/json
  // Whole-request deadline; zero means none (watch streams rely on the server's timeoutSeconds
  // plus their own deadline).
  std::chrono::milliseconds timeout{30000};
};

struct HttpResponse {
  long status = 0;  // HTTP status code
  std::string body;
};

// Called with each piece of a 2xx streaming body; return false to abort the stream.
using ChunkHandler = std::function<bool(std::string_view)>;

class HttpTransport {
 public:
  virtual ~HttpTransport() = default;
  // One request/response. A non-OK Result means no HTTP response arrived (connection refused,
  // TLS failure, timeout); any HTTP status, including 4xx/5xx, is a successful Result.
  virtual Result<HttpResponse> Do(const HttpRequest& request) = 0;
  // A streaming request: a 2xx body goes to `on_chunk` piece by piece (response.body stays
  // empty); a non-2xx body is collected into response.body. Aborts, returning OK with the
  // status seen, when `on_chunk` returns false; returns kAborted once `stop` is requested (a
  // default token never is).
  virtual Result<HttpResponse> Stream(const HttpRequest& request, const ChunkHandler& on_chunk,
                                      std::stop_token stop) = 0;
};
using HttpTransportPtr = std::shared_ptr<HttpTransport>;

}  // namespace feedguard::kube
