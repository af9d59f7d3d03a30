// Lesson 03: kernels, thread layout and warps.
//
// Walks through how work maps onto the GPU, printing what each step does on this GPU:
//   1. who runs which element (the built-in index variables, 1D/2D/3D)
//   2. the tail: the n / 256 bug, the bounds check, the grid-stride loop
//   3. launch limits, the errors past them, and an error that is sticky (in a child process)
//   4. warps: vote and shuffle, a warp-level sum, the measured cost of divergence
//   5. occupancy: what limits resident warps, the occupancy API, block size vs bandwidth
//   6. the deployment example: BGR bytes -> RGB planar floats for a TensorRT engine
// Every result is checked; the exit code is 0 only if all checks pass.
//
//   lesson03 [--n N] [--width W] [--height H] [--reps R] [--no-sticky] [--help]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "common/headline.hpp"
#include "common/cuda_check.hpp"
#include "common/device.hpp"
#include "common/lesson_main.hpp"
#include "common/memory.hpp"
#include "common/process.hpp"
#include "common/stream.hpp"
#include "common/timing.hpp"
#include "kernels.cuh"

using namespace lesson03;

namespace {

struct Options {
  std::size_t n = std::size_t{1} << 25;  // 32 Mi floats: 128 MiB per vector, well past the L2
  int width = 1920, height = 1080;
  int reps = 5;
  bool sticky = true;
};

// Prints one check and counts failures; main's exit code comes from the count.
struct Checks {
  int total = 0, failed = 0;
  void expect(bool ok, const std::string& what) {
    ++total;
    failed += ok ? 0 : 1;
    std::printf("  [%s] %s\n", ok ? "ok" : "FAILED", what.c_str());
  }
};

// Median GPU time (launch latency excluded: common/timing.hpp) of `reps` runs of `enqueue()` on
// `stream`, after one untimed warm-up; L2::flushed empties the L2 before each run.
template <class F>
double median_ms(int reps, cudaStream_t stream, F&& enqueue, course::L2 l2 = course::L2::warm) {
  return course::measure(stream, reps, enqueue, l2, /*with_latency=*/false).gpu_ms;
}

std::string hex(unsigned v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

const char* err_name(cudaError_t e) {
  return cudaGetErrorName(e);
}

// ---------------------------------------------------------------------------------------------
void section_index_mapping() {
  std::printf("\n== 1. Who runs which element ==\n");
  std::printf(
      "A launch <<<grid, block>>> starts grid blocks of block threads; each thread computes its\n"
      "element from blockIdx * blockDim + threadIdx (per dimension).\n\n");

  // 1D
  const auto r1 = map_threads(dim3(3), dim3(4), Extent3{10, 1, 1});
  std::printf(
      "1D: 10 elements, <<<3, 4>>> = 12 threads; threads 10 and 11 fail the bounds check\n");
  std::printf("  element     ");
  for (int x = 0; x < 10; ++x) std::printf("%3d", x);
  std::printf("\n  blockIdx.x  ");
  for (const auto& r : r1) std::printf("%3d", r.block[0]);
  std::printf("\n  threadIdx.x ");
  for (const auto& r : r1) std::printf("%3d", r.thread[0]);
  std::printf("\n\n");

  // 2D
  const auto r2 = map_threads(dim3(2, 3), dim3(4, 2), Extent3{6, 5, 1});
  std::printf(
      "2D: a 6 x 5 image, block (4, 2), grid (2, 3); cell = blockIdx.x,y / threadIdx.x,y\n");
  for (int y = 0; y < 5; ++y) {
    std::printf("  y=%d ", y);
    for (int x = 0; x < 6; ++x) {
      const auto& r = r2[static_cast<std::size_t>(y) * 6 + x];
      std::printf(" %d,%d/%d,%d", r.block[0], r.block[1], r.thread[0], r.thread[1]);
    }
    std::printf("\n");
  }

  // Warps in a 2D block
  const auto rw = map_threads(dim3(1), dim3(16, 4), Extent3{16, 4, 1});
  std::printf(
      "\nWarps of a 16 x 4 block (threadIdx.x varies fastest, 32 threads per warp): warp id\n");
  for (int y = 0; y < 4; ++y) {
    std::printf("  y=%d  ", y);
    for (int x = 0; x < 16; ++x) std::printf("%d", rw[static_cast<std::size_t>(y) * 16 + x].warp);
    std::printf("\n");
  }
  const auto& last = rw[1 * 16 + 15];
  std::printf("  thread (15, 1) is warp %d lane %d; thread (0, 2) is warp %d lane %d\n", last.warp,
              last.lane, rw[2 * 16].warp, rw[2 * 16].lane);

  // 3D
  const auto r3 = map_threads(dim3(2, 1, 2), dim3(2, 2, 1), Extent3{4, 2, 2});
  std::printf(
      "\n3D: a 4 x 2 x 2 volume, block (2, 2, 1), grid (2, 1, 2); cell = blockIdx / threadIdx\n");
  for (int z = 0; z < 2; ++z) {
    for (int y = 0; y < 2; ++y) {
      std::printf("  z=%d y=%d ", z, y);
      for (int x = 0; x < 4; ++x) {
        const auto& r = r3[(static_cast<std::size_t>(z) * 2 + y) * 4 + x];
        std::printf("  %d%d%d/%d%d%d", r.block[0], r.block[1], r.block[2], r.thread[0], r.thread[1],
                    r.thread[2]);
      }
      std::printf("\n");
    }
  }
}

// ---------------------------------------------------------------------------------------------
void section_tail(const Options& opt, Checks& checks) {
  std::printf("\n== 2. The tail: n that is not a multiple of the block size ==\n");
  const std::size_t n = 1000;
  std::vector<float> a(n), b(n);
  for (std::size_t i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i);
    b[i] = 0.5f;
  }
  auto da = course::to_device(a), db = course::to_device(b);
  const std::vector<float> fill(n, -1.0f);
  auto count_wrong = [&](const course::DeviceBuffer<float>& dc) {
    const auto c = course::to_host(dc);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < n; ++i) wrong += c[i] != a[i] + b[i];
    return wrong;
  };

  {
    auto dc = course::to_device(fill);
    vector_add_truncated_grid(da.data(), db.data(), dc.data(), n);
    const std::size_t wrong = count_wrong(dc);
    std::printf(
        "n = %zu, block 256, grid = n / 256 = %zu blocks = %zu threads: %zu elements never "
        "computed\n",
        n, n / 256, n / 256 * 256, wrong);
    checks.expect(wrong == n % 256, "the truncated grid drops exactly the last n % 256 = " +
                                        std::to_string(n % 256) + " elements");
  }
  {
    auto dc = course::to_device(fill);
    vector_add_one_per_thread(da.data(), db.data(), dc.data(), n, 256);
    const std::size_t wrong = count_wrong(dc);
    std::printf(
        "grid = ceil(n / 256) = %zu blocks = %zu threads, %zu idle behind `if (i < n)`: "
        "%zu wrong\n",
        ceil_div(n, 256), ceil_div(n, 256) * 256, ceil_div(n, 256) * 256 - n, wrong);
    checks.expect(wrong == 0, "one thread per element with a bounds check computes all 1000");
  }
  {
    course::DeviceBuffer<float> sa(100), sb(100), sc(100);
    std::string what = "no error";
    cudaError_t code = cudaSuccess;
    try {
      vector_add_truncated_grid(sa.data(), sb.data(), sc.data(), 100);
    } catch (const course::CudaError& e) {
      code = e.code();
      what = e.what();
    }
    std::printf("n = 100 with the same bug: grid = 100 / 256 = 0 blocks ->\n    %s\n",
                what.c_str());
    checks.expect(is_invalid_launch_error(code),
                  "a grid of 0 blocks is rejected (seen only because the launch is checked)");
  }

  // Grid-stride on a large n: fewer threads than elements.
  const std::size_t big = opt.n;
  const LaunchConfig cfg = vector_add_launch_config(big);
  const int sms = course::query_device(0).sm_count;
  const std::size_t threads = static_cast<std::size_t>(cfg.grid.x) * cfg.block.x;
  std::printf(
      "\nGrid-stride loop, n = %zu: cudaOccupancyMaxPotentialBlockSize picks block %u and a "
      "full wave of %u blocks (%d SMs x %u)\n  = %zu threads, each looping over ~%.1f elements\n",
      big, cfg.block.x, cfg.grid.x, sms, cfg.grid.x / std::max(sms, 1), threads,
      static_cast<double>(big) / static_cast<double>(threads));
  {
    std::vector<float> x(big), y(big);
    for (std::size_t i = 0; i < big; ++i) {
      x[i] = static_cast<float>(i % 4096);
      y[i] = static_cast<float>(i % 7) * 0.25f;
    }
    auto dx = course::to_device(x), dy = course::to_device(y);
    course::DeviceBuffer<float> dz(big);
    course::Stream stream;
    vector_add(dx.data(), dy.data(), dz.data(), big, stream);
    stream.synchronize();
    const auto z = course::to_host(dz);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < big; ++i) wrong += z[i] != x[i] + y[i];
    checks.expect(wrong == 0,
                  "grid-stride vector_add is exact for all " + std::to_string(big) + " elements");
  }
}

// ---------------------------------------------------------------------------------------------
void section_limits(const char* self, const Options& opt, Checks& checks) {
  std::printf("\n== 3. Limits and the errors past them ==\n");
  const LaunchLimits l = launch_limits();
  std::printf(
      "device limits: %d threads/block; block dims <= (%d, %d, %d); grid dims <= (%d, %d, "
      "%d);\n  shared memory/block %d B (%d B after opting in); %d registers/block\n",
      l.max_threads_per_block, l.max_block[0], l.max_block[1], l.max_block[2], l.max_grid[0],
      l.max_grid[1], l.max_grid[2], l.smem_per_block, l.smem_per_block_optin, l.regs_per_block);
  std::printf("\n  %-58s %s\n", "launch (cudaGetLastError() right after it)", "result");

  struct Row {
    std::string what;
    cudaError_t got, want;
  };
  std::vector<Row> rows;
  const auto T = static_cast<unsigned>(l.max_threads_per_block);
  const auto Z = static_cast<unsigned>(l.max_block[2]);
  const auto GY = static_cast<unsigned>(l.max_grid[1]);
  const auto S = static_cast<std::size_t>(l.smem_per_block);
  const auto OPT = static_cast<std::size_t>(l.smem_per_block_optin);
  const auto probe = [&](const std::string& what, ProbeKernel k, dim3 g, dim3 b, std::size_t smem,
                         cudaError_t want) {
    rows.push_back({what, launch_error(k, g, b, smem), want});
  };
  probe("empty<<<1, " + std::to_string(T) + ">>>", ProbeKernel::empty, dim3(1), dim3(T), 0,
        cudaSuccess);
  probe("empty<<<1, " + std::to_string(T + 1) + ">>>", ProbeKernel::empty, dim3(1), dim3(T + 1), 0,
        cudaErrorInvalidConfiguration);
  probe("empty<<<1, dim3(32, 32, 2)>>>  (2048 threads)", ProbeKernel::empty, dim3(1),
        dim3(32, 32, 2), 0, cudaErrorInvalidConfiguration);
  probe("empty<<<1, dim3(1, 1, " + std::to_string(Z + 1) + ")>>>", ProbeKernel::empty, dim3(1),
        dim3(1, 1, Z + 1), 0, cudaErrorInvalidConfiguration);
  probe("empty<<<dim3(1, " + std::to_string(GY + 1) + "), 1>>>", ProbeKernel::empty,
        dim3(1, GY + 1), dim3(1), 0, cudaErrorInvalidConfiguration);
  probe("empty<<<2^31, 1>>>", ProbeKernel::empty, dim3(2147483648u), dim3(1), 0,
        cudaErrorInvalidConfiguration);
  probe("empty<<<0, 32>>>", ProbeKernel::empty, dim3(0), dim3(32), 0,
        cudaErrorInvalidConfiguration);
  probe("empty<<<1, 32, " + std::to_string(S) + " B dynamic smem>>>", ProbeKernel::empty, dim3(1),
        dim3(32), S, cudaSuccess);
  probe("empty<<<1, 32, " + std::to_string(S + 1) + " B>>>", ProbeKernel::empty, dim3(1), dim3(32),
        S + 1, cudaErrorInvalidValue);
  rows.push_back(
      {"cudaFuncSetAttribute(MaxDynamicSharedMemorySize, " + std::to_string(OPT + 1) + ")",
       opt_in_dynamic_smem(static_cast<int>(OPT) + 1), cudaErrorInvalidValue});
  rows.push_back({"cudaFuncSetAttribute(MaxDynamicSharedMemorySize, " + std::to_string(OPT) + ")",
                  opt_in_dynamic_smem(static_cast<int>(OPT)), cudaSuccess});
  probe("  then empty_opted_in<<<1, 32, " + std::to_string(OPT) + " B>>>",
        ProbeKernel::empty_opted_in, dim3(1), dim3(32), OPT, cudaSuccess);
  const KernelResources gemm = kernel_resources(LessonKernel::tiny_gemm);
  const auto GT = static_cast<unsigned>(gemm.max_threads_per_block);
  probe("tiny_gemm<<<1, 1024>>>  (" + std::to_string(gemm.regs_per_thread) + " registers/thread)",
        ProbeKernel::tiny_gemm, dim3(1), dim3(1024), 0,
        GT < 1024 ? cudaErrorLaunchOutOfResources : cudaSuccess);
  probe(
      "tiny_gemm<<<1, " + std::to_string(GT) + ">>>  (its cudaFuncAttributes::maxThreadsPerBlock)",
      ProbeKernel::tiny_gemm, dim3(1), dim3(GT), 0, cudaSuccess);

  // A configuration error may come back under either name (see is_invalid_launch_error).
  const auto as_expected = [](const Row& r) {
    return r.got == r.want ||
           (r.want == cudaErrorInvalidConfiguration && is_invalid_launch_error(r.got));
  };
  bool all_as_expected = true;
  for (const auto& r : rows) {
    std::printf(
        "  %-58s %s%s\n", r.what.c_str(), err_name(r.got),
        as_expected(r) ? "" : (std::string("  (expected ") + err_name(r.want) + ")").c_str());
    all_as_expected &= as_expected(r);
  }
  checks.expect(all_as_expected, "every launch failed (or not) as the limits predict");

  const cudaError_t after = cudaGetLastError();
  std::vector<float> one{1.0f};
  auto d1 = course::to_device(one);
  course::DeviceBuffer<float> d2(1);
  vector_add(d1.data(), d1.data(), d2.data(), 1);
  const bool works = course::to_host(d2)[0] == 2.0f;
  checks.expect(after == cudaSuccess && works,
                "launch-configuration errors are not sticky: cudaGetLastError() is now " +
                    std::string(err_name(after)) + " and kernels still run");

  if (!opt.sticky) {
    std::printf("\n(sticky-error demonstration skipped: --no-sticky)\n");
    return;
  }
  std::printf(
      "\nAn error INSIDE a kernel is reported only by a later call that waits for it, and it is\n"
      "sticky: the context is broken for the rest of the process. So this part runs in a child\n"
      "process (%s --sticky-child), which writes through a null pointer:\n",
      "lesson03");
  const course::ProcessResult child = course::run_process({self, "--sticky-child"});
  std::map<std::string, std::string> values;
  std::istringstream lines(child.output);
  for (std::string line; std::getline(lines, line);) {
    std::printf("    | %s\n", line.c_str());
    const auto eq = line.find('=');
    if (eq != std::string::npos) values[line.substr(0, eq)] = line.substr(eq + 1);
  }
  std::printf("    (child exit code %d)\n", child.exit_code);
  checks.expect(values["after_launch"] == "cudaSuccess" && values["synchronize"] != "cudaSuccess" &&
                    values["malloc_after"] == values["synchronize"],
                "the launch reported success, the fault came at cudaDeviceSynchronize and stuck (" +
                    values["synchronize"] + ")");
}

// The child side of the sticky-error demonstration. Prints key=value lines; always returns 0
// (what happened is in the values).
int sticky_child() {
  launch_illegal_write(/*delay_ms=*/20);
  std::printf("after_launch=%s\n", err_name(cudaGetLastError()));
  std::printf("synchronize=%s\n", err_name(cudaDeviceSynchronize()));
  std::printf("get_last_error=%s\n", err_name(cudaGetLastError()));
  void* p = nullptr;
  std::printf("malloc_after=%s\n", err_name(cudaMalloc(&p, 256)));
  std::printf("synchronize_again=%s\n", err_name(cudaDeviceSynchronize()));
  return 0;
}

// ---------------------------------------------------------------------------------------------
void section_warps(const Options& opt, Checks& checks) {
  std::printf("\n== 4. Warps ==\n");

  // 4a. vote and shuffle
  std::vector<int> values(32);
  for (int lane = 0; lane < 32; ++lane) values[lane] = (lane * 7) % 11 - 3;
  const int threshold = 2;
  const auto r = warp_intrinsics_demo(values, threshold);
  std::printf("One warp, value[lane] = (7 lane mod 11) - 3, predicate value > %d:\n", threshold);
  std::printf("  lane              ");
  const int shown[] = {0, 1, 2, 3, 4, 5, 6, 7, 29, 30, 31};
  for (int lane : shown) std::printf("%4d", lane);
  std::printf("\n  value             ");
  for (int lane : shown) std::printf("%4d", r[lane].value);
  std::printf("\n  __shfl_sync(v, 0) ");
  for (int lane : shown) std::printf("%4d", r[lane].broadcast);
  std::printf("\n  __shfl_down(v, 1) ");
  for (int lane : shown) std::printf("%4d", r[lane].down1);
  std::printf("\n  __shfl_xor(v, 1)  ");
  for (int lane : shown) std::printf("%4d", r[lane].xor1);
  std::printf("\n  __ballot_sync(pred)          = %s  (bit k = lane k)\n",
              hex(r[0].ballot).c_str());
  std::printf("  __any_sync / __all_sync      = %d / %d\n", r[0].any, r[0].all);
  std::printf("  __ballot_sync(lane %% 3 == 0) = %s  (the lanes that take the branch)\n",
              hex(r[0].branch_ballot).c_str());
  std::printf("  __activemask() in the branch = %s  (lanes executing it together; may differ)\n",
              hex(r[0].active_in_branch).c_str());
  unsigned ballot = 0;
  for (int lane = 0; lane < 32; ++lane) ballot |= (values[lane] > threshold ? 1u : 0u) << lane;
  bool shuffles_ok = true;
  for (int lane = 0; lane < 32; ++lane) {
    shuffles_ok &= r[lane].ballot == ballot && r[lane].broadcast == values[0] &&
                   r[lane].down1 == values[std::min(lane + 1, 31)] &&
                   r[lane].xor1 == values[lane ^ 1];
  }
  checks.expect(shuffles_ok, "ballot and shuffles match the CPU model of a warp");

  // 4b. warp-level sum
  const std::size_t n = 1000003;
  std::vector<float> in(n);
  for (std::size_t i = 0; i < n; ++i) in[i] = static_cast<float>((i * 37) % 101) / 100.0f - 0.5f;
  auto din = course::to_device(in);
  course::DeviceBuffer<float> dout(ceil_div(n, 32));
  warp_sums(din.data(), dout.data(), n);
  const auto out = course::to_host(dout);
  double max_err = 0.0;
  for (std::size_t w = 0; w < out.size(); ++w) {
    double ref = 0.0;
    for (std::size_t i = w * 32; i < std::min(n, w * 32 + 32); ++i) ref += in[i];
    max_err = std::max(max_err, std::fabs(out[w] - ref));
  }
  std::printf(
      "\nWarp sums (__shfl_down_sync, offsets 16 8 4 2 1), n = %zu -> %zu sums; the last warp "
      "has %zu elements.\n  max |GPU - double CPU| = %.3g\n",
      n, out.size(), n % 32, max_err);
  checks.expect(max_err < 1e-5, "warp sums agree with the CPU (32 values in [-0.5, 0.5])");

  // 4c. divergence
  const int sms = course::query_device(0).sm_count;
  const std::size_t dn = static_cast<std::size_t>(sms) * 2048 * 4;  // 4 waves of full SMs
  const int iterations = 64;
  course::DeviceBuffer<std::uint32_t> dout32(dn);
  course::Stream stream;
  std::printf(
      "\nDivergence: %zu threads, each doing %d xorshift steps on one of `ways` paths\n"
      "  (median of %d runs; same work per thread in both columns)\n",
      dn, iterations, opt.reps);
  std::printf("  %s\n", course::harness_floor_caption(stream).c_str());
  std::printf("  %5s  %24s  %20s\n", "ways", "path = lane % ways (ms)", "path = warp % ways (ms)");
  double base = 0.0;
  bool values_ok = true;
  for (int ways : {1, 2, 4, 8, 16, 32}) {
    double t[2];
    int k = 0;
    for (PathLayout layout : {PathLayout::lane_interleaved, PathLayout::warp_uniform}) {
      t[k++] = median_ms(opt.reps, stream, [&] {
        run_divergence(dout32.data(), dn, ways, iterations, layout, stream);
      });
      const auto got = course::to_host(dout32);  // spot check the first and last 64 threads
      for (std::size_t i : {std::size_t{0}, dn - 64}) {
        for (std::size_t j = i; j < i + 64; ++j) {
          values_ok &=
              got[j] == path_work(divergence_seed(j), path_of(j, ways, layout), iterations);
        }
      }
    }
    if (ways == 1) base = t[0];
    std::printf("  %5d  %14.3f (x%5.2f)  %12.3f (x%5.2f)\n", ways, t[0], t[0] / base, t[1],
                t[1] / base);
  }
  checks.expect(values_ok, "divergence kernel values match path_work on the CPU (spot check)");
}

// ---------------------------------------------------------------------------------------------
void section_occupancy(const Options& opt, Checks& checks) {
  std::printf("\n== 5. Occupancy ==\n");
  const SmLimits sm = sm_limits();
  std::printf(
      "per SM: %d threads (%d warps), %d blocks, %d registers, %d B shared memory (%d B "
      "reserved per block)\n",
      sm.max_threads_per_sm, sm.max_threads_per_sm / sm.warp_size, sm.max_blocks_per_sm,
      sm.regs_per_sm, sm.smem_per_sm, sm.reserved_smem_per_block);

  const LessonKernel kernels[] = {LessonKernel::vector_add, LessonKernel::vector_add_grid_stride,
                                  LessonKernel::divergence, LessonKernel::warp_sum,
                                  LessonKernel::tiny_gemm,  LessonKernel::bgr8_to_rgb_planar};
  std::printf("\n  %-27s %5s %6s %6s %7s | %-15s | %-29s\n", "kernel", "regs", "smem", "local",
              "max blk", "suggested", "at 256 threads: blocks/SM");
  std::printf("  %-27s %5s %6s %6s %7s | %5s %9s | %5s %5s %6s %-11s\n", "", "", "B", "B", "",
              "block", "min grid", "API", "hand", "occ", "limiter");
  bool agree = true;
  for (LessonKernel k : kernels) {
    const KernelResources res = kernel_resources(k);
    const BlockSizeSuggestion s = suggest_block_size(k);
    const int api = max_active_blocks_per_sm(k, 256);
    const OccupancyEstimate e = occupancy_by_hand(sm, res, 256);
    agree &= api == e.blocks_per_sm;
    std::printf("  %-27s %5d %6d %6d %7d | %5d %9d | %5d %5d %5.0f%% %-11s\n", kernel_name(k),
                res.regs_per_thread, res.static_smem_bytes, res.local_bytes_per_thread,
                res.max_threads_per_block, s.block_size, s.min_grid_size, api, e.blocks_per_sm,
                100.0 * e.occupancy, e.limiter);
  }

  std::printf("\nWhat limits residency (the API's blocks/SM, and by hand with the limiter):\n");
  std::printf("  %-44s %5s %5s %6s  %s\n", "configuration", "API", "hand", "occ", "limiter");
  const KernelResources va = kernel_resources(LessonKernel::vector_add);
  const auto row = [&](const std::string& what, LessonKernel k, const KernelResources& res,
                       int block, std::size_t smem) {
    const int api = max_active_blocks_per_sm(k, block, smem);
    const OccupancyEstimate e = occupancy_by_hand(sm, res, block, smem);
    agree &= api == e.blocks_per_sm;
    std::printf("  %-44s %5d %5d %5.0f%%  %s\n", what.c_str(), api, e.blocks_per_sm,
                100.0 * e.occupancy, e.limiter);
  };
  for (int block : {32, 64, 128, 256, 1024}) {
    row("vector_add, " + std::to_string(block) + " threads", LessonKernel::vector_add, va, block,
        0);
  }
  for (std::size_t smem : {std::size_t{16384}, std::size_t{32768}, std::size_t{49152}}) {
    row("vector_add, 256 threads + " + std::to_string(smem / 1024) + " KiB dynamic smem",
        LessonKernel::vector_add, va, 256, smem);
  }
  const KernelResources gemm = kernel_resources(LessonKernel::tiny_gemm);
  for (int block : {64, 128, 256, gemm.max_threads_per_block}) {
    row("tiny_gemm (" + std::to_string(gemm.regs_per_thread) + " regs), " + std::to_string(block) +
            " threads",
        LessonKernel::tiny_gemm, gemm, block, 0);
  }
  checks.expect(agree,
                "occupancy by hand agrees with cudaOccupancyMaxActiveBlocksPerMultiprocessor");

  // Block size vs bandwidth on a memory-bound kernel.
  const std::size_t n = opt.n;
  course::DeviceBuffer<float> a(n), b(n), c(n);
  CUDA_CHECK(cudaMemset(a.data(), 0, a.bytes()));
  CUDA_CHECK(cudaMemset(b.data(), 0, b.bytes()));
  course::Stream stream;
  const double bytes = 3.0 * static_cast<double>(n) * sizeof(float);  // read a, b; write c
  // The ceiling: the better of two device copies of one vector, measured here, in this run.
  const double memcpy_ms = median_ms(opt.reps, stream, [&] {
    CUDA_CHECK(cudaMemcpyAsync(c.data(), a.data(), a.bytes(), cudaMemcpyDeviceToDevice, stream));
  });
  const double kernel_ms = median_ms(
      opt.reps, stream, [&] { course::copy_kernel(c.data(), a.data(), a.bytes(), stream); });
  const double copy_ms = std::min(memcpy_ms, kernel_ms);
  const double copy_gbps = 2.0 * static_cast<double>(a.bytes()) / (copy_ms * 1e6);
  std::printf(
      "\nBlock size vs bandwidth: vector add, n = %zu (%.0f MiB moved per launch), median GPU time "
      "of %d\n",
      n, bytes / (1 << 20), opt.reps);
  std::printf(
      "  ceiling: the better device copy of one vector: cudaMemcpy %.3f ms, a 16-byte copy kernel "
      "%.3f ms: %.0f GB/s\n",
      memcpy_ms, kernel_ms, copy_gbps);
  std::printf("  %-30s %9s %9s %8s %10s\n", "launch", "ms", "GB/s", "% copy", "occupancy");
  for (int block : {32, 64, 128, 256, 512, 1024}) {
    const double ms = median_ms(opt.reps, stream, [&] {
      vector_add_one_per_thread(a.data(), b.data(), c.data(), n, block, stream);
    });
    const double gbps = bytes / (ms * 1e6);
    const double occ =
        static_cast<double>(max_active_blocks_per_sm(LessonKernel::vector_add, block) * block) /
        sm.max_threads_per_sm;
    std::printf("  %-30s %9.3f %9.0f %7.0f%% %9.0f%%\n",
                ("1 thread/element, block " + std::to_string(block)).c_str(), ms, gbps,
                100.0 * gbps / copy_gbps, 100.0 * occ);
  }
  const LaunchConfig cfg = vector_add_launch_config(n);
  const double ms =
      median_ms(opt.reps, stream, [&] { vector_add(a.data(), b.data(), c.data(), n, stream); });
  std::printf(
      "  %-30s %9.3f %9.0f %7.0f%%\n",
      ("grid-stride <<<" + std::to_string(cfg.grid.x) + ", " + std::to_string(cfg.block.x) + ">>>")
          .c_str(),
      ms, bytes / (ms * 1e6), 100.0 * bytes / (ms * 1e6) / copy_gbps);
  course::add_headline("vector add (grid-stride) %.0f GB/s, %.0f%% of the best device copy",
                       bytes / (ms * 1e6), 100.0 * bytes / (ms * 1e6) / copy_gbps);
}

// ---------------------------------------------------------------------------------------------
void section_deployment(const Options& opt, Checks& checks) {
  std::printf("\n== 6. Deployment: BGR bytes -> RGB planar floats ==\n");
  const int w = opt.width, h = opt.height;
  const std::size_t pitch = 3 * static_cast<std::size_t>(w);
  const std::size_t plane = static_cast<std::size_t>(w) * h;
  std::vector<std::uint8_t> img(pitch * h);
  for (std::size_t i = 0; i < img.size(); ++i)
    img[i] = static_cast<std::uint8_t>((i * 2654435761u) >> 24);
  auto dimg = course::to_device(img);
  course::DeviceBuffer<float> planar(3 * plane);
  const Normalization norm = Normalization::imagenet();
  course::Stream stream;
  // L2 flushed before each run: a frame this size fits the L2, and a real frame arrives from DRAM.
  const double ms = median_ms(
      opt.reps, stream,
      [&] { bgr8_to_rgb_planar(dimg.data(), w, h, pitch, planar.data(), norm, stream); },
      course::L2::flushed);
  const double bytes = static_cast<double>(img.size()) + 3.0 * plane * sizeof(float);
  std::printf(
      "%d x %d BGR uint8 -> 3 x %d x %d float RGB, ImageNet mean/std, blocks of 32 x 8:\n"
      "  %.3f ms (median GPU time of %d, L2 flushed), %.0f GB/s (%.1f MB read + written)\n",
      w, h, h, w, ms, opt.reps, bytes / (ms * 1e6), bytes / 1e6);
  const auto out = course::to_host(planar);
  double max_err = 0.0;
  for (int c = 0; c < 3; ++c) {
    for (std::size_t p = 0; p < plane; ++p) {
      const double v = img[p * 3 + (2 - c)];
      const double ref = (v / 255.0 - norm.mean[c]) / norm.std[c];
      max_err = std::max(max_err, std::fabs(out[c * plane + p] - ref));
    }
  }
  std::printf("  max |GPU - double CPU| = %.3g\n", max_err);
  checks.expect(max_err <= 2e-6, "RGB planar output matches the CPU reference");

  // Back to BGR bytes (exercise 1's solution): with unit normalisation the round trip is exact.
  bgr8_to_rgb_planar(dimg.data(), w, h, pitch, planar.data(), Normalization::unit(), stream);
  course::DeviceBuffer<std::uint8_t> back(img.size());
  rgb_planar_to_bgr8(planar.data(), w, h, back.data(), pitch, stream);
  stream.synchronize();
  checks.expect(course::to_host(back) == img,
                "BGR -> RGB planar -> BGR (exercise 1) is the identity");
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  CLI::App app{"Lesson 03: kernels, thread layout and warps, checked and measured on this GPU."};
  app.add_option("--n", opt.n,
                 "elements of the vector add and the block-size sweep (default 33554432)")
      ->type_name("N")
      ->check(course::integer_in(1LL, 1LL << 31));
  app.add_option("--width", opt.width,
                 "image width for the BGR -> RGB planar example (default 1920)")
      ->type_name("W")
      ->check(course::integer_in(1, 16384));
  app.add_option("--height", opt.height, "image height (default 1080)")
      ->type_name("H")
      ->check(course::integer_in(1, 16384));
  app.add_option("--reps", opt.reps,
                 "timed repetitions per measurement; the median is printed (default 5)")
      ->type_name("R")
      ->check(course::integer_in(1, 1000));
  app.add_flag_callback(
      "--no-sticky", [&] { opt.sticky = false; },
      "skip the sticky-error demonstration (it runs this program again as a\n"
      "child process with --sticky-child, which faults on purpose)");
  // The child side of the sticky-error demonstration (section_limits runs `lesson03
  // --sticky-child`) is matched by hand: it is not for people, so it stays out of --help, and
  // the parser then sees no arguments.
  const bool sticky_child_mode = argc == 2 && std::strcmp(argv[1], "--sticky-child") == 0;
  return course::lesson_main(app, sticky_child_mode ? 1 : argc, argv, [&] {
    if (sticky_child_mode) return sticky_child();
    std::printf("Lesson 03: kernels, thread layout and warps\n%s\n",
                course::summary(course::query_device(0)).c_str());
    Checks checks;
    section_index_mapping();
    section_tail(opt, checks);
    section_limits(course::self_executable().c_str(), opt, checks);
    section_warps(opt, checks);
    section_occupancy(opt, checks);
    section_deployment(opt, checks);
    std::printf("\n%d of %d checks passed\n", checks.total - checks.failed, checks.total);
    course::print_headline();
    return checks.failed == 0 ? 0 : 1;
  });
}
