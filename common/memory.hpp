// Move-only owners of device and pinned host memory.
//
// They release in the destructor, so an exception thrown between allocation and use leaks
// nothing. Element counts are in elements of T; bytes() gives the size in bytes.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common/cuda_check.hpp"

namespace course {

// count * size in bytes, for an allocation. Throws std::invalid_argument (naming `who`) when the
// product does not fit in std::size_t: a wrapped product would allocate a few bytes for an
// object that reports `count` elements, and the first write past them corrupts memory.
inline std::size_t checked_bytes(std::size_t count, std::size_t size, const char* who) {
  if (size != 0 && count > std::numeric_limits<std::size_t>::max() / size) {
    throw std::invalid_argument(std::string(who) + ": " + std::to_string(count) + " x " +
                                std::to_string(size) + " bytes does not fit in size_t");
  }
  return count * size;
}

// Device global memory from cudaMalloc (on the current device). A size of 0 allocates nothing
// and data() is nullptr. Throws std::invalid_argument if count * sizeof(T) overflows size_t
// (before any CUDA call), CudaError if the allocation fails.
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t count) : count_(count) {
    const std::size_t bytes = checked_bytes(count, sizeof(T), "DeviceBuffer");
    if (count_ > 0) CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr_), bytes));
  }
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : ptr_(std::exchange(other.ptr_, nullptr)), count_(std::exchange(other.count_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      reset();
      ptr_ = std::exchange(other.ptr_, nullptr);
      count_ = std::exchange(other.count_, 0);
    }
    return *this;
  }

  T* data() noexcept { return ptr_; }
  const T* data() const noexcept { return ptr_; }
  std::size_t size() const noexcept { return count_; }
  std::size_t bytes() const noexcept { return count_ * sizeof(T); }
  bool empty() const noexcept { return count_ == 0; }

 private:
  void reset() noexcept {
    // cudaFree's error is ignored: a destructor must not throw, and the only failures here
    // are a sticky error from earlier work, which the code that caused it has reported.
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = nullptr;
    count_ = 0;
  }
  T* ptr_ = nullptr;
  std::size_t count_ = 0;
};

// Page-locked (pinned) host memory from cudaHostAlloc. `flags` are cudaHostAlloc's:
// cudaHostAllocDefault, cudaHostAllocPortable, cudaHostAllocMapped, cudaHostAllocWriteCombined.
// Pinned memory is what the copy engines DMA from directly; cudaMemcpyAsync only overlaps with
// kernels when the host side is pinned. Throws std::invalid_argument if count * sizeof(T)
// overflows size_t (before any CUDA call), CudaError if the allocation fails.
template <class T>
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(std::size_t count, unsigned flags = cudaHostAllocDefault) : count_(count) {
    const std::size_t bytes = checked_bytes(count, sizeof(T), "PinnedBuffer");
    if (count_ > 0) CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&ptr_), bytes, flags));
  }
  ~PinnedBuffer() { reset(); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  PinnedBuffer(PinnedBuffer&& other) noexcept
      : ptr_(std::exchange(other.ptr_, nullptr)), count_(std::exchange(other.count_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept {
    if (this != &other) {
      reset();
      ptr_ = std::exchange(other.ptr_, nullptr);
      count_ = std::exchange(other.count_, 0);
    }
    return *this;
  }

  T* data() noexcept { return ptr_; }
  const T* data() const noexcept { return ptr_; }
  T& operator[](std::size_t i) noexcept { return ptr_[i]; }
  const T& operator[](std::size_t i) const noexcept { return ptr_[i]; }
  T* begin() noexcept { return ptr_; }
  T* end() noexcept { return ptr_ + count_; }
  std::size_t size() const noexcept { return count_; }
  std::size_t bytes() const noexcept { return count_ * sizeof(T); }

 private:
  void reset() noexcept {
    if (ptr_ != nullptr) cudaFreeHost(ptr_);
    ptr_ = nullptr;
    count_ = 0;
  }
  T* ptr_ = nullptr;
  std::size_t count_ = 0;
};

// Synchronous copies between a std::vector and a DeviceBuffer (blocking; for tests and setup),
// same element count both ways. Throw CudaError if the allocation or copy fails, including for
// an error left by an earlier kernel.
template <class T>
DeviceBuffer<T> to_device(const std::vector<T>& host) {
  DeviceBuffer<T> dev(host.size());
  if (!host.empty()) {
    CUDA_CHECK(cudaMemcpy(dev.data(), host.data(), dev.bytes(), cudaMemcpyHostToDevice));
    // From pageable memory, cudaMemcpy may return once the data sits in the driver's staging
    // buffer, before the DMA to `dev` finishes (Runtime API, "API synchronization behavior").
    // Work on a non-blocking stream is not ordered after it, so wait for the copy's stream.
    CUDA_CHECK(cudaStreamSynchronize(nullptr));
  }
  return dev;
}

template <class T>
std::vector<T> to_host(const DeviceBuffer<T>& dev) {
  std::vector<T> host(dev.size());
  if (!host.empty())
    CUDA_CHECK(cudaMemcpy(host.data(), dev.data(), dev.bytes(), cudaMemcpyDeviceToHost));
  return host;
}

}  // namespace course
