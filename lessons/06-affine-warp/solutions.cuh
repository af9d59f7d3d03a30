// Lesson 06: the exercise solutions. Read them after you have tried.
//
// Not compiled on its own: affine_warp.cu includes this file at its end, in the lesson build only,
// so the solutions share its translation unit (its helpers, and the kernels that call them). The
// exercise build (make check LESSON=06) compiles affine_warp.cu with LESSON_EXERCISE_BUILD defined,
// which leaves this file out, and exercise.cu supplies the same functions instead.
#pragma once

namespace lesson06 {

// Exercise 1: the letterbox matrix and its inverse.
__host__ __device__ Affine2x3 letterbox_matrix(const Letterbox& lb, bool half_pixel) {
  const double s = lb.scale;
  // Continuous coordinates: u_dst = s u_src + pad. Pixel-index coordinates, x = u - 1/2:
  // x_dst + 1/2 = s (x_src + 1/2) + pad  =>  x_dst = s x_src + pad + s/2 - 1/2.
  const double half = half_pixel ? 0.5 * s - 0.5 : 0.0;
  return {{s, 0.0, lb.pad_x + half, 0.0, s, lb.pad_y + half}};
}

// Called on the host (per frame, by the launchers). The order of operations is OpenCV's, so the
// result is bit-identical to cv::invertAffineTransform and to cv::warpAffine's own inversion.
__host__ __device__ Affine2x3 invert_affine(const Affine2x3& a) {
  const double* m = a.m;
  double d = m[0] * m[4] - m[1] * m[3];
  d = d != 0.0 ? 1.0 / d : 0.0;
  const double a11 = m[4] * d, a22 = m[0] * d, a12 = -m[1] * d, a21 = -m[3] * d;
  const double b1 = -a11 * m[2] - a12 * m[5];
  const double b2 = -a21 * m[2] - a22 * m[5];
  return {{a11, a12, b1, a21, a22, b2}};
}

// Exercise 2: bilinear sample with a replicated border.
__host__ __device__ void bilinear_sample_bgr_replicate(const ImageView& src, SubpixelPos p,
                                                       std::uint8_t out[3]) {
  const int sx = p.x >> kSubpixelBits, sy = p.y >> kSubpixelBits;
  const int fx = p.x & (kSubpixelSteps - 1), fy = p.y & (kSubpixelSteps - 1);
  const int w[4] = {(kSubpixelSteps - fx) * (kSubpixelSteps - fy), fx * (kSubpixelSteps - fy),
                    (kSubpixelSteps - fx) * fy, fx * fy};
  const auto clamp = [](int v, int hi) { return v < 0 ? 0 : (v > hi ? hi : v); };
  const int x0 = clamp(sx, src.width - 1), x1 = clamp(sx + 1, src.width - 1);
  const int y0 = clamp(sy, src.height - 1), y1 = clamp(sy + 1, src.height - 1);
  const std::uint8_t* row0 = src.data + static_cast<std::size_t>(y0) * src.pitch;
  const std::uint8_t* row1 = src.data + static_cast<std::size_t>(y1) * src.pitch;
  for (int c = 0; c < 3; ++c) {
    const int acc = w[0] * row0[3 * x0 + c] + w[1] * row0[3 * x1 + c] + w[2] * row1[3 * x0 + c] +
                    w[3] * row1[3 * x1 + c];
    out[c] = static_cast<std::uint8_t>((acc + (1 << (kWeightBits - 1))) >> kWeightBits);
  }
}

// Exercise 3: boxes back to the source image.
__host__ __device__ Box unletterbox_box(const Box& b, const Letterbox& lb) {
  const auto back = [&](float u, double pad, int limit) {
    const double v = (u - pad) / lb.scale;
    return static_cast<float>(v < 0.0 ? 0.0 : (v > limit ? static_cast<double>(limit) : v));
  };
  return {back(b.x1, lb.pad_x, lb.src_w), back(b.y1, lb.pad_y, lb.src_h),
          back(b.x2, lb.pad_x, lb.src_w), back(b.y2, lb.pad_y, lb.src_h)};
}

// Exercise 4: the fused letterbox with an FP16 output.
namespace {
__global__ void letterbox_fp16_kernel(ImageView src, WarpTableView table, __half* __restrict__ dst,
                                      int dst_w, int dst_h, ChannelTransform t) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= dst_w || y >= dst_h) return;
  std::uint8_t bgr[3];
  warp_pixel_bgr(src, table, x, y, kPadValue, bgr);
  const std::size_t plane = static_cast<std::size_t>(dst_w) * dst_h;
  const std::size_t i = static_cast<std::size_t>(y) * dst_w + x;
  // Normalise in float, round once to half: the same values as v2, rounded to nearest.
  dst[i] = __float2half_rn(normalize_value(bgr[2], t, 0));
  dst[plane + i] = __float2half_rn(normalize_value(bgr[1], t, 1));
  dst[2 * plane + i] = __float2half_rn(normalize_value(bgr[0], t, 2));
}
}  // namespace

Letterbox letterbox_fp16(const ImageView& src, __half* dst, int dst_w, int dst_h,
                         const Normalize& norm, cudaStream_t stream) {
  const Prepared p = validate_and_prepare(src, dst, dst_w, dst_h, norm, "letterbox_fp16");
  const DeviceTable table = device_table(p.inv, dst_w, dst_h, stream);  // destroyed after launch
  letterbox_fp16_kernel<<<grid_for(dst_w, dst_h, 1), dim3(kBlockX, kBlockY), 0, stream>>>(
      src, table.view(), dst, dst_w, dst_h, channel_transform(norm));
  CUDA_CHECK_LAUNCH();
  return p.lb;
}

}  // namespace lesson06
