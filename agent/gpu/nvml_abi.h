// nvml_abi.h — NVML's C ABI, only what the agent uses (nvml.h of any driver since R450): the
// types at global scope under NVML's own struct tags, so that the agent's function pointers
// (nvml.cc) and the test stand-in's definitions (testdata/nvml_standin.cc) have one type each —
// calling a function through a pointer of another type is undefined behaviour, and clang's
// -fsanitize=function (the ASan+UBSan tier) reports it.
#pragma once

extern "C" {

typedef int nvmlReturn_t;  // an enum in nvml.h; NVML_SUCCESS = 0
typedef struct nvmlDevice_st* nvmlDevice_t;
typedef struct nvmlUtilization_st {
  unsigned int gpu;
  unsigned int memory;
} nvmlUtilization_t;
typedef struct nvmlPciInfo_st {  // the _v3 layout
  char busIdLegacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[32];
} nvmlPciInfo_t;

}  // extern "C"

namespace feedguard::agent::gpu::nvml_abi {

inline constexpr nvmlReturn_t kSuccess = 0;
inline constexpr nvmlReturn_t kUninitialized = 1;     // NVML_ERROR_UNINITIALIZED
inline constexpr nvmlReturn_t kInvalidArgument = 2;   // NVML_ERROR_INVALID_ARGUMENT
inline constexpr nvmlReturn_t kInsufficientSize = 7;  // NVML_ERROR_INSUFFICIENT_SIZE
inline constexpr unsigned int kUuidBufferSize = 96;   // NVML_DEVICE_UUID_V2_BUFFER_SIZE

// The entry points, by the names the agent looks up.
using InitFn = nvmlReturn_t (*)();                                         // nvmlInit_v2
using ShutdownFn = nvmlReturn_t (*)();                                     // nvmlShutdown
using GetCountFn = nvmlReturn_t (*)(unsigned int*);                        // nvmlDeviceGetCount_v2
using GetHandleByIndexFn = nvmlReturn_t (*)(unsigned int, nvmlDevice_t*);  // ..ByIndex_v2
using GetUuidFn = nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned int);     // nvmlDeviceGetUUID
using GetPciInfoFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlPciInfo_t*);       // ..GetPciInfo_v3
using GetUtilizationFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlUtilization_t*);  // ..Rates

}  // namespace feedguard::agent::gpu::nvml_abi
