// Lesson 13: the INT8 tensor-core convolution and the device-side number checks
// (int8_conv_gpu.hpp says what they compute; this file says how).
//
// Compiled on its own (the lesson13_kernels library) with at least compute_80 code whatever
// CMAKE_CUDA_ARCHITECTURES holds: mma.sync.m16n8k32 with .s8 operands and cp.async need
// compute capability 8.0, and the build's default for a machine without a GPU is compute_75 PTX.
// Compiled for an older architecture the kernel traps; conv_int8_gpu refuses such a GPU first.
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>

#include <atomic>
#include <stdexcept>
#include <string>

#include "common/cuda_check.hpp"
#include <type_traits>

#include "fp8_conv_gpu.hpp"
#include "int8_conv_gpu.hpp"
#include "int8_mma.hpp"
#include "ptx_wrappers.cuh"  // lesson 12: cp.async, ldmatrix
#include "quantize.hpp"      // the __host__ __device__ FP8 conversions

// The certified INT8 epilogue's bound (solutions.cuh) is derived for IEEE float arithmetic with
// denormals and for the intrinsics it names; the FP8 epilogue and the double fallback use expf and
// exp as documented. Fast-math builds flush denormals and swap expf and the divisions for
// approximations those derivations do not cover.
#ifdef __USE_FAST_MATH__
#error "int8_conv_gpu.cu: build without --use_fast_math (the epilogues' error bounds assume IEEE)"
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

// The fast INT8 epilogue (Int8Epilogue::fast): exercise 3's float path without its certificate,
// operation for operation as solutions.cuh computes t (so that an element the certified path
// would decide gets the same code here), then rounded half to even and saturated to +-127.
// r = fl(1 / y_scale), computed once per kernel. An element the certified path would send to
// the double fallback (about 1 in 4000 on the lesson's layers) may land one code away from
// conv_int8_reference's; no other can.
__device__ __forceinline__ int8_t int8_epilogue_fast(int acc, float xw_scale, float bias, int act,
                                                     bool has_res, float res_scale, int res,
                                                     float r) {
  const float z = __fadd_rn(__fmul_rn(__int2float_rn(acc), xw_scale), bias);
  const float y = act == 1 ? __fdividef(z, __fadd_rn(1.0f, __expf(-z))) : z;
  const float rt = has_res ? __fmul_rn(res_scale, static_cast<float>(res)) : 0.0f;
  const float t = __fmul_rn(__fadd_rn(y, rt), r);
  // rintf then a clamp. A NaN t (not reached from finite operands) would give -127 here, fmaxf
  // returning its other operand, where the certified path gives 0.
  const float k = fminf(fmaxf(rintf(t), -127.0f), 127.0f);
  return static_cast<int8_t>(__float2int_rz(k));
}

// INT8 output: exercise 3's int8_epilogue (exercises.hpp; included above), which the lesson
// build takes from solutions.cuh: a certified float epilogue that falls back to the double path
// for the elements near a rounding boundary.

// Stores of one output channel, or of four adjacent ones (float and FP16 from the double value).
__device__ __forceinline__ void store1(float* p, double v) {
  *p = __double2float_rn(v);
}
__device__ __forceinline__ void store1(__half* p, double v) {
  *p = __float2half_rn(__double2float_rn(v));
}
__device__ __forceinline__ void store1(float* p, float v) {
  *p = v;
}
__device__ __forceinline__ void store1(__half* p, float v) {
  *p = __float2half_rn(v);
}
__device__ __forceinline__ void store4(float* p, const float (&v)[4]) {
  *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
}
__device__ __forceinline__ void store4(__half* p, const float (&v)[4]) {
  __half2 h[2];
  h[0] = __halves2half2(__float2half_rn(v[0]), __float2half_rn(v[1]));
  h[1] = __halves2half2(__float2half_rn(v[2]), __float2half_rn(v[3]));
  *reinterpret_cast<uint2*>(p) = *reinterpret_cast<const uint2*>(h);
}
__device__ __forceinline__ void store4(float* p, const double (&v)[4]) {
  *reinterpret_cast<float4*>(p) = make_float4(__double2float_rn(v[0]), __double2float_rn(v[1]),
                                              __double2float_rn(v[2]), __double2float_rn(v[3]));
}
__device__ __forceinline__ void store4(__half* p, const double (&v)[4]) {
  __half2 h[2];
  h[0] = __halves2half2(__float2half_rn(__double2float_rn(v[0])),
                        __float2half_rn(__double2float_rn(v[1])));
  h[1] = __halves2half2(__float2half_rn(__double2float_rn(v[2])),
                        __float2half_rn(__double2float_rn(v[3])));
  *reinterpret_cast<uint2*>(p) = *reinterpret_cast<const uint2*>(h);
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
// D = A * B + D, m16n8k32, E4M3 inputs, f32 accumulators. The fragments have the .s8 layout above
// (PTX ISA: the same figures serve every 8-bit type of m16n8k32); d0 .. d3 as above, in float.
// Compute capability 8.9 or newer: compiled for an older target, a trap (conv_fp8_gpu refuses
// such a GPU before launching).
__device__ __forceinline__ void mma_e4m3(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                         unsigned b1) {
#if __CUDA_ARCH__ >= 890
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  __trap();
#endif
}
__device__ __forceinline__ void mma8(int (&d)[4], const unsigned (&a)[4], unsigned b0,
                                     unsigned b1) {
  mma_s8(d, a, b0, b1);
}
__device__ __forceinline__ void mma8(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                     unsigned b1) {
  mma_e4m3(d, a, b0, b1);
}

// The FP8 epilogue of one element (fp8_conv_gpu.hpp): float arithmetic, SiLU with expf.
__device__ __forceinline__ float fp8_epilogue_value(float acc, float xw, float bias, int act,
                                                    bool has_res, float res_scale,
                                                    std::uint8_t res) {
  float v = __fadd_rn(__fmul_rn(acc, xw), bias);
  if (act == 1) v = __fdiv_rn(v, __fadd_rn(1.0f, expf(-v)));
  if (has_res) v = __fadd_rn(v, __fmul_rn(res_scale, fp8_e4m3_to_float(res)));
  return v;
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
  // The epilogue's int32 tile over the stages: rows of BN + 8 (the +8 puts the 8 rows a half-warp
  // writes with int2 stores in 8 different groups of 8 banks, and keeps rows 16-byte aligned).
  static constexpr int kAccLd = BN + 8;
  static constexpr int kAccBytes = BM * kAccLd * 4;
  // After the larger of the two, the tile's per-channel constants: fl(x_scale w_scale[n]),
  // w_scale[n] and bias[n], loaded once per block.
  static constexpr int kChanBytes = 3 * BN * 4;
  // The dynamic shared memory of a launch whose ring uses `stages` stages (fewer than kStages
  // when K has fewer slices): the offset of the constants, and the whole.
  __host__ __device__ static constexpr int chan_offset(int stages) {
    return stages * (kAStageBytes + kBStageBytes) > kAccBytes
               ? stages * (kAStageBytes + kBStageBytes)
               : kAccBytes;
  }
  __host__ __device__ static constexpr int smem_bytes(int stages) {
    return chan_offset(stages) + kChanBytes;
  }
  static constexpr int kSmemBytes =
      (kStages * (kAStageBytes + kBStageBytes) > kAccBytes ? kStages * (kAStageBytes + kBStageBytes)
                                                           : kAccBytes) +
      kChanBytes;
  static_assert(BN % 4 == 0, "the epilogue takes 4 channels at a time");
  static_assert(WM % 16 == 0 && WN % 16 == 0, "warp tile: m16 fragments, pairs of n8 fragments");
  static_assert(BM % kRowsPerPass == 0, "every thread copies the same number of A chunks");
  static_assert(MI >= 1 && NJ >= 2 && kAPasses >= 1 && kBPasses >= 1, "a non-empty tile");
};

using Tile128x128 = TileCfg<128, 128, 2, 4>;  // 8 warps of 64 x 32
using Tile128x64 = TileCfg<128, 64, 4, 2>;    // 8 warps of 32 x 32
using Tile64x64 = TileCfg<64, 64, 2, 2>;      // 4 warps of 32 x 32
using Tile64x32 = TileCfg<64, 32, 2, 2>;      // 4 warps of 32 x 16

// Args: Int8ConvArgs (s8 operands, int32 accumulators, the INT8 epilogue) or Fp8ConvArgs (E4M3
// operands, f32 accumulators, the FP8 epilogue). The two share every field name.
template <class Args>
struct KernelParams {
  Args a;
  unsigned long long* fallbacks;  // INT8 only
};

// The epilogue's second step (defined after the kernel), shared with the wgmma kernel
// (int8_wgmma.cuh): the int32 (FP8: float) tile staged in shared memory to the output.
template <class Cfg, class Args, class T, bool kExact>
__device__ __forceinline__ void int8_tile_epilogue(const KernelParams<Args>& kp, const void* staged,
                                                   const float* chan, int bm, int bn, int M);

template <class Cfg, class Args, class T, bool kExact>
__global__ void __launch_bounds__(Cfg::kThreads) conv_int8_mma(KernelParams<Args> kp) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  constexpr bool kFp8 = std::is_same_v<Args, Fp8ConvArgs>;
  using Acc = std::conditional_t<kFp8, float, int>;
  constexpr int BM = Cfg::BM, BN = Cfg::BN, MI = Cfg::MI, NJ = Cfg::NJ;
  constexpr int kRowsPerPass = Cfg::kRowsPerPass;
  const Args& a = kp.a;
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
  const auto* x = reinterpret_cast<const unsigned char*>(a.x);  // bytes: INT8 or E4M3 codes
  const auto* w = reinterpret_cast<const unsigned char*>(a.w);
  // The tile's per-channel constants (the barriers of the K loop publish them).
  float* chan = reinterpret_cast<float*>(smem + Cfg::chan_offset(stages_used));
  for (int c = tid; c < BN; c += Cfg::kThreads) {
    const int n = bn + c;
    const float ws = n < a.out_c ? __ldg(a.w_scale + n) : 1.0f;
    chan[c] = __fmul_rn(a.x_scale, ws);
    chan[BN + c] = ws;
    chan[2 * BN + c] = n < a.out_c ? __ldg(a.bias + n) : 0.0f;
  }

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
  // The slices are loaded in order, 0, 1, 2, ..., so the tap is tracked rather than divided out
  // of k each time (int8_conv_tap once, then steps of 64 bytes: two integer divisions fewer per
  // slice and thread).
  Int8Tap tp = int8_conv_tap(kbyte, a.in_c, a.kernel);
  const auto load_tile = [&](int t, int s) {
    const int k = t * kBK + kbyte;
    const bool k_ok = k < K;
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
    // The tap of slice t + 1: 64 channels on, wrapping into the next taps.
    tp.c += kBK;
    while (tp.c >= a.in_c) {
      tp.c -= a.in_c;
      if (++tp.s == a.kernel) tp.s = 0, ++tp.r;
    }
  };

  // ldmatrix bases of this lane (stage 0, k step 0): int8_mma.hpp's maps, which are lesson 12's
  // (engine_kernels.cuh, mma_ldmatrix_a / _b) with 16-byte columns.
  const int wm0 = (warp / Cfg::WARPS_N) * Cfg::WM, wn0 = (warp % Cfg::WARPS_N) * Cfg::WN;
  const Int8RC la = int8_ldmatrix_a(lane), lb = int8_ldmatrix_b(lane);
  const unsigned a_ld = sA + int8_tile_offset(wm0 + la.row, la.col);
  const unsigned b_ld = sB + int8_tile_offset(wn0 + lb.row, lb.col);

  Acc acc[MI][NJ][4];
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
        for (int j = 0; j < NJ; ++j) mma8(acc[i][j], af[i], bf[j][0], bf[j][1]);
    }
    read = read + 1 == kStages ? 0 : read + 1;
    write = write + 1 == kStages ? 0 : write + 1;
  }
  // Epilogue, in two steps, so that its code is one short loop rather than one inlined copy of
  // the per-element epilogue for every accumulator register (64 copies in a 128x128 tile: over
  // 12 000 instructions, which made the first version wait on instruction fetches for most of its
  // time). 1: every warp writes its int32 accumulators into shared memory, a BM x (BN + 8) int32
  // tile over the ring's stages (which no warp reads any more). 2: each thread takes 4 adjacent
  // channels of one output pixel at a time (one 16-byte shared load), applies the epilogue to
  // each, and stores the 4 outputs together: a warp writes 128 consecutive channels (or whole
  // rows of a narrower tile) in one coalesced store.
  cp_async_wait<0>();  // only empty groups remain: nothing in flight when the block exits
  __syncthreads();     // every warp has finished reading the stages
  constexpr int LD = Cfg::kAccLd;
  Acc* stage = reinterpret_cast<Acc*>(smem);
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int j = 0; j < NJ; ++j) {
        // accumulators (2h, 2h + 1) of fragment (i, j): channels c, c + 1 of row r
        const Int8RC e = int8_acc_element(lane, 2 * h);
        Acc* dst = stage + (wm0 + i * 16 + e.row) * LD + wn0 + j * 8 + e.col;
        if constexpr (kFp8)
          *reinterpret_cast<float2*>(dst) = make_float2(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
        else
          *reinterpret_cast<int2*>(dst) = make_int2(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
      }
  __syncthreads();
  int8_tile_epilogue<Cfg, Args, T, kExact>(kp, stage, chan, bm, bn, M);
#elif defined(__CUDA_ARCH__)
  __trap();  // compiled for a GPU without mma.m16n8k32.s8 / cp.async: conv_int8_gpu refuses it
#endif
}

// Every thread of the block, `Cfg::kThreads`, takes groups of 4 channels of the BM x BN tile
// staged at `staged` (rows of Cfg::kAccLd accumulators); chan holds the tile's per-channel
// constants (3 x BN floats); bm, bn: the tile's first pixel and channel; M: the pixels in all.
template <class Cfg, class Args, class T, bool kExact>
__device__ __forceinline__ void int8_tile_epilogue(const KernelParams<Args>& kp, const void* staged,
                                                   const float* chan, int bm, int bn, int M) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  constexpr bool kFp8 = std::is_same_v<Args, Fp8ConvArgs>;
  using Acc = std::conditional_t<kFp8, float, int>;
  constexpr int BM = Cfg::BM, BN = Cfg::BN, LD = Cfg::kAccLd;
  const Args& a = kp.a;
  const Acc* stage = static_cast<const Acc*>(staged);
  const int tid = threadIdx.x;
  T* y = static_cast<T*>(a.y);
  const auto* res = reinterpret_cast<const unsigned char*>(a.res);  // INT8 or E4M3 codes
  const bool has_res = res != nullptr;
  // Whether a group of 4 channels starting at a multiple of 4 can be loaded / stored as one
  // vector: the stride and the base pointer aligned to 4 elements.
  const bool y_vec = a.y_stride % 4 == 0 && reinterpret_cast<uintptr_t>(y) % (4 * sizeof(T)) == 0;
  const bool res_vec =
      has_res && a.res_stride % 4 == 0 && reinterpret_cast<uintptr_t>(res) % 4 == 0;
  constexpr int kGroupsPerRow = BN / 4;
  // A thread keeps one group of 4 channels for the whole loop (the block's thread count is a
  // multiple of the groups per row), so its per-channel constants are loaded once, and it steps
  // down the rows.
  static_assert(Cfg::kThreads % kGroupsPerRow == 0, "a thread's channels stay the same");
  constexpr int kRowStep = Cfg::kThreads / kGroupsPerRow;
  const float r_y = __frcp_rn(a.y_scale);  // the fast epilogue's 1 / y_scale
  const int col = (tid % kGroupsPerRow) * 4, n0 = bn + col;
  if (n0 >= a.out_c) return;
  const bool full = n0 + 4 <= a.out_c;  // all 4 channels exist
  const float4 xw4 = *reinterpret_cast<const float4*>(chan + col);
  const float4 ws4 = *reinterpret_cast<const float4*>(chan + BN + col);
  const float4 bias4 = *reinterpret_cast<const float4*>(chan + 2 * BN + col);
  const float xw[4] = {xw4.x, xw4.y, xw4.z, xw4.w}, ws[4] = {ws4.x, ws4.y, ws4.z, ws4.w};
  const float bias[4] = {bias4.x, bias4.y, bias4.z, bias4.w};
#pragma unroll 1
  for (int row = tid / kGroupsPerRow; row < BM; row += kRowStep) {
    const int m = bm + row;
    if (m >= M) break;
    const long long mm = m;
    Acc accs[4];
    if constexpr (kFp8) {
      const float4 v4 = *reinterpret_cast<const float4*>(stage + row * LD + col);
      accs[0] = v4.x, accs[1] = v4.y, accs[2] = v4.z, accs[3] = v4.w;
    } else {
      const int4 v4 = *reinterpret_cast<const int4*>(stage + row * LD + col);
      accs[0] = v4.x, accs[1] = v4.y, accs[2] = v4.z, accs[3] = v4.w;
    }
    unsigned char rb[4] = {0, 0, 0, 0};  // the residual's codes (INT8: two's complement bytes)
    if (has_res) {
      const unsigned char* rp = res + mm * a.res_stride + n0;
      if (res_vec && full) {
        const uchar4 r4 = *reinterpret_cast<const uchar4*>(rp);
        rb[0] = r4.x, rb[1] = r4.y, rb[2] = r4.z, rb[3] = r4.w;
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (n0 + e < a.out_c) rb[e] = rp[e];
      }
    }
    T* yp = y + mm * a.y_stride + n0;
    if constexpr (kFp8) {
      float v[4] = {0, 0, 0, 0};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (n0 + e >= a.out_c) break;
        v[e] = fp8_epilogue_value(accs[e], xw[e], bias[e], a.act, has_res, a.res_scale, rb[e]);
      }
      if constexpr (sizeof(T) == 1) {
        // E4M3 codes of v / y_scale: a multiply by the reciprocal and the hardware conversion
        // (cvt.rn.satfinite.e4m3x2.f32 on sm_89+: round to nearest even, saturate to +-448,
        // NaN to 0x7F, as quantize_fp8_e4m3; the reciprocal adds one rounding, which the
        // result's tolerance covers).
        unsigned char q[4];
#pragma unroll
        for (int e = 0; e < 4; ++e)
          q[e] = __nv_cvt_float_to_fp8(__fmul_rn(v[e], r_y), __NV_SATFINITE, __NV_E4M3);
        if (y_vec && full) {
          *reinterpret_cast<uchar4*>(yp) = make_uchar4(q[0], q[1], q[2], q[3]);
        } else {
#pragma unroll
          for (int e = 0; e < 4; ++e)
            if (n0 + e < a.out_c) yp[e] = q[e];
        }
      } else if (y_vec && full) {
        store4(yp, v);
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (n0 + e < a.out_c) store1(yp + e, v[e]);
      }
    } else if constexpr (sizeof(T) == 1) {
      int8_t q[4] = {0, 0, 0, 0};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (n0 + e >= a.out_c) break;
        const int r = static_cast<signed char>(rb[e]);
        if constexpr (kExact)
          q[e] = int8_epilogue(accs[e], a.x_scale, ws[e], xw[e], bias[e], a.act, has_res,
                               a.res_scale, r, a.y_scale, kp.fallbacks);
        else
          q[e] = int8_epilogue_fast(accs[e], xw[e], bias[e], a.act, has_res, a.res_scale, r, r_y);
      }
      if (y_vec && full) {
        *reinterpret_cast<char4*>(yp) = make_char4(q[0], q[1], q[2], q[3]);
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (n0 + e < a.out_c) yp[e] = q[e];
      }
    } else {
      double v[4] = {0, 0, 0, 0};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (n0 + e >= a.out_c) break;
        v[e] = exact_value(accs[e], a.x_scale, ws[e], bias[e], a.act, has_res, a.res_scale,
                           static_cast<signed char>(rb[e]));
      }
      if (y_vec && full) {
        store4(yp, v);
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (n0 + e < a.out_c) store1(yp + e, v[e]);
      }
    }
  }
#elif defined(__CUDA_ARCH__)
  __trap();  // compiled for a GPU without mma.m16n8k32.s8 / cp.async: conv_int8_gpu refuses it
#endif
}

// ---------------------------------------------------------------- the first layer, input fused
//
// conv_int8_image_gpu (int8_conv_gpu.hpp). A block computes an 8 x 32 tile of output pixels of
// one image, one pixel per thread, every output channel, in three steps:
//  1. shared memory gets the weights as one 32-bit word per tap and output channel (the in_c <= 4
//     codes of that tap, zero-padded: the operand of one dp4a), laid out [tap][channel] with the
//     channels rounded up to 16, so that a thread's 16 channels of a tap are 4 broadcast 16-byte
//     loads; the per-channel constants as conv_int8_mma has them; and the input pixels the tile's
//     receptive fields cover (rows (8 - 1) stride + kernel, columns (32 - 1) stride + kernel),
//     each quantised from the float planes into one word of codes (0 outside the image: the
//     padding). Consecutive threads read consecutive floats of a row of a plane.
//  2. every thread: for each group of 16 output channels, one dp4a per tap and channel into 16
//     int32 accumulators (exact).
//  3. the epilogue of conv_int8_mma, per element, through a per-thread slot of shared memory,
//     and the 16 codes of a group stored as one 16-byte store where the view allows (a warp
//     then writes 512 contiguous bytes when the output has 16 channels).
constexpr int kImgTileH = 8, kImgTileW = 32, kImgThreads = kImgTileH * kImgTileW;
constexpr int kImgGroup = 16;
// A thread's epilogue slot: its 16 int32 sums, then their 16 codes (80 bytes, in 16-byte units).
constexpr int kImgSlot16 = 5;

struct ImageSmemLayout {
  int channels16, taps, tile_h, tile_w;  // output channels rounded up to 16; input tile
  __host__ __device__ int weight_words() const { return taps * channels16; }
  __host__ __device__ int chan_floats() const { return 3 * channels16; }
  __host__ __device__ int tile_words() const { return (tile_h * tile_w + 3) / 4 * 4; }
  __host__ __device__ int bytes() const {
    return 4 * (weight_words() + chan_floats() + tile_words()) + 16 * kImgSlot16 * kImgThreads;
  }
};
__host__ __device__ inline ImageSmemLayout image_smem_layout(const Int8ConvArgs& a) {
  return {(a.out_c + kImgGroup - 1) / kImgGroup * kImgGroup, a.kernel * a.kernel,
          (kImgTileH - 1) * a.stride + a.kernel, (kImgTileW - 1) * a.stride + a.kernel};
}

template <class T, bool kExact>
__global__ void __launch_bounds__(kImgThreads)
    conv_int8_image(Int8ImageConvArgs ia, unsigned long long* fallbacks) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const Int8ConvArgs& a = ia.conv;
  extern __shared__ __align__(16) unsigned char smem[];
  const ImageSmemLayout L = image_smem_layout(a);
  int* wsm = reinterpret_cast<int*>(smem);                         // [tap][channels16]
  float* chan = reinterpret_cast<float*>(wsm + L.weight_words());  // xw, ws, bias
  int* xsm = reinterpret_cast<int*>(chan + L.chan_floats());       // [tile_h][tile_w]
  const int tid = threadIdx.x, n = blockIdx.z;
  const int oy0 = blockIdx.y * kImgTileH, ox0 = blockIdx.x * kImgTileW;

  // 1. Weights, constants, the quantised input tile.
  for (int i = tid; i < L.weight_words(); i += kImgThreads) {
    const int tap = i / L.channels16, k = i - tap * L.channels16;
    unsigned word = 0;
    if (k < a.out_c) {
      const int8_t* wk = a.w + (static_cast<long long>(k) * L.taps + tap) * a.in_c;
      for (int c = 0; c < a.in_c; ++c)
        word |= static_cast<unsigned>(static_cast<uint8_t>(wk[c])) << (8 * c);
    }
    wsm[i] = static_cast<int>(word);
  }
  for (int k = tid; k < L.channels16; k += kImgThreads) {
    const float ws = k < a.out_c ? __ldg(a.w_scale + k) : 1.0f;
    chan[k] = __fmul_rn(a.x_scale, ws);
    chan[L.channels16 + k] = ws;
    chan[2 * L.channels16 + k] = k < a.out_c ? __ldg(a.bias + k) : 0.0f;
  }
  const long long plane = static_cast<long long>(a.in_h) * a.in_w;
  const float* image = ia.images + static_cast<long long>(n) * a.in_c * plane;
  const int iy0 = oy0 * a.stride - a.pad, ix0 = ox0 * a.stride - a.pad;
  for (int i = tid; i < L.tile_h * L.tile_w; i += kImgThreads) {
    const int ty = i / L.tile_w, tx = i - ty * L.tile_w;
    const int iy = iy0 + ty, ix = ix0 + tx;
    unsigned word = 0;
    if (static_cast<unsigned>(iy) < static_cast<unsigned>(a.in_h) &&
        static_cast<unsigned>(ix) < static_cast<unsigned>(a.in_w)) {
      const float* p = image + static_cast<long long>(iy) * a.in_w + ix;
      for (int c = 0; c < a.in_c; ++c)
        word |=
            static_cast<unsigned>(static_cast<uint8_t>(requantize(__ldg(p + c * plane), a.x_scale)))
            << (8 * c);
    }
    xsm[i] = static_cast<int>(word);
  }
  __syncthreads();

  const int ty = tid / kImgTileW, tx = tid % kImgTileW;
  const int oy = oy0 + ty, ox = ox0 + tx;
  if (oy >= a.out_h || ox >= a.out_w) return;  // no barrier follows
  const long long m = (static_cast<long long>(n) * a.out_h + oy) * a.out_w + ox;
  const int* x0 = xsm + ty * a.stride * L.tile_w + tx * a.stride;  // the receptive field's corner
  T* y = static_cast<T*>(a.y) + m * a.y_stride;
  int4* slot = reinterpret_cast<int4*>(xsm + L.tile_words()) + tid * kImgSlot16;
  [[maybe_unused]] const float r_y = __frcp_rn(a.y_scale);  // the fast epilogue's 1 / y_scale
  [[maybe_unused]] const bool y_vec16 =
      a.y_stride % 16 == 0 && reinterpret_cast<uintptr_t>(a.y) % 16 == 0;
  [[maybe_unused]] const bool y_vec4 =
      a.y_stride % 4 == 0 && reinterpret_cast<uintptr_t>(a.y) % (4 * sizeof(T)) == 0;
#pragma unroll 1
  for (int g = 0; g < a.out_c; g += kImgGroup) {
    // 2. The dot products: 16 channels, one dp4a per tap and channel.
    int acc[kImgGroup];
#pragma unroll
    for (int j = 0; j < kImgGroup; ++j) acc[j] = 0;
#pragma unroll 1
    for (int r = 0; r < a.kernel; ++r) {
#pragma unroll 1
      for (int s = 0; s < a.kernel; ++s) {
        const int xv = x0[r * L.tile_w + s];
        const int4* wv = reinterpret_cast<const int4*>(wsm + (r * a.kernel + s) * L.channels16 + g);
#pragma unroll
        for (int q = 0; q < kImgGroup / 4; ++q) {
          const int4 w4 = wv[q];
          acc[4 * q] = __dp4a(xv, w4.x, acc[4 * q]);
          acc[4 * q + 1] = __dp4a(xv, w4.y, acc[4 * q + 1]);
          acc[4 * q + 2] = __dp4a(xv, w4.z, acc[4 * q + 2]);
          acc[4 * q + 3] = __dp4a(xv, w4.w, acc[4 * q + 3]);
        }
      }
    }
    // 3. The epilogue, conv_int8_mma's per element. The 16 sums go through this thread's slot
    // of shared memory, so that the epilogue is a loop over them rather than 16 inlined copies
    // (conv_int8_mma's reason; here, YOLOv8n's model.0 at batch 32 on an H200 with the exact
    // epilogue: 369 us with the copies, 294 us with the loop).
    slot[0] = make_int4(acc[0], acc[1], acc[2], acc[3]);
    slot[1] = make_int4(acc[4], acc[5], acc[6], acc[7]);
    slot[2] = make_int4(acc[8], acc[9], acc[10], acc[11]);
    slot[3] = make_int4(acc[12], acc[13], acc[14], acc[15]);
    const int* sums = reinterpret_cast<const int*>(slot);
    const int count = a.out_c - g < kImgGroup ? a.out_c - g : kImgGroup;
    if constexpr (sizeof(T) == 1) {
      int8_t* codes = reinterpret_cast<int8_t*>(slot + 4);  // then the 16 codes
#pragma unroll 1
      for (int j = 0; j < count; ++j) {
        const int k = g + j;
        if constexpr (kExact)
          codes[j] = int8_epilogue(sums[j], a.x_scale, chan[L.channels16 + k], chan[k],
                                   chan[2 * L.channels16 + k], a.act, false, 0.0f, 0, a.y_scale,
                                   fallbacks);
        else
          codes[j] = int8_epilogue_fast(sums[j], chan[k], chan[2 * L.channels16 + k], a.act, false,
                                        0.0f, 0, r_y);
      }
      int8_t* yp = y + g;
      if (y_vec16 && count == kImgGroup) {
        *reinterpret_cast<int4*>(yp) = slot[4];
      } else {
        for (int j = 0; j < count; ++j) yp[j] = codes[j];
      }
    } else {
#pragma unroll 1
      for (int q4 = 0; q4 < count; q4 += 4) {
        double v[4] = {0, 0, 0, 0};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int k = g + q4 + e;
          if (q4 + e < count)
            v[e] = exact_value(sums[q4 + e], a.x_scale, chan[L.channels16 + k],
                               chan[2 * L.channels16 + k], a.act, false, 0.0f, 0);
        }
        T* yp = y + g + q4;
        if (y_vec4 && q4 + 4 <= count) {
          store4(yp, v);
        } else {
          for (int e = 0; e < 4 && q4 + e < count; ++e) store1(yp + e, v[e]);
        }
      }
    }
  }
#elif defined(__CUDA_ARCH__)
  __trap();  // compiled for an older GPU: conv_int8_image_gpu refuses it
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

// The kernel instance for an INT8 convolution's output type and epilogue, shared by the three
// launchers (mma.sync, the first layer, wgmma): launch(Int8Output<T, kExact>{}, counter) with the
// fallback counter the kernel gets. INT8 codes run the exact or the fast epilogue (which counts
// nothing: null counter); float outputs always the double one (the top of int8_conv_gpu.hpp).
// `who` starts the message of the exception thrown for an unknown type.
template <class T_, bool kExact_>
struct Int8Output {
  using T = T_;
  static constexpr bool kExact = kExact_;
};
template <class Launch>
void for_int8_output(const char* who, Int8ConvOutput y_type, Int8Epilogue epilogue,
                     unsigned long long* fallbacks, Launch&& launch) {
  switch (y_type) {
    case Int8ConvOutput::int8:
      if (epilogue == Int8Epilogue::fast) return launch(Int8Output<int8_t, false>{}, nullptr);
      return launch(Int8Output<int8_t, true>{}, fallbacks);
    case Int8ConvOutput::f32:
      return launch(Int8Output<float, true>{}, fallbacks);
    case Int8ConvOutput::f16:
      return launch(Int8Output<__half, true>{}, fallbacks);
  }
  throw std::invalid_argument(std::string(who) + ": unknown output type");
}

template <class Cfg, class T, bool kExact, class Args>
void launch_tile(const Args& a, unsigned long long* fallbacks, cudaStream_t stream) {
  const long long M = static_cast<long long>(a.batch) * a.out_h * a.out_w;
  const int K = a.kernel * a.kernel * a.in_c;
  const int slices = (K + kBK - 1) / kBK;
  const int stages = slices < kStages ? slices : kStages;
  const int smem = Cfg::smem_bytes(stages);
  const dim3 grid(static_cast<unsigned>((M + Cfg::BM - 1) / Cfg::BM),
                  static_cast<unsigned>((a.out_c + Cfg::BN - 1) / Cfg::BN));
  if (smem > 48 * 1024) {
    static std::atomic<unsigned long long> done{0};  // this kernel's (one per template argument)
    allow_smem(conv_int8_mma<Cfg, Args, T, kExact>, Cfg::kSmemBytes, done);
  }
  conv_int8_mma<Cfg, Args, T, kExact>
      <<<grid, Cfg::kThreads, smem, stream>>>(KernelParams<Args>{a, fallbacks});
  CUDA_CHECK_LAUNCH();
}

template <class Cfg>
void launch_typed(const Int8ConvArgs& a, Int8Epilogue epilogue, unsigned long long* fallbacks,
                  cudaStream_t stream) {
  for_int8_output("conv_int8_gpu", a.y_type, epilogue, fallbacks,
                  [&](auto out, unsigned long long* counter) {
                    using O = decltype(out);
                    launch_tile<Cfg, typename O::T, O::kExact>(a, counter, stream);
                  });
}

template <class Cfg>
void launch_fp8_typed(const Fp8ConvArgs& a, cudaStream_t stream) {
  switch (a.y_type) {
    case Fp8ConvOutput::fp8:
      return launch_tile<Cfg, std::uint8_t, true>(a, nullptr, stream);
    case Fp8ConvOutput::f32:
      return launch_tile<Cfg, float, true>(a, nullptr, stream);
    case Fp8ConvOutput::f16:
      return launch_tile<Cfg, __half, true>(a, nullptr, stream);
  }
  throw std::invalid_argument("conv_fp8_gpu: unknown output type");
}

template <class T, bool kExact>
void launch_image(const Int8ImageConvArgs& a, unsigned long long* fallbacks, cudaStream_t stream) {
  const Int8ConvArgs& c = a.conv;
  const dim3 grid(static_cast<unsigned>((c.out_w + kImgTileW - 1) / kImgTileW),
                  static_cast<unsigned>((c.out_h + kImgTileH - 1) / kImgTileH),
                  static_cast<unsigned>(c.batch));
  conv_int8_image<T, kExact>
      <<<grid, kImgThreads, image_smem_layout(c).bytes(), stream>>>(a, fallbacks);
  CUDA_CHECK_LAUNCH();
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

void launch_int8_conv(int tile, const Int8ConvArgs& a, Int8Epilogue epilogue,
                      unsigned long long* fallbacks, cudaStream_t stream) {
  switch (tile) {
    case 0:
      return launch_typed<Tile128x128>(a, epilogue, fallbacks, stream);
    case 1:
      return launch_typed<Tile128x64>(a, epilogue, fallbacks, stream);
    case 2:
      return launch_typed<Tile64x64>(a, epilogue, fallbacks, stream);
    case 3:
      return launch_typed<Tile64x32>(a, epilogue, fallbacks, stream);
    default:
      throw std::invalid_argument("conv_int8_gpu: tile " + std::to_string(tile) +
                                  " is not an index of int8_conv_tiles()");
  }
}

int int8_image_conv_smem(const Int8ConvArgs& conv) {
  return image_smem_layout(conv).bytes();
}

void launch_int8_image_conv(const Int8ImageConvArgs& a, Int8Epilogue epilogue,
                            unsigned long long* fallbacks, cudaStream_t stream) {
  for_int8_output("conv_int8_image_gpu", a.conv.y_type, epilogue, fallbacks,
                  [&](auto out, unsigned long long* counter) {
                    using O = decltype(out);
                    launch_image<typename O::T, O::kExact>(a, counter, stream);
                  });
}

void launch_fp8_conv(int tile, const Fp8ConvArgs& a, cudaStream_t stream) {
  switch (tile) {
    case 0:
      return launch_fp8_typed<Tile128x128>(a, stream);
    case 1:
      return launch_fp8_typed<Tile128x64>(a, stream);
    case 2:
      return launch_fp8_typed<Tile64x64>(a, stream);
    case 3:
      return launch_fp8_typed<Tile64x32>(a, stream);
    default:
      throw std::invalid_argument("conv_fp8_gpu: tile " + std::to_string(tile) +
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

// The Hopper path for 1x1 convolutions (TMA + wgmma), which shares this file's epilogue.
#include "int8_wgmma.cuh"
