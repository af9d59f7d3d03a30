// Lesson 08: detector postprocessing on the GPU, measured on this machine.
//
//   lesson08 [--out PATH] [--objects N] [--seed S] [--conf T] [--iou T] [--agnostic]
//            [--repeats R] [--dump-boxes FILE] [--help]
//
// Builds a synthetic scene (known objects), writes the output tensor a YOLOv5 and a YOLOv8
// detector would produce for it, and runs the whole postprocess on the GPU: decode, confidence
// filter, top-K, sort, NMS, boxes back to the source image, one copy to the host. Checks the
// result against the CPU reference and the ground truth, times it (stream launches and a CUDA
// graph), shows where Fast NMS and greedy NMS differ and what happens when the candidate buffer
// overflows, runs NMS alone on 10,000 boxes and a classification head, and draws the recovered
// boxes into a PNG.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/headline.hpp"
#include "common/cuda_check.hpp"
#include "common/device.hpp"
#include "common/lesson_main.hpp"
#include "common/memory.hpp"
#include "common/process.hpp"
#include "common/stream.hpp"
#include "common/timing.hpp"
#include "postprocess.cuh"
#include "synthetic.hpp"

using namespace lesson08;

namespace {

struct Options {
  std::string out;  // empty: lesson08_detections.png beside the executable (in the build folder)
  int objects = 12;
  std::uint32_t seed = 8;
  float conf = 0.25f;
  float iou = 0.45f;
  bool agnostic = false;
  int repeats = 200;
  std::string dump_boxes;  // non-empty: write the NMS benchmark's boxes and kept sets, and exit
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// GPU time of what enqueue() puts on the stream (common/timing.hpp: launch latency excluded),
// after one warm-up, median of `repeats`, in microseconds.
template <class F>
double median_gpu_us(cudaStream_t stream, int repeats, F&& enqueue) {
  return 1e3 * course::measure(stream, repeats, enqueue, course::L2::warm, false).gpu_ms;
}

// Both clocks, microseconds: GPU time, and end-to-end latency (host call to the result in host
// memory: launches, the GPU work, the copies back and the synchronisation), what a frame waits.
template <class F>
course::Timing timing_us(cudaStream_t stream, int repeats, F&& enqueue) {
  course::Timing t = course::measure(stream, repeats, enqueue);
  return {1e3 * t.gpu_ms, 1e3 * t.latency_ms};
}

template <class F>
double median_host_us(int repeats, F&& f) {
  std::vector<double> us;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    const auto t1 = std::chrono::steady_clock::now();
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  return median(us);
}

bool same(const std::vector<Detection>& a, const std::vector<Detection>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const Detection &x = a[i], &y = b[i];
    if (x.box.x1 != y.box.x1 || x.box.y1 != y.box.y1 || x.box.x2 != y.box.x2 ||
        x.box.y2 != y.box.y2 || x.score != y.score || x.class_id != y.class_id ||
        x.index != y.index) {
      return false;
    }
  }
  return true;
}

const char* yes_no(bool b) {
  return b ? "yes" : "NO";
}

OutputSpec spec_for(Layout layout) {
  // A 640x640 input: YOLOv5 has 3 anchors x (80^2 + 40^2 + 20^2) cells, YOLOv8 one per cell.
  return {layout, layout == Layout::yolov5 ? 25200 : 8400, 80};
}

// --dump-boxes: the NMS benchmark's box sets (benchmark_nms_boxes), the indices the lesson's
// greedy NMS keeps (class-aware and class-agnostic, IoU 0.45) and its GPU times, for
// tools/torchvision_nms_check.py. Text, one record per line:
//   set <n> <iou>
//   box <index> <x1> <y1> <x2> <y2> <score> <class>        (n lines; %.9g round-trips a float)
//   kept <aware|agnostic> <gpu_us> <count> <index>...      (in NMS order)
int dump_boxes(const Options& o) {
  std::FILE* f = std::fopen(o.dump_boxes.c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "lesson08: cannot write %s\n", o.dump_boxes.c_str());
    return 1;
  }
  course::Stream stream;
  const float iou = 0.45f;
  bool ok = true;
  std::fprintf(f, "# lesson08 --dump-boxes: NMS benchmark boxes and the lesson's kept sets\n");
  for (const int n : {1000, 10000, 25000}) {
    const std::vector<Detection> boxes = benchmark_nms_boxes(n);
    std::fprintf(f, "set %d %.9g\n", n, iou);
    for (const Detection& d : boxes) {
      std::fprintf(f, "box %d %.9g %.9g %.9g %.9g %.9g %d\n", d.index, d.box.x1, d.box.y1, d.box.x2,
                   d.box.y2, d.score, d.class_id);
    }
    const course::DeviceBuffer<Detection> d_boxes = course::to_device(boxes);
    GpuNms nms(n, NmsVersion::v2_bitmask_greedy);
    for (const bool agnostic : {false, true}) {
      const double us = median_gpu_us(stream, std::min(o.repeats, 50), [&] {
        nms.enqueue(d_boxes.data(), n, iou, agnostic, stream);
      });
      const std::vector<Detection> kept = nms.download(stream);
      ok = ok && same(kept, nms_cpu(boxes, iou, agnostic));
      std::fprintf(f, "kept %s %.3f %zu", agnostic ? "agnostic" : "aware", us, kept.size());
      for (const Detection& d : kept) std::fprintf(f, " %d", d.index);
      std::fprintf(f, "\n");
      std::printf("n = %5d, %-8s: %5zu kept, %8.1f us GPU time\n", n,
                  agnostic ? "agnostic" : "aware", kept.size(), us);
    }
  }
  ok = std::fclose(f) == 0 && ok;
  std::printf("%s %s\n",
              ok ? "wrote" : "FAILED writing (or GPU != CPU reference):", o.dump_boxes.c_str());
  return ok ? 0 : 1;
}

int run(const Options& o) {
  std::printf("Lesson 08: detector postprocessing on the GPU\n");
  std::printf("=============================================\n");
  std::printf("%s\n", course::summary(course::query_device(0)).c_str());

  SceneConfig scene;
  scene.num_objects = o.objects;
  scene.seed = o.seed;
  const std::vector<GroundTruth> objects = make_scene(scene);
  const Letterbox lb = make_letterbox(scene.src_w, scene.src_h, 640, 640);
  PostprocessConfig config;
  config.conf_threshold = o.conf;
  config.iou_threshold = o.iou;
  config.class_agnostic = o.agnostic;
  validate(config);
  GeneratorConfig gen;
  gen.seed = o.seed + 1;
  std::printf(
      "\nScene: %zu objects (%d classes) in a %dx%d image, letterboxed into 640x640:\n"
      "  scale %.4f, padding %.1f px left/right, %.1f px top/bottom.\n"
      "Each object yields %d candidates (the exact box + jittered copies); every other slot is\n"
      "background noise. Thresholds: confidence > %.2f, IoU > %.2f suppresses, NMS %s.\n",
      objects.size(), scene.num_classes, scene.src_w, scene.src_h, lb.scale, lb.pad_x, lb.pad_y,
      gen.candidates_per_object, config.conf_threshold, config.iou_threshold,
      config.class_agnostic ? "class-agnostic" : "class-aware");

  bool ok = true;
  course::Stream stream;
  std::vector<Detection> drawn;
  std::vector<float> v8_tensor;

  std::printf(
      "\n1. The full postprocess: decode -> top-K -> sort -> NMS -> one copy to pinned memory\n");
  std::printf("   %s\n", course::harness_floor_caption(stream).c_str());
  for (const Layout layout : {Layout::yolov5, Layout::yolov8}) {
    const OutputSpec spec = spec_for(layout);
    const std::vector<float> tensor = make_detector_output(spec, lb, objects, gen);
    const course::DeviceBuffer<float> d_output = course::to_device(tensor);
    std::printf("\n   %s: %d candidates x %d values = %.1f MB on the device\n", to_string(layout),
                spec.num_candidates, spec.attributes(), tensor.size() * sizeof(float) / 1e6);

    GpuPostprocessor post(spec, lb, config);
    const PostprocessResult gpu = post.run(d_output.data(), tensor.size(), stream);
    const PostprocessResult cpu = postprocess_cpu(tensor.data(), tensor.size(), spec, lb, config);
    const int recovered = count_recovered(objects, gpu.detections, 0.01f);
    const bool equal = same(gpu.detections, cpu.detections) &&
                       gpu.num_above_threshold == cpu.num_above_threshold &&
                       gpu.num_dropped == cpu.num_dropped;
    std::printf("   above the threshold: %d candidates (dropped: %d); after NMS: %zu detections\n",
                gpu.num_above_threshold, gpu.num_dropped, gpu.detections.size());
    std::printf("   GPU == CPU reference: %s; ground truth recovered: %d of %zu (to 0.01 px)\n",
                yes_no(equal), recovered, objects.size());
    // With the default thresholds every object must come back, and nothing else; other
    // thresholds can legitimately lose objects (a high --conf) or merge them (a low --iou).
    const bool defaults = o.conf == Options{}.conf && o.iou == Options{}.iou;
    ok = ok && equal &&
         (!defaults || (recovered == static_cast<int>(objects.size()) &&
                        gpu.detections.size() == objects.size()));

    const course::Timing on_stream = timing_us(
        stream, o.repeats, [&] { post.enqueue(d_output.data(), tensor.size(), stream); });
    post.capture_graph(d_output.data(), tensor.size(), stream);
    const course::Timing graph = timing_us(stream, o.repeats, [&] { post.launch_graph(stream); });
    ok = ok && same(post.result().detections, cpu.detections);  // the graph's result, too
    const double cpu_us =
        median_host_us(5, [&] { postprocess_cpu(tensor.data(), tensor.size(), spec, lb, config); });
    std::printf("   time per frame, result in pinned host memory (median of %d):\n", o.repeats);
    std::printf("                                 GPU time   end to end (host call -> result)\n");
    std::printf("     GPU, launched on a stream:  %8.1f us  %8.1f us\n", on_stream.gpu_ms,
                on_stream.latency_ms);
    std::printf("     GPU, one CUDA graph launch: %8.1f us  %8.1f us\n", graph.gpu_ms,
                graph.latency_ms);
    course::add_headline("%s postprocess %.0f us end to end (%.0f us GPU time)", to_string(layout),
                         on_stream.latency_ms, on_stream.gpu_ms);
    std::printf("     CPU reference, one core:               %8.1f us  (median of 5)\n", cpu_us);

    PostprocessConfig fast = config;
    fast.nms = NmsVersion::v1_fast_parallel;
    GpuPostprocessor post_v1(spec, lb, fast);
    const PostprocessResult v1 = post_v1.run(d_output.data(), tensor.size(), stream);
    const double v1_us = median_gpu_us(
        stream, o.repeats, [&] { post_v1.enqueue(d_output.data(), tensor.size(), stream); });
    std::printf("   with NMS v1 (Fast NMS) instead: %zu detections, %.1f us GPU time on a stream\n",
                v1.detections.size(), v1_us);
    PostprocessConfig staged = config;
    staged.nms = NmsVersion::v3_bitmask_smem;
    GpuPostprocessor post_v3(spec, lb, staged);
    const PostprocessResult v3 = post_v3.run(d_output.data(), tensor.size(), stream);
    post_v3.capture_graph(d_output.data(), tensor.size(), stream);
    const course::Timing v3_graph =
        timing_us(stream, o.repeats, [&] { post_v3.launch_graph(stream); });
    const bool v3_equal = same(v3.detections, cpu.detections);
    std::printf(
        "   with NMS v3 (v2, mask in shared memory), one graph launch: %.1f us GPU time,\n"
        "   %.1f us end to end; equal to the CPU reference: %s\n",
        v3_graph.gpu_ms, v3_graph.latency_ms, yes_no(v3_equal));
    ok = ok && v3_equal;
    if (layout == Layout::yolov8) {
      drawn = gpu.detections;
      v8_tensor = tensor;
    }
  }

  std::printf(
      "\n2. Fast NMS is not greedy NMS: a chain A > B > C, IoU(A,B) = IoU(B,C) = 0.6, IoU(A,C) = "
      "0.33\n");
  {
    const std::vector<Detection> chain = {
        {{0, 0, 8, 1}, 0.9f, 0, 0}, {{2, 0, 10, 1}, 0.8f, 0, 1}, {{4, 0, 12, 1}, 0.7f, 0, 2}};
    const auto names = [](const std::vector<Detection>& kept) {
      std::string s;
      for (const Detection& d : kept) s += std::string(s.empty() ? "" : ", ") + "ABC"[d.index];
      return s;
    };
    const std::vector<Detection> greedy =
        nms_gpu(chain, 0.5f, false, NmsVersion::v2_bitmask_greedy);
    const std::vector<Detection> fast = nms_gpu(chain, 0.5f, false, NmsVersion::v1_fast_parallel);
    std::printf("   at IoU threshold 0.5: greedy (v2) keeps %s; Fast NMS (v1) keeps %s\n",
                names(greedy).c_str(), names(fast).c_str());
    std::printf(
        "   greedy: A removes B, and B, removed, cannot remove C. Fast NMS: B still removes C.\n");
    ok = ok && greedy.size() == 2 && fast.size() == 1;
  }

  std::printf("\n3. Overflow: the same YOLOv8 output into a buffer of only 100 candidates\n");
  {
    const OutputSpec spec = spec_for(Layout::yolov8);
    PostprocessConfig small = config;
    small.max_candidates = 100;
    const course::DeviceBuffer<float> d_output = course::to_device(v8_tensor);
    GpuPostprocessor post(spec, lb, small);
    const PostprocessResult gpu = post.run(d_output.data(), v8_tensor.size(), stream);
    const PostprocessResult cpu =
        postprocess_cpu(v8_tensor.data(), v8_tensor.size(), spec, lb, small);
    const bool equal = same(gpu.detections, cpu.detections) && gpu.num_dropped == cpu.num_dropped;
    std::printf(
        "   %d above the threshold, %d dropped, reported; the 100 best by (score, index) kept\n"
        "   -> %zu detections; GPU == CPU reference: %s\n",
        gpu.num_above_threshold, gpu.num_dropped, gpu.detections.size(), yes_no(equal));
    const double us = median_gpu_us(
        stream, o.repeats, [&] { post.enqueue(d_output.data(), v8_tensor.size(), stream); });
    std::printf("   GPU time with the top-K selection on the overflow path: %.1f us\n", us);
    ok = ok && equal;
  }

  std::printf(
      "\n4. NMS alone: 10,000 boxes (400 clusters of 25, 80 classes), boxes already on the "
      "device\n");
  {
    const std::vector<Detection> boxes = random_detections(10000, 80, 640, 25, 0, o.seed);
    const course::DeviceBuffer<Detection> d_boxes = course::to_device(boxes);
    const std::vector<Detection> cpu = nms_cpu(boxes, config.iou_threshold, config.class_agnostic);
    const double cpu_us =
        median_host_us(3, [&] { nms_cpu(boxes, config.iou_threshold, config.class_agnostic); });
    for (const NmsVersion version : {NmsVersion::v1_fast_parallel, NmsVersion::v2_bitmask_greedy,
                                     NmsVersion::v3_bitmask_smem}) {
      GpuNms nms(10000, version);
      const double us = median_gpu_us(stream, std::min(o.repeats, 50), [&] {
        nms.enqueue(d_boxes.data(), 10000, config.iou_threshold, config.class_agnostic, stream);
      });
      const std::vector<Detection> kept = nms.download(stream);
      const bool equal =
          version != NmsVersion::v1_fast_parallel
              ? same(kept, cpu)
              : same(kept, fast_nms_cpu(boxes, config.iou_threshold, config.class_agnostic));
      std::printf("   %-18s %5zu kept, %8.1f us GPU time; equal to its CPU reference: %s\n",
                  to_string(version), kept.size(), us, yes_no(equal));
      ok = ok && equal;
      if (version == NmsVersion::v2_bitmask_greedy) {
        course::add_headline("greedy NMS of 10,000 boxes %.0f us", us);
      }
    }
    std::printf("   %-18s %5zu kept, %8.1f us (greedy, one core)\n", "CPU reference", cpu.size(),
                cpu_us);
  }

  std::printf("\n5. A classification head: softmax over 1000 logits, then the top 5\n");
  {
    std::vector<float> logits = random_logits(1, 1000, 3.0f, o.seed);
    logits[207] = 8.0f;  // the "true" class
    const course::DeviceBuffer<float> d_logits = course::to_device(logits);
    course::DeviceBuffer<float> d_probs(1000), d_top(5);
    course::DeviceBuffer<int> d_index(5);
    softmax_rows(d_logits.data(), d_probs.data(), 1, 1000, stream);
    topk_rows(d_probs.data(), 1, 1000, 5, d_top.data(), d_index.data(), stream);
    stream.synchronize();
    const std::vector<float> top = course::to_host(d_top);
    const std::vector<int> index = course::to_host(d_index);
    std::printf("   top 5: ");
    for (int j = 0; j < 5; ++j)
      std::printf("class %d (%.3f)%s", index[j], top[j], j < 4 ? ", " : "\n");
    ok = ok && index[0] == 207;
  }

  std::printf(
      "\n6. A batch: 32 different YOLOv8 outputs in one launch sequence, FP32 and FP16 input,\n"
      "   and TensorRT's EfficientNMS output layout\n");
  {
    const int batch = 32;
    const BatchSpec bspec{spec_for(Layout::yolov8), batch};
    std::vector<Letterbox> lbs;
    std::vector<float> tensor;
    std::vector<std::size_t> truth;  // objects per image
    static const int sizes[][2] = {{1280, 720}, {1920, 1080}, {640, 480}, {720, 1280}};
    for (int b = 0; b < batch; ++b) {
      SceneConfig sc;
      sc.src_w = sizes[b % 4][0];
      sc.src_h = sizes[b % 4][1];
      sc.num_objects = 1 + (b * 7) % 20;
      sc.seed = o.seed + 100u + static_cast<std::uint32_t>(b);
      lbs.push_back(make_letterbox(sc.src_w, sc.src_h, 640, 640));
      GeneratorConfig g;
      g.seed = sc.seed + 1000u;
      const std::vector<GroundTruth> objs = make_scene(sc);
      truth.push_back(objs.size());
      const std::vector<float> t = make_detector_output(bspec.image, lbs.back(), objs, g);
      tensor.insert(tensor.end(), t.begin(), t.end());
    }
    std::vector<__half> half(tensor.size());
    std::vector<float> widened(tensor.size());
    for (std::size_t i = 0; i < half.size(); ++i) {
      half[i] = __float2half_rn(tensor[i]);
      widened[i] = __half2float(half[i]);
    }
    const course::DeviceBuffer<float> d_f32 = course::to_device(tensor);
    const course::DeviceBuffer<__half> d_f16 = course::to_device(half);
    PostprocessConfig bconfig = config;
    bconfig.nms = NmsVersion::v3_bitmask_smem;
    BatchedPostprocessor post32(bspec, lbs, bconfig, DType::f32);
    BatchedPostprocessor post16(bspec, lbs, bconfig, DType::f16);
    const std::vector<PostprocessResult> gpu = post32.run(d_f32.data(), tensor.size(), stream);
    const std::vector<PostprocessResult> cpu =
        postprocess_batch_cpu(tensor.data(), tensor.size(), bspec, lbs, config);
    post16.enqueue(d_f16.data(), half.size(), stream);
    stream.synchronize();
    const std::vector<PostprocessResult> gpu16 = post16.results();
    const std::vector<PostprocessResult> cpu16 =
        postprocess_batch_cpu(widened.data(), widened.size(), bspec, lbs, config);
    int equal_images = 0, equal_images16 = 0, found = 0, total = 0;
    for (int b = 0; b < batch; ++b) {
      equal_images += same(gpu[b].detections, cpu[b].detections) &&
                      gpu[b].num_above_threshold == cpu[b].num_above_threshold &&
                      gpu[b].num_dropped == cpu[b].num_dropped;
      equal_images16 += same(gpu16[b].detections, cpu16[b].detections);
      found += static_cast<int>(gpu[b].detections.size());
      total += static_cast<int>(truth[b]);
    }
    std::printf("   %d images, %zu MB (f32); %d objects in all, %d detections\n", batch,
                tensor.size() * sizeof(float) >> 20, total, found);
    std::printf(
        "   images equal to the CPU reference, image by image: f32 %d of %d, "
        "f16 %d of %d (f16: against the CPU on the exactly widened values)\n",
        equal_images, batch, equal_images16, batch);
    ok = ok && equal_images == batch && equal_images16 == batch;

    const int k = config.max_detections;
    course::DeviceBuffer<int> num(batch), classes(static_cast<std::size_t>(batch) * k);
    course::DeviceBuffer<float> boxes(static_cast<std::size_t>(batch) * k * 4),
        scores(static_cast<std::size_t>(batch) * k);
    const EfficientNmsOutputs trt{num.data(), boxes.data(), scores.data(), classes.data()};
    post32.enqueue(d_f32.data(), tensor.size(), stream);
    post32.write_efficient_nms(trt, stream);
    stream.synchronize();
    const EfficientNmsHost expected = to_efficient_nms(cpu, k);
    const bool trt_equal = course::to_host(num) == expected.num_detections &&
                           course::to_host(boxes) == expected.detection_boxes &&
                           course::to_host(scores) == expected.detection_scores &&
                           course::to_host(classes) == expected.detection_classes;
    std::printf(
        "   EfficientNMS layout (num_detections [%d,1], detection_boxes [%d,%d,4], ...):"
        " equal to the CPU conversion: %s; num_detections[0..3] = %d %d %d %d\n",
        batch, batch, k, yes_no(trt_equal), expected.num_detections[0], expected.num_detections[1],
        expected.num_detections[2], expected.num_detections[3]);
    ok = ok && trt_equal;

    const course::Timing t32 =
        timing_us(stream, o.repeats, [&] { post32.enqueue(d_f32.data(), tensor.size(), stream); });
    const course::Timing t16 =
        timing_us(stream, o.repeats, [&] { post16.enqueue(d_f16.data(), half.size(), stream); });
    std::printf("   time per batch of %d (median of %d):  GPU time   end to end\n", batch,
                o.repeats);
    std::printf(
        "     f32 input:                        %8.1f us  %8.1f us  (%.1f us GPU per image)\n",
        t32.gpu_ms, t32.latency_ms, t32.gpu_ms / batch);
    std::printf("     f16 input (widening included):    %8.1f us  %8.1f us\n", t16.gpu_ms,
                t16.latency_ms);
    course::add_headline("batch of 32 postprocessed in %.0f us GPU time", t32.gpu_ms);
  }

  write_detections_png(o.out, scene.src_w, scene.src_h, objects, drawn);
  std::printf(
      "\nWrote %s: the %zu objects (filled) and the %zu detections recovered from the YOLOv8\n"
      "output (outlined, with class and score).\n",
      o.out.c_str(), objects.size(), drawn.size());
  std::printf(
      "\n%s\n",
      ok ? "PASS: every GPU result equals its CPU reference, and the ground truth came back."
         : "FAIL: a GPU result differs from its CPU reference (NO above), or an object\n"
           "was not recovered with the default thresholds.");
  course::print_headline();
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{
      "Lesson 08: detector postprocessing on the GPU (decode, confidence filter, NMS, boxes\n"
      "back to the source image) on synthetic YOLOv5 / YOLOv8 outputs with known objects;\n"
      "checks against the CPU reference and the ground truth, times it, draws the result."};
  app.add_option("--out", o.out,
                 "the PNG to write (default: lesson08_detections.png in the folder of this\n"
                 "executable)")
      ->type_name("PATH");
  app.add_option("--objects", o.objects, "objects in the scene (default 12)")
      ->type_name("N")
      ->check(course::integer_in(0, 40));
  app.add_option("--seed", o.seed, "seed of the synthetic scene (default 8)")->type_name("S");
  app.add_option("--conf", o.conf, "confidence threshold (default 0.25)")
      ->type_name("T")
      ->check(course::real_in(0.0, 1.0));
  app.add_option("--iou", o.iou, "NMS IoU threshold (default 0.45)")
      ->type_name("T")
      ->check(course::real_in(0.0, 1.0));
  app.add_flag("--agnostic", o.agnostic, "class-agnostic NMS (default: class-aware)");
  app.add_option("--repeats", o.repeats,
                 "timed runs per measurement, the median is shown (default 200)")
      ->type_name("R")
      ->check(course::integer_in(1, 100000));
  app.add_option("--dump-boxes", o.dump_boxes,
                 "write the NMS benchmark's boxes and the indices greedy NMS keeps to FILE (for\n"
                 "tools/torchvision_nms_check.py), then exit")
      ->type_name("FILE");
  return course::lesson_main(app, argc, argv, [&] {
    if (!o.dump_boxes.empty()) return dump_boxes(o);
    if (o.out.empty()) {  // not the current directory: make run runs from the repository root
      const std::string exe = course::self_executable();
      o.out = exe.substr(0, exe.find_last_of('/')) + "/lesson08_detections.png";
    }
    return run(o);
  });
}
