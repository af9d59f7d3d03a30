// Lesson 02: memory types. Where every byte lives and what moving it costs, measured on this GPU.
//
//   lesson02 [--reps N] [--max-mib N] [--transpose N] [--help]
//
// Each section allocates one kind of memory, moves data through it, checks the result against a
// CPU reference and prints what it measured. The exit code is 0 only if every check passed.
// The long sweeps (4 KiB .. 256 MiB, more repetitions) are in lesson02_bench (`make bench`).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "common/headline.hpp"
#include "common/lesson_main.hpp"
#include "common/cuda_check.hpp"
#include "common/device.hpp"
#include "common/memory.hpp"
#include "common/stream.hpp"
#include "common/timing.hpp"
#include "memory_types.cuh"

using namespace lesson02;

namespace {

constexpr std::size_t KiB = 1024, MiB = 1024 * KiB;

struct Options {
  int reps = 5;              // timed repetitions per measurement (the median is printed)
  std::size_t max_mib = 64;  // largest copy in the bandwidth table
  int transpose_n = 4096;    // the transposed matrix is n x n floats
};

// ------------------------------------------------------------------------ checks and timing

int g_failed_checks = 0;

void check(bool ok, const std::string& what) {
  std::printf("   check: %-62s %s\n", what.c_str(), ok ? "ok" : "FAILED");
  if (!ok) ++g_failed_checks;
}

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

// Median GPU time in ms of what `enqueue` puts on `stream` (common/timing.hpp: launch latency
// excluded), after one warm-up. `setup` runs untimed before each repetition.
template <class Setup, class F>
double gpu_ms(cudaStream_t stream, int reps, Setup&& setup, F&& enqueue) {
  setup();
  enqueue();
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    setup();
    ms.push_back(course::gpu_time_ms(stream, enqueue));
  }
  return median(ms);
}
template <class F>
double gpu_ms(cudaStream_t stream, int reps, F&& enqueue) {
  return gpu_ms(
      stream, reps, [] {}, enqueue);
}

// Median host wall-clock time in ms of `run` (which must finish its GPU work before returning).
template <class F>
double host_ms(int reps, F&& run) {
  run();  // warm-up
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    run();
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return median(ms);
}

double gbps(double bytes, double ms) {
  return bytes / (ms * 1e-3) / 1e9;
}

std::string size_label(std::size_t bytes) {
  return bytes >= MiB ? std::to_string(bytes / MiB) + " MiB" : std::to_string(bytes / KiB) + " KiB";
}

void fill_pattern(unsigned char* p, std::size_t n, unsigned seed) {
  for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<unsigned char>((i * 131 + seed) >> 3);
}

// |got - expected| <= 2e-6 for every pixel, expected computed in double.
bool normalized_ok(const std::vector<float>& got, const std::vector<std::uint8_t>& pixels,
                   float scale, float shift) {
  for (std::size_t i = 0; i < pixels.size(); ++i) {
    const double expected = pixels[i] * static_cast<double>(scale) + shift;
    if (!(std::abs(got[i] - expected) <= 2e-6)) return false;
  }
  return true;
}

// ---------------------------------------------------------------------------------- sections

void section_device(const course::DeviceInfo& info, const MemoryFacts& f) {
  std::printf("\n1. The GPU and what its memory system supports (cudaDeviceGetAttribute)\n");
  std::printf("   %s\n", course::summary(info).c_str());
  const auto yes = [](bool b) { return b ? "yes" : "no"; };
  std::printf(
      "   unified addressing %s | map host memory (zero-copy) %s | pageable memory access %s\n",
      yes(f.unified_addressing), yes(f.can_map_host_memory), yes(f.pageable_memory_access));
  std::printf(
      "   concurrent managed access %s | memory pools %s | cudaHostRegister %s"
      " (host pointer usable on device: %s)\n",
      yes(f.concurrent_managed_access), yes(f.memory_pools_supported),
      yes(f.host_register_supported), yes(f.host_pointer_for_registered));
  std::printf(
      "   copy engines %d | constant memory %zu KiB | shared memory per block %d KiB"
      " (opt-in %d KiB), per SM %d KiB | L2 %d MiB\n",
      f.async_engine_count, f.total_constant_bytes / KiB, f.shared_per_block_bytes / 1024,
      f.shared_per_block_optin_bytes / 1024, f.shared_per_sm_bytes / 1024,
      info.l2_cache_bytes >> 20);
}

void section_transfers(const Options& o, cudaStream_t stream) {
  std::printf("\n2. Host <-> device copies: cudaMemcpyAsync, median of %d, GB/s = 1e9 bytes/s\n",
              o.reps);
  std::printf(
      "   GPU time of the copy (launch latency excluded), but pageable rows: end to end (host call\n"
      "   to completion), since the call blocks the host while the driver stages the data.\n");
  std::printf(
      "   From pageable memory the driver copies through its own pinned staging buffer;\n"
      "   pinned, write-combined and registered memory are read by the DMA engine directly.\n");
  const std::size_t max_bytes = o.max_mib * MiB;
  std::vector<std::size_t> sizes;
  for (std::size_t s : {64 * KiB, 1 * MiB, 16 * MiB, max_bytes}) {
    if (s <= max_bytes && (sizes.empty() || s > sizes.back())) sizes.push_back(s);
  }
  std::printf("   %s\n", course::harness_floor_caption(stream).c_str());
  std::printf("   %-15s %-4s %9s", "host memory", "dir", "alloc ms");
  for (std::size_t s : sizes) std::printf(" %9s", size_label(s).c_str());
  std::printf("\n");
  course::DeviceBuffer<unsigned char> device(max_bytes);
  std::vector<std::pair<std::string, bool>> round_trips;
  for (HostKind kind : kAllHostKinds) {
    const auto t0 = std::chrono::steady_clock::now();
    HostAllocation host(kind, max_bytes);
    const double alloc_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    for (Direction dir : {Direction::host_to_device, Direction::device_to_host}) {
      std::printf("   %-15s %-4s %9.1f", to_string(kind), to_string(dir), alloc_ms);
      for (std::size_t s : sizes) {
        const double g = measure_copy_gbps(host, device, s, dir, o.reps, stream);
        std::printf(" %9.1f", g);
        if (dir == Direction::host_to_device && s == sizes.back() &&
            (kind == HostKind::pinned || kind == HostKind::pageable)) {
          course::add_headline("H2D %zu MiB %s %.1f GB/s", s / MiB, to_string(kind), g);
        }
      }
      std::printf("\n");
    }
    // Round trip through this kind: a pattern up, zeros over it on the host, the pattern back.
    const std::size_t n = std::min(max_bytes, 1 * MiB);
    fill_pattern(host.data(), n, static_cast<unsigned>(kind));
    copy_async(host.data(), device.data(), n, Direction::host_to_device, stream);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    std::memset(host.data(), 0, n);
    copy_async(host.data(), device.data(), n, Direction::device_to_host, stream);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<unsigned char> expected(n);
    fill_pattern(expected.data(), n, static_cast<unsigned>(kind));
    round_trips.emplace_back(std::string(to_string(kind)) + " memory round-trips " + size_label(n),
                             std::memcmp(host.data(), expected.data(), n) == 0);
  }
  for (const auto& [what, ok] : round_trips) check(ok, what);
}

void section_write_combined(const Options& o) {
  std::printf(
      "\n3. Write-combined memory is for the CPU to write, not to read (host memcpy, 4 MiB)\n");
  const std::size_t n = 4 * MiB;
  HostAllocation wc(HostKind::write_combined, n), pinned(HostKind::pinned, n);
  std::vector<unsigned char> plain(n, 1);
  const auto write = [&](HostAllocation& a) {
    return host_ms(o.reps, [&] { std::memcpy(a.data(), plain.data(), n); });
  };
  const auto read = [&](HostAllocation& a) {
    return host_ms(o.reps, [&] { std::memcpy(plain.data(), a.data(), n); });
  };
  const double wc_write = write(wc), pinned_write = write(pinned);
  const double wc_read = read(wc), pinned_read = read(pinned);
  std::printf("   %-15s  CPU write %6.1f GB/s   CPU read %6.2f GB/s\n", "pinned (cached)",
              gbps(n, pinned_write), gbps(n, pinned_read));
  std::printf("   %-15s  CPU write %6.1f GB/s   CPU read %6.2f GB/s\n", "write-combined",
              gbps(n, wc_write), gbps(n, wc_read));
  check(std::all_of(plain.begin(), plain.end(), [](unsigned char b) { return b == 1; }),
        "bytes read back from write-combined memory are the bytes written");
}

void section_staging(const Options& o, cudaStream_t stream) {
  const std::size_t n = std::min<std::size_t>(64, o.max_mib) * MiB;
  std::printf(
      "\n4. Uploading %s from pageable memory: the driver's staging vs ours (host wall clock)\n",
      size_label(n).c_str());
  HostAllocation pageable(HostKind::pageable, n), pinned(HostKind::pinned, n);
  fill_pattern(pageable.data(), n, 42);
  std::memcpy(pinned.data(), pageable.data(), n);
  course::DeviceBuffer<unsigned char> device(n);
  const auto time_upload = [&](auto&& upload) {
    return host_ms(o.reps, [&] {
      upload();
      CUDA_CHECK(cudaStreamSynchronize(stream));
    });
  };
  const double driver = time_upload(
      [&] { copy_async(pageable.data(), device.data(), n, Direction::host_to_device, stream); });
  std::printf("   %-46s %7.2f ms %7.1f GB/s\n", "cudaMemcpyAsync from pageable (driver staging)",
              driver, gbps(n, driver));
  for (std::size_t chunk : {256 * KiB, 4 * MiB}) {
    StagingBuffer staging(chunk);
    CUDA_CHECK(cudaMemsetAsync(device.data(), 0, n, stream));
    const double ours = time_upload(
        [&] { upload_via_staging(pageable.data(), device.data(), n, staging, stream); });
    const std::string label = "upload_via_staging, 2 x " + size_label(chunk) + " pinned slots";
    std::printf("   %-46s %7.2f ms %7.1f GB/s\n", label.c_str(), ours, gbps(n, ours));
  }
  std::vector<unsigned char> back(n);
  CUDA_CHECK(cudaMemcpy(back.data(), device.data(), n, cudaMemcpyDeviceToHost));
  check(std::memcmp(back.data(), pageable.data(), n) == 0,
        "upload_via_staging delivered every byte");
  const double direct = time_upload(
      [&] { copy_async(pinned.data(), device.data(), n, Direction::host_to_device, stream); });
  std::printf("   %-46s %7.2f ms %7.1f GB/s\n", "cudaMemcpyAsync from pinned (no staging)", direct,
              gbps(n, direct));
}

void section_zero_copy(const Options& o, const MemoryFacts& facts, cudaStream_t stream) {
  std::printf(
      "\n5. One preprocessing kernel (uint8 -> normalised float), five places for its input\n"
      "   (CUDA events, median of %d; GB/s = input bytes / time)\n",
      o.reps);
  const float scale = 1.0f / 255.0f, shift = 0.0f;
  struct Frame {
    const char* name;
    std::size_t bytes;
  };
  for (const Frame frame : {Frame{"640x640x3 (network input)", 640 * 640 * 3},
                            Frame{"3840x2160x3 (4K camera frame)", 3840 * 2160 * 3}}) {
    const std::size_t n = frame.bytes;
    std::printf("   %s, %.1f MB:\n", frame.name, n / 1e6);
    std::vector<std::uint8_t> pixels(n);
    fill_pattern(pixels.data(), n, 7);
    course::PinnedBuffer<std::uint8_t> pinned(n, cudaHostAllocMapped);
    std::copy(pixels.begin(), pixels.end(), pinned.begin());
    course::DeviceBuffer<std::uint8_t> d_in = upload(pixels, stream);
    course::DeviceBuffer<float> d_out(n);
    ManagedBuffer<std::uint8_t> managed(n);

    const auto report = [&](const char* how, double ms) {
      std::printf("     %-52s %8.3f ms %7.1f GB/s\n", how, ms, gbps(n, ms));
      CUDA_CHECK(cudaStreamSynchronize(stream));
      check(normalized_ok(course::to_host(d_out), pixels, scale, shift),
            std::string("result of: ") + how);
      CUDA_CHECK(cudaMemsetAsync(d_out.data(), 0xFF, d_out.bytes(), stream));
    };
    report("device memory (input already on the GPU)", gpu_ms(stream, o.reps, [&] {
             normalize_u8(d_in.data(), d_out.data(), n, scale, shift, stream);
           }));
    report("pinned -> cudaMemcpyAsync -> kernel", gpu_ms(stream, o.reps, [&] {
             CUDA_CHECK(
                 cudaMemcpyAsync(d_in.data(), pinned.data(), n, cudaMemcpyHostToDevice, stream));
             normalize_u8(d_in.data(), d_out.data(), n, scale, shift, stream);
           }));
    const auto* mapped = static_cast<const std::uint8_t*>(mapped_device_pointer(pinned.data()));
    report("zero-copy: kernel reads mapped pinned memory", gpu_ms(stream, o.reps, [&] {
             normalize_u8(mapped, d_out.data(), n, scale, shift, stream);
           }));
    // The host writes the frame into managed memory before every repetition (untimed), as a
    // camera callback would, so its pages start on the host each time.
    const auto host_writes_frame = [&] {
      CUDA_CHECK(cudaStreamSynchronize(stream));
      std::memcpy(managed.data(), pixels.data(), n);
    };
    report("managed, pages on the host: migrated on first touch",
           gpu_ms(stream, o.reps, host_writes_frame,
                  [&] { normalize_u8(managed.data(), d_out.data(), n, scale, shift, stream); }));
    if (facts.concurrent_managed_access) {
      report("managed, cudaMemPrefetchAsync to the GPU, then kernel",
             gpu_ms(stream, o.reps, host_writes_frame, [&] {
               prefetch_managed(managed.data(), n, 0, stream);
               normalize_u8(managed.data(), d_out.data(), n, scale, shift, stream);
             }));
    } else {
      std::printf(
          "     (no concurrent managed access on this system: prefetch is not available)\n");
    }
  }
}

void section_pitched(cudaStream_t stream) {
  std::printf(
      "\n6. Pitched device memory: an odd-width BGR image (cudaMallocPitch, cudaMemcpy2D)\n");
  const int w = 1919, h = 1079, c = 3;
  const std::size_t host_pitch =
      static_cast<std::size_t>(w) * c;  // tightly packed, as from a decoder
  std::vector<std::uint8_t> pixels(host_pitch * h);
  fill_pattern(pixels.data(), pixels.size(), 3);
  const HostImageView view{pixels.data(), w, h, c, host_pitch};
  PitchedImage image(host_pitch, h);
  std::printf(
      "   %dx%d x %d channels: %zu bytes per row, device pitch %zu bytes (%zu bytes of padding per "
      "row)\n",
      w, h, c, image.width_bytes(), image.pitch(), image.pitch() - image.width_bytes());
  upload_image(view, image, stream);
  brighten(image, 50, stream);
  std::vector<std::uint8_t> back(pixels.size());
  download_image(image, back.data(), host_pitch, stream);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  bool ok = true;
  for (std::size_t i = 0; i < pixels.size(); ++i)
    ok = ok && back[i] == std::min(255, pixels[i] + 50);
  check(ok, "upload -> brighten(+50) -> download equals the CPU result");

  const Roi roi{3, 5, 101, 37};
  const Copy2DPlan plan = plan_roi_copy(view, roi);
  std::printf(
      "   ROI %dx%d at (%d, %d): one cudaMemcpy2D from offset %zu, source pitch %zu, %zu bytes x "
      "%zu rows\n",
      roi.width, roi.height, roi.x, roi.y, plan.src_offset, plan.src_pitch, plan.width_bytes,
      plan.height);
  PitchedImage crop(plan.width_bytes, plan.height);
  upload_roi(view, roi, crop, stream);
  std::vector<std::uint8_t> crop_back(plan.width_bytes * plan.height);
  download_image(crop, crop_back.data(), plan.width_bytes, stream);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  ok = true;
  for (std::size_t y = 0; y < plan.height; ++y)
    for (std::size_t x = 0; x < plan.width_bytes; ++x)
      ok =
          ok && crop_back[y * plan.width_bytes + x] == pixels[plan.src_offset + y * host_pitch + x];
  check(ok, "the ROI on the GPU equals the ROI cut on the CPU");
}

void section_constant(const Options& o, cudaStream_t stream) {
  std::printf("\n7. Constant memory: a letterbox's 2x3 affine matrix in __constant__, 1M points\n");
  const std::size_t n = 1 << 20;
  std::vector<Point2f> points(n);
  for (std::size_t i = 0; i < n; ++i)
    points[i] = {static_cast<float>(i % 1920), static_cast<float>(i / 1920)};
  const auto d_in = upload(points, stream);
  course::DeviceBuffer<Point2f> d_out(n);
  // 1920x1080 into 640x640: s = 1/3, centred vertically with (640 - 360) / 2 = 140 rows of padding.
  const Affine2x3 letterbox{{1.0f / 3.0f, 0.0f, 0.0f, 0.0f, 1.0f / 3.0f, 140.0f}};
  set_affine(letterbox, stream);
  const double ms =
      gpu_ms(stream, o.reps, [&] { transform_points(d_in.data(), d_out.data(), n, stream); });
  const auto got = course::to_host(d_out);
  double worst = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    const double x = points[i].x, y = points[i].y;
    worst = std::max(worst, std::abs(got[i].x - (letterbox.m[0] * x + letterbox.m[2])));
    worst = std::max(worst, std::abs(got[i].y - (letterbox.m[4] * y + letterbox.m[5])));
  }
  std::printf(
      "   transform_points: %.3f ms; largest difference from a double-precision CPU result: %.2g\n",
      ms, worst);
  check(worst < 1e-4, "transformed points match the CPU within 1e-4");
}

void section_transpose(const Options& o, cudaStream_t stream) {
  const int n = o.transpose_n;
  const std::size_t count = static_cast<std::size_t>(n) * n, bytes = count * sizeof(float);
  std::printf(
      "\n8. Shared memory: transposing a %dx%d float matrix (%s; GB/s counts bytes read + "
      "written)\n",
      n, n, size_label(bytes).c_str());
  std::vector<float> in(count), expected(count);
  for (std::size_t i = 0; i < count; ++i) in[i] = static_cast<float>(i % 1000003);
  transpose_cpu(in.data(), expected.data(), n, n);
  const auto d_in = upload(in, stream);
  course::DeviceBuffer<float> d_out(count);
  const double copy_ms = gpu_ms(stream, o.reps, [&] {
    CUDA_CHECK(cudaMemcpyAsync(d_out.data(), d_in.data(), bytes, cudaMemcpyDeviceToDevice, stream));
  });
  const double copy_gbps = gbps(2.0 * bytes, copy_ms);
  std::printf("   %-42s %-12s %8s %8s %9s\n", "version", "bank ways", "ms", "GB/s", "% of copy");
  std::printf("   %-42s %-12s %8.3f %8.1f %8.1f%%\n", "cudaMemcpy device-to-device (the ceiling)",
              "-", copy_ms, copy_gbps, 100.0);
  const auto run = [&](const std::string& name, int stride, auto&& launch) {
    CUDA_CHECK(cudaMemsetAsync(d_out.data(), 0xFF, bytes, stream));
    const double ms =
        gpu_ms(stream, o.reps, [&] { launch(d_in.data(), d_out.data(), n, n, stream); });
    const std::string ways = stride > 0 ? std::to_string(bank_conflict_ways(stride)) + "-way" : "-";
    std::printf("   %-42s %-12s %8.3f %8.1f %8.1f%%\n", name.c_str(), ways.c_str(), ms,
                gbps(2.0 * bytes, ms), 100.0 * gbps(2.0 * bytes, ms) / copy_gbps);
    check(course::to_host(d_out) == expected, name + " equals the CPU transpose");
  };
  run("v0_naive (strided writes)", 0, transpose_v0_naive);
  run("v1_shared_tile [32][32]", kTileDim, transpose_v1_shared_tile);
  run("v2_padded [32][33]", kTileDim + 1, transpose_v2_padded);
  for (int pad : {0, 1, 2, 4, 8, 16}) {
    run("v3_dynamic_smem, rows of 32+" + std::to_string(pad) + " floats", kTileDim + pad,
        [pad](const float* in_, float* out_, int r, int c, cudaStream_t s) {
          transpose_v3_dynamic_smem(in_, out_, r, c, pad, s);
        });
  }
}

void section_allocators(const Options& o, const MemoryFacts& facts, cudaStream_t stream) {
  std::printf(
      "\n9. Per-frame scratch memory: allocate, memset, free, synchronise (host wall clock per "
      "frame)\n");
  if (!facts.memory_pools_supported) {
    std::printf("   (this device does not support cudaMallocAsync)\n");
    return;
  }
  MemPool retaining(0, std::numeric_limits<std::uint64_t>::max());
  const int frames = 20 * o.reps;
  std::printf("   %-36s %12s %12s\n", "strategy", "1 MiB", "64 MiB");
  for (AllocStrategy s : {AllocStrategy::cuda_malloc, AllocStrategy::async_default_pool,
                          AllocStrategy::async_retaining_pool}) {
    std::printf("   %-36s", to_string(s));
    for (std::size_t bytes : {1 * MiB, 64 * MiB}) {
      const double ms = host_ms(frames, [&] { alloc_use_free(s, bytes, stream, &retaining); });
      std::printf(" %9.1f us", ms * 1e3);
    }
    std::printf("\n");
  }
  std::printf(
      "   the retaining pool holds %s after the last frame (release threshold: unlimited)\n",
      size_label(retaining.reserved_bytes()).c_str());
  check(retaining.reserved_bytes() >= 64 * MiB,
        "the retaining pool kept its memory across synchronisations");
}

void section_pointers(cudaStream_t stream) {
  std::printf(
      "\n10. What is this pointer? cudaPointerGetAttributes (and cudaHostGetFlags for "
      "cudaHostAlloc memory)\n");
  std::printf("   %-40s %-12s %-7s %-26s %s\n", "allocated with", "kind", "device",
              "device address", "cudaHostAlloc flags");
  std::vector<float> vec(256);
  HostAllocation pinned(HostKind::pinned, 1024), wc(HostKind::write_combined, 1024),
      registered(HostKind::registered, 1024);
  course::PinnedBuffer<float> mapped(256, cudaHostAllocMapped | cudaHostAllocPortable);
  course::DeviceBuffer<float> device(256);
  PitchedImage pitched(1919 * 3, 4);
  AsyncDeviceBuffer<float> async(256, stream);
  ManagedBuffer<float> managed(256);
  struct Row {
    const char* what;
    const void* ptr;
    bool from_host_alloc;
  };
  const Row rows[] = {
      {"std::vector (malloc)", vec.data(), false},
      {"cudaHostAlloc(Default)", pinned.data(), true},
      {"cudaHostAlloc(WriteCombined)", wc.data(), true},
      {"cudaHostAlloc(Mapped | Portable)", mapped.data(), true},
      {"aligned_alloc + cudaHostRegister", registered.data(), false},
      {"cudaMalloc", device.data(), false},
      {"cudaMallocPitch", pitched.data(), false},
      {"cudaMallocAsync", async.data(), false},
      {"cudaMallocManaged", managed.data(), false},
      {"__constant__ (cudaGetSymbolAddress)", affine_symbol_address(), false},
  };
  const MemoryKind expected[] = {MemoryKind::pageable,    MemoryKind::pinned_host,
                                 MemoryKind::pinned_host, MemoryKind::pinned_host,
                                 MemoryKind::pinned_host, MemoryKind::device,
                                 MemoryKind::device,      MemoryKind::device,
                                 MemoryKind::managed,     MemoryKind::device};
  bool all = true;
  for (std::size_t i = 0; i < std::size(rows); ++i) {
    const PointerInfo info = classify_pointer(rows[i].ptr);
    const char* address = info.device_pointer == nullptr       ? "none: host only"
                          : info.device_pointer == rows[i].ptr ? "the pointer itself"
                                                               : "a different address";
    const std::string flags =
        rows[i].from_host_alloc
            ? describe_host_alloc_flags(host_alloc_flags(const_cast<void*>(rows[i].ptr)))
            : "";
    const std::string dev = info.kind == MemoryKind::pageable ? "-" : std::to_string(info.device);
    std::printf("   %-40s %-12s %-7s %-26s %s\n", rows[i].what, to_string(info.kind), dev.c_str(),
                address, flags.c_str());
    all = all && info.kind == expected[i];
  }
  check(all, "every allocation classified as the kind it was allocated as");
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  CLI::App app{
      "Lesson 02: memory types.\n"
      "Measures the memory types of the CUDA runtime on GPU 0 and checks every result."};
  app.add_option("--reps", options.reps,
                 "timed repetitions per measurement, median printed (default 5)")
      ->type_name("N")
      ->check(course::integer_in(1, 1000));
  app.add_option("--max-mib", options.max_mib,
                 "largest host<->device copy in the bandwidth table, MiB (default 64)")
      ->type_name("N")
      ->check(course::integer_in(1, 1024));
  app.add_option("--transpose", options.transpose_n,
                 "size of the N x N float matrix the transposes work on (default 4096)")
      ->type_name("N")
      ->check(course::integer_in(1, 16384));
  app.footer("The full sweeps (4 KiB .. 256 MiB) are in lesson02_bench: make bench LESSON=02");
  return course::lesson_main(app, argc, argv, [&] {
    std::printf("Lesson 02: memory types. Every number below was measured just now on GPU 0.\n");
    const course::DeviceInfo info = course::query_device(0);
    const MemoryFacts facts = query_memory_facts(0);
    course::Stream stream;
    section_device(info, facts);
    section_transfers(options, stream);
    section_write_combined(options);
    section_staging(options, stream);
    section_zero_copy(options, facts, stream);
    section_pitched(stream);
    section_constant(options, stream);
    section_transpose(options, stream);
    section_allocators(options, facts, stream);
    section_pointers(stream);
    if (g_failed_checks > 0) {
      std::printf("\n%d check(s) FAILED\n", g_failed_checks);
      return 1;
    }
    std::printf("\nAll checks passed.\n");
    course::print_headline();
    return 0;
  });
}
