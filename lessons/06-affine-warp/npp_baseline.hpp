// Lesson 06's GPU library baseline: the letterbox written with NPP, the image library of the CUDA
// toolkit, the way a user would call it instead of writing a kernel. Host code only.
//
// NPP is optional: CMake looks for it in the CUDA toolkit (FindCUDAToolkit's CUDA::nppc,
// CUDA::nppig, CUDA::nppidei, CUDA::nppicc) and then under -DCOURSE_NPP_ROOT=DIR (DIR/include,
// DIR/lib: for instance site-packages/nvidia/cu13 after `pip install nvidia-npp`). Without it the
// lesson still builds; these functions then throw, and the binary, the benchmark and the tests
// say "NPP not found at build time" and skip the NPP rows.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "affine_warp.cuh"

namespace lesson06 {

// True when this build has NPP.
bool npp_available();
// One line for the binary and the benchmark: "NPP 13.x.y" (the library's version), or
// "NPP not found at build time: row skipped (how to give CMake its location)".
std::string npp_build_note();

// The letterbox with NPP, uint8 BGR out (dst: dst_h x dst_w x 3, contiguous, device memory):
// nppiSet_8u_C3R_Ctx fills the target with 114, then nppiWarpAffine_8u_C3R_Ctx(NPPI_INTER_LINEAR)
// warps with the forward letterbox matrix (letterbox_matrix: the same matrix cv::warpAffine gets
// in the oracle). NPP's warp writes only the target pixels that map into the source, so the border
// must be filled first: two calls, two kernels. Both go on `stream` through an NppStreamContext
// (the _Ctx API; NPP's older global-stream API is deprecated). The float tensor is then one more
// call, hwc_u8_to_chw_f32 (NPP has no fused BGR->RGB + normalise + planar conversion).
// Throws std::invalid_argument as the lesson's launchers do, std::logic_error in a build without
// NPP, std::runtime_error naming the NPP call and its NppStatus when NPP fails.
Letterbox letterbox_npp_u8(const ImageView& src, std::uint8_t* dst, int dst_w, int dst_h,
                           cudaStream_t stream = nullptr);

// The same from an NV12 frame: nppiNV12ToBGR_8u_P2C3R_Ctx into `bgr` (a device image of the
// frame's size, src.width x src.height x 3, pitch 3 * src.width), then letterbox_npp_u8. NPP's
// NV12 conversion takes one pitch for both planes: src.y_pitch must equal src.uv_pitch, and even
// sizes (std::invalid_argument otherwise). Which YUV matrix NPP applies is a measured fact
// (the tests compare it with cvtColor's BT.601), not something this function promises.
Letterbox letterbox_npp_nv12_u8(const Nv12View& src, std::uint8_t* bgr, std::uint8_t* dst,
                                int dst_w, int dst_h, cudaStream_t stream = nullptr);

}  // namespace lesson06
