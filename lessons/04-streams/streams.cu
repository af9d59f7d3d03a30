// Lesson 04: kernels and host-side launchers, in the order the lesson teaches them.
// Declarations, shapes and errors: streams.cuh. The exercise solutions are in solutions.cuh
// (included at the end of this file, lesson build only); exercise.cu holds the stubs.
#include "streams.cuh"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>
#include <string>

namespace course::streams {

namespace {

constexpr int kThreads = 256;
// Grid-stride loops cover any n; more blocks than this only add scheduling work.
constexpr std::size_t kMaxBlocks = 65535;

unsigned blocks_for(std::size_t n) {
  return static_cast<unsigned>(std::min(kMaxBlocks, (n + kThreads - 1) / kThreads));
}

// Nanoseconds of wall clock. %globaltimer is a 64-bit nanosecond timer that ticks at the same
// rate whatever the SM clock does (PTX ISA, "Special Registers"), so spins last a known time
// even under a profiler or compute-sanitizer. Its update granularity is about a microsecond.
__device__ __forceinline__ std::uint64_t global_timer_ns() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ void spin_for_ns(std::uint64_t ns) {
  const std::uint64_t t0 = global_timer_ns();
  // __nanosleep (sm_70+) lets the warp scheduler issue other warps on this SM meanwhile.
  while (global_timer_ns() - t0 < ns) __nanosleep(256);
}

}  // namespace

// ------------------------------------------------------------------ 1. the per-element work

__global__ void mix_kernel(const std::uint32_t* in, std::uint32_t* out, std::size_t n, int rounds) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    out[i] = mix_rounds(in[i], rounds);
  }
}

void launch_mix(const std::uint32_t* in, std::uint32_t* out, std::size_t n, int rounds,
                cudaStream_t stream) {
  if (n == 0) return;
  if (in == nullptr || out == nullptr)
    throw std::invalid_argument("launch_mix: null buffer with n > 0");
  mix_kernel<<<blocks_for(n), kThreads, 0, stream>>>(in, out, n, rounds);
  CUDA_CHECK_LAUNCH();
}

// ------------------------------------------------------------------ 2. kernels of known duration

__global__ void spin_kernel(std::uint64_t spin_ns) {
  spin_for_ns(spin_ns);
}

namespace {
// 1024 threads per block is the limit on every GPU the course supports (Programming Guide,
// "Compute Capabilities"); past it the launch fails with cudaErrorInvalidConfiguration.
void check_spin_shape(int blocks, int threads, const char* who) {
  if (blocks < 1 || threads < 1 || threads > kMaxThreadsPerBlock) {
    throw std::invalid_argument(std::string(who) + ": expected blocks >= 1 and threads in [1, " +
                                std::to_string(kMaxThreadsPerBlock) + "], got " +
                                std::to_string(blocks) + " x " + std::to_string(threads));
  }
}
}  // namespace

void launch_spin(int blocks, int threads, std::uint64_t spin_ns, cudaStream_t stream) {
  check_spin_shape(blocks, threads, "launch_spin");
  spin_kernel<<<blocks, threads, 0, stream>>>(spin_ns);
  CUDA_CHECK_LAUNCH();
}

__global__ void spin_then_fill_kernel(std::uint32_t* dst, std::size_t n, std::uint32_t value,
                                      std::uint64_t spin_ns) {
  spin_for_ns(spin_ns);
  for (std::size_t i = threadIdx.x; i < n; i += blockDim.x) dst[i] = value;
}

void launch_spin_then_fill(std::uint32_t* dst, std::size_t n, std::uint32_t value,
                           std::uint64_t spin_ns, cudaStream_t stream) {
  if (n > 0 && dst == nullptr)
    throw std::invalid_argument("launch_spin_then_fill: null dst with n > 0");
  // One block: a producer that keeps the rest of the GPU free for other streams.
  spin_then_fill_kernel<<<1, kThreads, 0, stream>>>(dst, n, value, spin_ns);
  CUDA_CHECK_LAUNCH();
}

int spin_blocks_per_sm(int threads) {
  check_spin_shape(1, threads, "spin_blocks_per_sm");
  int blocks = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, spin_kernel, threads, 0));
  return blocks;
}

// ------------------------------------------------------------------ 3. events and host functions

namespace {
bool ready_answer(cudaError_t status, const char* call, int line) {
  if (status == cudaSuccess) return true;
  if (status == cudaErrorNotReady) {
    // "Not yet" is an answer. Clear it if the runtime also left it in the last-error slot,
    // where the next CUDA_CHECK_LAUNCH would find it; any other pending error stays put.
    if (cudaPeekAtLastError() == cudaErrorNotReady) (void)cudaGetLastError();
    return false;
  }
  check_cuda(status, call, __FILE__, line);
  return false;
}
}  // namespace

bool event_done(cudaEvent_t event) {
  return ready_answer(cudaEventQuery(event), "cudaEventQuery(event)", __LINE__);
}

bool stream_idle(cudaStream_t stream) {
  return ready_answer(cudaStreamQuery(stream), "cudaStreamQuery(stream)", __LINE__);
}

namespace {
// Runs on a driver thread once the stream reaches it. It must not call the CUDA API
// (Programming Guide, "Host Functions (Callbacks)"): it only reads host memory.
void CUDART_CB host_probe_fn(void* user_data) {
  auto* probe = static_cast<HostProbe*>(user_data);
  probe->seen.store(*probe->watched);
  probe->calls.fetch_add(1);
}
}  // namespace

void enqueue_host_probe(cudaStream_t stream, HostProbe& probe) {
  if (probe.watched == nullptr)
    throw std::invalid_argument("enqueue_host_probe: probe.watched is null");
  CUDA_CHECK(cudaLaunchHostFunc(stream, host_probe_fn, &probe));
}

PriorityRange stream_priority_range() {
  PriorityRange r;
  CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&r.least, &r.greatest));
  return r;
}

// ------------------------------------------------------------------ 4. the pipelined batch

void validate(const PipelineConfig& cfg) {
  if (cfg.chunks < 1) {
    throw std::invalid_argument("pipeline: chunks must be >= 1 (got " + std::to_string(cfg.chunks) +
                                ")");
  }
  if (cfg.streams < 1 || cfg.streams > kMaxStreams) {
    throw std::invalid_argument("pipeline: streams must be in [1, " + std::to_string(kMaxStreams) +
                                "] (got " + std::to_string(cfg.streams) + ")");
  }
  if (cfg.rounds < 0) {
    throw std::invalid_argument("pipeline: rounds must be >= 0 (got " + std::to_string(cfg.rounds) +
                                ")");
  }
  if (cfg.launches_per_chunk < 1) {
    throw std::invalid_argument("pipeline: launches_per_chunk must be >= 1 (got " +
                                std::to_string(cfg.launches_per_chunk) + ")");
  }
}

void validate(const StageTimes& serial) {
  // NaN passes every comparison, so "not >= 0" rather than "< 0"; an inf stage would make the
  // bound inf or NaN, which no pipeline can be compared with.
  for (const double t : {serial.h2d_ms, serial.kernel_ms, serial.d2h_ms}) {
    if (!(t >= 0.0 && std::isfinite(t))) {
      std::ostringstream msg;  // %g-style: to_string would print -1e-9 as -0.000000
      msg << "StageTimes: expected finite times >= 0 ms, got H2D " << serial.h2d_ms << ", kernel "
          << serial.kernel_ms << ", D2H " << serial.d2h_ms;
      throw std::invalid_argument(msg.str());
    }
  }
}

double fraction_of_ideal(const PipelineBound& bound, double pipelined_ms) {
  if (!(pipelined_ms > 0.0))
    throw std::invalid_argument("fraction_of_ideal: expected pipelined_ms > 0");
  return bound.ideal_ms / pipelined_ms;
}

namespace {
// Runs in the member initialiser list, before the member `start` creates its event, so a bad
// count is reported as such (and on a machine with no GPU, as a bad count, not a CUDA error).
unsigned start_event_flags(int chunks) {
  if (chunks < 1) throw std::invalid_argument("PipelineTrace: chunks must be >= 1");
  return cudaEventDefault;
}
}  // namespace

PipelineTrace::PipelineTrace(int chunks) : start(start_event_flags(chunks)) {
  for (auto* events : {&h2d_done, &kernel_done, &d2h_done}) {
    events->reserve(static_cast<std::size_t>(chunks));
    for (int c = 0; c < chunks; ++c) events->emplace_back();
  }
}

std::vector<ChunkTimes> PipelineTrace::read(int streams) const {
  if (streams < 1) throw std::invalid_argument("PipelineTrace::read: streams must be >= 1");
  std::vector<ChunkTimes> times(h2d_done.size());
  for (std::size_t c = 0; c < times.size(); ++c) {
    // elapsed_ms waits for the later event; all are measured against the same start event.
    times[c].stream = static_cast<int>(c % static_cast<std::size_t>(streams));
    times[c].h2d_end = elapsed_ms(start, h2d_done[c]);
    times[c].kernel_end = elapsed_ms(start, kernel_done[c]);
    times[c].d2h_end = elapsed_ms(start, d2h_done[c]);
  }
  return times;
}

namespace {
// Validation runs in the member initialiser list, before any member creates a CUDA object, so a
// bad configuration is reported as such even on a machine with no GPU.
const PipelineConfig& validated(const PipelineConfig& cfg) {
  validate(cfg);
  return cfg;
}
}  // namespace

Pipeline::Pipeline(const PipelineConfig& cfg) : cfg_(validated(cfg)) {
  const std::size_t capacity = chunk_size(cfg_.n, cfg_.chunks, 0);  // chunk 0 is a largest one
  const auto k = static_cast<std::size_t>(cfg_.streams);
  streams_.reserve(k);
  d_in_.reserve(k);
  d_out_.reserve(k);
  for (std::size_t s = 0; s < k; ++s) {
    // Non-blocking: no implicit synchronisation with the legacy default stream (stream 0), which
    // other code in the process (a library, a careless cudaMemset) may be using.
    streams_.emplace_back(cudaStreamNonBlocking);
    d_in_.emplace_back(capacity);
    d_out_.emplace_back(capacity);
    lanes_.push_back(StreamLane{streams_[s].get(), d_in_[s].data(), d_out_[s].data()});
  }
  join_.reserve(k - 1);
  for (std::size_t s = 1; s < k; ++s) join_.emplace_back(cudaEventDisableTiming);
}

void Pipeline::enqueue(const std::uint32_t* in, std::uint32_t* out, PipelineTrace* trace) {
  if (cfg_.n > 0 && (in == nullptr || out == nullptr)) {
    throw std::invalid_argument("Pipeline::enqueue: in and out must point at n = " +
                                std::to_string(cfg_.n) + " elements (got a null pointer)");
  }
  if (trace != nullptr && trace->chunks() != cfg_.chunks) {
    throw std::invalid_argument("Pipeline::enqueue: the trace has events for " +
                                std::to_string(trace->chunks()) + " chunks, expected " +
                                std::to_string(cfg_.chunks));
  }
  if (trace != nullptr) trace->start.record(origin());
  // Fork: every stream waits for what stream 0 had before this batch (e.g. the previous batch).
  fork_.record(origin());
  for (std::size_t s = 1; s < streams_.size(); ++s) {
    CUDA_CHECK(cudaStreamWaitEvent(streams_[s], fork_, 0));
  }
  enqueue_chunks(cfg_, in, out, lanes_, trace);
  // Join: stream 0 waits for the last work of every other stream.
  for (std::size_t s = 1; s < streams_.size(); ++s) {
    join_[s - 1].record(streams_[s]);
    CUDA_CHECK(cudaStreamWaitEvent(origin(), join_[s - 1], 0));
  }
}

bool is_pinned(const void* ptr) {
  if (ptr == nullptr) return false;
  cudaPointerAttributes attributes{};
  CUDA_CHECK(cudaPointerGetAttributes(&attributes, ptr));
  // Pinned: cudaMemoryTypeHost. Pageable memory reports cudaMemoryTypeUnregistered (CUDA 11+).
  return attributes.type == cudaMemoryTypeHost;
}

namespace {
float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
}  // namespace

Calibration calibrate_rounds(const std::uint32_t* pinned_in, std::size_t n) {
  if (n == 0 || pinned_in == nullptr)
    throw std::invalid_argument("calibrate_rounds: expected n >= 1 elements");
  DeviceBuffer<std::uint32_t> d_in(n), d_out(n);
  Stream stream;
  const std::size_t bytes = n * sizeof(std::uint32_t);
  const auto copy = [&] {
    CUDA_CHECK(cudaMemcpyAsync(d_in.data(), pinned_in, bytes, cudaMemcpyHostToDevice, stream));
  };
  copy();  // warm-up
  std::vector<float> samples;
  for (int i = 0; i < 5; ++i) samples.push_back(time_on_stream_ms(stream, copy));
  Calibration cal;
  cal.h2d_ms = median(samples);

  const auto kernel_ms = [&](int rounds) {
    const auto run = [&] { launch_mix(d_in.data(), d_out.data(), n, rounds, stream); };
    run();  // warm-up
    std::vector<float> t;
    for (int i = 0; i < 3; ++i) t.push_back(time_on_stream_ms(stream, run));
    return static_cast<double>(median(t));
  };
  const double t16 = kernel_ms(16), t128 = kernel_ms(128);
  const double per_round = (t128 - t16) / 112.0;
  double rounds = per_round > 0.0 ? 16.0 + (cal.h2d_ms - t16) / per_round : 16.0;
  rounds = std::clamp(rounds, 1.0, 1e6);
  const double t_guess = kernel_ms(static_cast<int>(std::lround(rounds)));
  if (t_guess > 0.0) rounds = std::clamp(rounds * cal.h2d_ms / t_guess, 1.0, 1e6);
  cal.rounds = static_cast<int>(std::lround(rounds));
  cal.kernel_ms = kernel_ms(cal.rounds);
  return cal;
}

// ------------------------------------------------------------------ 6. the classic bug

namespace {
void check_read_args(const std::uint32_t* d_buf, const std::uint32_t* host, std::size_t n) {
  if (n > 0 && (d_buf == nullptr || host == nullptr)) {
    throw std::invalid_argument(
        "read_result: d_buf and host must hold n elements (got a null pointer)");
  }
}

void enqueue_fill_and_copy(std::uint32_t* d_buf, std::uint32_t* host, std::size_t n,
                           std::uint32_t value, std::uint64_t spin_ns, cudaStream_t stream) {
  launch_spin_then_fill(d_buf, n, value, spin_ns, stream);
  if (n > 0) {
    CUDA_CHECK(
        cudaMemcpyAsync(host, d_buf, n * sizeof(std::uint32_t), cudaMemcpyDeviceToHost, stream));
  }
}

std::uint64_t host_sum(const std::uint32_t* host, std::size_t n) {
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < n; ++i) sum += host[i];
  return sum;
}
}  // namespace

std::uint64_t read_result_unsynchronised(std::uint32_t* d_buf, std::uint32_t* host, std::size_t n,
                                         std::uint32_t value, std::uint64_t spin_ns,
                                         cudaStream_t stream) {
  check_read_args(d_buf, host, n);
  enqueue_fill_and_copy(d_buf, host, n, value, spin_ns, stream);
  return host_sum(host, n);  // BUG: the copy into `host` is still queued behind the producer
}

}  // namespace course::streams

// The exercise solutions (solutions.cuh): compiled here, in this translation unit, by the
// lesson build only; the exercise build takes exercise.cu instead. Try the exercises first.
#ifndef LESSON_EXERCISE_BUILD
#include "solutions.cuh"
#endif
