// Lesson 10 exercises: the machinery of a tensor-core GEMM, written by you and run by real
// kernels. Replace each TODO with your code, then run
//   make check LESSON=10
// until every test passes. Each stub's comment is its contract; README.md has folded hints,
// solutions.cuh and solutions_sm90.cuh the answers: try first.
//
// Exercises 1 and 2 feed one GEMM (exercise_kernels.cuh, launched by gemm_exercise_mma in
// tensor_gemm.cuh): mma.sync.m16n8k16 fed by ldmatrix, 256 threads per 128x128 block tile of C,
// K tiles of 64, 8 warps of 64x32. Exercise 1 is every shared-memory address it uses; exercise 2
// its K loop when it has 2..4 stages (with 1 stage the kernel runs v3's loop: load, wait,
// multiply). Exercise 3 is the consumer loop of a Hopper GEMM (exercise_kernels_sm90.cuh,
// launched by gemm_exercise_wgmma). The GPU tests check every element of each GEMM against an
// FP64 reference within the bound the lesson derives (tensor_gemm_error_bound), on shapes off the
// tile grid, in FP16 and BF16; on a GPU, `make check` also runs them under compute-sanitizer.
//
// This file is compiled twice: once for your GPU (exercises 1 and 2, and the kernel of
// exercise_kernels.cuh), and once for sm_90a only, by exercise_sm90.cu, with
// LESSON10_EXERCISE_SM90A defined (exercise 3, and the kernel of exercise_kernels_sm90.cuh):
// wgmma exists only in that architecture-specific target. Keep each exercise in its section.
#include "tensor_gemm.cuh"

#ifndef LESSON10_EXERCISE_SM90A
// ================================================================ exercises 1 and 2
#include "mma_sync.cuh"  // cp_async_commit, cp_async_wait<N> (exercise 2)

namespace lesson10 {

// Exercise 1 [ex1]: the shared-memory layout, XOR-swizzled.
//
// The kernel stores its tiles without padding: A's stage is 128 rows of 64 halves, B's 64 rows
// of 128 halves, rows of `row_halves` halves (a multiple of 64: 128 bytes or more), each row cut
// into 16-byte chunks of 8 halves. Return the offset, in halves from the tile's start, at which
// element (row, col) is stored. Requirements (the CPU test [cpu][ex1] checks each for rows of 64,
// 128 and 256 halves and 64 rows; nothing else about the formula is checked):
//  - each 16-byte chunk stays whole and in order: offset(row, col) = offset(row, col - col % 8)
//    + col % 8, and offset(row, col - col % 8) is a multiple of 8;
//  - row `row` is a permutation of its own chunks: its offsets are exactly row * row_halves ..
//    row * row_halves + row_halves - 1;
//  - conflict-free: shared memory has 32 banks of 4 bytes, so a 16-byte chunk at byte address x
//    lies in bank group (x / 16) % 8, and an access of 8 chunks per phase is conflict-free when
//    they lie in 8 different groups. Both access patterns of the kernel must be: ldmatrix reads
//    the same logical chunk of 8 consecutive rows (rows 8q..8q+7), cp.async writes 8 consecutive
//    chunks in row-major order (chunk index row * row_halves / 8 + col / 8 from 8p to 8p + 7).
__host__ __device__ int ex_swizzled_offset(int row, int col, int row_halves) {
  // TODO(exercise 1): every element at the tile's start: wrong numbers.
  (void)row, (void)col, (void)row_halves;
  return 0;
}

// Exercise 1 [ex1]: the address each lane gives ldmatrix.
//
// ldmatrix.sync.aligned.m8n8.x4.shared.b16 loads four 8x8 matrices of halves: lanes 8j..8j+7
// give the shared-memory addresses of the 8 rows of matrix j (row i of matrix j from lane
// 8j + i, 16 bytes each), and each lane receives register j of matrix j as ldmatrix_element
// (tensor_gemm.cuh) says; with .trans, the transpose. mma.sync.m16n8k16 wants its operands in
// the registers mma_a_element and mma_b_element (tensor_gemm.cuh, the PTX ISA's tables) say.
//
// ex_ldmatrix_a_offset: the offset (halves, from A's stage, stored with your ex_swizzled_offset,
// rows of row_halves) that lane `lane` (0..31) passes to ldmatrix.x4 (no .trans) so that its
// registers 0..3 are, in order, a0..a7 of mma_a_element for the 16x16 fragment of A whose
// top-left element is (row0, k0) (row0 a multiple of 16, k0 of 16).
__host__ __device__ int ex_ldmatrix_a_offset(int lane, int row0, int k0, int row_halves) {
  // TODO(exercise 1): every lane reads the tile's first chunk: wrong numbers.
  (void)lane, (void)row0, (void)k0, (void)row_halves;
  return 0;
}
// ex_ldmatrix_b_offset: the same for B's 16 (k) x 16 (n) block at (k0, n0) of B's stage (row k,
// n along the row), read with ldmatrix.x4.trans: registers 0, 1 must be b0..b3 of mma_b_element
// for n columns n0..n0+7, registers 2, 3 for n columns n0+8..n0+15.
// The CPU test [cpu][ex1] composes both with ldmatrix_element for every lane and register and
// compares with mma_a_element / mma_b_element; it also checks each phase of 8 lanes is
// conflict-free. The GPU tests [gpu][ex1] run the kernel with 1 stage on your addresses.
__host__ __device__ int ex_ldmatrix_b_offset(int lane, int k0, int n0, int row_halves) {
  // TODO(exercise 1)
  (void)lane, (void)k0, (void)n0, (void)row_halves;
  return 0;
}

// Exercise 2 [ex2]: the K loop of a kStages-deep cp.async ring (v4's idea), for kStages 2..4.
//
// The kernel has kStages shared-memory stages and `tiles` K tiles (tiles >= 1). It gives you:
//  - load_tile(t, s): issues this thread's cp.async copies of K tile t (0..tiles-1) into stage
//    s (0..kStages-1). It does not commit them.
//  - multiply(s): this warp's ldmatrix + mma on the tile in stage s (reads it, all of it).
// and from mma_sync.cuh: cp_async_commit() (this thread's copies since the last commit become one
// group) and cp_async_wait<N>() (returns when at most N of this thread's committed groups are
// still in flight; N a compile-time constant). Every thread of the block calls your function.
// It must: multiply every tile exactly once (in any order), each after every thread's copies of
// it have landed; never let a copy into a stage start while a warp may still read that stage;
// keep at most kStages tiles in shared memory (the stages), loading ahead so that copies overlap
// the mma; and return with no copy in flight. A stage or tile index out of range is reported by
// gemm_exercise_mma (std::runtime_error) and not used.
// Tests [gpu][ex2]: the kernel with 2, 3 and 4 stages (4 where the GPU has 128 KiB per block)
// on K from one tile to 17, every element against FP64; on a GPU `make check` also runs them
// under racecheck (a stage overwritten while read) and synccheck. The kernel reads its fragments
// through your exercise 1 functions: make exercise 1 pass first.
template <int kStages, class Load, class Multiply>
__device__ __forceinline__ void ex_cp_async_ring(int tiles, Load&& load_tile, Multiply&& multiply) {
  // TODO(exercise 2): nothing loaded, nothing multiplied: C = beta * C (wrong numbers).
  (void)tiles, (void)load_tile, (void)multiply;
}

}  // namespace lesson10

#include "exercise_kernels.cuh"  // the kernel that calls the functions above (nothing to edit)

#else
// ================================================================ exercise 3 (sm_90a only)
#include "wgmma.cuh"  // wgmma_fence, wgmma_commit, wgmma_wait<N>, pin_registers

namespace lesson10 {

// Exercise 3 [ex3] (Hopper): a consumer warp group's K loop in v6's kernel.
//
// The kernel (exercise_kernels_sm90.cuh) computes a 128x256 tile of C per block of 3 warp
// groups. Warp group 0's producer thread fills a ring of 4 stages with TMA: K tile kt (0..
// ring.k_tiles-1) goes into stage ring.stage(kt), and its arrival completes phase ring.phase(kt)
// of the stage's "full" mbarrier; before refilling a stage it waits on the stage's "empty"
// mbarrier, which completes when both consumer warp groups have arrived on it once. Warp groups
// 1 and 2 each call this function with all their 128 threads, own 64 rows of the tile, and
// accumulate into d, 128 FP32 registers per thread, zeroed; the kernel writes d out after it.
// `ring` gives you:
//  - ring.k_tiles, ring.stage(kt), ring.phase(kt);
//  - ring.full(s), ring.empty(s): the stage's two barriers;
//  - ring.wait(bar, phase): waits until `phase` of mbarrier `bar` has completed (it gives up
//    after 2 s, and gemm_exercise_wgmma then throws);
//  - ring.arrive(bar): one arrival on `bar` by the calling thread;
//  - ring.mma(s, d): issues the 4 wgmma.mma_async.m64n256k16 of stage s (K = 64), reading A and
//    B from shared memory and accumulating into d, asynchronously: no fence, no commit, no wait.
// and from wgmma.cuh, to be called by all 128 threads: wgmma_fence() (before wgmma reads
// registers or shared memory that other instructions wrote), wgmma_commit() (the wgmma issued
// since the last commit become one group), wgmma_wait<N>() (returns when at most N groups are
// pending; N a compile-time constant), and pin_registers(d) (stops the compiler from moving
// reads or writes of d across it: the hardware writes d until the wait, which the compiler does
// not know).
// It must: multiply every K tile once, each only after its stage has filled; release every
// stage (one arrival per warp group, after the last wgmma reading it has completed) so that the
// producer can refill it; and return with every wgmma complete and d pinned. Keeping one group
// in flight while the next stage's wgmma issue is what v6 does (and v5 does not): both pass.
// Tests [gpu][ex3] (compute capability 9.0 only): every element against FP64 on shapes off the
// tile grid, K from one tile to 16 (the ring wraps 4 times), FP16 and BF16.
template <class Ring>
__device__ __forceinline__ void ex_wgmma_consumer(const Ring& ring, float (&d)[128]) {
  // TODO(exercise 3): nothing multiplied, nothing released: with more than 4 K tiles the
  // producer waits for a stage forever (gemm_exercise_wgmma gives up after 2 s and throws).
  (void)ring, (void)d;
}

}  // namespace lesson10

#include "exercise_kernels_sm90.cuh"  // the kernel that calls it (nothing to edit)

#endif  // LESSON10_EXERCISE_SM90A
