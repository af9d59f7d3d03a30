// Lesson 13: the activation observer and the three calibrators (calibrate.hpp). Host code.
#include "calibrate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string>

#include "exercises.hpp"

namespace lesson13 {

ActivationObserver::ActivationObserver(int bins) {
  if (bins < 2 || bins > (1 << 24) || (bins & (bins - 1)) != 0) {
    throw std::invalid_argument(
        "ActivationObserver: expected a power of two in [2, 2^24] bins, got " +
        std::to_string(bins));
  }
  hist_.assign(static_cast<std::size_t>(bins), 0);
  while ((1 << log2_bins_) < bins) ++log2_bins_;
}

float ActivationObserver::amax() const {
  return count_ ? std::max(std::fabs(min_), std::fabs(max_)) : 0.0f;
}

double ActivationObserver::range() const {
  return has_range_ ? std::ldexp(1.0, exponent_) : 0.0;
}

double ActivationObserver::bin_width() const {
  return has_range_ ? std::ldexp(1.0, exponent_ - log2_bins_) : 0.0;
}

void ActivationObserver::grow_to(int exponent) {
  if (!has_range_) {
    // Everything seen so far was zero and sits in bin 0, which holds [0, width) at any range.
    has_range_ = true;
    exponent_ = exponent;
    return;
  }
  if (exponent <= exponent_) return;
  const int shift = exponent - exponent_;
  if (shift >= log2_bins_) {
    // Every old bin lies inside the new bin 0.
    std::uint64_t all = 0;
    for (std::uint64_t c : hist_) all += c;
    std::fill(hist_.begin(), hist_.end(), 0);
    hist_[0] = all;
  } else {
    // Old bin b covers [b, b + 1) * old width = [b >> shift, ...) of the new width, inside new bin
    // b >> shift. Ascending order is safe: b >> shift <= b, and bin b is read before it is
    // cleared or written (b >> shift == b only for b == 0).
    for (std::size_t b = 1; b < hist_.size(); ++b) {
      const std::uint64_t c = hist_[b];
      hist_[b] = 0;
      hist_[b >> shift] += c;
    }
  }
  exponent_ = exponent;
}

void ActivationObserver::observe(const float* x, std::size_t n) {
  if (n == 0) return;
  if (x == nullptr) {
    throw std::invalid_argument("ActivationObserver::observe: null data with " + std::to_string(n) +
                                " values");
  }
  // Validate everything before changing anything: an exception leaves the observer as it was.
  float lo = std::numeric_limits<float>::infinity(), hi = -lo;
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) {
      throw std::invalid_argument("ActivationObserver::observe: value " + std::to_string(i) +
                                  " is " + std::to_string(x[i]) + ", expected a finite number");
    }
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  const float top = std::max(std::fabs(lo), std::fabs(hi));
  if (top > 0) {
    int e;
    std::frexp(top, &e);  // top = f * 2^e with f in [0.5, 1): 2^e is the smallest power > top
    grow_to(e);
  }
  // bin = floor(|x| * bins / 2^e): a scaling by a power of two, exact, then a floor.
  const int scale_exp = log2_bins_ - exponent_;
  for (std::size_t i = 0; i < n; ++i) {
    const double a = std::fabs(static_cast<double>(x[i]));
    const std::size_t b = has_range_ ? static_cast<std::size_t>(std::ldexp(a, scale_exp)) : 0;
    ++hist_[b];
  }
  if (count_ == 0) {
    min_ = lo;
    max_ = hi;
  } else {
    min_ = std::min(min_, lo);
    max_ = std::max(max_, hi);
  }
  count_ += n;
}

void ActivationObserver::merge(const ActivationObserver& other) {
  if (other.bins() != bins()) {
    throw std::invalid_argument("ActivationObserver::merge: " + std::to_string(other.bins()) +
                                " bins into " + std::to_string(bins()));
  }
  if (other.count_ == 0) return;
  ActivationObserver incoming = other;
  if (has_range_) incoming.grow_to(exponent_);
  if (incoming.has_range_) grow_to(incoming.exponent_);
  for (std::size_t b = 0; b < hist_.size(); ++b) hist_[b] += incoming.hist_[b];
  if (count_ == 0) {
    min_ = other.min_;
    max_ = other.max_;
  } else {
    min_ = std::min(min_, other.min_);
    max_ = std::max(max_, other.max_);
  }
  count_ += other.count_;
}

namespace {

void require_data(const ActivationObserver& obs, const char* who) {
  if (obs.count() == 0) {
    throw std::invalid_argument(std::string(who) +
                                ": the observer saw no value (an empty calibration set)");
  }
}

}  // namespace

double amax_min_max(const ActivationObserver& obs) {
  require_data(obs, "amax_min_max");
  return obs.amax();
}

double amax_percentile(const ActivationObserver& obs, double percentile) {
  require_data(obs, "amax_percentile");
  if (!(percentile > 0 && percentile <= 100)) {
    throw std::invalid_argument("amax_percentile: expected a percentile in (0, 100], got " +
                                std::to_string(percentile));
  }
  if (!obs.has_range()) return 0.0;
  const double need = percentile / 100.0 * static_cast<double>(obs.count());
  const std::vector<std::uint64_t>& h = obs.histogram();
  std::uint64_t cumulative = 0;
  for (std::size_t b = 0; b < h.size(); ++b) {
    cumulative += h[b];
    if (static_cast<double>(cumulative) >= need) {
      return std::min(static_cast<double>(b + 1) * obs.bin_width(),
                      static_cast<double>(obs.amax()));
    }
  }
  return obs.amax();  // not reached: the last cumulative count is count() >= need
}

double amax_entropy(const ActivationObserver& obs, int levels) {
  require_data(obs, "amax_entropy");
  if (levels < 1) {
    throw std::invalid_argument("amax_entropy: expected levels >= 1, got " +
                                std::to_string(levels));
  }
  if (!obs.has_range()) return 0.0;
  const std::vector<std::uint64_t>& h = obs.histogram();
  std::size_t used = h.size();
  while (used > 0 && h[used - 1] == 0) --used;
  int bins = static_cast<int>(used);
  if (bins > levels) {
    const std::vector<std::uint64_t> head(h.begin(), h.begin() + static_cast<long>(used));
    bins = entropy_threshold_bins(head, levels);
  }
  return std::min(bins * obs.bin_width(), static_cast<double>(obs.amax()));
}

std::string calibrator_name(const CalibratorConfig& config) {
  switch (config.method) {
    case CalibrationMethod::min_max:
      return "minmax";
    case CalibrationMethod::percentile: {
      char text[64];
      std::snprintf(text, sizeof text, "percentile-%g", config.percentile);
      return text;
    }
    case CalibrationMethod::entropy:
      return "entropy-" + std::to_string(config.levels);
  }
  throw std::invalid_argument("calibrator_name: unknown calibration method");
}

double calibrate_amax(const ActivationObserver& obs, const CalibratorConfig& config) {
  switch (config.method) {
    case CalibrationMethod::min_max:
      return amax_min_max(obs);
    case CalibrationMethod::percentile:
      return amax_percentile(obs, config.percentile);
    case CalibrationMethod::entropy:
      return amax_entropy(obs, config.levels);
  }
  throw std::invalid_argument("calibrate_amax: unknown calibration method");
}

}  // namespace lesson13

#ifndef LESSON_EXERCISE_BUILD
#include "solutions.cuh"
#endif
