// spinner.cc — fg-wedge-spinner: a batch neighbour for the wedge benchmark.
//
// One thread of pure integer work, counted in "work units" (a fixed chunk of arithmetic,
// ~tens of microseconds). It exits after --duration seconds or on SIGTERM/SIGINT (blocked and
// polled between units, so no signal handler and no global state), then reports the work done
// and the CPU seconds it received as one JSON line on stdout and, atomically, to --out.
#include <signal.h>

#include <cctype>

#include "bench/wedge/wedge_common.h"

namespace feedguard::bench::wedge {
namespace {

constexpr uint64_t kItersPerUnit = 20000;

// One unit of work: a dependent multiply/xor chain the compiler cannot fold away.
uint64_t WorkUnit(uint64_t x) {
  for (uint64_t i = 0; i < kItersPerUnit; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    x = x * 0x9E3779B97F4A7C15ULL + i;
  }
  return x;
}

bool TerminationPending() {
  sigset_t pending;
  sigemptyset(&pending);
  if (::sigpending(&pending) != 0) return false;
  return sigismember(&pending, SIGTERM) == 1 || sigismember(&pending, SIGINT) == 1 ||
         sigismember(&pending, SIGHUP) == 1;
}

}  // namespace
}  // namespace feedguard::bench::wedge

int main(int argc, char** argv) {
  using namespace feedguard::bench::wedge;
  Flags f(argc, argv, {"help"});
  if (f.Has("help")) {
    std::puts("usage: fg-wedge-spinner --duration S [--out FILE] [--label NAME]");
    return 0;
  }
  const double duration = f.Num("duration", 60);
  const std::string out = f.Str("out", "");
  const std::string label = f.Str("label", "");
  auto errors = f.Errors();
  if (!(duration > 0) || duration > 86400) errors.push_back("--duration must be in (0, 86400]");
  for (char c : label) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) {
      errors.push_back("--label may hold only [A-Za-z0-9._-]");
      break;
    }
  }
  if (!errors.empty()) {
    for (const auto& e : errors) std::fprintf(stderr, "fg-wedge-spinner: %s\n", e.c_str());
    return 64;
  }

  // Block the termination signals; they stay pending and are polled between work units.
  sigset_t watched;
  sigemptyset(&watched);
  sigaddset(&watched, SIGTERM);
  sigaddset(&watched, SIGINT);
  sigaddset(&watched, SIGHUP);
  ::sigprocmask(SIG_BLOCK, &watched, nullptr);

  const double start = MonoNow();
  const double deadline = start + duration;
  uint64_t units = 0;
  uint64_t x = 0x1234567ULL ^ static_cast<uint64_t>(::getpid());
  std::string reason = "duration";
  for (;;) {
    x = WorkUnit(x);
    ++units;
    if ((units & 15) == 0) {
      if (MonoNow() >= deadline) break;
      if (TerminationPending()) {
        reason = "signal";
        break;
      }
    }
  }
  const double wall = MonoNow() - start;
  const double cpu = RusageSeconds(RUSAGE_SELF);
  std::string j = "{\"work_units\": " + std::to_string(units) +
                  ", \"cpu_seconds\": " + JsonNum(cpu) + ", \"wall_s\": " + JsonNum(wall) +
                  ", \"units_per_cpu_s\": " + JsonNum(cpu > 0 ? units / cpu : 0) +
                  ", \"reason\": \"" + reason + "\", \"label\": \"" + label +
                  "\", \"checksum\": " + std::to_string(x & 0xffff) + "}\n";
  std::fputs(j.c_str(), stdout);
  std::fflush(stdout);
  if (!out.empty() && !WriteFileAtomic(out, j)) {
    std::fprintf(stderr, "fg-wedge-spinner: cannot write %s\n", out.c_str());
    return 2;
  }
  return 0;
}
