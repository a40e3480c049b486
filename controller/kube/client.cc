#include "controller/kube/client.h"

#include "controller/kube/line_splitter.h"
#include "controller/kube/list_splitter.h"
#include "controller/kube/proto_list.h"

namespace feedguard::kube {
namespace {

constexpr std::string_view kExpiredPrefix = "Expired: ";

std::string ServerMessage(long http_status, const std::string& body, std::string* reason) {
  const Json j = Json::parse(body, nullptr, false);
  if (j.is_object()) {
    if (reason && j.contains("reason") && j["reason"].is_string()) *reason = j["reason"];
    if (j.contains("message") && j["message"].is_string()) return j["message"];
  }
  std::string msg = "HTTP " + std::to_string(http_status);
  if (!body.empty()) msg += ": " + body.substr(0, 512);
  return msg;
}

// What a listed or watched object keeps: the caller's FieldSet, by default all but
// metadata.managedFields (read by nothing here).
std::shared_ptr<const FieldSet> ObjectFields(const std::shared_ptr<const FieldSet>& fields) {
  return fields ? fields : FieldSet::AllButManagedFields();
}

// A list's metadata.<key> ("resourceVersion", "continue"); "" when absent or not a string.
std::string ListMeta(const Json& list, const char* key) {
  auto m = list.find("metadata");
  if (m == list.end() || !m->is_object()) return "";
  auto v = m->find(key);
  return v != m->end() && v->is_string() ? v->get<std::string>() : "";
}

}  // namespace

Status ExpiredError(const std::string& message) {
  return FailedPrecondition(std::string(kExpiredPrefix) + message);
}

bool IsExpired(const Status& s) {
  // Annotate() prefixes context, so the marker may sit anywhere in the message.
  return s.code() == StatusCode::kFailedPrecondition &&
         s.message().find(kExpiredPrefix) != std::string::npos;
}

Status StatusFromHttp(long http_status, const std::string& body) {
  if (http_status >= 200 && http_status < 300) return OkStatus();
  std::string reason;
  const std::string msg = ServerMessage(http_status, body, &reason);
  switch (http_status) {
    case 400:
    case 422:
      return InvalidArgument(msg);
    case 401:
    case 403:
      return PermissionDenied(msg);
    case 404:
      return NotFound(msg);
    case 409:
      if (reason == "AlreadyExists") return Status(StatusCode::kAlreadyExists, msg);
      return Aborted(msg);
    case 410:
      return ExpiredError(msg);
    case 429:
      return Status(StatusCode::kResourceExhausted, msg);
    case 504:
      return Status(StatusCode::kDeadlineExceeded, msg);
    default:
      break;
  }
  if (http_status >= 500 || http_status == 0) return Unavailable(msg);
  return Internal(msg);
}

Result<Json> Client::Call(const HttpRequest& req, const FieldSet* fields) {
  FG_ASSIGN_OR_RETURN(HttpResponse resp, transport_->Do(req));
  Status s = StatusFromHttp(resp.status, resp.body);
  if (!s.ok()) return s.Annotate(req.method + " " + req.path);
  if (resp.body.empty()) return Json::object();
  Json j = ParseFields(resp.body, fields);
  if (j.is_discarded()) return Internal(req.method + " " + req.path + ": response is not JSON");
  return j;
}

Result<Json> Client::Get(const Gvr& gvr, const std::string& ns, const std::string& name,
                         const std::string& subresource) {
  HttpRequest req;
  req.path = ObjectPath(gvr, ns, name, subresource);
  return Call(req);
}

Result<ListPage> Client::ListOnePage(const Gvr& gvr, const std::string& ns,
                                     const ListOptions& opts) {
  HttpRequest req;
  req.path = CollectionPath(gvr, ns) +
             QueryString({{"labelSelector", opts.label_selector},
                          {"fieldSelector", opts.field_selector},
                          {"limit", opts.limit > 0 ? std::to_string(opts.limit) : ""},
                          {"continue", opts.continue_token},
                          {"resourceVersion", opts.resource_version},
                          {"resourceVersionMatch", opts.resource_version_match}});
  req.timeout = std::chrono::seconds(60);
  // Listed objects are only read: they keep what ObjectFields selects.
  const auto fields = FieldSet::ListEnvelope(ObjectFields(opts.fields));
  FG_ASSIGN_OR_RETURN(Json j, Call(req, fields.get()));
  ListPage page;
  if (j.is_object()) {
    page.resource_version = ListMeta(j, "resourceVersion");
    page.continue_token = ListMeta(j, "continue");
  }
  if (j.contains("items") && j["items"].is_array()) {
    page.items.reserve(j["items"].size());
    for (auto& item : j["items"]) page.items.push_back(std::move(item));
  }
  return page;
}

// Streams `req`'s answer through `splitter` (ListSplitter or ProtoListSplitter), each item to
// `on_part`, which sets `error` when it refuses one: the answer's HTTP error, the splitter's, or
// `error`; OK once the body is read.
template <typename Splitter>
Status StreamSplit(HttpTransport& transport, const HttpRequest& req, Splitter& splitter,
                   std::stop_token stop, Status& error,
                   const std::function<bool(std::string_view)>& on_part) {
  auto on_chunk = [&](std::string_view chunk) {
    auto r = splitter.Feed(chunk, on_part);
    if (!r.ok()) {
      error = r.status().Annotate("GET " + req.path);
      return false;
    }
    return *r;
  };
  FG_ASSIGN_OR_RETURN(HttpResponse resp, transport.Stream(req, on_chunk, stop));
  // A protobuf list's error answer is a protobuf Status: its bytes would make no message.
  if (resp.body.starts_with(kProtobufMagic)) resp.body.clear();
  if (Status s = StatusFromHttp(resp.status, resp.body); !s.ok()) {
    return s.Annotate(req.method + " " + req.path);
  }
  return error;
}

Result<std::string> Client::ListStream(const Gvr& gvr, const std::string& ns,
                                       const ListOptions& opts,
                                       const std::function<void(Json&& item)>& on_item,
                                       std::stop_token stop) {
  HttpRequest req;
  req.path = CollectionPath(gvr, ns) +
             QueryString({{"labelSelector", opts.label_selector},
                          {"fieldSelector", opts.field_selector},
                          {"resourceVersion", opts.resource_version},
                          {"resourceVersionMatch", opts.resource_version_match}});
  // The whole list in one response: bounded by time, not by a page's size.
  req.timeout = std::chrono::minutes(10);
  if (opts.protobuf_item) return ListStreamProtobuf(std::move(req), opts, on_item, stop);
  const auto fields = ObjectFields(opts.fields);
  ListSplitter splitter;
  Status error;
  FG_RETURN_IF_ERROR(
      StreamSplit(*transport_, req, splitter, stop, error, [&](std::string_view text) {
        if (opts.skip) {
          if (auto id = PeekIdentity(text); id && opts.skip(*id)) return true;
        }
        Json item = ParseFields(text, fields.get());
        if (item.is_discarded() || !item.is_object()) {
          error = Internal("GET " + req.path + ": a list item is not a JSON object");
          return false;
        }
        on_item(std::move(item));
        return true;
      }));
  FG_ASSIGN_OR_RETURN(std::string rest, splitter.Finish());
  const Json list = Json::parse(rest, nullptr, /*allow_exceptions=*/false);
  if (list.is_discarded() || !list.is_object()) {
    return Internal("GET " + req.path + ": the list is not a JSON object");
  }
  return ListMeta(list, "resourceVersion");
}

Result<std::string> Client::ListStreamProtobuf(HttpRequest req, const ListOptions& opts,
                                               const std::function<void(Json&& item)>& on_item,
                                               std::stop_token stop) {
  req.accept = std::string(kProtobufMediaType);
  ProtoListSplitter splitter;
  Status error;
  FG_RETURN_IF_ERROR(
      StreamSplit(*transport_, req, splitter, stop, error, [&](std::string_view bytes) {
        Json item = opts.protobuf_item(bytes);
        if (item.is_discarded() || !item.is_object()) {
          error = Internal("GET " + req.path + ": a list item does not parse");
          return false;
        }
        if (opts.skip && opts.skip(ObjectIdentity{ObjectKey(item), ResourceVersionOf(item)})) {
          return true;
        }
        on_item(std::move(item));
        return true;
      }));
  return splitter.Finish();
}

Result<ListPage> Client::List(const Gvr& gvr, const std::string& ns, ListOptions opts) {
  ListPage all;
  bool first = true;
  for (int pages = 0; pages < 1000000; ++pages) {
    FG_ASSIGN_OR_RETURN(ListPage page, ListOnePage(gvr, ns, opts));
    if (first) all.resource_version = page.resource_version;
    first = false;
    for (auto& item : page.items) all.items.push_back(std::move(item));
    if (page.continue_token.empty()) return all;
    opts.continue_token = page.continue_token;
    opts.resource_version.clear();  // the continue token pins the version
    opts.resource_version_match.clear();
  }
  return Internal("list did not terminate");
}

Result<Json> Client::Create(const Gvr& gvr, const std::string& ns, const Json& obj) {
  HttpRequest req;
  req.method = "POST";
  req.path = CollectionPath(gvr, ns);
  req.body = obj.dump();
  req.content_type = "application/json";
  return Call(req);
}

Result<Json> Client::Update(const Gvr& gvr, const std::string& ns, const Json& obj,
                            const std::string& subresource) {
  const std::string name = NameOf(obj);
  if (name.empty()) return InvalidArgument("update: object has no metadata.name");
  HttpRequest req;
  req.method = "PUT";
  req.path = ObjectPath(gvr, ns, name, subresource);
  req.body = obj.dump();
  req.content_type = "application/json";
  return Call(req);
}

Result<Json> Client::Patch(const Gvr& gvr, const std::string& ns, const std::string& name,
                           PatchType type, const Json& patch, const PatchOptions& opts) {
  HttpRequest req;
  req.method = "PATCH";
  std::vector<std::pair<std::string, std::string>> q;
  switch (type) {
    case PatchType::kMerge:
      req.content_type = "application/merge-patch+json";
      break;
    case PatchType::kJson:
      req.content_type = "application/json-patch+json";
      if (!patch.is_array()) return InvalidArgument("a JSON patch must be an array");
      break;
    case PatchType::kApply:
      // JSON is YAML, so the object goes as is.
      req.content_type = "application/apply-patch+yaml";
      if (opts.field_manager.empty()) return InvalidArgument("apply needs a fieldManager");
      break;
  }
  q.emplace_back("fieldManager", opts.field_manager);
  if (type == PatchType::kApply && opts.force) q.emplace_back("force", "true");
  req.path = ObjectPath(gvr, ns, name, opts.subresource) + QueryString(q);
  req.body = patch.dump();
  return Call(req);
}

Status Client::Delete(const Gvr& gvr, const std::string& ns, const std::string& name,
                      const DeleteOptions& opts) {
  HttpRequest req;
  req.method = "DELETE";
  req.path = ObjectPath(gvr, ns, name);
  Json body = {{"kind", "DeleteOptions"}, {"apiVersion", "v1"}};
  if (!opts.precondition_uid.empty()) body["preconditions"]["uid"] = opts.precondition_uid;
  if (!opts.precondition_resource_version.empty()) {
    body["preconditions"]["resourceVersion"] = opts.precondition_resource_version;
  }
  if (!opts.propagation_policy.empty()) body["propagationPolicy"] = opts.propagation_policy;
  req.body = body.dump();
  req.content_type = "application/json";
  auto r = Call(req);
  return r.status();
}

Result<Json> Client::UpdateWithRetry(const Gvr& gvr, const std::string& ns, const std::string& name,
                                     const std::function<Result<bool>(Json& obj)>& edit,
                                     const std::string& subresource, int max_attempts) {
  Status last = Aborted("no attempt made");
  for (int attempt = 0; attempt < max_attempts; ++attempt) {
    FG_ASSIGN_OR_RETURN(Json obj, Get(gvr, ns, name));
    const std::string rv = ResourceVersionOf(obj);
    FG_ASSIGN_OR_RETURN(bool write, edit(obj));
    if (!write) return obj;
    obj["metadata"]["resourceVersion"] = rv;  // the version we read, whatever edit did
    auto updated = Update(gvr, ns, obj, subresource);
    if (updated.ok()) return updated;
    last = updated.status();
    if (last.code() != StatusCode::kAborted) return last;
  }
  return last.Annotate((subresource.empty() ? "update" : subresource + " update") +
                       " still conflicting after " + std::to_string(max_attempts) + " attempts");
}

Result<Json> Client::UpdateStatusWithRetry(const Gvr& gvr, const std::string& ns,
                                           const std::string& name,
                                           const std::function<Status(Json& obj)>& recompute,
                                           int max_attempts) {
  return UpdateWithRetry(
      gvr, ns, name,
      [&](Json& obj) -> Result<bool> {
        FG_RETURN_IF_ERROR(recompute(obj));
        return true;
      },
      "status", max_attempts);
}

Result<Json> Client::ReviewToken(const std::string& token,
                                 const std::vector<std::string>& audiences) {
  Json review = {{"apiVersion", "authentication.k8s.io/v1"},
                 {"kind", "TokenReview"},
                 {"spec", {{"token", token}}}};
  if (!audiences.empty()) review["spec"]["audiences"] = audiences;
  HttpRequest req;
  req.method = "POST";
  req.path = CollectionPath({"authentication.k8s.io", "v1", "tokenreviews"}, "");
  req.body = review.dump();
  req.content_type = "application/json";
  req.timeout = std::chrono::seconds(10);
  FG_ASSIGN_OR_RETURN(Json out, Call(req));
  if (!out.is_object() || !out.contains("status") || !out["status"].is_object()) {
    return Internal("TokenReview response has no status object");
  }
  return out["status"];
}

Status Client::Watch(const Gvr& gvr, const std::string& ns, const WatchOptions& opts,
                     const std::function<bool(Json& event)>& on_event, std::stop_token stop) {
  HttpRequest req;
  req.path = CollectionPath(gvr, ns) +
             QueryString({{"watch", "1"},
                          {"resourceVersion", opts.resource_version},
                          {"allowWatchBookmarks", opts.allow_bookmarks ? "true" : ""},
                          {"timeoutSeconds",
                           opts.timeout_seconds > 0 ? std::to_string(opts.timeout_seconds) : ""},
                          {"labelSelector", opts.label_selector},
                          {"fieldSelector", opts.field_selector}});
  req.timeout = opts.timeout_seconds > 0 ? std::chrono::seconds(opts.timeout_seconds + 60)
                                         : std::chrono::seconds(0);
  LineSplitter splitter;
  Status parse_error;
  bool stopped_by_handler = false;
  const auto fields = FieldSet::EventEnvelope(ObjectFields(opts.fields));
  auto on_line = [&](std::string_view line) {
    Json ev = ParseFields(line, fields.get());
    if (ev.is_discarded() || !ev.is_object()) {
      parse_error = Internal("watch event is not a JSON object");
      return false;
    }
    if (!on_event(ev)) {
      stopped_by_handler = true;
      return false;
    }
    return true;
  };
  Status split_error;
  auto on_chunk = [&](std::string_view chunk) {
    auto r = splitter.Feed(chunk, on_line);
    if (!r.ok()) {
      split_error = r.status();
      return false;
    }
    return *r;
  };
  FG_ASSIGN_OR_RETURN(HttpResponse resp, transport_->Stream(req, on_chunk, std::move(stop)));
  FG_RETURN_IF_ERROR(split_error);
  FG_RETURN_IF_ERROR(parse_error);
  FG_RETURN_IF_ERROR(StatusFromHttp(resp.status, resp.body).Annotate("watch " + req.path));
  if (!stopped_by_handler && !splitter.partial().empty()) {
    // A final event without its newline.
    std::string tail = splitter.partial();
    splitter.Clear();
    on_line(tail);
    FG_RETURN_IF_ERROR(parse_error);
  }
  return OkStatus();
}

}  // namespace feedguard::kube
