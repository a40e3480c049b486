// cpu_manager_state_test.cc — parsing kubelet's cpu_manager_state.
#include "agent/planner/cpu_manager_state.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace feedguard::agent {
namespace {

TEST(CpuManagerStateTest, ParsesStaticPolicy) {
  auto s = ParseCpuManagerState(
      R"({"policyName":"static","defaultCpuSet":"0-1,6-15","entries":{)"
      R"("uid-a":{"main":"2-3","side":"4"},"uid-b":{"c":"5"}},"checksum":1234567})");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->policy_name, "static");
  EXPECT_EQ(s->default_cpus.ToString(), "0-1,6-15");
  EXPECT_EQ(s->ExclusiveCpus().ToString(), "2-5");
  EXPECT_TRUE(s->OwnsCpusOf("uid-a"));
  EXPECT_FALSE(s->OwnsCpusOf("uid-c"));
  EXPECT_EQ(s->entries.at("uid-a").at("side").ToString(), "4");
}

TEST(CpuManagerStateTest, NonePolicyHasNoExclusiveCpus) {
  auto s = ParseCpuManagerState(R"({"policyName":"none","defaultCpuSet":"","checksum":1})");
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->ExclusiveCpus().empty());
}

TEST(CpuManagerStateTest, RejectsMalformed) {
  EXPECT_FALSE(ParseCpuManagerState("not json").ok());
  EXPECT_FALSE(ParseCpuManagerState("[]").ok());
  EXPECT_FALSE(ParseCpuManagerState(R"({"entries":{"u":{"c":"3-x"}}})").ok());
  EXPECT_FALSE(ParseCpuManagerState(R"({"entries":{"u":"2"}})").ok());
  EXPECT_FALSE(ParseCpuManagerState(R"({"defaultCpuSet":7})").ok());
}

TEST(CpuManagerStateTest, LoadMissingFileIsEmptyAndFileIsRead) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("fg-cpumgr-" + std::to_string(getpid()))).string();
  std::filesystem::create_directories(dir);
  auto missing = LoadCpuManagerState(dir + "/absent");
  ASSERT_TRUE(missing.ok());
  EXPECT_TRUE(missing->entries.empty());
  std::ofstream(dir + "/state") << R"({"policyName":"static","entries":{"u":{"c":"7"}}})";
  auto loaded = LoadCpuManagerState(dir + "/state");
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->ExclusiveCpus().ToString(), "7");
  std::ofstream(dir + "/bad") << "{";
  EXPECT_FALSE(LoadCpuManagerState(dir + "/bad").ok());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace feedguard::agent
