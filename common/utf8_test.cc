#include "common/utf8.h"

#include <gtest/gtest.h>

namespace feedguard {
namespace {

TEST(Utf8Test, Validity) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("plain ascii /sys/fs/cgroup"));
  EXPECT_TRUE(IsValidUtf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
  EXPECT_FALSE(IsValidUtf8("\xff\xfe"));
  EXPECT_FALSE(IsValidUtf8("\xc3\x28"));          // bad continuation
  EXPECT_FALSE(IsValidUtf8("\xc0\xaf"));          // overlong '/'
  EXPECT_FALSE(IsValidUtf8("\xed\xa0\x80"));      // surrogate
  EXPECT_FALSE(IsValidUtf8("\xf4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(IsValidUtf8("cut \xe2\x82"));      // cut sequence
}

TEST(Utf8Test, EscapeKeepsValidTextAndSpellsOutInvalidBytes) {
  EXPECT_EQ(EscapeInvalidUtf8("pod/\xff\xfe/cpuset.cpus"), "pod/\\xFF\\xFE/cpuset.cpus");
  EXPECT_EQ(EscapeInvalidUtf8("caf\xc3\xa9"), "caf\xc3\xa9");
  EXPECT_EQ(EscapeInvalidUtf8("a\\xFFb"), "a\\xFFb");  // already text: kept
  EXPECT_EQ(EscapeInvalidUtf8("\xc3\x28"), "\\xC3(");
  EXPECT_EQ(EscapeInvalidUtf8("cut \xe2\x82"), "cut \\xE2\\x82");
  for (std::string s : {"\xff", "\xc0\xaf", "\xed\xa0\x80", "x\xf4\x90\x80\x80y"}) {
    EXPECT_TRUE(IsValidUtf8(EscapeInvalidUtf8(s))) << s;
  }
}

}  // namespace
}  // namespace feedguard
