#include "common/http_endpoint.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <utility>

#include "common/fd.h"

namespace feedguard {
namespace {

using Clock = std::chrono::steady_clock;

std::string ErrnoText(const std::string& what) { return what + ": " + std::strerror(errno); }

const char* Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 413:
      return "Payload Too Large";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    default:
      return "Status";
  }
}

bool IEquals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view TrimSpaces(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

// One parsed request head.
struct Request {
  std::string method;
  std::string path;
  bool keep_alive = false;
  int error = 0;  // non-zero: answer this status and close
};

Request ParseHead(std::string_view head) {
  Request r;
  const size_t eol = head.find('\n');
  std::string_view line = TrimSpaces(head.substr(0, eol));
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos) {
    r.error = 400;
    return r;
  }
  r.method = std::string(line.substr(0, sp1));
  std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (version != "HTTP/1.1" && version != "HTTP/1.0") {
    r.error = 400;
    return r;
  }
  if (const size_t q = target.find('?'); q != std::string_view::npos) target = target.substr(0, q);
  r.path = std::string(target);
  r.keep_alive = version == "HTTP/1.1";
  std::string_view rest = eol == std::string_view::npos ? std::string_view() : head.substr(eol + 1);
  while (!rest.empty()) {
    const size_t e = rest.find('\n');
    std::string_view h = rest.substr(0, e);
    rest = e == std::string_view::npos ? std::string_view() : rest.substr(e + 1);
    const size_t colon = h.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string_view name = TrimSpaces(h.substr(0, colon));
    const std::string_view value = TrimSpaces(h.substr(colon + 1));
    if (IEquals(name, "connection")) {
      if (IEquals(value, "close")) r.keep_alive = false;
      if (IEquals(value, "keep-alive")) r.keep_alive = true;
    } else if ((IEquals(name, "content-length") && value != "0") ||
               IEquals(name, "transfer-encoding")) {
      r.error = 413;  // GET only: a body is never read
    }
  }
  if (r.method != "GET" && r.method != "HEAD" && r.error == 0) r.error = 405;
  return r;
}

// Where the request head ends (just past its blank line), or npos.
size_t HeadEnd(const std::string& in) {
  size_t i = in.find("\r\n\r\n");
  if (i != std::string::npos) return i + 4;
  i = in.find("\n\n");
  return i == std::string::npos ? i : i + 2;
}

}  // namespace

class HttpEndpoint::Impl {
 public:
  Impl(std::vector<HttpRoute> routes, HttpEndpointOptions options)
      : routes_(std::move(routes)), options_(options) {}

  ~Impl() { Stop(); }

  Status Listen(const std::string& address) {
    const size_t colon = address.rfind(':');
    if (colon == std::string::npos) {
      return InvalidArgument("address \"" + address + "\" must be host:port");
    }
    std::string host = address.substr(0, colon);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
      host = host.substr(1, host.size() - 2);
    }
    if (host.empty()) host = "0.0.0.0";
    const std::string port = address.substr(colon + 1);
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* res = nullptr;
    if (int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0) {
      return InvalidArgument("cannot resolve " + address + ": " + ::gai_strerror(rc));
    }
    std::string last_error = "no address";
    for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
      Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
      if (fd.get() < 0) {
        last_error = ErrnoText("socket");
        continue;
      }
      int one = 1;
      ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0 ||
          ::listen(fd.get(), options_.backlog) != 0) {
        last_error = ErrnoText("bind/listen " + address);
        continue;
      }
      sockaddr_storage bound{};
      socklen_t len = sizeof bound;
      ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &len);
      port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                                : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
      listen_fd_ = std::move(fd);
      break;
    }
    ::freeaddrinfo(res);
    if (listen_fd_.get() < 0) return Unavailable("cannot listen on " + address + ": " + last_error);
    epoll_ = Fd(::epoll_create1(EPOLL_CLOEXEC));
    wake_ = Fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (epoll_.get() < 0 || wake_.get() < 0) return Internal(ErrnoText("epoll/eventfd"));
    AddToEpoll(listen_fd_.get(), EPOLLIN, kListenTag);
    AddToEpoll(wake_.get(), EPOLLIN, kWakeTag);
    loop_ = std::thread([this] { Loop(); });
    worker_ = std::thread([this] { Work(); });
    return OkStatus();
  }

  int port() const { return port_; }

  HttpEndpointStats stats() const {
    std::lock_guard lock(stats_mu_);
    return stats_;
  }

  void Stop() {
    {
      std::lock_guard lock(work_mu_);
      if (stopping_) return;
      stopping_ = true;
    }
    work_cv_.notify_all();
    Wake();
    if (loop_.joinable()) loop_.join();
    if (worker_.joinable()) worker_.join();
  }

 private:
  // epoll data: connections by id; these two ids are the listening socket and the eventfd.
  static constexpr uint64_t kListenTag = 0;
  static constexpr uint64_t kWakeTag = 1;

  enum class State { kReading, kHandling, kWriting };
  struct Conn {
    Fd fd;
    State state = State::kReading;
    std::string in;
    std::string out;
    size_t out_done = 0;
    bool keep_alive = false;
    size_t requests = 0;
    Clock::time_point waiting_since;  // start of the current read (or write) deadline
    Clock::time_point deadline;
  };
  struct Job {  // a blocking route's request, for the worker
    uint64_t conn;
    const HttpRoute* route;
    bool head;
  };
  struct Done {  // its response, for the loop
    uint64_t conn;
    HttpResponse response;
    bool head;
  };

  void AddToEpoll(int fd, uint32_t events, uint64_t tag) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = tag;
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev);
  }
  void ModifyEpoll(int fd, uint32_t events, uint64_t tag) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = tag;
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, fd, &ev);
  }
  void Wake() {
    const uint64_t one = 1;
    if (wake_.get() >= 0) (void)!::write(wake_.get(), &one, sizeof one);
  }
  template <typename F>
  void Count(F f) {
    std::lock_guard lock(stats_mu_);
    f(stats_);
    stats_.open = conns_.size();
  }

  bool Stopping() {
    std::lock_guard lock(work_mu_);
    return stopping_;
  }

  void Loop() {
    std::vector<epoll_event> events(256);
    while (!Stopping()) {
      const int n =
          ::epoll_wait(epoll_.get(), events.data(), static_cast<int>(events.size()), TimeoutMs());
      if (n < 0 && errno != EINTR) break;
      for (int i = 0; i < n; ++i) {
        const uint64_t tag = events[static_cast<size_t>(i)].data.u64;
        const uint32_t ev = events[static_cast<size_t>(i)].events;
        if (tag == kListenTag) {
          AcceptAll();
        } else if (tag == kWakeTag) {
          uint64_t v;
          while (::read(wake_.get(), &v, sizeof v) > 0) {
          }
          TakeDone();
        } else {
          OnEvent(tag, ev);
        }
      }
      ExpireDeadlines();
    }
    conns_.clear();
    Count([](HttpEndpointStats&) {});
  }

  int TimeoutMs() const {
    if (conns_.empty()) return 1000;
    Clock::time_point first = Clock::time_point::max();
    for (const auto& [id, c] : conns_) {
      if (c.state != State::kHandling) first = std::min(first, c.deadline);
    }
    if (first == Clock::time_point::max()) return 1000;
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(first - Clock::now());
    return static_cast<int>(std::clamp<int64_t>(ms.count() + 1, 0, 1000));
  }

  void AcceptAll() {
    for (;;) {
      Fd fd(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
      if (fd.get() < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if ((errno == EMFILE || errno == ENFILE) && !EvictOldestReader()) {
          // Out of descriptors with nothing to shed: the backlog holds the rest; do not spin on
          // the still-readable listening socket.
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        return;  // EAGAIN: all taken
      }
      if (conns_.size() >= options_.max_connections && !EvictOldestReader()) {
        Count([](HttpEndpointStats& s) { ++s.rejected; });
        continue;  // every slot is answering: this one goes (closed with `fd`)
      }
      const int one = 1;
      ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      const uint64_t id = next_id_++;
      Conn& c = conns_[id];
      c.fd = std::move(fd);
      StartReading(c);
      AddToEpoll(c.fd.get(), EPOLLIN | EPOLLRDHUP, id);
      Count([](HttpEndpointStats& s) { ++s.accepted; });
    }
  }

  // Makes room: closes the connection that has waited longest for its request.
  bool EvictOldestReader() {
    auto oldest = conns_.end();
    for (auto it = conns_.begin(); it != conns_.end(); ++it) {
      if (it->second.state != State::kReading) continue;
      if (oldest == conns_.end() || it->second.waiting_since < oldest->second.waiting_since) {
        oldest = it;
      }
    }
    if (oldest == conns_.end()) return false;
    conns_.erase(oldest);
    Count([](HttpEndpointStats& s) { ++s.evicted; });
    return true;
  }

  void StartReading(Conn& c) {
    c.state = State::kReading;
    c.waiting_since = Clock::now();
    // A kept-alive connection may idle for keep_alive_timeout before its next request starts;
    // once bytes of it arrive the request deadline applies (OnReadable).
    c.deadline = c.waiting_since +
                 (c.requests == 0 ? options_.request_timeout : options_.keep_alive_timeout);
  }

  // Interest per state: a request's bytes (and the peer's half-close, which recv reports as 0)
  // while reading, room to write while writing, nothing while a worker answers (errors and
  // hang-ups are always reported). Level-triggered: no interest is left set that would fire
  // again and again without the state moving on.
  void OnEvent(uint64_t id, uint32_t ev) {
    auto it = conns_.find(id);
    if (it == conns_.end()) return;  // closed earlier in this batch
    Conn& c = it->second;
    if (ev & (EPOLLHUP | EPOLLERR)) {
      Close(id);
    } else if ((ev & (EPOLLIN | EPOLLRDHUP)) && c.state == State::kReading) {
      OnReadable(id, c);
    } else if ((ev & EPOLLOUT) && c.state == State::kWriting) {
      WriteSome(id, c);
    }
  }

  // Reads what is there and answers a complete request; `c` may be closed (erased) on return.
  void OnReadable(uint64_t id, Conn& c) {
    char buf[4096];
    for (;;) {
      const ssize_t n = ::recv(c.fd.get(), buf, sizeof buf, 0);
      if (n > 0) {
        if (c.in.empty() && c.requests > 0) {  // a kept-alive connection's next request starts
          c.waiting_since = Clock::now();
          c.deadline = c.waiting_since + options_.request_timeout;
        }
        c.in.append(buf, static_cast<size_t>(n));
        if (c.in.size() > options_.max_request_bytes + sizeof buf) break;
        continue;
      }
      if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        Close(id);
        return;
      }
      if (errno == EINTR) continue;
      break;
    }
    const size_t end = HeadEnd(c.in);
    if (end == std::string::npos) {
      if (c.in.size() > options_.max_request_bytes) Reject(id, c, 431);
      return;  // else more to come, within the deadline
    }
    if (end > options_.max_request_bytes) {
      Reject(id, c, 431);
      return;
    }
    Request r = ParseHead(std::string_view(c.in).substr(0, end));
    c.in.erase(0, end);
    if (r.error != 0) {
      Reject(id, c, r.error);
      return;
    }
    ++c.requests;
    c.keep_alive = r.keep_alive && c.requests < options_.keep_alive_max_requests;
    const bool head = r.method == "HEAD";
    const HttpRoute* route = nullptr;
    for (const auto& rt : routes_) {
      if (rt.path == r.path) route = &rt;
    }
    if (route == nullptr) {
      Respond(id, c, {404, "text/plain", "not found\n"}, head);
    } else if (!route->blocking) {
      Respond(id, c, Call(*route), head);
    } else {
      bool queued = false;
      {
        std::lock_guard lock(work_mu_);
        if (jobs_.size() < options_.max_queued) {
          jobs_.push_back({id, route, head});
          queued = true;
        }
      }
      if (!queued) {
        Respond(id, c, {503, "text/plain", "busy\n"}, head);
      } else {
        c.state = State::kHandling;
        ModifyEpoll(c.fd.get(), 0, id);
        work_cv_.notify_one();
      }
    }
  }

  static HttpResponse Call(const HttpRoute& route) {
    try {
      return route.handler ? route.handler() : HttpResponse{};
    } catch (const std::exception& e) {  // a handler never ends the serving thread
      return {500, "text/plain", std::string("handler failed: ") + e.what() + "\n"};
    }
  }

  void Reject(uint64_t id, Conn& c, int status) {
    c.keep_alive = false;
    Count([](HttpEndpointStats& s) { ++s.rejected; });
    Respond(id, c, {status, "text/plain", std::string(Reason(status)) + "\n"}, false);
  }

  void Respond(uint64_t id, Conn& c, const HttpResponse& r, bool head) {
    c.out = "HTTP/1.1 " + std::to_string(r.status) + " " + Reason(r.status) +
            "\r\nContent-Type: " + r.content_type +
            "\r\nContent-Length: " + std::to_string(r.body.size()) +
            (c.keep_alive ? "\r\nConnection: keep-alive\r\n\r\n" : "\r\nConnection: close\r\n\r\n");
    if (!head) c.out += r.body;
    c.out_done = 0;
    c.state = State::kWriting;
    c.waiting_since = Clock::now();
    c.deadline = c.waiting_since + options_.write_timeout;
    WriteSome(id, c);
  }

  void WriteSome(uint64_t id, Conn& c) {
    while (c.out_done < c.out.size()) {
      const ssize_t n =
          ::send(c.fd.get(), c.out.data() + c.out_done, c.out.size() - c.out_done, MSG_NOSIGNAL);
      if (n > 0) {
        c.out_done += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        ModifyEpoll(c.fd.get(), EPOLLOUT, id);
        return;
      }
      Close(id);
      return;
    }
    Count([](HttpEndpointStats& s) { ++s.served; });
    if (!c.keep_alive) {
      Close(id);
      return;
    }
    c.out.clear();
    StartReading(c);
    ModifyEpoll(c.fd.get(), EPOLLIN | EPOLLRDHUP, id);
    if (!c.in.empty()) OnReadable(id, c);  // a pipelined request already read
  }

  void Close(uint64_t id) {
    conns_.erase(id);
    Count([](HttpEndpointStats&) {});
  }

  void ExpireDeadlines() {
    const auto now = Clock::now();
    uint64_t expired = 0;
    for (auto it = conns_.begin(); it != conns_.end();) {
      if (it->second.state != State::kHandling && now >= it->second.deadline) {
        it = conns_.erase(it);
        ++expired;
      } else {
        ++it;
      }
    }
    if (expired > 0) Count([expired](HttpEndpointStats& s) { s.timed_out += expired; });
  }

  // The worker: blocking routes, one at a time, outside the loop.
  void Work() {
    std::unique_lock lock(work_mu_);
    for (;;) {
      work_cv_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
      if (stopping_) return;
      Job job = jobs_.front();
      jobs_.pop_front();
      lock.unlock();
      HttpResponse r = Call(*job.route);
      lock.lock();
      done_.push_back({job.conn, std::move(r), job.head});
      Wake();
    }
  }

  void TakeDone() {
    std::deque<Done> done;
    {
      std::lock_guard lock(work_mu_);
      done.swap(done_);
    }
    for (Done& d : done) {
      auto it = conns_.find(d.conn);
      if (it == conns_.end()) continue;  // the client went meanwhile
      Respond(d.conn, it->second, d.response, d.head);
    }
  }

  const std::vector<HttpRoute> routes_;
  const HttpEndpointOptions options_;
  int port_ = 0;
  Fd listen_fd_, epoll_, wake_;
  // Loop thread only.
  std::map<uint64_t, Conn> conns_;
  uint64_t next_id_ = 2;  // 0 and 1 are kListenTag and kWakeTag
  std::thread loop_, worker_;
  // Between the loop and the worker.
  std::mutex work_mu_;
  std::condition_variable work_cv_;
  bool stopping_ = false;  // guarded by work_mu_
  std::deque<Job> jobs_;   // guarded by work_mu_
  std::deque<Done> done_;  // guarded by work_mu_
  mutable std::mutex stats_mu_;
  HttpEndpointStats stats_;  // guarded by stats_mu_
};

HttpEndpoint::HttpEndpoint(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpEndpoint::~HttpEndpoint() = default;

Result<std::unique_ptr<HttpEndpoint>> HttpEndpoint::Start(const std::string& address,
                                                          std::vector<HttpRoute> routes,
                                                          HttpEndpointOptions options) {
  auto impl = std::make_unique<Impl>(std::move(routes), options);
  FG_RETURN_IF_ERROR(impl->Listen(address));
  return std::unique_ptr<HttpEndpoint>(new HttpEndpoint(std::move(impl)));
}

int HttpEndpoint::port() const { return impl_->port(); }
HttpEndpointStats HttpEndpoint::stats() const { return impl_->stats(); }

}  // namespace feedguard
