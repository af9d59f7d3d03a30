// Lesson 13: the numbers of a quantized engine, INT8 and FP8, and how a float becomes one.
//
//   quantize_int8 / dequantize_int8     one value: q = sat(rne(x / s)) in [-127, 127]; x ~ q s
//                                       (quantize_int8 is exercise 1: exercises.hpp)
//   int8_scale / fp8_e4m3_scale         the scale that maps amax to the top of the grid
//   quantize_int8_per_tensor            a tensor with one scale (activations)
//   quantize_int8_per_channel           one scale per output channel (weights, KRSC rows)
//   fp8_e4m3_from_float / _to_float     OCP FP8 E4M3 bits, exact: round to nearest even,
//                                       saturating to +-448; every one of the 256 codes decodes
//   quantize_fp8_e4m3 / dequantize_...  one value with a scale: code(x / s); x ~ value(code) s
//
// The scheme is TensorRT's explicit-quantization one (RESULTS.md, "Decisions"): symmetric (no zero
// point), per-tensor scales for activations, per-output-channel scales for weights, round to
// nearest even, saturation.
//
// Why the INT8 grid is [-127, 127] and never -128. With s = amax / 127 the grid {-127 .. 127} s
// is symmetric about zero: q(-x) = -q(x), so a tensor and its negation quantise alike, and amax
// maps to 127 on either side. -128 would be one extra level on the negative side only, reachable
// only by values below -127.5 s, i.e. by values the threshold already clips. It also keeps every
// INT8 x INT8 product within 127^2 = 16129 rather than 128^2 = 16384. This is the "restricted
// range" of symmetric quantisation (Krishnamoorthi, "Quantizing deep convolutional networks for
// efficient inference: A whitepaper", arXiv:1806.08342, section 2.2), and what TensorRT does
// with weights (s = max|w| / 127) and with calibrated activations ([-amax, amax] -> [-127, 127]).
// TensorRT's IQuantizeLayer, however, documents its INT8 clamp as [-128, 127]: an explicit Q
// node of TensorRT can produce -128 where this code produces -127, for inputs below -127.5 s
// only (RESULTS.md lists it).
//
// Host code; the per-element functions are __host__ __device__ (LESSON13_HD) so that the GPU
// kernels and the CPU tests share them.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "exercises.hpp"  // quantize_int8 (exercise 1)

namespace lesson13 {

constexpr int kInt8Max = 127;               // the grid is [-kInt8Max, kInt8Max]
constexpr float kFp8E4M3Max = 448.0f;       // largest finite E4M3 value: S.1111.110 = 1.75 * 2^8
constexpr std::uint8_t kFp8E4M3NaN = 0x7F;  // S.1111.111 (0xFF is the other NaN)

// ----------------------------------------------------------------------------------- INT8

// x ~ q * scale: one float multiplication (exact for |q| <= 127 when scale has at most 17
// significant bits; otherwise rounded once, to nearest).
LESSON13_HD inline float dequantize_int8(std::int8_t q, float scale) {
  return static_cast<float>(q) * scale;
}

// The scale that maps amax to 127: float(amax) / 127 (one float division). Throws
// std::invalid_argument unless amax is positive and finite and the scale a normal float.
float int8_scale(double amax);

// Every element with one scale. x: any layout; returns the same layout. Throws
// std::invalid_argument if scale is not a positive normal float.
std::vector<std::int8_t> quantize_int8_per_tensor(const std::vector<float>& x, float scale);
std::vector<float> dequantize_int8_per_tensor(const std::vector<std::int8_t>& q, float scale);

// Per-output-channel weights: w holds `channels` rows of equal length, row k = output channel
// k's weights (the KRSC layout [out_c][kernel][kernel][in_c] of lesson 12's FusedOp::weight).
// scale[k] = int8_scale(max |w| over row k), so each row's largest |w| quantises to +-127; a
// row of zeros gets scale 1 (any positive scale quantises it to zeros exactly, and int8_scale
// refuses amax 0). Throws std::invalid_argument if channels < 1, w.size() is not a multiple of
// it, or a weight is not finite.
struct PerChannelInt8 {
  std::vector<std::int8_t> q;  // same layout as w
  std::vector<float> scale;    // [channels]
  int channels = 0;
};
PerChannelInt8 quantize_int8_per_channel(const std::vector<float>& w, int channels);
std::vector<float> dequantize_int8_per_channel(const PerChannelInt8& w);

// ------------------------------------------------------------------------------- FP8 E4M3
//
// The OCP 8-bit floating point format E4M3 (OCP "8-bit Floating Point Specification (OFP8)",
// revision 1.0, 2023; the `e4m3` of PTX and of CUDA's cuda_fp8.h): bits S.EEEE.MMM, exponent
// bias 7. E = 0: subnormals m * 2^-9 (m = 0: zero, signed); E = 1..15: (1 + m/8) * 2^(E-7),
// except S.1111.111, the only NaN (0x7F, 0xFF). No infinities: E = 15 is a normal binade up to
// S.1111.110 = 448. Smallest subnormal 2^-9, smallest normal 2^-6.

// Value of a code, exactly (every E4M3 value is a float). NaN for 0x7F and 0xFF.
LESSON13_HD inline float fp8_e4m3_to_float(std::uint8_t code) {
  const int e = (code >> 3) & 0xF, m = code & 0x7;
  if (e == 0xF && m == 0x7) return NAN;
  // Subnormal m * 2^-9; normal (8 + m) * 2^(e - 10) = (1 + m/8) * 2^(e - 7).
  const float v = e == 0 ? std::ldexp(static_cast<float>(m), -9)
                         : std::ldexp(static_cast<float>(8 + m), e - 10);
  return (code & 0x80) ? -v : v;
}

// Code of a float: round to nearest, ties to even, saturating. Finite |x| that would round
// beyond 448 (|x| > 464, halfway to the 480 the format lacks) give +-448, as do +-infinity
// (the OCP "saturating" conversion; PTX cvt.rn.satfinite.e4m3x2.f32). |x| <= 2^-10 (half the
// smallest subnormal) gives a zero of x's sign. NaN gives 0x7F. Matches CUDA's
// __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3) bit for bit (test_quantize.cpp).
LESSON13_HD inline std::uint8_t fp8_e4m3_from_float(float x) {
  std::uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  const std::uint8_t sign = static_cast<std::uint8_t>((bits >> 24) & 0x80);
  const std::uint32_t mag = bits & 0x7FFFFFFFu;
  if (mag > 0x7F800000u) return kFp8E4M3NaN;                              // NaN
  if (mag == 0x7F800000u) return static_cast<std::uint8_t>(sign | 0x7E);  // +-inf saturates
  const double a = std::fabs(static_cast<double>(x));
  if (a == 0.0) return sign;
  // The binade of a, 2^e <= a < 2^(e+1), but never below the smallest normal binade (e = -6):
  // below it the spacing stays 2^-9 (subnormals). Within a binade the 8 values are 2^(e-3)
  // apart, so a / 2^(e-3) is a number of steps in [8, 16) (or [0, 8) for subnormals), exact in
  // double, and rounding it to an integer is the whole conversion.
  int e;
  std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1)
  e -= 1;
  if (e < -6) e = -6;
  const double steps = std::ldexp(a, 3 - e);
  double r = std::floor(steps);
  const double frac = steps - r;  // exact: steps < 2^5 has few significant bits below the point
  if (frac > 0.5 || (frac == 0.5 && std::fmod(r, 2.0) != 0.0)) r += 1.0;  // ties to even
  int n = static_cast<int>(r);
  if (n == 16) {  // rounded up into the next binade
    n = 8;
    e += 1;
  }
  // The largest finite value is e = 8, n = 14 (1.75 * 2^8 = 448); n = 15 there is the NaN code.
  if (e > 8 || (e == 8 && n > 14)) return static_cast<std::uint8_t>(sign | 0x7E);
  if (n < 8) return static_cast<std::uint8_t>(sign | n);  // subnormal (e == -6), or zero
  return static_cast<std::uint8_t>(sign | ((e + 7) << 3) | (n - 8));
}

// One value with a scale: the code of x / scale (float division, then the conversion above);
// and back, value(code) * scale. Precondition: scale positive and finite.
LESSON13_HD inline std::uint8_t quantize_fp8_e4m3(float x, float scale) {
  return fp8_e4m3_from_float(x / scale);
}
LESSON13_HD inline float dequantize_fp8_e4m3(std::uint8_t code, float scale) {
  return fp8_e4m3_to_float(code) * scale;
}

// The scale that maps amax to 448: float(amax) / 448. Same errors as int8_scale.
float fp8_e4m3_scale(double amax);

}  // namespace lesson13
