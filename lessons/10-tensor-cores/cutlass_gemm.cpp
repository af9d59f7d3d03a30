// Lesson 10: cutlass_gemm's checks and dispatch (cutlass_gemm.cuh). Compiled in every build;
// the kernel itself is cutlass_gemm_sm90.cu, which CMake builds, and announces to this file with
// LESSON10_HAVE_CUTLASS, only where it found CUTLASS's headers and CMAKE_CUDA_ARCHITECTURES
// names 90.
#include "cutlass_gemm.cuh"

#include <cstdint>
#include <stdexcept>
#include <string>

#include "common/cuda_check.hpp"

namespace lesson10 {

const char* to_string(CutlassKernel kernel) {
  switch (kernel) {
    case CutlassKernel::cooperative_128x256:
      return "cooperative_128x256";
    case CutlassKernel::pingpong_128x128:
      return "pingpong_128x128";
    case CutlassKernel::pingpong_64x256:
      return "pingpong_64x256";
  }
  return "unknown";
}

bool cutlass_gemm_built() {
#ifdef LESSON10_HAVE_CUTLASS
  return true;
#else
  return false;
#endif
}

bool cutlass_gemm_supported(std::string* why_not) {
  int device = 0, major = 0, minor = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  std::string reason;
  if (!cutlass_gemm_built()) {
    reason =
        "this build has no CUTLASS baseline: CMake found no CUTLASS headers (pip install "
        "nvidia-cutlass, or -DCOURSE_CUTLASS_INCLUDE=<dir with cutlass/ and cute/>, then run "
        "cmake again) or CMAKE_CUDA_ARCHITECTURES does not name 90";
  } else if (!(major == 9 && minor == 0)) {
    reason = "CUTLASS's sm90 kernel (TMA + wgmma) needs compute capability 9.0; this GPU is " +
             std::to_string(major) + "." + std::to_string(minor);
  } else {
#ifdef LESSON10_HAVE_CUTLASS
    if (!cutlass_baseline::sm90_code_built())
      reason = "the CUTLASS library holds no sm_90a code for its kernel";
#endif
  }
  if (why_not != nullptr) *why_not = reason;
  return reason.empty();
}

template <class T>
void cutlass_gemm(int M, int N, int K, float alpha, const T* A, const T* B, float beta, T* C,
                  cudaStream_t stream, CutlassKernel kernel) {
  const char* who = "cutlass_gemm";
  if (std::string(to_string(kernel)) == "unknown")
    throw std::invalid_argument("cutlass_gemm: kernel " + std::to_string(static_cast<int>(kernel)) +
                                " is not one of CutlassKernel's values");
  // The versions' checks (sizes, null pointers, K and N multiples of 8, A and B 16-byte
  // aligned), then K == 0 and C's alignment, which TMA's stores need as well.
  if (!check_tensor_gemm_args(who, M, N, K, A, B, C, true)) return;
  if (K == 0)
    throw std::invalid_argument("cutlass_gemm: K must be >= 1 (the baseline has no K == 0 path)");
  if (reinterpret_cast<std::uintptr_t>(C) % 16 != 0)
    throw std::invalid_argument("cutlass_gemm: C must be 16-byte aligned (TMA stores it)");
  std::string why;
  if (!cutlass_gemm_supported(&why))
    throw NotSupported(std::string(who) + ": not supported on this GPU: " + why);
#ifdef LESSON10_HAVE_CUTLASS
  cutlass_baseline::run_sm90<T>(M, N, K, alpha, A, B, beta, C, stream, kernel);
#else
  (void)alpha, (void)beta, (void)stream, (void)kernel;
#endif
}

template void cutlass_gemm<__half>(int, int, int, float, const __half*, const __half*, float,
                                   __half*, cudaStream_t, CutlassKernel);
template void cutlass_gemm<__nv_bfloat16>(int, int, int, float, const __nv_bfloat16*,
                                          const __nv_bfloat16*, float, __nv_bfloat16*, cudaStream_t,
                                          CutlassKernel);

}  // namespace lesson10
