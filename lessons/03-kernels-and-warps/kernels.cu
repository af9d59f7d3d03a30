// Lesson 03: kernels, thread layout and warps. The kernels in the order the lesson teaches them,
// each followed by its host launcher (tests, main.cu and the benchmark all call the launchers).
//
//   record_thread_layout_kernel    1. who runs which element: blockIdx, threadIdx, warp, lane
//   vector_add_kernel              2. one thread per element, bounds check (and, launched with
//                                     n / 256 blocks, the classic bug that drops the tail)
//   vector_add_grid_stride_kernel  2. any n with the grid the occupancy API suggests
//   empty_kernel, ...              3. launch limits: what the runtime rejects, and how
//   tiny_gemm_8x8_kernel           3. > 64 registers per thread: 1024-thread blocks do not fit
//   sleep_kernel, illegal_write    3. an error that appears only at the next synchronisation,
//                                     and is sticky
//   divergence_kernel              4. SIMT: the cost of paths that split a warp
//   warp_intrinsics_kernel         4. vote (__ballot_sync, __any_sync, __all_sync, __activemask)
//                                     and shuffle (__shfl_sync, __shfl_down_sync, __shfl_xor_sync)
//   warp_sum_kernel                4. a warp-level sum in registers
//   bgr8_to_rgb_planar_kernel      6. deployment: OpenCV BGR bytes -> CHW float RGB
// Occupancy (5.) is host code around the runtime's occupancy API.
// The exercise solutions are in solutions.cuh, included at the end (lesson build only).
#include "kernels.cuh"

#include <algorithm>
#include <climits>
#include <sstream>
#include <stdexcept>
#include <string>

#include "common/cuda_check.hpp"
#include "common/device.hpp"
#include "common/memory.hpp"

namespace lesson03 {

namespace {

// Bad arguments are the caller's bug: say what was expected, before any CUDA call.
void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument(what);
}

// The grid's x dimension holds up to 2^31 - 1 blocks (the y and z dimensions 65535).
constexpr std::size_t kMaxGridX = 2147483647u;

}  // namespace

// =============================================================================================
// 1. Index mapping: the built-in variables
// =============================================================================================
//
// A kernel launch <<<grid, block, dynamic shared bytes, stream>>> starts grid.x * grid.y * grid.z
// blocks of block.x * block.y * block.z threads. Each thread reads where it is from gridDim,
// blockIdx, blockDim and threadIdx (Programming Guide, "Thread Hierarchy" and "Built-in
// Variables"), and the kernel turns that into the element it owns.

namespace {
__global__ void record_thread_layout_kernel(ThreadRecord* out, int nx, int ny, int nz) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  const int z = blockIdx.z * blockDim.z + threadIdx.z;
  // The grid is rounded up to whole blocks, so some threads fall outside: they must not write.
  if (x >= nx || y >= ny || z >= nz) return;

  // Warps are consecutive runs of 32 in the block's x-fastest thread order.
  const int linear =
      linear_thread_index(threadIdx.x, threadIdx.y, threadIdx.z, blockDim.x, blockDim.y);
  ThreadRecord r;
  r.block[0] = blockIdx.x;
  r.block[1] = blockIdx.y;
  r.block[2] = blockIdx.z;
  r.thread[0] = threadIdx.x;
  r.thread[1] = threadIdx.y;
  r.thread[2] = threadIdx.z;
  r.warp = linear / warpSize;
  r.lane = linear % warpSize;
  out[(static_cast<std::size_t>(z) * ny + y) * nx + x] = r;
}
}  // namespace

std::vector<ThreadRecord> map_threads(dim3 grid, dim3 block, Extent3 extent) {
  require(extent.x >= 1 && extent.y >= 1 && extent.z >= 1,
          "map_threads: every extent must be >= 1, got " + std::to_string(extent.x) + " x " +
              std::to_string(extent.y) + " x " + std::to_string(extent.z));
  require(extent.count() <= (std::size_t{1} << 20),
          "map_threads: at most 2^20 elements (it is a printer), got " +
              std::to_string(extent.count()));
  require(grid.x > 0 && grid.y > 0 && grid.z > 0 && block.x > 0 && block.y > 0 && block.z > 0,
          "map_threads: grid and block dimensions must be >= 1");

  std::vector<ThreadRecord> host(extent.count());
  for (auto& r : host) r = ThreadRecord{{-1, -1, -1}, {-1, -1, -1}, -1, -1};
  course::DeviceBuffer<ThreadRecord> dev = course::to_device(host);
  record_thread_layout_kernel<<<grid, block>>>(dev.data(), extent.x, extent.y, extent.z);
  CUDA_CHECK_LAUNCH();
  return course::to_host(dev);  // cudaMemcpy waits for the kernel (same, legacy default stream)
}

// =============================================================================================
// 2. The tail
// =============================================================================================

namespace {
// One thread per element. The bounds check is what makes any n work with whole blocks.
__global__ void vector_add_kernel(const float* __restrict__ a, const float* __restrict__ b,
                                  float* __restrict__ c, std::size_t n) {
  // 64-bit index: blockIdx.x * blockDim.x is computed in 32 bits and wraps past 2^32 elements.
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

// Grid-stride loop: the grid covers the GPU once (as many blocks as can be resident), and each
// thread strides by the total thread count. Any n works with any grid; consecutive threads still
// touch consecutive elements in every pass, so each warp's loads stay coalesced.
__global__ void vector_add_grid_stride_kernel(const float* __restrict__ a,
                                              const float* __restrict__ b, float* __restrict__ c,
                                              std::size_t n) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += stride) {
    c[i] = a[i] + b[i];
  }
}

void require_vectors(const float* a, const float* b, const float* c, std::size_t n,
                     const char* who) {
  require(n == 0 || (a != nullptr && b != nullptr && c != nullptr),
          std::string(who) + ": a, b and c must be device pointers to n floats (got null, n = " +
              std::to_string(n) + ")");
}
}  // namespace

void vector_add_truncated_grid(const float* a, const float* b, float* c, std::size_t n,
                               cudaStream_t stream) {
  require_vectors(a, b, c, n, "vector_add_truncated_grid");
  if (n == 0) return;
  constexpr unsigned block = 256;
  const unsigned grid = static_cast<unsigned>(std::min<std::size_t>(n / block, kMaxGridX));  // BUG
  vector_add_kernel<<<grid, block, 0, stream>>>(a, b, c, n);
  // grid == 0 (n < 256): the launch fails at once. The documentation names
  // cudaErrorInvalidConfiguration; CUDA 13.0 returned cudaErrorInvalidValue on the H200
  // (is_invalid_launch_error in kernels.cuh accepts both).
  CUDA_CHECK_LAUNCH();
}

void vector_add_one_per_thread(const float* a, const float* b, float* c, std::size_t n,
                               int block_size, cudaStream_t stream) {
  require_vectors(a, b, c, n, "vector_add_one_per_thread");
  require(block_size >= 1 && block_size <= 1024,
          "vector_add_one_per_thread: block_size must be in [1, 1024], got " +
              std::to_string(block_size));
  if (n == 0) return;  // a grid of 0 blocks is an invalid configuration, not an empty launch
  const std::size_t grid = ceil_div(n, static_cast<std::size_t>(block_size));
  require(grid <= kMaxGridX, "vector_add_one_per_thread: n = " + std::to_string(n) +
                                 " needs more than 2^31 - 1 blocks of " +
                                 std::to_string(block_size) + "; use vector_add (grid-stride)");
  vector_add_kernel<<<static_cast<unsigned>(grid), block_size, 0, stream>>>(a, b, c, n);
  CUDA_CHECK_LAUNCH();
}

LaunchConfig vector_add_launch_config(std::size_t n) {
  // cudaOccupancyMaxPotentialBlockSize evaluates block sizes from 1024 down in steps of 32 (until
  // one reaches full occupancy): work to do once per device, not once per launch. The cache is per
  // host thread, so it needs no lock, and it is keyed on the device, which cudaSetDevice may change
  // between calls.
  struct Cached {
    int device = -1;
    int min_grid = 0;
    int block = 0;
  };
  thread_local Cached cached;
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  if (cached.device != device) {
    Cached fresh;
    CUDA_CHECK(cudaOccupancyMaxPotentialBlockSize(&fresh.min_grid, &fresh.block,
                                                  vector_add_grid_stride_kernel));
    fresh.device = device;
    cached = fresh;
  }
  LaunchConfig cfg;
  cfg.block = dim3(static_cast<unsigned>(cached.block));
  // More blocks than can be resident would only queue up behind the first wave; fewer than
  // ceil(n / block) is fine because the loop strides.
  const std::size_t needed = ceil_div(n, static_cast<std::size_t>(cached.block));
  cfg.grid = dim3(static_cast<unsigned>(std::min<std::size_t>(needed, cached.min_grid)));
  return cfg;
}

void vector_add(const float* a, const float* b, float* c, std::size_t n, cudaStream_t stream) {
  require_vectors(a, b, c, n, "vector_add");
  if (n == 0) return;
  const LaunchConfig cfg = vector_add_launch_config(n);
  vector_add_grid_stride_kernel<<<cfg.grid, cfg.block, cfg.dynamic_smem_bytes, stream>>>(a, b, c,
                                                                                         n);
  CUDA_CHECK_LAUNCH();
}

// =============================================================================================
// 3. Limits and the errors past them
// =============================================================================================

LaunchLimits launch_limits(int device) {
  LaunchLimits l;
  l.max_threads_per_block = course::device_attribute(cudaDevAttrMaxThreadsPerBlock, device);
  l.max_block[0] = course::device_attribute(cudaDevAttrMaxBlockDimX, device);
  l.max_block[1] = course::device_attribute(cudaDevAttrMaxBlockDimY, device);
  l.max_block[2] = course::device_attribute(cudaDevAttrMaxBlockDimZ, device);
  l.max_grid[0] = course::device_attribute(cudaDevAttrMaxGridDimX, device);
  l.max_grid[1] = course::device_attribute(cudaDevAttrMaxGridDimY, device);
  l.max_grid[2] = course::device_attribute(cudaDevAttrMaxGridDimZ, device);
  l.smem_per_block = course::device_attribute(cudaDevAttrMaxSharedMemoryPerBlock, device);
  l.smem_per_block_optin =
      course::device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  l.regs_per_block = course::device_attribute(cudaDevAttrMaxRegistersPerBlock, device);
  return l;
}

namespace {
__global__ void empty_kernel() {}
__global__ void empty_kernel_opted_in() {}

// Register blocking: the 8 x 8 accumulator tile lives in 64 registers for the whole k loop, plus
// the 16 operands of each step and the addresses. More registers per thread means fewer threads
// per SM (occupancy, section 5) and, past 64 per thread, no 1024-thread blocks at all: a block's
// threads share one SM's 65536 registers.
__global__ void tiny_gemm_8x8_kernel(const float* __restrict__ a, const float* __restrict__ b,
                                     float* __restrict__ c, int k, int count) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= count) return;
  const float* at = a + static_cast<std::size_t>(t) * k * kTile;
  const float* bt = b + static_cast<std::size_t>(t) * k * kTile;
  float acc[kTile][kTile];
#pragma unroll
  for (int i = 0; i < kTile; ++i) {
#pragma unroll
    for (int j = 0; j < kTile; ++j) acc[i][j] = 0.0f;
  }
  for (int p = 0; p < k; ++p) {
    float ai[kTile], bj[kTile];
#pragma unroll
    for (int i = 0; i < kTile; ++i) {
      ai[i] = at[p * kTile + i];
      bj[i] = bt[p * kTile + i];
    }
#pragma unroll
    for (int i = 0; i < kTile; ++i) {
#pragma unroll
      for (int j = 0; j < kTile; ++j) acc[i][j] = fmaf(ai[i], bj[j], acc[i][j]);
    }
  }
  float* ct = c + static_cast<std::size_t>(t) * kTile * kTile;
#pragma unroll
  for (int i = 0; i < kTile; ++i) {
#pragma unroll
    for (int j = 0; j < kTile; ++j) ct[i * kTile + j] = acc[i][j];
  }
}

// Sleeps about `ns` nanoseconds on the GPU (__nanosleep needs sm_70; the course needs sm_75).
__global__ void sleep_kernel(long long ns) {
  for (long long slept = 0; slept < ns; slept += 1000000) __nanosleep(1000000);
}

// Writes through whatever pointer it is given: with nullptr, an illegal address.
__global__ void illegal_write_kernel(int* p) {
  *p = 42;
}
}  // namespace

cudaError_t launch_error(ProbeKernel kernel, dim3 grid, dim3 block,
                         std::size_t dynamic_smem_bytes) {
  switch (kernel) {
    case ProbeKernel::empty:
      empty_kernel<<<grid, block, dynamic_smem_bytes>>>();
      break;
    case ProbeKernel::empty_opted_in:
      empty_kernel_opted_in<<<grid, block, dynamic_smem_bytes>>>();
      break;
    case ProbeKernel::tiny_gemm:
      // count = 0: if the launch is accepted, every thread returns at once and touches nothing.
      tiny_gemm_8x8_kernel<<<grid, block, dynamic_smem_bytes>>>(nullptr, nullptr, nullptr, 1, 0);
      break;
  }
  // A launch returns no error code: a configuration the runtime rejects is recorded as this host
  // thread's "last error". cudaGetLastError returns it and resets it to cudaSuccess.
  return cudaGetLastError();
}

cudaError_t opt_in_dynamic_smem(int bytes) {
  const cudaError_t err = cudaFuncSetAttribute(empty_kernel_opted_in,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  (void)cudaGetLastError();  // a failed runtime call also sets the last error: clear it
  return err;
}

void tiny_gemm_8x8(const float* a, const float* b, float* c, int k, int count, int block_size,
                   cudaStream_t stream) {
  require(k >= 1, "tiny_gemm_8x8: k must be >= 1, got " + std::to_string(k));
  require(count >= 0, "tiny_gemm_8x8: count must be >= 0, got " + std::to_string(count));
  require(count == 0 || (a != nullptr && b != nullptr && c != nullptr),
          "tiny_gemm_8x8: a, b and c must be device pointers (got a null pointer)");
  require(block_size >= 1 && block_size <= 1024,
          "tiny_gemm_8x8: block_size must be in [1, 1024], got " + std::to_string(block_size));
  if (count == 0) return;
  const auto grid = static_cast<unsigned>(
      ceil_div(static_cast<std::size_t>(count), static_cast<std::size_t>(block_size)));
  tiny_gemm_8x8_kernel<<<grid, block_size, 0, stream>>>(a, b, c, k, count);
  CUDA_CHECK_LAUNCH();  // block_size above the kernel's register limit: LaunchOutOfResources
}

void launch_illegal_write(int delay_ms, cudaStream_t stream) {
  sleep_kernel<<<1, 1, 0, stream>>>(static_cast<long long>(delay_ms) * 1000000);
  illegal_write_kernel<<<1, 1, 0, stream>>>(nullptr);
}

// =============================================================================================
// 4. Warps
// =============================================================================================

namespace {
// The same instructions for both layouts; only the data decide which lanes take which path.
// A warp issues one instruction for all its active lanes (SIMT, Programming Guide "SIMT
// Architecture"): when its lanes want different paths, the warp runs each path in turn with the
// other lanes masked off, so a warp with `ways` paths pays for all of them.
__global__ void divergence_kernel(std::uint32_t* __restrict__ out, std::size_t n, int ways,
                                  int iterations, PathLayout layout) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const int path = path_of(i, ways, layout);
  std::uint32_t x = divergence_seed(i);
  for (int p = 0; p < ways; ++p) {
    if (path == p) x = path_work(x, p, iterations);
  }
  out[i] = x;
}

// One warp. Every *_sync intrinsic names the lanes that take part (here all 32) and must be
// reached by all of them: since Volta, lanes of a warp are scheduled independently and are not
// assumed to be in step (Programming Guide, "Independent Thread Scheduling", "Warp Vote
// Functions", "Warp Shuffle Functions").
__global__ void warp_intrinsics_kernel(const int* __restrict__ values, int threshold,
                                       LaneReport* __restrict__ out) {
  const int lane = threadIdx.x % warpSize;  // a 1D block: the lane is threadIdx.x mod 32
  const int v = values[lane];
  const bool predicate = v > threshold;
  LaneReport r;
  r.value = v;
  r.ballot = __ballot_sync(kFullMask, predicate);
  r.any = __any_sync(kFullMask, predicate);
  r.all = __all_sync(kFullMask, predicate);
  r.broadcast = __shfl_sync(kFullMask, v, 0);
  r.down1 = __shfl_down_sync(kFullMask, v, 1);  // lane 31 has no lane 32: keeps its own value
  r.xor1 = __shfl_xor_sync(kFullMask, v, 1);
  const bool took = lane % 3 == 0;
  r.took_branch = took;
  r.branch_ballot = __ballot_sync(kFullMask, took);  // outside the branch: all lanes vote
  r.active_in_branch = 0;
  if (took) r.active_in_branch = __activemask();
  out[lane] = r;
}

// Sum of a warp's 32 values, in lane 0, in five steps: lane l adds lane l + 16, then l + 8, ...
// Values move register to register; no shared memory, no __syncthreads.
__device__ float warp_reduce_sum(float v) {
  for (int offset = warpSize / 2; offset > 0; offset /= 2) {
    v += __shfl_down_sync(kFullMask, v, offset);
  }
  return v;
}

__global__ void warp_sum_kernel(const float* __restrict__ in, float* __restrict__ out,
                                std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  const std::size_t warp_first = i - i % warpSize;
  // A whole warp past the end may leave (all its lanes agree). A partial warp must NOT let its
  // out-of-range lanes return before the shuffle: __shfl_down_sync with the full mask needs all
  // 32 lanes. They take part with 0 instead.
  if (warp_first >= n) return;
  float v = i < n ? in[i] : 0.0f;
  v = warp_reduce_sum(v);
  if (i % warpSize == 0) out[i / warpSize] = v;
}
}  // namespace

void run_divergence(std::uint32_t* out, std::size_t n, int ways, int iterations, PathLayout layout,
                    cudaStream_t stream) {
  require(ways >= 1 && ways <= kWarpSize,
          "run_divergence: ways must be in [1, 32], got " + std::to_string(ways));
  require(iterations >= 0,
          "run_divergence: iterations must be >= 0, got " + std::to_string(iterations));
  require(n == 0 || out != nullptr, "run_divergence: out must be a device pointer to n uint32");
  if (n == 0) return;
  constexpr unsigned block = 256;  // a multiple of 32: warps line up with 32-element runs of i
  const std::size_t grid = ceil_div(n, block);
  require(grid <= kMaxGridX, "run_divergence: n too large for one thread per element");
  divergence_kernel<<<static_cast<unsigned>(grid), block, 0, stream>>>(out, n, ways, iterations,
                                                                       layout);
  CUDA_CHECK_LAUNCH();
}

std::vector<LaneReport> warp_intrinsics_demo(const std::vector<int>& values, int threshold) {
  require(values.size() == static_cast<std::size_t>(kWarpSize),
          "warp_intrinsics_demo: values must hold exactly 32 ints (one per lane), got " +
              std::to_string(values.size()));
  course::DeviceBuffer<int> dev_values = course::to_device(values);
  course::DeviceBuffer<LaneReport> dev_out(kWarpSize);
  warp_intrinsics_kernel<<<1, kWarpSize>>>(dev_values.data(), threshold, dev_out.data());
  CUDA_CHECK_LAUNCH();
  return course::to_host(dev_out);
}

void warp_sums(const float* in, float* out, std::size_t n, cudaStream_t stream) {
  require(n == 0 || (in != nullptr && out != nullptr),
          "warp_sums: in (n floats) and out (ceil(n / 32) floats) must be device pointers");
  if (n == 0) return;
  constexpr unsigned block = 256;  // a multiple of 32, so every warp starts at a multiple of 32
  const std::size_t grid = ceil_div(n, block);
  require(grid <= kMaxGridX, "warp_sums: n too large for one thread per element");
  warp_sum_kernel<<<static_cast<unsigned>(grid), block, 0, stream>>>(in, out, n);
  CUDA_CHECK_LAUNCH();
}

// =============================================================================================
// 6. Deployment example: HxWx3 BGR bytes -> 3xHxW float RGB
// (before section 5 in this file only because the occupancy queries name every kernel)
// =============================================================================================
//
// A 2D launch: blocks of 32 x 8 threads, x across a row. A warp is then 32 neighbouring pixels of
// one row: it reads 96 contiguous bytes (three 32-byte sectors) and writes 32 contiguous floats
// (128 bytes) into each of the three planes, so every access of the warp is coalesced.

namespace {
struct NormParams {
  float mean[3];
  float inv_std[3];
};

__global__ void bgr8_to_rgb_planar_kernel(const std::uint8_t* __restrict__ src, int width,
                                          int height, std::size_t src_pitch,
                                          float* __restrict__ dst, NormParams norm) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= width || y >= height) return;
  const std::uint8_t* px = src + static_cast<std::size_t>(y) * src_pitch + 3 * x;
  const std::size_t plane = static_cast<std::size_t>(width) * height;
  const std::size_t o = static_cast<std::size_t>(y) * width + x;
  // Channel c of the output is byte 2 - c of the pixel: B G R in memory, R G B out.
  dst[o] = normalize_u8(px[2], norm.mean[0], norm.inv_std[0]);
  dst[plane + o] = normalize_u8(px[1], norm.mean[1], norm.inv_std[1]);
  dst[2 * plane + o] = normalize_u8(px[0], norm.mean[2], norm.inv_std[2]);
}

constexpr unsigned kImageBlockX = 32, kImageBlockY = 8;
constexpr int kMaxImageHeight = 65535 * static_cast<int>(kImageBlockY);  // grid.y <= 65535

void require_image(const void* src, const void* dst, int width, int height, std::size_t pitch,
                   const char* who) {
  const std::string w = who;
  require(src != nullptr && dst != nullptr, w + ": src and dst must be device pointers");
  require(width >= 1 && height >= 1, w + ": width and height must be >= 1, got " +
                                         std::to_string(width) + " x " + std::to_string(height));
  require(height <= kMaxImageHeight, w + ": height must be <= " + std::to_string(kMaxImageHeight) +
                                         ", got " + std::to_string(height));
  require(pitch >= 3 * static_cast<std::size_t>(width),
          w + ": the interleaved row pitch must be >= 3 * width = " +
              std::to_string(3 * static_cast<std::size_t>(width)) + " bytes, got " +
              std::to_string(pitch));
}

dim3 image_grid(int width, int height) {
  return dim3(static_cast<unsigned>(ceil_div(width, kImageBlockX)),
              static_cast<unsigned>(ceil_div(height, kImageBlockY)));
}
}  // namespace

void bgr8_to_rgb_planar(const std::uint8_t* src, int width, int height, std::size_t src_pitch_bytes,
                        float* dst, const Normalization& norm, cudaStream_t stream) {
  require_image(src, dst, width, height, src_pitch_bytes, "bgr8_to_rgb_planar");
  NormParams p{};
  for (int c = 0; c < 3; ++c) {
    // The same rule as lesson 06's validate_normalize. A std below 1e-6 is a unit mistake or a
    // typo, and 1 / 1e-45 is inf.
    if (!(std::isfinite(norm.mean[c]) && std::isfinite(norm.std[c]) &&
          norm.std[c] >= kMinNormStd)) {
      std::ostringstream msg;
      msg << "bgr8_to_rgb_planar: std must be finite and >= " << kMinNormStd
          << " and mean finite, got mean " << norm.mean[c] << ", std " << norm.std[c]
          << " (channel " << c << ")";
      throw std::invalid_argument(msg.str());
    }
    p.mean[c] = norm.mean[c];
    p.inv_std[c] = 1.0f / norm.std[c];  // one multiply per element instead of a divide
  }
  bgr8_to_rgb_planar_kernel<<<image_grid(width, height), dim3(kImageBlockX, kImageBlockY), 0,
                              stream>>>(src, width, height, src_pitch_bytes, dst, p);
  CUDA_CHECK_LAUNCH();
}

// =============================================================================================
// 5. Occupancy: the runtime's answers
// =============================================================================================

namespace {
struct KernelEntry {
  LessonKernel id;
  const char* name;
  const void* symbol;  // the __global__ function, as the runtime's C API takes it
};

const KernelEntry& entry(LessonKernel kernel) {
  static const KernelEntry table[] = {
      {LessonKernel::vector_add, "vector_add (1 thread/elem)",
       reinterpret_cast<const void*>(&vector_add_kernel)},
      {LessonKernel::vector_add_grid_stride, "vector_add (grid-stride)",
       reinterpret_cast<const void*>(&vector_add_grid_stride_kernel)},
      {LessonKernel::divergence, "divergence", reinterpret_cast<const void*>(&divergence_kernel)},
      {LessonKernel::warp_sum, "warp_sum", reinterpret_cast<const void*>(&warp_sum_kernel)},
      {LessonKernel::tiny_gemm, "tiny_gemm_8x8",
       reinterpret_cast<const void*>(&tiny_gemm_8x8_kernel)},
      {LessonKernel::bgr8_to_rgb_planar, "bgr8_to_rgb_planar",
       reinterpret_cast<const void*>(&bgr8_to_rgb_planar_kernel)},
  };
  for (const auto& e : table) {
    if (e.id == kernel) return e;
  }
  throw std::invalid_argument("unknown LessonKernel " + std::to_string(static_cast<int>(kernel)));
}

const void* kernel_symbol(LessonKernel kernel) {
  return entry(kernel).symbol;
}
}  // namespace

const char* kernel_name(LessonKernel kernel) {
  return entry(kernel).name;
}

KernelResources kernel_resources(LessonKernel kernel) {
  cudaFuncAttributes attr{};
  CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel_symbol(kernel)));
  KernelResources r;
  r.regs_per_thread = attr.numRegs;
  r.static_smem_bytes = static_cast<int>(attr.sharedSizeBytes);
  r.max_dynamic_smem_bytes = attr.maxDynamicSharedSizeBytes;
  r.max_threads_per_block = attr.maxThreadsPerBlock;
  r.local_bytes_per_thread = static_cast<int>(attr.localSizeBytes);
  return r;
}

int max_active_blocks_per_sm(LessonKernel kernel, int block_size, std::size_t dynamic_smem_bytes) {
  require(block_size >= 1,
          "max_active_blocks_per_sm: block_size must be >= 1, got " + std::to_string(block_size));
  int blocks = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel_symbol(kernel),
                                                           block_size, dynamic_smem_bytes));
  return blocks;
}

BlockSizeSuggestion suggest_block_size(LessonKernel kernel) {
  BlockSizeSuggestion s;
  CUDA_CHECK(
      cudaOccupancyMaxPotentialBlockSize(&s.min_grid_size, &s.block_size, kernel_symbol(kernel)));
  return s;
}

SmLimits sm_limits(int device) {
  SmLimits s;
  s.cc_major = course::device_attribute(cudaDevAttrComputeCapabilityMajor, device);
  s.cc_minor = course::device_attribute(cudaDevAttrComputeCapabilityMinor, device);
  s.warp_size = course::device_attribute(cudaDevAttrWarpSize, device);
  s.max_threads_per_block = course::device_attribute(cudaDevAttrMaxThreadsPerBlock, device);
  s.max_threads_per_sm = course::device_attribute(cudaDevAttrMaxThreadsPerMultiProcessor, device);
  s.max_blocks_per_sm = course::device_attribute(cudaDevAttrMaxBlocksPerMultiprocessor, device);
  s.regs_per_sm = course::device_attribute(cudaDevAttrMaxRegistersPerMultiprocessor, device);
  s.regs_per_block = course::device_attribute(cudaDevAttrMaxRegistersPerBlock, device);
  s.smem_per_sm = course::device_attribute(cudaDevAttrMaxSharedMemoryPerMultiprocessor, device);
  s.smem_per_block_optin =
      course::device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  s.reserved_smem_per_block =
      course::device_attribute(cudaDevAttrReservedSharedMemoryPerBlock, device);
  s.reg_alloc_unit = 256;
  s.smem_alloc_unit = s.cc_major >= 8 ? 128 : 256;
  s.sub_partitions = 4;
  return s;
}

void validate_sm_limits(const SmLimits& sm) {
  // The occupancy arithmetic divides by each of these; a zero would be a SIGFPE, not an answer.
  const auto positive = [](int v, const char* name) {
    require(v >= 1, std::string("SmLimits: ") + name + " must be >= 1, got " + std::to_string(v));
  };
  positive(sm.warp_size, "warp_size");
  positive(sm.sub_partitions, "sub_partitions");
  positive(sm.reg_alloc_unit, "reg_alloc_unit");
  positive(sm.smem_alloc_unit, "smem_alloc_unit");
}

}  // namespace lesson03

// The exercise solutions (solutions.cuh): compiled here, in this translation unit, by the
// lesson build only; the exercise build takes exercise.cu instead. Try the exercises first.
#ifndef LESSON_EXERCISE_BUILD
#include "solutions.cuh"
#endif
