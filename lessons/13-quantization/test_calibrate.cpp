// Lesson 13 tests: the activation observer and the three calibrators.
//
// Oracles: a histogram computed directly from the definition (bin = floor(|x| / width) with the
// range found by doubling from below, no frexp), counts of the raw values for the percentile,
// and histograms built value by value so that the entropy answer can be derived by hand.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "calibrate.hpp"
#include "common/testing.hpp"

using namespace lesson13;
using course::testing::Contains;

namespace {

// The histogram the observer must hold after seeing `x`: range 2^e, the smallest power of two
// strictly above max |x|, found by stepping e; bins of width 2^e / bins.
struct OracleHistogram {
  int exponent = 0;
  std::vector<std::uint64_t> counts;
};

OracleHistogram oracle_histogram(const std::vector<float>& x, int bins) {
  double amax = 0;
  for (float v : x) amax = std::max(amax, std::fabs(static_cast<double>(v)));
  OracleHistogram h;
  h.counts.assign(static_cast<std::size_t>(bins), 0);
  int e = -160;
  while (std::ldexp(1.0, e) <= amax) ++e;
  h.exponent = e;
  const double width = std::ldexp(1.0, e) / bins;
  for (float v : x) ++h.counts[static_cast<std::size_t>(std::floor(std::fabs(v) / width))];
  return h;
}

std::vector<float> random_activations(std::size_t n, std::uint32_t seed) {
  // SiLU-like: mostly small, a long positive tail, a floor near -0.28.
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.5f);
  std::vector<float> x(n);
  for (float& v : x) {
    const float z = d(rng);
    v = z / (1.0f + std::exp(-z));
  }
  return x;
}

}  // namespace

TEST_CASE("ActivationObserver: the histogram, min and max of everything observed", "[calibrate]") {
  const std::vector<float> x = random_activations(20000, 1);
  ActivationObserver obs(2048);
  obs.observe(x);
  CHECK(obs.count() == x.size());
  CHECK(obs.min() == *std::min_element(x.begin(), x.end()));
  CHECK(obs.max() == *std::max_element(x.begin(), x.end()));
  CHECK(obs.amax() == std::max(-obs.min(), obs.max()));
  const OracleHistogram want = oracle_histogram(x, 2048);
  REQUIRE(obs.has_range());
  CHECK(obs.range_exponent() == want.exponent);
  CHECK(obs.range() == std::ldexp(1.0, want.exponent));
  CHECK(obs.bin_width() == std::ldexp(1.0, want.exponent) / 2048);
  CHECK(obs.histogram() == want.counts);
  // The max lies in the upper half of the range: at least half of the bins are in use.
  CHECK(obs.amax() >= obs.range() / 2);
}

TEST_CASE("ActivationObserver: growing the range by merging bins is exact and order-free",
          "[calibrate]") {
  std::vector<float> x = random_activations(30000, 2);
  x.push_back(37.0f);    // a late large value: several doublings at once
  x.push_back(-1e-30f);  // tiny values stay in bin 0
  const OracleHistogram want = oracle_histogram(x, 256);
  // Ascending |x| forces a merge at nearly every power of two; chunks of odd sizes; shuffled;
  // one value at a time.
  std::vector<float> ascending = x;
  std::sort(ascending.begin(), ascending.end(),
            [](float a, float b) { return std::fabs(a) < std::fabs(b); });
  std::vector<float> shuffled = x;
  std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937(3));
  for (const std::vector<float>* order : {&x, &ascending, &shuffled}) {
    for (std::size_t chunk : {std::size_t{1}, std::size_t{97}, order->size()}) {
      ActivationObserver obs(256);
      for (std::size_t i = 0; i < order->size(); i += chunk) {
        obs.observe(order->data() + i, std::min(chunk, order->size() - i));
      }
      INFO("chunk " << chunk);
      CHECK(obs.range_exponent() == want.exponent);
      CHECK(obs.histogram() == want.counts);
      CHECK(obs.count() == x.size());
    }
  }
  // A jump by more than the bins' log2 (8 for 256 bins): everything old lands in bin 0.
  ActivationObserver jump(256);
  jump.observe(std::vector<float>{0.001f, 0.002f, 0.0035f});
  jump.observe(std::vector<float>{1000.0f});
  const OracleHistogram want_jump = oracle_histogram({0.001f, 0.002f, 0.0035f, 1000.0f}, 256);
  CHECK(jump.histogram() == want_jump.counts);
  CHECK(jump.histogram()[0] == 3);
}

TEST_CASE("ActivationObserver: merge equals observing everything in one", "[calibrate]") {
  const std::vector<float> a = random_activations(5000, 4);
  std::vector<float> b = random_activations(7000, 5);
  for (float& v : b) v *= 9.0f;  // a wider range: the merge must grow `a`'s
  std::vector<float> all = a;
  all.insert(all.end(), b.begin(), b.end());
  ActivationObserver one(512), left(512), right(512), zeros(512), empty(512);
  one.observe(all);
  left.observe(a);
  right.observe(b);
  zeros.observe(std::vector<float>(10, 0.0f));
  ActivationObserver ab = left, ba = right;
  ab.merge(right);
  ba.merge(left);
  for (const ActivationObserver* m : {&ab, &ba}) {
    CHECK(m->histogram() == one.histogram());
    CHECK(m->range_exponent() == one.range_exponent());
    CHECK(m->count() == one.count());
    CHECK(m->min() == one.min());
    CHECK(m->max() == one.max());
  }
  // Zeros merged into a ranged observer (and the other way round) add to bin 0.
  ActivationObserver z1 = zeros, z2 = left;
  z1.merge(left);
  z2.merge(zeros);
  CHECK(z1.histogram() == z2.histogram());
  CHECK(z1.histogram()[0] == left.histogram()[0] + 10);
  ActivationObserver e = left;
  e.merge(empty);
  CHECK(e.histogram() == left.histogram());
  CHECK(e.count() == left.count());
  CHECK_THROWS_AS(left.merge(ActivationObserver(1024)), std::invalid_argument);
}

TEST_CASE("ActivationObserver: zeros, bad values and bad sizes", "[calibrate]") {
  ActivationObserver obs(2048);
  CHECK(obs.count() == 0);
  CHECK(obs.amax() == 0.0f);
  obs.observe(nullptr, 0);  // nothing to add
  obs.observe(std::vector<float>(5, 0.0f));
  CHECK_FALSE(obs.has_range());
  CHECK(obs.histogram()[0] == 5);
  CHECK(obs.range() == 0.0);
  // A bad value anywhere in a batch adds nothing of it.
  obs.observe(std::vector<float>{0.5f, 0.25f});
  const std::vector<std::uint64_t> before = obs.histogram();
  std::vector<float> bad{1.0f, 2.0f, std::numeric_limits<float>::quiet_NaN(), 3.0f};
  CHECK_THROWS_WITH(obs.observe(bad), Contains("value 2"));
  bad[2] = -std::numeric_limits<float>::infinity();
  CHECK_THROWS_AS(obs.observe(bad), std::invalid_argument);
  CHECK(obs.histogram() == before);
  CHECK(obs.count() == 7);
  CHECK(obs.max() == 0.5f);
  CHECK_THROWS_AS(obs.observe(nullptr, 3), std::invalid_argument);
  for (int bins : {0, 1, 3, 1000, 1 << 25}) {
    INFO("bins " << bins);
    CHECK_THROWS_AS(ActivationObserver(bins), std::invalid_argument);
  }
}

TEST_CASE("calibrators: min-max is the max |x|; percentile within a bin of the quantile",
          "[calibrate]") {
  std::vector<float> x = random_activations(50000, 6);
  x.push_back(-20.0f);  // an outlier below: min-max takes |min|
  ActivationObserver obs;
  obs.observe(x);
  CHECK(amax_min_max(obs) == 20.0);
  for (double p : {99.0, 99.9, 99.99}) {
    const double a = amax_percentile(obs, p);
    std::size_t at_or_below = 0, below_one_bin_less = 0;
    for (float v : x) {
      at_or_below += std::fabs(v) <= a;
      below_one_bin_less += std::fabs(v) < a - obs.bin_width();
    }
    INFO("percentile " << p << ": amax " << a);
    CHECK(a <= amax_min_max(obs));
    CHECK(static_cast<double>(at_or_below) >= p / 100 * x.size());
    CHECK(static_cast<double>(below_one_bin_less) < p / 100 * x.size());
  }
  CHECK(amax_percentile(obs, 99.9) <= amax_percentile(obs, 99.99));
  CHECK(amax_percentile(obs, 100.0) == amax_min_max(obs));
  // By hand: the values 1 .. 10000. Range 2^14, bins of 8; 99.9 % = 9990 values; value k is in
  // bin floor(k / 8), and bins 0 .. j hold the values up to 8 j + 7: the first j with
  // 8 j + 7 >= 9990 is 1248, whose upper edge is 1249 * 8 = 9992.
  std::vector<float> ramp(10000);
  std::iota(ramp.begin(), ramp.end(), 1.0f);
  ActivationObserver r;
  r.observe(ramp);
  CHECK(r.bin_width() == 8.0);
  CHECK(amax_percentile(r, 99.9) == 9992.0);
  // 50 %: 5000 values; 8 j + 7 >= 5000 first at j = 625 (j = 624 holds up to 4999): 5008.
  CHECK(amax_percentile(r, 50.0) == 5008.0);
  // A cumulative count that reaches the percentile exactly: 50 values at 1 and 50 at 3 (range 4,
  // bins of 1/512). The median's bin is 1's (512), whose 50 values are exactly 50 % of 100:
  // the answer is that bin's upper edge, 513 / 512, not the next occupied bin.
  ActivationObserver two;
  two.observe(std::vector<float>(50, 1.0f));
  two.observe(std::vector<float>(50, 3.0f));
  CHECK(amax_percentile(two, 50.0) == 513.0 / 512.0);
  CHECK(amax_percentile(two, 50.1) == 3.0);  // the next bin's edge 1537 / 512, clamped to the max
  for (double bad : {0.0, -1.0, 100.5, std::numeric_limits<double>::quiet_NaN()}) {
    CHECK_THROWS_AS(amax_percentile(obs, bad), std::invalid_argument);
  }
}

TEST_CASE("calibrators: entropy against min-max on distributions with a known answer",
          "[calibrate]") {
  // Values placed at bin centres so that the histogram is exactly what the test says. Range 1
  // (the max is in [0.5, 1)), 2048 bins of 2^-11.
  const double w = std::ldexp(1.0, -11);
  auto centre = [&](int b) { return static_cast<float>((b + 0.5) * w); };

  // A flat body over bins 0 .. 1499: the candidate i = 1500 reproduces it exactly (KL = 0),
  // every smaller one distorts its last level with the clipped values. Entropy keeps everything:
  // 1500 bins, clamped to the largest value seen, which min-max returns too.
  ActivationObserver flat;
  for (int b = 0; b < 1500; ++b) flat.observe(std::vector<float>(10, centre(b)));
  REQUIRE(flat.bin_width() == w);
  CHECK(amax_entropy(flat) == amax_min_max(flat));
  CHECK(amax_min_max(flat) == centre(1499));

  // An alternating body over bins 0 .. 127 and one outlier in bin 2047: the hand derivation of
  // exercise 2's test gives 128 bins, 0.0625, where min-max keeps the outlier (0.99976). The
  // 99.99th percentile falls in the body's last bin too (192000 of 192001 values are below its
  // edge), so it clips the outlier as well; the 99.9999th does not.
  ActivationObserver outlier;
  for (int b = 0; b < 128; ++b) {
    outlier.observe(std::vector<float>(static_cast<std::size_t>(1000 + 1000 * (b % 2)), centre(b)));
  }
  outlier.observe(std::vector<float>{-centre(2047)});  // a negative outlier: |x| counts
  REQUIRE(outlier.bin_width() == w);
  CHECK(amax_min_max(outlier) == centre(2047));
  CHECK(amax_entropy(outlier) == 0.0625);
  CHECK(amax_percentile(outlier, 99.99) == 0.0625);
  CHECK(amax_percentile(outlier, 99.9999) == amax_min_max(outlier));

  // Fewer occupied bins than levels: no search, the occupied bins' edge clamped to the max.
  ActivationObserver few(64);
  few.observe(std::vector<float>{0.1f, 0.2f, 0.3f});
  CHECK(amax_entropy(few) == 0.3f);

  // Only zeros: no scale can come from it, every method says 0; nothing seen: an error.
  ActivationObserver zeros;
  zeros.observe(std::vector<float>(4, 0.0f));
  CHECK(amax_min_max(zeros) == 0.0);
  CHECK(amax_percentile(zeros, 99.99) == 0.0);
  CHECK(amax_entropy(zeros) == 0.0);
  ActivationObserver none;
  for (const CalibratorConfig& c : {CalibratorConfig{CalibrationMethod::min_max},
                                    CalibratorConfig{CalibrationMethod::percentile},
                                    CalibratorConfig{CalibrationMethod::entropy}}) {
    INFO(calibrator_name(c));
    CHECK_THROWS_WITH(calibrate_amax(none, c), Contains("empty calibration set"));
  }
  CHECK_THROWS_AS(amax_entropy(flat, 0), std::invalid_argument);
}

TEST_CASE("calibrators: every histogram method stays at or below min-max on real-looking data",
          "[calibrate]") {
  for (std::uint32_t seed : {7u, 8u, 9u}) {
    std::vector<float> x = random_activations(40000, seed);
    ActivationObserver obs;
    obs.observe(x);
    const double mm = amax_min_max(obs);
    for (const CalibratorConfig& c : {CalibratorConfig{CalibrationMethod::percentile, 99.9},
                                      CalibratorConfig{CalibrationMethod::percentile, 99.99},
                                      CalibratorConfig{CalibrationMethod::entropy}}) {
      const double a = calibrate_amax(obs, c);
      INFO(calibrator_name(c) << " seed " << seed << ": " << a << " (min-max " << mm << ")");
      CHECK(a > 0);
      CHECK(a <= mm);
      // The entropy threshold is at least `levels` bins wide (its smallest candidate).
      if (c.method == CalibrationMethod::entropy) CHECK(a >= std::min(mm, 128 * obs.bin_width()));
    }
  }
  CHECK(calibrator_name({CalibrationMethod::min_max}) == "minmax");
  CHECK(calibrator_name({CalibrationMethod::percentile, 99.99}) == "percentile-99.99");
  CHECK(calibrator_name({CalibrationMethod::percentile, 99.9}) == "percentile-99.9");
  CHECK(calibrator_name({CalibrationMethod::entropy}) == "entropy-128");
}

TEST_CASE("an empty calibration set or a histogram with no samples is refused, saying so",
          "[calibrate]") {
  // An observer that saw nothing (no frames, or frames of zero elements) has no histogram to
  // search: every calibrator refuses it, naming itself, rather than returning a scale.
  ActivationObserver never;
  ActivationObserver empty_frames;
  empty_frames.observe(std::vector<float>{});
  empty_frames.observe(nullptr, 0);
  REQUIRE(empty_frames.count() == 0);
  for (const ActivationObserver* obs : {&never, &empty_frames}) {
    CHECK_THROWS_AS(amax_min_max(*obs), std::invalid_argument);
    CHECK_THROWS_WITH(amax_min_max(*obs),
                      Contains("amax_min_max") && Contains("empty calibration set"));
    CHECK_THROWS_WITH(amax_percentile(*obs, 99.99),
                      Contains("amax_percentile") && Contains("empty calibration set"));
    CHECK_THROWS_WITH(amax_entropy(*obs),
                      Contains("amax_entropy") && Contains("empty calibration set"));
  }
  // The same when the observers of a calibration run are merged: nothing plus nothing.
  ActivationObserver merged;
  merged.merge(never);
  CHECK(merged.count() == 0);
  CHECK_THROWS_WITH(calibrate_amax(merged, CalibratorConfig{CalibrationMethod::entropy}),
                    Contains("empty calibration set"));
}
