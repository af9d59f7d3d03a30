// The runtime: Engine (deserialised plan, shared) and ExecutionContext (per thread or stream).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <sstream>
#include <stdexcept>

#include "common/cuda_check.hpp"
#include "common/memory.hpp"
#include "common/stream.hpp"
#include "engine.hpp"
#include "launch.hpp"
#include "plan.hpp"
#include "postprocess.cuh"  // lesson 08: GraphExec
#include "schedule.hpp"

namespace lesson12 {

struct Engine::Impl {
  Plan plan;  // without the code and weights once loaded (they live on the device)
  int device = 0;
  std::unique_ptr<KernelLibrary> lib;
  course::DeviceBuffer<std::uint8_t> weights;  // every op's weights then biases, 256-aligned
  std::vector<OpWeights> op_weights;
  std::size_t weight_bytes = 0;
};

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

std::shared_ptr<Engine> Engine::deserialize(const std::vector<std::uint8_t>& bytes) {
  auto impl = std::make_unique<Impl>();
  impl->plan = parse_plan(bytes);
  Plan& plan = impl->plan;
  CUDA_CHECK(cudaGetDevice(&impl->device));
  check_plan_device(plan, impl->device);
  CUDA_CHECK(cudaFree(nullptr));  // the primary context, before the Driver API loads code into it
  impl->lib = std::make_unique<KernelLibrary>(plan.code);
  // Resolve every kernel now, so that a plan naming a kernel its code lacks fails here and not
  // at the first enqueue (TensorRT also loads every tactic's kernel at deserialisation).
  for (const PlanOp& op : plan.ops) {
    if (op.tactic.kind == PlanTactic::Kind::kernel && op.op.kind != OpKind::copy) {
      impl->lib->kernel(op.tactic.symbol);
    }
    if (op.tactic.kind == PlanTactic::Kind::kernel && op.op.kind == OpKind::conv) {
      conv_kernel_by_symbol(op.tactic.symbol);
    }
    if (op.tactic.kind == PlanTactic::Kind::cudnn && !cudnn_available()) {
      throw PlanError("the plan's layer " + op.op.name + " uses cuDNN (" + op.tactic.label +
                      "), and this build has no cuDNN");
    }
  }
  impl->lib->kernel(plan.precision == DType::f16 ? "bias_act_nhwc_f16" : "bias_act_nhwc_f32");
  // One allocation for all weights: offsets 256-byte aligned (the kernels load 16-byte vectors).
  auto align = [](std::size_t x) { return (x + 255) / 256 * 256; };
  std::size_t total = 0;
  std::vector<std::size_t> w_off, b_off;
  for (const PlanOp& op : plan.ops) {
    w_off.push_back(total);
    total = align(total + op.weight.size());
    b_off.push_back(total);
    total = align(total + op.bias.size() * sizeof(float));
  }
  impl->weights = course::DeviceBuffer<std::uint8_t>(std::max<std::size_t>(total, 256));
  impl->weight_bytes = total;
  for (std::size_t i = 0; i < plan.ops.size(); ++i) {
    PlanOp& op = plan.ops[i];
    std::uint8_t* w = impl->weights.data() + w_off[i];
    auto* b = reinterpret_cast<float*>(impl->weights.data() + b_off[i]);
    if (!op.weight.empty()) {
      CUDA_CHECK(cudaMemcpy(w, op.weight.data(), op.weight.size(), cudaMemcpyHostToDevice));
    }
    if (!op.bias.empty()) {
      CUDA_CHECK(
          cudaMemcpy(b, op.bias.data(), op.bias.size() * sizeof(float), cudaMemcpyHostToDevice));
    }
    impl->op_weights.push_back(OpWeights{w, b});
    op.weight.clear();
    op.weight.shrink_to_fit();
    op.bias.clear();
    op.bias.shrink_to_fit();
  }
  plan.code.clear();
  plan.code.shrink_to_fit();
  return std::shared_ptr<Engine>(new Engine(std::move(impl)));
}

DType Engine::precision() const {
  return impl_->plan.precision;
}
OptimizationProfile Engine::profile() const {
  return impl_->plan.profile;
}
int Engine::input_h() const {
  return impl_->plan.graph.input_h;
}
int Engine::input_w() const {
  return impl_->plan.graph.input_w;
}
int Engine::num_classes() const {
  return impl_->plan.graph.num_classes;
}
int Engine::num_candidates() const {
  return impl_->plan.graph.num_candidates;
}
int Engine::num_ops() const {
  return static_cast<int>(impl_->plan.ops.size());
}
std::size_t Engine::device_memory_size() const {
  return impl_->plan.graph.arena_bytes + impl_->plan.workspace_bytes;
}

std::string Engine::describe() const {
  const Plan& p = impl_->plan;
  std::ostringstream s;
  s << (p.precision == DType::f16 ? "FP16" : "FP32") << " engine for " << p.gpu_name << " (sm_"
    << p.cc_major << p.cc_minor << "), " << p.ops.size() << " layers, input ["
    << p.profile.min_batch << ".." << p.profile.max_batch << "]x3x" << p.graph.input_h << "x"
    << p.graph.input_w << ", weights " << impl_->weight_bytes / 1024 << " KiB, context memory "
    << device_memory_size() / (1024 * 1024) << " MiB at batch " << p.profile.max_batch
    << "; kernels: " << p.code_targets;
  return s.str();
}

// ------------------------------------------------------------------------------ the context

struct ExecutionContext::Impl {
  std::shared_ptr<const Engine> engine;
  course::DeviceBuffer<std::uint8_t> arena;
  course::DeviceBuffer<std::uint8_t> workspace;
  int batch = 0;
  const float* images = nullptr;
  float* output = nullptr;
  bool prepared = false;
  std::vector<LaunchOp> ops;
  lesson08::GraphExec graph;
  bool graph_valid = false;
  int graph_captures = 0;
  bool uses_cudnn = false;
  bool programmatic = false;  // PDL between consecutive ops: off unless asked for (engine.hpp)
  int max_aux_streams = ExecutionContext::kDefaultAuxStreams;
  StreamSchedule schedule;            // prepare(): which stream runs each op (schedule.hpp)
  std::size_t workspace_slice = 0;    // cuDNN's workspace per stream (stream t: slice t)
  std::vector<course::Stream> aux;    // schedule.streams - 1 auxiliary streams
  std::vector<course::Event> events;  // per op, recorded where schedule.record says
  course::Event fork{cudaEventDisableTiming};  // the caller's stream, when enqueue begins
};

ExecutionContext::ExecutionContext(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ExecutionContext::~ExecutionContext() = default;

std::unique_ptr<ExecutionContext> Engine::create_execution_context() const {
  auto impl = std::make_unique<ExecutionContext::Impl>();
  // The context keeps its engine alive (TensorRT requires the engine to outlive its contexts).
  impl->engine = shared_from_this();
  impl->arena =
      course::DeviceBuffer<std::uint8_t>(std::max<std::size_t>(impl_->plan.graph.arena_bytes, 256));
  if (impl_->plan.workspace_bytes > 0) {
    impl->workspace = course::DeviceBuffer<std::uint8_t>(impl_->plan.workspace_bytes);
  }
  impl->batch = impl_->plan.profile.opt_batch;
  return std::unique_ptr<ExecutionContext>(new ExecutionContext(std::move(impl)));
}

void ExecutionContext::set_input_shape(int batch) {
  const OptimizationProfile p = impl_->engine->profile();
  if (batch < p.min_batch || batch > p.max_batch) {
    throw std::invalid_argument("set_input_shape: batch " + std::to_string(batch) +
                                " is outside the optimization profile [" +
                                std::to_string(p.min_batch) + ", " + std::to_string(p.max_batch) +
                                "] the engine was built for");
  }
  if (batch != impl_->batch) {
    impl_->batch = batch;
    impl_->prepared = false;
  }
}

int ExecutionContext::batch() const {
  return impl_->batch;
}

void ExecutionContext::set_tensor_address(const std::string& name, void* ptr) {
  if (ptr == nullptr) {
    throw std::invalid_argument("set_tensor_address: null address for tensor '" + name + "'");
  }
  if (name == "images") {
    if (impl_->images != ptr) impl_->prepared = false;
    impl_->images = static_cast<const float*>(ptr);
  } else if (name == "output0") {
    if (impl_->output != ptr) impl_->prepared = false;
    impl_->output = static_cast<float*>(ptr);
  } else {
    throw std::invalid_argument(
        "set_tensor_address: the engine has tensors 'images' and "
        "'output0', not '" +
        name + "'");
  }
}

const EngineGraph& ExecutionContext::graph() const {
  return impl_->engine->impl().plan.graph;
}

const void* ExecutionContext::buffer_address(int index) const {
  const EngineGraph& g = graph();
  if (index < 0 || index >= static_cast<int>(g.buffers.size())) {
    throw std::invalid_argument("buffer_address: index " + std::to_string(index) + " outside [0, " +
                                std::to_string(g.buffers.size()) + ")");
  }
  return impl_->arena.data() + g.buffers[static_cast<std::size_t>(index)].offset;
}

namespace {
void prepare(ExecutionContext::Impl& c) {
  if (c.images == nullptr || c.output == nullptr) {
    throw std::logic_error(std::string("enqueue: set_tensor_address(\"") +
                           (c.images == nullptr ? "images" : "output0") + "\", ...) first");
  }
  const Engine::Impl& e = c.engine->impl();
  const EngineGraph& g = e.plan.graph;
  Bindings b{c.arena.data(), c.images, c.output, c.batch, e.plan.precision};
  c.ops.clear();
  std::size_t workspace_needed = 0;
  for (std::size_t i = 0; i < e.plan.ops.size(); ++i) {
    const PlanOp& po = e.plan.ops[i];
    LaunchOp lo;
    lo.kind = po.op.kind;
    lo.tactic = po.tactic;
    lo.dtype = e.plan.precision;
    switch (po.op.kind) {
      case OpKind::conv:
        lo.conv = conv_args(g.ops[i], g, b, e.op_weights[i]);
        if (po.tactic.kind == PlanTactic::Kind::cudnn) {
          lo.cudnn = std::make_shared<CudnnConv>(lo.conv, e.plan.precision);
          c.uses_cudnn = true;
          // The plan sized the workspace for every batch of the profile; should cuDNN ask for
          // more at this batch (another cuDNN version than the builder's), grow it here, before
          // any launch or capture, rather than fail with CUDNN_STATUS_BAD_PARAM at enqueue.
          workspace_needed =
              std::max(workspace_needed, lo.cudnn->workspace_bytes(po.tactic.cudnn_algo));
        } else {
          lo.kernel = &conv_kernel_by_symbol(po.tactic.symbol);
        }
        break;
      case OpKind::max_pool:
      case OpKind::upsample:
      case OpKind::copy:
        lo.pool = pool_args(g.ops[i], g, b);
        break;
      case OpKind::detect:
        lo.detect = detect_args(g.ops[i], g, b);
        break;
    }
    c.ops.push_back(std::move(lo));
  }
  // The streams: independent layers on auxiliary streams, ordered by events where they share
  // memory (schedule.hpp). Streams and events are created here, never inside a capture. cuDNN's
  // workspace orders nothing: each stream gets its own slice of it (the ops of one stream run in
  // order anyway), so two cuDNN convolutions on two streams may overlap.
  const std::size_t element = e.plan.precision == DType::f16 ? 2 : 4;
  c.schedule = schedule_streams(
      op_accesses(g, std::vector<bool>(c.ops.size(), false), e.plan.profile.max_batch, element),
      1 + c.max_aux_streams);
  c.workspace_slice = (std::max(workspace_needed, e.plan.workspace_bytes) + 255) / 256 * 256;
  const std::size_t workspace_total =
      c.workspace_slice * static_cast<std::size_t>(c.schedule.streams);
  if (workspace_total > c.workspace.bytes()) {
    c.workspace = course::DeviceBuffer<std::uint8_t>(workspace_total);
  }
  while (static_cast<int>(c.aux.size()) < c.schedule.streams - 1) c.aux.emplace_back();
  while (c.events.size() < c.ops.size()) c.events.emplace_back(cudaEventDisableTiming);
  c.prepared = true;
  c.graph_valid = false;
}
}  // namespace

void ExecutionContext::enqueue(cudaStream_t stream) {
  Impl& c = *impl_;
  if (!c.prepared) prepare(c);
  if (c.uses_cudnn) {
    // The calling thread's cuDNN handle, created now if this thread has none: never inside a
    // capture that the caller may have begun (lesson 09 captures enqueue into its own graphs).
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
    if (status == cudaStreamCaptureStatusNone) cudnn_prepare_thread();
  }
  KernelLibrary& lib = *c.engine->impl().lib;
  const Plan& plan = c.engine->impl().plan;
  const StreamSchedule& s = c.schedule;
  const bool several = s.streams > 1;
  auto stream_of = [&](std::size_t i) {
    const int t = s.stream[i];
    return t == 0 ? stream : c.aux[static_cast<std::size_t>(t - 1)].get();
  };
  if (several) {
    // Fork: every auxiliary stream starts after what the caller queued before (the input's
    // upload, lesson 09's letterbox). In a capture this pulls them into the caller's graph.
    c.fork.record(stream);
    for (int t = 1; t < s.streams; ++t) {
      CUDA_CHECK(cudaStreamWaitEvent(c.aux[static_cast<std::size_t>(t - 1)], c.fork, 0));
    }
  }
  for (std::size_t i = 0; i < c.ops.size(); ++i) {
    const cudaStream_t st = stream_of(i);
    try {
      for (int w : s.waits[i]) {
        CUDA_CHECK(cudaStreamWaitEvent(st, c.events[static_cast<std::size_t>(w)], 0));
      }
      // The first op follows whatever the caller queued before (a copy, lesson 09's letterbox):
      // launched as usual. With one stream the others may start while the op before them
      // drains (PDL); on several streams PDL is not used (an op may follow an event).
      launch(lib, c.ops[i], st,
             c.workspace.data() + c.workspace_slice * static_cast<std::size_t>(s.stream[i]),
             c.workspace_slice, c.programmatic && !several && i > 0);
      if (s.record[i]) c.events[i].record(st);
    } catch (const std::exception& e) {
      // Say which layer and tactic, as TensorRT's error log does.
      throw std::runtime_error("enqueue: layer " + plan.ops[i].op.name + " (tactic " +
                               plan.ops[i].tactic.label + "): " + e.what());
    }
  }
  // Join: the caller's stream waits for the last op of every auxiliary stream, so that work
  // queued after enqueue (and cudaStreamEndCapture) sees the whole network.
  for (int t = 1; t < s.streams; ++t) {
    const int l = s.last_op[static_cast<std::size_t>(t)];
    CUDA_CHECK(cudaStreamWaitEvent(stream, c.events[static_cast<std::size_t>(l)], 0));
  }
}

void ExecutionContext::set_aux_streams(int n) {
  if (n < 0 || n > kMaxAuxStreams) {
    throw std::invalid_argument("set_aux_streams: expected 0 .. " + std::to_string(kMaxAuxStreams) +
                                " auxiliary streams, got " + std::to_string(n));
  }
  Impl& c = *impl_;
  if (n != c.max_aux_streams) {
    c.max_aux_streams = n;
    c.prepared = false;  // a new schedule, and a new capture
  }
}
int ExecutionContext::aux_streams() const {
  return impl_->max_aux_streams;
}
int ExecutionContext::streams_used() {
  Impl& c = *impl_;
  if (!c.prepared) prepare(c);
  return c.schedule.streams;
}

void ExecutionContext::set_programmatic_launch(bool on) {
  Impl& c = *impl_;
  const bool allowed = on && c.engine->impl().plan.cc_major >= 9;
  if (allowed != c.programmatic) c.graph_valid = false;  // the captured graph has the old edges
  c.programmatic = allowed;
}
bool ExecutionContext::programmatic_launch() const {
  return impl_->programmatic;
}

void ExecutionContext::enqueue_graph(cudaStream_t stream) {
  Impl& c = *impl_;
  if (stream == nullptr) {
    throw std::invalid_argument(
        "enqueue_graph: the legacy default stream cannot be captured; "
        "give a created stream");
  }
  if (!c.prepared) prepare(c);
  if (c.uses_cudnn) cudnn_prepare_thread();  // before the capture: cudnnCreate allocates
  if (!c.graph_valid) {
    // Capture the enqueue once; replaying costs one launch. A new batch or address re-captures
    // and updates the executable graph in place when the topology allows (lesson 08).
    if (c.graph) {
      c.graph.recapture(stream, [&] { enqueue(stream); });
    } else {
      c.graph.capture(stream, [&] { enqueue(stream); });
    }
    c.graph_valid = true;
    ++c.graph_captures;
  }
  c.graph.launch(stream);
}

}  // namespace lesson12
