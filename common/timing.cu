#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>

#include "common/memory.hpp"
#include "common/timing.hpp"

namespace course {

namespace {

// %globaltimer: a nanosecond clock of the GPU (PTX ISA, "Special registers: %globaltimer").
__device__ unsigned long long global_timer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Spins until the host sets flags[0], or until `timeout_ns` has passed (then sets flags[1]).
// volatile: every iteration reads the flag from host memory again instead of a register.
__global__ void hold_kernel(volatile int* flags, unsigned long long timeout_ns) {
  const unsigned long long t0 = global_timer_ns();
  while (flags[0] == 0) {
    if (global_timer_ns() - t0 > timeout_ns) {
      flags[1] = 1;
      break;
    }
  }
}

constexpr unsigned long long kHoldTimeoutNs = 2'000'000'000ull;

// Reads n int4 and writes nothing (unless the sum hits a value the zero-filled buffer never
// gives): every line of the buffer passes through the L2 and is left there clean.
__global__ void l2_flush_kernel(const int4* p, std::size_t n, int* sink) {
  int acc = 0;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    const int4 v = p[i];
    acc += v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x7ee1f00d) *sink = acc;
}

// Nothing: what gpu_time_floor_ms times is the launch and the events around it.
__global__ void empty_kernel() {}

__global__ void copy16_kernel(int4* __restrict__ dst, const int4* __restrict__ src, std::size_t n,
                              unsigned char* __restrict__ dst_tail,
                              const unsigned char* __restrict__ src_tail, int tail) {
  const std::size_t start = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x;
  for (std::size_t i = start; i < n; i += std::size_t{gridDim.x} * blockDim.x) dst[i] = src[i];
  if (start < static_cast<std::size_t>(tail)) dst_tail[start] = src_tail[start];
}

struct FlushBuffer {
  DeviceBuffer<int4> data;
  DeviceBuffer<int> sink;
  int blocks = 0;
};

}  // namespace

StreamHold::StreamHold() {
  CUDA_CHECK(
      cudaHostAlloc(reinterpret_cast<void**>(&flags_), 2 * sizeof(int), cudaHostAllocMapped));
  // Load the kernel now (lazy loading would otherwise load it at the first hold) and check that
  // it can run: released before it starts, it returns at once.
  flags_[0] = 1;
  flags_[1] = 0;
  int* dev = nullptr;
  CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dev), flags_, 0));
  hold_kernel<<<1, 1>>>(dev, kHoldTimeoutNs);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());
}

StreamHold::~StreamHold() {
  if (flags_ != nullptr) {
    release();
    cudaFreeHost(flags_);  // at process exit the runtime may already be gone: nothing to report
  }
}

void StreamHold::hold(cudaStream_t stream) {
  __atomic_store_n(&flags_[0], 0, __ATOMIC_SEQ_CST);
  __atomic_store_n(&flags_[1], 0, __ATOMIC_SEQ_CST);
  // Read at every hold (not cached), so that a program or test may change it between samples.
  const char* no_hold = std::getenv("COURSE_NO_HOLD");
  if (no_hold != nullptr && *no_hold != '\0' && std::strcmp(no_hold, "0") != 0) return;
  int* dev = nullptr;
  CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dev), flags_, 0));
  hold_kernel<<<1, 1, 0, stream>>>(dev, kHoldTimeoutNs);
  CUDA_CHECK(cudaGetLastError());
}

void StreamHold::release() noexcept {
  __atomic_store_n(&flags_[0], 1, __ATOMIC_SEQ_CST);
}

bool StreamHold::released_in_time() const noexcept {
  return __atomic_load_n(&flags_[1], __ATOMIC_SEQ_CST) == 0;
}

StreamHold& thread_stream_hold() {
  thread_local StreamHold hold;
  return hold;
}

namespace detail {
void throw_hold_timed_out() {
  throw std::runtime_error(
      "gpu_time_ms: the work did not reach the GPU within 2 s of holding the stream: enqueue() "
      "blocked the host thread (cudaMemcpy, a pageable cudaMemcpyAsync, cudaMalloc, a "
      "synchronisation, or a first launch whose lazy module loading waits for the context). "
      "Warm the work up first, or time it with latency_ms(). Under a profiler that serialises "
      "launches (ncu), set COURSE_NO_HOLD=1.");
}
}  // namespace detail

void flush_l2(cudaStream_t stream) {
  static std::mutex mutex;
  static std::map<int, std::unique_ptr<FlushBuffer>> buffers;
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  FlushBuffer* b = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto& slot = buffers[device];
    if (!slot) {
      int l2_bytes = 0, sms = 0;
      CUDA_CHECK(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device));
      CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
      const std::size_t n =
          (2 * static_cast<std::size_t>(std::max(l2_bytes, 1 << 20))) / sizeof(int4);
      auto fb = std::make_unique<FlushBuffer>();
      fb->data = DeviceBuffer<int4>(n);
      fb->sink = DeviceBuffer<int>(1);
      CUDA_CHECK(cudaMemset(fb->data.data(), 0, n * sizeof(int4)));
      fb->blocks = 4 * sms;
      slot = std::move(fb);
    }
    b = slot.get();
  }
  l2_flush_kernel<<<b->blocks, 256, 0, stream>>>(b->data.data(), b->data.size(), b->sink.data());
  CUDA_CHECK(cudaGetLastError());
}

void copy_kernel(void* dst, const void* src, std::size_t bytes, cudaStream_t stream) {
  if (reinterpret_cast<std::uintptr_t>(dst) % 16 != 0 ||
      reinterpret_cast<std::uintptr_t>(src) % 16 != 0) {
    throw std::invalid_argument("copy_kernel: dst and src must be 16-byte aligned");
  }
  if (bytes == 0) return;
  int device = 0, sms = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const std::size_t n = bytes / 16;
  const int tail = static_cast<int>(bytes % 16);
  // 8 blocks of 256 threads per SM: enough loads in flight to saturate HBM (Little's law).
  copy16_kernel<<<8 * sms, 256, 0, stream>>>(static_cast<int4*>(dst), static_cast<const int4*>(src),
                                             n, static_cast<unsigned char*>(dst) + 16 * n,
                                             static_cast<const unsigned char*>(src) + 16 * n, tail);
  CUDA_CHECK(cudaGetLastError());
}

double gpu_time_floor_ms(cudaStream_t stream, int reps) {
  if (reps < 1) {
    throw std::invalid_argument("gpu_time_floor_ms: reps must be >= 1, got " +
                                std::to_string(reps));
  }
  const Timing t = measure(
      stream, reps,
      [&] {
        empty_kernel<<<1, 1, 0, stream>>>();
        CUDA_CHECK(cudaGetLastError());
      },
      L2::warm, /*with_latency=*/false);
  return t.gpu_ms;
}

std::string format_harness_floor(double floor_ms, int reps) {
  char buf[200];
  std::snprintf(buf, sizeof buf,
                "harness floor: an empty kernel reads %.2f us of GPU time (median of %d, held as "
                "every row is); each GPU time below includes it once",
                floor_ms * 1e3, reps);
  return buf;
}

std::string harness_floor_caption(cudaStream_t stream, int reps) {
  return format_harness_floor(gpu_time_floor_ms(stream, reps), reps);
}

double median(std::vector<double> v) {
  if (v.empty()) throw std::invalid_argument("median: empty sample");
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// ---- NVML, loaded at run time ----------------------------------------------------------------

namespace {

// The few NVML declarations we need (nvml.h is not part of every toolkit install). Values from
// NVML's API reference: nvmlClockType_t NVML_CLOCK_SM = 1, NVML_CLOCK_MEM = 2;
// nvmlEnableState_t NVML_FEATURE_ENABLED = 1; nvmlTemperatureSensors_t NVML_TEMPERATURE_GPU = 0.
using nvmlDevice = struct nvmlDevice_st*;
using NvmlInit = int (*)();
using NvmlByPci = int (*)(const char*, nvmlDevice*);
using NvmlClock = int (*)(nvmlDevice, int, unsigned*);
using NvmlPersistence = int (*)(nvmlDevice, int*);
using NvmlTemperature = int (*)(nvmlDevice, int, unsigned*);
using NvmlPower = int (*)(nvmlDevice, unsigned*);
using NvmlReasons = int (*)(nvmlDevice, unsigned long long*);

struct Nvml {
  void* lib = nullptr;
  std::string why;
  NvmlByPci by_pci = nullptr;
  NvmlClock clock = nullptr, max_clock = nullptr;
  NvmlPersistence persistence = nullptr;
  NvmlTemperature temperature = nullptr;
  NvmlPower power = nullptr;
  NvmlReasons reasons = nullptr;
};

const Nvml& nvml() {
  static const Nvml n = [] {
    Nvml r;
    r.lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (r.lib == nullptr) {
      const char* e = dlerror();
      r.why = std::string("libnvidia-ml.so.1 could not be loaded: ") + (e ? e : "unknown error");
      return r;
    }
    const auto sym = [&](const char* name) { return dlsym(r.lib, name); };
    const auto init = reinterpret_cast<NvmlInit>(sym("nvmlInit_v2"));
    r.by_pci = reinterpret_cast<NvmlByPci>(sym("nvmlDeviceGetHandleByPciBusId_v2"));
    r.clock = reinterpret_cast<NvmlClock>(sym("nvmlDeviceGetClockInfo"));
    r.max_clock = reinterpret_cast<NvmlClock>(sym("nvmlDeviceGetMaxClockInfo"));
    r.persistence = reinterpret_cast<NvmlPersistence>(sym("nvmlDeviceGetPersistenceMode"));
    r.temperature = reinterpret_cast<NvmlTemperature>(sym("nvmlDeviceGetTemperature"));
    r.power = reinterpret_cast<NvmlPower>(sym("nvmlDeviceGetPowerUsage"));
    r.reasons = reinterpret_cast<NvmlReasons>(sym("nvmlDeviceGetCurrentClocksEventReasons"));
    if (r.reasons == nullptr) {
      r.reasons = reinterpret_cast<NvmlReasons>(sym("nvmlDeviceGetCurrentClocksThrottleReasons"));
    }
    if (init == nullptr || r.by_pci == nullptr || r.clock == nullptr) {
      r.why =
          "libnvidia-ml.so.1 lacks nvmlInit_v2, nvmlDeviceGetHandleByPciBusId_v2 or "
          "nvmlDeviceGetClockInfo";
      r.by_pci = nullptr;
      return r;
    }
    if (const int rc = init(); rc != 0) {
      r.why = "nvmlInit_v2 returned " + std::to_string(rc);
      r.by_pci = nullptr;
    }
    return r;
  }();
  return n;
}

}  // namespace

GpuClocks read_gpu_clocks(int device) {
  GpuClocks c;
  const Nvml& n = nvml();
  if (n.by_pci == nullptr) {
    c.why = n.why;
    return c;
  }
  char bus[32] = {};
  if (cudaDeviceGetPCIBusId(bus, sizeof bus, device) != cudaSuccess) {
    cudaGetLastError();
    c.why = "cudaDeviceGetPCIBusId failed for device " + std::to_string(device);
    return c;
  }
  nvmlDevice d = nullptr;
  if (const int rc = n.by_pci(bus, &d); rc != 0) {
    c.why =
        "nvmlDeviceGetHandleByPciBusId_v2(" + std::string(bus) + ") returned " + std::to_string(rc);
    return c;
  }
  c.available = n.clock(d, 1, &c.sm_mhz) == 0 && n.clock(d, 2, &c.mem_mhz) == 0;
  if (!c.available) {
    c.why = "nvmlDeviceGetClockInfo failed";
    return c;
  }
  if (n.max_clock) {
    n.max_clock(d, 1, &c.sm_max_mhz);
    n.max_clock(d, 2, &c.mem_max_mhz);
  }
  int mode = -1;
  if (n.persistence && n.persistence(d, &mode) == 0) c.persistence = mode == 1 ? 1 : 0;
  if (n.temperature) n.temperature(d, 0, &c.temperature_c);
  if (n.power) n.power(d, &c.power_mw);
  if (n.reasons) n.reasons(d, &c.clock_event_reasons);
  return c;
}

std::string describe(const GpuClocks& c) {
  if (!c.available) return "clocks unknown (" + c.why + ")";
  char buf[200];
  std::snprintf(buf, sizeof buf,
                "SM %u/%u MHz, memory %u/%u MHz (current/max), persistence %s, %u C, %.0f W",
                c.sm_mhz, c.sm_max_mhz, c.mem_mhz, c.mem_max_mhz,
                c.persistence == 1   ? "on"
                : c.persistence == 0 ? "off"
                                     : "unknown",
                c.temperature_c, c.power_mw / 1000.0);
  return buf;
}

}  // namespace course
