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
// Each stub's comment is its contract (pipeline_host.hpp declares the functions); the README's
// "Exercises" section has folded hints, solutions.cuh the answers: try first.
#include <stdexcept>

#include "common/cuda_check.hpp"
#include "pipeline_host.hpp"

namespace lesson09 {

// Exercise 1 [ex1, CPU]: the dynamic batcher's decision, called under the ring's lock.
//   in:     queued (>= 0) frames are ready, the oldest of them has waited oldest_wait_us; the
//           worker runs batches of at most max_batch (>= 1); no frame should wait longer than
//           max_wait_us (>= 0) for its batch to fill; closing: no more frames will come.
//           Preconditions, not checked.
//   out:    how many frames the worker takes now, 0 meaning "keep waiting": nothing queued
//           gives 0; a full batch (queued >= max_batch) gives max_batch at once; a partial batch
//           goes, all of it, only once its oldest frame has waited max_wait_us or longer, or
//           when closing; otherwise 0 (so max_wait_us = 0 takes whatever is there).
//   errors: none.
//   tests:  a table of cases: nothing queued, full, more than a batch, partial before, at and
//           after the deadline, closing, max_wait_us = 0, max_batch = 1.
int batch_to_take(int queued, double oldest_wait_us, int max_batch, double max_wait_us,
                  bool closing) {
  (void)queued;
  (void)oldest_wait_us;
  (void)max_batch;
  (void)max_wait_us;
  (void)closing;
  throw std::logic_error("batch_to_take: TODO(exercise 1)");
}

// Exercise 2 [ex2]: per-thread device binding.
//   in:     device, a CUDA device ordinal.
//   does:   makes `device` the calling thread's current device (cudaSetDevice) and checks with
//           cudaGetDevice that it is.
//   errors: device < 0: std::invalid_argument, thrown before any CUDA call, whose what() contains
//           the text ">= 0" (the test checks exactly that), e.g.
//           "bind_worker_device: device ordinal must be >= 0, got -1".
//           A call the runtime refuses: course::CudaError (CUDA_CHECK). An ordinal past the last
//           device (device >= the device count) is not checked by hand: cudaSetDevice refuses
//           it, and the CudaError's code() is then cudaErrorInvalidDevice.
//   tests:  the negative ordinal (CPU); in a thread of its own, the last device is current after
//           the call while a new thread still starts on device 0 (GPU).
void bind_worker_device(int device) {
  (void)device;
  throw std::logic_error("bind_worker_device: TODO(exercise 2)");
}

// Exercise 3 [ex3, GPU]: the slot-reuse wait.
//   in:     the worker has enqueued on a stream the H2D copies out of the pinned `slots` of
//           `ring`, and recorded `copied` on that stream after them.
//   does:   returns every slot of `slots` to the producer (ring.release) once the copy engine
//           has finished reading it, not before: the producer overwrites a released slot with
//           its next frame. It returns once all of them are released.
//   errors: course::CudaError if the wait reports an error; the slots then stay in flight.
//   tests:  the race setup (one worker, batch 1, two slots, an engine of about 2 ms a frame, no
//           separate copy stream, 200 frames): no frame may come out wrong, missing or twice.
void release_after_copy(SlotRing& ring, const std::vector<int>& slots, cudaEvent_t copied) {
  (void)copied;
  // TODO(exercise 3)
  for (int s : slots) ring.release(s);  // wrong on purpose: the producer may now overwrite them
}

}  // namespace lesson09
