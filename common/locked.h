// locked.h — the body of a getter whose field a mutex guards: a copy taken under the lock.
//
// Example:
//   bool Enforcer::ready() const { return LockedCopy(mu_, ready_); }
#pragma once

#include <mutex>

namespace feedguard {

template <typename T, typename Mutex>
T LockedCopy(Mutex& mu, const T& value) {
  std::lock_guard<Mutex> lock(mu);
  return value;
}

}  // namespace feedguard
