// Tests of lesson 11.
//
//   CPU          the split, the bandwidth formulas (against numbers computed by hand from
//                nccl-tests' doc/PERFORMANCE.md), topology parsing, link ceilings, the
//                CUDA_VISIBLE_DEVICES rule, bad input before any device is touched, NCCL's error
//                text, the replica check on made-up reports; for the FP16 split ([fp16]): the
//                row chunks, the FP64 shares, the error bound, the hidden fraction
//   [gpu]        one GPU is enough: the per-thread facts that hold on one device, the
//                CUDA_VISIBLE_DEVICES rule against the real runtime, a same-device event
//                hand-off, the copies, a one-rank NCCL communicator (an all-reduce of one rank is
//                the identity), the tensor-parallel GEMMs on one rank (FP16: bit for bit lesson
//                10's GEMM), a replica on GPU 0, and on every GPU present: the uneven
//                all-gather, communicators made per thread, a wait that times out and aborts
//                instead of hanging, the FP16 split chunked against an FP64 reference, the FP16
//                collectives, the breakdown of communication against compute
//   [multigpu]   two GPUs or more (test_main leaves them out below 2, and ctest runs them as
//                11/multigpu, skipped below 2): a new thread on device 0 while main is on 1,
//                memory and streams of device 1, the launch and record errors across devices,
//                the cross-device event wait, peer copies, the two splits against one GPU (FP32)
//                and against the FP64 reference (FP16), replicas on two GPUs, NCCL over two
//                ranks
//
// Facts about the current device are observed in fresh child processes (CHILD_PROBE, as lesson
// 01 does): the test process has already chosen devices, and the facts are about a process
// that has not.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/memory.hpp"
#include "common/stream.hpp"
#include "common/testing.hpp"
#include "common/timing.hpp"
#include "multi_gpu.cuh"
#include "multi_gpu_host.hpp"
#include "replicas.hpp"
#include "tensor_gemm.cuh"  // lesson 10: the single-GPU GEMM the one-rank split must equal
#include "tensor_parallel.hpp"
#include "tensor_parallel_fp16.hpp"

#ifdef COURSE_HAVE_NCCL
#include <nccl.h>
#endif

using course::testing::Approx;

// This file has [multigpu] tests: on one GPU test_main leaves them out and says so.
[[maybe_unused]] static const bool kNotedMultigpu = course::testing::note_multigpu_tests();
using course::testing::Contains;
using course::testing::report;
using course::testing::run_child_probe_ok;
using namespace lesson11;

namespace {

// Elements of `got` farther from `want` than split_vs_single_bound(K, sum_k |a_mk b_kn|).
int outside_bound(const std::vector<float>& got, const std::vector<float>& want,
                  const std::vector<float>& A, const std::vector<float>& B, int M, int N, int K,
                  double* worst_ratio) {
  int bad = 0;
  *worst_ratio = 0;
  for (int m = 0; m < M; ++m) {
    for (int n = 0; n < N; ++n) {
      double abs_sum = 0;
      for (int k = 0; k < K; ++k) {
        abs_sum += std::fabs(static_cast<double>(A[static_cast<std::size_t>(m) * K + k]) *
                             B[static_cast<std::size_t>(k) * N + n]);
      }
      const std::size_t i = static_cast<std::size_t>(m) * N + n;
      const double diff = std::fabs(static_cast<double>(got[i]) - want[i]);
      const double bound = split_vs_single_bound(K, abs_sum);
      *worst_ratio = std::max(*worst_ratio, bound > 0 ? diff / bound : 0.0);
      if (diff > bound) ++bad;
    }
  }
  return bad;
}
// Every visible device, 0..n-1: the groups of the tests that run on every GPU present.
std::vector<int> all_devices() {
  std::vector<int> d;
  for (int i = 0; i < device_count(); ++i) d.push_back(i);
  return d;
}

// The FP16 split's oracle: every element's exact (FP64) value from the same FP16 inputs, and its
// fp16_tp_error_bound for the split of K (one part: column-parallel; the ranks' parts:
// row-parallel).
struct Fp16Oracle {
  std::vector<double> exact, bound;
};
Fp16Oracle fp16_oracle(const std::vector<float>& A, const std::vector<float>& B, int M, int N,
                       int K, const Partition& k_split) {
  Fp16Oracle o;
  for (int m = 0; m < M; ++m) {
    for (int n = 0; n < N; ++n) {
      const std::vector<PartialSum> shares = reference_shares(A, B, M, N, K, k_split, m, n);
      double exact = 0;
      for (const PartialSum& p : shares) exact += p.exact;
      o.exact.push_back(exact);
      o.bound.push_back(fp16_tp_error_bound(shares));
    }
  }
  return o;
}
// Elements of `got` farther from the oracle's exact value than its bound; *worst: the largest
// |diff| / bound.
int outside_fp16_bound(const std::vector<__half>& got, const Fp16Oracle& o, double* worst) {
  int bad = 0;
  *worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double diff = std::fabs(static_cast<double>(__half2float(got[i])) - o.exact[i]);
    *worst = std::max(*worst, diff / o.bound[i]);
    if (!(diff <= o.bound[i])) ++bad;
  }
  return bad;
}
// Bit patterns, so that two FP16 results compare exactly (and a NaN is not equal to itself).
std::vector<std::uint16_t> bits(const std::vector<__half>& v) {
  std::vector<std::uint16_t> b(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) std::memcpy(&b[i], &v[i], sizeof(std::uint16_t));
  return b;
}
// Whether every device of `devices` runs lesson 10's v4 (compute capability 8.0+); WARNs if not.
bool fp16_gemm_runs(const std::vector<int>& devices) {
  for (int d : devices) {
    ScopedDevice on(d);
    std::string why;
    if (!lesson10::version_supported(4, lesson10::DType::f16, &why)) {
      WARN("GPU " << d << " cannot run lesson 10's tensor-core GEMM: " << why);
      return false;
    }
  }
  return true;
}
// The lesson 10 versions to run on every device: v4, and v6 where every device has it.
std::vector<int> fp16_versions(const std::vector<int>& devices) {
  bool wgmma = true;
  for (int d : devices) {
    ScopedDevice on(d);
    wgmma = wgmma && lesson10::version_supported(6, lesson10::DType::f16);
  }
  return wgmma ? std::vector<int>{4, 6} : std::vector<int>{4};
}
}  // namespace

// ===================================================================================== CPU

TEST_CASE("A device index is checked against the count before any device is touched", "[cpu]") {
  CHECK_NOTHROW(check_device_ordinal("t", 1, 2));
  CHECK_THROWS_AS(check_device_ordinal("t", 2, 2), std::invalid_argument);
  CHECK_THROWS_WITH(check_device_ordinal("t", 2, 2),
                    Contains("device 2 does not exist") && Contains("ordinals 0..1"));
  CHECK_THROWS_WITH(check_device_ordinal("t", -1, 8), Contains("device -1 does not exist"));
  CHECK_THROWS_WITH(check_device_ordinal("t", 0, 0), Contains("no CUDA device"));
  CHECK_THROWS_WITH(check_device_list("t", {}, 2), Contains("empty"));
  CHECK_THROWS_WITH(check_device_list("t", {0, 1, 0}, 2), Contains("listed twice"));
  CHECK_NOTHROW(check_device_list("t", {1, 0}, 2));
}

TEST_CASE("Functions that take devices refuse a bad one with std::invalid_argument", "[cpu]") {
  // On any machine, a GPU with ordinal 1000 does not exist; with no GPU, none does.
  lesson09::PipelineConfig c;
  CHECK_THROWS_AS(run_replicas({1000}, c, 0.0), std::invalid_argument);
  CHECK_THROWS_AS(run_replicas({}, c, 0.0), std::invalid_argument);
  CHECK_THROWS_AS(NcclGroup({1000}), std::invalid_argument);
  CHECK_THROWS_WITH(NcclGroup(std::vector<int>{}), Contains("empty"));
  CHECK_THROWS_AS(cross_device_handoff(0, 1000, 1, 0), std::invalid_argument);
  CHECK_THROWS_AS(compare_peer_and_staged(1000, 0, 1024, 1), std::invalid_argument);
  CHECK_THROWS_AS(ScopedDevice(1000), std::invalid_argument);
}

TEST_CASE("CUDA_VISIBLE_DEVICES: renumbered in list order, read up to the first invalid entry",
          "[cpu]") {
  CHECK(visible_device_count("", 8) == 0);
  CHECK(visible_device_count("0", 8) == 1);
  CHECK(visible_device_count("3,1", 8) == 2);
  CHECK(visible_device_count("0,1,2,3,4,5,6,7", 8) == 8);
  CHECK(visible_device_count("0,8,1", 8) == 1);  // 8 does not exist: 1 after it is not seen
  CHECK(visible_device_count("8,0", 8) == 0);
  CHECK(visible_device_count("0,-1,1", 8) == 1);
  CHECK(visible_device_count("0,x", 8) == 1);
  CHECK(visible_device_count("0, 1", 8) == 1);  // a space makes the entry invalid
  CHECK_FALSE(visible_device_count("GPU-6f1c", 8).has_value());
  CHECK_FALSE(visible_device_count("0,0", 8).has_value());
}

TEST_CASE("nvidia-smi topo -m: the GPU x GPU matrix", "[cpu]") {
  // An 8 x H200 HGX board (NVLink through NVSwitch: every pair NV18), abridged.
  const std::string hgx =
      "\tGPU0\tGPU1\tGPU2\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
      "GPU0\t X \tNV18\tNV18\tPXB\t0-47\t0\t\tN/A\n"
      "GPU1\tNV18\t X \tNV18\tSYS\t0-47\t0\t\tN/A\n"
      "GPU2\tNV18\tNV18\t X \tSYS\t48-95\t1\t\tN/A\n"
      "NIC0\tPXB\tSYS\tSYS\t X \n\n"
      "Legend:\n\n  X    = Self\n  NV#  = Connection traversing a bonded set of # NVLinks\n";
  const auto m = parse_topology(hgx);
  REQUIRE(m.size() == 3);
  REQUIRE(m[0].size() == 3);
  CHECK(m[0][0].kind == "X");
  CHECK(m[0][1].kind == "NV");
  CHECK(m[0][1].nvlinks == 18);
  CHECK(m[2][1].nvlinks == 18);
  const auto pcie = parse_topology("\tGPU0\tGPU1\nGPU0\t X \tSYS\nGPU1\tSYS\t X \n");
  CHECK(pcie[1][0].kind == "SYS");
  CHECK(pcie[1][0].nvlinks == 0);
  CHECK_THROWS_AS(parse_topology("no matrix here"), std::invalid_argument);
  // What nvidia-smi printed on the H200 host, header underlined with ANSI escapes.
  const std::string underlined = "\x1b[4m\tGPU0\tCPU Affinity\x1b[0m\nGPU0\t X \t0-15\n";
  CHECK(strip_ansi(underlined) == "\tGPU0\tCPU Affinity\nGPU0\t X \t0-15\n");
  CHECK(parse_topology(strip_ansi(underlined)).size() == 1);
  CHECK(strip_ansi("plain") == "plain");
  CHECK(strip_ansi("\x1b[") == "");  // a truncated sequence is dropped, not read past the end
  CHECK_THROWS_AS(parse_topology("\tGPU0\tGPU1\nGPU0\t X \tWAT\n"), std::invalid_argument);
}

TEST_CASE("Link ceilings: NVLink links x rate, PCIe rate x lanes x encoding", "[cpu]") {
  CHECK(nvlink_gbps(18, 4) == Approx(450.0));  // H100 / H200 SXM
  CHECK(nvlink_gbps(12, 3) == Approx(300.0));  // A100 SXM
  CHECK(nvlink_gbps(18, 5) == Approx(900.0));  // B200
  CHECK_THROWS_AS(nvlink_gbps(0, 4), std::invalid_argument);
  CHECK_THROWS_AS(nvlink_gbps(4, 1), std::invalid_argument);
  CHECK(nvlink_gen_of(9, 0) == 4);
  CHECK(nvlink_gen_of(8, 9) == 0);
  CHECK(pcie_gbps(32.0, 16) == Approx(63.015).epsilon(1e-4));  // gen 5 x16
  CHECK(pcie_gbps(16.0, 16) == Approx(31.508).epsilon(1e-4));  // gen 4 x16
  CHECK(pcie_gbps(5.0, 16) == Approx(8.0));                    // gen 2 x16, 8b/10b
  CHECK_THROWS_AS(pcie_gbps(0, 16), std::invalid_argument);
  CHECK(parse_link_speed("32.0 GT/s PCIe\n") == Approx(32.0));
  CHECK(parse_link_speed("16 GT/s") == Approx(16.0));
  CHECK_FALSE(parse_link_speed("Unknown").has_value());
}

TEST_CASE("partition: the split of N or K over GPUs, and what is refused", "[cpu][ex1]") {
  SECTION("even: 4096 over 2 and 4") {
    const Partition p = partition(4096, 2, 8);
    CHECK(p.offset == std::vector<int>{0, 2048});
    CHECK(p.size == std::vector<int>{2048, 2048});
    CHECK(p.even());
    CHECK(partition(4096, 4, 8).size == std::vector<int>{1024, 1024, 1024, 1024});
  }
  SECTION("uneven, every part starting on a multiple of the alignment") {
    const Partition p = partition(4096, 3, 8);
    CHECK(p.size == std::vector<int>{1368, 1368, 1360});
    CHECK(p.offset == std::vector<int>{0, 1368, 2736});
    CHECK_FALSE(p.even());
    CHECK(p.max_size() == 1368);
    CHECK(partition(520, 2, 8).size == std::vector<int>{264, 256});
    CHECK(partition(1000, 2, 8).size == std::vector<int>{504, 496});
    CHECK(partition(7, 3, 1).size == std::vector<int>{3, 3, 1});
  }
  SECTION("one part, and parts of one element") {
    CHECK(partition(1, 1, 8).size == std::vector<int>{1});
    CHECK(partition(5, 5, 1).size == std::vector<int>{1, 1, 1, 1, 1});
  }
  SECTION("refused: a part would be empty, or a bad argument") {
    CHECK_THROWS_AS(partition(10, 4, 8), std::invalid_argument);  // 3 x 8 = 24 > 10
    CHECK_THROWS_AS(partition(8, 2, 8), std::invalid_argument);   // 8 + 0
    CHECK_THROWS_WITH(partition(10, 4, 8), Contains("multiples of 8"));
    CHECK_THROWS_AS(partition(0, 2, 8), std::invalid_argument);
    CHECK_THROWS_AS(partition(16, 0, 8), std::invalid_argument);
    CHECK_THROWS_AS(partition(16, 2, 0), std::invalid_argument);
  }
  SECTION("the parts cover [0, n) without a gap, whatever n") {
    for (int n = 1; n <= 300; ++n) {
      for (int parts = 1; parts <= 8; ++parts) {
        Partition p;
        try {
          p = partition(n, parts, 8);
        } catch (const std::invalid_argument&) {
          CHECK(n <= (parts - 1) * (((n + parts - 1) / parts + 7) / 8 * 8));
          continue;
        }
        int next = 0;
        for (int i = 0; i < parts; ++i) {
          CHECK(p.offset[static_cast<std::size_t>(i)] == next);
          CHECK(p.offset[static_cast<std::size_t>(i)] % 8 == 0);
          CHECK(p.size[static_cast<std::size_t>(i)] >= 1);
          next += p.size[static_cast<std::size_t>(i)];
        }
        CHECK(next == n);
      }
    }
  }
}

TEST_CASE("Bus bandwidth as nccl-tests defines it, against hand-computed numbers", "[cpu][ex2]") {
  // doc/PERFORMANCE.md: all-reduce busbw = algbw x 2(n-1)/n, all-gather busbw = algbw x (n-1)/n.
  CHECK(allreduce_bus_factor(1) == 0.0);
  CHECK(allreduce_bus_factor(2) == Approx(1.0));
  CHECK(allreduce_bus_factor(4) == Approx(1.5));
  CHECK(allreduce_bus_factor(8) == Approx(1.75));
  CHECK(allgather_bus_factor(1) == 0.0);
  CHECK(allgather_bus_factor(2) == Approx(0.5));
  CHECK(allgather_bus_factor(8) == Approx(0.875));
  CHECK_THROWS_AS(allreduce_bus_factor(0), std::invalid_argument);
  CHECK_THROWS_AS(allgather_bus_factor(-1), std::invalid_argument);
  // 1 GiB in 10 ms: algbw 107.374 GB/s; all-reduce on 8 GPUs 187.90 GB/s, all-gather 93.95.
  const std::size_t gib = 1u << 30;
  CHECK(algbw_gbps(gib, 0.01) == Approx(107.3741824));
  CHECK(allreduce_busbw_gbps(gib, 0.01, 8) == Approx(187.9048192));
  CHECK(allgather_busbw_gbps(gib, 0.01, 8) == Approx(93.9524096));
  CHECK(allreduce_busbw_gbps(gib, 0.01, 2) == Approx(107.3741824));
  CHECK_THROWS_AS(algbw_gbps(0, 1.0), std::invalid_argument);
  CHECK_THROWS_AS(algbw_gbps(16, 0.0), std::invalid_argument);
}

TEST_CASE("Scaling efficiency and the split-sum error bound", "[cpu]") {
  CHECK(scaling_efficiency(1000, 1900, 2) == Approx(0.95));
  CHECK(scaling_efficiency(1000, 1000, 1) == Approx(1.0));
  CHECK_THROWS_AS(scaling_efficiency(0, 1, 2), std::invalid_argument);
  CHECK_THROWS_AS(scaling_efficiency(1, 1, 0), std::invalid_argument);
  // gamma_4096 = 4096 u / (1 - 4096 u), u = 2^-24: 2^-12 / (1 - 2^-12) = 2.4420024e-4.
  CHECK(fp32_sum_error_bound(4096, 1.0) == Approx(2.4420024e-4).epsilon(1e-5));
  CHECK(split_vs_single_bound(4096, 3.0) == Approx(6 * 2.4420024e-4).epsilon(1e-5));
  CHECK(fp32_sum_error_bound(0, 5.0) == 0.0);
  CHECK_THROWS_AS(fp32_sum_error_bound(-1, 1.0), std::invalid_argument);
  CHECK_THROWS_AS(fp32_sum_error_bound(1 << 24, 1.0), std::invalid_argument);
}

TEST_CASE("gather_layout: where each rank's elements land in an uneven all-gather", "[cpu][ex4]") {
  SECTION("uneven, with a rank that contributes nothing") {
    const GatherLayout l = gather_layout({3, 0, 5, 2});
    CHECK(l.count == std::vector<std::size_t>{3, 0, 5, 2});
    CHECK(l.displ == std::vector<std::size_t>{0, 3, 3, 8});
    CHECK(l.total == 10);
  }
  SECTION("one rank") {
    const GatherLayout l = gather_layout({7});
    CHECK(l.displ == std::vector<std::size_t>{0});
    CHECK(l.total == 7);
  }
  SECTION("the column-parallel gather: M rows of column blocks 1368, 1368, 1360") {
    const std::size_t M = 130;
    const GatherLayout l = gather_layout({M * 1368, M * 1368, M * 1360});
    CHECK(l.displ == std::vector<std::size_t>{0, M * 1368, M * 2736});  // M x column offset
    CHECK(l.total == M * 4096);
  }
  SECTION("every prefix, against a running sum") {
    std::vector<std::size_t> counts;
    for (std::size_t r = 0; r < 8; ++r) counts.push_back((r * 37 + 11) % 13);
    const GatherLayout l = gather_layout(counts);
    REQUIRE(l.displ.size() == counts.size());
    std::size_t at = 0;
    for (std::size_t r = 0; r < counts.size(); ++r) {
      CHECK(l.displ[r] == at);
      at += counts[r];
    }
    CHECK(l.total == at);
  }
  SECTION("refused: no ranks, a total past SIZE_MAX") {
    CHECK_THROWS_AS(gather_layout({}), std::invalid_argument);
    const std::size_t big = std::numeric_limits<std::size_t>::max() / 2 + 1;
    CHECK_THROWS_AS(gather_layout({big, big}), std::invalid_argument);
    CHECK_NOTHROW(gather_layout({big, big - 1}));
  }
}

TEST_CASE("NcclGroup refuses a timeout under 1 ms before touching a device", "[cpu]") {
  CHECK_THROWS_WITH(NcclGroup({0}, NcclInit::one_thread, std::chrono::milliseconds(0)),
                    Contains("timeout must be at least 1 ms"));
  CHECK_THROWS_AS(NcclGroup({0}, NcclInit::thread_per_device, std::chrono::milliseconds(-5)),
                  std::invalid_argument);
}

CHILD_PROBE(nvls_setting) {
  report("nvls", nccl_disable_nvls());
  return 0;
}

TEST_CASE("NCCL_NVLS_ENABLE is set to 0 unless the user set it", "[cpu]") {
  CHECK(run_child_probe_ok("nvls_setting").value("nvls") == "0");
  CHECK(run_child_probe_ok("nvls_setting", {"NCCL_NVLS_ENABLE=0"}).value("nvls") == "0");
  // A value the user set is kept (and printed by the binary, so it can be seen).
  CHECK(run_child_probe_ok("nvls_setting", {"NCCL_NVLS_ENABLE=2"}).value("nvls") == "2");
}

TEST_CASE("NCCL errors name the call and NCCL's own text", "[cpu]") {
  INFO(nccl_build_note());
  CHECK_NOTHROW(check_nccl(0, "ncclAllReduce(...)", "f.cpp", 1));
  try {
    check_nccl(4, "ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, comm, stream)", "f.cpp", 12);
    FAIL("check_nccl did not throw");
  } catch (const NcclError& e) {
    CHECK(e.code() == 4);
    const std::string what = e.what();
    CHECK_THAT(what, Contains("ncclAllReduce(buf") && Contains("f.cpp:12"));
    if (nccl_available()) {
      CHECK_THAT(what, Contains("ncclInvalidArgument") && Contains("invalid argument"));
    } else {
      CHECK_THAT(what, Contains("NCCL not found at build time"));
    }
  }
  if (!nccl_available()) {
    CHECK_THAT(nccl_build_note(), Contains("NCCL not found at build time"));
  }
}

TEST_CASE("The replica check finds wrong, repeated and missing frames", "[cpu]") {
  lesson09::PipelineConfig c;
  c.frames = 6;
  const lesson09::SyntheticVideo video(c.frame_width, c.frame_height, c.num_classes);
  lesson09::RunReport r;
  for (std::int64_t k = 0; k < c.frames; ++k) {
    lesson09::FrameResult f;
    f.frame = k;
    for (const lesson09::TruthBox& t : video.truth(k)) {
      f.detections.push_back({t.box, 0.95f, t.class_id, 0});
    }
    r.results.push_back(f);
  }
  CHECK(check_replica(r, c).ok());
  SECTION("a dropped frame is accounted for") {
    r.dropped.push_back(5);
    r.results.pop_back();
    CHECK(check_replica(r, c).ok());
  }
  SECTION("missing") {
    r.results.pop_back();
    CHECK(check_replica(r, c).missing == 1);
  }
  SECTION("repeated") {
    r.results.push_back(r.results.front());
    CHECK(check_replica(r, c).repeated == 1);
  }
  SECTION("wrong boxes") {
    r.results[2].detections.front().box.x1 += 200;
    const ReplicaCheck k = check_replica(r, c);
    CHECK(k.wrong == 1);
    CHECK_THAT(k.first_problem, Contains("frame 2"));
  }
}

TEST_CASE("chunk_rows: M rows in min(chunks, M) contiguous chunks, sizes within one row",
          "[cpu][fp16]") {
  CHECK(chunk_rows(4096, 4).size == std::vector<int>{1024, 1024, 1024, 1024});
  CHECK(chunk_rows(4096, 4).offset == std::vector<int>{0, 1024, 2048, 3072});
  CHECK(chunk_rows(33, 4).size == std::vector<int>{9, 8, 8, 8});
  CHECK(chunk_rows(33, 4).offset == std::vector<int>{0, 9, 17, 25});
  CHECK(chunk_rows(256, 3).size == std::vector<int>{86, 85, 85});
  // M = 1 cannot be cut: chunks clamps to M.
  CHECK(chunk_rows(1, 4).size == std::vector<int>{1});
  CHECK(chunk_rows(3, 10).size == std::vector<int>{1, 1, 1});
  CHECK(chunk_rows(32, 1).size == std::vector<int>{32});
  for (int M = 1; M <= 70; ++M) {
    for (int chunks = 1; chunks <= 9; ++chunks) {
      const Partition p = chunk_rows(M, chunks);
      REQUIRE(p.size.size() == static_cast<std::size_t>(std::min(M, chunks)));
      int next = 0;
      for (std::size_t i = 0; i < p.size.size(); ++i) {
        CHECK(p.offset[i] == next);
        CHECK(p.size[i] >= 1);
        CHECK(p.size[i] - p.size.back() <= 1);
        next += p.size[i];
      }
      CHECK(next == M);
    }
  }
  CHECK_THROWS_WITH(chunk_rows(32, 0), Contains("chunks >= 1"));
  CHECK_THROWS_AS(chunk_rows(0, 2), std::invalid_argument);
}

TEST_CASE("The FP16 split's error bound: lesson 10's for one share, more roundings for more",
          "[cpu][fp16]") {
  const double u_half = std::ldexp(1.0, -11), sub = std::ldexp(1.0, -25);
  // One share (column-parallel, or one rank) is lesson 10's bound for an FP16 C.
  const PartialSum whole{4096, 20.0, 1000.0};
  const double one = lesson10::tensor_gemm_error_bound(
      4096, 1.0, 1000.0, 0.0, 0.0, 0.0, lesson10::Activation::none, lesson10::DType::f16, 20.0);
  CHECK(fp16_tp_error_bound({whole}) == one);
  // By hand: (K + 3) 2^-23 sum|ab| + 2^-11 (|exact| + that) + 2^-25.
  const double acc = 4099 * std::ldexp(1.0, -23) * 1000.0;
  CHECK(one == Approx(acc + u_half * (20.0 + acc) + sub).epsilon(1e-12));
  // Two shares: each partial's own bound, plus one FP16 addition of at most their sum.
  const PartialSum p0{2048, 12.0, 500.0}, p1{2048, 8.0, 500.0};
  const auto share = [](const PartialSum& p) {
    return lesson10::tensor_gemm_error_bound(p.terms, 1.0, p.abs_sum, 0.0, 0.0, 0.0,
                                             lesson10::Activation::none, lesson10::DType::f16,
                                             p.exact);
  };
  const double e0 = share(p0), e1 = share(p1);
  CHECK(fp16_tp_error_bound({p0, p1}) ==
        Approx(e0 + e1 + u_half * (12.0 + e0 + 8.0 + e1) + sub).epsilon(1e-12));
  // Split, each FP32 sum is shorter (its accumulation term smaller: here the split's bound is
  // the smaller one), but the element is rounded to FP16 three times instead of once: where the
  // FP16 roundings dominate (short sums, as in practice) the split's bound is the larger.
  CHECK(fp16_tp_error_bound({p0, p1}) < fp16_tp_error_bound({whole}));
  const PartialSum short_whole{64, 20.0, 40.0}, s0{32, 12.0, 20.0}, s1{32, 8.0, 20.0};
  CHECK(fp16_tp_error_bound({s0, s1}) > 1.5 * fp16_tp_error_bound({short_whole}));
  const PartialSum q{1024, 5.0, 250.0};
  CHECK(fp16_tp_error_bound({q, q, q, q}) > fp16_tp_error_bound({q, q}));
  CHECK_THROWS_AS(fp16_tp_error_bound({}), std::invalid_argument);
  CHECK_THROWS_AS(fp16_tp_error_bound({PartialSum{-1, 0.0, 0.0}}), std::invalid_argument);
  CHECK_THROWS_AS(fp16_tp_error_bound({PartialSum{8, 0.0, -1.0}}), std::invalid_argument);
}

TEST_CASE("reference_shares: FP64 partial sums over a split of K add up to the whole",
          "[cpu][fp16]") {
  const int M = 3, N = 16, K = 40;
  const auto A = to_float(to_half(random_matrix(M, K, 7)));
  const auto B = to_float(to_half(random_matrix(K, N, 8)));
  const Partition whole = partition(K, 1, 1), split = partition(K, 3, 8);  // 16 + 16 + 8
  for (int m = 0; m < M; ++m) {
    for (int n = 0; n < N; n += 5) {
      double abs_sum = 0;
      const double want = lesson10::reference_element(N, K, A.data(), B.data(), m, n, &abs_sum);
      const auto one = reference_shares(A, B, M, N, K, whole, m, n);
      REQUIRE(one.size() == 1);
      CHECK(one[0].terms == K);
      CHECK(one[0].exact == Approx(want).epsilon(1e-12));
      CHECK(one[0].abs_sum == Approx(abs_sum).epsilon(1e-12));
      const auto three = reference_shares(A, B, M, N, K, split, m, n);
      REQUIRE(three.size() == 3);
      CHECK(three[2].terms == 8);
      CHECK(three[0].exact + three[1].exact + three[2].exact == Approx(want).epsilon(1e-12));
    }
  }
  CHECK_THROWS_AS(reference_shares(A, B, M, N, K, whole, M, 0), std::invalid_argument);
  CHECK_THROWS_AS(reference_shares(A, B, M, N, K + 8, whole, 0, 0), std::invalid_argument);
  CHECK_THROWS_AS(reference_shares(A, B, M, N, K, partition(K + 8, 1, 1), 0, 0),
                  std::invalid_argument);
}

TEST_CASE("hidden_fraction: the part of the communication the overlap hid", "[cpu][fp16]") {
  CHECK(hidden_fraction(1.5, 1.0, 0.5) == Approx(1.0));   // all of it
  CHECK(hidden_fraction(1.5, 1.25, 0.5) == Approx(0.5));  // half
  CHECK(hidden_fraction(1.5, 1.7, 0.5) == 0.0);           // chunking cost more than it hid
  CHECK(hidden_fraction(2.0, 0.5, 0.5) == 1.0);           // clamped: never more than all
  CHECK(hidden_fraction(1.0, 1.0, 0.0) == 0.0);           // nothing to hide
  CHECK_THROWS_AS(hidden_fraction(-1.0, 1.0, 0.5), std::invalid_argument);
  CHECK_THROWS_AS(hidden_fraction(1.0, std::nan(""), 0.5), std::invalid_argument);
}

// ================================================================================ one GPU

CHILD_PROBE(one_device_facts) {
  const int n = device_count();
  report("count", n);
  report("new_thread_device", new_thread_device());
  course::DeviceBuffer<float> buf(16);
  report("pointer_device", pointer_device(buf.data()));
  course::Stream s;
  report("stream_device", stream_device(s));
  const cudaError_t e = cudaSetDevice(n);  // one past the last
  report("set_invalid", course::describe(e).substr(0, course::describe(e).find(' ')));
  (void)cudaGetLastError();
  try {
    ScopedDevice bad(n);
    report("scoped_invalid", "no exception");
  } catch (const std::invalid_argument&) {
    report("scoped_invalid", "invalid_argument");
  }
  return 0;
}

TEST_CASE("One device: a new thread, memory and a stream are on device 0; a bad index is refused",
          "[gpu]") {
  const auto c = run_child_probe_ok("one_device_facts");
  CHECK(c.value("new_thread_device") == "0");
  CHECK(c.value("pointer_device") == "0");
  CHECK(c.value("stream_device") == "0");
  CHECK(c.value("set_invalid") == "cudaErrorInvalidDevice");
  CHECK(c.value("scoped_invalid") == "invalid_argument");
}

CHILD_PROBE(visible_count) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  report("count", e == cudaSuccess ? n : 0);
  return 0;
}

TEST_CASE("CUDA_VISIBLE_DEVICES: the runtime agrees with visible_device_count",
          "[gpu][provokes-error]") {
  // Indices that exist on any machine with a GPU (0) and on none (99999): the answers do not
  // depend on how many GPUs there are. [provokes-error]: the children that see no device get
  // cudaErrorNoDevice on purpose, and under compute-sanitizer (which follows child processes)
  // the child given an empty CUDA_VISIBLE_DEVICES saw 1 device on the H200, so the sanitizer
  // runs leave this test out.
  for (const std::string v : {"", "0", "0,99999", "99999,0", "0,-1", "-1"}) {
    INFO("CUDA_VISIBLE_DEVICES=" << v);
    const auto c = run_child_probe_ok("visible_count", {"CUDA_VISIBLE_DEVICES=" + v});
    const auto want = visible_device_count(v, 64);
    REQUIRE(want.has_value());
    CHECK(std::stoi(c.value("count")) == *want);
  }
}

TEST_CASE("Two streams of one GPU: the consumer waits for the producer's event", "[gpu][ex3]") {
  // The producer spins 50 ms before it writes; without the wait the consumer reads 0.
  const Handoff h = cross_device_handoff(0, 0, 42, 50000);
  CHECK(h.consumer_read == 42);
  CHECK(h.flag_at_wait_return == 0);  // the wait is on the GPU: the host went on at once
  CHECK(cross_device_handoff(0, 0, 7, 0).consumer_read == 7);
}

TEST_CASE("Copies on one GPU: peer copy to itself (device to device) and staged", "[gpu]") {
  const CopyComparison c = compare_peer_and_staged(0, 0, 16u << 20, 2);
  CHECK_FALSE(c.peer_access);
  CHECK(c.peer_correct);
  CHECK(c.staged_correct);
  CHECK(c.peer_gbps > 0);
  CHECK(c.staged_gbps > 0);
  CHECK_THROWS_AS(compare_peer_and_staged(0, 0, 6, 1), std::invalid_argument);
}

TEST_CASE("NCCL on one GPU: a one-rank communicator; all-reduce and all-gather are the identity",
          "[gpu][nccl]") {
  if (!nccl_available()) {
    WARN(nccl_build_note());
    return;
  }
  NcclGroup group({0});
  CHECK(group.size() == 1);
  std::vector<float> host(1000);
  for (std::size_t i = 0; i < host.size(); ++i) host[i] = 0.5f * static_cast<float>(i) - 3.0f;
  ScopedDevice on(0);
  course::DeviceBuffer<float> buf = course::to_device(host), gathered(host.size());
  all_reduce_sum(group, {buf.data()}, host.size());
  all_gather(group, {buf.data()}, {gathered.data()}, host.size());
  group.synchronize();
  CHECK(course::to_host(buf) == host);
  CHECK(course::to_host(gathered) == host);
  const CollectiveTiming t = time_collective(group, Collective::all_reduce, 1u << 20, 3);
  CHECK(t.seconds > 0);
  CHECK(t.busbw_gbps == 0.0);  // one rank: nothing crosses a link
  CHECK_THROWS_AS(time_collective(group, Collective::all_gather, 6, 1), std::invalid_argument);
  CHECK_THROWS_AS(all_reduce_sum(group, {}, 1), std::invalid_argument);
#ifdef COURSE_HAVE_NCCL
  // A datatype NCCL does not have: refused at the call, as ncclInvalidArgument.
  try {
    check_nccl(ncclAllReduce(buf.data(), buf.data(), 1, static_cast<ncclDataType_t>(99), ncclSum,
                             group.comm(0), group.stream(0)),
               "ncclAllReduce", __FILE__, __LINE__);
    FAIL("ncclAllReduce accepted datatype 99");
  } catch (const NcclError& e) {
    CHECK_THAT(std::string(e.what()), Contains("ncclAllReduce") && Contains("ncclInvalidArgument"));
  }
#endif
}

TEST_CASE("Tensor-parallel GEMM on one rank equals the one-GPU GEMM exactly", "[gpu][nccl]") {
  if (!nccl_available()) {
    WARN(nccl_build_note());
    return;
  }
  const int M = 96, N = 136, K = 200;
  const auto A = random_matrix(M, K, 1), B = random_matrix(K, N, 2);
  const std::vector<float> one = single_gpu_gemm(0, M, N, K, A, B, 0, nullptr);
  NcclGroup group({0});
  for (TpMode mode : {TpMode::column_parallel, TpMode::row_parallel}) {
    INFO(to_string(mode));
    const TpResult r = tensor_parallel_gemm(group, mode, M, N, K, A, B, 0);
    REQUIRE(r.c.size() == 1);
    CHECK(r.c[0] == one);  // one rank: the same kernel on the same data, the collective a copy
  }
  CHECK_THROWS_AS(tensor_parallel_gemm(group, TpMode::row_parallel, M, N, K, A, {}, 0),
                  std::invalid_argument);
}

TEST_CASE("FP16 tensor-parallel GEMM on one rank equals lesson 10's GEMM bit for bit",
          "[gpu][nccl][fp16][ex4]") {
  if (!nccl_available()) {
    WARN(nccl_build_note());
    return;
  }
  if (!fp16_gemm_runs({0})) return;
  // 8-multiples off every tile: M 33, N 200, K 520.
  const int M = 33, N = 200, K = 520;
  const auto A = to_half(random_matrix(M, K, 21)), B = to_half(random_matrix(K, N, 22));
  NcclGroup group({0});
  for (int version : fp16_versions({0})) {
    ScopedDevice on(0);
    const course::DeviceBuffer<__half> a = course::to_device(A), b = course::to_device(B);
    course::DeviceBuffer<__half> c(static_cast<std::size_t>(M) * N);
    lesson10::tensor_gemm<__half, __half>(version, M, N, K, 1.0f, a.data(), b.data(), 0.0f,
                                          c.data());
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<__half> one = course::to_host(c);
    for (TpMode mode : {TpMode::column_parallel, TpMode::row_parallel}) {
      for (int chunks : {1, 3}) {
        INFO("v" << version << ", " << to_string(mode) << ", chunks " << chunks);
        const TpFp16Result r =
            tensor_parallel_gemm_fp16(group, mode, M, N, K, A, B, chunks, version);
        CHECK(r.gemm_version == version);
        REQUIRE(r.c.size() == 1);
        // One rank: the same kernel on the same rows; the collective a copy (or nothing).
        CHECK(bits(r.c[0]) == bits(one));
      }
    }
  }
  // The default is the best version the GPU has.
  const TpFp16Result d =
      tensor_parallel_gemm_fp16(group, TpMode::column_parallel, M, N, K, A, B, 2);
  CHECK(d.gemm_version == fp16_versions({0}).back());
  CHECK(d.gemm_version == best_tp_gemm_version(group));
}

TEST_CASE("FP16 tensor-parallel GEMM on every GPU present against an FP64 reference, chunked",
          "[gpu][nccl][fp16][ex4]") {
  if (!nccl_available()) {
    WARN(nccl_build_note());
    return;
  }
  const std::vector<int> devices = all_devices();
  if (!fp16_gemm_runs(devices)) return;
  const int g = static_cast<int>(devices.size());
  // N and K multiples of 8 but of no tile (128, 256, 64), and splittable over 1..8 GPUs.
  const int N = 520, K = 1000;
  NcclGroup group(devices);
  const std::vector<int> versions = fp16_versions(devices);
  for (int M : {1, 32, 33, 256}) {
    const auto A = to_half(random_matrix(M, K, 30 + static_cast<unsigned>(M)));
    const auto B = to_half(random_matrix(K, N, 31));
    const auto Af = to_float(A), Bf = to_float(B);
    for (TpMode mode : {TpMode::column_parallel, TpMode::row_parallel}) {
      const bool column = mode == TpMode::column_parallel;
      const Fp16Oracle oracle =
          fp16_oracle(Af, Bf, M, N, K, column ? partition(K, 1, 1) : partition(K, g, kSplitAlign));
      for (int version : versions) {
        std::vector<__half> serial;
        for (int chunks : {1, 2, 3, 4, M + 5}) {
          INFO("M " << M << ", " << to_string(mode) << ", v" << version << ", chunks " << chunks
                    << ", " << g << " rank(s)");
          const TpFp16Result r =
              tensor_parallel_gemm_fp16(group, mode, M, N, K, A, B, chunks, version);
          REQUIRE(r.c.size() == static_cast<std::size_t>(g));
          CHECK(r.chunks.size.size() == static_cast<std::size_t>(std::min(chunks, M)));
          for (int rank = 0; rank < g; ++rank) {
            double worst = 0;
            const int bad = outside_fp16_bound(r.c[static_cast<std::size_t>(rank)], oracle, &worst);
            INFO("rank " << rank << ": worst |diff| / bound " << worst);
            CHECK(bad == 0);
            // Every rank holds the same C after the collective.
            CHECK(bits(r.c[static_cast<std::size_t>(rank)]) == bits(r.c[0]));
          }
          if (chunks == 1) {
            serial = r.c[0];
          } else if (column || g == 1) {
            // A row chunk changes no element's sum: the same K loop, the gather a copy. (Row-
            // parallel over several ranks: NCCL may choose another algorithm for another size,
            // and over 3+ ranks another order of the additions: within the bound, not bitwise.)
            CHECK(bits(r.c[0]) == bits(serial));
          }
        }
      }
    }
  }
}

TEST_CASE("FP16 tensor-parallel GEMM refuses bad input with std::invalid_argument",
          "[gpu][nccl][fp16]") {
  if (!nccl_available()) {
    WARN(nccl_build_note());
    return;
  }
  NcclGroup group({0});
  const int M = 4, N = 16, K = 24;
  const auto A = to_half(random_matrix(M, K, 1)), B = to_half(random_matrix(K, N, 2));
  const auto col = TpMode::column_parallel;
  CHECK_THROWS_WITH(tensor_parallel_gemm_fp16(group, col, M, N, K, A, B, 0),
                    Contains("chunks must be >= 1"));
  const auto B12 = to_half(random_matrix(K, 12, 3)), A12 = to_half(random_matrix(M, 12, 4));
  CHECK_THROWS_WITH(tensor_parallel_gemm_fp16(group, col, M, 12, K, A, B12, 1),
                    Contains("multiples of 8") && Contains("N = 12"));
  CHECK_THROWS_WITH(tensor_parallel_gemm_fp16(group, TpMode::row_parallel, M, N, 12, A12,
                                              to_half(random_matrix(12, N, 5)), 1),
                    Contains("multiples of 8") && Contains("K = 12"));
  CHECK_THROWS_WITH(tensor_parallel_gemm_fp16(group, col, M, N, K, A, A, 1),
                    Contains("B K x N = 384") && Contains("got 96 and 96"));
  CHECK_THROWS_WITH(tensor_parallel_gemm_fp16(group, col, M + 1, N, K, A, B, 1),
                    Contains("M x K = 120"));
  CHECK_THROWS_AS(tensor_parallel_gemm_fp16(group, col, 0, N, K, {}, B, 1), std::invalid_argument);
  CHECK_THROWS_AS(tensor_parallel_gemm_fp16(group, col, M, N, K, A, B, 1, 9),
                  std::invalid_argument);
  CHECK_THROWS_WITH(time_tensor_parallel_fp16(group, col, M, N, K, 2, 0), Contains("reps"));
  CHECK_THROWS_AS(time_tensor_parallel_fp16(group, col, M, N, K, 0, 1), std::invalid_argument);
  // The FP16 collectives: one buffer per rank; the gather's counts even (4-byte words).
  ScopedDevice on(0);
  course::DeviceBuffer<__half> buf(64), out(64);
  CHECK_THROWS_AS(all_reduce_sum_fp16(group, {}, 8), std::invalid_argument);
  CHECK_THROWS_WITH(all_gather_uneven_fp16(group, {buf.data()}, {out.data()}, {7}),
                    Contains("must be even"));
  CHECK_THROWS_WITH(all_gather_uneven_fp16(group, {buf.data() + 1}, {out.data()}, {8}),
                    Contains("4-byte aligned"));
  CHECK_FALSE(group.aborted());
}

TEST_CASE("FP16 collectives on every GPU present: the sum in ncclHalf, the gather of halves",
          "[gpu][nccl][fp16][ex4]") {
  if (!nccl_available()) {
    WARN(nccl_build_note());
    return;
  }
  const std::vector<int> devices = all_devices();
  const int g = static_cast<int>(devices.size());
  NcclGroup group(devices);
  const std::size_t n = 1030;  // not a multiple of anything NCCL chunks by
  std::vector<course::DeviceBuffer<__half>> sum, send, recv;
  std::vector<__half*> sp, rp;
  std::vector<const __half*> gp;
  std::vector<std::size_t> counts;
  std::vector<float> want_gather;
  for (int r = 0; r < g; ++r) {
    ScopedDevice on(devices[static_cast<std::size_t>(r)]);
    std::vector<float> v(n), part(n - 2 * static_cast<std::size_t>(r));
    for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>((r + 1) * (i % 16));
    for (std::size_t i = 0; i < part.size(); ++i) part[i] = static_cast<float>(r * 100 + i % 97);
    want_gather.insert(want_gather.end(), part.begin(), part.end());
    counts.push_back(part.size());
    sum.push_back(course::to_device(to_half(v)));
    send.push_back(course::to_device(to_half(part)));
    sp.push_back(sum.back().data());
    gp.push_back(send.back().data());
  }
  for (int r = 0; r < g; ++r) {
    ScopedDevice on(devices[static_cast<std::size_t>(r)]);
    recv.emplace_back(want_gather.size());
    rp.push_back(recv.back().data());
  }
  all_reduce_sum_fp16(group, sp, n);
  all_gather_uneven_fp16(group, gp, rp, counts);
  group.synchronize();
  // Exact in FP16: integers below 2048, and so is every partial sum.
  std::vector<float> want_sum(n);
  for (std::size_t i = 0; i < n; ++i) want_sum[i] = static_cast<float>(g * (g + 1) / 2 * (i % 16));
  for (int r = 0; r < g; ++r) {
    ScopedDevice on(devices[static_cast<std::size_t>(r)]);
    CHECK(to_float(course::to_host(sum[static_cast<std::size_t>(r)])) == want_sum);
    CHECK(to_float(course::to_host(recv[static_cast<std::size_t>(r)])) == want_gather);
  }
}

TEST_CASE("FP16 communication against compute: every time measured, ideal and hidden derived",
          "[gpu][nccl][fp16]") {
  if (!nccl_available()) {
    WARN(nccl_build_note());
    return;
  }
  const std::vector<int> devices = all_devices();
  if (!fp16_gemm_runs(devices)) return;
  NcclGroup group(devices);
  for (TpMode mode : {TpMode::column_parallel, TpMode::row_parallel}) {
    INFO(to_string(mode));
    const TpBreakdown t = time_tensor_parallel_fp16(group, mode, 256, 1024, 1024, 4, 3);
    CHECK(t.chunks == 4);
    CHECK(t.gemm_version == best_tp_gemm_version(group));
    for (double ms : {t.compute_ms, t.compute_chunked_ms, t.comm_ms, t.serial_ms, t.overlapped_ms})
      CHECK(ms > 0);
    CHECK(t.ideal_ms == std::max(t.compute_ms, t.comm_ms));
    CHECK(t.hidden == hidden_fraction(t.serial_ms, t.overlapped_ms, t.comm_ms));
    CHECK(t.hidden >= 0);
    CHECK(t.hidden <= 1);
    // M = 1 cannot be chunked.
    CHECK(time_tensor_parallel_fp16(group, mode, 1, 1024, 1024, 4, 2, 4).chunks == 1);
  }
}

TEST_CASE("One replica of lesson 09's pipeline on GPU 0: every frame checked", "[gpu]") {
  lesson09::PipelineConfig c;
  c.frames = 60;
  c.workers = 2;
  const ReplicaRun run = run_replicas({0}, c, 0.0);
  REQUIRE(run.reports.size() == 1);
  const ReplicaCheck k = check_replica(run.reports[0], c);
  INFO(k.first_problem);
  CHECK(k.ok());
  CHECK(run.frames() == 60);
}

TEST_CASE("The uneven all-gather on every GPU present against a host oracle", "[gpu][nccl][ex4]") {
  if (!nccl_available()) {
    WARN(nccl_build_note());
    return;
  }
  // One GPU: a one-rank communicator, and the gather is a copy; several: the real thing.
  const std::vector<int> devices = all_devices();
  const int g = static_cast<int>(devices.size());
  for (NcclInit init : {NcclInit::one_thread, NcclInit::thread_per_device}) {
    INFO(to_string(init) << ", " << g << " rank(s)");
    NcclGroup group(devices, init);
    // Case 0: every rank a different count; case 1: rank 0 contributes nothing.
    for (int zero_first = 0; zero_first < 2; ++zero_first) {
      INFO("rank 0 contributes " << (zero_first ? "nothing" : "1000 floats"));
      std::vector<std::size_t> counts;
      for (int r = 0; r < g; ++r) counts.push_back(r == 0 && zero_first ? 0 : 1000 + 37 * r);
      // The oracle: the concatenation, built on the host without gather_layout.
      std::vector<std::vector<float>> host(static_cast<std::size_t>(g));
      std::vector<float> want;
      for (int r = 0; r < g; ++r) {
        for (std::size_t i = 0; i < counts[static_cast<std::size_t>(r)]; ++i) {
          host[static_cast<std::size_t>(r)].push_back(static_cast<float>(r * 100000 + i));
        }
        want.insert(want.end(), host[static_cast<std::size_t>(r)].begin(),
                    host[static_cast<std::size_t>(r)].end());
      }
      const std::size_t guard = 16;  // floats past the end that must stay untouched
      std::vector<float> filled(want.size() + guard, -1.0f);
      std::vector<course::DeviceBuffer<float>> send, recv;
      std::vector<const float*> sp;
      std::vector<float*> rp;
      for (int r = 0; r < g; ++r) {
        ScopedDevice on(devices[static_cast<std::size_t>(r)]);
        send.push_back(course::to_device(host[static_cast<std::size_t>(r)]));
        recv.push_back(course::to_device(filled));
        sp.push_back(send.back().data());
        rp.push_back(recv.back().data());
      }
      all_gather_uneven(group, sp, rp, counts);
      group.synchronize();
      for (int r = 0; r < g; ++r) {
        INFO("rank " << r);
        ScopedDevice on(devices[static_cast<std::size_t>(r)]);
        const std::vector<float> got = course::to_host(recv[static_cast<std::size_t>(r)]);
        CHECK(std::vector<float>(got.begin(),
                                 got.begin() + static_cast<std::ptrdiff_t>(want.size())) == want);
        CHECK(std::vector<float>(got.end() - static_cast<std::ptrdiff_t>(guard), got.end()) ==
              std::vector<float>(guard, -1.0f));
      }
      // Bad arguments are refused before any NCCL call (the group stays usable).
      CHECK_THROWS_AS(all_gather_uneven(group, {}, rp, counts), std::invalid_argument);
      CHECK_THROWS_AS(all_gather_uneven(group, sp, rp, {}), std::invalid_argument);
      // A null send buffer is refused where its rank has elements to send (with one GPU and
      // rank 0 contributing nothing there is none: nothing is read from a rank with no elements).
      const auto largest = std::max_element(counts.begin(), counts.end()) - counts.begin();
      if (counts[static_cast<std::size_t>(largest)] > 0) {
        std::vector<const float*> null_send = sp;
        null_send[static_cast<std::size_t>(largest)] = nullptr;
        CHECK_THROWS_AS(all_gather_uneven(group, null_send, rp, counts), std::invalid_argument);
      }
      CHECK_FALSE(group.aborted());
    }
  }
}

TEST_CASE("Communicators made per thread (ncclCommInitRankConfig non-blocking) on every GPU",
          "[gpu][nccl]") {
  if (!nccl_available()) {
    WARN(nccl_build_note());
    return;
  }
  const std::vector<int> devices = all_devices();
  const int g = static_cast<int>(devices.size());
  NcclGroup group(devices, NcclInit::thread_per_device);
  CHECK(group.init() == NcclInit::thread_per_device);
  const std::size_t n = 4099;  // not a multiple of anything NCCL chunks by
  std::vector<course::DeviceBuffer<float>> buf;
  std::vector<float*> bp;
  for (int r = 0; r < g; ++r) {
    ScopedDevice on(devices[static_cast<std::size_t>(r)]);
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>((r + 1) * (i % 64));
    buf.push_back(course::to_device(v));
    bp.push_back(buf.back().data());
  }
  all_reduce_sum(group, bp, n);
  group.synchronize();
  // Exact in FP32: small integers. sum over r of (r + 1) = g (g + 1) / 2.
  std::vector<float> want(n);
  for (std::size_t i = 0; i < n; ++i) want[i] = static_cast<float>(g * (g + 1) / 2 * (i % 64));
  for (int r = 0; r < g; ++r) {
    ScopedDevice on(devices[static_cast<std::size_t>(r)]);
    CHECK(course::to_host(buf[static_cast<std::size_t>(r)]) == want);
  }
  const CollectiveTiming t = time_collective(group, Collective::all_gather, 4096u * 4 * g, 2, 5);
  CHECK(t.seconds > 0);
}

TEST_CASE(
    "A wait on a stuck collective times out and aborts instead of hanging; a new group "
    "then works",
    "[gpu][nccl][provokes-error]") {
  if (!nccl_available()) {
    WARN(nccl_build_note());
    return;
  }
  // A one-rank collective cannot wait for a peer, so the stream is held instead: the hold
  // kernel spins on a flag in mapped pinned memory (common/timing.hpp; it gives up by itself
  // after 2 s, so nothing can hang) and the all-gather is queued behind it. That is what a
  // rank sees when a peer never posts its part: a stream that does not finish.
  ScopedDevice on(0);
  const std::size_t n = 1000;
  std::vector<float> host(n);
  for (std::size_t i = 0; i < n; ++i) host[i] = static_cast<float>(i) - 7.0f;
  course::DeviceBuffer<float> send = course::to_device(host), recv(n), recv2(n);
  course::StreamHold hold;
  for (NcclInit init : {NcclInit::one_thread, NcclInit::thread_per_device}) {
    INFO(to_string(init));
    NcclGroup group({0}, init);
    hold.hold(group.stream(0));
    all_gather(group, {send.data()}, {recv.data()}, n);
    try {
      group.synchronize(std::chrono::milliseconds(200));
      FAIL("synchronize returned while the stream was held");
    } catch (const NcclTimeout& e) {
      const std::string what = e.what();
      CHECK_THAT(what, Contains("rank 0 (GPU 0) did not finish within 200 ms"));
      CHECK_THAT(what, Contains("ncclCommAbort"));
    }
    CHECK(group.aborted());
    // An aborted group refuses further work, and says why.
    CHECK_THROWS_WITH(all_reduce_sum(group, {recv.data()}, n), Contains("aborted"));
    CHECK_THROWS_WITH(group.synchronize(), Contains("make a new NcclGroup"));
    // Release the stream: what was queued behind the hold still runs (the one-rank all-gather
    // is a device-to-device copy of the caller's buffers, nothing of the aborted communicator).
    hold.release();
    CUDA_CHECK(cudaStreamSynchronize(group.stream(0)));
    if (!hold.released_in_time()) {
      WARN(
          "the hold kernel gave up by itself (2 s) before the flag was released: "
          "ncclCommAbort blocked until it ended");
    }
  }
  // The process is still usable: a new communicator gathers correctly.
  NcclGroup fresh({0});
  all_gather(fresh, {send.data()}, {recv2.data()}, n);
  fresh.synchronize();
  CHECK(course::to_host(recv2) == host);
}

// ========================================================================== two GPUs or more

CHILD_PROBE(new_thread_on_device_0) {
  CUDA_CHECK(cudaSetDevice(1));
  report("main_device", 1);
  report("new_thread_device", new_thread_device());
  return 0;
}

TEST_CASE("A new thread starts on device 0 whatever main chose", "[gpu][multigpu]") {
  const auto c = run_child_probe_ok("new_thread_on_device_0");
  CHECK(c.value("new_thread_device") == "0");
}

CHILD_PROBE(made_on_device_1) {
  CUDA_CHECK(cudaSetDevice(1));
  course::DeviceBuffer<float> buf(16);
  course::Stream s1;
  course::Event e1;
  CUDA_CHECK(cudaSetDevice(0));
  course::Stream s0;
  course::Event e0;
  report("pointer_device", pointer_device(buf.data()));
  report("stream_device", stream_device(s1));
  // Device 0 is current; the stream belongs to device 1.
  const cudaError_t launch = try_launch(s1);
  report("launch_into_other", course::describe(launch));
  report("launch_into_own", course::describe(try_launch(s0)));
  // An event of device 0 recorded on a stream of device 1 (current device 0, then 1).
  report("record_mixed", course::describe(try_record(e0, s1)));
  CUDA_CHECK(cudaSetDevice(1));
  report("record_mixed_on_1", course::describe(try_record(e0, s1)));
  report("record_own", course::describe(try_record(e1, s1)));
  return 0;
}

TEST_CASE("Memory, streams and events belong to the device current when they were made",
          "[gpu][multigpu]") {
  const auto c = run_child_probe_ok("made_on_device_1");
  CHECK(c.value("pointer_device") == "1");
  CHECK(c.value("stream_device") == "1");
  // Programming Guide, "Stream and Event Behavior": a launch into a stream of another device
  // fails; recording an event into a stream of another device fails.
  INFO("launch into a stream of device 1 from device 0: " << c.value("launch_into_other"));
  CHECK(c.value("launch_into_other").rfind("cudaSuccess", 0) != 0);
  CHECK(c.value("launch_into_own").rfind("cudaSuccess", 0) == 0);
  CHECK(c.value("record_mixed").rfind("cudaSuccess", 0) != 0);
  CHECK(c.value("record_mixed_on_1").rfind("cudaSuccess", 0) != 0);
  CHECK(c.value("record_own").rfind("cudaSuccess", 0) == 0);
}

TEST_CASE("A kernel on GPU 1 waits for an event GPU 0 recorded after writing a flag",
          "[gpu][multigpu][ex3]") {
  for (auto [producer, consumer] : {std::pair<int, int>{0, 1}, std::pair<int, int>{1, 0}}) {
    INFO("producer GPU " << producer << ", consumer GPU " << consumer);
    const Handoff h = cross_device_handoff(producer, consumer, 42, 50000);
    CHECK(h.consumer_read == 42);
    CHECK(h.flag_at_wait_return == 0);
  }
}

TEST_CASE("Peer copy and host-staged copy between GPU 0 and GPU 1 deliver the same bytes",
          "[gpu][multigpu]") {
  for (auto [src, dst] : {std::pair<int, int>{0, 1}, std::pair<int, int>{1, 0}}) {
    const CopyComparison c = compare_peer_and_staged(src, dst, 32u << 20, 2);
    INFO(src << " -> " << dst << ": peer " << c.peer_gbps << " GB/s (direct: " << c.peer_access
             << "), staged " << c.staged_gbps << " GB/s");
    CHECK(c.peer_correct);
    CHECK(c.staged_correct);
  }
}

TEST_CASE("Column- and row-parallel GEMM over 2 GPUs against the one-GPU GEMM",
          "[gpu][multigpu][nccl]") {
  if (!nccl_available()) {
    WARN(nccl_build_note());
    return;
  }
  // Uneven on purpose: N = 520 splits 264 + 256, K = 1000 splits 504 + 496.
  const int M = 130, N = 520, K = 1000;
  const auto A = random_matrix(M, K, 3), B = random_matrix(K, N, 4);
  const std::vector<float> one = single_gpu_gemm(0, M, N, K, A, B, 0, nullptr);
  NcclGroup group({0, 1});
  for (TpMode mode : {TpMode::column_parallel, TpMode::row_parallel}) {
    const TpResult r = tensor_parallel_gemm(group, mode, M, N, K, A, B, 0);
    REQUIRE(r.c.size() == 2);
    CHECK_FALSE(r.split.even());
    for (int rank = 0; rank < 2; ++rank) {
      double worst = 0;
      const int bad =
          outside_bound(r.c[static_cast<std::size_t>(rank)], one, A, B, M, N, K, &worst);
      INFO(to_string(mode) << ", rank " << rank << ": worst |diff| / bound " << worst);
      CHECK(bad == 0);
    }
    CHECK(r.c[0] == r.c[1]);  // every rank holds the same C after the collective
  }
  // N = 8 over 2 GPUs in multiples of 8 leaves GPU 1 nothing: refused before any GPU work.
  CHECK_THROWS_AS(tensor_parallel_gemm(group, TpMode::column_parallel, 4, 8, 4,
                                       random_matrix(4, 4, 5), random_matrix(4, 8, 6), 0),
                  std::invalid_argument);
}

TEST_CASE("FP16 column- and row-parallel GEMM over 2 GPUs: uneven split, chunked, within bound",
          "[gpu][multigpu][nccl][fp16]") {
  if (!nccl_available()) {
    WARN(nccl_build_note());
    return;
  }
  if (!fp16_gemm_runs({0, 1})) return;
  // Uneven on purpose: N = 520 splits 264 + 256, K = 1000 splits 504 + 496.
  const int M = 130, N = 520, K = 1000;
  const auto A = to_half(random_matrix(M, K, 41)), B = to_half(random_matrix(K, N, 42));
  const auto Af = to_float(A), Bf = to_float(B);
  NcclGroup group({0, 1});
  for (TpMode mode : {TpMode::column_parallel, TpMode::row_parallel}) {
    const bool column = mode == TpMode::column_parallel;
    // Row-parallel: two FP16 partials and one FP16 addition per element, in the bound.
    const Fp16Oracle oracle =
        fp16_oracle(Af, Bf, M, N, K, column ? partition(K, 1, 1) : partition(K, 2, kSplitAlign));
    for (int chunks : {1, 3}) {
      const TpFp16Result r = tensor_parallel_gemm_fp16(group, mode, M, N, K, A, B, chunks);
      REQUIRE(r.c.size() == 2);
      CHECK_FALSE(r.split.even());
      for (int rank = 0; rank < 2; ++rank) {
        double worst = 0;
        const int bad = outside_fp16_bound(r.c[static_cast<std::size_t>(rank)], oracle, &worst);
        INFO(to_string(mode) << ", chunks " << chunks << ", rank " << rank
                             << ": worst |diff| / bound " << worst);
        CHECK(bad == 0);
      }
      CHECK(bits(r.c[0]) == bits(r.c[1]));
    }
  }
}

TEST_CASE("NCCL over 2 GPUs: all-reduce sums, all-gather concatenates", "[gpu][multigpu][nccl]") {
  if (!nccl_available()) {
    WARN(nccl_build_note());
    return;
  }
  NcclGroup group({0, 1});
  const std::size_t n = 4096;
  std::vector<course::DeviceBuffer<float>> buf, out;
  for (int r = 0; r < 2; ++r) {
    ScopedDevice on(r);
    buf.push_back(course::to_device(std::vector<float>(n, static_cast<float>(r + 1))));
    out.emplace_back(2 * n);
  }
  all_gather(group, {buf[0].data(), buf[1].data()}, {out[0].data(), out[1].data()}, n);
  group.synchronize();
  all_reduce_sum(group, {buf[0].data(), buf[1].data()}, n);
  group.synchronize();
  for (int r = 0; r < 2; ++r) {
    ScopedDevice on(r);
    CHECK(course::to_host(buf[static_cast<std::size_t>(r)]) == std::vector<float>(n, 3.0f));
    std::vector<float> want(n, 1.0f);
    want.resize(2 * n, 2.0f);
    CHECK(course::to_host(out[static_cast<std::size_t>(r)]) == want);
  }
  CHECK(time_collective(group, Collective::all_reduce, 8u << 20, 3).busbw_gbps > 0);
  CHECK_THROWS_AS(NcclGroup({0, 0}), std::invalid_argument);
}

TEST_CASE("Replicas of lesson 09's pipeline on 2 GPUs: every frame of each checked",
          "[gpu][multigpu]") {
  lesson09::PipelineConfig c;
  c.frames = 60;
  const ReplicaRun run = run_replicas({0, 1}, c, 0.0);
  REQUIRE(run.reports.size() == 2);
  for (std::size_t r = 0; r < 2; ++r) {
    const ReplicaCheck k = check_replica(run.reports[r], c);
    INFO("GPU " << r << ": " << k.first_problem);
    CHECK(k.ok());
  }
  CHECK(run.frames() == 120);
}
