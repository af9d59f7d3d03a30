// Lesson 13 tests: the FP8 E4M3 tensor-core convolution (fp8_conv_gpu.hpp).
//
// Oracles, none of them the code under test:
//   - the exact sum of the products, computed here by a direct convolution in double with its
//     own E4M3 decoding from the format's definition (exact for K <= kFp8ConvMaxK, fp8_conv.hpp),
//     cross-checked against conv_fp8_reference's float output and conv_fp8_abs_sums
//   - conv_fp8_abs_sums (fp8_conv.hpp): sum |products| per output, what the accumulation error is
//     stated against
//   - conv_fp8_reference's outputs (f32, f16, fp8) for the epilogue
//
// The tensor core's accumulation is not IEEE FP32 (fp8_conv_gpu.hpp), so nothing here is
// compared for equality except where the arithmetic is exact. The tests:
//   1. the accumulation, measured and bounded: unit scales, no bias, no activation, f32 output,
//      so the GPU's output is its accumulator; |y - exact sum| <= kAccumulationBound * sum|p|
//      for every output, on every tile, with random codes over the whole E4M3 range (and
//      subnormal-only and 448-only extremes); outputs with no nonzero product must be exactly 0.
//      The measured maximum is printed ("note: ...") so that the bound's margin can be read.
//   2. the epilogue: realistic scales, bias, SiLU or none, residual or none, f32 / f16 / fp8
//      outputs, within the tolerance derived at f32_tolerance from the bound of 1; an FP8 output
//      on the reference's code or on one that a quotient within that tolerance rounds to (a
//      neighbour, near a rounding boundary of the grid), and such codes fewer than
//      kFp8DifferingCodesMax of the outputs.
//   3. refusals before any CUDA call (CPU): channels and strides not multiples of 16, misaligned
//      x or w, bad tile indices, what check_fp8_conv_args refuses; the automatic tile choice.
//      On a GPU: batch 0 writes nothing; pageable host memory is refused.
//   4. a GPU older than compute capability 8.9 is refused; on a newer one that cannot be tested,
//      and on an older one the other GPU tests stop after checking the refusal.
// Every output buffer has a sentinel around its view (y_stride > out_c, the view at an odd or
// even channel offset), which must survive; x and the residual are surrounded by NaN codes, which
// would turn any output that read them into NaN.
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/cuda_check.hpp"
#include "common/memory.hpp"
#include "common/testing.hpp"
#include "fp8_conv.hpp"
#include "fp8_conv_gpu.hpp"
#include "int8_conv_gpu.hpp"
#include "quantize.hpp"

using namespace lesson13;
using course::testing::Contains;

namespace {

// What the tests assert about the tensor core's FP8 accumulation: for every output,
// |acc_gpu - acc_exact| <= kAccumulationBound * sum |products| (conv_fp8_abs_sums). The PTX ISA
// leaves the accumulation's roundings unspecified, so this is a model checked by measurement:
// the accumulation test prints the measured maximum ("note: ... max err / sum|p| = ...") on
// every run. On an NVIDIA H200 (CUDA 13.0, 2026-12-03) it was 2^-22.1 over every shape here (K
// up to 2304): what an FP32 accumulator gives. One FP32 rounding per k32 step of mma.sync would
// allow ceil(K / 32) * 2^-24 = 2^-17.8 at YOLOv8n's largest K = 2304; the bound, 2^-17, holds
// that model for K <= 4096. An accumulator keeping about 14 bits (what has been reported for
// Hopper's FP8 wgmma GEMMs) would show errors near 2^-13 and fail it.
constexpr double kAccumulationBound = 0x1p-17;

constexpr double kU = 0x1p-24;  // unit roundoff of float: half an ulp, relative

// ------------------------------------------------------------------------- problems

struct Shape {
  const char* what;
  int batch, in_h, in_w, in_c, out_c, kernel, stride, pad;
  int out_h() const { return (in_h + 2 * pad - kernel) / stride + 1; }
  int out_w() const { return (in_w + 2 * pad - kernel) / stride + 1; }
  int k() const { return kernel * kernel * in_c; }
};

// Layers of YOLOv8n (at a small input: the kernel does not care), plus edge cases: K tails (144,
// 48, 288), out_c tails (6, 40, 72, 80), M tails of every tile, stride 2, batch 2.
const std::vector<Shape> kShapes = {
    {"model.1: 3x3 s2 16->32, odd image, batch 2", 2, 13, 17, 16, 32, 3, 2, 1},
    {"model.2.cv1: 1x1 32->32", 1, 12, 20, 32, 32, 1, 1, 0},
    {"model.2.m.0.cv2: 3x3 16->16, K = 144", 1, 9, 11, 16, 16, 3, 1, 1},
    {"model.2.cv2: 1x1 48->40 (a concatenation), K = 48", 1, 10, 10, 48, 40, 1, 1, 0},
    {"model.22.cv3.0.2: 1x1 64->6 (class logits), out_c tail", 1, 5, 7, 64, 6, 1, 1, 0},
    {"1x1 64->80 on 20x23: M and out_c tails of every tile", 1, 20, 23, 64, 80, 1, 1, 0},
    {"model.7: 3x3 s2 128->256, K = 1152", 1, 7, 9, 128, 256, 3, 2, 1},
    {"model.9.cv1: 1x1 256->128", 1, 5, 5, 256, 128, 1, 1, 0},
    {"3x3 256->72, K = 2304 (the largest), out_c tail", 1, 4, 6, 256, 72, 3, 1, 1},
    {"3x3 on a 1x1 image (only the centre tap), 32->40", 1, 1, 1, 32, 40, 3, 1, 1},
};

// x's view starts 16 channels into each pixel (16-byte aligned, as cp.async needs); the channels
// around it, and around the residual's view, hold NaN codes.
constexpr int kXBefore = 16, kXAfter = 16;
constexpr std::uint8_t kXPad = 0x7F, kResPad = 0xFF;  // the two E4M3 NaNs
// The output buffer's sentinels outside the view, per output type.
constexpr std::uint8_t kSentinel8 = 0x5A;
constexpr std::uint16_t kSentinel16 = 0xF00D;  // -8296 as a half
constexpr float kSentinelF = -12345.0f;

struct Problem {
  Shape s;
  int act = 0;
  bool residual = false;
  int y_before = 0, y_after = 0;      // channels around the output view
  int res_before = 0, res_after = 0;  // and around the residual's (another stride)
  std::vector<std::uint8_t> x_buf, w, res_buf;
  std::vector<float> bias, w_scale;
  float x_scale = 1, res_scale = 0, y_scale = 1;
  int x_stride = 0, y_stride = 0, res_stride = 0;
  int out_pixels() const { return s.batch * s.out_h() * s.out_w(); }
  std::size_t y_elements() const { return static_cast<std::size_t>(out_pixels()) * y_stride; }
  // Index of output (pixel, channel k) in the y buffer, and in the dense [pixel][out_c] order.
  std::size_t y_index(int px, int k) const {
    return static_cast<std::size_t>(px) * y_stride + y_before + k;
  }
  std::size_t dense(int px, int k) const { return static_cast<std::size_t>(px) * s.out_c + k; }
};

std::size_t element_size(Fp8ConvOutput t) {
  return t == Fp8ConvOutput::fp8 ? 1 : (t == Fp8ConvOutput::f16 ? 2 : 4);
}

const char* type_name(Fp8ConvOutput t) {
  return t == Fp8ConvOutput::fp8 ? "fp8" : (t == Fp8ConvOutput::f32 ? "f32" : "f16");
}

// The views' geometry and buffers, filled with their pads; operands left to the caller.
Problem empty_problem(const Shape& s, int act, bool residual, int y_before) {
  Problem p;
  p.s = s;
  p.act = act;
  p.residual = residual;
  p.y_before = y_before;
  p.y_after = 3;
  p.y_stride = p.y_before + s.out_c + p.y_after;
  p.x_stride = kXBefore + s.in_c + kXAfter;
  const std::size_t in_pixels = static_cast<std::size_t>(s.batch) * s.in_h * s.in_w;
  p.x_buf.assign(in_pixels * p.x_stride, kXPad);
  p.w.assign(static_cast<std::size_t>(s.out_c) * s.k(), 0);
  p.bias.assign(static_cast<std::size_t>(s.out_c), 0.0f);
  p.w_scale.assign(static_cast<std::size_t>(s.out_c), 1.0f);
  if (residual) {
    p.res_before = 5;
    p.res_after = 2;
    p.res_stride = p.res_before + s.out_c + p.res_after;
    p.res_buf.assign(static_cast<std::size_t>(p.out_pixels()) * p.res_stride, kResPad);
  }
  return p;
}

std::uint8_t& x_at(Problem& p, std::size_t pixel, int c) {
  return p.x_buf[pixel * p.x_stride + kXBefore + c];
}

// How test 1 fills x and w with codes.
enum class Fill {
  uniform,    // every finite code equally likely: both signs, subnormals to 448
  gaussian,   // codes of N(0, 1) * 112 (448 at 4 sigma): a few binades, as trained tensors
  subnormal,  // only the 14 nonzero subnormals, +-2^-9 .. +-7 * 2^-9
  extreme,    // x all 448; w channel 0 all 448, channel 1 all -448, channel 2 alternating
};

const char* fill_name(Fill f) {
  switch (f) {
    case Fill::uniform:
      return "uniform codes";
    case Fill::gaussian:
      return "gaussian codes";
    case Fill::subnormal:
      return "subnormal codes";
    case Fill::extreme:
      return "+-448";
  }
  return "?";
}

// Test 1's problem: codes as `fill` says, unit scales, zero bias, no activation, no residual,
// f32 output: the output is the accumulator. With uniform codes, outputs with no nonzero product
// are planted: channel 1's weights are all zeros (both signs of zero), and for a 1x1 kernel so
// is input pixel 0.
Problem make_code_problem(const Shape& s, Fill fill, std::mt19937& rng) {
  Problem p = empty_problem(s, 0, false, 1);
  std::uniform_int_distribution<int> finite(0, 253), sub(1, 7), bit(0, 1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const auto code = [&]() -> std::uint8_t {
    switch (fill) {
      case Fill::uniform: {
        const int i = finite(rng);  // 0x00..0x7E, 0x80..0xFE: all but the NaNs
        return static_cast<std::uint8_t>(i < 0x7F ? i : i + 1);
      }
      case Fill::gaussian:
        return fp8_e4m3_from_float(normal(rng) * 112.0f);
      default:
        return static_cast<std::uint8_t>(sub(rng) | (bit(rng) << 7));
    }
  };
  const std::size_t in_pixels = static_cast<std::size_t>(s.batch) * s.in_h * s.in_w;
  for (std::size_t px = 0; px < in_pixels; ++px) {
    for (int c = 0; c < s.in_c; ++c) x_at(p, px, c) = fill == Fill::extreme ? 0x7E : code();
  }
  for (std::uint8_t& v : p.w) v = fill == Fill::extreme ? fp8_e4m3_from_float(normal(rng)) : code();
  const std::size_t K = static_cast<std::size_t>(s.k());
  if (fill == Fill::extreme && s.out_c >= 3) {
    for (std::size_t i = 0; i < K; ++i) {
      p.w[i] = 0x7E;                                                    // +448
      p.w[K + i] = 0xFE;                                                // -448
      p.w[2 * K + i] = static_cast<std::uint8_t>(i % 2 ? 0xFE : 0x7E);  // sum 0 for even K
    }
  }
  if (fill == Fill::uniform && s.out_c >= 2) {
    for (std::size_t i = 0; i < K; ++i) p.w[K + i] = static_cast<std::uint8_t>(i % 2 ? 0x80 : 0);
  }
  if (fill == Fill::uniform && s.kernel == 1) {
    for (int c = 0; c < s.in_c; ++c) x_at(p, 0, c) = static_cast<std::uint8_t>(c % 2 ? 0x80 : 0);
  }
  return p;
}

float silu(float v) {
  return v / (1.0f + std::exp(-v));
}

// Test 2's problem, as calibration would make a layer of the network: activations as after SiLU
// (mostly in [-0.28, 4], 3 % ten times larger) with x_scale = amax / 448; per-channel weight
// scales from quantize_fp8_e4m3_weights of float weights of different magnitudes per channel;
// a bias; a residual of the same kind as x with its own scale. y_scale is set by set_y_scale.
Problem make_layer_problem(const Shape& s, int act, bool residual, int y_before,
                           std::mt19937& rng) {
  Problem p = empty_problem(s, act, residual, y_before);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::uniform_int_distribution<int> pick(0, 99);
  const auto activation = [&] { return silu(normal(rng)) * (pick(rng) < 3 ? 10.0f : 1.0f); };
  const std::size_t in_pixels = static_cast<std::size_t>(s.batch) * s.in_h * s.in_w;
  std::vector<float> x(in_pixels * s.in_c);
  float amax = 0;
  for (float& v : x) {
    v = activation();
    amax = std::max(amax, std::fabs(v));
  }
  p.x_scale = fp8_e4m3_scale(amax);
  for (std::size_t px = 0; px < in_pixels; ++px) {
    for (int c = 0; c < s.in_c; ++c) {
      x_at(p, px, c) = quantize_fp8_e4m3(x[px * s.in_c + c], p.x_scale);
    }
  }
  const int K = s.k();
  std::vector<float> w(static_cast<std::size_t>(s.out_c) * K);
  for (std::size_t i = 0; i < w.size(); ++i) {
    const int k = static_cast<int>(i / K);
    w[i] = normal(rng) * 0.5f * static_cast<float>(1 + k % 4) / std::sqrt(static_cast<float>(K));
  }
  const Fp8Weights q = quantize_fp8_e4m3_weights(w, s.out_c);
  p.w = q.q;
  p.w_scale = q.scale;
  std::uniform_real_distribution<float> ub(-0.5f, 0.5f);
  for (float& b : p.bias) b = ub(rng);
  if (residual) {
    std::vector<float> r(static_cast<std::size_t>(p.out_pixels()) * s.out_c);
    float rmax = 0;
    for (float& v : r) {
      v = activation();
      rmax = std::max(rmax, std::fabs(v));
    }
    p.res_scale = fp8_e4m3_scale(rmax);
    for (int px = 0; px < p.out_pixels(); ++px) {
      for (int k = 0; k < s.out_c; ++k) {
        p.res_buf[static_cast<std::size_t>(px) * p.res_stride + p.res_before + k] =
            quantize_fp8_e4m3(r[p.dense(px, k)], p.res_scale);
      }
    }
  }
  return p;
}

Fp8ConvArgs args_for(const Problem& p, const std::uint8_t* x_buf, const std::uint8_t* w,
                     const float* bias, const float* w_scale, const std::uint8_t* res_buf,
                     void* y_buf, Fp8ConvOutput y_type) {
  const Shape& s = p.s;
  Fp8ConvArgs a{};
  a.x = x_buf + kXBefore;
  a.w = w;
  a.bias = bias;
  a.res = p.residual ? res_buf + p.res_before : nullptr;
  a.y = static_cast<char*>(y_buf) + p.y_before * element_size(y_type);
  a.x_stride = p.x_stride;
  a.res_stride = p.residual ? p.res_stride : 0;
  a.y_stride = p.y_stride;
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
  a.w_scale = w_scale;
  a.res_scale = p.res_scale;
  a.y_scale = p.y_scale;
  a.y_type = y_type;
  return a;
}

// The output buffer, the view's elements and the sentinels around them, as bytes.
std::vector<unsigned char> sentinel_buffer(const Problem& p, Fp8ConvOutput t) {
  const std::size_t n = p.y_elements(), es = element_size(t);
  std::vector<unsigned char> b(n * es);
  for (std::size_t i = 0; i < n; ++i) {
    if (t == Fp8ConvOutput::fp8) {
      b[i] = kSentinel8;
    } else if (t == Fp8ConvOutput::f16) {
      std::memcpy(b.data() + 2 * i, &kSentinel16, 2);
    } else {
      std::memcpy(b.data() + 4 * i, &kSentinelF, 4);
    }
  }
  return b;
}

Fp8ConvArgs host_args(const Problem& p, void* y, Fp8ConvOutput t) {
  return args_for(p, p.x_buf.data(), p.w.data(), p.bias.data(), p.w_scale.data(), p.res_buf.data(),
                  y, t);
}

std::vector<unsigned char> run_reference(const Problem& p, Fp8ConvOutput t) {
  std::vector<unsigned char> y = sentinel_buffer(p, t);
  conv_fp8_reference(host_args(p, y.data(), t));
  return y;
}

float read_f32(const std::vector<unsigned char>& b, std::size_t i) {
  float v;
  std::memcpy(&v, b.data() + 4 * i, 4);
  return v;
}
std::uint16_t read_f16_bits(const std::vector<unsigned char>& b, std::size_t i) {
  std::uint16_t v;
  std::memcpy(&v, b.data() + 2 * i, 2);
  return v;
}

// y_scale for FP8 output from the reference's float output: 0.8 of its largest magnitude maps
// to 448, so a few outputs saturate.
void set_y_scale(Problem& p) {
  const std::vector<unsigned char> y = run_reference(p, Fp8ConvOutput::f32);
  float m = 0;
  for (int px = 0; px < p.out_pixels(); ++px) {
    for (int k = 0; k < p.s.out_c; ++k) m = std::max(m, std::fabs(read_f32(y, p.y_index(px, k))));
  }
  p.y_scale = fp8_e4m3_scale(std::max(0.8 * m, 1e-3));
}

// ------------------------------------------------------------------ the independent sums

// E4M3 from the definition (OCP OFP8: S.EEEE.MMM, bias 7, E = 0 subnormal), independently of
// quantize.hpp. Only for finite codes.
double spec_value(std::uint8_t code) {
  const int e = (code >> 3) & 15, m = code & 7;
  const double v = e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10);
  return (code & 0x80) ? -v : v;
}

// Position of a finite code on the ordered E4M3 grid, with the two zeros apart (-0 just below
// +0): 2m + 1 for the code of magnitude bits m, negated for the negative codes. Rounding to
// E4M3 is monotone in this order, and neighbours differ by 2.
int grid_position(std::uint8_t code) {
  const int m = code & 0x7F;
  return (code & 0x80) ? -(2 * m + 1) : 2 * m + 1;
}

// The exact sum of the products and of their magnitudes, per output, [pixel][out_c] dense: a
// direct convolution in double, every term a multiple of 2^-18 below 2^18, every partial sum
// exact for K <= kFp8ConvMaxK (fp8_conv.hpp). Out-of-image taps contribute nothing.
struct ExactSums {
  std::vector<double> acc, abs;
};

ExactSums exact_sums(const Problem& p) {
  const Shape& s = p.s;
  double value[256];
  for (int c = 0; c < 256; ++c) value[c] = (c & 0x7F) == 0x7F ? NAN : spec_value(c);
  ExactSums e;
  e.acc.assign(static_cast<std::size_t>(p.out_pixels()) * s.out_c, 0.0);
  e.abs.assign(e.acc.size(), 0.0);
  for (int n = 0; n < s.batch; ++n) {
    for (int oy = 0; oy < s.out_h(); ++oy) {
      for (int ox = 0; ox < s.out_w(); ++ox) {
        const int px = (n * s.out_h() + oy) * s.out_w() + ox;
        for (int k = 0; k < s.out_c; ++k) {
          double sum = 0, abs = 0;
          for (int r = 0; r < s.kernel; ++r) {
            const int iy = oy * s.stride - s.pad + r;
            if (iy < 0 || iy >= s.in_h) continue;
            for (int t = 0; t < s.kernel; ++t) {
              const int ix = ox * s.stride - s.pad + t;
              if (ix < 0 || ix >= s.in_w) continue;
              const std::size_t in_px = (static_cast<std::size_t>(n) * s.in_h + iy) * s.in_w + ix;
              const std::uint8_t* xs = p.x_buf.data() + in_px * p.x_stride + kXBefore;
              const std::uint8_t* ws =
                  p.w.data() +
                  ((static_cast<std::size_t>(k) * s.kernel + r) * s.kernel + t) * s.in_c;
              for (int c = 0; c < s.in_c; ++c) {
                const double prod = value[xs[c]] * value[ws[c]];
                sum += prod;
                abs += std::fabs(prod);
              }
            }
          }
          e.acc[p.dense(px, k)] = sum;
          e.abs[p.dense(px, k)] = abs;
        }
      }
    }
  }
  return e;
}

// The two oracles agree with each other: conv_fp8_abs_sums equals our sum of magnitudes, and
// the reference's float output with unit scales (test 1's settings) is our exact sum rounded.
void cross_check_oracles(const Problem& p, const ExactSums& e) {
  std::vector<unsigned char> y = sentinel_buffer(p, Fp8ConvOutput::f32);
  const std::vector<double> abs = conv_fp8_abs_sums(host_args(p, y.data(), Fp8ConvOutput::f32));
  REQUIRE(abs == e.abs);
  const std::vector<unsigned char> ref = run_reference(p, Fp8ConvOutput::f32);
  long long differ = 0;
  for (int px = 0; px < p.out_pixels(); ++px) {
    for (int k = 0; k < p.s.out_c; ++k) {
      if (read_f32(ref, p.y_index(px, k)) != static_cast<float>(e.acc[p.dense(px, k)])) ++differ;
    }
  }
  REQUIRE(differ == 0);
}

// ------------------------------------------------------------------------ the GPU side

// conv_fp8_gpu needs compute capability 8.9 (mma.sync with .e4m3 operands).
bool gpu_has_fp8_mma() {
  int dev = 0, major = 0, minor = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  return major * 10 + minor >= 89;
}

// The problem's operands on the device.
struct DeviceProblem {
  course::DeviceBuffer<std::uint8_t> x, w, res;
  course::DeviceBuffer<float> bias, w_scale;
  explicit DeviceProblem(const Problem& p)
      : x(p.x_buf.size()),
        w(p.w.size()),
        res(p.res_buf.size()),
        bias(p.bias.size()),
        w_scale(p.w_scale.size()) {
    CUDA_CHECK(cudaMemcpy(x.data(), p.x_buf.data(), x.bytes(), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(w.data(), p.w.data(), w.bytes(), cudaMemcpyHostToDevice));
    if (!p.res_buf.empty()) {
      CUDA_CHECK(cudaMemcpy(res.data(), p.res_buf.data(), res.bytes(), cudaMemcpyHostToDevice));
    }
    CUDA_CHECK(cudaMemcpy(bias.data(), p.bias.data(), bias.bytes(), cudaMemcpyHostToDevice));
    CUDA_CHECK(
        cudaMemcpy(w_scale.data(), p.w_scale.data(), w_scale.bytes(), cudaMemcpyHostToDevice));
  }
  Fp8ConvArgs args(const Problem& p, void* y, Fp8ConvOutput t) const {
    return args_for(p, x.data(), w.data(), bias.data(), w_scale.data(), res.data(), y, t);
  }
};

// Runs the convolution on `tile` (-1: the automatic choice) into a sentinel-filled buffer and
// returns the whole buffer.
std::vector<unsigned char> run_gpu(const Problem& p, const DeviceProblem& d, Fp8ConvOutput t,
                                   int tile) {
  const std::vector<unsigned char> init = sentinel_buffer(p, t);
  course::DeviceBuffer<unsigned char> y(init.size());
  CUDA_CHECK(cudaMemcpy(y.data(), init.data(), init.size(), cudaMemcpyHostToDevice));
  conv_fp8_gpu(d.args(p, y.data(), t), nullptr, tile);
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<unsigned char> out(init.size());
  CUDA_CHECK(cudaMemcpy(out.data(), y.data(), out.size(), cudaMemcpyDeviceToHost));
  return out;
}

// How many bytes outside the output view differ from the sentinel.
long long sentinels_overwritten(const Problem& p, Fp8ConvOutput t,
                                const std::vector<unsigned char>& got) {
  const std::vector<unsigned char> init = sentinel_buffer(p, t);
  const std::size_t es = element_size(t);
  long long bad = 0;
  for (std::size_t i = 0; i < p.y_elements(); ++i) {
    const int c = static_cast<int>(i % p.y_stride) - p.y_before;
    if (c >= 0 && c < p.s.out_c) continue;
    if (std::memcmp(got.data() + i * es, init.data() + i * es, es) != 0) ++bad;
  }
  return bad;
}

// Every tile index, and -1 (the automatic choice).
std::vector<int> every_tile() {
  std::vector<int> t{-1};
  for (int i = 0; i < static_cast<int>(int8_conv_tiles().size()); ++i) t.push_back(i);
  return t;
}

std::string tile_name(int tile) {
  return tile < 0 ? std::string("automatic") : std::string(int8_conv_tiles()[tile].name);
}

// ------------------------------------------------------------------- test 1: accumulation

struct AccumulationStats {
  unsigned long long outputs = 0, exact = 0, over_bound = 0, zero_rows = 0, zero_row_errors = 0;
  long long sentinels = 0;
  double max_ratio = 0;  // max |y - acc| / sum|p|; infinity for a NaN output
  int max_k = 0;
  std::string max_where, first_failure;
  void fold(const AccumulationStats& o) {
    outputs += o.outputs;
    exact += o.exact;
    over_bound += o.over_bound;
    zero_rows += o.zero_rows;
    zero_row_errors += o.zero_row_errors;
    sentinels += o.sentinels;
    if (o.max_ratio > max_ratio || (max_where.empty() && !o.max_where.empty())) {
      max_ratio = o.max_ratio;
      max_k = o.max_k;
      max_where = o.max_where;
    }
    if (first_failure.empty()) first_failure = o.first_failure;
  }
};

// Runs p (test 1's settings) on each of `tiles` and folds every output's error into `stats`.
void measure_accumulation(const Problem& p, const std::vector<int>& tiles, const std::string& what,
                          AccumulationStats& stats) {
  const ExactSums e = exact_sums(p);
  cross_check_oracles(p, e);
  const DeviceProblem d(p);
  for (int tile : tiles) {
    const std::string where = what + ", tile " + tile_name(tile);
    const std::vector<unsigned char> got = run_gpu(p, d, Fp8ConvOutput::f32, tile);
    stats.sentinels += sentinels_overwritten(p, Fp8ConvOutput::f32, got);
    for (int px = 0; px < p.out_pixels(); ++px) {
      for (int k = 0; k < p.s.out_c; ++k) {
        const double y = read_f32(got, p.y_index(px, k));
        const double acc = e.acc[p.dense(px, k)], sum = e.abs[p.dense(px, k)];
        const double err = std::fabs(y - acc);
        ++stats.outputs;
        if (err == 0) ++stats.exact;
        const auto note_failure = [&](double ratio) {
          if (!stats.first_failure.empty()) return;
          std::ostringstream m;
          m << where << ": pixel " << px << " channel " << k << ": GPU " << y << ", exact " << acc
            << ", sum|p| " << sum << ", err / sum|p| " << ratio;
          stats.first_failure = m.str();
        };
        if (sum == 0) {  // no nonzero product: the accumulator never moves from zero
          ++stats.zero_rows;
          if (!(err == 0)) {
            ++stats.zero_row_errors;
            note_failure(std::numeric_limits<double>::infinity());
          }
          continue;
        }
        const double ratio = std::isnan(err) ? std::numeric_limits<double>::infinity() : err / sum;
        if (ratio > stats.max_ratio || stats.max_where.empty()) {
          stats.max_ratio = ratio;
          stats.max_k = p.s.k();
          stats.max_where = where;
        }
        if (!(ratio <= kAccumulationBound)) {
          ++stats.over_bound;
          note_failure(ratio);
        }
      }
    }
  }
}

double log2_or_zero(double r) {
  return r > 0 ? std::log2(r) : 0.0;
}

void print_accumulation(const char* label, const AccumulationStats& s) {
  std::printf(
      "note: conv_fp8_gpu accumulation, %s: max err / sum|p| = %.3g (2^%.2f) at K = %d; "
      "err == 0 for %.1f%% of %llu outputs\n",
      label, s.max_ratio, log2_or_zero(s.max_ratio), s.max_k,
      s.outputs ? 100.0 * s.exact / s.outputs : 0.0, s.outputs);
}

void check_accumulation(const AccumulationStats& s) {
  INFO(s.outputs << " outputs: " << s.over_bound << " over the bound 2^"
                 << std::log2(kAccumulationBound) << ", " << s.zero_row_errors << " of "
                 << s.zero_rows << " all-zero-product outputs not 0, " << s.sentinels
                 << " sentinels overwritten; largest err / sum|p| " << s.max_ratio << " ("
                 << s.max_where << "); first failure: " << s.first_failure);
  CHECK(s.over_bound == 0);
  CHECK(s.zero_row_errors == 0);
  CHECK(s.sentinels == 0);
  CHECK(s.zero_rows > 0);  // the planted all-zero outputs were there
}

// ---------------------------------------------------------------------- test 2: epilogue

struct EpilogueStats {
  unsigned long long f32 = 0, f16 = 0, fp8 = 0, f16_differ = 0, fp8_differ = 0;
  unsigned long long fp8_beyond_neighbour = 0;  // of fp8_differ, more than one grid step away
  unsigned long long failures = 0;
  long long sentinels = 0;
  double max_f32_ratio = 0;  // max |y - y_ref| / tolerance over the f32 outputs
};

// The parts, printed one after the other (for failure messages).
template <class... T>
std::string text(const T&... parts) {
  std::ostringstream m;
  (m << ... << parts);
  return m.str();
}

double half_value(std::uint16_t h) {
  const int e = (h >> 10) & 31, m = h & 1023;
  double v;
  if (e == 31) {
    v = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else {
    v = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  }
  return (h & 0x8000) ? -v : v;
}

// The spacing of the half grid at |h| (2^-24 among the subnormals).
double half_ulp(double h) {
  const double a = std::fabs(h);
  if (a < 0x1p-14) return 0x1p-24;
  int e;
  std::frexp(a, &e);  // a in [2^(e-1), 2^e)
  return std::ldexp(1.0, e - 11);
}

// The tolerance of a float output against the reference's, per element. The GPU computes, in
// float, v = acc * fl(x_scale * w_scale[k]) + bias[k], SiLU as v / (1 + expf(-v)), then
// v + res_scale * e4m3(res) (fp8_conv_gpu.hpp); the reference the same in double from the exact
// sum, rounded once to float (y_ref). Their difference is at most
//   1.1 * kAccumulationBound * sum|p| * x_scale * w_scale[k]
//       the accumulation error (test 1's bound, in code units) scaled by the dequantisation;
//       SiLU's slope lies in [-0.0999, 1.0999], so it grows by at most 1.1 (which also covers
//       the few 2^-24 relative roundings it meets on the way); bias and residual add to it
//       without scaling it
//   + 8 * 2^-24 * (|acc x_scale w_scale[k]| + |bias[k]| + |y_ref| + |res_scale e4m3(res)|)
//       the float roundings, each at most 2^-24 relative to what it rounds: fl(x_scale *
//       w_scale[k]) and the product (|acc x_scale w_scale|), the bias addition (at most that
//       plus |bias|), all of them through SiLU's slope 1.1; expf's 2 ulp (4 * 2^-24), 1 + e and
//       the division (SiLU's value, at most |y_ref| + |res term|); the residual's product and
//       addition; the reference's own rounding to float (|y_ref|). About 6 units on each
//       magnitude at most; 8 leaves a margin
//   + 1e-30
//       so that an output whose every term is zero compares with zero.
double f32_tolerance(const Problem& p, const ExactSums& e, int px, int k, double y_ref) {
  const double dequant = static_cast<double>(p.x_scale) * p.w_scale[k];
  const double res_term =
      p.residual
          ? static_cast<double>(p.res_scale) *
                spec_value(
                    p.res_buf[static_cast<std::size_t>(px) * p.res_stride + p.res_before + k])
          : 0.0;
  const std::size_t j = p.dense(px, k);
  return 1.1 * kAccumulationBound * e.abs[j] * dequant +
         8 * kU *
             (std::fabs(e.acc[j] * dequant) + std::fabs(p.bias[k]) + std::fabs(y_ref) +
              std::fabs(res_term)) +
         1e-30;
}

// Compares the GPU's output of type t with the reference's (want; want_f32: the reference's
// float output, y_ref) element by element, folding the counts into `stats`.
void compare_epilogue(const Problem& p, const ExactSums& e, Fp8ConvOutput t,
                      const std::vector<unsigned char>& got, const std::vector<unsigned char>& want,
                      const std::vector<unsigned char>& want_f32, const std::string& what,
                      EpilogueStats& stats) {
  stats.sentinels += sentinels_overwritten(p, t, got);
  for (int px = 0; px < p.out_pixels(); ++px) {
    for (int k = 0; k < p.s.out_c; ++k) {
      const std::size_t i = p.y_index(px, k);
      const float vf = read_f32(want_f32, i);
      const double y_ref = vf, tol = f32_tolerance(p, e, px, k, y_ref);
      bool ok = true;
      std::string detail;  // written only for a failure
      if (t == Fp8ConvOutput::f32) {
        ++stats.f32;
        const double g = read_f32(got, i), err = std::fabs(g - y_ref);
        const double ratio = std::isnan(err) ? std::numeric_limits<double>::infinity() : err / tol;
        stats.max_f32_ratio = std::max(stats.max_f32_ratio, ratio);
        ok = err <= tol;
        if (!ok) detail = text("GPU ", g, ", reference ", y_ref, ", tolerance ", tol);
      } else if (t == Fp8ConvOutput::f16) {
        // The GPU rounds its float to half: half an ulp of the half result on top of the float
        // tolerance, measured against the reference's float (not its half: one rounding, not two).
        ++stats.f16;
        const std::uint16_t bits = read_f16_bits(got, i);
        if (bits != read_f16_bits(want, i)) ++stats.f16_differ;
        const double h = half_value(bits);
        ok = std::fabs(h - y_ref) <= tol + 0.5 * half_ulp(h);
        if (!ok) {
          detail = text("GPU half ", h, " (bits ", bits, "), reference float ", y_ref,
                        ", tolerance ", tol, " + half an ulp");
        }
      } else {
        // The reference's code, or any code that the rounding of a quotient within the
        // tolerance of the reference's gives: the GPU's quotient is y / y_scale with y within
        // the f32 tolerance of y_ref, so its code lies between the codes of
        // t_ref -+ tol / y_scale (rounding is monotone), 2^-23 |t_ref| wider for the two float
        // divisions by y_scale. Near a rounding boundary of the E4M3 grid that is a neighbour
        // (the tolerance is far below a grid step except where sum|p| dwarfs |acc|).
        ++stats.fp8;
        const std::uint8_t g = got[i], r = want[i];
        if (g != r) {
          ++stats.fp8_differ;
          const double t_ref = vf / p.y_scale;  // as the reference divides: in float
          const double tol_t = tol / p.y_scale + 0x1p-23 * std::fabs(t_ref);
          const float inf = std::numeric_limits<float>::infinity();
          const float lo = std::nextafter(static_cast<float>(t_ref - tol_t), -inf);
          const float hi = std::nextafter(static_cast<float>(t_ref + tol_t), inf);
          const int at = grid_position(g);
          ok = (g & 0x7F) != 0x7F && grid_position(fp8_e4m3_from_float(lo)) <= at &&
               at <= grid_position(fp8_e4m3_from_float(hi));
          if (std::abs(at - grid_position(r)) > 2) ++stats.fp8_beyond_neighbour;
          if (!ok) {
            detail = text("GPU code ", int(g), ", reference code ", int(r), ", reference quotient ",
                          t_ref, ", tolerance ", tol_t);
          }
        }
      }
      if (!ok && stats.failures++ < 5) {
        FAIL_CHECK(what << ": pixel " << px << " channel " << k << ": " << detail);
      }
    }
  }
}

// Runs p with each output type in `types` on each of `tiles` and compares.
void check_epilogue(Problem& p, const std::vector<Fp8ConvOutput>& types,
                    const std::vector<int>& tiles, const std::string& what, EpilogueStats& stats) {
  set_y_scale(p);
  const ExactSums e = exact_sums(p);
  const DeviceProblem d(p);
  const std::vector<unsigned char> want_f32 = run_reference(p, Fp8ConvOutput::f32);
  for (Fp8ConvOutput t : types) {
    const std::vector<unsigned char> want = run_reference(p, t);
    for (int tile : tiles) {
      const std::string where = what + ", " + type_name(t) + " output, tile " + tile_name(tile);
      compare_epilogue(p, e, t, run_gpu(p, d, t, tile), want, want_f32, where, stats);
    }
  }
}

// FP8 outputs whose code differs from the reference's, at most this fraction of them. A code
// differs only where the GPU's quotient and the reference's straddle a rounding boundary of the
// E4M3 grid, a band as wide as the typical accumulation error: this asserts that the typical
// error stays well below the worst case that kAccumulationBound allows each element.
constexpr double kFp8DifferingCodesMax = 0.01;

void check_epilogue_stats(const EpilogueStats& s) {
  std::printf(
      "note: conv_fp8_gpu epilogue: %llu f32 outputs, max |y - y_ref| / tolerance = %.3g; "
      "%llu of %llu f16 outputs differ from the reference's half; %llu of %llu fp8 outputs "
      "differ from the reference's code (%.3f%%), %llu of them by more than one step\n",
      s.f32, s.max_f32_ratio, s.f16_differ, s.f16, s.fp8_differ, s.fp8,
      s.fp8 ? 100.0 * s.fp8_differ / s.fp8 : 0.0, s.fp8_beyond_neighbour);
  INFO(s.failures << " outputs out of tolerance, " << s.sentinels << " sentinels overwritten, "
                  << s.fp8_differ << " of " << s.fp8 << " fp8 outputs differ from the reference");
  CHECK(s.failures == 0);
  CHECK(s.sentinels == 0);
  CHECK(static_cast<double>(s.fp8_differ) < kFp8DifferingCodesMax * static_cast<double>(s.fp8));
}

// The other GPU tests run only where the kernel can; on an older GPU they check the refusal
// (test 4) and stop.
bool fp8_gpu_or_refusal_checked() {
  if (gpu_has_fp8_mma()) return true;
  std::mt19937 rng(1399);
  const Problem p = make_code_problem(kShapes[1], Fill::uniform, rng);
  const DeviceProblem d(p);
  course::DeviceBuffer<unsigned char> y(p.y_elements() * 4);
  const Fp8ConvArgs a = d.args(p, y.data(), Fp8ConvOutput::f32);
  CHECK_THROWS_AS(conv_fp8_gpu(a, nullptr), std::invalid_argument);
  CHECK_THROWS_WITH(conv_fp8_gpu(a, nullptr), Contains("needs 8.9"));
  return false;
}

}  // namespace

// ------------------------------------------------------------------------------------ CPU

TEST_CASE("conv_fp8_gpu: refuses what the tensor-core path cannot run, before any CUDA call",
          "[fp8gpu]") {
  // Host addresses that look right (16-byte aligned): every check below fails before the
  // launcher asks CUDA anything, so this runs without a GPU. w_scale is all zeros: the host
  // checks must not read it (it is device memory).
  alignas(16) static std::uint8_t x[4096], w[4096], res[256], y[256];
  alignas(16) static float bias[64], w_scale[64];
  Fp8ConvArgs good{};
  good.x = x;
  good.w = w;
  good.bias = bias;
  good.res = res;
  good.y = y;
  good.x_stride = 32;
  good.res_stride = 8;
  good.y_stride = 8;
  good.batch = 1;
  good.in_h = good.in_w = 4;
  good.in_c = 32;
  good.out_h = good.out_w = 4;
  good.out_c = 8;
  good.kernel = 3;
  good.stride = 1;
  good.pad = 1;
  good.act = 1;
  good.x_scale = 0.02f;
  good.w_scale = w_scale;
  good.res_scale = 0.01f;
  good.y_scale = 0.05f;
  good.y_type = Fp8ConvOutput::fp8;
  CHECK_NOTHROW(check_fp8_conv_gpu_args(good));

  auto bad = [&](auto edit, const char* message) {
    Fp8ConvArgs a = good;
    edit(a);
    INFO(message);
    CHECK_THROWS_WITH(check_fp8_conv_gpu_args(a), Contains(message));
    CHECK_THROWS_WITH(check_fp8_conv_gpu_args(a), Contains("conv_fp8_gpu: "));
    CHECK_THROWS_AS(conv_fp8_gpu(a, nullptr), std::invalid_argument);
  };
  // The tensor-core path's own requirements.
  bad([](Fp8ConvArgs& a) { a.in_c = a.x_stride = 24; }, "in_c = 24");
  bad([](Fp8ConvArgs& a) { a.in_c = a.x_stride = 3; }, "in_c = 3");
  bad([](Fp8ConvArgs& a) { a.x_stride = 40; }, "x_stride = 40");
  bad([](Fp8ConvArgs& a) { a.x = x + 8; }, "x is not 16-byte aligned");
  bad([](Fp8ConvArgs& a) { a.w = w + 4; }, "w is not 16-byte aligned");
  // check_fp8_conv_args's, named for the GPU launcher.
  bad([](Fp8ConvArgs& a) { a.w_scale = nullptr; }, "must not be null");
  bad([](Fp8ConvArgs& a) { a.x = nullptr; }, "must not be null");
  bad([](Fp8ConvArgs& a) { a.x_scale = 0.0f; }, "x_scale must be a positive normal float");
  bad([](Fp8ConvArgs& a) { a.x_scale = std::numeric_limits<float>::denorm_min(); }, "x_scale");
  bad([](Fp8ConvArgs& a) { a.y_scale = 0.0f; }, "y_scale must be a positive normal float");
  bad([](Fp8ConvArgs& a) { a.res_scale = -0.01f; }, "res_scale");
  bad([](Fp8ConvArgs& a) { a.out_h = 3; }, "is not what a 3x3 stride 1 pad 1");
  bad([](Fp8ConvArgs& a) { a.y_stride = 7; }, "stride is smaller");
  bad([](Fp8ConvArgs& a) { a.act = 3; }, "act must be");
  bad([](Fp8ConvArgs& a) { a.y_type = static_cast<Fp8ConvOutput>(7); }, "unknown output type");
  bad(
      [](Fp8ConvArgs& a) {
        a.kernel = 105;  // K = 105^2 * 16 = 176400 > kFp8ConvMaxK
        a.pad = 52;
        a.in_c = a.x_stride = 16;
      },
      "beyond the exact double sum's limit");
  // Float output needs no y_scale; y and res may have any alignment.
  Fp8ConvArgs f = good;
  f.y_type = Fp8ConvOutput::f32;
  f.y_scale = 0.0f;
  f.y = y + 1;
  f.res = res + 3;
  CHECK_NOTHROW(check_fp8_conv_gpu_args(f));
  // A tile index out of range.
  const int count = static_cast<int>(int8_conv_tiles().size());
  CHECK_THROWS_WITH(conv_fp8_gpu(good, nullptr, count), Contains("tile " + std::to_string(count)));
  CHECK_THROWS_AS(conv_fp8_gpu(good, nullptr, count), std::invalid_argument);
  CHECK_THROWS_WITH(conv_fp8_gpu(good, nullptr, -2), Contains("tile -2"));
  CHECK_THROWS_AS(conv_fp8_gpu(good, nullptr, -2), std::invalid_argument);
}

TEST_CASE("fp8_conv_auto_tile: int8_conv_auto_tile's rule", "[fp8gpu]") {
  for (const Shape& s : kShapes) {
    for (int sms : {1, 8, 132}) {
      Fp8ConvArgs a{};
      a.batch = s.batch;
      a.out_h = s.out_h();
      a.out_w = s.out_w();
      a.out_c = s.out_c;
      Int8ConvArgs b{};
      b.batch = s.batch;
      b.out_h = s.out_h();
      b.out_w = s.out_w();
      b.out_c = s.out_c;
      INFO(s.what << ", " << sms << " SMs");
      CHECK(fp8_conv_auto_tile(a, sms) == int8_conv_auto_tile(b, sms));
    }
  }
  Fp8ConvArgs a{};
  a.batch = 1;
  a.out_h = a.out_w = 160;
  a.out_c = 64;
  CHECK_THROWS_AS(fp8_conv_auto_tile(a, 0), std::invalid_argument);
}

// ------------------------------------------------------------------------------------ GPU

TEST_CASE("conv_fp8_gpu's accumulation: within kAccumulationBound * sum|p| of the exact sum",
          "[gpu][fp8gpu]") {
  if (!fp8_gpu_or_refusal_checked()) return;
  std::mt19937 rng(1311);
  const std::vector<int> tiles = every_tile();
  AccumulationStats total;
  for (const Shape& s : kShapes) {
    for (Fill fill : {Fill::uniform, Fill::gaussian}) {
      const std::string what = std::string(s.what) + ", " + fill_name(fill);
      AccumulationStats stats;
      measure_accumulation(make_code_problem(s, fill, rng), tiles, what, stats);
      print_accumulation(what.c_str(), stats);
      total.fold(stats);
    }
  }
  // The extremes, at the largest K: only subnormals (products down to 2^-18); only +-448 (the
  // largest products, sums up to 2304 * 448^2, exact cancellation in channel 2).
  for (Fill fill : {Fill::subnormal, Fill::extreme}) {
    const Shape& s = kShapes[8];
    const std::string what = std::string(s.what) + ", " + fill_name(fill);
    AccumulationStats stats;
    measure_accumulation(make_code_problem(s, fill, rng), tiles, what, stats);
    print_accumulation(what.c_str(), stats);
    total.fold(stats);
  }
  std::printf(
      "note: conv_fp8_gpu accumulation, every shape and tile: max err / sum|p| = %.3g (2^%.2f) "
      "at K = %d (%s); the tests assert <= 2^%.0f; err == 0 for %.1f%% of %llu outputs\n",
      total.max_ratio, log2_or_zero(total.max_ratio), total.max_k, total.max_where.c_str(),
      std::log2(kAccumulationBound), total.outputs ? 100.0 * total.exact / total.outputs : 0.0,
      total.outputs);
  check_accumulation(total);
}

TEST_CASE("conv_fp8_gpu's epilogue: f32, f16 and fp8 outputs within tolerance of the reference",
          "[gpu][fp8gpu]") {
  if (!fp8_gpu_or_refusal_checked()) return;
  std::mt19937 rng(1312);
  const std::vector<int> tiles = every_tile();
  const std::vector<Fp8ConvOutput> types = {Fp8ConvOutput::f32, Fp8ConvOutput::f16,
                                            Fp8ConvOutput::fp8};
  EpilogueStats stats;
  int case_index = 0;
  for (const Shape& s : kShapes) {
    for (int variant = 0; variant < 4; ++variant) {
      // SiLU or none, residual or none; the output view at an odd channel offset (scalar
      // stores) or an even one (pairs).
      const int act = variant % 2 == 0 ? 1 : 0;
      const bool residual = variant >= 2;
      const int y_before = case_index++ % 2 == 0 ? 3 : 2;
      Problem p = make_layer_problem(s, act, residual, y_before, rng);
      std::ostringstream what;
      what << s.what << ", act " << act << ", residual " << residual << ", y at channel "
           << y_before;
      check_epilogue(p, types, tiles, what.str(), stats);
    }
  }
  check_epilogue_stats(stats);
}

TEST_CASE("conv_fp8_gpu on small shapes, every code path (the sanitizers' run)",
          "[gpu][fp8gpu][small]") {
  if (!fp8_gpu_or_refusal_checked()) return;
  // Few launches: K tails (144, 48), M and out_c tails, stride 2, batch 2, residual, SiLU on and
  // off, odd and even output offsets, every output type; the smallest tile and the automatic one.
  const std::vector<Shape> small = {
      {"3x3 16->16, 5x7", 1, 5, 7, 16, 16, 3, 1, 1},
      {"1x1 48->40, 3x5", 1, 3, 5, 48, 40, 1, 1, 0},
      {"3x3 s2 32->24, 6x5, batch 2", 2, 6, 5, 32, 24, 3, 2, 1},
  };
  const std::vector<int> tiles = {-1, static_cast<int>(int8_conv_tiles().size()) - 1};
  std::mt19937 rng(1313);
  AccumulationStats acc;
  EpilogueStats epi;
  int index = 0;
  for (const Shape& s : small) {
    measure_accumulation(make_code_problem(s, Fill::uniform, rng), tiles, s.what, acc);
    const int act = index % 2 == 0 ? 1 : 0, y_before = 3 - index % 2;
    const bool residual = index != 1;
    ++index;
    Problem p = make_layer_problem(s, act, residual, y_before, rng);
    check_epilogue(p, {Fp8ConvOutput::f32, Fp8ConvOutput::f16, Fp8ConvOutput::fp8}, {tiles[1]},
                   s.what, epi);
  }
  check_accumulation(acc);
  INFO(epi.failures << " outputs out of tolerance, " << epi.sentinels << " sentinels overwritten");
  CHECK(epi.failures == 0);
  CHECK(epi.sentinels == 0);
}

TEST_CASE("conv_fp8_gpu: batch 0 writes nothing; memory the GPU cannot read is refused",
          "[gpu][fp8gpu][small]") {
  if (!fp8_gpu_or_refusal_checked()) return;
  std::mt19937 rng(1314);
  Problem p = make_layer_problem(kShapes[1], 1, true, 3, rng);
  const DeviceProblem d(p);
  const std::vector<unsigned char> init = sentinel_buffer(p, Fp8ConvOutput::f32);
  course::DeviceBuffer<unsigned char> y(init.size());
  CUDA_CHECK(cudaMemcpy(y.data(), init.data(), init.size(), cudaMemcpyHostToDevice));
  Fp8ConvArgs a = d.args(p, y.data(), Fp8ConvOutput::f32);
  a.batch = 0;
  CHECK_NOTHROW(conv_fp8_gpu(a, nullptr));
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<unsigned char> after(init.size());
  CUDA_CHECK(cudaMemcpy(after.data(), y.data(), after.size(), cudaMemcpyDeviceToHost));
  CHECK(after == init);
  // Pageable host memory, as y and as x (16-byte aligned, so only the access check can refuse).
  a.batch = 1;
  std::vector<float> host_y(p.y_elements());
  a.y = host_y.data() + p.y_before;
  CHECK_THROWS_WITH(conv_fp8_gpu(a, nullptr), Contains("y is not memory the GPU can access"));
  a.y = static_cast<float*>(static_cast<void*>(y.data())) + p.y_before;
  alignas(16) static std::uint8_t host_x[1 << 16];
  a.x = host_x + kXBefore;
  CHECK_THROWS_WITH(conv_fp8_gpu(a, nullptr), Contains("x is not memory the GPU can access"));
}

TEST_CASE("conv_fp8_gpu: a GPU older than compute capability 8.9 is refused",
          "[gpu][fp8gpu][small]") {
  // mma.sync with .e4m3 operands needs 8.9 (PTX ISA, "Warp-level Matrix Multiply-Accumulate
  // Instructions"). On such a GPU the refusal cannot be provoked: nothing to test.
  if (gpu_has_fp8_mma()) {
    SUCCEED("this GPU has FP8 tensor cores: the refusal cannot be tested here");
    return;
  }
  CHECK_FALSE(fp8_gpu_or_refusal_checked());
}
