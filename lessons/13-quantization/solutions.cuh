// Lesson 13: the exercise solutions. Read them after you have tried.
//
// Not compiled on its own, and included twice, in the lesson build only: calibrate.cpp includes
// it at its end (exercises 1 and 2), int8_conv_gpu.cu near its top with LESSON13_EXERCISE_KERNEL
// defined (exercise 3, which the INT8 kernel calls). The exercise build defines
// LESSON_EXERCISE_BUILD, which leaves it out, and exercise.cu supplies the same functions instead.
#pragma once

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace lesson13 {

#ifndef LESSON13_EXERCISE_KERNEL

// Exercise 1. Saturate first (which also takes care of the infinities and keeps the quotient
// small enough for floorf to be exact), then round half to even by hand: floor, and step up
// when the remainder is above one half, or exactly one half with an odd floor. Spelling the
// rounding out keeps it independent of the FPU's rounding mode (std::nearbyint follows
// fesetround) and gives the same result as the GPU's cvt.rni.
LESSON13_HD std::int8_t quantize_int8(float x, float scale) {
  const float v = x / scale;
  if (v != v) return 0;  // NaN
  if (v >= 127.0f) return 127;
  if (v <= -127.0f) return -127;
  float r = floorf(v);
  const float rest = v - r;  // exact: |v| < 127
  if (rest > 0.5f || (rest == 0.5f && fmodf(r, 2.0f) != 0.0f)) r += 1.0f;
  return static_cast<std::int8_t>(r);
}

// Exercise 2. The search as exercises.hpp states it, O(n^2) for n bins: 2048 bins take a few
// million steps per tensor. Prefix sums give each candidate's outliers in O(1).
int entropy_threshold_bins(const std::vector<std::uint64_t>& histogram, int levels) {
  const int n = static_cast<int>(histogram.size());
  if (levels < 1 || n < levels) {
    throw std::invalid_argument(
        "entropy_threshold_bins: expected levels >= 1 and at least that "
        "many bins, got " +
        std::to_string(levels) + " levels and " + std::to_string(n) + " bins");
  }
  std::vector<double> prefix(static_cast<std::size_t>(n) + 1, 0.0);
  for (int b = 0; b < n; ++b) prefix[b + 1] = prefix[b] + static_cast<double>(histogram[b]);
  const double total = prefix[n];
  if (!(total > 0)) {
    throw std::invalid_argument("entropy_threshold_bins: every count of the histogram is zero");
  }
  std::vector<double> p(static_cast<std::size_t>(n)), q(static_cast<std::size_t>(n));
  int best = -1;
  double best_kl = std::numeric_limits<double>::infinity();
  for (int i = levels; i <= n; ++i) {
    for (int b = 0; b < i; ++b) p[b] = static_cast<double>(histogram[b]);
    p[i - 1] += total - prefix[i];  // the outliers the threshold clips
    for (int j = 0; j < levels; ++j) {
      const int begin = static_cast<int>(static_cast<long long>(j) * i / levels);
      const int end = static_cast<int>(static_cast<long long>(j + 1) * i / levels);
      const double level_total = prefix[end] - prefix[begin];
      int nonzero = 0;
      for (int b = begin; b < end; ++b) nonzero += p[b] != 0;
      for (int b = begin; b < end; ++b) q[b] = p[b] != 0 ? level_total / nonzero : 0.0;
    }
    // P sums to `total`, Q to prefix[i] (a level with no non-zero bin has a zero total).
    const double q_total = prefix[i];
    if (!(q_total > 0)) continue;  // nothing below the threshold: Q is all zero
    double kl = 0;
    for (int b = 0; b < i && kl < std::numeric_limits<double>::infinity(); ++b) {
      if (p[b] == 0) continue;
      if (q[b] == 0) {
        kl = std::numeric_limits<double>::infinity();
        break;
      }
      const double pb = p[b] / total, qb = q[b] / q_total;
      kl += pb * std::log(pb / qb);
    }
    if (kl < best_kl) {
      best_kl = kl;
      best = i;
    }
  }
  // i = n always has a finite divergence (no outliers: every bin where P > 0 lies in a level
  // whose total is at least that bin's count), so `best` is set.
  return best;
}

#else  // LESSON13_EXERCISE_KERNEL: inside int8_conv_gpu.cu

// Exercise 3, the slow path: the reference's epilogue value, operation for operation
// (int8_conv.cpp, conv_int8_reference), each operation an explicitly rounded intrinsic so that
// nvcc cannot contract a multiply and an add into an FMA (the host side is compiled with
// -ffp-contract=off: the course's top CMakeLists). Out of line: it is rare, and inlined its
// double registers would weigh on every block of the kernel.
static __device__ __noinline__ double int8_epilogue_exact(int acc, float xs, float ws, float bias,
                                                          int act, bool has_res, float res_scale,
                                                          int res) {
  double v = __dadd_rn(__dmul_rn(static_cast<double>(acc),
                                 __dmul_rn(static_cast<double>(xs), static_cast<double>(ws))),
                       static_cast<double>(bias));
  if (act == 1) v = __ddiv_rn(v, __dadd_rn(1.0, exp(-v)));
  if (has_res)
    v = __dadd_rn(v, __dmul_rn(static_cast<double>(res_scale), static_cast<double>(res)));
  return v;
}

// Exercise 3: the certified float epilogue, falling back to the double one.
//
// The float path uses the fast intrinsics (a multiply by the reciprocal instead of two IEEE
// divisions, __expf and __fdividef instead of expf and a division: about half the instructions,
// and the epilogue is most of an INT8 kernel's instructions), and carries their documented error
// into the bound. u = 2^-24 (float rounding; an ulp is at most 2u of the value). With
// P = acc * x_scale * w_scale exactly and Z = P + bias:
//   p = fl(fl(acc) * xw_scale), xw_scale = fl(x_scale * w_scale)   |p - P| <= 3.01 u |P|
//   z = fl(p + bias)                                              |z - Z| <= 3.01 u |P| + u |z|
// SiLU: silu'(z) lies in [-0.1, 1.1], so an error in z moves silu(z) by at most 1.1 times it.
// Its evaluation (CUDA Math API, "Intrinsic Functions"): __expf(x) errs by at most
// 2 + floor(1.173 |x|) ulp, a relative delta <= (2 + 1.2 |z|) 2^-23; s = fl(1 + e) adds u, and
// moves 1 + exp(-z) by delta e / (1 + e) <= delta min(e, 1) relatively; __fdividef errs by 2 ulp
// (4u) for denominators below 2^126. So y = __fdividef(z, s) is within
//   |y - silu(z)| <= |y| (delta min(e, 1) + 5.1 u)
// of silu(z). When s exceeds 2^126 (z below -87.3, e huge or infinite), __fdividef returns 0 while
// |silu(z)| < 87.3 e^-87.3 < 1e-36: an absolute 1e-30 covers it.
//   |y - Y| <= 1.1 (3.01 u |P| + u |z|) + |y| (delta min(e, 1) + 5.1 u) + 1e-30
// Residual: rt = fl(res_scale * res) errs by u |rt|, v = fl(y + rt) by u |v|. The reference's
// float(v_ref) is within u |V| of the exact V (its double arithmetic is 2^-29 times finer), so
//   |v - float(v_ref)| <= u (3.4 |P| + 1.1 |z| + 5.1 |y| + |rt| + 2.01 |v|)
//                         + |y| delta min(e, 1) + 1e-30
//                      <  2^-21 (|p| + |z| + |y| + |rt| + |v|) + |y| delta min(e, 1) + 1e-30
// Finally t = fl(v * r), r = fl(1 / y_scale) (__frcp_rn: u), against the reference's
// t_ref = fl(float(v_ref) / y_scale):
//   |t - t_ref| <= (|v - float(v_ref)| / y_scale) (1 + 2u) + 3.1 u |t|.
// The margin d below is that bound with 4x slack (2^-19, delta (2 + 1.2 |z|) 2^-21, 2^-20 for
// 3.1 u). If [t - d, t + d] holds no k + 1/2, t_ref rounds to the integer nearest t; beyond
// 126.5 + d both saturate. Otherwise the element is recomputed in double. Inlined into the kernel:
// all float, a few registers, no branch taken but rarely; r is the same for every element, so
// the compiler computes it once per kernel.
__device__ __forceinline__ std::int8_t int8_epilogue(int acc, float x_scale, float w_scale,
                                                     float xw_scale, float bias, int act,
                                                     bool has_res, float res_scale, int res,
                                                     float y_scale, unsigned long long* fallbacks) {
  const float r = __frcp_rn(y_scale);
  const float p = __fmul_rn(__int2float_rn(acc), xw_scale);
  const float z = __fadd_rn(p, bias);
  float y = z, e_err = 0.0f;  // e_err: |y| delta min(e, 1), the exp's share of the bound
  if (act == 1) {
    const float e = __expf(-z);
    y = __fdividef(z, __fadd_rn(1.0f, e));
    e_err = fabsf(y) * fminf(e, 1.0f) * __fmaf_rn(1.2f, fabsf(z), 2.0f) * 0x1p-21f;
  }
  const float rt = has_res ? __fmul_rn(res_scale, static_cast<float>(res)) : 0.0f;
  const float v = __fadd_rn(y, rt);
  const float t = __fmul_rn(v, r);
  const float mag = fabsf(p) + fabsf(z) + fabsf(y) + fabsf(rt) + fabsf(v);
  const float d = (mag * 0x1p-19f + e_err + 4e-30f) * r + fabsf(t) * 0x1p-20f;
  if (fabsf(t) > 126.5f + d) return t > 0.0f ? 127 : -127;  // both saturate
  const float k = rintf(t);
  if (0.5f - fabsf(t - k) > d) return static_cast<std::int8_t>(static_cast<int>(k));
  // Too close to a boundary to tell (or not finite: every comparison above was false).
  if (fallbacks != nullptr) atomicAdd(fallbacks, 1ull);
  const double exact =
      int8_epilogue_exact(acc, x_scale, w_scale, bias, act, has_res, res_scale, res);
  return requantize(__double2float_rn(exact), y_scale);
}

#endif  // LESSON13_EXERCISE_KERNEL

}  // namespace lesson13
