// Lesson 08: CUB for large candidate counts, beside the lesson's own sort and compaction.
//
//   DetectionSorter   rank sort (postprocess.cu) | cub::DeviceRadixSort / DeviceSegmentedRadixSort
//   Compactor         warp-aggregated atomicAdd  | cub::DeviceSelect::If (ordered)
//
// What CUB asks of its caller, and what this file shows:
//   - two calls per algorithm: the first, with a null temporary-storage pointer, only reports
//     how many bytes it needs; the second does the work. We make the first call once, in the
//     constructor, for the largest problem, and allocate then: nothing is allocated per frame
//     (CUB documentation: "Device-wide primitives", temporary storage);
//   - a radix sort orders unsigned integer keys bit by bit, so a (score desc, index asc) order
//     must become one integer: sort_key (postprocess.cuh) is exactly that 64-bit key, and the
//     payload is the detection's position (a 32-bit value instead of a 24-byte struct, moved in
//     every pass), with one gather at the end;
//   - the item count of cub::DeviceRadixSort is a host argument. Our count lives on the device
//     (decode counted it), so the single-segment sort sorts the whole capacity, padding included,
//     rather than synchronise to read it. The segmented sort reads its segment offsets from
//     device memory, so there the padding is left out.
// Radix sort costs O(n) work per 8-bit digit pass, over several kernel launches; the rank sort
// O(n^2) comparisons in one launch. The benchmark's sweep (bench_postprocess.cpp, cub_sort/...)
// shows where the lines cross on the GPU that runs it.
#include "postprocess.cuh"

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>
#include <cub/device/device_select.cuh>
#include <thrust/iterator/counting_iterator.h>  // CUB's own counting iterator is gone in CCCL 3

#include <stdexcept>
#include <string>

#include "common/cuda_check.hpp"

namespace lesson08 {

namespace {

constexpr int kThreads = 256;
constexpr unsigned kFullMask = 0xffffffffu;

int blocks_for(std::size_t n) {
  return static_cast<int>((n + kThreads - 1) / kThreads);
}

// Keys and positions of every slot; padding (position >= count) gets key 0, below any real key
// (sort_key sets the top bit for every score >= 0). The segment offsets, for the segmented sort.
__global__ void make_sort_keys_kernel(const Detection* __restrict__ in,
                                      const int* __restrict__ counts, int capacity, int segments,
                                      std::uint64_t* __restrict__ keys, int* __restrict__ values,
                                      int* __restrict__ offsets) {
  const std::size_t total = static_cast<std::size_t>(capacity) * segments;
  const std::size_t p = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (p < static_cast<std::size_t>(segments)) {
    const int s = static_cast<int>(p);
    offsets[s] = s * capacity;                                        // begin
    offsets[segments + s] = s * capacity + min(counts[s], capacity);  // end
  }
  if (p >= total) return;
  const int s = static_cast<int>(p / capacity), r = static_cast<int>(p % capacity);
  keys[p] = r < min(counts[s], capacity) ? sort_key(in[p].score, in[p].index) : 0ull;
  values[p] = r;
}

// out[s][r] = in[s][position of the r-th largest key of segment s], r < counts[s].
__global__ void gather_sorted_kernel(const Detection* __restrict__ in,
                                     const int* __restrict__ counts,
                                     const int* __restrict__ positions, int capacity,
                                     std::size_t total, Detection* __restrict__ out) {
  const std::size_t p = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (p >= total) return;
  const std::size_t segment = p / capacity, base = segment * capacity;
  if (static_cast<int>(p - base) < min(counts[segment], capacity)) {
    out[p] = in[base + positions[p]];
  }
}

// The lesson's compaction (decode_kernel's), on its own: one atomicAdd per warp.
__global__ void warp_atomic_compact_kernel(const std::uint32_t* __restrict__ keys, int n,
                                           int* __restrict__ out, int* count) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const bool pass = i < n && keys[i] != 0;
  const unsigned passing = __ballot_sync(kFullMask, pass);
  if (passing == 0) return;
  const int lane = threadIdx.x & 31, leader = __ffs(passing) - 1;
  int base = 0;
  if (lane == leader) base = atomicAdd(count, __popc(passing));
  base = __shfl_sync(kFullMask, base, leader);
  if (pass) out[base + __popc(passing & ((1u << lane) - 1u))] = i;
}

struct Passes {
  const std::uint32_t* keys;
  __device__ bool operator()(int i) const { return keys[i] != 0; }
};

}  // namespace

const char* to_string(SortVersion version) {
  return version == SortVersion::cub_radix ? "cub_radix" : "rank_sort";
}
const char* to_string(CompactVersion version) {
  return version == CompactVersion::cub_select ? "cub_select" : "warp_atomic";
}

DetectionSorter::DetectionSorter(int segment_capacity, int segments, SortVersion version)
    : capacity_(segment_capacity), segments_(segments), version_(version) {
  if (segment_capacity < 1 || segment_capacity > (1 << 24) || segments < 1 || segments > 65535 ||
      static_cast<long long>(segment_capacity) * segments >= (1ll << 31)) {
    throw std::invalid_argument(
        "DetectionSorter: expected 1 <= segment_capacity <= 2^24, 1 <= segments <= 65535 and "
        "their product < 2^31, got " +
        std::to_string(segment_capacity) + " x " + std::to_string(segments));
  }
  if (version != SortVersion::rank_sort && version != SortVersion::cub_radix) {
    throw std::invalid_argument("DetectionSorter: unknown SortVersion");
  }
  if (version == SortVersion::rank_sort) return;  // no temporary storage at all
  const int total = segment_capacity * segments;
  keys_in_ = course::DeviceBuffer<std::uint64_t>(total);
  keys_out_ = course::DeviceBuffer<std::uint64_t>(total);
  values_in_ = course::DeviceBuffer<int>(total);
  values_out_ = course::DeviceBuffer<int>(total);
  offsets_ = course::DeviceBuffer<int>(2 * static_cast<std::size_t>(segments));
  std::size_t bytes = 0;  // the size query: no work, no memory touched
  if (segments == 1) {
    CUDA_CHECK(cub::DeviceRadixSort::SortPairsDescending(nullptr, bytes, keys_in_.data(),
                                                         keys_out_.data(), values_in_.data(),
                                                         values_out_.data(), total));
  } else {
    CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortPairsDescending(
        nullptr, bytes, keys_in_.data(), keys_out_.data(), values_in_.data(), values_out_.data(),
        total, segments, offsets_.data(), offsets_.data() + segments));
  }
  temp_ = course::DeviceBuffer<std::uint8_t>(bytes);
}

void DetectionSorter::enqueue(const Detection* in, const int* counts, Detection* out,
                              cudaStream_t stream) {
  if (in == nullptr || counts == nullptr || out == nullptr) {
    throw std::invalid_argument("DetectionSorter::enqueue: null pointer");
  }
  if (version_ == SortVersion::rank_sort) {
    detail::enqueue_rank_sort_segments(in, counts, capacity_, segments_, out, stream);
    return;
  }
  const int total = capacity_ * segments_;
  make_sort_keys_kernel<<<blocks_for(total), kThreads, 0, stream>>>(
      in, counts, capacity_, segments_, keys_in_.data(), values_in_.data(), offsets_.data());
  CUDA_CHECK_LAUNCH();
  std::size_t bytes = temp_.size();
  if (segments_ == 1) {
    CUDA_CHECK(cub::DeviceRadixSort::SortPairsDescending(temp_.data(), bytes, keys_in_.data(),
                                                         keys_out_.data(), values_in_.data(),
                                                         values_out_.data(), total, 0, 64, stream));
  } else {
    CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortPairsDescending(
        temp_.data(), bytes, keys_in_.data(), keys_out_.data(), values_in_.data(),
        values_out_.data(), total, segments_, offsets_.data(), offsets_.data() + segments_, 0, 64,
        stream));
  }
  gather_sorted_kernel<<<blocks_for(total), kThreads, 0, stream>>>(
      in, counts, values_out_.data(), capacity_, static_cast<std::size_t>(total), out);
  CUDA_CHECK_LAUNCH();
}

Compactor::Compactor(int capacity, CompactVersion version)
    : capacity_(capacity), version_(version) {
  if (capacity < 1) {
    throw std::invalid_argument("Compactor: capacity must be >= 1, got " +
                                std::to_string(capacity));
  }
  if (version != CompactVersion::warp_atomic && version != CompactVersion::cub_select) {
    throw std::invalid_argument("Compactor: unknown CompactVersion");
  }
  if (version == CompactVersion::cub_select) {
    std::size_t bytes = 0;
    CUDA_CHECK(cub::DeviceSelect::If(nullptr, bytes, thrust::counting_iterator<int>(0),
                                     static_cast<int*>(nullptr), static_cast<int*>(nullptr),
                                     capacity, Passes{nullptr}));
    temp_ = course::DeviceBuffer<std::uint8_t>(bytes);
  }
}

void Compactor::enqueue(const std::uint32_t* keys, int n, int* out_indices, int* d_count,
                        cudaStream_t stream) {
  if (n < 0 || n > capacity_) {
    throw std::invalid_argument("Compactor: expected 0 <= n <= " + std::to_string(capacity_) +
                                ", got " + std::to_string(n));
  }
  if (d_count == nullptr || (n > 0 && (keys == nullptr || out_indices == nullptr))) {
    throw std::invalid_argument("Compactor::enqueue: null pointer");
  }
  if (version_ == CompactVersion::warp_atomic || n == 0) {
    CUDA_CHECK(cudaMemsetAsync(d_count, 0, sizeof(int), stream));
    if (n == 0) return;
    warp_atomic_compact_kernel<<<blocks_for(n), kThreads, 0, stream>>>(keys, n, out_indices,
                                                                       d_count);
    CUDA_CHECK_LAUNCH();
    return;
  }
  std::size_t bytes = temp_.size();
  CUDA_CHECK(cub::DeviceSelect::If(temp_.data(), bytes, thrust::counting_iterator<int>(0),
                                   out_indices, d_count, n, Passes{keys}, stream));
}

}  // namespace lesson08
