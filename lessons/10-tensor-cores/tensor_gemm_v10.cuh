// Lesson 10, v10: v6 made persistent, with its write-out staged through a buffer of its own.
//
// Not compiled on its own: tensor_gemm_sm90.cu includes this file after v5..v7 and v9, so that
// v10 is sm_90a code in the same library and shares v6's configuration (v6cfg), its producer
// (produce_128x256_tiles) and the consumers' K loop (consume_k_tiles, solutions_sm90.cuh). Its
// persistent block (persistent_block) serves v11 too (tensor_gemm_v11.cuh).
//
// What v10 changes, and why. v6 (one 128 x 256 tile per block) stages its accumulators through
// the ring once the block's only tile is done: a coalesced write-out, but every block pays the
// launch, the barrier set-up and an empty ring. v7 (the same kernel, one block per SM looping
// over tiles) avoids that, but its ring is refilled with the next tile's stages during the
// write-out, so it stores straight from the registers and loses to v6. v10 has both:
//  - Persistent: one block per SM (grid = min(tiles, SMs)), each taking tiles blockIdx.x,
//    blockIdx.x + gridDim.x, ... in tile_coord's grouped order, as v7. The producer loads the
//    next tile's K stages while the consumers write out the last tile.
//  - A staging buffer beside the 4-stage ring: 192 KiB of ring leave 35 KiB of the 227 KiB a
//    block may have. Each consumer warp group stages its 64 rows 32 columns at a time (a chunk
//    of 64 x 32 FP32), rows padded to 40 floats: 10 KiB per warp group, 20 KiB in all. Why this
//    shape (the static_asserts below check the bytes):
//      * the padding: a half-warp's float2 stores of an accumulator fragment touch 4 rows x 8
//        columns; with a row stride of 8 words mod 32 the 4 rows land on 4 disjoint groups of 8
//        banks (v6's argument, the same fragment). The float4 reads of the write-out take one
//        row of 32 floats per quarter warp: 32 banks, no conflict either.
//      * single-buffered: two buffers per warp group (40 KiB) would not fit beside the 4-stage
//        ring, nor would one chunk of 64 columns (2 x 18 KiB). Dropping to 3 stages to double-
//        buffer would save one 128-thread barrier per chunk (some tens of cycles) and cost a
//        third of the loads in flight; a swizzle could fit two unpadded buffers, at the price of
//        a second address map to read. So one buffer, two barriers per chunk.
//  - Each consumer warp group synchronises only itself around its buffer: named barrier 2 or 3
//    (bar.sync id, 128; 0 is __syncthreads, 1 is v6's consumers_sync), so the two groups never
//    wait for each other during the write-out.
//  - The stores are v6's: store_quad (alpha, beta * C, bias, ReLU / GELU, one 8- or 16-byte
//    vector store where C is aligned to four elements), each quarter warp writing 32
//    consecutive elements of one row.
// The arithmetic is v6's: the same wgmma on the same shared-memory layout in the same order,
// and the same epilogue per element, so v10's C has v6's bits (a test checks it).
//
// The protocol, and why each hazard cannot happen:
//  - The ring (full / empty mbarrier pairs per stage, 4 stages): producer and consumers count
//    ring uses `it` across all tiles of the block, so use `it` is in stage it % 4 with phase
//    (it / 4) % 2 on both sides, whatever tile it belongs to (v7's rule, pipeline_phase).
//  - The producer refills a stage only after both consumer warp groups released its previous
//    use (its "empty" barrier counts 2 arrivals), and a consumer releases a stage only after the
//    wgmma that read it completed (consume_k_tiles: wait_group, then release).
//  - When consume_k_tiles returns, every wgmma of the tile has completed (wait_group 0): the
//    accumulators are final and the write-out never reads the ring, so the producer may fill
//    it with the next tile meanwhile.
//  - The staging buffer: before a thread writes chunk c, a barrier of its warp group ensures that
//    every thread of the group has finished reading chunk c - 1 (or the previous tile's last
//    chunk) from the buffer into its global stores; after the writes, a second barrier makes
//    them visible to the group (bar.sync orders shared memory among the threads it joins) before
//    anyone reads them.
//  - No TMA load is in flight when the block exits: the producer loads only the stages of this
//    block's tiles, and the consumers wait on every one of them ("full") before they finish.
#pragma once

#include <cstdint>

namespace lesson10 {

// The staging buffer's shape and addresses: namespace v10staging in tensor_gemm.cuh, where the
// CPU tests check them (every element once, stores and reads conflict-free).
namespace v10cfg {
using v6cfg::kStageBytes, v6cfg::kStages, v10staging::kChunkCols, v10staging::kChunkLd,
    v10staging::kRows;
constexpr int kChunks = v6cfg::BN / kChunkCols;    // 8 chunks per tile
constexpr int kChunkBytes = kRows * kChunkLd * 4;  // 10 KiB per consumer warp group
constexpr int kRingBytes = kStages * kStageBytes;  // 192 KiB
constexpr int kStagingBytes = 2 * kChunkBytes;     // both consumer warp groups
constexpr int kSmemBytes = kRingBytes + kStagingBytes + 256 /* barriers */ + 1024 /* alignment */;
constexpr int kSmemLimit = 227 * 1024;  // a block's dynamic shared memory on compute capability 9.0
constexpr int kFirstBarrier = 2;        // named barriers 2, 3: one per consumer warp group
static_assert(kSmemBytes <= kSmemLimit, "the ring and the staging buffers fit a block");
static_assert(kSmemBytes + kStagingBytes > kSmemLimit,
              "double-buffered staging would not fit beside the 4-stage ring");
static_assert(kRingBytes + 2 * kRows * (2 * kChunkCols + 8) * 4 + 1280 > kSmemLimit,
              "nor would chunks of 64 columns");
static_assert(kRows * 2 == v6cfg::BM && v10staging::kThreads == 128, "a warp group's 64 rows");
static_assert(kRingBytes % 16 == 0 && kStagingBytes % 8 == 0, "staging and barriers aligned");
}  // namespace v10cfg

namespace detail {

#ifdef LESSON10_SM90A
// The 128 threads of one warp group only (PTX ISA, "bar.sync": a named barrier with a thread
// count; the count is a multiple of the warp size, and the warps of the group all arrive).
__device__ __forceinline__ void warp_group_sync(int id) {
  asm volatile("bar.sync %0, 128;\n" ::"r"(id) : "memory");
}

// One consumer warp group's 64 x 256 accumulators (rows m0.., columns bn..) to C through its
// 64 x 32 staging buffer, one chunk of 32 columns at a time. tid: the thread's index in the
// group; warp, lane: its warp in the group and lane (the wgmma accumulator layout: warp w owns
// rows 16w..16w+15, and per 8 columns j its registers 4j..4j+3 are mma_c_element's).
// store_quads: C aligned to four elements (store_quad's vector stores). The chunk loop runs at
// run time (unroll 1): one copy of the store loop, not eight (v6's reason for staging at all was
// an unrolled write-out too large for the instruction cache).
template <class Out>
__device__ __forceinline__ void write_tile_chunked(const Epilogue& e, Out* C, int M, int N, int m0,
                                                   int bn, int tid, int warp, int lane, int barrier,
                                                   const float (&d)[128], float* staged,
                                                   int store_quads) {
  using v10cfg::kChunkCols, v10cfg::kChunkLd, v10cfg::kChunks, v10cfg::kRows,
      v10staging::fragment_offset, v10staging::kQuadsPerRow, v10staging::quad_of;
  // The group's 64 rows may lie below C (the 128 threads agree, and skip the barriers together).
  if (m0 >= M) return;
#pragma unroll 1
  for (int c = 0; c < kChunks; ++c) {
    const int n0 = bn + c * kChunkCols;
    if (n0 >= N) break;        // the rest of the tile lies right of C (uniform over the group)
    warp_group_sync(barrier);  // the group has read the previous chunk out of the buffer
    // This thread's accumulators of chunk c, 8-column groups j = 4c..4c+3. Register indices
    // must be constants (an index known only at run time would move d to local memory), so
    // each chunk has its own unrolled branch, and one of them runs.
#pragma unroll
    for (int cc = 0; cc < kChunks; ++cc) {
      if (cc != c) continue;
#pragma unroll
      for (int jj = 0; jj < kChunkCols / 8; ++jj)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int j = cc * (kChunkCols / 8) + jj;
          *reinterpret_cast<float2*>(staged + fragment_offset(warp, lane, jj, h)) =
              make_float2(d[j * 4 + 2 * h], d[j * 4 + 2 * h + 1]);
        }
    }
    warp_group_sync(barrier);  // the chunk is in the buffer
#pragma unroll 2
    for (int idx = tid; idx < kRows * kQuadsPerRow; idx += 128) {
      const RowCol q = quad_of(idx);
      const int m = m0 + q.row, n = n0 + q.col;
      if (m >= M || n >= N) continue;  // N % 8 == 0 and n % 4 == 0: n < N means n + 3 < N
      store_quad(e, C, N, m, n, *reinterpret_cast<const float4*>(staged + q.row * kChunkLd + q.col),
                 store_quads);
    }
  }
}
#endif  // LESSON10_SM90A

}  // namespace detail

namespace {
using namespace detail;

#ifdef LESSON10_SM90A
// A consumer warp group of the persistent block: its 64 rows of each tile, its thread index,
// warp and lane, its named barrier and its part of the staging memory.
struct ConsumerGroup {
  int rows, tid, warp, lane, barrier;
  unsigned char* staging;
};

// The block of v10 and v11: v7's persistent loop over 128 x 256 tiles, the producer of v6 and
// v7, and, for each finished tile, write_out(d, first row of C, first column of C, group) in each
// consumer warp group. Shared memory: the ring (1024-byte aligned), kGroupStagingBytes per
// consumer warp group, the barriers.
template <class In, int kGroupStagingBytes, class WriteOut>
__device__ __forceinline__ void persistent_block(const CUtensorMap* map_a, const CUtensorMap* map_b,
                                                 int M, int N, int K, WriteOut& write_out) {
  using v6cfg::BK, v6cfg::BM, v6cfg::BN, v6cfg::kATileBytes, v6cfg::kGroupM, v6cfg::kStageBytes,
      v6cfg::kStages, v10cfg::kRingBytes;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = align_1024(smem_raw);
  std::uint64_t* full =
      reinterpret_cast<std::uint64_t*>(smem + kRingBytes + 2 * kGroupStagingBytes);
  std::uint64_t* empty = full + kStages;
  const int wg = threadIdx.x / 128, tid_in_wg = threadIdx.x % 128;
  const int tiles_m = ceil_div(M, BM), tiles_n = ceil_div(N, BN), k_tiles = ceil_div(K, BK);
  init_ring(full, empty, kStages, 2);
  __syncthreads();

  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    if (tid_in_wg == 0) produce_128x256_tiles(map_a, map_b, full, empty, smem, M, N, K);
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    const ConsumerGroup g{(wg - 1) * v10cfg::kRows,
                          tid_in_wg,
                          tid_in_wg / 32,
                          tid_in_wg % 32,
                          v10cfg::kFirstBarrier + (wg - 1),
                          smem + kRingBytes + (wg - 1) * kGroupStagingBytes};
    int it = 0;  // ring uses so far, across tiles (the producer counts the same)
    for (int tile = blockIdx.x; tile < tiles_m * tiles_n; tile += gridDim.x) {
      const TileCoord tc = tile_coord(tile, tiles_m, tiles_n, kGroupM);
      float d[128];
#pragma unroll
      for (int i = 0; i < 128; ++i) d[i] = 0.0f;
      pin_registers(d);
      it = consume_k_tiles<In, 1, kStages, kStageBytes, kATileBytes>(d, full, empty, smem, g.rows,
                                                                     it, k_tiles, g.tid == 0);
      write_out(d, tc.m * BM + g.rows, tc.n * BN, g);
    }
  }
}
#endif  // LESSON10_SM90A

// v10's kernel: the persistent block, written out through the staging buffers
// (write_tile_chunked).
template <class In, class Out>
__global__ void __launch_bounds__(v6cfg::kThreads, 1)
    persistent_staged_kernel(const __grid_constant__ CUtensorMap map_a,
                             const __grid_constant__ CUtensorMap map_b, int M, int N, int K,
                             Out* __restrict__ C, Epilogue e, int store_quads) {
#ifdef LESSON10_SM90A
  const auto write_out = [&](const float(&d)[128], int m0, int bn, const ConsumerGroup& g) {
    write_tile_chunked(e, C, M, N, m0, bn, g.tid, g.warp, g.lane, g.barrier, d,
                       reinterpret_cast<float*>(g.staging), store_quads);
  };
  persistent_block<In, v10cfg::kChunkBytes>(&map_a, &map_b, M, N, K, write_out);
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
}

}  // namespace

template <class In, class Out>
void gemm_v10_persistent_staged(int blocks, int M, int N, int K, float alpha, const In* A,
                                const In* B, float beta, Out* C, const float* bias, Activation act,
                                cudaStream_t stream) {
  using v6cfg::BK, v6cfg::BM, v6cfg::BN, v6cfg::kThreads, v10cfg::kSmemBytes;
  const CUtensorMap map_a = make_map(A, M, K, BM);      // boxes of 128 rows (m) x 64 k
  const CUtensorMap map_b = make_map(B, K, N, BK);      // boxes of 64 k rows x 64 columns
  const int tiles = ceil_div(M, BM) * ceil_div(N, BN);  // <= INT_MAX / 32768: M N <= INT_MAX
  // One block per SM (213 KiB of shared memory allow no second one), never more than the tiles.
  if (blocks <= 0) blocks = sm_count();
  const int grid = blocks < tiles ? blocks : tiles;
  auto kernel = persistent_staged_kernel<In, Out>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  const int quads = reinterpret_cast<std::uintptr_t>(C) % (4 * sizeof(Out)) == 0 ? 1 : 0;
  kernel<<<grid, kThreads, kSmemBytes, stream>>>(map_a, map_b, M, N, K, C,
                                                 Epilogue{alpha, beta, bias, act}, quads);
  CUDA_CHECK_LAUNCH();
}

}  // namespace lesson10
