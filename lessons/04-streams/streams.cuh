// Lesson 04: streams, events and overlap, and a first CUDA Graph.
//
// What is declared here, in the order the lesson teaches it (streams.cu holds the bodies):
//   1. mix32 / mix_rounds            the per-element "work", a dial for compute time (host+device)
//   2. launch_spin / spin_then_fill  kernels that take a known wall-clock time: they make
//                                    concurrency, ordering and the classic bugs visible
//   3. event_done / stream_idle      cudaEventQuery / cudaStreamQuery without the NotReady trap
//      HostProbe                     what a host function (cudaLaunchHostFunc) saw
//   4. Pipeline                      a batch split into N chunks over K streams:
//                                    H2D copy -> kernel -> D2H copy per chunk, timed by events
//      pipeline_bound                the ideal time of that pipeline (exercise 1)
//      enqueue_chunks                the K-stream loop (exercise 2)
//   5. preprocess_then_infer         a cross-stream dependency through an event (exercise 3)
//   6. read_result_synchronised      the classic unsynchronised read, fixed (exercise 4)
//   7. Graph / GraphExec / capture   the pipeline captured once into a CUDA Graph (exercise 5)
//
// Host code (tests, main, the benchmark) includes this header with the C++ compiler:
// cuda_runtime.h defines __host__ / __device__ away there, so the per-element math is plain C++.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "common/cuda_check.hpp"
#include "common/memory.hpp"
#include "common/stream.hpp"
#include "timeline.hpp"

namespace course::streams {

// ------------------------------------------------------------------ 1. the per-element work

// One round of a 32-bit integer mixer (the "lowbias32" constants from Chris Wellons' hash
// prospector). It stands in for real per-element work: integer arithmetic is exact, so every
// GPU result can be compared bit for bit with the CPU, and its cost is set with `rounds`.
__host__ __device__ inline std::uint32_t mix32(std::uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}

// mix32 applied `rounds` times (rounds <= 0 returns x). About 8 integer instructions a round.
__host__ __device__ inline std::uint32_t mix_rounds(std::uint32_t x, int rounds) {
  for (int r = 0; r < rounds; ++r) x = mix32(x);
  return x;
}

// out[i] = mix_rounds(in[i], rounds) for i in [0, n), on `stream`; in, out: device, n elements.
// in == out is allowed (each thread reads its element before writing it). n == 0 launches
// nothing. Throws std::invalid_argument for a null pointer with n > 0 (before any CUDA call),
// CudaError if the launch fails.
void launch_mix(const std::uint32_t* in, std::uint32_t* out, std::size_t n, int rounds,
                cudaStream_t stream);

// ------------------------------------------------------------------ 2. kernels of known duration

// `blocks` blocks of `threads` threads, each thread busy-waiting `spin_ns` nanoseconds of wall
// clock (the %globaltimer register), writing nothing. One block occupies one SM slot, so two
// one-block spins on two streams can run side by side if the streams allow it. Throws
// std::invalid_argument unless blocks >= 1 and 1 <= threads <= kMaxThreadsPerBlock (before any
// CUDA call), CudaError if the launch fails.
constexpr int kMaxThreadsPerBlock = 1024;
void launch_spin(int blocks, int threads, std::uint64_t spin_ns, cudaStream_t stream);

// A slow producer: ONE block waits `spin_ns` nanoseconds, then writes `value` into dst[0, n)
// (device). Anything that reads dst without being ordered after this kernel sees the old
// contents. n == 0 still launches (a pure spin). Throws std::invalid_argument for a null dst
// with n > 0 (before any CUDA call), CudaError if the launch fails.
void launch_spin_then_fill(std::uint32_t* dst, std::size_t n, std::uint32_t value,
                           std::uint64_t spin_ns, cudaStream_t stream);

// How many blocks of launch_spin with `threads` threads fit on one SM at once (occupancy API).
// Throws std::invalid_argument unless 1 <= threads <= kMaxThreadsPerBlock (before any CUDA
// call), CudaError if the query fails.
int spin_blocks_per_sm(int threads);

// ------------------------------------------------------------------ 3. events and host functions

// True when all work captured by the event's last cudaEventRecord has finished (or it was never
// recorded). cudaErrorNotReady is an answer, not a failure: it is cleared from the runtime's
// last-error slot so a later CUDA_CHECK_LAUNCH does not report it. Other errors throw CudaError.
bool event_done(cudaEvent_t event);
// True when everything enqueued on `stream` so far has finished; same rules as event_done.
bool stream_idle(cudaStream_t stream);

// What a host function saw when its stream reached it. `watched` points at pinned host memory
// that the work enqueued before the host function writes (e.g. the destination of a D2H copy).
struct HostProbe {
  const std::uint32_t* watched = nullptr;
  std::atomic<std::uint32_t> seen{0};  // *watched, read by the host function
  std::atomic<int> calls{0};           // how many times the host function ran
};

// Enqueues a host function (cudaLaunchHostFunc) on `stream` that copies *probe.watched into
// probe.seen and counts the call. It runs on a driver thread after all earlier work in `stream`
// has finished, and blocks later work in `stream` until it returns. `probe` must stay alive until
// the stream has passed it. Throws std::invalid_argument if probe.watched is null.
void enqueue_host_probe(cudaStream_t stream, HostProbe& probe);

// The stream priorities this device supports. Lower numbers are higher priorities: `greatest`
// is the most urgent (e.g. -5), `least` the default (0). Of the current device; throws CudaError
// if the query fails (no device).
struct PriorityRange {
  int least = 0;
  int greatest = 0;
};
PriorityRange stream_priority_range();

// ------------------------------------------------------------------ 4. the pipelined batch

// A batch of n uint32 elements, split into `chunks` near-equal chunks (the first n % chunks hold
// one element more), chunk c on stream c % streams. Each chunk: H2D copy, `launches_per_chunk`
// launches of the mix kernel (`rounds` each; the first reads the input, the rest work in place),
// D2H copy. out[i] = mix_rounds(in[i], rounds * launches_per_chunk).
struct PipelineConfig {
  std::size_t n = 0;
  int chunks = 1;              // N >= 1; chunks > n leaves some chunks empty
  int streams = 1;             // K in [1, kMaxStreams]
  int rounds = 1;              // >= 0
  int launches_per_chunk = 1;  // >= 1; many small launches show the cost of launching (graphs)
};

// More streams than the device has hardware work queues (CUDA_DEVICE_MAX_CONNECTIONS, 8 by
// default, at most 32) gain nothing: streams then share queues and pick up false dependencies.
constexpr int kMaxStreams = 64;

// Throws std::invalid_argument, naming the field and what was expected, if cfg is out of range.
void validate(const PipelineConfig& cfg);

// Chunk c of a batch of n elements split into `chunks` chunks: [chunk_begin, +chunk_size).
// Sizes differ by at most one element; preconditions: chunks >= 1, 0 <= c < chunks.
inline std::size_t chunk_begin(std::size_t n, int chunks, int c) {
  const std::size_t q = n / static_cast<std::size_t>(chunks);
  const std::size_t r = n % static_cast<std::size_t>(chunks);
  const std::size_t cc = static_cast<std::size_t>(c);
  return cc * q + (cc < r ? cc : r);
}
inline std::size_t chunk_size(std::size_t n, int chunks, int c) {
  const std::size_t q = n / static_cast<std::size_t>(chunks);
  const std::size_t r = n % static_cast<std::size_t>(chunks);
  return q + (static_cast<std::size_t>(c) < r ? 1 : 0);
}

// Total time of each stage over the whole batch when nothing overlaps (one stream, one chunk),
// in milliseconds.
struct StageTimes {
  double h2d_ms = 0, kernel_ms = 0, d2h_ms = 0;
  double total_ms() const { return h2d_ms + kernel_ms + d2h_ms; }
};

// The best a pipeline of `chunks` equal chunks can do with three engines that work in parallel
// (H2D copy engine, SMs, D2H copy engine): the longest engine's total time, plus filling and
// draining the pipeline once: ideal = M + (S - M) / N, where S is the serial sum and M the
// longest stage. (A three-machine flow shop with N equal jobs.) It assumes at least three chunks
// can be in flight, i.e. streams >= 3.
struct PipelineBound {
  double longest_ms = 0;     // M: the busiest engine
  double ideal_ms = 0;       // M + (S - M) / N
  double ideal_speedup = 0;  // S / ideal_ms (1 when S == 0)
};
// Exercise 1. Throws std::invalid_argument if chunks < 1 or a stage time is negative; the
// lesson's version also rejects a non-finite one (through validate below).
PipelineBound pipeline_bound(const StageTimes& serial, int chunks);

// Throws std::invalid_argument unless every stage time is finite and >= 0 ms.
void validate(const StageTimes& serial);

// Achieved fraction of the ideal speedup: (serial / pipelined) / (serial / ideal), which is
// ideal / pipelined. 1.0 means the pipeline reached the bound. Throws std::invalid_argument
// unless pipelined_ms > 0.
double fraction_of_ideal(const PipelineBound& bound, double pipelined_ms);

// Timing events for one run of the pipeline: `start` before anything, then per chunk the end of
// each stage. Created once and reused, because creating events costs more than recording them.
class PipelineTrace {
 public:
  // 1 + 3 * chunks timing events. Throws std::invalid_argument for chunks < 1, before creating
  // any event; CudaError if creating one fails.
  explicit PipelineTrace(int chunks);
  int chunks() const { return static_cast<int>(h2d_done.size()); }
  // Waits for the run to finish; returns each chunk's stage end times in ms after `start`.
  // Chunk c ran on stream c % streams. Every event must have been recorded (Pipeline::enqueue
  // with this trace). Throws std::invalid_argument for streams < 1, CudaError if an event was
  // never recorded or the run failed.
  std::vector<ChunkTimes> read(int streams) const;

  Event start;
  std::vector<Event> h2d_done, kernel_done, d2h_done;
};

// One stream of the pipeline and its device buffers (capacity: the largest chunk). Chunks that
// share a stream reuse its buffers: safe, because a stream runs its work in issue order.
struct StreamLane {
  cudaStream_t stream = nullptr;
  std::uint32_t* d_in = nullptr;
  std::uint32_t* d_out = nullptr;
};

// Exercise 2. Enqueues chunk c = 0..cfg.chunks-1 on lanes[c % lanes.size()], depth first:
// H2D copy of in[chunk] into the lane's d_in, cfg.launches_per_chunk mix launches (d_in -> d_out,
// then d_out in place), D2H copy of d_out into out[chunk]. With a trace, records
// trace->h2d_done[c], kernel_done[c], d2h_done[c] after each stage (also for empty chunks; those
// enqueue no copy or kernel). Does not synchronise. Preconditions (checked by Pipeline::enqueue):
// cfg valid, lanes.size() == cfg.streams, host pointers valid for cfg.n elements.
void enqueue_chunks(const PipelineConfig& cfg, const std::uint32_t* in, std::uint32_t* out,
                    const std::vector<StreamLane>& lanes, PipelineTrace* trace);

// The K streams, their device buffers and the events that fork the batch from stream 0 and join
// it back, so that "stream 0 is done" means "the batch is done", for timing, for the next batch
// and for graph capture alike.
class Pipeline {
 public:
  // Validates cfg (std::invalid_argument, before any CUDA call), then creates cfg.streams
  // non-blocking streams and two device buffers of the largest chunk per stream.
  explicit Pipeline(const PipelineConfig& cfg);

  const PipelineConfig& config() const { return cfg_; }
  // The stream the batch forks from and joins back to: time it, wait for it, capture it.
  cudaStream_t origin() const { return streams_.front(); }

  // Enqueues the batch: in (n elements, pinned for overlap, pageable works but serialises) ->
  // out (n elements; may equal in). Returns without waiting unless the host memory is pageable
  // (then cudaMemcpyAsync blocks the host). Throws std::invalid_argument for null pointers with
  // n > 0 or a trace made for a different number of chunks.
  void enqueue(const std::uint32_t* in, std::uint32_t* out, PipelineTrace* trace = nullptr);
  void synchronize() const { CUDA_CHECK(cudaStreamSynchronize(origin())); }

 private:
  PipelineConfig cfg_;  // first: validated before the members below create CUDA objects
  std::vector<Stream> streams_;
  std::vector<DeviceBuffer<std::uint32_t>> d_in_, d_out_;
  std::vector<StreamLane> lanes_;
  Event fork_{cudaEventDisableTiming};
  std::vector<Event> join_;
};

// True when `ptr` is page-locked host memory (cudaHostAlloc or cudaHostRegister): only that lets
// cudaMemcpyAsync overlap with the host and with kernels, and only that can be captured.
bool is_pinned(const void* ptr);

// Rounds of mix per element that make the kernel over `n` elements take about as long as the
// H2D copy of those n elements from pinned memory, on this GPU: the balanced case, where
// overlapping copies and compute pays most. `pinned_in` holds n elements (n >= 1; pinned, or the
// copy times are those of pageable memory). Throws std::invalid_argument for n == 0 or a null
// pinned_in (before any CUDA call), CudaError if an allocation, copy or launch fails.
// Method: kernel times at 16 and 128 rounds give a straight line; its answer is refined once in
// proportion to the time measured at that answer. Medians of 5 copies and 3 kernels.
struct Calibration {
  double h2d_ms = 0;     // the H2D copy of the n elements
  double kernel_ms = 0;  // the kernel at `rounds`
  int rounds = 1;
};
Calibration calibrate_rounds(const std::uint32_t* pinned_in, std::size_t n);

// ------------------------------------------------------------------ 5. cross-stream dependency

// Exercise 3. A preprocess stream feeding an inference stream, as in a deployment:
//   on `preprocess`: launch_spin_then_fill(tensor, n, value, spin_ns)  (slow; writes at the end)
//   on `infer`:      launch_mix(tensor -> result, n, rounds)           (reads the tensor)
// `infer` must see the finished tensor: record `ready` on `preprocess` after the producer, then
// make `infer` wait for it with cudaStreamWaitEvent. Neither the host nor `preprocess` waits.
// tensor, result: device, n elements. Afterwards, once `infer` is synchronised,
// result[i] == mix_rounds(value, rounds). Throws std::invalid_argument, before enqueuing
// anything, for a null tensor or result with n > 0 or a null `ready` event; CudaError if a
// launch, the record or the wait fails.
void preprocess_then_infer(std::uint32_t* tensor, std::uint32_t* result, std::size_t n,
                           std::uint32_t value, std::uint64_t spin_ns, int rounds,
                           cudaStream_t preprocess, cudaStream_t infer, cudaEvent_t ready);

// ------------------------------------------------------------------ 6. the classic bug

// Enqueue on `stream`: launch_spin_then_fill(d_buf, n, value, spin_ns), then a D2H copy of d_buf
// into `host` (pinned, n elements). Return the sum of host[0, n) as the host reads it.
// d_buf: device, n elements. Both throw std::invalid_argument for a null pointer with n > 0
// (before any CUDA call), CudaError if a launch, copy or synchronisation fails.
//
// read_result_unsynchronised sums straight after enqueuing: the copy has not happened yet, so it
// returns whatever `host` held before (main shows it; nothing tests it, it is a race).
std::uint64_t read_result_unsynchronised(std::uint32_t* d_buf, std::uint32_t* host, std::size_t n,
                                         std::uint32_t value, std::uint64_t spin_ns,
                                         cudaStream_t stream);
// Exercise 4: the same, correct: returns n * value.
std::uint64_t read_result_synchronised(std::uint32_t* d_buf, std::uint32_t* host, std::size_t n,
                                       std::uint32_t value, std::uint64_t spin_ns,
                                       cudaStream_t stream);

// ------------------------------------------------------------------ 7. CUDA Graphs

// Owner of a cudaGraph_t (the captured description of the work).
class Graph {
 public:
  Graph() = default;
  explicit Graph(cudaGraph_t graph) noexcept : graph_(graph) {}
  ~Graph() { reset(); }
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  Graph(Graph&& other) noexcept : graph_(std::exchange(other.graph_, nullptr)) {}
  Graph& operator=(Graph&& other) noexcept {
    if (this != &other) {
      reset();
      graph_ = std::exchange(other.graph_, nullptr);
    }
    return *this;
  }
  cudaGraph_t get() const noexcept { return graph_; }
  std::size_t node_count() const {
    std::size_t count = 0;
    CUDA_CHECK(cudaGraphGetNodes(graph_, nullptr, &count));
    return count;
  }

 private:
  void reset() noexcept {
    if (graph_ != nullptr) cudaGraphDestroy(graph_);
    graph_ = nullptr;
  }
  cudaGraph_t graph_ = nullptr;
};

// Owner of a cudaGraphExec_t: the graph instantiated (validated, laid out for launching).
// Launching it replays every node with one call.
class GraphExec {
 public:
  GraphExec() = default;
  explicit GraphExec(const Graph& graph) {
    CUDA_CHECK(cudaGraphInstantiate(&exec_, graph.get(), 0));
  }
  ~GraphExec() { reset(); }
  GraphExec(const GraphExec&) = delete;
  GraphExec& operator=(const GraphExec&) = delete;
  GraphExec(GraphExec&& other) noexcept : exec_(std::exchange(other.exec_, nullptr)) {}
  GraphExec& operator=(GraphExec&& other) noexcept {
    if (this != &other) {
      reset();
      exec_ = std::exchange(other.exec_, nullptr);
    }
    return *this;
  }
  cudaGraphExec_t get() const noexcept { return exec_; }
  void launch(cudaStream_t stream) const { CUDA_CHECK(cudaGraphLaunch(exec_, stream)); }

 private:
  void reset() noexcept {
    if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
    exec_ = nullptr;
  }
  cudaGraphExec_t exec_ = nullptr;
};

struct PipelineGraph {
  Graph graph;
  GraphExec exec;
};

// Exercise 5. Captures pipeline.enqueue(in, out) on pipeline.origin() into a graph
// (cudaStreamBeginCapture .. cudaStreamEndCapture; the fork/join events pull the other streams
// into the capture) and instantiates it. Nothing runs during capture. Replaying the graph
// (exec.launch(stream)) does the same work on the same addresses, with the memory's contents at
// replay time. in/out must be pinned (std::invalid_argument otherwise) and outlive the graph. If
// enqueue throws, the capture is ended and nothing leaks.
PipelineGraph capture_pipeline(Pipeline& pipeline, const std::uint32_t* in, std::uint32_t* out);

}  // namespace course::streams
