// Lesson 13: the FP8 E4M3 convolution's CPU reference (fp8_conv.hpp). Host code.
#include "fp8_conv.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>

#include <cuda_fp16.h>  // __half, __float2half_rn (host code too)

#include "int8_conv.hpp"  // check_conv_shape
#include "quantize.hpp"

namespace lesson13 {

namespace {

bool positive_normal(float s) {
  return std::isnormal(s) && s > 0;
}

// The value of every code (fp8_e4m3_to_float is exact, and a float is exact in double).
const std::array<double, 256>& e4m3_values() {
  static const std::array<double, 256> table = [] {
    std::array<double, 256> t{};
    for (int c = 0; c < 256; ++c) t[c] = fp8_e4m3_to_float(static_cast<std::uint8_t>(c));
    return t;
  }();
  return table;
}

// For every output pixel p = (n * out_h + oy) * out_w + ox, calls out(p, acc) with acc[k] the
// sum over the taps of e4m3(x) e4m3(w[k]) (or of |e4m3(x) e4m3(w[k])|). The taps of a pixel are
// gathered into one column (zero in the padding: an implicit GEMM's zero fill) and each
// channel's sum is split over four accumulators: every partial sum is a sum of products too,
// exact by the header's argument, so splitting changes nothing but the speed.
template <class Out>
void accumulate(const Fp8ConvArgs& a, bool absolute, Out out) {
  const std::array<double, 256>& value = e4m3_values();
  const auto decode = [&](std::uint8_t code) {
    return absolute ? std::fabs(value[code]) : value[code];
  };
  const std::size_t k_taps = static_cast<std::size_t>(a.kernel) * a.kernel * a.in_c;
  std::vector<double> w(static_cast<std::size_t>(a.out_c) * k_taps);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = decode(a.w[i]);
  std::vector<double> column(k_taps), acc(static_cast<std::size_t>(a.out_c));
  for (int n = 0; n < a.batch; ++n) {
    for (int oy = 0; oy < a.out_h; ++oy) {
      for (int ox = 0; ox < a.out_w; ++ox) {
        std::fill(column.begin(), column.end(), 0.0);
        for (int r = 0; r < a.kernel; ++r) {
          const int iy = oy * a.stride - a.pad + r;
          if (iy < 0 || iy >= a.in_h) continue;
          for (int s = 0; s < a.kernel; ++s) {
            const int ix = ox * a.stride - a.pad + s;
            if (ix < 0 || ix >= a.in_w) continue;
            const std::uint8_t* px =
                a.x + ((static_cast<std::size_t>(n) * a.in_h + iy) * a.in_w + ix) * a.x_stride;
            double* dst = column.data() + static_cast<std::size_t>(r * a.kernel + s) * a.in_c;
            for (int c = 0; c < a.in_c; ++c) dst[c] = decode(px[c]);
          }
        }
        for (int k = 0; k < a.out_c; ++k) {
          const double* wk = w.data() + static_cast<std::size_t>(k) * k_taps;
          double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
          std::size_t t = 0;
          for (; t + 4 <= k_taps; t += 4) {
            s0 += column[t] * wk[t];
            s1 += column[t + 1] * wk[t + 1];
            s2 += column[t + 2] * wk[t + 2];
            s3 += column[t + 3] * wk[t + 3];
          }
          for (; t < k_taps; ++t) s0 += column[t] * wk[t];
          acc[k] = (s0 + s1) + (s2 + s3);
        }
        out((static_cast<std::size_t>(n) * a.out_h + oy) * a.out_w + ox, acc);
      }
    }
  }
}

}  // namespace

void check_fp8_conv_args(const Fp8ConvArgs& a, const char* who, bool read_w_scale) {
  const auto require = [who](bool ok, const std::string& what) {
    if (!ok) throw std::invalid_argument(std::string(who) + ": " + what);
  };
  check_conv_shape(a, who);
  const long long k = static_cast<long long>(a.kernel) * a.kernel * a.in_c;
  require(k <= kFp8ConvMaxK, "K = kernel^2 * in_c = " + std::to_string(k) +
                                 " is beyond the exact double sum's limit (at most " +
                                 std::to_string(kFp8ConvMaxK) + ")");
  require(a.act == 0 || a.act == 1, "act must be 0 (none) or 1 (SiLU)");
  require(a.y_type == Fp8ConvOutput::fp8 || a.y_type == Fp8ConvOutput::f32 ||
              a.y_type == Fp8ConvOutput::f16,
          "unknown output type");
  require(positive_normal(a.x_scale), "x_scale must be a positive normal float");
  for (int c = 0; read_w_scale && c < a.out_c; ++c) {
    require(positive_normal(a.w_scale[c]),
            "w_scale[" + std::to_string(c) + "] must be a positive normal float");
  }
  require(!a.res || positive_normal(a.res_scale), "res_scale must be a positive normal float");
  require(a.y_type != Fp8ConvOutput::fp8 || positive_normal(a.y_scale),
          "y_scale must be a positive normal float");
}

void conv_fp8_reference(const Fp8ConvArgs& a) {
  check_fp8_conv_args(a, "conv_fp8_reference", true);
  const std::array<double, 256>& value = e4m3_values();
  accumulate(a, false, [&](std::size_t pixel, const std::vector<double>& acc) {
    for (int k = 0; k < a.out_c; ++k) {
      double v = acc[k] * (static_cast<double>(a.x_scale) * static_cast<double>(a.w_scale[k])) +
                 static_cast<double>(a.bias[k]);
      if (a.act == 1) v = v / (1.0 + std::exp(-v));
      if (a.res) v += static_cast<double>(a.res_scale) * value[a.res[pixel * a.res_stride + k]];
      const float vf = static_cast<float>(v);
      if (a.y_type == Fp8ConvOutput::f32) {
        static_cast<float*>(a.y)[pixel * a.y_stride + k] = vf;
      } else if (a.y_type == Fp8ConvOutput::f16) {
        static_cast<__half*>(a.y)[pixel * a.y_stride + k] = __float2half_rn(vf);
      } else {
        static_cast<std::uint8_t*>(a.y)[pixel * a.y_stride + k] = quantize_fp8_e4m3(vf, a.y_scale);
      }
    }
  });
}

std::vector<double> conv_fp8_abs_sums(const Fp8ConvArgs& a) {
  check_fp8_conv_args(a, "conv_fp8_abs_sums", true);
  std::vector<double> sums(static_cast<std::size_t>(a.batch) * a.out_h * a.out_w * a.out_c);
  accumulate(a, true, [&](std::size_t pixel, const std::vector<double>& acc) {
    std::copy(acc.begin(), acc.end(), sums.begin() + pixel * static_cast<std::size_t>(a.out_c));
  });
  return sums;
}

Fp8Weights quantize_fp8_e4m3_weights(const std::vector<float>& w, int channels, bool per_channel) {
  if (channels < 1 || w.size() % static_cast<std::size_t>(channels) != 0) {
    throw std::invalid_argument("quantize_fp8_e4m3_weights: expected channels >= 1 dividing the " +
                                std::to_string(w.size()) + " weights, got " +
                                std::to_string(channels));
  }
  const std::size_t row = w.size() / static_cast<std::size_t>(channels);
  std::vector<float> amax(static_cast<std::size_t>(channels), 0.0f);
  for (std::size_t i = 0; i < w.size(); ++i) {
    if (!std::isfinite(w[i])) {
      throw std::invalid_argument("quantize_fp8_e4m3_weights: weight " + std::to_string(i % row) +
                                  " of channel " + std::to_string(i / row) + " is " +
                                  std::to_string(w[i]) + ", expected a finite number");
    }
    float& m = amax[i / row];
    m = std::max(m, std::fabs(w[i]));
  }
  if (!per_channel) {
    const float all = *std::max_element(amax.begin(), amax.end());
    std::fill(amax.begin(), amax.end(), all);
  }
  Fp8Weights out;
  out.channels = channels;
  out.q.resize(w.size());
  out.scale.resize(static_cast<std::size_t>(channels));
  for (std::size_t k = 0; k < static_cast<std::size_t>(channels); ++k) {
    const float s = amax[k] > 0 ? fp8_e4m3_scale(amax[k]) : 1.0f;
    out.scale[k] = s;
    for (std::size_t i = 0; i < row; ++i) out.q[k * row + i] = quantize_fp8_e4m3(w[k * row + i], s);
  }
  return out;
}

}  // namespace lesson13
