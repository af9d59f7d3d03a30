#include "common/bench.hpp"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <map>
#include <vector>

#include "common/device.hpp"
#include "common/memory.hpp"

namespace course::bench {

void defaults(benchmark::internal::Benchmark* b) {
  b->UseManualTime()->Unit(benchmark::kMicrosecond)->Repetitions(5)->ReportAggregatesOnly(true);
}

namespace {
// GB/s of `copy` (1 GiB, bytes read + written), median of 10 GPU-time samples after a warm-up.
template <class F>
double copy_gbps(std::size_t bytes, const Stream& stream, F&& copy) {
  const Timing t = measure(stream, 10, copy, L2::warm, /*with_latency=*/false);
  return 2.0 * static_cast<double>(bytes) / (t.gpu_ms / 1e3) / 1e9;
}

// 1 GiB: large enough to defeat the L2 (tens of MiB) and make the copy's own time dominate.
Ceilings measure_ceilings() {
  constexpr std::size_t bytes = std::size_t{1} << 30;
  DeviceBuffer<unsigned char> src(bytes), dst(bytes);
  CUDA_CHECK(cudaMemset(src.data(), 1, bytes));
  Stream stream;
  Ceilings c;
  const DeviceInfo info = query_device(0);
  c.device = info.name;
  c.dram_theoretical_gbps = info.peak_dram_gbps();
  c.memcpy_gbps = copy_gbps(bytes, stream, [&] {
    CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice, stream));
  });
  c.copy_kernel_gbps =
      copy_gbps(bytes, stream, [&] { copy_kernel(dst.data(), src.data(), bytes, stream); });
  c.d2d_copy_gbps = std::max(c.memcpy_gbps, c.copy_kernel_gbps);
  return c;
}

// Every value recorded under a name: one per repetition of the baseline's benchmark.
std::map<std::string, std::vector<double>>& baselines() {
  static std::map<std::string, std::vector<double>> b;
  return b;
}
}  // namespace

const Ceilings& ceilings() {
  static const Ceilings c = measure_ceilings();
  return c;
}

void note_run_state(benchmark::State& state, const Options& o) {
  const GpuClocks clocks = read_gpu_clocks(0);
  if (clocks.available) state.counters["sm_MHz"] = clocks.sm_mhz;
  state.counters["l2_flushed"] = o.l2 == L2::flushed ? 1.0 : 0.0;
}

void report_throughput(benchmark::State& state, double bytes, double seconds_per_iteration) {
  if (seconds_per_iteration <= 0.0) return;
  state.counters["GB/s"] = bytes / seconds_per_iteration / 1e9;
}

void report_bandwidth(benchmark::State& state, double bytes, double seconds_per_iteration) {
  if (seconds_per_iteration <= 0.0) return;
  report_throughput(state, bytes, seconds_per_iteration);
  state.counters["%copy"] =
      100.0 * (bytes / seconds_per_iteration / 1e9) / ceilings().d2d_copy_gbps;
}

void set_baseline(const std::string& name, double gbps) {
  baselines()[name].push_back(gbps);
}

// Against the median of the last 5 values recorded under the name: the 5 repetitions of the
// baseline's most recent run (defaults() asks for 5; Google Benchmark's trial runs, which pick
// the iteration count, come before them, and a benchmark that records the same name for several
// sizes runs each size's baseline just before the rows that compare with it). So the ratio does
// not depend on which repetition ran last, and never mixes sizes or trials.
void report_vs_baseline(benchmark::State& state, const std::string& name, double gbps) {
  const auto it = baselines().find(name);
  if (it == baselines().end() || it->second.empty()) return;
  const std::vector<double>& v = it->second;
  const std::size_t last = std::min<std::size_t>(5, v.size());
  const double base =
      median(std::vector<double>(v.end() - static_cast<std::ptrdiff_t>(last), v.end()));
  if (base > 0.0) state.counters["%" + name] = 100.0 * gbps / base;
}

int run_main(int argc, char** argv) {
  try {
    benchmark::Initialize(&argc, argv);
    if (!require_device(argv[0])) return 1;
    const DeviceInfo info = query_device(0);
    const Ceilings& c = ceilings();
    const GpuClocks clocks = read_gpu_clocks(0);
    // The floor every GPU time below includes (common/timing.hpp: gpu_time_floor_ms).
    constexpr int floor_reps = 21;
    double floor_us = 0.0;
    {
      Stream stream;
      floor_us = 1e3 * gpu_time_floor_ms(stream, floor_reps);
    }
    std::printf(
        "%s\n%s\ndevice copy ceiling: cudaMemcpy %.0f GB/s, copy kernel %.0f GB/s (GPU time, "
        "1 GiB, bytes read + written); %%copy uses %.0f GB/s, %.0f%% of the theoretical %.0f GB/s\n"
        "%s\n",
        summary(info).c_str(), describe(clocks).c_str(), c.memcpy_gbps, c.copy_kernel_gbps,
        c.d2d_copy_gbps, 100.0 * c.d2d_copy_gbps / c.dram_theoretical_gbps, c.dram_theoretical_gbps,
        format_harness_floor(floor_us / 1e3, floor_reps).c_str());
    benchmark::AddCustomContext("device", info.name);
    benchmark::AddCustomContext("compute_capability", info.compute_capability());
    benchmark::AddCustomContext("dram_theoretical_gbps", std::to_string(c.dram_theoretical_gbps));
    benchmark::AddCustomContext("d2d_copy_gbps", std::to_string(c.d2d_copy_gbps));
    benchmark::AddCustomContext("memcpy_gbps", std::to_string(c.memcpy_gbps));
    benchmark::AddCustomContext("copy_kernel_gbps", std::to_string(c.copy_kernel_gbps));
    benchmark::AddCustomContext("harness_floor_us", std::to_string(floor_us));
    benchmark::AddCustomContext("timing",
                                "GPU time: CUDA events behind a blocking kernel (launch latency "
                                "excluded); latency_us: host call to completion");
    if (clocks.available) {
      benchmark::AddCustomContext("sm_mhz_at_start", std::to_string(clocks.sm_mhz));
      benchmark::AddCustomContext("sm_max_mhz", std::to_string(clocks.sm_max_mhz));
      benchmark::AddCustomContext("mem_mhz", std::to_string(clocks.mem_mhz));
      benchmark::AddCustomContext("persistence_mode", clocks.persistence == 1   ? "on"
                                                      : clocks.persistence == 0 ? "off"
                                                                                : "unknown");
    } else {
      benchmark::AddCustomContext("clocks", clocks.why);
    }
    int driver = 0, runtime = 0;
    CUDA_CHECK(cudaDriverGetVersion(&driver));
    CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
    const auto version = [](int v) {
      return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
    };
    benchmark::AddCustomContext("cuda_driver_api", version(driver));
    benchmark::AddCustomContext("cuda_runtime", version(runtime));
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", argv[0], e.what());
    return 1;
  }
}

}  // namespace course::bench
