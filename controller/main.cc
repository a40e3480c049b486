// feedguard-controller — watches FencePolicies, streams NodeFences to agents, reports status.
#include <malloc.h>

#include <cstdlib>

#include "common/mutex_checks.h"
#include "controller/app/controller_app.h"
#include "controller/distributor/distributor.h"

int main(int argc, char** argv) {
  // glibc gives each thread that allocates an arena of its own (up to 8 per core), and memory a
  // thread freed stays in its arena. The controller holds ~150,000 small long-lived records
  // while grpc's threads, the review workers and the list prefetch allocate and free buffers: at
  // 500 nodes / 15,000 pods / 500 agents that kept 236 MB resident against 92 MB with two arenas,
  // for the same work (bench/scale, docs/DESIGN.md §9). MALLOC_ARENA_MAX, when set, still wins.
  if (std::getenv("MALLOC_ARENA_MAX") == nullptr) mallopt(M_ARENA_MAX, 2);
  // Socket reads sized per connection instead of 8 KiB each: ~4 KB less per agent
  // (DistributorOptions::tcp_read_chunk_bytes).
  feedguard::controller::UseClassicGrpcReader();
  // grpc's locks without Debian Abseil's lock-order tracking (common/mutex_checks.h).
  feedguard::SkipMutexLockOrderTracking();
  return feedguard::controller::RunController(argc, argv);
}
