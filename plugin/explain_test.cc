#include "plugin/explain.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "plugin/testdata/fixtures.h"

namespace feedguard::plugin {
namespace {

using Json = nlohmann::json;
using testing::PodFixture;
using testing::ReportFixture;

StarvationReport Fixture() {
  auto r = ParseStarvationReport(ReportFixture());
  EXPECT_TRUE(r.ok());
  return r.ok() ? *r : StarvationReport{};
}

PolicySuggestion TrainerAPolicy() {
  SuggestInput in;
  in.trainer = PodFixture("ml", "trainer-a");
  in.contenders = {PodFixture("batch", "spin-a"), PodFixture("batch", "spin-c"),
                   PodFixture("etl", "loader-0")};
  in.contenders_gone = {"batch/spin-gone"};
  return SuggestPolicy(in);
}

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(ExplainTest, GpuPods) {
  for (const char* name : {"trainer-a", "trainer-b", "trainer-d", "trainer-e"}) {
    EXPECT_TRUE(IsGpuPod(PodFixture("ml", name))) << name;
  }
  EXPECT_TRUE(IsGpuPod(PodFixture("vision", "trainer-c")));
  EXPECT_FALSE(IsGpuPod(PodFixture("ml", "notebook")));
  EXPECT_FALSE(IsGpuPod(PodFixture("batch", "spin-a")));
  auto pod = [](const char* resources) {
    return Json::parse(std::string(R"({"spec": {"initContainers": [{"name": "i"}],
        "containers": [{"name": "c", "resources": )") +
                       resources + "}]}}");
  };
  EXPECT_TRUE(IsGpuPod(pod(R"({"limits": {"nvidia.com/mig-1g.5gb": "2"}})")));
  EXPECT_TRUE(IsGpuPod(pod(R"({"limits": {"amd.com/gpu": 1}})")));
  EXPECT_TRUE(IsGpuPod(pod(R"({"requests": {"nvidia.com/gpu.shared": "1"}})")));
  EXPECT_FALSE(IsGpuPod(pod(R"({"limits": {"nvidia.com/gpu": "0"}})")));
  EXPECT_FALSE(IsGpuPod(pod(R"({"limits": {"example.com/gpu": "1", "cpu": "8"}})")));
  EXPECT_FALSE(IsGpuPod(pod(R"("nonsense")")));
  EXPECT_TRUE(IsGpuPod(Json::parse(R"({"spec": {"initContainers": [{"name": "sidecar",
      "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}})")));
}

TEST(ExplainTest, ContendersAndTheMainOne) {
  const StarvationReport r = Fixture();
  using P = std::pair<std::string, std::string>;
  EXPECT_EQ(
      ContenderPods(*r.Find("ml", "trainer-a")),
      (std::vector<P>{
          {"batch", "spin-a"}, {"batch", "spin-c"}, {"etl", "loader-0"}, {"batch", "spin-gone"}}));
  EXPECT_EQ(ContenderPods(*r.Find("vision", "trainer-c")), (std::vector<P>{{"batch", "spin-c"}}));
  ReportPod quiet;  // windows without contenders
  quiet.windows = {{.seconds = 60}, {.seconds = 600}};
  EXPECT_TRUE(ContenderPods(quiet).empty());

  EXPECT_EQ(MainContender(*r.Find("ml", "trainer-a"))->name, "spin-a");
  EXPECT_EQ(MainContender(*r.Find("vision", "trainer-c"))->kind, "Node");
  EXPECT_EQ(MainContender(quiet), nullptr);
  EXPECT_TRUE(NodeContenderAdvice(*r.Find("ml", "trainer-a")).empty());
  // trainer-b's node is a contender, but not the main one.
  EXPECT_TRUE(NodeContenderAdvice(*r.Find("ml", "trainer-b")).empty());
  std::string advice;
  for (const auto& l : NodeContenderAdvice(*r.Find("vision", "trainer-c"))) advice += l + " ";
  EXPECT_TRUE(Has(advice, "The main contender is the node itself")) << advice;
  EXPECT_TRUE(Has(advice, "ran 50.0s on this pod's CPUs")) << advice;
  EXPECT_TRUE(Has(advice, "A FencePolicy cannot fence host processes")) << advice;
  EXPECT_TRUE(Has(advice, "--system-reserved")) << advice;
  EXPECT_TRUE(Has(advice, "reservedSystemCPUs")) << advice;
}

// The whole output is one YAML document: the explanation in comments, then the policy.
TEST(ExplainTest, RendersWindowsContendersAndThePolicy) {
  const StarvationReport r = Fixture();
  const PolicySuggestion policy = TrainerAPolicy();
  const std::string out = RenderExplain(*r.Find("ml", "trainer-a"), &policy);

  const size_t api = out.find("\napiVersion: feedguard.io/v1alpha1\n");
  ASSERT_NE(api, std::string::npos) << out;
  for (size_t pos = 0; pos <= api;) {  // every line before the policy is a comment
    EXPECT_EQ(out[pos], '#') << out.substr(pos, out.find('\n', pos) - pos);
    pos = out.find('\n', pos) + 1;
  }
  const YAML::Node doc = YAML::Load(out);
  EXPECT_EQ(doc["kind"].as<std::string>(), "FencePolicy");
  EXPECT_EQ(doc["metadata"]["name"].as<std::string>(), "fence-trainer-a");
  EXPECT_EQ(doc["spec"]["mode"].as<std::string>(), "DryRun");
  EXPECT_EQ(doc["spec"]["neighbours"]["podSelector"]["matchLabels"]["tier"].as<std::string>(),
            "batch");

  // The report names no policy for it: nothing is said about one.
  EXPECT_TRUE(Has(out, "# GPU pod ml/trainer-a on node gpu-node-1, CPU request 4.00 cores.\n#\n"))
      << out;
  // One row per window: covered, wait (%), source, CPU used of request, throttled, GPU busy, lost.
  EXPECT_TRUE(Has(
      out, "# WINDOW   COVERED   WAIT             BY PODS   BY NODE   OWN    SOURCE   CPU USED"))
      << out;
  // Windows without the split (an older controller's) count the whole wait as behind pods.
  EXPECT_TRUE(Has(out,
                  "# 1m       60.0s     12.0s (20.0%)    20.0%     0.0%      0.0%   psi      3.10 "
                  "cores of 4.00 requested   0.0s        45%        6.6s (0.0s..12.0s)\n"))
      << out;
  EXPECT_TRUE(Has(out,
                  "# 10m      10m0s     120.0s (20.0%)   13.3%     3.3%      3.3%   psi      3.10 "
                  "cores of 4.00 requested   0.0s        50%        80.0s (20.0s..100.0s)\n"))
      << out;
  EXPECT_TRUE(Has(out,
                  "# 1h       1h0m      11m40s (19.4%)   19.4%     0.0%      0.0%   psi      3.06 "
                  "cores of 4.00 requested   12.5s       52%        534.5s (100.0s..11m40s)\n"))
      << out;
  EXPECT_TRUE(Has(out, "# Contenders (who ran on its CPUs while it waited, CPU-seconds):\n"));
  EXPECT_TRUE(Has(out,
                  "#   10m: batch/spin-a (60.0s), batch/spin-c (40.0s), etl/loader-0 "
                  "(30.0s), node (10.0s)\n"))
      << out;
  EXPECT_TRUE(Has(
      out, "#   1h: batch/spin-a (300.0s), batch/spin-gone (100.0s), pod uid-vanished (50.0s)\n"))
      << out;
  EXPECT_TRUE(Has(out, "# neighbours: the 3 contender pods found all carry tier=batch.\n"));
  EXPECT_TRUE(Has(out, "kubectl feedguard explain trainer-a -n ml | kubectl apply -f -")) << out;
  EXPECT_FALSE(Has(out, "no NVML"));
  EXPECT_FALSE(Has(out, "main contender is the node"));
}

TEST(ExplainTest, WaitOnlyAndTheNodeAsMainContender) {
  const StarvationReport r = Fixture();
  SuggestInput in;
  in.trainer = PodFixture("vision", "trainer-c");
  in.contenders = {PodFixture("batch", "spin-c")};
  const PolicySuggestion policy = SuggestPolicy(in);
  const std::string out = RenderExplain(*r.Find("vision", "trainer-c"), &policy);
  EXPECT_TRUE(Has(out, "\n# FencePolicy vision-trainers covers it as a trainer.\n")) << out;
  EXPECT_TRUE(Has(out, "# neighbours: the one contender pod found carries app=spin, tier=batch.\n"))
      << out;
  EXPECT_TRUE(Has(out, "schedstat")) << out;
  EXPECT_TRUE(
      Has(out,
          "1h       30m0s     250.0s (13.9%)   13.9%     0.0%      0.0%   schedstat   0.83 cores "
          "of 1.00 requested   30.0s       n/a        n/a\n"))
      << out;
  EXPECT_TRUE(Has(out, "# n/a: no NVML on its node: wait only.\n")) << out;
  EXPECT_TRUE(Has(out, "# The main contender is the node itself")) << out;
  EXPECT_TRUE(Has(out, "cannot fence host processes")) << out;
  EXPECT_TRUE(Has(out, "kubectl label pod -n vision trainer-c feedguard.io/role=trainer")) << out;
  EXPECT_NO_THROW(YAML::Load(out));

  const std::string gone = RenderExplain(*r.Find("vision", "trainer-c"), nullptr);
  EXPECT_TRUE(
      Has(gone, "# The pod no longer exists: no FencePolicy can be built from its labels."));
  EXPECT_FALSE(Has(gone, "apiVersion"));
}

TEST(ExplainTest, Json) {
  const StarvationReport r = Fixture();
  const PolicySuggestion policy = TrainerAPolicy();
  const Json j = ExplainJson(*r.Find("ml", "trainer-a"), &policy);
  EXPECT_EQ(j["pod"], ReportFixture()["status"]["pods"][0]);
  EXPECT_EQ(j["suggestedPolicy"], policy.policy);
  EXPECT_EQ(j["mainContender"]["name"], "spin-a");
  EXPECT_EQ(j["mainContender"]["namespace"], "batch");
  EXPECT_EQ(j["notes"].size(), 2u);
  EXPECT_TRUE(j["advice"].empty());
  const Json c = ExplainJson(*r.Find("vision", "trainer-c"), nullptr);
  EXPECT_TRUE(c["suggestedPolicy"].is_null());
  EXPECT_EQ(c["mainContender"]["kind"], "Node");
  ASSERT_EQ(c["advice"].size(), 1u);
  EXPECT_TRUE(Has(c["advice"][0], "cannot fence host processes"));
}

TEST(ExplainTest, WhyAPodIsNotInTheReport) {
  const StarvationReport r = Fixture();
  auto why = [&](const StarvationReport& rep, const std::string& ns, const std::string& name,
                 const std::optional<Json>& pod) { return ExplainAbsence(rep, ns, name, pod); };

  auto missing = why(r, "ml", "nope", std::nullopt);
  EXPECT_EQ(missing.absence, Absence::kPodNotFound);
  EXPECT_EQ(missing.message, "pod ml/nope not found");

  auto notebook = why(r, "ml", "notebook", PodFixture("ml", "notebook"));
  EXPECT_EQ(notebook.absence, Absence::kNotAGpuPod);
  EXPECT_TRUE(Has(notebook.message, "it is not a GPU pod")) << notebook.message;
  EXPECT_TRUE(Has(notebook.message, "feedguard observes GPU pods only")) << notebook.message;

  Json pending = PodFixture("ml", "trainer-e");
  pending["spec"].erase("nodeName");
  EXPECT_EQ(why(r, "ml", "trainer-e", pending).absence, Absence::kNotRunning);
  Json done = PodFixture("ml", "trainer-e");
  done["status"] = {{"phase", "Succeeded"}};
  auto ended = why(r, "ml", "trainer-e", done);
  EXPECT_EQ(ended.absence, Absence::kNotRunning);
  EXPECT_TRUE(Has(ended.message, "(phase Succeeded)")) << ended.message;

  // Its node reports and the report has room (3 of 50): it did not starve.
  auto calm = why(r, "ml", "trainer-e", PodFixture("ml", "trainer-e"));
  EXPECT_EQ(calm.absence, Absence::kNotStarving);
  EXPECT_EQ(
      calm.message,
      "pod ml/trainer-e is not in the StarvationReport: it did not starve noticeably (waited "
      "behind others less than 5% of the last 10 min; its node gpu-node-2 reports 2 GPU pods, 1 "
      "starving).");
  // Its node reports nothing (and the report lists every reporting node): not observed.
  auto unobserved = why(r, "ml", "trainer-f", PodFixture("ml", "trainer-f"));
  EXPECT_EQ(unobserved.absence, Absence::kNotObserved);
  EXPECT_TRUE(Has(unobserved.message,
                  "it is not observed, because no agent on its node "
                  "gpu-node-3 has reported observations"))
      << unobserved.message;

  // A full report: the pod is not among the 50 worst.
  StarvationReport full = r;
  while (full.pods.size() < 50) {
    full.pods.push_back(r.pods[0]);
    full.pods.back().name = "filler-" + std::to_string(full.pods.size());
  }
  auto worst = why(full, "ml", "trainer-e", PodFixture("ml", "trainer-e"));
  EXPECT_EQ(worst.absence, Absence::kNotAmongWorst);
  EXPECT_EQ(worst.message,
            "pod ml/trainer-e is not among the 50 GPU pods with the most wait behind others; it "
            "did not starve "
            "noticeably.");
  full.cluster.gpu_pods_not_observed = 3;
  EXPECT_TRUE(Has(why(full, "ml", "trainer-e", PodFixture("ml", "trainer-e")).message,
                  "(unless it is one of the 3 GPU pods over their node's --max-observed-pods, not "
                  "observed)"));

  // 20 nodes listed, its own not among them: either.
  StarvationReport many = r;
  while (many.nodes.size() < 20) {
    many.nodes.push_back({.name = "other-" + std::to_string(many.nodes.size())});
  }
  auto unsure = why(many, "ml", "trainer-f", PodFixture("ml", "trainer-f"));
  EXPECT_EQ(unsure.absence, Absence::kNotReported);
  EXPECT_TRUE(Has(unsure.message,
                  "it did not starve noticeably (waited behind others less than 5% of the "
                  "last 10 min), or no agent on its node gpu-node-3 observes it"))
      << unsure.message;

  StarvationReport empty;
  EXPECT_EQ(why(empty, "ml", "trainer-e", PodFixture("ml", "trainer-e")).absence,
            Absence::kNoReportYet);
  EXPECT_EQ(AbsenceName(Absence::kNotAmongWorst), "NotAmongWorst");
}

}  // namespace
}  // namespace feedguard::plugin
