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
// Each stub's comment is its contract: what it computes, how it is launched, what the tests
// check. How to get there: the README's "Exercises" section has folded hints, and
// reduction.cu's comments explain each idea. solutions.cuh holds the answers (v3's tree too,
// which v4 calls): open it after you have tried.
//
// Helpers you may use: kBlockThreads and float_bits (reduction.cuh), ceil_div (below), CUDA_CHECK
// and CUDA_CHECK_LAUNCH (common/cuda_check.hpp). reduction.cu's kFullMask and kWarps are private
// to it: write 0xffffffff and kBlockThreads / 32.
//
// What the tests check besides the sums: v3's and v5's block sums equal, bit for bit, a CPU
// emulation of the order of additions each contract states, on data where another order
// rounds differently (so v1's interleaved order fails); on a GPU, `make check` also runs
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
// Exercise 1 [ex1]: v3, one pass of the sum with sequential addressing.
//
// Launch, fixed by reduce_pass_v3_sequential_addressing below: ceil(n / kBlockThreads) blocks of
// kBlockThreads (256) threads, no dynamic shared memory.
// In:  in[0, n), device floats; 0 < n <= kMaxElements (reduce_sum checks the arguments).
// Out: block_sums[b] = the sum of block b's tile in[b * 256, (b + 1) * 256), an element past n
//      counting as 0.0f, for every block b.
// Order of the additions (the tests compare the bits): sequential addressing. Number the tile's
// 256 values 0..255; for stride = 128, 64, ..., 1, value t becomes value t + value (t + stride)
// for every t < stride; value 0 is then the block sum. (v1 and v2 pair them the other way round:
// 0 with 1, then 0 with 2, ...; their bits differ on the tests' data.)
// Errors: none (a kernel cannot throw; the launcher reports a failed launch).
__global__ void reduce_v3_sequential_addressing(const float* __restrict__ in, std::size_t n,
                                                float* block_sums) {
  (void)in;
  (void)n;
  // TODO(exercise 1)
  if (threadIdx.x == 0) block_sums[blockIdx.x] = 0.0f;  // wrong on purpose: replace
}

// ------------------------------------------------------------------------------------------
// Exercise 2 [ex2]: v5, one pass of the sum, its last warp in registers.
//
// Launch, fixed by reduce_pass_v5_warp_shuffle below: ceil(n / (2 * kBlockThreads)) blocks of
// kBlockThreads (256) threads, no dynamic shared memory.
// In:  in[0, n), device floats; 0 < n <= kMaxElements.
// Out: block_sums[b] = the sum of block b's tile in[b * 512, (b + 1) * 512), an element past n
//      counting as 0.0f.
// Order of the additions (the tests compare the bits):
//   1. v4's load: value t (t = 0..255) is in[b * 512 + t] + in[b * 512 + t + 256];
//   2. exercise 1's order, but only for stride = 128 and 64, which leaves 64 values;
//   3. for t < 32, value t + value (t + 32): 32 values, one per lane of one warp;
//   4. those 32 finished with __shfl_down_sync (a register exchange between lanes, no shared
//      memory): for offset = 16, 8, 4, 2, 1, lane l adds lane (l + offset)'s value. Lane 0's
//      value is the block sum.
// A finish on `volatile` shared memory without __syncwarp() adds in the same order and is a
// race; only racecheck (make check on a GPU) sees it.
// Errors: none.
__global__ void reduce_v5_warp_shuffle(const float* __restrict__ in, std::size_t n,
                                       float* block_sums) {
  (void)in;
  (void)n;
  // TODO(exercise 2)
  if (threadIdx.x == 0) block_sums[blockIdx.x] = 0.0f;  // wrong on purpose: replace
}

// ------------------------------------------------------------------------------------------
// Exercise 4 [ex4]: row softmax, one warp per row.
//
// Launch, fixed by softmax_rows_warp_per_row below: ceil(rows / 8) blocks of kBlockThreads (256)
// threads, so warp w of the grid (global thread index / 32) owns row w, and the warps with
// w >= rows (in the last block) own none. The first three lines below are that mapping.
// In:  in, rows x cols floats, row-major, device; rows > 0, cols > 0 (softmax_rows checks).
// Out: out, the same shape, and possibly the same pointer as in (the tests run it in place):
//      out[r][c] = exp(in[r][c] - m_r) / sum_j exp(in[r][j] - m_r), m_r the row's maximum.
//      Finite for large logits (the tests use 1000 and 1001); a -inf logit gives 0. Within the
//      tests' bound of the double-precision softmax: expf, not __expf.
// The warp's lanes share the row's columns, and every lane needs the row's maximum and sum:
// combine them across the warp with warp shuffles (no shared memory, no barrier). All 32 lanes
// of a warp that owns a row take part in every full-mask shuffle (synccheck on a GPU).
// Errors: none.
__global__ void softmax_rows_warp(const float* in, float* out, std::size_t rows, std::size_t cols) {
  const std::size_t row = (blockIdx.x * std::size_t{kBlockThreads} + threadIdx.x) / 32;
  const unsigned lane = threadIdx.x % 32;
  if (row >= rows) return;
  (void)in;
  // TODO(exercise 4): replace this loop, which writes zeros (wrong on purpose).
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
// Exercise 3 [ex3] (CPU tests: no GPU needed): split the n floats that start at p for float4
// loads, which need 16-byte aligned addresses.
//
// In:  p, any float* (so a multiple of 4 bytes; never dereferenced, not even checked), n >= 0.
// Out: {head, vec4, tail}, with head + 4 * vec4 + tail == n:
//        head  the floats from p up to the first 16-byte aligned address at or after p: 0..3,
//              0 when p is aligned, and never more than n;
//        vec4  the whole float4s in the rest (they start at p + head, 16-byte aligned);
//        tail  the 0..3 floats after them.
//      Examples: p = 0x1000, n = 10 -> {0, 2, 2}; p = 0x1004, n = 10 -> {3, 1, 3};
//      p = 0x1008, n = 1 -> {1, 0, 0}.
// Errors: none (it does not throw).
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
