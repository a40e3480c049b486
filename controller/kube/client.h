// client.h — a generic Kubernetes REST client over an HttpTransport: get/list (selectors,
// pagination), create, update, patch (merge, JSON patch, server-side apply), delete (with
// preconditions), the /status subresource with conflict-retrying updates, and watch streams.
// It knows resources only as group/version/resource and objects only as JSON.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "controller/kube/field_set.h"
#include "controller/kube/resource.h"
#include "controller/kube/transport.h"
#include "feedguard/common/status.h"

namespace feedguard::kube {

// HTTP → Status mapping, carrying the API server's Status message:
//   404 NotFound · 409 Aborted (reason AlreadyExists → AlreadyExists) · 410 Expired (see
//   IsExpired) · 400/422 InvalidArgument · 401/403 PermissionDenied · 429 ResourceExhausted ·
//   504 DeadlineExceeded · 5xx Unavailable.
Status StatusFromHttp(long http_status, const std::string& body);
// 410 Gone (a compacted resourceVersion or an expired continue token). Encoded as
// kFailedPrecondition whose message holds "Expired: " since StatusCode has no such code.
Status ExpiredError(const std::string& message);
bool IsExpired(const Status& s);

struct ListOptions {
  std::string label_selector;
  std::string field_selector;
  int64_t limit = 0;           // page size; 0 = server default (everything)
  std::string continue_token;  // from the previous page
  std::string resource_version;
  std::string resource_version_match;  // "", "Exact", "NotOlderThan"
  // What each listed object keeps (parsed away otherwise); null: all but metadata.managedFields.
  std::shared_ptr<const FieldSet> fields;
  // Streamed lists (ListStream) only: asked with each item's key and resourceVersion, read by
  // PeekIdentity before the item is parsed; true: the caller holds that version already, and the
  // item is neither parsed nor handed over (a relist parses only what changed). With
  // protobuf_item, asked after the item is decoded (decoding protobuf is the cheap part).
  std::function<bool(const ObjectIdentity&)> skip;
  // Streamed lists only: ask for the list in protobuf (kube/proto_list.h) and make each item's
  // bytes the object this returns (trimmed as `fields` would; a discarded Json is an error). For
  // kinds the API server encodes in protobuf (built-in ones, not custom resources).
  std::function<Json(std::string_view item)> protobuf_item;
};

struct ListPage {
  std::vector<Json> items;
  std::string resource_version;  // the list's metadata.resourceVersion
  std::string continue_token;    // "" on the last page
};

struct WatchOptions {
  std::string label_selector;
  std::string field_selector;
  std::string resource_version;
  int timeout_seconds = 0;  // the server ends the watch after this (0: server default)
  bool allow_bookmarks = true;
  // What each event's object keeps (parsed away otherwise); null: all but metadata.managedFields.
  std::shared_ptr<const FieldSet> fields;
};

enum class PatchType { kMerge, kJson, kApply };

struct PatchOptions {
  std::string field_manager;  // required for kApply
  bool force = false;         // server-side apply: take ownership of conflicting fields
  std::string subresource;    // e.g. "status"
};

struct DeleteOptions {
  std::string precondition_uid;
  std::string precondition_resource_version;
  std::string propagation_policy;  // "", "Foreground", "Background", "Orphan"
};

class Client {
 public:
  explicit Client(HttpTransportPtr transport) : transport_(std::move(transport)) {}

  Result<Json> Get(const Gvr& gvr, const std::string& ns, const std::string& name,
                   const std::string& subresource = "");
  // One page.
  Result<ListPage> ListOnePage(const Gvr& gvr, const std::string& ns, const ListOptions& opts);

  // One unpaginated list (opts.limit and opts.continue_token are ignored), parsed as it arrives:
  // each item, trimmed to opts.fields, goes to `on_item` before the next is read, so the list is
  // never held whole. Returns the list's resourceVersion. No continue token can expire midway
  // (etcd compaction), and the API server serves it from its watch cache. An error after some
  // items were delivered leaves those delivered (each is a state the server had).
  Result<std::string> ListStream(const Gvr& gvr, const std::string& ns, const ListOptions& opts,
                                 const std::function<void(Json&& item)>& on_item,
                                 std::stop_token stop = {});
  // All pages (follows `continue`); the resource version is the first page's.
  Result<ListPage> List(const Gvr& gvr, const std::string& ns, ListOptions opts = {});
  Result<Json> Create(const Gvr& gvr, const std::string& ns, const Json& obj);
  // PUT of the whole object (name from obj.metadata.name; include resourceVersion for
  // optimistic concurrency).
  Result<Json> Update(const Gvr& gvr, const std::string& ns, const Json& obj,
                      const std::string& subresource = "");
  Result<Json> UpdateStatus(const Gvr& gvr, const std::string& ns, const Json& obj) {
    return Update(gvr, ns, obj, "status");
  }
  Result<Json> Patch(const Gvr& gvr, const std::string& ns, const std::string& name, PatchType type,
                     const Json& patch, const PatchOptions& opts = {});
  Status Delete(const Gvr& gvr, const std::string& ns, const std::string& name,
                const DeleteOptions& opts = {});

  // Read-modify-write with optimistic concurrency, the one conflict-retry loop: GETs the
  // object, lets `edit` change it, PUTs it (to `subresource` when one is named) with the
  // resourceVersion read; on 409 repeats, at most `max_attempts` times. `edit` returns false
  // when there is nothing to write (the object read is returned), an error to give up. Returns
  // the object the server stored.
  Result<Json> UpdateWithRetry(const Gvr& gvr, const std::string& ns, const std::string& name,
                               const std::function<Result<bool>(Json& obj)>& edit,
                               const std::string& subresource = "", int max_attempts = 5);
  // UpdateWithRetry of /status; `recompute` always writes (or gives up with an error).
  Result<Json> UpdateStatusWithRetry(const Gvr& gvr, const std::string& ns, const std::string& name,
                                     const std::function<Status(Json& obj)>& recompute,
                                     int max_attempts = 5);

  // Opens a watch and calls `on_event` with each event ({"type":…,"object":…}) until the server
  // ends the stream (returns OK), `on_event` returns false (OK), `stop` is set (kAborted), the
  // connection fails (kUnavailable…) or the server refuses it (mapped HTTP error, e.g. Expired).
  Status Watch(const Gvr& gvr, const std::string& ns, const WatchOptions& opts,
               const std::function<bool(Json& event)>& on_event, std::stop_token stop);

  // TokenReview (POST /apis/authentication.k8s.io/v1/tokenreviews): the API server's verdict on
  // a bearer token for these audiences. Returns the review's `status` object (authenticated,
  // user.username, user.extra, audiences, error); an HTTP error (e.g. 403: the caller may not
  // create tokenreviews) is an error Status.
  Result<Json> ReviewToken(const std::string& token, const std::vector<std::string>& audiences);

  const HttpTransportPtr& transport() const { return transport_; }

 private:
  // `fields`: what of the body to keep while parsing (null: all of it). Lists and watch events
  // are only read, and keep what their options' FieldSet selects.
  Result<Json> Call(const HttpRequest& req, const FieldSet* fields = nullptr);
  // ListStream's protobuf form (opts.protobuf_item set).
  Result<std::string> ListStreamProtobuf(HttpRequest req, const ListOptions& opts,
                                         const std::function<void(Json&& item)>& on_item,
                                         std::stop_token stop);
  HttpTransportPtr transport_;
};
using ClientPtr = std::shared_ptr<Client>;

}  // namespace feedguard::kube
