// Tests of lesson 05: every version of the sum, the library baselines, argmax, mean/variance
// and the row softmax, against independent CPU references (double precision).
//
// Tolerances. A float sum is exact only for special data; otherwise the test bounds the error
// by the standard result for any summation whose dependency tree has height h (each element
// goes through at most h additions; Higham, "Accuracy and Stability of Numerical Algorithms",
// 2nd ed., section 4.2):
//     |computed - exact| <= gamma_h(h) * sum |x_i|,   gamma_h(h) = h u / (1 - h u),  u = 2^-24.
// h comes from each version's algorithm as documented in reduction.cu, never from its output:
//   v0 (atomics, any order):                     a chain, h = n
//   v1..v5 (a tree per block, passes repeated):  at most 9 levels per pass (log2 of 512 elements)
//   v6, v7 (grid-stride loop, then trees):       each of >= 256 threads adds a serial chain of at
//                                                most ceil(n / 256) values, v6's atomics another
//                                                chain of at most that many block totals; the
//                                                trees after them have < 32 levels
// On the GPU the random-data tests of v6 and v7 use the grid actually launched instead
// (summation_tree_height(version, n, max_blocks) in reduction.cuh derives it). At n = 10^6 the
// grid is 245 blocks (one per tile of 4096 floats) on any GPU with that many resident, and h is
// 28 for v7 and 262 for v6 instead of 7846: a bound of about 0.8 (v7) on a sum of 10^6 values in
// [0, 1), where a dropped tile would take away about 2000.
// Exact data needs no tolerance: all-ones (n < 2^24), and small integers (|x| <= 8, n <= 2^21):
// every partial sum is an integer of magnitude <= 2^24, which float holds exactly, so every
// addition is exact in any order. Those tests catch a dropped or doubled element, which a
// tolerance of gamma_h(h) * sum|x| could miss.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/cuda_check.hpp"
#include "common/memory.hpp"
#include "common/stream.hpp"
#include "common/testing.hpp"
#include "reduction.cuh"

using course::testing::Contains;
using reduction::ArgMax;
using reduction::Float4Split;
using reduction::float_bits;
using reduction::Moments;
using reduction::read_back;

namespace {

constexpr double kU = 1.0 / 16777216.0;  // unit roundoff of float: 2^-24
const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

// The sizes the issue asks for: 0, 1, 2, around a warp, around a block multiple, a large odd
// one past a power of two, a large prime-ish one.
const std::vector<std::size_t> kSizes = {0,      1, 2, 31, 32, 33, 1023, 1024, 1025, (1u << 20) + 3,
                                         1000003};

double gamma_h(double h) {
  return h * kU / (1.0 - h * kU);
}

std::size_t ceil_div(std::size_t a, std::size_t b) {
  return (a + b - 1) / b;
}

double tree_height(int version, std::size_t n) {
  return reduction::summation_tree_height(version, n);
}

// The same, for the grid reduce_sum launches on this GPU: v6 and v7 take one wave of resident
// blocks, not one block. Needs a current device.
double launched_tree_height(int version, std::size_t n) {
  if (version != 6 && version != 7) return tree_height(version, n);
  return reduction::summation_tree_height(version, n,
                                          reduction::grid_stride_resident_blocks(version));
}

struct Reference {
  double sum = 0.0;      // double precision: its own error, <= n 2^-53 sum|x|, is negligible here
  double abs_sum = 0.0;  // sum |x_i|, the scale of the error bound
};

Reference reference_sum(const std::vector<float>& x) {
  Reference r;
  for (float v : x) {
    r.sum += v;
    r.abs_sum += std::fabs(v);
  }
  return r;
}

std::vector<float> uniform(std::size_t n, float lo, float hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> x(n);
  for (float& v : x) v = dist(rng);
  return x;
}

std::vector<float> small_integers(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(-8, 8);
  std::vector<float> x(n);
  for (float& v : x) v = static_cast<float>(dist(rng));
  return x;
}

// Host data on the device at a chosen misalignment: data() is 4 * offset bytes past a 16-byte
// boundary (cudaMalloc returns 256-byte aligned memory). NaN guards fill the buffer before and
// after the data, so a kernel that reads outside [data, data + n) returns NaN and fails.
class Placed {
 public:
  Placed(const std::vector<float>& host, int offset)
      : buffer_(host.size() + 8), first_(4 + static_cast<std::size_t>(offset)) {
    std::vector<float> padded(buffer_.size(), kNaN);
    std::copy(host.begin(), host.end(), padded.begin() + static_cast<std::ptrdiff_t>(first_));
    CUDA_CHECK(cudaMemcpy(buffer_.data(), padded.data(), buffer_.bytes(), cudaMemcpyHostToDevice));
    // From pageable memory cudaMemcpy may return before the data lands, and the tests' streams
    // are non-blocking (they do not wait for the legacy default stream): wait for the copy.
    CUDA_CHECK(cudaDeviceSynchronize());
  }
  const float* data() const { return buffer_.data() + first_; }
  float* data() { return buffer_.data() + first_; }

 private:
  course::DeviceBuffer<float> buffer_;
  std::size_t first_;
};

float gpu_sum(int version, const std::vector<float>& host, int offset = 0) {
  const Placed in(host, offset);
  course::Stream stream;
  reduction::Workspace ws;
  course::DeviceBuffer<float> out(1);
  reduction::reduce_sum(version, in.data(), host.size(), out.data(), ws, stream);
  return read_back(out.data(), stream);
}

// The sizes-and-data checks every version must pass; exact results only, so they catch any
// dropped, doubled or out-of-range element.
void check_exact_sums(int version) {
  for (std::size_t n : kSizes) {
    CAPTURE(version, n);
    CHECK(gpu_sum(version, std::vector<float>(n, 1.0f)) == static_cast<float>(n));
    const std::vector<float> ints = small_integers(n, 7 + static_cast<unsigned>(n));
    CHECK(gpu_sum(version, ints) == static_cast<float>(reference_sum(ints).sum));
  }
}

// A pointer that is not 16-byte aligned, and sizes that leave every head/tail combination.
void check_offsets(int version) {
  for (int offset : {1, 2, 3}) {
    for (std::size_t n : {std::size_t{1}, std::size_t{2}, std::size_t{3}, std::size_t{5},
                          std::size_t{7}, std::size_t{1025}, std::size_t{1000003}}) {
      CAPTURE(version, offset, n);
      const std::vector<float> ints = small_integers(n, 11 + static_cast<unsigned>(n));
      CHECK(gpu_sum(version, ints, offset) == static_cast<float>(reference_sum(ints).sum));
    }
  }
}

}  // namespace

// ================================================================== CPU tests (no GPU needed)

TEST_CASE("versions() lists 0..7 in teaching order, named reduce_vN_<idea>", "[versions]") {
  const auto& v = reduction::versions();
  REQUIRE(v.size() == 8);
  std::set<std::string> names;
  for (std::size_t k = 0; k < v.size(); ++k) {
    CAPTURE(k);
    CHECK(v[k].number == static_cast<int>(k));
    CHECK(std::string(v[k].name).rfind("reduce_v" + std::to_string(k) + "_", 0) == 0);
    CHECK(std::string(v[k].fixes).size() > 10);
    names.insert(v[k].name);
  }
  CHECK(names.size() == v.size());
  // Atomics make v0 and v6 order-dependent; the final version must not be.
  CHECK_FALSE(v[0].deterministic);
  CHECK_FALSE(v[6].deterministic);
  CHECK(v[reduction::kBestVersion].deterministic);
  CHECK(reduction::elements_per_block(3) == 256);
  CHECK(reduction::elements_per_block(5) == 512);
  CHECK_THROWS_AS(reduction::elements_per_block(7), std::invalid_argument);
}

TEST_CASE("summation_tree_height knows versions 0..7 only", "[versions][errors]") {
  for (const int version : {-1, 8, 99}) {
    CHECK_THROWS_AS(reduction::summation_tree_height(version, 1000), std::invalid_argument);
  }
  for (const reduction::VersionInfo& v : reduction::versions()) {
    CHECK_NOTHROW(reduction::summation_tree_height(v.number, 1000));
  }
}

TEST_CASE("summation_tree_height with the grid: never above the grid-free bound", "[versions]") {
  for (int version : {6, 7}) {
    for (std::size_t n : kSizes) {
      for (unsigned blocks : {1u, 132u, 1056u, 1u << 20}) {
        CAPTURE(version, n, blocks);
        const double h = reduction::summation_tree_height(version, n, blocks);
        CHECK(h >= 1.0);
        CHECK(h <= tree_height(version, n));
      }
    }
    CHECK_THROWS_AS(reduction::summation_tree_height(version, 100, 0u), std::invalid_argument);
  }
  // The numbers the header comment quotes: n = 10^6, 245 tiles, a grid of 245 blocks.
  CHECK(reduction::summation_tree_height(7, 1000000, 1056) == 28.0);
  CHECK(reduction::summation_tree_height(6, 1000000, 1056) == 262.0);
  CHECK(tree_height(7, 1000000) == 7846.0);
  // Other versions ignore the grid.
  CHECK(reduction::summation_tree_height(3, 5000, 7u) == tree_height(3, 5000));
}

TEST_CASE("reduce_sum rejects bad arguments before touching the GPU", "[errors]") {
  reduction::Workspace ws;
  alignas(16) float host[8] = {};
  float* out = host;  // never written: every call below throws first
  CHECK_THROWS_WITH(reduction::reduce_sum(8, host, 4, out, ws, nullptr), Contains("expected 0..7"));
  CHECK_THROWS_WITH(reduction::reduce_sum(-1, host, 4, out, ws, nullptr), Contains("version -1"));
  CHECK_THROWS_WITH(reduction::reduce_sum(7, nullptr, 5, out, ws, nullptr), Contains("null"));
  CHECK_THROWS_WITH(reduction::reduce_sum(7, host, 4, nullptr, ws, nullptr),
                    Contains("output is null"));
  CHECK_THROWS_WITH(reduction::reduce_sum(7, host, reduction::kMaxElements + 1, out, ws, nullptr),
                    Contains("kMaxElements"));
  const auto* misaligned = reinterpret_cast<const float*>(reinterpret_cast<const char*>(host) + 1);
  CHECK_THROWS_WITH(reduction::reduce_sum(7, misaligned, 4, out, ws, nullptr),
                    Contains("4-byte aligned"));
  course::DeviceBuffer<unsigned char> temp;
  CHECK_THROWS_AS(reduction::cub_sum(nullptr, 3, out, temp, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(reduction::thrust_sum(nullptr, 3, nullptr), std::invalid_argument);
}

TEST_CASE("argmax, moments and softmax reject bad arguments", "[errors]") {
  reduction::Workspace ws;
  alignas(16) float host[8] = {};
  ArgMax am{};
  Moments mo{};
  CHECK_THROWS_WITH(reduction::argmax(host, 0, &am, ws, nullptr), Contains("no maximum"));
  CHECK_THROWS_WITH(reduction::moments(host, 0, &mo, ws, nullptr), Contains("undefined"));
  CHECK_THROWS_AS(reduction::argmax(nullptr, 3, &am, ws, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(reduction::moments(host, 3, nullptr, ws, nullptr), std::invalid_argument);
  CHECK_THROWS_WITH(reduction::softmax_rows(host, host, 2, 0, nullptr), Contains("cols = 0"));
  CHECK_THROWS_WITH(reduction::softmax_rows(host, host, 1u << 16, 1u << 16, nullptr),
                    Contains("kMaxElements"));
  CHECK_THROWS_AS(reduction::softmax_rows(nullptr, host, 2, 3, nullptr), std::invalid_argument);
  // An empty batch is valid and needs no GPU.
  CHECK_NOTHROW(reduction::softmax_rows(nullptr, nullptr, 0, 10, nullptr));
}

TEST_CASE("split_for_float4: hand-computed cases", "[float4][ex3]") {
  const auto at = [](std::uintptr_t address) { return reinterpret_cast<const float*>(address); };
  struct Case {
    std::uintptr_t address;
    std::size_t n, head, vec4, tail;
  };
  const Case cases[] = {
      {0x1000, 0, 0, 0, 0},  {0x1000, 10, 0, 2, 2}, {0x1000, 8, 0, 2, 0}, {0x1004, 10, 3, 1, 3},
      {0x1008, 10, 2, 2, 0}, {0x100c, 10, 1, 2, 1}, {0x1008, 1, 1, 0, 0}, {0x1004, 2, 2, 0, 0},
      {0x1004, 3, 3, 0, 0},  {0x1004, 7, 3, 1, 0},  {0x100c, 0, 0, 0, 0}, {0x1010, 3, 0, 0, 3},
  };
  for (const Case& c : cases) {
    CAPTURE(c.address, c.n);
    const Float4Split s = reduction::split_for_float4(at(c.address), c.n);
    CHECK(s.head == c.head);
    CHECK(s.vec4 == c.vec4);
    CHECK(s.tail == c.tail);
  }
}

TEST_CASE("split_for_float4: the pieces cover n and the body is 16-byte aligned", "[float4][ex3]") {
  alignas(16) float buffer[64];
  for (int offset = 0; offset < 4; ++offset) {
    for (std::size_t n = 0; n <= 40; ++n) {
      CAPTURE(offset, n);
      const float* p = buffer + offset;
      const Float4Split s = reduction::split_for_float4(p, n);
      CHECK(s.head + 4 * s.vec4 + s.tail == n);
      CHECK(s.head <= 3);
      CHECK(s.tail <= 3);
      if (s.vec4 > 0) CHECK(reinterpret_cast<std::uintptr_t>(p + s.head) % 16 == 0);
      // The head is as long as it can be: it only stops short of the boundary when n runs out.
      if (s.head < 3 && s.head < n) CHECK(reinterpret_cast<std::uintptr_t>(p + s.head) % 16 == 0);
    }
  }
}

TEST_CASE("argmax_combine: larger value wins, ties go to the lower index, NaN wins", "[argmax]") {
  using reduction::argmax_combine;
  const auto same = [](ArgMax a, ArgMax b) {
    return float_bits(a.value) == float_bits(b.value) && a.index == b.index;
  };
  CHECK(same(argmax_combine({1.0f, 5}, {2.0f, 9}), {2.0f, 9}));
  CHECK(same(argmax_combine({2.0f, 9}, {1.0f, 5}), {2.0f, 9}));
  CHECK(same(argmax_combine({3.0f, 7}, {3.0f, 2}), {3.0f, 2}));
  CHECK(same(argmax_combine({3.0f, 2}, {3.0f, 7}), {3.0f, 2}));
  CHECK(argmax_combine({-0.0f, 4}, {0.0f, 8}).index == 4);  // -0 == +0: a tie
  CHECK(argmax_combine({0.0f, 8}, {-0.0f, 4}).index == 4);
  CHECK(argmax_combine({kNaN, 6}, {kInf, 1}).index == 6);
  CHECK(argmax_combine({kInf, 1}, {kNaN, 6}).index == 6);
  CHECK(argmax_combine({kNaN, 6}, {kNaN, 3}).index == 3);
  CHECK(argmax_combine({-kInf, 0xffffffffu}, {-kInf, 5}).index == 5);  // the kernels' identity
}

TEST_CASE("argmax_combine gives the first maximum in any tree order", "[argmax]") {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> small(0, 5);  // few distinct values: many ties
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<ArgMax> items(1 + trial * 3);
    for (std::size_t i = 0; i < items.size(); ++i)
      items[i] = {static_cast<float>(small(rng)), static_cast<std::uint32_t>(i)};
    if (trial % 10 == 9) items[items.size() / 2].value = kNaN;
    // Reference: a plain first-maximum scan, NaN first.
    std::size_t expected = 0;
    for (std::size_t i = 0; i < items.size(); ++i) {
      const bool nan_i = std::isnan(items[i].value), nan_e = std::isnan(items[expected].value);
      if ((nan_i && !nan_e) || (!nan_e && !nan_i && items[i].value > items[expected].value))
        expected = i;
    }
    // Combine in a random order, pairwise like a tree.
    std::vector<ArgMax> pool = items;
    std::shuffle(pool.begin(), pool.end(), rng);
    while (pool.size() > 1) {
      std::vector<ArgMax> next;
      for (std::size_t i = 0; i + 1 < pool.size(); i += 2)
        next.push_back(reduction::argmax_combine(pool[i], pool[i + 1]));
      if (pool.size() % 2 == 1) next.push_back(pool.back());
      pool = next;
    }
    CAPTURE(trial);
    CHECK(pool[0].index == expected);
  }
}

namespace {
// Two-pass mean and population variance in double: the oracle.
void reference_moments(const std::vector<float>& x, double& mean, double& variance) {
  double s = 0.0;
  for (float v : x) s += v;
  mean = s / static_cast<double>(x.size());
  double ss = 0.0;
  for (float v : x) ss += (v - mean) * (v - mean);
  variance = ss / static_cast<double>(x.size());
}

// Error bounds for merge trees of height h (Chan, Golub and LeVeque, "Algorithms for computing
// the sample variance", 1983: pairwise updating loses O(h u kappa) relative accuracy in M2,
// kappa = sqrt(1 + mean^2 / variance) the condition number of the data). The constants cover
// the few roundings of one merge (a division, products, sums).
double mean_tolerance(double h, double max_abs) {
  return 4.0 * h * kU * max_abs;
}
double variance_tolerance(double h, double mean, double variance) {
  const double kappa = std::sqrt(1.0 + mean * mean / variance);
  return 8.0 * h * kU * kappa * variance;
}

Moments merge_all(const std::vector<float>& x, std::size_t first, std::size_t last) {
  if (last - first == 1) return {1u, x[first], 0.0f};
  const std::size_t mid = first + (last - first) / 2;
  return reduction::moments_merge(merge_all(x, first, mid), merge_all(x, mid, last));
}
}  // namespace

TEST_CASE("moments_merge: a merge tree matches a two-pass double reference", "[moments]") {
  for (std::size_t n : {1u, 2u, 3u, 17u, 1000u, 4099u}) {
    CAPTURE(n);
    const std::vector<float> x = uniform(n, 0.0f, 6.0f, static_cast<unsigned>(n));  // mean 3
    double mean = 0.0, variance = 0.0;
    reference_moments(x, mean, variance);
    const Moments m = merge_all(x, 0, n);
    const double h = std::ceil(std::log2(static_cast<double>(n))) + 1.0;
    CHECK(m.count == n);
    CHECK(std::fabs(m.mean - mean) <= mean_tolerance(h, 6.0));
    if (n > 1)
      CHECK(std::fabs(reduction::population_variance(m) - variance) <=
            variance_tolerance(h, mean, variance));
  }
}

TEST_CASE("moments_merge: empty is the identity; constant data has zero variance", "[moments]") {
  const Moments a{5u, 2.5f, 3.0f};
  const Moments empty{0u, 0.0f, 0.0f};
  const Moments l = reduction::moments_merge(empty, a), r = reduction::moments_merge(a, empty);
  CHECK((l.count == 5 && l.mean == 2.5f && l.m2 == 3.0f));
  CHECK((r.count == 5 && r.mean == 2.5f && r.m2 == 3.0f));
  const Moments c = merge_all(std::vector<float>(1000, 0.1f), 0, 1000);
  CHECK(c.mean == 0.1f);
  CHECK(c.m2 == 0.0f);
  CHECK(std::isnan(reduction::population_variance(empty)));
}

TEST_CASE("uniform_from_index is deterministic and stays in [lo, hi)", "[fill]") {
  double sum = 0.0;
  for (std::size_t i = 0; i < 100000; ++i) {
    const float v = reduction::uniform_from_index(42, i, -1.0f, 1.0f);
    REQUIRE(v >= -1.0f);
    REQUIRE(v < 1.0f);
    sum += v;
  }
  CHECK(std::fabs(sum / 100000) < 0.01);  // mean of U(-1, 1) is 0; the standard error is 0.0018
  CHECK(reduction::uniform_from_index(42, 7, 0, 1) == reduction::uniform_from_index(42, 7, 0, 1));
  CHECK(reduction::uniform_from_index(42, 7, 0, 1) != reduction::uniform_from_index(43, 7, 0, 1));
}

// ================================================================== GPU tests

// v3 and v5 are exercises: their exact-sum and offset checks are their own [ex1]/[ex2] cases.
namespace {
bool is_exercise_version(int version) {
  return version == 3 || version == 5;
}
}  // namespace

TEST_CASE("every version: all-ones gives exactly n, small integers their exact sum", "[gpu][sum]") {
  for (const auto& v : reduction::versions()) {
    if (!is_exercise_version(v.number)) check_exact_sums(v.number);
  }
}

TEST_CASE("every version: random data within the error bound of its summation tree", "[gpu][sum]") {
  for (const auto& v : reduction::versions()) {
    for (std::size_t n : kSizes) {
      for (float lo : {-1.0f, 0.0f}) {  // mixed signs (cancellation), then all positive
        CAPTURE(v.number, n, lo);
        const std::vector<float> x = uniform(n, lo, 1.0f, 100 + static_cast<unsigned>(n));
        const Reference ref = reference_sum(x);
        const double tolerance = gamma_h(launched_tree_height(v.number, n)) * ref.abs_sum;
        const float got = gpu_sum(v.number, x);
        CHECK(std::fabs(got - ref.sum) <= tolerance);
      }
    }
  }
}

TEST_CASE("every version: input pointers 4, 8 and 12 bytes past a 16-byte boundary",
          "[gpu][sum][alignment]") {
  for (const auto& v : reduction::versions()) {
    if (!is_exercise_version(v.number)) check_offsets(v.number);
  }
}

namespace {
// The summation trees of one block of the shared-memory passes, emulated on the CPU in the GPU's
// order. A sum of two floats is rounded once whatever the compiler does (there is no product to
// fuse), so the emulation and the kernel agree bit for bit when they add in the same order, and
// data on which nearly every addition rounds makes another order round differently.
using Tree = std::array<float, reduction::kBlockThreads>;
constexpr int kT = reduction::kBlockThreads;

Tree load_block(const float* x, std::size_t count) {
  Tree p{};
  for (int t = 0; t < kT; ++t) p[t] = static_cast<std::size_t>(t) < count ? x[t] : 0.0f;
  return p;
}
// v1, v2: interleaved addressing, partial[t] += partial[t + s] for t a multiple of 2s.
float interleaved_tree(const float* x, std::size_t count) {
  Tree p = load_block(x, count);
  for (int s = 1; s < kT; s *= 2) {
    for (int t = 0; t + s < kT; t += 2 * s) p[t] += p[t + s];
  }
  return p[0];
}
// v3: sequential addressing, partial[t] += partial[t + stride] for t < stride.
float sequential_tree(const float* x, std::size_t count) {
  Tree p = load_block(x, count);
  for (int stride = kT / 2; stride > 0; stride /= 2) {
    for (int t = 0; t < stride; ++t) p[t] += p[t + stride];
  }
  return p[0];
}
// v5: x[t] + x[t + kT] at load, sequential addressing down to 64 values, then lane t of warp 0
// takes partial[t] + partial[t + 32] and adds __shfl_down_sync(v, offset) for offset 16 .. 1
// (a lane whose source lane is past 31 gets its own value back).
float v5_tree(const float* x, std::size_t count) {
  Tree p{};
  for (int t = 0; t < kT; ++t) {
    const auto i = static_cast<std::size_t>(t);
    float v = i < count ? x[i] : 0.0f;
    if (i + kT < count) v += x[i + kT];
    p[t] = v;
  }
  for (int stride = kT / 2; stride > 32; stride /= 2) {
    for (int t = 0; t < stride; ++t) p[t] += p[t + stride];
  }
  std::array<float, 32> v{};
  for (int t = 0; t < 32; ++t) v[t] = p[t] + p[t + 32];
  for (int offset = 16; offset > 0; offset /= 2) {
    const std::array<float, 32> before = v;
    for (int t = 0; t < 32; ++t) v[t] = before[t] + before[t + offset < 32 ? t + offset : t];
  }
  return v[0];
}

// Full 24-bit mantissas, magnitudes from 2^-3 to 2^4, both signs: nearly every addition rounds,
// so another order of the additions changes most blocks' sums in their last bits.
std::vector<float> rounding_data(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> exponent(-3, 3);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = std::ldexp(mantissa(rng), exponent(rng)) * (rng() % 2 ? 1.0f : -1.0f);
  return x;
}

using Pass = void (*)(const float*, std::size_t, float*, cudaStream_t);
// The block sums of one pass over x, as bit patterns.
std::vector<std::uint32_t> pass_bits(Pass pass, const std::vector<float>& x,
                                     std::size_t per_block) {
  const std::size_t blocks = (x.size() + per_block - 1) / per_block;
  auto din = course::to_device(x);
  course::DeviceBuffer<float> sums(blocks);
  pass(din.data(), x.size(), sums.data(), nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<std::uint32_t> bits;
  for (float s : course::to_host(sums)) bits.push_back(float_bits(s));
  return bits;
}
std::vector<std::uint32_t> emulated_bits(float (*tree)(const float*, std::size_t),
                                         const std::vector<float>& x, std::size_t per_block) {
  std::vector<std::uint32_t> bits;
  for (std::size_t b = 0; b * per_block < x.size(); ++b) {
    bits.push_back(
        float_bits(tree(x.data() + b * per_block, std::min(per_block, x.size() - b * per_block))));
  }
  return bits;
}
}  // namespace

TEST_CASE("v3 adds in the order of sequential addressing, bit for bit", "[gpu][ex1]") {
  // What the exercise teaches, observed without a timer: the ORDER of the additions. The
  // interleaved loop of v1/v2 gives the same exact-integer sums (the tests above), but rounds
  // differently on this data; the lesson's v2 pass checks the emulation itself.
  const std::vector<float> x = rounding_data(63 * kT + 77, 2024);  // 64 blocks, the last partial
  const auto sequential = emulated_bits(sequential_tree, x, kT);
  const auto interleaved = emulated_bits(interleaved_tree, x, kT);
  std::size_t told_apart = 0;
  for (std::size_t b = 0; b < sequential.size(); ++b) told_apart += sequential[b] != interleaved[b];
  REQUIRE(told_apart >= sequential.size() / 2);  // the data tells the two trees apart
  CHECK(pass_bits(reduction::reduce_pass_v2_interleaved_bank_conflicts, x, kT) == interleaved);
  INFO("block sums differ from the sequential-addressing tree: is the loop still interleaved?");
  CHECK(pass_bits(reduction::reduce_pass_v3_sequential_addressing, x, kT) == sequential);
}

TEST_CASE("v5 adds in v4's load order, then the tree, then the shuffles, bit for bit",
          "[gpu][ex2]") {
  const std::vector<float> x = rounding_data(63 * 2 * kT + 300, 77);  // 64 blocks, the last partial
  INFO("block sums differ from x[i] + x[i + 256], the tree to 64 values and the shuffle tail");
  CHECK(pass_bits(reduction::reduce_pass_v5_warp_shuffle, x, 2 * kT) ==
        emulated_bits(v5_tree, x, 2 * kT));
}

TEST_CASE("v3 sequential addressing: exact sums at every size and offset", "[gpu][ex1]") {
  check_exact_sums(3);
  check_offsets(3);
}

TEST_CASE("v5 warp shuffle: exact sums at every size and offset", "[gpu][ex2]") {
  check_exact_sums(5);
  check_offsets(5);
}

TEST_CASE("v7 is bitwise identical run to run", "[gpu][sum][determinism]") {
  const std::size_t n = 1000003;
  const std::vector<float> x = uniform(n, -1.0f, 1.0f, 5);
  const Placed in(x, 1);
  course::DeviceBuffer<float> out(1);
  course::Stream stream;
  reduction::Workspace ws;
  reduction::reduce_sum(reduction::kBestVersion, in.data(), n, out.data(), ws, stream);
  const float first = read_back(out.data(), stream);
  CHECK(std::fabs(first - reference_sum(x).sum) <=
        gamma_h(launched_tree_height(7, n)) * reference_sum(x).abs_sum);
  for (int run = 0; run < 20; ++run) {
    reduction::reduce_sum(reduction::kBestVersion, in.data(), n, out.data(), ws, stream);
    CAPTURE(run);
    CHECK(float_bits(read_back(out.data(), stream)) == float_bits(first));
  }
  // A fresh workspace and another stream change nothing either.
  course::Stream other;
  reduction::Workspace fresh;
  reduction::reduce_sum(reduction::kBestVersion, in.data(), n, out.data(), fresh, other);
  CHECK(float_bits(read_back(out.data(), other)) == float_bits(first));
}

TEST_CASE("the versions documented as deterministic repeat their bits", "[gpu][sum][determinism]") {
  const std::vector<float> x = uniform((1u << 20) + 3, -1.0f, 1.0f, 9);
  for (const auto& v : reduction::versions()) {
    if (!v.deterministic) continue;
    CAPTURE(v.number);
    const std::uint32_t first = float_bits(gpu_sum(v.number, x));
    for (int run = 0; run < 5; ++run) CHECK(float_bits(gpu_sum(v.number, x)) == first);
  }
}

TEST_CASE("v0 atomics: a float total of ones stops at 2^24", "[gpu][sum][atomics]") {
  // Documented behaviour: each element is one atomicAdd, i.e. one rounded float addition on the
  // running total (in some order). Once the total reaches 2^24, 2^24 + 1 rounds (to even) back
  // to 2^24, whatever the order.
  const std::size_t n = (1u << 24) + (1u << 20);
  CHECK(gpu_sum(0, std::vector<float>(n, 1.0f)) == 16777216.0f);
  CHECK(gpu_sum(0, std::vector<float>((1u << 24) - 1, 1.0f)) == 16777215.0f);  // below: exact
}

TEST_CASE("one Workspace serves many sizes and versions in turn", "[gpu][sum]") {
  course::Stream stream;
  reduction::Workspace ws;
  course::DeviceBuffer<float> out(1);
  for (std::size_t n : {std::size_t{1000003}, std::size_t{5}, std::size_t{(1u << 20) + 3},
                        std::size_t{0}, std::size_t{1}}) {
    const std::vector<float> ints = small_integers(n, 21);
    const Placed in(ints, 0);
    for (int version : {1, 5, 6, 7}) {
      CAPTURE(n, version);
      reduction::reduce_sum(version, in.data(), n, out.data(), ws, stream);
      CHECK(read_back(out.data(), stream) == static_cast<float>(reference_sum(ints).sum));
    }
  }
}

TEST_CASE("CUB and Thrust baselines: exact on exact data, within bound on random data",
          "[gpu][baseline]") {
  course::Stream stream;
  course::DeviceBuffer<unsigned char> temp;
  course::DeviceBuffer<float> out(1);
  for (std::size_t n : kSizes) {
    CAPTURE(n);
    const std::vector<float> ints = small_integers(n, 31);
    const Placed in_ints(ints, 0);
    reduction::cub_sum(in_ints.data(), n, out.data(), temp, stream);
    CHECK(read_back(out.data(), stream) == static_cast<float>(reference_sum(ints).sum));
    CHECK(reduction::thrust_sum(in_ints.data(), n, stream) ==
          static_cast<float>(reference_sum(ints).sum));
    // The libraries' trees are theirs to choose: bound them as any order (h = n).
    const std::vector<float> x = uniform(n, -1.0f, 1.0f, 32);
    const Placed in_x(x, 3);
    const Reference ref = reference_sum(x);
    reduction::cub_sum(in_x.data(), n, out.data(), temp, stream);
    CHECK(std::fabs(read_back(out.data(), stream) - ref.sum) <=
          gamma_h(static_cast<double>(n)) * ref.abs_sum);
    CHECK(std::fabs(reduction::thrust_sum(in_x.data(), n, stream) - ref.sum) <=
          gamma_h(static_cast<double>(n)) * ref.abs_sum);
  }
}

TEST_CASE("fill_uniform writes uniform_from_index, bit for bit", "[gpu][fill]") {
  const std::size_t n = 10007;
  course::DeviceBuffer<float> d(n);
  course::Stream stream;
  reduction::fill_uniform(d.data(), n, 1234, -2.0f, 3.0f, stream);
  stream.synchronize();
  const std::vector<float> h = course::to_host(d);
  for (std::size_t i = 0; i < n; ++i) {
    if (float_bits(h[i]) != float_bits(reduction::uniform_from_index(1234, i, -2.0f, 3.0f))) {
      FAIL("fill_uniform differs from uniform_from_index at i = " << i);
    }
  }
}

// ------------------------------------------------------------------ argmax

namespace {
ArgMax gpu_argmax(const std::vector<float>& host, int offset) {
  const Placed in(host, offset);
  course::Stream stream;
  reduction::Workspace ws;
  course::DeviceBuffer<ArgMax> out(1);
  reduction::argmax(in.data(), host.size(), out.data(), ws, stream);
  return read_back(out.data(), stream);
}

std::uint32_t reference_argmax(const std::vector<float>& x) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < x.size(); ++i) {
    const bool nan_i = std::isnan(x[i]), nan_b = std::isnan(x[best]);
    if (nan_b) break;  // the first NaN is the answer
    if (nan_i || x[i] > x[best]) best = i;
  }
  return static_cast<std::uint32_t>(best);
}
}  // namespace

TEST_CASE("argmax: the first index of the maximum, at every size and offset", "[gpu][argmax]") {
  std::mt19937 rng(17);
  for (std::size_t n : kSizes) {
    if (n == 0) continue;
    for (int offset : {0, 1, 3}) {
      CAPTURE(n, offset);
      std::vector<float> x = uniform(n, -100.0f, 100.0f, static_cast<unsigned>(n) + offset);
      // Plant the maximum twice: ties must go to the lower index, wherever the two fall
      // (same warp, different blocks, the unaligned head, the tail).
      std::uniform_int_distribution<std::size_t> pick(0, n - 1);
      const std::size_t a = pick(rng), b = pick(rng);
      x[a] = 1000.0f;
      x[b] = 1000.0f;
      const ArgMax got = gpu_argmax(x, offset);
      CHECK(got.value == 1000.0f);
      CHECK(got.index == std::min(a, b));
      CHECK(got.index == reference_argmax(x));
      // The maximum in the last element, then in the first.
      x[a] = x[b] = 0.0f;
      x[n - 1] = 2000.0f;
      CHECK(gpu_argmax(x, offset).index == n - 1);
      x[0] = 2000.0f;
      CHECK(gpu_argmax(x, offset).index == 0);
    }
  }
}

TEST_CASE("argmax: all equal gives 0, NaN is reported at its first index, -inf is a value",
          "[gpu][argmax]") {
  const std::size_t n = 100003;
  CHECK(gpu_argmax(std::vector<float>(n, 7.0f), 2).index == 0);
  CHECK(gpu_argmax(std::vector<float>(n, -kInf), 1).index == 0);
  std::vector<float> x = uniform(n, -1.0f, 1.0f, 4);
  x[90001] = kNaN;
  x[50000] = kNaN;
  x[12] = kInf;
  const ArgMax got = gpu_argmax(x, 0);
  CHECK(got.index == 50000);
  CHECK(std::isnan(got.value));
}

// ------------------------------------------------------------------ mean and variance

TEST_CASE("moments: mean and variance against a two-pass double reference", "[gpu][moments]") {
  for (std::size_t n : kSizes) {
    if (n == 0) continue;
    for (int offset : {0, 3}) {
      CAPTURE(n, offset);
      // Mean 3, values in [0, 6): kappa ~ 1.7, like normalised image data.
      const std::vector<float> x = uniform(n, 0.0f, 6.0f, 50 + static_cast<unsigned>(n));
      const Placed in(x, offset);
      course::Stream stream;
      reduction::Workspace ws;
      course::DeviceBuffer<Moments> out(1);
      reduction::moments(in.data(), n, out.data(), ws, stream);
      const Moments m = read_back(out.data(), stream);
      double mean = 0.0, variance = 0.0;
      reference_moments(x, mean, variance);
      const double h = tree_height(7, n);
      CHECK(m.count == n);
      CHECK(std::fabs(m.mean - mean) <= mean_tolerance(h, 6.0));
      if (n > 1)
        CHECK(std::fabs(reduction::population_variance(m) - variance) <=
              variance_tolerance(h, mean, variance));
    }
  }
}

TEST_CASE("moments: constant data has exactly its value as mean and zero variance",
          "[gpu][moments]") {
  for (std::size_t n : {std::size_t{1}, std::size_t{33}, std::size_t{1000003}}) {
    CAPTURE(n);
    const Placed in(std::vector<float>(n, 0.1f), 1);
    course::Stream stream;
    reduction::Workspace ws;
    course::DeviceBuffer<Moments> out(1);
    reduction::moments(in.data(), n, out.data(), ws, stream);
    const Moments m = read_back(out.data(), stream);
    CHECK(m.count == n);
    CHECK(m.mean == 0.1f);
    CHECK(m.m2 == 0.0f);
  }
}

// ------------------------------------------------------------------ softmax

namespace {
std::vector<float> gpu_softmax(const std::vector<float>& scores, std::size_t rows, std::size_t cols,
                               bool in_place = false) {
  course::DeviceBuffer<float> in = course::to_device(scores);
  CUDA_CHECK(cudaDeviceSynchronize());  // the copy has landed before a non-blocking stream reads it
  course::DeviceBuffer<float> out(scores.size());
  course::Stream stream;
  float* dst = in_place ? in.data() : out.data();
  reduction::softmax_rows(in.data(), dst, rows, cols, stream);
  stream.synchronize();
  return in_place ? course::to_host(in) : course::to_host(out);
}

// Per-output bound, relative to p = exp(x - m) / S:
//  - this output's exp: x - m rounds with error |x - m| u, which exp() turns into a relative error
//    of |x - m| u, and expf itself is within 2 ulp <= 4u (the Programming Guide's "Mathematical
//    Functions" appendix): (gap + 4) u;
//  - the row sum S: its terms carry the same errors, weighted by p_j, and sum_j p_j (m - x_j)
//    <= log(cols) (it is at most the entropy of p), so (log(cols) + 4) u; plus the additions, a
//    chain of ceil(cols / 32) per lane and 5 shuffle levels, all terms positive: gamma(h);
//  - one rounding for the division: u.
double softmax_tolerance(double gap, std::size_t cols, double p) {
  const double h = std::ceil(static_cast<double>(cols) / 32.0) + 5.0;
  const double term = (gap + 4.0) * kU;
  const double sum = (std::log(static_cast<double>(cols)) + 4.0) * kU + gamma_h(h);
  return p * (term + sum + kU) + 1e-30;
}
}  // namespace

TEST_CASE("softmax_rows: against a double reference, rows sum to 1", "[gpu][softmax][ex4]") {
  const std::pair<std::size_t, std::size_t> shapes[] = {{1, 1},    {1, 31},   {3, 80}, {5, 33},
                                                        {7, 1000}, {2, 4097}, {33, 10}};
  for (const auto& [rows, cols] : shapes) {
    CAPTURE(rows, cols);
    const std::vector<float> x =
        uniform(rows * cols, -10.0f, 10.0f, static_cast<unsigned>(rows * 131 + cols));
    const std::vector<float> p = gpu_softmax(x, rows, cols);
    for (std::size_t r = 0; r < rows; ++r) {
      const float* row = x.data() + r * cols;
      const double m = *std::max_element(row, row + cols);
      double sum = 0.0;
      for (std::size_t c = 0; c < cols; ++c) sum += std::exp(static_cast<double>(row[c]) - m);
      double total = 0.0;
      for (std::size_t c = 0; c < cols; ++c) {
        const double expected = std::exp(static_cast<double>(row[c]) - m) / sum;
        const double got = p[r * cols + c];
        total += got;
        if (std::fabs(got - expected) > softmax_tolerance(m - row[c], cols, expected)) {
          FAIL("row " << r << " col " << c << ": got " << got << ", expected " << expected);
        }
      }
      CHECK(std::fabs(total - 1.0) <= gamma_h(static_cast<double>(cols) + 40.0));
    }
  }
}

TEST_CASE("softmax_rows: large logits do not overflow; -inf gives 0; in place works",
          "[gpu][softmax][ex4]") {
  // Without the max subtraction expf(1000) is inf and every output NaN.
  const std::vector<float> big = {1000.0f, 1001.0f, 999.0f, -kInf};
  const std::vector<float> p = gpu_softmax(big, 1, 4);
  const double e0 = std::exp(-1.0), e2 = std::exp(-2.0), s = e0 + 1.0 + e2;
  CHECK(p[0] == course::testing::Approx(e0 / s).epsilon(1e-6));
  CHECK(p[1] == course::testing::Approx(1.0 / s).epsilon(1e-6));
  CHECK(p[2] == course::testing::Approx(e2 / s).epsilon(1e-6));
  CHECK(p[3] == 0.0f);
  const std::vector<float> x = uniform(4 * 100, -5.0f, 5.0f, 77);
  const std::vector<float> separate = gpu_softmax(x, 4, 100);
  const std::vector<float> in_place = gpu_softmax(x, 4, 100, true);
  for (std::size_t i = 0; i < x.size(); ++i)
    CHECK(float_bits(in_place[i]) == float_bits(separate[i]));
}
