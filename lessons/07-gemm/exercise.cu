// Lesson 07 exercises: a fully connected layer in the layout deployment frameworks store it.
// PyTorch's nn.Linear and ONNX's Gemm (transB = 1) keep the weight W as N x K, one row per output
// feature, and compute Y = X * W^T. Replace each TODO with your code, then run
//   make check LESSON=07
// until every test passes. Each stub's comment is its contract (gemm.cuh declares the
// functions; its header comment has the conventions every launcher follows); README.md has
// folded hints, solutions.cuh the answers: try first. Available from gemm.cuh: check_gemm_args
// (the argument checks and the "nothing to do" answer), epilogue_value (alpha, beta, bias,
// activation of one element), ceil_div, tile_grid (the blocks over C, refusing more than 65535
// block rows); from common/cuda_check.hpp: CUDA_CHECK and CUDA_CHECK_LAUNCH.
//
// Conventions (gemm.cuh): dense row-major device matrices, A (or X): M x K, W: N x K, C (or Y):
// M x N, any M, N, K >= 0 (no multiple of a tile assumed); M == 0 or N == 0 returns at once
// (pointers may be null); K == 0 leaves C = beta * C (an empty sum is 0); beta == 0 never reads
// C (it may hold NaN). Errors: std::invalid_argument for a negative size, a null pointer that
// must be read or written, or a matrix of more than INT_MAX elements (check_gemm_args), and for
// a C too tall for the grid (tile_grid); course::CudaError for a failed launch. No test checks
// the text of an exception in these exercises, only its type.
//
// What the tests check besides the values (against an FP64 reference, with NaN in C for
// beta = 0): exercise 1's kernel has one float of padding per row of a 32x32 tile (its static
// shared memory, read with cudaFuncGetAttributes); exercises 2 and 3 launch ONE kernel of 256
// threads per 64x64 tile of C (CUPTI's record of the launch); on a GPU, `make check` runs all
// three under compute-sanitizer racecheck and synccheck (a missing barrier shows). Not
// observed: which tile the padding is in, and whether a thread's 4x4 block is strided or
// contiguous (both give the same values and the same launch).
#include <stdexcept>

#include "common/cuda_check.hpp"
#include "gemm.cuh"

namespace lesson07 {

// Exercise 1 [ex1]: C = alpha * A * W^T + beta * C, the tile loop with 32x32 shared-memory tiles.
// The kernel that sgemm_nt_smem_tiling launches: each step over K stages a 32x32 tile of A and
// one of W in shared memory, each global element read once per tile, and W's tile carries one
// float of padding per row, so that reading it down a column is free of bank conflicts. Its
// static shared memory (sgemm_nt_smem_tiling_attributes below) must therefore be between
// 32 x 32 + 32 x 33 and 2 x 32 x 33 floats. Launch shape: yours.
__global__ void nt_smem_tiling_kernel(int M, int N, int K, float alpha, const float* A,
                                      const float* W, float beta, float* C) {
  // TODO(exercise 1)
}

// Exercises 2 and 3 [ex2, ex3]: the kernel both launchers below use. Per 64x64 tile of C, one
// block of 256 threads, each thread computing 16 outputs (a 4x4 register block) from A and W
// staged in shared memory; it writes
//   C = act(alpha * A * W^T + beta * C + bias)   (epilogue_value, gemm.cuh)
// where bias (N floats) may be null: no bias (exercise 2 passes null and Activation::none).
__global__ void nt_register_blocking_kernel(int M, int N, int K, float alpha, const float* A,
                                            const float* W, float beta, const float* bias,
                                            Activation act, float* C) {
  // TODO(exercises 2 and 3)
}

// Exercise 1 [ex1]: the launcher, C = alpha * A * W^T + beta * C with nt_smem_tiling_kernel on
// `stream`, following the conventions above. Tests: bad shapes (CPU: a negative size, a null C,
// M == 0 with null pointers); shapes against the FP64 reference (GPU); the padding (the
// kernel's static shared memory).
void sgemm_nt_smem_tiling(int M, int N, int K, float alpha, const float* A, const float* W,
                          float beta, float* C, cudaStream_t stream) {
  // TODO(exercise 1)
  (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)W, (void)beta, (void)C, (void)stream;
  throw std::logic_error("TODO(exercise 1): sgemm_nt_smem_tiling is not written yet");
}

cudaFuncAttributes sgemm_nt_smem_tiling_attributes() {
  cudaFuncAttributes a{};
  CUDA_CHECK(cudaFuncGetAttributes(&a, nt_smem_tiling_kernel));
  return a;
}

// Exercise 2 [ex2]: C = alpha * A * W^T + beta * C with nt_register_blocking_kernel, launched as
// ONE kernel of 256 threads per 64x64 tile of C: ceil(N / 64) x ceil(M / 64) blocks in all.
// Tests: bad shapes (CPU); shapes against the FP64 reference, alpha and beta both 1 on
// 300 x 257 x 520; the launch (CUPTI).
void sgemm_nt_register_blocking(int M, int N, int K, float alpha, const float* A, const float* W,
                                float beta, float* C, cudaStream_t stream) {
  // TODO(exercise 2)
  (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)W, (void)beta, (void)C, (void)stream;
  throw std::logic_error("TODO(exercise 2): sgemm_nt_register_blocking is not written yet");
}

// Exercise 3 [ex3]: a fused fully connected layer, Y = act(X * W^T + bias), in ONE kernel:
// nt_register_blocking_kernel, launched as in exercise 2, with the bias and the activation
// applied where it writes its outputs (alpha = 1, beta = 0). X: M x K, W: N x K, bias: N floats,
// Y: M x N, write-only (the tests fill it with NaN). Errors: as the conventions, and, when
// M > 0 and N > 0, std::invalid_argument for a null bias. Tests: bad shapes and a null bias
// (CPU); none, ReLU and SiLU on shapes from 1 x 1 x 1 to K == 0 (GPU); the launch (CUPTI).
void linear_forward(int M, int N, int K, const float* X, const float* W, const float* bias,
                    Activation act, float* Y, cudaStream_t stream) {
  // TODO(exercise 3)
  (void)M, (void)N, (void)K, (void)X, (void)W, (void)bias, (void)act, (void)Y, (void)stream;
  throw std::logic_error("TODO(exercise 3): linear_forward is not written yet");
}

}  // namespace lesson07
