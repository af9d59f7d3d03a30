// Lesson 12: the exercise solutions. Read them after you have tried.
//
// Not compiled on its own: plugin.cu includes this file at its end, in the lesson build only.
// The exercise build (make check LESSON=12) defines LESSON_EXERCISE_BUILD, which leaves it out,
// and exercise.cu supplies the same functions instead.
#pragma once

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

#include "common/cuda_check.hpp"

namespace lesson12 {

// Exercise 1. BN(conv(x)) = a * conv(x) + (beta - a * mean) with a = gamma / sqrt(var + eps),
// and conv(x) = W x + b, so the folded convolution has W' = a W (row k scaled by a_k) and
// b' = a (b - mean) + beta.
void fold_batch_norm(std::vector<float>& weight, std::vector<float>& bias,
                     const std::vector<float>& gamma, const std::vector<float>& beta,
                     const std::vector<float>& mean, const std::vector<float>& var, float eps) {
  const std::size_t out = gamma.size();
  if (out == 0 || beta.size() != out || mean.size() != out || var.size() != out ||
      bias.size() != out || weight.size() % out != 0 || !(eps > 0)) {
    throw std::invalid_argument(
        "fold_batch_norm: expected gamma, beta, mean, var and bias of one length C >= 1, "
        "weight a multiple of C, eps > 0; got C = " +
        std::to_string(out) + ", weight " + std::to_string(weight.size()) + ", bias " +
        std::to_string(bias.size()));
  }
  for (std::size_t k = 0; k < out; ++k) {
    const double v = static_cast<double>(var[k]) + eps;
    if (!(v > 0) || !std::isfinite(v)) {
      throw std::invalid_argument("fold_batch_norm: channel " + std::to_string(k) +
                                  " has var + eps = " + std::to_string(v) +
                                  ", expected a positive finite number");
    }
  }
  const std::size_t row = weight.size() / out;
  for (std::size_t k = 0; k < out; ++k) {
    const double a = static_cast<double>(gamma[k]) / std::sqrt(static_cast<double>(var[k]) + eps);
    for (std::size_t i = 0; i < row; ++i) {
      weight[k * row + i] = static_cast<float>(a * weight[k * row + i]);
    }
    bias[k] = static_cast<float>(a * (static_cast<double>(bias[k]) - mean[k]) + beta[k]);
  }
}

// Exercise 2. Greedy first fit, largest buffer first: place each buffer at the lowest aligned
// offset where it overlaps no already placed buffer whose interval intersects its own. Largest
// first keeps small buffers from fragmenting the space the big ones need (the heuristic of
// TensorRT's and TFLite's arena planners: "greedy by size").
std::vector<std::size_t> assign_offsets(const std::vector<LiveRange>& buffers,
                                        std::size_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    throw std::invalid_argument("assign_offsets: alignment must be a power of two, got " +
                                std::to_string(alignment));
  }
  for (const LiveRange& b : buffers) {
    if (b.first > b.last) {
      throw std::invalid_argument("assign_offsets: a buffer's first op " + std::to_string(b.first) +
                                  " is after its last " + std::to_string(b.last));
    }
  }
  auto round_up = [&](std::size_t x) { return (x + alignment - 1) / alignment * alignment; };
  std::vector<int> order(buffers.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return buffers[a].bytes > buffers[b].bytes; });
  std::vector<std::size_t> offset(buffers.size(), 0);
  std::vector<int> placed;
  for (int i : order) {
    const LiveRange& b = buffers[i];
    // The placed buffers alive at the same time, by offset.
    std::vector<int> clash;
    for (int j : placed) {
      if (buffers[j].first <= b.last && b.first <= buffers[j].last) clash.push_back(j);
    }
    std::sort(clash.begin(), clash.end(), [&](int x, int y) { return offset[x] < offset[y]; });
    std::size_t at = 0;
    for (int j : clash) {
      if (at + round_up(b.bytes) <= offset[j]) break;  // fits in the gap before j
      at = std::max(at, round_up(offset[j] + buffers[j].bytes));
    }
    offset[i] = at;
    placed.push_back(i);
  }
  return offset;
}

// Exercise 3. Undo the row-major flattening of m and k, then apply stride and padding.
__host__ __device__ GemmTap implicit_gemm_tap(const ConvShape& s, int m, int k) {
  const int ox = m % s.out_w;
  const int oy = (m / s.out_w) % s.out_h;
  const int n = m / (s.out_w * s.out_h);
  const int c = k % s.in_c;
  const int tap = k / s.in_c;
  const int r = tap / s.kernel, q = tap % s.kernel;
  const int y = oy * s.stride - s.pad + r, x = ox * s.stride - s.pad + q;
  return {n, y, x, c, y >= 0 && y < s.in_h && x >= 0 && x < s.in_w};
}

// Exercise 4. One thread per (image, candidate): find the candidate's level and pixel, the four
// DFL softmax expectations, the box, then the class sigmoids.
template <class T>
__device__ float plugin_load(const void* p, long long i) {
  return static_cast<float>(static_cast<const T*>(p)[i]);
}

template <class T>
__global__ void decode_plugin_kernel(DetectArgs a) {
  const long long total = static_cast<long long>(a.batch) * a.num_candidates;
  const long long t = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  if (t >= total) return;
  const int n = static_cast<int>(t / a.num_candidates);
  int i = static_cast<int>(t % a.num_candidates);
  const int cand = i;
  int level = 0;
  while (level < 2 && i >= a.h[level] * a.w[level]) {
    i -= a.h[level] * a.w[level];
    ++level;
  }
  const int y = i / a.w[level], x = i % a.w[level];
  const long long pixel = (static_cast<long long>(n) * a.h[level] + y) * a.w[level] + x;
  float dist[4];
  for (int side = 0; side < 4; ++side) {
    const long long base = pixel * a.box_stride[level] + side * a.reg_max;
    float mx = -INFINITY;
    for (int j = 0; j < a.reg_max; ++j) mx = fmaxf(mx, plugin_load<T>(a.box[level], base + j));
    float sum = 0, expect = 0;
    for (int j = 0; j < a.reg_max; ++j) {
      const float e = __expf(plugin_load<T>(a.box[level], base + j) - mx);
      sum += e;
      expect += e * j;
    }
    dist[side] = expect / sum;
  }
  const float s = static_cast<float>(a.level_stride[level]);
  const float ax = x + 0.5f, ay = y + 0.5f;
  const float x1 = ax - dist[0], y1 = ay - dist[1], x2 = ax + dist[2], y2 = ay + dist[3];
  const long long rows = 4 + a.num_classes;
  float* out = a.out + static_cast<long long>(n) * rows * a.num_candidates + cand;
  out[0] = (x1 + x2) * 0.5f * s;
  out[static_cast<long long>(a.num_candidates)] = (y1 + y2) * 0.5f * s;
  out[2ll * a.num_candidates] = (x2 - x1) * s;
  out[3ll * a.num_candidates] = (y2 - y1) * s;
  for (int c = 0; c < a.num_classes; ++c) {
    const float v = plugin_load<T>(a.cls[level], pixel * a.cls_stride[level] + c);
    out[(4ll + c) * a.num_candidates] = 1.0f / (1.0f + __expf(-v));
  }
}

void decode_plugin(const DetectArgs& args, DType dtype, cudaStream_t stream) {
  if (args.reg_max < 1 || args.reg_max > 32 || args.out == nullptr || args.batch < 0) {
    throw std::invalid_argument(
        "decode_plugin: expected reg_max in [1, 32], a non-null output "
        "and batch >= 0");
  }
  const long long total = static_cast<long long>(args.batch) * args.num_candidates;
  if (total == 0) return;
  const unsigned blocks = static_cast<unsigned>((total + 127) / 128);
  if (dtype == DType::f16) {
    decode_plugin_kernel<__half><<<blocks, 128, 0, stream>>>(args);
  } else {
    decode_plugin_kernel<float><<<blocks, 128, 0, stream>>>(args);
  }
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace lesson12
