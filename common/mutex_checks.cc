#include "common/mutex_checks.h"

#include <absl/synchronization/mutex.h>

namespace feedguard {

void SkipMutexLockOrderTracking() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

}  // namespace feedguard
