// feedguard-agent — the per-node agent. See agent/cli/agent_cli.h.
#include "agent/cli/agent_cli.h"

int main(int argc, char** argv) { return feedguard::agent::RunAgentCli(argc, argv); }
