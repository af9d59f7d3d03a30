// Lesson 13: the INT8 engine's own kernels (quantized_engine.hpp, namespace detail): the input
// quantisation, max pool / upsample / copy on INT8 or E4M3 codes, and the reformat between
// storages. Memory-bound and simple on purpose: one thread per output element (or 4 codes), a
// grid-stride loop, 32-bit indices (checked at launch). The convolutions are conv_int8_gpu's /
// conv_fp8_gpu's (int8_conv_gpu.hpp, fp8_conv_gpu.hpp) and lesson 12's. The E4M3 conversions
// compute quantize.hpp's functions with cuda_fp8.h's (one instruction each on compute capability
// 8.9+, instead of a few dozen; see quantize_e4m3 below).
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime_api.h>
#include <stdint.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

#include "common/cuda_check.hpp"
#include "quantized_engine.hpp"

namespace lesson13 {
namespace {

using detail::Fp8PoolArgs;
using detail::Int8PoolArgs;
using detail::QuantizeInputArgs;
using detail::ReformatArgs;

// Exercise 1's quantize_int8 on the device, as int8_conv_gpu.cu's requantize (a kernel cannot
// call an out-of-line function of another translation unit without relocatable device code):
// q = saturate(rne(x / scale)) into [-127, 127], NaN -> 0. __fdiv_rn is IEEE division (the
// host's x / scale); __float2int_rn rounds to nearest, ties to even.
__device__ __forceinline__ int8_t quantize_code(float x, float scale) {
  const float v = __fdiv_rn(x, scale);
  if (v != v) return 0;
  if (v >= 127.0f) return 127;
  if (v <= -127.0f) return -127;
  return static_cast<int8_t>(__float2int_rn(v));
}

// dequantize_int8: one float multiplication, rounded once (no FMA can absorb it).
__device__ __forceinline__ float dequantize_code(int8_t q, float scale) {
  return __fmul_rn(static_cast<float>(q), scale);
}

// quantize_fp8_e4m3 / dequantize_fp8_e4m3 (quantize.hpp) with IEEE division and product (the
// host's x / scale and e4m3(c) * scale, whatever contraction the compiler might choose). The
// conversions are cuda_fp8.h's: on compute capability 8.9+ one cvt instruction each
// (cvt.rn.satfinite.e4m3x2.f32, and E4M3 -> half, exact), elsewhere its software emulation;
// test_quantize.cpp checks that __nv_cvt_float_to_fp8 gives fp8_e4m3_from_float's bits, and the
// engine's kernel tests compare these kernels with the host's quantize.hpp byte for byte.
__device__ __forceinline__ uint8_t quantize_e4m3(float x, float scale) {
  return static_cast<uint8_t>(
      __nv_cvt_float_to_fp8(__fdiv_rn(x, scale), __NV_SATFINITE, __NV_E4M3));
}
__device__ __forceinline__ float dequantize_e4m3(uint8_t c, float scale) {
  return __fmul_rn(__half2float(__half(__nv_cvt_fp8_to_halfraw(c, __NV_E4M3))), scale);
}

__device__ __forceinline__ float load_value(const void* base, long long i, BufferStorage t,
                                            float scale) {
  switch (t) {
    case BufferStorage::int8:
      return dequantize_code(static_cast<const int8_t*>(base)[i], scale);
    case BufferStorage::fp8_e4m3:
      return dequantize_e4m3(static_cast<const uint8_t*>(base)[i], scale);
    case BufferStorage::f16:
      return __half2float(static_cast<const __half*>(base)[i]);
    default:
      return static_cast<const float*>(base)[i];
  }
}

__device__ __forceinline__ void store_value(void* base, long long i, BufferStorage t, float v,
                                            float scale) {
  switch (t) {
    case BufferStorage::int8:
      static_cast<int8_t*>(base)[i] = quantize_code(v, scale);
      break;
    case BufferStorage::fp8_e4m3:
      static_cast<uint8_t*>(base)[i] = quantize_e4m3(v, scale);
      break;
    case BufferStorage::f16:
      static_cast<__half*>(base)[i] = __float2half_rn(v);
      break;
    default:
      static_cast<float*>(base)[i] = v;
      break;
  }
}

// Index arithmetic is 32-bit: the launches check that every index fits (a 64-bit division is a
// long software routine, and the first version of these kernels did four per byte: the input
// quantisation took 1.4 ms at batch 32 on an H200 instead of tens of microseconds).

// One thread per pixel: its `channels` floats (one from each plane: consecutive threads read
// consecutive floats of a plane), its padded_channels codes stored 16 at a time. The padding is
// byte 0 in both formats (INT8 0, E4M3 +0).
template <bool kFp8>
__global__ void quantize_input_kernel(QuantizeInputArgs a) {
  const int plane = a.h * a.w, pixels = a.batch * plane;
  for (int pix = blockIdx.x * blockDim.x + threadIdx.x; pix < pixels;
       pix += gridDim.x * blockDim.x) {
    const int n = pix / plane, p = pix - n * plane;
    const float* src = a.images + static_cast<long long>(n) * a.channels * plane + p;
    uint8_t* dst = static_cast<uint8_t*>(a.y) + static_cast<long long>(pix) * a.padded_channels;
    for (int c0 = 0; c0 < a.padded_channels; c0 += 16) {
      alignas(16) uint8_t q[16];
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        const int c = c0 + j;
        if (c >= a.channels) {
          q[j] = 0;
          continue;
        }
        const float x = src[static_cast<long long>(c) * plane];
        if constexpr (kFp8)
          q[j] = quantize_e4m3(x, a.scale);
        else
          q[j] = static_cast<uint8_t>(quantize_code(x, a.scale));
      }
      *reinterpret_cast<int4*>(dst + c0) = *reinterpret_cast<const int4*>(q);
    }
  }
}

// One thread per group of kVec channels of one output pixel (kVec = 4 when the channel count,
// both strides and both pointers allow 4-byte accesses of codes, else 1). An INT8 output with
// another scale than the input's (YOLOv8n's upsamples) is a function of the input code alone:
// the block tabulates its 255 values once (quantize_code(dequantize_code(q)), the arithmetic of
// the per-element path, so the table is exact) and each element is a shared-memory lookup
// instead of an IEEE division. The first version divided per element and stored byte by byte:
// 99 us for YOLOv8n's second upsample at batch 32 on an H200, against 29 us for lesson 12's FP16
// upsample of twice the bytes.
template <int kVec>
__global__ void int8_pool_kernel(Int8PoolArgs a) {
  const int groups = a.channels / kVec;
  const int total = a.batch * a.out_h * a.out_w * groups;
  const bool int8_out = a.y_type == BufferStorage::int8;
  const bool copy = int8_out && a.y_scale == a.x_scale;
  __shared__ int8_t requant[256];  // requant[q + 128]: the output code of input code q
  if (int8_out && !copy) {         // the same for every thread of the grid: no divergent barrier
    for (int q = static_cast<int>(threadIdx.x) - 128; q < 128; q += blockDim.x)
      requant[q + 128] =
          quantize_code(dequantize_code(static_cast<int8_t>(q), a.x_scale), a.y_scale);
    __syncthreads();
  }
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
    const int c = (i % groups) * kVec;
    const int pix = i / groups;  // (n * out_h + oy) * out_w + ox
    const int ox = pix % a.out_w, t = pix / a.out_w;
    const int oy = t % a.out_h, n = t / a.out_h;
    int best[kVec];
#pragma unroll
    for (int e = 0; e < kVec; ++e) best[e] = -128;  // below every code: padding never wins
    const auto take = [&](int iy, int ix) {
      const int8_t* src =
          a.x + (static_cast<long long>(n * a.in_h + iy) * a.in_w + ix) * a.x_stride + c;
      if constexpr (kVec == 4) {
        const char4 v = *reinterpret_cast<const char4*>(src);
        best[0] = max(best[0], static_cast<int>(v.x));
        best[1] = max(best[1], static_cast<int>(v.y));
        best[2] = max(best[2], static_cast<int>(v.z));
        best[3] = max(best[3], static_cast<int>(v.w));
      } else {
        best[0] = max(best[0], static_cast<int>(*src));
      }
    };
    if (a.upsample) {
      take(oy / 2, ox / 2);
    } else {
      for (int r = 0; r < a.kernel; ++r) {
        const int iy = oy * a.stride - a.pad + r;
        if (iy < 0 || iy >= a.in_h) continue;
        for (int s = 0; s < a.kernel; ++s) {
          const int ix = ox * a.stride - a.pad + s;
          if (ix >= 0 && ix < a.in_w) take(iy, ix);
        }
      }
    }
    const long long dst = static_cast<long long>(pix) * a.y_stride + c;
    if (int8_out) {
      signed char q[kVec];
#pragma unroll
      for (int e = 0; e < kVec; ++e)
        q[e] = static_cast<signed char>(copy ? best[e] : requant[best[e] + 128]);
      if constexpr (kVec == 4)
        *reinterpret_cast<char4*>(static_cast<int8_t*>(a.y) + dst) =
            make_char4(q[0], q[1], q[2], q[3]);
      else
        static_cast<int8_t*>(a.y)[dst] = q[0];
    } else {
#pragma unroll
      for (int e = 0; e < kVec; ++e)
        store_value(a.y, dst + e, a.y_type,
                    dequantize_code(static_cast<int8_t>(best[e]), a.x_scale), a.y_scale);
    }
  }
}

// The E4M3 version: codes are not ordered like their values as bytes (sign and magnitude), so
// each is decoded to the float FakeQuantGraph holds, and the maximum is taken on those floats in
// FakeQuantGraph's order with its rule (replace only if the best so far is below: -0 and +0 are
// equal, the first stays; a NaN never wins). The winning code is kept beside its value: stored
// as it is when the output has the input's scale, since quantising the decoded float again with
// the same scale gives the code back (fake_quant.hpp); a -inf (every tap a NaN code) or a NaN
// (upsample / copy of a NaN code) goes through the quantiser as FakeQuantGraph's reader would.
template <int kVec>
__global__ void fp8_pool_kernel(Fp8PoolArgs a) {
  const int groups = a.channels / kVec;
  const int total = a.batch * a.out_h * a.out_w * groups;
  const bool same_scale = a.y_type == BufferStorage::fp8_e4m3 && a.y_scale == a.x_scale;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
    const int c = (i % groups) * kVec;
    const int pix = i / groups;  // (n * out_h + oy) * out_w + ox
    const int ox = pix % a.out_w, t = pix / a.out_w;
    const int oy = t % a.out_h, n = t / a.out_h;
    float best[kVec];
    uint8_t code[kVec];
#pragma unroll
    for (int e = 0; e < kVec; ++e) best[e] = -INFINITY, code[e] = 0;
    // replace: upsample / copy take their one input whatever it is (a NaN too)
    const auto take = [&](int iy, int ix, bool replace) {
      const uint8_t* src =
          a.x + (static_cast<long long>(n * a.in_h + iy) * a.in_w + ix) * a.x_stride + c;
      uint8_t q[kVec];
      if constexpr (kVec == 4) {
        const uchar4 v = *reinterpret_cast<const uchar4*>(src);
        q[0] = v.x, q[1] = v.y, q[2] = v.z, q[3] = v.w;
      } else {
        q[0] = *src;
      }
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        const float v = dequantize_e4m3(q[e], a.x_scale);
        if (replace || best[e] < v) best[e] = v, code[e] = q[e];
      }
    };
    if (a.upsample) {
      take(oy / 2, ox / 2, true);
    } else if (a.kernel == 1 && a.stride == 1 && a.pad == 0) {
      take(oy, ox, true);  // a copy: FakeQuantGraph reads the one value as it is
    } else {
      for (int r = 0; r < a.kernel; ++r) {
        const int iy = oy * a.stride - a.pad + r;
        if (iy < 0 || iy >= a.in_h) continue;
        for (int s = 0; s < a.kernel; ++s) {
          const int ix = ox * a.stride - a.pad + s;
          if (ix >= 0 && ix < a.in_w) take(iy, ix, false);
        }
      }
    }
    const long long dst = static_cast<long long>(pix) * a.y_stride + c;
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      if (same_scale && best[e] > -INFINITY)  // false for -inf and NaN
        static_cast<uint8_t*>(a.y)[dst + e] = code[e];
      else
        store_value(a.y, dst + e, a.y_type, best[e], a.y_scale);
    }
  }
}

__global__ void reformat_kernel(ReformatArgs a) {
  const int total = static_cast<int>(a.pixels) * a.channels;
  const bool copy_codes =
      (a.x_type == BufferStorage::int8 || a.x_type == BufferStorage::fp8_e4m3) &&
      a.y_type == a.x_type && a.x_scale == a.y_scale;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
    const int p = i / a.channels, c = i - p * a.channels;
    const long long src = static_cast<long long>(p) * a.x_stride + c,
                    dst = static_cast<long long>(p) * a.y_stride + c;
    if (copy_codes) {
      static_cast<uint8_t*>(a.y)[dst] = static_cast<const uint8_t*>(a.x)[src];
    } else {
      store_value(a.y, dst, a.y_type, load_value(a.x, src, a.x_type, a.x_scale), a.y_scale);
    }
  }
}

// Throws if a kernel's 32-bit indices could overflow.
void require_int_indices(long long total, const char* who) {
  if (total > static_cast<long long>(std::numeric_limits<int>::max())) {
    throw std::invalid_argument(std::string(who) + ": " + std::to_string(total) +
                                " elements exceed the kernel's 32-bit indices (2^31 - 1)");
  }
}

constexpr int kThreads = 256;

// Enough blocks for one element per thread, at most 2^20 of them (the grid-stride loop covers
// the rest: a million blocks fill any GPU many times over).
dim3 grid_for(long long total) {
  const long long blocks = (total + kThreads - 1) / kThreads;
  return dim3(static_cast<unsigned>(std::max(1LL, std::min(blocks, 1LL << 20))));
}

}  // namespace

namespace detail {

void launch_quantize_input(const QuantizeInputArgs& a, cudaStream_t stream) {
  const long long pixels = static_cast<long long>(a.batch) * a.h * a.w;
  if (pixels <= 0) return;
  if (a.padded_channels % 16 != 0 || a.channels > a.padded_channels ||
      reinterpret_cast<std::uintptr_t>(a.y) % 16 != 0) {
    throw std::invalid_argument(
        "launch_quantize_input: expected padded_channels a multiple of 16, at least channels, "
        "and y 16-byte aligned (codes are stored 16 at a time)");
  }
  if (a.y_type != BufferStorage::int8 && a.y_type != BufferStorage::fp8_e4m3) {
    throw std::invalid_argument("launch_quantize_input: expected y_type int8 or fp8_e4m3, got " +
                                std::string(to_string(a.y_type)));
  }
  require_int_indices(pixels, "launch_quantize_input");
  if (a.y_type == BufferStorage::fp8_e4m3)
    quantize_input_kernel<true><<<grid_for(pixels), kThreads, 0, stream>>>(a);
  else
    quantize_input_kernel<false><<<grid_for(pixels), kThreads, 0, stream>>>(a);
  CUDA_CHECK_LAUNCH();
}

void launch_int8_pool(const Int8PoolArgs& a, cudaStream_t stream) {
  const long long total = static_cast<long long>(a.batch) * a.out_h * a.out_w * a.channels;
  if (total <= 0) return;
  require_int_indices(total, "launch_int8_pool");
  // Groups of 4 codes when every access of 4 is aligned (the float outputs store element by
  // element either way).
  const bool vec4 = a.channels % 4 == 0 && a.x_stride % 4 == 0 && a.y_stride % 4 == 0 &&
                    reinterpret_cast<std::uintptr_t>(a.x) % 4 == 0 &&
                    reinterpret_cast<std::uintptr_t>(a.y) % 4 == 0;
  if (vec4)
    int8_pool_kernel<4><<<grid_for(total / 4), kThreads, 0, stream>>>(a);
  else
    int8_pool_kernel<1><<<grid_for(total), kThreads, 0, stream>>>(a);
  CUDA_CHECK_LAUNCH();
}

void launch_fp8_pool(const Fp8PoolArgs& a, cudaStream_t stream) {
  const long long total = static_cast<long long>(a.batch) * a.out_h * a.out_w * a.channels;
  if (total <= 0) return;
  require_int_indices(total, "launch_fp8_pool");
  const bool vec4 =
      a.channels % 4 == 0 && a.x_stride % 4 == 0 && reinterpret_cast<std::uintptr_t>(a.x) % 4 == 0;
  if (vec4)
    fp8_pool_kernel<4><<<grid_for(total / 4), kThreads, 0, stream>>>(a);
  else
    fp8_pool_kernel<1><<<grid_for(total), kThreads, 0, stream>>>(a);
  CUDA_CHECK_LAUNCH();
}

void launch_reformat(const ReformatArgs& a, cudaStream_t stream) {
  const long long total = a.pixels * a.channels;
  if (total <= 0) return;
  require_int_indices(total, "launch_reformat");
  reformat_kernel<<<grid_for(total), kThreads, 0, stream>>>(a);
  CUDA_CHECK_LAUNCH();
}

}  // namespace detail
}  // namespace lesson13
