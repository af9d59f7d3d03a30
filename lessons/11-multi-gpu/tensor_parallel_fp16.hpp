// Lesson 11: tensor parallelism in the deployment precision, at inference batch sizes, with the
// communication shown against the compute and hidden behind it.
//
// The same two splits as tensor_parallel.hpp (column-parallel + all-gather, row-parallel +
// all-reduce), now with FP16 operands and an FP16 C (what a deployed layer writes), FP32
// accumulation, and lesson 10's tensor-core GEMM on every rank (lesson10::tensor_gemm<__half,
// __half>: v6, TMA + wgmma, on compute capability 9.0; v4, cp.async + mma.sync, on 8.x).
//
// At decode and small-batch M (1 to a few hundred rows) a layer's GEMM lasts microseconds, and
// the collective after it no longer looks free. Both are timed apart and together, and then
// overlapped: M is cut into row chunks (row-major: a chunk of rows is contiguous in A, in a
// rank's partial product and in C), and on every rank
//
//     compute stream:   [GEMM 0][GEMM 1][GEMM 2][GEMM 3]
//                             |e0     |e1     |e2     |e3           (cudaEventRecord)
//     comm stream:            [coll 0][coll 1][coll 2][coll 3]     (cudaStreamWaitEvent, NCCL)
//
// chunk i's collective (and, column-parallel, its assembly into C) waits on the GPU for chunk
// i's GEMM only, so GEMM i+1 runs while chunk i communicates. The communication stream is the
// group's (NcclGroup::stream); the compute stream is a second stream per rank. chunks = 1 is the
// serial baseline: one GEMM, then one collective.
//
// Alignment. lesson 10's v2..v7 load 16-byte chunks: K % 8 == 0, N % 8 == 0 and A, B 16-byte
// aligned. The split keeps them: partition(.., kSplitAlign = 8) cuts N or K at multiples of 8,
// so every rank's N_r or K_r is a multiple of 8. Column-parallel, rank r's B_r (K x N_r) is
// uploaded as its own array. Row-parallel, rank r's A_r = A[:, k_r : k_r + K_r] is NOT contiguous
// in A (its rows are K apart), so it is uploaded as its own M x K_r array, and B_r = B[k_r : k_r +
// K_r, :] (contiguous rows) likewise. A row chunk starts at m0 x K (or m0 x K_r) halves: a
// multiple of 8, so still 16-byte aligned.
#pragma once

#include <cuda_fp16.h>

#include <cstddef>
#include <vector>

#include "multi_gpu_host.hpp"
#include "tensor_parallel.hpp"

namespace lesson11 {

// ----------------------------------------------------------------------------- CPU-tested

// The row chunks of the overlapped schedule: M rows cut into min(chunks, M) contiguous pieces
// whose sizes differ by at most 1 (the first M % parts take one row more). M = 1 cannot be cut:
// any chunks gives one chunk. Throws std::invalid_argument for M < 1 or chunks < 1.
Partition chunk_rows(int M, int chunks);

// One rank's share of one element of C = A B: the number of products it sums, their exact
// (FP64) sum and the sum of their magnitudes. Column-parallel has one share (all K products);
// row-parallel one per rank (its K_r products).
struct PartialSum {
  int terms = 0;
  double exact = 0, abs_sum = 0;
};
// The FP64 shares of element (m, n) of A B over the parts of `k_split` (a split of K; one part
// of [0, K) for the column-parallel element). A: M x K, B: K x N, row-major, the FP16 inputs as
// floats (exact). Throws std::invalid_argument for sizes or indices that do not fit.
std::vector<PartialSum> reference_shares(const std::vector<float>& A, const std::vector<float>& B,
                                         int M, int N, int K, const Partition& k_split, int m,
                                         int n);

// The bound on |C_split - exact| for one element of the FP16 tensor-parallel GEMM:
//  - each share is a tensor-core FP32 sum rounded to FP16: lesson10::tensor_gemm_error_bound
//    (K_r + 3 roundings of the FP32 accumulation, products exact, then the FP16 rounding
//    2^-11 |value| + 2^-25 below the normal range) gives e_r;
//  - row-parallel adds g FP16 partials (ncclHalf, sum) in NCCL's order: g - 1 additions, each
//    rounded to FP16, of values no larger than T = sum_r (|exact_r| + e_r), so each adds at most
//    2^-11 T + 2^-25.
//   bound = sum_r e_r + (g - 1) (2^-11 T + 2^-25)
// So a row-parallel element is rounded to FP16 2g - 1 times instead of once, while each FP32 sum
// is g times shorter. The FP16 roundings are what a real result shows (an FP32 accumulation
// stays far below its worst case), so row-parallel results sit farther from the exact value,
// although for long sums the bound's accumulation term can make its bound the smaller one.
// One share is lesson 10's bound exactly.
// Throws std::invalid_argument for no shares, terms < 0 or abs_sum < 0.
double fp16_tp_error_bound(const std::vector<PartialSum>& shares);

// The part of the communication the overlap hid: (serial - overlapped) / comm, clamped to
// [0, 1]; 0 when comm is 0 (nothing to hide). Throws std::invalid_argument for a negative or
// non-finite time.
double hidden_fraction(double serial_ms, double overlapped_ms, double comm_ms);

// Host conversions (round to nearest even; FP16 values are exact in FP32).
std::vector<__half> to_half(const std::vector<float>& v);
std::vector<float> to_float(const std::vector<__half>& v);

// ------------------------------------------------------------------------- FP16 collectives

// In-place sum all-reduce of `count` FP16 values at buffers[r] (rank r's device), ncclHalf, as
// one NCCL group on the group's streams. Asynchronous. Throws std::invalid_argument for a list
// whose size is not group.size(); NcclError; std::runtime_error without NCCL.
void all_reduce_sum_fp16(const NcclGroup& group, const std::vector<__half*>& buffers,
                         std::size_t count);

// The uneven all-gather of exercise 4 for FP16 data (counts in halves): it calls exercise 4's
// all_gather_uneven with each pair of halves as one 4-byte word. A broadcast copies bytes and
// never looks at them, so ncclFloat with half the count moves exactly the same bytes as
// ncclHalf would; the one gather written for the exercise serves both precisions. Hence every
// count must be even and every pointer 4-byte aligned (the tensor-parallel GEMM's counts are
// rows x N_r, N_r a multiple of 8). Throws std::invalid_argument for an odd count, a misaligned
// pointer, and what all_gather_uneven throws.
void all_gather_uneven_fp16(const NcclGroup& group, const std::vector<const __half*>& send,
                            const std::vector<__half*>& recv,
                            const std::vector<std::size_t>& counts);

// ------------------------------------------------------------------- the FP16 GEMM split

// gemm_version: one of lesson 10's versions (tensor_gemm.cuh), or kBestTpGemmVersion for the
// best one every rank supports: 6 (TMA + wgmma) where version_supported(6), else 4.
constexpr int kBestTpGemmVersion = 0;
// The version kBestTpGemmVersion means on this group. Throws lesson10::NotSupported when a rank
// cannot run v4 either (compute capability below 8.0, or a build without compute_80 code).
int best_tp_gemm_version(const NcclGroup& group);

struct TpFp16Result {
  Partition split;   // of N (column-parallel) or K (row-parallel)
  Partition chunks;  // of M: the row chunks of the schedule (chunk_rows)
  int gemm_version = 0;
  std::vector<std::vector<__half>> c;  // every rank's copy of C, M x N row-major
};
// C = A B over the group's GPUs, FP16 in and out, FP32 accumulation, with the chunked schedule
// above (chunks = 1: serial). A: M x K, B: K x N, row-major host arrays. Uploads each rank's
// slices, runs the schedule once, waits (NcclGroup::synchronize), downloads every rank's C.
// Throws std::invalid_argument, before any GPU work, for M, N, K < 1, N or K not a multiple of
// 8, arrays of the wrong size, chunks < 1, an unknown gemm_version, or a split partition()
// refuses; lesson10::NotSupported for a version a rank's GPU lacks; NcclError, NcclTimeout,
// CudaError.
TpFp16Result tensor_parallel_gemm_fp16(const NcclGroup& group, TpMode mode, int M, int N, int K,
                                       const std::vector<__half>& A, const std::vector<__half>& B,
                                       int chunks, int gemm_version = kBestTpGemmVersion);

// Communication against compute, measured. Every time is the median of `reps` steps (after one
// warm-up step) on the host steady clock, from the first enqueue to every rank's streams done
// (NcclGroup::synchronize): end to end, what a deployment's layer step costs, launches and NCCL's
// host work included (the clock of tensor_parallel_gemm and of section 6; two devices' events
// cannot be subtracted). Inputs are random FP16 in [-1, 1), not checked here (the tests and the
// binary check tensor_parallel_gemm_fp16, which runs the same schedule).
struct TpBreakdown {
  Partition split;
  int chunks = 1;  // after chunk_rows' clamp to M
  int gemm_version = 0;
  double compute_ms = 0;          // the GEMMs alone, every rank, unchunked
  double compute_chunked_ms = 0;  // the GEMMs alone as `chunks` row chunks: chunking's own cost
  double comm_ms = 0;             // the collectives alone (column-parallel: + assembly), unchunked
  double serial_ms = 0;           // chunks = 1: GEMM, then collective
  double overlapped_ms = 0;       // the chunked schedule
  double ideal_ms = 0;            // max(compute_ms, comm_ms): perfect overlap, free chunking
  double hidden = 0;              // hidden_fraction(serial_ms, overlapped_ms, comm_ms)
};
// Throws as tensor_parallel_gemm_fp16 does, and std::invalid_argument for reps < 1.
TpBreakdown time_tensor_parallel_fp16(const NcclGroup& group, TpMode mode, int M, int N, int K,
                                      int chunks, int reps, int gemm_version = kBestTpGemmVersion);

}  // namespace lesson11
