// Lesson 12: the engine, the way TensorRT builds and runs one.
//
//   build_plan()       the builder (IBuilder::buildSerializedNetwork): optimize() the network
//                      (graph.hpp: BatchNorm folded, epilogues fused, concatenations as views,
//                      NHWC), then for every layer time each candidate kernel ("tactic") at the
//                      profile's opt batch and keep the fastest, plan the activation memory, and
//                      write the plan: layers, converted weights, tactics, the device memory a
//                      context needs, and the kernels' code (plan.hpp has the format)
//   Engine             the deserialised plan (ICudaEngine): read-only weights on the device and
//                      the kernels loaded through the Driver API (kernel_library.hpp); shared by
//                      threads
//   ExecutionContext   per thread/stream (IExecutionContext): its own activation memory,
//                      set_input_shape within the profile, tensor addresses, enqueue(stream)
//
// Tensor names are TensorRT's for an Ultralytics export: "images" [B, 3, H, W] float NCHW (RGB
// in [0, 1], lesson 06's letterbox output) and "output0" [B, 4 + C, N] float (lesson 08's YOLOv8
// layout, decoded by lesson 08 unchanged).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine_kernels.cuh"
#include "graph.hpp"
#include "network.hpp"

namespace lesson12 {

// The course version a plan is stamped with; a plan from another version is refused, as
// TensorRT refuses a plan serialised by another TensorRT version.
constexpr const char* kCourseVersion = "cuda-deploy-lessons 12.1";

// What the builder may choose from, per layer (TensorRT: tactic sources).
enum TacticSource : unsigned { kCourseKernels = 1u, kCudnn = 2u, kAllTactics = 3u };
bool cudnn_available();  // built with cuDNN (LESSON12_HAVE_CUDNN)

struct OptimizationProfile {  // TensorRT's min/opt/max shapes, for the batch dimension
  int min_batch = 1, opt_batch = 1, max_batch = 32;
};

struct BuilderConfig {
  DType precision = DType::f16;
  OptimizationProfile profile;
  unsigned tactic_sources = kAllTactics;
  int timing_iterations = 10;  // launches per timing (median of 3 such windows)
  // Choose only among tactics whose name starts with this (e.g. "mma 64x64", "simt", "cudnn")
  // in the layers where one of them ran; every candidate is still timed, and a layer with no
  // such tactic keeps its fastest. For tests that run each kernel family through the whole
  // network (they check the plan holds the family). Empty: all.
  std::string only_tactic;
  // Give every activation buffer its own memory (no reuse), so that every layer's output can be
  // read after an enqueue: what marking every tensor as an output does to a TensorRT engine
  // (polygraphy --trt-outputs mark all). For debugging and the per-layer tests.
  bool keep_all_buffers = false;
  // IBuilderConfig::setMaxAuxStreams: > 0 plans the activation memory so that independent layers
  // can run side by side on auxiliary streams (ExecutionContext::set_aux_streams) without one
  // waiting for another's memory; it costs some arena. 0: liveness over the launch order only
  // (the smallest arena; auxiliary streams then find little to overlap).
  int max_aux_streams = 3;
};

// One candidate of one layer: its name ("mma 128x64", "cudnn IMPLICIT_PRECOMP_GEMM", ...), its
// GPU time per launch in microseconds (launches queued behind a held stream, common/timing.hpp, so
// launch latency is excluded; median of 3 windows), or why it could not run.
struct TacticTiming {
  std::string tactic;
  double us = 0;
  bool ran = false;
  std::string why_not;
};

struct LayerDecision {
  std::string layer;  // the fused op's name
  std::string shape;  // e.g. "3x3 s2 64->128 @ 80x80"
  double gflop = 0;   // per image
  std::vector<TacticTiming> candidates;
  int chosen = -1;  // index into candidates
};

struct BuildReport {
  std::vector<LayerDecision> layers;
  int primitive_layers = 0, fused_ops = 0;
  std::size_t arena_bytes = 0, arena_without_reuse = 0;  // at max batch
  std::size_t weight_bytes = 0, plan_bytes = 0;
  double build_seconds = 0;
  double sum_of_chosen_us = 0;  // sum of the chosen tactics' times at opt batch
};

// Builds a plan for the current CUDA device. Throws std::invalid_argument for a bad profile
// (1 <= min <= opt <= max <= 256) or an input size that is not a multiple of 32, NotSupported
// (std::runtime_error) if no tactic can run some layer, course::CudaError for CUDA failures.
std::vector<std::uint8_t> build_plan(const NetworkDefinition& net, const BuilderConfig& config,
                                     BuildReport* report = nullptr);

// The tactic table, like `trtexec --verbose`'s: layer, shape, each candidate's time, the choice.
std::string format_tactic_table(const BuildReport& report);

class ExecutionContext;

class Engine : public std::enable_shared_from_this<Engine> {
 public:
  // Deserialises a plan (IRuntime::deserializeCudaEngine) on the current device. Throws
  // PlanError (plan.hpp) naming what was expected: a truncated or corrupted plan, another format
  // or course version, a plan built for another GPU.
  static std::shared_ptr<Engine> deserialize(const std::vector<std::uint8_t>& plan);
  ~Engine();

  std::unique_ptr<ExecutionContext> create_execution_context() const;

  DType precision() const;
  OptimizationProfile profile() const;
  int input_h() const;
  int input_w() const;
  int num_classes() const;
  int num_candidates() const;
  // Activation arena + cuDNN workspace, per context (on auxiliary streams a context holds one
  // workspace per stream that runs cuDNN: up to 1 + its aux streams).
  std::size_t device_memory_size() const;
  int num_ops() const;
  std::string describe() const;  // one line: precision, profile, ops, memory, kernels' targets

  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  friend class ExecutionContext;
};

class ExecutionContext {
 public:
  ~ExecutionContext();
  // The batch of the next enqueue. Throws std::invalid_argument outside [min, max] of the profile.
  void set_input_shape(int batch);
  int batch() const;
  // "images" or "output0" (device pointers, float, sized for the current batch). Throws
  // std::invalid_argument for another name or a null pointer.
  void set_tensor_address(const std::string& name, void* ptr);
  // Launches the whole network on `stream` (asynchronous). Throws std::logic_error if an address
  // is missing, CUDA errors as course::CudaError / course::DriverError.
  void enqueue(cudaStream_t stream);
  // The same launches captured once into a CUDA graph and replayed (re-captured when the batch
  // or an address changes): one launch instead of one per layer.
  void enqueue_graph(cudaStream_t stream);
  // Programmatic dependent launch (PDL) between consecutive layers, compute capability 9.0+:
  // each course kernel is launched so that it may start while the previous one drains, and waits
  // for it on the GPU (griddepcontrol.wait) before touching memory; in a graph the edges become
  // programmatic ones. Off by default: on this network it did not pay (H200, CUDA 13.0: the
  // graph at batch 1 took 538 us with it, 509 without; see the lesson's RESULTS.md), so it is an
  // option to measure, as TensorRT exposes its own. Ignored (stays off) on older GPUs, and used
  // only while the context runs on one stream (set_aux_streams(0)).
  void set_programmatic_launch(bool on);
  bool programmatic_launch() const;
  // Auxiliary streams (IExecutionContext::setAuxStreams): layers that do not depend on each
  // other run at the same time on up to `n` streams beside the caller's, which enqueue forks
  // from and joins back into (schedule.hpp decides the streams and the events). 0: every layer
  // on the caller's stream, in order. The context creates and owns the streams. Throws
  // std::invalid_argument outside [0, kMaxAuxStreams]. Applies from the next enqueue (a new
  // capture for enqueue_graph). Inside a graph the events are edges and cost nothing; in a plain
  // enqueue each costs the host a call, and at batch 1, where the host issuing launches is the
  // bound, that costs more than the overlap saves (the lesson's RESULTS.md has both measured):
  // use 0 there.
  static constexpr int kDefaultAuxStreams = 3, kMaxAuxStreams = 8;
  void set_aux_streams(int n);
  int aux_streams() const;
  // The streams the schedule uses for the current batch and addresses (1 + auxiliary ones).
  // Throws std::logic_error if a tensor address is missing.
  int streams_used();
  // Device address of engine-graph buffer `index` (NHWC, the engine's dtype): for per-layer
  // checks, as TensorRT's debug tensors / marking every layer as an output.
  const void* buffer_address(int index) const;
  const EngineGraph& graph() const;

  struct Impl;

 private:
  friend class Engine;
  explicit ExecutionContext(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace lesson12
