// Lesson 06 exercises. Replace each TODO body, then run `make check LESSON=06`:
// the tests tagged [ex1] ... [ex4] check your work (run one with
// `build/lessons/06-affine-warp/lesson06_exercise_tests "[ex2]"`).
//
// Everything declared in affine_warp.cuh is yours to use: make_letterbox, make_warp_table,
// device_table, source_position, bilinear_sample_bgr, warp_pixel_bgr, channel_transform,
// normalize_value, validate_source, validate_target, validate_normalize, course::CudaError via
// CUDA_CHECK / CUDA_CHECK_LAUNCH.
// The solutions are in solutions.cuh; try first.
#include <stdexcept>

#include "affine_warp.cuh"
#include "common/cuda_check.hpp"

namespace lesson06 {

namespace {
// A stub's loud failure: an exception on the host; on the device (where there are no
// exceptions) the kernel stops with an error the next CUDA call reports. (maybe_unused: once
// every stub is replaced, nothing calls it.)
[[maybe_unused]] __host__ __device__ void todo(const char* what) {
#ifdef __CUDA_ARCH__
  (void)what;
  __trap();
#else
  throw std::logic_error(what);
#endif
}
}  // namespace

// ---------------------------------------------------------------------------- exercise 1
// The forward letterbox matrix (source pixel -> network-input pixel, pixel centres at integer
// coordinates) and the inverse of a 2x3 affine matrix.
//
// Hints:
// - Start in continuous coordinates, where pixel i covers [i, i+1]: u_dst = s * u_src + pad.
//   Pixel-index coordinates are x = u - 1/2. Substitute on both sides and solve for x_dst.
// - half_pixel == false: the matrix without the half-pixel terms (the classic bug; the lesson
//   binary measures the shift it causes).
// - The inverse: for [a b c; d e f], D = 1 / (a e - b d) (0 if a e - b d == 0), the 2x2 part is
//   D [e -b; -d a], and the translation is -(2x2 inverse) * (c, f).
// - Compute in exactly this order: D first, then each entry as (entry * D), then the
//   translation as -A11 * c - A12 * f. The kernels quantise positions to 1/32 pixel, so a
//   last-bit difference from OpenCV's arithmetic can move a sample to the next grid cell.
// - Both run on the host only here (the launchers turn the inverse into the fixed-point
//   tables of make_warp_table, on the host). In device code nvcc would contract a * e - b * d
//   into one FMA and change that last bit; __dmul_rn / __dadd_rn would be the guard there.
__host__ __device__ Affine2x3 letterbox_matrix(const Letterbox& lb, bool half_pixel) {
  (void)lb;
  (void)half_pixel;
  todo("TODO(exercise 1): letterbox_matrix: build [s 0 tx; 0 s ty] from lb");
  return {};
}

__host__ __device__ Affine2x3 invert_affine(const Affine2x3& a) {
  (void)a;
  todo("TODO(exercise 1): invert_affine: invert the 2x3 affine matrix");
  return {};
}

// ---------------------------------------------------------------------------- exercise 2
// Bilinear sample with a replicated border (cv::BORDER_REPLICATE).
//
// Hints:
// - Read bilinear_sample_bgr in affine_warp.cuh first: the integer part of a position is
//   p.x >> kSubpixelBits, the fraction p.x & (kSubpixelSteps - 1) (also right for negatives).
// - The weights are the same; only the taps differ: clamp each tap's column to [0, width - 1]
//   and its row to [0, height - 1] instead of reading a border value.
// - Round like the constant-border version: (sum + 512) >> 10.
__host__ __device__ void bilinear_sample_bgr_replicate(const ImageView& src, SubpixelPos p,
                                                       std::uint8_t out[3]) {
  (void)src;
  (void)p;
  (void)out;
  todo("TODO(exercise 2): bilinear_sample_bgr_replicate: clamp the four taps to the image");
}

// ---------------------------------------------------------------------------- exercise 3
// A detection box from network-input coordinates back to the source image.
//
// Hints:
// - Invert u' = s u + pad for each of x1, y1, x2, y2 (pad_x for x, pad_y for y).
// - Clamp x to [0, src_w] and y to [0, src_h]: a box may reach into the grey padding.
// - No "+1" and no half-pixel terms: boxes live in continuous coordinates.
__host__ __device__ Box unletterbox_box(const Box& b, const Letterbox& lb) {
  (void)lb;
  todo("TODO(exercise 3): unletterbox_box: (u - pad) / s, clamped to the source image");
  return b;
}

// ---------------------------------------------------------------------------- exercise 4
// The fused letterbox writing __half: dst is 3 x dst_h x dst_w half RGB, planar.
//
// Hints:
// - Copy the shape of letterbox_v2_fused (affine_warp.cu): validate (validate_source,
//   validate_target, a null dst, validate_normalize), make_letterbox, then the inverse matrix
//   invert_affine(letterbox_matrix(lb)) and validate_warp_range(inv, dst_w, dst_h, who) (an
//   absurd aspect ratio would overflow the kernel's int arithmetic), then the device copy of its
//   tables, `const DeviceTable table = device_table(inv, dst_w, dst_h, stream);` (keep it alive
//   until after the launch), then launch one thread per output pixel.
// - In the kernel: warp_pixel_bgr(src, table, x, y, kPadValue, bgr) with table = the
//   WarpTableView, then plane c = 0, 1, 2 takes bgr[2 - c] (BGR -> RGB),
//   normalize_value(..., t, c) in float, and __float2half_rn once. No double in the kernel.
// - Pass ImageView, WarpTableView (table.view()) and ChannelTransform to the kernel by value.
// - Check the launch with CUDA_CHECK_LAUNCH() and return the Letterbox.
Letterbox letterbox_fp16(const ImageView& src, __half* dst, int dst_w, int dst_h,
                         const Normalize& norm, cudaStream_t stream) {
  (void)src;
  (void)dst;
  (void)dst_w;
  (void)dst_h;
  (void)norm;
  (void)stream;
  todo("TODO(exercise 4): letterbox_fp16: write the kernel and launch it");
  return {};
}

}  // namespace lesson06
