// Lesson 12: the engine's kernels. Device code only: compiled on its own into a fatbinary that the
// plan carries (engine_kernels.cuh says why), so every kernel is extern "C" and takes one struct
// by value. The host side (the table of what each kernel needs, the launch geometry) is
// engine_kernels_table.cpp.
//
//   conv_igemm_mma_f16_<M>x<N>   implicit GEMM on tensor cores: GEMM M = output pixels, N = output
//                                channels, K = kernel^2 * in_c ordered (r, s, c), so a weight row
//                                [out_c][K] is contiguous: B's "col" layout for mma.m16n8k16.
//                                A tiles gathered from the NHWC input with cp.async (16 bytes = 8
//                                channels of one tap; padding taps and tails zero-filled through
//                                the src-size operand), a 3-stage ring, ldmatrix from padded rows,
//                                the fused epilogue (bias, SiLU, residual). Nine tiles of one
//                                template, for 6..256 output channels and batch 1..32
//   conv_igemm_mma_f16_<M>x<N>_splitk<S>  the same with K split over a cluster of S blocks,
//                                whose partial tiles are summed in distributed shared memory
//   conv_igemm_simt_f32_<M>x<N>  the FP32 implicit GEMM on CUDA cores: float4 gathers, register
//                                micro-tiles (lesson 07), double-buffered shared memory
//   conv_direct_{f16,f32}        one thread per output pixel and 8 output channels, any in_c,
//                                weights staged in shared memory (K <= kDirectMaxK)
//   conv_first_nchw_{f16,f32}    the same reading the float NCHW network input: the first layer,
//                                with the NCHW -> NHWC change fused into it
//   max_pool_nhwc_{f16,f32}      k x k max pool, padding never wins; 8 channels per thread
//   upsample2x_nhwc_{f16,f32}    nearest x2; 8 channels per thread
//   detect_decode_{f16,f32}      DFL softmax + expectation, dist2bbox, sigmoid: [B, 4 + C, N]
//   bias_act_nhwc_{f16,f32}      the cuDNN tactic's epilogue (epilogue_kernels.cuh)
//
// mma.sync.m16n8k16 with FP16 and cp.async need compute capability 8.0: those kernels are
// compiled only for compute_80 and newer and trap elsewhere (the compute_75 PTX of the build);
// the table's min_sm tells the builder not to time them there.
#include <cooperative_groups.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

#include "engine_kernels.cuh"
#include "ptx_wrappers.cuh"

namespace lesson12 {
namespace {

// ---------------------------------------------------------------- element access

__device__ __forceinline__ float load_f(const float* p) {
  return *p;
}
__device__ __forceinline__ float load_f(const __half* p) {
  return __half2float(*p);
}
__device__ __forceinline__ void store_f(float* p, float v) {
  *p = v;
}
__device__ __forceinline__ void store_f(__half* p, float v) {
  *p = __float2half_rn(v);
}

__device__ __forceinline__ float silu(float v) {
  return v / (1.0f + __expf(-v));
}

// Programmatic dependent launch (PDL, compute capability 9.0; CUDA Programming Guide,
// "Programmatic Dependent Launch and Synchronization"). The runtime launches each course kernel
// with the programmatic-stream-serialization attribute, so the next kernel of the network may be
// launched before this one has finished:
//   pdl_wait     (griddepcontrol.wait) blocks until the previous kernel has completed and its
//                memory writes are visible. Every kernel here calls it first, before any global
//                memory access: it never reads an input still being written, nor overwrites a
//                buffer the previous kernel still reads (the memory planner reuses buffers)
//   pdl_trigger  (griddepcontrol.launch_dependents) this block lets the next kernel launch; once
//                every block of the grid has said so (or exited), the next kernel's blocks are
//                scheduled onto the SMs this grid frees and wait there, instead of being launched
//                after the grid has ended. Called after a kernel's main loop, not at its start:
//                triggered at the start, every kernel whose blocks all fit launched at once, down
//                the network, and their waiting blocks took SM slots from the kernel doing the
//                work (H200, the whole network in a graph at batch 1: 597 us, against 513 us
//                without PDL; triggered here, 538 against 509: PDL is an option, off by default)
// Launched without the attribute (the default, the builder's timing, older GPUs), both are no-ops.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

__device__ __forceinline__ bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

// Eight consecutive elements as float, one 16-byte access (FP16) or two (FP32); p 16-byte aligned.
__device__ __forceinline__ void load8(const __half* p, float* v) {
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  const __half2* h = reinterpret_cast<const __half2*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __half22float2(h[i]);
    v[2 * i] = f.x, v[2 * i + 1] = f.y;
  }
}
__device__ __forceinline__ void load8(const float* p, float* v) {
  const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
__device__ __forceinline__ void store8(__half* p, const float* v) {
  uint4 u;
  __half2* h = reinterpret_cast<__half2*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = __floats2half2_rn(v[2 * i], v[2 * i + 1]);
  *reinterpret_cast<uint4*>(p) = u;
}
__device__ __forceinline__ void store8(float* p, const float* v) {
  reinterpret_cast<float4*>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
  reinterpret_cast<float4*>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
}

// Output pixel m (the GEMM row) -> image, row, column.
struct Pixel {
  int n, y, x;
};
__device__ __forceinline__ Pixel pixel_of(int m, int h, int w) {
  const int x = m % w, t = m / w;
  return {t / h, t % h, x};
}

// The fused epilogue of one output element: act(acc + bias) (+ residual), in float.
template <class T>
__device__ __forceinline__ float epilogue_value(const ConvArgs& a, float acc, long long m, int n) {
  float v = acc + (a.bias != nullptr ? a.bias[n] : 0.0f);
  if (a.act == 1) v = silu(v);
  if (a.res != nullptr) v += load_f(static_cast<const T*>(a.res) + m * a.res_stride + n);
  return v;
}

// ---------------------------------------------------------------- PTX wrappers (sm_80+)
// cp.async and ldmatrix: ptx_wrappers.cuh (shared with lesson 13's INT8 kernel). The FP16 mma is
// this file's own.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800

// D = A * B + D, m16n8k16, FP16 inputs, FP32 accumulators. Fragment layouts: lesson 10's
// mma_a_element / mma_b_element / mma_c_element (tensor_gemm.cuh).
__device__ __forceinline__ void mma_16816(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                          unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
#endif  // __CUDA_ARCH__ >= 800

// ---------------------------------------------------------------- 1. implicit GEMM, tensor cores
//
// Block tile BM pixels x BN channels, WARPS_M x WARPS_N warps of WM x WN (MI m16 fragments, NJ n8
// fragments each). Shared memory per stage: A as BM rows of kMmaRowHalves halves (row = pixel,
// 32 k values + 8 of padding), B as BN rows (row = output channel): both "K contiguous", which is
// what ldmatrix without .trans turns into mma's A (row) and B (col) fragments:
//   A: lane l points at row l % 16, k 8 (l / 16) of the m16 x k16 block: matrices 0..3 are the
//      quadrants (rows 0-7 | 8-15) x (k 0-7 | 8-15) = registers a0..a3.
//   B: lane l points at channel 8 ((l / 16) & 1) + l % 8, k 8 ((l / 8) & 1): matrix 0 = channels
//      0-7, k 0-7 (b0 of fragment n0), 1 = k 8-15 (b1 of n0), 2 and 3 the same for channels 8-15.
//      A lane then holds channel l / 4, k 2 (l % 4) + {0, 1}: exactly mma's b0/b1.
// cp.async: 16-byte chunk (row, kc) of a stage goes to row * 80 + kc * 16 bytes; a thread copies
// chunks with kc = tid % 4 (fixed) in rows tid / 4 + p * (threads / 4).
template <int BM, int BN, int WARPS_M, int WARPS_N>
struct MmaTile {
  static constexpr int kThreads = WARPS_M * WARPS_N * 32;
  static constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;
  static constexpr int MI = WM / 16, NJ = WN / 8;
  static constexpr int BK = kMmaBK, LD = kMmaRowHalves, kStages = kMmaStages;
  static constexpr int kRowsPerPass = kThreads / (BK / 8);
  static constexpr int kAPasses = BM / kRowsPerPass;
  static constexpr int kBPasses = (BN + kRowsPerPass - 1) / kRowsPerPass;
  static constexpr int kAStageBytes = BM * LD * 2, kBStageBytes = BN * LD * 2;
  static constexpr int kSmemBytes = kStages * (kAStageBytes + kBStageBytes);
  static_assert(WM % 16 == 0 && WN % 16 == 0, "warp tile: m16 fragments, pairs of n8 fragments");
  static_assert(BM % kRowsPerPass == 0, "every thread copies the same number of A chunks");
  static_assert(kSmemBytes == mma_smem_bytes(BM, BN), "the table's shared memory");
};

// SPLIT > 1: split-K over a thread-block cluster of SPLIT blocks along z (compute capability 9.0;
// the launch sets the cluster shape, launch_conv_kernel). Block z of the cluster reduces its own
// share of the K slices; then the partial tiles meet in distributed shared memory (CUDA
// Programming Guide, "Distributed Shared Memory"): each block writes its accumulators into its
// shared memory, the cluster synchronises, and block 0 adds the others' in rank order (a fixed
// order: the result does not depend on which block finished first) and runs the epilogue. No
// global workspace, no atomics, no second kernel: more blocks for the layers whose M x N has too
// few tiles to fill the GPU (a 20x20 map at batch 1 is 400 output pixels, K up to 1152).
template <int BM, int BN, int WARPS_M, int WARPS_N, int SPLIT = 1>
__device__ __forceinline__ void conv_igemm_mma(const ConvArgs& a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using Cfg = MmaTile<BM, BN, WARPS_M, WARPS_N>;
  constexpr int BK = Cfg::BK, LD = Cfg::LD, kStages = Cfg::kStages;
  constexpr int MI = Cfg::MI, NJ = Cfg::NJ, kRowsPerPass = Cfg::kRowsPerPass;
  extern __shared__ __align__(16) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int M = a.batch * a.out_h * a.out_w;
  const int K = a.kernel * a.kernel * a.in_c;
  // With fewer K slices than stages only the first stages are ever used: the launch allocates
  // just those (conv_smem_bytes), and B's stages follow them.
  const unsigned sA = smem_u32(smem), sB = sA + mma_stages_used(K) * Cfg::kAStageBytes;
  const int bm = blockIdx.x * BM, bn = blockIdx.y * BN;
  const __half* x = static_cast<const __half*>(a.x);
  const __half* w = static_cast<const __half*>(a.w);

  // This thread's A rows (output pixels): where its receptive field starts and the element
  // offset of that corner. A row past M gets a corner no tap can reach (never read).
  const int kc = tid & 3, row0 = tid >> 2;
  int a_iy[Cfg::kAPasses], a_ix[Cfg::kAPasses];
  long long a_base[Cfg::kAPasses];
#pragma unroll
  for (int p = 0; p < Cfg::kAPasses; ++p) {
    const int m = bm + row0 + p * kRowsPerPass;
    if (m < M) {
      const Pixel px = pixel_of(m, a.out_h, a.out_w);
      a_iy[p] = px.y * a.stride - a.pad;
      a_ix[p] = px.x * a.stride - a.pad;
      a_base[p] = ((static_cast<long long>(px.n) * a.in_h + a_iy[p]) * a.in_w + a_ix[p]) *
                  static_cast<long long>(a.x_stride);
    } else {
      a_iy[p] = a_ix[p] = -(1 << 29);
      a_base[p] = 0;
    }
  }
  const unsigned a_store = sA + mma_tile_offset(row0, kc * 8);
  const unsigned b_store = sB + mma_tile_offset(row0, kc * 8);

  // K slice t into stage s: chunk kc of each row is k = 32 t + 8 kc, i.e. tap (r, s) and
  // channels c .. c + 7 of it (in_c % 8 == 0: a chunk never straddles two taps).
  const auto load_tile = [&](int t, int s) {
    const int k = t * BK + kc * 8;
    const bool k_ok = k < K;
    const ConvTap tp = conv_tap(k, a.in_c, a.kernel);
    const int r = tp.r, q = tp.s;
    const long long tap_off = (static_cast<long long>(r) * a.in_w + q) * a.x_stride + tp.c;
#pragma unroll
    for (int p = 0; p < Cfg::kAPasses; ++p) {
      const bool ok = k_ok && static_cast<unsigned>(a_iy[p] + r) < static_cast<unsigned>(a.in_h) &&
                      static_cast<unsigned>(a_ix[p] + q) < static_cast<unsigned>(a.in_w);
      cp_async_ca16(a_store + s * Cfg::kAStageBytes + p * kRowsPerPass * LD * 2,
                    ok ? x + a_base[p] + tap_off : x, ok ? 16 : 0);
    }
#pragma unroll
    for (int p = 0; p < Cfg::kBPasses; ++p) {
      const int row = row0 + p * kRowsPerPass;
      if (BN % kRowsPerPass == 0 || row < BN) {
        const int n = bn + row;
        const bool ok = k_ok && n < a.out_c;
        cp_async_cg16(b_store + s * Cfg::kBStageBytes + p * kRowsPerPass * LD * 2,
                      ok ? w + static_cast<long long>(n) * K + k : w, ok ? 16 : 0);
      }
    }
  };

  // ldmatrix bases of this lane (stage 0, k step 0).
  const int wm0 = (warp / WARPS_N) * Cfg::WM, wn0 = (warp % WARPS_N) * Cfg::WN;
  const TileRC la = mma_ldmatrix_a(lane), lb = mma_ldmatrix_b(lane);
  const unsigned a_ld = sA + mma_tile_offset(wm0 + la.row, la.col);
  const unsigned b_ld = sB + mma_tile_offset(wn0 + lb.row, lb.col);

  float acc[MI][NJ][4];
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NJ; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  // The ring (lesson 10's pipeline_stage / pipeline_tile_issued): slices 0..kStages-2 in flight
  // before the loop; iteration t waits for slice t (wait_group kStages - 2: the groups committed
  // after it may still be in flight), then one barrier both publishes slice t to every warp and
  // proves every warp has finished slice t - 1, whose stage slice t + kStages - 1 then reuses.
  // Split-K: this block's slices are [t0, t0 + tiles) of all K slices (possibly none).
  const int all_tiles = (K + BK - 1) / BK;
  int t0 = 0, tiles = all_tiles;
  if (SPLIT > 1) {
    const int per = (all_tiles + SPLIT - 1) / SPLIT;
    t0 = min(all_tiles, static_cast<int>(blockIdx.z) * per);
    tiles = min(all_tiles, t0 + per) - t0;
  }
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < tiles) load_tile(t0 + s, s);
    cp_async_commit();  // empty groups past the last slice keep the count regular
  }
  int read = 0, write = kStages - 1;
  for (int t = 0; t < tiles; ++t) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    if (t + kStages - 1 < tiles) load_tile(t0 + t + kStages - 1, write);
    cp_async_commit();

    const unsigned as = a_ld + read * Cfg::kAStageBytes, bs = b_ld + read * Cfg::kBStageBytes;
#pragma unroll
    for (int ks = 0; ks < BK / 16; ++ks) {
      unsigned af[MI][4], bf[NJ][2];
#pragma unroll
      for (int i = 0; i < MI; ++i) ldmatrix_x4(af[i], as + mma_tile_offset(i * 16, ks * 16));
#pragma unroll
      for (int j = 0; j < NJ / 2; ++j) {
        unsigned r[4];
        ldmatrix_x4(r, bs + mma_tile_offset(j * 16, ks * 16));
        bf[2 * j][0] = r[0], bf[2 * j][1] = r[1];
        bf[2 * j + 1][0] = r[2], bf[2 * j + 1][1] = r[3];
      }
#pragma unroll
      for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NJ; ++j) mma_16816(acc[i][j], af[i], bf[j][0], bf[j][1]);
    }
    read = read + 1 == kStages ? 0 : read + 1;
    write = write + 1 == kStages ? 0 : write + 1;
  }
  cp_async_wait<0>();  // only empty groups remain: nothing in flight when the block exits
  if constexpr (SPLIT > 1) {
#if __CUDA_ARCH__ >= 900
    // The ring is free once every warp has left the loop; it becomes this block's partial tile,
    // element r of thread tid at [r][tid] (consecutive threads, consecutive words).
    constexpr int R = MI * NJ * 4;
    static_assert(R * Cfg::kThreads * 4 == BM * BN * 4, "one float per tile element");
    __syncthreads();
    float* part = reinterpret_cast<float*>(smem);
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
      for (int j = 0; j < NJ; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          part[((i * NJ + j) * 4 + e) * Cfg::kThreads + tid] = acc[i][j][e];
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();  // every block's partial tile is written and visible to the cluster
    const unsigned rank = cluster.block_rank();
    if (rank == 0) {
      for (int peer = 1; peer < SPLIT; ++peer) {
        const float* other = cluster.map_shared_rank(part, peer);
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
          for (int j = 0; j < NJ; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e)
              acc[i][j][e] += other[((i * NJ + j) * 4 + e) * Cfg::kThreads + tid];
      }
    }
    cluster.sync();  // a block's shared memory must outlive block 0's reads of it
    if (rank != 0) return;
#else
    __trap();  // clusters need compute capability 9.0: the table's min_sm keeps the builder away
#endif
  }
  pdl_trigger();  // only the epilogue is left: the next layer may launch

  // Epilogue: accumulators (0, 1) and (2, 3) are channels n, n + 1 of rows group and group + 8
  // (mma_c_element). Output pixel m is NHWC row m: y[m * y_stride + n]. Two channels are one
  // 4-byte store when y (and the residual) allow it.
  __half* y = static_cast<__half*>(a.y);
  const __half* res = static_cast<const __half*>(a.res);
  const bool pairs =
      (a.y_stride % 2 == 0) && (reinterpret_cast<uintptr_t>(y) % 4 == 0) &&
      (res == nullptr || (a.res_stride % 2 == 0 && reinterpret_cast<uintptr_t>(res) % 4 == 0));
  const int group = lane >> 2, t4 = lane & 3;
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int m = bm + wm0 + i * 16 + group + h * 8;
      if (m >= M) continue;
#pragma unroll
      for (int j = 0; j < NJ; ++j) {
        const int n = bn + wn0 + j * 8 + 2 * t4;
        if (n >= a.out_c) continue;
        const long long mm = m;
        float v0 = acc[i][j][2 * h] + (a.bias != nullptr ? a.bias[n] : 0.0f);
        if (pairs && n + 1 < a.out_c) {
          float v1 = acc[i][j][2 * h + 1] + (a.bias != nullptr ? a.bias[n + 1] : 0.0f);
          if (a.act == 1) v0 = silu(v0), v1 = silu(v1);
          if (res != nullptr) {
            const float2 r =
                __half22float2(*reinterpret_cast<const __half2*>(res + mm * a.res_stride + n));
            v0 += r.x, v1 += r.y;
          }
          *reinterpret_cast<__half2*>(y + mm * a.y_stride + n) = __floats2half2_rn(v0, v1);
        } else {
          y[mm * a.y_stride + n] =
              __float2half_rn(epilogue_value<__half>(a, acc[i][j][2 * h], mm, n));
          if (n + 1 < a.out_c)
            y[mm * a.y_stride + n + 1] =
                __float2half_rn(epilogue_value<__half>(a, acc[i][j][2 * h + 1], mm, n + 1));
        }
      }
    }
#elif defined(__CUDA_ARCH__)
  __trap();  // compiled for a GPU without mma.m16n8k16 / cp.async: the builder skips it (min_sm)
#endif
}

// ---------------------------------------------------------------- 2. implicit GEMM, FP32 SIMT
//
// Lesson 07's register tiling on the implicit GEMM: block tile BM x BN, K slices of 16, each
// thread a TM x TN micro-tile. Shared memory holds the slices K-major (As[k][m], Bs[k][n]) so a
// thread reads its TM pixels and TN channels as float4s; two buffers, one barrier per slice: the
// next slice's global loads are issued into registers before this slice's FMAs and stored
// after them, into the buffer the previous slice used.
// Loads: float4 = 4 channels of one tap (in_c % 4 == 0). A thread copies A rows m = tid % BM
// (fixed) at k chunks tid / BM + p * threads / BM, B rows n = tid % BN likewise.
template <int BM, int BN, int TM, int TN>
struct SimtTile {
  static constexpr int BK = 16;
  static constexpr int kThreads = (BM / TM) * (BN / TN);
  static constexpr int kAPasses = BM * BK / 4 / kThreads, kBPasses = BN * BK / 4 / kThreads;
  static_assert(kThreads % BM == 0 && kThreads % BN == 0, "fixed rows per thread");
  static_assert(kAPasses >= 1 && kBPasses >= 1, "every thread copies A and B");
  static_assert(TM % 4 == 0 && TN % 4 == 0, "float4 reads of the micro-tile");
};

template <int BM, int BN, int TM, int TN>
__device__ __forceinline__ void conv_igemm_simt(const ConvArgs& a) {
  using Cfg = SimtTile<BM, BN, TM, TN>;
  constexpr int BK = Cfg::BK, kThreads = Cfg::kThreads;
  __shared__ __align__(16) float As[2][BK][BM];
  __shared__ __align__(16) float Bs[2][BK][BN];

  const int tid = threadIdx.x;
  const int M = a.batch * a.out_h * a.out_w;
  const int K = a.kernel * a.kernel * a.in_c;
  const int bm = blockIdx.x * BM, bn = blockIdx.y * BN;
  const float* x = static_cast<const float*>(a.x);
  const float* w = static_cast<const float*>(a.w);

  const int am = tid % BM, akc0 = tid / BM;
  int a_iy, a_ix;
  long long a_base = 0;
  {
    const int m = bm + am;
    if (m < M) {
      const Pixel px = pixel_of(m, a.out_h, a.out_w);
      a_iy = px.y * a.stride - a.pad;
      a_ix = px.x * a.stride - a.pad;
      a_base = ((static_cast<long long>(px.n) * a.in_h + a_iy) * a.in_w + a_ix) *
               static_cast<long long>(a.x_stride);
    } else {
      a_iy = a_ix = -(1 << 29);
    }
  }
  const int bnn = tid % BN, bkc0 = tid / BN;
  const bool b_row_ok = bn + bnn < a.out_c;
  const float* b_row = w + static_cast<long long>(b_row_ok ? bn + bnn : 0) * K;

  float4 ra[Cfg::kAPasses], rb[Cfg::kBPasses];
  const auto load_regs = [&](int t) {
#pragma unroll
    for (int p = 0; p < Cfg::kAPasses; ++p) {
      const int k = t * BK + (akc0 + p * (kThreads / BM)) * 4;
      const ConvTap tp = conv_tap(k, a.in_c, a.kernel);
      const int r = tp.r, q = tp.s, c = tp.c;
      const bool ok = k < K && static_cast<unsigned>(a_iy + r) < static_cast<unsigned>(a.in_h) &&
                      static_cast<unsigned>(a_ix + q) < static_cast<unsigned>(a.in_w);
      ra[p] = ok ? *reinterpret_cast<const float4*>(
                       x + a_base + (static_cast<long long>(r) * a.in_w + q) * a.x_stride + c)
                 : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int p = 0; p < Cfg::kBPasses; ++p) {
      const int k = t * BK + (bkc0 + p * (kThreads / BN)) * 4;
      rb[p] = b_row_ok && k < K ? *reinterpret_cast<const float4*>(b_row + k)
                                : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
  };
  const auto store_smem = [&](int buf) {
#pragma unroll
    for (int p = 0; p < Cfg::kAPasses; ++p) {
      const int kk = (akc0 + p * (kThreads / BM)) * 4;
      As[buf][kk + 0][am] = ra[p].x, As[buf][kk + 1][am] = ra[p].y;
      As[buf][kk + 2][am] = ra[p].z, As[buf][kk + 3][am] = ra[p].w;
    }
#pragma unroll
    for (int p = 0; p < Cfg::kBPasses; ++p) {
      const int kk = (bkc0 + p * (kThreads / BN)) * 4;
      Bs[buf][kk + 0][bnn] = rb[p].x, Bs[buf][kk + 1][bnn] = rb[p].y;
      Bs[buf][kk + 2][bnn] = rb[p].z, Bs[buf][kk + 3][bnn] = rb[p].w;
    }
  };

  const int tm = tid / (BN / TN), tn = tid % (BN / TN);
  float acc[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

  const int tiles = (K + BK - 1) / BK;
  load_regs(0);
  store_smem(0);
  __syncthreads();
  for (int t = 0; t < tiles; ++t) {
    const int buf = t & 1;
    if (t + 1 < tiles) load_regs(t + 1);
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
      float av[TM], bv[TN];
#pragma unroll
      for (int i = 0; i < TM; i += 4) {
        const float4 v = *reinterpret_cast<const float4*>(&As[buf][kk][tm * TM + i]);
        av[i] = v.x, av[i + 1] = v.y, av[i + 2] = v.z, av[i + 3] = v.w;
      }
#pragma unroll
      for (int j = 0; j < TN; j += 4) {
        const float4 v = *reinterpret_cast<const float4*>(&Bs[buf][kk][tn * TN + j]);
        bv[j] = v.x, bv[j + 1] = v.y, bv[j + 2] = v.z, bv[j + 3] = v.w;
      }
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
    // The other buffer was last read in iteration t - 1, which every thread finished before the
    // barrier that ended it.
    if (t + 1 < tiles) store_smem(buf ^ 1);
    __syncthreads();
  }
  pdl_trigger();

  float* y = static_cast<float*>(a.y);
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int m = bm + tm * TM + i;
    if (m >= M) continue;
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      const int n = bn + tn * TN + j;
      if (n < a.out_c)
        y[static_cast<long long>(m) * a.y_stride + n] = epilogue_value<float>(a, acc[i][j], m, n);
    }
  }
}

// ---------------------------------------------------------------- 3. direct convolution
//
// One thread per output pixel and CO output channels (blockIdx.y picks which CO). The block's
// CO x K weights are staged once in shared memory, K-major with the CO channels contiguous: per
// input value a thread then reads its CO weights as CO / 4 broadcast float4 loads (every thread
// of the block reads the same address) instead of CO loads, and the FMAs, not the load/store
// unit, set the pace. K = kernel^2 in_c <= kMaxK (ConvKernelInfo::max_k).
// kNchwInput: x is the float NCHW network input [batch, in_c, in_h, in_w] (the first layer).
// The CO results go out as 16-byte stores where the output view allows it (CO consecutive
// channels of one pixel: 16 or 32 contiguous bytes).
template <class T, int CO, int kMaxK, bool kNchwInput>
__device__ __forceinline__ void conv_direct(const ConvArgs& a) {
  static_assert(CO % 8 == 0, "8-channel stores");
  __shared__ __align__(16) float ws[kMaxK * CO];
  const int M = a.batch * a.out_h * a.out_w;
  const int K = a.kernel * a.kernel * a.in_c;  // <= kMaxK: conv_kernel_supports
  const int k0 = blockIdx.y * CO;
  const int nk = min(CO, a.out_c - k0);  // >= 1: the grid has ceil(out_c / CO) rows
  const T* w = static_cast<const T*>(a.w) + static_cast<long long>(k0) * K;
  for (int i = threadIdx.x; i < K * CO; i += blockDim.x) {
    const int kk = i / CO, j = i - kk * CO;
    ws[i] = j < nk ? load_f(w + static_cast<long long>(j) * K + kk) : 0.0f;
  }
  __syncthreads();

  const int m = blockIdx.x * blockDim.x + threadIdx.x;
  if (m >= M) return;  // after the block's only barrier
  const Pixel px = pixel_of(m, a.out_h, a.out_w);
  float acc[CO];
#pragma unroll
  for (int j = 0; j < CO; ++j) acc[j] = 0.0f;
  if (kNchwInput && a.kernel == 3 && a.in_c == 3) {
    // The detector's first layer (3x3, RGB): the 27 taps unrolled, so their loads are all issued
    // before the first FMA needs one (the general loop below waits on each load in turn), and
    // padding is a select, not a branch.
    const float* xn = static_cast<const float*>(a.x) +
                      static_cast<long long>(px.n) * 3 * a.in_h * static_cast<long long>(a.in_w);
    float xv[27];
#pragma unroll
    for (int r = 0; r < 3; ++r) {
      const int iy = px.y * a.stride - a.pad + r;
#pragma unroll
      for (int q = 0; q < 3; ++q) {
        const int ix = px.x * a.stride - a.pad + q;
        const bool ok = static_cast<unsigned>(iy) < static_cast<unsigned>(a.in_h) &&
                        static_cast<unsigned>(ix) < static_cast<unsigned>(a.in_w);
#pragma unroll
        for (int c = 0; c < 3; ++c)
          xv[(r * 3 + q) * 3 + c] =
              ok ? __ldg(xn + (static_cast<long long>(c) * a.in_h + iy) * a.in_w + ix) : 0.0f;
      }
    }
    const float4* wt = reinterpret_cast<const float4*>(ws);
#pragma unroll
    for (int k = 0; k < 27; ++k) {
#pragma unroll
      for (int j = 0; j < CO / 4; ++j) {
        const float4 wv = wt[k * (CO / 4) + j];
        acc[4 * j] = fmaf(xv[k], wv.x, acc[4 * j]);
        acc[4 * j + 1] = fmaf(xv[k], wv.y, acc[4 * j + 1]);
        acc[4 * j + 2] = fmaf(xv[k], wv.z, acc[4 * j + 2]);
        acc[4 * j + 3] = fmaf(xv[k], wv.w, acc[4 * j + 3]);
      }
    }
  } else {
    for (int r = 0; r < a.kernel; ++r) {
      const int iy = px.y * a.stride - a.pad + r;
      if (iy < 0 || iy >= a.in_h) continue;
      for (int q = 0; q < a.kernel; ++q) {
        const int ix = px.x * a.stride - a.pad + q;
        if (ix < 0 || ix >= a.in_w) continue;
        const float4* wt = reinterpret_cast<const float4*>(ws + (r * a.kernel + q) * a.in_c * CO);
        for (int c = 0; c < a.in_c; ++c) {
          float xv;
          if (kNchwInput)
            xv = static_cast<const float*>(
                a.x)[((static_cast<long long>(px.n) * a.in_c + c) * a.in_h + iy) * a.in_w + ix];
          else
            xv = load_f(static_cast<const T*>(a.x) +
                        ((static_cast<long long>(px.n) * a.in_h + iy) * a.in_w + ix) * a.x_stride +
                        c);
#pragma unroll
          for (int j = 0; j < CO / 4; ++j) {
            const float4 wv = wt[c * (CO / 4) + j];
            acc[4 * j] = fmaf(xv, wv.x, acc[4 * j]);
            acc[4 * j + 1] = fmaf(xv, wv.y, acc[4 * j + 1]);
            acc[4 * j + 2] = fmaf(xv, wv.z, acc[4 * j + 2]);
            acc[4 * j + 3] = fmaf(xv, wv.w, acc[4 * j + 3]);
          }
        }
      }
    }
  }
  pdl_trigger();
  T* y = static_cast<T*>(a.y) + static_cast<long long>(m) * a.y_stride + k0;
  if (nk == CO && aligned16(y)) {  // y_stride and the view keep every pixel's channels aligned
    float v[CO];
#pragma unroll
    for (int j = 0; j < CO; ++j) v[j] = epilogue_value<T>(a, acc[j], m, k0 + j);
#pragma unroll
    for (int q = 0; q < CO / 8; ++q) store8(y + 8 * q, v + 8 * q);
  } else {
#pragma unroll
    for (int j = 0; j < CO; ++j)
      if (j < nk) store_f(y + j, epilogue_value<T>(a, acc[j], m, k0 + j));
  }
}

// ---------------------------------------------------------------- 4. pool, upsample, detect
//
// Pool and upsample: one thread per output pixel and group of 8 channels. When the channel count
// and both strides are multiples of 8 elements and the views 16-byte aligned, a group is one
// 16-byte load/store (FP16) or two (FP32); otherwise the group's channels one by one.
template <class T>
__device__ __forceinline__ bool vec8_ok(const PoolArgs& a) {
  constexpr int kPerVec = 16 / sizeof(T);
  return a.channels % 8 == 0 && a.x_stride % kPerVec == 0 && a.y_stride % kPerVec == 0 &&
         aligned16(a.x) && aligned16(a.y);
}
template <class T, bool kUpsample>
__device__ __forceinline__ void pool_or_upsample(const PoolArgs& a) {
  const T* x = static_cast<const T*>(a.x);
  T* y = static_cast<T*>(a.y);
  const int groups = (a.channels + 7) / 8;
  const long long total = static_cast<long long>(a.batch) * a.out_h * a.out_w * groups;
  const bool vec = vec8_ok<T>(a);
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const int g = static_cast<int>(i % groups);
    const long long pix = i / groups;
    const int ox = static_cast<int>(pix % a.out_w);
    const long long t = pix / a.out_w;
    const int oy = static_cast<int>(t % a.out_h), n = static_cast<int>(t / a.out_h);
    const int c0 = g * 8, nc = min(8, a.channels - c0);
    float best[8];
    if (kUpsample) {
      const int iy = min(oy / 2, a.in_h - 1), ix = min(ox / 2, a.in_w - 1);
      const T* src =
          x + ((static_cast<long long>(n) * a.in_h + iy) * a.in_w + ix) * a.x_stride + c0;
      if (vec) {
        load8(src, best);
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) best[j] = j < nc ? load_f(src + j) : 0.0f;
      }
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) best[j] = -INFINITY;  // padding never wins: it is skipped
      for (int r = 0; r < a.kernel; ++r) {
        const int iy = oy * a.stride - a.pad + r;
        if (iy < 0 || iy >= a.in_h) continue;
        for (int q = 0; q < a.kernel; ++q) {
          const int ix = ox * a.stride - a.pad + q;
          if (ix < 0 || ix >= a.in_w) continue;
          const T* src =
              x + ((static_cast<long long>(n) * a.in_h + iy) * a.in_w + ix) * a.x_stride + c0;
          float v[8];
          if (vec) {
            load8(src, v);
          } else {
#pragma unroll
            for (int j = 0; j < 8; ++j) v[j] = j < nc ? load_f(src + j) : -INFINITY;
          }
#pragma unroll
          for (int j = 0; j < 8; ++j) best[j] = fmaxf(best[j], v[j]);
        }
      }
    }
    T* dst = y + pix * a.y_stride + c0;
    if (vec) {
      store8(dst, best);
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j)
        if (j < nc) store_f(dst + j, best[j]);
    }
  }
}

// Detect: one thread per (image, candidate). For each side, softmax over reg_max logits with
// the maximum subtracted (exp never overflows), then the expectation sum(i p_i); the box from the
// anchor (x + 0.5, y + 0.5) and the four distances, times the level's stride; sigmoid of the
// class logits. Writes are coalesced: consecutive threads, consecutive candidates of a row.
template <class T>
__device__ __forceinline__ void detect_decode(const DetectArgs& a) {
  const long long total = static_cast<long long>(a.batch) * a.num_candidates;
  const long long idx = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  if (idx >= total) return;
  const int b = static_cast<int>(idx / a.num_candidates);
  const int cand = static_cast<int>(idx - static_cast<long long>(b) * a.num_candidates);
  // The level (unrolled, so the argument arrays are indexed by constants: no local copy).
  int p = cand, h = 0, w = 0, stride = 0, box_stride = 0, cls_stride = 0;
  const T* box = nullptr;
  const T* cls = nullptr;
  bool found = false;
#pragma unroll
  for (int l = 0; l < 3; ++l) {
    const int count = a.h[l] * a.w[l];
    if (!found) {
      if (p < count) {
        found = true;
        h = a.h[l], w = a.w[l], stride = a.level_stride[l];
        box = static_cast<const T*>(a.box[l]), cls = static_cast<const T*>(a.cls[l]);
        box_stride = a.box_stride[l], cls_stride = a.cls_stride[l];
      } else {
        p -= count;
      }
    }
  }
  if (!found) return;  // num_candidates larger than the levels: nothing to decode
  const int py = p / w, px = p - py * w;
  const long long pixel = (static_cast<long long>(b) * h + py) * w + px;
  box += pixel * box_stride;
  cls += pixel * cls_stride;
  float dist[4];
  if (a.reg_max == 16 && aligned16(box)) {
    // The network's case: a side's 16 logits in registers from two 16-byte loads (FP16) or four
    // (FP32). Consecutive threads read pixels a whole channel row apart, so scalar loads would
    // cost one L1 wavefront per thread and logit; 16-byte ones cut that 8-fold (FP16).
#pragma unroll
    for (int side = 0; side < 4; ++side) {
      float v[16];
      load8(box + side * 16, v);
      load8(box + side * 16 + 8, v + 8);
      float mx = v[0];
#pragma unroll
      for (int i = 1; i < 16; ++i) mx = fmaxf(mx, v[i]);
      float sum = 0.0f, expect = 0.0f;
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        const float e = expf(v[i] - mx);
        sum += e;
        expect += static_cast<float>(i) * e;
      }
      dist[side] = expect / sum;
    }
  } else {
#pragma unroll
    for (int side = 0; side < 4; ++side) {
      const T* logit = box + side * a.reg_max;
      float mx = -INFINITY;
      for (int i = 0; i < a.reg_max; ++i) mx = fmaxf(mx, load_f(logit + i));
      float sum = 0.0f, expect = 0.0f;
      for (int i = 0; i < a.reg_max; ++i) {
        const float e = expf(load_f(logit + i) - mx);
        sum += e;
        expect += static_cast<float>(i) * e;
      }
      dist[side] = expect / sum;
    }
  }
  const float ax = px + 0.5f, ay = py + 0.5f;
  const float x1 = ax - dist[0], y1 = ay - dist[1], x2 = ax + dist[2], y2 = ay + dist[3];
  const int rows = 4 + a.num_classes;
  float* out = a.out + static_cast<long long>(b) * rows * a.num_candidates + cand;
  const long long row = a.num_candidates;
  const float s = static_cast<float>(stride);
  out[0 * row] = (x1 + x2) * 0.5f * s;
  out[1 * row] = (y1 + y2) * 0.5f * s;
  out[2 * row] = (x2 - x1) * s;
  out[3 * row] = (y2 - y1) * s;
  for (int c = 0; c < a.num_classes; ++c)
    out[(4 + c) * row] = 1.0f / (1.0f + expf(-load_f(cls + c)));
}

}  // namespace
}  // namespace lesson12

using lesson12::ConvArgs;
using lesson12::DetectArgs;
using lesson12::PoolArgs;

// ---------------------------------------------------------------- the symbols
// The tile in each name is BM x BN (output pixels x output channels per block; _w4: 4 warps where
// another entry has 8); the table entries (engine_kernels_table.cpp) must agree with these.
#define LESSON12_MMA_KERNEL(NAME, BM, BN, WARPS_M, WARPS_N)              \
  extern "C" __global__ void __launch_bounds__((WARPS_M) * (WARPS_N)*32) \
      conv_igemm_mma_f16_##NAME(ConvArgs a) {                            \
    lesson12::pdl_wait();                                                \
    lesson12::conv_igemm_mma<BM, BN, WARPS_M, WARPS_N>(a);               \
  }
LESSON12_MMA_KERNEL(128x128, 128, 128, 2, 4)   // 8 warps of 64 x 32
LESSON12_MMA_KERNEL(128x64, 128, 64, 4, 2)     // 8 warps of 32 x 32
LESSON12_MMA_KERNEL(128x64_w4, 128, 64, 2, 2)  // 4 warps of 64 x 32: 6 ldmatrix per 16 mma
LESSON12_MMA_KERNEL(64x64, 64, 64, 2, 2)       // 4 warps of 32 x 32
LESSON12_MMA_KERNEL(128x32, 128, 32, 4, 1)     // 4 warps of 32 x 32
LESSON12_MMA_KERNEL(64x32, 64, 32, 2, 2)       // 4 warps of 32 x 16
LESSON12_MMA_KERNEL(128x16, 128, 16, 4, 1)     // 4 warps of 32 x 16
// Small tiles: more blocks for the small layers at batch 1 (a 20x20 map is 400 pixels).
LESSON12_MMA_KERNEL(32x64, 32, 64, 2, 2)  // 4 warps of 16 x 32
LESSON12_MMA_KERNEL(32x32, 32, 32, 2, 2)  // 4 warps of 16 x 16
#undef LESSON12_MMA_KERNEL
// Split-K over a cluster of 2 or 4 blocks (compute capability 9.0).
#define LESSON12_MMA_SPLIT_KERNEL(NAME, BM, BN, WARPS_M, WARPS_N, SPLIT) \
  extern "C" __global__ void __launch_bounds__((WARPS_M) * (WARPS_N)*32) \
      conv_igemm_mma_f16_##NAME(ConvArgs a) {                            \
    lesson12::pdl_wait();                                                \
    lesson12::conv_igemm_mma<BM, BN, WARPS_M, WARPS_N, SPLIT>(a);        \
  }
LESSON12_MMA_SPLIT_KERNEL(32x32_splitk2, 32, 32, 2, 2, 2)
LESSON12_MMA_SPLIT_KERNEL(32x32_splitk4, 32, 32, 2, 2, 4)
LESSON12_MMA_SPLIT_KERNEL(32x64_splitk2, 32, 64, 2, 2, 2)
LESSON12_MMA_SPLIT_KERNEL(32x64_splitk4, 32, 64, 2, 2, 4)
#undef LESSON12_MMA_SPLIT_KERNEL

extern "C" __global__ void __launch_bounds__(256) conv_igemm_simt_f32_128x64(ConvArgs a) {
  lesson12::pdl_wait();
  lesson12::conv_igemm_simt<128, 64, 8, 4>(a);
}
extern "C" __global__ void __launch_bounds__(128) conv_igemm_simt_f32_64x32(ConvArgs a) {
  lesson12::pdl_wait();
  lesson12::conv_igemm_simt<64, 32, 4, 4>(a);
}

extern "C" __global__ void __launch_bounds__(128) conv_direct_f16(ConvArgs a) {
  lesson12::pdl_wait();
  lesson12::conv_direct<__half, 8, lesson12::kDirectMaxK, false>(a);
}
extern "C" __global__ void __launch_bounds__(128) conv_direct_f32(ConvArgs a) {
  lesson12::pdl_wait();
  lesson12::conv_direct<float, 8, lesson12::kDirectMaxK, false>(a);
}
extern "C" __global__ void __launch_bounds__(128) conv_first_nchw_f16(ConvArgs a) {
  lesson12::pdl_wait();
  lesson12::conv_direct<__half, 16, lesson12::kFirstLayerMaxK, true>(a);
}
extern "C" __global__ void __launch_bounds__(128) conv_first_nchw_f32(ConvArgs a) {
  lesson12::pdl_wait();
  lesson12::conv_direct<float, 16, lesson12::kFirstLayerMaxK, true>(a);
}

extern "C" __global__ void __launch_bounds__(lesson12::kPoolThreads) max_pool_nhwc_f16(PoolArgs a) {
  lesson12::pdl_wait();
  lesson12::pool_or_upsample<__half, false>(a);
}
extern "C" __global__ void __launch_bounds__(lesson12::kPoolThreads) max_pool_nhwc_f32(PoolArgs a) {
  lesson12::pdl_wait();
  lesson12::pool_or_upsample<float, false>(a);
}
extern "C" __global__ void __launch_bounds__(lesson12::kPoolThreads)
    upsample2x_nhwc_f16(PoolArgs a) {
  lesson12::pdl_wait();
  lesson12::pool_or_upsample<__half, true>(a);
}
extern "C" __global__ void __launch_bounds__(lesson12::kPoolThreads)
    upsample2x_nhwc_f32(PoolArgs a) {
  lesson12::pdl_wait();
  lesson12::pool_or_upsample<float, true>(a);
}
extern "C" __global__ void __launch_bounds__(lesson12::kDetectThreads)
    detect_decode_f16(DetectArgs a) {
  lesson12::pdl_wait();
  lesson12::detect_decode<__half>(a);
}
extern "C" __global__ void __launch_bounds__(lesson12::kDetectThreads)
    detect_decode_f32(DetectArgs a) {
  lesson12::pdl_wait();
  lesson12::detect_decode<float>(a);
}

#include "epilogue_kernels.cuh"
