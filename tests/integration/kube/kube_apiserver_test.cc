// Integration tests of controller/kube against a real kube-apiserver + etcd (tests/testbed).
// These FAIL, never skip, when the test bed is missing: they run only under the `apiserver`
// label, where the fixture is supposed to exist.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "controller/kube/client.h"
#include "controller/kube/curl_transport.h"
#include "controller/kube/kubeconfig.h"
#include "controller/kube/leader_election.h"
#include "controller/kube/reflector.h"

namespace feedguard::kube {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

std::string EnvOr(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

std::string Unique(const std::string& prefix) {
  std::random_device rd;
  return prefix + "-" + std::to_string(getpid()) + "-" + std::to_string(rd() % 100000);
}

int RunScript(const std::string& verb, const std::string& dir) {
  const std::string cmd = EnvOr("FG_TESTBED_SH", FG_TESTBED_SH) + " " + verb + " " + dir;
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

Result<ClientPtr> ClientFor(const std::string& dir) {
  const std::string kc = dir + "/kubeconfig";
  if (!fs::exists(kc)) return NotFound("no test bed: " + kc + " is missing");
  FG_ASSIGN_OR_RETURN(RestConfig cfg, LoadKubeconfig(kc));
  FG_ASSIGN_OR_RETURN(auto transport,
                      CurlTransport::Create(cfg, std::make_shared<RealTimeSource>()));
  return std::make_shared<Client>(transport);
}

// The shared fixture's server.
class SharedServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = ClientFor(EnvOr("FG_TESTBED_DIR", FG_TESTBED_DIR));
    ASSERT_TRUE(c.ok()) << c.status().ToString() << " (run under the `apiserver` CTest fixture)";
    client_ = *c;
  }
  ClientPtr client_;
};

// A private server for tests that restart or compact it.
class PrivateServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::string(FG_PRIVATE_TESTBED_BASE) + "-" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    RunScript("down", dir_);  // leftovers of a crashed run (stops only what that run started)
    ASSERT_EQ(RunScript("up", dir_), 0) << "testbed.sh up " << dir_ << " failed";
    up_ = true;
    auto c = ClientFor(dir_);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    client_ = *c;
  }
  void TearDown() override {
    if (up_) {
      EXPECT_EQ(RunScript("down", dir_), 0);
    }
  }
  std::string dir_;
  bool up_ = false;
  ClientPtr client_;
};

Json ConfigMap(const std::string& name, const std::map<std::string, std::string>& data,
               const std::string& label = "") {
  Json cm = {{"apiVersion", "v1"},
             {"kind", "ConfigMap"},
             {"metadata", {{"name", name}, {"namespace", "default"}}},
             {"data", data}};
  if (!label.empty()) cm["metadata"]["labels"]["fg-test"] = label;
  return cm;
}

TEST_F(SharedServerTest, ConfigMapCrud) {
  const std::string name = Unique("fg-kube-crud");
  const std::string label = name;
  auto created = client_->Create(ConfigMapsGvr(), "default", ConfigMap(name, {{"a", "1"}}, label));
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EXPECT_EQ(client_->Create(ConfigMapsGvr(), "default", ConfigMap(name, {}, label)).status().code(),
            StatusCode::kAlreadyExists);

  auto got = client_->Get(ConfigMapsGvr(), "default", name);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ((*got)["data"]["a"], "1");

  ListOptions lo;
  lo.label_selector = "fg-test=" + label;
  auto listed = client_->List(ConfigMapsGvr(), "default", lo);
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  ASSERT_EQ(listed->items.size(), 1u);
  EXPECT_FALSE(listed->resource_version.empty());
  ListOptions by_field;
  by_field.field_selector = "metadata.name=" + name;
  auto by_name = client_->List(ConfigMapsGvr(), "", by_field);
  ASSERT_TRUE(by_name.ok());
  EXPECT_EQ(by_name->items.size(), 1u);

  // PUT with the current resourceVersion; the stale one then conflicts.
  Json obj = *got;
  obj["data"]["a"] = "2";
  auto updated = client_->Update(ConfigMapsGvr(), "default", obj);
  ASSERT_TRUE(updated.ok()) << updated.status().ToString();
  obj["data"]["a"] = "3";
  auto stale = client_->Update(ConfigMapsGvr(), "default", obj);
  EXPECT_EQ(stale.status().code(), StatusCode::kAborted) << stale.status().ToString();

  auto merged =
      client_->Patch(ConfigMapsGvr(), "default", name, PatchType::kMerge, {{"data", {{"b", "x"}}}});
  ASSERT_TRUE(merged.ok()) << merged.status().ToString();
  EXPECT_EQ((*merged)["data"]["a"], "2");
  EXPECT_EQ((*merged)["data"]["b"], "x");
  auto jp = client_->Patch(ConfigMapsGvr(), "default", name, PatchType::kJson,
                           Json::array({{{"op", "remove"}, {"path", "/data/b"}}}));
  ASSERT_TRUE(jp.ok()) << jp.status().ToString();
  EXPECT_FALSE((*jp)["data"].contains("b"));
  PatchOptions po;
  po.field_manager = "feedguard-test";
  po.force = true;
  Json apply = {{"apiVersion", "v1"},
                {"kind", "ConfigMap"},
                {"metadata", {{"name", name}, {"namespace", "default"}}},
                {"data", {{"c", "applied"}}}};
  auto applied = client_->Patch(ConfigMapsGvr(), "default", name, PatchType::kApply, apply, po);
  ASSERT_TRUE(applied.ok()) << applied.status().ToString();
  EXPECT_EQ((*applied)["data"]["c"], "applied");
  bool managed = false;
  for (const auto& mf : (*applied)["metadata"]["managedFields"]) {
    managed |= mf.value("manager", "") == "feedguard-test" && mf.value("operation", "") == "Apply";
  }
  EXPECT_TRUE(managed);
  // 422 with the server's message.
  auto invalid = client_->Patch(ConfigMapsGvr(), "default", name, PatchType::kMerge,
                                {{"metadata", {{"labels", {{"bad key!", "v"}}}}}});
  EXPECT_EQ(invalid.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(invalid.status().message().find("bad key!"), std::string::npos)
      << invalid.status().ToString();

  DeleteOptions wrong;
  wrong.precondition_uid = "00000000-0000-0000-0000-000000000000";
  EXPECT_EQ(client_->Delete(ConfigMapsGvr(), "default", name, wrong).code(), StatusCode::kAborted);
  DeleteOptions right;
  right.precondition_uid = UidOf(*applied);
  ASSERT_TRUE(client_->Delete(ConfigMapsGvr(), "default", name, right).ok());
  EXPECT_EQ(client_->Get(ConfigMapsGvr(), "default", name).status().code(), StatusCode::kNotFound);
}

TEST_F(SharedServerTest, NodeStatusSubresourceWithConflictRetry) {
  const std::string name = Unique("fg-kube-node");
  Json node = {{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", name}}}};
  auto created = client_->Create(NodesGvr(), "", node);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  struct Cleanup {
    ClientPtr c;
    std::string n;
    ~Cleanup() { c->Delete(NodesGvr(), "", n).IgnoreError(); }
  } cleanup{client_, name};

  // A PUT to /status with a stale resourceVersion conflicts.
  Json stale = *created;
  auto first = client_->Patch(NodesGvr(), "", name, PatchType::kMerge,
                              {{"status", {{"capacity", {{"cpu", "4"}}}}}},
                              PatchOptions{"", false, "status"});
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  stale["status"]["capacity"]["cpu"] = "8";
  EXPECT_EQ(client_->UpdateStatus(NodesGvr(), "", stale).status().code(), StatusCode::kAborted);

  // Another writer changes status between our read and our write: we re-read and recompute.
  int recomputes = 0;
  auto r = client_->UpdateStatusWithRetry(NodesGvr(), "", name, [&](Json& obj) {
    ++recomputes;
    if (recomputes == 1) {
      auto other = client_->Patch(NodesGvr(), "", name, PatchType::kMerge,
                                  {{"status", {{"capacity", {{"cpu", "16"}}}}}},
                                  PatchOptions{"", false, "status"});
      EXPECT_TRUE(other.ok()) << other.status().ToString();
    }
    const std::string cpu = obj["status"]["capacity"].value("cpu", "");
    obj["status"]["allocatable"]["cpu"] = cpu;  // derived from what we read
    return OkStatus();
  });
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(recomputes, 2);
  EXPECT_EQ((*r)["status"]["allocatable"]["cpu"], "16");
  // /status ignored a spec change? (status writes must not touch spec)
  auto got = client_->Get(NodesGvr(), "", name, "status");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ((*got)["status"]["allocatable"]["cpu"], "16");
}

// Records every handler call; checks "no event lost, none duplicated".
class History {
 public:
  ResourceEventHandlers Handlers() {
    return {[this](const ObjectPtr& o) { Add("add", *o); },
            [this](const ObjectPtr&, const ObjectPtr& o) { Add("update", *o); },
            [this](const ObjectPtr& o) { Add("delete", *o); }, nullptr};
  }
  void Add(const std::string& kind, const Json& o) {
    std::lock_guard<std::mutex> lock(mu_);
    events_[NameOf(o)].push_back({kind, std::stoll(ResourceVersionOf(o))});
  }
  // Per object: first event an add, versions strictly increasing, nothing after a delete.
  void ExpectConsistent() {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [name, evs] : events_) {
      ASSERT_FALSE(evs.empty());
      EXPECT_EQ(evs.front().first, "add") << name;
      for (size_t i = 1; i < evs.size(); ++i) {
        EXPECT_GT(evs[i].second, evs[i - 1].second) << name << " event " << i << " duplicated";
        EXPECT_NE(evs[i - 1].first, "delete") << name << " event after its delete";
      }
    }
  }
  std::set<int64_t> Versions(const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    std::set<int64_t> out;
    for (const auto& e : events_[name]) out.insert(e.second);
    return out;
  }
  std::string Last(const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = events_.find(name);
    return it == events_.end() || it->second.empty() ? "" : it->second.back().first;
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::vector<std::pair<std::string, int64_t>>> events_;
};

// Writes retried across a server restart; returns the resourceVersion the server gave.
int64_t Write(const ClientPtr& c, const std::function<Result<Json>()>& op) {
  for (int i = 0; i < 120; ++i) {
    auto r = op();
    if (r.ok()) return std::stoll(ResourceVersionOf(*r));
    if (r.status().code() != StatusCode::kUnavailable &&
        r.status().code() != StatusCode::kDeadlineExceeded) {
      ADD_FAILURE() << r.status().ToString();
      return -1;
    }
    std::this_thread::sleep_for(500ms);
  }
  (void)c;
  ADD_FAILURE() << "write kept failing";
  return -1;
}

struct Run {
  std::shared_ptr<Store> store = std::make_shared<Store>();
  std::stop_source stop;
  std::unique_ptr<Reflector> reflector;
  std::thread thread;
  ~Run() {
    stop.request_stop();
    if (thread.joinable()) thread.join();
  }
};

std::unique_ptr<Run> StartReflector(const ClientPtr& c, const std::string& label,
                                    History* history) {
  auto run = std::make_unique<Run>();
  ReflectorOptions o;
  o.gvr = ConfigMapsGvr();
  o.ns = "default";
  o.label_selector = "fg-test=" + label;
  o.page_size = 3;  // exercise pagination
  run->reflector = std::make_unique<Reflector>(c, run->store, o, history->Handlers(),
                                               std::make_shared<RealTimeSource>(),
                                               std::make_shared<RealSleeper>());
  Reflector* r = run->reflector.get();
  run->thread = std::thread([r, stop = run->stop.get_token()] { r->Run(stop); });
  for (int i = 0; i < 300 && !r->HasSynced(); ++i) std::this_thread::sleep_for(100ms);
  EXPECT_TRUE(r->HasSynced());
  return run;
}

// Waits until the store equals the server's list (names and resourceVersions).
void ExpectConverges(const ClientPtr& c, const std::string& label, Run& run) {
  ListOptions lo;
  lo.label_selector = "fg-test=" + label;
  std::map<std::string, std::string> server, cached;
  for (int i = 0; i < 600; ++i) {
    auto l = c->List(ConfigMapsGvr(), "default", lo);
    if (l.ok()) {
      server.clear();
      for (const auto& o : l->items) server[NameOf(o)] = ResourceVersionOf(o);
      cached.clear();
      for (const auto& o : run.store->List()) cached[NameOf(*o)] = ResourceVersionOf(*o);
      if (server == cached) return;
    }
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(cached, server) << "reflector store never caught up";
}

TEST_F(PrivateServerTest, WatchSurvivesApiServerRestart) {
  const std::string label = Unique("fg-restart");
  History history;
  std::vector<std::string> names;
  for (int i = 0; i < 5; ++i) names.push_back(label + "-" + std::to_string(i));
  // Five objects exist before the reflector starts (listed in pages of 3).
  for (int i = 0; i < 5; ++i) {
    Write(client_, [&] {
      return client_->Create(ConfigMapsGvr(), "default", ConfigMap(names[i], {{"v", "0"}}, label));
    });
  }
  auto run = StartReflector(client_, label, &history);
  std::vector<int64_t> live_rvs;  // writes made while the watch is surely connected
  live_rvs.push_back(Write(client_, [&] {
    return client_->Patch(ConfigMapsGvr(), "default", names[0], PatchType::kMerge,
                          {{"data", {{"v", "1"}}}});
  }));
  ExpectConverges(client_, label, *run);

  ASSERT_EQ(RunScript("restart-apiserver", dir_), 0);
  // Changes right after the restart, while the reflector is reconnecting.
  Write(client_, [&] {
    return client_->Patch(ConfigMapsGvr(), "default", names[1], PatchType::kMerge,
                          {{"data", {{"v", "2"}}}});
  });
  ASSERT_TRUE(client_->Delete(ConfigMapsGvr(), "default", names[2]).ok());
  Write(client_, [&] {
    return client_->Create(ConfigMapsGvr(), "default", ConfigMap(label + "-new", {}, label));
  });
  ExpectConverges(client_, label, *run);
  history.ExpectConsistent();
  EXPECT_EQ(history.Last(names[2]), "delete");
  EXPECT_EQ(history.Last(label + "-new"), "add");
  for (int64_t rv : live_rvs) EXPECT_EQ(history.Versions(names[0]).count(rv), 1u);
  const auto st = run->reflector->stats();
  std::printf("restart: lists=%d expired_relists=%d watches=%d failures=%d events=%d dup=%d\n",
              st.lists, st.expired_relists, st.watches_opened, st.watch_failures, st.events,
              st.duplicates_skipped);
  EXPECT_GE(st.watches_opened, 2);
}

TEST_F(PrivateServerTest, CompactionForces410RelistWithoutLosingEvents) {
  const std::string label = Unique("fg-compact");
  History history;
  std::vector<std::string> names;
  for (int i = 0; i < 4; ++i) names.push_back(label + "-" + std::to_string(i));
  for (const auto& n : names) {
    Write(client_,
          [&] { return client_->Create(ConfigMapsGvr(), "default", ConfigMap(n, {}, label)); });
  }
  // A plain watch from an old version after compaction: 410 Expired.
  ListOptions lo;
  lo.label_selector = "fg-test=" + label;
  auto before = client_->List(ConfigMapsGvr(), "default", lo);
  ASSERT_TRUE(before.ok());
  auto run = StartReflector(client_, label, &history);
  ExpectConverges(client_, label, *run);

  // Changes the reflector sees, then changes made while it is cut off (the restart), with the
  // history compacted away underneath it: it must relist and emit the difference.
  Write(client_, [&] {
    return client_->Patch(ConfigMapsGvr(), "default", names[0], PatchType::kMerge,
                          {{"data", {{"v", "1"}}}});
  });
  ExpectConverges(client_, label, *run);
  for (int i = 0; i < 20; ++i) {  // churn so the compaction has something to discard
    Write(client_, [&] {
      return client_->Patch(ConfigMapsGvr(), "default", names[1], PatchType::kMerge,
                            {{"data", {{"v", std::to_string(i)}}}});
    });
  }
  ASSERT_TRUE(client_->Delete(ConfigMapsGvr(), "default", names[3]).ok());
  ASSERT_EQ(RunScript("compact", dir_ + " >/dev/null"), 0);
  ASSERT_EQ(RunScript("restart-apiserver", dir_), 0);
  Write(client_, [&] {
    return client_->Patch(ConfigMapsGvr(), "default", names[2], PatchType::kMerge,
                          {{"data", {{"v", "z"}}}});
  });
  Write(client_, [&] {
    return client_->Create(ConfigMapsGvr(), "default", ConfigMap(label + "-late", {}, label));
  });

  Status s = client_->Watch(
      ConfigMapsGvr(), "default", WatchOptions{"", "", before->resource_version, 5, true},
      [](Json& ev) { return ev.value("type", "") != "ERROR" ? true : false; }, std::stop_token{});
  std::string raw_error;
  client_
      ->Watch(
          ConfigMapsGvr(), "default", WatchOptions{"", "", before->resource_version, 5, true},
          [&](Json& ev) {
            if (ev.value("type", "") == "ERROR") raw_error = ev["object"].dump();
            return false;
          },
          std::stop_token{})
      .IgnoreError();
  EXPECT_TRUE(IsExpired(s) || raw_error.find("410") != std::string::npos)
      << s.ToString() << " " << raw_error;

  ExpectConverges(client_, label, *run);
  history.ExpectConsistent();
  EXPECT_EQ(history.Last(names[3]), "delete");
  EXPECT_EQ(history.Last(label + "-late"), "add");
  const auto st = run->reflector->stats();
  std::printf("compact: lists=%d expired_relists=%d watches=%d failures=%d events=%d dup=%d\n",
              st.lists, st.expired_relists, st.watches_opened, st.watch_failures, st.events,
              st.duplicates_skipped);
  EXPECT_GE(st.expired_relists, 1);
  EXPECT_GE(st.lists, 2);
}

TEST_F(SharedServerTest, LeaseElectionOneLeaderThenTakeover) {
  const std::string lease = Unique("fg-kube-lease");
  auto make = [&](const std::string& id, std::atomic<int>* leading, bool release) {
    LeaderElectionConfig c;
    c.lease_namespace = "default";
    c.lease_name = lease;
    c.identity = id;
    c.release_on_stop = release;
    c.lease_duration = 4s;  // short so the crash case runs quickly; same logic as 15/10/2
    c.renew_deadline = 3s;
    c.retry_period = 500ms;
    c.on_started_leading = [leading] { ++*leading; };
    c.on_stopped_leading = [leading] { --*leading; };
    return std::make_unique<LeaderElector>(client_, c, std::make_shared<RealTimeSource>(),
                                           std::make_shared<RealSleeper>());
  };
  for (bool release : {true, false}) {
    SCOPED_TRACE(release ? "graceful stop (release)" : "crash (no release)");
    std::atomic<int> a_leads{0}, b_leads{0};
    auto a = make("a", &a_leads, release);
    auto b = make("b", &b_leads, release);
    std::stop_source stop_a, stop_b;
    std::thread ta([&] { a->Run(stop_a.get_token()); });
    std::thread tb([&] { b->Run(stop_b.get_token()); });
    for (int i = 0; i < 200 && a_leads + b_leads == 0; ++i) std::this_thread::sleep_for(50ms);
    std::this_thread::sleep_for(2s);  // two more renew rounds: still exactly one
    ASSERT_EQ(a_leads + b_leads, 1);
    const bool a_first = a_leads == 1;
    LeaderElector* first = a_first ? a.get() : b.get();
    LeaderElector* second = a_first ? b.get() : a.get();
    EXPECT_TRUE(first->IsLeader());
    EXPECT_FALSE(second->IsLeader());
    auto l = client_->Get(LeasesGvr(), "default", lease);
    ASSERT_TRUE(l.ok());
    EXPECT_EQ((*l)["spec"]["holderIdentity"], a_first ? "a" : "b");

    const auto stopped_at = std::chrono::steady_clock::now();
    (a_first ? stop_a : stop_b).request_stop();
    (a_first ? ta : tb).join();
    for (int i = 0; i < 300 && !second->IsLeader(); ++i) std::this_thread::sleep_for(50ms);
    const auto took = std::chrono::steady_clock::now() - stopped_at;
    EXPECT_TRUE(second->IsLeader());
    std::printf("takeover (%s) after %lld ms\n", release ? "release" : "expiry",
                static_cast<long long>(
                    std::chrono::duration_cast<std::chrono::milliseconds>(took).count()));
    if (release) {
      EXPECT_LT(took, 3s);  // the released lease is free at once
    } else {
      EXPECT_GE(took, 3s);  // had to wait for the lease to lapse
    }
    l = client_->Get(LeasesGvr(), "default", lease);
    ASSERT_TRUE(l.ok());
    EXPECT_EQ((*l)["spec"]["holderIdentity"], a_first ? "b" : "a");
    EXPECT_GE((*l)["spec"]["leaseTransitions"].get<int>(), 1);
    (a_first ? stop_b : stop_a).request_stop();
    (a_first ? tb : ta).join();
    client_->Delete(LeasesGvr(), "default", lease).IgnoreError();
  }
}

}  // namespace
}  // namespace feedguard::kube
