// Lesson 05: the exercise solutions. Read them after you have tried.
//
// Not compiled on its own: reduction.cu includes this file at its end, so the solutions share its
// translation unit (its helpers, and the kernels that call them). The first part, v3's tree, is
// compiled in both builds: v4 in reduction.cu calls it. The rest is compiled by the lesson build
// only: the exercise build (make check LESSON=05) compiles reduction.cu with
// LESSON_EXERCISE_BUILD defined, which leaves it out, and exercise.cu supplies the same functions.
#pragma once

namespace reduction {

namespace {

// Exercise 1's tree, sequential addressing (declared in reduction.cu, where v4 calls it). Thread
// t adds partial[t + stride] into partial[t], the stride halving from kBlockThreads/2: at every
// step the active threads are 0..stride-1 (whole warps, no divergence until stride < 32) and a
// warp touches 32 consecutive words, one per bank (no conflicts). The barrier is outside the
// `if`: every thread of the block reaches it.
__device__ __forceinline__ void tree_sequential_addressing(float* partial) {
  const unsigned t = threadIdx.x;
  for (unsigned stride = kBlockThreads / 2; stride > 0; stride /= 2) {
    if (t < stride) partial[t] += partial[t + stride];
    __syncthreads();
  }
}

}  // namespace

}  // namespace reduction

#ifndef LESSON_EXERCISE_BUILD

namespace reduction {

namespace {

// Exercise 1. v3: v1's load, then the sequential-addressing tree above.
__global__ void reduce_v3_sequential_addressing(const float* __restrict__ in, std::size_t n,
                                                float* block_sums) {
  __shared__ float partial[kBlockThreads];
  const unsigned t = threadIdx.x;
  const std::size_t i = blockIdx.x * std::size_t{kBlockThreads} + t;
  partial[t] = i < n ? in[i] : 0.0f;
  __syncthreads();
  tree_sequential_addressing(partial);
  if (t == 0) block_sums[blockIdx.x] = partial[0];
}

// Exercise 2. v5: v4 down to 64 values in shared memory, then warp 0 adds the two halves and
// finishes with five shuffles: lane i adds lane i + 16, i + 8, i + 4, i + 2, i + 1.
__global__ void reduce_v5_warp_shuffle(const float* __restrict__ in, std::size_t n,
                                       float* block_sums) {
  __shared__ float partial[kBlockThreads];
  const unsigned t = threadIdx.x;
  const std::size_t i = blockIdx.x * std::size_t{2 * kBlockThreads} + t;
  float v = i < n ? in[i] : 0.0f;
  if (i + kBlockThreads < n) v += in[i + kBlockThreads];
  partial[t] = v;
  __syncthreads();
  for (unsigned stride = kBlockThreads / 2; stride > 32; stride /= 2) {
    if (t < stride) partial[t] += partial[t + stride];
    __syncthreads();
  }
  if (t < 32) {
    v = partial[t] + partial[t + 32];
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(kFullMask, v, offset);
    if (t == 0) block_sums[blockIdx.x] = v;
  }
}

// Exercise 4. Butterfly (xor) shuffles leave the result in every lane, which softmax needs: each
// lane normalises its own columns. Both partners of a butterfly add the same two numbers, so all
// lanes hold the same bits.
__device__ float warp_allreduce_max(float v) {
  for (int offset = 16; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}
__device__ float warp_allreduce_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

// One warp per row: the lanes stride over the row's columns (coalesced), take the max, then
// the sum of exp(x - max), then write exp(x - max) / sum. Class-score rows are short (80 to a
// few thousand), so a warp is enough and no shared memory or barrier is needed; the row is
// read three times, the second and third from L1/L2.
__global__ void __launch_bounds__(kBlockThreads)
    softmax_rows_warp(const float* in, float* out, std::size_t rows, std::size_t cols) {
  const std::size_t row = (blockIdx.x * std::size_t{kBlockThreads} + threadIdx.x) / 32;
  const unsigned lane = threadIdx.x % 32;
  if (row >= rows) return;  // the whole warp leaves together: the full-mask shuffles stay valid
  const float* x = in + row * cols;
  float* y = out + row * cols;
  float m = -INFINITY;
  for (std::size_t c = lane; c < cols; c += 32) m = fmaxf(m, x[c]);
  m = warp_allreduce_max(m);
  float sum = 0.0f;
  for (std::size_t c = lane; c < cols; c += 32) sum += expf(x[c] - m);
  sum = warp_allreduce_sum(sum);
  for (std::size_t c = lane; c < cols; c += 32) y[c] = expf(x[c] - m) / sum;
}

}  // namespace

void reduce_pass_v3_sequential_addressing(const float* in, std::size_t n, float* block_sums,
                                          cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>(ceil_div(n, kBlockThreads));
  reduce_v3_sequential_addressing<<<blocks, kBlockThreads, 0, stream>>>(in, n, block_sums);
  CUDA_CHECK_LAUNCH();
}

void reduce_pass_v5_warp_shuffle(const float* in, std::size_t n, float* block_sums,
                                 cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>(ceil_div(n, 2 * kBlockThreads));
  reduce_v5_warp_shuffle<<<blocks, kBlockThreads, 0, stream>>>(in, n, block_sums);
  CUDA_CHECK_LAUNCH();
}

// Exercise 3. Floats from p to the next multiple of 16 bytes: (16 - p % 16) % 16 bytes, i.e.
// 0..3 floats (p is 4-byte aligned), but never more than n.
Float4Split split_for_float4(const float* p, std::size_t n) {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  const std::size_t to_boundary = ((16 - address % 16) % 16) / sizeof(float);
  const std::size_t head = std::min(n, to_boundary);
  const std::size_t vec4 = (n - head) / 4;
  return {head, vec4, n - head - 4 * vec4};
}

void softmax_rows_warp_per_row(const float* in, float* out, std::size_t rows, std::size_t cols,
                               cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>(ceil_div(rows, kWarps));  // kWarps rows per block
  softmax_rows_warp<<<blocks, kBlockThreads, 0, stream>>>(in, out, rows, cols);
  CUDA_CHECK_LAUNCH();
}

}  // namespace reduction

#endif  // LESSON_EXERCISE_BUILD
