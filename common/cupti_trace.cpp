// CUPTI observations for tests: see cupti_trace.hpp.
#include "common/cupti_trace.hpp"

#if COURSE_HAVE_CUPTI
#include <cupti.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>

#include "common/cuda_check.hpp"
#include "common/driver_api.hpp"

namespace course::cupti {

namespace {

void check(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return;
  const char* text = nullptr;
  cuptiGetResultString(r, &text);
  throw CuptiUnavailable(std::string(what) + " failed: " + (text != nullptr ? text : "?") +
                         " (is another CUPTI tool, e.g. compute-sanitizer, attached?)");
}

// ------------------------------------------------------------------------------ callback API
std::mutex g_api_mutex;
std::vector<ApiCall> g_calls;
CUpti_SubscriberHandle g_subscriber = nullptr;

void CUPTIAPI on_runtime_call(void*, CUpti_CallbackDomain domain, CUpti_CallbackId id,
                              const void* data) {
  if (domain != CUPTI_CB_DOMAIN_RUNTIME_API) return;
  const auto* cb = static_cast<const CUpti_CallbackData*>(data);
  if (cb->callbackSite != CUPTI_API_ENTER) return;
  ApiCall c;
  switch (id) {
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_ptsz_v7000: {
      // The _ptsz variant has the same parameters.
      const auto* p = static_cast<const cudaMemcpyAsync_v3020_params*>(cb->functionParams);
      c.kind = ApiCall::Kind::memcpy_async;
      c.dst = p->dst;
      c.src = p->src;
      c.bytes = p->count;
      c.copy_kind = p->kind;
      c.stream = p->stream;
      break;
    }
    case CUPTI_RUNTIME_TRACE_CBID_cudaEventRecord_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaEventRecord_ptsz_v7000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaEventRecordWithFlags_v11010:
    case CUPTI_RUNTIME_TRACE_CBID_cudaEventRecordWithFlags_ptsz_v11010: {
      // cudaEventRecordWithFlags' parameters begin with the same two.
      const auto* p = static_cast<const cudaEventRecord_v3020_params*>(cb->functionParams);
      c.kind = ApiCall::Kind::event_record;
      c.event = p->event;
      c.stream = p->stream;
      break;
    }
    case CUPTI_RUNTIME_TRACE_CBID_cudaEventSynchronize_v3020: {
      const auto* p = static_cast<const cudaEventSynchronize_v3020_params*>(cb->functionParams);
      c.kind = ApiCall::Kind::event_synchronize;
      c.event = p->event;
      break;
    }
    case CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_ptsz_v7000: {
      const auto* p = static_cast<const cudaStreamSynchronize_v3020_params*>(cb->functionParams);
      c.kind = ApiCall::Kind::stream_synchronize;
      c.stream = p->stream;
      break;
    }
    case CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020:
      c.kind = ApiCall::Kind::device_synchronize;
      break;
    case CUPTI_RUNTIME_TRACE_CBID_cudaStreamWaitEvent_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaStreamWaitEvent_ptsz_v7000: {
      const auto* p = static_cast<const cudaStreamWaitEvent_v3020_params*>(cb->functionParams);
      c.kind = ApiCall::Kind::stream_wait_event;
      c.stream = p->stream;
      c.event = p->event;
      break;
    }
    default:
      return;
  }
  const std::lock_guard<std::mutex> lock(g_api_mutex);
  g_calls.push_back(c);
}

constexpr CUpti_CallbackId kTracedCalls[] = {
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaEventRecord_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaEventRecord_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaEventRecordWithFlags_v11010,
    CUPTI_RUNTIME_TRACE_CBID_cudaEventRecordWithFlags_ptsz_v11010,
    CUPTI_RUNTIME_TRACE_CBID_cudaEventSynchronize_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaStreamWaitEvent_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaStreamWaitEvent_ptsz_v7000,
};

// ------------------------------------------------------------------------------ activity API
std::mutex g_activity_mutex;
std::vector<GpuActivity> g_activities;
constexpr std::size_t kBufferBytes = std::size_t{8} << 20;
constexpr std::size_t kAlign = 8;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kAlign, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;
}

cudaMemcpyKind to_copy_kind(uint8_t k) {
  switch (k) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
      return cudaMemcpyHostToDevice;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
      return cudaMemcpyDeviceToHost;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
      return cudaMemcpyDeviceToDevice;
    default:
      return cudaMemcpyDefault;
  }
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  std::vector<GpuActivity> got;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    GpuActivity a;
    if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL ||
        record->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      a.kind = GpuActivity::Kind::kernel;
      a.stream_id = k->streamId;
      a.start_ns = k->start;
      a.end_ns = k->end;
      a.name = k->name != nullptr ? k->name : "";
      a.grid = dim3(static_cast<unsigned>(k->gridX), static_cast<unsigned>(k->gridY),
                    static_cast<unsigned>(k->gridZ));
      a.block = dim3(static_cast<unsigned>(k->blockX), static_cast<unsigned>(k->blockY),
                     static_cast<unsigned>(k->blockZ));
      a.static_smem_bytes = k->staticSharedMemory;
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
      a.kind = GpuActivity::Kind::memcpy;
      a.stream_id = m->streamId;
      a.start_ns = m->start;
      a.end_ns = m->end;
      a.copy_kind = to_copy_kind(m->copyKind);
      a.bytes = m->bytes;
    } else {
      continue;
    }
    got.push_back(std::move(a));
  }
  std::free(buffer);
  const std::lock_guard<std::mutex> lock(g_activity_mutex);
  g_activities.insert(g_activities.end(), got.begin(), got.end());
}

}  // namespace

ApiTrace::ApiTrace() {
  {
    const std::lock_guard<std::mutex> lock(g_api_mutex);
    if (g_subscriber != nullptr) throw CuptiUnavailable("ApiTrace: one at a time");
    g_calls.clear();
  }
  check(cuptiSubscribe(&g_subscriber, on_runtime_call, nullptr), "cuptiSubscribe");
  for (CUpti_CallbackId id : kTracedCalls) {
    const CUptiResult r = cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_RUNTIME_API, id);
    if (r != CUPTI_SUCCESS) {
      cuptiUnsubscribe(g_subscriber);
      g_subscriber = nullptr;
      check(r, "cuptiEnableCallback");
    }
  }
}

ApiTrace::~ApiTrace() {
  cuptiUnsubscribe(g_subscriber);
  g_subscriber = nullptr;
}

std::vector<ApiCall> ApiTrace::calls() const {
  const std::lock_guard<std::mutex> lock(g_api_mutex);
  return g_calls;
}

ActivityTrace::ActivityTrace() {
  static const bool registered = [] {
    check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed),
          "cuptiActivityRegisterCallbacks");
    return true;
  }();
  (void)registered;
  CUDA_CHECK(cudaDeviceSynchronize());  // nothing from before the trace is in flight
  check(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
  {
    const std::lock_guard<std::mutex> lock(g_activity_mutex);
    g_activities.clear();
  }
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL),
        "cuptiActivityEnable(CONCURRENT_KERNEL)");
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY), "cuptiActivityEnable(MEMCPY)");
}

ActivityTrace::~ActivityTrace() {
  if (!stopped_) {
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMCPY);
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  }
}

std::vector<GpuActivity> ActivityTrace::stop() {
  CUDA_CHECK(cudaDeviceSynchronize());
  stopped_ = true;
  check(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "cuptiActivityDisable");
  check(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMCPY), "cuptiActivityDisable");
  check(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
  std::vector<GpuActivity> out;
  {
    const std::lock_guard<std::mutex> lock(g_activity_mutex);
    out.swap(g_activities);
  }
  std::sort(out.begin(), out.end(),
            [](const GpuActivity& a, const GpuActivity& b) { return a.start_ns < b.start_ns; });
  return out;
}

std::uint32_t stream_id(cudaStream_t stream) {
  CUDA_CHECK(cudaFree(nullptr));  // the primary context exists and is current
  CUcontext ctx = nullptr;
  CU_CHECK(course::driver().cuCtxGetCurrent(&ctx));
  std::uint32_t id = 0;
  check(cuptiGetStreamIdEx(ctx, reinterpret_cast<CUstream>(stream), 0, &id), "cuptiGetStreamIdEx");
  return id;
}

}  // namespace course::cupti

#else  // built without CUPTI: every observation says so

namespace course::cupti {
namespace {
[[noreturn]] void unavailable() {
  throw CuptiUnavailable(
      "this build has no CUPTI (CMake did not find it in the CUDA toolkit): install the "
      "toolkit's CUPTI (package cuda-cupti-NN) and configure again");
}
}  // namespace
ApiTrace::ApiTrace() {
  unavailable();
}
ApiTrace::~ApiTrace() = default;
std::vector<ApiCall> ApiTrace::calls() const {
  unavailable();
}
ActivityTrace::ActivityTrace() {
  unavailable();
}
ActivityTrace::~ActivityTrace() = default;
std::vector<GpuActivity> ActivityTrace::stop() {
  unavailable();
}
std::uint32_t stream_id(cudaStream_t) {
  unavailable();
}
}  // namespace course::cupti

#endif
