// Lesson 06: letterbox preprocessing, from a plain warp kernel to a fused, batched one.
// The kernels in the order they are taught; see affine_warp.cuh for the list and the semantics.
#include "affine_warp.cuh"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#include "common/cuda_check.hpp"

namespace lesson06 {

// ------------------------------------------------------------------------ validation

namespace {
std::string prefix(const char* who) {
  return std::string(who) + ": ";
}

void check_size(int w, int h, const char* what, const char* who) {
  if (w < 1 || h < 1) {
    throw std::invalid_argument(prefix(who) + what + " size must be at least 1x1, got " +
                                std::to_string(w) + "x" + std::to_string(h));
  }
  if (w > kMaxDimension || h > kMaxDimension) {
    throw std::invalid_argument(prefix(who) + what + " size must be at most " +
                                std::to_string(kMaxDimension) +
                                " per side (OpenCV's coordinate "
                                "limit), got " +
                                std::to_string(w) + "x" + std::to_string(h));
  }
}

template <class T>
void check_destination(const T* dst, const char* who) {
  if (dst == nullptr) throw std::invalid_argument(prefix(who) + "destination pointer is null");
}

}  // namespace

void validate_source(const ImageView& src, const char* who) {
  if (src.width == 0 || src.height == 0) {
    throw std::invalid_argument(prefix(who) + "source image is empty (" +
                                std::to_string(src.width) + "x" + std::to_string(src.height) +
                                "); expected at least 1x1");
  }
  if (src.channels != 3) {
    throw std::invalid_argument(prefix(who) + "expected a 3-channel BGR image, got " +
                                std::to_string(src.channels) + " channels");
  }
  check_size(src.width, src.height, "source", who);
  if (src.data == nullptr) throw std::invalid_argument(prefix(who) + "source data is null");
  if (src.pitch < 3 * static_cast<std::size_t>(src.width)) {
    throw std::invalid_argument(prefix(who) + "source row pitch " + std::to_string(src.pitch) +
                                " bytes is smaller than 3 x width = " +
                                std::to_string(3 * static_cast<std::size_t>(src.width)));
  }
}

void validate_target(int dst_w, int dst_h, const char* who) {
  check_size(dst_w, dst_h, "target", who);
}

void validate_warp_range(const Affine2x3& dst_to_src, int dst_w, int dst_h, const char* who) {
  const double* m = dst_to_src.m;
  for (int k = 0; k < 6; ++k) {
    if (!std::isfinite(m[k])) {
      throw std::invalid_argument(prefix(who) + "the matrix must be finite, got a NaN or inf");
    }
  }
  // Each term is linear in x or y, so the largest sum of |terms| sits at the far corner.
  const double xmax = dst_w > 0 ? dst_w - 1.0 : 0.0, ymax = dst_h > 0 ? dst_h - 1.0 : 0.0;
  const double reach = std::max(std::fabs(m[0]) * xmax + std::fabs(m[1]) * ymax + std::fabs(m[2]),
                                std::fabs(m[3]) * xmax + std::fabs(m[4]) * ymax + std::fabs(m[5]));
  if (!(reach <= kMaxSourceReach)) {
    throw std::invalid_argument(
        prefix(who) + "this warp maps output pixels up to " + std::to_string(std::lround(reach)) +
        " source pixels away; at most " + std::to_string(static_cast<long>(kMaxSourceReach)) +
        " fit the fixed-point arithmetic (an extreme aspect ratio or scale?)");
  }
}

void validate_normalize(const Normalize& norm, const char* who) {
  // The same rule as lesson 03's bgr8_to_rgb_planar. A std below 1e-6 is a unit mistake or a
  // typo, and 1 / (255 * 1e-45) is inf.
  static const char* const names[3] = {"R", "G", "B"};
  for (int c = 0; c < 3; ++c) {
    if (!(std::isfinite(norm.mean[c]) && std::isfinite(norm.std[c]) &&
          norm.std[c] >= kMinNormStd)) {
      std::ostringstream msg;
      msg << prefix(who) << "std must be finite and >= " << kMinNormStd
          << " and mean finite, got mean " << norm.mean[c] << ", std " << norm.std[c]
          << " for channel " << names[c];
      throw std::invalid_argument(msg.str());
    }
  }
}

ChannelTransform channel_transform(const Normalize& norm) {
  ChannelTransform t;
  for (int c = 0; c < 3; ++c) {
    t.scale[c] = static_cast<float>(1.0 / (255.0 * norm.std[c]));
    t.bias[c] = static_cast<float>(-static_cast<double>(norm.mean[c]) / norm.std[c]);
  }
  return t;
}

// ------------------------------------------------------------------------ DeviceImage

DeviceImage::DeviceImage(int width, int height) : width_(width), height_(height) {
  check_size(width, height, "image", "DeviceImage");
  // cudaMallocPitch pads each row so that it starts at an address the memory system likes
  // (Programming Guide, "Device Memory"): row y is at data + y * pitch, pitch >= 3 * width.
  CUDA_CHECK(cudaMallocPitch(reinterpret_cast<void**>(&data_), &pitch_,
                             3 * static_cast<std::size_t>(width),
                             static_cast<std::size_t>(height)));
}

DeviceImage::~DeviceImage() {
  reset();
}

DeviceImage::DeviceImage(DeviceImage&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      pitch_(std::exchange(other.pitch_, 0)),
      width_(std::exchange(other.width_, 0)),
      height_(std::exchange(other.height_, 0)) {}

DeviceImage& DeviceImage::operator=(DeviceImage&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = std::exchange(other.data_, nullptr);
    pitch_ = std::exchange(other.pitch_, 0);
    width_ = std::exchange(other.width_, 0);
    height_ = std::exchange(other.height_, 0);
  }
  return *this;
}

void DeviceImage::reset() noexcept {
  if (data_ != nullptr) cudaFree(data_);  // error ignored: destructors must not throw
  data_ = nullptr;
  pitch_ = 0;
  width_ = height_ = 0;
}

void DeviceImage::upload(const ImageView& host, cudaStream_t stream) {
  validate_source(host, "DeviceImage::upload");
  if (host.width != width_ || host.height != height_) {
    throw std::invalid_argument("DeviceImage::upload: expected a " + std::to_string(width_) + "x" +
                                std::to_string(height_) + " image, got " +
                                std::to_string(host.width) + "x" + std::to_string(host.height));
  }
  CUDA_CHECK(cudaMemcpy2DAsync(data_, pitch_, host.data, host.pitch,
                               3 * static_cast<std::size_t>(width_), height_,
                               cudaMemcpyHostToDevice, stream));
}

// ======================================================================== kernels

namespace {

// 32 x 8 threads: a warp covers 32 neighbouring pixels of one row, so its stores to each output
// row (and plane) are contiguous: coalesced (Programming Guide, "Device Memory Accesses").
constexpr int kBlockX = 32;
constexpr int kBlockY = 8;

dim3 grid_for(int dst_w, int dst_h, int pixels_per_thread, int frames = 1) {
  const int columns = (dst_w + pixels_per_thread - 1) / pixels_per_thread;
  return dim3((columns + kBlockX - 1) / kBlockX, (dst_h + kBlockY - 1) / kBlockY, frames);
}

// ---- v1: one thread per output pixel, HWC uint8 BGR out: cv::warpAffine on the GPU.
// The matrix travels by value as a kernel parameter: parameters live in constant memory, and
// every thread of a warp reading the same word is a broadcast (Programming Guide, "Function
// Parameters" and "Constant Memory").
__global__ void warp_affine_v1_kernel(ImageView src, Affine2x3 inv, std::uint8_t* __restrict__ dst,
                                      int dst_w, int dst_h, std::uint8_t border) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= dst_w || y >= dst_h) return;
  std::uint8_t bgr[3];
  warp_pixel_bgr(src, inv, x, y, border, bgr);
  std::uint8_t* out = dst + (static_cast<std::size_t>(y) * dst_w + x) * 3;
  out[0] = bgr[0];
  out[1] = bgr[1];
  out[2] = bgr[2];
}

// ---- The unfused second pass: read the uint8 letterbox back, write planar float RGB.
// What a port of the OpenCV pipeline (cvtColor, convertTo, split) to the GPU looks like: the
// intermediate image is written by one kernel and read back by the next.
__global__ void hwc_u8_to_chw_f32_kernel(const std::uint8_t* __restrict__ src, int w, int h,
                                         float* __restrict__ dst, ChannelTransform t) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= w || y >= h) return;
  const std::size_t plane = static_cast<std::size_t>(w) * h;
  const std::size_t i = static_cast<std::size_t>(y) * w + x;
  store_rgb_planar(dst, plane, i, src + 3 * i, t);
}

// ---- v2: fused. The same sample as v1, but the thread swaps BGR -> RGB, normalises and writes
// straight into the three planes: one pass, no intermediate image, one launch.
__global__ void letterbox_v2_fused_kernel(ImageView src, Affine2x3 inv, float* __restrict__ dst,
                                          int dst_w, int dst_h, ChannelTransform t) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= dst_w || y >= dst_h) return;
  std::uint8_t bgr[3];
  warp_pixel_bgr(src, inv, x, y, kPadValue, bgr);
  const std::size_t plane = static_cast<std::size_t>(dst_w) * dst_h;
  store_rgb_planar(dst, plane, static_cast<std::size_t>(y) * dst_w + x, bgr, t);
}

// ---- v3: four neighbouring pixels per thread. The row terms of the source position are the
// same for all four (the compiler computes them once), and each plane gets one 16-byte float4
// store: a warp writes 512 contiguous bytes per plane with 32 instructions instead of 128.
constexpr int kPixelsPerThread = 4;

__device__ inline bool aligned16(const void* p) {
  return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0;
}

__device__ inline void letterbox_quad(const ImageView& src, const Affine2x3& inv, int x0, int y,
                                      float* __restrict__ dst, int dst_w, int dst_h,
                                      const ChannelTransform& t) {
  float r[kPixelsPerThread], g[kPixelsPerThread], b[kPixelsPerThread];
#pragma unroll
  for (int k = 0; k < kPixelsPerThread; ++k) {
    // Past the right edge, recompute the last pixel rather than branch: its values are dropped.
    const int x = min(x0 + k, dst_w - 1);
    std::uint8_t bgr[3];
    warp_pixel_bgr(src, inv, x, y, kPadValue, bgr);
    r[k] = normalize_value(bgr[2], t, 0);
    g[k] = normalize_value(bgr[1], t, 1);
    b[k] = normalize_value(bgr[0], t, 2);
  }
  const std::size_t plane = static_cast<std::size_t>(dst_w) * dst_h;
  float* pr = dst + static_cast<std::size_t>(y) * dst_w + x0;
  float* pg = pr + plane;
  float* pb = pg + plane;
  // A float4 store needs 16-byte alignment: true when dst_w is a multiple of 4 (and the tensor
  // starts aligned, as cudaMalloc's do). Other widths take the scalar path.
  if (x0 + kPixelsPerThread <= dst_w && aligned16(pr) && aligned16(pg) && aligned16(pb)) {
    *reinterpret_cast<float4*>(pr) = make_float4(r[0], r[1], r[2], r[3]);
    *reinterpret_cast<float4*>(pg) = make_float4(g[0], g[1], g[2], g[3]);
    *reinterpret_cast<float4*>(pb) = make_float4(b[0], b[1], b[2], b[3]);
  } else {
    for (int k = 0; k < kPixelsPerThread && x0 + k < dst_w; ++k) {
      pr[k] = r[k];
      pg[k] = g[k];
      pb[k] = b[k];
    }
  }
}

__global__ void letterbox_v3_vec4_kernel(ImageView src, Affine2x3 inv, float* __restrict__ dst,
                                         int dst_w, int dst_h, ChannelTransform t) {
  const int x0 = (blockIdx.x * blockDim.x + threadIdx.x) * kPixelsPerThread;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x0 >= dst_w || y >= dst_h) return;
  letterbox_quad(src, inv, x0, y, dst, dst_w, dst_h, t);
}

// ---- v4: a batch in one launch. blockIdx.z picks the frame; each frame's pointer, size, pitch
// and inverse matrix travel in the kernel parameters (72 bytes a frame, 2.3 KB for 32: under
// the 4 KB every CUDA 12 toolkit accepts). All threads of a block read the same descriptor: a
// constant-bank broadcast, no global-memory table and no host-to-device copy before the launch.
struct FrameParams {
  const std::uint8_t* data;
  int width, height;
  std::size_t pitch;
  Affine2x3 inv;
};
struct BatchParams {
  FrameParams frame[kMaxFramesPerLaunch];
};

__global__ void letterbox_v4_batched_kernel(BatchParams batch, float* __restrict__ dst, int dst_w,
                                            int dst_h, ChannelTransform t) {
  const int x0 = (blockIdx.x * blockDim.x + threadIdx.x) * kPixelsPerThread;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x0 >= dst_w || y >= dst_h) return;
  const FrameParams& f = batch.frame[blockIdx.z];
  const ImageView src{f.data, f.width, f.height, 3, f.pitch};
  float* frame_dst = dst + static_cast<std::size_t>(blockIdx.z) * 3 * dst_w * dst_h;
  letterbox_quad(src, f.inv, x0, y, frame_dst, dst_w, dst_h, t);
}

// The geometry of one frame: the letterbox and the inverse matrix the kernels use.
struct Prepared {
  Letterbox lb;
  Affine2x3 inv;
};
Prepared prepare(const ImageView& src, int dst_w, int dst_h, const char* who) {
  const Letterbox lb = make_letterbox(src.width, src.height, dst_w, dst_h);
  const Affine2x3 inv = invert_affine(letterbox_matrix(lb));
  validate_warp_range(inv, dst_w, dst_h, who);
  return {lb, inv};
}

// Every check of a letterbox launcher, all before any work.
template <class T>
Prepared validate_and_prepare(const ImageView& src, const T* dst, int dst_w, int dst_h,
                              const Normalize& norm, const char* who) {
  validate_source(src, who);
  validate_target(dst_w, dst_h, who);
  check_destination(dst, who);
  validate_normalize(norm, who);
  return prepare(src, dst_w, dst_h, who);
}

}  // namespace

// ======================================================================== launchers

void warp_affine_v1(const ImageView& src, const Affine2x3& dst_to_src, std::uint8_t* dst, int dst_w,
                    int dst_h, std::uint8_t border, cudaStream_t stream) {
  validate_source(src, "warp_affine_v1");
  validate_target(dst_w, dst_h, "warp_affine_v1");
  check_destination(dst, "warp_affine_v1");
  validate_warp_range(dst_to_src, dst_w, dst_h, "warp_affine_v1");
  warp_affine_v1_kernel<<<grid_for(dst_w, dst_h, 1), dim3(kBlockX, kBlockY), 0, stream>>>(
      src, dst_to_src, dst, dst_w, dst_h, border);
  CUDA_CHECK_LAUNCH();
}

Letterbox letterbox_v1_u8(const ImageView& src, std::uint8_t* dst, int dst_w, int dst_h,
                          cudaStream_t stream) {
  const Prepared p = validate_and_prepare(src, dst, dst_w, dst_h, Normalize{}, "letterbox_v1_u8");
  warp_affine_v1(src, p.inv, dst, dst_w, dst_h, kPadValue, stream);
  return p.lb;
}

void hwc_u8_to_chw_f32(const std::uint8_t* src, int w, int h, float* dst, const Normalize& norm,
                       cudaStream_t stream) {
  validate_target(w, h, "hwc_u8_to_chw_f32");
  if (src == nullptr) throw std::invalid_argument("hwc_u8_to_chw_f32: source pointer is null");
  check_destination(dst, "hwc_u8_to_chw_f32");
  validate_normalize(norm, "hwc_u8_to_chw_f32");
  hwc_u8_to_chw_f32_kernel<<<grid_for(w, h, 1), dim3(kBlockX, kBlockY), 0, stream>>>(
      src, w, h, dst, channel_transform(norm));
  CUDA_CHECK_LAUNCH();
}

Letterbox letterbox_v2_fused(const ImageView& src, float* dst, int dst_w, int dst_h,
                             const Normalize& norm, cudaStream_t stream) {
  const Prepared p = validate_and_prepare(src, dst, dst_w, dst_h, norm, "letterbox_v2_fused");
  letterbox_v2_fused_kernel<<<grid_for(dst_w, dst_h, 1), dim3(kBlockX, kBlockY), 0, stream>>>(
      src, p.inv, dst, dst_w, dst_h, channel_transform(norm));
  CUDA_CHECK_LAUNCH();
  return p.lb;
}

Letterbox letterbox_v3_vec4(const ImageView& src, float* dst, int dst_w, int dst_h,
                            const Normalize& norm, cudaStream_t stream) {
  const Prepared p = validate_and_prepare(src, dst, dst_w, dst_h, norm, "letterbox_v3_vec4");
  letterbox_v3_vec4_kernel<<<grid_for(dst_w, dst_h, kPixelsPerThread), dim3(kBlockX, kBlockY), 0,
                             stream>>>(src, p.inv, dst, dst_w, dst_h, channel_transform(norm));
  CUDA_CHECK_LAUNCH();
  return p.lb;
}

std::vector<Letterbox> letterbox_v4_batched(const std::vector<ImageView>& frames, float* dst,
                                            int dst_w, int dst_h, const Normalize& norm,
                                            cudaStream_t stream) {
  const char* who = "letterbox_v4_batched";
  validate_target(dst_w, dst_h, who);
  validate_normalize(norm, who);
  std::vector<Letterbox> geometry;
  if (frames.empty()) return geometry;
  check_destination(dst, who);
  // Validate every frame before launching anything: a bad frame 40 must not leave frames 0-31
  // processed and the rest not.
  for (const ImageView& f : frames) validate_source(f, who);
  std::vector<Prepared> prepared;
  prepared.reserve(frames.size());
  for (const ImageView& f : frames) prepared.push_back(prepare(f, dst_w, dst_h, who));

  const ChannelTransform t = channel_transform(norm);
  const std::size_t frame_elems = 3 * static_cast<std::size_t>(dst_w) * dst_h;
  for (std::size_t first = 0; first < frames.size(); first += kMaxFramesPerLaunch) {
    const int count =
        static_cast<int>(std::min<std::size_t>(kMaxFramesPerLaunch, frames.size() - first));
    BatchParams batch{};
    for (int i = 0; i < count; ++i) {
      const ImageView& f = frames[first + i];
      batch.frame[i] = {f.data, f.width, f.height, f.pitch, prepared[first + i].inv};
    }
    letterbox_v4_batched_kernel<<<grid_for(dst_w, dst_h, kPixelsPerThread, count),
                                  dim3(kBlockX, kBlockY), 0, stream>>>(
        batch, dst + first * frame_elems, dst_w, dst_h, t);
    CUDA_CHECK_LAUNCH();
  }
  geometry.reserve(prepared.size());
  for (const Prepared& p : prepared) geometry.push_back(p.lb);
  return geometry;
}

// ======================================================================== CPU references

std::vector<std::uint8_t> warp_affine_reference(const ImageView& src, const Affine2x3& dst_to_src,
                                                int dst_w, int dst_h, std::uint8_t border) {
  validate_source(src, "warp_affine_reference");
  validate_target(dst_w, dst_h, "warp_affine_reference");
  validate_warp_range(dst_to_src, dst_w, dst_h, "warp_affine_reference");
  std::vector<std::uint8_t> out(3 * static_cast<std::size_t>(dst_w) * dst_h);
  for (int y = 0; y < dst_h; ++y) {
    for (int x = 0; x < dst_w; ++x) {
      warp_pixel_bgr(src, dst_to_src, x, y, border,
                     &out[3 * (static_cast<std::size_t>(y) * dst_w + x)]);
    }
  }
  return out;
}

std::vector<std::uint8_t> warp_affine_float_reference(const ImageView& src,
                                                      const Affine2x3& dst_to_src, int dst_w,
                                                      int dst_h, std::uint8_t border) {
  validate_source(src, "warp_affine_float_reference");
  validate_target(dst_w, dst_h, "warp_affine_float_reference");
  validate_warp_range(dst_to_src, dst_w, dst_h, "warp_affine_float_reference");
  const auto tap = [&](int x, int y, int c) -> double {
    const bool inside = x >= 0 && x < src.width && y >= 0 && y < src.height;
    return inside ? src.data[static_cast<std::size_t>(y) * src.pitch + 3 * x + c] : border;
  };
  std::vector<std::uint8_t> out(3 * static_cast<std::size_t>(dst_w) * dst_h);
  for (int y = 0; y < dst_h; ++y) {
    for (int x = 0; x < dst_w; ++x) {
      double sx = 0.0, sy = 0.0;
      apply_affine(dst_to_src, x, y, &sx, &sy);
      const int ix = static_cast<int>(std::floor(sx)), iy = static_cast<int>(std::floor(sy));
      const double ax = sx - ix, ay = sy - iy;
      for (int c = 0; c < 3; ++c) {
        const double v = (1 - ax) * (1 - ay) * tap(ix, iy, c) + ax * (1 - ay) * tap(ix + 1, iy, c) +
                         (1 - ax) * ay * tap(ix, iy + 1, c) + ax * ay * tap(ix + 1, iy + 1, c);
        out[3 * (static_cast<std::size_t>(y) * dst_w + x) + c] =
            static_cast<std::uint8_t>(std::lrint(v));
      }
    }
  }
  return out;
}

std::vector<float> letterbox_reference(const ImageView& src, int dst_w, int dst_h,
                                       const Normalize& norm) {
  validate_source(src, "letterbox_reference");
  validate_target(dst_w, dst_h, "letterbox_reference");
  validate_normalize(norm, "letterbox_reference");
  const Prepared p = prepare(src, dst_w, dst_h, "letterbox_reference");
  const ChannelTransform t = channel_transform(norm);
  const std::size_t plane = static_cast<std::size_t>(dst_w) * dst_h;
  std::vector<float> out(3 * plane);
  for (int y = 0; y < dst_h; ++y) {
    for (int x = 0; x < dst_w; ++x) {
      std::uint8_t bgr[3];
      warp_pixel_bgr(src, p.inv, x, y, kPadValue, bgr);
      store_rgb_planar(out.data(), plane, static_cast<std::size_t>(y) * dst_w + x, bgr, t);
    }
  }
  return out;
}

}  // namespace lesson06

// The exercise solutions (solutions.cuh): compiled here, in this translation unit, by the
// lesson build only; the exercise build takes exercise.cu instead. Try the exercises first.
#ifndef LESSON_EXERCISE_BUILD
#include "solutions.cuh"
#endif
