// enum_names_testing.h — gtest checks for an EnumTable (feedguard/common/enum_names.h), for the
// tests of each component that defines one.
#pragma once

#include <gtest/gtest.h>

#include <set>

#include "feedguard/common/enum_names.h"

namespace feedguard::testing {

// Every row maps its enumerator to its value and back, and no two rows share a value.
template <typename E, typename V, size_t N>
void ExpectRoundTrip(const EnumTable<E, V, N>& table, V fallback) {
  std::set<V> seen;
  for (const auto& [e, v] : table) {
    EXPECT_EQ(ValueOf(table, e, fallback), v);
    EXPECT_EQ(KeyOf(table, v), e);
    EXPECT_TRUE(seen.insert(v).second) << "two rows map to the same value";
  }
  EXPECT_EQ(seen.size(), N);
}

// Every row's spelling parses back to its enumerator through `parse` (a function returning a
// Result<E>: the components' own Parse functions, which may accept more spellings).
template <typename E, size_t N, typename Parse>
void ExpectParsesEveryName(const EnumNames<E, N>& table, Parse parse) {
  for (const auto& [e, name] : table) {
    auto parsed = parse(name);
    ASSERT_TRUE(parsed.ok()) << name << ": " << parsed.status().ToString();
    EXPECT_EQ(*parsed, e) << name;
  }
}

}  // namespace feedguard::testing
