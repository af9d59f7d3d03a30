// Lesson 13 tests: the INT8 kernel's index maps (int8_mma.hpp), on the CPU.
//
// Oracles: the PTX ISA's tables, written out here independently of the maps ("Matrix Fragments
// for mma.m16n8k32" with .s8 operands, and ldmatrix's description of which lane receives what),
// and conv_int8_reference. The second test runs the whole kernel's data movement on the CPU: every
// thread's cp.async chunks of every K slice into an emulated shared memory (src-size 0 as zero
// fill), every lane's ldmatrix loads from the addresses the maps give, each mma as the fragment
// tables define it, and the epilogue's element map, for every tile of int8_conv_tiles(); the
// accumulators must be the reference's exact sums. What it cannot see: the ring's timing and
// barriers (lesson 12's, unchanged) and the hardware itself: the [gpu] tests run that.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/testing.hpp"
#include "int8_conv.hpp"
#include "int8_conv_gpu.hpp"
#include "int8_mma.hpp"

using namespace lesson13;

namespace {

// ---- The PTX ISA's fragment layouts for mma.m16n8k32 with .s8 operands, as its tables state
// them (groupID = lane >> 2, threadID_in_group = lane % 4).
// A (16 x 32, row): element a_i (i = 0..15; register i / 4, byte i % 4):
//   row = groupID for 0 <= i < 4 or 8 <= i < 12, groupID + 8 otherwise;
//   col = threadID_in_group * 4 + (i & 3), + 16 for i >= 8.
Int8RC ptx_a(int lane, int i) {
  const int g = lane >> 2, t = lane % 4;
  const int row = (i < 4 || (i >= 8 && i < 12)) ? g : g + 8;
  const int col = t * 4 + (i & 3) + (i >= 8 ? 16 : 0);
  return {row, col};
}
// B (32 x 8, col): element b_i (i = 0..7; register i / 4, byte i % 4):
//   row (k) = threadID_in_group * 4 + (i & 3), + 16 for i >= 4; col (n) = groupID.
Int8RC ptx_b(int lane, int i) {  // returned as (n, k)
  const int g = lane >> 2, t = lane % 4;
  return {g, t * 4 + (i & 3) + (i >= 4 ? 16 : 0)};
}
// C / D (16 x 8): element c_i (i = 0..3): row = groupID for i < 2, groupID + 8 otherwise;
// col = threadID_in_group * 2 + (i & 1).
Int8RC ptx_c(int lane, int i) {
  const int g = lane >> 2, t = lane % 4;
  return {i < 2 ? g : g + 8, t * 2 + (i & 1)};
}

// ---- ldmatrix.sync.aligned.m8n8.x4.b16: lanes 8j .. 8j + 7 give the addresses of rows 0..7 of
// matrix j (16 bytes each); register j of lane l receives the 4 bytes of row l / 4 of matrix j
// at bytes 4 (l % 4) .. 4 (l % 4) + 3. `addr(l)` is the tile (row, byte) lane l points at.
template <class Addr>
void ldmatrix_x4(const std::vector<std::int8_t>& tile, Addr addr, std::int8_t regs[32][4][4]) {
  for (int l = 0; l < 32; ++l)
    for (int j = 0; j < 4; ++j) {
      const Int8RC src = addr(8 * j + l / 4);
      for (int b = 0; b < 4; ++b)
        regs[l][j][b] = tile[int8_tile_offset(src.row, src.col + 4 * (l % 4) + b)];
    }
}

}  // namespace

TEST_CASE("ldmatrix addresses deliver mma.m16n8k32's s8 A and B fragments", "[int8mma]") {
  for (int lane = 0; lane < 32; ++lane) {
    for (int j = 0; j < 4; ++j)
      for (int b = 0; b < 4; ++b) {
        INFO("lane " << lane << " register " << j << " byte " << b);
        // What ldmatrix puts in register j, byte b of this lane: row lane / 4 of matrix j, byte
        // 4 (lane % 4) + b, from the row that lane 8j + lane / 4 addressed.
        const Int8RC a = int8_ldmatrix_a(8 * j + lane / 4);
        const Int8RC want_a = ptx_a(lane, 4 * j + b);  // register j holds a_{4j} .. a_{4j+3}
        CHECK(a.row == want_a.row);
        CHECK(a.col + 4 * (lane % 4) + b == want_a.col);
        // B: registers 0, 1 = b0, b1 (elements 0-3, 4-7) of the fragment of channels 0-7,
        // registers 2, 3 the same for channels 8-15.
        const Int8RC bb = int8_ldmatrix_b(8 * j + lane / 4);
        const Int8RC want_b = ptx_b(lane, 4 * (j % 2) + b);
        CHECK(bb.row == 8 * (j / 2) + want_b.row);
        CHECK(bb.col + 4 * (lane % 4) + b == want_b.col);
      }
    for (int e = 0; e < 4; ++e) {
      const Int8RC c = int8_acc_element(lane, e), want = ptx_c(lane, e);
      CHECK(c.row == want.row);
      CHECK(c.col == want.col);
    }
  }
}

TEST_CASE("the padded stage rows: ldmatrix phases hit 8 bank groups, chunks stay aligned",
          "[int8mma]") {
  for (int origin = 0; origin < 128; origin += 16)
    for (int ks = 0; ks < kInt8BK / 32; ++ks)
      for (int j = 0; j < 4; ++j) {
        std::set<int> groups_a, groups_b;
        for (int l = 8 * j; l < 8 * j + 8; ++l) {
          const Int8RC a = int8_ldmatrix_a(l), b = int8_ldmatrix_b(l);
          groups_a.insert(int8_tile_offset(origin + a.row, 32 * ks + a.col) / 16 % 8);
          groups_b.insert(int8_tile_offset(origin + b.row, 32 * ks + b.col) / 16 % 8);
        }
        CHECK(groups_a.size() == 8);
        CHECK(groups_b.size() == 8);
      }
  CHECK(kInt8RowBytes % 16 == 0);  // every chunk 16-byte aligned for cp.async
  CHECK(kInt8RowBytes >= kInt8BK);
  // The chunks of one pass cover threads / 4 whole rows, each byte once.
  for (int threads : {128, 256}) {
    std::set<int> bytes;
    for (int tid = 0; tid < threads; ++tid) {
      const Int8RC c = int8_copy_chunk(tid, 0, threads);
      for (int b = 0; b < 16; ++b) CHECK(bytes.insert(c.row * kInt8BK + c.col + b).second);
      CHECK(int8_copy_chunk(tid, 2, threads).row == c.row + 2 * threads / 4);
    }
    CHECK(bytes.size() == static_cast<std::size_t>(threads / 4 * kInt8BK));
  }
}

TEST_CASE("int8_conv_tap: K ordered (r, s, c), 16-channel chunks within one tap", "[int8mma]") {
  for (int kernel : {1, 3, 5})
    for (int in_c : {16, 32, 48, 256}) {
      int k = 0;
      for (int r = 0; r < kernel; ++r)
        for (int s = 0; s < kernel; ++s)
          for (int c = 0; c < in_c; ++c, ++k) {
            const Int8Tap t = int8_conv_tap(k, in_c, kernel);
            REQUIRE(t.r == r);
            REQUIRE(t.s == s);
            REQUIRE(t.c == c);
            if (k % 16 == 0) {
              const Int8Tap last = int8_conv_tap(k + 15, in_c, kernel);
              REQUIRE((last.r == r && last.s == s && last.c == c + 15));
            }
          }
    }
}

TEST_CASE("the kernel's data movement, emulated on the CPU, computes the convolution",
          "[int8mma]") {
  struct Case {
    int batch, in_h, in_w, in_c, out_c, kernel, stride, pad, x_stride;
  };
  const std::vector<Case> cases = {
      {1, 9, 11, 16, 16, 3, 1, 1, 16},   // K = 144: the last slice holds one chunk of 4
      {2, 7, 5, 32, 40, 3, 2, 1, 48},    // stride 2, batch 2, out_c tail, a view (x_stride 48)
      {1, 10, 13, 48, 72, 1, 1, 0, 48},  // 1x1, K = 48 < one slice, 130 pixels: M tail
      {1, 3, 3, 64, 8, 3, 1, 0, 64},     // one output pixel
  };
  std::mt19937 rng(1320);
  std::uniform_int_distribution<int> q(-128, 127);
  for (const Case& cs : cases) {
    const int out_h = (cs.in_h + 2 * cs.pad - cs.kernel) / cs.stride + 1;
    const int out_w = (cs.in_w + 2 * cs.pad - cs.kernel) / cs.stride + 1;
    const int M = cs.batch * out_h * out_w, N = cs.out_c, K = cs.kernel * cs.kernel * cs.in_c;
    std::vector<std::int8_t> x(static_cast<std::size_t>(cs.batch) * cs.in_h * cs.in_w *
                               cs.x_stride);
    std::vector<std::int8_t> w(static_cast<std::size_t>(N) * K);
    for (auto& v : x) v = static_cast<std::int8_t>(q(rng));
    for (auto& v : w) v = static_cast<std::int8_t>(q(rng));
    // The reference's sums: unit scales, no bias, float output (|sum| < 2^24 here: exact).
    std::vector<float> want(static_cast<std::size_t>(M) * N);
    const std::vector<float> ones(N, 1.0f), zeros(N, 0.0f);
    Int8ConvArgs a{};
    a.x = x.data();
    a.w = w.data();
    a.bias = zeros.data();
    a.y = want.data();
    a.x_stride = cs.x_stride;
    a.y_stride = N;
    a.batch = cs.batch;
    a.in_h = cs.in_h;
    a.in_w = cs.in_w;
    a.in_c = cs.in_c;
    a.out_h = out_h;
    a.out_w = out_w;
    a.out_c = N;
    a.kernel = cs.kernel;
    a.stride = cs.stride;
    a.pad = cs.pad;
    a.x_scale = 1.0f;
    a.w_scale = ones.data();
    a.y_type = Int8ConvOutput::f32;
    conv_int8_reference(a);

    for (const Int8ConvTile& tile : int8_conv_tiles()) {
      INFO("case in_c " << cs.in_c << " out_c " << N << " kernel " << cs.kernel << ", tile "
                        << tile.name);
      const int BM = tile.tile_m, BN = tile.tile_n, threads = tile.threads;
      const int WM = BM / tile.warps_m, WN = BN / tile.warps_n, MI = WM / 16, NJ = WN / 8;
      const int rows_per_pass = threads / 4;
      const int a_passes = BM / rows_per_pass, b_passes = (BN + rows_per_pass - 1) / rows_per_pass;
      std::vector<long long> got(static_cast<std::size_t>(M) * N, 0);
      std::vector<int> written(static_cast<std::size_t>(M) * N, 0);
      const int slices = (K + kInt8BK - 1) / kInt8BK;
      for (int bx = 0; bx < (M + BM - 1) / BM; ++bx)
        for (int by = 0; by < (N + BN - 1) / BN; ++by) {
          const int bm = bx * BM, bn = by * BN;
          // acc[warp][lane][i][j][e]
          std::vector<long long> acc(static_cast<std::size_t>(threads) * MI * NJ * 4, 0);
          for (int t = 0; t < slices; ++t) {
            // cp.async: every thread's chunks (a 0x55 fill shows any byte nobody wrote).
            std::vector<std::int8_t> sa(static_cast<std::size_t>(BM) * kInt8RowBytes, 0x55);
            std::vector<std::int8_t> sb(static_cast<std::size_t>(BN) * kInt8RowBytes, 0x55);
            std::vector<int> hits_a(BM * 4, 0), hits_b(BN * 4, 0);
            for (int tid = 0; tid < threads; ++tid) {
              for (int p = 0; p < a_passes; ++p) {
                const Int8RC ch = int8_copy_chunk(tid, p, threads);
                ++hits_a[ch.row * 4 + ch.col / 16];
                const int k = t * kInt8BK + ch.col, m = bm + ch.row;
                const Int8Tap tp = int8_conv_tap(k, cs.in_c, cs.kernel);
                std::int8_t* dst = &sa[int8_tile_offset(ch.row, ch.col)];
                std::memset(dst, 0, 16);  // src-size 0: zeros
                if (k < K && m < M) {
                  const int ox = m % out_w, oy = (m / out_w) % out_h, n = m / (out_w * out_h);
                  const int iy = oy * cs.stride - cs.pad + tp.r,
                            ix = ox * cs.stride - cs.pad + tp.s;
                  if (iy >= 0 && iy < cs.in_h && ix >= 0 && ix < cs.in_w) {
                    std::memcpy(dst,
                                &x[((static_cast<std::size_t>(n) * cs.in_h + iy) * cs.in_w + ix) *
                                       cs.x_stride +
                                   tp.c],
                                16);
                  }
                }
              }
              for (int p = 0; p < b_passes; ++p) {
                const Int8RC ch = int8_copy_chunk(tid, p, threads);
                if (ch.row >= BN) continue;
                ++hits_b[ch.row * 4 + ch.col / 16];
                const int k = t * kInt8BK + ch.col, n = bn + ch.row;
                std::int8_t* dst = &sb[int8_tile_offset(ch.row, ch.col)];
                std::memset(dst, 0, 16);
                if (k < K && n < N) std::memcpy(dst, &w[static_cast<std::size_t>(n) * K + k], 16);
              }
            }
            REQUIRE(std::all_of(hits_a.begin(), hits_a.end(), [](int h) { return h == 1; }));
            REQUIRE(std::all_of(hits_b.begin(), hits_b.end(), [](int h) { return h == 1; }));
            // Each warp: two k32 steps of ldmatrix + mma.
            for (int warp = 0; warp < threads / 32; ++warp) {
              const int wm0 = (warp / tile.warps_n) * WM, wn0 = (warp % tile.warps_n) * WN;
              for (int ks = 0; ks < kInt8BK / 32; ++ks)
                for (int i = 0; i < MI; ++i)
                  for (int jj = 0; jj < NJ / 2; ++jj) {
                    std::int8_t ra[32][4][4], rb[32][4][4];
                    ldmatrix_x4(
                        sa,
                        [&](int l) {
                          const Int8RC r = int8_ldmatrix_a(l);
                          return Int8RC{wm0 + i * 16 + r.row, ks * 32 + r.col};
                        },
                        ra);
                    ldmatrix_x4(
                        sb,
                        [&](int l) {
                          const Int8RC r = int8_ldmatrix_b(l);
                          return Int8RC{wn0 + jj * 16 + r.row, ks * 32 + r.col};
                        },
                        rb);
                    for (int half = 0; half < 2; ++half) {
                      const int j = 2 * jj + half;
                      // The mma as the PTX tables define it: assemble A (16 x 32) and B
                      // (8 channels x 32) from the lanes' registers, multiply, scatter D.
                      int A[16][32], B[8][32];
                      for (int l = 0; l < 32; ++l)
                        for (int e = 0; e < 16; ++e) {
                          const Int8RC pa = ptx_a(l, e);
                          A[pa.row][pa.col] = ra[l][e / 4][e % 4];
                        }
                      for (int l = 0; l < 32; ++l)
                        for (int e = 0; e < 8; ++e) {
                          const Int8RC pb = ptx_b(l, e);
                          B[pb.row][pb.col] = rb[l][2 * half + e / 4][e % 4];
                        }
                      for (int l = 0; l < 32; ++l)
                        for (int e = 0; e < 4; ++e) {
                          const Int8RC pc = ptx_c(l, e);
                          long long s = 0;
                          for (int k = 0; k < 32; ++k) s += A[pc.row][k] * B[pc.col][k];
                          acc[(((static_cast<std::size_t>(warp) * 32 + l) * MI + i) * NJ + j) * 4 +
                              e] += s;
                        }
                    }
                  }
            }
          }
          // The epilogue's element map.
          for (int warp = 0; warp < threads / 32; ++warp) {
            const int wm0 = (warp / tile.warps_n) * WM, wn0 = (warp % tile.warps_n) * WN;
            for (int l = 0; l < 32; ++l)
              for (int i = 0; i < MI; ++i)
                for (int j = 0; j < NJ; ++j)
                  for (int e = 0; e < 4; ++e) {
                    const Int8RC el = int8_acc_element(l, e);
                    const int m = bm + wm0 + i * 16 + el.row, n = bn + wn0 + j * 8 + el.col;
                    if (m >= M || n >= N) continue;
                    const std::size_t o = static_cast<std::size_t>(m) * N + n;
                    got[o] =
                        acc[(((static_cast<std::size_t>(warp) * 32 + l) * MI + i) * NJ + j) * 4 +
                            e];
                    ++written[o];
                  }
          }
        }
      for (std::size_t o = 0; o < got.size(); ++o) {
        INFO("output " << o << " (pixel " << o / N << ", channel " << o % N << ")");
        REQUIRE(written[o] == 1);
        REQUIRE(static_cast<float>(got[o]) == want[o]);
      }
    }
  }
}
