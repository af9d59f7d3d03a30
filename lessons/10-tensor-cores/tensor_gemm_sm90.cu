// Lesson 10, v5 and v6: Hopper's TMA + wgmma, compiled ONLY for sm_90a (this file is its own
// static library, built with -gencode=arch=compute_90a,code=sm_90a; see CMakeLists.txt). The API
// is in tensor_gemm.cuh; tensor_gemm(5, ...) and tensor_gemm(6, ...) check the arguments and the
// GPU, then call gemm_v5_wgmma / gemm_v6_wgmma_128x256 here. v6 is v5 with the known Hopper
// steps, listed where it starts below; both share the barrier, TMA, descriptor and tensor-map
// helpers.
//
// v5's kernel (one 128x128 tile of C per block, 384 threads = 3 warp groups):
//   warp group 0, the producer: one thread issues TMA loads (cp.async.bulk.tensor.2d) of A's
//     128x64 tile and B's 64x128 tile (two 64x64 boxes) into a 4-stage ring; each stage's
//     "full" mbarrier completes when its 32 KiB have landed (expect_tx bytes). Before reusing a
//     stage it waits on the stage's "empty" mbarrier.
//   warp groups 1 and 2, the consumers: each owns 64 rows of the tile; per stage it waits on
//     "full", issues 4 wgmma.m64n128k16 (K = 64) reading A and B straight from shared memory
//     through matrix descriptors, waits for them, and arrives on "empty".
// Shared memory layouts are TMA's 128-byte swizzle (16-byte chunk c of row r stored at c ^ (r % 8),
// the swizzle_chunk of the header for 8 chunks per row), which wgmma reads natively:
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
#include "tensor_gemm.cuh"

namespace lesson10 {
using namespace detail;

namespace {
constexpr int BM = 128, BN = 128, BK = 64, kStages = 4, kThreads = 384;
constexpr int kATileBytes = BM * BK * 2;                   // 16 KiB
constexpr int kBBoxBytes = BK * 64 * 2;                    // 8 KiB: 64 k rows x 64 columns
constexpr int kStageBytes = kATileBytes + 2 * kBBoxBytes;  // 32 KiB
constexpr int kSmemBytes = kStages * kStageBytes + 1024 /* alignment */ + 256 /* barriers */;

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define LESSON10_SM90A 1
#endif

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

#ifdef LESSON10_SM90A
__device__ __forceinline__ void mbar_init(std::uint64_t* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(std::uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)),
               "r"(bytes));
}
__device__ __forceinline__ void mbar_arrive(std::uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)));
}
__device__ __forceinline__ void mbar_wait(std::uint64_t* bar, int parity) {
  asm volatile(
      "{\n.reg .pred done;\nLAB_WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra LAB_WAIT;\n}\n" ::"r"(smem_addr(bar)),
      "r"(parity));
}
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, int c0, int c1,
                                            std::uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(c0), "r"(c1), "r"(smem_addr(bar))
      : "memory");
}

// The dynamic shared memory rounded up to 1024 bytes: the 128-byte swizzle repeats every 8 rows
// of 128 bytes, and TMA and wgmma both compute it from address bits, so each stage base (and each
// tile in it) must sit on a 1024-byte boundary.
__device__ __forceinline__ unsigned char* align_1024(unsigned char* p) {
  return reinterpret_cast<unsigned char*>((reinterpret_cast<std::uintptr_t>(p) + 1023) &
                                          ~static_cast<std::uintptr_t>(1023));
}
// A ring of `stages` (full, empty) barrier pairs: "full" completes on the producer's
// arrive.expect_tx plus the TMA bytes, "empty" on one arrive per consumer warp group. Thread 0
// initialises them; the fence makes the initialisation visible to the async proxy (TMA) before
// the __syncthreads that follows.
__device__ __forceinline__ void init_ring(std::uint64_t* full, std::uint64_t* empty, int stages,
                                          unsigned consumers) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], consumers);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
}

// The wgmma shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format"): start address,
// leading and stride byte offsets, all >> 4, in bits 0-13, 16-29, 32-45; bits 62-63 = 1: 128B
// swizzle.
__device__ __forceinline__ std::uint64_t make_desc(unsigned smem_byte_addr, unsigned lbo,
                                                   unsigned sbo) {
  std::uint64_t d = 0;
  d |= static_cast<std::uint64_t>((smem_byte_addr & 0x3FFFF) >> 4);
  d |= static_cast<std::uint64_t>((lbo & 0x3FFFF) >> 4) << 16;
  d |= static_cast<std::uint64_t>((sbo & 0x3FFFF) >> 4) << 32;
  d |= static_cast<std::uint64_t>(1) << 62;
  return d;
}

// wgmma.mma_async m64n128k16, D (64 FP32 registers per thread) += A (descriptor) * B (descriptor,
// transposed: N-major); scale_d == 0 would ignore D. T is the PTX type, "f16" or "bf16".
#define LESSON10_WGMMA_128(T)                                                                      \
  asm volatile(                                                                                    \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                                 \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." T "." T                                       \
      " "                                                                                          \
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "     \
      "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, " \
      "%37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, " \
      "%55, %56, %57, %58, %59, %60, %61, %62, %63}, "                                             \
      "%64, %65, p, 1, 1, 0, 1;\n}\n"                                                              \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),        \
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),    \
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), \
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), \
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), \
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), \
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), \
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), \
        "+f"(d[63])                                                                                \
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));

template <class In>
__device__ __forceinline__ void wgmma_128(float (&d)[64], std::uint64_t desc_a,
                                          std::uint64_t desc_b, int scale_d) {
  if constexpr (std::is_same<In, __half>::value) {
    LESSON10_WGMMA_128("f16");
  } else {
    LESSON10_WGMMA_128("bf16");
  }
}

// wgmma.mma_async m64n256k16 for v6: D (128 FP32 registers per thread) += A * B, both from shared
// memory, B transposed (N-major) as in v5. The operand list is built 8 registers at a time.
#define LESSON10_D8(i)                                                                        \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
      "+f"(d[i + 6]), "+f"(d[i + 7])
#define LESSON10_WGMMA_256(T)                                                                  \
  asm volatile(                                                                                \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"                                            \
      "wgmma.mma_async.sync.aligned.m64n256k16.f32." T "." T                                   \
      " "                                                                                      \
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, " \
      "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, "  \
      "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, "  \
      "%53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, "  \
      "%70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, "  \
      "%87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, "    \
      "%103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, "   \
      "%117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "                    \
      "%128, %129, p, 1, 1, 0, 1;\n}\n"                                                        \
      : LESSON10_D8(0), LESSON10_D8(8), LESSON10_D8(16), LESSON10_D8(24), LESSON10_D8(32),     \
        LESSON10_D8(40), LESSON10_D8(48), LESSON10_D8(56), LESSON10_D8(64), LESSON10_D8(72),   \
        LESSON10_D8(80), LESSON10_D8(88), LESSON10_D8(96), LESSON10_D8(104), LESSON10_D8(112), \
        LESSON10_D8(120)                                                                       \
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));

template <class In>
__device__ __forceinline__ void wgmma_256(float (&d)[128], std::uint64_t desc_a,
                                          std::uint64_t desc_b, int scale_d) {
  if constexpr (std::is_same<In, __half>::value) {
    LESSON10_WGMMA_256("f16");
  } else {
    LESSON10_WGMMA_256("bf16");
  }
}

// Keeps the compiler from moving reads or writes of the accumulators across this point (the
// wgmma asm tells it d is written at issue; the hardware writes it until the wait): CUTLASS's
// warpgroup_fence_operand.
template <int N>
__device__ __forceinline__ void pin_registers(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// One stage (K = 64) as four k16 wgmma committed as one group, A and B from shared memory:
//   A K-major, 128-byte rows: SBO 1024 bytes per 8 rows (LBO unused), +32 bytes per k16 slice;
//   B N-major through the transpose flag: LBO = kBBoxBytes from one 64-column box to the next
//   (an m64n128 reads two boxes, an m64n256 four), SBO 1024 bytes per 8 k rows, +2048 bytes
//   (16 rows of 128 bytes) per k16 slice.
// d: 64 accumulators (m64n128k16, v5) or 128 (m64n256k16, v6).
template <class In, int N>
__device__ __forceinline__ void wgmma_stage(float (&d)[N], unsigned a_base, unsigned b_base) {
  static_assert(N == 64 || N == 128, "m64n128k16 or m64n256k16");
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
  for (int k = 0; k < BK / 16; ++k) {
    const std::uint64_t desc_a = make_desc(a_base + k * 32, 16, 1024);
    const std::uint64_t desc_b = make_desc(b_base + k * 16 * 128, kBBoxBytes, 1024);
    if constexpr (N == 64)
      wgmma_128<In>(d, desc_a, desc_b, 1);
    else
      wgmma_256<In>(d, desc_a, desc_b, 1);
  }
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
#endif  // LESSON10_SM90A

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
    for (int t = 0; t < tiles; ++t) {
      const int s = pipeline_stage(t, kStages);
      mbar_wait(&full[s], pipeline_phase(t, kStages));
      const unsigned a_base = smem_addr(smem + s * kStageBytes) + rows * 128;
      const unsigned b_base = smem_addr(smem + s * kStageBytes + kATileBytes);
      wgmma_stage<In>(d, a_base, b_base);
      asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
      // The compiler sees d written by the wgmma asm, not by the wait: pin every accumulator
      // register behind the wait so no read of d (the epilogue) is scheduled before it.
      pin_registers(d);
      if (tid_in_wg == 0) mbar_arrive(&empty[s]);
    }
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

// One warp's 16 rows x 256 columns of accumulators to C through the epilogue, rows from m0 and
// columns from n0. Accumulator layout of m64nNk16 (PTX ISA, "Register fragment for D"): warp w of
// the group owns rows 16w..16w+15 and, per 8 columns j, its registers 4j..4j+3 are
// mma_c_element's: column pairs (4j, 4j+1) in row lane/4 and (4j+2, 4j+3) eight rows below.
// kPairs: one store per pair (store_two; C aligned to two elements). N is a multiple of 8 and n
// even, so n < N implies n + 1 < N.
template <bool kPairs, class Out>
__device__ __forceinline__ void write_rows(const Epilogue& e, Out* C, int M, int N, int m0, int n0,
                                           int lane, const float (&d)[128]) {
#pragma unroll
  for (int j = 0; j < 32; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const RowCol rc = mma_c_element(lane, 2 * h);
      const int m = m0 + rc.row, n = n0 + j * 8 + rc.col;
      if (m >= M || n >= N) continue;
      const float v0 = d[j * 4 + 2 * h], v1 = d[j * 4 + 2 * h + 1];
      if (kPairs) {
        store_two(e, C, N, m, n, v0, v1);
      } else {
        store_one(e, C, N, m, n, v0);
        if (n + 1 < N) store_one(e, C, N, m, n + 1, v1);
      }
    }
}

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
    const float4 v = *reinterpret_cast<const float4*>(staged + r * kStagedLd + c);
    if (store_quads) {
      store_four(e, C, N, m, n, v);
    } else {
      store_one(e, C, N, m, n, v.x);
      store_one(e, C, N, m, n + 1, v.y);
      store_one(e, C, N, m, n + 2, v.z);
      store_one(e, C, N, m, n + 3, v.w);
    }
  }
}

// kStaged: v6, one tile per block, written out through shared memory (above); otherwise v7's
// loop over tiles with the accumulators stored straight from registers (the ring is refilled
// for the next tile meanwhile, so it cannot hold a staged tile). store_pairs: C aligned to two
// elements (unstaged) or to four (staged).
template <class In, class Out, bool kStaged>
__global__ void __launch_bounds__(v6cfg::kThreads, 1)
    wgmma_128x256_kernel(const __grid_constant__ CUtensorMap map_a,
                         const __grid_constant__ CUtensorMap map_b, int M, int N, int K,
                         Out* __restrict__ C, Epilogue e, int store_pairs) {
#ifdef LESSON10_SM90A
  using v6cfg::BK, v6cfg::BM, v6cfg::BN, v6cfg::kATileBytes, v6cfg::kBBoxes, v6cfg::kGroupM,
      v6cfg::kStageBytes, v6cfg::kStages;
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
    if (tid_in_wg == 0) {
      int it = 0;
      for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const TileCoord tc = tile_coord(tile, tiles_m, tiles_n, kGroupM);
        const int bm = tc.m * BM, bn = tc.n * BN;
        for (int kt = 0; kt < k_tiles; ++kt, ++it) {
          const int s = pipeline_stage(it, kStages);
          // The stage's previous use (it - kStages) must be released by both consumers.
          if (it >= kStages) mbar_wait(&empty[s], pipeline_phase(it - kStages, kStages));
          unsigned char* st = smem + s * kStageBytes;
          mbar_expect_tx(&full[s], kStageBytes);  // whole boxes, zero-filled past the edges
          tma_load_2d(st, &map_a, kt * BK, bm, &full[s]);
#pragma unroll
          for (int b = 0; b < kBBoxes; ++b)
            tma_load_2d(st + kATileBytes + b * kBBoxBytes, &map_b, bn + 64 * b, kt * BK, &full[s]);
        }
      }
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    const int rows = (wg - 1) * 64;  // this consumer's 64 rows of the tile
    const int warp = tid_in_wg / 32, lane = tid_in_wg % 32;
    int it = 0;
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
      const TileCoord tc = tile_coord(tile, tiles_m, tiles_n, kGroupM);
      const int bm = tc.m * BM, bn = tc.n * BN;
      float d[128];
#pragma unroll
      for (int i = 0; i < 128; ++i) d[i] = 0.0f;
      pin_registers(d);
      for (int kt = 0; kt < k_tiles; ++kt, ++it) {
        const int s = pipeline_stage(it, kStages);
        mbar_wait(&full[s], pipeline_phase(it, kStages));
        const unsigned a_base = smem_addr(smem + s * kStageBytes) + rows * 128;
        const unsigned b_base = smem_addr(smem + s * kStageBytes + kATileBytes);
        pin_registers(d);
        wgmma_stage<In>(d, a_base, b_base);  // the same descriptors: 256 columns = 4 boxes
        // At most this stage's group still runs: the previous stage's group is done reading
        // shared memory, so that stage goes back to the producer.
        asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
        pin_registers(d);
        if (kt > 0 && tid_in_wg == 0) mbar_arrive(&empty[pipeline_stage(it - 1, kStages)]);
      }
      asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
      pin_registers(d);
      if (k_tiles > 0 && tid_in_wg == 0) mbar_arrive(&empty[pipeline_stage(it - 1, kStages)]);
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

// cuTensorMapEncodeTiled through the runtime's driver entry point (no link against libcuda,
// like common/driver_api.hpp).
using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                 const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                 const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                 CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
EncodeTiled encode_tiled() {
  static EncodeTiled fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000,
                                                cudaEnableDefault, &q));
    if (q != cudaDriverEntryPointSuccess || p == nullptr)
      throw NotSupported("gemm_v5_wgmma: the driver has no cuTensorMapEncodeTiled");
    return reinterpret_cast<EncodeTiled>(p);
  }();
  return fn;
}

// A rows x cols row-major matrix of 16-bit elements, read in boxes of box_rows x 64 columns
// (64 x 2 bytes = 128 bytes: the 128B swizzle's limit on the inner box size).
template <class In>
CUtensorMap make_map(const In* base, int rows, int cols, int box_rows) {
  CUtensorMap map{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(cols) * 2};
  const cuuint32_t box[2] = {64, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t elem[2] = {1, 1};
  const CUtensorMapDataType t = std::is_same<In, __half>::value ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                                : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  const CUresult r =
      encode_tiled()(&map, t, 2, const_cast<In*>(base), dims, strides, box, elem,
                     CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                     CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw std::invalid_argument("gemm_v5_wgmma: cuTensorMapEncodeTiled refused a " +
                                std::to_string(rows) + " x " + std::to_string(cols) +
                                " matrix (error " + std::to_string(static_cast<int>(r)) + ")");
  return map;
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
                                                 Epilogue{alpha, beta, bias, act}, pairs);
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
  if (blocks <= 0) {
    // One block per SM: the 197 KiB of shared memory allow no second one.
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&blocks, cudaDevAttrMultiProcessorCount, device));
  }
  launch_128x256(blocks, M, N, K, alpha, A, B, beta, C, bias, act, stream);
}

#define LESSON10_INSTANTIATE(In, Out)                                                             \
  template void gemm_v5_wgmma<In, Out>(int, int, int, float, const In*, const In*, float, Out*,   \
                                       const float*, Activation, cudaStream_t);                   \
  template void gemm_v6_wgmma_128x256<In, Out>(int, int, int, float, const In*, const In*, float, \
                                               Out*, const float*, Activation, cudaStream_t);     \
  template void gemm_v7_persistent<In, Out>(int, int, int, int, float, const In*, const In*,      \
                                            float, Out*, const float*, Activation, cudaStream_t);
LESSON10_INSTANTIATE(__half, float)
LESSON10_INSTANTIATE(__half, __half)
LESSON10_INSTANTIATE(__nv_bfloat16, float)
LESSON10_INSTANTIATE(__nv_bfloat16, __nv_bfloat16)
#undef LESSON10_INSTANTIATE

}  // namespace lesson10
