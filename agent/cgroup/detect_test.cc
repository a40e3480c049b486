#include "agent/cgroup/detect.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "agent/cgroup/fake_tree.h"

namespace feedguard::agent::cgroup {
namespace {

namespace fs = std::filesystem;

// The hybrid layout of this project's CI machines (abridged /proc/self/mountinfo).
constexpr char kHybrid[] =
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
    "33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct\n"
    "34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset\n"
    "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
constexpr char kComounted[] =
    "25 24 0:22 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:9 - cgroup cgroup "
    "rw,cpu,cpuacct\n"
    "26 24 0:23 / /sys/fs/cgroup/cpuset rw,nosuid shared:10 - cgroup cgroup rw,cpuset\n";
constexpr char kPureV2[] =
    "24 1 0:21 / /sys/fs/cgroup rw,nosuid,nodev master:4 - cgroup2 cgroup2 "
    "rw,nsdelegate,memory_recursiveprot\n";

class DetectTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() / ("fg-detect-" + std::to_string(::getpid()))).string();
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    std::string p = dir_ + "/" + name;
    std::ofstream(p) << text;
    return p;
  }
  // The layout detected from the mount table `mountinfo`, version and driver given.
  Result<CgroupLayout> DetectFromMountInfo(const std::string& mountinfo, CgroupVersion version,
                                           KubeletDriver driver) {
    CgroupOptions o;
    o.mountinfo_path = Write("mountinfo", mountinfo);
    o.version = version;
    o.driver = driver;
    return DetectLayout(o);
  }
  struct V1Mounts {
    std::string cpu, cpuacct, cpuset;
  };
  // Detected from `mountinfo` as v1 with `driver`: the controllers' mounts are `want`.
  void ExpectV1Mounts(const std::string& mountinfo, KubeletDriver driver, const V1Mounts& want) {
    auto l = DetectFromMountInfo(mountinfo, CgroupVersion::kV1, driver);
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    EXPECT_EQ(l->cpu_mount, want.cpu);
    EXPECT_EQ(l->cpuacct_mount, want.cpuacct);
    EXPECT_EQ(l->cpuset_mount, want.cpuset);
  }
  std::string dir_;
};

TEST_F(DetectTest, ParsesMountInfoWithOptionalFieldsAndEscapes) {
  auto m = ParseMountInfo(std::string(kComounted) +
                          "27 24 0:24 / /mnt/with\\040space rw - cgroup2 cgroup2 rw\n");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->size(), 3u);
  EXPECT_EQ((*m)[0].mount_point, "/sys/fs/cgroup/cpu,cpuacct");
  EXPECT_EQ((*m)[0].fs_type, "cgroup");
  EXPECT_EQ((*m)[0].super_options, (std::vector<std::string>{"rw", "cpu", "cpuacct"}));
  EXPECT_EQ((*m)[2].mount_point, "/mnt/with space");
  EXPECT_FALSE(ParseMountInfo("1 2 3\n").ok());
}

TEST_F(DetectTest, HybridHostIsV1ForCpuAndCpuset) {
  // v1 given: plain dirs have no cgroup magic; mounts still come from mountinfo.
  ExpectV1Mounts(kHybrid, KubeletDriver::kCgroupfs,
                 {"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpuacct", "/sys/fs/cgroup/cpuset"});
}

TEST_F(DetectTest, ComountedCpuCpuacct) {
  ExpectV1Mounts(
      kComounted, KubeletDriver::kSystemd,
      {"/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpuset"});
}

TEST_F(DetectTest, PureV2UsesTheUnifiedMountForEverything) {
  auto l = DetectFromMountInfo(kPureV2, CgroupVersion::kV2, KubeletDriver::kSystemd);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->version, CgroupVersion::kV2);
  EXPECT_EQ(l->cpu_mount, "/sys/fs/cgroup");
  EXPECT_EQ(l->cpuset_mount, "/sys/fs/cgroup");
}

TEST_F(DetectTest, NoCpuMountIsNotFound) {
  CgroupOptions o;
  o.mountinfo_path = Write("mountinfo", "1 0 0:1 / / rw - ext4 /dev/sda1 rw\n");
  EXPECT_EQ(DetectLayout(o).status().code(), StatusCode::kNotFound);
}

TEST_F(DetectTest, StatfsMagicTellsVersion) {
  // A temp dir is not a cgroup filesystem.
  EXPECT_EQ(VersionByMagic(dir_).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(VersionByMagic(dir_ + "/nope").status().code(), StatusCode::kNotFound);
  if (fs::exists("/sys/fs/cgroup/cpu/cpu.shares")) {
    EXPECT_EQ(VersionByMagic("/sys/fs/cgroup/cpu").value(), CgroupVersion::kV1);
  }
  if (fs::exists("/sys/fs/cgroup/unified/cgroup.controllers")) {
    EXPECT_EQ(VersionByMagic("/sys/fs/cgroup/unified").value(), CgroupVersion::kV2);
  }
}

TEST_F(DetectTest, DriverFromWhatExistsThenKubeletConfig) {
  auto fake = MakeFakeLayout(dir_, CgroupVersion::kV1, KubeletDriver::kSystemd, "r");
  ASSERT_TRUE(fake.ok());
  CgroupOptions o;
  o.version = CgroupVersion::kV1;
  o.cgroup_root = "/r/";
  o.cpu_mount = fake->cpu_mount;
  o.cpuacct_mount = fake->cpuacct_mount;
  o.cpuset_mount = fake->cpuset_mount;
  // Neither exists and no config → NotFound telling the user to set it.
  EXPECT_EQ(DetectLayout(o).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(MakeFakeCgroupDir(fake->cpu_mount + "/r/kubepods", CgroupVersion::kV1, "cpu").ok());
  auto l = DetectLayout(o);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->driver, KubeletDriver::kCgroupfs);
  EXPECT_EQ(l->cgroup_root, "r");
  EXPECT_TRUE(l->caps.cpu_idle);
  // Both exist: the kubelet config decides.
  ASSERT_TRUE(
      MakeFakeCgroupDir(fake->cpu_mount + "/r/kubepods.slice", CgroupVersion::kV1, "cpu").ok());
  EXPECT_EQ(DetectLayout(o).status().code(), StatusCode::kNotFound);
  o.kubelet_config_path = Write("kubelet.yaml",
                                "apiVersion: kubelet.config.k8s.io/v1beta1\n"
                                "kind: KubeletConfiguration\ncgroupDriver: systemd\n");
  l = DetectLayout(o);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->driver, KubeletDriver::kSystemd);
  // A forced driver wins over everything.
  o.driver = KubeletDriver::kCgroupfs;
  EXPECT_EQ(DetectLayout(o).value().driver, KubeletDriver::kCgroupfs);
}

TEST_F(DetectTest, KubeletConfigErrors) {
  EXPECT_EQ(DriverFromKubeletConfig(dir_ + "/none").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(
      DriverFromKubeletConfig(Write("a.yaml", "kind: KubeletConfiguration\n")).status().code(),
      StatusCode::kNotFound);
  EXPECT_EQ(DriverFromKubeletConfig(Write("b.yaml", "cgroupDriver: upstart\n")).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(DriverFromKubeletConfig(Write("c.json", "{\"cgroupDriver\": \"cgroupfs\"}")).value(),
            KubeletDriver::kCgroupfs);
  // A byte bomb (a 256 KiB scalar under 1,000 aliases) is refused, not expanded.
  std::string bomb = "cgroupDriver: systemd\nx: &a \"" + std::string(256 << 10, 'x') + "\"\ny:\n";
  for (int i = 0; i < 1000; ++i) bomb += "- *a\n";
  auto r = DriverFromKubeletConfig(Write("bomb.yaml", bomb));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("once aliases are expanded"), std::string::npos)
      << r.status().ToString().substr(0, 300);
}

TEST_F(DetectTest, CapabilitiesFollowTheFiles) {
  FakeCgroupOptions fo;
  fo.cpu_idle = false;
  fo.burst = false;
  auto fake = MakeFakeLayout(dir_, CgroupVersion::kV2, KubeletDriver::kSystemd, "", fo);
  ASSERT_TRUE(fake.ok());
  ASSERT_TRUE(
      MakeFakeCgroupDir(fake->cpu_mount + "/kubepods.slice", CgroupVersion::kV2, "", fo).ok());
  Capabilities c = ProbeCapabilities(*fake);
  EXPECT_FALSE(c.cpu_idle);
  EXPECT_FALSE(c.burst);
  EXPECT_TRUE(c.psi);
  std::ofstream(fake->cpu_mount + "/kubepods.slice/cpu.idle") << "0\n";
  EXPECT_TRUE(ProbeCapabilities(*fake).cpu_idle);
}

TEST_F(DetectTest, RealHostIfPresent) {
  if (!fs::exists("/sys/fs/cgroup/cpu/cpu.shares") &&
      !fs::exists("/sys/fs/cgroup/cgroup.controllers")) {
    GTEST_SKIP() << "no cgroup v1 cpu mount or v2 root on this host";
  }
  CgroupOptions o;
  o.driver = KubeletDriver::kCgroupfs;  // no kubelet here
  auto l = DetectLayout(o);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  if (fs::exists("/sys/fs/cgroup/cpu/cpu.shares")) {
    EXPECT_EQ(l->version, CgroupVersion::kV1);  // hybrid: v1 wins for cpu
    EXPECT_EQ(l->cpu_mount, "/sys/fs/cgroup/cpu");
    EXPECT_EQ(l->caps.cpu_idle, fs::exists("/sys/fs/cgroup/cpu/cpu.idle"));
  }
}

}  // namespace
}  // namespace feedguard::agent::cgroup
