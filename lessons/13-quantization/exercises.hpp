// Lesson 13 exercises: the three pieces of arithmetic every INT8 engine rests on.
//
// Exercise 1 is the rounding every quantized tensor goes through (the lesson's own tensor
// functions, the INT8 convolution's reference and therefore the calibration tests all call it);
// exercise 2 is the search that turns an activation histogram into a clipping threshold (the
// entropy calibrator calls it); exercise 3 is the INT8 kernel's epilogue, which turns an int32
// accumulator into the next layer's INT8 input (int8_conv_gpu.cu runs it for every INT8 output).
// The solutions are in solutions.cuh; exercise.cu holds the stubs that the exercise build
// compiles instead. README.md has folded hints.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#ifdef __CUDACC__
#define LESSON13_HD __host__ __device__
#else
#define LESSON13_HD
#endif

namespace lesson13 {

// Exercise 1 (CPU; __host__ __device__). Symmetric INT8 quantisation of one value.
// Returns q = saturate(round_half_even(x / scale)) with saturation to [-127, 127]:
//   - the quotient is the IEEE float division x / scale (one rounding: what __fdiv_rn gives on
//     the GPU), then rounded to the nearest integer, ties to the even one (2.5 -> 2, 3.5 -> 4,
//     -2.5 -> -2), whatever the FPU's current rounding mode;
//   - quotients at or beyond +-127 give +-127 (+-infinity included); -128 is never returned
//     (quantize.hpp says why);
//   - a NaN quotient gives 0 (what the GPU's cvt.rni.sat.s8.f32 does with a NaN).
// Precondition (not checked): scale is a positive finite float.
// Tests: "exercise 1: ..." in test_exercises.cpp ([ex1]).
LESSON13_HD std::int8_t quantize_int8(float x, float scale);

// Exercise 2 (CPU). The entropy calibrator's threshold search (TensorRT's, as Migacz describes
// it in "8-bit Inference with TensorRT", GTC 2017).
// histogram[b] counts the values |x| that fell into bin b (bins of equal width from 0 up).
// For each candidate i = levels, levels + 1, ..., histogram.size():
//   P = histogram[0 .. i), with the count of everything beyond (bins i and up, the values the
//       threshold would clip) added to P[i - 1];
//   Q = histogram[0 .. i) (without those outliers) quantised to `levels` levels: level j covers
//       bins [floor(j * i / levels), floor((j + 1) * i / levels)); each level's total count is
//       spread evenly over the bins of the level where P is non-zero, and bins where P is zero
//       stay zero in Q;
//   both normalised to sum 1, and the candidate scored by KL(P || Q) = sum over bins with
//   P > 0 of P log(P / Q) (infinite if Q is zero where P is not).
// Returns the candidate i with the smallest divergence (the smallest such i on an exact tie):
// the threshold is then i bins wide. Throws std::invalid_argument if levels < 1, the histogram
// has fewer than `levels` bins, or every count is zero.
// Tests: "exercise 2: ..." in test_exercises.cpp ([ex2]).
int entropy_threshold_bins(const std::vector<std::uint64_t>& histogram, int levels);

#ifdef __CUDACC__
// Exercise 3 (GPU; device code). The INT8 convolution's epilogue for one output element.
// The kernel (int8_conv_gpu.cu) calls it once per element of an INT8 output, with:
//   acc        the exact int32 sum of x_q * w_q over the receptive field;
//   x_scale    the input tensor's scale, w_scale the output channel's weight scale, and
//   xw_scale   fl(x_scale * w_scale), the float product, computed once per channel (for a float
//              path: see below);
//   bias       the channel's bias (float, folded batch norm);
//   act        1: SiLU, 0: none;
//   has_res, res_scale, res: the residual's INT8 code and its tensor's scale (res is 0 and
//              res_scale unused when has_res is false);
//   y_scale    the output tensor's scale;
//   fallbacks  a device counter, or null (see below).
// Returns the element's INT8 code, which must EQUAL conv_int8_reference's (int8_conv.hpp; the
// one exception the tests allow, and count, is CUDA's double exp differing from the host's in
// the last bit, int8_conv_gpu.hpp explains it): with
// every operation in double, each rounded once, in this order and with no fused multiply-add,
//   v = double(acc) * (double(x_scale) * double(w_scale)) + double(bias)
//   v = v / (1 + exp(-v))                                  (if act == 1)
//   v = v + double(res_scale) * double(res)                (if has_res)
// then quantize_int8(float(v), y_scale): exercise 1's rule (round half to even, saturate to
// [-127, 127], NaN to 0). Inside the kernel, requantize(x, scale) is that rule (the kernel's
// inline copy of exercise 1); you may call it. nvcc contracts a * b + c into an FMA unless you
// stop it: the explicitly rounded intrinsics (__dmul_rn, __dadd_rn, __ddiv_rn) cannot be fused.
// Computing everything in double is correct and is all the tests require. A faster version may
// compute in float first and recompute in double only the elements whose rounding the float
// value cannot decide; it then adds 1 to *fallbacks (atomically, when fallbacks is not null)
// for each element recomputed so, and must send every exact tie (k + 1/2) there. The tests
// accept fallbacks on fewer than 1 % of the INT8 outputs (a looser bound is not a fast path).
// Tests: "exercise 3: ..." in test_int8_gpu.cpp ([gpu][ex3]), which compare whole convolutions
// with conv_int8_reference; and every other INT8-output test of conv_int8_gpu.
__device__ __forceinline__ std::int8_t int8_epilogue(int acc, float x_scale, float w_scale,
                                                     float xw_scale, float bias, int act,
                                                     bool has_res, float res_scale, int res,
                                                     float y_scale, unsigned long long* fallbacks);
#endif

}  // namespace lesson13
