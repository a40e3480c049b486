// wedge_common.h — small helpers shared by the wedge benchmark workloads (fg-wedge-trainer,
// fg-wedge-spinner): RAII file descriptors, monotonic / CPU clocks, "--flag value" parsing and
// atomic writes of the one-line JSON result. Header-only; benchmark tools only, not a library
// other components should use.
#pragma once

#include <fcntl.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/fd.h"

namespace feedguard::bench::wedge {

// Owns one file descriptor; closes it on destruction (common/fd.h).
using feedguard::Fd;

// A pipe as two owned ends.
struct Pipe {
  Fd read_end;
  Fd write_end;
  static std::optional<Pipe> Make() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return std::nullopt;
    return Pipe{Fd(fds[0]), Fd(fds[1])};
  }
};

// CLOCK_MONOTONIC in seconds: the same clock as Python's time.monotonic(), so the driver can
// line up the trainer's measurement window with its own samples of cgroup counters.
inline double MonoNow() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// CPU seconds consumed so far by process `pid` (0 = this process), or nullopt if it is gone.
inline std::optional<double> ProcessCpuSeconds(pid_t pid) {
  clockid_t clk = CLOCK_PROCESS_CPUTIME_ID;
  if (pid != 0 && ::clock_getcpuclockid(pid, &clk) != 0) return std::nullopt;
  timespec ts{};
  if (::clock_gettime(clk, &ts) != 0) return std::nullopt;
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Time (s) the process's main thread has spent runnable but waiting for a CPU: the second field
// of /proc/<pid>/schedstat (run_delay, ns; always kept by the kernel's sched_info). pid 0 = self.
// Single-threaded processes only (the trainer's main loop and its forked workers are).
inline std::optional<double> ProcessRunDelaySeconds(pid_t pid) {
  const std::string path = pid == 0 ? std::string("/proc/self/schedstat")
                                    : "/proc/" + std::to_string(pid) + "/schedstat";
  FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return std::nullopt;
  unsigned long long on_cpu = 0, run_delay = 0;
  const int n = std::fscanf(f, "%llu %llu", &on_cpu, &run_delay);
  std::fclose(f);
  if (n != 2) return std::nullopt;
  return static_cast<double>(run_delay) * 1e-9;
}

inline double RusageSeconds(int who) {
  rusage ru{};
  ::getrusage(who, &ru);
  auto tv = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6;
  };
  return tv(ru.ru_utime) + tv(ru.ru_stime);
}

// Sleeps until the absolute CLOCK_MONOTONIC time `t` (seconds); uses no CPU.
inline void SleepUntil(double t) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(t);
  ts.tv_nsec = static_cast<long>((t - static_cast<double>(ts.tv_sec)) * 1e9);
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec += 1;
    ts.tv_nsec -= 1000000000L;
  }
  while (::clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

// Minimal "--name value" / "--name=value" / "--switch" parser.
class Flags {
 public:
  // `switches` are flags that take no value.
  Flags(int argc, char** argv, std::vector<std::string> switches) {
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      if (a.rfind("--", 0) != 0) {
        errors_.push_back("unexpected argument: " + a);
        continue;
      }
      a = a.substr(2);
      auto eq = a.find('=');
      if (eq != std::string::npos) {
        values_[a.substr(0, eq)] = a.substr(eq + 1);
        continue;
      }
      bool is_switch = false;
      for (const auto& s : switches) is_switch = is_switch || s == a;
      if (is_switch) {
        values_[a] = "1";
      } else if (i + 1 < argc) {
        values_[a] = argv[++i];
      } else {
        errors_.push_back("flag --" + a + " needs a value");
      }
    }
  }
  bool Has(const std::string& name) const { return values_.count(name) != 0; }
  std::string Str(const std::string& name, std::string def) {
    used_.push_back(name);
    auto it = values_.find(name);
    return it == values_.end() ? def : it->second;
  }
  double Num(const std::string& name, double def) {
    used_.push_back(name);
    auto it = values_.find(name);
    if (it == values_.end()) return def;
    char* end = nullptr;
    double v = std::strtod(it->second.c_str(), &end);
    if (end == it->second.c_str() || *end != '\0') {
      errors_.push_back("flag --" + name + ": not a number: " + it->second);
      return def;
    }
    return v;
  }
  int Int(const std::string& name, int def) { return static_cast<int>(Num(name, def)); }
  // Errors so far, plus every flag given that nobody asked for.
  std::vector<std::string> Errors() const {
    std::vector<std::string> out = errors_;
    for (const auto& [k, v] : values_) {
      bool used = false;
      for (const auto& u : used_) used = used || u == k;
      if (!used) out.push_back("unknown flag --" + k);
    }
    return out;
  }

 private:
  std::map<std::string, std::string> values_;
  std::vector<std::string> used_;
  std::vector<std::string> errors_;
};

// Writes `text` to `path` atomically (temp file + rename), so a reader never sees half a line.
inline bool WriteFileAtomic(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd.valid()) return false;
  size_t off = 0;
  while (off < text.size()) {
    ssize_t n = ::write(fd.get(), text.data() + off, text.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  if (::fsync(fd.get()) != 0) return false;
  fd.Reset();
  return ::rename(tmp.c_str(), path.c_str()) == 0;
}

// Formats a double for JSON (finite values only; callers never pass NaN/inf).
inline std::string JsonNum(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

}  // namespace feedguard::bench::wedge
