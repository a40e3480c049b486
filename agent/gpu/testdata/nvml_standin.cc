// nvml_standin.cc — TEST FIXTURE, not NVML: a stand-in libnvidia-ml with the seven entry points
// the agent uses, so the NVML path runs without a GPU. Built only for tests
// (libfg_nvml_standin_for_tests.so) and loaded through --nvml-library / OpenNvml(path).
//
// Its GPUs come from the file named by FG_NVML_STANDIN_FILE, re-read on every
// nvmlDeviceGetCount_v2 (so a test can change utilisation between samples), one GPU per line:
//   <uuid> <pci bus id as NVML prints it, e.g. 00000000:1B:00.0> <gpu %> <memory %>
// FG_NVML_STANDIN_INIT_RC=<n>: nvmlInit_v2 returns n (e.g. 9, NVML_ERROR_DRIVER_NOT_LOADED).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "agent/gpu/nvml_abi.h"

namespace {

using namespace feedguard::agent::gpu::nvml_abi;  // NOLINT(google-build-using-namespace)

struct StandinGpu {
  std::string uuid;
  std::string bus_id;
  unsigned gpu = 0;
  unsigned memory = 0;
};

struct State {
  std::mutex mu;
  std::vector<StandinGpu> gpus;
  int inits = 0;
};

State& TheState() {
  static State s;  // the fixture's whole state, for the life of the process
  return s;
}

void Reload(State& s) {
  s.gpus.clear();
  const char* path = std::getenv("FG_NVML_STANDIN_FILE");
  if (path == nullptr) return;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    StandinGpu g;
    if (f >> g.uuid >> g.bus_id >> g.gpu >> g.memory) s.gpus.push_back(g);
  }
}

// A device handle is 1 + its index.
bool Index(nvmlDevice_t dev, size_t* i) {
  const auto v = reinterpret_cast<uintptr_t>(dev);
  State& s = TheState();
  if (v == 0 || v > s.gpus.size()) return false;
  *i = v - 1;
  return true;
}

}  // namespace

extern "C" {

int nvmlInit_v2() {
  if (const char* rc = std::getenv("FG_NVML_STANDIN_INIT_RC")) return std::atoi(rc);
  State& s = TheState();
  std::lock_guard<std::mutex> l(s.mu);
  ++s.inits;
  return kSuccess;
}

int nvmlShutdown() {
  State& s = TheState();
  std::lock_guard<std::mutex> l(s.mu);
  if (s.inits == 0) return kUninitialized;
  --s.inits;
  return kSuccess;
}

int nvmlDeviceGetCount_v2(unsigned int* count) {
  State& s = TheState();
  std::lock_guard<std::mutex> l(s.mu);
  if (s.inits == 0) return kUninitialized;
  if (count == nullptr) return kInvalidArgument;
  Reload(s);
  *count = static_cast<unsigned int>(s.gpus.size());
  return kSuccess;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  State& s = TheState();
  std::lock_guard<std::mutex> l(s.mu);
  if (device == nullptr || index >= s.gpus.size()) return kInvalidArgument;
  *device = reinterpret_cast<nvmlDevice_t>(static_cast<uintptr_t>(index) + 1);
  return kSuccess;
}

int nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length) {
  State& s = TheState();
  std::lock_guard<std::mutex> l(s.mu);
  size_t i = 0;
  if (uuid == nullptr || !Index(device, &i)) return kInvalidArgument;
  if (s.gpus[i].uuid.size() + 1 > length) return kInsufficientSize;
  std::memcpy(uuid, s.gpus[i].uuid.c_str(), s.gpus[i].uuid.size() + 1);
  return kSuccess;
}

int nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  State& s = TheState();
  std::lock_guard<std::mutex> l(s.mu);
  size_t i = 0;
  if (pci == nullptr || !Index(device, &i)) return kInvalidArgument;
  std::memset(pci, 0, sizeof *pci);
  std::snprintf(pci->busId, sizeof pci->busId, "%s", s.gpus[i].bus_id.c_str());
  pci->pciDeviceId = 0x20b010de;
  return kSuccess;
}

int nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* u) {
  State& s = TheState();
  std::lock_guard<std::mutex> l(s.mu);
  size_t i = 0;
  if (u == nullptr || !Index(device, &i)) return kInvalidArgument;
  u->gpu = s.gpus[i].gpu;
  u->memory = s.gpus[i].memory;
  return kSuccess;
}

}  // extern "C"
