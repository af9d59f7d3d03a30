// Lesson 13: the checked entry points of the INT8 GPU kernels (int8_conv_gpu.hpp). Host code;
// the kernels and their raw launches are in int8_conv_gpu.cu.
#include "int8_conv_gpu.hpp"

#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>

#include "common/cuda_check.hpp"
#include "fp8_conv_gpu.hpp"

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

struct NamedPointer {
  const void* p;
  const char* name;
};

// The current device's compute capability against min_cc (10 major + minor; `needs` says why)
// and every non-null pointer device-accessible; messages start with `who`. Returns the device.
// Throws std::invalid_argument.
int check_device(const char* who, int min_cc, const char* needs,
                 std::initializer_list<NamedPointer> pointers) {
  const auto fail = [&](const std::string& what) {
    throw std::invalid_argument(std::string(who) + ": " + what);
  };
  int dev = 0, major = 0, minor = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  if (major * 10 + minor < min_cc) {
    fail("this GPU has compute capability " + std::to_string(major) + "." + std::to_string(minor) +
         "; " + needs);
  }
  for (const NamedPointer& ptr : pointers) {
    if (ptr.p != nullptr && !device_accessible(ptr.p))
      fail(std::string(ptr.name) + " is not memory the GPU can access (pageable host memory?)");
  }
  return dev;
}

// What both tensor-core launchers check before a launch (messages start with `who`): the tile
// index (into `tiles`, whose name is `tiles_name`), then, unless batch is 0, check_device.
// Returns the tile to launch (auto_tile(SM count) for -1), or -1 when there is nothing to launch.
// Throws std::invalid_argument.
template <class AutoTile>
int checked_tile(const char* who, int tile, const std::vector<Int8ConvTile>& tiles,
                 const char* tiles_name, int batch, int min_cc, const char* needs,
                 std::initializer_list<NamedPointer> pointers, AutoTile auto_tile) {
  const int count = static_cast<int>(tiles.size());
  if (tile < -1 || tile >= count) {
    throw std::invalid_argument(std::string(who) + ": tile " + std::to_string(tile) +
                                " is neither -1 (automatic) nor an index of " + tiles_name +
                                " (0.." + std::to_string(count - 1) + ")");
  }
  if (batch == 0) return -1;
  const int dev = check_device(who, min_cc, needs, pointers);
  if (tile < 0) {
    int sms = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    tile = auto_tile(sms);
  }
  return tile;
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

bool int8_wgmma_eligible(const Int8ConvArgs& a) {
  return a.kernel == 1 && a.stride == 1 && a.pad == 0;
}

bool int8_wgmma_pays(const Int8ConvArgs& a, int sm_count) {
  if (sm_count < 1) {
    throw std::invalid_argument("int8_wgmma_pays: sm_count must be positive, got " +
                                std::to_string(sm_count));
  }
  const long long pixels = static_cast<long long>(a.batch) * a.out_h * a.out_w;
  return a.in_c >= 128 && pixels >= 128LL * sm_count;
}

bool int8_wgmma_available() {
  if (!detail::int8_wgmma_built()) return false;
  int dev = 0, major = 0, minor = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  return major == 9 && minor == 0;  // sm_90a code runs on 9.0 only
}

int int8_wgmma_auto_tile(const Int8ConvArgs& a) {
  (void)a;  // the same tile for every layer (the header says why)
  return static_cast<int>(int8_wgmma_tiles().size()) - 1;  // widest first: 128x64 is the last
}

void conv_int8_gpu(const Int8ConvArgs& a, cudaStream_t stream, int tile,
                   unsigned long long* fallbacks, Int8Epilogue epilogue, Int8ConvPath path) {
  check_int8_conv_gpu_args(a);
  const bool forced = path == Int8ConvPath::wgmma;
  if (forced) {
    require(int8_wgmma_eligible(a),
            "the wgmma path computes 1x1 convolutions with stride 1 and pad 0 only, not a " +
                std::to_string(a.kernel) + "x" + std::to_string(a.kernel) + " stride " +
                std::to_string(a.stride) + " pad " + std::to_string(a.pad) + " one");
  }
  // The automatic path's choice needs the device: made in the tile callback, after the checks.
  bool wgmma = forced;
  tile = checked_tile("conv_int8_gpu", tile, forced ? int8_wgmma_tiles() : int8_conv_tiles(),
                      forced ? "int8_wgmma_tiles()" : "int8_conv_tiles()", a.batch, 80,
                      "mma.sync.m16n8k32 with INT8 operands and cp.async need 8.0",
                      {{a.x, "x"},
                       {a.w, "w"},
                       {a.bias, "bias"},
                       {a.w_scale, "w_scale"},
                       {a.y, "y"},
                       {a.res, "res"},
                       {fallbacks, "fallbacks"}},
                      [&](int sms) {
                        if (path == Int8ConvPath::automatic && int8_wgmma_eligible(a) &&
                            int8_wgmma_pays(a, sms) && int8_wgmma_available())
                          wgmma = true;
                        return wgmma ? int8_wgmma_auto_tile(a) : int8_conv_auto_tile(a, sms);
                      });
  if (tile < 0) return;  // batch 0
  if (forced) {
    require(int8_wgmma_available(),
            detail::int8_wgmma_built()
                ? "the wgmma path needs compute capability 9.0 (sm_90a code)"
                : "the wgmma path was not compiled (CMAKE_CUDA_ARCHITECTURES without 90)");
  }
  if (wgmma)
    detail::launch_int8_wgmma(tile, a, epilogue, fallbacks, stream);
  else
    detail::launch_int8_conv(tile, a, epilogue, fallbacks, stream);
}

// ------------------------------------------------------------------------ the first layer

void check_int8_image_conv_args(const Int8ImageConvArgs& a) {
  const auto require_img = [](bool ok, const std::string& what) {
    if (!ok) throw std::invalid_argument("conv_int8_image_gpu: " + what);
  };
  require_img(a.images != nullptr, "images must not be null");
  require_img(a.conv.x == nullptr && a.conv.res == nullptr,
              "conv.x and conv.res must be null (the kernel reads the float images, and a first "
              "layer has no residual)");
  Int8ConvArgs c = a.conv;  // the images stand in for x in the shared checks
  c.x = reinterpret_cast<const std::int8_t*>(a.images);
  c.x_stride = c.in_c;
  check_int8_conv_args(c, "conv_int8_image_gpu", false);
  require_img(c.in_c <= kInt8ImageMaxChannels,
              "in_c = " + std::to_string(c.in_c) + " exceeds " +
                  std::to_string(kInt8ImageMaxChannels) +
                  " (the codes of a pixel are one 32-bit word; run wider inputs on conv_int8_gpu)");
  require_img(c.batch <= 65535,
              "batch = " + std::to_string(c.batch) + " exceeds 65535 (one grid z index per image)");
  const int smem = detail::int8_image_conv_smem(c);
  require_img(smem <= 48 * 1024,
              "a block would need " + std::to_string(smem) +
                  " bytes of shared memory for this kernel size, stride and out_c (at most "
                  "49152: 4 bytes per tap and output channel, 12 per channel, 4 per input pixel "
                  "of an 8 x 32 output tile's receptive field, 80 per thread)");
}

void conv_int8_image_gpu(const Int8ImageConvArgs& a, cudaStream_t stream,
                         unsigned long long* fallbacks, Int8Epilogue epilogue) {
  check_int8_image_conv_args(a);
  if (a.conv.batch == 0) return;
  check_device("conv_int8_image_gpu", 80, "the INT8 path of this lesson needs 8.0",
               {{a.images, "images"},
                {a.conv.w, "w"},
                {a.conv.bias, "bias"},
                {a.conv.w_scale, "w_scale"},
                {a.conv.y, "y"},
                {fallbacks, "fallbacks"}});
  detail::launch_int8_image_conv(a, epilogue, fallbacks, stream);
}

// ------------------------------------------------------------------------ FP8 (fp8_conv_gpu.hpp)

namespace {
void require_fp8(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("conv_fp8_gpu: " + what);
}
// The INT8 kernel's tile rule looks at the output shape only.
Int8ConvArgs shape_of(const Fp8ConvArgs& a) {
  Int8ConvArgs s{};
  s.batch = a.batch;
  s.out_h = a.out_h;
  s.out_w = a.out_w;
  s.out_c = a.out_c;
  return s;
}
}  // namespace

int fp8_conv_auto_tile(const Fp8ConvArgs& a, int sm_count) {
  return int8_conv_auto_tile(shape_of(a), sm_count);
}

void check_fp8_conv_gpu_args(const Fp8ConvArgs& a) {
  check_fp8_conv_args(a, "conv_fp8_gpu", false);
  require_fp8(a.in_c % kInt8ConvChannelMultiple == 0,
              "in_c = " + std::to_string(a.in_c) + " is not a multiple of " +
                  std::to_string(kInt8ConvChannelMultiple) +
                  " (16 channels per 16-byte copy; pad the channels with zeros)");
  require_fp8(a.x_stride % kInt8ConvChannelMultiple == 0,
              "x_stride = " + std::to_string(a.x_stride) + " is not a multiple of " +
                  std::to_string(kInt8ConvChannelMultiple) +
                  " (every pixel's channels must start on a 16-byte boundary)");
  require_fp8(aligned16(a.x), "x is not 16-byte aligned (cp.async copies 16 bytes)");
  require_fp8(aligned16(a.w), "w is not 16-byte aligned (cp.async copies 16 bytes)");
}

void conv_fp8_gpu(const Fp8ConvArgs& a, cudaStream_t stream, int tile) {
  check_fp8_conv_gpu_args(a);
  tile = checked_tile("conv_fp8_gpu", tile, int8_conv_tiles(), "int8_conv_tiles()", a.batch, 89,
                      "mma.sync.m16n8k32 with E4M3 operands needs 8.9",
                      {{a.x, "x"},
                       {a.w, "w"},
                       {a.bias, "bias"},
                       {a.w_scale, "w_scale"},
                       {a.y, "y"},
                       {a.res, "res"}},
                      [&](int sms) { return fp8_conv_auto_tile(a, sms); });
  if (tile >= 0) detail::launch_fp8_conv(tile, a, stream);
}

// ------------------------------------------------------------------------ the number checks

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
