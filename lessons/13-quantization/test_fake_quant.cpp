// Lesson 13 tests: simulated quantisation of lesson 12's engine graph and its accuracy.
//
// Oracles: lesson 12's run_engine_graph_reference (every op FP32: equal bit for bit; the ops
// before the only INT8 op: equal bit for bit); a two-op graph whose INT8 results are worked out
// by hand below (integer accumulators and requantised values written in the comments); the
// worst-case error of one INT8 convolution derived from the quantisation steps (s / 2 per
// operand, SiLU's slope below 1.1), computed here from the layer's own float operands; lesson
// 08's postprocess_cpu and lesson 12's mean_average_precision called directly on the outputs.
// FP8 E4M3: the two-op graph worked out by hand again, and equal bit for bit to a chain of
// conv_fp8_reference calls fed codes and scales computed here; the error bound of one FP8
// convolution from E4M3's half step (2^-4 of a normal value, 2^-10 scales below); a tensor of
// wide dynamic range, where the FP8 error is that bound and INT8's is the whole value.
// Small inputs (64 x 96, 64 x 64): the network is fully convolutional.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "calibrate_graph.hpp"
#include "common/letterbox.cuh"
#include "common/testing.hpp"
#include "evaluate.hpp"
#include "fake_quant.hpp"
#include "fp8_conv.hpp"
#include "network.hpp"
#include "quantize.hpp"

using namespace lesson13;
using course::testing::Approx;
using course::testing::Contains;
using lesson12::EngineGraph;
using lesson12::FusedOp;
using lesson12::OpKind;
using lesson12::View;

namespace {

constexpr int kH = 64, kW = 96;

const lesson12::WeightsFile& trained_weights() {
  static const lesson12::WeightsFile w =
      lesson12::read_weights(std::string(LESSON12_DATA_DIR) + "/yolov8n_scenes.weights");
  return w;
}

const EngineGraph& trained_graph() {
  static const EngineGraph g = lesson12::optimize(lesson12::yolov8n(trained_weights(), kH, kW));
  return g;
}

int op_index(const EngineGraph& g, const std::string& name) {
  for (std::size_t i = 0; i < g.ops.size(); ++i) {
    if (g.ops[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

// The two-op graph of the hand-worked test. Input: 1 channel, 2 x 2, pixels (0,0) (0,1) (1,0)
// (1,1). op "c0": 1x1 conv 1 -> 2 into buffer "a", weights {0.5, -1.5}, bias {0.25, 0}.
// op "c1": 1x1 conv 2 -> 2 from "a" into "b", weights {{1, 0.25}, {-0.25, 2}}, bias 0, plus the
// residual "a" (no activation: the arithmetic stays writable by hand).
EngineGraph tiny_graph() {
  EngineGraph g;
  g.input_c = 1;
  g.input_h = 2;
  g.input_w = 2;
  g.num_classes = 0;
  g.num_candidates = 0;
  g.buffers.resize(2);
  g.buffers[0].name = "a";
  g.buffers[1].name = "b";
  for (auto& b : g.buffers) b.channels = 2, b.h = 2, b.w = 2;
  FusedOp c0;
  c0.kind = OpKind::conv;
  c0.name = "c0";
  c0.input = View{View::kNetworkInput, 0, 1, 2, 2};
  c0.output = View{0, 0, 2, 2, 2};
  c0.in_channels = 1;
  c0.out_channels = 2;
  c0.weight = {0.5f, -1.5f};
  c0.bias = {0.25f, 0.0f};
  FusedOp c1;
  c1.kind = OpKind::conv;
  c1.name = "c1";
  c1.input = View{0, 0, 2, 2, 2};
  c1.output = View{1, 0, 2, 2, 2};
  c1.in_channels = 2;
  c1.out_channels = 2;
  c1.weight = {1.0f, 0.25f, -0.25f, 2.0f};
  c1.bias = {0.0f, 0.0f};
  c1.has_residual = true;
  c1.residual = View{0, 0, 2, 2, 2};
  g.ops = {c0, c1};
  return g;
}

CalibrationTable tiny_table() {
  CalibrationTable t;
  t.network = "tiny";
  t.calibrator = "hand";
  t.tensors = {{"images", 0.25f}, {"a", 0.35f}, {"b", 1.0f}};
  return t;
}

const std::vector<float> kTinyInput{0.3f, -0.7f, 1.0f, 0.4f};

// Whether two runs' buffers agree on the channels of one view (an op's output: a concatenation
// buffer also holds what other ops write).
bool view_equal(const EngineGraph& g, const std::vector<std::vector<float>>& a,
                const std::vector<std::vector<float>>& b, const View& v) {
  const std::size_t id = static_cast<std::size_t>(v.buffer);
  const int stride = g.buffers[id].channels;
  for (int p = 0; p < v.h * v.w; ++p) {
    for (int c = v.channel_offset; c < v.channel_offset + v.channels; ++c) {
      const std::size_t i = static_cast<std::size_t>(p) * stride + c;
      if (a[id][i] != b[id][i]) return false;
    }
  }
  return true;
}

}  // namespace

TEST_CASE("fake quant: every op in FP32 is run_engine_graph_reference, bit for bit",
          "[fakequant]") {
  const EngineGraph& g = trained_graph();
  const std::vector<float> x = lesson12::scene_input(3, kW, kH);
  std::vector<std::vector<float>> ref_buffers;
  const std::vector<float> ref = lesson12::run_engine_graph_reference(g, x, &ref_buffers);

  FakeQuantConfig all;
  all.all_fp32 = true;
  FakeQuantConfig keep_every_op;  // the same through the fallback list
  for (const FusedOp& op : g.ops) {
    if (op.kind != OpKind::detect) keep_every_op.keep_fp32.push_back(op.name);
  }
  const CalibrationTable empty;  // never read: no op runs in INT8
  for (const FakeQuantConfig* c : {&all, &keep_every_op}) {
    const FakeQuantGraph fq(g, empty, *c);
    CHECK(fq.int8_ops() == 0);
    std::vector<std::vector<float>> buffers;
    const std::vector<float> y = fq.run(x, &buffers);
    REQUIRE(y.size() == ref.size());
    CHECK(y == ref);
    REQUIRE(buffers.size() == ref_buffers.size());
    for (std::size_t b = 0; b < buffers.size(); ++b) {
      INFO("buffer " << g.buffers[b].name);
      CHECK(buffers[b] == ref_buffers[b]);
    }
  }
}

TEST_CASE("fake quant: a two-op graph worked out by hand", "[fakequant]") {
  const EngineGraph g = tiny_graph();
  const CalibrationTable table = tiny_table();
  std::vector<std::vector<float>> buf;

  SECTION("both ops INT8, per-channel weights") {
    const FakeQuantGraph fq(g, table, {});
    CHECK(fq.int8_ops() == 2);
    CHECK(fq.run(kTinyInput, &buf).empty());  // no detect op: no output tensor
    // c0: x / 0.25 = 1.2, -2.8, 4, 1.6 -> q = 1, -3, 4, 2. Weights 0.5 and -1.5, each its own
    // channel's largest: q = 127 and -127 with scales 0.5 / 127 and 1.5 / 127. So
    // a0 = 127 q (0.25 x 0.5 / 127) + 0.25 = 0.125 q + 0.25 and a1 = -127 q (0.25 x 1.5 / 127)
    // = -0.375 q (within the float scales' rounding).
    const double a0[] = {0.375, -0.125, 0.75, 0.5}, a1[] = {-0.375, 1.125, -1.5, -0.75};
    for (int p = 0; p < 4; ++p) {
      CHECK(buf[0][2 * p] == Approx(a0[p]).epsilon(1e-6).margin(1e-6));
      CHECK(buf[0][2 * p + 1] == Approx(a1[p]).epsilon(1e-6).margin(1e-6));
    }
    // c1 reads a with scale 0.35: a0 / 0.35 = 1.07, -0.36, 2.14, 1.43 -> 1, 0, 2, 1;
    // a1 / 0.35 = -1.07, 3.21, -4.29, -2.14 -> -1, 3, -4, -2 (no value near a rounding tie).
    // Weights per channel: row 0 {1, 0.25}, scale 1 / 127 -> {127, 32 (31.75)}; row 1
    // {-0.25, 2}, scale 2 / 127 -> {-16 (-15.875), 127}.
    // acc0 = 127 q0 + 32 q1 = 95, 96, 126, 63; acc1 = -16 q0 + 127 q1 = -143, 381, -540, -270.
    // b_k = acc_k 0.35 s_k + 0.35 q_k (the residual is a, read with a's scale).
    const int q0[] = {1, 0, 2, 1}, q1[] = {-1, 3, -4, -2};
    const int acc0[] = {95, 96, 126, 63}, acc1[] = {-143, 381, -540, -270};
    for (int p = 0; p < 4; ++p) {
      INFO("pixel " << p);
      CHECK(buf[1][2 * p] == Approx(0.35 * (acc0[p] / 127.0 + q0[p])).epsilon(1e-6).margin(1e-6));
      CHECK(buf[1][2 * p + 1] ==
            Approx(0.35 * (2.0 * acc1[p] / 127.0 + q1[p])).epsilon(1e-6).margin(1e-6));
    }
  }

  SECTION("per-tensor weights: one scale, the smaller weights lose bits") {
    FakeQuantConfig c;
    c.weights = WeightScales::per_tensor;
    c.int8_only = {"c0"};
    const FakeQuantGraph fq(g, table, c);
    fq.run(kTinyInput, &buf);
    // One scale 1.5 / 127 for {0.5, -1.5}: q = {42 (42.33), -127}. a0 = 42 q 0.25 (1.5 / 127)
    // + 0.25, with q = 1, -3, 4, 2 as above; a1 as per channel.
    const int q[] = {1, -3, 4, 2};
    for (int p = 0; p < 4; ++p) {
      CHECK(buf[0][2 * p] ==
            Approx(42.0 * q[p] * 0.25 * 1.5 / 127.0 + 0.25).epsilon(1e-6).margin(1e-6));
      CHECK(buf[0][2 * p + 1] == Approx(-0.375 * q[p]).epsilon(1e-6).margin(1e-6));
    }
  }

  SECTION("c1 kept in FP32 reads a's floats, unquantised") {
    FakeQuantConfig c;
    c.keep_fp32 = {"c1"};
    const FakeQuantGraph fq(g, table, c);
    CHECK(fq.is_int8(0));
    CHECK(!fq.is_int8(1));
    fq.run(kTinyInput, &buf);
    for (int p = 0; p < 4; ++p) {
      const double a0 = buf[0][2 * p], a1 = buf[0][2 * p + 1];  // c0's INT8 output
      // b0 = 1 a0 + 0.25 a1 + a0, b1 = -0.25 a0 + 2 a1 + a1, in double, rounded once.
      CHECK(buf[1][2 * p] == static_cast<float>(a0 + 0.25 * a1 + a0));
      CHECK(buf[1][2 * p + 1] == static_cast<float>(-0.25 * a0 + 2.0 * a1 + a1));
    }
  }

  SECTION("only c1 in INT8: c0 in FP32, c1 quantises its float output") {
    FakeQuantConfig c;
    c.int8_only = {"c1"};
    const FakeQuantGraph fq(g, table, c);
    fq.run(kTinyInput, &buf);
    // c0 in FP32: a0 = 0.5 x + 0.25, a1 = -1.5 x.
    for (int p = 0; p < 4; ++p) {
      CHECK(buf[0][2 * p] == static_cast<float>(0.5 * static_cast<double>(kTinyInput[p]) + 0.25));
      CHECK(buf[0][2 * p + 1] == static_cast<float>(-1.5 * static_cast<double>(kTinyInput[p])));
    }
    // a / 0.35: 0.4, -0.1, 0.75, 0.45 -> 1, 0, 2, 1 (1.14, -0.29, 2.14, 1.29); -0.45, 1.05,
    // -1.5, -0.6 -> -1, 3, -4, -2: the same q as the all-INT8 case, so the same b.
    const int q0[] = {1, 0, 2, 1}, q1[] = {-1, 3, -4, -2};
    const int acc0[] = {95, 96, 126, 63}, acc1[] = {-143, 381, -540, -270};
    for (int p = 0; p < 4; ++p) {
      CHECK(buf[1][2 * p] == Approx(0.35 * (acc0[p] / 127.0 + q0[p])).epsilon(1e-6).margin(1e-6));
      CHECK(buf[1][2 * p + 1] ==
            Approx(0.35 * (2.0 * acc1[p] / 127.0 + q1[p])).epsilon(1e-6).margin(1e-6));
    }
  }

  SECTION("saturation: a scale too small clips to +-127 steps") {
    CalibrationTable t = table;
    t.tensors[0].scale = 1.0f / 254.0f;  // images: 0.3 / s = 76.2 -> 76, 0.4 -> 102 (101.6);
                                         // -0.7 (-177.8) and 1.0 (254) clip to -127 and 127
    FakeQuantConfig c;
    c.int8_only = {"c0"};
    const FakeQuantGraph fq(g, t, c);
    fq.run(kTinyInput, &buf);
    const double xq[] = {76.0 / 254, -127.0 / 254, 127.0 / 254, 102.0 / 254};
    for (int p = 0; p < 4; ++p) {
      CHECK(buf[0][2 * p] == Approx(0.5 * xq[p] + 0.25).epsilon(1e-6).margin(1e-6));
      CHECK(buf[0][2 * p + 1] == Approx(-1.5 * xq[p]).epsilon(1e-6).margin(1e-6));
    }
  }
}

TEST_CASE("fake quant: max pool and upsample read quantised values, requantised per buffer",
          "[fakequant]") {
  // input 1 x 2 x 2 -> max pool 2x2 s2 -> "m" (1 x 1) -> upsample x2 -> "u" (2 x 2).
  EngineGraph g;
  g.input_c = 1;
  g.input_h = 2;
  g.input_w = 2;
  g.buffers.resize(2);
  g.buffers[0].name = "m";
  g.buffers[0].channels = 1, g.buffers[0].h = 1, g.buffers[0].w = 1;
  g.buffers[1].name = "u";
  g.buffers[1].channels = 1, g.buffers[1].h = 2, g.buffers[1].w = 2;
  FusedOp pool;
  pool.kind = OpKind::max_pool;
  pool.name = "pool";
  pool.kernel = 2;
  pool.stride = 2;
  pool.input = View{View::kNetworkInput, 0, 1, 2, 2};
  pool.output = View{0, 0, 1, 1, 1};
  FusedOp up;
  up.kind = OpKind::upsample;
  up.name = "up";
  up.input = View{0, 0, 1, 1, 1};
  up.output = View{1, 0, 1, 2, 2};
  g.ops = {pool, up};
  CalibrationTable t;
  t.network = "pool";
  t.calibrator = "hand";
  t.tensors = {{"images", 0.25f}, {"m", 0.3f}};
  const std::vector<float> x{0.3f, -0.7f, 0.1f, 0.4f};
  std::vector<std::vector<float>> buf;
  // INT8: the pool sees 0.25, -0.75, 0, 0.5 (x / 0.25 = 1.2, -2.8, 0.4, 1.6): max 0.5 (FP32:
  // 0.4). The upsample reads 0.5 with m's scale 0.3: 1.67 -> 2 steps -> 0.6.
  FakeQuantGraph(g, t, {}).run(x, &buf);
  CHECK(buf[0][0] == 0.5f);
  for (float v : buf[1]) CHECK(v == 2.0f * 0.3f);
  FakeQuantConfig keep_up;
  keep_up.keep_fp32 = {"up"};
  FakeQuantGraph(g, t, keep_up).run(x, &buf);
  CHECK(buf[0][0] == 0.5f);
  for (float v : buf[1]) CHECK(v == 0.5f);
  FakeQuantConfig all;
  all.all_fp32 = true;
  FakeQuantGraph(g, t, all).run(x, &buf);
  CHECK(buf[0][0] == 0.4f);
  for (float v : buf[1]) CHECK(v == 0.4f);
}

TEST_CASE("fake quant: the residual is read with its own tensor's scale", "[fakequant]") {
  // A 1 x 1 image, two 1x1 convolutions of weight 1: "r0" into "r", then "c" into "y" with the
  // residual "r". x = 0.3 with scale 0.25 -> 1 step; the weight 1 -> 127 steps of 1 / 127; so
  // r = 0.25. c reads r with r's scale 0.15: 1.67 -> 2 steps -> 0.3; y = 0.25 + 0.3.
  EngineGraph g;
  g.input_c = 1;
  g.input_h = 1;
  g.input_w = 1;
  g.buffers.resize(2);
  g.buffers[0].name = "r";
  g.buffers[1].name = "y";
  for (auto& b : g.buffers) b.channels = 1, b.h = 1, b.w = 1;
  FusedOp r0;
  r0.kind = OpKind::conv;
  r0.name = "r0";
  r0.input = View{View::kNetworkInput, 0, 1, 1, 1};
  r0.output = View{0, 0, 1, 1, 1};
  r0.in_channels = r0.out_channels = 1;
  r0.weight = {1.0f};
  r0.bias = {0.0f};
  FusedOp c = r0;
  c.name = "c";
  c.output = View{1, 0, 1, 1, 1};
  c.has_residual = true;
  c.residual = View{0, 0, 1, 1, 1};
  g.ops = {r0, c};
  CalibrationTable t;
  t.network = "res";
  t.calibrator = "hand";
  t.tensors = {{"images", 0.25f}, {"r", 0.15f}};
  std::vector<std::vector<float>> buf;
  FakeQuantGraph(g, t, {}).run({0.3f}, &buf);
  CHECK(buf[0][0] == Approx(0.25).epsilon(1e-6));
  CHECK(buf[1][0] == Approx(0.25 + 2 * 0.15).epsilon(1e-6));
}

TEST_CASE("fake quant: one INT8 convolution stays within its quantisation error bound",
          "[fakequant]") {
  // The layer alone in INT8, min-max scales from this very image (nothing saturates). With
  // x~ = q_x s_x, |x~ - x| <= s_x / 2, and w~ likewise (s_w[k] / 2), the pre-activation sum moves
  // by at most E = sum_taps |x| s_w / 2 + |w| s_x / 2 + s_x s_w / 4; SiLU's slope lies in
  // (-0.1, 1.1), so the output moves by at most 1.1 E, plus s_res / 2 for the residual, plus the
  // float roundings of the two results (2^-22 |y|, and 1e-6 absolute for values near zero).
  const EngineGraph& g = trained_graph();
  const std::vector<float> x = lesson12::scene_input(5, kW, kH);
  const auto obs = observe_engine_graph(g, {x});
  const CalibrationTable table = make_calibration_table(obs, {CalibrationMethod::min_max}, "t");
  std::vector<std::vector<float>> ref;
  lesson12::run_engine_graph_reference(g, x, &ref);

  for (const char* layer : {"model.2.m.0.cv2", "model.3", "model.22.cv3.0.2"}) {
    for (WeightScales ws : {WeightScales::per_channel, WeightScales::per_tensor}) {
      INFO(layer << ", " << to_string(ws) << " weights");
      const int i = op_index(g, layer);
      REQUIRE(i >= 0);
      const FusedOp& op = g.ops[static_cast<std::size_t>(i)];
      FakeQuantConfig c;
      c.weights = ws;
      c.int8_only = {layer};
      std::vector<std::vector<float>> got;
      FakeQuantGraph(g, table, c).run(x, &got);

      const auto buf_of = [&](const View& v) -> const std::vector<float>& {
        return ref[static_cast<std::size_t>(v.buffer)];
      };
      const auto stride_of = [&](const View& v) {
        return g.buffers[static_cast<std::size_t>(v.buffer)].channels;
      };
      const float sx = table.scale(g.buffers[static_cast<std::size_t>(op.input.buffer)].name);
      const float sr =
          op.has_residual
              ? table.scale(g.buffers[static_cast<std::size_t>(op.residual.buffer)].name)
              : 0.0f;
      const int taps = op.kernel * op.kernel * op.in_channels;
      std::vector<double> sw(static_cast<std::size_t>(op.out_channels));
      double wmax_all = 0;
      for (float w : op.weight) wmax_all = std::max(wmax_all, std::fabs(static_cast<double>(w)));
      for (int k = 0; k < op.out_channels; ++k) {
        double m = 0;
        for (int t = 0; t < taps; ++t)
          m = std::max(m, std::fabs(static_cast<double>(op.weight[k * taps + t])));
        sw[k] = (ws == WeightScales::per_channel ? m : wmax_all) / 127.0;
      }
      const std::vector<float>& xin = buf_of(op.input);
      const int xs = stride_of(op.input), ys = stride_of(op.output);
      double worst = 0, worst_ratio = 0;
      for (int oy = 0; oy < op.output.h; ++oy) {
        for (int ox = 0; ox < op.output.w; ++ox) {
          for (int k = 0; k < op.out_channels; ++k) {
            double e = 0;
            for (int r = 0; r < op.kernel; ++r) {
              for (int s = 0; s < op.kernel; ++s) {
                const int iy = oy * op.stride - op.pad + r, ix = ox * op.stride - op.pad + s;
                if (iy < 0 || iy >= op.input.h || ix < 0 || ix >= op.input.w) continue;
                for (int ch = 0; ch < op.in_channels; ++ch) {
                  const double xv = std::fabs(static_cast<double>(
                      xin[(static_cast<std::size_t>(iy) * op.input.w + ix) * xs +
                          op.input.channel_offset + ch]));
                  const double wv = std::fabs(
                      static_cast<double>(op.weight[static_cast<std::size_t>(k) * taps +
                                                    (r * op.kernel + s) * op.in_channels + ch]));
                  e += xv * sw[k] / 2 + wv * sx / 2 + sx * sw[k] / 4;
                }
              }
            }
            const std::size_t at = (static_cast<std::size_t>(oy) * op.output.w + ox) * ys +
                                   op.output.channel_offset + k;
            const double y_ref = ref[static_cast<std::size_t>(op.output.buffer)][at];
            const double y_got = got[static_cast<std::size_t>(op.output.buffer)][at];
            const double bound = 1.1 * e + sr / 2 + std::ldexp(std::fabs(y_ref), -22) + 1e-6;
            const double d = std::fabs(y_got - y_ref);
            worst = std::max(worst, d);
            worst_ratio = std::max(worst_ratio, d / bound);
            if (d > bound) {
              FAIL_CHECK("(" << oy << ", " << ox << ", " << k << "): |" << y_got << " - " << y_ref
                             << "| > " << bound);
            }
          }
        }
      }
      INFO("largest error " << worst << ", " << worst_ratio << " of its bound");
      CHECK(worst > 0);  // it was quantised
    }
  }
}

TEST_CASE("fake quant: layers kept in FP32 are FP32, the rest INT8", "[fakequant]") {
  const EngineGraph& g = trained_graph();
  const std::vector<float> x = lesson12::scene_input(7, kW, kH);
  const auto obs = observe_engine_graph(g, {x});
  const CalibrationTable table =
      make_calibration_table(obs, {CalibrationMethod::percentile, 99.9}, "t");
  std::vector<std::vector<float>> ref;
  const std::vector<float> y_ref = lesson12::run_engine_graph_reference(g, x, &ref);
  const auto same = [&](const std::vector<std::vector<float>>& a, int op) {
    return view_equal(g, a, ref, g.ops[static_cast<std::size_t>(op)].output);
  };

  // The first layer kept: it reads the float image and its float weights, as FP32 does; the
  // layer after it reads its output in INT8 and differs.
  FakeQuantConfig keep;
  keep.keep_fp32 = {g.ops[0].name};
  std::vector<std::vector<float>> kept, all;
  const FakeQuantGraph fq_keep(g, table, keep);
  CHECK(!fq_keep.is_int8(0));
  CHECK(fq_keep.is_int8(1));
  CHECK(fq_keep.int8_ops() == static_cast<int>(g.ops.size()) - 2);  // less the detect op
  const std::vector<float> y_keep = fq_keep.run(x, &kept);
  FakeQuantGraph(g, table, {}).run(x, &all);
  CHECK(same(kept, 0));
  CHECK(!same(all, 0));
  CHECK(!same(kept, 1));
  CHECK(y_keep != y_ref);

  // One layer in INT8: everything before it is the reference bit for bit, it is not; and
  // resuming from the reference's buffers at that op (the sensitivity table's shortcut) gives
  // the same run.
  const int mid = op_index(g, "model.6.m.0.cv1");
  REQUIRE(mid > 0);
  FakeQuantConfig one;
  one.int8_only = {g.ops[mid].name};
  const FakeQuantGraph fq_one(g, table, one);
  CHECK(fq_one.int8_ops() == 1);
  std::vector<std::vector<float>> got;
  const std::vector<float> y_one = fq_one.run(x, &got);
  for (int i = 0; i < mid; ++i) {
    if (g.ops[i].kind == OpKind::detect) continue;
    INFO("op " << g.ops[i].name);
    CHECK(same(got, i));
  }
  CHECK(!same(got, mid));
  std::vector<std::vector<float>> resumed = ref;
  CHECK(fq_one.run_from(mid, x, resumed) == y_one);
  CHECK(resumed == got);
}

TEST_CASE("fake quant: bad tables, names and inputs are refused with a message", "[fakequant]") {
  const EngineGraph g = tiny_graph();
  const CalibrationTable table = tiny_table();
  {
    CalibrationTable t = table;
    t.tensors.erase(t.tensors.begin() + 1);  // "a", which c1 reads
    CHECK_THROWS_AS(FakeQuantGraph(g, t, {}), std::runtime_error);
    CHECK_THROWS_WITH(FakeQuantGraph(g, t, {}), Contains("no scale for tensor 'a'") &&
                                                    Contains("'c1'") && Contains("'tiny'"));
    FakeQuantConfig c;  // c1 in FP32: nothing reads "a" in INT8, so the table is enough
    c.keep_fp32 = {"c1"};
    CHECK_NOTHROW(FakeQuantGraph(g, t, c));
  }
  for (float bad : {0.0f, -0.5f, std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::infinity(), 1e-40f}) {
    INFO("scale " << bad);
    CalibrationTable t = table;
    t.tensors[0].scale = bad;  // "images"
    CHECK_THROWS_AS(FakeQuantGraph(g, t, {}), std::invalid_argument);
    CHECK_THROWS_WITH(FakeQuantGraph(g, t, {}),
                      Contains("tensor 'images'") && Contains("positive normal float"));
  }
  FakeQuantConfig unknown;
  unknown.keep_fp32 = {"c7"};
  CHECK_THROWS_WITH(FakeQuantGraph(g, table, unknown), Contains("'c7', which is no op"));
  FakeQuantConfig both;
  both.keep_fp32 = {"c0"};
  both.int8_only = {"c1"};
  CHECK_THROWS_WITH(FakeQuantGraph(g, table, both), Contains("not both"));
  const FakeQuantGraph fq(g, table, {});
  CHECK_THROWS_WITH(fq.run({1.0f, 2.0f}), Contains("expected an input of [1, 2, 2]"));
  std::vector<std::vector<float>> buffers(2, std::vector<float>(8));
  CHECK_THROWS_AS(fq.run_from(3, kTinyInput, buffers), std::invalid_argument);
  std::vector<std::vector<float>> short_buffers(1, std::vector<float>(8));
  CHECK_THROWS_AS(fq.run_from(0, kTinyInput, short_buffers), std::invalid_argument);

  // The detect op cannot be quantised.
  const EngineGraph& real = trained_graph();
  FakeQuantConfig det;
  det.int8_only = {real.ops.back().name};
  REQUIRE(real.ops.back().kind == OpKind::detect);
  CHECK_THROWS_WITH(FakeQuantGraph(real, CalibrationTable{}, det), Contains("detect op"));
}

TEST_CASE("accuracy: held-out scenes, detections, mAP and changed frames", "[fakequant]") {
  const int h = 64, w = 64, count = 3;
  const EngineGraph g = lesson12::optimize(lesson12::yolov8n(trained_weights(), h, w));
  const HeldOutScenes scenes = held_out_scenes(0, count, w, h);
  REQUIRE(scenes.images.size() == count);
  for (int i = 0; i < count; ++i) {
    std::vector<lesson12::SceneBox> truth;
    CHECK(scenes.images[i] == lesson12::scene_input(i, w, h, &truth));
    REQUIRE(scenes.truth[i].size() == truth.size());
  }
  CHECK_THROWS_AS(held_out_scenes(0, -1, w, h), std::invalid_argument);
  CHECK_THROWS_AS(held_out_scenes(0, 1, 16, h), std::invalid_argument);

  const NetworkFn fp32 = [&](const std::vector<float>& x) {
    return lesson12::run_engine_graph_reference(g, x);
  };
  const SceneDetections d1 = detect_scenes(fp32, scenes, g.num_classes, 1);
  const SceneDetections d2 = detect_scenes(fp32, scenes, g.num_classes, 2);
  // The oracle: postprocess_cpu and mean_average_precision called here.
  const lesson08::OutputSpec spec{lesson08::Layout::yolov8, g.num_candidates, g.num_classes};
  const auto lb = course::make_letterbox(w, h, w, h);
  std::vector<lesson12::FrameEval> frames;
  for (int i = 0; i < count; ++i) {
    const std::vector<float> y = fp32(scenes.images[i]);
    const auto e = lesson08::postprocess_cpu(y.data(), y.size(), spec, lb, lesson12::eval_config());
    const auto d =
        lesson08::postprocess_cpu(y.data(), y.size(), spec, lb, lesson12::deploy_config());
    REQUIRE(d1.eval[i].size() == e.detections.size());
    REQUIRE(d1.deploy[i].size() == d.detections.size());
    for (std::size_t j = 0; j < e.detections.size(); ++j) {
      CHECK(d1.eval[i][j].index == e.detections[j].index);
      CHECK(d1.eval[i][j].score == e.detections[j].score);
      CHECK(d2.eval[i][j].index == e.detections[j].index);
    }
    frames.push_back({scenes.truth[i], e.detections});
  }
  const lesson12::MapResult m = lesson12::mean_average_precision(frames, g.num_classes);
  const Accuracy a = score_detections(d1, scenes, g.num_classes, &d2);
  CHECK(a.map50 == m.map50);
  CHECK(a.map50_95 == m.map50_95);
  CHECK(a.truth_boxes == m.truth_boxes);
  CHECK(a.frames == count);
  CHECK(a.changed == 0);
  CHECK(score_detections(d1, scenes, g.num_classes).changed == -1);
  CHECK(m.truth_boxes > 0);

  // Against an empty run every frame with a deployment detection changes.
  SceneDetections none;
  none.eval.resize(count);
  none.deploy.resize(count);
  int with_boxes = 0;
  for (const auto& d : d1.deploy) with_boxes += !d.empty();
  CHECK(score_detections(none, scenes, g.num_classes, &d1).changed == with_boxes);
  CHECK(score_detections(none, scenes, g.num_classes).map50 == 0.0);
  SceneDetections short_run = d1;
  short_run.eval.pop_back();
  CHECK_THROWS_AS(score_detections(short_run, scenes, g.num_classes), std::invalid_argument);
  CHECK_THROWS_AS(detect_scenes(fp32, scenes, g.num_classes, 0), std::invalid_argument);
  const NetworkFn wrong = [](const std::vector<float>&) { return std::vector<float>(3); };
  CHECK_THROWS_WITH(detect_scenes(wrong, scenes, g.num_classes, 2), Contains("scene 0"));
}

TEST_CASE("layer sensitivity: one row per convolution, each the run with it alone in INT8",
          "[fakequant]") {
  const int h = 64, w = 64;
  const EngineGraph g = lesson12::optimize(lesson12::yolov8n(trained_weights(), h, w));
  const HeldOutScenes scenes = held_out_scenes(0, 1, w, h);
  const auto obs = observe_engine_graph(g, calibration_images(1000, 1, w, h));
  const CalibrationTable table = make_calibration_table(obs, {CalibrationMethod::min_max}, "t");
  FakeQuantConfig fp32_config;
  fp32_config.all_fp32 = true;
  const FakeQuantGraph fp32(g, table, fp32_config);
  const SceneDetections ref = detect_scenes(
      [&](const std::vector<float>& x) { return fp32.run(x); }, scenes, g.num_classes);
  const std::vector<LayerSensitivity> rows =
      layer_sensitivity(g, table, WeightScales::per_channel, scenes, ref, 2);
  std::vector<std::string> convs;
  for (const FusedOp& op : g.ops)
    if (op.kind == OpKind::conv) convs.push_back(op.name);
  REQUIRE(rows.size() == convs.size());
  for (std::size_t i = 0; i < rows.size(); ++i) CHECK(rows[i].op == convs[i]);
  // The oracle for two rows: a whole run with that layer alone in INT8.
  for (std::size_t i : {std::size_t{0}, rows.size() - 1}) {
    FakeQuantConfig c;
    c.int8_only = {convs[i]};
    const FakeQuantGraph fq(g, table, c);
    const SceneDetections d = detect_scenes([&](const std::vector<float>& x) { return fq.run(x); },
                                            scenes, g.num_classes);
    const Accuracy a = score_detections(d, scenes, g.num_classes, &ref);
    INFO(convs[i]);
    CHECK(rows[i].accuracy.map50 == a.map50);
    CHECK(rows[i].accuracy.map50_95 == a.map50_95);
    CHECK(rows[i].accuracy.changed == a.changed);
  }
}

// ------------------------------------------------------------------------------- FP8 E4M3

namespace {

FakeQuantConfig fp8_config(WeightScales w = WeightScales::per_channel) {
  FakeQuantConfig c;
  c.precision = QuantPrecision::fp8_e4m3;
  c.weights = w;
  return c;
}

// The FP8 scale of a table entry, from its definition: amax = 127 s8, scale = amax / 448.
float fp8_scale_of(float s8) {
  return static_cast<float>(static_cast<double>(s8) * 127.0 / 448.0);
}

// Half an E4M3 step at t = x / s, in units of x: 2^-4 |x| in the normal range, 2^-10 s among
// the subnormals, plus the float division's rounding of t (2^-24 |x|, doubled for margin).
double fp8_half_step(double x, double s) {
  return std::max(std::ldexp(std::fabs(x), -4), std::ldexp(s, -10)) + std::ldexp(std::fabs(x), -23);
}

}  // namespace

TEST_CASE("fake quant FP8: the two-op graph worked out by hand", "[fakequant][fp8]") {
  // Table scales s8 = amax / 127 with amax 7 for the input and 22.4 for "a": FP8 scales 7 / 448
  // = 1/64 and 22.4 / 448 = 1/20 (within the float roundings).
  const EngineGraph g = tiny_graph();
  CalibrationTable t = tiny_table();
  t.tensors = {{"images", 7.0f / 127}, {"a", 22.4f / 127}, {"b", 1.0f}};
  std::vector<std::vector<float>> buf;
  const FakeQuantGraph fq(g, t, fp8_config());
  CHECK(fq.precision() == QuantPrecision::fp8_e4m3);
  CHECK(fq.int8_ops() == 2);
  fq.run(kTinyInput, &buf);
  // c0: x / (1/64) = 19.2, -44.8, 64, 25.6. E4M3 steps: 2 in [16, 32), 4 in [32, 64), so
  // 20, -44, 64, 26 -> x~ = 0.3125, -0.6875, 1, 0.40625. Weights 0.5 and -1.5 are their
  // channels' max -> +-448 steps, exact. a0 = 0.5 x~ + 0.25, a1 = -1.5 x~.
  const double a0[] = {0.40625, -0.09375, 0.75, 0.453125};
  const double a1[] = {-0.46875, 1.03125, -1.5, -0.609375};
  for (int p = 0; p < 4; ++p) {
    INFO("pixel " << p);
    CHECK(buf[0][2 * p] == Approx(a0[p]).epsilon(1e-6).margin(1e-6));
    CHECK(buf[0][2 * p + 1] == Approx(a1[p]).epsilon(1e-6).margin(1e-6));
  }
  // c1 reads a at 1/20: a0 x 20 = 8.125, -1.875, 15, 9.0625 -> 8, -1.875, 15, 9 (step 1 in
  // [8, 16), 1/8 in [1, 2)); a1 x 20 = -9.375, 20.625, -30, -12.1875 -> -9, 20, -30, -12 (step 2
  // in [16, 32)). Weights per channel: {1, 0.25} at 1/448 -> 448, 112 steps; {-0.25, 2} at
  // 2/448 -> -56, 448 steps: all on the grid, exact. With the residual a (read at 1/20):
  // b0 = (q0 + 0.25 q1 + q0) / 20, b1 = (-0.25 q0 + 2 q1 + q1) / 20.
  const double q0[] = {8, -1.875, 15, 9}, q1[] = {-9, 20, -30, -12};
  for (int p = 0; p < 4; ++p) {
    INFO("pixel " << p);
    CHECK(buf[1][2 * p] == Approx((2 * q0[p] + 0.25 * q1[p]) / 20).epsilon(1e-6).margin(1e-6));
    CHECK(buf[1][2 * p + 1] == Approx((-0.25 * q0[p] + 3 * q1[p]) / 20).epsilon(1e-6).margin(1e-6));
  }
  // The same table in INT8 is another network (steps of 7/127 and 22.4/127).
  std::vector<std::vector<float>> int8_buf;
  FakeQuantGraph(g, t, {}).run(kTinyInput, &int8_buf);
  CHECK(int8_buf[1] != buf[1]);
}

TEST_CASE("fake quant FP8: a chain of conv_fp8_reference calls, bit for bit", "[fakequant][fp8]") {
  const EngineGraph g = tiny_graph();
  const CalibrationTable t = tiny_table();
  for (WeightScales ws : {WeightScales::per_channel, WeightScales::per_tensor}) {
    INFO(to_string(ws) << " weights");
    std::vector<std::vector<float>> buf;
    FakeQuantGraph(g, t, fp8_config(ws)).run(kTinyInput, &buf);

    // The weights' scales and codes, from the definition: max |w| (of the row, or of all) / 448.
    const auto weights = [&](const FusedOp& op, std::vector<float>* scale) {
      const std::size_t row = op.weight.size() / static_cast<std::size_t>(op.out_channels);
      std::vector<std::uint8_t> q(op.weight.size());
      scale->assign(static_cast<std::size_t>(op.out_channels), 0.0f);
      float all = 0;
      for (float w : op.weight) all = std::max(all, std::fabs(w));
      for (std::size_t k = 0; k < scale->size(); ++k) {
        float m = 0;
        for (std::size_t i = 0; i < row; ++i) m = std::max(m, std::fabs(op.weight[k * row + i]));
        (*scale)[k] = (ws == WeightScales::per_channel ? m : all) / 448.0f;
        for (std::size_t i = 0; i < row; ++i) {
          q[k * row + i] = fp8_e4m3_from_float(op.weight[k * row + i] / (*scale)[k]);
        }
      }
      return q;
    };
    const auto codes = [](const std::vector<float>& v, float s) {
      std::vector<std::uint8_t> q(v.size());
      for (std::size_t i = 0; i < v.size(); ++i) q[i] = fp8_e4m3_from_float(v[i] / s);
      return q;
    };
    const float s_img = fp8_scale_of(t.scale("images")), s_a = fp8_scale_of(t.scale("a"));
    std::vector<float> a(8), b(8);
    const auto conv = [&](const FusedOp& op, const std::vector<std::uint8_t>& xq, float xs,
                          const std::vector<std::uint8_t>* rq, float rs, std::vector<float>& y) {
      std::vector<float> w_scale;
      const std::vector<std::uint8_t> wq = weights(op, &w_scale);
      Fp8ConvArgs c{};
      c.x = xq.data();
      c.w = wq.data();
      c.bias = op.bias.data();
      c.res = rq ? rq->data() : nullptr;
      c.y = y.data();
      c.x_stride = op.in_channels;
      c.res_stride = c.y_stride = op.out_channels;
      c.batch = 1;
      c.in_h = c.in_w = c.out_h = c.out_w = 2;
      c.in_c = op.in_channels;
      c.out_c = op.out_channels;
      c.kernel = c.stride = 1;
      c.x_scale = xs;
      c.w_scale = w_scale.data();
      c.res_scale = rs;
      c.y_type = Fp8ConvOutput::f32;
      conv_fp8_reference(c);
    };
    conv(g.ops[0], codes(kTinyInput, s_img), s_img, nullptr, 0.0f, a);
    const std::vector<std::uint8_t> aq = codes(a, s_a);
    conv(g.ops[1], aq, s_a, &aq, s_a, b);
    CHECK(buf[0] == a);
    CHECK(buf[1] == b);
  }
}

TEST_CASE("fake quant FP8: max pool and upsample read E4M3 values", "[fakequant][fp8]") {
  // As the INT8 test: input 2 x 2 -> max pool -> "m" -> upsample -> "u"; FP8 scales 1/64 for
  // the input and 1/20 for m. x / (1/64) = 19.2, -44.8, 6.4, 25.6 -> 20, -44, 6.5, 26 (steps
  // 2, 4, 0.5, 2): the pool's max is 26 / 64 = 0.40625 (FP32: 0.4). The upsample reads it at
  // 1/20: 8.125 -> 8 -> 0.4.
  EngineGraph g;
  g.input_c = 1;
  g.input_h = 2;
  g.input_w = 2;
  g.buffers.resize(2);
  g.buffers[0].name = "m";
  g.buffers[0].channels = 1, g.buffers[0].h = 1, g.buffers[0].w = 1;
  g.buffers[1].name = "u";
  g.buffers[1].channels = 1, g.buffers[1].h = 2, g.buffers[1].w = 2;
  FusedOp pool;
  pool.kind = OpKind::max_pool;
  pool.name = "pool";
  pool.kernel = 2;
  pool.stride = 2;
  pool.input = View{View::kNetworkInput, 0, 1, 2, 2};
  pool.output = View{0, 0, 1, 1, 1};
  FusedOp up;
  up.kind = OpKind::upsample;
  up.name = "up";
  up.input = View{0, 0, 1, 1, 1};
  up.output = View{1, 0, 1, 2, 2};
  g.ops = {pool, up};
  CalibrationTable t;
  t.network = "pool";
  t.calibrator = "hand";
  t.tensors = {{"images", 7.0f / 127}, {"m", 22.4f / 127}};
  std::vector<std::vector<float>> buf;
  FakeQuantGraph(g, t, fp8_config()).run({0.3f, -0.7f, 0.1f, 0.4f}, &buf);
  CHECK(buf[0][0] == Approx(0.40625).epsilon(1e-6));
  for (float v : buf[1]) CHECK(v == Approx(0.4).epsilon(1e-6));
}

TEST_CASE("fake quant FP8: a wide dynamic range keeps its small values, INT8 loses them",
          "[fakequant][fp8]") {
  // One 1x1 convolution of weight 1 (exact in both formats) over a 1 x 64 image whose values
  // run geometrically from 1e-3 to 10, alternating in sign; min-max scales (amax 10). INT8's
  // step 10/127 = 0.079 rounds every |x| below 0.039 to 0. FP8's scale 10/448 puts 1e-3 at
  // 0.045 steps, above E4M3's smallest normal 2^-6: every value keeps 4 significant bits, an
  // error of at most half a step, 2^-4 |x|.
  const int n = 64;
  EngineGraph g;
  g.input_c = 1;
  g.input_h = 1;
  g.input_w = n;
  g.buffers.resize(1);
  g.buffers[0].name = "y";
  g.buffers[0].channels = 1, g.buffers[0].h = 1, g.buffers[0].w = n;
  FusedOp c;
  c.kind = OpKind::conv;
  c.name = "c";
  c.input = View{View::kNetworkInput, 0, 1, 1, n};
  c.output = View{0, 0, 1, 1, n};
  c.in_channels = c.out_channels = 1;
  c.weight = {1.0f};
  c.bias = {0.0f};
  g.ops = {c};
  std::vector<float> x(n);
  for (int i = 0; i < n; ++i) {
    x[i] = static_cast<float>((i % 2 ? -1 : 1) * 1e-3 * std::pow(1e4, i / (n - 1.0)));
  }
  CalibrationTable t;
  t.network = "wide";
  t.calibrator = "hand";
  t.tensors = {{"images", int8_scale(10.0)}};
  std::vector<std::vector<float>> y8, yf8;
  FakeQuantGraph(g, t, {}).run(x, &y8);
  FakeQuantGraph(g, t, fp8_config()).run(x, &yf8);
  double worst8 = 0, worst_f8 = 0, mean8 = 0, mean_f8 = 0;
  for (int i = 0; i < n; ++i) {
    const double r8 = std::fabs(y8[0][i] - x[i]) / std::fabs(x[i]);
    const double rf8 = std::fabs(yf8[0][i] - x[i]) / std::fabs(x[i]);
    INFO("x = " << x[i] << ": INT8 " << y8[0][i] << ", FP8 " << yf8[0][i]);
    CHECK(rf8 <= 0.0625 * (1 + 1e-5));
    worst8 = std::max(worst8, r8);
    worst_f8 = std::max(worst_f8, rf8);
    mean8 += r8 / n;
    mean_f8 += rf8 / n;
  }
  INFO("relative error: INT8 worst " << worst8 << " mean " << mean8 << "; FP8 worst " << worst_f8
                                     << " mean " << mean_f8);
  CHECK(worst8 == 1.0);  // small values became 0
  CHECK(y8[0][0] == 0.0f);
  CHECK(mean_f8 * 10 < mean8);
}

TEST_CASE("fake quant FP8: every op FP32 is still the FP32 reference", "[fakequant][fp8]") {
  const EngineGraph& g = trained_graph();
  const std::vector<float> x = lesson12::scene_input(3, kW, kH);
  std::vector<std::vector<float>> ref_buffers;
  const std::vector<float> ref = lesson12::run_engine_graph_reference(g, x, &ref_buffers);
  FakeQuantConfig c = fp8_config();
  c.all_fp32 = true;
  const FakeQuantGraph fq(g, CalibrationTable{}, c);
  CHECK(fq.int8_ops() == 0);
  std::vector<std::vector<float>> buffers;
  CHECK(fq.run(x, &buffers) == ref);
  CHECK(buffers == ref_buffers);
}

TEST_CASE("fake quant FP8: one FP8 convolution stays within its quantisation error bound",
          "[fakequant][fp8]") {
  // As the INT8 bound, with E4M3's half step h(x, s) (fp8_half_step) for each operand in place
  // of s / 2: |x w - x~ w~| <= |x| h(w, s_w) + |w~| h(x, s_x) and |w~| <= |w| + h(w, s_w); the
  // products and sums are exact (conv_fp8_reference), so E = sum_taps of that; SiLU's slope
  // stays below 1.1; the residual adds h(r, s_r); plus the float roundings.
  const EngineGraph& g = trained_graph();
  const std::vector<float> x = lesson12::scene_input(5, kW, kH);
  const auto obs = observe_engine_graph(g, {x});
  const CalibrationTable table = make_calibration_table(obs, {CalibrationMethod::min_max}, "t");
  std::vector<std::vector<float>> ref;
  lesson12::run_engine_graph_reference(g, x, &ref);

  for (const char* layer : {"model.2.m.0.cv2", "model.3", "model.22.cv3.0.2"}) {
    for (WeightScales ws : {WeightScales::per_channel, WeightScales::per_tensor}) {
      INFO(layer << ", " << to_string(ws) << " weights");
      const int i = op_index(g, layer);
      REQUIRE(i >= 0);
      const FusedOp& op = g.ops[static_cast<std::size_t>(i)];
      FakeQuantConfig c = fp8_config(ws);
      c.int8_only = {layer};
      std::vector<std::vector<float>> got;
      FakeQuantGraph(g, table, c).run(x, &got);

      const auto name_of = [&](const View& v) {
        return g.buffers[static_cast<std::size_t>(v.buffer)].name;
      };
      const auto at = [&](const View& v, int y, int xx, int ch) {
        const std::size_t stride = g.buffers[static_cast<std::size_t>(v.buffer)].channels;
        return (static_cast<std::size_t>(y) * v.w + xx) * stride + v.channel_offset + ch;
      };
      const double sx = fp8_scale_of(table.scale(name_of(op.input)));
      const double sr = op.has_residual ? fp8_scale_of(table.scale(name_of(op.residual))) : 0.0;
      const int taps = op.kernel * op.kernel * op.in_channels;
      std::vector<double> sw(static_cast<std::size_t>(op.out_channels));
      double wmax_all = 0;
      for (float w : op.weight) wmax_all = std::max(wmax_all, std::fabs(static_cast<double>(w)));
      for (int k = 0; k < op.out_channels; ++k) {
        double m = 0;
        for (int t = 0; t < taps; ++t)
          m = std::max(m, std::fabs(static_cast<double>(op.weight[k * taps + t])));
        sw[k] = (ws == WeightScales::per_channel ? m : wmax_all) / 448.0;
      }
      const std::vector<float>& xin = ref[static_cast<std::size_t>(op.input.buffer)];
      double worst = 0, worst_ratio = 0;
      for (int oy = 0; oy < op.output.h; ++oy) {
        for (int ox = 0; ox < op.output.w; ++ox) {
          for (int k = 0; k < op.out_channels; ++k) {
            double e = 0;
            for (int r = 0; r < op.kernel; ++r) {
              for (int s = 0; s < op.kernel; ++s) {
                const int iy = oy * op.stride - op.pad + r, ix = ox * op.stride - op.pad + s;
                if (iy < 0 || iy >= op.input.h || ix < 0 || ix >= op.input.w) continue;
                for (int ch = 0; ch < op.in_channels; ++ch) {
                  const double xv = xin[at(op.input, iy, ix, ch)];
                  const double wv = op.weight[static_cast<std::size_t>(k) * taps +
                                              (r * op.kernel + s) * op.in_channels + ch];
                  const double hw = fp8_half_step(wv, sw[k]), hx = fp8_half_step(xv, sx);
                  e += std::fabs(xv) * hw + (std::fabs(wv) + hw) * hx;
                }
              }
            }
            const std::size_t yi = at(op.output, oy, ox, k);
            const double y_ref = ref[static_cast<std::size_t>(op.output.buffer)][yi];
            const double y_got = got[static_cast<std::size_t>(op.output.buffer)][yi];
            double bound = 1.1 * e + std::ldexp(std::fabs(y_ref), -22) + 1e-6;
            if (op.has_residual) {
              const double rv =
                  ref[static_cast<std::size_t>(op.residual.buffer)][at(op.residual, oy, ox, k)];
              bound += fp8_half_step(rv, sr);
            }
            bound *= 1 + 1e-5;  // the scales' own float roundings
            const double d = std::fabs(y_got - y_ref);
            worst = std::max(worst, d);
            worst_ratio = std::max(worst_ratio, d / bound);
            if (d > bound) {
              FAIL_CHECK("(" << oy << ", " << ox << ", " << k << "): |" << y_got << " - " << y_ref
                             << "| > " << bound);
            }
          }
        }
      }
      INFO("largest error " << worst << ", " << worst_ratio << " of its bound");
      CHECK(worst > 0);  // it was quantised
    }
  }
}
