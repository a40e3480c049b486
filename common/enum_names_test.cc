#include "feedguard/common/enum_names.h"

#include <gtest/gtest.h>

#include "common/enum_names_testing.h"
#include "feedguard/common/qos.h"
#include "feedguard/common/qos_wire.h"
#include "feedguard/common/status.h"

namespace feedguard {
namespace {

using testing::ExpectRoundTrip;

enum class Colour { kRed, kGreen, kBlue };
constexpr EnumNames<Colour, 3> kColours{
    {{Colour::kRed, "red"}, {Colour::kGreen, "green"}, {Colour::kBlue, "blue"}}};
static_assert(EnumTableComplete(kColours));

// What the static_assert beside every table catches.
constexpr EnumNames<Colour, 2> kMissingLast{{{Colour::kRed, "red"}, {Colour::kGreen, "green"}}};
static_assert(!EnumTableComplete(kMissingLast));
constexpr EnumNames<Colour, 2> kMissingMiddle{{{Colour::kRed, "red"}, {Colour::kBlue, "blue"}}};
static_assert(!EnumTableComplete(kMissingMiddle));
constexpr EnumNames<Colour, 3> kOutOfOrder{
    {{Colour::kRed, "red"}, {Colour::kBlue, "blue"}, {Colour::kGreen, "green"}}};
static_assert(!EnumTableComplete(kOutOfOrder));
enum class Sparse { kA = 0, kB = 2 };
constexpr EnumNames<Sparse, 2> kSparse{{{Sparse::kA, "a"}, {Sparse::kB, "b"}}};
static_assert(!EnumTableComplete(kSparse));

// The lookups are constexpr.
static_assert(NameOf(kColours, Colour::kGreen, "?") == "green");
static_assert(FromName(kColours, "blue") == Colour::kBlue);
static_assert(!FromName(kColours, "Blue").has_value());

TEST(EnumNamesTest, NameAndBack) {
  ExpectRoundTrip(kColours, std::string_view("?"));
  EXPECT_EQ(NameOf(kColours, static_cast<Colour>(7), "?"), "?");
  EXPECT_EQ(FromName(kColours, ""), std::nullopt);
  EXPECT_EQ(FromName(kColours, "red "), std::nullopt);
}

TEST(EnumNamesTest, ValueTable) {
  constexpr EnumTable<Colour, int, 3> kCodes{
      {{Colour::kRed, 10}, {Colour::kGreen, 20}, {Colour::kBlue, 30}}};
  static_assert(EnumTableComplete(kCodes));
  ExpectRoundTrip(kCodes, -1);
  EXPECT_EQ(ValueOf(kCodes, static_cast<Colour>(9), -1), -1);
  EXPECT_EQ(KeyOf(kCodes, 15), std::nullopt);
}

TEST(EnumNamesTest, QosClass) {
  ExpectRoundTrip(kQosClassNames, std::string_view("Unknown"));
  EXPECT_EQ(QosClassName(QosClass::kGuaranteed), "Guaranteed");
  EXPECT_EQ(QosClassName(QosClass::kBurstable), "Burstable");
  EXPECT_EQ(QosClassName(QosClass::kBestEffort), "BestEffort");
  EXPECT_EQ(QosClassName(static_cast<QosClass>(3)), "Unknown");
  EXPECT_EQ(QosClassFromName("BestEffort"), QosClass::kBestEffort);
  EXPECT_EQ(QosClassFromName("besteffort"), std::nullopt);
  EXPECT_EQ(QosClassFromName("Unknown"), std::nullopt);
}

TEST(EnumNamesTest, QosClassWire) {
  ExpectRoundTrip(kQosClassWire, v1::QOS_CLASS_UNSPECIFIED);
  EXPECT_EQ(QosClassToWire(QosClass::kGuaranteed), v1::GUARANTEED);
  EXPECT_EQ(QosClassToWire(QosClass::kBurstable), v1::BURSTABLE);
  EXPECT_EQ(QosClassToWire(QosClass::kBestEffort), v1::BEST_EFFORT);
  EXPECT_EQ(QosClassFromWire(v1::GUARANTEED), QosClass::kGuaranteed);
  EXPECT_EQ(QosClassFromWire(v1::BEST_EFFORT), QosClass::kBestEffort);
  EXPECT_EQ(QosClassFromWire(v1::QOS_CLASS_UNSPECIFIED), QosClass::kBurstable);
  EXPECT_EQ(QosClassFromWire(static_cast<v1::QosClass>(42)), QosClass::kBurstable);
}

TEST(EnumNamesTest, StatusCode) {
  ExpectRoundTrip(kStatusCodeNames, std::string_view("Unknown"));
  EXPECT_EQ(StatusCodeName(StatusCode::kOk), "OK");
  EXPECT_EQ(StatusCodeName(StatusCode::kInternal), "Internal");
  EXPECT_EQ(StatusCodeName(static_cast<StatusCode>(99)), "Unknown");
  EXPECT_EQ(InvalidArgument("x").ToString(), "InvalidArgument: x");
  EXPECT_EQ(FromName(kStatusCodeNames, "Ok"), std::nullopt);
}

}  // namespace
}  // namespace feedguard
