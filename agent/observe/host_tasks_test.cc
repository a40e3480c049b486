#include "agent/observe/host_tasks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#include "agent/cgroup/fake_tree.h"
#include "agent/cgroup/kubelet_facts.h"
#include "agent/observe/schedstat.h"
#include "common/strings.h"
#include "tests/fixtures/temp_dir.h"

namespace feedguard::agent::observe {
namespace {

using cgroup::CgroupVersion;
using cgroup::KubeletDriver;
namespace fs = std::filesystem;

constexpr char kA[] = "11111111-aaaa-4bbb-8ccc-00000000000a";
constexpr char kB[] = "11111111-aaaa-4bbb-8ccc-00000000000b";
constexpr char kOther[] = "11111111-aaaa-4bbb-8ccc-00000000000c";  // a pod not observed
constexpr char kAgent[] = "11111111-aaaa-4bbb-8ccc-0000000000ff";

TEST(CpuCgroupOfTest, TheCpuHierarchysLineOnV1AndTheUnifiedOneOnV2) {
  // v1 with cpu and cpuacct co-mounted, beside named and other hierarchies (and a hybrid
  // host's unified line, which v1 does not take).
  const std::string comounted =
      "12:pids:/kubepods/burstable/podX/c1\n"
      "4:cpu,cpuacct:/kubepods/burstable/podX/c1\n"
      "3:cpuset:/kubepods/burstable/podX/c1\n"
      "1:name=systemd:/kubepods/burstable/podX/c1\n"
      "0::/system.slice/containerd.service\n";
  EXPECT_EQ(CpuCgroupOf(comounted, CgroupVersion::kV1), "/kubepods/burstable/podX/c1");
  EXPECT_EQ(CpuCgroupOf(comounted, CgroupVersion::kV2), "/system.slice/containerd.service");
  // Separate cpu and cpuacct hierarchies: cpu's line, wherever it is.
  EXPECT_EQ(CpuCgroupOf("2:cpuacct:/acct\n1:cpu:/cpu-path\n", CgroupVersion::kV1), "/cpu-path");
  EXPECT_EQ(CpuCgroupOf("2:cpuacct:/acct\n", CgroupVersion::kV1), "/acct");
  // "cpuset" is not "cpu"; a path may hold ':'.
  EXPECT_EQ(CpuCgroupOf("3:cpuset:/a\n", CgroupVersion::kV1), std::nullopt);
  EXPECT_EQ(CpuCgroupOf("0::/a:b/c", CgroupVersion::kV2), "/a:b/c");
  EXPECT_EQ(CpuCgroupOf("", CgroupVersion::kV2), std::nullopt);
  EXPECT_EQ(CpuCgroupOf("garbage\n1:x\n", CgroupVersion::kV1), std::nullopt);
}

TEST(ResolveCgroupPathTest, RelativeToTheHierarchyRootFromTheReadersNamespace) {
  EXPECT_EQ(ResolveCgroupPath("/kubepods/pod1/c1", ""), "kubepods/pod1/c1");
  EXPECT_EQ(ResolveCgroupPath("/", ""), "");
  // A private namespace rooted at the agent's container: up to the common ancestor, then down.
  const std::string agent =
      "kubepods.slice/kubepods-besteffort.slice/p.slice/cri-containerd-a.scope";
  EXPECT_EQ(ResolveCgroupPath("/../../../kubepods-burstable.slice/q.slice/c.scope", agent),
            "kubepods.slice/kubepods-burstable.slice/q.slice/c.scope");
  EXPECT_EQ(ResolveCgroupPath("/../../o.slice/c.scope", agent),
            "kubepods.slice/kubepods-besteffort.slice/o.slice/c.scope")
      << "a pod of the agent's own tier";
  EXPECT_EQ(ResolveCgroupPath("/../../../../init.scope", agent), "init.scope");
  EXPECT_EQ(ResolveCgroupPath("/", agent), agent) << "the reader's own cgroup";
  EXPECT_EQ(ResolveCgroupPath("/../../../../../x", agent), std::nullopt) << "above the root";
  EXPECT_EQ(ResolveCgroupPath("/../x", ""), std::nullopt);
}

TEST(ProcRootTest, OnlyThisProcesssOwnProcfsIsItsPidNamespaces) {
  EXPECT_TRUE(ProcRootIsOwnPidNamespace("/proc"));
  feedguard::testing::TempDir dir;
  EXPECT_FALSE(ProcRootIsOwnPidNamespace(dir.path())) << "no self";
  fs::create_directory_symlink("1", dir.path() + "/self");  // the host's init, say
  EXPECT_EQ(ProcRootIsOwnPidNamespace(dir.path()), ::getpid() == 1);
  EXPECT_FALSE(ProcRootIsOwnPidNamespace(dir.path() + "/missing"));
}

// A host's /proc in a temp dir and a node's cgroup layout (only its version, driver and mount
// matter here; the agent's own cgroup is made where a test needs it).
class HostTasksTest : public ::testing::TestWithParam<CgroupVersion> {
 protected:
  void SetUp() override {
    const bool v1 = GetParam() == CgroupVersion::kV1;
    // v1 fleets: cgroupfs driver with containerd; v2: systemd.
    auto l = cgroup::MakeFakeLayout(dir_.path() + "/cg", GetParam(),
                                    v1 ? KubeletDriver::kCgroupfs : KubeletDriver::kSystemd, "/");
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    layout_ = *l;
    proc_ = dir_.path() + "/proc";
    fs::create_directories(proc_);
    cgroup::Put(proc_ + "/stat", "cpu  0 0 0 0 0 0 0 0 0 0\n");
    fs::create_directories(proc_ + "/driver/nvidia/gpus");
  }
  bool v1() const { return GetParam() == CgroupVersion::kV1; }
  std::string Pod(const std::string& uid, QosClass q = QosClass::kBurstable) const {
    return cgroup::PodRelPath(layout_.driver, "/", q, uid);
  }
  // A container's leaf as each driver names it.
  std::string Ctr(const std::string& id) const {
    return v1() ? id : "cri-containerd-" + id + ".scope";
  }
  // Process `pid` in cgroup `shown` (as the reader sees it), with threads `tids` (pid itself if
  // none given), each with a schedstat whose run delay is `delay_ns`.
  void Process(int pid, const std::string& shown, std::vector<int> tids = {},
               uint64_t delay_ns = 1000) {
    const std::string dir = proc_ + "/" + std::to_string(pid);
    fs::create_directories(dir);
    cgroup::Put(dir + "/cgroup",
                v1() ? "11:memory:" + shown + "\n4:cpu,cpuacct:" + shown + "\n1:name=systemd:/\n"
                     : "0::" + shown + "\n");
    if (tids.empty()) tids.push_back(pid);
    for (int tid : tids) {
      fs::create_directories(dir + "/task/" + std::to_string(tid));
      cgroup::Put(dir + "/task/" + std::to_string(tid) + "/schedstat",
                  "100 " + std::to_string(delay_ns) + " 3\n");
    }
  }
  static std::vector<int> Sorted(std::vector<int> v) {
    std::sort(v.begin(), v.end());
    return v;
  }

  feedguard::testing::TempDir dir_;
  cgroup::CgroupLayout layout_;
  std::string proc_;
};

// The agent shares the host's cgroup namespace (v1 with containerd, or an agent on the host):
// paths are the host's.
TEST_P(HostTasksTest, EachProcessGoesToThePodWhoseCgroupHoldsIt) {
  const std::string a = Pod(kA), b = Pod(kB, QosClass::kGuaranteed), other = Pod(kOther);
  Process(1, v1() ? "/" : "/init.scope");                  // the host's init
  Process(410, "/system.slice/containerd.service");        // a host daemon
  Process(100, "/" + a + "/" + Ctr("pause"));              // A's sandbox
  Process(101, "/" + a + "/" + Ctr("c1"), {101, 111});     // A's trainer, two threads
  Process(102, "/" + a + "/" + Ctr("c2") + "/container");  // crun's child below c2
  Process(201, "/" + b + "/" + Ctr("c1"));                 // B, Guaranteed
  Process(301, "/" + other + "/" + Ctr("c1"));             // a pod not observed
  Process(302, "/" + a + "x/" + Ctr("c1"));                // a name A's is a prefix of
  fs::create_directories(proc_ + "/500");                  // listed, then gone: no cgroup
  fs::create_directories(proc_ + "/self");                 // not a pid

  HostTasks tasks(proc_, layout_, ::getpid());
  auto scan = tasks.Scan({{kA, a}, {kB, b}});
  ASSERT_TRUE(scan.ok()) << scan.status().ToString();
  EXPECT_EQ(scan->processes, 9u) << "every numeric entry, the vanished one too";
  EXPECT_FALSE(scan->truncated);
  EXPECT_EQ(scan->unplaced, 0u);
  ASSERT_EQ(scan->pids.size(), 2u);
  EXPECT_EQ(Sorted(scan->pids.at(kA)), (std::vector<int>{100, 101, 102}));
  EXPECT_EQ(scan->pids.at(kB), (std::vector<int>{201}));
  EXPECT_FALSE(tasks.ns_root()) << "no path outside the namespace: none looked for";

  // The pids read as the schedstat reader reads them: A's four tasks.
  EXPECT_EQ(ReadRunDelays(proc_, scan->pids.at(kA)).size(), 4u);

  // No pod asked: nothing assigned, the scan still bounded and clean.
  auto none = tasks.Scan({});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->pids.empty());
}

TEST_P(HostTasksTest, AtMostTheBoundOfProcessesAScan) {
  for (int pid = 1000; pid < 1010; ++pid) Process(pid, "/" + Pod(kA) + "/" + Ctr("c1"));
  HostTasks tasks(proc_, layout_, ::getpid(), /*max_pids=*/4);
  auto scan = tasks.Scan({{kA, Pod(kA)}});
  ASSERT_TRUE(scan.ok());
  EXPECT_EQ(scan->processes, 4u);
  EXPECT_TRUE(scan->truncated);
  EXPECT_EQ(scan->pids.at(kA).size(), 4u);
}

TEST_P(HostTasksTest, AProcRootThatCannotBeListedIsAnError) {
  HostTasks tasks(proc_ + "/missing", layout_, ::getpid());
  auto scan = tasks.Scan({{kA, Pod(kA)}});
  ASSERT_FALSE(scan.ok());
  EXPECT_EQ(scan.status().code(), StatusCode::kNotFound);
}

// The agent in a private cgroup namespace (v2's default for containers; v1 where the runtime
// makes one): paths outside its container show as "/../..", resolved against its container's
// cgroup, found by the cgroup.procs that lists the agent itself.
TEST_P(HostTasksTest, APrivateCgroupNamespaceIsResolvedFromTheAgentsOwnCgroup) {
  const std::string agent = Pod(kAgent, QosClass::kBestEffort) + "/" + Ctr("agent");
  const std::string agent_dir = layout_.cpu_mount + "/" + agent;
  ASSERT_TRUE(cgroup::MakeFakeCgroupDir(agent_dir, GetParam(), "cpu").ok());
  // From the agent's PID namespace its own container lists it; another container lists nothing
  // usable (v2 prints 0 for a pid outside the reader's namespace).
  cgroup::Put(agent_dir + "/cgroup.procs", std::to_string(::getpid()) + "\n");
  const std::string a = Pod(kA), g = Pod(kB, QosClass::kGuaranteed);
  ASSERT_TRUE(
      cgroup::MakeFakeCgroupDir(layout_.cpu_mount + "/" + a + "/" + Ctr("c1"), GetParam(), "cpu")
          .ok());
  cgroup::Put(layout_.cpu_mount + "/" + a + "/" + Ctr("c1") + "/cgroup.procs", "0\n0\n");
  // kubepods/<tier>/<pod>/<container>: four levels below the root (v1 cgroupfs: kubepods,
  // besteffort, pod, container as well).
  cgroup::Put(proc_ + "/self/cgroup", v1() ? "4:cpu,cpuacct:/\n" : "0::/\n");
  Process(1, v1() ? "/../../../.." : "/../../../../init.scope");
  Process(7, "/");  // the agent itself
  // Up three to kubepods, the common ancestor, then down.
  Process(101, "/../../../" + Basename(Dirname(a)) + "/" + Basename(a) + "/" + Ctr("c1"),
          {101, 102});                                         // A (burstable: another tier)
  Process(201, "/../../../" + Basename(g) + "/" + Ctr("c1"));  // B (Guaranteed: in kubepods)

  HostTasks tasks(proc_, layout_, ::getpid());
  auto scan = tasks.Scan({{kA, a}, {kB, g}});
  ASSERT_TRUE(scan.ok()) << scan.status().ToString();
  ASSERT_TRUE(tasks.ns_root());
  EXPECT_EQ(*tasks.ns_root(), agent);
  EXPECT_EQ(scan->unplaced, 0u);
  EXPECT_EQ(scan->pids[kA], (std::vector<int>{101}));
  EXPECT_EQ(scan->pids[kB], (std::vector<int>{201}));

  // The agent's own cgroup not found below kubepods (an agent outside any pod): the paths that
  // climb out of its namespace cannot be placed, and are counted.
  fs::remove(agent_dir + "/cgroup.procs");
  HostTasks lost(proc_, layout_, ::getpid());
  auto blind = lost.Scan({{kA, a}, {kB, g}});
  ASSERT_TRUE(blind.ok());
  EXPECT_FALSE(lost.ns_root());
  EXPECT_EQ(blind->unplaced, 3u) << "init, A and B";
  EXPECT_TRUE(blind->pids.empty());
}

INSTANTIATE_TEST_SUITE_P(Version, HostTasksTest,
                         ::testing::Values(CgroupVersion::kV1, CgroupVersion::kV2),
                         [](const auto& info) {
                           return info.param == CgroupVersion::kV1 ? std::string("v1")
                                                                   : std::string("v2");
                         });

}  // namespace
}  // namespace feedguard::agent::observe
