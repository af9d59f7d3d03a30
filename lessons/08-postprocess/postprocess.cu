// Lesson 08: the postprocess kernels and their host-side launchers.
//
// Read top to bottom, in the order the work happens on one frame:
//   1. decode_kernel          one thread per candidate -> bounded candidate buffer (+ dense keys)
//   2. select_top_k_kernel    only on overflow: the K best, whatever the thread order
//   3. rank_sort_kernel       (score desc, index asc)
//   4. NMS v1: nms_v1_fast_kernel + compact_kept_kernel       parallel, not greedy
//   5. NMS v2: nms_v2_mask_kernel + nms_v2_reduce_kernel      exact greedy, bit masks
//   6. the classification head: softmax_kernel (top-k is exercise 4)
//   7. host side: GraphExec, GpuPostprocessor, GpuNms, softmax_rows
//   8. the exercise solutions (iou, decode_candidate, nms_mask_word, topk_rows): solutions.cuh,
//      included at the end, in this translation unit, so the kernels above inline them
// Nothing between the steps goes back to the host: each kernel reads the candidate count the
// previous one left in device memory (ResultHeader), and the grids are sized for the buffers'
// capacity, with blocks past the count returning at once.
#include "postprocess.cuh"

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "common/cuda_check.hpp"
#include "common/stream.hpp"

namespace lesson08 {

namespace {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarpSize = 32;

int ceil_div(int a, int b) {
  return (a + b - 1) / b;
}

// The boxes the sort and NMS kernels work on: what decode counted, capped at the capacity.
__device__ int candidate_count(const ResultHeader* header, int capacity) {
  return min(header->num_above_threshold, capacity);
}

// The last kernel of a run writes the counts the host reads.
__device__ void finish_header(ResultHeader* header, int capacity, int num_detections) {
  header->num_dropped = max(0, header->num_above_threshold - capacity);
  header->num_detections = num_detections;
}

// Exclusive prefix count of `flag` over the threads of the block, in thread order, and the
// block's total in *total. Every thread of the block must call it (it synchronises);
// blockDim.x must be a multiple of 32. `scratch` is 32 ints of shared memory.
// Within a warp, __ballot_sync + __popc counts the lanes below; warp 0 then scans the per-warp
// totals with shuffles (Programming Guide: "Warp Shuffle Functions", "Warp Vote Functions").
__device__ int block_exclusive_count(bool flag, int* scratch, int* total) {
  const int lane = threadIdx.x & (kWarpSize - 1), warp = threadIdx.x / kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  const unsigned ballot = __ballot_sync(kFullMask, flag);
  const int in_warp = __popc(ballot & ((1u << lane) - 1u));
  if (lane == 0) scratch[warp] = __popc(ballot);
  __syncthreads();
  if (warp == 0) {
    int v = lane < warps ? scratch[lane] : 0;
    for (int d = 1; d < kWarpSize; d <<= 1) {
      const int up = __shfl_up_sync(kFullMask, v, d);
      if (lane >= d) v += up;
    }
    scratch[lane] = v;  // inclusive prefix over warps
  }
  __syncthreads();
  const int before = warp == 0 ? 0 : scratch[warp - 1];
  *total = scratch[warps - 1];
  __syncthreads();  // scratch is free again for the next call
  return before + in_warp;
}

// =========================================================================== 1. decode

constexpr int kDecodeThreads = 256;

// One thread per candidate. A candidate that passes the confidence filter takes the next slot
// of `candidates` from an atomic counter; at most `capacity` are stored, but the counter keeps
// counting, so the host learns how many passed (and how many were dropped).
//
// Which candidates get the slots depends on the order the warps reach the atomic, which
// changes from run to run. That is harmless as long as everything fits (the set is the same,
// and the sort fixes the order). When it does not fit, the stored set would be arbitrary, so
// every thread also writes its score key to `keys` (0 = rejected): select_top_k_kernel uses it
// to keep the K best instead.
//
// Warp-aggregated atomic: one atomicAdd per warp for all its passing lanes, instead of one per
// lane, cuts the traffic to that one hot address by up to 32x.
// The kernel bodies below take their block index as an argument, so that the batched kernels
// (section 9) run the very same code with blockIdx.y (or .z) choosing the image.
__device__ __forceinline__ void decode_body(int block, const float* __restrict__ output,
                                            const OutputSpec& spec, const Letterbox& letterbox,
                                            float conf_threshold, std::uint32_t* __restrict__ keys,
                                            ResultHeader* header, int capacity,
                                            Detection* __restrict__ candidates) {
  const int i = block * blockDim.x + threadIdx.x;
  const bool in_range = i < spec.num_candidates;
  Detection d{};
  const bool pass = in_range && decode_candidate(output, spec, i, conf_threshold, letterbox, &d);
  if (in_range) keys[i] = pass ? float_bits(d.score) : 0u;  // scores > threshold >= 0: bits > 0

  // Every lane reaches the ballot (none returned early): the grid is a whole number of warps.
  const unsigned passing = __ballot_sync(kFullMask, pass);
  if (passing == 0) return;
  const int lane = threadIdx.x & (kWarpSize - 1);
  const int leader = __ffs(passing) - 1;
  int base = 0;
  if (lane == leader) base = atomicAdd(&header->num_above_threshold, __popc(passing));
  base = __shfl_sync(kFullMask, base, leader);
  const int slot = base + __popc(passing & ((1u << lane) - 1u));
  if (pass && slot < capacity) candidates[slot] = d;
}

__global__ void __launch_bounds__(kDecodeThreads)
    decode_kernel(const float* __restrict__ output, OutputSpec spec, Letterbox letterbox,
                  float conf_threshold, std::uint32_t* __restrict__ keys, ResultHeader* header,
                  int capacity, Detection* __restrict__ candidates) {
  decode_body(blockIdx.x, output, spec, letterbox, conf_threshold, keys, header, capacity,
              candidates);
}

// ================================================================ 2. top-K on overflow

constexpr int kSelectThreads = 1024;

// Runs after decode_kernel; returns at once unless more than `capacity` candidates passed.
// Then it rebuilds the candidate buffer from the dense keys so that it holds exactly the K =
// capacity best candidates by (score desc, index asc), independent of thread order:
//   a. radix select, 8 bits at a time from the top: a 256-bin histogram of the keys that share
//      the digits chosen so far finds the digit of the K-th largest key; after 4 passes we know
//      that key exactly (T), and how many keys equal to T belong to the top K;
//   b. one ordered pass over the candidates (block-wide prefix counts): take every key > T and
//      the first (lowest-index) keys == T, and decode those candidates again into the buffer.
// One block is enough: this is the rare path (the buffer is sized for the normal case), it reads
// 4 bytes per candidate, and one block can synchronise with __syncthreads between the passes.
__device__ __forceinline__ void select_top_k_body(const float* __restrict__ output,
                                                  const OutputSpec& spec,
                                                  const Letterbox& letterbox, float conf_threshold,
                                                  const std::uint32_t* __restrict__ keys,
                                                  const ResultHeader* header, int capacity,
                                                  Detection* __restrict__ candidates) {
  if (header->num_above_threshold <= capacity) return;  // the common case: nothing was dropped
  __shared__ unsigned histogram[256];
  __shared__ int scratch[kWarpSize];
  __shared__ unsigned chosen_digit, chosen_rank;
  const int n = spec.num_candidates;

  std::uint32_t prefix = 0, prefix_mask = 0;
  unsigned rank = static_cast<unsigned>(capacity);  // we want the rank-th largest key (1-based)
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += blockDim.x) histogram[b] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      const std::uint32_t k = keys[i];
      if (k != 0 && (k & prefix_mask) == prefix) atomicAdd(&histogram[(k >> shift) & 0xffu], 1u);
    }
    __syncthreads();
    if (threadIdx.x < kWarpSize) {
      // Lane l owns digits 255-8l down to 248-8l: the lanes run from the largest digit down, so
      // a prefix sum over lanes counts the keys with a larger digit.
      const int lane = threadIdx.x;
      unsigned counts[8], sum = 0;
      for (int j = 0; j < 8; ++j) {
        counts[j] = histogram[255 - 8 * lane - j];
        sum += counts[j];
      }
      unsigned inclusive = sum;
      for (int d = 1; d < kWarpSize; d <<= 1) {
        const unsigned up = __shfl_up_sync(kFullMask, inclusive, d);
        if (lane >= d) inclusive += up;
      }
      unsigned before = inclusive - sum;
      if (before < rank && rank <= inclusive) {  // exactly one lane
        for (int j = 0; j < 8; ++j) {
          if (before + counts[j] >= rank) {
            chosen_digit = static_cast<unsigned>(255 - 8 * lane - j);
            chosen_rank = rank - before;
            break;
          }
          before += counts[j];
        }
      }
    }
    __syncthreads();
    prefix |= chosen_digit << shift;
    prefix_mask |= 0xffu << shift;
    rank = chosen_rank;
  }
  const std::uint32_t threshold_key = prefix;        // the K-th largest key
  const int equal_to_take = static_cast<int>(rank);  // keys == T that are in the top K

  int written = 0, equal_seen = 0;
  for (int base = 0; base < n; base += blockDim.x) {  // uniform loop: every thread, same trips
    const int i = base + threadIdx.x;
    const std::uint32_t k = i < n ? keys[i] : 0u;
    int equal_total = 0, take_total = 0;
    const int equal_before =
        equal_seen + block_exclusive_count(k == threshold_key, scratch, &equal_total);
    const bool take = k > threshold_key || (k == threshold_key && equal_before < equal_to_take);
    const int slot = written + block_exclusive_count(take, scratch, &take_total);
    if (take) {
      Detection d{};
      decode_candidate(output, spec, i, conf_threshold, letterbox, &d);  // passes: its key > 0
      candidates[slot] = d;
    }
    written += take_total;
    equal_seen += equal_total;
  }
}

__global__ void __launch_bounds__(kSelectThreads)
    select_top_k_kernel(const float* __restrict__ output, OutputSpec spec, Letterbox letterbox,
                        float conf_threshold, const std::uint32_t* __restrict__ keys,
                        const ResultHeader* header, int capacity,
                        Detection* __restrict__ candidates) {
  select_top_k_body(output, spec, letterbox, conf_threshold, keys, header, capacity, candidates);
}

// ======================================================================== 3. the sort

constexpr int kSortThreads = 128;  // small blocks: n = 10,000 spreads over ~80 SMs
constexpr int kSortTile = 2048;    // keys per shared-memory tile: 16 KiB

// Rank sort: an element's position is the number of keys larger than its own. Keys are unique
// (sort_key includes the index), so the ranks are a permutation and the result is the same
// whatever order the candidates arrived in. O(n^2) comparisons, but all independent: for the
// few thousand candidates a frame has, that should take microseconds, in one launch, with the
// count read on the device. Every key is read from shared memory by all threads at once (a
// broadcast, no bank conflict). For much larger n a radix sort (CUB DeviceRadixSort) wins.
__device__ __forceinline__ void rank_sort_body(int block, const Detection* __restrict__ in, int n,
                                               Detection* __restrict__ out) {
  const int first = block * blockDim.x;
  if (first >= n) return;  // the whole block is past the count
  const int i = first + threadIdx.x;
  const std::uint64_t mine = i < n ? sort_key(in[i].score, in[i].index) : 0;
  __shared__ std::uint64_t tile[kSortTile];
  int rank = 0;
  for (int t0 = 0; t0 < n; t0 += kSortTile) {
    const int count = min(kSortTile, n - t0);
    for (int j = threadIdx.x; j < count; j += blockDim.x) {
      tile[j] = sort_key(in[t0 + j].score, in[t0 + j].index);
    }
    __syncthreads();
#pragma unroll 8
    for (int j = 0; j < count; ++j) rank += tile[j] > mine ? 1 : 0;
    __syncthreads();
  }
  if (i < n) out[rank] = in[i];
}

__global__ void __launch_bounds__(kSortThreads)
    rank_sort_kernel(const Detection* __restrict__ in, const ResultHeader* header, int capacity,
                     Detection* __restrict__ out) {
  rank_sort_body(blockIdx.x, in, candidate_count(header, capacity), out);
}

// ================================================================== 4. NMS v1 (Fast NMS)

constexpr int kNmsThreads = 256;
constexpr int kCompactThreads = 1024;

// Each box asks: does ANY box before me (in score order) of my class overlap me by more than
// the threshold? If so I am dropped. One thread per box, no dependency between threads.
//
// That is not greedy NMS. Greedy only lets *kept* boxes suppress: with A > B > C in score,
// IoU(A,B) and IoU(B,C) above the threshold but IoU(A,C) below it, greedy drops B (A kept) and
// then keeps C (its only overlap, B, is gone). Fast NMS drops C too, because B overlaps it.
// So v1 keeps a subset of what greedy keeps; the difference shows up on chains of overlapping
// boxes (crowds, and jittered candidates at the edge of a cluster).
__global__ void __launch_bounds__(kNmsThreads)
    nms_v1_fast_kernel(const Detection* __restrict__ sorted, const ResultHeader* header,
                       int capacity, float iou_threshold, bool class_agnostic,
                       std::uint8_t* __restrict__ keep) {
  const int n = candidate_count(header, capacity);
  const int first = blockIdx.x * blockDim.x;
  if (first >= n) return;
  const int i = first + threadIdx.x;
  Detection me{};
  if (i < n) me = sorted[i];
  bool suppressed = false;
  __shared__ Detection tile[kNmsThreads];
  const int last = min(first + static_cast<int>(blockDim.x), n) - 1;  // the block's last box
  for (int t0 = 0; t0 < last; t0 += blockDim.x) {  // the boxes before it, a tile at a time
    const int j = t0 + threadIdx.x;
    if (j < n) tile[threadIdx.x] = sorted[j];
    __syncthreads();
    const int count = i < n ? min(static_cast<int>(blockDim.x), i - t0) : 0;  // boxes before me
    for (int k = 0; k < count && !suppressed; ++k) {
      suppressed = (class_agnostic || tile[k].class_id == me.class_id) &&
                   iou(tile[k].box, me.box) > iou_threshold;
    }
    __syncthreads();
  }
  if (i < n) keep[i] = suppressed ? 0 : 1;
}

// The kept boxes, in score order, into the result: an ordered compaction with block-wide
// prefix counts, in one block (the order must be global, and n is a few thousand at most).
__global__ void __launch_bounds__(kCompactThreads)
    compact_kept_kernel(const Detection* __restrict__ sorted, const std::uint8_t* __restrict__ keep,
                        ResultHeader* header, int capacity, int max_out,
                        Detection* __restrict__ out) {
  __shared__ int scratch[kWarpSize];
  const int n = candidate_count(header, capacity);
  int written = 0;
  for (int base = 0; base < n && written < max_out; base += blockDim.x) {  // uniform
    const int i = base + threadIdx.x;
    const bool kept = i < n && keep[i] != 0;
    int total = 0;
    const int slot = written + block_exclusive_count(kept, scratch, &total);
    if (kept && slot < max_out) out[slot] = sorted[i];
    written += total;
  }
  if (threadIdx.x == 0) finish_header(header, capacity, min(written, max_out));
}

// ============================================================= 5. NMS v2 (exact greedy)

constexpr int kTile = 64;  // boxes per tile: one bit each in a 64-bit word
constexpr int kReduceThreads = 256;

// Step 1, fully parallel: for every pair (i, j) with i before j, does i suppress j if i is
// kept? One block per 64x64 tile of the pair matrix; thread t computes row i = tile row + t as
// one 64-bit word over the tile's 64 columns (nms_mask_word). Only tiles on or above the
// diagonal: a box is only suppressed by a higher-scoring one.
//
// Layout: word w of row i is at mask[w * mask_rows + i] ("word-major"), so that the 64 threads
// of a block write 64 consecutive words (coalesced), and the reduce step reads the diagonal
// tile, 64 consecutive words, in one go.
__device__ __forceinline__ void nms_v2_mask_body(int row_block, int col_block,
                                                 const Detection* __restrict__ sorted,
                                                 const ResultHeader* header, int capacity,
                                                 float iou_threshold, bool class_agnostic,
                                                 std::uint64_t* __restrict__ mask, int mask_rows) {
  const int n = candidate_count(header, capacity);
  if (col_block < row_block || col_block * kTile >= n) return;
  __shared__ Detection cols[kTile];
  const int col_start = col_block * kTile;
  const int col_count = min(kTile, n - col_start);
  if (static_cast<int>(threadIdx.x) < col_count)
    cols[threadIdx.x] = sorted[col_start + threadIdx.x];
  __syncthreads();
  const int row = row_block * kTile + threadIdx.x;
  if (row < n) {
    mask[static_cast<std::size_t>(col_block) * mask_rows + row] =
        nms_mask_word(sorted[row], row, cols, col_start, col_count, iou_threshold, class_agnostic);
  }
}

__global__ void __launch_bounds__(kTile)
    nms_v2_mask_kernel(const Detection* __restrict__ sorted, const ResultHeader* header,
                       int capacity, float iou_threshold, bool class_agnostic,
                       std::uint64_t* __restrict__ mask, int mask_rows) {
  nms_v2_mask_body(blockIdx.y, blockIdx.x, sorted, header, capacity, iou_threshold, class_agnostic,
                   mask, mask_rows);
}

// Step 2, the sequential part of greedy NMS, on the GPU so the result never visits the host:
// walk the rows in score order, keep a row unless a kept row removed it, and OR each kept row's
// mask into `removed` (one bit per box, in shared memory). One block of 256 threads.
//
// Per block of 64 rows b:
//   - warp 0 resolves the block. Inside it, the only dependencies are in the diagonal tile
//     (rows of b suppressing later rows of b): 64 words, read from shared memory. It loops over
//     the surviving rows in order, once per KEPT row (find-first-set, one shared-memory read,
//     an OR), all lanes in step (the loop is warp-uniform), and lists the kept rows.
//   - all 256 threads then OR the kept rows' words into removed[w] for the later blocks w > b,
//     one word per thread, with the loads of up to 8 kept rows in flight at once.
// The diagonal tiles do not depend on any decision, so they are staged into shared memory 32
// row blocks at a time, all threads loading together: one round of memory latency per 32
// blocks instead of one per block. A block whose rows are all removed already costs two
// __syncthreads and nothing else. Stops early once max_out boxes are kept: later rows cannot
// change the first max_out.
constexpr int kDiagChunk = 32;  // row blocks whose diagonal tiles sit in shared memory (16 KiB)

// removed: ceil(n / 64) words of shared memory. mask: global memory (v2), or a copy of it in
// shared memory (v3; then mask_rows is n).
__device__ __forceinline__ void nms_v2_reduce_body(const Detection* __restrict__ sorted,
                                                   const std::uint64_t* __restrict__ mask,
                                                   int mask_rows, ResultHeader* header,
                                                   int capacity, int max_out,
                                                   Detection* __restrict__ out,
                                                   std::uint64_t* removed) {
  __shared__ std::uint64_t diagonal[kDiagChunk * kTile];
  __shared__ int kept_rows[kTile];
  __shared__ int kept_count;
  const int n = candidate_count(header, capacity);
  const int words = (n + kTile - 1) / kTile;
  const int lane = threadIdx.x & (kWarpSize - 1);
  for (int w = threadIdx.x; w < words; w += blockDim.x) removed[w] = 0;

  int written = 0;
  for (int b = 0; b < words; ++b) {
    if (b % kDiagChunk == 0) {  // uniform: every thread takes the same branch
      for (int e = threadIdx.x; e < kDiagChunk * kTile; e += blockDim.x) {
        const int tile_row_block = b + e / kTile, row = tile_row_block * kTile + e % kTile;
        diagonal[e] = tile_row_block < words && row < n
                          ? mask[static_cast<std::size_t>(tile_row_block) * mask_rows + row]
                          : 0;
      }
      __syncthreads();
    }
    if (threadIdx.x < kWarpSize) {
      const std::uint64_t* tile = diagonal + (b % kDiagChunk) * kTile;
      const int rows = min(kTile, n - b * kTile);
      const std::uint64_t valid = rows == kTile ? ~0ull : ((1ull << rows) - 1ull);
      std::uint64_t done = removed[b];  // rows removed by kept rows of earlier blocks
      std::uint64_t kept = 0;
      for (std::uint64_t todo = ~done & valid; todo != 0; todo = ~done & valid) {
        const int r = __ffsll(static_cast<long long>(todo)) - 1;  // the next surviving row
        kept |= 1ull << r;
        done |= tile[r] | (1ull << r);  // it removes later rows of this block; it is done
      }
      const int room = max_out - written;
      while (__popcll(kept) > room) kept &= ~(1ull << (63 - __clzll(static_cast<long long>(kept))));
      for (int r = lane; r < kTile; r += kWarpSize) {
        if ((kept >> r) & 1ull) {
          const int q = __popcll(kept & ((1ull << r) - 1ull));  // its place among the kept
          kept_rows[q] = r;
          out[written + q] = sorted[b * kTile + r];
        }
      }
      if (lane == 0) kept_count = __popcll(kept);
    }
    __syncthreads();
    const int count = kept_count;
    written += count;
    if (written >= max_out) break;  // uniform: every thread has the same `written`
    if (count > 0) {
      for (int w = b + 1 + threadIdx.x; w < words; w += blockDim.x) {
        const std::uint64_t* column = mask + static_cast<std::size_t>(w) * mask_rows + b * kTile;
        std::uint64_t acc = removed[w];
        for (int q0 = 0; q0 < count; q0 += 8) {
#pragma unroll
          for (int u = 0; u < 8; ++u) {  // up to 8 independent loads in flight
            if (q0 + u < count) acc |= column[kept_rows[q0 + u]];
          }
        }
        removed[w] = acc;
      }
    }
    __syncthreads();  // removed[], kept_rows and the diagonal stage are reused next iteration
  }
  if (threadIdx.x == 0) finish_header(header, capacity, min(written, max_out));
}

__global__ void __launch_bounds__(kReduceThreads)
    nms_v2_reduce_kernel(const Detection* __restrict__ sorted,
                         const std::uint64_t* __restrict__ mask, int mask_rows,
                         ResultHeader* header, int capacity, int max_out,
                         Detection* __restrict__ out) {
  extern __shared__ std::uint64_t dynamic_shared[];
  nms_v2_reduce_body(sorted, mask, mask_rows, header, capacity, max_out, out, dynamic_shared);
}

// NMS v3: v2's greedy pass, but with the mask first copied into shared memory when all of it
// fits (n x ceil(n/64) words; the launch reserves `staged_words` of them after removed[]).
// v2's pass waits, once per row block, for loads from global memory (L2, several hundred ns each
// round) that depend on the previous block's decision; from shared memory each round costs tens
// of ns. The copy itself is one coalesced pass, with no dependency between the loads. Only the
// words the mask kernel wrote are read (tiles on or above the diagonal). When the mask does not
// fit (n above about 1280 on an H200, 600 on a 64 KiB GPU), this is v2's pass unchanged.
__device__ __forceinline__ void nms_v3_reduce_body(const Detection* __restrict__ sorted,
                                                   const std::uint64_t* __restrict__ mask,
                                                   int mask_rows, ResultHeader* header,
                                                   int capacity, int max_out,
                                                   Detection* __restrict__ out, int removed_words,
                                                   int staged_words) {
  extern __shared__ std::uint64_t dynamic_shared[];
  std::uint64_t* removed = dynamic_shared;
  std::uint64_t* staged = dynamic_shared + removed_words;
  const int n = candidate_count(header, capacity);
  const int words = (n + kTile - 1) / kTile;
  if (static_cast<long long>(n) * words > staged_words) {  // uniform: does not fit, v2's pass
    nms_v2_reduce_body(sorted, mask, mask_rows, header, capacity, max_out, out, removed);
    return;
  }
  const int total = n * words;
  for (int e = threadIdx.x; e < total; e += blockDim.x) {
    const int w = e / n, row = e - w * n;  // word-major, as in global memory: staged[w * n + row]
    staged[e] = w >= row / kTile ? mask[static_cast<std::size_t>(w) * mask_rows + row] : 0ull;
  }
  __syncthreads();
  nms_v2_reduce_body(sorted, staged, n, header, capacity, max_out, out, removed);
}

__global__ void __launch_bounds__(kReduceThreads)
    nms_v3_reduce_kernel(const Detection* __restrict__ sorted,
                         const std::uint64_t* __restrict__ mask, int mask_rows,
                         ResultHeader* header, int capacity, int max_out,
                         Detection* __restrict__ out, int removed_words, int staged_words) {
  nms_v3_reduce_body(sorted, mask, mask_rows, header, capacity, max_out, out, removed_words,
                     staged_words);
}

// For GpuNms: the box count comes from the host, as a kernel argument (a launch parameter is
// copied at launch, so unlike a pinned staging buffer it cannot change under a queued copy).
__global__ void begin_nms_kernel(ResultHeader* header, int n) {
  header->num_above_threshold = n;
  header->num_dropped = 0;
  header->num_detections = 0;
  header->reserved = 0;
}

// ====================================================== 6. the classification head: softmax

constexpr int kSoftmaxThreads = 256;

struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct SumOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};

// The block-wide reduction of lesson 05 in its short form: shuffles within each warp, then
// every thread combines the per-warp results in the same order (so all get the same value).
template <class Op>
__device__ float block_reduce(float v, Op op, float* scratch) {
  for (int d = kWarpSize / 2; d > 0; d >>= 1) v = op(v, __shfl_xor_sync(kFullMask, v, d));
  const int warps = blockDim.x / kWarpSize;
  if ((threadIdx.x & (kWarpSize - 1)) == 0) scratch[threadIdx.x / kWarpSize] = v;
  __syncthreads();
  v = scratch[0];
  for (int w = 1; w < warps; ++w) v = op(v, scratch[w]);
  __syncthreads();
  return v;
}

// One block per row: the row maximum, the sum of exp(x - max), then each probability.
// exp(x - max) <= 1 cannot overflow, and at least one term is 1, so the sum is >= 1.
__global__ void __launch_bounds__(kSoftmaxThreads)
    softmax_kernel(const float* __restrict__ logits, float* __restrict__ probs, int cols) {
  __shared__ float scratch[kWarpSize];
  const float* x = logits + static_cast<std::size_t>(blockIdx.x) * cols;
  float* p = probs + static_cast<std::size_t>(blockIdx.x) * cols;
  float m = -INFINITY;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) m = fmaxf(m, x[j]);
  m = block_reduce(m, MaxOp{}, scratch);
  float s = 0.0f;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) s += expf(x[j] - m);
  s = block_reduce(s, SumOp{}, scratch);
  for (int j = threadIdx.x; j < cols; j += blockDim.x) p[j] = expf(x[j] - m) / s;
}

// =========================================================================== 7. host side

// The result the GPU writes: a ResultHeader, then the detections, in one allocation so that
// one copy brings everything back.
std::size_t result_bytes(int max_detections) {
  return sizeof(ResultHeader) + static_cast<std::size_t>(max_detections) * sizeof(Detection);
}
ResultHeader* header_of(std::uint8_t* result) {
  return reinterpret_cast<ResultHeader*>(result);
}
Detection* detections_of(std::uint8_t* result) {
  return reinterpret_cast<Detection*>(result + sizeof(ResultHeader));
}

struct NmsBuffers {
  const Detection* candidates;  // [capacity], any order
  Detection* sorted;            // [capacity]
  std::uint64_t* mask;          // v2: [mask_stride][capacity]
  int mask_stride;
  std::uint8_t* keep;  // v1: [capacity]
  ResultHeader* header;
  Detection* out;  // [max_out]
  int capacity;
  int max_out;
  int staged_words;  // v3: mask words the greedy pass may stage in shared memory
};

// v3: how many mask words fit in shared memory beside removed[] (mask_stride words) and the
// kernel's static shared memory, on the current device; 0 if none. Raises the kernel's dynamic
// shared-memory limit to the device's opt-in maximum (above 48 KiB a kernel must ask for it:
// Programming Guide, "Shared Memory", compute capability 7.x and later). For a mask of
// capacity x mask_stride words, no more is useful.
template <class Kernel>
int staged_words_for(Kernel kernel, int capacity, int mask_stride) {
  int device = 0, optin = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  cudaFuncAttributes attributes{};
  CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
  const long long dynamic_bytes =
      static_cast<long long>(optin) - static_cast<long long>(attributes.sharedSizeBytes);
  if (dynamic_bytes <= 0) return 0;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(dynamic_bytes)));
  const long long words =
      dynamic_bytes / static_cast<long long>(sizeof(std::uint64_t)) - mask_stride;
  return static_cast<int>(
      std::max(0ll, std::min(words, static_cast<long long>(capacity) * mask_stride)));
}

std::size_t v3_shared_bytes(int mask_stride, int staged_words) {
  return (static_cast<std::size_t>(mask_stride) + static_cast<std::size_t>(staged_words)) *
         sizeof(std::uint64_t);
}

// Sort + NMS, every launch sized for the capacity; the count is read on the device.
void enqueue_sort_and_nms(const NmsBuffers& b, float iou_threshold, bool class_agnostic,
                          NmsVersion version, cudaStream_t stream) {
  rank_sort_kernel<<<ceil_div(b.capacity, kSortThreads), kSortThreads, 0, stream>>>(
      b.candidates, b.header, b.capacity, b.sorted);
  CUDA_CHECK_LAUNCH();
  if (version == NmsVersion::v1_fast_parallel) {
    nms_v1_fast_kernel<<<ceil_div(b.capacity, kNmsThreads), kNmsThreads, 0, stream>>>(
        b.sorted, b.header, b.capacity, iou_threshold, class_agnostic, b.keep);
    CUDA_CHECK_LAUNCH();
    compact_kept_kernel<<<1, kCompactThreads, 0, stream>>>(b.sorted, b.keep, b.header, b.capacity,
                                                           b.max_out, b.out);
    CUDA_CHECK_LAUNCH();
  } else {
    const dim3 tiles(static_cast<unsigned>(b.mask_stride), static_cast<unsigned>(b.mask_stride));
    nms_v2_mask_kernel<<<tiles, kTile, 0, stream>>>(b.sorted, b.header, b.capacity, iou_threshold,
                                                    class_agnostic, b.mask, b.capacity);
    CUDA_CHECK_LAUNCH();
    if (version == NmsVersion::v3_bitmask_smem) {
      nms_v3_reduce_kernel<<<1, kReduceThreads, v3_shared_bytes(b.mask_stride, b.staged_words),
                             stream>>>(b.sorted, b.mask, b.capacity, b.header, b.capacity,
                                       b.max_out, b.out, b.mask_stride, b.staged_words);
    } else {
      const std::size_t removed_bytes =
          static_cast<std::size_t>(b.mask_stride) * sizeof(std::uint64_t);
      nms_v2_reduce_kernel<<<1, kReduceThreads, removed_bytes, stream>>>(
          b.sorted, b.mask, b.capacity, b.header, b.capacity, b.max_out, b.out);
    }
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

// ------------------------------------------------------------------------------ GraphExec

void GraphExec::reset() noexcept {
  if (exec_ != nullptr) cudaGraphExecDestroy(exec_);  // a destructor path must not throw
  exec_ = nullptr;
}

bool GraphExec::install(cudaGraph_t graph, bool try_update) {
  if (try_update && exec_ != nullptr) {
    cudaGraphExecUpdateResultInfo info{};
    const cudaError_t updated = cudaGraphExecUpdate(exec_, graph, &info);
    if (updated == cudaSuccess) {
      cudaGraphDestroy(graph);
      return true;
    }
    if (updated != cudaErrorGraphExecUpdateFailure) {
      cudaGraphDestroy(graph);
      course::check_cuda(updated, "cudaGraphExecUpdate(exec, graph, &info)", __FILE__, __LINE__);
    }
    cudaGetLastError();  // a refused update is an answer (instantiate instead), not an error
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);  // the executable graph is an independent copy
  course::check_cuda(instantiated, "cudaGraphInstantiate(&exec, graph, 0)", __FILE__, __LINE__);
  reset();
  exec_ = exec;
  return false;
}

void GraphExec::launch(cudaStream_t stream) const {
  if (exec_ == nullptr) throw std::logic_error("GraphExec::launch: nothing captured yet");
  CUDA_CHECK(cudaGraphLaunch(exec_, stream));
}

// ----------------------------------------------------------------------- GpuPostprocessor

GpuPostprocessor::GpuPostprocessor(const OutputSpec& spec, const Letterbox& letterbox,
                                   const PostprocessConfig& config)
    : spec_(spec), letterbox_(letterbox), config_(config) {
  validate(spec);
  validate(config);
  validate(letterbox);
  const int capacity = config.max_candidates;
  mask_stride_ = ceil_div(capacity, kTile);
  keys_ = course::DeviceBuffer<std::uint32_t>(static_cast<std::size_t>(spec.num_candidates));
  candidates_ = course::DeviceBuffer<Detection>(static_cast<std::size_t>(capacity));
  sorted_ = course::DeviceBuffer<Detection>(static_cast<std::size_t>(capacity));
  if (config.nms != NmsVersion::v1_fast_parallel) {
    mask_ = course::DeviceBuffer<std::uint64_t>(static_cast<std::size_t>(capacity) * mask_stride_);
  } else {
    keep_ = course::DeviceBuffer<std::uint8_t>(static_cast<std::size_t>(capacity));
  }
  if (config.nms == NmsVersion::v3_bitmask_smem) {
    staged_words_ = staged_words_for(nms_v3_reduce_kernel, capacity, mask_stride_);
  }
  result_ = course::DeviceBuffer<std::uint8_t>(result_bytes(config.max_detections));
  host_result_ = course::PinnedBuffer<std::uint8_t>(result_.size());
  // Zeroed once: the detections past the count are copied back every frame too, and
  // compute-sanitizer's initcheck would (rightly) flag a copy of bytes nobody wrote.
  CUDA_CHECK(cudaMemset(result_.data(), 0, result_.bytes()));
  std::memset(host_result_.data(), 0, host_result_.bytes());
}

void GpuPostprocessor::enqueue(const float* output, std::size_t elements, cudaStream_t stream) {
  if (elements != spec_.elements()) {
    throw std::invalid_argument(
        std::string("GpuPostprocessor: expected ") + std::to_string(spec_.elements()) +
        " floats for a " + to_string(spec_.layout) +
        " output with N = " + std::to_string(spec_.num_candidates) +
        ", C = " + std::to_string(spec_.num_classes) + ", got " + std::to_string(elements));
  }
  if (output == nullptr && elements > 0) {
    throw std::invalid_argument("GpuPostprocessor: the output pointer is null");
  }
  ResultHeader* header = header_of(result_.data());
  const int n = spec_.num_candidates, capacity = config_.max_candidates;
  CUDA_CHECK(cudaMemsetAsync(header, 0, sizeof(ResultHeader), stream));
  if (n > 0) {
    decode_kernel<<<ceil_div(n, kDecodeThreads), kDecodeThreads, 0, stream>>>(
        output, spec_, letterbox_, config_.conf_threshold, keys_.data(), header, capacity,
        candidates_.data());
    CUDA_CHECK_LAUNCH();
    if (n > capacity) {  // overflow is possible: the kernel checks the count and usually returns
      select_top_k_kernel<<<1, kSelectThreads, 0, stream>>>(output, spec_, letterbox_,
                                                            config_.conf_threshold, keys_.data(),
                                                            header, capacity, candidates_.data());
      CUDA_CHECK_LAUNCH();
    }
  }
  const NmsBuffers buffers{candidates_.data(),
                           sorted_.data(),
                           mask_.data(),
                           mask_stride_,
                           keep_.data(),
                           header,
                           detections_of(result_.data()),
                           capacity,
                           config_.max_detections,
                           staged_words_};
  enqueue_sort_and_nms(buffers, config_.iou_threshold, config_.class_agnostic, config_.nms, stream);
  // One small copy back, into pinned memory: the copy engine DMAs straight into it, and the
  // copy can be captured into a graph (a pageable destination could not).
  CUDA_CHECK(cudaMemcpyAsync(host_result_.data(), result_.data(), result_.bytes(),
                             cudaMemcpyDeviceToHost, stream));
}

void GpuPostprocessor::capture_graph(const float* output, std::size_t elements,
                                     cudaStream_t stream) {
  graph_.capture(stream, [&] { enqueue(output, elements, stream); });
}

void GpuPostprocessor::launch_graph(cudaStream_t stream) const {
  if (!graph_) throw std::logic_error("GpuPostprocessor::launch_graph: call capture_graph first");
  graph_.launch(stream);
}

PostprocessResult GpuPostprocessor::result() const {
  ResultHeader header;
  std::memcpy(&header, host_result_.data(), sizeof header);
  PostprocessResult r;
  r.num_above_threshold = header.num_above_threshold;
  r.num_dropped = header.num_dropped;
  r.detections.resize(
      static_cast<std::size_t>(std::min(header.num_detections, config_.max_detections)));
  if (!r.detections.empty()) {
    std::memcpy(r.detections.data(), host_result_.data() + sizeof(ResultHeader),
                r.detections.size() * sizeof(Detection));
  }
  return r;
}

PostprocessResult GpuPostprocessor::run(const float* output, std::size_t elements,
                                        cudaStream_t stream) {
  enqueue(output, elements, stream);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return result();
}

// --------------------------------------------------------------------------------- GpuNms

GpuNms::GpuNms(int capacity, NmsVersion version)
    : capacity_(capacity), version_(version), mask_stride_(0) {
  if (capacity < 1 || capacity > kMaxNmsBoxes) {
    throw std::invalid_argument("GpuNms: capacity must be in [1, " + std::to_string(kMaxNmsBoxes) +
                                "], got " + std::to_string(capacity));
  }
  if (version != NmsVersion::v1_fast_parallel && version != NmsVersion::v2_bitmask_greedy &&
      version != NmsVersion::v3_bitmask_smem) {
    throw std::invalid_argument("GpuNms: unknown NmsVersion");
  }
  mask_stride_ = ceil_div(capacity, kTile);
  sorted_ = course::DeviceBuffer<Detection>(static_cast<std::size_t>(capacity));
  if (version != NmsVersion::v1_fast_parallel) {
    mask_ = course::DeviceBuffer<std::uint64_t>(static_cast<std::size_t>(capacity) * mask_stride_);
  } else {
    keep_ = course::DeviceBuffer<std::uint8_t>(static_cast<std::size_t>(capacity));
  }
  if (version == NmsVersion::v3_bitmask_smem) {
    staged_words_ = staged_words_for(nms_v3_reduce_kernel, capacity, mask_stride_);
  }
  result_ = course::DeviceBuffer<std::uint8_t>(result_bytes(capacity));
  CUDA_CHECK(cudaMemset(result_.data(), 0, result_.bytes()));
}

void GpuNms::enqueue(const Detection* boxes, int n, float iou_threshold, bool class_agnostic,
                     cudaStream_t stream) {
  validate_threshold(iou_threshold, "iou_threshold");
  if (n < 0 || n > capacity_) {
    throw std::invalid_argument("GpuNms: expected 0 <= n <= capacity = " +
                                std::to_string(capacity_) + ", got n = " + std::to_string(n));
  }
  if (n > 0 && boxes == nullptr) throw std::invalid_argument("GpuNms: the boxes pointer is null");
  ResultHeader* header = header_of(result_.data());
  begin_nms_kernel<<<1, 1, 0, stream>>>(header, n);
  CUDA_CHECK_LAUNCH();
  const NmsBuffers buffers{boxes,
                           sorted_.data(),
                           mask_.data(),
                           mask_stride_,
                           keep_.data(),
                           header,
                           detections_of(result_.data()),
                           capacity_,
                           capacity_,
                           staged_words_};
  enqueue_sort_and_nms(buffers, iou_threshold, class_agnostic, version_, stream);
}

std::vector<Detection> GpuNms::download(cudaStream_t stream) const {
  std::uint8_t* result = const_cast<std::uint8_t*>(result_.data());
  ResultHeader header;
  CUDA_CHECK(
      cudaMemcpyAsync(&header, header_of(result), sizeof header, cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<Detection> kept(static_cast<std::size_t>(std::max(0, header.num_detections)));
  if (!kept.empty()) {
    CUDA_CHECK(cudaMemcpyAsync(kept.data(), detections_of(result), kept.size() * sizeof(Detection),
                               cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  return kept;
}

std::vector<Detection> nms_gpu(const std::vector<Detection>& boxes, float iou_threshold,
                               bool class_agnostic, NmsVersion version) {
  validate_threshold(iou_threshold, "iou_threshold");
  if (boxes.size() > static_cast<std::size_t>(kMaxNmsBoxes)) {
    throw std::invalid_argument("nms_gpu: at most " + std::to_string(kMaxNmsBoxes) +
                                " boxes, got " + std::to_string(boxes.size()));
  }
  validate_nms_input(boxes, "nms_gpu");
  const int n = static_cast<int>(boxes.size());
  GpuNms nms(std::max(n, 1), version);
  const course::DeviceBuffer<Detection> d_boxes = course::to_device(boxes);
  course::Stream stream;
  nms.enqueue(d_boxes.data(), n, iou_threshold, class_agnostic, stream);
  return nms.download(stream);
}

// ================================================== 9. a batch, FP16 input, EfficientNMS layout
//
// The same bodies as sections 1-5, one grid dimension more: blockIdx.y (blockIdx.z for the 2-D
// mask grid) is the image. Each image's pointers are its own slices, computed once at the top
// of the kernel from that index, so no thread ever reads or writes another image's candidates,
// counts or masks. The single most common batching bug ("only image 0 is right") is a slice
// offset that is missing or uses the wrong stride; the per-image offsets all live in ImageSlices
// below, in one place.

namespace {

constexpr int kWidenThreads = 256;
constexpr int kLayoutThreads = 256;

// Image b's slices of the batch buffers.
struct BatchBuffers {
  const float* output;           // [B][elements]
  OutputSpec spec;               // one image
  const Letterbox* letterboxes;  // [B]
  std::uint32_t* keys;           // [B][N]
  Detection* candidates;         // [B][capacity]
  Detection* sorted;             // [B][capacity]
  std::uint64_t* mask;           // [B][mask_stride][capacity]
  int mask_stride;
  ResultHeader* headers;  // [B]
  Detection* detections;  // [B][max_out]
  int capacity;
  int max_out;
};

struct ImageSlices {
  const float* output;
  const Letterbox* letterbox;
  std::uint32_t* keys;
  Detection* candidates;
  Detection* sorted;
  std::uint64_t* mask;
  ResultHeader* header;
  Detection* detections;
};

__device__ ImageSlices slices_of(const BatchBuffers& b, int image) {
  const SliceOffsets o = slice_offsets(b.spec, image, b.capacity, b.mask_stride, b.max_out);
  return {b.output + o.output,         b.letterboxes + image,      b.keys + o.keys,
          b.candidates + o.candidates, b.sorted + o.candidates,    b.mask + o.mask,
          b.headers + image,           b.detections + o.detections};
}

// FP16 -> FP32, exact (binary16 is a subset of binary32). Memory-bound: 2 bytes in, 4 out.
__global__ void __launch_bounds__(kWidenThreads)
    widen_half_kernel(const __half* __restrict__ in, float* __restrict__ out, std::size_t n) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    out[i] = __half2float(in[i]);
  }
}

__global__ void __launch_bounds__(kDecodeThreads)
    batched_decode_kernel(BatchBuffers b, float conf_threshold) {
  const ImageSlices s = slices_of(b, blockIdx.y);
  decode_body(blockIdx.x, s.output, b.spec, *s.letterbox, conf_threshold, s.keys, s.header,
              b.capacity, s.candidates);
}

__global__ void __launch_bounds__(kSelectThreads)
    batched_select_top_k_kernel(BatchBuffers b, float conf_threshold) {
  const ImageSlices s = slices_of(b, blockIdx.x);
  select_top_k_body(s.output, b.spec, *s.letterbox, conf_threshold, s.keys, s.header, b.capacity,
                    s.candidates);
}

__global__ void __launch_bounds__(kSortThreads) batched_rank_sort_kernel(BatchBuffers b) {
  const ImageSlices s = slices_of(b, blockIdx.y);
  rank_sort_body(blockIdx.x, s.candidates, candidate_count(s.header, b.capacity), s.sorted);
}

__global__ void __launch_bounds__(kTile)
    batched_nms_v2_mask_kernel(BatchBuffers b, float iou_threshold, bool class_agnostic) {
  const ImageSlices s = slices_of(b, blockIdx.z);
  nms_v2_mask_body(blockIdx.y, blockIdx.x, s.sorted, s.header, b.capacity, iou_threshold,
                   class_agnostic, s.mask, b.capacity);
}

__global__ void __launch_bounds__(kReduceThreads) batched_nms_v2_reduce_kernel(BatchBuffers b) {
  extern __shared__ std::uint64_t dynamic_shared[];
  const ImageSlices s = slices_of(b, blockIdx.x);
  nms_v2_reduce_body(s.sorted, s.mask, b.capacity, s.header, b.capacity, b.max_out, s.detections,
                     dynamic_shared);
}

__global__ void __launch_bounds__(kReduceThreads)
    batched_nms_v3_reduce_kernel(BatchBuffers b, int staged_words) {
  const ImageSlices s = slices_of(b, blockIdx.x);
  nms_v3_reduce_body(s.sorted, s.mask, b.capacity, s.header, b.capacity, b.max_out, s.detections,
                     b.mask_stride, staged_words);
}

// One block per image: the plugin's four outputs, zero past the count (as its memsets leave
// them), so that the whole [B, K] tensors are written every frame and no stale box survives.
__global__ void __launch_bounds__(kLayoutThreads)
    efficient_nms_layout_kernel(const ResultHeader* __restrict__ headers,
                                const Detection* __restrict__ detections, int max_out,
                                int* __restrict__ num_detections, float* __restrict__ boxes,
                                float* __restrict__ scores, int* __restrict__ classes) {
  const int image = blockIdx.x;
  const int count = min(headers[image].num_detections, max_out);
  if (threadIdx.x == 0) num_detections[image] = count;
  const std::size_t base = static_cast<std::size_t>(image) * max_out;
  for (int k = threadIdx.x; k < max_out; k += blockDim.x) {
    const std::size_t o = base + k;
    float4 box = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    float score = 0.0f;
    int cls = 0;
    if (k < count) {
      const Detection& d = detections[o];
      box = make_float4(d.box.x1, d.box.y1, d.box.x2, d.box.y2);
      score = d.score;
      cls = d.class_id;
    }
    boxes[4 * o + 0] = box.x;
    boxes[4 * o + 1] = box.y;
    boxes[4 * o + 2] = box.z;
    boxes[4 * o + 3] = box.w;
    scores[o] = score;
    classes[o] = cls;
  }
}

// The CUB comparison's baseline (DetectionSorter, cub_baselines.cu): the rank sort on segments of a
// buffer, counts[s] valid detections at the start of segment s.
__global__ void __launch_bounds__(kSortThreads)
    segmented_rank_sort_kernel(const Detection* __restrict__ in, const int* __restrict__ counts,
                               int capacity, Detection* __restrict__ out) {
  const std::size_t offset = static_cast<std::size_t>(blockIdx.y) * capacity;
  rank_sort_body(blockIdx.x, in + offset, min(counts[blockIdx.y], capacity), out + offset);
}

std::size_t batch_result_bytes(int batch, int max_detections) {
  return static_cast<std::size_t>(batch) *
         (sizeof(ResultHeader) + static_cast<std::size_t>(max_detections) * sizeof(Detection));
}

}  // namespace

namespace detail {
void enqueue_rank_sort_segments(const Detection* in, const int* counts, int capacity, int segments,
                                Detection* out, cudaStream_t stream) {
  segmented_rank_sort_kernel<<<dim3(ceil_div(capacity, kSortThreads),
                                    static_cast<unsigned>(segments)),
                               kSortThreads, 0, stream>>>(in, counts, capacity, out);
  CUDA_CHECK_LAUNCH();
}
}  // namespace detail

const char* to_string(DType dtype) {
  return dtype == DType::f16 ? "f16" : "f32";
}

void validate(const BatchSpec& spec) {
  if (spec.batch < 1 || spec.batch > 65535) {
    throw std::invalid_argument("BatchSpec: batch must be in [1, 65535], got " +
                                std::to_string(spec.batch));
  }
  validate(spec.image);
  if (spec.elements() >= (std::size_t{1} << 40)) {
    throw std::invalid_argument("BatchSpec: the batch tensor must have fewer than 2^40 elements");
  }
}

BatchedPostprocessor::BatchedPostprocessor(const BatchSpec& spec,
                                           const std::vector<Letterbox>& letterboxes,
                                           const PostprocessConfig& config, DType dtype)
    : spec_(spec), config_(config), dtype_(dtype) {
  validate(spec);
  validate(config);
  if (config.nms == NmsVersion::v1_fast_parallel) {
    throw std::invalid_argument(
        "BatchedPostprocessor: only greedy NMS (v2_bitmask_greedy, v3_bitmask_smem) is batched");
  }
  if (dtype != DType::f32 && dtype != DType::f16) {
    throw std::invalid_argument("BatchedPostprocessor: unknown DType");
  }
  if (letterboxes.size() != 1 && letterboxes.size() != static_cast<std::size_t>(spec.batch)) {
    throw std::invalid_argument(
        "BatchedPostprocessor: expected 1 or B = " + std::to_string(spec.batch) +
        " letterboxes, got " + std::to_string(letterboxes.size()));
  }
  for (const Letterbox& lb : letterboxes) validate(lb);
  const std::size_t batch = static_cast<std::size_t>(spec.batch);
  const std::size_t capacity = static_cast<std::size_t>(config.max_candidates);
  mask_stride_ = ceil_div(config.max_candidates, kTile);
  // Every image gets its own copy, so the kernels index letterboxes_[image] alike for both cases.
  letterboxes_ = course::to_device(
      letterboxes.size() == batch ? letterboxes : std::vector<Letterbox>(batch, letterboxes[0]));
  if (dtype == DType::f16) widened_ = course::DeviceBuffer<float>(spec.elements());
  keys_ = course::DeviceBuffer<std::uint32_t>(batch *
                                              static_cast<std::size_t>(spec.image.num_candidates));
  candidates_ = course::DeviceBuffer<Detection>(batch * capacity);
  sorted_ = course::DeviceBuffer<Detection>(batch * capacity);
  mask_ = course::DeviceBuffer<std::uint64_t>(batch * capacity * mask_stride_);
  result_ =
      course::DeviceBuffer<std::uint8_t>(batch_result_bytes(spec.batch, config.max_detections));
  host_result_ = course::PinnedBuffer<std::uint8_t>(result_.size());
  if (config.nms == NmsVersion::v3_bitmask_smem) {
    staged_words_ =
        staged_words_for(batched_nms_v3_reduce_kernel, config.max_candidates, mask_stride_);
  }
  CUDA_CHECK(cudaMemset(result_.data(), 0, result_.bytes()));  // see GpuPostprocessor
  std::memset(host_result_.data(), 0, host_result_.bytes());
}

namespace {
// The images of one call: run.images, or B; throws unless it is in [1, B].
int images_of(const BatchRun& run, const BatchSpec& spec) {
  if (run.images < 0 || run.images > spec.batch) {
    throw std::invalid_argument(
        "BatchedPostprocessor: BatchRun::images must be in [0, B = " + std::to_string(spec.batch) +
        "] (0: B), got " + std::to_string(run.images));
  }
  return run.images == 0 ? spec.batch : run.images;
}

void check_batch_input(const void* output, std::size_t elements, const BatchSpec& spec, int images,
                       DType expected, DType got) {
  if (expected != got) {
    throw std::invalid_argument(std::string("BatchedPostprocessor: constructed for ") +
                                to_string(expected) + " input, enqueue got " + to_string(got));
  }
  const std::size_t want = static_cast<std::size_t>(images) * spec.image.elements();
  if (elements != want) {
    throw std::invalid_argument(
        "BatchedPostprocessor: expected " + std::to_string(want) + " elements (" +
        std::to_string(images) + " of B = " + std::to_string(spec.batch) + " images x " +
        std::to_string(spec.image.elements()) + "), got " + std::to_string(elements));
  }
  if (output == nullptr && elements > 0) {
    throw std::invalid_argument("BatchedPostprocessor: the output pointer is null");
  }
}
}  // namespace

void BatchedPostprocessor::enqueue(const float* output, std::size_t elements, cudaStream_t stream,
                                   const BatchRun& run) {
  const int images = images_of(run, spec_);
  check_batch_input(output, elements, spec_, images, dtype_, DType::f32);
  enqueue_f32(output, images, run.letterboxes, run.copy_results, stream);
}

void BatchedPostprocessor::enqueue(const __half* output, std::size_t elements, cudaStream_t stream,
                                   const BatchRun& run) {
  const int images = images_of(run, spec_);
  check_batch_input(output, elements, spec_, images, dtype_, DType::f16);
  if (elements > 0) {
    const int blocks = static_cast<int>(
        std::min<std::size_t>((elements + kWidenThreads - 1) / kWidenThreads, 132 * 16));
    widen_half_kernel<<<blocks, kWidenThreads, 0, stream>>>(output, widened_.data(), elements);
    CUDA_CHECK_LAUNCH();
  }
  enqueue_f32(widened_.data(), images, run.letterboxes, run.copy_results, stream);
}

void BatchedPostprocessor::enqueue_f32(const float* output, int images,
                                       const Letterbox* letterboxes, bool copy_results,
                                       cudaStream_t stream) {
  const int batch = spec_.batch, n = spec_.image.num_candidates;
  const int capacity = config_.max_candidates;
  std::uint8_t* result = result_.data();
  ResultHeader* headers = reinterpret_cast<ResultHeader*>(result);
  Detection* detections = reinterpret_cast<Detection*>(result + batch * sizeof(ResultHeader));
  const Letterbox* lbs = letterboxes != nullptr ? letterboxes : letterboxes_.data();
  const BatchBuffers b{output,       spec_.image,        lbs,
                       keys_.data(), candidates_.data(), sorted_.data(),
                       mask_.data(), mask_stride_,       headers,
                       detections,   capacity,           config_.max_detections};
  const unsigned grid_images = static_cast<unsigned>(images);
  CUDA_CHECK(cudaMemsetAsync(headers, 0, images * sizeof(ResultHeader), stream));
  if (n > 0) {
    batched_decode_kernel<<<dim3(ceil_div(n, kDecodeThreads), grid_images), kDecodeThreads, 0,
                            stream>>>(b, config_.conf_threshold);
    CUDA_CHECK_LAUNCH();
    if (n > capacity) {
      batched_select_top_k_kernel<<<grid_images, kSelectThreads, 0, stream>>>(
          b, config_.conf_threshold);
      CUDA_CHECK_LAUNCH();
    }
  }
  batched_rank_sort_kernel<<<dim3(ceil_div(capacity, kSortThreads), grid_images), kSortThreads, 0,
                             stream>>>(b);
  CUDA_CHECK_LAUNCH();
  const unsigned tiles = static_cast<unsigned>(mask_stride_);
  batched_nms_v2_mask_kernel<<<dim3(tiles, tiles, grid_images), kTile, 0, stream>>>(
      b, config_.iou_threshold, config_.class_agnostic);
  CUDA_CHECK_LAUNCH();
  if (config_.nms == NmsVersion::v3_bitmask_smem) {
    batched_nms_v3_reduce_kernel<<<grid_images, kReduceThreads,
                                   v3_shared_bytes(mask_stride_, staged_words_), stream>>>(
        b, staged_words_);
  } else {
    batched_nms_v2_reduce_kernel<<<grid_images, kReduceThreads,
                                   static_cast<std::size_t>(mask_stride_) * sizeof(std::uint64_t),
                                   stream>>>(b);
  }
  CUDA_CHECK_LAUNCH();
  if (copy_results) {
    CUDA_CHECK(cudaMemcpyAsync(host_result_.data(), result_.data(), result_.bytes(),
                               cudaMemcpyDeviceToHost, stream));
  }
  last_images_ = images;
  host_current_ = copy_results;
}

void BatchedPostprocessor::write_efficient_nms(const EfficientNmsOutputs& out,
                                               cudaStream_t stream) const {
  if (out.num_detections == nullptr || out.detection_boxes == nullptr ||
      out.detection_scores == nullptr || out.detection_classes == nullptr) {
    throw std::invalid_argument("write_efficient_nms: every output pointer must be non-null");
  }
  if (last_images_ == 0) {
    throw std::logic_error("write_efficient_nms: nothing was enqueued yet");
  }
  const std::uint8_t* result = result_.data();
  const ResultHeader* headers = reinterpret_cast<const ResultHeader*>(result);
  const Detection* detections =
      reinterpret_cast<const Detection*>(result + spec_.batch * sizeof(ResultHeader));
  efficient_nms_layout_kernel<<<static_cast<unsigned>(last_images_), kLayoutThreads, 0, stream>>>(
      headers, detections, config_.max_detections, out.num_detections, out.detection_boxes,
      out.detection_scores, out.detection_classes);
  CUDA_CHECK_LAUNCH();
}

std::vector<PostprocessResult> BatchedPostprocessor::results() const {
  if (!host_current_ && last_images_ > 0) {
    throw std::logic_error(
        "BatchedPostprocessor::results: the last enqueue did not copy its results to the host "
        "(BatchRun::copy_results = false); read the EfficientNMS tensors instead");
  }
  const std::uint8_t* host = host_result_.data();
  const std::size_t batch = static_cast<std::size_t>(spec_.batch);
  const Detection* detections =
      reinterpret_cast<const Detection*>(host + batch * sizeof(ResultHeader));
  const std::size_t images = last_images_ > 0 ? static_cast<std::size_t>(last_images_) : batch;
  std::vector<PostprocessResult> out(images);
  for (std::size_t i = 0; i < images; ++i) {
    ResultHeader header;
    std::memcpy(&header, host + i * sizeof(ResultHeader), sizeof header);
    PostprocessResult& r = out[i];
    r.num_above_threshold = header.num_above_threshold;
    r.num_dropped = header.num_dropped;
    const int count = std::max(0, std::min(header.num_detections, config_.max_detections));
    const Detection* first = detections + i * static_cast<std::size_t>(config_.max_detections);
    r.detections.assign(first, first + count);
  }
  return out;
}

std::vector<PostprocessResult> BatchedPostprocessor::run(const float* output, std::size_t elements,
                                                         cudaStream_t stream) {
  enqueue(output, elements, stream);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return results();
}

// ----------------------------------------------------------------- classification head

void softmax_rows(const float* logits, float* probs, int rows, int cols, cudaStream_t stream) {
  if (rows < 0 || cols < 1) {
    throw std::invalid_argument("softmax_rows: expected rows >= 0 and cols >= 1, got " +
                                std::to_string(rows) + " x " + std::to_string(cols));
  }
  if (rows == 0) return;
  if (logits == nullptr || probs == nullptr)
    throw std::invalid_argument("softmax_rows: null pointer");
  softmax_kernel<<<rows, kSoftmaxThreads, 0, stream>>>(logits, probs, cols);
  CUDA_CHECK_LAUNCH();
}

namespace {
__global__ void iou_pairs_kernel(const Box* __restrict__ a, const Box* __restrict__ b, int n,
                                 float* __restrict__ out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = iou(a[i], b[i]);
}
}  // namespace

std::vector<float> iou_gpu(const std::vector<Box>& a, const std::vector<Box>& b) {
  if (a.size() != b.size()) {
    throw std::invalid_argument("iou_gpu: a and b must hold as many boxes, got " +
                                std::to_string(a.size()) + " and " + std::to_string(b.size()));
  }
  if (a.empty()) return {};
  if (a.size() > static_cast<std::size_t>(INT_MAX)) {
    throw std::invalid_argument("iou_gpu: at most INT_MAX pairs");
  }
  const int n = static_cast<int>(a.size());
  const course::DeviceBuffer<Box> d_a = course::to_device(a), d_b = course::to_device(b);
  course::DeviceBuffer<float> d_out(a.size());
  iou_pairs_kernel<<<ceil_div(n, 256), 256>>>(d_a.data(), d_b.data(), n, d_out.data());
  CUDA_CHECK_LAUNCH();
  return course::to_host(d_out);
}

}  // namespace lesson08

// The exercise solutions (solutions.cuh): compiled here, in this translation unit, by the
// lesson build only; the exercise build takes exercise.cu instead. Try the exercises first.
#ifndef LESSON_EXERCISE_BUILD
#include "solutions.cuh"
#endif
