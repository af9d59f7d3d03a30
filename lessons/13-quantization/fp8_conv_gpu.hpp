// Lesson 13: the FP8 E4M3 convolution on tensor cores.
//
//   conv_fp8_gpu   conv_fp8_reference (fp8_conv.hpp) on the GPU, within a stated bound: the INT8
//                  kernel's implicit GEMM (int8_conv_gpu.hpp: the same tiles, cp.async ring and
//                  ldmatrix maps, since an E4M3 operand is one byte like an INT8 one) on
//                  mma.sync.m16n8k32 with .e4m3 operands and .f32 accumulation (PTX ISA,
//                  "Warp-level Matrix Multiply-Accumulate Instructions"; compute capability 8.9
//                  or newer), the epilogue in float
//
// What differs from the reference, and by how much. The products of two E4M3 values are exact
// (8 significant bits), but the tensor core adds them into its accumulator with roundings the
// PTX ISA leaves unspecified (the accumulation is not IEEE FP32 round-to-nearest after each
// addition: on Hopper the alignment of the products keeps fewer bits), so acc differs from the
// exact sum by a fraction of sum |products| (conv_fp8_abs_sums) that the tests measure and bound.
// Then, per element, in float (no certificate and no double path, unlike the INT8 kernel):
//   v = acc * fl(x_scale * w_scale[k]) + bias[k];  v = v / (1 + expf(-v))  (SiLU);
//   v = v + res_scale * e4m3(res);  y = fp8_e4m3_from_float(v / y_scale), v, or half(v)
// so y is within a few float roundings (and expf's 2 ulp) of what the reference's epilogue gives
// for the GPU's acc; an FP8 output lands on the reference's code or, near a rounding boundary of
// the E4M3 grid, on a neighbour.
//
// Requirements (conv_fp8_gpu checks them and throws std::invalid_argument naming the first that
// fails): compute capability 8.9 or newer; everything check_fp8_conv_args checks; in_c and
// x_stride multiples of 16; x and w 16-byte aligned; every pointer device-accessible.
#pragma once

#include <cuda_runtime_api.h>

#include "fp8_conv.hpp"
#include "int8_conv_gpu.hpp"  // the tiles

namespace lesson13 {

// int8_conv_auto_tile's choice for this convolution's shape (the same rule: the tiles are the
// INT8 kernel's, int8_conv_tiles()). Throws std::invalid_argument for sm_count < 1.
int fp8_conv_auto_tile(const Fp8ConvArgs& a, int sm_count);

// Every check that needs no CUDA call: check_fp8_conv_args (w_scale not read), in_c and
// x_stride multiples of kInt8ConvChannelMultiple, x and w 16-byte aligned. Throws
// std::invalid_argument ("conv_fp8_gpu: ...").
void check_fp8_conv_gpu_args(const Fp8ConvArgs& a);

// Runs the convolution on `stream` (asynchronous). Every pointer of `a` is device memory (or
// managed / mapped pinned memory); shapes, views and epilogue are conv_fp8_reference's, the
// result within the bound the top of this file states. tile: an index into int8_conv_tiles(),
// or -1 for fp8_conv_auto_tile's choice on the current device. batch 0 launches nothing.
// Throws std::invalid_argument for what check_fp8_conv_gpu_args refuses, a GPU older than
// compute capability 8.9, a pointer the device cannot access or a tile index out of range;
// course::CudaError if a CUDA call fails.
void conv_fp8_gpu(const Fp8ConvArgs& a, cudaStream_t stream, int tile = -1);

namespace detail {
// int8_conv_gpu.cu: the launch behind conv_fp8_gpu (no argument checks).
void launch_fp8_conv(int tile, const Fp8ConvArgs& a, cudaStream_t stream);
}  // namespace detail

}  // namespace lesson13
