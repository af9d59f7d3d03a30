// Lesson 10: the kernel that runs exercise 3, and its launch (gemm_exercise_wgmma in
// tensor_gemm.cuh checks the arguments, then calls exercise_detail::launch_wgmma here).
//
// Not compiled on its own, and for sm_90a only: it is included at the end of whichever file
// holds ex_wgmma_consumer: exercise.cu in its sm_90a pass (exercise_sm90.cu, the exercise build)
// or solutions_sm90.cu (the lesson build). Nothing to edit.
//
// The kernel is v6 (tensor_gemm_sm90.cu) for one 128x256 tile per block, with the accumulators
// written out from registers (v7's write-out): warp group 0's producer thread fills a 4-stage
// ring of 48 KiB with TMA, warp groups 1 and 2 run your consumer loop on 64 rows each. Unlike
// v6, every barrier wait of the producer, and every ring.wait of yours, gives up after 2 seconds,
// so that a stage nobody releases (or a phase that never completes) ends the kernel instead of
// hanging the test; launch_wgmma then throws std::runtime_error saying which wait gave up. Before
// it exits the producer waits until its last TMA loads have landed, so that no copy writes the
// shared memory of a finished block, whatever the consumers did.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "common/cuda_check.hpp"
#include "epilogue.cuh"
#include "tensor_gemm.cuh"
#include "wgmma.cuh"

namespace lesson10 {
namespace exercise_detail {
namespace {

using namespace detail;

constexpr int kBM = 128, kBN = 256, kBK = 64, kStages = 4, kThreads = 384, kGroupM = 8;
constexpr int kBoxBytes = kBK * 64 * 2;                        // 8 KiB: 64 k rows x 64 columns
constexpr int kBoxes = kBN / 64;                               // B's 256 columns: 4 boxes
constexpr int kATileBytes = kBM * kBK * 2;                     // 16 KiB
constexpr int kStageBytes = kATileBytes + kBoxes * kBoxBytes;  // 48 KiB
constexpr int kSmemBytes = kStages * kStageBytes + 1024 /* alignment */ + 256 /* barriers */;
constexpr unsigned long long kGiveUpNs = 2000000000ull;

// The first thing that went wrong: kNone, or which wait gave up, or a stage index out of range.
enum Stall : int { kNone = 0, kProducer = 1, kConsumer = 2, kBadStage = 3 };
__device__ int g_stall;

#ifdef LESSON10_SM90A
__device__ __forceinline__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
  return t;
}

// Waits until `parity`'s phase of `bar` has completed; false if it gave up (after kGiveUpNs, or,
// with `follow`, as soon as it sees that another wait has), having recorded `who` if it was the
// first.
__device__ bool wait_or_give_up(std::uint64_t* bar, int parity, Stall who, bool follow = true) {
  if (mbar_try_wait(bar, parity)) return true;
  const unsigned long long start = now_ns();
  while (!mbar_try_wait(bar, parity)) {
    if ((follow && *static_cast<volatile int*>(&g_stall) != kNone) ||
        now_ns() - start > kGiveUpNs) {
      atomicCAS(&g_stall, kNone, who);
      return false;
    }
  }
  return true;
}

// What exercise 3's loop is given (exercise.cu states the contract).
template <class In>
struct WgmmaRing {
  int k_tiles;
  std::uint64_t* full_;
  std::uint64_t* empty_;
  unsigned a0, b0;  // stage 0: this warp group's 64 rows of A, and B (shared-window addresses)

  __device__ int stage(int kt) const { return pipeline_stage(kt, kStages); }
  __device__ int phase(int kt) const { return pipeline_phase(kt, kStages); }
  __device__ std::uint64_t* full(int s) const { return full_ + valid(s); }
  __device__ std::uint64_t* empty(int s) const { return empty_ + valid(s); }
  __device__ bool wait(std::uint64_t* bar, int phase) const {
    return wait_or_give_up(bar, phase & 1, kConsumer);
  }
  __device__ void arrive(std::uint64_t* bar) const { mbar_arrive(bar); }
  __device__ void mma(int s, float (&d)[128]) const {
    s = valid(s);
    wgmma_k64<In>(d, a0 + s * kStageBytes, b0 + s * kStageBytes);
  }
  __device__ static int valid(int s) {
    if (s >= 0 && s < kStages) return s;
    atomicCAS(&g_stall, kNone, kBadStage);
    return 0;
  }
};
#endif  // LESSON10_SM90A

template <class In>
__global__ void __launch_bounds__(kThreads, 1)
    exercise_wgmma_kernel(const __grid_constant__ CUtensorMap map_a,
                          const __grid_constant__ CUtensorMap map_b, int M, int N, int K,
                          float* __restrict__ C, Epilogue e, int store_pairs) {
#ifdef LESSON10_SM90A
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = align_1024(smem_raw);
  std::uint64_t* full = reinterpret_cast<std::uint64_t*>(smem + kStages * kStageBytes);
  std::uint64_t* empty = full + kStages;
  const int wg = threadIdx.x / 128, tid_in_wg = threadIdx.x % 128;
  const TileCoord tc = tile_coord(blockIdx.x, ceil_div(M, kBM), ceil_div(N, kBN), kGroupM);
  const int bm = tc.m * kBM, bn = tc.n * kBN, k_tiles = ceil_div(K, kBK);
  init_ring(full, empty, kStages, 2);
  __syncthreads();

  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    if (tid_in_wg == 0) {
      int issued = 0;
      for (int kt = 0; kt < k_tiles; ++kt, ++issued) {
        const int s = pipeline_stage(kt, kStages);
        // The stage's previous tile (kt - kStages) must have been released by both consumers.
        if (kt >= kStages &&
            !wait_or_give_up(&empty[s], pipeline_phase(kt - kStages, kStages), kProducer))
          break;
        unsigned char* st = smem + s * kStageBytes;
        mbar_expect_tx(&full[s], kStageBytes);  // whole boxes, zero-filled past the edges
        tma_load_2d(st, &map_a, kt * kBK, bm, &full[s]);
#pragma unroll
        for (int b = 0; b < kBoxes; ++b)
          tma_load_2d(st + kATileBytes + b * kBoxBytes, &map_b, bn + 64 * b, kt * kBK, &full[s]);
      }
      // The last fill of each stage lands whether or not anyone consumes it: wait for those.
      for (int kt = issued > kStages ? issued - kStages : 0; kt < issued; ++kt)
        wait_or_give_up(&full[pipeline_stage(kt, kStages)], pipeline_phase(kt, kStages), kProducer,
                        false);
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    const int rows = (wg - 1) * 64;  // this consumer's 64 rows of the tile
    const int warp = tid_in_wg / 32, lane = tid_in_wg % 32;
    float d[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) d[i] = 0.0f;
    pin_registers(d);
    const WgmmaRing<In> ring{k_tiles, full, empty, smem_addr(smem) + rows * 128,
                             smem_addr(smem + kATileBytes)};
    ex_wgmma_consumer(ring, d);  // exercise 3
    pin_registers(d);
    // One branch around the whole write-out, not one per element (ptxas would serialise the
    // wgmma otherwise: warning C7514).
    if (store_pairs)
      write_rows<true>(e, C, M, N, bm + rows + warp * 16, bn, lane, d);
    else
      write_rows<false>(e, C, M, N, bm + rows + warp * 16, bn, lane, d);
  }
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
}

}  // namespace

template <class In>
void launch_wgmma(int M, int N, int K, float alpha, const In* A, const In* B, float beta, float* C,
                  const float* bias, Activation act, cudaStream_t stream) {
  const CUtensorMap map_a = make_map(A, M, K, kBM);  // boxes of 128 rows (m) x 64 k
  const CUtensorMap map_b = make_map(B, K, N, kBK);  // boxes of 64 k rows x 64 columns
  auto kernel = exercise_wgmma_kernel<In>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  const int tiles = ceil_div(M, kBM) * ceil_div(N, kBN);  // <= INT_MAX / 32768: M N <= INT_MAX
  const int pairs = reinterpret_cast<std::uintptr_t>(C) % (2 * sizeof(float)) == 0 ? 1 : 0;
  const int none = kNone;
  CUDA_CHECK(
      cudaMemcpyToSymbolAsync(g_stall, &none, sizeof none, 0, cudaMemcpyHostToDevice, stream));
  kernel<<<tiles, kThreads, kSmemBytes, stream>>>(map_a, map_b, M, N, K, C,
                                                  Epilogue{alpha, beta, bias, act}, pairs);
  CUDA_CHECK_LAUNCH();
  int stall = kNone;
  CUDA_CHECK(
      cudaMemcpyFromSymbolAsync(&stall, g_stall, sizeof stall, 0, cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  const std::string shape = " (M " + std::to_string(M) + ", N " + std::to_string(N) + ", K " +
                            std::to_string(K) + ": " + std::to_string(ceil_div(K, kBK)) +
                            " K tiles, 4 stages); C is wrong";
  if (stall == kProducer)
    throw std::runtime_error(
        "exercise 3: the producer waited more than 2 s for a stage to be released (its \"empty\" "
        "barrier completes when both consumer warp groups have arrived once): does each warp "
        "group arrive on ring.empty(s) once per K tile, from one thread, after the wgmma that "
        "read the stage have completed?" +
        shape);
  if (stall == kConsumer)
    throw std::runtime_error(
        "exercise 3: a consumer's ring.wait waited more than 2 s for a barrier phase that did not "
        "complete: K tile kt's fill completes phase ring.phase(kt) of ring.full(ring.stage(kt)), "
        "and the producer refills a stage only after both warp groups released it" +
        shape);
  if (stall == kBadStage)
    throw std::runtime_error(
        "exercise 3: ring.full, ring.empty or ring.mma got a stage outside "
        "0..3 (ring.stage(kt) is K tile kt's)" +
        shape);
}

template void launch_wgmma<__half>(int, int, int, float, const __half*, const __half*, float,
                                   float*, const float*, Activation, cudaStream_t);
template void launch_wgmma<__nv_bfloat16>(int, int, int, float, const __nv_bfloat16*,
                                          const __nv_bfloat16*, float, float*, const float*,
                                          Activation, cudaStream_t);

}  // namespace exercise_detail
}  // namespace lesson10
