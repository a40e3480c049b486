#include "controller/kube/reflector.h"

#include <gtest/gtest.h>

#include <deque>

#include "controller/kube/fake_transport.h"

namespace feedguard::kube {
namespace {

Json Cm(const std::string& name, int rv, const std::string& v = "") {
  return {
      {"metadata", {{"namespace", "ns"}, {"name", name}, {"resourceVersion", std::to_string(rv)}}},
      {"data", {{"v", v}}}};
}
std::string Ev(const std::string& type, const Json& obj) {
  return Json{{"type", type}, {"object", obj}}.dump() + "\n";
}
std::string ListBody(int rv, std::vector<Json> items) {
  return Json{{"metadata", {{"resourceVersion", std::to_string(rv)}}}, {"items", items}}.dump();
}
std::string Gone() {
  return Json{{"kind", "Status"}, {"code", 410}, {"reason", "Expired"}, {"message", "too old"}}
      .dump();
}

// A scripted API server: each request pops the next step, which checks the request.
struct Step {
  std::string expect_substr;  // must occur in the path
  FakeReply reply;
  std::function<void()> side_effect;
};

struct Recorder {
  std::vector<std::string> log;
  int synced = 0;
  ResourceEventHandlers Handlers() {
    return {[this](const ObjectPtr& o) {
              log.push_back("add " + NameOf(*o) + "@" + ResourceVersionOf(*o));
            },
            [this](const ObjectPtr& a, const ObjectPtr& b) {
              // `a` is null when the store keeps versions only.
              log.push_back("update " + NameOf(*b) + " " + (a ? ResourceVersionOf(*a) : "?") +
                            "->" + ResourceVersionOf(*b));
            },
            [this](const ObjectPtr& o) { log.push_back("delete " + NameOf(*o)); },
            [this] { ++synced; }};
  }
};

class ReflectorTest : public ::testing::Test {
 protected:
  std::shared_ptr<FakeTransport> Server() {
    return std::make_shared<FakeTransport>([this](const HttpRequest& r) {
      paths_.push_back(r.path);
      if (steps_.empty()) {
        stop_->request_stop();
        return FakeReply{HttpResponse{200, ""}};
      }
      Step s = std::move(steps_.front());
      steps_.pop_front();
      EXPECT_NE(r.path.find(s.expect_substr), std::string::npos)
          << "request " << r.path << " lacks " << s.expect_substr;
      if (s.side_effect) s.side_effect();
      return s.reply;
    });
  }
  std::unique_ptr<Reflector> Make(ReflectorOptions o = {}) {
    o.gvr = ConfigMapsGvr();
    o.ns = "ns";
    o.seed = 99;
    return std::make_unique<Reflector>(std::make_shared<Client>(Server()), store_, o,
                                       rec_.Handlers(), clock_, sleeper_);
  }
  // A fresh script, recorder, store and stop source (for a test that runs several scenarios).
  void Reset() {
    steps_.clear();
    paths_.clear();
    rec_ = Recorder();
    store_ = std::make_shared<Store>();
    stop_ = std::make_unique<std::stop_source>();
  }
  std::deque<Step> steps_;
  std::vector<std::string> paths_;
  std::unique_ptr<std::stop_source> stop_ = std::make_unique<std::stop_source>();
  Recorder rec_;
  StorePtr store_ = std::make_shared<Store>();
  std::shared_ptr<ManualTimeSource> clock_ = std::make_shared<ManualTimeSource>();
  std::shared_ptr<FakeSleeper> sleeper_ = std::make_shared<FakeSleeper>(clock_);
};

TEST_F(ReflectorTest, BookmarkRvThen410RelistEmitsOnlyTheDifference) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE("chunk seed " + std::to_string(seed));
    Reset();
    const std::string watch1 = Ev("ADDED", Cm("c", 11)) + Ev("MODIFIED", Cm("a", 12, "x")) +
                               Ev("MODIFIED", Cm("a", 12, "x")) +  // duplicate: ignored
                               Ev("BOOKMARK", {{"metadata", {{"resourceVersion", "15"}}}});
    steps_.push_back({"limit=500", {HttpResponse{200, ListBody(10, {Cm("a", 5), Cm("b", 6)})}}});
    steps_.push_back(
        {"resourceVersion=10", {HttpResponse{200, ""}, RandomChunks(watch1, seed, 9)}});
    steps_.push_back({"resourceVersion=15",
                      {HttpResponse{200, ""},
                       {Json{{"type", "ERROR"}, {"object", Json::parse(Gone())}}.dump() + "\n"}}});
    steps_.push_back({"resourceVersion=15", {HttpResponse{410, Gone()}}});  // relist at last RV
    steps_.push_back(
        {"limit=500",
         {HttpResponse{200, ListBody(20, {Cm("a", 12, "x"), Cm("c", 16), Cm("d", 17)})}}});
    steps_.push_back({"resourceVersion=20", {HttpResponse{200, ""}, {Ev("DELETED", Cm("d", 21))}}});
    auto r = Make();
    r->Run(stop_->get_token());

    EXPECT_EQ(rec_.log, (std::vector<std::string>{"add a@5", "add b@6",          // first list
                                                  "add c@11", "update a 5->12",  // watch
                                                  "update c 11->16", "add d@17",
                                                  "delete b",  // relist difference
                                                  "delete d"}));
    EXPECT_EQ(rec_.synced, 1);
    EXPECT_EQ(store_->Keys().size(), 2u);
    ASSERT_NE(store_->Get("ns/c"), nullptr);
    EXPECT_EQ(r->LastResourceVersion(), "21");
    // The relist at RV 15 was refused; the next list carried no resourceVersion.
    ASSERT_GE(paths_.size(), 5u);
    EXPECT_EQ(paths_[4].find("resourceVersion="), std::string::npos) << paths_[4];
    EXPECT_NE(paths_[1].find("watch=1"), std::string::npos);
    EXPECT_NE(paths_[1].find("allowWatchBookmarks=true"), std::string::npos);
    EXPECT_EQ(r->stats().expired_relists, 1);
    EXPECT_EQ(r->stats().duplicates_skipped, 1);
    EXPECT_EQ(r->stats().bookmarks, 1);
    // Normal watch ends and 410 re-open without sleeping.
    EXPECT_TRUE(sleeper_->sleeps().empty());
  }
}

TEST_F(ReflectorTest, DisconnectsBackOffAndRewatchFromLastRv) {
  steps_.push_back({"limit=500", {HttpResponse{200, ListBody(10, {Cm("a", 5)})}}});
  for (int i = 0; i < 4; ++i) {
    steps_.push_back({"resourceVersion=10", {Status(Unavailable("connection refused"))}});
  }
  // A connection that drops mid-stream after one event: re-watch from that event's RV.
  steps_.push_back(
      {"resourceVersion=10", {Status(Unavailable("reset")), {Ev("ADDED", Cm("b", 11))}}});
  steps_.push_back({"resourceVersion=11", {Status(Unavailable("reset"))}});
  auto r = Make();
  r->Run(stop_->get_token());
  auto sleeps = sleeper_->sleeps();
  ASSERT_EQ(sleeps.size(), 6u);
  const int64_t bases[] = {800, 1600, 3200, 6400, 800, 1600};  // reset after an event
  for (size_t i = 0; i < sleeps.size(); ++i) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(sleeps[i]).count();
    EXPECT_GE(ms, bases[i]) << i;
    EXPECT_LT(ms, 2 * bases[i]) << i;
  }
  EXPECT_EQ(rec_.log, (std::vector<std::string>{"add a@5", "add b@11"}));
  EXPECT_EQ(r->stats().lists, 1);  // no relist for plain disconnects
}

TEST_F(ReflectorTest, BackoffCapsAtThirtySeconds) {
  steps_.push_back({"limit=500", {HttpResponse{200, ListBody(1, {})}}});
  for (int i = 0; i < 10; ++i) steps_.push_back({"watch=1", {HttpResponse{500, "{}"}}});
  auto r = Make();
  r->Run(stop_->get_token());
  auto sleeps = sleeper_->sleeps();
  ASSERT_EQ(sleeps.size(), 10u);
  for (size_t i = 6; i < sleeps.size(); ++i) {
    EXPECT_GE(sleeps[i], std::chrono::seconds(30));
    EXPECT_LT(sleeps[i], std::chrono::seconds(60));
  }
}

TEST_F(ReflectorTest, PaginatedListAndTransformKeepsIdentity) {
  steps_.push_back(
      {"limit=2",
       {HttpResponse{200, Json{{"metadata", {{"resourceVersion", "30"}, {"continue", "k"}}},
                               {"items", {Cm("a", 1, "big"), Cm("b", 2, "big")}}}
                              .dump()}}});
  steps_.push_back({"continue=k", {HttpResponse{200, ListBody(31, {Cm("c", 3, "big")})}}});
  steps_.push_back({"resourceVersion=30", {HttpResponse{200, ""}}});
  ReflectorOptions o;
  o.page_size = 2;
  o.transform = [](Json) { return Json{{"kept", true}}; };
  auto r = Make(o);
  r->Run(stop_->get_token());
  ASSERT_EQ(store_->size(), 3u);
  auto c = store_->Get("ns/c");
  ASSERT_NE(c, nullptr);
  EXPECT_FALSE(c->contains("data"));
  EXPECT_TRUE((*c)["kept"].get<bool>());
  EXPECT_EQ(ResourceVersionOf(*c), "3");
  EXPECT_EQ(r->LastResourceVersion(), "30");  // the first page's version
  EXPECT_TRUE(r->HasSynced());
}

TEST_F(ReflectorTest, ExpiredAgainAfterRelistAtOldRvListsFromScratch) {
  steps_.push_back({"limit=500", {HttpResponse{200, ListBody(10, {Cm("a", 5)})}}});
  steps_.push_back({"resourceVersion=10", {HttpResponse{410, Gone()}}});
  steps_.push_back({"resourceVersion=10", {HttpResponse{200, ListBody(10, {Cm("a", 5)})}}});
  steps_.push_back({"resourceVersion=10", {HttpResponse{410, Gone()}}});  // still too old
  steps_.push_back({"limit=500", {HttpResponse{200, ListBody(40, {Cm("a", 33)})}}});
  steps_.push_back({"resourceVersion=40", {HttpResponse{410, Gone()}}});  // and again
  steps_.push_back({"resourceVersion=0", {HttpResponse{200, ListBody(45, {Cm("a", 33)})}}});
  steps_.push_back({"resourceVersion=45", {HttpResponse{200, ""}, {Ev("ADDED", Cm("b", 46))}}});
  auto r = Make();
  r->Run(stop_->get_token());
  ASSERT_GE(paths_.size(), 6u);
  EXPECT_EQ(paths_[2].find("watch=1"), std::string::npos);
  EXPECT_EQ(paths_[4].find("resourceVersion="), std::string::npos) << paths_[4];
  EXPECT_EQ(rec_.log, (std::vector<std::string>{"add a@5", "update a 5->33", "add b@46"}));
  EXPECT_EQ(r->stats().expired_relists, 3);
  EXPECT_EQ(sleeper_->sleeps().size(), 1u);  // the third 410 in a row backs off
}

TEST_F(ReflectorTest, SyncedOnlyAfterHandlersSawTheWholeInitialList) {
  // A controller that starts distributing on HasSynced() must not miss a listed object: while
  // the handlers still receive the initial list, the reflector is not synced.
  steps_.push_back({"limit=500", {HttpResponse{200, ListBody(10, {Cm("a", 5), Cm("b", 6)})}}});
  Reflector* self = nullptr;
  std::vector<bool> synced_during_adds;
  ResourceEventHandlers h;
  h.on_add = [&](const ObjectPtr&) { synced_during_adds.push_back(self->HasSynced()); };
  bool synced_in_callback = false;
  h.on_synced = [&] { synced_in_callback = self->HasSynced(); };
  ReflectorOptions o;
  o.gvr = ConfigMapsGvr();
  o.ns = "ns";
  o.seed = 99;
  Reflector r(std::make_shared<Client>(Server()), store_, o, h, clock_, sleeper_);
  self = &r;
  r.Run(stop_->get_token());
  EXPECT_EQ(synced_during_adds, (std::vector<bool>{false, false}));
  EXPECT_TRUE(synced_in_callback);
  EXPECT_TRUE(r.HasSynced());
}

// With a FieldSet the objects arrive trimmed, and an in-stream 410 (a Status, not an object of
// the watched kind) still reads as 410 and relists. (Trimmed to the objects' fields it read as
// "watch error 0" and the informer re-watched the compacted version forever: bench/scale.)
TEST_F(ReflectorTest, TrimmedObjectsAndAnInStream410StillRelists) {
  Json status = Json::parse(Gone());
  status["apiVersion"] = "v1";
  status["status"] = "Failure";
  steps_.push_back({"limit=500", {HttpResponse{200, ListBody(10, {Cm("a", 5, "big")})}}});
  steps_.push_back({"resourceVersion=10",
                    {HttpResponse{200, ""},
                     {Ev("MODIFIED", Cm("a", 11, "bigger")) +
                      Json{{"object", status}, {"type", "ERROR"}}.dump() + "\n"}}});
  // The next request is a list (at the last version), not a re-watch: the API server answers a
  // re-watch of a compacted version with the same in-stream 410 again.
  steps_.push_back({"limit=500", {HttpResponse{200, ListBody(20, {Cm("a", 12, "x")})}}});
  ReflectorOptions o;
  o.fields = FieldSet::Only({"metadata.name", "metadata.namespace", "metadata.resourceVersion"});
  auto r = Make(o);
  r->Run(stop_->get_token());
  EXPECT_EQ(rec_.log, (std::vector<std::string>{"add a@5", "update a 5->11", "update a 11->12"}));
  EXPECT_EQ(r->stats().expired_relists, 1);
  ASSERT_NE(store_->Get("ns/a"), nullptr);
  EXPECT_FALSE(store_->Get("ns/a")->contains("data")) << store_->Get("ns/a")->dump();
}

// page_size 0: one unpaginated list, split into items as its bytes arrive (any chunking), with
// the same difference, delete and resourceVersion bookkeeping as pages; a 410 relists the same
// way.
TEST_F(ReflectorTest, StreamedListDeliversItemByItemAndRelistsTheSameWay) {
  for (uint32_t seed = 1; seed <= 10; ++seed) {
    SCOPED_TRACE("chunk seed " + std::to_string(seed));
    Reset();
    steps_.push_back(
        {"/configmaps",
         {HttpResponse{200, ""}, RandomChunks(ListBody(10, {Cm("a", 5), Cm("b", 6)}), seed, 17)}});
    steps_.push_back({"resourceVersion=10",
                      {HttpResponse{200, ""},
                       {Ev("ADDED", Cm("c", 11)) +
                        Json{{"type", "ERROR"}, {"object", Json::parse(Gone())}}.dump() + "\n"}}});
    steps_.push_back({"resourceVersion=11", {HttpResponse{410, Gone()}}});  // relist at last RV
    steps_.push_back(
        {"/configmaps",
         {HttpResponse{200, ""},
          RandomChunks(ListBody(20, {Cm("a", 12, "x"), Cm("c", 11), Cm("d", 17)}), seed, 23)}});
    steps_.push_back({"resourceVersion=20", {HttpResponse{200, ""}, {Ev("DELETED", Cm("d", 21))}}});
    ReflectorOptions o;
    o.page_size = 0;
    auto r = Make(o);
    r->Run(stop_->get_token());
    EXPECT_EQ(rec_.log,
              (std::vector<std::string>{"add a@5", "add b@6", "add c@11", "update a 5->12",
                                        "add d@17", "delete b", "delete d"}));
    EXPECT_EQ(rec_.synced, 1);
    EXPECT_EQ(r->LastResourceVersion(), "21");
    EXPECT_EQ(r->stats().expired_relists, 1);
    // c@11, unchanged in the relist, was marked seen without being parsed.
    EXPECT_EQ(r->stats().unchanged_unparsed, 1);
    ASSERT_GE(paths_.size(), 4u);
    for (size_t i : {size_t{0}, size_t{2}, size_t{3}}) {  // the lists: no limit, no watch
      EXPECT_EQ(paths_[i].find("limit="), std::string::npos) << paths_[i];
      EXPECT_EQ(paths_[i].find("watch=1"), std::string::npos) << paths_[i];
    }
    EXPECT_EQ(paths_[3].find("resourceVersion="), std::string::npos) << paths_[3];
  }
}

// A streamed list cut short (connection lost mid-body) delivers what arrived, is an error, and
// the next list completes the picture: nothing is deleted on the strength of a partial list.
TEST_F(ReflectorTest, StreamedListCutShortDeletesNothing) {
  const std::string body = ListBody(10, {Cm("a", 5), Cm("b", 6), Cm("c", 7)});
  steps_.push_back({"/configmaps",
                    {HttpResponse{200, ""}, {ListBody(9, {Cm("a", 1), Cm("b", 2), Cm("c", 3)})}}});
  steps_.push_back({"resourceVersion=9", {HttpResponse{410, Gone()}}});
  steps_.push_back(
      {"/configmaps", {Unavailable("connection reset"), {body.substr(0, body.find("\"b\""))}}});
  steps_.push_back({"/configmaps", {HttpResponse{200, ""}, {body}}});
  ReflectorOptions o;
  o.page_size = 0;
  auto r = Make(o);
  r->Run(stop_->get_token());
  EXPECT_EQ(rec_.log, (std::vector<std::string>{"add a@1", "add b@2", "add c@3", "update a 1->5",
                                                "update b 2->6", "update c 3->7"}));
  EXPECT_EQ(store_->Keys().size(), 3u);
}

TEST_F(ReflectorTest, MalformedEventsAndThrowingHandlersNeverEscape) {
  steps_.push_back({"limit=500", {HttpResponse{200, ListBody(10, {Cm("a", 5)})}}});
  // Wrong JSON types in every place the reflector reads: the watch is re-opened, no throw.
  steps_.push_back({"resourceVersion=10",
                    {HttpResponse{200, ""},
                     {R"({"type":7,"object":{}})"
                      "\n"}}});
  steps_.push_back({"resourceVersion=10",
                    {HttpResponse{200, ""},
                     {R"({"type":"ERROR","object":{"code":"410","message":5}})"
                      "\n"}}});
  steps_.push_back({"resourceVersion=10",
                    {HttpResponse{200, ""},
                     {R"({"type":"ADDED","object":"not an object"})"
                      "\n"}}});
  steps_.push_back(
      {"resourceVersion=10",
       {HttpResponse{200, ""},
        {R"({"type":"ADDED","object":{"metadata":{"name":"bad","namespace":"ns","resourceVersion":"11"},"data":5}})"
         "\n"}}});
  steps_.push_back({"resourceVersion=11", {HttpResponse{200, ""}, {Ev("ADDED", Cm("c", 12))}}});
  ResourceEventHandlers h;
  std::vector<std::string> added;
  h.on_add = [&](const ObjectPtr& o) {
    if (NameOf(*o) == "bad") (void)o->at("data");  // gone with the transform: throws
    added.push_back(NameOf(*o));
  };
  ReflectorOptions o;
  o.gvr = ConfigMapsGvr();
  o.ns = "ns";
  o.seed = 99;
  // A transform that throws on what it does not expect.
  o.transform = [](Json j) {
    if (j["data"].is_number()) throw std::runtime_error("transform: unexpected data");
    return j;
  };
  Reflector r(std::make_shared<Client>(Server()), store_, o, h, clock_, sleeper_);
  EXPECT_NO_THROW(r.Run(stop_->get_token()));
  EXPECT_EQ(added, (std::vector<std::string>{"a", "c"}));  // "bad" skipped, the rest goes on
  ASSERT_NE(store_->Get("ns/bad"), nullptr);               // kept by its identity only
  EXPECT_FALSE(store_->Get("ns/bad")->contains("data"));
  EXPECT_EQ(r.LastResourceVersion(), "12");
}

TEST_F(ReflectorTest, ExpiredContinueTokenRestartsTheListAtOnceWithoutRedelivering) {
  // Page 1 of the first list, then the continue token is compacted away: the list starts again
  // from scratch with no sleep; page 1's objects, unchanged, are not delivered twice; an object
  // of the old store absent from the complete list is deleted once, at the end.
  store_->Put(std::make_shared<const Json>(Cm("old", 1)));
  steps_.push_back(
      {"limit=2",
       {HttpResponse{200, Json{{"metadata", {{"resourceVersion", "30"}, {"continue", "k1"}}},
                               {"items", {Cm("a", 3), Cm("b", 4)}}}
                              .dump()}}});
  steps_.push_back({"continue=k1", {HttpResponse{410, Gone()}}});
  steps_.push_back(
      {"limit=2",
       {HttpResponse{200, Json{{"metadata", {{"resourceVersion", "40"}, {"continue", "k2"}}},
                               {"items", {Cm("a", 3), Cm("b", 35)}}}
                              .dump()}}});
  steps_.push_back({"continue=k2", {HttpResponse{200, ListBody(41, {Cm("c", 36)})}}});
  steps_.push_back({"resourceVersion=40", {HttpResponse{200, ""}}});
  ReflectorOptions o;
  o.page_size = 2;
  auto r = Make(o);
  r->Run(stop_->get_token());
  EXPECT_EQ(rec_.log, (std::vector<std::string>{"add a@3", "add b@4", "update b 4->35", "add c@36",
                                                "delete old"}));
  ASSERT_GE(paths_.size(), 3u);
  EXPECT_EQ(paths_[2].find("continue="), std::string::npos) << paths_[2];
  EXPECT_EQ(paths_[2].find("resourceVersion="), std::string::npos) << paths_[2];
  EXPECT_EQ(r->LastResourceVersion(), "40");  // the first page of the list that completed
  // One sleep only: after the scripted watch that ended at once, none before the new list.
  EXPECT_EQ(sleeper_->sleeps().size(), 1u);
  EXPECT_EQ(r->stats().list_restarts, 1);
  EXPECT_EQ(store_->size(), 3u);
}

TEST_F(ReflectorTest, BusyServerIsRetriedAfterRetryAfterWithoutGrowingTheBackoff) {
  // A restarted API server answers 429 "storage is (re)initializing" until its watch cache is
  // filled: retried every retry_after_busy, the backoff untouched.
  const std::string busy =
      Json{{"kind", "Status"}, {"code", 429}, {"message", "storage is (re)initializing"}}.dump();
  for (int i = 0; i < 5; ++i) steps_.push_back({"limit=500", {HttpResponse{429, busy}}});
  steps_.push_back({"limit=500", {HttpResponse{200, ListBody(10, {Cm("a", 5)})}}});
  steps_.push_back({"resourceVersion=10", {Status(Unavailable("connection refused"))}});
  auto r = Make();
  r->Run(stop_->get_token());
  auto sleeps = sleeper_->sleeps();
  ASSERT_EQ(sleeps.size(), 6u);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(sleeps[i], std::chrono::seconds(1)) << i;
  EXPECT_GE(sleeps[5], std::chrono::milliseconds(800));  // the first real backoff step
  EXPECT_LT(sleeps[5], std::chrono::milliseconds(1600));
  EXPECT_EQ(rec_.log, (std::vector<std::string>{"add a@5"}));
}

TEST_F(ReflectorTest, VersionsOnlyStoreKeepsNoObjectsAndDeletesByStub) {
  store_ = std::make_shared<Store>(StoreOptions{false, {}});
  steps_.push_back({"limit=500", {HttpResponse{200, ListBody(10, {Cm("a", 5), Cm("b", 6)})}}});
  steps_.push_back({"resourceVersion=10",
                    {HttpResponse{200, ""},
                     {Ev("MODIFIED", Cm("a", 11)), Ev("MODIFIED", Cm("a", 11)),
                      Json{{"type", "ERROR"}, {"object", Json::parse(Gone())}}.dump() + "\n"}}});
  steps_.push_back({"resourceVersion=11", {HttpResponse{200, ListBody(20, {Cm("a", 11)})}}});
  steps_.push_back({"resourceVersion=20", {HttpResponse{200, ""}}});
  std::vector<std::string> deleted;
  auto h = rec_.Handlers();
  h.on_delete = [&](const ObjectPtr& o) { deleted.push_back(NamespaceOf(*o) + "/" + NameOf(*o)); };
  ReflectorOptions o;
  o.gvr = ConfigMapsGvr();
  o.ns = "ns";
  o.seed = 99;
  Reflector r(std::make_shared<Client>(Server()), store_, o, h, clock_, sleeper_);
  r.Run(stop_->get_token());
  EXPECT_EQ(rec_.log, (std::vector<std::string>{"add a@5", "add b@6", "update a ?->11"}));
  EXPECT_EQ(deleted, (std::vector<std::string>{"ns/b"}));
  EXPECT_EQ(r.stats().duplicates_skipped, 1);
  EXPECT_EQ(store_->Keys(), std::vector<std::string>{"ns/a"});
  EXPECT_EQ(store_->Get("ns/a"), nullptr);  // versions only
  EXPECT_TRUE(store_->List().empty());
}

}  // namespace
}  // namespace feedguard::kube
