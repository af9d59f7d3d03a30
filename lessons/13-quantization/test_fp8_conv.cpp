// Lesson 13 tests: the FP8 E4M3 convolution's CPU reference.
//
// Oracles: cases worked out by hand (sums a float accumulator cannot hold, the largest K,
// saturation); a direct convolution in long double of its own, with its own E4M3 decoding from
// the format's definition (long double holds the sum of K products exactly here, as double
// does: every term is a multiple of 2^-18 below 2^18); for FP8 output, the nearest of the 127
// non-negative finite E4M3 values, found by search, ties to the even mantissa; the weights'
// quantisation error bound of a 3-bit mantissa.
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/testing.hpp"
#include "fp8_conv.hpp"
#include "quantize.hpp"

using namespace lesson13;
using course::testing::Contains;

namespace {

// E4M3 from the definition, independently of quantize.hpp: S.EEEE.MMM, bias 7, E = 0 subnormal.
long double spec_value(std::uint8_t code) {
  const int e = (code >> 3) & 15, m = code & 7;
  const long double v = e == 0 ? std::ldexp(static_cast<long double>(m) / 8, -6)
                               : std::ldexp(1 + static_cast<long double>(m) / 8, e - 7);
  return (code & 0x80) ? -v : v;
}

bool is_nan_code(std::uint8_t c) {
  return (c & 0x7F) == 0x7F;
}

// The code nearest to t (saturating: beyond 448 the nearest finite value is 448), ties to the
// even mantissa; `ambiguous` when two values are within 1e-6 of t's distance (the reference
// rounds v to float first, which may decide a near tie either way).
std::uint8_t nearest_code(long double t, bool* ambiguous) {
  const std::uint8_t sign = t < 0 ? 0x80 : 0;
  const long double a = std::fabs(t);
  int best = 0;
  long double best_d = a, second_d = std::numeric_limits<long double>::infinity();
  for (int c = 1; c < 0x7F; ++c) {
    const long double d = std::fabs(spec_value(static_cast<std::uint8_t>(c)) - a);
    if (d < best_d || (d == best_d && (c & 1) == 0)) {
      second_d = best_d;
      best_d = d;
      best = c;
    } else if (d < second_d) {
      second_d = d;
    }
  }
  *ambiguous = second_d - best_d <= 1e-6L * std::max<long double>(1, a);
  return static_cast<std::uint8_t>(sign | best);
}

struct Shape {
  int batch, in_h, in_w, in_c, out_c, kernel, stride, pad;
  int out_h() const { return (in_h + 2 * pad - kernel) / stride + 1; }
  int out_w() const { return (in_w + 2 * pad - kernel) / stride + 1; }
};

const std::vector<Shape> kShapes = {
    {1, 7, 9, 5, 6, 3, 1, 1},    // odd sizes
    {2, 8, 6, 16, 8, 3, 2, 1},   // stride 2, batch 2
    {1, 5, 5, 3, 4, 1, 1, 0},    // 1x1
    {1, 3, 3, 1, 1, 3, 1, 0},    // one output pixel, one channel
    {1, 6, 7, 4, 3, 5, 2, 2},    // SPPF-like 5x5
    {3, 4, 4, 32, 16, 3, 1, 1},  // deeper K
};

// Views inside wider buffers, filled around with a sentinel the convolution must not touch.
constexpr int kBefore = 2, kAfter = 3;
constexpr std::uint8_t kSentinel8 = 0x5A;
constexpr float kSentinel = -12345.0f;

std::vector<std::uint8_t> embed(const std::vector<std::uint8_t>& dense, int pixels, int channels,
                                int* stride) {
  *stride = kBefore + channels + kAfter;
  std::vector<std::uint8_t> buf(static_cast<std::size_t>(pixels) * *stride, kSentinel8);
  for (int p = 0; p < pixels; ++p) {
    for (int c = 0; c < channels; ++c) {
      buf[static_cast<std::size_t>(p) * *stride + kBefore + c] = dense[p * channels + c];
    }
  }
  return buf;
}

struct Problem {
  Shape s;
  int act = 0;
  bool residual = false;
  std::vector<std::uint8_t> xq, wq, rq;  // dense codes
  std::vector<float> bias, w_scale;
  float x_scale = 0, res_scale = 0;
  std::vector<std::uint8_t> x_buf, res_buf;
  int x_stride = 0, res_stride = 0;
};

// Random finite codes over the whole range (2^-9 .. 448: a sum a float accumulator rounds),
// scales that keep the outputs near 1.
Problem make_problem(const Shape& s, int act, bool residual, std::mt19937& rng) {
  Problem p;
  p.s = s;
  p.act = act;
  p.residual = residual;
  std::uniform_int_distribution<int> code(0, 255);
  const auto finite = [&] {
    std::uint8_t c;
    do c = static_cast<std::uint8_t>(code(rng));
    while (is_nan_code(c));
    return c;
  };
  const int in_pixels = s.batch * s.in_h * s.in_w, out_pixels = s.batch * s.out_h() * s.out_w();
  const int row = s.kernel * s.kernel * s.in_c;
  p.xq.resize(static_cast<std::size_t>(in_pixels) * s.in_c);
  for (auto& c : p.xq) c = finite();
  p.wq.resize(static_cast<std::size_t>(s.out_c) * row);
  for (auto& c : p.wq) c = finite();
  std::uniform_real_distribution<float> ub(-0.5f, 0.5f);
  p.bias.resize(static_cast<std::size_t>(s.out_c));
  for (float& v : p.bias) v = ub(rng);
  p.x_scale = 1.0f / 448;
  p.w_scale.resize(static_cast<std::size_t>(s.out_c));
  for (int k = 0; k < s.out_c; ++k) p.w_scale[k] = 3.0f / 448 / (1 + k % 4) / std::sqrt(row);
  p.x_buf = embed(p.xq, in_pixels, s.in_c, &p.x_stride);
  if (residual) {
    p.rq.resize(static_cast<std::size_t>(out_pixels) * s.out_c);
    for (auto& c : p.rq) c = finite();
    p.res_scale = 1.0f / 256;
    p.res_buf = embed(p.rq, out_pixels, s.out_c, &p.res_stride);
  }
  return p;
}

Fp8ConvArgs args_of(const Problem& p) {
  const Shape& s = p.s;
  Fp8ConvArgs a{};
  a.x = p.x_buf.data() + kBefore;
  a.w = p.wq.data();
  a.bias = p.bias.data();
  a.res = p.residual ? p.res_buf.data() + kBefore : nullptr;
  a.x_stride = p.x_stride;
  a.res_stride = p.res_stride;
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
  a.w_scale = p.w_scale.data();
  a.res_scale = p.res_scale;
  return a;
}

// Runs the reference into a wider output buffer (view at channel kBefore); checks that nothing
// outside the view was written and returns the view, densely.
template <class T>
std::vector<T> run(const Problem& p, Fp8ConvOutput type, float y_scale, T sentinel) {
  const Shape& s = p.s;
  const int out_pixels = s.batch * s.out_h() * s.out_w();
  const int y_stride = kBefore + s.out_c + kAfter;
  std::vector<T> y_buf(static_cast<std::size_t>(out_pixels) * y_stride, sentinel);
  Fp8ConvArgs a = args_of(p);
  a.y = y_buf.data() + kBefore;
  a.y_stride = y_stride;
  a.y_scale = y_scale;
  a.y_type = type;
  conv_fp8_reference(a);
  std::vector<T> y(static_cast<std::size_t>(out_pixels) * s.out_c);
  for (int px = 0; px < out_pixels; ++px) {
    for (int c = 0; c < y_stride; ++c) {
      const T v = y_buf[static_cast<std::size_t>(px) * y_stride + c];
      if (c < kBefore || c >= kBefore + s.out_c) {
        REQUIRE(std::memcmp(&v, &sentinel, sizeof v) == 0);
      } else {
        y[static_cast<std::size_t>(px) * s.out_c + c - kBefore] = v;
      }
    }
  }
  return y;
}

// The oracle: for every output, the exact tap sum, the sum of |products|, and v after the
// epilogue, all in long double from the definition; and the tap sum as a float accumulator
// makes it (rounded after every addition, in tap order).
struct Oracle {
  std::vector<long double> acc, abs_sum, v;
  std::vector<float> float_acc;
};

Oracle oracle(const Problem& p) {
  const Shape& s = p.s;
  const int row = s.kernel * s.kernel * s.in_c;
  Oracle o;
  for (int n = 0; n < s.batch; ++n) {
    for (int oy = 0; oy < s.out_h(); ++oy) {
      for (int ox = 0; ox < s.out_w(); ++ox) {
        for (int k = 0; k < s.out_c; ++k) {
          long double acc = 0, mag = 0;
          float f = 0;
          for (int r = 0; r < s.kernel; ++r) {
            for (int q = 0; q < s.kernel; ++q) {
              const int iy = oy * s.stride - s.pad + r, ix = ox * s.stride - s.pad + q;
              if (iy < 0 || iy >= s.in_h || ix < 0 || ix >= s.in_w) continue;
              for (int c = 0; c < s.in_c; ++c) {
                const long double t =
                    spec_value(
                        p.xq[((static_cast<std::size_t>(n) * s.in_h + iy) * s.in_w + ix) * s.in_c +
                             c]) *
                    spec_value(
                        p.wq[static_cast<std::size_t>(k) * row + (r * s.kernel + q) * s.in_c + c]);
                acc += t;
                mag += std::fabs(t);
                f += static_cast<float>(t);  // t has at most 8 significant bits: exact
              }
            }
          }
          long double v = acc * p.x_scale * p.w_scale[k] + p.bias[k];
          if (p.act) v = v / (1 + std::exp(-v));
          if (p.residual) v += p.res_scale * spec_value(p.rq[o.v.size()]);
          o.acc.push_back(acc);
          o.float_acc.push_back(f);
          o.abs_sum.push_back(mag);
          o.v.push_back(v);
        }
      }
    }
  }
  return o;
}

// A 1 x 1 x in_c input convolved 1x1 into one channel, scales 1, bias 0 unless given.
std::vector<float> dot(const std::vector<std::uint8_t>& x, const std::vector<std::uint8_t>& w,
                       float bias = 0.0f, std::vector<double>* abs_sums = nullptr) {
  const float one = 1.0f;
  std::vector<float> y(1, kSentinel);
  Fp8ConvArgs a{};
  a.x = x.data();
  a.w = w.data();
  a.bias = &bias;
  a.y = y.data();
  a.x_stride = a.in_c = static_cast<int>(x.size());
  a.y_stride = a.out_c = 1;
  a.batch = a.in_h = a.in_w = a.out_h = a.out_w = a.kernel = a.stride = 1;
  a.x_scale = 1.0f;
  a.w_scale = &one;
  a.y_type = Fp8ConvOutput::f32;
  conv_fp8_reference(a);
  if (abs_sums) *abs_sums = conv_fp8_abs_sums(a);
  return y;
}

}  // namespace

TEST_CASE("conv_fp8_reference: the sum is exact, where float accumulation is not", "[fp8conv]") {
  // 448 x 448 + 2^-9 x 2^-9 - 448 x 448 = 2^-18: a float (or FP32 tensor-core) accumulator
  // loses the 2^-18 against 200704 and returns 0.
  const std::uint8_t p448 = 0x7E, m448 = 0xFE, tiny = 0x01;  // 448, -448, 2^-9
  std::vector<double> abs_sums;
  CHECK(dot({p448, tiny, m448}, {p448, tiny, p448}, 0.0f, &abs_sums)[0] == std::ldexp(1.0f, -18));
  CHECK(abs_sums[0] == 2 * 200704.0 + std::ldexp(1.0, -18));
  // In any order (the sum is exact, so the order cannot matter).
  CHECK(dot({tiny, p448, m448}, {tiny, p448, p448})[0] == std::ldexp(1.0f, -18));
  CHECK(dot({m448, p448, tiny}, {p448, p448, tiny})[0] == std::ldexp(1.0f, -18));

  // The longest K: kFp8ConvMaxK - 1 products of 448 x 448 and one of 2^-18, a sum of
  // 34359521280 + 2^-18, just under 2^35 with a last bit of 2^-18: all 53 bits of a double. The
  // float bias -(K - 1) 200704 (= -8388555 x 2^12, a float) leaves exactly the 2^-18.
  const int k = kFp8ConvMaxK;
  std::vector<std::uint8_t> x(static_cast<std::size_t>(k), p448),
      w(static_cast<std::size_t>(k), p448);
  x[k / 2] = tiny;
  w[k / 2] = tiny;
  const long long big = static_cast<long long>(k - 1) * 200704;
  REQUIRE(static_cast<long long>(static_cast<float>(big)) == big);
  CHECK(dot(x, w, -static_cast<float>(big), &abs_sums)[0] == std::ldexp(1.0f, -18));
  CHECK(abs_sums[0] == static_cast<double>(big) + std::ldexp(1.0, -18));
  x.push_back(p448);
  w.push_back(p448);
  CHECK_THROWS_WITH(dot(x, w), Contains("exact double sum's limit"));

  // Random codes over the whole range, scales 1, bias 0: the output is float(exact sum), and
  // a float accumulator (the oracle's sum rounded after each addition) is not.
  std::mt19937 rng(31);
  int float_differs = 0, outputs = 0;
  for (const Shape& s : kShapes) {
    Problem p = make_problem(s, 0, false, rng);
    p.x_scale = 1.0f;
    std::fill(p.w_scale.begin(), p.w_scale.end(), 1.0f);
    std::fill(p.bias.begin(), p.bias.end(), 0.0f);
    const std::vector<float> y = run<float>(p, Fp8ConvOutput::f32, 0.0f, kSentinel);
    const Oracle o = oracle(p);
    Fp8ConvArgs a = args_of(p);
    float unused = kSentinel;
    a.y = &unused;  // not written
    a.y_stride = s.out_c;
    a.y_type = Fp8ConvOutput::f32;
    const std::vector<double> sums = conv_fp8_abs_sums(a);
    REQUIRE(sums.size() == y.size());
    CHECK(unused == kSentinel);
    for (std::size_t i = 0; i < y.size(); ++i) {
      INFO("element " << i);
      REQUIRE(y[i] == static_cast<float>(o.acc[i]));
      REQUIRE(sums[i] == static_cast<double>(o.abs_sum[i]));
      REQUIRE(static_cast<long double>(sums[i]) == o.abs_sum[i]);  // exact: nothing was lost
    }
    for (std::size_t i = 0; i < y.size(); ++i, ++outputs) {
      float_differs += o.float_acc[i] != static_cast<float>(o.acc[i]);
    }
  }
  INFO(float_differs << " of " << outputs << " float accumulations differ from the exact sum");
  CHECK(float_differs > 0);
}

TEST_CASE("conv_fp8_reference: a 3x3 convolution with padding worked out by hand", "[fp8conv]") {
  // Input 2 x 2 x 1: 1.0 (0x38), 1.5 (0x3C), 2^-9 (0x01), -2.0 (0xC0). A 3x3 kernel with pad 1
  // sees all four pixels from every output position, at a different tap each; weights: 1.0
  // everywhere except the centre, 0.5 (0x30). Output (oy, ox) = sum of the pixels + (0.5 - 1)
  // x the pixel under the centre tap, i.e. pixel (oy, ox): sum = 0.5 + 2^-9.
  // With x_scale 2, w_scale 0.25 and bias 0.125: y = (0.5 + 2^-9 - 0.5 p) 0.5 + 0.125.
  const std::vector<std::uint8_t> x{0x38, 0x3C, 0x01, 0xC0};
  std::vector<std::uint8_t> w(9, 0x38);
  w[4] = 0x30;
  const float bias = 0.125f, w_scale = 0.25f;
  std::vector<float> y(4, kSentinel);
  Fp8ConvArgs a{};
  a.x = x.data();
  a.w = w.data();
  a.bias = &bias;
  a.y = y.data();
  a.x_stride = a.in_c = 1;
  a.y_stride = a.out_c = 1;
  a.batch = 1;
  a.in_h = a.in_w = a.out_h = a.out_w = 2;
  a.kernel = 3;
  a.stride = 1;
  a.pad = 1;
  a.x_scale = 2.0f;
  a.w_scale = &w_scale;
  a.y_type = Fp8ConvOutput::f32;
  conv_fp8_reference(a);
  const double pixel[] = {1.0, 1.5, std::ldexp(1.0, -9), -2.0};
  for (int i = 0; i < 4; ++i) {
    INFO("output " << i);
    CHECK(y[i] == static_cast<float>((0.5 + std::ldexp(1.0, -9) - 0.5 * pixel[i]) * 0.5 + 0.125));
  }
  // Stride 2: one output, at (0, 0): the same as y[0].
  a.stride = 2;
  a.out_h = a.out_w = 1;
  std::vector<float> y1(1, kSentinel);
  a.y = y1.data();
  conv_fp8_reference(a);
  CHECK(y1[0] == y[0]);
}

TEST_CASE("conv_fp8_reference: FP8 output rounds to nearest even and saturates at 448",
          "[fp8conv]") {
  // 448 x 448 = 200704 with scales 1. y_scale 1: 200704 saturates to 448 (0x7E), -200704 to
  // -448 (0xFE). y_scale 448: exactly 448. y_scale 1024: 196, in the binade [128, 256) of step
  // 16, is 12.25 steps -> 12 -> 192 = 1.5 x 2^7 (0x74). y_scale 2^20: 0.19140625 = 12.25 steps
  // of 2^-6 -> 0.1875 (0x24).
  const float one = 1.0f, zero = 0.0f;
  const std::uint8_t p448 = 0x7E, m448 = 0xFE;
  const auto fp8_out = [&](std::uint8_t xc, float y_scale) {
    std::uint8_t y = kSentinel8;
    Fp8ConvArgs a{};
    a.x = &xc;
    a.w = &p448;
    a.bias = &zero;
    a.y = &y;
    a.x_stride = a.in_c = a.y_stride = a.out_c = 1;
    a.batch = a.in_h = a.in_w = a.out_h = a.out_w = a.kernel = a.stride = 1;
    a.x_scale = 1.0f;
    a.w_scale = &one;
    a.y_scale = y_scale;
    a.y_type = Fp8ConvOutput::fp8;
    conv_fp8_reference(a);
    return y;
  };
  CHECK(fp8_out(p448, 1.0f) == 0x7E);
  CHECK(fp8_out(m448, 1.0f) == 0xFE);
  CHECK(fp8_out(p448, 448.0f) == 0x7E);
  CHECK(fp8_out(p448, 1024.0f) == 0x74);
  CHECK(fp8_out(m448, 1024.0f) == 0xF4);
  CHECK(fp8_out(p448, std::ldexp(1.0f, 20)) == 0x24);
  CHECK(spec_value(0x74) == 192);
  CHECK(spec_value(0x24) == 0.1875L);
}

TEST_CASE("conv_fp8_reference: the epilogue against a long double convolution", "[fp8conv]") {
  std::mt19937 rng(32);
  int near_ties = 0, fp8_checked = 0, saturated = 0;
  for (const Shape& s : kShapes) {
    for (int act : {0, 1}) {
      for (bool residual : {false, true}) {
        const Problem p = make_problem(s, act, residual, rng);
        const Oracle o = oracle(p);
        // Float output: v rounded once to float (2^-24 relative), plus the double roundings of
        // the epilogue (a few 2^-53 of the magnitudes involved).
        const std::vector<float> y = run<float>(p, Fp8ConvOutput::f32, 0.0f, kSentinel);
        float largest = 0;
        for (std::size_t i = 0; i < y.size(); ++i) {
          const long double mag =
              o.abs_sum[i] * p.x_scale * p.w_scale[i % s.out_c] + 1 + std::fabs(o.v[i]);
          const long double bound = std::ldexp(std::fabs(o.v[i]), -24) + std::ldexp(mag, -50);
          INFO("act " << act << " residual " << residual << " element " << i);
          REQUIRE(std::fabs(y[i] - o.v[i]) <= bound);
          largest = std::max(largest, std::fabs(y[i]));
        }
        // Half output: the float output rounded to half, to nearest even.
        const std::vector<__half> h =
            run<__half>(p, Fp8ConvOutput::f16, 0.0f, __float2half_rn(kSentinel));
        for (std::size_t i = 0; i < h.size(); ++i) {
          const __half want = __float2half_rn(y[i]);
          REQUIRE(std::memcmp(&h[i], &want, sizeof want) == 0);
        }
        // FP8 output: the E4M3 value nearest to v / y_scale; y_scale such that some saturate.
        const float y_scale = fp8_e4m3_scale(0.7 * largest);
        const std::vector<std::uint8_t> yq =
            run<std::uint8_t>(p, Fp8ConvOutput::fp8, y_scale, kSentinel8);
        for (std::size_t i = 0; i < yq.size(); ++i) {
          bool ambiguous = false;
          const std::uint8_t want = nearest_code(o.v[i] / y_scale, &ambiguous);
          INFO("act " << act << " residual " << residual << " element " << i
                      << ": v / s = " << static_cast<double>(o.v[i] / y_scale));
          ++fp8_checked;
          saturated += (want & 0x7F) == 0x7E;
          if (ambiguous) {
            ++near_ties;
            REQUIRE(std::fabs(spec_value(yq[i]) - spec_value(want)) <=
                    std::ldexp(std::fabs(spec_value(want)), -3) + std::ldexp(1.0L, -9));
          } else if (want == 0x80 || want == 0x00) {
            REQUIRE((yq[i] & 0x7F) == 0);  // a zero; its sign is v's
          } else {
            REQUIRE(yq[i] == want);
          }
        }
      }
    }
  }
  INFO(near_ties << " near ties, " << saturated << " saturated of " << fp8_checked);
  CHECK(near_ties * 100 < fp8_checked);
  CHECK(saturated > 0);
}

TEST_CASE("quantize_fp8_e4m3_weights: each row's max to 448, within half a step", "[fp8conv]") {
  // Three rows of four: magnitudes differ by 1000x, the last row zeros.
  const std::vector<float> w{0.5f,   -0.25f, 0.1f,  0.01f,  // max 0.5
                             -3e-4f, 2e-4f,  1e-5f, 5e-4f,  // max 5e-4
                             0.0f,   0.0f,   0.0f,  0.0f};
  for (bool per_channel : {true, false}) {
    INFO((per_channel ? "per channel" : "per tensor"));
    const Fp8Weights q = quantize_fp8_e4m3_weights(w, 3, per_channel);
    REQUIRE(q.channels == 3);
    REQUIRE(q.q.size() == w.size());
    REQUIRE(q.scale.size() == 3);
    if (per_channel) {
      CHECK(q.scale[0] == 0.5f / 448.0f);
      CHECK(q.scale[1] == 5e-4f / 448.0f);
      CHECK(q.scale[2] == 1.0f);
      CHECK(q.q[0] == 0x7E);  // 0.5: the row's max -> 448
      CHECK(q.q[7] == 0x7E);  // 5e-4
    } else {
      for (float s : q.scale) CHECK(s == 0.5f / 448.0f);
      CHECK(q.q[0] == 0x7E);
    }
    for (std::size_t i = 0; i < w.size(); ++i) {
      // A 3-bit mantissa: half a step is at most 2^-4 of the value above 2^-6 (normal), and
      // 2^-10 (half the subnormal step) below, both in units of the scale.
      const long double s = q.scale[i / 4], t = w[i] / s;
      const long double err = std::fabs(spec_value(q.q[i]) - t);
      INFO("weight " << i << " = " << w[i] << ": " << static_cast<double>(t) << " steps");
      CHECK(err <= std::max(std::ldexp(std::fabs(t), -4), std::ldexp(1.0L, -10)) * (1 + 1e-6L));
    }
    for (int i = 8; i < 12; ++i) CHECK(q.q[i] == 0);
  }
  // Per tensor, row 1 (1000x smaller) uses 1/1000 of the range: 5e-4 / (0.5 / 448) = 0.448
  // steps -> 0.4375 (1.75 x 2^-2, 0x2E); 1e-5 -> 0.00896, a subnormal: 4.59 x 2^-9 -> 5 x 2^-9
  // (0x05), 3 significant bits where per channel keeps 4: 1e-5 / (5e-4 / 448) = 8.96 -> 9
  // (1.125 x 2^3, 0x51).
  CHECK(quantize_fp8_e4m3_weights(w, 3, false).q[7] == 0x2E);
  CHECK(quantize_fp8_e4m3_weights(w, 3, false).q[6] == 0x05);
  CHECK(quantize_fp8_e4m3_weights(w, 3, true).q[6] == 0x51);
  CHECK_THROWS_AS(quantize_fp8_e4m3_weights(w, 5), std::invalid_argument);
  CHECK_THROWS_AS(quantize_fp8_e4m3_weights(w, 0), std::invalid_argument);
  std::vector<float> bad = w;
  bad[5] = std::numeric_limits<float>::quiet_NaN();
  CHECK_THROWS_WITH(quantize_fp8_e4m3_weights(bad, 3), Contains("weight 1 of channel 1"));
}

TEST_CASE("conv_fp8_reference: batch 0, and bad arguments refused", "[fp8conv]") {
  std::mt19937 rng(34);
  const Shape s{1, 5, 5, 4, 3, 3, 1, 1};
  const Problem p = make_problem(s, 1, true, rng);
  std::vector<float> y(static_cast<std::size_t>(25) * 3, kSentinel);
  Fp8ConvArgs good = args_of(p);
  good.x = p.xq.data();
  good.res = p.rq.data();
  good.x_stride = 4;
  good.res_stride = 3;
  good.y = y.data();
  good.y_stride = 3;
  good.y_scale = 0.0f;  // unused for float output
  good.y_type = Fp8ConvOutput::f32;
  CHECK_NOTHROW(conv_fp8_reference(good));
  CHECK(y[0] != kSentinel);

  Fp8ConvArgs zero = good;
  std::fill(y.begin(), y.end(), kSentinel);
  zero.batch = 0;
  CHECK_NOTHROW(conv_fp8_reference(zero));
  CHECK(std::all_of(y.begin(), y.end(), [](float v) { return v == kSentinel; }));

  const std::vector<float> zero_scales(3, 0.0f), subnormal_scales(3, 1e-40f);
  auto bad = [&](auto edit, const char* message) {
    Fp8ConvArgs a = good;
    edit(a);
    INFO(message);
    CHECK_THROWS_AS(conv_fp8_reference(a), std::invalid_argument);
    CHECK_THROWS_WITH(conv_fp8_reference(a), Contains("conv_fp8_reference: ") && Contains(message));
    CHECK_THROWS_WITH(conv_fp8_abs_sums(a), Contains("conv_fp8_abs_sums: ") && Contains(message));
  };
  bad([](Fp8ConvArgs& a) { a.x = nullptr; }, "must not be null");
  bad([](Fp8ConvArgs& a) { a.y = nullptr; }, "must not be null");
  bad([](Fp8ConvArgs& a) { a.w_scale = nullptr; }, "must not be null");
  bad([](Fp8ConvArgs& a) { a.in_c = 0; }, "positive sizes");
  bad([](Fp8ConvArgs& a) { a.batch = -1; }, "batch >= 0");
  bad([](Fp8ConvArgs& a) { a.pad = -1; }, "pad >= 0");
  bad([](Fp8ConvArgs& a) { a.out_h = 4; }, "is not what a 3x3 stride 1 pad 1 convolution makes");
  bad([](Fp8ConvArgs& a) { a.stride = 2; }, "is not what a 3x3 stride 2");
  bad([](Fp8ConvArgs& a) { a.x_stride = 3; }, "stride is smaller");
  bad([](Fp8ConvArgs& a) { a.y_stride = 2; }, "stride is smaller");
  bad([](Fp8ConvArgs& a) { a.res_stride = 2; }, "stride is smaller");
  bad([](Fp8ConvArgs& a) { a.act = 2; }, "act must be");
  bad([](Fp8ConvArgs& a) { a.y_type = static_cast<Fp8ConvOutput>(7); }, "unknown output type");
  for (float v : {0.0f, -0.5f, 1e-40f, std::numeric_limits<float>::quiet_NaN(),
                  std::numeric_limits<float>::infinity()}) {
    INFO("scale " << v);
    bad([v](Fp8ConvArgs& a) { a.x_scale = v; }, "x_scale must be a positive normal float");
    bad([v](Fp8ConvArgs& a) { a.res_scale = v; }, "res_scale must be a positive normal float");
    bad(
        [v](Fp8ConvArgs& a) {
          a.y_type = Fp8ConvOutput::fp8;
          a.y_scale = v;
        },
        "y_scale must be a positive normal float");
  }
  bad([&](Fp8ConvArgs& a) { a.w_scale = zero_scales.data(); }, "w_scale[0]");
  bad([&](Fp8ConvArgs& a) { a.w_scale = subnormal_scales.data(); }, "w_scale[0]");
  bad(
      [](Fp8ConvArgs& a) {
        a.kernel = 1;
        a.pad = 0;
        a.in_c = kFp8ConvMaxK + 1;
        a.x_stride = a.in_c;
      },
      "beyond the exact double sum's limit (at most 171196)");
  // The launcher's form skips reading w_scale, and names its caller.
  Fp8ConvArgs unread = good;
  unread.w_scale = zero_scales.data();
  CHECK_NOTHROW(check_fp8_conv_args(unread, "launcher", false));
  unread.x_scale = 0.0f;
  CHECK_THROWS_WITH(check_fp8_conv_args(unread, "launcher", false), Contains("launcher: x_scale"));
  // Without a residual, res_stride and res_scale are not looked at.
  Fp8ConvArgs no_res = good;
  no_res.res = nullptr;
  no_res.res_stride = 0;
  no_res.res_scale = 0.0f;
  CHECK_NOTHROW(conv_fp8_reference(no_res));
}

TEST_CASE("conv_fp8_reference: NaN codes propagate as in a zero-filled implicit GEMM",
          "[fp8conv]") {
  // Two pixels, a 1x1 kernel, two output channels: the NaN of pixel 0 makes its outputs NaN
  // only, the NaN weight of channel 1 every output of channel 1; FP8 output stores 0x7F.
  const std::vector<std::uint8_t> x{0x7F, 0x38};  // NaN, 1.0
  const std::vector<std::uint8_t> w{0x38, 0xFF};  // channel 0: 1.0, channel 1: NaN
  const float bias[] = {0.0f, 0.0f}, scale[] = {1.0f, 1.0f};
  std::vector<float> y(4, kSentinel);
  Fp8ConvArgs a{};
  a.x = x.data();
  a.w = w.data();
  a.bias = bias;
  a.y = y.data();
  a.x_stride = a.in_c = 1;
  a.y_stride = a.out_c = 2;
  a.batch = a.in_h = a.out_h = 1;
  a.in_w = a.out_w = 2;
  a.kernel = a.stride = 1;
  a.x_scale = 1.0f;
  a.w_scale = scale;
  a.y_type = Fp8ConvOutput::f32;
  conv_fp8_reference(a);
  CHECK(std::isnan(y[0]));
  CHECK(std::isnan(y[1]));
  CHECK(y[2] == 1.0f);
  CHECK(std::isnan(y[3]));
  std::vector<std::uint8_t> yq(4, kSentinel8);
  a.y = yq.data();
  a.y_type = Fp8ConvOutput::fp8;
  a.y_scale = 1.0f;
  conv_fp8_reference(a);
  CHECK(yq == std::vector<std::uint8_t>{0x7F, 0x7F, 0x38, 0x7F});
}
