#pragma once
// grpc's locks are absl::Mutex. Debian builds Abseil without NDEBUG, so absl's lock-order
// ("deadlock") detector runs in every process that links it: on each Mutex acquisition it
// records the lock in a process-wide graph (absl's GraphCycles, under a global spin lock) and,
// on a cycle, prints and aborts the process (kAbort, absl's debug-build default). A release
// binary of absl has it off. Measured over a bench step with 1,000 mTLS agents (their start and
// a reconnect storm; perf): absl's graph and lock code were ~4 % of the controller's CPU and ~6 %
// of the agent simulator's; with tracking off the controller's RSS was ~6 KB per agent lower
// (bench/results/connection-setup-2026-11-29.md).
//
// Our own code does not use absl::Mutex; this only changes what grpc's locks cost and whether
// a lock-order report of grpc's internals ends the process.

namespace feedguard {

// Turns absl's Mutex lock-order tracking off for this process (absl::OnDeadlockCycle::kIgnore),
// as in a release build of Abseil. Call once from main(), before any thread starts.
void SkipMutexLockOrderTracking();

}  // namespace feedguard
