// Letterbox geometry, shared by lesson 06 (the preprocessing warp) and lesson 08 (boxes back to
// the source image). The conventions, which both lessons and their tests follow:
//   s     = min(dst_w / src_w, dst_h / src_h)                   the image keeps its aspect ratio
//   pad_x = (dst_w - s * src_w) / 2,  pad_y = (dst_h - s * src_h) / 2   centred; continuous,
//           not rounded (YOLOv5's Python letterbox rounds to whole pixels: whichever you pick,
//           map boxes back with the same one)
//   forward:  u_dst = s * u_src + pad
//   inverse:  u_src = (u_dst - pad) / s, clamped to [0, src_w] x [0, src_h]
// Coordinates are continuous ("edge") coordinates: pixel i covers [i, i + 1].
// The inverse is lesson 06's exercise 3 (unletterbox_box); lesson 08 needs it inside a kernel.
#pragma once

#include <cuda_runtime_api.h>  // __host__ __device__

#include <algorithm>
#include <stdexcept>
#include <string>

namespace course {

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

// OpenCV's coordinate limit (remap() stores source positions as 16-bit integers); the oracle of
// lesson 06 cannot go further, so neither do we.
constexpr int kMaxImageDimension = 32766;

// Throws std::invalid_argument unless every size is in [1, kMaxImageDimension].
inline Letterbox make_letterbox(int src_w, int src_h, int dst_w, int dst_h) {
  const auto check = [](int w, int h, const char* what) {
    const std::string got = ", got " + std::to_string(w) + "x" + std::to_string(h);
    if (w < 1 || h < 1) {
      throw std::invalid_argument(std::string("make_letterbox: ") + what +
                                  " size must be at least 1x1" + got);
    }
    if (w > kMaxImageDimension || h > kMaxImageDimension) {
      throw std::invalid_argument(std::string("make_letterbox: ") + what +
                                  " size must be at most " + std::to_string(kMaxImageDimension) +
                                  " per side (OpenCV's coordinate limit)" + got);
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

// A box from source coordinates into network-input coordinates: u' = s u + pad, in double,
// rounded once to float. (On the device nvcc may fuse s * u + pad into one FMA, which rounds
// differently in the last bit; the course uses this on the host.) `lb` must come from
// make_letterbox: a default Letterbox has scale 0 and maps every box to the origin, and nothing
// is checked here, so that it can run in a kernel.
__host__ __device__ inline Box letterbox_box(const Box& b, const Letterbox& lb) {
  const double s = lb.scale;
  return {static_cast<float>(s * b.x1 + lb.pad_x), static_cast<float>(s * b.y1 + lb.pad_y),
          static_cast<float>(s * b.x2 + lb.pad_x), static_cast<float>(s * b.y2 + lb.pad_y)};
}

}  // namespace course
