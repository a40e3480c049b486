// gpu_ids_test.cc — device id forms, the /proc/driver/nvidia and sysfs readers, the resolver.
#include "agent/topology/gpu_ids.h"
#include "tests/fixtures/temp_dir.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

namespace feedguard::agent {
namespace {

namespace fs = std::filesystem;
using feedguard::testing::TempDir;
const std::string kDir = FEEDGUARD_TOPOLOGY_FIXTURES;

void Write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

TEST(GpuIdsTest, ParsesTheIdForms) {
  auto g = ParseGpuDeviceId("GPU-0000A100-1111-2222-3333-00000000A100");
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->base, "gpu-0000a100-1111-2222-3333-00000000a100");
  EXPECT_FALSE(g->mig);
  EXPECT_EQ(g->replica, -1);

  auto r = ParseGpuDeviceId("GPU-abc::7");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->base, "gpu-abc");
  EXPECT_EQ(r->replica, 7);

  auto m = ParseGpuDeviceId("MIG-c6d4f1ef-aaaa::2");
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(m->mig);
  EXPECT_TRUE(m->parent_gpu.empty());
  EXPECT_EQ(m->replica, 2);

  auto legacy = ParseGpuDeviceId("MIG-GPU-5d5ba0d6-1234/1/0");
  ASSERT_TRUE(legacy.ok());
  EXPECT_TRUE(legacy->mig);
  EXPECT_EQ(legacy->parent_gpu, "gpu-5d5ba0d6-1234");

  EXPECT_FALSE(ParseGpuDeviceId("").ok());
  EXPECT_FALSE(ParseGpuDeviceId("GPU-abc::").ok());
  EXPECT_FALSE(ParseGpuDeviceId("GPU-abc::x1").ok());
  EXPECT_FALSE(ParseGpuDeviceId("::3").ok());
  EXPECT_FALSE(ParseGpuDeviceId("MIG-GPU-abc").ok());
}

TEST(GpuIdsTest, ReadsFixtureProcTree) {
  auto m = ReadNvidiaProcGpus(kDir + "/server-2s-8gpu.nvidia-gpus");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->size(), 8u);
  EXPECT_EQ(m->at("gpu-0000a100-1111-2222-3333-00000000a100"), "0000:1b:00.0");
  EXPECT_EQ(m->at("gpu-0000a107-1111-2222-3333-00000000a107"), "0000:ca:00.0");
}

TEST(GpuIdsTest, MissingProcRootIsNotFound) {
  auto m = ReadNvidiaProcGpus(kDir + "/no-such-dir");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
}

TEST(GpuIdsTest, NvidiaSmiListGivesMigParents) {
  const std::string text =
      "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-aaaa)\n"
      "  MIG 1g.5gb      Device  0: (UUID: MIG-1111)\n"
      "  MIG 1g.5gb      Device  1: (UUID: MIG-2222)\n"
      "GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-bbbb)\n"
      "  MIG 3g.20gb     Device  0: (UUID: MIG-3333)\n";
  auto t = ParseNvidiaSmiList(text);
  ASSERT_TRUE(t.ok());
  ASSERT_EQ(t->size(), 3u);
  EXPECT_EQ(t->at("mig-1111"), "gpu-aaaa");
  EXPECT_EQ(t->at("mig-2222"), "gpu-aaaa");
  EXPECT_EQ(t->at("mig-3333"), "gpu-bbbb");
  EXPECT_FALSE(ParseNvidiaSmiList("  MIG 1g.5gb Device 0: (UUID: MIG-1)\n").ok());
}

TEST(GpuIdsTest, MigParentTableFromFile) {
  TempDir tmp;
  const fs::path dir = tmp.path();
  Write(dir / "mig.txt",
        "GPU 0: NVIDIA A100 (UUID: GPU-0000a105-1111-2222-3333-00000000a105)\n"
        "  MIG 2g.10gb     Device  0: (UUID: MIG-77aa)\n");
  auto t = LoadMigParentTable((dir / "mig.txt").string());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->at("mig-77aa"), "gpu-0000a105-1111-2222-3333-00000000a105");
  EXPECT_EQ(LoadMigParentTable((dir / "absent").string()).status().code(), StatusCode::kNotFound);
}

TEST(GpuIdsTest, ResolverMapsReplicasAndMigToThePhysicalGpu) {
  auto m = ReadNvidiaProcGpus(kDir + "/server-2s-8gpu.nvidia-gpus");
  ASSERT_TRUE(m.ok());
  const std::string gpu0 = "GPU-0000a100-1111-2222-3333-00000000a100";
  const std::string gpu5 = "GPU-0000a105-1111-2222-3333-00000000a105";
  GpuIdResolver r(*m, {{"mig-1111", "gpu-0000a105-1111-2222-3333-00000000a105"}});
  EXPECT_EQ(*r.BusIdOf(gpu0), "0000:1b:00.0");
  EXPECT_EQ(*r.BusIdOf(gpu0 + "::3"), "0000:1b:00.0");
  EXPECT_EQ(*r.BusIdOf("0000a100-1111-2222-3333-00000000a100"), "0000:1b:00.0");  // bare UUID
  EXPECT_EQ(*r.BusIdOf("MIG-1111"), "0000:ab:00.0");
  EXPECT_EQ(*r.BusIdOf("MIG-1111::1"), "0000:ab:00.0");
  EXPECT_EQ(*r.BusIdOf("MIG-" + gpu5 + "/2/0"), "0000:ab:00.0");  // legacy form
  auto unknown_mig = r.BusIdOf("MIG-9999");
  ASSERT_FALSE(unknown_mig.ok());
  EXPECT_EQ(unknown_mig.status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(r.BusIdOf("GPU-not-here").ok());

  auto all = r.ResolveAll({gpu0, "GPU-not-here"});
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].bus_id, "0000:1b:00.0");
  EXPECT_TRUE(all[0].error.empty());
  EXPECT_EQ(all[1].bus_id, "");
  EXPECT_FALSE(all[1].error.empty());
}

TEST(GpuIdsTest, ParsesDraDeviceIds) {
  auto g = ParseGpuDeviceId("gpu.nvidia.com/gpu-3");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->dra_driver, "gpu.nvidia.com");
  EXPECT_EQ(g->dra_device, "gpu-3");
  EXPECT_EQ(g->minor, 3);
  EXPECT_FALSE(g->mig);
  auto m = ParseGpuDeviceId("gpu.nvidia.com/gpu-12-mig-9-4-2");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->minor, 12);
  EXPECT_TRUE(m->mig);
  auto v = ParseGpuDeviceId("gpu.nvidia.com/gpu-vfio-0");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->minor, -1);
  EXPECT_EQ(ParseGpuDeviceId("gpu.nvidia.com/gpu-1x")->minor, -1);
  EXPECT_FALSE(ParseGpuDeviceId("gpu.nvidia.com/").ok());
  EXPECT_FALSE(ParseGpuDeviceId("gpu.nvidia.com/a/b").ok());
  // The legacy MIG form has a slash too, but no driver name before it.
  auto legacy = ParseGpuDeviceId("MIG-GPU-5d5ba0d6-1234/1/0");
  ASSERT_TRUE(legacy.ok());
  EXPECT_TRUE(legacy->dra_driver.empty());
}

TEST(GpuIdsTest, ReadsMinorNumbers) {
  auto m = ReadNvidiaProcMinors(kDir + "/server-2s-8gpu.nvidia-gpus");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->size(), 8u);
  EXPECT_EQ(m->at(0), "0000:1b:00.0");
  EXPECT_EQ(m->at(7), "0000:ca:00.0");
  EXPECT_EQ(ReadNvidiaProcMinors(kDir + "/no-such-dir").status().code(), StatusCode::kNotFound);
}

TEST(GpuIdsTest, NormalizesPciBusIds) {
  EXPECT_EQ(NormalizePciBusId("00000000:3B:00.0"), "0000:3b:00.0");
  EXPECT_EQ(NormalizePciBusId("0000:3b:00.0"), "0000:3b:00.0");
  EXPECT_EQ(NormalizePciBusId(" 0001:AB:1f.7\n"), "0001:ab:1f.7");
  EXPECT_EQ(NormalizePciBusId("3b:00.0"), "");
  EXPECT_EQ(NormalizePciBusId("gpu-0"), "");
  EXPECT_EQ(NormalizePciBusId("zzzz:3b:00.0"), "");
}

// ResourceSlices as the NVIDIA DRA driver publishes them (resource.k8s.io/v1: attributes on the
// device; v1beta1: under "basic"), as `kubectl get resourceslices -o json` prints them.
constexpr char kSlices[] = R"({
  "apiVersion": "v1", "kind": "List", "items": [
  {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
   "spec": {"driver": "gpu.nvidia.com", "nodeName": "gpu-node-1",
            "pool": {"name": "gpu-node-1", "generation": 1, "resourceSliceCount": 1},
            "devices": [
     {"name": "gpu-0", "attributes": {
        "type": {"string": "gpu"},
        "uuid": {"string": "GPU-0000a104-1111-2222-3333-00000000a104"},
        "pcieBusID": {"string": "0000:9C:00.0"},
        "resource.kubernetes.io/pcieRoot": {"string": "pci0000:98"}}},
     {"name": "gpu-1", "attributes": {
        "uuid": {"string": "GPU-0000a107-1111-2222-3333-00000000a107"}}},
     {"name": "gpu-1-mig-9-4-2", "attributes": {
        "type": {"string": "mig"},
        "uuid": {"string": "MIG-77aa"},
        "parentUUID": {"string": "GPU-0000a107-1111-2222-3333-00000000a107"}}}]}},
  {"apiVersion": "resource.k8s.io/v1beta1", "kind": "ResourceSlice",
   "spec": {"driver": "gpu.nvidia.com", "nodeName": "gpu-node-1",
            "pool": {"name": "gpu-node-1"},
            "devices": [{"name": "gpu-vfio-0", "basic": {"attributes": {
              "gpu.nvidia.com/pcieBusID": {"string": "0000:29:00.0"}}}}]}},
  {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
   "spec": {"driver": "gpu.nvidia.com", "nodeName": "other-node",
            "devices": [{"name": "gpu-7", "attributes": {
              "pcieBusID": {"string": "0000:01:00.0"}}}]}}]})";

TEST(GpuIdsTest, ParsesResourceSlices) {
  auto t = ParseResourceSlices(kSlices, "gpu-node-1");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->size(), 4u);
  EXPECT_EQ(t->at("gpu.nvidia.com/gpu-0").bus_id, "0000:9c:00.0");
  EXPECT_EQ(t->at("gpu.nvidia.com/gpu-0").uuid, "gpu-0000a104-1111-2222-3333-00000000a104");
  EXPECT_EQ(t->at("gpu.nvidia.com/gpu-1").bus_id, "");
  EXPECT_EQ(t->at("gpu.nvidia.com/gpu-1-mig-9-4-2").parent_uuid,
            "gpu-0000a107-1111-2222-3333-00000000a107");
  EXPECT_EQ(t->at("gpu.nvidia.com/gpu-vfio-0").bus_id, "0000:29:00.0");
  EXPECT_EQ(t->count("gpu.nvidia.com/gpu-7"), 0u);  // another node's
  // Without a node name every slice counts.
  EXPECT_EQ(ParseResourceSlices(kSlices)->size(), 5u);

  EXPECT_EQ(ParseResourceSlices("{").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseResourceSlices(R"({"items": 3})").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseResourceSlices(R"([{"spec": {"devices": []}}])").status().code(),
            StatusCode::kInvalidArgument);  // no driver
}

TEST(GpuIdsTest, ResolverMapsDraDevices) {
  auto uuids = ReadNvidiaProcGpus(kDir + "/server-2s-8gpu.nvidia-gpus");
  auto minors = ReadNvidiaProcMinors(kDir + "/server-2s-8gpu.nvidia-gpus");
  ASSERT_TRUE(uuids.ok() && minors.ok());
  GpuIdResolver r(*uuids, {});
  // Minor numbers alone: "gpu-<minor>" and its MIG slices.
  r.SetMinors(*minors);
  EXPECT_EQ(*r.BusIdOf("gpu.nvidia.com/gpu-0"), "0000:1b:00.0");
  EXPECT_EQ(*r.BusIdOf("gpu.nvidia.com/gpu-7-mig-9-4-2"), "0000:ca:00.0");
  auto absent = r.BusIdOf("gpu.nvidia.com/gpu-9");
  ASSERT_FALSE(absent.ok());
  EXPECT_EQ(absent.status().code(), StatusCode::kNotFound);
  EXPECT_NE(absent.status().message().find("minor number 9"), std::string::npos);
  EXPECT_FALSE(r.BusIdOf("gpu.nvidia.com/gpu-vfio-0").ok());

  // The driver's ResourceSlices win over minor numbers (they name the device's own GPU).
  r.SetDraDevices(*ParseResourceSlices(kSlices, "gpu-node-1"));
  EXPECT_EQ(*r.BusIdOf("gpu.nvidia.com/gpu-0"), "0000:9c:00.0");            // pcieBusID
  EXPECT_EQ(*r.BusIdOf("gpu.nvidia.com/gpu-1"), "0000:ca:00.0");            // uuid
  EXPECT_EQ(*r.BusIdOf("gpu.nvidia.com/gpu-1-mig-9-4-2"), "0000:ca:00.0");  // parentUUID
  EXPECT_EQ(*r.BusIdOf("gpu.nvidia.com/gpu-vfio-0"), "0000:29:00.0");
  EXPECT_EQ(*r.BusIdOf("gpu.nvidia.com/gpu-3"), "0000:4a:00.0");  // not in a slice: minor

  auto all = r.ResolveAll({"gpu.nvidia.com/gpu-9"});
  ASSERT_EQ(all.size(), 1u);
  EXPECT_TRUE(all[0].bus_id.empty());
  EXPECT_NE(all[0].error.find("gpu.nvidia.com/gpu-9"), std::string::npos);
}

TEST(GpuIdsTest, SysfsPciLocality) {
  TempDir tmp;
  const fs::path dir = tmp.path();
  Write(dir / "0000:3b:00.0/numa_node", "1\n");
  Write(dir / "0000:3b:00.0/local_cpulist", "32-63,96-127\n");
  Write(dir / "0000:00:1e.0/numa_node", "-1\n");
  Write(dir / "0000:00:1e.0/local_cpulist", "0-15\n");
  Write(dir / "0000:00:05.0/numa_node", "junk\n");

  auto a = ReadSysfsPciLocality("0000:3B:00.0", dir.string());
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->numa, 1);
  EXPECT_EQ(a->local_cpus.ToString(), "32-63,96-127");

  auto b = ReadSysfsPciLocality("0000:00:1e.0", dir.string());
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->numa, -1);
  EXPECT_EQ(b->local_cpus.ToString(), "0-15");

  EXPECT_EQ(ReadSysfsPciLocality("0000:00:05.0", dir.string()).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadSysfsPciLocality("0000:99:00.0", dir.string()).status().code(),
            StatusCode::kNotFound);
}

}  // namespace
}  // namespace feedguard::agent
