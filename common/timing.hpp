// GPU time without launch latency, end-to-end latency, an L2 flush, and the clocks a run ran at.
//
// Two different questions, two different clocks:
//
//  - GPU time: how long the GPU spends on the work. A pair of CUDA events recorded around one
//    launch on an idle stream does NOT measure that: the GPU reaches `start` as soon as it is
//    recorded, then waits for the launch to travel from the host (about 3.5 us on the course's
//    H200 host), so the interval holds the launch latency as well. gpu_time_ms() first holds the
//    stream with a blocking kernel that spins on a flag in pinned host memory, queues `start`,
//    the work and `stop` behind it, and only then releases the flag: everything reaches the GPU
//    before `start` executes, and the interval is the GPU's own time. This is NVBench's
//    "blocking kernel" method (NVIDIA/nvbench: nvbench/blocking_kernel.cuh, used by its "cold"
//    measurement, nvbench/detail/measure_cold.cuh, with an L2 flush). We chose
//    it over timing many back-to-back launches between one event pair because it keeps one
//    sample per call (medians, per-sample setup such as an L2 flush or putting managed pages
//    back) and needs nothing from the work but that it can be enqueued twice.
//  - End-to-end latency: what a caller feels, host call to completion. latency_ms() reads the
//    host's steady clock before the enqueue and after cudaStreamSynchronize: launch latency,
//    driver work and the synchronisation are all in it, as they are in a request.
//
// L2: by default samples run back to back, so data that fits the L2 (50 MiB on an H100, 60 MiB on
// the H200)
// can stay there between samples ("warm"). L2::flushed reads a buffer twice the L2's size
// before each sample, outside the timed interval, so the work starts from DRAM ("cold"). Every
// table says which one it shows.
//
// Copies: the hold kernel runs on a compute engine and a cudaMemcpyAsync on a copy engine, so a
// held copy's GPU time also holds the hand-over between the two. Measured on the H200 host
// (2026-12-01): a 4 KiB pinned host-to-device copy reads 9.1-9.5 us of GPU time but 7.9-8.4 us
// end to end. For small copies read the end-to-end latency; from a few MiB up the hand-over is
// lost in the transfer.
//
// Work that blocks the host thread cannot be timed with the hold: a pageable cudaMemcpyAsync,
// cudaMemcpy, cudaMalloc, a stream or device synchronisation, or anything that waits for the
// held stream would wait for a kernel that waits for the host. The blocking kernel gives up
// after a timeout (2 s), so nothing hangs, and gpu_time_ms() then throws std::runtime_error
// saying so: time such work with latency_ms(), which is what it costs a caller anyway.
//
// Under a profiler that serialises launches (Nsight Compute replays each profiled kernel; it
// starts one only after the previous one has finished) the held work cannot start while the hold
// kernel spins, so every hold would time out. With the environment variable COURSE_NO_HOLD set
// (to anything but "0" or empty) no hold kernel is launched: the events then enclose the launch
// latency as well, so read such a run's times as latency-inclusive (profile under it, time
// without it).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "common/cuda_check.hpp"
#include "common/stream.hpp"

namespace course {

enum class L2 { warm, flushed };

// Holds one stream at a time with a one-thread kernel spinning on a flag in mapped pinned host
// memory. hold(s) enqueues it (it returns at once); release() sets the flag, and the kernel
// exits; released_in_time() says whether it exited because of the flag (true) or its timeout.
// One hold at a time per object; reusable after the held work has completed. Throws CudaError
// if the pinned flags cannot be allocated or the kernel cannot be launched.
class StreamHold {
 public:
  StreamHold();
  ~StreamHold();
  StreamHold(const StreamHold&) = delete;
  StreamHold& operator=(const StreamHold&) = delete;

  void hold(cudaStream_t stream);  // nothing with COURSE_NO_HOLD set (see the top of this file)
  void release() noexcept;
  // Call after the held work has completed (e.g. after elapsed_ms on an event behind it).
  bool released_in_time() const noexcept;

 private:
  int* flags_ = nullptr;  // [0]: release (host writes), [1]: timed out (the kernel writes)
};

// The calling thread's StreamHold (created on first use, one per thread).
StreamHold& thread_stream_hold();

// Enqueues a read of a buffer twice the L2's size (allocated once per device, on first use) on
// `stream`: afterwards the L2 holds only clean lines of that buffer. Throws CudaError.
void flush_l2(cudaStream_t stream);

// Copies `bytes` from `src` to `dst` (device memory, both 16-byte aligned) with a grid-stride
// kernel moving 16 bytes per thread per step, the tail byte by byte: the copy ceiling a kernel
// can reach, beside cudaMemcpy's. Enqueued on `stream`. Throws std::invalid_argument for
// misaligned pointers, CudaError if the launch fails.
void copy_kernel(void* dst, const void* src, std::size_t bytes, cudaStream_t stream);

namespace detail {
[[noreturn]] void throw_hold_timed_out();
}

// GPU time of what `enqueue()` puts on `stream`, in milliseconds, launch latency excluded (see
// the top of this file). Blocks until the work finishes. `enqueue` must not block the host
// thread (see above); if it does, throws std::runtime_error once the hold times out. Throws
// CudaError if the work fails; exceptions from `enqueue` pass through (the stream is released).
template <class F>
float gpu_time_ms(cudaStream_t stream, F&& enqueue, L2 l2 = L2::warm) {
  if (l2 == L2::flushed) flush_l2(stream);
  StreamHold& h = thread_stream_hold();
  Event start, stop;
  h.hold(stream);
  try {
    start.record(stream);
    enqueue();
    stop.record(stream);
  } catch (...) {
    h.release();
    throw;
  }
  h.release();
  const float ms = elapsed_ms(start, stop);
  if (!h.released_in_time()) detail::throw_hold_timed_out();
  return ms;
}

// End-to-end latency of `enqueue()` in milliseconds: host steady clock from just before the
// call to the return of cudaStreamSynchronize(stream). With L2::flushed the flush is enqueued
// and waited for first, outside the interval. Throws CudaError if the work fails.
template <class F>
double latency_ms(cudaStream_t stream, F&& enqueue, L2 l2 = L2::warm) {
  if (l2 == L2::flushed) flush_l2(stream);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  const auto t0 = std::chrono::steady_clock::now();
  enqueue();
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Medians over `reps` samples (after one untimed warm-up call) of both clocks.
struct Timing {
  double gpu_ms = 0.0;      // gpu_time_ms: the GPU's own time
  double latency_ms = 0.0;  // latency_ms: host call to completion (0 when not measured)
};

// Median of a non-empty sample (the mean of the two middle values for an even count).
// Throws std::invalid_argument on an empty sample.
double median(std::vector<double> v);

// One warm-up call of `enqueue`, then `reps` GPU-time samples and, when `with_latency`, `reps`
// end-to-end samples; returns their medians. Throws std::invalid_argument if reps < 1, and what
// gpu_time_ms/latency_ms throw.
template <class F>
Timing measure(cudaStream_t stream, int reps, F&& enqueue, L2 l2 = L2::warm,
               bool with_latency = true) {
  if (reps < 1)
    throw std::invalid_argument("measure: reps must be >= 1, got " + std::to_string(reps));
  enqueue();  // warm-up: module loading, library heuristics, first-touch costs
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> gpu, lat;
  for (int r = 0; r < reps; ++r) gpu.push_back(gpu_time_ms(stream, enqueue, l2));
  if (with_latency) {
    for (int r = 0; r < reps; ++r) lat.push_back(latency_ms(stream, enqueue, l2));
  }
  return Timing{median(gpu), with_latency ? median(lat) : 0.0};
}

// The fixed GPU-side floor of gpu_time_ms, in milliseconds: the GPU time of an empty kernel (one
// block of one thread) measured exactly as every other measurement is, under the hold, L2 warm;
// the median of `reps` samples after one warm-up launch. The hold removes the host's launch
// latency, not what the GPU's front end does between the two events: processing the event
// records and dispatching the launch (2.8-2.9 us on the H200: 2.82 and 2.91 in two runs on
// 2026-12-02). Every GPU time of a launch includes it once, so print it beside microsecond
// results (a 6 us kernel is then perhaps 40% floor); subtracting it is an estimate, not a
// measurement, since the front end overlaps part of it with real work. Blocks until the samples
// finish. Throws std::invalid_argument if reps < 1 (before any CUDA call), CudaError if a launch
// fails, and what gpu_time_ms throws.
double gpu_time_floor_ms(cudaStream_t stream, int reps = 21);

// The caption line for a floor of `floor_ms` measured over `reps` samples by gpu_time_floor_ms:
// "harness floor: an empty kernel reads 2.84 us of GPU time (median of 21, held as every row
// is); each GPU time below includes it once" (the words common/bench.cpp prints), without
// indentation or newline. Never throws except std::bad_alloc.
std::string format_harness_floor(double floor_ms, int reps);

// gpu_time_floor_ms(stream, reps), measured now and formatted by format_harness_floor: the line
// a lesson prints once, right before its first table of GPU times. Blocks until the samples
// finish. Throws what gpu_time_floor_ms throws.
std::string harness_floor_caption(cudaStream_t stream, int reps = 21);

// The clocks and modes a run ran under, read through NVML (libnvidia-ml.so.1, loaded with
// dlopen as common/driver_api loads libcuda, so binaries start on machines without a driver).
// Read only: the course never sets clocks, power or persistence.
struct GpuClocks {
  bool available = false;  // false: NVML could not be loaded or queried; `why` says why
  std::string why;
  unsigned sm_mhz = 0, mem_mhz = 0;            // current SM and memory clocks, MHz
  unsigned sm_max_mhz = 0, mem_max_mhz = 0;    // the maximum (boost) clocks, MHz
  int persistence = -1;                        // 1 on, 0 off, -1 unknown
  unsigned temperature_c = 0;                  // GPU core temperature, degrees C
  unsigned power_mw = 0;                       // board power draw, mW
  unsigned long long clock_event_reasons = 0;  // NVML's nvmlClocksEventReason* bit mask
};

// Reads the state of CUDA device `device` (found in NVML by its PCI bus id, since NVML's
// numbering can differ from CUDA's). Never throws: failures come back with available = false.
GpuClocks read_gpu_clocks(int device = 0);

// "SM 1980/1980 MHz, memory 3201/3201 MHz, persistence on, 38 C, 121 W" or the reason NVML is
// unavailable.
std::string describe(const GpuClocks& c);

}  // namespace course
