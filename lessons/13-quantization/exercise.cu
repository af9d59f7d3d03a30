// Lesson 13 exercises. Replace each TODO with your code, then run `make check LESSON=13` until
// every test passes. The contract of each function is in exercises.hpp; README.md has hints.
// The exercise build compiles the lesson's code with these functions instead of the solutions,
// so its quantisation, INT8 convolution and calibration tests run your code too.
//
// This file is compiled twice: once as it is (exercises 1 and 2, host code), and once inside the
// INT8 kernel's file, int8_conv_gpu.cu, with LESSON13_EXERCISE_KERNEL defined (exercise 3, a
// device function the kernel calls: without relocatable device code, a kernel can only call
// device functions of its own translation unit). Keep each exercise in its section.
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "exercises.hpp"

namespace lesson13 {

#ifndef LESSON13_EXERCISE_KERNEL
// ================================================================ exercises 1 and 2 (host)

// Exercise 1: symmetric INT8 quantisation of one value, round half to even, saturating.
LESSON13_HD std::int8_t quantize_int8(float x, float scale) {
  (void)x, (void)scale;
  return 0;  // TODO(exercise 1)
}

// Exercise 2: the entropy calibrator's threshold, in bins.
int entropy_threshold_bins(const std::vector<std::uint64_t>& histogram, int levels) {
  (void)histogram, (void)levels;
  throw std::logic_error("TODO(exercise 2): entropy_threshold_bins");
}

#else
// ================================================================ exercise 3 (device)

// Exercise 3: the INT8 convolution's epilogue for one output element (dequantise, bias, SiLU,
// residual, requantise). Every INT8 output of conv_int8_gpu goes through it.
__device__ __forceinline__ std::int8_t int8_epilogue(int acc, float x_scale, float w_scale,
                                                     float xw_scale, float bias, int act,
                                                     bool has_res, float res_scale, int res,
                                                     float y_scale, unsigned long long* fallbacks) {
  (void)acc, (void)x_scale, (void)w_scale, (void)xw_scale, (void)bias, (void)act, (void)has_res,
      (void)res_scale, (void)res, (void)y_scale, (void)fallbacks;
  return 0;  // TODO(exercise 3)
}

#endif  // LESSON13_EXERCISE_KERNEL

}  // namespace lesson13
