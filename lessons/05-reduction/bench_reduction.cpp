// Lesson 05 benchmark: every version of the sum at 2^28 floats (1 GiB) against
// cub::DeviceReduce::Sum and thrust::reduce, a size sweep 2^10..2^28 of the best version and of
// CUB, and the deployment kernels. Host code only (the kernels are in reduction.cu).
//
//   make bench LESSON=05        (JSON in build/bench/lesson05.json)
//   build/lessons/05-reduction/lesson05_bench --benchmark_filter=sum/
//
// Times are GPU time (launch latency excluded: common/timing.hpp) unless labelled "end to end".
// Counters: GB/s (input bytes read once, softmax: read + written), %copy (of the better device
// copy measured at start-up, which counts bytes read + written), %cub (of
// cub::DeviceReduce::Sum's GPU time at the same n, measured earlier in this run), latency_us
// (host call to completion) for CUB and the best version over sizes.
// The input is one buffer re-read every iteration: sizes that fit in the L2 (tens of MiB) are
// served from it, as data just written by a previous kernel often is in an inference pipeline.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "common/bench.hpp"
#include "common/cuda_check.hpp"
#include "common/memory.hpp"
#include "common/stream.hpp"
#include "reduction.cuh"

namespace {

constexpr std::int64_t kLargest = std::int64_t{1} << 28;

// 2^28 floats in [-1, 1), filled once on first use and shared by every benchmark.
const float* input() {
  static const course::DeviceBuffer<float> buffer = [] {
    course::DeviceBuffer<float> b(kLargest);
    reduction::fill_uniform(b.data(), b.size(), 1, -1.0f, 1.0f, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    return b;
  }();
  return buffer.data();
}

std::string cub_at(std::size_t n) {
  return "cub@" + std::to_string(n);
}

void report(benchmark::State& state, std::size_t n, double seconds) {
  const double bytes = static_cast<double>(n) * sizeof(float);
  course::bench::report_bandwidth(state, bytes, seconds);
  course::bench::report_vs_baseline(state, cub_at(n), bytes / seconds / 1e9);
  state.counters["n"] = static_cast<double>(n);
}

// The baseline: registered first, so it runs first and every later benchmark can divide by it.
void BM_cub_sum(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  course::Stream stream;
  course::DeviceBuffer<float> out(1);
  course::DeviceBuffer<unsigned char> temp;
  const double s = course::bench::time_on_gpu(
      state, stream, course::bench::Options{course::L2::warm, true},
      [&] { reduction::cub_sum(input(), n, out.data(), temp, stream); });
  if (s > 0.0) course::bench::set_baseline(cub_at(n), n * sizeof(float) / s / 1e9);
  // CUB's end-to-end rate too: the baseline of thrust::reduce, which can only be timed that way.
  const double latency_s = state.counters["latency_us"] / 1e6;
  if (latency_s > 0.0) {
    course::bench::set_baseline("cub_end_to_end@" + std::to_string(n),
                                n * sizeof(float) / latency_s / 1e9);
  }
  report(state, n, s);
}

// Includes Thrust's temporary allocation and its copy of the result back to the host: the call
// blocks the host thread, so only its end-to-end time exists; %cub_end_to_end compares it with
// CUB's end-to-end time at the same n (host call to completion, measured by BM_cub_sum).
void BM_thrust_reduce(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  course::Stream stream;
  float result = 0.0f;
  const double s = course::bench::time_on_host(
      state, [&] { result = reduction::thrust_sum(input(), n, stream); });
  benchmark::DoNotOptimize(result);
  state.SetLabel("end to end");
  state.counters["latency_us"] = 1e6 * s;
  const double bytes = static_cast<double>(n) * sizeof(float);
  course::bench::report_throughput(state, bytes, s);
  if (s > 0.0) {
    course::bench::report_vs_baseline(state, "cub_end_to_end@" + std::to_string(n), bytes / s / 1e9);
  }
  state.counters["n"] = static_cast<double>(n);
}

// Times launch(input, n, out, workspace, stream) writing one T: the shape of reduce_sum (with
// the version bound), argmax and moments.
// latency_us: host call to completion, beside the GPU time, where `latency` is set.
template <class T, class Launch>
void time_reduction(benchmark::State& state, std::size_t n, Launch launch, bool latency = false) {
  course::Stream stream;
  course::DeviceBuffer<T> out(1);
  reduction::Workspace ws;
  const double s = course::bench::time_on_gpu(state, stream,
                                              course::bench::Options{course::L2::warm, latency},
                                              [&] { launch(input(), n, out.data(), ws, stream); });
  report(state, n, s);
}

// Every version at 2^28; the argument is the version number.
void BM_sum_version(benchmark::State& state) {
  const int version = static_cast<int>(state.range(0));
  state.SetLabel(reduction::versions().at(version).name);
  time_reduction<float>(
      state, kLargest,
      [version](const float* in, std::size_t n, float* out, reduction::Workspace& ws,
                cudaStream_t s) { reduction::reduce_sum(version, in, n, out, ws, s); });
}

// The best version over sizes; the argument is n.
void BM_sum_best(benchmark::State& state) {
  state.SetLabel(reduction::versions().at(reduction::kBestVersion).name);
  time_reduction<float>(
      state, static_cast<std::size_t>(state.range(0)),
      [](const float* in, std::size_t n, float* out, reduction::Workspace& ws, cudaStream_t s) {
        reduction::reduce_sum(reduction::kBestVersion, in, n, out, ws, s);
      },
      /*latency=*/true);
}

void BM_argmax(benchmark::State& state) {
  time_reduction<reduction::ArgMax>(state, static_cast<std::size_t>(state.range(0)),
                                    reduction::argmax);
}

void BM_moments(benchmark::State& state) {
  time_reduction<reduction::Moments>(state, static_cast<std::size_t>(state.range(0)),
                                     reduction::moments);
}

// Softmax over class scores, rows x cols: e.g. 8400 anchors x 80 classes (a YOLOv8 head at
// 640x640) and a batch of 256 images x 1000 ImageNet classes. Bytes: read once, written once.
void BM_softmax_rows(benchmark::State& state) {
  const auto rows = static_cast<std::size_t>(state.range(0));
  const auto cols = static_cast<std::size_t>(state.range(1));
  course::Stream stream;
  course::DeviceBuffer<float> out(rows * cols);
  const double s = course::bench::time_on_gpu(
      state, stream, [&] { reduction::softmax_rows(input(), out.data(), rows, cols, stream); });
  course::bench::report_bandwidth(state, 2.0 * rows * cols * sizeof(float), s);
}

// Short minimum time: the sweep's small sizes take microseconds, and each iteration waits for
// its stop event; a few thousand iterations per repetition are plenty for a stable median.
void settings(benchmark::internal::Benchmark* b) {
  course::bench::defaults(b);
  b->MinTime(0.05);
}

}  // namespace

BENCHMARK(BM_cub_sum)->Apply(settings)->RangeMultiplier(2)->Range(1 << 10, kLargest);
BENCHMARK(BM_thrust_reduce)->Apply(settings)->Arg(kLargest);
BENCHMARK(BM_sum_version)->Apply(settings)->DenseRange(0, 7);
BENCHMARK(BM_sum_best)->Apply(settings)->RangeMultiplier(2)->Range(1 << 10, kLargest);
BENCHMARK(BM_argmax)->Apply(settings)->Arg(kLargest);
BENCHMARK(BM_moments)->Apply(settings)->Arg(kLargest);
BENCHMARK(BM_softmax_rows)->Apply(settings)->Args({8400, 80})->Args({256, 1000});

COURSE_BENCH_MAIN();
