// Lesson 10: the kernel that runs exercises 1 and 2, and its launch (gemm_exercise_mma in
// tensor_gemm.cuh checks the arguments, then calls exercise_detail::launch_mma here).
//
// Not compiled on its own: it is included at the end of whichever file holds the functions it
// calls, ex_swizzled_offset, ex_ldmatrix_a_offset, ex_ldmatrix_b_offset and ex_cp_async_ring:
// exercise.cu (yours: the exercise build) or solutions.cuh (the lesson build). Nothing to edit.
//
// The kernel is v3/v4 (tensor_gemm.cu's mma_kernel) with a 128x128 block tile and K tiles of 64:
// 8 warps of 64x32, each k16 step 4 ldmatrix.x4 of A and 2 ldmatrix.x4.trans of B feeding 16
// mma.sync.m16n8k16. Every shared-memory address, the cp.async writes and the ldmatrix reads,
// comes from your exercise 1; with stages >= 2 the K loop is your exercise 2.
//
// So that a wrong answer gives wrong numbers rather than a crashed test binary, the kernel checks
// what your functions return before it uses it: an address outside the stage or not 16-byte
// aligned, or a stage or tile index outside the ring, is not used (the access goes to offset 0
// or is skipped) and is reported; launch_mma then throws std::runtime_error naming the first
// one (function, arguments, value).
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

#include "common/cuda_check.hpp"
#include "epilogue.cuh"
#include "mma_sync.cuh"
#include "tensor_gemm.cuh"

namespace lesson10 {
namespace exercise_detail {
namespace {

using namespace detail;

constexpr int kBM = 128, kBN = 128, kBK = 64, kThreads = 256;
constexpr int kWM = 64, kWN = 32;                // 2 x 4 warps of 64 x 32
constexpr int kMI = kWM / 16, kNJ = kWN / 8;     // 4 m16 and 4 n8 fragments per warp
constexpr int kAStage = kBM * kBK;               // halves: A's 128 rows of 64
constexpr int kBStage = kBK * kBN;               // B's 64 rows of 128
constexpr int kALoads = kAStage / 8 / kThreads;  // 16-byte chunks per thread: 4
constexpr int kBLoads = kBStage / 8 / kThreads;  // 4
constexpr int smem_bytes(int stages) {
  return stages * (kAStage + kBStage) * 2;  // 32 KiB per stage
}

// The first wrong value the kernel saw (what == kNone: none).
enum What : int {
  kNone = 0,
  kSwizzledA,  // ex_swizzled_offset for A's tile (row, col, row_halves)
  kSwizzledB,  // ... for B's tile
  kLdmatrixA,  // ex_ldmatrix_a_offset (lane, row0, k0, row_halves)
  kLdmatrixB,  // ex_ldmatrix_b_offset (lane, k0, n0, row_halves)
  kRingLoad,   // load_tile(tile, stage) from your ring
  kRingMultiply
};
struct Fault {
  int what;
  int arg[4];
  int value;
};
__device__ Fault g_fault;

__device__ void report(What what, int a0, int a1, int a2, int a3, int value) {
  if (atomicCAS(&g_fault.what, kNone, what) == kNone) {
    g_fault.arg[0] = a0, g_fault.arg[1] = a1, g_fault.arg[2] = a2, g_fault.arg[3] = a3;
    g_fault.value = value;
  }
}

// An offset (halves) that 8 halves starting there fit in a stage of `size` halves and that is
// 16-byte aligned, or 0 after reporting it.
__device__ __forceinline__ int checked(int off, int size, What what, int a0, int a1, int a2,
                                       int a3) {
  if (off >= 0 && off <= size - 8 && off % 8 == 0) return off;
  report(what, a0, a1, a2, a3, off);
  return 0;
}

template <class In, class Out, int kStages>
__global__ void __launch_bounds__(kThreads)
    exercise_mma_kernel(int M, int N, int K, const In* __restrict__ A, const In* __restrict__ B,
                        Out* __restrict__ C, Epilogue e) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  extern __shared__ __align__(128) unsigned char smem[];
  In* As = reinterpret_cast<In*>(smem);  // kStages stages of A, then kStages of B
  In* Bs = As + kStages * kAStage;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int bm = blockIdx.y * kBM, bn = blockIdx.x * kBN;
  const int wm = (warp / 4) * kWM, wn = (warp % 4) * kWN;  // the warp tile's origin
  const int tiles = ceil_div(K, kBK);

  // K tile `tile` into stage s: A's 128 x 64 and B's 64 x 128 in 16-byte chunks at your swizzled
  // offsets; chunks outside A or B are zero-filled (source size 0: nothing is read).
  const auto load_tile = [&](int tile, int s) {
    if (tile < 0 || tile >= tiles || s < 0 || s >= kStages) {
      report(kRingLoad, tile, s, tiles, kStages, 0);
      return;
    }
    const int k0 = tile * kBK;
    In* as = As + s * kAStage;
    In* bs = Bs + s * kBStage;
#pragma unroll
    for (int p = 0; p < kALoads; ++p) {
      const int idx = tid + p * kThreads;
      const int r = idx / (kBK / 8), c = (idx % (kBK / 8)) * 8, gm = bm + r, gk = k0 + c;
      const bool ok = gm < M && gk < K;
      const int off = checked(ex_swizzled_offset(r, c, kBK), kAStage, kSwizzledA, r, c, kBK, 0);
      cp_async_16(as + off, ok ? A + static_cast<std::size_t>(gm) * K + gk : A, ok ? 16 : 0);
    }
#pragma unroll
    for (int p = 0; p < kBLoads; ++p) {
      const int idx = tid + p * kThreads;
      const int r = idx / (kBN / 8), c = (idx % (kBN / 8)) * 8, gk = k0 + r, gn = bn + c;
      const bool ok = gk < K && gn < N;
      const int off = checked(ex_swizzled_offset(r, c, kBN), kBStage, kSwizzledB, r, c, kBN, 0);
      cp_async_16(bs + off, ok ? B + static_cast<std::size_t>(gk) * N + gn : B, ok ? 16 : 0);
    }
  };

  float acc[kMI][kNJ][4];  // [m fragment][n fragment][element], layout mma_c_element
  zero_accumulators(acc);

  // This warp's 64 x 32 of C from the tile in stage s: per k16 step, ldmatrix at your addresses.
  const auto multiply = [&](int s) {
    if (s < 0 || s >= kStages) {
      report(kRingMultiply, s, kStages, 0, 0, 0);
      return;
    }
    const In* as = As + s * kAStage;
    const In* bs = Bs + s * kBStage;
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      unsigned a[kMI][4], b[kNJ][2];
#pragma unroll
      for (int i = 0; i < kMI; ++i) {
        const int row0 = wm + i * 16;
        ldmatrix_x4(a[i], as + checked(ex_ldmatrix_a_offset(lane, row0, kk, kBK), kAStage,
                                       kLdmatrixA, lane, row0, kk, kBK));
      }
#pragma unroll
      for (int j = 0; j < kNJ / 2; ++j) {  // one ldmatrix.x4.trans: n fragments 2j and 2j + 1
        const int n0 = wn + j * 16;
        unsigned r[4];
        ldmatrix_x4_trans(r, bs + checked(ex_ldmatrix_b_offset(lane, kk, n0, kBN), kBStage,
                                          kLdmatrixB, lane, kk, n0, kBN));
        b[2 * j][0] = r[0], b[2 * j][1] = r[1], b[2 * j + 1][0] = r[2], b[2 * j + 1][1] = r[3];
      }
#pragma unroll
      for (int i = 0; i < kMI; ++i)
#pragma unroll
        for (int j = 0; j < kNJ; ++j) mma_16816<In>(acc[i][j], a[i], b[j][0], b[j][1]);
    }
  };

  if constexpr (kStages == 1) {  // exercise 1: v3's loop, one stage
    for (int t = 0; t < tiles; ++t) {
      load_tile(t, 0);
      cp_async_commit();
      cp_async_wait<0>();
      __syncthreads();
      multiply(0);
      __syncthreads();  // every warp is done with the stage before the next tile overwrites it
    }
  } else {  // exercise 2
    ex_cp_async_ring<kStages>(tiles, load_tile, multiply);
  }

#pragma unroll
  for (int i = 0; i < kMI; ++i)
#pragma unroll
    for (int j = 0; j < kNJ; ++j)
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const RowCol rc = mma_c_element(lane, q);
        const int m = bm + wm + i * 16 + rc.row, n = bn + wn + j * 8 + rc.col;
        if (m < M && n < N) store_one(e, C, N, m, n, acc[i][j][q]);
      }
#elif defined(__CUDA_ARCH__)
  __trap();  // compiled for a GPU without mma.m16n8k16 / cp.async; gemm_exercise_mma refuses
#endif
}

std::string describe(const Fault& f) {
  const auto args = [&](const char* name, int n) {
    std::string s = std::string(name) + "(";
    for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(f.arg[i]);
    return s + ")";
  };
  const std::string v = std::to_string(f.value);
  switch (f.what) {
    case kSwizzledA:
      return "exercise 1: " + args("ex_swizzled_offset", 3) + " = " + v +
             ": outside A's stage of 128 rows x 64 halves, or not a multiple of 8 halves";
    case kSwizzledB:
      return "exercise 1: " + args("ex_swizzled_offset", 3) + " = " + v +
             ": outside B's stage of 64 rows x 128 halves, or not a multiple of 8 halves";
    case kLdmatrixA:
      return "exercise 1: " + args("ex_ldmatrix_a_offset", 4) + " = " + v +
             ": outside A's stage of 128 rows x 64 halves, or not a multiple of 8 halves";
    case kLdmatrixB:
      return "exercise 1: " + args("ex_ldmatrix_b_offset", 4) + " = " + v +
             ": outside B's stage of 64 rows x 128 halves, or not a multiple of 8 halves";
    case kRingLoad:
      return "exercise 2: your ring called load_tile(" + std::to_string(f.arg[0]) + ", " +
             std::to_string(f.arg[1]) + ") with " + std::to_string(f.arg[2]) + " tiles and " +
             std::to_string(f.arg[3]) + " stages: a tile or stage out of range";
    case kRingMultiply:
      return "exercise 2: your ring called multiply(" + std::to_string(f.arg[0]) + ") with " +
             std::to_string(f.arg[1]) + " stages: a stage out of range";
  }
  return "exercise kernel: unknown fault " + std::to_string(f.what);
}

template <class In, class Out, int kStages>
void launch_stages(int M, int N, int K, const In* A, const In* B, Out* C, const Epilogue& e,
                   cudaStream_t stream) {
  auto kernel = exercise_mma_kernel<In, Out, kStages>;
  constexpr int bytes = smem_bytes(kStages);
  if (bytes > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  const dim3 grid(ceil_div(N, kBN), ceil_div(M, kBM));
  kernel<<<grid, kThreads, bytes, stream>>>(M, N, K, A, B, C, e);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

int mma_smem_bytes(int stages) {
  return smem_bytes(stages);
}

template <class In, class Out>
void launch_mma(int stages, int M, int N, int K, float alpha, const In* A, const In* B, float beta,
                Out* C, const float* bias, Activation act, cudaStream_t stream) {
  if (ceil_div(M, kBM) > 65535)
    throw std::invalid_argument("gemm_exercise_mma: M = " + std::to_string(M) +
                                " needs more than 65535 block rows of 128");
  const Fault none{};
  CUDA_CHECK(
      cudaMemcpyToSymbolAsync(g_fault, &none, sizeof none, 0, cudaMemcpyHostToDevice, stream));
  const Epilogue e{alpha, beta, bias, act};
  switch (stages) {
    case 1:
      launch_stages<In, Out, 1>(M, N, K, A, B, C, e, stream);
      break;
    case 2:
      launch_stages<In, Out, 2>(M, N, K, A, B, C, e, stream);
      break;
    case 3:
      launch_stages<In, Out, 3>(M, N, K, A, B, C, e, stream);
      break;
    case 4:
      launch_stages<In, Out, 4>(M, N, K, A, B, C, e, stream);
      break;
    default:
      throw std::invalid_argument("gemm_exercise_mma: stages must be 1..4, got " +
                                  std::to_string(stages));
  }
  Fault f{};
  CUDA_CHECK(cudaMemcpyFromSymbolAsync(&f, g_fault, sizeof f, 0, cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  if (f.what != kNone) throw std::runtime_error(describe(f));
}

#define LESSON10_INSTANTIATE(In, Out)                                                             \
  template void launch_mma<In, Out>(int, int, int, int, float, const In*, const In*, float, Out*, \
                                    const float*, Activation, cudaStream_t);
LESSON10_INSTANTIATE(__half, float)
LESSON10_INSTANTIATE(__half, __half)
LESSON10_INSTANTIATE(__nv_bfloat16, float)
LESSON10_INSTANTIATE(__nv_bfloat16, __nv_bfloat16)
#undef LESSON10_INSTANTIATE

}  // namespace exercise_detail
}  // namespace lesson10
