// Lesson 10: the wgmma ceiling kernel (ceiling.cuh), compiled only for sm_90a like
// tensor_gemm_sm90.cu (the same static library). Each block fills one A tile (128 x 64, two
// warp groups' 64 rows each) and one B tile (64 x 256) in shared memory with pseudo-random values,
// in the layout v6's descriptors describe (any bits are a valid operand for the speed), then each
// warp group issues `iterations` K-64 steps of four wgmma.m64n256k16 into its 128 accumulators,
// one commit group in flight as v6 keeps it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "ceiling.cuh"
#include "common/cuda_check.hpp"
#include "wgmma.cuh"

namespace lesson10 {
using namespace detail;  // wgmma.cuh's helpers

namespace {

constexpr int kThreads = 256;                           // two consumer warp groups
constexpr int kABytes = 128 * 64 * 2;                   // 16 KiB
constexpr int kBBytes = 64 * 256 * 2;                   // 32 KiB
constexpr int kSmemBytes = kABytes + kBBytes + 1024;    // + the 1024-byte alignment
constexpr double kStepFlops = 4 * 2.0 * 64 * 256 * 16;  // one K-64 step of one warp group

template <class In>
__global__ void __launch_bounds__(kThreads)
    wgmma_ceiling_kernel(int iterations, float* __restrict__ sink) {
#ifdef LESSON10_SM90A
  extern __shared__ unsigned char raw[];
  unsigned char* smem = align_1024(raw);
  // Fill: pseudo-random halves in [-1, 1), written by the generic proxy; the fence makes them
  // visible to wgmma's reads (the async proxy) after the barrier.
  In* values = reinterpret_cast<In*>(smem);
  for (int i = threadIdx.x; i < (kABytes + kBBytes) / 2; i += kThreads) {
    unsigned h = (blockIdx.x * 977u + i) * 2654435761u;
    h ^= h >> 16;
    values[i] = In((h & 0xffff) * (2.0f / 65536.0f) - 1.0f);
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  const int group = threadIdx.x / 128;
  const unsigned a_base = smem_addr(smem) + group * (kABytes / 2);  // this group's 64 rows
  const unsigned b_base = smem_addr(smem + kABytes);
  float d[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) d[i] = 0.0f;
  wgmma_fence();
  for (int it = 0; it < iterations; ++it) {
    wgmma_k64<In>(d, a_base, b_base);
    wgmma_commit();
    wgmma_wait<1>();
  }
  wgmma_wait<0>();
  pin_registers(d);
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < 128; ++i) sum += d[i];
  sink[blockIdx.x * kThreads + threadIdx.x] = sum;
#else
  (void)iterations;
  (void)sink;
#endif
}

}  // namespace

namespace detail {

template <class In>
double launch_wgmma_ceiling(int blocks, int iterations, float* sink, cudaStream_t stream) {
  CUDA_CHECK(cudaFuncSetAttribute(wgmma_ceiling_kernel<In>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  wgmma_ceiling_kernel<In><<<blocks, kThreads, kSmemBytes, stream>>>(iterations, sink);
  CUDA_CHECK_LAUNCH();
  return kStepFlops * 2.0 * static_cast<double>(blocks) * iterations;  // two warp groups
}

template double launch_wgmma_ceiling<__half>(int, int, float*, cudaStream_t);
template double launch_wgmma_ceiling<__nv_bfloat16>(int, int, float*, cudaStream_t);

}  // namespace detail

}  // namespace lesson10
