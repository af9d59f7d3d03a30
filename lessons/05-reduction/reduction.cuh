// Lesson 05: parallel reduction, step by step to the speed of memory.
//
// The launchers every part of the lesson calls (tests, main.cu, the benchmark), the per-element
// math the kernels share (CPU-testable, __host__ __device__), and the scratch memory owner.
// Kernels and their launchers are in reduction.cu, in the order they are taught; its header
// comment lists every version.
//
// Conventions for every launcher below:
//  - pointers named `in`/`out` are device pointers (cudaMalloc'd or offsets into such memory);
//  - work is enqueued on `stream` and the call returns before it runs (asynchronous), except
//    where a function says "synchronous";
//  - bad arguments throw std::invalid_argument before anything is enqueued, so they are
//    checked without a GPU; CUDA failures throw course::CudaError.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/cuda_check.hpp"
#include "common/memory.hpp"

// Per-element math is compiled for both sides by nvcc and as plain host code by g++ (tests).
#if defined(__CUDACC__)
#define REDUCTION_HD __host__ __device__
#else
#define REDUCTION_HD
#endif

namespace reduction {

// Threads per block of every reduction kernel: 8 warps. Large enough for the block tree to
// amortise its __syncthreads, small enough for several blocks to share an SM.
constexpr int kBlockThreads = 256;

// The largest n any launcher accepts: cub::DeviceReduce takes an int count in CUDA 12.x, and
// the argmax index is 32-bit. 2^31 - 1 floats is 8 GiB.
constexpr std::size_t kMaxElements = 0x7fffffff;

// ------------------------------------------------------------------------------------------
// The versions, in the order the lesson teaches them (the table in reduction.cu's header).

struct VersionInfo {
  int number;          // 0..7, what `lesson05 N` and reduce_sum(N, ...) select
  const char* name;    // the kernel's name, e.g. "reduce_v3_sequential_addressing"
  const char* fixes;   // one line: what it fixes in the version before
  bool deterministic;  // bitwise identical result run to run (same GPU, same n, same data)
};

// All versions; versions()[k].number == k.
const std::vector<VersionInfo>& versions();
// The fastest version, which main.cu and the benchmark's size sweep use.
constexpr int kBestVersion = 7;

// Height h of the addition tree of sum version `version` (0..7) for n elements: each element
// goes through at most h additions, so |computed - exact| <= h u / (1 - h u) * sum|x_i| with
// u = 2^-24 while h u < 1 (Higham, "Accuracy and Stability of Numerical Algorithms", 2nd ed.,
// section 4.2). Derived from the algorithms as written in reduction.cu, not from any output:
//   v0 (one atomicAdd per element, any order): a chain, h = n
//   v1..v5 (a 256-thread tree per block, passes repeated): at most 9 levels per pass
//   v6, v7 (grid-stride chains, then trees): each of >= 256 threads adds at most ceil(n / 256)
//   values, v6's atomics a chain of at most that many block totals; the trees add < 32 levels.
// Libraries built the same way (CUB: per-thread chains, block trees, a second pass) fit v7's h.
// Throws std::invalid_argument for a version outside 0..7: each h is derived for one algorithm.
inline double summation_tree_height(int version, std::size_t n) {
  if (version < 0 || version > 7) {
    throw std::invalid_argument("summation_tree_height: version " + std::to_string(version) +
                                "; expected 0..7");
  }
  const std::size_t per_thread = (n + 255) / 256;
  if (version == 0) return static_cast<double>(n);
  if (version >= 1 && version <= 5) {
    std::size_t passes = 1;
    for (std::size_t count = per_thread; count > 1; count = (count + 255) / 256) ++passes;
    return 9.0 * static_cast<double>(passes);
  }
  return 2.0 * static_cast<double>(per_thread) + 32.0;
}

// A tighter h for v6 and v7, given the grid they launch. reduce_sum gives them
// G = min(max(1, tiles), R) blocks of 256 threads, where tiles = ceil(vec4 / 1024) counts the
// tiles of 1024 float4s in the input's aligned body (vec4 <= ceil(n / 4) float4s, whatever the
// alignment) and R = grid_stride_resident_blocks(version), the blocks resident at once on the
// device that runs them. Pass R as max_blocks: exactly R, since a larger value would give too
// few tiles per block and a smaller one too short a chain of block totals. Derived from
// reduction.cu's thread_reduce, block_reduce and the kernels, an element goes through at most
//   2      adds in element4, (x + y) + (z + w)
//   T + 2  adds in its thread's accumulator: one per tile its block reads (tiles are dealt
//          round-robin over the grid, so T = ceil(max(1, tiles) / G)), and the head and tail
//          scalars into accumulator 0
//   2      adds combining the four accumulators, then 10 in block_reduce (two 5-level shuffles)
// then v6: a chain of at most G atomicAdds of block totals (any order), h = T + G + 16;
//      v7: the last block's loop over the G partials, ceil(G / 256) adds per thread, then
//          block_reduce again (10 more), h = T + ceil(G / 256) + 26.
// Here tiles is taken at its largest, ceil(ceil(n / 4) / 1024), and G = min(tiles, R): if the
// real body has fewer tiles, either its grid is as large as its tiles (T = 1) or it is R as here
// (and T no larger), and its G is no larger; so h bounds every alignment. For versions 0..5
// returns summation_tree_height(version, n). Throws std::invalid_argument for a version outside
// 0..7, or max_blocks == 0 for v6/v7.
inline double summation_tree_height(int version, std::size_t n, unsigned max_blocks) {
  if (version != 6 && version != 7) return summation_tree_height(version, n);
  if (max_blocks == 0) {
    throw std::invalid_argument("summation_tree_height: max_blocks must be >= 1");
  }
  const std::size_t tiles = std::max<std::size_t>(1, ((n + 3) / 4 + 1023) / 1024);
  const std::size_t grid = std::min<std::size_t>(tiles, max_blocks);
  const std::size_t per_block = (tiles + grid - 1) / grid;
  const double t = static_cast<double>(per_block);
  if (version == 6) return t + static_cast<double>(grid) + 16.0;
  return t + static_cast<double>((grid + 255) / 256) + 26.0;
}

// ------------------------------------------------------------------------------------------
// Per-element math (CPU-tested).

// How n floats starting at `p` split for 16-byte (float4) loads: `head` scalars up to the first
// 16-byte boundary, `vec4` whole float4s, then `tail` scalars. head + 4 * vec4 + tail == n,
// head <= 3, tail <= 3, and p + head is 16-byte aligned whenever vec4 > 0.
// A float4 load from an address that is not a multiple of 16 is a misaligned-address error on
// the GPU (Programming Guide, "Device Memory Accesses"), so the kernels peel these scalars off.
struct Float4Split {
  std::size_t head;
  std::size_t vec4;
  std::size_t tail;
};
// Precondition: p is 4-byte aligned (every valid float*). p is never dereferenced.
// Exercise 3 (stub in exercise.cu).
Float4Split split_for_float4(const float* p, std::size_t n);

// Argmax state: the largest value seen and its index. The combine is a total order, so any
// tree of combines gives the same answer (no run-to-run variation, unlike a float sum):
//  - NaN counts as larger than every number, so a NaN anywhere is reported (as numpy.argmax
//    and torch.argmax do), at the lowest NaN index;
//  - equal values (and -0.0 == +0.0) go to the lowest index.
struct ArgMax {
  float value;
  std::uint32_t index;
};

REDUCTION_HD inline ArgMax argmax_combine(ArgMax a, ArgMax b) {
  const bool a_nan = a.value != a.value;  // isnan without <cmath>: NaN is unequal to itself
  const bool b_nan = b.value != b.value;
  if (a_nan != b_nan) return a_nan ? a : b;
  if (!a_nan && a.value != b.value) return a.value > b.value ? a : b;
  return a.index <= b.index ? a : b;
}

// Mean and variance state (count, mean, M2 = sum of squared deviations from the mean).
// Merging two states is Chan, Golub and LeVeque's pairwise update ("Updating Formulae and a
// Pairwise Algorithm for Computing Sample Variances", 1979); merging a state with one element
// is Welford's update. It never subtracts two large sums of squares, so it keeps its accuracy
// when the mean is large compared with the spread (sum(x^2) - n*mean^2 in float does not).
struct Moments {
  std::uint32_t count;
  float mean;
  float m2;
};

REDUCTION_HD inline Moments moments_merge(Moments a, Moments b) {
  if (a.count == 0) return b;
  if (b.count == 0) return a;
  const std::uint32_t n = a.count + b.count;
  const float nb_over_n = static_cast<float>(b.count) / static_cast<float>(n);
  const float delta = b.mean - a.mean;
  Moments m;
  m.count = n;
  m.mean = a.mean + delta * nb_over_n;
  m.m2 = a.m2 + b.m2 + delta * delta * static_cast<float>(a.count) * nb_over_n;
  return m;
}

// Population variance (divide by n), what normalisation layers use; NaN (0/0) for an empty state.
REDUCTION_HD inline float population_variance(Moments m) {
  return m.m2 / static_cast<float>(m.count);
}

// ------------------------------------------------------------------------------------------
// Scratch memory: per-block partial results between passes, and the counter the single-launch
// two-pass kernels (v7, argmax, moments) use to find the last block. It grows on demand
// (cudaMalloc, which synchronises the device) and is reused, so time a launcher after one
// warm-up call. One Workspace serves one stream at a time: two launches that may overlap need
// two Workspaces. It belongs to the device that was current when it first allocated.
class Workspace {
 public:
  // At least `bytes` of device memory in scratch area 0 or 1; contents undefined. Growing frees
  // the old allocation, so a pointer from an earlier call is invalid after a larger request.
  // Throws std::invalid_argument for another area, CudaError if the allocation fails.
  void* scratch(int area, std::size_t bytes);
  // A device counter that is zero between launches (every launch that uses it leaves it zero).
  // Zeroed with cudaMemsetAsync on `stream` when first allocated.
  unsigned* retirement_counter(cudaStream_t stream);

 private:
  course::DeviceBuffer<unsigned char> scratch_[2];
  course::DeviceBuffer<unsigned> counter_;
};

// ------------------------------------------------------------------------------------------
// The sum, every version.

// *out = in[0] + ... + in[n-1] with version `version` (0..7, see versions()). n == 0 gives 0.
// in: n floats, 4-byte aligned at any offset (vectorised versions handle the unaligned ends).
// out: one float, must not overlap the input.
// Throws std::invalid_argument for a version outside 0..7, in == nullptr with n > 0,
// out == nullptr, a misaligned `in`, or n > kMaxElements.
void reduce_sum(int version, const float* in, std::size_t n, float* out, Workspace& ws,
                cudaStream_t stream);

// The most blocks reduce_sum launches for version 6 or 7 on the current device: the blocks of
// that version's sum kernel resident at once (occupancy calculator x SM count). What
// summation_tree_height(version, n, max_blocks) needs. Throws std::invalid_argument for another
// version, CudaError if a CUDA query fails (no device).
unsigned grid_stride_resident_blocks(int version);

// One pass of the shared-memory tree versions: block b (kBlockThreads threads) writes the sum
// of its slice of `in` to block_sums[b]; there are ceil(n / elements_per_block) blocks, with
// elements_per_block = kBlockThreads (v1..v3) or 2 * kBlockThreads (v4, v5). reduce_sum
// repeats the pass on the block sums until one value is left. Preconditions: n > 0 and the
// arguments valid (reduce_sum checks them).
void reduce_pass_v1_interleaved_divergent(const float* in, std::size_t n, float* block_sums,
                                          cudaStream_t stream);
void reduce_pass_v2_interleaved_bank_conflicts(const float* in, std::size_t n, float* block_sums,
                                               cudaStream_t stream);
void reduce_pass_v3_sequential_addressing(const float* in, std::size_t n, float* block_sums,
                                          cudaStream_t stream);  // exercise 1
void reduce_pass_v4_first_add_during_load(const float* in, std::size_t n, float* block_sums,
                                          cudaStream_t stream);
void reduce_pass_v5_warp_shuffle(const float* in, std::size_t n, float* block_sums,
                                 cudaStream_t stream);  // exercise 2
// Elements one block of that pass reduces.
std::size_t elements_per_block(int version);

// ------------------------------------------------------------------------------------------
// Library baselines: the oracles of the tests and the yardstick of the benchmark.

// cub::DeviceReduce::Sum into *out. `temp` is CUB's temporary storage; it grows when CUB asks
// for more (a cudaMalloc) and is reused across calls. n == 0 gives 0.
void cub_sum(const float* in, std::size_t n, float* out, course::DeviceBuffer<unsigned char>& temp,
             cudaStream_t stream);

// thrust::reduce(thrust::cuda::par.on(stream), in, in + n). Synchronous: Thrust allocates its
// temporary storage, reduces, copies the sum back to the host and waits, every call.
float thrust_sum(const float* in, std::size_t n, cudaStream_t stream);

// ------------------------------------------------------------------------------------------
// Deployment uses of the same machinery (v7's kernel with a different combine, and the warp
// shuffle of v5 for short rows).

// Largest value and its index (ties to the lowest index, NaN wins; see ArgMax) into *out.
// Deterministic. Throws std::invalid_argument for n == 0 (no maximum), besides reduce_sum's.
void argmax(const float* in, std::size_t n, ArgMax* out, Workspace& ws, cudaStream_t stream);

// Count, mean and M2 of n floats into *out; population_variance(*out) is the variance.
// Deterministic. Throws std::invalid_argument for n == 0.
void moments(const float* in, std::size_t n, Moments* out, Workspace& ws, cudaStream_t stream);

// Row-wise softmax over class scores: in and out are rows x cols, row-major, contiguous
// (out may equal in). out[r][c] = exp(in[r][c] - m_r) / sum_j exp(in[r][j] - m_r) with m_r the
// row's maximum: subtracting it keeps every exp() <= 1, so large logits cannot overflow to inf.
// A row containing NaN gives NaN; a row of all -inf gives NaN (0/0), as in PyTorch.
// rows == 0 does nothing. Throws std::invalid_argument for cols == 0 with rows > 0, null
// pointers, or rows * cols > kMaxElements.
void softmax_rows(const float* in, float* out, std::size_t rows, std::size_t cols,
                  cudaStream_t stream);
// The kernel launch behind softmax_rows: one warp per row. Exercise 4 (stub in exercise.cu).
// Preconditions: rows > 0, cols > 0, arguments valid (softmax_rows checks them).
void softmax_rows_warp_per_row(const float* in, float* out, std::size_t rows, std::size_t cols,
                               cudaStream_t stream);

// ------------------------------------------------------------------------------------------
// Small host helpers main.cu and the tests share.

// Copies one value (a sum, an ArgMax, a Moments) from device memory, after the work queued on
// `stream` before it, and waits for it.
template <class T>
T read_back(const T* device_value, cudaStream_t stream) {
  T value;
  CUDA_CHECK(cudaMemcpyAsync(&value, device_value, sizeof(T), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return value;
}

// The bits of a float, to compare results bit for bit (== would call -0.0 and 0.0 equal and a
// NaN unequal to itself).
inline std::uint32_t float_bits(float x) {
  std::uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
}

// ------------------------------------------------------------------------------------------
// Test data on the GPU: out[i] = uniform_from_index(seed, i, lo, hi). Cheaper than generating
// 2^28 numbers on the CPU and copying them. out: n floats (device). Values lie in [lo, hi) up to
// one rounding; lo == hi fills with the constant lo (all ones, say). lo > hi is not rejected: it
// fills (hi, lo] instead. n == 0 does nothing; throws std::invalid_argument for out == nullptr
// with n > 0, CudaError if the launch fails.
void fill_uniform(float* out, std::size_t n, std::uint32_t seed, float lo, float hi,
                  cudaStream_t stream);

// A counter-based generator: a 32-bit integer hash (Wellons' "lowbias32") of seed and index,
// mapped to [lo, hi). Bitwise the same on host and device: integer math, then one fmaf, which
// is correctly rounded on both (a plain a*b+c could be contracted to an FMA on one side only).
REDUCTION_HD inline std::uint32_t hash_u32(std::uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}
REDUCTION_HD inline float uniform_from_index(std::uint32_t seed, std::size_t i, float lo,
                                             float hi) {
  const std::uint32_t h = hash_u32(static_cast<std::uint32_t>(i) ^
                                   hash_u32(seed ^ static_cast<std::uint32_t>(i >> 32)));
  const float unit = static_cast<float>(h >> 8) * (1.0f / 16777216.0f);  // 24 random bits in [0, 1)
  return fmaf(hi - lo, unit, lo);
}

}  // namespace reduction
