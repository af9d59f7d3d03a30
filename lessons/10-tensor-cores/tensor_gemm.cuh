// Lesson 10: tensor-core GEMM in FP16 and BF16, from WMMA to Hopper's TMA + wgmma.
//
// Every version computes, row-major, with FP32 accumulation:
//
//     C = act(alpha * A * B + beta * C + bias)     A: M x K, B: K x N (FP16 or BF16), C: M x N
//
// C is FP32 or the inputs' type (FP16 / BF16); bias (N floats, may be null) and act apply only
// where a launcher takes them. The versions (README.md has the numbers each one moves):
//
//   v1_wmma        nvcuda::wmma 16x16x16 fragments, a 128x128 block tile staged through padded
//                  shared memory with plain loads: lesson 07's API in the deployment precision
//   v2_mma_ldmatrix  the PTX instruction WMMA hides, mma.sync.m16n8k16, its fragments loaded by
//                  ldmatrix (four 8x8 matrices per instruction); shared-memory rows padded by 16
//                  bytes so ldmatrix's eight row addresses fall in eight different bank groups
//   v3_swizzle     the same kernel with unpadded shared memory and an XOR swizzle of 16-byte
//                  chunks (swizzle_chunk below): conflict-free without wasting the padding
//   v4_pipeline    v3 + a cp.async pipeline (loads of tile t+3 in flight while tile t is
//                  multiplied): the Ampere-style kernel. First written as the same template with
//                  4 stages of a 128x128x32 tile (8 warps of 64x32; V4Tile::t128x128_s4, still
//                  timed), by default the tuned kernel of namespace v4tuned below: 128x256x64
//                  tile, 8 warps of 64x64, 4 stages, fragments double-buffered across k steps,
//                  addresses precomputed outside the K loop, grouped block rasterisation
//   v5_wgmma       Hopper (sm_90a only): TMA (cp.async.bulk.tensor) fills a 4-stage ring of
//                  128B-swizzled tiles, completing on mbarriers; one producer warp group issues
//                  TMA, two consumer warp groups issue wgmma.m64n128k16 from shared memory
//   v6_wgmma_128x256  v5 with the known Hopper steps: a 128x256 block tile (each consumer warp
//                  group issues wgmma.m64n256k16: twice the MMA work per byte of A loaded),
//                  setmaxnreg (producer 40 registers, consumers 232 for 128 accumulators each),
//                  wgmma kept in flight across k-steps (wait_group 1), 4 stages of 48 KiB, tiles
//                  in a grouped order (tile_coord) for L2 reuse, the write-out staged through
//                  shared memory (store_four)
//   v7_wgmma_persistent  v6's kernel on one block per SM, each looping over tiles: the next
//                  tile's loads overlap this tile's write-out, and the prologue is paid once
//   v8_splitk_small_m  for inference at small batch (M <= 64), where B's bytes, not the FLOPs,
//                  are the cost: mma.sync + ldmatrix on 16/32/64 x 64 block tiles, K split over
//                  S blocks per tile so that enough of them stream B at once (v4's cp.async
//                  ring, 4 stages), FP32 partials summed in a fixed order by the last block of
//                  each tile (tensor_gemm_v8.cuh; the plan: namespace v8splitk below)
//   v9_cluster_multicast  v6 on clusters of 2 blocks stacked along M (two tile rows, one tile
//                  column): the pair shares B's 64x256 tile, each block TMA-loads half of it and
//                  multicasts it into both blocks' shared memory, and a stage is refilled only
//                  when the consumers of both blocks have released it (tensor_gemm_v9.cuh; the
//                  map of blocks to tiles and B's halves: namespace v9cluster below)
//   v10_persistent_staged  v6 made persistent (one block per SM looping over tiles, as v7) and
//                  still staged: each consumer warp group writes its accumulators out through a
//                  64x32 FP32 buffer of its own beside the 4-stage ring, synchronising only
//                  itself, while the producer loads the next tile (tensor_gemm_v10.cuh)
//   v11_tma_store  v10 with each staged chunk written to C by one TMA store (the epilogue applied
//                  in registers first), where C is not read (beta == 0) and is 16-byte aligned;
//                  elsewhere v10 (tensor_gemm_v11.cuh)
// and v12, not a version of the table but v6 with a knob: gemm_v12_tile_order runs v6's kernel
// with the tile order (TileOrder: groups of 1..16 tile rows, or a Hilbert curve) as an argument,
// to measure what the order is worth (tensor_gemm_v12.cuh).
//
// Conventions of every launcher:
//  - Dense row-major device arrays. Any M, N, K >= 0; tiles at the edges are zero-filled.
//  - M == 0 or N == 0: nothing to do (pointers may be null). K == 0: C = act(beta*C + bias).
//  - beta == 0: C is not read (may hold NaN), as in BLAS.
//  - Alignment: v1 has none. v2..v11 load 16-byte chunks (cp.async / TMA), so they need
//    K % 8 == 0, N % 8 == 0 and A, B 16-byte aligned; otherwise std::invalid_argument saying so.
//  - Errors: std::invalid_argument for a negative size, a null pointer that is used, more than
//    INT_MAX elements in a matrix, an unknown version, the alignment above, or bias/act given to
//    v1; NotSupported (a std::runtime_error) for a version this GPU or this build lacks
//    (v2..v4 and v8 need compute capability 8.0 and a build for compute_80+; v5..v7 and v9..v11
//    need exactly 9.0); course::CudaError for a failed launch. Launches are asynchronous on
//    `stream`.
//  - v8 alone keeps state between calls: a workspace per (device, stream), allocated by the
//    first call that needs it (gemm_v8_splitk says when, and what that means for CUDA graphs).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <math.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace lesson10 {

enum class Activation : int { none = 0, relu = 1, gelu = 2 };
const char* to_string(Activation act);

__host__ __device__ inline int ceil_div(int a, int b) {
  return a / b + (a % b != 0 ? 1 : 0);
}

// GELU, tanh form (what most deployed transformers use): 0.5 x (1 + tanh(sqrt(2/pi)(x + 0.044715
// x^3)))
__host__ __device__ inline float gelu(float x) {
  const float k = 0.7978845608028654f;  // sqrt(2 / pi)
  return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

__host__ __device__ inline float activate(float x, Activation act) {
  switch (act) {
    case Activation::relu:
      return x > 0.0f ? x : 0.0f;
    case Activation::gelu:
      return gelu(x);
    default:
      return x;
  }
}

// ---------------------------------------------------------------- fragment layouts (CPU-tested)
//
// mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32 (PTX ISA, "Matrix Fragments for
// mma.m16n8k16 with floating point type"). In a warp, lane = 4 * group + t (group = lane / 4,
// t = lane % 4). Each lane holds 8 elements of A (4 registers of 2 halves), 4 of B (2 registers)
// and 4 floats of C/D. Element index i counts the lane's halves/floats in register order.
struct RowCol {
  int row, col;
};
// A (16 x 16, row-major fragment): i = 0..7.
//   row = group + 8 for i in {2,3,6,7}, else group;  col = 2t + (i & 1) + 8 for i >= 4.
__host__ __device__ inline RowCol mma_a_element(int lane, int i) {
  const int group = lane >> 2, t = lane & 3;
  return {group + ((i >> 1) & 1) * 8, 2 * t + (i & 1) + (i >> 2) * 8};
}
// B (16 x 8, "col": K down the rows, N across): i = 0..3. row (k) = 2t + (i & 1) + 8 for i >= 2;
// col (n) = group.
__host__ __device__ inline RowCol mma_b_element(int lane, int i) {
  const int group = lane >> 2, t = lane & 3;
  return {2 * t + (i & 1) + (i >> 1) * 8, group};
}
// C / D (16 x 8): i = 0..3. row = group + 8 for i >= 2; col = 2t + (i & 1).
__host__ __device__ inline RowCol mma_c_element(int lane, int i) {
  const int group = lane >> 2, t = lane & 3;
  return {group + (i >> 1) * 8, 2 * t + (i & 1)};
}

// ldmatrix.sync.aligned.m8n8.x4.b16 loads four 8x8 matrices of 16-bit elements: lanes 8j..8j+7
// give the shared-memory addresses of the 8 rows (16 bytes each) of matrix j, and each lane
// receives one 32-bit register per matrix (ldmatrix_element below says which two elements).
// The kernels point every lane at one row of a fragment so that the four registers are exactly
// an mma operand. These two maps are exercise 1's core (exercise.cu), so their bodies are in
// solutions.cuh; the CPU tests compose each with ldmatrix_element and compare the result with
// mma_a_element / mma_b_element for every lane and register.
//
// A's 16x16 fragment (row-major, without .trans): the row and column of the fragment whose
// address lane `lane` (0..31) gives, such that registers 0..3 are a0..a3 of mma_a_element (halves
// 2r, 2r + 1 of register r).
__host__ __device__ RowCol ldmatrix_a_address(int lane);
// B stored row-major (k rows, n contiguous), a 16 (k) x 16 (n) block read with .trans: the k row
// and n column of the block whose address lane `lane` gives, such that registers 0, 1 are b0..b3
// of mma_b_element for the n columns 0..7 of the block, and registers 2, 3 the same for columns
// 8..15.
__host__ __device__ RowCol ldmatrix_b_trans_address(int lane);
// What lane `lane` holds in register `reg` (0..3), half `h` (0/1) after ldmatrix.x4 whose
// matrix j starts at (row0[j], col0[j]) of the tile: without .trans row0 + lane/4, col0 +
// 2(lane%4)+h; with .trans row0 + 2(lane%4)+h, col0 + lane/4. (The tests compose this with the
// addresses above and check it against mma_a_element / mma_b_element.)
__host__ __device__ inline RowCol ldmatrix_element(int lane, int h, RowCol matrix_origin,
                                                   bool trans) {
  if (!trans) return {matrix_origin.row + (lane >> 2), matrix_origin.col + 2 * (lane & 3) + h};
  return {matrix_origin.row + 2 * (lane & 3) + h, matrix_origin.col + (lane >> 2)};
}

// ---------------------------------------------------------------- shared-memory swizzle
// (CPU-tested)
//
// Shared memory has 32 banks of 4 bytes: one 128-byte line. ldmatrix reads, per phase, eight rows
// of 16 bytes (one "chunk" per row); they are conflict-free exactly when the eight chunks lie in
// eight different 16-byte bank groups (address / 16 mod 8). A tile row of `chunks_per_row`
// 16-byte chunks (4 = 32 halves, 8 = 64, 16 = 128 halves, ...) is stored with its chunks
// permuted by an XOR with a function of the row: swizzle_chunk is the physical chunk of logical
// chunk `chunk` in row `row`. Within a row it is a permutation (a bijection of the tile); eight
// consecutive rows (aligned to 8) at the same logical chunk land in eight different bank groups,
// and so do eight consecutive chunks in row-major order (the cp.async writes). For 8 or more
// chunks per row it is the pattern TMA writes with CU_TENSOR_MAP_SWIZZLE_128B, which v5..v7's
// wgmma descriptors declare. chunks_per_row must be a power of two >= 4 (not checked here; the
// kernels' constants are). Exercise 1 writes the same idea (exercise.cu), so the bodies are in
// solutions.cuh; the CPU tests count the bank groups of every ldmatrix phase and cp.async write.
__host__ __device__ int swizzle_chunk(int row, int chunk, int chunks_per_row);
// Offset in halves of element (row, col) of a tile of `row_halves` halves per row, swizzled:
// row * row_halves + 8 * swizzle_chunk(row, col / 8, row_halves / 8) + col % 8.
__host__ __device__ int swizzled_offset(int row, int col, int row_halves);
// The padded alternative (v2): rows of row_halves + 8 halves (16 bytes of padding).
__host__ __device__ inline int padded_offset(int row, int col, int row_halves) {
  return row * (row_halves + 8) + col;
}
// The 16-byte bank group (0..7) of a byte offset in shared memory.
__host__ __device__ inline int bank_group(int byte_offset) {
  return (byte_offset / 16) % 8;
}

// ---------------------------------------------------------------- the pipeline (CPU-tested)
//
// The index arithmetic of a `stages`-deep ring of shared-memory buffers over the K tiles
// 0..tiles-1, which v4 and v5..v7 share: K tile t lives in stage t % stages, and while tile t is
// multiplied the tiles up to t + stages - 1 are loading into the other stages. When to wait for a
// tile and where the barriers go is the ring's protocol (v4: cp_async_ring, exercise 2; v5..v7:
// mbarriers, exercise 3). The CPU tests simulate the ring and check that no stage is refilled
// while it may still be read.
__host__ __device__ inline int pipeline_stage(int tile, int stages) {
  return tile % stages;
}
// The tile issued at iteration t, or -1 when it is past the last tile.
__host__ __device__ inline int pipeline_tile_issued(int iteration, int stages, int tiles) {
  const int tile = iteration + stages - 1;
  return tile < tiles ? tile : -1;
}
// Hopper's mbarrier ring (v5): the phase bit a waiter expects for the k-th use of a stage, which
// flips every time the ring wraps: (tile / stages) & 1.
__host__ __device__ inline int pipeline_phase(int tile, int stages) {
  return (tile / stages) & 1;
}

// ---------------------------------------------------------------- the tile order (CPU-tested)
//
// v6 numbers its output tiles 0..tiles_m*tiles_n-1 and maps tile t to (tile row, tile column) in
// groups of `group` tile rows: inside a group the column advances once every `group` tiles, so
// the blocks resident at one time share a few columns of B and a few rows of A, and both stay in
// L2 while they are re-read (the "grouped" order of Triton's matmul tutorial and CUTLASS's tile
// swizzle). The last group may have fewer rows. A bijection onto the tile grid.
struct TileCoord {
  int m, n;  // tile row, tile column
};
__host__ __device__ inline TileCoord tile_coord(int tile, int tiles_m, int tiles_n, int group) {
  const int per_group = group * tiles_n;
  const int first_m = tile / per_group * group;
  const int rows = tiles_m - first_m < group ? tiles_m - first_m : group;
  const int in_group = tile % per_group;
  return {first_m + in_group % rows, in_group / rows};
}

// v12 (tensor_gemm_v12.cuh) takes the tile order as an argument: tile_coord's groups of 1 (row
// by row), 2, 4, 8 (v6's) or 16 tile rows, or a Hilbert curve. The enumerator's value is what the
// kernel receives: the group size, or 0 for the curve.
enum class TileOrder : int {
  hilbert = 0,
  group1 = 1,
  group2 = 2,
  group4 = 4,
  group8 = 8,
  group16 = 16
};
// Every order, in the benchmark's order.
constexpr TileOrder kTileOrders[] = {TileOrder::group1, TileOrder::group2,  TileOrder::group4,
                                     TileOrder::group8, TileOrder::group16, TileOrder::hilbert};
const char* to_string(TileOrder order);  // "group8", "hilbert"; "unknown" for another value
// Whether `order` is one of kTileOrders.
constexpr bool is_tile_order(TileOrder order) {
  for (const TileOrder o : kTileOrders)
    if (o == order) return true;
  return false;
}

// How many of the cells lo .. lo + len - 1 lie in 0 .. extent - 1.
__host__ __device__ inline int range_overlap(int lo, int len, int extent) {
  const int a = lo > 0 ? lo : 0, b = lo + len < extent ? lo + len : extent;
  return b > a ? b - a : 0;
}

// The Hilbert order over a tiles_m x tiles_n grid: the Hilbert curve over the smallest
// power-of-two square that holds the grid, the cells outside the grid skipped, so tile t is the
// t-th cell of the grid along the curve. On a power-of-two square the curve moves to a neighbour
// at every step; skipping cells breaks that only where the curve leaves the grid and comes back.
//
// The curve (the classic one, e.g. Wikipedia's d2xy): in a square of side s its quarters are
// visited in the order (x, y) = low-low, low-high, high-high, high-low, the first quarter
// transposed, the last one transposed across the other diagonal, so the curve runs from the
// corner (0, 0) to (s - 1, 0). The first move between quarters is along y; y is taken along the
// grid's longer side, so a grid twice as long as it is wide (4096 x 4096 in 128 x 256 tiles: 32 x
// 16) is two whole quarters, one after the other: still a neighbour at every step.
//
// Computed from the top down: the current square is `o + A l` for local cells l in [0, s)^2 (A a
// signed permutation); at each level the tile lies in the first quarter, in curve order, whose
// count of in-grid cells (a rectangle's overlap with the grid) exceeds what is left of t. That is
// log2(s) levels of at most four quarters each: 5 levels for 32 x 16 tiles, 6 for 64 x 32.
__host__ __device__ inline TileCoord hilbert_tile(int tile, int tiles_m, int tiles_n) {
  const bool m_along_y = tiles_m >= tiles_n;
  const int width = m_along_y ? tiles_n : tiles_m;   // cells along x
  const int height = m_along_y ? tiles_m : tiles_n;  // along y, the longer side
  int s = 1;
  while (s < height) s *= 2;
  int ox = 0, oy = 0, axu = 1, axv = 0, ayu = 0, ayv = 1;  // cell (u, v) -> (x, y) = o + A (u, v)
  int t = tile;
  for (; s > 1; s /= 2) {
    const int h = s / 2;
    for (int q = 0; q < 4; ++q) {
      // Quarter q's cells l' in [0, h)^2 lie at l = tq + Cq l' of the square.
      const bool flip = q == 0 || q == 3;  // Cq transposes (q 0) or anti-transposes (q 3)
      const int sign = q == 3 ? -1 : 1;
      const int tu = q == 0 || q == 1 ? 0 : q == 2 ? h : 2 * h - 1;
      const int tv = q == 0 ? 0 : q == 3 ? h - 1 : h;
      const int c00 = flip ? 0 : 1, c01 = flip ? sign : 0, c10 = flip ? sign : 0,
                c11 = flip ? 0 : 1;
      const int nox = ox + axu * tu + axv * tv, noy = oy + ayu * tu + ayv * tv;
      const int nxu = axu * c00 + axv * c10, nxv = axu * c01 + axv * c11;
      const int nyu = ayu * c00 + ayv * c10, nyv = ayu * c01 + ayv * c11;
      // The quarter's cells along x: from nox + min(0, (nxu + nxv) (h - 1)), h of them; y alike.
      const int dx = (nxu + nxv) * (h - 1), dy = (nyu + nyv) * (h - 1);
      const int count = range_overlap(nox + (dx < 0 ? dx : 0), h, width) *
                        range_overlap(noy + (dy < 0 ? dy : 0), h, height);
      if (t < count || q == 3) {
        ox = nox, oy = noy, axu = nxu, axv = nxv, ayu = nyu, ayv = nyv;
        break;
      }
      t -= count;
    }
  }
  return m_along_y ? TileCoord{oy, ox} : TileCoord{ox, oy};
}

// Tile t's (tile row, tile column) in `order` (a TileOrder's value): tile_coord's groups or the
// Hilbert curve. A bijection onto the grid for each order of kTileOrders.
__host__ __device__ inline TileCoord tile_in_order(int tile, int tiles_m, int tiles_n, int order) {
  return order == 0 ? hilbert_tile(tile, tiles_m, tiles_n)
                    : tile_coord(tile, tiles_m, tiles_n, order);
}

// ---------------------------------------------------------------- v4's tuned tile (CPU-tested)
//
// v4's default block tile, written for issue slots rather than for brevity (the template
// mma_kernel of v2..v4 recomputes every address in the loop). What each choice buys:
//  - 128 x 256 of C per block, K tiles of 64: half the barriers and cp.async commits per FLOP
//    of a 32-deep tile, and A's rows are 64 halves = 128 bytes = 8 chunks, one whole line of
//    banks per row (swizzle_chunk with 8 chunks; B's rows of 256 halves permute the same low 3
//    chunk bits): conflict-free for ldmatrix and for the cp.async writes.
//  - 8 warps of 64 x 64 (2 down M, 4 across N): MI = 4 m16 fragments of A and NJ = 8 n8 of B
//    give 32 mma per 8 ldmatrix.x4, and 128 FP32 accumulators per thread.
//  - every shared-memory address is a per-thread base computed once, before the K loop, plus
//    the stage and a compile-time XOR or offset: the XOR with 16 * ks (A) or 16 * j (B) halves
//    flips exactly the chunk bits that the swizzle permutes, because the base's chunk bits
//    already hold the lane's swizzled chunk at k step 0 (the functions below; the tests compare
//    them with swizzled_offset for every thread, lane, fragment and k step).
//  - blocks are rasterised in groups of kGroupM block rows (tile_coord): the blocks resident
//    at one time share A's and B's tiles in L2.
namespace v4tuned {
constexpr int BM = 128, BN = 256, BK = 64, kThreads = 256;
constexpr int kWarpsN = 4, WM = 64, WN = 64;            // 2 x 4 warps of 64 x 64
constexpr int MI = WM / 16, NJ = WN / 8, KS = BK / 16;  // 4 m16, 8 n8 fragments; 4 k16 steps
constexpr int kAStage = BM * BK, kBStage = BK * BN;     // halves per stage
constexpr int kALoads = BM * BK / 8 / kThreads;         // 16-byte chunks per thread: 4 of A
constexpr int kBLoads = BK * BN / 8 / kThreads;         // and 8 of B
constexpr int kARowsPerPass = kThreads / (BK / 8);      // 32 rows of A per pass of the block
constexpr int kBRowsPerPass = kThreads / (BN / 8);      // 8 rows of B
constexpr int kGroupM = 16;                             // block rows per raster group
// Shared memory for `stages` stages: 48 KiB each (4 stages: 192 KiB, within Hopper's 227).
constexpr int smem_bytes(int stages) {
  return stages * (kAStage + kBStage) * 2;
}

// cp.async: thread `tid` copies chunk p (0..kALoads-1) of the A tile, tile row and column
// a_chunk(tid, p), to half offset a_store(tid) + p * kARowsPerPass * BK of the stage (the row
// step is a multiple of 8, the swizzle's period, so one base serves every p). B likewise.
__host__ __device__ inline RowCol a_chunk(int tid, int p) {
  return {tid / (BK / 8) + p * kARowsPerPass, (tid % (BK / 8)) * 8};
}
__host__ __device__ inline int a_store(int tid) {
  const RowCol rc = a_chunk(tid, 0);
  return swizzled_offset(rc.row, rc.col, BK);
}
__host__ __device__ inline RowCol b_chunk(int tid, int p) {
  return {tid / (BN / 8) + p * kBRowsPerPass, (tid % (BN / 8)) * 8};
}
__host__ __device__ inline int b_store(int tid) {
  const RowCol rc = b_chunk(tid, 0);
  return swizzled_offset(rc.row, rc.col, BN);
}

// The warp tile's origin in the block tile.
__host__ __device__ inline RowCol warp_origin(int warp) {
  return {(warp / kWarpsN) * WM, (warp % kWarpsN) * WN};
}
// ldmatrix.x4 of A's m16 fragment i at k step ks (k = 16 ks .. 16 ks + 15): lane's half offset
// is a_load(a_load_base(warp, lane), i, ks). The base is the lane's address at k step 0; 16 ks
// halves is 2 ks chunks, and moving a lane's logical chunk by 2 ks moves its physical chunk by
// an XOR with 2 ks (the lane's own chunk never reaches bit 1; the CPU tests check every case);
// 16 rows down is + 16 BK.
__host__ __device__ inline int a_load_base(int warp, int lane) {
  const RowCol la = ldmatrix_a_address(lane);
  return swizzled_offset(warp_origin(warp).row + la.row, la.col, BK);
}
__host__ __device__ inline int a_load(int base, int i, int ks) {
  return (base ^ (ks * 16)) + i * 16 * BK;
}
// ldmatrix.x4.trans of B's n16 pair j (n fragments 2j, 2j+1) at k step ks: the XOR picks the
// pair's chunks within the warp's 64 columns (8 chunks, one swizzle period), 16 k rows down is
// + 16 BN.
__host__ __device__ inline int b_load_base(int warp, int lane) {
  const RowCol lb = ldmatrix_b_trans_address(lane);
  return swizzled_offset(lb.row, warp_origin(warp).col + lb.col, BN);
}
__host__ __device__ inline int b_load(int base, int j, int ks) {
  return (base ^ (j * 16)) + ks * 16 * BN;
}

}  // namespace v4tuned

// ---------------------------------------------------------------- v8's split-K plan (CPU-tested)
//
// v8 is for a fully connected layer at small batch: M <= 64 rows of activations times a K x N
// weight matrix B. It does 2MNK FLOP on 2KN bytes of B, M FLOP per byte, far below what the
// tensor cores can consume per byte of DRAM (an H200: about 990 TFLOP/s against 4.8 TB/s, some
// 200 FLOP per byte): the time is streaming B once. What that needs is enough bytes in flight on
// every SM (Little's law: bandwidth x latency, about 4.8 TB/s x 0.7 us = 3.4 MB, 26 KiB per SM
// of 132). Output tiles alone give too few blocks (N = 4096 in 64-column tiles: 64 blocks for
// 132 SMs), so K is split as well: S blocks per output tile, block z streaming K tiles
// split_begin(z) .. split_begin(z + 1) - 1 and writing an FP32 partial tile; the last of the S
// blocks to finish sums the partials (tensor_gemm_v8.cuh says how, and why it is deterministic).
namespace v8splitk {
constexpr int BN = 64, BK = 64, kThreads = 128, kStages = 4;
constexpr int kWarps = kThreads / 32;  // warp w multiplies k16 step w of every K tile
constexpr int kMaxSplits = 64;
// A slice of fewer than 4 K tiles would not fill the 4-stage ring once; and the S partial tiles
// the last block sums (S x rows x 64 floats) stay within 128 rows' worth, 32 KiB, so that this
// serial tail of the kernel stays short.
constexpr int kMinKTilesPerSplit = 4;
constexpr int kMaxReduceRows = 128;

// The block tile's rows: 16, 32 or 64 (one, two or four m16 fragments), the smallest that holds
// M, so that little of the mma.sync work and of the shared memory is spent on zero rows; larger
// M loops over tiles of 64 rows (a grid dimension).
__host__ __device__ constexpr int block_rows(int M) {
  return M <= 16 ? 16 : (M <= 32 ? 32 : 64);
}
// Dynamic shared memory of a block of `bm` rows: the 4-stage ring of A (bm x 64) and B (64 x 64)
// tiles in rows padded by 16 bytes (padded_offset: conflict-free ldmatrix and cp.async), reused
// after the K loop for the 4 warps' FP32 accumulator tiles (rows of 64 + 8 floats), whichever is
// larger: 46,080 bytes for 16 rows, 55,296 for 32, 73,728 for 64.
constexpr int smem_bytes(int bm) {
  const int ring = kStages * (bm * (BK + 8) + BK * (BN + 8)) * 2;
  const int partials = kWarps * bm * (BN + 8) * 4;
  return ring > partials ? ring : partials;
}
// The first K tile of slice `split` of `splits` over `k_tiles` tiles: slices differ by at most
// one tile, and with more slices than tiles some are empty (they still write a zero partial).
__host__ __device__ inline int split_begin(int split, int splits, int k_tiles) {
  return static_cast<int>(static_cast<long long>(split) * k_tiles / splits);
}

struct SplitPlan {
  int bm = 0;                        // block_rows(M)
  int tiles_m = 0, tiles_n = 0;      // output tiles: ceil(M / bm) x ceil(N / 64)
  int k_tiles = 0;                   // ceil(K / 64)
  int splits = 0;                    // S: the grid is tiles_n x tiles_m x S blocks
  std::size_t workspace_floats = 0;  // S x M x N FP32 partials (0 when S == 1)
  std::size_t tickets = 0;           // one int per output tile (0 when S == 1)
};
// The plan for an M x N x K product (each >= 1) on `sm_count` SMs that hold `blocks_per_sm` of
// its blocks at once (cudaOccupancyMaxActiveBlocksPerMultiprocessor). splits > 0 forces S;
// splits == 0 chooses the largest S that keeps one wave, tiles x S <= sm_count x blocks_per_sm
// (every block resident from the start: no second, partial wave), at least kMinKTilesPerSplit K
// tiles per slice, S x min(M, bm) <= kMaxReduceRows and S <= kMaxSplits; but S >= 1 (large M,
// or a small K, gives S = 1: no workspace, the epilogue straight from the block). The 4096 x 4096
// layer on an H200 (132 SMs, 3-4 blocks each): S = 8 at M <= 16 (512 blocks), 4 at M = 32.
SplitPlan plan_splits(int M, int N, int K, int sm_count, int blocks_per_sm, int splits);
}  // namespace v8splitk

// ---------------------------------------------------------------- v9's cluster plan (CPU-tested)
//
// v9 runs v6's kernel (128 x 256 tiles of C, K tiles of 64, 48 KiB stages) on thread-block
// clusters of two blocks (CUDA Programming Guide, "Thread Block Clusters"). The two blocks of a
// cluster take two tiles stacked along M, tile rows 2p and 2p + 1 of one tile column: they need
// the same 64 x 256 tile of B at every K step and different 128 x 64 tiles of A. Pairing along M
// shares B, the larger operand (32 KiB of a 48 KiB stage, against 16 KiB of A): each block loads
// its own A and half of B, and TMA multicasts each half into the shared memory of both blocks
// (PTX ISA, "cp.async.bulk.tensor", .multicast::cluster), so a block reads 32 KiB from L2 per
// stage instead of 48 and the pair's B tile crosses the L2 once. (Pairing along N would share A
// and save 8 KiB per block.)
//
// The grid is 1-D, clusters of 2 consecutive blocks (cluster dimension 2 x 1 x 1). Cluster p takes
// pair tile p in the grouped order of tile_coord over ceil(tiles_m / 2) pair rows (groups of
// kGroupPairs pair rows = v6's 8 tile rows); the block of cluster rank r takes tile row
// 2 x pair row + r. With an odd number of tile rows the last pair row's rank-1 block has no tile:
// it still loads and multicasts its half of B (its peer needs it) and releases the stages after
// them, but loads no A, multiplies nothing and writes nothing.
namespace v9cluster {
constexpr int kClusterSize = 2;  // blocks per cluster, along M
constexpr int kGroupPairs = 4;   // pair rows per raster group: 8 tile rows, as v6
constexpr int kBM = 128, kBN = 256, kBK = 64;
constexpr int kBBoxes = kBN / 64;                        // B's tile: 4 TMA boxes of 64 x 64
constexpr int kBBoxesPerBlock = kBBoxes / kClusterSize;  // 2 loaded by each block
constexpr int kABytes = kBM * kBK * 2;                   // 16 KiB of A per stage
constexpr int kBBoxBytes = kBK * 64 * 2;                 // 8 KiB per box of B
constexpr int kConsumers = 2;                            // consumer warp groups per block
// A stage's "empty" barrier completes when every consumer warp group of the cluster has released
// the stage: each block's producer writes B into both blocks' shared memory.
constexpr int kEmptyArrivals = kConsumers * kClusterSize;
// The blocks a multicast writes: bit r is cluster rank r (both blocks).
constexpr unsigned kMulticastMask = (1u << kClusterSize) - 1;
static_assert(kBBoxes % kClusterSize == 0, "B's boxes split evenly over the cluster");

// Blocks to launch for tiles_m x tiles_n tiles (tile rows rounded up to whole pairs).
__host__ __device__ inline int grid_blocks(int tiles_m, int tiles_n) {
  return kClusterSize * ceil_div(tiles_m, kClusterSize) * tiles_n;
}
struct BlockTile {
  int m, n;       // tile row, tile column
  bool has_tile;  // false: the rank-1 block of the last pair row when tiles_m is odd
};
// The tile of the block of cluster rank `rank` in cluster `cluster` (%clusterid.x).
__host__ __device__ inline BlockTile block_tile(int cluster, int rank, int tiles_m, int tiles_n) {
  const TileCoord pair = tile_coord(cluster, ceil_div(tiles_m, kClusterSize), tiles_n, kGroupPairs);
  const int m = pair.m * kClusterSize + rank;
  return {m, pair.n, m < tiles_m};
}
// The first of the kBBoxesPerBlock boxes of B (64 columns each, box b at columns 64 b of the
// tile) that the block of cluster rank `rank` loads and multicasts.
__host__ __device__ inline int first_b_box(int rank) {
  return rank * kBBoxesPerBlock;
}
// The bytes a block's "full" barrier expects per stage: all of B (half from its own loads, half
// from its peer's) and its own A; a block without a tile loads no A.
__host__ __device__ constexpr unsigned stage_tx_bytes(bool has_tile) {
  return kBBoxes * kBBoxBytes + (has_tile ? kABytes : 0);
}
}  // namespace v9cluster

// ---------------------------------------------------------------- v10's staging buffer
// (CPU-tested)
//
// v10 (tensor_gemm_v10.cuh) writes each consumer warp group's 64 x 256 accumulators out through a
// 64 x 32 FP32 buffer of its own, one chunk of 32 columns at a time: each thread stores its
// accumulator pairs of the chunk (float2, where the wgmma fragment puts them), the warp group
// meets at a barrier, and each thread reads 4 consecutive floats of a row (float4) for the
// global stores. Shared memory serves 64-bit accesses a half-warp at a time and 128-bit ones a
// quarter warp at a time, and is conflict-free when those threads' words fall in distinct banks:
//  - a half-warp's float2 stores cover 4 rows x 8 columns of the fragment; with rows of 32
//    floats the 4 rows share the same 8 banks (4 ways), with rows padded to 40 floats
//    (8 banks mod 32) they fall on 4 disjoint groups of 8 banks;
//  - a quarter warp's float4 reads cover one row's 32 floats: 32 banks.
namespace v10staging {
constexpr int kRows = 64;                 // a consumer warp group's rows of the tile
constexpr int kChunkCols = 32;            // columns staged at a time
constexpr int kChunkLd = kChunkCols + 8;  // floats per staged row
constexpr int kQuadsPerRow = kChunkCols / 4;
constexpr int kThreads = 128;  // the warp group
// The float offset in the buffer (rows of `ld` floats) of the pair of accumulators that thread
// (warp, lane) of the warp group holds for 8-column group jj of the chunk, rows h = 0 (lane / 4)
// or h = 1 (eight rows below): columns jj * 8 + 2 (lane % 4) and the next.
__host__ __device__ inline int fragment_offset(int warp, int lane, int jj, int h,
                                               int ld = kChunkLd) {
  const RowCol rc = mma_c_element(lane, 2 * h);
  return (warp * 16 + rc.row) * ld + jj * 8 + rc.col;
}
// The chunk's row and column of the 4 floats read at step idx = thread + 128 i of the write-out.
__host__ __device__ inline RowCol quad_of(int idx) {
  return {idx / kQuadsPerRow, idx % kQuadsPerRow * 4};
}
}  // namespace v10staging

// ---------------------------------------------------------------- the launchers

// A version the GPU or the build lacks: report "not supported on this GPU", not a failure.
class NotSupported : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class DType : int { f32 = 0, f16 = 1, bf16 = 2 };
const char* to_string(DType t);
template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::f32;
}
template <>
constexpr DType dtype_of<__half>() {
  return DType::f16;
}
template <>
constexpr DType dtype_of<__nv_bfloat16>() {
  return DType::bf16;
}

// One call of any version. In: __half or __nv_bfloat16; Out: float or In (instantiated for
// those four pairs). bias: N floats on the device or null; act: none unless v2..v11.
template <class In, class Out>
void tensor_gemm(int version, int M, int N, int K, float alpha, const In* A, const In* B,
                 float beta, Out* C, const float* bias = nullptr, Activation act = Activation::none,
                 cudaStream_t stream = nullptr);

// v4's block tiles, each timed by the benchmark so the steps keep their numbers:
//  t128x128_s4      the pipeline alone: mma_kernel with K tiles of 32, 4 stages (64 KiB), 64x32
//                   per warp (v4 as first written: 288 TFLOP/s on the H200)
//  t128x256_s3      the same kernel with 64x64 per warp, 3 stages (72 KiB)
//  t128x256_k64_s4  the default: the tuned kernel of namespace v4tuned (K tiles of 64, 64x64 per
//                   warp, fragments double-buffered, precomputed addresses, grouped raster),
//                   4 stages: 192 KiB of shared memory
//  t128x256_k64_s3  the same with 3 stages (144 KiB: fits an A100's 163 KiB)
// tensor_gemm(4, ...) takes v4_tile_for_device(): the default where the GPU's shared memory
// per block allows it, else the 3-stage tuned tile, else 128x128.
enum class V4Tile : int {
  t128x128_s4 = 0,
  t128x256_s3 = 1,
  t128x256_k64_s4 = 2,
  t128x256_k64_s3 = 3
};
constexpr V4Tile kDefaultV4Tile = V4Tile::t128x256_k64_s4;
const char* to_string(V4Tile tile);  // "128x256_k64_s4"
// The tile tensor_gemm(4, ...) uses on the current device. Throws CudaError if there is no device.
V4Tile v4_tile_for_device();
// v4 with the given tile; same conventions and errors as tensor_gemm(4, ...), and NotSupported
// when the tile needs more shared memory per block than the GPU has.
template <class In, class Out>
void gemm_v4_tile(V4Tile tile, int M, int N, int K, float alpha, const In* A, const In* B,
                  float beta, Out* C, const float* bias = nullptr,
                  Activation act = Activation::none, cudaStream_t stream = nullptr);

struct VersionInfo {
  int number;        // 1..11, what --version takes
  const char* name;  // "v4_pipeline"
  const char* idea;  // one line
};
const std::vector<VersionInfo>& versions();
const VersionInfo& version_info(int number);  // throws std::invalid_argument if unknown
constexpr int kBestAmpereVersion = 4;
constexpr int kHopperVersion = 5;  // the first wgmma kernel

// Whether `version` can run with inputs of type `in` on the current device and this build, and if
// not, why (for the message "not supported on this GPU: <why>"). Throws CudaError if there is no
// device.
bool version_supported(int version, DType in, std::string* why_not = nullptr);

// Throws std::invalid_argument (naming `who`) for the conventions above; returns false when
// there is nothing to compute. `aligned16` asks for the v2..v11 alignment.
bool check_tensor_gemm_args(const char* who, int M, int N, int K, const void* A, const void* B,
                            const void* C, bool aligned16);

// v5 lives in tensor_gemm_sm90.cu, compiled only for sm_90a (a separate library); this is its
// entry, which tensor_gemm(5, ...) calls after the checks. Defined for the same four pairs.
template <class In, class Out>
void gemm_v5_wgmma(int M, int N, int K, float alpha, const In* A, const In* B, float beta, Out* C,
                   const float* bias, Activation act, cudaStream_t stream);
// v6, in the same file and under the same conditions; tensor_gemm(6, ...) calls it after the
// checks.
template <class In, class Out>
void gemm_v6_wgmma_128x256(int M, int N, int K, float alpha, const In* A, const In* B, float beta,
                           Out* C, const float* bias, Activation act, cudaStream_t stream);
// v7: v6's kernel launched persistently on at most `blocks` blocks (<= 0: one per SM), each looping
// over tiles in tile_coord's order; tensor_gemm(7, ...) passes 0, the tests a few blocks so that
// each loops over many tiles. Same conventions; call it only after tensor_gemm's checks (K > 0).
template <class In, class Out>
void gemm_v7_persistent(int blocks, int M, int N, int K, float alpha, const In* A, const In* B,
                        float beta, Out* C, const float* bias, Activation act, cudaStream_t stream);
// v9: v6 on clusters of two blocks sharing B through TMA multicast (tensor_gemm_v9.cuh; the plan:
// namespace v9cluster above), launched with cudaLaunchKernelEx and the cluster dimension 2 x 1 x
// 1; tensor_gemm(9, ...) calls it after the checks (K > 0). Same types, conventions and epilogue
// as v6. Errors: course::CudaError where the launch fails (e.g. cudaErrorClusterOutOfResources if
// no two SMs of one GPC can hold the pair at once; not seen on an H200).
template <class In, class Out>
void gemm_v9_cluster(int M, int N, int K, float alpha, const In* A, const In* B, float beta, Out* C,
                     const float* bias, Activation act, cudaStream_t stream);
// How many of v9's clusters the current GPU holds at once (cudaOccupancyMaxActiveClusters for
// v9's kernel and launch): 2 x this many SMs multiply at a time. A cluster's two blocks need two
// SMs of one GPC with v6's 193 KiB of shared memory free, so a GPC with an odd number of usable
// SMs leaves one idle. Call it only where version_supported(9, ...); throws CudaError.
int v9_active_clusters();
// v10: v6 made persistent (v7's loop over tiles on at most `blocks` blocks, <= 0: one per SM) with
// the write-out staged through a shared-memory buffer of its own beside the 4-stage ring
// (tensor_gemm_v10.cuh), so the producer loads the next tile while the consumers write this one
// out, coalesced. tensor_gemm(10, ...) passes 0, the tests a few blocks so that each loops over
// many tiles. Same types, conventions and epilogue as v6; call it only after tensor_gemm's checks
// (K > 0, K % 8 == 0, N % 8 == 0, A and B 16-byte aligned).
template <class In, class Out>
void gemm_v10_persistent_staged(int blocks, int M, int N, int K, float alpha, const In* A,
                                const In* B, float beta, Out* C, const float* bias, Activation act,
                                cudaStream_t stream);
// v11: v10 whose write-out is a TMA store (cp.async.bulk.tensor) of each staged 64 x 32 chunk,
// the epilogue applied in registers first (tensor_gemm_v11.cuh). Only where C is not read
// (beta == 0) and C is 16-byte aligned; otherwise it runs v10. Same arguments, conventions and
// epilogue as v10.
template <class In, class Out>
void gemm_v11_tma_store(int blocks, int M, int N, int K, float alpha, const In* A, const In* B,
                        float beta, Out* C, const float* bias, Activation act, cudaStream_t stream);
// v12: v6 (one block per 128 x 256 tile, the staged write-out) with the tiles taken in `order`
// (TileOrder above: groups of 1, 2, 4, 8 or 16 tile rows, or the Hilbert curve), given to the
// kernel as an argument (tensor_gemm_v12.cuh). group8 is v6's order. The arithmetic is v6's, so
// every order gives v6's bits. Same types, conventions, epilogue and errors as tensor_gemm(6,
// ...) (v6's GPU and build), plus std::invalid_argument for an order outside kTileOrders, before
// any CUDA call. Not a row of the version table: it is v6 with a knob, timed by the benchmark's
// tile_order_* rows.
template <class In, class Out>
void gemm_v12_tile_order(TileOrder order, int M, int N, int K, float alpha, const In* A,
                         const In* B, float beta, Out* C, const float* bias = nullptr,
                         Activation act = Activation::none, cudaStream_t stream = nullptr);
// v12's launch (tensor_gemm_v12.cuh), which gemm_v12_tile_order calls after the checks (K > 0).
template <class In, class Out>
void gemm_v12_launch(TileOrder order, int M, int N, int K, float alpha, const In* A, const In* B,
                     float beta, Out* C, const float* bias, Activation act, cudaStream_t stream);
// Whether the sm_90a library holds real code (false if nvcc could not build it).
bool sm90_kernels_built();

// v8, split-K for small M (tensor_gemm_v8.cuh; the plan: namespace v8splitk above). A: M x K,
// B: K x N, C: M x N, row-major, the same types, epilogue and conventions as every version
// (K % 8 == 0, N % 8 == 0, A and B 16-byte aligned); any M, though it is built for M <= 64.
// `splits`: K slices per output tile; 0 lets plan_splits choose from the shape and this GPU (what
// tensor_gemm(8, ...) passes), 1..v8splitk::kMaxSplits forces it, even past the number of K
// tiles (some slices are then empty: the tests do that). The S FP32 partial tiles are summed in
// the order of their K slices by the last of the S blocks to finish, so the result is the same
// bits from run to run for a given GPU and shape (S depends on the SM count and occupancy).
// Workspace: S x M x N floats and one int per output tile, kept per (device, stream) for the
// life of the process; calls on one stream share it (stream order keeps them apart), calls on
// different streams do not. The first call on a stream that needs more allocates it with
// cudaMallocAsync on that stream (no host synchronisation); a workspace is never freed, since
// a CUDA graph captured earlier may point at it. While `stream` is capturing a graph nothing may
// be allocated: make one call with the largest shape on that stream first, or the call throws
// std::runtime_error. A graph captured with v8 must not run concurrently with itself or with v8
// on its capture stream. Errors: as tensor_gemm(8, ...), plus std::invalid_argument for splits
// outside 0..kMaxSplits (before any CUDA call) or for M over 65535 block rows of 64; and
// std::runtime_error for a workspace that would have to grow during a capture.
// Background: split-K as CUTLASS's GEMMs do it (a serial reduction over the K slices, or
// "parallel" split-K, which reduces in a second kernel), the fix-up of partial tiles in
// Stream-K (Osama, Merrill, Cecka, Garland and Owens, "Stream-K: Work-centric Parallel
// Decomposition for Dense Matrix-Matrix Multiplication on the GPU", PPoPP 2023), and the last
// block's ticket from the CUDA Programming Guide's example under "Memory Fence Functions".
template <class In, class Out>
void gemm_v8_splitk(int splits, int M, int N, int K, float alpha, const In* A, const In* B,
                    float beta, Out* C, const float* bias = nullptr,
                    Activation act = Activation::none, cudaStream_t stream = nullptr);

// ---------------------------------------------------------------- peak and baselines

// Dense FP16 tensor-core FLOP per clock per SM (FP32 accumulate), by architecture, from NVIDIA's
// architecture whitepapers (Volta V100, Turing, A100, GA102, Ada, H100): 7.0: 1024; 7.5: 512;
// 8.0: 2048; 8.6 / 8.7 / 8.9: 512 (GeForce/RTX parts run FP32-accumulate at half rate; 1024 is
// the FP16-accumulate rate); 9.0: 4096 (H100 SXM: 989 TFLOP/s = 132 SMs x 4096 x 1.83 GHz).
// Throws std::invalid_argument for an architecture it does not know.
int fp16_flops_per_clock_per_sm(int cc_major, int cc_minor);
struct TensorPeak {
  int sm_count = 0, clock_khz = 0, flops_per_clock_per_sm = 0;
  double tflops = 0.0;  // sm_count * flops_per_clock_per_sm * clock (the MAXIMUM boost clock)
};
TensorPeak tensor_peak(int device);

inline double gemm_flops(int M, int N, int K) {
  return 2.0 * M * N * K;
}

// Move-only owners of a cuBLAS and a cuBLASLt handle; throw std::runtime_error if creation fails.
class Blas {
 public:
  Blas();
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;
  void* cublas() const { return cublas_; }  // cublasHandle_t
  void* lt() const { return lt_; }          // cublasLtHandle_t
  void* workspace() const { return workspace_; }
  std::size_t workspace_bytes() const { return workspace_bytes_; }

 private:
  void* cublas_ = nullptr;
  void* lt_ = nullptr;
  void* workspace_ = nullptr;
  std::size_t workspace_bytes_ = 32u << 20;
};

// Row-major C = alpha A B + beta C with cublasGemmEx, CUBLAS_COMPUTE_32F (the row-major identity
// C^T = B^T A^T: cuBLAS gets B first, then A, leading dimensions N, K, N). Same types as above.
template <class In, class Out>
void cublas_gemm(const Blas& blas, int M, int N, int K, float alpha, const In* A, const In* B,
                 float beta, Out* C, cudaStream_t stream = nullptr);
// The same with cuBLASLt and its fused epilogue: C = act(alpha A B + beta C + bias), act none,
// relu or gelu (CUBLASLT_EPILOGUE_{DEFAULT,RELU_BIAS,GELU_BIAS}, or without _BIAS when bias is
// null). cuBLASLt's GELU is the tanh approximation, as ours.
template <class In, class Out>
void cublaslt_gemm(const Blas& blas, int M, int N, int K, float alpha, const In* A, const In* B,
                   float beta, Out* C, const float* bias, Activation act,
                   cudaStream_t stream = nullptr);

// ---------------------------------------------------------------- test data and the CPU oracle

// n values uniform in [lo, hi) rounded to T, from a hash of (seed, index); device memory.
template <class T>
void fill_uniform(T* data, std::size_t n, std::uint64_t seed, float lo, float hi,
                  cudaStream_t stream = nullptr);

// The FP64 reference of one element from the SAME rounded inputs (given as floats: FP16/BF16
// values are exact in FP32): ref = act(alpha * sum_k a b + beta * c + bias); *abs_sum = sum|a b|.
double reference_element(int N, int K, const float* A, const float* B, int m, int n,
                         double* abs_sum);

// The bound on |computed - exact| for one element, before the output is rounded:
//   every product a*b of two FP16/BF16 values is EXACT in FP32 (11- or 8-bit significands
//   multiply into at most 22 bits < 24), so only the K additions of the FP32 accumulation round,
//   plus alpha, beta*c and the bias: |err| <= (K + 3) u (|alpha| sum|a b| + |beta c| + |bias|),
//   u = 2^-24 (gamma_n bound, Higham, "Accuracy and Stability of Numerical Algorithms", 3.1).
// Rounding the result to FP16 / BF16 adds u_out |result| (u_out = 2^-11 / 2^-8) and, for FP16,
// half of the smallest subnormal step (2^-25) for results below 2^-14.
// GELU/ReLU are 1.13-/1-Lipschitz, and tanhf adds a few ulp: activation error added on top.
double tensor_gemm_error_bound(int K, double alpha, double abs_sum, double beta, double c_old,
                               double bias, Activation act, DType out, double exact_result);
constexpr double kFp32U = 1.0 / (1 << 24);

// ---------------------------------------------------------------- exercises (exercise.cu)
//
// The exercises write pieces of two real GEMMs; each stub's comment in exercise.cu is its
// contract. The test binary lesson10_exercise_tests runs your exercise.cu; lesson10_tests, the
// lesson binary and the benchmark run the solutions (solutions.cuh, solutions_sm90.cu), and
// the course's own kernels v1..v11 never call the ex_ functions.
//
// Exercise 1: the shared-memory addresses of an mma.sync kernel whose tiles are XOR-swizzled:
//   where element (row, col) of a tile with rows of `row_halves` halves is stored, and which
//   address each lane gives ldmatrix.x4 for A's 16x16 fragment at (row0, k0) of its tile and for
//   B's 16 (k) x 16 (n) block at (k0, n0) of its tile (read with .trans). Offsets in halves.
__host__ __device__ int ex_swizzled_offset(int row, int col, int row_halves);
__host__ __device__ int ex_ldmatrix_a_offset(int lane, int row0, int k0, int row_halves);
__host__ __device__ int ex_ldmatrix_b_offset(int lane, int k0, int n0, int row_halves);
// Exercise 2: ex_cp_async_ring, the K loop of a cp.async ring: a device function template,
//   declared and written in exercise.cu.
// Exercise 3: ex_wgmma_consumer, a consumer warp group's K loop in a Hopper TMA + wgmma kernel:
//   a device function template in exercise.cu, compiled for sm_90a only.

// The GEMM of exercises 1 and 2 (exercise_kernels.cuh): mma.sync.m16n8k16 fed by ldmatrix, a
// 128x128 block tile, K tiles of 64, 8 warps of 64x32, `stages` shared-memory stages of 32 KiB.
// Its cp.async writes and ldmatrix reads use your exercise 1 addresses; its K loop is v3's (load,
// wait, multiply) for stages == 1 and your exercise 2 ring for stages 2..4. Same conventions and
// errors as tensor_gemm(3, ...), plus std::invalid_argument for stages outside 1..4 and
// NotSupported where the GPU grants one block less shared memory than the stages need (4 stages:
// 128 KiB). It waits for its kernel (cudaStreamSynchronize on `stream`) and throws
// std::runtime_error if your functions gave an address outside the tile or not 16-byte aligned,
// or a stage or tile index outside the ring (the kernel does not use those).
template <class In, class Out>
void gemm_exercise_mma(int stages, int M, int N, int K, float alpha, const In* A, const In* B,
                       float beta, Out* C, const float* bias = nullptr,
                       Activation act = Activation::none, cudaStream_t stream = nullptr);
// The GEMM of exercise 3 (exercise_kernels_sm90.cuh): v6's structure (a 128x256 tile, TMA into a
// 4-stage ring of 48 KiB, one producer warp group, two consumer warp groups issuing
// wgmma.m64n256k16) with your consumer loop. In: __half or __nv_bfloat16; C: FP32. Same
// conventions and errors as tensor_gemm(6, ...) (NotSupported off compute capability 9.0 or
// without sm_90a code). It waits for its kernel and throws std::runtime_error if a barrier wait
// gave up after 2 seconds (the producer waiting for a stage nobody released, or a consumer for
// a stage that never filled); C is then wrong.
template <class In>
void gemm_exercise_wgmma(int M, int N, int K, float alpha, const In* A, const In* B, float beta,
                         float* C, const float* bias = nullptr, Activation act = Activation::none,
                         cudaStream_t stream = nullptr);

// What the two call after their argument checks: defined with the kernels, in whichever build
// compiles them (exercise build: exercise.cu, which includes exercise_kernels.cuh, and
// exercise_sm90.cu; lesson build: solutions.cuh and solutions_sm90.cu).
namespace exercise_detail {
int mma_smem_bytes(int stages);
template <class In, class Out>
void launch_mma(int stages, int M, int N, int K, float alpha, const In* A, const In* B, float beta,
                Out* C, const float* bias, Activation act, cudaStream_t stream);
template <class In>
void launch_wgmma(int M, int N, int K, float alpha, const In* A, const In* B, float beta, float* C,
                  const float* bias, Activation act, cudaStream_t stream);
}  // namespace exercise_detail

}  // namespace lesson10
