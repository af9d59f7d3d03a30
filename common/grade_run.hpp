// The GPU part of the speed grade (common/grade.hpp is the pure part): the main() of a lesson's
// grade binary, lessonNN_grade, which cmake/check_exercise.sh runs after the sanitizers.
//
//   lessonNN_grade [--reps N] [exK ...]   grade those exercises (all of the lesson's without)
//   lessonNN_grade --list                 print the graded exercises ("ex1 ex2 ex4"); no GPU needed
//
// The binary links the learner's exercise build (lessonNN_exercise_code) and the lesson's code
// compiled a second time with its namespace renamed (lessonNN_course_code: `reduction` becomes
// `reduction_course`, see add_lesson's GRADE_NAMESPACE), so both versions of each exercise run
// in one process, on the same inputs, interleaved.
//
// Where the toolkit has a library version of the same work (CUB's DeviceReduce::Sum for a
// reduction pass, cuBLAS's SGEMM for a GEMM), it is timed in the same rotation and printed for
// reference ("grade: exK for reference: ..."); the verdict compares you with the course only.
//
// How a case is timed (the harness of common/timing.hpp, gpu_time_ms): one untimed call of
// each, the results compared, then `reps` samples of each, rotating which goes first; each
// sample is one enqueue held behind the blocking kernel, so the GPU time has no launch latency
// in it, with the L2 flushed before it (the inputs come from DRAM, which is what the floor
// assumes); the medians are judged. A learner's kernel so slow that the samples would take more
// than about 10 s gets fewer samples (at least 5), and the line says how many.
//
// Output: a header (the device, its peaks, the clocks, the harness's floor), then per exercise
// one line of what is timed and what its floor counts, the library's line when there is one
//   grade: exK for reference: <the line of course::grade::library_line>
// and the verdict
//   grade exK: <the line of course::grade::judge>
// Exit status: 0 when no exercise FAILED (fast or correct but slow), 1 when one did, 2 for a
// usage error, 77 with no usable GPU (the reason on stderr).
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/grade.hpp"

namespace course::grade {

// One exercise's inputs and outputs on the GPU, and the versions to time (two, or three with the
// library's).
struct Prepared {
  std::function<void()> learner;         // enqueues yours on the case's stream
  std::function<void()> course;          // enqueues the course's
  std::function<std::string()> compare;  // after both ran: "" when the results agree, else
                                         // what differs (synchronises the stream)
  std::function<void()> library;         // enqueues the library's version (empty: none)
  // After the library's and the course's ran: "" when their results agree, else what differs.
  // Empty: not compared (CUB's whole sum against one pass's block sums, say).
  std::function<std::string()> library_compare;
  std::shared_ptr<void> keep;  // owns the buffers they use
};

struct Case {
  const char* exercise;  // "ex1": its rule is find_rule(lesson, exercise)
  std::string problem;   // what is timed, e.g. "one pass over n = 67108864 floats"
  Work work;             // what the floor counts
  std::string library;   // the library's version, named for the reference line (with
                         // Prepared::library), e.g. "cuBLAS cublasSgemm (FP32)"; "" for none
  // Allocates and fills the inputs on `stream` (only for the exercises asked for). Called with
  // a usable device; throws what CUDA calls throw.
  std::function<Prepared(cudaStream_t stream)> prepare;
};

// The device's peaks: DRAM from course::query_device (memory clock x bus width, attributes),
// FP32 as given (a lesson that counts FLOPs knows its FP32 peak; 0: not counted).
Peaks device_peaks(int device, double fp32_tflops);

// Times one prepared case (see the top of this file): fills learner_ms, course_ms, samples,
// l2_flushed, and mismatch from prepared.compare() (then nothing is timed). An exception from
// a call of yours, or a CUDA error that surfaces while yours is the only work in flight, goes
// to `error`; one from the course's to `course_error`; either stops the case. With
// prepared.library: library_ms, or library_error (then the library is left out of the samples;
// the case goes on).
Timed time_case(const Prepared& prepared, cudaStream_t stream, int reps);

// The whole binary: parse argv, check the GPU, print the header, grade each case asked for.
// `fp32_tflops` is called once a device is known (nullptr: FLOPs are not counted).
int grade_main(int argc, char** argv, const char* lesson, const std::vector<Case>& cases,
               const std::function<double(int device)>& fp32_tflops = nullptr);

}  // namespace course::grade
