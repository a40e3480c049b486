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

}  // namespace
}  // namespace feedguard
