// watch_stream_fuzz.cc — a watch response body from the API server, end to end through the
// controller: libcurl's chunks → LineSplitter → JSON (pods and nodes trimmed to the controller's
// FieldSets) → Reflector (event decoding, store,
// resourceVersion bookkeeping, versions-only as the controller runs it or keeping objects) → the
// Reconciler's handlers → resolution, fences and status writes (checked by controller_fuzz.h).
//
// Byte 0 picks the resource the stream is for (pods, nodes, namespaces, FencePolicies) and
// whether the store keeps objects, byte 1 how the body is cut into chunks; the rest is the body.
// Properties beyond "no crash, no throw": the store stays consistent (every key names the object
// stored under it) and the reflector's counters add up.
#include <memory>
#include <stop_token>
#include <string>

#include "controller/app/kube_adapters.h"  // FencePolicyGvr
#include "controller/kube/fake_transport.h"
#include "controller/kube/reflector.h"
#include "controller/resolver/cluster_objects.h"  // PodFields, NodeFields
#include "tests/fuzz/controller_fuzz.h"

namespace {

namespace kube = feedguard::kube;
namespace controller = feedguard::controller;

std::string ListBody(const nlohmann::json& item) {
  return nlohmann::json{{"apiVersion", "v1"},
                        {"kind", "List"},
                        {"metadata", {{"resourceVersion", "500"}}},
                        {"items", {item}}}
      .dump();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, size_t size) {
  if (size < 2) return 0;
  const int kind = data[0] % 4;
  const bool keep_objects = (data[0] / 4) % 2 == 1;
  const uint32_t seed = data[1];
  const std::string body(AsText(data + 2, size - 2));

  feedguard::fuzz::FuzzCluster cluster;
  controller::Reconciler* rc = cluster.reconciler.get();
  kube::ReflectorOptions o;
  kube::ResourceEventHandlers h;
  std::function<void(const nlohmann::json&)> upsert, remove;
  nlohmann::json listed;
  switch (kind) {
    case 0:
      o.gvr = kube::PodsGvr();
      o.fields = controller::PodFields();  // as the controller watches them
      upsert = [rc](const auto& j) { rc->UpsertPod(j); };
      remove = [rc](const auto& j) { rc->DeletePod(j); };
      listed = feedguard::fuzz::SeedPod("trainer-0", "5f0c3c1e-1d2b-4a7e-9c1f-000000000001",
                                        "trainer", 1);
      break;
    case 1:
      o.gvr = kube::NodesGvr();
      o.fields = controller::NodeFields();
      upsert = [rc](const auto& j) { rc->UpsertNode(j); };
      remove = [rc](const auto& j) { rc->DeleteNode(j); };
      listed = feedguard::fuzz::SeedNode();
      break;
    case 2:
      o.gvr = {"", "v1", "namespaces"};
      upsert = [rc](const auto& j) { rc->UpsertNamespace(j); };
      remove = [rc](const auto& j) { rc->DeleteNamespace(j); };
      listed = feedguard::fuzz::SeedNamespace();
      break;
    default:
      o.gvr = controller::FencePolicyGvr();
      upsert = [rc](const auto& j) { rc->UpsertPolicy(j); };
      remove = [rc](const auto& j) { rc->DeletePolicy(j); };
      listed = feedguard::fuzz::SeedPolicy();
      break;
  }
  o.seed = 1;
  int adds = 0, updates = 0, deletes = 0;
  h.on_add = [&](const kube::ObjectPtr& obj) {
    ++adds;
    upsert(*obj);
  };
  h.on_update = [&](const kube::ObjectPtr&, const kube::ObjectPtr& obj) {
    ++updates;
    upsert(*obj);
  };
  h.on_delete = [&](const kube::ObjectPtr& obj) {
    ++deletes;
    remove(*obj);
  };

  // The scripted API server: a list of the seed object, one watch answering with the fuzzed
  // body, then stop (every later request).
  std::stop_source stop;
  int requests = 0;
  auto transport = std::make_shared<kube::FakeTransport>([&](const kube::HttpRequest&) {
    const int n = requests++;
    if (n == 0) return kube::FakeReply{kube::HttpResponse{200, ListBody(listed)}};
    if (n == 1)
      return kube::FakeReply{kube::HttpResponse{200, ""}, kube::RandomChunks(body, seed, 97)};
    stop.request_stop();
    return kube::FakeReply{kube::HttpResponse{200, ""}};
  });
  auto store = std::make_shared<kube::Store>(kube::StoreOptions{.keep_objects = keep_objects});
  auto sleeper = std::make_shared<feedguard::FakeSleeper>(cluster.clock);
  kube::Reflector reflector(std::make_shared<kube::Client>(transport), store, o, h, cluster.clock,
                            sleeper);
  reflector.Run(stop.get_token());

  for (const auto& key : store->Keys()) {
    auto obj = store->Get(key);
    FG_FUZZ_CHECK((obj != nullptr) == keep_objects);
    if (obj) FG_FUZZ_CHECK(kube::ObjectKey(*obj) == key);
  }
  const auto st = reflector.stats();
  FG_FUZZ_CHECK(st.lists >= 1);
  // Every add put one object in the store, every delete took one out.
  FG_FUZZ_CHECK(adds - deletes == static_cast<int>(store->size()));
  (void)updates;
  cluster.Settle();
  return 0;
}
