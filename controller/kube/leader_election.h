// leader_election.h — one leader among controller replicas through a coordination.k8s.io/v1
// Lease (client-go semantics: 15 s lease, 10 s renew deadline, 2 s retry; expiry judged by
// when *we* last saw the record change, so clock skew between replicas does not matter).
#pragma once

#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

#include "common/backoff.h"
#include "controller/kube/client.h"
#include "feedguard/common/time_source.h"

namespace feedguard::kube {

struct LeaderElectionConfig {
  std::string lease_namespace;
  std::string lease_name;
  std::string identity;  // unique per replica, e.g. the pod name
  std::chrono::milliseconds lease_duration{15000};
  std::chrono::milliseconds renew_deadline{10000};
  std::chrono::milliseconds retry_period{2000};
  bool release_on_stop = true;  // hand the lease back when stopped, so others need not wait
  std::function<void()> on_started_leading;
  std::function<void()> on_stopped_leading;  // lost the lease or stopped while leading
  std::function<void(const std::string& identity)> on_new_leader;  // any change of holder
  // While campaigning: the Lease is held by another replica whose record this replica, reading
  // it successfully, has not seen change for `silent_after` (its holder stopped renewing: dead,
  // paused or cut off), on_leader_silent(true); once the record changes again, the Lease cannot
  // be read, or this replica stops campaigning without leading, on_leader_silent(false).
  // Called from Run()'s thread, on each change only. 0: never. With it, a campaigning replica
  // reads the Lease every retry_period / 2 instead of every retry_period.
  std::chrono::milliseconds silent_after{0};
  std::function<void(bool silent)> on_leader_silent;
};

// "2006-01-02T15:04:05.000000Z" (metav1.MicroTime).
std::string FormatMicroTime(std::chrono::system_clock::time_point t);
// "2006-01-02T15:04:05Z" (metav1.Time).
std::string FormatTime(std::chrono::system_clock::time_point t);

class LeaderElector {
 public:
  LeaderElector(ClientPtr client, LeaderElectionConfig config, TimeSourcePtr clock,
                SleeperPtr sleeper);

  // Campaigns until it holds the lease, leads until it cannot renew within the renew deadline
  // or `stop` is set, then returns (after on_stopped_leading if it led). Blocking.
  void Run(std::stop_token stop);

  // One attempt to take or renew the lease. True when we hold it afterwards.
  bool TryAcquireOrRenew();
  // Gives the lease up if we hold it (holderIdentity "", 1 s duration).
  Status Release();

  bool IsLeader() const;
  std::string ObservedLeader() const;

 private:
  Json NewSpec(const Json& old_spec, bool keep_acquire) const;
  // Whether the last read found another holder's record unchanged for config_.silent_after.
  bool LeaderSilent() const;

  const ClientPtr client_;
  const LeaderElectionConfig config_;
  const TimeSourcePtr clock_;
  const SleeperPtr sleeper_;

  mutable std::mutex mu_;
  bool leader_ = false;                                // guarded by mu_
  std::string observed_record_;                        // guarded by mu_
  std::string observed_holder_;                        // guarded by mu_
  std::chrono::steady_clock::time_point observed_at_;  // guarded by mu_
  // When the last TryAcquireOrRenew read the Lease; unset when that read failed.
  std::optional<std::chrono::steady_clock::time_point> read_at_;  // guarded by mu_
};

}  // namespace feedguard::kube
