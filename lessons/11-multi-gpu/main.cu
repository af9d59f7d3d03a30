// Lesson 11: several GPUs in one process, narrated and measured.
//
//   lesson11 [--max-gpus N] [--frames N] [--copy-mib N] [--gemm-size S] [--reps N] [--chunks N]
//            [--fp16-version V]
//
// 1. the devices, the peer-to-peer matrix, `nvidia-smi topo -m`, and each pair's link ceiling
// 2. the current device, per thread: what a new thread, an allocation, a stream report
// 3. a kernel on one GPU waiting for an event another GPU recorded (and the race without it)
// 4. cudaMemcpyPeerAsync against a copy staged through pinned host memory, beside the ceiling
// 5. replicas of lesson 09's pipeline, one per GPU: frames/s on 1, 2 (and 4) GPUs, every frame
//    checked, the scaling efficiency
// 6. a layer's GEMM split over the GPUs with NCCL (column-parallel + all-gather, row-parallel +
//    all-reduce) against one GPU: agreement and time (FP32, lesson 07's SGEMM)
// 7. the same splits in FP16 on lesson 10's tensor-core GEMM at inference M (1, 32, 256, 4096):
//    communication against compute, then overlapped (row chunks, GEMM and collective on two
//    streams), every split checked against an FP64 reference
// 8. NCCL all-reduce and all-gather bus bandwidth (nccl-tests' definition) against the link
// With one GPU, what needs two says "needs 2 GPUs: skipped" and the rest runs.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <sys/stat.h>
#include <vector>

#include "common/device.hpp"
#include "common/headline.hpp"
#include "common/lesson_main.hpp"
#include "common/memory.hpp"
#include "common/process.hpp"
#include "common/stream.hpp"
#include "multi_gpu.cuh"
#include "multi_gpu_host.hpp"
#include "replicas.hpp"
#include "tensor_gemm.cuh"  // lesson 10: NotSupported
#include "tensor_parallel.hpp"
#include "tensor_parallel_fp16.hpp"

using namespace lesson11;

namespace {

// Collectives per timed sample in section 8 (nccl-tests' default is 20 iterations).
constexpr int kCollectiveIters = 20;
// Section 7: the layer (N = K = 4096, a 4096-wide transformer's projection) at these M.
constexpr int kFp16Width = 4096;
constexpr int kFp16Rows[] = {1, 32, 256, 4096};

struct Options {
  int max_gpus = 64;
  std::int64_t frames = 300;
  int copy_mib = 256;
  int gemm_size = 4096;
  int reps = 10;
  int chunks = 4;
  int fp16_version = kBestTpGemmVersion;
};

void skipped(const char* what) {
  std::printf("   %s: needs 2 GPUs: skipped\n", what);
}

// The first executable `name` on PATH, or "" (posix_spawn does not search PATH).
std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "";
  for (std::size_t start = 0; start <= dirs.size();) {
    const std::size_t end = std::min(dirs.find(':', start), dirs.size());
    const std::string candidate = dirs.substr(start, end - start) + "/" + name;
    struct stat st {};
    if (stat(candidate.c_str(), &st) == 0 && (st.st_mode & S_IXUSR)) return candidate;
    start = end + 1;
  }
  return "";
}

// The ceiling of the link between GPUs a and b, GB/s one way, and where it came from.
struct Ceiling {
  double gbps = 0;
  std::string source;
};
Ceiling link_ceiling(int a, int b, const std::vector<std::vector<Link>>& topo) {
  const course::DeviceInfo info = course::query_device(a);
  const auto ua = static_cast<std::size_t>(a), ub = static_cast<std::size_t>(b);
  if (ua < topo.size() && ub < topo[ua].size() && topo[ua][ub].kind == "NV") {
    const int gen = nvlink_gen_of(info.cc_major, info.cc_minor);
    if (gen > 0) {
      const int links = topo[ua][ub].nvlinks;
      return {nvlink_gbps(links, gen),
              "NVLink " + std::to_string(gen) + ", " + std::to_string(links) + " links"};
    }
  }
  // Otherwise the PCIe link, the slower of the two GPUs' (a peer copy crosses both).
  const auto la = pcie_link(a), lb = pcie_link(b);
  if (la && lb) {
    const double ga = pcie_gbps(la->gt_per_s, la->lanes), gb = pcie_gbps(lb->gt_per_s, lb->lanes);
    const PcieLink& slow = ga <= gb ? *la : *lb;
    char text[96];
    std::snprintf(text, sizeof text, "PCIe %.0f GT/s x%d (sysfs max_link_*)", slow.gt_per_s,
                  slow.lanes);
    return {std::min(ga, gb), text};
  }
  return {0, "unknown (no NVLink in nvidia-smi topo -m, no PCIe link in sysfs)"};
}

std::string percent_of(double gbps, const Ceiling& c) {
  if (c.gbps <= 0) return "";
  char text[64];
  std::snprintf(text, sizeof text, " (%.0f%% of %.1f GB/s)", 100.0 * gbps / c.gbps, c.gbps);
  return text;
}

std::vector<std::vector<Link>> section_devices(int n) {
  std::printf("1. Devices and topology\n");
  for (int d = 0; d < n; ++d) {
    std::printf("   GPU %d: %s\n", d, course::summary(course::query_device(d)).c_str());
    const auto link = pcie_link(d);
    if (link) {
      std::printf("          PCI %s, link up to %.0f GT/s x%d = %.1f GB/s per direction\n",
                  link->bus_id.c_str(), link->gt_per_s, link->lanes,
                  pcie_gbps(link->gt_per_s, link->lanes));
    }
  }
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  std::printf(
      "   CUDA_VISIBLE_DEVICES=%s: CUDA numbers the GPUs it lists 0, 1, ... in list order, "
      "so GPU 0 here\n   need not be nvidia-smi's GPU 0 (compare the PCI bus ids).\n",
      visible != nullptr ? visible : "(unset)");
  if (n >= 2) {
    std::printf("   Peer matrix (cudaDeviceGetP2PAttribute: access / native atomics / rank):\n");
    const auto m = peer_matrix();
    std::printf("        ");
    for (int j = 0; j < n; ++j) std::printf("  GPU%-6d", j);
    std::printf("\n");
    for (int i = 0; i < n; ++i) {
      std::printf("   GPU%d ", i);
      for (int j = 0; j < n; ++j) {
        const PeerInfo& p = m[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)];
        if (i == j) {
          std::printf("  %-9s", "X");
        } else {
          std::printf("  %c/%c/%-5d", p.access ? 'y' : 'n', p.atomics ? 'y' : 'n', p.rank);
        }
      }
      std::printf("\n");
    }
  } else {
    skipped("peer matrix");
  }
  std::vector<std::vector<Link>> topo;
  const std::string smi = find_on_path("nvidia-smi");
  if (smi.empty()) {
    std::printf("   nvidia-smi is not on PATH: no topology matrix.\n");
  } else {
    const course::ProcessResult r = course::run_process({smi, "topo", "-m"});
    const std::string matrix = strip_ansi(r.output);
    std::printf("   nvidia-smi topo -m (exit %d):\n", r.exit_code);
    std::printf("%s\n", matrix.c_str());
    try {
      topo = parse_topology(matrix);
    } catch (const std::invalid_argument& e) {
      std::printf("   (could not read the matrix: %s)\n", e.what());
    }
  }
  std::printf("\n");
  return topo;
}

void section_threads(int n) {
  std::printf("2. The current device is per host thread\n");
  CUDA_CHECK(cudaSetDevice(n - 1));
  std::printf("   main thread: cudaSetDevice(%d); a new std::thread's cudaGetDevice: %d\n", n - 1,
              new_thread_device());
  {
    course::DeviceBuffer<float> buf(16);
    course::Stream s;
    std::printf(
        "   made while GPU %d was current: memory on GPU %d (cudaPointerGetAttributes), "
        "stream on GPU %d\n",
        n - 1, pointer_device(buf.data()), stream_device(s));
    if (n >= 2) {
      CUDA_CHECK(cudaSetDevice(0));
      std::printf("   with GPU 0 current, a launch into that stream of GPU %d: %s\n", n - 1,
                  course::describe(try_launch(s)).c_str());
      CUDA_CHECK(cudaSetDevice(n - 1));
    } else {
      skipped("a launch into another device's stream");
    }
  }
  CUDA_CHECK(cudaSetDevice(0));
  std::printf("\n");
}

void section_events(int n) {
  const int consumer = n >= 2 ? 1 : 0;
  std::printf(
      "3. Events across devices: GPU 0 spins 20 ms, writes 42 to a flag, records an event;"
      "\n   GPU %d's kernel reads the flag%s\n",
      consumer, n >= 2 ? "" : " (one GPU: two streams of GPU 0 stand in)");
  std::printf("   after cudaStreamWaitEvent on GPU 0's event: read %d\n",
              cross_device_handoff(0, consumer, 42, 20000, true).consumer_read);
  std::printf(
      "   without the wait:                             read %d (0: it read the flag before "
      "the write)\n\n",
      cross_device_handoff(0, consumer, 42, 20000, false).consumer_read);
}

void section_copies(int n, const Options& o, const std::vector<std::vector<Link>>& topo) {
  const std::size_t bytes = static_cast<std::size_t>(o.copy_mib) << 20;
  std::printf(
      "4. Copies of %d MiB: cudaMemcpyPeerAsync against host-staged (D2H + H2D, pinned)\n"
      "   times: host clock, enqueue to copy done (end to end; events of two devices cannot "
      "be subtracted), medians of %d\n",
      o.copy_mib, o.reps);
  // The staged copy's two hops run one after the other over GPU 0's PCIe link (and the other
  // GPU's): at best half the link's rate.
  Ceiling staged = link_ceiling(0, 0, {});
  staged.gbps /= 2;
  std::printf("   staged ceiling: half of %s = %.1f GB/s (its two hops are serial)\n",
              staged.source.c_str(), staged.gbps);
  if (n < 2) {
    const CopyComparison c = compare_peer_and_staged(0, 0, bytes, o.reps);
    std::printf(
        "   GPU 0 -> GPU 0: device-to-device %.1f GB/s; staged through the host %.1f GB/s%s"
        "%s\n",
        c.peer_gbps, c.staged_gbps, percent_of(c.staged_gbps, staged).c_str(),
        c.peer_correct && c.staged_correct ? "" : "  WRONG BYTES");
    skipped("a peer copy between two GPUs");
    std::printf("\n");
    return;
  }
  for (auto [src, dst] : {std::pair<int, int>{0, 1}, std::pair<int, int>{1, 0}}) {
    const CopyComparison c = compare_peer_and_staged(src, dst, bytes, o.reps);
    const Ceiling link = link_ceiling(src, dst, topo);
    std::printf("   GPU %d -> GPU %d: peer %.1f GB/s%s [%s, %s]; staged %.1f GB/s%s%s\n", src, dst,
                c.peer_gbps, percent_of(c.peer_gbps, link).c_str(),
                c.peer_access ? "peer access on" : "no peer access: the driver stages it",
                link.source.c_str(), c.staged_gbps, percent_of(c.staged_gbps, staged).c_str(),
                c.peer_correct && c.staged_correct ? "" : "  WRONG BYTES");
    if (src == 0) {
      course::add_headline("peer copy %.0f GB/s vs host-staged %.0f GB/s", c.peer_gbps,
                           c.staged_gbps);
    }
  }
  std::printf("\n");
}

// Returns the number of frames with wrong boxes.
int section_replicas(int n, const Options& o) {
  std::printf(
      "5. Replicas of lesson 09's pipeline, one per GPU (2 workers + graphs each, its own "
      "producer),\n   %lld frames per GPU, every frame checked against the truth\n",
      static_cast<long long>(o.frames));
  lesson09::PipelineConfig c;
  c.frames = o.frames;
  c.workers = 2;
  c.graphs = true;
  std::printf("   %-6s %10s %12s %10s %8s\n", "GPUs", "frames/s", "per GPU", "efficiency", "wrong");
  double fps1 = 0;
  int wrong = 0;
  for (int g : {1, 2, 4}) {
    if (g > n) break;
    std::vector<int> devices;
    for (int d = 0; d < g; ++d) devices.push_back(d);
    const ReplicaRun run = run_replicas(devices, c, lesson09::kDefaultGflopPerFrame);
    int bad = 0;
    std::string first;
    for (const auto& r : run.reports) {
      const ReplicaCheck k = check_replica(r, c);
      bad += k.wrong + k.missing + k.repeated;
      if (first.empty()) first = k.first_problem;
    }
    wrong += bad;
    if (g == 1) fps1 = run.fps();
    const double eff = scaling_efficiency(fps1, run.fps(), g);
    std::printf("   %-6d %10.0f %12.0f %9.1f%% %8d%s%s\n", g, run.fps(), run.fps() / g, 100 * eff,
                bad, first.empty() ? "" : "  first: ", first.c_str());
    if (g == 1) course::add_headline("1 replica %.0f frames/s", run.fps());
    if (g > 1) {
      course::add_headline("%d replicas %.0f frames/s (%.0f%% scaling)", g, run.fps(), 100 * eff);
    }
  }
  if (n < 2) skipped("replicas on 2 GPUs");
  std::printf("\n");
  return wrong;
}

// The group of sections 6-8, or null without NCCL. One host thread per GPU makes its rank's
// communicator, as a deployment that runs a thread or a process per GPU does; every wait has a
// deadline and aborts rather than hangs.
std::unique_ptr<NcclGroup> make_group(int n) {
  if (!nccl_available()) return nullptr;
  std::vector<int> devices;
  for (int d = 0; d < n; ++d) devices.push_back(d);
  return std::make_unique<NcclGroup>(devices, NcclInit::thread_per_device);
}

// Returns false if a split left its bound.
bool section_tensor_parallel(int n, const Options& o, const NcclGroup* group_or_null) {
  const int S = o.gemm_size;
  std::printf(
      "6. Tensor parallelism: C = A B, %d x %d x %d FP32 (lesson 07's v8 on each GPU), "
      "over %d GPU(s) with NCCL\n",
      S, S, S, n);
  if (group_or_null == nullptr) {
    std::printf("   %s\n\n", nccl_build_note().c_str());
    return true;
  }
  const NcclGroup& group = *group_or_null;
  const auto A = random_matrix(S, S, 1), B = random_matrix(S, S, 2);
  double one_ms = 0;
  const std::vector<float> one = single_gpu_gemm(0, S, S, S, A, B, o.reps, &one_ms);
  std::printf("   times: host clock, enqueue to every rank done (medians of %d)\n", o.reps);
  std::printf("   one GPU: %.3f ms (%.1f TFLOP/s)\n", one_ms, 2.0 * S * S * S / one_ms / 1e9);
  std::printf(
      "   %s; NCCL_NVLS_ENABLE=%s%s\n", nccl_build_note().c_str(), group.nvls_setting().c_str(),
      group.nvls_setting() == "0" ? " (NVLink SHARP / multicast off)" : " (set by the user)");
  std::printf("   communicators: %s; waits time out after %lld s and abort\n",
              to_string(group.init()), static_cast<long long>(group.timeout().count() / 1000));
  // |diff| against the one-GPU result, relative to the bound split_vs_single_bound, whose
  // sum |a||b| is estimated as K x E|a| E|b| = K / 4 for uniform [-1, 1] entries (a rigorous
  // per-element bound is what the tests check, on smaller sizes).
  const double bound = split_vs_single_bound(S, S / 4.0);
  bool ok = true;
  for (TpMode mode : {TpMode::column_parallel, TpMode::row_parallel}) {
    const TpResult r = tensor_parallel_gemm(group, mode, S, S, S, A, B, o.reps);
    double worst = 0;
    bool identical = true;
    for (const auto& c : r.c) {
      for (std::size_t i = 0; i < c.size(); ++i) {
        worst = std::max(worst, static_cast<double>(std::fabs(c[i] - one[i])));
        identical = identical && c[i] == one[i];
      }
    }
    ok = ok && worst <= bound;
    std::printf("   %-30s %.3f ms (%.2fx one GPU), split %s, max |diff| %.3g (%s, bound %.3g)\n",
                to_string(mode), r.ms, one_ms / r.ms, r.split.even() ? "even" : "uneven", worst,
                identical ? "bit-identical" : "not bit-identical", bound);
    if (n >= 2) {
      course::add_headline("%s %.2fx one GPU",
                           mode == TpMode::column_parallel ? "TP column" : "TP row", one_ms / r.ms);
    }
  }
  if (n < 2) skipped("a split over several GPUs (one rank: the GEMM and a one-rank collective)");
  std::printf("\n");
  return ok;
}

// The largest |C - exact| / bound over rows 0, M/2 and M-1 of every rank's C (the first, a
// middle and the last row chunk), exact and bound from the same FP16 inputs in FP64
// (fp16_tp_error_bound); above 1 is a failure.
double fp16_worst_ratio(const TpFp16Result& r, TpMode mode, const std::vector<float>& A,
                        const std::vector<float>& B, int M, int N, int K, int ranks) {
  const Partition k_split =
      mode == TpMode::column_parallel ? partition(K, 1, 1) : partition(K, ranks, kSplitAlign);
  double worst = 0;
  for (int m : {0, M / 2, M - 1}) {
    for (int col = 0; col < N; ++col) {
      const std::vector<PartialSum> shares = reference_shares(A, B, M, N, K, k_split, m, col);
      double exact = 0;
      for (const PartialSum& p : shares) exact += p.exact;
      const double bound = fp16_tp_error_bound(shares);
      for (const auto& c : r.c) {
        const double got = __half2float(c[static_cast<std::size_t>(m) * N + col]);
        const double ratio = std::fabs(got - exact) / bound;
        worst = std::max(worst, std::isfinite(ratio) ? ratio : 1e30);
      }
    }
  }
  return worst;
}

// Returns false if a split left its bound.
bool section_fp16(int n, const Options& o, const NcclGroup* group_or_null) {
  const int N = kFp16Width, K = kFp16Width;
  std::printf(
      "7. Tensor parallelism in FP16 at inference M: C = A B, M x %d x %d, FP16 in and out (FP32 "
      "accumulation),\n   lesson 10's tensor-core GEMM on each of %d GPU(s); communication "
      "against compute, then overlapped in row chunks\n",
      N, K, n);
  if (group_or_null == nullptr) {
    std::printf("   %s\n\n", nccl_build_note().c_str());
    return true;
  }
  const NcclGroup& group = *group_or_null;
  int version = o.fp16_version;
  try {
    if (version == kBestTpGemmVersion) version = best_tp_gemm_version(group);
  } catch (const lesson10::NotSupported& e) {
    std::printf("   not supported on this GPU: %s\n\n", e.what());
    return true;
  }
  for (int r = 0; r < n; ++r) {
    ScopedDevice on(group.device(r));
    std::string why;
    if (!lesson10::version_supported(version, lesson10::DType::f16, &why)) {
      std::printf("   lesson 10's v%d (--fp16-version): not supported on GPU %d: %s\n\n", version,
                  group.device(r), why.c_str());
      return true;
    }
  }
  std::printf(
      "   GEMM: lesson 10's v%d (%s); chunks: %d (--chunks), clamped to M: M = 1 cannot be cut\n"
      "   times: host clock, enqueue to every rank done (end to end: launches and NCCL's host "
      "work included), us, medians of %d\n"
      "   compute: the GEMMs alone; chunked: the same as row chunks; comm: the collective alone "
      "(column: + assembly);\n   serial: GEMM then collective; overlap: chunk i's collective on "
      "the group's stream while GEMM i+1 runs on another;\n   ideal: max(compute, comm); "
      "hidden: (serial - overlap) / comm\n",
      version, lesson10::version_info(version).name, o.chunks, o.reps);
  if (n < 2) {
    std::printf(
        "   ONE GPU: a group of 1, where each collective is NCCL's single-rank copy (or "
        "nothing): one GPU cannot show\n   what communication costs, so comm and hidden say "
        "little here; the multi-GPU numbers need a machine with several GPUs.\n");
  }
  std::printf("   %-28s %5s %6s %9s %9s %9s %9s %9s %9s %7s  %s\n", "split", "M", "chunks",
              "compute", "chunked", "comm", "serial", "overlap", "ideal", "hidden",
              "check (worst |err| / bound)");
  bool ok = true;
  for (TpMode mode : {TpMode::column_parallel, TpMode::row_parallel}) {
    for (int M : kFp16Rows) {
      const TpBreakdown t =
          time_tensor_parallel_fp16(group, mode, M, N, K, o.chunks, o.reps, version);
      const auto A = to_float(to_half(random_matrix(M, K, 51))),
                 B = to_float(to_half(random_matrix(K, N, 52)));
      const TpFp16Result r = tensor_parallel_gemm_fp16(group, mode, M, N, K, to_half(A), to_half(B),
                                                       o.chunks, version);
      const double worst = fp16_worst_ratio(r, mode, A, B, M, N, K, n);
      ok = ok && worst <= 1.0;
      std::printf("   %-28s %5d %6d %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %6.0f%%  %s (%.2f)\n",
                  to_string(mode), M, t.chunks, 1e3 * t.compute_ms, 1e3 * t.compute_chunked_ms,
                  1e3 * t.comm_ms, 1e3 * t.serial_ms, 1e3 * t.overlapped_ms, 1e3 * t.ideal_ms,
                  100 * t.hidden, worst <= 1.0 ? "within bound" : "OUTSIDE BOUND", worst);
      if (n >= 2 && M == 256) {
        course::add_headline("FP16 TP %s M=256: overlap hides %.0f%% of comm",
                             mode == TpMode::column_parallel ? "column" : "row", 100 * t.hidden);
      }
    }
  }
  std::printf("   (check: rows 0, M/2 and M-1 of every rank's C against the FP64 reference)\n");
  if (n < 2) skipped("communication between GPUs (one rank: a single-rank copy)");
  std::printf("\n");
  return ok;
}

void section_bandwidth(int n, const Options& o, const NcclGroup* group_or_null,
                       const std::vector<std::vector<Link>>& topo) {
  std::printf(
      "8. NCCL bus bandwidth (nccl-tests: busbw = algbw x 2(n-1)/n all-reduce, "
      "x (n-1)/n all-gather), %d rank(s)\n",
      n);
  if (group_or_null == nullptr) {
    std::printf("   %s\n\n", nccl_build_note().c_str());
    return;
  }
  const NcclGroup& group = *group_or_null;
  std::printf(
      "   times: as nccl-tests times them: host clock around %d back-to-back collectives and one "
      "wait, divided by %d; medians of %d\n",
      kCollectiveIters, kCollectiveIters, o.reps);
  const Ceiling link = n >= 2 ? link_ceiling(0, 1, topo) : Ceiling{};
  for (Collective kind : {Collective::all_reduce, Collective::all_gather}) {
    for (std::size_t mib : {8, 256}) {
      const std::size_t bytes = (mib << 20) / (4 * n) * (4 * n);
      const CollectiveTiming t = time_collective(group, kind, bytes, o.reps, kCollectiveIters);
      std::printf("   %-10s %4zu MiB: %8.1f us, algbw %7.1f GB/s, busbw %7.1f GB/s%s\n",
                  kind == Collective::all_reduce ? "all-reduce" : "all-gather", mib,
                  t.seconds * 1e6, t.algbw_gbps, t.busbw_gbps,
                  n >= 2 ? percent_of(t.busbw_gbps, link).c_str() : "");
      if (n >= 2 && kind == Collective::all_reduce && mib == 256) {
        course::add_headline("all-reduce busbw %.0f GB/s", t.busbw_gbps);
      }
    }
  }
  if (n < 2) std::printf("   one rank: busbw is 0 by definition (nothing crosses a link)\n");
  std::printf("\n");
}

int run(const Options& o) {
  const int n = std::min(device_count(), o.max_gpus);
  std::printf("Lesson 11: several GPUs. %d CUDA device(s) visible, using %d (--max-gpus).\n",
              device_count(), n);
  std::printf("%s\n\n", nccl_build_note().c_str());
  const auto topo = section_devices(n);
  section_threads(n);
  section_events(n);
  section_copies(n, o, topo);
  const int wrong = section_replicas(n, o);
  const std::unique_ptr<NcclGroup> group = make_group(n);
  const bool tp_ok = section_tensor_parallel(n, o, group.get());
  const bool fp16_ok = section_fp16(n, o, group.get());
  section_bandwidth(n, o, group.get(), topo);
  if (n < 2) course::add_headline("1 GPU only: multi-GPU parts skipped");
  course::print_headline();
  if (wrong > 0) {
    std::printf("FAILED: %d frames of the replicas were wrong, missing or repeated.\n", wrong);
    return 1;
  }
  if (!tp_ok || !fp16_ok) {
    std::printf("FAILED: a tensor-parallel GEMM (%s) left its error bound.\n",
                !tp_ok ? "FP32" : "FP16");
    return 1;
  }
  std::printf(
      "Every replica frame matched its true boxes; the tensor-parallel GEMMs are within "
      "their bound.\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{
      "Lesson 11: several GPUs in one process: a device per thread, events across devices,\n"
      "peer copies, replicas of lesson 09's pipeline per GPU, a GEMM split with NCCL (FP32, and\n"
      "FP16 at inference M with communication overlapped), and NCCL's bus bandwidth. With one\n"
      "GPU the parts that need two say so and are skipped."};
  app.add_option("--max-gpus", o.max_gpus, "use at most N GPUs (default: all)")
      ->type_name("N")
      ->check(course::integer_in(1, 64));
  app.add_option("--frames", o.frames, "frames per replica (default 300)")
      ->type_name("N")
      ->check(course::integer_in(32, 1000000));
  app.add_option("--copy-mib", o.copy_mib, "size of the peer and staged copies, MiB (default 256)")
      ->type_name("N")
      ->check(course::integer_in(1, 4096));
  app.add_option("--gemm-size", o.gemm_size, "M = N = K of the tensor-parallel GEMM (default 4096)")
      ->type_name("S")
      ->check(course::integer_in(64, 16384));
  app.add_option("--reps", o.reps, "timed repetitions per measurement, median (default 10)")
      ->type_name("N")
      ->check(course::integer_in(1, 1000));
  app.add_option("--chunks", o.chunks,
                 "row chunks of the overlapped FP16 split, clamped to M (default 4; 1: serial)")
      ->type_name("N")
      ->check(course::integer_in(1, 64));
  app.add_option("--fp16-version", o.fp16_version,
                 "lesson 10's GEMM version for the FP16 split (default 0: the best supported, "
                 "6 on compute capability 9.0, else 4)")
      ->type_name("V")
      ->check(course::integer_in(0, 7));
  return course::lesson_main(app, argc, argv, [&] { return run(o); });
}
