// Lesson 13: the INT8 convolution, as a CPU reference for the GPU kernels to match.
//
// Lesson 12's convolution (engine_kernels.cuh, ConvArgs) with INT8 tensors: the same NHWC views,
// the same KRSC weights, the same fused epilogue, and the arithmetic of an INT8 tensor core
// (mma.sync with .s8 inputs and .s32 accumulation): integer products summed exactly in int32,
// then one floating-point epilogue per output element:
//
//   acc[n, oy, ox, k] = sum_{r, s, c} xq[n, oy*stride - pad + r, ox*stride - pad + s, c]
//                                     * wq[k, r, s, c]                   (int32, exact)
//   v = acc * (x_scale * w_scale[k]) + bias[k]                          dequantise, add bias
//   v = act(v)                                                          SiLU or none
//   v = v + res_scale * rq[n, oy, ox, k]                                residual, if any
//   y = quantize_int8(float(v), y_scale)  (y_type int8),  float(v)  (f32),
//       or half(float(v))  (f16: the float rounded once more, to nearest even, as
//       __float2half_rn does; what a layer whose consumer runs in FP16 stores)
//
// Out-of-image taps read zero (padding: the zero of the symmetric grid is exactly 0.0). The
// epilogue is evaluated in double, then rounded once to float: the reference is what an exact
// epilogue gives, and a GPU epilogue in float (whose exp also differs from the host's) may land
// on the other side of a rounding boundary; the GPU kernel (int8_conv_gpu.hpp) certifies its
// float epilogue and falls back to this double one where it cannot, which is how its tests can
// ask for equality. The requantisation is exercise 1's quantize_int8.
//
// Why one integer accumulator per output: with |q| <= 127 on both sides a product is at most
// 16129 (16384 if a tensor from elsewhere holds -128), so a reduction of K = kernel^2 * in_c
// products fits int32 for K <= 131071 (2^31 / 16384): YOLOv8n's largest K is 3 * 3 * 256 = 2304.
//
// Host code only.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace lesson13 {

enum class Int8ConvOutput { int8 = 0, f32 = 1, f16 = 2 };

// The maximum reduction length: every int8 x int8 product sums into int32 without overflow.
constexpr int kInt8ConvMaxK = 131071;

// Element (n, y, x, c) of x is x[((n * in_h + y) * in_w + x) * x_stride + c]: x points at the
// view's first channel, x_stride is its buffer's channel count (a concatenation's slice), as in
// lesson 12's ConvArgs. Likewise y / y_stride and res / res_stride (res and y have the output's
// shape [batch, out_h, out_w, out_c]).
struct Int8ConvArgs {
  const std::int8_t* x;    // input, quantised with x_scale
  const std::int8_t* w;    // [out_c][kernel][kernel][in_c], output channel k with w_scale[k]
  const float* bias;       // [out_c], float: added after dequantisation
  const std::int8_t* res;  // may be null; quantised with res_scale
  void* y;                 // std::int8_t (y_scale), float or __half, as y_type says
  int x_stride, res_stride, y_stride;
  int batch, in_h, in_w, in_c;
  int out_h, out_w, out_c;
  int kernel, stride, pad;
  int act;  // 0 none, 1 SiLU (lesson 12's Activation)
  float x_scale;
  const float* w_scale;  // [out_c]
  float res_scale;       // used when res is set
  float y_scale;         // used when y_type is int8
  Int8ConvOutput y_type;
};

// Runs the convolution on the CPU. Throws std::invalid_argument if a required pointer is null
// (x, w, bias, w_scale, y), a size is not positive (batch may be 0: nothing to do), pad < 0,
// out_h / out_w differ from (in + 2 pad - kernel) / stride + 1, a stride of a view is smaller
// than its channel count, kernel^2 * in_c exceeds kInt8ConvMaxK, act is not 0 or 1, or a scale
// that is used (x_scale, every w_scale, res_scale with res, y_scale for INT8 output) is not a
// positive normal float.
void conv_int8_reference(const Int8ConvArgs& a);

// The checks every 8-bit convolution's arguments share (Int8ConvArgs here, fp8_conv.hpp's
// Fp8ConvArgs: the same fields): the pointers x, w, bias, w_scale and y set, batch >= 0 and
// positive sizes, pad >= 0, out_h / out_w what the kernel, stride and padding make, every view's
// stride at least its channel count. The messages start with `who`. Throws std::invalid_argument.
template <class Args>
void check_conv_shape(const Args& a, const char* who) {
  const auto require = [who](bool ok, const std::string& what) {
    if (!ok) throw std::invalid_argument(std::string(who) + ": " + what);
  };
  require(a.x && a.w && a.bias && a.w_scale && a.y, "x, w, bias, w_scale and y must not be null");
  require(a.batch >= 0 && a.in_h > 0 && a.in_w > 0 && a.in_c > 0 && a.out_c > 0 && a.kernel > 0 &&
              a.stride > 0 && a.pad >= 0,
          "expected batch >= 0, positive sizes, kernel and stride, and pad >= 0");
  require(a.out_h == (a.in_h + 2 * a.pad - a.kernel) / a.stride + 1 &&
              a.out_w == (a.in_w + 2 * a.pad - a.kernel) / a.stride + 1 &&
              a.in_h + 2 * a.pad >= a.kernel && a.in_w + 2 * a.pad >= a.kernel,
          "out_h x out_w " + std::to_string(a.out_h) + "x" + std::to_string(a.out_w) +
              " is not what a " + std::to_string(a.kernel) + "x" + std::to_string(a.kernel) +
              " stride " + std::to_string(a.stride) + " pad " + std::to_string(a.pad) +
              " convolution makes of " + std::to_string(a.in_h) + "x" + std::to_string(a.in_w));
  require(a.x_stride >= a.in_c && a.y_stride >= a.out_c && (!a.res || a.res_stride >= a.out_c),
          "a view's stride is smaller than its channel count");
}

// The argument checks of conv_int8_reference, shared with the GPU launcher (conv_int8_gpu): the
// messages start with `who`. With read_w_scale false, the w_scale entries are not read (on the
// GPU they are device memory; the pointer is still required). Throws std::invalid_argument.
void check_int8_conv_args(const Int8ConvArgs& a, const char* who, bool read_w_scale);

}  // namespace lesson13
