// Lesson 12: the engine serving lesson 09 (serve.hpp).
//
//   1. DetectorEngine        lesson09::Engine over a shared lesson12::Engine, contexts per
//                            buffer set; detector_engine_spec
//   2. check_detector_frame, count_wrong_frames
//   3. serve, format_serve_report
#include "serve.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <tuple>

#include "common/cuda_check.hpp"
#include "common/device.hpp"
#include "evaluate.hpp"

namespace lesson12 {

// ----------------------------------------------------------------------- 1. the adapter

namespace {

class DetectorEngine : public lesson09::Engine {
 public:
  // eager: no graph around the launches (neither the engine's nor lesson 09's): then every layer
  // goes on the caller's stream, since the events between auxiliary streams cost the host more
  // than the overlap saves where the host issuing launches is the bound (engine.hpp).
  DetectorEngine(std::shared_ptr<const lesson12::Engine> engine, bool graphs, bool eager)
      : engine_(std::move(engine)), graphs_(graphs), eager_(eager) {}

  lesson09::TensorShape input_shape() const override {
    return {engine_->profile().max_batch, 3, engine_->input_h(), engine_->input_w()};
  }
  lesson08::OutputSpec output_spec() const override {
    lesson08::OutputSpec spec;
    spec.layout = lesson08::Layout::yolov8;
    spec.num_candidates = engine_->num_candidates();
    spec.num_classes = engine_->num_classes();
    return spec;
  }
  void set_batch(int batch) override {
    const OptimizationProfile p = engine_->profile();
    if (batch < p.min_batch || batch > p.max_batch) {  // what set_input_shape would say, now
      throw std::invalid_argument("DetectorEngine::set_batch: batch " + std::to_string(batch) +
                                  " outside the engine's profile [" + std::to_string(p.min_batch) +
                                  ", " + std::to_string(p.max_batch) + "]");
    }
    batch_ = batch;
  }
  // The engine's input tensor is NCHW float (graph.hpp, kNetworkInput), in every precision.
  lesson08::DType input_dtype() const override { return lesson08::DType::f32; }
  void set_input(const void* device_input) override {
    input_ = static_cast<const float*>(device_input);
  }
  void set_output(float* device_output) override { output_ = device_output; }

  bool enqueue(cudaStream_t stream) override {
    if (input_ == nullptr || output_ == nullptr) return false;  // enqueueV3 without addresses
    bool first_use = false;
    ExecutionContext& context = context_for(input_, output_, &first_use);
    // Unchanged shape and addresses leave the context's prepared launches (and graph) valid.
    context.set_input_shape(batch_);
    context.set_tensor_address("images", const_cast<float*>(input_));
    context.set_tensor_address("output0", output_);
    // A context's first enqueue runs eagerly even with graphs: what the launches create lazily
    // on this thread (cuDNN's per-thread handle, for a plan with cuDNN tactics) allocates, and
    // no allocation is permitted while the stream captures. The graph then replays the same
    // launches, writing the same output again.
    if (!graphs_ || first_use) context.enqueue(stream);
    if (graphs_) context.enqueue_graph(stream);
    return true;
  }

  std::string name() const override {
    return graphs_ ? "YOLOv8n engine (engine graph)" : "YOLOv8n engine";
  }

 private:
  // The context of one buffer set, made the first time its addresses are seen. Lesson 09 makes
  // that happen in an eager run (warm-up, or the eager pass before a capture), never inside a
  // capture, where the context's cudaMalloc would be refused.
  ExecutionContext& context_for(const float* input, float* output, bool* created) {
    for (BufferSetContext& b : contexts_) {
      if (b.input == input && b.output == output) return *b.context;
    }
    *created = true;
    contexts_.push_back({input, output, engine_->create_execution_context()});
    if (eager_) contexts_.back().context->set_aux_streams(0);
    return *contexts_.back().context;
  }

  struct BufferSetContext {
    const float* input;
    float* output;
    std::unique_ptr<ExecutionContext> context;
  };
  std::shared_ptr<const lesson12::Engine> engine_;
  bool graphs_;
  bool eager_;
  int batch_ = 1;
  const float* input_ = nullptr;
  float* output_ = nullptr;
  std::vector<BufferSetContext> contexts_;
};

}  // namespace

lesson09::EngineSpec detector_engine_spec(const lesson09::PipelineConfig& config,
                                          std::shared_ptr<const Engine> engine, bool graphs) {
  if (!engine) throw std::invalid_argument("detector_engine_spec: no engine");
  if (graphs && config.graphs) {
    throw std::invalid_argument(
        "detector_engine_spec: engine graphs with config.graphs: lesson 09 already captures the "
        "engine's launches into its own graph; choose one");
  }
  const OptimizationProfile p = engine->profile();
  if (p.min_batch != 1) {
    throw std::invalid_argument("detector_engine_spec: the engine's profile starts at batch " +
                                std::to_string(p.min_batch) +
                                "; lesson 09's batcher sends any batch from 1, so build "
                                "it with min_batch 1");
  }
  if (p.max_batch < config.batch) {
    throw std::invalid_argument("detector_engine_spec: config.batch " +
                                std::to_string(config.batch) + " above the profile's max batch " +
                                std::to_string(p.max_batch));
  }
  if (engine->input_h() != config.input_height || engine->input_w() != config.input_width) {
    throw std::invalid_argument(
        "detector_engine_spec: the engine takes " + std::to_string(engine->input_w()) + "x" +
        std::to_string(engine->input_h()) + ", the config letterboxes to " +
        std::to_string(config.input_width) + "x" + std::to_string(config.input_height));
  }
  if (config.num_classes > engine->num_classes()) {
    throw std::invalid_argument("detector_engine_spec: config.num_classes " +
                                std::to_string(config.num_classes) + " above the engine's " +
                                std::to_string(engine->num_classes()));
  }
  if (std::set<int>(config.devices.begin(), config.devices.end()).size() > 1) {
    throw std::invalid_argument(
        "detector_engine_spec: one engine lives on one device; config.devices names several");
  }
  if (config.input_dtype != lesson08::DType::f32) {
    throw std::invalid_argument(
        "detector_engine_spec: the engine's input tensor is FP32; set config.input_dtype to f32");
  }
  lesson09::EngineSpec spec;
  spec.shape = {p.max_batch, 3, engine->input_h(), engine->input_w()};
  spec.input_dtype = lesson08::DType::f32;
  const bool eager = !graphs && !config.graphs;
  spec.make = [engine, graphs, eager](int) {
    return std::make_unique<DetectorEngine>(engine, graphs, eager);
  };
  return spec;
}

// --------------------------------------------------------------------------- 2. the check

std::string check_detector_frame(const std::vector<lesson09::TruthBox>& truth,
                                 const std::vector<lesson08::Detection>& detections,
                                 const DetectorCheck& check) {
  std::ostringstream why;
  std::vector<int> matched(truth.size(), 0);
  for (const lesson08::Detection& d : detections) {
    bool found = false;
    for (std::size_t t = 0; t < truth.size(); ++t) {
      if (truth[t].class_id == d.class_id && lesson08::iou(truth[t].box, d.box) >= check.min_iou) {
        ++matched[t];
        found = true;
      }
    }
    if (!found && d.score >= check.min_extra_score) {
      why << "extra or misplaced detection: class " << d.class_id << " (" << d.box.x1 << ", "
          << d.box.y1 << ", " << d.box.x2 << ", " << d.box.y2 << ") score " << d.score << "; ";
    }
  }
  for (std::size_t t = 0; t < truth.size(); ++t) {
    if (matched[t] != 1) {
      why << "true box of class " << truth[t].class_id << " (" << truth[t].box.x1 << ", "
          << truth[t].box.y1 << ", " << truth[t].box.x2 << ", " << truth[t].box.y2 << ") matched "
          << matched[t] << " times at IoU >= " << check.min_iou << "; ";
    }
  }
  return why.str();
}

int count_wrong_frames(const lesson09::RunReport& report, const lesson09::PipelineConfig& config,
                       const DetectorCheck& check) {
  const lesson09::Camera camera(config);
  const std::size_t n = static_cast<std::size_t>(std::max<std::int64_t>(config.frames, 0));
  std::vector<int> seen(n, 0);
  int wrong = 0;
  for (const lesson09::FrameResult& f : report.results) {
    if (f.frame < 0 || f.frame >= config.frames || ++seen[f.frame] > 1 ||
        !check_detector_frame(camera.video(f.frame).truth(f.frame), f.detections, check).empty()) {
      ++wrong;
    }
  }
  for (std::int64_t k : report.dropped) {
    if (k >= 0 && k < config.frames && seen[k] == 0) seen[k] = -1;  // dropped, not lost
  }
  wrong += static_cast<int>(std::count(seen.begin(), seen.end(), 0));  // never answered
  return wrong;
}

// ---------------------------------------------------------------------------- 3. serving

int ServeReport::total_wrong() const {
  int total = 0;
  for (const ServeRow& r : rows) total += r.wrong;
  return total;
}

ServeReport serve(const std::shared_ptr<const Engine>& engine, const ServeOptions& o) {
  if (!engine) throw std::invalid_argument("serve: no engine");
  if (o.frames < 1 || o.workers < 1 || o.max_batch < 1) {
    throw std::invalid_argument("serve: expected frames >= 1, workers >= 1 and max_batch >= 1");
  }
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  lesson09::PipelineConfig base;
  base.input_dtype = lesson08::DType::f32;  // the engine's input tensor
  base.frames = o.frames;
  base.num_classes = o.num_classes;
  base.devices = {device};
  base.input_width = engine->input_w();
  base.input_height = engine->input_h();
  base.post = deploy_config();

  ServeReport report;
  report.engine = engine->describe();
  report.device = course::query_device(device).name;
  report.frame_width = base.frame_width;
  report.frame_height = base.frame_height;
  report.input_width = base.input_width;
  report.input_height = base.input_height;
  report.num_classes = base.num_classes;

  // Each stage alone, as lesson 09 measures them.
  const std::size_t frame_bytes =
      static_cast<std::size_t>(base.frame_width) * base.frame_height * 3;
  report.h2d_gbps = lesson09::measure_pinned_h2d_gbps(frame_bytes);
  report.upload_fps = lesson09::fps_from_bandwidth(report.h2d_gbps, frame_bytes);
  report.host_us_per_frame = lesson09::measure_host_us_per_frame(base);

  const int max_batch = std::min(o.max_batch, engine->profile().max_batch);
  std::map<std::tuple<int, bool, int>, double> gpu_us;
  auto add = [&](const std::string& name, lesson09::PipelineConfig c) {
    ServeRow row;
    row.name = name;
    // The GPU stage alone depends on the batch, graphs and the workers' streams (N workers'
    // kernels overlap on N streams, so it is measured on as many): once per triple.
    const std::tuple<int, bool, int> key{c.batch, c.graphs, c.workers};
    if (gpu_us.count(key) == 0) {
      gpu_us[key] = lesson09::measure_gpu_us_per_frame(c, detector_engine_spec(c, engine, false),
                                                       c.batch, 20, c.workers);
    }
    row.gpu_us_per_frame = gpu_us[key];
    row.bound = lesson09::bound_of({report.upload_fps, lesson09::fps_from_us(row.gpu_us_per_frame),
                                    lesson09::fps_from_us(report.host_us_per_frame)});
    const lesson09::RunReport r = lesson09::run_pipeline(c, detector_engine_spec(c, engine, false));
    row.config = c;
    row.fps = r.fps();
    row.latency = r.latency();
    row.percent_of_bound = lesson09::percent_of_bound(row.fps, row.bound);
    row.served = r.results.size();
    // Frames per engine call: each of a call's b frames reports b, so the calls are sum(1/b).
    double calls = 0;
    for (const lesson09::FrameResult& f : r.results) calls += 1.0 / f.batch;
    row.mean_batch = calls > 0 ? static_cast<double>(r.results.size()) / calls : 0.0;
    row.wrong = count_wrong_frames(r, c);
    report.rows.push_back(std::move(row));
  };

  {
    lesson09::PipelineConfig c = base;
    c.workers = 1;
    add("1 worker", c);
  }
  {
    lesson09::PipelineConfig c = base;
    c.workers = o.workers;
    add(std::to_string(o.workers) + " workers", c);
    c.graphs = true;
    add(std::to_string(o.workers) + " workers + graphs", c);
    if (max_batch > 1) {
      c.batch = max_batch;
      c.max_wait_us = o.max_wait_us;
      c.queue_depth = std::max(16, 2 * max_batch);
      add(std::to_string(o.workers) + " workers + graphs, B<=" + std::to_string(max_batch), c);
    }
  }
  return report;
}

std::string format_serve_report(const ServeReport& r) {
  std::ostringstream s;
  char line[256];
  std::snprintf(line, sizeof line,
                "Lesson 09's pipeline serving this engine on %s\n  engine: %s\n"
                "  frames %dx%d BGR, %d classes, letterboxed to %dx%d; postprocess conf 0.25, "
                "NMS IoU 0.45\n",
                r.device.c_str(), r.engine.c_str(), r.frame_width, r.frame_height, r.num_classes,
                r.input_width, r.input_height);
  s << line;
  std::snprintf(line, sizeof line,
                "  each stage alone: upload %.1f GB/s = %.0f frames/s; producer %.0f us/frame = "
                "%.0f frames/s\n",
                r.h2d_gbps, r.upload_fps, r.host_us_per_frame,
                lesson09::fps_from_us(r.host_us_per_frame));
  s << line;
  std::snprintf(line, sizeof line, "  %-30s %8s %8s %8s %8s %6s %-7s %8s %6s %5s\n",
                "configuration", "frames/s", "p50 ms", "p99 ms", "GPU us/f", "batch", "bound",
                "bound/s", "%bound", "wrong");
  s << line;
  for (const ServeRow& row : r.rows) {
    std::snprintf(line, sizeof line,
                  "  %-30s %8.0f %8.2f %8.2f %8.1f %6.2f %-7s %8.0f %5.1f%% %5d\n",
                  row.name.c_str(), row.fps, row.latency.p50 / 1e3, row.latency.p99 / 1e3,
                  row.gpu_us_per_frame, row.mean_batch, row.bound.stage.c_str(), row.bound.fps,
                  row.percent_of_bound, row.wrong);
    s << line;
  }
  std::snprintf(line, sizeof line,
                "  GPU us/f: letterbox + engine + decode/NMS per frame alone, at the row's batch "
                "and graphs, on as\n  many streams as the row has workers; wrong: frames failing "
                "check_detector_frame (IoU >= 0.7, right "
                "class, nothing extra >= 0.25)\n");
  s << line;
  return s.str();
}

}  // namespace lesson12
