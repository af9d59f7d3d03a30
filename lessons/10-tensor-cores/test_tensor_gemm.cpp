// Lesson 10 tests.
//
// CPU (no GPU needed): the index maps the kernels are built on, checked against the PTX ISA's
// fragment tables and against properties (every element of a fragment owned by exactly one
// (lane, register); ldmatrix's addresses composed with its delivery rule give mma's fragments;
// the swizzle is a bijection and bank-conflict free for ldmatrix reads and cp.async writes while
// the unpadded layout is not; no pipeline stage is written while it may be read); the FP16
// peak table against datasheet figures; argument checks.
//
// GPU ([gpu], [vN] per version): every element of each version against an FP64 CPU reference
// computed from the same FP16/BF16 inputs, within tensor_gemm_error_bound (tensor_gemm.cuh
// states the derivation: products exact in FP32, K + 3 FP32 roundings of at most 2^-23 relative
// (truncating adder), then the output rounding 2^-11 (FP16) or 2^-8 (BF16) relative); odd M,
// K and N tails off the 128-wide tiles; beta == 0 with C full of NaN; the fused epilogue; the
// cuBLAS and cuBLASLt baselines, and the CUTLASS one where the build has it ([cutlass]), against
// the same reference; one 1024-sized product per version against cuBLAS; the 128x256 kernel's
// tile edges, its two store paths and v7's loop over tiles on a few blocks; v8 (split-K) at a
// layer's shapes (N = K = 4096, M = 1..300), with forced split counts that leave slices empty,
// called again (its tickets reset, the same bits), on a second stream, and captured in a CUDA
// graph. CPU: v8's split plan and slices.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/cuda_check.hpp"
#include "common/memory.hpp"
#include "common/stream.hpp"
#include "common/testing.hpp"
#include "ceiling.cuh"
#include "cutlass_gemm.cuh"
#include "tensor_gemm.cuh"

using course::testing::Approx;
using course::testing::Contains;
using namespace lesson10;

namespace {

// ---------------------------------------------------------------- CPU: fragments

// The C/D table of the PTX ISA ("Matrix Fragments for mma.m16n8k16 with floating point type"),
// written out for three lanes, independently of the code under test.
void check_c_fragment(RowCol (*f)(int, int)) {
  const RowCol lane0[4] = {{0, 0}, {0, 1}, {8, 0}, {8, 1}};
  const RowCol lane5[4] = {{1, 2}, {1, 3}, {9, 2}, {9, 3}};
  const RowCol lane31[4] = {{7, 6}, {7, 7}, {15, 6}, {15, 7}};
  for (int i = 0; i < 4; ++i) {
    CHECK(f(0, i).row == lane0[i].row);
    CHECK(f(0, i).col == lane0[i].col);
    CHECK(f(5, i).row == lane5[i].row);
    CHECK(f(5, i).col == lane5[i].col);
    CHECK(f(31, i).row == lane31[i].row);
    CHECK(f(31, i).col == lane31[i].col);
  }
  std::set<int> seen;
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < 4; ++i) {
      const RowCol rc = f(lane, i);
      REQUIRE(rc.row >= 0);
      REQUIRE(rc.row < 16);
      REQUIRE(rc.col >= 0);
      REQUIRE(rc.col < 8);
      seen.insert(rc.row * 8 + rc.col);
    }
  CHECK(seen.size() == 128);  // 32 lanes x 4 = 16 x 8: each element exactly once
}

}  // namespace

TEST_CASE("mma.m16n8k16 C fragment matches the PTX ISA table and covers 16x8 once", "[cpu]") {
  check_c_fragment(mma_c_element);
}

TEST_CASE("mma.m16n8k16 A and B fragments: PTX ISA samples, each element once", "[cpu]") {
  // a0..a7 of lane 6 (group 1, t 2): rows 1, 1, 9, 9, 1, 1, 9, 9; cols 4, 5, 4, 5, 12, 13, 12, 13.
  const int arow[8] = {1, 1, 9, 9, 1, 1, 9, 9}, acol[8] = {4, 5, 4, 5, 12, 13, 12, 13};
  for (int i = 0; i < 8; ++i) {
    CHECK(mma_a_element(6, i).row == arow[i]);
    CHECK(mma_a_element(6, i).col == acol[i]);
  }
  // b0..b3 of lane 6: k rows 4, 5, 12, 13; column (n) 1.
  const int brow[4] = {4, 5, 12, 13};
  for (int i = 0; i < 4; ++i) {
    CHECK(mma_b_element(6, i).row == brow[i]);
    CHECK(mma_b_element(6, i).col == 1);
  }
  std::set<int> a, b;
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < 8; ++i)
      a.insert(mma_a_element(lane, i).row * 16 + mma_a_element(lane, i).col);
    for (int i = 0; i < 4; ++i)
      b.insert(mma_b_element(lane, i).row * 8 + mma_b_element(lane, i).col);
  }
  CHECK(a.size() == 256);
  CHECK(b.size() == 128);
}

TEST_CASE("ldmatrix.x4 at the kernels' addresses delivers exactly mma's A and B fragments",
          "[cpu]") {
  // Matrix j's rows are given by lanes 8j..8j+7: consecutive rows from the origin at lane 8j.
  for (int j = 0; j < 4; ++j) {
    const RowCol oa = ldmatrix_a_address(8 * j), ob = ldmatrix_b_trans_address(8 * j);
    for (int r = 0; r < 8; ++r) {
      CHECK(ldmatrix_a_address(8 * j + r).row == oa.row + r);
      CHECK(ldmatrix_a_address(8 * j + r).col == oa.col);
      CHECK(ldmatrix_b_trans_address(8 * j + r).row == ob.row + r);
      CHECK(ldmatrix_b_trans_address(8 * j + r).col == ob.col);
    }
  }
  for (int lane = 0; lane < 32; ++lane)
    for (int j = 0; j < 4; ++j)
      for (int h = 0; h < 2; ++h) {
        // A: register j, half h is a_{2j+h}.
        const RowCol got = ldmatrix_element(lane, h, ldmatrix_a_address(8 * j), false);
        const RowCol want = mma_a_element(lane, 2 * j + h);
        CHECK(got.row == want.row);
        CHECK(got.col == want.col);
        // B (.trans): register j is b_{j%2} of the n-block j/2 (columns 8 * (j/2) ..).
        const RowCol gb = ldmatrix_element(lane, h, ldmatrix_b_trans_address(8 * j), true);
        const RowCol wb = mma_b_element(lane, 2 * (j % 2) + h);
        CHECK(gb.row == wb.row);
        CHECK(gb.col == wb.col + 8 * (j / 2));
      }
}

// ---------------------------------------------------------------- CPU: swizzle and banks

namespace {
// How many 16-byte transactions one phase of 8 16-byte accesses needs: the most accesses that
// share a bank group (1 = conflict-free, 8 = fully serialised).
int phase_ways(const std::vector<int>& byte_offsets) {
  int count[8] = {0};
  for (int off : byte_offsets) ++count[bank_group(off)];
  return *std::max_element(count, count + 8);
}

// Worst ldmatrix phase over a rows x (row_halves) tile: 8 consecutive rows (aligned to 8) at the
// same logical 16-byte chunk, with `offset(row, col)` in halves.
template <class F>
int worst_ldmatrix_ways(int rows, int row_halves, F offset) {
  int worst = 0;
  for (int r0 = 0; r0 < rows; r0 += 8)
    for (int c = 0; c < row_halves / 8; ++c) {
      std::vector<int> offs;
      for (int r = 0; r < 8; ++r) offs.push_back(2 * offset(r0 + r, 8 * c));
      worst = std::max(worst, phase_ways(offs));
    }
  return worst;
}

// Worst cp.async write phase: 8 consecutive chunk indices of the tile in row-major order.
template <class F>
int worst_store_ways(int rows, int row_halves, F offset) {
  const int cpr = row_halves / 8;
  int worst = 0;
  for (int q0 = 0; q0 < rows * cpr; q0 += 8) {
    std::vector<int> offs;
    for (int q = q0; q < q0 + 8; ++q) offs.push_back(2 * offset(q / cpr, 8 * (q % cpr)));
    worst = std::max(worst, phase_ways(offs));
  }
  return worst;
}
}  // namespace

TEST_CASE("the XOR swizzle is a bijection of each row and conflict-free; plain rows are not",
          "[cpu]") {
  for (const int row_halves : {32, 64, 128, 256}) {
    const int cpr = row_halves / 8;
    INFO("row of " << row_halves << " halves");
    for (int r = 0; r < 64; ++r) {
      std::set<int> phys;
      for (int c = 0; c < cpr; ++c) {
        const int p = swizzle_chunk(r, c, cpr);
        REQUIRE(p >= 0);
        REQUIRE(p < cpr);
        phys.insert(p);
      }
      CHECK(phys.size() == static_cast<std::size_t>(cpr));
    }
    const auto swz = [&](int r, int c) { return swizzled_offset(r, c, row_halves); };
    const auto pad = [&](int r, int c) { return padded_offset(r, c, row_halves); };
    const auto plain = [&](int r, int c) { return r * row_halves + c; };
    CHECK(worst_ldmatrix_ways(64, row_halves, swz) == 1);
    CHECK(worst_store_ways(64, row_halves, swz) == 1);
    CHECK(worst_ldmatrix_ways(64, row_halves, pad) == 1);
    // Unpadded, unswizzled: 8 rows of 64 bytes share 2 lines (4-way); of 128+ bytes, one (8-way).
    CHECK(worst_ldmatrix_ways(64, row_halves, plain) == (row_halves == 32 ? 4 : 8));
  }
}

// ---------------------------------------------------------------- CPU: exercise 1

namespace {
// The layout ex_swizzled_offset gives a tile of `rows` rows of `row_halves` halves: at[offset] is
// the logical (row, col) stored there. An empty string if it meets exercise 1's contract (chunks
// whole, each row a permutation of its own chunks), else what is wrong, at the first place.
std::string exercise_layout(int rows, int row_halves, std::vector<RowCol>* at) {
  at->assign(static_cast<std::size_t>(rows) * row_halves, RowCol{-1, -1});
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < row_halves; ++c) {
      const int off = ex_swizzled_offset(r, c, row_halves);
      const int chunk = ex_swizzled_offset(r, c - c % 8, row_halves);
      const std::string where = "ex_swizzled_offset(" + std::to_string(r) + ", " +
                                std::to_string(c) + ", " + std::to_string(row_halves) +
                                ") = " + std::to_string(off);
      if (off < r * row_halves || off >= (r + 1) * row_halves)
        return where + ": outside row " + std::to_string(r) + "'s own halves";
      if (chunk % 8 != 0 || off != chunk + c % 8)
        return where + ": the 16-byte chunk is not kept whole and in order";
      if ((*at)[off].row != -1)
        return where + ": also the offset of (" + std::to_string((*at)[off].row) + ", " +
               std::to_string((*at)[off].col) + ")";
      (*at)[off] = {r, c};
    }
  return "";
}
}  // namespace

TEST_CASE("exercise 1: ex_swizzled_offset permutes each row's chunks, conflict-free",
          "[cpu][ex1]") {
  for (const int row_halves : {64, 128, 256}) {
    INFO("rows of " << row_halves << " halves");
    std::vector<RowCol> at;
    CHECK(exercise_layout(64, row_halves, &at) == "");
    const auto off = [&](int r, int c) { return ex_swizzled_offset(r, c, row_halves); };
    // The kernel's two access patterns, one phase of 8 chunks each: 1 = conflict-free.
    CHECK(worst_ldmatrix_ways(64, row_halves, off) == 1);  // one chunk of 8 rows (ldmatrix)
    CHECK(worst_store_ways(64, row_halves, off) == 1);     // 8 chunks in a row (cp.async)
  }
}

TEST_CASE("exercise 1: ldmatrix at your lane addresses delivers exactly mma's A and B fragments",
          "[cpu][ex1]") {
  // A's stage (128 rows of 64 halves) and B's (64 rows of 128), as the exercise kernel has them,
  // and twice as wide.
  struct Operand {
    bool b;  // B: ex_ldmatrix_b_offset and .trans; else A
    int rows, row_halves;
  };
  for (const Operand& o : {Operand{false, 128, 64}, Operand{false, 64, 128}, Operand{true, 64, 128},
                           Operand{true, 64, 256}}) {
    INFO((o.b ? "B" : "A") << ": a stage of " << o.rows << " rows of " << o.row_halves
                           << " halves");
    std::vector<RowCol> at;
    // The addresses are read through your swizzle: it must be right first.
    REQUIRE(exercise_layout(o.rows, o.row_halves, &at) == "");
    // Every fragment origin: A's (row0, k0) over its rows and 64 k; B's (k0, n0) over 64 k and
    // its columns. The first thing wrong, if any.
    std::string bad;
    for (int r0 = 0; r0 < (o.b ? 64 : o.rows) && bad.empty(); r0 += 16)
      for (int c0 = 0; c0 < (o.b ? o.row_halves : 64) && bad.empty(); c0 += 16) {
        const std::string at_origin =
            std::string(o.b ? "ex_ldmatrix_b_offset" : "ex_ldmatrix_a_offset") +
            " for the fragment at (" + std::to_string(r0) + ", " + std::to_string(c0) + "): ";
        std::vector<int> offs(32);
        std::vector<RowCol> logical(32);
        for (int lane = 0; lane < 32 && bad.empty(); ++lane) {
          const int off = o.b ? ex_ldmatrix_b_offset(lane, r0, c0, o.row_halves)
                              : ex_ldmatrix_a_offset(lane, r0, c0, o.row_halves);
          offs[lane] = off;
          if (off < 0 || off >= o.rows * o.row_halves || off % 8 != 0)
            bad = "lane " + std::to_string(lane) + ": offset " + std::to_string(off) +
                  " is outside the stage or not 16-byte aligned";
          else
            logical[lane] = at[off];
        }
        // Matrix j's rows come from lanes 8j..8j+7: 8 consecutive rows at one column.
        for (int j = 0; j < 4 && bad.empty(); ++j)
          for (int i = 1; i < 8; ++i)
            if (logical[8 * j + i].row != logical[8 * j].row + i ||
                logical[8 * j + i].col != logical[8 * j].col)
              bad = "lanes " + std::to_string(8 * j) + ".." + std::to_string(8 * j + 7) +
                    " do not point at 8 consecutive rows of one column, as ex_swizzled_offset "
                    "stored them (the rows of matrix " +
                    std::to_string(j) + ")";
        for (int lane = 0; lane < 32 && bad.empty(); ++lane)
          for (int j = 0; j < 4; ++j)
            for (int h = 0; h < 2; ++h) {
              const RowCol got = ldmatrix_element(lane, h, logical[8 * j], o.b);
              RowCol want{};
              if (o.b) {  // register j: b_{2 (j % 2) + h} of the n columns 8 (j / 2)..
                const RowCol e = mma_b_element(lane, 2 * (j % 2) + h);
                want = {r0 + e.row, c0 + e.col + 8 * (j / 2)};
              } else {  // register j, half h: a_{2j + h}
                const RowCol e = mma_a_element(lane, 2 * j + h);
                want = {r0 + e.row, c0 + e.col};
              }
              if (bad.empty() && (got.row != want.row || got.col != want.col))
                bad = "lane " + std::to_string(lane) + " register " + std::to_string(j) + " half " +
                      std::to_string(h) + " would hold (" + std::to_string(got.row) + ", " +
                      std::to_string(got.col) + "), mma wants (" + std::to_string(want.row) + ", " +
                      std::to_string(want.col) + ")";
            }
        for (int q = 0; q < 4 && bad.empty(); ++q) {  // one phase per matrix: 8 bank groups
          std::vector<int> bytes;
          for (int l = 8 * q; l < 8 * q + 8; ++l) bytes.push_back(2 * offs[l]);
          if (phase_ways(bytes) != 1)
            bad = "matrix " + std::to_string(q) + "'s 8 rows share bank groups (" +
                  std::to_string(phase_ways(bytes)) + "-way conflict)";
        }
        if (!bad.empty()) bad = at_origin + bad;
      }
    CHECK(bad == "");
  }
}

// ---------------------------------------------------------------- CPU: v4's tuned tile

TEST_CASE("v4 tuned: each cp.async chunk lands once, at its swizzled offset, conflict-free",
          "[cpu][v4]") {
  using namespace v4tuned;
  struct Operand {
    const char* name;
    int rows, row_halves, loads, rows_per_pass;
    RowCol (*chunk)(int, int);
    int (*store)(int);
  };
  for (const Operand& o : {Operand{"A", BM, BK, kALoads, kARowsPerPass, a_chunk, a_store},
                           Operand{"B", BK, BN, kBLoads, kBRowsPerPass, b_chunk, b_store}}) {
    INFO(o.name);
    CHECK(o.loads * kThreads * 8 == o.rows * o.row_halves);
    std::set<int> logical, physical;
    for (int tid = 0; tid < kThreads; ++tid)
      for (int p = 0; p < o.loads; ++p) {
        const RowCol rc = o.chunk(tid, p);
        REQUIRE(rc.row >= 0);
        REQUIRE(rc.row < o.rows);
        REQUIRE(rc.col % 8 == 0);
        REQUIRE(rc.col < o.row_halves);
        logical.insert(rc.row * o.row_halves + rc.col);
        // What the kernel writes: the base computed once, plus the pass's row step.
        const int off = o.store(tid) + p * o.rows_per_pass * o.row_halves;
        CHECK(off == swizzled_offset(rc.row, rc.col, o.row_halves));
        physical.insert(off);
      }
    CHECK(logical.size() == static_cast<std::size_t>(o.rows * o.row_halves / 8));
    CHECK(physical.size() == logical.size());
    // One warp's 32 16-byte writes go in 4 phases of 8 lanes: 8 different bank groups each.
    int worst = 0;
    for (int warp = 0; warp < kThreads / 32; ++warp)
      for (int p = 0; p < o.loads; ++p)
        for (int q = 0; q < 4; ++q) {
          std::vector<int> offs;
          for (int l = 8 * q; l < 8 * q + 8; ++l)
            offs.push_back(2 * (o.store(32 * warp + l) + p * o.rows_per_pass * o.row_halves));
          worst = std::max(worst, phase_ways(offs));
        }
    CHECK(worst == 1);
  }
}

TEST_CASE("v4 tuned: ldmatrix addresses are mma's fragments at their swizzled offsets",
          "[cpu][v4]") {
  using namespace v4tuned;
  std::set<int> warp_tiles;
  for (int warp = 0; warp < kThreads / 32; ++warp) {
    const RowCol wo = warp_origin(warp);
    REQUIRE(wo.row + WM <= BM);
    REQUIRE(wo.col + WN <= BN);
    warp_tiles.insert(wo.row * BN + wo.col);
    INFO("warp " << warp);
    for (int ks = 0; ks < KS; ++ks) {
      for (int i = 0; i < MI; ++i) {
        std::vector<int> offs;
        for (int lane = 0; lane < 32; ++lane) {
          const RowCol la = ldmatrix_a_address(lane);
          const int got = a_load(a_load_base(warp, lane), i, ks);
          CHECK(got == swizzled_offset(wo.row + i * 16 + la.row, ks * 16 + la.col, BK));
          REQUIRE(got >= 0);
          REQUIRE(got + 8 <= kAStage);
          offs.push_back(2 * got);
        }
        for (int q = 0; q < 4; ++q)  // matrix q's 8 rows: one phase
          CHECK(phase_ways(std::vector<int>(offs.begin() + 8 * q, offs.begin() + 8 * q + 8)) == 1);
      }
      for (int j = 0; j < NJ / 2; ++j) {
        std::vector<int> offs;
        for (int lane = 0; lane < 32; ++lane) {
          const RowCol lb = ldmatrix_b_trans_address(lane);
          const int got = b_load(b_load_base(warp, lane), j, ks);
          CHECK(got == swizzled_offset(ks * 16 + lb.row, wo.col + j * 16 + lb.col, BN));
          REQUIRE(got >= 0);
          REQUIRE(got + 8 <= kBStage);
          offs.push_back(2 * got);
        }
        for (int q = 0; q < 4; ++q)
          CHECK(phase_ways(std::vector<int>(offs.begin() + 8 * q, offs.begin() + 8 * q + 8)) == 1);
      }
    }
  }
  CHECK(warp_tiles.size() == static_cast<std::size_t>(BM / WM * (BN / WN)));  // tiles the block
  CHECK(smem_bytes(4) == 192 * 1024);  // within Hopper's 227 KiB per block
}

// ---------------------------------------------------------------- CPU: the pipeline

namespace {
// Simulates the ring of tensor_gemm.cuh: per iteration, the stage read and the stage written.
// Checks: every tile is issued exactly once, before it is read, into the stage it is read from;
// no stage is written in the iteration that reads it or while a tile issued into it is unread;
// and at iteration t at most stages-2 groups committed after tile t's (so wait_group stages-2
// guarantees tile t).
void check_pipeline(int (*stage)(int, int), int (*issued)(int, int, int)) {
  for (int stages = 2; stages <= 5; ++stages)
    for (int tiles = 1; tiles <= 17; ++tiles) {
      INFO("stages " << stages << ", tiles " << tiles);
      std::vector<int> holds(stages, -1);  // the tile each stage holds (-1: none)
      std::vector<int> issue_group(tiles, -1);
      int groups = 0;
      for (int s = 0; s < stages - 1; ++s) {
        if (s < tiles) {
          holds[stage(s, stages)] = s;
          issue_group[s] = groups;
        }
        ++groups;
      }
      for (int t = 0; t < tiles; ++t) {
        REQUIRE(issue_group[t] >= 0);
        CHECK(groups - 1 - issue_group[t] <= stages - 2);
        const int read = stage(t, stages);
        CHECK(holds[read] == t);
        const int next = issued(t, stages, tiles);
        if (t + stages - 1 < tiles) {
          CHECK(next == t + stages - 1);
        } else {
          CHECK(next == -1);
        }
        if (next >= 0) {
          const int w = stage(next, stages);
          CHECK(w != read);
          // The stage overwritten holds tile t-1 (already consumed) or nothing.
          CHECK((holds[w] == -1 || holds[w] < t));
          REQUIRE(issue_group[next] == -1);
          holds[w] = next;
          issue_group[next] = groups;
        }
        ++groups;
      }
    }
}
}  // namespace

TEST_CASE("the cp.async ring never overwrites a stage that may still be read", "[cpu]") {
  check_pipeline(pipeline_stage, pipeline_tile_issued);
}

TEST_CASE("mbarrier phases: a stage's k-th completion has parity k % 2", "[cpu]") {
  for (int stages = 2; stages <= 6; ++stages) {
    std::vector<int> completions(stages, 0);
    for (int tile = 0; tile < 40; ++tile) {
      const int s = pipeline_stage(tile, stages);
      CHECK(pipeline_phase(tile, stages) == completions[s] % 2);
      ++completions[s];
    }
  }
}

// ---------------------------------------------------------------- CPU: peak, bound, arguments

TEST_CASE("the grouped tile order (v4 tuned, v6, v7) is a bijection, group by group", "[cpu]") {
  for (const int group : {1, 2, 8, 16})
    for (int tiles_m = 1; tiles_m <= 40; tiles_m += 3)
      for (int tiles_n = 1; tiles_n <= 7; ++tiles_n) {
        INFO("group " << group << ", " << tiles_m << " x " << tiles_n << " tiles");
        std::vector<int> seen(static_cast<std::size_t>(tiles_m) * tiles_n, 0);
        for (int t = 0; t < tiles_m * tiles_n; ++t) {
          const TileCoord c = tile_coord(t, tiles_m, tiles_n, group);
          REQUIRE(c.m >= 0);
          REQUIRE(c.m < tiles_m);
          REQUIRE(c.n >= 0);
          REQUIRE(c.n < tiles_n);
          ++seen[static_cast<std::size_t>(c.m) * tiles_n + c.n];
          // Tile t lies in group t / (group * tiles_n): its rows, and inside it, down a column
          // before the next column.
          CHECK(c.m / group == t / (group * tiles_n));
          if (t % (group * tiles_n) != 0) {
            const TileCoord prev = tile_coord(t - 1, tiles_m, tiles_n, group);
            const bool next_row = c.n == prev.n && c.m == prev.m + 1;
            const bool next_column = c.n == prev.n + 1 && c.m % group == 0;
            CHECK((next_row || next_column));
          }
        }
        CHECK(std::all_of(seen.begin(), seen.end(), [](int k) { return k == 1; }));
      }
  // 4096 x 4096 in 128 x 256 tiles, groups of 8 tile rows: tiles 0..7 are column 0, rows 0..7.
  for (int t = 0; t < 8; ++t) {
    CHECK(tile_coord(t, 32, 16, 8).m == t);
    CHECK(tile_coord(t, 32, 16, 8).n == 0);
  }
  CHECK(tile_coord(8, 32, 16, 8).n == 1);
  CHECK(tile_coord(128, 32, 16, 8).m == 8);
}

// ---------------------------------------------------------------- CPU: v12's tile orders

namespace {
// The classic Hilbert curve of a power-of-two square of side n, cell d -> (x, y) (written from
// the bottom up, the way Wikipedia's d2xy is, unlike hilbert_tile's top-down walk): the
// independent reference for hilbert_tile.
void hilbert_d2xy(int n, int d, int* x, int* y) {
  *x = *y = 0;
  for (int s = 1, t = d; s < n; s *= 2, t /= 4) {
    const int rx = 1 & (t / 2), ry = 1 & (t ^ rx);
    if (ry == 0) {
      if (rx == 1) {
        *x = s - 1 - *x;
        *y = s - 1 - *y;
      }
      std::swap(*x, *y);
    }
    *x += s * rx;
    *y += s * ry;
  }
}

// Every tile of a tiles_m x tiles_n grid in `order`, checked to be a bijection onto the grid.
std::vector<TileCoord> walk_bijective(TileOrder order, int tiles_m, int tiles_n) {
  INFO(to_string(order) << ", " << tiles_m << " x " << tiles_n << " tiles");
  std::vector<TileCoord> walk;
  std::vector<int> seen(static_cast<std::size_t>(tiles_m) * tiles_n, 0);
  for (int t = 0; t < tiles_m * tiles_n; ++t) {
    const TileCoord c = tile_in_order(t, tiles_m, tiles_n, static_cast<int>(order));
    REQUIRE(c.m >= 0);
    REQUIRE(c.m < tiles_m);
    REQUIRE(c.n >= 0);
    REQUIRE(c.n < tiles_n);
    ++seen[static_cast<std::size_t>(c.m) * tiles_n + c.n];
    walk.push_back(c);
  }
  CHECK(std::all_of(seen.begin(), seen.end(), [](int k) { return k == 1; }));
  return walk;
}

int manhattan(TileCoord a, TileCoord b) {
  return std::abs(a.m - b.m) + std::abs(a.n - b.n);
}
}  // namespace

TEST_CASE("v12's tile orders: each a bijection between tile index and (tile row, tile column)",
          "[cpu][v12]") {
  std::vector<std::pair<int, int>> shapes;
  for (int tiles_m = 1; tiles_m <= 24; ++tiles_m)
    for (int tiles_n = 1; tiles_n <= 24; ++tiles_n) shapes.push_back({tiles_m, tiles_n});
  for (const int n : {1, 2, 3, 31, 33, 100, 257, 1000})  // 1 x N and N x 1, odd and long
    shapes.insert(shapes.end(), {{1, n}, {n, 1}});
  // The benchmark's grids (4096^3 and 8192^3 in 128 x 256 tiles), their transposes, and large
  // odd ones up to v6's limit (M N <= INT_MAX: at most 65535 tiles).
  shapes.insert(
      shapes.end(),
      {{32, 16}, {16, 32}, {64, 32}, {32, 64}, {97, 61}, {61, 97}, {255, 257}, {17, 3855}});
  for (const TileOrder order : kTileOrders)
    for (const auto& [tiles_m, tiles_n] : shapes) walk_bijective(order, tiles_m, tiles_n);
}

TEST_CASE("v12's grouped orders are tile_coord's, group1 row by row, group8 v6's", "[cpu][v12]") {
  for (const TileOrder order : kTileOrders) {
    if (order == TileOrder::hilbert) continue;
    for (int t = 0; t < 7 * 5; ++t) {
      const TileCoord a = tile_in_order(t, 7, 5, static_cast<int>(order));
      const TileCoord b = tile_coord(t, 7, 5, static_cast<int>(order));
      CHECK(a.m == b.m);
      CHECK(a.n == b.n);
    }
  }
  for (int t = 0; t < 7 * 5; ++t) {
    CHECK(tile_in_order(t, 7, 5, static_cast<int>(TileOrder::group1)).m == t / 5);
    CHECK(tile_in_order(t, 7, 5, static_cast<int>(TileOrder::group1)).n == t % 5);
  }
}

TEST_CASE("v12's Hilbert order: the curve over the enclosing power-of-two square, outside skipped",
          "[cpu][v12]") {
  // Against the bottom-up reference: the cells of the enclosing square along the curve, those in
  // the grid kept; y is the longer side of the grid (tile rows when tiles_m >= tiles_n).
  for (int tiles_m = 1; tiles_m <= 40; ++tiles_m)
    for (int tiles_n = 1; tiles_n <= 40; tiles_n += tiles_n < 10 ? 1 : 7) {
      INFO(tiles_m << " x " << tiles_n << " tiles");
      const bool m_along_y = tiles_m >= tiles_n;
      const int width = m_along_y ? tiles_n : tiles_m, height = m_along_y ? tiles_m : tiles_n;
      int side = 1;
      while (side < height) side *= 2;
      int t = 0;
      for (int d = 0; d < side * side; ++d) {
        int x = 0, y = 0;
        hilbert_d2xy(side, d, &x, &y);
        if (x >= width || y >= height) continue;
        const TileCoord c = hilbert_tile(t++, tiles_m, tiles_n);
        CHECK(c.m == (m_along_y ? y : x));
        CHECK(c.n == (m_along_y ? x : y));
      }
      CHECK(t == tiles_m * tiles_n);
    }
  // On power-of-two squares, and on grids of two such squares (the benchmark's 32 x 16 and
  // 64 x 32, either way round), every step goes to a neighbour.
  for (int side = 1; side <= 128; side *= 2)
    for (const auto& [tiles_m, tiles_n] :
         std::vector<std::pair<int, int>>{{side, side}, {2 * side, side}, {side, 2 * side}}) {
      INFO(tiles_m << " x " << tiles_n << " tiles");
      const std::vector<TileCoord> walk = walk_bijective(TileOrder::hilbert, tiles_m, tiles_n);
      std::size_t far = 0;
      for (std::size_t i = 1; i < walk.size(); ++i) far += manhattan(walk[i - 1], walk[i]) != 1;
      CHECK(far == 0);
      CHECK(walk.front().m == 0);  // the curve starts in a corner
      CHECK(walk.front().n == 0);
    }
  // Off those shapes the skipped cells make jumps, but only where the curve leaves the grid: a
  // 5 x 3 grid in its 8 x 8 square still has neighbours for most steps.
  const std::vector<TileCoord> walk = walk_bijective(TileOrder::hilbert, 5, 3);
  std::size_t near = 0;
  for (std::size_t i = 1; i < walk.size(); ++i) near += manhattan(walk[i - 1], walk[i]) == 1;
  CHECK(near >= walk.size() / 2);
}

TEST_CASE("v12's order names, and an unknown order refused before any CUDA call", "[cpu][v12]") {
  CHECK(std::string(to_string(TileOrder::group1)) == "group1");
  CHECK(std::string(to_string(TileOrder::group16)) == "group16");
  CHECK(std::string(to_string(TileOrder::hilbert)) == "hilbert");
  CHECK(std::string(to_string(static_cast<TileOrder>(3))) == "unknown");
  CHECK(std::size(kTileOrders) == 6);
  for (const TileOrder o : kTileOrders) CHECK(is_tile_order(o));
  CHECK_FALSE(is_tile_order(static_cast<TileOrder>(3)));
  CHECK_FALSE(is_tile_order(static_cast<TileOrder>(-1)));
  __half* p = reinterpret_cast<__half*>(std::uintptr_t{256});  // never dereferenced
  float* c = reinterpret_cast<float*>(std::uintptr_t{256});
  CHECK_THROWS_WITH(gemm_v12_tile_order(static_cast<TileOrder>(3), 8, 8, 8, 1.0f, p, p, 0.0f, c),
                    Contains("unknown tile order 3"));
  CHECK_THROWS_WITH(gemm_v12_tile_order(static_cast<TileOrder>(32), 8, 8, 8, 1.0f, p, p, 0.0f, c),
                    Contains("expected group1"));
  CHECK_THROWS_WITH(gemm_v12_tile_order(TileOrder::hilbert, 8, 8, 12, 1.0f, p, p, 0.0f, c),
                    Contains("multiples of 8"));
  CHECK_THROWS_WITH(gemm_v12_tile_order(TileOrder::group4, 8, 8, 8, 1.0f, p + 1, p, 0.0f, c),
                    Contains("16-byte"));
  CHECK_THROWS_WITH(gemm_v12_tile_order(TileOrder::group2, -1, 8, 8, 1.0f, p, p, 0.0f, c),
                    Contains(">= 0"));
  CHECK_THROWS_WITH(gemm_v12_tile_order(TileOrder::group8, 8, 8, 8, 1.0f, p, p, 0.0f, c, nullptr,
                                        static_cast<Activation>(7)),
                    Contains("unknown activation"));
  CHECK_NOTHROW(gemm_v12_tile_order<__half, float>(TileOrder::hilbert, 0, 8, 8, 1.0f, nullptr,
                                                   nullptr, 0.0f, nullptr));
}

// v10's staging buffer (v10staging): the 128 threads' float2 stores put every accumulator of a
// 64 x 32 chunk at its own row and column, once; the float4 reads of the write-out read each
// element once; and both are conflict-free with rows of 40 floats, while rows of 32 make the
// stores 4-way.
TEST_CASE("v10's staging buffer: every element once, stores and reads conflict-free",
          "[cpu][v10]") {
  using namespace v10staging;
  // The most distinct words any bank serves for one group of threads' accesses.
  const auto ways = [](const std::vector<int>& words) {
    std::vector<std::set<int>> bank(32);
    for (const int w : words) bank[w % 32].insert(w);
    std::size_t worst = 0;
    for (const auto& b : bank) worst = std::max(worst, b.size());
    return static_cast<int>(worst);
  };
  const auto worst_store_ways = [&](int ld) {
    int worst = 0;
    for (int warp = 0; warp < kThreads / 32; ++warp)
      for (int jj = 0; jj < kChunkCols / 8; ++jj)
        for (int h = 0; h < 2; ++h)
          for (int half = 0; half < 2; ++half) {  // 64-bit accesses: a half-warp at a time
            std::vector<int> words;
            for (int lane = 16 * half; lane < 16 * half + 16; ++lane) {
              const int o = fragment_offset(warp, lane, jj, h, ld);
              words.push_back(o);
              words.push_back(o + 1);
            }
            worst = std::max(worst, ways(words));
          }
    return worst;
  };
  CHECK(worst_store_ways(kChunkLd) == 1);
  CHECK(worst_store_ways(kChunkCols) == 4);
  CHECK(kChunkLd * 4 % 16 == 0);  // float4 reads of every row 16-byte aligned

  // Stores: each (row, column) of the chunk once, at row * kChunkLd + column, and it is the
  // accumulator that mma_c_element places there (row warp * 16 + its row, column jj * 8 + its
  // column).
  std::vector<int> stored(kRows * kChunkLd, 0);
  for (int warp = 0; warp < kThreads / 32; ++warp)
    for (int lane = 0; lane < 32; ++lane)
      for (int jj = 0; jj < kChunkCols / 8; ++jj)
        for (int h = 0; h < 2; ++h) {
          const int o = fragment_offset(warp, lane, jj, h);
          const RowCol rc = mma_c_element(lane, 2 * h);
          REQUIRE(o == (warp * 16 + rc.row) * kChunkLd + jj * 8 + rc.col);
          REQUIRE(o % 2 == 0);  // float2 aligned
          ++stored[o];
          ++stored[o + 1];
        }
  // Reads: each (row, column) once, a quarter warp's float4 covering 32 banks.
  std::vector<int> read(kRows * kChunkLd, 0);
  for (int idx = 0; idx < kRows * kQuadsPerRow; idx += 8) {
    std::vector<int> words;
    for (int t = idx; t < idx + 8; ++t) {
      const RowCol q = quad_of(t);
      for (int i = 0; i < 4; ++i) {
        words.push_back(q.row * kChunkLd + q.col + i);
        ++read[q.row * kChunkLd + q.col + i];
      }
    }
    CHECK(ways(words) == 1);
  }
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kChunkLd; ++c) {
      const int want = c < kChunkCols ? 1 : 0;  // the padding is neither written nor read
      REQUIRE(stored[r * kChunkLd + c] == want);
      REQUIRE(read[r * kChunkLd + c] == want);
    }
}

TEST_CASE("FP16 tensor peak table reproduces the datasheet figures", "[cpu]") {
  // H100 SXM5: 132 SMs at 1830 MHz boost, 989.4 dense FP16 TFLOP/s (NVIDIA H100 datasheet).
  CHECK(132.0 * fp16_flops_per_clock_per_sm(9, 0) * 1.83e9 / 1e12 == Approx(989.4).epsilon(0.002));
  // A100: 108 SMs at 1410 MHz, 312 TFLOP/s (A100 datasheet).
  CHECK(108.0 * fp16_flops_per_clock_per_sm(8, 0) * 1.41e9 / 1e12 == Approx(312.0).epsilon(0.003));
  // V100 SXM2: 80 SMs at 1530 MHz, 125 TFLOP/s.
  CHECK(80.0 * fp16_flops_per_clock_per_sm(7, 0) * 1.53e9 / 1e12 == Approx(125.0).epsilon(0.005));
  CHECK_THROWS_AS(fp16_flops_per_clock_per_sm(6, 1), std::invalid_argument);
}

TEST_CASE("the error bound holds for a simulated FP32 accumulation of FP16 products", "[cpu]") {
  // Products of FP16 values in FP32 (exact), summed left to right in FP32 with truncation
  // toward zero (the pessimistic adder), against FP64: always within the bound.
  std::uint32_t x = 12345;
  const auto next = [&] {
    x = x * 1664525u + 1013904223u;
    return __half2float(__float2half((static_cast<float>(x >> 8) / 16777216.0f) * 2.0f - 1.0f));
  };
  for (const int K : {1, 7, 64, 1000, 4096}) {
    float acc = 0.0f;
    double exact = 0.0, abs_sum = 0.0;
    for (int k = 0; k < K; ++k) {
      const float a = next(), b = next();
      const double p = static_cast<double>(a) * b;
      REQUIRE(static_cast<double>(a * b) == p);  // exact in FP32
      const double s = static_cast<double>(acc) + a * b;
      float r = static_cast<float>(s);
      if (std::fabs(static_cast<double>(r)) > std::fabs(s)) r = std::nextafter(r, 0.0f);
      acc = r;
      exact += p;
      abs_sum += std::fabs(p);
    }
    CHECK(std::fabs(acc - exact) <= tensor_gemm_error_bound(K, 1.0, abs_sum, 0.0, 0.0, 0.0,
                                                            Activation::none, DType::f32, exact));
  }
}

TEST_CASE("bad arguments throw std::invalid_argument before any CUDA call", "[cpu]") {
  __half* p = reinterpret_cast<__half*>(std::uintptr_t{256});  // never dereferenced
  float* c = reinterpret_cast<float*>(std::uintptr_t{256});
  CHECK_THROWS_WITH(tensor_gemm(4, -1, 8, 8, 1.0f, p, p, 0.0f, c), Contains(">= 0"));
  CHECK_THROWS_WITH(tensor_gemm(4, 8, 8, 12, 1.0f, p, p, 0.0f, c), Contains("multiples of 8"));
  CHECK_THROWS_WITH(tensor_gemm(3, 8, 12, 8, 1.0f, p, p, 0.0f, c), Contains("multiples of 8"));
  CHECK_THROWS_WITH(tensor_gemm(2, 8, 8, 8, 1.0f, p + 1, p, 0.0f, c), Contains("16-byte"));
  CHECK_THROWS_WITH(tensor_gemm(4, 8, 8, 8, 1.0f, p, p, 0.0f, static_cast<float*>(nullptr)),
                    Contains("C is null"));
  CHECK_THROWS_WITH(tensor_gemm(4, 8, 8, 8, 1.0f, static_cast<__half*>(nullptr), p, 0.0f, c),
                    Contains("null"));
  CHECK_THROWS_WITH(tensor_gemm(12, 8, 8, 8, 1.0f, p, p, 0.0f, c), Contains("unknown version"));
  CHECK_THROWS_WITH(tensor_gemm(1, 8, 8, 8, 1.0f, p, p, 0.0f, c, nullptr, Activation::relu),
                    Contains("v2..v11"));
  CHECK_THROWS_WITH(tensor_gemm(9, 8, 8, 12, 1.0f, p, p, 0.0f, c), Contains("multiples of 8"));
  CHECK_THROWS_WITH(tensor_gemm(9, 8, 8, 8, 1.0f, p + 1, p, 0.0f, c), Contains("16-byte"));
  CHECK_THROWS_WITH(tensor_gemm(10, 8, 12, 8, 1.0f, p, p, 0.0f, c), Contains("multiples of 8"));
  CHECK_THROWS_WITH(tensor_gemm(10, 8, 8, 8, 1.0f, p, p + 1, 0.0f, c), Contains("16-byte"));
  CHECK_THROWS_WITH(tensor_gemm(8, 8, 8, 12, 1.0f, p, p, 0.0f, c), Contains("multiples of 8"));
  CHECK_THROWS_WITH(gemm_v8_splitk(-1, 8, 8, 8, 1.0f, p, p, 0.0f, c), Contains("splits"));
  CHECK_THROWS_WITH(gemm_v8_splitk(v8splitk::kMaxSplits + 1, 8, 8, 8, 1.0f, p, p, 0.0f, c),
                    Contains("splits"));
  CHECK_THROWS_WITH(gemm_v8_splitk(0, 8, 12, 8, 1.0f, p, p, 0.0f, c), Contains("multiples of 8"));
  CHECK_THROWS_WITH(
      tensor_gemm(4, 8, 8, 8, 1.0f, p, p, 0.0f, c, nullptr, static_cast<Activation>(7)),
      Contains("unknown activation"));
  CHECK_THROWS_WITH(tensor_gemm(4, 50000, 50000, 8, 1.0f, p, p, 0.0f, c), Contains("INT_MAX"));
  // M == 0 or N == 0: nothing to do, no pointer read, no CUDA call.
  CHECK_NOTHROW(tensor_gemm<__half, float>(4, 0, 8, 8, 1.0f, nullptr, nullptr, 0.0f, nullptr));
  CHECK_NOTHROW(gemm_v8_splitk<__half, float>(3, 8, 0, 8, 1.0f, nullptr, nullptr, 0.0f, nullptr));
}

TEST_CASE("cutlass_gemm checks its arguments before any CUDA call", "[cpu][cutlass]") {
  __half* p = reinterpret_cast<__half*>(std::uintptr_t{256});  // never dereferenced
  CHECK_THROWS_WITH(cutlass_gemm(-1, 8, 8, 1.0f, p, p, 0.0f, p), Contains(">= 0"));
  CHECK_THROWS_WITH(cutlass_gemm(8, 8, 12, 1.0f, p, p, 0.0f, p), Contains("multiples of 8"));
  CHECK_THROWS_WITH(cutlass_gemm(8, 12, 8, 1.0f, p, p, 0.0f, p), Contains("multiples of 8"));
  CHECK_THROWS_WITH(cutlass_gemm(8, 8, 8, 1.0f, p + 1, p, 0.0f, p), Contains("16-byte"));
  CHECK_THROWS_WITH(cutlass_gemm(8, 8, 8, 1.0f, p, p, 0.0f, p + 1), Contains("C must be 16-byte"));
  CHECK_THROWS_WITH(cutlass_gemm(8, 8, 0, 1.0f, p, p, 0.0f, p), Contains("K must be >= 1"));
  CHECK_THROWS_WITH(cutlass_gemm(8, 8, 8, 1.0f, p, p, 0.0f, static_cast<__half*>(nullptr)),
                    Contains("C is null"));
  CHECK_NOTHROW(cutlass_gemm<__half>(0, 8, 8, 1.0f, nullptr, nullptr, 0.0f, nullptr));
  CHECK_THROWS_WITH(
      cutlass_gemm(8, 8, 8, 1.0f, p, p, 0.0f, p, nullptr, static_cast<CutlassKernel>(7)),
      Contains("not one of CutlassKernel's values"));
  CHECK(std::string(to_string(CutlassKernel::pingpong_64x256)) == "pingpong_64x256");
}

// ---------------------------------------------------------------- CPU: v8's plan

TEST_CASE("v8's K slices: contiguous, in order, sizes within one tile, empty past the tiles",
          "[cpu][v8]") {
  using v8splitk::split_begin;
  for (int k_tiles = 1; k_tiles <= 70; ++k_tiles)
    for (int splits = 1; splits <= v8splitk::kMaxSplits; ++splits) {
      INFO(k_tiles << " K tiles, " << splits << " slices");
      REQUIRE(split_begin(0, splits, k_tiles) == 0);
      REQUIRE(split_begin(splits, splits, k_tiles) == k_tiles);
      int empty = 0;
      for (int z = 0; z < splits; ++z) {
        const int size = split_begin(z + 1, splits, k_tiles) - split_begin(z, splits, k_tiles);
        CHECK(size >= k_tiles / splits);
        CHECK(size <= k_tiles / splits + 1);
        empty += size == 0 ? 1 : 0;
      }
      CHECK(empty == std::max(0, splits - k_tiles));
    }
}

TEST_CASE("v8's split plan: one wave, slices of 4+ K tiles, a short tail, and the largest such S",
          "[cpu][v8]") {
  using namespace v8splitk;
  // The 4096 x 4096 layer on an H200 (132 SMs), with the blocks per SM that the shared memory
  // (45, 54 and 72 KiB + 1 KiB reserved each, of 228 KiB) and the registers (ptxas, CUDA 13.0:
  // 96, 144 and 168 per thread) leave: 4 of 16 rows, 3 of 32, 3 of 64.
  struct Want {
    int M, per_sm, bm, splits;
  };
  for (const Want w :
       {Want{1, 4, 16, 8}, Want{2, 4, 16, 8}, Want{16, 4, 16, 8}, Want{17, 3, 32, 6},
        Want{32, 3, 32, 4}, Want{64, 3, 64, 2}, Want{65, 3, 64, 2}, Want{300, 3, 64, 1}}) {
    INFO("M " << w.M);
    const SplitPlan p = plan_splits(w.M, 4096, 4096, 132, w.per_sm, 0);
    CHECK(p.bm == w.bm);
    CHECK(p.tiles_n == 64);
    CHECK(p.k_tiles == 64);
    CHECK(p.splits == w.splits);
  }
  CHECK(smem_bytes(16) == 46080);
  CHECK(smem_bytes(32) == 55296);
  CHECK(smem_bytes(64) == 73728);
  for (const int bm : {16, 32, 64}) CHECK(smem_bytes(bm) <= 99 * 1024);  // sm_86/89 opt-in too
  CHECK(4 * (smem_bytes(32) + 1024) <= 228 * 1024);  // 4 per Hopper SM, as far as smem goes
  // A forced S is taken as it is, even past the K tiles.
  const SplitPlan forced = plan_splits(17, 264, 200, 132, 4, 7);
  CHECK(forced.splits == 7);
  CHECK(forced.k_tiles == 4);
  CHECK(forced.workspace_floats == std::size_t{7} * 17 * 264);
  CHECK(forced.tickets == std::size_t{1} * 5);
  // Every shape: the rules of plan_splits, and S is the largest that keeps them.
  for (const int M : {1, 3, 16, 17, 31, 32, 33, 64, 65, 100, 300, 1000, 5000})
    for (const int N : {8, 64, 72, 1000, 4096})
      for (const int K : {8, 64, 200, 256, 1000, 4096, 8192})
        for (const int sms : {1, 46, 108, 132})
          for (const int per_sm : {1, 2, 3, 4}) {
            INFO("M " << M << " N " << N << " K " << K << ", " << sms << " SMs x " << per_sm);
            const SplitPlan p = plan_splits(M, N, K, sms, per_sm, 0);
            REQUIRE(p.bm == block_rows(M));
            CHECK((p.bm == 16 || p.bm == 32 || p.bm == 64));
            CHECK(p.bm >= std::min(M, 64));
            CHECK(static_cast<long long>(p.tiles_m) * p.bm >= M);
            CHECK(static_cast<long long>(p.tiles_n) * BN >= N);
            CHECK(static_cast<long long>(p.k_tiles) * BK >= K);
            const long long tiles = static_cast<long long>(p.tiles_m) * p.tiles_n;
            const int rows = std::min(M, p.bm);
            const auto keeps_rules = [&](long long s) {
              return s <= kMaxSplits && tiles * s <= static_cast<long long>(sms) * per_sm &&
                     p.k_tiles / s >= kMinKTilesPerSplit && s * rows <= kMaxReduceRows;
            };
            REQUIRE(p.splits >= 1);
            CHECK((p.splits == 1 || keeps_rules(p.splits)));
            CHECK(!keeps_rules(p.splits + 1));
            CHECK(p.workspace_floats ==
                  (p.splits > 1 ? static_cast<std::size_t>(p.splits) * M * N : 0));
            CHECK(p.tickets == (p.splits > 1 ? static_cast<std::size_t>(tiles) : 0));
          }
}

// ---------------------------------------------------------------- CPU: v9's clusters

TEST_CASE(
    "v9's clusters: a pair is two tile rows of one column, every tile once, idle blocks "
    "only on an odd last row",
    "[cpu][v9]") {
  using namespace v9cluster;
  for (int tiles_m = 1; tiles_m <= 21; ++tiles_m)
    for (int tiles_n = 1; tiles_n <= 6; ++tiles_n) {
      INFO("tiles " << tiles_m << " x " << tiles_n);
      const int blocks = grid_blocks(tiles_m, tiles_n);
      REQUIRE(blocks % kClusterSize == 0);
      CHECK(blocks == (tiles_m + tiles_m % 2) * tiles_n);
      std::vector<int> seen(static_cast<std::size_t>(tiles_m) * tiles_n, 0);
      int idle = 0;
      for (int cluster = 0; cluster < blocks / kClusterSize; ++cluster) {
        const BlockTile t0 = block_tile(cluster, 0, tiles_m, tiles_n);
        const BlockTile t1 = block_tile(cluster, 1, tiles_m, tiles_n);
        // One column of B for both; consecutive rows, the even one first.
        CHECK(t0.n == t1.n);
        CHECK(t0.m % 2 == 0);
        CHECK(t1.m == t0.m + 1);
        CHECK(t0.has_tile);  // rank 0 always has a tile: only rank 1 can run off the last row
        for (const BlockTile& t : {t0, t1}) {
          REQUIRE(t.n >= 0);
          REQUIRE(t.n < tiles_n);
          CHECK(t.has_tile == (t.m < tiles_m));
          if (t.has_tile) {
            ++seen[static_cast<std::size_t>(t.m) * tiles_n + t.n];
          } else {
            CHECK(t.m == tiles_m);
            ++idle;
          }
        }
      }
      CHECK(std::count(seen.begin(), seen.end(), 1) == static_cast<long>(seen.size()));
      CHECK(idle == (tiles_m % 2 == 1 ? tiles_n : 0));
    }
  // The raster groups: 4 pair rows = v6's 8 tile rows, column by column within a group.
  const int tm = 11, tn = 3;  // 6 pair rows: a group of 4, then one of 2
  CHECK(block_tile(0, 0, tm, tn).m == 0);
  CHECK(block_tile(1, 0, tm, tn).m == 2);
  CHECK(block_tile(3, 1, tm, tn).m == 7);
  CHECK(block_tile(4, 0, tm, tn).n == 1);
  CHECK(block_tile(12, 0, tm, tn).m == 8);
  CHECK(block_tile(13, 1, tm, tn).m == 11);
  CHECK_FALSE(block_tile(13, 1, tm, tn).has_tile);
}

TEST_CASE(
    "v9's multicast: each of B's boxes is loaded by one block and written to both; a stage "
    "expects v6's 48 KiB",
    "[cpu][v9]") {
  using namespace v9cluster;
  std::vector<int> loads(kBBoxes, 0);
  for (int rank = 0; rank < kClusterSize; ++rank) {
    CHECK((kMulticastMask >> rank & 1u) == 1u);  // every block receives every box
    for (int b = first_b_box(rank); b < first_b_box(rank) + kBBoxesPerBlock; ++b) {
      REQUIRE(b >= 0);
      REQUIRE(b < kBBoxes);
      ++loads[b];
    }
  }
  CHECK(kMulticastMask == 3u);
  CHECK(std::count(loads.begin(), loads.end(), 1) == kBBoxes);
  CHECK(first_b_box(0) == 0);
  CHECK(first_b_box(1) == 2);  // rank 1 loads columns 128..255 of the tile
  CHECK(stage_tx_bytes(true) == 48 * 1024);
  CHECK(stage_tx_bytes(false) == 32 * 1024);
  CHECK(kEmptyArrivals == 4);
  // What a block reads from L2 per stage: its A and its half of B.
  CHECK(kABytes + kBBoxesPerBlock * kBBoxBytes == 32 * 1024);
}

namespace {
// v9's ring protocol, simulated: two blocks, each a producer and two consumer warp groups, 4
// stages, TMA transfers and remote arrivals that land in any order and at any later time, run
// under random interleavings. The barriers behave as PTX's mbarrier (an arrival count and a
// transaction count per phase; try_wait.parity(p) passes once the phase of parity p has completed).
// Checked: no transfer lands in a stage that a consumer of its block is still reading; a consumer
// reads a stage only when all of that use's bytes are in; every transaction lands in the phase of
// its use (never one phase early); and the run ends with everything consumed (no deadlock).
// `variant` breaks one rule of the kernel, to show that the simulation catches it:
//   0: the kernel's protocol; 1: consumers release only their own block's stage (empty counts
//   2); 2: the block without a tile releases a stage without waiting for it to fill.
struct Barrier {
  int phase = 0, pending = 0, count = 0;
  long tx = 0;
  void init(int n) { phase = 0, pending = count = n, tx = 0; }
  bool passed(int parity) const { return (phase & 1) != parity; }
  void settle() {
    if (pending == 0 && tx == 0) ++phase, pending = count;
  }
};

struct Transfer {
  int dst, stage, use, bytes;
};

// Returns the first violation found, or "" when the run completed cleanly.
std::string simulate_v9_ring(int k_tiles, bool rank1_has_tile, int variant, std::uint32_t seed) {
  using namespace v9cluster;
  constexpr int kStages = 4;
  const bool has_tile[2] = {true, rank1_has_tile};
  const int empty_count = variant == 1 ? kConsumers : kEmptyArrivals;
  Barrier full[2][kStages], empty[2][kStages];
  int landed_use[2][kStages], landed_bytes[2][kStages];
  for (int c = 0; c < 2; ++c)
    for (int s = 0; s < kStages; ++s) {
      full[c][s].init(1);
      empty[c][s].init(empty_count);
      landed_use[c][s] = -1;
      landed_bytes[c][s] = 0;
    }
  int produced[2] = {0, 0};
  int consumed[2][2] = {{0, 0}, {0, 0}};
  int reading[2][2] = {{-1, -1}, {-1, -1}};  // the stage a consumer's wgmma may still read
  bool done[2][2] = {{false, false}, {false, false}};
  std::vector<Transfer> flying;
  std::vector<std::pair<int, int>> arriving;  // (block, stage): releases on their way
  std::mt19937 rng(seed);
  std::string error;

  const auto release = [&](int c, int s) {
    for (int r = 0; r < 2; ++r)
      if (variant != 1 || r == c) arriving.push_back({r, s});
  };
  for (;;) {
    // Everything that can take a step now: producers (0, 1), consumers (2 + 2c + w), transfers.
    std::vector<int> can;
    for (int c = 0; c < 2; ++c) {
      const int kt = produced[c];
      if (kt < k_tiles &&
          (kt < kStages || empty[c][kt % kStages].passed(pipeline_phase(kt - kStages, kStages))))
        can.push_back(c);
      for (int w = 0; w < 2; ++w) {
        const int t = consumed[c][w];
        if (done[c][w]) continue;
        if (t == k_tiles || full[c][t % kStages].passed(pipeline_phase(t, kStages)) ||
            (variant == 2 && !has_tile[c]))
          can.push_back(2 + 2 * c + w);
      }
    }
    const int events = static_cast<int>(flying.size() + arriving.size());
    for (int i = 0; i < events; ++i) can.push_back(100 + i);
    if (can.empty()) break;
    const int pick = can[rng() % can.size()];
    if (pick < 2) {  // producer: expect_tx + arrive, then issue the TMA loads
      const int c = pick, kt = produced[c]++, s = kt % kStages;
      if (full[c][s].phase != kt / kStages) error = "a producer arrived in the wrong phase";
      full[c][s].tx += stage_tx_bytes(has_tile[c]);
      --full[c][s].pending;
      full[c][s].settle();
      if (has_tile[c]) flying.push_back({c, s, kt, kABytes});
      for (int b = first_b_box(c); b < first_b_box(c) + kBBoxesPerBlock; ++b)
        for (int r = 0; r < 2; ++r)
          if (kMulticastMask >> r & 1u) flying.push_back({r, s, kt, kBBoxBytes});
    } else if (pick < 100) {  // consumer warp group w of block c, v6's schedule (one in flight)
      const int c = (pick - 2) / 2, w = (pick - 2) % 2, kt = consumed[c][w];
      if (kt == k_tiles) {
        if (has_tile[c] && kt > 0) release(c, reading[c][w]);
        reading[c][w] = -1;
        done[c][w] = true;
      } else if (!has_tile[c]) {
        release(c, kt % kStages);
        ++consumed[c][w];
      } else {
        const int s = kt % kStages;
        if (landed_use[c][s] != kt || landed_bytes[c][s] != static_cast<int>(stage_tx_bytes(true)))
          error = "a consumer read a stage before all of its use's bytes were in";
        const int previous = reading[c][w];
        reading[c][w] = s;
        if (kt > 0) release(c, previous);
        ++consumed[c][w];
      }
    } else if (pick - 100 >= static_cast<int>(flying.size())) {  // an arrival on "empty"
      const std::size_t i = static_cast<std::size_t>(pick - 100) - flying.size();
      Barrier& b = empty[arriving[i].first][arriving[i].second];
      arriving.erase(arriving.begin() + static_cast<long>(i));
      if (b.pending <= 0) error = "an empty barrier got more arrivals than it counts";
      --b.pending;
      b.settle();
    } else {  // a transfer lands: the bytes, then complete_tx on the destination's barrier
      const std::size_t i = static_cast<std::size_t>(pick - 100);
      const Transfer t = flying[i];
      flying.erase(flying.begin() + static_cast<long>(i));
      for (int w = 0; w < 2; ++w)
        if (reading[t.dst][w] == t.stage) error = "a transfer overwrote a stage being read";
      if (landed_use[t.dst][t.stage] != t.use) {
        landed_use[t.dst][t.stage] = t.use;
        landed_bytes[t.dst][t.stage] = 0;
      }
      landed_bytes[t.dst][t.stage] += t.bytes;
      Barrier& b = full[t.dst][t.stage];
      if (b.phase != t.use / kStages) error = "a transfer completed in another use's phase";
      b.tx -= t.bytes;
      b.settle();
    }
    if (!error.empty()) return error;
  }
  for (int c = 0; c < 2; ++c)
    for (int w = 0; w < 2; ++w)
      if (!done[c][w] || produced[c] != k_tiles) return "deadlock: a block never finished";
  return "";
}
}  // namespace

TEST_CASE(
    "v9's cluster ring, simulated: no stage refilled while either block reads it, no "
    "phase mixes two uses, no deadlock",
    "[cpu][v9]") {
  for (const bool rank1_has_tile : {true, false})
    for (const int k_tiles : {1, 2, 3, 4, 5, 8, 13})
      for (std::uint32_t seed = 1; seed <= 300; ++seed) {
        INFO("k_tiles " << k_tiles << ", rank 1 has a tile " << rank1_has_tile << ", seed "
                        << seed);
        REQUIRE(simulate_v9_ring(k_tiles, rank1_has_tile, 0, seed).empty());
      }
  // The same simulation with one rule broken finds the failure (a test that cannot fail ...).
  const auto caught = [](int variant, bool rank1_has_tile) {
    for (std::uint32_t seed = 1; seed <= 300; ++seed)
      if (!simulate_v9_ring(9, rank1_has_tile, variant, seed).empty()) return true;
    return false;
  };
  CHECK(caught(1, true));   // a producer refills a stage its peer's consumers still read
  CHECK(caught(2, false));  // the next use's bytes land in a phase still counting the last use's
}

// ---------------------------------------------------------------- GPU

namespace {
float to_f(float v) {
  return v;
}
float to_f(__half v) {
  return __half2float(v);
}
float to_f(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

template <class T>
std::vector<float> host_floats(const course::DeviceBuffer<T>& d) {
  const std::vector<T> h = course::to_host(d);
  std::vector<float> f(h.size());
  for (std::size_t i = 0; i < h.size(); ++i) f[i] = to_f(h[i]);
  return f;
}

double ref_act(double x, Activation act) {
  if (act == Activation::relu) return x > 0 ? x : 0;
  if (act == Activation::gelu)
    return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
  return x;
}

// Runs `gemm` on fresh data of shape M x N x K and checks every element against FP64.
// beta != 0: C starts with values in [-1, 1); beta == 0: C starts as NaN (must not be read).
// gelu_either: accept GELU's erf form as well as the tanh form (cuBLASLt's documentation does not
// say which one its GELU epilogue computes; ours is the tanh form).
template <class In, class Out, class F>
void check_against_reference(int M, int N, int K, float alpha, float beta, bool with_bias,
                             Activation act, F&& gemm, bool gelu_either = false) {
  INFO("M " << M << " N " << N << " K " << K << " alpha " << alpha << " beta " << beta << " bias "
            << with_bias << " act " << to_string(act) << " in " << to_string(dtype_of<In>())
            << " out " << to_string(dtype_of<Out>()));
  const std::size_t an = static_cast<std::size_t>(M) * K, bn = static_cast<std::size_t>(K) * N,
                    cn = static_cast<std::size_t>(M) * N;
  course::DeviceBuffer<In> A(an), B(bn);
  course::DeviceBuffer<Out> C(cn);
  course::DeviceBuffer<float> bias(N);
  fill_uniform(A.data(), an, 11, -1.0f, 1.0f);
  fill_uniform(B.data(), bn, 12, -1.0f, 1.0f);
  fill_uniform(bias.data(), N, 14, -1.0f, 1.0f);
  if (!std::is_same<Out, float>::value) {
    // A bias exactly representable in Out: cuBLASLt takes a half D's bias in D's type (the
    // baseline converts it), and the conversion must not add an error the bound leaves out.
    std::vector<float> rounded = host_floats(bias);
    for (float& v : rounded) v = static_cast<float>(static_cast<Out>(v));
    CUDA_CHECK(cudaMemcpy(bias.data(), rounded.data(), N * sizeof(float), cudaMemcpyHostToDevice));
  }
  if (beta != 0.0f) {
    fill_uniform(C.data(), cn, 13, -1.0f, 1.0f);
  } else {
    CUDA_CHECK(cudaMemset(C.data(), 0xFF, cn * sizeof(Out)));  // NaN in FP32, FP16 and BF16
  }
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> a = host_floats(A), b = host_floats(B), c0 = host_floats(C),
                           bs = host_floats(bias);
  gemm(A.data(), B.data(), C.data(), with_bias ? bias.data() : nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> got = host_floats(C);
  std::size_t bad = 0;
  double worst = 0.0;
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      double abs_sum = 0.0;
      const double dot = reference_element(N, K, a.data(), b.data(), m, n, &abs_sum);
      const std::size_t i = static_cast<std::size_t>(m) * N + n;
      const double cold = beta != 0.0f ? c0[i] : 0.0;
      const double bias_n = with_bias ? bs[n] : 0.0;
      const double exact = ref_act(alpha * dot + beta * cold + bias_n, act);
      const double tol = tensor_gemm_error_bound(K, alpha, abs_sum, beta, cold, bias_n, act,
                                                 dtype_of<Out>(), exact);
      double err = std::fabs(got[i] - exact);
      if (gelu_either && act == Activation::gelu) {
        const double x = alpha * dot + beta * cold + bias_n;
        const double erf_form = 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
        err = std::min(err, std::fabs(got[i] - erf_form));
      }
      if (!(err <= tol)) {
        if (bad < 5)
          UNSCOPED_INFO("C[" << m << "][" << n << "] = " << got[i] << ", exact " << exact);
        ++bad;
      }
      worst = std::max(worst, tol > 0 ? err / tol : err);
    }
  INFO("worst error / bound " << worst);
  CHECK(bad == 0);
}

struct Case {
  int M, N, K;
};
// Off the 128x128 tile grid and the K tiles (32 / 64): tails everywhere; sizes multiples of 8
// where v2..v5 need it.
const std::vector<Case> kAlignedCases = {{8, 8, 8}, {1, 8, 16}, {129, 136, 72}, {200, 264, 520}};
const std::vector<Case> kAnyCases = {{1, 1, 1}, {127, 129, 65}, {130, 70, 33}, {64, 200, 300}};

// The current device's compute capability as 10 x major + minor (90 for an H100 or H200).
int current_cc() {
  int device = 0, major = 0, minor = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return major * 10 + minor;
}

// Skips (with a note) a version the GPU or the build lacks: "not supported", never a failure.
bool supported(int version, DType in) {
  std::string why;
  if (version_supported(version, in, &why)) return true;
  WARN("v" << version << " " << to_string(in) << " not supported on this GPU: " << why);
  return false;
}

template <class In, class Out>
void check_version(int version) {
  if (!supported(version, dtype_of<In>())) return;
  const auto run = [&](int M, int N, int K, float alpha, float beta, bool bias, Activation act) {
    check_against_reference<In, Out>(M, N, K, alpha, beta, bias, act,
                                     [&](const In* A, const In* B, Out* C, const float* b) {
                                       tensor_gemm(version, M, N, K, alpha, A, B, beta, C, b, act);
                                     });
  };
  for (const Case& c : version == 1 ? kAnyCases : kAlignedCases) {
    run(c.M, c.N, c.K, 1.0f, 0.0f, false, Activation::none);
    run(c.M, c.N, c.K, 1.5f, -0.5f, false, Activation::none);
  }
  if (version >= 2) {
    run(129, 136, 72, 1.0f, 0.5f, true, Activation::relu);
    run(129, 136, 72, 1.0f, 0.0f, true, Activation::gelu);
    run(70, 8, 8, 1.0f, 0.0f, false, Activation::gelu);
  }
  run(130, 72, 0, 1.0f, 0.5f, false, Activation::none);  // K == 0: C = beta * C
}

template <class In, class Out>
void check_version_vs_cublas(int version) {
  if (!supported(version, dtype_of<In>())) return;
  const int M = 1024, N = 1000, K = 1024;
  const std::size_t an = std::size_t{1} * M * K, bn = std::size_t{1} * K * N,
                    cn = std::size_t{1} * M * N;
  course::DeviceBuffer<In> A(an), B(bn);
  course::DeviceBuffer<float> C(cn), R(cn);
  fill_uniform(A.data(), an, 21, -1.0f, 1.0f);
  fill_uniform(B.data(), bn, 22, -1.0f, 1.0f);
  Blas blas;
  tensor_gemm(version, M, N, K, 1.0f, A.data(), B.data(), 0.0f, C.data());
  cublas_gemm(blas, M, N, K, 1.0f, A.data(), B.data(), 0.0f, R.data());
  const std::vector<float> got = course::to_host(C), want = course::to_host(R);
  // sum|a b| <= K (|a|, |b| < 1): both results are within (K + 3) * 2^-23 * K of the exact one.
  const double tol =
      2.0 * tensor_gemm_error_bound(K, 1.0, K, 0.0, 0.0, 0.0, Activation::none, DType::f32, 0.0);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < cn; ++i)
    if (!(std::fabs(got[i] - want[i]) <= tol)) ++bad;
  CHECK(bad == 0);
}
}  // namespace

namespace {
// Every input/output pair of one version, then one 1024-sized FP16 product against cuBLAS.
void check_all_types(int version) {
  check_version<__half, float>(version);
  check_version<__half, __half>(version);
  check_version<__nv_bfloat16, float>(version);
  check_version<__nv_bfloat16, __nv_bfloat16>(version);
  check_version_vs_cublas<__half, float>(version);
}
}  // namespace

TEST_CASE("v1 WMMA: every element vs FP64, FP16 and BF16, any shape", "[gpu][v1]") {
  check_all_types(1);
}
TEST_CASE("v2 mma.sync + ldmatrix: every element vs FP64", "[gpu][v2]") {
  check_all_types(2);
}
TEST_CASE("v3 swizzled shared memory: every element vs FP64", "[gpu][v3]") {
  check_all_types(3);
}
TEST_CASE("v4 cp.async pipeline: every element vs FP64", "[gpu][v4]") {
  check_all_types(4);
  check_version_vs_cublas<__nv_bfloat16, float>(4);
}

namespace {
// Whether this GPU and build run v4 with `tile` (a small product: NotSupported says why not).
bool tile_supported(V4Tile tile) {
  if (!supported(4, DType::f16)) return false;
  course::DeviceBuffer<__half> A(64), B(64);
  course::DeviceBuffer<float> C(64);
  try {
    gemm_v4_tile(tile, 8, 8, 8, 1.0f, A.data(), B.data(), 0.0f, C.data());
  } catch (const NotSupported& e) {
    WARN(e.what());
    return false;
  }
  return true;
}

template <class In, class Out>
void check_v4_tile(V4Tile tile, int M, int N, int K, float alpha, float beta, Activation act) {
  check_against_reference<In, Out>(M, N, K, alpha, beta, act != Activation::none, act,
                                   [&](const In* A, const In* B, Out* C, const float* bias) {
                                     gemm_v4_tile(tile, M, N, K, alpha, A, B, beta, C, bias, act);
                                   });
}
}  // namespace

TEST_CASE("v4 with the earlier tiles (128x128 and 128x256, K tiles of 32): every element vs FP64",
          "[gpu][v4]") {
  for (const V4Tile tile : {V4Tile::t128x128_s4, V4Tile::t128x256_s3}) {
    INFO("tile " << to_string(tile));
    if (!tile_supported(tile)) continue;
    for (const Case& c : kAlignedCases) {
      check_v4_tile<__half, __half>(tile, c.M, c.N, c.K, 1.0f, 0.0f, Activation::none);
      check_v4_tile<__nv_bfloat16, __nv_bfloat16>(tile, c.M, c.N, c.K, 1.0f, 0.5f,
                                                  Activation::none);
    }
    check_v4_tile<__half, __half>(tile, 129, 264, 72, 1.0f, 0.0f, Activation::gelu);
  }
}

TEST_CASE("v4 tuned 128x256x64 (4 and 3 stages): odd shapes, every type, every element vs FP64",
          "[gpu][v4]") {
  // M, N, K off the 128 x 256 x 64 tile (N, K multiples of 8), one exact multi-tile shape, and
  // 18 block rows: more than one raster group of 16, the last one short.
  const std::vector<Case> cases = {{1, 8, 8},       {7, 1000, 72},    {129, 264, 1000},
                                   {257, 520, 136}, {1000, 136, 520}, {256, 512, 192},
                                   {2177, 264, 64}, {130, 8, 8}};
  for (const V4Tile tile : {V4Tile::t128x256_k64_s4, V4Tile::t128x256_k64_s3}) {
    INFO("tile " << to_string(tile));
    if (!tile_supported(tile)) continue;
    for (const Case& c : cases)
      for (const float beta : {0.0f, -0.5f}) {
        const float alpha = beta == 0.0f ? 1.0f : 1.5f;
        check_v4_tile<__half, float>(tile, c.M, c.N, c.K, alpha, beta, Activation::none);
        check_v4_tile<__half, __half>(tile, c.M, c.N, c.K, alpha, beta, Activation::none);
        check_v4_tile<__nv_bfloat16, float>(tile, c.M, c.N, c.K, alpha, beta, Activation::none);
        check_v4_tile<__nv_bfloat16, __nv_bfloat16>(tile, c.M, c.N, c.K, alpha, beta,
                                                    Activation::none);
      }
    check_v4_tile<__half, __half>(tile, 257, 264, 72, 1.0f, 0.5f, Activation::relu);
    check_v4_tile<__nv_bfloat16, float>(tile, 129, 520, 136, 1.0f, 0.0f, Activation::gelu);
    check_v4_tile<__half, float>(tile, 130, 72, 0, 1.0f, 0.5f, Activation::none);  // K == 0
  }
  // tensor_gemm(4) takes the tuned tile wherever the GPU has the shared memory for it.
  if (!supported(4, DType::f16)) return;
  int device = 0, optin = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (optin >= v4tuned::smem_bytes(4)) CHECK(v4_tile_for_device() == kDefaultV4Tile);
}
TEST_CASE("v4 tuned: a C not aligned for paired stores gives the same bits", "[gpu][v4]") {
  // The write-out stores column pairs as one vector where C allows it, else one by one.
  for (const V4Tile tile : {V4Tile::t128x256_k64_s4, V4Tile::t128x256_k64_s3}) {
    if (!tile_supported(tile)) continue;
    const int M = 129, N = 264, K = 72;
    course::DeviceBuffer<__half> A(std::size_t{1} * M * K), B(std::size_t{1} * K * N);
    course::DeviceBuffer<float> bias(N), C(std::size_t{1} * M * N), D(std::size_t{1} * M * N + 1);
    fill_uniform(A.data(), A.size(), 31, -1.0f, 1.0f);
    fill_uniform(B.data(), B.size(), 32, -1.0f, 1.0f);
    fill_uniform(bias.data(), bias.size(), 33, -1.0f, 1.0f);
    fill_uniform(C.data(), C.size(), 34, -1.0f, 1.0f);
    CUDA_CHECK(
        cudaMemcpy(D.data() + 1, C.data(), C.size() * sizeof(float), cudaMemcpyDeviceToDevice));
    // beta != 0 and ReLU: the same operations in the same order on both paths (no multiply
    // left for the compiler to contract differently).
    gemm_v4_tile(tile, M, N, K, 1.5f, A.data(), B.data(), 0.5f, C.data(), bias.data(),
                 Activation::relu);
    gemm_v4_tile(tile, M, N, K, 1.5f, A.data(), B.data(), 0.5f, D.data() + 1, bias.data(),
                 Activation::relu);
    const std::vector<float> c = course::to_host(C), d = course::to_host(D);
    std::size_t differ = 0;
    for (std::size_t i = 0; i < c.size(); ++i) differ += c[i] != d[i + 1] ? 1 : 0;
    CHECK(differ == 0);
  }
}

TEST_CASE("v5 TMA + wgmma: every element vs FP64", "[gpu][v5]") {
  check_all_types(5);
  check_version_vs_cublas<__nv_bfloat16, float>(5);
}

// The 128x256 kernel's own edges (v6, v7): tiles of 128 x 256 and K tiles of 64, so sizes off
// both (M not a multiple of 128, N of 256 and of 64, K of 64), more tile rows than one group of 8
// (M = 1153: 10 tile rows, the last group of 2), several tile columns (N = 520: 3), a K of one
// partial tile (K = 8) and of many full ones plus a tail (K = 1000: 15 full + 40), a single row
// and a single 8-wide column. `gemm(M, N, K, alpha, A, B, beta, C, bias, act)` runs the kernel.
template <class G>
void check_128x256_edges(G&& gemm) {
  const auto run = [&](int M, int N, int K, float beta, Activation act, auto in, auto out) {
    using In = decltype(in);
    using Out = decltype(out);
    check_against_reference<In, Out>(M, N, K, 1.0f, beta, act != Activation::none, act,
                                     [&](const In* A, const In* B, Out* C, const float* bias) {
                                       gemm(M, N, K, 1.0f, A, B, beta, C, bias, act);
                                     });
  };
  const std::vector<Case> cases = {{257, 264, 72}, {300, 520, 136}, {1153, 264, 64}, {129, 8, 1000},
                                   {1, 256, 64},   {255, 512, 8},   {384, 248, 200}};
  for (const Case& c : cases) {
    run(c.M, c.N, c.K, 0.0f, Activation::none, __half{}, float{});
    run(c.M, c.N, c.K, 0.5f, Activation::none, __nv_bfloat16{}, __nv_bfloat16{});
  }
  run(300, 520, 136, 0.5f, Activation::relu, __half{}, __half{});
  run(300, 520, 136, 0.0f, Activation::gelu, __nv_bfloat16{}, float{});
}

// tensor_gemm(version, ...) as a callable for check_128x256_edges.
struct ByVersion {
  int version;
  template <class In, class Out>
  void operator()(int M, int N, int K, float alpha, const In* A, const In* B, float beta, Out* C,
                  const float* bias, Activation act) const {
    tensor_gemm(version, M, N, K, alpha, A, B, beta, C, bias, act);
  }
};

TEST_CASE("v6 128x256 tile: every element vs FP64", "[gpu][v6]") {
  check_all_types(6);
  check_version_vs_cublas<__nv_bfloat16, float>(6);
  if (supported(6, DType::f16)) check_128x256_edges(ByVersion{6});
}

TEST_CASE("v7 persistent: every element vs FP64", "[gpu][v7]") {
  check_all_types(7);
  check_version_vs_cublas<__nv_bfloat16, float>(7);
  if (supported(7, DType::f16)) check_128x256_edges(ByVersion{7});
}

// Few blocks, many tiles each: the ring's stages and phases run on across tiles (3 and 4 K tiles
// per output tile against 4 stages, so a tile starts mid-ring), and a block's next loads overlap
// its write-out.
TEST_CASE("v7 with 3 and 7 blocks looping over 30 tiles: every element vs FP64", "[gpu][v7]") {
  if (!supported(7, DType::f16)) return;
  for (const int blocks : {3, 7})
    check_128x256_edges([blocks](int M, int N, int K, float alpha, auto A, auto B, float beta,
                                 auto C, const float* bias, Activation act) {
      gemm_v7_persistent(blocks, M, N, K, alpha, A, B, beta, C, bias, act, nullptr);
    });
  for (const int K : {136, 200})
    check_against_reference<__half, float>(
        1153, 520, K, 1.0f, 0.0f, false, Activation::none,
        [K](const __half* A, const __half* B, float* C, const float*) {
          gemm_v7_persistent(3, 1153, 520, K, 1.0f, A, B, 0.0f, C, nullptr, Activation::none,
                             nullptr);
        });
}

// v6 stores column pairs when C is aligned to two elements, single elements otherwise: both
// paths must give the same bits.
TEST_CASE("v6 with C at an odd element offset gives the same bits as aligned C", "[gpu][v6]") {
  if (!supported(6, DType::f16)) return;
  const int M = 200, N = 264, K = 136;
  const std::size_t an = std::size_t{1} * M * K, bn = std::size_t{1} * K * N,
                    cn = std::size_t{1} * M * N;
  course::DeviceBuffer<__half> A(an), B(bn), C(cn), C_odd(cn + 1);
  course::DeviceBuffer<float> bias(N);
  fill_uniform(A.data(), an, 31, -1.0f, 1.0f);
  fill_uniform(B.data(), bn, 32, -1.0f, 1.0f);
  fill_uniform(bias.data(), N, 33, -1.0f, 1.0f);
  fill_uniform(C.data(), cn, 34, -1.0f, 1.0f);
  fill_uniform(C_odd.data() + 1, cn, 34, -1.0f, 1.0f);
  tensor_gemm(6, M, N, K, 1.0f, A.data(), B.data(), 0.5f, C.data(), bias.data(), Activation::gelu);
  tensor_gemm(6, M, N, K, 1.0f, A.data(), B.data(), 0.5f, C_odd.data() + 1, bias.data(),
              Activation::gelu);
  const std::vector<__half> aligned = course::to_host(C), odd = course::to_host(C_odd);
  std::size_t differ = 0;
  for (std::size_t i = 0; i < cn; ++i)
    if (std::memcmp(&aligned[i], &odd[i + 1], sizeof(__half)) != 0) ++differ;
  CHECK(differ == 0);
}

// ---------------------------------------------------------------- GPU: v9, clusters

TEST_CASE("v9 clusters with TMA multicast: every element vs FP64", "[gpu][v9]") {
  check_all_types(9);
  check_version_vs_cublas<__nv_bfloat16, float>(9);
  // The 128x256 edges: 1, 3 (M = 257, 300, 384) and 10 tile rows, so both odd counts (the last
  // pair's rank-1 block has no tile) and even ones.
  if (supported(9, DType::f16)) check_128x256_edges(ByVersion{9});
}

TEST_CASE("v9's clusters fit the GPU: at least one resident, at most one block per SM",
          "[gpu][v9]") {
  if (!supported(9, DType::f16)) return;
  int device = 0, sms = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const int clusters = v9_active_clusters();
  INFO(clusters << " clusters of 2 on " << sms << " SMs");
  CHECK(clusters >= 1);
  CHECK(2 * clusters <= sms);
}

// v9's own edges: odd numbers of tile rows (a block with no tile in every column of the last pair
// row) alone and across raster groups of 4 pair rows, exact multiples of the tile, a single tile
// column of 8, a K of one partial tile (K = 8) and Ks that wrap the 4-stage ring (K = 264: 5 K
// tiles; 520: 9).
TEST_CASE(
    "v9 with odd tile rows, several raster groups, small K and a wrapping ring: every "
    "element vs FP64",
    "[gpu][v9]") {
  if (!supported(9, DType::f16)) return;
  const std::vector<Case> cases = {
      {128, 256, 64},    // 1 tile row: half of the one cluster has no tile
      {384, 512, 8},     // 3 tile rows, exact; K = 8
      {383, 8, 520},     // 3 tile rows, one 8-wide tile column, 9 K tiles
      {1300, 776, 264},  // 11 tile rows (6 pair rows: groups of 4 and 2), 4 tile columns
      {2305, 264, 136},  // 19 tile rows (10 pair rows: 4, 4, 2), 2 tile columns
      {1024, 520, 72},   // 8 tile rows: every block has a tile
  };
  for (const Case& c : cases) {
    const auto gemm = [&](auto in, auto out, float alpha, float beta, Activation act) {
      using In = decltype(in);
      using Out = decltype(out);
      check_against_reference<In, Out>(c.M, c.N, c.K, alpha, beta, act != Activation::none, act,
                                       [&](const In* A, const In* B, Out* C, const float* bias) {
                                         tensor_gemm(9, c.M, c.N, c.K, alpha, A, B, beta, C, bias,
                                                     act);
                                       });
    };
    gemm(__half{}, float{}, 1.0f, 0.0f, Activation::none);
    gemm(__nv_bfloat16{}, __nv_bfloat16{}, 1.5f, -0.5f, Activation::none);
  }
  check_against_reference<__half, __half>(
      1300, 776, 264, 1.0f, 0.5f, true, Activation::gelu,
      [](const __half* A, const __half* B, __half* C, const float* bias) {
        tensor_gemm(9, 1300, 776, 264, 1.0f, A, B, 0.5f, C, bias, Activation::gelu);
      });
}

// C = relu(alpha A B + beta C + bias) in FP16 by v6 and by `gemm(M, N, K, alpha, A, B, beta, C,
// bias)` (the same arguments, ReLU), once with C aligned for the vector stores and once at an odd
// element offset (the scalar path): both must have v6's bits. beta != 0, or alpha == 1: no
// multiply left that two kernels could contract differently with an add (v4's test's reason for
// ReLU too). Three shapes: tails in M, N and K; 11 x 4 tiles with 5 K tiles, which wrap the
// 4-stage ring; one 8-wide column with a single partial K tile.
template <class G>
void check_v6_bits(G&& gemm, float alpha = 1.5f, float beta = 0.5f) {
  for (const Case& c : std::vector<Case>{{257, 264, 72}, {1300, 776, 264}, {128, 8, 8}}) {
    INFO("M " << c.M << " N " << c.N << " K " << c.K);
    const std::size_t an = std::size_t{1} * c.M * c.K, bn = std::size_t{1} * c.K * c.N,
                      cn = std::size_t{1} * c.M * c.N;
    course::DeviceBuffer<__half> A(an), B(bn), C6(cn), C(cn), C_odd(cn + 1);
    course::DeviceBuffer<float> bias(c.N);
    fill_uniform(A.data(), an, 41, -1.0f, 1.0f);
    fill_uniform(B.data(), bn, 42, -1.0f, 1.0f);
    fill_uniform(bias.data(), c.N, 43, -1.0f, 1.0f);
    for (__half* p : {C6.data(), C.data(), C_odd.data() + 1}) fill_uniform(p, cn, 44, -1.0f, 1.0f);
    tensor_gemm(6, c.M, c.N, c.K, alpha, A.data(), B.data(), beta, C6.data(), bias.data(),
                Activation::relu);
    gemm(c.M, c.N, c.K, alpha, A.data(), B.data(), beta, C.data(), bias.data());
    gemm(c.M, c.N, c.K, alpha, A.data(), B.data(), beta, C_odd.data() + 1, bias.data());
    const std::vector<__half> v6 = course::to_host(C6), got = course::to_host(C),
                              odd = course::to_host(C_odd);
    std::size_t differ = 0, differ_odd = 0;
    for (std::size_t i = 0; i < cn; ++i) {
      if (std::memcmp(&v6[i], &got[i], sizeof(__half)) != 0) ++differ;
      if (std::memcmp(&v6[i], &odd[i + 1], sizeof(__half)) != 0) ++differ_odd;
    }
    CHECK(differ == 0);
    CHECK(differ_odd == 0);
  }
}

// v9 issues v6's wgmma on v6's shared-memory layout in v6's order: the same bits.
TEST_CASE("v9 gives v6's bits, with C aligned and at an odd element offset", "[gpu][v9]") {
  if (!supported(9, DType::f16) || !supported(6, DType::f16)) return;
  check_v6_bits([](int M, int N, int K, float alpha, const __half* A, const __half* B, float beta,
                   __half* C, const float* bias) {
    tensor_gemm(9, M, N, K, alpha, A, B, beta, C, bias, Activation::relu);
  });
}

// ---------------------------------------------------------------- GPU: v10, persistent + staged

TEST_CASE("v10 persistent with a staging buffer: every element vs FP64", "[gpu][v10]") {
  check_all_types(10);
  check_version_vs_cublas<__nv_bfloat16, float>(10);
  // The 128x256 edges on one block per SM: fewer tiles than SMs, each block one tile.
  if (supported(10, DType::f16)) check_128x256_edges(ByVersion{10});
}

// Few blocks, many tiles each: the ring's stages and phases run on across tiles (K tiles per
// output tile 1, 2, 3, 4 and 16 against 4 stages, so tiles start mid-ring), the producer loads the
// next tile while the consumers write this one out through their buffers, and the last round is
// partial (20 tiles of M = 1153, N = 264 on 3 blocks: 7 rounds, the last with 2 tiles; on 7: 3
// rounds, the last with 6; 30 tiles of M = 1153, N = 520 on 7: 5 rounds, the last with 2).
TEST_CASE("v10 with 3 and 7 blocks looping over up to 30 tiles: every element vs FP64",
          "[gpu][v10]") {
  if (!supported(10, DType::f16)) return;
  for (const int blocks : {3, 7})
    check_128x256_edges([blocks](int M, int N, int K, float alpha, auto A, auto B, float beta,
                                 auto C, const float* bias, Activation act) {
      gemm_v10_persistent_staged(blocks, M, N, K, alpha, A, B, beta, C, bias, act, nullptr);
    });
  for (const int blocks : {3, 7})
    for (const int K : {136, 200})
      check_against_reference<__half, float>(
          1153, 520, K, 1.0f, 0.0f, false, Activation::none,
          [blocks, K](const __half* A, const __half* B, float* C, const float*) {
            gemm_v10_persistent_staged(blocks, 1153, 520, K, 1.0f, A, B, 0.0f, C, nullptr,
                                       Activation::none, nullptr);
          });
}

// The default grid (one block per SM) with more tiles than SMs: about 1.5 tiles per SM (on an
// H200's 132 SMs, 23 tile rows, the last of one row, x 9 tile columns, the last of 8 columns:
// 207 tiles), so some blocks take two tiles and the second round is partial. FP16 and BF16 out,
// beta * C, bias and GELU.
TEST_CASE("v10 with more tiles than SMs: every element vs FP64", "[gpu][v10]") {
  if (!supported(10, DType::f16)) return;
  int device = 0, sms = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const int N = 8 * 256 + 8, K = 72, tiles_n = 9;
  const int tiles_m = 3 * sms / 2 / tiles_n + 1, M = 128 * (tiles_m - 1) + 1;
  INFO(tiles_m * tiles_n << " tiles on " << sms << " SMs");
  REQUIRE(tiles_m * tiles_n > sms);
  REQUIRE(tiles_m * tiles_n % sms != 0);
  check_against_reference<__half, __half>(
      M, N, K, 1.0f, 0.5f, true, Activation::gelu,
      [M](const __half* A, const __half* B, __half* C, const float* bias) {
        tensor_gemm(10, M, N, K, 1.0f, A, B, 0.5f, C, bias, Activation::gelu);
      });
  check_against_reference<__nv_bfloat16, __nv_bfloat16>(
      M, N, K, 1.5f, -0.5f, false, Activation::none,
      [M](const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, const float*) {
        tensor_gemm(10, M, N, K, 1.5f, A, B, -0.5f, C, nullptr, Activation::none);
      });
}

// v10 issues v6's wgmma on v6's shared-memory layout in v6's order and applies store_quad's
// epilogue to each element: the same bits, on one block per SM and on 3 blocks looping over the
// tiles (44 tiles of the second shape: 15 rounds, the last with 2).
TEST_CASE("v10 gives v6's bits, looping or not, with C aligned and at an odd element offset",
          "[gpu][v10]") {
  if (!supported(10, DType::f16) || !supported(6, DType::f16)) return;
  for (const int blocks : {0, 3}) {
    INFO("blocks " << blocks);
    check_v6_bits([blocks](int M, int N, int K, float alpha, const __half* A, const __half* B,
                           float beta, __half* C, const float* bias) {
      gemm_v10_persistent_staged(blocks, M, N, K, alpha, A, B, beta, C, bias, Activation::relu,
                                 nullptr);
    });
  }
}

// ---------------------------------------------------------------- GPU: v11, TMA stores

// check_all_types and the edges run both of v11's paths: beta == 0 (the TMA stores) and
// beta != 0 (v10's write-out).
TEST_CASE("v11 TMA stores: every element vs FP64", "[gpu][v11]") {
  check_all_types(11);
  check_version_vs_cublas<__nv_bfloat16, float>(11);
  if (supported(11, DType::f16)) check_128x256_edges(ByVersion{11});
}

// The TMA store path on few blocks with many tiles each (each warp group's two buffers alternate
// across tiles), every output type, bias with ReLU and GELU, tails the boxes clip at (M = 1153:
// a last tile row of one row; N = 520: a last tile column of 8 columns, 7 of its 8 boxes past N).
TEST_CASE("v11 with 3 and 7 blocks, beta == 0: every element vs FP64", "[gpu][v11]") {
  if (!supported(11, DType::f16)) return;
  const auto run = [](int blocks, int K, Activation act, auto in, auto out) {
    using In = decltype(in);
    using Out = decltype(out);
    check_against_reference<In, Out>(1153, 520, K, 1.0f, 0.0f, act != Activation::none, act,
                                     [&](const In* A, const In* B, Out* C, const float* bias) {
                                       gemm_v11_tma_store(blocks, 1153, 520, K, 1.0f, A, B, 0.0f, C,
                                                          bias, act, nullptr);
                                     });
  };
  for (const int blocks : {3, 7}) {
    run(blocks, 136, Activation::none, __half{}, float{});
    run(blocks, 200, Activation::relu, __half{}, __half{});
    run(blocks, 72, Activation::gelu, __nv_bfloat16{}, __nv_bfloat16{});
    run(blocks, 8, Activation::none, __nv_bfloat16{}, float{});
  }
}

// With beta == 0 and alpha == 1, v11's TMA path (C aligned; at an odd offset it is v10's) stores
// v6's values: the same bits, looping or not.
TEST_CASE("v11's TMA stores give v6's bits", "[gpu][v11]") {
  if (!supported(11, DType::f16) || !supported(6, DType::f16)) return;
  for (const int blocks : {0, 3}) {
    INFO("blocks " << blocks);
    check_v6_bits(
        [blocks](int M, int N, int K, float alpha, const __half* A, const __half* B, float beta,
                 __half* C, const float* bias) {
          gemm_v11_tma_store(blocks, M, N, K, alpha, A, B, beta, C, bias, Activation::relu,
                             nullptr);
        },
        1.0f, 0.0f);
  }
}

// ---------------------------------------------------------------- GPU: v12, the tile order

// Every order on v6's edge shapes (tails in M, N and K, several tile rows and columns, one row,
// one 8-wide column) and on grids where the orders differ most: 11 x 4 and 19 x 2 tiles (the
// Hilbert curve skips cells of its 16 x 16 and 32 x 32 squares; groups of 8 and 16 end short),
// 3 x 9 (more tile columns than rows: the curve's y along the columns).
TEST_CASE("v12 in every tile order: every element vs FP64", "[gpu][v12]") {
  if (!supported(6, DType::f16)) return;
  for (const TileOrder order : kTileOrders) {
    INFO("order " << to_string(order));
    check_128x256_edges([order](int M, int N, int K, float alpha, auto A, auto B, float beta,
                                auto C, const float* bias, Activation act) {
      gemm_v12_tile_order(order, M, N, K, alpha, A, B, beta, C, bias, act);
    });
    for (const Case& c : std::vector<Case>{{1300, 776, 264}, {2305, 264, 136}, {300, 2056, 72}})
      check_against_reference<__nv_bfloat16, float>(
          c.M, c.N, c.K, 1.5f, -0.5f, true, Activation::gelu,
          [&](const __nv_bfloat16* A, const __nv_bfloat16* B, float* C, const float* bias) {
            gemm_v12_tile_order(order, c.M, c.N, c.K, 1.5f, A, B, -0.5f, C, bias, Activation::gelu);
          });
    // K == 0: C = beta C + bias, no tile multiplied.
    check_against_reference<__half, __half>(
        130, 72, 0, 1.0f, 0.5f, true, Activation::none,
        [order](const __half* A, const __half* B, __half* C, const float* bias) {
          gemm_v12_tile_order(order, 130, 72, 0, 1.0f, A, B, 0.5f, C, bias);
        });
  }
}

// Only which block computes which tile changes: every tile is v6's, so every order gives v6's
// bits (check_v6_bits: C aligned and at an odd element offset, beta != 0, ReLU).
TEST_CASE("v12 gives v6's bits in every tile order", "[gpu][v12]") {
  if (!supported(6, DType::f16)) return;
  for (const TileOrder order : kTileOrders) {
    INFO("order " << to_string(order));
    check_v6_bits([order](int M, int N, int K, float alpha, const __half* A, const __half* B,
                          float beta, __half* C, const float* bias) {
      gemm_v12_tile_order(order, M, N, K, alpha, A, B, beta, C, bias, Activation::relu);
    });
  }
}

// On a GPU without v6, v12 reports NotSupported, as v6 does.
TEST_CASE("v12 on a GPU without v6 reports NotSupported", "[gpu][v12]") {
  if (version_supported(6, DType::f16)) return;
  course::DeviceBuffer<__half> A(64), B(64);
  course::DeviceBuffer<float> C(64);
  CHECK_THROWS_AS(
      gemm_v12_tile_order(TileOrder::hilbert, 8, 8, 8, 1.0f, A.data(), B.data(), 0.0f, C.data()),
      NotSupported);
}

// ---------------------------------------------------------------- GPU: v8, split-K

TEST_CASE("v8 split-K: every element vs FP64", "[gpu][v8]") {
  check_all_types(8);
  check_version_vs_cublas<__nv_bfloat16, float>(8);
  // The 128x256 kernels' edge cases are off v8's 16..64 x 64 x 64 tiles too (M = 1153: 19 block
  // rows of 64; K = 8: one partial K tile, so S = 1; K = 1000: 16 K tiles).
  if (supported(8, DType::f16)) check_128x256_edges(ByVersion{8});
}

namespace {
// FP64 references of a whole product, a row at a time with k outer and n inner, so that B is
// read in order: at N = K = 4096 reference_element's walk down B's columns would take minutes.
void reference_rows(int M, int N, int K, const std::vector<float>& a, const std::vector<float>& b,
                    std::vector<double>* dot, std::vector<double>* abs_sum) {
  dot->assign(static_cast<std::size_t>(M) * N, 0.0);
  abs_sum->assign(static_cast<std::size_t>(M) * N, 0.0);
  for (int m = 0; m < M; ++m) {
    double* d = dot->data() + static_cast<std::size_t>(m) * N;
    double* s = abs_sum->data() + static_cast<std::size_t>(m) * N;
    for (int k = 0; k < K; ++k) {
      const double x = a[static_cast<std::size_t>(m) * K + k];
      const float* row = b.data() + static_cast<std::size_t>(k) * N;
      for (int n = 0; n < N; ++n) {
        const double p = x * row[n];
        d[n] += p;
        s[n] += std::fabs(p);
      }
    }
  }
}

// v8 (gemm_v8_splitk with `splits`, 0: its own choice) at a layer's shape: every element against
// FP64 within tensor_gemm_error_bound, as check_against_reference, with the references from
// reference_rows (and a few of them against reference_element, the documented oracle).
template <class In, class Out>
void check_v8_large(int splits, int M, int N, int K, float alpha, float beta, bool with_bias,
                    Activation act) {
  INFO("v8 splits " << splits << " M " << M << " N " << N << " K " << K << " beta " << beta
                    << " bias " << with_bias << " act " << to_string(act) << " in "
                    << to_string(dtype_of<In>()) << " out " << to_string(dtype_of<Out>()));
  const std::size_t an = static_cast<std::size_t>(M) * K, bn = static_cast<std::size_t>(K) * N,
                    cn = static_cast<std::size_t>(M) * N;
  course::DeviceBuffer<In> A(an), B(bn);
  course::DeviceBuffer<Out> C(cn);
  course::DeviceBuffer<float> bias(N);
  fill_uniform(A.data(), an, 41, -1.0f, 1.0f);
  fill_uniform(B.data(), bn, 42, -1.0f, 1.0f);
  fill_uniform(bias.data(), N, 43, -1.0f, 1.0f);
  if (beta != 0.0f)
    fill_uniform(C.data(), cn, 44, -1.0f, 1.0f);
  else
    CUDA_CHECK(cudaMemset(C.data(), 0xFF, cn * sizeof(Out)));  // NaN: must not be read
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> a = host_floats(A), b = host_floats(B), c0 = host_floats(C),
                           bs = host_floats(bias);
  gemm_v8_splitk(splits, M, N, K, alpha, A.data(), B.data(), beta, C.data(),
                 with_bias ? bias.data() : nullptr, act);
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> got = host_floats(C);
  std::vector<double> dot, abs_sum;
  reference_rows(M, N, K, a, b, &dot, &abs_sum);
  for (const std::size_t i : {std::size_t{0}, cn / 2, cn - 1}) {
    double s = 0.0;
    const double d = reference_element(N, K, a.data(), b.data(), static_cast<int>(i / N),
                                       static_cast<int>(i % N), &s);
    REQUIRE(std::fabs(d - dot[i]) <= 1e-9 * (s + 1.0));
  }
  std::size_t bad = 0;
  double worst = 0.0;
  for (std::size_t i = 0; i < cn; ++i) {
    const double cold = beta != 0.0f ? c0[i] : 0.0;
    const double bias_n = with_bias ? bs[i % N] : 0.0;
    const double exact = ref_act(alpha * dot[i] + beta * cold + bias_n, act);
    const double tol = tensor_gemm_error_bound(K, alpha, abs_sum[i], beta, cold, bias_n, act,
                                               dtype_of<Out>(), exact);
    const double err = std::fabs(got[i] - exact);
    if (!(err <= tol)) {
      if (bad < 5)
        UNSCOPED_INFO("C[" << i / N << "][" << i % N << "] = " << got[i] << ", exact " << exact);
      ++bad;
    }
    worst = std::max(worst, tol > 0 ? err / tol : err);
  }
  INFO("worst error / bound " << worst);
  CHECK(bad == 0);
}
}  // namespace

// M from one row to past 4 tiles of 64 (v8's own choice of S: 8 slices at M <= 16, fewer
// above, 1 at M = 300), and N, K off the 64 x 64 tiles.
TEST_CASE("v8 at inference shapes: N = K = 4096, M = 1..300, and odd sizes; every element",
          "[gpu][v8]") {
  if (!supported(8, DType::f16)) return;
  for (const int M : {1, 2, 17, 32, 64, 65, 300})
    check_v8_large<__half, float>(0, M, 4096, 4096, 1.0f, 0.0f, false, Activation::none);
  check_v8_large<__half, __half>(0, 8, 4096, 4096, 1.0f, 0.5f, true, Activation::gelu);
  check_v8_large<__nv_bfloat16, __nv_bfloat16>(0, 32, 4096, 4096, 1.0f, 0.0f, true,
                                               Activation::relu);
  check_v8_large<__nv_bfloat16, float>(0, 5, 1000, 1000, 1.5f, -0.5f, false, Activation::none);
  check_v8_large<__half, float>(0, 3, 4104, 2056, 1.0f, 0.0f, true, Activation::none);
  check_v8_large<__half, __half>(0, 33, 8, 4096, 1.0f, 0.0f, false, Activation::none);
  check_v8_large<__half, float>(0, 50, 1000, 520, 1.0f, 0.25f, true, Activation::gelu);
}

// Forced slice counts: 1 (the direct write-out), 2 and 3, and more slices than K tiles, which
// leaves slices with no K tile at all (K = 200: 4 tiles; K = 8: one partial tile).
TEST_CASE("v8 with forced split counts, some slices empty: every element vs FP64", "[gpu][v8]") {
  if (!supported(8, DType::f16)) return;
  const std::vector<Case> cases = {{17, 264, 200}, {1, 8, 8}, {65, 520, 1000}, {130, 72, 136}};
  for (const int splits : {1, 2, 3, 7, v8splitk::kMaxSplits})
    for (const Case& c : cases) {
      INFO("splits " << splits);
      check_against_reference<__half, float>(
          c.M, c.N, c.K, 1.0f, 0.0f, false, Activation::none,
          [&](const __half* A, const __half* B, float* C, const float*) {
            gemm_v8_splitk(splits, c.M, c.N, c.K, 1.0f, A, B, 0.0f, C);
          });
    }
  for (const int splits : {5, 9})
    check_against_reference<__nv_bfloat16, __nv_bfloat16>(
        33, 136, 264, 1.5f, -0.5f, true, Activation::gelu,
        [&](const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, const float* bias) {
          gemm_v8_splitk(splits, 33, 136, 264, 1.5f, A, B, -0.5f, C, bias, Activation::gelu);
        });
  check_v8_large<__half, float>(v8splitk::kMaxSplits, 17, 4096, 4096, 1.0f, 0.0f, false,
                                Activation::none);
}

namespace {
// One v8 product of a fixed problem into `C` (reset to NaN first), on `stream`.
struct V8Problem {
  int M, N, K;
  course::DeviceBuffer<__half> A, B;
  course::DeviceBuffer<float> bias;
  V8Problem(int m, int n, int k)
      : M(m), N(n), K(k), A(std::size_t{1} * m * k), B(std::size_t{1} * k * n), bias(n) {
    fill_uniform(A.data(), A.size(), 51, -1.0f, 1.0f);
    fill_uniform(B.data(), B.size(), 52, -1.0f, 1.0f);
    fill_uniform(bias.data(), bias.size(), 53, -1.0f, 1.0f);
    CUDA_CHECK(cudaDeviceSynchronize());
  }
  void run(course::DeviceBuffer<__half>& C, cudaStream_t stream, int splits = 0) const {
    CUDA_CHECK(cudaMemsetAsync(C.data(), 0xFF, C.bytes(), stream));
    gemm_v8_splitk(splits, M, N, K, 1.0f, A.data(), B.data(), 0.0f, C.data(), bias.data(),
                   Activation::gelu, stream);
  }
};
std::size_t count_differences(const course::DeviceBuffer<__half>& x,
                              const course::DeviceBuffer<__half>& y) {
  const std::vector<__half> a = course::to_host(x), b = course::to_host(y);
  std::size_t differ = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    differ += std::memcmp(&a[i], &b[i], sizeof(__half)) != 0 ? 1 : 0;
  return differ;
}
}  // namespace

// A ticket left at a non-zero count would make the next call's blocks miss the last one, and
// its C would stay NaN; a sum in the order blocks finish would change bits from call to call.
TEST_CASE("v8 called again: its tickets reset, the same bits, on another stream too", "[gpu][v8]") {
  if (!supported(8, DType::f16)) return;
  const V8Problem layer(17, 4096, 4096), other(40, 1000, 520);
  course::DeviceBuffer<__half> first(std::size_t{1} * 17 * 4096), again(first.size()),
      side(first.size()), small(std::size_t{1} * 40 * 1000), small_again(small.size());
  course::Stream stream, second;
  layer.run(first, stream);
  other.run(small, stream, 6);  // another shape and S between the two: other tickets, other S
  layer.run(again, stream);
  other.run(small_again, stream, 6);
  layer.run(side, second);  // a second stream: its own workspace
  stream.synchronize();
  second.synchronize();
  CHECK(count_differences(first, again) == 0);
  CHECK(count_differences(first, side) == 0);
  CHECK(count_differences(small, small_again) == 0);
  const std::vector<__half> c = course::to_host(first);
  CHECK(std::none_of(c.begin(), c.end(), [](__half h) { return std::isnan(__half2float(h)); }));
}

// In a graph the kernel node keeps the workspace pointers it was captured with: the workspace
// must exist before the capture (v8 refuses to allocate during one, with a message), and the
// tickets the graph's kernel leaves at zero serve its next replay.
TEST_CASE("v8 in a CUDA graph: no allocation in a capture; replayed twice, the same bits",
          "[gpu][v8]") {
  if (!supported(8, DType::f16)) return;
  const V8Problem layer(8, 4096, 4096);
  course::DeviceBuffer<__half> direct(std::size_t{1} * 8 * 4096), replay(direct.size());
  course::Stream stream, fresh;
  layer.run(direct, stream);  // also loads the module before any capture
  stream.synchronize();

  // A workspace larger than this stream has: the call throws instead of allocating inside the
  // capture. (64 slices of 64 x 8192 need 128 MiB, more than any other test's: a new stream may
  // get the handle of a destroyed one, and with it that stream's workspace.)
  const int M = 64, N = 8192, K = 256;
  course::DeviceBuffer<__half> A(std::size_t{1} * M * K), B(std::size_t{1} * K * N),
      C(std::size_t{1} * M * N);
  REQUIRE(cudaStreamBeginCapture(fresh, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  std::string error;
  try {
    gemm_v8_splitk(v8splitk::kMaxSplits, M, N, K, 1.0f, A.data(), B.data(), 0.0f, C.data(), nullptr,
                   Activation::none, fresh.get());
  } catch (const std::runtime_error& e) {
    error = e.what();
  }
  cudaGraph_t empty = nullptr;
  CHECK(cudaStreamEndCapture(fresh, &empty) == cudaSuccess);
  if (empty != nullptr) CUDA_CHECK(cudaGraphDestroy(empty));
  CHECK_THAT(error, Contains("capturing"));

  // The stream that has its workspace: capture, instantiate, replay twice.
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  layer.run(replay, stream);
  REQUIRE(cudaStreamEndCapture(stream, &graph) == cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  for (int r = 0; r < 2; ++r) {
    CUDA_CHECK(cudaMemsetAsync(replay.data(), 0, replay.bytes(), stream));
    CUDA_CHECK(cudaGraphLaunch(exec, stream));
    stream.synchronize();
    INFO("replay " << r);
    CHECK(count_differences(direct, replay) == 0);
  }
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
}

TEST_CASE("on compute capability 9.0 every version is supported (an H200 build)",
          "[gpu][v5][v6][v7][v8][v9][v10][v11]") {
  if (current_cc() != 90) return;
  for (const VersionInfo& info : versions())
    for (const DType t : {DType::f16, DType::bf16}) {
      const int v = info.number;
      std::string why;
      const bool ok = version_supported(v, t, &why);
      INFO("v" << v << " " << to_string(t) << ": " << why);
      CHECK(ok);
    }
}

TEST_CASE("on other GPUs v5..v7 and v9..v11 report NotSupported, not a crash", "[gpu]") {
  for (const int v : {5, 6, 7, 9, 10, 11}) {
    if (version_supported(v, DType::f16)) continue;
    course::DeviceBuffer<__half> A(64), B(64);
    course::DeviceBuffer<float> C(64);
    CHECK_THROWS_AS(tensor_gemm(v, 8, 8, 8, 1.0f, A.data(), B.data(), 0.0f, C.data()),
                    NotSupported);
  }
}

TEST_CASE("baselines: cublasGemmEx and cuBLASLt (bias + ReLU/GELU) vs FP64", "[gpu][baseline]") {
  Blas blas;
  check_against_reference<__half, float>(
      129, 136, 72, 1.5f, -0.5f, false, Activation::none,
      [&](const __half* A, const __half* B, float* C, const float*) {
        cublas_gemm(blas, 129, 136, 72, 1.5f, A, B, -0.5f, C);
      });
  check_against_reference<__nv_bfloat16, __nv_bfloat16>(
      200, 264, 520, 1.0f, 0.0f, false, Activation::none,
      [&](const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, const float*) {
        cublas_gemm(blas, 200, 264, 520, 1.0f, A, B, 0.0f, C);
      });
  for (const Activation act : {Activation::none, Activation::relu, Activation::gelu}) {
    check_against_reference<__half, __half>(
        256, 136, 72, 1.0f, 0.0f, true, act,
        [&](const __half* A, const __half* B, __half* C, const float* bias) {
          cublaslt_gemm(blas, 256, 136, 72, 1.0f, A, B, 0.0f, C, bias, act);
        },
        true);
  }
}

// The CUTLASS 3.x baseline (cutlass_gemm.cuh), checked as v6 is: every element against FP64
// within the bound, FP16 and BF16 in and out, beta == 0 over a C of NaN (it must not be read) and
// beta != 0 (D written over C). Shapes: 512 x 768 x 1024, whole 128 x 256 tiles and 16 K tiles;
// M = 1000, N = 520, K = 136: the last tile row is partial (TMA zero-fills A's rows past M and
// drops the stores there), the third tile column holds 8 columns, the third K tile 8 of 64; and a
// single row. TMA needs K and N multiples of 8 and A, B and C 16-byte aligned; M is free.
// Skipped (a warning) where the build has no CUTLASS or the GPU is not compute capability 9.0.
TEST_CASE("CUTLASS 3.x baseline (CollectiveBuilder, 128x256x64): every element vs FP64",
          "[gpu][cutlass]") {
  std::string why;
  const bool ok = cutlass_gemm_supported(&why);
  if (cutlass_gemm_built() && current_cc() == 90) {
    INFO(why);
    REQUIRE(ok);  // built, on an H100 / H200: it must run
  }
  if (!ok) {
    WARN("the CUTLASS baseline is skipped: " << why);
    return;
  }
  for (const CutlassKernel kernel : kCutlassKernels) {
    INFO(to_string(kernel));
    const auto run = [kernel](int M, int N, int K, float alpha, float beta, auto type) {
      using T = decltype(type);
      check_against_reference<T, T>(M, N, K, alpha, beta, false, Activation::none,
                                    [&](const T* A, const T* B, T* C, const float*) {
                                      cutlass_gemm(M, N, K, alpha, A, B, beta, C, nullptr, kernel);
                                    });
    };
    for (const Case& c : {Case{512, 768, 1024}, Case{1000, 520, 136}, Case{1, 256, 64}}) {
      run(c.M, c.N, c.K, 1.0f, 0.0f, __half{});
      run(c.M, c.N, c.K, 1.5f, -0.5f, __nv_bfloat16{});
    }
    run(1000, 520, 136, 1.0f, 0.5f, __half{});
    run(512, 768, 1024, 1.0f, 0.0f, __nv_bfloat16{});
  }
}

// ---------------------------------------------------------------- GPU: the exercises' GEMMs

namespace {
// gemm_exercise_mma needs what v3 needs; on an older GPU the test says so (the stubs-fail check
// of exercise 2 reads that line as "skipped").
bool exercise_mma_supported(int exercise) {
  std::string why;
  if (version_supported(3, DType::f16, &why)) return true;
  WARN("exercise " << exercise << " needs compute capability 8.0 (mma.sync, cp.async): " << why);
  return false;
}

template <class In, class Out>
void check_exercise_mma(int stages, int M, int N, int K, float alpha, float beta, Activation act) {
  INFO(stages << (stages == 1 ? " stage (exercise 1)" : " stages (exercise 2)"));
  check_against_reference<In, Out>(M, N, K, alpha, beta, act != Activation::none, act,
                                   [&](const In* A, const In* B, Out* C, const float* bias) {
                                     gemm_exercise_mma(stages, M, N, K, alpha, A, B, beta, C, bias,
                                                       act);
                                   });
}
}  // namespace

// Off the 128x128 tile and the K tiles of 64; a single row; several K tiles.
TEST_CASE("exercise 1: the mma.sync GEMM on your addresses, every element vs FP64", "[gpu][ex1]") {
  if (!exercise_mma_supported(1)) return;
  const std::vector<Case> cases = {
      {8, 8, 8}, {1, 8, 64}, {129, 136, 72}, {200, 264, 520}, {256, 256, 128}};
  for (const Case& c : cases) {
    check_exercise_mma<__half, float>(1, c.M, c.N, c.K, 1.0f, 0.0f, Activation::none);
    check_exercise_mma<__nv_bfloat16, __nv_bfloat16>(1, c.M, c.N, c.K, 1.5f, -0.5f,
                                                     Activation::none);
  }
  check_exercise_mma<__half, __half>(1, 129, 264, 136, 1.0f, 0.5f, Activation::relu);
  check_exercise_mma<__nv_bfloat16, float>(1, 200, 136, 72, 1.0f, 0.0f, Activation::gelu);
}

// K from one tile to 17 (fewer tiles than stages, exactly as many, a ring that wraps several
// times, a partial last tile), for each depth of the ring.
TEST_CASE("exercise 2: your cp.async ring with 2, 3 and 4 stages, every element vs FP64",
          "[gpu][ex2]") {
  if (!exercise_mma_supported(2)) return;
  int device = 0, optin = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  for (const int stages : {2, 3, 4}) {
    if (exercise_detail::mma_smem_bytes(stages) > optin) {
      WARN(stages << " stages need more shared memory per block than this GPU grants: skipped");
      continue;
    }
    for (const int K : {64, 128, 192, 256, 320, 1000, 1088})
      check_exercise_mma<__half, float>(stages, 129, 136, K, 1.0f, 0.0f, Activation::none);
    check_exercise_mma<__nv_bfloat16, __nv_bfloat16>(stages, 257, 264, 520, 1.5f, -0.5f,
                                                     Activation::none);
    check_exercise_mma<__half, __half>(stages, 200, 512, 136, 1.0f, 0.0f, Activation::gelu);
  }
}

TEST_CASE("the exercise GEMMs check their arguments before any CUDA call", "[cpu]") {
  __half* p = reinterpret_cast<__half*>(std::uintptr_t{256});  // never dereferenced
  float* c = reinterpret_cast<float*>(std::uintptr_t{256});
  CHECK_THROWS_WITH(gemm_exercise_mma(0, 8, 8, 8, 1.0f, p, p, 0.0f, c), Contains("stages"));
  CHECK_THROWS_WITH(gemm_exercise_mma(5, 8, 8, 8, 1.0f, p, p, 0.0f, c), Contains("stages"));
  CHECK_THROWS_WITH(gemm_exercise_mma(2, 8, 8, 12, 1.0f, p, p, 0.0f, c),
                    Contains("multiples of 8"));
  CHECK_THROWS_WITH(gemm_exercise_wgmma(8, 12, 8, 1.0f, p, p, 0.0f, c), Contains("multiples of 8"));
  CHECK_NOTHROW(
      gemm_exercise_mma<__half, float>(2, 0, 8, 8, 1.0f, nullptr, nullptr, 0.0f, nullptr));
}

// One K tile, exactly the 4 stages, a ring that wraps once and four times with a partial last
// tile; edges off the 128x256 tile; a single row.
TEST_CASE("exercise 3: the wgmma GEMM with your consumer loop, every element vs FP64",
          "[gpu][ex3]") {
  std::string why;
  if (!version_supported(6, DType::f16, &why)) {
    WARN("exercise 3 needs compute capability 9.0 (TMA, wgmma) and sm_90a code: " << why);
    return;
  }
  const auto run = [](int M, int N, int K, float alpha, float beta, Activation act, auto in) {
    using In = decltype(in);
    check_against_reference<In, float>(M, N, K, alpha, beta, act != Activation::none, act,
                                       [&](const In* A, const In* B, float* C, const float* bias) {
                                         gemm_exercise_wgmma(M, N, K, alpha, A, B, beta, C, bias,
                                                             act);
                                       });
  };
  const std::vector<Case> cases = {{128, 256, 64},   {200, 264, 256}, {257, 520, 320},
                                   {129, 256, 1000}, {1, 8, 520},     {300, 512, 136}};
  for (const Case& c : cases) {
    run(c.M, c.N, c.K, 1.0f, 0.0f, Activation::none, __half{});
    run(c.M, c.N, c.K, 1.5f, -0.5f, Activation::none, __nv_bfloat16{});
  }
  run(300, 520, 136, 1.0f, 0.5f, Activation::gelu, __half{});
}

// ------------------------------------------------------------------ the ceilings (ceiling.cuh)

TEST_CASE("The ceilings refuse a type without tensor-core FP32 accumulation and a bad duration",
          "[cpu][ceiling]") {
  CHECK_THROWS_WITH(mma_sync_ceiling(DType::f32), Contains("expected f16 or bf16"));
  CHECK_THROWS_WITH(wgmma_ceiling(DType::f32), Contains("expected f16 or bf16"));
  CHECK_THROWS_WITH(mma_sync_ceiling(DType::f16, 0.001), Contains("seconds must be in"));
  CHECK_THROWS_WITH(wgmma_ceiling(DType::bf16, 11.0), Contains("seconds must be in"));
  CHECK_THROWS_AS(mma_sync_ceiling(DType::f16, std::nan("")), std::invalid_argument);
}

// What the ceilings return (their values are measurements: the binary prints them; no time is
// asserted). Both types, and the wgmma one where this GPU and build have it.
TEST_CASE("The ceilings run on every SM and count their FLOPs", "[gpu][ceiling]") {
  int device = 0, sms = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  for (const DType in : {DType::f16, DType::bf16}) {
    INFO(to_string(in));
    const Ceiling m = mma_sync_ceiling(in, 0.02);
    CHECK(m.sm_count == sms);
    CHECK(std::isfinite(m.tflops));
    CHECK(m.tflops > 0.0);
    CHECK(m.seconds > 0.0);
    if (version_supported(5, in)) {
      const Ceiling w = wgmma_ceiling(in, 0.02);
      CHECK(w.sm_count == sms);
      CHECK(std::isfinite(w.tflops));
      CHECK(w.tflops > 0.0);
    } else {
      CHECK_THROWS_AS(wgmma_ceiling(in, 0.02), NotSupported);
    }
  }
}
