// Lesson 12 exercise tests: each exercise against an independent statement of what it must do.
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <random>

#include "common/cuda_check.hpp"
#include "common/memory.hpp"
#include "common/stream.hpp"
#include "common/testing.hpp"
#include "exercises.hpp"

using namespace lesson12;
using course::testing::Contains;

namespace {
std::vector<float> random_vector(std::size_t n, std::mt19937& rng, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}
}  // namespace

TEST_CASE("exercise 1: the folded convolution computes BatchNorm(conv(x))", "[ex1]") {
  std::mt19937 rng(12);
  const int out = 5, row = 27;  // 3x3 taps of 3 channels
  for (bool has_bias : {false, true}) {
    const std::vector<float> w = random_vector(out * row, rng, -1, 1);
    const std::vector<float> b0 =
        has_bias ? random_vector(out, rng, -1, 1) : std::vector<float>(out, 0.0f);
    const std::vector<float> gamma = random_vector(out, rng, 0.2f, 2);
    const std::vector<float> beta = random_vector(out, rng, -1, 1);
    const std::vector<float> mean = random_vector(out, rng, -1, 1);
    const std::vector<float> var = random_vector(out, rng, 0.01f, 3);
    const float eps = 1e-3f;
    std::vector<float> wf = w, bf = b0;
    fold_batch_norm(wf, bf, gamma, beta, mean, var, eps);
    // Any input patch: the folded layer must give what the two layers give, in double.
    for (int trial = 0; trial < 4; ++trial) {
      const std::vector<float> x = random_vector(row, rng, -2, 2);
      for (int k = 0; k < out; ++k) {
        double conv = b0[k], folded = bf[k];
        for (int i = 0; i < row; ++i) {
          conv += static_cast<double>(w[k * row + i]) * x[i];
          folded += static_cast<double>(wf[k * row + i]) * x[i];
        }
        const double bn =
            (conv - mean[k]) / std::sqrt(static_cast<double>(var[k]) + eps) * gamma[k] + beta[k];
        INFO("channel " << k << (has_bias ? " (conv with bias)" : ""));
        CHECK(folded == course::testing::Approx(bn).epsilon(1e-5).margin(1e-5));
      }
    }
  }
  std::vector<float> w(10), b(5);
  const std::vector<float> four(4, 1.0f), five(5, 1.0f);
  CHECK_THROWS_AS(fold_batch_norm(w, b, five, five, five, four, 1e-3f), std::invalid_argument);
  std::vector<float> w_bad(11);
  CHECK_THROWS_AS(fold_batch_norm(w_bad, b, five, five, five, five, 1e-3f), std::invalid_argument);
  CHECK_THROWS_AS(fold_batch_norm(w, b, five, five, five, five, 0.0f), std::invalid_argument);
  std::vector<float> bad_var = five;
  bad_var[2] = -2.0f;  // var + eps < 0
  CHECK_THROWS_AS(fold_batch_norm(w, b, five, five, five, bad_var, 1e-3f), std::invalid_argument);
  bad_var[2] = std::nanf("");
  CHECK_THROWS_AS(fold_batch_norm(w, b, five, five, five, bad_var, 1e-3f), std::invalid_argument);
}

TEST_CASE("exercise 2: live buffers never share a byte, the arena stays near the peak", "[ex2]") {
  auto check = [](const std::vector<LiveRange>& bufs, std::size_t align) {
    const std::vector<std::size_t> off = assign_offsets(bufs, align);
    REQUIRE(off.size() == bufs.size());
    std::size_t arena = 0;
    int last_op = 0;
    for (std::size_t i = 0; i < bufs.size(); ++i) {
      CHECK(off[i] % align == 0);
      arena = std::max(arena, off[i] + bufs[i].bytes);
      last_op = std::max(last_op, bufs[i].last);
      for (std::size_t j = 0; j < i; ++j) {
        const bool live_together = bufs[i].first <= bufs[j].last && bufs[j].first <= bufs[i].last;
        const bool share = bufs[i].bytes > 0 && bufs[j].bytes > 0 &&
                           off[i] < off[j] + bufs[j].bytes && off[j] < off[i] + bufs[i].bytes;
        INFO("buffers " << i << " and " << j);
        CHECK(!(live_together && share));
      }
    }
    std::size_t peak = 0;
    for (int t = 0; t <= last_op; ++t) {
      std::size_t live = 0;
      for (const LiveRange& b : bufs) {
        if (b.first <= t && t <= b.last) live += (b.bytes + align - 1) / align * align;
      }
      peak = std::max(peak, live);
    }
    INFO("arena " << arena << " bytes, peak of live bytes " << peak);
    CHECK(arena * 2 <= peak * 3);
  };
  // A chain (each buffer read by the next op only): two buffers at a time.
  std::vector<LiveRange> chain;
  for (int i = 0; i < 10; ++i) chain.push_back({1000u + 100u * i, i, i + 1});
  check(chain, 256);
  // Long-lived skip connections over a chain, as in a detector's neck.
  std::vector<LiveRange> skips = chain;
  skips.push_back({5000, 1, 9});
  skips.push_back({3000, 3, 7});
  check(skips, 256);
  // Random intervals and sizes.
  std::mt19937 rng(5);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<LiveRange> r;
    for (int i = 0; i < 30; ++i) {
      const int a = static_cast<int>(rng() % 40), len = static_cast<int>(rng() % 6);
      r.push_back({1 + rng() % 100000, a, a + len});
    }
    check(r, 512);
  }
  CHECK(assign_offsets({}, 256).empty());
  CHECK_THROWS_AS(assign_offsets({{100, 3, 2}}, 256), std::invalid_argument);
  CHECK_THROWS_WITH(assign_offsets({{100, 0, 1}}, 100), Contains("power of two"));
}

TEST_CASE("exercise 3: the implicit GEMM reads the right input element", "[ex3]") {
  for (const ConvShape s :
       {ConvShape{2, 7, 9, 3, 4, 5, 3, 2, 1}, ConvShape{1, 5, 5, 8, 5, 5, 3, 1, 1},
        ConvShape{3, 4, 6, 16, 4, 6, 1, 1, 0}}) {
    // Enumerate pixels and taps in the nested order the definition states, and compare.
    int m = 0;
    for (int n = 0; n < s.batch; ++n) {
      for (int oy = 0; oy < s.out_h; ++oy) {
        for (int ox = 0; ox < s.out_w; ++ox, ++m) {
          int k = 0;
          for (int r = 0; r < s.kernel; ++r) {
            for (int q = 0; q < s.kernel; ++q) {
              for (int c = 0; c < s.in_c; ++c, ++k) {
                const GemmTap t = implicit_gemm_tap(s, m, k);
                const int y = oy * s.stride - s.pad + r, x = ox * s.stride - s.pad + q;
                const bool inside = y >= 0 && y < s.in_h && x >= 0 && x < s.in_w;
                INFO("m " << m << " k " << k);
                REQUIRE(t.inside == inside);
                if (inside) {
                  REQUIRE(t.n == n);
                  REQUIRE(t.y == y);
                  REQUIRE(t.x == x);
                  REQUIRE(t.c == c);
                }
              }
            }
          }
        }
      }
    }
  }
  // And the convolution built on it equals a direct convolution.
  const ConvShape s{2, 6, 7, 4, 3, 4, 3, 2, 1};
  const int out_c = 5;
  std::mt19937 rng(3);
  const std::vector<float> x = random_vector(2 * 6 * 7 * 4, rng, -1, 1);
  const std::vector<float> w = random_vector(out_c * 9 * 4, rng, -1, 1);
  const std::vector<float> y = conv_as_gemm(s, out_c, x, w);
  for (int n = 0; n < 2; ++n) {
    for (int oy = 0; oy < 3; ++oy) {
      for (int ox = 0; ox < 4; ++ox) {
        for (int o = 0; o < out_c; ++o) {
          double acc = 0;
          for (int r = 0; r < 3; ++r) {
            for (int q = 0; q < 3; ++q) {
              const int iy = oy * 2 - 1 + r, ix = ox * 2 - 1 + q;
              if (iy < 0 || iy >= 6 || ix < 0 || ix >= 7) continue;
              for (int c = 0; c < 4; ++c) {
                acc += static_cast<double>(x[((n * 6 + iy) * 7 + ix) * 4 + c]) *
                       w[((o * 3 + r) * 3 + q) * 4 + c];
              }
            }
          }
          CHECK(y[((n * 3 + oy) * 4 + ox) * out_c + o] ==
                course::testing::Approx(acc).margin(1e-5));
        }
      }
    }
  }
}

TEST_CASE("exercise 4: the decode plugin matches a double-precision decode", "[gpu][ex4]") {
  std::mt19937 rng(4);
  const int batch = 2, classes = 3, reg_max = 16;
  const int hs[3] = {4, 2, 1}, ws[3] = {6, 3, 2}, strides[3] = {8, 16, 32};
  // Views inside wider buffers: box logits at channel 0 of a 72-channel buffer, class logits at
  // channel 64 of the same buffer (stride 72), as a concatenation would place them.
  const int stride = 4 * reg_max + classes + 5;
  int candidates = 0;
  for (int l = 0; l < 3; ++l) candidates += hs[l] * ws[l];
  for (DType dtype : {DType::f32, DType::f16}) {
    INFO((dtype == DType::f16 ? "FP16" : "FP32") << " logits");
    std::vector<std::vector<float>> logits(3);
    std::vector<course::DeviceBuffer<std::uint8_t>> dev;
    DetectArgs a{};
    for (int l = 0; l < 3; ++l) {
      logits[l] =
          random_vector(static_cast<std::size_t>(batch) * hs[l] * ws[l] * stride, rng, -4, 4);
      if (dtype == DType::f16) {
        for (float& v : logits[l]) v = __half2float(__float2half(v));  // what the GPU will read
        std::vector<__half> h(logits[l].size());
        for (std::size_t i = 0; i < h.size(); ++i) h[i] = __float2half(logits[l][i]);
        dev.emplace_back(h.size() * 2);
        CUDA_CHECK(cudaMemcpy(dev.back().data(), h.data(), h.size() * 2, cudaMemcpyHostToDevice));
      } else {
        dev.emplace_back(logits[l].size() * 4);
        CUDA_CHECK(cudaMemcpy(dev.back().data(), logits[l].data(), logits[l].size() * 4,
                              cudaMemcpyHostToDevice));
      }
      const std::size_t es = dtype == DType::f16 ? 2 : 4;
      a.box[l] = dev.back().data();
      a.cls[l] = dev.back().data() + 4 * reg_max * es;
      a.box_stride[l] = stride;
      a.cls_stride[l] = stride;
      a.h[l] = hs[l];
      a.w[l] = ws[l];
      a.level_stride[l] = strides[l];
    }
    course::DeviceBuffer<float> out(static_cast<std::size_t>(batch) * (4 + classes) * candidates);
    a.batch = batch;
    a.num_classes = classes;
    a.reg_max = reg_max;
    a.num_candidates = candidates;
    a.out = out.data();
    course::Stream s;
    decode_plugin(a, dtype, s.get());
    CUDA_CHECK(cudaStreamSynchronize(s.get()));
    const std::vector<float> got = course::to_host(out);
    for (int n = 0; n < batch; ++n) {
      int cand = 0;
      for (int l = 0; l < 3; ++l) {
        for (int y = 0; y < hs[l]; ++y) {
          for (int x = 0; x < ws[l]; ++x, ++cand) {
            const float* p =
                logits[l].data() + ((static_cast<std::size_t>(n) * hs[l] + y) * ws[l] + x) * stride;
            double d[4];
            for (int side = 0; side < 4; ++side) {
              double mx = -1e30, sum = 0, e = 0;
              for (int j = 0; j < reg_max; ++j)
                mx = std::max(mx, static_cast<double>(p[side * reg_max + j]));
              for (int j = 0; j < reg_max; ++j) {
                const double v = std::exp(p[side * reg_max + j] - mx);
                sum += v;
                e += v * j;
              }
              d[side] = e / sum;
            }
            const double x1 = x + 0.5 - d[0], y1 = y + 0.5 - d[1], x2 = x + 0.5 + d[2],
                         y2 = y + 0.5 + d[3];
            const double want[4] = {(x1 + x2) / 2 * strides[l], (y1 + y2) / 2 * strides[l],
                                    (x2 - x1) * strides[l], (y2 - y1) * strides[l]};
            const float* o =
                got.data() + static_cast<std::size_t>(n) * (4 + classes) * candidates + cand;
            for (int r = 0; r < 4; ++r) {
              INFO("image " << n << " candidate " << cand << " row " << r);
              CHECK(o[static_cast<std::size_t>(r) * candidates] ==
                    course::testing::Approx(want[r]).margin(1e-3));
            }
            for (int c = 0; c < classes; ++c) {
              const double sig = 1.0 / (1.0 + std::exp(-static_cast<double>(p[4 * reg_max + c])));
              CHECK(o[static_cast<std::size_t>(4 + c) * candidates] ==
                    course::testing::Approx(sig).margin(1e-5));
            }
          }
        }
      }
    }
  }
  DetectArgs bad{};
  bad.reg_max = 0;
  CHECK_THROWS_AS(decode_plugin(bad, DType::f32, nullptr), std::invalid_argument);
}
