// Lesson 12: device code loaded the way a TensorRT plan loads its kernels.
//
// The engine's kernels (engine_kernels.cu) are not linked into the program as ordinary CUDA
// code: the build compiles them into a fatbinary (SASS for the build's GPUs + PTX) and embeds its
// bytes; the builder copies those bytes into the plan; deserialising hands them to the Driver
// API's library management:
//   cuLibraryLoadData   the fatbinary -> a CUlibrary (context-independent: it is loaded into a
//                       context when a kernel of it is first launched there)
//   cuLibraryGetKernel  a symbol name -> a CUkernel
//   cuLaunchKernel      launches it (a CUkernel may be passed where a CUfunction is expected:
//                       CUDA Driver API, "Library Management"), on a runtime stream: cudaStream_t
//                       and CUstream are the same handle
// The libcuda entry points come through common/driver_api.hpp (loaded at run time).
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace lesson12 {

// The fatbinary of engine_kernels.cu this program was built with (embedded at build time).
const std::vector<std::uint8_t>& built_kernel_image();
// What it holds, e.g. "sm_90 SASS + compute_90 PTX": the build's CUDA architectures.
const char* built_kernel_targets();

class KernelLibrary {
 public:
  // Loads `image` (a fatbinary, cubin or NUL-terminated PTX). The runtime's primary context of
  // the current device must be usable (the caller has called cudaSetDevice / cudaFree(0)).
  // Throws course::DriverError naming the call if the driver refuses it (e.g. no SASS for this
  // GPU and no PTX it can JIT).
  explicit KernelLibrary(const std::vector<std::uint8_t>& image);
  ~KernelLibrary();
  KernelLibrary(const KernelLibrary&) = delete;
  KernelLibrary& operator=(const KernelLibrary&) = delete;

  // The kernel `symbol` (cached; thread-safe). Throws std::runtime_error naming the symbol if the
  // image has no such kernel.
  CUkernel kernel(const std::string& symbol);

  // Launches `symbol` with one argument, `args` (a struct passed by value), on `stream`.
  // dynamic_smem above 48 KiB raises the kernel's limit first (once per kernel and device).
  // programmatic: launch with CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION through
  // cuLaunchKernelEx (programmatic dependent launch: the kernel may start before the previous
  // kernel in the stream has finished, and must wait for it itself; engine_kernels.cu's
  // pdl_wait does). Only for kernels written for it; a stream capture records it as a
  // programmatic edge of the graph.
  // cluster_z > 1: blocks are grouped into thread-block clusters of (1, 1, cluster_z)
  // (CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION; compute capability 9.0; grid.z a multiple of it).
  template <class Args>
  void launch(const std::string& symbol, dim3 grid, dim3 block, std::size_t dynamic_smem,
              cudaStream_t stream, const Args& args, bool programmatic = false,
              unsigned cluster_z = 1) {
    void* params[] = {const_cast<Args*>(&args)};
    launch_raw(symbol, grid, block, dynamic_smem, stream, params, programmatic, cluster_z);
  }
  void launch_raw(const std::string& symbol, dim3 grid, dim3 block, std::size_t dynamic_smem,
                  cudaStream_t stream, void** params, bool programmatic = false,
                  unsigned cluster_z = 1);

 private:
  CUlibrary library_ = nullptr;
  std::mutex mutex_;
  std::map<std::string, CUkernel> kernels_;
  std::map<std::string, std::size_t> smem_limit_;  // "symbol@device" -> dynamic smem allowed
};

}  // namespace lesson12
