// Lesson 11: the FP16 tensor-parallel GEMM and its overlapped schedule (see
// tensor_parallel_fp16.hpp). Host code: the GEMM is lesson 10's, the collectives NCCL's.
#include "tensor_parallel_fp16.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "common/cuda_check.hpp"
#include "common/memory.hpp"
#include "common/stream.hpp"
#include "multi_gpu.cuh"
#include "tensor_gemm.cuh"  // lesson 10

#ifdef COURSE_HAVE_NCCL
#include <nccl.h>
#endif

namespace lesson11 {

// ----------------------------------------------------------------------------- CPU-tested

Partition chunk_rows(int M, int chunks) {
  if (M < 1 || chunks < 1) {
    throw std::invalid_argument("chunk_rows: need M >= 1 and chunks >= 1; got M = " +
                                std::to_string(M) + ", chunks = " + std::to_string(chunks));
  }
  const int parts = std::min(chunks, M);
  const int base = M / parts, extra = M % parts;
  Partition p;
  int at = 0;
  for (int i = 0; i < parts; ++i) {
    p.offset.push_back(at);
    p.size.push_back(base + (i < extra ? 1 : 0));
    at += p.size.back();
  }
  return p;
}

std::vector<PartialSum> reference_shares(const std::vector<float>& A, const std::vector<float>& B,
                                         int M, int N, int K, const Partition& k_split, int m,
                                         int n) {
  const std::string who = "reference_shares";
  if (M < 1 || N < 1 || K < 1 || A.size() != static_cast<std::size_t>(M) * K ||
      B.size() != static_cast<std::size_t>(K) * N) {
    throw std::invalid_argument(who + ": A must hold M x K and B K x N values (M, N, K >= 1)");
  }
  if (m < 0 || m >= M || n < 0 || n >= N) {
    throw std::invalid_argument(who + ": element (" + std::to_string(m) + ", " + std::to_string(n) +
                                ") is outside the M x N result");
  }
  if (k_split.offset.size() != k_split.size.size() || k_split.size.empty()) {
    throw std::invalid_argument(who + ": the split of K has no parts");
  }
  std::vector<PartialSum> shares;
  for (std::size_t p = 0; p < k_split.size.size(); ++p) {
    const int k0 = k_split.offset[p], terms = k_split.size[p];
    if (k0 < 0 || terms < 0 || k0 > K - terms) {
      throw std::invalid_argument(who + ": part " + std::to_string(p) + " of the split of K lies " +
                                  "outside [0, " + std::to_string(K) + ")");
    }
    PartialSum s;
    s.terms = terms;
    for (int k = k0; k < k0 + terms; ++k) {
      const double prod = static_cast<double>(A[static_cast<std::size_t>(m) * K + k]) *
                          B[static_cast<std::size_t>(k) * N + n];
      s.exact += prod;
      s.abs_sum += std::fabs(prod);
    }
    shares.push_back(s);
  }
  return shares;
}

double fp16_tp_error_bound(const std::vector<PartialSum>& shares) {
  if (shares.empty()) throw std::invalid_argument("fp16_tp_error_bound: no shares");
  const double u_half = std::ldexp(1.0, -11), subnormal = std::ldexp(1.0, -25);
  double errors = 0, largest_sum = 0;
  for (const PartialSum& s : shares) {
    if (s.terms < 0 || !(s.abs_sum >= 0) || !std::isfinite(s.abs_sum) || !std::isfinite(s.exact)) {
      throw std::invalid_argument(
          "fp16_tp_error_bound: every share needs terms >= 0, a finite abs_sum >= 0 and a "
          "finite exact value");
    }
    // The share's tensor-core sum and its rounding to FP16: lesson 10's bound, alpha 1, beta 0.
    const double e = lesson10::tensor_gemm_error_bound(s.terms, 1.0, s.abs_sum, 0.0, 0.0, 0.0,
                                                       lesson10::Activation::none,
                                                       lesson10::DType::f16, s.exact);
    errors += e;
    largest_sum += std::fabs(s.exact) + e;
  }
  const double additions = static_cast<double>(shares.size() - 1);
  return errors + additions * (u_half * largest_sum + subnormal);
}

double hidden_fraction(double serial_ms, double overlapped_ms, double comm_ms) {
  for (const double t : {serial_ms, overlapped_ms, comm_ms}) {
    if (!(t >= 0) || !std::isfinite(t)) {
      throw std::invalid_argument("hidden_fraction: times must be finite and >= 0, got " +
                                  std::to_string(t));
    }
  }
  if (comm_ms == 0) return 0.0;
  return std::clamp((serial_ms - overlapped_ms) / comm_ms, 0.0, 1.0);
}

std::vector<__half> to_half(const std::vector<float>& v) {
  std::vector<__half> h(v.size());
  std::transform(v.begin(), v.end(), h.begin(), [](float x) { return __float2half_rn(x); });
  return h;
}

std::vector<float> to_float(const std::vector<__half>& v) {
  std::vector<float> f(v.size());
  std::transform(v.begin(), v.end(), f.begin(), [](__half x) { return __half2float(x); });
  return f;
}

// ------------------------------------------------------------------------- FP16 collectives

void all_reduce_sum_fp16(const NcclGroup& group, const std::vector<__half*>& buffers,
                         std::size_t count) {
  if (buffers.size() != static_cast<std::size_t>(group.size())) {
    throw std::invalid_argument("all_reduce_sum_fp16: one buffer per rank expected (" +
                                std::to_string(group.size()) + "), got " +
                                std::to_string(buffers.size()));
  }
#ifndef COURSE_HAVE_NCCL
  (void)count;
  throw std::runtime_error("all_reduce_sum_fp16: " + nccl_build_note());
#else
  group.group_calls([&](int r) {
    __half* b = buffers[static_cast<std::size_t>(r)];
    NCCL_CHECK(ncclAllReduce(b, b, count, ncclHalf, ncclSum, group.comm(r), group.stream(r)));
  });
#endif
}

void all_gather_uneven_fp16(const NcclGroup& group, const std::vector<const __half*>& send,
                            const std::vector<__half*>& recv,
                            const std::vector<std::size_t>& counts) {
  const auto misaligned = [](const void* p) {
    return reinterpret_cast<std::uintptr_t>(p) % sizeof(float) != 0;
  };
  std::vector<std::size_t> words;
  for (std::size_t r = 0; r < counts.size(); ++r) {
    if (counts[r] % 2 != 0) {
      throw std::invalid_argument("all_gather_uneven_fp16: rank " + std::to_string(r) +
                                  "'s count (" + std::to_string(counts[r]) +
                                  ") must be even: pairs of halves travel as 4-byte words");
    }
    words.push_back(counts[r] / 2);
  }
  std::vector<const float*> s;
  std::vector<float*> d;
  for (const __half* p : send) {
    if (misaligned(p))
      throw std::invalid_argument("all_gather_uneven_fp16: a send buffer is not 4-byte aligned");
    s.push_back(reinterpret_cast<const float*>(p));
  }
  for (__half* p : recv) {
    if (misaligned(p))
      throw std::invalid_argument("all_gather_uneven_fp16: a receive buffer is not 4-byte aligned");
    d.push_back(reinterpret_cast<float*>(p));
  }
  all_gather_uneven(group, s, d, words);
}

// ------------------------------------------------------------------- the FP16 GEMM split

int best_tp_gemm_version(const NcclGroup& group) {
  bool wgmma = true;
  std::string why;
  for (int r = 0; r < group.size(); ++r) {
    ScopedDevice on(group.device(r));
    wgmma = wgmma && lesson10::version_supported(6, lesson10::DType::f16);
    if (!lesson10::version_supported(4, lesson10::DType::f16, &why)) {
      throw lesson10::NotSupported("best_tp_gemm_version: rank " + std::to_string(r) + " (GPU " +
                                   std::to_string(group.device(r)) +
                                   ") cannot run lesson 10's v4 or v6: " + why);
    }
  }
  return wgmma ? 6 : 4;
}

namespace {

void check_fp16_args(const char* who, int M, int N, int K, std::size_t a_size, std::size_t b_size,
                     int chunks, int gemm_version) {
  const std::string w = who;
  if (M < 1 || N < 1 || K < 1) {
    throw std::invalid_argument(w + ": M, N, K must be >= 1; got " + std::to_string(M) + ", " +
                                std::to_string(N) + ", " + std::to_string(K));
  }
  if (N % 8 != 0 || K % 8 != 0) {
    throw std::invalid_argument(
        w +
        ": N and K must be multiples of 8 (lesson 10's kernels load 16-byte chunks of A's and "
        "B's rows, and every rank's slice of N or K stays a multiple of 8); got N = " +
        std::to_string(N) + ", K = " + std::to_string(K));
  }
  const std::size_t want_a = static_cast<std::size_t>(M) * K,
                    want_b = static_cast<std::size_t>(K) * N;
  if (a_size != want_a || b_size != want_b) {
    throw std::invalid_argument(w + ": A must hold M x K = " + std::to_string(want_a) +
                                " halves and B K x N = " + std::to_string(want_b) + "; got " +
                                std::to_string(a_size) + " and " + std::to_string(b_size));
  }
  if (chunks < 1) {
    throw std::invalid_argument(w + ": chunks must be >= 1 (1: no overlap), got " +
                                std::to_string(chunks));
  }
  if (gemm_version != kBestTpGemmVersion)
    lesson10::version_info(gemm_version);  // throws if unknown
}

// Rows [r0, r0 + rows) and columns [c0, c0 + cols) of a row-major matrix with `ld` columns, as a
// dense rows x cols matrix.
std::vector<__half> block(const std::vector<__half>& m, int ld, int r0, int rows, int c0,
                          int cols) {
  std::vector<__half> out(static_cast<std::size_t>(rows) * cols);
  for (int r = 0; r < rows; ++r) {
    const auto src = m.begin() + static_cast<std::ptrdiff_t>(r0 + r) * ld + c0;
    std::copy(src, src + cols, out.begin() + static_cast<std::ptrdiff_t>(r) * cols);
  }
  return out;
}

// What one enqueue puts on the streams: the whole schedule, or one side of it alone (for the
// timings). The collectives alone run on whatever the buffers hold (a row-parallel all-reduce
// repeated in place multiplies C by g each time): a time does not depend on the values, and the
// next whole step writes C afresh.
enum class Work { both, gemms_only, collectives_only };

// One split, uploaded once: every rank's slices, its result buffers, a compute stream and the
// events that hand each row chunk from the compute stream to the group's (communication)
// stream. enqueue() puts one step on the streams and returns; the caller waits with
// group.synchronize(), which covers the compute streams too (every enqueue ends with the
// communication streams waiting for them).
class Fp16Split {
 public:
  Fp16Split(const NcclGroup& group, TpMode mode, int M, int N, int K, const std::vector<__half>& A,
            const std::vector<__half>& B, int gemm_version)
      : group_(group), column_(mode == TpMode::column_parallel), N_(N), K_(K) {
    split_ = partition(column_ ? N : K, group.size(), kSplitAlign);  // before any GPU work
    version_ = gemm_version == kBestTpGemmVersion ? best_tp_gemm_version(group) : gemm_version;
    std::string why;
    for (int r = 0; r < group.size(); ++r) {
      ScopedDevice on(group.device(r));
      if (!lesson10::version_supported(version_, lesson10::DType::f16, &why)) {
        throw lesson10::NotSupported("tensor-parallel FP16 GEMM: lesson 10's v" +
                                     std::to_string(version_) + " on rank " + std::to_string(r) +
                                     ": not supported on this GPU: " + why);
      }
    }
    ranks_.reserve(static_cast<std::size_t>(group.size()));
    for (int r = 0; r < group.size(); ++r) {
      ScopedDevice on(group.device(r));
      ranks_.emplace_back();  // its stream and event belong to this rank's device
      Rank& k = ranks_.back();
      const int off = part_offset(r), n = part_size(r);
      if (column_) {
        k.a = course::to_device(A);
        k.b = course::to_device(block(B, N, 0, K, off, n));  // B[:, n_r : n_r + N_r]
        k.partial = course::DeviceBuffer<__half>(static_cast<std::size_t>(M) * n);
        k.gathered = course::DeviceBuffer<__half>(static_cast<std::size_t>(M) * N);
      } else {
        k.a = course::to_device(block(A, K, 0, M, off, n));  // A[:, k_r : k_r + K_r], dense
        k.b = course::to_device(block(B, N, off, n, 0, N));  // B[k_r : k_r + K_r, :]
      }
      k.c = course::DeviceBuffer<__half>(static_cast<std::size_t>(M) * N);
    }
  }

  const Partition& split() const { return split_; }
  int version() const { return version_; }

  void enqueue(const Partition& rows, Work work) {
    const std::size_t chunks = rows.size.size();
    for (int r = 0; r < group_.size(); ++r) {
      ScopedDevice on(group_.device(r));
      Rank& k = rank(r);
      while (k.done.size() < chunks) k.done.emplace_back(cudaEventDisableTiming);
      if (work == Work::collectives_only) continue;
      // The last step's collective of chunk i may still read the rows this step's GEMM i is
      // about to write: the compute stream first waits for the communication stream.
      k.comm_free.record(group_.stream(r));
      CUDA_CHECK(cudaStreamWaitEvent(k.compute, k.comm_free, 0));
      for (std::size_t i = 0; i < chunks; ++i) {
        gemm(r, rows.offset[i], rows.size[i], k.compute);
        k.done[i].record(k.compute);
      }
      // GEMMs alone: the communication stream waits for the last chunk (and so for all), so
      // that group.synchronize() covers them.
      if (work == Work::gemms_only) {
        CUDA_CHECK(cudaStreamWaitEvent(group_.stream(r), k.done[chunks - 1], 0));
      }
    }
    if (work == Work::gemms_only) return;
    for (std::size_t i = 0; i < chunks; ++i) {
      if (work == Work::both) {
        // Chunk i's collective waits, on the GPU, for chunk i's GEMM only: GEMM i + 1 runs
        // meanwhile on the compute stream.
        for (int r = 0; r < group_.size(); ++r) {
          ScopedDevice on(group_.device(r));
          CUDA_CHECK(cudaStreamWaitEvent(group_.stream(r), rank(r).done[i], 0));
        }
      }
      collective(rows.offset[i], rows.size[i]);
    }
  }

  std::vector<std::vector<__half>> download() {
    std::vector<std::vector<__half>> c;
    for (int r = 0; r < group_.size(); ++r) {
      ScopedDevice on(group_.device(r));
      c.push_back(course::to_host(rank(r).c));
    }
    return c;
  }

 private:
  struct Rank {
    course::DeviceBuffer<__half> a, b, partial, gathered, c;
    course::Stream compute;
    course::Event comm_free{cudaEventDisableTiming};
    std::vector<course::Event> done;  // one per row chunk
  };
  Rank& rank(int r) { return ranks_[static_cast<std::size_t>(r)]; }
  int part_offset(int r) const { return split_.offset[static_cast<std::size_t>(r)]; }
  int part_size(int r) const { return split_.size[static_cast<std::size_t>(r)]; }

  // Rows [m0, m0 + rows) of rank r's product, on `stream` (the rank's device is current).
  void gemm(int r, int m0, int rows, cudaStream_t stream) {
    Rank& k = rank(r);
    const int n = part_size(r);
    const auto m = static_cast<std::size_t>(m0);
    if (column_) {  // A[m0 .., :] (M x K) times B_r (K x N_r) -> partial rows (M x N_r)
      lesson10::tensor_gemm<__half, __half>(version_, rows, n, K_, 1.0f, k.a.data() + m * K_,
                                            k.b.data(), 0.0f, k.partial.data() + m * n, nullptr,
                                            lesson10::Activation::none, stream);
    } else {  // A_r[m0 .., :] (M x K_r) times B_r (K_r x N) -> P_r rows, in C (M x N)
      lesson10::tensor_gemm<__half, __half>(version_, rows, N_, n, 1.0f, k.a.data() + m * n,
                                            k.b.data(), 0.0f, k.c.data() + m * N_, nullptr,
                                            lesson10::Activation::none, stream);
    }
  }

  // Rows [m0, m0 + rows) of C on every rank, on the group's streams: row-parallel, the FP16 sum
  // of the partial products in place; column-parallel, the gather of the rank's column blocks
  // and their copy into place.
  void collective(int m0, int rows) {
    const int g = group_.size();
    const std::size_t m = static_cast<std::size_t>(m0), h = static_cast<std::size_t>(rows);
    const std::size_t N = static_cast<std::size_t>(N_);
    if (!column_) {
      std::vector<__half*> c;
      for (int r = 0; r < g; ++r) c.push_back(rank(r).c.data() + m * N);
      all_reduce_sum_fp16(group_, c, h * N);
      return;
    }
    // The chunk's region of `gathered` is rows x N halves at m0 x N: [rank 0's rows x N_0
    // block][rank 1's rows x N_1 block]..., rank q's at rows x n_q (gather_layout).
    std::vector<const __half*> send;
    std::vector<__half*> recv;
    std::vector<std::size_t> counts;
    for (int r = 0; r < g; ++r) {
      const auto n = static_cast<std::size_t>(part_size(r));
      send.push_back(rank(r).partial.data() + m * n);
      recv.push_back(rank(r).gathered.data() + m * N);
      counts.push_back(h * n);
    }
    all_gather_uneven_fp16(group_, send, recv, counts);
    for (int r = 0; r < g; ++r) {
      ScopedDevice on(group_.device(r));
      Rank& k = rank(r);
      for (int q = 0; q < g; ++q) {
        const auto n0 = static_cast<std::size_t>(part_offset(q));
        const std::size_t w = static_cast<std::size_t>(part_size(q)) * sizeof(__half);
        CUDA_CHECK(cudaMemcpy2DAsync(k.c.data() + m * N + n0, N * sizeof(__half),
                                     k.gathered.data() + m * N + h * n0, w, w, h,
                                     cudaMemcpyDeviceToDevice, group_.stream(r)));
      }
    }
  }

  const NcclGroup& group_;
  bool column_;
  int N_, K_;
  Partition split_;
  int version_ = 0;
  std::vector<Rank> ranks_;
};

}  // namespace

TpFp16Result tensor_parallel_gemm_fp16(const NcclGroup& group, TpMode mode, int M, int N, int K,
                                       const std::vector<__half>& A, const std::vector<__half>& B,
                                       int chunks, int gemm_version) {
  check_fp16_args("tensor_parallel_gemm_fp16", M, N, K, A.size(), B.size(), chunks, gemm_version);
  Fp16Split split(group, mode, M, N, K, A, B, gemm_version);
  TpFp16Result result;
  result.split = split.split();
  result.chunks = chunk_rows(M, chunks);
  result.gemm_version = split.version();
  split.enqueue(result.chunks, Work::both);
  group.synchronize();
  result.c = split.download();
  return result;
}

TpBreakdown time_tensor_parallel_fp16(const NcclGroup& group, TpMode mode, int M, int N, int K,
                                      int chunks, int reps, int gemm_version) {
  // The arrays are made here, so their sizes are right by construction (M, N, K checked first).
  const std::size_t a_size = static_cast<std::size_t>(std::max(M, 0)) * std::max(K, 0);
  const std::size_t b_size = static_cast<std::size_t>(std::max(K, 0)) * std::max(N, 0);
  check_fp16_args("time_tensor_parallel_fp16", M, N, K, a_size, b_size, chunks, gemm_version);
  if (reps < 1) {
    throw std::invalid_argument("time_tensor_parallel_fp16: reps must be >= 1, got " +
                                std::to_string(reps));
  }
  const std::vector<__half> A = to_half(random_matrix(M, K, 11));
  const std::vector<__half> B = to_half(random_matrix(K, N, 12));
  Fp16Split split(group, mode, M, N, K, A, B, gemm_version);
  const Partition one = chunk_rows(M, 1), rows = chunk_rows(M, chunks);
  const auto ms = [&](const Partition& p, Work w) {
    return 1e3 * median_step_seconds(group, 1, reps, 1, [&] { split.enqueue(p, w); });
  };
  TpBreakdown t;
  t.split = split.split();
  t.chunks = static_cast<int>(rows.size.size());
  t.gemm_version = split.version();
  t.compute_ms = ms(one, Work::gemms_only);
  t.compute_chunked_ms = ms(rows, Work::gemms_only);
  t.comm_ms = ms(one, Work::collectives_only);
  t.serial_ms = ms(one, Work::both);
  t.overlapped_ms = ms(rows, Work::both);
  t.ideal_ms = std::max(t.compute_ms, t.comm_ms);
  t.hidden = hidden_fraction(t.serial_ms, t.overlapped_ms, t.comm_ms);
  return t;
}

}  // namespace lesson11
