#include "controller/kube/events.h"

#include <cstdio>

#include "controller/kube/leader_election.h"

namespace feedguard::kube {

EventRecorder::EventRecorder(ClientPtr client, std::string component, std::string host,
                             TimeSourcePtr clock, size_t max_cached)
    : client_(std::move(client)),
      component_(std::move(component)),
      host_(std::move(host)),
      clock_(std::move(clock)),
      max_cached_(max_cached) {}

Status EventRecorder::Record(const Json& object, const std::string& type, const std::string& reason,
                             const std::string& message) {
  const std::string obj_ns = NamespaceOf(object);
  const std::string ns = obj_ns.empty() ? "default" : obj_ns;
  const std::string uid = UidOf(object);
  const std::string key =
      ObjectKey(object) + "\x1f" + uid + "\x1f" + type + "\x1f" + reason + "\x1f" + message;
  const auto wall = clock_->WallNow();
  const std::string now = FormatTime(wall);

  Seen seen;
  bool repeat = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = seen_.find(key);
    if (it != seen_.end()) {
      repeat = true;
      seen = it->second;
    }
  }
  if (repeat) {
    Json patch = {{"count", seen.count + 1}, {"lastTimestamp", now}};
    auto r = client_->Patch(EventsGvr(), seen.ns, seen.name, PatchType::kMerge, patch);
    if (r.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      seen_[key].count = seen.count + 1;
      return OkStatus();
    }
    if (r.status().code() != StatusCode::kNotFound) return r.status();
    // The Event expired (TTL); write a fresh one.
  }

  uint64_t seq;
  {
    std::lock_guard<std::mutex> lock(mu_);
    seq = ++sequence_;
  }
  char suffix[48];
  std::snprintf(
      suffix, sizeof suffix, ".%llx%04llx",
      static_cast<unsigned long long>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(wall.time_since_epoch()).count()),
      static_cast<unsigned long long>(seq & 0xffff));
  const std::string name = NameOf(object) + suffix;
  Json involved = {{"apiVersion", object.value("apiVersion", "")},
                   {"kind", object.value("kind", "")},
                   {"name", NameOf(object)}};
  if (!obj_ns.empty()) involved["namespace"] = obj_ns;
  if (!uid.empty()) involved["uid"] = uid;
  const std::string rv = ResourceVersionOf(object);
  if (!rv.empty()) involved["resourceVersion"] = rv;
  Json ev = {{"apiVersion", "v1"},
             {"kind", "Event"},
             {"metadata", {{"name", name}, {"namespace", ns}}},
             {"involvedObject", involved},
             {"reason", reason},
             {"message", message},
             {"type", type},
             {"source", {{"component", component_}, {"host", host_}}},
             {"reportingComponent", component_},
             {"reportingInstance", host_},
             {"firstTimestamp", now},
             {"lastTimestamp", now},
             {"count", 1}};
  auto created = client_->Create(EventsGvr(), ns, ev);
  if (!created.ok()) return created.status();
  std::lock_guard<std::mutex> lock(mu_);
  if (seen_.size() >= max_cached_) seen_.clear();
  seen_[key] = Seen{ns, name, 1};
  return OkStatus();
}

}  // namespace feedguard::kube
