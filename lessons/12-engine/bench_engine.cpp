// Lesson 12 benchmark: the trained detector's engines at 640x640 (make bench LESSON=12).
//
//   engine/<name>/<batch>   GPU time of one inference of `batch` images (launch latency excluded:
//                           common/bench.hpp), with the end-to-end latency as "latency_us":
//     fp16_graph            the FP16 engine, every tactic source, the whole network as one CUDA
//                           graph (built with opt batch = the batch measured)
//     fp16_stream           the same engine, one launch per layer (on the context's default
//                           auxiliary streams, like every row here)
//     fp16_cudnn_graph      the same network with every convolution on cuDNN (+ the course's
//                           epilogue kernel): the cuDNN-built engine
//     fp32_graph            the FP32 engine (no TF32)
// Counters: us_per_image, images_per_s, TFLOP/s (the network's 2 x MACs per image / GPU time).
// PyTorch's numbers for the same weights come from train/torch_baseline.py, run beside it.
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "common/bench.hpp"
#include "common/memory.hpp"
#include "common/stream.hpp"
#include "engine.hpp"

using namespace lesson12;

namespace {

const NetworkDefinition& network() {
  static const NetworkDefinition net =
      yolov8n(read_weights(std::string(LESSON12_DATA_DIR) + "/yolov8n_scenes.weights"), kInputSize,
              kInputSize);
  return net;
}

double gflop_per_image() {
  static const double g = [] {
    double total = 0;
    for (const FusedOp& op : optimize(network()).ops) {
      if (op.kind == OpKind::conv) {
        total += 2.0 * op.output.h * op.output.w * op.out_channels * op.kernel * op.kernel *
                 op.in_channels / 1e9;
      }
    }
    return total;
  }();
  return g;
}

// One engine per (precision, sources, opt batch), built once.
const Engine& engine(DType precision, unsigned sources, int batch) {
  static std::map<std::tuple<int, unsigned, int>, std::shared_ptr<Engine>> cache;
  auto key = std::make_tuple(static_cast<int>(precision), sources, batch);
  auto it = cache.find(key);
  if (it == cache.end()) {
    BuilderConfig cfg;
    cfg.precision = precision;
    cfg.tactic_sources = sources;
    cfg.profile = {1, batch, batch};
    it = cache.emplace(key, Engine::deserialize(build_plan(network(), cfg))).first;
  }
  return *it->second;
}

void run_engine(benchmark::State& state, DType precision, unsigned sources, bool graph) {
  const int batch = static_cast<int>(state.range(0));
  if ((sources & kCourseKernels) == 0 && !cudnn_available()) {
    state.SkipWithError("built without cuDNN");
    return;
  }
  const Engine& e = engine(precision, sources, batch);
  auto ctx = e.create_execution_context();
  course::Stream stream;
  course::DeviceBuffer<float> x(3ull * kInputSize * kInputSize * batch);
  course::DeviceBuffer<float> y(static_cast<std::size_t>(4 + e.num_classes()) * e.num_candidates() *
                                batch);
  CUDA_CHECK(cudaMemset(x.data(), 0, x.bytes()));
  ctx->set_input_shape(batch);
  ctx->set_tensor_address("images", x.data());
  ctx->set_tensor_address("output0", y.data());
  course::bench::Options o;
  o.latency = true;
  const double s = course::bench::time_on_gpu(state, stream.get(), o, [&] {
    if (graph) {
      ctx->enqueue_graph(stream.get());
    } else {
      ctx->enqueue(stream.get());
    }
  });
  state.counters["us_per_image"] = s * 1e6 / batch;
  state.counters["images_per_s"] = batch / s;
  state.counters["TFLOP/s"] = gflop_per_image() * batch / s / 1e3;
}

void fp16_graph(benchmark::State& s) {
  run_engine(s, DType::f16, kAllTactics, true);
}
void fp16_stream(benchmark::State& s) {
  run_engine(s, DType::f16, kAllTactics, false);
}
void fp16_cudnn_graph(benchmark::State& s) {
  run_engine(s, DType::f16, kCudnn, true);
}
void fp32_graph(benchmark::State& s) {
  run_engine(s, DType::f32, kAllTactics, true);
}

void batches(benchmark::internal::Benchmark* b) {
  course::bench::defaults(b);
  for (int batch : {1, 8, 32}) b->Arg(batch);
}

}  // namespace

BENCHMARK(fp16_graph)->Name("engine/fp16_graph")->Apply(batches);
BENCHMARK(fp16_stream)->Name("engine/fp16_stream")->Apply(batches);
BENCHMARK(fp16_cudnn_graph)->Name("engine/fp16_cudnn_graph")->Apply(batches);
BENCHMARK(fp32_graph)->Name("engine/fp32_graph")->Apply(batches);

COURSE_BENCH_MAIN();
