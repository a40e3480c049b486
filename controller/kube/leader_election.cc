#include "controller/kube/leader_election.h"

#include <ctime>

#include <spdlog/spdlog.h>

#include "common/locked.h"

namespace feedguard::kube {
namespace {

std::string Format(std::chrono::system_clock::time_point t, bool micros) {
  const auto secs = std::chrono::time_point_cast<std::chrono::seconds>(t);
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(t - secs).count();
  const std::time_t tt = std::chrono::system_clock::to_time_t(secs);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  std::string out(buf);
  if (micros) {
    char frac[16];
    std::snprintf(frac, sizeof frac, ".%06lld", static_cast<long long>(us));
    out += frac;
  }
  return out + "Z";
}

}  // namespace

std::string FormatMicroTime(std::chrono::system_clock::time_point t) { return Format(t, true); }
std::string FormatTime(std::chrono::system_clock::time_point t) { return Format(t, false); }

LeaderElector::LeaderElector(ClientPtr client, LeaderElectionConfig config, TimeSourcePtr clock,
                             SleeperPtr sleeper)
    : client_(std::move(client)),
      config_(std::move(config)),
      clock_(std::move(clock)),
      sleeper_(std::move(sleeper)) {}

bool LeaderElector::IsLeader() const { return LockedCopy(mu_, leader_); }

std::string LeaderElector::ObservedLeader() const { return LockedCopy(mu_, observed_holder_); }

Json LeaderElector::NewSpec(const Json& old_spec, bool keep_acquire) const {
  const std::string now = FormatMicroTime(clock_->WallNow());
  Json spec = Json::object();
  spec["holderIdentity"] = config_.identity;
  spec["leaseDurationSeconds"] =
      std::chrono::duration_cast<std::chrono::seconds>(config_.lease_duration).count();
  spec["renewTime"] = now;
  const int64_t transitions = old_spec.is_object() && old_spec.contains("leaseTransitions") &&
                                      old_spec["leaseTransitions"].is_number_integer()
                                  ? old_spec["leaseTransitions"].get<int64_t>()
                                  : 0;
  if (keep_acquire && old_spec.contains("acquireTime")) {
    spec["acquireTime"] = old_spec["acquireTime"];
    spec["leaseTransitions"] = transitions;
  } else {
    spec["acquireTime"] = now;
    spec["leaseTransitions"] =
        old_spec.is_object() && old_spec.contains("holderIdentity") ? transitions + 1 : transitions;
  }
  return spec;
}

bool LeaderElector::LeaderSilent() const {
  std::lock_guard<std::mutex> lock(mu_);
  return read_at_ && !observed_holder_.empty() && observed_holder_ != config_.identity &&
         *read_at_ - observed_at_ >= config_.silent_after;
}

bool LeaderElector::TryAcquireOrRenew() {
  const auto now = clock_->MonotonicNow();
  auto got = client_->Get(LeasesGvr(), config_.lease_namespace, config_.lease_name);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (got.ok()) {
      read_at_ = now;
    } else {
      read_at_.reset();
    }
  }
  if (!got.ok() && got.status().code() == StatusCode::kNotFound) {
    Json lease = {
        {"apiVersion", "coordination.k8s.io/v1"},
        {"kind", "Lease"},
        {"metadata", {{"name", config_.lease_name}, {"namespace", config_.lease_namespace}}},
        {"spec", NewSpec(Json::object(), false)}};
    auto created = client_->Create(LeasesGvr(), config_.lease_namespace, lease);
    if (!created.ok()) return false;
    std::lock_guard<std::mutex> lock(mu_);
    observed_record_ = (*created)["spec"].dump();
    observed_holder_ = config_.identity;
    observed_at_ = now;
    return true;
  }
  if (!got.ok()) {
    spdlog::warn("leader election: reading lease: {}", got.status().ToString());
    return false;
  }
  Json& lease = *got;
  const Json spec =
      lease.contains("spec") && lease["spec"].is_object() ? lease["spec"] : Json::object();
  const std::string holder = spec.contains("holderIdentity") && spec["holderIdentity"].is_string()
                                 ? spec["holderIdentity"].get<std::string>()
                                 : "";
  auto duration = config_.lease_duration;
  if (spec.contains("leaseDurationSeconds") && spec["leaseDurationSeconds"].is_number()) {
    duration = std::chrono::seconds(spec["leaseDurationSeconds"].get<int64_t>());
  }
  std::string changed_holder;
  bool held_by_other;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string record = spec.dump();
    if (record != observed_record_) {
      observed_record_ = record;
      observed_at_ = now;
      if (holder != observed_holder_) changed_holder = holder;
      observed_holder_ = holder;
    }
    held_by_other = !holder.empty() && holder != config_.identity && observed_at_ + duration > now;
  }
  if (!changed_holder.empty() && config_.on_new_leader) config_.on_new_leader(changed_holder);
  if (held_by_other) return false;

  lease["spec"] = NewSpec(spec, holder == config_.identity);
  auto updated = client_->Update(LeasesGvr(), config_.lease_namespace, lease);
  if (!updated.ok()) {
    if (updated.status().code() != StatusCode::kAborted) {
      spdlog::warn("leader election: updating lease: {}", updated.status().ToString());
    }
    return false;
  }
  std::lock_guard<std::mutex> lock(mu_);
  observed_record_ = (*updated)["spec"].dump();
  observed_holder_ = config_.identity;
  observed_at_ = now;
  return true;
}

Status LeaderElector::Release() {
  FG_ASSIGN_OR_RETURN(Json lease,
                      client_->Get(LeasesGvr(), config_.lease_namespace, config_.lease_name));
  if (!lease.is_object()) return Internal("lease is not an object");
  if (!lease["spec"].is_object()) return OkStatus();  // nobody holds it
  const Json& holder = lease["spec"]["holderIdentity"];
  if (!holder.is_string() || holder.get<std::string>() != config_.identity) return OkStatus();
  const std::string now = FormatMicroTime(clock_->WallNow());
  lease["spec"]["holderIdentity"] = "";
  lease["spec"]["leaseDurationSeconds"] = 1;
  lease["spec"]["renewTime"] = now;
  lease["spec"]["acquireTime"] = now;
  auto r = client_->Update(LeasesGvr(), config_.lease_namespace, lease);
  return r.status();
}

void LeaderElector::Run(std::stop_token stop) {
  const bool watch_silence = config_.silent_after.count() > 0 && config_.on_leader_silent;
  bool silent = false;
  auto tell_silent = [&](bool now_silent) {
    if (now_silent == silent) return;
    silent = now_silent;
    config_.on_leader_silent(silent);
  };
  bool acquired = false;
  while (!stop.stop_requested()) {
    if (TryAcquireOrRenew()) {
      acquired = true;
      break;
    }
    if (watch_silence) tell_silent(LeaderSilent());
    // Watching for silence, a standby reads twice per retry period: the leader renews once per
    // period, so a record unchanged for 1.5 periods is told within 2 of the last renewal.
    if (!sleeper_->Sleep(watch_silence ? config_.retry_period / 2 : config_.retry_period, stop)) {
      break;
    }
  }
  // Leading takes over from silence; stopping without leading ends it.
  if (watch_silence && !acquired) tell_silent(false);
  if (!acquired || stop.stop_requested()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    leader_ = true;
  }
  spdlog::info("leader election: {} leads {}/{}", config_.identity, config_.lease_namespace,
               config_.lease_name);
  if (config_.on_started_leading) config_.on_started_leading();
  auto last_renew = clock_->MonotonicNow();
  while (sleeper_->Sleep(config_.retry_period, stop)) {
    if (TryAcquireOrRenew()) {
      last_renew = clock_->MonotonicNow();
      continue;
    }
    if (clock_->MonotonicNow() - last_renew >= config_.renew_deadline) {
      spdlog::warn("leader election: {} lost {}/{}", config_.identity, config_.lease_namespace,
                   config_.lease_name);
      break;
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    leader_ = false;
  }
  if (stop.stop_requested() && config_.release_on_stop) {
    Status s = Release();
    if (!s.ok()) spdlog::warn("leader election: release: {}", s.ToString());
  }
  if (config_.on_stopped_leading) config_.on_stopped_leading();
}

}  // namespace feedguard::kube
