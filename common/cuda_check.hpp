// Error checking for the CUDA Runtime API.
//
// Every runtime call in this course goes through CUDA_CHECK. A failure throws course::CudaError,
// whose message names the call, file:line, the error's enum name and the runtime's text:
//
//   cudaMalloc(&ptr, bytes) failed at reduction.cu:42: cudaErrorMemoryAllocation (out of memory)
//
// Library code never calls exit(): the lesson binaries catch, print and return non-zero, and
// RAII owners release what was allocated on the way out.
#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace course {

class CudaError : public std::runtime_error {
 public:
  CudaError(cudaError_t code, const char* call, const char* file, int line);
  cudaError_t code() const noexcept { return code_; }

 private:
  cudaError_t code_;
};

// Throws CudaError unless code == cudaSuccess.
inline void check_cuda(cudaError_t code, const char* call, const char* file, int line) {
  if (code != cudaSuccess) throw CudaError(code, call, file, line);
}

// "cudaErrorNoDevice (no CUDA-capable device is detected)"
std::string describe(cudaError_t code);

}  // namespace course

#define CUDA_CHECK(call) ::course::check_cuda((call), #call, __FILE__, __LINE__)

// After a kernel launch: launch-configuration errors appear at once (cudaGetLastError);
// errors inside the kernel appear only at the next synchronising call.
#define CUDA_CHECK_LAUNCH() \
  ::course::check_cuda(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
