// The letterbox geometry lesson 08 needs: boxes from network-input pixels back to the source
// image (and forward, for the synthetic generator).
//
// Lesson 06 owns the letterbox. This header is the minimal copy of its geometry, with the same
// names, fields and arithmetic (double precision, continuous padding), so that the two can be
// merged into one header in common/ when both lessons land. Until then lesson 08 does not depend
// on lesson 06. What differs: unletterbox_box is inline here, because the decode kernel calls it
// from device code (lesson 06 defines it out of line, as an exercise).
//
// Conventions (../../shared/DESIGN.md, "Semantics"):
//   s     = min(dst_w / src_w, dst_h / src_h)
//   pad_x = (dst_w - s * src_w) / 2,  pad_y = (dst_h - s * src_h) / 2   (continuous, NOT rounded)
//   forward:  u_dst = s * u_src + pad
//   inverse:  u_src = (u_dst - pad) / s, clamped to [0, src_w] x [0, src_h]
// Coordinates are continuous ("edge") coordinates: pixel i covers [i, i + 1].
#pragma once

#include <cuda_runtime_api.h>  // __host__ __device__

#include <algorithm>
#include <stdexcept>
#include <string>

namespace lesson08 {

// An axis-aligned box in continuous pixel coordinates (no "+1"): x1 <= x2, y1 <= y2.
struct Box {
  float x1, y1, x2, y2;
};

// The letterbox of a src_w x src_h frame into a dst_w x dst_h network input.
struct Letterbox {
  int src_w = 0, src_h = 0;  // source image, pixels
  int dst_w = 0, dst_h = 0;  // network input, pixels
  double scale = 0.0;        // s = min(dst_w / src_w, dst_h / src_h)
  double pad_x = 0.0;        // left padding, (dst_w - s * src_w) / 2; may be fractional
  double pad_y = 0.0;        // top padding,  (dst_h - s * src_h) / 2
};

// Throws std::invalid_argument unless every size is in [1, 32766] (OpenCV's coordinate limit,
// the same bound lesson 06 uses).
inline Letterbox make_letterbox(int src_w, int src_h, int dst_w, int dst_h) {
  const auto check = [](int w, int h, const char* what) {
    if (w < 1 || h < 1 || w > 32766 || h > 32766) {
      throw std::invalid_argument(std::string("make_letterbox: the ") + what +
                                  " size must be in [1, 32766] x [1, 32766], got " +
                                  std::to_string(w) + " x " + std::to_string(h));
    }
  };
  check(src_w, src_h, "source");
  check(dst_w, dst_h, "target");
  Letterbox lb;
  lb.src_w = src_w;
  lb.src_h = src_h;
  lb.dst_w = dst_w;
  lb.dst_h = dst_h;
  lb.scale = std::min(static_cast<double>(dst_w) / src_w, static_cast<double>(dst_h) / src_h);
  lb.pad_x = (dst_w - lb.scale * src_w) / 2.0;
  lb.pad_y = (dst_h - lb.scale * src_h) / 2.0;
  return lb;
}

// A box from source-image coordinates into network-input coordinates: u' = s u + pad, computed
// in double and rounded once to float. Host only (the generator uses it): under nvcc the device
// would fuse s * u + pad into one FMA and round differently.
inline Box letterbox_box(const Box& b, const Letterbox& lb) {
  const double s = lb.scale;
  return {static_cast<float>(s * b.x1 + lb.pad_x), static_cast<float>(s * b.y1 + lb.pad_y),
          static_cast<float>(s * b.x2 + lb.pad_x), static_cast<float>(s * b.y2 + lb.pad_y)};
}

// One coordinate back to the source image: (u' - pad) / s in double, clamped to [0, limit].
// A subtraction and a division, nothing an FMA could merge: host and device give the same bits.
__host__ __device__ inline float unletterbox_coordinate(float u, double pad, double scale,
                                                        int limit) {
  const double v = (static_cast<double>(u) - pad) / scale;
  return static_cast<float>(v < 0.0 ? 0.0 : (v > limit ? static_cast<double>(limit) : v));
}

// A detection from network-input coordinates back to the source image. A box can reach into
// the padding (or past the input's edge); clamping puts it back inside [0, W] x [0, H].
__host__ __device__ inline Box unletterbox_box(const Box& b, const Letterbox& lb) {
  return {unletterbox_coordinate(b.x1, lb.pad_x, lb.scale, lb.src_w),
          unletterbox_coordinate(b.y1, lb.pad_y, lb.scale, lb.src_h),
          unletterbox_coordinate(b.x2, lb.pad_x, lb.scale, lb.src_w),
          unletterbox_coordinate(b.y2, lb.pad_y, lb.scale, lb.src_h)};
}

}  // namespace lesson08
