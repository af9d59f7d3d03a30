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
// The declarations, with the exact contracts the tests check, are in kernels.cuh. Until you
// implement them, the functions below throw std::logic_error, so their tests fail.
//
// Helpers you may call, from kernels.cuh: ceil_div, kFullMask, to_u8_saturate,
// validate_sm_limits; CUDA_CHECK and CUDA_CHECK_LAUNCH from common/cuda_check.hpp. kernels.cu's
// require, require_image, image_grid and kImageBlockX/Y are private to it: write the few checks
// the hints list yourself.
#include <climits>
#include <stdexcept>

#include "common/cuda_check.hpp"
#include "kernels.cuh"

namespace lesson03 {

// =============================================================================================
// Exercise 1: the 2D index mapping of an image kernel
// =============================================================================================
//
// Write the inverse of bgr8_to_rgb_planar: 3 x H x W float RGB planes -> H x W x 3 bytes, BGR,
// rows dst_pitch_bytes apart. Each output byte is to_u8_saturate(value) (kernels.cuh).
//
// Hints
//  - Launch a 2D grid: dim3 block(32, 8); dim3 grid(ceil_div(width, 32), ceil_div(height, 8)).
//    threadIdx.x must run along a row (x), so that the 32 lanes of a warp are 32 neighbouring
//    pixels: their reads of each plane are then 128 contiguous bytes.
//  - x = blockIdx.x * blockDim.x + threadIdx.x, y likewise with .y. The grid is rounded up to whole
//    blocks: return early when x >= width or y >= height (try 3 x 5 and 641 x 479).
//  - Plane c starts at src + c * width * height; pixel (x, y) is at y * width + x inside a plane.
//    The output row y starts at dst + y * dst_pitch_bytes (the pitch is in BYTES and may be larger
//    than 3 * width); pixel x is 3 bytes wide. Compute offsets in std::size_t: 641 * 479 * 3 fits
//    in an int, a 4K batch does not.
//  - B G R order in memory: byte 0 is blue, i.e. plane 2.
//  - Validate like bgr8_to_rgb_planar does (std::invalid_argument with a message saying what was
//    expected) BEFORE launching: null pointers, width or height < 1, height > 65535 * 8,
//    dst_pitch_bytes < 3 * width.
//  - After the launch: CUDA_CHECK_LAUNCH(); (common/cuda_check.hpp).
//  - Coalescing is not visible to the tests (the values are the same either way), except with
//    COURSE_NCU=1 make check LESSON=03 where Nsight Compute may read the GPU's counters; name
//    your kernel rgb_planar_to_bgr8_kernel so that check finds it. See the README.

// TODO(exercise 1): write the kernel here, e.g.
// __global__ void rgb_planar_to_bgr8_kernel(const float* src, int width, int height,
//                                           std::uint8_t* dst, std::size_t dst_pitch) { ... }

void rgb_planar_to_bgr8(const float* src, int width, int height, std::uint8_t* dst,
                        std::size_t dst_pitch_bytes, cudaStream_t stream) {
  (void)src, (void)width, (void)height, (void)dst, (void)dst_pitch_bytes, (void)stream;
  throw std::logic_error("TODO(exercise 1): rgb_planar_to_bgr8 is not implemented (exercise.cu)");
}

// =============================================================================================
// Exercise 2: a warp reduction with shuffles
// =============================================================================================
//
// out[i] = max of in over the 32-element segment that holds i, and EVERY lane of the warp ends
// with that maximum (an all-reduce: a softmax needs the row max in every lane).
//
// Hints
//  - One thread per element, blocks of 256 (a multiple of 32, so warp w of the grid holds
//    elements 32 w .. 32 w + 31).
//  - __shfl_xor_sync(0xffffffff, v, m) returns v of lane (lane ^ m). Steps m = 16, 8, 4, 2, 1 with
//    v = fmaxf(v, __shfl_xor_sync(...)) leave the maximum in all 32 lanes (a butterfly), unlike
//    __shfl_down_sync, which leaves the total only in lane 0 (see warp_reduce_sum in kernels.cu).
//  - The full mask promises that all 32 lanes call the shuffle. In the last, partial warp, lanes
//    with i >= n must NOT return before it: let them take part with -INFINITY (the identity of
//    max) and skip only the store. A warp entirely past n may return at once.
//  - n == 0: launch nothing (a grid of 0 blocks is an invalid configuration). Null pointers with
//    n > 0: std::invalid_argument.

// TODO(exercise 2): write the kernel here.

void warp_max_allreduce(const float* in, float* out, std::size_t n, cudaStream_t stream) {
  (void)in, (void)out, (void)n, (void)stream;
  throw std::logic_error("TODO(exercise 2): warp_max_allreduce is not implemented (exercise.cu)");
}

// =============================================================================================
// Exercise 3: occupancy by hand
// =============================================================================================
//
// Predict what cudaOccupancyMaxActiveBlocksPerMultiprocessor answers, from the SM's limits and
// the kernel's resources. Fill every field of OccupancyEstimate (see kernels.cuh).
//
// Hints (the README walks through the numbers for an H200)
//  - warps_per_block = ceil(block_size / warp_size): a block of 48 threads takes 2 warp slots.
//  - by_warps = (max_threads_per_sm / warp_size) / warps_per_block, or 0 if block_size exceeds
//    sm.max_threads_per_block or k.max_threads_per_block.
//  - by_registers: a warp gets round_up(regs_per_thread * 32, reg_alloc_unit) registers. Each of
//    the sm.sub_partitions sub-partitions has regs_per_sm / sub_partitions registers and holds
//    whole warps: warps per SM = sub_partitions * floor((regs_per_sm / sub_partitions) /
//    regs_per_warp); by_registers = that / warps_per_block. It is 0 if one block does not fit:
//    regs_per_warp * round_up(warps_per_block, sub_partitions) > regs_per_block, or
//    regs_per_thread > 255. A kernel using no registers: INT_MAX.
//  - by_shared_memory: per block, static + dynamic + sm.reserved_smem_per_block bytes, rounded up
//    to sm.smem_alloc_unit; by_shared_memory = smem_per_sm / that (INT_MAX if it is 0). It is 0 if
//    dynamic_smem_bytes > k.max_dynamic_smem_bytes or the rounded size exceeds
//    smem_per_block_optin + reserved_smem_per_block.
//  - by_blocks = max_blocks_per_sm. blocks_per_sm = min of the four; limiter = the first of
//    "warps", "blocks", "registers", "shared memory" equal to it; active_warps and occupancy
//    follow.
//  - block_size < 1: std::invalid_argument. Then call validate_sm_limits(sm) (already written for
//    you, in kernels.cu): it rejects the zero units and sizes that would divide by zero.

OccupancyEstimate occupancy_by_hand(const SmLimits& sm, const KernelResources& k, int block_size,
                                    std::size_t dynamic_smem_bytes) {
  (void)sm, (void)k, (void)block_size, (void)dynamic_smem_bytes;
  throw std::logic_error("TODO(exercise 3): occupancy_by_hand is not implemented (exercise.cu)");
}

}  // namespace lesson03
