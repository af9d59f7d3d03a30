// Lesson 11: devices, the current device per thread, events across devices, peer copies
// (see multi_gpu.cuh).
#include "multi_gpu.cuh"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "common/memory.hpp"
#include "common/stream.hpp"
#include "common/timing.hpp"
#include "multi_gpu_host.hpp"

namespace lesson11 {

// ------------------------------------------------------------------------------------ devices

int device_count() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) {
    (void)cudaGetLastError();
    return 0;
  }
  CUDA_CHECK(e);
  return n;
}

ScopedDevice::ScopedDevice(int device) {
  check_device_ordinal("ScopedDevice", device, device_count());
  CUDA_CHECK(cudaGetDevice(&previous_));
  CUDA_CHECK(cudaSetDevice(device));
}

ScopedDevice::~ScopedDevice() {
  cudaSetDevice(previous_);
}

std::vector<std::vector<PeerInfo>> peer_matrix() {
  const int n = device_count();
  std::vector<std::vector<PeerInfo>> m(static_cast<std::size_t>(n),
                                       std::vector<PeerInfo>(static_cast<std::size_t>(n)));
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      if (i == j) continue;
      PeerInfo& p = m[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)];
      int v = 0;
      CUDA_CHECK(cudaDeviceGetP2PAttribute(&v, cudaDevP2PAttrAccessSupported, i, j));
      p.access = v != 0;
      CUDA_CHECK(cudaDeviceGetP2PAttribute(&v, cudaDevP2PAttrNativeAtomicSupported, i, j));
      p.atomics = v != 0;
      CUDA_CHECK(cudaDeviceGetP2PAttribute(&p.rank, cudaDevP2PAttrPerformanceRank, i, j));
    }
  }
  return m;
}

std::optional<PcieLink> pcie_link(int device) {
  char id[32] = {};
  CUDA_CHECK(cudaDeviceGetPCIBusId(id, sizeof id, device));
  PcieLink link;
  link.bus_id = id;
  std::transform(link.bus_id.begin(), link.bus_id.end(), link.bus_id.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  // sysfs names the device with a 4-digit domain ("0000:1b:00.0"); some tools print 8.
  if (link.bus_id.find(':') == 8) link.bus_id.erase(0, 4);
  const std::string dir = "/sys/bus/pci/devices/" + link.bus_id + "/";
  std::ifstream speed(dir + "max_link_speed"), width(dir + "max_link_width");
  std::string speed_text;
  if (!std::getline(speed, speed_text) || !(width >> link.lanes) || link.lanes < 1) {
    return std::nullopt;
  }
  const auto rate = parse_link_speed(speed_text);
  if (!rate) return std::nullopt;
  link.gt_per_s = *rate;
  return link;
}

// ---------------------------------------------------------------- the current device, per thread

namespace {
__global__ void touch_kernel(int* out) {
  if (out != nullptr) *out = 1;
}

// The GPU's nanosecond timer (PTX %globaltimer), comparable across the SMs of one GPU.
__device__ std::uint64_t global_ns() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Spins for `spin_ns`, then publishes `value`: the store is made visible to the whole system
// (other GPUs, the host) before the kernel ends, and the event recorded after the kernel is
// what tells the other device that it has.
__global__ void produce_after_spin(volatile int* flag, int value, std::uint64_t spin_ns) {
  const std::uint64_t start = global_ns();
  while (global_ns() - start < spin_ns) {
  }
  *flag = value;
  __threadfence_system();
}

// Reads the flag once: whatever it holds when this kernel runs.
__global__ void consume_flag(const volatile int* flag, int* out) {
  *out = *flag;
}

// Loads both kernels into the current device's context (cudaFuncGetAttributes needs the code).
void preload_handoff_kernels() {
  cudaFuncAttributes a{};
  CUDA_CHECK(cudaFuncGetAttributes(&a, produce_after_spin));
  CUDA_CHECK(cudaFuncGetAttributes(&a, consume_flag));
}
}  // namespace

int new_thread_device() {
  int device = -1;
  cudaError_t err = cudaSuccess;
  std::thread t([&] { err = cudaGetDevice(&device); });
  t.join();
  CUDA_CHECK(err);
  return device;
}

int pointer_device(const void* ptr) {
  cudaPointerAttributes a{};
  CUDA_CHECK(cudaPointerGetAttributes(&a, ptr));
  return a.type == cudaMemoryTypeUnregistered ? -1 : a.device;
}

int stream_device(cudaStream_t stream) {
#if CUDART_VERSION >= 12080
  int device = -1;
  CUDA_CHECK(cudaStreamGetDevice(stream, &device));
  return device;
#else
  (void)stream;
  throw std::runtime_error("stream_device: cudaStreamGetDevice needs CUDA 12.8 or newer");
#endif
}

cudaError_t try_launch(cudaStream_t stream) {
  touch_kernel<<<1, 1, 0, stream>>>(nullptr);
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) CUDA_CHECK(cudaStreamSynchronize(stream));
  return e;
}

cudaError_t try_record(cudaEvent_t event, cudaStream_t stream) {
  const cudaError_t e = cudaEventRecord(event, stream);
  (void)cudaGetLastError();
  return e;
}

// ------------------------------------------------------------------------ events across devices

Handoff cross_device_handoff(int producer_device, int consumer_device, int value, double spin_us,
                             bool wait) {
  const int n = device_count();
  check_device_ordinal("cross_device_handoff (producer)", producer_device, n);
  check_device_ordinal("cross_device_handoff (consumer)", consumer_device, n);
  if (!(spin_us >= 0 && spin_us <= 1e6)) {
    throw std::invalid_argument("cross_device_handoff: spin_us must be in [0, 1e6]");
  }
  // Mapped pinned memory is visible to every device (portable) at the same address (unified
  // addressing), so no peer access is needed for the flag.
  course::PinnedBuffer<int> flag(1, cudaHostAllocMapped | cudaHostAllocPortable);
  flag[0] = 0;

  // Everything is made, and both kernels are loaded on both devices, before the producer
  // starts: an allocation while it spins may wait for it (cudaMalloc is allowed to
  // synchronise), and so may loading a kernel on first launch (lazy loading, the default since
  // CUDA 12.2: Programming Guide, "Lazy Loading", "Possible issues when adopting lazy loading").
  // Either would hide the race this function exists to show.
  ScopedDevice on_consumer(consumer_device);
  preload_handoff_kernels();
  course::Stream consumer;
  course::DeviceBuffer<int> out(1);
  CUDA_CHECK(cudaSetDevice(producer_device));
  preload_handoff_kernels();
  course::Stream producer;
  course::Event done(cudaEventDisableTiming);

  produce_after_spin<<<1, 1, 0, producer>>>(flag.data(), value,
                                            static_cast<std::uint64_t>(spin_us * 1e3));
  CUDA_CHECK_LAUNCH();
  done.record(producer);
  CUDA_CHECK(cudaSetDevice(consumer_device));
  Handoff h;
  if (wait) enqueue_wait(consumer_device, consumer, done);
  h.flag_at_wait_return = *static_cast<volatile int*>(flag.data());
  consume_flag<<<1, 1, 0, consumer>>>(flag.data(), out.data());
  CUDA_CHECK_LAUNCH();
  CUDA_CHECK(cudaMemcpyAsync(&h.consumer_read, out.data(), sizeof h.consumer_read,
                             cudaMemcpyDeviceToHost, consumer));
  consumer.synchronize();
  CUDA_CHECK(cudaSetDevice(producer_device));
  producer.synchronize();  // the producer may still spin when the consumer did not wait
  return h;
}

// ------------------------------------------------------------------------------ peer copies

bool enable_peer_access(int device, int peer) {
  if (device == peer) return false;
  int can = 0;
  CUDA_CHECK(cudaDeviceCanAccessPeer(&can, device, peer));
  if (can == 0) return false;
  ScopedDevice on(device);
  const cudaError_t e = cudaDeviceEnablePeerAccess(peer, 0);
  if (e == cudaErrorPeerAccessAlreadyEnabled) {
    (void)cudaGetLastError();  // not sticky; clear it so the next check does not see it
    return true;
  }
  CUDA_CHECK(e);
  return true;
}

namespace {
// The pattern the copies carry: word i of the buffer.
std::uint32_t pattern(std::size_t i) {
  return static_cast<std::uint32_t>(i * 2654435761u) ^ 0x5a5a5a5au;
}

bool holds_pattern(const course::DeviceBuffer<std::uint32_t>& d) {
  const std::vector<std::uint32_t> h = course::to_host(d);
  for (std::size_t i = 0; i < h.size(); ++i) {
    if (h[i] != pattern(i)) return false;
  }
  return true;
}

// Median GB/s of `reps` timed calls of `copy` (after one warm-up); `copy` ends synchronised.
template <class F>
double median_gbps(std::size_t bytes, int reps, F&& copy) {
  copy();
  std::vector<double> gbps;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    copy();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    gbps.push_back(static_cast<double>(bytes) / s / 1e9);
  }
  return course::median(gbps);
}
}  // namespace

CopyComparison compare_peer_and_staged(int src_device, int dst_device, std::size_t bytes,
                                       int reps) {
  const int n = device_count();
  check_device_ordinal("compare_peer_and_staged (source)", src_device, n);
  check_device_ordinal("compare_peer_and_staged (destination)", dst_device, n);
  if (bytes == 0 || bytes % 4 != 0) {
    throw std::invalid_argument("compare_peer_and_staged: bytes must be a positive multiple of 4");
  }
  if (reps < 1) throw std::invalid_argument("compare_peer_and_staged: reps must be >= 1");
  const std::size_t words = bytes / 4;

  CopyComparison out;
  out.peer_access = enable_peer_access(src_device, dst_device);
  if (out.peer_access) enable_peer_access(dst_device, src_device);

  std::vector<std::uint32_t> host(words);
  for (std::size_t i = 0; i < words; ++i) host[i] = pattern(i);
  ScopedDevice on_src(src_device);
  const course::DeviceBuffer<std::uint32_t> src = course::to_device(host);
  course::Stream src_stream;
  course::Event d2h_done(cudaEventDisableTiming);
  course::PinnedBuffer<std::uint32_t> staging(words, cudaHostAllocPortable);
  CUDA_CHECK(cudaSetDevice(dst_device));
  course::DeviceBuffer<std::uint32_t> dst_peer(words), dst_staged(words);
  course::Stream dst_stream;
  CUDA_CHECK(cudaSetDevice(src_device));

  out.peer_gbps = median_gbps(bytes, reps, [&] {
    CUDA_CHECK(cudaMemcpyPeerAsync(dst_peer.data(), dst_device, src.data(), src_device, bytes,
                                   src_stream));
    src_stream.synchronize();
  });
  out.staged_gbps = median_gbps(bytes, reps, [&] {
    CUDA_CHECK(cudaSetDevice(src_device));
    CUDA_CHECK(
        cudaMemcpyAsync(staging.data(), src.data(), bytes, cudaMemcpyDeviceToHost, src_stream));
    d2h_done.record(src_stream);
    CUDA_CHECK(cudaSetDevice(dst_device));
    CUDA_CHECK(cudaStreamWaitEvent(dst_stream, d2h_done, 0));
    CUDA_CHECK(cudaMemcpyAsync(dst_staged.data(), staging.data(), bytes, cudaMemcpyHostToDevice,
                               dst_stream));
    dst_stream.synchronize();
  });
  CUDA_CHECK(cudaSetDevice(dst_device));
  out.peer_correct = holds_pattern(dst_peer);
  out.staged_correct = holds_pattern(dst_staged);
  CUDA_CHECK(cudaSetDevice(src_device));
  return out;
}

}  // namespace lesson11
