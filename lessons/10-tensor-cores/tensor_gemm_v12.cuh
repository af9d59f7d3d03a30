// Lesson 10, v12: v6's kernel with the tile order as an argument, to measure what the order is
// worth.
//
// Not compiled on its own: tensor_gemm_sm90.cu includes this file after v6, whose kernel
// (wgmma_128x256_kernel, one block per 128 x 256 tile, the staged write-out) v12 launches with
// kOrderArg set. Only which tile each block computes changes: block b takes tile b of the order
// (tile_in_order, tensor_gemm.cuh: tile_coord's groups of 1, 2, 4, 8 or 16 tile rows, or the
// Hilbert curve over the grid), and every tile is computed as v6 computes it, so v12's C has v6's
// bits in every order.
//
// Why the order could matter. The blocks resident at one time (one per SM: 132 on an H200) read
// the A rows of their tile rows and the B columns of their tile columns, K deep, at about the
// same pace. What they share is read from DRAM once and from L2 after, as long as it stays in L2
// (50 MiB) until its last reader has read it; the fewer distinct tile rows and columns the
// resident blocks cover, the fewer bytes come from DRAM. At 4096^3 (32 x 16 tiles) a tile row of
// A is 1 MiB and a tile column of B 2 MiB; at 8192^3 (64 x 32 tiles) 2 and 4 MiB. Counted over
// every run of 132 consecutive tiles (README.md has the table), row by row covers 41 MiB at
// 4096^3 and 138 MiB at 8192^3, v6's groups of 8 48 and 93 MiB, groups of 16 39 and 75 MiB, the
// Hilbert curve 41 and 84 MiB. Whether that shows in the time is what v12 measures.
//
// The order is a kernel argument, not a template parameter: a group size costs two integer
// divisions per tile and the Hilbert curve a loop of log2(side) levels (5 for 32 x 16 tiles, 6
// for 64 x 32), a few hundred integer instructions against a tile's 128 x 256 x K
// multiply-add (tens of microseconds at K = 4096). v6's kernel keeps its order compiled in
// (kOrderArg false), so the benchmark's v6 row next to tile_order_*/group8 (the same order, given
// as an argument) shows what the argument costs.
#pragma once

#include <stdexcept>
#include <string>

namespace lesson10 {

template <class In, class Out>
void gemm_v12_launch(TileOrder order, int M, int N, int K, float alpha, const In* A, const In* B,
                     float beta, Out* C, const float* bias, Activation act, cudaStream_t stream) {
  using v6cfg::BK, v6cfg::BM, v6cfg::BN, v6cfg::kSmemBytes, v6cfg::kThreads;
  if (!is_tile_order(order))
    throw std::invalid_argument("gemm_v12_launch: unknown tile order " +
                                std::to_string(static_cast<int>(order)));
  const CUtensorMap map_a = make_map(A, M, K, BM);      // boxes of 128 rows (m) x 64 k
  const CUtensorMap map_b = make_map(B, K, N, BK);      // boxes of 64 k rows x 64 columns
  const int tiles = ceil_div(M, BM) * ceil_div(N, BN);  // <= INT_MAX / 32768: M N <= INT_MAX
  // v6's launch: one block per tile, the staged write-out (four elements per store where C is
  // aligned to them), and the order as the last argument.
  auto kernel = wgmma_128x256_kernel<In, Out, true, true>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  const int quads = reinterpret_cast<std::uintptr_t>(C) % (4 * sizeof(Out)) == 0 ? 1 : 0;
  kernel<<<tiles, kThreads, kSmemBytes, stream>>>(
      map_a, map_b, M, N, K, C, Epilogue{alpha, beta, bias, act}, quads, static_cast<int>(order));
  CUDA_CHECK_LAUNCH();
}

}  // namespace lesson10
