// Shared<T>: the reference-counted immutable value that pod records and intern pools share.
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "controller/resolver/interned.h"

namespace feedguard::controller {
namespace {

// A value whose life is observable: `token` is held by the value while it lives.
struct Probe {
  std::shared_ptr<int> token;
  bool empty() const { return token == nullptr; }
  bool operator==(const Probe&) const = default;
};

TEST(SharedValueTest, EveryOwnerCountsAndTheLastOneFrees) {
  auto token = std::make_shared<int>(7);
  std::weak_ptr<int> alive = token;
  {
    Shared<Probe> a(Probe{std::move(token)});
    ASSERT_FALSE(a.empty());
    Shared<Probe> b = a;             // copy
    Shared<Probe> c = std::move(b);  // move: b gives up its share
    EXPECT_TRUE(b.empty());          // NOLINT(bugprone-use-after-move): moved-from is empty
    EXPECT_EQ(&a.get(), &c.get());
    Shared<Probe> d;
    d = a;  // copy-assign onto an empty one
    const Shared<Probe>& same = d;
    d = same;  // assigning itself keeps the share
    EXPECT_EQ(&d.get(), &a.get());
    a = Shared<Probe>();  // a lets go; c and d still hold it
    EXPECT_FALSE(alive.expired());
    c = Shared<Probe>();
    EXPECT_FALSE(alive.expired());
  }  // d, the last owner, goes
  EXPECT_TRUE(alive.expired());
}

TEST(SharedValueTest, EmptyValuesHoldNothingAndCompareByValue) {
  SharedString empty(std::string{}), none;
  EXPECT_TRUE(empty.empty());
  EXPECT_EQ(empty, none);
  EXPECT_EQ(empty.get(), "");
  SharedString x("pod-a"), y(std::string("pod-a"));
  EXPECT_NE(&x.get(), &y.get());
  EXPECT_EQ(x, y);  // equal values, separate copies
  EXPECT_EQ(x, "pod-a");
  EXPECT_FALSE(x == "pod-b");
}

TEST(SharedValueTest, OwnersOnManyThreadsReleaseItOnce) {
  auto token = std::make_shared<int>(1);
  std::weak_ptr<int> alive = token;
  std::vector<std::thread> threads;
  {
    Shared<Probe> root(Probe{std::move(token)});
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([copy = root] {
        for (int i = 0; i < 20000; ++i) {
          Shared<Probe> a = copy;
          Shared<Probe> b = std::move(a);
          ASSERT_EQ(*b.get().token, 1);
        }
      });
    }
  }  // root goes while the threads still hold and copy it
  for (auto& th : threads) th.join();
  threads.clear();
  EXPECT_TRUE(alive.expired());
}

}  // namespace
}  // namespace feedguard::controller
