// Lesson 13: the INT8 convolution's CPU reference (int8_conv.hpp). Host code.
#include "int8_conv.hpp"

#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include <cuda_fp16.h>  // __half, __float2half_rn (host code too)

#include "quantize.hpp"

namespace lesson13 {

namespace {

bool positive_normal(float s) {
  return std::isnormal(s) && s > 0;
}

}  // namespace

void check_int8_conv_args(const Int8ConvArgs& a, const char* who, bool read_w_scale) {
  const auto require = [who](bool ok, const std::string& what) {
    if (!ok) throw std::invalid_argument(std::string(who) + ": " + what);
  };
  check_conv_shape(a, who);
  require(static_cast<long long>(a.kernel) * a.kernel * a.in_c <= kInt8ConvMaxK,
          "K = kernel^2 * in_c = " +
              std::to_string(static_cast<long long>(a.kernel) * a.kernel * a.in_c) +
              " would overflow the int32 accumulator (at most " + std::to_string(kInt8ConvMaxK) +
              ")");
  require(a.act == 0 || a.act == 1, "act must be 0 (none) or 1 (SiLU)");
  require(a.y_type == Int8ConvOutput::int8 || a.y_type == Int8ConvOutput::f32 ||
              a.y_type == Int8ConvOutput::f16,
          "unknown output type");
  require(positive_normal(a.x_scale), "x_scale must be a positive normal float");
  for (int k = 0; read_w_scale && k < a.out_c; ++k) {
    require(positive_normal(a.w_scale[k]),
            "w_scale[" + std::to_string(k) + "] must be a positive normal float");
  }
  require(!a.res || positive_normal(a.res_scale), "res_scale must be a positive normal float");
  require(a.y_type != Int8ConvOutput::int8 || positive_normal(a.y_scale),
          "y_scale must be a positive normal float");
}

void conv_int8_reference(const Int8ConvArgs& a) {
  check_int8_conv_args(a, "conv_int8_reference", true);
  const int k_taps = a.kernel * a.kernel * a.in_c;
  std::vector<std::int32_t> acc(static_cast<std::size_t>(a.out_c));
  for (int n = 0; n < a.batch; ++n) {
    for (int oy = 0; oy < a.out_h; ++oy) {
      for (int ox = 0; ox < a.out_w; ++ox) {
        for (int k = 0; k < a.out_c; ++k) acc[k] = 0;
        for (int r = 0; r < a.kernel; ++r) {
          const int iy = oy * a.stride - a.pad + r;
          if (iy < 0 || iy >= a.in_h) continue;
          for (int s = 0; s < a.kernel; ++s) {
            const int ix = ox * a.stride - a.pad + s;
            if (ix < 0 || ix >= a.in_w) continue;
            const std::int8_t* px =
                a.x + ((static_cast<std::size_t>(n) * a.in_h + iy) * a.in_w + ix) * a.x_stride;
            for (int k = 0; k < a.out_c; ++k) {
              const std::int8_t* wk =
                  a.w + static_cast<std::size_t>(k) * k_taps + (r * a.kernel + s) * a.in_c;
              std::int32_t sum = 0;
              for (int c = 0; c < a.in_c; ++c) {
                sum += static_cast<std::int32_t>(px[c]) * static_cast<std::int32_t>(wk[c]);
              }
              acc[k] += sum;
            }
          }
        }
        const std::size_t pixel = (static_cast<std::size_t>(n) * a.out_h + oy) * a.out_w + ox;
        for (int k = 0; k < a.out_c; ++k) {
          double v = static_cast<double>(acc[k]) *
                         (static_cast<double>(a.x_scale) * static_cast<double>(a.w_scale[k])) +
                     static_cast<double>(a.bias[k]);
          if (a.act == 1) v = v / (1.0 + std::exp(-v));
          if (a.res) {
            v += static_cast<double>(a.res_scale) * a.res[pixel * a.res_stride + k];
          }
          const float vf = static_cast<float>(v);
          if (a.y_type == Int8ConvOutput::f32) {
            static_cast<float*>(a.y)[pixel * a.y_stride + k] = vf;
          } else if (a.y_type == Int8ConvOutput::f16) {
            static_cast<__half*>(a.y)[pixel * a.y_stride + k] = __float2half_rn(vf);
          } else {
            static_cast<std::int8_t*>(a.y)[pixel * a.y_stride + k] = quantize_int8(vf, a.y_scale);
          }
        }
      }
    }
  }
}

}  // namespace lesson13
