// Lesson 05: parallel reduction, the sum of n floats, one numbered version per idea.
//
// clang-format off
//   N  kernel                                what it fixes in the version before
//   0  reduce_v0_atomic_per_element          the obvious first try: one atomicAdd per element
//   1  reduce_v1_interleaved_divergent       a tree in shared memory instead of n serial atomics
//   2  reduce_v2_interleaved_bank_conflicts  v1's warps all diverge: pack active threads together
//   3  reduce_v3_sequential_addressing       v2's strided indices collide in banks: consecutive words
//   4  reduce_v4_first_add_during_load       half of v3's threads idle from step one: add 2 on load
//   5  reduce_v5_warp_shuffle                the last warp's steps in registers (__shfl_down_sync)
//   6  reduce_v6_grid_stride_float4          1-2 elements per thread is launch-bound: one wave of
//                                            blocks, float4 loads, 4 loads in flight per thread
//   7  reduce_v7_deterministic               v6's atomicAdd of block totals varies run to run: totals
//                                            in block order, the last block adds them in fixed order
// clang-format on
//
// Run one version: `lesson05 N` (checked against a double-precision CPU sum, then timed).
// Time them all against cub::DeviceReduce::Sum: `make bench LESSON=05`.
// v3, v5 (one pass each), the float4 split of v6/v7 and the row softmax are the exercises: their
// solutions are in solutions.cuh (included at the end of this file), their stubs in exercise.cu.
// v4 builds on v3's tree, the answer to exercise 1, so that tree is in solutions.cuh too.
//
// Versions 1-5 follow Mark Harris, "Optimizing Parallel Reduction in CUDA" (NVIDIA, 2007), with
// the pre-Volta `volatile` warp-synchronous tail replaced by warp shuffles. They reduce one tile
// per block and are repeated on the block sums until one value is left (reduce_multipass).
#include "reduction.cuh"

#include <cub/device/device_reduce.cuh>
#include <thrust/reduce.h>
#include <thrust/system/cuda/execution_policy.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

#include "common/cuda_check.hpp"

namespace reduction {

namespace {

constexpr unsigned kFullMask = 0xffffffffu;  // all 32 lanes take part in a shuffle
constexpr int kWarps = kBlockThreads / 32;

std::size_t ceil_div(std::size_t a, std::size_t b) {
  return (a + b - 1) / b;
}

// ------------------------------------------------------------------------------------------
// v0: every thread atomicAdds its element into *out. It looks correct, but the n
// read-modify-writes of one address are serialised by the L2 (Programming Guide, "Atomic
// Functions"), the order they land in, hence the rounding, changes from run to run, and a float
// total of ones stops at 2^24 = 16777216: from there on, 2^24 + 1 rounds back to 2^24.
__global__ void reduce_v0_atomic_per_element(const float* __restrict__ in, std::size_t n,
                                             float* out) {
  const std::size_t i = blockIdx.x * std::size_t{kBlockThreads} + threadIdx.x;
  if (i < n) atomicAdd(out, in[i]);
}

void launch_v0(const float* in, std::size_t n, float* out, cudaStream_t stream) {
  CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof(float), stream));  // 0.0f is all-zero bits
  const auto blocks = static_cast<unsigned>(ceil_div(n, kBlockThreads));
  reduce_v0_atomic_per_element<<<blocks, kBlockThreads, 0, stream>>>(in, n, out);
  CUDA_CHECK_LAUNCH();
}

// ------------------------------------------------------------------------------------------
// v1: a tree in shared memory. Each block loads kBlockThreads elements and adds pairs in
// log2(256) = 8 steps, a __syncthreads() between steps. Step s (stride 1, 2, 4, ...) keeps the
// threads whose index is a multiple of 2*stride: every warp keeps a few active lanes, so all
// 8 warps issue every step while most of their lanes sit idle ("SIMT Architecture": lanes of
// a warp that take different branches run one after the other), and `%` is a slow integer op.
__global__ void reduce_v1_interleaved_divergent(const float* __restrict__ in, std::size_t n,
                                                float* block_sums) {
  __shared__ float partial[kBlockThreads];
  const unsigned t = threadIdx.x;
  const std::size_t i = blockIdx.x * std::size_t{kBlockThreads} + t;
  partial[t] = i < n ? in[i] : 0.0f;
  __syncthreads();
  for (unsigned stride = 1; stride < kBlockThreads; stride *= 2) {
    if (t % (2 * stride) == 0) partial[t] += partial[t + stride];
    __syncthreads();
  }
  if (t == 0) block_sums[blockIdx.x] = partial[0];
}

// v2: the same pairs, computed by threads 0, 1, 2, ... (thread t adds at index 2*stride*t), so
// the active threads fill whole warps and the idle warps skip the step entirely. New cost: in
// one warp, index 2*stride*t hits shared-memory bank (2*stride*t) % 32, so two, four, ...
// sixteen lanes land in the same bank and the access is replayed that many times
// ("Shared Memory" in the Programming Guide: 32 banks of 4-byte words).
__global__ void reduce_v2_interleaved_bank_conflicts(const float* __restrict__ in, std::size_t n,
                                                     float* block_sums) {
  __shared__ float partial[kBlockThreads];
  const unsigned t = threadIdx.x;
  const std::size_t i = blockIdx.x * std::size_t{kBlockThreads} + t;
  partial[t] = i < n ? in[i] : 0.0f;
  __syncthreads();
  for (unsigned stride = 1; stride < kBlockThreads; stride *= 2) {
    const unsigned k = 2 * stride * t;
    if (k < kBlockThreads) partial[k] += partial[k + stride];
    __syncthreads();
  }
  if (t == 0) block_sums[blockIdx.x] = partial[0];
}

// v3: sequential addressing, thread t adds partial[t + stride] into partial[t] with the stride
// halving from 128: a warp reads 32 consecutive words, one per bank. Exercise 1: the kernel and
// reduce_pass_v3_sequential_addressing are in exercise.cu (yours) and solutions.cuh.

// v3's tree over partial[0 .. kBlockThreads), which every thread of the block calls once the
// partial sums are in place and visible (after a __syncthreads()); it leaves the block's total
// in partial[0]. It is the answer to exercise 1, so its body is in solutions.cuh, which is
// included at the end of this file in both builds (try the exercise before you read it).
__device__ __forceinline__ void tree_sequential_addressing(float* partial);

// v4: in v3 half of the threads only load and never add. Let each thread add two elements,
// kBlockThreads apart (both loads coalesced), while loading: half the blocks for the same n.
// Then v3's tree.
__global__ void reduce_v4_first_add_during_load(const float* __restrict__ in, std::size_t n,
                                                float* block_sums) {
  __shared__ float partial[kBlockThreads];
  const unsigned t = threadIdx.x;
  const std::size_t i = blockIdx.x * std::size_t{2 * kBlockThreads} + t;
  float v = i < n ? in[i] : 0.0f;
  if (i + kBlockThreads < n) v += in[i + kBlockThreads];
  partial[t] = v;
  __syncthreads();
  tree_sequential_addressing(partial);
  if (t == 0) block_sums[blockIdx.x] = partial[0];
}

// v5: once 64 values are left, one warp finishes in registers with __shfl_down_sync: no
// shared-memory round trips, no __syncthreads. Exercise 2: the kernel and its pass launcher
// are in exercise.cu (yours) and solutions.cuh. (Harris' 2007 version unrolled the last warp on
// a `volatile` shared array and no barrier, relying on the 32 lanes running in lockstep. Since
// Volta, independent thread scheduling lets lanes of a warp run apart, so that code races; the
// _sync shuffles name the lanes that must meet: "Warp Shuffle Functions", "Independent Thread
// Scheduling".)

// ------------------------------------------------------------------------------------------
// v6 and v7: many elements per thread. The tree versions give each thread one or two elements:
// at 2^28 floats that is 2^19 blocks whose time goes in launching, loading one value, 8
// barriers and a write. Here a grid of exactly one wave (as many blocks as fit on the GPU at
// once) walks the array in tiles, each thread keeping kUnroll independent 16-byte loads in
// flight: DRAM latency is hidden by bytes in flight (Little's law: bandwidth x latency), not
// by more threads ("Maximize Memory Throughput" in the Best Practices Guide).
constexpr int kUnroll = 4;                      // float4 loads in flight per thread per tile
constexpr int kTile = kBlockThreads * kUnroll;  // float4s a block reads per tile (16 KiB)

// The generic kernels are templates over a reduction "op": a partial-result type T and
// identity(), element(x, i), element4(four elements starting at index i, i) and combine(a, b).
// combine must be associative and commutative up to rounding. The sum comes first; argmax and
// mean/variance (further down) reuse the same loop, tree and last-block pass.
struct SumOp {
  using T = float;
  __device__ T identity() const { return 0.0f; }
  __device__ T element(float x, std::size_t) const { return x; }
  __device__ T element4(float4 v, std::size_t) const { return (v.x + v.y) + (v.z + v.w); }
  __device__ T combine(T a, T b) const { return a + b; }
};

// Shuffles move 32-bit registers: a struct goes one field at a time.
__device__ float shfl_down(float v, int offset) {
  return __shfl_down_sync(kFullMask, v, offset);
}
__device__ ArgMax shfl_down(ArgMax v, int offset) {
  return {__shfl_down_sync(kFullMask, v.value, offset),
          __shfl_down_sync(kFullMask, v.index, offset)};
}
__device__ Moments shfl_down(Moments v, int offset) {
  return {__shfl_down_sync(kFullMask, v.count, offset), __shfl_down_sync(kFullMask, v.mean, offset),
          __shfl_down_sync(kFullMask, v.m2, offset)};
}

// The warp's total in lane 0: lane i combines lane i + 16, then i + 8, ..., i + 1.
template <class Op>
__device__ typename Op::T warp_reduce(typename Op::T v, Op op) {
  for (int offset = 16; offset > 0; offset /= 2) v = op.combine(v, shfl_down(v, offset));
  return v;
}

// The block's total in thread 0: each warp reduces in registers, lane 0 of each warp leaves
// its total in shared memory, warp 0 reduces those. Two barriers instead of v3's eight.
// Requires blockDim.x == kBlockThreads. The order is fixed, so the result is deterministic.
template <class Op>
__device__ typename Op::T block_reduce(typename Op::T v, Op op) {
  __shared__ typename Op::T warp_totals[kWarps];
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_reduce(v, op);
  if (lane == 0) warp_totals[warp] = v;
  __syncthreads();
  if (warp == 0) v = warp_reduce(lane < kWarps ? warp_totals[lane] : op.identity(), op);
  __syncthreads();  // warp_totals is free again for the caller's next block_reduce
  return v;
}

// One thread's share: the unaligned head (block 0's first threads), whole tiles of float4s
// block-strided over the grid (no bounds checks), the last partial tile (bounds-checked), the
// tail. Tile layout: float4 number base + u*kBlockThreads + threadIdx.x, so for each u a warp
// reads 512 contiguous bytes (coalesced). The kUnroll loads are issued before any add uses
// them and go into kUnroll separate accumulators, so they are independent and overlap.
template <class Op>
__device__ typename Op::T thread_reduce(const float* __restrict__ in, Float4Split s, Op op) {
  using T = typename Op::T;
  const std::size_t tid = blockIdx.x * std::size_t{kBlockThreads} + threadIdx.x;
  T acc[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) acc[u] = op.identity();

  if (tid < s.head) acc[0] = op.combine(acc[0], op.element(__ldg(in + tid), tid));

  const float4* body = reinterpret_cast<const float4*>(in + s.head);  // 16-byte aligned
  const std::size_t grid_step = gridDim.x * std::size_t{kTile};
  std::size_t base = blockIdx.x * std::size_t{kTile};
  for (; base + kTile <= s.vec4; base += grid_step) {
    float4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = __ldg(body + base + u * kBlockThreads + threadIdx.x);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const std::size_t k = base + u * kBlockThreads + threadIdx.x;
      acc[u] = op.combine(acc[u], op.element4(v[u], s.head + 4 * k));
    }
  }
  if (base < s.vec4) {  // the last, partial tile: only the block it falls to gets here
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const std::size_t k = base + u * kBlockThreads + threadIdx.x;
      if (k < s.vec4) acc[u] = op.combine(acc[u], op.element4(__ldg(body + k), s.head + 4 * k));
    }
  }

  if (tid < s.tail) {
    const std::size_t j = s.head + 4 * s.vec4 + tid;
    acc[0] = op.combine(acc[0], op.element(__ldg(in + j), j));
  }
  static_assert(kUnroll == 4, "the accumulators are combined as a fixed tree of four");
  return op.combine(op.combine(acc[0], acc[1]), op.combine(acc[2], acc[3]));
}

// Blocks of `kernel` (kBlockThreads threads) resident on the whole GPU at once: the occupancy
// calculator's blocks per SM (it accounts for registers, shared memory and threads per SM)
// times the SM count ("Occupancy Calculator" in the Programming Guide). Cached per device and
// kernel: the query costs microseconds, which would show at small n.
unsigned resident_blocks(const void* kernel) {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  static std::mutex mutex;
  static std::map<std::pair<int, const void*>, unsigned> cache;
  const std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_pair(device, kernel);
  const auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  int per_sm = 0, sms = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kBlockThreads, 0));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const unsigned blocks = static_cast<unsigned>(std::max(per_sm, 1) * sms);
  cache.emplace(key, blocks);
  return blocks;
}

// One wave of blocks, or fewer when there are fewer tiles than that (at least one block).
unsigned grid_stride_blocks(const void* kernel, const Float4Split& s) {
  const std::size_t tiles = std::max<std::size_t>(1, ceil_div(s.vec4, kTile));
  return static_cast<unsigned>(std::min<std::size_t>(tiles, resident_blocks(kernel)));
}

// v6: thread_reduce + block_reduce, then one atomicAdd per block into *out (zeroed first).
// Fast and a single launch, but the ~1000 block totals can land in a different order each run.
__global__ void __launch_bounds__(kBlockThreads)
    reduce_v6_grid_stride_float4(const float* __restrict__ in, Float4Split split, float* out) {
  const float block_total = block_reduce(thread_reduce(in, split, SumOp{}), SumOp{});
  if (threadIdx.x == 0) atomicAdd(out, block_total);
}

void launch_v6(const float* in, std::size_t n, float* out, cudaStream_t stream) {
  const Float4Split split = split_for_float4(in, n);
  const unsigned blocks =
      grid_stride_blocks(reinterpret_cast<const void*>(&reduce_v6_grid_stride_float4), split);
  CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof(float), stream));
  reduce_v6_grid_stride_float4<<<blocks, kBlockThreads, 0, stream>>>(in, split, out);
  CUDA_CHECK_LAUNCH();
}

// Reads a partial result at the L2, the point of coherence between SMs: the L1 of this SM is
// not kept coherent with other SMs' stores (the Programming Guide's "Memory Fence Functions"
// example reads through a volatile pointer for the same reason).
__device__ float load_l2(const float* p) {
  return __ldcg(p);
}
__device__ ArgMax load_l2(const ArgMax* p) {
  return {__ldcg(&p->value), __ldcg(&p->index)};
}
__device__ Moments load_l2(const Moments* p) {
  return {__ldcg(&p->count), __ldcg(&p->mean), __ldcg(&p->m2)};
}

// v7: v6's loop and tree, but each block writes its total to partials[blockIdx.x] and counts
// itself retired; the block that retires last (whichever it is) combines partials[0..grid) in
// index order with the same fixed tree. Same grid for the same n on the same GPU, same order,
// same bits, run after run; and still one launch, so small n pays no second launch.
// The pattern is the "Memory Fence Functions" example of the Programming Guide: the fence
// orders the partial's store before the counter's increment for every other block.
// `retired` must be zero at launch; atomicInc wraps it back to zero on the last block.
template <class Op>
__global__ void __launch_bounds__(kBlockThreads)
    reduce_v7_deterministic(const float* __restrict__ in, Float4Split split,
                            typename Op::T* partials, unsigned* retired, typename Op::T* out,
                            Op op) {
  __shared__ bool is_last;
  const typename Op::T block_total = block_reduce(thread_reduce(in, split, op), op);
  if (threadIdx.x == 0) {
    partials[blockIdx.x] = block_total;
    __threadfence();  // the partial is visible device-wide before this block counts as retired
    is_last = atomicInc(retired, gridDim.x - 1) == gridDim.x - 1;
  }
  __syncthreads();
  if (!is_last) return;
  __threadfence();  // and the last block sees every partial the others fenced before counting
  typename Op::T acc = op.identity();
  for (unsigned b = threadIdx.x; b < gridDim.x; b += kBlockThreads) {
    acc = op.combine(acc, load_l2(partials + b));
  }
  acc = block_reduce(acc, op);
  if (threadIdx.x == 0) *out = acc;
}

template <class Op>
void launch_v7(const float* in, std::size_t n, typename Op::T* out, Workspace& ws,
               cudaStream_t stream) {
  using T = typename Op::T;
  const Float4Split split = split_for_float4(in, n);
  const auto kernel = &reduce_v7_deterministic<Op>;
  const unsigned blocks = grid_stride_blocks(reinterpret_cast<const void*>(kernel), split);
  T* partials = static_cast<T*>(ws.scratch(0, blocks * sizeof(T)));
  unsigned* retired = ws.retirement_counter(stream);
  kernel<<<blocks, kBlockThreads, 0, stream>>>(in, split, partials, retired, out, Op{});
  CUDA_CHECK_LAUNCH();
}

// ------------------------------------------------------------------------------------------
// Deployment uses: v7's kernel with another op.

// Argmax: argmax_combine (reduction.cuh) is a total order, so the answer does not depend on
// the tree. The identity's index is larger than any valid index, so a real element always wins
// a tie with it, even an element equal to -inf.
struct ArgMaxOp {
  using T = ArgMax;
  __device__ T identity() const { return {-INFINITY, 0xffffffffu}; }
  __device__ T element(float x, std::size_t i) const { return {x, static_cast<std::uint32_t>(i)}; }
  __device__ T element4(float4 v, std::size_t i) const {
    return argmax_combine(argmax_combine(element(v.x, i), element(v.y, i + 1)),
                          argmax_combine(element(v.z, i + 2), element(v.w, i + 3)));
  }
  __device__ T combine(T a, T b) const { return argmax_combine(a, b); }
};

// Mean and variance: four elements make one state directly (mean, then squared deviations
// from it, in registers), so the division in moments_merge runs once per float4, not per float.
struct MomentsOp {
  using T = Moments;
  __device__ T identity() const { return {0u, 0.0f, 0.0f}; }
  __device__ T element(float x, std::size_t) const { return {1u, x, 0.0f}; }
  __device__ T element4(float4 v, std::size_t) const {
    const float mean = ((v.x + v.y) + (v.z + v.w)) * 0.25f;
    const float dx = v.x - mean, dy = v.y - mean, dz = v.z - mean, dw = v.w - mean;
    return {4u, mean, (dx * dx + dy * dy) + (dz * dz + dw * dw)};
  }
  __device__ T combine(T a, T b) const { return moments_merge(a, b); }
};

// Row softmax (exercise 4): in exercise.cu (yours) and solutions.cuh.

// ------------------------------------------------------------------------------------------
// Test data.
__global__ void fill_uniform_kernel(float* out, std::size_t n, std::uint32_t seed, float lo,
                                    float hi) {
  const std::size_t stride = gridDim.x * std::size_t{blockDim.x};
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += stride) {
    out[i] = uniform_from_index(seed, i, lo, hi);
  }
}

// ------------------------------------------------------------------------------------------
// Argument checks, shared by the launchers; they run before anything touches the GPU.
void check_input(const char* who, const float* in, std::size_t n) {
  if (n > kMaxElements) {
    throw std::invalid_argument(std::string(who) + ": n = " + std::to_string(n) +
                                " is larger than kMaxElements (2^31 - 1)");
  }
  if (n > 0 && in == nullptr) {
    throw std::invalid_argument(std::string(who) + ": input is null with n = " + std::to_string(n) +
                                "; expected a device pointer to n floats");
  }
  if (reinterpret_cast<std::uintptr_t>(in) % alignof(float) != 0) {
    throw std::invalid_argument(std::string(who) +
                                ": input pointer is not 4-byte aligned; expected a float*");
  }
}

void check_output(const char* who, const void* out) {
  if (out == nullptr) {
    throw std::invalid_argument(std::string(who) + ": output is null; expected a device pointer");
  }
}

// Versions 1-5: one pass turns n values into ceil(n / per_block) block sums; repeat on the
// block sums, ping-ponging between two scratch areas, until one block writes *out.
using PassFn = void (*)(const float*, std::size_t, float*, cudaStream_t);

void reduce_multipass(PassFn pass, std::size_t per_block, const float* in, std::size_t n,
                      float* out, Workspace& ws, cudaStream_t stream) {
  const std::size_t first = ceil_div(n, per_block);
  float* area[2] = {static_cast<float*>(ws.scratch(0, first * sizeof(float))),
                    static_cast<float*>(ws.scratch(1, ceil_div(first, per_block) * sizeof(float)))};
  const float* src = in;
  std::size_t count = n;
  for (int next = 0;; next ^= 1) {
    const std::size_t blocks = ceil_div(count, per_block);
    float* dst = blocks == 1 ? out : area[next];
    pass(src, count, dst, stream);
    if (blocks == 1) return;
    src = dst;
    count = blocks;
  }
}

}  // namespace

// ------------------------------------------------------------------------------------------
// Public launchers.

const std::vector<VersionInfo>& versions() {
  static const std::vector<VersionInfo> table = {
      {0, "reduce_v0_atomic_per_element", "the obvious first try: one atomicAdd per element",
       false},
      {1, "reduce_v1_interleaved_divergent", "a tree in shared memory instead of n serial atomics",
       true},
      {2, "reduce_v2_interleaved_bank_conflicts",
       "no divergent warps: active threads packed together (but bank conflicts)", true},
      {3, "reduce_v3_sequential_addressing", "no bank conflicts: consecutive shared-memory words",
       true},
      {4, "reduce_v4_first_add_during_load", "no idle threads at step one: add two on load", true},
      {5, "reduce_v5_warp_shuffle", "last warp in registers with __shfl_down_sync, no barriers",
       true},
      {6, "reduce_v6_grid_stride_float4",
       "one wave of blocks, float4 loads, 4 in flight per thread; atomicAdd per block", false},
      {7, "reduce_v7_deterministic",
       "block totals in block order, summed by the last block: same bits every run", true},
  };
  return table;
}

unsigned grid_stride_resident_blocks(int version) {
  if (version == 6) {
    return resident_blocks(reinterpret_cast<const void*>(&reduce_v6_grid_stride_float4));
  }
  if (version == 7) {
    return resident_blocks(reinterpret_cast<const void*>(&reduce_v7_deterministic<SumOp>));
  }
  throw std::invalid_argument("grid_stride_resident_blocks: version " + std::to_string(version) +
                              "; expected 6 or 7");
}

std::size_t elements_per_block(int version) {
  if (version >= 1 && version <= 3) return kBlockThreads;
  if (version == 4 || version == 5) return 2 * kBlockThreads;
  throw std::invalid_argument("elements_per_block: version " + std::to_string(version) +
                              " is not a tree version; expected 1..5");
}

void* Workspace::scratch(int area, std::size_t bytes) {
  if (area < 0 || area > 1) {
    throw std::invalid_argument("Workspace::scratch: area " + std::to_string(area) +
                                "; expected 0 or 1");
  }
  course::DeviceBuffer<unsigned char>& buffer = scratch_[area];
  if (buffer.size() < bytes) buffer = course::DeviceBuffer<unsigned char>(bytes);
  return buffer.data();
}

unsigned* Workspace::retirement_counter(cudaStream_t stream) {
  if (counter_.empty()) {
    course::DeviceBuffer<unsigned> counter(1);
    // On the caller's stream, so the first kernel that uses it is ordered after the zeroing.
    CUDA_CHECK(cudaMemsetAsync(counter.data(), 0, sizeof(unsigned), stream));
    counter_ = std::move(counter);
  }
  return counter_.data();
}

void reduce_sum(int version, const float* in, std::size_t n, float* out, Workspace& ws,
                cudaStream_t stream) {
  if (version < 0 || version >= static_cast<int>(versions().size())) {
    throw std::invalid_argument("reduce_sum: version " + std::to_string(version) +
                                " does not exist; expected 0.." +
                                std::to_string(versions().size() - 1));
  }
  check_input("reduce_sum", in, n);
  check_output("reduce_sum", out);
  if (n == 0) {  // the empty sum; no kernel needed
    CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof(float), stream));
    return;
  }
  if (version == 0) {
    launch_v0(in, n, out, stream);
  } else if (version <= 5) {
    static constexpr PassFn passes[] = {
        &reduce_pass_v1_interleaved_divergent, &reduce_pass_v2_interleaved_bank_conflicts,
        &reduce_pass_v3_sequential_addressing, &reduce_pass_v4_first_add_during_load,
        &reduce_pass_v5_warp_shuffle};
    reduce_multipass(passes[version - 1], elements_per_block(version), in, n, out, ws, stream);
  } else if (version == 6) {
    launch_v6(in, n, out, stream);
  } else {
    launch_v7<SumOp>(in, n, out, ws, stream);
  }
}

void reduce_pass_v1_interleaved_divergent(const float* in, std::size_t n, float* block_sums,
                                          cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>(ceil_div(n, kBlockThreads));
  reduce_v1_interleaved_divergent<<<blocks, kBlockThreads, 0, stream>>>(in, n, block_sums);
  CUDA_CHECK_LAUNCH();
}

void reduce_pass_v2_interleaved_bank_conflicts(const float* in, std::size_t n, float* block_sums,
                                               cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>(ceil_div(n, kBlockThreads));
  reduce_v2_interleaved_bank_conflicts<<<blocks, kBlockThreads, 0, stream>>>(in, n, block_sums);
  CUDA_CHECK_LAUNCH();
}

void reduce_pass_v4_first_add_during_load(const float* in, std::size_t n, float* block_sums,
                                          cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>(ceil_div(n, 2 * kBlockThreads));
  reduce_v4_first_add_during_load<<<blocks, kBlockThreads, 0, stream>>>(in, n, block_sums);
  CUDA_CHECK_LAUNCH();
}

void cub_sum(const float* in, std::size_t n, float* out, course::DeviceBuffer<unsigned char>& temp,
             cudaStream_t stream) {
  check_input("cub_sum", in, n);
  check_output("cub_sum", out);
  // int: the count type every CUB of CUDA 12.x and 13.x accepts (kMaxElements keeps it valid).
  const int count = static_cast<int>(n);
  std::size_t bytes = 0;
  CUDA_CHECK(cub::DeviceReduce::Sum(nullptr, bytes, in, out, count, stream));  // size query
  // Never hand CUB a null buffer on the second call: null means "only tell me the size".
  if (temp.size() < std::max<std::size_t>(bytes, 1)) {
    temp = course::DeviceBuffer<unsigned char>(std::max<std::size_t>(bytes, 1));
  }
  CUDA_CHECK(cub::DeviceReduce::Sum(temp.data(), bytes, in, out, count, stream));
}

float thrust_sum(const float* in, std::size_t n, cudaStream_t stream) {
  check_input("thrust_sum", in, n);
  if (n == 0) return 0.0f;
  // thrust::cuda::par.on(stream): run on our stream; raw pointers are device pointers under it.
  return thrust::reduce(thrust::cuda::par.on(stream), in, in + n, 0.0f);
}

void argmax(const float* in, std::size_t n, ArgMax* out, Workspace& ws, cudaStream_t stream) {
  check_input("argmax", in, n);
  check_output("argmax", out);
  if (n == 0) throw std::invalid_argument("argmax: n = 0; an empty array has no maximum");
  launch_v7<ArgMaxOp>(in, n, out, ws, stream);
}

void moments(const float* in, std::size_t n, Moments* out, Workspace& ws, cudaStream_t stream) {
  check_input("moments", in, n);
  check_output("moments", out);
  if (n == 0) throw std::invalid_argument("moments: n = 0; the mean of nothing is undefined");
  launch_v7<MomentsOp>(in, n, out, ws, stream);
}

void softmax_rows(const float* in, float* out, std::size_t rows, std::size_t cols,
                  cudaStream_t stream) {
  if (rows == 0) return;
  if (cols == 0) {
    throw std::invalid_argument("softmax_rows: cols = 0 with rows = " + std::to_string(rows) +
                                "; expected at least one class score per row");
  }
  if (cols > kMaxElements / rows) {
    throw std::invalid_argument("softmax_rows: rows * cols = " + std::to_string(rows) + " * " +
                                std::to_string(cols) + " is larger than kMaxElements (2^31 - 1)");
  }
  check_input("softmax_rows", in, rows * cols);
  check_output("softmax_rows", out);
  softmax_rows_warp_per_row(in, out, rows, cols, stream);
}

void fill_uniform(float* out, std::size_t n, std::uint32_t seed, float lo, float hi,
                  cudaStream_t stream) {
  if (n == 0) return;
  check_output("fill_uniform", out);
  // A grid-stride loop with a bounded grid: any n, and enough blocks to fill the GPU.
  const auto blocks =
      static_cast<unsigned>(std::min<std::size_t>(ceil_div(n, kBlockThreads), 4096));
  fill_uniform_kernel<<<blocks, kBlockThreads, 0, stream>>>(out, n, seed, lo, hi);
  CUDA_CHECK_LAUNCH();
}

}  // namespace reduction

// solutions.cuh, compiled here, in this translation unit: in both builds v3's tree, which v4 above
// calls; in the lesson build only, the exercise solutions (the exercise build defines
// LESSON_EXERCISE_BUILD and takes exercise.cu instead). Try the exercises first.
#include "solutions.cuh"
