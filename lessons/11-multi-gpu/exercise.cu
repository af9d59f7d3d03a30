// Lesson 11 exercises. Fill in the TODOs, then check your work:
//
//   make check LESSON=11                                            all the lesson's tests
//   build/lessons/11-multi-gpu/lesson11_exercise_tests "[ex1]"      only exercise 1's
//
// These functions replace the solutions (solutions.cuh, included by multi_gpu_host.cpp) in the
// exercise build (lesson11_exercise_tests): the tensor-parallel GEMM and the cross-device
// hand-off call YOUR code there. (The lesson binary, lesson11, always runs the solutions.) Until
// you solve an exercise, its stub fails loudly (an exception) or races, and its tests fail.
//
// The README's "Exercises" section has the hints; multi_gpu_host.hpp and multi_gpu.cuh document
// each function.
#include <cuda_runtime_api.h>

#include <stdexcept>

#include "common/cuda_check.hpp"
#include "multi_gpu.cuh"
#include "multi_gpu_host.hpp"

namespace lesson11 {

// Exercise 1: split n elements over `parts` GPUs (multi_gpu_host.hpp states the rule, with
// worked examples).
//   in:     n elements, parts GPUs, align (each part but the last a multiple of it).
//   out:    part p covers [offset[p], offset[p] + size[p]): every part but the last takes
//           c = ceil(n / parts) rounded up to a multiple of align, the last n - (parts - 1) c.
//   errors: std::invalid_argument for n < 1, parts < 1 or align < 1, and for a split that leaves
//           the last part empty (n - (parts - 1) c < 1). The latter's what() contains the text
//           "multiples of <align>" ("multiples of 8" for align = 8: the test checks exactly
//           that), e.g. "partition: 10 cannot be split over 4 GPUs in parts that are multiples
//           of 8: ...".
Partition partition(int n, int parts, int align) {
  (void)n;
  (void)parts;
  (void)align;
  throw std::logic_error("partition: TODO(exercise 1)");
}

// Exercise 2: nccl-tests' bus-bandwidth factors for `ranks` GPUs (ranks < 1:
// std::invalid_argument).
double allreduce_bus_factor(int ranks) {
  (void)ranks;
  throw std::logic_error("allreduce_bus_factor: TODO(exercise 2)");
}
double allgather_bus_factor(int ranks) {
  (void)ranks;
  throw std::logic_error("allgather_bus_factor: TODO(exercise 2)");
}

// Exercise 3: make the consumer's stream wait, on the GPU, for the producer's event (recorded
// on another device). The host must not block.
void enqueue_wait(int consumer_device, cudaStream_t consumer, cudaEvent_t producer_done) {
  (void)consumer_device;
  (void)consumer;
  (void)producer_done;
  // TODO(exercise 3): as it stands the consumer reads the flag whenever it gets to run.
}

}  // namespace lesson11
