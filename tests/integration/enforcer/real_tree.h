// real_tree.h — test helper: a kubelet-shaped cgroup tree of our own on the real kernel, for the
// enforcer tiers that need real cgroup files (enforcer_v1_test, crash_points_test).
//
// v1: under /sys/fs/cgroup/{cpu,cpuacct,cpuset}/feedguard-test-<pid>-<rand> (root, the host's v1
// mounts); v2: under $FEEDGUARD_CGROUP2_ROOT (a cgroup2 mount: the qemu VM). Everything it makes
// is removed by its destructor, deepest first, also when a test fails; the only processes moved
// in are the tree's own sleeping children (AddTask), ended by PID before the dirs go.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "agent/cgroup/detect.h"
#include "agent/cgroup/fake_tree.h"
#include "agent/cgroup/fs_cgroups.h"
#include "agent/cgroup/kernel_facts.h"
#include "agent/cgroup/kubelet_facts.h"
#include "agent/enforcer/checkpoint.h"
#include "agent/enforcer/enforcer.h"
#include "tests/fixtures/temp_dir.h"

namespace feedguard::agent::realcg {

namespace fs = std::filesystem;
namespace kf = cgroup;
using cgroup::CgroupVersion;
using feedguard::testing::TempDir;

inline constexpr char kV1Root[] = "/sys/fs/cgroup";
inline const char* const kControllers[] = {"cpu", "cpuacct", "cpuset"};
inline const std::vector<std::string> kKnobsV1 = {
    "cpu.shares",       "cpu.idle",    "cpu.cfs_quota_us", "cpu.cfs_period_us",
    "cpu.cfs_burst_us", "cpuset.cpus", "cpuset.mems"};
inline const std::vector<std::string> kKnobsV2 = {"cpu.weight",    "cpu.idle",    "cpu.max",
                                                  "cpu.max.burst", "cpuset.cpus", "cpuset.mems"};

inline std::string Cgroup2Root() {
  const char* env = std::getenv("FEEDGUARD_CGROUP2_ROOT");
  return env != nullptr ? env : "";
}

using cgroup::Slurp;

inline bool WriteKnob(const std::string& path, const std::string& v) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = ::write(fd, v.data(), v.size()) == static_cast<ssize_t>(v.size());
  ::close(fd);
  return ok;
}

inline std::string SkipReason(CgroupVersion v) {
  if (::geteuid() != 0) return "needs root to create cgroups";
  if (v == CgroupVersion::kV2) {
    const std::string root = Cgroup2Root();
    if (root.empty()) return "FEEDGUARD_CGROUP2_ROOT unset (v2 cases run in the VM)";
    auto magic = cgroup::VersionByMagic(root);
    if (!magic.ok() || *magic != CgroupVersion::kV2) return root + " is not a cgroup2 mount";
    const std::string on = Slurp(root + "/cgroup.subtree_control");
    if (on.find("cpuset") == std::string::npos || (" " + on).find(" cpu") == std::string::npos) {
      return root + " does not enable cpu and cpuset for its children";
    }
    return "";
  }
  for (const char* c : kControllers) {
    if (!fs::exists(std::string(kV1Root) + "/" + c + "/tasks")) {
      return std::string("no cgroup v1 ") + c + " mount at " + kV1Root + "/" + c;
    }
  }
  if (!fs::exists(std::string(kV1Root) + "/cpu/cpu.idle")) return "kernel lacks v1 cpu.idle";
  return "";
}

// Our own kubelet-shaped tree (cgroupfs driver) under a fresh root: in each v1 controller, or
// once in the v2 unified hierarchy (controllers enabled in every dir that gets children). The
// destructor ends the tasks it moved in (AddTask), then removes every dir it made, deepest first.
// An attached tree (the crash child) only names the dirs its parent process made: it creates and
// removes nothing.
class Tree {
 public:
  explicit Tree(CgroupVersion version, std::string attach = "")
      : version_(version), attached_(!attach.empty()) {
    std::random_device rd;
    name_ = attached_ ? attach
                      : "feedguard-test-" + std::to_string(::getpid()) + "-" +
                            std::to_string(rd() % 100000);
    if (v2()) {
      cpus_ = Slurp(Cgroup2Root() + "/cpuset.cpus.effective");
    } else {
      cpus_ = Slurp(std::string(kV1Root) + "/cpuset/cpuset.cpus");
      mems_ = Slurp(std::string(kV1Root) + "/cpuset/cpuset.mems");
    }
    layout_.version = version_;
    layout_.cpu_mount = Mount("cpu");
    layout_.cpuacct_mount = Mount("cpuacct");
    layout_.cpuset_mount = Mount("cpuset");
    layout_.driver = cgroup::KubeletDriver::kCgroupfs;
    layout_.runtime = cgroup::Runtime::kContainerd;
    layout_.caps.cpu_idle = true;
    cgroups_ = cgroup::NewFsCgroups(layout_);
    if (attached_) return;
    MkdirAll("");
    for (const std::string rel : {"kubepods", "kubepods/burstable", "kubepods/besteffort"}) {
      MkdirAll(rel);
    }
  }
  ~Tree() {
    for (pid_t pid : tasks_) ::kill(pid, SIGKILL);
    for (pid_t pid : tasks_) ::waitpid(pid, nullptr, 0);
    for (auto it = made_.rbegin(); it != made_.rend(); ++it) {
      // A cgroup whose last task was just reaped may report busy for a moment.
      for (int i = 0; i < 100 && ::rmdir(it->c_str()) != 0 && errno == EBUSY; ++i) ::usleep(10000);
    }
  }

  // A sleeping child of this process moved into `rel` (every controller's dir on v1): the
  // cgroup is populated then, as a container's is on a real node. Ended by the destructor.
  void AddTask(const std::string& rel) {
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(0);
      for (;;) ::pause();
    }
    tasks_.push_back(pid);
    const std::string id = std::to_string(pid);
    if (v2()) {
      ASSERT_TRUE(WriteKnob(Mount("cpu") + "/" + rel + "/cgroup.procs", id)) << rel;
      return;
    }
    for (const char* c : kControllers) {
      ASSERT_TRUE(WriteKnob(Mount(c) + "/" + rel + "/cgroup.procs", id)) << c << " " << rel;
    }
  }
  Tree(const Tree&) = delete;
  Tree& operator=(const Tree&) = delete;

  bool v2() const { return version_ == CgroupVersion::kV2; }
  const std::string& name() const { return name_; }

  // A pod dir with containers, kubelet-style values (distinct per pod, so a mix-up shows).
  PodIdentity AddPod(const std::string& uid, QosClass qos, int containers, int64_t shares,
                     int64_t quota_us) {
    PodIdentity p;
    p.uid = uid;
    p.ns = "batch";
    p.name = "pod-" + uid;
    p.qos = qos;
    const std::string rel = cgroup::PodRelPath(layout_.driver, "", qos, uid);
    std::vector<std::string> dirs = {rel};
    for (int i = 0; i < containers; ++i) {
      std::string id = uid + "c" + std::to_string(i);
      p.container_ids.push_back("containerd://" + id);
      dirs.push_back(rel + "/" + id);
    }
    if (attached_) return p;
    for (const auto& d : dirs) {
      MkdirAll(d);
      const std::string cpu = Mount("cpu") + "/" + d;
      if (v2()) {
        WriteKnob(cpu + "/cpu.weight", std::to_string(cgroup::SharesToWeight(shares)));
        WriteKnob(cpu + "/cpu.max",
                  (quota_us < 0 ? std::string("max") : std::to_string(quota_us)) + " 100000");
      } else {
        WriteKnob(cpu + "/cpu.shares", std::to_string(shares));
        WriteKnob(cpu + "/cpu.cfs_quota_us", std::to_string(quota_us));
      }
    }
    return p;
  }

  // A dir of our own below the tree's top (parents must exist), e.g. a pod's sandbox dir.
  void AddDir(const std::string& rel) { MkdirAll(rel); }
  // The pod's dir relative to the tree's top.
  std::string PodRel(const PodIdentity& p) const {
    return cgroup::PodRelPath(layout_.driver, "", p.qos, p.uid);
  }

  // The absolute dir of the pod's i-th container for controller `c` (v2: the unified dir).
  // The pod's cgroup dir under controller `c`'s mount.
  std::string PodDir(const PodIdentity& p, const char* c = "cpu") const {
    return Mount(c) + "/" + PodRel(p);
  }
  std::string ContainerDir(const PodIdentity& p, size_t i, const char* c = "cpu") const {
    const std::string& id = p.container_ids[i];
    return PodDir(p, c) + "/" + id.substr(id.find("://") + 3);
  }

  // path → bytes of every knob file in every dir we made.
  std::map<std::string, std::string> Snapshot() const {
    std::map<std::string, std::string> out;
    for (const auto& d : made_) {
      for (const std::string& k : v2() ? kKnobsV2 : kKnobsV1) {
        std::string f = d + "/" + k;
        if (fs::exists(f)) out[f] = Slurp(f);
      }
    }
    return out;
  }

  // The tree's top dir for controller `c` (v2: the one unified dir, whatever `c`).
  std::string Mount(const char* c) const {
    if (v2()) return Cgroup2Root() + "/" + name_;
    return std::string(kV1Root) + "/" + c + "/" + name_;
  }
  // The weight knob's file name on this version.
  const char* WeightFile() const { return v2() ? "cpu.weight" : "cpu.shares"; }
  const cgroup::CgroupsPtr& cgroups() const { return cgroups_; }
  const std::string& cpus() const { return cpus_; }
  // cpus() parsed (empty, the failure reported, when it does not parse).
  CpuSet CpuList() const {
    auto all = CpuSet::Parse(cpus_);
    EXPECT_TRUE(all.ok()) << cpus_;
    return all.ok() ? *all : CpuSet{};
  }

 private:
  void MkdirAll(const std::string& rel) {
    if (v2()) {
      Mkdir(Mount("cpu") + (rel.empty() ? "" : "/" + rel));
      return;
    }
    for (const char* c : kControllers) Mkdir(Mount(c) + (rel.empty() ? "" : "/" + rel));
    InitCpuset(rel);
  }
  void Mkdir(const std::string& d) {
    // v2: a dir gets cpu.* / cpuset.* files only if its parent enables the controllers.
    const std::string parent = d.substr(0, d.find_last_of('/'));
    if (v2() && std::find(made_.begin(), made_.end(), parent) != made_.end() &&
        Slurp(parent + "/cgroup.subtree_control").find("cpu") == std::string::npos) {
      ASSERT_TRUE(WriteKnob(parent + "/cgroup.subtree_control", "+cpu +cpuset")) << parent;
    }
    ASSERT_EQ(::mkdir(d.c_str(), 0755), 0) << d << ": " << std::strerror(errno);
    made_.push_back(d);
  }
  // A fresh v1 cpuset dir has empty cpus/mems: give it the host's, as kubelet's parents have.
  // (v2: an empty cpuset.cpus means "the parent's"; nothing to do.)
  void InitCpuset(const std::string& rel) {
    std::string d = Mount("cpuset") + (rel.empty() ? "" : "/" + rel);
    ASSERT_TRUE(WriteKnob(d + "/cpuset.cpus", cpus_)) << d;
    ASSERT_TRUE(WriteKnob(d + "/cpuset.mems", mems_)) << d;
  }

  CgroupVersion version_;
  bool attached_;
  std::string name_;
  std::string cpus_, mems_;
  std::vector<std::string> made_;  // in creation order (parents first)
  std::vector<pid_t> tasks_;       // AddTask's children
  cgroup::CgroupLayout layout_;
  cgroup::CgroupsPtr cgroups_;
};

// The files whose bytes differ between two snapshots (a readable failure message).
inline std::string SnapshotDiff(const std::map<std::string, std::string>& got,
                                const std::map<std::string, std::string>& want) {
  std::string out;
  auto show = [](const std::map<std::string, std::string>& m, const std::string& k) {
    auto it = m.find(k);
    return it == m.end() ? std::string("<absent>") : "'" + it->second + "'";
  };
  std::set<std::string> keys;
  for (const auto& [k, v] : got) keys.insert(k);
  for (const auto& [k, v] : want) keys.insert(k);
  for (const auto& k : keys) {
    if (show(got, k) != show(want, k)) {
      out += "\n  " + k + ": holds " + show(got, k) + ", expected " + show(want, k);
    }
  }
  return out;
}

// Both cgroup versions for INSTANTIATE_TEST_SUITE_P, the cases named by VersionName.
inline auto BothVersions() { return ::testing::Values(CgroupVersion::kV1, CgroupVersion::kV2); }
inline std::string VersionName(const ::testing::TestParamInfo<CgroupVersion>& info) {
  return std::string(cgroup::CgroupVersionName(info.param));
}

inline CheckpointStorePtr OpenStore(const std::string& dir) {
  auto s = CheckpointStore::Open(dir);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? CheckpointStorePtr(std::move(*s)) : nullptr;
}

// A checkpoint store in a temp dir of its own and an enforcer over `tree` with it:
// `auto [state, store, enf] = Rig(tree);` (a prvalue, so the three are built in place).
struct Rig {
  explicit Rig(const Tree& tree, EnforcerOptions o = {})
      : store(OpenStore(state.path())), enf(tree.cgroups(), store, std::move(o)) {}
  TempDir state;
  CheckpointStorePtr store;
  Enforcer enf;
};

}  // namespace feedguard::agent::realcg
