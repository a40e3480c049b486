// proc_scan_bench.cc — one HostTasks::Scan of a procfs, as the agent runs it once per period on
// a node without per-cgroup PSI: every /proc/<pid>/cgroup read and matched against 64 observed
// pods (kubepods paths; this process's own cgroup is the 64th, so matches are made too).
//
// Usage: fg-proc-scan-bench [--benchmark_repetitions=N ...]
// Environment: FG_PROC_ROOT (default /proc: on a node, the host's; in the agent's pod, /host/proc).
// Counters: processes (entries scanned), per_process (seconds per entry, printed with an SI
// prefix: 2.5u is 2.5 µs).
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <string>

#include "agent/cgroup/fs_cgroups.h"
#include "agent/observe/host_tasks.h"

namespace feedguard::agent::observe {
namespace {

void BM_ScanProc(benchmark::State& state) {
  const char* env = std::getenv("FG_PROC_ROOT");
  const std::string root = env != nullptr ? env : "/proc";
  cgroup::CgroupLayout layout;
  auto self = cgroup::ReadCgroupFile(root + "/self/cgroup");
  // A v1 host has "N:cpu…" lines; a v2-only host only "0::".
  const bool v1 = self.ok() && CpuCgroupOf(*self, cgroup::CgroupVersion::kV1).has_value();
  layout.version = v1 ? cgroup::CgroupVersion::kV1 : cgroup::CgroupVersion::kV2;
  std::map<std::string, std::string> pods;
  for (int i = 0; i < 63; ++i) {
    pods["pod-" + std::to_string(i)] =
        "kubepods.slice/kubepods-burstable.slice/pod" + std::to_string(i) + ".slice";
  }
  if (self.ok()) {
    if (auto own = CpuCgroupOf(*self, layout.version)) {
      pods["self"] = ResolveCgroupPath(*own, "").value_or("");
    }
  }
  HostTasks tasks(root, layout, static_cast<int>(::getpid()));
  size_t processes = 0;
  for (auto _ : state) {
    auto scan = tasks.Scan(pods);
    if (!scan.ok()) {
      state.SkipWithError(scan.status().ToString().c_str());
      return;
    }
    processes = scan->processes;
    benchmark::DoNotOptimize(scan->pids);
  }
  state.counters["processes"] = static_cast<double>(processes);
  state.counters["per_process"] =
      benchmark::Counter(static_cast<double>(processes) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_ScanProc)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace feedguard::agent::observe

BENCHMARK_MAIN();
