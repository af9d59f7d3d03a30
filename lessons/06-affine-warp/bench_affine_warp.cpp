// Lesson 06 benchmark: 1920x1080 BGR -> 640x640 letterbox, every version in one run.
//
//   make bench LESSON=06      (JSON: build/bench/lesson06.json)
//
// Counters: GB/s = (source bytes read once + output bytes written once) / time, the useful
// traffic; %copy = that as a share of the device-to-device cudaMemcpy bandwidth measured in this
// run; %unfused = speed relative to the unfused GPU path (v1 + hwc_u8_to_chw_f32), the baseline;
// x_cpu = how many times faster than the OpenCV CPU pipeline measured in this run (host clock,
// all OpenCV threads); frames/s.
//
// Each timed iteration works on the next of enough frame buffers that together they exceed the
// L2 cache several times over: the source is read from DRAM, as a freshly uploaded camera frame
// mostly is, instead of from L2 after the first iteration.
#include <opencv2/core.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "affine_warp.cuh"
#include "common/bench.hpp"
#include "common/device.hpp"
#include "common/memory.hpp"
#include "common/stream.hpp"
#include "cpu_pipeline.hpp"

using namespace lesson06;

namespace {

constexpr int kSrcW = 1920, kSrcH = 1080, kDstW = 640, kDstH = 640;
constexpr int kBatch = 32;
constexpr double kSrcBytes = 3.0 * kSrcW * kSrcH;
constexpr double kPixels = double(kDstW) * kDstH;
constexpr double kF32Bytes = 3.0 * 4.0 * kPixels;
constexpr double kU8Bytes = 3.0 * kPixels;

// The frames and outputs every benchmark uses, allocated once.
struct Data {
  cv::Mat host;                  // one random 1920x1080 frame
  std::vector<DeviceImage> src;  // copies of it in device memory
  std::vector<ImageView> views;
  std::vector<course::DeviceBuffer<std::uint8_t>> u8;  // per-slot uint8 letterbox (v1, unfused)
  course::DeviceBuffer<float> f32;                     // kBatch (or more) float outputs, contiguous
  course::Stream stream;
  std::size_t slots = 0;
  std::size_t next = 0;

  std::size_t take() { return next++ % slots; }
  float* out(std::size_t slot) { return f32.data() + slot * 3 * static_cast<std::size_t>(kPixels); }
};

Data& data() {
  static Data instance = [] {
    Data d;
    d.host = cv::Mat(kSrcH, kSrcW, CV_8UC3);
    cv::RNG(6).fill(d.host, cv::RNG::UNIFORM, 0, 256);
    const double per_slot = kSrcBytes + kF32Bytes + kU8Bytes;
    const double l2 = course::query_device(0).l2_cache_bytes;
    d.slots = std::max<std::size_t>(kBatch, static_cast<std::size_t>(4.0 * l2 / per_slot) + 1);
    for (std::size_t i = 0; i < d.slots; ++i) {
      d.src.emplace_back(kSrcW, kSrcH);
      d.src.back().upload(view_of(d.host), d.stream);
      d.views.push_back(d.src.back().view());
      d.u8.emplace_back(static_cast<std::size_t>(kU8Bytes));
    }
    d.f32 = course::DeviceBuffer<float>(d.slots * 3 * static_cast<std::size_t>(kPixels));
    d.stream.synchronize();
    return d;
  }();
  return instance;
}

double g_cpu_seconds = 0.0;  // the CPU pipeline's time per frame, measured first

void report(benchmark::State& state, double bytes, double seconds, double frames = 1.0) {
  course::bench::report_bandwidth(state, bytes, seconds);
  if (seconds <= 0.0) return;
  state.counters["frames/s"] = frames / seconds;
  if (g_cpu_seconds > 0.0) state.counters["x_cpu"] = g_cpu_seconds * frames / seconds;
}

// ---- CPU: what a user writes without a GPU kernel (timed on the host, OpenCV's threads).
void BM_cpu_opencv_pipeline(benchmark::State& state) {
  Data& d = data();
  OpenCvPreprocessor cpu;
  std::vector<float> out(3 * static_cast<std::size_t>(kPixels));
  cpu.run(d.host, kDstW, kDstH, {}, out.data());  // warm-up: allocates the intermediates
  double total = 0.0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    cpu.run(d.host, kDstW, kDstH, {}, out.data());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    state.SetIterationTime(s);
    total += s;
  }
  const double mean =
      total / static_cast<double>(std::max<benchmark::IterationCount>(1, state.iterations()));
  g_cpu_seconds = mean;
  state.counters["GB/s"] = (kSrcBytes + kF32Bytes) / mean / 1e9;
  state.counters["frames/s"] = 1.0 / mean;
  state.SetLabel("CPU, " + std::to_string(cv::getNumThreads()) + " OpenCV threads");
}

// ---- The unfused GPU path: warp to uint8, then a second kernel converts. The baseline.
void BM_gpu_unfused(benchmark::State& state) {
  Data& d = data();
  const double s = course::bench::time_on_gpu(state, d.stream, [&] {
    const std::size_t i = d.take();
    letterbox_v1_u8(d.views[i], d.u8[i].data(), kDstW, kDstH, d.stream);
    hwc_u8_to_chw_f32(d.u8[i].data(), kDstW, kDstH, d.out(i), {}, d.stream);
  });
  report(state, kSrcBytes + kF32Bytes, s);
  course::bench::set_baseline("unfused", (kSrcBytes + kF32Bytes) / s / 1e9);
  state.SetLabel("2 kernels, uint8 intermediate");
}

void BM_v1_warp_u8(benchmark::State& state) {
  Data& d = data();
  const double s = course::bench::time_on_gpu(state, d.stream, [&] {
    const std::size_t i = d.take();
    letterbox_v1_u8(d.views[i], d.u8[i].data(), kDstW, kDstH, d.stream);
  });
  report(state, kSrcBytes + kU8Bytes, s);
  state.SetLabel("uint8 HWC out only (not the network input)");
}

template <Letterbox (*Kernel)(const ImageView&, float*, int, int, const Normalize&, cudaStream_t)>
void BM_fused(benchmark::State& state) {
  Data& d = data();
  const double s = course::bench::time_on_gpu(state, d.stream, [&] {
    const std::size_t i = d.take();
    Kernel(d.views[i], d.out(i), kDstW, kDstH, {}, d.stream);
  });
  report(state, kSrcBytes + kF32Bytes, s);
  course::bench::report_vs_baseline(state, "unfused", (kSrcBytes + kF32Bytes) / s / 1e9);
}

// ---- 32 frames: 32 launches of v3 against one batched launch (v4).
void BM_v3_x32_launches(benchmark::State& state) {
  Data& d = data();
  const double s = course::bench::time_on_gpu(state, d.stream, [&] {
    for (int i = 0; i < kBatch; ++i)
      letterbox_v3_vec4(d.views[i], d.out(i), kDstW, kDstH, {}, d.stream);
  });
  report(state, kBatch * (kSrcBytes + kF32Bytes), s, kBatch);
  course::bench::report_vs_baseline(state, "unfused", kBatch * (kSrcBytes + kF32Bytes) / s / 1e9);
  state.SetLabel("32 frames, 32 launches");
}

void BM_v4_batched_x32(benchmark::State& state) {
  Data& d = data();
  const std::vector<ImageView> frames(d.views.begin(), d.views.begin() + kBatch);
  const double s = course::bench::time_on_gpu(
      state, d.stream, [&] { letterbox_v4_batched(frames, d.out(0), kDstW, kDstH, {}, d.stream); });
  report(state, kBatch * (kSrcBytes + kF32Bytes), s, kBatch);
  course::bench::report_vs_baseline(state, "unfused", kBatch * (kSrcBytes + kF32Bytes) / s / 1e9);
  state.SetLabel("32 frames, 1 launch");
}

}  // namespace

// Registration order is run order: the CPU time and the baseline come first.
BENCHMARK(BM_cpu_opencv_pipeline)->Apply(course::bench::defaults);
BENCHMARK(BM_gpu_unfused)->Apply(course::bench::defaults);
BENCHMARK(BM_v1_warp_u8)->Apply(course::bench::defaults);
BENCHMARK_TEMPLATE(BM_fused, letterbox_v2_fused)
    ->Name("BM_v2_fused")
    ->Apply(course::bench::defaults);
BENCHMARK_TEMPLATE(BM_fused, letterbox_v3_vec4)->Name("BM_v3_vec4")->Apply(course::bench::defaults);
BENCHMARK(BM_v3_x32_launches)->Apply(course::bench::defaults);
BENCHMARK(BM_v4_batched_x32)->Apply(course::bench::defaults);

COURSE_BENCH_MAIN();
