// Lesson 06: the affine warp behind every detector's preprocessing (the "letterbox").
//
// A camera frame (H x W x 3 uint8 BGR, any size, rows possibly padded) becomes the network input
// (3 x 640 x 640 float RGB, planar, normalised) with its aspect ratio kept and the rest padded
// with grey 114. The kernels, in the order the lesson teaches them (affine_warp.cu):
//
//   v1 warp_affine_v1           one thread per output pixel, any 2x3 matrix, writes HWC uint8 BGR:
//                               what cv::warpAffine produces, checked against it
//   -- hwc_u8_to_chw_f32        the second half of the unfused GPU path: BGR->RGB, /255,
//                               mean/std, HWC->CHW, as a separate pass over an intermediate image
//   v2 letterbox_v2_fused       warp + BGR->RGB + normalise + planar CHW float in one pass:
//                               the intermediate image never exists
//   v3 letterbox_v3_vec4        v2 with 4 neighbouring pixels per thread: one 16-byte store per
//                               plane instead of four 4-byte stores, row terms computed once
//   v4 letterbox_v4_batched     v3 for a batch of frames of different sizes into one NCHW
//                               tensor, one launch per 32 frames (descriptors as kernel parameters)
//   v5 letterbox_nv12_v5        v3 straight from an NV12 decoder frame (BT.601 / BT.709 limited
//                               range): colour conversion at the taps, float or FP16 out
//   v6 letterbox_v6_batched,    v4 with FP16 output (BGR) and for NV12 frames: the formats an
//      letterbox_nv12_v6_batched  FP16 engine fed by a video decoder takes, one launch a batch
//
// Semantics (the letterbox geometry is common/letterbox.cuh's, see its header comment):
// s = min(dst_w/src_w, dst_h/src_h); the image is centred; padding 114; destination pixel
// centres map to source pixel centres (the half-pixel terms); bilinear with a constant border.
// The sampling reproduces OpenCV's fixed-point cv::warpAffine (INTER_LINEAR, BORDER_CONSTANT)
// exactly: source positions on a 1/32-pixel grid, integer weights. The oracle is cv::warpAffine
// with the matrix letterbox_matrix() returns; the tolerance is 1 grey level on uint8 output.
// Like OpenCV, every version takes the positions from per-column and per-row fixed-point tables
// that the host builds once per geometry, in double (make_warp_table): the kernels do integer
// arithmetic only, no FP64 per pixel.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/letterbox.cuh"
#include "common/memory.hpp"

namespace lesson06 {

// ------------------------------------------------------------------------------------ types

// An interleaved 8-bit image in host or device memory: row y starts at data + y * pitch bytes,
// pixel x of that row at + 3 * x, channels in B, G, R order. pitch >= 3 * width (a region of a
// larger image, or rows padded by cudaMallocPitch, has pitch > 3 * width).
struct ImageView {
  const std::uint8_t* data = nullptr;
  int width = 0;
  int height = 0;
  int channels = 3;       // must be 3; kept so that a 1- or 4-channel image is rejected clearly
  std::size_t pitch = 0;  // bytes from one row to the next
};

// A 2x3 affine matrix, row-major: x' = m[0] x + m[1] y + m[2], y' = m[3] x + m[4] y + m[5].
// The same layout as a 2x3 CV_64F cv::Mat, so cv::Mat(2, 3, CV_64F, a.m) wraps it.
struct Affine2x3 {
  double m[6];
};

// The letterbox geometry (Letterbox, Box, make_letterbox, letterbox_box) is shared with
// lesson 08: common/letterbox.cuh.
using course::Box;
using course::Letterbox;
using course::letterbox_box;
using course::make_letterbox;

// Network-input normalisation, per channel in RGB order: out = (v / 255 - mean) / std.
// The default is plain 1/255 scaling.
struct Normalize {
  float mean[3] = {0.0f, 0.0f, 0.0f};
  float std[3] = {1.0f, 1.0f, 1.0f};
};
// The smallest std accepted: real statistics are ~0.2, and 1 / (255 std) must stay far from inf.
constexpr float kMinNormStd = 1e-6f;
inline Normalize imagenet_normalize() {
  return {{0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f}};
}

// The per-channel transform the kernels apply, precomputed on the host from Normalize:
// out[c] = v * scale[c] + bias[c] with scale = 1 / (255 std), bias = -mean / std (RGB order).
// channel_transform does not check `norm`: call validate_normalize first (the launchers do), or a
// zero std gives inf/NaN terms.
struct ChannelTransform {
  float scale[3];
  float bias[3];
};
ChannelTransform channel_transform(const Normalize& norm);

// One network-input value from an 8-bit channel value; c indexes R, G, B. One rounding (an FMA)
// on the host and the device alike, so the CPU reference and the kernels agree bit for bit.
__host__ __device__ inline float normalize_value(std::uint8_t v, const ChannelTransform& t, int c) {
#ifdef __CUDA_ARCH__
  return __fmaf_rn(static_cast<float>(v), t.scale[c], t.bias[c]);
#else
  return std::fma(static_cast<float>(v), t.scale[c], t.bias[c]);
#endif
}

// The planar write of one pixel: BGR -> RGB, normalised, value c at dst[c * plane + i] (CHW,
// plane = H * W, i = y * W + x).
__host__ __device__ inline void store_rgb_planar(float* dst, std::size_t plane, std::size_t i,
                                                 const std::uint8_t bgr[3],
                                                 const ChannelTransform& t) {
  for (int c = 0; c < 3; ++c) dst[c * plane + i] = normalize_value(bgr[2 - c], t, c);
}

// The padding grey of YOLO-style letterboxing.
constexpr std::uint8_t kPadValue = 114;
// OpenCV's coordinate limit: remap() stores source positions as 16-bit integers.
constexpr int kMaxDimension = course::kMaxImageDimension;

// ----------------------------------------------------------------- geometry (host, validated)

// ---------------------------------------------- per-pixel math (__host__ __device__, CPU-tested)

// EXERCISE 1. The forward letterbox matrix, source pixel -> network-input pixel, in pixel-index
// coordinates (pixel centres at integers), which is what cv::warpAffine expects:
//   [ s  0  pad_x + s/2 - 1/2 ]
//   [ 0  s  pad_y + s/2 - 1/2 ]
// The "+ s/2 - 1/2" terms map pixel centres to pixel centres (continuous u = x + 1/2 on both
// sides of u_dst = s * u_src + pad). half_pixel = false leaves them out: the classic bug that
// shifts the image by (1 - s)/2 pixels; the lesson binary shows it. `lb` must come from
// make_letterbox; nothing is checked here (it runs on the device too).
__host__ __device__ Affine2x3 letterbox_matrix(const Letterbox& lb, bool half_pixel = true);

// EXERCISE 1. The inverse of a 2x3 affine map (OpenCV's formula, cv::invertAffineTransform):
// D = 1 / (a e - b d), then the 2x2 inverse and -inverse * translation. A singular matrix gives
// all zeros, as in OpenCV. The kernels need the inverse: each thread starts from its destination
// pixel and asks where in the source it comes from ("inverse mapping").
__host__ __device__ Affine2x3 invert_affine(const Affine2x3& a);

// A point through an affine map, in double precision.
__host__ __device__ inline void apply_affine(const Affine2x3& a, double x, double y, double* out_x,
                                             double* out_y) {
  *out_x = a.m[0] * x + a.m[1] * y + a.m[2];
  *out_y = a.m[3] * x + a.m[4] * y + a.m[5];
}

// OpenCV's sub-pixel grid (imgproc: INTER_BITS = 5, AB_BITS = 10, INTER_REMAP_COEF_BITS = 15).
constexpr int kSubpixelBits = 5;                    // positions in 1/32 pixel
constexpr int kSubpixelSteps = 1 << kSubpixelBits;  // 32
constexpr int kCoordBits = 10;                      // the matrix terms, in 1/1024 pixel
constexpr int kWeightBits = 2 * kSubpixelBits;      // bilinear weights sum to 1 << 10

// A source position in 1/32 pixel: pixel x >> 5, fraction (x & 31) / 32 (floor for negatives).
struct SubpixelPos {
  int x, y;
};

// ------------------------------------------- OpenCV's fixed-point tables (host, once per geometry)
//
// cv::warpAffine never evaluates the matrix per pixel. Before it touches a pixel it tabulates,
// in double, one pair of terms per output column and one per output row (OpenCV 4.x,
// modules/imgproc/src/imgwarp.cpp: warpAffine's `adelta`/`bdelta`, WarpAffineInvoker's
// `X0`/`Y0`), and every pixel is then two integer additions and two shifts. We do the same: the
// host builds the tables once per geometry, the kernels and the CPU reference only add and shift.
// For the inverse (destination -> source) matrix m and a dst_w x dst_h output, in 1/1024 pixel:
//   column[x] = ( round(m0 * x * 1024),  round(m3 * x * 1024) )                  0 <= x < dst_w
//   row[y]    = ( round((m1 * y + m2) * 1024) + 16,  round((m4 * y + m5) * 1024) + 16 )
//                                                                                 0 <= y < dst_h
// round is round-half-to-even (OpenCV's cvRound; std::lrint); every * and + is its own double
// rounding, in exactly this order, as OpenCV computes them, so the ints are OpenCV's own. (A
// compiler that fused m1 * y + m2 into one FMA would change a last bit and, through the 1/32 grid
// below, a sample: the build passes -ffp-contract=off to the host compiler.) The +16 (half of
// 1/32 in 1/1024) makes the >> 5 of source_position round to nearest.

// The two tables of one geometry, in host memory. Filled by make_warp_table.
struct WarpTable {
  int dst_w = 0, dst_h = 0;
  // dst_w column pairs, then dst_h row pairs; .x for the source x, .y for the source y.
  std::vector<int2> terms;
  const int2* column() const { return terms.data(); }
  const int2* row() const { return terms.data() + dst_w; }
};

// The tables of `dst_to_src` (the INVERSE matrix) for a dst_w x dst_h output: 2 * (dst_w + dst_h)
// ints (10 KiB for 640x640). Throws std::invalid_argument (naming `who`) if the target size is
// outside [1, kMaxDimension] or validate_warp_range rejects the matrix (a NaN/inf entry, or a
// reach beyond kMaxSourceReach, where the int terms would overflow).
WarpTable make_warp_table(const Affine2x3& dst_to_src, int dst_w, int dst_h,
                          const char* who = "make_warp_table");

// The tables as the per-pixel functions read them: two pointers into host or device memory
// (column: dst_w pairs, row: dst_h pairs). Passed to kernels by value (16 bytes).
struct WarpTableView {
  const int2* column = nullptr;
  const int2* row = nullptr;
};
inline WarpTableView view_of(const WarpTable& t) {
  return {t.column(), t.row()};
}

namespace detail {
__host__ __device__ inline std::uint8_t load_u8(const std::uint8_t* p) {
#ifdef __CUDA_ARCH__
  return __ldg(p);  // the read-only data path: the four taps of neighbouring threads overlap
#else
  return *p;
#endif
}
__host__ __device__ inline int2 load_pair(const int2* p) {
#ifdef __CUDA_ARCH__
  return __ldg(p);  // a warp reads 32 consecutive column pairs: one 256-byte, L1-cached request
#else
  return *p;
#endif
}
}  // namespace detail

// Where a pixel samples the source, on OpenCV's 1/32 grid, from its row and column terms:
// integer only (OpenCV's warpAffineBlockline: (X0 + adelta[x]) >> (AB_BITS - INTER_BITS)).
// Arithmetic shifts: floor division, also for positions left of / above the image. The sum
// cannot overflow: validate_warp_range keeps it within 2^31 (see kMaxSourceReach).
__host__ __device__ inline SubpixelPos subpixel_position(int2 row, int2 column) {
  return {(row.x + column.x) >> (kCoordBits - kSubpixelBits),
          (row.y + column.y) >> (kCoordBits - kSubpixelBits)};
}

// Where destination pixel (x, y) samples the source: bit for bit cv::warpAffine's position.
// `t` must hold the tables of a dst_w x dst_h geometry with x < dst_w, y < dst_h (not checked).
__host__ __device__ inline SubpixelPos source_position(const WarpTableView& t, int x, int y) {
  return subpixel_position(detail::load_pair(t.row + y), detail::load_pair(t.column + x));
}

// The bilinear blend of OpenCV's INTER_LINEAR on 8-bit images, for any source: the four taps
// around a 1/32-grid position, (sx, sy), (sx+1, sy), (sx, sy+1), (sx+1, sy+1), weighted by the
// integer weights (32 - fx)(32 - fy), fx (32 - fy), (32 - fx) fy, fx fy, which sum to 1024, and
// rounded as (sum + 512) >> 10 (OpenCV's 15-bit weights are these times 32). inside(tx, ty) says
// whether a tap is in the image; tap(tx, ty, bgr) reads one that is; the others read `border`.
template <class Inside, class Tap>
__host__ __device__ inline void bilinear_blend(SubpixelPos p, std::uint8_t border,
                                               const Inside& inside, const Tap& tap,
                                               std::uint8_t out[3]) {
  const int sx = p.x >> kSubpixelBits, sy = p.y >> kSubpixelBits;
  const int fx = p.x & (kSubpixelSteps - 1), fy = p.y & (kSubpixelSteps - 1);
  const int w[4] = {(kSubpixelSteps - fx) * (kSubpixelSteps - fy), fx * (kSubpixelSteps - fy),
                    (kSubpixelSteps - fx) * fy, fx * fy};
  int acc[3] = {0, 0, 0};
  for (int t = 0; t < 4; ++t) {
    const int tx = sx + (t & 1), ty = sy + (t >> 1);
    std::uint8_t bgr[3] = {border, border, border};
    if (inside(tx, ty)) tap(tx, ty, bgr);
    for (int c = 0; c < 3; ++c) acc[c] += w[t] * bgr[c];
  }
  for (int c = 0; c < 3; ++c) {
    out[c] = static_cast<std::uint8_t>((acc[c] + (1 << (kWeightBits - 1))) >> kWeightBits);
  }
}

// Bilinear sample of a BGR image at a 1/32-grid position, with a constant border: taps outside
// the image read `border`; bilinear_blend's weights and rounding, so exactly OpenCV's
// INTER_LINEAR on 8-bit images. out: B, G, R. src must be a valid non-empty HOST or DEVICE image
// (whichever side runs this; validate_source): nothing is checked here.
__host__ __device__ inline void bilinear_sample_bgr(const ImageView& src, SubpixelPos p,
                                                    std::uint8_t border, std::uint8_t out[3]) {
  bilinear_blend(
      p, border,
      [&](int tx, int ty) { return tx >= 0 && tx < src.width && ty >= 0 && ty < src.height; },
      [&](int tx, int ty, std::uint8_t bgr[3]) {
        const std::uint8_t* px = src.data + static_cast<std::size_t>(ty) * src.pitch + 3 * tx;
        for (int c = 0; c < 3; ++c) bgr[c] = detail::load_u8(px + c);
      },
      out);
}

// One destination pixel of a warp: where it samples, then the sample. The kernels are loops
// around this; the CPU reference is the same loop on the host.
__host__ __device__ inline void warp_pixel_bgr(const ImageView& src, const WarpTableView& t, int x,
                                               int y, std::uint8_t border, std::uint8_t out[3]) {
  bilinear_sample_bgr(src, source_position(t, x, y), border, out);
}

// EXERCISE 2. bilinear_sample_bgr with a replicated border (cv::BORDER_REPLICATE): a tap
// outside the image reads the nearest edge pixel (coordinates clamped to [0, w-1] x [0, h-1]).
// This is what cv::resize does at the edges, so upscaling does not bleed grey into the image.
// src must be non-empty (the clamp to [0, w-1] needs a pixel to land on); not checked.
__host__ __device__ void bilinear_sample_bgr_replicate(const ImageView& src, SubpixelPos p,
                                                       std::uint8_t out[3]);

// EXERCISE 3. A detection from network-input coordinates back to the source image:
// u = (u' - pad) / s, clamped to [0, src_w] x [0, src_h] (a box can reach into the padding).
// A NaN coordinate stays NaN (no clamp can place it): reject non-finite boxes before, as
// lesson 08's decode_candidate does.
__host__ __device__ Box unletterbox_box(const Box& b, const Letterbox& lb);

// ----------------------------------------------------------------- device images (host side)

// A BGR image in device memory with rows padded by cudaMallocPitch, so that every row starts
// at an aligned address. Move-only; frees in the destructor.
class DeviceImage {
 public:
  DeviceImage() = default;
  DeviceImage(int width, int height);  // throws std::invalid_argument for a size < 1
  ~DeviceImage();
  DeviceImage(const DeviceImage&) = delete;
  DeviceImage& operator=(const DeviceImage&) = delete;
  DeviceImage(DeviceImage&& other) noexcept;
  DeviceImage& operator=(DeviceImage&& other) noexcept;

  ImageView view() const { return {data_, width_, height_, 3, pitch_}; }
  std::uint8_t* data() noexcept { return data_; }
  std::size_t pitch() const noexcept { return pitch_; }
  int width() const noexcept { return width_; }
  int height() const noexcept { return height_; }

  // Copies a host image of the same size in (cudaMemcpy2DAsync on `stream`: any source pitch;
  // keep `host` alive until the stream has passed the copy). Throws std::invalid_argument if
  // validate_source rejects `host` or its size differs, CudaError if the copy fails.
  void upload(const ImageView& host, cudaStream_t stream = nullptr);

 private:
  void reset() noexcept;
  std::uint8_t* data_ = nullptr;
  std::size_t pitch_ = 0;
  int width_ = 0, height_ = 0;
};

// A warp table in device memory, for kernels enqueued on one stream. The launchers get theirs
// from device_table(); so can your own launcher (exercise 4).
//
// Where the table lives, and why: a warp reads 32 consecutive column pairs (256 bytes) and one
// row pair, so the tables go in global memory, read through the read-only path (__ldg), where a
// warp's column read is one coalesced request that stays in L1/L2 for the rest of the frame.
// Kernel parameters and __constant__ memory sit in the constant bank, which serves one address
// per request and serialises a warp whose threads read 32 different ones (Programming Guide,
// "Constant Memory"); a 640x640 table is also 10 KiB, over the 4 KB of parameters every CUDA 12
// toolkit accepts, and a batch needs one per frame.
//
// Lifetime: move-only. While it lives, its device memory is reserved. Destroy it after the launch
// that reads it: the destructor records an event on its stream, and the memory is reused only
// after the stream has passed that point, so kernels enqueued before never see it change.
// Destroy it on the host thread that made it (the cache is per thread).
//
// CUDA graphs: a launch captured into a graph (stream capture, any mode) is replayed long after
// its DeviceTable is gone, so an event cannot say when the table is free. device_table() on a
// capturing stream therefore ties the table to the graph being captured instead: it moves a
// reference to a CUDA user object into that graph (cudaGraphRetainUserObject; the Programming
// Guide's "CUDA User Objects" pattern for a library's pooled resources). Every executable graph
// instantiated from it, or updated from it with cudaGraphExecUpdate, holds the reference, and
// the table stays in device memory, unchanged and never evicted, until the last of them is
// destroyed (or updated from a graph without it) and its launches have finished. No event is
// ever recorded into a capturing stream (an event recorded in a capture cannot be waited on
// outside it: cudaErrorCapturedEvent). Rules for captures:
//  - A capture only finds tables; it never builds one. The geometry must already be cached for
//    that stream: run the same launch once on the stream before capturing (a miss uploads and
//    may allocate, which a capture must not record). A miss while capturing throws
//    std::logic_error, before anything is enqueued.
//  - The tables were uploaded on the capture stream by that eager launch: launch the graph on
//    that stream, or make its stream wait for it (an event recorded after the eager launch).
//  - Destroy the graphs that replay a thread's tables before the thread ends: at thread exit
//    the cache waits up to 0.5 s for their release (which CUDA runs on its own thread) and then
//    leaves the memory of any table still held allocated rather than free it under a graph.
class DeviceTable {
 public:
  DeviceTable() = default;
  ~DeviceTable();
  DeviceTable(const DeviceTable&) = delete;
  DeviceTable& operator=(const DeviceTable&) = delete;
  DeviceTable(DeviceTable&& other) noexcept;
  DeviceTable& operator=(DeviceTable&& other) noexcept;

  WarpTableView view() const noexcept { return view_; }

 private:
  friend DeviceTable device_table(const Affine2x3&, int, int, cudaStream_t);
  void release() noexcept;
  WarpTableView view_{};
  int slot_ = -1;
};

// How many tables each host thread keeps in device memory. A slot is busy while a DeviceTable
// holds it or a live CUDA graph replays it (see above): at most that many tables may be busy at
// once on one thread; a v4 launch holds up to kMaxFramesPerLaunch of them.
constexpr int kTableCacheSlots = 64;

// The device copy of the tables of (dst_to_src, dst_w, dst_h) for work enqueued on `stream`.
// Each host thread keeps the last kTableCacheSlots (stream, device, matrix, size) tables in
// device memory: the frames of one camera share one geometry, so their table is built
// (make_warp_table, on the host) and uploaded (cudaMemcpyAsync from pinned memory, on `stream`)
// once, and every later frame finds it. A new geometry never makes the host wait for kernels;
// it waits only for a previous upload of the slot it reuses, and allocates (cudaMalloc, which
// blocks) only the first time a slot needs more room. A slot that a live graph replays is never
// reused. If `stream` is capturing a graph, the table is found in the cache (never built) and
// pinned to that graph (see DeviceTable). Throws std::invalid_argument as make_warp_table does;
// std::logic_error if kTableCacheSlots tables are already busy, or if `stream` is capturing and
// the table is not cached; CudaError if an allocation, the copy, the capture query or the
// pinning fails (cudaErrorStreamCaptureImplicit: `stream` is the legacy default stream while
// another stream captures).
DeviceTable device_table(const Affine2x3& dst_to_src, int dst_w, int dst_h, cudaStream_t stream);

// How many of the calling thread's cached tables live CUDA graphs still hold (pinned: never
// evicted). A graph's references go when it and every executable graph made from it are
// destroyed and their launches have finished; CUDA drops them on its own thread, shortly after
// (asynchronously), so this count falls a moment later. For tests and diagnostics. Throws
// CudaError only when this call is the thread's first use of the cache and creating it fails.
int tables_held_by_graphs();

// ------------------------------------------------------------------------ launchers (async)
//
// All launchers validate first and throw std::invalid_argument (empty or null source, not 3
// channels, pitch < 3 * width, target size < 1 or > kMaxDimension, null destination, a std not
// finite or < kMinNormStd, a mean not finite),
// before any CUDA call; then they enqueue on `stream` and return (CUDA errors: course::CudaError).
// Sources are device images; destinations device buffers of the stated size.

// v1: a general affine warp. dst: dst_h x dst_w x 3 uint8 BGR, contiguous (pitch 3 * dst_w).
// dst_to_src is the INVERSE matrix (destination pixel -> source position).
void warp_affine_v1(const ImageView& src, const Affine2x3& dst_to_src, std::uint8_t* dst, int dst_w,
                    int dst_h, std::uint8_t border, cudaStream_t stream = nullptr);

// v1 as a letterbox: make_letterbox + invert_affine(letterbox_matrix) + warp_affine_v1 (border
// 114).
Letterbox letterbox_v1_u8(const ImageView& src, std::uint8_t* dst, int dst_w, int dst_h,
                          cudaStream_t stream = nullptr);

// The unfused second pass: src h x w x 3 uint8 BGR contiguous -> dst 3 x h x w float RGB,
// (v / 255 - mean) / std.
void hwc_u8_to_chw_f32(const std::uint8_t* src, int w, int h, float* dst, const Normalize& norm,
                       cudaStream_t stream = nullptr);

// v2, v3: the fused letterbox. dst: 3 x dst_h x dst_w float RGB planar (what a TensorRT engine
// with a 1x3xHxW input binding reads). Returns the geometry, for mapping boxes back.
Letterbox letterbox_v2_fused(const ImageView& src, float* dst, int dst_w, int dst_h,
                             const Normalize& norm = {}, cudaStream_t stream = nullptr);
Letterbox letterbox_v3_vec4(const ImageView& src, float* dst, int dst_w, int dst_h,
                            const Normalize& norm = {}, cudaStream_t stream = nullptr);

// v4: frames of any sizes -> dst: N x 3 x dst_h x dst_w float RGB (frame n at n * 3 * dst_h *
// dst_w). One launch per kMaxFramesPerLaunch frames. An empty batch enqueues nothing.
constexpr int kMaxFramesPerLaunch = 32;
std::vector<Letterbox> letterbox_v4_batched(const std::vector<ImageView>& frames, float* dst,
                                            int dst_w, int dst_h, const Normalize& norm = {},
                                            cudaStream_t stream = nullptr);

// EXERCISE 4. The fused letterbox writing FP16 (__half) planar RGB: the input of an engine
// built with an FP16 input binding. Same layout and values as v2, rounded to half.
Letterbox letterbox_fp16(const ImageView& src, __half* dst, int dst_w, int dst_h,
                         const Normalize& norm = {}, cudaStream_t stream = nullptr);

// ------------------------------------------- NV12 input, FP16 output, batches (v5, v6)
//
// What a deployment really feeds the letterbox: NV12 frames from the video decoder (NVDEC, and
// most camera pipelines), into an engine that often takes FP16, a whole batch at a time.

// An NV12 frame in host or device memory: a Y (luma) plane of width x height bytes, row r at
// y + r * y_pitch, and an interleaved chroma plane at half resolution, ceil(width / 2) x
// ceil(height / 2) (U, V) byte pairs, row j at uv + j * uv_pitch, pair i at + 2 * i (U first:
// NV21 would put V first). Each plane has its own pitch and its own pointer (a decoder surface
// pads rows and may put the chroma plane anywhere). Odd widths and heights are accepted: the
// last chroma column (row) then serves one luma column (row), the convention of FFmpeg's
// yuv420 formats (chroma size rounded up).
struct Nv12View {
  const std::uint8_t* y = nullptr;
  const std::uint8_t* uv = nullptr;
  int width = 0;
  int height = 0;
  std::size_t y_pitch = 0;   // bytes, >= width
  std::size_t uv_pitch = 0;  // bytes, >= 2 * ceil(width / 2)
};

// An NV12 frame in device memory that owns its two planes, each row padded to a multiple of 256
// bytes (so both pitches exceed the rows unless the width is a multiple of 256), as a decoder
// surface would be. Move-only (course::DeviceBuffer).
class DeviceNv12 {
 public:
  DeviceNv12() = default;
  DeviceNv12(int width, int height);  // throws std::invalid_argument for a size outside [1, 32766]
  // Copies a host frame of the same size in (two cudaMemcpy2DAsync on `stream`, any source
  // pitches; keep `host` alive until the stream has passed them). Throws std::invalid_argument
  // if validate_nv12 rejects `host` or its size differs, CudaError if a copy fails.
  void upload(const Nv12View& host, cudaStream_t stream = nullptr);
  Nv12View view() const { return {y_.data(), uv_.data(), width_, height_, y_pitch_, uv_pitch_}; }

 private:
  course::DeviceBuffer<std::uint8_t> y_, uv_;
  std::size_t y_pitch_ = 0, uv_pitch_ = 0;
  int width_ = 0, height_ = 0;
};

// Which YCbCr -> RGB matrix, both limited ("video") range: Y in [16, 235], Cb, Cr in [16, 240]
// (ITU-R BT.601 and BT.709 8-bit quantisation). SD video and JPEG-era cameras are BT.601; HD
// (H.264/HEVC at 720p and above) is usually BT.709: read the stream's colour description
// (matrix_coefficients in the VUI) rather than guess. Full-range ("JPEG") YUV is not covered.
enum class YuvMatrix { bt601, bt709 };

// The matrix in fixed point, 2^-kYuvShift units (what the kernels and the CPU reference use):
//   R = cy (Y - 16) + r_v (V - 128)
//   G = cy (Y - 16) + g_u (U - 128) + g_v (V - 128)
//   B = cy (Y - 16) + b_u (U - 128)
// From the standards' luma weights Kr, Kb (BT.601: 0.299, 0.114; BT.709: 0.2126, 0.0722) and
// the limited-range scales 255/219 (luma) and 255/224 (chroma):
//   cy = 255/219, r_v = 2 (1 - Kr) 255/224, b_u = 2 (1 - Kb) 255/224,
//   g_u = -2 Kb (1 - Kb) / Kg 255/224, g_v = -2 Kr (1 - Kr) / Kg 255/224, Kg = 1 - Kr - Kb.
// BT.709: those values (1.164384, 1.792741, -0.213249, -0.532909, 2.112402) times 2^20,
//   rounded: 1220945, 1879825, -223607, -558796, 2215014.
// BT.601: OpenCV's own constants (imgproc color_yuv: ITUR_BT_601_CY, _CVR, _CUG, _CVG, _CUB),
//   which are the textbook 3-decimal coefficients 1.164, 1.596, -0.391, -0.813, 2.018 times
//   2^20: 1220542, 1673527, -409993, -852492, 2116026. Taken as OpenCV has them so that
//   cv::cvtColor(COLOR_YUV2BGR_NV12) is reproduced bit for bit (they differ from the exact
//   BT.601 values by at most 0.0008, under 0.2 grey levels over the whole input range).
struct YuvToRgb {
  int cy, r_v, g_u, g_v, b_u;
};
constexpr int kYuvShift = 20;
__host__ __device__ constexpr YuvToRgb yuv_to_rgb(YuvMatrix m) {
  return m == YuvMatrix::bt709 ? YuvToRgb{1220945, 1879825, -223607, -558796, 2215014}
                               : YuvToRgb{1220542, 1673527, -409993, -852492, 2116026};
}

// One pixel from Y, U, V to 8-bit B, G, R, OpenCV's arithmetic (color_yuv's yRGBuvToRGB): luma
// below 16 is clipped to 16 (max(0, Y - 16)), each sum gets 2^19 and is shifted right by 20
// (round half up; an arithmetic shift for negatives), then saturated to [0, 255]. No overflow:
// the largest sum, 239 x 1220945 + 127 x 2215014, is under 2^29.
__host__ __device__ inline void yuv_pixel_to_bgr(int y, int u, int v, const YuvToRgb& k,
                                                 std::uint8_t out[3]) {
  const int yy = (y > 16 ? y - 16 : 0) * k.cy + (1 << (kYuvShift - 1));
  u -= 128;
  v -= 128;
  const int b = (yy + k.b_u * u) >> kYuvShift;
  const int g = (yy + k.g_u * u + k.g_v * v) >> kYuvShift;
  const int r = (yy + k.r_v * v) >> kYuvShift;
  const auto sat = [](int c) { return static_cast<std::uint8_t>(c < 0 ? 0 : (c > 255 ? 255 : c)); };
  out[0] = sat(b);
  out[1] = sat(g);
  out[2] = sat(r);
}

// The byte offset of pixel (x, y)'s chroma pair in the UV plane: row y / 2, pair x / 2 (each
// pair serves a 2x2 block of luma pixels; x, y >= 0). U at the offset, V one byte after.
__host__ __device__ inline std::size_t nv12_chroma_offset(int x, int y, std::size_t uv_pitch) {
  return static_cast<std::size_t>(y >> 1) * uv_pitch + 2 * static_cast<std::size_t>(x >> 1);
}

// Pixel (x, y) of an NV12 frame as 8-bit BGR: what cv::cvtColor(COLOR_YUV2BGR_NV12) writes
// there (BT.601), i.e. the chroma of its 2x2 block, not interpolated. (x, y) inside the image.
__host__ __device__ inline void nv12_pixel_bgr(const Nv12View& f, const YuvToRgb& k, int x, int y,
                                               std::uint8_t out[3]) {
  const std::uint8_t* uv = f.uv + nv12_chroma_offset(x, y, f.uv_pitch);
  yuv_pixel_to_bgr(detail::load_u8(f.y + static_cast<std::size_t>(y) * f.y_pitch + x),
                   detail::load_u8(uv), detail::load_u8(uv + 1), k, out);
}

// How the letterbox samples an NV12 frame (decided; the tests pin it): convert at the taps.
// Each of the four bilinear taps is converted to 8-bit BGR first (its own Y, its block's U and
// V: nv12_pixel_bgr), then the taps are blended with bilinear_sample_bgr's weights and rounding;
// taps outside the image read the border (114 in B, G and R). That is exactly what
// cv::cvtColor(COLOR_YUV2BGR_NV12) followed by cv::warpAffine computes, so for BT.601 the
// result equals OpenCV's bit for bit, and the images the model sees are the ones a CPU
// pipeline would have produced. The alternative, bilinear Y at the source point and bilinear
// U, V at the chroma-plane point (x/2 - 1/4, y/2 - 1/4 for MPEG-2 siting) converted once, costs
// one conversion instead of four and interpolates the chroma better, but matches no CPU
// pipeline: it differs from OpenCV's by several grey levels at colour edges. Four conversions
// are a few integer multiply-adds; the kernel stays memory-bound (see the benchmark).
__host__ __device__ inline void bilinear_sample_nv12(const Nv12View& f, const YuvToRgb& k,
                                                     SubpixelPos p, std::uint8_t border,
                                                     std::uint8_t out[3]) {
  bilinear_blend(
      p, border,
      [&](int tx, int ty) { return tx >= 0 && tx < f.width && ty >= 0 && ty < f.height; },
      [&](int tx, int ty, std::uint8_t bgr[3]) { nv12_pixel_bgr(f, k, tx, ty, bgr); }, out);
}

// The FP16 rounding rule of every FP16 output: the FP32 value the FP32 kernels write, rounded
// once to the nearest half, ties to even (__float2half_rn; IEEE 754 roundTiesToEven). Values
// beyond 65504 would become inf; normalised pixels are within +-2^9 for any std >= 1/512.

// Checks an NV12 frame: non-empty, sizes within [1, kMaxDimension], non-null planes,
// y_pitch >= width, uv_pitch >= 2 * ceil(width / 2). Throws std::invalid_argument naming `who`.
void validate_nv12(const Nv12View& f, const char* who);

// v5: the fused letterbox straight from NV12 (colour conversion, warp, RGB planar, normalise:
// one kernel, 4 pixels per thread as v3). dst: 3 x dst_h x dst_w RGB planar, float or __half
// (rounding as stated above). Throws as the other launchers do, and as validate_nv12.
Letterbox letterbox_nv12_v5(const Nv12View& src, float* dst, int dst_w, int dst_h,
                            YuvMatrix matrix = YuvMatrix::bt601, const Normalize& norm = {},
                            cudaStream_t stream = nullptr);
Letterbox letterbox_nv12_v5(const Nv12View& src, __half* dst, int dst_w, int dst_h,
                            YuvMatrix matrix = YuvMatrix::bt601, const Normalize& norm = {},
                            cudaStream_t stream = nullptr);

// v6: a batch of frames of any sizes in one launch per kMaxFramesPerLaunch frames, blockIdx.z =
// frame, one matrix (and so one warp table) per frame: dst N x 3 x dst_h x dst_w, frame n at
// n * 3 * dst_h * dst_w, float or __half. BGR frames (as v4, which is the float BGR case) or NV12
// frames (all with one YuvMatrix). Every frame is validated before anything is enqueued; an
// empty batch enqueues nothing and returns an empty vector.
std::vector<Letterbox> letterbox_v6_batched(const std::vector<ImageView>& frames, __half* dst,
                                            int dst_w, int dst_h, const Normalize& norm = {},
                                            cudaStream_t stream = nullptr);
std::vector<Letterbox> letterbox_nv12_v6_batched(const std::vector<Nv12View>& frames, float* dst,
                                                 int dst_w, int dst_h,
                                                 YuvMatrix matrix = YuvMatrix::bt601,
                                                 const Normalize& norm = {},
                                                 cudaStream_t stream = nullptr);
std::vector<Letterbox> letterbox_nv12_v6_batched(const std::vector<Nv12View>& frames, __half* dst,
                                                 int dst_w, int dst_h,
                                                 YuvMatrix matrix = YuvMatrix::bt601,
                                                 const Normalize& norm = {},
                                                 cudaStream_t stream = nullptr);

// ------------------------------------------------------------------------ CPU references

// The per-pixel function on the host, for a HOST image: dst_h x dst_w x 3 uint8 BGR, contiguous.
// These references throw std::invalid_argument as the launchers do (source, target size, and a
// non-finite matrix or an invalid Normalize where they take one).
std::vector<std::uint8_t> warp_affine_reference(const ImageView& src, const Affine2x3& dst_to_src,
                                                int dst_w, int dst_h, std::uint8_t border);

// For comparison only: the textbook bilinear warp with exact (double) source positions and
// weights, rounded to nearest at the end. Not OpenCV's result: on sharp detail it differs from
// cv::warpAffine (<= 4.10) by several grey levels; the lesson binary and a test measure it.
std::vector<std::uint8_t> warp_affine_float_reference(const ImageView& src,
                                                      const Affine2x3& dst_to_src, int dst_w,
                                                      int dst_h, std::uint8_t border);

// The fused letterbox on the host, for a HOST image: 3 x dst_h x dst_w float RGB.
std::vector<float> letterbox_reference(const ImageView& src, int dst_w, int dst_h,
                                       const Normalize& norm = {});

// NV12 on the host: the letterbox as uint8 BGR HWC (dst_h x dst_w x 3; what cv::cvtColor(NV12)
// + cv::warpAffine give, for BT.601) and as the network input (3 x dst_h x dst_w float RGB,
// normalised: what v5 writes). Same per-pixel functions as the kernels. Throw as v5 does.
std::vector<std::uint8_t> warp_nv12_reference(const Nv12View& src, int dst_w, int dst_h,
                                              YuvMatrix matrix);
std::vector<float> letterbox_nv12_reference(const Nv12View& src, int dst_w, int dst_h,
                                            YuvMatrix matrix = YuvMatrix::bt601,
                                            const Normalize& norm = {});

// ------------------------------------------------------------------------ validation

// The checks every launcher runs first (exposed for the OpenCV pipeline and the tests).
// `who` prefixes the message, e.g. "letterbox_v2_fused: expected a 3-channel BGR image, got 4".
void validate_source(const ImageView& src, const char* who);
void validate_target(int dst_w, int dst_h, const char* who);
// How far from the origin, in source pixels, source_position may place a pixel: its int sum of
// two fixed-point terms counts 1/1024 pixels, and 2^21 pixels would be 2^31 of them; 2,000,000
// leaves room for the rounding. Far beyond any frame (sides <= kMaxDimension); only absurd aspect
// ratios (a 32766x1 line into a 16x32766 input) or matrices reach it.
constexpr double kMaxSourceReach = 2.0e6;
// Throws std::invalid_argument (naming `who`) unless, for every pixel (x, y) of a dst_w x dst_h
// output, |m0| x + |m1| y + |m2| and |m3| x + |m4| y + |m5| (the largest the terms of
// source_position can add up to) stay within kMaxSourceReach; also for a NaN or inf entry.
void validate_warp_range(const Affine2x3& dst_to_src, int dst_w, int dst_h, const char* who);
void validate_normalize(const Normalize& norm, const char* who);

// ------------------------------------------------------------------------ traffic (host)

// The source bytes one frame's taps really read, for honest GB/s: the kernels read only the
// rows their 2x2 taps land on (at exactly 3x downscale two of every three, and none for the
// padding rows). rows: distinct source rows that at least one in-image tap reads; bytes: the sum
// over those rows of 3 x (last - first touched column + 1), i.e. each touched row counted from
// its first to its last touched pixel (the skipped columns in between are closer together than a
// 32-byte DRAM sector below ~10x downscale, so the memory system fetches them anyway). Taps with
// weight 0 count: bilinear_sample_bgr reads all four. Axis-aligned matrices (m1 = m3 = 0, every
// letterbox) cost O(dst_w + dst_h); others enumerate every pixel. Throws as make_warp_table does,
// and std::invalid_argument for a source size outside [1, kMaxDimension].
struct SourceFootprint {
  int rows = 0;
  std::size_t bytes = 0;
};
SourceFootprint source_footprint(int src_w, int src_h, const Affine2x3& dst_to_src, int dst_w,
                                 int dst_h);

// The same for an NV12 frame: the luma bytes (the BGR count / 3: the same rows and spans, one
// byte a pixel) plus the chroma bytes (the distinct chroma rows r / 2 of the touched rows, each
// from pair first / 2 to pair last / 2, 2 bytes a pair). rows counts luma rows.
SourceFootprint nv12_footprint(int src_w, int src_h, const Affine2x3& dst_to_src, int dst_w,
                               int dst_h);

}  // namespace lesson06
