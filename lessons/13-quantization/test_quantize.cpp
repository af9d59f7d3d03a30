// Lesson 13 tests: INT8 tensors (per tensor, per channel) and FP8 E4M3, bit for bit.
//
// Oracles: values derived by hand from the format's definition; CUDA's own conversions in
// cuda_fp8.h (__nv_cvt_float_to_fp8 / __nv_cvt_fp8_to_halfraw, NVIDIA's host implementation of
// what the GPU's cvt instructions do), with lesson 12's half_to_float for the half they return;
// exhaustive enumeration of the 256 codes and of every midpoint between neighbours.
#include <cuda_fp8.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/testing.hpp"
#include "network.hpp"  // lesson12::half_to_float
#include "quantize.hpp"

using namespace lesson13;
using course::testing::Contains;

namespace {

float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

std::uint8_t cuda_e4m3(float x) {
  return static_cast<std::uint8_t>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
}

float cuda_e4m3_value(std::uint8_t code) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(code, __NV_E4M3);
  return lesson12::half_to_float(h.x);
}

// The E4M3 value of a code from the specification's table, written independently of
// quantize.hpp: sign, 4 exponent bits with bias 7, 3 mantissa bits; E = 0 subnormal.
double spec_value(int code) {
  const int s = code >> 7, e = (code >> 3) & 15, m = code & 7;
  double v;
  if (e == 0) {
    v = m / 8.0 * std::pow(2.0, -6);
  } else {
    v = (1.0 + m / 8.0) * std::pow(2.0, e - 7);
  }
  return s ? -v : v;
}

}  // namespace

TEST_CASE("int8_scale and fp8_e4m3_scale: amax to the top of the grid; bad amax refused",
          "[quantize]") {
  CHECK(int8_scale(127.0) == 1.0f);
  CHECK(int8_scale(1.0) == 1.0f / 127.0f);
  CHECK(int8_scale(0.5) == 0.5f / 127.0f);
  CHECK(fp8_e4m3_scale(448.0) == 1.0f);
  CHECK(fp8_e4m3_scale(7.0) == 7.0f / 448.0f);
  for (double bad : {0.0, -1.0, std::numeric_limits<double>::infinity(),
                     std::numeric_limits<double>::quiet_NaN(), 1e-40}) {
    INFO("amax " << bad);
    CHECK_THROWS_AS(int8_scale(bad), std::invalid_argument);
    CHECK_THROWS_AS(fp8_e4m3_scale(bad), std::invalid_argument);
  }
  CHECK_THROWS_WITH(int8_scale(0.0), Contains("amax > 0"));
}

TEST_CASE("quantize_int8_per_tensor: error within half a step, saturation at +-127, never -128",
          "[quantize]") {
  std::mt19937 rng(13);
  std::uniform_real_distribution<float> d(-3.0f, 3.0f);
  std::vector<float> x(5000);
  for (float& v : x) v = d(rng);
  x.push_back(1000.0f);
  x.push_back(-1000.0f);
  x.push_back(0.0f);
  const float amax = 2.5f, s = int8_scale(amax);
  const std::vector<std::int8_t> q = quantize_int8_per_tensor(x, s);
  const std::vector<float> back = dequantize_int8_per_tensor(q, s);
  REQUIRE(q.size() == x.size());
  int saturated = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    INFO("x = " << x[i] << ", q = " << int(q[i]));
    REQUIRE(q[i] >= -127);
    if (std::fabs(x[i]) <= amax) {
      // |x - q s| <= s / 2 in exact arithmetic; the division x / s and the product q * s each
      // round once (relative 2^-24), which the margin covers.
      REQUIRE(std::fabs(static_cast<double>(x[i]) - back[i]) <= 0.5 * s + 4e-7 * std::fabs(x[i]));
    } else {
      ++saturated;
      REQUIRE(q[i] == (x[i] > 0 ? 127 : -127));
    }
  }
  CHECK(saturated > 100);          // values in (2.5, 3] and the two far ones
  CHECK(q[x.size() - 2] == -127);  // -1000: saturates to -127, not -128
  CHECK(q.back() == 0);
  CHECK(quantize_int8_per_tensor({}, s).empty());
  CHECK_THROWS_AS(quantize_int8_per_tensor(x, 0.0f), std::invalid_argument);
  CHECK_THROWS_AS(quantize_int8_per_tensor(x, -1.0f), std::invalid_argument);
  CHECK_THROWS_AS(quantize_int8_per_tensor(x, std::nanf("")), std::invalid_argument);
  CHECK_THROWS_AS(dequantize_int8_per_tensor(q, std::numeric_limits<float>::infinity()),
                  std::invalid_argument);
}

TEST_CASE("quantize_int8_per_channel: one scale per output channel from its own max",
          "[quantize]") {
  std::mt19937 rng(7);
  const int channels = 6, row = 3 * 3 * 5;  // KRSC rows of a 3x3 convolution over 5 channels
  std::vector<float> w(static_cast<std::size_t>(channels) * row);
  for (int k = 0; k < channels; ++k) {
    // Channels of very different magnitudes: what per-channel scales are for.
    std::uniform_real_distribution<float> d(-std::ldexp(1.0f, -k), std::ldexp(1.0f, -k));
    for (int i = 0; i < row; ++i) w[static_cast<std::size_t>(k) * row + i] = d(rng);
  }
  // Channel 4 all zero.
  for (int i = 0; i < row; ++i) w[4 * row + i] = 0.0f;
  const PerChannelInt8 pc = quantize_int8_per_channel(w, channels);
  REQUIRE(pc.channels == channels);
  REQUIRE(pc.scale.size() == static_cast<std::size_t>(channels));
  REQUIRE(pc.q.size() == w.size());
  const std::vector<float> back = dequantize_int8_per_channel(pc);
  for (int k = 0; k < channels; ++k) {
    float amax = 0;
    int argmax = 0;
    for (int i = 0; i < row; ++i) {
      if (std::fabs(w[k * row + i]) > amax) {
        amax = std::fabs(w[k * row + i]);
        argmax = i;
      }
    }
    INFO("channel " << k);
    if (amax == 0) {
      CHECK(pc.scale[k] == 1.0f);
      for (int i = 0; i < row; ++i) CHECK(pc.q[k * row + i] == 0);
      continue;
    }
    CHECK(pc.scale[k] == amax / 127.0f);
    CHECK(std::abs(pc.q[k * row + argmax]) == 127);
    for (int i = 0; i < row; ++i) {
      const std::size_t j = static_cast<std::size_t>(k) * row + i;
      REQUIRE(std::fabs(static_cast<double>(w[j]) - back[j]) <=
              0.5 * pc.scale[k] + 4e-7 * std::fabs(w[j]));
    }
  }
  CHECK_THROWS_AS(quantize_int8_per_channel(w, 0), std::invalid_argument);
  CHECK_THROWS_AS(quantize_int8_per_channel(w, 7), std::invalid_argument);  // 270 % 7 != 0
  std::vector<float> bad = w;
  bad[10] = std::numeric_limits<float>::infinity();
  CHECK_THROWS_WITH(quantize_int8_per_channel(bad, channels), Contains("finite"));
  bad[10] = std::nanf("");
  CHECK_THROWS_AS(quantize_int8_per_channel(bad, channels), std::invalid_argument);
}

TEST_CASE("FP8 E4M3 decode: all 256 codes against the specification and CUDA", "[quantize][fp8]") {
  int nans = 0;
  for (int c = 0; c < 256; ++c) {
    const std::uint8_t code = static_cast<std::uint8_t>(c);
    const float v = fp8_e4m3_to_float(code);
    INFO("code 0x" << std::hex << c);
    if ((c & 0x7F) == 0x7F) {
      ++nans;
      CHECK(std::isnan(v));
      CHECK(std::isnan(cuda_e4m3_value(code)));
      continue;
    }
    CHECK(static_cast<double>(v) == spec_value(c));
    CHECK(v == cuda_e4m3_value(code));
    CHECK(std::signbit(v) == (c >= 0x80));  // -0 is 0x80
  }
  CHECK(nans == 2);
  // Values from the specification's table, by hand.
  CHECK(fp8_e4m3_to_float(0x7E) == 448.0f);  // S.1111.110: the max
  CHECK(fp8_e4m3_to_float(0xFE) == -448.0f);
  CHECK(fp8_e4m3_to_float(0x78) == 256.0f);  // S.1111.000: a normal binade
  CHECK(fp8_e4m3_to_float(0x38) == 1.0f);    // exponent 7 = bias
  CHECK(fp8_e4m3_to_float(0x3C) == 1.5f);
  CHECK(fp8_e4m3_to_float(0x08) == 0.015625f);     // smallest normal 2^-6
  CHECK(fp8_e4m3_to_float(0x07) == 0.013671875f);  // largest subnormal 7 * 2^-9
  CHECK(fp8_e4m3_to_float(0x01) == 0.001953125f);  // smallest subnormal 2^-9
  CHECK(fp8_e4m3_to_float(0x00) == 0.0f);
  // Positive codes 0x00 .. 0x7E are strictly increasing: the order of the bits is the order of
  // the values (what makes a max over codes a max over values).
  for (int c = 1; c <= 0x7E; ++c) {
    CHECK(fp8_e4m3_to_float(static_cast<std::uint8_t>(c)) >
          fp8_e4m3_to_float(static_cast<std::uint8_t>(c - 1)));
  }
}

TEST_CASE("FP8 E4M3 encode: every code, every midpoint, the saturation and zero boundaries",
          "[quantize][fp8]") {
  // Every value encodes to its own code (zero and -0 included).
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;
    const float v = fp8_e4m3_to_float(static_cast<std::uint8_t>(c));
    INFO("code 0x" << std::hex << c);
    CHECK(int(fp8_e4m3_from_float(v)) == c);
  }
  // Midpoints of neighbours c, c + 1 (positive and negative): ties go to the even code (the
  // code's last bit is the mantissa's last bit; from S.EEEE.111 to the next binade's .000 the
  // even one is the larger). One float ulp either side goes to the nearer one.
  for (int c = 0; c < 0x7E; ++c) {
    for (int sign : {0, 0x80}) {
      const float lo = fp8_e4m3_to_float(static_cast<std::uint8_t>(sign | c));
      const float hi = fp8_e4m3_to_float(static_cast<std::uint8_t>(sign | (c + 1)));
      const float mid = (lo + hi) / 2;  // exact: both have few significant bits
      REQUIRE(static_cast<double>(mid) == (static_cast<double>(lo) + hi) / 2);
      const int even = sign | ((c % 2 == 0) ? c : c + 1);
      INFO("between 0x" << std::hex << (sign | c) << " and 0x" << (sign | (c + 1)));
      CHECK(int(fp8_e4m3_from_float(mid)) == even);
      CHECK(int(fp8_e4m3_from_float(std::nextafter(mid, lo))) == (sign | c));
      CHECK(int(fp8_e4m3_from_float(std::nextafter(mid, hi))) == (sign | (c + 1)));
    }
  }
  // Saturation: 464 is halfway from 448 to the 480 the format lacks; ties to even keep 448
  // (mantissa 110), and everything above it saturates rather than becoming NaN.
  const float inf = std::numeric_limits<float>::infinity();
  for (float x :
       {448.0f, 450.0f, 464.0f, std::nextafter(464.0f, inf), 480.0f, 500.0f, 1e6f, 3.0e38f, inf}) {
    INFO("x = " << x);
    CHECK(int(fp8_e4m3_from_float(x)) == 0x7E);
    CHECK(int(fp8_e4m3_from_float(-x)) == 0xFE);
  }
  // The zero boundary: half the smallest subnormal (2^-10) ties to the even code, zero.
  CHECK(int(fp8_e4m3_from_float(0.0009765625f)) == 0x00);
  CHECK(int(fp8_e4m3_from_float(-0.0009765625f)) == 0x80);
  CHECK(int(fp8_e4m3_from_float(std::nextafter(0.0009765625f, 1.0f))) == 0x01);
  CHECK(int(fp8_e4m3_from_float(1e-30f)) == 0x00);
  CHECK(int(fp8_e4m3_from_float(-1e-45f)) == 0x80);
  CHECK(int(fp8_e4m3_from_float(-0.0f)) == 0x80);
  // NaN: the canonical 0x7F whatever its sign or payload (what CUDA's conversion returns).
  CHECK(int(fp8_e4m3_from_float(std::nanf(""))) == 0x7F);
  CHECK(int(fp8_e4m3_from_float(-std::nanf(""))) == 0x7F);
  CHECK(int(fp8_e4m3_from_float(from_bits(0x7F800001u))) == 0x7F);
}

TEST_CASE("FP8 E4M3 encode: bit for bit CUDA's __nv_cvt_float_to_fp8 (satfinite)",
          "[quantize][fp8]") {
  long long checked = 0, mismatches = 0;
  auto compare = [&](std::uint32_t bits) {
    const float x = from_bits(bits);
    const int got = fp8_e4m3_from_float(x), want = cuda_e4m3(x);
    ++checked;
    if (got != want) {
      if (++mismatches <= 5) {
        INFO("bits 0x" << std::hex << bits << " x = " << x << ": got 0x" << got << ", CUDA 0x"
                       << want);
        CHECK(got == want);
      }
    }
  };
  // Dense around every rounding boundary: every float exponent that can matter (2^-27 .. 2^13),
  // the 3 mantissa bits E4M3 keeps plus the 4 below (the round and sticky region), with the low
  // 16 bits at and either side of 0 and of half.
  for (std::uint32_t sign : {0u, 0x80000000u}) {
    for (std::uint32_t e = 100; e <= 140; ++e) {
      for (std::uint32_t hi = 0; hi < 128; ++hi) {
        for (std::uint32_t lo : {0x0000u, 0x0001u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu}) {
          compare(sign | (e << 23) | (hi << 16) | lo);
        }
      }
    }
  }
  // A sweep over all 2^32 bit patterns with a stride (a prime, so every residue of the low bits
  // is visited): zeros, subnormals, normals, infinities and NaNs of floats.
  for (std::uint64_t b = 0; b <= 0xFFFFFFFFull; b += 4093) compare(static_cast<std::uint32_t>(b));
  // Random floats in the format's range and a little beyond.
  std::mt19937 rng(2023);
  std::uniform_real_distribution<float> d(-500.0f, 500.0f);
  for (int i = 0; i < 200000; ++i) {
    const float x = d(rng);
    std::uint32_t bits;
    std::memcpy(&bits, &x, sizeof bits);
    compare(bits);
  }
  INFO(checked << " floats compared");
  CHECK(mismatches == 0);
  CHECK(checked > 1000000);
}

TEST_CASE("quantize_fp8_e4m3 with a scale: amax lands on 448, relative error at most 2^-4",
          "[quantize][fp8]") {
  const float amax = 3.7f, s = fp8_e4m3_scale(amax);
  CHECK(int(quantize_fp8_e4m3(amax, s)) == 0x7E);
  CHECK(int(quantize_fp8_e4m3(-amax, s)) == 0xFE);
  CHECK(int(quantize_fp8_e4m3(100.0f, s)) == 0x7E);  // beyond amax: saturates
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> d(-amax, amax);
  for (int i = 0; i < 10000; ++i) {
    const float x = d(rng);
    const float back = dequantize_fp8_e4m3(quantize_fp8_e4m3(x, s), s);
    // In the normal range E4M3 keeps 3 mantissa bits: rounding to nearest errs by at most half
    // a step, 2^-4 relative; below the smallest normal (2^-6 s) the step is 2^-9 s absolute.
    // The margin covers the float division x / s and product code * s (2^-24 each).
    const double bound = std::max(std::fabs(x) * 0.0625, std::ldexp(0.5, -9) * s) * (1 + 1e-6);
    INFO("x = " << x << " back = " << back);
    REQUIRE(std::fabs(static_cast<double>(x) - back) <= bound);
  }
}

TEST_CASE("bad scales are refused with what was expected: the quantize functions", "[quantize]") {
  // A scale must be a positive normal float: zero would divide by zero, a negative one would
  // flip signs, a subnormal loses bits in x / s, and a non-finite one maps everything to 0 or
  // NaN. Each function names itself, what it expected and what it got.
  const std::vector<float> x = {0.5f, -1.0f, 2.0f};
  const std::vector<std::int8_t> q = {1, -2, 3};
  const float inf = std::numeric_limits<float>::infinity();
  for (float bad : {0.0f, -0.0f, -0.5f, inf, -inf, std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::denorm_min()}) {
    INFO("scale " << bad);
    CHECK_THROWS_AS(quantize_int8_per_tensor(x, bad), std::invalid_argument);
    CHECK_THROWS_WITH(
        quantize_int8_per_tensor(x, bad),
        Contains("quantize_int8_per_tensor") && Contains("expected a positive normal float scale"));
    CHECK_THROWS_AS(dequantize_int8_per_tensor(q, bad), std::invalid_argument);
    CHECK_THROWS_WITH(dequantize_int8_per_tensor(q, bad),
                      Contains("dequantize_int8_per_tensor") &&
                          Contains("expected a positive normal float scale"));
  }
  // The scale from a calibrated amax: zero, negative and non-finite ranges say so.
  for (double bad : {0.0, -2.0, std::numeric_limits<double>::infinity(),
                     std::numeric_limits<double>::quiet_NaN()}) {
    INFO("amax " << bad);
    CHECK_THROWS_WITH(int8_scale(bad), Contains("int8_scale: expected amax > 0 and finite"));
    CHECK_THROWS_WITH(fp8_e4m3_scale(bad),
                      Contains("fp8_e4m3_scale: expected amax > 0 and finite"));
  }
  // An amax so small that amax / 127 is no normal float.
  CHECK_THROWS_WITH(int8_scale(1e-40), Contains("expected a positive normal float"));
}
