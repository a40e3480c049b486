// http_endpoint.h — the small HTTP/1.1 server behind /metrics, /healthz and /readyz: GET and
// HEAD of a few fixed paths, on one event-loop thread, built to keep answering probes while
// clients are slow, idle or hostile (issue 28, item 4).
//
// A thread-per-connection server (cpp-httplib, before) gives each slow client a thread: ~65
// connections trickling a byte a second held every worker, and with a listen backlog of 5 every
// /healthz timed out, so the kubelet restarted healthy pods. Here:
//   - no thread per connection: one epoll loop reads every socket without blocking;
//   - deadlines per request, not per byte: a request's head must arrive whole within
//     `request_timeout` of its first byte being awaited, its response be written within
//     `write_timeout`, an idle kept-alive connection is closed after `keep_alive_timeout`;
//   - at most `max_connections` open: a new connection past it closes the connection that has
//     waited longest for its request (a probe's connection, which sends its request at once,
//     is never the oldest for long);
//   - a listen backlog of `backlog` (the kernel caps it at net.core.somaxconn).
// Routes marked `blocking` (the metrics collector, which takes other components' locks) run on
// one worker thread of their own, at most `max_queued` waiting; others (the probes) answer on
// the loop at once, so a slow collector never delays /healthz.
//
// Example:
//   auto ep = HttpEndpoint::Start("127.0.0.1:0", {
//       {"/healthz", false, [] { return HttpResponse{200, "text/plain", "ok\n"}; }},
//       {"/metrics", true, [] { return HttpResponse{200, "text/plain", Collect()}; }}});
//   int port = (*ep)->port();
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "feedguard/common/status.h"

namespace feedguard {

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain";
  std::string body;
};

struct HttpRoute {
  std::string path;       // exact match; the query string is ignored
  bool blocking = false;  // run on the worker thread, not the loop
  std::function<HttpResponse()> handler;
};

struct HttpEndpointOptions {
  int backlog = 1024;
  size_t max_connections = 512;
  std::chrono::milliseconds request_timeout{2'000};
  std::chrono::milliseconds write_timeout{5'000};
  std::chrono::milliseconds keep_alive_timeout{2'000};
  size_t keep_alive_max_requests = 100;
  size_t max_request_bytes = 8192;  // request line + headers; nothing legitimate sends a body
  size_t max_queued = 16;           // blocking requests waiting for the worker; more: 503
};

// What the endpoint has done (tests, benchmarks).
struct HttpEndpointStats {
  size_t open = 0;         // connections open now
  uint64_t accepted = 0;   // connections accepted
  uint64_t served = 0;     // responses written whole
  uint64_t timed_out = 0;  // closed at a deadline (request, write or keep-alive)
  uint64_t evicted = 0;    // closed to make room for a new connection
  uint64_t rejected = 0;   // malformed, oversize or with a body (answered 4xx, then closed)
};

class HttpEndpoint {
 public:
  // `address` "host:port" (port 0: any free port). Binds and listens before returning.
  static Result<std::unique_ptr<HttpEndpoint>> Start(const std::string& address,
                                                     std::vector<HttpRoute> routes,
                                                     HttpEndpointOptions options = {});
  ~HttpEndpoint();  // stops the threads and closes every socket
  HttpEndpoint(const HttpEndpoint&) = delete;
  HttpEndpoint& operator=(const HttpEndpoint&) = delete;

  int port() const;
  HttpEndpointStats stats() const;

 private:
  class Impl;
  explicit HttpEndpoint(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace feedguard
