// fake_transport.h — a scripted HttpTransport for unit tests (test-only; header-only): every
// request goes to a handler that returns a response, or for streams a list of body chunks.
#pragma once

#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "controller/kube/transport.h"

namespace feedguard::kube {

struct FakeReply {
  Result<HttpResponse> response = HttpResponse{200, "{}"};
  std::vector<std::string> chunks;  // streamed body pieces (2xx streams only)
};

class FakeTransport final : public HttpTransport {
 public:
  using Handler = std::function<FakeReply(const HttpRequest&)>;
  explicit FakeTransport(Handler handler) : handler_(std::move(handler)) {}

  Result<HttpResponse> Do(const HttpRequest& request) override {
    Log(request);
    return handler_(request).response;
  }

  Result<HttpResponse> Stream(const HttpRequest& request, const ChunkHandler& on_chunk,
                              std::stop_token stop) override {
    Log(request);
    FakeReply reply = handler_(request);
    if (!reply.response.ok()) {
      // A connection that died after some bytes: deliver them first.
      for (const auto& c : reply.chunks) {
        if (!on_chunk(c)) break;
      }
      return reply.response;
    }
    if (reply.response->status >= 200 && reply.response->status < 300) {
      for (const auto& c : reply.chunks) {
        if (stop.stop_requested()) return Aborted("request stopped");
        if (!on_chunk(c)) break;
      }
      reply.response->body.clear();
    }
    return reply.response;
  }

  std::vector<HttpRequest> requests() const {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }

 private:
  void Log(const HttpRequest& r) {
    std::lock_guard<std::mutex> lock(mu_);
    requests_.push_back(r);
  }
  Handler handler_;
  mutable std::mutex mu_;
  std::vector<HttpRequest> requests_;  // guarded by mu_
};

// Splits `s` into pieces of pseudo-random sizes in [1, max_piece].
inline std::vector<std::string> RandomChunks(const std::string& s, uint32_t seed,
                                             size_t max_piece) {
  std::vector<std::string> out;
  uint32_t x = seed * 2654435761u + 1;
  for (size_t pos = 0; pos < s.size();) {
    x = x * 1103515245u + 12345u;
    const size_t n = 1 + (x >> 8) % max_piece;
    out.push_back(s.substr(pos, n));
    pos += n;
  }
  return out;
}

}  // namespace feedguard::kube
