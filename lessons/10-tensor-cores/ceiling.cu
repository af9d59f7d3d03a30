// Lesson 10: the tensor cores' ceilings (ceiling.cuh). The mma.sync kernel and the timing of
// both; the wgmma kernel is sm_90a code, in ceiling_sm90.cu.
#include "ceiling.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "common/cuda_check.hpp"
#include "common/memory.hpp"
#include "common/stream.hpp"
#include "common/timing.hpp"
#include "mma_sync.cuh"

namespace lesson10 {

namespace {

constexpr int kMmaThreads = 256;  // 8 warps: two per SM sub-partition
constexpr int kChains = 8;        // independent accumulators per warp (m16n8k16 each)
constexpr double kMmaFlops = 2.0 * 16 * 8 * 16;

// Two pseudo-random FP16/BF16 values in [-1, 1) packed in 32 bits, from a hash of `seed`.
template <class In>
__device__ unsigned random_pair(unsigned seed) {
  seed = seed * 2654435761u + 0x9e3779b9u;
  seed ^= seed >> 15;
  seed *= 0x85ebca6bu;
  seed ^= seed >> 13;
  const float lo = (seed & 0xffff) * (2.0f / 65536.0f) - 1.0f;
  const float hi = (seed >> 16) * (2.0f / 65536.0f) - 1.0f;
  In pair[2] = {In(lo), In(hi)};
  unsigned out;
  memcpy(&out, pair, sizeof out);
  return out;
}

// Every warp: kChains accumulator tiles, each updated `iterations` times by one mma.sync with the
// same A and B fragments (registers). The sums go to sink so that nothing is dead code.
template <class In>
__global__ void __launch_bounds__(kMmaThreads)
    mma_sync_ceiling_kernel(int iterations, float* __restrict__ sink) {
  const unsigned id = blockIdx.x * blockDim.x + threadIdx.x;
  unsigned a[4];
#pragma unroll
  for (int r = 0; r < 4; ++r) a[r] = random_pair<In>(4 * id + r);
  const unsigned b0 = random_pair<In>(~id), b1 = random_pair<In>(~id ^ 0x5555u);
  float acc[kChains][4];
#pragma unroll
  for (int c = 0; c < kChains; ++c)
#pragma unroll
    for (int q = 0; q < 4; ++q) acc[c][q] = 0.0f;
  for (int it = 0; it < iterations; ++it) {
#pragma unroll
    for (int c = 0; c < kChains; ++c) mma_16816<In>(acc[c], a, b0, b1);
  }
  float sum = 0.0f;
#pragma unroll
  for (int c = 0; c < kChains; ++c)
#pragma unroll
    for (int q = 0; q < 4; ++q) sum += acc[c][q];
  sink[id] = sum;
}

void check_args(DType in, double seconds, const char* who) {
  if (in != DType::f16 && in != DType::bf16) {
    throw std::invalid_argument(std::string(who) + ": expected f16 or bf16 inputs, got " +
                                to_string(in));
  }
  if (!(seconds >= 0.01 && seconds <= 10.0)) {
    throw std::invalid_argument(std::string(who) + ": seconds must be in [0.01, 10], got " +
                                std::to_string(seconds));
  }
}

// Times launch(iterations) (which returns its FLOP count): one short launch to calibrate, then
// as many launches of about 20 ms as fill `seconds`, back to back between one pair of events,
// and the SM clock read right after (NVML).
template <class Launch>
Ceiling time_ceiling(double seconds, int sm_count, const Launch& launch) {
  course::Stream stream;
  const int probe = 256;
  launch(probe, stream.get());  // module load, first-launch costs
  stream.synchronize();
  const float probe_ms = course::time_on_stream_ms(stream, [&] { launch(probe, stream.get()); });
  const double per_iteration_ms = std::max(1e-6, static_cast<double>(probe_ms) / probe);
  const int iterations = static_cast<int>(std::clamp(20.0 / per_iteration_ms, 256.0, 1e7));
  const int launches = std::max(1, static_cast<int>(std::lround(seconds * 1e3 / 20.0)));
  double flops = 0.0;
  const float ms = course::time_on_stream_ms(stream, [&] {
    for (int l = 0; l < launches; ++l) flops += launch(iterations, stream.get());
  });
  const course::GpuClocks clocks = course::read_gpu_clocks();
  Ceiling c;
  c.seconds = ms * 1e-3;
  c.tflops = flops / c.seconds / 1e12;
  c.sm_count = sm_count;
  c.sm_mhz = clocks.available ? clocks.sm_mhz : 0;
  if (c.sm_mhz > 0) c.flops_per_clock_per_sm = flops / c.seconds / (sm_count * c.sm_mhz * 1e6);
  return c;
}

int current_sm_count() {
  int device = 0, sms = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}

template <class In>
Ceiling mma_sync_ceiling_typed(double seconds) {
  const int sms = current_sm_count();
  int per_sm = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, mma_sync_ceiling_kernel<In>,
                                                           kMmaThreads, 0));
  const int blocks = sms * std::max(1, per_sm);
  course::DeviceBuffer<float> sink(static_cast<std::size_t>(blocks) * kMmaThreads);
  return time_ceiling(seconds, sms, [&](int iterations, cudaStream_t s) {
    mma_sync_ceiling_kernel<In><<<blocks, kMmaThreads, 0, s>>>(iterations, sink.data());
    CUDA_CHECK_LAUNCH();
    return kMmaFlops * kChains * (kMmaThreads / 32) * static_cast<double>(blocks) * iterations;
  });
}

template <class In>
Ceiling wgmma_ceiling_typed(double seconds) {
  const int sms = current_sm_count();
  const int blocks = sms;  // one block of 48 KiB and 256 threads x 128 accumulators per SM
  course::DeviceBuffer<float> sink(static_cast<std::size_t>(blocks) * 256);
  return time_ceiling(seconds, sms, [&](int iterations, cudaStream_t s) {
    return detail::launch_wgmma_ceiling<In>(blocks, iterations, sink.data(), s);
  });
}

}  // namespace

Ceiling mma_sync_ceiling(DType in, double seconds) {
  check_args(in, seconds, "mma_sync_ceiling");
  std::string why;
  if (!version_supported(4, in, &why)) throw NotSupported("mma_sync_ceiling: " + why);
  return in == DType::f16 ? mma_sync_ceiling_typed<__half>(seconds)
                          : mma_sync_ceiling_typed<__nv_bfloat16>(seconds);
}

Ceiling wgmma_ceiling(DType in, double seconds) {
  check_args(in, seconds, "wgmma_ceiling");
  std::string why;
  if (!version_supported(5, in, &why)) throw NotSupported("wgmma_ceiling: " + why);
  return in == DType::f16 ? wgmma_ceiling_typed<__half>(seconds)
                          : wgmma_ceiling_typed<__nv_bfloat16>(seconds);
}

}  // namespace lesson10
