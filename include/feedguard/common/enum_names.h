// enum_names.h — one table per enum for what it maps to (its spelling, or its twin in another
// enum such as the wire's), and the lookups both ways: what a switch per direction used to do.
//
// A table lists every enumerator once, in declaration order. EnumTableComplete() checks that at
// compile time (a static_assert beside the table): the rows are the enumerators 0, 1, …, N-1 in
// order and N is not an enumerator, so an enumerator added without a row fails the build as
// -Wswitch did. (Enums with explicit, non-contiguous values do not fit these tables.)
//
// Example:
//   inline constexpr EnumNames<QosClass, 3> kQosClassNames{{{QosClass::kGuaranteed, "Guaranteed"},
//                                                           {QosClass::kBurstable, "Burstable"},
//                                                           {QosClass::kBestEffort,
//                                                           "BestEffort"}}};
//   static_assert(EnumTableComplete(kQosClassNames));
//   NameOf(kQosClassNames, QosClass::kBurstable, "Unknown")  → "Burstable"
//   FromName(kQosClassNames, "BestEffort")                   → QosClass::kBestEffort
//   FromName(kQosClassNames, "bestEffort")                   → std::nullopt
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string_view>
#include <type_traits>
#include <utility>

namespace feedguard {

// Rows {enumerator, value}, one per enumerator, in declaration order.
template <typename E, typename V, size_t N>
using EnumTable = std::array<std::pair<E, V>, N>;
// Rows {enumerator, spelling}.
template <typename E, size_t N>
using EnumNames = EnumTable<E, std::string_view, N>;

// The value `e` maps to; `fallback` for a value that is no enumerator.
template <typename E, typename V, size_t N>
constexpr V ValueOf(const EnumTable<E, V, N>& table, E e, std::type_identity_t<V> fallback) {
  for (const auto& [key, value] : table)
    if (key == e) return value;
  return fallback;
}

// The enumerator that maps to `value` (the first row's, should two map to it); nullopt for none.
template <typename E, typename V, size_t N>
constexpr std::optional<E> KeyOf(const EnumTable<E, V, N>& table,
                                 const std::type_identity_t<V>& value) {
  for (const auto& [key, v] : table)
    if (v == value) return key;
  return std::nullopt;
}

// The spelling of `e`; `fallback` for a value that is no enumerator.
template <typename E, size_t N>
constexpr std::string_view NameOf(const EnumNames<E, N>& table, E e, std::string_view fallback) {
  return ValueOf(table, e, fallback);
}

// The enumerator spelt `name` (exactly, case and all); nullopt for any other string.
template <typename E, size_t N>
constexpr std::optional<E> FromName(const EnumNames<E, N>& table, std::string_view name) {
  return KeyOf(table, name);
}

namespace enum_names_internal {

// Whether V is a named enumerator of its type. g++ and clang++ spell a template argument that
// is one by its name ("[with auto V = feedguard::QosClass::kBurstable]", clang "[V = …]") and
// any other value as a cast ("V = (feedguard::QosClass)3").
template <auto V>
constexpr bool IsEnumerator() {
  constexpr std::string_view kSignature = __PRETTY_FUNCTION__;
  constexpr std::string_view kArgument = "V = ";
  const size_t at = kSignature.find(kArgument);
  return at != std::string_view::npos && kSignature[at + kArgument.size()] != '(';
}

}  // namespace enum_names_internal

// True when the rows are the enumerators 0..N-1 in order and N is no enumerator of E.
template <typename E, typename V, size_t N>
constexpr bool EnumTableComplete(const EnumTable<E, V, N>& table) {
  static_assert(std::is_enum_v<E>);
  for (size_t i = 0; i < N; ++i) {
    if (static_cast<size_t>(table[i].first) != i) return false;
  }
  return !enum_names_internal::IsEnumerator<static_cast<E>(N)>();
}

}  // namespace feedguard
