// Lesson 10, v11: v10 with the write-out stored by TMA (cp.async.bulk.tensor, shared to global)
// where C is not read.
//
// Not compiled on its own: tensor_gemm_sm90.cu includes this file after v10, whose persistent
// loop, producer and named barriers it keeps.
//
// What v11 changes in v10, and why. v10's threads read each staged chunk back and store it with
// 8- or 16-byte stores, 512 store instructions per chunk and warp group. TMA can do that copy
// itself: one thread issues one cp.async.bulk.tensor.2d store of the 64 x 32 box (PTX ISA,
// "cp.async.bulk.tensor"; Programming Guide, "Asynchronous Data Copies using the Tensor Memory
// Accelerator"), which clips at C's edges as the loads zero-fill. The element must then be final
// in shared memory, so:
//  - Only where C is not read (beta == 0) and C is 16-byte aligned (a tensor map's base must
//    be); otherwise v11 is v10 (gemm_v11_tma_store falls back to it).
//  - The epilogue (alpha, bias, ReLU / GELU, the conversion to Out) runs in registers, on the
//    accumulators of the chunk, and the staging buffer holds Out: 64 x 32 elements, 8 KiB in
//    FP32. Columns at or past N skip the epilogue (bias[n] would be out of bounds) and are
//    clipped by TMA; so are rows at or past M.
//  - Two buffers per consumer warp group (32 KiB in FP32 with the 192 KiB ring: 226 KiB), so the
//    group fills one while TMA still reads the other.
//  - The buffer is dense, as TMA's box is: the fragment's pair stores are 4-way bank-conflicted
//    (a 128B or 64B swizzled box would avoid that; not done: one step at a time).
//
// The protocol around each buffer, per chunk, for one consumer warp group (its thread 0 issues
// the stores):
//  1. thread 0 waits until at most one bulk store group is still reading shared memory
//     (cp.async.bulk.wait_group.read 1): the store of this buffer's previous chunk is done
//     reading it; then the group's named barrier tells every thread.
//  2. every thread writes its values of the chunk, then fence.proxy.async.shared::cta: its
//     generic-proxy writes become visible to the async proxy (TMA) (PTX ISA, "Memory
//     Consistency Model": proxies).
//  3. the named barrier again: every thread's writes are fenced; thread 0 issues the store and
//     commits it as one bulk group.
//  Before the block exits, thread 0 waits for every group (cp.async.bulk.wait_group 0): no
//  store may still read shared memory that the block gives back.
// The arithmetic is v6's (the same wgmma in the same order; epilogue_value per element), so with
// alpha = 1 (no product left to contract with the bias add) v11's C has v6's bits.
#pragma once

#include <cstdint>

namespace lesson10 {

namespace v11cfg {
using v10cfg::kChunkCols, v10cfg::kRingBytes, v10cfg::kRows, v10cfg::kSmemLimit;
constexpr int kBufferBytes = kRows * kChunkCols * 4;  // 8 KiB: the FP32 case, the largest
constexpr int kStagingBytes = 2 /* warp groups */ * 2 /* buffers */ * kBufferBytes;
constexpr int kSmemBytes = kRingBytes + kStagingBytes + 256 /* barriers */ + 1024 /* alignment */;
static_assert(kSmemBytes <= kSmemLimit, "the ring and two buffers per warp group fit a block");
static_assert(kBufferBytes % 1024 == 0, "each buffer 128-byte aligned, as TMA wants");
static_assert(kChunkCols * 2 % 16 == 0, "a box row is a multiple of 16 bytes in every type");
}  // namespace v11cfg

namespace detail {

#ifdef LESSON10_SM90A
// TMA store of the box at shared `src` to (c0 = column, c1 = row) of the tensor map's matrix.
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, const void* src, int c0,
                                             int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"(
          reinterpret_cast<std::uint64_t>(map)),
      "r"(c0), "r"(c1), "r"(smem_addr(src))
      : "memory");
}
__device__ __forceinline__ void bulk_commit() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
// Until at most kPending bulk groups of this thread still read shared memory.
template <int kPending>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(kPending) : "memory");
}
// Until every bulk group of this thread is complete (its writes to global memory done).
__device__ __forceinline__ void bulk_wait_all() {
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Two adjacent outputs as Out, stored together (the pair types of store_two).
template <class Out>
__device__ __forceinline__ void store_pair(Out* p, float v0, float v1) {
  if constexpr (sizeof(Out) == 4) {
    *reinterpret_cast<float2*>(p) = make_float2(v0, v1);
  } else {
    typename Pair<Out>::type v;
    v.x = from_float<Out>(v0);
    v.y = from_float<Out>(v1);
    *reinterpret_cast<typename Pair<Out>::type*>(p) = v;
  }
}

// One consumer warp group's 64 x 256 accumulators to C by TMA stores of 64 x 32 boxes, through
// its two buffers (`buffers`: 2 x 64 x 32 Out). `chunk` counts the chunks this group has staged
// (across tiles): buffer chunk % 2. C is not read (beta == 0). Rows m0.., columns bn..; tid,
// warp, lane as write_tile_chunked's. Returns the updated chunk count.
template <class Out>
__device__ __forceinline__ int write_tile_tma(const Epilogue& e, const CUtensorMap* map_c, int M,
                                              int N, int m0, int bn, int tid, int warp, int lane,
                                              int barrier, const float (&d)[128], Out* buffers,
                                              int chunk) {
  using v10cfg::kChunkCols, v10cfg::kChunks, v10cfg::kRows;
  if (m0 >= M) return chunk;  // the group's rows lie below C (uniform over the group)
#pragma unroll 1
  for (int c = 0; c < kChunks; ++c, ++chunk) {
    const int n0 = bn + c * kChunkCols;
    if (n0 >= N) break;  // the rest of the tile lies right of C (uniform over the group)
    Out* staged = buffers + (chunk % 2) * (kRows * kChunkCols);
    if (tid == 0) bulk_wait_read<1>();  // this buffer's previous store has read it
    warp_group_sync(barrier);
    // The chunk's 16 accumulators of this thread, picked with constant register indices (one
    // unrolled branch per chunk, as v10), then the epilogue once, not once per chunk.
    float v[16];
#pragma unroll
    for (int cc = 0; cc < kChunks; ++cc) {
      if (cc != c) continue;
#pragma unroll
      for (int i = 0; i < 16; ++i) v[i] = d[cc * 16 + i];
    }
#pragma unroll
    for (int jj = 0; jj < kChunkCols / 8; ++jj)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const RowCol rc = mma_c_element(lane, 2 * h);
        const int col = jj * 8 + rc.col, n = n0 + col;  // N % 8 == 0: n < N means n + 1 < N
        float v0 = 0.0f, v1 = 0.0f;
        if (n < N) {
          v0 = epilogue_value(e, static_cast<const Out*>(nullptr), n, v[jj * 4 + 2 * h]);
          v1 = epilogue_value(e, static_cast<const Out*>(nullptr), n + 1, v[jj * 4 + 2 * h + 1]);
        }
        store_pair(staged + (warp * 16 + rc.row) * kChunkCols + col, v0, v1);
      }
    fence_proxy_async_shared();  // these writes, visible to TMA
    warp_group_sync(barrier);
    if (tid == 0) {
      tma_store_2d(map_c, staged, n0, m0);
      bulk_commit();
    }
  }
  return chunk;
}
#endif  // LESSON10_SM90A

}  // namespace detail

namespace {
using namespace detail;

// v11's kernel: v10's persistent block with write_tile_tma, two buffers per warp group.
template <class In, class Out>
__global__ void __launch_bounds__(v6cfg::kThreads, 1)
    tma_store_kernel(const __grid_constant__ CUtensorMap map_a,
                     const __grid_constant__ CUtensorMap map_b,
                     const __grid_constant__ CUtensorMap map_c, int M, int N, int K, Epilogue e) {
#ifdef LESSON10_SM90A
  int chunk = 0;  // chunks this warp group has staged, across tiles: buffer chunk % 2
  const auto write_out = [&](const float(&d)[128], int m0, int bn, const ConsumerGroup& g) {
    chunk = write_tile_tma(e, &map_c, M, N, m0, bn, g.tid, g.warp, g.lane, g.barrier, d,
                           reinterpret_cast<Out*>(g.staging), chunk);
  };
  persistent_block<In, 2 * v11cfg::kBufferBytes>(&map_a, &map_b, M, N, K, write_out);
  // The thread that issued this warp group's stores: none may still read shared memory when the
  // block exits.
  if (threadIdx.x >= 128 && threadIdx.x % 128 == 0) bulk_wait_all();
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
}

// C (M x N row-major Out) as a TMA store target: boxes of 64 rows x 32 columns, no swizzle.
template <class Out>
CUtensorMap make_store_map(Out* C, int M, int N) {
  CUtensorMap map{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(N), static_cast<cuuint64_t>(M)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(N) * sizeof(Out)};
  const cuuint32_t box[2] = {v10cfg::kChunkCols, v10cfg::kRows};
  const cuuint32_t elem[2] = {1, 1};
  const CUtensorMapDataType t = sizeof(Out) == 4 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
                                : std::is_same<Out, __half>::value
                                    ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                    : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  const CUresult r =
      encode_tiled()(&map, t, 2, C, dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
                     CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                     CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw std::invalid_argument("gemm_v11_tma_store: cuTensorMapEncodeTiled refused C, " +
                                std::to_string(M) + " x " + std::to_string(N) + " (error " +
                                std::to_string(static_cast<int>(r)) + ")");
  return map;
}

}  // namespace

template <class In, class Out>
void gemm_v11_tma_store(int blocks, int M, int N, int K, float alpha, const In* A, const In* B,
                        float beta, Out* C, const float* bias, Activation act,
                        cudaStream_t stream) {
  using v6cfg::BK, v6cfg::BM, v6cfg::BN, v6cfg::kThreads, v11cfg::kSmemBytes;
  // C read (beta != 0) or not aligned for a tensor map: v10's write-out.
  if (beta != 0.0f || reinterpret_cast<std::uintptr_t>(C) % 16 != 0) {
    gemm_v10_persistent_staged(blocks, M, N, K, alpha, A, B, beta, C, bias, act, stream);
    return;
  }
  const CUtensorMap map_a = make_map(A, M, K, BM);  // boxes of 128 rows (m) x 64 k
  const CUtensorMap map_b = make_map(B, K, N, BK);  // boxes of 64 k rows x 64 columns
  const CUtensorMap map_c = make_store_map(C, M, N);
  const int tiles = ceil_div(M, BM) * ceil_div(N, BN);
  if (blocks <= 0) blocks = sm_count();
  const int grid = blocks < tiles ? blocks : tiles;
  auto kernel = tma_store_kernel<In, Out>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  kernel<<<grid, kThreads, kSmemBytes, stream>>>(map_a, map_b, map_c, M, N, K,
                                                 Epilogue{alpha, beta, bias, act});
  CUDA_CHECK_LAUNCH();
}

}  // namespace lesson10
