// Lesson 07: SGEMM from the naive kernel toward cuBLAS, measured on this GPU.
//
//   lesson07 [--size S | --m M --n N --k K] [--version V]... [--reps R] [--help]
//
// Runs cuBLAS SGEMM (the baseline) and every lesson version on one problem (default 4096^3),
// checks each result against cuBLAS (every element) and an FP64 CPU reference (sampled
// elements), and prints time, TFLOP/s, % of cuBLAS and % of the FP32 peak. Then the fused
// epilogue against GEMM + a separate kernel, and the tensor cores (TF32) with their accuracy.
// The sweep over sizes and the statistics are in the benchmark: make bench LESSON=07.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "common/headline.hpp"
#include "common/cuda_check.hpp"
#include "common/device.hpp"
#include "common/lesson_main.hpp"
#include "common/memory.hpp"
#include "common/stream.hpp"
#include "common/timing.hpp"
#include "gemm.cuh"

using namespace lesson07;

namespace {

struct Options {
  int M = 4096, N = 4096, K = 4096;
  std::vector<int> versions;
  int reps = 5;
};

// The median GPU time (launch latency excluded: common/timing.hpp) of `reps` runs of enqueue(),
// in milliseconds, after the first run the caller made and timed (time_on_stream_ms: the first
// run may load the kernel lazily, which must not happen while the stream is held). Slow kernels
// get one timed run: their number is not in doubt.
template <class F>
double median_ms(cudaStream_t stream, int reps, double first_ms, F&& enqueue) {
  if (first_ms > 200.0) reps = 1;
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) ms.push_back(course::gpu_time_ms(stream, enqueue));
  return course::median(ms);
}

// What a result is checked against.
struct Oracle {
  int M, N, K;
  std::vector<float> A, B;                   // host copies, for the FP64 samples
  std::vector<float> expected;               // cuBLAS SGEMM's C
  std::vector<float> abs_sum;                // cuBLAS of |A| * |B|: the scale of the rounding error
  std::vector<std::pair<int, int>> samples;  // elements checked in FP64 on the CPU
};

struct Check {
  bool ok = true;
  std::size_t bad = 0;
  double worst_fp64 = 0.0;  // max |c - exact| / sum_k |a b| over the FP64 samples
};

// Every element against cuBLAS within twice the FP32 bound (both sides round) and the sampled
// elements against FP64 within the bound (times input_rounding for TF32).
Check check_result(const Oracle& o, const std::vector<float>& got, double input_rounding,
                   bool vs_cublas) {
  Check c;
  if (vs_cublas) {
    for (std::size_t i = 0; i < got.size(); ++i) {
      const double tol =
          2.02 * gemm_error_bound(o.K, 1.0, o.abs_sum[i], 0.0, 0.0, 0.0, input_rounding);
      if (!(std::fabs(got[i] - o.expected[i]) <= tol)) ++c.bad;
    }
  }
  for (const auto& mn : o.samples) {
    double s = 0.0;
    const double exact = reference_dot(o.N, o.K, o.A.data(), o.B.data(), mn.first, mn.second, &s);
    const double err = std::fabs(got[static_cast<std::size_t>(mn.first) * o.N + mn.second] - exact);
    if (!(err <= gemm_error_bound(o.K, 1.0, s, 0.0, 0.0, 0.0, input_rounding))) ++c.bad;
    c.worst_fp64 = std::max(c.worst_fp64, s > 0.0 ? err / s : err);
  }
  c.ok = c.bad == 0;
  return c;
}

void print_row(const char* label, double ms, double flops, double cublas_tflops, double peak_tflops,
               const Check& check) {
  const double tflops = flops / (ms / 1e3) / 1e12;
  std::printf("  %-34s %9.3f %9.2f %8.1f%% %7.1f%%   %s\n", label, ms, tflops,
              cublas_tflops > 0 ? 100.0 * tflops / cublas_tflops : 0.0,
              100.0 * tflops / peak_tflops,
              check.ok ? "ok" : ("FAILED (" + std::to_string(check.bad) + " elements)").c_str());
}

int run(const Options& opt) {
  const int M = opt.M, N = opt.N, K = opt.K;
  std::printf("Lesson 07: SGEMM from the naive kernel toward cuBLAS\n");
  std::printf("====================================================\n");
  const course::DeviceInfo info = course::query_device(0);
  std::printf("%s\n", course::summary(info).c_str());
  const Fp32Peak peak = fp32_peak(0);
  std::printf(
      "FP32 peak: %d SMs x %d FP32 lanes x 2 FLOP (FMA) x %.0f MHz (the max boost clock) = %.1f "
      "TFLOP/s\n",
      peak.sm_count, peak.lanes_per_sm, peak.clock_khz / 1e3, peak.tflops);
  const double flops = gemm_flops(M, N, K);
  std::printf(
      "\nProblem: C(%dx%d) = A(%dx%d) * B(%dx%d), row-major FP32, %.1f GFLOP per product.\n", M, N,
      M, K, K, N, flops / 1e9);
  std::printf("Each kernel: one checked run, then the median GPU time of %d runs (CUDA events behind "
              "a blocking kernel).\n",
              opt.reps);
  std::printf(
      "Check: every element vs cuBLAS within 2x the FP32 error bound (K+3) u sum|a||b|,\n"
      "       and 256 sampled elements vs an FP64 CPU reference within the bound.\n\n");

  course::Stream stream;
  const std::size_t a_n = static_cast<std::size_t>(M) * K, b_n = static_cast<std::size_t>(K) * N,
                    c_n = static_cast<std::size_t>(M) * N;
  course::DeviceBuffer<float> A(a_n), B(b_n), C(c_n), absA(a_n), absB(b_n), S(c_n);
  fill_uniform(A.data(), a_n, 1, -1.0f, 1.0f, stream);
  fill_uniform(B.data(), b_n, 2, -1.0f, 1.0f, stream);
  stream.synchronize();

  Oracle o{M, N, K, course::to_host(A), course::to_host(B), {}, {}, {}};
  std::vector<float> h(a_n);
  for (std::size_t i = 0; i < a_n; ++i) h[i] = std::fabs(o.A[i]);
  CUDA_CHECK(cudaMemcpy(absA.data(), h.data(), a_n * sizeof(float), cudaMemcpyHostToDevice));
  h.resize(b_n);
  for (std::size_t i = 0; i < b_n; ++i) h[i] = std::fabs(o.B[i]);
  CUDA_CHECK(cudaMemcpy(absB.data(), h.data(), b_n * sizeof(float), cudaMemcpyHostToDevice));
  o.samples = {{0, 0}, {M - 1, N - 1}, {0, N - 1}, {M - 1, 0}};
  for (unsigned t = 1; o.samples.size() < 256; ++t) {
    o.samples.push_back(
        {static_cast<int>((t * 2654435761u) % M), static_cast<int>((t * 40503u + 7u) % N)});
  }

  const CublasHandle cublas;
  std::printf("%s\n", course::harness_floor_caption(stream).c_str());
  std::printf("  %-34s %9s %9s %9s %8s   %s\n", "kernel", "ms", "TFLOP/s", "%cuBLAS", "%peak",
              "check");
  // cuBLAS first: its time is the baseline and its result the full-size oracle.
  const auto run_cublas = [&] {
    cublas_sgemm(cublas, M, N, K, 1.0f, A.data(), B.data(), 0.0f, C.data(), stream);
  };
  const double cublas_first = course::time_on_stream_ms(stream, run_cublas);
  const double cublas_ms = median_ms(stream, opt.reps, cublas_first, run_cublas);
  const double cublas_tflops = flops / (cublas_ms / 1e3) / 1e12;
  o.expected = course::to_host(C);
  cublas_sgemm(cublas, M, N, K, 1.0f, absA.data(), absB.data(), 0.0f, S.data(), stream);
  o.abs_sum = course::to_host(S);
  bool all_ok = true;
  const Check cublas_check = check_result(o, o.expected, 0.0, false);
  all_ok &= cublas_check.ok;
  print_row("cuBLAS SGEMM (CUBLAS_DEFAULT_MATH)", cublas_ms, flops, cublas_tflops, peak.tflops,
            cublas_check);

  double best_tflops = 0.0;
  int best = 0;
  const std::vector<int> chosen =
      opt.versions.empty() ? std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8} : opt.versions;
  for (const int number : chosen) {
    const SgemmVersion& v = sgemm_version(number);
    // NaN in C first: beta = 0 must not read it, and an element the kernel forgets stays NaN.
    CUDA_CHECK(cudaMemsetAsync(C.data(), 0xFF, C.bytes(), stream));
    const auto launch = [&] { v.run(M, N, K, 1.0f, A.data(), B.data(), 0.0f, C.data(), stream); };
    const double first = course::time_on_stream_ms(stream, launch);
    const Check check = check_result(o, course::to_host(C), 0.0, true);
    all_ok &= check.ok;
    const double ms = median_ms(stream, opt.reps, first, launch);
    const std::string label = std::to_string(v.number) + "  " + v.name;
    print_row(label.c_str(), ms, flops, cublas_tflops, peak.tflops, check);
    const double tflops = flops / (ms / 1e3) / 1e12;
    if (tflops > best_tflops) best_tflops = tflops, best = v.number;
  }
  if (best > 0) {
    std::printf(
        "\nBest: v%d at %.1f%% of cuBLAS SGEMM (%.2f vs %.2f TFLOP/s), %.1f%% of the FP32 peak.\n",
        best, 100.0 * best_tflops / cublas_tflops, best_tflops, cublas_tflops,
        100.0 * best_tflops / peak.tflops);
    course::add_headline("v%d %.1f TFLOP/s, %.0f%% of cuBLAS SGEMM", best, best_tflops,
                         100.0 * best_tflops / cublas_tflops);
  }

  // ---- the fused epilogue: what a fully connected layer does after its GEMM
  std::printf(
      "\nFused epilogue: C = SiLU(A * B + bias), bias + activation in v%d's write-out vs a 2nd "
      "kernel\n",
      kBestVersion);
  course::DeviceBuffer<float> bias(N), C2(c_n);
  fill_uniform(bias.data(), N, 3, -1.0f, 1.0f, stream);
  const auto fused = [&] {
    sgemm_bias_act(M, N, K, 1.0f, A.data(), B.data(), 0.0f, bias.data(), Activation::silu, C.data(),
                   stream);
  };
  const auto separate = [&] {
    sgemm_v8_double_buffering(M, N, K, 1.0f, A.data(), B.data(), 0.0f, C2.data(), stream);
    bias_activation(M, N, bias.data(), Activation::silu, C2.data(), stream);
  };
  const auto epilogue_only = [&] {
    bias_activation(M, N, bias.data(), Activation::silu, C2.data(), stream);
  };
  const double fused_ms =
      median_ms(stream, opt.reps, course::time_on_stream_ms(stream, fused), fused);
  const double separate_ms =
      median_ms(stream, opt.reps, course::time_on_stream_ms(stream, separate), separate);
  const double epilogue_ms =
      median_ms(stream, opt.reps, course::time_on_stream_ms(stream, epilogue_only), epilogue_only);
  // Both must agree. Recompute each (epilogue_only's timing runs applied SiLU to C2 again and
  // again); they differ by roundings only: the fused write-out may contract alpha*acc + bias
  // into one FMA where the separate path rounds twice.
  fused();
  separate();
  const auto f = course::to_host(C), s = course::to_host(C2);
  std::size_t differ = 0;
  for (std::size_t i = 0; i < c_n; ++i) {
    const double tol =
        2.2 * gemm_error_bound(K, 1.0, o.abs_sum[i], 0.0, 0.0, 1.0) + 1e-6 * std::fabs(s[i]);
    if (!(std::fabs(f[i] - s[i]) <= tol)) ++differ;
  }
  all_ok &= differ == 0;
  std::printf("  fused (one kernel)             %9.3f ms\n", fused_ms);
  std::printf(
      "  GEMM + bias_activation kernel  %9.3f ms (the 2nd kernel alone: %.3f ms, %.0f GB/s: C read "
      "+ written)\n",
      separate_ms, epilogue_ms, 2.0 * C.bytes() / (epilogue_ms / 1e3) / 1e9);
  std::printf("  -> fusing saves %.1f%%; results agree: %s\n",
              100.0 * (separate_ms - fused_ms) / separate_ms,
              differ == 0 ? "yes" : ("NO (" + std::to_string(differ) + " elements)").c_str());

  // ---- tensor cores
  std::printf("\nTensor cores (TF32: inputs rounded to a 10-bit mantissa, FP32 accumulation)\n");
  std::string why;
  if (!wmma_tf32_available(&why)) {
    std::printf("  skipped: %s\n", why.c_str());
  } else {
    const auto tc = [&](const char* label, auto&& launch) {
      CUDA_CHECK(cudaMemsetAsync(C.data(), 0xFF, C.bytes(), stream));
      const double first = course::time_on_stream_ms(stream, launch);
      const Check check = check_result(o, course::to_host(C), kTf32InputRounding, true);
      all_ok &= check.ok;
      const double ms = median_ms(stream, opt.reps, first, launch);
      print_row(label, ms, flops, cublas_tflops, peak.tflops, check);
      return check.worst_fp64;
    };
    const double wmma_err = tc("WMMA TF32 (this lesson)", [&] {
      sgemm_wmma_tf32(M, N, K, 1.0f, A.data(), B.data(), 0.0f, C.data(), stream);
    });
    const double cublas_tf32_err = tc("cuBLAS GemmEx FAST_TF32", [&] {
      cublas_gemm_tf32(cublas, M, N, K, 1.0f, A.data(), B.data(), 0.0f, C.data(), stream);
    });
    CUDA_CHECK(cudaMemsetAsync(C.data(), 0xFF, C.bytes(), stream));
    sgemm_v8_double_buffering(M, N, K, 1.0f, A.data(), B.data(), 0.0f, C.data(), stream);
    const double fp32_err = check_result(o, course::to_host(C), 0.0, false).worst_fp64;
    std::printf("  (%%cuBLAS and %%peak above are against the FP32 SGEMM and the FP32 peak)\n");
    std::printf(
        "  accuracy vs FP64, max |c - exact| / sum_k |a b| over 256 elements:\n"
        "    FP32 cuBLAS %.1e   FP32 v%d %.1e   WMMA TF32 %.1e   cuBLAS TF32 %.1e\n",
        cublas_check.worst_fp64, kBestVersion, fp32_err, wmma_err, cublas_tf32_err);
  }

  std::printf("\n%s\n", all_ok ? "All results checked: PASS" : "Some results were wrong: FAIL");
  course::print_headline();
  return all_ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  CLI::App app{
      "Lesson 07: SGEMM from the naive kernel toward cuBLAS. C = A * B, row-major, FP32.\n"
      "Runs cuBLAS and each version, checks every result, prints time, TFLOP/s, % of cuBLAS\n"
      "and % of the FP32 peak; then the fused bias + SiLU epilogue and the TF32 tensor cores."};
  // The sizes are applied in command-line order (trigger_on_parse), so a later --m overrides
  // an earlier --size and the other way round.
  const auto size_option = [&](const char* name, const char* value_name, const char* help,
                               const std::function<void(const int&)>& set) {
    app.add_option_function<int>(name, set, help)
        ->type_name(value_name)
        ->check(course::integer_in(1, 1 << 20))
        ->trigger_on_parse();
  };
  size_option("--size", "S", "M = N = K = S (default 4096)",
              [&](const int& s) { opt.M = opt.N = opt.K = s; });
  size_option("--m", "M", "M alone (any value >= 1; no multiple-of-tile needed)",
              [&](const int& m) { opt.M = m; });
  size_option("--n", "N", "N alone", [&](const int& n) { opt.N = n; });
  size_option("--k", "K", "K alone", [&](const int& k) { opt.K = k; });
  const int last_version = static_cast<int>(sgemm_versions().size());
  app.add_option("--version", opt.versions, "run version V only (repeat for several); default: all")
      ->type_name("V")
      ->check(course::integer_in(1, last_version))
      ->allow_extra_args(false);  // one value per --version; repeat the option for several
  app.add_option("--reps", opt.reps,
                 "timed runs per kernel, median reported (default 5; 1 for runs over 200 ms)")
      ->type_name("R")
      ->check(course::integer_in(1, 1 << 20));
  std::string versions = "Versions:";
  for (const auto& v : sgemm_versions()) {
    char line[256];
    std::snprintf(line, sizeof line, "\n  %d  %-20s %s", v.number, v.name, v.idea);
    versions += line;
  }
  app.footer(versions);
  return course::lesson_main(app, argc, argv, [&] { return run(opt); });
}
