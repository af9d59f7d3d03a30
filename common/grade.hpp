// The speed grade of `make check` (cmake/check_exercise.sh, its stage "grade"): once an
// exercise's tests and the sanitizers have passed on a GPU, its kernel is timed against the
// course's solution of the same exercise, on the same GPU, in the same process, and judged:
//
//   your v3: 0.310 ms, the course's: 0.160 ms (52%; medians of 21, L2 flushed): correct but slow;
//   look for bank conflicts (...)
//
// This file is the pure part, with no CUDA in it (common/test_grade.cpp checks it on a CPU):
//  - the one table of what each graded exercise must reach (kRules in grade.cpp): only the
//    exercises whose point is speed fail on speed, the others are timed and told;
//  - what a kernel must at least move or compute (Work), and the physical floor that follows
//    from the device's peaks: a time below it is refused as a broken measurement;
//  - the verdict and the line it prints.
//  - the library's time beside them (CUB, cuBLAS): printed for reference, never judged;
//  - the binary's command line.
// The GPU part (the timing, the device's peaks, the binary's main) is common/grade_run.hpp; each
// graded lesson has a grade_<topic>.cpp with its cases (add_lesson(... GRADE ...)).
//
// The speed is the course's time over yours: 100% is the course's speed, 52% takes 1.9x as long.
// It is shown rounded to a whole percent, and the verdict is taken on that shown number:
//   >= kFastFrom (80%)             fast
//   below the rule's fail_below    too slow: FAILED   (fail_below = 0: never)
//   otherwise                      correct but slow
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace course::grade {

// One graded exercise.
struct Rule {
  const char* lesson;    // "05"
  const char* exercise;  // "ex1"
  const char* subject;   // what the line calls the learner's code: "v3" gives "your v3: ..."
  double fail_below;     // the grade FAILS below this fraction of the course's speed; 0 for an
                         // exercise whose point is not speed: then it is timed and told, never
                         // failed
  const char* hint;      // what to look for when it is slow
};

// At or above this fraction of the course's speed: "fast".
constexpr double kFastFrom = 0.8;

// The table, every graded exercise of every lesson.
const std::vector<Rule>& rules();
// The rule of lesson `lesson` ("05"), exercise `exercise` ("ex1"); nullptr if it has none.
const Rule* find_rule(const std::string& lesson, const std::string& exercise);

// What a kernel must at least do, whatever its code: the bytes it must read from DRAM and the
// floating-point operations it must execute; `counted` says how, in words (printed).
// Only what is certain counts: with the L2 flushed before each sample the inputs must come from
// DRAM, so their bytes count; writes do not (the L2 is write-back and may still hold them when
// the kernel ends), nor does any second read (a cache may serve it).
struct Work {
  double dram_bytes = 0.0;
  double flops = 0.0;
  std::string counted;
};
// A pass of a sum over n floats (lesson 05, v3 and v5): 4n bytes of input; the block sums
// written are not counted.
Work reduction_pass_work(std::size_t n);
// Row softmax of rows x cols floats (lesson 05, exercise 4): 4 rows cols bytes of input, read
// once (the second and third reads may hit a cache); the output is not counted. Its few FLOPs
// per element are not counted either.
Work softmax_work(std::size_t rows, std::size_t cols);
// C = A * W^T (M x K times K x N, lesson 07): 2MNK FLOPs (one multiply and one add per term) and
// 4(MK + NK) bytes of A and W, each read at least once; C is written, not read (beta = 0), and
// a bias of N floats (bias = true) adds 4N bytes.
Work gemm_work(long long M, long long N, long long K, bool bias = false);

// The device's peaks: DRAM bandwidth in GB/s (1e9 bytes/s) and FP32 throughput in TFLOP/s
// (1e12/s). A peak of 0 is unknown: its term drops out of the floor.
struct Peaks {
  double dram_gbps = 0.0;
  double fp32_tflops = 0.0;
};

// The time the work needs at the peaks, in ms: the larger of dram_bytes / DRAM peak and
// flops / FP32 peak (each term only when both its count and its peak are positive); 0 when
// neither term applies. No real run can be faster.
double floor_ms(const Work& work, const Peaks& peaks);
// "0.0558 ms = 268.4 MB at 4814 GB/s" (the binding term), or "none (no peak known)".
std::string describe_floor(const Work& work, const Peaks& peaks);

// What the GPU part measured for one exercise.
struct Timed {
  double learner_ms = 0.0;   // median GPU time of yours
  double course_ms = 0.0;    // median GPU time of the course's
  int samples = 0;           // of each
  bool l2_flushed = true;    // the L2 was flushed before every sample
  std::string mismatch;      // not empty: your result differs from the course's on the grade's
                             // input (what differs); the times then mean nothing
  std::string error;         // not empty: your code threw, or the run failed (what())
  std::string course_error;  // not empty: the course's code threw (not yours: report it)
  // The library's version of the same work (CUB, cuBLAS), when the case has one: timed in the
  // same rotation, for reference only (the verdict never reads it).
  double library_ms = 0.0;    // its median GPU time; 0 when not timed
  std::string library_error;  // not empty: the library's call failed, or its result differs
};

enum class Verdict { fast, slow, too_slow, wrong, refused };
const char* to_string(Verdict v);  // "fast", "correct but slow", "too slow", "wrong", "refused"

struct Grade {
  Verdict verdict = Verdict::refused;
  int percent = 0;     // the course's time over yours, rounded (0 when not timed)
  bool failed = true;  // too slow, wrong, an error, or a refused measurement
  std::string line;    // what make check prints after "grade exK: "
};

// The verdict on one exercise. In this order:
//  1. an error of the course's code, then of yours: FAILED, saying whose;
//  2. a mismatch: FAILED (wrong on the grade's input, which is larger than the tests');
//  3. a time that is not a positive finite number, or below floor_ms(work, peaks): refused, and
//     FAILED: a time no hardware can reach means the measurement is broken, not that the code is
//     fast (the course's time below the floor: the harness or the peaks are wrong, not you);
//  4. the speed, rounded: fast / correct but slow / too slow: FAILED, as at the top of this file.
// Throws std::invalid_argument if rule.fail_below is outside [0, kFastFrom).
Grade judge(const Rule& rule, const Timed& timed, const Work& work, const Peaks& peaks);

// round(100 * course_ms / learner_ms); both must be positive.
int speed_percent(double learner_ms, double course_ms);

// A time in ms with 3 significant digits and no exponent: "0.312", "0.0558", "3.41", "123".
std::string format_ms(double ms);

// The reference line of the library `library` (its name, as the case gives it), or "" when no
// library time was measured (library_ms 0, or the learner's or the course's time missing):
//   "CUB DeviceReduce::Sum: 0.0700 ms; yours runs at 23% of its speed, the course's at 44%"
// (the library's time over each, rounded). With library_error set: "<library>: not timed
// (<library_error>)". Never a verdict: the grade compares you with the course.
std::string library_line(const std::string& library, const Timed& timed);

// The command line of lessonNN_grade (common/grade_run.hpp):
//   [--reps N] [exK ...] | --list | --help
struct Args {
  bool help = false;                   // --help or -h: print the usage, exit 0
  bool list = false;                   // --list: print the graded exercises, exit 0
  int reps = 21;                       // --reps N, 1..1000: samples of each version
  std::vector<std::string> exercises;  // the exercises asked for, in order, each once; empty:
                                       // all of `graded`
  std::string error;                   // not empty: a usage error (exit 2), what is wrong
};
// Parses argv[1..] (without the program name). `graded` lists the lesson's graded exercises,
// `lesson` is "05": both only for the checks and the messages. --help stops the parse (what
// follows it is not read).
Args parse_args(const std::vector<std::string>& args, const std::vector<std::string>& graded,
                const std::string& lesson);

}  // namespace course::grade
