// Lesson 10: tensor-core GEMM in FP16 / BF16, WMMA to Hopper's TMA + wgmma, measured on this GPU.
//
//   lesson10 [--size S | --m M --n N --k K] [--version V]... [--reps R] [--help]
//
// 1. The version table at one shape (default 4096^3), FP16 in and out, FP32 accumulation:
//    cuBLAS (cublasGemmEx, CUBLAS_COMPUTE_32F) first, then each version, then the CUTLASS 3.x
//    baseline (cutlass_gemm.cuh) where the build has it; every element of every result is
//    checked against cuBLAS; time, TFLOP/s, % of cuBLAS, % of the FP16 tensor peak.
// 2. BF16: the best versions (and CUTLASS) against cuBLAS in BF16.
// 3. The fused bias + GELU epilogue of the fastest version against cuBLASLt's
//    (CUBLASLT_EPILOGUE_GELU_BIAS).
// 4. A small sweep of inference shapes (fully connected layer at batch 1..32, 1x1 convolution):
//    cuBLAS, the fastest version of table 1 and v8, the split-K kernel written for them.
// The full sweep and the statistics: make bench LESSON=10.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "common/cuda_check.hpp"
#include "common/device.hpp"
#include "common/headline.hpp"
#include "common/lesson_main.hpp"
#include "common/memory.hpp"
#include "common/stream.hpp"
#include "common/timing.hpp"
#include "ceiling.cuh"
#include "cutlass_gemm.cuh"
#include "tensor_gemm.cuh"

using namespace lesson10;

namespace {

struct Options {
  int M = 4096, N = 4096, K = 4096;  // the shape of the version table
  int reps = 5;                      // timed runs per kernel
  double sustained_ms = 100.0;       // GPU time per sustained sample
  int sustained_pairs = 5;           // sustained samples per kernel
  std::vector<int> versions;         // empty: all
};

// The median GPU time of `reps` runs after one warm-up (common/timing.hpp's measure).
template <class F>
double median_ms(cudaStream_t stream, int reps, F&& enqueue) {
  return course::measure(stream, reps, enqueue, course::L2::warm, false).gpu_ms;
}

float host_float(__half v) {
  return __half2float(v);
}
float host_float(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

// One shape's operands and what a result is checked against: cuBLAS's C (FP32 output) and
// sum_k |a||b| per element (cuBLAS of |A| |B|), the scale of the rounding error.
template <class In>
struct Problem {
  int M, N, K;
  course::DeviceBuffer<In> A, B;
  course::DeviceBuffer<float> bias, expected, abs_sum;
  Problem(const Blas& blas, int m, int n, int k, cudaStream_t s)
      : M(m),
        N(n),
        K(k),
        A(std::size_t{1} * m * k),
        B(std::size_t{1} * k * n),
        bias(n),
        expected(std::size_t{1} * m * n),
        abs_sum(std::size_t{1} * m * n) {
    fill_uniform(A.data(), A.size(), 1, -1.0f, 1.0f, s);
    fill_uniform(B.data(), B.size(), 2, -1.0f, 1.0f, s);
    fill_uniform(bias.data(), bias.size(), 3, -1.0f, 1.0f, s);
    cublas_gemm(blas, M, N, K, 1.0f, A.data(), B.data(), 0.0f, expected.data(), s);
    const auto absolute = [&](const course::DeviceBuffer<In>& d) {
      std::vector<In> h = course::to_host(d);
      for (In& v : h) v = In(std::fabs(host_float(v)));
      return course::to_device(h);
    };
    CUDA_CHECK(cudaStreamSynchronize(s));
    const course::DeviceBuffer<In> absA = absolute(A), absB = absolute(B);
    cublas_gemm(blas, M, N, K, 1.0f, absA.data(), absB.data(), 0.0f, abs_sum.data(), s);
    CUDA_CHECK(cudaStreamSynchronize(s));
  }
};

// Every element of `got` (type Out) vs cuBLAS: both within the bound of the exact product, so
// within the sum of the two bounds of each other (output rounding counted on both sides).
template <class In, class Out>
std::size_t count_bad(const Problem<In>& p, const course::DeviceBuffer<Out>& got) {
  const std::vector<Out> g = course::to_host(got);
  const std::vector<float> e = course::to_host(p.expected), s = course::to_host(p.abs_sum);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double v = static_cast<double>(static_cast<float>(g[i]));
    const double tol = 2.0 * tensor_gemm_error_bound(p.K, 1.0, 1.001 * s[i], 0.0, 0.0, 0.0,
                                                     Activation::none, dtype_of<Out>(), e[i]);
    if (!(std::fabs(v - e[i]) <= tol)) ++bad;
  }
  return bad;
}

// One checked run of `call` writing C (every element vs cuBLAS), then its median time.
struct Measured {
  double ms;
  std::size_t bad;
};
template <class In, class F>
Measured run_checked(F&& call, const Problem<In>& p, course::DeviceBuffer<In>& C, int reps,
                     cudaStream_t s) {
  CUDA_CHECK(cudaMemsetAsync(C.data(), 0, C.bytes(), s));
  call();
  CUDA_CHECK(cudaStreamSynchronize(s));
  const std::size_t bad = count_bad(p, C);
  return {median_ms(s, reps, call), bad};
}
template <class In>
Measured run_checked(int v, const Problem<In>& p, course::DeviceBuffer<In>& C, int reps,
                     cudaStream_t s) {
  return run_checked(
      [&] {
        tensor_gemm(v, p.M, p.N, p.K, 1.0f, p.A.data(), p.B.data(), 0.0f, C.data(), nullptr,
                    Activation::none, s);
      },
      p, C, reps, s);
}

// Sustained speed: what a GEMM runs at once the GPU has reached its power limit, which the
// short table above (a few launches, each alone) does not. Each sample launches the kernel back
// to back between two events for at least `sample_ms` of GPU time (the launch latency of the
// first launch is then below 0.01% of it), and reads the SM clock through NVML while the sample
// runs; cuBLAS and each of ours take turns, `pairs` samples each, so drift in clock or
// temperature hits both alike. Medians of the per-launch times and of the clocks.
struct SustainedRow {
  double ms = 0.0;      // median per-launch GPU time
  unsigned sm_mhz = 0;  // median SM clock read during the samples (0: NVML unavailable)
};
struct SustainedKernel {
  const char* name;
  std::function<void()> enqueue;
  int launches = 1;  // per sample, from a short probe
  std::vector<double> ms;
  std::vector<double> mhz;
};
std::vector<SustainedRow> sustained(std::vector<SustainedKernel>& ks, double sample_ms, int pairs,
                                    cudaStream_t s) {
  for (SustainedKernel& k : ks) {
    const double probe = median_ms(s, 3, k.enqueue);
    k.launches = std::max(1, static_cast<int>(std::ceil(sample_ms / std::max(probe, 1e-3))));
  }
  for (int r = 0; r < pairs; ++r) {
    for (SustainedKernel& k : ks) {
      course::Event start, stop;
      start.record(s);
      for (int i = 0; i < k.launches; ++i) k.enqueue();
      stop.record(s);
      // The host returns from enqueuing long before the GPU finishes: read the clock mid-run.
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(sample_ms / 2));
      const course::GpuClocks c = course::read_gpu_clocks(0);
      k.ms.push_back(course::elapsed_ms(start, stop) / k.launches);
      if (c.available) k.mhz.push_back(c.sm_mhz);
    }
  }
  std::vector<SustainedRow> rows;
  for (const SustainedKernel& k : ks)
    rows.push_back(
        {course::median(k.ms), k.mhz.empty() ? 0u : static_cast<unsigned>(course::median(k.mhz))});
  return rows;
}

void print_header() {
  std::printf("  %-22s %9s %9s %9s %8s   %s\n", "version", "ms", "TFLOP/s", "%cuBLAS", "%peak",
              "check (every element vs cuBLAS)");
}
void print_row(const char* name, double ms, double flops, double cublas_tflops, double peak,
               const std::string& check) {
  const double tflops = flops / (ms / 1e3) / 1e12;
  std::printf("  %-22s %9.3f %9.1f %8.1f%% %7.1f%%   %s\n", name, ms, tflops,
              cublas_tflops > 0 ? 100.0 * tflops / cublas_tflops : 0.0, 100.0 * tflops / peak,
              check.c_str());
}

// The CUTLASS 3.x baseline's row (cutlass_gemm.cuh: CUTLASS's CollectiveBuilder, TMA
// warp-specialized cooperative, v6's 128x256x64 tile), checked and timed like a version. A build
// without it says so once, in the FP16 table, with how to get it.
template <class In>
void cutlass_row(const Problem<In>& p, course::DeviceBuffer<In>& C, int reps, double cublas_tflops,
                 double peak, cudaStream_t s) {
  const char* name = "CUTLASS 3.x 128x256x64";
  std::string why;
  if (!cutlass_gemm_supported(&why)) {
    if (cutlass_gemm_built())
      std::printf("  %-22s not supported on this GPU: %s\n", name, why.c_str());
    else if (std::is_same<In, __half>::value)
      std::printf("  %-22s not built: %s\n", name, why.c_str());
    return;
  }
  if (p.K % 8 != 0 || p.N % 8 != 0) {
    std::printf("  %-22s skipped: needs K and N multiples of 8\n", name);
    return;
  }
  const Measured r = run_checked(
      [&] { cutlass_gemm(p.M, p.N, p.K, 1.0f, p.A.data(), p.B.data(), 0.0f, C.data(), s); }, p, C,
      reps, s);
  print_row(name, r.ms, gemm_flops(p.M, p.N, p.K), cublas_tflops, peak,
            (r.bad == 0 ? std::string("ok") : "FAILED (" + std::to_string(r.bad) + " elements)") +
                " (CollectiveBuilder, TMA warp-specialized cooperative, cluster 1x1x1)");
}

// The table of versions at one shape; returns the TFLOP/s of each version that ran (0 otherwise).
template <class In>
std::vector<double> version_table(const Blas& blas, const Options& opt, const std::vector<int>& vs,
                                  double peak, cudaStream_t s, double* cublas_out) {
  Problem<In> p(blas, opt.M, opt.N, opt.K, s);
  const double flops = gemm_flops(p.M, p.N, p.K);
  course::DeviceBuffer<In> C(std::size_t{1} * p.M * p.N);
  print_header();
  const double cublas_ms = median_ms(s, opt.reps, [&] {
    cublas_gemm(blas, p.M, p.N, p.K, 1.0f, p.A.data(), p.B.data(), 0.0f, C.data(), s);
  });
  const double cublas_tflops = flops / (cublas_ms / 1e3) / 1e12;
  print_row("cublasGemmEx", cublas_ms, flops, cublas_tflops, peak, "(the oracle's source)");
  *cublas_out = cublas_tflops;
  std::vector<double> tflops(versions().size() + 1, 0.0);
  for (const int v : vs) {
    const VersionInfo& info = version_info(v);
    std::string why;
    if (!version_supported(v, dtype_of<In>(), &why)) {
      std::printf("  %-22s not supported on this GPU: %s\n", info.name, why.c_str());
      continue;
    }
    if (v >= 2 && (p.K % 8 != 0 || p.N % 8 != 0)) {
      std::printf("  %-22s skipped: needs K and N multiples of 8\n", info.name);
      continue;
    }
    const Measured r = run_checked(v, p, C, opt.reps, s);
    print_row(info.name, r.ms, flops, cublas_tflops, peak,
              r.bad == 0 ? "ok" : "FAILED (" + std::to_string(r.bad) + " elements)");
    tflops[v] = r.bad == 0 ? flops / (r.ms / 1e3) / 1e12 : 0.0;
  }
  cutlass_row(p, C, opt.reps, cublas_tflops, peak, s);
  return tflops;
}

int run(const Options& opt) {
  std::printf("Lesson 10: tensor-core GEMM in FP16 and BF16\n");
  std::printf("============================================\n");
  const course::DeviceInfo dev = course::query_device(0);
  std::printf("%s\n", course::summary(dev).c_str());
  const TensorPeak peak = tensor_peak(0);
  std::printf(
      "Dense FP16 tensor peak (FP32 accumulate): %d SMs x %d FLOP/clock/SM x %.0f MHz (the max "
      "boost clock) = %.1f TFLOP/s\n(FLOP/clock/SM per architecture from NVIDIA's whitepapers: "
      "tensor_gemm.cuh, fp16_flops_per_clock_per_sm)\n",
      peak.sm_count, peak.flops_per_clock_per_sm, peak.clock_khz / 1e3, peak.tflops);
  std::vector<int> vs = opt.versions;
  if (vs.empty())
    for (const VersionInfo& v : versions()) vs.push_back(v.number);

  course::Stream stream;
  const Blas blas;
  std::printf(
      "\n1. FP16 A, B and C, FP32 accumulation: C(%dx%d) = A(%dx%d) B(%dx%d), %.1f GFLOP.\n"
      "   Median GPU time of %d runs; every element checked against cuBLAS within the sum "
      "of both error bounds.\n",
      opt.M, opt.N, opt.M, opt.K, opt.K, opt.N, gemm_flops(opt.M, opt.N, opt.K) / 1e9, opt.reps);
  std::printf("   %s\n", course::harness_floor_caption(stream).c_str());
  double cublas16 = 0.0;
  const std::vector<double> t16 =
      version_table<__half>(blas, opt, vs, peak.tflops, stream, &cublas16);
  if (t16[9] > 0) {
    const int clusters = v9_active_clusters();
    std::printf(
        "   v9 runs %d clusters of 2 blocks at once: %d of the %d SMs (one block per SM; a "
        "cluster's two on one GPC).\n",
        clusters, 2 * clusters, peak.sm_count);
  }
  int best = 0;
  for (const VersionInfo& info : versions())
    if (t16[info.number] > 0 && (best == 0 || t16[info.number] > t16[best])) best = info.number;

  // 1b. The same kernels sustained: the headline comes from here.
  if (best > 0) {
    Problem<__half> p(blas, opt.M, opt.N, opt.K, stream);
    course::DeviceBuffer<__half> C(std::size_t{1} * p.M * p.N);
    const double flops = gemm_flops(p.M, p.N, p.K);
    std::vector<SustainedKernel> ks;
    ks.push_back({"cublasGemmEx", [&] {
                    cublas_gemm(blas, p.M, p.N, p.K, 1.0f, p.A.data(), p.B.data(), 0.0f, C.data(),
                                stream);
                  }});
    std::vector<int> ours;
    for (const int v : {best, 4})
      if (t16[v] > 0 && std::find(ours.begin(), ours.end(), v) == ours.end()) ours.push_back(v);
    for (const int v : ours)
      ks.push_back({version_info(v).name, [&, v] {
                      tensor_gemm(v, p.M, p.N, p.K, 1.0f, p.A.data(), p.B.data(), 0.0f, C.data(),
                                  nullptr, Activation::none, stream);
                    }});
    std::printf(
        "\n1b. Sustained, FP16: cuBLAS and ours take turns, %d samples each of >= %.0f ms "
        "of back-to-back launches (the GPU at its power limit); medians per launch, SM "
        "clock read by NVML during each sample.\n",
        opt.sustained_pairs, opt.sustained_ms);
    const std::vector<SustainedRow> rows =
        sustained(ks, opt.sustained_ms, opt.sustained_pairs, stream);
    std::printf("  %-22s %9s %9s %9s %8s %9s %9s\n", "version", "ms", "TFLOP/s", "%cuBLAS", "%peak",
                "SM MHz", "launches");
    const double cb = flops / (rows[0].ms / 1e3) / 1e12;
    std::vector<double> tf(rows.size());
    for (std::size_t i = 0; i < rows.size(); ++i) {
      tf[i] = flops / (rows[i].ms / 1e3) / 1e12;
      std::printf("  %-22s %9.3f %9.1f %8.1f%% %7.1f%% %9u %9d\n", ks[i].name, rows[i].ms, tf[i],
                  100.0 * tf[i] / cb, 100.0 * tf[i] / peak.tflops, rows[i].sm_mhz, ks[i].launches);
    }
    course::add_headline("FP16 %dx%dx%d sustained: v%d %.0f TFLOP/s, %.0f%% of cuBLAS (%.0f)",
                         opt.M, opt.N, opt.K, ours[0], tf[1], 100.0 * tf[1] / cb, cb);
    if (ours.size() > 1)
      course::add_headline("v4 (mma.sync + cp.async) %.0f%%", 100.0 * tf[2] / cb);

    // 1c. The instructions' own ceilings (ceiling.cuh): each kernel of 1b against the ceiling of
    // the instruction it issues, per clock (the clocks differ: the power limit sets them).
    std::printf(
        "\n1c. The tensor cores' ceilings, FP16: one instruction back to back from registers "
        "(mma.sync) or one\n   shared-memory tile (wgmma), every SM, 0.25 s each; FLOP per "
        "clock per SM at the SM clock read after.\n");
    std::printf("  %-22s %9s %9s %14s\n", "ceiling", "TFLOP/s", "SM MHz", "FLOP/clk/SM");
    double mma_per_clock = 0.0, wgmma_per_clock = 0.0;
    for (const bool hopper : {false, true}) {
      const char* name = hopper ? "wgmma m64n256k16" : "mma.sync m16n8k16";
      try {
        const Ceiling c = hopper ? wgmma_ceiling(DType::f16) : mma_sync_ceiling(DType::f16);
        std::printf("  %-22s %9.1f %9u %14.0f\n", name, c.tflops, c.sm_mhz,
                    c.flops_per_clock_per_sm);
        (hopper ? wgmma_per_clock : mma_per_clock) = c.flops_per_clock_per_sm;
      } catch (const NotSupported& e) {
        std::printf("  %-22s not supported on this GPU: %s\n", name, e.what());
      }
    }
    for (std::size_t i = 1; i < rows.size(); ++i) {
      const int v = ours[i - 1];
      const double ceiling = v >= kHopperVersion ? wgmma_per_clock : mma_per_clock;
      if (rows[i].sm_mhz == 0 || ceiling <= 0) continue;
      const double per_clock = tf[i] * 1e12 / (peak.sm_count * rows[i].sm_mhz * 1e6);
      std::printf("  %s (1b): %.0f FLOP/clk/SM = %.1f%% of the %s ceiling\n", ks[i].name, per_clock,
                  100.0 * per_clock / ceiling, v >= kHopperVersion ? "wgmma" : "mma.sync");
      if (v == 4)
        course::add_headline("v4 %.0f%% of the mma.sync ceiling", 100.0 * per_clock / ceiling);
    }
    if (mma_per_clock > 0 && wgmma_per_clock > 0)
      std::printf("  mma.sync's ceiling is %.0f%% of wgmma's, per clock.\n",
                  100.0 * mma_per_clock / wgmma_per_clock);
  }

  std::printf("\n2. The same in BF16 (the best versions).\n");
  std::vector<int> bf;
  for (int v : vs)
    if (v >= 4) bf.push_back(v);
  double cublas_bf = 0.0;
  version_table<__nv_bfloat16>(blas, opt, bf, peak.tflops, stream, &cublas_bf);

  // 3. Fused bias + GELU: ours in the write-out of the fastest version of table 1 (v1 has no
  // fused epilogue) vs cuBLASLt's epilogue.
  const int fused = best >= 2 ? best : 0;
  if (fused > 0 && opt.N % 8 == 0 && opt.K % 8 == 0) {
    std::printf(
        "\n3. C = GELU(A B + bias), FP16, fused into the write-out (v%d) vs cuBLASLt's "
        "GELU_BIAS epilogue.\n",
        fused);
    Problem<__half> p(blas, opt.M, opt.N, opt.K, stream);
    course::DeviceBuffer<__half> C(std::size_t{1} * p.M * p.N);
    const double flops = gemm_flops(p.M, p.N, p.K);
    const double lt_ms = median_ms(stream, opt.reps, [&] {
      cublaslt_gemm(blas, p.M, p.N, p.K, 1.0f, p.A.data(), p.B.data(), 0.0f, C.data(),
                    p.bias.data(), Activation::gelu, stream);
    });
    const double ours_ms = median_ms(stream, opt.reps, [&] {
      tensor_gemm(fused, p.M, p.N, p.K, 1.0f, p.A.data(), p.B.data(), 0.0f, C.data(), p.bias.data(),
                  Activation::gelu, stream);
    });
    const double lt_tflops = flops / (lt_ms / 1e3) / 1e12;
    print_header();
    print_row("cublasLt bias+GELU", lt_ms, flops, lt_tflops, peak.tflops, "(timing only)");
    print_row(version_info(fused).name, ours_ms, flops, lt_tflops, peak.tflops,
              "(timing only; % is of cuBLASLt; values: the [gpu] tests)");
  }

  // 4. Inference shapes: a fully connected layer 4096 -> 4096 at batch 1..32 (M = batch), and a
  // 1x1 convolution as GEMM (batch 8 of 56x56 pixels: M = 25088, 256 -> 256 channels). The FC
  // rows are memory-bound: a network's layer reads its weights from DRAM, not from an L2 that
  // the previous call left warm, so the L2 is flushed before every sample, and the rows give
  // GB/s (A, B and C, each read or written once: the bytes a perfect kernel moves) against the
  // device-to-device copy measured here. Timed: cuBLAS, the fastest version of table 1, and v8
  // (split-K, the kernel for these shapes) when it was asked for and this GPU runs it.
  if (best > 0) {
    constexpr std::size_t copy_bytes = std::size_t{1} << 30;
    double copy_gbps = 0.0;
    {
      course::DeviceBuffer<char> src(copy_bytes), dst(copy_bytes);
      CUDA_CHECK(cudaMemsetAsync(src.data(), 1, copy_bytes, stream));
      const double ms = median_ms(stream, opt.reps, [&] {
        CUDA_CHECK(
            cudaMemcpyAsync(dst.data(), src.data(), copy_bytes, cudaMemcpyDeviceToDevice, stream));
      });
      copy_gbps = 2.0 * copy_bytes / (ms / 1e3) / 1e9;
    }
    std::vector<int> ours = {best};
    constexpr int kSplitK = 8;
    if (best != kSplitK && std::find(vs.begin(), vs.end(), kSplitK) != vs.end() &&
        version_supported(kSplitK, DType::f16))
      ours.push_back(kSplitK);
    std::printf(
        "\n4. Inference shapes, FP16, cuBLAS, v%d (the fastest above)%s (the full sweep: make "
        "bench), L2 flushed\n   before every sample. GB/s: A, B and C once each, per GPU time; "
        "%%copy: of a 1 GiB cudaMemcpy device to\n   device, %.0f GB/s (bytes read + written), "
        "measured now.\n",
        best, ours.size() > 1 ? " and v8 (split-K)" : "", copy_gbps);
    std::printf("  %-26s %-20s %10s %9s %9s %7s\n", "shape (M x N x K)", "kernel", "us", "%cuBLAS",
                "GB/s", "%copy");
    struct Shape {
      const char* what;
      int M, N, K;
    };
    const Shape shapes[] = {{"FC batch 1", 1, 4096, 4096},
                            {"FC batch 8", 8, 4096, 4096},
                            {"FC batch 32", 32, 4096, 4096},
                            {"1x1 conv 56x56x8", 25088, 256, 256}};
    for (const Shape& sh : shapes) {
      Problem<__half> p(blas, sh.M, sh.N, sh.K, stream);
      course::DeviceBuffer<__half> C(std::size_t{1} * p.M * p.N);
      const auto flushed = [&](auto&& f) {
        return course::measure(stream, opt.reps, f, course::L2::flushed, false).gpu_ms;
      };
      const double bytes = 2.0 * (double(sh.M) * sh.K + double(sh.K) * sh.N + double(sh.M) * sh.N);
      char label[64];
      std::snprintf(label, sizeof label, "%s %dx%dx%d", sh.what, sh.M, sh.N, sh.K);
      const auto print = [&](const char* shape, const char* kernel, double ms, double cb_ms,
                             const char* note) {
        const double gbps = bytes / (ms / 1e3) / 1e9;
        std::printf("  %-26s %-20s %10.1f %8.1f%% %9.0f %6.1f%%%s\n", shape, kernel, ms * 1e3,
                    100.0 * cb_ms / ms, gbps, 100.0 * gbps / copy_gbps, note);
      };
      const double cb = flushed([&] {
        cublas_gemm(blas, p.M, p.N, p.K, 1.0f, p.A.data(), p.B.data(), 0.0f, C.data(), stream);
      });
      print(label, "cublasGemmEx", cb, cb, "");
      for (const int v : ours) {
        const auto call = [&] {
          tensor_gemm(v, p.M, p.N, p.K, 1.0f, p.A.data(), p.B.data(), 0.0f, C.data(), nullptr,
                      Activation::none, stream);
        };
        CUDA_CHECK(cudaMemsetAsync(C.data(), 0, C.bytes(), stream));
        call();  // checked first (and v8's first call on this stream allocates its workspace)
        CUDA_CHECK(cudaStreamSynchronize(stream));
        const std::size_t bad = count_bad(p, C);
        print("", version_info(v).name, flushed(call), cb, bad == 0 ? "" : "  FAILED check");
      }
    }
  }
  course::print_headline();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  CLI::App app{
      "Lesson 10: tensor-core GEMM in FP16/BF16, WMMA to Hopper's TMA + wgmma.\n"
      "Runs cuBLAS and each version, checks every result, prints time, TFLOP/s, % of cuBLAS\n"
      "and % of the FP16 tensor peak; then BF16, the fused bias + GELU epilogue and inference "
      "shapes."};
  // Sizes apply in command-line order (trigger_on_parse): a later --m overrides an earlier --size.
  struct SizeOption {
    const char* name;
    const char* help;
    std::vector<int*> targets;
  };
  const SizeOption sizes[] = {
      {"--size", "M = N = K = S (default 4096)", {&opt.M, &opt.N, &opt.K}},
      {"--m", "M alone (any value >= 1)", {&opt.M}},
      {"--n", "N alone (v2..v11 need a multiple of 8)", {&opt.N}},
      {"--k", "K alone (v2..v11 need a multiple of 8)", {&opt.K}},
  };
  for (const SizeOption& so : sizes) {
    const std::vector<int*> targets = so.targets;
    app.add_option_function<int>(
           so.name,
           [targets](const int& v) {
             for (int* t : targets) *t = v;
           },
           so.help)
        ->type_name("INT")
        ->check(course::integer_in(1, 1 << 16))
        ->trigger_on_parse();
  }
  app.add_option("--version", opt.versions, "run version V only (repeat for several); default: all")
      ->type_name("V")
      ->check(course::integer_in(1, static_cast<long long>(versions().size())))
      ->allow_extra_args(false);
  app.add_option("--reps", opt.reps, "timed runs per kernel, median reported (default 5)")
      ->type_name("R")
      ->check(course::integer_in(1, 1000));
  app.add_option("--sustained-ms", opt.sustained_ms,
                 "GPU time of one sustained sample, milliseconds (default 100)")
      ->type_name("MS")
      ->check(CLI::Range(1.0, 2000.0));
  app.add_option("--sustained-samples", opt.sustained_pairs,
                 "sustained samples per kernel, taken in turns with cuBLAS (default 5)")
      ->type_name("N")
      ->check(course::integer_in(1, 100));
  std::string footer = "Versions:";
  int width = 0;
  for (const VersionInfo& v : versions())
    width = std::max(width, static_cast<int>(std::string(v.name).size()));
  for (const VersionInfo& v : versions()) {
    char line[256];
    std::snprintf(line, sizeof line, "\n  %d  %-*s %s", v.number, width, v.name, v.idea);
    footer += line;
  }
  app.footer(footer);
  return course::lesson_main(app, argc, argv, [&] { return run(opt); });
}
