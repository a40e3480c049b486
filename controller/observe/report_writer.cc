#include "controller/observe/report_writer.h"

#include <condition_variable>
#include <exception>
#include <utility>

#include <spdlog/spdlog.h>

#include "controller/policy/fence_policy.h"
#include "controller/status/policy_status.h"

namespace feedguard::controller {

kube::Gvr StarvationReportGvr() {
  return {kFencePolicyGroup, kFencePolicyVersion, kStarvationReportResource};
}

StarvationReportWriter::StarvationReportWriter(std::shared_ptr<kube::Client> client,
                                               std::shared_ptr<StarvationBook> book, PodNamer names,
                                               std::function<size_t()> not_observed,
                                               TimeSourcePtr clock, StarvationWriterOptions options)
    : client_(std::move(client)),
      book_(std::move(book)),
      names_(std::move(names)),
      not_observed_(std::move(not_observed)),
      clock_(clock ? std::move(clock) : std::make_shared<RealTimeSource>()),
      options_(std::move(options)) {}

Status StarvationReportWriter::WriteOnce() {
  nlohmann::json status = RenderStarvationStatus(
      book_->Snapshot(), names_, not_observed_ ? not_observed_() : 0, options_.limits);
  {
    std::lock_guard<std::mutex> l(mu_);
    if (written_ && *written_ == status) {
      ++stats_.unchanged;
      return OkStatus();
    }
  }
  const auto gvr = StarvationReportGvr();
  auto current = client_->Get(gvr, "", kStarvationReportName);
  if (!current.ok() && current.status().code() == StatusCode::kNotFound) {
    nlohmann::json obj = {
        {"apiVersion", std::string(kFencePolicyGroup) + "/" + kFencePolicyVersion},
        {"kind", "StarvationReport"},
        {"metadata", {{"name", kStarvationReportName}}},
        {"spec", nlohmann::json::object()}};
    current = client_->Create(gvr, "", obj);
    if (!current.ok() && current.status().code() == StatusCode::kNotFound) {
      current = current.status().Annotate(
          "the API server does not serve starvationreports.feedguard.io (install "
          "crds/starvationreport.yaml, or run with --max-observed-pods=0)");
    }
  }
  Status st = current.status();
  if (st.ok()) {
    nlohmann::json stamped = status;
    stamped["updated"] = Rfc3339(clock_->WallNow());
    auto r =
        client_->UpdateStatusWithRetry(gvr, "", kStarvationReportName, [&](nlohmann::json& obj) {
          obj["status"] = stamped;
          return OkStatus();
        });
    st = r.status();
  }
  std::lock_guard<std::mutex> l(mu_);
  if (!st.ok()) {
    ++stats_.failures;
    return st.Annotate("StarvationReport");
  }
  ++stats_.writes;
  written_ = std::move(status);
  return OkStatus();
}

void StarvationReportWriter::Run(std::stop_token stop) {
  std::mutex m;
  std::condition_variable_any cv;
  while (!stop.stop_requested()) {
    // Nothing escapes this thread: a pass that throws (a JSON value the report cannot hold) is
    // said and the next pass tries again.
    try {
      if (Status st = WriteOnce(); !st.ok()) spdlog::warn("observe: {}", st.ToString());
    } catch (const std::exception& e) {
      spdlog::error("observe: StarvationReport pass failed: {}", e.what());
    }
    std::unique_lock lock(m);
    cv.wait_for(lock, stop, options_.interval, [] { return false; });
  }
}

StarvationWriterStats StarvationReportWriter::stats() const {
  std::lock_guard<std::mutex> l(mu_);
  return stats_;
}

}  // namespace feedguard::controller
