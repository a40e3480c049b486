#include "controller/sanitize/sanitize.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace feedguard::controller {
namespace {

TEST(SafeTextTest, KeepsValidUtf8AndReplacesEverythingElse) {
  EXPECT_EQ(SafeText("plain text", 100), "plain text");
  EXPECT_EQ(SafeText("gr\xC3\xBC\xC3\x9F"
                     "e \xE2\x9C\x93",
                     100),
            "gr\xC3\xBC\xC3\x9F"
            "e \xE2\x9C\x93");
  // Lone continuation byte, truncated sequence, overlong '/', surrogate, > U+10FFFF, 0xFF.
  EXPECT_EQ(SafeText("a\x80"
                     "b",
                     100),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(SafeText("a\xE2\x9C", 100), "a\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(SafeText("\xC0\xAF", 100), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(SafeText("\xED\xA0\x80", 100), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(SafeText("\xF4\x90\x80\x80", 100).find('\xF4'), std::string::npos);
  EXPECT_EQ(SafeText("\xFF", 100), "\xEF\xBF\xBD");
  // Control characters (log forging) become spaces.
  EXPECT_EQ(SafeText("line1\nline2\r\t\x1b[31m", 100), "line1 line2   [31m");
}

TEST(SafeTextTest, BoundedAndCutOnACharacterBoundary) {
  std::string big(1 << 20, 'x');
  EXPECT_EQ(SafeText(big, 512).size(), 512u);
  // "ü" is two bytes: a cut at 3 bytes keeps "aü", not half of the second "ü".
  EXPECT_EQ(SafeText("a\xC3\xBC\xC3\xBC", 4), "a\xC3\xBC");
  EXPECT_EQ(SafeText("\xFF\xFF", 4), "\xEF\xBF\xBD");
}

TEST(SafeTextTest, EveryByteStringSerialisesAsJson) {
  // nlohmann::json::dump throws on invalid UTF-8; after SafeText it never does.
  std::string all;
  for (int i = 0; i < 256; ++i) all.push_back(static_cast<char>(i));
  for (int i = 255; i >= 0; --i) all.push_back(static_cast<char>(i));
  nlohmann::json raw = {{"m", all}};
  EXPECT_THROW(raw.dump(), nlohmann::json::type_error);
  nlohmann::json safe = {{"m", SafeText(all, 4096)}};
  EXPECT_NO_THROW(safe.dump());
}

TEST(SafeReasonTest, MapsAnythingOutsideTheCrdPatternToAgentReported) {
  EXPECT_EQ(SafeReason("CgroupNotFound"), "CgroupNotFound");
  EXPECT_EQ(SafeReason("Cpu_Busy2"), "Cpu_Busy2");
  for (const char* bad :
       {"", "cgroup not found", "9Lives", "Trailing_", "Has-Dash", "Ünïcode", "New\nLine", "a:b"}) {
    EXPECT_EQ(SafeReason(bad), kAgentReportedReason) << bad;
  }
  EXPECT_EQ(SafeReason(std::string(128, 'A')), std::string(128, 'A'));
  EXPECT_EQ(SafeReason(std::string(129, 'A')), kAgentReportedReason);
}

TEST(DnsSubdomainTest, NodeNames) {
  EXPECT_TRUE(IsDnsSubdomain("gpu-1"));
  EXPECT_TRUE(IsDnsSubdomain("ip-10-0-0-1.ec2.internal"));
  EXPECT_TRUE(IsDnsSubdomain(std::string(253, 'a')));
  EXPECT_FALSE(IsDnsSubdomain(std::string(254, 'a')));
  for (const char* bad : {"", "Gpu", "-a", "a-", "a..b", ".a", "a.", "a_b", "a/b", "a b"}) {
    EXPECT_FALSE(IsDnsSubdomain(bad)) << bad;
  }
}

}  // namespace
}  // namespace feedguard::controller
