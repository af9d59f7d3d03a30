// Lesson 02 benchmark: every memory-type measurement of the lesson, in one run (make bench
// LESSON=02; JSON in build/bench/lesson02.json). Names (Google Benchmark appends /manual_time):
//
//   transfer/<H2D|D2H>/<host kind>/<bytes>  cudaMemcpyAsync from/to pageable, pinned,
//                                           write-combined and registered memory, 4 KiB..256 MiB.
//                                           GB/s = bytes / time. The link (PCIe, NVLink-C2C) is
//                                           the limit here, not DRAM, so there is no %copy.
//   preprocess/<input>/<bytes>              normalize_u8 on one frame whose input is in device
//                                           memory, copied from pinned memory first, read
//                                           zero-copy, or in managed memory (migrated on demand,
//                                           or prefetched). GB/s of input bytes; %device_resident
//   alloc/<strategy>/<bytes>                one frame's scratch: allocate, memset, free, sync.
//                                           The time is host wall-clock time per frame.
//   transpose/<version>/<n>x<n>             GB/s counting bytes read + written; %memcpy: of a
//                                           device-to-device cudaMemcpy of the same bytes, run
//                                           just before; %copy: of the 1 GiB copy ceiling;
//                                           bank_ways: the conflict degree of the tile's column
//                                           read
#include <chrono>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/bench.hpp"
#include "common/cuda_check.hpp"
#include "common/memory.hpp"
#include "common/stream.hpp"
#include "memory_types.cuh"

namespace {

using namespace lesson02;
namespace cb = course::bench;

constexpr std::size_t KiB = 1024, MiB = 1024 * KiB;
constexpr std::size_t kMaxTransfer = 256 * MiB;

double gbps(double bytes, double seconds) {
  return seconds > 0.0 ? bytes / seconds / 1e9 : 0.0;
}

// ------------------------------------------------------------------------------- transfers

// One 256 MiB host allocation per kind and one device buffer, made on first use and kept for the
// whole run: pinning 256 MiB takes far longer than copying it, and Google Benchmark calls each
// benchmark function once per repetition. Owned by main(), so they are freed before the CUDA
// runtime tears down at exit.
struct TransferBuffers {
  std::map<HostKind, std::unique_ptr<HostAllocation>> host;
  std::unique_ptr<course::DeviceBuffer<unsigned char>> device;
};
TransferBuffers* g_transfer_buffers = nullptr;

void BM_transfer(benchmark::State& state, HostKind kind, Direction direction) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  TransferBuffers& b = *g_transfer_buffers;
  auto& host = b.host[kind];
  if (!host) host = std::make_unique<HostAllocation>(kind, kMaxTransfer);
  if (!b.device) b.device = std::make_unique<course::DeviceBuffer<unsigned char>>(kMaxTransfer);
  course::Stream stream;
  const auto copy = [&] { copy_async(host->data(), b.device->data(), bytes, direction, stream); };
  // Pageable: the call blocks the host while the driver stages the data, so only the end-to-end
  // time exists (and is what a caller pays). The others: GPU time, plus the end-to-end latency.
  const double s = kind == HostKind::pageable
                       ? cb::time_on_host(state,
                                          [&] {
                                            copy();
                                            stream.synchronize();
                                          })
                       : cb::time_on_gpu(state, stream, cb::Options{course::L2::warm, true}, copy);
  if (kind == HostKind::pageable) {
    state.counters["latency_us"] = 1e6 * s;
    state.SetLabel("end to end");
  }
  cb::report_throughput(state, static_cast<double>(bytes), s);
}

// ----------------------------------------------------------------------------- preprocessing

enum class Input { device_resident, explicit_copy, zero_copy, managed_on_demand, managed_prefetch };
const char* name_of(Input input) {
  switch (input) {
    case Input::device_resident:
      return "device_resident";
    case Input::explicit_copy:
      return "pinned_copy_then_kernel";
    case Input::zero_copy:
      return "zero_copy";
    case Input::managed_on_demand:
      return "managed_on_demand";
    case Input::managed_prefetch:
      return "managed_prefetch";
  }
  return "?";
}

void BM_preprocess(benchmark::State& state, Input input) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const float scale = 1.0f / 255.0f, shift = 0.0f;
  const bool managed = input == Input::managed_on_demand || input == Input::managed_prefetch;
  if (input == Input::managed_prefetch && !query_memory_facts(0).concurrent_managed_access) {
    state.SkipWithError("no concurrent managed access: cudaMemPrefetchAsync is not available");
    return;
  }
  course::Stream stream;
  course::PinnedBuffer<std::uint8_t> frame(n, cudaHostAllocMapped);
  for (std::size_t i = 0; i < n; ++i) frame[i] = static_cast<std::uint8_t>(i * 7);
  course::DeviceBuffer<std::uint8_t> d_in(n);
  CUDA_CHECK(cudaMemcpy(d_in.data(), frame.data(), n, cudaMemcpyHostToDevice));
  course::DeviceBuffer<float> d_out(n);
  ManagedBuffer<std::uint8_t> m_in(managed ? n : 0);
  const auto* mapped = static_cast<const std::uint8_t*>(mapped_device_pointer(frame.data()));

  // Managed runs: the host writes the frame before each iteration, so its pages start on the host.
  const auto setup = [&] {
    if (!managed) return;
    CUDA_CHECK(cudaStreamSynchronize(stream));
    std::memcpy(m_in.data(), frame.data(), n);
  };
  const auto enqueue = [&] {
    switch (input) {
      case Input::device_resident:
        normalize_u8(d_in.data(), d_out.data(), n, scale, shift, stream);
        break;
      case Input::explicit_copy:
        CUDA_CHECK(cudaMemcpyAsync(d_in.data(), frame.data(), n, cudaMemcpyHostToDevice, stream));
        normalize_u8(d_in.data(), d_out.data(), n, scale, shift, stream);
        break;
      case Input::zero_copy:
        normalize_u8(mapped, d_out.data(), n, scale, shift, stream);
        break;
      case Input::managed_on_demand:
        normalize_u8(m_in.data(), d_out.data(), n, scale, shift, stream);
        break;
      case Input::managed_prefetch:
        prefetch_managed(m_in.data(), n, 0, stream);
        normalize_u8(m_in.data(), d_out.data(), n, scale, shift, stream);
        break;
    }
  };
  const double s = cb::time_on_gpu(state, stream, setup, enqueue);
  const double rate = gbps(static_cast<double>(n), s);
  state.counters["GB/s"] = rate;
  if (input == Input::device_resident) cb::set_baseline("device_resident", rate);
  cb::report_vs_baseline(state, "device_resident", rate);
}

// ------------------------------------------------------------------------------ allocation

void BM_alloc(benchmark::State& state, AllocStrategy strategy) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  course::Stream stream;
  MemPool retaining(0, std::numeric_limits<std::uint64_t>::max());
  cb::time_on_host(state, [&] { alloc_use_free(strategy, bytes, stream, &retaining); });
}

// ------------------------------------------------------------------------------- transpose

using TransposeFn = void (*)(const float*, float*, int, int, cudaStream_t);

void BM_transpose_copy(benchmark::State& state, int n) {
  const std::size_t bytes = static_cast<std::size_t>(n) * n * sizeof(float);
  course::DeviceBuffer<float> in(static_cast<std::size_t>(n) * n), out(in.size());
  CUDA_CHECK(cudaMemset(in.data(), 0, bytes));
  course::Stream stream;
  const double s = cb::time_on_gpu(state, stream, [&] {
    CUDA_CHECK(cudaMemcpyAsync(out.data(), in.data(), bytes, cudaMemcpyDeviceToDevice, stream));
  });
  cb::report_bandwidth(state, 2.0 * bytes, s);
  cb::set_baseline("memcpy", gbps(2.0 * bytes, s));
}

// pad < 0: `launch` is one of v0..v2; otherwise v3 with that padding.
void BM_transpose(benchmark::State& state, int n, TransposeFn launch, int pad, int stride) {
  const std::size_t bytes = static_cast<std::size_t>(n) * n * sizeof(float);
  course::DeviceBuffer<float> in(static_cast<std::size_t>(n) * n), out(in.size());
  CUDA_CHECK(cudaMemset(in.data(), 0, bytes));
  course::Stream stream;
  const double s = cb::time_on_gpu(state, stream, [&] {
    if (pad < 0) {
      launch(in.data(), out.data(), n, n, stream);
    } else {
      transpose_v3_dynamic_smem(in.data(), out.data(), n, n, pad, stream);
    }
  });
  cb::report_bandwidth(state, 2.0 * bytes, s);
  cb::report_vs_baseline(state, "memcpy", gbps(2.0 * bytes, s));
  if (stride > 0) state.counters["bank_ways"] = bank_conflict_ways(stride);
}

// ---------------------------------------------------------------------------- registration

void register_benchmarks() {
  for (Direction dir : {Direction::host_to_device, Direction::device_to_host}) {
    for (HostKind kind : kAllHostKinds) {
      const std::string name = std::string("transfer/") + to_string(dir) + "/" + to_string(kind);
      benchmark::RegisterBenchmark(name.c_str(),
                                   [kind, dir](benchmark::State& s) { BM_transfer(s, kind, dir); })
          ->RangeMultiplier(4)
          ->Range(4 * KiB, kMaxTransfer)
          ->Apply(cb::defaults)
          ->MinTime(0.02);
    }
  }

  // A network input (640x640 RGB), a 1080p and a 4K camera frame. The device-resident run of
  // each size comes first: it is the baseline of the four after it.
  for (std::size_t bytes :
       {std::size_t{640} * 640 * 3, std::size_t{1920} * 1080 * 3, std::size_t{3840} * 2160 * 3}) {
    for (Input input : {Input::device_resident, Input::explicit_copy, Input::zero_copy,
                        Input::managed_on_demand, Input::managed_prefetch}) {
      const std::string name = std::string("preprocess/") + name_of(input);
      benchmark::RegisterBenchmark(name.c_str(),
                                   [input](benchmark::State& s) { BM_preprocess(s, input); })
          ->Arg(static_cast<std::int64_t>(bytes))
          ->Apply(cb::defaults)
          ->MinTime(0.05);
    }
  }

  const struct {
    AllocStrategy strategy;
    const char* name;
  } allocators[] = {{AllocStrategy::cuda_malloc, "alloc/cudaMalloc"},
                    {AllocStrategy::async_default_pool, "alloc/cudaMallocAsync_default_pool"},
                    {AllocStrategy::async_retaining_pool, "alloc/cudaMallocAsync_retaining_pool"}};
  for (const auto& a : allocators) {
    const AllocStrategy strategy = a.strategy;
    benchmark::RegisterBenchmark(a.name, [strategy](benchmark::State& s) { BM_alloc(s, strategy); })
        ->Arg(static_cast<std::int64_t>(1 * MiB))
        ->Arg(static_cast<std::int64_t>(64 * MiB))
        ->Apply(cb::defaults)
        ->MinTime(0.05);
  }

  for (int n : {4096, 8192}) {
    const std::string shape = "/" + std::to_string(n) + "x" + std::to_string(n);
    const auto add = [&](const std::string& version, auto&& fn) {
      benchmark::RegisterBenchmark(("transpose/" + version + shape).c_str(), fn)
          ->Apply(cb::defaults)
          ->MinTime(0.1);
    };
    add("memcpy_d2d", [n](benchmark::State& s) { BM_transpose_copy(s, n); });
    add("v0_naive", [n](benchmark::State& s) { BM_transpose(s, n, transpose_v0_naive, -1, 0); });
    add("v1_shared_tile",
        [n](benchmark::State& s) { BM_transpose(s, n, transpose_v1_shared_tile, -1, kTileDim); });
    add("v2_padded",
        [n](benchmark::State& s) { BM_transpose(s, n, transpose_v2_padded, -1, kTileDim + 1); });
    for (int pad : {0, 1, 2, 4, 8, 16}) {
      add("v3_dynamic_smem_pad" + std::to_string(pad),
          [n, pad](benchmark::State& s) { BM_transpose(s, n, nullptr, pad, kTileDim + pad); });
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  TransferBuffers buffers;  // freed when main returns, before the CUDA runtime shuts down
  g_transfer_buffers = &buffers;
  register_benchmarks();
  return course::bench::run_main(argc, argv);
}
