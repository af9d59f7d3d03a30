// Lesson 07: the exercise solutions. Read them after you have tried.
//
// Not compiled on its own: gemm.cu includes this file at its end, in the lesson build only, so
// the solutions share its translation unit (its helpers, and the kernels that call them).
// The exercise build (make check LESSON=07) compiles gemm.cu with LESSON_EXERCISE_BUILD
// defined, which leaves this file out, and exercise.cu supplies the same functions instead.
#pragma once

namespace lesson07 {

namespace {
// Exercise 1. W is N x K: row n of W is output feature n, contiguous in k. The W tile is loaded
// the way it lies in memory, Ws[n][k] (lanes read consecutive k: coalesced), and the inner loop
// reads it down a column, Ws[tx][k]: lanes 33 words apart thanks to the +1 padding, so 32
// different banks (without it, all 32 lanes would hit one bank: a 32-way conflict).
constexpr int kNtTile = 32, kNtThreads = kNtTile * kNtTile;

__global__ void __launch_bounds__(kNtThreads)
    nt_smem_tiling_kernel(int M, int N, int K, float alpha, const float* __restrict__ A,
                          const float* __restrict__ W, float beta, float* __restrict__ C) {
  __shared__ float As[kNtTile][kNtTile];
  __shared__ float Ws[kNtTile][kNtTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int m = blockIdx.y * kNtTile + ty;
  const int n = blockIdx.x * kNtTile + tx;
  const int w_row = blockIdx.x * kNtTile + ty;  // the row of W this thread loads
  float acc = 0.0f;
  for (int k0 = 0; k0 < K; k0 += kNtTile) {
    As[ty][tx] = (m < M && k0 + tx < K) ? A[m * K + k0 + tx] : 0.0f;
    Ws[ty][tx] = (w_row < N && k0 + tx < K) ? W[w_row * K + k0 + tx] : 0.0f;
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kNtTile; ++k) acc = fmaf(As[ty][k], Ws[tx][k], acc);
    __syncthreads();
  }
  if (m < M && n < N) {
    float* c = C + m * N + n;
    *c = epilogue_value(acc, beta != 0.0f ? *c : 0.0f, 0.0f, alpha, beta, Activation::none);
  }
}

// Exercises 2 and 3. 64x64 block tile, BK 16, 256 threads; thread (ty, tx) owns the 4x4 outputs
// at rows ty + 16 i and columns tx + 16 j. Strided rather than contiguous: the 16 lanes of a row
// of threads read 16 consecutive words of Ws (no conflict), and the write-out is coalesced. Both
// tiles are stored transposed ([k][row]) so the inner loop reads along a row of shared memory.
constexpr int kRbTile = 64, kRbK = 16, kRbThreads = 256;

__global__ void __launch_bounds__(kRbThreads)
    nt_register_blocking_kernel(int M, int N, int K, float alpha, const float* __restrict__ A,
                                const float* __restrict__ W, float beta, const float* bias,
                                Activation act, float* __restrict__ C) {
  __shared__ float As[kRbK][kRbTile + 1];
  __shared__ float Ws[kRbK][kRbTile + 1];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int bm = blockIdx.y * kRbTile, bn = blockIdx.x * kRbTile;
  float acc[4][4] = {};
  for (int k0 = 0; k0 < K; k0 += kRbK) {
    // 64 rows x 16 k of A and of W, 4 elements of each per thread; consecutive threads read
    // consecutive k of a row (64-byte segments).
    for (int i = threadIdx.x; i < kRbTile * kRbK; i += kRbThreads) {
      const int r = i / kRbK, k = i % kRbK;
      As[k][r] = (bm + r < M && k0 + k < K) ? A[(bm + r) * K + k0 + k] : 0.0f;
      Ws[k][r] = (bn + r < N && k0 + k < K) ? W[(bn + r) * K + k0 + k] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kRbK; ++k) {
      float a[4], w[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = As[k][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < 4; ++j) w[j] = Ws[k][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], w[j], acc[i][j]);
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int m = bm + ty + 16 * i, n = bn + tx + 16 * j;
      if (m < M && n < N) {
        float* c = C + m * N + n;
        *c = epilogue_value(acc[i][j], beta != 0.0f ? *c : 0.0f, bias != nullptr ? bias[n] : 0.0f,
                            alpha, beta, act);
      }
    }
  }
}

void launch_register_blocking(const char* who, int M, int N, int K, float alpha, const float* A,
                              const float* W, float beta, const float* bias, Activation act,
                              float* C, cudaStream_t stream) {
  const dim3 grid = tile_grid(who, M, N, kRbTile, kRbTile);
  nt_register_blocking_kernel<<<grid, kRbThreads, 0, stream>>>(M, N, K, alpha, A, W, beta, bias,
                                                               act, C);
  CUDA_CHECK_LAUNCH();
}
}  // namespace

void sgemm_nt_smem_tiling(int M, int N, int K, float alpha, const float* A, const float* W,
                          float beta, float* C, cudaStream_t stream) {
  if (!check_gemm_args("sgemm_nt_smem_tiling", M, N, K, A, W, C)) return;
  const dim3 grid = tile_grid("sgemm_nt_smem_tiling", M, N, kNtTile, kNtTile);
  nt_smem_tiling_kernel<<<grid, dim3(kNtTile, kNtTile), 0, stream>>>(M, N, K, alpha, A, W, beta, C);
  CUDA_CHECK_LAUNCH();
}

cudaFuncAttributes sgemm_nt_smem_tiling_attributes() {
  cudaFuncAttributes a{};
  CUDA_CHECK(cudaFuncGetAttributes(&a, nt_smem_tiling_kernel));
  return a;
}

void sgemm_nt_register_blocking(int M, int N, int K, float alpha, const float* A, const float* W,
                                float beta, float* C, cudaStream_t stream) {
  if (!check_gemm_args("sgemm_nt_register_blocking", M, N, K, A, W, C)) return;
  launch_register_blocking("sgemm_nt_register_blocking", M, N, K, alpha, A, W, beta, nullptr,
                           Activation::none, C, stream);
}

void linear_forward(int M, int N, int K, const float* X, const float* W, const float* bias,
                    Activation act, float* Y, cudaStream_t stream) {
  if (!check_gemm_args("linear_forward", M, N, K, X, W, Y)) return;
  if (bias == nullptr)
    throw std::invalid_argument("linear_forward: bias must not be null (N floats)");
  launch_register_blocking("linear_forward", M, N, K, 1.0f, X, W, 0.0f, bias, act, Y, stream);
}

}  // namespace lesson07
