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

// C[m][n] = act(alpha * acc + beta * C[m][n] + bias[n]); beta == 0 does not read C.
template <class Out>
__device__ __forceinline__ void store_one(const Epilogue& e, Out* C, int N, int m, int n,
                                          float acc) {
  Out* p = C + static_cast<std::size_t>(m) * N + n;
  float v = e.alpha * acc;
  if (e.beta != 0.0f) v = fmaf(e.beta, to_float(*p), v);
  if (e.bias != nullptr) v += e.bias[n];
  *p = from_float<Out>(activate(v, e.act));
}

}  // namespace lesson10::detail
