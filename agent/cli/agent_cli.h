// agent_cli.h — `feedguard-agent`: the node agent daemon (`run`) and the local commands that run
// the node engine with no controller (`topology`, `plan`, `apply`, `revert`), for operators
// debugging a node, for the benchmark and for tests.
//
// Subcommands, typed flag values and help come from CLI11 (`feedguard-agent COMMAND --help`);
// `run` is an AgentApp (agent/app/agent_app.h). The JSON the commands print uses camelCase keys.
#pragma once

namespace feedguard::agent {

// Exit codes: 0 ok, 1 runtime failure (some pod not enforced, controller unreachable at start),
// 2 bad input (flags, fence file, unknown pods, CPUs outside the machine) — nothing written.
int RunAgentCli(int argc, char** argv);

}  // namespace feedguard::agent
