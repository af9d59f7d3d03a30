#include "common/device.hpp"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <sstream>

#include "common/cuda_check.hpp"
#include "common/driver_api.hpp"

namespace course {

int device_attribute(cudaDeviceAttr attr, int ordinal) {
  int value = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&value, attr, ordinal));
  return value;
}

DeviceInfo query_device(int ordinal) {
  DeviceInfo d;
  d.ordinal = ordinal;
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, ordinal));
  d.name = prop.name;
  d.global_mem_bytes = prop.totalGlobalMem;
  d.cc_major = device_attribute(cudaDevAttrComputeCapabilityMajor, ordinal);
  d.cc_minor = device_attribute(cudaDevAttrComputeCapabilityMinor, ordinal);
  d.sm_count = device_attribute(cudaDevAttrMultiProcessorCount, ordinal);
  d.memory_clock_khz = device_attribute(cudaDevAttrMemoryClockRate, ordinal);
  d.memory_bus_bits = device_attribute(cudaDevAttrGlobalMemoryBusWidth, ordinal);
  d.l2_cache_bytes = device_attribute(cudaDevAttrL2CacheSize, ordinal);
  d.max_threads_per_block = device_attribute(cudaDevAttrMaxThreadsPerBlock, ordinal);
  d.max_threads_per_sm = device_attribute(cudaDevAttrMaxThreadsPerMultiProcessor, ordinal);
  d.shared_mem_per_block_optin = device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, ordinal);
  d.warp_size = device_attribute(cudaDevAttrWarpSize, ordinal);
  return d;
}

std::string summary(const DeviceInfo& d) {
  std::ostringstream out;
  out.precision(1);
  out << std::fixed << d.name << ", compute capability " << d.compute_capability() << ", "
      << d.sm_count << " SMs, " << d.global_mem_bytes / double(1ull << 30) << " GiB, "
      << d.peak_dram_gbps() << " GB/s theoretical DRAM bandwidth";
  return out.str();
}

DeviceAvailability check_device_available() {
  DeviceAvailability a;
  std::string why;
  if (!driver_library_present(&why)) {
    a.reason = "no CUDA driver: " + why;
    return a;
  }
  const cudaError_t err = cudaGetDeviceCount(&a.device_count);
  if (err != cudaSuccess) {
    a.device_count = 0;
    a.reason = "no CUDA device: cudaGetDeviceCount() returned " + describe(err);
    return a;
  }
  for (int i = 0; i < a.device_count; ++i) {
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, i) == cudaSuccess &&
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, i) == cudaSuccess &&
        major * 10 + minor >= 75) {
      a.usable = true;
      return a;
    }
  }
  a.reason = "no usable CUDA device: " + std::to_string(a.device_count) +
             " device(s) found, none of compute capability 7.5 (Turing) or newer";
  return a;
}

bool require_device(const char* program) {
  const DeviceAvailability a = check_device_available();
  if (!a.usable) std::fprintf(stderr, "%s: %s\n", program, a.reason.c_str());
  return a.usable;
}

}  // namespace course
