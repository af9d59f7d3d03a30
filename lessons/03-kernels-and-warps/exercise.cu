// Lesson 03 exercises. Fill in the TODOs, then run
//
//   make check LESSON=03
//
// which builds the lesson's tests against THIS file (kernels.cu is compiled with
// LESSON_EXERCISE_BUILD, which leaves out its solutions) and runs them. The tests of exercise K
// carry the tag [exK]; run one exercise alone with
//
//   build/lessons/03-kernels-and-warps/lesson03_exercise_tests "[ex1]"
//
// Each stub's comment is its contract (kernels.cuh declares the functions). How to get there:
// the README's "Exercises" section has folded hints; solutions.cuh has the answers (try first).
// Until you implement them, the functions below throw std::logic_error, so their tests fail.
//
// Helpers you may call, from kernels.cuh: ceil_div, kFullMask, to_u8_saturate,
// validate_sm_limits; CUDA_CHECK and CUDA_CHECK_LAUNCH from common/cuda_check.hpp. kernels.cu's
// require, require_image, image_grid and kImageBlockX/Y are private to it: write your argument
// checks yourself. No test checks the text of an exception in these exercises, only its type.
#include <climits>
#include <stdexcept>

#include "common/cuda_check.hpp"
#include "kernels.cuh"

namespace lesson03 {

// =============================================================================================
// Exercise 1: the 2D index mapping of an image kernel
// =============================================================================================
//
// The inverse of bgr8_to_rgb_planar: RGB float planes -> an 8-bit BGR image.
//
// In:  src, device, 3 planes of height x width floats: plane 0 red, 1 green, 2 blue; pixel
//      (x, y) at index y * width + x of its plane.
// Out: dst, device, height rows dst_pitch_bytes bytes apart: pixel (x, y) is the 3 bytes from
//      dst + y * dst_pitch_bytes + 3 * x, in the order blue, green, red, each
//      to_u8_saturate(its plane's value). The bytes of a row past 3 * width (pitch padding) are
//      left untouched. Enqueued on `stream` (asynchronous); the launch shape is yours.
// Errors: before any launch, std::invalid_argument for a null src or dst, width or height < 1,
//      height > 65535 * 8, or dst_pitch_bytes < 3 * width; CudaError if the launch fails.
// Tests [ex1]: the errors (CPU); 1 x 1, 3 x 5 and 641 x 479, with and without pitch padding,
//      and the round trip BGR -> planar -> BGR (GPU); on a GPU `make check` also runs them under
//      compute-sanitizer memcheck. The values cannot show whether the mapping is coalesced (a
//      warp's 32 lanes reading 32 neighbouring pixels of a row): COURSE_NCU=1 make check
//      LESSON=03 measures that, with Nsight Compute, on a kernel whose name contains
//      rgb_planar_to_bgr8 (name yours so): at most 8 sectors per load request.

// TODO(exercise 1): the kernel (e.g. rgb_planar_to_bgr8_kernel) here.

void rgb_planar_to_bgr8(const float* src, int width, int height, std::uint8_t* dst,
                        std::size_t dst_pitch_bytes, cudaStream_t stream) {
  (void)src, (void)width, (void)height, (void)dst, (void)dst_pitch_bytes, (void)stream;
  throw std::logic_error("TODO(exercise 1): rgb_planar_to_bgr8 is not implemented (exercise.cu)");
}

// =============================================================================================
// Exercise 2: a warp reduction with shuffles
// =============================================================================================
//
// In:  in, n floats on the device, no NaNs.
// Out: out, n floats on the device: out[i] = the maximum of in over the 32-element segment that
//      holds i (elements 32 * (i / 32) .. 32 * (i / 32) + 31 that are < n).
// Required, since it is what the exercise teaches: one thread per element, each segment one
//      warp of the launch, the maximum combined across the warp with __shfl_xor_sync so that
//      EVERY lane ends with it (an all-reduce: a softmax needs the row maximum in every lane).
//      Enqueued on `stream`. n == 0 launches nothing (and accepts null pointers).
// Errors: null in or out with n > 0: std::invalid_argument, before any CUDA call; CudaError if
//      the launch fails.
// Tests [ex2]: the errors (CPU); n = 1, 31, 32, 33, 1000003 (GPU); on a GPU `make check` runs
//      them under compute-sanitizer synccheck too: every lane a full-mask shuffle names must
//      execute it, also in the last, partial warp, even when the values come out right.

// TODO(exercise 2): write the kernel here.

void warp_max_allreduce(const float* in, float* out, std::size_t n, cudaStream_t stream) {
  (void)in, (void)out, (void)n, (void)stream;
  throw std::logic_error("TODO(exercise 2): warp_max_allreduce is not implemented (exercise.cu)");
}

// =============================================================================================
// Exercise 3: occupancy by hand
// =============================================================================================
//
// Predict what cudaOccupancyMaxActiveBlocksPerMultiprocessor answers for a kernel needing `k`,
// launched with block_size threads and dynamic_smem_bytes of dynamic shared memory per block,
// on an SM with the limits `sm`: every field of OccupancyEstimate (kernels.cuh).
//
// The model (NVIDIA's occupancy calculator, cuda_occupancy.h, for sm_75 and newer), which the
// tests compare with:
//  - A block takes ceil(block_size / warp_size) warps; an SM holds max_threads_per_sm /
//    warp_size warps and max_blocks_per_sm blocks.
//  - Registers are given to a warp, regs_per_thread * warp_size rounded up to reg_alloc_unit.
//    The register file is split evenly into sub_partitions parts and each warp lives in one
//    part. A block does not fit when regs_per_thread > 255 or when its registers, counted with
//    its warps rounded up to a multiple of sub_partitions, exceed regs_per_block.
//  - A block's shared memory is static + dynamic + reserved_smem_per_block, rounded up to
//    smem_alloc_unit, out of smem_per_sm. A block does not fit when dynamic_smem_bytes >
//    k.max_dynamic_smem_bytes or the rounded size > smem_per_block_optin +
//    reserved_smem_per_block.
//  - A block does not fit when block_size > sm.max_threads_per_block or (when it is > 0)
//    k.max_threads_per_block.
// Out: by_warps, by_blocks, by_registers, by_shared_memory: the blocks each resource allows (0
//      when a block cannot fit it; INT_MAX for registers when regs_per_thread <= 0 and for
//      shared memory when a block uses none); blocks_per_sm, the minimum; limiter, the first of
//      "warps", "blocks", "registers", "shared memory" whose limit equals it; active_warps =
//      blocks_per_sm x warps per block; occupancy = active_warps / warps per SM.
// Errors: block_size < 1: std::invalid_argument; then validate_sm_limits(sm) (written for you,
//      kernels.cu) throws std::invalid_argument for the units and sizes that would divide by 0.
// Tests [ex3]: the worked H200 examples of the README's section 5 and synthetic Turing, Ampere,
//      Ada and Hopper SMs against cuda_occupancy.h (CPU); every lesson kernel against the
//      runtime's answer (GPU).
OccupancyEstimate occupancy_by_hand(const SmLimits& sm, const KernelResources& k, int block_size,
                                    std::size_t dynamic_smem_bytes) {
  (void)sm, (void)k, (void)block_size, (void)dynamic_smem_bytes;
  throw std::logic_error("TODO(exercise 3): occupancy_by_hand is not implemented (exercise.cu)");
}

}  // namespace lesson03
