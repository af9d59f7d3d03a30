// Lesson 11: tensor parallelism with NCCL (see tensor_parallel.hpp). Host code: the kernels are
// lesson 07's. Compiled with COURSE_HAVE_NCCL when CMake found NCCL.
#include "tensor_parallel.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <thread>

#include "common/memory.hpp"
#include "common/timing.hpp"
#include "gemm.cuh"  // lesson 07
#include "multi_gpu.cuh"

#ifdef COURSE_HAVE_NCCL
#include <nccl.h>
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

const char* to_string(NcclInit init) {
  return init == NcclInit::one_thread ? "ncclCommInitAll from one thread"
                                      : "ncclCommInitRankConfig per thread, non-blocking";
}

// ---------------------------------------------------------------------------- communicators

namespace {
using Clock = std::chrono::steady_clock;

std::string ms_text(std::chrono::milliseconds ms) {
  return std::to_string(ms.count()) + " ms";
}

#ifdef COURSE_HAVE_NCCL
// Lets other threads, NCCL's proxy threads among them, run between two polls (the NCCL User
// Guide's polling loop calls sched_yield). Yielding keeps a short wait as prompt as a spinning
// cudaStreamSynchronize, which the timings rely on; after 50 ms the poll backs off to 100 us
// sleeps (Linux adds about 50 us of timer slack), so a long wait does not hold a core.
void pause_poll(Clock::time_point since) {
  if (Clock::now() - since < std::chrono::milliseconds(50)) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

// One rank's communicator, made on a thread of its own bound to `device`: ncclCommInitRankConfig
// with blocking = 0 returns at once (ncclInProgress) and the rank joins in the background; the
// thread polls ncclCommGetAsyncError until the state leaves ncclInProgress, another rank failed
// (`stop`), or the deadline passed. Returns "" on success, else what went wrong; the
// communicator, when one was made, is left in *comm for the caller to abort.
std::string init_rank_nonblocking(ncclComm** comm, int nranks, const ncclUniqueId& id, int rank,
                                  int device, Clock::time_point deadline,
                                  const std::atomic<bool>& stop) {
  const std::string who = "rank " + std::to_string(rank) + " (GPU " + std::to_string(device) + ")";
  const cudaError_t set = cudaSetDevice(device);
  if (set != cudaSuccess) return who + ": cudaSetDevice failed: " + course::describe(set);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclResult_t state = ncclCommInitRankConfig(comm, nranks, id, rank, &config);
  if (state != ncclSuccess && state != ncclInProgress) {
    return who + ": ncclCommInitRankConfig failed: " + describe_nccl(state);
  }
  const auto t0 = Clock::now();
  while (state == ncclInProgress) {
    if (stop.load()) return who + ": stopped because another rank failed";
    if (Clock::now() > deadline) return who + ": did not join within the timeout";
    pause_poll(t0);
    const ncclResult_t r = ncclCommGetAsyncError(*comm, &state);
    if (r != ncclSuccess) return who + ": ncclCommGetAsyncError failed: " + describe_nccl(r);
  }
  if (state != ncclSuccess) return who + ": ncclCommInitRankConfig failed: " + describe_nccl(state);
  return "";
}
#endif
}  // namespace

NcclGroup::NcclGroup(const std::vector<int>& devices, NcclInit init,
                     std::chrono::milliseconds timeout)
    : devices_(devices), init_(init), timeout_(timeout) {
  if (timeout < std::chrono::milliseconds(1)) {
    throw std::invalid_argument("NcclGroup: the timeout must be at least 1 ms, got " +
                                ms_text(timeout));
  }
  check_device_list("NcclGroup", devices, device_count());
#ifndef COURSE_HAVE_NCCL
  no_nccl("NcclGroup");
#else
  nvls_ = nccl_disable_nvls();
  comms_.assign(devices.size(), nullptr);
  if (init == NcclInit::one_thread) {
    NCCL_CHECK(ncclCommInitAll(comms_.data(), size(), devices_.data()));
  } else {
    // One id for the whole group, made once and handed to every rank's thread (in a deployment
    // of one process per GPU it travels over a socket, MPI or a shared file instead).
    ncclUniqueId id;
    NCCL_CHECK(ncclGetUniqueId(&id));
    const Clock::time_point deadline = Clock::now() + timeout_;
    std::atomic<bool> stop{false};
    std::vector<std::string> failure(devices.size());
    std::vector<std::thread> threads;
    for (int r = 0; r < size(); ++r) {
      threads.emplace_back([&, r] {
        const auto i = static_cast<std::size_t>(r);
        failure[i] = init_rank_nonblocking(&comms_[i], size(), id, r, devices_[i], deadline, stop);
        if (!failure[i].empty()) stop = true;
      });
    }
    for (std::thread& t : threads) t.join();
    std::string why;
    bool timed_out = false;
    for (const std::string& f : failure) {
      if (f.empty()) continue;
      why += (why.empty() ? "" : "; ") + f;
      timed_out = timed_out || f.find("did not join") != std::string::npos;
    }
    if (!why.empty()) {
      abort();
      const std::string what = "NcclGroup (" + std::string(to_string(init)) + ", timeout " +
                               ms_text(timeout_) + "): " + why +
                               "; every communicator made was aborted (ncclCommAbort)";
      if (timed_out) throw NcclTimeout(what);
      throw NcclError(ncclInternalError, "ncclCommInitRankConfig", __FILE__, __LINE__, what);
    }
  }
  try {
    for (int d : devices_) {
      ScopedDevice on(d);
      streams_.emplace_back();
    }
  } catch (...) {
    abort();
    throw;
  }
#endif
}

void NcclGroup::abort() const noexcept {
#ifdef COURSE_HAVE_NCCL
  int previous = 0;
  const bool restore = cudaGetDevice(&previous) == cudaSuccess;
  for (std::size_t r = 0; r < comms_.size(); ++r) {
    if (comms_[r] == nullptr) continue;
    cudaSetDevice(devices_[r]);
    ncclCommAbort(comms_[r]);  // nothing useful to do with its result on a failure path
    comms_[r] = nullptr;
  }
  if (restore) cudaSetDevice(previous);
#endif
  aborted_ = true;
}

NcclGroup::~NcclGroup() {
#ifdef COURSE_HAVE_NCCL
  if (aborted_) return;
  // Destroy only what has finished: ncclCommDestroy waits for the communicator's work, which
  // never ends if a peer is gone. Whatever is not done within the timeout is aborted instead.
  const auto t0 = Clock::now();
  bool done = false;
  while (!done && Clock::now() - t0 < timeout_) {
    done = true;
    for (const course::Stream& s : streams_) {
      if (cudaStreamQuery(s) == cudaErrorNotReady) done = false;
    }
    if (!done) pause_poll(t0);
  }
  if (!done) {
    abort();
    return;
  }
  for (ncclComm* c : comms_) {
    if (c != nullptr) ncclCommDestroy(c);
  }
#endif
}

ncclComm* NcclGroup::comm(int rank) const {
  check_usable("NcclGroup::comm");
  return comms_.at(static_cast<std::size_t>(rank));
}

void NcclGroup::check_usable(const char* who) const {
  if (aborted_) {
    throw std::logic_error(std::string(who) +
                           ": the group's communicators were aborted after an error or a "
                           "timeout; make a new NcclGroup");
  }
}

void NcclGroup::synchronize(std::chrono::milliseconds deadline) const {
  check_usable("NcclGroup::synchronize");
#ifdef COURSE_HAVE_NCCL
  // The NCCL User Guide's loop ("Error handling and communicator abort") over every rank, with
  // a deadline: a stream that is done is done; a CUDA error or an asynchronous NCCL error ends
  // the wait at once; otherwise poll again until the deadline.
  const auto t0 = Clock::now();
  const std::string aborted = "; every communicator of the group was aborted (ncclCommAbort)";
  std::vector<bool> done(streams_.size(), false);
  for (;;) {
    bool all = true;
    for (int r = 0; r < size(); ++r) {
      const auto i = static_cast<std::size_t>(r);
      const auto who = [&] {
        return "rank " + std::to_string(r) + " (GPU " + std::to_string(device(r)) + ")";
      };
      if (!done[i]) {
        const cudaError_t e = cudaStreamQuery(streams_[i]);
        if (e == cudaSuccess) {
          done[i] = true;
        } else if (e != cudaErrorNotReady) {
          abort();
          const std::string call = "cudaStreamQuery(" + who() + "'s stream)" + aborted;
          throw course::CudaError(e, call.c_str(), __FILE__, __LINE__);
        }
      }
      ncclResult_t async = ncclSuccess;
      const ncclResult_t q = ncclCommGetAsyncError(comms_[i], &async);
      if (q != ncclSuccess) async = q;
      // ncclInProgress: a non-blocking communicator still issuing work, not an error.
      if (async != ncclSuccess && async != ncclInProgress) {
        const char* last = ncclGetLastError(nullptr);
        const std::string detail =
            who() + " reported an asynchronous error" +
            (last != nullptr && *last != '\0' ? std::string(" (") + last + ")" : "") + aborted;
        abort();
        throw NcclError(async, "ncclCommGetAsyncError", __FILE__, __LINE__, detail);
      }
      all = all && done[i] && async == ncclSuccess;
    }
    if (all) return;
    if (Clock::now() - t0 > deadline) {
      std::string late;
      for (int r = 0; r < size(); ++r) {
        if (done[static_cast<std::size_t>(r)]) continue;
        late += (late.empty() ? "" : ", ") + std::string("rank ") + std::to_string(r) + " (GPU " +
                std::to_string(device(r)) + ")";
      }
      if (late.empty()) late = "a communicator still issuing its work (ncclInProgress)";
      abort();
      throw NcclTimeout("NcclGroup::synchronize: " + late + " did not finish within " +
                        ms_text(deadline) +
                        " (cudaStreamQuery: not ready; no asynchronous NCCL error reported)" +
                        aborted + ": make a new NcclGroup");
    }
    pause_poll(t0);
  }
#endif
}

void NcclGroup::group_calls(const std::function<void(int rank)>& body) const {
  check_usable("NcclGroup::group_calls");
#ifndef COURSE_HAVE_NCCL
  (void)body;
  no_nccl("NcclGroup::group_calls");
#else
  NCCL_CHECK(ncclGroupStart());
  std::exception_ptr failure;
  for (int r = 0; r < size() && !failure; ++r) {
    try {
      body(r);
    } catch (...) {
      failure = std::current_exception();
    }
  }
  ncclResult_t end = ncclGroupEnd();
  // Non-blocking communicators: ncclGroupEnd may return while NCCL still issues the work, and
  // each communicator reports ncclInProgress until it is done (NCCL User Guide, "Group Calls":
  // "Nonblocking Group Operation").
  const auto t0 = Clock::now();
  for (std::size_t r = 0; end == ncclInProgress && r < comms_.size();) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t q = ncclCommGetAsyncError(comms_[r], &state);
    if (q != ncclSuccess) {
      end = q;
    } else if (state == ncclInProgress) {
      if (Clock::now() - t0 > timeout_) {
        abort();
        throw NcclTimeout("NcclGroup::group_calls: ncclGroupEnd was still issuing rank " +
                          std::to_string(r) + "'s work after " + ms_text(timeout_) +
                          "; every communicator of the group was aborted (ncclCommAbort)");
      }
      pause_poll(t0);
    } else if (state != ncclSuccess) {
      end = state;
    } else if (++r == comms_.size()) {
      end = ncclSuccess;
    }
  }
  // Collectives posted for some ranks and not for others would wait forever for the others.
  if ((failure || end != ncclSuccess) && size() > 1) abort();
  if (failure) std::rethrow_exception(failure);
  check_nccl(end, "ncclGroupEnd()", __FILE__, __LINE__);
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
  group.group_calls([&](int r) {
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
  group.group_calls([&](int r) {
    const auto i = static_cast<std::size_t>(r);
    NCCL_CHECK(ncclAllGather(send[i], recv[i], count, ncclFloat, group.comm(r), group.stream(r)));
  });
#endif
}

double median_step_seconds(const NcclGroup& group, int warmup, int reps, int iters,
                           const std::function<void()>& step) {
  for (int i = 0; i < warmup; ++i) {
    for (int k = 0; k < iters; ++k) step();
    group.synchronize();
  }
  std::vector<double> s;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < iters; ++k) step();
    group.synchronize();
    s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
                iters);
  }
  return s.empty() ? 0.0 : course::median(s);
}

namespace {
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
                                 int reps, int iters) {
  const auto n = static_cast<std::size_t>(group.size());
  if (bytes == 0 || bytes % (4 * n) != 0 || reps < 1 || iters < 1) {
    throw std::invalid_argument(
        "time_collective: bytes must be a positive multiple of 4 x ranks (" +
        std::to_string(4 * n) + "), reps >= 1 and iters >= 1");
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
  t.seconds = median_step_seconds(group, 1, reps, iters, step);
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
  // The column-parallel gather: rank r contributes its M x N_r block, so it lands at M x n_r
  // in the gathered buffer (gather_layout's displacement), M x N floats in all.
  std::vector<std::size_t> counts;
  for (int n : p.size) counts.push_back(static_cast<std::size_t>(M) * n);

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
      k.partial = course::DeviceBuffer<float>(static_cast<std::size_t>(M) * n);
      k.gathered = course::DeviceBuffer<float>(static_cast<std::size_t>(M) * N);
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
    all_gather_uneven(group, send, recv, counts);
    // gathered = [part 0: M x size0][part 1: M x size1]...: each part's columns into place.
    for (int r = 0; r < g; ++r) {
      ScopedDevice on(group.device(r));
      Rank& k = ranks[static_cast<std::size_t>(r)];
      for (int q = 0; q < g; ++q) {
        const auto iq = static_cast<std::size_t>(q);
        const auto w = static_cast<std::size_t>(p.size[iq]) * 4;
        const std::size_t displ = static_cast<std::size_t>(M) * p.offset[iq];
        CUDA_CHECK(cudaMemcpy2DAsync(k.c.data() + p.offset[iq], static_cast<std::size_t>(N) * 4,
                                     k.gathered.data() + displ, w, w, M, cudaMemcpyDeviceToDevice,
                                     group.stream(r)));
      }
    }
  };
  result.ms = 1e3 * median_step_seconds(group, 1, reps, 1, step);  // the warm-up step is the result
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
