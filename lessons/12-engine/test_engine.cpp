// Lesson 12 tests: the plan format, the metrics, and the engine on the GPU against the CPU
// reference (FP64 accumulation) and PyTorch's golden outputs.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/cuda_check.hpp"
#include "common/memory.hpp"
#include "common/stream.hpp"
#include "common/testing.hpp"
#include "engine.hpp"
#include "evaluate.hpp"
#include "metrics.hpp"
#include "plan.hpp"

using namespace lesson12;
using course::testing::Contains;

namespace {

const WeightsFile& trained_weights() {
  static const WeightsFile w =
      read_weights(std::string(LESSON12_DATA_DIR) + "/yolov8n_scenes.weights");
  return w;
}

// PyTorch's outputs for a few scenes (train/train_detector.py writes data/golden.bin):
//   course-detector-golden 1
//   case NAME SEED HEIGHT WIDTH ROWS COLS OFFSET      (one line per case)
//   data BYTES
// then '\n' and float32 data; each case ROWS x COLS at OFFSET bytes into the data.
struct GoldenCase {
  std::string name;
  std::uint64_t seed = 0;
  int h = 0, w = 0, rows = 0, cols = 0;
  std::vector<float> output;
};

std::vector<GoldenCase> read_golden() {
  const std::string path = std::string(LESSON12_DATA_DIR) + "/golden.bin";
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path);
  std::string line;
  std::getline(f, line);
  if (line != "course-detector-golden 1") throw std::runtime_error(path + ": bad first line");
  std::vector<GoldenCase> cases;
  std::vector<std::size_t> offsets;
  std::size_t data_bytes = 0;
  while (std::getline(f, line)) {
    std::istringstream s(line);
    std::string key;
    s >> key;
    if (key == "case") {
      GoldenCase c;
      std::size_t off = 0;
      s >> c.name >> c.seed >> c.h >> c.w >> c.rows >> c.cols >> off;
      cases.push_back(c);
      offsets.push_back(off);
    } else if (key == "data") {
      s >> data_bytes;
      break;
    }
  }
  std::vector<char> data(data_bytes);
  f.read(data.data(), static_cast<std::streamsize>(data_bytes));
  if (static_cast<std::size_t>(f.gcount()) != data_bytes) {
    throw std::runtime_error(path + ": truncated data");
  }
  for (std::size_t i = 0; i < cases.size(); ++i) {
    GoldenCase& c = cases[i];
    c.output.resize(static_cast<std::size_t>(c.rows) * c.cols);
    std::memcpy(c.output.data(), data.data() + offsets[i], c.output.size() * sizeof(float));
  }
  return cases;
}

// Runs `engine` on `images` (batch x [3, h, w]) and returns the output (batch x [4 + C, N]).
std::vector<float> run(const Engine& engine, ExecutionContext& ctx,
                       const std::vector<float>& images, int batch, bool graph = false) {
  course::Stream s;
  const std::size_t out =
      static_cast<std::size_t>(4 + engine.num_classes()) * engine.num_candidates() * batch;
  course::DeviceBuffer<float> x = course::to_device(images);
  course::DeviceBuffer<float> y(out);
  ctx.set_input_shape(batch);
  ctx.set_tensor_address("images", x.data());
  ctx.set_tensor_address("output0", y.data());
  if (graph) {
    ctx.enqueue_graph(s.get());
  } else {
    ctx.enqueue(s.get());
  }
  CUDA_CHECK(cudaStreamSynchronize(s.get()));
  return course::to_host(y);
}

std::vector<float> scenes(std::uint64_t first, int count, int h, int w) {
  std::vector<float> all;
  for (int i = 0; i < count; ++i) {
    const std::vector<float> x = scene_input(first + i, w, h);
    all.insert(all.end(), x.begin(), x.end());
  }
  return all;
}

// Relative L2 error ||a - b|| / ||b|| (b the reference).
double rel_l2(const float* a, const float* b, std::size_t n) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += static_cast<double>(b[i]) * b[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

std::vector<float> half_to_float(const std::vector<std::uint16_t>& h) {
  std::vector<float> f(h.size());
  for (std::size_t i = 0; i < h.size(); ++i) {
    const std::uint32_t sign = (h[i] >> 15) & 1u, exp = (h[i] >> 10) & 0x1Fu, man = h[i] & 0x3FFu;
    float v;
    if (exp == 0) {
      v = std::ldexp(static_cast<float>(man), -24);
    } else if (exp == 31) {
      v = man ? NAN : INFINITY;
    } else {
      v = std::ldexp(static_cast<float>(man | 0x400u), static_cast<int>(exp) - 25);
    }
    f[i] = sign ? -v : v;
  }
  return f;
}

}  // namespace

// ------------------------------------------------------------------------------- CPU tests

TEST_CASE("crc32 is the IEEE 802.3 CRC (check value of \"123456789\")", "[plan]") {
  const char* s = "123456789";
  CHECK(crc32(reinterpret_cast<const std::uint8_t*>(s), 9) == 0xCBF43926u);
  CHECK(crc32(nullptr, 0) == 0u);
}

TEST_CASE("convert_weights rounds to FP16 to nearest even", "[plan]") {
  const std::vector<float> w = {1.0f, 1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 65504.0f, -2.0f};
  const std::vector<std::uint8_t> b = convert_weights(w, DType::f16);
  REQUIRE(b.size() == 10);
  std::vector<std::uint16_t> h(5);
  std::memcpy(h.data(), b.data(), 10);
  CHECK(h[0] == 0x3C00);  // 1
  CHECK(h[1] == 0x3C00);  // halfway between 1 and 1 + 2^-10: to even (1)
  CHECK(h[2] == 0x3C02);  // halfway between 1 + 2^-10 and 1 + 2^-9: to even
  CHECK(h[3] == 0x7BFF);  // the largest half
  CHECK(h[4] == 0xC000);
  CHECK(convert_weights(w, DType::f32).size() == 20);
}

namespace {
Plan small_plan(int h = 64, int w = 96) {
  const NetworkDefinition net = yolov8n(trained_weights(), h, w);
  Plan p;
  p.gpu_name = "Test GPU";
  p.cc_major = 9;
  p.cc_minor = 0;
  p.sm_count = 132;
  p.precision = DType::f16;
  p.profile = {1, 4, 8};
  p.graph = optimize(net);
  plan_memory(p.graph, 8, 2);
  for (const FusedOp& op : p.graph.ops) {
    PlanOp po;
    po.op = op;
    po.op.weight.clear();
    po.op.bias.clear();
    po.weight = convert_weights(op.weight, DType::f16);
    po.bias = op.bias;
    po.tactic.symbol = "some_kernel";
    po.tactic.label = "test";
    p.ops.push_back(po);
  }
  p.code = {1, 2, 3, 4, 5};
  p.code_targets = "none";
  return p;
}
}  // namespace

TEST_CASE("a plan survives serialize -> parse, field by field", "[plan]") {
  const Plan p = small_plan();
  const std::vector<std::uint8_t> bytes = serialize_plan(p);
  const Plan q = parse_plan(bytes);
  CHECK(q.gpu_name == p.gpu_name);
  CHECK(q.cc_major == 9);
  CHECK(q.sm_count == 132);
  CHECK(q.profile.opt_batch == 4);
  CHECK(q.graph.arena_bytes == p.graph.arena_bytes);
  REQUIRE(q.ops.size() == p.ops.size());
  REQUIRE(q.graph.buffers.size() == p.graph.buffers.size());
  for (std::size_t i = 0; i < p.ops.size(); ++i) {
    INFO("op " << p.ops[i].op.name);
    CHECK(q.ops[i].op.name == p.ops[i].op.name);
    CHECK(q.ops[i].weight == p.ops[i].weight);
    CHECK(q.ops[i].bias == p.ops[i].bias);
    CHECK(q.ops[i].op.output.buffer == p.ops[i].op.output.buffer);
    CHECK(q.ops[i].op.output.channel_offset == p.ops[i].op.output.channel_offset);
    CHECK(q.ops[i].op.has_residual == p.ops[i].op.has_residual);
  }
  for (std::size_t i = 0; i < p.graph.buffers.size(); ++i) {
    CHECK(q.graph.buffers[i].offset == p.graph.buffers[i].offset);
  }
  CHECK(q.code == p.code);
  CHECK(serialize_plan(q) == bytes);
  // The network's full size passes the consistency checks too.
  CHECK_NOTHROW(parse_plan(serialize_plan(small_plan(kInputSize, kInputSize))));
}

TEST_CASE("a damaged plan is refused with a message naming what was expected", "[plan]") {
  const std::vector<std::uint8_t> bytes = serialize_plan(small_plan());
  SECTION("not a plan") {
    std::vector<std::uint8_t> b = bytes;
    b[0] = 'X';
    CHECK_THROWS_WITH(parse_plan(b), Contains("not a plan"));
    CHECK_THROWS_AS(parse_plan({}), PlanError);
  }
  SECTION("truncated anywhere") {
    for (std::size_t cut = 1; cut < bytes.size(); cut += 997) {
      INFO("cut at " << cut);
      std::vector<std::uint8_t> b(bytes.begin(), bytes.begin() + static_cast<long>(cut));
      CHECK_THROWS_AS(parse_plan(b), PlanError);
    }
    std::vector<std::uint8_t> b(bytes.begin(), bytes.end() - 1);
    CHECK_THROWS_WITH(parse_plan(b), Contains("truncated"));
  }
  SECTION("one bit flipped in the body") {
    for (std::size_t at = 200; at < bytes.size(); at += 4099) {
      std::vector<std::uint8_t> b = bytes;
      b[at] ^= 0x04;
      INFO("bit flipped at byte " << at);
      CHECK_THROWS_WITH(parse_plan(b), Contains("corrupted"));
    }
  }
  SECTION("another course version") {
    Plan p = small_plan();
    p.course_version = "cuda-deploy-lessons 0.9";
    CHECK_THROWS_WITH(parse_plan(serialize_plan(p)), Contains("cuda-deploy-lessons 0.9"));
  }
  SECTION("another format") {
    Plan p = small_plan();
    p.format = kPlanFormat + 1;
    CHECK_THROWS_WITH(parse_plan(serialize_plan(p)), Contains("rebuild"));
  }
  SECTION("consistent checksum, inconsistent contents (a plan written by hand)") {
    Plan p = small_plan();
    p.graph.buffers[3].offset = p.graph.arena_bytes;  // past the arena
    CHECK_THROWS_WITH(parse_plan(serialize_plan(p)), Contains("does not fit"));
    p = small_plan();
    p.ops[5].op.output.channel_offset += 1000;  // outside its buffer
    p.graph.ops[5].output.channel_offset += 1000;
    CHECK_THROWS_WITH(parse_plan(serialize_plan(p)), Contains("lies outside buffer"));
    p = small_plan();
    p.profile = {4, 2, 8};
    CHECK_THROWS_WITH(parse_plan(serialize_plan(p)), Contains("1 <= min <= opt <= max"));
  }
  SECTION("trailing bytes") {
    std::vector<std::uint8_t> b = bytes;
    b.push_back(0);
    CHECK_THROWS_AS(parse_plan(b), PlanError);
  }
}

TEST_CASE("average precision: the 101-point COCO interpolation", "[metrics]") {
  // Perfect ranking: precision 1 at every recall.
  CHECK(average_precision({{0.9f, true}, {0.8f, true}}, 2) == course::testing::Approx(1.0));
  // One of two found, no false positive: precision 1 up to recall 0.5 (51 of 101 points).
  CHECK(average_precision({{0.9f, true}}, 2) == course::testing::Approx(51.0 / 101));
  // A false positive ranked first: precision 0.5 at recall 0.5 and 2/3 at recall 1 -> the
  // envelope is 2/3 everywhere.
  CHECK(average_precision({{0.9f, false}, {0.8f, true}, {0.7f, true}}, 2) ==
        course::testing::Approx(2.0 / 3));
  CHECK(average_precision({}, 3) == 0.0);
  CHECK(average_precision({{0.5f, true}}, 0) == 0.0);
}

TEST_CASE("mAP of perfect, shifted and missing detections", "[metrics]") {
  auto det = [](int cls, float x1, float y1, float x2, float y2, float score, int index) {
    lesson08::Detection d{};
    d.box = {x1, y1, x2, y2};
    d.class_id = cls;
    d.score = score;
    d.index = index;
    return d;
  };
  std::vector<FrameEval> f(2);
  f[0].truth = {{0, 10, 10, 50, 50}, {1, 100, 100, 140, 160}};
  f[1].truth = {{0, 0, 0, 20, 20}};
  f[0].detections = {det(0, 10, 10, 50, 50, 0.9f, 0), det(1, 100, 100, 140, 160, 0.8f, 1)};
  f[1].detections = {det(0, 0, 0, 20, 20, 0.7f, 0)};
  MapResult m = mean_average_precision(f, 3);
  CHECK(m.map50 == course::testing::Approx(1.0));
  CHECK(m.map50_95 == course::testing::Approx(1.0));
  CHECK(m.ap50_per_class[2] == -1.0);  // no truth of class 2: not in the mean
  // Shift class 1's box by 10 px in x: IoU = 30 * 60 / (2 * 40 * 60 - 30 * 60) = 0.6, a hit at
  // 0.5, 0.55 and 0.6 only (3 of 10 thresholds): class 1's AP over thresholds is 0.3.
  f[0].detections[1].box = {110, 100, 150, 160};
  m = mean_average_precision(f, 3);
  CHECK(m.map50 == course::testing::Approx(1.0));
  CHECK(m.map50_95 == course::testing::Approx((1.0 + 0.3) / 2));
  // A class detected with the wrong label: a miss and a false positive.
  f[1].detections[0].class_id = 1;
  m = mean_average_precision(f, 3);
  CHECK(m.ap50_per_class[0] == course::testing::Approx(51.0 / 101));
  CHECK_THROWS_AS(mean_average_precision(f, 0), std::invalid_argument);
  f[0].truth[0].class_id = 7;
  CHECK_THROWS_WITH(mean_average_precision(f, 3), Contains("outside [0, 3)"));
}

// ------------------------------------------------------------------------------- GPU tests

TEST_CASE(
    "every kernel family, through the whole network, matches the CPU reference layer by "
    "layer",
    "[gpu][engine]") {
  // A small input (the network is fully convolutional) and a batch of 2 different scenes.
  const int h = 96, w = 160, batch = 2;
  const NetworkDefinition net = yolov8n(trained_weights(), h, w);
  const std::vector<float> images = scenes(7, batch, h, w);
  // The oracle: the optimized graph on the CPU with FP64 accumulation, per image.
  const EngineGraph ref_graph = optimize(net);
  std::vector<std::vector<std::vector<float>>> ref_buffers(batch);
  std::vector<std::vector<float>> ref_out(batch);
  const std::size_t in1 = 3ull * h * w;
  for (int b = 0; b < batch; ++b) {
    ref_out[b] = run_engine_graph_reference(
        ref_graph, std::vector<float>(images.begin() + b * in1, images.begin() + (b + 1) * in1),
        &ref_buffers[b]);
  }
  const auto [precision, family, bound] =
      GENERATE(std::make_tuple(DType::f32, std::string(""), 1e-5),
               std::make_tuple(DType::f32, std::string("simt"), 1e-5),
               std::make_tuple(DType::f32, std::string("direct"), 1e-5),
               std::make_tuple(DType::f16, std::string(""), 2e-2),
               std::make_tuple(DType::f16, std::string("mma 128"), 2e-2),
               std::make_tuple(DType::f16, std::string("mma 64"), 2e-2),
               std::make_tuple(DType::f16, std::string("mma 32"), 2e-2),
               std::make_tuple(DType::f16, std::string("split-K"), 2e-2),
               std::make_tuple(DType::f16, std::string("direct"), 2e-2),
               std::make_tuple(DType::f16, std::string("cudnn"), 2e-2));
  if (family == "cudnn" && !cudnn_available()) {
    WARN("built without cuDNN: the cuDNN tactics are not tested");
    return;
  }
  if (family == "split-K") {
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    if (prop.major < 9) {
      WARN("the split-K tactics need thread-block clusters (compute capability 9.0): not tested");
      return;
    }
  }
  INFO((precision == DType::f16 ? "FP16" : "FP32") << " engine, tactics '" << family << "'");
  BuilderConfig cfg;
  cfg.precision = precision;
  cfg.profile = {1, batch, 4};
  cfg.timing_iterations = 1;
  cfg.only_tactic = family;
  cfg.keep_all_buffers = true;  // no memory reuse: every layer's output is still there to check
  const std::vector<std::uint8_t> bytes = build_plan(net, cfg);
  // The family must really be in the plan (a renamed kernel would otherwise test the default).
  int in_family = 0;
  for (const PlanOp& op : parse_plan(bytes).ops) {
    in_family += op.tactic.label.compare(0, family.size(), family) == 0;
  }
  INFO(in_family << " layers run a '" << family << "' tactic");
  CHECK(in_family >= (family.empty() ? 69 : 1));
  const std::shared_ptr<Engine> engine = Engine::deserialize(bytes);
  auto ctx = engine->create_execution_context();
  const std::vector<float> out = run(*engine, *ctx, images, batch);
  // Every buffer of the engine against the reference's: relative L2 error, per image. The FP16
  // bound: each layer rounds its output to FP16 (relative 2^-11) and the error grows through
  // ~60 layers; 2e-2 is about 40x one rounding. FP32: float accumulation over at most
  // 9 x 256 terms per output, ~1e-6 per layer.
  const EngineGraph& g = ctx->graph();
  for (std::size_t i = 0; i < g.buffers.size(); ++i) {
    const BufferDesc& d = g.buffers[i];
    const std::size_t per_image = d.elements_per_image();
    std::vector<float> got(per_image * batch);
    if (precision == DType::f32) {
      CUDA_CHECK(cudaMemcpy(got.data(), ctx->buffer_address(static_cast<int>(i)),
                            got.size() * sizeof(float), cudaMemcpyDeviceToHost));
    } else {
      std::vector<std::uint16_t> h16(got.size());
      CUDA_CHECK(cudaMemcpy(h16.data(), ctx->buffer_address(static_cast<int>(i)), h16.size() * 2,
                            cudaMemcpyDeviceToHost));
      got = half_to_float(h16);
    }
    for (int b = 0; b < batch; ++b) {
      const double e = rel_l2(got.data() + b * per_image, ref_buffers[b][i].data(), per_image);
      INFO("buffer " << d.name << " image " << b << ": relative L2 error " << e);
      CHECK(e <= bound);
    }
  }
  const std::size_t per_out = ref_out[0].size();
  for (int b = 0; b < batch; ++b) {
    const double e = rel_l2(out.data() + b * per_out, ref_out[b].data(), per_out);
    INFO("output image " << b << ": relative L2 error " << e);
    CHECK(e <= bound);
  }
}

TEST_CASE("the 640x640 engine reproduces PyTorch's golden outputs", "[gpu][engine]") {
  const std::vector<GoldenCase> golden = read_golden();
  const NetworkDefinition net = yolov8n(trained_weights(), kInputSize, kInputSize);
  for (DType precision : {DType::f32, DType::f16}) {
    BuilderConfig cfg;
    cfg.precision = precision;
    cfg.profile = {1, 1, 2};
    cfg.timing_iterations = 1;
    const std::shared_ptr<Engine> engine = Engine::deserialize(build_plan(net, cfg));
    auto ctx = engine->create_execution_context();
    for (const GoldenCase& c : golden) {
      if (c.h != kInputSize || c.w != kInputSize) continue;
      INFO((precision == DType::f16 ? "FP16" : "FP32") << " engine, golden case " << c.name);
      const std::vector<float> y = run(*engine, *ctx, scene_input(c.seed, c.w, c.h), 1);
      REQUIRE(y.size() == c.output.size());
      // Scores on every candidate; boxes on the candidates PyTorch scores above 0.1 (a
      // background candidate's box is never used, and its DFL distribution is flat, so it moves
      // most with rounding). FP32: 1e-3 and 0.05 px. FP16: activations rounded to 11 bits at every
      // one of ~60 layers: 0.02 on a score and a quarter of a grid cell on a box.
      const OutputError e = compare_outputs(y, c.output, c.rows - 4, c.h, c.w);
      INFO("max |error|: scores " << e.max_score << ", boxes " << e.max_box_px << " px ("
                                  << e.max_box_cells << " cells) over " << e.confident
                                  << " confident candidates");
      CHECK(e.confident > 0);
      CHECK(e.max_score <= (precision == DType::f32 ? 1e-3 : 0.02));
      if (precision == DType::f32) {
        CHECK(e.max_box_px <= 0.05);
      } else {
        CHECK(e.max_box_cells <= 0.25);
      }
      // And the detections a deployment would keep are the same.
      lesson08::OutputSpec spec{lesson08::Layout::yolov8, c.cols, c.rows - 4};
      const auto lb = course::make_letterbox(c.w, c.h, c.w, c.h);
      const auto ours = lesson08::postprocess_cpu(y.data(), y.size(), spec, lb, deploy_config());
      const auto theirs =
          lesson08::postprocess_cpu(c.output.data(), c.output.size(), spec, lb, deploy_config());
      CHECK(same_detections(ours.detections, theirs.detections, 0.9f));
      CHECK(!theirs.detections.empty());
    }
  }
}

TEST_CASE("an engine is a plan: serialized, deserialized, the same bits out", "[gpu][engine]") {
  const int h = 64, w = 96;
  const NetworkDefinition net = yolov8n(trained_weights(), h, w);
  BuilderConfig cfg;
  cfg.profile = {1, 2, 3};
  cfg.timing_iterations = 1;
  const std::vector<std::uint8_t> bytes = build_plan(net, cfg);
  const std::shared_ptr<Engine> a = Engine::deserialize(bytes);
  const std::shared_ptr<Engine> b = Engine::deserialize(serialize_plan(parse_plan(bytes)));
  const std::vector<float> x = scenes(3, 3, h, w);
  auto ca = a->create_execution_context();
  auto cb = b->create_execution_context();
  CHECK(run(*a, *ca, x, 3) == run(*b, *cb, x, 3));
  // The device memory a context needs is the planned arena (plus any cuDNN workspace).
  CHECK(a->device_memory_size() >= parse_plan(bytes).graph.arena_bytes);
}

TEST_CASE(
    "a batch of 3 gives each image what a batch of 1 gives it; the graph replays the "
    "stream's launches",
    "[gpu][engine]") {
  const int h = 64, w = 64;
  const NetworkDefinition net = yolov8n(trained_weights(), h, w);
  BuilderConfig cfg;
  cfg.profile = {1, 3, 4};
  cfg.timing_iterations = 1;
  cfg.tactic_sources = kCourseKernels;  // cuDNN may pick batch-dependent algorithms
  const std::shared_ptr<Engine> e = Engine::deserialize(build_plan(net, cfg));
  auto ctx = e->create_execution_context();
  const std::vector<float> x = scenes(11, 3, h, w);
  const std::vector<float> y3 = run(*e, *ctx, x, 3);
  const std::size_t in1 = 3ull * h * w, out1 = y3.size() / 3;
  for (int b = 0; b < 3; ++b) {
    const std::vector<float> y1 =
        run(*e, *ctx, std::vector<float>(x.begin() + b * in1, x.begin() + (b + 1) * in1), 1);
    INFO("image " << b);
    CHECK(std::equal(y1.begin(), y1.end(), y3.begin() + b * out1));
  }
  CHECK(run(*e, *ctx, x, 3, true) == y3);  // graph, batch 3
  CHECK(run(*e, *ctx, x, 2, true) == std::vector<float>(y3.begin(), y3.begin() + 2 * out1));

  // Programmatic dependent launch (an option, compute capability 9.0+) changes when kernels
  // start, never what they compute: with it, the same bits, on a stream and in a graph.
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  CHECK_FALSE(ctx->programmatic_launch());
  ctx->set_programmatic_launch(true);
  CHECK(ctx->programmatic_launch() == (prop.major >= 9));
  CHECK(run(*e, *ctx, x, 3) == y3);
  CHECK(run(*e, *ctx, x, 3, true) == y3);
  ctx->set_programmatic_launch(false);
  CHECK(run(*e, *ctx, x, 3, true) == y3);
}

TEST_CASE("auxiliary streams change when layers run, never what they compute", "[gpu][engine]") {
  // Every tactic source, so that cuDNN's convolutions (each stream with its own workspace) are in
  // the schedule too where the builder picks them; several runs, since a missing event between
  // two streams would show as a result that changes from run to run.
  const int h = 96, w = 128;
  const NetworkDefinition net = yolov8n(trained_weights(), h, w);
  BuilderConfig cfg;
  cfg.profile = {1, 2, 2};
  cfg.timing_iterations = 1;
  const std::shared_ptr<Engine> e = Engine::deserialize(build_plan(net, cfg));
  auto ctx = e->create_execution_context();
  const std::vector<float> x = scenes(21, 2, h, w);
  CHECK(ctx->aux_streams() == ExecutionContext::kDefaultAuxStreams);
  ctx->set_aux_streams(0);
  ctx->set_input_shape(2);
  const std::vector<float> one = run(*e, *ctx, x, 2);
  REQUIRE(run(*e, *ctx, x, 2) == one);
  for (int aux : {1, 3, 8}) {
    INFO(aux << " auxiliary streams");
    ctx->set_aux_streams(aux);
    for (int rep = 0; rep < 3; ++rep) {
      CHECK(run(*e, *ctx, x, 2) == one);
      CHECK(run(*e, *ctx, x, 2, true) == one);
    }
  }
  // Batch 1 (cuDNN may choose another algorithm per batch: compared with itself on one stream).
  const std::vector<float> x1(x.begin(), x.begin() + 3 * h * w);
  ctx->set_aux_streams(0);
  const std::vector<float> one1 = run(*e, *ctx, x1, 1);
  ctx->set_aux_streams(ExecutionContext::kDefaultAuxStreams);
  CHECK(run(*e, *ctx, x1, 1, true) == one1);
  CHECK(run(*e, *ctx, x1, 1) == one1);
  CHECK(ctx->streams_used() > 1);  // the network has branches to run side by side

  // A plan with the tightest arena (plain liveness): on auxiliary streams its memory reuse is
  // ordered by events, and the bits are still those of one stream.
  cfg.max_aux_streams = 0;
  const std::shared_ptr<Engine> tight = Engine::deserialize(build_plan(net, cfg));
  auto tctx = tight->create_execution_context();
  tctx->set_aux_streams(0);
  const std::vector<float> tight_one = run(*tight, *tctx, x, 2);
  tctx->set_aux_streams(ExecutionContext::kDefaultAuxStreams);
  for (int rep = 0; rep < 3; ++rep) {
    CHECK(run(*tight, *tctx, x, 2) == tight_one);
    CHECK(run(*tight, *tctx, x, 2, true) == tight_one);
  }
  CHECK_THROWS_AS(ctx->set_aux_streams(-1), std::invalid_argument);
  CHECK_THROWS_AS(ctx->set_aux_streams(ExecutionContext::kMaxAuxStreams + 1),
                  std::invalid_argument);
}

TEST_CASE("one engine, one context per thread: the same answers", "[gpu][engine]") {
  const int h = 64, w = 64;
  const NetworkDefinition net = yolov8n(trained_weights(), h, w);
  BuilderConfig cfg;
  cfg.profile = {1, 1, 2};
  cfg.timing_iterations = 1;
  cfg.tactic_sources = kCourseKernels;
  const std::shared_ptr<Engine> e = Engine::deserialize(build_plan(net, cfg));
  const std::vector<float> x = scenes(21, 2, h, w);
  std::vector<float> outs[2];
  std::string errors[2];
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      try {
        CUDA_CHECK(cudaSetDevice(0));
        auto ctx = e->create_execution_context();
        for (int rep = 0; rep < 5; ++rep) outs[t] = run(*e, *ctx, x, 2, rep % 2 == 1);
      } catch (const std::exception& err) {
        errors[t] = err.what();
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(errors[0].empty());
  CHECK(errors[1].empty());
  CHECK(outs[0] == outs[1]);
}

TEST_CASE("bad use of an engine: a clear exception, nothing launched",
          "[gpu][engine][provokes-error]") {
  const NetworkDefinition net = yolov8n(trained_weights(), 64, 64);
  BuilderConfig cfg;
  cfg.profile = {2, 2, 4};
  cfg.timing_iterations = 1;
  const std::vector<std::uint8_t> bytes = build_plan(net, cfg);
  const std::shared_ptr<Engine> e = Engine::deserialize(bytes);
  auto ctx = e->create_execution_context();
  CHECK_THROWS_WITH(ctx->set_input_shape(1), Contains("outside the optimization profile [2, 4]"));
  CHECK_THROWS_WITH(ctx->set_input_shape(5), Contains("outside the optimization profile"));
  CHECK_THROWS_WITH(ctx->set_tensor_address("input", reinterpret_cast<void*>(256)),
                    Contains("'images' and 'output0'"));
  CHECK_THROWS_AS(ctx->set_tensor_address("images", nullptr), std::invalid_argument);
  course::Stream s;
  CHECK_THROWS_WITH(ctx->enqueue(s.get()), Contains("set_tensor_address"));
  CHECK_THROWS_AS(ctx->enqueue_graph(nullptr), std::invalid_argument);
  // A plan for another GPU: the same plan stamped with another compute capability.
  Plan other = parse_plan(bytes);
  other.cc_major += 1;
  other.gpu_name = "Some Other GPU";
  CHECK_THROWS_WITH(Engine::deserialize(serialize_plan(other)), Contains("Some Other GPU"));
  CHECK_THROWS_AS(
      Engine::deserialize(std::vector<std::uint8_t>(bytes.begin(), bytes.begin() + 100)),
      PlanError);
  // Code that is not a fatbinary: the Driver API refuses it at deserialisation.
  Plan broken = parse_plan(bytes);
  broken.code.assign(64, 0x55);
  CHECK_THROWS(Engine::deserialize(serialize_plan(broken)));
  CHECK_THROWS_WITH(read_weights("/nonexistent/yolov8n.weights"), Contains("/nonexistent"));
  BuilderConfig bad;
  bad.profile = {4, 2, 8};
  CHECK_THROWS_WITH(build_plan(net, bad), Contains("min <= opt <= max"));
}

TEST_CASE("compare_outputs: scores everywhere, boxes only where the reference is confident",
          "[metrics]") {
  const int h = 64, w = 64, c = 2, n = num_candidates(h, w);  // 64 + 16 + 4 = 84 candidates
  REQUIRE(n == 84);
  std::vector<float> ref(static_cast<std::size_t>(4 + c) * n, 0.0f), got = ref;
  ref[4 * n + 70] = 0.9f;  // candidate 70 (level P4, stride 16) is confident
  got[4 * n + 70] = 0.89f;
  got[0 * n + 70] = 4.0f;   // its cx off by 4 px = a quarter of a cell
  got[1 * n + 3] = 100.0f;  // a background candidate's box: ignored
  const OutputError e = compare_outputs(got, ref, c, h, w);
  CHECK(e.confident == 1);
  CHECK(e.max_score == course::testing::Approx(0.01).margin(1e-6));
  CHECK(e.max_box_px == 4.0);
  CHECK(e.max_box_cells == 0.25);
  CHECK_THROWS_AS(compare_outputs(got, std::vector<float>(3), c, h, w), std::invalid_argument);
}
