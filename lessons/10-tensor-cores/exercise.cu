// Lesson 10 exercises: the index arithmetic every tensor-core kernel rests on, all testable on
// the CPU. Replace each TODO with your code, then run
//   make check LESSON=10
// until every test passes. What each function must return is in tensor_gemm.cuh (search for
// "Exercise"); README.md has hints. Do not copy the header's mma_c_element, swizzle_chunk or
// pipeline_* (the point is to derive them): the tests compare against the PTX ISA's tables and
// properties (bijection, bank groups, no stage read while written), not against those.
#include <stdexcept>

#include "tensor_gemm.cuh"

namespace lesson10 {

// Exercise 1: row and column of accumulator element i (0..3) of `lane` in mma.m16n8k16's C/D.
// Hint: PTX ISA, "Matrix Fragments for mma.m16n8k16", figure of the C/D layout; groupID, and
// threadID_in_group.
RowCol ex_mma_c_element(int lane, int i) {
  (void)lane, (void)i;
  throw std::logic_error("TODO(exercise 1): ex_mma_c_element");
}

// Exercise 2: the XOR swizzle for rows of 8 16-byte chunks (64 halves = 128 bytes).
// Hint: which 3 bits of the address choose the bank group, and what must differ between the
// 8 rows that one ldmatrix phase reads?
int ex_swizzle_chunk_8(int row, int chunk) {
  (void)row, (void)chunk;
  throw std::logic_error("TODO(exercise 2): ex_swizzle_chunk_8");
}

// Exercise 3: the stage of a K tile in a `stages`-deep ring, and the tile issued at iteration t.
// Hint: how many tiles does the prologue issue before iteration 0?
int ex_pipeline_stage(int tile, int stages) {
  (void)tile, (void)stages;
  throw std::logic_error("TODO(exercise 3): ex_pipeline_stage");
}
int ex_pipeline_tile_issued(int iteration, int stages, int tiles) {
  (void)iteration, (void)stages, (void)tiles;
  throw std::logic_error("TODO(exercise 3): ex_pipeline_tile_issued");
}

}  // namespace lesson10
