// Lesson 09 exercises. Fill in the TODOs, then check your work:
//
//   make check LESSON=09                                          all the lesson's tests
//   build/lessons/09-pipeline/lesson09_exercise_tests "[ex1]"     only exercise 1's
//
// These functions replace the solutions (solutions.cuh, included by pipeline_host.cpp) in the
// exercise build (lesson09_exercise_tests): there the pipeline's workers call YOUR code. (The
// lesson binary, lesson09, always runs the solutions.) Until you solve an exercise, its stub
// fails loudly (an exception) or races, and its tests fail.
//
// The README's "Exercises" section has the hints; pipeline_host.hpp documents each function.
#include <stdexcept>

#include "common/cuda_check.hpp"
#include "pipeline_host.hpp"

namespace lesson09 {

// Exercise 1: the dynamic batcher's decision (pipeline_host.hpp lists the rules).
int batch_to_take(int queued, double oldest_wait_us, int max_batch, double max_wait_us,
                  bool closing) {
  (void)queued;
  (void)oldest_wait_us;
  (void)max_batch;
  (void)max_wait_us;
  (void)closing;
  throw std::logic_error("batch_to_take: TODO(exercise 1)");
}

// Exercise 2: per-thread device binding (pipeline_host.hpp).
//   in:     device, a CUDA device ordinal.
//   does:   makes `device` the calling thread's current device (cudaSetDevice) and checks with
//           cudaGetDevice that it is.
//   errors: device < 0: std::invalid_argument, thrown before any CUDA call, whose what() contains
//           the text ">= 0" (the test checks exactly that), e.g.
//           "bind_worker_device: device ordinal must be >= 0, got -1".
//           A call the runtime refuses: course::CudaError (CUDA_CHECK).
void bind_worker_device(int device) {
  (void)device;
  throw std::logic_error("bind_worker_device: TODO(exercise 2)");
}

// Exercise 3: the slot-reuse wait. The worker has enqueued the H2D copies out of `slots` and
// recorded `copied` after them. Return the slots to the producer (ring.release) only when the
// GPU has finished reading them. (What does cudaMemcpyAsync returning tell you? Nothing about
// when the copy engine reads the bytes.)
void release_after_copy(SlotRing& ring, const std::vector<int>& slots, cudaEvent_t copied) {
  (void)copied;
  // TODO(exercise 3): wait for `copied` first.
  for (int s : slots) ring.release(s);  // wrong on purpose: the producer may now overwrite them
}

}  // namespace lesson09
