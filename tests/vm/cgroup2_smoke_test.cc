// cgroup2_smoke_test — proves the qemu harness (run_in_vm.sh) gives tests a real cgroup v2 kernel:
// cgroup2 at $FEEDGUARD_CGROUP2_ROOT (default /sys/fs/cgroup) with cpu (incl. cpu.idle) and cpuset
// enabled for children; knobs accept and reject values as the kernel does; a process we start and
// move is accounted (cpu.stat usage_usec grows), throttled by cpu.max and confined by cpuset.cpus.
// Meant to run only inside the VM: on a host without cgroup v2 there it FAILS (never skips).
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>

namespace {

std::string Cgroup2Root() {
  const char* env = std::getenv("FEEDGUARD_CGROUP2_ROOT");
  return env != nullptr && *env != '\0' ? env : "/sys/fs/cgroup";
}

std::optional<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// Writes `value` with one write(2), as the kernel wants for cgroup knobs. Returns 0 or the errno.
int WriteKnob(const std::string& path, const std::string& value) {
  FILE* f = std::fopen(path.c_str(), "we");
  if (f == nullptr) return errno;
  int err = 0;
  if (std::fwrite(value.data(), 1, value.size(), f) != value.size()) err = errno;
  if (std::fclose(f) != 0 && err == 0) err = errno;  // the kernel's verdict arrives at flush
  return err;
}

bool Exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// "key value" lines (cpu.stat) → map.
std::map<std::string, long long> ParseFlatKeyed(const std::string& text) {
  std::map<std::string, long long> out;
  std::istringstream in(text);
  std::string key;
  long long value = 0;
  while (in >> key >> value) out[key] = value;
  return out;
}

bool HasWord(const std::string& list, const std::string& word) {
  std::istringstream in(list);
  std::string w;
  while (in >> w)
    if (w == word) return true;
  return false;
}

// A child cgroup we created; removed (bounded retries) when it goes out of scope.
class ScopedCgroup {
 public:
  explicit ScopedCgroup(std::string path) : path_(std::move(path)) {
    if (::mkdir(path_.c_str(), 0755) == 0)
      created_ = true;
    else
      err_ = errno;
  }
  ~ScopedCgroup() {
    if (!created_) return;
    for (int i = 0; i < 100; ++i) {  // ≤ 2 s: a just-reaped task can leave it busy briefly
      if (::rmdir(path_.c_str()) == 0 || errno == ENOENT) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ADD_FAILURE() << "could not remove " << path_ << ": " << std::strerror(errno);
  }
  ScopedCgroup(const ScopedCgroup&) = delete;
  ScopedCgroup& operator=(const ScopedCgroup&) = delete;
  bool ok() const { return created_; }
  int error() const { return err_; }
  const std::string& path() const { return path_; }
  std::string knob(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
  bool created_ = false;
  int err_ = 0;
};

// A busy-looping child process we started; SIGKILLed and reaped when it goes out of scope.
class ScopedSpinner {
 public:
  ScopedSpinner() {
    pid_ = ::fork();
    if (pid_ == 0) {
      ::alarm(120);  // never outlives a crashed parent by much
      volatile unsigned long long n = 0;
      for (;;) n = n + 1;
    }
  }
  ~ScopedSpinner() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
  ScopedSpinner(const ScopedSpinner&) = delete;
  ScopedSpinner& operator=(const ScopedSpinner&) = delete;
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
};

class Cgroup2SmokeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = Cgroup2Root();
    struct statfs fs {};
    ASSERT_EQ(::statfs(root_.c_str(), &fs), 0) << root_ << ": " << std::strerror(errno);
    ASSERT_EQ(static_cast<unsigned long>(fs.f_type),
              static_cast<unsigned long>(CGROUP2_SUPER_MAGIC))
        << root_ << " is not a cgroup2 mount (run this test through tests/vm/run_in_vm.sh)";
    std::random_device rd;
    name_ = "feedguard-test-" + std::to_string(::getpid()) + "-" + std::to_string(rd() % 1000000);
  }
  std::string root_;
  std::string name_;
};

TEST_F(Cgroup2SmokeTest, RootOffersCpuAndCpusetToChildren) {
  auto controllers = ReadFile(root_ + "/cgroup.controllers");
  auto subtree = ReadFile(root_ + "/cgroup.subtree_control");
  ASSERT_TRUE(controllers.has_value());
  ASSERT_TRUE(subtree.has_value());
  for (const char* c : {"cpu", "cpuset", "io", "memory", "pids"}) {
    EXPECT_TRUE(HasWord(*controllers, c))
        << c << " missing from cgroup.controllers: " << *controllers;
    EXPECT_TRUE(HasWord(*subtree, c)) << c << " not enabled in subtree_control: " << *subtree;
  }
}

TEST_F(Cgroup2SmokeTest, ChildKnobsExistAndKernelValidatesWrites) {
  ScopedCgroup cg(root_ + "/" + name_);
  ASSERT_TRUE(cg.ok()) << "mkdir " << cg.path() << ": " << std::strerror(cg.error());

  for (const char* knob : {"cpu.weight", "cpu.idle", "cpu.max", "cpu.stat", "cpuset.cpus",
                           "cpuset.cpus.effective", "cpuset.mems", "cgroup.procs"}) {
    EXPECT_TRUE(Exists(cg.knob(knob))) << knob << " missing in " << cg.path();
  }
  // Kernel defaults for a fresh child.
  EXPECT_EQ(ReadFile(cg.knob("cpu.weight")), "100");
  EXPECT_EQ(ReadFile(cg.knob("cpu.idle")), "0");
  EXPECT_EQ(ReadFile(cg.knob("cpu.max")), "max 100000");

  EXPECT_EQ(WriteKnob(cg.knob("cpu.weight"), "7"), 0);
  EXPECT_EQ(ReadFile(cg.knob("cpu.weight")), "7");
  // cpu.weight is 1..10000: a real kernel rejects 0 and 10001 with ERANGE/EINVAL.
  EXPECT_NE(WriteKnob(cg.knob("cpu.weight"), "0"), 0);
  EXPECT_NE(WriteKnob(cg.knob("cpu.weight"), "10001"), 0);
  EXPECT_EQ(ReadFile(cg.knob("cpu.weight")), "7");

  EXPECT_EQ(WriteKnob(cg.knob("cpu.idle"), "1"), 0);
  EXPECT_EQ(ReadFile(cg.knob("cpu.idle")), "1");
  EXPECT_EQ(WriteKnob(cg.knob("cpu.idle"), "0"), 0);

  EXPECT_EQ(WriteKnob(cg.knob("cpu.max"), "50000 100000"), 0);
  EXPECT_EQ(ReadFile(cg.knob("cpu.max")), "50000 100000");
  EXPECT_EQ(WriteKnob(cg.knob("cpu.max"), "max"), 0);
  EXPECT_EQ(ReadFile(cg.knob("cpu.max")), "max 100000");

  EXPECT_EQ(WriteKnob(cg.knob("cpuset.cpus"), "0"), 0);
  EXPECT_EQ(ReadFile(cg.knob("cpuset.cpus")), "0");
  EXPECT_EQ(ReadFile(cg.knob("cpuset.cpus.effective")), "0");
}

TEST_F(Cgroup2SmokeTest, MovedSpinnerIsAccountedThrottledAndConfined) {
  const long ncpu = ::sysconf(_SC_NPROCESSORS_ONLN);
  ASSERT_GE(ncpu, 2) << "the VM should have 2 CPUs (-smp 2) so cpuset confinement is observable";
  ScopedCgroup cg(root_ + "/" + name_);
  ASSERT_TRUE(cg.ok()) << "mkdir " << cg.path() << ": " << std::strerror(cg.error());
  ASSERT_EQ(WriteKnob(cg.knob("cpu.max"), "20000 100000"), 0);  // 20% of one CPU
  ASSERT_EQ(WriteKnob(cg.knob("cpuset.cpus"), "1"), 0);

  ScopedSpinner spinner;
  ASSERT_GT(spinner.pid(), 0) << "fork: " << std::strerror(errno);
  ASSERT_EQ(WriteKnob(cg.knob("cgroup.procs"), std::to_string(spinner.pid())), 0);
  EXPECT_EQ(ReadFile("/proc/" + std::to_string(spinner.pid()) + "/cgroup"), "0::/" + name_);
  EXPECT_EQ(ReadFile(cg.knob("cgroup.procs")), std::to_string(spinner.pid()));

  cpu_set_t mask;
  CPU_ZERO(&mask);
  ASSERT_EQ(::sched_getaffinity(spinner.pid(), sizeof(mask), &mask), 0);
  EXPECT_EQ(CPU_COUNT(&mask), 1);
  EXPECT_TRUE(CPU_ISSET(1, &mask)) << "spinner not confined to cpuset.cpus=1";

  auto before_text = ReadFile(cg.knob("cpu.stat"));
  ASSERT_TRUE(before_text.has_value());
  const auto before = ParseFlatKeyed(*before_text);
  ASSERT_TRUE(before.count("usage_usec") && before.count("nr_throttled")) << *before_text;
  const auto t0 = std::chrono::steady_clock::now();

  // Wait (bounded, ≤ 20 s of guest time) until the spinner has used ≥ 100 ms CPU and been
  // throttled.
  std::map<std::string, long long> after;
  for (int i = 0; i < 200; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    after = ParseFlatKeyed(ReadFile(cg.knob("cpu.stat")).value_or(""));
    if (after["usage_usec"] - before.at("usage_usec") >= 100000 &&
        after["nr_throttled"] > before.at("nr_throttled") && i >= 9)
      break;
  }
  const double wall_usec =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  const long long used = after["usage_usec"] - before.at("usage_usec");
  std::printf("spinner: used %lld us CPU in %.0f us wall, nr_throttled %lld, throttled_usec %lld\n",
              used, wall_usec, after["nr_throttled"], after["throttled_usec"]);
  EXPECT_GE(used, 100000) << "usage_usec did not grow: the spinner is not accounted to the cgroup";
  EXPECT_GT(after["nr_throttled"], before.at("nr_throttled")) << "cpu.max 20% never throttled";
  // 20% quota: a spinner may use at most ~20% of wall time (+ one period of slack), far below 60%.
  EXPECT_LT(static_cast<double>(used), 0.6 * wall_usec) << "cpu.max quota not enforced";
}

}  // namespace
