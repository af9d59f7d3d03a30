// Lesson 07 tests. Oracles: an FP64 CPU reference on small shapes (every element, with the
// rigorous FP32 error bound of gemm_error_bound), and cuBLAS on large ones (every element, with
// twice that bound, since both sides round; plus FP64 on sampled elements). Sizes are chosen
// off the tile grid (odd, prime, smaller than one tile, K = 0) so every edge guard runs.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/cuda_check.hpp"
#include "common/cupti_trace.hpp"
#include "common/memory.hpp"
#include "common/testing.hpp"
#include "gemm.cuh"

using course::testing::Contains;
using lesson07::Activation;

namespace {

struct Shape {
  int M, N, K;
};
std::string text(const Shape& s) {
  return std::to_string(s.M) + "x" + std::to_string(s.N) + "x" + std::to_string(s.K);
}

std::vector<float> random_vector(std::size_t n, std::uint32_t seed, float lo = -1.0f,
                                 float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

const float kNaN = std::numeric_limits<float>::quiet_NaN();

// A GEMM under test, called with device pointers: C = alpha * A * B + beta * C.
using Gemm = std::function<void(int M, int N, int K, float alpha, const float* A, const float* B,
                                float beta, float* C)>;
struct Candidate {
  std::string name;
  Gemm run;
};

// Every FP32 path of the lesson: v1..v8, v8's other tile configuration, the fused-epilogue
// launcher with no bias and no activation, and cuBLAS when a handle is given.
std::vector<Candidate> fp32_candidates(const lesson07::CublasHandle* cublas = nullptr) {
  std::vector<Candidate> c;
  for (const auto& v : lesson07::sgemm_versions()) {
    c.push_back(
        {v.name, [fn = v.run](int M, int N, int K, float al, const float* A, const float* B,
                              float be, float* C) { fn(M, N, K, al, A, B, be, C, nullptr); }});
  }
  c.push_back(
      {"v8_bk16",
       [](int M, int N, int K, float al, const float* A, const float* B, float be, float* C) {
         lesson07::sgemm_v8_tile_config(lesson07::TileConfig::bk16, M, N, K, al, A, B, be, C);
       }});
  c.push_back({"sgemm_bias_act(no bias)", [](int M, int N, int K, float al, const float* A,
                                             const float* B, float be, float* C) {
                 lesson07::sgemm_bias_act(M, N, K, al, A, B, be, nullptr, Activation::none, C);
               }});
  if (cublas != nullptr) {
    c.push_back({"cublas_sgemm", [cublas](int M, int N, int K, float al, const float* A,
                                          const float* B, float be, float* C) {
                   lesson07::cublas_sgemm(*cublas, M, N, K, al, A, B, be, C);
                 }});
  }
  return c;
}

// Host data in, device run, host data out. `offset` shifts every device pointer by that many
// floats (offset 1: 4-byte aligned only, which must force the scalar fallback).
std::vector<float> run_gemm(const Gemm& gemm, const Shape& s, float alpha,
                            const std::vector<float>& A, const std::vector<float>& B, float beta,
                            const std::vector<float>& C, int offset = 0) {
  course::DeviceBuffer<float> dA(A.size() + offset), dB(B.size() + offset), dC(C.size() + offset);
  const auto put = [&](course::DeviceBuffer<float>& d, const std::vector<float>& h) {
    if (!h.empty()) {
      CUDA_CHECK(cudaMemcpy(d.data() + offset, h.data(), h.size() * sizeof(float),
                            cudaMemcpyHostToDevice));
    }
  };
  put(dA, A);
  put(dB, B);
  put(dC, C);
  // An empty operand is passed as a null pointer, as a caller with K = 0 would.
  gemm(s.M, s.N, s.K, alpha, A.empty() ? nullptr : dA.data() + offset,
       B.empty() ? nullptr : dB.data() + offset, beta, dC.data() + offset);
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> out(C.size());
  if (!out.empty()) {
    CUDA_CHECK(cudaMemcpy(out.data(), dC.data() + offset, out.size() * sizeof(float),
                          cudaMemcpyDeviceToHost));
  }
  return out;
}

// Every element of `got` against the FP64 reference, within the rigorous bound (times the
// activation's Lipschitz constant, for epilogues). NaN fails (the comparison is written so).
void check_against_reference(const std::string& what, const std::vector<float>& got, const Shape& s,
                             float alpha, const std::vector<float>& A, const std::vector<float>& B,
                             float beta, const std::vector<float>& C, const float* bias = nullptr,
                             Activation act = Activation::none, double input_rounding = 0.0) {
  const std::size_t count = static_cast<std::size_t>(s.M) * s.N;
  std::vector<double> ref(count), abs_sum(count);
  lesson07::sgemm_reference(s.M, s.N, s.K, alpha, A.data(), B.data(), beta, C.data(), bias, act,
                            ref.data(), abs_sum.data());
  REQUIRE(got.size() == count);
  std::size_t bad = 0, worst = 0;
  double worst_ratio = 0.0;
  for (std::size_t i = 0; i < count; ++i) {
    const int n = static_cast<int>(i % s.N);
    double tol = lesson07::gemm_error_bound(s.K, alpha, abs_sum[i], beta, C[i],
                                            bias ? bias[n] : 0.0, input_rounding);
    tol = lesson07::activation_error_bound(act, tol, ref[i]);
    const double err = std::fabs(got[i] - ref[i]);
    if (!(err <= tol)) ++bad;
    const double ratio = std::isnan(err) ? INFINITY : err / tol;
    if (ratio > worst_ratio) worst_ratio = ratio, worst = i;
  }
  INFO(what << " on " << text(s) << " alpha=" << alpha << " beta=" << beta
            << " act=" << lesson07::to_string(act) << ": " << bad << " of " << count
            << " elements outside the bound; worst at (" << worst / (s.N ? s.N : 1) << ", "
            << worst % (s.N ? s.N : 1) << "): got " << (count ? got[worst] : 0.0f) << ", FP64 "
            << (count ? ref[worst] : 0.0) << ", error/bound " << worst_ratio);
  CHECK(bad == 0);
}

// W = B^T (N x K) for the exercises' nn.Linear layout.
std::vector<float> transpose(const std::vector<float>& B, int K, int N) {
  std::vector<float> W(B.size());
  for (int k = 0; k < K; ++k) {
    for (int n = 0; n < N; ++n)
      W[static_cast<std::size_t>(n) * K + k] = B[static_cast<std::size_t>(k) * N + n];
  }
  return W;
}

const std::vector<Shape> kSmallShapes = {{1, 1, 1},       {17, 33, 65},  {33, 17, 65},
                                         {100, 100, 100}, {64, 200, 37}, {129, 67, 131},
                                         {3, 5, 0},       {2, 300, 1},   {257, 3, 40}};

}  // namespace

// ================================================================ CPU tests

TEST_CASE("Activations and the epilogue of one element", "[math]") {
  using lesson07::epilogue_value;
  CHECK(lesson07::relu(-2.0f) == 0.0f);
  CHECK(lesson07::relu(3.0f) == 3.0f);
  CHECK(lesson07::silu(0.0f) == 0.0f);
  CHECK(lesson07::silu(1.0f) ==
        course::testing::Approx(1.0 / (1.0 + std::exp(-1.0))).epsilon(1e-6));
  CHECK(lesson07::silu(-2.0f) ==
        course::testing::Approx(-2.0 / (1.0 + std::exp(2.0))).epsilon(1e-6));
  CHECK(lesson07::silu(30.0f) == course::testing::Approx(30.0).epsilon(1e-6));
  CHECK(lesson07::silu(-200.0f) == 0.0f);  // e^200 overflows to inf: x / inf = -0, not NaN
  CHECK(lesson07::ceil_div(0, 32) == 0);
  CHECK(lesson07::ceil_div(33, 32) == 2);
  // act(alpha * acc + beta * c + bias)
  CHECK(epilogue_value(2.0f, 10.0f, 1.0f, 3.0f, 0.5f, Activation::none) == 12.0f);
  CHECK(epilogue_value(2.0f, 10.0f, -20.0f, 3.0f, 0.5f, Activation::relu) == 0.0f);
  // beta == 0: C is not read, so NaN (or garbage) in C does not reach the result
  CHECK(epilogue_value(2.0f, kNaN, 0.0f, 3.0f, 0.0f, Activation::none) == 6.0f);
  CHECK(std::isnan(epilogue_value(2.0f, kNaN, 0.0f, 3.0f, 1.0f, Activation::none)));
}

TEST_CASE("The FP32 peak: lanes per SM by compute capability, times SMs, 2 FLOP and clock",
          "[math]") {
  CHECK(lesson07::fp32_lanes_per_sm(7, 5) == 64);
  CHECK(lesson07::fp32_lanes_per_sm(8, 0) == 64);
  CHECK(lesson07::fp32_lanes_per_sm(8, 6) == 128);
  CHECK(lesson07::fp32_lanes_per_sm(8, 9) == 128);
  CHECK(lesson07::fp32_lanes_per_sm(9, 0) == 128);
  CHECK_THROWS_AS(lesson07::fp32_lanes_per_sm(6, 1), std::invalid_argument);
  // H200 SXM: 132 SMs x 128 lanes x 2 FLOP x 1.98 GHz
  CHECK(lesson07::fp32_peak_tflops(132, 128, 1980000) ==
        course::testing::Approx(66.908).epsilon(1e-4));
  CHECK(lesson07::gemm_flops(4096, 4096, 4096) ==
        course::testing::Approx(137.4389534720e9).epsilon(1e-12));
}

TEST_CASE("The CPU reference: a hand-checked row-major product with alpha, beta, bias, ReLU",
          "[reference]") {
  // A = [1 2 3; 4 5 6], B = [7 8; 9 10; 11 12]: A*B = [58 64; 139 154]
  const std::vector<float> A = {1, 2, 3, 4, 5, 6}, B = {7, 8, 9, 10, 11, 12};
  const std::vector<float> C = {1, -1, 2, -2}, bias = {-300, 0};
  std::vector<double> out(4), abs_sum(4);
  lesson07::sgemm_reference(2, 2, 3, 2.0f, A.data(), B.data(), 0.5f, C.data(), nullptr,
                            Activation::none, out.data(), abs_sum.data());
  CHECK(out == std::vector<double>{116.5, 127.5, 279.0, 307.0});
  CHECK(abs_sum == std::vector<double>{58, 64, 139, 154});
  lesson07::sgemm_reference(2, 2, 3, 2.0f, A.data(), B.data(), 0.5f, C.data(), bias.data(),
                            Activation::relu, out.data(), nullptr);
  CHECK(out == std::vector<double>{0.0, 127.5, 0.0, 307.0});
  // beta == 0 ignores C, even NaN
  const std::vector<float> nan_c(4, kNaN);
  lesson07::sgemm_reference(2, 2, 3, 1.0f, A.data(), B.data(), 0.0f, nan_c.data(), nullptr,
                            Activation::none, out.data(), nullptr);
  CHECK(out == std::vector<double>{58, 64, 139, 154});
  CHECK(lesson07::reference_dot(2, 3, A.data(), B.data(), 1, 0, nullptr) == 139.0);
}

TEST_CASE("The error bound grows with K and the size of the terms; beta = 0 ignores C",
          "[reference]") {
  const double u = lesson07::kFp32UnitRoundoff;
  CHECK(lesson07::gemm_error_bound(1000, 1.0, 10.0, 0.0, kNaN, 0.0) ==
        course::testing::Approx(1003 * u * 10.0).epsilon(1e-9));
  CHECK(lesson07::gemm_error_bound(4000, 1.0, 10.0, 0.0, 0.0, 0.0) >
        lesson07::gemm_error_bound(1000, 1.0, 10.0, 0.0, 0.0, 0.0));
  CHECK(lesson07::gemm_error_bound(10, -2.0, 1.0, 0.5, -4.0, 1.0) ==
        course::testing::Approx(13 * u * (2.0 + 2.0 + 1.0)).epsilon(1e-9));
  // TF32 inputs add 2^-9 of the product sum
  CHECK(lesson07::gemm_error_bound(10, 1.0, 1.0, 0.0, 0.0, 0.0, lesson07::kTf32InputRounding) >
        lesson07::kTf32InputRounding);
}

TEST_CASE("Versions are numbered 1..8 in teaching order and found by number", "[args]") {
  const auto& versions = lesson07::sgemm_versions();
  REQUIRE(versions.size() == 8);
  for (std::size_t i = 0; i < versions.size(); ++i) {
    CHECK(versions[i].number == static_cast<int>(i) + 1);
    CHECK(std::string(versions[i].name).rfind("v" + std::to_string(i + 1) + "_", 0) == 0);
    CHECK(&lesson07::sgemm_version(versions[i].number) == &versions[i]);
  }
  CHECK(lesson07::kBestVersion == 8);
  CHECK_THROWS_AS(lesson07::sgemm_version(0), std::invalid_argument);
  CHECK_THROWS_WITH(lesson07::sgemm_version(9), Contains("unknown SGEMM version 9"));
}

TEST_CASE("An Activation outside the enum is rejected before any GPU work", "[args]") {
  float dummy[4] = {};
  const float* p = dummy;
  for (const int bad : {-1, 3, 42}) {
    const auto act = static_cast<Activation>(bad);
    CHECK_THROWS_AS(lesson07::bias_activation(2, 2, p, act, dummy), std::invalid_argument);
    CHECK_THROWS_AS(lesson07::bias_activation(0, 2, p, act, dummy), std::invalid_argument);
    CHECK_THROWS_AS(lesson07::sgemm_bias_act(2, 2, 2, 1, p, p, 0, p, act, dummy),
                    std::invalid_argument);
    CHECK_THROWS_AS(lesson07::sgemm_bias_act(0, 2, 2, 1, p, p, 0, p, act, dummy),
                    std::invalid_argument);
  }
}

TEST_CASE("Bad shapes and null pointers are rejected before any GPU work", "[args]") {
  // Dummy host pointers: the checks must throw before anything is launched or dereferenced.
  float dummy[4] = {};
  const float* p = dummy;
  for (const auto& c : fp32_candidates()) {
    INFO(c.name);
    CHECK_THROWS_WITH(c.run(-1, 2, 2, 1, p, p, 0, dummy), Contains("M, N and K must be >= 0"));
    CHECK_THROWS_AS(c.run(2, -1, 2, 1, p, p, 0, dummy), std::invalid_argument);
    CHECK_THROWS_AS(c.run(2, 2, -1, 1, p, p, 0, dummy), std::invalid_argument);
    CHECK_THROWS_WITH(c.run(2, 2, 2, 1, p, p, 0, nullptr), Contains("C must not be null"));
    CHECK_THROWS_WITH(c.run(2, 2, 2, 1, nullptr, p, 0, dummy),
                      Contains("A and B must not be null"));
    CHECK_THROWS_AS(c.run(2, 2, 2, 1, p, nullptr, 0, dummy), std::invalid_argument);
    CHECK_THROWS_WITH(c.run(50000, 50000, 1, 1, p, p, 0, dummy), Contains("2^31 - 1"));
  }
  CHECK_THROWS_AS(lesson07::sgemm_wmma_tf32(-1, 2, 2, 1, p, p, 0, dummy), std::invalid_argument);
  CHECK_THROWS_AS(lesson07::bias_activation(-1, 2, p, Activation::relu, dummy),
                  std::invalid_argument);
  CHECK_THROWS_AS(lesson07::bias_activation(2, 2, p, Activation::relu, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(lesson07::fill_uniform(nullptr, 10, 1, 0.0f, 1.0f), std::invalid_argument);
  CHECK_THROWS_AS(lesson07::sgemm_reference(-1, 1, 1, 1, p, p, 0, p, nullptr, Activation::none,
                                            nullptr, nullptr),
                  std::invalid_argument);
  // A matrix too tall for gridDim.y (65535 blocks of 32 rows) is refused, not truncated.
  CHECK_THROWS_WITH(lesson07::sgemm_v3_smem_tiling(3000000, 1, 1, 1, p, p, 0, dummy),
                    Contains("gridDim.y"));
}

TEST_CASE("A matrix as tall as INT_MAX is refused before any GPU work, not wrapped", "[args]") {
  // ceil(a / b) in exact (64-bit) arithmetic is the oracle.
  const auto exact = [](long long a, long long b) { return (a + b - 1) / b; };
  CHECK(lesson07::ceil_div(INT_MAX, 32) == exact(INT_MAX, 32));
  CHECK(lesson07::ceil_div(INT_MAX, 128) == exact(INT_MAX, 128));
  CHECK(lesson07::ceil_div(INT_MAX, 1) == INT_MAX);
  CHECK(lesson07::ceil_div(INT_MAX - 1, INT_MAX) == 1);
  float dummy[4] = {};
  const float* p = dummy;
  // M x 1 x 1: every matrix has at most INT_MAX elements, so only the grid can refuse it. v1
  // runs M along gridDim.x (limit 2^31 - 1, which INT_MAX / 32 blocks fit), so for v1 the tall
  // dimension that lands on gridDim.y is N.
  for (const auto& v : lesson07::sgemm_versions()) {
    INFO(v.name);
    if (v.number == 1) {
      CHECK_THROWS_WITH(v.run(1, INT_MAX, 1, 1, p, p, 0, dummy, nullptr),
                        Contains("too large for one launch"));
    } else {
      CHECK_THROWS_WITH(v.run(INT_MAX, 1, 1, 1, p, p, 0, dummy, nullptr),
                        Contains("too large for one launch"));
    }
  }
}

TEST_CASE("Empty products (M = 0 or N = 0) are no-ops and need no pointers", "[args]") {
  for (const auto& c : fp32_candidates()) {
    INFO(c.name);
    CHECK_NOTHROW(c.run(0, 5, 7, 1, nullptr, nullptr, 0, nullptr));
    CHECK_NOTHROW(c.run(5, 0, 7, 1, nullptr, nullptr, 0, nullptr));
  }
  CHECK_NOTHROW(lesson07::sgemm_wmma_tf32(0, 0, 0, 1, nullptr, nullptr, 0, nullptr));
  CHECK_NOTHROW(lesson07::bias_activation(0, 3, nullptr, Activation::silu, nullptr));
}

// ================================================================ GPU tests: correctness

TEST_CASE("Every FP32 version matches the FP64 CPU reference on small and odd shapes", "[gpu]") {
  const lesson07::CublasHandle cublas;
  const auto candidates = fp32_candidates(&cublas);
  std::uint32_t seed = 1;
  for (const Shape& s : kSmallShapes) {
    const auto A = random_vector(static_cast<std::size_t>(s.M) * s.K, seed++);
    const auto B = random_vector(static_cast<std::size_t>(s.K) * s.N, seed++);
    const auto C = random_vector(static_cast<std::size_t>(s.M) * s.N, seed++);
    for (const auto& c : candidates) {
      // K = 0 is the lesson's convention (C = beta * C, as BLAS); cuBLAS's answer is not pinned.
      if (s.K == 0 && c.name == "cublas_sgemm") continue;
      for (const auto& ab : {std::make_pair(1.0f, 0.0f), std::make_pair(1.5f, -0.75f)}) {
        const auto got = run_gemm(c.run, s, ab.first, A, B, ab.second, C);
        check_against_reference(c.name, got, s, ab.first, A, B, ab.second, C);
      }
    }
  }
}

TEST_CASE("beta = 0 ignores NaN already in C (BLAS semantics)", "[gpu]") {
  const lesson07::CublasHandle cublas;
  auto candidates = fp32_candidates(&cublas);
  if (lesson07::wmma_tf32_available()) {
    candidates.push_back(
        {"wmma_tf32", [](int M, int N, int K, float al, const float* A, const float* B, float be,
                         float* C) { lesson07::sgemm_wmma_tf32(M, N, K, al, A, B, be, C); }});
  }
  for (const Shape s : {Shape{70, 45, 33}, Shape{128, 128, 64}}) {  // scalar and float4 paths
    const auto A = random_vector(static_cast<std::size_t>(s.M) * s.K, 11);
    const auto B = random_vector(static_cast<std::size_t>(s.K) * s.N, 12);
    const std::vector<float> C(static_cast<std::size_t>(s.M) * s.N, kNaN);
    for (const auto& c : candidates) {
      const auto got = run_gemm(c.run, s, 1.25f, A, B, 0.0f, C);
      const double rounding = c.name == "wmma_tf32" ? lesson07::kTf32InputRounding : 0.0;
      check_against_reference(c.name, got, s, 1.25f, A, B, 0.0f, C, nullptr, Activation::none,
                              rounding);
    }
  }
}

TEST_CASE("alpha = 0 scales C by beta exactly; K = 0 leaves beta * C", "[gpu]") {
  const lesson07::CublasHandle cublas;
  const Shape s{45, 70, 20};
  const auto A = random_vector(static_cast<std::size_t>(s.M) * s.K, 21);
  const auto B = random_vector(static_cast<std::size_t>(s.K) * s.N, 22);
  const auto C = random_vector(static_cast<std::size_t>(s.M) * s.N, 23);
  std::vector<float> doubled(C.size());
  for (std::size_t i = 0; i < C.size(); ++i) doubled[i] = 2.0f * C[i];
  for (const auto& c : fp32_candidates(&cublas)) {
    INFO(c.name);
    CHECK(run_gemm(c.run, s, 0.0f, A, B, 2.0f, C) == doubled);
    if (c.name != "cublas_sgemm") {  // the lesson's kernels with K = 0: an empty sum
      CHECK(run_gemm(c.run, Shape{s.M, s.N, 0}, 1.0f, {}, {}, 2.0f, C) == doubled);
    }
  }
}

TEST_CASE("Every version agrees with cuBLAS on large shapes that are not multiples of the tile",
          "[gpu][large]") {
  const lesson07::CublasHandle cublas;
  const auto candidates = fp32_candidates();
  std::uint32_t seed = 100;
  for (const Shape s : {Shape{1000, 1000, 1000}, Shape{1025, 769, 515}, Shape{513, 1031, 257}}) {
    const std::size_t a_n = static_cast<std::size_t>(s.M) * s.K,
                      b_n = static_cast<std::size_t>(s.K) * s.N;
    const std::size_t c_n = static_cast<std::size_t>(s.M) * s.N;
    const auto A = random_vector(a_n, seed++), B = random_vector(b_n, seed++);
    std::vector<float> absA(a_n), absB(b_n);
    for (std::size_t i = 0; i < a_n; ++i) absA[i] = std::fabs(A[i]);
    for (std::size_t i = 0; i < b_n; ++i) absB[i] = std::fabs(B[i]);
    const auto cublas_gemm = [&](int M, int N, int K, float al, const float* dA, const float* dB,
                                 float be, float* dC) {
      lesson07::cublas_sgemm(cublas, M, N, K, al, dA, dB, be, dC);
    };
    const std::vector<float> zeros(c_n, 0.0f);
    const auto expected = run_gemm(cublas_gemm, s, 1.0f, A, B, 0.0f, zeros);
    // sum_k |a||b| per element, the scale of the rounding error (FP32 is plenty for a bound)
    const auto abs_sum = run_gemm(cublas_gemm, s, 1.0f, absA, absB, 0.0f, zeros);
    for (const auto& c : candidates) {
      const auto got = run_gemm(c.run, s, 1.0f, A, B, 0.0f, zeros);
      std::size_t bad = 0;
      for (std::size_t i = 0; i < c_n; ++i) {
        const double tol =
            2.0 * 1.01 * lesson07::gemm_error_bound(s.K, 1.0, abs_sum[i], 0.0, 0.0, 0.0);
        if (!(std::fabs(got[i] - expected[i]) <= tol)) ++bad;
      }
      INFO(c.name << " on " << text(s) << ": " << bad
                  << " elements differ from cuBLAS beyond 2x the FP32 bound");
      CHECK(bad == 0);
      // and FP64 on a few elements, corners included, so the oracle is not cuBLAS alone
      for (int t = 0; t < 16; ++t) {
        const int m = t == 0 ? 0 : t == 1 ? s.M - 1 : (t * 7919) % s.M;
        const int n = t == 0 ? 0 : t == 1 ? s.N - 1 : (t * 104729) % s.N;
        double sum_abs = 0.0;
        const double ref = lesson07::reference_dot(s.N, s.K, A.data(), B.data(), m, n, &sum_abs);
        INFO("element (" << m << ", " << n << ")");
        CHECK(std::fabs(got[static_cast<std::size_t>(m) * s.N + n] - ref) <=
              lesson07::gemm_error_bound(s.K, 1.0, sum_abs, 0.0, 0.0, 0.0));
      }
    }
  }
}

TEST_CASE(
    "float4 kernels fall back to scalar accesses: misaligned pointers, rows not a multiple of 4",
    "[gpu]") {
  auto candidates = fp32_candidates();
  if (lesson07::wmma_tf32_available()) {
    candidates.push_back(
        {"wmma_tf32", [](int M, int N, int K, float al, const float* A, const float* B, float be,
                         float* C) { lesson07::sgemm_wmma_tf32(M, N, K, al, A, B, be, C); }});
  }
  struct Case {
    Shape s;
    int offset;
  };
  for (const Case& k : {Case{{68, 132, 36}, 0}, Case{{68, 130, 36}, 0}, Case{{68, 132, 37}, 0},
                        Case{{68, 132, 36}, 1}, Case{{131, 260, 72}, 2}}) {
    const auto A = random_vector(static_cast<std::size_t>(k.s.M) * k.s.K, 31);
    const auto B = random_vector(static_cast<std::size_t>(k.s.K) * k.s.N, 32);
    const auto C = random_vector(static_cast<std::size_t>(k.s.M) * k.s.N, 33);
    for (const auto& c : candidates) {
      const auto got = run_gemm(c.run, k.s, 0.5f, A, B, 1.0f, C, k.offset);
      const double rounding = c.name == "wmma_tf32" ? lesson07::kTf32InputRounding : 0.0;
      check_against_reference(c.name + " offset " + std::to_string(k.offset), got, k.s, 0.5f, A, B,
                              1.0f, C, nullptr, Activation::none, rounding);
    }
  }
}

TEST_CASE("The cuBLAS row-major wrapper: a hand-checked product (C^T = B^T A^T)", "[gpu]") {
  const lesson07::CublasHandle cublas;
  const auto gemm = [&](int M, int N, int K, float al, const float* A, const float* B, float be,
                        float* C) { lesson07::cublas_sgemm(cublas, M, N, K, al, A, B, be, C); };
  // A = [1 2 3; 4 5 6] (2x3), B = [7 8; 9 10; 11 12] (3x2). Row-major A*B = [58 64; 139 154];
  // a wrapper that forgot the transpose identity would compute something else (or fail on lds).
  const std::vector<float> A = {1, 2, 3, 4, 5, 6}, B = {7, 8, 9, 10, 11, 12};
  CHECK(run_gemm(gemm, {2, 2, 3}, 1.0f, A, B, 0.0f, std::vector<float>(4, kNaN)) ==
        std::vector<float>{58, 64, 139, 154});
  CHECK(run_gemm(gemm, {2, 2, 3}, 2.0f, A, B, 1.0f, {1, 1, 1, 1}) ==
        std::vector<float>{117, 129, 279, 309});
  // A non-square case: (2x3) * (3x1)
  CHECK(run_gemm(gemm, {2, 1, 3}, 1.0f, A, {1, 0, -1}, 0.0f, {0, 0}) == std::vector<float>{-2, -2});
  float dummy = 0.0f;
  CHECK_THROWS_AS(lesson07::cublas_sgemm(cublas, 2, -2, 2, 1, &dummy, &dummy, 0, &dummy),
                  std::invalid_argument);
}

// ================================================================ GPU tests: epilogue, tensor
// cores

TEST_CASE("Fused bias + activation matches the reference, and so does GEMM + bias_activation",
          "[gpu]") {
  for (const Activation act : {Activation::none, Activation::relu, Activation::silu}) {
    for (const Shape s : {Shape{100, 77, 50}, Shape{128, 256, 64}, Shape{1, 1, 1}}) {
      const auto A = random_vector(static_cast<std::size_t>(s.M) * s.K, 41);
      const auto B = random_vector(static_cast<std::size_t>(s.K) * s.N, 42);
      const auto C = random_vector(static_cast<std::size_t>(s.M) * s.N, 43);
      const auto bias = random_vector(static_cast<std::size_t>(s.N), 44, -2.0f, 2.0f);
      const auto d_bias = course::to_device(bias);
      const auto fused = run_gemm(
          [&](int M, int N, int K, float al, const float* dA, const float* dB, float be,
              float* dC) {
            lesson07::sgemm_bias_act(M, N, K, al, dA, dB, be, d_bias.data(), act, dC);
          },
          s, 1.5f, A, B, 0.5f, C);
      check_against_reference("fused", fused, s, 1.5f, A, B, 0.5f, C, bias.data(), act);
      const auto separate = run_gemm(
          [&](int M, int N, int K, float al, const float* dA, const float* dB, float be,
              float* dC) {
            lesson07::sgemm_v8_double_buffering(M, N, K, al, dA, dB, be, dC);
            lesson07::bias_activation(M, N, d_bias.data(), act, dC);
          },
          s, 1.5f, A, B, 0.5f, C);
      check_against_reference("GEMM then bias_activation", separate, s, 1.5f, A, B, 0.5f, C,
                              bias.data(), act);
    }
  }
}

TEST_CASE("bias_activation alone: act(C + bias) in place, float4 and scalar paths", "[gpu]") {
  for (const Shape s : {Shape{33, 64, 0}, Shape{33, 63, 0}}) {
    const auto C = random_vector(static_cast<std::size_t>(s.M) * s.N, 51, -4.0f, 4.0f);
    const auto bias = random_vector(static_cast<std::size_t>(s.N), 52);
    auto dC = course::to_device(C);
    const auto d_bias = course::to_device(bias);
    lesson07::bias_activation(s.M, s.N, d_bias.data(), Activation::silu, dC.data());
    const auto got = course::to_host(dC);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < C.size(); ++i) {
      const double x = static_cast<double>(C[i]) + bias[i % s.N];
      const double want = x / (1.0 + std::exp(-x));
      if (!(std::fabs(got[i] - want) <= 1e-6 * (1.0 + std::fabs(want)))) ++bad;
    }
    INFO(text(s));
    CHECK(bad == 0);
  }
}

TEST_CASE("Tensor cores: WMMA TF32 is within the TF32 bound, and really rounds to TF32", "[gpu]") {
  std::string why;
  if (!lesson07::wmma_tf32_available(&why)) {
    INFO(why);
    float dummy[1] = {};
    CHECK_THROWS_AS(lesson07::sgemm_wmma_tf32(1, 1, 1, 1, dummy, dummy, 0, dummy),
                    std::runtime_error);
    return;
  }
  const lesson07::CublasHandle cublas;
  const std::vector<Candidate> tf32 = {
      {"wmma_tf32", [](int M, int N, int K, float al, const float* A, const float* B, float be,
                       float* C) { lesson07::sgemm_wmma_tf32(M, N, K, al, A, B, be, C); }},
      {"cublas_gemm_tf32",
       [&](int M, int N, int K, float al, const float* A, const float* B, float be, float* C) {
         lesson07::cublas_gemm_tf32(cublas, M, N, K, al, A, B, be, C);
       }}};
  std::uint32_t seed = 60;
  for (const Shape s :
       {Shape{1, 1, 1}, Shape{17, 33, 65}, Shape{100, 100, 100}, Shape{129, 67, 131},
        Shape{256, 256, 256}, Shape{300, 200, 1000}, Shape{3, 5, 0}}) {
    const auto A = random_vector(static_cast<std::size_t>(s.M) * s.K, seed++);
    const auto B = random_vector(static_cast<std::size_t>(s.K) * s.N, seed++);
    const auto C = random_vector(static_cast<std::size_t>(s.M) * s.N, seed++);
    for (const auto& c : tf32) {
      if (s.K == 0 && c.name == "cublas_gemm_tf32") continue;  // see the FP32 test
      const auto got = run_gemm(c.run, s, 1.5f, A, B, -0.5f, C);
      check_against_reference(c.name, got, s, 1.5f, A, B, -0.5f, C, nullptr, Activation::none,
                              lesson07::kTf32InputRounding);
    }
  }
  // 1 + 2^-15 is not a TF32 number (10 mantissa bits): rounded, it is 1. Eight products of it with
  // 1 give exactly 8 on TF32 tensor cores and 8.000244 in FP32.
  const Shape s{16, 16, 8};
  const std::vector<float> A(16 * 8, 1.0f + 1.0f / 32768.0f), B(8 * 16, 1.0f);
  const auto got = run_gemm(tf32[0].run, s, 1.0f, A, B, 0.0f, std::vector<float>(256, 0.0f));
  CHECK(got == std::vector<float>(256, 8.0f));
}

TEST_CASE("fill_uniform is deterministic per seed and stays in [lo, hi)", "[gpu]") {
  const std::size_t n = 100000;
  course::DeviceBuffer<float> a(n), b(n), c(n);
  lesson07::fill_uniform(a.data(), n, 7, -1.0f, 1.0f);
  lesson07::fill_uniform(b.data(), n, 7, -1.0f, 1.0f);
  lesson07::fill_uniform(c.data(), n, 8, -1.0f, 1.0f);
  const auto ha = course::to_host(a), hb = course::to_host(b), hc = course::to_host(c);
  CHECK(ha == hb);
  CHECK(ha != hc);
  double sum = 0.0;
  float lo = 2.0f, hi = -2.0f;
  for (float x : ha) sum += x, lo = std::min(lo, x), hi = std::max(hi, x);
  CHECK(lo >= -1.0f);
  CHECK(hi < 1.0f);
  CHECK(sum / n == course::testing::Approx(0.0).margin(0.01));
}

// ================================================================ exercises

namespace {
// The exercise launchers take W = B^T (N x K); the reference takes B.
void check_nt(const std::string& what, const Gemm& nt_gemm, const Shape& s, float alpha, float beta,
              bool nan_c, std::uint32_t seed) {
  const auto A = random_vector(static_cast<std::size_t>(s.M) * s.K, seed);
  const auto B = random_vector(static_cast<std::size_t>(s.K) * s.N, seed + 1);
  const auto C = nan_c ? std::vector<float>(static_cast<std::size_t>(s.M) * s.N, kNaN)
                       : random_vector(static_cast<std::size_t>(s.M) * s.N, seed + 2);
  const auto got = run_gemm(nt_gemm, s, alpha, A, transpose(B, s.K, s.N), beta, C);
  check_against_reference(what, got, s, alpha, A, B, beta, C);
}

const std::vector<Shape> kExerciseShapes = {{1, 1, 1},       {17, 33, 65},  {33, 17, 65},
                                            {100, 100, 100}, {64, 200, 37}, {3, 5, 0},
                                            {130, 70, 17}};

// Exercises 1 and 2 on every shape: with beta != 0, and with beta = 0 over a NaN-filled C.
void check_nt_shapes(const std::string& what, const Gemm& nt_gemm, std::uint32_t seed) {
  for (const Shape& s : kExerciseShapes) {
    check_nt(what, nt_gemm, s, 1.5f, -0.75f, false, seed += 3);
    check_nt(what + " (beta 0, NaN in C)", nt_gemm, s, 1.0f, 0.0f, true, seed += 3);
  }
}
}  // namespace

TEST_CASE("Exercise 1: sgemm_nt_smem_tiling rejects bad shapes", "[ex1]") {
  float dummy[1] = {};
  CHECK_THROWS_AS(lesson07::sgemm_nt_smem_tiling(-1, 2, 2, 1, dummy, dummy, 0, dummy),
                  std::invalid_argument);
  CHECK_THROWS_AS(lesson07::sgemm_nt_smem_tiling(2, 2, 2, 1, dummy, dummy, 0, nullptr),
                  std::invalid_argument);
  CHECK_NOTHROW(lesson07::sgemm_nt_smem_tiling(0, 2, 2, 1, nullptr, nullptr, 0, nullptr));
}

TEST_CASE("Exercise 1: sgemm_nt_smem_tiling computes alpha * A * W^T + beta * C", "[gpu][ex1]") {
  const Gemm f = [](int M, int N, int K, float al, const float* A, const float* W, float be,
                    float* C) { lesson07::sgemm_nt_smem_tiling(M, N, K, al, A, W, be, C); };
  check_nt_shapes("ex1", f, 200);
}

TEST_CASE("Exercise 1: the W tile is padded, one float per row of 32", "[gpu][ex1]") {
  // The padding is what makes the column read of W's tile conflict-free; without it the values
  // are the same. Static shared memory shows it: 32 x 32 floats for A's tile plus 32 x 33 for
  // W's (both padded is allowed too). Which tile holds the padding it cannot see.
  constexpr std::size_t tile = 32 * 32 * sizeof(float), padded = 32 * 33 * sizeof(float);
  const cudaFuncAttributes a = lesson07::sgemm_nt_smem_tiling_attributes();
  INFO("static shared memory " << a.sharedSizeBytes << " bytes; two unpadded tiles are "
                               << 2 * tile);
  CHECK(a.sharedSizeBytes >= tile + padded);
  CHECK(a.sharedSizeBytes <= 2 * padded);
}

namespace {
// The kernels one call launches, as CUPTI recorded them.
std::vector<course::cupti::GpuActivity> kernels_of(const std::function<void()>& call) {
  course::cupti::ActivityTrace trace;
  call();
  std::vector<course::cupti::GpuActivity> kernels;
  for (auto& a : trace.stop()) {
    if (a.kind == course::cupti::GpuActivity::Kind::kernel) kernels.push_back(a);
  }
  return kernels;
}
// One launch of 256 threads per 64 x 64 tile of the M x N output: a 4x4 register block each.
void check_register_blocked_launch(const std::vector<course::cupti::GpuActivity>& kernels, int M,
                                   int N) {
  REQUIRE(kernels.size() == 1);
  const auto& k = kernels.front();
  INFO("kernel " << k.name << ": grid " << k.grid.x << " x " << k.grid.y << " x " << k.grid.z
                 << ", block " << k.block.x << " x " << k.block.y << " x " << k.block.z);
  CHECK(k.block.x * k.block.y * k.block.z == 256u);
  CHECK(k.grid.x * k.grid.y * k.grid.z == static_cast<unsigned>(((N + 63) / 64) * ((M + 63) / 64)));
}
}  // namespace

TEST_CASE("Exercise 2: one launch, 256 threads per 64x64 tile (16 outputs a thread)",
          "[gpu][ex2][cupti]") {
  const int M = 130, N = 200, K = 37;
  const auto A = course::to_device(random_vector(static_cast<std::size_t>(M) * K, 1));
  const auto W = course::to_device(random_vector(static_cast<std::size_t>(N) * K, 2));
  course::DeviceBuffer<float> C(static_cast<std::size_t>(M) * N);
  check_register_blocked_launch(kernels_of([&] {
                                  lesson07::sgemm_nt_register_blocking(M, N, K, 1.0f, A.data(),
                                                                       W.data(), 0.0f, C.data());
                                }),
                                M, N);
}

TEST_CASE("Exercise 2: sgemm_nt_register_blocking rejects bad shapes", "[ex2]") {
  float dummy[1] = {};
  CHECK_THROWS_AS(lesson07::sgemm_nt_register_blocking(2, 2, -1, 1, dummy, dummy, 0, dummy),
                  std::invalid_argument);
  CHECK_THROWS_AS(lesson07::sgemm_nt_register_blocking(2, 2, 2, 1, nullptr, dummy, 0, dummy),
                  std::invalid_argument);
  CHECK_NOTHROW(lesson07::sgemm_nt_register_blocking(2, 0, 2, 1, nullptr, nullptr, 0, nullptr));
}

TEST_CASE("Exercise 2: sgemm_nt_register_blocking computes alpha * A * W^T + beta * C",
          "[gpu][ex2]") {
  const Gemm f = [](int M, int N, int K, float al, const float* A, const float* W, float be,
                    float* C) { lesson07::sgemm_nt_register_blocking(M, N, K, al, A, W, be, C); };
  check_nt_shapes("ex2", f, 300);
  check_nt("ex2", f, {300, 257, 520}, 1.0f, 1.0f, false, 399);
}

TEST_CASE("Exercise 3: linear_forward rejects bad shapes and a null bias", "[ex3]") {
  float dummy[1] = {};
  CHECK_THROWS_AS(lesson07::linear_forward(2, -2, 2, dummy, dummy, dummy, Activation::relu, dummy),
                  std::invalid_argument);
  CHECK_THROWS_AS(lesson07::linear_forward(2, 2, 2, dummy, dummy, nullptr, Activation::relu, dummy),
                  std::invalid_argument);
  CHECK_NOTHROW(
      lesson07::linear_forward(0, 2, 2, nullptr, nullptr, nullptr, Activation::relu, nullptr));
}

TEST_CASE("Exercise 3: linear_forward is one kernel, the bias and activation in its write-out",
          "[gpu][ex3][cupti]") {
  // A GEMM followed by a bias + activation kernel gives the same values and reads and writes Y
  // twice more: the point of the fused epilogue. CUPTI counts the launches.
  const int M = 65, N = 130, K = 20;
  const auto X = course::to_device(random_vector(static_cast<std::size_t>(M) * K, 3));
  const auto W = course::to_device(random_vector(static_cast<std::size_t>(N) * K, 4));
  const auto bias = course::to_device(random_vector(static_cast<std::size_t>(N), 5));
  course::DeviceBuffer<float> Y(static_cast<std::size_t>(M) * N);
  check_register_blocked_launch(kernels_of([&] {
                                  lesson07::linear_forward(M, N, K, X.data(), W.data(), bias.data(),
                                                           Activation::relu, Y.data());
                                }),
                                M, N);
}

TEST_CASE("Exercise 3: linear_forward computes act(X * W^T + bias) and never reads Y",
          "[gpu][ex3]") {
  std::uint32_t seed = 400;
  for (const Activation act : {Activation::none, Activation::relu, Activation::silu}) {
    for (const Shape s :
         {Shape{1, 1, 1}, Shape{100, 77, 50}, Shape{65, 130, 200}, Shape{4, 9, 0}}) {
      const auto X = random_vector(static_cast<std::size_t>(s.M) * s.K, seed++);
      const auto B = random_vector(static_cast<std::size_t>(s.K) * s.N, seed++);
      const auto bias = random_vector(static_cast<std::size_t>(s.N), seed++, -2.0f, 2.0f);
      const std::vector<float> Y(static_cast<std::size_t>(s.M) * s.N, kNaN);
      const auto d_bias = course::to_device(bias);
      const auto got = run_gemm(
          [&](int M, int N, int K, float, const float* dX, const float* dW, float, float* dY) {
            lesson07::linear_forward(M, N, K, dX, dW, d_bias.data(), act, dY);
          },
          s, 1.0f, X, transpose(B, s.K, s.N), 0.0f, Y);
      check_against_reference("linear_forward", got, s, 1.0f, X, B, 0.0f, Y, bias.data(), act);
    }
  }
}
