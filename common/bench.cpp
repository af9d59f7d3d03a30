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
double measure_d2d_copy_gbps() {
  // 1 GiB copied: large enough to defeat the L2 (tens of MiB) and amortise launch costs.
  constexpr std::size_t bytes = std::size_t{1} << 30;
  DeviceBuffer<unsigned char> src(bytes), dst(bytes);
  CUDA_CHECK(cudaMemset(src.data(), 1, bytes));
  Stream stream;
  std::vector<float> ms;
  for (int i = 0; i < 11; ++i) {
    ms.push_back(time_on_stream_ms(stream, [&] {
      CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice, stream));
    }));
  }
  std::sort(ms.begin() + 1, ms.end());  // the first is a warm-up
  const double median_s = ms[1 + ms.size() / 2 - 1] / 1e3;
  return 2.0 * bytes / median_s / 1e9;  // every byte is read once and written once
}

std::map<std::string, double>& baselines() {
  static std::map<std::string, double> b;
  return b;
}
}  // namespace

const Ceilings& ceilings() {
  static const Ceilings c = [] {
    const DeviceInfo info = query_device(0);
    return Ceilings{info.name, info.peak_dram_gbps(), measure_d2d_copy_gbps()};
  }();
  return c;
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
  baselines()[name] = gbps;
}

void report_vs_baseline(benchmark::State& state, const std::string& name, double gbps) {
  const auto it = baselines().find(name);
  if (it != baselines().end() && it->second > 0.0) {
    state.counters["%" + name] = 100.0 * gbps / it->second;
  }
}

int run_main(int argc, char** argv) {
  try {
    benchmark::Initialize(&argc, argv);
    if (!require_device(argv[0])) return 1;
    const DeviceInfo info = query_device(0);
    const Ceilings& c = ceilings();
    std::printf(
        "%s\ndevice-to-device cudaMemcpy: %.0f GB/s (%.0f%% of the theoretical %.0f GB/s)\n",
        summary(info).c_str(), c.d2d_copy_gbps, 100.0 * c.d2d_copy_gbps / c.dram_theoretical_gbps,
        c.dram_theoretical_gbps);
    benchmark::AddCustomContext("device", info.name);
    benchmark::AddCustomContext("compute_capability", info.compute_capability());
    benchmark::AddCustomContext("dram_theoretical_gbps", std::to_string(c.dram_theoretical_gbps));
    benchmark::AddCustomContext("d2d_copy_gbps", std::to_string(c.d2d_copy_gbps));
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
