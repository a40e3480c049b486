#include "controller/kube/reflector.h"

#include <algorithm>
#include <future>
#include <random>
#include <unordered_map>

#include <spdlog/spdlog.h>

#include "common/locked.h"

namespace feedguard::kube {
namespace {

void PutBack(Json& obj, const char* field, const std::string& value) {
  if (value.empty()) return;
  if (!obj.is_object()) obj = Json::object();
  Json& meta = obj["metadata"];
  if (!meta.is_object()) meta = Json::object();
  if (!meta.contains(field)) meta[field] = value;
}

}  // namespace

Reflector::Reflector(ClientPtr client, StorePtr store, ReflectorOptions options,
                     ResourceEventHandlers handlers, TimeSourcePtr clock, SleeperPtr sleeper)
    : client_(std::move(client)),
      store_(std::move(store)),
      options_(std::move(options)),
      handlers_(std::move(handlers)),
      clock_(std::move(clock)),
      sleeper_(std::move(sleeper)),
      seed_(options_.seed != 0 ? options_.seed : std::random_device{}()) {}

bool Reflector::HasSynced() const { return LockedCopy(mu_, synced_); }

std::string Reflector::LastResourceVersion() const { return LockedCopy(mu_, last_rv_); }

ReflectorStats Reflector::stats() const { return LockedCopy(mu_, stats_); }

void Reflector::SetLastResourceVersion(std::string rv) {
  std::lock_guard<std::mutex> lock(mu_);
  last_rv_ = std::move(rv);
}

void Reflector::Deliver(const Json& obj, const std::function<void()>& call) const {
  try {
    call();
  } catch (const std::exception& e) {
    spdlog::warn("reflector {}: handler failed on {}, skipped: {}", options_.gvr.resource,
                 ObjectKey(obj), e.what());
  }
}

ObjectPtr Reflector::Prepare(Json raw) const {
  if (!options_.transform) return std::make_shared<const Json>(std::move(raw));
  const std::string name = NameOf(raw), ns = NamespaceOf(raw), rv = ResourceVersionOf(raw),
                    uid = UidOf(raw);
  Json t;
  try {
    t = options_.transform(std::move(raw));
  } catch (const std::exception& e) {
    // A transform that trips over a malformed object: keep only its identity (put back below)
    // rather than let the exception end the reflector.
    spdlog::warn("reflector {}: transform failed on {}/{}, keeping its metadata only: {}",
                 options_.gvr.resource, ns, name, e.what());
    t = Json::object();
  }
  PutBack(t, "name", name);
  PutBack(t, "namespace", ns);
  PutBack(t, "resourceVersion", rv);
  PutBack(t, "uid", uid);
  return std::make_shared<const Json>(std::move(t));
}

Status Reflector::ListAndReplace(const std::string& resource_version, std::stop_token stop) {
  // Item by item (streamed) or page by page, never the whole list at once: each listed object
  // is compared with what the handlers have seen (its resourceVersion in the store) and
  // delivered at once when new or changed; objects the list did not contain are deleted once it
  // is complete. Memory stays at one item or page beside the store (a relist of 150,000 pods
  // does not hold a second copy), and a list cut short leaves every delivered object correct
  // (each is a state the server really had).
  const uint64_t epoch = ++list_epoch_;
  const auto list_started = clock_->MonotonicNow();
  int listed = 0, unchanged = 0;  // items in the list; of those, marked seen without parsing
  ListOptions opts;
  opts.label_selector = options_.label_selector;
  opts.field_selector = options_.field_selector;
  opts.fields = options_.fields;
  opts.protobuf_item = options_.protobuf_item;
  opts.limit = options_.page_size;
  opts.resource_version = resource_version;
  std::string list_rv;
  int restarts = 0;
  // Each listed object: delivered when new or changed, else only marked seen in this list.
  auto deliver = [&](Json&& item) {
    ++listed;
    const std::string key = ObjectKey(item);
    if (store_->MarkIfSame(key, ResourceVersionOf(item), epoch)) return;
    ObjectPtr obj = Prepare(std::move(item));
    Store::Previous prev = store_->Put(obj, epoch);
    if (!prev.existed) {
      if (handlers_.on_add) Deliver(*obj, [&] { handlers_.on_add(obj); });
    } else if (handlers_.on_update) {
      Deliver(*obj, [&] { handlers_.on_update(prev.object, obj); });
    }
  };
  if (options_.page_size <= 0) {
    // One unpaginated list, split into items as it arrives (no continue token to expire). An
    // item the store holds at the listed version is only marked seen, and never parsed: a relist
    // after a compaction (150,000 pods, most unchanged) costs a walk over the bytes.
    opts.skip = [&](const ObjectIdentity& id) {
      if (!store_->MarkIfSame(id.key, id.resource_version, epoch)) return false;
      ++listed;
      ++unchanged;
      return true;
    };
    Result<std::string> rv = client_->ListStream(options_.gvr, options_.ns, opts, deliver, stop);
    {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.unchanged_unparsed += unchanged;
    }
    FG_ASSIGN_OR_RETURN(list_rv, std::move(rv));
  } else {
    bool first = true;
    // The next page is fetched (HTTP and JSON parsing, on a thread of its own) while this one
    // is delivered: the API server's work and ours overlap instead of taking turns.
    auto fetch = [this](ListOptions o) {
      return client_->ListOnePage(options_.gvr, options_.ns, o);
    };
    Result<ListPage> page = fetch(opts);
    while (true) {
      if (stop.stop_requested()) return Aborted("stopped");
      if (!page.ok() && IsExpired(page.status()) && !first && restarts < kMaxListRestarts) {
        // The continue token outlived the server's compaction (every 5 min by default): a long
        // paged list can meet one. Start a fresh list at once (client-go's pager falls back to
        // one unpaginated list, which would hold every object in memory at once); what this
        // list already delivered is not delivered again, the new one only marks it seen.
        ++restarts;
        spdlog::info("reflector {}: continue token expired, listing again (restart {})",
                     options_.gvr.resource, restarts);
        opts.continue_token.clear();
        opts.resource_version.clear();
        first = true;
        page = fetch(opts);
        continue;
      }
      if (!page.ok()) return page.status();
      if (first) list_rv = page->resource_version;
      first = false;
      std::future<Result<ListPage>> next;
      if (!page->continue_token.empty()) {
        opts.continue_token = page->continue_token;
        opts.resource_version.clear();
        next = std::async(std::launch::async, fetch, opts);
      }
      for (auto& item : page->items) deliver(std::move(item));
      if (!next.valid()) break;
      page = next.get();
    }
  }
  // Objects that vanished while we were not watching: synthetic deletes with the last known
  // object (a stub naming it when the store keeps versions only).
  auto swept = store_->SweepOlderThan(epoch);
  for (auto& [key, last] : swept) {
    ObjectPtr gone = last ? std::move(last) : Stub(key);
    if (handlers_.on_delete) Deliver(*gone, [&] { handlers_.on_delete(gone); });
  }
  spdlog::info("reflector {}: listed {} objects in {:.2f} s ({} unchanged, not parsed; {} gone)",
               options_.gvr.resource, listed,
               std::chrono::duration<double>(clock_->MonotonicNow() - list_started).count(),
               unchanged, swept.size());
  bool first_sync;
  {
    std::lock_guard<std::mutex> lock(mu_);
    last_rv_ = list_rv;
    first_sync = !synced_;
    stats_.lists++;
    stats_.list_restarts += restarts;
  }
  if (first_sync) {
    // Synced means "the handlers have seen the whole initial list", not "the list arrived":
    // a controller that starts distributing on HasSynced() must not miss a listed object.
    {
      std::lock_guard<std::mutex> lock(mu_);
      synced_ = true;
    }
    if (handlers_.on_synced) handlers_.on_synced();
  }
  return OkStatus();
}

ObjectPtr Reflector::Stub(const std::string& key) {
  Json meta = Json::object();
  if (auto slash = key.find('/'); slash != std::string::npos) {
    meta["namespace"] = key.substr(0, slash);
    meta["name"] = key.substr(slash + 1);
  } else {
    meta["name"] = key;
  }
  return std::make_shared<const Json>(Json{{"metadata", std::move(meta)}});
}

Status Reflector::HandleEvent(Json& event, int* events) {
  // Every field type-checked: a malformed event is an error (the watch is re-opened), never an
  // exception.
  if (!event.is_object()) return Internal("watch event is not a JSON object");
  auto t = event.find("type");
  const std::string type = t != event.end() && t->is_string() ? t->get<std::string>() : "";
  Json& object = event["object"];
  if (type == "ERROR") {
    int code = 0;
    std::string msg;
    if (object.is_object()) {
      auto c = object.find("code");
      if (c != object.end() && c->is_number_integer()) {
        code = static_cast<int>(std::clamp<int64_t>(c->get<int64_t>(), 0, 999));
      }
      auto m = object.find("message");
      if (m != object.end() && m->is_string()) msg = m->get<std::string>();
    }
    if (code == 410) return ExpiredError(msg);
    return Unavailable("watch error " + std::to_string(code) + ": " + msg);
  }
  const std::string rv = ResourceVersionOf(object);
  if (type == "BOOKMARK") {
    SetLastResourceVersion(rv);
    std::lock_guard<std::mutex> lock(mu_);
    stats_.bookmarks++;
    return OkStatus();
  }
  if (type != "ADDED" && type != "MODIFIED" && type != "DELETED") {
    return Internal("unknown watch event type '" + type + "'");
  }
  if (!object.is_object()) return Internal("watch event " + type + " without an object");
  const std::string key = ObjectKey(object);
  ObjectPtr obj = Prepare(std::move(object));
  bool duplicate = false;
  if (type == "DELETED") {
    const bool existed = store_->Erase(key).existed;
    SetLastResourceVersion(rv);
    if (!existed) {
      duplicate = true;
    } else if (handlers_.on_delete) {
      Deliver(*obj, [&] { handlers_.on_delete(obj); });
    }
  } else if (store_->MarkIfSame(key, rv, list_epoch_)) {
    duplicate = true;
    SetLastResourceVersion(rv);
  } else {
    Store::Previous prev = store_->Put(obj, list_epoch_);
    SetLastResourceVersion(rv);
    if (!prev.existed) {
      if (handlers_.on_add) Deliver(*obj, [&] { handlers_.on_add(obj); });
    } else if (handlers_.on_update) {
      Deliver(*obj, [&] { handlers_.on_update(prev.object, obj); });
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (duplicate) {
    stats_.duplicates_skipped++;
  } else {
    stats_.events++;
    ++*events;
  }
  return OkStatus();
}

Status Reflector::WatchOnce(std::stop_token stop, int* events) {
  std::mt19937_64 rng(seed_++);
  std::uniform_int_distribution<int> timeout(options_.min_watch_timeout_s,
                                             options_.max_watch_timeout_s);
  WatchOptions w;
  w.label_selector = options_.label_selector;
  w.field_selector = options_.field_selector;
  w.fields = options_.fields;
  w.resource_version = LastResourceVersion();
  w.timeout_seconds = timeout(rng);
  w.allow_bookmarks = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.watches_opened++;
  }
  Status event_status;
  Status s = client_->Watch(
      options_.gvr, options_.ns, w,
      [&](Json& ev) {
        event_status = HandleEvent(ev, events);
        return event_status.ok();
      },
      stop);
  if (!event_status.ok()) return event_status;
  return s;
}

void Reflector::Run(std::stop_token stop) {
  Backoff backoff(options_.backoff, seed_++);
  // Where the next list reads from. After a watch 410: first the last resourceVersion; if the
  // watch that follows expires again without an event, from scratch (""); if even that version
  // is not watchable (a freshly restarted API server's watch cache can start above etcd's
  // revision), from the watch cache ("0"), whose version is watchable, with backoff so a
  // misbehaving server is never hammered.
  enum class ListFrom { kScratch, kLastRv, kCache };
  ListFrom list_from = ListFrom::kScratch;
  int expired_streak = 0;  // consecutive watch 410s without an event in between
  bool need_list = true;
  while (!stop.stop_requested()) {
    if (need_list) {
      const std::string rv = list_from == ListFrom::kLastRv  ? LastResourceVersion()
                             : list_from == ListFrom::kCache ? std::string("0")
                                                             : std::string();
      Status s = ListAndReplace(rv, stop);
      if (IsExpired(s) && list_from == ListFrom::kLastRv) {
        spdlog::info("reflector {}: resourceVersion {} compacted, listing from scratch",
                     options_.gvr.resource, rv);
        list_from = ListFrom::kScratch;
        continue;
      }
      if (!s.ok()) {
        if (stop.stop_requested()) break;
        spdlog::warn("reflector {}: list failed: {}", options_.gvr.resource, s.ToString());
        const bool busy = s.code() == StatusCode::kResourceExhausted;
        if (!sleeper_->Sleep(busy ? options_.retry_after_busy : backoff.Next(), stop)) break;
        continue;
      }
      need_list = false;
      if (expired_streak < 3) backoff.Reset();
    }
    const auto started = clock_->MonotonicNow();
    int events = 0;
    Status s = WatchOnce(stop, &events);
    if (stop.stop_requested()) break;
    if (events > 0 || s.ok()) expired_streak = 0;
    if (IsExpired(s)) {
      ++expired_streak;
      spdlog::info("reflector {}: watch expired ({}), relisting (streak {})", options_.gvr.resource,
                   s.message(), expired_streak);
      {
        std::lock_guard<std::mutex> lock(mu_);
        stats_.expired_relists++;
      }
      need_list = true;
      list_from = expired_streak == 1   ? ListFrom::kLastRv
                  : expired_streak == 2 ? ListFrom::kScratch
                                        : ListFrom::kCache;
      if (expired_streak >= 3 && !sleeper_->Sleep(backoff.Next(), stop)) break;
      continue;
    }
    if (s.ok() && (events > 0 || clock_->MonotonicNow() - started >= std::chrono::seconds(1))) {
      backoff.Reset();  // a normal end: simply re-open
      continue;
    }
    if (!s.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.watch_failures++;
    }
    if (events > 0) backoff.Reset();
    spdlog::warn("reflector {}: watch ended: {}; re-watching from {}", options_.gvr.resource,
                 s.ToString(), LastResourceVersion());
    const bool busy = s.code() == StatusCode::kResourceExhausted;
    if (!sleeper_->Sleep(busy ? options_.retry_after_busy : backoff.Next(), stop)) break;
  }
}

}  // namespace feedguard::kube
