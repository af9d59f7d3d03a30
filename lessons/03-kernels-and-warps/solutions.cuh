// Lesson 03: the exercise solutions. Read them after you have tried.
//
// Not compiled on its own: kernels.cu includes this file at its end, in the lesson build only, so
// the solutions share its translation unit (its helpers, and the kernels that call them).
// The exercise build (make check LESSON=03) compiles kernels.cu with LESSON_EXERCISE_BUILD
// defined, which leaves this file out, and exercise.cu supplies the same functions instead.
#pragma once

namespace lesson03 {

// ---- Exercise 1: RGB planar float -> BGR interleaved bytes ----------------------------------
namespace {
__global__ void rgb_planar_to_bgr8_kernel(const float* __restrict__ src, int width, int height,
                                          std::uint8_t* __restrict__ dst, std::size_t dst_pitch) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= width || y >= height) return;
  const std::size_t plane = static_cast<std::size_t>(width) * height;
  const std::size_t o = static_cast<std::size_t>(y) * width + x;
  std::uint8_t* px = dst + static_cast<std::size_t>(y) * dst_pitch + 3 * x;
  px[0] = to_u8_saturate(src[2 * plane + o]);  // B
  px[1] = to_u8_saturate(src[plane + o]);      // G
  px[2] = to_u8_saturate(src[o]);              // R
}
}  // namespace

void rgb_planar_to_bgr8(const float* src, int width, int height, std::uint8_t* dst,
                        std::size_t dst_pitch_bytes, cudaStream_t stream) {
  require_image(src, dst, width, height, dst_pitch_bytes, "rgb_planar_to_bgr8");
  rgb_planar_to_bgr8_kernel<<<image_grid(width, height), dim3(kImageBlockX, kImageBlockY), 0,
                              stream>>>(src, width, height, dst, dst_pitch_bytes);
  CUDA_CHECK_LAUNCH();
}

// ---- Exercise 2: warp all-reduce (max) with __shfl_xor_sync -----------------------------------
namespace {
__global__ void warp_max_allreduce_kernel(const float* __restrict__ in, float* __restrict__ out,
                                          std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i - i % warpSize >= n) return;  // the whole warp is past the end
  // Lanes past n take part with the identity of max, so the full mask stays valid.
  float v = i < n ? in[i] : -INFINITY;
  // Butterfly: after the step with mask m, every lane holds the max of its group of 2m lanes;
  // after 16, 8, 4, 2, 1 every lane holds the max of all 32 (no broadcast step needed).
  for (int mask = warpSize / 2; mask > 0; mask /= 2) {
    v = fmaxf(v, __shfl_xor_sync(kFullMask, v, mask));
  }
  if (i < n) out[i] = v;
}
}  // namespace

void warp_max_allreduce(const float* in, float* out, std::size_t n, cudaStream_t stream) {
  require(n == 0 || (in != nullptr && out != nullptr),
          "warp_max_allreduce: in and out must be device pointers to n floats");
  if (n == 0) return;
  constexpr unsigned block = 256;
  const std::size_t grid = ceil_div(n, block);
  require(grid <= kMaxGridX, "warp_max_allreduce: n too large for one thread per element");
  warp_max_allreduce_kernel<<<static_cast<unsigned>(grid), block, 0, stream>>>(in, out, n);
  CUDA_CHECK_LAUNCH();
}

// ---- Exercise 3: occupancy by hand -----------------------------------------------------------
namespace {
constexpr int round_up(int x, int unit) {
  return (x + unit - 1) / unit * unit;
}
}  // namespace

OccupancyEstimate occupancy_by_hand(const SmLimits& sm, const KernelResources& k, int block_size,
                                    std::size_t dynamic_smem_bytes) {
  require(block_size >= 1,
          "occupancy_by_hand: block_size must be >= 1, got " + std::to_string(block_size));
  validate_sm_limits(sm);
  OccupancyEstimate e;
  const int warps_per_block = (block_size + sm.warp_size - 1) / sm.warp_size;
  const int max_warps_per_sm = sm.max_threads_per_sm / sm.warp_size;

  // Warp slots: an SM keeps at most max_threads_per_sm / 32 warps resident; a partial warp takes
  // a whole slot.
  const bool block_fits = block_size <= sm.max_threads_per_block &&
                          (k.max_threads_per_block <= 0 || block_size <= k.max_threads_per_block);
  e.by_warps = block_fits ? max_warps_per_sm / warps_per_block : 0;

  // Registers: allocated per warp, in units of reg_alloc_unit. The register file is split evenly
  // between the SM's sub-partitions, and a warp lives in one of them, so count warps per
  // sub-partition. A block must also fit the per-block limit, which the hardware checks as if its
  // warps were spread over all sub-partitions (warps rounded up to a multiple of 4).
  if (k.regs_per_thread <= 0) {
    e.by_registers = INT_MAX;
  } else {
    const int regs_per_warp = round_up(k.regs_per_thread * sm.warp_size, sm.reg_alloc_unit);
    const bool fits_block =
        k.regs_per_thread <= 255 &&
        regs_per_warp * round_up(warps_per_block, sm.sub_partitions) <= sm.regs_per_block;
    if (!fits_block) {
      e.by_registers = 0;
    } else {
      const int warps_per_sub_partition = (sm.regs_per_sm / sm.sub_partitions) / regs_per_warp;
      e.by_registers = warps_per_sub_partition * sm.sub_partitions / warps_per_block;
    }
  }

  // Shared memory: static + dynamic + the driver's reserve, rounded up to the allocation unit,
  // out of the SM's shared memory. Asking for more dynamic shared memory than the kernel's limit
  // (48 KiB unless it opted in) makes the launch fail.
  const std::size_t smem = static_cast<std::size_t>(k.static_smem_bytes) + dynamic_smem_bytes +
                           static_cast<std::size_t>(sm.reserved_smem_per_block);
  const std::size_t unit = static_cast<std::size_t>(sm.smem_alloc_unit);
  const std::size_t smem_allocated = (smem + unit - 1) / unit * unit;
  if (dynamic_smem_bytes > static_cast<std::size_t>(std::max(k.max_dynamic_smem_bytes, 0)) ||
      smem_allocated > static_cast<std::size_t>(sm.smem_per_block_optin) +
                           static_cast<std::size_t>(sm.reserved_smem_per_block)) {
    e.by_shared_memory = 0;
  } else if (smem_allocated == 0) {
    e.by_shared_memory = INT_MAX;
  } else {
    e.by_shared_memory =
        static_cast<int>(static_cast<std::size_t>(sm.smem_per_sm) / smem_allocated);
  }

  e.by_blocks = sm.max_blocks_per_sm;

  e.blocks_per_sm = std::min({e.by_registers, e.by_shared_memory, e.by_warps, e.by_blocks});
  e.limiter = e.blocks_per_sm == e.by_warps       ? "warps"
              : e.blocks_per_sm == e.by_blocks    ? "blocks"
              : e.blocks_per_sm == e.by_registers ? "registers"
                                                  : "shared memory";
  e.active_warps = e.blocks_per_sm * warps_per_block;
  e.occupancy = max_warps_per_sm > 0 ? static_cast<double>(e.active_warps) / max_warps_per_sm : 0.0;
  return e;
}

}  // namespace lesson03
