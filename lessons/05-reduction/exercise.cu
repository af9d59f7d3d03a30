// Lesson 05 exercises. Fill in the TODOs, then check your work:
//
//   make check LESSON=05                                        all the lesson's tests
//   build/lessons/05-reduction/lesson05_exercise_tests "[ex1]"  only exercise 1's
//
// These functions replace the solutions (solutions.cuh, included by reduction.cu) in the exercise
// build (lesson05_exercise_tests): there, reduce_sum and softmax_rows call YOUR code. (The lesson
// binary, lesson05, always runs the solutions.) Until you solve an exercise, its stub fails
// loudly (an exception) or gives a wrong answer (a kernel that writes zeros), and its tests
// fail. Exercise 3 also feeds v6, v7, argmax and moments: their tests fail until it is done.
//
// The README's "Exercises" section has the hints; reduction.cu's comments explain each idea.
//
// Helpers you may use: kBlockThreads and float_bits (reduction.cuh), ceil_div (below), CUDA_CHECK
// and CUDA_CHECK_LAUNCH (common/cuda_check.hpp). reduction.cu's kFullMask and kWarps are private
// to it: write 0xffffffff and kBlockThreads / 32.
//
// What the tests check besides the sums: v3's and v5's block sums equal, bit for bit, a CPU
// emulation of the tree each exercise describes, on data where another order of additions
// rounds differently (so v1's interleaved loop in v3 fails); on a GPU, `make check` also runs
// exercises 1 and 2 under compute-sanitizer racecheck and synccheck, and exercise 4 under
// synccheck (a missing barrier, a barrier inside the `if`, a warp-synchronous finish without
// __shfl_*_sync / __syncwarp, or lanes that leave before a full-mask shuffle).
#include "reduction.cuh"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "common/cuda_check.hpp"

namespace reduction {

namespace {

std::size_t ceil_div(std::size_t a, std::size_t b) {
  return (a + b - 1) / b;
}

// ------------------------------------------------------------------------------------------
// Exercise 1: v3, sequential addressing (one pass).
//
// Block b sums in[b * kBlockThreads .. (b + 1) * kBlockThreads), clipped to n, and thread 0
// writes the total to block_sums[blockIdx.x].
//  - load in[i] into partial[t] (0.0f past the end of the array), then __syncthreads();
//  - for stride = kBlockThreads / 2, /4, ..., 1: threads t < stride add partial[t + stride]
//    into partial[t]; __syncthreads() after each step (outside the `if`: every thread of the
//    block must reach the barrier);
//  - why this order: the active threads are 0..stride-1, whole warps, and a warp reads 32
//    consecutive floats, one per shared-memory bank.
__global__ void reduce_v3_sequential_addressing(const float* __restrict__ in, std::size_t n,
                                                float* block_sums) {
  // __shared__ float partial[kBlockThreads];
  // const std::size_t i = blockIdx.x * std::size_t{kBlockThreads} + threadIdx.x;
  (void)in;
  (void)n;
  // TODO(exercise 1): load, reduce with sequential addressing, write the block's sum.
  if (threadIdx.x == 0) block_sums[blockIdx.x] = 0.0f;  // wrong on purpose: replace
}

// ------------------------------------------------------------------------------------------
// Exercise 2: v5, the last warp with __shfl_down_sync (one pass).
//
// Like v4 (read reduce_v4_first_add_during_load in reduction.cu): block b covers
// 2 * kBlockThreads elements, thread t loads in[i] + in[i + kBlockThreads] (each 0.0f past the
// end). Then:
//  - the shared-memory loop runs only while stride > 32, leaving 64 partial sums;
//  - warp 0 (t < 32) takes v = partial[t] + partial[t + 32] and finishes in registers:
//    v += __shfl_down_sync(0xffffffff, v, offset) for offset = 16, 8, 4, 2, 1;
//  - lane 0 writes v to block_sums[blockIdx.x].
// Why not the old `volatile` trick without shuffles: since Volta, the lanes of a warp are not
// guaranteed to run in lockstep; __shfl_down_sync names the lanes that must meet.
__global__ void reduce_v5_warp_shuffle(const float* __restrict__ in, std::size_t n,
                                       float* block_sums) {
  // __shared__ float partial[kBlockThreads];
  // const std::size_t i = blockIdx.x * std::size_t{2 * kBlockThreads} + threadIdx.x;
  (void)in;
  (void)n;
  // TODO(exercise 2): load two elements, tree down to 64 values, then shuffle the last warp.
  if (threadIdx.x == 0) block_sums[blockIdx.x] = 0.0f;  // wrong on purpose: replace
}

// ------------------------------------------------------------------------------------------
// Exercise 4: row softmax, one warp per row.
//
// Warp w of the grid (global thread index / 32) handles row w; lane = threadIdx.x % 32.
//  - if row >= rows, return (the whole warp leaves together, so full-mask shuffles stay valid);
//  - m = the row's max: each lane takes fmaxf over columns lane, lane + 32, ...; then combine
//    the 32 lane maxima with __shfl_xor_sync(0xffffffff, v, offset), offset = 16, 8, 4, 2, 1,
//    which leaves the result in EVERY lane (a butterfly), unlike __shfl_down_sync;
//  - sum = the row's sum of expf(x - m), the same way;
//  - write expf(x - m) / sum for each of the lane's columns.
// Subtracting m keeps every exp() <= 1: try logits of 1000 without it.
__global__ void softmax_rows_warp(const float* in, float* out, std::size_t rows, std::size_t cols) {
  const std::size_t row = (blockIdx.x * std::size_t{kBlockThreads} + threadIdx.x) / 32;
  const unsigned lane = threadIdx.x % 32;
  if (row >= rows) return;
  (void)in;
  // TODO(exercise 4): max, sum of exponentials, normalise. Replace this loop, which writes
  // zeros (wrong on purpose).
  for (std::size_t c = lane; c < cols; c += 32) out[row * cols + c] = 0.0f;
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

// ------------------------------------------------------------------------------------------
// Exercise 3: split n floats at p into an unaligned head, whole float4s, and a tail.
//
// A float4 load must read from an address that is a multiple of 16. p is a multiple of 4
// (every float* is), so 0, 1, 2 or 3 floats separate it from the next multiple of 16:
//  - head = floats from p to that boundary (0 if p is already aligned), but at most n;
//  - vec4 = whole float4s in what is left; tail = the 0..3 floats after them.
// Work with the address as an integer: reinterpret_cast<std::uintptr_t>(p). Examples (check
// them on paper first): p = 0x1000, n = 10 -> {0, 2, 2}; p = 0x1004, n = 10 -> {3, 1, 3};
// p = 0x1008, n = 1 -> {1, 0, 0}.
Float4Split split_for_float4(const float* p, std::size_t n) {
  (void)p;
  (void)n;
  throw std::logic_error("TODO(exercise 3): split_for_float4 is not written yet (exercise.cu)");
}

void softmax_rows_warp_per_row(const float* in, float* out, std::size_t rows, std::size_t cols,
                               cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>(ceil_div(rows, kBlockThreads / 32));  // a row per warp
  softmax_rows_warp<<<blocks, kBlockThreads, 0, stream>>>(in, out, rows, cols);
  CUDA_CHECK_LAUNCH();
}

}  // namespace reduction
