// Lesson 09: the exercise solutions. Read them after you have tried.
//
// Not compiled on its own: pipeline_host.cpp includes this file at its end, in the lesson build
// only. The exercise build (make check LESSON=09) defines LESSON_EXERCISE_BUILD, which leaves it
// out, and exercise.cu supplies the same functions.
#pragma once

#include "common/cuda_check.hpp"
#include "pipeline_host.hpp"

namespace lesson09 {

// Exercise 1. A full batch goes at once; a partial one only when its oldest frame has waited its
// budget (or no more frames will come): the latency of one frame is bounded by max_wait_us plus
// one batch's service time, and under load batches fill before the deadline.
int batch_to_take(int queued, double oldest_wait_us, int max_batch, double max_wait_us,
                  bool closing) {
  if (queued <= 0) return 0;
  if (queued >= max_batch) return max_batch;
  if (closing || oldest_wait_us >= max_wait_us) return queued;
  return 0;
}

// Exercise 2. The current device belongs to the calling host thread; set it before the thread
// creates anything, and check that it took.
void bind_worker_device(int device) {
  if (device < 0) {
    throw std::invalid_argument("bind_worker_device: device ordinal must be >= 0, got " +
                                std::to_string(device));
  }
  CUDA_CHECK(cudaSetDevice(device));
  int current = -1;
  CUDA_CHECK(cudaGetDevice(&current));
  if (current != device) {
    throw std::runtime_error("bind_worker_device: asked for device " + std::to_string(device) +
                             ", the thread is on " + std::to_string(current));
  }
}

// Exercise 3. The copy engine reads the pinned slot when the stream reaches the copy, which may
// be long after cudaMemcpyAsync returned (it queues behind the batch before it). Only the event
// recorded after the copy says the bytes have left the slot.
void release_after_copy(SlotRing& ring, const std::vector<int>& slots, cudaEvent_t copied) {
  CUDA_CHECK(cudaEventSynchronize(copied));
  for (int s : slots) ring.release(s);
}

// Exercise 4. Events order work between streams on the GPU: the compute stream waits for the
// copy stream's event without the host blocking, so this thread goes on to take the next batch
// while the copies and the work run (Programming Guide, "Asynchronous Concurrent Execution",
// events). `done` is recorded where the batch's last work is, on the compute stream.
void enqueue_after_copy(cudaStream_t copy, cudaStream_t compute, cudaEvent_t copied,
                        cudaEvent_t done, const std::function<void(cudaStream_t)>& work) {
  CUDA_CHECK(cudaEventRecord(copied, copy));
  if (compute != copy) CUDA_CHECK(cudaStreamWaitEvent(compute, copied, 0));  // one stream: in order
  work(compute);
  CUDA_CHECK(cudaEventRecord(done, compute));
}

}  // namespace lesson09
