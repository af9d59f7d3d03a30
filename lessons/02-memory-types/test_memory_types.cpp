// Tests of lesson 02. CPU tests: the per-element math, copy plans and argument checks. [gpu] tests:
// round trips through every memory kind, pointer attributes, and every kernel against a CPU
// reference. Tests of exercise N carry [exN].
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "common/cuda_check.hpp"
#include "common/cupti_trace.hpp"
#include "common/memory.hpp"
#include "common/stream.hpp"
#include "common/testing.hpp"
#include "memory_types.cuh"

using namespace lesson02;
using course::testing::Contains;

namespace {

std::vector<std::uint8_t> random_bytes(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<std::uint8_t> v(n);
  for (auto& b : v) b = static_cast<std::uint8_t>(byte(rng));
  return v;
}

// A float that is not any value a correct kernel writes: 0xFF bytes are a NaN.
constexpr unsigned char kSentinelByte = 0xFF;

// The ImageNet normalisation of the red channel: x / 255 / 0.229 - 0.485 / 0.229.
constexpr float kScale = static_cast<float>(1.0 / (255.0 * 0.229));
constexpr float kShift = static_cast<float>(-0.485 / 0.229);
// |float result - double reference| for values of magnitude <= 2.3: a few float ulps.
constexpr double kNormalizeTolerance = 2e-6;

// A misaligned but never dereferenced address, for argument checks.
template <class T>
T* fake_pointer(std::uintptr_t address) {
  return reinterpret_cast<T*>(address);
}

}  // namespace

// ====================================================================================== CPU tests

TEST_CASE("normalize_pixel computes x * scale + shift", "[normalize]") {
  CHECK(normalize_pixel(255, 1.0f / 255.0f, 0.0f) == course::testing::Approx(1.0).epsilon(1e-6));
  CHECK(normalize_pixel(0, 2.0f, -1.0f) == -1.0f);
  CHECK(normalize_pixel(128, 0.5f, 3.0f) == 67.0f);
  for (int v : {0, 1, 127, 128, 254, 255}) {
    const double expected = v / 255.0 / 0.229 - 0.485 / 0.229;
    CHECK(std::abs(normalize_pixel(static_cast<std::uint8_t>(v), kScale, kShift) - expected) <
          kNormalizeTolerance);
  }
}

TEST_CASE("brighten_u8 saturates at 0 and 255", "[pitched]") {
  CHECK(brighten_u8(100, 27) == 127);
  CHECK(brighten_u8(250, 10) == 255);
  CHECK(brighten_u8(5, -10) == 0);
  CHECK(brighten_u8(0, 0) == 0);
  CHECK(brighten_u8(255, 0) == 255);
  CHECK(brighten_u8(17, 300) == 255);
  CHECK(brighten_u8(17, -300) == 0);
}

TEST_CASE("apply_affine uses cv::warpAffine's 2x3 layout", "[constant]") {
  const float identity[6] = {1, 0, 0, 0, 1, 0};
  const Point2f p = apply_affine(identity, {3.5f, -2.0f});
  CHECK(p.x == 3.5f);
  CHECK(p.y == -2.0f);

  const float rotate90[6] = {0, -1, 0, 1, 0, 0};  // (x, y) -> (-y, x)
  const Point2f q = apply_affine(rotate90, {2.0f, 5.0f});
  CHECK(q.x == -5.0f);
  CHECK(q.y == 2.0f);

  // A letterbox: scale 0.5, then shift by (0, 140).
  const float letterbox[6] = {0.5f, 0, 0, 0, 0.5f, 140.0f};
  const Point2f r = apply_affine(letterbox, {1280.0f, 720.0f});
  CHECK(r.x == 640.0f);
  CHECK(r.y == 500.0f);
}

TEST_CASE("bank_conflict_ways agrees with a simulation of one warp on 32 banks", "[transpose]") {
  // Lane i reads word i * stride; a bank serves one distinct word per pass, so the access takes
  // as many passes as the busiest bank has distinct words.
  for (int stride = 0; stride <= 96; ++stride) {
    std::vector<std::set<int>> words_in_bank(32);
    for (int lane = 0; lane < 32; ++lane) words_in_bank[(lane * stride) % 32].insert(lane * stride);
    std::size_t passes = 0;
    for (const auto& words : words_in_bank) passes = std::max(passes, words.size());
    INFO("stride " << stride);
    CHECK(bank_conflict_ways(stride) == static_cast<int>(passes));
  }
  STATIC_REQUIRE(bank_conflict_ways(kTileDim) == 32);     // v1: an unpadded column
  STATIC_REQUIRE(bank_conflict_ways(kTileDim + 1) == 1);  // v2: the padded column
  STATIC_REQUIRE(bank_conflict_ways(kTileDim + 2) == 2);
}

TEST_CASE("transpose_cpu transposes row-major matrices of any shape", "[transpose]") {
  const std::vector<float> in = {1, 2, 3, 4, 5, 6};  // 2 x 3
  std::vector<float> out(6);
  transpose_cpu(in.data(), out.data(), 2, 3);
  CHECK(out == std::vector<float>{1, 4, 2, 5, 3, 6});  // 3 x 2

  // Larger than its 64x64 blocking and not a multiple of it.
  const int rows = 70, cols = 131;
  std::vector<float> big(rows * cols), big_t(rows * cols);
  for (int i = 0; i < rows * cols; ++i) big[i] = static_cast<float>(i);
  transpose_cpu(big.data(), big_t.data(), rows, cols);
  bool all = true;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c)
      all = all && big_t[c * rows + r] == static_cast<float>(r * cols + c);
  CHECK(all);
}

TEST_CASE("Transpose launchers validate their arguments before touching the GPU", "[transpose]") {
  float* const in = fake_pointer<float>(0x1000);
  float* const out = fake_pointer<float>(0x100000);
  CHECK_THROWS_WITH(transpose_v0_naive(in, out, -1, 4, nullptr), Contains("rows >= 0"));
  CHECK_THROWS_AS(transpose_v1_shared_tile(in, out, 4, -1, nullptr), std::invalid_argument);
  CHECK_THROWS_WITH(transpose_v1_shared_tile(nullptr, out, 4, 4, nullptr), Contains("non-null"));
  CHECK_THROWS_AS(transpose_v2_padded(in, nullptr, 4, 4, nullptr), std::invalid_argument);
  CHECK_THROWS_WITH(transpose_v0_naive(in, in + 3, 4, 4, nullptr), Contains("overlap"));
  CHECK_THROWS_AS(transpose_v0_naive(in, out, 65535 * kTileDim + 1, 1, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_WITH(transpose_v3_dynamic_smem(in, out, 4, 4, -1, nullptr), Contains("pad"));
  CHECK_THROWS_WITH(transpose_v3_dynamic_smem(in, out, 4, 4, kTileDim + 1, nullptr),
                    Contains("pad"));
  // Nothing to transpose: no pointers needed, no GPU touched.
  CHECK_NOTHROW(transpose_v0_naive(nullptr, nullptr, 0, 7, nullptr));
  CHECK_NOTHROW(transpose_v1_shared_tile(nullptr, nullptr, 7, 0, nullptr));
  CHECK_NOTHROW(transpose_v2_padded(nullptr, nullptr, 0, 0, nullptr));
  CHECK_NOTHROW(transpose_v3_dynamic_smem(nullptr, nullptr, 0, 3, 1, nullptr));
}

TEST_CASE("Kernel launchers reject null and misaligned pointers; n = 0 is a no-op", "[args]") {
  const auto* in8 = fake_pointer<const std::uint8_t>(0x1000);
  float* const out = fake_pointer<float>(0x2000);
  CHECK_THROWS_WITH(normalize_u8(nullptr, out, 10, 1, 0, nullptr), Contains("non-null"));
  CHECK_THROWS_WITH(normalize_u8(in8 + 1, out, 10, 1, 0, nullptr), Contains("aligned"));
  CHECK_THROWS_WITH(normalize_u8(in8, out + 1, 10, 1, 0, nullptr), Contains("aligned"));
  CHECK_NOTHROW(normalize_u8(nullptr, nullptr, 0, 1, 0, nullptr));

  CHECK_THROWS_AS(transform_points(nullptr, nullptr, 1, nullptr), std::invalid_argument);
  CHECK_NOTHROW(transform_points(nullptr, nullptr, 0, nullptr));

  CHECK_THROWS_AS(copy_async(nullptr, out, 8, Direction::host_to_device, nullptr),
                  std::invalid_argument);
  CHECK_NOTHROW(copy_async(nullptr, nullptr, 0, Direction::device_to_host, nullptr));

  CHECK_THROWS_AS(prefetch_managed(nullptr, 8, 0, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(mapped_device_pointer(nullptr), std::invalid_argument);
  CHECK_THROWS_AS(host_alloc_flags(nullptr), std::invalid_argument);
  CHECK_THROWS_WITH(alloc_use_free(AllocStrategy::async_retaining_pool, 16, nullptr, nullptr),
                    Contains("MemPool"));
}

TEST_CASE("Empty owners allocate nothing; pageable memory needs no GPU", "[owners]") {
  for (HostKind kind : kAllHostKinds) {
    HostAllocation empty(kind, 0);
    CHECK(empty.data() == nullptr);
    CHECK(empty.bytes() == 0);
  }
  HostAllocation pageable(HostKind::pageable, 10000);
  REQUIRE(pageable.data() != nullptr);
  CHECK(reinterpret_cast<std::uintptr_t>(pageable.data()) % 4096 == 0);  // page-aligned
  CHECK(std::all_of(pageable.data(), pageable.data() + 10000,
                    [](unsigned char b) { return b == 0; }));

  PitchedImage image(0, 10);
  CHECK(image.empty());
  CHECK(image.width_bytes() == 0);
  CHECK(image.height() == 0);
  ManagedBuffer<float> managed(0);
  CHECK(managed.data() == nullptr);
  StagingBuffer staging;
  CHECK(staging.empty());
  CHECK_THROWS_WITH(StagingBuffer(0), Contains("chunk_bytes > 0"));
}

TEST_CASE("Owners reject sizes that overflow size_t and unknown kinds, before allocating",
          "[owners]") {
  // Page rounding of SIZE_MAX bytes wraps to 0: a tiny allocation that reports SIZE_MAX bytes.
  CHECK_THROWS_AS(HostAllocation(HostKind::pageable, SIZE_MAX), std::invalid_argument);
  CHECK_THROWS_AS(HostAllocation(HostKind::registered, SIZE_MAX - 1), std::invalid_argument);
  CHECK_THROWS_WITH(HostAllocation(static_cast<HostKind>(7), 100), Contains("HostKind"));
  CHECK_THROWS_AS(HostAllocation(static_cast<HostKind>(7), 0), std::invalid_argument);
  // count * sizeof(T) past SIZE_MAX (2^62 + 1 floats wrap to 4 bytes); two slots of 2^63 bytes.
  const std::size_t too_many = (std::size_t{1} << 62) + 1;
  CHECK_THROWS_AS(ManagedBuffer<float>(too_many), std::invalid_argument);
  CHECK_THROWS_AS(AsyncDeviceBuffer<float>(too_many, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(StagingBuffer(SIZE_MAX / 2 + 1), std::invalid_argument);
}

TEST_CASE("Out-of-range enum values are rejected before any CUDA call", "[args]") {
  unsigned char host[16] = {}, device[16] = {};  // never dereferenced: the checks come first
  for (const int bad : {-1, 2, 9}) {
    CHECK_THROWS_AS(copy_async(host, device, sizeof host, static_cast<Direction>(bad), nullptr),
                    std::invalid_argument);
  }
  for (const int bad : {-1, 3, 9}) {
    CHECK_THROWS_AS(alloc_use_free(static_cast<AllocStrategy>(bad), 64, nullptr),
                    std::invalid_argument);
  }
}

TEST_CASE("measure_copy_gbps rejects sizes its buffers cannot hold", "[args]") {
  HostAllocation host(HostKind::pageable, 64);
  course::DeviceBuffer<unsigned char> none;  // 0 bytes
  CHECK_THROWS_WITH(measure_copy_gbps(host, none, 64, Direction::host_to_device, 3, nullptr),
                    Contains("bytes <="));
  CHECK_THROWS_AS(measure_copy_gbps(host, none, 0, Direction::host_to_device, 3, nullptr),
                  std::invalid_argument);
}

TEST_CASE("Names of the memory kinds", "[names]") {
  CHECK(std::string(to_string(HostKind::write_combined)) == "write-combined");
  CHECK(std::string(to_string(MemoryKind::pinned_host)) == "pinned host");
  CHECK(std::string(to_string(Direction::host_to_device)) == "H2D");
  CHECK(std::string(to_string(AllocStrategy::async_retaining_pool)).find("pool") !=
        std::string::npos);
  CHECK(describe_host_alloc_flags(cudaHostAllocDefault) == "default");
  CHECK(describe_host_alloc_flags(cudaHostAllocWriteCombined) == "write-combined");
  CHECK(describe_host_alloc_flags(cudaHostAllocPortable | cudaHostAllocMapped) ==
        "portable|mapped");
  CHECK_THAT(describe_host_alloc_flags(0x100u | cudaHostAllocMapped), Contains("mapped|unknown"));
}

TEST_CASE("check_image_view says what a valid host image is", "[pitched]") {
  const std::uint8_t pixel = 0;
  CHECK_NOTHROW(check_image_view({&pixel, 1, 1, 1, 1}));
  CHECK_NOTHROW(check_image_view({nullptr, 0, 0, 3, 0}));  // empty: no data needed
  CHECK_THROWS_WITH(check_image_view({&pixel, -1, 1, 1, 1}), Contains("width >= 0"));
  CHECK_THROWS_WITH(check_image_view({&pixel, 1, 1, 0, 1}), Contains("channels"));
  CHECK_THROWS_WITH(check_image_view({&pixel, 1, 1, 5, 5}), Contains("channels"));
  CHECK_THROWS_WITH(check_image_view({&pixel, 10, 2, 3, 29}),
                    Contains("pitch_bytes >= width * channels"));
  CHECK_THROWS_WITH(check_image_view({nullptr, 2, 2, 1, 2}), Contains("non-null data"));
}

TEST_CASE("plan_roi_copy: offset, pitch and width in bytes of a ROI", "[ex2]") {
  std::vector<std::uint8_t> storage(2048 * 479);
  const HostImageView bgr{storage.data(), 641, 479, 3, 2048};  // odd width, padded rows

  const Copy2DPlan odd = plan_roi_copy(bgr, {3, 5, 101, 37});
  CHECK(odd.src_offset == 5u * 2048 + 3u * 3);
  CHECK(odd.src_pitch == 2048u);   // the image's pitch, not the ROI's width
  CHECK(odd.width_bytes == 303u);  // bytes, not pixels
  CHECK(odd.height == 37u);

  const Copy2DPlan whole = plan_roi_copy(bgr, {0, 0, 641, 479});
  CHECK(whole.src_offset == 0u);
  CHECK(whole.width_bytes == 641u * 3);
  CHECK(whole.height == 479u);

  const HostImageView gray{storage.data(), 7, 5, 1, 7};  // tightly packed
  const Copy2DPlan corner = plan_roi_copy(gray, {6, 4, 1, 1});
  CHECK(corner.src_offset == 4u * 7 + 6);
  CHECK(corner.width_bytes == 1u);
  CHECK(corner.height == 1u);

  const Copy2DPlan empty = plan_roi_copy(gray, {2, 2, 0, 3});
  CHECK(empty.width_bytes == 0u);
}

TEST_CASE("plan_roi_copy rejects ROIs outside the image and invalid images", "[ex2]") {
  std::vector<std::uint8_t> storage(2048 * 479);
  const HostImageView bgr{storage.data(), 641, 479, 3, 2048};
  CHECK_THROWS_AS(plan_roi_copy(bgr, {600, 0, 42, 1}), std::invalid_argument);
  CHECK_THROWS_AS(plan_roi_copy(bgr, {0, 470, 1, 10}), std::invalid_argument);
  CHECK_THROWS_AS(plan_roi_copy(bgr, {-1, 0, 1, 1}), std::invalid_argument);
  CHECK_THROWS_AS(plan_roi_copy(bgr, {0, 0, -1, 1}), std::invalid_argument);
  CHECK_THROWS_AS(plan_roi_copy(bgr, {INT_MAX, 0, 1, 1}),
                  std::invalid_argument);  // x + width overflows
  CHECK_THROWS_AS(plan_roi_copy({storage.data(), 641, 479, 3, 100}, {0, 0, 1, 1}),
                  std::invalid_argument);
}

TEST_CASE("upload_roi rejects bad input before copying anything", "[ex2]") {
  PitchedImage none;
  const HostImageView null_image{nullptr, 4, 4, 1, 4};
  CHECK_THROWS_AS(upload_roi(null_image, {0, 0, 2, 2}, none, nullptr), std::invalid_argument);
  std::vector<std::uint8_t> pixels(16);
  const HostImageView image{pixels.data(), 4, 4, 1, 4};
  CHECK_THROWS_AS(upload_roi(image, {0, 0, 2, 2}, none, nullptr), std::invalid_argument);
  CHECK_NOTHROW(upload_roi(image, {1, 1, 0, 0}, none, nullptr));  // empty ROI, empty destination
  // A ROI with one side zero is empty too (plan_roi_copy accepts it), and an empty PitchedImage
  // reports 0x0 whatever side was zero: nothing to copy, so no destination to check.
  CHECK_NOTHROW(upload_roi(image, {2, 1, 0, 3}, none, nullptr));
  CHECK_NOTHROW(upload_roi(image, {1, 2, 3, 0}, none, nullptr));
}

TEST_CASE("memory_kind_from maps every cudaMemoryType", "[ex1]") {
  cudaPointerAttributes a{};
  a.type = cudaMemoryTypeUnregistered;
  CHECK(memory_kind_from(a) == MemoryKind::pageable);
  a.type = cudaMemoryTypeHost;
  CHECK(memory_kind_from(a) == MemoryKind::pinned_host);
  a.type = cudaMemoryTypeDevice;
  CHECK(memory_kind_from(a) == MemoryKind::device);
  a.type = cudaMemoryTypeManaged;
  CHECK(memory_kind_from(a) == MemoryKind::managed);
  a.type = static_cast<cudaMemoryType>(42);
  CHECK_THROWS_AS(memory_kind_from(a), std::invalid_argument);
}

TEST_CASE("classify_pointer rejects nullptr", "[ex1]") {
  CHECK_THROWS_AS(classify_pointer(nullptr), std::invalid_argument);
}

TEST_CASE("upload_via_staging: 0 bytes is a no-op; an empty staging buffer is rejected", "[ex4]") {
  StagingBuffer empty;
  CHECK_NOTHROW(upload_via_staging(nullptr, nullptr, 0, empty, nullptr));
  const std::vector<unsigned char> src(16);
  CHECK_THROWS_AS(
      upload_via_staging(src.data(), fake_pointer<void>(0x1000), src.size(), empty, nullptr),
      std::invalid_argument);
}

// ====================================================================================== GPU tests

TEST_CASE("Every host memory kind round-trips through device memory", "[gpu][transfer]") {
  const HostKind kind = GENERATE(HostKind::pageable, HostKind::pinned, HostKind::write_combined,
                                 HostKind::registered);
  const std::size_t n = GENERATE(std::size_t{1}, std::size_t{4097}, (std::size_t{1} << 20) + 3);
  INFO(to_string(kind) << " memory, " << n << " bytes");
  const auto data = random_bytes(n, static_cast<std::uint32_t>(n));
  HostAllocation up(kind, n), down(kind, n);
  std::memcpy(up.data(), data.data(), n);
  course::DeviceBuffer<unsigned char> device(n);
  course::Stream stream;
  copy_async(up.data(), device.data(), n, Direction::host_to_device, stream);
  copy_async(down.data(), device.data(), n, Direction::device_to_host, stream);
  stream.synchronize();
  CHECK(std::memcmp(down.data(), data.data(), n) == 0);
}

TEST_CASE("cudaPointerGetAttributes tells every kind of memory apart", "[gpu][ex1]") {
  std::vector<int> plain(100);
  CHECK(classify_pointer(plain.data()).kind == MemoryKind::pageable);

  HostAllocation pinned(HostKind::pinned, 256);
  const PointerInfo p = classify_pointer(pinned.data());
  CHECK(p.kind == MemoryKind::pinned_host);
  CHECK(p.device == 0);
  CHECK(p.host_pointer == static_cast<void*>(pinned.data()));
  // Unified addressing maps all cudaHostAlloc memory at its host address.
  CHECK(p.device_pointer == static_cast<void*>(pinned.data()));
  CHECK(classify_pointer(pinned.data() + 100).kind ==
        MemoryKind::pinned_host);  // an interior pointer

  HostAllocation wc(HostKind::write_combined, 256);
  CHECK(classify_pointer(wc.data()).kind == MemoryKind::pinned_host);

  HostAllocation registered(HostKind::registered, 256);
  const PointerInfo r = classify_pointer(registered.data());
  CHECK(r.kind == MemoryKind::pinned_host);
  CHECK(r.device_pointer == mapped_device_pointer(registered.data()));

  course::DeviceBuffer<float> device(64);
  const PointerInfo d = classify_pointer(device.data());
  CHECK(d.kind == MemoryKind::device);
  CHECK(d.device == 0);
  CHECK(d.device_pointer == static_cast<void*>(device.data()));
  CHECK(classify_pointer(device.data() + 63).kind == MemoryKind::device);

  PitchedImage image(33, 3);
  CHECK(classify_pointer(image.data()).kind == MemoryKind::device);

  course::Stream stream;
  {
    AsyncDeviceBuffer<float> async(64, stream);
    CHECK(classify_pointer(async.data()).kind == MemoryKind::device);
  }
  stream.synchronize();

  ManagedBuffer<float> managed(64);
  const PointerInfo m = classify_pointer(managed.data());
  CHECK(m.kind == MemoryKind::managed);
  CHECK(m.device_pointer == static_cast<void*>(managed.data()));
  CHECK(m.host_pointer == static_cast<void*>(managed.data()));
}

TEST_CASE("A __constant__ symbol's address is device memory", "[gpu][ex1]") {
  // Module globals (__device__, __constant__) are allocated in device memory when the module
  // loads; cudaGetSymbolAddress gives their device address.
  CHECK(classify_pointer(affine_symbol_address()).kind == MemoryKind::device);
}

TEST_CASE("host_alloc_flags returns the flags cudaHostAlloc was given", "[gpu][transfer]") {
  HostAllocation wc(HostKind::write_combined, 64);
  CHECK((host_alloc_flags(wc.data()) & cudaHostAllocWriteCombined) != 0);
  course::PinnedBuffer<char> mapped(64, cudaHostAllocMapped | cudaHostAllocPortable);
  const unsigned flags = host_alloc_flags(mapped.data());
  CHECK((flags & cudaHostAllocMapped) != 0);
  CHECK((flags & cudaHostAllocPortable) != 0);
  CHECK((flags & cudaHostAllocWriteCombined) == 0);
}

TEST_CASE("normalize_u8 gives the same result from device, zero-copy and managed memory",
          "[gpu][zero-copy]") {
  const std::size_t n = GENERATE(std::size_t{1}, std::size_t{3}, std::size_t{4}, std::size_t{5},
                                 std::size_t{4099}, (std::size_t{1} << 20) + 1);
  CAPTURE(n);
  const auto pixels = random_bytes(n, 7);
  const MemoryFacts facts = query_memory_facts(0);
  course::Stream stream;
  course::DeviceBuffer<float> out(n);

  const auto check_output = [&] {
    CUDA_CHECK(cudaStreamSynchronize(stream));
    const auto got = course::to_host(out);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const double expected = pixels[i] / (255.0 * 0.229) - 0.485 / 0.229;
      if (!(std::abs(got[i] - expected) <= kNormalizeTolerance)) ++bad;  // NaN counts as bad
    }
    CHECK(bad == 0);
    CUDA_CHECK(cudaMemsetAsync(out.data(), kSentinelByte, out.bytes(), stream));
  };
  CUDA_CHECK(cudaMemsetAsync(out.data(), kSentinelByte, out.bytes(), stream));

  SECTION("device memory") {
    const auto in = upload(pixels, stream);
    normalize_u8(in.data(), out.data(), n, kScale, kShift, stream);
    check_output();
  }
  SECTION("mapped pinned host memory (zero-copy)") {
    course::PinnedBuffer<std::uint8_t> host(n, cudaHostAllocMapped);
    std::copy(pixels.begin(), pixels.end(), host.begin());
    const auto* in = static_cast<const std::uint8_t*>(mapped_device_pointer(host.data()));
    normalize_u8(in, out.data(), n, kScale, kShift, stream);
    check_output();
  }
  SECTION("managed memory, pages migrated on demand or prefetched") {
    ManagedBuffer<std::uint8_t> in(n);
    std::copy(pixels.begin(), pixels.end(), in.begin());  // first touch on the host
    normalize_u8(in.data(), out.data(), n, kScale, kShift, stream);
    check_output();
    if (facts.concurrent_managed_access) {
      prefetch_managed(in.data(), in.bytes(), cudaCpuDeviceId, stream);
      stream.synchronize();
      std::copy(pixels.begin(), pixels.end(), in.begin());
      prefetch_managed(in.data(), in.bytes(), 0, stream);
      normalize_u8(in.data(), out.data(), n, kScale, kShift, stream);
      check_output();
    }
  }
}

TEST_CASE("Managed memory: written on the host, used by a kernel, read back on the host",
          "[gpu][managed]") {
  const std::size_t n = (std::size_t{1} << 20) + 3;
  const auto pixels = random_bytes(n, 11);
  ManagedBuffer<std::uint8_t> in(n);
  ManagedBuffer<float> out(n);
  std::copy(pixels.begin(), pixels.end(), in.begin());
  course::Stream stream;
  if (query_memory_facts(0).concurrent_managed_access) {
    prefetch_managed(in.data(), in.bytes(), 0, stream);
    prefetch_managed(out.data(), out.bytes(), 0, stream);
  }
  normalize_u8(in.data(), out.data(), n, kScale, kShift, stream);
  if (query_memory_facts(0).concurrent_managed_access) {
    prefetch_managed(out.data(), out.bytes(), cudaCpuDeviceId, stream);
  }
  stream.synchronize();  // the host may touch managed memory only once the GPU is done with it
  std::size_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double expected = pixels[i] / (255.0 * 0.229) - 0.485 / 0.229;
    if (!(std::abs(out.data()[i] - expected) <= kNormalizeTolerance)) ++bad;
  }
  CHECK(bad == 0);
}

namespace {
struct ImageCase {
  int width, height, channels;
};

// A host image with random pixels and rows padded to width * channels + 13 bytes.
struct HostImage {
  std::size_t pitch;
  std::vector<std::uint8_t> bytes;
  HostImageView view;
  HostImage(int w, int h, int c)
      : pitch(static_cast<std::size_t>(w) * c + 13),
        bytes(random_bytes(pitch * h, static_cast<std::uint32_t>(w * 131 + h))),
        view{bytes.data(), w, h, c, pitch} {}
};
}  // namespace

TEST_CASE("Pitched images: upload, brighten and download odd sizes, padding untouched",
          "[gpu][pitched]") {
  const ImageCase c = GENERATE(ImageCase{1, 1, 1}, ImageCase{1, 7, 3}, ImageCase{637, 479, 3},
                               ImageCase{640, 480, 1}, ImageCase{33, 2, 4});
  CAPTURE(c.width, c.height, c.channels);
  const HostImage host(c.width, c.height, c.channels);
  const std::size_t row = static_cast<std::size_t>(c.width) * c.channels;
  PitchedImage image(row, c.height);
  REQUIRE(image.pitch() >= row);
  course::Stream stream;
  constexpr unsigned char kPad = 0xAB;
  CUDA_CHECK(cudaMemsetAsync(image.data(), kPad, image.pitch() * image.height(), stream));
  upload_image(host.view, image, stream);
  brighten(image, 40, stream);
  std::vector<std::uint8_t> back(row * c.height);
  download_image(image, back.data(), row, stream);
  std::vector<std::uint8_t> raw(image.pitch() * image.height());
  CUDA_CHECK(cudaMemcpyAsync(raw.data(), image.data(), raw.size(), cudaMemcpyDeviceToHost, stream));
  stream.synchronize();

  std::size_t wrong = 0, padding_touched = 0;
  for (int y = 0; y < c.height; ++y) {
    for (std::size_t x = 0; x < row; ++x) {
      const int expected = std::min(255, host.bytes[y * host.pitch + x] + 40);
      if (back[y * row + x] != expected) ++wrong;
    }
    for (std::size_t x = row; x < image.pitch(); ++x) {
      if (raw[y * image.pitch() + x] != kPad) ++padding_touched;
    }
  }
  CHECK(wrong == 0);
  CHECK(padding_touched == 0);
  CHECK_THROWS_AS(upload_image(HostImageView{host.bytes.data(), c.width + 1, c.height, c.channels,
                                             host.pitch + c.channels},
                               image, stream),
                  std::invalid_argument);
}

TEST_CASE("upload_roi copies a region with an odd width at an odd offset", "[gpu][ex2]") {
  const int channels = GENERATE(1, 3);
  const HostImage host(641, 479, channels);
  const Roi roi =
      GENERATE(Roi{3, 5, 101, 37}, Roi{0, 0, 641, 479}, Roi{640, 478, 1, 1}, Roi{0, 100, 1, 379});
  CAPTURE(channels, roi.x, roi.y, roi.width, roi.height);
  const std::size_t row = static_cast<std::size_t>(roi.width) * channels;
  PitchedImage dst(row, roi.height);
  course::Stream stream;
  upload_roi(host.view, roi, dst, stream);
  std::vector<std::uint8_t> back(row * roi.height);
  download_image(dst, back.data(), row, stream);
  stream.synchronize();
  std::size_t wrong = 0;
  for (int y = 0; y < roi.height; ++y) {
    for (std::size_t x = 0; x < row; ++x) {
      const std::size_t src = static_cast<std::size_t>(roi.y + y) * host.pitch +
                              static_cast<std::size_t>(roi.x) * channels + x;
      if (back[y * row + x] != host.bytes[src]) ++wrong;
    }
  }
  CHECK(wrong == 0);
  PitchedImage wrong_size(row + 1, roi.height);
  CHECK_THROWS_AS(upload_roi(host.view, roi, wrong_size, stream), std::invalid_argument);
}

TEST_CASE("Constant memory: transform_points applies the matrix set_affine put there",
          "[gpu][constant]") {
  const std::size_t n = GENERATE(std::size_t{1}, std::size_t{257}, std::size_t{100003});
  CAPTURE(n);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> coord(-1000.0f, 1000.0f);
  std::vector<Point2f> points(n);
  for (auto& p : points) p = {coord(rng), coord(rng)};
  course::Stream stream;
  const auto in = upload(points, stream);
  course::DeviceBuffer<Point2f> out(n);

  const auto check = [&](const Affine2x3& a, const course::DeviceBuffer<Point2f>& result) {
    const auto got = course::to_host(result);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const double x = points[i].x, y = points[i].y;
      const double ex = double(a.m[0]) * x + double(a.m[1]) * y + a.m[2];
      const double ey = double(a.m[3]) * x + double(a.m[4]) * y + a.m[5];
      // float arithmetic on coordinates up to ~2000: a few ulps of 2048 is ~1e-3.
      if (std::abs(got[i].x - ex) > 1e-3 || std::abs(got[i].y - ey) > 1e-3) ++bad;
    }
    CHECK(bad == 0);
  };

  const Affine2x3 letterbox{{0.5f, 0.0f, 0.0f, 0.0f, 0.5f, 140.0f}};
  set_affine(letterbox, stream);
  transform_points(in.data(), out.data(), n, stream);
  stream.synchronize();
  check(letterbox, out);

  // A new matrix, ordered on the same stream after the previous kernel: the next launch sees it.
  const Affine2x3 rotate{{0.8f, -0.6f, 12.5f, 0.6f, 0.8f, -7.25f}};
  set_affine(rotate, stream);
  transform_points(in.data(), out.data(), n, stream);
  stream.synchronize();
  check(rotate, out);

  // In place.
  auto inout = upload(points, stream);
  transform_points(inout.data(), inout.data(), n, stream);
  stream.synchronize();
  check(rotate, inout);
}

namespace {
struct Shape {
  int rows, cols;
};
// Not multiples of the 32x32 tile, single rows and columns, and a few that are.
const Shape kShapes[] = {{1, 1},   {1, 37},  {37, 1},    {31, 33},   {32, 32},
                         {33, 31}, {64, 96}, {100, 257}, {513, 1025}};

template <class Launch>
void check_transpose(Launch&& launch) {
  course::Stream stream;
  for (const Shape s : kShapes) {
    CAPTURE(s.rows, s.cols);
    const std::size_t n = static_cast<std::size_t>(s.rows) * s.cols;
    std::vector<float> in(n), expected(n);
    for (std::size_t i = 0; i < n; ++i) in[i] = static_cast<float>(i) * 0.5f - 100.0f;
    transpose_cpu(in.data(), expected.data(), s.rows, s.cols);
    const auto d_in = upload(in, stream);
    course::DeviceBuffer<float> d_out(n);
    CUDA_CHECK(cudaMemsetAsync(d_out.data(), kSentinelByte, d_out.bytes(), stream));
    launch(d_in.data(), d_out.data(), s.rows, s.cols, stream.get());
    stream.synchronize();
    const auto got = course::to_host(d_out);
    // A transpose moves values without arithmetic: exact equality (a NaN sentinel never equals).
    CHECK(std::equal(got.begin(), got.end(), expected.begin()));
  }
}
}  // namespace

TEST_CASE("transpose v0, v1 and v3 match the CPU reference on awkward shapes", "[gpu][transpose]") {
  SECTION("v0 naive") {
    check_transpose(transpose_v0_naive);
  }
  SECTION("v1 shared tile") {
    check_transpose(transpose_v1_shared_tile);
  }
  SECTION("v3 dynamic shared memory, several paddings") {
    for (int pad : {0, 1, 2, 5, kTileDim}) {
      CAPTURE(pad);
      check_transpose([pad](const float* in, float* out, int r, int c, cudaStream_t s) {
        transpose_v3_dynamic_smem(in, out, r, c, pad, s);
      });
    }
  }
}

TEST_CASE("transpose v2 (padded tile) matches the CPU reference on awkward shapes",
          "[gpu][transpose][ex3]") {
  check_transpose(transpose_v2_padded);
}

TEST_CASE("transpose v2 pads its tile: kTileDim x (kTileDim + 1) floats of shared memory",
          "[gpu][transpose][ex3]") {
  // The point of the exercise, observed without a timer: the padded tile is what makes a column
  // of it land in 32 banks. An unpadded [32][32] tile gives the right values, 32 x 32 floats.
  const cudaFuncAttributes a = transpose_v2_padded_attributes();
  INFO("static shared memory " << a.sharedSizeBytes << " bytes; unpadded it would be "
                               << kTileDim * kTileDim * sizeof(float));
  CHECK(a.sharedSizeBytes == kTileDim * (kTileDim + 1) * sizeof(float));
  CHECK(bank_conflict_ways(kTileDim + 1) == 1);
}

TEST_CASE("Memory from cudaMallocAsync is usable in stream order", "[gpu][stream-ordered]") {
  std::vector<int> data(1000);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<int>(i * i) - 12345;
  std::vector<int> back(data.size());
  course::Stream stream;
  MemPool pool(0, std::numeric_limits<std::uint64_t>::max());
  for (cudaMemPool_t from : {static_cast<cudaMemPool_t>(nullptr), pool.get()}) {
    std::fill(back.begin(), back.end(), 0);
    {
      AsyncDeviceBuffer<int> buf(data.size(), stream, from);
      CUDA_CHECK(
          cudaMemcpyAsync(buf.data(), data.data(), buf.bytes(), cudaMemcpyHostToDevice, stream));
      CUDA_CHECK(
          cudaMemcpyAsync(back.data(), buf.data(), buf.bytes(), cudaMemcpyDeviceToHost, stream));
    }  // cudaFreeAsync, ordered after the copies
    stream.synchronize();
    CHECK(back == data);
  }
}

TEST_CASE("A pinned-host pool hands out host memory that the CPU and the copy engines use",
          "[gpu][stream-ordered]") {
  int supported = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&supported, cudaDevAttrHostMemoryPoolsSupported, 0));
  if (supported == 0) {
    WARN("device 0 reports cudaDevAttrHostMemoryPoolsSupported = 0: nothing to check");
    return;
  }
  course::Stream stream;
  MemPool pool(0, std::numeric_limits<std::uint64_t>::max(), PoolMemory::pinned_host);
  const std::size_t count = 1 << 20;
  const std::size_t bytes = count * sizeof(int);
  void* raw = nullptr;
  CUDA_CHECK(cudaMallocFromPoolAsync(&raw, bytes, pool.get(), stream));
  const auto free_async = [&stream](int* p) { cudaFreeAsync(p, stream); };
  std::unique_ptr<int, decltype(free_async)> staging(static_cast<int*>(raw), free_async);
  stream.synchronize();  // the allocation is ordered in the stream; the CPU may now touch it

  // What the runtime says it is: host memory, not device memory.
  cudaPointerAttributes attr{};
  CUDA_CHECK(cudaPointerGetAttributes(&attr, staging.get()));
  CHECK(attr.type == cudaMemoryTypeHost);

  // The CPU writes it, a copy engine reads it into device memory and back into ordinary memory.
  for (std::size_t i = 0; i < count; ++i) staging.get()[i] = static_cast<int>(i * 7) - 5;
  course::DeviceBuffer<int> device(count);
  std::vector<int> back(count, 0);
  CUDA_CHECK(cudaMemcpyAsync(device.data(), staging.get(), bytes, cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaMemcpyAsync(back.data(), device.data(), bytes, cudaMemcpyDeviceToHost, stream));
  stream.synchronize();
  CHECK(std::equal(back.begin(), back.end(), staging.get()));

  // Freed in stream order, and kept by the pool (the release threshold is unlimited).
  staging.reset();
  stream.synchronize();
  CHECK(pool.reserved_bytes() >= bytes);
}

TEST_CASE("alloc_use_free works for every strategy; a retaining pool keeps its memory",
          "[gpu][stream-ordered]") {
  course::Stream stream;
  const std::size_t bytes = std::size_t{8} << 20;
  MemPool pool(0, std::numeric_limits<std::uint64_t>::max());
  for (AllocStrategy s : {AllocStrategy::cuda_malloc, AllocStrategy::async_default_pool,
                          AllocStrategy::async_retaining_pool}) {
    INFO(to_string(s));
    CHECK_NOTHROW(alloc_use_free(s, bytes, stream, &pool));
    CHECK_NOTHROW(alloc_use_free(s, 0, stream, &pool));
  }
  // The release threshold keeps the freed block reserved across the synchronisation...
  CHECK(pool.reserved_bytes() >= bytes);
  // ...until it is trimmed explicitly.
  CUDA_CHECK(cudaMemPoolTrimTo(pool.get(), 0));
  CHECK(pool.reserved_bytes() == 0);
}

namespace {
constexpr std::size_t kChunk = 1000;  // not a power of two: chunk edges fall anywhere
}

TEST_CASE("upload_via_staging uploads any size through two pinned slots", "[gpu][ex4]") {
  constexpr std::size_t chunk = kChunk;
  StagingBuffer staging(chunk);
  REQUIRE(staging.chunk_bytes() == chunk);
  course::Stream stream;
  const std::size_t n = GENERATE(std::size_t{1}, kChunk - 1, kChunk, kChunk + 1, 5 * kChunk + 7,
                                 (std::size_t{1} << 20) + 5);
  CAPTURE(n);
  const auto original = random_bytes(n, static_cast<std::uint32_t>(n) + 1);
  auto src = original;
  course::DeviceBuffer<std::uint8_t> dst(n);
  upload_via_staging(src.data(), dst.data(), n, staging, stream);
  std::fill(src.begin(), src.end(), 0);  // the source may be reused as soon as the call returns
  stream.synchronize();
  CHECK(course::to_host(dst) == original);

  CHECK_THROWS_AS(upload_via_staging(nullptr, dst.data(), n, staging, stream),
                  std::invalid_argument);
  CHECK_THROWS_AS(upload_via_staging(src.data(), nullptr, n, staging, stream),
                  std::invalid_argument);
}

TEST_CASE("Back-to-back staged uploads do not overwrite a slot the copy engine still reads",
          "[gpu][ex4]") {
  constexpr std::size_t chunk = 4096;
  constexpr std::size_t n = 64 * chunk + 123;
  StagingBuffer staging(chunk);
  course::Stream stream;
  const auto a = random_bytes(n, 1), b = random_bytes(n, 2);
  course::DeviceBuffer<std::uint8_t> da(n), db(n);
  upload_via_staging(a.data(), da.data(), n, staging, stream);
  upload_via_staging(b.data(), db.data(), n, staging, stream);  // no synchronisation in between
  stream.synchronize();
  CHECK(course::to_host(da) == a);
  CHECK(course::to_host(db) == b);
}

namespace {
// A stream callback that holds the stream up: nothing queued behind it starts for 100 ms.
void CUDART_CB hold_stream_100ms(void*) {
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
}
}  // namespace

TEST_CASE("A staged upload behind a busy stream does not refill a slot before its copy ran",
          "[gpu][ex4]") {
  // The copy of chunk 0 cannot start for 100 ms; a refill of slot 0 for chunk 2 that does not
  // wait for it overwrites the bytes before they are read, every time (not only when the copy
  // engine happens to be slow).
  constexpr std::size_t chunk = 4096;
  constexpr std::size_t n = 4 * chunk + 9;
  StagingBuffer staging(chunk);
  course::Stream stream;
  const auto a = random_bytes(n, 3);
  course::DeviceBuffer<std::uint8_t> da(n);
  CUDA_CHECK(cudaLaunchHostFunc(stream, hold_stream_100ms, nullptr));
  upload_via_staging(a.data(), da.data(), n, staging, stream);
  stream.synchronize();
  CHECK(course::to_host(da) == a);
}

TEST_CASE("upload_via_staging records each slot's event after its copy and waits on it",
          "[gpu][ex4][cupti]") {
  // The order of the calls, as CUPTI saw them. Recording a slot's event BEFORE its copy gives
  // the right bytes in any run that can be timed: waiting on it returns when the copy is about
  // to start, and the copy engine then reads the slot faster than the CPU refills it. Only the
  // order of the calls shows the bug.
  constexpr std::size_t chunk = kChunk;
  constexpr std::size_t n = 5 * chunk + 7;  // 6 chunks: each slot is refilled twice
  StagingBuffer staging(chunk);
  course::Stream stream;
  const auto a = random_bytes(n, 4);
  course::DeviceBuffer<std::uint8_t> da(n);
  std::vector<course::cupti::ApiCall> calls;
  {
    course::cupti::ApiTrace trace;
    upload_via_staging(a.data(), da.data(), n, staging, stream);
    calls = trace.calls();
  }
  stream.synchronize();
  CHECK(course::to_host(da) == a);

  using Kind = course::cupti::ApiCall::Kind;
  // Per slot: free (never used, or its last copy is known done), copied (a copy reads it and no
  // event after that copy exists yet), fenced (its event was recorded after the copy).
  enum class State { free, copied, fenced };
  for (int s = 0; s < StagingBuffer::kSlots; ++s) {
    CAPTURE(s);
    const unsigned char* lo = staging.slot(s);
    const cudaEvent_t event = staging.slot_free(s);
    State state = State::free;
    int copies = 0;
    for (std::size_t i = 0; i < calls.size(); ++i) {
      const auto& c = calls[i];
      CAPTURE(i);
      const auto* src = static_cast<const unsigned char*>(c.src);
      if (c.kind == Kind::memcpy_async && src >= lo && src < lo + chunk) {
        INFO(
            "a copy from the slot, while its previous copy may still be reading it: wait on the "
            "event recorded AFTER that copy before refilling the slot");
        CHECK(state == State::free);
        CHECK(c.stream == static_cast<cudaStream_t>(stream));
        state = State::copied;
        ++copies;
      } else if (c.kind == Kind::event_record && c.event == event) {
        if (state == State::copied && c.stream == static_cast<cudaStream_t>(stream))
          state = State::fenced;
      } else if (c.kind == Kind::event_synchronize && c.event == event) {
        if (state == State::fenced) state = State::free;
      } else if ((c.kind == Kind::stream_synchronize &&
                  c.stream == static_cast<cudaStream_t>(stream)) ||
                 c.kind == Kind::device_synchronize) {
        state = State::free;
      }
    }
    CHECK(copies == 3);
    INFO(
        "after the last copy from the slot, its event must be recorded (the next upload waits "
        "on it)");
    CHECK(state != State::copied);
  }
}
