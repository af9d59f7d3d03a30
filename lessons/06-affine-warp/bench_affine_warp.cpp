// Lesson 06 benchmark: every version in one run, at two frame sizes into a 640x640 input:
//   1920x1080 (3x downscale: the taps read 720 of the 1080 source rows), the common camera;
//   1280x720  (2x: the taps read every source row), the representative bandwidth figure.
//
//   make bench LESSON=06      (JSON: build/bench/lesson06.json)
//
// Time: GPU time with launch latency excluded (common/timing.hpp, the blocking-kernel method);
// counter latency_us: end-to-end latency, host call to completion, measured separately.
// Counters: GB/s = bytes really moved / GPU time: the source bytes the taps read
// (source_footprint: rows that no tap reads are not counted), plus what is written, plus an
// intermediate image written and read back where there is one; %copy = that as a share of the
// device-to-device copy bandwidth measured in this run; %unfused = speed relative to the unfused
// GPU path (v1 + hwc_u8_to_chw_f32) at the same size; frames/s; x_cpu, on the upload rows only =
// the OpenCV CPU pipeline's time / the upload + letterbox latency: both start from a frame in
// host memory (the device-resident rows assume the frame is on the GPU already, so they get no
// x_cpu).
//
// L2: each timed iteration works on the next of enough frame buffers that together exceed the
// L2 four times over, so a kernel reads a frame (and writes an output) that has not been touched
// for several L2 sizes' worth of traffic: in effect L2-cold, without a flush per sample. (The
// harness labels this "L2 warm" since it flushes nothing; the label below says "rotated".) The
// upload rows are different on purpose: the kernel reads the frame the copy engine has just
// written, part of which may still be in L2, as in a deployment.
#include <cuda_fp16.h>
#include <opencv2/core.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "affine_warp.cuh"
#include "common/bench.hpp"
#include "common/device.hpp"
#include "common/memory.hpp"
#include "common/stream.hpp"
#include "cpu_pipeline.hpp"
#include "npp_baseline.hpp"

using namespace lesson06;

namespace {

constexpr int kDstW = 640, kDstH = 640;
constexpr int kBatch = 32;
constexpr double kPixels = double(kDstW) * kDstH;
constexpr double kF32Bytes = 3.0 * 4.0 * kPixels;
constexpr double kU8Bytes = 3.0 * kPixels;
constexpr double kF16Bytes = 3.0 * 2.0 * kPixels;

// The frames and outputs of one source size, allocated once.
struct Data {
  int w = 0, h = 0;
  cv::Mat host;                               // one random frame (pageable, for the CPU)
  course::PinnedBuffer<std::uint8_t> pinned;  // the same frame in pinned memory, for uploads
  std::vector<DeviceImage> src;               // copies of it in device memory
  std::vector<ImageView> views;
  std::vector<course::DeviceBuffer<std::uint8_t>> u8;  // per-slot uint8 letterbox (v1, unfused)
  course::DeviceBuffer<float> f32;                     // one float output per slot, contiguous
  course::DeviceBuffer<__half> f16;                    // one FP16 output per slot, contiguous
  HostNv12 nv12_host;                                  // the frame as NV12 (BT.601)
  std::vector<DeviceNv12> nv12;                        // copies of it in device memory
  std::vector<Nv12View> nv12_views;
  course::Stream stream;
  double src_read = 0.0;   // bytes the taps read from one BGR frame (source_footprint)
  double nv12_read = 0.0;  // the same for the NV12 frame (nv12_footprint)
  std::size_t slots = 0;
  std::size_t next = 0;

  std::size_t take() { return next++ % slots; }
  float* out(std::size_t slot) { return f32.data() + slot * 3 * static_cast<std::size_t>(kPixels); }
  __half* out16(std::size_t slot) {
    return f16.data() + slot * 3 * static_cast<std::size_t>(kPixels);
  }
  ImageView pinned_view() const {
    return {pinned.data(), w, h, 3, 3 * static_cast<std::size_t>(w)};
  }
  std::string size() const { return std::to_string(w) + "x" + std::to_string(h); }
};

Data& data(int w, int h) {
  static std::map<std::pair<int, int>, std::unique_ptr<Data>> all;
  std::unique_ptr<Data>& d = all[{w, h}];
  if (d) return *d;
  d = std::make_unique<Data>();
  d->w = w;
  d->h = h;
  d->host = cv::Mat(h, w, CV_8UC3);
  cv::RNG(6).fill(d->host, cv::RNG::UNIFORM, 0, 256);
  d->pinned = course::PinnedBuffer<std::uint8_t>(3 * static_cast<std::size_t>(w) * h);
  std::copy(d->host.datastart, d->host.dataend, d->pinned.data());
  const Letterbox lb = make_letterbox(w, h, kDstW, kDstH);
  const Affine2x3 inv = invert_affine(letterbox_matrix(lb));
  d->src_read = static_cast<double>(source_footprint(w, h, inv, kDstW, kDstH).bytes);
  d->nv12_read = static_cast<double>(nv12_footprint(w, h, inv, kDstW, kDstH).bytes);
  d->nv12_host = nv12_from_bgr(d->host);
  const double per_slot = 4.5 * w * h + kF32Bytes + kF16Bytes + kU8Bytes;
  const double l2 = course::query_device(0).l2_cache_bytes;
  d->slots = std::max<std::size_t>(kBatch, static_cast<std::size_t>(4.0 * l2 / per_slot) + 1);
  for (std::size_t i = 0; i < d->slots; ++i) {
    d->src.emplace_back(w, h);
    d->src.back().upload(view_of(d->host), d->stream);
    d->views.push_back(d->src.back().view());
    d->u8.emplace_back(static_cast<std::size_t>(kU8Bytes));
    d->nv12.emplace_back(w, h);
    d->nv12.back().upload(d->nv12_host.view(), d->stream);
    d->nv12_views.push_back(d->nv12.back().view());
  }
  d->f32 = course::DeviceBuffer<float>(d->slots * 3 * static_cast<std::size_t>(kPixels));
  d->f16 = course::DeviceBuffer<__half>(d->slots * 3 * static_cast<std::size_t>(kPixels));
  d->stream.synchronize();
  return *d;
}

Data& data(const benchmark::State& state) {
  return data(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
}

// Per source size, measured first (registration order is run order): the CPU pipeline's and
// the unfused GPU path's seconds per frame, one value per repetition; ratios use their median, so
// they do not depend on which repetition of the baseline ran last.
std::map<std::string, std::vector<double>> g_cpu_seconds, g_unfused_seconds;

// Single-frame and batch rows: GPU time and latency, the harness's way. No flush: the rotation
// keeps the L2 from helping (see the top of this file).
const course::bench::Options kTimed{course::L2::warm, /*latency=*/true};

void report(benchmark::State& state, const Data& d, double bytes, double seconds, double frames,
            const std::string& label) {
  course::bench::report_bandwidth(state, bytes, seconds);
  state.SetLabel(d.size() + ", " + label);
  if (seconds <= 0.0) return;
  state.counters["frames/s"] = frames / seconds;
  const auto it = g_unfused_seconds.find(d.size());
  if (it != g_unfused_seconds.end() && !it->second.empty())
    state.counters["%unfused"] = 100.0 * course::median(it->second) * frames / seconds;
}

// ---- CPU: what a user writes without a GPU kernel (timed on the host, OpenCV's threads).
void BM_cpu_opencv_pipeline(benchmark::State& state) {
  Data& d = data(state);
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
  g_cpu_seconds[d.size()].push_back(mean);
  state.counters["frames/s"] = 1.0 / mean;
  state.SetLabel(d.size() + ", CPU, " + std::to_string(cv::getNumThreads()) + " OpenCV threads");
}

// A uint8 letterbox (v1, or NPP's), then, with `convert`, the second kernel of the unfused path.
using U8Letterbox = Letterbox (*)(const ImageView&, std::uint8_t*, int, int, cudaStream_t);
double time_u8_path(benchmark::State& state, Data& d, U8Letterbox u8, bool convert) {
  return course::bench::time_on_gpu(state, d.stream, kTimed, [&] {
    const std::size_t i = d.take();
    u8(d.views[i], d.u8[i].data(), kDstW, kDstH, d.stream);
    if (convert) hwc_u8_to_chw_f32(d.u8[i].data(), kDstW, kDstH, d.out(i), {}, d.stream);
  });
}

// ---- The unfused GPU path: warp to uint8, then a second kernel converts. The baseline.
void BM_gpu_unfused(benchmark::State& state) {
  Data& d = data(state);
  const double s = time_u8_path(state, d, letterbox_v1_u8, true);
  g_unfused_seconds[d.size()].push_back(s);
  // The intermediate is written by the first kernel and read back by the second.
  report(state, d, d.src_read + 2 * kU8Bytes + kF32Bytes, s, 1, "rotated, 2 kernels");
}

void BM_v1_warp_u8(benchmark::State& state) {
  Data& d = data(state);
  const double s = time_u8_path(state, d, letterbox_v1_u8, false);
  report(state, d, d.src_read + kU8Bytes, s, 1, "rotated, uint8 HWC out only");
}

template <Letterbox (*Kernel)(const ImageView&, float*, int, int, const Normalize&, cudaStream_t)>
void BM_fused(benchmark::State& state) {
  Data& d = data(state);
  const double s = course::bench::time_on_gpu(state, d.stream, kTimed, [&] {
    const std::size_t i = d.take();
    Kernel(d.views[i], d.out(i), kDstW, kDstH, {}, d.stream);
  });
  report(state, d, d.src_read + kF32Bytes, s, 1, "rotated");
}

// ---- From a host frame: the upload (pinned memory, cudaMemcpy2DAsync) and v2 on one stream.
// What the CPU pipeline is compared with: both start from the frame in host memory.
void BM_upload_v2_fused(benchmark::State& state) {
  Data& d = data(state);
  const ImageView host = d.pinned_view();
  const double s = course::bench::time_on_gpu(state, d.stream, kTimed, [&] {
    const std::size_t i = d.take();
    d.src[i].upload(host, d.stream);
    letterbox_v2_fused(d.views[i], d.out(i), kDstW, kDstH, {}, d.stream);
  });
  // GB/s here would mix a PCIe copy with device-memory traffic: only frames/s and x_cpu.
  state.SetLabel(d.size() + ", pinned host frame, upload + v2");
  if (s <= 0.0) return;
  state.counters["frames/s"] = 1.0 / s;
  const auto cpu = g_cpu_seconds.find(d.size());
  const auto lat = state.counters.find("latency_us");
  if (cpu != g_cpu_seconds.end() && !cpu->second.empty() && lat != state.counters.end() &&
      lat->second > 0.0) {
    state.counters["x_cpu"] = course::median(cpu->second) / (1e-6 * lat->second);
  }
}

// ---- 32 frames: 32 launches of v3 against one batched launch (v4).
void BM_v3_x32_launches(benchmark::State& state) {
  Data& d = data(state);
  const double s = course::bench::time_on_gpu(state, d.stream, kTimed, [&] {
    for (int i = 0; i < kBatch; ++i)
      letterbox_v3_vec4(d.views[i], d.out(i), kDstW, kDstH, {}, d.stream);
  });
  report(state, d, kBatch * (d.src_read + kF32Bytes), s, kBatch, "32 frames, 32 launches");
}

void BM_v4_batched_x32(benchmark::State& state) {
  Data& d = data(state);
  const std::vector<ImageView> frames(d.views.begin(), d.views.begin() + kBatch);
  const double s = course::bench::time_on_gpu(state, d.stream, kTimed, [&] {
    letterbox_v4_batched(frames, d.out(0), kDstW, kDstH, {}, d.stream);
  });
  report(state, d, kBatch * (d.src_read + kF32Bytes), s, kBatch, "32 frames, 1 launch");
}

// ---- v5: one NV12 frame (the decoder's format) into the float or FP16 tensor. Bytes: the NV12
// bytes the taps read (nv12_footprint: luma rows and spans, and their chroma rows) + the output.
// Compare with BM_v3_vec4 (the BGR frame, same kernel shape) at the same size.
template <class T>
void BM_nv12_v5(benchmark::State& state) {
  Data& d = data(state);
  const double s = course::bench::time_on_gpu(state, d.stream, kTimed, [&] {
    const std::size_t i = d.take();
    T* out = nullptr;
    if constexpr (std::is_same_v<T, float>)
      out = d.out(i);
    else
      out = d.out16(i);
    letterbox_nv12_v5(d.nv12_views[i], out, kDstW, kDstH, YuvMatrix::bt601, {}, d.stream);
  });
  report(state, d, d.nv12_read + 3.0 * sizeof(T) * kPixels, s, 1,
         std::string("rotated, NV12 BT.601 -> ") + (sizeof(T) == 4 ? "FP32" : "FP16"));
}

// ---- Batches of B frames in one launch (v4: BGR -> FP32; v6: BGR -> FP16, NV12 -> FP32/FP16).
// The slots are cut into groups of B, taken in turn, so consecutive samples touch different
// frames and outputs (at B = 32 there is one group, as in BM_v4_batched_x32). Bytes really
// touched: B x (the source bytes the taps read + the output written).
enum class Format { bgr, nv12 };
template <Format F, class T>
void BM_batched(benchmark::State& state) {
  Data& d = data(state);
  const int b = static_cast<int>(state.range(2));
  const std::size_t groups = std::max<std::size_t>(1, d.slots / b);
  std::size_t next = 0;
  const double s = course::bench::time_on_gpu(state, d.stream, kTimed, [&] {
    const std::size_t first = (next++ % groups) * b;
    T* out = nullptr;
    if constexpr (std::is_same_v<T, float>)
      out = d.out(first);
    else
      out = d.out16(first);
    if constexpr (F == Format::bgr) {
      const std::vector<ImageView> frames(d.views.begin() + first, d.views.begin() + first + b);
      if constexpr (std::is_same_v<T, float>)
        letterbox_v4_batched(frames, out, kDstW, kDstH, {}, d.stream);
      else
        letterbox_v6_batched(frames, out, kDstW, kDstH, {}, d.stream);
    } else {
      const std::vector<Nv12View> frames(d.nv12_views.begin() + first,
                                         d.nv12_views.begin() + first + b);
      letterbox_nv12_v6_batched(frames, out, kDstW, kDstH, YuvMatrix::bt601, {}, d.stream);
    }
  });
  const double read = F == Format::bgr ? d.src_read : d.nv12_read;
  report(state, d, b * (read + 3.0 * sizeof(T) * kPixels), s, b,
         std::to_string(b) + " frames, 1 launch, " + (F == Format::bgr ? "BGR" : "NV12") + " -> " +
             (sizeof(T) == 4 ? "FP32" : "FP16"));
}

// ---- NPP, the library a user would call instead (npp_baseline.hpp): nppiSet + nppiWarpAffine
// (uint8 BGR out), the same plus the lesson's hwc_u8_to_chw_f32 for the float tensor, and from
// NV12 (nppiNV12ToBGR into one scratch frame first). Registered only when the build found NPP.
void BM_npp_u8(benchmark::State& state) {
  Data& d = data(state);
  const double s = time_u8_path(state, d, letterbox_npp_u8, false);
  // NPP's warp may read other source bytes than ours; the count is the lesson's footprint.
  report(state, d, d.src_read + kU8Bytes, s, 1, "rotated, NPP set + warpAffine, uint8 out");
}

void BM_npp_f32(benchmark::State& state) {
  Data& d = data(state);
  const double s = time_u8_path(state, d, letterbox_npp_u8, true);
  report(state, d, d.src_read + 2 * kU8Bytes + kF32Bytes, s, 1,
         "rotated, NPP set + warpAffine + hwc_u8_to_chw_f32");
}

void BM_npp_nv12_f32(benchmark::State& state) {
  Data& d = data(state);
  static std::map<std::pair<int, int>, course::DeviceBuffer<std::uint8_t>> scratch;
  course::DeviceBuffer<std::uint8_t>& bgr = scratch[{d.w, d.h}];
  if (bgr.empty())
    bgr = course::DeviceBuffer<std::uint8_t>(3 * static_cast<std::size_t>(d.w) * d.h);
  const double s = course::bench::time_on_gpu(state, d.stream, kTimed, [&] {
    const std::size_t i = d.take();
    letterbox_npp_nv12_u8(d.nv12_views[i], bgr.data(), d.u8[i].data(), kDstW, kDstH, d.stream);
    hwc_u8_to_chw_f32(d.u8[i].data(), kDstW, kDstH, d.out(i), {}, d.stream);
  });
  // The whole NV12 frame is converted (read) and the BGR frame written, then read by the warp.
  report(state, d, 1.5 * d.w * d.h + 3.0 * d.w * d.h + d.src_read + 2 * kU8Bytes + kF32Bytes, s, 1,
         "rotated, NPP NV12ToBGR + set + warpAffine + hwc_u8_to_chw_f32");
}

void batch_sizes(benchmark::internal::Benchmark* b) {
  course::bench::defaults(b);
  for (const int n : {8, 32}) b->Args({1920, 1080, n})->Args({1280, 720, n});
}

void sizes(benchmark::internal::Benchmark* b) {
  course::bench::defaults(b);
  b->Args({1920, 1080})->Args({1280, 720});
}

}  // namespace

// Registration order is run order: the CPU times and the unfused baselines come first.
BENCHMARK(BM_cpu_opencv_pipeline)->Apply(sizes);
BENCHMARK(BM_gpu_unfused)->Apply(sizes);
BENCHMARK(BM_v1_warp_u8)->Apply(sizes);
BENCHMARK_TEMPLATE(BM_fused, letterbox_v2_fused)->Name("BM_v2_fused")->Apply(sizes);
BENCHMARK_TEMPLATE(BM_fused, letterbox_v3_vec4)->Name("BM_v3_vec4")->Apply(sizes);
BENCHMARK(BM_upload_v2_fused)->Apply(sizes);
BENCHMARK(BM_v3_x32_launches)->Apply(sizes);
BENCHMARK(BM_v4_batched_x32)->Apply(sizes);
BENCHMARK_TEMPLATE(BM_nv12_v5, float)->Name("BM_nv12_v5_fp32")->Apply(sizes);
BENCHMARK_TEMPLATE(BM_nv12_v5, __half)->Name("BM_nv12_v5_fp16")->Apply(sizes);
BENCHMARK_TEMPLATE(BM_batched, Format::bgr, float)->Name("BM_batched_bgr_fp32")->Apply(batch_sizes);
BENCHMARK_TEMPLATE(BM_batched, Format::bgr, __half)
    ->Name("BM_batched_bgr_fp16")
    ->Apply(batch_sizes);
BENCHMARK_TEMPLATE(BM_batched, Format::nv12, float)
    ->Name("BM_batched_nv12_fp32")
    ->Apply(batch_sizes);
BENCHMARK_TEMPLATE(BM_batched, Format::nv12, __half)
    ->Name("BM_batched_nv12_fp16")
    ->Apply(batch_sizes);

// The NPP rows exist only in a build that found NPP (registered after the rows above, so they run
// last); otherwise the run says so once, before Google Benchmark's output.
const bool g_npp_rows = [] {
  if (!npp_available()) {
    std::printf("BM_npp_u8, BM_npp_f32, BM_npp_nv12_f32: %s\n", npp_build_note().c_str());
    std::fflush(stdout);
    return false;
  }
  benchmark::RegisterBenchmark("BM_npp_u8", BM_npp_u8)->Apply(sizes);
  benchmark::RegisterBenchmark("BM_npp_f32", BM_npp_f32)->Apply(sizes);
  benchmark::RegisterBenchmark("BM_npp_nv12_f32", BM_npp_nv12_f32)->Apply(sizes);
  return true;
}();

COURSE_BENCH_MAIN();
