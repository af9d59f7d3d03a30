// The CUDA Driver API (libcuda), loaded at run time.
//
// Why not link -lcuda? libcuda.so.1 ships with the NVIDIA *driver*, not the toolkit. A binary
// linked against it does not even start on a machine without the driver (a CI box, a build
// host): the dynamic loader refuses it before main(). The CUDA runtime itself never links
// libcuda; it dlopen()s libcuda.so.1 on its first call (see docs/runtime-vs-driver-api.md). We do
// the same, so every binary starts everywhere and can say clearly that there is no driver.
//
// Usage:
//   const course::DriverApi& cu = course::driver();   // throws DriverUnavailable
//   CU_CHECK(cu.cuInit(0));
//
// The members are declared with the prototypes of <cuda.h>, and <cuda.h> maps names such as
// cuCtxCreate to the versioned symbol of this toolkit (cuCtxCreate_v4 in CUDA 13), so both the
// member name and the symbol looked up follow the header the program was compiled against.
#pragma once

#include <cuda.h>

#include <stdexcept>
#include <string>

namespace course {

// libcuda.so.1 could not be loaded or lacks a required entry point.
class DriverUnavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A Driver API call returned something other than CUDA_SUCCESS.
class DriverError : public std::runtime_error {
 public:
  DriverError(CUresult code, const char* call, const char* file, int line);
  CUresult code() const noexcept { return code_; }

 private:
  CUresult code_;
};

struct DriverApi {
  // Initialisation and devices
  decltype(&::cuInit) cuInit;
  decltype(&::cuDriverGetVersion) cuDriverGetVersion;
  decltype(&::cuGetErrorName) cuGetErrorName;
  decltype(&::cuGetErrorString) cuGetErrorString;
  decltype(&::cuDeviceGet) cuDeviceGet;
  decltype(&::cuDeviceGetCount) cuDeviceGetCount;
  decltype(&::cuDeviceGetName) cuDeviceGetName;
  // Contexts
  decltype(&::cuCtxCreate) cuCtxCreate;
  decltype(&::cuCtxDestroy) cuCtxDestroy;
  decltype(&::cuCtxGetCurrent) cuCtxGetCurrent;
  decltype(&::cuCtxSetCurrent) cuCtxSetCurrent;
  decltype(&::cuCtxPushCurrent) cuCtxPushCurrent;
  decltype(&::cuCtxPopCurrent) cuCtxPopCurrent;
  decltype(&::cuCtxGetDevice) cuCtxGetDevice;
  decltype(&::cuCtxGetApiVersion) cuCtxGetApiVersion;
  decltype(&::cuDevicePrimaryCtxRetain) cuDevicePrimaryCtxRetain;
  decltype(&::cuDevicePrimaryCtxRelease) cuDevicePrimaryCtxRelease;
  decltype(&::cuDevicePrimaryCtxGetState) cuDevicePrimaryCtxGetState;
  // Memory, pointers, modules
  decltype(&::cuMemAlloc) cuMemAlloc;
  decltype(&::cuMemFree) cuMemFree;
  decltype(&::cuPointerGetAttribute) cuPointerGetAttribute;
  decltype(&::cuModuleGetLoadingMode) cuModuleGetLoadingMode;
  // Library management and launches (lesson 12 loads its plan's kernels this way)
  decltype(&::cuLibraryLoadData) cuLibraryLoadData;
  decltype(&::cuLibraryUnload) cuLibraryUnload;
  decltype(&::cuLibraryGetKernel) cuLibraryGetKernel;
  decltype(&::cuKernelSetAttribute) cuKernelSetAttribute;
  decltype(&::cuLaunchKernel) cuLaunchKernel;
  decltype(&::cuLaunchKernelEx) cuLaunchKernelEx;  // launch attributes (lesson 12: PDL)
};

// Loads libcuda.so.1 once (thread-safe) and returns its entry points. Loading the library does
// not initialise the driver: that is cuInit's job (or the runtime's first call).
// Throws DriverUnavailable naming the library and dlerror()'s text.
const DriverApi& driver();

// True if libcuda.so.1 can be loaded; `why` receives dlerror()'s text when it cannot.
bool driver_library_present(std::string* why = nullptr);

// "CUDA_ERROR_NOT_INITIALIZED (initialization error)"; works before cuInit.
std::string describe(CUresult code);

inline void check_driver(CUresult code, const char* call, const char* file, int line) {
  if (code != CUDA_SUCCESS) throw DriverError(code, call, file, line);
}

}  // namespace course

#define CU_CHECK(call) ::course::check_driver((call), #call, __FILE__, __LINE__)
