// podresources_client_test.cc — the client against a real grpc++ PodResourcesLister server
// listening on a temporary unix socket.
#include "agent/topology/podresources_client.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "agent/planner/planner.h"
#include "agent/topology/gpu_ids.h"
#include "kubelet/podresources/v1/api.grpc.pb.h"
#include "tests/fixtures/temp_dir.h"

namespace feedguard::agent {
namespace {

namespace fs = std::filesystem;

class FakeKubelet final : public ::v1::PodResourcesLister::Service {
 public:
  explicit FakeKubelet(::v1::ListPodResourcesResponse response) : response_(std::move(response)) {}
  grpc::Status List(grpc::ServerContext*, const ::v1::ListPodResourcesRequest*,
                    ::v1::ListPodResourcesResponse* out) override {
    *out = response_;
    return grpc::Status::OK;
  }

 private:
  const ::v1::ListPodResourcesResponse response_;
};

void AddDevices(::v1::ContainerResources* c, const std::string& resource,
                std::vector<std::string> ids) {
  auto* d = c->add_devices();
  d->set_resource_name(resource);
  for (auto& id : ids) d->add_device_ids(id);
  d->mutable_topology()->add_nodes()->set_id(0);
}

// A pod `ns`/`name` in kubelet's answer `r`.
::v1::PodResources* AddPod(::v1::ListPodResourcesResponse& r, const std::string& ns,
                           const std::string& name) {
  auto* p = r.add_pod_resources();
  p->set_namespace_(ns);
  p->set_name(name);
  return p;
}

::v1::ContainerResources* AddContainer(::v1::PodResources* p, const std::string& name) {
  auto* c = p->add_containers();
  c->set_name(name);
  return c;
}

// One DRA-allocated device in a container's dynamic_resources.
void AddClaim(::v1::ContainerResources* c, const std::string& claim, const std::string& driver,
              const std::string& device, std::vector<std::string> cdi) {
  auto* d = c->add_dynamic_resources();
  d->set_claim_name(claim);
  d->set_claim_namespace("ml");
  auto* r = d->add_claim_resources();
  r->set_driver_name(driver);
  r->set_pool_name("gpu-node-1");
  r->set_device_name(device);
  for (auto& n : cdi) r->add_cdi_devices()->set_name(n);
}

// What kubelet returns for pods whose GPUs came through ResourceClaims of the NVIDIA DRA driver.
::v1::ListPodResourcesResponse DraResponse() {
  ::v1::ListPodResourcesResponse r;
  {
    auto* p = AddPod(r, "ml", "dra-trainer");
    auto* c = AddContainer(p, "main");
    AddClaim(c, "two-gpus", "gpu.nvidia.com", "gpu-5", {"k8s.gpu.nvidia.com/device=gpu-5"});
    // The same claim's second device is a second ClaimResource.
    c->mutable_dynamic_resources(0)->add_claim_resources()->CopyFrom(
        c->dynamic_resources(0).claim_resources(0));
    c->mutable_dynamic_resources(0)->mutable_claim_resources(1)->set_device_name("gpu-6");
    // A sidecar sharing the pod's claim: the same devices, counted once.
    auto* side = AddContainer(p, "sidecar");
    side->add_dynamic_resources()->CopyFrom(c->dynamic_resources(0));
    // A NIC from another DRA driver is not a GPU.
    AddClaim(c, "nic", "dra.net.example.com", "eth1", {});
  }
  {
    auto* p = AddPod(r, "ml", "dra-cdi-only");
    // No device name (older kubelet): the per-claim CDI name carries the GPU's UUID.
    AddClaim(p->add_containers(), "one", "", "",
             {"k8s.gpu.nvidia.com/claim=0b5f2a7e-1c2d-4e3f-9a8b-7c6d5e4f3a2b-"
              "GPU-0000a100-1111-2222-3333-00000000a100"});
  }
  {
    auto* p = AddPod(r, "ml", "dra-mig");
    AddClaim(p->add_containers(), "slice", "gpu.nvidia.com", "gpu-2-mig-9-4-2",
             {"k8s.gpu.nvidia.com/device=gpu-2-mig-9-4-2"});
  }
  return r;
}

::v1::ListPodResourcesResponse SampleResponse() {
  ::v1::ListPodResourcesResponse r;
  {
    auto* p = AddPod(r, "ml", "trainer-a");
    auto* c = AddContainer(p, "main");
    AddDevices(c, "nvidia.com/gpu", {"GPU-aaaa", "GPU-bbbb"});
    AddDevices(c, "example.com/nic", {"nic0"});
    c->add_cpu_ids(4);
    auto* side = AddContainer(p, "sidecar");
    AddDevices(side, "nvidia.com/gpu.shared", {"GPU-cccc::1"});
  }
  {
    auto* p = AddPod(r, "ml", "mig-job");
    AddDevices(p->add_containers(), "nvidia.com/mig-1g.5gb", {"MIG-1111"});
  }
  {
    auto* p = AddPod(r, "web", "nginx");
    p->add_containers()->set_name("nginx");
  }
  return r;
}

class PodResourcesClientTest : public ::testing::Test {
 protected:
  void SetUp() override { endpoint_ = "unix:" + dir_.path() + "/kubelet.sock"; }
  void TearDown() override {
    if (server_) server_->Shutdown();
  }
  void StartServer(::v1::ListPodResourcesResponse response) {
    service_ = std::make_unique<FakeKubelet>(std::move(response));
    grpc::ServerBuilder b;
    b.AddListeningPort(endpoint_, grpc::InsecureServerCredentials());
    b.RegisterService(service_.get());
    server_ = b.BuildAndStart();
    ASSERT_NE(server_, nullptr);
  }

  // Client options for the fake kubelet's socket, with a generous deadline (the test machine
  // may be busy).
  PodResourcesClientOptions Options() const {
    PodResourcesClientOptions opts;
    opts.endpoint = endpoint_;
    opts.timeout = std::chrono::seconds(30);
    return opts;
  }
  Result<PodGpuMap> ListPodGpus(const PodResourcesClientOptions& opts) {
    PodResourcesClient client(opts);
    return client.ListPodGpus();
  }

  feedguard::testing::TempDir dir_;
  std::string endpoint_;
  std::unique_ptr<FakeKubelet> service_;
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(PodResourcesClientTest, ListsGpuDevicesPerPod) {
  StartServer(SampleResponse());
  auto m = ListPodGpus(Options());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->size(), 2u);  // nginx has no GPUs
  const auto& a = m->at(PodKey{"ml", "trainer-a"});
  EXPECT_EQ(a, (std::vector<std::string>{"GPU-aaaa", "GPU-bbbb", "GPU-cccc::1"}));
  EXPECT_EQ(m->at(PodKey{"ml", "mig-job"}), std::vector<std::string>{"MIG-1111"});
}

TEST_F(PodResourcesClientTest, FilterIsConfigurable) {
  StartServer(SampleResponse());
  auto opts = Options();
  opts.filter.exact = {"nvidia.com/gpu"};
  opts.filter.prefixes = {};
  auto m = ListPodGpus(opts);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->size(), 1u);
  EXPECT_EQ(m->at(PodKey{"ml", "trainer-a"}), (std::vector<std::string>{"GPU-aaaa", "GPU-bbbb"}));
}

TEST_F(PodResourcesClientTest, NoServerIsUnavailableWithinTheDeadline) {
  PodResourcesClientOptions opts;
  opts.endpoint = endpoint_;  // nobody listens
  opts.timeout = std::chrono::milliseconds(300);
  PodResourcesClient client(opts);
  const auto start = std::chrono::steady_clock::now();
  auto m = client.ListPodGpus();
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(m.status().code() == StatusCode::kUnavailable ||
              m.status().code() == StatusCode::kDeadlineExceeded)
      << m.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST_F(PodResourcesClientTest, ListsDraAllocatedGpus) {
  StartServer(DraResponse());
  auto m = ListPodGpus(Options());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->size(), 3u);
  EXPECT_EQ(m->at(PodKey{"ml", "dra-trainer"}),
            (std::vector<std::string>{"gpu.nvidia.com/gpu-5", "gpu.nvidia.com/gpu-6"}));
  EXPECT_EQ(m->at(PodKey{"ml", "dra-cdi-only"}),
            std::vector<std::string>{"GPU-0000a100-1111-2222-3333-00000000a100"});
  EXPECT_EQ(m->at(PodKey{"ml", "dra-mig"}),
            std::vector<std::string>{"gpu.nvidia.com/gpu-2-mig-9-4-2"});
}

// The whole path a DRA trainer takes in the agent: kubelet's dynamic_resources → device ids →
// PCI addresses (minor numbers from /proc/driver/nvidia) → a plan that pins it on its GPUs' node.
TEST_F(PodResourcesClientTest, DraTrainerGetsItsGpusLocalCores) {
  StartServer(DraResponse());
  auto m = ListPodGpus(Options());
  ASSERT_TRUE(m.ok()) << m.status().ToString();

  const std::string proc = std::string(FEEDGUARD_TOPOLOGY_FIXTURES) + "/server-2s-8gpu.nvidia-gpus";
  auto uuids = ReadNvidiaProcGpus(proc);
  auto minors = ReadNvidiaProcMinors(proc);
  ASSERT_TRUE(uuids.ok() && minors.ok());
  GpuIdResolver resolver(*uuids, {});
  resolver.SetMinors(*minors);
  auto topo =
      LoadTopologyFromXmlFile(std::string(FEEDGUARD_TOPOLOGY_FIXTURES) + "/server-2s-8gpu.xml");
  ASSERT_TRUE(topo.ok()) << topo.status().ToString();

  PlanInput in;
  auto* pol = in.fence.add_policies();
  pol->set_name("p");
  pol->mutable_trainer_cpu()->set_cores_per_gpu(4);
  pol->mutable_trainer_cpu()->set_numa(feedguard::v1::REQUIRE_GPU_LOCAL);
  for (const char* name : {"dra-trainer", "dra-cdi-only"}) {
    auto* t = in.fence.add_trainers();
    t->mutable_pod()->set_uid(std::string("uid-") + name);
    t->mutable_pod()->set_namespace_("ml");
    t->mutable_pod()->set_name(name);
    t->set_policy("p");
    in.trainer_gpus[t->pod().uid()] = resolver.ResolveAll(m->at(PodKey{"ml", name}));
  }
  const auto& dra = in.trainer_gpus["uid-dra-trainer"];
  ASSERT_EQ(dra.size(), 2u);
  EXPECT_EQ(dra[0].bus_id, "0000:ab:00.0");  // minor 5
  EXPECT_EQ(dra[1].bus_id, "0000:bd:00.0");  // minor 6
  EXPECT_EQ(in.trainer_gpus["uid-dra-cdi-only"][0].bus_id, "0000:1b:00.0");

  const Plan plan = MakePlan(*topo, in);
  ASSERT_EQ(plan.trainers.size(), 2u);
  for (const auto& t : plan.trainers) {
    const int node = t.pod.name == "dra-trainer" ? 1 : 0;
    EXPECT_TRUE(t.gpu_local) << t.pod.name << ": " << t.why;
    EXPECT_EQ(t.cpus.size(), t.pod.name == "dra-trainer" ? 16u : 8u) << t.pod.name;  // SMT
    EXPECT_TRUE(t.cpus.IsSubsetOf(topo->FindNuma(node)->cpus))
        << t.pod.name << " " << t.cpus.ToString();
  }
  EXPECT_TRUE(plan.diagnostics.empty()) << plan.diagnostics[0].message;
}

TEST(DraDeviceIdTest, Forms) {
  EXPECT_EQ(DraDeviceId("gpu.nvidia.com", "gpu-0", {}), "gpu.nvidia.com/gpu-0");
  EXPECT_EQ(DraDeviceId("gpu.nvidia.com", "", {"k8s.gpu.nvidia.com/device=gpu-3"}),
            "gpu.nvidia.com/gpu-3");
  // A UUID in a CDI name wins: it needs no minor-number table.
  EXPECT_EQ(DraDeviceId("gpu.nvidia.com", "gpu-1",
                        {"k8s.gpu.nvidia.com/gpu=GPU-5d5ba0d6-1234-5678-9abc-def012345678"}),
            "GPU-5d5ba0d6-1234-5678-9abc-def012345678");
  EXPECT_EQ(DraDeviceId("gpu.nvidia.com", "",
                        {"k8s.gpu.nvidia.com/claim=0b5f2a7e-1c2d-4e3f-9a8b-7c6d5e4f3a2b-gpu-4"}),
            "gpu.nvidia.com/gpu-4");
}

TEST(GpuResourceFilterTest, Matches) {
  GpuResourceFilter f;
  EXPECT_TRUE(f.Matches("nvidia.com/gpu"));
  EXPECT_TRUE(f.Matches("nvidia.com/gpu.shared"));
  EXPECT_TRUE(f.Matches("nvidia.com/mig-3g.20gb"));
  EXPECT_FALSE(f.Matches("nvidia.com/gpux"));
  EXPECT_FALSE(f.Matches("amd.com/gpu"));
}

}  // namespace
}  // namespace feedguard::agent
