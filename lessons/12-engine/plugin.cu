// Lesson 12: code of the application, not of the plan: the decode plugin (exercise 4) and the
// CPU convolution as an implicit GEMM (exercise 3's consumer). The exercise solutions are
// included at the end in the lesson build (solutions.cuh).
#include <cuda_fp16.h>

#include <stdexcept>
#include <string>

#include "exercises.hpp"

namespace lesson12 {

std::vector<float> conv_as_gemm(const ConvShape& s, int out_c, const std::vector<float>& x,
                                const std::vector<float>& w) {
  const long long rows = static_cast<long long>(s.batch) * s.out_h * s.out_w;
  const int depth = s.kernel * s.kernel * s.in_c;
  if (static_cast<long long>(x.size()) !=
          static_cast<long long>(s.batch) * s.in_h * s.in_w * s.in_c ||
      static_cast<long long>(w.size()) != static_cast<long long>(out_c) * depth) {
    throw std::invalid_argument(
        "conv_as_gemm: x must hold batch x in_h x in_w x in_c values and "
        "w out_c x kernel^2 x in_c");
  }
  std::vector<float> y(static_cast<std::size_t>(rows) * out_c);
  std::vector<double> a(static_cast<std::size_t>(depth));
  for (long long m = 0; m < rows; ++m) {
    // Row m of A, gathered through the address map (what the GPU kernel stages in shared memory).
    for (int k = 0; k < depth; ++k) {
      const GemmTap t = implicit_gemm_tap(s, static_cast<int>(m), k);
      a[k] = t.inside
                 ? x[((static_cast<std::size_t>(t.n) * s.in_h + t.y) * s.in_w + t.x) * s.in_c + t.c]
                 : 0.0;
    }
    for (int o = 0; o < out_c; ++o) {
      double acc = 0;
      for (int k = 0; k < depth; ++k) acc += a[k] * w[static_cast<std::size_t>(o) * depth + k];
      y[static_cast<std::size_t>(m) * out_c + o] = static_cast<float>(acc);
    }
  }
  return y;
}

}  // namespace lesson12

#ifndef LESSON_EXERCISE_BUILD
#include "solutions.cuh"
#endif
