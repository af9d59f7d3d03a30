// Lesson 12: the PTX wrappers of the implicit-GEMM convolutions, one inline function per
// instruction: the engine's FP16 tensor-core kernels (engine_kernels.cu) and lesson 13's INT8 one
// (int8_conv_gpu.cu) stage their tiles with cp.async and read them with ldmatrix through these.
// Each file keeps its own mma.sync wrapper (mma_16816 here, FP16; mma_s8 in lesson 13, INT8).
//
//   smem_u32         __cvta_generic_to_shared (CUDA C++ Programming Guide, "Address Space
//                    Conversion Functions"; PTX cvta.to.shared): a generic pointer into shared
//                    memory -> its 32-bit address in the shared window, the operand cp.async and
//                    ldmatrix take
//   cp_async_commit  cp.async.commit_group (PTX ISA, "Data Movement and Conversion Instructions:
//                    cp.async.commit_group"): the copies this thread issued since the last commit
//                    form one group
//   cp_async_wait<N> cp.async.wait_group N (PTX ISA, "cp.async.wait_group / cp.async.wait_all"):
//                    returns when at most N of this thread's committed groups are still in flight;
//                    other threads' copies need a barrier as well
//   cp_async_ca16    cp.async.ca.shared.global, 16 bytes (PTX ISA, "Data Movement and Conversion
//   cp_async_cg16    Instructions: cp.async"): global -> shared without passing through
//                    registers, through L1 (.ca) or around it (.cg; see each below)
//   ldmatrix_x4      ldmatrix.sync.aligned.m8n8.x4.shared.b16 (PTX ISA, "Warp-level matrix load
//                    instruction: ldmatrix"): four 8x8 matrices of 16-bit elements (or of byte
//                    pairs) from shared memory into the warp's mma fragments; lane l gives the
//                    address of row l % 8 of matrix l / 8
//
// cp.async needs compute capability 8.0 (ldmatrix 7.5): the wrappers exist only in device code
// compiled for compute_80 and newer, where the kernels that call them are compiled as well (below
// that those kernels are traps, and nothing names these). Device code only; no header includes
// it. In namespace lesson12: engine_kernels.cu's kernels (lesson12::{anon}) find them unqualified,
// int8_conv_gpu.cu names them with using-declarations.
#pragma once

namespace lesson12 {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800

__device__ __forceinline__ unsigned smem_u32(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}
// 16 bytes global -> shared through L1 (.ca: a 3x3 convolution reads each input pixel for up to
// nine output pixels of the same block, so L1 hits are worth keeping): the activations.
// src_bytes 0 writes 16 zero bytes and reads nothing (padding taps, rows past M, channels past
// out_c, K past the end).
__device__ __forceinline__ void cp_async_ca16(unsigned smem, const void* gmem, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem),
               "r"(src_bytes));
}
// The weights: every block of the grid reads them, so they live in L2; .cg skips L1. src_bytes
// as above.
__device__ __forceinline__ void cp_async_cg16(unsigned smem, const void* gmem, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem),
               "r"(src_bytes));
}
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem));
}

#endif  // __CUDA_ARCH__ >= 800

}  // namespace lesson12
