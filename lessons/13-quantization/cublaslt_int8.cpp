// Lesson 13: cuBLASLt's INT8 GEMM (cublaslt_int8.hpp). Host code.
#include "cublaslt_int8.hpp"

#include <cublasLt.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "common/cuda_check.hpp"

namespace lesson13 {

namespace {

void lt_check(cublasStatus_t status, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(std::string(call) + " failed: " + cublasLtGetStatusName(status) +
                             " (" + cublasLtGetStatusString(status) + ")");
  }
}
#define LESSON13_LT(call) lt_check((call), #call)

bool aligned4(const void* p) {
  return (reinterpret_cast<std::uintptr_t>(p) & 3u) == 0;
}

constexpr std::size_t kWorkspaceBytes = std::size_t{32} << 20;

}  // namespace

struct CublasLtInt8Gemm::Impl {
  cublasLtHandle_t lt = nullptr;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  cublasLtMatmulHeuristicResult_t result{};
  void* workspace = nullptr;
  ~Impl() {
    if (workspace) cudaFree(workspace);
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (op) cublasLtMatmulDescDestroy(op);
    if (lt) cublasLtDestroy(lt);
  }
};

CublasLtInt8Gemm::CublasLtInt8Gemm(int M, int N, int K, Output out, float alpha)
    : impl_(new Impl), M_(M), N_(N), K_(K), out_(out), alpha_(alpha) {
  if (M < 1 || N < 1 || K < 1 || N % 4 != 0 || K % 4 != 0) {
    throw std::invalid_argument(
        "CublasLtInt8Gemm: expected positive M, N, K with N and K "
        "multiples of 4 (cuBLASLt's INT8 kernels), got M " +
        std::to_string(M) + ", N " + std::to_string(N) + ", K " + std::to_string(K));
  }
  if (!std::isfinite(alpha)) {
    throw std::invalid_argument("CublasLtInt8Gemm: alpha must be finite");
  }
  Impl& d = *impl_;
  LESSON13_LT(cublasLtCreate(&d.lt));
  const bool int8_out = out == Output::int8;
  // int32 output: int32 scalars; int8 output: float scalars (the requantisation factor).
  LESSON13_LT(
      cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32I, int8_out ? CUDA_R_32F : CUDA_R_32I));
  const cublasOperation_t transa = CUBLAS_OP_T, transb = CUBLAS_OP_N;
  LESSON13_LT(
      cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof transa));
  LESSON13_LT(
      cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof transb));
  // Column-major views (see the header): cuBLASLt's A = our B as K x N, its B = our A as K x M,
  // its C = our C as N x M.
  LESSON13_LT(cublasLtMatrixLayoutCreate(&d.la, CUDA_R_8I, K, N, K));
  LESSON13_LT(cublasLtMatrixLayoutCreate(&d.lb, CUDA_R_8I, K, M, K));
  LESSON13_LT(cublasLtMatrixLayoutCreate(&d.lc, int8_out ? CUDA_R_8I : CUDA_R_32I, N, M, N));
  CUDA_CHECK(cudaMalloc(&d.workspace, kWorkspaceBytes));
  LESSON13_LT(cublasLtMatmulPreferenceCreate(&d.pref));
  const std::size_t ws = kWorkspaceBytes;
  LESSON13_LT(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                   &ws, sizeof ws));
  int found = 0;
  LESSON13_LT(cublasLtMatmulAlgoGetHeuristic(d.lt, d.op, d.la, d.lb, d.lc, d.lc, d.pref, 1,
                                             &d.result, &found));
  if (found == 0) {
    throw std::runtime_error("CublasLtInt8Gemm: cuBLASLt has no INT8 algorithm for M " +
                             std::to_string(M) + ", N " + std::to_string(N) + ", K " +
                             std::to_string(K) + " with " + (int8_out ? "int8" : "int32") +
                             " output on this GPU");
  }
  int algo_id = -1, tile = -1;
  std::size_t written = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&d.result.algo, CUBLASLT_ALGO_CONFIG_ID, &algo_id,
                                       sizeof algo_id, &written);
  cublasLtMatmulAlgoConfigGetAttribute(&d.result.algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile,
                                       sizeof tile, &written);
  algorithm_ = "algo " + std::to_string(algo_id) + ", tile id " + std::to_string(tile);
}

CublasLtInt8Gemm::~CublasLtInt8Gemm() = default;

void CublasLtInt8Gemm::run(const std::int8_t* A, const std::int8_t* B, void* C,
                           cudaStream_t stream) {
  const bool int8_out = out_ == Output::int8;
  if (A == nullptr || B == nullptr || C == nullptr) {
    throw std::invalid_argument("CublasLtInt8Gemm::run: A, B and C must not be null");
  }
  if (!aligned4(A) || !aligned4(B) || !aligned4(C)) {
    throw std::invalid_argument(
        "CublasLtInt8Gemm::run: A, B and C must be 4-byte aligned "
        "(cuBLASLt's INT8 kernels)");
  }
  Impl& d = *impl_;
  const std::int32_t one = 1, zero = 0;
  const float fzero = 0.0f;
  const void* alpha_arg = int8_out ? static_cast<const void*>(&alpha_) : &one;
  const void* beta_arg = int8_out ? static_cast<const void*>(&fzero) : &zero;
  LESSON13_LT(cublasLtMatmul(d.lt, d.op, alpha_arg, B, d.la, A, d.lb, beta_arg, C, d.lc, C, d.lc,
                             &d.result.algo, d.workspace, kWorkspaceBytes, stream));
}

void int8_gemm_reference(int M, int N, int K, const std::int8_t* A, const std::int8_t* B,
                         std::int64_t* C) {
  if (M < 0 || N < 0 || K < 0) {
    throw std::invalid_argument("int8_gemm_reference: negative size");
  }
  for (int m = 0; m < M; ++m) {
    for (int n = 0; n < N; ++n) {
      std::int64_t sum = 0;
      for (int k = 0; k < K; ++k) {
        sum += static_cast<std::int64_t>(A[static_cast<std::size_t>(m) * K + k]) *
               B[static_cast<std::size_t>(n) * K + k];
      }
      C[static_cast<std::size_t>(m) * N + n] = sum;
    }
  }
}

}  // namespace lesson13
