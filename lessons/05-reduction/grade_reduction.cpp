// Lesson 05's speed grade: lesson05_grade, run by `make check LESSON=05` on a GPU after the
// sanitizers (cmake/check_exercise.sh, stage "grade"; common/grade_run.hpp says how it times and
// common/grade.cpp's table what each exercise must reach). Not a test: nothing here runs in ctest.
//
// Yours: reduction.cuh's functions, from the exercise build (exercise.cu). The course's:
// reduction.cu compiled a second time, solutions included, with `reduction` renamed
// `reduction_course` (add_lesson's GRADE_NAMESPACE), declared below by hand: the launchers the
// grade calls take only plain types, so a signature that drifts from reduction.cuh's is a link
// error, not a silent mismatch.
//
// The library's time, for reference: CUB's DeviceReduce::Sum (cub_sum) over the same n floats,
// the whole sum (its one pass over the input plus a tiny second one), beside v3 and v5's one
// pass; the softmax has none in the toolkit. Exercise 3 (the float4 split) is not graded: see
// the table.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "common/cuda_check.hpp"
#include "common/grade_run.hpp"
#include "common/memory.hpp"
#include "reduction.cuh"

namespace reduction_course {
void reduce_pass_v3_sequential_addressing(const float* in, std::size_t n, float* block_sums,
                                          cudaStream_t stream);
void reduce_pass_v5_warp_shuffle(const float* in, std::size_t n, float* block_sums,
                                 cudaStream_t stream);
void softmax_rows_warp_per_row(const float* in, float* out, std::size_t rows, std::size_t cols,
                               cudaStream_t stream);
}  // namespace reduction_course

namespace {

using course::DeviceBuffer;
using course::grade::Case;
using course::grade::Prepared;

// 2^26 floats (256 MiB): far more than any L2, and a pass long enough (~0.1-1 ms) that the
// harness's own floor (~3 us) is lost in it. Not a multiple of 512, so the last block is partial.
constexpr std::size_t kPassN = (std::size_t{1} << 26) - 100;

// Block sums bit for bit: the contracts fix the order of the additions, so a correct version
// gives the course's bits. "" when equal, else the first block that differs.
std::string compare_bits(const DeviceBuffer<float>& yours, const DeviceBuffer<float>& course,
                         cudaStream_t stream) {
  CUDA_CHECK(cudaStreamSynchronize(stream));
  const std::vector<float> a = course::to_host(yours), b = course::to_host(course);
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (reduction::float_bits(a[i]) != reduction::float_bits(b[i])) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "block %zu of %zu: %.9g, the course's %.9g", i, a.size(), a[i],
                    b[i]);
      return buf;
    }
  }
  return "";
}

using PassFn = void (*)(const float*, std::size_t, float*, cudaStream_t);

Case pass_case(const char* exercise, const char* version, std::size_t per_block, PassFn yours,
               PassFn course) {
  Case c;
  c.exercise = exercise;
  c.problem = std::string("one pass of ") + version + " over n = " + std::to_string(kPassN) +
              " floats in [-1, 1)";
  c.work = course::grade::reduction_pass_work(kPassN);
  c.library = "CUB DeviceReduce::Sum of the same n floats (the whole sum)";
  c.prepare = [yours, course, per_block](cudaStream_t stream) {
    struct Buffers {
      DeviceBuffer<float> in, mine, theirs, sum;
      DeviceBuffer<unsigned char> cub_temp;  // grows at the untimed call, then reused
    };
    const std::size_t blocks = (kPassN + per_block - 1) / per_block;
    auto b = std::make_shared<Buffers>(Buffers{
        DeviceBuffer<float>(kPassN), DeviceBuffer<float>(blocks), DeviceBuffer<float>(blocks),
        DeviceBuffer<float>(1), DeviceBuffer<unsigned char>()});
    reduction::fill_uniform(b->in.data(), kPassN, 2026, -1.0f, 1.0f, stream);
    Prepared p;
    p.learner = [b, yours, stream] { yours(b->in.data(), kPassN, b->mine.data(), stream); };
    p.course = [b, course, stream] { course(b->in.data(), kPassN, b->theirs.data(), stream); };
    p.compare = [b, stream] { return compare_bits(b->mine, b->theirs, stream); };
    p.library = [b, stream] {
      reduction::cub_sum(b->in.data(), kPassN, b->sum.data(), b->cub_temp, stream);
    };
    p.keep = b;
    return p;
  };
  return c;
}

// 32768 rows of 1000 classes (131 MB): the classifier's shape, many rows.
constexpr std::size_t kRows = 32768, kCols = 1000;

Case softmax_case() {
  Case c;
  c.exercise = "ex4";
  c.problem = "softmax_rows_warp_per_row over " + std::to_string(kRows) + " x " +
              std::to_string(kCols) + " logits in [-10, 10)";
  c.work = course::grade::softmax_work(kRows, kCols);
  c.prepare = [](cudaStream_t stream) {
    struct Buffers {
      DeviceBuffer<float> in, mine, theirs;
    };
    const std::size_t n = kRows * kCols;
    auto b = std::make_shared<Buffers>(
        Buffers{DeviceBuffer<float>(n), DeviceBuffer<float>(n), DeviceBuffer<float>(n)});
    reduction::fill_uniform(b->in.data(), n, 2027, -10.0f, 10.0f, stream);
    Prepared p;
    p.learner = [b, stream] {
      reduction::softmax_rows_warp_per_row(b->in.data(), b->mine.data(), kRows, kCols, stream);
    };
    p.course = [b, stream] {
      reduction_course::softmax_rows_warp_per_row(b->in.data(), b->theirs.data(), kRows, kCols,
                                                  stream);
    };
    // Both are within a few 1e-6 (relative) of the exact softmax (the tests' bound for 1000
    // columns and logits 20 apart); 1e-4 leaves room for another correct order of the sum and
    // still catches a wrong row.
    p.compare = [b, stream]() -> std::string {
      CUDA_CHECK(cudaStreamSynchronize(stream));
      const std::vector<float> y = course::to_host(b->mine), r = course::to_host(b->theirs);
      for (std::size_t i = 0; i < y.size(); ++i) {
        const double d = static_cast<double>(y[i]) - r[i];
        if (!(std::abs(d) <= 1e-4 * std::abs(static_cast<double>(r[i])) + 1e-30)) {
          char buf[160];
          std::snprintf(buf, sizeof buf, "row %zu column %zu: %.9g, the course's %.9g", i / kCols,
                        i % kCols, y[i], r[i]);
          return buf;
        }
      }
      return "";
    };
    p.keep = b;
    return p;
  };
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<Case> cases = {
      pass_case("ex1", "v3", reduction::kBlockThreads,
                reduction::reduce_pass_v3_sequential_addressing,
                reduction_course::reduce_pass_v3_sequential_addressing),
      pass_case("ex2", "v5", 2 * reduction::kBlockThreads, reduction::reduce_pass_v5_warp_shuffle,
                reduction_course::reduce_pass_v5_warp_shuffle),
      softmax_case(),
  };
  return course::grade::grade_main(argc, argv, "05", cases);
}
