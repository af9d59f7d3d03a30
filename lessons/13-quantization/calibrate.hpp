// Lesson 13: calibration — from the activations a network produces to one amax per tensor.
//
//   ActivationObserver   watches every value a tensor takes over the calibration set: count,
//                        running min and max, and a histogram of |x| (2048 bins by default)
//   amax_min_max         the largest |x| seen (TensorRT's MinMax calibrator)
//   amax_percentile      the |x| below which p percent of the values lie (99.9, 99.99)
//   amax_entropy         TensorRT's entropy calibrator: the threshold whose 128-level
//                        quantisation loses the least information (KL divergence; exercise 2)
//   calibrate_amax       one of the three, as a CalibratorConfig says
//
// The histogram: one pass, a fixed number of bins, a range that grows by merging bins.
// A two-pass design (first the max, then the histogram over [0, max]) runs the network twice;
// growing a fixed range by appending bins (what pytorch-quantization's collector does) makes the
// bin count depend on the data. Here the range is always a power of two, 2^e, the smallest one
// strictly above every |x| seen so far, and the bins split it evenly: bin b holds
// [b, b + 1) * 2^e / bins. When a larger value arrives the range doubles (as often as needed) and
// each pair of neighbouring bins merges into one. Bin edges at range 2^e are also edges at 2^(e+k)
// so the merge is exact: the histogram after any sequence of observations is exactly the one a
// single pass with the final range would give, whatever the order the values came in (the tests
// check both). The price: the data's max lies in the upper half of the range, so between half and
// all of the bins are in use (1024 to 2048 by default), never fewer.
//
// Host code only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace lesson13 {

class ActivationObserver {
 public:
  static constexpr int kDefaultBins = 2048;

  // bins: a power of two in [2, 2^24]; throws std::invalid_argument otherwise.
  explicit ActivationObserver(int bins = kDefaultBins);

  // Adds n values. Throws std::invalid_argument (and adds nothing) if x is null with n > 0 or a
  // value is not finite (a NaN or an infinity in an activation is a bug upstream, not data to
  // calibrate on): the message gives its index.
  void observe(const float* x, std::size_t n);
  void observe(const std::vector<float>& x) { observe(x.data(), x.size()); }

  // Adds everything `other` observed, exactly as if it had been observed here. Throws
  // std::invalid_argument if the bin counts differ.
  void merge(const ActivationObserver& other);

  std::uint64_t count() const { return count_; }
  // Signed extremes and max |x| of everything observed; 0 while count() == 0.
  float min() const { return count_ ? min_ : 0.0f; }
  float max() const { return count_ ? max_ : 0.0f; }
  float amax() const;

  int bins() const { return static_cast<int>(hist_.size()); }
  // The histogram's range is [0, 2^range_exponent()), valid once some |x| > 0 was seen
  // (has_range()); until then every value seen was zero and sits in bin 0.
  bool has_range() const { return has_range_; }
  int range_exponent() const { return exponent_; }
  double range() const;      // 2^e, or 0 without a range
  double bin_width() const;  // range() / bins()
  // counts[b]: values with |x| in [b, b + 1) * bin_width(); they sum to count().
  const std::vector<std::uint64_t>& histogram() const { return hist_; }

 private:
  void grow_to(int exponent);  // merges bins until the range is 2^exponent
  std::vector<std::uint64_t> hist_;
  int log2_bins_ = 0;
  bool has_range_ = false;
  int exponent_ = 0;
  std::uint64_t count_ = 0;
  float min_ = 0, max_ = 0;
};

// ---------------------------------------------------------------------------- calibrators
//
// Each returns a per-tensor amax (the symmetric INT8 scale is then amax / 127: int8_scale).
// All throw std::invalid_argument for an observer that saw no value (an empty calibration set),
// and return 0 for one that saw only zeros (no scale can be derived from it; the calibration
// table refuses a zero scale, naming the tensor). The histogram methods never return more
// than amax_min_max: a threshold above every value seen clips nothing more than the max does.

// max |x| over everything observed, exactly.
double amax_min_max(const ActivationObserver& obs);

// The upper edge of the first bin at which the cumulative count reaches percentile / 100 of all
// values, clamped to amax_min_max: at least that fraction of the values is <= the result, and
// less than that fraction is below the result minus one bin (it is within a bin of the exact
// quantile). The method of NVIDIA's pytorch-quantization / Model Optimizer HistogramCalibrator
// ("percentile", default 99.99).
// Throws std::invalid_argument for percentile outside (0, 100].
double amax_percentile(const ActivationObserver& obs, double percentile);

// TensorRT's entropy calibration: the histogram up to its last non-empty bin (L bins) goes to
// entropy_threshold_bins (exercise 2) with `levels` levels, whose answer i (bins) gives the
// threshold i * bin_width(), clamped to amax_min_max. When L <= levels the data already fits the
// levels: the threshold is L * bin_width(), clamped likewise. Migacz's slides search candidates
// up to all 2048 bins of a histogram whose top edge is the max; ours has its max in the upper
// half of a power-of-two range, and stopping at L spares the candidates that only add empty
// bins. The slides end with threshold = (m + 0.5) * bin width; we take the candidate's edge
// i * bin width, the top of the bins P and Q were built from (the two differ by half a bin,
// 1/4096 of the range or less). Throws std::invalid_argument for levels < 1.
double amax_entropy(const ActivationObserver& obs, int levels = 128);

enum class CalibrationMethod { min_max, percentile, entropy };

struct CalibratorConfig {
  CalibrationMethod method = CalibrationMethod::entropy;
  double percentile = 99.99;  // method == percentile
  int levels = 128;           // method == entropy: INT8's positive levels, as TensorRT uses
};

// The calibrator's name for tables and logs: "minmax", "percentile-99.99", "entropy-128".
std::string calibrator_name(const CalibratorConfig& config);

double calibrate_amax(const ActivationObserver& obs, const CalibratorConfig& config);

}  // namespace lesson13
