// enforcer_v1_test.cc — the enforcer against real cgroup v1 files (needs root and the host's
// v1 cpu/cpuacct/cpuset mounts). Everything happens under roots of our own
// (/sys/fs/cgroup/<ctrl>/feedguard-test-<pid>-<rand>), removed afterwards even on failure; no
// process is moved into any cgroup.
//
// The crash tests fork a child that applies a large plan and is SIGKILLed mid-apply (after its
// k-th write, or after a random delay); a fresh enforcer restarts from the checkpoint,
// converges, reverts, and every knob file must hold its exact original bytes.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "agent/cgroup/fs_cgroups.h"
#include "agent/cgroup/kubelet_facts.h"
#include "agent/enforcer/enforcer.h"
#include "agent/enforcer/watcher.h"

namespace feedguard::agent {
namespace {

namespace fs = std::filesystem;

constexpr char kV1Root[] = "/sys/fs/cgroup";
const char* const kControllers[] = {"cpu", "cpuacct", "cpuset"};
const char* const kKnobs[] = {"cpu.shares",        "cpu.idle",    "cpu.cfs_quota_us",
                              "cpu.cfs_period_us", "cpuset.cpus", "cpuset.mems"};

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool WriteKnob(const std::string& path, const std::string& v) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = ::write(fd, v.data(), v.size()) == static_cast<ssize_t>(v.size());
  ::close(fd);
  return ok;
}

std::string SkipReason() {
  if (::geteuid() != 0) return "needs root to create v1 cgroups";
  for (const char* c : kControllers) {
    if (!fs::exists(std::string(kV1Root) + "/" + c + "/tasks")) {
      return std::string("no cgroup v1 ") + c + " mount at " + kV1Root + "/" + c;
    }
  }
  if (!fs::exists(std::string(kV1Root) + "/cpu/cpu.idle")) return "kernel lacks v1 cpu.idle";
  return "";
}

// Our own kubelet-shaped tree (cgroupfs driver) under a fresh root in each v1 controller.
// The destructor removes every dir it made, deepest first, in every controller.
class V1Tree {
 public:
  V1Tree() {
    std::random_device rd;
    name_ = "feedguard-test-" + std::to_string(::getpid()) + "-" + std::to_string(rd() % 100000);
    for (const char* c : kControllers) Mkdir(c, "");
    cpus_ = Slurp(std::string(kV1Root) + "/cpuset/cpuset.cpus");
    mems_ = Slurp(std::string(kV1Root) + "/cpuset/cpuset.mems");
    InitCpuset("");
    for (const std::string rel : {"kubepods", "kubepods/burstable", "kubepods/besteffort"}) {
      for (const char* c : kControllers) Mkdir(c, rel);
      InitCpuset(rel);
    }
    layout_.version = cgroup::CgroupVersion::kV1;
    layout_.cpu_mount = Mount("cpu");
    layout_.cpuacct_mount = Mount("cpuacct");
    layout_.cpuset_mount = Mount("cpuset");
    layout_.driver = cgroup::KubeletDriver::kCgroupfs;
    layout_.runtime = cgroup::Runtime::kContainerd;
    layout_.caps.cpu_idle = true;
    cgroups_ = cgroup::NewFsCgroups(layout_);
  }
  ~V1Tree() {
    for (auto it = made_.rbegin(); it != made_.rend(); ++it) ::rmdir(it->c_str());
  }

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
    for (const auto& d : dirs) {
      for (const char* c : kControllers) Mkdir(c, d);
      InitCpuset(d);
      WriteKnob(Mount("cpu") + "/" + d + "/cpu.shares", std::to_string(shares));
      WriteKnob(Mount("cpu") + "/" + d + "/cpu.cfs_quota_us", std::to_string(quota_us));
    }
    return p;
  }

  // path → bytes of every knob file in every dir we made.
  std::map<std::string, std::string> Snapshot() const {
    std::map<std::string, std::string> out;
    for (const auto& d : made_) {
      for (const char* k : kKnobs) {
        std::string f = d + "/" + k;
        if (fs::exists(f)) out[f] = Slurp(f);
      }
    }
    return out;
  }

  std::string Mount(const char* c) const { return std::string(kV1Root) + "/" + c + "/" + name_; }
  const cgroup::CgroupsPtr& cgroups() const { return cgroups_; }
  const std::string& cpus() const { return cpus_; }

 private:
  void Mkdir(const char* c, const std::string& rel) {
    std::string d = Mount(c) + (rel.empty() ? "" : "/" + rel);
    ASSERT_EQ(::mkdir(d.c_str(), 0755), 0) << d << ": " << std::strerror(errno);
    made_.push_back(d);
  }
  // A fresh v1 cpuset dir has empty cpus/mems: give it the host's, as kubelet's parents have.
  void InitCpuset(const std::string& rel) {
    std::string d = Mount("cpuset") + (rel.empty() ? "" : "/" + rel);
    ASSERT_TRUE(WriteKnob(d + "/cpuset.cpus", cpus_)) << d;
    ASSERT_TRUE(WriteKnob(d + "/cpuset.mems", mems_)) << d;
  }

  std::string name_;
  std::string cpus_, mems_;
  std::vector<std::string> made_;  // in creation order (parents first)
  cgroup::CgroupLayout layout_;
  cgroup::CgroupsPtr cgroups_;
};

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "fg-enforcer-v1-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

CheckpointStorePtr OpenStore(const std::string& dir) {
  auto s = CheckpointStore::Open(dir);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? CheckpointStorePtr(std::move(*s)) : nullptr;
}

// A large plan: one trainer (2 containers) pinned to the first CPU, `n` neighbours, half idle,
// half weight + quota, all confined to the last CPU.
Plan BigPlan(V1Tree& tree, int n) {
  auto all = CpuSet::Parse(tree.cpus());
  EXPECT_TRUE(all.ok());
  const int first = all->ToVector().front(), last = all->ToVector().back();
  Plan plan;
  plan.fence_version = 1;
  TrainerPlacement t;
  t.pod = tree.AddPod("trainer-0001", QosClass::kGuaranteed, 2, 2048, 200000);
  t.policy = "vision";
  t.cpus = CpuSet{first};
  plan.trainers.push_back(t);
  for (int i = 0; i < n; ++i) {
    NeighbourAction a;
    a.pod = tree.AddPod("nb-" + std::to_string(1000 + i),
                        i % 3 == 0 ? QosClass::kBestEffort : QosClass::kBurstable, 1, 100 + i,
                        i % 2 ? -1 : 30000 + i);
    a.policy = "vision";
    if (i % 2 == 0) {
      a.idle = true;
    } else {
      a.weight = 1;
      a.quota = CpuQuota{20000, 100000};
    }
    a.cpus = CpuSet{last};
    plan.neighbours.push_back(a);
  }
  return plan;
}

void ExpectEnforced(const ApplyReport& r, size_t pods) {
  EXPECT_EQ(r.enforced, pods);
  for (const auto& p : r.pods) {
    EXPECT_TRUE(p.enforced) << p.uid << ": " << p.reason << " " << p.message;
  }
}

class EnforcerV1Test : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why = SkipReason();
    if (!why.empty()) GTEST_SKIP() << why;
  }
};

TEST_F(EnforcerV1Test, AppliesVerifiesAndRevertsRealFiles) {
  V1Tree tree;
  TempDir state;
  Plan plan = BigPlan(tree, 6);
  const auto before = tree.Snapshot();
  auto store = OpenStore(state.path());
  Enforcer enf(tree.cgroups(), store, {});
  auto r = enf.Apply(plan);
  ExpectEnforced(r, 7);
  EXPECT_GT(r.files_written, 20u);
  auto again = enf.Apply(plan);
  EXPECT_EQ(again.files_written, 0u);
  auto rv = enf.RevertAll();
  EXPECT_EQ(rv.overwritten_by_other, 0u);
  EXPECT_EQ(store->size(), 0u);
  EXPECT_EQ(tree.Snapshot(), before);
}

TEST_F(EnforcerV1Test, CpusetOutsideTheParentIsReportedNotSubset) {
  V1Tree tree;
  auto all = CpuSet::Parse(tree.cpus());
  ASSERT_TRUE(all.ok());
  if (all->size() < 2) GTEST_SKIP() << "needs at least 2 CPUs";
  TempDir state;
  auto pod = tree.AddPod("nb-subset", QosClass::kBurstable, 1, 100, -1);
  // Narrow the QoS tier (and so the pod and its container) to the first CPU, then ask for the
  // last: growing the pod dir beyond its parent tier is refused by the kernel (EACCES), and
  // the tier is kubelet's, never ours to widen.
  const std::string tier = tree.Mount("cpuset") + "/kubepods/burstable";
  const std::string pod_dir = tier + "/podnb-subset";
  const std::string first = std::to_string(all->ToVector().front());
  ASSERT_TRUE(WriteKnob(pod_dir + "/nb-subsetc0/cpuset.cpus", first));
  ASSERT_TRUE(WriteKnob(pod_dir + "/cpuset.cpus", first));
  ASSERT_TRUE(WriteKnob(tier + "/cpuset.cpus", first));
  auto store = OpenStore(state.path());
  Enforcer enf(tree.cgroups(), store, {});
  Plan plan;
  NeighbourAction a;
  a.pod = pod;
  a.cpus = CpuSet{all->ToVector().back()};
  plan.neighbours.push_back(a);
  auto r = enf.Apply(plan);
  ASSERT_EQ(r.pods.size(), 1u);
  EXPECT_FALSE(r.pods[0].enforced);
  EXPECT_EQ(r.pods[0].reason, reason::kCpusetNotSubset) << r.pods[0].message;
  EXPECT_EQ(Slurp(tier + "/cpuset.cpus"), first + "\n");  // the tier was not touched
  enf.RevertAll();
  EXPECT_EQ(Slurp(pod_dir + "/cpuset.cpus"), first + "\n");
}

TEST_F(EnforcerV1Test, InotifyReportsWritesByAnotherProcessAndWatcherRestores) {
  V1Tree tree;
  TempDir state;
  Plan plan = BigPlan(tree, 2);
  auto store = OpenStore(state.path());
  auto enf = std::make_shared<Enforcer>(tree.cgroups(), store, EnforcerOptions{});
  ExpectEnforced(enf->Apply(plan), 3);
  // neighbour 1 has weight: its cpu.shares is ours.
  const std::string shares = tree.Mount("cpu") + "/kubepods/burstable/podnb-1001/cpu.shares";
  const std::string ours = Slurp(shares);
  WatcherOptions wo;
  wo.sweep_interval = std::chrono::hours(1);  // inotify alone must catch it
  wo.poll_timeout = std::chrono::milliseconds(20);
  Watcher w(enf, wo);
  ASSERT_TRUE(w.Start().ok());
  for (int i = 0; i < 250 && w.watched_files() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_GT(w.watched_files(), 0u);
  // Another process (as runc would) rewrites the knob.
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) ::_exit(WriteKnob(shares, "4096") ? 0 : 1);
  int ws = 0;
  ASSERT_EQ(::waitpid(pid, &ws, 0), pid);
  ASSERT_TRUE(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
  bool restored = false;
  for (int i = 0; i < 250 && !restored; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    restored = Slurp(shares) == ours;
  }
  w.Stop();
  EXPECT_TRUE(restored) << "cpu.shares holds " << Slurp(shares);
  EXPECT_GE(w.stats().events, 1u) << "no IN_MODIFY for a write to a v1 cgroup file";
  EXPECT_EQ(w.stats().sweeps, 0u);
  EXPECT_EQ(enf->OverwriteCounts()["nb-1001"], 1u);
  enf->RevertAll();
}

// Runs `plan` in a forked child that SIGKILLs itself after write `kill_after_write` (0: never)
// or is killed by the parent after `kill_after` (zero: never). Returns true if it was killed.
bool RunChild(V1Tree& tree, const std::string& state, const Plan& plan, uint64_t kill_after_write,
              std::chrono::microseconds kill_after) {
  pid_t pid = ::fork();
  if (pid < 0) return false;
  if (pid == 0) {
    auto store = CheckpointStore::Open(state);
    if (!store.ok()) ::_exit(2);
    EnforcerOptions o;
    o.after_write = [kill_after_write](uint64_t n, const std::string&) {
      if (n == kill_after_write) ::kill(::getpid(), SIGKILL);
    };
    Enforcer enf(tree.cgroups(), CheckpointStorePtr(std::move(*store)), o);
    // Apply, unfence and fence again, so a timed kill can land in a revert as well.
    enf.Apply(plan);
    enf.RevertAll();
    enf.Apply(plan);
    ::_exit(0);
  }
  if (kill_after.count() > 0) {
    std::this_thread::sleep_for(kill_after);
    ::kill(pid, SIGKILL);
  }
  int ws = 0;
  if (::waitpid(pid, &ws, 0) != pid) return false;
  return WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL;
}

void RestartConvergeRevert(V1Tree& tree, const std::string& state, const Plan& plan,
                           const std::map<std::string, std::string>& before) {
  auto store = OpenStore(state);
  ASSERT_NE(store, nullptr);
  Enforcer enf(tree.cgroups(), store, {});
  EXPECT_FALSE(enf.ready());
  auto r = enf.Apply(plan);
  EXPECT_TRUE(enf.ready());
  ExpectEnforced(r, plan.trainers.size() + plan.neighbours.size());
  EXPECT_EQ(r.overwritten_by_other, 0u);
  EXPECT_EQ(enf.Apply(plan).files_written, 0u);
  auto rv = enf.RevertAll();
  EXPECT_EQ(rv.overwritten_by_other, 0u);
  for (const auto& x : rv.reverts) {
    EXPECT_TRUE(x.outcome == reason::kRestored || x.outcome == reason::kAlreadyOriginal)
        << x.path << ": " << x.outcome << " " << x.message;
  }
  EXPECT_EQ(store->size(), 0u);
  EXPECT_EQ(tree.Snapshot(), before);
}

TEST_F(EnforcerV1Test, KillAfterKthWriteThenRestartRestoresEveryByte) {
  V1Tree tree;
  Plan plan = BigPlan(tree, 30);
  const auto before = tree.Snapshot();
  for (uint64_t k : {1, 2, 3, 7, 40, 99, 150}) {
    SCOPED_TRACE("killed after write " + std::to_string(k));
    TempDir state;
    ASSERT_TRUE(RunChild(tree, state.path(), plan, k, std::chrono::microseconds(0)))
        << "child was not killed";
    RestartConvergeRevert(tree, state.path(), plan, before);
    ASSERT_EQ(tree.Snapshot(), before);
  }
}

TEST_F(EnforcerV1Test, KillAtRandomTimesThenRestartRestoresEveryByte) {
  V1Tree tree;
  Plan plan = BigPlan(tree, 30);
  const auto before = tree.Snapshot();
  // How long a full child run takes here, to spread the kills over it.
  auto t0 = std::chrono::steady_clock::now();
  {
    TempDir state;
    ASSERT_FALSE(RunChild(tree, state.path(), plan, 0, std::chrono::microseconds(0)));
    RestartConvergeRevert(tree, state.path(), plan, before);
  }
  const auto full =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0);
  std::mt19937 rng(12345);
  int killed = 0;
  for (int i = 0; i < 8; ++i) {
    auto delay = std::chrono::microseconds(1 + rng() % std::max<int64_t>(1, full.count() / 2));
    SCOPED_TRACE("kill after " + std::to_string(delay.count()) + "us of ~" +
                 std::to_string(full.count()) + "us");
    TempDir state;
    killed += RunChild(tree, state.path(), plan, 0, delay);
    RestartConvergeRevert(tree, state.path(), plan, before);
    ASSERT_EQ(tree.Snapshot(), before);
  }
  EXPECT_GT(killed, 0) << "no run was killed mid-way";
  std::cout << "[ info ] full run " << full.count() << "us, killed " << killed << "/8\n";
}

}  // namespace
}  // namespace feedguard::agent
