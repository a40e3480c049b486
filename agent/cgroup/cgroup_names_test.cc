// The cgroup and kubelet enums' spellings (kernel_facts.h, kubelet_facts.h, cgroups.h).
#include <gtest/gtest.h>

#include "agent/cgroup/cgroups.h"
#include "agent/cgroup/kernel_facts.h"
#include "agent/cgroup/kubelet_facts.h"
#include "common/enum_names_testing.h"

namespace feedguard::agent::cgroup {
namespace {

using feedguard::testing::ExpectRoundTrip;

TEST(CgroupNamesTest, Version) {
  ExpectRoundTrip(kCgroupVersionNames, std::string_view("v2"));
  EXPECT_EQ(CgroupVersionName(CgroupVersion::kV1), "v1");
  EXPECT_EQ(CgroupVersionName(CgroupVersion::kV2), "v2");
  EXPECT_EQ(FromName(kCgroupVersionNames, "v3"), std::nullopt);
}

TEST(CgroupNamesTest, Knob) {
  ExpectRoundTrip(kKnobNames, std::string_view("unknown"));
  EXPECT_EQ(KnobName(Knob::kWeight), "weight");
  EXPECT_EQ(KnobName(Knob::kCpusetCpus), "cpus");
  EXPECT_EQ(KnobName(Knob::kCpusetMems), "mems");
  EXPECT_EQ(KnobName(static_cast<Knob>(6)), "unknown");
}

TEST(CgroupNamesTest, Driver) {
  ExpectRoundTrip(kKubeletDriverNames, std::string_view("cgroupfs"));
  for (const auto& [d, name] : kKubeletDriverNames) EXPECT_EQ(DriverName(d), name);
  feedguard::testing::ExpectParsesEveryName(kKubeletDriverNames, ParseDriver);
  auto bad = ParseDriver("Systemd");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "unknown cgroup driver \"Systemd\" (want systemd or cgroupfs)");
}

TEST(CgroupNamesTest, Runtime) {
  ExpectRoundTrip(kRuntimeNames, std::string_view("unknown"));
  for (const auto& [r, name] : kRuntimeNames) EXPECT_EQ(RuntimeName(r), name);
  feedguard::testing::ExpectParsesEveryName(kRuntimeNames, ParseRuntime);
  auto crio = ParseRuntime("cri-o");  // CRI-O's scheme in container ids
  ASSERT_TRUE(crio.ok());
  EXPECT_EQ(*crio, Runtime::kCrio);
  EXPECT_EQ(RuntimeName(Runtime::kCrio), "crio");
  auto bad = ParseRuntime("podman");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "unknown container runtime \"podman\" (want containerd, crio or docker)");
}

}  // namespace
}  // namespace feedguard::agent::cgroup
