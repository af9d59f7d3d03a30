// What the host asked the CUDA runtime to do, and what the GPU then ran, observed through CUPTI
// (the CUDA Profiling Tools Interface): for tests that assert an ORDER (the host waited for the
// copy before it read) or a CONCURRENCY (a copy overlapped a kernel of another stream). Both are
// observations, not times: no test built on them compares a duration with a threshold.
//
//   ApiTrace       runtime API calls (copies, event records and waits, synchronisations), in the
//                  order the host made them, with their arguments; CUPTI's callback API
//   ActivityTrace  kernels and copies as the GPU ran them: stream, start and end on one clock,
//                  launch configuration; CUPTI's activity API
//
// CUPTI takes one subscriber per process, and a tool such as compute-sanitizer or Nsight may be
// that subscriber already: the constructors then throw CuptiUnavailable. Tests built on these
// carry the tag [cupti], and cmake/check_exercise.sh leaves them out under compute-sanitizer.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace course::cupti {

// CUPTI refused (another subscriber, no CUPTI library, no device).
struct CuptiUnavailable : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// One runtime API call, recorded when the host entered it.
struct ApiCall {
  enum class Kind {
    memcpy_async,        // cudaMemcpyAsync: dst, src, bytes, copy_kind, stream
    event_record,        // cudaEventRecord, cudaEventRecordWithFlags: event, stream
    event_synchronize,   // cudaEventSynchronize: event
    stream_synchronize,  // cudaStreamSynchronize: stream
    device_synchronize,  // cudaDeviceSynchronize
    stream_wait_event,   // cudaStreamWaitEvent: stream, event
  };
  Kind kind{};
  void* dst = nullptr;
  const void* src = nullptr;
  std::size_t bytes = 0;
  cudaMemcpyKind copy_kind = cudaMemcpyDefault;
  cudaStream_t stream = nullptr;
  cudaEvent_t event = nullptr;
};

// Records the calls above, made by any thread of this process, from construction until
// destruction. One ApiTrace at a time. Throws CuptiUnavailable if CUPTI refuses.
class ApiTrace {
 public:
  ApiTrace();
  ~ApiTrace();
  ApiTrace(const ApiTrace&) = delete;
  ApiTrace& operator=(const ApiTrace&) = delete;
  // The calls recorded so far, in call order.
  std::vector<ApiCall> calls() const;
};

// One kernel or copy as the GPU ran it. Times in ns on CUPTI's clock (one clock for all
// records); streams by CUPTI's stream id (stream_id() maps a cudaStream_t to it).
struct GpuActivity {
  enum class Kind { kernel, memcpy };
  Kind kind{};
  std::uint32_t stream_id = 0;
  std::uint64_t start_ns = 0, end_ns = 0;
  // kernels: the (mangled) name, grid and block dimensions, static shared memory in bytes
  std::string name;
  dim3 grid{0, 0, 0}, block{0, 0, 0};
  int static_smem_bytes = 0;
  // copies: the direction (cudaMemcpyHostToDevice, DeviceToHost, DeviceToDevice or Default for
  // the other kinds CUPTI reports) and the size in bytes
  cudaMemcpyKind copy_kind = cudaMemcpyDefault;
  std::uint64_t bytes = 0;
};

// Records every kernel and copy that runs on the GPU from construction until stop(), which waits
// for the device and returns them in start order. One ActivityTrace at a time. Throws
// CuptiUnavailable if CUPTI refuses.
class ActivityTrace {
 public:
  ActivityTrace();
  ~ActivityTrace();
  ActivityTrace(const ActivityTrace&) = delete;
  ActivityTrace& operator=(const ActivityTrace&) = delete;
  std::vector<GpuActivity> stop();

 private:
  bool stopped_ = false;
};

// CUPTI's id of `stream` on the current device's primary context (the legacy default stream
// for nullptr). Throws CuptiUnavailable if CUPTI refuses.
std::uint32_t stream_id(cudaStream_t stream);

// True when the two ran at the same time for a while: their [start, end) intervals intersect.
inline bool overlap(const GpuActivity& a, const GpuActivity& b) {
  return a.start_ns < b.end_ns && b.start_ns < a.end_ns;
}

}  // namespace course::cupti
