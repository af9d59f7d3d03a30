// Lesson 07's speed grade: lesson07_grade, run by `make check LESSON=07` on a GPU after the
// sanitizers (cmake/check_exercise.sh, stage "grade"; common/grade_run.hpp says how it times and
// common/grade.cpp's table what each exercise must reach). Not a test: nothing here runs in ctest.
//
// Yours: gemm.cuh's exercise functions, from the exercise build (exercise.cu). The course's:
// gemm.cu compiled a second time, solutions included, with `lesson07` renamed `lesson07_course`
// (add_lesson's GRADE_NAMESPACE), declared below by hand; Activation is declared opaque (its
// underlying type is fixed), so a signature that drifts from gemm.cuh's is a link error.
//
// What the tests cannot see and the grade can: which tile of exercise 1 carries the padding
// (only W's, read down a column, needs it), and whether exercise 2's 4x4 block is strided or
// contiguous.
//
// The library's time, for reference: cuBLAS's cublasSgemm in true FP32 (the lesson's
// CublasHandle pins CUBLAS_DEFAULT_MATH: no TF32) on the same A and W, in the same NT layout
// (the call PyTorch's nn.Linear makes); its C is checked against the course's for exercises 1
// and 2. For exercise 3 it is the product alone, without the bias and the activation.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/cuda_check.hpp"
#include "common/grade_run.hpp"
#include "common/memory.hpp"
#include "gemm.cuh"

namespace lesson07_course {
enum class Activation : int;
void sgemm_nt_smem_tiling(int M, int N, int K, float alpha, const float* A, const float* W,
                          float beta, float* C, cudaStream_t stream);
void sgemm_nt_register_blocking(int M, int N, int K, float alpha, const float* A, const float* W,
                                float beta, float* C, cudaStream_t stream);
void linear_forward(int M, int N, int K, const float* X, const float* W, const float* bias,
                    Activation act, float* Y, cudaStream_t stream);
}  // namespace lesson07_course

namespace {

using course::DeviceBuffer;
using course::grade::Case;
using course::grade::Prepared;

// 2048^3: 17.2 GFLOP, a few ms for a 32x32 tiled kernel, ~1 ms for exercise 2's; 4096 blocks of
// 32x32 (1024 of 64x64), many waves on any GPU. Square and a multiple of every tile: the edges
// are the tests' business, the grade times the steady state.
constexpr int kM = 2048, kN = 2048, kK = 2048;

// What one exercise computes, given A (or X), W, the bias and C (or Y).
using Gemm = std::function<void(const float* A, const float* W, const float* bias, float* C,
                                cudaStream_t stream)>;

// Every element against the course's, within twice the rigorous FP32 bound of one GEMM
// (gemm_error_bound, with sum_k |a w| <= K since |a|, |w| < 1): both may round differently, a
// wrong tile is off by far more.
std::string compare(const DeviceBuffer<float>& yours, const DeviceBuffer<float>& course, bool bias,
                    cudaStream_t stream) {
  CUDA_CHECK(cudaStreamSynchronize(stream));
  const std::vector<float> y = course::to_host(yours), r = course::to_host(course);
  const double bound = 2.0 * lesson07::gemm_error_bound(kK, 1.0, static_cast<double>(kK), 0.0, 0.0,
                                                        bias ? 1.0 : 0.0);
  for (std::size_t i = 0; i < y.size(); ++i) {
    const double d = static_cast<double>(y[i]) - r[i];
    if (!(std::fabs(d) <= bound)) {
      char buf[200];
      std::snprintf(buf, sizeof buf, "C[%zu][%zu] = %.9g, the course's %.9g (bound %.3g)", i / kN,
                    i % kN, y[i], r[i], bound);
      return buf;
    }
  }
  return "";
}

// The library's C = A * W^T, row-major, with cublasSgemm (column-major): the row-major M x N C
// is the column-major N x M C^T = W * A^T; W's row-major N x K array is the column-major K x N
// W^T, so its operand is transposed (CUBLAS_OP_T, ld K); A's M x K array is the column-major
// K x M A^T, taken as it is (ld K).
void cublas_sgemm_nt(const lesson07::CublasHandle& handle, const float* A, const float* W, float* C,
                     cudaStream_t stream) {
  const float alpha = 1.0f, beta = 0.0f;
  cublasStatus_t status = cublasSetStream(handle.get(), stream);
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw lesson07::CublasError(status, "cublasSetStream", __FILE__, __LINE__);
  }
  status = cublasSgemm(handle.get(), CUBLAS_OP_T, CUBLAS_OP_N, kN, kM, kK, &alpha, W, kK, A, kK,
                       &beta, C, kN);
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw lesson07::CublasError(status, "cublasSgemm", __FILE__, __LINE__);
  }
}

// `library_same`: the library computes what the exercise does (no bias, no activation), so its
// C is compared with the course's.
Case gemm_case(const char* exercise, std::string problem, bool bias, bool library_same, Gemm yours,
               Gemm course) {
  Case c;
  c.exercise = exercise;
  c.problem = std::move(problem);
  c.work = course::grade::gemm_work(kM, kN, kK, bias);
  c.library = library_same ? "cuBLAS cublasSgemm (FP32)"
                           : "cuBLAS cublasSgemm (FP32), the product alone (no bias, no "
                             "activation)";
  c.prepare = [yours, course, bias, library_same](cudaStream_t stream) {
    struct Buffers {
      DeviceBuffer<float> a, w, b, mine, theirs, lib;
      std::unique_ptr<lesson07::CublasHandle> cublas;  // made at the library's untimed call
    };
    const std::size_t mk = std::size_t{kM} * kK, nk = std::size_t{kN} * kK,
                      mn = std::size_t{kM} * kN;
    auto b = std::make_shared<Buffers>(Buffers{
        DeviceBuffer<float>(mk), DeviceBuffer<float>(nk), DeviceBuffer<float>(kN),
        DeviceBuffer<float>(mn), DeviceBuffer<float>(mn), DeviceBuffer<float>(mn), nullptr});
    lesson07::fill_uniform(b->a.data(), mk, 70701, -1.0f, 1.0f, stream);
    lesson07::fill_uniform(b->w.data(), nk, 70702, -1.0f, 1.0f, stream);
    lesson07::fill_uniform(b->b.data(), kN, 70703, -1.0f, 1.0f, stream);
    Prepared p;
    p.learner = [b, yours, stream] {
      yours(b->a.data(), b->w.data(), b->b.data(), b->mine.data(), stream);
    };
    p.course = [b, course, stream] {
      course(b->a.data(), b->w.data(), b->b.data(), b->theirs.data(), stream);
    };
    p.compare = [b, bias, stream] { return compare(b->mine, b->theirs, bias, stream); };
    p.library = [b, stream] {
      if (!b->cublas) b->cublas = std::make_unique<lesson07::CublasHandle>();
      cublas_sgemm_nt(*b->cublas, b->a.data(), b->w.data(), b->lib.data(), stream);
    };
    if (library_same) {
      p.library_compare = [b, stream] { return compare(b->lib, b->theirs, false, stream); };
    }
    p.keep = b;
    return p;
  };
  return c;
}

const std::string kShape =
    std::to_string(kM) + " x " + std::to_string(kN) + " x " + std::to_string(kK);

}  // namespace

int main(int argc, char** argv) {
  const std::vector<Case> cases = {
      gemm_case(
          "ex1", "sgemm_nt_smem_tiling, C = A * W^T at " + kShape + " (alpha 1, beta 0)", false,
          true,
          [](const float* A, const float* W, const float*, float* C, cudaStream_t s) {
            lesson07::sgemm_nt_smem_tiling(kM, kN, kK, 1.0f, A, W, 0.0f, C, s);
          },
          [](const float* A, const float* W, const float*, float* C, cudaStream_t s) {
            lesson07_course::sgemm_nt_smem_tiling(kM, kN, kK, 1.0f, A, W, 0.0f, C, s);
          }),
      gemm_case(
          "ex2", "sgemm_nt_register_blocking, C = A * W^T at " + kShape + " (alpha 1, beta 0)",
          false, true,
          [](const float* A, const float* W, const float*, float* C, cudaStream_t s) {
            lesson07::sgemm_nt_register_blocking(kM, kN, kK, 1.0f, A, W, 0.0f, C, s);
          },
          [](const float* A, const float* W, const float*, float* C, cudaStream_t s) {
            lesson07_course::sgemm_nt_register_blocking(kM, kN, kK, 1.0f, A, W, 0.0f, C, s);
          }),
      gemm_case(
          "ex3", "linear_forward, Y = relu(X * W^T + bias) at " + kShape, true, false,
          [](const float* X, const float* W, const float* bias, float* Y, cudaStream_t s) {
            lesson07::linear_forward(kM, kN, kK, X, W, bias, lesson07::Activation::relu, Y, s);
          },
          [](const float* X, const float* W, const float* bias, float* Y, cudaStream_t s) {
            lesson07_course::linear_forward(kM, kN, kK, X, W, bias,
                                            static_cast<lesson07_course::Activation>(
                                                static_cast<int>(lesson07::Activation::relu)),
                                            Y, s);
          }),
  };
  return course::grade::grade_main(argc, argv, "07", cases,
                                   [](int device) { return lesson07::fp32_peak(device).tflops; });
}
