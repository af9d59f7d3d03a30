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
// The README's "Exercises" section has the hints; multi_gpu_host.hpp, multi_gpu.cuh and
// tensor_parallel.hpp document each function.
#include <cuda_runtime_api.h>

#include <stdexcept>
#include <vector>

#include "common/cuda_check.hpp"
#include "multi_gpu.cuh"
#include "multi_gpu_host.hpp"
#include "tensor_parallel.hpp"

#ifdef COURSE_HAVE_NCCL
#include <nccl.h>  // only where CMake found NCCL: see exercise 4
#endif

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

// Exercise 4: an all-gather whose ranks contribute different counts (tensor_parallel.hpp states
// the contract). The column-parallel GEMM gathers its uneven column blocks with it.
//
// CPU part: where each rank's elements land.
//   in:     counts[r], the elements rank r contributes (0 allowed).
//   out:    count = counts; displ[r] = where rank r's elements start in every receive buffer,
//           rank order, no gaps; total = the sum.
//   errors: std::invalid_argument for no counts, or a sum that does not fit std::size_t.
GatherLayout gather_layout(const std::vector<std::size_t>& counts) {
  (void)counts;
  throw std::logic_error("gather_layout: TODO(exercise 4)");
}

// GPU part: the gather itself, as ONE group of NCCL calls on the group's streams
// (group.comm(r), group.stream(r); NcclGroup::group_calls runs a body per rank between
// ncclGroupStart and ncclGroupEnd). Asynchronous: the tests call group.synchronize().
//   in:     send[r], counts[r] floats on rank r's device; recv[r], gather_layout(counts).total
//           floats on rank r's device.
//   out:    every recv[k] = [send[0] | send[1] | ... ] at the layout's displacements.
//   errors: std::invalid_argument when send, recv or counts does not hold one entry per rank,
//           or a buffer is null where it must hold data, before any NCCL call.
// NCCL's functions exist only where CMake found NCCL: write the NCCL calls inside the
// #ifdef COURSE_HAVE_NCCL branch (the tests that call this are skipped without NCCL).
void all_gather_uneven(const NcclGroup& group, const std::vector<const float*>& send,
                       const std::vector<float*>& recv, const std::vector<std::size_t>& counts) {
  (void)group;
  (void)send;
  (void)recv;
  (void)counts;
#ifdef COURSE_HAVE_NCCL
  throw std::logic_error("all_gather_uneven: TODO(exercise 4)");
#else
  throw std::runtime_error("all_gather_uneven: " + nccl_build_note());
#endif
}

}  // namespace lesson11
