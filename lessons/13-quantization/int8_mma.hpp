// Lesson 13: the index maps of the INT8 implicit GEMM (int8_conv_gpu.cu), shared by the kernel
// and the CPU tests that check them against the PTX ISA's fragment tables.
//
// One stage of the cp.async ring holds, for a block of BM output pixels and BN output channels,
// A as BM rows and B as BN rows of kInt8BK = 64 K values (bytes), each row padded to
// kInt8RowBytes = 80 bytes. K is ordered (r, s, c): GEMM column k is tap (r, s) = (k / in_c) as
// row and column of the kernel window, channel k % in_c, the order of a KRSC weight row.
#pragma once

#ifdef __CUDACC__
#define LESSON13_MMA_HD __host__ __device__
#else
#define LESSON13_MMA_HD
#endif

namespace lesson13 {

constexpr int kInt8BK = 64;        // K values per stage: two mma k32 steps
constexpr int kInt8RowBytes = 80;  // 64 bytes of a row + 16 of padding
constexpr int kInt8Stages = 3;     // the cp.async ring's depth

// A position in a stage's tile (row, byte column), or in an accumulator fragment (row, channel).
struct Int8RC {
  int row, col;
};

// Byte offset of (row, byte) in a stage's A or B tile. 80 = 5 x 16: the 8 rows an ldmatrix phase
// reads (16 bytes each) start in 8 different 16-byte bank groups (5 r mod 8 is a permutation).
LESSON13_MMA_HD inline int int8_tile_offset(int row, int byte) {
  return row * kInt8RowBytes + byte;
}

// The 16-byte chunk that thread `tid` of a block of `threads` copies in pass `pass` of a stage:
// row tid / 4 + pass * (threads / 4), bytes 16 (tid % 4) .. + 15 (K values 64 t + 16 (tid % 4) ..
// of slice t). Four threads cover a row's 64 bytes.
LESSON13_MMA_HD inline Int8RC int8_copy_chunk(int tid, int pass, int threads) {
  return {tid / 4 + pass * (threads / 4), (tid % 4) * 16};
}

// GEMM column k -> tap (r, s) and channel c. With in_c % 16 == 0 a 16-byte chunk (16 K values
// from a multiple of 16) lies within one tap: 16 consecutive channels of one input pixel.
struct Int8Tap {
  int r, s, c;
};
LESSON13_MMA_HD inline Int8Tap int8_conv_tap(int k, int in_c, int kernel) {
  const int tap = k / in_c, r = tap / kernel;
  return {r, tap - r * kernel, k - tap * in_c};
}

// ldmatrix.x4 (.b16, no .trans) row addresses for one k32 step of mma.m16n8k32 (s8): the
// (row, byte) that lane `lane` points at, relative to the warp's first row and the step's first
// byte. After the load, register j of lane l holds bytes 4 (l % 4) .. + 3 of row l / 4 of
// matrix j, the matrix whose 8 rows lanes 8j .. 8j + 7 addressed.
//   A (16 rows = pixels x 32 bytes of K): matrices (rows 0-7 | 8-15) x (bytes 0-15 | 16-31), in
//     the order a0 (rows 0-7, k 0-15), a1 (rows 8-15, k 0-15), a2 (rows 0-7, k 16-31), a3.
//   B (16 rows = two n8 fragments of channels x 32 bytes): matrices (channels 0-7, k 0-15) = b0
//     of fragment 0, (0-7, k 16-31) = b1 of fragment 0, then the same for channels 8-15.
LESSON13_MMA_HD inline Int8RC int8_ldmatrix_a(int lane) {
  return {lane & 15, (lane >> 4) * 16};
}
LESSON13_MMA_HD inline Int8RC int8_ldmatrix_b(int lane) {
  return {((lane >> 4) & 1) * 8 + (lane & 7), ((lane >> 3) & 1) * 16};
}

// Accumulator e (0..3) of lane `lane` in an m16n8 fragment: row lane / 4 + 8 (e / 2), channel
// 2 (lane % 4) + e % 2. Elements e and e + 1 (e even) are two adjacent channels of one row.
LESSON13_MMA_HD inline Int8RC int8_acc_element(int lane, int e) {
  return {lane / 4 + 8 * (e / 2), 2 * (lane % 4) + e % 2};
}

}  // namespace lesson13
