#include "common/grade_run.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "common/cuda_check.hpp"
#include "common/device.hpp"
#include "common/stream.hpp"
#include "common/timing.hpp"

namespace course::grade {

Peaks device_peaks(int device, double fp32_tflops) {
  Peaks p;
  p.dram_gbps = query_device(device).peak_dram_gbps();
  p.fp32_tflops = fp32_tflops;
  return p;
}

namespace {

// The samples of all the versions should take about this long in all; a slow kernel gets fewer.
constexpr double kBudgetMs = 10000.0;
constexpr int kMinReps = 5;

// Which version a call belongs to, for the error it may raise.
enum class Side { learner, course, library };

std::string& error_of(Side side, Timed& t) {
  switch (side) {
    case Side::learner:
      return t.error;
    case Side::course:
      return t.course_error;
    default:
      return t.library_error;
  }
}

// Runs f; an exception becomes the text of the side's error. Returns false when f threw.
template <class F>
bool attempt(Side side, Timed& t, F&& f) {
  try {
    f();
    return true;
  } catch (const std::exception& e) {
    error_of(side, t) = e.what();
  } catch (...) {
    error_of(side, t) = "an exception that is not a std::exception";
  }
  return false;
}

}  // namespace

Timed time_case(const Prepared& prepared, cudaStream_t stream, int reps) {
  Timed t;
  t.l2_flushed = true;
  // One call of each, alone on the stream and waited for: module loading and first-touch costs
  // stay out of the samples, and a kernel that faults is named.
  const auto once = [&](const std::function<void()>& f) {
    f();
    CUDA_CHECK(cudaStreamSynchronize(stream));
  };
  if (!attempt(Side::course, t, [&] { once(prepared.course); })) return t;
  if (!attempt(Side::learner, t, [&] { once(prepared.learner); })) return t;
  if (!attempt(Side::learner, t, [&] { t.mismatch = prepared.compare(); })) return t;
  if (!t.mismatch.empty()) return t;
  // The library's untimed call (its workspace and heuristics are set up here, not in a sample);
  // a library that fails or disagrees is left out, and the grade goes on without it.
  bool with_library = static_cast<bool>(prepared.library);
  if (with_library) {
    std::string differs;
    with_library = attempt(Side::library, t, [&] {
      once(prepared.library);
      if (prepared.library_compare) differs = prepared.library_compare();
    });
    if (with_library && !differs.empty()) {
      t.library_error = "its result differs from the course's: " + differs;
      with_library = false;
    }
  }

  std::vector<double> yours, course, library;
  const auto fn = [&](Side side) -> const std::function<void()>& {
    return side == Side::learner  ? prepared.learner
           : side == Side::course ? prepared.course
                                  : prepared.library;
  };
  const auto samples = [&](Side side) -> std::vector<double>& {
    return side == Side::learner ? yours : side == Side::course ? course : library;
  };
  std::vector<Side> sides = {Side::learner, Side::course};
  if (with_library) sides.push_back(Side::library);
  for (int r = 0; r < reps; ++r) {
    // Rotate which goes first, so that none always follows another's work.
    for (std::size_t k = 0; k < sides.size(); ++k) {
      const Side side = sides[(static_cast<std::size_t>(r) + k) % sides.size()];
      if (side == Side::library && !with_library) continue;
      double ms = 0.0;
      if (!attempt(side, t, [&] { ms = gpu_time_ms(stream, fn(side), L2::flushed); })) {
        if (side != Side::library) return t;
        with_library = false;  // the reference is lost, not the grade
        continue;
      }
      samples(side).push_back(ms);
    }
    if (r == 0) {
      // One round of samples (with their flushes, roughly) times reps must fit the budget.
      double round_ms = yours.back() + course.back();
      if (with_library) round_ms += library.back();
      if (round_ms * reps > kBudgetMs) {
        reps = std::max(std::min(reps, kMinReps), static_cast<int>(kBudgetMs / round_ms));
      }
    }
  }
  t.learner_ms = median(yours);
  t.course_ms = median(course);
  t.samples = static_cast<int>(yours.size());
  if (with_library && !library.empty()) t.library_ms = median(library);
  return t;
}

namespace {

void usage(std::FILE* to, const char* program, const char* lesson, const std::string& graded) {
  std::fprintf(to,
               "usage: %s [--reps N] [exK ...] | --list | --help\n"
               "  times lesson %s's exercises (%s) against the course's solutions (and the "
               "library, for reference) and grades them; cmake/check_exercise.sh (make check) "
               "runs it after the sanitizers\n"
               "  --reps N  samples of each version, 1..1000 (default 21; fewer, down to 5, for\n"
               "            a kernel so slow that they would take more than about 10 s)\n"
               "  --list    print the graded exercises and exit (no GPU needed)\n",
               program, lesson, graded.c_str());
}

std::string join(const std::vector<const Case*>& cases) {
  std::string s;
  for (const Case* c : cases) s += (s.empty() ? "" : " ") + std::string(c->exercise);
  return s;
}

}  // namespace

int grade_main(int argc, char** argv, const char* lesson, const std::vector<Case>& cases,
               const std::function<double(int device)>& fp32_tflops) {
  const char* program = argc > 0 ? argv[0] : "grade";
  std::vector<const Case*> graded;
  for (const Case& c : cases) {
    if (find_rule(lesson, c.exercise) == nullptr) {
      std::fprintf(stderr,
                   "%s: lesson %s's case %s has no rule in the table of common/grade.cpp: add "
                   "one\n",
                   program, lesson, c.exercise);
      return 2;
    }
    graded.push_back(&c);
  }
  std::vector<std::string> names;
  for (const Case* c : graded) names.push_back(c->exercise);
  const std::vector<std::string> words(argv + (argc > 0 ? 1 : 0), argv + argc);
  const Args args = parse_args(words, names, lesson);
  if (!args.error.empty()) {
    std::fprintf(stderr, "%s: %s\n", program, args.error.c_str());
    return 2;
  }
  if (args.help) {
    usage(stdout, program, lesson, join(graded));
    return 0;
  }
  if (args.list) {
    std::printf("%s\n", join(graded).c_str());
    return 0;
  }
  const int reps = args.reps;
  std::vector<const Case*> selected;
  for (const std::string& name : args.exercises) {
    for (const Case* c : graded) {
      if (name == c->exercise) selected.push_back(c);
    }
  }
  if (selected.empty()) selected = graded;

  const DeviceAvailability gpu = check_device_available();
  if (!gpu.usable) {
    std::fprintf(stderr, "%s: no usable GPU: %s\n", program, gpu.reason.c_str());
    return 77;
  }
  int failed = 0;
  try {
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    const DeviceInfo info = query_device(device);
    const Peaks peaks = device_peaks(device, fp32_tflops ? fp32_tflops(device) : 0.0);
    Stream stream;
    const double harness_floor = gpu_time_floor_ms(stream);
    std::printf("grade: lesson %s on %s\n", lesson, summary(info).c_str());
    char fp32[96] = "not counted";
    if (peaks.fp32_tflops > 0.0) {
      std::snprintf(fp32, sizeof fp32, "%.1f TFLOP/s (SMs x FP32 lanes x 2 x boost clock)",
                    peaks.fp32_tflops);
    }
    std::printf("grade: peaks: DRAM %.0f GB/s (2 x memory clock x bus width), FP32 %s\n",
                peaks.dram_gbps, fp32);
    std::printf("grade: %s\n", describe(read_gpu_clocks(device)).c_str());
    std::printf(
        "grade: GPU time held behind a blocking kernel (common/timing.hpp: no launch latency), "
        "the L2 flushed before every sample; up to %d samples of each version (yours, the "
        "course's, and the library's for reference where there is one), rotating, medians "
        "compared; the harness's own floor (an empty kernel) %s ms\n",
        reps, format_ms(harness_floor).c_str());
    std::fflush(stdout);
    std::string unusable;  // set once an error has left the context unusable
    for (const Case* c : selected) {
      const Rule& rule = *find_rule(lesson, c->exercise);
      std::printf("grade: %s times %s; its floor counts %s: %s\n", c->exercise, c->problem.c_str(),
                  c->work.counted.c_str(), describe_floor(c->work, peaks).c_str());
      std::fflush(stdout);
      Timed t;
      if (!unusable.empty()) {
        t.error = "not run: " + unusable;
      } else {
        try {
          const Prepared p = c->prepare(stream);
          t = time_case(p, stream, reps);
        } catch (const std::exception& e) {
          t.course_error = std::string("setting up the inputs: ") + e.what();
        }
        // A fault in a kernel (an illegal address, say) is sticky: the context is lost, and every
        // later CUDA call fails with it. Say so rather than blame the next exercise's code.
        if (!t.error.empty() || !t.course_error.empty() || !t.library_error.empty()) {
          const cudaError_t sticky = cudaDeviceSynchronize();
          if (sticky != cudaSuccess) {
            unusable = std::string("the CUDA context is unusable after ") + c->exercise +
                       "'s error (" + cudaGetErrorName(sticky) + "): fix " + c->exercise + " first";
          }
        }
      }
      const Grade g = judge(rule, t, c->work, peaks);
      if (g.failed) ++failed;
      if (!c->library.empty()) {
        const std::string reference = library_line(c->library, t);
        if (!reference.empty()) {
          std::printf("grade: %s for reference: %s\n", c->exercise, reference.c_str());
        }
      }
      std::printf("grade %s: %s\n", c->exercise, g.line.c_str());
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::printf("grade: error: %s\n", e.what());
    return 1;
  }
  return failed == 0 ? 0 : 1;
}

}  // namespace course::grade
