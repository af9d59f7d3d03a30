// Lesson 07: SGEMM, from the naive kernel toward cuBLAS.
//
// Every kernel computes the same thing, row-major and in FP32:
//
//     C = act(alpha * A * B + beta * C + bias)      A: M x K, B: K x N, C: M x N
//
// with bias = none and act = identity except for the fused-epilogue launchers. The versions, in
// the order the lesson teaches them (each fixes what limits the one before; README.md has the
// numbers):
//
//   v1_naive             one thread per output; threadIdx.x walks DOWN a column of C, so a warp's
//                        loads of A and stores of C are 32 different rows (uncoalesced)
//   v2_coalesced         threadIdx.x walks ALONG a row: a warp reads B and writes C as contiguous
//                        128-byte lines, and A is one broadcast value
//   v3_smem_tiling       32x32 tiles of A and B staged in shared memory: a global element is read
//                        once per tile instead of once per output
//   v4_1d_blocktiling    64x64 tile, BK 8; each thread computes 8 outputs of a column, so one value
//                        read from shared memory feeds 8 FMAs
//   v5_2d_blocktiling    128x128 tile, BK 8; each thread computes an 8x8 block as outer products in
//                        registers: 16 shared-memory loads feed 64 FMAs
//   v6_vectorized        float4 (128-bit) global and shared-memory loads; the A tile is stored
//                        transposed so a thread's 8 values of A are contiguous
//   v7_warptiling        each warp owns a 32x64 sub-tile and each thread's 8x8 is four 4x4 pieces
//                        32 or 16 elements apart: every shared-memory load is bank-conflict free
//   v8_double_buffering  v7 + the next tile is fetched into registers while the current one is
//                        multiplied; two shared-memory buffers, one barrier per tile
//
// then the deployment and hardware extras: the fused epilogue (bias + ReLU/SiLU in v8's write-out,
// against v8 followed by an elementwise kernel), one tensor-core kernel (WMMA, TF32), and cuBLAS
// as the baseline (FP32 SGEMM and TF32 GemmEx) through the row-major identity C^T = B^T A^T.
//
// Run a version: `lesson07 --version 5`; all of them: `lesson07`; benchmark: `make bench
// LESSON=07`.
//
// Conventions for every launcher below:
//  - Matrices are dense row-major device arrays (leading dimension = number of columns): A is
//    M x K, B is K x N, C is M x N. Any M, N, K >= 0; no multiple-of-tile assumption.
//  - M == 0 or N == 0: nothing to compute, returns at once (pointers may be null).
//    K == 0: C = act(beta * C + bias) (an empty sum is 0), as BLAS does.
//  - beta == 0: C is not read, so it may hold NaN or garbage (BLAS semantics).
//  - Errors: std::invalid_argument for a negative size, a null pointer that must be read or
//    written, a matrix with more than INT_MAX elements (the kernels index with int), or an
//    unknown version; course::CudaError for a failed launch. Launches are asynchronous on
//    `stream`: errors inside a kernel appear at the next synchronising call.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <math.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace lesson07 {

// ---------------------------------------------------------------- per-element math (CPU-tested)

// The activation of a fused epilogue (what a fully connected layer applies after its bias).
enum class Activation : int { none = 0, relu = 1, silu = 2 };
const char* to_string(Activation act);

// ceil(a / b) for a >= 0, b > 0. Not (a + b - 1) / b: that overflows int for a near INT_MAX,
// and a wrapped (negative) block count would slip past the grid-size check in the launchers.
__host__ __device__ inline int ceil_div(int a, int b) {
  return a / b + (a % b != 0 ? 1 : 0);
}

__host__ __device__ inline float relu(float x) {
  return x > 0.0f ? x : 0.0f;
}

// SiLU (swish): x * sigmoid(x) = x / (1 + e^-x). For very negative x, e^-x overflows to +inf and
// the quotient is -0, the right limit; expf rather than the faster __expf keeps it within a
// couple of ulp of the FP64 reference.
__host__ __device__ inline float silu(float x) {
  return x / (1.0f + expf(-x));
}

__host__ __device__ inline float activate(float x, Activation act) {
  switch (act) {
    case Activation::relu:
      return relu(x);
    case Activation::silu:
      return silu(x);
    default:
      return x;
  }
}

// One output element of the epilogue: act(alpha * acc + beta * c_old + bias).
// beta == 0 does not touch c_old: 0 * NaN is NaN, and BLAS promises that C is not read then.
// (The kernels also skip the load of C when beta == 0; this makes the promise hold per element.)
__host__ __device__ inline float epilogue_value(float acc, float c_old, float bias, float alpha,
                                                float beta, Activation act) {
  float v = alpha * acc;
  if (beta != 0.0f) v = fmaf(beta, c_old, v);
  return activate(v + bias, act);
}

// ---------------------------------------------------------------- arguments and hardware limits

// Checks the conventions above (negative sizes, null pointers, int32 element counts).
// `who` names the caller in the message. Returns false when there is nothing to compute
// (M == 0 or N == 0).
bool check_gemm_args(const char* who, int M, int N, int K, const float* A, const float* B,
                     const float* C);

// The grid of a launch that gives each block a bm x bn tile of C (M x N): blockIdx.x across the
// N columns, blockIdx.y down the M rows, ceil(N / bn) x ceil(M / bm) blocks. gridDim.y is limited
// to 65535 (Programming Guide, "Compute Capabilities"): a taller C throws std::invalid_argument
// naming `who`, rather than being silently truncated.
dim3 tile_grid(const char* who, int M, int N, int bm, int bn);

// 2*M*N*K: one multiply and one add per (m, n, k). TFLOP/s = gemm_flops / seconds / 1e12.
inline double gemm_flops(int M, int N, int K) {
  return 2.0 * M * N * K;
}

// FP32 lanes (results of a 32-bit fused multiply-add per clock) per SM, from the CUDA C++
// Programming Guide's "Arithmetic Instructions" throughput table: 64 on 7.x and 8.0 (A100), 128
// on 8.6, 8.9, 9.0 (H100/H200) and newer. Throws std::invalid_argument below 7.0.
int fp32_lanes_per_sm(int cc_major, int cc_minor);

// The FP32 peak in TFLOP/s: SMs x FP32 lanes x 2 FLOP (an FMA) x clock. clock_khz is what
// cudaDevAttrClockRate reports: the MAXIMUM BOOST clock, which a long GEMM may not sustain
// (power and thermal limits), so measured % of peak is a lower bound on the issue efficiency.
double fp32_peak_tflops(int sm_count, int lanes_per_sm, int clock_khz);

struct Fp32Peak {
  int sm_count = 0;
  int lanes_per_sm = 0;
  int clock_khz = 0;  // cudaDevAttrClockRate: the maximum boost clock
  double tflops = 0.0;
};
// Reads the device's attributes with cudaDeviceGetAttribute. Throws CudaError for an invalid
// device ordinal (or no device), std::invalid_argument below compute capability 7.0.
Fp32Peak fp32_peak(int device);

// ---------------------------------------------------------------- the SGEMM versions

// C = alpha * A * B + beta * C (conventions at the top of this file).
using SgemmFn = void (*)(int M, int N, int K, float alpha, const float* A, const float* B,
                         float beta, float* C, cudaStream_t stream);

void sgemm_v1_naive(int M, int N, int K, float alpha, const float* A, const float* B, float beta,
                    float* C, cudaStream_t stream = nullptr);
void sgemm_v2_coalesced(int M, int N, int K, float alpha, const float* A, const float* B,
                        float beta, float* C, cudaStream_t stream = nullptr);
void sgemm_v3_smem_tiling(int M, int N, int K, float alpha, const float* A, const float* B,
                          float beta, float* C, cudaStream_t stream = nullptr);
void sgemm_v4_1d_blocktiling(int M, int N, int K, float alpha, const float* A, const float* B,
                             float beta, float* C, cudaStream_t stream = nullptr);
void sgemm_v5_2d_blocktiling(int M, int N, int K, float alpha, const float* A, const float* B,
                             float beta, float* C, cudaStream_t stream = nullptr);
// v6..v8 load float4 when K % 4 == 0, N % 4 == 0 and A, B, C are 16-byte aligned; otherwise the
// same kernel is instantiated with guarded scalar loads and stores (same results, slower).
void sgemm_v6_vectorized(int M, int N, int K, float alpha, const float* A, const float* B,
                         float beta, float* C, cudaStream_t stream = nullptr);
void sgemm_v7_warptiling(int M, int N, int K, float alpha, const float* A, const float* B,
                         float beta, float* C, cudaStream_t stream = nullptr);
void sgemm_v8_double_buffering(int M, int N, int K, float alpha, const float* A, const float* B,
                               float beta, float* C, cudaStream_t stream = nullptr);

struct SgemmVersion {
  int number;        // 1..8, what --version takes
  const char* name;  // "v5_2d_blocktiling"
  const char* idea;  // one line: what it adds to the version before
  SgemmFn run;
};
const std::vector<SgemmVersion>& sgemm_versions();  // in order, v1 first
const SgemmVersion& sgemm_version(int number);      // throws std::invalid_argument if unknown
constexpr int kBestVersion = 8;                     // the one the sweep and the epilogue use

// v8's block-tile configurations (template instantiations; only these are compiled). Both are
// 128x128 block tiles of 256 threads with 32x64 warp tiles; they differ in the K depth of a
// tile. The benchmark times both so the default can be chosen per GPU.
enum class TileConfig : int { bk8 = 8, bk16 = 16 };
constexpr TileConfig kDefaultTileConfig = TileConfig::bk8;
void sgemm_v8_tile_config(TileConfig config, int M, int N, int K, float alpha, const float* A,
                          const float* B, float beta, float* C, cudaStream_t stream = nullptr);

// ---------------------------------------------------------------- fused epilogue

// C = act(alpha * A * B + beta * C + bias[n]) with v8, the bias and activation applied in the
// kernel's write-out: C is written once. bias: N floats on the device (may be null: no bias).
// Throws std::invalid_argument like the GEMMs, and for an `act` outside the enum (before any
// CUDA call, even when M or N is 0).
void sgemm_bias_act(int M, int N, int K, float alpha, const float* A, const float* B, float beta,
                    const float* bias, Activation act, float* C, cudaStream_t stream = nullptr);

// The unfused alternative's second kernel: C[m][n] = act(C[m][n] + bias[n]) in place, an extra
// read and write of all of C. C: M x N, bias: N floats, both device; bias may be null. Throws
// std::invalid_argument for M or N < 0, a null C with M, N > 0, or an `act` outside the enum,
// all before any CUDA call; CudaError if the launch fails.
void bias_activation(int M, int N, const float* bias, Activation act, float* C,
                     cudaStream_t stream = nullptr);

// ---------------------------------------------------------------- tensor cores

// C = alpha * A * B + beta * C on the tensor cores with WMMA (nvcuda::wmma, m16n16k8): the
// inputs are rounded to TF32 (10-bit mantissa, FP32 range), products accumulate in FP32.
// Needs compute capability 8.0+ AND a build whose PTX targets compute_80+ (the no-GPU build is
// compute_75 PTX, in which the kernel is compiled out). Throws std::runtime_error saying which
// is missing; wmma_tf32_available() asks without throwing.
void sgemm_wmma_tf32(int M, int N, int K, float alpha, const float* A, const float* B, float beta,
                     float* C, cudaStream_t stream = nullptr);
bool wmma_tf32_available(std::string* why_not = nullptr);

// ---------------------------------------------------------------- cuBLAS, the baseline

// A cuBLAS call returned something other than CUBLAS_STATUS_SUCCESS.
class CublasError : public std::runtime_error {
 public:
  CublasError(cublasStatus_t status, const char* call, const char* file, int line);
  cublasStatus_t status() const noexcept { return status_; }

 private:
  cublasStatus_t status_;
};

// Move-only owner of a cuBLAS handle (cublasCreate / cublasDestroy) on the current device.
// The constructor throws CublasError (not CudaError) if cublasCreate or the math mode fails,
// e.g. CUBLAS_STATUS_NOT_INITIALIZED with no usable GPU.
// The math mode is pinned to CUBLAS_DEFAULT_MATH: cublasSgemm then computes in true FP32 (no TF32
// tensor cores), the honest baseline for FP32 kernels. TF32 is requested explicitly, per call,
// by cublas_gemm_tf32.
class CublasHandle {
 public:
  CublasHandle();
  ~CublasHandle();
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  CublasHandle(CublasHandle&& other) noexcept;
  CublasHandle& operator=(CublasHandle&& other) noexcept;
  cublasHandle_t get() const noexcept { return handle_; }

 private:
  cublasHandle_t handle_ = nullptr;
};

// Row-major C = alpha * A * B + beta * C with cublasSgemm, which is column-major. A row-major
// M x N array is the column-major N x M matrix C^T, and C^T = B^T * A^T: so we ask cuBLAS for
// (N x K) * (K x M), passing B where it expects its first operand and A as its second, with no
// transposes and leading dimensions N, K, N. Same conventions and errors as the kernels, plus
// CublasError.
void cublas_sgemm(const CublasHandle& handle, int M, int N, int K, float alpha, const float* A,
                  const float* B, float beta, float* C, cudaStream_t stream = nullptr);

// The same product on the tensor cores: cublasGemmEx with CUBLAS_COMPUTE_32F_FAST_TF32 (FP32 in
// and out, inputs rounded to TF32). On GPUs without TF32 (before 8.0) cuBLAS computes in FP32.
void cublas_gemm_tf32(const CublasHandle& handle, int M, int N, int K, float alpha, const float* A,
                      const float* B, float beta, float* C, cudaStream_t stream = nullptr);

// ---------------------------------------------------------------- test data and the CPU oracle

// Fills n floats on the device with uniform values in [lo, hi) from a counter-based hash of
// (seed, index): the same seed gives the same data on every GPU and run.
void fill_uniform(float* data, std::size_t n, std::uint64_t seed, float lo, float hi,
                  cudaStream_t stream = nullptr);

// One element of the FP64 reference: sum_k A[m][k] * B[k][n] (row-major, as above), and
// sum_k |A[m][k] * B[k][n]| in *abs_sum (the scale the rounding error is proportional to;
// abs_sum may be null). A: M x K, B: K x N, both HOST memory. Nothing is checked (it runs once
// per element of sgemm_reference): K >= 0, 0 <= m < M, 0 <= n < N, and A, B non-null if K > 0.
double reference_dot(int N, int K, const float* A, const float* B, int m, int n, double* abs_sum);

// The FP64 CPU reference of the whole product: out = act(alpha * A * B + beta * C + bias)
// (beta == 0: C is not read; C and bias may be null when unused), and abs_sum[m*N + n] =
// sum_k |A[m][k] B[k][n]| if abs_sum is not null. O(M*N*K): small sizes only.
void sgemm_reference(int M, int N, int K, float alpha, const float* A, const float* B, float beta,
                     const float* C, const float* bias, Activation act, double* out,
                     double* abs_sum);

// The error an FP32 GEMM may make in one element (a rigorous bound, not a guess): each of the K
// products and additions rounds once (|delta| <= u = 2^-24), then alpha, beta*C and the bias add
// three more roundings; any summation order is covered by gamma_(K+3) ~ (K+3)u:
//   |C - C_exact| <= (K + 3) * u * (|alpha| * sum_k |a||b| + |beta * c| + |bias|)
// input_rounding adds a relative error on every product: 0 for FP32, 2^-9 for TF32 inputs (two
// operands each truncated or rounded to a 10-bit mantissa: (1 + 2^-10)^2 - 1 < 2^-9).
// An activation applied afterwards scales the bound by its Lipschitz constant (ReLU 1, SiLU 1.1)
// and adds its own rounding (a few ulp of expf): activation_error_bound does that.
// Precondition (not checked): K >= 0 and abs_sum >= 0; beta == 0 ignores c_old, as the GEMMs do.
double gemm_error_bound(int K, double alpha, double abs_sum, double beta, double c_old, double bias,
                        double input_rounding = 0.0);
double activation_error_bound(Activation act, double bound_before, double exact_result);
constexpr double kFp32UnitRoundoff = 1.0 / (1 << 24);
constexpr double kTf32InputRounding = 1.0 / (1 << 9);

// ---------------------------------------------------------------- exercises (exercise.cu)
//
// The layout of a fully connected layer as PyTorch's nn.Linear and ONNX Gemm (transB = 1) store
// it: the weight W is N x K (one row per output feature), and Y = X * W^T.

// Exercise 1: C = alpha * A * W^T + beta * C with 32x32 shared-memory tiles (the tile loop).
// A: M x K, W: N x K, C: M x N, row-major; the conventions at the top of this file.
void sgemm_nt_smem_tiling(int M, int N, int K, float alpha, const float* A, const float* W,
                          float beta, float* C, cudaStream_t stream = nullptr);
// cudaFuncGetAttributes of the kernel sgemm_nt_smem_tiling launches (exercise 1 writes it beside
// the kernel): the tests read its static shared memory, which shows whether a 32x32 tile row
// carries its float of padding (they cannot tell which tile carries it). Needs a device; throws
// CudaError otherwise.
cudaFuncAttributes sgemm_nt_smem_tiling_attributes();

// Exercise 2: the same product with a 64x64 block tile and a 4x4 register block per thread.
void sgemm_nt_register_blocking(int M, int N, int K, float alpha, const float* A, const float* W,
                                float beta, float* C, cudaStream_t stream = nullptr);

// Exercise 3: a fused fully connected layer, Y = act(X * W^T + bias), in one kernel (exercise 2's,
// with the bias and activation in its write-out). X: M x K, W: N x K, bias: N (must not be null),
// Y: M x N (not read). Throws std::invalid_argument for a negative size or a matrix of more than
// 2^31 - 1 elements; when M > 0 and N > 0, for a null Y or bias, and for a null X or W if K > 0.
// M == 0 or N == 0 is a no-op that reads no pointer.
void linear_forward(int M, int N, int K, const float* X, const float* W, const float* bias,
                    Activation act, float* Y, cudaStream_t stream = nullptr);

}  // namespace lesson07
