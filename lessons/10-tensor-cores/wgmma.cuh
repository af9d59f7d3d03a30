// Lesson 10: the Hopper building blocks (sm_90a) that v5..v7, v9 (tensor_gemm_sm90.cu) and exercise
// 3's kernel (exercise_kernels_sm90.cuh) share: mbarriers, TMA loads and tensor maps, the wgmma
// matrix descriptor and instructions, and the register write-out of a wgmma accumulator tile.
//
// Sources: PTX ISA 8.x, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions"
// (wgmma, the matrix descriptor, the canonical layouts), "mbarrier" and "cp.async.bulk.tensor";
// CUDA Driver API cuTensorMapEncodeTiled; the canonical-layout table in CUTLASS's
// cute/arch/mma_sm90_desc.hpp comments.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "common/cuda_check.hpp"
#include "epilogue.cuh"
#include "tensor_gemm.cuh"

// The device code below exists only in the sm_90a pass (wgmma and setmaxnreg are
// architecture-specific); every file that includes this header is compiled for sm_90a only.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define LESSON10_SM90A 1
#endif

namespace lesson10 {

// ---------------------------------------------------------------- wgmma groups (exercise 3 too)
// Declared in every compilation pass, so that exercise 3's template compiles everywhere; they
// do something only in the sm_90a pass, the one whose code runs.

// wgmma.fence: orders this warp group's earlier register and shared-memory accesses before the
// wgmma that follow (needed before the first wgmma, and whenever other instructions touched the
// accumulators or the operands in between).
__device__ __forceinline__ void wgmma_fence() {
#ifdef LESSON10_SM90A
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
// wgmma.commit_group: the wgmma issued since the last commit become one group.
__device__ __forceinline__ void wgmma_commit() {
#ifdef LESSON10_SM90A
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
// wgmma.wait_group kPending: returns when at most kPending groups are still running; the
// accumulators of the finished ones are written, and their shared memory read.
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
#ifdef LESSON10_SM90A
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
#endif
}
// Keeps the compiler from moving reads or writes of the accumulators across this point (the
// wgmma asm tells it d is written at issue; the hardware writes it until the wait): CUTLASS's
// warpgroup_fence_operand.
template <int N>
__device__ __forceinline__ void pin_registers(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

namespace detail {

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

// mbarrier.try_wait once: whether `parity`'s phase of `bar` has completed (the instruction may
// suspend the thread for a while first).
__device__ __forceinline__ bool mbar_try_wait(std::uint64_t* bar, int parity) {
  unsigned done = 0;
  asm volatile(
      "{\n.reg .pred p;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(smem_addr(bar)), "r"(parity)
      : "memory");
  return done != 0;
}

// One K tile of 64 as four k16 wgmma (no fence, no commit), A and B from shared memory:
//   A K-major, 128-byte rows: SBO 1024 bytes per 8 rows (LBO unused), +32 bytes per k16 slice;
//   B N-major through the transpose flag: LBO = 8192 bytes (one 64 x 64 box) from one 64-column
//   box to the next (an m64n128 reads two boxes, an m64n256 four), SBO 1024 bytes per 8 k rows,
//   +2048 bytes (16 rows of 128 bytes) per k16 slice.
// d: 64 accumulators (m64n128k16, v5) or 128 (m64n256k16, v6, v7, exercise 3).
template <class In, int N>
__device__ __forceinline__ void wgmma_k64(float (&d)[N], unsigned a_base, unsigned b_base) {
  static_assert(N == 64 || N == 128, "m64n128k16 or m64n256k16");
  constexpr unsigned kBoxBytes = 64 * 64 * 2;
  // The k16 slices' descriptors by addition: the start address is the descriptor's low field, in
  // 16-byte units, and a shared-memory address below 256 KiB plus a slice's offset stays inside
  // it (no carry into the next field), so make_desc(base + off) == make_desc(base) + off / 16.
  // One make_desc per operand and K tile instead of four: its masks and shifts were most of the
  // consumer loop's instructions.
  const std::uint64_t desc_a = make_desc(a_base, 16, 1024);
  const std::uint64_t desc_b = make_desc(b_base, kBoxBytes, 1024);
#pragma unroll
  for (int k = 0; k < 64 / 16; ++k) {
    const std::uint64_t da = desc_a + k * (32 / 16), db = desc_b + k * (16 * 128 / 16);
    if constexpr (N == 64)
      wgmma_128<In>(d, da, db, 1);
    else
      wgmma_256<In>(d, da, db, 1);
  }
}
#endif  // LESSON10_SM90A

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

// cuTensorMapEncodeTiled through the runtime's driver entry point (no link against libcuda,
// like common/driver_api.hpp).
using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                 const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                 const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                 CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
inline EncodeTiled encode_tiled() {
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

}  // namespace detail
}  // namespace lesson10
