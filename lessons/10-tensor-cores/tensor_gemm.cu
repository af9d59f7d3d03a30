// Lesson 10: the tensor-core GEMM versions v1..v4 (and v8, tensor_gemm_v8.cuh, included below),
// the dispatcher, cuBLAS / cuBLASLt baselines, the peak and the CPU oracle. v5..v7 and v9..v11
// (Hopper, sm_90a) are in tensor_gemm_sm90.cu. The API and the conventions are documented in
// tensor_gemm.cuh.
#include "tensor_gemm.cuh"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <mma.h>

#include <climits>
#include <cmath>
#include <string>
#include <type_traits>

#include "common/cuda_check.hpp"
#include "epilogue.cuh"
#include "mma_sync.cuh"

namespace lesson10 {

const char* to_string(Activation act) {
  static const char* const names[] = {"none", "relu", "gelu"};
  const int i = static_cast<int>(act);
  return i >= 0 && i < 3 ? names[i] : "unknown";
}

const char* to_string(DType t) {
  static const char* const names[] = {"fp32", "fp16", "bf16"};
  const int i = static_cast<int>(t);
  return i >= 0 && i < 3 ? names[i] : "unknown";
}

using namespace detail;

namespace {

// The PTX wrappers (cp.async, ldmatrix, mma.sync) are in mma_sync.cuh.

// ---------------------------------------------------------------- v1: WMMA

namespace v1cfg {
constexpr int BM = 128, BN = 128, BK = 32, kThreads = 256;
constexpr int kLdA = BK + 8, kLdB = BN + 8;  // halves; padding keeps ldm % 8 == 0
constexpr int kSmemBytes = (BM * kLdA + BK * kLdB) * 2;
}  // namespace v1cfg

template <class In>
__host__ __device__ constexpr bool wmma_compiled() {
#if defined(__CUDA_ARCH__)
  return std::is_same<In, __half>::value ? __CUDA_ARCH__ >= 700 : __CUDA_ARCH__ >= 800;
#else
  return true;
#endif
}

template <class In, class Out>
__global__ void __launch_bounds__(v1cfg::kThreads)
    wmma_kernel(int M, int N, int K, const In* __restrict__ A, const In* __restrict__ B,
                Out* __restrict__ C, Epilogue e) {
  if constexpr (wmma_compiled<In>()) {
    using namespace nvcuda;
    using namespace v1cfg;
    __shared__ __align__(128) unsigned char smem[kSmemBytes];
    In* As = reinterpret_cast<In*>(smem);  // [BM][kLdA]
    In* Bs = As + BM * kLdA;               // [BK][kLdB]
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int bm = blockIdx.y * BM, bn = blockIdx.x * BN;
    const int wr = warp / 4, wc = warp % 4;  // warp tile: rows wr*64 .. +64, cols wc*32 .. +32
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[4][2];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
    const In zero = In(0.0f);
    for (int k0 = 0; k0 < K; k0 += BK) {
      // Plain guarded element loads: any M, N, K, any alignment (the simple, slow way).
      for (int idx = tid; idx < BM * BK; idx += kThreads) {
        const int r = idx / BK, c = idx % BK, gm = bm + r, gk = k0 + c;
        As[r * kLdA + c] = (gm < M && gk < K) ? A[static_cast<std::size_t>(gm) * K + gk] : zero;
      }
      for (int idx = tid; idx < BK * BN; idx += kThreads) {
        const int r = idx / BN, c = idx % BN, gk = k0 + r, gn = bn + c;
        Bs[r * kLdB + c] = (gk < K && gn < N) ? B[static_cast<std::size_t>(gk) * N + gn] : zero;
      }
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < BK; kk += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, In, wmma::row_major> a[4];
        wmma::fragment<wmma::matrix_b, 16, 16, 16, In, wmma::row_major> b[2];
#pragma unroll
        for (int i = 0; i < 4; ++i)
          wmma::load_matrix_sync(a[i], As + (wr * 64 + i * 16) * kLdA + kk, kLdA);
#pragma unroll
        for (int j = 0; j < 2; ++j)
          wmma::load_matrix_sync(b[j], Bs + kk * kLdB + wc * 32 + j * 16, kLdB);
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
      }
      __syncthreads();  // consumed before the next tile (or the staging below) overwrites it
    }
    // Write-out through a per-warp 16x16 FP32 staging area (the fragment layout is opaque).
    float* stage = reinterpret_cast<float*>(smem) + warp * 256;
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        wmma::store_matrix_sync(stage, acc[i][j], 16, wmma::mem_row_major);
        __syncwarp();
        for (int q = 0; q < 8; ++q) {
          const int el = lane + q * 32;
          const int m = bm + wr * 64 + i * 16 + el / 16, n = bn + wc * 32 + j * 16 + el % 16;
          if (m < M && n < N) store_one(e, C, N, m, n, stage[el]);
        }
        __syncwarp();
      }
  } else {
#if defined(__CUDA_ARCH__)
    __trap();  // compiled for an architecture without these tensor cores; the launcher refuses
#endif
  }
}

// ---------------------------------------------------------------- v2..v4: mma.sync + ldmatrix

// The block tile of v2..v4: BM x BN of C per block of 8 warps (2 down M, 4 across N), K tiles
// of 32, kStages shared-memory stages, rows padded by 16 bytes or XOR-swizzled.
template <int BM_, int BN_, int kStages_, bool kSwizzle_>
struct MmaTile {
  static constexpr int BM = BM_, BN = BN_, BK = 32, kThreads = 256, kStages = kStages_;
  static constexpr bool kSwizzle = kSwizzle_;
  static constexpr int WM = BM / 2, WN = BN / 4;   // the warp tile: 64 x 32 or 64 x 64
  static constexpr int MI = WM / 16, NJ = WN / 8;  // m16 and n8 fragments per warp
  static constexpr int kRowA = kSwizzle ? BK : BK + 8, kRowB = kSwizzle ? BN : BN + 8;
  static constexpr int kAStage = BM * kRowA, kBStage = BK * kRowB;  // halves per stage
  static constexpr int kSmemBytes = kStages * (kAStage + kBStage) * 2;
  static constexpr int kALoads = BM * BK / 8 / kThreads, kBLoads = BK * BN / 8 / kThreads;
  static_assert(WM % 16 == 0 && MI >= 1 && NJ % 2 == 0 && kALoads >= 1 && kBLoads >= 1,
                "unsupported tile");
  __device__ static int a_offset(int row, int col) {
    return kSwizzle ? swizzled_offset(row, col, BK) : padded_offset(row, col, BK);
  }
  __device__ static int b_offset(int row, int col) {
    return kSwizzle ? swizzled_offset(row, col, BN) : padded_offset(row, col, BN);
  }
};

// v4's K loop: a kStages-deep cp.async ring over `tiles` K tiles. load_tile(t, s) issues this
// thread's copies of K tile t into stage s (no commit); multiply(s) runs this warp's mma on the
// tile in stage s. Every tile is loaded once and multiplied once, in order; no tile is read
// before every thread's copies of it have landed, and no stage is refilled while a warp may
// still read it; nothing is in flight when it returns. It is exercise 2 (exercise.cu), so its
// body is in solutions.cuh, included at the end of this file.
template <int kStages, class Load, class Multiply>
__device__ __forceinline__ void cp_async_ring(int tiles, Load&& load_tile, Multiply&& multiply);

// kStages == 1: load, wait, multiply (v2, v3). kStages >= 2: cp_async_ring (v4).
template <class In, class Out, class T>
__global__ void __launch_bounds__(T::kThreads)
    mma_kernel(int M, int N, int K, const In* __restrict__ A, const In* __restrict__ B,
               Out* __restrict__ C, Epilogue e) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  constexpr int BM = T::BM, BN = T::BN, BK = T::BK, kThreads = T::kThreads;
  constexpr int kStages = T::kStages, MI = T::MI, NJ = T::NJ;
  extern __shared__ __align__(128) unsigned char smem[];
  In* As = reinterpret_cast<In*>(smem);
  In* Bs = As + kStages * T::kAStage;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int bm = blockIdx.y * BM, bn = blockIdx.x * BN;
  const int wm = (warp / 4) * T::WM, wn = (warp % 4) * T::WN;  // the warp tile's origin

  // One K tile into stage s: 16-byte chunks of A (BM rows x 4) and of B (32 rows x BN / 8);
  // chunks outside A or B are zero-filled (src size 0: nothing is read).
  const auto load_tile = [&](int tile, int s) {
    const int k0 = tile * BK;
    In* as = As + s * T::kAStage;
    In* bs = Bs + s * T::kBStage;
#pragma unroll
    for (int p = 0; p < T::kALoads; ++p) {
      const int idx = tid + p * kThreads;
      const int r = idx / (BK / 8), c = (idx % (BK / 8)) * 8, gm = bm + r, gk = k0 + c;
      const bool ok = gm < M && gk < K;
      cp_async_16(as + T::a_offset(r, c), ok ? A + static_cast<std::size_t>(gm) * K + gk : A,
                  ok ? 16 : 0);
    }
#pragma unroll
    for (int p = 0; p < T::kBLoads; ++p) {
      const int idx = tid + p * kThreads;
      const int r = idx / (BN / 8), c = (idx % (BN / 8)) * 8, gk = k0 + r, gn = bn + c;
      const bool ok = gk < K && gn < N;
      cp_async_16(bs + T::b_offset(r, c), ok ? B + static_cast<std::size_t>(gk) * N + gn : B,
                  ok ? 16 : 0);
    }
  };

  float acc[MI][NJ][4];  // [m fragment][n fragment][element], layout mma_c_element
  zero_accumulators(acc);

  const auto multiply = [&](int s) {
    const In* as = As + s * T::kAStage;
    const In* bs = Bs + s * T::kBStage;
    const RowCol la = ldmatrix_a_address(lane), lb = ldmatrix_b_trans_address(lane);
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
      unsigned a[MI][4], b[NJ][2];
#pragma unroll
      for (int i = 0; i < MI; ++i)
        ldmatrix_x4(a[i], as + T::a_offset(wm + i * 16 + la.row, kk + la.col));
#pragma unroll
      for (int j = 0; j < NJ / 2; ++j) {  // one ldmatrix.x4.trans: two n8 fragments
        unsigned r[4];
        ldmatrix_x4_trans(r, bs + T::b_offset(kk + lb.row, wn + j * 16 + lb.col));
        b[2 * j][0] = r[0], b[2 * j][1] = r[1], b[2 * j + 1][0] = r[2], b[2 * j + 1][1] = r[3];
      }
#pragma unroll
      for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NJ; ++j) mma_16816<In>(acc[i][j], a[i], b[j][0], b[j][1]);
    }
  };

  const int tiles = ceil_div(K, BK);
  if constexpr (kStages == 1) {
    for (int t = 0; t < tiles; ++t) {
      load_tile(t, 0);
      cp_async_commit();
      cp_async_wait<0>();
      __syncthreads();
      multiply(0);
      __syncthreads();  // everyone is done with the tile before the next load overwrites it
    }
  } else {
    cp_async_ring<kStages>(tiles, load_tile, multiply);
  }

#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NJ; ++j)
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const RowCol rc = mma_c_element(lane, q);
        const int m = bm + wm + i * 16 + rc.row, n = bn + wn + j * 8 + rc.col;
        if (m < M && n < N) store_one(e, C, N, m, n, acc[i][j][q]);
      }
#elif defined(__CUDA_ARCH__)
  __trap();  // compiled for a GPU without mma.m16n8k16 / cp.async; the launcher refuses
#endif
}

using TileV2 = MmaTile<128, 128, 1, false>;
using TileV3 = MmaTile<128, 128, 1, true>;
using TileV4 = MmaTile<128, 128, 4, true>;
using TileV4Wide = MmaTile<128, 256, 3, true>;

// ---------------------------------------------------------------- v4 tuned (128x256x64)

// Two adjacent outputs C[m][n], C[m][n + 1] (n even, N % 8 == 0: both inside C when n is),
// store_one's arithmetic for each; with `vector` (C aligned for it) read and written as one
// 8-byte (FP32) or 4-byte (FP16 / BF16) access, else one element at a time. Only the access
// differs between the two, so the rounding does not.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800  // used only by the kernel below
__device__ __forceinline__ float2 load_two(const float* p) {
  return *reinterpret_cast<const float2*>(p);
}
__device__ __forceinline__ float2 load_two(const __half* p) {
  return __half22float2(*reinterpret_cast<const __half2*>(p));
}
__device__ __forceinline__ float2 load_two(const __nv_bfloat16* p) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
}
__device__ __forceinline__ void store_two(float* p, float a, float b) {
  *reinterpret_cast<float2*>(p) = make_float2(a, b);
}
__device__ __forceinline__ void store_two(__half* p, float a, float b) {
  *reinterpret_cast<__half2*>(p) = __floats2half2_rn(a, b);
}
__device__ __forceinline__ void store_two(__nv_bfloat16* p, float a, float b) {
  *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(a, b);
}
template <class Out>
__device__ __forceinline__ void store_pair(const Epilogue& e, Out* C, int N, int m, int n,
                                           float acc0, float acc1, bool vector) {
  Out* p = C + static_cast<std::size_t>(m) * N + n;
  float v0 = e.alpha * acc0, v1 = e.alpha * acc1;
  if (e.beta != 0.0f) {
    const float2 c = vector ? load_two(p) : make_float2(to_float(p[0]), to_float(p[1]));
    v0 = fmaf(e.beta, c.x, v0);
    v1 = fmaf(e.beta, c.y, v1);
  }
  if (e.bias != nullptr) {
    v0 += e.bias[n];
    v1 += e.bias[n + 1];
  }
  v0 = activate(v0, e.act);
  v1 = activate(v1, e.act);
  if (vector) {
    store_two(p, v0, v1);
  } else {
    p[0] = from_float<Out>(v0);
    p[1] = from_float<Out>(v1);
  }
}
#endif

// The tuned v4 (tensor_gemm.cuh, namespace v4tuned, says what each choice buys). The ring is
// the header's pipeline_* ring with kStages stages; what changes is where its two events sit,
// so that ldmatrix for the next k step is always in flight while this step's mma issue:
//  - fragments are double-buffered: k step ks + 1's ldmatrix are issued before k step ks's 32
//    mma, and the last k step of tile t loads k step 0 of tile t + 1;
//  - so tile t + 1 must have landed, and tile t's last ldmatrix must be done, before the last
//    k step of tile t: the wait + barrier of iteration t + 1 moves to just after tile t's last
//    ldmatrix (k step KS - 2, before its mma). The stage written after that barrier (tile
//    t + kStages, into the stage of tile t) is then read by no one any more, as in the simple
//    ring, and the group committed in iteration t (before the barrier) keeps wait_group
//    kStages - 2 meaning "tile t + 1 has landed".
template <class In, class Out, int kStages>
__global__ void __launch_bounds__(v4tuned::kThreads, 1)
    mma_tuned_kernel(int M, int N, int K, const In* __restrict__ A, const In* __restrict__ B,
                     Out* __restrict__ C, Epilogue e) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using namespace v4tuned;
  static_assert(KS >= 3 && KS % 2 == 0, "the k-step schedule below needs an even KS >= 3");
  static_assert(kStages >= 2, "a ring needs two stages");
  constexpr unsigned kAStageBytes = kAStage * 2, kBStageBytes = kBStage * 2;
  extern __shared__ __align__(1024) unsigned char smem[];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const TileCoord tile = tile_coord(blockIdx.x, ceil_div(M, BM), ceil_div(N, BN), kGroupM);
  const int bm = tile.m * BM, bn = tile.n * BN;
  const RowCol wo = warp_origin(warp);
  const unsigned sA = smem_u32(smem), sB = sA + kStages * kAStageBytes;

  // cp.async: this thread's chunks of A (rows a.row + 32 p, one column) and of B (rows
  // b.row + 8 p, one column); which rows and columns exist is decided once, here. Chunks outside
  // A or B are zero-filled (src size 0, and the source is then A or B itself, never read).
  const RowCol a = a_chunk(tid, 0), b = b_chunk(tid, 0);
  const unsigned a_st = sA + 2 * a_store(tid), b_st = sB + 2 * b_store(tid);
  const In* a_src = A + static_cast<std::size_t>(bm + a.row) * K + a.col;
  const In* b_src = B + static_cast<std::size_t>(b.row) * N + bn + b.col;
  unsigned a_rows_ok = 0;
#pragma unroll
  for (int p = 0; p < kALoads; ++p)
    if (bm + a.row + p * kARowsPerPass < M) a_rows_ok |= 1u << p;
  const bool b_col_ok = bn + b.col < N;
  const auto load_a = [&](int t, int s) {
    const int k0 = t * BK;
    const bool k_ok = k0 + a.col < K;
#pragma unroll
    for (int p = 0; p < kALoads; ++p) {
      const bool ok = k_ok && ((a_rows_ok >> p) & 1u);
      const In* src = a_src + static_cast<std::size_t>(p * kARowsPerPass) * K + k0;
      cp_async_16(a_st + s * kAStageBytes + p * kARowsPerPass * BK * 2, ok ? src : A, ok ? 16 : 0);
    }
  };
  const auto load_b = [&](int t, int s) {
    const int k0 = t * BK;
#pragma unroll
    for (int p = 0; p < kBLoads; ++p) {
      const bool ok = b_col_ok && k0 + b.row + p * kBRowsPerPass < K;
      const In* src = b_src + static_cast<std::size_t>(k0 + p * kBRowsPerPass) * N;
      cp_async_16(b_st + s * kBStageBytes + p * kBRowsPerPass * BN * 2, ok ? src : B, ok ? 16 : 0);
    }
  };

  // ldmatrix: per-lane bases; inside the loop only the stage and compile-time XORs / offsets.
  const int a_ld = a_load_base(warp, lane), b_ld = b_load_base(warp, lane);
  unsigned af[2][MI][4], bf[2][NJ][2];  // fragments of two k steps: the one multiplied, the next
  const auto load_fragments = [&](int buf, int s, int ks) {
    const unsigned as = sA + s * kAStageBytes, bs = sB + s * kBStageBytes;
#pragma unroll
    for (int i = 0; i < MI; ++i) ldmatrix_x4(af[buf][i], as + 2 * a_load(a_ld, i, ks));
#pragma unroll
    for (int j = 0; j < NJ / 2; ++j) {  // one ldmatrix.x4.trans: n fragments 2j and 2j + 1
      unsigned r[4];
      ldmatrix_x4_trans(r, bs + 2 * b_load(b_ld, j, ks));
      bf[buf][2 * j][0] = r[0], bf[buf][2 * j][1] = r[1];
      bf[buf][2 * j + 1][0] = r[2], bf[buf][2 * j + 1][1] = r[3];
    }
  };

  float acc[MI][NJ][4];  // [m fragment][n fragment][element], layout mma_c_element
  zero_accumulators(acc);

  const int tiles = ceil_div(K, BK);
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < tiles) {
      load_a(s, pipeline_stage(s, kStages));
      load_b(s, pipeline_stage(s, kStages));
    }
    cp_async_commit();  // an empty group past the last tile keeps the group count regular
  }
  cp_async_wait<kStages - 2>();  // tile 0 has landed
  __syncthreads();
  load_fragments(0, 0, 0);

  int read = 0, write = kStages - 1;  // pipeline_stage(t), pipeline_stage(t + kStages - 1)
  for (int t = 0; t < tiles; ++t) {
    const int next_read = read + 1 == kStages ? 0 : read + 1;
    const int issue = pipeline_tile_issued(t, kStages, tiles);
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
      if (ks + 1 < KS)
        load_fragments((ks + 1) % 2, read, ks + 1);
      else if (t + 1 < tiles)
        load_fragments(0, next_read, 0);  // tile t + 1, landed at the barrier of k step KS - 2
      // Tile t + kStages - 1 into the stage of tile t - 1: A at k step 0, B at 1 (spread over
      // two steps' issue), one group, committed before the barrier below.
      if (ks == 0 && issue >= 0) load_a(issue, write);
      if (ks == 1) {
        if (issue >= 0) load_b(issue, write);
        cp_async_commit();
      }
      if (ks == KS - 2) {
        cp_async_wait<kStages - 2>();  // tile t + 1 has landed (for this thread's copies)
        __syncthreads();               // ... for every thread's, and tile t's ldmatrix are done
      }
      const int buf = ks % 2;
#pragma unroll
      for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int jj = 0; jj < NJ; ++jj) {
          const int j = i % 2 == 0 ? jj : NJ - 1 - jj;  // serpentine: B registers reused
          mma_16816<In>(acc[i][j], af[buf][i], bf[buf][j][0], bf[buf][j][1]);
        }
    }
    read = next_read;
    write = write + 1 == kStages ? 0 : write + 1;
  }
  cp_async_wait<0>();  // only empty groups are left; nothing in flight when the block exits

  // Write-out: accumulator registers (0, 1) and (2, 3) are adjacent columns of rows group and
  // group + 8 (mma_c_element): one 8-byte (FP32) or 4-byte (half) store each, where C itself is
  // aligned for it (the API asks 16 bytes of A and B only; cudaMalloc gives 256).
  const bool pairs = reinterpret_cast<std::uintptr_t>(C) % (2 * sizeof(Out)) == 0;
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NJ; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const RowCol rc = mma_c_element(lane, 2 * h);
        const int m = bm + wo.row + i * 16 + rc.row, n = bn + wo.col + j * 8 + rc.col;
        if (m < M && n < N)
          store_pair(e, C, N, m, n, acc[i][j][2 * h], acc[i][j][2 * h + 1], pairs);
      }
#elif defined(__CUDA_ARCH__)
  __trap();  // compiled for a GPU without mma.m16n8k16 / cp.async; the launcher refuses
#endif
}

// ---------------------------------------------------------------- launch helpers

int current_cc(int* major, int* minor) {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(major, cudaDevAttrComputeCapabilityMajor, device));
  CUDA_CHECK(cudaDeviceGetAttribute(minor, cudaDevAttrComputeCapabilityMinor, device));
  return device;
}

dim3 grid_for(const char* who, int M, int N, int bm = 128, int bn = 128) {
  const int gy = ceil_div(M, bm), gx = ceil_div(N, bn);
  if (gy > 65535)
    throw std::invalid_argument(std::string(who) + ": M = " + std::to_string(M) +
                                " needs more than 65535 block rows of " + std::to_string(bm));
  return dim3(gx, gy);
}

template <class In, class Out, class T>
void launch_mma(const char* who, int M, int N, int K, const In* A, const In* B, Out* C,
                const Epilogue& e, cudaStream_t stream) {
  auto kernel = mma_kernel<In, Out, T>;
  if (T::kSmemBytes > 48 * 1024) {
    CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmemBytes));
  }
  kernel<<<grid_for(who, M, N, T::BM, T::BN), T::kThreads, T::kSmemBytes, stream>>>(M, N, K, A, B,
                                                                                    C, e);
  CUDA_CHECK_LAUNCH();
}

template <class In, class Out, int kStages>
void launch_mma_tuned(const char* who, int M, int N, int K, const In* A, const In* B, Out* C,
                      const Epilogue& e, cudaStream_t stream) {
  auto kernel = mma_tuned_kernel<In, Out, kStages>;
  constexpr int bytes = v4tuned::smem_bytes(kStages);
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  const long long blocks = static_cast<long long>(ceil_div(M, v4tuned::BM)) *
                           ceil_div(N, v4tuned::BN);  // a 1-D grid: tile_coord maps it
  if (blocks > INT_MAX)
    throw std::invalid_argument(std::string(who) + ": " + std::to_string(blocks) +
                                " blocks exceed a 1-D grid");
  kernel<<<static_cast<unsigned>(blocks), v4tuned::kThreads, bytes, stream>>>(M, N, K, A, B, C, e);
  CUDA_CHECK_LAUNCH();
}

// Dynamic shared memory a tile needs, and what the current device grants one block.
int v4_tile_smem_bytes(V4Tile tile) {
  switch (tile) {
    case V4Tile::t128x128_s4:
      return TileV4::kSmemBytes;
    case V4Tile::t128x256_s3:
      return TileV4Wide::kSmemBytes;
    case V4Tile::t128x256_k64_s4:
      return v4tuned::smem_bytes(4);
    case V4Tile::t128x256_k64_s3:
      return v4tuned::smem_bytes(3);
  }
  throw std::invalid_argument("lesson10: unknown v4 tile " +
                              std::to_string(static_cast<int>(tile)));
}
int smem_per_block_optin() {
  int device = 0, bytes = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return bytes;
}

template <class In, class Out>
void launch_v4(V4Tile tile, const char* who, int M, int N, int K, const In* A, const In* B, Out* C,
               const Epilogue& e, cudaStream_t stream) {
  switch (tile) {
    case V4Tile::t128x128_s4:
      return launch_mma<In, Out, TileV4>(who, M, N, K, A, B, C, e, stream);
    case V4Tile::t128x256_s3:
      return launch_mma<In, Out, TileV4Wide>(who, M, N, K, A, B, C, e, stream);
    case V4Tile::t128x256_k64_s4:
      return launch_mma_tuned<In, Out, 4>(who, M, N, K, A, B, C, e, stream);
    case V4Tile::t128x256_k64_s3:
      return launch_mma_tuned<In, Out, 3>(who, M, N, K, A, B, C, e, stream);
  }
}

// C = act(beta * C + bias) for K == 0 (an empty sum): any version's answer.
template <class Out>
__global__ void k0_kernel(int M, int N, Out* C, Epilogue e) {
  const std::size_t total = static_cast<std::size_t>(M) * N;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    store_one(e, C, N, static_cast<int>(i / N), static_cast<int>(i % N), 0.0f);
}

}  // namespace

}  // namespace lesson10

// v8, split-K for small M: its own file, compiled in this translation unit (it says why).
#include "tensor_gemm_v8.cuh"

namespace lesson10 {

// ---------------------------------------------------------------- public entry points

const std::vector<VersionInfo>& versions() {
  static const std::vector<VersionInfo> v = {
      {1, "v1_wmma", "WMMA 16x16x16 fragments, padded shared memory, plain loads"},
      {2, "v2_mma_ldmatrix", "mma.sync m16n8k16 fed by ldmatrix, padded rows, cp.async"},
      {3, "v3_swizzle", "XOR-swizzled shared memory instead of padding"},
      {4, "v4_pipeline",
       "cp.async pipeline (loads overlap the tensor cores), tuned: 128x256x64 tile, 64x64 warps"},
      {5, "v5_wgmma", "Hopper: TMA + wgmma, producer and consumer warp groups (sm_90a)"},
      {6, "v6_wgmma_128x256",
       "v5 + 128x256 tile (m64n256k16), setmaxnreg, wgmma in flight, grouped tile order"},
      {7, "v7_wgmma_persistent", "v6's kernel, one block per SM looping over the tiles"},
      {8, "v8_splitk_small_m",
       "small M (inference): 16..64 x 64 tiles, K split over blocks, last block sums in order"},
      {9, "v9_cluster_multicast",
       "v6 on 2-block clusters along M: B's tile TMA-multicast to both, half loaded by each"},
      {10, "v10_persistent_staged",
       "v6 persistent (one block per SM), written out through a staging buffer beside the ring"},
      {11, "v11_tma_store", "v10 with each staged chunk stored by TMA, where beta == 0"},
  };
  return v;
}

const VersionInfo& version_info(int number) {
  for (const VersionInfo& v : versions())
    if (v.number == number) return v;
  throw std::invalid_argument("lesson10: unknown version " + std::to_string(number) +
                              " (expected 1.." + std::to_string(versions().size()) + ")");
}

bool version_supported(int version, DType in, std::string* why_not) {
  version_info(version);
  int major = 0, minor = 0;
  const int device = current_cc(&major, &minor);
  const std::string cc = std::to_string(major) + "." + std::to_string(minor);
  std::string reason;
  cudaFuncAttributes attr{};
  if ((version >= 5 && version <= 7) || version >= 9) {  // v5..v7, v9..v11: tensor_gemm_sm90.cu
    if (!(major == 9 && minor == 0)) {
      reason = "wgmma and TMA need compute capability 9.0 (sm_90a code); this GPU is " + cc;
    } else if (!sm90_kernels_built()) {
      reason = "this build has no sm_90a code (the compiler could not build tensor_gemm_sm90.cu)";
    } else if (version == 9) {
      int clusters = 0;
      CUDA_CHECK(cudaDeviceGetAttribute(&clusters, cudaDevAttrClusterLaunch, device));
      if (clusters == 0)
        reason = "v9 launches thread-block clusters, which this device does not support";
    }
  } else if (version == 1) {
    const int need = in == DType::bf16 ? 80 : 70;
    if (in == DType::bf16)
      CUDA_CHECK(cudaFuncGetAttributes(&attr, wmma_kernel<__nv_bfloat16, float>));
    else
      CUDA_CHECK(cudaFuncGetAttributes(&attr, wmma_kernel<__half, float>));
    if (major * 10 + minor < need)
      reason = std::string("WMMA ") + to_string(in) + " needs compute capability " +
               std::to_string(need / 10) + ".0; this GPU is " + cc;
    else if (attr.ptxVersion < need)
      reason = "this binary's WMMA kernel was compiled for compute_" +
               std::to_string(attr.ptxVersion) +
               "; rebuild with CMAKE_CUDA_ARCHITECTURES=" + std::to_string(major * 10 + minor);
  } else {  // v2..v4 and v8: mma.sync and cp.async, compiled in this file
    CUDA_CHECK(cudaFuncGetAttributes(&attr, mma_kernel<__half, float, TileV4>));
    if (major < 8)
      reason = "mma.m16n8k16 and cp.async need compute capability 8.0; this GPU is " + cc;
    else if (attr.ptxVersion < 80)
      reason = "this binary's mma kernels were compiled for compute_" +
               std::to_string(attr.ptxVersion) +
               "; rebuild with CMAKE_CUDA_ARCHITECTURES=" + std::to_string(major * 10 + minor);
  }
  if (why_not != nullptr) *why_not = reason;
  return reason.empty();
}

bool check_tensor_gemm_args(const char* who, int M, int N, int K, const void* A, const void* B,
                            const void* C, bool aligned16) {
  const std::string w(who);
  if (M < 0 || N < 0 || K < 0)
    throw std::invalid_argument(w + ": sizes must be >= 0, got M = " + std::to_string(M) +
                                ", N = " + std::to_string(N) + ", K = " + std::to_string(K));
  const auto too_big = [](int r, int c) { return static_cast<long long>(r) * c > INT_MAX; };
  if (too_big(M, K) || too_big(K, N) || too_big(M, N))
    throw std::invalid_argument(w + ": a matrix has more than INT_MAX elements");
  if (M == 0 || N == 0) return false;
  if (C == nullptr) throw std::invalid_argument(w + ": C is null");
  if (K > 0 && (A == nullptr || B == nullptr))
    throw std::invalid_argument(w + ": A or B is null with K > 0");
  if (aligned16 && K > 0) {
    if (K % 8 != 0 || N % 8 != 0)
      throw std::invalid_argument(
          w +
          ": this version loads 16-byte chunks, so K and N must be multiples of 8 (rows of "
          "A and B 16-byte aligned); got K = " +
          std::to_string(K) + ", N = " + std::to_string(N) + " (version 1 takes any shape)");
    if (reinterpret_cast<std::uintptr_t>(A) % 16 != 0 ||
        reinterpret_cast<std::uintptr_t>(B) % 16 != 0)
      throw std::invalid_argument(w + ": A and B must be 16-byte aligned for this version");
  }
  return true;
}

template <class In, class Out>
void tensor_gemm(int version, int M, int N, int K, float alpha, const In* A, const In* B,
                 float beta, Out* C, const float* bias, Activation act, cudaStream_t stream) {
  const VersionInfo& info = version_info(version);
  const std::string who = std::string("tensor_gemm ") + info.name;
  if (static_cast<int>(act) < 0 || static_cast<int>(act) > 2)
    throw std::invalid_argument(who + ": unknown activation " +
                                std::to_string(static_cast<int>(act)));
  if (version == 1 && (bias != nullptr || act != Activation::none))
    throw std::invalid_argument(who + ": the fused bias + activation epilogue is in v2..v11");
  if (!check_tensor_gemm_args(who.c_str(), M, N, K, A, B, C, version >= 2)) return;
  std::string why;
  if (!version_supported(version, dtype_of<In>(), &why))
    throw NotSupported(who + ": not supported on this GPU: " + why);
  const Epilogue e{alpha, beta, bias, act};
  if (K == 0) {
    k0_kernel<Out><<<256, 256, 0, stream>>>(M, N, C, e);
    CUDA_CHECK_LAUNCH();
    return;
  }
  switch (version) {
    case 1:
      wmma_kernel<In, Out>
          <<<grid_for(who.c_str(), M, N), v1cfg::kThreads, 0, stream>>>(M, N, K, A, B, C, e);
      CUDA_CHECK_LAUNCH();
      break;
    case 2:
      launch_mma<In, Out, TileV2>(who.c_str(), M, N, K, A, B, C, e, stream);
      break;
    case 3:
      launch_mma<In, Out, TileV3>(who.c_str(), M, N, K, A, B, C, e, stream);
      break;
    case 4:
      launch_v4<In, Out>(v4_tile_for_device(), who.c_str(), M, N, K, A, B, C, e, stream);
      break;
    case 5:
      gemm_v5_wgmma<In, Out>(M, N, K, alpha, A, B, beta, C, bias, act, stream);
      break;
    case 6:
      gemm_v6_wgmma_128x256<In, Out>(M, N, K, alpha, A, B, beta, C, bias, act, stream);
      break;
    case 7:
      gemm_v7_persistent<In, Out>(0, M, N, K, alpha, A, B, beta, C, bias, act, stream);
      break;
    case 8:
      launch_v8<In, Out>(0, who, M, N, K, A, B, C, e, stream);
      break;
    case 9:
      gemm_v9_cluster<In, Out>(M, N, K, alpha, A, B, beta, C, bias, act, stream);
      break;
    case 10:
      gemm_v10_persistent_staged<In, Out>(0, M, N, K, alpha, A, B, beta, C, bias, act, stream);
      break;
    case 11:
      gemm_v11_tma_store<In, Out>(0, M, N, K, alpha, A, B, beta, C, bias, act, stream);
      break;
  }
}

const char* to_string(V4Tile tile) {
  static const char* const names[] = {"128x128_s4", "128x256_s3", "128x256_k64_s4",
                                      "128x256_k64_s3"};
  const int i = static_cast<int>(tile);
  return i >= 0 && i < 4 ? names[i] : "unknown";
}

V4Tile v4_tile_for_device() {
  const int optin = smem_per_block_optin();
  for (const V4Tile t : {kDefaultV4Tile, V4Tile::t128x256_k64_s3})
    if (v4_tile_smem_bytes(t) <= optin) return t;
  return V4Tile::t128x128_s4;  // 64 KiB: every GPU with compute capability 8.0+
}

template <class In, class Out>
void gemm_v4_tile(V4Tile tile, int M, int N, int K, float alpha, const In* A, const In* B,
                  float beta, Out* C, const float* bias, Activation act, cudaStream_t stream) {
  const std::string who = std::string("gemm_v4_tile ") + to_string(tile);
  const int bytes = v4_tile_smem_bytes(tile);  // throws for an unknown tile
  if (static_cast<int>(act) < 0 || static_cast<int>(act) > 2)
    throw std::invalid_argument(who + ": unknown activation");
  if (!check_tensor_gemm_args(who.c_str(), M, N, K, A, B, C, true)) return;
  std::string why;
  if (!version_supported(4, dtype_of<In>(), &why))
    throw NotSupported(who + ": not supported on this GPU: " + why);
  const int optin = smem_per_block_optin();
  if (bytes > optin)
    throw NotSupported(who + ": not supported on this GPU: needs " + std::to_string(bytes) +
                       " bytes of shared memory per block, the GPU grants " +
                       std::to_string(optin));
  if (K == 0) {  // the empty sum: the same answer as every version
    tensor_gemm(4, M, N, K, alpha, A, B, beta, C, bias, act, stream);
    return;
  }
  launch_v4<In, Out>(tile, who.c_str(), M, N, K, A, B, C, Epilogue{alpha, beta, bias, act}, stream);
}

const char* to_string(TileOrder order) {
  switch (order) {
    case TileOrder::hilbert:
      return "hilbert";
    case TileOrder::group1:
      return "group1";
    case TileOrder::group2:
      return "group2";
    case TileOrder::group4:
      return "group4";
    case TileOrder::group8:
      return "group8";
    case TileOrder::group16:
      return "group16";
  }
  return "unknown";
}

template <class In, class Out>
void gemm_v12_tile_order(TileOrder order, int M, int N, int K, float alpha, const In* A,
                         const In* B, float beta, Out* C, const float* bias, Activation act,
                         cudaStream_t stream) {
  if (!is_tile_order(order))
    throw std::invalid_argument("gemm_v12_tile_order: unknown tile order " +
                                std::to_string(static_cast<int>(order)) +
                                " (expected group1, group2, group4, group8, group16 or hilbert)");
  const std::string who = std::string("gemm_v12_tile_order ") + to_string(order);
  if (static_cast<int>(act) < 0 || static_cast<int>(act) > 2)
    throw std::invalid_argument(who + ": unknown activation " +
                                std::to_string(static_cast<int>(act)));
  if (!check_tensor_gemm_args(who.c_str(), M, N, K, A, B, C, true)) return;
  std::string why;
  if (!version_supported(6, dtype_of<In>(), &why))
    throw NotSupported(who + ": not supported on this GPU: " + why);
  if (K == 0) {  // the empty sum: v6's answer (no tile is multiplied, so no order to follow)
    tensor_gemm(6, M, N, K, alpha, A, B, beta, C, bias, act, stream);
    return;
  }
  gemm_v12_launch(order, M, N, K, alpha, A, B, beta, C, bias, act, stream);
}

#define LESSON10_INSTANTIATE(In, Out)                                                              \
  template void gemm_v12_tile_order<In, Out>(TileOrder, int, int, int, float, const In*,           \
                                             const In*, float, Out*, const float*, Activation,     \
                                             cudaStream_t);                                        \
  template void tensor_gemm<In, Out>(int, int, int, int, float, const In*, const In*, float, Out*, \
                                     const float*, Activation, cudaStream_t);                      \
  template void gemm_v4_tile<In, Out>(V4Tile, int, int, int, float, const In*, const In*, float,   \
                                      Out*, const float*, Activation, cudaStream_t);
LESSON10_INSTANTIATE(__half, float)
LESSON10_INSTANTIATE(__half, __half)
LESSON10_INSTANTIATE(__nv_bfloat16, float)
LESSON10_INSTANTIATE(__nv_bfloat16, __nv_bfloat16)
#undef LESSON10_INSTANTIATE

// ---------------------------------------------------------------- the exercises' GEMMs
// The checks here, the kernels with the functions they call (exercise_kernels.cuh,
// exercise_kernels_sm90.cuh).

template <class In, class Out>
void gemm_exercise_mma(int stages, int M, int N, int K, float alpha, const In* A, const In* B,
                       float beta, Out* C, const float* bias, Activation act, cudaStream_t stream) {
  const std::string who = "gemm_exercise_mma";
  if (stages < 1 || stages > 4)
    throw std::invalid_argument(who + ": stages must be 1..4, got " + std::to_string(stages));
  if (static_cast<int>(act) < 0 || static_cast<int>(act) > 2)
    throw std::invalid_argument(who + ": unknown activation");
  if (!check_tensor_gemm_args(who.c_str(), M, N, K, A, B, C, true)) return;
  std::string why;
  if (!version_supported(3, dtype_of<In>(), &why))
    throw NotSupported(who + ": not supported on this GPU: " + why);
  const int bytes = exercise_detail::mma_smem_bytes(stages), optin = smem_per_block_optin();
  if (bytes > optin)
    throw NotSupported(who + ": not supported on this GPU: " + std::to_string(stages) +
                       " stages need " + std::to_string(bytes) +
                       " bytes of shared memory per block, the GPU grants " +
                       std::to_string(optin));
  if (K == 0) {  // the empty sum: every version's answer
    tensor_gemm(3, M, N, K, alpha, A, B, beta, C, bias, act, stream);
    return;
  }
  exercise_detail::launch_mma<In, Out>(stages, M, N, K, alpha, A, B, beta, C, bias, act, stream);
}

template <class In>
void gemm_exercise_wgmma(int M, int N, int K, float alpha, const In* A, const In* B, float beta,
                         float* C, const float* bias, Activation act, cudaStream_t stream) {
  const std::string who = "gemm_exercise_wgmma";
  if (static_cast<int>(act) < 0 || static_cast<int>(act) > 2)
    throw std::invalid_argument(who + ": unknown activation");
  if (!check_tensor_gemm_args(who.c_str(), M, N, K, A, B, C, true)) return;
  std::string why;
  if (!version_supported(6, dtype_of<In>(), &why))
    throw NotSupported(who + ": not supported on this GPU: " + why);
  if (K == 0) {
    tensor_gemm(6, M, N, K, alpha, A, B, beta, C, bias, act, stream);
    return;
  }
  exercise_detail::launch_wgmma<In>(M, N, K, alpha, A, B, beta, C, bias, act, stream);
}

#define LESSON10_INSTANTIATE(In, Out)                                                              \
  template void gemm_exercise_mma<In, Out>(int, int, int, int, float, const In*, const In*, float, \
                                           Out*, const float*, Activation, cudaStream_t);
LESSON10_INSTANTIATE(__half, float)
LESSON10_INSTANTIATE(__half, __half)
LESSON10_INSTANTIATE(__nv_bfloat16, float)
LESSON10_INSTANTIATE(__nv_bfloat16, __nv_bfloat16)
#undef LESSON10_INSTANTIATE
template void gemm_exercise_wgmma<__half>(int, int, int, float, const __half*, const __half*, float,
                                          float*, const float*, Activation, cudaStream_t);
template void gemm_exercise_wgmma<__nv_bfloat16>(int, int, int, float, const __nv_bfloat16*,
                                                 const __nv_bfloat16*, float, float*, const float*,
                                                 Activation, cudaStream_t);

// ---------------------------------------------------------------- peak

int fp16_flops_per_clock_per_sm(int cc_major, int cc_minor) {
  const int cc = cc_major * 10 + cc_minor;
  if (cc == 70 || cc == 72 || cc == 75) return 1024;
  if (cc == 80) return 2048;
  if (cc == 86 || cc == 87 || cc == 89) return 1024;
  if (cc == 90) return 4096;
  throw std::invalid_argument(
      "fp16_flops_per_clock_per_sm: no table entry for compute capability " +
      std::to_string(cc_major) + "." + std::to_string(cc_minor));
}

TensorPeak tensor_peak(int device) {
  TensorPeak p;
  int major = 0, minor = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&p.sm_count, cudaDevAttrMultiProcessorCount, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&p.clock_khz, cudaDevAttrClockRate, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  p.flops_per_clock_per_sm = fp16_flops_per_clock_per_sm(major, minor);
  p.tflops = static_cast<double>(p.sm_count) * p.flops_per_clock_per_sm * p.clock_khz * 1e3 / 1e12;
  return p;
}

// ---------------------------------------------------------------- cuBLAS and cuBLASLt

namespace {
void blas_check(int status, const char* call) {
  if (status != 0)
    throw std::runtime_error(std::string(call) + " failed with status " + std::to_string(status));
}
#define LESSON10_BLAS(call) blas_check(static_cast<int>(call), #call)

template <class T>
cudaDataType_t cuda_type() {
  if constexpr (std::is_same<T, float>::value) return CUDA_R_32F;
  if constexpr (std::is_same<T, __half>::value) return CUDA_R_16F;
  return CUDA_R_16BF;
}
}  // namespace

Blas::Blas() {
  cublasHandle_t h = nullptr;
  LESSON10_BLAS(cublasCreate(&h));
  cublas_ = h;
  cublasLtHandle_t lt = nullptr;
  const cublasStatus_t s = cublasLtCreate(&lt);
  if (s != CUBLAS_STATUS_SUCCESS) {
    cublasDestroy(h);
    LESSON10_BLAS(s);
  }
  lt_ = lt;
  const cudaError_t e = cudaMalloc(&workspace_, workspace_bytes_);
  if (e != cudaSuccess) {
    cublasLtDestroy(lt);
    cublasDestroy(h);
    CUDA_CHECK(e);
  }
}

Blas::~Blas() {
  cudaFree(workspace_);
  cublasLtDestroy(static_cast<cublasLtHandle_t>(lt_));
  cublasDestroy(static_cast<cublasHandle_t>(cublas_));
}

template <class In, class Out>
void cublas_gemm(const Blas& blas, int M, int N, int K, float alpha, const In* A, const In* B,
                 float beta, Out* C, cudaStream_t stream) {
  if (!check_tensor_gemm_args("cublas_gemm", M, N, K, A, B, C, false)) return;
  auto h = static_cast<cublasHandle_t>(blas.cublas());
  LESSON10_BLAS(cublasSetStream(h, stream));
  LESSON10_BLAS(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &alpha, B, cuda_type<In>(), N, A,
                             cuda_type<In>(), K, &beta, C, cuda_type<Out>(), N, CUBLAS_COMPUTE_32F,
                             CUBLAS_GEMM_DEFAULT));
}

namespace {
template <class Out>
__global__ void convert_bias_kernel(const float* __restrict__ in, Out* __restrict__ out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = static_cast<Out>(in[i]);
}
}  // namespace

template <class In, class Out>
void cublaslt_gemm(const Blas& blas, int M, int N, int K, float alpha, const In* A, const In* B,
                   float beta, Out* C, const float* bias, Activation act, cudaStream_t stream) {
  if (!check_tensor_gemm_args("cublaslt_gemm", M, N, K, A, B, C, false)) return;
  auto lt = static_cast<cublasLtHandle_t>(blas.lt());
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  // Column-major view: D^T (N x M) = B^T (N x K) * A^T (K x M); the bias runs down D^T's rows,
  // i.e. along n, as a fully connected layer's bias does.
  const auto cleanup = [&] {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (op) cublasLtMatmulDescDestroy(op);
  };
  try {
    LESSON10_BLAS(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
    if (act == Activation::relu)
      epi = bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    else if (act == Activation::gelu)
      epi = bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    else if (bias)
      epi = CUBLASLT_EPILOGUE_BIAS;
    LESSON10_BLAS(
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    // cuBLASLt takes the bias in D's type when D is FP16 or BF16: an FP32 bias with an FP16 D
    // made cublasLtMatmulAlgoGetHeuristic answer CUBLAS_STATUS_INVALID_VALUE on the H200
    // (cuBLAS 13.0). So for a half D the bias is converted into the tail of the workspace first,
    // one small kernel on the same stream (N elements; counted in the baseline's time).
    std::size_t ws = blas.workspace_bytes();
    const void* lt_bias = bias;
    if (bias && !std::is_same<Out, float>::value) {
      const std::size_t bytes = (static_cast<std::size_t>(N) * sizeof(Out) + 255) / 256 * 256;
      if (bytes > ws / 2)
        throw std::invalid_argument("cublaslt_gemm: N too large for the bias copy");
      ws -= bytes;
      Out* converted = reinterpret_cast<Out*>(static_cast<char*>(blas.workspace()) + ws);
      convert_bias_kernel<Out><<<(N + 255) / 256, 256, 0, stream>>>(bias, converted, N);
      CUDA_CHECK_LAUNCH();
      lt_bias = converted;
    }
    if (bias) {
      const cudaDataType_t bt = cuda_type<Out>();
      LESSON10_BLAS(
          cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)));
      LESSON10_BLAS(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &lt_bias,
                                                   sizeof(lt_bias)));
    }
    LESSON10_BLAS(cublasLtMatrixLayoutCreate(&la, cuda_type<In>(), N, K, N));
    LESSON10_BLAS(cublasLtMatrixLayoutCreate(&lb, cuda_type<In>(), K, M, K));
    LESSON10_BLAS(cublasLtMatrixLayoutCreate(&lc, cuda_type<Out>(), N, M, N));
    LESSON10_BLAS(cublasLtMatmulPreferenceCreate(&pref));
    LESSON10_BLAS(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    LESSON10_BLAS(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 1, &result, &found));
    if (found == 0)
      throw NotSupported("cublaslt_gemm: cuBLASLt has no algorithm for this epilogue and types");
    LESSON10_BLAS(cublasLtMatmul(lt, op, &alpha, B, la, A, lb, &beta, C, lc, C, lc, &result.algo,
                                 blas.workspace(), ws, stream));
  } catch (...) {
    cleanup();
    throw;
  }
  cleanup();
}

#define LESSON10_INSTANTIATE(In, Out)                                                           \
  template void cublas_gemm<In, Out>(const Blas&, int, int, int, float, const In*, const In*,   \
                                     float, Out*, cudaStream_t);                                \
  template void cublaslt_gemm<In, Out>(const Blas&, int, int, int, float, const In*, const In*, \
                                       float, Out*, const float*, Activation, cudaStream_t);
LESSON10_INSTANTIATE(__half, float)
LESSON10_INSTANTIATE(__half, __half)
LESSON10_INSTANTIATE(__nv_bfloat16, float)
LESSON10_INSTANTIATE(__nv_bfloat16, __nv_bfloat16)
#undef LESSON10_INSTANTIATE

// ---------------------------------------------------------------- test data and the oracle

namespace {
__host__ __device__ inline std::uint64_t mix64(std::uint64_t x) {  // splitmix64's finaliser
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
template <class T>
__global__ void fill_kernel(T* data, std::size_t n, std::uint64_t seed, float lo, float hi) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const float u = static_cast<float>(mix64(seed * 0x9e3779b97f4a7c15ull + i) >> 40) / 16777216.0f;
    data[i] = from_float<T>(lo + (hi - lo) * u);
  }
}
}  // namespace

template <class T>
void fill_uniform(T* data, std::size_t n, std::uint64_t seed, float lo, float hi,
                  cudaStream_t stream) {
  if (n == 0) return;
  if (data == nullptr) throw std::invalid_argument("fill_uniform: data is null");
  fill_kernel<T><<<1024, 256, 0, stream>>>(data, n, seed, lo, hi);
  CUDA_CHECK_LAUNCH();
}
template void fill_uniform<float>(float*, std::size_t, std::uint64_t, float, float, cudaStream_t);
template void fill_uniform<__half>(__half*, std::size_t, std::uint64_t, float, float, cudaStream_t);
template void fill_uniform<__nv_bfloat16>(__nv_bfloat16*, std::size_t, std::uint64_t, float, float,
                                          cudaStream_t);

double reference_element(int N, int K, const float* A, const float* B, int m, int n,
                         double* abs_sum) {
  double s = 0.0, a = 0.0;
  for (int k = 0; k < K; ++k) {
    const double p = static_cast<double>(A[static_cast<std::size_t>(m) * K + k]) *
                     B[static_cast<std::size_t>(k) * N + n];
    s += p;
    a += std::fabs(p);
  }
  if (abs_sum) *abs_sum = a;
  return s;
}

double tensor_gemm_error_bound(int K, double alpha, double abs_sum, double beta, double c_old,
                               double bias, Activation act, DType out, double exact_result) {
  // The accumulation: u_acc = 2 * 2^-24, not 2^-24, because the tensor cores' FP32 adder is not
  // IEEE round-to-nearest: Fasi, Higham, Mikaitis, Pranesh, "Numerical behavior of NVIDIA tensor
  // cores" (PeerJ CS 2021) measured truncation (round toward zero), whose error is up to 1 ulp.
  const double u_acc = 2.0 * kFp32U;
  double err = (K + 3) * u_acc *
               (std::fabs(alpha) * abs_sum + (beta != 0.0 ? std::fabs(beta * c_old) : 0.0) +
                std::fabs(bias));
  if (act == Activation::gelu) err = 1.13 * err + 8.0 * kFp32U * (std::fabs(exact_result) + 1.0);
  const double mag = std::fabs(exact_result) + err;
  if (out == DType::f16) err += mag / 2048.0 + std::ldexp(1.0, -25);
  if (out == DType::bf16) err += mag / 256.0 + std::ldexp(1.0, -134);
  return err;
}

}  // namespace lesson10

// solutions.cuh, compiled here, in this translation unit: in both builds v2..v4's lane maps,
// swizzle and ring, which the kernels above call; in the lesson build only, the exercise
// solutions and the exercise kernel (the exercise build defines LESSON_EXERCISE_BUILD and
// compiles exercise.cu instead). Try the exercises first.
#include "solutions.cuh"
