// Lesson 07 exercises: a fully connected layer in the layout deployment frameworks store it.
// PyTorch's nn.Linear and ONNX's Gemm (transB = 1) keep the weight W as N x K, one row per output
// feature, and compute Y = X * W^T. Replace each TODO with your code, then run
//   make check LESSON=07
// until every test passes. The declarations and what each function must do are in gemm.cuh;
// README.md has hints. Available from gemm.cuh: check_gemm_args (the argument checks and the
// "nothing to do" answer), epilogue_value (alpha, beta, bias, activation of one element),
// ceil_div, tile_grid (the blocks over C, refusing more than 65535 block rows); from
// common/cuda_check.hpp: CUDA_CHECK and CUDA_CHECK_LAUNCH.
//
// What the tests check besides the values: exercise 1's kernel has one float of padding per row
// of a 32x32 tile (its static shared memory, read with cudaFuncGetAttributes); exercises 2 and
// 3 launch ONE kernel of 256 threads per 64x64 tile of C (CUPTI's record of the launch); on a
// GPU, `make check` runs all three under compute-sanitizer racecheck and synccheck (a missing
// barrier shows). Not observed: which tile the padding is in, and whether a thread's 4x4 block
// is strided or contiguous (both give the same values and the same launch).
#include <stdexcept>

#include "common/cuda_check.hpp"
#include "gemm.cuh"

namespace lesson07 {

// Exercise 1: C = alpha * A * W^T + beta * C with 32x32 shared-memory tiles.
// Block: 32 x 32 threads, thread (tx, ty) computes C[blockIdx.y*32 + ty][blockIdx.x*32 + tx].
// Hints: for each tile of 32 k's, each thread loads one element of A's tile and one of W's tile
// (0 outside the matrices); which index should run along threadIdx.x so that a warp reads
// consecutive addresses of W? The inner loop then reads W's tile down a column: what does that
// do to shared-memory banks, and what does one float of padding per row change? Two barriers per
// tile: why each one? Threads outside C must still reach them. beta == 0: do not read C.
__global__ void nt_smem_tiling_kernel(int M, int N, int K, float alpha, const float* A,
                                      const float* W, float beta, float* C) {
  // TODO(exercise 1)
}

// Exercises 2 and 3: the same product with a 64x64 tile and a 4x4 register block per thread (256
// threads), plus the epilogue of exercise 3 (bias may be null: no bias).
// Hints: per tile of BK k's, stage A's 64 x BK and W's 64 x BK in shared memory; per k, load 4
// values of A and 4 of W into registers and do 16 FMAs. Which 4 rows and columns should a thread
// own so that the lanes of a warp read different banks and write C coalesced? Store the tiles
// transposed ([k][row]) so the inner loop walks along a row of shared memory.
__global__ void nt_register_blocking_kernel(int M, int N, int K, float alpha, const float* A,
                                            const float* W, float beta, const float* bias,
                                            Activation act, float* C) {
  // TODO(exercises 2 and 3)
}

void sgemm_nt_smem_tiling(int M, int N, int K, float alpha, const float* A, const float* W,
                          float beta, float* C, cudaStream_t stream) {
  // TODO(exercise 1): check the arguments (return when there is nothing to do), launch
  // nt_smem_tiling_kernel over tile_grid(..., M, N, 32, 32) (ceil(N/32) x ceil(M/32) blocks) of
  // 32 x 32 threads on `stream`, check the launch. Then delete the throw.
  (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)W, (void)beta, (void)C, (void)stream;
  throw std::logic_error("TODO(exercise 1): sgemm_nt_smem_tiling is not written yet");
}

cudaFuncAttributes sgemm_nt_smem_tiling_attributes() {
  cudaFuncAttributes a{};
  CUDA_CHECK(cudaFuncGetAttributes(&a, nt_smem_tiling_kernel));
  return a;
}

void sgemm_nt_register_blocking(int M, int N, int K, float alpha, const float* A, const float* W,
                                float beta, float* C, cudaStream_t stream) {
  // TODO(exercise 2): as exercise 1, with nt_register_blocking_kernel (no bias, no activation).
  (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)W, (void)beta, (void)C, (void)stream;
  throw std::logic_error("TODO(exercise 2): sgemm_nt_register_blocking is not written yet");
}

void linear_forward(int M, int N, int K, const float* X, const float* W, const float* bias,
                    Activation act, float* Y, cudaStream_t stream) {
  // TODO(exercise 3): Y = act(X * W^T + bias) in ONE kernel: exercise 2's, with the bias and the
  // activation applied where it writes its outputs (alpha = 1, beta = 0: Y is not read).
  // A null bias is an error (std::invalid_argument) when there is something to compute.
  (void)M, (void)N, (void)K, (void)X, (void)W, (void)bias, (void)act, (void)Y, (void)stream;
  throw std::logic_error("TODO(exercise 3): linear_forward is not written yet");
}

}  // namespace lesson07
