// The benchmark harness every performance lesson uses: Google Benchmark for repetitions,
// statistics (median) and JSON output; CUDA events behind a blocking kernel for the GPU time
// (common/timing.hpp: a launch returns before the kernel runs, and one launch between two
// events on an idle stream also times the launch latency, about 3.5 us on the H200 host); the
// host clock for end-to-end latency, where a caller would feel it (Options::latency).
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
#include <type_traits>
#include <utility>

#include "common/cuda_check.hpp"
#include "common/stream.hpp"
#include "common/timing.hpp"

namespace course::bench {

struct Options;
// Records the SM clock (NVML, read now) and the L2 state of the benchmark just measured.
void note_run_state(benchmark::State& state, const Options& o);

// Manual (GPU) time, microseconds, 5 repetitions reported as mean/median/stddev aggregates.
void defaults(benchmark::internal::Benchmark* b);

// How time_on_gpu measures (common/timing.hpp explains the two clocks and the L2 states).
struct Options {
  L2 l2 = L2::warm;      // flushed: the L2 is emptied before every sample, outside the interval
  bool latency = false;  // also measure end-to-end latency (host call to completion) per
                         // iteration and report it as the counter "latency_us" (the mean over
                         // the repetition's iterations); the iteration time stays GPU time
};

// One warm-up call, then each iteration measures the GPU time of `enqueue()` on `stream` with
// the blocking-kernel hold (gpu_time_ms: launch latency excluded) and hands the seconds to
// Google Benchmark (UseManualTime). `setup()` runs before every sample, outside the timed
// region (e.g. to put managed pages back on the host). `enqueue` must not block the host thread
// (a pageable copy, a synchronisation): time such work with time_on_host. Also records the SM
// clock NVML read after the last iteration (counter "sm_MHz") and the L2 state (counter
// "l2_flushed": 1 or 0). Returns the mean GPU seconds per iteration.
template <class Setup, class F>
double time_on_gpu(benchmark::State& state, cudaStream_t stream, const Options& o, Setup&& setup,
                   F&& enqueue) {
  setup();
  enqueue();  // warm-up: first-launch costs (module loading, caches) stay out of the numbers
  CUDA_CHECK(cudaStreamSynchronize(stream));
  double total_s = 0.0, latency_s = 0.0;
  for (auto _ : state) {
    setup();
    const double s = gpu_time_ms(stream, enqueue, o.l2) / 1e3;
    total_s += s;
    state.SetIterationTime(s);
    if (o.latency) {
      setup();
      latency_s += latency_ms(stream, enqueue, o.l2) / 1e3;
    }
  }
  const double n = state.iterations() > 0 ? static_cast<double>(state.iterations()) : 1.0;
  if (o.latency) state.counters["latency_us"] = 1e6 * latency_s / n;
  note_run_state(state, o);
  return state.iterations() > 0 ? total_s / n : 0.0;
}

template <class F>
double time_on_gpu(benchmark::State& state, cudaStream_t stream, const Options& o, F&& enqueue) {
  return time_on_gpu(
      state, stream, o, [] {}, std::forward<F>(enqueue));
}

template <class Setup, class F,
          class = std::enable_if_t<!std::is_same_v<std::decay_t<Setup>, Options>>>
double time_on_gpu(benchmark::State& state, cudaStream_t stream, Setup&& setup, F&& enqueue) {
  return time_on_gpu(state, stream, Options{}, std::forward<Setup>(setup), std::forward<F>(enqueue));
}

template <class F>
double time_on_gpu(benchmark::State& state, cudaStream_t stream, F&& enqueue) {
  return time_on_gpu(
      state, stream, Options{}, [] {}, std::forward<F>(enqueue));
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
  double memcpy_gbps;            // cudaMemcpy device-to-device of 1 GiB, bytes read + written
  double copy_kernel_gbps;       // a 16-byte-per-thread grid-stride copy kernel, same bytes
  double d2d_copy_gbps;          // the better of the two: the "%copy" ceiling
};
const Ceilings& ceilings();

// Counters for a memory-bound kernel that moves `bytes` (read + written) per iteration:
// GB/s, and % of the device-to-device copy bandwidth measured in this run.
void report_bandwidth(benchmark::State& state, double bytes, double seconds_per_iteration);

// Only the GB/s counter: for transfers whose ceiling is not device memory (PCIe/NVLink-C2C
// host copies), where % of the device-to-device copy would mislead.
void report_throughput(benchmark::State& state, double bytes, double seconds_per_iteration);

// Records `gbps` as the library baseline under `name` (e.g. "cub") so that later benchmarks can
// report % of it with report_vs_baseline (against the median of the last 5 values recorded under
// the name: the baseline's 5 repetitions). Baselines are registered first, so they run first.
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
