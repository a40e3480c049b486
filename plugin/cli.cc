#include "plugin/cli.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <exception>
#include <optional>

#include "controller/kube/curl_transport.h"
#include "controller/kube/kubeconfig.h"
#include "plugin/explain.h"
#include "plugin/report_view.h"
#include "plugin/suggest_policy.h"

namespace feedguard::plugin {
namespace {

constexpr char kProgram[] = "kubectl-feedguard";
constexpr char kDescription[] =
    "kubectl feedguard: which GPU pods wait for CPU, how much GPU time that costs, who takes the "
    "CPU (the StarvationReport the feedguard controller writes), and the FencePolicy that would "
    "fence it.";
constexpr char kFooter[] =
    "Global flags (before or after the command): --kubeconfig, --context, -n/--namespace, "
    "-A/--all-namespaces.\n"
    "RBAC: get starvationreports.feedguard.io (cluster-scoped) and get pods.\n"
    "Exit codes: 0 done, 1 error (no report, API refused or unreachable, no such pod), 2 bad "
    "flags.";

// The report's resource (the controller spells it in controller/observe/report_writer.h, a
// library the plugin does not link: it carries the controller's gRPC and protobuf parts).
const kube::Gvr& ReportGvr() {
  static const kube::Gvr kGvr{"feedguard.io", "v1alpha1", kStarvationReportResource};
  return kGvr;
}
constexpr char kReportRbac[] = "get starvationreports.feedguard.io";

struct Flags {
  ConnectFlags connect;
  std::string ns;
  bool all_namespaces = false;
  std::string top_output = "table";
  int limit = 20;
  std::string explain_output = "yaml";
  std::string pod;
};

int Fail(std::ostream& err, const std::string& message) {
  err << kProgram << ": " << message << "\n";
  return 1;
}

// "ns/name".
std::string NsName(const std::string& ns, const std::string& name) { return ns + "/" + name; }

// GET StarvationReport/cluster; nullopt with `*code` set when the command must end.
std::optional<StarvationReport> FetchReport(const Connection& conn, std::ostream& err, int* code) {
  auto obj = conn.client->Get(ReportGvr(), "", kStarvationReportName);
  if (!obj.ok()) {
    if (obj.status().code() == StatusCode::kNotFound) {
      std::string msg = kNoReportMessage;
      // The object's 404 names it; a 404 without a Status (the resource type is unknown) means
      // the CRD is not installed.
      if (obj.status().message().find("\"cluster\" not found") == std::string::npos) {
        msg +=
            " (the API server does not know starvationreports.feedguard.io: the CRD "
            "crds/starvationreport.yaml is not installed)";
      }
      *code = Fail(err, msg);
    } else {
      *code = Fail(err, ApiErrorMessage(obj.status(), kReportRbac, "cluster-wide", conn.server));
    }
    return std::nullopt;
  }
  auto report = ParseStarvationReport(*obj);
  if (!report.ok()) {
    *code = Fail(err, "StarvationReport/cluster: " + report.status().message());
    return std::nullopt;
  }
  return std::move(*report);
}

int RunTop(const Flags& f, const Connection& conn, const PluginEnv& env, std::ostream& out,
           std::ostream& err) {
  int code = 0;
  auto report = FetchReport(conn, err, &code);
  if (!report) return code;
  TopOptions opts;
  opts.ns = f.all_namespaces ? "" : (f.ns.empty() ? conn.default_namespace : f.ns);
  opts.limit = f.limit;
  const TopView view = BuildTop(*report, opts);
  if (f.top_output == "json") {
    out << TopJson(*report, view, env.now()).dump(2) << "\n";
  } else {
    out << RenderTopTable(*report, view, env.now());
  }
  return 0;
}

// GET a pod: the object, nullopt for 404, or an error message in `*error`.
std::optional<Json> GetPod(const Connection& conn, const std::string& ns, const std::string& name,
                           std::string* error) {
  auto pod = conn.client->Get(kube::PodsGvr(), ns, name);
  if (pod.ok()) return std::move(*pod);
  if (pod.status().code() != StatusCode::kNotFound) {
    *error = ApiErrorMessage(pod.status(), "get pods", "in namespace " + ns, conn.server);
  }
  return std::nullopt;
}

int RunExplain(const Flags& f, const Connection& conn, std::ostream& out, std::ostream& err) {
  int code = 0;
  auto report = FetchReport(conn, err, &code);
  if (!report) return code;
  const bool json = f.explain_output == "json";
  std::string ns = f.ns.empty() ? conn.default_namespace : f.ns;

  const ReportPod* entry = nullptr;
  if (f.all_namespaces) {
    std::vector<const ReportPod*> matches;
    for (const auto& p : report->pods) {
      if (p.name == f.pod) matches.push_back(&p);
    }
    if (matches.size() > 1) {
      std::string where;
      for (const auto* m : matches) where += (where.empty() ? "" : ", ") + m->ns;
      return Fail(err, "pod " + f.pod + " is in the report in several namespaces (" + where +
                           "): name one with -n");
    }
    if (matches.empty()) {
      const std::string msg = "no pod named " + f.pod +
                              " in the StarvationReport in any namespace; -n NAMESPACE says why";
      if (json) {
        out << Json({{"pod", nullptr}, {"absence", "NotInReport"}, {"message", msg}}).dump(2)
            << "\n";
      } else {
        out << msg << "\n";
      }
      return 0;
    }
    entry = matches.front();
    ns = entry->ns;
  } else {
    entry = report->Find(ns, f.pod);
  }

  std::string error;
  const std::optional<Json> pod = GetPod(conn, ns, f.pod, &error);
  if (!error.empty()) return Fail(err, error);

  if (entry == nullptr) {
    const AbsenceExplained why = ExplainAbsence(*report, ns, f.pod, pod);
    if (why.absence == Absence::kPodNotFound) return Fail(err, why.message);
    if (json) {
      out << Json({{"pod", nullptr},
                   {"absence", std::string(AbsenceName(why.absence))},
                   {"message", why.message}})
                 .dump(2)
          << "\n";
    } else {
      out << why.message << "\n";
    }
    return 0;
  }

  std::optional<PolicySuggestion> policy;
  if (pod) {
    SuggestInput in;
    in.trainer = *pod;
    for (const auto& [cns, cname] : ContenderPods(*entry)) {
      std::string cerr;
      auto c = GetPod(conn, cns, cname, &cerr);
      if (c) {
        in.contenders.push_back(std::move(*c));
      } else if (cerr.empty()) {
        in.contenders_gone.push_back(NsName(cns, cname));
      } else {
        in.contenders_unreadable.push_back(NsName(cns, cname));
      }
    }
    policy = SuggestPolicy(in);
  }
  const PolicySuggestion* p = policy ? &*policy : nullptr;
  if (json) {
    out << ExplainJson(*entry, p).dump(2) << "\n";
  } else {
    out << RenderExplain(*entry, p);
  }
  return 0;
}

// The first argument that is neither a flag nor a global flag's value: the command.
std::string CommandOf(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--kubeconfig" || a == "--context" || a == "-n" || a == "--namespace") {
      ++i;
      continue;
    }
    if (!a.empty() && a[0] != '-') return a;
  }
  return "";
}

int Run(const std::vector<std::string>& args, const PluginEnv& env, std::ostream& out,
        std::ostream& err) {
  Flags f;
  CLI::App app(kDescription, "kubectl feedguard");
  app.footer(kFooter);
  app.require_subcommand(1);
  app.fallthrough();
  app.add_option("--kubeconfig", f.connect.kubeconfig,
                 "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, else in-cluster)");
  app.add_option("--context", f.connect.context,
                 "kubeconfig context (default: its current-context)");
  app.add_option("-n,--namespace", f.ns,
                 "namespace (default: the context's namespace, else default)");
  app.add_flag("-A,--all-namespaces", f.all_namespaces,
               "every namespace (top); find the pod in any namespace (explain)");

  CLI::App* top = app.add_subcommand("top", "the starving GPU pods, worst first");
  top->add_option("-o,--output", f.top_output, "output format")
      ->check(CLI::IsMember({"table", "json"}))
      ->capture_default_str();
  top->add_option("--limit", f.limit, "rows at most (0: all)")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            int n = 0;
            const char* end = v.data() + v.size();
            auto [ptr, ec] = std::from_chars(v.data(), end, n);
            if (v.empty() || ec != std::errc() || ptr != end || n < 0) {
              return "\"" + v + "\" is not a whole number, 0 or more (0: all rows)";
            }
            return "";
          },
          "N", "whole number"))
      ->capture_default_str();

  CLI::App* explain = app.add_subcommand(
      "explain",
      "one GPU pod's windows and contenders, and the FencePolicy (DryRun) that would fence them");
  explain->add_option("POD", f.pod, "the pod's name")->required();
  explain
      ->add_option("-o,--output", f.explain_output,
                   "output format: yaml (comments + the policy, for kubectl apply -f -) or "
                   "json")
      ->check(CLI::IsMember({"yaml", "json"}))
      ->capture_default_str();

  // CLI11 says "A subcommand is required" for a mistyped one: name it instead.
  if (const std::string cmd = CommandOf(args); !cmd.empty() && cmd != "top" && cmd != "explain") {
    err << kProgram << ": unknown command \"" << cmd << "\": want top or explain (--help)\n";
    return 2;
  }
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e, out, err);
    return code == 0 ? 0 : 2;
  }

  auto conn = env.connect(f.connect);
  if (!conn.ok()) return Fail(err, conn.status().message());
  if (top->parsed()) return RunTop(f, *conn, env, out, err);
  return RunExplain(f, *conn, out, err);
}

}  // namespace

std::string ApiErrorMessage(const Status& status, const std::string& verb_resource,
                            const std::string& scope, const std::string& server) {
  const std::string& msg = status.message();
  switch (status.code()) {
    case StatusCode::kPermissionDenied:
      if (msg.find("Unauthorized") != std::string::npos) {
        return "the API server at " + server +
               " did not accept your credentials (401 Unauthorized): check the kubeconfig's "
               "user (" +
               msg + ")";
      }
      return "forbidden: you need RBAC permission to " + verb_resource + " " + scope + " (" + msg +
             ")";
    case StatusCode::kUnavailable:
    case StatusCode::kDeadlineExceeded:
      return "cannot reach the API server at " + server + ": " + msg;
    default:
      return verb_resource + " " + scope + " failed: " + msg;
  }
}

PluginEnv RealPluginEnv() {
  PluginEnv env;
  env.connect = [](const ConnectFlags& f) -> Result<Connection> {
    auto cfg = f.kubeconfig.empty() ? kube::LoadDefaultConfig(f.context)
                                    : kube::LoadKubeconfig(f.kubeconfig, f.context);
    if (!cfg.ok()) return cfg.status().Annotate("cannot load the kubeconfig");
    Connection c;
    c.server = cfg->server;
    c.default_namespace = cfg->default_namespace.empty() ? "default" : cfg->default_namespace;
    kube::CurlTransportOptions opts;
    opts.user_agent = "kubectl-feedguard/0.1";
    opts.max_idle_handles = 2;
    auto transport =
        kube::CurlTransport::Create(std::move(*cfg), std::make_shared<RealTimeSource>(), opts);
    if (!transport.ok()) return transport.status().Annotate("cannot set up the connection");
    c.client = std::make_shared<kube::Client>(std::move(*transport));
    return c;
  };
  env.now = [] { return std::chrono::system_clock::now(); };
  return env;
}

int RunPlugin(const std::vector<std::string>& args, const PluginEnv& env, std::ostream& out,
              std::ostream& err) {
  try {
    return Run(args, env, out, err);
  } catch (const std::exception& e) {
    return Fail(err, std::string("internal error: ") + e.what());
  } catch (...) {
    return Fail(err, "internal error");
  }
}

}  // namespace feedguard::plugin
