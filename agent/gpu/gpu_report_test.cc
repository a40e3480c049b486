// gpu_report_test.cc — the node report carries each trainer's GPU busy % when NVML is there (the
// stand-in library, a test fixture), and nothing when it is not.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "agent/enforcer/fake_node.h"
#include "agent/engine/engine_testing.h"
#include "agent/engine/node_engine.h"
#include "agent/gpu/nvml.h"

namespace feedguard::agent {
namespace {

namespace fs = std::filesystem;
namespace v1 = feedguard::v1;
using testutil::FakeNode;

const std::string kFixtures = FEEDGUARD_TOPOLOGY_FIXTURES;
// ws-1s-1gpu: one GPU at 0000:01:00.0.
const std::string kGpu = "GPU-00004090-1111-2222-3333-000000004090";

class GpuReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::random_device rd;
    file_ = fs::temp_directory_path() /
            ("fg-nvml-report-" + std::to_string(getpid()) + "-" + std::to_string(rd()));
    setenv("FG_NVML_STANDIN_FILE", file_.c_str(), 1);
    trainer_ = node_.AddPod("aaaaaaaa-0001", QosClass::kBurstable, {"t1"}, "ml");
    other_ = node_.AddPod("aaaaaaaa-0002", QosClass::kBurstable, {"t2"}, "ml");
  }
  void TearDown() override {
    unsetenv("FG_NVML_STANDIN_FILE");
    std::error_code ec;
    fs::remove(file_, ec);
  }

  std::shared_ptr<NodeEngine> Engine(gpu::GpuMonitorPtr monitor) {
    auto o = testutil::FakeNodeEngineOptions(node_, kFixtures + "/ws-1s-1gpu.xml");
    auto uuids = ReadNvidiaProcGpus(kFixtures + "/ws-1s-1gpu.nvidia-gpus");
    EXPECT_TRUE(uuids.ok());
    o.gpu_resolver = std::make_shared<GpuIdResolver>(*uuids, MigParentTable{});
    o.gpu_monitor = std::move(monitor);
    return std::make_shared<NodeEngine>(std::move(o));
  }

  v1::NodeFence Fence() const {
    v1::NodeFence f;
    f.set_node_name("node-a");
    f.set_version(1);
    auto* p = f.add_policies();
    p->set_name("p");
    p->set_neighbour_fence(v1::IDLE);
    p->mutable_trainer_cpu()->set_cores_per_gpu(1);
    for (const PodIdentity* pod : {&trainer_, &other_}) {
      auto* t = f.add_trainers();
      t->mutable_pod()->set_uid(pod->uid);
      t->mutable_pod()->set_namespace_(pod->ns);
      t->mutable_pod()->set_name(pod->name);
      t->mutable_pod()->set_qos_class(v1::BURSTABLE);
      t->mutable_pod()->add_containers()->set_container_id(pod->container_ids[0]);
      t->set_policy("p");
    }
    // The first holds two time-sliced replicas of the GPU (counted once for busy %); the second
    // names a GPU this node does not have.
    f.mutable_trainers(0)->add_gpu_ids(kGpu + "::0");
    f.mutable_trainers(0)->add_gpu_ids(kGpu + "::1");
    f.mutable_trainers(1)->add_gpu_ids("GPU-not-on-this-node");
    return f;
  }

  const v1::PodReport& Pod(const v1::NodeReport& r, const std::string& uid) {
    for (const auto& p : r.pods()) {
      if (p.uid() == uid && p.role() == v1::PodReport::TRAINER) return p;
    }
    ADD_FAILURE() << "no trainer " << uid;
    static const v1::PodReport kNone;
    return kNone;
  }

  FakeNode node_{cgroup::CgroupVersion::kV2, cgroup::KubeletDriver::kSystemd};
  fs::path file_;
  PodIdentity trainer_, other_;
};

TEST_F(GpuReportTest, TrainersCarryTheirGpusBusyPercent) {
  std::ofstream(file_) << kGpu << " 00000000:01:00.0 37 12\n";
  auto nvml = gpu::OpenNvml(FEEDGUARD_NVML_STANDIN);
  ASSERT_TRUE(nvml.ok()) << nvml.status().ToString();
  auto engine = Engine(*nvml);
  auto r = engine->Apply(Fence());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Pod(*r, trainer_.uid).gpus_sampled(), 1u);
  EXPECT_DOUBLE_EQ(Pod(*r, trainer_.uid).gpu_busy_percent(), 37.0);
  EXPECT_EQ(Pod(*r, other_.uid).gpus_sampled(), 0u);  // its GPU is unknown here

  // The periodic report samples again.
  std::ofstream(file_) << kGpu << " 00000000:01:00.0 91 50\n";
  auto again = engine->CurrentReport();
  ASSERT_TRUE(again.has_value());
  EXPECT_DOUBLE_EQ(Pod(*again, trainer_.uid).gpu_busy_percent(), 91.0);
}

TEST_F(GpuReportTest, WithoutNvmlNothingIsReported) {
  auto nvml = gpu::OpenNvml("/nonexistent/libnvidia-ml.so.1");
  ASSERT_FALSE(nvml.ok());
  auto engine = Engine(nullptr);
  auto r = engine->Apply(Fence());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (const auto& p : r->pods()) {
    EXPECT_EQ(p.gpus_sampled(), 0u) << p.uid();
    EXPECT_EQ(p.gpu_busy_percent(), 0.0) << p.uid();
  }
}

}  // namespace
}  // namespace feedguard::agent
