// podresources_client_test.cc — the client against a real grpc++ PodResourcesLister server
// listening on a temporary unix socket.
#include "agent/topology/podresources_client.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <random>

#include "kubelet/podresources/v1/api.grpc.pb.h"

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

::v1::ListPodResourcesResponse SampleResponse() {
  ::v1::ListPodResourcesResponse r;
  {
    auto* p = r.add_pod_resources();
    p->set_namespace_("ml");
    p->set_name("trainer-a");
    auto* c = p->add_containers();
    c->set_name("main");
    AddDevices(c, "nvidia.com/gpu", {"GPU-aaaa", "GPU-bbbb"});
    AddDevices(c, "example.com/nic", {"nic0"});
    c->add_cpu_ids(4);
    auto* side = p->add_containers();
    side->set_name("sidecar");
    AddDevices(side, "nvidia.com/gpu.shared", {"GPU-cccc::1"});
  }
  {
    auto* p = r.add_pod_resources();
    p->set_namespace_("ml");
    p->set_name("mig-job");
    AddDevices(p->add_containers(), "nvidia.com/mig-1g.5gb", {"MIG-1111"});
  }
  {
    auto* p = r.add_pod_resources();
    p->set_namespace_("web");
    p->set_name("nginx");
    p->add_containers()->set_name("nginx");
  }
  return r;
}

class PodResourcesClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::random_device rd;
    dir_ = fs::temp_directory_path() /
           ("fg-podres-" + std::to_string(getpid()) + "-" + std::to_string(rd()));
    fs::create_directories(dir_);
    endpoint_ = "unix:" + (dir_ / "kubelet.sock").string();
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  void StartServer(::v1::ListPodResourcesResponse response) {
    service_ = std::make_unique<FakeKubelet>(std::move(response));
    grpc::ServerBuilder b;
    b.AddListeningPort(endpoint_, grpc::InsecureServerCredentials());
    b.RegisterService(service_.get());
    server_ = b.BuildAndStart();
    ASSERT_NE(server_, nullptr);
  }

  fs::path dir_;
  std::string endpoint_;
  std::unique_ptr<FakeKubelet> service_;
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(PodResourcesClientTest, ListsGpuDevicesPerPod) {
  StartServer(SampleResponse());
  PodResourcesClientOptions opts;
  opts.endpoint = endpoint_;
  opts.timeout = std::chrono::seconds(30);  // generous: the test machine may be busy
  PodResourcesClient client(opts);
  auto m = client.ListPodGpus();
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->size(), 2u);  // nginx has no GPUs
  const auto& a = m->at(PodKey{"ml", "trainer-a"});
  EXPECT_EQ(a, (std::vector<std::string>{"GPU-aaaa", "GPU-bbbb", "GPU-cccc::1"}));
  EXPECT_EQ(m->at(PodKey{"ml", "mig-job"}), std::vector<std::string>{"MIG-1111"});
}

TEST_F(PodResourcesClientTest, FilterIsConfigurable) {
  StartServer(SampleResponse());
  PodResourcesClientOptions opts;
  opts.endpoint = endpoint_;
  opts.timeout = std::chrono::seconds(30);
  opts.filter.exact = {"nvidia.com/gpu"};
  opts.filter.prefixes = {};
  PodResourcesClient client(opts);
  auto m = client.ListPodGpus();
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
