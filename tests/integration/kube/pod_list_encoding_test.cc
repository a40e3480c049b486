// The Pods list in the API server's protobuf encoding against its JSON, on a real kube-apiserver
// (tests/testbed): for pods of every shape the controller reads, each item decoded with
// PodJsonFromProtobuf (proto/kubernetes/core/v1/pod.proto) equals the JSON item trimmed to
// PodFields(), member for member, and both lists name the same resourceVersion. FAILS, never
// skips, without the `apiserver` fixture.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>

#include "controller/kube/client.h"
#include "controller/kube/curl_transport.h"
#include "controller/kube/kubeconfig.h"
#include "controller/resolver/cluster_objects.h"

namespace feedguard::controller {
namespace {

using kube::Json;

kube::Gvr NamespacesGvr() { return {"", "v1", "namespaces"}; }

std::string Unique(const std::string& prefix) {
  std::random_device rd;
  return prefix + "-" + std::to_string(getpid()) + "-" + std::to_string(rd() % 100000);
}

class PodListEncodingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* d = std::getenv("FG_TESTBED_DIR");
    const std::string kc = std::string(d && *d ? d : FG_TESTBED_DIR) + "/kubeconfig";
    ASSERT_TRUE(std::filesystem::exists(kc)) << kc << " (run under the `apiserver` fixture)";
    auto cfg = kube::LoadKubeconfig(kc);
    ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
    auto t = kube::CurlTransport::Create(*cfg, std::make_shared<RealTimeSource>());
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    client_ = std::make_shared<kube::Client>(*t);
  }
  void TearDown() override {
    if (!ns_.empty()) (void)client_->Delete(NamespacesGvr(), "", ns_);
    if (!priority_class_.empty()) {
      (void)client_->Delete(kube::Gvr{"scheduling.k8s.io", "v1", "priorityclasses"}, "",
                            priority_class_);
    }
  }
  // Every pod of the cluster (this test's and whatever else the test bed holds: the scale
  // bench's realistic pods when run there), by namespace/name: JSON trimmed to PodFields() and
  // protobuf decoded.
  void ListBoth(std::map<std::string, Json>* json, std::map<std::string, Json>* proto,
                std::string* json_rv, std::string* proto_rv) {
    kube::ListOptions o;
    o.fields = PodFields();
    auto a = client_->ListStream(kube::PodsGvr(), "", o, [&](Json&& item) {
      const std::string key = kube::ObjectKey(item);
      (*json)[key] = std::move(item);
    });
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    o.protobuf_item = PodJsonFromProtobuf;
    auto b = client_->ListStream(kube::PodsGvr(), "", o, [&](Json&& item) {
      const std::string key = kube::ObjectKey(item);
      (*proto)[key] = std::move(item);
    });
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    *json_rv = *a;
    *proto_rv = *b;
  }
  kube::ClientPtr client_;
  std::string ns_, priority_class_;
};

Json Container(const std::string& name, Json resources) {
  return {{"name", name}, {"image", "registry.invalid/fg:1"}, {"resources", std::move(resources)}};
}

TEST_F(PodListEncodingTest, ProtobufItemsEqualTheTrimmedJsonOnes) {
  ns_ = Unique("fg-enc");
  ASSERT_TRUE(client_->Create(NamespacesGvr(), "", {{"metadata", {{"name", ns_}}}}).ok());
  priority_class_ = ns_ + "-prio";
  ASSERT_TRUE(client_
                  ->Create(kube::Gvr{"scheduling.k8s.io", "v1", "priorityclasses"}, "",
                           {{"apiVersion", "scheduling.k8s.io/v1"},
                            {"kind", "PriorityClass"},
                            {"metadata", {{"name", priority_class_}}},
                            {"value", 1000}})
                  .ok());
  const Json gpu = {{"limits", {{"cpu", "2"}, {"memory", "1Gi"}, {"nvidia.com/gpu", "1"}}},
                    {"requests", {{"cpu", "1500m"}, {"memory", "512Mi"}, {"nvidia.com/gpu", "1"}}}};
  std::vector<Json> pods = {
      // BestEffort, no labels, one container without resources.
      {{"metadata", {{"name", "plain"}}},
       {"spec", {{"nodeName", "n1"}, {"containers", {Container("c", Json::object())}}}}},
      // Guaranteed GPU trainer with a sidecar, labels, a priority class, a DRA claim.
      {{"metadata",
        {{"name", "trainer"},
         {"labels",
          {{"app.kubernetes.io/name", "train"},
           {"batch.kubernetes.io/job-name", "j"},
           {"empty-value", ""}}}}},
       {"spec",
        {{"nodeName", "n2"},
         {"priorityClassName", priority_class_},
         {"containers", {Container("main", gpu), Container("copy", {{"limits", {{"cpu", "1"}}}})}},
         {"initContainers",
          {Container("setup", {{"requests", {{"cpu", "100m"}}}}),
           [&] {
             Json c = Container("sidecar", {{"requests", {{"cpu", "250m"}}}});
             c["restartPolicy"] = "Always";
             return c;
           }()}},
         {"resourceClaims", {{{"name", "gpu"}, {"resourceClaimName", "trainer-gpu"}}}}}}},
      // Unscheduled Burstable pod; deleted below while a finalizer holds it.
      {{"metadata",
        {{"name", "leaving"}, {"labels", {{"a", "b"}}}, {"finalizers", {"fg.test/hold"}}}},
       {"spec", {{"containers", {Container("c", {{"requests", {{"cpu", "0.1"}}}})}}}}},
  };
  for (auto& p : pods) {
    p["apiVersion"] = "v1";
    p["kind"] = "Pod";
    p["metadata"]["namespace"] = ns_;
    auto c = client_->Create(kube::PodsGvr(), ns_, p);
    ASSERT_TRUE(c.ok()) << p["metadata"]["name"] << ": " << c.status().ToString();
  }
  // Status as a kubelet writes it: container IDs, a phase, the claim's status.
  auto trainer = client_->Get(kube::PodsGvr(), ns_, "trainer");
  ASSERT_TRUE(trainer.ok());
  Json cs = Json::array();
  for (const char* n : {"main", "copy"}) {
    cs.push_back({{"name", n},
                  {"containerID", std::string("containerd://") + n + "0123"},
                  {"image", "registry.invalid/fg:1"},
                  {"imageID", ""},
                  {"ready", true},
                  {"restartCount", 0},
                  {"state", {{"running", {{"startedAt", "2026-11-29T00:00:00Z"}}}}}});
  }
  (*trainer)["status"]["phase"] = "Running";
  (*trainer)["status"]["containerStatuses"] = cs;
  (*trainer)["status"]["initContainerStatuses"] = {
      {{"name", "setup"},
       {"containerID", "containerd://setup9"},
       {"image", "registry.invalid/fg:1"},
       {"imageID", ""},
       {"ready", false},
       {"restartCount", 0},
       {"state", {{"terminated", {{"exitCode", 0}}}}}},
      {{"name", "sidecar"},
       {"image", "registry.invalid/fg:1"},
       {"imageID", ""},
       {"ready", false},
       {"restartCount", 0},
       {"state", {{"waiting", {{"reason", "ContainerCreating"}}}}}}};
  (*trainer)["status"]["resourceClaimStatuses"] = {
      {{"name", "gpu"}, {"resourceClaimName", "trainer-gpu"}}};
  auto st = client_->UpdateStatus(kube::PodsGvr(), ns_, *trainer);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  ASSERT_TRUE(client_->Delete(kube::PodsGvr(), ns_, "leaving").ok());

  std::map<std::string, Json> json, proto;
  std::string json_rv, proto_rv;
  ListBoth(&json, &proto, &json_rv, &proto_rv);
  ASSERT_EQ(json.size(), proto.size());
  ASSERT_GE(json.size(), 3u);
  size_t differ = 0;
  for (const auto& [key, j] : json) {
    auto it = proto.find(key);
    if (it == proto.end() || it->second != j) {
      if (++differ <= 3) {
        ADD_FAILURE() << key << "\nprotobuf: " << (it == proto.end() ? "(none)" : it->second.dump())
                      << "\njson:     " << j.dump();
      }
    }
  }
  EXPECT_EQ(differ, 0u) << "of " << json.size() << " pods";
  const std::string p = ns_ + "/";
  ASSERT_TRUE(json.count(p + "trainer") && json.count(p + "leaving") && json.count(p + "plain"));
  Json& trainer_json = json[p + "trainer"];
  Json& leaving_json = json[p + "leaving"];
  // What the JSON holds is what the records read: the test would be empty otherwise.
  EXPECT_TRUE(leaving_json["metadata"].contains("deletionTimestamp"));
  EXPECT_EQ(trainer_json["spec"]["initContainers"][1]["restartPolicy"], "Always");
  EXPECT_EQ(trainer_json["status"]["containerStatuses"][0]["containerID"], "containerd://main0123");
  EXPECT_EQ(trainer_json["status"]["qosClass"], "Burstable");
  EXPECT_EQ(trainer_json["spec"]["resourceClaims"][0]["resourceClaimName"], "trainer-gpu");
  const PodInfo a = PodFromJson(trainer_json), b = PodFromJson(proto[p + "trainer"]);
  EXPECT_EQ(a.gpus, 1);
  EXPECT_EQ(a.gpus, b.gpus);
  EXPECT_EQ(a.cpu_request_milli, b.cpu_request_milli);
  EXPECT_EQ(a.priority_class.get(), b.priority_class.get());
  EXPECT_EQ(a.priority_class.get(), priority_class_);
  EXPECT_FALSE(json_rv.empty());
  EXPECT_FALSE(proto_rv.empty());

  // Unfinalize so the namespace can go.
  auto leaving = client_->Get(kube::PodsGvr(), ns_, "leaving");
  if (leaving.ok()) {
    (*leaving)["metadata"]["finalizers"] = Json::array();
    (void)client_->Update(kube::PodsGvr(), ns_, *leaving);
  }
}

}  // namespace
}  // namespace feedguard::controller
