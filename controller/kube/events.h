// events.h — records core/v1 Events about objects (kubectl describe shows them), folding
// repeats of the same (object, type, reason, message) into one Event with a rising count.
#pragma once

#include <map>
#include <mutex>
#include <string>

#include "controller/kube/client.h"
#include "feedguard/common/time_source.h"

namespace feedguard::kube {

class EventRecorder {
 public:
  EventRecorder(ClientPtr client, std::string component, std::string host, TimeSourcePtr clock,
                size_t max_cached = 4096);

  // `object` needs apiVersion, kind and metadata (name, namespace for namespaced objects, uid).
  // `type` is "Normal" or "Warning". Events about cluster-scoped objects go to "default".
  Status Record(const Json& object, const std::string& type, const std::string& reason,
                const std::string& message);

 private:
  struct Seen {
    std::string ns, name;
    int64_t count = 0;
  };
  const ClientPtr client_;
  const std::string component_, host_;
  const TimeSourcePtr clock_;
  const size_t max_cached_;
  std::mutex mu_;
  std::map<std::string, Seen> seen_;  // guarded by mu_; aggregation key → the Event written
  uint64_t sequence_ = 0;             // guarded by mu_
};

}  // namespace feedguard::kube
