// Lesson 12: the engine. A real detector, built and run the way TensorRT builds and runs one.
//
//   lesson12 [--weights PATH] [--plan PATH] [--max-batch N] [--frames N] [--reps N]
//
// 1. the network: the weights file, the definition a parser would produce
// 2. the builder's graph passes: BatchNorm folded, epilogues fused, concatenations as views, and
//    the activation memory planned by liveness
// 3. tactic selection: every layer's candidate kernels timed, the fastest kept (the table)
// 4. the plan: written, read back through the Driver API, and the plans it refuses
// 5. correctness: the engine against the CPU reference (FP64 accumulation) and PyTorch's golden
//    output, FP32 and FP16
// 6. accuracy: mAP on held-out scenes, FP32 and FP16 engines; frames whose detections change
// 7. speed: batch 1 and batch 32, stream and CUDA graph, GPU time and end to end; the same
//    network with every convolution on cuDNN
// 8. lesson 09's pipeline serving this network: which stage bounds it now
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "common/cuda_check.hpp"
#include "common/device.hpp"
#include "common/headline.hpp"
#include "common/lesson_main.hpp"
#include "common/memory.hpp"
#include "common/stream.hpp"
#include "common/timing.hpp"
#include "engine.hpp"
#include "schedule.hpp"
#include "evaluate.hpp"
#include "metrics.hpp"
#include "plan.hpp"
#include "serve.hpp"

using namespace lesson12;

namespace {

struct Options {
  std::string weights = std::string(LESSON12_DATA_DIR) + "/yolov8n_scenes.weights";
  std::string plan;  // default: beside the executable
  int max_batch = 32;
  int frames = 200;
  int reps = 7;
  std::int64_t serve_frames = 400;
  bool verbose = false;
};

void write_file(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw std::runtime_error("could not write " + path);
}

std::vector<std::uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("could not open " + path);
  return std::vector<std::uint8_t>((std::istreambuf_iterator<char>(f)),
                                   std::istreambuf_iterator<char>());
}

std::string mib(std::size_t bytes) {
  char s[32];
  std::snprintf(s, sizeof s, "%.1f MiB", bytes / 1048576.0);
  return s;
}

std::vector<float> run_engine_once(const Engine& e, const std::vector<float>& input,
                                   cudaStream_t s) {
  auto ctx = e.create_execution_context();
  const std::size_t out = static_cast<std::size_t>(4 + e.num_classes()) * e.num_candidates();
  course::DeviceBuffer<float> in = course::to_device(input);
  course::DeviceBuffer<float> o(out);
  ctx->set_input_shape(std::max(1, e.profile().min_batch));
  ctx->set_tensor_address("images", in.data());
  ctx->set_tensor_address("output0", o.data());
  ctx->enqueue(s);
  CUDA_CHECK(cudaStreamSynchronize(s));
  return course::to_host(o);
}

struct Speed {
  double gpu_us = 0, e2e_us = 0, b2b_us = 0;
};

// aux: auxiliary streams (ExecutionContext::set_aux_streams); programmatic: PDL, which the
// context uses only on one stream.
Speed time_engine(const Engine& e, int batch, bool graph, int reps, cudaStream_t s, int aux,
                  bool programmatic) {
  auto ctx = e.create_execution_context();
  ctx->set_aux_streams(aux);
  ctx->set_programmatic_launch(programmatic);
  const std::size_t in = 3ull * e.input_h() * e.input_w() * batch;
  const std::size_t out =
      static_cast<std::size_t>(4 + e.num_classes()) * e.num_candidates() * batch;
  course::DeviceBuffer<float> x(in), y(out);
  CUDA_CHECK(cudaMemset(x.data(), 0, x.bytes()));
  ctx->set_input_shape(batch);
  ctx->set_tensor_address("images", x.data());
  ctx->set_tensor_address("output0", y.data());
  auto run = [&] {
    if (graph) {
      ctx->enqueue_graph(s);
    } else {
      ctx->enqueue(s);
    }
  };
  run();
  CUDA_CHECK(cudaStreamSynchronize(s));
  const course::Timing t = course::measure(s, reps, run);
  // PyTorch's method (train/torch_baseline.py): 50 calls back to back between two events, the
  // median of 7 windows: the time per call of a steady stream of calls, host overhead included
  // wherever the GPU has to wait for it.
  std::vector<double> windows;
  course::Event a, b;
  for (int w = 0; w < 7; ++w) {
    a.record(s);
    for (int i = 0; i < 50; ++i) run();
    b.record(s);
    windows.push_back(course::elapsed_ms(a, b) * 1e3 / 50);
  }
  return Speed{t.gpu_ms * 1e3, t.latency_ms * 1e3, course::median(windows)};
}

int run(const Options& o) {
  std::printf("Lesson 12: the engine, on %s\n\n", course::summary(course::query_device(0)).c_str());
  course::Stream stream;

  // ------------------------------------------------------------------ 1. the network
  std::printf("1. The network: %s\n", o.weights.c_str());
  const WeightsFile w = read_weights(o.weights);
  std::size_t params = 0;
  for (const auto& kv : w.tensors) params += kv.second.elements();
  std::printf(
      "   %s, %d classes, reg_max %d, input %dx%d, %zu tensors, %.2f M parameters, "
      "training seed %llu\n",
      w.model.c_str(), w.num_classes, w.reg_max, w.input_h, w.input_w, w.tensors.size(),
      params / 1e6, static_cast<unsigned long long>(w.seed));
  const NetworkDefinition net = yolov8n(w, kInputSize, kInputSize);
  int counts[9] = {};
  for (const Layer& l : net.layers) ++counts[static_cast<int>(l.kind)];
  std::printf(
      "   definition (what a parser hands the builder): %zu layers: %d conv, %d BatchNorm, "
      "%d SiLU, %d add, %d concat, %d slice, %d max pool, %d upsample, %d detect\n\n",
      net.layers.size(), counts[0], counts[1], counts[2], counts[3], counts[4], counts[5],
      counts[6], counts[7], counts[8]);

  // ------------------------------------------------------------------ 2. graph passes
  std::printf("2. The builder's graph passes\n");
  EngineGraph g = optimize(net);
  int convs = 0, with_res = 0, with_silu = 0;
  for (const FusedOp& op : g.ops) {
    if (op.kind != OpKind::conv) continue;
    ++convs;
    with_silu += op.act == Activation::silu;
    with_res += op.has_residual;
  }
  std::printf(
      "   %zu layers -> %zu kernels: %d convolutions (BatchNorm folded into %d, SiLU fused "
      "into %d, residual add fused into %d), concatenations and splits are views of %zu "
      "NHWC buffers\n",
      net.layers.size(), g.ops.size(), convs, counts[1], with_silu, with_res, g.buffers.size());
  const std::vector<int> hold = concurrent_hold_until(g);
  for (int b : {1, o.max_batch}) {
    const std::size_t planned = plan_memory(g, b, 2);
    const std::size_t concurrent = plan_memory(g, b, 2, hold);
    std::printf(
        "   activation memory at batch %2d, FP16: %s planned by liveness (%s letting independent "
        "layers run side by side), %s with a buffer each\n",
        b, mib(planned).c_str(), mib(concurrent).c_str(),
        mib(arena_without_reuse(g, b, 2)).c_str());
  }
  std::printf("\n");

  // ------------------------------------------------------------------ 3. tactics
  std::printf("3. Tactic selection: FP16, profile batch [1, %d], timed at opt batch %d\n",
              o.max_batch, o.max_batch);
  BuilderConfig cfg;
  cfg.precision = DType::f16;
  cfg.profile = {1, o.max_batch, o.max_batch};
  BuildReport rep;
  const std::vector<std::uint8_t> plan32 = build_plan(net, cfg, &rep);
  std::printf("%s", format_tactic_table(rep).c_str());
  std::printf(
      "   built in %.1f s; sum of the chosen tactics %.1f us per batch of %d; plan %s "
      "(weights %s)\n",
      rep.build_seconds, rep.sum_of_chosen_us, o.max_batch, mib(rep.plan_bytes).c_str(),
      mib(rep.weight_bytes).c_str());
  cfg.profile = {1, 1, o.max_batch};
  BuildReport rep1;
  const std::vector<std::uint8_t> plan1 = build_plan(net, cfg, &rep1);
  int differ = 0;
  for (std::size_t i = 0; i < rep1.layers.size(); ++i) {
    const auto& a = rep1.layers[i];
    const auto& b = rep.layers[i];
    differ += a.candidates[a.chosen].tactic != b.candidates[b.chosen].tactic;
  }
  std::printf(
      "   the same network timed at opt batch 1: %d of %zu layers choose another tactic; "
      "sum of the chosen %.1f us\n\n",
      differ, rep1.layers.size(), rep1.sum_of_chosen_us);
  if (o.verbose) {
    std::printf("   the tactic table at opt batch 1 (--verbose):\n%s\n",
                format_tactic_table(rep1).c_str());
  }

  // ------------------------------------------------------------------ 4. the plan
  const std::string plan_path = o.plan.empty() ? "yolov8n_fp16.plan" : o.plan;
  write_file(plan_path, plan32);
  std::printf("4. The plan: %s (%s)\n", plan_path.c_str(), mib(plan32.size()).c_str());
  const std::shared_ptr<Engine> e16 = Engine::deserialize(read_file(plan_path));
  std::printf("   deserialised: %s\n", e16->describe().c_str());
  auto refuse = [](const char* what, std::vector<std::uint8_t> bytes) {
    try {
      Engine::deserialize(bytes);
      std::printf("   %-28s ACCEPTED (wrong)\n", what);
      return false;
    } catch (const PlanError& err) {
      std::printf("   %-28s refused: %s\n", what, err.what());
      return true;
    }
  };
  bool refusals = true;
  refusals &= refuse("truncated (first half):",
                     std::vector<std::uint8_t>(plan32.begin(), plan32.begin() + plan32.size() / 2));
  {
    std::vector<std::uint8_t> bad = plan32;
    bad[bad.size() / 2] ^= 0x10;
    refusals &= refuse("one bit flipped:", bad);
  }
  {
    // The same plan stamped with another compute capability (checksum recomputed): what a
    // plan built on another GPU looks like to this one.
    Plan other = parse_plan(plan32);
    other.cc_major = other.cc_major == 8 ? 9 : 8;
    other.cc_minor = 6;
    other.gpu_name = other.cc_major == 8 ? "NVIDIA GeForce RTX 3090" : "NVIDIA H100";
    refusals &= refuse("built for another GPU:", serialize_plan(other));
  }
  std::printf("\n");

  // ------------------------------------------------------------------ 5. correctness
  std::printf("5. Correctness at 640x640, scene 0: engine vs CPU reference (FP64 accumulation)\n");
  cfg.profile = {1, 1, o.max_batch};
  cfg.precision = DType::f32;
  cfg.timing_iterations = 3;
  const std::shared_ptr<Engine> e32 = Engine::deserialize(build_plan(net, cfg));
  const std::vector<float> x0 = scene_input(0, kInputSize, kInputSize);
  const std::vector<float> ref = run_reference(net, x0);
  bool correct = true;
  for (const auto& [name, eng, cell_tol, score_tol] :
       {std::make_tuple("FP32", e32, 0.01, 1e-3), std::make_tuple("FP16", e16, 0.25, 0.02)}) {
    const std::vector<float> y = run_engine_once(*eng, x0, stream.get());
    const OutputError err = compare_outputs(y, ref, w.num_classes, kInputSize, kInputSize);
    const bool ok = err.max_box_cells <= cell_tol && err.max_score <= score_tol;
    correct &= ok;
    std::printf(
        "   %s engine: scores max |error| %.5f (bound %.3f); boxes of the %d candidates "
        "scoring > 0.1: max |error| %.3f px = %.4f grid cells (bound %.2f): %s\n",
        name, err.max_score, score_tol, err.confident, err.max_box_px, err.max_box_cells, cell_tol,
        ok ? "OK" : "FAILED");
  }
  std::printf("\n");

  // ------------------------------------------------------------------ 6. accuracy
  std::printf(
      "6. Accuracy on %d held-out scenes (seeds 0..%d; mAP as COCO computes it, "
      "conf 0.001, NMS IoU 0.7)\n",
      o.frames, o.frames - 1);
  std::vector<std::vector<SceneBox>> truth;
  const auto det32 = run_detector(*e32, *e32->create_execution_context(), 0, o.frames,
                                  std::min(o.max_batch, 16), eval_config(), stream.get(), &truth);
  const auto det16 = run_detector(*e16, *e16->create_execution_context(), 0, o.frames,
                                  std::min(o.max_batch, 16), eval_config(), stream.get());
  auto map_of = [&](const std::vector<std::vector<lesson08::Detection>>& d) {
    std::vector<FrameEval> f(d.size());
    for (std::size_t i = 0; i < d.size(); ++i) f[i] = FrameEval{truth[i], d[i]};
    return mean_average_precision(f, w.num_classes);
  };
  const MapResult m32 = map_of(det32), m16 = map_of(det16);
  const auto dep32 = run_detector(*e32, *e32->create_execution_context(), 0, o.frames,
                                  std::min(o.max_batch, 16), deploy_config(), stream.get());
  const auto dep16 = run_detector(*e16, *e16->create_execution_context(), 0, o.frames,
                                  std::min(o.max_batch, 16), deploy_config(), stream.get());
  int same = 0;
  for (int i = 0; i < o.frames; ++i) same += same_detections(dep16[i], dep32[i], 0.9f);
  std::printf("   %-12s %9s %13s %11s\n", "engine", "mAP@0.5", "mAP@0.5:0.95", "truth boxes");
  std::printf("   %-12s %9.4f %13.4f %11d\n", "FP32", m32.map50, m32.map50_95, m32.truth_boxes);
  std::printf("   %-12s %9.4f %13.4f %11d\n", "FP16", m16.map50, m16.map50_95, m16.truth_boxes);
  std::printf(
      "   FP16 vs FP32 at conf 0.25, NMS IoU 0.45: the same detections (count, classes, "
      "IoU >= 0.9) on %d of %d frames (%.1f%%)\n\n",
      same, o.frames, 100.0 * same / std::max(1, o.frames));

  // ------------------------------------------------------------------ 7. speed
  std::printf(
      "7. Speed at 640x640 (median of %d; GPU time: launches queued behind a held stream; "
      "end to end: host call to completion)\n",
      o.reps);
  const std::shared_ptr<Engine> e1 = Engine::deserialize(plan1);
  BuilderConfig dnn;
  dnn.precision = DType::f16;
  dnn.tactic_sources = kCudnn;
  std::shared_ptr<Engine> cudnn1, cudnn32;
  if (cudnn_available()) {
    dnn.profile = {1, 1, o.max_batch};
    cudnn1 = Engine::deserialize(build_plan(net, dnn));
    dnn.profile = {1, o.max_batch, o.max_batch};
    cudnn32 = Engine::deserialize(build_plan(net, dnn));
  }
  std::printf("   %s\n", course::harness_floor_caption(stream.get()).c_str());
  std::printf("   %-40s %6s %10s %10s %12s %10s\n", "engine", "batch", "GPU us", "e2e us",
              "b2b us/call", "us/image");
  constexpr int kAux = ExecutionContext::kDefaultAuxStreams;
  auto row = [&](const char* name, const Engine& e, int batch, bool graph,
                 int aux = ExecutionContext::kDefaultAuxStreams, bool pdl = false) {
    const Speed s = time_engine(e, batch, graph, o.reps, stream.get(), aux, pdl);
    std::printf("   %-40s %6d %10.1f %10.1f %12.1f %10.1f\n", name, batch, s.gpu_us, s.e2e_us,
                s.b2b_us, s.gpu_us / batch);
    std::fflush(stdout);
    return s;
  };
  row("FP16, stream, one stream (opt 1)", *e1, 1, false, 0);
  row("FP16, stream, 3 auxiliary streams (opt 1)", *e1, 1, false);
  const Speed g1 = row("FP16, CUDA graph (opt 1)", *e1, 1, true);
  row("FP16, CUDA graph, one stream (opt 1)", *e1, 1, true, 0);
  row("FP16, CUDA graph, one stream + PDL (opt 1)", *e1, 1, true, 0, true);
  if (cudnn1) row("FP16 cuDNN where offered, graph (opt 1)", *cudnn1, 1, true);
  row("FP16, stream, one stream (opt 32)", *e16, o.max_batch, false, 0);
  const Speed g32 = row("FP16, CUDA graph (opt 32)", *e16, o.max_batch, true);
  row("FP16, CUDA graph, one stream (opt 32)", *e16, o.max_batch, true, 0);
  row("FP16, CUDA graph, one stream + PDL (opt 32)", *e16, o.max_batch, true, 0, true);
  if (cudnn32) row("FP16 cuDNN where offered, graph (opt 32)", *cudnn32, o.max_batch, true);
  row("FP32, CUDA graph (opt 1)", *e32, 1, true);
  std::printf("   clocks after the timing: %s\n",
              course::describe(course::read_gpu_clocks(0)).c_str());
  std::printf(
      "   (\"cuDNN where offered\": every convolution on cuDNN + the epilogue kernel where its "
      "tensors are dense; the first layer and the layers reading or writing a "
      "concatenation's slice stay on the course's kernels; \"one stream\": every layer on the "
      "caller's stream in launch order, where the other rows run independent layers side by side "
      "on up to %d auxiliary streams; PDL is used only on one stream)\n\n",
      kAux);

  // ------------------------------------------------------------------ 8. lesson 09 serves it
  std::printf(
      "8. Lesson 09's pipeline with this network as its engine (1080p frames, 6 classes, "
      "%lld frames per row; lesson 09's graphs capture letterbox + engine + postprocess)\n",
      static_cast<long long>(o.serve_frames));
  ServeOptions so;
  so.frames = o.serve_frames;
  const ServeReport sr = serve(e1, so);
  std::printf("%s\n", format_serve_report(sr).c_str());

  course::add_headline(
      "FP16 engine %.3f ms GPU time at batch 1 (CUDA graph), %.1f us per "
      "image at batch %d; mAP@0.5 FP16 %.4f, FP32 %.4f",
      g1.gpu_us / 1e3, g32.gpu_us / o.max_batch, o.max_batch, m16.map50, m32.map50);
  course::print_headline();
  return (refusals && correct && sr.total_wrong() == 0) ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Lesson 12: the engine - a trained detector built and run the way TensorRT does"};
  app.add_option("--weights", o.weights, "weights file written by train/train_detector.py");
  app.add_option("--plan", o.plan, "where to write the FP16 plan (default: ./yolov8n_fp16.plan)");
  app.add_option("--max-batch", o.max_batch, "largest batch of the profile")
      ->check(course::integer_in(1, 64));
  app.add_option("--batch", o.max_batch, "alias of --max-batch")->check(course::integer_in(1, 64));
  app.add_option("--frames", o.frames, "held-out scenes for mAP")
      ->check(course::integer_in(1, 10000));
  app.add_option("--serve-frames", o.serve_frames, "frames per lesson 09 configuration")
      ->check(course::integer_in(16, 100000));
  app.add_flag("--verbose", o.verbose, "also print the tactic table of the batch-1 build");
  app.add_option("--reps", o.reps, "timing repetitions (median)")
      ->check(course::integer_in(1, 1000));
  return course::lesson_main(app, argc, argv, [&] { return run(o); });
}
