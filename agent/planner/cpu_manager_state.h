// cpu_manager_state.h — kubelet's static CPU manager checkpoint
// (/var/lib/kubelet/cpu_manager_state).
//
// {"policyName":"static","defaultCpuSet":"0-1,6-7","entries":{"<pod uid>":{"<container>":"2-5"}},
//  "checksum":123}. The CPUs listed under `entries` are exclusively owned by kubelet: feedguard
// treats them as taken (never gives them to a trainer, never puts a neighbour on them) and does
// not pin pods that own some (kubelet already does). Policy "none" has no entries.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "common/cpuset.h"
#include "feedguard/common/status.h"

namespace feedguard::agent {

inline constexpr std::string_view kCpuManagerStatePath = "/var/lib/kubelet/cpu_manager_state";

struct CpuManagerState {
  std::string policy_name;  // "none" | "static" | "" (no file)
  CpuSet default_cpus;      // the shared pool
  // pod uid → container name → exclusive CPUs.
  std::map<std::string, std::map<std::string, CpuSet>> entries;

  // Union of every exclusive assignment.
  CpuSet ExclusiveCpus() const;
  bool OwnsCpusOf(const std::string& pod_uid) const { return entries.count(pod_uid) != 0; }
};

Result<CpuManagerState> ParseCpuManagerState(std::string_view json);
// A missing file is an empty state (CPU manager policy "none" or kubelet not there yet).
Result<CpuManagerState> LoadCpuManagerState(
    const std::string& path = std::string(kCpuManagerStatePath));

}  // namespace feedguard::agent
