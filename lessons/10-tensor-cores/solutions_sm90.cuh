// Lesson 10: the consumer loop of v5..v7 and v9, which is exercise 3's answer. Read it after you
// have tried.
//
// Not compiled on its own: tensor_gemm_sm90.cu includes it (in both builds: the kernels v5..v7
// and v9 call it), for sm_90a only. Exercise 3's own solution, ex_wgmma_consumer, is the same loop
// written against the exercise kernel's ring: solutions_sm90.cu.
#pragma once

#include <cstdint>

#include "tensor_gemm.cuh"
#include "wgmma.cuh"

namespace lesson10::detail {

// A consumer warp group's K loop: `k_tiles` K tiles from a ring of kStages stages of
// kStageBytes (A's 128 rows of 128 bytes first, then B's boxes at kATileBytes), this warp
// group's 64 rows of A starting `rows` rows down; accumulating into d (64 registers: v5's
// m64n128k16, 128: v6's and v7's m64n256k16). `it` counts ring uses, so that stage and phase run
// on across the tiles of a persistent block (v7); the count after the last K tile is returned.
// `leader`: the one thread of the warp group that releases the stages.
//
// Per K tile: wait until the stage is full (phase = how many times the ring has wrapped, mod
// 2), then fence, issue the stage's four wgmma and commit them as one group. Then either
//  - kInFlight == 0 (v5): wait for that group (wait_group 0) and release its stage at once: the
//    tensor cores idle from the last wgmma of one stage until the first of the next; or
//  - kInFlight == 1 (v6, v7, v9): wait only until at most this group is pending (wait_group 1), so
//    the previous stage's group is done reading shared memory, and release the previous stage;
//    the last stage is released after a final wait_group 0.
// A stage is released only after every wgmma reading it has completed: the producer's next TMA
// into it would otherwise overwrite operands still being read. pin_registers after each wait:
// the compiler sees d written by the wgmma asm at issue, not by the wait, and must not move any
// read of d (the epilogue) above it.
// release(s): what releasing stage s means; the leader calls it. v5..v7 arrive on the block's
// own "empty" barrier (consume_k_tiles below); v9 arrives on the barrier of every block of its
// cluster (tensor_gemm_v9.cuh).
template <class In, int kInFlight, int kStages, int kStageBytes, int kATileBytes, int N,
          class Release>
__device__ __forceinline__ int consume_k_tiles_releasing(float (&d)[N], std::uint64_t* full,
                                                         const Release& release,
                                                         unsigned char* smem, int rows, int it,
                                                         int k_tiles, bool leader) {
#ifdef LESSON10_SM90A
  static_assert(kInFlight == 0 || kInFlight == 1, "v5's schedule or v6's");
  // The stage and its phase are stepped, not divided out of `it` at every tile, and the warp
  // group's row offset goes through a shuffle from lane 0 so that the compiler knows it is the
  // same in every lane and keeps the descriptors' arithmetic in uniform registers (this loop is
  // the consumers' whole instruction stream while the tensor cores run).
  rows = __shfl_sync(0xffffffffu, rows, 0);
  int s = pipeline_stage(it, kStages), phase = pipeline_phase(it, kStages), prev = -1;
  for (int kt = 0; kt < k_tiles; ++kt) {
    mbar_wait(&full[s], phase);
    const unsigned a_base = smem_addr(smem + s * kStageBytes) + rows * 128;
    const unsigned b_base = smem_addr(smem + s * kStageBytes + kATileBytes);
    if constexpr (kInFlight == 1) pin_registers(d);
    wgmma_fence();
    wgmma_k64<In>(d, a_base, b_base);
    wgmma_commit();
    if constexpr (kInFlight == 0) {
      wgmma_wait<0>();
      pin_registers(d);
      if (leader) release(s);
    } else {
      wgmma_wait<1>();
      pin_registers(d);
      if (prev >= 0 && leader) release(prev);
    }
    prev = s;
    if (++s == kStages) s = 0, phase ^= 1;
  }
  it += k_tiles;
  if constexpr (kInFlight == 1) {
    wgmma_wait<0>();
    pin_registers(d);
    if (prev >= 0 && leader) release(prev);
  }
#else
  (void)d, (void)full, (void)release, (void)smem, (void)rows, (void)k_tiles, (void)leader;
#endif
  return it;
}

template <class In, int kInFlight, int kStages, int kStageBytes, int kATileBytes, int N>
__device__ __forceinline__ int consume_k_tiles(float (&d)[N], std::uint64_t* full,
                                               std::uint64_t* empty, unsigned char* smem, int rows,
                                               int it, int k_tiles, bool leader) {
#ifdef LESSON10_SM90A
  const auto release = [empty](int s) { mbar_arrive(&empty[s]); };
#else
  const auto release = [empty](int) { (void)empty; };
#endif
  return consume_k_tiles_releasing<In, kInFlight, kStages, kStageBytes, kATileBytes>(
      d, full, release, smem, rows, it, k_tiles, leader);
}

}  // namespace lesson10::detail
