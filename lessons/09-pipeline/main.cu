// Lesson 09: the detector pipeline, frames in and boxes out, measured and checked end to end.
//
//   lesson09 [--frames N] [--workers N] [--gflop G] [--slo-ms MS] [--trace PATH] [--svg PATH]
//            [--bench]
//
// 1. first-frame latency without and with warm-up (before anything else has warmed the process)
// 2. what each stage sustains alone: pinned H2D bandwidth, the producer's drawing, GPU busy time
// 3. the configurations, from the serial tutorial loop to N workers + graphs + batching: frames/s,
//    latency p50/p90/p99/max, host CPU per frame, the bound and the % reached, every frame checked
// 4. open loop: latency against offered load, up to and past capacity (drop-oldest), and the
//    capacity at a p99 latency objective (--slo-ms)
// 5. the N workers + graphs configuration's timeline: Chrome trace JSON (Perfetto) and an SVG
//    (lesson 04's)
// 6. a resolution change mid-stream: graphs captured again (cudaGraphExecUpdate), what it costs
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "common/device.hpp"
#include "common/lesson_main.hpp"
#include "common/process.hpp"
#include "pipeline.cuh"
#include "timeline.hpp"  // lesson 04

using namespace lesson09;

namespace {

struct Options {
  std::int64_t frames = 400;
  int workers = 4;
  double gflop = kDefaultGflopPerFrame;
  std::string trace;  // default: beside the executable
  std::string svg;
  double slo_ms = 2.0;
  bool bench = false;
};

// Frames whose boxes do not match the synthetic video's truth (the run's own correctness check).
int wrong_frames(const RunReport& r, const PipelineConfig& c) {
  const Camera camera(c);
  int wrong = 0;
  std::vector<int> seen(static_cast<std::size_t>(c.frames), 0);
  for (const FrameResult& f : r.results) {
    if (f.frame < 0 || f.frame >= c.frames || ++seen[f.frame] > 1 ||
        !check_frame(camera.video(f.frame).truth(f.frame), f.detections).empty()) {
      ++wrong;
    }
  }
  return wrong;
}

struct Row {
  std::string name;
  RunReport report;
  Bound bound;
  int wrong = 0;
};

void print_header() {
  std::printf("  %-38s %8s %8s %8s %8s %8s %9s %-7s %8s %6s %5s\n", "configuration", "frames/s",
              "p50 ms", "p90 ms", "p99 ms", "max ms", "CPU us/f", "bound", "bound/s", "%bound",
              "wrong");
}

void print_row(const Row& r) {
  const LatencySummary l = r.report.latency();
  const double cpu_us =
      r.report.results.empty() ? 0.0 : 1e6 * r.report.cpu_s / r.report.results.size();
  std::printf("  %-38s %8.0f %8.2f %8.2f %8.2f %8.2f %9.0f %-7s %8.0f %5.1f%% %5d\n",
              r.name.c_str(), r.report.fps(), l.p50 / 1e3, l.p90 / 1e3, l.p99 / 1e3, l.max / 1e3,
              cpu_us, r.bound.stage.c_str(), r.bound.fps, percent_of_bound(r.report.fps(), r.bound),
              r.wrong);
  std::fflush(stdout);
}

// The lesson-04 picture of a steady-state window: one row per worker, H2D and GPU work bars.
std::string timeline_picture(const RunReport& r, int workers, const std::string& title) {
  namespace cs = course::streams;
  double t_end = 0;
  for (const TraceEvent& e : r.trace) t_end = std::max(t_end, e.start_us + e.duration_us);
  const double w0 = 0.5 * t_end, w1 = std::min(t_end, w0 + 3000.0);  // 3 ms from the middle
  cs::TimelinePanel panel{title, workers, {}};
  int chunk = 0;
  for (const TraceEvent& e : r.trace) {
    if (e.worker < 0 || e.start_us < w0 || e.start_us + e.duration_us > w1) continue;
    cs::Span s;
    s.chunk = chunk++;
    s.stream = e.worker;
    s.stage = e.name == "H2D" ? cs::Stage::h2d : cs::Stage::kernel;
    s.start_ms = (e.start_us - w0) / 1e3;
    s.end_ms = (e.start_us + e.duration_us - w0) / 1e3;
    panel.spans.push_back(s);
  }
  return cs::timeline_svg({panel},
                          "H2D: the frames' upload (copy stream); kernel: letterbox + engine + "
                          "decode/NMS + D2H (compute stream). 3 ms from the middle of the run.");
}

int run(Options o) {
  const course::DeviceInfo info = course::query_device(0);
  std::printf("Lesson 09: the detector pipeline\n%s\n\n", course::summary(info).c_str());
  PipelineConfig base;
  base.frames = o.frames;
  const std::size_t frame_bytes =
      static_cast<std::size_t>(base.frame_width) * base.frame_height * 3;
  std::printf(
      "Frames: %dx%d BGR (%.2f MB), %d classes, letterboxed to %dx%d %s; engine: ColorEngine "
      "+ %.2f GFLOP/frame\nof SGEMM (--gflop); postprocess: lesson 08's batched decode + NMS "
      "into EfficientNMS's tensors.\n\n",
      base.frame_width, base.frame_height, frame_bytes / 1e6, base.num_classes, base.input_width,
      base.input_height, base.input_dtype == lesson08::DType::f16 ? "FP16" : "FP32", o.gflop);

  // 1. Warm-up, first. The first frame of a cold process pays for module loading (lazy by
  // default since CUDA 12.2, lesson 01), cuBLAS's kernel choice, lesson 06's table upload and,
  // with graphs, the capture. Without warm-up the first request pays; with it, serving starts
  // after.
  {
    PipelineConfig c = base;
    c.workers = 1;
    c.frames = 20;
    c.graphs = true;
    c.warmup = false;
    const RunReport cold = run_pipeline(c, color_engine_spec(c, o.gflop));
    c.warmup = true;
    const RunReport warm = run_pipeline(c, color_engine_spec(c, o.gflop));
    std::printf(
        "1. First frame's latency (capture to boxes on the host), 1 worker + graphs:\n"
        "   without warm-up %.2f ms (the first run of this process), with warm-up %.2f ms;"
        "\n   steady state p50 %.2f ms.\n\n",
        cold.first_latency_us() / 1e3, warm.first_latency_us() / 1e3, warm.latency().p50 / 1e3);
  }

  // 2. Each stage alone.
  const double gbps = measure_pinned_h2d_gbps(frame_bytes);
  const double host_us = measure_host_us_per_frame(base);
  auto gpu_us = [&](int batch, bool graphs, int streams, FrameFormat format = FrameFormat::bgr,
                    lesson08::DType input = lesson08::DType::f16) {
    PipelineConfig c = base;
    c.format = format;
    c.input_dtype = input;
    c.graphs = graphs;
    c.batch = batch;
    c.queue_depth = std::max(c.queue_depth, batch);
    return measure_gpu_us_per_frame(c, color_engine_spec(c, o.gflop), batch, 20, streams);
  };
  const double gpu_b1 = gpu_us(1, false, 1), gpu_b1g = gpu_us(1, true, 1);
  std::printf(
      "2. What each stage sustains alone (one frame = %.2f MB):\n"
      "   upload (pinned H2D, %.1f GB/s measured)      %8.1f us/frame  %7.0f frames/s\n"
      "   host (producer updates a frame in its slot) %8.1f us/frame  %7.0f frames/s\n"
      "   GPU busy, batch 1, 1 stream, launches       %8.1f us/frame  %7.0f frames/s\n"
      "   GPU busy, batch 1, 1 stream, CUDA graph     %8.1f us/frame  %7.0f frames/s\n",
      frame_bytes / 1e6, gbps, frame_bytes / (gbps * 1e3), fps_from_bandwidth(gbps, frame_bytes),
      host_us, fps_from_us(host_us), gpu_b1, fps_from_us(gpu_b1), gpu_b1g, fps_from_us(gpu_b1g));
  // N workers run N compute streams: their kernels overlap where one stream leaves SMs idle, so
  // the GPU's bound for N workers is measured with N streams.
  std::vector<int> stream_counts = {2};
  if (o.workers != 2 && o.workers != 1) stream_counts.push_back(o.workers);
  std::vector<double> gpu_n, gpu_ng;
  for (int n : stream_counts) {
    gpu_n.push_back(gpu_us(1, false, n));
    gpu_ng.push_back(gpu_us(1, true, n));
    std::printf(
        "   GPU busy, batch 1, %d streams, launches      %8.1f us/frame  %7.0f frames/s\n"
        "   GPU busy, batch 1, %d streams, CUDA graph    %8.1f us/frame  %7.0f frames/s\n",
        n, gpu_n.back(), fps_from_us(gpu_n.back()), n, gpu_ng.back(), fps_from_us(gpu_ng.back()));
  }
  auto gpu_for = [&](int workers, bool graphs) {  // the GPU time per frame of `workers` streams
    if (workers <= 1) return graphs ? gpu_b1g : gpu_b1;
    for (std::size_t i = 0; i < stream_counts.size(); ++i) {
      if (stream_counts[i] == workers) return graphs ? gpu_ng[i] : gpu_n[i];
    }
    return graphs ? gpu_b1g : gpu_b1;
  };
  // The input tensor in FP32 instead: twice the bytes written by the letterbox and read by the
  // engine's first kernel.
  const double gpu_f32 = gpu_us(1, true, o.workers, FrameFormat::bgr, lesson08::DType::f32);
  std::printf("   GPU busy, batch 1, %d streams, graph, FP32 in %8.1f us/frame  %7.0f frames/s\n",
              o.workers, gpu_f32, fps_from_us(gpu_f32));
  std::vector<int> batches = {4, 16, 32};
  std::vector<double> gpu_batched;
  for (int b : batches) {
    gpu_batched.push_back(gpu_us(b, true, o.workers));
    std::printf("   GPU busy, batch %2d, %d streams, CUDA graph   %8.1f us/frame  %7.0f frames/s\n",
                b, o.workers, gpu_batched.back(), fps_from_us(gpu_batched.back()));
  }
  // NV12 frames, as a hardware decoder writes them: half the bytes to upload, the colour
  // conversion in lesson 06's NV12 letterbox.
  PipelineConfig nv12 = base;
  nv12.format = FrameFormat::nv12;
  const std::size_t nv12_bytes = max_frame_bytes(nv12);
  const double nv12_gbps = measure_pinned_h2d_gbps(nv12_bytes);
  const double nv12_host_us = measure_host_us_per_frame(nv12);
  const double nv12_gpu = gpu_us(1, true, o.workers, FrameFormat::nv12);
  const double nv12_gpu4 = gpu_us(4, true, o.workers, FrameFormat::nv12);
  std::printf(
      "   NV12 frames (%.2f MB):\n"
      "   upload (pinned H2D, %.1f GB/s measured)      %8.1f us/frame  %7.0f frames/s\n"
      "   host (producer updates a frame in its slot) %8.1f us/frame  %7.0f frames/s\n"
      "   GPU busy, batch 1, %d streams, CUDA graph    %8.1f us/frame  %7.0f frames/s\n"
      "   GPU busy, batch 4, %d streams, CUDA graph    %8.1f us/frame  %7.0f frames/s\n",
      nv12_bytes / 1e6, nv12_gbps, nv12_bytes / (nv12_gbps * 1e3),
      fps_from_bandwidth(nv12_gbps, nv12_bytes), nv12_host_us, fps_from_us(nv12_host_us), o.workers,
      nv12_gpu, fps_from_us(nv12_gpu), o.workers, nv12_gpu4, fps_from_us(nv12_gpu4));
  std::printf(
      "   The stages run on different engines (copy engine, SMs, CPU) and overlap: a\n"
      "   pipelined configuration is bound by the slowest; a serial one by their sum.\n\n");
  auto nv12_bound = [&](double gpu) {
    return bound_of(
        {fps_from_bandwidth(nv12_gbps, nv12_bytes), fps_from_us(gpu), fps_from_us(nv12_host_us)});
  };

  auto overlapped = [&](double gpu) {
    return bound_of(
        {fps_from_bandwidth(gbps, frame_bytes), fps_from_us(gpu), fps_from_us(host_us)});
  };
  // One stream, one frame in flight: the upload and the GPU work run one after the other, while
  // the producer thread draws the next frame beside them.
  auto one_stream_bound = [&](double gpu) {
    const double sequence = fps_from_us(frame_bytes / (gbps * 1e3) + gpu);
    const double host = fps_from_us(host_us);
    return host < sequence ? Bound{"host", host} : Bound{"H2D+GPU", sequence};
  };
  auto serial_bound = [&](double gpu) {
    return Bound{"sum", fps_from_us(frame_bytes / (gbps * 1e3) + gpu + host_us)};
  };

  // 3. The configurations.
  std::printf(
      "3. %lld frames per configuration, closed loop (the producer as fast as it can),\n"
      "   latency = capture to boxes on the host; wrong = frames whose boxes miss the truth:\n",
      static_cast<long long>(o.frames));
  print_header();
  std::vector<Row> rows;
  auto add = [&](const std::string& name, const PipelineConfig& c, const Bound& bound,
                 bool serial = false) {
    Row r;
    r.name = name;
    r.report = serial ? run_serial_tutorial(c, color_engine_spec(c, o.gflop))
                      : run_pipeline(c, color_engine_spec(c, o.gflop));
    r.bound = bound;
    r.wrong = wrong_frames(r.report, c);
    print_row(r);
    rows.push_back(std::move(r));
    return rows.size() - 1;
  };
  add("serial tutorial (pageable, sync)", base, serial_bound(gpu_b1), true);
  {
    PipelineConfig c = base;
    c.workers = 1;
    c.inflight = 1;
    c.copy_stream = false;
    add("1 stream, pinned, async", c, one_stream_bound(gpu_b1));
    c.inflight = 2;
    c.copy_stream = true;
    add("1 worker, copy+compute streams", c, overlapped(gpu_b1));
  }
  std::size_t best = 0, unbatched = 0;
  for (int w : {2, o.workers}) {
    if (w == 2 && o.workers == 2) continue;
    PipelineConfig c = base;
    c.workers = w;
    add(std::to_string(w) + " workers", c, overlapped(gpu_for(w, false)));
    c.graphs = true;
    unbatched = add(std::to_string(w) + " workers + graphs", c, overlapped(gpu_for(w, true)));
  }
  {  // how the worker waits: sleeping in its event waits, or not waiting for the copies at all
    PipelineConfig c = base;
    c.workers = o.workers;
    c.graphs = true;
    c.blocking_sync = true;
    add(std::to_string(o.workers) + " workers + graphs, blocking sync", c,
        overlapped(gpu_for(o.workers, true)));
    c.blocking_sync = false;
    c.release_by_callback = true;
    add(std::to_string(o.workers) + " workers + graphs, host-func release", c,
        overlapped(gpu_for(o.workers, true)));
  }
  {  // the input tensor's type
    PipelineConfig c = base;
    c.workers = o.workers;
    c.graphs = true;
    c.input_dtype = lesson08::DType::f32;
    add(std::to_string(o.workers) + " workers + graphs, FP32 input", c, overlapped(gpu_f32));
  }
  {  // the decoder's format
    PipelineConfig c = nv12;
    c.workers = o.workers;
    c.graphs = true;
    add(std::to_string(o.workers) + " workers + graphs, NV12", c, nv12_bound(nv12_gpu));
    c.batch = 4;
    c.max_wait_us = 2000;
    c.queue_depth = 16;
    add(std::to_string(o.workers) + " workers + graphs, NV12, B<=4", c, nv12_bound(nv12_gpu4));
  }
  for (std::size_t i = 0; i < batches.size(); ++i) {
    PipelineConfig c = base;
    c.workers = o.workers;
    c.graphs = true;
    c.batch = batches[i];
    c.max_wait_us = 2000;
    c.queue_depth = std::max(16, 2 * batches[i]);
    const std::size_t k =
        add(std::to_string(o.workers) + " workers + graphs, B<=" + std::to_string(batches[i]), c,
            overlapped(gpu_batched[i]));
    (void)k;
  }
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].report.fps() > rows[best].report.fps()) best = i;
  }
  int total_wrong = 0;
  for (const Row& r : rows) total_wrong += r.wrong;
  std::printf(
      "   Best: %s, %.0f frames/s = %.1f%% of its bound (%s, %.0f frames/s; target >= 90%%).\n\n",
      rows[best].name.c_str(), rows[best].report.fps(),
      percent_of_bound(rows[best].report.fps(), rows[best].bound), rows[best].bound.stage.c_str(),
      rows[best].bound.fps);

  // 4. Open loop against the capacity of the same configuration (N workers + graphs), measured
  // in step 3, and the capacity at a latency objective: the highest offered rate whose p99
  // stays within it with nothing dropped.
  double p50_80 = 0, p99_80 = 0, slo_capacity = 0;
  {
    PipelineConfig c = base;
    c.workers = o.workers;
    c.graphs = true;
    const double capacity = rows[unbatched].report.fps();
    std::printf(
        "4. Open loop (%d workers + graphs): frames arrive at a set rate; latency against "
        "offered load\n   (%% of its closed-loop rate in step 3, %.0f frames/s). A frame "
        "counts from when it would have\n   been complete had its drawing started when it was "
        "due (late = draw start - due; wait: for a\n   free slot, part of it): past capacity "
        "drop-oldest drops (and counts) frames. SLO: p99 <= %.2f ms,\n   nothing dropped.\n",
        o.workers, capacity, o.slo_ms);
    std::printf("  %8s %10s %8s %8s %8s %8s %8s %9s %9s %8s %4s\n", "load", "offered/s", "served/s",
                "p50 ms", "p99 ms", "p99/p50", "draw us", "wait p99", "late p99", "dropped", "SLO");
    for (double load : {0.2, 0.5, 0.8, 0.9, 0.95, 1.0, 1.2}) {
      c.rate_fps = load * capacity;
      c.frames = std::max<std::int64_t>(400, static_cast<std::int64_t>(c.rate_fps * 0.5));
      c.backpressure = load > 1.0 ? Backpressure::drop_oldest : Backpressure::block;
      const RunReport r = run_pipeline(c, color_engine_spec(c, o.gflop));
      const LatencySummary l = r.latency();
      total_wrong += wrong_frames(r, c);
      const bool met = l.p99 <= 1e3 * o.slo_ms && r.dropped.empty() && !r.results.empty();
      if (met) slo_capacity = std::max(slo_capacity, c.rate_fps);
      std::printf("  %7.0f%% %10.0f %8.0f %8.2f %8.2f %8.2f %8.1f %9.2f %9.2f %8zu %4s%s\n",
                  load * 100, c.rate_fps, r.fps(), l.p50 / 1e3, l.p99 / 1e3,
                  l.p50 > 0 ? l.p99 / l.p50 : 0.0, percentile(r.draw_us, 50),
                  percentile(r.acquire_us, 99) / 1e3, percentile(r.late_us, 99) / 1e3,
                  r.dropped.size(), met ? "met" : "no", load > 1.0 ? "  (drop-oldest)" : "");
      if (load == 0.8) {
        p50_80 = l.p50;
        p99_80 = l.p99;
      }
    }
    if (slo_capacity > 0) {
      std::printf(
          "   Capacity at p99 <= %.2f ms: %.0f frames/s (the highest offered rate above that met "
          "it).\n",
          o.slo_ms, slo_capacity);
    } else {
      std::printf(
          "   Capacity at p99 <= %.2f ms: none of the offered rates above met it (try "
          "--slo-ms).\n",
          o.slo_ms);
    }
    std::printf("   At 80%% load p99 / p50 = %.2f (target <= 2).\n\n",
                p50_80 > 0 ? p99_80 / p50_80 : 0.0);
  }

  // 5. The timeline of N workers + graphs.
  {
    PipelineConfig c = base;
    c.workers = o.workers;
    c.graphs = true;
    c.trace = true;
    const RunReport r = run_pipeline(c, color_engine_spec(c, o.gflop));
    course::streams::write_text_file(o.trace, chrome_trace_json(r.trace));
    course::streams::write_text_file(
        o.svg, timeline_picture(r, c.workers,
                                std::to_string(c.workers) + " workers + graphs, steady state"));
    std::printf(
        "5. Timeline (%zu stage events; %d workers + graphs): %s (open in ui.perfetto.dev)"
        "\n   and %s. Under Nsight Systems (nsys profile -t cuda,nvtx) the NVTX ranges\n"
        "   \"batch\", \"H2D\", \"letterbox + engine + postprocess\", \"wait for copy\","
        " \"results\",\n   \"draw frame\" name each step.\n\n",
        r.trace.size(), c.workers, o.trace.c_str(), o.svg.c_str());
  }

  // 6. The camera changes resolution mid-stream. Workers learn it from the frames: new
  // postprocess letterboxes, and each graph replayed for the new sizes captured again and
  // installed with cudaGraphExecUpdate (re-instantiated only if the update is refused).
  {
    PipelineConfig c = base;
    c.workers = o.workers;
    c.graphs = true;
    c.resize_at = o.frames / 2;
    c.resize_width = 1280;
    c.resize_height = 720;
    const RunReport r = run_pipeline(c, color_engine_spec(c, o.gflop));
    const int wrong = wrong_frames(r, c);
    total_wrong += wrong;
    std::vector<double> before, after, first_after;
    for (const FrameResult& f : r.results) {
      (f.frame < c.resize_at ? before : after).push_back(f.latency_us);
      if (f.frame >= c.resize_at && f.frame < c.resize_at + 2 * c.workers) {
        first_after.push_back(f.latency_us);
      }
    }
    const LatencySummary b = summarize(before), a = summarize(after), fa = summarize(first_after);
    std::printf(
        "6. Resolution change mid-stream (%d workers + graphs): %dx%d until frame %lld, "
        "then %dx%d.\n   Graphs: %d captured at warm-up, %d captured again for the new "
        "size and updated in place\n   (cudaGraphExecUpdate), %d re-instantiated. "
        "Latency p50 %.2f ms before, %.2f ms after;\n   the first %d frames of the new "
        "size (they pay for the re-capture) max %.2f ms. Wrong frames: %d.\n\n",
        c.workers, c.frame_width, c.frame_height, static_cast<long long>(c.resize_at),
        c.resize_width, c.resize_height, r.graph_captures, r.graph_updates,
        r.graph_reinstantiations, b.p50 / 1e3, a.p50 / 1e3, 2 * c.workers, fa.max / 1e3, wrong);
  }

  const std::string served =
      slo_capacity > 0
          ? "serve " + std::to_string(static_cast<long long>(std::lround(slo_capacity))) +
                " frames/s"
          : "meet no offered rate";
  std::printf(
      "Headline: %d workers + graphs %s at p99 <= %.2f ms (open loop); best "
      "closed loop\n%s %.0f frames/s, %.1f%% of its bound (%s); p99/p50 %.2f at 80%% load\n",
      o.workers, served.c_str(), o.slo_ms, rows[best].name.c_str(), rows[best].report.fps(),
      percent_of_bound(rows[best].report.fps(), rows[best].bound), rows[best].bound.stage.c_str(),
      p50_80 > 0 ? p99_80 / p50_80 : 0.0);
  if (total_wrong > 0) {
    std::printf("FAILED: %d frames had wrong boxes.\n", total_wrong);
    return 1;
  }
  std::printf(
      "Every frame of every run matched its true boxes (IoU >= 0.9, right class, nothing "
      "extra).\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{
      "Lesson 09: the detector pipeline. A producer thread draws 1080p frames into pinned slots;\n"
      "N worker threads upload, letterbox (lesson 06), run an engine and decode + NMS (lesson 08)\n"
      "on their own streams. Measures frames/s, latency and the bound of each configuration."};
  app.add_option("--frames", o.frames, "frames per configuration (default 400)")
      ->type_name("N")
      ->check(course::integer_in(32, 1000000));
  app.add_option("--workers", o.workers, "worker threads of the multi-worker rows (default 4)")
      ->type_name("N")
      ->check(course::integer_in(1, 16));
  app.add_option("--gflop", o.gflop,
                 "the engine's stand-in GPU work, GFLOP of SGEMM per frame (default 8.7:\n"
                 "YOLOv8n at 640x640)")
      ->type_name("G")
      ->check(course::real_in(0.0, 1000.0));
  app.add_option("--trace", o.trace,
                 "Chrome trace JSON (default: lesson09_trace.json beside\n"
                 "the executable)")
      ->type_name("PATH");
  app.add_option("--svg", o.svg, "timeline picture (default: lesson09_timeline.svg beside it)")
      ->type_name("PATH");
  app.add_option("--slo-ms", o.slo_ms,
                 "the latency objective of the open loop: p99 at most this, ms (default 2)")
      ->type_name("MS")
      ->check(course::real_in(0.01, 10000.0));
  app.add_flag("--bench", o.bench, "longer runs: 3000 frames per configuration");
  return course::lesson_main(app, argc, argv, [&] {
    const std::string exe = course::self_executable();
    const std::string dir = exe.substr(0, exe.find_last_of('/'));
    if (o.trace.empty()) o.trace = dir + "/lesson09_trace.json";
    if (o.svg.empty()) o.svg = dir + "/lesson09_timeline.svg";
    if (o.bench) o.frames = std::max<std::int64_t>(o.frames, 3000);
    return run(o);
  });
}
