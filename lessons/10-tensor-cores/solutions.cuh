// Lesson 10: the solutions of exercises 1 and 2 (exercise 3, Hopper: solutions_sm90.cu, and the
// course's own consumer loop in solutions_sm90.cuh). Read them after you have tried.
//
// Not compiled on its own: tensor_gemm.cu includes this file at its end, so it shares that
// translation unit (its kernels call the first part). The first part is the course's own code,
// compiled in both builds: the lane maps and the swizzle that v2..v4 use (declared, with their
// contracts, in tensor_gemm.cuh) and v4's cp.async ring (declared in tensor_gemm.cu). The
// second part, the ex_ functions, is compiled in the lesson build only: the exercise build
// (make check LESSON=10) defines LESSON_EXERCISE_BUILD, which leaves it out, and exercise.cu
// supplies the same functions instead. Either file then includes exercise_kernels.cuh, the
// kernel that calls them.
#pragma once

namespace lesson10 {

// ---------------------------------------------------------------- both builds: v2..v4's

// ldmatrix.x4 hands register j to lanes from the 8 row addresses of lanes 8j..8j+7. A's
// fragment registers a0..a3 are its quadrants (rows 0-7, cols 0-7), (8-15, 0-7), (0-7, 8-15),
// (8-15, 8-15): so lanes 0-15 point down column 0 and lanes 16-31 down column 8, each at row
// lane % 16.
__host__ __device__ RowCol ldmatrix_a_address(int lane) {
  return {lane & 15, (lane >> 4) * 8};
}
// With .trans, matrix j delivers its columns: registers 0, 1 must be b0..b3 of n columns 0..7
// (k rows 0-7, then 8-15), registers 2, 3 the same for n columns 8..15. The same map.
__host__ __device__ RowCol ldmatrix_b_trans_address(int lane) {
  return {lane & 15, (lane >> 4) * 8};
}

// Rows of 8 or more chunks: one row fills the 8 bank groups, so XOR the chunk index with
// row % 8: 8 consecutive rows send one logical chunk to 8 different groups (and 8 consecutive
// chunks of a row are 8 different groups anyway). Rows of 4 chunks: two rows share a 128-byte
// line, so the rows come in pairs and the XOR takes (row / 2) % 4.
__host__ __device__ int swizzle_chunk(int row, int chunk, int chunks_per_row) {
  const int rows_per_line = chunks_per_row >= 8 ? 1 : 8 / chunks_per_row;
  const int width = chunks_per_row >= 8 ? 8 : chunks_per_row;
  return chunk ^ ((row / rows_per_line) & (width - 1));
}
__host__ __device__ int swizzled_offset(int row, int col, int row_halves) {
  const int cpr = row_halves / 8;
  return row * row_halves + swizzle_chunk(row, col / 8, cpr) * 8 + col % 8;
}

namespace {
// v4's ring (exercise 2's answer; the contract is in tensor_gemm.cu, above mma_kernel). The
// prologue issues tiles 0..kStages-2, one commit group each; iteration t then waits until at most
// kStages-2 groups are pending, i.e. tile t's group has landed for this thread's copies, and the
// barrier makes every thread's copies visible and closes iteration t-1, whose stage (tile t-1's)
// is the one refilled next, with tile t + kStages - 1. A group is committed even when there is
// nothing left to load, so that "kStages-2 pending" keeps meaning "tile t has landed".
template <int kStages, class Load, class Multiply>
__device__ __forceinline__ void cp_async_ring(int tiles, Load&& load_tile, Multiply&& multiply) {
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < tiles) load_tile(s, pipeline_stage(s, kStages));
    cp_async_commit();  // an empty group past the last tile keeps the group count regular
  }
  for (int t = 0; t < tiles; ++t) {
    cp_async_wait<kStages - 2>();  // tile t has landed (for this thread's copies)
    __syncthreads();               // ... for every thread's, and tile t-1 is consumed
    const int next = pipeline_tile_issued(t, kStages, tiles);
    if (next >= 0) load_tile(next, pipeline_stage(next, kStages));
    cp_async_commit();
    multiply(pipeline_stage(t, kStages));
  }
  cp_async_wait<0>();  // only empty groups are left; nothing in flight when the block exits
}
}  // namespace

}  // namespace lesson10

#ifndef LESSON_EXERCISE_BUILD

namespace lesson10 {

// ---------------------------------------------------------------- lesson build: the exercises

// Exercise 1. A row of 64 halves is exactly one 128-byte line of banks, and wider rows are whole
// lines, so XOR-ing the chunk index with row % 8 sends the same logical chunk of 8 consecutive
// rows to 8 different bank groups. XOR with a fixed value permutes the chunks of a row (its low
// 3 bits only, so a row of 16 chunks stays within itself), and the 8 consecutive chunks a
// cp.async phase writes are one aligned group of 8: 8 different groups too. Chunk-internal
// order is kept: ldmatrix and cp.async move whole 16-byte chunks. It is TMA's
// CU_TENSOR_MAP_SWIZZLE_128B pattern.
__host__ __device__ int ex_swizzled_offset(int row, int col, int row_halves) {
  return row * row_halves + (((col / 8) ^ (row % 8)) * 8) + col % 8;
}

// ldmatrix.x4: lanes 8j..8j+7 give the 8 row addresses of matrix j, which lands in register j.
// mma's A registers a0..a3 are the quadrants (rows 0-7, k 0-7), (8-15, 0-7), (0-7, 8-15),
// (8-15, 8-15) of the 16x16 fragment: lane l points at row l % 16 of column block l / 16.
__host__ __device__ int ex_ldmatrix_a_offset(int lane, int row0, int k0, int row_halves) {
  return ex_swizzled_offset(row0 + lane % 16, k0 + 8 * (lane / 16), row_halves);
}
// B, 16 (k) x 16 (n), read with .trans: each matrix delivers its transpose, so matrix j is k rows
// 8 (j % 2).. and n columns 8 (j / 2)..: registers 0, 1 are b0..b3 of the first 8 columns,
// registers 2, 3 of the next 8. Lane l points at k row l % 16 of column block l / 16: the same
// map as A's.
__host__ __device__ int ex_ldmatrix_b_offset(int lane, int k0, int n0, int row_halves) {
  return ex_swizzled_offset(k0 + lane % 16, n0 + 8 * (lane / 16), row_halves);
}

// Exercise 2. The prologue fills stages 0..kStages-2 with tiles 0..kStages-2, one commit group
// per tile (and one per missing tile, empty, so that the count stays regular). Iteration t:
// cp.async.wait_group kStages-2 leaves only the groups of tiles t+1..t+kStages-2 pending, so
// tile t's copies by this thread have landed; the barrier then makes every thread's visible, and
// it also means every warp has finished multiplying tile t-1, whose stage (t - 1) % kStages =
// (t + kStages - 1) % kStages is the one tile t + kStages - 1 is now issued into. Without the
// barrier a fast warp would overwrite a stage a slow warp still reads, and read a tile other
// threads' copies have not filled; without the wait, read a tile still in flight. The last wait
// leaves nothing in flight when the block exits.
template <int kStages, class Load, class Multiply>
__device__ __forceinline__ void ex_cp_async_ring(int tiles, Load&& load_tile, Multiply&& multiply) {
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < tiles) load_tile(s, s);
    cp_async_commit();
  }
  for (int t = 0; t < tiles; ++t) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    const int next = t + kStages - 1;
    if (next < tiles) load_tile(next, next % kStages);
    cp_async_commit();
    multiply(t % kStages);
  }
  cp_async_wait<0>();
}

}  // namespace lesson10

#include "exercise_kernels.cuh"

#endif  // LESSON_EXERCISE_BUILD
