// What GPU is this, and is there one at all?
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

namespace course {

// The facts about a device that lessons print and benchmarks divide by. Read with
// cudaDeviceGetAttribute: CUDA 13 removed clockRate, memoryClockRate and friends from
// cudaDeviceProp.
struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;  // compute capability
  int sm_count = 0;                // streaming multiprocessors
  std::size_t global_mem_bytes = 0;
  int memory_clock_khz = 0;  // peak memory clock, kHz (cudaDevAttrMemoryClockRate)
  int memory_bus_bits = 0;   // global memory bus width, bits
  int l2_cache_bytes = 0;
  int max_threads_per_block = 0;
  int max_threads_per_sm = 0;
  int shared_mem_per_block_optin = 0;  // bytes a block may request with the opt-in attribute
  int warp_size = 0;

  // Theoretical DRAM bandwidth in GB/s (1e9 bytes/s): 2 transfers per clock (double data rate)
  // x memory clock x bus width in bytes. Measured copies reach roughly 80-95% of it.
  double peak_dram_gbps() const {
    return 2.0 * memory_clock_khz * 1e3 * (memory_bus_bits / 8.0) / 1e9;
  }
  std::string compute_capability() const {
    return std::to_string(cc_major) + "." + std::to_string(cc_minor);
  }
};

// One cudaDeviceGetAttribute value of device `ordinal`. Throws CudaError.
int device_attribute(cudaDeviceAttr attr, int ordinal);

// Queries device `ordinal`. Throws CudaError for an invalid ordinal or no driver.
DeviceInfo query_device(int ordinal = 0);

// One line: "NVIDIA H200, compute capability 9.0, 132 SMs, 139.8 GiB, 4.8 TB/s peak DRAM"
std::string summary(const DeviceInfo& info);

// Is there a CUDA device this course can run on (compute capability 7.5 or newer)?
// It loads the driver library and asks the runtime how many devices there are: that initialises
// the driver but creates no context (lesson 01 measures this). `reason` says what was looked for
// and what the answer was when there is none.
struct DeviceAvailability {
  bool usable = false;
  int device_count = 0;
  std::string reason;  // empty when usable
};
DeviceAvailability check_device_available();

// Lesson binaries call this first: prints the reason as one line to stderr and returns false
// when there is no usable device.
bool require_device(const char* program);

}  // namespace course
