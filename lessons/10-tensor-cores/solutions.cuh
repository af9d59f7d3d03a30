// Lesson 10: the exercise solutions. Read them after you have tried.
//
// Not compiled on its own: tensor_gemm.cu includes this file at its end, in the lesson build
// only. The exercise build (make check LESSON=10) defines LESSON_EXERCISE_BUILD, which leaves it
// out, and exercise.cu supplies the same functions instead.
#pragma once

namespace lesson10 {

// Exercise 1. Accumulator register i of lane = 4 * group + t: registers 0,1 are row `group`,
// registers 2,3 row `group + 8`; within a pair, columns 2t and 2t + 1.
RowCol ex_mma_c_element(int lane, int i) {
  const int group = lane / 4, t = lane % 4;
  return {group + (i / 2) * 8, 2 * t + i % 2};
}

// Exercise 2. A row of 64 halves is exactly one 128-byte line of banks, so XOR-ing the chunk
// index with row % 8 sends the same logical chunk of 8 consecutive rows to 8 different bank
// groups, and XOR with a fixed value permutes the 8 chunks of a row.
int ex_swizzle_chunk_8(int row, int chunk) {
  return chunk ^ (row % 8);
}

// Exercise 3. The ring has `stages` buffers; the prologue fills stages - 1 of them, so at
// iteration t the tile stages - 1 ahead is issued.
int ex_pipeline_stage(int tile, int stages) {
  return tile % stages;
}
int ex_pipeline_tile_issued(int iteration, int stages, int tiles) {
  const int tile = iteration + stages - 1;
  return tile < tiles ? tile : -1;
}

}  // namespace lesson10
