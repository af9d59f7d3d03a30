// Tests of lesson 03. Oracles: plain CPU loops (double precision where rounding matters), the
// runtime's own occupancy API, and NVIDIA's header-only occupancy calculator (cuda_occupancy.h).
//
// Tags: [gpu] needs a device; [exK] exercise K; [provokes-error] deliberately makes a CUDA call
// fail (an invalid launch, a sticky fault in a child process): compute-sanitizer reports those
// failures as findings, so sanitizer runs filter "[gpu]~[provokes-error]".
#include <cuda_occupancy.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/cuda_check.hpp"
#include "common/device.hpp"
#include "common/memory.hpp"
#include "common/stream.hpp"
#include "common/testing.hpp"
#include "kernels.cuh"

using course::testing::Contains;
using namespace lesson03;

namespace {

std::vector<float> random_floats(std::size_t n, float lo, float hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

std::vector<std::uint8_t> random_bytes(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(0, 255);
  std::vector<std::uint8_t> v(n);
  for (auto& x : v) x = static_cast<std::uint8_t>(dist(rng));
  return v;
}

// A pointer that is not null, for argument checks that must throw before anything dereferences it.
template <class T>
T* not_null() {
  static T dummy[4]{};
  return dummy;
}

constexpr float kSentinel = -12345.0f;

}  // namespace

// =============================================================================================
// CPU tests: the per-element math and the argument checks (no CUDA call is reached)
// =============================================================================================

TEST_CASE("ceil_div gives the fewest whole blocks that cover n", "[index]") {
  CHECK(ceil_div(0, 256) == 0);
  CHECK(ceil_div(1, 256) == 1);
  CHECK(ceil_div(255, 256) == 1);
  CHECK(ceil_div(256, 256) == 1);
  CHECK(ceil_div(257, 256) == 2);
  CHECK(ceil_div(1000003, 32) == 31251);
  for (std::size_t block : {1u, 3u, 32u, 100u, 1024u}) {
    for (std::size_t n = 0; n < 3000; n += 7) {
      const std::size_t g = ceil_div(n, block);
      CHECK(g * block >= n);                   // covers
      CHECK((g == 0 || (g - 1) * block < n));  // and not one block more
    }
  }
  // No overflow where (n + block - 1) / block would wrap around.
  const std::size_t big = SIZE_MAX;
  CHECK(ceil_div(big, 256) == big / 256 + 1);
}

TEST_CASE("Threads are numbered x-fastest inside a block; warps are runs of 32", "[index]") {
  // Programming Guide, Thread Hierarchy: thread (x, y, z) of a (Dx, Dy, Dz) block is number
  // x + y Dx + z Dx Dy.
  CHECK(linear_thread_index(0, 0, 0, 16, 4) == 0);
  CHECK(linear_thread_index(15, 0, 0, 16, 4) == 15);
  CHECK(linear_thread_index(0, 1, 0, 16, 4) == 16);
  CHECK(linear_thread_index(15, 1, 0, 16, 4) == 31);  // the last lane of warp 0
  CHECK(linear_thread_index(0, 2, 0, 16, 4) == 32);   // the first lane of warp 1
  CHECK(linear_thread_index(1, 1, 1, 2, 2) == 7);
}

TEST_CASE("path_of puts `ways` paths in every warp, or one path per warp", "[warp]") {
  for (int ways : {1, 2, 3, 4, 7, 8, 16, 32}) {
    for (std::size_t warp = 0; warp < 5; ++warp) {
      std::vector<int> interleaved, uniform;
      for (std::size_t lane = 0; lane < 32; ++lane) {
        const std::size_t i = warp * 32 + lane;
        interleaved.push_back(path_of(i, ways, PathLayout::lane_interleaved));
        uniform.push_back(path_of(i, ways, PathLayout::warp_uniform));
        CHECK(interleaved.back() == static_cast<int>(lane % ways));
      }
      std::sort(interleaved.begin(), interleaved.end());
      CHECK(std::unique(interleaved.begin(), interleaved.end()) - interleaved.begin() == ways);
      CHECK(std::all_of(uniform.begin(), uniform.end(),
                        [&](int p) { return p == static_cast<int>(warp % ways); }));
    }
  }
}

TEST_CASE("path_work is xorshift32 plus a per-path salt", "[warp]") {
  CHECK(path_work(12345u, 3, 0) == 12345u);
  // One step from x = 1 by hand: 1 ^ (1 << 13) = 8193; 8193 >> 17 = 0; 8193 ^ (8193 << 5) = 270369;
  // plus the salt of path 0, 0x9E3779B9 = 2654435769.
  CHECK(path_work(1u, 0, 1) == 2654706138u);
  CHECK(path_work(divergence_seed(5), 0, 10) != path_work(divergence_seed(5), 1, 10));
  CHECK(divergence_seed(0) == 1u);
}

TEST_CASE("normalize_u8 matches (v / 255 - mean) / std in double precision", "[image]") {
  const Normalization norms[] = {Normalization::unit(), Normalization::imagenet()};
  for (const auto& norm : norms) {
    for (int c = 0; c < 3; ++c) {
      for (int v = 0; v < 256; ++v) {
        const double ref = (v / 255.0 - norm.mean[c]) / norm.std[c];
        const float got =
            normalize_u8(static_cast<std::uint8_t>(v), norm.mean[c], 1.0f / norm.std[c]);
        // Three float roundings (scale, subtract, multiply by a rounded 1/std): a few ulp of 2.7.
        CHECK(std::fabs(got - ref) <= 2e-6);
      }
    }
  }
}

TEST_CASE("to_u8_saturate rounds to nearest and saturates", "[image]") {
  CHECK(to_u8_saturate(0.0f) == 0);
  CHECK(to_u8_saturate(1.0f) == 255);
  CHECK(to_u8_saturate(0.5f) == 128);  // 127.5 rounds up
  CHECK(to_u8_saturate(-0.25f) == 0);
  CHECK(to_u8_saturate(1.75f) == 255);
  CHECK(to_u8_saturate(INFINITY) == 255);
  CHECK(to_u8_saturate(-INFINITY) == 0);
  CHECK(to_u8_saturate(NAN) == 0);
  for (int v = 0; v < 256; ++v) {  // the round trip through normalize_u8 is exact
    CHECK(to_u8_saturate(normalize_u8(static_cast<std::uint8_t>(v), 0.0f, 1.0f)) == v);
  }
}

TEST_CASE("Every lesson kernel has a name for the occupancy tables", "[occupancy]") {
  const LessonKernel all[] = {LessonKernel::vector_add, LessonKernel::vector_add_grid_stride,
                              LessonKernel::divergence, LessonKernel::warp_sum,
                              LessonKernel::tiny_gemm,  LessonKernel::bgr8_to_rgb_planar};
  std::vector<std::string> names;
  for (LessonKernel k : all) names.emplace_back(kernel_name(k));
  std::sort(names.begin(), names.end());
  CHECK(std::unique(names.begin(), names.end()) == names.end());
  CHECK_THROWS_AS(kernel_name(static_cast<LessonKernel>(99)), std::invalid_argument);
}

TEST_CASE("n == 0 launches nothing, so it needs neither pointers nor a GPU", "[tail]") {
  CHECK_NOTHROW(vector_add(nullptr, nullptr, nullptr, 0));
  CHECK_NOTHROW(vector_add_one_per_thread(nullptr, nullptr, nullptr, 0, 256));
  CHECK_NOTHROW(vector_add_truncated_grid(nullptr, nullptr, nullptr, 0));
  CHECK_NOTHROW(run_divergence(nullptr, 0, 4, 10, PathLayout::warp_uniform));
  CHECK_NOTHROW(warp_sums(nullptr, nullptr, 0));
  CHECK_NOTHROW(tiny_gemm_8x8(nullptr, nullptr, nullptr, 4, 0, 128));
}

TEST_CASE("Bad arguments are rejected with a message saying what was expected", "[errors]") {
  const float* f = not_null<float>();
  float* out = not_null<float>();
  CHECK_THROWS_WITH(vector_add(nullptr, f, out, 10), Contains("device pointers to n floats"));
  CHECK_THROWS_AS(vector_add_truncated_grid(f, nullptr, out, 10), std::invalid_argument);
  CHECK_THROWS_WITH(vector_add_one_per_thread(f, f, out, 10, 0), Contains("[1, 1024], got 0"));
  CHECK_THROWS_WITH(vector_add_one_per_thread(f, f, out, 10, 1025), Contains("got 1025"));
  CHECK_THROWS_WITH(vector_add_one_per_thread(f, f, out, std::size_t{1} << 62, 1),
                    Contains("grid-stride"));

  CHECK_THROWS_WITH(map_threads(dim3(1), dim3(1), Extent3{0, 1, 1}),
                    Contains("extent must be >= 1"));
  CHECK_THROWS_WITH(map_threads(dim3(1), dim3(1), Extent3{2048, 1024, 1}), Contains("2^20"));
  CHECK_THROWS_AS(map_threads(dim3(0), dim3(32), Extent3{4, 1, 1}), std::invalid_argument);

  auto* u32 = not_null<std::uint32_t>();
  CHECK_THROWS_WITH(run_divergence(u32, 64, 0, 10, PathLayout::warp_uniform), Contains("[1, 32]"));
  CHECK_THROWS_WITH(run_divergence(u32, 64, 33, 10, PathLayout::warp_uniform), Contains("got 33"));
  CHECK_THROWS_WITH(run_divergence(u32, 64, 2, -1, PathLayout::warp_uniform),
                    Contains("iterations must be >= 0"));
  CHECK_THROWS_WITH(run_divergence(nullptr, 64, 2, 1, PathLayout::warp_uniform),
                    Contains("device pointer"));

  CHECK_THROWS_WITH(warp_intrinsics_demo(std::vector<int>(31), 0), Contains("exactly 32"));
  CHECK_THROWS_AS(warp_sums(f, nullptr, 5), std::invalid_argument);

  CHECK_THROWS_WITH(tiny_gemm_8x8(f, f, out, 0, 1, 64), Contains("k must be >= 1"));
  CHECK_THROWS_WITH(tiny_gemm_8x8(f, f, out, 1, -1, 64), Contains("count must be >= 0"));
  CHECK_THROWS_WITH(tiny_gemm_8x8(f, f, out, 1, 1, 0), Contains("[1, 1024]"));
}

TEST_CASE("bgr8_to_rgb_planar rejects bad images before launching", "[image][errors]") {
  const auto* src = not_null<std::uint8_t>();
  float* dst = not_null<float>();
  CHECK_THROWS_WITH(bgr8_to_rgb_planar(nullptr, 4, 4, 12, dst), Contains("device pointers"));
  CHECK_THROWS_WITH(bgr8_to_rgb_planar(src, 4, 4, 12, nullptr), Contains("device pointers"));
  CHECK_THROWS_WITH(bgr8_to_rgb_planar(src, 0, 4, 12, dst),
                    Contains("width and height must be >= 1"));
  CHECK_THROWS_WITH(bgr8_to_rgb_planar(src, 4, -3, 12, dst), Contains("got 4 x -3"));
  CHECK_THROWS_WITH(bgr8_to_rgb_planar(src, 4, 65535 * 8 + 1, 12, dst),
                    Contains("height must be <="));
  CHECK_THROWS_WITH(bgr8_to_rgb_planar(src, 4, 4, 11, dst),
                    Contains(">= 3 * width = 12 bytes, got 11"));
  Normalization zero_std = Normalization::imagenet();
  zero_std.std[1] = 0.0f;
  CHECK_THROWS_WITH(bgr8_to_rgb_planar(src, 4, 4, 12, dst, zero_std), Contains("channel 1"));
  Normalization nan_mean = Normalization::unit();
  nan_mean.mean[2] = NAN;
  CHECK_THROWS_AS(bgr8_to_rgb_planar(src, 4, 4, 12, dst, nan_mean), std::invalid_argument);
}

TEST_CASE("bgr8_to_rgb_planar rejects a std that is negative, tiny or not finite",
          "[image][errors]") {
  const auto* src = not_null<std::uint8_t>();
  float* dst = not_null<float>();
  for (const float bad : {-1.0f, 1e-45f, 1e-7f, INFINITY, NAN}) {
    Normalization norm = Normalization::imagenet();
    norm.std[2] = bad;
    CHECK_THROWS_AS(bgr8_to_rgb_planar(src, 4, 4, 12, dst, norm), std::invalid_argument);
  }
  Normalization inf_mean = Normalization::unit();
  inf_mean.mean[0] = INFINITY;
  CHECK_THROWS_AS(bgr8_to_rgb_planar(src, 4, 4, 12, dst, inf_mean), std::invalid_argument);
}

TEST_CASE("The pitch message states 3 * width without int overflow", "[image][errors]") {
  // 3 * 1'000'000'000 = 3'000'000'000 does not fit in an int (max 2'147'483'647).
  CHECK_THROWS_WITH(
      bgr8_to_rgb_planar(not_null<std::uint8_t>(), 1000000000, 1, 12, not_null<float>()),
      Contains("3 * width = 3000000000 bytes"));
}

TEST_CASE("max_active_blocks_per_sm rejects a block size < 1 before any CUDA call",
          "[occupancy][errors]") {
  CHECK_THROWS_AS(max_active_blocks_per_sm(LessonKernel::vector_add, 0), std::invalid_argument);
  CHECK_THROWS_AS(max_active_blocks_per_sm(LessonKernel::vector_add, -32), std::invalid_argument);
}

TEST_CASE("Exercise 1: rgb_planar_to_bgr8 rejects bad images before launching", "[ex1][errors]") {
  const float* src = not_null<float>();
  auto* dst = not_null<std::uint8_t>();
  CHECK_THROWS_AS(rgb_planar_to_bgr8(nullptr, 4, 4, dst, 12), std::invalid_argument);
  CHECK_THROWS_AS(rgb_planar_to_bgr8(src, 4, 4, nullptr, 12), std::invalid_argument);
  CHECK_THROWS_AS(rgb_planar_to_bgr8(src, 0, 4, dst, 12), std::invalid_argument);
  CHECK_THROWS_AS(rgb_planar_to_bgr8(src, 4, 0, dst, 12), std::invalid_argument);
  CHECK_THROWS_AS(rgb_planar_to_bgr8(src, 4, 65535 * 8 + 1, dst, 12), std::invalid_argument);
  CHECK_THROWS_AS(rgb_planar_to_bgr8(src, 4, 4, dst, 11), std::invalid_argument);
}

TEST_CASE("Exercise 2: warp_max_allreduce checks its pointers, and n == 0 is a no-op",
          "[ex2][errors]") {
  CHECK_NOTHROW(warp_max_allreduce(nullptr, nullptr, 0));
  CHECK_THROWS_AS(warp_max_allreduce(nullptr, not_null<float>(), 5), std::invalid_argument);
  CHECK_THROWS_AS(warp_max_allreduce(not_null<float>(), nullptr, 5), std::invalid_argument);
}

// ---- Exercise 3 on the CPU: synthetic GPUs, checked against cuda_occupancy.h ------------------

namespace {

struct SyntheticGpu {
  const char* name;
  int major, minor, threads_per_sm, blocks_per_sm, smem_per_sm, smem_optin, reserved;
};

// Published limits (CUDA Programming Guide, "Compute Capabilities", and deviceQuery output).
const SyntheticGpu kGpus[] = {
    {"T4 (sm_75)", 7, 5, 1024, 16, 65536, 65536, 0},
    {"A100 (sm_80)", 8, 0, 2048, 32, 167936, 166912, 1024},
    {"A10 (sm_86)", 8, 6, 1536, 16, 102400, 101376, 1024},
    {"L4 (sm_89)", 8, 9, 1536, 24, 102400, 101376, 1024},
    {"H200 (sm_90)", 9, 0, 2048, 32, 233472, 232448, 1024},
};

SmLimits limits_of(const SyntheticGpu& g) {
  SmLimits s;
  s.cc_major = g.major;
  s.cc_minor = g.minor;
  s.warp_size = 32;
  s.max_threads_per_block = 1024;
  s.max_threads_per_sm = g.threads_per_sm;
  s.max_blocks_per_sm = g.blocks_per_sm;
  s.regs_per_sm = 65536;
  s.regs_per_block = 65536;
  s.smem_per_sm = g.smem_per_sm;
  s.smem_per_block_optin = g.smem_optin;
  s.reserved_smem_per_block = g.reserved;
  s.reg_alloc_unit = 256;
  s.smem_alloc_unit = g.major >= 8 ? 128 : 256;
  s.sub_partitions = 4;
  return s;
}

// NVIDIA's calculator, fed the same inputs.
int occ_reference(const SyntheticGpu& g, const KernelResources& k, int block, std::size_t dyn) {
  cudaOccDeviceProp p;
  p.computeMajor = g.major;
  p.computeMinor = g.minor;
  p.maxThreadsPerBlock = 1024;
  p.maxThreadsPerMultiprocessor = g.threads_per_sm;
  p.regsPerBlock = 65536;
  p.regsPerMultiprocessor = 65536;
  p.warpSize = 32;
  p.sharedMemPerBlock = 49152;
  p.sharedMemPerMultiprocessor = static_cast<std::size_t>(g.smem_per_sm);
  p.numSms = 1;
  p.sharedMemPerBlockOptin = static_cast<std::size_t>(g.smem_optin);
  p.reservedSharedMemPerBlock = static_cast<std::size_t>(g.reserved);
  cudaOccFuncAttributes f;  // as converted from cudaFuncAttributes
  f.maxThreadsPerBlock = k.max_threads_per_block;
  f.numRegs = k.regs_per_thread;
  f.sharedSizeBytes = static_cast<std::size_t>(k.static_smem_bytes);
  f.partitionedGCConfig = PARTITIONED_GC_OFF;
  f.shmemLimitConfig = FUNC_SHMEM_LIMIT_OPTIN;
  f.maxDynamicSharedSizeBytes = static_cast<std::size_t>(k.max_dynamic_smem_bytes);
  cudaOccDeviceState state;
  cudaOccResult result{};
  const cudaOccError err =
      cudaOccMaxActiveBlocksPerMultiprocessor(&result, &p, &f, &state, block, dyn);
  REQUIRE(err == CUDA_OCC_SUCCESS);
  return result.activeBlocksPerMultiprocessor;
}

KernelResources resources(int regs, int static_smem, int max_dynamic, int max_threads = 1024) {
  KernelResources k;
  k.regs_per_thread = regs;
  k.static_smem_bytes = static_smem;
  k.max_dynamic_smem_bytes = max_dynamic;
  k.max_threads_per_block = max_threads;
  return k;
}

}  // namespace

TEST_CASE("Exercise 3: occupancy by hand, worked examples on an H200", "[ex3][occupancy]") {
  const SmLimits h200 = limits_of(kGpus[4]);

  SECTION("a light kernel at 256 threads: 8 blocks fill the 64 warp slots") {
    const auto e = occupancy_by_hand(h200, resources(16, 0, 49152), 256);
    CHECK(e.by_warps == 8);  // 64 warps / 8 warps per block
    CHECK(e.by_blocks == 32);
    CHECK(e.by_registers == 16);       // 16 regs -> 512 per warp -> 32 warps per sub-partition
    CHECK(e.by_shared_memory == 228);  // only the 1 KiB reserve: 233472 / 1024
    CHECK(e.blocks_per_sm == 8);
    CHECK(e.active_warps == 64);
    CHECK(e.occupancy == course::testing::Approx(1.0));
    CHECK(std::string(e.limiter) == "warps");
  }
  SECTION("32-thread blocks: the 32-block limit leaves half the warp slots empty") {
    const auto e = occupancy_by_hand(h200, resources(16, 0, 49152), 32);
    CHECK(e.blocks_per_sm == 32);
    CHECK(e.active_warps == 32);
    CHECK(e.occupancy == course::testing::Approx(0.5));
    CHECK(std::string(e.limiter) == "blocks");
  }
  SECTION("64 registers per thread: registers allow 32 warps, 4 blocks of 256") {
    const auto e = occupancy_by_hand(h200, resources(64, 0, 49152), 256);
    CHECK(e.by_registers == 4);  // 2048 regs per warp, 16384 per sub-partition -> 8 warps each
    CHECK(e.blocks_per_sm == 4);
    CHECK(e.occupancy == course::testing::Approx(0.5));
    CHECK(std::string(e.limiter) == "registers");
  }
  SECTION("90 registers per thread: no 1024-thread block fits at all") {
    // 90 * 32 = 2880, rounded to 3072 per warp; 32 warps need 98304 > 65536 registers.
    CHECK(occupancy_by_hand(h200, resources(90, 0, 49152), 1024).blocks_per_sm == 0);
    CHECK(occupancy_by_hand(h200, resources(90, 0, 49152), 640).blocks_per_sm == 1);
    const auto e = occupancy_by_hand(h200, resources(90, 0, 49152), 128);
    CHECK(e.by_registers == 5);  // 16384 / 3072 = 5 warps per sub-partition, 20 per SM
    CHECK(e.active_warps == 20);
  }
  SECTION("48 KiB of dynamic shared memory: 4 blocks") {
    const auto e = occupancy_by_hand(h200, resources(16, 0, 49152), 256, 49152);
    CHECK(e.by_shared_memory == 4);  // 233472 / (49152 + 1024)
    CHECK(e.blocks_per_sm == 4);
    CHECK(std::string(e.limiter) == "shared memory");
  }
  SECTION("more dynamic shared memory than the kernel's limit cannot launch") {
    CHECK(occupancy_by_hand(h200, resources(16, 0, 49152), 256, 49153).blocks_per_sm == 0);
    // ...unless the kernel opted in (cudaFuncAttributeMaxDynamicSharedMemorySize).
    CHECK(occupancy_by_hand(h200, resources(16, 0, 232448), 256, 100000).blocks_per_sm == 2);
  }
  SECTION("a block larger than the device or the kernel allows") {
    CHECK(occupancy_by_hand(h200, resources(16, 0, 49152), 1025).blocks_per_sm == 0);
    CHECK(occupancy_by_hand(h200, resources(16, 0, 49152, 512), 640).blocks_per_sm == 0);
  }
  SECTION("block_size < 1 is a bad argument") {
    CHECK_THROWS_AS(occupancy_by_hand(h200, resources(16, 0, 49152), 0), std::invalid_argument);
  }
  SECTION("SmLimits with a zero unit are bad arguments, not a division by zero") {
    for (int field = 0; field < 4; ++field) {
      SmLimits bad = h200;
      int* const units[] = {&bad.warp_size, &bad.sub_partitions, &bad.reg_alloc_unit,
                            &bad.smem_alloc_unit};
      *units[field] = 0;
      CAPTURE(field);
      CHECK_THROWS_AS(occupancy_by_hand(bad, resources(16, 0, 49152), 256), std::invalid_argument);
    }
  }
}

namespace {
// Dynamic shared memory sizes at which rounding up to the allocation unit costs a block: for k
// blocks, the largest per-block size that still fits k is smem_per_sm / k; when that is not a
// multiple of the unit, it rounds up past smem_per_sm / k and only k - 1 (or fewer) fit. A
// solution that divides smem_per_sm by the unrounded size (static + dynamic + reserved) answers
// k there. Each case: {k, dynamic bytes}, with the reserve and the static bytes taken off.
std::vector<std::pair<int, std::size_t>> smem_rounding_cases(const SmLimits& sm, int static_smem,
                                                             int max_dynamic) {
  std::vector<std::pair<int, std::size_t>> cases;
  for (int k = 2; k <= sm.max_blocks_per_sm; ++k) {
    const int per_block = sm.smem_per_sm / k;  // static + dynamic + reserved
    if (per_block % sm.smem_alloc_unit == 0) continue;
    const int dynamic = per_block - sm.reserved_smem_per_block - static_smem;
    if (dynamic < 0 || dynamic > max_dynamic) continue;
    cases.emplace_back(k, static_cast<std::size_t>(dynamic));
  }
  return cases;
}
}  // namespace

TEST_CASE("Exercise 3: shared memory per block is rounded up to the allocation unit",
          "[ex3][occupancy]") {
  SECTION("an H200 worked example: 22276 B dynamic + 1 KiB reserved -> 23424 B, 9 blocks") {
    const SmLimits h200 = limits_of(kGpus[4]);
    // 22276 + 1024 = 23300 B, rounded up to 128 B: 23424. 233472 / 23424 = 9.97 -> 9 blocks;
    // without the rounding 233472 / 23300 = 10.02 -> 10, and without the reserve 22400 -> 10.
    const KernelResources k = resources(16, 0, 49152);
    const auto e = occupancy_by_hand(h200, k, 64, 22276);
    CHECK(e.by_shared_memory == 9);
    CHECK(e.blocks_per_sm == 9);
    CHECK(std::string(e.limiter) == "shared memory");
    CHECK(e.blocks_per_sm == occ_reference(kGpus[4], k, 64, 22276));
    // 128 B less dynamic shared memory (23172 -> 23296 B) and 10 blocks fit again.
    CHECK(occupancy_by_hand(h200, k, 64, 22276 - 128).blocks_per_sm == 10);
  }
  SECTION("static + dynamic + reserved round up together, on Turing (256 B) to Hopper (128 B)") {
    int cases = 0;
    for (const auto& gpu : kGpus) {
      const SmLimits sm = limits_of(gpu);
      for (int static_smem : {0, 100}) {
        // Opted in to the device's maximum, so the sizes of the few-block cases are allowed too.
        const KernelResources k = resources(16, static_smem, gpu.smem_optin - static_smem);
        for (const auto& [blocks, dynamic] :
             smem_rounding_cases(sm, static_smem, gpu.smem_optin - static_smem)) {
          INFO(gpu.name << ": " << static_smem << " B static + " << dynamic
                        << " B dynamic + reserve: " << blocks << " blocks before rounding");
          const int unit = sm.smem_alloc_unit;
          const int rounded =
              (static_smem + static_cast<int>(dynamic) + sm.reserved_smem_per_block + unit - 1) /
              unit * unit;
          const auto e = occupancy_by_hand(sm, k, 32, dynamic);
          CHECK(e.by_shared_memory == sm.smem_per_sm / rounded);
          CHECK(e.by_shared_memory < blocks);  // the rounding costs at least one block
          CHECK(e.blocks_per_sm == occ_reference(gpu, k, 32, dynamic));
          ++cases;
        }
      }
    }
    CHECK(cases >= 50);  // not vacuous
  }
}

TEST_CASE("validate_sm_limits rejects the units the occupancy arithmetic divides by",
          "[occupancy]") {
  const SmLimits h200 = limits_of(kGpus[4]);
  CHECK_NOTHROW(validate_sm_limits(h200));
  SmLimits bad = h200;
  bad.warp_size = 0;
  CHECK_THROWS_WITH(validate_sm_limits(bad), Contains("warp_size must be >= 1"));
  bad = h200;
  bad.sub_partitions = -4;
  CHECK_THROWS_AS(validate_sm_limits(bad), std::invalid_argument);
  bad = h200;
  bad.reg_alloc_unit = 0;
  CHECK_THROWS_AS(validate_sm_limits(bad), std::invalid_argument);
  bad = h200;
  bad.smem_alloc_unit = 0;
  CHECK_THROWS_WITH(validate_sm_limits(bad), Contains("smem_alloc_unit"));
}

TEST_CASE("Exercise 3: occupancy by hand agrees with cuda_occupancy.h on Turing to Hopper",
          "[ex3][occupancy]") {
  const int blocks[] = {1, 32, 48, 64, 96, 128, 160, 192, 256, 320, 384, 512, 640, 768, 1024};
  const int regs[] = {0, 8, 16, 24, 32, 40, 48, 64, 72, 96, 128, 168, 255};
  const std::size_t dyns[] = {0, 1, 1000, 4096, 20000, 40000, 49152};
  for (const auto& gpu : kGpus) {
    const SmLimits sm = limits_of(gpu);
    for (int static_smem : {0, 4096}) {
      const KernelResources base = resources(0, static_smem, 49152 - static_smem);
      for (int r : regs) {
        KernelResources k = base;
        k.regs_per_thread = r;
        for (int b : blocks) {
          for (std::size_t d : dyns) {
            INFO(gpu.name << ": " << r << " regs, " << static_smem << " B static, block " << b
                          << ", " << d << " B dynamic");
            const auto e = occupancy_by_hand(sm, k, b, d);
            REQUIRE(e.blocks_per_sm == occ_reference(gpu, k, b, d));
            REQUIRE(e.blocks_per_sm ==
                    std::min({e.by_warps, e.by_blocks, e.by_registers, e.by_shared_memory}));
            REQUIRE(e.active_warps == e.blocks_per_sm * ((b + 31) / 32));
          }
        }
      }
    }
    // Opted in to the device's maximum dynamic shared memory.
    const KernelResources opted = resources(32, 0, gpu.smem_optin);
    for (int b : {64, 256, 1024}) {
      for (std::size_t d :
           {std::size_t{60000}, std::size_t{100000}, static_cast<std::size_t>(gpu.smem_optin)}) {
        INFO(gpu.name << ": opted in, block " << b << ", " << d << " B dynamic");
        REQUIRE(occupancy_by_hand(sm, opted, b, d).blocks_per_sm ==
                occ_reference(gpu, opted, b, d));
      }
    }
  }
}

// =============================================================================================
// GPU tests
// =============================================================================================

// ---- 1. index mapping --------------------------------------------------------------------------

namespace {
// The oracle: which thread SHOULD own element (x, y, z), by division instead of the kernel's
// multiplication.
ThreadRecord expected_owner(dim3 grid, dim3 block, int x, int y, int z) {
  const int bx = x / static_cast<int>(block.x), by = y / static_cast<int>(block.y),
            bz = z / static_cast<int>(block.z);
  if (bx >= static_cast<int>(grid.x) || by >= static_cast<int>(grid.y) ||
      bz >= static_cast<int>(grid.z)) {
    return ThreadRecord{{-1, -1, -1}, {-1, -1, -1}, -1, -1};
  }
  const int tx = x % static_cast<int>(block.x), ty = y % static_cast<int>(block.y),
            tz = z % static_cast<int>(block.z);
  const int linear = tx + ty * static_cast<int>(block.x) + tz * static_cast<int>(block.x * block.y);
  return ThreadRecord{{bx, by, bz}, {tx, ty, tz}, linear / 32, linear % 32};
}

void check_layout(dim3 grid, dim3 block, Extent3 e) {
  const auto records = map_threads(grid, block, e);
  REQUIRE(records.size() == e.count());
  for (int z = 0; z < e.z; ++z) {
    for (int y = 0; y < e.y; ++y) {
      for (int x = 0; x < e.x; ++x) {
        const ThreadRecord& got = records[(static_cast<std::size_t>(z) * e.y + y) * e.x + x];
        const ThreadRecord want = expected_owner(grid, block, x, y, z);
        INFO("element (" << x << ", " << y << ", " << z << ")");
        for (int d = 0; d < 3; ++d) {
          CHECK(got.block[d] == want.block[d]);
          CHECK(got.thread[d] == want.thread[d]);
        }
        CHECK(got.warp == want.warp);
        CHECK(got.lane == want.lane);
      }
    }
  }
}
}  // namespace

TEST_CASE("map_threads: each element is owned by the thread its index says", "[gpu][index]") {
  SECTION("1D, the grid rounded up: 10 elements, 3 blocks of 4") {
    check_layout(dim3(3), dim3(4), Extent3{10, 1, 1});
  }
  SECTION("1D, too small a grid leaves elements unowned") {
    const auto r = map_threads(dim3(2), dim3(4), Extent3{10, 1, 1});
    CHECK(r[7].block[0] == 1);
    CHECK(r[8].block[0] == -1);
    CHECK(r[9].block[0] == -1);
    check_layout(dim3(2), dim3(4), Extent3{10, 1, 1});
  }
  SECTION("2D, odd sizes: a 6 x 5 image in 4 x 2 blocks") {
    check_layout(dim3(2, 3), dim3(4, 2), Extent3{6, 5, 1});
  }
  SECTION("2D warps: a 16 x 4 block is two warps of two rows each") {
    check_layout(dim3(1), dim3(16, 4), Extent3{16, 4, 1});
    const auto r = map_threads(dim3(1), dim3(16, 4), Extent3{16, 4, 1});
    CHECK(r[1 * 16 + 15].warp == 0);  // (15, 1)
    CHECK(r[1 * 16 + 15].lane == 31);
    CHECK(r[2 * 16 + 0].warp == 1);  // (0, 2)
    CHECK(r[2 * 16 + 0].lane == 0);
  }
  SECTION("3D, 5 x 3 x 3 in 2 x 2 x 2 blocks") {
    check_layout(dim3(3, 2, 2), dim3(2, 2, 2), Extent3{5, 3, 3});
  }
  SECTION("a large 1D block spans several warps") {
    check_layout(dim3(2), dim3(200), Extent3{333, 1, 1});
  }
}

// ---- 2. the tail ------------------------------------------------------------------------------

namespace {
// Runs `add` on n elements with 64 guard elements behind c, checks c == a + b exactly (one float
// addition, correctly rounded on both sides) and that the guard is untouched.
template <class Add>
void check_vector_add(std::size_t n, Add&& add) {
  constexpr std::size_t guard = 64;
  const auto a = random_floats(n, -100.f, 100.f, 1);
  const auto b = random_floats(n, -100.f, 100.f, 2);
  std::vector<float> c(n + guard, kSentinel);
  auto da = course::to_device(a), db = course::to_device(b), dc = course::to_device(c);
  add(da.data(), db.data(), dc.data(), n);
  const auto got = course::to_host(dc);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < n; ++i) wrong += got[i] != a[i] + b[i];
  CHECK(wrong == 0);
  CHECK(std::all_of(got.begin() + static_cast<std::ptrdiff_t>(n), got.end(),
                    [](float v) { return v == kSentinel; }));
}
}  // namespace

TEST_CASE("vector_add is exact for sizes around the warp and block size", "[gpu][tail]") {
  const std::size_t n = GENERATE(as<std::size_t>{}, 0, 1, 31, 32, 33, 1000003);
  INFO("n = " << n);
  SECTION("grid-stride, occupancy API configuration") {
    check_vector_add(
        n, [](const float* a, const float* b, float* c, std::size_t m) { vector_add(a, b, c, m); });
  }
  SECTION("one thread per element") {
    for (int block : {32, 100, 256, 1024}) {
      INFO("block " << block);
      check_vector_add(n, [block](const float* a, const float* b, float* c, std::size_t m) {
        vector_add_one_per_thread(a, b, c, m, block);
      });
    }
  }
  CUDA_CHECK(cudaDeviceSynchronize());
}

TEST_CASE("vector_add on a stream with a grid smaller than n (every thread loops)", "[gpu][tail]") {
  // 40M elements: more than the threads one wave of the occupancy grid holds on any GPU
  // (132 SMs x 2048 threads = 270336 on an H200), so the grid-stride loop must iterate.
  const std::size_t n = 40'000'000;
  const LaunchConfig cfg = vector_add_launch_config(n);
  REQUIRE(static_cast<std::size_t>(cfg.grid.x) * cfg.block.x < n);
  course::Stream stream;
  std::vector<float> a(n), b(n);
  for (std::size_t i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i % 1000);
    b[i] = static_cast<float>(i / 1000);
  }
  auto da = course::to_device(a), db = course::to_device(b);
  course::DeviceBuffer<float> dc(n);
  vector_add(da.data(), db.data(), dc.data(), n, stream);
  stream.synchronize();
  const auto c = course::to_host(dc);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < n; ++i) wrong += c[i] != a[i] + b[i];
  CHECK(wrong == 0);
}

TEST_CASE("vector_add_launch_config: block from the occupancy API, grid = one full wave",
          "[gpu][tail][occupancy]") {
  const LaunchConfig zero = vector_add_launch_config(0);
  CHECK(zero.grid.x == 0);
  const LaunchConfig one = vector_add_launch_config(1);
  CHECK(one.grid.x == 1);
  const LaunchConfig big = vector_add_launch_config(std::size_t{1} << 30);
  const int block = static_cast<int>(big.block.x);
  CHECK(block % 32 == 0);
  CHECK(block <= 1024);
  // A full wave, counted with the other occupancy call.
  const int sms = course::query_device(0).sm_count;
  CHECK(static_cast<int>(big.grid.x) ==
        sms * max_active_blocks_per_sm(LessonKernel::vector_add_grid_stride, block));
  CHECK(big.block.y == 1);
  CHECK(big.dynamic_smem_bytes == 0);
}

TEST_CASE("The n / 256 bug: the last n % 256 elements are never computed", "[gpu][tail]") {
  const std::size_t n = 1000;
  const auto a = random_floats(n, -1.f, 1.f, 3), b = random_floats(n, -1.f, 1.f, 4);
  auto da = course::to_device(a), db = course::to_device(b);
  auto dc = course::to_device(std::vector<float>(n, kSentinel));
  vector_add_truncated_grid(da.data(), db.data(), dc.data(), n);
  const auto c = course::to_host(dc);
  for (std::size_t i = 0; i < n; ++i) {
    if (i < 768) {
      REQUIRE(c[i] == a[i] + b[i]);
    } else {
      REQUIRE(c[i] == kSentinel);  // 3 blocks x 256 = 768 threads: 232 elements dropped
    }
  }
}

TEST_CASE("The n / 256 bug with n < 256: a grid of 0 blocks is an invalid configuration",
          "[gpu][tail][provokes-error]") {
  course::DeviceBuffer<float> a(100), b(100), c(100);
  cudaError_t code = cudaSuccess;
  try {
    vector_add_truncated_grid(a.data(), b.data(), c.data(), 100);
  } catch (const course::CudaError& e) {
    code = e.code();
  }
  CHECK(is_invalid_launch_error(code));
  CHECK(cudaGetLastError() == cudaSuccess);  // CUDA_CHECK_LAUNCH read (and so cleared) it
  CHECK_NOTHROW(vector_add(a.data(), b.data(), c.data(), 100));
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
}

// ---- 3. limits and errors ---------------------------------------------------------------------

TEST_CASE("launch_limits reports the limits of every sm_75+ GPU", "[gpu][limits]") {
  const LaunchLimits l = launch_limits();
  CHECK(l.max_threads_per_block == 1024);
  CHECK(l.max_block[0] == 1024);
  CHECK(l.max_block[1] == 1024);
  CHECK(l.max_block[2] == 64);
  CHECK(l.max_grid[0] == 2147483647);
  CHECK(l.max_grid[1] == 65535);
  CHECK(l.max_grid[2] == 65535);
  CHECK(l.smem_per_block == 49152);
  CHECK(l.smem_per_block_optin >= 65536);
  CHECK(l.regs_per_block == 65536);
}

TEST_CASE(
    "Launches past the limits fail at once (cudaErrorInvalidConfiguration, or "
    "cudaErrorInvalidValue "
    "on CUDA 13), and are not sticky",
    "[gpu][limits][provokes-error]") {
  const LaunchLimits l = launch_limits();
  const auto bx = static_cast<unsigned>(l.max_block[0]), bz = static_cast<unsigned>(l.max_block[2]);
  const auto gy = static_cast<unsigned>(l.max_grid[1]);
  const auto threads = static_cast<unsigned>(l.max_threads_per_block);
  REQUIRE(cudaGetLastError() == cudaSuccess);

  SECTION("at the limits: accepted") {
    CHECK(launch_error(ProbeKernel::empty, dim3(1), dim3(threads)) == cudaSuccess);
    CHECK(launch_error(ProbeKernel::empty, dim3(1), dim3(1, 1, bz)) == cudaSuccess);
    CHECK(launch_error(ProbeKernel::empty, dim3(1), dim3(32, 32, 1)) == cudaSuccess);
    CHECK(launch_error(ProbeKernel::empty, dim3(1, gy), dim3(1)) == cudaSuccess);
  }
  SECTION("past them: rejected") {
    CHECK(is_invalid_launch_error(launch_error(ProbeKernel::empty, dim3(1), dim3(threads + 1))));
    CHECK(is_invalid_launch_error(launch_error(ProbeKernel::empty, dim3(1), dim3(bx + 1))));
    CHECK(is_invalid_launch_error(launch_error(ProbeKernel::empty, dim3(1), dim3(32, 32, 2))));
    CHECK(is_invalid_launch_error(launch_error(ProbeKernel::empty, dim3(1), dim3(1, 1, bz + 1))));
    CHECK(is_invalid_launch_error(launch_error(ProbeKernel::empty, dim3(1, gy + 1), dim3(1))));
    CHECK(is_invalid_launch_error(launch_error(ProbeKernel::empty, dim3(1, 1, gy + 1), dim3(1))));
    CHECK(is_invalid_launch_error(launch_error(ProbeKernel::empty, dim3(2147483648u), dim3(1))));
    CHECK(is_invalid_launch_error(launch_error(ProbeKernel::empty, dim3(0), dim3(32))));
    CHECK(is_invalid_launch_error(launch_error(ProbeKernel::empty, dim3(1, 0), dim3(32))));
    CHECK(is_invalid_launch_error(launch_error(ProbeKernel::empty, dim3(1), dim3(0))));
  }
  // Not sticky: nothing is left to report, and real work still runs.
  CHECK(cudaGetLastError() == cudaSuccess);
  const std::vector<float> a{1.f, 2.f, 3.f}, b{10.f, 20.f, 30.f};
  auto da = course::to_device(a), db = course::to_device(b);
  course::DeviceBuffer<float> dc(3);
  vector_add(da.data(), db.data(), dc.data(), 3);
  CHECK(course::to_host(dc) == std::vector<float>{11.f, 22.f, 33.f});
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
}

TEST_CASE("Dynamic shared memory: 48 KiB by default, more only after opting in",
          "[gpu][limits][provokes-error]") {
  const LaunchLimits l = launch_limits();
  const auto dflt = static_cast<std::size_t>(l.smem_per_block);
  const auto optin = static_cast<std::size_t>(l.smem_per_block_optin);
  REQUIRE(optin > dflt);
  CHECK(launch_error(ProbeKernel::empty, dim3(1), dim3(32), dflt) == cudaSuccess);
  CHECK(launch_error(ProbeKernel::empty, dim3(1), dim3(32), dflt + 1) == cudaErrorInvalidValue);
  // Opting in is per kernel: raise empty_opted_in's limit to the device's maximum.
  CHECK(opt_in_dynamic_smem(static_cast<int>(optin) + 1) == cudaErrorInvalidValue);
  CHECK(opt_in_dynamic_smem(static_cast<int>(optin)) == cudaSuccess);
  CHECK(launch_error(ProbeKernel::empty_opted_in, dim3(1), dim3(32), optin) == cudaSuccess);
  CHECK(launch_error(ProbeKernel::empty_opted_in, dim3(1), dim3(32), optin + 1) ==
        cudaErrorInvalidValue);
  CHECK(launch_error(ProbeKernel::empty, dim3(1), dim3(32), dflt + 1) == cudaErrorInvalidValue);
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
}

TEST_CASE("A kernel with > 64 registers per thread cannot run 1024-thread blocks",
          "[gpu][limits][provokes-error]") {
  const KernelResources k = kernel_resources(LessonKernel::tiny_gemm);
  INFO("tiny_gemm_8x8: " << k.regs_per_thread << " registers/thread, max "
                         << k.max_threads_per_block << " threads/block");
  REQUIRE(k.regs_per_thread > 64);
  REQUIRE(k.max_threads_per_block < 1024);
  CHECK(launch_error(ProbeKernel::tiny_gemm, dim3(1), dim3(1024)) == cudaErrorLaunchOutOfResources);
  CHECK(launch_error(ProbeKernel::tiny_gemm, dim3(1), dim3(k.max_threads_per_block)) ==
        cudaSuccess);
  cudaError_t code = cudaSuccess;
  try {
    course::DeviceBuffer<float> buf(64);
    tiny_gemm_8x8(buf.data(), buf.data(), buf.data(), 1, 1, 1024);
  } catch (const course::CudaError& e) {
    code = e.code();
  }
  CHECK(code == cudaErrorLaunchOutOfResources);
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
}

TEST_CASE("tiny_gemm_8x8 matches a double-precision CPU product", "[gpu][limits]") {
  const int k = 13, count = 37;  // count is not a multiple of any block size used
  const auto a = random_floats(static_cast<std::size_t>(count) * k * kTile, -1.f, 1.f, 5);
  const auto b = random_floats(static_cast<std::size_t>(count) * k * kTile, -1.f, 1.f, 6);
  auto da = course::to_device(a), db = course::to_device(b);
  const int max_block = kernel_resources(LessonKernel::tiny_gemm).max_threads_per_block;
  for (int block : {32, 64, max_block}) {
    INFO("block " << block);
    course::DeviceBuffer<float> dc(static_cast<std::size_t>(count) * kTile * kTile);
    tiny_gemm_8x8(da.data(), db.data(), dc.data(), k, count, block);
    const auto c = course::to_host(dc);
    for (int t = 0; t < count; ++t) {
      for (int i = 0; i < kTile; ++i) {
        for (int j = 0; j < kTile; ++j) {
          double ref = 0.0, mag = 0.0;
          for (int p = 0; p < k; ++p) {
            const double x = a[(static_cast<std::size_t>(t) * k + p) * kTile + i];
            const double y = b[(static_cast<std::size_t>(t) * k + p) * kTile + j];
            ref += x * y;
            mag += std::fabs(x * y);
          }
          // k fused multiply-adds in float: |error| <= k * 2^-24 * sum |a b| (first order).
          const double tol = k * std::ldexp(1.0, -24) * mag + 1e-30;
          REQUIRE(std::fabs(c[(static_cast<std::size_t>(t) * kTile + i) * kTile + j] - ref) <= tol);
        }
      }
    }
  }
}

// A sticky error breaks the CUDA context for the rest of the process, so it is only ever made in a
// fresh child process: this probe runs as `lesson03_tests --child-probe illegal_address_is_sticky`.
CHILD_PROBE(illegal_address_is_sticky) {
  launch_illegal_write(/*delay_ms=*/20);
  course::testing::report("after_launch", cudaGetErrorName(cudaGetLastError()));
  course::testing::report("synchronize", cudaGetErrorName(cudaDeviceSynchronize()));
  course::testing::report("get_last_error", cudaGetErrorName(cudaGetLastError()));
  void* p = nullptr;
  course::testing::report("malloc_after", cudaGetErrorName(cudaMalloc(&p, 256)));
  course::testing::report("synchronize_again", cudaGetErrorName(cudaDeviceSynchronize()));
  return 0;
}

TEST_CASE("An illegal address shows up only at the next synchronisation, and is sticky",
          "[gpu][errors][provokes-error]") {
  const auto child = course::testing::run_child_probe("illegal_address_is_sticky");
  INFO(child.output);
  CHECK(child.exit_code == 0);
  CHECK(child.value("after_launch") == "cudaSuccess");  // the launch itself was fine
  CHECK(child.value("synchronize") == "cudaErrorIllegalAddress");
  CHECK(child.value("get_last_error") == "cudaErrorIllegalAddress");
  // Clearing the last error does not repair the context: every later call fails the same way.
  CHECK(child.value("malloc_after") == "cudaErrorIllegalAddress");
  CHECK(child.value("synchronize_again") == "cudaErrorIllegalAddress");
}

// ---- 4. warps ---------------------------------------------------------------------------------

TEST_CASE("run_divergence computes the same values whichever lanes take which path",
          "[gpu][warp]") {
  const std::size_t n = 1000;  // not a multiple of the 256-thread block
  const int iterations = 7;
  course::DeviceBuffer<std::uint32_t> out(n);
  for (int ways : {1, 2, 3, 8, 32}) {
    for (PathLayout layout : {PathLayout::lane_interleaved, PathLayout::warp_uniform}) {
      INFO("ways " << ways
                   << (layout == PathLayout::warp_uniform ? ", warp-uniform" : ", interleaved"));
      run_divergence(out.data(), n, ways, iterations, layout);
      const auto got = course::to_host(out);
      for (std::size_t i = 0; i < n; ++i) {
        // The CPU oracle applies the xorshift steps itself rather than calling path_work.
        const int path = static_cast<int>(layout == PathLayout::lane_interleaved ? (i % 32) % ways
                                                                                 : (i / 32) % ways);
        std::uint32_t x = static_cast<std::uint32_t>(i) * 2654435761u + 1u;
        for (int it = 0; it < iterations; ++it) {
          x ^= x << 13;
          x ^= x >> 17;
          x ^= x << 5;
          x += 0x9E3779B9u * static_cast<std::uint32_t>(path + 1);
        }
        REQUIRE(got[i] == x);
      }
    }
  }
}

TEST_CASE("Vote and shuffle intrinsics do what the CPU model of a warp says", "[gpu][warp]") {
  std::vector<int> values(32);
  for (int lane = 0; lane < 32; ++lane) values[lane] = (lane * 7) % 11 - 3;  // -3 .. 7
  const int threshold = 2;
  const auto r = warp_intrinsics_demo(values, threshold);
  REQUIRE(r.size() == 32);
  unsigned ballot = 0, branch = 0;
  for (int lane = 0; lane < 32; ++lane) {
    if (values[lane] > threshold) ballot |= 1u << lane;
    if (lane % 3 == 0) branch |= 1u << lane;
  }
  for (int lane = 0; lane < 32; ++lane) {
    INFO("lane " << lane);
    CHECK(r[lane].value == values[lane]);
    CHECK(r[lane].ballot == ballot);
    CHECK(r[lane].any == 1);
    CHECK(r[lane].all == 0);
    CHECK(r[lane].broadcast == values[0]);
    CHECK(r[lane].down1 == values[lane < 31 ? lane + 1 : lane]);
    CHECK(r[lane].xor1 == values[lane ^ 1]);
    CHECK(r[lane].took_branch == (lane % 3 == 0 ? 1 : 0));
    CHECK(r[lane].branch_ballot == branch);
    if (lane % 3 == 0) {
      CHECK((r[lane].active_in_branch & (1u << lane)) != 0);  // at least itself
    } else {
      CHECK(r[lane].active_in_branch == 0u);
    }
  }
  const auto all_true = warp_intrinsics_demo(values, -100);
  CHECK(all_true[5].ballot == kFullMask);
  CHECK(all_true[5].all == 1);
  const auto none = warp_intrinsics_demo(values, 100);
  CHECK(none[5].ballot == 0u);
  CHECK(none[5].any == 0);
}

TEST_CASE("warp_sums matches a double-precision sum of each 32-element segment", "[gpu][warp]") {
  const std::size_t n = GENERATE(as<std::size_t>{}, 1, 31, 32, 33, 1000003);
  INFO("n = " << n);
  const auto in = random_floats(n, -1.f, 1.f, 7);
  const std::size_t warps = ceil_div(n, 32);
  constexpr std::size_t guard = 8;
  auto din = course::to_device(in);
  auto dout = course::to_device(std::vector<float>(warps + guard, kSentinel));
  warp_sums(din.data(), dout.data(), n);
  const auto out = course::to_host(dout);
  for (std::size_t w = 0; w < warps; ++w) {
    double ref = 0.0, mag = 0.0;
    for (std::size_t i = w * 32; i < std::min(n, w * 32 + 32); ++i) {
      ref += in[i];
      mag += std::fabs(in[i]);
    }
    // A tree of 31 float additions: |error| <= 31 * 2^-24 * sum |x| (first order), 5 levels deep
    // in fact, so this bound is loose but still far below a dropped or doubled element.
    REQUIRE(std::fabs(out[w] - ref) <= 31 * std::ldexp(1.0, -24) * mag);
  }
  CHECK(std::all_of(out.begin() + static_cast<std::ptrdiff_t>(warps), out.end(),
                    [](float v) { return v == kSentinel; }));
}

TEST_CASE("Exercise 2: warp_max_allreduce gives every lane its segment's maximum",
          "[gpu][warp][ex2]") {
  const std::size_t n = GENERATE(as<std::size_t>{}, 1, 31, 32, 33, 1000003);
  INFO("n = " << n);
  const auto in = random_floats(n, -50.f, 50.f, 8);
  constexpr std::size_t guard = 40;
  auto din = course::to_device(in);
  auto dout = course::to_device(std::vector<float>(n + guard, kSentinel));
  warp_max_allreduce(din.data(), dout.data(), n);
  const auto out = course::to_host(dout);
  for (std::size_t w = 0; w * 32 < n; ++w) {
    const auto first = in.begin() + static_cast<std::ptrdiff_t>(w * 32);
    const auto last = in.begin() + static_cast<std::ptrdiff_t>(std::min(n, w * 32 + 32));
    const float ref = *std::max_element(first, last);
    for (std::size_t i = w * 32; i < std::min(n, w * 32 + 32); ++i) REQUIRE(out[i] == ref);
  }
  CHECK(std::all_of(out.begin() + static_cast<std::ptrdiff_t>(n), out.end(),
                    [](float v) { return v == kSentinel; }));
}

// ---- 5. occupancy -----------------------------------------------------------------------------

namespace {
const LessonKernel kAllKernels[] = {LessonKernel::vector_add, LessonKernel::vector_add_grid_stride,
                                    LessonKernel::divergence, LessonKernel::warp_sum,
                                    LessonKernel::tiny_gemm,  LessonKernel::bgr8_to_rgb_planar};
}  // namespace

TEST_CASE("sm_limits agrees with cudaGetDeviceProperties", "[gpu][occupancy]") {
  const SmLimits s = sm_limits();
  cudaDeviceProp p{};
  CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
  CHECK(s.cc_major == p.major);
  CHECK(s.cc_minor == p.minor);
  CHECK(s.warp_size == p.warpSize);
  CHECK(s.max_threads_per_sm == p.maxThreadsPerMultiProcessor);
  CHECK(s.max_blocks_per_sm == p.maxBlocksPerMultiProcessor);
  CHECK(s.regs_per_sm == p.regsPerMultiprocessor);
  CHECK(s.regs_per_block == p.regsPerBlock);
  CHECK(static_cast<std::size_t>(s.smem_per_sm) == p.sharedMemPerMultiprocessor);
  CHECK(static_cast<std::size_t>(s.smem_per_block_optin) == p.sharedMemPerBlockOptin);
  CHECK(static_cast<std::size_t>(s.reserved_smem_per_block) == p.reservedSharedMemPerBlock);
}

TEST_CASE("suggest_block_size maximises the resident warps the occupancy API counts",
          "[gpu][occupancy]") {
  const int sms = course::query_device(0).sm_count;
  for (LessonKernel kernel : kAllKernels) {
    INFO(kernel_name(kernel));
    const KernelResources k = kernel_resources(kernel);
    const BlockSizeSuggestion s = suggest_block_size(kernel);
    CHECK(s.block_size >= 32);
    CHECK(s.block_size <= k.max_threads_per_block);
    const int best_blocks = max_active_blocks_per_sm(kernel, s.block_size);
    CHECK(s.min_grid_size == sms * best_blocks);
    for (int b = 32; b <= k.max_threads_per_block; b += 32) {
      INFO("block " << b);
      CHECK(max_active_blocks_per_sm(kernel, b) * b <= best_blocks * s.block_size);
    }
  }
}

TEST_CASE("Exercise 3: occupancy by hand agrees with the runtime on this GPU",
          "[gpu][occupancy][ex3]") {
  const SmLimits sm = sm_limits();
  for (LessonKernel kernel : kAllKernels) {
    const KernelResources k = kernel_resources(kernel);
    for (int b : {32, 64, 96, 128, 192, 256, 384, 512, 640, 768, 1024}) {
      if (b > k.max_threads_per_block) continue;  // not a launchable configuration
      for (std::size_t d : {std::size_t{0}, std::size_t{4096}, std::size_t{20000},
                            static_cast<std::size_t>(k.max_dynamic_smem_bytes)}) {
        INFO(kernel_name(kernel) << ": " << k.regs_per_thread << " regs, block " << b << ", " << d
                                 << " B dynamic");
        CHECK(occupancy_by_hand(sm, k, b, d).blocks_per_sm ==
              max_active_blocks_per_sm(kernel, b, d));
      }
    }
  }
}

// ---- Exercise 3 against the runtime, on kernels whose registers and shared memory are chosen ----
//
// The lesson's kernels have no static shared memory and few distinct register counts. The kernels
// here are PTX written by the test and compiled by the driver (cudaLibraryLoadData): entry
// "occ_liveN" keeps N 32-bit values live at once (N volatile loads, then N volatile stores, which
// may not be reordered), so it needs at least N registers; a static __shared__ array of a size
// that is not a multiple of the allocation unit (1000, 4100 B); a .maxntid that lowers the
// kernel's block limit. The oracle is the runtime alone: cudaFuncGetAttributes gives
// occupancy_by_hand its inputs, cudaOccupancyMaxActiveBlocksPerMultiprocessor the answer (both
// take a cudaKernel_t cast to const void*).

namespace {
struct PtxKernel {
  const char* name;
  int live_values;  // 32-bit values live at once: the kernel needs at least this many registers
  int static_smem;  // bytes of static shared memory (0: none)
  int maxntid;      // the .maxntid directive (0: none)
};
const PtxKernel kPtxKernels[] = {
    {"occ_light", 1, 0, 0},
    {"occ_smem_1000", 1, 1000, 0},
    {"occ_live40_smem_4100", 40, 4100, 0},
    {"occ_live72", 72, 0, 0},
    {"occ_live160", 160, 0, 0},
    {"occ_live232", 232, 0, 0},
    {"occ_maxntid_200", 1, 0, 200},
};

std::string ptx_entry(const PtxKernel& k) {
  std::ostringstream s;
  s << ".visible .entry " << k.name << "(.param .u64 p)";
  if (k.maxntid > 0) s << " .maxntid " << k.maxntid << ", 1, 1";
  s << "\n{\n  .reg .b32 %v<" << k.live_values << ">;\n  .reg .b64 %a<2>;\n  .reg .b32 %t<3>;\n";
  if (k.static_smem > 0) s << "  .shared .align 4 .b8 buf[" << k.static_smem << "];\n";
  s << "  ld.param.u64 %a0, [p];\n  cvta.to.global.u64 %a1, %a0;\n";
  for (int i = 0; i < k.live_values; ++i) {
    s << "  ld.volatile.global.u32 %v" << i << ", [%a1+" << 4 * i << "];\n";
  }
  for (int i = 0; i < k.live_values; ++i) {
    s << "  st.volatile.global.u32 [%a1+" << 4 * i << "], %v" << i << ";\n";
  }
  if (k.static_smem > 0) {  // a word of the array per thread, at a run-time index: all of it stays
    s << "  mov.u32 %t0, %tid.x;\n  rem.u32 %t0, %t0, " << k.static_smem / 4 << ";\n"
      << "  shl.b32 %t0, %t0, 2;\n  mov.u32 %t1, buf;\n  add.u32 %t1, %t1, %t0;\n"
      << "  st.volatile.shared.u32 [%t1], %t0;\n  bar.sync 0;\n"
      << "  ld.volatile.shared.u32 %t2, [%t1];\n  st.volatile.global.u32 [%a1], %t2;\n";
  }
  s << "  ret;\n}\n";
  return s.str();
}

// The PTX module, loaded (JIT-compiled for this GPU) for the lifetime of the object.
class PtxLibrary {
 public:
  PtxLibrary() {
    std::string ptx = ".version 7.0\n.target sm_75\n.address_size 64\n\n";
    for (const PtxKernel& k : kPtxKernels) ptx += ptx_entry(k);
    CUDA_CHECK(
        cudaLibraryLoadData(&library_, ptx.c_str(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  }
  ~PtxLibrary() { cudaLibraryUnload(library_); }
  PtxLibrary(const PtxLibrary&) = delete;
  PtxLibrary& operator=(const PtxLibrary&) = delete;
  const void* kernel(const char* name) const {
    cudaKernel_t k = nullptr;
    CUDA_CHECK(cudaLibraryGetKernel(&k, library_, name));
    return reinterpret_cast<const void*>(k);
  }

 private:
  cudaLibrary_t library_ = nullptr;
};

// cudaFuncGetAttributes, straight into occupancy_by_hand's input.
KernelResources attributes_of(const void* func) {
  cudaFuncAttributes a{};
  CUDA_CHECK(cudaFuncGetAttributes(&a, func));
  KernelResources k;
  k.regs_per_thread = a.numRegs;
  k.static_smem_bytes = static_cast<int>(a.sharedSizeBytes);
  k.max_dynamic_smem_bytes = a.maxDynamicSharedSizeBytes;
  k.max_threads_per_block = a.maxThreadsPerBlock;
  k.local_bytes_per_thread = static_cast<int>(a.localSizeBytes);
  return k;
}

// Dynamic shared memory sizes up to max_dynamic, mostly not multiples of the allocation unit:
// fixed odd sizes, the limit itself, and the sizes (and their neighbours) at which rounding the
// block's static + dynamic + reserved bytes up to the unit costs a block (smem_rounding_cases).
std::vector<std::size_t> odd_dynamic_sizes(const SmLimits& sm, int static_smem, int max_dynamic) {
  std::vector<std::size_t> sizes = {0,     1,     127,   129,   1000,   3333,   4097,
                                    22276, 30001, 40000, 60001, 100003, 150001, 200003};
  sizes.push_back(static_cast<std::size_t>(max_dynamic));
  sizes.push_back(static_cast<std::size_t>(max_dynamic) - 1);
  for (const auto& [blocks, dynamic] : smem_rounding_cases(sm, static_smem, max_dynamic)) {
    (void)blocks;
    for (std::size_t d : {dynamic - 1, dynamic, dynamic + 1}) sizes.push_back(d);
  }
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  sizes.erase(
      std::remove_if(sizes.begin(), sizes.end(),
                     [&](std::size_t d) { return d > static_cast<std::size_t>(max_dynamic); }),
      sizes.end());
  return sizes;
}

// Every launchable block size of interest (partial warps included) against every size above:
// occupancy_by_hand vs cudaOccupancyMaxActiveBlocksPerMultiprocessor. Adds to `compared`, to
// `limiters` (what limited, by occupancy_by_hand's account: a coverage count only) and to
// `mismatches` (the first few described in `first`).
void compare_with_runtime(const SmLimits& sm, const char* name, const void* func, int& compared,
                          int& mismatches, std::string& first,
                          std::map<std::string, int>& limiters) {
  const KernelResources k = attributes_of(func);
  // Partial warps too; and the kernel's own limit (below 1024 for the heaviest kernels).
  std::vector<int> blocks = {1,   31,  32,  33,  64,  100, 128, 192,  200,
                             256, 320, 384, 416, 512, 640, 768, 1000, 1024};
  blocks.push_back(k.max_threads_per_block);
  for (int b : blocks) {
    if (b > k.max_threads_per_block) continue;  // not a launchable configuration
    for (std::size_t d : odd_dynamic_sizes(sm, k.static_smem_bytes, k.max_dynamic_smem_bytes)) {
      int runtime = -1;
      CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&runtime, func, b, d));
      const OccupancyEstimate e = occupancy_by_hand(sm, k, b, d);
      ++compared;
      ++limiters[e.limiter];
      if (e.blocks_per_sm != runtime) {
        if (++mismatches <= 10) {
          std::ostringstream s;
          s << name << ": " << k.regs_per_thread << " regs, " << k.static_smem_bytes
            << " B static, dynamic limit " << k.max_dynamic_smem_bytes << " B, block " << b << ", "
            << d << " B dynamic: by hand " << e.blocks_per_sm << " (" << e.limiter << "), runtime "
            << runtime << "\n";
          first += s.str();
        }
      }
    }
  }
}
}  // namespace

TEST_CASE(
    "Exercise 3: occupancy by hand agrees with the runtime on kernels of chosen registers and "
    "shared memory",
    "[gpu][occupancy][ex3]") {
  const SmLimits sm = sm_limits();
  const PtxLibrary library;
  int compared = 0, mismatches = 0;
  std::string first;
  std::map<std::string, int> limiters;
  for (const PtxKernel& pk : kPtxKernels) {
    INFO(pk.name);
    const void* func = library.kernel(pk.name);
    // The inputs are what the kernels were written to need.
    const KernelResources k = attributes_of(func);
    CHECK(k.regs_per_thread >= pk.live_values);
    CHECK(k.static_smem_bytes == pk.static_smem);
    if (pk.maxntid > 0) {
      CHECK(k.max_threads_per_block <= pk.maxntid);
    }
    compare_with_runtime(sm, pk.name, func, compared, mismatches, first, limiters);

    // Opted in to the most dynamic shared memory a block may have (the library is this test's
    // own: no other test sees the attribute).
    const int opt_in = sm.smem_per_block_optin - pk.static_smem;
    CUDA_CHECK(cudaFuncSetAttribute(func, cudaFuncAttributeMaxDynamicSharedMemorySize, opt_in));
    CHECK(attributes_of(func).max_dynamic_smem_bytes == opt_in);
    CHECK_FALSE(smem_rounding_cases(sm, pk.static_smem, opt_in).empty());  // rounding is tested
    compare_with_runtime(sm, pk.name, func, compared, mismatches, first, limiters);
  }

  // The lesson's own kernels too, at the odd sizes (their default dynamic limit).
  for (LessonKernel kernel : kAllKernels) {
    const KernelResources k = kernel_resources(kernel);
    for (int b : {1, 33, 100, 256, 416, k.max_threads_per_block}) {
      if (b > k.max_threads_per_block) continue;
      for (std::size_t d : odd_dynamic_sizes(sm, k.static_smem_bytes, k.max_dynamic_smem_bytes)) {
        const int runtime = max_active_blocks_per_sm(kernel, b, d);
        ++compared;
        if (occupancy_by_hand(sm, k, b, d).blocks_per_sm != runtime && ++mismatches <= 10) {
          first += std::string(kernel_name(kernel)) + ": block " + std::to_string(b) + ", " +
                   std::to_string(d) + " B dynamic: runtime " + std::to_string(runtime) + "\n";
        }
      }
    }
  }

  INFO("compared " << compared << " configurations; first mismatches:\n" << first);
  CHECK(mismatches == 0);
  CHECK(compared >= 2000);  // not vacuous
  // Every limit decided some of them (a coverage check of the kernels and sizes chosen above).
  for (const char* limiter : {"warps", "blocks", "registers", "shared memory"}) {
    INFO(limiter);
    CHECK(limiters[limiter] > 0);
  }
}

// ---- 6. deployment: the image kernels ---------------------------------------------------------

namespace {
struct ImageCase {
  int width, height;
  std::size_t pitch_pad;  // bytes of padding at the end of every interleaved row
};
const ImageCase kImages[] = {{1, 1, 0}, {3, 5, 0}, {3, 5, 7}, {641, 479, 0}, {641, 479, 13}};
}  // namespace

TEST_CASE("bgr8_to_rgb_planar matches a CPU reference on odd image sizes", "[gpu][image]") {
  for (const auto& ic : kImages) {
    for (const Normalization& norm : {Normalization::unit(), Normalization::imagenet()}) {
      const int w = ic.width, h = ic.height;
      INFO(w << " x " << h << ", pitch padding " << ic.pitch_pad << ", mean[0] " << norm.mean[0]);
      const std::size_t pitch = 3 * static_cast<std::size_t>(w) + ic.pitch_pad;
      const auto src = random_bytes(pitch * h, static_cast<unsigned>(w * 31 + h));
      const std::size_t plane = static_cast<std::size_t>(w) * h;
      constexpr std::size_t guard = 16;
      auto dsrc = course::to_device(src);
      auto ddst = course::to_device(std::vector<float>(3 * plane + guard, kSentinel));
      bgr8_to_rgb_planar(dsrc.data(), w, h, pitch, ddst.data(), norm);
      const auto dst = course::to_host(ddst);
      double max_err = 0.0;
      for (int c = 0; c < 3; ++c) {
        for (int y = 0; y < h; ++y) {
          for (int x = 0; x < w; ++x) {
            const int v = src[static_cast<std::size_t>(y) * pitch + 3 * x + (2 - c)];  // BGR
            const double ref = (v / 255.0 - norm.mean[c]) / norm.std[c];
            max_err = std::max(
                max_err, std::fabs(dst[c * plane + static_cast<std::size_t>(y) * w + x] - ref));
          }
        }
      }
      CHECK(max_err <= 2e-6);  // as normalize_u8 on the CPU: a few float ulp of values up to 2.7
      CHECK(std::all_of(dst.begin() + static_cast<std::ptrdiff_t>(3 * plane), dst.end(),
                        [](float v) { return v == kSentinel; }));
    }
  }
}

TEST_CASE("Exercise 1: rgb_planar_to_bgr8 matches a CPU reference on odd image sizes",
          "[gpu][image][ex1]") {
  for (const auto& ic : kImages) {
    const int w = ic.width, h = ic.height;
    INFO(w << " x " << h << ", pitch padding " << ic.pitch_pad);
    const std::size_t plane = static_cast<std::size_t>(w) * h;
    const std::size_t pitch = 3 * static_cast<std::size_t>(w) + ic.pitch_pad;
    // Values outside [0, 1] as well, so saturation is tested too.
    const auto src = random_floats(3 * plane, -0.2f, 1.2f, static_cast<unsigned>(w + h));
    constexpr std::uint8_t kPad = 0xAB;
    auto dsrc = course::to_device(src);
    auto ddst = course::to_device(std::vector<std::uint8_t>(pitch * h, kPad));
    rgb_planar_to_bgr8(dsrc.data(), w, h, ddst.data(), pitch);
    const auto dst = course::to_host(ddst);
    std::size_t wrong = 0, pad_touched = 0;
    for (int y = 0; y < h; ++y) {
      for (int x = 0; x < w; ++x) {
        for (int c = 0; c < 3; ++c) {  // byte c of the pixel is plane 2 - c
          const double scaled =
              static_cast<double>(src[(2 - c) * plane + static_cast<std::size_t>(y) * w + x]) *
              255.0;
          const double ref = std::min(255.0, std::max(0.0, std::floor(scaled + 0.5)));
          const int got = dst[static_cast<std::size_t>(y) * pitch + 3 * x + c];
          // Exact, except within 1e-3 of a rounding tie, where float and double may round apart.
          const bool near_tie = std::fabs(scaled - std::floor(scaled) - 0.5) < 1e-3;
          wrong += near_tie ? std::abs(got - ref) > 1.0 : got != ref;
        }
      }
      for (std::size_t p = 3 * static_cast<std::size_t>(w); p < pitch; ++p) {
        pad_touched += dst[static_cast<std::size_t>(y) * pitch + p] != kPad;
      }
    }
    CHECK(wrong == 0);
    CHECK(pad_touched == 0);
  }
}

TEST_CASE("Exercise 1: BGR -> RGB planar -> BGR is the identity", "[gpu][image][ex1]") {
  const int w = 641, h = 479;
  const std::size_t pitch = 3 * static_cast<std::size_t>(w) + 3;
  auto src = random_bytes(pitch * h, 11);
  for (int y = 0; y < h; ++y) {  // the padding is not part of the image: give it a known value
    for (std::size_t p = 3 * static_cast<std::size_t>(w); p < pitch; ++p) src[y * pitch + p] = 0;
  }
  auto dsrc = course::to_device(src);
  course::DeviceBuffer<float> planar(3 * static_cast<std::size_t>(w) * h);
  auto dback = course::to_device(std::vector<std::uint8_t>(pitch * h, 0));
  bgr8_to_rgb_planar(dsrc.data(), w, h, pitch, planar.data());
  rgb_planar_to_bgr8(planar.data(), w, h, dback.data(), pitch);
  CHECK(course::to_host(dback) == src);
}
