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
// counts from every rank, so each GPU sends a buffer of M x (largest part) and the receivers copy
// each part's real width into C (cudaMemcpy2DAsync).
// The GEMM on each GPU is lesson 07's best SGEMM (lesson07::sgemm_v8_double_buffering).
//
// NCCL is optional at build time: without it (CMake says so when it configures) every function
// here that needs it throws std::runtime_error("... NCCL not found at build time ..."), and
// nccl_available() is false.
#pragma once

#include <cstddef>
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
// ncclSuccess (0). NCCL_CHECK(call) in tensor_parallel.cpp calls it.
void check_nccl(int result, const char* call, const char* file, int line);
// The message NcclError would carry, for code (an ncclResult_t value); "" for ncclSuccess.
std::string describe_nccl(int code);

// One NCCL communicator per device, all in this process (ncclCommInitAll), and a stream per
// rank to run the collectives on. Rank r is devices[r]. Creating it sets NCCL_NVLS_ENABLE=0
// (without overwriting the user's value: nccl_disable_nvls) first. Destroying it waits for the
// streams and destroys the communicators (ncclCommDestroy). Throws std::invalid_argument for a
// bad device list (check_device_list: empty, out of range, repeated) before any CUDA or NCCL
// call; NcclError naming ncclCommInitAll; std::runtime_error without NCCL.
class NcclGroup {
 public:
  explicit NcclGroup(const std::vector<int>& devices);
  ~NcclGroup();
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

  int size() const { return static_cast<int>(devices_.size()); }
  int device(int rank) const { return devices_.at(static_cast<std::size_t>(rank)); }
  ncclComm* comm(int rank) const { return comms_.at(static_cast<std::size_t>(rank)); }
  cudaStream_t stream(int rank) const { return streams_.at(static_cast<std::size_t>(rank)); }
  // Waits for every rank's stream, then asks each communicator for an asynchronous error
  // (ncclCommGetAsyncError). Throws CudaError or NcclError.
  void synchronize() const;
  std::string nvls_setting() const { return nvls_; }  // NCCL_NVLS_ENABLE as NCCL saw it

 private:
  std::vector<int> devices_;
  std::vector<ncclComm*> comms_;
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

// Time of one collective over the group: the median over `reps` (after 2 warm-ups) of host
// steady-clock intervals from the enqueue to the return of synchronize(), as nccl-tests times
// (it averages over iterations). bytes: all-reduce the buffer, all-gather the receive buffer
// (n x the send size); both must be a positive multiple of 4 x n. Returns seconds, algbw and
// busbw (multi_gpu_host.hpp).
enum class Collective { all_reduce, all_gather };
struct CollectiveTiming {
  std::size_t bytes = 0;
  double seconds = 0, algbw_gbps = 0, busbw_gbps = 0;
};
CollectiveTiming time_collective(const NcclGroup& group, Collective kind, std::size_t bytes,
                                 int reps);

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
