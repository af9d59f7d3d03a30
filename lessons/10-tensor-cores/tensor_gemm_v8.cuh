// Lesson 10, v8: split-K for small M, the shapes of inference at batch 1..64.
//
// Not compiled on its own: tensor_gemm.cu includes this file after v1..v4, so that v8 shares
// that translation unit's lane maps (ldmatrix_a_address, ldmatrix_b_trans_address) and v4's
// cp.async ring (cp_async_ring), whose bodies are exercise solutions (solutions.cuh, included at
// the end of tensor_gemm.cu): a kernel in another .cu file could not call them without
// relocatable device code, which the course does not use. The plan (tile, split count,
// workspace size) is in tensor_gemm.cuh, namespace v8splitk, where the CPU tests reach it.
//
// Why small M needs its own kernel (tensor_gemm.cuh, above namespace v8splitk, has the numbers):
// at M <= 64 the product is memory-bound, its time is streaming B (K x N) from DRAM once, and
// the big-tile kernels stream it with N / 256 blocks, a fraction of the SMs. v8:
//
//  - Block tile bm x 64 of C, bm = 16, 32 or 64 (block_rows: the smallest that holds M), K tiles
//    of 64. 4 warps split each K tile along K, not N: warp w multiplies k16 step w for all 64
//    columns (8 n8 fragments, 4 ldmatrix.x4.trans of B and bm / 16 ldmatrix.x4 of A), so every
//    element of the stage is read from shared memory exactly once; the 4 warps' accumulators
//    are summed through shared memory after the K loop, in warp order.
//  - The K loop is v4's 4-stage cp.async ring: 3 K tiles (24 KiB of B, plus A) in flight per
//    block; 3-4 blocks fit an SM (45-72 KiB of shared memory each) and the plan puts 2-4 on
//    each, so 48-96 KiB of B are in flight per SM against the ~26 KiB that Little's law asks
//    for at the H200's bandwidth.
//  - K is split over S blocks per output tile (grid: N / 64 x ceil(M / bm) x S), S from
//    plan_splits: as many as fill the GPU in one wave of resident blocks. Block z streams its
//    slice of K and writes its FP32 partial tile to the workspace, plane z of [S][M][N].
//  - The partials are summed in the same kernel by the last block of each output tile to
//    finish: each block writes its partial, fences (__threadfence: the writes are visible
//    device-wide before the ticket), and one thread takes a ticket, atomicAdd on the tile's
//    counter; the block that draws S - 1 knows that every partial is in, sums planes
//    0, 1, ..., S - 1 in that order, applies the epilogue (alpha, beta * C, bias, activation)
//    and resets the counter to 0 for the next call. The order of the additions is fixed, not
//    the order the blocks finish in, so the result does not change from run to run (float
//    atomics on C would). A second reduction kernel would do the same sums, but it costs a
//    second launch and a gap between the kernels, and it starts only once the last tile is done,
//    where the ticket lets tiles that finish early be summed while others still stream.
//  - S == 1 (large M, or a small K) writes C straight from the block: no workspace, no ticket.
//  - The error bound of every version (tensor_gemm_error_bound) still holds: slices, warps and
//    planes only regroup the K products into another summation tree, with at most K - 1
//    additions on any path, and adding a zero-filled product is exact.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace lesson10 {

namespace v8splitk {

SplitPlan plan_splits(int M, int N, int K, int sm_count, int blocks_per_sm, int splits) {
  SplitPlan p;
  p.bm = block_rows(M);
  p.tiles_m = ceil_div(M, p.bm);
  p.tiles_n = ceil_div(N, BN);
  p.k_tiles = ceil_div(K, BK);
  const long long tiles = static_cast<long long>(p.tiles_m) * p.tiles_n;
  if (splits <= 0) {
    const long long resident =
        static_cast<long long>(std::max(sm_count, 1)) * std::max(blocks_per_sm, 1);
    const long long one_wave = resident / tiles;
    const long long deep = p.k_tiles / kMinKTilesPerSplit;
    const long long short_tail = kMaxReduceRows / std::min(M, p.bm);
    splits = static_cast<int>(
        std::max(1LL, std::min({one_wave, deep, short_tail, static_cast<long long>(kMaxSplits)})));
  }
  p.splits = splits;
  if (splits > 1) {
    p.workspace_floats = static_cast<std::size_t>(splits) * M * N;
    p.tickets = static_cast<std::size_t>(tiles);
  }
  return p;
}

}  // namespace v8splitk

namespace {

__device__ __forceinline__ void add_to(float4& a, const float4& b) {
  a.x += b.x;
  a.y += b.y;
  a.z += b.z;
  a.w += b.w;
}

// One block: output tile (blockIdx.y, blockIdx.x) of 16 * MI rows x 64 columns, K slice
// blockIdx.z of gridDim.z. partials / tickets: the workspace (unused when gridDim.z == 1).
template <class In, class Out, int MI>
__global__ void __launch_bounds__(v8splitk::kThreads)
    splitk_kernel(int M, int N, int K, const In* __restrict__ A, const In* __restrict__ B,
                  Out* __restrict__ C, Epilogue e, float* __restrict__ partials,
                  int* __restrict__ tickets) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using namespace v8splitk;
  constexpr int BM = 16 * MI;
  constexpr int kAStage = BM * (BK + 8), kBStage = BK * (BN + 8);  // halves, padded rows
  constexpr int kRedRow = BN + 8;       // floats per row of a warp's accumulator tile
  constexpr int kQuads = BM / 8;        // float4 of the block tile per thread
  constexpr int kQuadsPerRow = BN / 4;  // 16 threads cover a row, 8 rows per pass
  static_assert(BK == kWarps * 16, "one k16 step of each K tile per warp");
  static_assert(BM * (BK / 8) % kThreads == 0 && BK * (BN / 8) % kThreads == 0,
                "whole 16-byte chunks per thread");
  static_assert(kThreads % kQuadsPerRow == 0 && BM % (kThreads / kQuadsPerRow) == 0,
                "the block tile divides into passes of whole rows");
  extern __shared__ __align__(128) unsigned char smem[];
  In* As = reinterpret_cast<In*>(smem);
  In* Bs = As + kStages * kAStage;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int split = blockIdx.z, splits = gridDim.z;
  const int bm = blockIdx.y * BM, bn = blockIdx.x * BN;
  const int k_tiles = ceil_div(K, BK);
  const int first = split_begin(split, splits, k_tiles);
  const int tiles = split_begin(split + 1, splits, k_tiles) - first;  // may be 0

  // K tile first + t into stage s: 16-byte chunks, 8 per row of A (bm rows) and of B (64 rows),
  // 8 threads per 128-byte row segment of B (one cache line). Rows of A past M and chunks past K
  // or N are zero-filled (src size 0: nothing is read), so a 1-row A costs one row of reads.
  const auto load_tile = [&](int t, int s) {
    const int k0 = (first + t) * BK;
    In* as = As + s * kAStage;
    In* bs = Bs + s * kBStage;
#pragma unroll
    for (int p = 0; p < BM * (BK / 8) / kThreads; ++p) {
      const int idx = tid + p * kThreads;
      const int r = idx / (BK / 8), c = (idx % (BK / 8)) * 8, gm = bm + r, gk = k0 + c;
      const bool ok = gm < M && gk < K;
      cp_async_16(as + padded_offset(r, c, BK), ok ? A + static_cast<std::size_t>(gm) * K + gk : A,
                  ok ? 16 : 0);
    }
#pragma unroll
    for (int p = 0; p < BK * (BN / 8) / kThreads; ++p) {
      const int idx = tid + p * kThreads;
      const int r = idx / (BN / 8), c = (idx % (BN / 8)) * 8, gk = k0 + r, gn = bn + c;
      const bool ok = gk < K && gn < N;
      cp_async_16(bs + padded_offset(r, c, BN), ok ? B + static_cast<std::size_t>(gk) * N + gn : B,
                  ok ? 16 : 0);
    }
  };

  float acc[MI][BN / 8][4];  // [m fragment][n fragment][element], layout mma_c_element
  zero_accumulators(acc);
  const RowCol la = ldmatrix_a_address(lane), lb = ldmatrix_b_trans_address(lane);
  const int kk = warp * 16;  // this warp's k16 step within every K tile
  const auto multiply = [&](int s) {
    const In* as = As + s * kAStage;
    const In* bs = Bs + s * kBStage;
    unsigned a[MI][4], b[BN / 8][2];
#pragma unroll
    for (int i = 0; i < MI; ++i)
      ldmatrix_x4(a[i], as + padded_offset(i * 16 + la.row, kk + la.col, BK));
#pragma unroll
    for (int j = 0; j < BN / 16; ++j) {  // one ldmatrix.x4.trans: n fragments 2j and 2j + 1
      unsigned r[4];
      ldmatrix_x4_trans(r, bs + padded_offset(kk + lb.row, j * 16 + lb.col, BN));
      b[2 * j][0] = r[0], b[2 * j][1] = r[1], b[2 * j + 1][0] = r[2], b[2 * j + 1][1] = r[3];
    }
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
      for (int j = 0; j < BN / 8; ++j) mma_16816<In>(acc[i][j], a[i], b[j][0], b[j][1]);
  };
  cp_async_ring<kStages>(tiles, load_tile, multiply);  // returns with nothing in flight

  // The 4 warps' tiles into shared memory (the ring's stages, free once every warp is past its
  // last ldmatrix), then summed in warp order: thread tid owns columns 4 (tid % 16) .. + 3 of
  // rows tid / 16 + 8p. Rows of 64 + 8 floats: a half-warp's 8-byte stores (rows g, g + 1, ..,
  // columns 2t) hit 32 different banks, and 8 lanes' 16-byte reads of one row are contiguous.
  __syncthreads();
  float* red = reinterpret_cast<float*>(smem);  // [kWarps][BM][kRedRow]
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const RowCol rc = mma_c_element(lane, 2 * h);
        float* p = red + (warp * BM + i * 16 + rc.row) * kRedRow + j * 8 + rc.col;
        *reinterpret_cast<float2*>(p) = make_float2(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
      }
  __syncthreads();
  const int q = tid % kQuadsPerRow, r0 = tid / kQuadsPerRow;
  const int n = bn + 4 * q;
  bool ok[kQuads];  // N % 8 == 0: a quad is wholly inside C or wholly outside
  float4 v[kQuads];
#pragma unroll
  for (int p = 0; p < kQuads; ++p) {
    const int r = r0 + p * (kThreads / kQuadsPerRow);
    ok[p] = bm + r < M && n < N;
    v[p] = *reinterpret_cast<const float4*>(red + r * kRedRow + 4 * q);
#pragma unroll
    for (int w = 1; w < kWarps; ++w)
      add_to(v[p], *reinterpret_cast<const float4*>(red + (w * BM + r) * kRedRow + 4 * q));
  }
  const auto row = [&](int p) { return bm + r0 + p * (kThreads / kQuadsPerRow); };
  const bool vector = reinterpret_cast<std::uintptr_t>(C) % (4 * sizeof(Out)) == 0;

  if (splits == 1) {
#pragma unroll
    for (int p = 0; p < kQuads; ++p)
      if (ok[p]) store_quad(e, C, N, row(p), n, v[p], vector);
    return;
  }

  // This slice's partial tile: plane `split` of the workspace, one 16-byte store per quad (16
  // threads write a row's 256 contiguous bytes).
  const std::size_t plane = static_cast<std::size_t>(M) * N;
  float* mine = partials + split * plane;
#pragma unroll
  for (int p = 0; p < kQuads; ++p)
    if (ok[p]) *reinterpret_cast<float4*>(mine + static_cast<std::size_t>(row(p)) * N + n) = v[p];
  // The last-block pattern ("Memory Fence Functions", CUDA Programming Guide): each thread's
  // fence orders its partial before anything it or, through the barrier, thread 0 does next,
  // so a block that draws the last ticket sees every other block's partial in memory.
  __threadfence();
  __syncthreads();
  __shared__ bool last;
  if (tid == 0) {
    int* ticket = tickets + blockIdx.y * gridDim.x + blockIdx.x;
    const bool is_last = atomicAdd(ticket, 1) == splits - 1;
    if (is_last) *ticket = 0;  // every block of this tile has drawn: ready for the next call
    last = is_last;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  // Planes 0..S-1, added in that order. __ldcg reads through L2 (the partials were written by
  // other SMs, whose stores this SM's L1 never saw). A plane's load waits one L2 round trip, so
  // they are issued kDepth planes at a time (16 float4 per thread in flight): one or two round
  // trips for the whole sum where a plane-by-plane loop would wait S of them.
  constexpr int kDepth = 16 / kQuads;
  const std::size_t plane4 = plane / 4;  // N % 8 == 0: whole float4
  const float4* base[kQuads];
  float4 sum[kQuads];
#pragma unroll
  for (int p = 0; p < kQuads; ++p) {
    base[p] = reinterpret_cast<const float4*>(partials + static_cast<std::size_t>(row(p)) * N + n);
    sum[p] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  for (int s0 = 0; s0 < splits; s0 += kDepth) {
    float4 w[kDepth][kQuads];
#pragma unroll
    for (int d = 0; d < kDepth; ++d)
#pragma unroll
      for (int p = 0; p < kQuads; ++p)
        w[d][p] = ok[p] && s0 + d < splits ? __ldcg(base[p] + (s0 + d) * plane4)
                                           : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int d = 0; d < kDepth; ++d)
      if (s0 + d < splits)
#pragma unroll
        for (int p = 0; p < kQuads; ++p) add_to(sum[p], w[d][p]);
  }
#pragma unroll
  for (int p = 0; p < kQuads; ++p)
    if (ok[p]) store_quad(e, C, N, row(p), n, sum[p], vector);
#elif defined(__CUDA_ARCH__)
  __trap();  // compiled for a GPU without mma.m16n8k16 / cp.async; the launcher refuses
#endif
}

template <class In, class Out>
using SplitKKernel = void (*)(int, int, int, const In*, const In*, Out*, Epilogue, float*, int*);

template <class In, class Out>
SplitKKernel<In, Out> splitk_kernel_for(int bm) {
  if (bm == 16) return splitk_kernel<In, Out, 1>;
  if (bm == 32) return splitk_kernel<In, Out, 2>;
  return splitk_kernel<In, Out, 4>;
}

// The workspace of one (device, stream): FP32 partials and the tickets, which are all zero
// between calls (allocated zeroed; every kernel leaves the counters it used at zero).
struct SplitKWorkspace {
  float* partials = nullptr;
  std::size_t partial_floats = 0;
  int* tickets = nullptr;
  std::size_t ticket_count = 0;
};

// At least `floats` partials and `tickets` counters for calls on `stream`, grown (doubling, from
// 64 Ki elements) when too small. The buffers a workspace outgrows are not freed, nor is any
// workspace at exit: a CUDA graph captured with them may still run, and the process's end frees
// device memory anyway; with doubling, what is left behind is less than what is in use. The key
// is the stream's handle: a stream created later with the handle of a destroyed one inherits its
// workspace, which is safe once the destroyed stream's work has finished.
SplitKWorkspace splitk_workspace(int device, cudaStream_t stream, std::size_t floats,
                                 std::size_t tickets, const std::string& who) {
  static std::mutex mutex;
  static std::map<std::pair<int, std::uintptr_t>, SplitKWorkspace> cache;
  const std::lock_guard<std::mutex> lock(mutex);
  SplitKWorkspace& ws = cache[{device, reinterpret_cast<std::uintptr_t>(stream)}];
  if (ws.partial_floats >= floats && ws.ticket_count >= tickets) return ws;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  if (capture != cudaStreamCaptureStatusNone)
    throw std::runtime_error(who +
                             ": the split-K workspace would have to grow while the stream is "
                             "capturing a graph; call v8 once with this shape (or a larger one) "
                             "on this stream before capturing");
  const auto grown = [](std::size_t have, std::size_t need) {
    std::size_t n = std::max<std::size_t>(have, std::size_t{1} << 16);
    while (n < need) n *= 2;
    return n;
  };
  if (ws.partial_floats < floats) {
    const std::size_t n = grown(ws.partial_floats, floats);
    void* p = nullptr;
    CUDA_CHECK(cudaMallocAsync(&p, n * sizeof(float), stream));
    ws.partials = static_cast<float*>(p);
    ws.partial_floats = n;
  }
  if (ws.ticket_count < tickets) {
    const std::size_t n = grown(ws.ticket_count, tickets);
    void* p = nullptr;
    CUDA_CHECK(cudaMallocAsync(&p, n * sizeof(int), stream));
    CUDA_CHECK(cudaMemsetAsync(p, 0, n * sizeof(int), stream));
    ws.tickets = static_cast<int*>(p);
    ws.ticket_count = n;
  }
  return ws;
}

// v8 after the argument checks (K > 0): the plan from this GPU's SM count and the kernel's
// occupancy, the workspace when S > 1, one launch.
template <class In, class Out>
void launch_v8(int requested_splits, const std::string& who, int M, int N, int K, const In* A,
               const In* B, Out* C, const Epilogue& e, cudaStream_t stream) {
  using namespace v8splitk;
  if (ceil_div(M, block_rows(M)) > 65535)  // gridDim.y
    throw std::invalid_argument(who + ": M = " + std::to_string(M) +
                                " needs more than 65535 block rows of 64");
  int device = 0, sms = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const int bm = block_rows(M), bytes = smem_bytes(bm), optin = smem_per_block_optin();
  if (bytes > optin)
    throw NotSupported(who + ": not supported on this GPU: needs " + std::to_string(bytes) +
                       " bytes of shared memory per block, the GPU grants " +
                       std::to_string(optin));
  const SplitKKernel<In, Out> kernel = splitk_kernel_for<In, Out>(bm);
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  int per_sm = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, bytes));
  const SplitPlan plan = plan_splits(M, N, K, sms, per_sm, requested_splits);
  SplitKWorkspace ws;
  if (plan.splits > 1)
    ws = splitk_workspace(device, stream, plan.workspace_floats, plan.tickets, who);
  const dim3 grid(plan.tiles_n, plan.tiles_m, plan.splits);
  kernel<<<grid, kThreads, bytes, stream>>>(M, N, K, A, B, C, e, ws.partials, ws.tickets);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

template <class In, class Out>
void gemm_v8_splitk(int splits, int M, int N, int K, float alpha, const In* A, const In* B,
                    float beta, Out* C, const float* bias, Activation act, cudaStream_t stream) {
  const std::string who = "gemm_v8_splitk";
  if (splits < 0 || splits > v8splitk::kMaxSplits)
    throw std::invalid_argument(who + ": splits must be 0 (chosen by shape) or 1.." +
                                std::to_string(v8splitk::kMaxSplits) + ", got " +
                                std::to_string(splits));
  if (static_cast<int>(act) < 0 || static_cast<int>(act) > 2)
    throw std::invalid_argument(who + ": unknown activation");
  if (!check_tensor_gemm_args(who.c_str(), M, N, K, A, B, C, true)) return;
  std::string why;
  if (!version_supported(8, dtype_of<In>(), &why))
    throw NotSupported(who + ": not supported on this GPU: " + why);
  const Epilogue e{alpha, beta, bias, act};
  if (K == 0) {  // the empty sum: every version's answer, C = act(beta * C + bias)
    k0_kernel<Out><<<256, 256, 0, stream>>>(M, N, C, e);
    CUDA_CHECK_LAUNCH();
    return;
  }
  launch_v8<In, Out>(splits, who, M, N, K, A, B, C, e, stream);
}

#define LESSON10_INSTANTIATE(In, Out)                                                           \
  template void gemm_v8_splitk<In, Out>(int, int, int, int, float, const In*, const In*, float, \
                                        Out*, const float*, Activation, cudaStream_t);
LESSON10_INSTANTIATE(__half, float)
LESSON10_INSTANTIATE(__half, __half)
LESSON10_INSTANTIATE(__nv_bfloat16, float)
LESSON10_INSTANTIATE(__nv_bfloat16, __nv_bfloat16)
#undef LESSON10_INSTANTIATE

}  // namespace lesson10
