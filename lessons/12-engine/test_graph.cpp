// Lesson 12 tests: the builder's graph passes (CPU only). Oracles: BatchNorm folding and the
// weight layout worked by hand on one-channel convolutions; the unoptimized definition run by
// run_reference (the optimized graph must compute the same function); YOLOv8n's structure
// counted from Ultralytics' YOLOv8n layout (test_weights.hpp); and, for the memory plan, the
// definition of a valid plan (no two buffers live at the same time share a byte) and its lower
// bound (the largest sum of buffers live at one op).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/testing.hpp"
#include "graph.hpp"
#include "network.hpp"
#include "test_weights.hpp"

using namespace lesson12;
using course::testing::Contains;

namespace {

// Max over elements of |a - b| / max(1, |b|): relative for large values (box pixels), absolute
// below 1 (class probabilities).
double max_error(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double e = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    e = std::max(e, std::abs(static_cast<double>(a[i]) - b[i]) /
                        std::max(1.0, std::abs(static_cast<double>(b[i]))));
  }
  return e;
}

std::vector<float> test_image(int h, int w, unsigned salt) {
  std::vector<float> x(static_cast<std::size_t>(3) * h * w);
  for (std::size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<float>(((i * 2654435761u + salt) >> 8) % 256) / 255.0f;
  }
  return x;
}

// Builds small definitions by hand; every one ends in a one-level detect head (stride 1,
// reg_max 2, one class) fed by two 1x1 convolutions with bias, as optimize() requires.
struct Tiny {
  NetworkDefinition net;
  explicit Tiny(int c, int h, int w) {
    net.tensors.push_back({"x", c, h, w});
    net.input = 0;
    net.num_classes = 1;
  }
  const TensorDesc& desc(int t) const { return net.tensors[static_cast<std::size_t>(t)]; }
  int add(Layer l, int c, int h, int w) {
    l.output = static_cast<int>(net.tensors.size());
    net.tensors.push_back({l.name, c, h, w});
    net.layers.push_back(std::move(l));
    return net.layers.back().output;
  }
  int conv(const std::string& name, int x, int out, int k, float scale, bool bias = false) {
    Layer l;
    l.kind = LayerKind::conv;
    l.name = name;
    l.inputs = {x};
    l.kernel = k;
    l.pad = k / 2;
    const int in = desc(x).c;
    for (int i = 0; i < out * in * k * k; ++i)
      l.weight.push_back(scale * (((i * 7) % 11) - 5) / 5.0f);
    if (bias) {
      for (int o = 0; o < out; ++o) l.bias.push_back(0.1f * o - 0.05f);
    }
    return add(l, out, desc(x).h, desc(x).w);
  }
  int bn(const std::string& name, int x) {
    Layer l;
    l.kind = LayerKind::batch_norm;
    l.name = name;
    l.inputs = {x};
    for (int c = 0; c < desc(x).c; ++c) {
      l.gamma.push_back(1.0f + 0.1f * c);
      l.beta.push_back(0.2f - 0.05f * c);
      l.mean.push_back(0.1f * c);
      l.var.push_back(0.5f + 0.25f * c);
    }
    return add(l, desc(x).c, desc(x).h, desc(x).w);
  }
  int simple(LayerKind kind, const std::string& name, std::vector<int> in, int c) {
    Layer l;
    l.kind = kind;
    l.name = name;
    const TensorDesc d = desc(in[0]);
    l.inputs = std::move(in);
    return add(l, c, d.h, d.w);
  }
  int concat(const std::string& name, const std::vector<int>& in) {
    int c = 0;
    for (int t : in) c += desc(t).c;
    return simple(LayerKind::concat, name, in, c);
  }
  void detect(int x) {
    const int box = conv("head.box", x, 4 * 2, 1, 0.5f, true);
    const int cls = conv("head.cls", x, 1, 1, 0.5f, true);
    Layer d;
    d.kind = LayerKind::detect;
    d.name = "detect";
    d.inputs = {box, cls};
    d.strides = {1};
    d.reg_max = 2;
    d.num_classes = 1;
    net.output = add(d, 5, 1, desc(x).h * desc(x).w);
  }
};

int count(const EngineGraph& g, OpKind kind) {
  return static_cast<int>(std::count_if(g.ops.begin(), g.ops.end(),
                                        [&](const FusedOp& op) { return op.kind == kind; }));
}

}  // namespace

TEST_CASE("optimize: BatchNorm folding and the KRSC layout, by hand", "[graph]") {
  // One 1x1 convolution, weight 2, bias 1; BatchNorm gamma 3, beta 0.5, mean 1, var 3, eps 1:
  // scale 3 / sqrt(4) = 1.5, w' = 2 * 1.5 = 3, b' = 0.5 + (1 - 1) * 1.5 = 0.5.
  Tiny t(1, 2, 2);
  Layer c;
  c.kind = LayerKind::conv;
  c.name = "c.conv";
  c.inputs = {0};
  c.weight = {2.0f};
  c.bias = {1.0f};
  int x = t.add(c, 1, 2, 2);
  Layer b;
  b.kind = LayerKind::batch_norm;
  b.name = "c.bn";
  b.inputs = {x};
  b.gamma = {3.0f};
  b.beta = {0.5f};
  b.mean = {1.0f};
  b.var = {3.0f};
  b.eps = 1.0f;
  x = t.add(b, 1, 2, 2);
  // Two 3x3 convolutions, 1 -> 2 and 2 -> 2; the second's OIHW weight (o, i, r, s) is
  // o*1000 + i*100 + r*10 + s, which KRSC puts at ((o * 3 + r) * 3 + s) * 2 + i.
  Layer k;
  k.kind = LayerKind::conv;
  k.name = "k.conv";
  k.inputs = {x};
  k.kernel = 3;
  k.pad = 1;
  for (int o = 0; o < 2; ++o) {
    for (int r = 0; r < 3; ++r) {
      for (int s = 0; s < 3; ++s) k.weight.push_back(static_cast<float>(o * 1000 + r * 10 + s));
    }
  }
  x = t.add(k, 2, 2, 2);
  Layer k2 = k;
  k2.name = "k2.conv";
  k2.inputs = {x};
  k2.weight.clear();
  for (int o = 0; o < 2; ++o) {
    for (int i = 0; i < 2; ++i) {
      for (int r = 0; r < 3; ++r) {
        for (int s = 0; s < 3; ++s) {
          k2.weight.push_back(static_cast<float>(o * 1000 + i * 100 + r * 10 + s));
        }
      }
    }
  }
  x = t.add(k2, 2, 2, 2);
  t.detect(x);
  const EngineGraph g = optimize(t.net);
  REQUIRE(g.ops.size() == 6);
  const FusedOp& folded = g.ops[0];
  CHECK(folded.name == "c");
  CHECK(folded.fused == std::vector<std::string>{"c.conv", "c.bn"});
  CHECK(folded.weight == std::vector<float>{3.0f});
  CHECK(folded.bias == std::vector<float>{0.5f + (1.0f - 1.0f) * 1.5f});
  CHECK(folded.act == Activation::none);
  const FusedOp& krsc = g.ops[2];
  REQUIRE(krsc.weight.size() == 36);
  for (int o = 0; o < 2; ++o) {
    for (int r = 0; r < 3; ++r) {
      for (int s = 0; s < 3; ++s) {
        for (int i = 0; i < 2; ++i) {
          CHECK(krsc.weight[static_cast<std::size_t>(((o * 3 + r) * 3 + s) * 2 + i)] ==
                static_cast<float>(o * 1000 + i * 100 + r * 10 + s));
        }
      }
    }
  }
  CHECK(krsc.bias == std::vector<float>{0.0f, 0.0f});
  const auto input = test_image(2, 2, 1);
  std::vector<float> in1(input.begin(), input.begin() + 4);
  CHECK(max_error(run_engine_graph_reference(g, in1), run_reference(t.net, in1)) < 1e-6);
}

TEST_CASE("optimize: YOLOv8n becomes 69 ops, no copies; fusion and views as designed", "[graph]") {
  const NetworkDefinition net = yolov8n(testing::random_yolov8n_weights(11), 96, 128);
  const EngineGraph g = optimize(net);
  INFO("ops " << g.ops.size() << ", buffers " << g.buffers.size());
  // 63 convolutions (57 Conv blocks + 6 head convolutions), SPPF's 3 pools, 2 upsamples, detect.
  CHECK(g.ops.size() == 69);
  CHECK(count(g, OpKind::conv) == 63);
  CHECK(count(g, OpKind::max_pool) == 3);
  CHECK(count(g, OpKind::upsample) == 2);
  CHECK(count(g, OpKind::detect) == 1);
  CHECK(count(g, OpKind::copy) == 0);  // every concatenation eliminated
  CHECK(g.buffers.size() == 51);
  CHECK(g.num_candidates == num_candidates(96, 128));
  int residual = 0, silu = 0, plain = 0;
  for (const FusedOp& op : g.ops) {
    if (op.kind != OpKind::conv) continue;
    residual += op.has_residual;
    silu += op.act == Activation::silu;
    if (op.act == Activation::none) {
      ++plain;  // the head's last 1x1 convolutions
      CHECK(op.kernel == 1);
      CHECK(op.fused.size() == 1);
      CHECK(op.name.rfind("model.22.cv", 0) == 0);
    } else {
      CHECK(op.fused[1] == op.name + ".bn");
      CHECK(op.fused[2] == op.name + ".act");
    }
    CHECK(op.weight.size() ==
          static_cast<std::size_t>(op.out_channels) * op.kernel * op.kernel * op.in_channels);
  }
  CHECK(residual == 6);  // the backbone's bottlenecks: 1 + 2 + 2 + 1
  CHECK(silu == 57);
  CHECK(plain == 6);
  // The first convolution reads the network input itself.
  CHECK(g.ops[0].input.buffer == View::kNetworkInput);

  // Every C2f: cv1 writes the first 2c channels of the concat buffer that cv2 reads whole, and
  // each bottleneck reads the previous part and writes the next one in place.
  std::map<std::string, const FusedOp*> by_name;
  for (const FusedOp& op : g.ops) by_name[op.name] = &op;
  const FusedOp& cv1 = *by_name.at("model.4.cv1");
  const FusedOp& cv2 = *by_name.at("model.4.cv2");
  CHECK(cv1.output.buffer == cv2.input.buffer);
  CHECK(cv1.output.channel_offset == 0);
  CHECK(cv2.input.channel_offset == 0);
  CHECK(cv2.input.channels == 128);
  const FusedOp& m1 = *by_name.at("model.4.m.1.cv2");
  CHECK(m1.output.buffer == cv2.input.buffer);
  CHECK(m1.output.channel_offset == 96);
  CHECK(m1.residual.buffer == cv2.input.buffer);
  CHECK(m1.residual.channel_offset == 64);
  // model.11 = cat(upsample(model.9), model.6): both producers write the concat's buffer.
  const FusedOp& up = *by_name.at("model.10");
  const FusedOp& p6 = *by_name.at("model.6.cv2");
  CHECK(up.output.buffer == p6.output.buffer);
  CHECK(up.output.channel_offset == 0);
  CHECK(p6.output.channel_offset == 256);
  CHECK(g.buffers[static_cast<std::size_t>(up.output.buffer)].channels == 384);
  CHECK_THAT(describe(g.ops[0]), Contains("conv 3x3 s2 3->16 +SiLU"));
  CHECK_THAT(describe(m1), Contains("+residual"));
  CHECK_THAT(describe(g.ops.back()), Contains("detect"));

  // Liveness covers every access.
  for (int i = 0; i < static_cast<int>(g.ops.size()); ++i) {
    const FusedOp& op = g.ops[static_cast<std::size_t>(i)];
    std::vector<View> views =
        op.kind == OpKind::detect ? op.box : std::vector<View>{op.input, op.output};
    if (op.kind == OpKind::detect) views.insert(views.end(), op.cls.begin(), op.cls.end());
    if (op.has_residual) views.push_back(op.residual);
    for (const View& v : views) {
      if (v.buffer == View::kNetworkInput) continue;
      const BufferDesc& b = g.buffers.at(static_cast<std::size_t>(v.buffer));
      CHECK(b.first_op <= i);
      CHECK(i <= b.last_op);
      CHECK(v.channel_offset + v.channels <= b.channels);
    }
  }
}

TEST_CASE("optimize: the optimized YOLOv8n computes what the definition computes", "[graph]") {
  // Random weights and BatchNorm statistics, so folding is exercised on every channel. The two
  // runs differ by the rounding of the folded weights to float and of the stored intermediates
  // (about 1e-7 relative, measured); 1e-5 leaves a margin of a hundred.
  for (const auto& [h, w] : std::vector<std::pair<int, int>>{{64, 64}, {96, 128}}) {
    const NetworkDefinition net = yolov8n(testing::random_yolov8n_weights(21), h, w);
    const EngineGraph g = optimize(net);
    const auto input = test_image(h, w, 3);
    std::vector<std::vector<float>> buffers;
    const auto got = run_engine_graph_reference(g, input, &buffers);
    const auto expected = run_reference(net, input);
    const double err = max_error(got, expected);
    std::printf("optimized vs definition at %dx%d: max error %.3g\n", h, w, err);
    CHECK(err < 1e-5);
    REQUIRE(buffers.size() == g.buffers.size());
    CHECK(buffers[0].size() == g.buffers[0].elements_per_image());
  }
}

TEST_CASE("optimize: concatenations that cannot be written in place fall back to copies",
          "[graph]") {
  // cat(x, a) with x the network input; a = conv(x) also feeds a second concat cat(a, b) and
  // a channel slice that does not line up with its place in a third concat.
  Tiny t(2, 4, 4);
  const int a = t.conv("a", 0, 3, 3, 1.0f, true);
  const int b = t.conv("b", 0, 2, 1, 1.0f, true);
  const int cat1 = t.concat("cat1", {0, a});  // input -> copy; a in place
  const int cat2 = t.concat("cat2", {a, b});  // a again -> copy; b in place
  Layer s;
  s.kind = LayerKind::slice;
  s.name = "s";
  s.inputs = {cat2};
  s.channel_begin = 1;
  s.channel_end = 3;
  const int sl = t.add(s, 2, 4, 4);
  const int cat3 = t.concat("cat3", {sl, cat1});  // slice at 0 would need cat2 at -1: copy
  const int mix = t.conv("mix", cat3, 4, 3, 0.3f, true);
  t.detect(mix);
  const EngineGraph g = optimize(t.net);
  CHECK(count(g, OpKind::copy) == 3);
  const auto input = test_image(4, 4, 9);
  std::vector<float> in(input.begin(), input.begin() + 2 * 16);
  CHECK(max_error(run_engine_graph_reference(g, in), run_reference(t.net, in)) < 1e-6);
  for (const FusedOp& op : g.ops) {
    if (op.kind == OpKind::copy) CHECK_THAT(describe(op), Contains("copy"));
  }
}

TEST_CASE("optimize: patterns it cannot fuse are rejected", "[graph]") {
  SECTION("BatchNorm after a concat") {
    Tiny t(2, 2, 2);
    const int a = t.conv("a", 0, 2, 1, 1.0f);
    const int c = t.concat("c", {a, a});
    t.detect(t.bn("bn", c));
    CHECK_THROWS_WITH(optimize(t.net), Contains("BatchNorm layer bn") && Contains("convolution"));
  }
  SECTION("SiLU on a tensor two layers read") {
    Tiny t(2, 2, 2);
    const int a = t.conv("a", 0, 2, 1, 1.0f);
    const int s = t.simple(LayerKind::silu, "act", {a}, 2);
    t.detect(t.simple(LayerKind::add, "sum", {a, s}, 2));
    CHECK_THROWS_AS(optimize(t.net), std::invalid_argument);
  }
  SECTION("output not a detect layer") {
    Tiny t(2, 2, 2);
    t.net.output = t.conv("a", 0, 2, 1, 1.0f);
    CHECK_THROWS_WITH(optimize(t.net), Contains("detect"));
  }
}

TEST_CASE("plan_memory: no two live buffers overlap; the arena against no reuse", "[graph]") {
  const NetworkDefinition net = yolov8n(testing::random_yolov8n_weights(2), 640, 640);
  EngineGraph g = optimize(net);
  std::printf("%-7s %-5s %14s %14s %14s %7s\n", "batch", "type", "arena", "lower bound", "no reuse",
              "saved");
  for (int batch : {1, 8, 32}) {
    for (std::size_t element : {std::size_t{2}, std::size_t{4}}) {
      const std::size_t arena = plan_memory(g, batch, element);
      CHECK(arena == g.arena_bytes);
      const std::size_t naive = arena_without_reuse(g, batch, element);
      auto bytes = [&](const BufferDesc& b) {
        return (b.elements_per_image() * batch * element + 255) / 256 * 256;
      };
      for (std::size_t i = 0; i < g.buffers.size(); ++i) {
        const BufferDesc& a = g.buffers[i];
        CHECK(a.offset % 256 == 0);
        CHECK(a.offset + bytes(a) <= arena);
        for (std::size_t j = i + 1; j < g.buffers.size(); ++j) {
          const BufferDesc& b = g.buffers[j];
          const bool live_together = a.first_op <= b.last_op && b.first_op <= a.last_op;
          const bool share_bytes = a.offset < b.offset + bytes(b) && b.offset < a.offset + bytes(a);
          if (live_together && share_bytes) {
            FAIL_CHECK("buffers " << a.name << " and " << b.name
                                  << " are live together and overlap");
          }
        }
      }
      // No plan beats the most bytes live at one op.
      std::size_t bound = 0;
      for (int op = 0; op < static_cast<int>(g.ops.size()); ++op) {
        std::size_t live = 0;
        for (const BufferDesc& b : g.buffers) {
          if (b.first_op <= op && op <= b.last_op) live += bytes(b);
        }
        bound = std::max(bound, live);
      }
      CHECK(bound <= arena);
      CHECK(arena < naive);
      CHECK(arena <= bound + bound / 4);  // first fit lands close to the bound on this network
      std::printf("%-7d %-5s %11.2f MiB %11.2f MiB %11.2f MiB %6.1fx\n", batch,
                  element == 2 ? "FP16" : "FP32", arena / 1048576.0, bound / 1048576.0,
                  naive / 1048576.0, static_cast<double>(naive) / arena);
    }
  }
  CHECK_THROWS_AS(plan_memory(g, 0, 2), std::invalid_argument);
}
