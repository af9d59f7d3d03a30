// Lesson 07 benchmark: every SGEMM version and cuBLAS in one run (make bench LESSON=07).
//
//   all_versions_4096/<name>          every version (and v8's BK 16 configuration) at 4096^3
//   tensor_cores_4096/<name>          cuBLAS TF32 and the WMMA TF32 kernel at 4096^3
//   epilogue_<MxNxK>/<name>           bias + SiLU fused into v8 vs v8 + a separate kernel, at
//                                     4096^3 and at a deployment-like FC shape (small K)
//   sweep/<name>/<size>               cuBLAS and the best version, M = N = K = 256 .. 8192
//
// Counters: TFLOP/s (2MNK / time), %cublas (of cuBLAS SGEMM on the same shape, FP32,
// CUBLAS_DEFAULT_MATH), %cublas_tf32 (tensor cores only), %peak (of the FP32 peak: SMs x FP32
// lanes x 2 x max boost clock, read from the device). cuBLAS is registered first for each shape,
// so its time is known when the versions run; a version whose baseline did not run (filtered
// out) reports no % of it rather than a % of another shape's.
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/bench.hpp"
#include "common/memory.hpp"
#include "common/stream.hpp"
#include "gemm.cuh"

using namespace lesson07;

namespace {

// The operands of one shape, allocated and filled once and reused while the shape is the same.
struct Problem {
  int M = 0, N = 0, K = 0;
  course::DeviceBuffer<float> A, B, C, bias;
};

Problem& problem(int M, int N, int K) {
  static Problem p;
  if (p.M != M || p.N != N || p.K != K) {
    p = Problem{};  // free the previous shape first
    p.A = course::DeviceBuffer<float>(static_cast<std::size_t>(M) * K);
    p.B = course::DeviceBuffer<float>(static_cast<std::size_t>(K) * N);
    p.C = course::DeviceBuffer<float>(static_cast<std::size_t>(M) * N);
    p.bias = course::DeviceBuffer<float>(N);
    fill_uniform(p.A.data(), p.A.size(), 1, -1.0f, 1.0f);
    fill_uniform(p.B.data(), p.B.size(), 2, -1.0f, 1.0f);
    fill_uniform(p.C.data(), p.C.size(), 3, -1.0f, 1.0f);
    fill_uniform(p.bias.data(), p.bias.size(), 4, -1.0f, 1.0f);
    CUDA_CHECK(cudaDeviceSynchronize());
    p.M = M, p.N = N, p.K = K;
  }
  return p;
}

const CublasHandle& cublas() {
  static const CublasHandle handle;
  return handle;
}

double peak_tflops() {
  static const double peak = fp32_peak(0).tflops;
  return peak;
}

std::string shape_key(int M, int N, int K) {
  return std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K);
}

// Which shape each baseline was last measured on.
std::map<std::string, std::string>& baseline_shape() {
  static std::map<std::string, std::string> m;
  return m;
}

using Enqueue = std::function<void(Problem&, cudaStream_t)>;

struct Spec {
  std::string name;
  int M, N, K;
  Enqueue enqueue;
  std::string sets_baseline;             // "" or the baseline this run defines
  std::vector<std::string> compared_to;  // baselines to report % of
};

void run(benchmark::State& state, const Spec& spec) {
  Problem& p = problem(spec.M, spec.N, spec.K);
  course::Stream stream;
  double s = 0.0;
  try {
    // Small GEMMs: also the end-to-end latency (latency_us), which launch costs dominate there.
    const bool small = static_cast<double>(spec.M) * spec.N * spec.K <= 1024.0 * 1024 * 1024;
    s = course::bench::time_on_gpu(state, stream, course::bench::Options{course::L2::warm, small},
                                   [&] { spec.enqueue(p, stream); });
  } catch (const std::runtime_error& e) {
    // e.g. the WMMA kernel on a GPU or build without TF32 tensor cores: thrown by the warm-up
    // call, before any timed iteration; the other benchmarks still run.
    state.SkipWithError(e.what());
    return;
  }
  if (s <= 0.0) return;
  const double tflops = gemm_flops(spec.M, spec.N, spec.K) / s / 1e12;
  state.counters["TFLOP/s"] = tflops;
  state.counters["%peak"] = 100.0 * tflops / peak_tflops();
  const std::string key = shape_key(spec.M, spec.N, spec.K);
  if (!spec.sets_baseline.empty()) {
    course::bench::set_baseline(spec.sets_baseline, tflops);
    baseline_shape()[spec.sets_baseline] = key;
  }
  for (const std::string& b : spec.compared_to) {
    if (baseline_shape()[b] == key) course::bench::report_vs_baseline(state, b, tflops);
  }
}

Enqueue version(SgemmFn fn) {
  return [fn](Problem& p, cudaStream_t s) {
    fn(p.M, p.N, p.K, 1.0f, p.A.data(), p.B.data(), 0.0f, p.C.data(), s);
  };
}

Enqueue cublas_fp32() {
  return [](Problem& p, cudaStream_t s) {
    cublas_sgemm(cublas(), p.M, p.N, p.K, 1.0f, p.A.data(), p.B.data(), 0.0f, p.C.data(), s);
  };
}

bool register_all() {
  std::vector<Spec> specs;
  const int big = 4096;
  const std::string all = "all_versions_" + std::to_string(big) + "/";
  specs.push_back({all + "cublas_sgemm", big, big, big, cublas_fp32(), "cublas", {}});
  for (const SgemmVersion& v : sgemm_versions()) {
    specs.push_back({all + v.name, big, big, big, version(v.run), "", {"cublas"}});
  }
  specs.push_back({all + "v8_bk16",
                   big,
                   big,
                   big,
                   [](Problem& p, cudaStream_t s) {
                     sgemm_v8_tile_config(TileConfig::bk16, p.M, p.N, p.K, 1.0f, p.A.data(),
                                          p.B.data(), 0.0f, p.C.data(), s);
                   },
                   "",
                   {"cublas"}});

  const std::string tc = "tensor_cores_" + std::to_string(big) + "/";
  specs.push_back({tc + "cublas_tf32",
                   big,
                   big,
                   big,
                   [](Problem& p, cudaStream_t s) {
                     cublas_gemm_tf32(cublas(), p.M, p.N, p.K, 1.0f, p.A.data(), p.B.data(), 0.0f,
                                      p.C.data(), s);
                   },
                   "cublas_tf32",
                   {"cublas"}});
  specs.push_back({tc + "wmma_tf32",
                   big,
                   big,
                   big,
                   [](Problem& p, cudaStream_t s) {
                     // Throws std::runtime_error on a GPU or build without TF32 tensor cores:
                     // run() reports it as this benchmark's error.
                     sgemm_wmma_tf32(p.M, p.N, p.K, 1.0f, p.A.data(), p.B.data(), 0.0f, p.C.data(),
                                     s);
                   },
                   "",
                   {"cublas", "cublas_tf32"}});

  // A fully connected layer at a deployment shape: 16384 tokens, 1024 outputs, 256 inputs. With
  // a small K the GEMM is short and the extra pass over C of the unfused version weighs more.
  for (const auto& shape : std::vector<std::vector<int>>{{big, big, big}, {16384, 1024, 256}}) {
    const int M = shape[0], N = shape[1], K = shape[2];
    const std::string e = "epilogue_" + shape_key(M, N, K) + "/";
    specs.push_back({e + "cublas_sgemm", M, N, K, cublas_fp32(), "cublas", {}});
    specs.push_back({e + "gemm_only", M, N, K, version(sgemm_v8_double_buffering), "", {"cublas"}});
    specs.push_back({e + "fused_bias_silu",
                     M,
                     N,
                     K,
                     [](Problem& p, cudaStream_t s) {
                       sgemm_bias_act(p.M, p.N, p.K, 1.0f, p.A.data(), p.B.data(), 0.0f,
                                      p.bias.data(), Activation::silu, p.C.data(), s);
                     },
                     "",
                     {"cublas"}});
    specs.push_back({e + "separate_bias_silu",
                     M,
                     N,
                     K,
                     [](Problem& p, cudaStream_t s) {
                       sgemm_v8_double_buffering(p.M, p.N, p.K, 1.0f, p.A.data(), p.B.data(), 0.0f,
                                                 p.C.data(), s);
                       bias_activation(p.M, p.N, p.bias.data(), Activation::silu, p.C.data(), s);
                     },
                     "",
                     {"cublas"}});
  }

  // The sweep: cuBLAS first at each size, then the best version (the slow ones stay out).
  const SgemmVersion& best = sgemm_version(kBestVersion);
  for (const int n : {256, 512, 1024, 2048, 3072, 4096, 6144, 8192}) {
    specs.push_back(
        {"sweep/cublas_sgemm/" + std::to_string(n), n, n, n, cublas_fp32(), "cublas", {}});
    specs.push_back({"sweep/" + std::string(best.name) + "/" + std::to_string(n),
                     n,
                     n,
                     n,
                     version(best.run),
                     "",
                     {"cublas"}});
  }

  for (Spec& spec : specs) {
    const std::string name = spec.name;
    benchmark::RegisterBenchmark(name.c_str(), [spec = std::move(spec)](benchmark::State& st) {
      run(st, spec);
    })->Apply(course::bench::defaults);
  }
  return true;
}

const bool registered = register_all();

}  // namespace

COURSE_BENCH_MAIN();
