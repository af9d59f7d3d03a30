// Lesson 13 tests: cuBLASLt's INT8 GEMM, the baseline of the speed table (cublaslt_int8.hpp).
//
// Oracle: an integer GEMM on the CPU in 64-bit sums, written in the test (the library's
// int8_gemm_reference is checked against hand values first). int32 output must equal it
// exactly. int8 output (C = int8(alpha * sum)): cuBLASLt does not document the conversion, so
// the test states what it measures: every element within one step of round-half-even of the
// float product clamped to [-128, 127], and all but a few equal to it.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "common/cuda_check.hpp"
#include "common/memory.hpp"
#include "common/testing.hpp"
#include "cublaslt_int8.hpp"

using namespace lesson13;
using course::testing::Contains;

namespace {

struct GemmShape {
  const char* what;
  int M, N, K;
};

// The GEMMs of YOLOv8n's 1x1 convolutions (M = pixels at a small input), plus odd M.
const std::vector<GemmShape> kGemms = {
    {"model.2.cv1 at 80x80: 6400 x 32 x 32", 6400, 32, 32},
    {"model.4.cv2 at 40x40: 1600 x 64 x 128", 1600, 64, 128},
    {"model.9.cv2 at 20x20: 400 x 256 x 512", 400, 256, 512},
    {"odd M: 37 x 64 x 96", 37, 64, 96},
    {"small: 5 x 4 x 16", 5, 4, 16},
};

std::vector<std::int8_t> random_int8(std::size_t n, std::mt19937& rng) {
  std::uniform_int_distribution<int> any(-128, 127);
  std::vector<std::int8_t> v(n);
  for (std::int8_t& x : v) x = static_cast<std::int8_t>(any(rng));
  return v;
}

std::vector<long long> gemm_oracle(const GemmShape& g, const std::vector<std::int8_t>& A,
                                   const std::vector<std::int8_t>& B) {
  std::vector<long long> C(static_cast<std::size_t>(g.M) * g.N);
  for (int m = 0; m < g.M; ++m)
    for (int n = 0; n < g.N; ++n) {
      long long s = 0;
      for (int k = 0; k < g.K; ++k) s += A[static_cast<std::size_t>(m) * g.K + k] * B[n * g.K + k];
      C[static_cast<std::size_t>(m) * g.N + n] = s;
    }
  return C;
}

}  // namespace

TEST_CASE("int8_gemm_reference: hand values", "[cublaslt]") {
  // A = [[1, -2], [3, 4], [-128, 127]], B = [[5, 6], [-7, 8]] (rows of K): C = A B^T.
  const std::vector<std::int8_t> A = {1, -2, 3, 4, -128, 127}, B = {5, 6, -7, 8};
  std::vector<std::int64_t> C(6);
  int8_gemm_reference(3, 2, 2, A.data(), B.data(), C.data());
  CHECK(C == std::vector<std::int64_t>{5 - 12, -7 - 16, 15 + 24, -21 + 32, -640 + 762, 896 + 1016});
  CHECK_THROWS_AS(int8_gemm_reference(-1, 2, 2, A.data(), B.data(), C.data()),
                  std::invalid_argument);
}

TEST_CASE("CublasLtInt8Gemm: shapes cuBLASLt's INT8 kernels cannot take are refused first",
          "[cublaslt]") {
  using Out = CublasLtInt8Gemm::Output;
  CHECK_THROWS_WITH(CublasLtInt8Gemm(10, 6, 16, Out::int32), Contains("multiples of 4"));
  CHECK_THROWS_WITH(CublasLtInt8Gemm(10, 8, 18, Out::int8), Contains("multiples of 4"));
  CHECK_THROWS_AS(CublasLtInt8Gemm(0, 8, 16, Out::int32), std::invalid_argument);
  CHECK_THROWS_WITH(CublasLtInt8Gemm(8, 8, 16, Out::int8, std::nanf("")), Contains("alpha"));
}

TEST_CASE("cuBLASLt INT8 GEMM with int32 output equals the integer GEMM", "[gpu][cublaslt]") {
  std::mt19937 rng(1310);
  for (const GemmShape& g : kGemms) {
    INFO(g.what);
    const auto A = random_int8(static_cast<std::size_t>(g.M) * g.K, rng);
    const auto B = random_int8(static_cast<std::size_t>(g.N) * g.K, rng);
    course::DeviceBuffer<std::int8_t> dA(A.size()), dB(B.size());
    course::DeviceBuffer<std::int32_t> dC(static_cast<std::size_t>(g.M) * g.N);
    CUDA_CHECK(cudaMemcpy(dA.data(), A.data(), A.size(), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dB.data(), B.data(), B.size(), cudaMemcpyHostToDevice));
    CublasLtInt8Gemm gemm(g.M, g.N, g.K, CublasLtInt8Gemm::Output::int32);
    INFO("cuBLASLt chose " << gemm.algorithm());
    gemm.run(dA.data(), dB.data(), dC.data(), nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<std::int32_t> C(dC.size());
    CUDA_CHECK(cudaMemcpy(C.data(), dC.data(), dC.bytes(), cudaMemcpyDeviceToHost));
    const std::vector<long long> want = gemm_oracle(g, A, B);
    std::vector<std::int64_t> lib(want.size());
    int8_gemm_reference(g.M, g.N, g.K, A.data(), B.data(), lib.data());
    for (std::size_t i = 0; i < C.size(); ++i) {
      INFO("element " << i);
      REQUIRE(lib[i] == want[i]);
      REQUIRE(static_cast<long long>(C[i]) == want[i]);
    }
    // Misaligned operands are refused before cuBLASLt sees them.
    CHECK_THROWS_WITH(gemm.run(dA.data() + 1, dB.data(), dC.data(), nullptr),
                      Contains("4-byte aligned"));
    CHECK_THROWS_AS(gemm.run(dA.data(), nullptr, dC.data(), nullptr), std::invalid_argument);
  }
}

TEST_CASE("cuBLASLt INT8 GEMM with int8 output: what it rounds to", "[gpu][cublaslt]") {
  std::mt19937 rng(1311);
  long long exact = 0, total = 0, saturated = 0;
  for (const GemmShape& g : kGemms) {
    INFO(g.what);
    const auto A = random_int8(static_cast<std::size_t>(g.M) * g.K, rng);
    const auto B = random_int8(static_cast<std::size_t>(g.N) * g.K, rng);
    // alpha maps about 2.5 standard deviations of the sum to 127, so a few outputs saturate
    // (a sum of K products of uniform int8 values has a standard deviation of sqrt(K) 74^2).
    const float alpha = static_cast<float>(127.0 / (2.5 * std::sqrt(g.K * 1.0) * 74.0 * 74.0));
    course::DeviceBuffer<std::int8_t> dA(A.size()), dB(B.size());
    course::DeviceBuffer<std::int8_t> dC(static_cast<std::size_t>(g.M) * g.N);
    CUDA_CHECK(cudaMemcpy(dA.data(), A.data(), A.size(), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dB.data(), B.data(), B.size(), cudaMemcpyHostToDevice));
    CublasLtInt8Gemm gemm(g.M, g.N, g.K, CublasLtInt8Gemm::Output::int8, alpha);
    INFO("cuBLASLt chose " << gemm.algorithm());
    gemm.run(dA.data(), dB.data(), dC.data(), nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<std::int8_t> C(dC.size());
    CUDA_CHECK(cudaMemcpy(C.data(), dC.data(), dC.bytes(), cudaMemcpyDeviceToHost));
    const std::vector<long long> sums = gemm_oracle(g, A, B);
    for (std::size_t i = 0; i < C.size(); ++i) {
      const float v = alpha * static_cast<float>(sums[i]);
      const double want = std::min(127.0, std::max(-128.0, static_cast<double>(std::nearbyint(v))));
      INFO("element " << i << ": sum " << sums[i] << " x alpha " << alpha << " = " << v
                      << ", cuBLASLt " << int(C[i]));
      REQUIRE(std::fabs(C[i] - want) <= 1);
      exact += C[i] == want;
      saturated += std::fabs(v) > 127.5f;
      ++total;
    }
  }
  INFO(exact << " of " << total << " equal round-half-even clamped to [-128, 127]; " << saturated
             << " saturate");
  CHECK(saturated > 0);
  CHECK(exact * 1000 >= total * 999);
}
