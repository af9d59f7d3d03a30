// Lesson 12: the epilogue as a kernel of its own, for the cuDNN tactic.
//
// cuDNN's convolution (cudnnConvolutionForward) writes the raw convolution; its legacy API cannot
// fuse SiLU or a residual add into it. So the cuDNN tactic is two launches: cuDNN's convolution,
// then this kernel in place over its output: y = act(y + bias) (+ res). The builder times the
// pair, which is the honest price of a library convolution without the fused epilogue.
// Included at the end of engine_kernels.cu (the same fatbinary); EpilogueArgs is in
// engine_kernels.cuh.
#pragma once

#include <cuda_fp16.h>

namespace lesson12 {

template <class T>
__device__ inline float epilogue_load(const T* p);
template <>
__device__ inline float epilogue_load<float>(const float* p) {
  return *p;
}
template <>
__device__ inline float epilogue_load<__half>(const __half* p) {
  return __half2float(*p);
}
__device__ inline void epilogue_store(float* p, float v) {
  *p = v;
}
__device__ inline void epilogue_store(__half* p, float v) {
  *p = __float2half_rn(v);
}

// One thread per element of the [pixels, channels] view (row stride y_stride / res_stride).
template <class T>
__device__ void bias_act_inplace(const EpilogueArgs& a) {
  const long long total = static_cast<long long>(a.pixels) * a.channels;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long pixel = i / a.channels;
    const int c = static_cast<int>(i - pixel * a.channels);
    T* y = static_cast<T*>(a.y) + pixel * a.y_stride + c;
    float v = epilogue_load(y) + a.bias[c];
    if (a.act == 1) v = v / (1.0f + __expf(-v));
    if (a.res != nullptr)
      v += epilogue_load(static_cast<const T*>(a.res) + pixel * a.res_stride + c);
    epilogue_store(y, v);
  }
}

}  // namespace lesson12

extern "C" __global__ void bias_act_nhwc_f32(lesson12::EpilogueArgs a) {
  lesson12::bias_act_inplace<float>(a);
}
extern "C" __global__ void bias_act_nhwc_f16(lesson12::EpilogueArgs a) {
  lesson12::bias_act_inplace<__half>(a);
}
