// Lesson 13: the INT8 tensor-core convolution and the device-side number checks
// (int8_conv_gpu.hpp says what they compute; this file says how).
//
// Compiled on its own (the lesson13_kernels library) with at least compute_80 code whatever
// CMAKE_CUDA_ARCHITECTURES holds: mma.sync.m16n8k32 with .s8 operands and cp.async need
// compute capability 8.0, and the build's default for a machine without a GPU is compute_75 PTX.
// Compiled for an older architecture the kernel traps; conv_int8_gpu refuses such a GPU first.
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>

#include <atomic>
#include <stdexcept>
#include <string>

#include "common/cuda_check.hpp"
#include "int8_conv_gpu.hpp"
#include "int8_mma.hpp"
#include "ptx_wrappers.cuh"  // lesson 12: cp.async, ldmatrix
#include "quantize.hpp"      // the __host__ __device__ FP8 conversions

// The certified epilogue's error bound (below) takes expf's documented accuracy (2 ulp); fast-math
// builds replace it with __expf, whose error grows with |x|.
#ifdef __USE_FAST_MATH__
#error "int8_conv_gpu.cu: build without --use_fast_math (the INT8 epilogue's bound needs expf)"
#endif

namespace lesson13 {
namespace {

// ---------------------------------------------------------------- the kernel's numbers

// Exercise 1's quantize_int8 (exercises.hpp), inline: a kernel in this file cannot call the
// out-of-line original without relocatable device code. q = saturate(rne(x / scale)) into
// [-127, 127], NaN -> 0. __fdiv_rn is IEEE division (what x / scale is on the host);
// __float2int_rn rounds to nearest, ties to even. The tests run it against the host's.
__device__ __forceinline__ int8_t requantize(float x, float scale) {
  const float v = __fdiv_rn(x, scale);
  if (v != v) return 0;
  if (v >= 127.0f) return 127;
  if (v <= -127.0f) return -127;
  return static_cast<int8_t>(__float2int_rn(v));
}

}  // namespace
}  // namespace lesson13

// Exercise 3, int8_epilogue: the epilogue of an INT8 output element, a device function the kernel
// below calls and so compiled in this translation unit (no relocatable device code). The lesson
// build takes the solution (solutions.cuh); the exercise build (lesson13_exercise_kernels in
// CMakeLists.txt) defines LESSON_EXERCISE_BUILD and LESSON13_EXERCISE_FILE, the learner's
// exercise.cu, whose exercise 3 section LESSON13_EXERCISE_KERNEL selects. Either sees requantize
// above, and nothing below.
#define LESSON13_EXERCISE_KERNEL 1
#if defined(LESSON_EXERCISE_BUILD) && defined(LESSON13_EXERCISE_FILE)
#include LESSON13_EXERCISE_FILE
#elif defined(LESSON_EXERCISE_BUILD)
#include "exercise.cu"
#else
#include "solutions.cuh"
#endif
#undef LESSON13_EXERCISE_KERNEL

namespace lesson13 {
namespace {

// ---------------------------------------------------------------- the kernel's device code
// (sm_80+ only: compiled for an older architecture, the kernel below is a trap, and none of
// this is referenced)
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
// Float and FP16 outputs: the reference's epilogue value, operation for operation (int8_conv.cpp,
// conv_int8_reference; exercise 3's solution has the same function for its INT8 fallback):
//   v = double(acc) * (double(x_scale) * double(w_scale)) + double(bias)
//   v = v / (1 + exp(-v))                                  (SiLU)
//   v = v + double(res_scale) * res                        (residual)
// Each operation an explicitly rounded intrinsic, so nvcc cannot contract a multiply and an add
// into an FMA (the host side is compiled with -ffp-contract=off: the course's top CMakeLists).
__device__ __noinline__ double exact_value(int acc, float xs, float ws, float bias, int act,
                                           bool has_res, float res_scale, int res) {
  double v = __dadd_rn(__dmul_rn(static_cast<double>(acc),
                                 __dmul_rn(static_cast<double>(xs), static_cast<double>(ws))),
                       static_cast<double>(bias));
  if (act == 1) v = __ddiv_rn(v, __dadd_rn(1.0, exp(-v)));
  if (has_res)
    v = __dadd_rn(v, __dmul_rn(static_cast<double>(res_scale), static_cast<double>(res)));
  return v;
}

// INT8 output: exercise 3's int8_epilogue (exercises.hpp; included above), which the lesson
// build takes from solutions.cuh: a certified float epilogue that falls back to the double path
// for the elements near a rounding boundary.

// Stores of one or two adjacent output channels (float and FP16 from the double value).
__device__ __forceinline__ void store1(int8_t* p, int8_t v) {
  *p = v;
}
__device__ __forceinline__ void store1(float* p, double v) {
  *p = __double2float_rn(v);
}
__device__ __forceinline__ void store1(__half* p, double v) {
  *p = __float2half_rn(__double2float_rn(v));
}
__device__ __forceinline__ void store2(int8_t* p, int8_t v0, int8_t v1) {
  *reinterpret_cast<char2*>(p) = make_char2(v0, v1);
}
__device__ __forceinline__ void store2(float* p, double v0, double v1) {
  *reinterpret_cast<float2*>(p) = make_float2(__double2float_rn(v0), __double2float_rn(v1));
}
__device__ __forceinline__ void store2(__half* p, double v0, double v1) {
  *reinterpret_cast<__half2*>(p) = __halves2half2(__float2half_rn(__double2float_rn(v0)),
                                                  __float2half_rn(__double2float_rn(v1)));
}

// ---------------------------------------------------------------- PTX wrappers
// cp.async and ldmatrix: lesson 12's (ptx_wrappers.cuh). The INT8 mma is this file's own.
using lesson12::cp_async_ca16;
using lesson12::cp_async_cg16;
using lesson12::cp_async_commit;
using lesson12::cp_async_wait;
using lesson12::ldmatrix_x4;
using lesson12::smem_u32;

// D = A * B + D, m16n8k32, s8 inputs, s32 accumulators (exact: no saturation in the sum for
// the K this course allows). Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k32", .s8):
// with g = lane / 4, t = lane % 4, a0 = row g, k 4t..4t+3 (one byte each, lowest first);
// a1 = row g + 8, same k; a2, a3 the same rows at k 16 + 4t..; b0 = column (channel) g,
// k 4t..4t+3; b1 = k 16 + 4t..; d0, d1 = row g, channels 2t, 2t + 1; d2, d3 = row g + 8.
__device__ __forceinline__ void mma_s8(int (&d)[4], const unsigned (&a)[4], unsigned b0,
                                       unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// Output pixel m (the GEMM row) -> image, row, column.
struct Pixel {
  int n, y, x;
};
__device__ __forceinline__ Pixel pixel_of(int m, int h, int w) {
  const int x = m % w, t = m / w;
  return {t / h, t % h, x};
}

#endif  // __CUDA_ARCH__ >= 800

// ---------------------------------------------------------------- the tiles
//
// Per stage: A as BM rows (output pixels), B as BN rows (output channels), each row kBK = 64
// K values (bytes) padded to kRowBytes = 80 (int8_mma.hpp has the maps and why).
constexpr int kBK = kInt8BK, kRowBytes = kInt8RowBytes, kStages = kInt8Stages;

template <int BM_, int BN_, int WARPS_M_, int WARPS_N_>
struct TileCfg {
  static constexpr int BM = BM_, BN = BN_, WARPS_M = WARPS_M_, WARPS_N = WARPS_N_;
  static constexpr int kThreads = WARPS_M * WARPS_N * 32;
  static constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;  // a warp's tile
  static constexpr int MI = WM / 16, NJ = WN / 8;             // its m16 and n8 fragments
  static constexpr int kRowsPerPass = kThreads / (kBK / 16);  // int8_copy_chunk
  static constexpr int kAPasses = BM / kRowsPerPass;
  static constexpr int kBPasses = (BN + kRowsPerPass - 1) / kRowsPerPass;
  static constexpr int kAStageBytes = BM * kRowBytes, kBStageBytes = BN * kRowBytes;
  static constexpr int kSmemBytes = kStages * (kAStageBytes + kBStageBytes);
  static_assert(WM % 16 == 0 && WN % 16 == 0, "warp tile: m16 fragments, pairs of n8 fragments");
  static_assert(BM % kRowsPerPass == 0, "every thread copies the same number of A chunks");
  static_assert(MI >= 1 && NJ >= 2 && kAPasses >= 1 && kBPasses >= 1, "a non-empty tile");
};

using Tile128x128 = TileCfg<128, 128, 2, 4>;  // 8 warps of 64 x 32
using Tile128x64 = TileCfg<128, 64, 2, 2>;    // 4 warps of 64 x 32
using Tile64x64 = TileCfg<64, 64, 2, 2>;      // 4 warps of 32 x 32
using Tile64x32 = TileCfg<64, 32, 2, 2>;      // 4 warps of 32 x 16

struct KernelParams {
  Int8ConvArgs a;
  unsigned long long* fallbacks;
};

template <class Cfg, class T>
__global__ void __launch_bounds__(Cfg::kThreads) conv_int8_mma(KernelParams kp) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  constexpr int BM = Cfg::BM, BN = Cfg::BN, MI = Cfg::MI, NJ = Cfg::NJ;
  constexpr int kRowsPerPass = Cfg::kRowsPerPass;
  const Int8ConvArgs& a = kp.a;
  extern __shared__ __align__(16) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int M = a.batch * a.out_h * a.out_w;
  const int K = a.kernel * a.kernel * a.in_c;
  const int slices = (K + kBK - 1) / kBK;
  // With fewer K slices than stages only the first stages are used (the launch allocates just
  // those), and B's stages follow them.
  const int stages_used = slices < kStages ? slices : kStages;
  const unsigned sA = smem_u32(smem), sB = sA + stages_used * Cfg::kAStageBytes;
  const int bm = blockIdx.x * BM, bn = blockIdx.y * BN;
  const int8_t* x = a.x;
  const int8_t* w = a.w;

  // This thread's A rows (output pixels): where their receptive fields start and the byte
  // offset of that corner. A row past M gets a corner no tap can reach (never read).
  const Int8RC chunk = int8_copy_chunk(tid, 0, Cfg::kThreads);  // pass p: rows + p kRowsPerPass
  const int row0 = chunk.row, kbyte = chunk.col;
  int a_iy[Cfg::kAPasses], a_ix[Cfg::kAPasses];
  long long a_base[Cfg::kAPasses];
#pragma unroll
  for (int p = 0; p < Cfg::kAPasses; ++p) {
    const int m = bm + row0 + p * kRowsPerPass;
    if (m < M) {
      const Pixel px = pixel_of(m, a.out_h, a.out_w);
      a_iy[p] = px.y * a.stride - a.pad;
      a_ix[p] = px.x * a.stride - a.pad;
      a_base[p] = ((static_cast<long long>(px.n) * a.in_h + a_iy[p]) * a.in_w + a_ix[p]) *
                  static_cast<long long>(a.x_stride);
    } else {
      a_iy[p] = a_ix[p] = -(1 << 29);
      a_base[p] = 0;
    }
  }
  const unsigned a_store = sA + int8_tile_offset(row0, kbyte);
  const unsigned b_store = sB + int8_tile_offset(row0, kbyte);

  // K slice t into stage s: this thread's chunk of each row is k = 64 t + kbyte, i.e. tap
  // (r, q) and channels c .. c + 15 of it (in_c % 16 == 0: a chunk never straddles two taps).
  const auto load_tile = [&](int t, int s) {
    const int k = t * kBK + kbyte;
    const bool k_ok = k < K;
    const Int8Tap tp = int8_conv_tap(k, a.in_c, a.kernel);
    const int r = tp.r, q = tp.s;
    const long long tap_off = (static_cast<long long>(r) * a.in_w + q) * a.x_stride + tp.c;
#pragma unroll
    for (int p = 0; p < Cfg::kAPasses; ++p) {
      const bool ok = k_ok && static_cast<unsigned>(a_iy[p] + r) < static_cast<unsigned>(a.in_h) &&
                      static_cast<unsigned>(a_ix[p] + q) < static_cast<unsigned>(a.in_w);
      cp_async_ca16(a_store + s * Cfg::kAStageBytes + p * kRowsPerPass * kRowBytes,
                    ok ? x + a_base[p] + tap_off : x, ok ? 16 : 0);
    }
#pragma unroll
    for (int p = 0; p < Cfg::kBPasses; ++p) {
      const int row = row0 + p * kRowsPerPass;
      if (BN % kRowsPerPass == 0 || row < BN) {
        const int n = bn + row;
        const bool ok = k_ok && n < a.out_c;
        cp_async_cg16(b_store + s * Cfg::kBStageBytes + p * kRowsPerPass * kRowBytes,
                      ok ? w + static_cast<long long>(n) * K + k : w, ok ? 16 : 0);
      }
    }
  };

  // ldmatrix bases of this lane (stage 0, k step 0): int8_mma.hpp's maps, which are lesson 12's
  // (engine_kernels.cuh, mma_ldmatrix_a / _b) with 16-byte columns.
  const int wm0 = (warp / Cfg::WARPS_N) * Cfg::WM, wn0 = (warp % Cfg::WARPS_N) * Cfg::WN;
  const Int8RC la = int8_ldmatrix_a(lane), lb = int8_ldmatrix_b(lane);
  const unsigned a_ld = sA + int8_tile_offset(wm0 + la.row, la.col);
  const unsigned b_ld = sB + int8_tile_offset(wn0 + lb.row, lb.col);

  int acc[MI][NJ][4];
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NJ; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0;

        // The ring (as lesson 12's): slices 0 .. kStages-2 in flight before the loop; iteration t
        // waits for slice t (wait_group kStages - 2: the groups committed after it may still be in
        // flight), then one barrier both publishes slice t to every warp and proves that every warp
        // has finished slice t - 1, whose stage slice t + kStages - 1 then reuses.
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < slices) load_tile(s, s);
    cp_async_commit();  // empty groups past the last slice keep the count regular
  }
  int read = 0, write = kStages - 1;
  for (int t = 0; t < slices; ++t) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    if (t + kStages - 1 < slices) load_tile(t + kStages - 1, write);
    cp_async_commit();

    const unsigned as = a_ld + read * Cfg::kAStageBytes, bs = b_ld + read * Cfg::kBStageBytes;
#pragma unroll
    for (int ks = 0; ks < kBK / 32; ++ks) {
      unsigned af[MI][4], bf[NJ][2];
#pragma unroll
      for (int i = 0; i < MI; ++i) ldmatrix_x4(af[i], as + int8_tile_offset(i * 16, ks * 32));
#pragma unroll
      for (int j = 0; j < NJ / 2; ++j) {
        unsigned r[4];
        ldmatrix_x4(r, bs + int8_tile_offset(j * 16, ks * 32));
        bf[2 * j][0] = r[0], bf[2 * j][1] = r[1];
        bf[2 * j + 1][0] = r[2], bf[2 * j + 1][1] = r[3];
      }
#pragma unroll
      for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NJ; ++j) mma_s8(acc[i][j], af[i], bf[j][0], bf[j][1]);
    }
    read = read + 1 == kStages ? 0 : read + 1;
    write = write + 1 == kStages ? 0 : write + 1;
  }
  cp_async_wait<0>();  // only empty groups remain: nothing in flight when the block exits

  // Epilogue: accumulators (2h, 2h + 1) of fragment (i, j) are channels n, n + 1 of one row
  // (int8_acc_element). Output pixel m is NHWC row m: y[m * y_stride + n], res likewise.
  // The per-channel constants of this thread's channels, once.
  float ws[NJ][2], bias[NJ][2], s_k[NJ][2];
#pragma unroll
  for (int j = 0; j < NJ; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int n = bn + wn0 + j * 8 + int8_acc_element(lane, e).col;
      ws[j][e] = n < a.out_c ? __ldg(a.w_scale + n) : 1.0f;
      bias[j][e] = n < a.out_c ? __ldg(a.bias + n) : 0.0f;
      s_k[j][e] = __fmul_rn(a.x_scale, ws[j][e]);
    }
  T* y = static_cast<T*>(a.y);
  const int8_t* res = a.res;
  const bool has_res = res != nullptr;
  const bool pairs =
      a.y_stride % 2 == 0 && reinterpret_cast<uintptr_t>(y) % (2 * sizeof(T)) == 0 &&
      (!has_res || (a.res_stride % 2 == 0 && reinterpret_cast<uintptr_t>(res) % 2 == 0));
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int m = bm + wm0 + i * 16 + int8_acc_element(lane, 2 * h).row;
      if (m >= M) continue;
      const long long mm = m;
#pragma unroll
      for (int j = 0; j < NJ; ++j) {
        const int n = bn + wn0 + j * 8 + int8_acc_element(lane, 2 * h).col;
        if (n >= a.out_c) continue;
        const bool two = n + 1 < a.out_c;
        int r0 = 0, r1 = 0;
        if (has_res) {
          const int8_t* rp = res + mm * a.res_stride + n;
          if (pairs && two) {
            const char2 rr = *reinterpret_cast<const char2*>(rp);
            r0 = rr.x, r1 = rr.y;
          } else {
            r0 = rp[0];
            if (two) r1 = rp[1];
          }
        }
        T* yp = y + mm * a.y_stride + n;
        if constexpr (sizeof(T) == 1) {
          const int8_t q0 =
              int8_epilogue(acc[i][j][2 * h], a.x_scale, ws[j][0], s_k[j][0], bias[j][0], a.act,
                            has_res, a.res_scale, r0, a.y_scale, kp.fallbacks);
          if (two) {
            const int8_t q1 =
                int8_epilogue(acc[i][j][2 * h + 1], a.x_scale, ws[j][1], s_k[j][1], bias[j][1],
                              a.act, has_res, a.res_scale, r1, a.y_scale, kp.fallbacks);
            if (pairs)
              store2(yp, q0, q1);
            else
              yp[0] = q0, yp[1] = q1;
          } else {
            store1(yp, q0);
          }
        } else {
          const double v0 = exact_value(acc[i][j][2 * h], a.x_scale, ws[j][0], bias[j][0], a.act,
                                        has_res, a.res_scale, r0);
          if (two) {
            const double v1 = exact_value(acc[i][j][2 * h + 1], a.x_scale, ws[j][1], bias[j][1],
                                          a.act, has_res, a.res_scale, r1);
            if (pairs) {
              store2(yp, v0, v1);
            } else {
              store1(yp, v0);
              store1(yp + 1, v1);
            }
          } else {
            store1(yp, v0);
          }
        }
      }
    }
#elif defined(__CUDA_ARCH__)
  __trap();  // compiled for a GPU without mma.m16n8k32.s8 / cp.async: conv_int8_gpu refuses it
#endif
}

// ---------------------------------------------------------------- the number checks

__global__ void quantize_int8_kernel(const float* x, int n, float scale, int8_t* q) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) q[i] = requantize(x[i], scale);
}
__global__ void fp8_from_float_kernel(const float* x, int n, uint8_t* code) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) code[i] = fp8_e4m3_from_float(x[i]);
}
__global__ void fp8_to_float_kernel(const uint8_t* code, int n, float* x) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = fp8_e4m3_to_float(code[i]);
}

// ---------------------------------------------------------------- launches

// Raises a kernel's dynamic shared memory limit above 48 KiB, once per kernel and device. `done`
// belongs to one kernel (bit d: device d done, devices 0..63): every instantiation of the kernel
// template has the same function-pointer type, so a static here would be shared by all of them.
template <class Kernel>
void allow_smem(Kernel kernel, int bytes, std::atomic<unsigned long long>& done) {
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  const unsigned long long bit = dev < 64 ? 1ull << dev : 0;
  if (bit != 0 && (done.load() & bit)) return;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  done.fetch_or(bit);
}

template <class Cfg, class T>
void launch_tile(const Int8ConvArgs& a, unsigned long long* fallbacks, cudaStream_t stream) {
  const long long M = static_cast<long long>(a.batch) * a.out_h * a.out_w;
  const int K = a.kernel * a.kernel * a.in_c;
  const int slices = (K + kBK - 1) / kBK;
  const int stages = slices < kStages ? slices : kStages;
  const int smem = stages * (Cfg::kAStageBytes + Cfg::kBStageBytes);
  const dim3 grid(static_cast<unsigned>((M + Cfg::BM - 1) / Cfg::BM),
                  static_cast<unsigned>((a.out_c + Cfg::BN - 1) / Cfg::BN));
  if (smem > 48 * 1024) {
    static std::atomic<unsigned long long> done{0};  // this kernel's (one per Cfg, T)
    allow_smem(conv_int8_mma<Cfg, T>, Cfg::kSmemBytes, done);
  }
  conv_int8_mma<Cfg, T><<<grid, Cfg::kThreads, smem, stream>>>(KernelParams{a, fallbacks});
  CUDA_CHECK_LAUNCH();
}

template <class Cfg>
void launch_typed(const Int8ConvArgs& a, unsigned long long* fallbacks, cudaStream_t stream) {
  switch (a.y_type) {
    case Int8ConvOutput::int8:
      return launch_tile<Cfg, int8_t>(a, fallbacks, stream);
    case Int8ConvOutput::f32:
      return launch_tile<Cfg, float>(a, fallbacks, stream);
    case Int8ConvOutput::f16:
      return launch_tile<Cfg, __half>(a, fallbacks, stream);
  }
  throw std::invalid_argument("conv_int8_gpu: unknown output type");
}

template <class Cfg>
Int8ConvTile tile_info(const char* name) {
  return {name, Cfg::BM, Cfg::BN, Cfg::WARPS_M, Cfg::WARPS_N, Cfg::kThreads, Cfg::kSmemBytes};
}

dim3 grid_1d(int n) {
  return dim3(static_cast<unsigned>((n + 255) / 256));
}

}  // namespace

const std::vector<Int8ConvTile>& int8_conv_tiles() {
  static const std::vector<Int8ConvTile> tiles = {
      tile_info<Tile128x128>("128x128"), tile_info<Tile128x64>("128x64"),
      tile_info<Tile64x64>("64x64"), tile_info<Tile64x32>("64x32")};
  return tiles;
}

namespace detail {

void launch_int8_conv(int tile, const Int8ConvArgs& a, unsigned long long* fallbacks,
                      cudaStream_t stream) {
  switch (tile) {
    case 0:
      return launch_typed<Tile128x128>(a, fallbacks, stream);
    case 1:
      return launch_typed<Tile128x64>(a, fallbacks, stream);
    case 2:
      return launch_typed<Tile64x64>(a, fallbacks, stream);
    case 3:
      return launch_typed<Tile64x32>(a, fallbacks, stream);
    default:
      throw std::invalid_argument("conv_int8_gpu: tile " + std::to_string(tile) +
                                  " is not an index of int8_conv_tiles()");
  }
}

void launch_quantize_int8(const float* x, int n, float scale, std::int8_t* q, cudaStream_t stream) {
  if (n == 0) return;
  quantize_int8_kernel<<<grid_1d(n), 256, 0, stream>>>(x, n, scale, q);
  CUDA_CHECK_LAUNCH();
}

void launch_fp8_from_float(const float* x, int n, std::uint8_t* code, cudaStream_t stream) {
  if (n == 0) return;
  fp8_from_float_kernel<<<grid_1d(n), 256, 0, stream>>>(x, n, code);
  CUDA_CHECK_LAUNCH();
}

void launch_fp8_to_float(const std::uint8_t* code, int n, float* x, cudaStream_t stream) {
  if (n == 0) return;
  fp8_to_float_kernel<<<grid_1d(n), 256, 0, stream>>>(code, n, x);
  CUDA_CHECK_LAUNCH();
}

}  // namespace detail
}  // namespace lesson13
