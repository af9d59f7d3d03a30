// Lesson 04 benchmark: how close the pipeline gets to its ideal, and what a CUDA Graph saves.
//
//   make bench LESSON=04        (JSON in build/bench/lesson04.json)
//
// One batch of 128 MiB each way, as in the lesson binary, with the mix rounds calibrated once so
// that the kernel takes about as long as the H2D copy (the balanced case). Times are GPU time from
// CUDA events on the pipeline's origin stream, which the batch forks from and joins back to.
//
// The ceiling here is not DRAM but the host link: the pinned copies, measured in the same run
// (BM_copy_*), are the hardware limit; the serial pipeline is the baseline; the ideal pipeline
// (longest engine + one fill and drain, pipeline_bound) is the target. Counters:
//   GB/s      bytes over the host link (in + out) per second
//   speedup   serial time / this time
//   %ideal    ideal time / this time: the achieved fraction of the ideal speedup
//   us/frame  (frames) end-to-end latency per frame (host call to completion: what a graph
//             saves is launch work, which only this clock sees); gpu_us: the GPU time beside it;
//             %streams: frames per second relative to streams
#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

#include "common/bench.hpp"
#include "common/memory.hpp"
#include "common/stream.hpp"
#include "streams.cuh"

namespace cs = course::streams;

namespace {

constexpr std::size_t kN = std::size_t{32} << 20;  // 128 MiB of uint32
constexpr double kBytes = kN * sizeof(std::uint32_t);

struct Batch {
  course::PinnedBuffer<std::uint32_t> in{kN}, out{kN};
  std::vector<std::uint32_t> pageable_in, pageable_out;
  cs::Calibration cal;
  std::map<int, cs::StageTimes> serial;  // by rounds

  Batch() {
    std::uint32_t x = 12345u;
    for (auto& v : in) v = x = x * 1664525u + 1013904223u;
    pageable_in.assign(in.begin(), in.end());
    pageable_out.assign(kN, 0u);
    cal = cs::calibrate_rounds(in.data(), kN);
  }

  // Stage times of the serial run (1 stream, 1 chunk) at `rounds`: the median of 5 runs.
  const cs::StageTimes& serial_stages(int rounds) {
    auto it = serial.find(rounds);
    if (it != serial.end()) return it->second;
    cs::Pipeline p({kN, 1, 1, rounds, 1});
    cs::PipelineTrace trace(1);
    p.enqueue(in.data(), out.data());
    p.synchronize();
    std::vector<cs::StageTimes> runs;
    for (int r = 0; r < 5; ++r) {
      p.enqueue(in.data(), out.data(), &trace);
      const cs::ChunkTimes t = trace.read(1)[0];
      runs.push_back({t.h2d_end, t.kernel_end - t.h2d_end, t.d2h_end - t.kernel_end});
    }
    std::sort(runs.begin(), runs.end(), [](const cs::StageTimes& a, const cs::StageTimes& b) {
      return a.total_ms() < b.total_ms();
    });
    return serial.emplace(rounds, runs[runs.size() / 2]).first->second;
  }
};

Batch& batch() {
  static Batch b;
  return b;
}

void report_gbps(benchmark::State& state, double bytes, double seconds) {
  if (seconds > 0.0) state.counters["GB/s"] = bytes / seconds / 1e9;
}

void report_pipeline(benchmark::State& state, double seconds, const cs::StageTimes& serial,
                     int chunks) {
  if (seconds <= 0.0) return;
  const double ms = seconds * 1e3;
  const cs::PipelineBound bound = cs::pipeline_bound(serial, chunks);
  report_gbps(state, 2.0 * kBytes, seconds);
  state.counters["speedup"] = serial.total_ms() / ms;
  state.counters["ideal_ms"] = bound.ideal_ms;
  state.counters["%ideal"] = 100.0 * cs::fraction_of_ideal(bound, ms);
}

// ------------------------------------------------------------------ the host link: the ceiling

// From pinned memory: the copy engine's DMA straight from the user's pages. From pageable memory:
// through the driver's staging buffer, with the CPU copying into it.
void BM_copy_h2d(benchmark::State& state, bool pageable) {
  Batch& b = batch();
  course::DeviceBuffer<std::uint32_t> d(kN);
  course::Stream s;
  const std::uint32_t* src = pageable ? b.pageable_in.data() : b.in.data();
  const auto copy = [&] {
    CUDA_CHECK(cudaMemcpyAsync(d.data(), src, kBytes, cudaMemcpyHostToDevice, s));
  };
  // A pageable copy blocks the host while the driver stages it: only end-to-end time exists.
  const double t = pageable ? course::bench::time_on_host(state,
                                                          [&] {
                                                            copy();
                                                            s.synchronize();
                                                          })
                            : course::bench::time_on_gpu(state, s, copy);
  if (pageable) state.SetLabel("end to end");
  report_gbps(state, kBytes, t);
}

void BM_copy_d2h_pinned(benchmark::State& state) {
  Batch& b = batch();
  course::DeviceBuffer<std::uint32_t> d(kN);
  course::Stream s;
  CUDA_CHECK(cudaMemsetAsync(d.data(), 0, d.bytes(), s));
  const double t = course::bench::time_on_gpu(state, s, [&] {
    CUDA_CHECK(cudaMemcpyAsync(b.out.data(), d.data(), kBytes, cudaMemcpyDeviceToHost, s));
  });
  report_gbps(state, kBytes, t);
}

// Both directions at once, on two streams: what the pipeline's two copy stages share.
void BM_copy_bidirectional_pinned(benchmark::State& state) {
  Batch& b = batch();
  course::DeviceBuffer<std::uint32_t> d_in(kN), d_out(kN);
  course::Stream s1, s2;
  CUDA_CHECK(cudaMemsetAsync(d_out.data(), 0, d_out.bytes(), s1));
  course::Event fork(cudaEventDisableTiming), join(cudaEventDisableTiming);
  const double t = course::bench::time_on_gpu(state, s1, [&] {
    fork.record(s1);
    CUDA_CHECK(cudaStreamWaitEvent(s2, fork, 0));
    CUDA_CHECK(cudaMemcpyAsync(d_in.data(), b.in.data(), kBytes, cudaMemcpyHostToDevice, s1));
    CUDA_CHECK(cudaMemcpyAsync(b.out.data(), d_out.data(), kBytes, cudaMemcpyDeviceToHost, s2));
    join.record(s2);
    CUDA_CHECK(cudaStreamWaitEvent(s1, join, 0));
  });
  report_gbps(state, 2.0 * kBytes, t);
}

void BM_kernel(benchmark::State& state) {
  Batch& b = batch();
  course::DeviceBuffer<std::uint32_t> d_in(kN), d_out(kN);
  CUDA_CHECK(cudaMemcpy(d_in.data(), b.in.data(), kBytes, cudaMemcpyHostToDevice));
  course::Stream s;
  course::bench::time_on_gpu(
      state, s, [&] { cs::launch_mix(d_in.data(), d_out.data(), kN, b.cal.rounds, s); });
  state.counters["rounds"] = b.cal.rounds;
}

// ------------------------------------------------------------------ the pipeline

void run_pipeline(benchmark::State& state, int streams, int chunks, int rounds, bool pageable) {
  Batch& b = batch();
  const cs::StageTimes& serial = b.serial_stages(rounds);
  cs::Pipeline p({kN, chunks, streams, rounds, 1});
  const std::uint32_t* in = pageable ? b.pageable_in.data() : b.in.data();
  std::uint32_t* out = pageable ? b.pageable_out.data() : b.out.data();
  // Pageable copies block the host while they are staged: that run can only be timed end to end.
  const double t = pageable ? course::bench::time_on_host(state,
                                                          [&] {
                                                            p.enqueue(in, out);
                                                            CUDA_CHECK(cudaStreamSynchronize(p.origin()));
                                                          })
                            : course::bench::time_on_gpu(state, p.origin(), [&] { p.enqueue(in, out); });
  if (pageable) state.SetLabel("end to end");
  report_pipeline(state, t, serial, chunks);
  state.counters["rounds"] = rounds;
}

// Serial: one stream, one chunk. The baseline.
void BM_serial(benchmark::State& state) {
  run_pipeline(state, 1, 1, batch().cal.rounds, false);
}

// Args: streams K, chunks N.
void BM_pipeline(benchmark::State& state) {
  run_pipeline(state, static_cast<int>(state.range(0)), static_cast<int>(state.range(1)),
               batch().cal.rounds, false);
}

// Arg: kernel work in % of the balanced rounds (K = 4, N = 16): where does overlap pay most?
void BM_pipeline_balance(benchmark::State& state) {
  const int rounds = std::max(1, static_cast<int>(batch().cal.rounds * state.range(0) / 100));
  run_pipeline(state, 4, 16, rounds, false);
}

void BM_pipeline_pageable(benchmark::State& state) {
  run_pipeline(state, 4, 16, batch().cal.rounds, true);
}

// ------------------------------------------------------------------ launch overhead: graphs

const cs::PipelineConfig kFrame{std::size_t{1} << 16, 4, 4, 1, 16};  // 72 operations per frame

struct Frame {
  course::PinnedBuffer<std::uint32_t> in{kFrame.n}, out{kFrame.n};
  cs::Pipeline pipeline{kFrame};
};

// A frame's cost is what its host thread waits: us/frame is the end-to-end latency (host call
// to completion, launches included: what a graph saves), gpu_us the GPU time beside it.
void report_frame(benchmark::State& state, double gpu_seconds, bool baseline) {
  const double seconds = state.counters["latency_us"] / 1e6;
  if (seconds <= 0.0) return;
  state.counters["us/frame"] = seconds * 1e6;
  state.counters["gpu_us"] = gpu_seconds * 1e6;
  if (baseline) course::bench::set_baseline("streams", 1.0 / seconds);
  course::bench::report_vs_baseline(state, "streams", 1.0 / seconds);
}

void BM_frame_streams(benchmark::State& state) {
  Frame f;
  const double t = course::bench::time_on_gpu(
      state, f.pipeline.origin(), course::bench::Options{course::L2::warm, true},
      [&] { f.pipeline.enqueue(f.in.data(), f.out.data()); });
  report_frame(state, t, true);
}

void BM_frame_graph(benchmark::State& state) {
  Frame f;
  cs::PipelineGraph g = cs::capture_pipeline(f.pipeline, f.in.data(), f.out.data());
  const double t = course::bench::time_on_gpu(state, f.pipeline.origin(),
                                              course::bench::Options{course::L2::warm, true},
                                              [&] { g.exec.launch(f.pipeline.origin()); });
  report_frame(state, t, false);
  state.counters["nodes"] = static_cast<double>(g.graph.node_count());
}

}  // namespace

BENCHMARK_CAPTURE(BM_copy_h2d, pinned, false)->Apply(course::bench::defaults);
BENCHMARK(BM_copy_d2h_pinned)->Apply(course::bench::defaults);
BENCHMARK(BM_copy_bidirectional_pinned)->Apply(course::bench::defaults);
BENCHMARK_CAPTURE(BM_copy_h2d, pageable, true)->Apply(course::bench::defaults);
BENCHMARK(BM_kernel)->Apply(course::bench::defaults);
BENCHMARK(BM_serial)->Apply(course::bench::defaults);
BENCHMARK(BM_pipeline)
    ->ArgNames({"streams", "chunks"})
    ->Args({1, 16})
    ->Args({2, 16})
    ->Args({3, 16})
    ->Args({4, 4})
    ->Args({4, 8})
    ->Args({4, 16})
    ->Args({4, 32})
    ->Args({8, 32})
    ->Apply(course::bench::defaults);
BENCHMARK(BM_pipeline_balance)
    ->ArgName("kernel_pct")
    ->Arg(25)
    ->Arg(50)
    ->Arg(100)
    ->Arg(200)
    ->Arg(400)
    ->Apply(course::bench::defaults);
BENCHMARK(BM_pipeline_pageable)->Apply(course::bench::defaults);
BENCHMARK(BM_frame_streams)->Apply(course::bench::defaults);
BENCHMARK(BM_frame_graph)->Apply(course::bench::defaults);

COURSE_BENCH_MAIN();
