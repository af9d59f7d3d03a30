// Lesson 05: parallel reduction, step by step to the speed of memory.
//
//   lesson05 [VERSION] [--n N] [--reps R] [--help]
//
// 1. Sums N random floats with every version (or only VERSION), each checked against a
//    double-precision CPU sum before it is timed, next to cub::DeviceReduce::Sum and
//    thrust::reduce.
// 2. Shows the two traps of summing with atomicAdd into one float: results that change from run
//    to run, and a total of ones that stops at 2^24.
// 3. Runs the deployment uses built from the same kernels: argmax of class scores, mean and
//    variance for normalisation, and a row-wise softmax.
// Exits 0 when every check passes, 1 otherwise. The full benchmark is `make bench LESSON=05`.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "common/headline.hpp"
#include "common/cuda_check.hpp"
#include "common/device.hpp"
#include "common/lesson_main.hpp"
#include "common/memory.hpp"
#include "common/stream.hpp"
#include "common/timing.hpp"
#include "reduction.cuh"

namespace {

struct Options {
  int version = -1;                      // -1: every version
  std::size_t n = std::size_t{1} << 28;  // 1 GiB of floats: far past the L2, so DRAM is timed, and
                                         // long enough that one launch more or less (CUB makes
                                         // two) does not decide the comparison
  int reps = 5;
};

// Median GPU time (launch latency excluded: common/timing.hpp) of `reps` runs after one warm-up
// run (which also allocates scratch memory).
template <class F>
float median_ms(cudaStream_t stream, int reps, F&& enqueue) {
  return static_cast<float>(course::measure(stream, reps, enqueue, course::L2::warm, false).gpu_ms);
}

constexpr double kU = 1.0 / 16777216.0;  // unit roundoff of float, 2^-24

bool g_all_ok = true;
void check(bool ok, const char* what) {
  if (!ok) {
    std::printf("  CHECK FAILED: %s\n", what);
    g_all_ok = false;
  }
}

// ---------------------------------------------------------------------------------- part 1
void sum_every_version(const Options& o, cudaStream_t stream) {
  const std::size_t n = o.n;
  const double bytes = static_cast<double>(n) * sizeof(float);
  std::printf(
      "\n1. The sum of n = %zu random floats in [-1, 1) (%.0f MiB), median GPU time of %d runs\n", n,
      bytes / (1 << 20), o.reps);
  course::DeviceBuffer<float> in(n);
  reduction::fill_uniform(in.data(), n, 2025, -1.0f, 1.0f, stream);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  const std::vector<float> host = course::to_host(in);
  double exact = 0.0, abs_sum = 0.0;
  for (float x : host) {
    exact += x;
    abs_sum += std::fabs(x);
  }
  // The error column shows how far from the exact sum each version lands, relative to the sum,
  // in units of u = 2^-24 (1 = the rounding of a single float): a long chain of additions (v0)
  // drifts much further than a shallow tree.
  // The pass/fail line: Higham's bound for each version's addition-tree height h (see
  // reduction::summation_tree_height). A chain as long as v0's (h = n) has no useful bound once
  // n u >= 1: then only the error column is shown.
  const auto bound = [&](int version) {
    const double hu = reduction::summation_tree_height(version, n) * kU;
    return hu < 1.0 ? hu / (1.0 - hu) * abs_sum : -1.0;
  };
  std::printf("   double-precision CPU sum %.6f; sum|x| %.1f\n\n", exact, abs_sum);
  std::printf("   %s\n", course::harness_floor_caption(stream).c_str());
  std::printf("   %-38s %9s %8s %6s %16s %14s\n", "version", "ms", "GB/s", "%cub", "sum",
              "err/(u |sum|)");

  course::DeviceBuffer<float> out(1);
  course::DeviceBuffer<unsigned char> cub_temp;
  const course::Timing cub = course::measure(
      stream, o.reps, [&] { reduction::cub_sum(in.data(), n, out.data(), cub_temp, stream); });
  const float cub_ms = static_cast<float>(cub.gpu_ms);
  const float cub_result = reduction::read_back(out.data(), stream);
  const auto row = [&](const char* name, int version, float ms, float result,
                       double baseline_ms = -1.0) {
    const double err = std::fabs(result - exact);
    if (baseline_ms < 0.0) baseline_ms = cub_ms;
    std::printf("   %-38s %9.3f %8.0f %5.0f%% %16.6f %14.2f\n", name, ms, bytes / (ms * 1e-3) / 1e9,
                100.0 * baseline_ms / ms, result, err / (kU * std::fabs(exact)));
    if (bound(version) >= 0.0) check(err <= bound(version), name);
    if (name[0] == '0' + reduction::kBestVersion && name[1] == ' ') {
      course::add_headline("v%d %.0f GB/s, %.0f%% of CUB at n = %zu", reduction::kBestVersion,
                           bytes / (ms * 1e-3) / 1e9, 100.0 * cub_ms / ms, n);
    }
  };
  row("cub::DeviceReduce::Sum", reduction::kBestVersion, cub_ms, cub_result);
  // thrust::reduce allocates and returns the sum to the host, so it blocks the calling thread:
  // only its end-to-end time exists, compared here with CUB's end-to-end time.
  float thrust_result = 0.0f;
  std::vector<double> thrust_samples;
  for (int r = 0; r <= o.reps; ++r) {
    const double t = course::latency_ms(
        stream, [&] { thrust_result = reduction::thrust_sum(in.data(), n, stream); });
    if (r > 0) thrust_samples.push_back(t);  // the first is a warm-up
  }
  const float thrust_ms = static_cast<float>(course::median(thrust_samples));
  row("thrust::reduce (end to end; syncs)", reduction::kBestVersion, thrust_ms, thrust_result,
      cub.latency_ms);
  std::printf("   (CUB end to end, host call to completion: %.3f ms; the thrust row is compared "
              "with that)\n",
              cub.latency_ms);

  reduction::Workspace ws;
  for (const auto& v : reduction::versions()) {
    if (o.version >= 0 && v.number != o.version) continue;
    // Checked before timed: a fast wrong kernel is not a result.
    reduction::reduce_sum(v.number, in.data(), n, out.data(), ws, stream);
    const float result = reduction::read_back(out.data(), stream);
    const float ms = median_ms(stream, o.reps, [&] {
      reduction::reduce_sum(v.number, in.data(), n, out.data(), ws, stream);
    });
    const std::string label = std::to_string(v.number) + " " + v.name;
    row(label.c_str(), v.number, ms, result);
  }
  std::printf("   (GB/s counts the %zu input bytes once; %%cub = CUB's time / this time)\n",
              n * sizeof(float));
}

// ---------------------------------------------------------------------------------- part 2
void atomic_traps(cudaStream_t stream) {
  std::printf("\n2. The atomicAdd traps\n");
  // (a) Run to run: the same data, summed five times.
  const std::size_t n = std::size_t{1} << 22;
  course::DeviceBuffer<float> in(n);
  reduction::fill_uniform(in.data(), n, 7, -1.0f, 1.0f, stream);
  course::DeviceBuffer<float> out(1);
  reduction::Workspace ws;
  std::printf("   a) the same %zu floats summed 5 times (sum, then its bits):\n", n);
  for (int version : {0, 6, 7}) {
    std::set<std::uint32_t> distinct;
    std::printf("      v%d:", version);
    for (int run = 0; run < 5; ++run) {
      reduction::reduce_sum(version, in.data(), n, out.data(), ws, stream);
      const float s = reduction::read_back(out.data(), stream);
      distinct.insert(reduction::float_bits(s));
      std::printf(" %.7g(%08x)", s, reduction::float_bits(s));
    }
    std::printf("  -> %zu distinct\n", distinct.size());
    if (version == reduction::kBestVersion) check(distinct.size() == 1, "v7 must repeat its bits");
  }
  std::printf("      v0 and v6 add in whatever order the atomics arrive; v7 fixes the order.\n");

  // (b) 2^25 ones: a float that counts by 1 stops at 2^24 = 16777216.
  const std::size_t ones_n = std::size_t{1} << 25;
  course::DeviceBuffer<float> ones(ones_n);
  reduction::fill_uniform(ones.data(), ones_n, 0, 1.0f, 1.0f, stream);  // lo == hi: all 1.0f
  float cpu = 0.0f;
  for (std::size_t i = 0; i < ones_n; ++i)
    cpu += 1.0f;  // sequential, like one atomic after another
  reduction::reduce_sum(0, ones.data(), ones_n, out.data(), ws, stream);
  const float atomics = reduction::read_back(out.data(), stream);
  reduction::reduce_sum(reduction::kBestVersion, ones.data(), ones_n, out.data(), ws, stream);
  const float tree = reduction::read_back(out.data(), stream);
  std::printf("   b) %zu ones: CPU float loop %.0f, v0 atomics %.0f, v7 tree %.0f\n", ones_n, cpu,
              atomics, tree);
  std::printf(
      "      once a float total reaches 2^24, total + 1 rounds back to the total; a tree\n"
      "      only ever adds partial sums of similar size.\n");
  check(cpu == 16777216.0f, "the sequential float sum of ones stops at 2^24");
  check(atomics == 16777216.0f, "the atomic float sum of ones stops at 2^24");
  check(tree == static_cast<float>(ones_n), "the tree sum of 2^25 ones is exact");
}

// ---------------------------------------------------------------------------------- part 3
void deployment_uses(cudaStream_t stream) {
  std::printf("\n3. Deployment uses of the same kernels\n");
  reduction::Workspace ws;

  // (a) argmax over 1000 class scores, with the top score tied at two classes.
  std::vector<float> scores(1000);
  for (std::size_t i = 0; i < scores.size(); ++i)
    scores[i] = reduction::uniform_from_index(3, i, -5.0f, 5.0f);
  scores[417] = scores[862] = 9.5f;
  course::DeviceBuffer<float> d_scores = course::to_device(scores);
  course::DeviceBuffer<reduction::ArgMax> d_best(1);
  reduction::argmax(d_scores.data(), scores.size(), d_best.data(), ws, stream);
  const reduction::ArgMax best = reduction::read_back(d_best.data(), stream);
  std::printf(
      "   a) argmax of 1000 scores, 9.5 at classes 417 and 862: class %u (%.2f); ties go to the "
      "lower index\n",
      best.index, best.value);
  check(best.index == 417 && best.value == 9.5f, "argmax picks the first of tied maxima");

  // (b) mean and variance of a 3x640x640 tensor, and of the same data shifted by 1000.
  const std::size_t n = 3 * 640 * 640;
  for (float shift : {0.0f, 1000.0f}) {
    course::DeviceBuffer<float> x(n);
    reduction::fill_uniform(x.data(), n, 11, shift, shift + 1.0f, stream);
    course::DeviceBuffer<reduction::Moments> d_m(1);
    reduction::moments(x.data(), n, d_m.data(), ws, stream);
    const reduction::Moments m = reduction::read_back(d_m.data(), stream);
    const std::vector<float> h = course::to_host(x);
    double mean = 0.0, ss = 0.0;
    for (float v : h) mean += v;
    mean /= n;
    for (float v : h) ss += (v - mean) * (v - mean);
    float naive_sum = 0.0f, naive_sq = 0.0f;  // the textbook formula in float: E[x^2] - E[x]^2
    for (float v : h) {
      naive_sum += v;
      naive_sq += v * v;
    }
    const float naive_mean = naive_sum / n;
    const float naive_var = naive_sq / n - naive_mean * naive_mean;
    std::printf(
        "   b) %zu values in [%g, %g): mean %.6f var %.6f (double: %.6f, %.6f; float "
        "E[x^2]-E[x]^2: %.6f)\n",
        n, shift, shift + 1.0, m.mean, reduction::population_variance(m), mean, ss / n, naive_var);
    check(std::fabs(m.mean - mean) <= 1e-4 * (1.0 + std::fabs(mean)), "moments: mean");
    // Loose on purpose: the shifted data is badly conditioned (mean^2 / variance ~ 10^7); the
    // point is the contrast with the textbook formula, which is off by far more.
    check(std::fabs(reduction::population_variance(m) - ss / n) <= 1e-2 * (ss / n),
          "moments: variance");
  }

  // (c) softmax over 4 rows of 1000 class scores; row 3's logits are 100x larger.
  const std::size_t rows = 4, cols = 1000;
  std::vector<float> logits(rows * cols);
  for (std::size_t i = 0; i < logits.size(); ++i)
    logits[i] = reduction::uniform_from_index(5, i, -5.0f, 5.0f);
  for (std::size_t c = 0; c < cols; ++c) logits[3 * cols + c] *= 100.0f;
  course::DeviceBuffer<float> d_logits = course::to_device(logits);
  course::DeviceBuffer<float> d_probs(rows * cols);
  reduction::softmax_rows(d_logits.data(), d_probs.data(), rows, cols, stream);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  const std::vector<float> probs = course::to_host(d_probs);
  std::printf("   c) softmax over %zu rows x %zu classes:\n", rows, cols);
  for (std::size_t r = 0; r < rows; ++r) {
    const float* p = probs.data() + r * cols;
    const float* x = logits.data() + r * cols;
    const std::size_t top = static_cast<std::size_t>(std::max_element(p, p + cols) - p);
    double sum = 0.0;
    for (std::size_t c = 0; c < cols; ++c) sum += p[c];
    const bool overflows =
        std::isinf(std::exp(x[top]));  // float exp, as a kernel without the max would do
    std::printf("      row %zu: top class %zu, p = %.6f, sum of p = %.7f, max logit %.1f%s\n", r,
                top, p[top], sum, x[top], overflows ? " (exp of it alone overflows float)" : "");
    check(std::fabs(sum - 1.0) < 1e-5, "softmax rows sum to 1");
    check(top == static_cast<std::size_t>(std::max_element(x, x + cols) - x),
          "softmax keeps the top class");
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Lesson 05: parallel reduction, step by step to the speed of memory."};
  const int last_version = static_cast<int>(reduction::versions().size()) - 1;
  app.add_option("VERSION", o.version, "check and time only this version of the sum (default: all)")
      ->check(course::integer_in(0, last_version));
  app.add_option("--n", o.n, "number of floats to sum (default 268435456 = 2^28, 1 GiB)")
      ->type_name("N")
      ->check(course::integer_in(1, static_cast<long long>(reduction::kMaxElements)));
  app.add_option("--reps", o.reps,
                 "timed repetitions per version; the median is printed (default 5)")
      ->type_name("R")
      ->check(course::integer_in(1, 1000));
  std::string versions = "Versions:";
  for (const auto& v : reduction::versions()) {
    char line[256];
    std::snprintf(line, sizeof line, "\n  %d  %-38s %s", v.number, v.name, v.fixes);
    versions += line;
  }
  app.footer(versions);
  return course::lesson_main(app, argc, argv, [&] {
    const course::DeviceInfo info = course::query_device(0);
    std::printf("Lesson 05: parallel reduction\n%s\n", course::summary(info).c_str());
    course::Stream stream;
    sum_every_version(o, stream);
    atomic_traps(stream);
    deployment_uses(stream);
    if (!g_all_ok) {
      std::fprintf(stderr, "%s: some checks failed (see CHECK FAILED above)\n", argv[0]);
      return 1;
    }
    std::printf("\nAll checks passed.\n");
    course::print_headline();
    return 0;
  });
}
