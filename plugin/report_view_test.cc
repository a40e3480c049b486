#include "plugin/report_view.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "plugin/testdata/fixtures.h"

namespace feedguard::plugin {
namespace {

using testing::ReportFixture;

std::chrono::system_clock::time_point At(const char* rfc3339) {
  auto t = ParseRfc3339(rfc3339);
  EXPECT_TRUE(t.has_value()) << rfc3339;
  return t.value_or(std::chrono::system_clock::time_point{});
}

StarvationReport Fixture() {
  auto r = ParseStarvationReport(ReportFixture());
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : StarvationReport{};
}

std::vector<std::string> RowNames(const TopView& v) {
  std::vector<std::string> out;
  for (const auto& r : v.rows) out.push_back(r.pod->ns + "/" + r.pod->name);
  return out;
}

TEST(ReportViewTest, ParsesTheReport) {
  const StarvationReport r = Fixture();
  ASSERT_TRUE(r.has_status);
  EXPECT_EQ(r.updated, "2026-11-28T10:00:00Z");
  EXPECT_EQ(r.cluster.nodes_reporting, 2);
  EXPECT_EQ(r.cluster.gpu_pods, 4);
  EXPECT_EQ(r.cluster.starving_pods, 3);
  EXPECT_DOUBLE_EQ(r.cluster.gpu_lost_seconds_10m, 92.0);
  ASSERT_EQ(r.pods.size(), 3u);
  ASSERT_EQ(r.nodes.size(), 2u);
  EXPECT_EQ(r.nodes[1].name, "gpu-node-2");
  EXPECT_EQ(r.nodes[1].gpu_pods, 2);
  EXPECT_EQ(r.nodes[1].starving_pods, 1);
  const ReportPod* b = r.Find("ml", "trainer-b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->node, "gpu-node-2");
  EXPECT_EQ(b->cpu_request_milli, 2000);
  ASSERT_EQ(b->windows.size(), 3u);
  EXPECT_EQ(b->windows[0].seconds, 60);
  EXPECT_EQ(b->windows[2].seconds, 3600);
  // Contenders are held most CPU-seconds first whatever order they came in.
  const ReportWindow* w = b->Window(kWindow10m);
  ASSERT_NE(w, nullptr);
  ASSERT_EQ(w->contenders.size(), 3u);
  EXPECT_EQ(w->contenders[0].name, "spin-a");
  EXPECT_EQ(w->contenders[2].kind, "Node");
  EXPECT_EQ(w->contenders[2].name, "");
  EXPECT_EQ(w->wait_source, "psi");
  EXPECT_TRUE(w->gpu_sampled);
  EXPECT_EQ(r.Find("vision", "trainer-c")->policy, "vision-trainers");
  EXPECT_EQ(r.Find("ml", "nope"), nullptr);
  EXPECT_EQ(r.Find("vision", "trainer-b"), nullptr);
}

TEST(ReportViewTest, WrongTypesReadAsEmptyAndNeverThrow) {
  const Json odd = Json::parse(R"({"kind": "StarvationReport", "status": {
      "updated": 7, "cluster": [1, 2],
      "pods": [{"name": 5, "namespace": "ml", "windows": "x"}, 3,
               {"name": "p", "namespace": "ml", "windows": [{"seconds": "600"}, 4,
                {"seconds": 600.0, "waitFraction": "0.5", "contenders": {"a": 1}}]}]}})");
  auto r = ParseStarvationReport(odd);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->updated, "");
  EXPECT_EQ(r->cluster.gpu_pods, 0);
  ASSERT_EQ(r->pods.size(), 2u);
  EXPECT_EQ(r->pods[0].name, "");
  EXPECT_TRUE(r->pods[0].windows.empty());
  ASSERT_NE(r->pods[1].Window(600), nullptr);
  EXPECT_EQ(r->pods[1].Window(600)->wait_fraction, 0);
  // Nothing starving, nothing ranked; the table still renders.
  const TopView v = BuildTop(*r, {.ns = "", .limit = 0});
  EXPECT_TRUE(v.rows.empty());
  EXPECT_NE(RenderTopTable(*r, v, At("2026-11-28T10:00:00Z")).find("no GPU pod is starving"),
            std::string::npos);

  EXPECT_FALSE(ParseStarvationReport(Json::array()).ok());
  EXPECT_FALSE(ParseStarvationReport(Json{{"kind", "FencePolicy"}}).ok());
  auto empty = ParseStarvationReport(Json{{"kind", "StarvationReport"}});
  ASSERT_TRUE(empty.ok());
  EXPECT_FALSE(empty->has_status);
  const std::string empty_table =
      RenderTopTable(*empty, BuildTop(*empty, {}), At("2026-11-28T10:00:00Z"));
  EXPECT_NE(empty_table.find("\nthe report is empty: the controller has not written it yet\n"),
            std::string::npos)
      << empty_table;
  EXPECT_EQ(empty_table.find("no GPU pod is starving"), std::string::npos) << empty_table;
}

// Worst first as the controller orders them: GPU seconds lost over 10 min, or the wait for a pod
// with no NVML sample (trainer-c: its 90 s wait bounds its loss and outranks trainer-a's 80 s
// lost), then the wait, then namespace/name; whatever order the report holds them in.
TEST(ReportViewTest, TopRanksTheStarvingPodsWorstFirst) {
  Json reversed = ReportFixture();
  std::reverse(reversed["status"]["pods"].begin(), reversed["status"]["pods"].end());
  for (const Json& fixture : {ReportFixture(), reversed}) {
    auto r = ParseStarvationReport(fixture);
    ASSERT_TRUE(r.ok());
    const TopView all = BuildTop(*r, {.ns = "", .limit = 20});
    EXPECT_EQ(RowNames(all),
              (std::vector<std::string>{"vision/trainer-c", "ml/trainer-a", "ml/trainer-b"}));
  }
  const StarvationReport r = Fixture();
  const TopView all = BuildTop(r, {.ns = "", .limit = 20});
  EXPECT_TRUE(all.wait_only);
  EXPECT_EQ(all.starving_elsewhere, 0);
  EXPECT_EQ(all.omitted_by_limit, 0);
  EXPECT_DOUBLE_EQ(*all.rows[1].gpu_lost_10m, 80.0);
  EXPECT_DOUBLE_EQ(*all.rows[1].gpu_lost_1h, 534.5);
  ASSERT_EQ(all.rows[1].contenders.size(), 3u);  // of 4: the top 3
  EXPECT_EQ(all.rows[1].contenders[2].name, "loader-0");
  EXPECT_FALSE(all.rows[0].gpu_lost_10m.has_value());

  const TopView ml = BuildTop(r, {.ns = "ml", .limit = 20});
  EXPECT_EQ(RowNames(ml), (std::vector<std::string>{"ml/trainer-a", "ml/trainer-b"}));
  EXPECT_EQ(ml.starving_elsewhere, 1);
  EXPECT_FALSE(ml.wait_only);

  const TopView one = BuildTop(r, {.ns = "", .limit = 1});
  EXPECT_EQ(RowNames(one), (std::vector<std::string>{"vision/trainer-c"}));
  EXPECT_EQ(one.omitted_by_limit, 2);

  // Ties on the GPU figure: more wait first, then by name (a pod the controller could not name
  // by its uid).
  Json tie = ReportFixture();
  for (auto& p : tie["status"]["pods"]) {
    for (auto& w : p["windows"]) {
      w["gpuSampled"] = true;
      w["gpuLostSeconds"] = 5.0;
    }
  }
  Json unnamed = tie["status"]["pods"][1];
  unnamed.erase("name");
  unnamed.erase("namespace");
  unnamed["uid"] = "0-uid";
  tie["status"]["pods"].push_back(unnamed);
  auto tied = ParseStarvationReport(tie);
  ASSERT_TRUE(tied.ok());
  EXPECT_EQ(RowNames(BuildTop(*tied, {.ns = "", .limit = 0})),
            (std::vector<std::string>{"ml/trainer-a", "vision/trainer-c", "/", "ml/trainer-b"}));

  // A pod that waited under 5 % of what its 10 min window covered is not starving.
  Json calm = ReportFixture();
  calm["status"]["pods"][0]["windows"][1]["waitSeconds"] = 29.9;  // of 600 s covered
  calm["status"]["pods"][1]["windows"][1]["coveredSeconds"] = 0;
  auto c = ParseStarvationReport(calm);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(RowNames(BuildTop(*c, {.ns = "", .limit = 0})),
            (std::vector<std::string>{"vision/trainer-c"}));
  calm["status"]["pods"][0]["windows"][1]["waitSeconds"] = 30.0;
  EXPECT_EQ(RowNames(BuildTop(*ParseStarvationReport(calm), {.ns = "", .limit = 0})),
            (std::vector<std::string>{"vision/trainer-c", "ml/trainer-a"}));  // 90 s wait > 6 s
}

// A pod that waited mostly behind its own threads is not starving: more CPU, not a fence, helps
// it. trainer-b waited 30 s of its 10 min (5 %), only 1 s of it while others ran.
TEST(ReportViewTest, WaitBehindItsOwnThreadsIsNotStarvation) {
  Json own = ReportFixture();
  for (Json& p : own["status"]["pods"]) {
    if (p["name"] != "trainer-b") continue;
    for (Json& w : p["windows"]) {
      w["waitBehindOthersSeconds"] = 1.0;
      w["waitBehindPodsSeconds"] = 0.5;
    }
  }
  auto r = ParseStarvationReport(own);
  ASSERT_TRUE(r.ok());
  const ReportWindow* w = r->Find("ml", "trainer-b")->Window(kWindow10m);
  EXPECT_DOUBLE_EQ(w->wait_seconds, 30);
  EXPECT_FALSE(Starving(*w));
  EXPECT_EQ(RowNames(BuildTop(*r, {.ns = "", .limit = 0})),
            (std::vector<std::string>{"vision/trainer-c", "ml/trainer-a"}));
  // A split over the wait (hostile or broken) is held to it.
  own["status"]["pods"][0]["windows"][1]["waitBehindOthersSeconds"] = 1e9;
  own["status"]["pods"][0]["windows"][1]["waitBehindPodsSeconds"] = -4;
  auto h = ParseStarvationReport(own);
  const ReportWindow* hw = h->pods[0].Window(kWindow10m);
  EXPECT_DOUBLE_EQ(hw->wait_behind_others_seconds, hw->wait_seconds);
  EXPECT_DOUBLE_EQ(hw->wait_behind_pods_seconds, 0);
}

TEST(ReportViewTest, TableGolden) {
  const StarvationReport r = Fixture();
  const std::string got =
      RenderTopTable(r, BuildTop(r, {.ns = "ml", .limit = 20}), At("2026-11-28T10:02:15Z"));
  const std::string want =
      "StarvationReport/cluster (updated 2m15s ago): 2 nodes reporting, 4 GPU pods, 3 starving "
      "(waited behind others >= 5% of 10 min), GPU time lost over 10 min: 92.0s\n"
      "NAMESPACE   POD         NODE         WAIT%   BY-PODS   BY-NODE   OWN    GPU-LOST-10M   "
      "GPU-LOST-1H   TOP CONTENDERS\n"
      "ml          trainer-a   gpu-node-1   20.0%   13.3%     3.3%      3.3%   80.0s          "
      "534.5s        batch/spin-a (60.0s), batch/spin-c (40.0s), etl/loader-0 (30.0s)\n"
      // trainer-b's report has no split (an older controller's): all of its wait counts as
      // behind pods.
      "ml          trainer-b   gpu-node-2   5.0%    5.0%      0.0%      0.0%   12.0s          "
      "76.0s         batch/spin-a (20.0s), batch/spin-b (15.0s), node (5.0s)\n"
      "WAIT% = BY-PODS (other pods ran on its CPUs: a FencePolicy takes that back) + BY-NODE "
      "(the node's own processes) + OWN (behind its own threads: it needs more CPU)\n"
      "1 starving pod in other namespaces (-A shows every namespace)\n";
  EXPECT_EQ(got, want);
}

TEST(ReportViewTest, TableSaysWhereThereIsNoGpuFigure) {
  const StarvationReport r = Fixture();
  const std::string got =
      RenderTopTable(r, BuildTop(r, {.ns = "", .limit = 0}), At("2026-11-28T10:00:40Z"));
  EXPECT_NE(got.find("(updated 40s ago)"), std::string::npos) << got;
  // trainer-c's row: wait figures, "n/a" for both GPU columns, the node as its top contender.
  EXPECT_NE(got.find("\nvision      trainer-c   gpu-node-1   15.0%   15.0%     0.0%      0.0%   "
                     "n/a            n/a           node (50.0s), batch/spin-c (20.0s)\n"),
            std::string::npos)
      << got;
  EXPECT_NE(got.find("\nn/a: no NVML on some nodes: wait only\n"), std::string::npos) << got;
  const std::string two =
      RenderTopTable(r, BuildTop(r, {.ns = "", .limit = 2}), At("2026-11-28T10:00:40Z"));
  EXPECT_NE(two.find("\n1 more starving pod not shown (--limit 0 shows all)\n"), std::string::npos)
      << two;
  EXPECT_EQ(two.find("trainer-b"), std::string::npos) << two;
  // Where every pod shown has a GPU figure, no "n/a" and no footnote.
  const std::string ml =
      RenderTopTable(r, BuildTop(r, {.ns = "ml", .limit = 20}), At("2026-11-28T10:00:40Z"));
  EXPECT_EQ(ml.find("trainer-c"), std::string::npos) << ml;
  EXPECT_EQ(ml.find("n/a"), std::string::npos) << ml;

  Json unnamed = ReportFixture();
  unnamed["status"]["pods"][0].erase("name");
  unnamed["status"]["pods"][0].erase("namespace");
  auto u = ParseStarvationReport(unnamed);
  ASSERT_TRUE(u.ok());
  const std::string gone = RenderTopTable(*u, BuildTop(*u, {}), At("2026-11-28T10:00:40Z"));
  EXPECT_NE(gone.find("\n-           uid uid-trainer-a   gpu-node-1"), std::string::npos) << gone;
}

TEST(ReportViewTest, JsonHasStableNames) {
  const StarvationReport r = Fixture();
  const Json j = TopJson(r, BuildTop(r, {.ns = "", .limit = 0}), At("2026-11-28T10:02:15Z"));
  EXPECT_EQ(j["updated"], "2026-11-28T10:00:00Z");
  EXPECT_EQ(j["ageSeconds"], 135);
  EXPECT_TRUE(j["namespace"].is_null());
  EXPECT_EQ(j["cluster"]["starvingPods"], 3);
  EXPECT_EQ(j["cluster"]["gpuLostSeconds10m"], 92.0);
  ASSERT_EQ(j["pods"].size(), 3u);
  const Json& a = j["pods"][1];
  EXPECT_EQ(a["namespace"], "ml");
  EXPECT_EQ(a["name"], "trainer-a");
  EXPECT_EQ(a["uid"], "uid-trainer-a");
  EXPECT_EQ(a["node"], "gpu-node-1");
  EXPECT_EQ(a["waitFraction10m"], 0.2);
  EXPECT_EQ(a["waitSeconds10m"], 120.0);
  EXPECT_EQ(a["gpuSampled"], true);
  EXPECT_EQ(a["gpuLostSeconds10m"], 80.0);
  EXPECT_EQ(a["gpuLostSeconds1h"], 534.5);
  EXPECT_TRUE(a["policy"].is_null());
  ASSERT_EQ(a["contenders"].size(), 3u);
  EXPECT_EQ(
      a["contenders"][0],
      Json({{"kind", "Pod"}, {"namespace", "batch"}, {"name", "spin-a"}, {"cpuSeconds", 60.0}}));
  const Json& c = j["pods"][0];
  EXPECT_EQ(c["name"], "trainer-c");
  EXPECT_EQ(c["gpuSampled"], false);
  EXPECT_TRUE(c["gpuLostSeconds10m"].is_null());
  EXPECT_TRUE(c["gpuLostSeconds1h"].is_null());
  EXPECT_EQ(c["policy"], "vision-trainers");
  EXPECT_EQ(c["contenders"][0]["kind"], "Node");
  EXPECT_TRUE(c["contenders"][0]["namespace"].is_null());
  EXPECT_EQ(j["starvingElsewhere"], 0);
  EXPECT_EQ(j["omittedByLimit"], 0);
  const Json ml = TopJson(r, BuildTop(r, {.ns = "ml", .limit = 1}), At("2026-11-28T10:02:15Z"));
  EXPECT_EQ(ml["namespace"], "ml");
  EXPECT_EQ(ml["starvingElsewhere"], 1);
  EXPECT_EQ(ml["omittedByLimit"], 1);
}

TEST(ReportViewTest, Formats) {
  EXPECT_EQ(FormatSeconds(0), "0.0s");
  EXPECT_EQ(FormatSeconds(12.34), "12.3s");
  EXPECT_EQ(FormatSeconds(599.94), "599.9s");
  EXPECT_EQ(FormatSeconds(725), "12m5s");
  EXPECT_EQ(FormatSeconds(3720), "1h2m");
  EXPECT_EQ(FormatPercent(0.123), "12.3%");
  EXPECT_EQ(FormatAge(std::chrono::seconds(45)), "45s");
  EXPECT_EQ(FormatAge(std::chrono::seconds(192)), "3m12s");
  EXPECT_EQ(FormatAge(std::chrono::seconds(17 * 60 + 5)), "17m");
  EXPECT_EQ(FormatAge(std::chrono::seconds(2 * 3600 + 5 * 60)), "125m");
  EXPECT_EQ(FormatAge(std::chrono::seconds(4 * 3600 + 5 * 60)), "4h5m");
  EXPECT_EQ(FormatAge(std::chrono::seconds(20 * 3600)), "20h");
  EXPECT_EQ(FormatAge(std::chrono::seconds(3 * 86400 + 4 * 3600)), "3d4h");
  EXPECT_EQ(ContenderLabel({.kind = "Pod", .ns = "b", .name = "x", .cpu_seconds = 1.25}),
            "b/x (1.2s)");
  EXPECT_EQ(ContenderLabel({.kind = "Node", .cpu_seconds = 4.1}), "node (4.1s)");
  EXPECT_EQ(ContenderLabel({.kind = "Pod", .uid = "u-1", .cpu_seconds = 1}), "pod u-1 (1.0s)");
}

TEST(ReportViewTest, ParsesRfc3339) {
  const auto base = ParseRfc3339("2026-11-28T10:00:00Z");
  ASSERT_TRUE(base);
  EXPECT_EQ(std::chrono::system_clock::to_time_t(*base), 1795860000);
  EXPECT_EQ(ParseRfc3339("2026-11-28T10:00:00.123456Z"), base);
  EXPECT_EQ(ParseRfc3339("2026-11-28T11:30:00+01:30"), base);
  EXPECT_EQ(ParseRfc3339("2026-11-28T08:00:00-02:00"), base);
  for (const char* bad :
       {"", "2026-11-28", "2026-11-28T10:00:00", "2026-13-28T10:00:00Z", "2026-11-28T10:00:00Zx",
        "2026-11-28 10:00:00Z", "abcd-11-28T10:00:00Z", "2026-11-28T10:00:00+0100"}) {
    EXPECT_FALSE(ParseRfc3339(bad).has_value()) << bad;
  }
}

TEST(ReportViewTest, WrapsAndColumns) {
  EXPECT_EQ(WrapText("aaa bbb ccc", 7), (std::vector<std::string>{"aaa bbb", "ccc"}));
  EXPECT_EQ(WrapText("  aaa bbb ccc", 9), (std::vector<std::string>{"  aaa bbb", "  ccc"}));
  EXPECT_EQ(WrapText("averyveryverylongword x", 5),
            (std::vector<std::string>{"averyveryverylongword", "x"}));
  EXPECT_EQ(RenderColumns({{"A", "BB", "C"}, {"aaa", "b", ""}}), "A     BB   C\naaa   b\n");
}

TEST(ReportViewTest, NoReportWording) {
  EXPECT_STREQ(kNoReportMessage,
               "no StarvationReport yet: is feedguard installed with observation on (helm value "
               "observe.enabled) and has an agent reported?");
}

}  // namespace
}  // namespace feedguard::plugin
