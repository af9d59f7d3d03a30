// Lesson 10 benchmark: every version and the cuBLAS baselines in one run (make bench LESSON=10).
//
//   all_versions_4096/<name>     FP16 in and out, FP32 accumulation, 4096^3: cuBLAS, v1..v7,
//                                v9..v11, and v4 with its other tiles (gemm_v4_tile): 128x128 with
//                                K tiles of 32 (v4 as first written), 128x256 (K 32), the tuned
//                                3-stage; and cutlass_fp16, the CUTLASS 3.x baseline
//                                (cutlass_gemm.cuh), in builds that have it
//   bf16_4096/<name>             the same in BF16: cuBLAS, v4..v7, v9..v11 (and cutlass_bf16)
//   epilogue_4096/<name>         C = GELU(A B + bias): cuBLASLt's GELU_BIAS epilogue, v4..v7,
//                                v9..v11 fused, and v5..v7, v9..v11 without an epilogue (what the
//                                fusion costs)
//   sweep/<name>/<n>             squares n = 512 .. 8192: cuBLAS, v4 (tuned and 128x128 K 32),
//                                v5..v7, v9..v11 (and cutlass_fp16)
//   fc/<name>/<batch>            a fully connected layer 4096 -> 4096 at batch 1..32 (M = batch):
//                                cuBLAS, v4..v7 and v8 (split-K, written for these shapes)
//   conv1x1/<name>/<MxNxK>       1x1 convolutions as GEMM (M = batch x pixels, N = out channels,
//                                K = in channels): cuBLAS, v4..v11
//                                fc/ and conv1x1/ are timed with the L2 flushed before every
//                                sample and also report GB/s and %copy (memory-bound shapes)
//   tile_order_<n>/<order>       n = 4096 and 8192, FP16: cuBLAS, v6, and v12 (v6's kernel with
//                                the tile order as an argument) in every order: group1 (row by
//                                row), group2, group4, group8 (v6's order), group16, hilbert
//   schedule_<n>/<name>          n = 4096 and 8192, FP16: cuBLAS, v6, and CUTLASS's three kernels
//                                (CutlassKernel): the cooperative baseline and two ping-pong ones,
//                                where the build has CUTLASS: does ping-pong pay here?
//
// Counters: TFLOP/s (2MNK / GPU time), %peak (of the dense FP16 tensor peak read from the device:
// tensor_gemm.cuh), %cublas (of the cuBLAS run of the same shape and type registered just before;
// tools/bench_report.py recomputes the ratios from the JSON medians). A version this GPU lacks
// reports "not supported on this GPU" as the benchmark's error; the others still run. The
// cutlass_* rows are registered only where the build found CUTLASS (cutlass_gemm_built()); they
// are compared with cuBLAS like the versions.
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common/bench.hpp"
#include "common/memory.hpp"
#include "common/stream.hpp"
#include "cutlass_gemm.cuh"
#include "tensor_gemm.cuh"

using namespace lesson10;

namespace {

template <class T>
struct Problem {
  int M = 0, N = 0, K = 0;
  course::DeviceBuffer<T> A, B, C;
  course::DeviceBuffer<float> bias;
};

template <class T>
Problem<T>& problem(int M, int N, int K) {
  static Problem<T> p;
  if (p.M != M || p.N != N || p.K != K) {
    p = Problem<T>{};
    p.A = course::DeviceBuffer<T>(std::size_t{1} * M * K);
    p.B = course::DeviceBuffer<T>(std::size_t{1} * K * N);
    p.C = course::DeviceBuffer<T>(std::size_t{1} * M * N);
    p.bias = course::DeviceBuffer<float>(N);
    fill_uniform(p.A.data(), p.A.size(), 1, -1.0f, 1.0f);
    fill_uniform(p.B.data(), p.B.size(), 2, -1.0f, 1.0f);
    fill_uniform(p.bias.data(), p.bias.size(), 3, -1.0f, 1.0f);
    CUDA_CHECK(cudaDeviceSynchronize());
    p.M = M, p.N = N, p.K = K;
  }
  return p;
}

const Blas& blas() {
  static const Blas b;
  return b;
}

double peak_tflops() {
  static const double peak = tensor_peak(0).tflops;
  return peak;
}

std::map<std::string, std::string>& baseline_shape() {
  static std::map<std::string, std::string> m;
  return m;
}

// What one benchmark runs: `who` = -1 cuBLAS, -2 cuBLASLt, kCutlass the CUTLASS 3.x baseline,
// kV4Tile + t v4 with V4Tile t, kV12 + o v12 with TileOrder o, kCutlassKernel + k CUTLASS's
// kernel k (CutlassKernel), else a version number.
constexpr int kCutlass = 30;
constexpr int kV4Tile = 40;
constexpr int kV12 = 60;
constexpr int kCutlassKernel = 80;
struct Spec {
  std::string name;
  int M, N, K;
  bool bf16;
  int who;
  Activation act;
  std::string baseline;  // the baseline this run sets ("cublas_fp16"...) or compares with
};

template <class T>
void enqueue(const Spec& s, Problem<T>& p, cudaStream_t st) {
  const float* bias = s.act == Activation::none ? nullptr : p.bias.data();
  if (s.who == -1)
    cublas_gemm(blas(), p.M, p.N, p.K, 1.0f, p.A.data(), p.B.data(), 0.0f, p.C.data(), st);
  else if (s.who == -2)
    cublaslt_gemm(blas(), p.M, p.N, p.K, 1.0f, p.A.data(), p.B.data(), 0.0f, p.C.data(), bias,
                  s.act, st);
  else if (s.who == kCutlass)
    cutlass_gemm(p.M, p.N, p.K, 1.0f, p.A.data(), p.B.data(), 0.0f, p.C.data(), st);
  else if (s.who >= kCutlassKernel)
    cutlass_gemm(p.M, p.N, p.K, 1.0f, p.A.data(), p.B.data(), 0.0f, p.C.data(), st,
                 static_cast<CutlassKernel>(s.who - kCutlassKernel));
  else if (s.who >= kV12)
    gemm_v12_tile_order(static_cast<TileOrder>(s.who - kV12), p.M, p.N, p.K, 1.0f, p.A.data(),
                        p.B.data(), 0.0f, p.C.data(), bias, s.act, st);
  else if (s.who >= kV4Tile)
    gemm_v4_tile(static_cast<V4Tile>(s.who - kV4Tile), p.M, p.N, p.K, 1.0f, p.A.data(), p.B.data(),
                 0.0f, p.C.data(), bias, s.act, st);
  else
    tensor_gemm(s.who, p.M, p.N, p.K, 1.0f, p.A.data(), p.B.data(), 0.0f, p.C.data(), bias, s.act,
                st);
}

// The inference shapes (fc/, conv1x1/): in a network each layer reads its weights and
// activations from DRAM, not from an L2 the previous call left warm, and at batch 1-32 they are
// memory-bound, so they are timed with the L2 flushed before every sample and also report GB/s
// and %copy (of the device-to-device copy ceiling measured at start).
bool inference_shape(const Spec& s) {
  return s.name.rfind("fc/", 0) == 0 || s.name.rfind("conv1x1/", 0) == 0;
}

template <class T>
void run_typed(benchmark::State& state, const Spec& spec) {
  Problem<T>& p = problem<T>(spec.M, spec.N, spec.K);
  course::Stream stream;
  double s = 0.0;
  try {
    const bool small = static_cast<double>(spec.M) * spec.N * spec.K <= 1024.0 * 1024 * 1024;
    const course::L2 l2 = inference_shape(spec) ? course::L2::flushed : course::L2::warm;
    s = course::bench::time_on_gpu(state, stream, course::bench::Options{l2, small},
                                   [&] { enqueue(spec, p, stream); });
  } catch (const NotSupported& e) {
    state.SkipWithError(e.what());  // thrown by the warm-up call, before any timed iteration
    return;
  }
  if (s <= 0.0) return;
  const double tflops = gemm_flops(spec.M, spec.N, spec.K) / s / 1e12;
  state.counters["TFLOP/s"] = tflops;
  state.counters["%peak"] = 100.0 * tflops / peak_tflops();
  if (inference_shape(spec))  // A, B and C once each: the bytes a perfect kernel moves
    course::bench::report_bandwidth(
        state,
        static_cast<double>(sizeof(T)) *
            (double(spec.M) * spec.K + double(spec.K) * spec.N + double(spec.M) * spec.N),
        s);
  const std::string key =
      std::to_string(spec.M) + "x" + std::to_string(spec.N) + "x" + std::to_string(spec.K);
  if (spec.who < 0) {
    course::bench::set_baseline(spec.baseline, tflops);
    baseline_shape()[spec.baseline] = key;
  } else if (baseline_shape()[spec.baseline] == key) {
    course::bench::report_vs_baseline(state, spec.baseline, tflops);
  }
}

bool register_all() {
  std::vector<Spec> specs;
  const auto add_group = [&](const std::string& prefix, const std::string& suffix, int M, int N,
                             int K, bool bf16, const std::vector<int>& vs) {
    const std::string base = bf16 ? "cublas_bf16" : "cublas_fp16";
    specs.push_back({prefix + base + suffix, M, N, K, bf16, -1, Activation::none, base});
    for (const int v : vs)
      specs.push_back(
          {prefix + version_info(v).name + suffix, M, N, K, bf16, v, Activation::none, base});
  };
  // The CUTLASS 3.x baseline, after the group's cuBLAS row (the %cublas it is compared with).
  const auto add_cutlass = [&](const std::string& prefix, const std::string& suffix, int n,
                               bool bf16) {
    if (!cutlass_gemm_built()) return;
    specs.push_back({prefix + (bf16 ? "cutlass_bf16" : "cutlass_fp16") + suffix, n, n, n, bf16,
                     kCutlass, Activation::none, bf16 ? "cublas_bf16" : "cublas_fp16"});
  };
  add_group("all_versions_4096/", "", 4096, 4096, 4096, false, {1, 2, 3, 4, 5, 6, 7, 9, 10, 11});
  add_cutlass("all_versions_4096/", "", 4096, false);
  for (const auto& [suffix, tile] :
       {std::pair{"_128x128_k32", V4Tile::t128x128_s4}, std::pair{"_128x256", V4Tile::t128x256_s3},
        std::pair{"_128x256_k64_s3", V4Tile::t128x256_k64_s3}})
    specs.push_back({std::string("all_versions_4096/v4_pipeline") + suffix, 4096, 4096, 4096, false,
                     kV4Tile + static_cast<int>(tile), Activation::none, "cublas_fp16"});
  add_group("bf16_4096/", "", 4096, 4096, 4096, true, {4, 5, 6, 7, 9, 10, 11});
  add_cutlass("bf16_4096/", "", 4096, true);
  specs.push_back({"epilogue_4096/cublaslt_bias_gelu", 4096, 4096, 4096, false, -2,
                   Activation::gelu, "cublaslt_gelu"});
  for (const int v : {4, 5, 6, 7, 9, 10, 11})
    specs.push_back({"epilogue_4096/" + std::string(version_info(v).name) + "_bias_gelu", 4096,
                     4096, 4096, false, v, Activation::gelu, "cublaslt_gelu"});
  for (const int v : {5, 6, 7, 9, 10, 11})
    specs.push_back({"epilogue_4096/" + std::string(version_info(v).name) + "_no_epilogue", 4096,
                     4096, 4096, false, v, Activation::none, "cublaslt_gelu"});
  for (const int n : {512, 1024, 2048, 4096, 8192}) {
    add_group("sweep/", "/" + std::to_string(n), n, n, n, false, {4, 5, 6, 7, 9, 10, 11});
    add_cutlass("sweep/", "/" + std::to_string(n), n, false);
    specs.push_back({"sweep/v4_pipeline_128x128_k32/" + std::to_string(n), n, n, n, false,
                     kV4Tile + static_cast<int>(V4Tile::t128x128_s4), Activation::none,
                     "cublas_fp16"});
  }
  for (const int batch : {1, 2, 4, 8, 16, 32})
    add_group("fc/", "/batch" + std::to_string(batch), batch, 4096, 4096, false, {4, 5, 6, 7, 8});
  // ResNet-50-like 1x1 convolutions at batch 8: 56x56 pixels 64 -> 256 and 256 -> 64 channels,
  // 14x14 pixels 1024 -> 256.
  for (const auto& s :
       std::vector<std::vector<int>>{{25088, 256, 64}, {25088, 64, 256}, {1568, 256, 1024}})
    add_group("conv1x1/",
              "/" + std::to_string(s[0]) + "x" + std::to_string(s[1]) + "x" + std::to_string(s[2]),
              s[0], s[1], s[2], false, {4, 5, 6, 7, 8, 9, 10, 11});
  // The tile order: v6 (its order compiled in), then v12 in each order, after the cuBLAS row.
  for (const int n : {4096, 8192}) {
    const std::string prefix = "tile_order_" + std::to_string(n) + "/";
    add_group(prefix, "", n, n, n, false, {6});
    for (const TileOrder order : kTileOrders)
      specs.push_back({prefix + to_string(order), n, n, n, false, kV12 + static_cast<int>(order),
                       Activation::none, "cublas_fp16"});
  }
  // The schedule: CUTLASS's cooperative kernel (v6's division of labour) against its ping-pong
  // kernels, with v6 and cuBLAS in the same group.
  if (cutlass_gemm_built())
    for (const int n : {4096, 8192}) {
      const std::string prefix = "schedule_" + std::to_string(n) + "/";
      add_group(prefix, "", n, n, n, false, {6});
      for (const CutlassKernel kernel : kCutlassKernels)
        specs.push_back({prefix + "cutlass_" + to_string(kernel), n, n, n, false,
                         kCutlassKernel + static_cast<int>(kernel), Activation::none,
                         "cublas_fp16"});
    }

  for (Spec& spec : specs) {
    const std::string name = spec.name;
    benchmark::RegisterBenchmark(name.c_str(), [spec = std::move(spec)](benchmark::State& st) {
      if (spec.bf16)
        run_typed<__nv_bfloat16>(st, spec);
      else
        run_typed<__half>(st, spec);
    })->Apply(course::bench::defaults);
  }
  return true;
}

const bool registered = register_all();

}  // namespace

COURSE_BENCH_MAIN();
