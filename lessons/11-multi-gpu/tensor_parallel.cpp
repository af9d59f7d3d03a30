// Lesson 11: tensor parallelism with NCCL (see tensor_parallel.hpp). Host code: the kernels are
// lesson 07's. Compiled with COURSE_HAVE_NCCL when CMake found NCCL.
#include "tensor_parallel.hpp"

#include <chrono>
#include <exception>
#include <functional>

#include "common/memory.hpp"
#include "common/timing.hpp"
#include "gemm.cuh"  // lesson 07
#include "multi_gpu.cuh"

#ifdef COURSE_HAVE_NCCL
#include <nccl.h>
#define NCCL_CHECK(call) ::lesson11::check_nccl(static_cast<int>(call), #call, __FILE__, __LINE__)
#endif

namespace lesson11 {

namespace {
constexpr const char* kHowToGetNccl =
    "install libnccl-dev (NVIDIA's apt repository) or the CUDA toolkit's NCCL, or point CMake "
    "at it with -DCOURSE_NCCL_ROOT=DIR (DIR/include/nccl.h, DIR/lib/libnccl.so), then configure "
    "again";

[[noreturn]] void no_nccl(const char* who) {
  throw std::runtime_error(std::string(who) + ": " + nccl_build_note());
}
}  // namespace

bool nccl_available() {
#ifdef COURSE_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

std::string nccl_build_note() {
#ifdef COURSE_HAVE_NCCL
  int v = 0;
  ncclGetVersion(&v);
  const auto text = [](int code) {
    // NCCL_VERSION(X, Y, Z) = X * 10000 + Y * 100 + Z since 2.9
    return std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." +
           std::to_string(code % 100);
  };
  return "NCCL " + text(v) + " (built against " + text(NCCL_VERSION_CODE) + ")";
#else
  return std::string("NCCL not found at build time: the NCCL parts are skipped (") + kHowToGetNccl +
         ")";
#endif
}

// ------------------------------------------------------------------------------------ errors

std::string describe_nccl(int code) {
#ifdef COURSE_HAVE_NCCL
  static const char* const names[] = {
      "ncclSuccess",         "ncclUnhandledCudaError", "ncclSystemError", "ncclInternalError",
      "ncclInvalidArgument", "ncclInvalidUsage",       "ncclRemoteError", "ncclInProgress"};
  if (code == ncclSuccess) return "";
  const std::string name =
      code >= 0 && code < 8 ? names[code] : "ncclResult " + std::to_string(code);
  return name + " (" + ncclGetErrorString(static_cast<ncclResult_t>(code)) + ")";
#else
  return "NCCL error " + std::to_string(code) + " (NCCL not found at build time)";
#endif
}

NcclError::NcclError(int code, const std::string& call, const char* file, int line,
                     const std::string& detail)
    : std::runtime_error(call + " failed at " + file + ":" + std::to_string(line) + ": " +
                         describe_nccl(code) + (detail.empty() ? "" : ": " + detail)),
      code_(code) {}

void check_nccl(int result, const char* call, const char* file, int line) {
  if (result == 0) return;
#ifdef COURSE_HAVE_NCCL
  const char* last = ncclGetLastError(nullptr);  // the comm argument is unused (nccl.h)
  throw NcclError(result, call, file, line, last != nullptr ? last : "");
#else
  throw NcclError(result, call, file, line);
#endif
}

#ifdef COURSE_HAVE_NCCL
namespace {

// Runs body(rank) for every rank between ncclGroupStart and ncclGroupEnd: one thread driving
// several GPUs must group their calls, or the first rank's collective waits forever for the
// others (NCCL docs, "Group Calls"). The group is closed even when a call fails; the first
// failure is then thrown.
void grouped(const NcclGroup& group, const std::function<void(int)>& body) {
  NCCL_CHECK(ncclGroupStart());
  std::exception_ptr failure;
  for (int r = 0; r < group.size() && !failure; ++r) {
    try {
      body(r);
    } catch (...) {
      failure = std::current_exception();
    }
  }
  const ncclResult_t end = ncclGroupEnd();
  if (failure) std::rethrow_exception(failure);
  check_nccl(end, "ncclGroupEnd()", __FILE__, __LINE__);
}
}  // namespace
#endif

// ---------------------------------------------------------------------------- communicators

NcclGroup::NcclGroup(const std::vector<int>& devices) : devices_(devices) {
  check_device_list("NcclGroup", devices, device_count());
#ifndef COURSE_HAVE_NCCL
  no_nccl("NcclGroup");
#else
  nvls_ = nccl_disable_nvls();
  comms_.assign(devices.size(), nullptr);
  NCCL_CHECK(ncclCommInitAll(comms_.data(), size(), devices_.data()));
  try {
    for (int d : devices_) {
      ScopedDevice on(d);
      streams_.emplace_back();
    }
  } catch (...) {
    for (ncclComm* c : comms_) ncclCommDestroy(c);
    throw;
  }
#endif
}

NcclGroup::~NcclGroup() {
#ifdef COURSE_HAVE_NCCL
  for (const course::Stream& s : streams_) cudaStreamSynchronize(s);
  for (ncclComm* c : comms_) {
    if (c != nullptr) ncclCommDestroy(c);
  }
#endif
}

void NcclGroup::synchronize() const {
#ifdef COURSE_HAVE_NCCL
  for (const course::Stream& s : streams_) s.synchronize();
  for (ncclComm* c : comms_) {
    ncclResult_t async = ncclSuccess;
    NCCL_CHECK(ncclCommGetAsyncError(c, &async));
    check_nccl(async, "ncclCommGetAsyncError (an error of an earlier collective)", __FILE__,
               __LINE__);
  }
#endif
}

// ------------------------------------------------------------------------------ collectives

namespace {
void check_ranks(const char* who, const NcclGroup& group, std::size_t n) {
  if (n != static_cast<std::size_t>(group.size())) {
    throw std::invalid_argument(std::string(who) + ": one buffer per rank expected (" +
                                std::to_string(group.size()) + "), got " + std::to_string(n));
  }
}
}  // namespace

void all_reduce_sum(const NcclGroup& group, const std::vector<float*>& buffers, std::size_t count) {
  check_ranks("all_reduce_sum", group, buffers.size());
#ifndef COURSE_HAVE_NCCL
  (void)count;
  no_nccl("all_reduce_sum");
#else
  grouped(group, [&](int r) {
    float* b = buffers[static_cast<std::size_t>(r)];
    NCCL_CHECK(ncclAllReduce(b, b, count, ncclFloat, ncclSum, group.comm(r), group.stream(r)));
  });
#endif
}

void all_gather(const NcclGroup& group, const std::vector<const float*>& send,
                const std::vector<float*>& recv, std::size_t count) {
  check_ranks("all_gather (send)", group, send.size());
  check_ranks("all_gather (recv)", group, recv.size());
#ifndef COURSE_HAVE_NCCL
  (void)count;
  no_nccl("all_gather");
#else
  grouped(group, [&](int r) {
    const auto i = static_cast<std::size_t>(r);
    NCCL_CHECK(ncclAllGather(send[i], recv[i], count, ncclFloat, group.comm(r), group.stream(r)));
  });
#endif
}

namespace {
// Median seconds of `reps` calls of step() followed by group.synchronize(), after `warmup`.
double median_seconds(const NcclGroup& group, int warmup, int reps,
                      const std::function<void()>& step) {
  for (int i = 0; i < warmup; ++i) {
    step();
    group.synchronize();
  }
  std::vector<double> s;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    step();
    group.synchronize();
    s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return s.empty() ? 0.0 : course::median(s);
}

// One device buffer per rank, each on its rank's device.
std::vector<course::DeviceBuffer<float>> per_rank(const NcclGroup& group, std::size_t count) {
  std::vector<course::DeviceBuffer<float>> out;
  for (int r = 0; r < group.size(); ++r) {
    ScopedDevice on(group.device(r));
    out.emplace_back(count);
    if (count > 0) CUDA_CHECK(cudaMemset(out.back().data(), 0, out.back().bytes()));
  }
  return out;
}
template <class T>
std::vector<T> pointers(std::vector<course::DeviceBuffer<float>>& v) {
  std::vector<T> p;
  for (auto& b : v) p.push_back(b.data());
  return p;
}
}  // namespace

CollectiveTiming time_collective(const NcclGroup& group, Collective kind, std::size_t bytes,
                                 int reps) {
  const auto n = static_cast<std::size_t>(group.size());
  if (bytes == 0 || bytes % (4 * n) != 0 || reps < 1) {
    throw std::invalid_argument(
        "time_collective: bytes must be a positive multiple of 4 x ranks (" +
        std::to_string(4 * n) + ") and reps >= 1");
  }
  const std::size_t floats = bytes / 4;
  std::vector<course::DeviceBuffer<float>> recv = per_rank(group, floats);
  std::vector<course::DeviceBuffer<float>> send =
      per_rank(group, kind == Collective::all_gather ? floats / n : 0);
  const auto step = [&] {
    if (kind == Collective::all_reduce) {
      all_reduce_sum(group, pointers<float*>(recv), floats);
    } else {
      all_gather(group, pointers<const float*>(send), pointers<float*>(recv), floats / n);
    }
  };
  CollectiveTiming t;
  t.bytes = bytes;
  t.seconds = median_seconds(group, 2, reps, step);
  t.algbw_gbps = algbw_gbps(bytes, t.seconds);
  t.busbw_gbps = kind == Collective::all_reduce
                     ? allreduce_busbw_gbps(bytes, t.seconds, group.size())
                     : allgather_busbw_gbps(bytes, t.seconds, group.size());
  return t;
}

// ------------------------------------------------------------------------- tensor-parallel GEMM

const char* to_string(TpMode mode) {
  return mode == TpMode::column_parallel ? "column-parallel + all-gather"
                                         : "row-parallel + all-reduce";
}

namespace {
// Rows [r0, r0 + rows) and columns [c0, c0 + cols) of a row-major matrix with `ld` columns.
std::vector<float> block(const std::vector<float>& m, int ld, int r0, int rows, int c0, int cols) {
  std::vector<float> out(static_cast<std::size_t>(rows) * cols);
  for (int r = 0; r < rows; ++r) {
    const auto src = m.begin() + static_cast<std::ptrdiff_t>(r0 + r) * ld + c0;
    std::copy(src, src + cols, out.begin() + static_cast<std::ptrdiff_t>(r) * cols);
  }
  return out;
}

void check_tp_args(int M, int N, int K, const std::vector<float>& A, const std::vector<float>& B) {
  if (M < 1 || N < 1 || K < 1) {
    throw std::invalid_argument("tensor-parallel GEMM: M, N, K must be >= 1");
  }
  if (A.size() != static_cast<std::size_t>(M) * K || B.size() != static_cast<std::size_t>(K) * N) {
    throw std::invalid_argument("tensor-parallel GEMM: A must hold M x K and B K x N floats");
  }
}
}  // namespace

TpResult tensor_parallel_gemm(const NcclGroup& group, TpMode mode, int M, int N, int K,
                              const std::vector<float>& A, const std::vector<float>& B, int reps) {
  check_tp_args(M, N, K, A, B);
  if (reps < 0) throw std::invalid_argument("tensor_parallel_gemm: reps must be >= 0");
  const int g = group.size();
  TpResult result;
  const bool column = mode == TpMode::column_parallel;
  result.split = partition(column ? N : K, g, kSplitAlign);
  const Partition& p = result.split;
  const std::size_t chunk = static_cast<std::size_t>(M) * p.max_size();  // all-gather count

  struct Rank {
    course::DeviceBuffer<float> a, b, partial, gathered, c;
  };
  std::vector<Rank> ranks(static_cast<std::size_t>(g));
  for (int r = 0; r < g; ++r) {
    ScopedDevice on(group.device(r));
    Rank& k = ranks[static_cast<std::size_t>(r)];
    const int off = p.offset[static_cast<std::size_t>(r)], n = p.size[static_cast<std::size_t>(r)];
    if (column) {
      k.a = course::to_device(A);
      k.b = course::to_device(block(B, N, 0, K, off, n));
      k.partial = course::DeviceBuffer<float>(chunk);
      CUDA_CHECK(cudaMemset(k.partial.data(), 0, k.partial.bytes()));  // the padding, if uneven
      k.gathered = course::DeviceBuffer<float>(chunk * g);
    } else {
      k.a = course::to_device(block(A, K, 0, M, off, n));
      k.b = course::to_device(block(B, N, off, n, 0, N));
    }
    k.c = course::DeviceBuffer<float>(static_cast<std::size_t>(M) * N);
  }

  const auto step = [&] {
    for (int r = 0; r < g; ++r) {
      // A launch goes to the current device's stream: make the rank's device current first.
      ScopedDevice on(group.device(r));
      Rank& k = ranks[static_cast<std::size_t>(r)];
      const int n = p.size[static_cast<std::size_t>(r)];
      if (column) {
        lesson07::sgemm_v8_double_buffering(M, n, K, 1.0f, k.a.data(), k.b.data(), 0.0f,
                                            k.partial.data(), group.stream(r));
      } else {
        lesson07::sgemm_v8_double_buffering(M, N, n, 1.0f, k.a.data(), k.b.data(), 0.0f, k.c.data(),
                                            group.stream(r));
      }
    }
    if (!column) {
      std::vector<float*> c;
      for (Rank& k : ranks) c.push_back(k.c.data());
      all_reduce_sum(group, c, static_cast<std::size_t>(M) * N);
      return;
    }
    std::vector<const float*> send;
    std::vector<float*> recv;
    for (Rank& k : ranks) {
      send.push_back(k.partial.data());
      recv.push_back(k.gathered.data());
    }
    all_gather(group, send, recv, chunk);
    // gathered = [part 0: M x size0 | pad][part 1 ...]: each part's columns into their place.
    for (int r = 0; r < g; ++r) {
      ScopedDevice on(group.device(r));
      Rank& k = ranks[static_cast<std::size_t>(r)];
      for (int q = 0; q < g; ++q) {
        const auto w = static_cast<std::size_t>(p.size[static_cast<std::size_t>(q)]) * 4;
        CUDA_CHECK(cudaMemcpy2DAsync(k.c.data() + p.offset[static_cast<std::size_t>(q)],
                                     static_cast<std::size_t>(N) * 4, k.gathered.data() + chunk * q,
                                     w, w, M, cudaMemcpyDeviceToDevice, group.stream(r)));
      }
    }
  };
  result.ms = 1e3 * median_seconds(group, 1, reps, step);  // the warm-up step is the result
  for (int r = 0; r < g; ++r) {
    ScopedDevice on(group.device(r));
    result.c.push_back(course::to_host(ranks[static_cast<std::size_t>(r)].c));
  }
  return result;
}

std::vector<float> single_gpu_gemm(int device, int M, int N, int K, const std::vector<float>& A,
                                   const std::vector<float>& B, int reps, double* ms) {
  check_tp_args(M, N, K, A, B);
  ScopedDevice on(device);
  const course::DeviceBuffer<float> a = course::to_device(A), b = course::to_device(B);
  course::DeviceBuffer<float> c(static_cast<std::size_t>(M) * N);
  course::Stream stream;
  const auto run = [&] {
    lesson07::sgemm_v8_double_buffering(M, N, K, 1.0f, a.data(), b.data(), 0.0f, c.data(), stream);
  };
  run();
  stream.synchronize();
  if (ms != nullptr) {
    *ms = reps > 0 ? course::measure(stream, reps, run, course::L2::warm, true).latency_ms : 0.0;
  }
  return course::to_host(c);
}

}  // namespace lesson11
