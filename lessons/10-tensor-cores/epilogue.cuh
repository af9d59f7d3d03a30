// Lesson 10: what every kernel's write-out shares (tensor_gemm.cu and tensor_gemm_sm90.cu):
// conversions between float and the storage types, and one element of the epilogue.
#pragma once

#include <cstddef>

#include "tensor_gemm.cuh"

namespace lesson10::detail {

__device__ __forceinline__ float to_float(float x) {
  return x;
}
__device__ __forceinline__ float to_float(__half x) {
  return __half2float(x);
}
__device__ __forceinline__ float to_float(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
template <class T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __half from_float<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

struct Epilogue {
  float alpha, beta;
  const float* bias;  // may be null
  Activation act;
};

// act(alpha * acc + beta * c + bias[n]) for the element at p (column n); beta == 0 does not
// read it.
template <class Out>
__device__ __forceinline__ float epilogue_value(const Epilogue& e, const Out* p, int n, float acc) {
  float v = e.alpha * acc;
  if (e.beta != 0.0f) v = fmaf(e.beta, to_float(*p), v);
  if (e.bias != nullptr) v += e.bias[n];
  return activate(v, e.act);
}

// C[m][n] = act(alpha * acc + beta * C[m][n] + bias[n]).
template <class Out>
__device__ __forceinline__ void store_one(const Epilogue& e, Out* C, int N, int m, int n,
                                          float acc) {
  Out* p = C + static_cast<std::size_t>(m) * N + n;
  *p = from_float<Out>(epilogue_value(e, p, n, acc));
}

// Two adjacent elements (n, n + 1) in one 4-byte (FP16/BF16) or 8-byte (FP32) store: an
// accumulator fragment holds column pairs, and one wide store moves the same bytes in half the
// store instructions. The caller guarantees n + 1 < N and C + m * N + n aligned to two elements.
template <class Out>
struct Pair;
template <>
struct Pair<float> {
  using type = float2;
};
template <>
struct Pair<__half> {
  using type = __half2;
};
template <>
struct Pair<__nv_bfloat16> {
  using type = __nv_bfloat162;
};
template <class Out>
__device__ __forceinline__ void store_two(const Epilogue& e, Out* C, int N, int m, int n,
                                          float acc0, float acc1) {
  Out* p = C + static_cast<std::size_t>(m) * N + n;
  typename Pair<Out>::type v;
  v.x = from_float<Out>(epilogue_value(e, p, n, acc0));
  v.y = from_float<Out>(epilogue_value(e, p + 1, n + 1, acc1));
  *reinterpret_cast<typename Pair<Out>::type*>(p) = v;
}

// Four adjacent elements (n .. n + 3) in one 16-byte (FP32) or 8-byte (FP16/BF16) store: the
// write-out of a tile staged through shared memory, where each thread owns 4 consecutive
// columns and a warp writes 128 contiguous elements. The caller guarantees n + 3 < N and
// C + m * N + n aligned to four elements.
template <class Out>
__device__ __forceinline__ void store_four(const Epilogue& e, Out* C, int N, int m, int n,
                                           float4 acc) {
  Out* p = C + static_cast<std::size_t>(m) * N + n;
  const float v0 = epilogue_value(e, p, n, acc.x), v1 = epilogue_value(e, p + 1, n + 1, acc.y);
  const float v2 = epilogue_value(e, p + 2, n + 2, acc.z),
              v3 = epilogue_value(e, p + 3, n + 3, acc.w);
  if constexpr (sizeof(Out) == 4) {
    *reinterpret_cast<float4*>(p) = make_float4(v0, v1, v2, v3);
  } else {
    typename Pair<Out>::type lo, hi;
    lo.x = from_float<Out>(v0);
    lo.y = from_float<Out>(v1);
    hi.x = from_float<Out>(v2);
    hi.y = from_float<Out>(v3);
    uint2 bits;
    bits.x = *reinterpret_cast<const unsigned*>(&lo);
    bits.y = *reinterpret_cast<const unsigned*>(&hi);
    *reinterpret_cast<uint2*>(p) = bits;
  }
}

// Four adjacent outputs C[m][n .. n + 3] (n % 4 == 0, N % 8 == 0: all inside C when n is): one
// vector store (store_four) where C is aligned for it (`vector`), else one at a time. The
// arithmetic is store_one's either way, so the bits do not depend on the path.
template <class Out>
__device__ __forceinline__ void store_quad(const Epilogue& e, Out* C, int N, int m, int n, float4 v,
                                           bool vector) {
  if (vector) {
    store_four(e, C, N, m, n, v);
  } else {
    store_one(e, C, N, m, n, v.x);
    store_one(e, C, N, m, n + 1, v.y);
    store_one(e, C, N, m, n + 2, v.z);
    store_one(e, C, N, m, n + 3, v.w);
  }
}

}  // namespace lesson10::detail
