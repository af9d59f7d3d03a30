// The OpenCV side of lesson 06: the oracle (cv::warpAffine) and the CPU pipeline that the fused
// kernel replaces. Host code only, compiled by the C++ compiler.
#pragma once

#include <opencv2/core.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "affine_warp.cuh"

namespace lesson06 {

// A view of a cv::Mat, or of a region of one (its step becomes the pitch). Throws
// std::invalid_argument unless the Mat is non-empty, 2-D, 8-bit unsigned (CV_8U) and 3-channel.
ImageView view_of(const cv::Mat& bgr);

// A CV_8UC3 cv::Mat header over a host ImageView (no copy: it must outlive the Mat). Throws
// std::invalid_argument if validate_source rejects the view.
cv::Mat mat_of(const ImageView& host);

// The oracle: cv::warpAffine(bgr, letterbox_matrix(lb), {dst_w, dst_h}, INTER_LINEAR,
// BORDER_CONSTANT, Scalar::all(114)) -> dst_h x dst_w CV_8UC3 BGR. OpenCV inverts the forward
// matrix itself (no WARP_INVERSE_MAP), with the formula invert_affine uses. Throws
// std::invalid_argument if view_of rejects bgr or the target size is outside [1, kMaxDimension].
cv::Mat letterbox_opencv(const cv::Mat& bgr, int dst_w, int dst_h);

// The CPU pipeline a user writes with OpenCV, for comparison and as the float oracle:
// warpAffine (as above), cvtColor(BGR2RGB), convertTo(CV_32F, 1/255), mean/std, split into
// the three planes of dst (3 x dst_h x dst_w float, host memory). It keeps its intermediate
// images between calls, as a real preprocessing loop would. run() returns the geometry; dst must
// hold 3 * dst_w * dst_h floats. Throws std::invalid_argument if view_of rejects bgr, the target
// size is outside [1, kMaxDimension], validate_normalize rejects norm, or dst is null.
class OpenCvPreprocessor {
 public:
  Letterbox run(const cv::Mat& bgr, int dst_w, int dst_h, const Normalize& norm, float* dst);

 private:
  cv::Mat boxed_, rgb_, f32_;
};

// ---------------------------------------------------------------------------- NV12 (host)

// An NV12 frame in host memory that owns its two planes (layout: Nv12View). Pitches may exceed
// the rows (pass larger ones to test pitched planes); new bytes are zero.
struct HostNv12 {
  int width = 0, height = 0;
  std::size_t y_pitch = 0, uv_pitch = 0;
  std::vector<std::uint8_t> y, uv;  // height x y_pitch, ceil(height / 2) x uv_pitch bytes
  HostNv12() = default;
  // Throws std::invalid_argument for a size < 1 or a pitch below the row (width, 2 ceil(w/2)).
  HostNv12(int width, int height, std::size_t y_pitch = 0, std::size_t uv_pitch = 0);
  Nv12View view() const { return {y.data(), uv.data(), width, height, y_pitch, uv_pitch}; }
};

// A BGR image as NV12, BT.601 limited range: cv::cvtColor(COLOR_BGR2YUV_I420), U and V then
// interleaved. Even width and height only (OpenCV's requirement; std::invalid_argument).
HostNv12 nv12_from_bgr(const cv::Mat& bgr);

// The oracle's colour conversion: cv::cvtColor(COLOR_YUV2BGR_NV12) of a host frame (BT.601
// limited range, chroma of each 2x2 block not interpolated) -> height x width CV_8UC3. OpenCV
// wants even sizes and one (3/2 height) x width buffer: the planes are copied into one, and an
// odd frame is padded to even by repeating its last row / column and the result cropped (each
// output pixel depends only on its own Y and its block's U, V, so the crop is the conversion of
// the odd frame). Throws std::invalid_argument if validate_nv12 rejects the frame.
cv::Mat nv12_to_bgr_opencv(const Nv12View& host);

}  // namespace lesson06
