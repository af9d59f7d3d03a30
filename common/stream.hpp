// Move-only owners of streams and events, and event-based GPU timing.
#pragma once

#include <cuda_runtime_api.h>

#include <utility>

#include "common/cuda_check.hpp"

namespace course {

// A stream created with cudaStreamCreateWithPriority. The default flags make it non-blocking:
// it does not synchronise with the legacy default stream (lesson 04 shows why that matters).
// `priority`: lower numbers run first; cudaDeviceGetStreamPriorityRange gives the range, and
// values outside it are clamped. Throws CudaError if creation fails (no device, bad flags);
// synchronize() throws CudaError for any error the stream's work raised.
class Stream {
 public:
  explicit Stream(unsigned flags = cudaStreamNonBlocking, int priority = 0) {
    CUDA_CHECK(cudaStreamCreateWithPriority(&stream_, flags, priority));
  }
  ~Stream() {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  Stream(Stream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}
  Stream& operator=(Stream&& other) noexcept {
    if (this != &other) {
      if (stream_ != nullptr) cudaStreamDestroy(stream_);
      stream_ = std::exchange(other.stream_, nullptr);
    }
    return *this;
  }

  cudaStream_t get() const noexcept { return stream_; }
  operator cudaStream_t() const noexcept { return stream_; }
  void synchronize() const { CUDA_CHECK(cudaStreamSynchronize(stream_)); }

 private:
  cudaStream_t stream_ = nullptr;
};

// An event from cudaEventCreateWithFlags. Use cudaEventDisableTiming for events that only order
// work between streams: they are cheaper to record and wait on. Throws CudaError if creation
// fails; record() and synchronize() throw CudaError as their CUDA calls do.
class Event {
 public:
  explicit Event(unsigned flags = cudaEventDefault) {
    CUDA_CHECK(cudaEventCreateWithFlags(&event_, flags));
  }
  ~Event() {
    if (event_ != nullptr) cudaEventDestroy(event_);
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  Event(Event&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}
  Event& operator=(Event&& other) noexcept {
    if (this != &other) {
      if (event_ != nullptr) cudaEventDestroy(event_);
      event_ = std::exchange(other.event_, nullptr);
    }
    return *this;
  }

  cudaEvent_t get() const noexcept { return event_; }
  operator cudaEvent_t() const noexcept { return event_; }
  void record(cudaStream_t stream = nullptr) { CUDA_CHECK(cudaEventRecord(event_, stream)); }
  void synchronize() const { CUDA_CHECK(cudaEventSynchronize(event_)); }

 private:
  cudaEvent_t event_ = nullptr;
};

// Milliseconds between two recorded events (resolution about 0.5 us). Waits for `stop`. Both
// must have been recorded and created without cudaEventDisableTiming; otherwise, or if the work
// before `stop` failed, throws CudaError.
inline float elapsed_ms(const Event& start, const Event& stop) {
  stop.synchronize();
  float ms = 0.0f;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  return ms;
}

// Time what `enqueue()` puts on `stream`, in milliseconds, with a pair of events around it.
// On an idle stream this interval also holds the launch latency (the GPU reaches `start` before
// the launch behind it arrives: about 3.5 us on the H200 host), so it is the right clock only for
// work that lasts milliseconds or for showing that effect. For a kernel's GPU time use
// gpu_time_ms (common/timing.hpp); for what a caller waits, latency_ms. Blocks until the work
// finishes. Throws CudaError if it (or anything on `stream`) fails;
// exceptions from `enqueue` pass through.
template <class F>
float time_on_stream_ms(cudaStream_t stream, F&& enqueue) {
  Event start, stop;
  start.record(stream);
  enqueue();
  stop.record(stream);
  return elapsed_ms(start, stop);
}

}  // namespace course
