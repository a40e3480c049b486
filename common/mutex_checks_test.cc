#include "common/mutex_checks.h"

#include <absl/synchronization/mutex.h>
#include <gtest/gtest.h>

namespace feedguard {
namespace {

// Takes a then b, then b then a: a lock-order cycle (never a deadlock here: one thread).
void InvertLockOrder() {
  absl::Mutex a;
  absl::Mutex b;
  {
    absl::MutexLock la(&a);
    absl::MutexLock lb(&b);
  }
  {
    absl::MutexLock lb(&b);
    absl::MutexLock la(&a);
  }
}

// The fact the switch exists for: Debian's Abseil tracks lock order and ends the process on a
// cycle. If this starts failing, Abseil is built as a release build and the switch is moot.
TEST(MutexChecksDeathTest, DebiansAbseilAbortsOnALockOrderCycle) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // a fresh process: absl's default mode
  EXPECT_DEATH(InvertLockOrder(), "deadlock");
}

TEST(MutexChecksTest, WithoutTrackingACycleIsNotTracked) {
  SkipMutexLockOrderTracking();
  InvertLockOrder();  // would abort with tracking on (the death test above)
  SUCCEED();
}

}  // namespace
}  // namespace feedguard
