// Lesson 11: the exercise solutions. Read them after you have tried.
//
// Not compiled on its own: multi_gpu_host.cpp includes this file at its end, in the lesson build
// only. The exercise build (make check LESSON=11) defines LESSON_EXERCISE_BUILD, which leaves it
// out, and exercise.cu supplies the same functions.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "common/cuda_check.hpp"
#include "multi_gpu.cuh"
#include "multi_gpu_host.hpp"
#include "tensor_parallel.hpp"

#ifdef COURSE_HAVE_NCCL
#include <nccl.h>
#endif

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

// Exercise 4, CPU part. The displacements are the exclusive prefix sum of the counts.
GatherLayout gather_layout(const std::vector<std::size_t>& counts) {
  if (counts.empty()) throw std::invalid_argument("gather_layout: no counts (one per rank)");
  GatherLayout layout;
  layout.count = counts;
  for (const std::size_t c : counts) {
    if (c > SIZE_MAX - layout.total) {
      throw std::invalid_argument("gather_layout: the counts add up to more than SIZE_MAX");
    }
    layout.displ.push_back(layout.total);
    layout.total += c;
  }
  return layout;
}

// Exercise 4, GPU part. NCCL has no all-gather of uneven counts (ncclAllGather takes one count
// for every rank), so it is built from one ncclBroadcast per rank, rooted at that rank, into
// its slice of every receive buffer, all inside one NCCL group: NCCL then issues them as one
// launch per GPU. Why broadcasts rather than ncclSend/ncclRecv pairs:
//  - every rank makes the same calls in the same order (roots 0, 1, ..., g-1, the same counts),
//    which is what NCCL requires of collectives on a communicator, and is easy to see;
//  - the root's own slice is copied by the same call (sendbuff != recvbuff), so there is no
//    extra local copy, and a one-rank group needs no special case;
//  - each broadcast runs NCCL's pipelined ring or tree over the links, where send/recv would be
//    g - 1 separate point-to-point transfers per rank.
// PyTorch's ProcessGroupNCCL::allgather does the same for tensors of unequal sizes (a coalesced
// group of out-of-place broadcasts).
void all_gather_uneven(const NcclGroup& group, const std::vector<const float*>& send,
                       const std::vector<float*>& recv, const std::vector<std::size_t>& counts) {
  const auto g = static_cast<std::size_t>(group.size());
  if (send.size() != g || recv.size() != g || counts.size() != g) {
    throw std::invalid_argument(
        "all_gather_uneven: one send buffer, one receive buffer and one count per rank "
        "expected (" +
        std::to_string(g) + "), got " + std::to_string(send.size()) + ", " +
        std::to_string(recv.size()) + " and " + std::to_string(counts.size()));
  }
  const GatherLayout layout = gather_layout(counts);
  for (std::size_t r = 0; r < g; ++r) {
    if ((counts[r] > 0 && send[r] == nullptr) || (layout.total > 0 && recv[r] == nullptr)) {
      throw std::invalid_argument("all_gather_uneven: rank " + std::to_string(r) +
                                  "'s send or receive buffer is null");
    }
  }
#ifdef COURSE_HAVE_NCCL
  group.group_calls([&](int rank) {
    const auto k = static_cast<std::size_t>(rank);
    for (int root = 0; root < group.size(); ++root) {
      const auto q = static_cast<std::size_t>(root);
      if (counts[q] == 0) continue;  // skipped on every rank alike: the counts are the same
      float* slice = recv[k] + layout.displ[q];
      // sendbuff is read on the root only; elsewhere pass the slice, as an in-place call would.
      const float* src = rank == root ? send[k] : slice;
      NCCL_CHECK(ncclBroadcast(src, slice, counts[q], ncclFloat, root, group.comm(rank),
                               group.stream(rank)));
    }
  });
#else
  throw std::runtime_error("all_gather_uneven: " + nccl_build_note());
#endif
}

}  // namespace lesson11
