// cpu_manager_state.cc — parsing kubelet's cpu_manager_state checkpoint.
#include "agent/planner/cpu_manager_state.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace feedguard::agent {

CpuSet CpuManagerState::ExclusiveCpus() const {
  CpuSet out;
  for (const auto& [uid, containers] : entries) {
    for (const auto& [name, cpus] : containers) out = out.Union(cpus);
  }
  return out;
}

Result<CpuManagerState> ParseCpuManagerState(std::string_view text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return InvalidArgument("cpu_manager_state is not a JSON object");
  }
  CpuManagerState out;
  if (auto it = j.find("policyName"); it != j.end()) {
    if (!it->is_string()) return InvalidArgument("cpu_manager_state: policyName is not a string");
    out.policy_name = it->get<std::string>();
  }
  if (auto it = j.find("defaultCpuSet"); it != j.end()) {
    if (!it->is_string()) return InvalidArgument("cpu_manager_state: defaultCpuSet not a string");
    auto set = CpuSet::Parse(it->get<std::string>());
    if (!set.ok()) return set.status().Annotate("cpu_manager_state defaultCpuSet");
    out.default_cpus = *set;
  }
  if (auto it = j.find("entries"); it != j.end() && !it->is_null()) {
    if (!it->is_object()) return InvalidArgument("cpu_manager_state: entries is not an object");
    for (const auto& [uid, containers] : it->items()) {
      if (!containers.is_object()) {
        return InvalidArgument("cpu_manager_state: entries." + uid + " is not an object");
      }
      for (const auto& [name, cpus] : containers.items()) {
        if (!cpus.is_string()) {
          return InvalidArgument("cpu_manager_state: entries." + uid + "." + name +
                                 " is not a string");
        }
        auto set = CpuSet::Parse(cpus.get<std::string>());
        if (!set.ok()) return set.status().Annotate("cpu_manager_state entries." + uid);
        out.entries[uid][name] = *set;
      }
    }
  }
  return out;
}

Result<CpuManagerState> LoadCpuManagerState(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return CpuManagerState{};
  std::ifstream in(path, std::ios::binary);
  if (!in) return PermissionDenied("cannot read " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  auto state = ParseCpuManagerState(ss.str());
  if (!state.ok()) return state.status().Annotate(path);
  return state;
}

}  // namespace feedguard::agent
