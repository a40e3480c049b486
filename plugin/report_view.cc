#include "plugin/report_view.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>

#include "common/json_member.h"

namespace feedguard::plugin {
namespace {

double NumberOr(const Json& j, const char* key, double fallback = 0) {
  const Json& v = JsonMember(j, key);
  return v.is_number() ? v.get<double>() : fallback;
}

int64_t IntOr(const Json& j, const char* key, int64_t fallback = 0) {
  const Json& v = JsonMember(j, key);
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float() && std::isfinite(v.get<double>())) {
    return static_cast<int64_t>(std::llround(v.get<double>()));
  }
  return fallback;
}

bool BoolOr(const Json& j, const char* key, bool fallback = false) {
  const Json& v = JsonMember(j, key);
  return v.is_boolean() ? v.get<bool>() : fallback;
}

Contender ParseContender(const Json& j) {
  Contender c;
  c.kind = JsonStringOr(j, "kind", "");
  c.ns = JsonStringOr(j, "namespace", "");
  c.name = JsonStringOr(j, "name", "");
  c.uid = JsonStringOr(j, "uid", "");
  c.cpu_seconds = NumberOr(j, "cpuSeconds");
  return c;
}

void SortContenders(std::vector<Contender>* cs) {
  std::stable_sort(cs->begin(), cs->end(), [](const Contender& a, const Contender& b) {
    return a.cpu_seconds > b.cpu_seconds;
  });
}

ReportWindow ParseWindow(const Json& j) {
  ReportWindow w;
  w.seconds = IntOr(j, "seconds");
  w.covered_seconds = NumberOr(j, "coveredSeconds");
  w.wait_seconds = NumberOr(j, "waitSeconds");
  w.wait_fraction = NumberOr(j, "waitFraction");
  w.wait_source = JsonStringOr(j, "waitSource", "");
  const Json& others = JsonMember(j, "waitBehindOthersSeconds");
  w.wait_behind_others_seconds =
      others.is_number() ? std::clamp(others.get<double>(), 0.0, w.wait_seconds) : w.wait_seconds;
  const Json& pods = JsonMember(j, "waitBehindPodsSeconds");
  w.wait_behind_pods_seconds =
      pods.is_number() ? std::clamp(pods.get<double>(), 0.0, w.wait_behind_others_seconds)
                       : w.wait_behind_others_seconds;
  w.cpu_seconds = NumberOr(j, "cpuSeconds");
  w.throttled_seconds = NumberOr(j, "throttledSeconds");
  w.gpu_sampled = BoolOr(j, "gpuSampled");
  w.gpu_busy_fraction = NumberOr(j, "gpuBusyFraction");
  w.gpu_lost_seconds = NumberOr(j, "gpuLostSeconds");
  w.gpu_lost_min_seconds = NumberOr(j, "gpuLostMinSeconds");
  w.gpu_lost_max_seconds = NumberOr(j, "gpuLostMaxSeconds");
  const Json& cs = JsonMember(j, "contenders");
  if (cs.is_array()) {
    for (const Json& c : cs) {
      if (c.is_object()) w.contenders.push_back(ParseContender(c));
    }
  }
  SortContenders(&w.contenders);
  return w;
}

ReportPod ParsePod(const Json& j) {
  ReportPod p;
  p.ns = JsonStringOr(j, "namespace", "");
  p.name = JsonStringOr(j, "name", "");
  p.uid = JsonStringOr(j, "uid", "");
  p.node = JsonStringOr(j, "node", "");
  p.cpu_request_milli = IntOr(j, "cpuRequestMilli");
  p.policy = JsonStringOr(j, "policy", "");
  const Json& ws = JsonMember(j, "windows");
  if (ws.is_array()) {
    for (const Json& w : ws) {
      if (w.is_object()) p.windows.push_back(ParseWindow(w));
    }
  }
  std::sort(p.windows.begin(), p.windows.end(),
            [](const ReportWindow& a, const ReportWindow& b) { return a.seconds < b.seconds; });
  p.raw = j;
  return p;
}

std::string Fixed1(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

// The controller's sort key: namespace/name, or the uid of a pod it could not name.
std::string PodKey(const ReportPod& p) { return p.name.empty() ? p.uid : p.ns + "/" + p.name; }

// The age in seconds, or nullopt when `updated` does not parse.
std::optional<std::chrono::seconds> AgeOf(const StarvationReport& r,
                                          std::chrono::system_clock::time_point now) {
  const auto t = ParseRfc3339(r.updated);
  if (!t) return std::nullopt;
  auto age = std::chrono::duration_cast<std::chrono::seconds>(now - *t);
  if (age.count() < 0) age = std::chrono::seconds(0);  // clocks a little apart
  return age;
}

}  // namespace

const ReportWindow* ReportPod::Window(int64_t seconds) const {
  for (const auto& w : windows) {
    if (w.seconds == seconds) return &w;
  }
  return nullptr;
}

const ReportPod* StarvationReport::Find(std::string_view ns, std::string_view name) const {
  for (const auto& p : pods) {
    if (p.ns == ns && p.name == name) return &p;
  }
  return nullptr;
}

Result<StarvationReport> ParseStarvationReport(const Json& obj) {
  if (!obj.is_object()) return InvalidArgument("the StarvationReport is not a JSON object");
  const std::string kind = JsonStringOr(obj, "kind", "");
  if (!kind.empty() && kind != "StarvationReport") {
    return InvalidArgument("expected a StarvationReport, got a " + kind);
  }
  StarvationReport r;
  const Json& status = JsonMember(obj, "status");
  if (!status.is_object() || status.empty()) return r;
  r.has_status = true;
  r.updated = JsonStringOr(status, "updated", "");
  const Json& c = JsonMember(status, "cluster");
  r.cluster.nodes_reporting = IntOr(c, "nodesReporting");
  r.cluster.gpu_pods = IntOr(c, "gpuPods");
  r.cluster.starving_pods = IntOr(c, "starvingPods");
  r.cluster.gpu_pods_not_observed = IntOr(c, "gpuPodsNotObserved");
  r.cluster.wait_seconds_10m = NumberOr(c, "waitSeconds10m");
  r.cluster.wait_behind_others_seconds_10m =
      NumberOr(c, "waitBehindOthersSeconds10m", r.cluster.wait_seconds_10m);
  r.cluster.gpu_lost_seconds_10m = NumberOr(c, "gpuLostSeconds10m");
  r.cluster.gpu_lost_seconds_1h = NumberOr(c, "gpuLostSeconds1h");
  const Json& pods = JsonMember(status, "pods");
  if (pods.is_array()) {
    for (const Json& p : pods) {
      if (p.is_object()) r.pods.push_back(ParsePod(p));
    }
  }
  const Json& nodes = JsonMember(status, "nodes");
  if (nodes.is_array()) {
    for (const Json& n : nodes) {
      if (!n.is_object()) continue;
      ReportNode node;
      node.name = JsonStringOr(n, "name", "");
      node.gpu_pods = IntOr(n, "gpuPods");
      node.starving_pods = IntOr(n, "starvingPods");
      node.wait_seconds_10m = NumberOr(n, "waitSeconds10m");
      node.gpu_lost_seconds_10m = NumberOr(n, "gpuLostSeconds10m");
      r.nodes.push_back(std::move(node));
    }
  }
  return r;
}

bool Starving(const ReportWindow& w) {
  return IsStarving(w.wait_behind_others_seconds, w.covered_seconds);
}

TopView BuildTop(const StarvationReport& report, const TopOptions& opts) {
  TopView view;
  view.ns = opts.ns;
  std::vector<TopRow> rows;
  for (const auto& p : report.pods) {
    const ReportWindow* w10 = p.Window(kWindow10m);
    if (w10 == nullptr || !Starving(*w10)) continue;
    if (!opts.ns.empty() && p.ns != opts.ns) {
      view.starving_elsewhere++;
      continue;
    }
    TopRow row;
    row.pod = &p;
    row.wait_fraction_10m = w10->wait_fraction;
    row.wait_seconds_10m = w10->wait_seconds;
    row.behind_others_seconds_10m = w10->wait_behind_others_seconds;
    if (w10->covered_seconds > 0) {
      const double cover = w10->covered_seconds;
      row.behind_pods_fraction_10m = w10->wait_behind_pods_seconds / cover;
      row.behind_node_fraction_10m =
          (w10->wait_behind_others_seconds - w10->wait_behind_pods_seconds) / cover;
      row.own_fraction_10m = (w10->wait_seconds - w10->wait_behind_others_seconds) / cover;
    }
    if (w10->gpu_sampled) row.gpu_lost_10m = w10->gpu_lost_seconds;
    if (const ReportWindow* w1h = p.Window(kWindow1h); w1h != nullptr && w1h->gpu_sampled) {
      row.gpu_lost_1h = w1h->gpu_lost_seconds;
    }
    for (const auto& c : w10->contenders) {
      if (row.contenders.size() == 3) break;
      row.contenders.push_back(c);
    }
    rows.push_back(std::move(row));
  }
  std::stable_sort(rows.begin(), rows.end(), [](const TopRow& a, const TopRow& b) {
    const double la = StarvationRankSeconds(a.gpu_lost_10m.has_value(), a.gpu_lost_10m.value_or(0),
                                            a.behind_others_seconds_10m);
    const double lb = StarvationRankSeconds(b.gpu_lost_10m.has_value(), b.gpu_lost_10m.value_or(0),
                                            b.behind_others_seconds_10m);
    if (la != lb) return la > lb;
    if (a.behind_others_seconds_10m != b.behind_others_seconds_10m) {
      return a.behind_others_seconds_10m > b.behind_others_seconds_10m;
    }
    return PodKey(*a.pod) < PodKey(*b.pod);
  });
  if (opts.limit > 0 && rows.size() > static_cast<size_t>(opts.limit)) {
    view.omitted_by_limit = static_cast<int>(rows.size()) - opts.limit;
    rows.resize(static_cast<size_t>(opts.limit));
  }
  for (const auto& r : rows) {
    if (!r.gpu_lost_10m || !r.gpu_lost_1h) view.wait_only = true;
  }
  view.rows = std::move(rows);
  return view;
}

std::string RenderTopHeader(const StarvationReport& report,
                            std::chrono::system_clock::time_point now) {
  const ClusterTotals& c = report.cluster;
  std::string out = "StarvationReport/cluster";
  if (const auto age = AgeOf(report, now)) {
    out += " (updated " + FormatAge(*age) + " ago)";
  } else if (!report.updated.empty()) {
    out += " (updated " + report.updated + ")";
  }
  out += ": " + std::to_string(c.nodes_reporting) + " node" + (c.nodes_reporting == 1 ? "" : "s") +
         " reporting, " + std::to_string(c.gpu_pods) + " GPU pod" + (c.gpu_pods == 1 ? "" : "s") +
         ", " + std::to_string(c.starving_pods) +
         " starving (waited behind others >= " + StarvingPercent() +
         " of 10 min), GPU time lost over 10 min: " + FormatSeconds(c.gpu_lost_seconds_10m);
  if (c.gpu_pods_not_observed > 0) {
    out += " (" + std::to_string(c.gpu_pods_not_observed) +
           " GPU pods not observed: over their node's --max-observed-pods)";
  }
  return out;
}

std::string RenderTopTable(const StarvationReport& report, const TopView& view,
                           std::chrono::system_clock::time_point now) {
  std::string out = RenderTopHeader(report, now) + "\n";
  if (!report.has_status) {
    return out + "the report is empty: the controller has not written it yet\n";
  }
  if (view.rows.empty()) {
    out += view.ns.empty() ? "no GPU pod is starving: none waited for a CPU behind others >= " +
                                 StarvingPercent() + " of 10 min\n"
                           : "no GPU pod is starving in namespace " + view.ns + "\n";
  } else {
    std::vector<std::vector<std::string>> rows;
    rows.push_back({"NAMESPACE", "POD", "NODE", "WAIT%", "BY-PODS", "BY-NODE", "OWN",
                    "GPU-LOST-10M", "GPU-LOST-1H", "TOP CONTENDERS"});
    for (const auto& r : view.rows) {
      std::string contenders;
      for (const auto& c : r.contenders) {
        if (!contenders.empty()) contenders += ", ";
        contenders += ContenderLabel(c);
      }
      if (contenders.empty()) contenders = "-";
      rows.push_back({r.pod->ns.empty() ? "-" : r.pod->ns,
                      r.pod->name.empty() ? "uid " + r.pod->uid : r.pod->name,
                      r.pod->node.empty() ? "-" : r.pod->node, FormatPercent(r.wait_fraction_10m),
                      FormatPercent(r.behind_pods_fraction_10m),
                      FormatPercent(r.behind_node_fraction_10m), FormatPercent(r.own_fraction_10m),
                      r.gpu_lost_10m ? FormatSeconds(*r.gpu_lost_10m) : "n/a",
                      r.gpu_lost_1h ? FormatSeconds(*r.gpu_lost_1h) : "n/a", contenders});
    }
    out += RenderColumns(rows);
    out +=
        "WAIT% = BY-PODS (other pods ran on its CPUs: a FencePolicy takes that back) + BY-NODE "
        "(the node's own processes) + OWN (behind its own threads: it needs more CPU)\n";
  }
  if (view.wait_only) out += "n/a: no NVML on some nodes: wait only\n";
  if (view.starving_elsewhere > 0) {
    out += std::to_string(view.starving_elsewhere) + " starving pod" +
           (view.starving_elsewhere == 1 ? "" : "s") +
           " in other namespaces (-A shows every namespace)\n";
  }
  if (view.omitted_by_limit > 0) {
    out += std::to_string(view.omitted_by_limit) + " more starving pod" +
           (view.omitted_by_limit == 1 ? "" : "s") + " not shown (--limit 0 shows all)\n";
  }
  return out;
}

Json TopJson(const StarvationReport& report, const TopView& view,
             std::chrono::system_clock::time_point now) {
  const ClusterTotals& c = report.cluster;
  Json j = Json::object();
  j["updated"] = report.updated.empty() ? Json() : Json(report.updated);
  const auto age = AgeOf(report, now);
  j["ageSeconds"] = age ? Json(age->count()) : Json();
  j["cluster"] = {{"nodesReporting", c.nodes_reporting},
                  {"gpuPods", c.gpu_pods},
                  {"starvingPods", c.starving_pods},
                  {"gpuPodsNotObserved", c.gpu_pods_not_observed},
                  {"waitSeconds10m", c.wait_seconds_10m},
                  {"gpuLostSeconds10m", c.gpu_lost_seconds_10m},
                  {"waitBehindOthersSeconds10m", c.wait_behind_others_seconds_10m},
                  {"gpuLostSeconds1h", c.gpu_lost_seconds_1h}};
  j["namespace"] = view.ns.empty() ? Json() : Json(view.ns);
  Json pods = Json::array();
  for (const auto& r : view.rows) {
    Json contenders = Json::array();
    for (const auto& ct : r.contenders) {
      Json cj = {{"kind", ct.kind}, {"name", ct.name}, {"cpuSeconds", ct.cpu_seconds}};
      cj["namespace"] = ct.ns.empty() ? Json() : Json(ct.ns);
      contenders.push_back(std::move(cj));
    }
    Json pj = {{"namespace", r.pod->ns},
               {"name", r.pod->name},
               {"uid", r.pod->uid},
               {"node", r.pod->node},
               {"waitFraction10m", r.wait_fraction_10m},
               {"waitSeconds10m", r.wait_seconds_10m},
               {"waitBehindPodsFraction10m", r.behind_pods_fraction_10m},
               {"waitBehindNodeFraction10m", r.behind_node_fraction_10m},
               {"ownWaitFraction10m", r.own_fraction_10m},
               {"waitBehindOthersSeconds10m", r.behind_others_seconds_10m},
               {"gpuSampled", r.gpu_lost_10m.has_value()},
               {"contenders", std::move(contenders)}};
    pj["gpuLostSeconds10m"] = r.gpu_lost_10m ? Json(*r.gpu_lost_10m) : Json();
    pj["gpuLostSeconds1h"] = r.gpu_lost_1h ? Json(*r.gpu_lost_1h) : Json();
    pj["policy"] = r.pod->policy.empty() ? Json() : Json(r.pod->policy);
    pods.push_back(std::move(pj));
  }
  j["pods"] = std::move(pods);
  j["starvingElsewhere"] = view.starving_elsewhere;
  j["omittedByLimit"] = view.omitted_by_limit;
  return j;
}

std::string ContenderLabel(const Contender& c) {
  std::string who;
  if (c.kind == "Node") {
    who = "node";
  } else {
    who = c.ns.empty() ? c.name : c.ns + "/" + c.name;
    if (who.empty()) who = "pod " + c.uid;
  }
  return who + " (" + FormatSeconds(c.cpu_seconds) + ")";
}

std::string FormatSeconds(double s) {
  if (!std::isfinite(s)) return "?";
  if (s < 600) return Fixed1(s) + "s";
  const int64_t whole = std::llround(s);
  if (whole < 3600) return std::to_string(whole / 60) + "m" + std::to_string(whole % 60) + "s";
  return std::to_string(whole / 3600) + "h" + std::to_string((whole % 3600) / 60) + "m";
}

std::string FormatPercent(double fraction) {
  if (!std::isfinite(fraction)) return "?";
  return Fixed1(fraction * 100) + "%";
}

std::string FormatAge(std::chrono::seconds age) {
  const int64_t s = std::max<int64_t>(0, age.count());
  if (s < 120) return std::to_string(s) + "s";
  if (s < 600) return std::to_string(s / 60) + "m" + std::to_string(s % 60) + "s";
  if (s < 3 * 3600) return std::to_string(s / 60) + "m";
  if (s < 8 * 3600) return std::to_string(s / 3600) + "h" + std::to_string((s % 3600) / 60) + "m";
  if (s < 48 * 3600) return std::to_string(s / 3600) + "h";
  return std::to_string(s / 86400) + "d" + std::to_string((s % 86400) / 3600) + "h";
}

std::optional<std::chrono::system_clock::time_point> ParseRfc3339(std::string_view s) {
  // YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)
  auto digits = [&](size_t pos, size_t n, int* out) {
    if (pos + n > s.size()) return false;
    int v = 0;
    for (size_t i = pos; i < pos + n; ++i) {
      if (s[i] < '0' || s[i] > '9') return false;
      v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return true;
  };
  int year, mon, day, hour, min, sec;
  if (!digits(0, 4, &year) || s.size() < 20 || s[4] != '-' || !digits(5, 2, &mon) || s[7] != '-' ||
      !digits(8, 2, &day) || (s[10] != 'T' && s[10] != 't') || !digits(11, 2, &hour) ||
      s[13] != ':' || !digits(14, 2, &min) || s[16] != ':' || !digits(17, 2, &sec)) {
    return std::nullopt;
  }
  if (mon < 1 || mon > 12 || day < 1 || day > 31 || hour > 23 || min > 59 || sec > 60) {
    return std::nullopt;
  }
  size_t pos = 19;
  if (pos < s.size() && s[pos] == '.') {
    ++pos;
    while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') ++pos;
  }
  int offset_minutes = 0;
  if (pos < s.size() && (s[pos] == 'Z' || s[pos] == 'z')) {
    ++pos;
  } else if (pos < s.size() && (s[pos] == '+' || s[pos] == '-')) {
    int oh, om;
    if (!digits(pos + 1, 2, &oh) || pos + 3 >= s.size() || s[pos + 3] != ':' ||
        !digits(pos + 4, 2, &om)) {
      return std::nullopt;
    }
    offset_minutes = (s[pos] == '+' ? 1 : -1) * (oh * 60 + om);
    pos += 6;
  } else {
    return std::nullopt;
  }
  if (pos != s.size()) return std::nullopt;
  std::tm tm{};
  tm.tm_year = year - 1900;
  tm.tm_mon = mon - 1;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = min;
  tm.tm_sec = sec;
  const time_t t = timegm(&tm);
  return std::chrono::system_clock::from_time_t(t) - std::chrono::minutes(offset_minutes);
}

std::vector<std::string> WrapText(std::string_view text, size_t width) {
  // Leading spaces indent every line (a hanging indent for lists).
  const size_t indent = std::min(text.find_first_not_of(' '), text.size());
  const std::string pad(indent, ' ');
  std::vector<std::string> lines;
  std::string line;
  size_t pos = indent;
  while (pos < text.size()) {
    size_t end = text.find(' ', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view word = text.substr(pos, end - pos);
    pos = end + 1;
    if (word.empty()) continue;
    if (!line.empty() && line.size() + 1 + word.size() > width) {
      lines.push_back(line);
      line.clear();
    }
    if (line.empty()) {
      line = pad;
    } else {
      line += ' ';
    }
    line += word;
  }
  if (!line.empty()) lines.push_back(line);
  return lines;
}

std::string RenderColumns(const std::vector<std::vector<std::string>>& rows,
                          std::string_view line_prefix) {
  std::vector<size_t> width;
  for (const auto& r : rows) {
    if (r.size() > width.size()) width.resize(r.size(), 0);
    for (size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
  }
  std::string out;
  for (const auto& r : rows) {
    std::string line(line_prefix);
    for (size_t i = 0; i < r.size(); ++i) {
      line += r[i];
      if (i + 1 < r.size()) line += std::string(width[i] - r[i].size() + 3, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

}  // namespace feedguard::plugin
