// Lesson 09 benchmark (make bench): the pipeline's throughput per configuration, host wall
// clock (capture of the first frame to the last result; the warm-up before serving is outside
// the interval), 1080p frames, ColorEngine at its default 8.7 GFLOP per frame.
//
// Iteration time = wall seconds of one run of kFrames frames, so Google Benchmark's time per
// iteration divided by kFrames is the time per frame; the counters give frames/s and the
// latency percentiles of the run (mean over the repetition's iterations). The bound and the %
// reached are the lesson binary's job (lesson09 --bench), which measures each stage alone.
//
//   lesson09_bench --benchmark_filter=graphs --benchmark_out=l09.json --benchmark_out_format=json
#include <algorithm>
#include <string>

#include "common/bench.hpp"
#include "pipeline.cuh"

namespace {

using namespace lesson09;

constexpr std::int64_t kFrames = 500;

// args: workers, batch (0: the serial tutorial loop), graphs
void BM_pipeline(benchmark::State& state) {
  PipelineConfig c;
  c.workers = static_cast<int>(state.range(0));
  const int batch = static_cast<int>(state.range(1));
  c.batch = batch < 1 ? 1 : batch;
  c.graphs = state.range(2) != 0;
  c.frames = kFrames;
  c.max_wait_us = c.batch > 1 ? 2000 : 0;
  c.queue_depth = std::max(16, 2 * c.batch);
  const EngineSpec engine = color_engine_spec(c, kDefaultGflopPerFrame);
  double fps = 0, p50 = 0, p99 = 0;
  for (auto _ : state) {
    const RunReport r = batch < 1 ? run_serial_tutorial(c, engine) : run_pipeline(c, engine);
    state.SetIterationTime(r.wall_s);
    const LatencySummary l = r.latency();
    fps += r.fps();
    p50 += l.p50;
    p99 += l.p99;
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["frames_per_s"] = fps / n;
  state.counters["p50_ms"] = p50 / n / 1e3;
  state.counters["p99_ms"] = p99 / n / 1e3;
  state.SetLabel(batch < 1 ? "serial tutorial loop"
                           : std::to_string(c.workers) + " workers, B<=" +
                                 std::to_string(c.batch) + (c.graphs ? ", graphs" : ""));
}

void configs(benchmark::internal::Benchmark* b) {
  b->Args({1, 0, 0});  // serial
  for (int w : {1, 2, 4}) b->Args({w, 1, 0})->Args({w, 1, 1});
  for (int batch : {4, 16, 32}) b->Args({4, batch, 1});
  b->UseManualTime()->Unit(benchmark::kMillisecond)->Repetitions(3)->Iterations(1);
  b->ReportAggregatesOnly(true);
}

BENCHMARK(BM_pipeline)->Apply(configs);

}  // namespace

COURSE_BENCH_MAIN();
