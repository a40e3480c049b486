// signals.h — SIGTERM and SIGINT as an event a process object waits for, with no global flag and
// no polling: a signalfd for the signals and an eventfd for "stop for another reason" (e.g. lost
// leadership), waited on together with poll(2).
//
// Construct it before starting any thread: it blocks SIGTERM and SIGINT in the calling thread,
// and threads started afterwards inherit that mask, so the signals are only ever taken by
// Wait() (never delivered to a handler on some library's thread).
//
//   TerminationSignals signals;              // first, before any thread
//   StartEverything(on_fatal = [&] { signals.Interrupt(); });
//   int sig = signals.Wait();                // SIGTERM / SIGINT, or 0 after Interrupt()
//   StopEverything();
#pragma once

#include <signal.h>

#include "feedguard/common/status.h"

namespace feedguard {

class TerminationSignals {
 public:
  TerminationSignals();   // blocks SIGTERM and SIGINT in this thread
  ~TerminationSignals();  // closes the descriptors and restores the previous mask
  TerminationSignals(const TerminationSignals&) = delete;
  TerminationSignals& operator=(const TerminationSignals&) = delete;

  // Descriptors could not be created (the signals are blocked anyway).
  const Status& status() const { return status_; }
  // Blocks until SIGTERM or SIGINT arrives (returns its number) or Interrupt() was called
  // (returns 0; an Interrupt() before Wait() counts).
  int Wait();
  // Ends a Wait() in progress or the next one. Any thread; async-signal-safe.
  void Interrupt();

 private:
  sigset_t previous_{};
  int signal_fd_ = -1;
  int event_fd_ = -1;
  Status status_;
};

}  // namespace feedguard
