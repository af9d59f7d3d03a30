// Lesson 03 benchmark (make bench LESSON=03): the fuller sweeps behind what main.cu prints.
//
//   BM_thrust_transform_plus           baseline: thrust::transform(a, b, c, plus), same vectors
//   BM_vector_add_one_per_thread/block one thread per element, block sizes 32 .. 1024
//   BM_vector_add_grid_stride          vector_add: occupancy API configuration, grid-stride loop
//   BM_bgr8_to_rgb_planar/w/h          the deployment kernel at 640x640, 1920x1080, 3840x2160
//   BM_divergence/ways/uniform         the cost of `ways` paths per warp (uniform:0) against the
//                                      same work with one path per warp (uniform:1)
// Memory-bound kernels report GB/s (bytes read + written), % of the device-to-device copy
// bandwidth measured at start-up (%copy) and % of thrust (%thrust). Times are GPU times from CUDA
// events, median of 5 repetitions.
//
//   build/lessons/03-kernels-and-warps/lesson03_bench --benchmark_filter=vector_add
#include <thrust/execution_policy.h>
#include <thrust/functional.h>
#include <thrust/transform.h>

#include <cstdint>
#include <vector>

#include "common/bench.hpp"
#include "common/device.hpp"
#include "common/memory.hpp"
#include "kernels.cuh"

namespace {

using course::bench::defaults;
using course::bench::report_bandwidth;
using course::bench::time_on_gpu;

// 64 Mi floats: 256 MiB per vector, 768 MiB moved per vector add, far beyond any L2.
constexpr std::size_t kN = std::size_t{1} << 26;
constexpr double kVectorAddBytes = 3.0 * kN * sizeof(float);

struct Vectors {
  course::DeviceBuffer<float> a{kN}, b{kN}, c{kN};
  Vectors() {
    CUDA_CHECK(cudaMemset(a.data(), 0, a.bytes()));
    CUDA_CHECK(cudaMemset(b.data(), 0, b.bytes()));
  }
};
Vectors& vectors() {  // allocated on first use, after run_main has checked for a GPU
  static Vectors v;
  return v;
}

void BM_thrust_transform_plus(benchmark::State& state) {
  Vectors& v = vectors();
  course::Stream stream;
  // par_nosync: thrust's default policy synchronises after the kernel, which would put a host
  // round trip between the timing events.
  const double s = time_on_gpu(state, stream, [&] {
    thrust::transform(thrust::cuda::par_nosync.on(stream), v.a.data(), v.a.data() + kN, v.b.data(),
                      v.c.data(), thrust::plus<float>());
  });
  report_bandwidth(state, kVectorAddBytes, s);
  if (s > 0.0) course::bench::set_baseline("thrust", kVectorAddBytes / s / 1e9);
}
BENCHMARK(BM_thrust_transform_plus)->Apply(defaults);

void BM_vector_add_one_per_thread(benchmark::State& state) {
  Vectors& v = vectors();
  course::Stream stream;
  const int block = static_cast<int>(state.range(0));
  const double s = time_on_gpu(state, stream, [&] {
    lesson03::vector_add_one_per_thread(v.a.data(), v.b.data(), v.c.data(), kN, block, stream);
  });
  report_bandwidth(state, kVectorAddBytes, s);
  if (s > 0.0) course::bench::report_vs_baseline(state, "thrust", kVectorAddBytes / s / 1e9);
  const int sm_threads = lesson03::sm_limits().max_threads_per_sm;
  state.counters["occupancy%"] =
      100.0 * lesson03::max_active_blocks_per_sm(lesson03::LessonKernel::vector_add, block) *
      block / sm_threads;
}
BENCHMARK(BM_vector_add_one_per_thread)
    ->ArgName("block")
    ->Arg(32)
    ->Arg(64)
    ->Arg(128)
    ->Arg(256)
    ->Arg(512)
    ->Arg(1024)
    ->Apply(defaults);

void BM_vector_add_grid_stride(benchmark::State& state) {
  Vectors& v = vectors();
  course::Stream stream;
  const double s = time_on_gpu(
      state, stream, [&] { lesson03::vector_add(v.a.data(), v.b.data(), v.c.data(), kN, stream); });
  report_bandwidth(state, kVectorAddBytes, s);
  if (s > 0.0) course::bench::report_vs_baseline(state, "thrust", kVectorAddBytes / s / 1e9);
  const lesson03::LaunchConfig cfg = lesson03::vector_add_launch_config(kN);
  state.counters["grid"] = cfg.grid.x;
  state.counters["block"] = cfg.block.x;
}
BENCHMARK(BM_vector_add_grid_stride)->Apply(defaults);

void BM_bgr8_to_rgb_planar(benchmark::State& state) {
  const int w = static_cast<int>(state.range(0)), h = static_cast<int>(state.range(1));
  const std::size_t pixels = static_cast<std::size_t>(w) * h;
  course::DeviceBuffer<std::uint8_t> src(3 * pixels);
  course::DeviceBuffer<float> dst(3 * pixels);
  CUDA_CHECK(cudaMemset(src.data(), 0x80, src.bytes()));
  course::Stream stream;
  const auto norm = lesson03::Normalization::imagenet();
  // L2 flushed before each sample: even 1920x1080 (31 MB in and out) fits the H200's L2, and a
  // real frame arrives from DRAM.
  const double s = time_on_gpu(state, stream, course::bench::Options{course::L2::flushed}, [&] {
    lesson03::bgr8_to_rgb_planar(src.data(), w, h, 3 * static_cast<std::size_t>(w), dst.data(),
                                 norm, stream);
  });
  report_bandwidth(state, static_cast<double>(src.bytes() + dst.bytes()), s);
}
BENCHMARK(BM_bgr8_to_rgb_planar)
    ->ArgNames({"w", "h"})
    ->Args({640, 640})
    ->Args({1920, 1080})
    ->Args({3840, 2160})
    ->Apply(defaults);

void BM_divergence(benchmark::State& state) {
  const int ways = static_cast<int>(state.range(0));
  const auto layout = state.range(1) != 0 ? lesson03::PathLayout::warp_uniform
                                          : lesson03::PathLayout::lane_interleaved;
  constexpr int kIterations = 64;
  // 8 waves of fully occupied SMs.
  const std::size_t n = static_cast<std::size_t>(course::query_device(0).sm_count) * 2048 * 8;
  course::DeviceBuffer<std::uint32_t> out(n);
  course::Stream stream;
  const double s = time_on_gpu(state, stream, [&] {
    lesson03::run_divergence(out.data(), n, ways, kIterations, layout, stream);
  });
  if (s > 0.0) state.counters["Gsteps/s"] = static_cast<double>(n) * kIterations / s / 1e9;
}
BENCHMARK(BM_divergence)
    ->ArgNames({"ways", "uniform"})
    ->ArgsProduct({{1, 2, 4, 8, 16, 32}, {0, 1}})
    ->Apply(defaults);

}  // namespace

COURSE_BENCH_MAIN();
