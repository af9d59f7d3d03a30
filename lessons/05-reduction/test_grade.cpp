// CPU tests of the speed grade's logic (common/grade.hpp): the table, what the floor counts, the
// floor, the verdict and its line, the library's reference line and the binary's command line,
// against hand-computed cases. The grade itself (timing on a
// GPU) is lesson05_grade / lesson07_grade, run by `make check` after the sanitizers, never by
// ctest: tests do not assert a time. Here because lesson 05 is the first graded lesson; these
// tests carry no [exK] tag, so they are no exercise's tests.
#include <cmath>
#include <limits>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/grade.hpp"
#include "common/testing.hpp"

using course::grade::find_rule;
using course::grade::floor_ms;
using course::grade::format_ms;
using course::grade::Grade;
using course::grade::judge;
using course::grade::Peaks;
using course::grade::Rule;
using course::grade::Timed;
using course::grade::Verdict;
using course::grade::Work;
using course::testing::Approx;
using course::testing::Contains;

namespace {

// The H200's figures, as the lessons print them: 4814.3 GB/s (2 x 3201 MHz x 5120 bits), 66.9
// TFLOP/s (132 SMs x 128 lanes x 2 x 1980 MHz).
const Peaks kH200{4814.3, 66.9};

Timed timed(double learner_ms, double course_ms) {
  Timed t;
  t.learner_ms = learner_ms;
  t.course_ms = course_ms;
  t.samples = 21;
  t.l2_flushed = true;
  return t;
}

// A pass over 2^26 floats: 268435456 bytes, floor 268435456 / 4814.3e9 s = 0.0557579 ms.
const Work kPass = course::grade::reduction_pass_work(std::size_t{1} << 26);

const Rule& rule(const char* lesson, const char* exercise) {
  const Rule* r = find_rule(lesson, exercise);
  REQUIRE(r != nullptr);
  return *r;
}

}  // namespace

TEST_CASE("grade: the table is well formed and grades what it says", "[grade]") {
  std::set<std::string> seen;
  for (const Rule& r : course::grade::rules()) {
    CAPTURE(r.lesson, r.exercise);
    const std::string lesson = r.lesson, ex = r.exercise;
    CHECK(lesson.size() == 2);
    CHECK(ex.rfind("ex", 0) == 0);
    CHECK(ex.size() >= 3);
    CHECK(std::string(r.subject).size() > 0);
    CHECK(std::string(r.hint).size() > 20);
    CHECK(r.fail_below >= 0.0);
    CHECK(r.fail_below < course::grade::kFastFrom);
    CHECK(seen.insert(lesson + ":" + ex).second);  // one rule per exercise
  }
  // Lesson 05: v3 and v5 fail on speed, softmax is told only, the CPU split is not graded.
  CHECK(rule("05", "ex1").fail_below == 0.5);
  CHECK(rule("05", "ex2").fail_below == 0.5);
  CHECK(rule("05", "ex4").fail_below == 0.0);
  CHECK(find_rule("05", "ex3") == nullptr);
  // Lesson 07: padding, register blocking and fusion are all about speed.
  CHECK(rule("07", "ex1").fail_below == 0.5);
  CHECK(rule("07", "ex2").fail_below == 0.5);
  CHECK(rule("07", "ex3").fail_below == 0.5);
  CHECK(find_rule("01", "ex1") == nullptr);
  CHECK(find_rule("05", "ex10") == nullptr);
}

TEST_CASE("grade: what the floors count", "[grade]") {
  // 4 bytes per input float; nothing for the block sums written.
  const Work pass = course::grade::reduction_pass_work(1000);
  CHECK(pass.dram_bytes == 4000.0);
  CHECK(pass.flops == 0.0);
  CHECK_THAT(pass.counted, Contains("1000 input floats"));
  // Softmax: the input once.
  const Work soft = course::grade::softmax_work(32768, 1000);
  CHECK(soft.dram_bytes == 131072000.0);
  CHECK(soft.flops == 0.0);
  // GEMM 2048^3: 2 * 2048^3 = 17179869184 FLOPs; A and W, 2 * 2048 * 2048 floats = 33554432
  // bytes; a bias adds 2048 floats.
  const Work gemm = course::grade::gemm_work(2048, 2048, 2048);
  CHECK(gemm.flops == 17179869184.0);
  CHECK(gemm.dram_bytes == 33554432.0);
  CHECK(course::grade::gemm_work(2048, 2048, 2048, true).dram_bytes == 33554432.0 + 8192.0);
  // Not square: M = 3, N = 5, K = 7 -> 210 FLOPs, 4 * (21 + 35) = 224 bytes.
  const Work small = course::grade::gemm_work(3, 5, 7);
  CHECK(small.flops == 210.0);
  CHECK(small.dram_bytes == 224.0);
}

TEST_CASE("grade: the floor is the larger of bytes over bandwidth and FLOPs over peak", "[grade]") {
  // 1e9 bytes at 1000 GB/s: 1 ms. 2e12 FLOPs at 10 TFLOP/s: 200 ms.
  CHECK(floor_ms(Work{1e9, 0.0, ""}, Peaks{1000.0, 10.0}) == Approx(1.0));
  CHECK(floor_ms(Work{0.0, 2e12, ""}, Peaks{1000.0, 10.0}) == Approx(200.0));
  CHECK(floor_ms(Work{1e9, 2e12, ""}, Peaks{1000.0, 10.0}) == Approx(200.0));
  CHECK(floor_ms(Work{1e12, 2e9, ""}, Peaks{1000.0, 10.0}) == Approx(1000.0));
  // An unknown peak drops its term; nothing known, no floor.
  CHECK(floor_ms(Work{1e9, 2e12, ""}, Peaks{1000.0, 0.0}) == Approx(1.0));
  CHECK(floor_ms(Work{1e9, 2e12, ""}, Peaks{0.0, 0.0}) == 0.0);
  // The H200: a 2^26-float pass, 268435456 / 4814.3e9 s = 0.0557579 ms.
  CHECK(floor_ms(kPass, kH200) == Approx(0.0557579).epsilon(1e-5));
  CHECK(course::grade::describe_floor(kPass, kH200) ==
        "0.0558 ms = 268.4 MB at 4814 GB/s DRAM peak");
  // GEMM 2048^3 on the H200: 17179869184 / 66.9e12 s = 0.256799 ms (the bytes need 0.00697).
  const Work gemm = course::grade::gemm_work(2048, 2048, 2048);
  CHECK(floor_ms(gemm, kH200) == Approx(0.256799).epsilon(1e-5));
  CHECK(course::grade::describe_floor(gemm, kH200) ==
        "0.257 ms = 17.18 GFLOP at 66.9 TFLOP/s FP32 peak");
}

TEST_CASE("grade: times print with 3 significant digits", "[grade]") {
  CHECK(format_ms(0.312) == "0.312");
  CHECK(format_ms(0.16) == "0.160");
  CHECK(format_ms(0.0557579) == "0.0558");
  CHECK(format_ms(0.0029) == "0.00290");
  CHECK(format_ms(3.414) == "3.41");
  CHECK(format_ms(12.34) == "12.3");
  CHECK(format_ms(123.4) == "123");
  CHECK(format_ms(1234.4) == "1234");
  CHECK(format_ms(0.0) == "0");
  CHECK(course::grade::speed_percent(0.31, 0.16) == 52);  // 51.6
  CHECK(course::grade::speed_percent(0.1, 0.2) == 200);
}

TEST_CASE("grade: the verdict on the speed, taken on the rounded percentage", "[grade]") {
  const Rule& v3 = rule("05", "ex1");  // fails below 50%
  // The example of the design: 0.16 / 0.31 = 51.6% -> 52%: slow, not failed.
  Grade g = judge(v3, timed(0.31, 0.16), kPass, kH200);
  CHECK(g.verdict == Verdict::slow);
  CHECK(g.percent == 52);
  CHECK_FALSE(g.failed);
  CHECK_THAT(g.line, Contains("your v3: 0.310 ms, the course's: 0.160 ms (52%; medians of 21, "
                              "L2 flushed): correct but slow (it fails below 50%); look for "
                              "bank conflicts"));
  // 0.16 / 0.40 = 40%: too slow.
  g = judge(v3, timed(0.40, 0.16), kPass, kH200);
  CHECK(g.verdict == Verdict::too_slow);
  CHECK(g.percent == 40);
  CHECK(g.failed);
  CHECK_THAT(g.line, Contains("(40%; medians of 21, L2 flushed): too slow: FAILED (below 50% of "
                              "the course's speed); look for bank conflicts"));
  // The edge: exactly 50% is not below 50%; 49.75% shows as 50% and is judged so; 49.26% is 49%.
  CHECK(judge(v3, timed(0.2, 0.1), kPass, kH200).verdict == Verdict::slow);
  g = judge(v3, timed(0.201, 0.1), kPass, kH200);
  CHECK(g.percent == 50);
  CHECK(g.verdict == Verdict::slow);
  g = judge(v3, timed(0.203, 0.1), kPass, kH200);
  CHECK(g.percent == 49);
  CHECK(g.verdict == Verdict::too_slow);
  // Fast from 80%: 0.8 / 1.0 = 80% is fast; 0.8 / 1.007 = 79.4% -> 79% is not.
  g = judge(v3, timed(1.0, 0.8), kPass, kH200);
  CHECK(g.verdict == Verdict::fast);
  CHECK_FALSE(g.failed);
  CHECK(g.line ==
        "your v3: 1.00 ms, the course's: 0.800 ms (80%; medians of 21, L2 flushed): fast");
  CHECK(judge(v3, timed(1.007, 0.8), kPass, kH200).verdict == Verdict::slow);
  // Faster than the course: fast, over 100%.
  g = judge(v3, timed(0.1, 0.2), kPass, kH200);
  CHECK(g.verdict == Verdict::fast);
  CHECK(g.percent == 200);
  // A warm L2 is said so.
  Timed warm = timed(0.1, 0.1);
  warm.l2_flushed = false;
  warm.samples = 5;
  CHECK_THAT(judge(v3, warm, kPass, kH200).line, Contains("(100%; medians of 5, L2 warm)"));
}

TEST_CASE("grade: an exercise whose point is not speed is told, never failed", "[grade]") {
  const Rule& softmax = rule("05", "ex4");
  const Work w = course::grade::softmax_work(32768, 1000);    // floor 0.0272 ms on the H200
  const Grade g = judge(softmax, timed(1.0, 0.1), w, kH200);  // 10%
  CHECK(g.verdict == Verdict::slow);
  CHECK(g.percent == 10);
  CHECK_FALSE(g.failed);
  CHECK_THAT(g.line, Contains("correct but slow (speed is not this exercise's point: it cannot "
                              "fail); look for uncoalesced loads"));
}

TEST_CASE("grade: a time below the physical floor is refused as a broken measurement", "[grade]") {
  const Rule& v3 = rule("05", "ex1");
  // Yours at 0.05 ms, below 0.0558: refused, and the grade fails (no GPU moves 268 MB so fast).
  Grade g = judge(v3, timed(0.05, 0.16), kPass, kH200);
  CHECK(g.verdict == Verdict::refused);
  CHECK(g.failed);
  CHECK_THAT(g.line, Contains("your v3: 0.0500 ms, the course's: 0.160 ms: refused: your time is "
                              "below the physical floor of 0.0558 ms = 268.4 MB at 4814 GB/s "
                              "DRAM peak"));
  // At the floor itself: a time, not refused (0.06 / floor -> 108%).
  g = judge(v3, timed(floor_ms(kPass, kH200), 0.06), kPass, kH200);
  CHECK(g.verdict == Verdict::fast);
  // The course's time below the floor: the measurement is broken, and says it is not you.
  g = judge(v3, timed(0.16, 0.05), kPass, kH200);
  CHECK(g.verdict == Verdict::refused);
  CHECK(g.failed);
  CHECK_THAT(g.line, Contains("the course's time is below the physical floor"));
  CHECK_THAT(g.line, Contains("not your code"));
  // A GEMM faster than the FP32 peak allows.
  const Rule& tiled = rule("07", "ex1");
  const Work gemm = course::grade::gemm_work(2048, 2048, 2048);
  g = judge(tiled, timed(0.2, 2.0), gemm, kH200);
  CHECK(g.verdict == Verdict::refused);
  CHECK_THAT(g.line, Contains("0.257 ms = 17.18 GFLOP at 66.9 TFLOP/s FP32 peak"));
  // Times that are no times at all.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (double bad : {0.0, -1.0, nan, inf}) {
    CAPTURE(bad);
    CHECK(judge(v3, timed(bad, 0.16), kPass, kH200).verdict == Verdict::refused);
    CHECK(judge(v3, timed(0.16, bad), kPass, kH200).verdict == Verdict::refused);
  }
  // No peak known: no floor, any positive time is judged.
  CHECK(judge(v3, timed(1e-6, 1e-6), kPass, Peaks{}).verdict == Verdict::fast);
}

TEST_CASE("grade: wrong results and errors fail before any time is read", "[grade]") {
  const Rule& v3 = rule("05", "ex1");
  Timed t = timed(0.16, 0.16);
  t.mismatch = "block 17 of 262144: 1.5, the course's 1.25";
  Grade g = judge(v3, t, kPass, kH200);
  CHECK(g.verdict == Verdict::wrong);
  CHECK(g.failed);
  CHECK_THAT(g.line, Contains("your v3 differs from the course's on the grade's input (block 17 "
                              "of 262144: 1.5, the course's 1.25): FAILED"));
  t = timed(0.0, 0.0);
  t.error = "an illegal memory access was encountered";
  g = judge(v3, t, kPass, kH200);
  CHECK(g.verdict == Verdict::wrong);
  CHECK(g.failed);
  CHECK_THAT(g.line, Contains("your v3 failed on the grade's input (an illegal memory access"));
  t.course_error = "out of memory";
  g = judge(v3, t, kPass, kH200);  // the course's error is reported first: it is not yours
  CHECK(g.verdict == Verdict::refused);
  CHECK(g.failed);
  CHECK_THAT(g.line, Contains("the course's v3 failed on the grade's input (out of memory)"));
}

TEST_CASE("grade: a rule outside [0, kFastFrom) is refused", "[grade]") {
  Rule bad = rule("05", "ex1");
  bad.fail_below = 0.9;
  CHECK_THROWS_AS(judge(bad, timed(1.0, 1.0), kPass, kH200), std::invalid_argument);
  bad.fail_below = -0.1;
  CHECK_THROWS_AS(judge(bad, timed(1.0, 1.0), kPass, kH200), std::invalid_argument);
}

TEST_CASE("grade: the library's line is a reference, with both speeds against it", "[grade]") {
  // CUB at 0.07 ms; yours 0.31 (0.07 / 0.31 = 22.6% -> 23%), the course's 0.16 (43.75% -> 44%).
  Timed t = timed(0.31, 0.16);
  t.library_ms = 0.07;
  CHECK(course::grade::library_line("CUB DeviceReduce::Sum", t) ==
        "CUB DeviceReduce::Sum: 0.0700 ms; yours runs at 23% of its speed, the course's at 44%");
  // Faster than the library: over 100%.
  t = timed(1.0, 1.25);
  t.library_ms = 2.0;
  CHECK_THAT(course::grade::library_line("cuBLAS", t),
             Contains("yours runs at 200% of its speed, the course's at 160%"));
  // Nothing timed, or a time missing: no line.
  CHECK(course::grade::library_line("CUB", timed(0.31, 0.16)).empty());
  t = timed(0.0, 0.16);
  t.library_ms = 0.07;
  CHECK(course::grade::library_line("CUB", t).empty());
  t = timed(0.31, 0.16);
  t.library_ms = std::numeric_limits<double>::quiet_NaN();
  CHECK(course::grade::library_line("CUB", t).empty());
  // An error says so, whatever the times.
  t = timed(0.31, 0.16);
  t.library_ms = 0.07;
  t.library_error = "CUBLAS_STATUS_NOT_INITIALIZED";
  CHECK(course::grade::library_line("cuBLAS", t) ==
        "cuBLAS: not timed (CUBLAS_STATUS_NOT_INITIALIZED)");
  // The verdict does not read the library's time: a library 10x faster changes nothing.
  t = timed(0.2, 0.2);
  t.library_ms = 0.02;
  CHECK(judge(rule("05", "ex1"), t, kPass, kH200).verdict == Verdict::fast);
}

TEST_CASE("grade: the command line of lessonNN_grade", "[grade]") {
  using course::grade::Args;
  using course::grade::parse_args;
  const std::vector<std::string> graded = {"ex1", "ex2", "ex4"};
  // Nothing: every graded exercise (an empty list), 21 samples.
  Args a = parse_args({}, graded, "05");
  CHECK(a.error.empty());
  CHECK_FALSE(a.help);
  CHECK_FALSE(a.list);
  CHECK(a.reps == 21);
  CHECK(a.exercises.empty());
  // Exercises in the order given, each once; --reps anywhere.
  a = parse_args({"ex4", "--reps", "7", "ex1", "ex4"}, graded, "05");
  CHECK(a.error.empty());
  CHECK(a.reps == 7);
  CHECK(a.exercises == std::vector<std::string>{"ex4", "ex1"});
  CHECK(parse_args({"--reps", "1"}, graded, "05").reps == 1);
  CHECK(parse_args({"--reps", "1000"}, graded, "05").reps == 1000);
  // --list; --help (or -h) stops the parse, even before a bad word.
  CHECK(parse_args({"--list"}, graded, "05").list);
  a = parse_args({"--help", "ex9", "--reps", "x"}, graded, "05");
  CHECK(a.help);
  CHECK(a.error.empty());
  CHECK(parse_args({"-h"}, graded, "05").help);
  // Usage errors, each named.
  CHECK(parse_args({"ex3"}, graded, "05").error ==
        "'ex3': lesson 05 grades ex1 ex2 ex4 only (try --help)");
  CHECK(parse_args({"--reps"}, graded, "05").error ==
        "--reps needs a value (an integer in [1, 1000])");
  for (const char* bad : {"0", "1001", "-3", "7x", "", "x", "99999999999999999999"}) {
    CAPTURE(bad);
    CHECK(parse_args({"--reps", bad}, graded, "05").error ==
          std::string("--reps takes an integer in [1, 1000], got '") + bad + "'");
  }
  CHECK(parse_args({"--fast"}, graded, "05").error == "unknown option '--fast' (try --help)");
}
