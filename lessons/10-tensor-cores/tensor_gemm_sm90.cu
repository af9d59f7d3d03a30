// Lesson 10, v5: Hopper's TMA + wgmma, compiled ONLY for sm_90a (this file is its own static
// library, built with -gencode=arch=compute_90a,code=sm_90a; see CMakeLists.txt). The API is in
// tensor_gemm.cuh; tensor_gemm(5, ...) checks the arguments and the GPU, then calls
// gemm_v5_wgmma here.
//
// The kernel (one 128x128 tile of C per block, 384 threads = 3 warp groups):
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
// comments. Not verified without a GPU before the lead's H200 run: see DEVICE_CHECK.md.
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
#endif  // LESSON10_SM90A

template <class In, class Out>
__global__ void __launch_bounds__(kThreads, 1)
    wgmma_kernel(const __grid_constant__ CUtensorMap map_a,
                 const __grid_constant__ CUtensorMap map_b, int M, int N, int K,
                 Out* __restrict__ C, Epilogue e) {
#ifdef LESSON10_SM90A
  extern __shared__ unsigned char smem_raw[];
  // 128-byte swizzled tiles need 1024-byte aligned stage bases.
  unsigned char* smem = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<std::uintptr_t>(smem_raw) + 1023) & ~static_cast<std::uintptr_t>(1023));
  std::uint64_t* full = reinterpret_cast<std::uint64_t*>(smem + kStages * kStageBytes);
  std::uint64_t* empty = full + kStages;
  const int wg = threadIdx.x / 128, tid_in_wg = threadIdx.x % 128;
  const int bm = blockIdx.y * BM, bn = blockIdx.x * BN;
  const int tiles = ceil_div(K, BK);
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&full[s], 1);   // the producer's arrive.expect_tx (+ the TMA bytes)
      mbar_init(&empty[s], 2);  // one arrive per consumer warp group
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
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
      asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
      for (int k = 0; k < BK / 16; ++k) {
        wgmma_128<In>(d, make_desc(a_base + k * 32, 16, 1024),
                      make_desc(b_base + k * 16 * 128, kBBoxBytes, 1024), 1);
      }
      asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
      asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
      // The compiler sees d written by the wgmma asm, not by the wait: pin every accumulator
      // register behind the wait so no read of d (the epilogue) is scheduled before it.
#pragma unroll
      for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(d[i])::"memory");
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

#define LESSON10_INSTANTIATE(In, Out)                                                           \
  template void gemm_v5_wgmma<In, Out>(int, int, int, float, const In*, const In*, float, Out*, \
                                       const float*, Activation, cudaStream_t);
LESSON10_INSTANTIATE(__half, float)
LESSON10_INSTANTIATE(__half, __half)
LESSON10_INSTANTIATE(__nv_bfloat16, float)
LESSON10_INSTANTIATE(__nv_bfloat16, __nv_bfloat16)
#undef LESSON10_INSTANTIATE

}  // namespace lesson10
