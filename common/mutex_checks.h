#pragma once
// grpc's locks are absl::Mutex. Debian builds Abseil without NDEBUG, so absl's lock-order
// ("deadlock") detector runs in every process that links it: on each Mutex acquisition it
// records the lock in a process-wide graph (absl's GraphCycles, under a global spin lock) and,
// on a cycle, prints and aborts the process (kAbort, absl's debug-build default). A release
// binary of absl has it off. Measured on the controller during a reconnect storm of 1,000 mTLS
// agents (perf): GraphCycles::GetId/InsertEdge were ~4 % of the controller's and ~9 % of the
// simulator's CPU (docs/controller-limits.md, "Connection set-up CPU").
//
// Our own code does not use absl::Mutex; this only changes what grpc's locks cost and whether
// a lock-order report of grpc's internals ends the process.

namespace feedguard {

// Turns absl's Mutex lock-order tracking off for this process (absl::OnDeadlockCycle::kIgnore),
// as in a release build of Abseil. Call once from main(), before any thread starts.
void SkipMutexLockOrderTracking();

}  // namespace feedguard
