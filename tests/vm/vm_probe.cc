// vm_probe — a tiny program the harness self-test (run_in_vm_selftest.sh) runs inside the VM.
//   vm_probe args A B ...   prints each argv entry as "arg[i]=<...>", then "env NAME=<value>" (or
//                           "env NAME unset") for FOO, FEEDGUARD_VM, FEEDGUARD_CGROUP2_ROOT; exits
//                           0
//   vm_probe exit N         exits with status N
//   vm_probe sleep S        sleeps S seconds, then exits 0 (for the timeout path)
//   vm_probe poweroff       powers the VM off at once, so no exit marker is printed
//   vm_probe cpu N          runs N million rounds of an integer hash loop, prints the time it took
//                           (compare host vs VM to see how much slower tcg makes CPU-bound code)
//   vm_probe sort N         sorts N million pseudo-random 32-bit ints (memory-bound), prints the
//   time
#include <sys/reboot.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: vm_probe args|env|exit|sleep|poweroff ...\n");
    return 2;
  }
  const char* mode = argv[1];
  if (std::strcmp(mode, "args") == 0) {
    for (int i = 2; i < argc; ++i) std::printf("arg[%d]=<%s>\n", i - 2, argv[i]);
    for (const char* name : {"FOO", "FEEDGUARD_VM", "FEEDGUARD_CGROUP2_ROOT"}) {
      const char* v = std::getenv(name);
      if (v != nullptr)
        std::printf("env %s=<%s>\n", name, v);
      else
        std::printf("env %s unset\n", name);
    }
    return 0;
  }
  if (std::strcmp(mode, "exit") == 0 && argc == 3) return std::atoi(argv[2]);
  if (std::strcmp(mode, "sleep") == 0 && argc == 3) {
    ::sleep(static_cast<unsigned>(std::atoi(argv[2])));
    return 0;
  }
  if (std::strcmp(mode, "cpu") == 0 && argc == 3) {
    const long rounds = std::atol(argv[2]) * 1000000L;
    const auto t0 = std::chrono::steady_clock::now();
    std::uint64_t h = 0x9e3779b97f4a7c15ULL;
    for (long i = 0; i < rounds; ++i)
      h = (h ^ static_cast<std::uint64_t>(i)) * 0xff51afd7ed558ccdULL + (h >> 29);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::printf("cpu: %ld rounds in %.1f ms (%.1f Mrounds/s) h=%llx\n", rounds, ms,
                rounds / ms / 1000.0, static_cast<unsigned long long>(h));
    return 0;
  }
  if (std::strcmp(mode, "sort") == 0 && argc == 3) {
    std::vector<std::uint32_t> v(static_cast<std::size_t>(std::atol(argv[2])) * 1000000U);
    std::uint32_t x = 2463534242U;
    for (auto& e : v) e = x = x * 1664525U + 1013904223U;
    const auto t0 = std::chrono::steady_clock::now();
    std::sort(v.begin(), v.end());
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::printf("sort: %zu ints in %.1f ms (median %u)\n", v.size(), ms, v[v.size() / 2]);
    return 0;
  }
  if (std::strcmp(mode, "poweroff") == 0) {
    std::fflush(stdout);
    ::sync();
    ::reboot(RB_POWER_OFF);  // only ever run as PID 1's child inside the VM
    return 3;
  }
  std::fprintf(stderr, "vm_probe: bad arguments\n");
  return 2;
}
