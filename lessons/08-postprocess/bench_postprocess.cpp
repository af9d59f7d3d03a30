// Lesson 08 benchmark: the detector postprocess and NMS on the GPU against the CPU reference on
// the same data, in one run (make bench; JSON in build/bench/lesson08.json).
//
//   cpu_postprocess/<layout>                 CPU reference: decode + greedy NMS (the baseline)
//   gpu_postprocess/<layout>/<nms>/<launch>  the whole GPU postprocess, result in pinned host
//                                            memory: nms = v1 (Fast NMS) | v2 (greedy bitmask),
//                                            launch = stream (memset + 4 kernels + copy) | graph
//   cpu_nms/<n>                              CPU greedy NMS of n boxes (the baseline)
//   gpu_nms/<nms>/<n>                        sort + NMS of n boxes already on the device; the
//                                            result stays on the device
//
// Data: a 1280x720 scene with 40 objects x 25 candidates (about 1000 candidates above the 0.25
// threshold), letterboxed into 640x640, C = 80: YOLOv5 N = 25200 (8.6 MB), YOLOv8 N = 8400
// (2.8 MB). NMS: n boxes in clusters of 25 (like a detector's candidates), 80 classes, IoU 0.45.
//
// Counters: time (manual, CUDA events for the GPU, steady_clock for the CPU); "%cpu": the CPU
// reference's time / this time x 100 (so 2000 = 20x faster); "%budget": this time as a
// percentage of the target (100 us for a postprocess, 1 ms for NMS); postprocess rows also give
// GB/s as tensor bytes / time and "%copy", that as a percentage of the device-to-device copy
// bandwidth (reading the whole tensor once is the floor; YOLOv5 reads less thanks to the
// objectness shortcut, so its GB/s is "effective").
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/bench.hpp"
#include "common/memory.hpp"
#include "common/stream.hpp"
#include "postprocess.cuh"
#include "synthetic.hpp"

using namespace lesson08;

namespace {

constexpr double kPostprocessBudgetUs = 100.0;
constexpr double kNmsBudgetUs = 1000.0;
constexpr float kIou = 0.45f;

struct Frame {
  OutputSpec spec;
  Letterbox letterbox;
  std::vector<float> tensor;
};

// Built on first use, so that a --benchmark_filter that leaves a case out skips its setup.
const Frame& frame(Layout layout) {
  static std::map<Layout, std::unique_ptr<Frame>> frames;
  std::unique_ptr<Frame>& f = frames[layout];
  if (!f) {
    SceneConfig scene;
    scene.num_objects = 40;
    scene.seed = 2024;
    const std::vector<GroundTruth> objects = make_scene(scene);
    GeneratorConfig gen;
    gen.candidates_per_object = 25;
    gen.seed = 2025;
    f = std::make_unique<Frame>();
    f->spec = {layout, layout == Layout::yolov5 ? 25200 : 8400, 80};
    f->letterbox = make_letterbox(scene.src_w, scene.src_h, 640, 640);
    f->tensor = make_detector_output(f->spec, f->letterbox, objects, gen);
  }
  return *f;
}

const std::vector<Detection>& nms_boxes(int n) {
  static std::map<int, std::vector<Detection>> sets;
  std::vector<Detection>& s = sets[n];
  if (s.empty()) s = random_detections(n, 80, 640, 25, 0, 7u + static_cast<std::uint32_t>(n));
  return s;
}

const char* layout_name(Layout l) {
  return l == Layout::yolov5 ? "yolov5" : "yolov8";
}
const char* nms_name(NmsVersion v) {
  return v == NmsVersion::v1_fast_parallel ? "v1" : "v2";
}

// CPU timing with the same manual-time protocol as the GPU rows.
template <class F>
double time_on_host(benchmark::State& state, F&& f) {
  f();  // warm-up
  double total = 0.0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    total += s;
    state.SetIterationTime(s);
  }
  return state.iterations() > 0 ? total / static_cast<double>(state.iterations()) : 0.0;
}

void report(benchmark::State& state, const std::string& baseline, double seconds,
            double budget_us) {
  if (seconds <= 0.0) return;
  course::bench::report_vs_baseline(state, baseline, 1.0 / seconds);
  state.counters["%budget"] = 100.0 * seconds * 1e6 / budget_us;
}

void cpu_postprocess(benchmark::State& state, Layout layout) {
  const Frame& f = frame(layout);
  const PostprocessConfig config;
  PostprocessResult r;
  const double s = time_on_host(state, [&] {
    r = postprocess_cpu(f.tensor.data(), f.tensor.size(), f.spec, f.letterbox, config);
  });
  state.counters["candidates"] = r.num_above_threshold;
  state.counters["detections"] = static_cast<double>(r.detections.size());
  if (s > 0.0) course::bench::set_baseline(std::string("cpu_") + layout_name(layout), 1.0 / s);
  report(state, std::string("cpu_") + layout_name(layout), s, kPostprocessBudgetUs);
}

void gpu_postprocess(benchmark::State& state, Layout layout, NmsVersion version, bool graph) {
  const Frame& f = frame(layout);
  PostprocessConfig config;
  config.nms = version;
  const course::DeviceBuffer<float> d_output = course::to_device(f.tensor);
  GpuPostprocessor post(f.spec, f.letterbox, config);
  course::Stream stream;
  if (graph) post.capture_graph(d_output.data(), f.tensor.size(), stream);
  // latency_us: host call to the result in pinned host memory, what a frame waits.
  const double s = course::bench::time_on_gpu(state, stream, course::bench::Options{course::L2::warm, true}, [&] {
    if (graph) {
      post.launch_graph(stream);
    } else {
      post.enqueue(d_output.data(), f.tensor.size(), stream);
    }
  });
  stream.synchronize();
  const PostprocessResult r = post.result();
  state.counters["candidates"] = r.num_above_threshold;
  state.counters["detections"] = static_cast<double>(r.detections.size());
  course::bench::report_bandwidth(state, static_cast<double>(f.tensor.size() * sizeof(float)), s);
  report(state, std::string("cpu_") + layout_name(layout), s, kPostprocessBudgetUs);
}

void cpu_nms(benchmark::State& state, int n) {
  const std::vector<Detection>& boxes = nms_boxes(n);
  std::vector<Detection> kept;
  const double s = time_on_host(state, [&] { kept = nms_cpu(boxes, kIou, false); });
  state.counters["kept"] = static_cast<double>(kept.size());
  if (s > 0.0) course::bench::set_baseline("cpu_nms_" + std::to_string(n), 1.0 / s);
  report(state, "cpu_nms_" + std::to_string(n), s, kNmsBudgetUs);
}

void gpu_nms(benchmark::State& state, NmsVersion version, int n) {
  const std::vector<Detection>& boxes = nms_boxes(n);
  const course::DeviceBuffer<Detection> d_boxes = course::to_device(boxes);
  GpuNms nms(n, version);
  course::Stream stream;
  const double s = course::bench::time_on_gpu(state, stream,
                                              course::bench::Options{course::L2::warm, true},
                                              [&] { nms.enqueue(d_boxes.data(), n, kIou, false, stream); });
  state.counters["kept"] = static_cast<double>(nms.download(stream).size());
  report(state, "cpu_nms_" + std::to_string(n), s, kNmsBudgetUs);
}

// Registration order is run order: each CPU baseline runs before the GPU rows that compare
// with it.
bool register_benchmarks() {
  using benchmark::RegisterBenchmark;
  for (const Layout layout : {Layout::yolov5, Layout::yolov8}) {
    const std::string l = layout_name(layout);
    RegisterBenchmark(("cpu_postprocess/" + l).c_str(), cpu_postprocess, layout)
        ->Apply(course::bench::defaults);
    for (const NmsVersion v : {NmsVersion::v1_fast_parallel, NmsVersion::v2_bitmask_greedy}) {
      for (const bool graph : {false, true}) {
        const std::string name =
            "gpu_postprocess/" + l + "/" + nms_name(v) + (graph ? "/graph" : "/stream");
        RegisterBenchmark(name.c_str(), gpu_postprocess, layout, v, graph)
            ->Apply(course::bench::defaults);
      }
    }
  }
  for (const int n : {1000, 10000, 25000}) {
    RegisterBenchmark(("cpu_nms/" + std::to_string(n)).c_str(), cpu_nms, n)
        ->Apply(course::bench::defaults);
    for (const NmsVersion v : {NmsVersion::v1_fast_parallel, NmsVersion::v2_bitmask_greedy}) {
      RegisterBenchmark(("gpu_nms/" + std::string(nms_name(v)) + "/" + std::to_string(n)).c_str(),
                        gpu_nms, v, n)
          ->Apply(course::bench::defaults);
    }
  }
  return true;
}
const bool registered = register_benchmarks();

}  // namespace

COURSE_BENCH_MAIN();
