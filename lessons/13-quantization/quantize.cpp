// Lesson 13: INT8 and FP8 tensors (quantize.hpp). Host code.
#include "quantize.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace lesson13 {

namespace {

float scale_for(double amax, double top, const char* who) {
  if (!(amax > 0) || !std::isfinite(amax)) {
    throw std::invalid_argument(std::string(who) + ": expected amax > 0 and finite, got " +
                                std::to_string(amax));
  }
  const float s = static_cast<float>(amax) / static_cast<float>(top);
  if (!std::isnormal(s)) {
    throw std::invalid_argument(std::string(who) + ": amax " + std::to_string(amax) +
                                " gives the scale " + std::to_string(s) +
                                ", expected a positive normal float");
  }
  return s;
}

void check_scale(float scale, const char* who) {
  if (!std::isnormal(scale) || scale < 0) {
    throw std::invalid_argument(std::string(who) +
                                ": expected a positive normal float scale, got " +
                                std::to_string(scale));
  }
}

}  // namespace

float int8_scale(double amax) {
  return scale_for(amax, kInt8Max, "int8_scale");
}

float fp8_e4m3_scale(double amax) {
  return scale_for(amax, kFp8E4M3Max, "fp8_e4m3_scale");
}

std::vector<std::int8_t> quantize_int8_per_tensor(const std::vector<float>& x, float scale) {
  check_scale(scale, "quantize_int8_per_tensor");
  std::vector<std::int8_t> q(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) q[i] = quantize_int8(x[i], scale);
  return q;
}

std::vector<float> dequantize_int8_per_tensor(const std::vector<std::int8_t>& q, float scale) {
  check_scale(scale, "dequantize_int8_per_tensor");
  std::vector<float> x(q.size());
  for (std::size_t i = 0; i < q.size(); ++i) x[i] = dequantize_int8(q[i], scale);
  return x;
}

PerChannelInt8 quantize_int8_per_channel(const std::vector<float>& w, int channels) {
  if (channels < 1 || w.size() % static_cast<std::size_t>(channels) != 0) {
    throw std::invalid_argument("quantize_int8_per_channel: expected channels >= 1 dividing the " +
                                std::to_string(w.size()) + " weights, got " +
                                std::to_string(channels));
  }
  const std::size_t row = w.size() / static_cast<std::size_t>(channels);
  PerChannelInt8 out;
  out.channels = channels;
  out.q.resize(w.size());
  out.scale.resize(static_cast<std::size_t>(channels));
  for (std::size_t k = 0; k < static_cast<std::size_t>(channels); ++k) {
    float amax = 0;
    for (std::size_t i = 0; i < row; ++i) {
      const float v = w[k * row + i];
      if (!std::isfinite(v)) {
        throw std::invalid_argument("quantize_int8_per_channel: weight " + std::to_string(i) +
                                    " of channel " + std::to_string(k) + " is " +
                                    std::to_string(v) + ", expected a finite number");
      }
      amax = std::max(amax, std::fabs(v));
    }
    const float s = amax > 0 ? int8_scale(amax) : 1.0f;
    out.scale[k] = s;
    for (std::size_t i = 0; i < row; ++i) out.q[k * row + i] = quantize_int8(w[k * row + i], s);
  }
  return out;
}

std::vector<float> dequantize_int8_per_channel(const PerChannelInt8& w) {
  if (w.channels < 1 || w.scale.size() != static_cast<std::size_t>(w.channels) ||
      w.q.size() % static_cast<std::size_t>(w.channels) != 0) {
    throw std::invalid_argument(
        "dequantize_int8_per_channel: expected one scale per channel and a whole number of rows");
  }
  const std::size_t row = w.q.size() / static_cast<std::size_t>(w.channels);
  std::vector<float> x(w.q.size());
  for (std::size_t i = 0; i < w.q.size(); ++i) x[i] = dequantize_int8(w.q[i], w.scale[i / row]);
  return x;
}

}  // namespace lesson13
