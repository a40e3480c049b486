// cli.h — kubectl-feedguard's command line: `top` and `explain POD` over the StarvationReport
// (report_view.h, explain.h, suggest_policy.h), with kubectl's global flags (--kubeconfig,
// --context, -n/--namespace, -A/--all-namespaces). The API client comes from a PluginEnv, so
// tests drive every command through a scripted transport (controller/kube/fake_transport.h).
//
// Exit codes: 0 done (also: a pod that is not in the report, explained), 1 an error (no report,
// the API server refused or could not be reached, no such pod), 2 bad flags. Nothing throws out
// of RunPlugin.
//
// Example (main.cc):
//   return RunPlugin(ArgsOf(argc, argv), RealPluginEnv(), std::cout, std::cerr);
#pragma once

#include <chrono>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "controller/kube/client.h"
#include "feedguard/common/status.h"

namespace feedguard::plugin {

// What the global flags say about where the API server is.
struct ConnectFlags {
  std::string kubeconfig;  // "" = $KUBECONFIG, ~/.kube/config, else in-cluster
  std::string context;     // "" = the kubeconfig's current-context
};

struct Connection {
  kube::ClientPtr client;
  std::string server;                         // for messages
  std::string default_namespace = "default";  // the context's namespace
};

struct PluginEnv {
  std::function<Result<Connection>(const ConnectFlags&)> connect;
  std::function<std::chrono::system_clock::time_point()> now;
};

// Kubeconfig (controller/kube/kubeconfig.h) + libcurl; the system clock.
PluginEnv RealPluginEnv();

// `args`: the arguments after the program name.
int RunPlugin(const std::vector<std::string>& args, const PluginEnv& env, std::ostream& out,
              std::ostream& err);

// What to say about a failed API call: RBAC (which verb on which resource is needed), a refused
// credential, an unreachable server, or the server's own message. `verb_resource` as RBAC
// spells it ("get starvationreports.feedguard.io"), `scope` where ("cluster-wide", "in namespace
// ml").
std::string ApiErrorMessage(const Status& status, const std::string& verb_resource,
                            const std::string& scope, const std::string& server);

}  // namespace feedguard::plugin
