// NPP baseline of lesson 06 (see npp_baseline.hpp). Compiled with COURSE_HAVE_NPP when CMake
// found NPP; otherwise every function says so.
#include "npp_baseline.hpp"

#include <stdexcept>
#include <string>

#include "common/cuda_check.hpp"

#ifdef COURSE_HAVE_NPP
#include <nppcore.h>
#include <nppi_color_conversion.h>
#include <nppi_data_exchange_and_initialization.h>
#include <nppi_geometry_transforms.h>
#include <nppi_support_functions.h>
#endif

namespace lesson06 {

#ifndef COURSE_HAVE_NPP

namespace {
const char* const kHowToFind =
    "configure with -DCOURSE_NPP_ROOT=DIR, DIR holding include/ and lib/, e.g. "
    "site-packages/nvidia/cu13 of `pip install nvidia-npp`";
}  // namespace

bool npp_available() {
  return false;
}
std::string npp_build_note() {
  return std::string("NPP not found at build time: row skipped (") + kHowToFind + ")";
}
Letterbox letterbox_npp_u8(const ImageView&, std::uint8_t*, int, int, cudaStream_t) {
  throw std::logic_error(std::string("letterbox_npp_u8: NPP not found at build time (") +
                         kHowToFind + ")");
}
Letterbox letterbox_npp_nv12_u8(const Nv12View&, std::uint8_t*, std::uint8_t*, int, int,
                                cudaStream_t) {
  throw std::logic_error(std::string("letterbox_npp_nv12_u8: NPP not found at build time (") +
                         kHowToFind + ")");
}

#else

namespace {

void check_npp(NppStatus status, const char* call) {
  // Negative: an error; positive: a warning (e.g. NPP_WRONG_INTERSECTION_ROI_WARNING), which
  // for a letterbox means nothing was drawn: both are failures here.
  if (status != NPP_SUCCESS) {
    throw std::runtime_error(std::string(call) + " failed with NppStatus " +
                             std::to_string(static_cast<int>(status)));
  }
}

// The stream context of the _Ctx API for `stream` on the current device. Device attributes
// with cudaDeviceGetAttribute (cudaGetDeviceProperties takes milliseconds), per thread, once per
// device.
NppStreamContext stream_context(cudaStream_t stream) {
  thread_local int cached_device = -1;
  thread_local NppStreamContext base{};
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  if (device != cached_device) {
    NppStreamContext c{};
    c.nCudaDeviceId = device;
    int v = 0;
    CUDA_CHECK(
        cudaDeviceGetAttribute(&c.nMultiProcessorCount, cudaDevAttrMultiProcessorCount, device));
    CUDA_CHECK(cudaDeviceGetAttribute(&c.nMaxThreadsPerMultiProcessor,
                                      cudaDevAttrMaxThreadsPerMultiProcessor, device));
    CUDA_CHECK(
        cudaDeviceGetAttribute(&c.nMaxThreadsPerBlock, cudaDevAttrMaxThreadsPerBlock, device));
    CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlock, device));
    c.nSharedMemPerBlock = static_cast<std::size_t>(v);
    CUDA_CHECK(cudaDeviceGetAttribute(&c.nCudaDevAttrComputeCapabilityMajor,
                                      cudaDevAttrComputeCapabilityMajor, device));
    CUDA_CHECK(cudaDeviceGetAttribute(&c.nCudaDevAttrComputeCapabilityMinor,
                                      cudaDevAttrComputeCapabilityMinor, device));
    base = c;
    cached_device = device;
  }
  NppStreamContext c = base;
  c.hStream = stream;
  CUDA_CHECK(cudaStreamGetFlags(stream, &c.nStreamFlags));
  return c;
}

}  // namespace

bool npp_available() {
  return true;
}

std::string npp_build_note() {
  const NppLibraryVersion* v = nppGetLibVersion();
  return "NPP " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
         std::to_string(v->build);
}

Letterbox letterbox_npp_u8(const ImageView& src, std::uint8_t* dst, int dst_w, int dst_h,
                           cudaStream_t stream) {
  const char* who = "letterbox_npp_u8";
  validate_source(src, who);
  validate_target(dst_w, dst_h, who);
  if (dst == nullptr) throw std::invalid_argument(std::string(who) + ": destination is null");
  const Letterbox lb = make_letterbox(src.width, src.height, dst_w, dst_h);
  const Affine2x3 fwd = letterbox_matrix(lb);
  const double coeffs[2][3] = {{fwd.m[0], fwd.m[1], fwd.m[2]}, {fwd.m[3], fwd.m[4], fwd.m[5]}};
  const NppStreamContext ctx = stream_context(stream);
  const Npp8u grey[3] = {kPadValue, kPadValue, kPadValue};
  const int dst_step = 3 * dst_w;
  check_npp(nppiSet_8u_C3R_Ctx(grey, dst, dst_step, NppiSize{dst_w, dst_h}, ctx),
            "nppiSet_8u_C3R_Ctx");
  check_npp(nppiWarpAffine_8u_C3R_Ctx(src.data, NppiSize{src.width, src.height},
                                      static_cast<int>(src.pitch),
                                      NppiRect{0, 0, src.width, src.height}, dst, dst_step,
                                      NppiRect{0, 0, dst_w, dst_h}, coeffs, NPPI_INTER_LINEAR, ctx),
            "nppiWarpAffine_8u_C3R_Ctx");
  return lb;
}

Letterbox letterbox_npp_nv12_u8(const Nv12View& src, std::uint8_t* bgr, std::uint8_t* dst,
                                int dst_w, int dst_h, cudaStream_t stream) {
  const char* who = "letterbox_npp_nv12_u8";
  validate_nv12(src, who);
  if (src.y_pitch != src.uv_pitch || src.width % 2 != 0 || src.height % 2 != 0) {
    throw std::invalid_argument(std::string(who) +
                                ": NPP's NV12 conversion needs one pitch for both planes and "
                                "even sizes, got " +
                                std::to_string(src.width) + "x" + std::to_string(src.height) +
                                ", pitches " + std::to_string(src.y_pitch) + " and " +
                                std::to_string(src.uv_pitch));
  }
  if (bgr == nullptr) throw std::invalid_argument(std::string(who) + ": bgr scratch is null");
  const Npp8u* planes[2] = {src.y, src.uv};
  check_npp(nppiNV12ToBGR_8u_P2C3R_Ctx(planes, static_cast<int>(src.y_pitch), bgr, 3 * src.width,
                                       NppiSize{src.width, src.height}, stream_context(stream)),
            "nppiNV12ToBGR_8u_P2C3R_Ctx");
  const ImageView frame{bgr, src.width, src.height, 3, 3 * static_cast<std::size_t>(src.width)};
  return letterbox_npp_u8(frame, dst, dst_w, dst_h, stream);
}

#endif

}  // namespace lesson06
