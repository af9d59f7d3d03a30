#include "cpu_pipeline.hpp"

#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

namespace lesson06 {

ImageView view_of(const cv::Mat& bgr) {
  if (bgr.empty()) throw std::invalid_argument("view_of: the image is empty; expected a BGR image");
  if (bgr.dims != 2) {
    // cols and rows are -1 for a Mat of 3 or more dimensions.
    throw std::invalid_argument("view_of: expected a 2-D image, got a Mat of " +
                                std::to_string(bgr.dims) + " dimensions");
  }
  if (bgr.depth() != CV_8U) {
    throw std::invalid_argument("view_of: expected 8-bit unsigned pixels (CV_8U), got depth " +
                                std::to_string(bgr.depth()) + " (" + cv::typeToString(bgr.type()) +
                                ")");
  }
  if (bgr.channels() != 3) {
    throw std::invalid_argument("view_of: expected a 3-channel BGR image, got " +
                                std::to_string(bgr.channels()) + " channels");
  }
  return {bgr.ptr<std::uint8_t>(), bgr.cols, bgr.rows, 3, bgr.step[0]};
}

cv::Mat mat_of(const ImageView& host) {
  validate_source(host, "mat_of");
  return cv::Mat(host.height, host.width, CV_8UC3, const_cast<std::uint8_t*>(host.data),
                 host.pitch);
}

namespace {
void warp_letterbox(const cv::Mat& bgr, const Letterbox& lb, cv::Mat& out) {
  Affine2x3 forward = letterbox_matrix(lb);
  const cv::Mat m(2, 3, CV_64F, forward.m);
  cv::warpAffine(bgr, out, m, cv::Size(lb.dst_w, lb.dst_h), cv::INTER_LINEAR, cv::BORDER_CONSTANT,
                 cv::Scalar::all(kPadValue));
}
}  // namespace

cv::Mat letterbox_opencv(const cv::Mat& bgr, int dst_w, int dst_h) {
  const ImageView v = view_of(bgr);
  validate_target(dst_w, dst_h, "letterbox_opencv");
  cv::Mat out;
  warp_letterbox(bgr, make_letterbox(v.width, v.height, dst_w, dst_h), out);
  return out;
}

Letterbox OpenCvPreprocessor::run(const cv::Mat& bgr, int dst_w, int dst_h, const Normalize& norm,
                                  float* dst) {
  const ImageView v = view_of(bgr);
  validate_target(dst_w, dst_h, "OpenCvPreprocessor::run");
  validate_normalize(norm, "OpenCvPreprocessor::run");
  if (dst == nullptr) throw std::invalid_argument("OpenCvPreprocessor::run: dst is null");
  const Letterbox lb = make_letterbox(v.width, v.height, dst_w, dst_h);

  warp_letterbox(bgr, lb, boxed_);
  cv::cvtColor(boxed_, rgb_, cv::COLOR_BGR2RGB);
  rgb_.convertTo(f32_, CV_32FC3, 1.0 / 255.0);
  const bool plain = norm.mean[0] == 0.0f && norm.mean[1] == 0.0f && norm.mean[2] == 0.0f &&
                     norm.std[0] == 1.0f && norm.std[1] == 1.0f && norm.std[2] == 1.0f;
  if (!plain) {
    cv::subtract(f32_, cv::Scalar(norm.mean[0], norm.mean[1], norm.mean[2]), f32_);
    cv::divide(f32_, cv::Scalar(norm.std[0], norm.std[1], norm.std[2]), f32_);
  }
  // split() writes into Mats that already have the right size and type without reallocating:
  // here, headers over the three planes of dst.
  const std::size_t plane = static_cast<std::size_t>(dst_w) * dst_h;
  std::vector<cv::Mat> planes = {cv::Mat(dst_h, dst_w, CV_32F, dst),
                                 cv::Mat(dst_h, dst_w, CV_32F, dst + plane),
                                 cv::Mat(dst_h, dst_w, CV_32F, dst + 2 * plane)};
  cv::split(f32_, planes);
  return lb;
}

// ---------------------------------------------------------------------------- NV12 (host)

HostNv12::HostNv12(int w, int h, std::size_t yp, std::size_t uvp) : width(w), height(h) {
  const std::size_t uv_row = 2 * ((static_cast<std::size_t>(w) + 1) / 2);
  y_pitch = yp != 0 ? yp : static_cast<std::size_t>(w);
  uv_pitch = uvp != 0 ? uvp : uv_row;
  y.assign(y_pitch * static_cast<std::size_t>(std::max(h, 0)), 0);
  uv.assign(uv_pitch * ((static_cast<std::size_t>(std::max(h, 0)) + 1) / 2), 0);
  validate_nv12(view(), "HostNv12");
}

HostNv12 nv12_from_bgr(const cv::Mat& bgr) {
  const ImageView v = view_of(bgr);
  if (v.width % 2 != 0 || v.height % 2 != 0) {
    throw std::invalid_argument(
        "nv12_from_bgr: OpenCV's BGR -> I420 needs an even width and "
        "height, got " +
        std::to_string(v.width) + "x" + std::to_string(v.height));
  }
  cv::Mat i420;  // (3/2 h) x w: Y, then U (h/2 x w/2 packed), then V
  cv::cvtColor(bgr, i420, cv::COLOR_BGR2YUV_I420);
  HostNv12 f(v.width, v.height);
  const std::size_t w = v.width, h = v.height, quarter = (w / 2) * (h / 2);
  std::copy(i420.data, i420.data + w * h, f.y.data());
  const std::uint8_t* u = i420.data + w * h;
  const std::uint8_t* vv = u + quarter;
  for (std::size_t i = 0; i < quarter; ++i) {
    f.uv[2 * i] = u[i];
    f.uv[2 * i + 1] = vv[i];
  }
  return f;
}

cv::Mat nv12_to_bgr_opencv(const Nv12View& host) {
  validate_nv12(host, "nv12_to_bgr_opencv");
  const int ew = host.width + (host.width & 1), eh = host.height + (host.height & 1);
  cv::Mat packed(eh + eh / 2, ew, CV_8UC1);
  for (int r = 0; r < eh; ++r) {
    const std::uint8_t* src =
        host.y + static_cast<std::size_t>(std::min(r, host.height - 1)) * host.y_pitch;
    std::uint8_t* dst = packed.ptr<std::uint8_t>(r);
    std::copy(src, src + host.width, dst);
    if (ew != host.width) dst[ew - 1] = dst[host.width - 1];
  }
  for (int j = 0; j < eh / 2; ++j) {  // ew / 2 == ceil(width / 2) pairs: the plane as it is
    const std::uint8_t* src = host.uv + static_cast<std::size_t>(j) * host.uv_pitch;
    std::copy(src, src + ew, packed.ptr<std::uint8_t>(eh + j));
  }
  cv::Mat bgr;
  cv::cvtColor(packed, bgr, cv::COLOR_YUV2BGR_NV12);
  return bgr(cv::Rect(0, 0, host.width, host.height)).clone();
}

}  // namespace lesson06
