// Lesson 12: the engine's kernels, as the plan file carries them.
//
// engine_kernels.cu is compiled on its own into a fatbinary (SASS for the build's GPUs + PTX) that
// the builder copies into the plan and the runtime loads with the Driver API's library
// management (cuLibraryLoadData, cuLibraryGetKernel): exactly how a TensorRT plan carries its
// kernels. Every kernel is extern "C" (a stable symbol to look up by name) and takes one argument,
// a plain struct passed by value, so one cuLaunchKernel call site launches them all.
//
// This header is shared by the device code and the host (builder, runtime, tests): the argument
// structs, the kernel table (symbol, tile, threads, shared memory, what it requires) and the
// launch geometry.
#pragma once

#include <cstddef>

#ifndef __CUDACC__
#include <cuda_runtime_api.h>  // dim3
#endif

namespace lesson12 {

enum class DType { f32 = 0, f16 = 1 };
inline std::size_t element_size(DType t) {
  return t == DType::f16 ? 2 : 4;
}

// One convolution with its fused epilogue, NHWC:
//   y[n, oy, ox, k] = act(sum_{r, s, c} x[n, oy*stride - pad + r, ox*stride - pad + s, c] * w[k, r,
//   s, c]
//                         + bias[k]) (+ res[n, oy, ox, k])
// Element (n, y, x, c) of x is x[((n * in_h + y) * in_w + x) * x_stride + c]: x already points at
// the view's first channel, x_stride is its buffer's channel count (a concatenation's slice).
// Likewise y / y_stride and res / res_stride. Out-of-image taps read zero (padding).
// Element types: x, w, res, y of the kernel's dtype; bias always float.
// The first layer's kernels (ConvKernelInfo::nchw_input) read x as the network input instead:
// float NCHW [batch, in_c, in_h, in_w] (x_stride unused): the layout change is fused into the
// convolution.
struct ConvArgs {
  const void* x;
  const void* w;      // [out_c][kernel][kernel][in_c]
  const float* bias;  // [out_c]
  const void* res;    // may be null
  void* y;
  int x_stride, res_stride, y_stride;
  int batch, in_h, in_w, in_c;
  int out_h, out_w, out_c;
  int kernel, stride, pad;
  int act;  // Activation: 0 none, 1 SiLU
};

// Max pool (k x k, stride, pad; padding never wins) or nearest x2 upsample, NHWC views as above.
// out_h/out_w given. Same dtype in and out.
struct PoolArgs {
  const void* x;
  void* y;
  int x_stride, y_stride;
  int batch, in_h, in_w, channels, out_h, out_w;
  int kernel, stride, pad;
};

// The detect head's decode (see network.hpp): for each level i, box[i] holds 4 * reg_max logits
// and cls[i] num_classes logits per pixel (NHWC views); out is float [batch, 4 + C, N] with
// N = sum of h_i * w_i, levels in order, pixels row-major.
struct DetectArgs {
  const void* box[3];
  const void* cls[3];
  int box_stride[3], cls_stride[3];
  int h[3], w[3], level_stride[3];
  int batch, num_classes, reg_max, num_candidates;
  float* out;
};

// The cuDNN tactic's epilogue (epilogue_kernels.cuh): in place over a view of `pixels` rows of
// `channels` values, y = act(y + bias) (+ res). Symbols bias_act_nhwc_f16 / _f32.
struct EpilogueArgs {
  void* y;
  const float* bias;
  const void* res;  // may be null
  int y_stride, res_stride;
  int pixels, channels;
  int act;
};
constexpr int kEpilogueThreads = 256;

// The kernel table: every convolution kernel the builder may time for a layer.
enum class ConvFamily {
  igemm_mma,    // implicit GEMM on tensor cores (mma.sync m16n8k16, FP16 in, FP32 accumulate)
  igemm_simt,   // implicit GEMM on CUDA cores (FP32)
  direct,       // one thread per output pixel and a few channels: for few input channels
  first_layer,  // direct, reading the NCHW float network input
};

struct ConvKernelInfo {
  const char* symbol;  // extern "C" name in engine_kernels.cu
  const char* tactic;  // what the builder's table prints
  ConvFamily family;
  DType dtype;
  int tile_m, tile_n;  // output pixels x output channels per block (every family)
  int threads;         // per block
  int smem_bytes;      // dynamic shared memory
  int in_c_multiple;   // in_c must be a multiple of this (16-byte loads: 8 halves, 4 floats)
  int max_k;           // K = kernel^2 * in_c at most this (0: any): the direct kernels stage
                       // their block's weights in shared memory
  int min_sm;          // compute capability * 10 the kernel needs (80: mma.m16n8k16 and
                       // cp.async; 90: thread-block clusters); compiled for an older GPU (the
                       // compute_75 PTX) it traps, so the builder must skip it there:
                       // conv_kernel_runs_on
  int split_k = 1;     // > 1: K split over a cluster of split_k blocks along the grid's z
                       // (launch_conv_kernel sets the cluster shape)
};

// The tensor-core kernels' tiles (engine_kernels.cu; the table's smem_bytes come from here):
// K is consumed in slices of kMmaBK, staged through a kMmaStages-deep cp.async ring; every
// shared-memory row (32 halves of one output pixel or one output channel) is padded to
// kMmaRowHalves, so the eight 16-byte rows an ldmatrix phase reads sit 80 bytes apart: eight
// different bank groups (5 row mod 8 is a permutation).
constexpr int kMmaBK = 32, kMmaRowHalves = 40, kMmaStages = 3;
constexpr int mma_smem_bytes(int tile_m, int tile_n, int stages = kMmaStages) {
  return stages * (tile_m + tile_n) * kMmaRowHalves * 2;
}
// The stages a tensor-core kernel's ring uses for a reduction of K: min(kMmaStages, K slices).
__host__ __device__ inline int mma_stages_used(int K) {
  const int slices = (K + kMmaBK - 1) / kMmaBK;
  return slices < kMmaStages ? slices : kMmaStages;
}

// Index maps of the implicit GEMM, shared by the kernels and the CPU tests.
//
// GEMM column k of a K = kernel * kernel * in_c reduction is tap (r, s), channel c:
// k = (r * kernel + s) * in_c + c, the order of a weight row [out_c][kernel][kernel][in_c].
struct ConvTap {
  int r, s, c;
};
__host__ __device__ inline ConvTap conv_tap(int k, int in_c, int kernel) {
  const int tap = k / in_c, r = tap / kernel;
  return {r, tap - r * kernel, k - tap * in_c};
}
// ldmatrix.x4 (no .trans) row addresses of one k16 step, as (row, column) of the stage's tile
// of K-contiguous rows (kMmaRowHalves halves each); lane l gives the address of row l % 8 of
// matrix l / 8 and, after the load, holds row l / 4, columns 2 (l % 4) + {0, 1} of each matrix.
//   A (rows = output pixels, m16 x k16): matrices (rows 0-7 | 8-15) x (k 0-7 | 8-15) in the
//   order of mma's a0..a3.
//   B (rows = output channels, two n8 x k16 fragments): matrices (channels 0-7, k 0-7),
//   (0-7, k 8-15), (8-15, k 0-7), (8-15, k 8-15) = b0, b1 of fragment 0 and b0, b1 of fragment
//   1: each lane then holds channel l / 4, k 2 (l % 4) + {0, 1} (+ 8): mma's "col" B layout.
struct TileRC {
  int row, col;
};
__host__ __device__ inline TileRC mma_ldmatrix_a(int lane) {
  return {lane & 15, (lane >> 4) * 8};
}
__host__ __device__ inline TileRC mma_ldmatrix_b(int lane) {
  return {((lane >> 4) & 1) * 8 + (lane & 7), ((lane >> 3) & 1) * 8};
}
// Byte offset of element (row, col) in a stage's tile.
__host__ __device__ inline int mma_tile_offset(int row, int col) {
  return (row * kMmaRowHalves + col) * 2;
}

// The direct kernels' shared-memory weights: K x 8 floats (conv_direct), K x 16 (first layer).
constexpr int kDirectMaxK = 9 * 64, kFirstLayerMaxK = 5 * 5 * 4;

// All of them, and how many.
const ConvKernelInfo* conv_kernels(int* count);

// Whether kernel `k` has code for a GPU of compute capability `sm` (major * 10 + minor).
bool conv_kernel_runs_on(const ConvKernelInfo& k, int sm);

// Whether `k` can run `a` (dtype and GPU aside): the first-layer flag (first-layer kernels only
// for the first layer, the others never), K <= max_k, in_c and x_stride multiples of
// in_c_multiple, and x
// and w 16-byte aligned where the kernel loads 16-byte chunks (null pointers are not checked:
// the builder may ask before it has addresses).
bool conv_kernel_supports(const ConvKernelInfo& k, const ConvArgs& a, bool first_layer);

// Launch geometry of kernel `k` for `a`: (ceil(M / tile_m), ceil(out_c / tile_n), split_k)
// blocks of k.threads, M = batch * out_h * out_w output pixels (every family). Throws
// std::invalid_argument if M or out_c is not positive or the grid exceeds CUDA's limits.
dim3 conv_grid(const ConvKernelInfo& k, const ConvArgs& a);
// Dynamic shared memory to launch kernel `k` with for `a`: k.smem_bytes, except for the
// tensor-core kernels when K = kernel^2 in_c has fewer than kMmaStages slices of kMmaBK: the ring
// then only ever uses that many stages (a 1x1 convolution of 32 channels uses one), and the
// smaller allocation lets more blocks share an SM. A split-K kernel needs at least its tile in
// FP32 (the partial tile it hands to block 0 of its cluster).
std::size_t conv_smem_bytes(const ConvKernelInfo& k, const ConvArgs& a);

// The other kernels, one per dtype: symbol names.
const char* max_pool_symbol(DType t);  // "max_pool_nhwc_f16", ...
const char* upsample_symbol(DType t);  // "upsample2x_nhwc_f16", ...
const char* detect_symbol(DType t);    // "detect_decode_f16", ...
// Pool / upsample: one thread per output pixel and group of 8 channels, grid-stride loop.
dim3 pool_grid(const PoolArgs& a);
constexpr int kPoolThreads = 256;
// Detect: one thread per (image, candidate).
dim3 detect_grid(const DetectArgs& a);
constexpr int kDetectThreads = 128;

}  // namespace lesson12
