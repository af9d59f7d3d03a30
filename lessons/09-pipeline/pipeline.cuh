// Lesson 09: the detector pipeline. Frames in, boxes out, on N worker threads, overlapped.
//
//   producer thread          worker thread w (one per stream set, N of them)
//   ---------------          ------------------------------------------------------------------
//   acquire a pinned slot    take up to B filled slots (dynamic batcher: B frames or T us)
//   draw frame k into it     H2D copies (copy stream) -> event `copied` -> release the slots
//   publish(slot, k, t)      letterbox (lesson 06 v4) -> Engine::enqueue -> decode + NMS +
//                            D2H (lesson 08), all on the compute stream (or one CUDA graph)
//                            event `done` -> results, tagged with their frame id
//
// Results are tagged with the frame id and delivered in completion order (not frame order:
// with N workers frame k+1 may finish before frame k; a consumer that needs order sorts by id).
// Each worker binds its device (cudaSetDevice) before it creates anything, and owns its
// streams, buffers, engine and postprocess workspace: nothing is shared between workers but the
// slot ring (host memory, a mutex) and the results list.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/memory.hpp"
#include "pipeline_host.hpp"
#include "postprocess.cuh"  // lesson 08

namespace lesson09 {

// ------------------------------------------------------------------------------------ engine

// The shape of TensorRT's IExecutionContext (not TensorRT: it is not packaged for the machines
// this course is tested on; README.md shows where it goes):
//   input_dtype()       ICudaEngine::getTensorDataType("images"): f16 (an FP16 input binding,
//                       what FP16 engines are built with) or f32
//   set_batch(b)        IExecutionContext::setInputShape("images", {b, 3, H, W})
//   set_input(ptr)      setTensorAddress("images", ptr)     device [b, 3, H, W] RGB planar, of
//                       input_dtype() (__half or float)
//   set_output(ptr)     setTensorAddress("output0", ptr)    device [b, 4 + C, N] float (YOLOv8)
//   enqueue(stream)     enqueueV3(stream): asynchronous, no host synchronisation; false on
//                       failure (as enqueueV3 returns false)
// One instance per worker thread, created on that thread after its device is bound, as one
// IExecutionContext per thread (a context is not safe to share between concurrent enqueues).
class Engine {
 public:
  virtual ~Engine() = default;
  virtual TensorShape input_shape() const = 0;           // the largest batch it was built for
  virtual lesson08::OutputSpec output_spec() const = 0;  // one image's output: [4 + C, N]
  virtual lesson08::DType input_dtype() const = 0;       // the input tensor's element type
  virtual void set_batch(int batch) = 0;                 // 1 <= batch <= input_shape().batch
  virtual void set_input(const void* device_input) = 0;
  virtual void set_output(float* device_output) = 0;
  virtual bool enqueue(cudaStream_t stream) = 0;
  // Which frames the next enqueue holds (a host-side hook, called before it: logging; the
  // failing test engine uses it). Not part of TensorRT's interface.
  virtual void set_batch_frames(const std::int64_t* frames, int count) {
    (void)frames;
    (void)count;
  }
  virtual std::string name() const = 0;
};

// The course's engine. It computes its answer from the pixels, so that a routing or a
// synchronisation bug shows up as wrong boxes:
//   1. for each image of the batch and each class c, the bounding box of the pixels whose RGB is
//      within kColourTolerance of class_colour(c) (SyntheticVideo draws objects in them);
//   2. writes the YOLOv8 output [4 + C, N] per image: for each class found, kAnchorsPerClass
//      candidates (anchor 0 the box itself, score 0.95; the others jittered by up to ~1.5 px
//      and 4% in size, scores 0.90, 0.85, ...: duplicates for NMS to remove) and N - C x 8
//      background candidates with scores below 0.2 (the decode's confidence filter removes
//      them; the default threshold is 0.25);
//   3. then spends a stated amount of real GPU work standing in for a network: a chain of
//      cuBLAS SGEMMs, each 1024 x (1024 b) x 1024 (2.147 GFLOP per frame), as many as make
//      `gflop_per_frame` (rounded to whole GEMMs; 0: none).
// Default 8.7 GFLOP per frame: YOLOv8n at 640x640 (Ultralytics' published figure), rounded to
// 4 GEMMs = 8.59 GFLOP. In FP32 (no TF32) this is roughly what the smallest YOLOv8 costs a
// TensorRT FP16 engine on a data-centre GPU once latency overheads are counted, and it keeps
// the GPU stage comparable to the 1080p upload, which is the point of the lesson (which stage
// bounds the pipeline depends on it: try --gflop 0 and --gflop 86).
constexpr int kCandidates = 8400;  // YOLOv8 at 640x640: 80^2 + 40^2 + 20^2
constexpr int kAnchorsPerClass = 8;
constexpr double kDefaultGflopPerFrame = 8.7;
constexpr int kGemmSide = 1024;

struct ColorEngineOptions {
  TensorShape input{};                                 // max batch, 3, H, W
  lesson08::DType input_dtype = lesson08::DType::f16;  // f16 (__half) or f32 (float)
  int num_classes = 4;                                 // 1..kMaxClasses
  int num_candidates = kCandidates;                    // >= num_classes * kAnchorsPerClass
  double gflop_per_frame = kDefaultGflopPerFrame;      // >= 0
};

class ColorEngine : public Engine {
 public:
  // Allocates on the current device. Throws std::invalid_argument for bad options.
  explicit ColorEngine(const ColorEngineOptions& options);
  ~ColorEngine() override;
  ColorEngine(const ColorEngine&) = delete;
  ColorEngine& operator=(const ColorEngine&) = delete;

  TensorShape input_shape() const override { return options_.input; }
  lesson08::OutputSpec output_spec() const override;
  lesson08::DType input_dtype() const override { return options_.input_dtype; }
  void set_batch(int batch) override;
  void set_input(const void* device_input) override { input_ = device_input; }
  void set_output(float* device_output) override { output_ = device_output; }
  bool enqueue(cudaStream_t stream) override;
  std::string name() const override { return "ColorEngine"; }

  int gemms_per_frame() const { return gemms_; }
  double real_gflop_per_frame() const;  // what the GEMM chain really does

 private:
  ColorEngineOptions options_;
  int batch_ = 1;
  int gemms_ = 0;
  const void* input_ = nullptr;
  float* output_ = nullptr;
  course::DeviceBuffer<int> boxes_;  // [B][C][4] min x, min y, max x, max y (pixel indices)
  course::DeviceBuffer<float> weights_, act0_, act1_, act2_;  // the stand-in's operands
  course::DeviceBuffer<std::uint8_t> cublas_workspace_;
  void* cublas_ = nullptr;  // cublasHandle_t
};

// Test only: a ColorEngine whose enqueue returns false when its batch holds frame `fail_frame`.
class FailingEngine : public ColorEngine {
 public:
  FailingEngine(const ColorEngineOptions& options, std::int64_t fail_frame)
      : ColorEngine(options), fail_frame_(fail_frame) {}
  void set_batch_frames(const std::int64_t* frames, int count) override;
  bool enqueue(cudaStream_t stream) override;
  std::string name() const override { return "FailingEngine"; }

 private:
  std::int64_t fail_frame_;
  bool fail_next_ = false;
};

// Test only: a ColorEngine that writes to an illegal address on its `fault_on_run`-th run (a
// device-side count, in stream order, so a CUDA graph that replays the engine counts too): a
// device fault, the sticky error after which every CUDA call of the process fails
// (cudaErrorIllegalAddress). Run it only in a process of its own. Throws std::invalid_argument
// unless fault_on_run >= 1.
class FaultingEngine : public ColorEngine {
 public:
  FaultingEngine(const ColorEngineOptions& options, int fault_on_run);
  bool enqueue(cudaStream_t stream) override;
  std::string name() const override { return "FaultingEngine"; }

 private:
  course::DeviceBuffer<unsigned> runs_;  // [1]: the engine's runs so far
  int fault_on_run_;
};

// How the pipeline gets an engine: its shape, checked against the config before any thread
// starts, and a factory that each worker calls on its own thread, after binding its device.
struct EngineSpec {
  TensorShape shape{};
  std::function<std::unique_ptr<Engine>(int worker)> make;
  lesson08::DType input_dtype = lesson08::DType::f16;  // must equal PipelineConfig::input_dtype
};
EngineSpec color_engine_spec(const PipelineConfig& config, double gflop_per_frame);
EngineSpec failing_engine_spec(const PipelineConfig& config, std::int64_t fail_frame);
EngineSpec faulting_engine_spec(const PipelineConfig& config, int fault_on_run);

// ---------------------------------------------------------------------------------- pipeline

// One frame's answer.
struct FrameResult {
  std::int64_t frame = -1;
  int worker = -1;
  int batch = 0;                                // frames in the engine call that served it
  std::vector<lesson08::Detection> detections;  // source pixels, NMS order
  double latency_us = 0;                        // frame complete (captured) -> result on the host
};

struct RunReport {
  std::vector<FrameResult> results;   // completion order, each tagged with its frame id
  std::vector<std::int64_t> dropped;  // frames the drop-oldest policy dropped
  std::int64_t produced = 0;          // frames the producer published
  // The producer, per frame in frame order: how long drawing it took (us), how long it waited
  // for a free slot before (us: a full ring under the block policy), and in open loop how late
  // the drawing started after the frame was due (us, that wait included; empty in closed loop).
  // Latency counts from a frame's completion, so the drawing is not in it (the lateness is).
  std::vector<double> draw_us, acquire_us, late_us;
  double wall_s = 0;              // the start barrier (warm-up done) to the last result
  double cpu_s = 0;               // process CPU time (all threads) over the same span
  std::vector<TraceEvent> trace;  // when config.trace
  // With config.graphs: graphs captured the first time (warm-up or first use), and graphs
  // captured again for new frame sizes (config.resize_at), installed in place by
  // cudaGraphExecUpdate or re-instantiated because the update was refused.
  int graph_captures = 0, graph_updates = 0, graph_reinstantiations = 0;
  double fps() const { return wall_s > 0 ? static_cast<double>(results.size()) / wall_s : 0.0; }
  LatencySummary latency() const;   // of latency_us
  double first_latency_us() const;  // latency of the lowest frame id served
};

// A failure inside the pipeline: which frame (the first of its batch; -1 if none), which stage.
class PipelineError : public std::runtime_error {
 public:
  PipelineError(const std::string& what, std::int64_t frame, std::string stage)
      : std::runtime_error(what), frame_(frame), stage_(std::move(stage)) {}
  std::int64_t frame() const { return frame_; }
  const std::string& stage() const { return stage_; }

 private:
  std::int64_t frame_;
  std::string stage_;
};

// Runs the producer and config.workers workers until config.frames frames were produced and
// served (or dropped). Throws std::invalid_argument (validate, validate_engine_shape, then
// validate_devices with cudaGetDeviceCount()) before any thread starts; PipelineError for a
// failure inside ("worker 1, frames 37..40, stage engine: ..."), after stopping and joining
// every thread (nothing hangs, nothing leaks: RAII).
RunReport run_pipeline(const PipelineConfig& config, const EngineSpec& engine);

// The loop most tutorials write, on the calling thread: pageable memory, synchronous
// cudaMemcpy, one stream, one frame at a time (config.frames frames; batch, workers, graphs and
// resize_at ignored). The baseline of the table.
RunReport run_serial_tutorial(const PipelineConfig& config, const EngineSpec& engine);

// ----------------------------------------------------------------------------- test gates

// Test only: a gate on a stream, so that a test can hold a stream's later work back and see
// what a host call does meanwhile, with no timing assertion. hold(stream) enqueues a one-thread
// kernel that spins until open() is called (it polls a flag in mapped pinned memory with
// volatile reads), so the stream's work queued after it waits. A guard makes the kernel end by
// itself after `guard_s` seconds, counted in SM clock cycles at the device's peak clock (so at
// least that long), recording that it timed out: nothing can hang. One hold per gate. The
// device is the current one at construction; throws std::invalid_argument unless guard_s is
// finite and > 0, course::CudaError for a failed call.
class StreamGate {
 public:
  enum class State { not_started = 0, holding = 1, opened = 2, timed_out = 3 };
  explicit StreamGate(double guard_s = 5.0);
  void hold(cudaStream_t stream);  // throws std::logic_error the second time
  void open();                     // any thread
  State state() const;             // what the kernel last wrote: read while it runs, or after
 private:
  course::PinnedBuffer<int> shared_;  // [0] the flag the host sets, [1] the kernel's State
  int* device_shared_ = nullptr;      // the same memory, as the kernel addresses it
  long long guard_cycles_ = 0;
  bool held_ = false;
};
const char* to_string(StreamGate::State state);

// ------------------------------------------------------------------------------ measurements

// Pinned H2D bandwidth, GB/s (1e9 B/s): median of `reps` cudaMemcpyAsync of `bytes` timed with
// events, on the current device.
double measure_pinned_h2d_gbps(std::size_t bytes, int reps = 10);
// The GPU busy time per frame of the device-side sequence (letterbox, engine, postprocess) for a
// batch of `batch` frames of the first frame size, back to back (graphs per config.graphs),
// microseconds. On `streams` streams at once, each with its own engine and buffers as N workers
// have: kernels of different streams overlap where one stream leaves SMs idle, so the GPU
// sustains more frames/s with several streams than one stream's time says, and the bound of an
// N-worker configuration is measured with N streams. Throws std::invalid_argument (validate,
// reps < 1, streams outside [1, 64]), course::CudaError.
double measure_gpu_us_per_frame(const PipelineConfig& config, const EngineSpec& engine, int batch,
                                int reps = 20, int streams = 1);
// The producer's time per frame, microseconds: 10 x reps SyntheticVideo::update calls back to
// back over a ring of config.queue_depth pinned slots, each holding the frame queue_depth
// before (as in the pipeline), divided. Throws std::invalid_argument unless reps >= 1.
double measure_host_us_per_frame(const PipelineConfig& config, int reps = 20);

}  // namespace lesson09
