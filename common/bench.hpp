// The benchmark harness every performance lesson uses: Google Benchmark for repetitions,
// statistics (median) and JSON output; CUDA events for the time, because a kernel launch
// returns before the kernel runs and host clocks would time the launch, not the work.
//
//   static void BM_reduce_v3(benchmark::State& state) {
//     ...allocate once...
//     course::bench::time_on_gpu(state, stream, [&] { reduce_v3(in, out, n, stream); });
//     course::bench::report_bandwidth(state, n * sizeof(float));
//   }
//   BENCHMARK(BM_reduce_v3)->Apply(course::bench::defaults);
//   COURSE_BENCH_MAIN();
//
// Every benchmark binary accepts Google Benchmark's flags, e.g.
//   --benchmark_filter=v3 --benchmark_out=out.json --benchmark_out_format=json
#pragma once

#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <utility>

#include "common/cuda_check.hpp"
#include "common/stream.hpp"

namespace course::bench {

// Manual (GPU) time, microseconds, 5 repetitions reported as mean/median/stddev aggregates.
void defaults(benchmark::internal::Benchmark* b);

// One warm-up call, then each iteration times `enqueue()` on `stream` with CUDA events and hands
// the seconds to Google Benchmark (UseManualTime). `setup()` runs before every iteration, outside
// the timed region (e.g. to put managed pages back on the host). Returns the mean seconds per
// iteration.
template <class Setup, class F>
double time_on_gpu(benchmark::State& state, cudaStream_t stream, Setup&& setup, F&& enqueue) {
  setup();
  enqueue();  // warm-up: first-launch costs (module loading, caches) stay out of the numbers
  CUDA_CHECK(cudaStreamSynchronize(stream));
  Event start, stop;
  double total_s = 0.0;
  for (auto _ : state) {
    setup();
    start.record(stream);
    enqueue();
    stop.record(stream);
    const double s = elapsed_ms(start, stop) / 1e3;
    total_s += s;
    state.SetIterationTime(s);
  }
  return state.iterations() > 0 ? total_s / static_cast<double>(state.iterations()) : 0.0;
}

template <class F>
double time_on_gpu(benchmark::State& state, cudaStream_t stream, F&& enqueue) {
  return time_on_gpu(
      state, stream, [] {}, std::forward<F>(enqueue));
}

// Host wall-clock seconds of `run()`, which must finish its own GPU work: for costs paid on the
// CPU, in the driver (allocation, launch overhead), where CUDA events do not see them.
template <class F>
double time_on_host(benchmark::State& state, F&& run) {
  run();  // warm-up
  double total_s = 0.0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    run();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    total_s += s;
    state.SetIterationTime(s);
  }
  return state.iterations() > 0 ? total_s / static_cast<double>(state.iterations()) : 0.0;
}

// The hardware ceilings a run is compared with, measured or read once per process.
struct Ceilings {
  std::string device;            // device name
  double dram_theoretical_gbps;  // from memory clock x bus width (DeviceInfo::peak_dram_gbps)
  double d2d_copy_gbps;          // cudaMemcpy device-to-device, bytes read + written per second
};
const Ceilings& ceilings();

// Counters for a memory-bound kernel that moves `bytes` (read + written) per iteration:
// GB/s, and % of the device-to-device copy bandwidth measured in this run.
void report_bandwidth(benchmark::State& state, double bytes, double seconds_per_iteration);

// Only the GB/s counter: for transfers whose ceiling is not device memory (PCIe/NVLink-C2C
// host copies), where % of the device-to-device copy would mislead.
void report_throughput(benchmark::State& state, double bytes, double seconds_per_iteration);

// Records `gbps` as the library baseline under `name` (e.g. "cub") so that later benchmarks can
// report % of it with report_vs_baseline. Baselines are registered first, so they run first.
void set_baseline(const std::string& name, double gbps);
void report_vs_baseline(benchmark::State& state, const std::string& name, double gbps);

// Initialise Google Benchmark, print and record the device and its ceilings as JSON context,
// run. Returns main's exit code (non-zero with a one-line reason when there is no GPU).
int run_main(int argc, char** argv);

}  // namespace course::bench

#define COURSE_BENCH_MAIN()                       \
  int main(int argc, char** argv) {               \
    return ::course::bench::run_main(argc, argv); \
  }
