// Lesson 13: cuBLASLt's INT8 matrix multiply, the library baseline of the INT8 convolution.
//
// A 1x1 convolution (stride 1, no padding) over NHWC activations is a plain GEMM:
//   C[m][n] = sum_k A[m][k] * B[n][k]      m < M = batch * h * w pixels, n < N = out_c,
//                                          k < K = in_c
// with A the activations (M rows of K channels, contiguous: NHWC), B the weights (N rows of K:
// KRSC with kernel 1) and C the NHWC output (M rows of N). A 3x3 convolution is the same GEMM
// over K = 9 in_c once its input has been gathered (im2col): timing the GEMM of that shape on
// contiguous operands gives the library's time without the gather, a bound the implicit GEMM
// has to approach while doing the gather itself.
//
// cuBLASLt works in column-major terms. Row-major C (M x N) is column-major C^T (N x M), and
// C^T = B A^T: cuBLASLt's "A" is our B read as a K x N column-major matrix and transposed, its
// "B" our A read as K x M column-major, not transposed. That is the "TN" form the INT8
// tensor-core kernels (IMMA) require with the ordinary column-major ordering; they also need
// every matrix 4-byte aligned, its leading dimension a multiple of 4, and cuBLAS's m and k
// (our N and K) multiples of 4 (cuBLAS documentation, cublasLtMatmul, the IMMA requirements).
// Types (the same section's table): CUDA_R_8I inputs with CUBLAS_COMPUTE_32I, and either
//   Output::int32  C in CUDA_R_32I, alpha = 1 and beta = 0 as int32 scalars: the exact sums;
//   Output::int8   C in CUDA_R_8I, float scalars: C = int8(alpha * sum), a requantisation with
//                  one factor for the whole output (a per-channel factor would need cuBLASLt's
//                  device alpha vector, and a bias and SiLU its epilogues or a second kernel:
//                  what the course's kernel fuses). cuBLASLt does not document that
//                  conversion's rounding or its clamp; the tests measure them.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace lesson13 {

class CublasLtInt8Gemm {
 public:
  enum class Output { int32, int8 };

  // Creates a cuBLASLt handle, the descriptors of one shape and a workspace (32 MiB), and asks
  // cuBLASLt's heuristic for its best algorithm. alpha: the factor of Output::int8 (ignored for
  // int32). Throws std::invalid_argument if M, N or K is not positive, N or K is not a multiple
  // of 4, or alpha is not finite, std::runtime_error naming the cuBLASLt call and its status if
  // one fails, or saying so if the heuristic offers no algorithm on this GPU; course::CudaError
  // if the workspace cannot be allocated.
  CublasLtInt8Gemm(int M, int N, int K, Output out, float alpha = 1.0f);
  ~CublasLtInt8Gemm();
  CublasLtInt8Gemm(const CublasLtInt8Gemm&) = delete;
  CublasLtInt8Gemm& operator=(const CublasLtInt8Gemm&) = delete;

  // Enqueues C = A B^T (int32) or int8(alpha A B^T) on `stream` (device pointers, 4-byte
  // aligned; A [M][K], B [N][K], C [M][N] of std::int32_t or std::int8_t as Output says).
  // Throws std::invalid_argument for null or misaligned pointers, std::runtime_error if
  // cublasLtMatmul fails.
  void run(const std::int8_t* A, const std::int8_t* B, void* C, cudaStream_t stream);

  int M() const { return M_; }
  int N() const { return N_; }
  int K() const { return K_; }
  Output output() const { return out_; }
  // cuBLASLt's name for what it chose (the algorithm id and tile), for the speed table.
  const std::string& algorithm() const { return algorithm_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int M_, N_, K_;
  Output out_;
  float alpha_;
  std::string algorithm_;
};

// The oracle of the tests: C[m][n] = sum_k A[m][k] * B[n][k] in 64-bit integers, on the CPU
// (host pointers, row-major as above). Throws std::invalid_argument for a negative size.
void int8_gemm_reference(int M, int N, int K, const std::int8_t* A, const std::int8_t* B,
                         std::int64_t* C);

}  // namespace lesson13
