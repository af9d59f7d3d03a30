// Lesson 10, v9: v6 on thread-block clusters of two, B shared through TMA multicast.
//
// Not compiled on its own: tensor_gemm_sm90.cu includes this file after v5..v7, so that v9 is
// sm_90a code in the same library and shares v6's configuration (v6cfg), its staged write-out
// (write_tile_staged) and the consumers' K loop (consume_k_tiles_releasing, solutions_sm90.cuh).
// Which block takes which tile and which half of B: namespace v9cluster in tensor_gemm.cuh, where
// the CPU tests reach it.
//
// What v9 changes in v6, and why. v6's blocks each stream a 128 x 64 tile of A and a 64 x 256
// tile of B per stage through TMA: 48 KiB from L2 per 2 x 128 x 256 x 64 FLOP. The blocks of
// one tile column all read the same B; in v9 two of them (tile rows 2p and 2p + 1) run as a
// cluster (CUDA Programming Guide, "Thread Block Clusters"), on two SMs of one GPC that can
// address each other's shared memory ("Distributed Shared Memory"):
//  - Each block's producer loads its own A (16 KiB) and two of B's four 64 x 64 boxes (16 KiB),
//    each with cp.async.bulk.tensor...multicast::cluster and the mask of both blocks (PTX ISA,
//    "cp.async.bulk.tensor"): TMA writes the box to the same offset in both blocks' shared memory
//    and signals complete_tx on the "full" barrier at the same offset in each. Per stage a block
//    reads 32 KiB from L2 instead of 48 and receives 48; every stage base is at the same offset
//    in both blocks because both run the same kernel with the same dynamic shared memory.
//  - Each "full" barrier still expects the whole 48 KiB (arrive.expect_tx with one arrival, its
//    own producer's): 16 + 16 KiB from its own loads, 16 KiB from the peer's. The peer's bytes
//    can land before the local expect_tx: the transaction count goes negative for a while
//    (PTX ISA, "mbarrier": tx-count), and the phase cannot complete before the producer's
//    arrival anyway.
//  - A stage can be refilled only when the consumers of BOTH blocks are done with it: the
//    producer of block r overwrites that stage in both blocks. So each "empty" barrier counts 4
//    arrivals (2 consumer warp groups x 2 blocks), and a consumer warp group releases a stage by
//    arriving on the "empty" barrier of every block of the cluster: mapa turns the local barrier's
//    address into the peer's (PTX ISA, "mapa"), and mbarrier.arrive.release.cluster on a
//    shared::cluster address arrives there. The producer waits with try_wait.acquire.cluster, so
//    the peer's release (its wgmma done reading the stage) is ordered before the next TMA write.
//  - The peer's multicast for a stage's next use cannot reach a "full" barrier still in its
//    previous phase: the peer issues it only after this block's consumers released the stage,
//    which they do only after that phase completed.
//  - cluster_sync (barrier.cluster.arrive.release + wait.acquire, all threads of both blocks) at
//    the start, after thread 0 initialised the barriers and fence.mbarrier_init.release.cluster
//    made that visible to the cluster: no multicast or remote arrive reaches a barrier before it
//    exists. And at the end: a block does not exit while its peer may still arrive on its "empty"
//    barriers (the last releases, which nobody waits for). Multicast writes into a block are all
//    waited for by its own consumers (its "full" barriers count them), so none is in flight once
//    its K loop is done; the ring is then free for v6's staged write-out.
//  - Tile rows are paired: with an odd count, the rank-1 block of the last pair row has no tile.
//    It still multicasts its half of B, and its consumers wait for each stage to fill before they
//    release it (releasing earlier would let the peer's next multicast complete_tx on a "full"
//    barrier still in the previous phase), but it loads no A (its "full" barriers expect 32 KiB),
//    issues no wgmma and writes nothing.
// The arithmetic is v6's: the same wgmma on the same shared-memory layout in the same order, so
// v9's C has v6's bits (a test checks it).
#pragma once

#include <cstdint>

namespace lesson10 {
namespace detail {

#ifdef LESSON10_SM90A
// This block's rank in its cluster (PTX ISA, "Special Registers": %cluster_ctarank) and the
// cluster's index in the grid (%clusterid.x; a 1-D grid of 1-D clusters).
__device__ __forceinline__ int cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return static_cast<int>(r);
}
__device__ __forceinline__ int cluster_index() {
  unsigned c;
  asm volatile("mov.u32 %0, %%clusterid.x;\n" : "=r"(c));
  return static_cast<int>(c);
}
// Every thread of every block of the cluster meets here (PTX ISA, "barrier.cluster"): release
// orders this thread's earlier memory operations (barrier initialisation, remote arrivals) before
// the other blocks' acquire. Not .aligned: the threads of a warp may arrive from different
// branches.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
// One arrival on the mbarrier at `bar`'s offset in the shared memory of cluster rank `rank`
// (this block's own rank included): mapa gives its shared::cluster address.
__device__ __forceinline__ void mbar_arrive_cluster(std::uint64_t* bar, int rank) {
  asm volatile(
      "{\n.reg .b32 remote;\n"
      "mapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [remote];\n}\n" ::"r"(smem_addr(bar)),
      "r"(rank)
      : "memory");
}
// mbar_wait with cluster-scope acquire: the arrivals it waits for come from both blocks.
__device__ __forceinline__ void mbar_wait_cluster(std::uint64_t* bar, int parity) {
  asm volatile(
      "{\n.reg .pred done;\nLAB_WAIT_CLUSTER:\n"
      "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra LAB_WAIT_CLUSTER;\n}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}
// tma_load_2d into the same offset of every block in `mask`, signalling the barrier at `bar`'s
// offset in each of them.
__device__ __forceinline__ void tma_load_2d_multicast(void* dst, const CUtensorMap* map, int c0,
                                                      int c1, std::uint64_t* bar,
                                                      std::uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(c0), "r"(c1), "r"(smem_addr(bar)), "h"(mask)
      : "memory");
}
#endif  // LESSON10_SM90A

}  // namespace detail

namespace {
using namespace detail;

// One 128 x 256 tile per block (or none: v9cluster::block_tile), clusters of two along M.
// store_quads: C aligned to four elements (write_tile_staged's vector stores).
template <class In, class Out>
__global__ void __launch_bounds__(v6cfg::kThreads, 1)
    cluster_kernel(const __grid_constant__ CUtensorMap map_a,
                   const __grid_constant__ CUtensorMap map_b, int M, int N, int K,
                   Out* __restrict__ C, Epilogue e, int store_quads) {
#ifdef LESSON10_SM90A
  using v6cfg::BK, v6cfg::BM, v6cfg::BN, v6cfg::kATileBytes, v6cfg::kStageBytes, v6cfg::kStages;
  using v9cluster::block_tile, v9cluster::BlockTile, v9cluster::first_b_box, v9cluster::kBBoxBytes,
      v9cluster::kBBoxesPerBlock, v9cluster::kClusterSize, v9cluster::kEmptyArrivals,
      v9cluster::kMulticastMask, v9cluster::stage_tx_bytes;
  static_assert(v9cluster::kBM == BM && v9cluster::kBN == BN && v9cluster::kBK == BK &&
                    v9cluster::kABytes == kATileBytes && v9cluster::kBBoxes == v6cfg::kBBoxes &&
                    stage_tx_bytes(true) == kStageBytes,
                "v9cluster describes v6's tile and stage");
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = align_1024(smem_raw);
  std::uint64_t* full = reinterpret_cast<std::uint64_t*>(smem + kStages * kStageBytes);
  std::uint64_t* empty = full + kStages;
  const int wg = threadIdx.x / 128, tid_in_wg = threadIdx.x % 128;
  const int rank = cluster_rank();
  const int tiles_m = ceil_div(M, BM), tiles_n = ceil_div(N, BN), k_tiles = ceil_div(K, BK);
  const BlockTile tile = block_tile(cluster_index(), rank, tiles_m, tiles_n);
  const int bm = tile.m * BM, bn = tile.n * BN;
  init_ring(full, empty, kStages, kEmptyArrivals);
  cluster_sync();  // both blocks' barriers exist before anyone multicasts or arrives on them

  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    if (tid_in_wg == 0) {
      const int box0 = first_b_box(rank);
      const unsigned bytes = stage_tx_bytes(tile.has_tile);
      for (int kt = 0; kt < k_tiles; ++kt) {
        const int s = pipeline_stage(kt, kStages);
        // The stage's previous use must be released by all four consumer warp groups: this
        // producer's B boxes overwrite the stage in both blocks.
        if (kt >= kStages) mbar_wait_cluster(&empty[s], pipeline_phase(kt - kStages, kStages));
        unsigned char* st = smem + s * kStageBytes;
        mbar_expect_tx(&full[s], bytes);
        if (tile.has_tile) tma_load_2d(st, &map_a, kt * BK, bm, &full[s]);
#pragma unroll
        for (int b = box0; b < box0 + kBBoxesPerBlock; ++b)
          tma_load_2d_multicast(st + kATileBytes + b * kBBoxBytes, &map_b, bn + 64 * b, kt * BK,
                                &full[s], kMulticastMask);
      }
    }
    cluster_sync();
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    const bool leader = tid_in_wg == 0;
    // Releasing a stage: one arrival on its "empty" barrier in every block of the cluster.
    const auto release = [empty](int s) {
#pragma unroll
      for (int r = 0; r < kClusterSize; ++r) mbar_arrive_cluster(&empty[s], r);
    };
    if (tile.has_tile) {
      const int rows = (wg - 1) * 64;  // this consumer's 64 rows of the tile
      const int warp = tid_in_wg / 32, lane = tid_in_wg % 32;
      float d[128];
#pragma unroll
      for (int i = 0; i < 128; ++i) d[i] = 0.0f;
      pin_registers(d);
      consume_k_tiles_releasing<In, 1, kStages, kStageBytes, kATileBytes>(d, full, release, smem,
                                                                          rows, 0, k_tiles, leader);
      write_tile_staged(e, C, M, N, bm, bn, rows, warp, lane, d, reinterpret_cast<float*>(smem),
                        store_quads);
    } else {
      for (int kt = 0; kt < k_tiles; ++kt) {  // no tile: let each stage fill, then release it
        const int s = pipeline_stage(kt, kStages);
        mbar_wait(&full[s], pipeline_phase(kt, kStages));
        if (leader) release(s);
      }
    }
    cluster_sync();  // the peer's last arrivals on this block's barriers are in
  }
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
}

}  // namespace

namespace {
// v9's launch: `blocks` blocks of v6's 384 threads and shared memory, in clusters of
// v9cluster::kClusterSize along x. The cluster shape is a launch attribute (CUDA Programming
// Guide, "Thread Block Clusters": cudaLaunchKernelEx with cudaLaunchAttributeClusterDimension);
// the grid is a multiple of it. `attr` holds the attribute the config points at.
cudaLaunchConfig_t cluster_config(int blocks, cudaStream_t stream, cudaLaunchAttribute* attr) {
  *attr = cudaLaunchAttribute{};
  attr->id = cudaLaunchAttributeClusterDimension;
  attr->val.clusterDim.x = v9cluster::kClusterSize;
  attr->val.clusterDim.y = 1;
  attr->val.clusterDim.z = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(v6cfg::kThreads);
  config.dynamicSmemBytes = v6cfg::kSmemBytes;
  config.stream = stream;
  config.attrs = attr;
  config.numAttrs = 1;
  return config;
}

// The kernel, allowed v6's dynamic shared memory.
template <class In, class Out>
auto cluster_kernel_ready() {
  auto kernel = cluster_kernel<In, Out>;
  CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, v6cfg::kSmemBytes));
  return kernel;
}
}  // namespace

template <class In, class Out>
void gemm_v9_cluster(int M, int N, int K, float alpha, const In* A, const In* B, float beta, Out* C,
                     const float* bias, Activation act, cudaStream_t stream) {
  using v6cfg::BK, v6cfg::BM, v6cfg::BN;
  const CUtensorMap map_a = make_map(A, M, K, BM);  // boxes of 128 rows (m) x 64 k
  const CUtensorMap map_b = make_map(B, K, N, BK);  // boxes of 64 k rows x 64 columns
  // Tile rows rounded up to pairs: at most (tiles_m + 1) x tiles_n blocks, far below INT_MAX.
  const int blocks = v9cluster::grid_blocks(ceil_div(M, BM), ceil_div(N, BN));
  const auto kernel = cluster_kernel_ready<In, Out>();
  cudaLaunchAttribute cluster;
  const cudaLaunchConfig_t config = cluster_config(blocks, stream, &cluster);
  const int quads = reinterpret_cast<std::uintptr_t>(C) % (4 * sizeof(Out)) == 0 ? 1 : 0;
  CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, map_a, map_b, M, N, K, C,
                                Epilogue{alpha, beta, bias, act}, quads));
}

int v9_active_clusters() {
  const auto kernel = cluster_kernel_ready<__half, float>();
  cudaLaunchAttribute cluster;
  const cudaLaunchConfig_t config = cluster_config(v9cluster::kClusterSize, nullptr, &cluster);
  int clusters = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, kernel, &config));
  return clusters;
}

}  // namespace lesson10
