#include "common/grade.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

namespace course::grade {

// ------------------------------------------------------------------------------ the table
// Which exercises are graded, and what they must reach. fail_below > 0 only where the
// exercise's point is speed (its contract asks for a layout or a technique whose only effect is
// time); its tests cannot see that, the grade can. The fractions leave room for a different but
// reasonable solution (another index type, another unroll) and for noise; what falls below them
// has missed the point. Lesson 05 exercise 3 (the float4 split) is not graded: a CPU function
// whose tests check every field, and v6/v7 run the same with any correct split.
const std::vector<Rule>& rules() {
  static const std::vector<Rule> kRules = {
      // Lesson 05: v3's point is the sequential addressing (whole warps active, one bank per
      // lane), v5's the shuffle tail; softmax is about the numerics and the warp shuffles, so it
      // is timed and told, not failed.
      {"05", "ex1", "v3", 0.5,
       "look for bank conflicts (at each step lane t should touch partial[t] and "
       "partial[t + stride], 32 consecutive words), idle warps (the active threads should be "
       "0..stride-1, not every other one) and the load (thread t reads in[b * 256 + t], so a warp "
       "reads 128 contiguous bytes)"},
      {"05", "ex2", "v5", 0.5,
       "finish the last 32 values in registers (__shfl_down_sync, no shared memory and no "
       "barrier per step), add the two elements while loading, and stop the shared-memory tree "
       "at 64 values"},
      {"05", "ex4", "softmax", 0.0,
       "look for uncoalesced loads (lane l should read columns l, l + 32, ...: a warp then reads "
       "128 contiguous bytes), and do the max and the sum with warp shuffles across the row's 32 "
       "lanes rather than one lane walking the row"},
      // Lesson 07: exercise 1's point is the padding, 2's the register blocking and 3's the
      // fusion (one kernel, one pass over C): all speed.
      {"07", "ex1", "32x32 tiled GEMM", 0.5,
       "look for bank conflicts: the tile read down a column (W's, Ws[tx][k]) needs its float "
       "of padding per row, the other one none; and for uncoalesced loads (lanes should read "
       "consecutive k of one row of A or W)"},
      {"07", "ex2", "register-blocked GEMM", 0.5,
       "give thread (ty, tx) rows ty + 16i and columns tx + 16j, not a contiguous 4x4 (that "
       "makes 4-way bank conflicts and uncoalesced stores); store both tiles transposed "
       "([k][row]) so the inner loop walks along a row; one value from shared memory should feed "
       "4 FMAs"},
      {"07", "ex3", "linear_forward", 0.5,
       "it should run at exercise 2's speed: the bias and the activation belong in the write-out "
       "(epilogue_value), not in a second pass over Y; then see exercise 2's hints"},
  };
  return kRules;
}

const Rule* find_rule(const std::string& lesson, const std::string& exercise) {
  for (const Rule& r : rules()) {
    if (lesson == r.lesson && exercise == r.exercise) return &r;
  }
  return nullptr;
}

// ------------------------------------------------------------------------------ work and floor

namespace {
std::string printf_string(const char* format, double a, double b = 0.0, double c = 0.0) {
  char buf[160];
  std::snprintf(buf, sizeof buf, format, a, b, c);
  return buf;
}
}  // namespace

Work reduction_pass_work(std::size_t n) {
  Work w;
  w.dram_bytes = 4.0 * static_cast<double>(n);
  w.counted = "the " + std::to_string(n) + " input floats (" +
              printf_string("%.1f MB", w.dram_bytes / 1e6) +
              ") read once from DRAM; the block sums written are not counted";
  return w;
}

Work softmax_work(std::size_t rows, std::size_t cols) {
  Work w;
  w.dram_bytes = 4.0 * static_cast<double>(rows) * static_cast<double>(cols);
  w.counted = "the " + std::to_string(rows) + " x " + std::to_string(cols) + " input floats (" +
              printf_string("%.1f MB", w.dram_bytes / 1e6) +
              ") read once from DRAM; the rereads, the output and the exp()s are not counted";
  return w;
}

Work gemm_work(long long M, long long N, long long K, bool bias) {
  Work w;
  const double m = static_cast<double>(M), n = static_cast<double>(N), k = static_cast<double>(K);
  w.flops = 2.0 * m * n * k;
  w.dram_bytes = 4.0 * (m * k + n * k + (bias ? n : 0.0));
  w.counted = printf_string("2MNK = %.2f GFLOP, and A and W (%.1f MB) read once from DRAM",
                            w.flops / 1e9, 4.0 * (m * k + n * k) / 1e6) +
              (bias ? " with the bias" : "") + "; C is written, not read, and not counted";
  return w;
}

namespace {
double dram_ms(const Work& w, const Peaks& p) {
  return w.dram_bytes > 0.0 && p.dram_gbps > 0.0 ? w.dram_bytes / (p.dram_gbps * 1e9) * 1e3 : 0.0;
}
double fp32_ms(const Work& w, const Peaks& p) {
  return w.flops > 0.0 && p.fp32_tflops > 0.0 ? w.flops / (p.fp32_tflops * 1e12) * 1e3 : 0.0;
}
}  // namespace

double floor_ms(const Work& work, const Peaks& peaks) {
  const double d = dram_ms(work, peaks), f = fp32_ms(work, peaks);
  return d > f ? d : f;
}

std::string describe_floor(const Work& work, const Peaks& peaks) {
  const double d = dram_ms(work, peaks), f = fp32_ms(work, peaks);
  if (d <= 0.0 && f <= 0.0) return "none (no peak known for what it counts)";
  if (f > d) {
    return format_ms(f) + " ms = " +
           printf_string("%.2f GFLOP at %.1f TFLOP/s", work.flops / 1e9, peaks.fp32_tflops) +
           " FP32 peak";
  }
  return format_ms(d) +
         " ms = " + printf_string("%.1f MB at %.0f GB/s", work.dram_bytes / 1e6, peaks.dram_gbps) +
         " DRAM peak";
}

// ------------------------------------------------------------------------------ the verdict

const char* to_string(Verdict v) {
  switch (v) {
    case Verdict::fast:
      return "fast";
    case Verdict::slow:
      return "correct but slow";
    case Verdict::too_slow:
      return "too slow";
    case Verdict::wrong:
      return "wrong";
    default:
      return "refused";
  }
}

int speed_percent(double learner_ms, double course_ms) {
  return static_cast<int>(std::lround(100.0 * course_ms / learner_ms));
}

std::string format_ms(double ms) {
  if (!(ms > 0.0) || !std::isfinite(ms)) return printf_string("%g", ms);
  int decimals = 2 - static_cast<int>(std::floor(std::log10(ms)));
  if (decimals < 0) decimals = 0;
  if (decimals > 9) decimals = 9;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, ms);
  return buf;
}

Grade judge(const Rule& rule, const Timed& timed, const Work& work, const Peaks& peaks) {
  if (!(rule.fail_below >= 0.0 && rule.fail_below < kFastFrom)) {
    throw std::invalid_argument(std::string("judge: the rule of ") + rule.lesson + " " +
                                rule.exercise + " has fail_below " +
                                std::to_string(rule.fail_below) + "; expected [0, " +
                                std::to_string(kFastFrom) + ")");
  }
  const std::string yours = std::string("your ") + rule.subject;
  Grade g;
  g.failed = true;
  if (!timed.course_error.empty()) {
    g.verdict = Verdict::refused;
    g.line = std::string("not graded: the course's ") + rule.subject +
             " failed on the grade's input (" + timed.course_error +
             "): FAILED (the course's fault, not yours: report it)";
    return g;
  }
  if (!timed.error.empty()) {
    g.verdict = Verdict::wrong;
    g.line = yours + " failed on the grade's input (" + timed.error +
             "): FAILED (the grade's input is larger than the tests')";
    return g;
  }
  if (!timed.mismatch.empty()) {
    g.verdict = Verdict::wrong;
    g.line = yours + " differs from the course's on the grade's input (" + timed.mismatch +
             "): FAILED (the grade's input is larger than the tests': look for an index that "
             "overflows or a size assumed)";
    return g;
  }
  const std::string times = yours + ": " + format_ms(timed.learner_ms) +
                            " ms, the course's: " + format_ms(timed.course_ms) + " ms";
  const double floor = floor_ms(work, peaks);
  const auto broken = [&](double ms) { return !(ms > 0.0) || !std::isfinite(ms) || ms < floor; };
  if (broken(timed.course_ms)) {
    g.verdict = Verdict::refused;
    g.line = times + ": refused: the course's time is below the physical floor of " +
             describe_floor(work, peaks) +
             ": a broken measurement (the harness or the device's peaks are wrong, not your "
             "code: report it); FAILED";
    return g;
  }
  if (broken(timed.learner_ms)) {
    g.verdict = Verdict::refused;
    g.line = times + ": refused: your time is below the physical floor of " +
             describe_floor(work, peaks) +
             ": no GPU can do that work so fast, so the measurement is broken (does your "
             "kernel do all of its work on every call?); FAILED";
    return g;
  }
  g.percent = speed_percent(timed.learner_ms, timed.course_ms);
  const int fast_from = static_cast<int>(std::lround(100.0 * kFastFrom));
  const int fail_below = static_cast<int>(std::lround(100.0 * rule.fail_below));
  std::string how = "(" + std::to_string(g.percent) + "%; medians of " +
                    std::to_string(timed.samples) +
                    (timed.l2_flushed ? ", L2 flushed)" : ", L2 warm)");
  if (g.percent >= fast_from) {
    g.verdict = Verdict::fast;
    g.failed = false;
    g.line = times + " " + how + ": fast";
  } else if (fail_below > 0 && g.percent < fail_below) {
    g.verdict = Verdict::too_slow;
    g.line = times + " " + how + ": too slow: FAILED (below " + std::to_string(fail_below) +
             "% of the course's speed); " + rule.hint;
  } else {
    g.verdict = Verdict::slow;
    g.failed = false;
    g.line =
        times + " " + how + ": correct but slow" +
        (fail_below > 0 ? " (it fails below " + std::to_string(fail_below) + "%)"
                        : std::string(" (speed is not this exercise's point: it cannot fail)")) +
        "; " + rule.hint;
  }
  return g;
}

// ------------------------------------------------------------------------------ the library

std::string library_line(const std::string& library, const Timed& timed) {
  if (!timed.library_error.empty()) return library + ": not timed (" + timed.library_error + ")";
  const auto usable = [](double ms) { return ms > 0.0 && std::isfinite(ms); };
  if (!usable(timed.library_ms) || !usable(timed.learner_ms) || !usable(timed.course_ms)) {
    return "";
  }
  return library + ": " + format_ms(timed.library_ms) + " ms; yours runs at " +
         std::to_string(speed_percent(timed.learner_ms, timed.library_ms)) +
         "% of its speed, the course's at " +
         std::to_string(speed_percent(timed.course_ms, timed.library_ms)) + "%";
}

// ------------------------------------------------------------------------------ the command line

Args parse_args(const std::vector<std::string>& args, const std::vector<std::string>& graded,
                const std::string& lesson) {
  Args out;
  std::string all;
  for (const std::string& g : graded) all += (all.empty() ? "" : " ") + g;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      out.help = true;
      return out;
    }
    if (a == "--list") {
      out.list = true;
    } else if (a == "--reps") {
      if (i + 1 == args.size()) {
        out.error = "--reps needs a value (an integer in [1, 1000])";
        return out;
      }
      const std::string& v = args[++i];
      char* end = nullptr;
      errno = 0;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || end != v.c_str() + v.size() || errno != 0 || n < 1 || n > 1000) {
        out.error = "--reps takes an integer in [1, 1000], got '" + v + "'";
        return out;
      }
      out.reps = static_cast<int>(n);
    } else if (!a.empty() && a[0] == '-') {
      out.error = "unknown option '" + a + "' (try --help)";
      return out;
    } else if (std::find(graded.begin(), graded.end(), a) == graded.end()) {
      out.error = "'" + a + "': lesson " + lesson + " grades " + all + " only (try --help)";
      return out;
    } else if (std::find(out.exercises.begin(), out.exercises.end(), a) == out.exercises.end()) {
      out.exercises.push_back(a);
    }
  }
  return out;
}

}  // namespace course::grade
