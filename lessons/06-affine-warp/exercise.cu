// Lesson 06 exercises. Replace each TODO body, then run `make check LESSON=06`:
// the tests tagged [ex1] ... [ex4] check your work (run one with
// `build/lessons/06-affine-warp/lesson06_exercise_tests "[ex2]"`). Do exercise 1 first: every
// launcher calls it.
//
// Each stub's comment is its contract (affine_warp.cuh declares the functions); README.md has
// folded hints. Everything declared in affine_warp.cuh is yours to use: make_letterbox,
// make_warp_table, device_table, source_position, bilinear_sample_bgr, warp_pixel_bgr,
// channel_transform, normalize_value, validate_source, validate_target, validate_warp_range,
// validate_normalize, course::CudaError via CUDA_CHECK / CUDA_CHECK_LAUNCH.
// The solutions are in solutions.cuh; try first. No test checks the text of an exception in
// these exercises, only its type.
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
// [ex1, CPU] letterbox_matrix: the forward letterbox, source pixel -> network-input pixel, as the
// 2x3 matrix cv::warpAffine takes (x' = m[0] x + m[1] y + m[2], y' = m[3] x + m[4] y + m[5]).
// In:  lb from make_letterbox (scale s, pad_x, pad_y); nothing is checked (it may run on the
//      device).
// Out: half_pixel == true: the map in pixel-index coordinates (pixel centres at integers, pixel
//      i covering [i - 1/2, i + 1/2]) under which the continuous letterbox u_dst = s * u_src + pad
//      (pixel i covering [i, i + 1]) holds, so pixel centres map to pixel centres.
//      half_pixel == false: the same scale and padding applied to pixel indices directly, the
//      classic bug that shifts the image by (1 - s) / 2 pixels.
// Tests: a 3x downscale (1920x1080 -> 640x640) and a 2x upscale against hand-computed entries,
//      the shift without the half-pixel terms, and a 3x downscale that must sample source pixel
//      centres exactly.
__host__ __device__ Affine2x3 letterbox_matrix(const Letterbox& lb, bool half_pixel) {
  (void)lb;
  (void)half_pixel;
  todo("TODO(exercise 1): letterbox_matrix is not written yet");
  return {};
}

// [ex1, CPU] invert_affine: the inverse of the 2x3 affine map `a`, exactly as
// cv::invertAffineTransform computes it: the same bits, not only the same values (the kernels
// quantise positions to 1/32 pixel, so a last-bit difference can move a sample to the next grid
// cell). A singular matrix (a e - b d == 0) gives all zeros, as in OpenCV. Host and device.
// Tests: 100 random matrices against OpenCV bit for bit, inv(fwd(p)) == p, a singular matrix.
__host__ __device__ Affine2x3 invert_affine(const Affine2x3& a) {
  (void)a;
  todo("TODO(exercise 1): invert_affine is not written yet");
  return {};
}

// ---------------------------------------------------------------------------- exercise 2
// [ex2, CPU] bilinear_sample_bgr (affine_warp.cuh) with a replicated border
// (cv::BORDER_REPLICATE): the same position grid, the same integer weights and the same
// rounding, but a tap outside the image reads the nearest edge pixel (its column clamped to
// [0, width - 1], its row to [0, height - 1]) instead of a border value.
// In:  src, a non-empty BGR image (not checked); p, a position on the 1/32-pixel grid.
// Out: out[0..2] = B, G, R.
// Tests: against cv::warpAffine(..., BORDER_REPLICATE) within 1 grey level (5x3 upscaled to
//      64x64, 641x479, 1x1, 40x30 -> 100x10); bit for bit equal to bilinear_sample_bgr where all
//      four taps are inside; far outside the image, the nearest corner pixel.
__host__ __device__ void bilinear_sample_bgr_replicate(const ImageView& src, SubpixelPos p,
                                                       std::uint8_t out[3]) {
  (void)src;
  (void)p;
  (void)out;
  todo("TODO(exercise 2): bilinear_sample_bgr_replicate is not written yet");
}

// ---------------------------------------------------------------------------- exercise 3
// [ex3, CPU] A detection box from network-input coordinates back to the source image: the
// inverse of u' = s u + pad for x1, x2 (pad_x) and y1, y2 (pad_y), in continuous coordinates (no
// "+1", no half-pixel terms), then clamped to [0, src_w] x [0, src_h] (a box may reach into the
// padding). A NaN coordinate stays NaN. In: b, lb from make_letterbox (not checked).
// Tests: known values (1920x1080 -> 640x640), a box reaching into the padding and past the
// edge, and a round trip through letterbox_box with fractional padding (479x641).
__host__ __device__ Box unletterbox_box(const Box& b, const Letterbox& lb) {
  (void)lb;
  todo("TODO(exercise 3): unletterbox_box is not written yet");
  return b;
}

// ---------------------------------------------------------------------------- exercise 4
// [ex4, GPU] The fused letterbox writing FP16: letterbox_v2_fused's output (3 x dst_h x dst_w
// planar RGB, normalised with `norm`), each value rounded to the nearest __half, for an engine
// with an FP16 input binding.
// In:  src, a BGR image in device memory; dst, device, 3 * dst_w * dst_h __half; norm.
// Out: dst as above, enqueued on `stream` (asynchronous); returns
//      make_letterbox(src.width, src.height, dst_w, dst_h).
// Errors: before any CUDA call, std::invalid_argument for what letterbox_v2_fused rejects: a
//      source validate_source rejects, a null dst, a target size validate_target rejects, a
//      normalisation validate_normalize rejects, a geometry validate_warp_range rejects;
//      CudaError if a CUDA call fails.
// Tests: within half precision of the OpenCV pipeline, and bit for bit v2's floats rounded to
//      nearest even (a truncating conversion passes the first check, not this one).
Letterbox letterbox_fp16(const ImageView& src, __half* dst, int dst_w, int dst_h,
                         const Normalize& norm, cudaStream_t stream) {
  (void)src;
  (void)dst;
  (void)dst_w;
  (void)dst_h;
  (void)norm;
  (void)stream;
  todo("TODO(exercise 4): letterbox_fp16 is not written yet");
  return {};
}

}  // namespace lesson06
