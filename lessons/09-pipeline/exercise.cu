// Lesson 09 exercises. Fill in the TODOs, then check your work:
//
//   make check LESSON=09                                          all the lesson's tests
//   build/lessons/09-pipeline/lesson09_exercise_tests "[ex1]"     only exercise 1's
//
// These functions replace the solutions (solutions.cuh, included by pipeline_host.cpp) in the
// exercise build (lesson09_exercise_tests): there the pipeline's workers call YOUR code. (The
// lesson binary, lesson09, always runs the solutions.) Until you solve an exercise, its stub
// fails loudly (an exception), races, or (exercise 4) serialises, and its tests fail.
//
// Each stub's comment is its contract (pipeline_host.hpp declares the functions); the README's
// "Exercises" section has folded hints, solutions.cuh the answers: try first.
#include <functional>
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
//           separate copy stream, 200 frames): no frame may come out wrong, missing or twice;
//           and "release_after_copy waits for its event and only for it" (gates: kernels that
//           hold the stream until the test opens them): no slot released while the copies are
//           held, all released while work queued after `copied` is still held.
void release_after_copy(SlotRing& ring, const std::vector<int>& slots, cudaEvent_t copied) {
  (void)copied;
  // TODO(exercise 3)
  for (int s : slots) ring.release(s);  // wrong on purpose: the producer may now overwrite them
}

// Exercise 4 [ex4, GPU]: the batch's event protocol between the copy and the compute stream.
//   in:     the worker has queued a batch's H2D copies on `copy`, nothing after them yet;
//           `compute` is the stream its device work goes on (the same stream as `copy` when the
//           worker has no copy stream); work(s) enqueues that work (letterbox, engine,
//           postprocess, D2H of the results, or their CUDA graph) on the stream s it is given.
//   does:   records `copied` on `copy` after the copies; runs work(compute) such that none of
//           it starts on the GPU before the copies have finished, while the calling thread does
//           not wait for them; records `done` on `compute` once all of the work is queued.
//           Returns without waiting for the GPU.
//   errors: course::CudaError for a failed CUDA call; an exception from work propagates.
//   tests:  "enqueue_after_copy orders the work after the copies on the GPU" (gates: kernels
//           that hold a stream until the test opens them): returns while the copies are held,
//           work called once with `compute`, nothing of it before the copies, `copied` complete
//           with the copies, `done` only after the work; and the pipeline end to end with a
//           copy stream, graphs on and off: every frame right, none missing or twice.
void enqueue_after_copy(cudaStream_t copy, cudaStream_t compute, cudaEvent_t copied,
                        cudaEvent_t done, const std::function<void(cudaStream_t)>& work) {
  (void)copied;
  (void)done;
  // TODO(exercise 4). A stand-in that keeps the pipeline's answers right but serial: this
  // thread waits for the copies and then for the work, and neither event is recorded.
  CUDA_CHECK(cudaStreamSynchronize(copy));
  work(compute);
  CUDA_CHECK(cudaStreamSynchronize(compute));
}

}  // namespace lesson09
