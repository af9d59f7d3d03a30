// Lesson 13: INT8 quantisation of lesson 12's detector.
//
//   lesson13 [--weights PATH] [--scenes N] [--batch N]... [--reps N]
//   lesson13 --accuracy [--eval-scenes N] [--threads N] [--sensitivity]
//   lesson13 --engine [--engine-scenes N] [--reps N] [--sensitivity]
//
// 1. calibration (CPU): held-out scenes through lesson 12's optimised graph on its CPU reference
//    (96 x 128: the network is fully convolutional), every activation buffer into an observer;
//    the amax each calibrator picks for a selection of tensors, and how often entropy clips
// 2. speed (GPU, compute capability 8.0+): the network's largest 1x1 and largest 3x3
//    convolution at 640 x 640, timed as
//      INT8 implicit GEMM   this lesson's kernel, every tile, INT8 in and out with the fused
//                           epilogue, exact and fast (int8_conv_gpu.hpp; the results checked
//                           against conv_int8_reference first); on compute capability 9.0 the
//                           1x1 layer also on the wgmma path (int8_wgmma.cuh), every tile
//      FP16 implicit GEMM   lesson 12's kernels, every one the builder may choose for the layer
//      cuBLASLt INT8 GEMM   the same GEMM shape (M = pixels, N = out_c, K = kernel^2 in_c) on
//                           contiguous operands, int32 and int8 output: the library's time with
//                           no gather and no epilogue (a 3x3 layer's input would need an
//                           im2col first)
//    GPU time of each launch (common/timing.hpp: the stream held, launch latency excluded), L2
//    warm, median of --reps samples; TOPS count 2 operations per multiply-add of the layer.
// Without a GPU, part 1 runs and part 2 says what it needs.
// --accuracy replaces part 2 by
// 3. accuracy (CPU): what quantisation costs in boxes, by simulated quantisation (fake_quant.hpp):
//    lesson 12's held-out scenes 0 .. N-1 at 96 x 128 through the optimised graph, FP32 and INT8
//    with each calibrator's table (from part 1's scenes, seeds 1000..), per-channel and per-tensor
//    weight scales; mAP@0.5, mAP@0.5:0.95 and the frames whose deployment detections change
//    against FP32; FP8 E4M3 (conv_fp8_reference) with the min-max table's amax, per-channel and
//    per-tensor weights, and with entropy's; then the calibration mistakes people make (tables
//    calibrated on BGR images, on pixels without the 1/255, on one scene, on a set with one hot
//    pixel), min-max and entropy, with the same correct inference. With --sensitivity, each
//    convolution alone in INT8 (entropy table, per-channel weights) on the first 16 of those
//    scenes: the layers whose quantisation costs most (about a minute more on one core). A small
//    input and few scenes keep it to about a minute on one core (--threads 1, the default);
//    --engine measures the GPU engine at 640 x 640.
// --engine replaces parts 2 and 3 by
// 4. the INT8 engine (GPU, quantized_engine.hpp) at 640 x 640: tables calibrated at 640 x 640
//    on the GPU (8 scenes from seed 1000: min-max, percentile 99.99, entropy) beside part 1's
//    entropy table; every op INT8 (exact and fast epilogue) and with the first layer and the
//    head's last convolutions in FP16, and every op FP8 E4M3 (min-max table; compute capability
//    8.9+), against lesson 12's FP16 engine: GPU time of one inference at batch 1 and 32 (all
//    launches on one stream, no CUDA graph, launch latency excluded, L2 warm, median of --reps),
//    the slowest INT8 launches at batch 32 beside the FP16 builder's time for the same layer;
//    then mAP@0.5, mAP@0.5:0.95 and the frames whose detections change against lesson 12's FP32
//    engine on --engine-scenes held-out scenes, per table (FP8: min-max and entropy). With
//    --sensitivity, each convolution alone in INT8 (min-max table) on the same scenes, the
//    costliest ten, and the fallback list chosen from them: its mAP and its time at batch 32.
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "calibrate.hpp"
#include "calibrate_graph.hpp"
#include "common/cuda_check.hpp"
#include "common/device.hpp"
#include "common/headline.hpp"
#include "common/lesson_main.hpp"
#include "common/memory.hpp"
#include "common/stream.hpp"
#include "common/timing.hpp"
#include "cublaslt_int8.hpp"
#include "fake_quant.hpp"
#include "engine.hpp"
#include "engine_kernels.cuh"
#include "evaluate.hpp"
#include "graph.hpp"
#include "int8_conv.hpp"
#include "fp8_conv_gpu.hpp"
#include "int8_conv_gpu.hpp"
#include "kernel_library.hpp"
#include "launch.hpp"
#include "network.hpp"
#include "quantize.hpp"
#include "quantized_engine.hpp"

using namespace lesson13;

namespace {

struct Options {
  std::string weights = std::string(LESSON12_DATA_DIR) + "/yolov8n_scenes.weights";
  int scenes = 4;
  std::vector<int> batches{1, 16};
  int reps = 9;
  bool accuracy = false;
  int eval_scenes = 64;
  int threads = 1;
  bool sensitivity = false;
  bool engine = false;
  int engine_scenes = 100;
};

constexpr int kCalibH = 96, kCalibW = 128;
constexpr std::uint64_t kHeldOutSeed = 1000;  // calibration scenes (lesson 12 evaluates on 0..)
constexpr int kSensitivityScenes = 16;

// ------------------------------------------------------------------ 1. calibration

// The sensitivity tables' rows (each convolution alone in INT8), sorted costliest first by
// mAP@0.5:0.95; the first ten printed as differences from `base`.
void print_costliest(std::vector<LayerSensitivity>& rows, const Accuracy& base) {
  std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
    return a.accuracy.map50_95 < b.accuracy.map50_95;
  });
  std::printf("   %-24s %14s %14s %10s\n", "layer", "d mAP@0.5", "d mAP@0.5:0.95", "changed");
  for (std::size_t i = 0; i < rows.size() && i < 10; ++i) {
    const Accuracy& a = rows[i].accuracy;
    std::printf("   %-24s %+14.4f %+14.4f %8d/%d\n", rows[i].op.c_str(), a.map50 - base.map50,
                a.map50_95 - base.map50_95, a.changed, a.frames);
  }
}

std::vector<TensorObservation> calibration_summary(const lesson12::WeightsFile& w,
                                                   const Options& o) {
  std::printf("1. Calibration on the CPU reference: %d held-out scenes (seeds %llu..), %dx%d\n",
              o.scenes, static_cast<unsigned long long>(kHeldOutSeed), kCalibW, kCalibH);
  const lesson12::EngineGraph g = lesson12::optimize(lesson12::yolov8n(w, kCalibH, kCalibW));
  const auto images = calibration_images(kHeldOutSeed, o.scenes, kCalibW, kCalibH);
  const std::vector<TensorObservation> obs = observe_engine_graph(g, images);
  std::printf("   network %s: %zu tensors (the input and every activation buffer)\n",
              network_id(w.model, g).c_str(), obs.size());
  const CalibratorConfig configs[] = {
      {CalibrationMethod::min_max, 0, 128},
      {CalibrationMethod::percentile, 99.9, 128},
      {CalibrationMethod::percentile, 99.99, 128},
      {CalibrationMethod::entropy, 0, 128},
  };
  // Column heads: calibrator_name's, shortened to fit 100 columns.
  const char* heads[] = {"minmax", "p99.9", "p99.99", "entropy"};
  std::printf(
      "\n   amax per calibrator (scale = amax / 127): minmax, percentile 99.9 and 99.99, "
      "entropy-128\n");
  std::printf("   %-22s %9s %9s", "tensor", "min", "max");
  for (const char* h : heads) std::printf(" %9s", h);
  std::printf("\n");
  // The input, every eighth buffer, and the head's last convolutions (their logits).
  std::vector<std::size_t> rows{0};
  for (std::size_t i = 8; i < obs.size(); i += 8) rows.push_back(i);
  for (std::size_t i = 1; i < obs.size(); ++i) {
    const std::string& n = obs[i].name;
    if (n.size() > 2 && n.compare(n.size() - 2, 2, ".2") == 0 && n.rfind("model.22.", 0) == 0 &&
        std::find(rows.begin(), rows.end(), i) == rows.end())
      rows.push_back(i);
  }
  std::sort(rows.begin(), rows.end());
  for (std::size_t i : rows) {
    const ActivationObserver& ob = obs[i].observer;
    std::printf("   %-22.22s %9.3f %9.3f", obs[i].name.c_str(), ob.min(), ob.max());
    for (const CalibratorConfig& c : configs) std::printf(" %9.4f", calibrate_amax(ob, c));
    std::printf("\n");
  }
  int clipped = 0;
  std::vector<double> ratio;
  for (const TensorObservation& t : obs) {
    const double mm = calibrate_amax(t.observer, configs[0]);
    const double en = calibrate_amax(t.observer, configs[3]);
    if (mm > 0) {
      ratio.push_back(en / mm);
      clipped += en < mm;
    }
  }
  std::sort(ratio.begin(), ratio.end());
  std::printf(
      "\n   entropy clips %d of %zu tensors below their max |x|; entropy / min-max:\n"
      "   median %.3f, smallest %.3f\n\n",
      clipped, ratio.size(), ratio[ratio.size() / 2], ratio.front());
  return obs;
}

// ------------------------------------------------------------------ 3. accuracy (CPU)

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void print_accuracy(const char* what, const Accuracy& a, double seconds) {
  std::printf("   %-48s %8.4f %13.4f %8d/%d %8.1f s\n", what, a.map50, a.map50_95, a.changed,
              a.frames, seconds);
}

void accuracy_table(const lesson12::WeightsFile& w, const Options& o,
                    const std::vector<TensorObservation>& obs) {
  std::printf(
      "3. Accuracy on the CPU, simulated quantisation: %d held-out scenes (seeds 0..%d), %dx%d, "
      "%d thread%s\n",
      o.eval_scenes, o.eval_scenes - 1, kCalibW, kCalibH, o.threads, o.threads == 1 ? "" : "s");
  std::printf(
      "   INT8: every conv, pool and upsample reads its activations quantised with the table's "
      "scale\n   (calibrated on part 1's scenes), conv_int8_reference's arithmetic; the decode "
      "stays FP32.\n   FP8 E4M3: the same, E4M3 codes at scale amax / 448 (the table's amax = "
      "127 x its scale),\n   weights max |w| / 448, conv_fp8_reference's exact sums.\n"
      "   mAP as COCO computes it (conf 0.001, NMS IoU 0.7); changed: frames whose "
      "detections\n   (conf 0.25, IoU 0.45) differ from FP32's. The GPU engine at 640x640: "
      "--engine.\n\n");
  const lesson12::EngineGraph g = lesson12::optimize(lesson12::yolov8n(w, kCalibH, kCalibW));
  const std::string id = network_id(w.model, g);
  const HeldOutScenes scenes = held_out_scenes(0, o.eval_scenes, kCalibW, kCalibH);
  std::printf("   %-48s %8s %13s %10s %10s\n", "precision", "mAP@0.5", "mAP@0.5:0.95", "changed",
              "CPU time");
  auto t0 = std::chrono::steady_clock::now();
  FakeQuantConfig fp32_config;
  fp32_config.all_fp32 = true;
  const FakeQuantGraph fp32(g, CalibrationTable{}, fp32_config);
  const SceneDetections ref = detect_scenes(
      [&](const std::vector<float>& x) { return fp32.run(x); }, scenes, g.num_classes, o.threads);
  const Accuracy a32 = score_detections(ref, scenes, g.num_classes, &ref);
  print_accuracy("FP32", a32, seconds_since(t0));
  const CalibratorConfig configs[] = {
      {CalibrationMethod::min_max, 0, 128},
      {CalibrationMethod::percentile, 99.9, 128},
      {CalibrationMethod::percentile, 99.99, 128},
      {CalibrationMethod::entropy, 0, 128},
  };
  CalibrationTable entropy, minmax;
  Accuracy entropy_pc;
  const auto run_int8 = [&](const CalibrationTable& table, const FakeQuantConfig& c,
                            const std::string& label) {
    const auto t = std::chrono::steady_clock::now();
    const FakeQuantGraph fq(g, table, c);
    const SceneDetections d = detect_scenes([&](const std::vector<float>& x) { return fq.run(x); },
                                            scenes, g.num_classes, o.threads);
    const Accuracy a = score_detections(d, scenes, g.num_classes, &ref);
    print_accuracy(label.c_str(), a, seconds_since(t));
    return a;
  };
  for (const CalibratorConfig& cc : configs) {
    const CalibrationTable table = make_calibration_table(obs, cc, id);
    for (WeightScales ws : {WeightScales::per_channel, WeightScales::per_tensor}) {
      FakeQuantConfig c;
      c.weights = ws;
      const Accuracy a =
          run_int8(table, c, "INT8 " + calibrator_name(cc) + ", " + to_string(ws) + " weights");
      if (cc.method == CalibrationMethod::entropy && ws == WeightScales::per_channel) {
        entropy = table;
        entropy_pc = a;
      }
    }
    if (cc.method == CalibrationMethod::min_max) minmax = table;
  }
  FakeQuantConfig first_fp32;
  first_fp32.keep_fp32 = {g.ops.front().name};
  run_int8(entropy, first_fp32, "INT8 entropy-128, per-channel, " + g.ops.front().name + " FP32");
  // FP8 E4M3 with max scaling (the min-max table), its usual recipe, then entropy's clipped amax.
  for (WeightScales ws : {WeightScales::per_channel, WeightScales::per_tensor}) {
    FakeQuantConfig c;
    c.precision = QuantPrecision::fp8_e4m3;
    c.weights = ws;
    run_int8(minmax, c,
             "FP8 E4M3 " + calibrator_name(configs[0]) + ", " + to_string(ws) + " weights");
  }
  FakeQuantConfig fp8_entropy;
  fp8_entropy.precision = QuantPrecision::fp8_e4m3;
  run_int8(entropy, fp8_entropy, "FP8 E4M3 entropy-128, per-channel weights");

  // Calibration mistakes people make: the same inference (correct preprocessing, per-channel
  // weights), the tables calibrated on a wrong set of part 1's scenes.
  std::printf(
      "\n   Calibration mistakes: tables from a wrong calibration set (part 1's %d scenes made "
      "wrong),\n   inference as above\n",
      o.scenes);
  const std::vector<std::vector<float>> good =
      calibration_images(kHeldOutSeed, o.scenes, kCalibW, kCalibH);
  const std::size_t plane = static_cast<std::size_t>(kCalibW) * kCalibH;
  struct Mistake {
    const char* what;
    std::vector<std::vector<float>> images;
  };
  std::vector<Mistake> mistakes;
  mistakes.push_back({"calibrated on BGR", good});  // planes 0 and 2 swapped
  for (std::vector<float>& im : mistakes.back().images)
    std::swap_ranges(im.begin(), im.begin() + plane, im.begin() + 2 * plane);
  mistakes.push_back({"calibrated without /255", good});  // pixels in [0, 255]
  for (std::vector<float>& im : mistakes.back().images)
    for (float& v : im) v *= 255.0f;
  mistakes.push_back({"calibrated on 1 scene", {good.front()}});
  mistakes.push_back({"1 hot pixel (40.0) in scene 0", good});  // a stuck sensor pixel
  for (int c = 0; c < 3; ++c) mistakes.back().images.front()[c * plane] = 40.0f;
  for (const Mistake& m : mistakes) {
    const std::vector<TensorObservation> wrong = observe_engine_graph(g, m.images);
    for (const CalibratorConfig& cc : {configs[0], configs[3]}) {
      FakeQuantConfig c;
      c.weights = WeightScales::per_channel;
      run_int8(make_calibration_table(wrong, cc, id), c,
               "INT8 " + calibrator_name(cc) + ", " + m.what);
    }
  }
  std::printf("   (total %.1f s)\n\n", seconds_since(t0));
  course::add_headline("CPU fake-quant %dx%d, %d scenes: mAP@0.5:0.95 FP32 %.4f, INT8 entropy %.4f",
                       kCalibW, kCalibH, o.eval_scenes, a32.map50_95, entropy_pc.map50_95);

  if (!o.sensitivity) return;
  // The first scenes only: every layer's run repeats the FP32 ops after it (about 3 s per layer
  // and 16 scenes on one core).
  const int n_sens = std::min(o.eval_scenes, kSensitivityScenes);
  HeldOutScenes sub = scenes;
  sub.images.resize(static_cast<std::size_t>(n_sens));
  sub.truth.resize(static_cast<std::size_t>(n_sens));
  SceneDetections sub_ref = ref;
  sub_ref.eval.resize(static_cast<std::size_t>(n_sens));
  sub_ref.deploy.resize(static_cast<std::size_t>(n_sens));
  const Accuracy sub32 = score_detections(sub_ref, sub, g.num_classes, &sub_ref);
  std::printf(
      "   Sensitivity on scenes 0..%d: each convolution alone in INT8 (entropy-128 table, "
      "per-channel\n   weights), its cost against FP32 (mAP@0.5 %.4f, mAP@0.5:0.95 %.4f on these "
      "scenes);\n   the ten costliest, then the total\n\n",
      n_sens - 1, sub32.map50, sub32.map50_95);
  t0 = std::chrono::steady_clock::now();
  std::vector<LayerSensitivity> rows =
      layer_sensitivity(g, entropy, WeightScales::per_channel, sub, sub_ref, o.threads);
  print_costliest(rows, sub32);
  int unchanged = 0;
  for (const auto& r : rows) unchanged += r.accuracy.changed == 0;
  std::printf("   %zu layers; %d change no frame's detections (%.1f s)\n\n", rows.size(), unchanged,
              seconds_since(t0));
}

// ------------------------------------------------------------------ 2. speed

// The network's largest convolution (multiply-adds) of a kernel size, among those the INT8
// tensor-core path can run (in_c a multiple of 16: all but the first layer).
const lesson12::FusedOp* largest_conv(const lesson12::EngineGraph& g, int kernel) {
  const lesson12::FusedOp* best = nullptr;
  double best_macs = 0;
  for (const lesson12::FusedOp& op : g.ops) {
    if (op.kind != lesson12::OpKind::conv || op.kernel != kernel ||
        op.in_channels % kInt8ConvChannelMultiple != 0)
      continue;
    const double macs = static_cast<double>(op.output.h) * op.output.w * op.out_channels *
                        op.kernel * op.kernel * op.in_channels;
    if (macs > best_macs) best_macs = macs, best = &op;
  }
  return best;
}

std::vector<std::int8_t> random_int8(std::size_t n, std::mt19937& rng) {
  // Activations after SiLU: mostly small and positive, a tail of large values.
  std::uniform_int_distribution<int> small(-20, 60), any(-127, 127), pick(0, 9);
  std::vector<std::int8_t> v(n);
  for (std::int8_t& x : v) x = static_cast<std::int8_t>(pick(rng) ? small(rng) : any(rng));
  return v;
}

int sm_version() {
  const course::DeviceInfo d = course::query_device(0);
  return d.cc_major * 10 + d.cc_minor;
}

struct Row {
  std::string what;
  double us = 0;
};

void print_row(const Row& r, double macs, double fp16_us) {
  std::printf("   %-52s %9.2f us %8.1f TOPS", r.what.c_str(), r.us,
              2 * macs / (r.us * 1e-6) / 1e12);
  if (fp16_us > 0) std::printf("  %5.2fx", fp16_us / r.us);
  std::printf("\n");
}

// The fastest of lesson 12's FP16 kernels that can run `c` (first_layer: the kernels that read
// the float NCHW input), GPU time per launch, median of o.reps, L2 warm; {"", 0} if none can.
Row fastest_fp16(lesson12::KernelLibrary& lib, const lesson12::ConvArgs& c, bool first_layer,
                 const Options& o, cudaStream_t s) {
  int count = 0;
  const lesson12::ConvKernelInfo* table = lesson12::conv_kernels(&count);
  Row best{"", 0};
  for (int k = 0; k < count; ++k) {
    const lesson12::ConvKernelInfo& info = table[k];
    if (info.dtype != lesson12::DType::f16 || !lesson12::conv_kernel_runs_on(info, sm_version()) ||
        !lesson12::conv_kernel_supports(info, c, first_layer))
      continue;
    const double ms = course::measure(
                          s, o.reps, [&] { lesson12::launch_conv_kernel(lib, info, c, s); },
                          course::L2::warm, false)
                          .gpu_ms;
    if (best.us == 0 || ms * 1e3 < best.us)
      best = {std::string("FP16 (lesson 12) ") + info.tactic, ms * 1e3};
  }
  return best;
}

// One layer at one batch: the INT8 kernel (every tile), lesson 12's FP16 kernels, cuBLASLt.
// Returns {best INT8 us with the exact epilogue, best FP16 us}.
std::pair<double, double> time_layer(const lesson12::FusedOp& op, int batch, const Options& o,
                                     lesson12::KernelLibrary& lib, int sm_count, cudaStream_t s) {
  const int in_h = op.input.h, in_w = op.input.w, C = op.in_channels, N = op.out_channels;
  const int out_h = op.output.h, out_w = op.output.w, kk = op.kernel;
  const int K = kk * kk * C;
  const long long M = static_cast<long long>(batch) * out_h * out_w;
  const double macs = static_cast<double>(M) * N * K;
  std::printf("\n   %s, batch %d: M = %lld pixels, N = %d channels, K = %d; %.3f G multiply-adds\n",
              lesson12::describe(op).c_str(), batch, M, N, K, macs / 1e9);
  std::mt19937 rng(1313);
  const std::size_t in_elems = static_cast<std::size_t>(batch) * in_h * in_w * C;
  const std::size_t out_elems = static_cast<std::size_t>(M) * N;

  // ---- INT8: the layer's own weights, quantised per output channel; random activations.
  const PerChannelInt8 wq = quantize_int8_per_channel(op.weight, N);
  const std::vector<std::int8_t> x8 = random_int8(in_elems, rng);
  const std::vector<std::int8_t> r8 = random_int8(out_elems, rng);
  course::DeviceBuffer<std::int8_t> dx8 = course::to_device(x8), dw8 = course::to_device(wq.q);
  course::DeviceBuffer<std::int8_t> dr8 = course::to_device(r8), dy8(out_elems);
  course::DeviceBuffer<float> dbias = course::to_device(op.bias), dws = course::to_device(wq.scale);
  Int8ConvArgs a{};
  a.x = dx8.data();
  a.w = dw8.data();
  a.bias = dbias.data();
  a.res = op.has_residual ? dr8.data() : nullptr;
  a.y = dy8.data();
  a.x_stride = C;
  a.res_stride = N;
  a.y_stride = N;
  a.batch = batch;
  a.in_h = in_h;
  a.in_w = in_w;
  a.in_c = C;
  a.out_h = out_h;
  a.out_w = out_w;
  a.out_c = N;
  a.kernel = kk;
  a.stride = op.stride;
  a.pad = op.pad;
  a.act = static_cast<int>(op.act);
  a.x_scale = 4.0f / 127.0f;
  a.w_scale = dws.data();
  a.res_scale = 4.0f / 127.0f;
  a.y_scale = 6.0f / 127.0f;
  a.y_type = Int8ConvOutput::int8;
  // Correctness first (batch 1 only: the CPU reference is slow): equal to conv_int8_reference,
  // and how many elements the certified float epilogue handed to the double path.
  if (batch == 1) {
    course::DeviceBuffer<unsigned long long> fallbacks(1);
    CUDA_CHECK(cudaMemsetAsync(fallbacks.data(), 0, sizeof(unsigned long long), s));
    conv_int8_gpu(a, s, -1, fallbacks.data());
    CUDA_CHECK(cudaStreamSynchronize(s));
    const std::vector<std::int8_t> got = course::to_host(dy8);
    unsigned long long fb = 0;
    CUDA_CHECK(cudaMemcpy(&fb, fallbacks.data(), sizeof fb, cudaMemcpyDeviceToHost));
    std::vector<std::int8_t> want(out_elems);
    Int8ConvArgs h = a;
    h.x = x8.data();
    h.w = wq.q.data();
    h.bias = op.bias.data();
    h.res = op.has_residual ? r8.data() : nullptr;
    h.y = want.data();
    h.w_scale = wq.scale.data();
    conv_int8_reference(h);
    std::size_t diff = 0;
    for (std::size_t i = 0; i < out_elems; ++i) diff += got[i] != want[i];
    std::printf(
        "   INT8 kernel vs conv_int8_reference: %zu of %zu outputs differ; %llu (%.4f %%) "
        "took the double fallback\n",
        diff, out_elems, fb, 100.0 * fb / out_elems);
    // The fast epilogue: only those elements may differ, by one code.
    conv_int8_gpu(a, s, -1, nullptr, Int8Epilogue::fast);
    CUDA_CHECK(cudaStreamSynchronize(s));
    const std::vector<std::int8_t> fast = course::to_host(dy8);
    std::size_t fast_diff = 0, fast_far = 0;
    for (std::size_t i = 0; i < out_elems; ++i) {
      fast_diff += fast[i] != want[i];
      fast_far += std::abs(fast[i] - want[i]) > 1;
    }
    std::printf(
        "   fast epilogue (no certificate) vs conv_int8_reference: %zu of %zu differ, "
        "%zu by more than one code\n",
        fast_diff, out_elems, fast_far);
  }
  std::printf("   %-52s %12s %13s %7s\n", "kernel", "GPU time", "", "vs FP16");
  std::vector<Row> int8_rows;
  const std::vector<Int8ConvTile>& tiles = int8_conv_tiles();
  // The wgmma path where conv_int8_gpu can take it (a 1x1 layer on compute capability 9.0): its
  // tiles too, and the automatic choice is one of them where int8_wgmma_pays.
  const bool wgmma = int8_wgmma_eligible(a) && int8_wgmma_available();
  const bool wgmma_chosen = wgmma && int8_wgmma_pays(a, sm_count);  // the "(automatic)" mark
  const int auto_tile = wgmma_chosen ? -1 : int8_conv_auto_tile(a, sm_count);
  const int auto_wgmma = wgmma_chosen ? int8_wgmma_auto_tile(a) : -1;
  const auto time_tiles = [&](const std::vector<Int8ConvTile>& list, Int8ConvPath path,
                              int automatic, Int8Epilogue e) {
    for (int t = 0; t < static_cast<int>(list.size()); ++t) {
      const double ms =
          course::measure(
              s, o.reps, [&] { conv_int8_gpu(a, s, t, nullptr, e, path); }, course::L2::warm, false)
              .gpu_ms;
      int8_rows.push_back({std::string("INT8 ") + list[t].name +
                               (e == Int8Epilogue::exact ? ", exact" : ", fast") +
                               (t == automatic ? " (automatic)" : ""),
                           ms * 1e3});
    }
  };
  for (const Int8Epilogue e : {Int8Epilogue::exact, Int8Epilogue::fast}) {
    time_tiles(tiles, Int8ConvPath::mma_sync, auto_tile, e);
    if (wgmma) time_tiles(int8_wgmma_tiles(), Int8ConvPath::wgmma, auto_wgmma, e);
  }

  // ---- FP8 E4M3 (compute capability 8.9+): the same layer with E4M3 codes (activations drawn
  // from [-1, 2] at scale 2 / 448, the layer's weights per output channel), FP8 output; the
  // result compared with conv_fp8_reference first (batch 1), every tile timed.
  int dev = 0, cc_major = 0, cc_minor = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&cc_minor, cudaDevAttrComputeCapabilityMinor, dev));
  if (cc_major * 10 + cc_minor >= 89) {
    const Fp8Weights wf = quantize_fp8_e4m3_weights(op.weight, N);
    std::uniform_real_distribution<float> uf(-1.0f, 2.0f);
    const float fx_scale = fp8_e4m3_scale(2.0);
    std::vector<std::uint8_t> xf(in_elems), rf(out_elems);
    for (std::uint8_t& v : xf) v = quantize_fp8_e4m3(uf(rng), fx_scale);
    for (std::uint8_t& v : rf) v = quantize_fp8_e4m3(uf(rng), fx_scale);
    course::DeviceBuffer<std::uint8_t> dxf = course::to_device(xf), dwf = course::to_device(wf.q);
    course::DeviceBuffer<std::uint8_t> drf = course::to_device(rf), dyf(out_elems);
    course::DeviceBuffer<float> dwsf = course::to_device(wf.scale);
    Fp8ConvArgs f{};
    f.x = dxf.data();
    f.w = dwf.data();
    f.bias = dbias.data();
    f.res = op.has_residual ? drf.data() : nullptr;
    f.y = dyf.data();
    f.x_stride = C;
    f.res_stride = N;
    f.y_stride = N;
    lesson12::set_conv_geometry(op, batch, f);
    f.x_scale = fx_scale;
    f.w_scale = dwsf.data();
    f.res_scale = fx_scale;
    f.y_scale = fp8_e4m3_scale(6.0);
    f.y_type = Fp8ConvOutput::fp8;
    if (batch == 1) {
      conv_fp8_gpu(f, s);
      CUDA_CHECK(cudaStreamSynchronize(s));
      const std::vector<std::uint8_t> got = course::to_host(dyf);
      std::vector<std::uint8_t> want(out_elems);
      Fp8ConvArgs h = f;
      h.x = xf.data();
      h.w = wf.q.data();
      h.bias = op.bias.data();
      h.res = op.has_residual ? rf.data() : nullptr;
      h.y = want.data();
      h.w_scale = wf.scale.data();
      conv_fp8_reference(h);
      std::size_t diff = 0, far = 0;
      for (std::size_t i = 0; i < out_elems; ++i) {
        diff += got[i] != want[i];
        // E4M3 codes of one sign are ordered like their values: one step = a code apart.
        far += got[i] != want[i] && ((got[i] ^ want[i]) & 0x80u || std::abs(got[i] - want[i]) > 1);
      }
      std::printf(
          "   FP8 kernel vs conv_fp8_reference: %zu of %zu outputs differ (the tensor core's "
          "accumulation), %zu by more than one E4M3 step\n",
          diff, out_elems, far);
    }
    for (int t = 0; t < static_cast<int>(tiles.size()); ++t) {
      const double ms = course::measure(
                            s, o.reps, [&] { conv_fp8_gpu(f, s, t); }, course::L2::warm, false)
                            .gpu_ms;
      int8_rows.push_back({std::string("FP8 E4M3 ") + tiles[t].name, ms * 1e3});
    }
  }

  // ---- FP16: lesson 12's kernels on the same layer (random FP16 activations).
  std::vector<__half> x16(in_elems), w16(op.weight.size()), r16(out_elems);
  std::uniform_real_distribution<float> u(-1.0f, 2.0f);
  for (__half& v : x16) v = __float2half_rn(u(rng));
  for (__half& v : r16) v = __float2half_rn(u(rng));
  for (std::size_t i = 0; i < w16.size(); ++i) w16[i] = __float2half_rn(op.weight[i]);
  course::DeviceBuffer<__half> dx16 = course::to_device(x16), dw16 = course::to_device(w16);
  course::DeviceBuffer<__half> dr16 = course::to_device(r16), dy16(out_elems);
  lesson12::ConvArgs c{};
  c.x = dx16.data();
  c.w = dw16.data();
  c.bias = dbias.data();
  c.res = op.has_residual ? dr16.data() : nullptr;
  c.y = dy16.data();
  c.x_stride = C;
  c.res_stride = N;
  c.y_stride = N;
  lesson12::set_conv_geometry(op, batch, c);
  const Row fp16_best = fastest_fp16(lib, c, false, o, s);

  // ---- cuBLASLt INT8 GEMM of the same shape, contiguous operands.
  std::vector<Row> lt_rows;
  if (N % 4 == 0 && K % 4 == 0 && M <= 0x7fffffffLL) {
    const std::vector<std::int8_t> A = random_int8(static_cast<std::size_t>(M) * K, rng);
    course::DeviceBuffer<std::int8_t> dA = course::to_device(A);
    course::DeviceBuffer<std::int32_t> dC32(out_elems);
    for (auto out : {CublasLtInt8Gemm::Output::int32, CublasLtInt8Gemm::Output::int8}) {
      const bool i8 = out == CublasLtInt8Gemm::Output::int8;
      try {
        CublasLtInt8Gemm gemm(static_cast<int>(M), N, K, out, 1.0f / 4096);
        void* C_ptr = i8 ? static_cast<void*>(dy8.data()) : static_cast<void*>(dC32.data());
        const double ms = course::measure(
                              s, o.reps, [&] { gemm.run(dA.data(), dw8.data(), C_ptr, s); },
                              course::L2::warm, false)
                              .gpu_ms;
        lt_rows.push_back({std::string("cuBLASLt INT8 GEMM, ") + (i8 ? "int8 out" : "int32 out") +
                               (kk > 1 ? ", no gather" : ""),
                           ms * 1e3});
      } catch (const std::exception& e) {
        std::printf("   cuBLASLt INT8 GEMM (%s output): %s\n", i8 ? "int8" : "int32", e.what());
      }
    }
  }
  print_row(fp16_best, macs, fp16_best.us);
  double int8_best = 0;
  for (const Row& r : int8_rows) {
    print_row(r, macs, fp16_best.us);
    const bool exact = r.what.find(", exact") != std::string::npos;
    if (exact && (int8_best == 0 || r.us < int8_best)) int8_best = r.us;
  }
  for (const Row& r : lt_rows) print_row(r, macs, fp16_best.us);
  return {int8_best, fp16_best.us};
}

// The first layer at one batch: lesson 12's FP16 first-layer kernels (they read the float NCHW
// input), conv_int8_image_gpu (quantises the float input itself), and the unfused INT8 path (a
// kernel quantising the input into 16 channels, then the tensor-core kernel), each epilogue.
// Random images in [0, 1]; the layer's own weights (INT8 per output channel). The INT8 output
// is first checked against conv_int8_reference on the codes quantize_int8 gives on the host.
void time_first_layer(const lesson12::FusedOp& op, int batch, const Options& o,
                      lesson12::KernelLibrary& lib, int sm_count, cudaStream_t s) {
  const int in_h = op.input.h, in_w = op.input.w, C = op.in_channels, N = op.out_channels;
  const long long M = static_cast<long long>(batch) * op.output.h * op.output.w;
  const double macs = static_cast<double>(M) * N * op.kernel * op.kernel * C;
  std::printf("\n   %s, batch %d: M = %lld pixels, N = %d channels, K = %d; %.3f G multiply-adds\n",
              lesson12::describe(op).c_str(), batch, M, N, op.kernel * op.kernel * C, macs / 1e9);
  std::mt19937 rng(1314);
  const std::size_t plane = static_cast<std::size_t>(in_h) * in_w;
  const std::size_t out_elems = static_cast<std::size_t>(M) * N;
  std::vector<float> images(static_cast<std::size_t>(batch) * C * plane);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  for (float& v : images) v = unit(rng);
  const PerChannelInt8 wq = quantize_int8_per_channel(op.weight, N);
  course::DeviceBuffer<float> dimages = course::to_device(images),
                              dbias = course::to_device(op.bias);
  course::DeviceBuffer<float> dws = course::to_device(wq.scale);
  course::DeviceBuffer<std::int8_t> dw = course::to_device(wq.q), dy(out_elems);
  Int8ImageConvArgs ia{};
  ia.images = dimages.data();
  Int8ConvArgs& a = ia.conv;
  lesson12::set_conv_geometry(op, batch, a);
  a.w = dw.data();
  a.bias = dbias.data();
  a.y = dy.data();
  a.y_stride = N;
  a.x_scale = 1.0f / 127.0f;
  a.w_scale = dws.data();
  a.y_scale = 6.0f / 127.0f;
  a.y_type = Int8ConvOutput::int8;
  if (batch == 1) {
    conv_int8_image_gpu(ia, s);
    CUDA_CHECK(cudaStreamSynchronize(s));
    const std::vector<std::int8_t> got = course::to_host(dy);
    std::vector<std::int8_t> codes(static_cast<std::size_t>(batch) * plane * C), want(out_elems);
    for (int n = 0; n < batch; ++n)
      for (int c = 0; c < C; ++c)
        for (std::size_t i = 0; i < plane; ++i)
          codes[(n * plane + i) * C + c] =
              quantize_int8(images[(static_cast<std::size_t>(n) * C + c) * plane + i], a.x_scale);
    Int8ConvArgs h = a;
    h.x = codes.data();
    h.x_stride = C;
    h.w = wq.q.data();
    h.bias = op.bias.data();
    h.w_scale = wq.scale.data();
    h.y = want.data();
    conv_int8_reference(h);
    std::size_t diff = 0;
    for (std::size_t i = 0; i < out_elems; ++i) diff += got[i] != want[i];
    std::printf("   INT8 first-layer kernel vs conv_int8_reference: %zu of %zu outputs differ\n",
                diff, out_elems);
  }
  std::printf("   %-52s %12s %13s %7s\n", "kernel", "GPU time", "", "vs FP16");
  const auto measure_us = [&](auto&& launch) {
    return course::measure(s, o.reps, launch, course::L2::warm, false).gpu_ms * 1e3;
  };
  // FP16: lesson 12's first-layer kernels, the fastest of them.
  std::vector<__half> w16(op.weight.size());
  for (std::size_t i = 0; i < w16.size(); ++i) w16[i] = __float2half_rn(op.weight[i]);
  course::DeviceBuffer<__half> dw16 = course::to_device(w16), dy16(out_elems);
  lesson12::ConvArgs c{};
  c.x = dimages.data();
  c.w = dw16.data();
  c.bias = dbias.data();
  c.y = dy16.data();
  c.y_stride = N;
  lesson12::set_conv_geometry(op, batch, c);
  const Row fp16_best = fastest_fp16(lib, c, true, o, s);
  if (fp16_best.us > 0) print_row(fp16_best, macs, fp16_best.us);
  // The unfused INT8 path: 16 padded channels of codes, weights padded alike.
  constexpr int kPad = 16;
  const int taps = op.kernel * op.kernel;
  std::vector<std::int8_t> w_pad(static_cast<std::size_t>(N) * taps * kPad, 0);
  for (std::size_t t = 0; t < static_cast<std::size_t>(N) * taps; ++t)
    for (int ch = 0; ch < C; ++ch) w_pad[t * kPad + ch] = wq.q[t * C + ch];
  course::DeviceBuffer<std::int8_t> dw_pad = course::to_device(w_pad);
  course::DeviceBuffer<std::int8_t> dcodes(static_cast<std::size_t>(batch) * plane * kPad);
  detail::QuantizeInputArgs qa{dimages.data(), dcodes.data(),      batch, C, in_h, in_w, kPad,
                               a.x_scale,      BufferStorage::int8};
  Int8ConvArgs u = a;
  u.x = dcodes.data();
  u.x_stride = kPad;
  u.in_c = kPad;
  u.w = dw_pad.data();
  const int tile = int8_conv_auto_tile(u, sm_count);
  for (const Int8Epilogue e : {Int8Epilogue::exact, Int8Epilogue::fast}) {
    const char* en = e == Int8Epilogue::exact ? ", exact" : ", fast";
    print_row({std::string("INT8, quantises the images itself") + en,
               measure_us([&] { conv_int8_image_gpu(ia, s, nullptr, e); })},
              macs, fp16_best.us);
    print_row(
        {std::string("INT8, quantise kernel + tensor core ") + int8_conv_tiles()[tile].name + en,
         measure_us([&] {
           detail::launch_quantize_input(qa, s);
           conv_int8_gpu(u, s, tile, nullptr, e);
         })},
        macs, fp16_best.us);
  }
}

void speed_table(const lesson12::WeightsFile& w, const Options& o) {
  const course::DeviceInfo dev = course::query_device(0);
  std::printf("2. Speed on %s\n", course::summary(dev).c_str());
  if (dev.cc_major < 8) {
    std::printf("   The INT8 tensor-core kernel needs compute capability 8.0 or newer: skipped.\n");
    return;
  }
  CUDA_CHECK(cudaSetDevice(0));
  CUDA_CHECK(cudaFree(nullptr));
  course::Stream stream;
  lesson12::KernelLibrary lib(lesson12::built_kernel_image());
  std::printf("   GPU time per launch, median of %d, L2 warm\n   %s\n", o.reps,
              course::harness_floor_caption(stream.get()).c_str());
  const lesson12::EngineGraph g =
      lesson12::optimize(lesson12::yolov8n(w, lesson12::kInputSize, lesson12::kInputSize));
  std::printf("\n   The first convolution at %dx%d (it reads the float images): %s\n",
              lesson12::kInputSize, lesson12::kInputSize, g.ops.front().name.c_str());
  for (int b : o.batches) time_first_layer(g.ops.front(), b, o, lib, dev.sm_count, stream.get());
  for (int kernel : {1, 3}) {
    const lesson12::FusedOp* op = largest_conv(g, kernel);
    if (op == nullptr) continue;
    std::printf("\n   The largest %dx%d convolution at %dx%d: %s\n", kernel, kernel,
                lesson12::kInputSize, lesson12::kInputSize, op->name.c_str());
    for (int b : o.batches) {
      const auto t = time_layer(*op, b, o, lib, dev.sm_count, stream.get());
      if (b == o.batches.front()) {
        course::add_headline("%dx%d %s batch %d: INT8 exact %.1f us vs FP16 %.1f us", kernel,
                             kernel, op->name.c_str(), b, t.first, t.second);
      }
    }
  }
}

// ------------------------------------------------------------------ 4. the INT8 engine (GPU)

constexpr int kEngineMaxBatch = 32;

// The fallback list of the mixed engine: the first layer (it reads the float input) and the
// convolutions whose logits the decode reads (the head's last ones).
std::vector<std::string> first_and_head_ops(const lesson12::EngineGraph& g) {
  std::vector<std::string> names{g.ops.front().name};
  for (const lesson12::FusedOp& op : g.ops) {
    if (op.kind == lesson12::OpKind::conv && op.act == lesson12::Activation::none &&
        op.name.rfind("model.22.", 0) == 0)
      names.push_back(op.name);
  }
  return names;
}

// GPU time of one inference of `batch` images (every launch of it on one stream, queued behind
// the held stream: launch latency excluded), L2 warm, median of `reps`, in microseconds.
template <class F>
double time_us(cudaStream_t s, int reps, F&& enqueue) {
  return course::measure(s, reps, enqueue, course::L2::warm, false).gpu_ms * 1e3;
}

// Calibration at the serving size, on the GPU: an engine with every op in FP32 (the fallback
// path on lesson 12's FP32 kernels; `table` only passes the constructor's check, no scale is
// used) run on `count` held-out scenes from kHeldOutSeed, every buffer read back into its
// observer. What observe_engine_graph does with the CPU reference, at a size the CPU reference
// would take minutes for.
std::vector<TensorObservation> observe_on_gpu(const lesson12::EngineGraph& g,
                                              const CalibrationTable& table, const std::string& id,
                                              int count, cudaStream_t s) {
  QuantizedEngineConfig qc;
  qc.fallback = lesson12::DType::f32;
  for (const lesson12::FusedOp& op : g.ops)
    if (op.kind != lesson12::OpKind::detect) qc.keep.push_back(op.name);
  QuantizedEngine f32(g, table, id, qc);
  const std::vector<std::string> names = calibration_tensor_names(g);
  std::vector<TensorObservation> obs;
  for (const std::string& n : names) obs.push_back({n, ActivationObserver()});
  const auto images = calibration_images(kHeldOutSeed, count, g.input_w, g.input_h);
  course::DeviceBuffer<float> x(images.front().size()),
      y(static_cast<std::size_t>(4 + g.num_classes) * g.num_candidates);
  for (const std::vector<float>& im : images) {
    CUDA_CHECK(cudaMemcpy(x.data(), im.data(), im.size() * sizeof(float), cudaMemcpyHostToDevice));
    f32.enqueue(x.data(), 1, y.data(), s);
    CUDA_CHECK(cudaStreamSynchronize(s));
    obs[0].observer.observe(im);
    for (std::size_t b = 0; b < g.buffers.size(); ++b)
      obs[b + 1].observer.observe(f32.read_buffer(static_cast<int>(b), 1).values);
  }
  return obs;
}

// The GPU engine's times at batch kEngineMaxBatch the sensitivity section compares with.
struct EngineTimes {
  double fp16 = 0, int8_all = 0, int8_hand = 0;  // every op INT8; first layer and head FP16
};

// --engine --sensitivity: each convolution alone in INT8 (the min-max table at the serving size,
// exact epilogue, every other op in FP16 through lesson 12's kernels, the reformats the engine
// needs at the two boundaries), scored on the held-out scenes against the FP32 engine `ref`; the
// ten costliest by mAP@0.5:0.95 against the FP16 engine's `a16`. Then the fallback list chosen
// from the table rather than by hand: the costliest layers in FP16, as many as the hand-picked
// list `hand` names, its accuracy and its GPU time at batch kEngineMaxBatch.
void engine_sensitivity(const lesson12::EngineGraph& g, const CalibrationTable& table,
                        const std::string& id, const std::vector<std::string>& hand,
                        const Accuracy& a16, const HeldOutScenes& scenes,
                        const SceneDetections& ref,
                        const std::function<NetworkFn(QuantizedEngine&)>& int8_fn, cudaStream_t s,
                        int reps, const float* x, float* y, const EngineTimes& times) {
  std::printf(
      "   Sensitivity at %dx%d: each convolution alone in INT8 (min-max table, exact epilogue),\n"
      "   every other op FP16; its cost against the FP16 engine (mAP@0.5 %.4f, mAP@0.5:0.95 "
      "%.4f);\n   the ten costliest, then the total\n\n",
      g.input_w, g.input_h, a16.map50, a16.map50_95);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<LayerSensitivity> rows;
  for (const lesson12::FusedOp& op : g.ops) {
    if (op.kind != lesson12::OpKind::conv) continue;
    QuantizedEngineConfig c;
    for (const lesson12::FusedOp& other : g.ops)
      if (other.kind != lesson12::OpKind::detect && other.name != op.name)
        c.keep.push_back(other.name);
    QuantizedEngine q(g, table, id, c);
    rows.push_back({op.name, score_detections(detect_scenes(int8_fn(q), scenes, g.num_classes),
                                              scenes, g.num_classes, &ref)});
  }
  print_costliest(rows, a16);
  int no_cost = 0;
  for (const LayerSensitivity& r : rows) no_cost += r.accuracy.map50_95 >= a16.map50_95;
  std::printf("   %zu layers; %d cost nothing in mAP@0.5:0.95 (%.1f s)\n\n", rows.size(), no_cost,
              seconds_since(t0));

  // The fallback list from the table: the len(hand) costliest layers.
  std::vector<std::string> chosen;
  for (std::size_t i = 0; i < rows.size() && i < hand.size(); ++i) chosen.push_back(rows[i].op);
  QuantizedEngineConfig c;
  c.keep = chosen;
  c.max_batch = kEngineMaxBatch;
  QuantizedEngine q(g, table, id, c);
  const Accuracy a = score_detections(detect_scenes(int8_fn(q), scenes, g.num_classes), scenes,
                                      g.num_classes, &ref);
  const double us = time_us(s, reps, [&] { q.enqueue(x, kEngineMaxBatch, y, s); });
  std::string list;
  for (const std::string& n : chosen) list += (list.empty() ? "" : ", ") + n;
  std::printf(
      "   INT8 min-max with the %zu costliest layers in FP16 (%s):\n"
      "   mAP@0.5 %.4f, mAP@0.5:0.95 %.4f, changed %d/%d; %d reformats; batch %d: %.1f us\n"
      "   (FP16 %.1f, INT8 every op %.1f, first layer and head FP16 %.1f: same run, exact "
      "epilogue)\n\n",
      chosen.size(), list.c_str(), a.map50, a.map50_95, a.changed, a.frames, q.reformat_launches(),
      kEngineMaxBatch, us, times.fp16, times.int8_all, times.int8_hand);
}

void engine_table(const lesson12::WeightsFile& w, const Options& o,
                  const std::vector<TensorObservation>& obs) {
  const course::DeviceInfo dev = course::query_device(0);
  const int S = lesson12::kInputSize;
  std::printf("4. The INT8 engine at %dx%d on %s\n", S, S, course::summary(dev).c_str());
  if (dev.cc_major < 8) {
    std::printf("   The INT8 tensor-core kernel needs compute capability 8.0 or newer: skipped.\n");
    return;
  }
  CUDA_CHECK(cudaSetDevice(0));
  CUDA_CHECK(cudaFree(nullptr));
  course::Stream stream;
  const cudaStream_t s = stream.get();
  const lesson12::NetworkDefinition net = lesson12::yolov8n(w, S, S);
  const lesson12::EngineGraph g = lesson12::optimize(net);
  const std::string id = network_id(w.model, g);  // the input size is not part of it
  const CalibrationTable small_table =
      make_calibration_table(obs, CalibratorConfig{CalibrationMethod::entropy, 0, 128}, id);
  // The tables at the serving size (8 scenes, seeds from kHeldOutSeed as in part 1).
  constexpr int kGpuCalibScenes = 8;
  const std::vector<TensorObservation> obs640 =
      observe_on_gpu(g, small_table, id, kGpuCalibScenes, s);
  const CalibrationTable entropy640 =
      make_calibration_table(obs640, CalibratorConfig{CalibrationMethod::entropy, 0, 128}, id);
  const CalibrationTable minmax640 =
      make_calibration_table(obs640, CalibratorConfig{CalibrationMethod::min_max, 0, 128}, id);
  const CalibrationTable p9999_640 = make_calibration_table(
      obs640, CalibratorConfig{CalibrationMethod::percentile, 99.99, 128}, id);
  std::printf(
      "   tables: entropy-128 from part 1 (%dx%d scenes, CPU reference), and min-max, percentile\n"
      "   99.99 and entropy-128 from %d scenes at %dx%d (seeds %llu.., every buffer of an FP32 "
      "run\n"
      "   of the engine read back); lesson 12's builder for FP16 (opt batch 1 and %d) and FP32\n",
      kCalibW, kCalibH, kGpuCalibScenes, S, S, static_cast<unsigned long long>(kHeldOutSeed),
      kEngineMaxBatch);
  lesson12::BuilderConfig cfg;
  cfg.precision = lesson12::DType::f16;
  cfg.profile = {1, 1, kEngineMaxBatch};
  const auto e16_1 = lesson12::Engine::deserialize(lesson12::build_plan(net, cfg));
  cfg.profile = {1, kEngineMaxBatch, kEngineMaxBatch};
  lesson12::BuildReport report16;
  const auto e16 = lesson12::Engine::deserialize(lesson12::build_plan(net, cfg, &report16));
  cfg.precision = lesson12::DType::f32;
  cfg.profile = {1, 1, kEngineMaxBatch};
  cfg.timing_iterations = 3;
  const auto e32 = lesson12::Engine::deserialize(lesson12::build_plan(net, cfg));
  QuantizedEngineConfig qc;
  qc.max_batch = kEngineMaxBatch;
  QuantizedEngine q8(g, entropy640, id, qc);
  qc.epilogue = Int8Epilogue::fast;
  QuantizedEngine q8x(g, entropy640, id, qc);
  qc.fuse_input = false;  // the input quantised by a kernel of its own, into 16 channels
  QuantizedEngine q8u(g, entropy640, id, qc);
  qc.fuse_input = true;
  qc.epilogue = Int8Epilogue::exact;
  qc.keep = first_and_head_ops(g);
  QuantizedEngine q8f(g, entropy640, id, qc);
  std::printf("   %s\n   %s\n", q8.describe().c_str(), q8f.describe().c_str());
  // The FP8 E4M3 engine (every op FP8, min-max table: max scaling is FP8's usual recipe,
  // fake_quant.hpp) needs compute capability 8.9 for its tensor-core convolution.
  const bool fp8 = dev.cc_major * 10 + dev.cc_minor >= 89;
  std::unique_ptr<QuantizedEngine> q8e;
  if (fp8) {
    QuantizedEngineConfig ec;
    ec.precision = QuantPrecision::fp8_e4m3;
    ec.max_batch = kEngineMaxBatch;
    q8e = std::make_unique<QuantizedEngine>(g, minmax640, id, ec);
    std::printf("   %s\n", q8e->describe().c_str());
  } else {
    std::printf("   FP8 E4M3 engine: needs compute capability 8.9 or newer; left out\n");
  }

  // ---- speed: every engine on one stream (lesson 12's without auxiliary streams), no graph.
  std::printf(
      "\n   GPU time of one inference (all its launches on one stream, queued behind a held "
      "stream:\n   launch latency excluded), L2 warm, median of %d; lesson 12's FP16 engine "
      "without auxiliary\n   streams, so that both run one launch after another, built for the "
      "batch it runs\n   %s\n",
      o.reps, course::harness_floor_caption(s).c_str());
  std::printf("   %-44s %7s %12s %12s %9s\n", "engine", "batch", "us / batch", "us / image",
              "vs FP16");
  const std::size_t in_per_image = 3ull * S * S;
  const std::size_t out_per_image = static_cast<std::size_t>(4 + g.num_classes) * g.num_candidates;
  course::DeviceBuffer<float> x(in_per_image * kEngineMaxBatch), y(out_per_image * kEngineMaxBatch);
  {
    // Scene 0 in every slot: real activations (all-zero inputs would leave the INT8 path's
    // values near zero).
    const std::vector<float> img = lesson12::scene_input(0, S, S);
    for (int b = 0; b < kEngineMaxBatch; ++b) {
      CUDA_CHECK(cudaMemcpy(x.data() + in_per_image * b, img.data(), in_per_image * sizeof(float),
                            cudaMemcpyHostToDevice));
    }
  }
  double int8_us_1 = 0, fp16_us_1 = 0, fp16_us_32 = 0, int8_us_32 = 0, hand_us_32 = 0;
  for (int batch : {1, kEngineMaxBatch}) {
    auto ctx = (batch == 1 ? e16_1 : e16)->create_execution_context();
    ctx->set_aux_streams(0);
    ctx->set_input_shape(batch);
    ctx->set_tensor_address("images", x.data());
    ctx->set_tensor_address("output0", y.data());
    const double t16 = time_us(s, o.reps, [&] { ctx->enqueue(s); });
    const double t8 = time_us(s, o.reps, [&] { q8.enqueue(x.data(), batch, y.data(), s); });
    const double t8f = time_us(s, o.reps, [&] { q8f.enqueue(x.data(), batch, y.data(), s); });
    const double t8x = time_us(s, o.reps, [&] { q8x.enqueue(x.data(), batch, y.data(), s); });
    const double t8u = time_us(s, o.reps, [&] { q8u.enqueue(x.data(), batch, y.data(), s); });
    const double t8e =
        q8e ? time_us(s, o.reps, [&] { q8e->enqueue(x.data(), batch, y.data(), s); }) : 0.0;
    const auto row = [&](const std::string& what, double us) {
      std::printf("   %-44s %7d %12.1f %12.2f %8.2fx\n", what.c_str(), batch, us, us / batch,
                  t16 / us);
    };
    row("FP16 (lesson 12)", t16);
    row("INT8, every op", t8);
    row("INT8, every op, fast epilogue", t8x);
    row("  the same, input quantised by its own kernel", t8u);
    if (q8e) row("FP8 E4M3, every op (min-max table)", t8e);
    row("INT8, " + std::to_string(qc.keep.size()) + " ops FP16 (" +
            std::to_string(q8f.reformat_launches()) + " reformats)",
        t8f);
    if (batch == 1) int8_us_1 = t8, fp16_us_1 = t16;
    if (batch == kEngineMaxBatch) fp16_us_32 = t16, int8_us_32 = t8, hand_us_32 = t8f;
  }

  // ---- where the time goes at batch 32: each INT8 launch timed on its own, beside the FP16
  // builder's time for the same layer (its chosen tactic at batch 32, from the build report).
  {
    std::vector<LaunchTime> t = q8.profile(x.data(), kEngineMaxBatch, y.data(), s);
    double total = 0;
    for (const LaunchTime& l : t) total += l.us;
    std::sort(t.begin(), t.end(),
              [](const LaunchTime& a, const LaunchTime& b) { return a.us > b.us; });
    std::printf(
        "\n   INT8 engine (every op), batch %d: the 12 slowest of %zu launches, each timed alone\n"
        "   (events around it; sum %.0f us), beside lesson 12's FP16 time for that layer (its\n"
        "   builder's chosen tactic at batch %d)\n",
        kEngineMaxBatch, t.size(), total, kEngineMaxBatch);
    std::printf("   %-62s %10s %10s\n", "launch", "INT8 us", "FP16 us");
    for (std::size_t i = 0; i < t.size() && i < 12; ++i) {
      double fp16 = 0;
      for (const lesson12::LayerDecision& d : report16.layers) {
        const std::string key = " " + d.layer + " ";
        if (d.chosen >= 0 && (t[i].launch + " ").find(key) != std::string::npos)
          fp16 = d.candidates[static_cast<std::size_t>(d.chosen)].us;
      }
      if (fp16 > 0)
        std::printf("   %-62s %10.1f %10.1f\n", t[i].launch.substr(0, 62).c_str(), t[i].us, fp16);
      else
        std::printf("   %-62s %10.1f %10s\n", t[i].launch.substr(0, 62).c_str(), t[i].us, "-");
    }
  }

  // ---- accuracy: held-out scenes at 640 x 640, one image at a time.
  std::printf(
      "\n   Accuracy on %d held-out scenes (seeds 0..%d) at %dx%d; changed: frames whose "
      "deployment\n   detections (conf 0.25, IoU 0.45) differ from FP32's (IoU >= 0.9)\n",
      o.engine_scenes, o.engine_scenes - 1, S, S);
  const HeldOutScenes scenes = held_out_scenes(0, o.engine_scenes, S, S);
  const auto run_one = [&](const std::vector<float>& image, const std::function<void()>& enqueue) {
    CUDA_CHECK(cudaMemcpyAsync(x.data(), image.data(), in_per_image * sizeof(float),
                               cudaMemcpyHostToDevice, s));
    enqueue();
    std::vector<float> out(out_per_image);
    CUDA_CHECK(cudaMemcpyAsync(out.data(), y.data(), out_per_image * sizeof(float),
                               cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    return out;
  };
  const auto lesson12_fn = [&](const lesson12::Engine& e) {
    std::shared_ptr<lesson12::ExecutionContext> ctx = e.create_execution_context();
    ctx->set_input_shape(1);
    ctx->set_tensor_address("images", x.data());
    ctx->set_tensor_address("output0", y.data());
    return NetworkFn(
        [&, ctx](const std::vector<float>& im) { return run_one(im, [&] { ctx->enqueue(s); }); });
  };
  const auto int8_fn = [&](QuantizedEngine& e) {
    QuantizedEngine* engine = &e;
    return NetworkFn([&, engine](const std::vector<float>& im) {
      return run_one(im, [&] { engine->enqueue(x.data(), 1, y.data(), s); });
    });
  };
  const SceneDetections ref = detect_scenes(lesson12_fn(*e32), scenes, g.num_classes);
  std::printf("   %-52s %8s %13s %10s\n", "engine", "mAP@0.5", "mAP@0.5:0.95", "changed");
  const auto print = [&](const std::string& what, const SceneDetections& d) {
    const Accuracy a = score_detections(d, scenes, g.num_classes, &ref);
    std::printf("   %-52s %8.4f %13.4f %6d/%d\n", what.c_str(), a.map50, a.map50_95, a.changed,
                a.frames);
    return a;
  };
  print("FP32 (lesson 12)", ref);
  const Accuracy a16 =
      print("FP16 (lesson 12)", detect_scenes(lesson12_fn(*e16_1), scenes, g.num_classes));
  const auto int8_row = [&](const std::string& what, const CalibrationTable& t,
                            const std::vector<std::string>& keep, Int8Epilogue e) {
    QuantizedEngineConfig c;
    c.keep = keep;
    c.epilogue = e;
    QuantizedEngine q(g, t, id, c);
    return print(what, detect_scenes(int8_fn(q), scenes, g.num_classes));
  };
  const std::string at640 = ", " + std::to_string(S) + "x" + std::to_string(S) + " table";
  const std::vector<std::string> none, fh = first_and_head_ops(g);
  int8_row("INT8 entropy, " + std::to_string(kCalibW) + "x" + std::to_string(kCalibH) + " table",
           small_table, none, Int8Epilogue::exact);
  int8_row("INT8 min-max" + at640, minmax640, none, Int8Epilogue::exact);
  int8_row("INT8 percentile 99.99" + at640, p9999_640, none, Int8Epilogue::exact);
  const Accuracy a8 = int8_row("INT8 entropy" + at640, entropy640, none, Int8Epilogue::exact);
  int8_row("INT8 entropy" + at640 + ", fast epilogue", entropy640, none, Int8Epilogue::fast);
  int8_row("INT8 entropy" + at640 + ", first layer, head FP16", entropy640, fh,
           Int8Epilogue::exact);
  int8_row("INT8 min-max" + at640 + ", first layer, head FP16", minmax640, fh, Int8Epilogue::exact);
  if (fp8) {
    const auto fp8_row = [&](const std::string& what, const CalibrationTable& t) {
      QuantizedEngineConfig c;
      c.precision = QuantPrecision::fp8_e4m3;
      QuantizedEngine q(g, t, id, c);
      return print(what, detect_scenes(int8_fn(q), scenes, g.num_classes));
    };
    fp8_row("FP8 E4M3 min-max" + at640, minmax640);
    fp8_row("FP8 E4M3 entropy" + at640, entropy640);
  }
  std::printf("\n");
  if (o.sensitivity) {
    engine_sensitivity(g, minmax640, id, fh, a16, scenes, ref, int8_fn, s, o.reps, x.data(),
                       y.data(), {fp16_us_32, int8_us_32, hand_us_32});
  }
  course::add_headline("INT8 engine %dx%d batch 1: %.1f us vs FP16 %.1f us; mAP@0.5:0.95 %.4f", S,
                       S, int8_us_1, fp16_us_1, a8.map50_95);
}

int run(const Options& o) {
  std::printf("Lesson 13: INT8 quantisation of lesson 12's detector\n\n");
  const lesson12::WeightsFile w = lesson12::read_weights(o.weights);
  const std::vector<TensorObservation> obs = calibration_summary(w, o);
  if (o.engine) {
    std::printf("2. and 3.: skipped (--engine)\n\n");
    const course::DeviceAvailability avail = course::check_device_available();
    if (!avail.usable) {
      std::printf("4. The INT8 engine: needs a GPU; none here: %s\n", avail.reason.c_str());
      course::add_headline("calibration only (no GPU: --engine needs one)");
    } else {
      engine_table(w, o, obs);
    }
    course::print_headline();
    return 0;
  }
  if (o.accuracy) {
    std::printf("2. Speed: skipped (--accuracy)\n\n");
    accuracy_table(w, o, obs);
    course::print_headline();
    return 0;
  }
  const course::DeviceAvailability avail = course::check_device_available();
  if (!avail.usable) {
    std::printf(
        "2. Speed: needs a CUDA GPU (compute capability 8.0 or newer for the INT8 "
        "kernel); none here: %s\n   The timing table was not measured.\n",
        avail.reason.c_str());
    course::add_headline("calibration only (no GPU: the speed table needs one)");
    course::print_headline();
    return 0;
  }
  speed_table(w, o);
  course::print_headline();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{
      "Lesson 13: INT8 quantisation of lesson 12's detector: calibration on the CPU, "
      "the INT8 tensor-core convolution against FP16 and cuBLASLt on the GPU"};
  app.add_option("--weights", o.weights, "lesson 12's weights file (default: the trained one)");
  app.add_option("--scenes", o.scenes, "held-out scenes to calibrate on (default 4)")
      ->check(course::integer_in(1, 64));
  app.add_option("--batch", o.batches,
                 "batch size of the speed table (repeat for several; "
                 "default 1 and 16)")
      ->check(course::integer_in(1, 64));
  app.add_option("--reps", o.reps, "timed runs per kernel, median reported (default 9)")
      ->check(course::integer_in(1, 1000));
  CLI::Option* accuracy =
      app.add_flag("--accuracy", o.accuracy,
                   "instead of the speed table: mAP of FP32, INT8 (each calibrator, per-channel "
                   "and per-tensor weights) and FP8 by simulated quantisation on the CPU, 128x96 "
                   "scenes");
  app.add_option("--eval-scenes", o.eval_scenes,
                 "held-out scenes for --accuracy (seeds 0..N-1; default 64)")
      ->check(course::integer_in(1, 500));
  app.add_option("--threads", o.threads, "CPU threads for --accuracy (default 1)")
      ->check(course::integer_in(1, 256));
  app.add_flag(
      "--sensitivity", o.sensitivity,
      "with --accuracy (CPU, small input) or --engine (GPU, 640x640): each convolution alone in "
      "INT8, the costliest layers; with --engine also a fallback list chosen from them");
  app.callback([&] {
    if (o.sensitivity && !o.accuracy && !o.engine)
      throw CLI::ValidationError("--sensitivity", "needs --accuracy or --engine");
  });
  app.add_flag("--engine", o.engine,
               "instead of parts 2 and 3 (GPU): the INT8 and FP8 engines at 640x640 against "
               "lesson 12's FP16 and FP32 engines: GPU time at batch 1 and 32, mAP on held-out "
               "scenes")
      ->excludes(accuracy);
  app.add_option("--engine-scenes", o.engine_scenes,
                 "held-out scenes for --engine's mAP (seeds 0..N-1; default 100)")
      ->check(course::integer_in(1, 1000));
  // The body checks for a GPU itself: the calibration part runs without one.
  return course::lesson_main(
      app, argc, argv, [&] { return run(o); }, course::DeviceCheck::none);
}
