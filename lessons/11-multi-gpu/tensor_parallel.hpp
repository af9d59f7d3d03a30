// Lesson 11: tensor parallelism with NCCL. One layer's GEMM, C = A B (A: M x K activations, B:
// K x N weights, row-major FP32), split over g GPUs as Megatron-LM splits a transformer's MLP:
//
//   column-parallel   GPU r holds B's columns [n_r, n_r + N_r) and computes C[:, n_r ..] = A B_r
//                     (M x N_r); an all-gather gives every GPU all of C. No sum is split: each
//                     output is the same K-term sum as on one GPU.
//   row-parallel      GPU r holds A's columns and B's rows [k_r, k_r + K_r) and computes the
//                     partial product P_r = A_r B_r (M x N); an all-reduce (sum) gives every GPU
//                     C = sum_r P_r. The K-term sum is cut into g pieces added in NCCL's order:
//                     not bit-identical to one GPU, within split_vs_single_bound.
//
//         column-parallel                                row-parallel
//     A (whole)   B = [B0 | B1]                  A = [A0 | A1]    B = [B0 ; B1]
//     GPU0: A B0 -> C0 \                         GPU0: A0 B0 = P0 \
//     GPU1: A B1 -> C1 -+ all-gather -> [C0|C1]  GPU1: A1 B1 = P1 -+ all-reduce -> P0 + P1
//
// The split is lesson11::partition (multi_gpu_host.hpp) with kSplitAlign: uneven parts are
// allowed when every part starts on a multiple of 8 elements. NCCL's all-gather takes equal
// counts from every rank, so the column-parallel gather is all_gather_uneven (exercise 4): one
// grouped broadcast per rank, M x N_r floats each, after which every GPU copies each part's
// columns into their place in C (cudaMemcpy2DAsync).
// The GEMM on each GPU is lesson 07's best SGEMM (lesson07::sgemm_v8_double_buffering). The same
// splits in FP16 on lesson 10's tensor cores, at inference M, with the collective timed against
// the GEMM and overlapped with it: tensor_parallel_fp16.hpp.
//
// Errors never hang (NCCL User Guide, "Error handling and communicator abort"): a wait polls
// cudaStreamQuery and ncclCommGetAsyncError against a deadline, and on an asynchronous error or
// a timeout aborts every communicator of the group (ncclCommAbort) and throws.
//
// NCCL is optional at build time: without it (CMake says so when it configures) every function
// here that needs it throws std::runtime_error("... NCCL not found at build time ..."), and
// nccl_available() is false.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/stream.hpp"
#include "multi_gpu_host.hpp"

struct ncclComm;  // nccl.h's ncclComm_t is ncclComm*

namespace lesson11 {

bool nccl_available();
// "NCCL 2.28.9 (built against 2.28.9)" or "NCCL not found at build time (...how to enable...)".
std::string nccl_build_note();

// A failed NCCL call: "ncclAllReduce(...) failed at tensor_parallel.cpp:120: ncclInvalidArgument
// (invalid argument (run with NCCL_DEBUG=WARN for details))" plus ncclGetLastError's detail when
// there is one. code() is the ncclResult_t value.
class NcclError : public std::runtime_error {
 public:
  NcclError(int code, const std::string& call, const char* file, int line,
            const std::string& detail = "");
  int code() const noexcept { return code_; }

 private:
  int code_;
};
// Throws NcclError(result, call, file, line, ncclGetLastError's text) unless result is
// ncclSuccess (0). NCCL_CHECK(call) below calls it.
void check_nccl(int result, const char* call, const char* file, int line);
// The message NcclError would carry, for code (an ncclResult_t value); "" for ncclSuccess.
std::string describe_nccl(int code);

// A wait on a group's NCCL work that passed its deadline: "NcclGroup::synchronize: rank 0 (GPU
// 0) did not finish within 200 ms ...; every communicator of the group was aborted
// (ncclCommAbort)". The group is then unusable: make a new one.
class NcclTimeout : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// How a group's communicators are created:
//   one_thread         ncclCommInitAll from the calling thread (blocking communicators)
//   thread_per_device  ncclGetUniqueId once, then one host thread per device that binds its
//                      device and calls ncclCommInitRankConfig for its rank with blocking = 0
//                      (a non-blocking communicator), polling ncclCommGetAsyncError until the
//                      rank has joined, a rank failed, or the deadline passed: the way a
//                      deployment that runs a thread or a process per GPU creates them, with an
//                      init that cannot wait forever for a rank that never comes.
enum class NcclInit { one_thread, thread_per_device };
const char* to_string(NcclInit init);

// One NCCL communicator per device, all in this process, and a stream per rank to run the
// collectives on. Rank r is devices[r]. Creating it sets NCCL_NVLS_ENABLE=0 (without overwriting
// the user's value: nccl_disable_nvls) first, then creates the communicators as `init` says.
// `timeout` is the deadline of every wait: creation (thread_per_device), synchronize(),
// group_calls() and the destructor.
// Destroying it waits (within the timeout) for the streams and destroys the communicators
// (ncclCommDestroy); if they do not finish, or the group already failed, it aborts them
// (ncclCommAbort) instead, which cannot block on a peer.
// Throws std::invalid_argument for a bad device list (check_device_list: empty, out of range,
// repeated) or a timeout < 1 ms, before any CUDA or NCCL call; NcclError naming the init call;
// NcclTimeout if a rank has not joined within the timeout (every communicator made so far is
// aborted); std::runtime_error without NCCL.
class NcclGroup {
 public:
  explicit NcclGroup(const std::vector<int>& devices, NcclInit init = NcclInit::one_thread,
                     std::chrono::milliseconds timeout = std::chrono::seconds(60));
  ~NcclGroup();
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

  int size() const { return static_cast<int>(devices_.size()); }
  int device(int rank) const { return devices_.at(static_cast<std::size_t>(rank)); }
  // Rank r's communicator. Throws std::logic_error once the group was aborted.
  ncclComm* comm(int rank) const;
  cudaStream_t stream(int rank) const { return streams_.at(static_cast<std::size_t>(rank)); }
  NcclInit init() const { return init_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  // Waits for every rank's stream: polls cudaStreamQuery on each and ncclCommGetAsyncError on
  // each communicator (NCCL User Guide, "Error handling and communicator abort": a collective
  // whose peer failed never completes, so a plain cudaStreamSynchronize could wait forever)
  // until all streams are done or `deadline` (default: timeout()) has passed. On an
  // asynchronous NCCL error, a CUDA error or the deadline, aborts every communicator
  // (ncclCommAbort) and throws NcclError / CudaError / NcclTimeout naming the rank, its GPU and
  // what happened. Throws std::logic_error once the group was aborted.
  void synchronize() const { synchronize(timeout_); }
  void synchronize(std::chrono::milliseconds deadline) const;

  // Runs body(rank) for every rank between ncclGroupStart and ncclGroupEnd: one thread driving
  // several GPUs must group their calls, or the first rank's collective waits forever for the
  // others (NCCL User Guide, "Group Calls"). With non-blocking communicators, waits (within the
  // timeout) until ncclGroupEnd has issued every rank's work. If body throws, or ncclGroupEnd
  // fails, collectives may have been posted for some ranks and not others, and those would wait
  // forever: a group of more than one rank then aborts its communicators before the exception
  // is rethrown. Throws std::logic_error once the group was aborted.
  void group_calls(const std::function<void(int rank)>& body) const;

  // ncclCommAbort on every communicator (noexcept; safe to call twice). Work already on the
  // streams still runs, but nothing can be assumed about what the collectives wrote.
  void abort() const noexcept;
  bool aborted() const { return aborted_; }
  std::string nvls_setting() const { return nvls_; }  // NCCL_NVLS_ENABLE as NCCL saw it

 private:
  void check_usable(const char* who) const;
  std::vector<int> devices_;
  NcclInit init_;
  std::chrono::milliseconds timeout_;
  // Mutable: an abort is a failure path that ends the communicators' life, whoever holds the
  // group; the group's ranks, devices and streams do not change.
  mutable std::vector<ncclComm*> comms_;
  mutable bool aborted_ = false;
  std::vector<course::Stream> streams_;
  std::string nvls_;
};

// In-place sum all-reduce of `count` floats at buffers[r] (device memory of rank r's device), or
// all-gather of `count` floats from send[r] into recv[r] (n x count floats), as one NCCL group
// over all ranks, on the group's streams. Asynchronous. Throws std::invalid_argument for
// buffer lists whose size is not group.size(); NcclError naming the call.
void all_reduce_sum(const NcclGroup& group, const std::vector<float*>& buffers, std::size_t count);
void all_gather(const NcclGroup& group, const std::vector<const float*>& send,
                const std::vector<float*>& recv, std::size_t count);

// The receive layout of an all-gather whose ranks contribute different counts (MPI_Allgatherv's
// recvcounts and displs): rank r's count[r] elements land at [displ[r], displ[r] + count[r]) of
// every rank's receive buffer, in rank order, without gaps; total = the sum of the counts.
struct GatherLayout {
  std::vector<std::size_t> count, displ;
  std::size_t total = 0;
};
// EXERCISE 4 (CPU part). counts[r]: what rank r contributes, in elements; a count may be 0.
// Throws std::invalid_argument for an empty list, or a total that does not fit std::size_t.
GatherLayout gather_layout(const std::vector<std::size_t>& counts);

// EXERCISE 4 (GPU part). An all-gather of uneven counts over the group, as one NCCL group of
// calls on the group's streams. Asynchronous (wait with group.synchronize()).
//   send[r]:   counts[r] floats, device memory of rank r's device
//   recv[r]:   gather_layout(counts).total floats, device memory of rank r's device
//   afterwards every recv[k] holds [send[0] | send[1] | ... | send[g-1]] at the layout's
//   displacements.
// Throws std::invalid_argument when send, recv or counts does not hold one entry per rank, or a
// buffer is null where its count (or, for recv, the total) is not 0, before any NCCL call;
// gather_layout's errors; NcclError; std::runtime_error without NCCL; std::logic_error for an
// aborted group.
void all_gather_uneven(const NcclGroup& group, const std::vector<const float*>& send,
                       const std::vector<float*>& recv, const std::vector<std::size_t>& counts);

// The clock of every timing over a group: the median over `reps` samples (after `warmup`
// untimed ones) of the seconds per step when `iters` calls of step() are enqueued back to back
// and waited for once (group.synchronize()), host steady clock around the lot, divided by iters
// (nccl-tests' BenchTime). iters = 1: one step's end-to-end time, all ranks done. 0 for reps 0.
double median_step_seconds(const NcclGroup& group, int warmup, int reps, int iters,
                           const std::function<void()>& step);

// Time of one collective over the group, as nccl-tests times it (src/common.cu, BenchTime):
// `iters` collectives enqueued back to back, one wait for all of them, host steady clock around
// the lot, divided by iters. That is the collective's cost in a stream of collectives (launch
// latency overlapped with the previous one's run), not one call's end-to-end latency. Returns
// the median over `reps` such samples (after a warm-up sample), algbw and busbw
// (multi_gpu_host.hpp). bytes: all-reduce the buffer, all-gather the receive buffer (n x the
// send size); both must be a positive multiple of 4 x n. Throws std::invalid_argument for bad
// bytes, reps < 1 or iters < 1; NcclError, NcclTimeout, CudaError.
enum class Collective { all_reduce, all_gather };
struct CollectiveTiming {
  std::size_t bytes = 0;
  double seconds = 0, algbw_gbps = 0, busbw_gbps = 0;
};
CollectiveTiming time_collective(const NcclGroup& group, Collective kind, std::size_t bytes,
                                 int reps, int iters = 20);

// A tensor-parallel GEMM, C = A B (alpha 1, beta 0) over the group's GPUs.
enum class TpMode { column_parallel, row_parallel };
const char* to_string(TpMode mode);
struct TpResult {
  Partition split;                    // of N (column-parallel) or K (row-parallel)
  std::vector<std::vector<float>> c;  // every rank's copy of C, M x N row-major
  double ms = 0;  // median time of one step (GEMMs + collective [+ assembly]), all ranks done
};
// A: M x K, B: K x N, row-major host arrays. Uploads each rank's slices (not timed), runs the
// step 1 + reps times, downloads every rank's C. Throws std::invalid_argument for M, N, K < 1,
// arrays of the wrong size, a split partition() refuses (N or K over group.size()), reps < 0;
// NcclError; CudaError.
TpResult tensor_parallel_gemm(const NcclGroup& group, TpMode mode, int M, int N, int K,
                              const std::vector<float>& A, const std::vector<float>& B, int reps);

// The one-GPU GEMM the splits are checked against: lesson 07's v8 on `device`, same inputs.
// ms: median end-to-end time of `reps` runs, host call to completion (common/timing.hpp's
// latency_ms): the clock tensor_parallel_gemm's ms uses, so the two compare. 0 when reps == 0.
std::vector<float> single_gpu_gemm(int device, int M, int N, int K, const std::vector<float>& A,
                                   const std::vector<float>& B, int reps, double* ms);

}  // namespace lesson11

// Throws lesson11::NcclError naming the call unless it returned ncclSuccess.
#define NCCL_CHECK(call) ::lesson11::check_nccl(static_cast<int>(call), #call, __FILE__, __LINE__)
