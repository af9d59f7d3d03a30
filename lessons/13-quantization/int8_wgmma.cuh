// Lesson 13: the Hopper path of the INT8 convolution, for 1x1 convolutions with stride 1 and pad
// 0: TMA loads and wgmma.mma_async with s8 operands (int8_conv_gpu.hpp says when conv_int8_gpu
// takes it, and how to force either path).
//
// Not compiled on its own: int8_conv_gpu.cu includes this file at its end, so that the kernel
// below shares that file's epilogue (int8_tile_epilogue, which runs exercise 3's int8_epilogue,
// the fast epilogue or the double path exactly as the mma.sync kernel does) and its launch
// helpers. The barrier, TMA, descriptor and tensor-map helpers are lesson 10's (wgmma.cuh); the
// device code exists only in the sm_90a pass (LESSON10_SM90A), a trap in every other.
//
// A 1x1, stride-1, unpadded convolution is a plain GEMM: GEMM row m is input pixel m, whose in_c
// bytes lie at x + m * x_stride, and the weights [out_c][in_c] are K-major rows too. wgmma takes
// 8-bit operands only K-major (its transpose flags are for 16-bit types), which is what both are.
//
// The kernel (one BM x BN = 128 x {64, 128, 256} tile of output per block, 384 threads = three
// warp groups), lesson 10's v5 with 8-bit operands:
//   warp group 0, the producer: one thread issues, per K tile of 128 bytes, two TMA loads into a
//     ring of up to 4 stages: A's 128 pixels x 128 bytes and B's BN channels x 128 bytes, each
//     one box whose rows are exactly one 128-byte swizzle row. Pixels past M, channels past
//     out_c and K past in_c lie outside the tensor maps and arrive as zeros, so the tails need
//     no code. The stage's "full" mbarrier completes when its bytes have landed.
//   warp groups 1 and 2, the consumers: each owns 64 pixel rows; per stage it issues four
//     wgmma.m64nBNk32.s32.s8.s8 (32 bytes of K each), waits for them and releases the stage.
//   Then all 384 threads run the mma.sync kernel's epilogue: the consumers stage their int32
//     accumulators in shared memory over the ring, and every thread takes 4 channels of one pixel
//     at a time (int8_tile_epilogue).
//
// Shared-memory layout, as TMA's 128-byte swizzle writes it and wgmma reads it (PTX ISA,
// "Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions", the K-major canonical
// layout with 128-byte swizzling): every row is 128 bytes, 16-byte chunk c of row r stored at
// chunk c ^ (r % 8); 8 rows make a 1024-byte swizzle atom, hence the 1024-byte alignment of every
// tile. In bytes this is the FP16 layout of lesson 10's A (64 halves = 128 bytes per row); a k32
// step of s8 is 32 bytes, as a k16 step of FP16 is, so the descriptors are v5's A descriptor for
// both operands: stride byte offset 1024 (from one 8-row atom to the next, along M or N), leading
// byte offset unused (the K of one instruction lies within a swizzle row), start address + 32
// bytes per k step.
//
// Accumulators (PTX ISA, "Register fragment for D", the same for .s32 as for .f32): lane l of
// warp w of a consumer owns rows 16w + l / 4 and 16w + l / 4 + 8 of the group's 64 rows;
// d[4j + 2h + e] is row 16w + l / 4 + 8h, column 8j + 2 (l % 4) + e: int8_acc_element(l, 2h + e)
// of the j-th block of 8 columns, as in an m16n8 fragment of the mma.sync kernel.
#include <cuda.h>

#include <climits>
#include <cstdint>
#include <string>
#include <vector>

#include "lessons/10-tensor-cores/wgmma.cuh"  // mbarriers, TMA, descriptors, encode_tiled

namespace lesson13 {
namespace {

// A wgmma tile: BM = 128 pixels (two consumer warp groups of 64 rows) x BN channels; K tiles of
// kBK = 128 bytes (one swizzle row) in a ring of up to kStages stages. The members the epilogue
// reads are the mma.sync tiles' (BM, BN, kThreads, kAccLd).
template <int BN_>
struct WgmmaTile {
  static constexpr int BM = 128, BN = BN_, kThreads = 384, kBK = 128, kStages = 4;
  static constexpr int kAStageBytes = BM * kBK, kBStageBytes = BN * kBK;
  static constexpr int kStageBytes = kAStageBytes + kBStageBytes;
  // The epilogue's int32 tile over the ring (rows of BN + 8: int8_conv_gpu.cu's TileCfg says why).
  static constexpr int kAccLd = BN + 8;
  static constexpr int kAccBytes = BM * kAccLd * 4;
  static constexpr int kChanBytes = 3 * BN * 4;  // fl(x_scale w_scale), w_scale, bias per channel
  // Dynamic shared memory of a launch whose ring has `stages` stages (fewer K tiles than kStages:
  // only those): 1024 bytes of alignment slack, the ring or the staged tile, the per-channel
  // constants, then the full and empty mbarriers (8 bytes each).
  __host__ __device__ static constexpr int chan_offset(int stages) {
    return stages * kStageBytes > kAccBytes ? stages * kStageBytes : kAccBytes;
  }
  __host__ __device__ static constexpr int smem_bytes(int stages) {
    return 1024 + chan_offset(stages) + kChanBytes + 2 * kStages * 8;
  }
  static constexpr int kSmemBytes = smem_bytes(kStages);
  static_assert(BN == 64 || BN == 128 || BN == 256, "wgmma_s8 has these three shapes");
  static_assert(kStageBytes % 1024 == 0, "every stage and its B tile start on a swizzle atom");
  static_assert(kSmemBytes <= 227 * 1024, "a block's shared memory on Hopper");
};

using Wgmma128x256 = WgmmaTile<256>;
using Wgmma128x128 = WgmmaTile<128>;
using Wgmma128x64 = WgmmaTile<64>;

#ifdef LESSON10_SM90A
namespace l10 = lesson10::detail;

// The PTX operand lists of the accumulators, 32 registers per macro.
#define LESSON13_REGS_0                                                              \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, " \
  "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define LESSON13_REGS_32                                                                  \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, " \
  "%49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define LESSON13_REGS_64                                                                  \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, " \
  "%81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define LESSON13_REGS_96                                                                       \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, "     \
  "%111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, " \
  "%126, %127"
#define LESSON13_ACC8(i)                                                                      \
  "+r"(d[i]), "+r"(d[i + 1]), "+r"(d[i + 2]), "+r"(d[i + 3]), "+r"(d[i + 4]), "+r"(d[i + 5]), \
      "+r"(d[i + 6]), "+r"(d[i + 7])
#define LESSON13_ACC32(i) \
  LESSON13_ACC8(i), LESSON13_ACC8(i + 8), LESSON13_ACC8(i + 16), LESSON13_ACC8(i + 24)

// D (BN / 2 int32 per thread) += A (64 x 32 bytes, descriptor) * B (BN x 32 bytes, descriptor),
// s8 x s8 -> s32, both K-major; the integer form has no scale or transpose immediates, only the
// predicate scale-d (true: accumulate into D).
template <int BN>
__device__ __forceinline__ void wgmma_s8(int (&d)[BN / 2], std::uint64_t da, std::uint64_t db) {
  if constexpr (BN == 64) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k32.s32.s8.s8 {" LESSON13_REGS_0 "}, %32, %33, p;\n}\n"
        : LESSON13_ACC32(0)
        : "l"(da), "l"(db), "n"(1));
  } else if constexpr (BN == 128) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 {" LESSON13_REGS_0 ", " LESSON13_REGS_32
        "}, %64, %65, p;\n}\n"
        : LESSON13_ACC32(0), LESSON13_ACC32(32)
        : "l"(da), "l"(db), "n"(1));
  } else {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k32.s32.s8.s8 {" LESSON13_REGS_0 ", " LESSON13_REGS_32
        ", " LESSON13_REGS_64 ", " LESSON13_REGS_96 "}, %128, %129, p;\n}\n"
        : LESSON13_ACC32(0), LESSON13_ACC32(32), LESSON13_ACC32(64), LESSON13_ACC32(96)
        : "l"(da), "l"(db), "n"(1));
  }
}
#undef LESSON13_REGS_0
#undef LESSON13_REGS_32
#undef LESSON13_REGS_64
#undef LESSON13_REGS_96
#undef LESSON13_ACC8
#undef LESSON13_ACC32

// lesson 10's pin_registers for int accumulators: no read or write of d moves across this point
// (the asm above says d is written when the wgmma is issued; the hardware writes it until the
// wait).
template <int N>
__device__ __forceinline__ void pin_accumulators(int (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(d[i])::"memory");
}

#endif  // LESSON10_SM90A

// map_x: x as M rows of in_c bytes (row stride x_stride), boxes of 128 rows x 128 bytes; map_w:
// w as out_c rows of in_c bytes, boxes of BN rows x 128 bytes (wgmma_map below).
template <class Cfg, class T, bool kExact>
__global__ void __launch_bounds__(Cfg::kThreads)
    conv_int8_wgmma(const __grid_constant__ CUtensorMap map_x,
                    const __grid_constant__ CUtensorMap map_w, KernelParams<Int8ConvArgs> kp) {
#ifdef LESSON10_SM90A
  constexpr int BM = Cfg::BM, BN = Cfg::BN, kBK = Cfg::kBK, kStages = Cfg::kStages;
  extern __shared__ unsigned char smem_raw[];
  // The 1024-byte-aligned base as smem_raw plus an offset, not as a rounded generic address
  // (lesson 10's align_1024): an integer turned back into a pointer no longer says which state
  // space it points into, so every access through it was a generic LD.E / ST.E on a 64-bit
  // address (two registers and 64-bit arithmetic per pointer); indexed from the __shared__ array,
  // the compiler emits LDS / STS on 32-bit shared addresses.
  const unsigned raw = l10::smem_addr(smem_raw);
  unsigned char* smem = smem_raw + (((raw + 1023u) & ~1023u) - raw);
  const Int8ConvArgs& a = kp.a;
  const int M = a.batch * a.out_h * a.out_w;
  const int k_tiles = (a.in_c + kBK - 1) / kBK;
  const int stages = k_tiles < kStages ? k_tiles : kStages;  // what the launch allocated
  float* chan = reinterpret_cast<float*>(smem + Cfg::chan_offset(stages));
  std::uint64_t* full = reinterpret_cast<std::uint64_t*>(chan + 3 * BN);
  std::uint64_t* empty = full + kStages;
  const int tid = threadIdx.x, wg = tid / 128;
  const int bm = blockIdx.x * BM, bn = blockIdx.y * BN;
  for (int c = tid; c < BN; c += Cfg::kThreads) {
    const int n = bn + c;
    const float ws = n < a.out_c ? __ldg(a.w_scale + n) : 1.0f;
    chan[c] = __fmul_rn(a.x_scale, ws);
    chan[BN + c] = ws;
    chan[2 * BN + c] = n < a.out_c ? __ldg(a.bias + n) : 0.0f;
  }
  l10::init_ring(full, empty, stages, 2);
  __syncthreads();  // the barriers initialised (and fenced for TMA), the constants written

  int d[BN / 2];  // a consumer's accumulators (the producer warp group leaves them unused)
  if (wg == 0) {
    if (tid == 0) {
      for (int t = 0; t < k_tiles; ++t) {
        const int s = t % stages;
        // Stage s's previous K tile (t - stages) must be released by both consumers: the phase
        // of "empty" that completed on that use, which flips each time the ring wraps.
        if (t >= stages) l10::mbar_wait(&empty[s], (t / stages - 1) & 1);
        unsigned char* st = smem + s * Cfg::kStageBytes;
        l10::mbar_expect_tx(&full[s], Cfg::kStageBytes);  // whole boxes, zero-filled or not
        l10::tma_load_2d(st, &map_x, t * kBK, bm, &full[s]);
        l10::tma_load_2d(st + Cfg::kAStageBytes, &map_w, t * kBK, bn, &full[s]);
      }
    }
  } else {
    const int rows = (wg - 1) * 64;  // this consumer's 64 pixel rows of the tile
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) d[i] = 0;
    const unsigned ring = l10::smem_addr(smem);
    for (int t = 0; t < k_tiles; ++t) {
      const int s = t % stages;
      l10::mbar_wait(&full[s], (t / stages) & 1);
      const unsigned sa = ring + s * Cfg::kStageBytes + rows * kBK;
      const unsigned sb = ring + s * Cfg::kStageBytes + Cfg::kAStageBytes;
      pin_accumulators(d);
      lesson10::wgmma_fence();
#pragma unroll
      for (int k = 0; k < kBK / 32; ++k)
        wgmma_s8<BN>(d, l10::make_desc(sa + 32 * k, 16, 1024),
                     l10::make_desc(sb + 32 * k, 16, 1024));
      lesson10::wgmma_commit();
      lesson10::wgmma_wait<0>();  // the stage's operands read, d written
      pin_accumulators(d);
      if (tid % 128 == 0) l10::mbar_arrive(&empty[s]);
    }
  }
  // The staged tile overlays the ring: both consumers must be done reading it (every TMA load
  // has landed by then: each consumer waited for every stage it read). The ring's last accesses
  // were the async proxy's (TMA writes, wgmma reads) and the stores below are the generic
  // proxy's, yet no fence.proxy.async is needed here: the PTX ISA's "Async Proxy" paragraphs
  // (of cp.async.bulk's section and of wgmma.mma_async's) say that the completion of either
  // operation is followed by an implicit generic-async proxy fence, and both completions were
  // observed before this barrier (the full mbarrier's phase, wgmma.wait_group 0). The other
  // direction, generic stores then an async-proxy access, would need the fence; it does not
  // occur (nothing reads the ring through TMA or wgmma after this point). A block-wide barrier
  // (the producer warp group waits too) rather than a named one for the 256 consumer threads.
  __syncthreads();
  if (wg != 0) {
    const int rows = (wg - 1) * 64;
    int* staged = reinterpret_cast<int*>(smem);
    const int warp = (tid % 128) / 32, lane = tid % 32;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const Int8RC e = int8_acc_element(lane, 2 * h);
        int* dst = staged + (rows + warp * 16 + e.row) * Cfg::kAccLd + j * 8 + e.col;
        *reinterpret_cast<int2*>(dst) = make_int2(d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
      }
  }
  __syncthreads();  // the staged tile complete; the producer warp group joins the epilogue
  int8_tile_epilogue<Cfg, Int8ConvArgs, T, kExact>(kp, smem, chan, bm, bn, M);
#elif defined(__CUDA_ARCH__)
  __trap();  // not the sm_90a pass: conv_int8_gpu never launches this kernel here
#endif
}

// A rows x cols matrix of bytes, row stride `stride` bytes, read in boxes of box_rows x 128
// bytes with the 128-byte swizzle; out-of-range rows and columns read as zeros.
CUtensorMap wgmma_map(const void* base, long long rows, int cols, long long stride, int box_rows) {
  CUtensorMap map{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(stride)};
  const cuuint32_t box[2] = {128, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t elem[2] = {1, 1};
  const CUresult r = lesson10::detail::encode_tiled()(
      &map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(base), dims, strides, box, elem,
      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    throw std::invalid_argument("conv_int8_gpu: cuTensorMapEncodeTiled refused a " +
                                std::to_string(rows) + " x " + std::to_string(cols) +
                                " byte matrix of row stride " + std::to_string(stride) +
                                " (error " + std::to_string(static_cast<int>(r)) + ")");
  }
  return map;
}

template <class Cfg, class T, bool kExact>
void launch_wgmma_tile(const Int8ConvArgs& a, unsigned long long* fallbacks, cudaStream_t stream) {
  const long long M = static_cast<long long>(a.batch) * a.out_h * a.out_w;
  if (M > INT_MAX) throw std::invalid_argument("conv_int8_gpu: more than 2^31 - 1 output pixels");
  const int k_tiles = (a.in_c + Cfg::kBK - 1) / Cfg::kBK;
  const int stages = k_tiles < Cfg::kStages ? k_tiles : Cfg::kStages;
  const CUtensorMap map_x = wgmma_map(a.x, M, a.in_c, a.x_stride, Cfg::BM);
  const CUtensorMap map_w = wgmma_map(a.w, a.out_c, a.in_c, a.in_c, Cfg::BN);
  const dim3 grid(static_cast<unsigned>((M + Cfg::BM - 1) / Cfg::BM),
                  static_cast<unsigned>((a.out_c + Cfg::BN - 1) / Cfg::BN));
  static std::atomic<unsigned long long> done{0};  // this kernel's (one per template argument)
  allow_smem(conv_int8_wgmma<Cfg, T, kExact>, Cfg::kSmemBytes, done);
  conv_int8_wgmma<Cfg, T, kExact><<<grid, Cfg::kThreads, Cfg::smem_bytes(stages), stream>>>(
      map_x, map_w, KernelParams<Int8ConvArgs>{a, fallbacks});
  CUDA_CHECK_LAUNCH();
}

template <class Cfg>
void launch_wgmma_typed(const Int8ConvArgs& a, Int8Epilogue epilogue, unsigned long long* fallbacks,
                        cudaStream_t stream) {
  for_int8_output("conv_int8_gpu", a.y_type, epilogue, fallbacks,
                  [&](auto out, unsigned long long* counter) {
                    using O = decltype(out);
                    launch_wgmma_tile<Cfg, typename O::T, O::kExact>(a, counter, stream);
                  });
}

template <class Cfg>
Int8ConvTile wgmma_tile_info(const char* name) {
  // warps_m x warps_n: the consumer warp groups (2 x 1), each 64 rows x BN; `threads` counts the
  // producer warp group too.
  return {name, Cfg::BM, Cfg::BN, 2, 1, Cfg::kThreads, Cfg::kSmemBytes};
}

}  // namespace

const std::vector<Int8ConvTile>& int8_wgmma_tiles() {
  static const std::vector<Int8ConvTile> tiles = {wgmma_tile_info<Wgmma128x256>("wgmma 128x256"),
                                                  wgmma_tile_info<Wgmma128x128>("wgmma 128x128"),
                                                  wgmma_tile_info<Wgmma128x64>("wgmma 128x64")};
  return tiles;
}

namespace detail {

bool int8_wgmma_built() {
#ifdef LESSON13_WGMMA_SM90A
  return true;
#else
  return false;
#endif
}

void launch_int8_wgmma(int tile, const Int8ConvArgs& a, Int8Epilogue epilogue,
                       unsigned long long* fallbacks, cudaStream_t stream) {
  switch (tile) {
    case 0:
      return launch_wgmma_typed<Wgmma128x256>(a, epilogue, fallbacks, stream);
    case 1:
      return launch_wgmma_typed<Wgmma128x128>(a, epilogue, fallbacks, stream);
    case 2:
      return launch_wgmma_typed<Wgmma128x64>(a, epilogue, fallbacks, stream);
    default:
      throw std::invalid_argument("conv_int8_gpu: tile " + std::to_string(tile) +
                                  " is not an index of int8_wgmma_tiles()");
  }
}

}  // namespace detail
}  // namespace lesson13
