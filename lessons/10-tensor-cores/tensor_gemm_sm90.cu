// Lesson 10, v5..v7 and v9..v12: Hopper's TMA + wgmma, compiled ONLY for sm_90a (this file is its
// own static library, built with -gencode=arch=compute_90a,code=sm_90a; see CMakeLists.txt). The
// API is in tensor_gemm.cuh; tensor_gemm(5, ...) and tensor_gemm(6, ...) check the arguments and
// the GPU, then call gemm_v5_wgmma / gemm_v6_wgmma_128x256 here (v9, the cluster version of v6, is
// tensor_gemm_v9.cuh, v10, v6 persistent with a staging buffer, tensor_gemm_v10.cuh, v11 and
// v12 likewise, all included at the end). v6 is v5 with the known Hopper steps, listed where it
// starts below; both share the barrier, TMA, descriptor and tensor-map helpers of wgmma.cuh, and
// the consumers' K loop of solutions_sm90.cuh (exercise 3's answer).
//
// v5's kernel (one 128x128 tile of C per block, 384 threads = 3 warp groups):
//   warp group 0, the producer: one thread issues TMA loads (cp.async.bulk.tensor.2d) of A's
//     128x64 tile and B's 64x128 tile (two 64x64 boxes) into a 4-stage ring; each stage's
//     "full" mbarrier completes when its 32 KiB have landed (expect_tx bytes). Before reusing a
//     stage it waits on the stage's "empty" mbarrier.
//   warp groups 1 and 2, the consumers: each owns 64 rows of the tile; per stage it waits on
//     "full", issues 4 wgmma.m64n128k16 (K = 64) reading A and B straight from shared memory
//     through matrix descriptors, waits for them, and arrives on "empty".
// Shared memory layouts are TMA's 128-byte swizzle (the 16-byte chunks of each 128-byte row
// permuted as swizzle_chunk does for 8 chunks per row), which wgmma reads natively:
//   A: K-major (k contiguous), 128 rows of 128 bytes; descriptor SWIZZLE_128B, SBO = 1024 bytes
//      (8 rows), LBO unused; the k-th 16-wide slice starts 32 bytes further.
//   B: MN-major (n contiguous) as row-major B lies; wgmma's transpose-B flag (imm-trans-b = 1,
//      allowed for 16-bit types) reads it; LBO = 8192 bytes (the next 64 columns: the second box),
//      SBO = 1024 bytes (the next 8 k rows); the k-th slice of 16 rows starts 2048 bytes further.
// Sources: PTX ISA 8.x, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions"
// (wgmma, the matrix descriptor, the canonical layouts) and "cp.async.bulk.tensor"; CUDA Driver
// API cuTensorMapEncodeTiled; the canonical-layout table in CUTLASS's cute/arch/mma_sm90_desc.hpp
// comments. Verified on an H200: README.md (tests, sanitizers, the numbers).
#include <cuda.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "common/cuda_check.hpp"
#include "epilogue.cuh"
#include "solutions_sm90.cuh"  // consume_k_tiles: the consumers' K loop (exercise 3's answer)
#include "tensor_gemm.cuh"
#include "wgmma.cuh"

namespace lesson10 {
using namespace detail;

namespace {
constexpr int BM = 128, BN = 128, BK = 64, kStages = 4, kThreads = 384;
constexpr int kATileBytes = BM * BK * 2;                   // 16 KiB
constexpr int kBBoxBytes = BK * 64 * 2;                    // 8 KiB: 64 k rows x 64 columns
constexpr int kStageBytes = kATileBytes + 2 * kBBoxBytes;  // 32 KiB
constexpr int kSmemBytes = kStages * kStageBytes + 1024 /* alignment */ + 256 /* barriers */;

template <class In, class Out>
__global__ void __launch_bounds__(kThreads, 1)
    wgmma_kernel(const __grid_constant__ CUtensorMap map_a,
                 const __grid_constant__ CUtensorMap map_b, int M, int N, int K,
                 Out* __restrict__ C, Epilogue e) {
#ifdef LESSON10_SM90A
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = align_1024(smem_raw);
  std::uint64_t* full = reinterpret_cast<std::uint64_t*>(smem + kStages * kStageBytes);
  std::uint64_t* empty = full + kStages;
  const int wg = threadIdx.x / 128, tid_in_wg = threadIdx.x % 128;
  const int bm = blockIdx.y * BM, bn = blockIdx.x * BN;
  const int tiles = ceil_div(K, BK);
  init_ring(full, empty, kStages, 2);
  __syncthreads();

  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    if (tid_in_wg == 0) {
      for (int t = 0; t < tiles; ++t) {
        const int s = pipeline_stage(t, kStages);
        // The stage's previous tile (t - kStages) must be released by both consumers.
        if (t >= kStages) mbar_wait(&empty[s], pipeline_phase(t - kStages, kStages));
        unsigned char* st = smem + s * kStageBytes;
        mbar_expect_tx(&full[s], kStageBytes);  // TMA counts whole boxes, zero-filled or not
        tma_load_2d(st, &map_a, t * BK, bm, &full[s]);
        tma_load_2d(st + kATileBytes, &map_b, bn, t * BK, &full[s]);
        tma_load_2d(st + kATileBytes + kBBoxBytes, &map_b, bn + 64, t * BK, &full[s]);
      }
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    float d[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) d[i] = 0.0f;
    const int rows = (wg - 1) * 64;  // this consumer's 64 rows of the tile
    // Per stage: wait until it is full, issue its four wgmma, wait for them, release the stage
    // (solutions_sm90.cuh; v5 waits for every stage's wgmma before the next: kInFlight 0).
    consume_k_tiles<In, 0, kStages, kStageBytes, kATileBytes>(d, full, empty, smem, rows, 0, tiles,
                                                              tid_in_wg == 0);
    // Accumulator layout of m64nNk16 (PTX ISA, "Register fragment for D"): warp w of the group
    // owns rows 16w..16w+15, and per 8 columns j its registers 4j..4j+3 are mma_c_element's.
    const int warp = tid_in_wg / 32, lane = tid_in_wg % 32;
#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const RowCol rc = mma_c_element(lane, q);
        const int m = bm + rows + warp * 16 + rc.row, n = bn + j * 8 + rc.col;
        if (m < M && n < N) store_one(e, C, N, m, n, d[j * 4 + q]);
      }
  }
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
}

// ---------------------------------------------------------------- v6: 128x256 tiles
//
// What v6 changes in v5, each for a reason the v5 numbers gave (README.md):
//  - A 128x256 tile: each consumer warp group owns 64 rows x 256 columns and issues
//    wgmma.m64n256k16, the largest shape. Per k16 step the tensor cores do twice v5's work for
//    the same 64x16 slice of A read from shared memory, and each block re-reads A half as often
//    from L2 (N / 256 tile columns instead of N / 128).
//  - 128 FP32 accumulators per consumer thread: setmaxnreg moves registers from the producer
//    warp group (40: it only issues TMA) to the consumers (232). 128 x 40 + 256 x 232 = 64512,
//    no more than the 384 x 168 the block starts with. __launch_bounds__(384, 1) gives ptxas that
//    entry cap, without which ptxas ignores setmaxnreg (warning C7508).
//  - wgmma kept in flight: after committing stage t's four wgmma the consumer waits only until
//    at most one group is pending (wait_group 1), i.e. until stage t-1's group has finished, and
//    only then releases stage t-1 to the producer. v5 waited for 0 each stage, so the tensor
//    cores idled between one stage's last wgmma and the next stage's first.
//  - 4 stages of 48 KiB (A 128x64: 16 KiB; B 64x256: four 64x64 boxes of 8 KiB, since a 128B
//    swizzled box is at most 128 bytes = 64 halves wide): 192 KiB + barriers of the 227 KiB a
//    block can have. 5 stages (240 KiB) would not fit.
//  - The tile order of tile_coord (groups of kGroupM tile rows) instead of the grid's row by row,
//    and a 1D grid, so M is not limited by gridDim.y.
//  - The write-out stores column pairs (store_two) when C allows it.
// The kernel loops over tiles (tile += gridDim.x): launched with one block per tile, as v6 is,
// the loop runs once per block. v7 launches it persistently, one block per SM: the producer then
// fills the ring with the next tile's stages while the consumers write the last one out, and no
// block pays the launch, the barrier initialisation and the empty ring at each tile again.
namespace v6cfg {
constexpr int BM = 128, BN = 256, BK = 64, kStages = 4, kThreads = 384, kGroupM = 8;
constexpr int kBBoxes = BN / 64;                                 // 4 boxes of 64 columns
constexpr int kATileBytes = BM * BK * 2;                         // 16 KiB
constexpr int kStageBytes = kATileBytes + kBBoxes * kBBoxBytes;  // 48 KiB
constexpr int kSmemBytes = kStages * kStageBytes + 1024 /* alignment */ + 256 /* barriers */;
static_assert(kSmemBytes <= 227 * 1024, "v6's ring must fit in a block's shared memory");
static_assert(kBBoxBytes == BK * 64 * 2, "B's boxes are BK rows of 64 columns");
}  // namespace v6cfg

// v6's write-out through shared memory (kStaged): when the block's one tile is done, the ring is
// free (every TMA load was waited for, every wgmma has finished reading), so the two consumer
// warp groups put their accumulators there as a 128 x 256 FP32 tile (rows padded by 8 floats:
// a half-warp's float2 stores then hit 32 different banks), meet at a named barrier, and write
// C row by row, each thread 4 consecutive columns: one 16- or 8-byte store per thread, a warp
// covering 128 contiguous elements. The write-out is one short loop instead of 128 unrolled
// accumulator stores (v5's, v7's): the unrolled one, about 400 KB of code with GELU inlined,
// misses the instruction cache (ncu on the H200: a third of the warps' cycles stalled fetching
// instructions), and its stores touch 16 bytes per row per instruction.
namespace v6cfg {
constexpr int kStagedLd = BN + 8;  // floats per staged row
static_assert(BM * kStagedLd * 4 <= kStages * kStageBytes, "the staged tile must fit the ring");
}  // namespace v6cfg

#ifdef LESSON10_SM90A
// Output tile `tile`'s (tile row, tile column): in v6's order (tile_coord, groups of kGroupM tile
// rows, compiled in), or with kOrderArg (v12) in the order the kernel was given (tile_in_order).
template <bool kOrderArg>
__device__ __forceinline__ TileCoord tile_of_block(int tile, int tiles_m, int tiles_n, int order) {
  if constexpr (kOrderArg)
    return tile_in_order(tile, tiles_m, tiles_n, order);
  else
    return tile_coord(tile, tiles_m, tiles_n, v6cfg::kGroupM);
}

// The producer of v6, v7, v10 and v12 (one thread): the K tiles of this block's output tiles
// (blockIdx.x, blockIdx.x + gridDim.x, ... in tile_of_block's order) into the ring, TMA boxes of
// A (128 x 64) and B (four of 64 x 64) per stage. `it` counts ring uses across tiles, as the
// consumers' consume_k_tiles does, so stage and phase agree between the two roles.
template <bool kOrderArg = false>
__device__ __forceinline__ void produce_128x256_tiles(const CUtensorMap* map_a,
                                                      const CUtensorMap* map_b, std::uint64_t* full,
                                                      std::uint64_t* empty, unsigned char* smem,
                                                      int M, int N, int K, int order = 0) {
  using v6cfg::BK, v6cfg::BM, v6cfg::BN, v6cfg::kATileBytes, v6cfg::kBBoxes, v6cfg::kStageBytes,
      v6cfg::kStages;
  const int tiles_m = ceil_div(M, BM), tiles_n = ceil_div(N, BN), k_tiles = ceil_div(K, BK);
  int it = 0;
  for (int tile = blockIdx.x; tile < tiles_m * tiles_n; tile += gridDim.x) {
    const TileCoord tc = tile_of_block<kOrderArg>(tile, tiles_m, tiles_n, order);
    const int bm = tc.m * BM, bn = tc.n * BN;
    for (int kt = 0; kt < k_tiles; ++kt, ++it) {
      const int s = pipeline_stage(it, kStages);
      // The stage's previous use (it - kStages) must be released by both consumers.
      if (it >= kStages) mbar_wait(&empty[s], pipeline_phase(it - kStages, kStages));
      unsigned char* st = smem + s * kStageBytes;
      mbar_expect_tx(&full[s], kStageBytes);  // whole boxes, zero-filled past the edges
      tma_load_2d(st, map_a, kt * BK, bm, &full[s]);
#pragma unroll
      for (int b = 0; b < kBBoxes; ++b)
        tma_load_2d(st + kATileBytes + b * kBBoxBytes, map_b, bn + 64 * b, kt * BK, &full[s]);
    }
  }
}
#endif  // LESSON10_SM90A

// The 256 consumer threads (warp groups 1 and 2) only: named barrier 1 (0 is __syncthreads).
__device__ __forceinline__ void consumers_sync() {
  asm volatile("bar.sync 1, 256;\n" ::: "memory");
}

template <class Out>
__device__ __forceinline__ void write_tile_staged(const Epilogue& e, Out* C, int M, int N, int bm,
                                                  int bn, int rows, int warp, int lane,
                                                  const float (&d)[128], float* staged,
                                                  int store_quads) {
  using v6cfg::BM, v6cfg::BN, v6cfg::kStagedLd;
  consumers_sync();  // both warp groups are done with the ring
#pragma unroll
  for (int j = 0; j < 32; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const RowCol rc = mma_c_element(lane, 2 * h);
      const int r = rows + warp * 16 + rc.row, c = j * 8 + rc.col;
      *reinterpret_cast<float2*>(staged + r * kStagedLd + c) =
          make_float2(d[j * 4 + 2 * h], d[j * 4 + 2 * h + 1]);
    }
  consumers_sync();
  const int t = threadIdx.x - 128;  // 0..255
#pragma unroll 2
  for (int idx = t; idx < BM * (BN / 4); idx += 256) {
    const int r = idx / (BN / 4), c = (idx % (BN / 4)) * 4, m = bm + r, n = bn + c;
    if (m >= M || n >= N) continue;  // N % 8 == 0 and n % 4 == 0: n < N means n + 3 < N
    store_quad(e, C, N, m, n, *reinterpret_cast<const float4*>(staged + r * kStagedLd + c),
               store_quads);
  }
}

// kStaged: v6, one tile per block, written out through shared memory (above); otherwise v7's
// loop over tiles with the accumulators stored straight from registers (the ring is refilled
// for the next tile meanwhile, so it cannot hold a staged tile). store_pairs: C aligned to two
// elements (unstaged) or to four (staged). kOrderArg: the tiles in the order `order` (a
// TileOrder's value: v12); otherwise in v6's, compiled in, and `order` is not read.
template <class In, class Out, bool kStaged, bool kOrderArg = false>
__global__ void __launch_bounds__(v6cfg::kThreads, 1)
    wgmma_128x256_kernel(const __grid_constant__ CUtensorMap map_a,
                         const __grid_constant__ CUtensorMap map_b, int M, int N, int K,
                         Out* __restrict__ C, Epilogue e, int store_pairs, int order) {
#ifdef LESSON10_SM90A
  using v6cfg::BK, v6cfg::BM, v6cfg::BN, v6cfg::kATileBytes, v6cfg::kStageBytes, v6cfg::kStages;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = align_1024(smem_raw);
  std::uint64_t* full = reinterpret_cast<std::uint64_t*>(smem + kStages * kStageBytes);
  std::uint64_t* empty = full + kStages;
  const int wg = threadIdx.x / 128, tid_in_wg = threadIdx.x % 128;
  const int tiles_m = ceil_div(M, BM), tiles_n = ceil_div(N, BN);
  const int tiles = tiles_m * tiles_n, k_tiles = ceil_div(K, BK);
  init_ring(full, empty, kStages, 2);
  __syncthreads();

  // Both roles walk the same tiles and count the same ring uses `it` (across tiles), so stage
  // and phase agree between producer and consumers.
  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    if (tid_in_wg == 0)
      produce_128x256_tiles<kOrderArg>(&map_a, &map_b, full, empty, smem, M, N, K, order);
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    const int rows = (wg - 1) * 64;  // this consumer's 64 rows of the tile
    const int warp = tid_in_wg / 32, lane = tid_in_wg % 32;
    int it = 0;
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
      const TileCoord tc = tile_of_block<kOrderArg>(tile, tiles_m, tiles_n, order);
      const int bm = tc.m * BM, bn = tc.n * BN;
      float d[128];
#pragma unroll
      for (int i = 0; i < 128; ++i) d[i] = 0.0f;
      pin_registers(d);
      // The K loop with one group of wgmma kept in flight (kInFlight 1: wait_group 1, release
      // the previous stage), the same descriptors as v5 (256 columns = 4 boxes): see
      // solutions_sm90.cuh, exercise 3's answer.
      it = consume_k_tiles<In, 1, kStages, kStageBytes, kATileBytes>(d, full, empty, smem, rows, it,
                                                                     k_tiles, tid_in_wg == 0);
      if constexpr (kStaged) {
        write_tile_staged(e, C, M, N, bm, bn, rows, warp, lane, d, reinterpret_cast<float*>(smem),
                          store_pairs);
        continue;  // one tile per block: the loop ends here
      }
      // One branch around the whole write-out, not one per element: with the test inside the
      // loop ptxas serialises every wgmma (warning C7514).
      if (store_pairs)
        write_rows<true>(e, C, M, N, bm + rows + warp * 16, bn, lane, d);
      else
        write_rows<false>(e, C, M, N, bm + rows + warp * 16, bn, lane, d);
    }
  }
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
}

}  // namespace

bool sm90_kernels_built() {
  cudaFuncAttributes attr{};
  return cudaFuncGetAttributes(&attr, wgmma_kernel<__half, float>) == cudaSuccess &&
         attr.binaryVersion == 90;
}

template <class In, class Out>
void gemm_v5_wgmma(int M, int N, int K, float alpha, const In* A, const In* B, float beta, Out* C,
                   const float* bias, Activation act, cudaStream_t stream) {
  const CUtensorMap map_a = make_map(A, M, K, BM);  // boxes of 128 rows (m) x 64 k
  const CUtensorMap map_b = make_map(B, K, N, BK);  // boxes of 64 k rows x 64 columns
  auto kernel = wgmma_kernel<In, Out>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  const int gy = ceil_div(M, BM), gx = ceil_div(N, BN);
  if (gy > 65535) throw std::invalid_argument("gemm_v5_wgmma: M needs more than 65535 block rows");
  kernel<<<dim3(gx, gy), kThreads, kSmemBytes, stream>>>(map_a, map_b, M, N, K, C,
                                                         Epilogue{alpha, beta, bias, act});
  CUDA_CHECK_LAUNCH();
}

namespace {
// The current device's SM count: a persistent grid's size (v7, v10).
int sm_count() {
  int device = 0, sms = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}
}  // namespace

// v6's kernel on `grid` blocks: one per tile (v6), or fewer, each looping over tiles (v7).
// grid_limit <= 0: one block per tile.
template <class In, class Out>
void launch_128x256(int grid_limit, int M, int N, int K, float alpha, const In* A, const In* B,
                    float beta, Out* C, const float* bias, Activation act, cudaStream_t stream) {
  using v6cfg::BK, v6cfg::BM, v6cfg::BN, v6cfg::kSmemBytes, v6cfg::kThreads;
  const CUtensorMap map_a = make_map(A, M, K, BM);      // boxes of 128 rows (m) x 64 k
  const CUtensorMap map_b = make_map(B, K, N, BK);      // boxes of 64 k rows x 64 columns
  const int tiles = ceil_div(M, BM) * ceil_div(N, BN);  // <= INT_MAX / 32768: M N <= INT_MAX
  const int grid = grid_limit > 0 && grid_limit < tiles ? grid_limit : tiles;
  // One tile per block (v6): the staged write-out. Blocks that loop (v7): from registers.
  const bool staged = grid == tiles;
  auto kernel = staged ? wgmma_128x256_kernel<In, Out, true> : wgmma_128x256_kernel<In, Out, false>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  // Wide stores need C aligned to their width (N % 8 == 0, so then every row is): two elements
  // from registers, four from the staged tile.
  const std::size_t width = (staged ? 4 : 2) * sizeof(Out);
  const int pairs = reinterpret_cast<std::uintptr_t>(C) % width == 0 ? 1 : 0;
  kernel<<<grid, kThreads, kSmemBytes, stream>>>(map_a, map_b, M, N, K, C,
                                                 Epilogue{alpha, beta, bias, act}, pairs, 0);
  CUDA_CHECK_LAUNCH();
}

template <class In, class Out>
void gemm_v6_wgmma_128x256(int M, int N, int K, float alpha, const In* A, const In* B, float beta,
                           Out* C, const float* bias, Activation act, cudaStream_t stream) {
  launch_128x256(0, M, N, K, alpha, A, B, beta, C, bias, act, stream);
}

template <class In, class Out>
void gemm_v7_persistent(int blocks, int M, int N, int K, float alpha, const In* A, const In* B,
                        float beta, Out* C, const float* bias, Activation act,
                        cudaStream_t stream) {
  // One block per SM: the 197 KiB of shared memory allow no second one.
  if (blocks <= 0) blocks = sm_count();
  launch_128x256(blocks, M, N, K, alpha, A, B, beta, C, bias, act, stream);
}

}  // namespace lesson10

// v9, v6 on clusters of two blocks sharing B by TMA multicast: its own file, compiled in this
// translation unit (it uses v6's configuration and write-out).
#include "tensor_gemm_v9.cuh"
// v10, v6 made persistent with a staging buffer beside the ring: its own file too (it uses v6's
// configuration and producer).
#include "tensor_gemm_v10.cuh"
// v11, v10 with the write-out stored by TMA where C is not read (tensor_gemm_v11.cuh).
#include "tensor_gemm_v11.cuh"
// v12, v6's kernel with the tile order as an argument (tensor_gemm_v12.cuh).
#include "tensor_gemm_v12.cuh"

namespace lesson10 {

#define LESSON10_INSTANTIATE(In, Out)                                                             \
  template void gemm_v5_wgmma<In, Out>(int, int, int, float, const In*, const In*, float, Out*,   \
                                       const float*, Activation, cudaStream_t);                   \
  template void gemm_v6_wgmma_128x256<In, Out>(int, int, int, float, const In*, const In*, float, \
                                               Out*, const float*, Activation, cudaStream_t);     \
  template void gemm_v7_persistent<In, Out>(int, int, int, int, float, const In*, const In*,      \
                                            float, Out*, const float*, Activation, cudaStream_t); \
  template void gemm_v9_cluster<In, Out>(int, int, int, float, const In*, const In*, float, Out*, \
                                         const float*, Activation, cudaStream_t);                 \
  template void gemm_v10_persistent_staged<In, Out>(int, int, int, int, float, const In*,         \
                                                    const In*, float, Out*, const float*,         \
                                                    Activation, cudaStream_t);                    \
  template void gemm_v11_tma_store<In, Out>(int, int, int, int, float, const In*, const In*,      \
                                            float, Out*, const float*, Activation, cudaStream_t); \
  template void gemm_v12_launch<In, Out>(TileOrder, int, int, int, float, const In*, const In*,   \
                                         float, Out*, const float*, Activation, cudaStream_t);
LESSON10_INSTANTIATE(__half, float)
LESSON10_INSTANTIATE(__half, __half)
LESSON10_INSTANTIATE(__nv_bfloat16, float)
LESSON10_INSTANTIATE(__nv_bfloat16, __nv_bfloat16)
#undef LESSON10_INSTANTIATE

}  // namespace lesson10
