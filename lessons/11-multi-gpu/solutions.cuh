// Lesson 11: the exercise solutions. Read them after you have tried.
//
// Not compiled on its own: multi_gpu_host.cpp includes this file at its end, in the lesson build
// only. The exercise build (make check LESSON=11) defines LESSON_EXERCISE_BUILD, which leaves it
// out, and exercise.cu supplies the same functions.
#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

#include "common/cuda_check.hpp"
#include "multi_gpu.cuh"
#include "multi_gpu_host.hpp"

namespace lesson11 {

// Exercise 1. Equal parts of ceil(n / parts), each rounded up to the alignment so every part
// starts on an aligned element; the last part absorbs the shortfall and must not be empty.
Partition partition(int n, int parts, int align) {
  if (n < 1 || parts < 1 || align < 1) {
    throw std::invalid_argument(
        "partition: need n >= 1, parts >= 1, align >= 1; got n = " + std::to_string(n) +
        ", parts = " + std::to_string(parts) + ", align = " + std::to_string(align));
  }
  const long long per = (static_cast<long long>(n) + parts - 1) / parts;
  const long long c = (per + align - 1) / align * align;
  const long long last = n - (parts - 1) * c;
  if (last < 1) {
    throw std::invalid_argument("partition: " + std::to_string(n) + " cannot be split over " +
                                std::to_string(parts) + " GPUs in parts that are multiples of " +
                                std::to_string(align) + ": the first " + std::to_string(parts - 1) +
                                " parts of " + std::to_string(c) + " leave " +
                                std::to_string(last) +
                                " for the last. Allowed: n > (parts - 1) x ceil(n / parts) "
                                "rounded up to the alignment (n >= parts x align always works)");
  }
  Partition p;
  for (int i = 0; i < parts; ++i) {
    p.offset.push_back(static_cast<int>(i * c));
    p.size.push_back(static_cast<int>(i + 1 < parts ? c : last));
  }
  return p;
}

// Exercise 2. In a ring all-reduce (reduce-scatter, then all-gather) each rank sends and receives
// (n - 1) / n of the buffer twice; in a ring all-gather once. Dividing by that fraction maps any
// n onto the link's own bandwidth.
namespace {
void check_ranks(const char* who, int ranks) {
  if (ranks < 1) throw std::invalid_argument(std::string(who) + ": ranks must be >= 1");
}
}  // namespace
double allreduce_bus_factor(int ranks) {
  check_ranks("allreduce_bus_factor", ranks);
  return 2.0 * (ranks - 1) / ranks;
}
double allgather_bus_factor(int ranks) {
  check_ranks("allgather_bus_factor", ranks);
  return static_cast<double>(ranks - 1) / ranks;
}

// Exercise 3. cudaStreamWaitEvent takes an event of any device (Programming Guide, "Stream and
// Event Behavior": it "will succeed even if the input stream and input event are associated to
// different devices"); the wait happens on the GPU, the host does not block. The stream's device
// is made current first, the rule for every call that enqueues work.
void enqueue_wait(int consumer_device, cudaStream_t consumer, cudaEvent_t producer_done) {
  CUDA_CHECK(cudaSetDevice(consumer_device));
  CUDA_CHECK(cudaStreamWaitEvent(consumer, producer_done, 0));
}

}  // namespace lesson11
