// reflector.h — client-go-style list+watch keeping a Store in step with the API server and
// telling handlers about every change exactly once: list (record resourceVersion), watch from it
// with bookmarks, re-watch on disconnect with jittered backoff, relist on 410 Expired (first at
// the last resourceVersion, then from scratch) emitting only the difference.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "common/backoff.h"
#include "controller/kube/client.h"
#include "controller/kube/store.h"

namespace feedguard::kube {

// Called on the reflector's thread, after the store has been updated. `old_obj` is null when the
// store keeps versions only. During a relist, adds and updates arrive page by page and deletes
// once the list is complete.
struct ResourceEventHandlers {
  std::function<void(const ObjectPtr& obj)> on_add;
  std::function<void(const ObjectPtr& old_obj, const ObjectPtr& new_obj)> on_update;
  std::function<void(const ObjectPtr& last_known)> on_delete;
  std::function<void()> on_synced;  // once, after the first complete list
};

// Reduces an object to the fields the caller needs (memory). metadata.name, .namespace,
// .resourceVersion and .uid are put back if the transform drops them.
using TransformFunc = std::function<Json(Json obj)>;

struct ReflectorOptions {
  Gvr gvr;
  std::string ns;  // "" = all namespaces
  std::string label_selector;
  std::string field_selector;  // e.g. "spec.nodeName=gpu-17"
  // The fields of each object the handlers read; the rest is never built (null: all but
  // metadata.managedFields). Must include metadata.name, .namespace and .resourceVersion.
  std::shared_ptr<const FieldSet> fields;
  // Unpaginated lists (page_size 0) asked for in protobuf, each item's bytes made into the object
  // by this (ListOptions::protobuf_item); null: JSON. Watches stay JSON.
  std::function<Json(std::string_view item)> protobuf_item;
  // Lists: pages of this many objects, each page parsed whole (continue tokens, which etcd's
  // compaction can expire mid-list); 0: one unpaginated list split into its items as it arrives
  // (served from the API server's watch cache; nothing to expire).
  int64_t page_size = 500;
  int min_watch_timeout_s = 300;
  int max_watch_timeout_s = 600;
  // 800 ms ×2 up to 30 s, each delay in [d, 2d) (client-go's re-watch backoff).
  BackoffPolicy backoff{std::chrono::milliseconds(800), 2.0, std::chrono::milliseconds(30'000),
                        /*jitter_below=*/0.0, /*jitter_above=*/1.0};
  // A 429 (the API server's "storage is (re)initializing" after its restart, or API Priority and
  // Fairness shedding load) is retried after this, as the server's Retry-After asks, without
  // growing the backoff: an informer must not sit out a long backoff once the server is back.
  std::chrono::milliseconds retry_after_busy{1'000};
  TransformFunc transform;
  uint64_t seed = 0;  // 0: random
};

struct ReflectorStats {
  int lists = 0;            // successful lists
  int expired_relists = 0;  // relists caused by 410
  int watches_opened = 0;
  int watch_failures = 0;  // watches ended by an error (connection, server)
  int events = 0;          // watch events applied (excluding duplicates and bookmarks)
  int bookmarks = 0;
  int duplicates_skipped = 0;  // events whose resourceVersion the store already had
  int list_restarts = 0;       // paged lists started again after their continue token expired
  // Listed items the store held at that version, marked seen without being parsed (streamed
  // lists only).
  int unchanged_unparsed = 0;
};

class Reflector {
 public:
  Reflector(ClientPtr client, StorePtr store, ReflectorOptions options,
            ResourceEventHandlers handlers, TimeSourcePtr clock, SleeperPtr sleeper);

  // Lists and watches until `stop` is set. Blocking; call on a thread of its own.
  void Run(std::stop_token stop);

  bool HasSynced() const;
  std::string LastResourceVersion() const;
  ReflectorStats stats() const;

 private:
  Status ListAndReplace(const std::string& resource_version, std::stop_token stop);
  // One watch. OK: the server ended it normally (`*events` counts applied events).
  Status WatchOnce(std::stop_token stop, int* events);
  Status HandleEvent(Json& event, int* events);
  ObjectPtr Prepare(Json raw) const;
  // An object naming `key` only (a synthetic delete from a versions-only store).
  static ObjectPtr Stub(const std::string& key);
  // Runs a handler; an exception it throws is logged as a skipped object, never propagated.
  void Deliver(const Json& obj, const std::function<void()>& call) const;
  void SetLastResourceVersion(std::string rv);

  const ClientPtr client_;
  const StorePtr store_;
  const ReflectorOptions options_;
  const ResourceEventHandlers handlers_;
  const TimeSourcePtr clock_;
  const SleeperPtr sleeper_;
  uint64_t seed_;
  // Paged lists restarted at most this often in one ListAndReplace (an expired continue token).
  static constexpr int kMaxListRestarts = 3;
  uint64_t list_epoch_ = 0;  // Run's thread only: the current list pass (Store epochs)

  mutable std::mutex mu_;
  std::string last_rv_;   // guarded by mu_
  bool synced_ = false;   // guarded by mu_
  ReflectorStats stats_;  // guarded by mu_
};

}  // namespace feedguard::kube
