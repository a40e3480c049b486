// nvml_test.cc — OpenNvml against the stand-in library (agent/gpu/testdata, a test fixture), a
// library without NVML's entry points, and no library at all.
#include "agent/gpu/nvml.h"
#include "tests/fixtures/status_testing.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

namespace feedguard::agent::gpu {
namespace {

namespace fs = std::filesystem;

class NvmlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::random_device rd;
    file_ = fs::temp_directory_path() /
            ("fg-nvml-" + std::to_string(getpid()) + "-" + std::to_string(rd()) + ".txt");
    setenv("FG_NVML_STANDIN_FILE", file_.c_str(), 1);
    unsetenv("FG_NVML_STANDIN_INIT_RC");
  }
  void TearDown() override {
    unsetenv("FG_NVML_STANDIN_FILE");
    unsetenv("FG_NVML_STANDIN_INIT_RC");
    std::error_code ec;
    fs::remove(file_, ec);
  }
  void Gpus(const std::string& text) { std::ofstream(file_) << text; }

  fs::path file_;
};

TEST_F(NvmlTest, SamplesEveryGpuByPciAddress) {
  Gpus(
      "GPU-0000a100-1111-2222-3333-00000000a100 00000000:1B:00.0 87 40\n"
      "GPU-0000a104-1111-2222-3333-00000000a104 00000000:9C:00.0 12 3\n");
  auto nvml = OpenNvml(FEEDGUARD_NVML_STANDIN);
  ASSERT_TRUE(nvml.ok()) << nvml.status().ToString();
  auto s = (*nvml)->Sample();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_EQ(s->size(), 2u);
  const GpuSample& a = s->at("0000:1b:00.0");
  EXPECT_EQ(a.uuid, "gpu-0000a100-1111-2222-3333-00000000a100");
  EXPECT_EQ(a.gpu_percent, 87u);
  EXPECT_EQ(a.memory_percent, 40u);
  EXPECT_EQ(s->at("0000:9c:00.0").gpu_percent, 12u);

  // A later sample sees the new values; a GPU that went away is left out.
  Gpus("GPU-0000a100-1111-2222-3333-00000000a100 00000000:1B:00.0 5 1\n");
  s = (*nvml)->Sample();
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->size(), 1u);
  EXPECT_EQ(s->at("0000:1b:00.0").gpu_percent, 5u);
}

TEST_F(NvmlTest, NoLibraryIsNotFound) {
  auto nvml = OpenNvml("/nonexistent/libnvidia-ml.so.1");
  ASSERT_FALSE(nvml.ok());
  EXPECT_EQ(nvml.status().code(), StatusCode::kNotFound);
}

TEST_F(NvmlTest, ALibraryWithoutTheEntryPointsIsUnavailable) {
  auto nvml = OpenNvml("libm.so.6");
  ASSERT_TRUE(feedguard::testing::FailsWith(nvml, StatusCode::kUnavailable, "nvmlInit_v2"));
}

TEST_F(NvmlTest, InitFailureIsUnavailable) {
  setenv("FG_NVML_STANDIN_INIT_RC", "9", 1);  // NVML_ERROR_DRIVER_NOT_LOADED
  auto nvml = OpenNvml(FEEDGUARD_NVML_STANDIN);
  ASSERT_FALSE(nvml.ok());
  EXPECT_EQ(nvml.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(nvml.status().message().find("error 9"), std::string::npos);
}

}  // namespace
}  // namespace feedguard::agent::gpu
