// The letterbox geometry lesson 08 needs: boxes from network-input pixels back to the source
// image (and forward, for the synthetic generator).
//
// The geometry itself is common/letterbox.cuh, shared with lesson 06. The inverse is lesson 06's
// exercise 3 (defined out of line there); here it is inline, because the decode kernel calls it
// from device code.
//
// Conventions (the same as in common/letterbox.cuh's header comment):
//   s     = min(dst_w / src_w, dst_h / src_h)
//   pad_x = (dst_w - s * src_w) / 2,  pad_y = (dst_h - s * src_h) / 2   (continuous, NOT rounded)
//   forward:  u_dst = s * u_src + pad
//   inverse:  u_src = (u_dst - pad) / s, clamped to [0, src_w] x [0, src_h]
// Coordinates are continuous ("edge") coordinates: pixel i covers [i, i + 1].
#pragma once

#include <cuda_runtime_api.h>  // __host__ __device__

#include "common/letterbox.cuh"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace lesson08 {

// Box, Letterbox, make_letterbox and letterbox_box (forward) are shared with lesson 06.
using course::Box;
using course::Letterbox;
using course::letterbox_box;
using course::make_letterbox;

// One coordinate back to the source image: (u' - pad) / s in double, clamped to [0, limit]
// (+-inf clamps to the nearer end). A NaN stays NaN: no clamp can place it, so callers reject
// non-finite coordinates first (decode_candidate does).
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
