// Lesson 06: letterbox preprocessing on the GPU, checked against OpenCV.
//
//   lesson06 [--image FILE] [--size WxH] [--out DIR] [--help]
//
// Takes a frame (a generated 1920x1080 test pattern, or a PNG/JPEG/BMP/PPM file), letterboxes it to
// the network input with each kernel version, compares every result with OpenCV, shows what the
// half-pixel terms are for, maps a box back, times the versions against the OpenCV CPU
// pipeline, writes PNGs of the result, then does it again from an NV12 frame (the decoder's
// format) into FP16 and for a batch. Exits 0 when every check passes.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include <cuda_fp16.h>

#include "affine_warp.cuh"
#include "common/headline.hpp"
#include "common/cuda_check.hpp"
#include "common/cupti_trace.hpp"
#include "common/device.hpp"
#include "common/lesson_main.hpp"
#include "common/memory.hpp"
#include "common/process.hpp"
#include "common/stream.hpp"
#include "common/timing.hpp"
#include "cpu_pipeline.hpp"
#include "common/image_io.hpp"
#include "image_io.hpp"
#include "npp_baseline.hpp"

using namespace lesson06;

namespace {

struct Options {
  std::string image;  // empty: generate the test pattern
  int width = 640, height = 640;
  std::string out_dir;  // empty: next to this executable
};

// "640x384" -> width 640, height 384. False unless the text is exactly two integers >= 1 with
// an 'x' between them.
bool parse_size(const std::string& text, int* width, int* height) {
  char rest = 0;
  return std::sscanf(text.c_str(), "%dx%d%c", width, height, &rest) == 2 && *width >= 1 &&
         *height >= 1;
}

// GPU time (launch latency excluded) and end-to-end latency (host call to completion) of what
// enqueue() puts on the stream, medians of `runs` samples each, with the L2 flushed before every
// sample (course::measure, common/timing.hpp): the frame comes from DRAM, as a frame written
// long before would.
struct Times {
  double gpu_us, latency_us;
};
template <class F>
Times median_times_us(cudaStream_t stream, int runs, F&& enqueue) {
  const course::Timing t = course::measure(stream, runs, enqueue, course::L2::flushed, true);
  return {1e3 * t.gpu_ms, 1e3 * t.latency_ms};
}

// The kernel's own duration as the GPU ran it, from CUPTI's activity records (common/
// cupti_trace.hpp): `runs` launches of enqueue(), each after an L2 flush as median_times_us does,
// and the median of end - start over the kernels whose (mangled) name contains `kernel`, in
// microseconds. Unlike the held GPU time it leaves out the event records and the launch
// dispatch, so the two differ by about the harness floor (about: the front end overlaps part of
// it with the kernel, common/timing.hpp). Throws CuptiUnavailable if CUPTI refuses (another tool
// attached, a build without CUPTI) or recorded none of the launches.
template <class F>
double cupti_kernel_us(cudaStream_t stream, int runs, const char* kernel, F&& enqueue) {
  course::cupti::ActivityTrace trace;
  for (int i = 0; i < runs; ++i) {
    course::flush_l2(stream);
    enqueue();
  }
  std::vector<double> us;
  for (const course::cupti::GpuActivity& a : trace.stop()) {
    if (a.kind == course::cupti::GpuActivity::Kind::kernel &&
        a.name.find(kernel) != std::string::npos) {
      us.push_back(1e-3 * static_cast<double>(a.end_ns - a.start_ns));
    }
  }
  if (us.empty()) {
    throw course::cupti::CuptiUnavailable(std::string("CUPTI recorded no launch of ") + kernel);
  }
  return course::median(us);
}

template <class F>
double median_cpu_us(int runs, F&& work) {
  work();
  std::vector<double> us;
  for (int i = 0; i < runs; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    work();
    us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(double(a[i]) - b[i]));
  return m;
}

// One panel of the comparison image, with a caption.
cv::Mat panel(const cv::Mat& img, const std::string& caption) {
  cv::Mat p = img.clone();
  cv::rectangle(p, cv::Rect(0, 0, p.cols, 28), cv::Scalar::all(0), cv::FILLED);
  cv::putText(p, caption, {6, 20}, cv::FONT_HERSHEY_SIMPLEX, 0.55, cv::Scalar::all(255), 1,
              cv::LINE_AA);
  return p;
}

int run(const Options& opt) {
  const course::DeviceInfo dev = course::query_device(0);
  std::printf("%s\n", course::summary(dev).c_str());
  std::printf("Clocks: %s\n\n", course::describe(course::read_gpu_clocks(0)).c_str());
  int failures = 0;
  const auto verdict = [&](bool ok) {
    failures += ok ? 0 : 1;
    return ok ? "ok" : "FAILED";
  };

  // ---- 1. The frame and its letterbox geometry.
  const cv::Mat src =
      opt.image.empty() ? make_test_pattern(1920, 1080) : course::read_image(opt.image);
  std::printf("1. Input: %dx%d BGR uint8 (%s) -> network input %dx%d\n", src.cols, src.rows,
              opt.image.empty() ? "generated test pattern" : opt.image.c_str(), opt.width,
              opt.height);
  const Letterbox lb = make_letterbox(src.cols, src.rows, opt.width, opt.height);
  const Affine2x3 fwd = letterbox_matrix(lb);
  const Affine2x3 inv = invert_affine(fwd);
  std::printf("   scale s = %.6f, padding left %.3f, top %.3f (grey %d)\n", lb.scale, lb.pad_x,
              lb.pad_y, kPadValue);
  std::printf("   forward M (source -> input): [%9.5f %9.5f %10.5f; %9.5f %9.5f %10.5f]\n",
              fwd.m[0], fwd.m[1], fwd.m[2], fwd.m[3], fwd.m[4], fwd.m[5]);
  std::printf("   inverse   (input -> source): [%9.5f %9.5f %10.5f; %9.5f %9.5f %10.5f]\n\n",
              inv.m[0], inv.m[1], inv.m[2], inv.m[3], inv.m[4], inv.m[5]);

  course::Stream stream;
  DeviceImage d_src(src.cols, src.rows);
  d_src.upload(view_of(src), stream);
  const std::size_t pixels = static_cast<std::size_t>(opt.width) * opt.height;
  course::DeviceBuffer<std::uint8_t> d_u8(3 * pixels);
  course::DeviceBuffer<float> d_f32(3 * pixels), d_f32b(3 * pixels);

  // ---- 2. v1 against cv::warpAffine, on the frame and on an odd-sized copy of it. A 3x
  // downscale samples whole source pixels; 641x479 -> 640x640 samples between them, where the
  // sub-pixel arithmetic decides the last grey level.
  cv::Mat odd;
  cv::resize(src, odd, cv::Size(641, 479), 0, 0, cv::INTER_AREA);
  std::printf(
      "2. v1 (one thread per pixel, uint8 BGR out) vs cv::warpAffine(INTER_LINEAR,\n"
      "   BORDER_CONSTANT 114) with the same matrix; tolerance 1 grey level:\n");
  std::vector<std::uint8_t> v1;
  for (const cv::Mat* frame : std::vector<const cv::Mat*>{&src, &odd}) {
    DeviceImage d_frame(frame->cols, frame->rows);
    d_frame.upload(view_of(*frame), stream);
    letterbox_v1_u8(d_frame.view(), d_u8.data(), opt.width, opt.height, stream);
    stream.synchronize();
    std::vector<std::uint8_t> out = course::to_host(d_u8);
    const cv::Mat got(opt.height, opt.width, CV_8UC3, out.data());
    const cv::Mat ref = letterbox_opencv(*frame, opt.width, opt.height);
    cv::Mat ne;
    cv::compare(got.reshape(1), ref.reshape(1), ne, cv::CMP_NE);
    const int diff = static_cast<int>(cv::norm(got, ref, cv::NORM_INF));
    const Affine2x3 frame_inv = invert_affine(
        letterbox_matrix(make_letterbox(frame->cols, frame->rows, opt.width, opt.height)));
    std::vector<std::uint8_t> textbook =
        warp_affine_float_reference(view_of(*frame), frame_inv, opt.width, opt.height, kPadValue);
    const cv::Mat tb(opt.height, opt.width, CV_8UC3, textbook.data());
    std::printf(
        "   %4dx%-4d: max difference %d, %d of %zu values differ  [%s]   "
        "(textbook float bilinear: up to %d)\n",
        frame->cols, frame->rows, diff, cv::countNonZero(ne), 3 * pixels, verdict(diff <= 1),
        static_cast<int>(cv::norm(tb, ref, cv::NORM_INF)));
    if (frame == &src) v1 = std::move(out);
  }
  std::printf(
      "   (OpenCV snaps source positions to 1/32 pixel and weights to integers; the\n"
      "    kernels do the same, a textbook bilinear does not)\n\n");
  const cv::Mat gpu(opt.height, opt.width, CV_8UC3, v1.data());
  const cv::Mat ocv = letterbox_opencv(src, opt.width, opt.height);

  // ---- 3. Why the half-pixel terms.
  const Affine2x3 naive = invert_affine(letterbox_matrix(lb, false));
  warp_affine_v1(d_src.view(), naive, d_u8.data(), opt.width, opt.height, kPadValue, stream);
  stream.synchronize();
  std::vector<std::uint8_t> shifted = course::to_host(d_u8);
  const cv::Mat naive_img(opt.height, opt.width, CV_8UC3, shifted.data());
  // The top-left pixel of the picture inside the padding.
  const double px = std::ceil(lb.pad_x), py = std::ceil(lb.pad_y);
  double sx = 0, sy = 0, nx = 0, ny = 0;
  apply_affine(inv, px, py, &sx, &sy);
  apply_affine(naive, px, py, &nx, &ny);
  std::printf(
      "3. Half-pixel terms: input pixel (%.0f, %.0f) samples source (%.3f, %.3f) with them,\n"
      "   (%.3f, %.3f) without. Without them the picture moves by (1 - s)/2 = %.3f input\n"
      "   pixels right and down, and differs from OpenCV by up to %d grey levels (mean %.2f).\n\n",
      px, py, sx, sy, nx, ny, (1.0 - lb.scale) / 2,
      static_cast<int>(cv::norm(naive_img, ocv, cv::NORM_INF)),
      cv::norm(naive_img, ocv, cv::NORM_L1) / (3.0 * pixels));

  // ---- 4. The fused versions against the OpenCV CPU pipeline.
  const Normalize norm;  // 1/255; the tests also cover ImageNet mean/std
  std::vector<float> cpu(3 * pixels);
  OpenCvPreprocessor opencv;
  opencv.run(src, opt.width, opt.height, norm, cpu.data());
  letterbox_v2_fused(d_src.view(), d_f32.data(), opt.width, opt.height, norm, stream);
  stream.synchronize();
  const std::vector<float> v2 = course::to_host(d_f32);
  const double v2_diff = max_abs_diff(v2, cpu);
  std::printf(
      "4. v2 fused (warp + BGR->RGB + /255 + planar CHW float, one pass) vs the OpenCV\n"
      "   pipeline (warpAffine, cvtColor, convertTo, split): max |difference| %.3g  [%s]\n",
      v2_diff, verdict(v2_diff <= 1.0 / 255 + 1e-6));
  letterbox_v3_vec4(d_src.view(), d_f32b.data(), opt.width, opt.height, norm, stream);
  stream.synchronize();
  const bool v3_same = course::to_host(d_f32b) == v2;
  std::printf("   v3 (4 pixels per thread, float4 stores): %s v2  [%s]\n",
              v3_same ? "identical to" : "DIFFERENT from", verdict(v3_same));

  // A batch of frames of different sizes: the frame itself, smaller, portrait, odd.
  std::vector<cv::Mat> frames = {src, cv::Mat(), cv::Mat(), cv::Mat()};
  cv::resize(src, frames[1],
             cv::Size(std::max(1, src.cols * 2 / 3), std::max(1, src.rows * 2 / 3)));
  cv::rotate(src, frames[2], cv::ROTATE_90_CLOCKWISE);
  cv::resize(src, frames[3], cv::Size(641, 479));
  std::vector<DeviceImage> d_frames;
  std::vector<ImageView> views;
  for (const cv::Mat& f : frames) {
    d_frames.emplace_back(f.cols, f.rows);
    d_frames.back().upload(view_of(f), stream);
    views.push_back(d_frames.back().view());
  }
  course::DeviceBuffer<float> d_batch(frames.size() * 3 * pixels);
  letterbox_v4_batched(views, d_batch.data(), opt.width, opt.height, norm, stream);
  stream.synchronize();
  const std::vector<float> batch = course::to_host(d_batch);
  bool batch_ok = true;
  std::printf("   v4 batched, %zu frames (", frames.size());
  for (std::size_t i = 0; i < frames.size(); ++i) {
    std::printf("%s%dx%d", i ? ", " : "", frames[i].cols, frames[i].rows);
    letterbox_v2_fused(views[i], d_f32b.data(), opt.width, opt.height, norm, stream);
    stream.synchronize();
    const std::vector<float> one = course::to_host(d_f32b);
    batch_ok = batch_ok && std::equal(one.begin(), one.end(), batch.begin() + i * 3 * pixels);
  }
  std::printf(") in one launch: %s  [%s]\n\n", batch_ok ? "each frame identical to v2" : "MISMATCH",
              verdict(batch_ok));

  // ---- 5. A detection back to the source image.
  const Box net{0.25f * opt.width, 0.25f * opt.height, 0.75f * opt.width, 0.95f * opt.height};
  const Box back = unletterbox_box(net, lb);
  std::printf(
      "5. A box in network coordinates (%.1f, %.1f)-(%.1f, %.1f) is (%.1f, %.1f)-(%.1f, %.1f)\n"
      "   in the %dx%d source (continuous coordinates, clamped to the image)\n\n",
      net.x1, net.y1, net.x2, net.y2, back.x1, back.y1, back.x2, back.y2, src.cols, src.rows);

  // ---- 6. Timings: a quick look; `make bench` measures properly.
  // Bytes a kernel really moves: the source rows its taps read (source_footprint: at 3x
  // downscale two rows of every three, nothing for the padding) plus what it writes.
  const SourceFootprint fp = source_footprint(src.cols, src.rows, inv, opt.width, opt.height);
  const double src_read = static_cast<double>(fp.bytes);
  const double u8_bytes = 3.0 * pixels, f32_bytes = 3.0 * 4 * pixels;
  // The host frame in pinned memory: the copy engine reads it directly and cudaMemcpy2DAsync
  // returns at once (from pageable memory the driver would stage it through a pinned buffer).
  course::PinnedBuffer<std::uint8_t> pinned(3 * static_cast<std::size_t>(src.cols) * src.rows);
  cv::Mat pinned_frame(src.rows, src.cols, CV_8UC3, pinned.data());
  src.copyTo(pinned_frame);
  const ImageView host_frame = view_of(pinned_frame);
  struct Row {
    const char* what;
    Times t;
    double bytes;  // 0: not a device-memory figure
  };
  const int runs = 51;
  const auto run_v2 = [&] {
    letterbox_v2_fused(d_src.view(), d_f32.data(), opt.width, opt.height, norm, stream);
  };
  std::vector<Row> rows = {
      {"v1 warp, uint8 HWC out",
       median_times_us(
           stream, runs,
           [&] { letterbox_v1_u8(d_src.view(), d_u8.data(), opt.width, opt.height, stream); }),
       src_read + u8_bytes},
      {"unfused: v1 + hwc_u8_to_chw_f32",
       median_times_us(stream, runs,
                       [&] {
                         letterbox_v1_u8(d_src.view(), d_u8.data(), opt.width, opt.height, stream);
                         hwc_u8_to_chw_f32(d_u8.data(), opt.width, opt.height, d_f32.data(), norm,
                                           stream);
                       }),
       src_read + 2 * u8_bytes + f32_bytes},  // the intermediate is written, then read
      {"v2 fused", median_times_us(stream, runs, run_v2), src_read + f32_bytes},
      {"v3 fused, 4 px/thread",
       median_times_us(stream, runs,
                       [&] {
                         letterbox_v3_vec4(d_src.view(), d_f32.data(), opt.width, opt.height, norm,
                                           stream);
                       }),
       src_read + f32_bytes},
      {"upload (pinned) + v2 fused",
       median_times_us(stream, runs,
                       [&] {
                         d_src.upload(host_frame, stream);
                         run_v2();
                       }),
       0.0},
  };
  const double cpu_us =
      median_cpu_us(11, [&] { opencv.run(src, opt.width, opt.height, norm, cpu.data()); });
  const Row& v2_row = rows[2];
  const Row& upload_row = rows.back();
  constexpr int floor_reps = 21;
  const double floor_ms = course::gpu_time_floor_ms(stream, floor_reps);
  std::printf(
      "6. Time for one %dx%d frame, medians of %d, L2 flushed before every sample. GPU time:\n"
      "   the kernels' own (launch latency excluded); latency: host call to completion.\n"
      "   GB/s counts the %.2f MB the taps read (%d of the %d source rows) and what is written.\n"
      "   %s\n",
      src.cols, src.rows, runs, src_read / 1e6, fp.rows, src.rows,
      course::format_harness_floor(floor_ms, floor_reps).c_str());
  std::printf("   %-34s %10s %12s %9s\n", "version", "GPU (us)", "latency (us)", "GB/s");
  for (const Row& r : rows) {
    if (r.bytes > 0) {
      std::printf("   %-34s %10.1f %12.1f %9.1f\n", r.what, r.t.gpu_us, r.t.latency_us,
                  r.bytes / r.t.gpu_us / 1e3);
    } else {
      std::printf("   %-34s %10.1f %12.1f %9s\n", r.what, r.t.gpu_us, r.t.latency_us, "-");
    }
  }
  std::printf("   %-34s %10s %12.1f %9s\n", "OpenCV pipeline on the CPU", "-", cpu_us, "-");
  // The device-resident v2 row is a few microseconds, so the floor is a large part of it: CUPTI
  // times the same launch from the GPU's side, without the events around it.
  constexpr int cupti_runs = 21;
  try {
    const double kernel_us =
        cupti_kernel_us(stream, cupti_runs, "letterbox_v2_fused_kernel", run_v2);
    std::printf(
        "   cross-check (CUPTI activity), v2 fused: the kernel itself ran %.1f us (median of %d, "
        "L2 flushed before each); the held GPU time above is %.1f us, of which the harness floor "
        "is %.1f us\n",
        kernel_us, cupti_runs, v2_row.t.gpu_us, 1e3 * floor_ms);
  } catch (const course::cupti::CuptiUnavailable& e) {
    std::printf("   cross-check (CUPTI activity): skipped: %s\n", e.what());
  }
  std::printf(
      "   Like with like: the CPU pipeline starts from a frame in host memory, so its match is\n"
      "   the upload + v2 row: %.1f us end to end, %.1fx faster than the CPU's %.1f us (%d\n"
      "   OpenCV threads). The device-resident rows assume a frame already on the GPU (NVDEC\n"
      "   output, GPUDirect capture).\n\n",
      upload_row.t.latency_us, cpu_us / upload_row.t.latency_us, cpu_us, cv::getNumThreads());
  course::add_headline(
      "letterbox from a pinned host frame %.1f us end to end (%.1fx the OpenCV CPU pipeline); "
      "device-resident frame %.1f us GPU time",
      upload_row.t.latency_us, cpu_us / upload_row.t.latency_us, v2_row.t.gpu_us);

  // ---- 7. Pictures.
  cv::Mat diff, naive_diff;
  cv::absdiff(gpu, ocv, diff);
  cv::absdiff(naive_img, ocv, naive_diff);
  diff.convertTo(diff, CV_8U, 64);
  naive_diff.convertTo(naive_diff, CV_8U, 8);
  cv::Mat side;
  cv::hconcat(std::vector<cv::Mat>{panel(gpu, "GPU v1"), panel(ocv, "cv::warpAffine"),
                                   panel(diff, "|GPU - OpenCV| x 64"),
                                   panel(naive_diff, "no half-pixel terms: |diff| x 8")},
              side);
  const std::string p_in = opt.out_dir + "/lesson06_input.png";
  const std::string p_gpu = opt.out_dir + "/lesson06_letterbox.png";
  const std::string p_side = opt.out_dir + "/lesson06_compare.png";
  course::write_png(p_in, src);
  course::write_png(p_gpu, gpu);
  course::write_png(p_side, side);
  std::printf("7. Wrote %s,\n   %s\n   and %s\n\n", p_in.c_str(), p_gpu.c_str(), p_side.c_str());

  // ---- 8. What a deployment feeds the letterbox: NV12 from the decoder, FP16 for the engine,
  // whole batches. v5 converts NV12 at the bilinear taps (what cvtColor + warpAffine compute).
  if (src.cols >= 2 && src.rows >= 2) {
    const cv::Mat even = src(cv::Rect(0, 0, src.cols & ~1, src.rows & ~1));
    const HostNv12 nv12 = nv12_from_bgr(even);  // BT.601 limited range, as OpenCV writes it
    DeviceNv12 d_nv12(nv12.width, nv12.height);
    d_nv12.upload(nv12.view(), stream);
    std::printf(
        "8. NV12 (the decoder's format: Y plane + interleaved UV at half resolution, pitches\n"
        "   %zu and %zu bytes) -> RGB planar in one kernel (v5), colour conversion included:\n",
        d_nv12.view().y_pitch, d_nv12.view().uv_pitch);
    // BT.601 against the CPU pipeline a user writes: cvtColor(NV12 -> BGR), then OpenCV's
    // letterbox.
    std::vector<float> cpu_nv12(3 * pixels);
    opencv.run(nv12_to_bgr_opencv(nv12.view()), opt.width, opt.height, norm, cpu_nv12.data());
    const auto v5_f32 = [&](YuvMatrix m) {  // v5 into d_f32, back on the host
      letterbox_nv12_v5(d_nv12.view(), d_f32.data(), opt.width, opt.height, m, norm, stream);
      stream.synchronize();
      return course::to_host(d_f32);
    };
    const std::vector<float> v5 = v5_f32(YuvMatrix::bt601);
    const double nv12_diff = max_abs_diff(v5, cpu_nv12);
    std::printf(
        "   BT.601 vs cv::cvtColor(COLOR_YUV2BGR_NV12) + the OpenCV pipeline: max |difference|\n"
        "   %.3g  [%s]\n",
        nv12_diff, verdict(nv12_diff <= 1.0 / 255 + 1e-6));
    const std::vector<float> v5_709 = v5_f32(YuvMatrix::bt709);
    const bool same_709 = v5_709 == letterbox_nv12_reference(nv12.view(), opt.width, opt.height,
                                                             YuvMatrix::bt709, norm);
    std::printf("   BT.709 (OpenCV has no BT.709 NV12 conversion) vs the CPU reference: %s  [%s]\n",
                same_709 ? "identical" : "DIFFERENT", verdict(same_709));
    // FP16: the FP32 values rounded once to nearest even; checked against the CPU's rounding.
    course::DeviceBuffer<__half> d_f16(3 * pixels);
    letterbox_nv12_v5(d_nv12.view(), d_f16.data(), opt.width, opt.height, YuvMatrix::bt601, norm,
                      stream);
    stream.synchronize();
    const std::vector<__half> v5_f16 = course::to_host(d_f16);
    std::size_t f16_wrong = 0;
    for (std::size_t i = 0; i < v5.size(); ++i) {
      const __half want = __float2half_rn(v5[i]);  // cuda_fp16.h's host conversion
      f16_wrong += std::memcmp(&want, &v5_f16[i], sizeof want) != 0;
    }
    std::printf(
        "   FP16 output: %zu of %zu values differ from the FP32 output rounded to nearest "
        "even  [%s]\n",
        f16_wrong, v5.size(), verdict(f16_wrong == 0));
    // A batch of NV12 frames of different sizes, FP16, one launch: each frame against v5 alone.
    std::vector<HostNv12> batch_host;
    for (const cv::Size size : {cv::Size(src.cols, src.rows), cv::Size(1280, 720),
                                cv::Size(720, 1280), cv::Size(642, 480)}) {
      cv::Mat f;
      cv::resize(src, f, cv::Size(std::max(2, size.width & ~1), std::max(2, size.height & ~1)));
      batch_host.push_back(nv12_from_bgr(f));
    }
    std::vector<DeviceNv12> batch_dev;
    std::vector<Nv12View> batch_views;
    for (const HostNv12& h : batch_host) {
      batch_dev.emplace_back(h.width, h.height);
      batch_dev.back().upload(h.view(), stream);
    }
    for (const DeviceNv12& d : batch_dev) batch_views.push_back(d.view());
    course::DeviceBuffer<__half> d_batch16(batch_views.size() * 3 * pixels);
    letterbox_nv12_v6_batched(batch_views, d_batch16.data(), opt.width, opt.height,
                              YuvMatrix::bt601, norm, stream);
    stream.synchronize();
    const std::vector<__half> batch16 = course::to_host(d_batch16);
    bool nv12_batch_ok = true;
    std::printf("   v6 batched NV12 -> FP16, %zu frames (", batch_views.size());
    for (std::size_t i = 0; i < batch_views.size(); ++i) {
      std::printf("%s%dx%d", i ? ", " : "", batch_views[i].width, batch_views[i].height);
      letterbox_nv12_v5(batch_views[i], d_f16.data(), opt.width, opt.height, YuvMatrix::bt601, norm,
                        stream);
      stream.synchronize();
      const std::vector<__half> one = course::to_host(d_f16);
      nv12_batch_ok = nv12_batch_ok && std::memcmp(one.data(), batch16.data() + i * 3 * pixels,
                                                   one.size() * sizeof(__half)) == 0;
    }
    std::printf(") in one launch: %s  [%s]\n",
                nv12_batch_ok ? "each frame identical to v5" : "MISMATCH", verdict(nv12_batch_ok));
    // Time: NV12 against BGR for the same frame (GPU time, L2 flushed, medians of 51).
    const Times bgr_t = median_times_us(stream, runs, [&] {
      letterbox_v3_vec4(d_src.view(), d_f32.data(), opt.width, opt.height, norm, stream);
    });
    const Times nv12_t = median_times_us(stream, runs, [&] {
      letterbox_nv12_v5(d_nv12.view(), d_f32.data(), opt.width, opt.height, YuvMatrix::bt601, norm,
                        stream);
    });
    const Times nv12_f16_t = median_times_us(stream, runs, [&] {
      letterbox_nv12_v5(d_nv12.view(), d_f16.data(), opt.width, opt.height, YuvMatrix::bt601, norm,
                        stream);
    });
    const Times batch_t = median_times_us(stream, runs, [&] {
      letterbox_nv12_v6_batched(batch_views, d_batch16.data(), opt.width, opt.height,
                                YuvMatrix::bt601, norm, stream);
    });
    std::printf(
        "   GPU time, L2 flushed, medians of %d:  v3 BGR -> FP32 %.1f us;  v5 NV12 -> FP32 "
        "%.1f us\n   (%.2fx the BGR time);  v5 NV12 -> FP16 %.1f us;  v6 batch of %zu -> "
        "FP16 %.1f us\n\n",
        runs, bgr_t.gpu_us, nv12_t.gpu_us, nv12_t.gpu_us / bgr_t.gpu_us, nv12_f16_t.gpu_us,
        batch_views.size(), batch_t.gpu_us);
    course::add_headline("NV12 frame %.1f us GPU time (%.2fx BGR)", nv12_t.gpu_us,
                         nv12_t.gpu_us / bgr_t.gpu_us);
  } else {
    std::printf("8. NV12: the frame is smaller than 2x2; NV12 section skipped\n\n");
  }

  // ---- 9. The library a user would call instead: NPP. Its differences from OpenCV are facts
  // to know before swapping it in, not a check that could fail.
  if (npp_available()) {
    std::printf("9. %s: nppiSet (114) + nppiWarpAffine(NPPI_INTER_LINEAR), same matrix:\n",
                npp_build_note().c_str());
    letterbox_npp_u8(d_src.view(), d_u8.data(), opt.width, opt.height, stream);
    stream.synchronize();
    std::vector<std::uint8_t> npp_out = course::to_host(d_u8);
    const cv::Mat npp_img(opt.height, opt.width, CV_8UC3, npp_out.data());
    cv::Mat ne;
    cv::compare(npp_img.reshape(1), ocv.reshape(1), ne, cv::CMP_NE);
    std::printf(
        "   vs cv::warpAffine: max |difference| %d, %.2f%% of the values differ, mean "
        "|difference| %.3f\n",
        static_cast<int>(cv::norm(npp_img, ocv, cv::NORM_INF)),
        100.0 * cv::countNonZero(ne) / (3.0 * pixels),
        cv::norm(npp_img, ocv, cv::NORM_L1) / (3.0 * pixels));
    const Times npp_t = median_times_us(stream, runs, [&] {
      letterbox_npp_u8(d_src.view(), d_u8.data(), opt.width, opt.height, stream);
      hwc_u8_to_chw_f32(d_u8.data(), opt.width, opt.height, d_f32.data(), norm, stream);
    });
    const Times v3_t = median_times_us(stream, runs, [&] {
      letterbox_v3_vec4(d_src.view(), d_f32.data(), opt.width, opt.height, norm, stream);
    });
    std::printf(
        "   GPU time, L2 flushed: NPP + hwc_u8_to_chw_f32 (3 kernels) %.1f us, v3 %.1f us "
        "(%.2fx)\n\n",
        npp_t.gpu_us, v3_t.gpu_us, npp_t.gpu_us / v3_t.gpu_us);
  } else {
    std::printf("9. The NPP baseline: %s\n\n", npp_build_note().c_str());
  }

  if (failures != 0) {
    std::printf("FAILED: %d check(s) did not pass\n", failures);
    return 1;
  }
  std::printf("PASS\n");
  course::print_headline();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  CLI::App app{"Lesson 06: letterbox preprocessing on the GPU, checked against OpenCV."};
  app.add_option("--image", opt.image,
                 "letterbox this image (PNG, JPEG, BMP, PPM) instead of the generated\n"
                 "1920x1080 test pattern")
      ->type_name("FILE");
  const CLI::Validator size_check(
      [](std::string& text) {
        int w = 0, h = 0;
        return parse_size(text, &w, &h) ? std::string()
                                        : "expected WxH with W, H >= 1 (e.g. 640x384), got " + text;
      },
      "");
  app.add_option_function<std::string>(
         "--size", [&](const std::string& text) { parse_size(text, &opt.width, &opt.height); },
         "network input size (default 640x640)")
      ->type_name("WxH")
      ->check(size_check);
  app.add_option("--out", opt.out_dir,
                 "where to write the PNGs (default: the folder of this executable)")
      ->type_name("DIR");
  return course::lesson_main(app, argc, argv, [&] {
    if (opt.out_dir.empty()) {
      const std::string exe = course::self_executable();
      opt.out_dir = exe.substr(0, exe.find_last_of('/'));
    }
    return run(opt);
  });
}
