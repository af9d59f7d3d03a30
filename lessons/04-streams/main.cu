// Lesson 04: streams, events and overlap, and a first CUDA Graph.
//
// The binary walks through the lesson in five parts, measuring as it goes:
//   1. concurrency: two kernels on two streams, and what the legacy default stream does to them
//   2. events: timing, polling, cross-stream waits (in the right and the wrong order), host
//      functions, stream priorities
//   3. the pipelined batch: serial vs N chunks over K streams, the ideal, pinned vs pageable,
//      and (with --timeline FILE.svg) the timeline picture
//   4. the same pipeline as a CUDA Graph: launch overhead per frame with and without it
//   5. the classic bug: reading a result on the host before the stream is synchronised
// Run with --help for the options. Long measurements are in the benchmark (make bench).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/headline.hpp"
#include "common/cuda_check.hpp"
#include "common/device.hpp"
#include "common/lesson_main.hpp"
#include "common/memory.hpp"
#include "common/stream.hpp"
#include "streams.cuh"
#include "timeline.hpp"

namespace cs = course::streams;

namespace {

struct Options {
  std::size_t n = std::size_t{32} << 20;  // 32 Mi uint32 = 128 MiB each way
  int chunks = 16;
  int streams = 4;
  int rounds = 0;  // 0: calibrate so that the kernel takes about as long as the H2D copy
  int frames = 200;
  std::string timeline;  // empty: no picture
};

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Failed correctness checks are collected and make the binary exit non-zero at the end.
std::vector<std::string> failures;
void expect(bool ok, const std::string& what) {
  if (!ok) {
    std::printf("   FAILED: %s\n", what.c_str());
    failures.push_back(what);
  }
}

constexpr std::uint64_t kMs = 1'000'000;  // nanoseconds

// ------------------------------------------------------------------ 1. concurrency

void part1_concurrency() {
  std::printf("\n1. Two kernels, two streams. Each kernel is one block that spins for 20 ms.\n");
  constexpr std::uint64_t spin = 20 * kMs;
  const auto run = [&](cudaStream_t a, cudaStream_t b, const cudaStream_t* between) {
    CUDA_CHECK(cudaDeviceSynchronize());
    const auto t0 = Clock::now();
    cs::launch_spin(1, 32, spin, a);
    if (between != nullptr) cs::launch_spin(1, 32, 1000, *between);  // a 1 us kernel
    cs::launch_spin(1, 32, spin, b);
    CUDA_CHECK(cudaDeviceSynchronize());
    return ms_since(t0);
  };
  const auto report = [](const char* what, double ms) {
    std::printf("   %-68s %6.1f ms  %s\n", what, ms,
                ms < 30.0 ? "side by side" : "one after the other");
  };
  course::Stream blocking_a(cudaStreamDefault), blocking_b(cudaStreamDefault);
  course::Stream nonblocking_a(cudaStreamNonBlocking), nonblocking_b(cudaStreamNonBlocking);
  const cudaStream_t legacy = cudaStreamLegacy, per_thread = cudaStreamPerThread;
  report("both on one stream", run(blocking_a, blocking_a, nullptr));
  report("two streams (cudaStreamDefault flags)", run(blocking_a, blocking_b, nullptr));
  report("the same, with a 1 us kernel on the legacy default stream in between",
         run(blocking_a, blocking_b, &legacy));
  report("two cudaStreamNonBlocking streams, legacy-stream kernel in between",
         run(nonblocking_a, nonblocking_b, &legacy));
  report("two cudaStreamDefault streams, per-thread default stream kernel between",
         run(blocking_a, blocking_b, &per_thread));
  std::printf(
      "   The legacy default stream (stream 0) waits for all blocking streams and they wait\n"
      "   for it: one stray launch or cudaMemset on it serialises everything.\n");
}

// ------------------------------------------------------------------ 2. events

void part2_events(const course::DeviceInfo& info) {
  std::printf("\n2. Events, queries, host functions, priorities\n");
  course::Stream s1, s2;

  const float spin_ms = course::time_on_stream_ms(s1, [&] { cs::launch_spin(1, 32, 5 * kMs, s1); });
  std::printf("   cudaEventElapsedTime around a 5 ms spin:                         %.3f ms\n",
              spin_ms);

  course::Event done(cudaEventDisableTiming);
  cs::launch_spin(1, 32, 5 * kMs, s1);
  done.record(s1);
  const auto t0 = Clock::now();
  long polls = 0;
  while (!cs::event_done(done)) ++polls;  // the host is free to do anything in this loop
  std::printf("   cudaEventQuery polled %ld times (host free) until done after %.1f ms\n", polls,
              ms_since(t0));
  expect(cs::stream_idle(s1), "stream_idle after the event completed");

  // Cross-stream dependency: a slow producer on s1, a consumer on s2.
  course::DeviceBuffer<std::uint32_t> tensor(1), result(1);
  course::PinnedBuffer<std::uint32_t> seen(1);
  const auto consumer_saw = [&] {
    CUDA_CHECK(cudaMemcpyAsync(seen.data(), result.data(), sizeof(std::uint32_t),
                               cudaMemcpyDeviceToHost, s2));
    s2.synchronize();
    const std::uint32_t v = seen[0];
    s1.synchronize();
    return v;
  };
  // cudaMemsetAsync on the producer's stream, then wait: a plain cudaMemset would run on the
  // legacy default stream, which non-blocking streams do not wait for.
  const auto clear_tensor = [&] {
    CUDA_CHECK(cudaMemsetAsync(tensor.data(), 0, tensor.bytes(), s1));
    s1.synchronize();
  };
  clear_tensor();
  course::Event ready(cudaEventDisableTiming);
  cs::preprocess_then_infer(tensor.data(), result.data(), 1, 7u, 10 * kMs, 0, s1, s2, ready);
  const std::uint32_t right = consumer_saw();
  std::printf("   record, then cudaStreamWaitEvent: the consumer saw %u (the producer wrote 7)\n",
              right);
  expect(right == 7u, "the consumer ordered by an event sees the producer's value");

  clear_tensor();
  course::Event fresh(cudaEventDisableTiming);
  CUDA_CHECK(cudaStreamWaitEvent(s2, fresh, 0));  // WRONG ORDER: nothing recorded yet
  cs::launch_spin_then_fill(tensor.data(), 1, 8u, 10 * kMs, s1);
  fresh.record(s1);
  cs::launch_mix(tensor.data(), result.data(), 1, 0, s2);
  const std::uint32_t wrong = consumer_saw();
  std::printf(
      "   cudaStreamWaitEvent, then record:  the consumer saw %u (the producer wrote 8)%s\n", wrong,
      wrong == 8u ? "; lucky this time" : ": it waited for nothing");

  course::PinnedBuffer<std::uint32_t> host(1);
  host[0] = 0;
  cs::HostProbe probe;
  probe.watched = host.data();
  cs::launch_spin_then_fill(tensor.data(), 1, 9u, 10 * kMs, s1);
  CUDA_CHECK(cudaMemcpyAsync(host.data(), tensor.data(), sizeof(std::uint32_t),
                             cudaMemcpyDeviceToHost, s1));
  cs::enqueue_host_probe(s1, probe);
  s1.synchronize();
  std::printf("   cudaLaunchHostFunc after producer + copy: it saw %u (the producer wrote 9)\n",
              probe.seen.load());
  expect(probe.seen.load() == 9u && probe.calls.load() == 1,
         "the host function runs after the copy");

  // Priorities: a wide low-priority kernel fills the GPU; how long until a 1-block urgent kernel
  // finishes? The block scheduler dispatches pending blocks of higher-priority streams first.
  const cs::PriorityRange range = cs::stream_priority_range();
  const int threads = 128;
  const int waves = 20;
  const int wide_blocks = cs::spin_blocks_per_sm(threads) * info.sm_count * waves;
  std::printf(
      "   stream priorities: %d (least) .. %d (greatest); a %d-block kernel (%d waves of\n"
      "   0.2 ms) on a low-priority stream, then a 1-block kernel on another stream:\n",
      range.least, range.greatest, wide_blocks, waves);
  for (const int priority : {range.least, range.greatest}) {
    course::Stream low(cudaStreamNonBlocking, range.least), urgent(cudaStreamNonBlocking, priority);
    course::Event start, urgent_done;
    start.record(low);
    cs::launch_spin(wide_blocks, threads, 200'000, low);
    cs::launch_spin(1, 32, 10'000, urgent);
    urgent_done.record(urgent);
    const float latency = course::elapsed_ms(start, urgent_done);
    low.synchronize();
    std::printf(
        "     urgent stream at priority %2d: finished %.2f ms after the wide kernel began\n",
        priority, latency);
  }
}

// ------------------------------------------------------------------ 3. the pipelined batch

struct Run {
  double total_ms = 0;
  std::vector<cs::ChunkTimes> chunks;
};

// Runs the pipeline `repeats` times after a warm-up; returns the run with the median total.
Run median_run(cs::Pipeline& p, const std::uint32_t* in, std::uint32_t* out, int repeats) {
  cs::PipelineTrace trace(p.config().chunks);
  p.enqueue(in, out);  // warm-up
  p.synchronize();
  std::vector<Run> runs;
  for (int r = 0; r < repeats; ++r) {
    p.enqueue(in, out, &trace);
    p.synchronize();
    Run run;
    run.chunks = trace.read(p.config().streams);
    for (const auto& c : run.chunks) run.total_ms = std::max(run.total_ms, c.d2h_end);
    runs.push_back(std::move(run));
  }
  std::sort(runs.begin(), runs.end(),
            [](const Run& a, const Run& b) { return a.total_ms < b.total_ms; });
  return runs[runs.size() / 2];
}

bool same(const std::uint32_t* a, const std::uint32_t* b, std::size_t n) {
  return n == 0 || std::memcmp(a, b, n * sizeof(std::uint32_t)) == 0;
}

void part3_pipeline(const Options& o) {
  const double mib = static_cast<double>(o.n) * sizeof(std::uint32_t) / (1 << 20);
  std::printf(
      "\n3. The pipelined batch: %.0f MiB in, %.0f MiB out; per chunk H2D copy -> kernel -> D2H "
      "copy\n",
      mib, mib);
  course::PinnedBuffer<std::uint32_t> in(o.n), out_serial(o.n), out_pipelined(o.n);
  std::uint32_t x = 12345u;
  for (auto& v : in) v = x = x * 1664525u + 1013904223u;  // any data will do: an LCG is fast

  int rounds = o.rounds;
  if (rounds == 0) {
    const cs::Calibration cal = cs::calibrate_rounds(in.data(), o.n);
    rounds = cal.rounds;
    std::printf(
        "   calibrated: %d mix rounds per element make the kernel %.2f ms, the H2D copy %.2f ms\n",
        rounds, cal.kernel_ms, cal.h2d_ms);
  }

  cs::Pipeline serial({o.n, 1, 1, rounds, 1});
  const Run s = median_run(serial, in.data(), out_serial.data(), 5);
  const cs::StageTimes stages{s.chunks[0].h2d_end, s.chunks[0].kernel_end - s.chunks[0].h2d_end,
                              s.chunks[0].d2h_end - s.chunks[0].kernel_end};
  std::printf("   serial (1 stream, 1 chunk):  H2D %.2f + kernel %.2f + D2H %.2f = %.2f ms\n",
              stages.h2d_ms, stages.kernel_ms, stages.d2h_ms, s.total_ms);

  cs::Pipeline pipelined({o.n, o.chunks, o.streams, rounds, 1});
  const Run p = median_run(pipelined, in.data(), out_pipelined.data(), 5);
  const auto t0 = Clock::now();
  pipelined.enqueue(in.data(), out_pipelined.data());
  const double host_pinned_ms = ms_since(t0);
  pipelined.synchronize();
  const cs::PipelineBound bound = cs::pipeline_bound(stages, o.chunks);
  // Event times have a resolution of about 0.5 us: a tiny --n can measure 0.
  const double pct_of_ideal = p.total_ms > 0 ? 100.0 * cs::fraction_of_ideal(bound, p.total_ms) : 0;
  std::printf(
      "   pipelined (%d chunks on %d streams, pinned): %.2f ms; enqueueing took the host %.2f ms\n",
      o.chunks, o.streams, p.total_ms, host_pinned_ms);
  std::printf("   ideal: longest engine %.2f ms + fill/drain %.2f ms = %.2f ms\n", bound.longest_ms,
              bound.ideal_ms - bound.longest_ms, bound.ideal_ms);
  std::printf("   speedup %.2fx of an ideal %.2fx: %.0f%% of the ideal speedup\n",
              p.total_ms > 0 ? s.total_ms / p.total_ms : 0.0, bound.ideal_speedup, pct_of_ideal);
  course::add_headline("pipeline %.2fx faster than serial, %.0f%% of the ideal speedup",
                       p.total_ms > 0 ? s.total_ms / p.total_ms : 0.0, pct_of_ideal);
  if (o.streams < 3)
    std::printf(
        "   (with fewer than 3 streams, at most %d chunks are in flight: the ideal assumes 3)\n",
        o.streams);
  const std::vector<cs::Span> p_spans = cs::spans_from_chunk_times(p.chunks);
  const cs::EngineBusy busy = cs::engine_busy(p_spans);
  std::printf(
      "   engines busy during the pipelined run: H2D %.2f ms, kernels %.2f ms, D2H %.2f ms\n",
      busy.h2d_ms, busy.kernel_ms, busy.d2h_ms);

  // The same code, pageable host memory.
  std::vector<std::uint32_t> pageable_in(in.begin(), in.end()), pageable_out(o.n, 0u);
  pipelined.enqueue(pageable_in.data(), pageable_out.data());  // warm-up (and first touch)
  pipelined.synchronize();
  course::Event start, stop;
  const auto t1 = Clock::now();
  start.record(pipelined.origin());
  pipelined.enqueue(pageable_in.data(), pageable_out.data());
  stop.record(pipelined.origin());
  const double host_pageable_ms = ms_since(t1);
  const float pageable_ms = course::elapsed_ms(start, stop);
  std::printf("   pipelined, pageable memory: %.2f ms; enqueueing blocked the host for %.2f ms\n",
              pageable_ms, host_pageable_ms);

  const bool pinned_ok = same(out_serial.data(), out_pipelined.data(), o.n);
  const bool pageable_ok = same(out_serial.data(), pageable_out.data(), o.n);
  bool reference_ok = true;
  for (std::size_t i = 0; i < o.n; i += 4099)
    reference_ok &= out_serial[i] == cs::mix_rounds(in[i], rounds);
  std::printf(
      "   results: pipelined == serial (all %zu elements, pinned and pageable), serial == CPU "
      "reference (every 4099th element): %s\n",
      o.n, pinned_ok && pageable_ok && reference_ok ? "yes" : "NO");
  expect(pinned_ok, "pipelined output == serial output");
  expect(pageable_ok, "pageable pipelined output == serial output");
  expect(reference_ok, "serial output == CPU reference (every 4099th element)");

  if (!o.timeline.empty()) {
    char caption[256];
    std::snprintf(caption, sizeof caption,
                  "%.0f MiB each way, %d rounds. Serial %.2f ms; %d chunks on %d streams %.2f ms; "
                  "ideal %.2f ms (%.0f%% of the ideal speedup)",
                  mib, rounds, s.total_ms, o.chunks, o.streams, p.total_ms, bound.ideal_ms,
                  pct_of_ideal);
    const std::string svg =
        cs::timeline_svg({{"serial: 1 stream, 1 chunk", 1, cs::spans_from_chunk_times(s.chunks)},
                          {"pipelined: " + std::to_string(o.chunks) + " chunks on " +
                               std::to_string(o.streams) + " streams",
                           o.streams, p_spans}},
                         caption);
    cs::write_text_file(o.timeline, svg);
    std::printf("   timeline written to %s\n", o.timeline.c_str());
  } else {
    std::printf("   (pass --timeline FILE.svg to draw the timeline of both runs)\n");
  }
}

// ------------------------------------------------------------------ 4. CUDA Graph

void part4_graph(int frames) {
  const cs::PipelineConfig cfg{std::size_t{1} << 16, 4, 4, 1, 16};
  std::printf(
      "\n4. CUDA Graph. A frame: %zu elements in %d chunks on %d streams, each chunk a copy,\n"
      "   %d small kernels and a copy: %d operations per frame. %d frames back to back:\n",
      cfg.n, cfg.chunks, cfg.streams, cfg.launches_per_chunk,
      cfg.chunks * (cfg.launches_per_chunk + 2), frames);
  course::PinnedBuffer<std::uint32_t> in(cfg.n), out_stream(cfg.n), out_graph(cfg.n);
  for (std::size_t i = 0; i < cfg.n; ++i) in[i] = static_cast<std::uint32_t>(i);
  cs::Pipeline pipeline(cfg);

  const auto measure = [&](const char* label, auto&& enqueue_frame) {
    enqueue_frame();  // warm-up
    pipeline.synchronize();
    course::Event start, stop;
    const auto t0 = Clock::now();
    start.record(pipeline.origin());
    for (int f = 0; f < frames; ++f) enqueue_frame();
    stop.record(pipeline.origin());
    const double host_ms = ms_since(t0);
    const double gpu_ms = course::elapsed_ms(start, stop);
    std::printf("   %-28s %8.1f us per frame (host busy enqueueing %6.1f us per frame)\n", label,
                1e3 * gpu_ms / frames, 1e3 * host_ms / frames);
    return gpu_ms / frames;
  };
  const double stream_ms = measure("streams (one call per op):",
                                   [&] { pipeline.enqueue(in.data(), out_stream.data()); });
  cs::PipelineGraph graph = cs::capture_pipeline(pipeline, in.data(), out_graph.data());
  const double graph_ms =
      measure("graph (one cudaGraphLaunch):", [&] { graph.exec.launch(pipeline.origin()); });
  std::printf("   the graph has %zu nodes; per frame it is %.1fx faster\n",
              graph.graph.node_count(), stream_ms / graph_ms);
  expect(same(out_stream.data(), out_graph.data(), cfg.n), "graph replay output == stream output");
  std::printf("   graph result == stream result: %s\n",
              same(out_stream.data(), out_graph.data(), cfg.n) ? "yes" : "NO");
}

// ------------------------------------------------------------------ 5. the classic bug

void part5_bug() {
  std::printf(
      "\n5. The classic bug: a producer (10 ms), a D2H copy, then the host reads the result\n");
  const std::size_t n = 4096;
  const std::uint32_t value = 7u;
  course::DeviceBuffer<std::uint32_t> d(n);
  course::PinnedBuffer<std::uint32_t> pinned(n);
  std::vector<std::uint32_t> pageable(n, 0u);
  course::Stream stream;
  const std::uint64_t expected = std::uint64_t{value} * n;

  std::fill(pinned.begin(), pinned.end(), 0u);
  const std::uint64_t racy =
      cs::read_result_unsynchronised(d.data(), pinned.data(), n, value, 10 * kMs, stream);
  stream.synchronize();
  std::printf(
      "   pinned buffer, no synchronisation:    sum %llu (expected %llu)%s\n",
      static_cast<unsigned long long>(racy), static_cast<unsigned long long>(expected),
      racy == expected ? "; the race went the right way this time" : "  <- read before the copy");

  const std::uint64_t hidden =
      cs::read_result_unsynchronised(d.data(), pageable.data(), n, value, 10 * kMs, stream);
  stream.synchronize();
  std::printf(
      "   pageable buffer, no synchronisation:  sum %llu: cudaMemcpyAsync to pageable memory\n"
      "   returns only after the copy, which hides the bug until someone pins the buffer\n",
      static_cast<unsigned long long>(hidden));

  std::fill(pinned.begin(), pinned.end(), 0u);
  const std::uint64_t fixed =
      cs::read_result_synchronised(d.data(), pinned.data(), n, value, 10 * kMs, stream);
  std::printf("   pinned buffer, cudaStreamSynchronize: sum %llu\n",
              static_cast<unsigned long long>(fixed));
  expect(fixed == expected, "the synchronised read sees the result");
}

}  // namespace

int main(int argc, char** argv) {
  Options opts;
  CLI::App app{
      "Lesson 04: streams, events and overlap, and a first CUDA Graph, measured on GPU 0."};
  app.add_option("--n", opts.n,
                 "elements (uint32) in the pipelined batch (default 33554432 = 128 MiB)")
      ->type_name("N")
      ->check(course::integer_in(1LL, 1LL << 32));
  app.add_option("--chunks", opts.chunks, "chunks the batch is split into (default 16)")
      ->type_name("N")
      ->check(course::integer_in(1, 4096));
  app.add_option("--streams", opts.streams, "streams the chunks are spread over (default 4)")
      ->type_name("K")
      ->check(course::integer_in(1, cs::kMaxStreams));
  app.add_option("--rounds", opts.rounds,
                 "mix rounds per element; 0 calibrates R so that the kernel takes about\n"
                 "as long as the H2D copy (default 0)")
      ->type_name("R")
      ->check(course::integer_in(0, 1000000));
  app.add_option("--frames", opts.frames,
                 "frames per variant in the launch-overhead part (default 200)")
      ->type_name("F")
      ->check(course::integer_in(1, 100000));
  app.add_option("--timeline", opts.timeline,
                 "write the timeline of the serial and pipelined runs as an SVG to FILE\n"
                 "(default: no file is written)")
      ->type_name("FILE");
  app.footer("Long measurements are in the benchmark: make bench LESSON=04");
  return course::lesson_main(app, argc, argv, [&] {
    const course::DeviceInfo info = course::query_device(0);
    int copy_engines = 0, concurrent = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&copy_engines, cudaDevAttrAsyncEngineCount, 0));
    CUDA_CHECK(cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentKernels, 0));
    std::printf("Lesson 04: streams, events and overlap, and a first CUDA Graph\n%s\n",
                course::summary(info).c_str());
    std::printf("copy engines (cudaDevAttrAsyncEngineCount): %d; concurrent kernels: %s\n",
                copy_engines, concurrent ? "yes" : "no");
    // Warm-up: the first launch of each kernel loads its module (lazy loading, CUDA 12+).
    {
      course::Stream s;
      cs::launch_spin(1, 32, 1000, s);
      course::DeviceBuffer<std::uint32_t> d(1);
      cs::launch_mix(d.data(), d.data(), 1, 1, s);
      cs::launch_spin_then_fill(d.data(), 1, 0u, 0, s);
      s.synchronize();
    }
    part1_concurrency();
    part2_events(info);
    part3_pipeline(opts);
    part4_graph(opts.frames);
    part5_bug();
    if (!failures.empty()) {
      std::fprintf(stderr, "%s: %zu check(s) failed, first: %s\n", argv[0], failures.size(),
                   failures.front().c_str());
      return 1;
    }
    std::printf("\nAll checks passed.\n");
    course::print_headline();
    return 0;
  });
}
