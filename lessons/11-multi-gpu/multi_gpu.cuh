// Lesson 11: several GPUs in one process. A device per thread, streams and events across
// devices, peer copies, replicas of lesson 09's pipeline, and tensor parallelism with NCCL.
//
//   devices      enumeration, the peer-to-peer matrix (cudaDeviceCanAccessPeer,
//                cudaDeviceGetP2PAttribute), each GPU's PCIe link from sysfs
//   per thread   the facts the runtime's "current device" rule implies, as functions the tests
//                call in fresh child processes: a new thread starts on device 0; memory, streams
//                and events belong to the device current when they were made; a launch into a
//                stream of another device fails
//   events       a kernel on one GPU waits (cudaStreamWaitEvent) for an event another GPU
//                recorded after writing a flag (exercise 3 is the wait)
//   peer copies  cudaMemcpyPeerAsync against a copy staged through pinned host memory
//
// Replicas (replicas.hpp) and tensor parallelism with NCCL (tensor_parallel.hpp) build on these.
//
// The rule behind it all (CUDA C++ Programming Guide, "Multi-Device System": "Device Selection",
// "Stream and Event Behavior"): the current device is a property of the calling HOST THREAD.
// Every allocation, stream, event and launch goes to the device current on that thread at the
// time of the call; a thread that never called cudaSetDevice is on device 0, whatever another
// thread chose.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "common/cuda_check.hpp"

namespace lesson11 {

// ------------------------------------------------------------------------------------ devices

// cudaGetDeviceCount, with "no device" (cudaErrorNoDevice, cudaErrorInsufficientDriver) as 0.
// Throws CudaError for any other error.
int device_count();

// Sets the calling thread's current device for the lifetime of the object and restores the one
// before on destruction. Throws std::invalid_argument for an ordinal outside [0,
// device_count()) (before cudaSetDevice), CudaError if the runtime refuses.
class ScopedDevice {
 public:
  explicit ScopedDevice(int device);
  ~ScopedDevice();
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

 private:
  int previous_ = 0;
};

// What device `from` can do with device `to`'s memory (cudaDeviceGetP2PAttribute):
struct PeerInfo {
  bool access = false;   // cudaDevP2PAttrAccessSupported (= cudaDeviceCanAccessPeer)
  bool atomics = false;  // cudaDevP2PAttrNativeAtomicSupported: atomics over the link (NVLink)
  int rank = 0;          // cudaDevP2PAttrPerformanceRank: relative, lower is faster
};
// matrix[from][to] for every pair of the visible devices (the diagonal is left default).
// Throws CudaError.
std::vector<std::vector<PeerInfo>> peer_matrix();

// The PCIe link of a device as sysfs states it (/sys/bus/pci/devices/<bus id>/max_link_speed,
// max_link_width; the maximum, since an idle GPU trains its link down to save power). nullopt
// where sysfs does not say (not Linux, a container without /sys, a virtual function).
struct PcieLink {
  std::string bus_id;  // "0000:1b:00.0"
  double gt_per_s = 0;
  int lanes = 0;
};
std::optional<PcieLink> pcie_link(int device);

// ---------------------------------------------------------------- the current device, per thread

// The current device a NEW host thread reports (cudaGetDevice on a std::thread started now).
// Throws CudaError.
int new_thread_device();
// The device that owns device memory `ptr` (cudaPointerGetAttributes). Throws CudaError; -1 for
// host memory the runtime does not know.
int pointer_device(const void* ptr);
// The device of a stream (cudaStreamGetDevice, CUDA 12.8 and newer; on older toolkits the
// runtime has no such query and this throws std::runtime_error saying so). Throws CudaError.
int stream_device(cudaStream_t stream);
// Launches a one-thread kernel into `stream` from the calling thread and returns what the launch
// reported (cudaGetLastError, which also clears it): cudaSuccess, or the error a stream of
// another device gives. Waits for the stream when the launch succeeded.
cudaError_t try_launch(cudaStream_t stream);
// cudaEventRecord(event, stream)'s result, cleared from the thread's last error. It fails when
// the event and the stream belong to different devices (Programming Guide, "Stream and Event
// Behavior").
cudaError_t try_record(cudaEvent_t event, cudaStream_t stream);

// ------------------------------------------------------------------------ events across devices

// EXERCISE 3. Make `consumer` (a stream of device `consumer_device`) wait, on the GPU, for
// `producer_done`, an event recorded on ANOTHER device's stream. Work enqueued on `consumer`
// afterwards starts only once the producer's work before the event has completed. Does not
// block the host. Throws CudaError.
void enqueue_wait(int consumer_device, cudaStream_t consumer, cudaEvent_t producer_done);

// A hand-off between two devices (they may be the same: then it is two streams of one GPU):
//   producer_device: a kernel spins for `spin_us` microseconds (globaltimer), then writes `value`
//                    to a flag in mapped pinned host memory; the event `done` is recorded after it
//   consumer_device: enqueue_wait(consumer, done), then a kernel copies the flag into its output
// consumer_read is `value` when the wait orders the two, 0 (the flag's initial value) when the
// consumer ran early. flag_at_wait_return is the flag as the host read it when enqueue_wait
// returned: 0 while the producer still spins, so `value` there means the wait blocked the host
// until the producer had finished (cudaEventSynchronize, not a GPU-side wait). spin_us makes
// both observable: the consumer's launch and enqueue_wait's return come long before the spin
// ends. wait = false leaves the wait out (the race, shown by the lesson binary). Throws
// std::invalid_argument for bad devices or spin_us outside [0, 1e6], CudaError.
struct Handoff {
  int consumer_read = -1;
  int flag_at_wait_return = -1;
};
Handoff cross_device_handoff(int producer_device, int consumer_device, int value, double spin_us,
                             bool wait = true);

// ------------------------------------------------------------------------------ peer copies

// Enables peer access from `device` to `peer` (cudaDeviceEnablePeerAccess, made while `device`
// is current; the mapping is per context and one-directional). Returns false when the pair has
// no peer access (cudaDeviceCanAccessPeer == 0) or device == peer; an access enabled before is
// not an error. Throws CudaError.
bool enable_peer_access(int device, int peer);

// Copies `bytes` of device memory from `src_device` to `dst_device` both ways the lesson
// compares, `reps` times each after one warm-up, and checks the bytes that arrived:
//   peer:   cudaMemcpyPeerAsync on a stream of src_device (a direct DMA over NVLink or PCIe when
//           peer access is enabled; otherwise the driver stages it through host memory itself)
//   staged: cudaMemcpyAsync device -> pinned host on src_device, then host -> device on
//           dst_device, ordered by an event (two PCIe hops, not overlapped)
// Bandwidth is bytes / time, GB/s, the median of `reps` host steady-clock intervals (events of
// two devices cannot be subtracted: cudaEventElapsedTime fails for them). src == dst is allowed:
// the peer copy is then a device-to-device copy. Throws std::invalid_argument for bytes == 0 or
// not a multiple of 4, reps < 1, bad devices; CudaError.
struct CopyComparison {
  bool peer_access = false;  // peer access was enabled (a direct copy), src != dst
  double peer_gbps = 0, staged_gbps = 0;
  bool peer_correct = false, staged_correct = false;  // every byte arrived
};
CopyComparison compare_peer_and_staged(int src_device, int dst_device, std::size_t bytes, int reps);

}  // namespace lesson11
