// Lesson 13 exercise tests: each exercise against an independent statement of what it must do.
#include <cfenv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "common/testing.hpp"
#include "exercises.hpp"

using namespace lesson13;
using course::testing::Contains;

namespace {

// Round half to even of a multiple of one half, in integers: m / 2 for even m, and for odd m the
// even one of (m - 1) / 2 and (m + 1) / 2.
int half_even(int m) {
  if (m % 2 == 0) return m / 2;
  const int down = (m - 1) / 2, up = (m + 1) / 2;  // m odd: both exact
  return down % 2 == 0 ? down : up;
}

int clamp127(long long v) {
  return static_cast<int>(v < -127 ? -127 : (v > 127 ? 127 : v));
}

}  // namespace

TEST_CASE("exercise 1: quantize_int8 rounds half to even and saturates to [-127, 127]", "[ex1]") {
  // By hand: scale 0.5 doubles x.
  CHECK(quantize_int8(0.0f, 0.5f) == 0);
  CHECK(quantize_int8(0.25f, 0.5f) == 0);   // 0.5 -> 0 (even)
  CHECK(quantize_int8(0.75f, 0.5f) == 2);   // 1.5 -> 2 (even)
  CHECK(quantize_int8(1.25f, 0.5f) == 2);   // 2.5 -> 2 (even)
  CHECK(quantize_int8(1.75f, 0.5f) == 4);   // 3.5 -> 4
  CHECK(quantize_int8(-0.25f, 0.5f) == 0);  // -0.5 -> 0
  CHECK(quantize_int8(-0.75f, 0.5f) == -2);
  CHECK(quantize_int8(-1.25f, 0.5f) == -2);
  CHECK(quantize_int8(0.3f, 0.5f) == 1);  // 0.6 -> 1
  CHECK(quantize_int8(-0.3f, 0.5f) == -1);
  CHECK(quantize_int8(1.2f, 0.5f) == 2);  // 2.4 -> 2
  // Saturation, both sides symmetric: -128 never appears.
  CHECK(quantize_int8(63.25f, 0.5f) == 126);  // 126.5 -> 126 (even)
  CHECK(quantize_int8(63.5f, 0.5f) == 127);
  CHECK(quantize_int8(63.75f, 0.5f) == 127);  // 127.5: saturated
  CHECK(quantize_int8(-63.75f, 0.5f) == -127);
  CHECK(quantize_int8(-64.0f, 0.5f) == -127);  // -128 -> -127
  CHECK(quantize_int8(-64.25f, 0.5f) == -127);
  CHECK(quantize_int8(1e30f, 0.5f) == 127);
  CHECK(quantize_int8(-1e30f, 0.5f) == -127);
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(quantize_int8(inf, 1.0f) == 127);
  CHECK(quantize_int8(-inf, 1.0f) == -127);
  CHECK(quantize_int8(std::nanf(""), 1.0f) == 0);
  CHECK(quantize_int8(1e-30f, 1e-30f) == 1);

  // Every multiple of 1/8 in [-262.5, 262.5] with scale 1/4: the quotient m / 2 is exact, half
  // of them are ties; the integer oracle rounds them.
  for (int m = -2100; m <= 2100; ++m) {
    const float x = static_cast<float>(m) / 8.0f;
    INFO("x = " << x << " (x / s = " << m / 2.0 << ")");
    REQUIRE(int(quantize_int8(x, 0.25f)) == clamp127(half_even(m)));
  }

  // Scales that are not powers of two: the quotient is the float division (one rounding). The
  // oracle divides in double and rounds that to float, which for float operands is the correctly
  // rounded float quotient (double has more than 2 * 24 + 2 bits), then rounds to an integer
  // with std::nearbyint in the default rounding mode.
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dx(-3.0f, 3.0f), ds(0.001f, 0.05f);
  for (int i = 0; i < 100000; ++i) {
    const float x = dx(rng), s = ds(rng);
    const float v = static_cast<float>(static_cast<double>(x) / static_cast<double>(s));
    const long long want = std::llround(std::nearbyint(static_cast<double>(v)));
    INFO("x = " << x << " s = " << s);
    REQUIRE(int(quantize_int8(x, s)) == clamp127(want));
  }

  // Ties go to even whatever the FPU's rounding mode (std::nearbyint would follow it). Scale 1
  // and 0.5 keep the division exact in every mode.
  for (int mode : {FE_UPWARD, FE_DOWNWARD, FE_TOWARDZERO}) {
    REQUIRE(std::fesetround(mode) == 0);
    const int a = quantize_int8(0.5f, 1.0f), b = quantize_int8(1.5f, 1.0f),
              c = quantize_int8(-2.5f, 1.0f), d = quantize_int8(0.75f, 0.5f);
    std::fesetround(FE_TONEAREST);
    INFO("rounding mode " << mode);
    CHECK(a == 0);
    CHECK(b == 2);
    CHECK(c == -2);
    CHECK(d == 2);
  }
}

TEST_CASE("exercise 2: the entropy search on histograms whose answer is derived by hand", "[ex2]") {
  // [2, 2, 1, 1], 2 levels. i = 4: levels {0, 1} and {2, 3}, Q = [2, 2, 1, 1] = P: KL = 0.
  // i = 3: P = [2, 2, 2]/6, Q = [2, 1.5, 1.5]/5: KL = 1/3 (ln(5/6) + 2 ln(10/9)) = 0.0095 > 0.
  // i = 2: P = [2, 4]/6, Q = [2, 2]/4: KL = 1/3 ln(2/3) + 2/3 ln(4/3) = 0.0566. Answer: 4.
  CHECK(entropy_threshold_bins({2, 2, 1, 1}, 2) == 4);

  // A body of two bins, then one far outlier: [4, 2, 0, 0, 0, 0, 0, 1], 2 levels.
  // i = 2: P = [4, 3]/7, Q = [4, 2]/6: KL = 4/7 ln(6/7) + 3/7 ln(9/7) = 0.0196.
  // i = 3: levels {0}, {1, 2}; P = [4, 2, 1]/7, Q = [4, 1, 1]/6:
  //        KL = 4/7 ln(6/7) + 2/7 ln(12/7) + 1/7 ln(6/7) = 0.0439.
  // i = 4 .. 7: the last level holds only empty bins of the histogram, but P's last bin holds
  //        the outlier: Q = 0 where P > 0, KL infinite.
  // i = 8: levels {0..3}, {4..7}; Q = [3, 3, 0, 0, 0, 0, 0, 1]/7 (zeros stay zero):
  //        KL = 4/7 ln(4/3) + 2/7 ln(2/3) = 0.0485.
  // Answer: 2 (clip the outlier), where min-max would keep all 8 bins.
  CHECK(entropy_threshold_bins({4, 2, 0, 0, 0, 0, 0, 1}, 2) == 2);

  // Zeros stay zero: [0, 0, 0, 2, 1], 2 levels. i = 2, 3: nothing below the threshold (Q all
  // zero): infinite. i = 4: P = [0, 0, 0, 3], level {2, 3} spreads its 2 counts over the one bin
  // where P is non-zero: Q = [0, 0, 0, 2], proportional to P: KL = 0. i = 5: levels {0, 1},
  // {2, 3, 4}, Q = [0, 0, 0, 1.5, 1.5]/3 against P = [0, 0, 0, 2, 1]/3: KL = 0.0566. Answer: 4.
  CHECK(entropy_threshold_bins({0, 0, 0, 2, 1}, 2) == 4);

  // How the levels split a candidate that is not a multiple of them: [1, 3, 1, 1, 1], 3 levels.
  // Level j covers bins [floor(j i / 3), floor((j + 1) i / 3)).
  // i = 3: levels {0}, {1}, {2}; P = [1, 3, 3]/7, Q = [1, 3, 1]/5:
  //        KL = 4/7 ln(5/7) + 3/7 ln(15/7) = 0.1344.
  // i = 4: levels {0}, {1}, {2, 3}; P = [1, 3, 1, 2]/7, Q = [1, 3, 1, 1]/6:
  //        KL = 5/7 ln(6/7) + 2/7 ln(12/7) = 0.0439.
  // i = 5: levels {0}, {1, 2}, {3, 4}; P = [1, 3, 1, 1, 1]/7, Q = [1, 2, 2, 1, 1]/7:
  //        KL = 3/7 ln(3/2) + 1/7 ln(1/2) = 0.0747.
  // Answer: 4. (Splitting as floor(i / levels) bins per level with the remainder in the last,
  // {0}, {1}, {2, 3, 4} at i = 5, would reproduce P exactly there and answer 5.)
  CHECK(entropy_threshold_bins({1, 3, 1, 1, 1}, 3) == 4);

  // An exact tie: [0, 0, 1, 1], 2 levels. i = 3: P = [0, 0, 2], level {1, 2} puts its one count
  // on bin 2 (the only non-zero bin of P there): Q proportional to P, KL = 0. i = 4: levels
  // {0, 1}, {2, 3}: Q = [0, 0, 1, 1] = P, KL = 0. The smaller threshold wins the tie: 3.
  CHECK(entropy_threshold_bins({0, 0, 1, 1}, 2) == 3);

  // A flat histogram: at i = n every level's bins are equal, so Q = P and KL = 0; every i < n
  // piles the outliers into P's last bin, P is no longer flat within that level, KL > 0.
  // Answer: n, also when n is not a multiple of the levels (levels of unequal width).
  CHECK(entropy_threshold_bins(std::vector<std::uint64_t>(5, 1), 2) == 5);
  CHECK(entropy_threshold_bins(std::vector<std::uint64_t>(1500, 10), 128) == 1500);
  CHECK(entropy_threshold_bins(std::vector<std::uint64_t>(128, 3), 128) == 128);  // one candidate

  // TensorRT's sizes: 2048 bins, 128 levels. A body in bins 0..127 whose counts alternate
  // 1000, 2000, and a single outlier in bin 2047 (16x the body's range).
  // i = 128: one bin per level, Q = the body exactly; P differs by the one outlier folded into
  //   bin 127: KL = 1.3e-9.
  // i = 129: the last level is bins {127, 128}: Q spreads bin 127's 2000 over both, P has 2000
  //   and 1 there: KL = 0.0072.
  // i = 130 .. 2047: the last level holds only empty bins, P's last bin the outlier: infinite.
  // i = 2048: 16 bins per level average the alternating body to 1500 each:
  //   KL = (64000 ln(2/3) + 128000 ln(4/3)) / 192001 = 0.0566.
  // Answer: 128, a threshold 16x below min-max's.
  std::vector<std::uint64_t> h(2048, 0);
  for (int b = 0; b < 128; ++b) h[b] = 1000 + 1000 * (b % 2);
  h[2047] = 1;
  CHECK(entropy_threshold_bins(h, 128) == 128);

  // Errors.
  CHECK_THROWS_AS(entropy_threshold_bins({}, 128), std::invalid_argument);
  CHECK_THROWS_AS(entropy_threshold_bins({1, 2, 3}, 4), std::invalid_argument);
  CHECK_THROWS_AS(entropy_threshold_bins({1, 2, 3}, 0), std::invalid_argument);
  CHECK_THROWS_WITH(entropy_threshold_bins(std::vector<std::uint64_t>(256, 0), 128),
                    Contains("zero"));
}
