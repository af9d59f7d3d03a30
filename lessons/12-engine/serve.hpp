// Lesson 12: the engine serving lesson 09. Lesson 09's pipeline (producer, slot ring, N workers,
// letterbox, engine, decode + NMS) with this lesson's network as its engine, so that its
// questions (which stage bounds it, what graphs and batching buy) are asked of a real network.
//
//   detector_engine_spec    lesson09::Engine over lesson12::Engine: one shared engine, a
//                           context per worker (per buffer set), as a TensorRT server runs
//   check_detector_frame    one frame's detections against lesson 09's truth, with the
//                           tolerance a trained network needs (lesson 09's check_frame was
//                           written for a stand-in whose boxes are exact)
//   count_wrong_frames      a run's frames that fail it (and frames missing or served twice)
//   serve                   lesson 09's pipeline in a few configurations: frames/s, latency,
//                           the bound lesson 09 computes and the % of it reached, wrong frames
//   format_serve_report     the table, as lesson 09 prints its own
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine.hpp"
#include "pipeline.cuh"  // lesson 09

namespace lesson12 {

// ------------------------------------------------------------------------------ the adapter

// An EngineSpec whose make(worker) gives lesson 09 an engine over `engine`:
//   input_shape()     [profile max batch, 3, input_h, input_w]
//   output_spec()     yolov8, N = engine->num_candidates(), C = engine->num_classes()
//   input_dtype()     f32: config.input_dtype must be f32 too (else std::invalid_argument)
//   set_batch(b)      ExecutionContext::set_input_shape(b)
//   set_input(p)      set_tensor_address("images", p)     [b, 3, H, W] float RGB in [0, 1]
//   set_output(p)     set_tensor_address("output0", p)    [b, 4 + C, N] float
//   enqueue(stream)   ExecutionContext::enqueue, or enqueue_graph with `graphs`
// Contexts: each worker's engine creates its own, on its own thread (a context is never shared
// between threads, as IExecutionContext may not be), one per (images, output0) address pair it
// is given, that is one per lesson 09 buffer set. A context keeps its prepared launches (and
// its graph) while its addresses stay put; with one context for both of a worker's alternating
// buffer sets every enqueue would re-prepare, and every enqueue_graph re-capture.
// `graphs`: the engine replays its own CUDA graph of the network (trtexec --useCudaGraph); it is
// re-captured (and updated in place) when the batch changes, so it suits a fixed batch. A
// context's first enqueue runs eagerly before its first capture (what is made lazily on the
// thread, such as cuDNN's handle, must not be allocated inside a capture). It is
// for config.graphs = false only: with config.graphs lesson 09 captures the engine's launches
// (Engine::enqueue) into its own graph of letterbox + engine + postprocess, one per buffer set
// and batch size, and a graph captured inside that capture would be a second, nested one.
// enqueue throws (course::CudaError, course::DriverError, std::logic_error) rather than return
// false: lesson 09 reports an exception with its worker, frames and stage, and the message says
// more than enqueueV3's false.
// Throws std::invalid_argument for a null engine, graphs with config.graphs, an engine whose
// profile does not start at batch 1 (the dynamic batcher sends any batch from 1 up) or is
// smaller than config.batch, an input size other than the config's, config.num_classes above
// the engine's classes, or config.devices naming more than one device (one engine lives on one
// GPU: deserialise one per device and give each its own spec).
lesson09::EngineSpec detector_engine_spec(const lesson09::PipelineConfig& config,
                                          std::shared_ptr<const Engine> engine, bool graphs);

// ------------------------------------------------------------------------------- the check

// Lesson 09's check_frame asks for IoU >= 0.9 with the truth and no other detection: right for
// its stand-in engine, which computes each box from the pixels, exactly. A trained network's
// boxes are off by a pixel or two at its input and its scores vary. At 1080p letterboxed to
// 640 x 640 (scale 1/3) lesson 09's boxes with 6 classes are as small as 64 x 33 network pixels;
// every edge 2 px out gives IoU (64 x 33) / (68 x 37) = 0.84, 3 px 0.77, 4 px 0.72: 0.9 fails
// boxes a deployment would call right. So: each true box matched by exactly one detection of its
// class with IoU >= min_iou (0.7: every edge up to 4 network pixels out on the smallest box; a
// duplicate that NMS left is wrong), and no detection with score >= min_extra_score (the
// deployment threshold, deploy_config()'s 0.25) that matches no true box.
// 0.7 still catches lesson 09's routing bugs (a wrong slot, a stale buffer, results swapped
// between frames): with 6 classes no frame of the first 400 passes with the boxes of the frame
// 1, 2, 3 or 5 after it. Which classes are present differs between neighbours in 10 of 11 frame
// pairs (class c is absent where (k + 3c) % 11 == 5), and the six boxes move 24 + 7c source
// pixels a frame, so they cannot all stay within IoU 0.7 (the tests count it).
struct DetectorCheck {
  double min_iou = 0.7;
  float min_extra_score = 0.25f;
};
// Returns "" when the frame is right, otherwise what is wrong (for a test's message). Boxes in
// source pixels (lesson 09's truth and its detections alike).
std::string check_detector_frame(const std::vector<lesson09::TruthBox>& truth,
                                 const std::vector<lesson08::Detection>& detections,
                                 const DetectorCheck& check = {});

// Frames of a run that are wrong: results failing check_detector_frame against the run's camera
// (lesson09::Camera(config)), results for a frame outside [0, config.frames) or served twice,
// and frames neither served nor dropped. Throws as lesson09::Camera does.
int count_wrong_frames(const lesson09::RunReport& report, const lesson09::PipelineConfig& config,
                       const DetectorCheck& check = {});

// ------------------------------------------------------------------------------ serving

struct ServeOptions {
  std::int64_t frames = 400;  // per configuration
  int workers = 2;            // workers of the multi-worker rows
  int max_batch = 8;          // the dynamic batcher's largest batch (clamped to the profile)
  double max_wait_us = 2000;  // how long the batcher waits for a batch to fill
  // Lesson 09's palette has 6 classes, the network's. With 6, lesson 09's lanes are 180 px at
  // 1080p and its widest boxes 4.8:1 (the scenes the network trained on go to 4:1).
  int num_classes = 6;
};

struct ServeRow {
  std::string name;
  lesson09::PipelineConfig config;
  double fps = 0;
  lesson09::LatencySummary latency;  // microseconds, capture to boxes on the host
  lesson09::Bound bound;             // lesson 09's: the slowest of upload, GPU, host
  double percent_of_bound = 0;
  double gpu_us_per_frame = 0;  // the GPU stage alone at this row's batch and graphs
  double mean_batch = 0;        // frames per engine call, as served
  std::size_t served = 0;
  int wrong = 0;  // count_wrong_frames
};

struct ServeReport {
  std::string engine;  // Engine::describe()
  std::string device;  // the GPU's name
  int frame_width = 0, frame_height = 0, input_width = 0, input_height = 0, num_classes = 0;
  double h2d_gbps = 0;           // pinned upload bandwidth, measured
  double upload_fps = 0;         // what the copy engine sustains for these frames
  double host_us_per_frame = 0;  // the producer drawing a frame
  std::vector<ServeRow> rows;
  int total_wrong() const;
};

// Lesson 09's pipeline with this engine, closed loop, options.frames frames per row:
//   1 worker                      no graphs, batch 1: the engine's launches one by one
//   N workers                     no graphs, batch 1: do more host threads help a GPU-bound one?
//   N workers + graphs            lesson 09's CUDA graph of letterbox + engine + postprocess
//   N workers + graphs, B<=max    and the dynamic batcher (max_wait_us)
// Each row's bound is lesson 09's bound_of(upload, GPU alone at the row's batch and graphs, host).
// Every worker binds the current device, which must be the engine's. Throws std::invalid_argument
// for bad options (frames < 1, workers < 1, max_batch < 1) and what lesson 09's run_pipeline
// throws.
ServeReport serve(const std::shared_ptr<const Engine>& engine, const ServeOptions& options = {});

// The table: one line per row, columns as lesson 09's (frames/s, p50/p99 ms, bound, bound/s,
// % of bound, wrong), with the stage rates above it.
std::string format_serve_report(const ServeReport& report);

}  // namespace lesson12
