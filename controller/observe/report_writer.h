// report_writer.h — writes the StarvationReport `cluster` (crds/starvationreport.yaml) from the
// StarvationBook: at most once per interval, and only when the rendered status changed (the
// agents' reports come every 10 s; a steady cluster costs no writes). Creates the object when it
// is missing (a fresh install, or someone deleted it). Runs on the leader only.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>

#include <nlohmann/json.hpp>

#include "controller/kube/client.h"
#include "controller/observe/starvation_book.h"
#include "controller/observe/starvation_report.h"
#include "feedguard/common/starvation.h"
#include "feedguard/common/status.h"
#include "feedguard/common/time_source.h"

namespace feedguard::controller {

kube::Gvr StarvationReportGvr();

struct StarvationWriterOptions {
  std::chrono::milliseconds interval{30'000};
  StarvationReportLimits limits;
};

struct StarvationWriterStats {
  uint64_t writes = 0;
  uint64_t unchanged = 0;  // passes that found nothing new to write
  uint64_t failures = 0;
};

class StarvationReportWriter {
 public:
  // `not_observed`: GPU pods over the per-node cap, cluster-wide (the reconciler's count).
  StarvationReportWriter(std::shared_ptr<kube::Client> client, std::shared_ptr<StarvationBook> book,
                         PodNamer names, std::function<size_t()> not_observed, TimeSourcePtr clock,
                         StarvationWriterOptions options);

  // One pass: render, and write when it changed. An error leaves the next pass to try again.
  Status WriteOnce();
  // Every interval until `stop`.
  void Run(std::stop_token stop);
  StarvationWriterStats stats() const;

 private:
  const std::shared_ptr<kube::Client> client_;
  const std::shared_ptr<StarvationBook> book_;
  const PodNamer names_;
  const std::function<size_t()> not_observed_;
  const TimeSourcePtr clock_;
  const StarvationWriterOptions options_;
  mutable std::mutex mu_;
  std::optional<nlohmann::json> written_;  // the last status written, without `updated`; mu_
  StarvationWriterStats stats_;            // guarded by mu_
};

}  // namespace feedguard::controller
