// crash_points_test.cc — crash-consistency testing of the enforcer on real cgroup files: every
// write is a crash point.
//
// For every scenario — each fence kind applied, changed to every other kind (Idle → anything,
// pinning on and off, trainer weight on and off), then withdrawn — the test first runs it once
// uninterrupted (recording the bytes every knob file holds after each step and the number of
// cgroup writes), then for every k from 1 to that number: a forked child runs the scenario and
// SIGKILLs itself right after its k-th cgroup write; a fresh Enforcer over the same checkpoint
// (a restarted agent) receives the step it died in again, then the rest. After each step the
// tree must hold exactly what the uninterrupted run left there, and after the final withdrawal
// every knob file must hold its exact original bytes with nothing left in the checkpoint.
//
// The pods carry the originals that broke before: cpu.shares 3 (kubelet's value for a 3m
// request, and what v1 shows while cpu.idle is 1), 2 and 262144; a v1 pod quota 100000/250000
// whose container has a limit of its own above the fence's quota; a sandbox (pause) dir that no
// container id names.
//
// v1 on the host (label cgroup_v1, root); v2 in the qemu VM (label vm).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <functional>
#include <iostream>

#include "agent/enforcer/enforcer.h"
#include "tests/integration/enforcer/real_tree.h"

namespace feedguard::agent {
namespace {

using namespace realcg;  // NOLINT: the shared real-tree test helpers
using cgroup::CgroupVersion;

// One fence configuration of the whole node.
struct Fence {
  std::string name;
  std::function<void(NeighbourAction&)> neighbour;  // sets the neighbours' fence
  bool pin = false;                                 // trainer pinned to the first CPU
  bool trainer_weight = false;                      // trainer's weight raised
};

struct Pods {
  PodIdentity trainer;
  std::vector<PodIdentity> neighbours;
};

std::vector<Fence> Fences(const CpuSet& all) {
  const int last = all.ToVector().back();
  return {
      {"idle", [](NeighbourAction& a) { a.idle = true; }, false, false},
      {"weight", [](NeighbourAction& a) { a.weight = 1; }, false, false},
      {"cpuset", [last](NeighbourAction& a) { a.cpus = CpuSet{last}; }, true, false},
      {"quota",
       [](NeighbourAction& a) {
         a.quota = CpuQuota{10000, 100000};
       },
       false, false},
      {"idle-pin", [](NeighbourAction& a) { a.idle = true; }, true, true},
      {"weight-boost", [](NeighbourAction& a) { a.weight = 1; }, false, true},
  };
}

Plan PlanFor(const Pods& pods, const Fence& f, const CpuSet& all, uint64_t version) {
  Plan plan;
  plan.fence_version = version;
  TrainerPlacement t;
  t.pod = pods.trainer;
  t.policy = "vision";
  if (f.pin) {
    t.cpus = CpuSet{all.ToVector().front()};
    t.mems = CpuSet{0};
  }
  if (f.trainer_weight) t.weight = 10000;
  plan.trainers.push_back(t);
  for (const auto& p : pods.neighbours) {
    NeighbourAction a;
    a.pod = p;
    a.policy = "vision";
    f.neighbour(a);
    plan.neighbours.push_back(a);
  }
  return plan;
}

// The pods, with originals kubelet really writes and the odd ones that broke before.
Pods MakePods(Tree& tree) {
  Pods pods;
  pods.trainer = tree.AddPod("trainer-0001", QosClass::kBurstable, 2, 410, -1);
  // shares 3: a 3m request; pod and container limits at period 250000, the container's above
  // the quota fence.
  PodIdentity a = tree.AddPod("nb-odd-3", QosClass::kBurstable, 1, 3, -1);
  PodIdentity b = tree.AddPod("nb-min-2", QosClass::kBestEffort, 1, 2, -1);
  PodIdentity c = tree.AddPod("nb-max", QosClass::kBurstable, 1, 262144, -1);
  pods.neighbours = {a, b, c};
  for (const auto& p : {pods.trainer, a, b, c}) tree.AddDir(tree.PodRel(p) + "/sandbox");
  const std::string pod_a = tree.PodDir(a);
  const std::string ctr_a = tree.ContainerDir(a, 0);
  if (tree.v2()) {
    EXPECT_TRUE(WriteKnob(pod_a + "/cpu.max", "100000 250000"));
    EXPECT_TRUE(WriteKnob(ctr_a + "/cpu.max", "100000 250000"));
  } else {
    for (const auto& d : {pod_a, ctr_a}) {
      EXPECT_TRUE(WriteKnob(d + "/cpu.cfs_period_us", "250000")) << d;
      EXPECT_TRUE(WriteKnob(d + "/cpu.cfs_quota_us", "100000")) << d;
    }
  }
  return pods;
}

// A step of a scenario: apply a fence, or withdraw everything, or (with `external`) what
// another writer does between two fences — kubelet's write and the Watcher noticing it
// (Verify). Re-run after a restart like any step (the write again, on a fresh Enforcer).
struct Step {
  std::optional<Plan> plan;  // nullopt: RevertAll (unless `external`)
  std::function<void(Enforcer&)> external;
};

std::vector<Step> Scenario(const Pods& pods, const Fence& a, const Fence& b, const CpuSet& all) {
  return {{PlanFor(pods, a, all, 1)}, {PlanFor(pods, b, all, 2)}, {std::nullopt}};
}

void ExpectStepOk(const Step& st, const ApplyReport& r, const std::string& where) {
  if (st.plan) {
    EXPECT_EQ(r.enforced, st.plan->trainers.size() + st.plan->neighbours.size()) << where;
    for (const auto& p : r.pods)
      EXPECT_TRUE(p.enforced()) << where << ": " << p.uid() << " " << p.reason() << " "
                                << p.message();
  }
  for (const auto& x : r.reverts) {
    EXPECT_TRUE(x.outcome == reason::kRestored || x.outcome == reason::kAlreadyOriginal ||
                x.outcome == reason::kGone)
        << where << ": " << x.path << " " << x.outcome << " " << x.message;
  }
  EXPECT_TRUE(r.checkpoint_status.ok()) << where << ": " << r.checkpoint_status.ToString();
}

ApplyReport RunStep(Enforcer& enf, const Step& st) {
  if (st.external) {
    st.external(enf);
    return {};
  }
  return st.plan ? enf.Apply(*st.plan) : enf.RevertAll();
}

// Each pod's outcome (uid → enforced or reason): a restarted agent must reach the same ones.
std::map<std::string, std::string> Outcomes(const ApplyReport& r) {
  std::map<std::string, std::string> out;
  for (const auto& p : r.pods) out[p.uid()] = p.enforced() ? "enforced" : p.reason();
  return out;
}

// Runs the scenario in a forked child that SIGKILLs itself after cgroup write `k` (0: never).
// Returns the index of the step the child was in when it died (steps.size() if it finished),
// or -1 if it ended any other way.
int RunChild(Tree& tree, const std::string& state, const std::vector<Step>& steps, uint64_t k) {
  int progress[2];
  if (::pipe(progress) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    ::close(progress[0]);
    auto store = CheckpointStore::Open(state);
    if (!store.ok()) ::_exit(2);
    EnforcerOptions o;
    o.after_write = [k](uint64_t n, const std::string&) {
      if (n == k) ::kill(::getpid(), SIGKILL);
    };
    Enforcer enf(tree.cgroups(), CheckpointStorePtr(std::move(*store)), o);
    for (size_t i = 0; i < steps.size(); ++i) {
      const char idx = static_cast<char>(i);
      if (::write(progress[1], &idx, 1) != 1) ::_exit(3);
      RunStep(enf, steps[i]);
    }
    ::_exit(0);
  }
  ::close(progress[1]);
  int step = -1;
  char idx;
  while (::read(progress[0], &idx, 1) == 1) step = idx;
  ::close(progress[0]);
  int ws = 0;
  if (::waitpid(pid, &ws, 0) != pid) return -1;
  if (WIFEXITED(ws) && WEXITSTATUS(ws) == 0) return static_cast<int>(steps.size());
  if (WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL) return step;
  return -1;
}

class CrashPointsTest : public ::testing::TestWithParam<CgroupVersion> {
 protected:
  void SetUp() override {
    std::string why = SkipReason(GetParam());
    if (!why.empty()) GTEST_SKIP() << why;
  }
};

// FG_CRASH_POINTS_STRIDE=n kills after every n-th write only (for slow emulated kernels);
// default 1: every write.
uint64_t Stride() {
  uint64_t stride = 1;
  if (const char* e = std::getenv("FG_CRASH_POINTS_STRIDE")) stride = std::max(1, std::atoi(e));
  return stride;
}

// Runs `steps` uninterrupted (the bytes after each step, each step's pod outcomes, the number
// of writes), then once per write k: killed after write k, restarted, the step it died in and
// the rest run again; after each step the tree must hold what the uninterrupted run left and
// the pods must end as they did there; at the end every knob file holds `want_end` (the bytes
// before the fence, and what other writers wrote since). `all_enforced`:
// every Apply must also enforce every pod (the fence-transition matrix). Returns the kills.
size_t KillAtEveryWrite(Tree& tree, const std::string& name, const std::vector<Step>& steps,
                        const std::map<std::string, std::string>& want_end, bool all_enforced) {
  SCOPED_TRACE(name);
  std::vector<std::map<std::string, std::string>> expected;
  std::vector<std::map<std::string, std::string>> outcomes;
  uint64_t total = 0;
  {
    TempDir state;
    auto store = OpenStore(state.path());
    EXPECT_NE(store, nullptr);
    if (!store) return 0;
    Enforcer enf(tree.cgroups(), store, {});
    for (size_t i = 0; i < steps.size(); ++i) {
      auto r = RunStep(enf, steps[i]);
      if (all_enforced) ExpectStepOk(steps[i], r, name + " step " + std::to_string(i));
      expected.push_back(tree.Snapshot());
      outcomes.push_back(Outcomes(r));
    }
    total = enf.writes_made();
    EXPECT_EQ(store->size(), 0u);
  }
  EXPECT_TRUE(expected.back() == want_end) << "the uninterrupted run does not restore every byte:"
                                           << SnapshotDiff(expected.back(), want_end);
  size_t kills = 0;
  for (uint64_t k = 1; k <= total; k += Stride()) {
    const std::string where =
        name + ", killed after write " + std::to_string(k) + " of " + std::to_string(total);
    TempDir state;
    const int died_in = RunChild(tree, state.path(), steps, k);
    EXPECT_GE(died_in, 0) << where << ": the child did not die by SIGKILL";
    EXPECT_LT(died_in, static_cast<int>(steps.size())) << where << ": never reached";
    if (died_in < 0 || died_in >= static_cast<int>(steps.size())) return kills;
    ++kills;
    // The restarted agent gets the step it died in again, then the rest.
    auto store = OpenStore(state.path());
    EXPECT_NE(store, nullptr);
    if (!store) return kills;
    Enforcer enf(tree.cgroups(), store, {});
    // A restarted agent's first act is the Apply of the node's current fence (the controller
    // sends it on connect): killed inside an external event, it gets the latest plan first.
    if (steps[static_cast<size_t>(died_in)].external) {
      for (size_t j = static_cast<size_t>(died_in); j-- > 0;) {
        if (steps[j].plan) {
          enf.Apply(*steps[j].plan);
          break;
        }
      }
    }
    for (size_t i = static_cast<size_t>(died_in); i < steps.size(); ++i) {
      const std::string at = where + ", step " + std::to_string(i) + " after restart";
      auto r = RunStep(enf, steps[i]);
      if (all_enforced) ExpectStepOk(steps[i], r, at);
      if (!steps[i].external) {
        EXPECT_EQ(Outcomes(r), outcomes[i]) << at;
      }
      const auto now = tree.Snapshot();
      EXPECT_TRUE(now == expected[i]) << at << ":" << SnapshotDiff(now, expected[i]);
      if (now != expected[i]) return kills;
    }
    EXPECT_EQ(store->size(), 0u) << where;
    const auto end = tree.Snapshot();
    EXPECT_TRUE(end == want_end) << where << ":" << SnapshotDiff(end, want_end);
    if (end != want_end) return kills;
  }
  return kills;
}

TEST_P(CrashPointsTest, KillAfterEveryWriteOfEveryTransitionEndsByteExact) {
  Tree tree(GetParam());
  const Pods pods = MakePods(tree);
  const CpuSet all = tree.CpuList();
  const auto before = tree.Snapshot();
  const std::vector<Fence> fences = Fences(all);
  size_t scenarios = 0, kills = 0;
  for (const Fence& a : fences) {
    for (const Fence& b : fences) {
      if (a.name == b.name) continue;
      const std::string name = a.name + " -> " + b.name + " -> withdrawn";
      kills += KillAtEveryWrite(tree, name, Scenario(pods, a, b, all), before, true);
      ++scenarios;
      if (HasFatalFailure() || HasNonfatalFailure()) return;
    }
  }
  std::cout << "[ info ] " << scenarios << " scenarios, " << kills
            << " kills, every one byte-exact\n";
}

// Two sequences that once left the next apply short (issue: the fence under a living kubelet):
//  - kubelet resizes an Idle-fenced pod; the fence steps aside (v1), kubelet's write lands and
//    the Watcher's Verify puts the fence back — a kill at that cpu.idle=1 write made every later
//    apply step aside again (the request the fence held with was never journaled);
//  - a Quota fence the kernel refuses (v1: a sandbox dir's own limit above the fence's quota)
//    and rolled back — a kill inside the rollback must not leave a container's quota lifted.
TEST_P(CrashPointsTest, KillDuringAResizeLandingAndARefusedQuotaEndsByteExact) {
  Tree tree(GetParam());
  PodIdentity nb = tree.AddPod("nb-resize", QosClass::kBurstable, 1, 256, -1);
  PodIdentity q = tree.AddPod("nb-refused", QosClass::kBurstable, 1, 256, 100000);
  tree.AddDir(tree.PodRel(q) + "/sandbox");
  const std::string sandbox = tree.PodDir(q) + "/sandbox";
  if (tree.v2()) {
    ASSERT_TRUE(WriteKnob(sandbox + "/cpu.max", "90000 100000"));
  } else {
    ASSERT_TRUE(WriteKnob(sandbox + "/cpu.cfs_quota_us", "90000"));
  }
  const std::string weight = tree.PodDir(nb) + "/" + tree.WeightFile();
  const auto before = tree.Snapshot();
  auto idle_plan = [&](int64_t req, uint64_t version) {
    Plan plan;
    plan.fence_version = version;
    NeighbourAction a;
    a.pod = nb;
    a.pod.cpu_request_milli = req;
    a.policy = "p";
    a.idle = true;
    plan.neighbours.push_back(a);
    return plan;
  };
  // kubelet's retry of the resized weight (v2 refuses it on an idle group; kubelet does not retry
  // there, the fence adopts the weight meant instead), then the Watcher's Verify of that file.
  const std::string kubelets = tree.v2() ? std::to_string(cgroup::PodWeightForRequest(1000))
                                         : std::to_string(cgroup::MilliCpuToShares(1000));
  Step kubelet_writes{std::nullopt, [&](Enforcer& enf) {
                        WriteKnob(weight, kubelets);
                        enf.Verify({weight});
                      }};
  const std::vector<Step> resize = {{idle_plan(250, 1)},
                                    {idle_plan(1000, 2)},
                                    kubelet_writes,
                                    {idle_plan(1000, 3)},
                                    {std::nullopt}};
  auto resized = before;  // what kubelet's resize leaves: its new weight
  resized[weight] = kubelets + "\n";
  size_t kills =
      KillAtEveryWrite(tree, "idle -> resized to 1000m -> kubelet's write lands -> withdrawn",
                       resize, resized, false);
  const auto after_resize = tree.Snapshot();
  Plan quota;
  quota.fence_version = 1;
  NeighbourAction a;
  a.pod = q;
  a.policy = "p";
  a.quota = CpuQuota{20000, 100000};
  quota.neighbours.push_back(a);
  kills += KillAtEveryWrite(tree, "a quota fence the kernel refuses -> withdrawn",
                            {{quota}, {quota}, {std::nullopt}}, after_resize, false);
  std::cout << "[ info ] 2 scenarios, " << kills << " kills, every one byte-exact\n";
}

// Issue 26: pods with a task in every container and sandbox cgroup, as on a real node. v2 then
// refuses to empty a pinned set again (ENOSPC), so a Cpuset fence's or a trainer pinning's revert
// goes through the pod dir's cgroup.subtree_control (cpuset off, then on); a kill after each of
// those writes too must still end byte-exact, the pod dirs' own sets never written.
TEST_P(CrashPointsTest, PopulatedPodsEndByteExactAfterAKillAtEveryWrite) {
  Tree tree(GetParam());
  Pods pods;
  pods.trainer = tree.AddPod("trainer-busy", QosClass::kBurstable, 2, 410, -1);
  PodIdentity a = tree.AddPod("nb-busy-a", QosClass::kBurstable, 1, 256, -1);
  PodIdentity b = tree.AddPod("nb-busy-b", QosClass::kBestEffort, 2, 2, -1);
  pods.neighbours = {a, b};
  const std::map<std::string, int> containers = {
      {"trainer-busy", 2}, {"nb-busy-a", 1}, {"nb-busy-b", 2}};
  for (const auto& p : {pods.trainer, a, b}) {
    tree.AddDir(tree.PodRel(p) + "/sandbox");
    tree.AddTask(tree.PodRel(p) + "/sandbox");
    for (int i = 0; i < containers.at(p.uid); ++i) {
      const std::string dir = tree.ContainerDir(p, static_cast<size_t>(i));
      tree.AddTask(tree.PodRel(p) + dir.substr(dir.find_last_of('/')));
    }
  }
  if (HasFatalFailure()) return;
  const CpuSet all = tree.CpuList();
  if (tree.v2()) {
    // What makes this test differ from the one above: the kernel refuses the plain empty write
    // on these cgroups, so every revert below goes through the pod dir's subtree_control.
    const std::string f = tree.ContainerDir(a, 0) + "/cpuset.cpus";
    ASSERT_TRUE(WriteKnob(f, std::to_string(all.ToVector().front())));
    EXPECT_FALSE(WriteKnob(f, "\n")) << "the kernel emptied a populated cpuset: nothing to test";
    ASSERT_TRUE(WriteKnob(tree.PodDir(a) + "/cgroup.subtree_control", "-cpuset"));
    ASSERT_TRUE(WriteKnob(tree.PodDir(a) + "/cgroup.subtree_control", "+cpuset"));
    ASSERT_EQ(Slurp(f), "\n");
  }
  const auto before = tree.Snapshot();
  std::map<std::string, Fence> by_name;
  for (const Fence& f : Fences(all)) by_name.emplace(f.name, f);
  size_t kills = 0;
  for (const auto& [x, y] : std::vector<std::pair<std::string, std::string>>{
           {"cpuset", "idle"}, {"idle", "cpuset"}, {"idle-pin", "quota"}, {"cpuset", "idle-pin"}}) {
    const std::string name = "populated: " + x + " -> " + y + " -> withdrawn";
    kills += KillAtEveryWrite(tree, name, Scenario(pods, by_name.at(x), by_name.at(y), all), before,
                              true);
    if (HasFatalFailure() || HasNonfatalFailure()) return;
  }
  std::cout << "[ info ] 4 scenarios on populated pods, " << kills
            << " kills, every one byte-exact\n";
}

INSTANTIATE_TEST_SUITE_P(Version, CrashPointsTest, BothVersions(), VersionName);

}  // namespace
}  // namespace feedguard::agent
