// Lesson 03: kernels, thread layout and warps.
//
// How work maps onto the GPU, in the order main.cu tells it:
//   1. index mapping      map_threads                      who runs which element (1D/2D/3D)
//   2. the tail           vector_add_truncated_grid (bug), vector_add_one_per_thread,
//                         vector_add (grid-stride loop, launch configuration from the occupancy
//                         API)
//   3. limits and errors  launch_error, opt_in_dynamic_smem, tiny_gemm_8x8 (register-hungry),
//                         launch_illegal_write (a sticky error: only ever in a throw-away process)
//   4. warps              run_divergence, warp_intrinsics_demo, warp_sums
//   5. occupancy          kernel_resources, max_active_blocks_per_sm, suggest_block_size, sm_limits
//   6. deployment         bgr8_to_rgb_planar (OpenCV's HxWx3 BGR bytes -> the CHW float RGB
//                         tensor a TensorRT engine takes)
// Exercises (solutions in solutions.cuh, stubs in exercise.cu):
//   1. rgb_planar_to_bgr8    the 2D index mapping of an image kernel, the other way round
//   2. warp_max_allreduce    a warp reduction with __shfl_xor_sync
//   3. occupancy_by_hand     predict what cudaOccupancyMaxActiveBlocksPerMultiprocessor answers
//
// This header is included by host-only C++ (the tests, compiled by g++): it declares no kernels.
// The __host__ __device__ functions below hold the per-element math, so CPU tests check it and
// the kernels in kernels.cu are only the loops around it.
// All pointers named a, b, c, in, out, src, dst are DEVICE pointers unless stated otherwise.
// Every launcher throws std::invalid_argument for bad arguments (before any CUDA call) and
// course::CudaError when a CUDA call fails.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace lesson03 {

constexpr int kWarpSize = 32;                // every NVIDIA GPU so far; kernels use warpSize
constexpr unsigned kFullMask = 0xffffffffu;  // all 32 lanes take part in a *_sync intrinsic

// ---------------------------------------------------------------------------------------------
// 1. Index mapping
// ---------------------------------------------------------------------------------------------

// Number of blocks of `block` threads needed to cover n elements: ceil(n / block), without the
// overflow of (n + block - 1) when n is close to SIZE_MAX. block must be > 0.
__host__ __device__ constexpr std::size_t ceil_div(std::size_t n, std::size_t block) {
  return n / block + (n % block != 0 ? 1 : 0);
}

// A thread's position inside its block as one number: x varies fastest, then y, then z
// (Programming Guide, "Thread Hierarchy"). Warps are cut from this order in runs of 32, so in a
// 16 x 4 block, rows y = 0 and 1 form warp 0.
__host__ __device__ constexpr int linear_thread_index(int tx, int ty, int tz, int block_x,
                                                      int block_y) {
  return tx + ty * block_x + tz * block_x * block_y;
}

// Which block/thread/warp/lane wrote an element. block[0] == -1 means no thread did.
struct ThreadRecord {
  int block[3];   // blockIdx.x, .y, .z
  int thread[3];  // threadIdx.x, .y, .z
  int warp;       // warp inside the block: linear_thread_index / 32
  int lane;       // lane inside the warp:  linear_thread_index % 32
};

// Extent of a 1D, 2D or 3D array of elements; unused dimensions are 1.
struct Extent3 {
  int x = 1, y = 1, z = 1;
  std::size_t count() const {
    return static_cast<std::size_t>(x) * static_cast<std::size_t>(y) * static_cast<std::size_t>(z);
  }
};

// Launches <<<grid, block>>> over `extent`: the thread at global coordinates (x, y, z) =
// blockIdx * blockDim + threadIdx records itself for element (x, y, z) if it is inside the
// extent. Returns extent.count() records in x-fastest order (index (z * y_extent + y) * x_extent
// + x); elements no thread covered have block[0] == -1.
// Throws std::invalid_argument if an extent is < 1, extent.count() > 2^20 (this is a printer), or
// a grid/block dimension is 0; CudaError if the launch fails (e.g. a block of more than 1024).
std::vector<ThreadRecord> map_threads(dim3 grid, dim3 block, Extent3 extent);

// The error a launch past the device's limits (too many threads per block, a block or grid
// dimension too large, a dimension of 0) returns at once, from cudaGetLastError right after it.
// The CUDA documentation names it cudaErrorInvalidConfiguration; the CUDA 13.0 runtime with
// driver 580.159 returned cudaErrorInvalidValue for every such launch on an H200 (measured by
// this lesson's binary, 2026-11-29). Either way the kernel never ran and the error is not sticky.
inline bool is_invalid_launch_error(cudaError_t e) {
  return e == cudaErrorInvalidConfiguration || e == cudaErrorInvalidValue;
}

// ---------------------------------------------------------------------------------------------
// 2. The tail: n that is not a multiple of the block size
// ---------------------------------------------------------------------------------------------

// c[i] = a[i] + b[i] for i < n; a, b, c: n floats each (device).

// THE CLASSIC BUG, on purpose: grid = n / 256 blocks rounds down, so the last n % 256 elements are
// never computed, and for n < 256 the grid is 0, which the runtime rejects at once
// (is_invalid_launch_error; thrown as CudaError here because the launch is checked).
// n == 0 launches nothing.
void vector_add_truncated_grid(const float* a, const float* b, float* c, std::size_t n,
                               cudaStream_t stream = nullptr);

// One thread per element: grid = ceil(n / block_size) blocks, every thread checks i < n (the last
// block has ceil(n / block_size) * block_size - n idle threads). n == 0 launches nothing.
// Throws std::invalid_argument if block_size is outside [1, 1024], a pointer is null with n > 0,
// or the grid would exceed 2^31 - 1 blocks.
void vector_add_one_per_thread(const float* a, const float* b, float* c, std::size_t n,
                               int block_size, cudaStream_t stream = nullptr);

// A launch configuration: grid and block in threads, dynamic shared memory in bytes.
struct LaunchConfig {
  dim3 grid{0, 1, 1};
  dim3 block{0, 1, 1};
  std::size_t dynamic_smem_bytes = 0;
};

// The configuration vector_add uses: the block size cudaOccupancyMaxPotentialBlockSize picks for
// the grid-stride kernel, and as many blocks as fit on the GPU at once (the API's minimum grid for
// full occupancy), but no more than ceil(n / block). n == 0 gives grid.x == 0 (launch nothing).
// The occupancy query runs once per host thread and current device (cached); throws CudaError if
// it, or cudaGetDevice, fails.
LaunchConfig vector_add_launch_config(std::size_t n);

// Vector add done right: a grid-stride loop (any n, 64-bit indices, each thread handles several
// elements when n exceeds the resident threads), the occupancy API's launch configuration, the
// caller's stream, the launch checked. n == 0 launches nothing.
// Throws std::invalid_argument if a pointer is null with n > 0.
void vector_add(const float* a, const float* b, float* c, std::size_t n,
                cudaStream_t stream = nullptr);

// ---------------------------------------------------------------------------------------------
// 3. Limits and the errors past them
// ---------------------------------------------------------------------------------------------

// The launch limits of a device (cudaDeviceGetAttribute). Throws CudaError.
struct LaunchLimits {
  int max_threads_per_block = 0;
  int max_block[3] = {0, 0, 0};  // blockDim limits: 1024, 1024, 64 on every sm_75+ GPU
  int max_grid[3] = {0, 0, 0};   // gridDim limits: 2^31 - 1, 65535, 65535
  int smem_per_block = 0;        // bytes a block gets without opting in (48 KiB)
  int smem_per_block_optin = 0;  // bytes after cudaFuncSetAttribute(MaxDynamicSharedMemorySize)
  int regs_per_block = 0;        // 32-bit registers one block may use (65536)
};
LaunchLimits launch_limits(int device = 0);

// Kernels the launch probes use. empty and empty_opted_in do nothing (two copies, so that the
// opt-in attribute set on one does not change what the other shows); tiny_gemm is the
// register-hungry kernel below, launched with count = 0 so it touches no memory.
enum class ProbeKernel { empty, empty_opted_in, tiny_gemm };

// Launches `kernel` with <<<grid, block, dynamic_smem_bytes>>> WITHOUT checking, then returns
// cudaGetLastError(), which both reports the launch error and clears it. Launch-configuration
// errors are not sticky: the next launch works. Never throws.
cudaError_t launch_error(ProbeKernel kernel, dim3 grid, dim3 block,
                         std::size_t dynamic_smem_bytes = 0);

// cudaFuncSetAttribute(empty_opted_in, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes): raises
// that kernel's dynamic shared memory limit above the default 48 KiB, up to
// LaunchLimits::smem_per_block_optin. Returns the call's error (and clears it). Never throws.
cudaError_t opt_in_dynamic_smem(int bytes);

// A batch of tiny GEMMs, one per thread, with an 8 x 8 accumulator tile in registers (the
// register blocking of lesson 07): that tile makes the kernel need more than 64 registers per
// thread, so 1024 threads per block exceed the 65536 registers of a block.
//   a, b: count x k x 8 floats; c: count x 8 x 8 floats;
//   c[t][i][j] = sum_p a[t][p][i] * b[t][p][j]
// count == 0 launches nothing. Throws std::invalid_argument if k < 1, count < 0, a pointer is null
// with count > 0 or block_size is outside [1, 1024]; CudaError (cudaErrorLaunchOutOfResources)
// if block_size exceeds what the kernel's registers allow
// (kernel_resources(LessonKernel::tiny_gemm).max_threads_per_block).
constexpr int kTile = 8;
void tiny_gemm_8x8(const float* a, const float* b, float* c, int k, int count, int block_size,
                   cudaStream_t stream = nullptr);

// Writes through a null pointer after sleeping `delay_ms` on the GPU (so that the launch itself
// returns, and is checked, long before the fault). The fault is a STICKY error
// (cudaErrorIllegalAddress; driver_types.h says of it, and of e.g. cudaErrorLaunchTimeout and
// cudaErrorLaunchFailure, that it "leaves the process in an inconsistent state"): the context is
// unusable afterwards and every later CUDA call in the process fails. Call it only in a process
// that exists to die (a child process); see main.cu and the CHILD_PROBE in test_kernels.cpp.
// Does not check for errors.
void launch_illegal_write(int delay_ms, cudaStream_t stream = nullptr);

// ---------------------------------------------------------------------------------------------
// 4. Warps
// ---------------------------------------------------------------------------------------------

// Divergence: the same kernel, the same work per thread; only which thread takes which of `ways`
// code paths changes.
//   lane_interleaved: path = lane % ways   -> every warp holds `ways` paths and runs them one
//                                             after another (SIMT: one instruction per warp)
//   warp_uniform:     path = warp % ways   -> each warp holds one path: no divergence
enum class PathLayout { lane_interleaved, warp_uniform };

__host__ __device__ constexpr int path_of(std::size_t i, int ways, PathLayout layout) {
  return layout == PathLayout::lane_interleaved
             ? static_cast<int>((i % kWarpSize) % static_cast<std::size_t>(ways))
             : static_cast<int>((i / kWarpSize) % static_cast<std::size_t>(ways));
}

// The starting value of element i (Knuth's multiplicative hash, so neighbours differ).
__host__ __device__ constexpr std::uint32_t divergence_seed(std::size_t i) {
  return static_cast<std::uint32_t>(i) * 2654435761u + 1u;
}

// The work of one path: `iterations` xorshift32 steps, salted by the path so that every path
// computes something different (and the compiler cannot merge the paths into one).
__host__ __device__ inline std::uint32_t path_work(std::uint32_t x, int path, int iterations) {
  const std::uint32_t salt = 0x9E3779B9u * static_cast<std::uint32_t>(path + 1);
  for (int it = 0; it < iterations; ++it) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    x += salt;
  }
  return x;
}

// out[i] = path_work(divergence_seed(i), path_of(i, ways, layout), iterations) for i < n;
// out: n uint32 (device). Blocks of 256 threads. n == 0 launches nothing.
// Throws std::invalid_argument if ways is outside [1, 32], iterations < 0, or out is null with
// n > 0.
void run_divergence(std::uint32_t* out, std::size_t n, int ways, int iterations, PathLayout layout,
                    cudaStream_t stream = nullptr);

// What one lane of a warp sees from the vote and shuffle intrinsics (one warp of 32 lanes, input
// values[lane], predicate values[lane] > threshold).
struct LaneReport {
  int value;                  // values[lane]
  unsigned ballot;            // __ballot_sync(full, predicate): bit k = predicate of lane k
  int any;                    // __any_sync(full, predicate)
  int all;                    // __all_sync(full, predicate)
  int broadcast;              // __shfl_sync(full, value, 0): lane 0's value
  int down1;                  // __shfl_down_sync(full, value, 1): lane+1's value (lane 31: own)
  int xor1;                   // __shfl_xor_sync(full, value, 1): lane^1's value (pairs swap)
  int took_branch;            // lane % 3 == 0
  unsigned branch_ballot;     // __ballot_sync(full, lane % 3 == 0): exactly the lanes that took it
  unsigned active_in_branch;  // __activemask() inside the branch (0 outside): the lanes executing
                              // together at that point, which always includes this lane but is
                              // NOT guaranteed to equal branch_ballot
};

// Runs one warp over values (exactly 32 host values) and returns 32 reports, lane order.
// Throws std::invalid_argument if values.size() != 32.
std::vector<LaneReport> warp_intrinsics_demo(const std::vector<int>& values, int threshold);

// out[w] = in[32 w] + ... + in[32 w + 31] (only the elements < n) for w < ceil(n / 32), summed in
// registers with __shfl_down_sync (a tree: 16, 8, 4, 2, 1). in: n floats; out: ceil(n / 32)
// floats (device). n == 0 launches nothing. Throws std::invalid_argument on null pointers with
// n > 0.
void warp_sums(const float* in, float* out, std::size_t n, cudaStream_t stream = nullptr);

// ---------------------------------------------------------------------------------------------
// 5. Occupancy
// ---------------------------------------------------------------------------------------------

// The lesson's kernels, for the occupancy queries.
enum class LessonKernel {
  vector_add,              // one thread per element
  vector_add_grid_stride,  // vector_add's kernel
  divergence,
  warp_sum,
  tiny_gemm,  // > 64 registers per thread
  bgr8_to_rgb_planar,
};
// Every lookup by LessonKernel below throws std::invalid_argument for a value outside the enum,
// before any CUDA call.
const char* kernel_name(LessonKernel kernel);

// What a compiled kernel needs per thread / per block (cudaFuncGetAttributes for this device).
struct KernelResources {
  int regs_per_thread = 0;
  int static_smem_bytes = 0;       // __shared__ arrays declared in the kernel
  int max_dynamic_smem_bytes = 0;  // the kernel's current limit (48 KiB - static, unless opted in)
  int max_threads_per_block = 0;   // what this kernel can be launched with (registers allowing)
  int local_bytes_per_thread = 0;  // register spills and stack, in (slow) local memory
};
KernelResources kernel_resources(LessonKernel kernel);  // CudaError if the query fails

// cudaOccupancyMaxActiveBlocksPerMultiprocessor: how many blocks of block_size threads (with
// dynamic_smem_bytes each) fit on one SM at once; 0 if such a block cannot run at all. Throws
// std::invalid_argument if block_size < 1 (before any CUDA call), CudaError if the query fails.
int max_active_blocks_per_sm(LessonKernel kernel, int block_size,
                             std::size_t dynamic_smem_bytes = 0);

// cudaOccupancyMaxPotentialBlockSize: the block size with the highest occupancy (the largest
// among equals), and the grid that fills the GPU with it (SMs x blocks per SM). Throws CudaError.
struct BlockSizeSuggestion {
  int block_size = 0;
  int min_grid_size = 0;
};
BlockSizeSuggestion suggest_block_size(LessonKernel kernel);

// What an SM offers, the input of the occupancy calculation. sm_limits() reads a device; tests
// build synthetic ones.
struct SmLimits {
  int cc_major = 0, cc_minor = 0;
  int warp_size = 32;
  int max_threads_per_block = 1024;
  int max_threads_per_sm = 0;       // 1024 (sm_75), 1536 (sm_86, sm_89), 2048 (sm_80, sm_90)
  int max_blocks_per_sm = 0;        // 16 (sm_75, sm_86), 24 (sm_89), 32 (sm_80, sm_90)
  int regs_per_sm = 0;              // 65536 32-bit registers
  int regs_per_block = 0;           // 65536
  int smem_per_sm = 0;              // bytes, the largest carveout (228 KiB on sm_90)
  int smem_per_block_optin = 0;     // bytes a block may opt in to (227 KiB on sm_90)
  int reserved_smem_per_block = 0;  // bytes the driver keeps per block (1 KiB from sm_80 on)
  // Not exposed as device attributes; the values of the CUDA Occupancy Calculator for sm_75+:
  int reg_alloc_unit = 256;   // registers are given to a warp in units of 256
  int smem_alloc_unit = 128;  // bytes a block's shared memory is rounded up to (256 on 7.x)
  int sub_partitions = 4;     // an SM is 4 sub-partitions, each with a quarter of the registers
};
SmLimits sm_limits(int device = 0);  // throws CudaError

// Throws std::invalid_argument unless warp_size, sub_partitions, reg_alloc_unit and
// smem_alloc_unit are >= 1: the occupancy calculation divides by each of them.
void validate_sm_limits(const SmLimits& sm);

// ---------------------------------------------------------------------------------------------
// 6. Deployment example: the image layout a TensorRT engine takes
// ---------------------------------------------------------------------------------------------

// Per-channel normalisation in RGB order, in units of the [0, 1] range:
// out = (v / 255 - mean) / std.
struct Normalization {
  float mean[3];
  float std[3];
  static Normalization unit() { return {{0.f, 0.f, 0.f}, {1.f, 1.f, 1.f}}; }
  // torchvision's ImageNet statistics, what most classification backbones were trained with.
  static Normalization imagenet() { return {{0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f}}; }
};
// The smallest std accepted: real statistics are ~0.2, and 1 / std must stay far from inf.
constexpr float kMinNormStd = 1e-6f;

// One 8-bit channel value to the network's float: (v / 255 - mean) * inv_std.
__host__ __device__ inline float normalize_u8(std::uint8_t v, float mean, float inv_std) {
  return (static_cast<float>(v) * (1.0f / 255.0f) - mean) * inv_std;
}

// src: height x width x 3 uint8, BGR interleaved (OpenCV's CV_8UC3), rows src_pitch_bytes apart
//      (>= 3 * width; cv::Mat::step, or the pitch of cudaMallocPitch);
// dst: 3 x height x width float, RGB planar (CHW, NCHW with N = 1), densely packed:
//      dst[c][y][x] = normalize_u8(src[y][x][2 - c], norm.mean[c], 1 / norm.std[c]).
// One thread per pixel, blocks of 32 x 8 (a warp reads one row segment of 32 pixels).
// Throws std::invalid_argument if a pointer is null, width or height < 1, height > 65535 * 8
// (the grid's y limit), src_pitch_bytes < 3 * width, a mean is not finite, or a std is not
// finite or below kMinNormStd (negative included).
void bgr8_to_rgb_planar(const std::uint8_t* src, int width, int height, std::size_t src_pitch_bytes,
                        float* dst, const Normalization& norm = Normalization::unit(),
                        cudaStream_t stream = nullptr);

// One float in [0, 1] back to 8 bits: round(v * 255), saturated to [0, 255]; NaN gives 0.
__host__ __device__ inline std::uint8_t to_u8_saturate(float v) {
  const float scaled = floorf(v * 255.0f + 0.5f);
  if (!(scaled > 0.0f)) return 0;  // also catches NaN
  if (scaled >= 255.0f) return 255;
  return static_cast<std::uint8_t>(scaled);
}

// ---------------------------------------------------------------------------------------------
// Exercises (solutions in solutions.cuh; exercise.cu holds the stubs you fill in)
// ---------------------------------------------------------------------------------------------

// Exercise 1: the way back, e.g. a segmentation or super-resolution output to a displayable image.
// src: 3 x height x width float RGB planar (CHW, densely packed), values nominally in [0, 1];
// dst: height x width x 3 uint8 BGR interleaved, rows dst_pitch_bytes apart:
//      dst[y][x][c] = to_u8_saturate(src[2 - c][y][x]).
// Bytes of a dst row past 3 * width (pitch padding) are left untouched.
// Throws std::invalid_argument if a pointer is null, width or height < 1, height > 65535 * 8, or
// dst_pitch_bytes < 3 * width.
void rgb_planar_to_bgr8(const float* src, int width, int height, std::uint8_t* dst,
                        std::size_t dst_pitch_bytes, cudaStream_t stream = nullptr);

// Exercise 2: out[i] = the maximum of in over the 32-element segment holding i (the elements
// 32 * (i / 32) .. 32 * (i / 32) + 31 that are < n), every lane ending with it (an all-reduce with
// __shfl_xor_sync). in, out: n floats (device), no NaNs in `in`. n == 0 launches nothing.
// Throws std::invalid_argument if a pointer is null with n > 0.
void warp_max_allreduce(const float* in, float* out, std::size_t n, cudaStream_t stream = nullptr);

// Exercise 3: occupancy by hand. How many blocks of block_size threads, each using
// dynamic_smem_bytes of dynamic shared memory, an SM with limits `sm` runs at once for a kernel
// needing `k`: the minimum of the four limits below (INT_MAX where a resource is not used).
// A launch that cannot run at all (block_size above what the device or kernel allows, too many
// registers or too much shared memory for one block, dynamic_smem_bytes above
// k.max_dynamic_smem_bytes) gives blocks_per_sm == 0.
// Throws std::invalid_argument if block_size < 1 or validate_sm_limits(sm) rejects sm. The other
// SmLimits fields are taken as given (zeros give zero limits, not errors); in `k`,
// regs_per_thread or max_threads_per_block <= 0 means no register use or no kernel limit.
struct OccupancyEstimate {
  int by_warps = 0;          // warp slots: (max_threads_per_sm / 32) / warps per block
  int by_registers = 0;      // register file, allocated per warp in units of reg_alloc_unit
  int by_shared_memory = 0;  // smem_per_sm / (static + dynamic + reserved, rounded to the unit)
  int by_blocks = 0;         // max_blocks_per_sm
  int blocks_per_sm = 0;     // the minimum of the four
  int active_warps = 0;      // blocks_per_sm x warps per block
  double occupancy = 0.0;    // active_warps / (max_threads_per_sm / 32), in [0, 1]
  const char* limiter = "";  // the first of "warps", "blocks", "registers", "shared memory"
                             // whose limit equals blocks_per_sm (so a kernel at full occupancy
                             // reads "warps")
};
OccupancyEstimate occupancy_by_hand(const SmLimits& sm, const KernelResources& k, int block_size,
                                    std::size_t dynamic_smem_bytes = 0);

}  // namespace lesson03
