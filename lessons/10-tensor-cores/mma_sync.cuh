// Lesson 10: the PTX behind v2..v4 and the exercise kernels (tensor_gemm.cu, exercise_kernels.cuh):
// cp.async, ldmatrix and mma.sync.m16n8k16, one inline wrapper each. They are declared for every
// architecture, so that code which names them compiles everywhere (exercise 2's ring is a
// template in exercise.cu); their bodies exist only for compute_80 and newer, and the kernels
// that call them are compiled out below that (their launchers refuse such a GPU).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace lesson10 {

__device__ __forceinline__ unsigned smem_u32(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// cp.async.commit_group: the copies this thread issued since the last commit form one group.
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
// cp.async.wait_group kPending: returns when at most kPending of this thread's committed groups
// are still in flight (the older ones have landed in shared memory). Only this thread's copies:
// other threads' need a barrier as well.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
#endif
}

// 16 bytes global -> shared, bypassing L1 (.cg); src_bytes < 16 zero-fills the rest (0: all
// zeros, nothing read). `smem` is an address in the shared window (32 bits): the tuned v4
// computes its addresses once, as integers, outside the K loop.
__device__ __forceinline__ void cp_async_16(unsigned smem, const void* gmem, int src_bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem),
               "r"(src_bytes));
#endif
}
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned smem) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem));
#endif
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], unsigned smem) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem));
#endif
}

// The same from a generic pointer into shared memory (v2..v4's template, the exercise kernels).
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, int src_bytes) {
  cp_async_16(smem_u32(smem), gmem, src_bytes);
}
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* smem) {
  ldmatrix_x4(r, smem_u32(smem));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const void* smem) {
  ldmatrix_x4_trans(r, smem_u32(smem));
}

template <int MI, int NJ>
__device__ __forceinline__ void zero_accumulators(float (&acc)[MI][NJ][4]) {
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NJ; ++j)
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.0f;
}

// D = A * B + D, m16n8k16, FP32 accumulators (fragment layouts: mma_*_element in
// tensor_gemm.cuh).
template <class In>
__device__ __forceinline__ void mma_16816(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                          unsigned b1);
template <>
__device__ __forceinline__ void mma_16816<__half>(float (&d)[4], const unsigned (&a)[4],
                                                  unsigned b0, unsigned b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}
template <>
__device__ __forceinline__ void mma_16816<__nv_bfloat16>(float (&d)[4], const unsigned (&a)[4],
                                                         unsigned b0, unsigned b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

}  // namespace lesson10
