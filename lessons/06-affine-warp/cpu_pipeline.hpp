// The OpenCV side of lesson 06: the oracle (cv::warpAffine) and the CPU pipeline that the fused
// kernel replaces. Host code only, compiled by the C++ compiler.
#pragma once

#include <opencv2/core.hpp>

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

}  // namespace lesson06
