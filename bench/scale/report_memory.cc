// report_memory — what one StarvationReport writer pass costs the controller's heap at scale
// (docs/DESIGN.md §4b): N nodes whose agents each report one observed GPU pod (3 windows × 8
// contenders, 1 in 5 starving, as fg-agent-sim sends them) go into a StarvationBook; then one
// pass as the writer makes it — the book's snapshot, RenderStarvationStatus with a namer that
// names each asked uid, the JSON text — measured with glibc's counters: heap in use before, the
// most in use during the pass (sampled after each step), in use after, and the arena glibc kept.
//
//   fg-report-memory [NODES]      (default 2000)
#include <malloc.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>

#include "bench/scale/sim_report.h"
#include "controller/observe/starvation_book.h"
#include "controller/observe/starvation_report.h"

namespace fc = feedguard::controller;

namespace {

struct Heap {
  size_t in_use, arena;
};
Heap Now() {
  const auto m = mallinfo2();
  return {m.uordblks + m.hblkhd, m.arena + m.hblkhd};
}
double Mb(size_t b) { return static_cast<double>(b) / (1 << 20); }

std::string Uid(size_t node, size_t k) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%08zx-1111-4222-8333-%012zx", node, k);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t nodes = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 2000;
  auto clock = std::make_shared<feedguard::ManualTimeSource>();
  fc::StarvationBook book(clock);
  const Heap base = Now();
  for (size_t n = 0; n < nodes; ++n) {
    feedguard::v1::NodeFence f;
    *f.add_observe()->mutable_uid() = Uid(n, 0);
    for (size_t k = 1; k < 30; ++k) {
      f.add_neighbours()->mutable_pod()->set_uid(Uid(n, k));
    }
    book.OnReport("node-" + std::to_string(n), feedguard::bench::SimReport(f, 20));
  }
  const Heap booked = Now();
  size_t peak = booked.in_use;
  auto sample = [&] { peak = std::max(peak, Now().in_use); };
  fc::PodNamer names = [&](const std::string& node, const std::set<std::string>& uids) {
    std::map<std::string, fc::PodName> out;
    for (const auto& u : uids)
      out[u] = {"team-" + node.substr(5, 2), "pod-" + u.substr(0, 13), 500};
    sample();
    return out;
  };
  size_t text_bytes = 0;
  {
    auto snap = book.Snapshot();
    sample();
    auto status = fc::RenderStarvationStatus(snap, names, 0);
    sample();
    const std::string text = status.dump();
    sample();
    text_bytes = text.size();
  }
  const Heap after = Now();
  std::printf(
      "{\"nodes\":%zu,\"book_mb\":%.2f,\"pass_peak_above_book_mb\":%.2f,"
      "\"after_pass_above_book_mb\":%.2f,\"arena_growth_in_pass_mb\":%.2f,\"report_bytes\":%zu}\n",
      nodes, Mb(booked.in_use - base.in_use), Mb(peak - booked.in_use),
      Mb(after.in_use > booked.in_use ? after.in_use - booked.in_use : 0),
      Mb(after.arena > booked.arena ? after.arena - booked.arena : 0), text_bytes);
  return 0;
}
