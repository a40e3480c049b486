// fixtures.h — the plugin's test data (test-only, header-only): a StarvationReport in the shape
// the controller writes (starvation_report.json: three starving GPU pods of four observed on two
// nodes, worst first; one without NVML, one whose main contender is its node, contenders gone or
// unnamed) and the pods it names (pods.json, with per-instance labels; plus GPU pods that are not
// in the report and a pod without a GPU). The apiserver tier (tests/integration/plugin) writes the
// same two files into a real API server.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

namespace feedguard::plugin::testing {

inline nlohmann::json LoadTestdata(const std::string& file) {
  std::ifstream in(std::string(FG_SOURCE_DIR) + "/plugin/testdata/" + file);
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

inline const nlohmann::json& ReportFixture() {
  static const nlohmann::json kReport = LoadTestdata("starvation_report.json");
  return kReport;
}

// The pod namespace/name of pods.json; null when it holds none.
inline nlohmann::json PodFixture(const std::string& ns, const std::string& name) {
  static const nlohmann::json kPods = LoadTestdata("pods.json");
  for (const auto& p : kPods["items"]) {
    if (p["metadata"]["namespace"] == ns && p["metadata"]["name"] == name) return p;
  }
  return nullptr;
}

}  // namespace feedguard::plugin::testing
