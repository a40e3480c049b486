#include "common/flags.h"

#include <gtest/gtest.h>

namespace feedguard {
namespace {

TEST(FlagsTest, ParsesFormsAndRejectsUnknown) {
  Flags f;
  f.Define("state-dir", "/var/lib/feedguard", "where originals are kept");
  f.Define("fence", "", "fence file");
  f.DefineBool("json", "print JSON");
  const char* argv[] = {"agent",  "apply", "--fence", "f.yaml", "--state-dir=/tmp/x",
                        "--json", "extra"};
  ASSERT_TRUE(f.Parse(7, const_cast<char**>(argv), 2).ok());
  EXPECT_EQ(f.Get("fence"), "f.yaml");
  EXPECT_EQ(f.Get("state-dir"), "/tmp/x");
  EXPECT_TRUE(f.GetBool("json"));
  EXPECT_TRUE(f.IsSet("fence"));
  EXPECT_EQ(f.positional(), std::vector<std::string>{"extra"});

  Flags g;
  g.Define("fence", "", "fence file");
  const char* bad[] = {"agent", "--fense", "x"};
  auto st = g.Parse(3, const_cast<char**>(bad), 1);
  EXPECT_EQ(st.message(), "unknown flag --fense (see --help)");
  const char* missing[] = {"agent", "--fence"};
  EXPECT_EQ(g.Parse(2, const_cast<char**>(missing), 1).message(), "--fence needs a value");
  EXPECT_NE(g.Help().find("--fence VALUE"), std::string::npos);
}

TEST(FlagsTest, LastValueWinsBoolsTakeExplicitValuesDashDashEndsFlags) {
  Flags f;
  f.Define("level", "info", "log level");
  f.DefineBool("json", "print JSON");
  f.DefineBool("dry-run", "plan only");
  const char* argv[] = {"x",         "--level", "warn", "--level=debug", "--json=false",
                        "--dry-run", "a",       "--",   "--not-a-flag"};
  ASSERT_TRUE(f.Parse(9, const_cast<char**>(argv), 1).ok());
  EXPECT_EQ(f.Get("level"), "debug");
  EXPECT_FALSE(f.GetBool("json"));
  EXPECT_TRUE(f.IsSet("json"));
  EXPECT_TRUE(f.GetBool("dry-run"));
  EXPECT_EQ(f.positional(), (std::vector<std::string>{"a", "--not-a-flag"}));
  EXPECT_THROW((void)f.Get("undeclared"), std::logic_error);
}

TEST(FlagsTest, TypedGettersReportBadNumbers) {
  Flags f;
  f.Define("stale-after-ms", "60000", "grace period");
  f.Define("count", "", "how many");
  const char* ok[] = {"x", "--count=-3"};
  ASSERT_TRUE(f.Parse(2, const_cast<char**>(ok), 1).ok());
  ASSERT_TRUE(f.GetMillis("stale-after-ms").ok());
  EXPECT_EQ(*f.GetMillis("stale-after-ms"), std::chrono::milliseconds(60000));
  ASSERT_TRUE(f.GetInt("count").ok());
  EXPECT_EQ(*f.GetInt("count"), -3);
  EXPECT_EQ(f.GetMillis("count").status().message(),
            "--count: \"-3\" is not a whole number of milliseconds (0 or more)");

  Flags g;
  g.Define("stale-after-ms", "60000", "grace period");
  for (const char* bad : {"--stale-after-ms=abc", "--stale-after-ms=10x",
                          "--stale-after-ms=", "--stale-after-ms=99999999999999999999999"}) {
    SCOPED_TRACE(bad);
    const char* argv[] = {"x", bad};
    ASSERT_TRUE(g.Parse(2, const_cast<char**>(argv), 1).ok());
    auto v = g.GetMillis("stale-after-ms");
    ASSERT_FALSE(v.ok());
    EXPECT_EQ(v.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(v.status().message().find("is not a whole number of milliseconds"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace feedguard
