#include "common/signals.h"

#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

namespace feedguard {

TerminationSignals::TerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, &previous_);
  signal_fd_ = signalfd(-1, &set, SFD_CLOEXEC);
  event_fd_ = eventfd(0, EFD_CLOEXEC);
  if (signal_fd_ < 0 || event_fd_ < 0) {
    status_ = Internal(std::string("signalfd/eventfd: ") + std::strerror(errno));
  }
}

TerminationSignals::~TerminationSignals() {
  if (signal_fd_ >= 0) close(signal_fd_);
  if (event_fd_ >= 0) close(event_fd_);
  pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
}

int TerminationSignals::Wait() {
  if (!status_.ok()) {  // no descriptors: take the (blocked) signals directly
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    int sig = 0;
    return sigwait(&set, &sig) == 0 ? sig : 0;
  }
  pollfd fds[2] = {{signal_fd_, POLLIN, 0}, {event_fd_, POLLIN, 0}};
  while (true) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return 0;
    }
    if (fds[0].revents & POLLIN) {
      signalfd_siginfo info{};
      if (read(signal_fd_, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
        return static_cast<int>(info.ssi_signo);
      }
    }
    if (fds[1].revents & POLLIN) {
      uint64_t n = 0;
      if (read(event_fd_, &n, sizeof n) < 0) {
        // Nothing to do: the eventfd was readable, so an Interrupt() happened.
      }
      return 0;
    }
  }
}

void TerminationSignals::Interrupt() {
  if (event_fd_ < 0) {
    kill(getpid(), SIGTERM);  // the fallback Wait() takes it
    return;
  }
  const uint64_t one = 1;
  if (write(event_fd_, &one, sizeof one) < 0) {
    // eventfd writes fail only on counter overflow: a wake-up is pending already.
  }
}

}  // namespace feedguard
