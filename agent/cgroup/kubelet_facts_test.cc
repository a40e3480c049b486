#include "agent/cgroup/kubelet_facts.h"

#include <gtest/gtest.h>

namespace feedguard::agent::cgroup {
namespace {

constexpr char kUid[] = "0b5e4c7a-1f2d-4e3a-9c8b-7d6e5f4a3b2c";
constexpr char kUidEsc[] = "0b5e4c7a_1f2d_4e3a_9c8b_7d6e5f4a3b2c";

TEST(KubeletFactsTest, SharesFormula) {
  EXPECT_EQ(MilliCpuToShares(0), 2u);  // no request → minimum
  EXPECT_EQ(MilliCpuToShares(1), 2u);  // 1*1024/1000 = 1 → clamped up
  EXPECT_EQ(MilliCpuToShares(2), 2u);
  EXPECT_EQ(MilliCpuToShares(3), 3u);
  EXPECT_EQ(MilliCpuToShares(100), 102u);
  EXPECT_EQ(MilliCpuToShares(250), 256u);
  EXPECT_EQ(MilliCpuToShares(1000), 1024u);
  EXPECT_EQ(MilliCpuToShares(2000), 2048u);
  EXPECT_EQ(MilliCpuToShares(256000), 262144u);
  EXPECT_EQ(MilliCpuToShares(1000000), 262144u);  // clamped
}

TEST(KubeletFactsTest, QuotaFormula) {
  EXPECT_EQ(MilliCpuToQuota(0), -1);
  EXPECT_EQ(MilliCpuToQuota(1), 1000);  // 100 → raised to the 1 ms minimum
  EXPECT_EQ(MilliCpuToQuota(10), 1000);
  EXPECT_EQ(MilliCpuToQuota(11), 1100);
  EXPECT_EQ(MilliCpuToQuota(500), 50000);
  EXPECT_EQ(MilliCpuToQuota(2000), 200000);
  EXPECT_EQ(MilliCpuToQuota(1500, 50000), 75000);
}

TEST(KubeletFactsTest, WeightMapEndpointsAndKnownValues) {
  EXPECT_EQ(SharesToWeight(2), 1u);
  EXPECT_EQ(SharesToWeight(262144), 10000u);
  EXPECT_EQ(SharesToWeight(1024), 39u);  // 1 + 1022*9999/262142 = 1 + 38.98
  EXPECT_EQ(SharesToWeight(0), 1u);      // clamped into range
  EXPECT_EQ(SharesToWeight(1u << 30), 10000u);
}

TEST(KubeletFactsTest, WeightToSharesRoundTripsEveryWeight) {
  for (uint64_t w = 1; w <= 10000; ++w) {
    uint64_t s = WeightToShares(w);
    ASSERT_GE(s, 2u);
    ASSERT_LE(s, 262144u);
    ASSERT_EQ(SharesToWeight(s), w) << "w=" << w << " shares=" << s;
    if (s > 2) {
      ASSERT_LT(SharesToWeight(s - 1), w) << "not the smallest shares for w=" << w;
    }
  }
  EXPECT_EQ(WeightToShares(0), 2u);
  EXPECT_EQ(WeightToShares(20000), 262144u);
}

TEST(KubeletFactsTest, SystemdPodPaths) {
  EXPECT_EQ(PodRelPath(KubeletDriver::kSystemd, "", QosClass::kGuaranteed, kUid),
            std::string("kubepods.slice/kubepods-pod") + kUidEsc + ".slice");
  EXPECT_EQ(PodRelPath(KubeletDriver::kSystemd, "", QosClass::kBurstable, kUid),
            std::string("kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod") +
                kUidEsc + ".slice");
  EXPECT_EQ(PodRelPath(KubeletDriver::kSystemd, "", QosClass::kBestEffort, kUid),
            std::string("kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod") +
                kUidEsc + ".slice");
}

TEST(KubeletFactsTest, CgroupfsPodPathsKeepDashes) {
  EXPECT_EQ(PodRelPath(KubeletDriver::kCgroupfs, "", QosClass::kGuaranteed, kUid),
            std::string("kubepods/pod") + kUid);
  EXPECT_EQ(PodRelPath(KubeletDriver::kCgroupfs, "", QosClass::kBurstable, kUid),
            std::string("kubepods/burstable/pod") + kUid);
  EXPECT_EQ(PodRelPath(KubeletDriver::kCgroupfs, "", QosClass::kBestEffort, kUid),
            std::string("kubepods/besteffort/pod") + kUid);
}

TEST(KubeletFactsTest, CgroupRootPrefixesEverything) {
  EXPECT_EQ(NormalizeCgroupRoot("/"), "");
  EXPECT_EQ(NormalizeCgroupRoot("//a/b//"), "a/b");
  EXPECT_EQ(KubepodsRelPath(KubeletDriver::kCgroupfs, "/fg-demo/"), "fg-demo/kubepods");
  EXPECT_EQ(PodRelPath(KubeletDriver::kCgroupfs, "fg-demo", QosClass::kBurstable, "u"),
            "fg-demo/kubepods/burstable/podu");
  EXPECT_EQ(PodRelPath(KubeletDriver::kSystemd, "/", QosClass::kGuaranteed, "a-b"),
            "kubepods.slice/kubepods-poda_b.slice");
}

TEST(KubeletFactsTest, QosTiers) {
  EXPECT_EQ(
      QosTierRelPaths(KubeletDriver::kSystemd, "r"),
      (std::vector<std::string>{"r/kubepods.slice", "r/kubepods.slice/kubepods-burstable.slice",
                                "r/kubepods.slice/kubepods-besteffort.slice"}));
  EXPECT_EQ(QosTierRelPaths(KubeletDriver::kCgroupfs, ""),
            (std::vector<std::string>{"kubepods", "kubepods/burstable", "kubepods/besteffort"}));
}

TEST(KubeletFactsTest, ContainerIdParsing) {
  auto c = ParseContainerId("containerd://abc123");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->runtime, Runtime::kContainerd);
  EXPECT_EQ(c->id, "abc123");
  c = ParseContainerId("cri-o://def");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->runtime, Runtime::kCrio);
  EXPECT_FALSE(ParseContainerId("abc").ok());
  c = ParseContainerId("abc", Runtime::kCrio);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->runtime, Runtime::kCrio);
  EXPECT_EQ(ParseContainerId("rkt://x").status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(ParseContainerId("containerd://").ok());
  EXPECT_FALSE(ParseContainerId("containerd://../x").ok());
}

TEST(KubeletFactsTest, ContainerLeafNames) {
  ContainerRef containerd{Runtime::kContainerd, "abc"};
  ContainerRef crio{Runtime::kCrio, "abc"};
  EXPECT_EQ(ContainerLeafNames(KubeletDriver::kSystemd, containerd)[0], "cri-containerd-abc.scope");
  EXPECT_EQ(ContainerLeafNames(KubeletDriver::kCgroupfs, containerd)[0], "abc");
  EXPECT_EQ(ContainerLeafNames(KubeletDriver::kSystemd, crio)[0], "crio-abc.scope");
  EXPECT_EQ(ContainerLeafNames(KubeletDriver::kCgroupfs, crio)[0], "crio-abc");
  EXPECT_EQ(CrioConmonLeafName(KubeletDriver::kSystemd, "abc"), "crio-conmon-abc.scope");
  EXPECT_EQ(CrioConmonLeafName(KubeletDriver::kCgroupfs, "abc"), "crio-conmon-abc");
  EXPECT_EQ(kCrunContainerChild, "container");
}

TEST(KubeletFactsTest, NamesParseBack) {
  for (auto d : {KubeletDriver::kSystemd, KubeletDriver::kCgroupfs}) {
    EXPECT_EQ(ParseDriver(DriverName(d)).value(), d);
  }
  for (auto r : {Runtime::kContainerd, Runtime::kCrio, Runtime::kDocker}) {
    EXPECT_EQ(ParseRuntime(RuntimeName(r)).value(), r);
  }
  for (auto q : {QosClass::kGuaranteed, QosClass::kBurstable, QosClass::kBestEffort}) {
    EXPECT_EQ(ParseQos(QosClassName(q)).value(), q);
  }
  EXPECT_FALSE(ParseDriver("openrc").ok());
}

}  // namespace
}  // namespace feedguard::agent::cgroup

namespace feedguard::agent::cgroup {
namespace {

TEST(KubeletFactsTest, PodUidFromDirNameInvertsPodRelPath) {
  const std::string uid = "0b5c1c1e-8f4e-4d0a-9a55-1f7c2a3b4c5d";
  for (KubeletDriver d : {KubeletDriver::kCgroupfs, KubeletDriver::kSystemd}) {
    for (QosClass q : {QosClass::kGuaranteed, QosClass::kBurstable, QosClass::kBestEffort}) {
      const std::string rel = PodRelPath(d, "/", q, uid);
      const std::string leaf = rel.substr(rel.rfind('/') + 1);
      EXPECT_EQ(PodUidFromDirName(d, leaf), uid) << leaf;
    }
  }
  for (const char* not_a_pod :
       {"burstable", "besteffort", "kubepods-burstable.slice", "pod", "podXYZ",
        "cri-containerd-ab.scope", "kubepods-pod.slice", "system.slice", "pod12/34"}) {
    EXPECT_FALSE(PodUidFromDirName(KubeletDriver::kCgroupfs, not_a_pod)) << not_a_pod;
    EXPECT_FALSE(PodUidFromDirName(KubeletDriver::kSystemd, not_a_pod)) << not_a_pod;
  }
}

}  // namespace
}  // namespace feedguard::agent::cgroup
