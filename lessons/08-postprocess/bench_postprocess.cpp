// Lesson 08 benchmark: the detector postprocess and NMS on the GPU against the CPU reference on
// the same data, in one run (make bench; JSON in build/bench/lesson08.json).
//
//   cpu_postprocess/<layout>                 CPU reference: decode + greedy NMS (the baseline)
//   gpu_postprocess/<layout>/<nms>/<launch>  the whole GPU postprocess, result in pinned host
//                                            memory: nms = v1 (Fast NMS) | v2 (greedy bitmask) |
//                                            v3 (v2, mask staged in shared memory when it fits),
//                                            launch = stream (memset + 4 kernels + copy) | graph
//   cpu_nms/<n>                              CPU greedy NMS of n boxes (the baseline)
//   gpu_nms/<nms>/<n>                        sort + NMS of n boxes already on the device; the
//                                            result stays on the device
//   cpu_batch/<layout>/b<B>                  CPU reference of a batch (B x postprocess_cpu)
//   gpu_batch/<layout>/b<B>/<dtype>/<nms>[/trt]  the batched postprocess of B images in one
//                                            launch sequence, f32 or f16 input (f16 includes its
//                                            widening pass), NMS v2 or v3; /trt adds the
//                                            EfficientNMS layout kernel (outputs stay on device)
//   sort/<version>/s<S>/<n>                  CUB sweep: S segments of n detections into NMS order,
//                                            rank_sort (ours) | cub_radix (CUB radix sort)
//   compact/<version>/<n>                    CUB sweep: compaction of n keys, 10% passing,
//                                            warp_atomic (ours) | cub_select (CUB, ordered)
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
#include <utility>
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
  if (s.empty()) s = benchmark_nms_boxes(n);
  return s;
}

const char* layout_name(Layout l) {
  return l == Layout::yolov5 ? "yolov5" : "yolov8";
}
const char* nms_name(NmsVersion v) {
  return v == NmsVersion::v1_fast_parallel ? "v1"
                                           : (v == NmsVersion::v2_bitmask_greedy ? "v2" : "v3");
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

// A batch of B images: the benchmark frame's tensor B times (every image has the same ~1000
// candidates; the tests check that different images stay apart).
struct BatchFrame {
  BatchSpec spec;
  std::vector<float> tensor;
  std::vector<__half> half;
};

const BatchFrame& batch_frame(Layout layout, int batch) {
  static std::map<std::pair<Layout, int>, std::unique_ptr<BatchFrame>> frames;
  std::unique_ptr<BatchFrame>& f = frames[{layout, batch}];
  if (!f) {
    const Frame& one = frame(layout);
    f = std::make_unique<BatchFrame>();
    f->spec = {one.spec, batch};
    for (int b = 0; b < batch; ++b)
      f->tensor.insert(f->tensor.end(), one.tensor.begin(), one.tensor.end());
    f->half.resize(f->tensor.size());
    for (std::size_t i = 0; i < f->half.size(); ++i) f->half[i] = __float2half_rn(f->tensor[i]);
  }
  return *f;
}

std::string batch_baseline(Layout layout, int batch) {
  return std::string("cpu_batch_") + layout_name(layout) + "_" + std::to_string(batch);
}

void cpu_batch(benchmark::State& state, Layout layout, int batch) {
  const BatchFrame& f = batch_frame(layout, batch);
  const std::vector<Letterbox> lb{frame(layout).letterbox};
  std::vector<PostprocessResult> r;
  const double s = time_on_host(state, [&] {
    r = postprocess_batch_cpu(f.tensor.data(), f.tensor.size(), f.spec, lb, PostprocessConfig{});
  });
  state.counters["detections"] = static_cast<double>(r.at(0).detections.size());
  if (s > 0.0) course::bench::set_baseline(batch_baseline(layout, batch), 1.0 / s);
  report(state, batch_baseline(layout, batch), s, kPostprocessBudgetUs * batch);
}

void gpu_batch(benchmark::State& state, Layout layout, int batch, DType dtype, NmsVersion nms,
               bool trt) {
  const BatchFrame& f = batch_frame(layout, batch);
  PostprocessConfig config;
  config.nms = nms;
  BatchedPostprocessor post(f.spec, {frame(layout).letterbox}, config, dtype);
  const course::DeviceBuffer<float> d_f32 =
      dtype == DType::f32 ? course::to_device(f.tensor) : course::DeviceBuffer<float>();
  const course::DeviceBuffer<__half> d_f16 =
      dtype == DType::f16 ? course::to_device(f.half) : course::DeviceBuffer<__half>();
  const std::size_t k = static_cast<std::size_t>(config.max_detections) * batch;
  course::DeviceBuffer<int> num(static_cast<std::size_t>(batch)), classes(k);
  course::DeviceBuffer<float> boxes(4 * k), scores(k);
  course::Stream stream;
  const double s = course::bench::time_on_gpu(
      state, stream, course::bench::Options{course::L2::warm, true}, [&] {
        if (dtype == DType::f16) {
          post.enqueue(d_f16.data(), f.half.size(), stream);
        } else {
          post.enqueue(d_f32.data(), f.tensor.size(), stream);
        }
        if (trt)
          post.write_efficient_nms({num.data(), boxes.data(), scores.data(), classes.data()},
                                   stream);
      });
  stream.synchronize();
  const std::vector<PostprocessResult> r = post.results();
  state.counters["detections"] = static_cast<double>(r.at(0).detections.size());
  state.counters["us_per_image"] = 1e6 * s / batch;
  const std::size_t bytes =
      f.tensor.size() * (dtype == DType::f16 ? sizeof(__half) : sizeof(float));
  course::bench::report_bandwidth(state, static_cast<double>(bytes), s);
  report(state, batch_baseline(layout, batch), s, kPostprocessBudgetUs * batch);
}

void gpu_sort(benchmark::State& state, SortVersion version, int segments, int n) {
  std::vector<Detection> boxes;
  for (int seg = 0; seg < segments; ++seg) {
    const std::vector<Detection>& one = nms_boxes(n);
    boxes.insert(boxes.end(), one.begin(), one.end());
  }
  const course::DeviceBuffer<Detection> d_in = course::to_device(boxes);
  const course::DeviceBuffer<int> d_counts = course::to_device(std::vector<int>(segments, n));
  course::DeviceBuffer<Detection> d_out(boxes.size());
  DetectionSorter sorter(n, segments, version);
  course::Stream stream;
  course::bench::time_on_gpu(state, stream, course::bench::Options{course::L2::warm, true}, [&] {
    sorter.enqueue(d_in.data(), d_counts.data(), d_out.data(), stream);
  });
  state.counters["temp_bytes"] = static_cast<double>(sorter.temp_storage_bytes());
}

void gpu_compact(benchmark::State& state, CompactVersion version, int n) {
  std::vector<std::uint32_t> keys(static_cast<std::size_t>(n));
  Rng rng(77u);
  for (std::uint32_t& k : keys) k = rng.uniform() < 0.1f ? 0x3f000000u : 0u;
  const course::DeviceBuffer<std::uint32_t> d_keys = course::to_device(keys);
  course::DeviceBuffer<int> d_out(keys.size()), d_count(1);
  Compactor compactor(n, version);
  course::Stream stream;
  const double s = course::bench::time_on_gpu(
      state, stream, course::bench::Options{course::L2::warm, true},
      [&] { compactor.enqueue(d_keys.data(), n, d_out.data(), d_count.data(), stream); });
  course::bench::report_bandwidth(state, static_cast<double>(n) * 4.0 * 1.1, s);
}

// Registration order is run order: each CPU baseline runs before the GPU rows that compare
// with it.
bool register_benchmarks() {
  using benchmark::RegisterBenchmark;
  for (const Layout layout : {Layout::yolov5, Layout::yolov8}) {
    const std::string l = layout_name(layout);
    RegisterBenchmark(("cpu_postprocess/" + l).c_str(), cpu_postprocess, layout)
        ->Apply(course::bench::defaults);
    for (const NmsVersion v : {NmsVersion::v1_fast_parallel, NmsVersion::v2_bitmask_greedy,
                               NmsVersion::v3_bitmask_smem}) {
      for (const bool graph : {false, true}) {
        const std::string name =
            "gpu_postprocess/" + l + "/" + nms_name(v) + (graph ? "/graph" : "/stream");
        RegisterBenchmark(name.c_str(), gpu_postprocess, layout, v, graph)
            ->Apply(course::bench::defaults);
      }
    }
  }
  for (const Layout layout : {Layout::yolov5, Layout::yolov8}) {
    for (const int batch : {1, 8, 32}) {
      const std::string name = std::string(layout_name(layout)) + "/b" + std::to_string(batch);
      RegisterBenchmark(("cpu_batch/" + name).c_str(), cpu_batch, layout, batch)
          ->Apply(course::bench::defaults);
      struct Row {
        DType dtype;
        NmsVersion nms;
        bool trt;
      };
      for (const Row& r : {Row{DType::f32, NmsVersion::v2_bitmask_greedy, false},
                           Row{DType::f32, NmsVersion::v3_bitmask_smem, false},
                           Row{DType::f16, NmsVersion::v3_bitmask_smem, false},
                           Row{DType::f32, NmsVersion::v3_bitmask_smem, true}}) {
        const std::string row = "gpu_batch/" + name + "/" + to_string(r.dtype) + "/" +
                                nms_name(r.nms) + (r.trt ? "/trt" : "");
        RegisterBenchmark(row.c_str(), gpu_batch, layout, batch, r.dtype, r.nms, r.trt)
            ->Apply(course::bench::defaults);
      }
    }
  }
  for (const auto& [segments, n] : std::vector<std::pair<int, int>>{
           {1, 256}, {1, 1024}, {1, 4096}, {1, 16384}, {1, 65536}, {32, 1000}, {32, 4096}}) {
    for (const SortVersion v : {SortVersion::rank_sort, SortVersion::cub_radix}) {
      const std::string name = std::string("sort/") + to_string(v) + "/s" +
                               std::to_string(segments) + "/" + std::to_string(n);
      RegisterBenchmark(name.c_str(), gpu_sort, v, segments, n)->Apply(course::bench::defaults);
    }
  }
  for (const int n : {8400, 25200, 32 * 8400, 1 << 22}) {
    for (const CompactVersion v : {CompactVersion::warp_atomic, CompactVersion::cub_select}) {
      const std::string name = std::string("compact/") + to_string(v) + "/" + std::to_string(n);
      RegisterBenchmark(name.c_str(), gpu_compact, v, n)->Apply(course::bench::defaults);
    }
  }
  for (const int n : {1000, 10000, 25000}) {
    RegisterBenchmark(("cpu_nms/" + std::to_string(n)).c_str(), cpu_nms, n)
        ->Apply(course::bench::defaults);
    for (const NmsVersion v : {NmsVersion::v1_fast_parallel, NmsVersion::v2_bitmask_greedy,
                               NmsVersion::v3_bitmask_smem}) {
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
