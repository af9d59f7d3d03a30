// Lesson 13: the checked entry points of the INT8 GPU kernels (int8_conv_gpu.hpp). Host code;
// the kernels and their raw launches are in int8_conv_gpu.cu.
#include "int8_conv_gpu.hpp"

#include <cstdint>
#include <stdexcept>
#include <string>

#include "common/cuda_check.hpp"

namespace lesson13 {

namespace {

void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("conv_int8_gpu: " + what);
}

bool aligned16(const void* p) {
  return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0;
}

// Whether the current device can dereference p: device, managed, or pinned host memory (mapped
// into the device's address space under unified addressing). Pageable host memory cannot.
bool device_accessible(const void* p) {
  cudaPointerAttributes attr{};
  CUDA_CHECK(cudaPointerGetAttributes(&attr, p));
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged ||
         attr.type == cudaMemoryTypeHost;
}

long long blocks_of(const Int8ConvTile& t, const Int8ConvArgs& a) {
  const long long M = static_cast<long long>(a.batch) * a.out_h * a.out_w;
  return ((M + t.tile_m - 1) / t.tile_m) * ((a.out_c + t.tile_n - 1) / t.tile_n);
}

}  // namespace

int int8_conv_auto_tile(const Int8ConvArgs& a, int sm_count) {
  if (sm_count < 1) {
    throw std::invalid_argument("int8_conv_auto_tile: sm_count must be positive, got " +
                                std::to_string(sm_count));
  }
  const std::vector<Int8ConvTile>& tiles = int8_conv_tiles();
  const int n16 = (a.out_c + 15) / 16 * 16;
  int last_fitting = -1;
  for (int i = 0; i < static_cast<int>(tiles.size()); ++i) {
    if (tiles[i].tile_n >= 2 * n16) continue;  // half of the tile's channels or more wasted
    last_fitting = i;
    if (blocks_of(tiles[i], a) >= sm_count) return i;  // tiles are listed largest first
  }
  return last_fitting >= 0 ? last_fitting : static_cast<int>(tiles.size()) - 1;
}

void check_int8_conv_gpu_args(const Int8ConvArgs& a) {
  check_int8_conv_args(a, "conv_int8_gpu", false);
  require(a.in_c % kInt8ConvChannelMultiple == 0,
          "in_c = " + std::to_string(a.in_c) + " is not a multiple of " +
              std::to_string(kInt8ConvChannelMultiple) +
              " (the tensor-core path moves 16 channels per 16-byte copy; pad the channels "
              "with zeros, or run the layer in FP16)");
  require(a.x_stride % kInt8ConvChannelMultiple == 0, "x_stride = " + std::to_string(a.x_stride) +
                                                          " is not a multiple of " +
                                                          std::to_string(kInt8ConvChannelMultiple) +
                                                          " (every pixel's channels must start "
                                                          "on a 16-byte boundary)");
  require(aligned16(a.x), "x is not 16-byte aligned (cp.async copies 16 bytes)");
  require(aligned16(a.w), "w is not 16-byte aligned (cp.async copies 16 bytes)");
}

void conv_int8_gpu(const Int8ConvArgs& a, cudaStream_t stream, int tile,
                   unsigned long long* fallbacks, Int8Epilogue epilogue) {
  check_int8_conv_gpu_args(a);
  const int count = static_cast<int>(int8_conv_tiles().size());
  require(tile >= -1 && tile < count, "tile " + std::to_string(tile) +
                                          " is neither -1 (automatic) nor an index of "
                                          "int8_conv_tiles() (0.." +
                                          std::to_string(count - 1) + ")");
  if (a.batch == 0) return;
  int dev = 0, major = 0, minor = 0, sms = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  require(major >= 8, "this GPU has compute capability " + std::to_string(major) + "." +
                          std::to_string(minor) +
                          "; mma.sync.m16n8k32 with INT8 operands and cp.async need 8.0");
  const struct {
    const void* p;
    const char* name;
  } pointers[] = {{a.x, "x"}, {a.w, "w"},     {a.bias, "bias"},        {a.w_scale, "w_scale"},
                  {a.y, "y"}, {a.res, "res"}, {fallbacks, "fallbacks"}};
  for (const auto& ptr : pointers) {
    if (ptr.p != nullptr) {
      require(device_accessible(ptr.p),
              std::string(ptr.name) + " is not memory the GPU can access (pageable host memory?)");
    }
  }
  if (tile < 0) {
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    tile = int8_conv_auto_tile(a, sms);
  }
  detail::launch_int8_conv(tile, a, epilogue, fallbacks, stream);
}

namespace {
void check_array(const char* who, const void* in, const void* out, int n) {
  if (n < 0 || (n > 0 && (in == nullptr || out == nullptr))) {
    throw std::invalid_argument(
        std::string(who) + ": expected n >= 0 and two device arrays, got n = " + std::to_string(n));
  }
}
}  // namespace

void quantize_int8_gpu(const float* x, int n, float scale, std::int8_t* q, cudaStream_t stream) {
  check_array("quantize_int8_gpu", x, q, n);
  detail::launch_quantize_int8(x, n, scale, q, stream);
}

void fp8_e4m3_from_float_gpu(const float* x, int n, std::uint8_t* code, cudaStream_t stream) {
  check_array("fp8_e4m3_from_float_gpu", x, code, n);
  detail::launch_fp8_from_float(x, n, code, stream);
}

void fp8_e4m3_to_float_gpu(const std::uint8_t* code, int n, float* x, cudaStream_t stream) {
  check_array("fp8_e4m3_to_float_gpu", code, x, n);
  detail::launch_fp8_to_float(code, n, x, stream);
}

}  // namespace lesson13
