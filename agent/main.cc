// feedguard-agent — the per-node agent. See agent/cli/agent_cli.h.
#include "agent/cli/agent_cli.h"
#include "common/mutex_checks.h"

int main(int argc, char** argv) {
  // grpc's locks without Debian Abseil's lock-order tracking (common/mutex_checks.h).
  feedguard::SkipMutexLockOrderTracking();
  return feedguard::agent::RunAgentCli(argc, argv);
}
