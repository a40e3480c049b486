// controller_app.h — `feedguard-controller`: wires the API client, informers, reconciler,
// gRPC distributor, leader election and the metrics/health endpoint into one process.
#pragma once

namespace feedguard::controller {

// Exit codes: 0 stopped by signal, 1 runtime failure (lost leadership, API unreachable),
// 2 bad flags.
int RunController(int argc, char** argv);

}  // namespace feedguard::controller
