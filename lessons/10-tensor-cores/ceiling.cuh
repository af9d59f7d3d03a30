// Lesson 10: the tensor cores' own ceilings on this GPU, the yardsticks a GEMM kernel is held to
// besides cuBLAS. Each is a kernel that does nothing but issue one matrix instruction back to
// back on operands that never change (no global loads, no shared-memory traffic after a fill, no
// epilogue), on every SM, for long enough that the clock settles where the power limit puts it:
//
//   mma_sync_ceiling  mma.sync.m16n8k16, FP32 accumulate, operands in registers (what v2..v4 and
//                     every pre-Hopper kernel issue): 8 warps per block, 8 independent
//                     accumulator chains per warp, so neither the instruction's latency nor the
//                     warp scheduler hides the pipe
//   wgmma_ceiling     wgmma.mma_async.m64n256k16 (Hopper, sm_90a), both operands from one
//                     shared-memory tile (v6's shape and descriptors: wgmma.cuh's wgmma_k64), two
//                     warp groups per block, one group kept in flight as v6 keeps it
//
// The operands are pseudo-random FP16/BF16 values in [-1, 1], not zeros: zeros toggle fewer
// transistors, draw less power and run at a higher clock under the power cap than a GEMM does.
// A kernel that reaches X% of mma_sync_ceiling is X% of what its instruction allows; how far the
// mma.sync ceiling sits below the wgmma one is how much Hopper's asynchronous instruction adds.
#pragma once

#include "tensor_gemm.cuh"

namespace lesson10 {

struct Ceiling {
  double tflops = 0.0;                  // dense FLOP/s over the timed launches, 1e12
  double flops_per_clock_per_sm = 0.0;  // tflops / (SMs x sm_mhz): comparable across clocks
  unsigned sm_mhz = 0;   // SM clock NVML read right after the timed launches (0: unavailable)
  double seconds = 0.0;  // GPU time of all timed launches (CUDA events around them)
  int sm_count = 0;
};

// The mma.sync ceiling for `in` (f16 or bf16) over about `seconds` of GPU time (at least 0.01).
// Throws std::invalid_argument for another type or seconds outside [0.01, 10]; NotSupported where
// version 4 is unsupported (compute capability below 8.0, or a build without compute_80 code);
// course::CudaError.
Ceiling mma_sync_ceiling(DType in, double seconds = 0.25);

// The wgmma ceiling, same arguments; NotSupported unless version 5 is supported (exactly
// compute capability 9.0 and a build with the sm_90a library).
Ceiling wgmma_ceiling(DType in, double seconds = 0.25);

namespace detail {
// The sm_90a launcher (ceiling_sm90.cu): `blocks` blocks of two warp groups, each doing
// `iterations` K-64 steps of wgmma.m64n256k16 x 4, accumulator sums to sink[blocks * 256].
// Returns the FLOP count of one launch.
template <class In>
double launch_wgmma_ceiling(int blocks, int iterations, float* sink, cudaStream_t stream);
}  // namespace detail

}  // namespace lesson10
