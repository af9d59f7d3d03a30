// Lesson 13: the FP8 E4M3 convolution, as a CPU reference for a GPU kernel to match.
//
// int8_conv.hpp's convolution with E4M3 tensors: the same NHWC views, KRSC weights and fused
// epilogue, and the arithmetic of an FP8 tensor core taken at its best, every product exact and
// the sum exact:
//
//   acc[n, oy, ox, k] = sum_{r, s, c} e4m3(xq[n, oy*stride - pad + r, ox*stride - pad + s, c])
//                                     * e4m3(wq[k, r, s, c])              (exact, in double)
//   v = acc * (x_scale * w_scale[k]) + bias[k]                          dequantise, add bias
//   v = act(v)                                                          SiLU or none
//   v = v + res_scale * e4m3(rq[n, oy, ox, k])                          residual, if any
//   y = quantize_fp8_e4m3(float(v), y_scale)  (y_type fp8),  float(v)  (f32),
//       or half(float(v))  (f16, __float2half_rn)
//
// with e4m3(code) = fp8_e4m3_to_float(code) (quantize.hpp). Out-of-image taps read zero. The
// epilogue is conv_int8_reference's, in double, rounded once to float.
//
// Why a double sum is exact. An E4M3 value is m 2^(e-10) with m < 16 (normal: m in [8, 16),
// e in [1, 15]; subnormal: m < 8, e = 1), so it has at most 4 significant bits and is an
// integer multiple of 2^-9; |value| <= 448. A product of two is then an integer multiple of
// 2^-18 of magnitude at most 448^2 = 200704 (its 8 significant bits are exact in any binary
// format with 8 or more). Every partial sum of K products is again a multiple of 2^-18, of
// magnitude at most K 448^2: an integer times 2^-18, which a double holds exactly while the
// integer is at most 2^53, i.e. while K 448^2 <= 2^35. So for K <= kFp8ConvMaxK =
// floor(2^35 / 448^2) = 171196 each addition is exact, and the sum does not depend on its
// order: the reference is the exact value that any accumulation order approximates.
// YOLOv8n's largest K is 3 * 3 * 256 = 2304. (A GPU's FP8 MMA accumulates in a float format,
// rounding as it goes: its distance from this sum is bounded through conv_fp8_abs_sums.)
//
// A NaN code (0x7F, 0xFF) propagates as in an implicit GEMM that fills the padding with zeros:
// in x or the residual it makes the outputs that read it NaN, in w its whole output channel
// (0 x NaN is NaN); FP8 output stores NaN as 0x7F. The exactness argument is about finite
// codes. Host code only.
#pragma once

#include <cstdint>
#include <vector>

namespace lesson13 {

enum class Fp8ConvOutput { fp8 = 0, f32 = 1, f16 = 2 };

// The longest reduction whose double sum is exact (above): floor(2^35 / 448^2).
constexpr int kFp8ConvMaxK = static_cast<int>((1LL << 35) / (448LL * 448LL));
static_assert(kFp8ConvMaxK == 171196, "2^35 / 448^2");

// As Int8ConvArgs (int8_conv.hpp), with E4M3 codes: element (n, y, x, c) of x is
// x[((n * in_h + y) * in_w + x) * x_stride + c]; likewise y / y_stride and res / res_stride
// (res and y have the output's shape [batch, out_h, out_w, out_c]).
struct Fp8ConvArgs {
  const std::uint8_t* x;    // input, E4M3 codes, value e4m3(code) * x_scale
  const std::uint8_t* w;    // [out_c][kernel][kernel][in_c] E4M3 codes, channel k with w_scale[k]
  const float* bias;        // [out_c], float: added after dequantisation
  const std::uint8_t* res;  // may be null; E4M3 codes with res_scale
  void* y;                  // std::uint8_t E4M3 codes (y_scale), float or __half, as y_type says
  int x_stride, res_stride, y_stride;
  int batch, in_h, in_w, in_c;
  int out_h, out_w, out_c;
  int kernel, stride, pad;
  int act;  // 0 none, 1 SiLU (lesson 12's Activation)
  float x_scale;
  const float* w_scale;  // [out_c]
  float res_scale;       // used when res is set
  float y_scale;         // used when y_type is fp8
  Fp8ConvOutput y_type;
};

// Runs the convolution on the CPU. Throws std::invalid_argument if a required pointer is null
// (x, w, bias, w_scale, y), a size is not positive (batch may be 0: nothing to do), pad < 0,
// out_h / out_w differ from (in + 2 pad - kernel) / stride + 1, a stride of a view is smaller
// than its channel count, kernel^2 * in_c exceeds kFp8ConvMaxK, act is not 0 or 1, y_type is
// unknown, or a scale that is used (x_scale, every w_scale, res_scale with res, y_scale for FP8
// output) is not a positive normal float (zero, negative, subnormal, infinite or NaN).
void conv_fp8_reference(const Fp8ConvArgs& a);

// The argument checks of conv_fp8_reference, for a GPU launcher to share: the messages start
// with `who`. With read_w_scale false, the w_scale entries are not read (device memory; the
// pointer is still required). Throws std::invalid_argument.
void check_fp8_conv_args(const Fp8ConvArgs& a, const char* who, bool read_w_scale);

// sum_{r, s, c} |e4m3(xq) * e4m3(wq)| for every output, in code units (before x_scale *
// w_scale[k]): [batch][out_h][out_w][out_c], dense; exact, by the argument above. What an
// accumulation error is stated against: K products summed in any order with a rounding to
// nearest after each addition, in a format of unit roundoff u (2^-24 for FP32), differ from
// acc by at most gamma(K - 1) times this, gamma(n) = n u / (1 - n u) (Higham, "Accuracy and
// Stability of Numerical Algorithms", 2nd ed., section 4.2). y is not written. Throws as
// conv_fp8_reference does.
std::vector<double> conv_fp8_abs_sums(const Fp8ConvArgs& a);

// FP8 E4M3 weights for conv_fp8_reference. w holds `channels` rows of equal length (KRSC: row k
// is output channel k). Per channel: scale[k] = fp8_e4m3_scale(max |w| of row k), so each
// row's largest |w| becomes +-448; a row of zeros gets scale 1. Per tensor: one scale,
// fp8_e4m3_scale(max |w|) (1 for all zeros), repeated `channels` times. The codes are
// quantize_fp8_e4m3(w, scale[k]). Throws std::invalid_argument if channels < 1, w.size() is not
// a multiple of it, or a weight is not finite.
struct Fp8Weights {
  std::vector<std::uint8_t> q;  // same layout as w
  std::vector<float> scale;     // [channels]
  int channels = 0;
};
Fp8Weights quantize_fp8_e4m3_weights(const std::vector<float>& w, int channels,
                                     bool per_channel = true);

}  // namespace lesson13
