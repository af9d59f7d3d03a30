// Lesson 13: the INT8 convolution on tensor cores, and the device side of the number formats.
//
//   conv_int8_gpu        conv_int8_reference (int8_conv.hpp) on the GPU, element for element:
//                        an implicit GEMM on mma.sync.m16n8k32 (s8 x s8 -> s32), the epilogue
//                        (dequantise, bias, SiLU, residual, requantise) fused into it
//   int8_conv_tiles      the block tiles it can run with, and int8_conv_auto_tile's choice
//   int8_wgmma_tiles     the Hopper path for 1x1 layers (TMA + wgmma.mma_async with s8 operands,
//                        int8_wgmma.cuh), which conv_int8_gpu takes by itself on compute
//                        capability 9.0; Int8ConvPath forces either path
//   quantize_int8_gpu    the kernel's own requantisation (an inline copy of exercise 1's
//                        quantize_int8) over an array: the tests compare it with the host's
//   fp8_e4m3_from_float_gpu / fp8_e4m3_to_float_gpu   quantize.hpp's FP8 conversions run on the
//                        GPU (the same __host__ __device__ functions), for the same comparison
//
// The kernel (int8_conv_gpu.cu) is lesson 12's tensor-core implicit GEMM (engine_kernels.cu,
// conv_igemm_mma) with 8-bit operands. GEMM rows are output pixels (M = batch * out_h * out_w),
// columns output channels (N = out_c), the reduction K = kernel^2 * in_c in (r, s, c) order, so
// that a KRSC weight row is contiguous. Per stage of a 3-deep cp.async ring, each block stages 64
// K values (bytes) of its BM pixels and BN channels, each 16-byte chunk being 16 channels of one
// tap (hence in_c % 16 == 0), padding taps and tails zero-filled by cp.async's src-size operand.
// A shared-memory row is 64 bytes padded to 80, so the eight rows an ldmatrix phase reads fall in
// eight different 16-byte bank groups. The byte layout of an m16 x k32 INT8 fragment is that of
// an m16 x k16 FP16 one (PTX ISA, "Matrix Fragments for mma.m16n8k32": a lane holds 4 consecutive
// k of a row per register, rows g and g + 8, k 0-15 then 16-31), so ldmatrix (.b16, no .trans)
// reads A and B exactly as lesson 12's kernel does, 32 bytes of K per step instead of 16 halves.
// int32 accumulators are exact (int8_conv.hpp: K <= kInt8ConvMaxK).
//
// The epilogue is exact, not close. For INT8 output each element is first computed in float
// (p = acc * fl(x_scale * w_scale[k]), + bias, SiLU with __expf and __fdividef, + res_scale * res,
// times fl(1 / y_scale)) with an error bound derived in solutions.cuh (exercise 3); if the float
// quotient is farther than that bound from every rounding boundary of the INT8 grid (k + 1/2, and
// the saturation at 126.5), its rounding is the reference's rounding, certified. Otherwise (a small
// fraction of the elements, which the fallback counter below measures, and every exact tie) the
// element is recomputed in double, operation for operation as conv_int8_reference does (the same
// roundings, no FMA contraction), then rounded to float and quantised as there. Float and FP16
// outputs always take the double path (a float estimate cannot certify a float's own rounding;
// FP16's 11 bits could be certified the way INT8's are, which is not done). What "exact" rests on
// in the double path: CUDA's exp (double, maximum error 1 ulp; CUDA Math API) and the host's
// std::exp may differ in the last bit of a double. That changes float(v) only when v lies within a
// few double ulps of a float rounding boundary (about 2^-28 of the elements with SiLU, none
// without), and an INT8 code only if that one-ulp change of the float also crosses a rounding
// boundary of the y_scale grid. The tests allow exactly that, and count it.
//
// Requirements of the tensor-core path (conv_int8_gpu checks them all and throws
// std::invalid_argument naming the first one that fails): compute capability 8.0 or newer;
// in_c and x_stride multiples of 16 (YOLOv8n's layers all qualify except the first, whose 3
// input channels stay on lesson 12's FP16 first-layer kernel, are padded to 16 with zeros, or
// run in conv_int8_image_gpu below);
// x and w 16-byte aligned (cp.async moves 16 bytes); every pointer device-accessible. y and res
// may have any alignment and stride (4 channels are stored together when they allow).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "int8_conv.hpp"

namespace lesson13 {

// in_c and x_stride must be multiples of this (16 channels = one 16-byte cp.async chunk).
constexpr int kInt8ConvChannelMultiple = 16;

// A block tile of the kernel: tile_m output pixels x tile_n output channels, computed by
// warps_m x warps_n warps (each (tile_m / warps_m) x (tile_n / warps_n): m16 x n8 fragments),
// `threads` = 32 warps_m warps_n per block, `smem_bytes` of dynamic shared memory: the larger of
// the cp.async ring (3 stages of tile_m + tile_n rows of 80 bytes; int8_mma.hpp) and the
// epilogue's int32 tile (tile_m rows of tile_n + 8 accumulators), which reuses the ring's memory,
// then 3 floats per output channel (the epilogue's per-channel constants).
struct Int8ConvTile {
  const char* name;  // "128x128", ...
  int tile_m, tile_n, warps_m, warps_n, threads, smem_bytes;
};
const std::vector<Int8ConvTile>& int8_conv_tiles();

// The tile conv_int8_gpu uses when none is given, for a GPU of `sm_count` SMs. Among the tiles
// that waste less than half of their output channels (tile_n < 2 * out_c rounded up to 16), the
// largest whose grid has at least one block per SM, else the smallest of them; the smallest
// tile of all when none qualifies (out_c <= 16).
// Returns an index into int8_conv_tiles(). Throws std::invalid_argument for sm_count < 1.
int int8_conv_auto_tile(const Int8ConvArgs& a, int sm_count);

// Every check that needs no CUDA call: check_int8_conv_args (w_scale not read: device memory),
// then in_c and x_stride multiples of kInt8ConvChannelMultiple, x and w 16-byte aligned.
// Throws std::invalid_argument ("conv_int8_gpu: ...").
void check_int8_conv_gpu_args(const Int8ConvArgs& a);

// How an INT8 output element is rounded (float and FP16 outputs always take the double path).
//   exact  equal to conv_int8_reference: the certified float epilogue (exercise 3) with its
//          double fallback (the top of this file)
//   fast   the same float computation without the certificate: an element the certificate would
//          send to the fallback (a few in 10 000 on the lesson's layers) may be one code away from
//          the reference's; every other element is equal. No fallback is counted. What a
//          production kernel does (TensorRT's INT8 kernels are not bit-exact either); the lesson
//          times both, to show what exactness costs.
enum class Int8Epilogue { exact, fast };

// The Hopper path (int8_wgmma.cuh), for 1x1 convolutions with stride 1 and pad 0, which are
// plain GEMMs (A = the input pixels, M = batch * in_h * in_w rows of in_c bytes at row stride
// x_stride; B = the weights, out_c rows of in_c bytes): TMA loads of 128-byte-swizzled tiles, one
// producer warp group and two consumer warp groups issuing wgmma.mma_async m64nNk32 with s8
// operands, then the same epilogue as the mma.sync kernel, so the same results (exact: equal to
// conv_int8_reference as above; fast: the same rule). It needs compute capability 9.0 exactly
// (wgmma is sm_90a code) and a build whose CMAKE_CUDA_ARCHITECTURES include 90 (compiled for any
// other architecture, the kernel is a trap and conv_int8_gpu never takes this path).
//   path automatic  (the default) the wgmma path when int8_wgmma_eligible(a), tile is -1,
//                   int8_wgmma_available() and int8_wgmma_pays(a, SM count); the mma.sync path
//                   otherwise. An explicit tile keeps its meaning, an index into int8_conv_tiles()
//                   (the mma.sync path).
//   path mma_sync   the mma.sync path, tile an index into int8_conv_tiles() or -1
//   path wgmma      the wgmma path, tile an index into int8_wgmma_tiles() or -1 for
//                   int8_wgmma_auto_tile's choice; conv_int8_gpu throws std::invalid_argument when
//                   the layer is not eligible or int8_wgmma_available() is false
enum class Int8ConvPath { automatic, mma_sync, wgmma };

// The wgmma path's tiles, largest first: "wgmma 128x256", "wgmma 128x128", "wgmma 128x64"
// (tile_m x tile_n outputs per block; warps_m x warps_n = 2 x 1 consumer warp groups of 64 rows;
// threads = 384 with the producer warp group; smem_bytes with the full 4-stage ring of 128-byte
// K tiles, 1024 bytes of alignment slack, 3 floats per channel and the mbarriers: a launch with
// fewer K tiles than stages allocates only the stages it uses).
const std::vector<Int8ConvTile>& int8_wgmma_tiles();

// Whether the layer is one the wgmma path computes: kernel 1, stride 1, pad 0 (the requirements
// of check_int8_conv_gpu_args hold as for the other path). No CUDA call.
bool int8_wgmma_eligible(const Int8ConvArgs& a);

// Whether the automatic path takes wgmma for an eligible layer: in_c >= 128 (at least one whole
// 128-byte K tile: a narrower layer pays for the zero-filled rest of the box; YOLOv8n's 32- and
// 48-channel 1x1 layers at 160x160 took 226-234 us on it at batch 32 against 110-118 us on
// mma.sync, on an H200) and at least 128 x sm_count output pixels (a full wave of 128-row
// tiles: model.12.cv1, 384 -> 128 channels, took 9.2 us on it at batch 1, 1600 pixels, against
// 7.7 us on mma.sync, and 18.9 us at batch 16 against 21.9 us). A rule drawn from those few
// measurements, fast epilogue. No CUDA call. Throws std::invalid_argument for sm_count < 1.
bool int8_wgmma_pays(const Int8ConvArgs& a, int sm_count);

// Whether the wgmma path runs here: the kernel was compiled for sm_90a and the current device has
// compute capability 9.0. Throws course::CudaError if the device cannot be queried.
bool int8_wgmma_available();

// The wgmma tile the automatic choice takes for layer `a`: "wgmma 128x64" for every layer. On an
// H200 it was the fastest of the three at every shape timed (model.12.cv1, 384 -> 128 channels at
// 40x40, batch 1 and 16, exact and fast epilogue: at batch 16 fast 17.4 us against 20.5 for
// 128x128 and 33.9 for 128x256). By shared memory (smem_bytes: 131 KB for 128x128, 100 KB for
// 128x64) an SM holds one block of the wider tile and two of 128x64. A rule drawn from those
// measurements, not a model. Returns an index into int8_wgmma_tiles(). No CUDA call.
int int8_wgmma_auto_tile(const Int8ConvArgs& a);

// Runs the convolution on `stream` (asynchronous). Every pointer of `a` is device memory (or
// managed / mapped pinned memory); the shapes, views and epilogue are conv_int8_reference's, the
// result equal to it as the top of this file says. tile and path: which kernel and tile, as
// Int8ConvPath above says (by default: -1, automatic: on compute capability 9.0 the wgmma path
// for an eligible layer, else int8_conv_auto_tile's choice on the current device). fallbacks: if
// not null, a device counter that the kernel increments (atomically) once per INT8 output element
// its certified float epilogue could not decide (for the tests and the lesson's statistics; leave
// it null to time the kernel; ignored with Int8Epilogue::fast). batch 0 launches nothing. The
// w_scale entries are not checked here (device memory): they must be positive normal floats, as
// quantize_int8_per_channel makes them. Throws std::invalid_argument for what
// check_int8_conv_gpu_args refuses, a GPU older than compute capability 8.0, a pointer the device
// cannot access, a tile index out of range, or a forced wgmma path that cannot run (above);
// course::CudaError if a CUDA call fails.
void conv_int8_gpu(const Int8ConvArgs& a, cudaStream_t stream, int tile = -1,
                   unsigned long long* fallbacks = nullptr,
                   Int8Epilogue epilogue = Int8Epilogue::exact,
                   Int8ConvPath path = Int8ConvPath::automatic);

// ------------------------------------------------------------ the first layer, input fused
//
// The network's first convolution reads the float image: 3 channels, which the tensor-core path
// above could only take padded to 16 (K = 9 x 16 = 144 of which 27 are real), after a separate
// pass that quantises the whole input into those 16 channels (157 MB of floats read, 210 MB of
// codes written and read again at batch 32 and 640 x 640). conv_int8_image_gpu does both in one
// kernel: each block quantises the input pixels its outputs need (quantize_int8(v, x_scale),
// exercise 1's rounding, into a shared-memory tile of 4 codes per pixel), then every thread
// computes one output pixel's channels with dp4a (__dp4a: the dot product of 4 signed bytes into
// an int32, CUDA Math API "Integer Intrinsics"; one per tap and output channel), and runs the
// same epilogue as conv_int8_gpu (exact, or fast). The result is conv_int8_reference's on the
// quantised image, as conv_int8_gpu's is: the int32 sums are exact either way.
//
// images: float NCHW [conv.batch][conv.in_c][conv.in_h][conv.in_w], dense, device memory.
// conv: the convolution of the codes quantize_int8(images, conv.x_scale) taken as an NHWC view
// with x_stride = in_c; conv.x must be null (the codes never exist in memory) and so must
// conv.res (a first layer has no residual). Weights KRSC [out_c][kernel][kernel][in_c], any
// alignment; y any view (16 channels are stored together when the view allows).
constexpr int kInt8ImageMaxChannels = 4;  // one 32-bit word of codes per pixel: one dp4a per tap

struct Int8ImageConvArgs {
  const float* images;
  Int8ConvArgs conv;
};

// Every check that needs no CUDA call (messages start with "conv_int8_image_gpu: "): images set,
// conv.x and conv.res null, conv_int8_reference's checks on conv (with the images standing in for
// x), in_c <= kInt8ImageMaxChannels, and the block's shared memory (the weights, 4 bytes per tap
// and output channel rounded up to 16, the input tile, 12 bytes per channel and 80 per thread)
// within 48 KiB.
// Throws std::invalid_argument.
void check_int8_image_conv_args(const Int8ImageConvArgs& a);

// Runs it on `stream` (asynchronous). fallbacks and epilogue as conv_int8_gpu's. batch 0 launches
// nothing. Throws std::invalid_argument for what the check refuses, a GPU older than compute
// capability 8.0 (the engine's INT8 path needs it anyway) or memory the GPU cannot access;
// course::CudaError if a CUDA call fails.
void conv_int8_image_gpu(const Int8ImageConvArgs& a, cudaStream_t stream,
                         unsigned long long* fallbacks = nullptr,
                         Int8Epilogue epilogue = Int8Epilogue::exact);

// The kernel's requantisation over n values: q[i] = the INT8 code of x[i] / scale exactly as
// exercise 1's quantize_int8 defines it (device pointers; asynchronous on `stream`).
// Throws std::invalid_argument for n < 0 or null pointers with n > 0.
void quantize_int8_gpu(const float* x, int n, float scale, std::int8_t* q, cudaStream_t stream);

// quantize.hpp's fp8_e4m3_from_float / fp8_e4m3_to_float, compiled for and run on the GPU, over
// n values (device pointers; asynchronous). Same errors as quantize_int8_gpu.
void fp8_e4m3_from_float_gpu(const float* x, int n, std::uint8_t* code, cudaStream_t stream);
void fp8_e4m3_to_float_gpu(const std::uint8_t* code, int n, float* x, cudaStream_t stream);

namespace detail {
// int8_conv_gpu.cu: the launches behind the checked functions above (no argument checks).
void launch_int8_conv(int tile, const Int8ConvArgs& a, Int8Epilogue epilogue,
                      unsigned long long* fallbacks, cudaStream_t stream);
// The shared memory conv_int8_image_gpu's block needs for these arguments, in bytes.
int int8_image_conv_smem(const Int8ConvArgs& conv);
void launch_int8_image_conv(const Int8ImageConvArgs& a, Int8Epilogue epilogue,
                            unsigned long long* fallbacks, cudaStream_t stream);
// int8_wgmma.cuh: the wgmma path's launch (tile: an index into int8_wgmma_tiles()), and whether
// its kernel was compiled for sm_90a (CMakeLists.txt defines LESSON13_WGMMA_SM90A then).
void launch_int8_wgmma(int tile, const Int8ConvArgs& a, Int8Epilogue epilogue,
                       unsigned long long* fallbacks, cudaStream_t stream);
bool int8_wgmma_built();
void launch_quantize_int8(const float* x, int n, float scale, std::int8_t* q, cudaStream_t stream);
void launch_fp8_from_float(const float* x, int n, std::uint8_t* code, cudaStream_t stream);
void launch_fp8_to_float(const std::uint8_t* code, int n, float* x, cudaStream_t stream);
}  // namespace detail

}  // namespace lesson13
