// Lesson 07: SGEMM from the naive kernel toward cuBLAS. The list of versions and the conventions
// every launcher follows are in gemm.cuh; README.md walks through the kernels with the numbers.
//
// Kernels come in the order they are taught. Each tiled kernel handles any M, N, K: loads outside
// the matrices read as 0 (a zero adds nothing to a dot product) and stores outside C are skipped.
// Versions 6-8 and the WMMA kernel are templates on kVec: float4 (128-bit) memory accesses where
// rows are a multiple of 4 floats and the pointers are 16-byte aligned, guarded scalar accesses
// otherwise. The launcher picks the instantiation at run time.
#include "gemm.cuh"

#include <mma.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <string>

#include "common/cuda_check.hpp"

namespace lesson07 {

const char* to_string(Activation act) {
  switch (act) {
    case Activation::none:
      return "none";
    case Activation::relu:
      return "ReLU";
    case Activation::silu:
      return "SiLU";
  }
  return "unknown";
}

// ---------------------------------------------------------------- arguments

namespace {
std::string shape_text(int M, int N, int K) {
  return "M=" + std::to_string(M) + ", N=" + std::to_string(N) + ", K=" + std::to_string(K);
}

bool aligned16(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
}

// float4 accesses need every row to start on a 16-byte boundary: row lengths (K for A, N for B
// and C) a multiple of 4 floats, and 16-byte aligned base pointers (cudaMalloc gives 256).
bool can_vectorize(int N, int K, const float* A, const float* B, const float* C) {
  return K % 4 == 0 && N % 4 == 0 && aligned16(A) && aligned16(B) && aligned16(C);
}

}  // namespace

dim3 tile_grid(const char* who, int M, int N, int bm, int bn) {
  const int blocks_y = ceil_div(M, bm);
  if (blocks_y > 65535) {
    throw std::invalid_argument(std::string(who) + ": the matrix is too large for one launch: " +
                                std::to_string(blocks_y) + " blocks along gridDim.y (limit 65535)");
  }
  return dim3(ceil_div(N, bn), blocks_y);
}

namespace {
// An Activation cast from an out-of-range int would run as the identity in activate(): a layer
// that silently lost its nonlinearity. Checked first, even when there is nothing to compute.
void check_activation(const char* who, Activation act) {
  if (act != Activation::none && act != Activation::relu && act != Activation::silu) {
    throw std::invalid_argument(std::string(who) + ": unknown Activation " +
                                std::to_string(static_cast<int>(act)) +
                                "; expected none (0), relu (1) or silu (2)");
  }
}
}  // namespace

bool check_gemm_args(const char* who, int M, int N, int K, const float* A, const float* B,
                     const float* C) {
  if (M < 0 || N < 0 || K < 0) {
    throw std::invalid_argument(std::string(who) + ": M, N and K must be >= 0, got " +
                                shape_text(M, N, K));
  }
  const auto too_big = [](int rows, int cols) {
    return static_cast<long long>(rows) * cols > INT_MAX;
  };
  if (too_big(M, K) || too_big(K, N) || too_big(M, N)) {
    throw std::invalid_argument(std::string(who) +
                                ": each matrix must have at most 2^31 - 1 elements (the kernels "
                                "index with int), got " +
                                shape_text(M, N, K));
  }
  if (M == 0 || N == 0) return false;
  if (C == nullptr) {
    throw std::invalid_argument(std::string(who) + ": C must not be null for " +
                                shape_text(M, N, K));
  }
  if (K > 0 && (A == nullptr || B == nullptr)) {
    throw std::invalid_argument(std::string(who) + ": A and B must not be null when K > 0 (" +
                                shape_text(M, N, K) + ")");
  }
  return true;
}

// ---------------------------------------------------------------- the FP32 peak

int fp32_lanes_per_sm(int cc_major, int cc_minor) {
  if (cc_major < 7) {
    throw std::invalid_argument("fp32_lanes_per_sm: compute capability " +
                                std::to_string(cc_major) + "." + std::to_string(cc_minor) +
                                " is older than this course supports (7.5)");
  }
  // 64 on Volta, Turing and A100 (8.0); 128 on 8.6, 8.7, 8.9, 9.0 and newer
  if (cc_major == 7 || (cc_major == 8 && cc_minor == 0)) return 64;
  return 128;
}

double fp32_peak_tflops(int sm_count, int lanes_per_sm, int clock_khz) {
  return static_cast<double>(sm_count) * lanes_per_sm * 2.0 * clock_khz * 1e3 / 1e12;
}

Fp32Peak fp32_peak(int device) {
  Fp32Peak p;
  int major = 0, minor = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&p.sm_count, cudaDevAttrMultiProcessorCount, device));
  // cudaDeviceProp::clockRate is gone in CUDA 13; the attribute remains: the peak (max boost)
  // SM clock in kHz.
  CUDA_CHECK(cudaDeviceGetAttribute(&p.clock_khz, cudaDevAttrClockRate, device));
  p.lanes_per_sm = fp32_lanes_per_sm(major, minor);
  p.tflops = fp32_peak_tflops(p.sm_count, p.lanes_per_sm, p.clock_khz);
  return p;
}

// ---------------------------------------------------------------- device helpers

namespace {

// What the write-out applies to each accumulated dot product (see epilogue_value).
struct Epilogue {
  float alpha;
  float beta;
  const float* bias;  // N floats or nullptr
  Activation act;
};

Epilogue plain(float alpha, float beta) {
  return Epilogue{alpha, beta, nullptr, Activation::none};
}

// C[m][n] = epilogue(acc). C is read only when beta != 0: with beta == 0 it may hold NaN.
__device__ __forceinline__ void store1(const Epilogue& e, float* C, int N, int m, int n,
                                       float acc) {
  float* c = C + m * N + n;
  const float old = e.beta != 0.0f ? *c : 0.0f;
  *c = epilogue_value(acc, old, e.bias != nullptr ? e.bias[n] : 0.0f, e.alpha, e.beta, e.act);
}

// P[r][c] of a rows x cols row-major matrix, or 0 outside it.
__device__ __forceinline__ float load_or_zero(const float* P, int r, int c, int rows, int cols) {
  return (r < rows && c < cols) ? P[r * cols + c] : 0.0f;
}

// P[r][c .. c+3], zeros where outside the matrix. kVec: one 128-bit load; the caller guarantees
// cols % 4 == 0, an aligned P and c % 4 == 0, so the four are all inside or all outside.
template <bool kVec>
__device__ __forceinline__ float4 load4(const float* P, int r, int c, int rows, int cols) {
  if constexpr (kVec) {
    if (r < rows && c < cols) return *reinterpret_cast<const float4*>(P + r * cols + c);
    return make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  } else {
    return make_float4(load_or_zero(P, r, c, rows, cols), load_or_zero(P, r, c + 1, rows, cols),
                       load_or_zero(P, r, c + 2, rows, cols),
                       load_or_zero(P, r, c + 3, rows, cols));
  }
}

// C[m][n .. n+3] = epilogue(acc[0..3]), skipping what lies outside C. kVec: one 128-bit load (if
// beta != 0) and one 128-bit store, under the same guarantees as load4.
template <bool kVec>
__device__ __forceinline__ void store4(const Epilogue& e, float* C, int M, int N, int m, int n,
                                       const float* acc) {
  if (m >= M) return;
  if constexpr (kVec) {
    if (n >= N) return;
    float4* c = reinterpret_cast<float4*>(C + m * N + n);
    const float4 old = e.beta != 0.0f ? *c : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    const float b[4] = {e.bias ? e.bias[n] : 0.0f, e.bias ? e.bias[n + 1] : 0.0f,
                        e.bias ? e.bias[n + 2] : 0.0f, e.bias ? e.bias[n + 3] : 0.0f};
    *c = make_float4(epilogue_value(acc[0], old.x, b[0], e.alpha, e.beta, e.act),
                     epilogue_value(acc[1], old.y, b[1], e.alpha, e.beta, e.act),
                     epilogue_value(acc[2], old.z, b[2], e.alpha, e.beta, e.act),
                     epilogue_value(acc[3], old.w, b[3], e.alpha, e.beta, e.act));
  } else {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      if (n + q < N) store1(e, C, N, m, n + q, acc[q]);
    }
  }
}

// The heart of register blocking: acc += a * b^T, 8 values of A times 8 of B, 64 FMAs on registers
// (v5 onwards; each thread's 8x8 block of C).
__device__ __forceinline__ void outer_product(const float (&a)[8], const float (&b)[8],
                                              float (&acc)[8][8]) {
#pragma unroll
  for (int i = 0; i < 8; ++i) {
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
  }
}

// ---------------------------------------------------------------- v1, v2: one thread per output

// v1 (kCoalesced = false): threadIdx.x -> row. The 32 lanes of a warp own 32 consecutive ROWS of
// one column: each load of A touches 32 rows K floats apart and each store of C 32 rows N floats
// apart, 32 memory transactions where one would do (B is the same address for all: a broadcast).
// v2 (kCoalesced = true): threadIdx.x -> column. Now a warp reads 32 consecutive floats of a row
// of B (one 128-byte line), writes 32 consecutive floats of C, and A is the broadcast. Same
// arithmetic, same instruction count: only the mapping of threads to data changed.
// (Programming Guide, "Device Memory Accesses": coalescing.)
template <bool kCoalesced>
__global__ void naive_kernel(int M, int N, int K, const float* __restrict__ A,
                             const float* __restrict__ B, float* __restrict__ C, Epilogue e) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  const int m = kCoalesced ? y : x;
  const int n = kCoalesced ? x : y;
  if (m >= M || n >= N) return;
  float acc = 0.0f;
  for (int k = 0; k < K; ++k) acc = fmaf(A[m * K + k], B[k * N + n], acc);
  store1(e, C, N, m, n, acc);
}

// ---------------------------------------------------------------- v3: shared-memory tiles

// v2 reads every element of A N times and every element of B M times from global memory (the L1
// and L2 catch some of it). Here a 32x32 block of threads stages a 32x32 tile of A and of B in
// shared memory, then each thread takes its 32 products from there: each global element is read
// once per tile row/column of blocks, and shared memory is ~ 30x closer than DRAM.
constexpr int kTile3 = 32, kThreads3 = kTile3 * kTile3;

__global__ void __launch_bounds__(kThreads3)
    v3_smem_tiling_kernel(int M, int N, int K, const float* __restrict__ A,
                          const float* __restrict__ B, float* __restrict__ C, Epilogue e) {
  __shared__ float As[kTile3][kTile3];
  __shared__ float Bs[kTile3][kTile3];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int m = blockIdx.y * kTile3 + ty;
  const int n = blockIdx.x * kTile3 + tx;
  float acc = 0.0f;
  for (int k0 = 0; k0 < K; k0 += kTile3) {
    // One element of each tile per thread; a warp (one ty, tx = 0..31) reads 32 consecutive
    // floats of a row of A and of B: coalesced. Threads outside C still load and reach the
    // barriers: __syncthreads must be reached by every thread of the block.
    As[ty][tx] = load_or_zero(A, m, k0 + tx, M, K);
    Bs[ty][tx] = load_or_zero(B, k0 + ty, n, K, N);
    __syncthreads();  // the tiles are complete before anyone reads them
#pragma unroll
    for (int k = 0; k < kTile3; ++k) {
      // As[ty][k]: one address for the whole warp (broadcast); Bs[k][tx]: 32 consecutive words,
      // one per bank. Neither conflicts ("Shared Memory" in the Programming Guide).
      acc = fmaf(As[ty][k], Bs[k][tx], acc);
    }
    __syncthreads();  // everyone is done with the tiles before the next loads overwrite them
  }
  if (m < M && n < N) store1(e, C, N, m, n, acc);
}

// ---------------------------------------------------------------- v4: 1D register blocking

// v3 issues two shared-memory loads per FMA, and shared memory, not arithmetic, sets its speed.
// Here each thread computes TM = 8 outputs of one column: the value of B it loads is used for 8
// FMAs held in registers. 64x64 tile, BK = 8, 512 threads.
namespace v4 {
constexpr int BM = 64, BN = 64, BK = 8, TM = 8;
constexpr int kThreads = BM * BN / TM;  // 512
}  // namespace v4

__global__ void __launch_bounds__(v4::kThreads)
    v4_1d_blocktiling_kernel(int M, int N, int K, const float* __restrict__ A,
                             const float* __restrict__ B, float* __restrict__ C, Epilogue e) {
  using namespace v4;
  __shared__ float As[BM][BK];
  __shared__ float Bs[BK][BN];
  const int tid = threadIdx.x;
  const int bm = blockIdx.y * BM, bn = blockIdx.x * BN;
  const int col = tid % BN;          // this thread's column of the tile
  const int row0 = (tid / BN) * TM;  // and its TM rows: row0 .. row0 + TM - 1
  // Each tile has BM*BK = BK*BN = 512 elements: one of A and one of B per thread.
  const int a_r = tid / BK, a_c = tid % BK;
  const int b_r = tid / BN, b_c = tid % BN;
  float acc[TM] = {};
  for (int k0 = 0; k0 < K; k0 += BK) {
    As[a_r][a_c] = load_or_zero(A, bm + a_r, k0 + a_c, M, K);
    Bs[b_r][b_c] = load_or_zero(B, k0 + b_r, bn + b_c, K, N);
    __syncthreads();
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      const float b = Bs[k][col];  // loaded once, used TM times
#pragma unroll
      for (int i = 0; i < TM; ++i) acc[i] = fmaf(As[row0 + i][k], b, acc[i]);
    }
    __syncthreads();
  }
  const int n = bn + col;
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int m = bm + row0 + i;
    if (m < M && n < N) store1(e, C, N, m, n, acc[i]);
  }
}

// ---------------------------------------------------------------- v5: 2D register blocking

// Each thread computes a TM x TN = 8x8 block of C as a sum of outer products: per k it loads 8
// values of A and 8 of B into registers and does 64 FMAs (v4: 9 loads for 8 FMAs). 128x128 tile,
// BK = 8, 256 threads, 64 accumulators per thread. __launch_bounds__(256, 2) asks the compiler to
// fit two blocks per SM (<= 128 registers per thread).
// What still costs: the A tile is [BM][BK], so a thread's 8 values of A are 8 scalar loads 8
// words apart, and 16 threads reading Bs[k][col0 .. col0+7] at a stride of 8 words hit the same
// banks (a 4-way bank conflict). v6 and v7 fix those.
namespace v5 {
constexpr int BM = 128, BN = 128, BK = 8, TM = 8, TN = 8;
constexpr int kThreads = (BM / TM) * (BN / TN);  // 256
}  // namespace v5

__global__ void __launch_bounds__(v5::kThreads, 2)
    v5_2d_blocktiling_kernel(int M, int N, int K, const float* __restrict__ A,
                             const float* __restrict__ B, float* __restrict__ C, Epilogue e) {
  using namespace v5;
  __shared__ float As[BM][BK];
  __shared__ float Bs[BK][BN];
  const int tid = threadIdx.x;
  const int bm = blockIdx.y * BM, bn = blockIdx.x * BN;
  const int row0 = (tid / (BN / TN)) * TM;
  const int col0 = (tid % (BN / TN)) * TN;
  float acc[TM][TN] = {};
  for (int k0 = 0; k0 < K; k0 += BK) {
    // 1024 elements per tile, 4 per thread; consecutive threads take consecutive elements.
    for (int i = tid; i < BM * BK; i += kThreads) {
      As[i / BK][i % BK] = load_or_zero(A, bm + i / BK, k0 + i % BK, M, K);
    }
    for (int i = tid; i < BK * BN; i += kThreads) {
      Bs[i / BN][i % BN] = load_or_zero(B, k0 + i / BN, bn + i % BN, K, N);
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      float a[TM], b[TN];
#pragma unroll
      for (int i = 0; i < TM; ++i) a[i] = As[row0 + i][k];
#pragma unroll
      for (int j = 0; j < TN; ++j) b[j] = Bs[k][col0 + j];
      outer_product(a, b, acc);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < TM; ++i) {
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      const int m = bm + row0 + i, n = bn + col0 + j;
      if (m < M && n < N) store1(e, C, N, m, n, acc[i][j]);
    }
  }
}

// ---------------------------------------------------------------- v6: vectorised, transposed A

// Same tiles and thread blocks as v5, fewer and wider memory instructions:
//  - global loads are float4: one 128-bit load of A and one of B per thread per tile;
//  - the A tile is stored TRANSPOSED, As[k][m], so a thread's 8 values of A for one k are
//    contiguous: two 128-bit shared loads instead of 8 scalar ones (B likewise);
//  - the write-out is float4 too.
// What remains: the transposing scalar stores into As hit 2 threads per bank, and 8 threads
// loading Bs[k][col0 .. col0+3] at a stride of 8 words still share banks (2-way). v7.
template <bool kVec>
__global__ void __launch_bounds__(v5::kThreads, 2)
    v6_vectorized_kernel(int M, int N, int K, const float* __restrict__ A,
                         const float* __restrict__ B, float* __restrict__ C, Epilogue e) {
  using namespace v5;                         // same tile shape
  __shared__ __align__(16) float As[BK][BM];  // transposed
  __shared__ __align__(16) float Bs[BK][BN];
  const int tid = threadIdx.x;
  const int bm = blockIdx.y * BM, bn = blockIdx.x * BN;
  const int row0 = (tid / (BN / TN)) * TM;
  const int col0 = (tid % (BN / TN)) * TN;
  const int a_r = tid / (BK / 4), a_c = (tid % (BK / 4)) * 4;  // 128 rows x 2 float4
  const int b_r = tid / (BN / 4), b_c = (tid % (BN / 4)) * 4;  // 8 rows x 32 float4
  float acc[TM][TN] = {};
  for (int k0 = 0; k0 < K; k0 += BK) {
    const float4 a4 = load4<kVec>(A, bm + a_r, k0 + a_c, M, K);
    As[a_c + 0][a_r] = a4.x;  // transposed on the way into shared memory
    As[a_c + 1][a_r] = a4.y;
    As[a_c + 2][a_r] = a4.z;
    As[a_c + 3][a_r] = a4.w;
    *reinterpret_cast<float4*>(&Bs[b_r][b_c]) = load4<kVec>(B, k0 + b_r, bn + b_c, K, N);
    __syncthreads();
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      float a[TM], b[TN];
      *reinterpret_cast<float4*>(&a[0]) = *reinterpret_cast<const float4*>(&As[k][row0]);
      *reinterpret_cast<float4*>(&a[4]) = *reinterpret_cast<const float4*>(&As[k][row0 + 4]);
      *reinterpret_cast<float4*>(&b[0]) = *reinterpret_cast<const float4*>(&Bs[k][col0]);
      *reinterpret_cast<float4*>(&b[4]) = *reinterpret_cast<const float4*>(&Bs[k][col0 + 4]);
      outer_product(a, b, acc);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    store4<kVec>(e, C, M, N, bm + row0 + i, bn + col0, &acc[i][0]);
    store4<kVec>(e, C, M, N, bm + row0 + i, bn + col0 + 4, &acc[i][4]);
  }
}

// ---------------------------------------------------------------- v7, v8: warp tiling

// The block tile is split among warps, and the warp tile among lanes, so that every 128-bit
// shared-memory load of a warp is conflict free:
//
//   block tile BM x BN = 128 x 128          warp tile WM x WN = 32 x 64 (lanes 4 x 8)
//   +--------+--------+                     lane (lr, lc) owns 4x4 pieces at
//   | warp 0 | warp 1 |  32 rows             rows wm0 + {0..3} and wm0 + 16 + {0..3}
//   +--------+--------+                     cols wn0 + {0..3} and wn0 + 32 + {0..3}
//   | warp 2 | warp 3 |                     with wm0 = 4 lr, wn0 = 4 lc
//   |  ...   |  ...   |                     -> 8x8 = 64 outputs per thread, as in v5/v6
//   +--------+--------+
//
// A shared-memory request of 128-bit loads is served a quarter-warp (8 lanes) at a time. The 8
// lanes with one lr read the same As address (a broadcast) and 8 consecutive float4 of Bs (all
// 32 banks once): no conflicts, where v6's contiguous 8x8 thread tiles had 2-way conflicts.
// The A tile is stored transposed with 4 floats of padding per row (BM + 4): with BK = 8 the
// transposing scalar stores of a warp then land in 32 different banks (BK = 16 leaves a 2-way
// conflict on them, a small share of the shared-memory traffic), and rows stay 16-byte aligned.
template <int BM_, int BN_, int BK_, int WM_, int WN_>
struct WarpTile {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, WM = WM_, WN = WN_;
  static constexpr int kWarpsN = BN / WN;
  static constexpr int kThreads = (BM / WM) * kWarpsN * 32;
  static constexpr int kLanesN = WN / 8;                  // each lane covers 2 x 4 columns
  static constexpr int kLdA = BM + 4;                     // padded row of the transposed A tile
  static constexpr int kALoads = BM * BK / 4 / kThreads;  // float4 per thread per tile
  static constexpr int kBLoads = BK * BN / 4 / kThreads;
  static_assert((WM / 8) * (WN / 8) == 32, "a warp tile is 32 lanes of 8x8");
  static_assert(kALoads >= 1 && kALoads * 4 * kThreads == BM * BK, "A tile divides into float4");
  static_assert(kBLoads >= 1 && kBLoads * 4 * kThreads == BK * BN, "B tile divides into float4");
  static constexpr int kSmemA = BK * kLdA;  // floats per stage
  static constexpr int kSmemB = BK * BN;
};

// The two configurations instantiated (see TileConfig in gemm.cuh).
using TileBk8 = WarpTile<128, 128, 8, 32, 64>;
using TileBk16 = WarpTile<128, 128, 16, 32, 64>;

// A tile of A (BM x BK at row bm, column k0) and of B (BK x BN at row k0, column bn) from global
// memory into registers. Consecutive threads read consecutive float4 of a row: coalesced.
template <class T, bool kVec>
__device__ __forceinline__ void load_tiles(const float* A, const float* B, int M, int N, int K,
                                           int bm, int bn, int k0, float4 (&ra)[T::kALoads],
                                           float4 (&rb)[T::kBLoads]) {
#pragma unroll
  for (int p = 0; p < T::kALoads; ++p) {
    const int idx = threadIdx.x + p * T::kThreads;
    ra[p] = load4<kVec>(A, bm + idx / (T::BK / 4), k0 + (idx % (T::BK / 4)) * 4, M, K);
  }
#pragma unroll
  for (int p = 0; p < T::kBLoads; ++p) {
    const int idx = threadIdx.x + p * T::kThreads;
    rb[p] = load4<kVec>(B, k0 + idx / (T::BN / 4), bn + (idx % (T::BN / 4)) * 4, K, N);
  }
}

// Registers -> shared memory: A transposed into As[k][m], B as it is.
template <class T>
__device__ __forceinline__ void store_tiles(float* As, float* Bs, const float4 (&ra)[T::kALoads],
                                            const float4 (&rb)[T::kBLoads]) {
#pragma unroll
  for (int p = 0; p < T::kALoads; ++p) {
    const int idx = threadIdx.x + p * T::kThreads;
    const int r = idx / (T::BK / 4), c = (idx % (T::BK / 4)) * 4;
    As[(c + 0) * T::kLdA + r] = ra[p].x;
    As[(c + 1) * T::kLdA + r] = ra[p].y;
    As[(c + 2) * T::kLdA + r] = ra[p].z;
    As[(c + 3) * T::kLdA + r] = ra[p].w;
  }
#pragma unroll
  for (int p = 0; p < T::kBLoads; ++p) {
    const int idx = threadIdx.x + p * T::kThreads;
    const int r = idx / (T::BN / 4), c = (idx % (T::BN / 4)) * 4;
    *reinterpret_cast<float4*>(&Bs[r * T::BN + c]) = rb[p];
  }
}

// The thread's first row and column inside the block tile (its 4x4 pieces start there and
// WM/2 rows, WN/2 columns further).
template <class T>
__device__ __forceinline__ void thread_origin(int& wm0, int& wn0) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  wm0 = (warp / T::kWarpsN) * T::WM + (lane / T::kLanesN) * 4;
  wn0 = (warp % T::kWarpsN) * T::WN + (lane % T::kLanesN) * 4;
}

// acc += the tile's contribution: BK outer products of 8 values of A and 8 of B.
template <class T>
__device__ __forceinline__ void multiply_tile(const float* As, const float* Bs, int wm0, int wn0,
                                              float (&acc)[8][8]) {
#pragma unroll
  for (int k = 0; k < T::BK; ++k) {
    float a[8], b[8];
    *reinterpret_cast<float4*>(&a[0]) = *reinterpret_cast<const float4*>(&As[k * T::kLdA + wm0]);
    *reinterpret_cast<float4*>(&a[4]) =
        *reinterpret_cast<const float4*>(&As[k * T::kLdA + wm0 + T::WM / 2]);
    *reinterpret_cast<float4*>(&b[0]) = *reinterpret_cast<const float4*>(&Bs[k * T::BN + wn0]);
    *reinterpret_cast<float4*>(&b[4]) =
        *reinterpret_cast<const float4*>(&Bs[k * T::BN + wn0 + T::WN / 2]);
    outer_product(a, b, acc);
  }
}

template <class T, bool kVec>
__device__ __forceinline__ void store_outputs(const Epilogue& e, float* C, int M, int N, int bm,
                                              int bn, int wm0, int wn0, const float (&acc)[8][8]) {
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int m = bm + wm0 + (i / 4) * (T::WM / 2) + i % 4;
    store4<kVec>(e, C, M, N, m, bn + wn0, &acc[i][0]);
    store4<kVec>(e, C, M, N, m, bn + wn0 + T::WN / 2, &acc[i][4]);
  }
}

// v7: warp tiling, one shared-memory buffer: load, barrier, multiply, barrier.
template <class T, bool kVec>
__global__ void __launch_bounds__(T::kThreads, 2)
    v7_warptiling_kernel(int M, int N, int K, const float* __restrict__ A,
                         const float* __restrict__ B, float* __restrict__ C, Epilogue e) {
  __shared__ __align__(16) float As[T::kSmemA];
  __shared__ __align__(16) float Bs[T::kSmemB];
  const int bm = blockIdx.y * T::BM, bn = blockIdx.x * T::BN;
  int wm0, wn0;
  thread_origin<T>(wm0, wn0);
  float acc[8][8] = {};
  for (int k0 = 0; k0 < K; k0 += T::BK) {
    float4 ra[T::kALoads], rb[T::kBLoads];
    load_tiles<T, kVec>(A, B, M, N, K, bm, bn, k0, ra, rb);
    store_tiles<T>(As, Bs, ra, rb);
    __syncthreads();
    multiply_tile<T>(As, Bs, wm0, wn0, acc);
    __syncthreads();
  }
  store_outputs<T, kVec>(e, C, M, N, bm, bn, wm0, wn0, acc);
}

// v8: v7 plus double buffering. In v7 a warp waits for its global loads (hundreds of cycles)
// with nothing to do but hope other warps have math ready. Here the loads of tile t+1 are issued
// into registers BEFORE the math on tile t, so they are in flight while the FMAs run; then they
// go into the other shared-memory buffer. One barrier per tile suffices: buffer t+1 was last
// read during tile t-1, and every thread passed the barrier after that.
// The prefetch is unconditional on purpose: past the last tile the guards make it load nothing
// and store zeros into the idle buffer. Written as `if (more) load ... math ... if (more) store`,
// the compiler merges the two branches and issues the loads AFTER the math, undoing the overlap
// (visible in the SASS: cuobjdump -sass).
template <class T, bool kVec>
__global__ void __launch_bounds__(T::kThreads, 2)
    v8_double_buffering_kernel(int M, int N, int K, const float* __restrict__ A,
                               const float* __restrict__ B, float* __restrict__ C, Epilogue e) {
  __shared__ __align__(16) float As[2][T::kSmemA];
  __shared__ __align__(16) float Bs[2][T::kSmemB];
  const int bm = blockIdx.y * T::BM, bn = blockIdx.x * T::BN;
  int wm0, wn0;
  thread_origin<T>(wm0, wn0);
  float acc[8][8] = {};
  float4 ra[T::kALoads], rb[T::kBLoads];
  const int tiles = ceil_div(K, T::BK);
  if (tiles > 0) {
    load_tiles<T, kVec>(A, B, M, N, K, bm, bn, 0, ra, rb);
    store_tiles<T>(As[0], Bs[0], ra, rb);
  }
  __syncthreads();
  for (int t = 0; t < tiles; ++t) {
    const int cur = t & 1;
    load_tiles<T, kVec>(A, B, M, N, K, bm, bn, (t + 1) * T::BK, ra, rb);  // tile t+1 (in flight)
    multiply_tile<T>(As[cur], Bs[cur], wm0, wn0, acc);                    // tile t
    store_tiles<T>(As[cur ^ 1], Bs[cur ^ 1], ra, rb);
    __syncthreads();
  }
  store_outputs<T, kVec>(e, C, M, N, bm, bn, wm0, wn0, acc);
}

// ---------------------------------------------------------------- tensor cores: WMMA TF32

// A warp-wide matrix multiply-accumulate (Programming Guide, "Warp Matrix Functions"): each
// mma_sync multiplies a 16x8 tile of A by an 8x16 tile of B into a 16x16 FP32 accumulator on the
// tensor cores. Block tile 128x128, BK 32, 8 warps as 2 x 4, each warp 64x32 = 4 x 2 accumulator
// fragments. Inputs are rounded to TF32 (cvt.rna) as they are stored to shared memory.
// Accumulator fragments have an unspecified element layout, so the write-out goes through a
// 16x16 staging area in shared memory per warp, which also makes the edge guards easy.
// Single shared buffer; the next tile's global loads are in flight (registers) during the math.
// (BK = 32 and the rest are in the kernel body: they exist only where it is compiled, 80+.)
namespace wmma_cfg {
constexpr int BM = 128, BN = 128, kThreads = 256;
}  // namespace wmma_cfg

template <bool kVec>
__global__ void __launch_bounds__(wmma_cfg::kThreads)
    wmma_tf32_kernel(int M, int N, int K, const float* __restrict__ A, const float* __restrict__ B,
                     float* __restrict__ C, Epilogue e) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using namespace nvcuda;
  using namespace wmma_cfg;
  constexpr int BK = 32;
  constexpr int kLdA = BK + 8;  // padding; load_matrix_sync needs ldm % 4 == 0 and 32-byte
  constexpr int kLdB = BN + 8;  // aligned fragment pointers, which these keep
  constexpr int kALoads = BM * BK / 4 / kThreads;  // 4 float4 per thread per tile
  constexpr int kBLoads = BK * BN / 4 / kThreads;  // 4
  __shared__ __align__(128) float smem[BM * kLdA + BK * kLdB];
  float* As = smem;              // [BM][kLdA], row-major like A
  float* Bs = smem + BM * kLdA;  // [BK][kLdB]
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int bm = blockIdx.y * BM, bn = blockIdx.x * BN;
  const int wr = warp / 4, wc = warp % 4;  // warp tile at rows wr*64, columns wc*32

  wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc[4][2];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
  }
  float4 ra[kALoads], rb[kBLoads];
  const auto load = [&](int k0) {
#pragma unroll
    for (int p = 0; p < kALoads; ++p) {
      const int idx = tid + p * kThreads;
      ra[p] = load4<kVec>(A, bm + idx / (BK / 4), k0 + (idx % (BK / 4)) * 4, M, K);
    }
#pragma unroll
    for (int p = 0; p < kBLoads; ++p) {
      const int idx = tid + p * kThreads;
      rb[p] = load4<kVec>(B, k0 + idx / (BN / 4), bn + (idx % (BN / 4)) * 4, K, N);
    }
  };
  const auto tf32 = [](float4 v) {
    return make_float4(wmma::__float_to_tf32(v.x), wmma::__float_to_tf32(v.y),
                       wmma::__float_to_tf32(v.z), wmma::__float_to_tf32(v.w));
  };
  const int tiles = ceil_div(K, BK);
  if (tiles > 0) load(0);
  for (int t = 0; t < tiles; ++t) {
#pragma unroll
    for (int p = 0; p < kALoads; ++p) {
      const int idx = tid + p * kThreads;
      *reinterpret_cast<float4*>(&As[(idx / (BK / 4)) * kLdA + (idx % (BK / 4)) * 4]) = tf32(ra[p]);
    }
#pragma unroll
    for (int p = 0; p < kBLoads; ++p) {
      const int idx = tid + p * kThreads;
      *reinterpret_cast<float4*>(&Bs[(idx / (BN / 4)) * kLdB + (idx % (BN / 4)) * 4]) = tf32(rb[p]);
    }
    __syncthreads();
    load((t + 1) * BK);  // unconditional, as in v8: past K it loads nothing (zeros)
#pragma unroll
    for (int kk = 0; kk < BK; kk += 8) {
      wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> a[4];
      wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> b[2];
#pragma unroll
      for (int i = 0; i < 4; ++i)
        wmma::load_matrix_sync(a[i], As + (wr * 64 + i * 16) * kLdA + kk, kLdA);
#pragma unroll
      for (int j = 0; j < 2; ++j)
        wmma::load_matrix_sync(b[j], Bs + kk * kLdB + wc * 32 + j * 16, kLdB);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
      }
    }
    __syncthreads();  // the tile is consumed before the next one (or the staging) overwrites it
  }
  // Write-out through a per-warp 16x16 staging area (inside the A tile, no longer needed).
  float* stage = smem + warp * 256;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      wmma::store_matrix_sync(stage, acc[i][j], 16, wmma::mem_row_major);
      __syncwarp();
#pragma unroll
      for (int q = 0; q < 8; ++q) {
        const int el = lane + q * 32;
        const int m = bm + wr * 64 + i * 16 + el / 16, n = bn + wc * 32 + j * 16 + el % 16;
        if (m < M && n < N) store1(e, C, N, m, n, stage[el]);
      }
      __syncwarp();  // the staging area is read before the next fragment overwrites it
    }
  }
#elif defined(__CUDA_ARCH__)
  __trap();  // compiled for a GPU without TF32 tensor cores; the launcher refuses to get here
#endif
}

// ---------------------------------------------------------------- elementwise kernels

// The separate epilogue kernel of the unfused path: a memory-bound pass over C.
template <bool kVec>
__global__ void bias_activation_kernel(int M, int N, const float* __restrict__ bias, Activation act,
                                       float* __restrict__ C) {
  const std::size_t total = static_cast<std::size_t>(M) * N;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  const std::size_t first = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (kVec) {  // N % 4 == 0: four consecutive elements share a row
    for (std::size_t i = first; i < total / 4; i += stride) {
      float4 v = reinterpret_cast<float4*>(C)[i];
      const int n = static_cast<int>((i * 4) % N);
      v.x = activate(v.x + (bias ? bias[n] : 0.0f), act);
      v.y = activate(v.y + (bias ? bias[n + 1] : 0.0f), act);
      v.z = activate(v.z + (bias ? bias[n + 2] : 0.0f), act);
      v.w = activate(v.w + (bias ? bias[n + 3] : 0.0f), act);
      reinterpret_cast<float4*>(C)[i] = v;
    }
  } else {
    for (std::size_t i = first; i < total; i += stride) {
      C[i] = activate(C[i] + (bias ? bias[i % N] : 0.0f), act);
    }
  }
}

// A counter-based generator: splitmix64's finaliser of (seed, index). Stateless, so every
// thread computes its element independently and the data does not depend on the launch shape.
__device__ __forceinline__ float uniform01(std::uint64_t seed, std::uint64_t i) {
  std::uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (1.0f / 16777216.0f);  // 24 random bits: [0, 1)
}

__global__ void fill_uniform_kernel(float* data, std::size_t n, std::uint64_t seed, float lo,
                                    float hi) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const float v = lo + (hi - lo) * uniform01(seed, i);
    data[i] = v < hi ? v : lo;  // rounding can land on hi; keep the interval half-open
  }
}

// A grid for a grid-stride loop over `work` items: enough blocks to fill the GPU several times
// over, no more (each thread then handles several items).
unsigned grid_stride_blocks(std::size_t work, int threads) {
  const std::size_t wanted = (work + threads - 1) / threads;
  return static_cast<unsigned>(std::max<std::size_t>(1, std::min<std::size_t>(wanted, 65535)));
}

// ---------------------------------------------------------------- launch helpers

// Every GEMM kernel of the lesson has this signature (the epilogue carries alpha and beta).
using GemmKernel = void (*)(int M, int N, int K, const float* A, const float* B, float* C,
                            Epilogue e);

// Covers C with bm x bn tiles and launches `vec` when the float4 conditions hold, `scalar`
// otherwise (the same kernel twice when it has no float4 path).
void launch_tiled(const char* who, int M, int N, int K, const float* A, const float* B, float* C,
                  const Epilogue& e, cudaStream_t stream, int bm, int bn, dim3 block,
                  GemmKernel vec, GemmKernel scalar) {
  const dim3 grid = tile_grid(who, M, N, bm, bn);
  const GemmKernel kernel = can_vectorize(N, K, A, B, C) ? vec : scalar;
  kernel<<<grid, block, 0, stream>>>(M, N, K, A, B, C, e);
  CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_v8(int M, int N, int K, const float* A, const float* B, float* C, const Epilogue& e,
               cudaStream_t stream) {
  launch_tiled("sgemm_v8_double_buffering", M, N, K, A, B, C, e, stream, T::BM, T::BN, T::kThreads,
               v8_double_buffering_kernel<T, true>, v8_double_buffering_kernel<T, false>);
}

void launch_v8_config(TileConfig config, int M, int N, int K, const float* A, const float* B,
                      float* C, const Epilogue& e, cudaStream_t stream) {
  switch (config) {
    case TileConfig::bk8:
      return launch_v8<TileBk8>(M, N, K, A, B, C, e, stream);
    case TileConfig::bk16:
      return launch_v8<TileBk16>(M, N, K, A, B, C, e, stream);
  }
  throw std::invalid_argument("sgemm_v8: unknown tile configuration " +
                              std::to_string(static_cast<int>(config)));
}

}  // namespace

// ---------------------------------------------------------------- the launchers

void sgemm_v1_naive(int M, int N, int K, float alpha, const float* A, const float* B, float beta,
                    float* C, cudaStream_t stream) {
  if (!check_gemm_args("sgemm_v1_naive", M, N, K, A, B, C)) return;
  // 32 x 8 threads; x runs down the M rows (the uncoalesced mapping), y across the N columns.
  const dim3 block(32, 8);
  const dim3 swapped = tile_grid("sgemm_v1_naive", N, M, 8, 32);  // x: M / 32 blocks, y: N / 8
  naive_kernel<false><<<swapped, block, 0, stream>>>(M, N, K, A, B, C, plain(alpha, beta));
  CUDA_CHECK_LAUNCH();
}

void sgemm_v2_coalesced(int M, int N, int K, float alpha, const float* A, const float* B,
                        float beta, float* C, cudaStream_t stream) {
  if (!check_gemm_args("sgemm_v2_coalesced", M, N, K, A, B, C)) return;
  // 32 x 8 threads: x across 32 columns, y down 8 rows
  launch_tiled("sgemm_v2_coalesced", M, N, K, A, B, C, plain(alpha, beta), stream, 8, 32,
               dim3(32, 8), naive_kernel<true>, naive_kernel<true>);
}

void sgemm_v3_smem_tiling(int M, int N, int K, float alpha, const float* A, const float* B,
                          float beta, float* C, cudaStream_t stream) {
  if (!check_gemm_args("sgemm_v3_smem_tiling", M, N, K, A, B, C)) return;
  launch_tiled("sgemm_v3_smem_tiling", M, N, K, A, B, C, plain(alpha, beta), stream, kTile3, kTile3,
               dim3(kTile3, kTile3), v3_smem_tiling_kernel, v3_smem_tiling_kernel);
}

void sgemm_v4_1d_blocktiling(int M, int N, int K, float alpha, const float* A, const float* B,
                             float beta, float* C, cudaStream_t stream) {
  if (!check_gemm_args("sgemm_v4_1d_blocktiling", M, N, K, A, B, C)) return;
  launch_tiled("sgemm_v4_1d_blocktiling", M, N, K, A, B, C, plain(alpha, beta), stream, v4::BM,
               v4::BN, v4::kThreads, v4_1d_blocktiling_kernel, v4_1d_blocktiling_kernel);
}

void sgemm_v5_2d_blocktiling(int M, int N, int K, float alpha, const float* A, const float* B,
                             float beta, float* C, cudaStream_t stream) {
  if (!check_gemm_args("sgemm_v5_2d_blocktiling", M, N, K, A, B, C)) return;
  launch_tiled("sgemm_v5_2d_blocktiling", M, N, K, A, B, C, plain(alpha, beta), stream, v5::BM,
               v5::BN, v5::kThreads, v5_2d_blocktiling_kernel, v5_2d_blocktiling_kernel);
}

void sgemm_v6_vectorized(int M, int N, int K, float alpha, const float* A, const float* B,
                         float beta, float* C, cudaStream_t stream) {
  if (!check_gemm_args("sgemm_v6_vectorized", M, N, K, A, B, C)) return;
  launch_tiled("sgemm_v6_vectorized", M, N, K, A, B, C, plain(alpha, beta), stream, v5::BM, v5::BN,
               v5::kThreads, v6_vectorized_kernel<true>, v6_vectorized_kernel<false>);
}

void sgemm_v7_warptiling(int M, int N, int K, float alpha, const float* A, const float* B,
                         float beta, float* C, cudaStream_t stream) {
  if (!check_gemm_args("sgemm_v7_warptiling", M, N, K, A, B, C)) return;
  using T = TileBk8;
  launch_tiled("sgemm_v7_warptiling", M, N, K, A, B, C, plain(alpha, beta), stream, T::BM, T::BN,
               T::kThreads, v7_warptiling_kernel<T, true>, v7_warptiling_kernel<T, false>);
}

void sgemm_v8_tile_config(TileConfig config, int M, int N, int K, float alpha, const float* A,
                          const float* B, float beta, float* C, cudaStream_t stream) {
  if (!check_gemm_args("sgemm_v8_double_buffering", M, N, K, A, B, C)) return;
  launch_v8_config(config, M, N, K, A, B, C, plain(alpha, beta), stream);
}

void sgemm_v8_double_buffering(int M, int N, int K, float alpha, const float* A, const float* B,
                               float beta, float* C, cudaStream_t stream) {
  sgemm_v8_tile_config(kDefaultTileConfig, M, N, K, alpha, A, B, beta, C, stream);
}

const std::vector<SgemmVersion>& sgemm_versions() {
  static const std::vector<SgemmVersion> versions = {
      {1, "v1_naive", "one thread per output; lanes walk down a column: uncoalesced",
       sgemm_v1_naive},
      {2, "v2_coalesced", "lanes walk along a row: coalesced B and C, broadcast A",
       sgemm_v2_coalesced},
      {3, "v3_smem_tiling", "32x32 tiles of A and B staged in shared memory", sgemm_v3_smem_tiling},
      {4, "v4_1d_blocktiling", "8 outputs per thread: one shared load feeds 8 FMAs",
       sgemm_v4_1d_blocktiling},
      {5, "v5_2d_blocktiling", "8x8 outputs per thread: 16 shared loads feed 64 FMAs",
       sgemm_v5_2d_blocktiling},
      {6, "v6_vectorized", "float4 loads and stores; A tile transposed in shared memory",
       sgemm_v6_vectorized},
      {7, "v7_warptiling", "warp tiles and 4x4 thread pieces: conflict-free shared loads",
       sgemm_v7_warptiling},
      {8, "v8_double_buffering", "next tile's loads in flight during the math; 2 buffers",
       sgemm_v8_double_buffering},
  };
  return versions;
}

const SgemmVersion& sgemm_version(int number) {
  for (const SgemmVersion& v : sgemm_versions()) {
    if (v.number == number) return v;
  }
  throw std::invalid_argument("unknown SGEMM version " + std::to_string(number) + " (expected 1.." +
                              std::to_string(sgemm_versions().size()) + ")");
}

// ---------------------------------------------------------------- fused epilogue

void sgemm_bias_act(int M, int N, int K, float alpha, const float* A, const float* B, float beta,
                    const float* bias, Activation act, float* C, cudaStream_t stream) {
  check_activation("sgemm_bias_act", act);
  if (!check_gemm_args("sgemm_bias_act", M, N, K, A, B, C)) return;
  launch_v8_config(kDefaultTileConfig, M, N, K, A, B, C, Epilogue{alpha, beta, bias, act}, stream);
}

void bias_activation(int M, int N, const float* bias, Activation act, float* C,
                     cudaStream_t stream) {
  check_activation("bias_activation", act);
  if (M < 0 || N < 0) {
    throw std::invalid_argument("bias_activation: M and N must be >= 0, got M=" +
                                std::to_string(M) + ", N=" + std::to_string(N));
  }
  if (M == 0 || N == 0) return;
  if (C == nullptr) throw std::invalid_argument("bias_activation: C must not be null");
  constexpr int kThreads = 256;
  const std::size_t total = static_cast<std::size_t>(M) * N;
  if (N % 4 == 0 && aligned16(C)) {
    bias_activation_kernel<true>
        <<<grid_stride_blocks(total / 4, kThreads), kThreads, 0, stream>>>(M, N, bias, act, C);
  } else {
    bias_activation_kernel<false>
        <<<grid_stride_blocks(total, kThreads), kThreads, 0, stream>>>(M, N, bias, act, C);
  }
  CUDA_CHECK_LAUNCH();
}

// ---------------------------------------------------------------- tensor cores

bool wmma_tf32_available(std::string* why_not) {
  int device = 0, major = 0, minor = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  std::string reason;
  if (major < 8) {
    reason = "TF32 tensor cores need compute capability 8.0 (Ampere) or newer; this GPU is " +
             std::to_string(major) + "." + std::to_string(minor);
  } else {
    // The architecture the kernel's code was compiled for: the no-GPU build is PTX for
    // compute_75, in which the WMMA body is compiled out (it would trap).
    cudaFuncAttributes attr{};
    CUDA_CHECK(cudaFuncGetAttributes(&attr, wmma_tf32_kernel<true>));
    if (attr.ptxVersion < 80) {
      reason = "this binary's WMMA kernel was compiled for compute_" +
               std::to_string(attr.ptxVersion) +
               ", which has no TF32 tensor cores; rebuild with CMAKE_CUDA_ARCHITECTURES=" +
               std::to_string(major * 10 + minor) + " (or any 80 or newer)";
    }
  }
  if (why_not != nullptr) *why_not = reason;
  return reason.empty();
}

void sgemm_wmma_tf32(int M, int N, int K, float alpha, const float* A, const float* B, float beta,
                     float* C, cudaStream_t stream) {
  if (!check_gemm_args("sgemm_wmma_tf32", M, N, K, A, B, C)) return;
  std::string why;
  if (!wmma_tf32_available(&why)) throw std::runtime_error("sgemm_wmma_tf32: " + why);
  launch_tiled("sgemm_wmma_tf32", M, N, K, A, B, C, plain(alpha, beta), stream, wmma_cfg::BM,
               wmma_cfg::BN, wmma_cfg::kThreads, wmma_tf32_kernel<true>, wmma_tf32_kernel<false>);
}

// ---------------------------------------------------------------- cuBLAS

namespace {
const char* basename_of(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}

void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS) throw CublasError(status, call, file, line);
}
}  // namespace

#define CUBLAS_CHECK(call) check_cublas((call), #call, __FILE__, __LINE__)

CublasError::CublasError(cublasStatus_t status, const char* call, const char* file, int line)
    : std::runtime_error(std::string(call) + " failed at " + basename_of(file) + ":" +
                         std::to_string(line) + ": " + cublasGetStatusName(status) + " (" +
                         cublasGetStatusString(status) + ")"),
      status_(status) {}

CublasHandle::CublasHandle() {
  CUBLAS_CHECK(cublasCreate(&handle_));
  // Pin the math mode: with CUBLAS_DEFAULT_MATH, cublasSgemm keeps FP32 precision throughout (no
  // TF32 tensor cores). CUBLAS_TF32_TENSOR_OP_MATH would let it round the inputs to TF32.
  const cublasStatus_t status = cublasSetMathMode(handle_, CUBLAS_DEFAULT_MATH);
  if (status != CUBLAS_STATUS_SUCCESS) {
    cublasDestroy(handle_);
    handle_ = nullptr;
    CUBLAS_CHECK(status);
  }
}

CublasHandle::~CublasHandle() {
  if (handle_ != nullptr) cublasDestroy(handle_);  // a destructor must not throw
}

CublasHandle::CublasHandle(CublasHandle&& other) noexcept : handle_(other.handle_) {
  other.handle_ = nullptr;
}

CublasHandle& CublasHandle::operator=(CublasHandle&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) cublasDestroy(handle_);
    handle_ = other.handle_;
    other.handle_ = nullptr;
  }
  return *this;
}

void cublas_sgemm(const CublasHandle& handle, int M, int N, int K, float alpha, const float* A,
                  const float* B, float beta, float* C, cudaStream_t stream) {
  if (!check_gemm_args("cublas_sgemm", M, N, K, A, B, C)) return;
  CUBLAS_CHECK(cublasSetStream(handle.get(), stream));
  // Column-major view of our row-major arrays: C is C^T (N x M, ld N), B is B^T (N x K, ld N),
  // A is A^T (K x M, ld K). C^T = B^T A^T, so the first operand is B and the second A. cuBLAS
  // wants ld >= 1 even when K == 0.
  CUBLAS_CHECK(cublasSgemm(handle.get(), CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &alpha, B, N, A,
                           std::max(K, 1), &beta, C, N));
}

void cublas_gemm_tf32(const CublasHandle& handle, int M, int N, int K, float alpha, const float* A,
                      const float* B, float beta, float* C, cudaStream_t stream) {
  if (!check_gemm_args("cublas_gemm_tf32", M, N, K, A, B, C)) return;
  CUBLAS_CHECK(cublasSetStream(handle.get(), stream));
  CUBLAS_CHECK(cublasGemmEx(handle.get(), CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &alpha, B, CUDA_R_32F,
                            N, A, CUDA_R_32F, std::max(K, 1), &beta, C, CUDA_R_32F, N,
                            CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT));
}

// ---------------------------------------------------------------- test data and the CPU oracle

void fill_uniform(float* data, std::size_t n, std::uint64_t seed, float lo, float hi,
                  cudaStream_t stream) {
  if (n == 0) return;
  if (data == nullptr) throw std::invalid_argument("fill_uniform: data must not be null");
  if (!(lo < hi)) throw std::invalid_argument("fill_uniform: need lo < hi");
  constexpr int kThreads = 256;
  fill_uniform_kernel<<<grid_stride_blocks(n, kThreads), kThreads, 0, stream>>>(data, n, seed, lo,
                                                                                hi);
  CUDA_CHECK_LAUNCH();
}

double reference_dot(int N, int K, const float* A, const float* B, int m, int n, double* abs_sum) {
  double sum = 0.0, abs = 0.0;
  const float* a = A + static_cast<std::size_t>(m) * K;
  for (int k = 0; k < K; ++k) {
    const double p = static_cast<double>(a[k]) * B[static_cast<std::size_t>(k) * N + n];
    sum += p;
    abs += std::fabs(p);
  }
  if (abs_sum != nullptr) *abs_sum = abs;
  return sum;
}

namespace {
double activate_double(double x, Activation act) {
  switch (act) {
    case Activation::relu:
      return x > 0.0 ? x : 0.0;
    case Activation::silu:
      return x / (1.0 + std::exp(-x));
    default:
      return x;
  }
}
}  // namespace

void sgemm_reference(int M, int N, int K, float alpha, const float* A, const float* B, float beta,
                     const float* C, const float* bias, Activation act, double* out,
                     double* abs_sum) {
  if (M < 0 || N < 0 || K < 0) {
    throw std::invalid_argument("sgemm_reference: M, N and K must be >= 0, got " +
                                shape_text(M, N, K));
  }
  for (int m = 0; m < M; ++m) {
    for (int n = 0; n < N; ++n) {
      const std::size_t i = static_cast<std::size_t>(m) * N + n;
      double s = 0.0;
      double v = static_cast<double>(alpha) * reference_dot(N, K, A, B, m, n, &s);
      if (beta != 0.0f) v += static_cast<double>(beta) * C[i];
      if (bias != nullptr) v += bias[n];
      out[i] = activate_double(v, act);
      if (abs_sum != nullptr) abs_sum[i] = s;
    }
  }
}

double gemm_error_bound(int K, double alpha, double abs_sum, double beta, double c_old, double bias,
                        double input_rounding) {
  const double scale = std::fabs(alpha) * abs_sum;
  const double rest = (beta != 0.0 ? std::fabs(beta * c_old) : 0.0) + std::fabs(bias);
  // A tiny absolute term keeps the bound positive when every term is 0.
  return input_rounding * scale + (K + 3) * kFp32UnitRoundoff * (scale + rest) + 1e-37;
}

double activation_error_bound(Activation act, double bound_before, double exact_result) {
  switch (act) {
    case Activation::relu:
      return bound_before;
    case Activation::silu:  // |silu'| <= 1.1; expf and the division add a few ulp
      return 1.1 * bound_before + 8.0 * kFp32UnitRoundoff * std::fabs(exact_result) + 1e-37;
    default:
      return bound_before;
  }
}

}  // namespace lesson07

// The exercise solutions (solutions.cuh): compiled here, in this translation unit, by the
// lesson build only; the exercise build takes exercise.cu instead. Try the exercises first.
#ifndef LESSON_EXERCISE_BUILD
#include "solutions.cuh"
#endif
