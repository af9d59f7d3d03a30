// Lesson 10: the CUTLASS 3.x baseline beside cuBLAS. One Hopper GEMM built from CUTLASS's
// CollectiveBuilder (TMA warp-specialized cooperative mainloop, a 128x256x64 tile as v6's,
// cluster 1x1x1, the TMA epilogue; cutlass_gemm_sm90.cu says what each choice is and why),
// wrapped by cutlass::gemm::device::GemmUniversalAdapter. It answers a different question from
// cuBLAS: cuBLAS picks among many kernels by heuristics, this is one open kernel with v6's tile,
// so the gap between v6 and it is the implementation alone.
//
// Optional: CMake builds it only where it finds CUTLASS's headers (pip install nvidia-cutlass,
// or -DCOURSE_CUTLASS_INCLUDE=<dir holding cutlass/ and cute/>) and CMAKE_CUDA_ARCHITECTURES
// names 90. Otherwise this API still links: cutlass_gemm_built() is false and cutlass_gemm throws
// NotSupported. This header includes nothing of CUTLASS.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <string>

#include "tensor_gemm.cuh"  // NotSupported

namespace lesson10 {

// Which CUTLASS kernel: the baseline (the cooperative schedule with v6's 128x256x64 tile, the
// default everywhere), or one of two ping-pong kernels (each consumer warp group owns a whole
// tile, 128x128x64 or 64x256x64, and the two alternate between multiplying and writing out),
// there to measure whether ping-pong pays on this GPU (the benchmark's schedule_* rows).
enum class CutlassKernel { cooperative_128x256, pingpong_128x128, pingpong_64x256 };
constexpr CutlassKernel kCutlassKernels[] = {CutlassKernel::cooperative_128x256,
                                             CutlassKernel::pingpong_128x128,
                                             CutlassKernel::pingpong_64x256};
// "cooperative_128x256", ...; "unknown" for another value.
const char* to_string(CutlassKernel kernel);

// Whether this build holds the CUTLASS baseline (CMake found the headers and the architectures
// include 90). No CUDA call.
bool cutlass_gemm_built();
// Whether cutlass_gemm can run on the current device, and if not, why: not built (the message
// says how to get it), a GPU other than compute capability 9.0, or no sm_90a code in the
// library. Throws course::CudaError if there is no device.
bool cutlass_gemm_supported(std::string* why_not = nullptr);

// C = alpha * A * B + beta * C, FP32 accumulation, T = __half or __nv_bfloat16 for A, B and C.
//   A: M x K, B: K x N, C: M x N; dense row-major device arrays (as every version's).
//   beta == 0: C is not read (may hold NaN). Asynchronous on `stream`.
// Alignment (TMA: 16-byte aligned base addresses and row strides): K % 8 == 0, N % 8 == 0, and
// A, B and C 16-byte aligned (C too: the epilogue stores it by TMA, unlike v6). M is free: TMA
// zero-fills the loads past the last row and drops the stores there.
// Errors: std::invalid_argument for a negative size, K == 0, a null pointer, more than INT_MAX
// elements in a matrix or the alignment above (all before any CUDA call); NotSupported where
// cutlass_gemm_supported is false; std::runtime_error if CUTLASS refuses the problem or its launch
// fails (with CUTLASS's status string). M == 0 or N == 0: nothing to do. `kernel`: which of
// CutlassKernel's kernels (std::invalid_argument for another value, before any CUDA call).
template <class T>
void cutlass_gemm(int M, int N, int K, float alpha, const T* A, const T* B, float beta, T* C,
                  cudaStream_t stream = nullptr,
                  CutlassKernel kernel = CutlassKernel::cooperative_128x256);

// What cutlass_gemm calls after its checks: defined in cutlass_gemm_sm90.cu, which only builds
// with CUTLASS found.
namespace cutlass_baseline {
template <class T>
void run_sm90(int M, int N, int K, float alpha, const T* A, const T* B, float beta, T* C,
              cudaStream_t stream, CutlassKernel kernel);
bool sm90_code_built();  // the library's kernel holds sm_90a code (needs a device)
}  // namespace cutlass_baseline

}  // namespace lesson10
