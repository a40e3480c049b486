#include "controller/kube/client.h"

#include <gtest/gtest.h>

#include "controller/kube/fake_transport.h"

namespace feedguard::kube {
namespace {

std::string StatusBody(int code, const std::string& reason, const std::string& message) {
  return Json{{"kind", "Status"}, {"apiVersion", "v1"}, {"status", "Failure"},
              {"code", code},     {"reason", reason},   {"message", message}}
      .dump();
}

TEST(ResourceTest, Paths) {
  EXPECT_EQ(CollectionPath(PodsGvr(), "ns1"), "/api/v1/namespaces/ns1/pods");
  EXPECT_EQ(CollectionPath(NodesGvr(), ""), "/api/v1/nodes");
  EXPECT_EQ(ObjectPath(LeasesGvr(), "kube-system", "fg"),
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/fg");
  EXPECT_EQ(ObjectPath({"feedguard.io", "v1alpha1", "fencepolicies"}, "", "p", "status"),
            "/apis/feedguard.io/v1alpha1/fencepolicies/p/status");
  EXPECT_EQ(QueryString({{"fieldSelector", "spec.nodeName=a b"}, {"limit", ""}}),
            "?fieldSelector=spec.nodeName%3Da%20b");
}

TEST(StatusFromHttpTest, MapsCodesWithServerMessage) {
  auto s = StatusFromHttp(404, StatusBody(404, "NotFound", "configmaps \"x\" not found"));
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "configmaps \"x\" not found");
  EXPECT_EQ(StatusFromHttp(409, StatusBody(409, "Conflict", "c")).code(), StatusCode::kAborted);
  EXPECT_EQ(StatusFromHttp(409, StatusBody(409, "AlreadyExists", "c")).code(),
            StatusCode::kAlreadyExists);
  EXPECT_TRUE(IsExpired(StatusFromHttp(410, StatusBody(410, "Expired", "too old"))));
  EXPECT_FALSE(IsExpired(StatusFromHttp(409, "")));
  auto inv = StatusFromHttp(422, StatusBody(422, "Invalid", "spec.x: Invalid value"));
  EXPECT_EQ(inv.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(inv.message(), "spec.x: Invalid value");
  EXPECT_EQ(StatusFromHttp(401, "").code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(StatusFromHttp(403, "").code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(StatusFromHttp(503, "oops").code(), StatusCode::kUnavailable);
  EXPECT_TRUE(StatusFromHttp(201, "").ok());
}

TEST(ClientTest, GetNotFoundCarriesMessage) {
  auto t = std::make_shared<FakeTransport>([](const HttpRequest&) {
    return FakeReply{HttpResponse{404, StatusBody(404, "NotFound", "nope")}};
  });
  Client c(t);
  auto r = c.Get(ConfigMapsGvr(), "default", "x");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("nope"), std::string::npos);
  EXPECT_EQ(t->requests()[0].path, "/api/v1/namespaces/default/configmaps/x");
}

TEST(ClientTest, ListFollowsContinueTokens) {
  auto t = std::make_shared<FakeTransport>([](const HttpRequest& r) {
    Json page;
    if (r.path.find("continue=") == std::string::npos) {
      EXPECT_NE(r.path.find("labelSelector=app%3Dx"), std::string::npos);
      EXPECT_NE(r.path.find("limit=2"), std::string::npos);
      page = {{"metadata", {{"resourceVersion", "7"}, {"continue", "tok1"}}},
              {"items", {{{"metadata", {{"name", "a"}}}}, {{"metadata", {{"name", "b"}}}}}}};
    } else {
      EXPECT_NE(r.path.find("continue=tok1"), std::string::npos);
      page = {{"metadata", {{"resourceVersion", "8"}}},
              {"items", {{{"metadata", {{"name", "c"}}}}}}};
    }
    return FakeReply{HttpResponse{200, page.dump()}};
  });
  Client c(t);
  ListOptions o;
  o.label_selector = "app=x";
  o.limit = 2;
  auto r = c.List(ConfigMapsGvr(), "ns", o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->items.size(), 3u);
  EXPECT_EQ(NameOf(r->items[2]), "c");
  EXPECT_EQ(r->resource_version, "7");
  EXPECT_EQ(t->requests().size(), 2u);
}

TEST(ClientTest, PatchKindsAndDeletePreconditions) {
  auto t = std::make_shared<FakeTransport>([](const HttpRequest&) {
    return FakeReply{HttpResponse{200, "{}"}};
  });
  Client c(t);
  ASSERT_TRUE(c.Patch(ConfigMapsGvr(), "n", "a", PatchType::kMerge, {{"data", {{"k", "v"}}}}).ok());
  ASSERT_TRUE(c.Patch(ConfigMapsGvr(), "n", "a", PatchType::kJson,
                      Json::array({{{"op", "remove"}, {"path", "/data/k"}}}))
                  .ok());
  EXPECT_FALSE(c.Patch(ConfigMapsGvr(), "n", "a", PatchType::kJson, Json::object()).ok());
  EXPECT_FALSE(c.Patch(ConfigMapsGvr(), "n", "a", PatchType::kApply, Json::object()).ok());
  PatchOptions po;
  po.field_manager = "feedguard";
  po.force = true;
  po.subresource = "status";
  ASSERT_TRUE(c.Patch(ConfigMapsGvr(), "n", "a", PatchType::kApply, {{"status", {}}}, po).ok());
  DeleteOptions d;
  d.precondition_uid = "u1";
  d.precondition_resource_version = "9";
  ASSERT_TRUE(c.Delete(ConfigMapsGvr(), "n", "a", d).ok());
  auto reqs = t->requests();
  ASSERT_EQ(reqs.size(), 4u);
  EXPECT_EQ(reqs[0].content_type, "application/merge-patch+json");
  EXPECT_EQ(reqs[1].content_type, "application/json-patch+json");
  EXPECT_EQ(reqs[2].content_type, "application/apply-patch+yaml");
  EXPECT_EQ(reqs[2].path,
            "/api/v1/namespaces/n/configmaps/a/status?fieldManager=feedguard&force=true");
  EXPECT_EQ(reqs[3].method, "DELETE");
  Json body = Json::parse(reqs[3].body);
  EXPECT_EQ(body["preconditions"]["uid"], "u1");
  EXPECT_EQ(body["preconditions"]["resourceVersion"], "9");
}

// A fake object whose resourceVersion moves under us: the first PUT conflicts.
TEST(ClientTest, UpdateStatusRetriesOnConflict) {
  int rv = 1;
  int puts = 0;
  auto t = std::make_shared<FakeTransport>([&](const HttpRequest& r) {
    if (r.method == "GET") {
      Json obj = {{"metadata", {{"name", "p"}, {"resourceVersion", std::to_string(rv)}}},
                  {"status", {{"n", rv}}}};
      return FakeReply{HttpResponse{200, obj.dump()}};
    }
    EXPECT_EQ(r.method, "PUT");
    EXPECT_EQ(r.path, "/apis/feedguard.io/v1alpha1/fencepolicies/p/status");
    ++puts;
    Json body = Json::parse(r.body);
    if (body["metadata"]["resourceVersion"] != std::to_string(rv) || puts == 1) {
      ++rv;  // somebody else wrote in between
      return FakeReply{HttpResponse{409, StatusBody(409, "Conflict", "modified")}};
    }
    ++rv;
    body["metadata"]["resourceVersion"] = std::to_string(rv);
    return FakeReply{HttpResponse{200, body.dump()}};
  });
  Client c(t);
  int recomputes = 0;
  auto r = c.UpdateStatusWithRetry({"feedguard.io", "v1alpha1", "fencepolicies"}, "", "p",
                                   [&](Json& obj) {
                                     ++recomputes;
                                     obj["status"]["seen"] = obj["status"]["n"];
                                     return OkStatus();
                                   });
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(recomputes, 2);
  EXPECT_EQ(puts, 2);
  EXPECT_EQ((*r)["status"]["seen"], 2);  // recomputed from the re-read object
}

TEST(ClientTest, UpdateStatusGivesUpAfterBoundedAttempts) {
  int puts = 0;
  auto t = std::make_shared<FakeTransport>([&](const HttpRequest& r) {
    if (r.method == "GET") {
      return FakeReply{HttpResponse{200, R"({"metadata":{"name":"p","resourceVersion":"1"}})"}};
    }
    ++puts;
    return FakeReply{HttpResponse{409, StatusBody(409, "Conflict", "again")}};
  });
  Client c(t);
  auto r = c.UpdateStatusWithRetry(
      ConfigMapsGvr(), "n", "p", [](Json&) { return OkStatus(); }, 3);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kAborted);
  EXPECT_EQ(puts, 3);
}

TEST(ClientTest, UpdateWithRetryWritesTheObjectOnlyWhenTheEditChangedIt) {
  std::vector<std::string> requests;
  auto t = std::make_shared<FakeTransport>([&](const HttpRequest& r) {
    requests.push_back(r.method + " " + r.path);
    if (r.method == "GET") {
      return FakeReply{HttpResponse{200, R"({"metadata":{"name":"p","resourceVersion":"4"}})"}};
    }
    return FakeReply{HttpResponse{200, r.body}};
  });
  Client c(t);
  const Gvr gvr{"feedguard.io", "v1alpha1", "fencepolicies"};
  auto unchanged = c.UpdateWithRetry(gvr, "", "p", [](Json&) -> Result<bool> { return false; });
  ASSERT_TRUE(unchanged.ok()) << unchanged.status().ToString();
  EXPECT_EQ(requests,
            (std::vector<std::string>{"GET /apis/feedguard.io/v1alpha1/fencepolicies/p"}));
  requests.clear();
  auto changed = c.UpdateWithRetry(gvr, "", "p", [](Json& obj) -> Result<bool> {
    obj["metadata"]["finalizers"] = {"feedguard.io/revert"};
    return true;
  });
  ASSERT_TRUE(changed.ok()) << changed.status().ToString();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[1], "PUT /apis/feedguard.io/v1alpha1/fencepolicies/p");  // no subresource
  EXPECT_EQ((*changed)["metadata"]["resourceVersion"], "4");
  auto refused =
      c.UpdateWithRetry(gvr, "", "p", [](Json&) -> Result<bool> { return InvalidArgument("no"); });
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
}

TEST(ClientTest, ListsAndWatchesLeaveOutManagedFieldsButGetsKeepThem) {
  const Json obj = {{"metadata",
                     {{"name", "a"},
                      {"resourceVersion", "3"},
                      {"managedFields", {{{"manager", "kubelet"}, {"fieldsV1", {{"f:x", {}}}}}}},
                      {"labels", {{"managedFields", "a label value"}}}}},
                    {"spec", {{"nodeName", "n"}}}};
  auto t = std::make_shared<FakeTransport>([&](const HttpRequest& r) {
    if (r.path.find("watch=1") != std::string::npos) {
      return FakeReply{HttpResponse{200, ""},
                       {Json{{"type", "ADDED"}, {"object", obj}}.dump() + "\n"}};
    }
    if (r.path.find("limit=") != std::string::npos) {
      return FakeReply{HttpResponse{
          200, Json{{"metadata", {{"resourceVersion", "3"}}}, {"items", {obj}}}.dump()}};
    }
    return FakeReply{HttpResponse{200, obj.dump()}};
  });
  Client c(t);
  ListOptions o;
  o.limit = 10;
  auto page = c.ListOnePage(ConfigMapsGvr(), "ns", o);
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  ASSERT_EQ(page->items.size(), 1u);
  Json expected = obj;
  expected["metadata"].erase("managedFields");
  EXPECT_EQ(page->items[0], expected);  // everything else kept, a label of that name too
  std::vector<Json> seen;
  Status s = c.Watch(
      ConfigMapsGvr(), "ns", WatchOptions{},
      [&](Json& ev) {
        seen.push_back(ev["object"]);
        return false;
      },
      std::stop_token{});
  ASSERT_EQ(seen.size(), 1u) << s.ToString();
  EXPECT_EQ(seen[0], expected);
  // A GET may be written back (finalizer edits): nothing is left out.
  auto got = c.Get(ConfigMapsGvr(), "ns", "a");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, obj);
}

TEST(ClientTest, WatchDecodesEventsSplitAnywhere) {
  std::string stream;
  for (int i = 0; i < 50; ++i) {
    stream +=
        Json{{"type", "ADDED"},
             {"object",
              {{"metadata",
                {{"name", "o" + std::to_string(i)}, {"resourceVersion", std::to_string(i + 1)}}}}}}
            .dump() +
        "\n";
  }
  for (uint32_t seed = 1; seed < 30; ++seed) {
    auto t = std::make_shared<FakeTransport>([&](const HttpRequest& r) {
      EXPECT_NE(r.path.find("watch=1"), std::string::npos);
      EXPECT_NE(r.path.find("allowWatchBookmarks=true"), std::string::npos);
      EXPECT_NE(r.path.find("resourceVersion=5"), std::string::npos);
      EXPECT_NE(r.path.find("timeoutSeconds=321"), std::string::npos);
      return FakeReply{HttpResponse{200, ""}, RandomChunks(stream, seed, 1 + seed * 7)};
    });
    Client c(t);
    std::vector<std::string> names;
    WatchOptions w;
    w.resource_version = "5";
    w.timeout_seconds = 321;
    Status s = c.Watch(
        ConfigMapsGvr(), "", w,
        [&](Json& ev) {
          names.push_back(NameOf(ev["object"]));
          return true;
        },
        std::stop_token{});
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_EQ(names.size(), 50u) << "seed " << seed;
    EXPECT_EQ(names[49], "o49");
  }
}

TEST(ClientTest, WatchRefusedWith410IsExpired) {
  auto t = std::make_shared<FakeTransport>([](const HttpRequest&) {
    return FakeReply{HttpResponse{410, StatusBody(410, "Expired", "too old resource version")}};
  });
  Client c(t);
  Status s = c.Watch(
      ConfigMapsGvr(), "", {}, [](Json&) { return true; }, std::stop_token{});
  EXPECT_TRUE(IsExpired(s)) << s.ToString();
}

}  // namespace
}  // namespace feedguard::kube
