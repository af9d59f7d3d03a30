// Lesson 12 exercises: four parts of an engine that every TensorRT log line depends on.
//
// The builder folds BatchNorm with exercise 1 and plans the activation memory with exercise 2, so
// the lesson's engine tests use them; exercise 3 is the address map of the implicit-GEMM
// convolution (conv_as_gemm, on the CPU, is built on it; engine_kernels.cu's tensor-core kernel
// computes the same map for 16-byte chunks); exercise 4 is the detect head's decode written as a
// plugin would be, the way TensorRT runs a layer it has no kernel for: code from the application,
// not from the plan (the engine itself decodes with the plan's detect_decode kernel).
// In DetectArgs, box[i] and cls[i] point at the first channel of their views, box_stride and
// cls_stride are the channel counts of the buffers holding them (elements between pixels), and
// level_stride is the level's stride in input pixels (8, 16, 32).
// The solutions are in solutions.cuh; exercise.cu holds the stubs that `make check LESSON=12`
// builds instead. README.md has hints.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <vector>

#include "engine_kernels.cuh"

#ifdef __CUDACC__
#define LESSON12_HD __host__ __device__
#else
#define LESSON12_HD
#endif

namespace lesson12 {

// Exercise 1 (CPU). Fold a BatchNorm into the convolution before it.
// weight holds out_channels rows of equal length (output channel k's weights are contiguous:
// weight[k * row .. (k + 1) * row), whatever the order inside a row); bias holds out_channels
// values (zeros for a convolution without bias). After the call, the convolution computes
// BN(conv(x)) for every input x, where BN(y)_k = (y_k - mean_k) / sqrt(var_k + eps) * gamma_k +
// beta_k. Compute in double, store float. Throws std::invalid_argument if gamma, beta, mean, var
// or bias do not hold out_channels = gamma.size() values, or weight.size() is not a multiple of
// it, or eps <= 0, or some var_k + eps is not a positive finite number (a NaN or negative running
// variance would fold into NaN weights without a word).
void fold_batch_norm(std::vector<float>& weight, std::vector<float>& bias,
                     const std::vector<float>& gamma, const std::vector<float>& beta,
                     const std::vector<float>& mean, const std::vector<float>& var, float eps);

// Exercise 2 (CPU). The activation memory planner.
// Buffer i is written first by op first[i] and read last by op last[i] (first <= last) and
// takes bytes[i] bytes. Return one offset per buffer into a single arena such that:
//   - every offset is a multiple of `alignment` (a power of two);
//   - two buffers whose op intervals [first, last] intersect share no byte;
//   - the arena (the largest offset + bytes) is at most 3/2 of the peak: the largest total, over
//     all ops t, of the sizes (each rounded up to `alignment`) of the buffers live at t. (No
//     simple heuristic always reaches the peak itself: optimal placement is NP-hard. Largest-first
//     first fit stays within 3/2 on the tests' cases; on YOLOv8n it is within 7%.)
// Throws std::invalid_argument if the three vectors differ in length, first > last for some
// buffer, or alignment is not a power of two.
struct LiveRange {
  std::size_t bytes = 0;
  int first = 0, last = 0;
};
std::vector<std::size_t> assign_offsets(const std::vector<LiveRange>& buffers,
                                        std::size_t alignment);

// Exercise 3 (CPU; __host__ __device__). The implicit GEMM's address map.
// A convolution as a GEMM: row m of A is output pixel (n, oy, ox) with
// m = (n * out_h + oy) * out_w + ox; column k is the filter tap (r, s, c) with
// k = (r * kernel + s) * in_c + c. A[m][k] is the input element that tap reads for that pixel:
// row oy * stride - pad + r, column ox * stride - pad + s, channel c of image n, or zero when that
// falls outside the image (padding). Return it as a GemmTap (inside = false for padding; then
// y and x are where it would be). Preconditions (not checked): 0 <= m < batch * out_h * out_w,
// 0 <= k < kernel * kernel * in_c.
struct ConvShape {
  int batch, in_h, in_w, in_c, out_h, out_w, kernel, stride, pad;
};
struct GemmTap {
  int n, y, x, c;
  bool inside;
};
LESSON12_HD GemmTap implicit_gemm_tap(const ConvShape& s, int m, int k);

// The convolution computed as that GEMM, on the CPU in double: x NHWC [batch, in_h, in_w, in_c],
// w [out_c][kernel * kernel * in_c] (KRSC), returns y NHWC [batch, out_h, out_w, out_c] without
// bias or activation. Uses implicit_gemm_tap for every element of A.
std::vector<float> conv_as_gemm(const ConvShape& s, int out_c, const std::vector<float>& x,
                                const std::vector<float>& w);

// Exercise 4 (GPU). The detect head's decode as a plugin: a kernel launched with the runtime
// API (<<<>>>) on `stream`, doing what detect_decode_* does in the plan (see DetectArgs and
// network.hpp: DFL softmax over reg_max bins per side, expectation, anchor (x + 0.5, y + 0.5),
// box as cx, cy, w, h times the level's stride; sigmoid of the class logits), reading FP16 or
// FP32 logits as `dtype` says and writing float [batch, 4 + C, N]. Throws std::invalid_argument
// for reg_max outside [1, 32], a null output, or batch < 0; CUDA errors as course::CudaError.
void decode_plugin(const DetectArgs& args, DType dtype, cudaStream_t stream);

}  // namespace lesson12
