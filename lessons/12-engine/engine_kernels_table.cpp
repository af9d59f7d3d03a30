// Lesson 12: the host side of engine_kernels.cu: the kernel table the builder chooses tactics
// from, what each kernel requires, and the launch geometry. The tiles, thread counts and shared
// memory here must match the instantiations at the end of engine_kernels.cu (the GPU tests run
// every entry against a CPU convolution).
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "engine_kernels.cuh"

namespace lesson12 {

namespace {

constexpr ConvKernelInfo mma(const char* symbol, const char* tactic, int tile_m, int tile_n,
                             int threads) {
  return {symbol, tactic,  ConvFamily::igemm_mma,          DType::f16, tile_m,
          tile_n, threads, mma_smem_bytes(tile_m, tile_n), 8,          0,
          80};
}

// Split-K over a cluster of `split` blocks: the partial tiles meet in distributed shared memory,
// which needs compute capability 9.0. The shared memory is the ring's or the FP32 tile's,
// whichever is larger.
constexpr ConvKernelInfo mma_split(const char* symbol, const char* tactic, int tile_m, int tile_n,
                                   int threads, int split) {
  return {symbol,
          tactic,
          ConvFamily::igemm_mma,
          DType::f16,
          tile_m,
          tile_n,
          threads,
          mma_smem_bytes(tile_m, tile_n) > tile_m * tile_n * 4 ? mma_smem_bytes(tile_m, tile_n)
                                                               : tile_m * tile_n * 4,
          8,
          0,
          90,
          split};
}

// tile_m, tile_n, threads, dynamic shared memory, in_c multiple, max K, min_sm
constexpr ConvKernelInfo kConvKernels[] = {
    mma("conv_igemm_mma_f16_128x128", "mma 128x128 (8 warps)", 128, 128, 256),
    mma("conv_igemm_mma_f16_128x64", "mma 128x64 (8 warps)", 128, 64, 256),
    mma("conv_igemm_mma_f16_128x64_w4", "mma 128x64 (4 warps)", 128, 64, 128),
    mma("conv_igemm_mma_f16_64x64", "mma 64x64 (4 warps)", 64, 64, 128),
    mma("conv_igemm_mma_f16_128x32", "mma 128x32 (4 warps)", 128, 32, 128),
    mma("conv_igemm_mma_f16_64x32", "mma 64x32 (4 warps)", 64, 32, 128),
    mma("conv_igemm_mma_f16_128x16", "mma 128x16 (4 warps)", 128, 16, 128),
    mma("conv_igemm_mma_f16_32x64", "mma 32x64 (4 warps)", 32, 64, 128),
    mma("conv_igemm_mma_f16_32x32", "mma 32x32 (4 warps)", 32, 32, 128),
    mma_split("conv_igemm_mma_f16_32x32_splitk2", "split-K 2, mma 32x32 (cluster of 2)", 32, 32,
              128, 2),
    mma_split("conv_igemm_mma_f16_32x32_splitk4", "split-K 4, mma 32x32 (cluster of 4)", 32, 32,
              128, 4),
    mma_split("conv_igemm_mma_f16_32x64_splitk2", "split-K 2, mma 32x64 (cluster of 2)", 32, 64,
              128, 2),
    mma_split("conv_igemm_mma_f16_32x64_splitk4", "split-K 4, mma 32x64 (cluster of 4)", 32, 64,
              128, 4),
    {"conv_igemm_simt_f32_128x64", "simt 128x64 (8x4 per thread)", ConvFamily::igemm_simt,
     DType::f32, 128, 64, 256, 0, 4, 0, 0},
    {"conv_igemm_simt_f32_64x32", "simt 64x32 (4x4 per thread)", ConvFamily::igemm_simt, DType::f32,
     64, 32, 128, 0, 4, 0, 0},
    {"conv_direct_f16", "direct (8 channels per thread)", ConvFamily::direct, DType::f16, 128, 8,
     128, 0, 1, kDirectMaxK, 0},
    {"conv_direct_f32", "direct (8 channels per thread)", ConvFamily::direct, DType::f32, 128, 8,
     128, 0, 1, kDirectMaxK, 0},
    {"conv_first_nchw_f16", "first layer, NCHW in (16 channels per thread)",
     ConvFamily::first_layer, DType::f16, 128, 16, 128, 0, 1, kFirstLayerMaxK, 0},
    {"conv_first_nchw_f32", "first layer, NCHW in (16 channels per thread)",
     ConvFamily::first_layer, DType::f32, 128, 16, 128, 0, 1, kFirstLayerMaxK, 0},
};

bool aligned16(const void* p) {
  return p == nullptr || reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
}

long long ceil_div(long long a, long long b) {
  return (a + b - 1) / b;
}

}  // namespace

const ConvKernelInfo* conv_kernels(int* count) {
  if (count != nullptr) *count = static_cast<int>(sizeof(kConvKernels) / sizeof(kConvKernels[0]));
  return kConvKernels;
}

bool conv_kernel_runs_on(const ConvKernelInfo& k, int sm) {
  return sm >= k.min_sm;
}

bool conv_kernel_supports(const ConvKernelInfo& k, const ConvArgs& a, bool first_layer) {
  if ((k.family == ConvFamily::first_layer) != first_layer) return false;
  if (a.in_c <= 0 || a.out_c <= 0 || a.kernel <= 0 || a.stride <= 0) return false;
  if (k.max_k > 0 && static_cast<long long>(a.kernel) * a.kernel * a.in_c > k.max_k) return false;
  if (k.in_c_multiple > 1) {
    // 16-byte chunks of one tap: the channel count, the view's pixel stride and both base
    // addresses must keep every chunk 16-byte aligned (w's rows are K = k*k*in_c elements).
    if (a.in_c % k.in_c_multiple != 0 || a.x_stride % k.in_c_multiple != 0) return false;
    if (!aligned16(a.x) || !aligned16(a.w)) return false;
  }
  return true;
}

dim3 conv_grid(const ConvKernelInfo& k, const ConvArgs& a) {
  const long long m = static_cast<long long>(a.batch) * a.out_h * a.out_w;
  if (m <= 0 || a.out_c <= 0)
    throw std::invalid_argument(std::string("conv_grid(") + k.symbol +
                                "): expected batch, out_h, out_w and out_c > 0, got M = " +
                                std::to_string(m) + ", out_c = " + std::to_string(a.out_c));
  const long long gx = ceil_div(m, k.tile_m), gy = ceil_div(a.out_c, k.tile_n);
  // The kernels index pixels with int: M itself must fit.
  if (m > 0x7fffffffLL || gx > 0x7fffffffLL || gy > 65535)
    throw std::invalid_argument(
        std::string("conv_grid(") + k.symbol + "): M = " + std::to_string(m) + " pixels x " +
        std::to_string(a.out_c) + " channels exceeds the kernel's grid limits");
  return dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy),
              static_cast<unsigned>(k.split_k > 1 ? k.split_k : 1));
}

std::size_t conv_smem_bytes(const ConvKernelInfo& k, const ConvArgs& a) {
  if (k.family != ConvFamily::igemm_mma) return static_cast<std::size_t>(k.smem_bytes);
  const int stages = mma_stages_used(a.kernel * a.kernel * a.in_c);
  std::size_t bytes = mma_smem_bytes(k.tile_m, k.tile_n, stages < 1 ? 1 : stages);
  if (k.split_k > 1) bytes = std::max<std::size_t>(bytes, 4ull * k.tile_m * k.tile_n);
  return bytes;
}

const char* max_pool_symbol(DType t) {
  return t == DType::f16 ? "max_pool_nhwc_f16" : "max_pool_nhwc_f32";
}
const char* upsample_symbol(DType t) {
  return t == DType::f16 ? "upsample2x_nhwc_f16" : "upsample2x_nhwc_f32";
}
const char* detect_symbol(DType t) {
  return t == DType::f16 ? "detect_decode_f16" : "detect_decode_f32";
}

dim3 pool_grid(const PoolArgs& a) {
  const long long work =
      static_cast<long long>(a.batch) * a.out_h * a.out_w * ((a.channels + 7) / 8);
  // A grid-stride loop covers the rest: a million blocks already fill any GPU many times.
  const long long blocks = std::max(1LL, std::min(ceil_div(work, kPoolThreads), 1LL << 20));
  return dim3(static_cast<unsigned>(blocks));
}

dim3 detect_grid(const DetectArgs& a) {
  const long long work = static_cast<long long>(a.batch) * a.num_candidates;
  return dim3(static_cast<unsigned>(std::max(1LL, ceil_div(work, kDetectThreads))));
}

}  // namespace lesson12
