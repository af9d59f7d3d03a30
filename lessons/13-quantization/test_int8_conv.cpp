// Lesson 13 tests: the INT8 convolution's CPU reference.
//
// Oracles: the integer sum computed in int64 by a direct loop of its own (exact), a double
// convolution of the dequantised values (what the INT8 arithmetic must reproduce up to the final
// float rounding), and the float convolution of the original values, within a bound derived
// from the quantisation steps (below).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "common/testing.hpp"
#include "int8_conv.hpp"
#include "quantize.hpp"

using namespace lesson13;
using course::testing::Contains;

namespace {

struct Shape {
  int batch, in_h, in_w, in_c, out_c, kernel, stride, pad;
  int out_h() const { return (in_h + 2 * pad - kernel) / stride + 1; }
  int out_w() const { return (in_w + 2 * pad - kernel) / stride + 1; }
};

// Views inside wider buffers, as lesson 12's concatenations make them: `before` channels before
// the view and `after` channels after it, filled with a sentinel the convolution must not touch.
constexpr int kBefore = 2, kAfter = 3;
constexpr std::int8_t kSentinel8 = 99;
constexpr float kSentinel = -12345.0f;

struct Problem {
  Shape s;
  int act = 0;
  bool residual = false;
  // Float originals (NHWC dense, KRSC) and their quantised forms.
  std::vector<float> x, w, bias, res;
  float x_scale = 0, res_scale = 0;
  std::vector<std::int8_t> xq, rq;
  PerChannelInt8 wq;
  // Buffers holding the views.
  std::vector<std::int8_t> x_buf, res_buf;
  int x_stride = 0, res_stride = 0;
};

float max_abs(const std::vector<float>& v) {
  float m = 0;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

std::vector<std::int8_t> embed(const std::vector<std::int8_t>& dense, int pixels, int channels,
                               int* stride) {
  *stride = kBefore + channels + kAfter;
  std::vector<std::int8_t> buf(static_cast<std::size_t>(pixels) * *stride, kSentinel8);
  for (int p = 0; p < pixels; ++p) {
    for (int c = 0; c < channels; ++c) {
      buf[static_cast<std::size_t>(p) * *stride + kBefore + c] = dense[p * channels + c];
    }
  }
  return buf;
}

Problem make_problem(const Shape& s, int act, bool residual, std::mt19937& rng) {
  Problem p;
  p.s = s;
  p.act = act;
  p.residual = residual;
  std::uniform_real_distribution<float> ux(-2.0f, 3.0f), ub(-0.5f, 0.5f);
  const int in_pixels = s.batch * s.in_h * s.in_w, out_pixels = s.batch * s.out_h() * s.out_w();
  p.x.resize(static_cast<std::size_t>(in_pixels) * s.in_c);
  for (float& v : p.x) v = ux(rng);
  const int row = s.kernel * s.kernel * s.in_c;
  p.w.resize(static_cast<std::size_t>(s.out_c) * row);
  for (int k = 0; k < s.out_c; ++k) {
    // Output channels of different magnitudes: per-channel scales matter.
    std::uniform_real_distribution<float> uw(-0.3f / (1 + k % 4), 0.3f / (1 + k % 4));
    for (int i = 0; i < row; ++i) p.w[static_cast<std::size_t>(k) * row + i] = uw(rng);
  }
  p.bias.resize(static_cast<std::size_t>(s.out_c));
  for (float& v : p.bias) v = ub(rng);
  p.x_scale = int8_scale(max_abs(p.x));
  p.xq = quantize_int8_per_tensor(p.x, p.x_scale);
  p.wq = quantize_int8_per_channel(p.w, s.out_c);
  p.x_buf = embed(p.xq, in_pixels, s.in_c, &p.x_stride);
  if (residual) {
    p.res.resize(static_cast<std::size_t>(out_pixels) * s.out_c);
    for (float& v : p.res) v = ux(rng);
    p.res_scale = int8_scale(max_abs(p.res));
    p.rq = quantize_int8_per_tensor(p.res, p.res_scale);
    p.res_buf = embed(p.rq, out_pixels, s.out_c, &p.res_stride);
  }
  return p;
}

// Runs the reference into a wider output buffer (view at channel kBefore); checks that nothing
// outside the view was written and returns the view, densely.
template <class T>
std::vector<T> run(const Problem& p, Int8ConvOutput type, float y_scale, T sentinel) {
  const Shape& s = p.s;
  const int out_pixels = s.batch * s.out_h() * s.out_w();
  const int y_stride = kBefore + s.out_c + kAfter;
  std::vector<T> y_buf(static_cast<std::size_t>(out_pixels) * y_stride, sentinel);
  Int8ConvArgs a{};
  a.x = p.x_buf.data() + kBefore;
  a.w = p.wq.q.data();
  a.bias = p.bias.data();
  a.res = p.residual ? p.res_buf.data() + kBefore : nullptr;
  a.y = y_buf.data() + kBefore;
  a.x_stride = p.x_stride;
  a.res_stride = p.res_stride;
  a.y_stride = y_stride;
  a.batch = s.batch;
  a.in_h = s.in_h;
  a.in_w = s.in_w;
  a.in_c = s.in_c;
  a.out_h = s.out_h();
  a.out_w = s.out_w();
  a.out_c = s.out_c;
  a.kernel = s.kernel;
  a.stride = s.stride;
  a.pad = s.pad;
  a.act = p.act;
  a.x_scale = p.x_scale;
  a.w_scale = p.wq.scale.data();
  a.res_scale = p.res_scale;
  a.y_scale = y_scale;
  a.y_type = type;
  conv_int8_reference(a);
  std::vector<T> y(static_cast<std::size_t>(out_pixels) * s.out_c);
  for (int px = 0; px < out_pixels; ++px) {
    for (int c = 0; c < y_stride; ++c) {
      const T v = y_buf[static_cast<std::size_t>(px) * y_stride + c];
      if (c < kBefore || c >= kBefore + s.out_c) {
        REQUIRE(v == sentinel);
      } else {
        y[static_cast<std::size_t>(px) * s.out_c + c - kBefore] = v;
      }
    }
  }
  return y;
}

// The input value a tap reads, or `none` in the padding; written from the definition.
template <class F>
void for_each_tap(const Shape& s, int n, int oy, int ox, F f) {
  for (int r = 0; r < s.kernel; ++r) {
    for (int q = 0; q < s.kernel; ++q) {
      const int iy = oy * s.stride - s.pad + r, ix = ox * s.stride - s.pad + q;
      if (iy < 0 || iy >= s.in_h || ix < 0 || ix >= s.in_w) continue;
      for (int c = 0; c < s.in_c; ++c) {
        const std::size_t xi =
            ((static_cast<std::size_t>(n) * s.in_h + iy) * s.in_w + ix) * s.in_c + c;
        f(xi, (r * s.kernel + q) * s.in_c + c);
      }
    }
  }
}

double silu(double v) {
  return v / (1.0 + std::exp(-v));
}

const std::vector<Shape> kShapes = {
    {1, 7, 9, 5, 6, 3, 1, 1},    // odd sizes, channels that are multiples of nothing
    {2, 8, 6, 16, 8, 3, 2, 1},   // stride 2, batch 2
    {1, 5, 5, 3, 4, 1, 1, 0},    // 1x1
    {1, 3, 3, 1, 1, 3, 1, 0},    // one output pixel, one channel
    {1, 6, 7, 4, 3, 5, 2, 2},    // SPPF-like 5x5
    {3, 4, 4, 32, 16, 3, 1, 1},  // deeper K
};

}  // namespace

TEST_CASE("conv_int8_reference: the int32 accumulator is the exact integer sum", "[int8conv]") {
  std::mt19937 rng(21);
  std::uniform_int_distribution<int> q(-128, 127);  // -128 too: the kernel must not assume it away
  for (const Shape& s : kShapes) {
    Problem p = make_problem(s, 0, false, rng);
    for (std::int8_t& v : p.xq) v = static_cast<std::int8_t>(q(rng));
    for (std::int8_t& v : p.wq.q) v = static_cast<std::int8_t>(q(rng));
    p.x_buf = embed(p.xq, s.batch * s.in_h * s.in_w, s.in_c, &p.x_stride);
    p.x_scale = 1.0f;
    std::fill(p.wq.scale.begin(), p.wq.scale.end(), 1.0f);
    std::fill(p.bias.begin(), p.bias.end(), 0.0f);
    const std::vector<float> y = run<float>(p, Int8ConvOutput::f32, 0.0f, kSentinel);
    const int row = s.kernel * s.kernel * s.in_c;
    for (int n = 0; n < s.batch; ++n) {
      for (int oy = 0; oy < s.out_h(); ++oy) {
        for (int ox = 0; ox < s.out_w(); ++ox) {
          for (int k = 0; k < s.out_c; ++k) {
            long long sum = 0;
            for_each_tap(s, n, oy, ox, [&](std::size_t xi, int wi) {
              sum +=
                  static_cast<long long>(p.xq[xi]) * p.wq.q[static_cast<std::size_t>(k) * row + wi];
            });
            const std::size_t yi =
                ((static_cast<std::size_t>(n) * s.out_h() + oy) * s.out_w() + ox) * s.out_c + k;
            REQUIRE(y[yi] == static_cast<float>(sum));  // |sum| < 2^24 here: exact in float
          }
        }
      }
    }
  }
  // The largest YOLOv8n reduction, K = 3 * 3 * 256, every product 127 * 127: 37,161,216 > 2^24,
  // summed in int32 exactly (a float accumulator would have lost the low bits long before).
  Problem big = make_problem({1, 3, 3, 256, 2, 3, 1, 0}, 0, false, rng);
  std::fill(big.xq.begin(), big.xq.end(), std::int8_t{127});
  std::fill(big.wq.q.begin(), big.wq.q.end(), std::int8_t{127});
  big.wq.q[5] = -128;  // channel 0: one product is -16256 instead of 16129
  big.x_buf = embed(big.xq, 9, 256, &big.x_stride);
  big.x_scale = 1.0f;
  std::fill(big.wq.scale.begin(), big.wq.scale.end(), 1.0f);
  std::fill(big.bias.begin(), big.bias.end(), 0.0f);
  const std::vector<float> y = run<float>(big, Int8ConvOutput::f32, 0.0f, kSentinel);
  CHECK(y[0] == static_cast<float>(2303LL * 16129 - 16256));
  CHECK(y[1] == static_cast<float>(2304LL * 16129));
}

TEST_CASE("conv_int8_reference: equals the convolution of the dequantised values", "[int8conv]") {
  std::mt19937 rng(22);
  int near_ties = 0, int8_checked = 0;
  for (const Shape& s : kShapes) {
    for (int act : {0, 1}) {
      for (bool residual : {false, true}) {
        const Problem p = make_problem(s, act, residual, rng);
        const int row = s.kernel * s.kernel * s.in_c;
        // The oracle, in double, on dequantised values q * scale.
        std::vector<double> want, magnitude;
        for (int n = 0; n < s.batch; ++n) {
          for (int oy = 0; oy < s.out_h(); ++oy) {
            for (int ox = 0; ox < s.out_w(); ++ox) {
              for (int k = 0; k < s.out_c; ++k) {
                double v = p.bias[k], mag = std::fabs(p.bias[k]);
                for_each_tap(s, n, oy, ox, [&](std::size_t xi, int wi) {
                  const double t = (static_cast<double>(p.xq[xi]) * p.x_scale) *
                                   (static_cast<double>(p.wq.q[k * row + wi]) * p.wq.scale[k]);
                  v += t;
                  mag += std::fabs(t);
                });
                if (act) v = silu(v);
                const std::size_t yi = want.size();
                if (residual) {
                  v += static_cast<double>(p.rq[yi]) * p.res_scale;
                  mag += std::fabs(static_cast<double>(p.rq[yi]) * p.res_scale);
                }
                want.push_back(v);
                magnitude.push_back(mag);
              }
            }
          }
        }
        // Float output: the same value up to the final rounding to float (2^-24 relative) and
        // double rounding in the two sums (K terms, 2^-53 each, relative to the sum of
        // magnitudes).
        const std::vector<float> y = run<float>(p, Int8ConvOutput::f32, 0.0f, kSentinel);
        for (std::size_t i = 0; i < y.size(); ++i) {
          const double bound =
              std::ldexp(std::fabs(want[i]), -23) + (row + 4) * std::ldexp(magnitude[i], -51);
          INFO("act " << act << " residual " << residual << " element " << i);
          REQUIRE(std::fabs(y[i] - want[i]) <= bound);
        }
        // INT8 output: round half to even of v / y_scale, saturated; a value within 1e-4 of a
        // tie may go either way (the reference rounds v to float first).
        const float y_scale = int8_scale(0.8 * max_abs(y));  // some outputs saturate
        const std::vector<std::int8_t> yq =
            run<std::int8_t>(p, Int8ConvOutput::int8, y_scale, kSentinel8);
        for (std::size_t i = 0; i < yq.size(); ++i) {
          const double t = want[i] / y_scale;
          const double expect = std::max(-127.0, std::min(127.0, std::nearbyint(t)));
          const bool near_tie = std::fabs(std::fabs(t - std::floor(t)) - 0.5) < 1e-4;
          INFO("act " << act << " residual " << residual << " element " << i << ": v / s = " << t);
          ++int8_checked;
          if (near_tie) {
            ++near_ties;
            REQUIRE(std::fabs(yq[i] - expect) <= 1);
          } else {
            REQUIRE(yq[i] == expect);
          }
          REQUIRE(yq[i] >= -127);
        }
      }
    }
  }
  INFO(near_ties << " near ties of " << int8_checked);
  CHECK(near_ties * 100 < int8_checked);
}

TEST_CASE("conv_int8_reference: within the derived bound of the float convolution", "[int8conv]") {
  // Quantising x (scale sx, no saturation: sx = max|x| / 127) errs by at most sx / 2 per value,
  // each weight by sw[k] / 2. For one output, with x' and w' the dequantised values,
  //   |sum x w - sum x' w'| = |sum x (w - w') + w' (x - x')| <= sum |x| sw[k] / 2 + |w'| sx / 2
  // = E1. SiLU's slope is at most 1.0998 (at v = 2.40), so the error after it is at most
  // 1.1 E1; the residual adds sr / 2; an INT8 output another y_scale / 2 (saturation, onto a
  // range holding the exact value, only brings it closer). Plus float rounding (2^-22 relative).
  std::mt19937 rng(23);
  double worst_ratio = 0;
  for (const Shape& s : kShapes) {
    for (int act : {0, 1}) {
      for (bool residual : {false, true}) {
        const Problem p = make_problem(s, act, residual, rng);
        const int row = s.kernel * s.kernel * s.in_c;
        const std::vector<float> w_deq = dequantize_int8_per_channel(p.wq);
        std::vector<double> exact, bound;
        for (int n = 0; n < s.batch; ++n) {
          for (int oy = 0; oy < s.out_h(); ++oy) {
            for (int ox = 0; ox < s.out_w(); ++ox) {
              for (int k = 0; k < s.out_c; ++k) {
                double v = p.bias[k], e1 = 0;
                for_each_tap(s, n, oy, ox, [&](std::size_t xi, int wi) {
                  const std::size_t wj = static_cast<std::size_t>(k) * row + wi;
                  v += static_cast<double>(p.x[xi]) * p.w[wj];
                  e1 +=
                      std::fabs(p.x[xi]) * p.wq.scale[k] / 2 + std::fabs(w_deq[wj]) * p.x_scale / 2;
                });
                double b = (act ? 1.1 : 1.0) * e1;
                if (act) v = silu(v);
                if (residual) {
                  v += p.res[exact.size()];
                  b += p.res_scale / 2;
                }
                exact.push_back(v);
                bound.push_back(b * (1 + 1e-6) + std::ldexp(std::fabs(v), -22));
              }
            }
          }
        }
        const std::vector<float> y = run<float>(p, Int8ConvOutput::f32, 0.0f, kSentinel);
        const float y_scale = int8_scale(max_abs(y) * 1.05);
        const std::vector<std::int8_t> yq =
            run<std::int8_t>(p, Int8ConvOutput::int8, y_scale, kSentinel8);
        for (std::size_t i = 0; i < y.size(); ++i) {
          INFO("act " << act << " residual " << residual << " element " << i);
          REQUIRE(std::fabs(y[i] - exact[i]) <= bound[i]);
          REQUIRE(std::fabs(dequantize_int8(yq[i], y_scale) - exact[i]) <=
                  bound[i] + y_scale / 2 * (1 + 1e-6));
          worst_ratio = std::max(worst_ratio, std::fabs(y[i] - exact[i]) / bound[i]);
        }
      }
    }
  }
  // The bound is a worst case; the errors average out far below it.
  INFO("largest error / bound: " << worst_ratio);
  CHECK(worst_ratio < 1.0);
}

TEST_CASE("conv_int8_reference: batch 0, and bad arguments refused", "[int8conv]") {
  std::mt19937 rng(24);
  const Shape s{1, 5, 5, 4, 3, 3, 1, 1};
  const Problem p = make_problem(s, 1, true, rng);
  std::vector<float> y(static_cast<std::size_t>(25) * 3, kSentinel);
  Int8ConvArgs good{};
  good.x = p.xq.data();
  good.w = p.wq.q.data();
  good.bias = p.bias.data();
  good.res = p.rq.data();
  good.y = y.data();
  good.x_stride = 4;
  good.res_stride = 3;
  good.y_stride = 3;
  good.batch = 1;
  good.in_h = good.in_w = 5;
  good.in_c = 4;
  good.out_h = good.out_w = 5;
  good.out_c = 3;
  good.kernel = 3;
  good.stride = 1;
  good.pad = 1;
  good.act = 1;
  good.x_scale = p.x_scale;
  good.w_scale = p.wq.scale.data();
  good.res_scale = p.res_scale;
  good.y_scale = 0.0f;  // unused for float output
  good.y_type = Int8ConvOutput::f32;
  CHECK_NOTHROW(conv_int8_reference(good));
  CHECK(y[0] != kSentinel);

  Int8ConvArgs zero = good;
  std::fill(y.begin(), y.end(), kSentinel);
  zero.batch = 0;
  CHECK_NOTHROW(conv_int8_reference(zero));
  CHECK(std::all_of(y.begin(), y.end(), [](float v) { return v == kSentinel; }));

  const std::vector<float> zero_scales(3, 0.0f);
  auto bad = [&](auto edit, const char* message) {
    Int8ConvArgs a = good;
    edit(a);
    INFO(message);
    CHECK_THROWS_WITH(conv_int8_reference(a), Contains(message));
  };
  bad([](Int8ConvArgs& a) { a.x = nullptr; }, "must not be null");
  bad([](Int8ConvArgs& a) { a.w_scale = nullptr; }, "must not be null");
  bad([](Int8ConvArgs& a) { a.in_c = 0; }, "positive sizes");
  bad([](Int8ConvArgs& a) { a.batch = -1; }, "batch >= 0");
  bad([](Int8ConvArgs& a) { a.pad = -1; }, "pad >= 0");
  bad([](Int8ConvArgs& a) { a.out_h = 4; }, "is not what a 3x3 stride 1 pad 1 convolution makes");
  bad([](Int8ConvArgs& a) { a.stride = 2; }, "is not what a 3x3 stride 2");
  bad([](Int8ConvArgs& a) { a.x_stride = 3; }, "stride is smaller");
  bad([](Int8ConvArgs& a) { a.res_stride = 2; }, "stride is smaller");
  bad([](Int8ConvArgs& a) { a.act = 2; }, "act must be");
  bad([](Int8ConvArgs& a) { a.x_scale = 0.0f; }, "x_scale");
  bad([](Int8ConvArgs& a) { a.x_scale = std::numeric_limits<float>::infinity(); }, "x_scale");
  bad([&](Int8ConvArgs& a) { a.w_scale = zero_scales.data(); }, "w_scale[0]");
  bad([](Int8ConvArgs& a) { a.res_scale = -1.0f; }, "res_scale");
  bad([](Int8ConvArgs& a) { a.y_type = Int8ConvOutput::int8; }, "y_scale");
  bad(
      [](Int8ConvArgs& a) {
        a.in_c = 20000;
        a.x_stride = 20000;
      },
      "overflow the int32 accumulator");
  // Without a residual, res_stride and res_scale are not looked at.
  Int8ConvArgs no_res = good;
  no_res.res = nullptr;
  no_res.res_stride = 0;
  no_res.res_scale = 0.0f;
  CHECK_NOTHROW(conv_int8_reference(no_res));
}
