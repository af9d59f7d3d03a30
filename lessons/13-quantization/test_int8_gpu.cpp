// Lesson 13 tests: the INT8 tensor-core convolution (int8_conv_gpu.hpp) and the device side of
// the number formats.
//
// Oracle: conv_int8_reference (int8_conv.hpp), the CPU convolution with an exact int32 sum and a
// double epilogue. The GPU result must EQUAL it, element for element, over the whole output
// buffer (the channels outside the view keep their sentinel on both sides). The one documented
// exception (int8_conv_gpu.hpp): where SiLU is on, the device's exp(double) and the host's may
// differ in the last bit, which moves float(v) by one float ulp when v sits within a few double
// ulps of a float rounding boundary (about 2^-28 of the elements). Such an element is accepted
// only if the GPU's value is exactly what the reference gives from its float value moved by one
// ulp (checked from a float-output run of the reference), and such elements are counted and
// bounded (at most 2 per test case).
//
// CPU: every argument the GPU launcher refuses before touching CUDA (channels not a multiple of
// 16, misaligned pointers, zero or non-finite scales, a bad tile index), the automatic tile
// choice, the cuBLASLt wrapper's checks. GPU ([gpu]): the convolution on shapes of YOLOv8n's
// layers (1x1 and 3x3, stride 1 and 2, odd sizes, K tails, out_c tails, residuals, views inside
// wider buffers, batch 2) on every tile and all three output types; exact int32 sums with unit
// scales (-128 inputs and the largest reduction included); exact ties (which the certified float
// epilogue must hand to the double path); the kernel's requantisation and quantize.hpp's FP8
// conversions run on the device against the host's; the first-layer kernel that quantises float
// images itself (conv_int8_image_gpu), against the reference on the codes exercise 1's
// quantize_int8 gives on the host (NaN, infinities, near-ties and saturation among the pixels).
// The wgmma path ([wgmma]; CPU: its tiles, the
// tile rule, what a forced path refuses; GPU, compute capability 9.0 only: the same oracle on
// 1x1 layers, exact and fast, with K tails and a ring that wraps, every wgmma tile; and the same
// bytes and fallback count as the mma.sync path, whose epilogue code it shares).
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/cuda_check.hpp"
#include "common/memory.hpp"
#include "common/testing.hpp"
#include "int8_conv.hpp"
#include "int8_conv_gpu.hpp"
#include "quantize.hpp"

using namespace lesson13;
using course::testing::Contains;

namespace {

// The INT8 kernel needs compute capability 8.0 (mma.sync.m16n8k32 with .s8 operands, cp.async)
// and conv_int8_gpu refuses an older GPU: the kernel tests skip there, with a warning. (Exercise
// 3's test does not: on such a GPU the exercise cannot be done, and its test says why.)
bool int8_tensor_cores() {
  int dev = 0, major = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  if (major < 8) WARN("compute capability below 8.0: conv_int8_gpu cannot run here, skipped");
  return major >= 8;
}

// A convolution problem on views inside wider buffers, as lesson 12's concatenations make them.
struct Shape {
  const char* what;
  int batch, in_h, in_w, in_c, out_c, kernel, stride, pad;
  int out_h() const { return (in_h + 2 * pad - kernel) / stride + 1; }
  int out_w() const { return (in_w + 2 * pad - kernel) / stride + 1; }
};

// Layers of YOLOv8n (at a small input: the kernel does not care), plus edge cases.
const std::vector<Shape> kShapes = {
    {"model.1: 3x3 s2 16->32, odd image, batch 2", 2, 13, 17, 16, 32, 3, 2, 1},
    {"model.2.cv1: 1x1 32->32", 1, 12, 20, 32, 32, 1, 1, 0},
    {"model.2.m.0.cv2: 3x3 16->16 (+ shortcut), K = 144", 1, 9, 11, 16, 16, 3, 1, 1},
    {"model.2.cv2: 1x1 48->32 (a concatenation), K = 48", 1, 10, 10, 48, 32, 1, 1, 0},
    {"model.22.cv3.0.2: 1x1 64->6 (class logits), out_c tail", 1, 5, 7, 64, 6, 1, 1, 0},
    {"model.7: 3x3 s2 128->256, K = 1152", 1, 7, 9, 128, 256, 3, 2, 1},
    {"model.9.cv1: 1x1 256->128", 1, 5, 5, 256, 128, 1, 1, 0},
    {"3x3 256->72, K = 2304 (the largest), out_c tail", 1, 4, 6, 256, 72, 3, 1, 1},
    {"1x1 on a 1x1 image, 3x3 on it (only the centre tap)", 1, 1, 1, 32, 40, 3, 1, 1},
};

// Channels of the buffers before / after each view: x's offset keeps it 16-byte aligned (a
// multiple of 16 channels); y's and res' are odd or even per case, to take both store paths.
constexpr int kXBefore = 16, kXAfter = 16;
constexpr std::int8_t kSentinel8 = 99;
constexpr float kSentinelF = -12345.0f;

struct Problem {
  Shape s;
  int act = 0;
  bool residual = false;
  Int8ConvOutput y_type = Int8ConvOutput::int8;
  int y_before = 0, y_after = 0;  // channels around the output view (res uses the same)
  std::vector<std::int8_t> x_buf, w, res_buf;
  std::vector<float> bias, w_scale;
  float x_scale = 0, res_scale = 0, y_scale = 0;
  int x_stride = 0, y_stride = 0;
  int out_pixels() const { return s.batch * s.out_h() * s.out_w(); }
  std::size_t y_elements() const { return static_cast<std::size_t>(out_pixels()) * y_stride; }
};

std::size_t element_size(Int8ConvOutput t) {
  return t == Int8ConvOutput::int8 ? 1 : (t == Int8ConvOutput::f16 ? 2 : 4);
}

// Random layer: activations mostly small and positive (as after SiLU), some large, a few -128;
// weights per output channel of different magnitudes; scales as calibration would give them.
Problem make_problem(const Shape& s, int act, bool residual, Int8ConvOutput y_type, int y_before,
                     std::mt19937& rng) {
  Problem p;
  p.s = s;
  p.act = act;
  p.residual = residual;
  p.y_type = y_type;
  p.y_before = y_before;
  p.y_after = 3;
  p.x_stride = kXBefore + s.in_c + kXAfter;
  p.y_stride = p.y_before + s.out_c + p.y_after;
  std::uniform_int_distribution<int> small(-20, 60), any(-128, 127), pick(0, 99);
  const std::size_t in_pixels = static_cast<std::size_t>(s.batch) * s.in_h * s.in_w;
  p.x_buf.assign(in_pixels * p.x_stride, kSentinel8);
  for (std::size_t px = 0; px < in_pixels; ++px) {
    for (int c = 0; c < s.in_c; ++c) {
      const int r = pick(rng);
      p.x_buf[px * p.x_stride + kXBefore + c] =
          static_cast<std::int8_t>(r < 90 ? small(rng) : any(rng));
    }
  }
  const int K = s.kernel * s.kernel * s.in_c;
  p.w.resize(static_cast<std::size_t>(s.out_c) * K);
  for (std::int8_t& v : p.w) v = static_cast<std::int8_t>(std::max(-127, any(rng)));
  std::uniform_real_distribution<float> ub(-0.5f, 0.5f), us(0.5f, 2.0f);
  p.bias.resize(static_cast<std::size_t>(s.out_c));
  p.w_scale.resize(static_cast<std::size_t>(s.out_c));
  for (int k = 0; k < s.out_c; ++k) {
    p.bias[k] = ub(rng);
    p.w_scale[k] = us(rng) * 0.3f / 127.0f / static_cast<float>(1 + k % 4) / std::sqrt(K / 9.0f);
  }
  p.x_scale = 3.0f / 127.0f;
  if (residual) {
    p.res_scale = 2.5f / 127.0f;
    p.res_buf.assign(static_cast<std::size_t>(p.out_pixels()) * p.y_stride, kSentinel8);
    for (int px = 0; px < p.out_pixels(); ++px) {
      for (int c = 0; c < s.out_c; ++c) {
        p.res_buf[static_cast<std::size_t>(px) * p.y_stride + p.y_before + c] =
            static_cast<std::int8_t>(std::max(-127, any(rng)));
      }
    }
  }
  p.y_scale = 1.0f;  // set_y_scale below, from the float output
  return p;
}

Int8ConvArgs args_for(const Problem& p, const std::int8_t* x_buf, const std::int8_t* w,
                      const float* bias, const float* w_scale, const std::int8_t* res_buf,
                      void* y_buf, Int8ConvOutput y_type) {
  const Shape& s = p.s;
  Int8ConvArgs a{};
  a.x = x_buf + kXBefore;
  a.w = w;
  a.bias = bias;
  a.res = p.residual ? res_buf + p.y_before : nullptr;
  a.y = static_cast<char*>(y_buf) + p.y_before * element_size(y_type);
  a.x_stride = p.x_stride;
  a.res_stride = p.residual ? p.y_stride : 0;
  a.y_stride = p.y_stride;
  a.batch = s.batch;
  a.in_h = s.in_h;
  a.in_w = s.in_w;
  a.in_c = s.in_c;
  a.out_h = s.out_h();
  a.out_w = s.out_w();
  a.out_c = s.out_c;
  a.kernel = s.kernel;
  a.stride = s.stride;
  a.pad = s.pad;
  a.act = p.act;
  a.x_scale = p.x_scale;
  a.w_scale = w_scale;
  a.res_scale = p.res_scale;
  a.y_scale = p.y_scale;
  a.y_type = y_type;
  return a;
}

// The output buffer (sentinels around the view) as bytes, for either side.
std::vector<unsigned char> sentinel_buffer(const Problem& p, Int8ConvOutput t) {
  const std::size_t n = p.y_elements(), es = element_size(t);
  std::vector<unsigned char> b(n * es);
  for (std::size_t i = 0; i < n; ++i) {
    if (t == Int8ConvOutput::int8) {
      std::memcpy(b.data() + i, &kSentinel8, 1);
    } else if (t == Int8ConvOutput::f32) {
      std::memcpy(b.data() + 4 * i, &kSentinelF, 4);
    } else {
      const __half h = __float2half_rn(kSentinelF);
      std::memcpy(b.data() + 2 * i, &h, 2);
    }
  }
  return b;
}

std::vector<unsigned char> run_reference(const Problem& p, Int8ConvOutput t) {
  std::vector<unsigned char> y = sentinel_buffer(p, t);
  conv_int8_reference(args_for(p, p.x_buf.data(), p.w.data(), p.bias.data(), p.w_scale.data(),
                               p.res_buf.data(), y.data(), t));
  return y;
}

float read_f32(const std::vector<unsigned char>& b, std::size_t i) {
  float v;
  std::memcpy(&v, b.data() + 4 * i, 4);
  return v;
}
std::uint16_t read_f16_bits(const std::vector<unsigned char>& b, std::size_t i) {
  std::uint16_t v;
  std::memcpy(&v, b.data() + 2 * i, 2);
  return v;
}
std::uint16_t f16_bits(float v) {
  const __half h = __float2half_rn(v);
  std::uint16_t bits;
  std::memcpy(&bits, &h, 2);
  return bits;
}

// y_scale from the reference's float output: 0.8 of its largest magnitude maps to 127, so a few
// outputs saturate.
void set_y_scale(Problem& p) {
  const std::vector<unsigned char> y = run_reference(p, Int8ConvOutput::f32);
  float m = 0;
  for (int px = 0; px < p.out_pixels(); ++px) {
    for (int c = 0; c < p.s.out_c; ++c) {
      m = std::max(
          m, std::fabs(read_f32(y, static_cast<std::size_t>(px) * p.y_stride + p.y_before + c)));
    }
  }
  p.y_scale = int8_scale(std::max(0.8 * m, 1e-3));
}

// The problem's operands on the device.
struct DeviceProblem {
  course::DeviceBuffer<std::int8_t> x, w, res;
  course::DeviceBuffer<float> bias, w_scale;
  explicit DeviceProblem(const Problem& p)
      : x(p.x_buf.size()),
        w(p.w.size()),
        res(p.res_buf.size()),
        bias(p.bias.size()),
        w_scale(p.w_scale.size()) {
    CUDA_CHECK(cudaMemcpy(x.data(), p.x_buf.data(), x.bytes(), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(w.data(), p.w.data(), w.bytes(), cudaMemcpyHostToDevice));
    if (!p.res_buf.empty()) {
      CUDA_CHECK(cudaMemcpy(res.data(), p.res_buf.data(), res.bytes(), cudaMemcpyHostToDevice));
    }
    CUDA_CHECK(cudaMemcpy(bias.data(), p.bias.data(), bias.bytes(), cudaMemcpyHostToDevice));
    CUDA_CHECK(
        cudaMemcpy(w_scale.data(), p.w_scale.data(), w_scale.bytes(), cudaMemcpyHostToDevice));
  }
};

struct GpuRun {
  std::vector<unsigned char> y;
  unsigned long long fallbacks = 0;
};

// Runs launch(args, fallback counter) on an output buffer of sentinels and reads both back.
template <class Launch>
GpuRun run_with(const Problem& p, const DeviceProblem& d, Int8ConvOutput t, Launch launch) {
  const std::vector<unsigned char> init = sentinel_buffer(p, t);
  course::DeviceBuffer<unsigned char> y(init.size());
  course::DeviceBuffer<unsigned long long> counter(1);
  CUDA_CHECK(cudaMemcpy(y.data(), init.data(), init.size(), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemset(counter.data(), 0, sizeof(unsigned long long)));
  launch(args_for(p, d.x.data(), d.w.data(), d.bias.data(), d.w_scale.data(), d.res.data(),
                  y.data(), t),
         counter.data());
  CUDA_CHECK(cudaDeviceSynchronize());
  GpuRun r;
  r.y.resize(init.size());
  CUDA_CHECK(cudaMemcpy(r.y.data(), y.data(), init.size(), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(&r.fallbacks, counter.data(), sizeof r.fallbacks, cudaMemcpyDeviceToHost));
  return r;
}

GpuRun run_gpu(const Problem& p, const DeviceProblem& d, Int8ConvOutput t, int tile,
               Int8Epilogue epilogue = Int8Epilogue::exact,
               Int8ConvPath path = Int8ConvPath::automatic) {
  return run_with(p, d, t, [&](const Int8ConvArgs& a, unsigned long long* counter) {
    conv_int8_gpu(a, nullptr, tile, counter, epilogue, path);
  });
}

// Compares a GPU output buffer with the reference's, byte for byte, allowing only the
// documented exp exception (see the top of the file): returns the number of elements accepted
// under it; fails the test (REQUIRE) on any other difference.
int compare(const Problem& p, Int8ConvOutput t, const std::vector<unsigned char>& got,
            const std::vector<unsigned char>& want, const std::vector<unsigned char>& want_f32,
            const std::string& what) {
  REQUIRE(got.size() == want.size());
  if (got == want) return 0;
  int explained = 0;
  const std::size_t es = element_size(t);
  for (std::size_t i = 0; i < p.y_elements(); ++i) {
    if (std::memcmp(got.data() + i * es, want.data() + i * es, es) == 0) continue;
    const int c = static_cast<int>(i % p.y_stride) - p.y_before;
    const std::size_t px = i / p.y_stride;
    INFO(what << ": pixel " << px << " channel " << c << " differs from the reference");
    REQUIRE(c >= 0);  // outside the view: a sentinel was overwritten
    REQUIRE(c < p.s.out_c);
    REQUIRE(p.act == 1);  // without SiLU the double path has no exp: no difference allowed
    const float vf = read_f32(want_f32, i);
    const float up = std::nextafter(vf, std::numeric_limits<float>::infinity());
    const float down = std::nextafter(vf, -std::numeric_limits<float>::infinity());
    bool ok = false;
    if (t == Int8ConvOutput::int8) {
      const auto q = static_cast<std::int8_t>(got[i]);
      ok = q == quantize_int8(up, p.y_scale) || q == quantize_int8(down, p.y_scale);
      INFO("GPU " << int(q) << ", reference " << int(static_cast<std::int8_t>(want[i]))
                  << ", reference float " << vf);
      REQUIRE(ok);
    } else if (t == Int8ConvOutput::f32) {
      const float g = read_f32(got, i);
      INFO("GPU " << g << ", reference " << vf);
      REQUIRE((g == up || g == down));
    } else {
      const std::uint16_t g = read_f16_bits(got, i);
      INFO("GPU bits " << g << ", reference bits " << read_f16_bits(want, i));
      REQUIRE((g == f16_bits(up) || g == f16_bits(down)));
    }
    ++explained;
  }
  return explained;
}

// The fast epilogue's output against the reference's INT8 bytes: equal, except elements one code
// away whose reference quotient float(v_ref) / y_scale lies within 2^-10 of a rounding boundary
// k + 1/2 (the float path's error, __expf's included, is far below that on these layers; a wrong
// scale, bias or rounding mode moves codes everywhere). Returns how many elements differ; fails
// the test (REQUIRE) on any other difference, sentinels included.
int compare_fast(const Problem& p, const std::vector<unsigned char>& got,
                 const std::vector<unsigned char>& want, const std::vector<unsigned char>& want_f32,
                 const std::string& what) {
  REQUIRE(got.size() == want.size());
  int differ = 0;
  for (std::size_t i = 0; i < p.y_elements(); ++i) {
    if (got[i] == want[i]) continue;
    const int c = static_cast<int>(i % p.y_stride) - p.y_before;
    INFO(what << ": pixel " << i / p.y_stride << " channel " << c << ", fast epilogue");
    REQUIRE(c >= 0);
    REQUIRE(c < p.s.out_c);
    const int q = static_cast<std::int8_t>(got[i]), q_ref = static_cast<std::int8_t>(want[i]);
    const double t = static_cast<double>(read_f32(want_f32, i)) / p.y_scale;
    const double boundary = std::floor(t) + 0.5;
    INFO("GPU " << q << ", reference " << q_ref << ", reference quotient " << t);
    REQUIRE(std::abs(q - q_ref) == 1);
    REQUIRE(std::fabs(t - boundary) <= 0x1p-10);
    ++differ;
  }
  return differ;
}

const char* type_name(Int8ConvOutput t) {
  return t == Int8ConvOutput::int8 ? "int8" : (t == Int8ConvOutput::f32 ? "f32" : "f16");
}

// Unit scales, zero bias, operands over the whole INT8 range (-128 included): the float output
// is the int32 sum itself, which must be exact.
Problem unit_scale_problem(const Shape& s, std::mt19937& rng) {
  std::uniform_int_distribution<int> any(-128, 127);
  Problem p = make_problem(s, 0, false, Int8ConvOutput::f32, 0, rng);
  for (int px = 0; px < s.batch * s.in_h * s.in_w; ++px) {
    for (int c = 0; c < s.in_c; ++c) {
      p.x_buf[static_cast<std::size_t>(px) * p.x_stride + kXBefore + c] =
          static_cast<std::int8_t>(any(rng));
    }
  }
  for (std::int8_t& v : p.w) v = static_cast<std::int8_t>(any(rng));
  p.x_scale = 1.0f;
  std::fill(p.w_scale.begin(), p.w_scale.end(), 1.0f);
  std::fill(p.bias.begin(), p.bias.end(), 0.0f);
  return p;
}

// The extreme sums of a layer of K = 2304 (the largest of YOLOv8n) with unit scales: every input
// 127, output channel 0's weights 127 (2304 * 16129 = 37,161,216 > 2^24, beyond float's exact
// integers) and channel 1's -128 (every product -16256). The shape's output pixel 0 must see all
// of its K inputs (no padding tap).
Problem extreme_sum_problem(const Shape& s, std::mt19937& rng) {
  Problem p = make_problem(s, 0, false, Int8ConvOutput::f32, 0, rng);
  const int K = s.kernel * s.kernel * s.in_c;
  REQUIRE(K == 2304);
  for (int px = 0; px < s.batch * s.in_h * s.in_w; ++px) {
    for (int c = 0; c < s.in_c; ++c) p.x_buf[px * p.x_stride + kXBefore + c] = 127;
  }
  std::fill(p.w.begin(), p.w.end(), std::int8_t{127});
  for (int i = 0; i < K; ++i) p.w[K + i] = -128;
  p.x_scale = 1.0f;
  std::fill(p.w_scale.begin(), p.w_scale.end(), 1.0f);
  std::fill(p.bias.begin(), p.bias.end(), 0.0f);
  return p;
}

// The layer cases of `shapes`: each shape three times (SiLU; no activation; SiLU and a
// residual), the output view at channel `even_before` and at channel 3 in turn (the paired or
// vector stores and the scalar ones), y_scale from the reference's float output. Calls
// f(p, d, want_f32, what): the problem, its device copy, the reference's float output and a
// description of the case.
template <class F>
void for_each_case(const std::vector<Shape>& shapes, int even_before, std::mt19937& rng, F&& f) {
  int case_index = 0;
  for (const Shape& s : shapes) {
    for (int variant = 0; variant < 3; ++variant) {
      const int act = variant == 1 ? 0 : 1;
      const bool residual = variant == 2;
      const int y_before = case_index++ % 2 == 0 ? even_before : 3;
      Problem p = make_problem(s, act, residual, Int8ConvOutput::int8, y_before, rng);
      set_y_scale(p);
      const DeviceProblem d(p);
      std::ostringstream what;
      what << s.what << ", act " << act << ", residual " << residual << ", y at channel "
           << y_before;
      f(p, d, run_reference(p, Int8ConvOutput::f32), what.str());
    }
  }
}

// Runs extreme_sum_problem's layer through `run` (GPU run of a problem) and checks its sums.
template <class Run>
void check_extreme_sums(const Problem& p, Run run) {
  const DeviceProblem d(p);
  const GpuRun r = run(p, d);
  CHECK(r.y == run_reference(p, Int8ConvOutput::f32));
  CHECK(read_f32(r.y, 0) == static_cast<float>(2304LL * 16129));
  CHECK(read_f32(r.y, 1) == static_cast<float>(-2304LL * 16256));
}

// A valid 3x3 stride-1 pad-1 layer (4x4 image, 32 -> 8 channels, SiLU, residual, INT8 output) on
// host addresses that look right (16-byte aligned): every check the launcher makes before asking
// CUDA anything passes, so a test can break one field and see the refusal without a GPU.
Int8ConvArgs host_args() {
  alignas(16) static std::int8_t x[4096], w[4096], res[256], y[256];
  alignas(16) static float bias[64], w_scale[64];
  Int8ConvArgs good{};
  good.x = x;
  good.w = w;
  good.bias = bias;
  good.res = res;
  good.y = y;
  good.x_stride = 32;
  good.res_stride = 8;
  good.y_stride = 8;
  good.batch = 1;
  good.in_h = good.in_w = 4;
  good.in_c = 32;
  good.out_h = good.out_w = 4;
  good.out_c = 8;
  good.kernel = 3;
  good.stride = 1;
  good.pad = 1;
  good.act = 1;
  good.x_scale = 0.02f;
  good.w_scale = w_scale;  // not read on the host
  good.res_scale = 0.01f;
  good.y_scale = 0.05f;
  good.y_type = Int8ConvOutput::int8;
  return good;
}

}  // namespace

// ------------------------------------------------------------------------------------ CPU

TEST_CASE("conv_int8_gpu: refuses what the tensor-core path cannot run, before any CUDA call",
          "[int8gpu]") {
  // Host addresses that look right (16-byte aligned): every check below fails before the
  // launcher asks CUDA anything, so this runs without a GPU.
  const Int8ConvArgs good = host_args();
  CHECK_NOTHROW(check_int8_conv_gpu_args(good));

  auto bad = [&](auto edit, const char* message) {
    Int8ConvArgs a = good;
    edit(a);
    INFO(message);
    CHECK_THROWS_WITH(check_int8_conv_gpu_args(a), Contains(message));
    CHECK_THROWS_AS(conv_int8_gpu(a, nullptr), std::invalid_argument);
  };
  bad([](Int8ConvArgs& a) { a.in_c = a.x_stride = 24; }, "in_c = 24 is not a multiple of 16");
  bad([](Int8ConvArgs& a) { a.in_c = a.x_stride = 3; }, "in_c = 3 is not a multiple of 16");
  bad([](Int8ConvArgs& a) { a.x_stride = 40; }, "x_stride = 40 is not a multiple of 16");
  bad([](Int8ConvArgs& a) { a.x += 8; }, "x is not 16-byte aligned");
  bad([](Int8ConvArgs& a) { a.w += 4; }, "w is not 16-byte aligned");
  bad([](Int8ConvArgs& a) { a.x_scale = 0.0f; }, "x_scale must be a positive normal float");
  bad([](Int8ConvArgs& a) { a.y_scale = 0.0f; }, "y_scale must be a positive normal float");
  bad([](Int8ConvArgs& a) { a.y_scale = std::numeric_limits<float>::quiet_NaN(); }, "y_scale");
  bad([](Int8ConvArgs& a) { a.res_scale = -0.01f; }, "res_scale");
  bad([](Int8ConvArgs& a) { a.w_scale = nullptr; }, "must not be null");
  bad([](Int8ConvArgs& a) { a.out_h = 3; }, "is not what a 3x3 stride 1 pad 1");
  bad([](Int8ConvArgs& a) { a.y_stride = 7; }, "stride is smaller");
  bad([](Int8ConvArgs& a) { a.act = 3; }, "act must be");
  bad([](Int8ConvArgs& a) { a.y_type = static_cast<Int8ConvOutput>(7); }, "unknown output type");
  bad(
      [](Int8ConvArgs& a) {
        a.kernel = 65;
        a.pad = 32;
        a.in_c = a.x_stride = 32;
      },
      "would overflow the int32 accumulator");
  // The messages name the GPU launcher, not the reference.
  Int8ConvArgs odd = good;
  odd.in_c = odd.x_stride = 24;
  CHECK_THROWS_WITH(conv_int8_gpu(odd, nullptr), Contains("conv_int8_gpu: "));
  // Float output needs no y_scale; misaligned y and res are fine (the scalar store path).
  Int8ConvArgs f = good;
  f.y_type = Int8ConvOutput::f32;
  f.y_scale = 0.0f;
  f.y = static_cast<std::int8_t*>(f.y) + 1;
  f.res += 3;
  CHECK_NOTHROW(check_int8_conv_gpu_args(f));
  // A tile index out of range.
  CHECK_THROWS_WITH(conv_int8_gpu(good, nullptr, 4), Contains("tile 4"));
  CHECK_THROWS_WITH(conv_int8_gpu(good, nullptr, -2), Contains("tile -2"));
}

TEST_CASE("int8_conv_auto_tile: a full GPU with the least waste", "[int8gpu]") {
  const std::vector<Int8ConvTile>& tiles = int8_conv_tiles();
  REQUIRE(tiles.size() == 4);
  for (const Int8ConvTile& t : tiles) {
    // The larger of the ring (3 stages of tile_m + tile_n rows of 80 bytes) and the epilogue's
    // int32 tile (tile_m rows of tile_n + 8 accumulators), which reuses the ring's memory, then
    // 3 floats per channel.
    CHECK(t.smem_bytes == std::max(3 * (t.tile_m + t.tile_n) * 80, t.tile_m * (t.tile_n + 8) * 4) +
                              3 * t.tile_n * 4);
    CHECK(t.threads == 32 * t.warps_m * t.warps_n);
    CHECK(t.tile_m % (16 * t.warps_m) == 0);  // whole m16 fragments per warp
    CHECK(t.tile_n % (16 * t.warps_n) == 0);  // pairs of n8 fragments per warp
    CHECK(std::string(t.name) == std::to_string(t.tile_m) + "x" + std::to_string(t.tile_n));
  }
  Int8ConvArgs a{};
  a.batch = 1;
  a.out_h = a.out_w = 160;  // 25600 pixels
  a.out_c = 128;
  CHECK(int8_conv_auto_tile(a, 132) == 0);  // 128x128: 200 blocks
  a.out_c = 64;                             // 128x128 would waste half its channels
  CHECK(std::string(tiles[int8_conv_auto_tile(a, 132)].name) == "128x64");
  a.out_c = 16;  // only the 32-channel tile wastes less than half
  CHECK(std::string(tiles[int8_conv_auto_tile(a, 132)].name) == "64x32");
  a.out_h = a.out_w = 20;  // 400 pixels, 256 channels: 4 x 2 = 8 blocks of 128x128
  a.out_c = 256;
  CHECK(std::string(tiles[int8_conv_auto_tile(a, 132)].name) == "64x32");  // 7 x 8 = 56 blocks
  CHECK(std::string(tiles[int8_conv_auto_tile(a, 8)].name) == "128x128");
  CHECK_THROWS_AS(int8_conv_auto_tile(a, 0), std::invalid_argument);
}

// ------------------------------------------------------------------------------------ GPU

TEST_CASE("conv_int8_gpu equals conv_int8_reference on YOLOv8n's layer shapes, every tile",
          "[gpu][int8gpu]") {
  if (!int8_tensor_cores()) return;
  std::mt19937 rng(1301);
  const std::vector<Int8ConvTile>& tiles = int8_conv_tiles();
  int explained = 0;
  unsigned long long fallbacks = 0, int8_elements = 0;
  // Every output type on every shape and tile.
  for_each_case(
      kShapes, 2, rng,
      [&](const Problem& p, const DeviceProblem& d, const std::vector<unsigned char>& want_f32,
          const std::string& case_what) {
        for (Int8ConvOutput t : {Int8ConvOutput::int8, Int8ConvOutput::f32, Int8ConvOutput::f16}) {
          const std::vector<unsigned char> want = run_reference(p, t);
          for (int tile = 0; tile < static_cast<int>(tiles.size()); ++tile) {
            const std::string what =
                case_what + ", " + type_name(t) + " output, tile " + tiles[tile].name;
            INFO(what);
            const GpuRun r = run_gpu(p, d, t, tile);
            explained += compare(p, t, r.y, want, want_f32, what);
            if (t == Int8ConvOutput::int8) {
              fallbacks += r.fallbacks;
              int8_elements += static_cast<unsigned long long>(p.out_pixels()) * p.s.out_c;
            } else {
              CHECK(r.fallbacks == 0);  // float outputs take the double path, not the fallback
            }
          }
        }
        // The automatic tile too.
        const GpuRun r = run_gpu(p, d, Int8ConvOutput::int8, -1);
        explained += compare(p, Int8ConvOutput::int8, r.y, run_reference(p, Int8ConvOutput::int8),
                             want_f32, case_what + ", automatic tile");
      });
  INFO(explained << " elements differ by the documented exp last-bit effect; " << fallbacks
                 << " of " << int8_elements << " INT8 outputs took the double fallback");
  CHECK(explained <= 2);
  // The certified float epilogue decides almost every element itself (the bound is not vacuous).
  CHECK(fallbacks * 100 < int8_elements);
}

TEST_CASE("conv_int8_gpu on small shapes, every tile and output type (the sanitizers' run)",
          "[gpu][int8gpu][small]") {
  if (!int8_tensor_cores()) return;
  // Few launches, every code path: K tails (144, 48), M and out_c tails, stride 2, batch 2,
  // residual, SiLU on and off, odd and even output offsets (scalar and paired stores).
  const std::vector<Shape> small = {
      {"3x3 16->16 + residual, 5x7", 1, 5, 7, 16, 16, 3, 1, 1},
      {"1x1 48->40, 3x5", 1, 3, 5, 48, 40, 1, 1, 0},
      {"3x3 s2 32->24, 6x5, batch 2", 2, 6, 5, 32, 24, 3, 2, 1},
  };
  std::mt19937 rng(1306);
  int explained = 0, index = 0;
  for (const Shape& s : small) {
    const int act = index % 2 == 0 ? 1 : 0, y_before = 2 + index % 2;
    const bool residual = index == 0;
    ++index;
    Problem p = make_problem(s, act, residual, Int8ConvOutput::int8, y_before, rng);
    set_y_scale(p);
    const DeviceProblem d(p);
    const std::vector<unsigned char> want_f32 = run_reference(p, Int8ConvOutput::f32);
    for (Int8ConvOutput t : {Int8ConvOutput::int8, Int8ConvOutput::f32, Int8ConvOutput::f16}) {
      const std::vector<unsigned char> want = run_reference(p, t);
      for (int tile = 0; tile < static_cast<int>(int8_conv_tiles().size()); ++tile) {
        if (t != Int8ConvOutput::int8 && tile != 3) continue;  // float outputs: one tile
        const std::string what =
            std::string(s.what) + ", " + type_name(t) + ", tile " + int8_conv_tiles()[tile].name;
        INFO(what);
        explained += compare(p, t, run_gpu(p, d, t, tile).y, want, want_f32, what);
        if (t == Int8ConvOutput::int8) {
          compare_fast(p, run_gpu(p, d, t, tile, Int8Epilogue::fast).y, want, want_f32, what);
        }
      }
    }
  }
  CHECK(explained <= 2);
}

TEST_CASE("conv_int8_gpu, fast epilogue: one code off at most, and only at a rounding boundary",
          "[gpu][int8gpu]") {
  if (!int8_tensor_cores()) return;
  std::mt19937 rng(1307);
  const std::vector<Int8ConvTile>& tiles = int8_conv_tiles();
  unsigned long long differ = 0, elements = 0;
  for_each_case(kShapes, 4, rng,
                [&](const Problem& p, const DeviceProblem& d,
                    const std::vector<unsigned char>& want_f32, const std::string& case_what) {
                  const std::vector<unsigned char> want = run_reference(p, Int8ConvOutput::int8);
                  for (int tile = 0; tile < static_cast<int>(tiles.size()); ++tile) {
                    const std::string what = case_what + ", tile " + tiles[tile].name;
                    INFO(what);
                    const GpuRun r = run_gpu(p, d, Int8ConvOutput::int8, tile, Int8Epilogue::fast);
                    CHECK(r.fallbacks == 0);  // the fast epilogue counts nothing
                    differ += compare_fast(p, r.y, want, want_f32, what);
                    elements += static_cast<unsigned long long>(p.out_pixels()) * p.s.out_c;
                  }
                });
  INFO(differ << " of " << elements << " outputs one code away from the reference");
  CHECK(differ * 1000 < elements);  // rare: the boundary band is narrow
}

TEST_CASE("conv_int8_gpu: exact int32 sums with unit scales, -128 included, K up to 2304",
          "[gpu][int8gpu]") {
  if (!int8_tensor_cores()) return;
  std::mt19937 rng(1302);
  for (const Shape& s : kShapes) {
    const Problem p = unit_scale_problem(s, rng);
    const DeviceProblem d(p);
    const std::vector<unsigned char> want = run_reference(p, Int8ConvOutput::f32);
    for (int tile = 0; tile < static_cast<int>(int8_conv_tiles().size()); ++tile) {
      INFO(s.what << ", tile " << int8_conv_tiles()[tile].name);
      CHECK(run_gpu(p, d, Int8ConvOutput::f32, tile).y == want);
    }
  }
  check_extreme_sums(extreme_sum_problem({"3x3 256->32 saturated", 1, 3, 3, 256, 32, 3, 1, 0}, rng),
                     [](const Problem& p, const DeviceProblem& d) {
                       return run_gpu(p, d, Int8ConvOutput::f32, -1);
                     });
}

TEST_CASE("conv_int8_gpu: exact ties go to the double path and round half to even",
          "[gpu][int8gpu][small]") {
  if (!int8_tensor_cores()) return;
  // Power-of-two scales: v = acc / 128 exactly, t = v / y_scale = acc / 2: every odd sum is an
  // exact tie k + 1/2, which the float epilogue cannot certify and must hand over.
  std::mt19937 rng(1303);
  std::uniform_int_distribution<int> tiny(-3, 3);
  const Shape s{"3x3 16->32 ties", 1, 9, 9, 16, 32, 3, 1, 1};
  Problem p = make_problem(s, 0, false, Int8ConvOutput::int8, 2, rng);
  for (std::int8_t& v : p.x_buf) {
    if (v != kSentinel8) v = static_cast<std::int8_t>(tiny(rng));
  }
  for (std::int8_t& v : p.w) v = static_cast<std::int8_t>(tiny(rng));
  p.x_scale = 1.0f / 16;
  std::fill(p.w_scale.begin(), p.w_scale.end(), 1.0f / 8);
  std::fill(p.bias.begin(), p.bias.end(), 0.0f);
  p.y_scale = 1.0f / 64;
  const DeviceProblem d(p);
  const std::vector<unsigned char> want = run_reference(p, Int8ConvOutput::int8);
  const std::vector<unsigned char> want_f32 = run_reference(p, Int8ConvOutput::f32);
  // The ties among the unsaturated outputs, counted from the reference's float values.
  unsigned long long ties = 0;
  for (int px = 0; px < p.out_pixels(); ++px) {
    for (int c = 0; c < s.out_c; ++c) {
      const float t = read_f32(want_f32, static_cast<std::size_t>(px) * p.y_stride + 2 + c) * 64;
      if (std::fabs(t) < 127 && t - std::floor(t) == 0.5f) ++ties;
    }
  }
  REQUIRE(ties > 100);
  for (int tile = 0; tile < static_cast<int>(int8_conv_tiles().size()); ++tile) {
    INFO("tile " << int8_conv_tiles()[tile].name << ", " << ties << " ties");
    const GpuRun r = run_gpu(p, d, Int8ConvOutput::int8, tile);
    CHECK(r.y == want);
    // An epilogue with a float path must hand every tie to the double path, and count it (the
    // lesson's does). One that computes everything in double (a correct answer to exercise 3)
    // counts nothing.
    if (r.fallbacks > 0) CHECK(r.fallbacks >= ties);
  }
}

namespace {

// Exercise 3's oracle, independent of exercise 1 (the reference's INT8 output goes through
// quantize_int8, so it would agree with a stub when exercise 1 is a stub too): the INT8 code of
// the reference's float value vf, q = saturate(round_half_even(vf / y_scale)) into [-127, 127],
// the quotient a float division, the rounding written out in doubles (exact for |t| < 127).
int ex3_code(float vf, float y_scale) {
  const float t = vf / y_scale;
  if (std::isnan(t)) return 0;
  if (t >= 127.0f) return 127;
  if (t <= -127.0f) return -127;
  double k = std::floor(static_cast<double>(t));
  const double rest = static_cast<double>(t) - k;
  if (rest > 0.5 || (rest == 0.5 && std::fmod(k, 2.0) != 0.0)) k += 1.0;
  return static_cast<int>(k);
}

struct Ex3Counts {
  long long elements = 0, ties = 0, saturated_up = 0, saturated_down = 0;
  int explained = 0;
};

// Runs the INT8 output of problem p on every tile (and the automatic one) and compares every
// element of the output buffer with ex3_code of the reference's float output; outside the view
// the sentinel must stay. With SiLU, one float ulp of difference in vf is allowed (the exp last-bit
// effect, int8_conv_gpu.hpp) and counted.
void ex3_check(const Problem& p, const std::string& what, Ex3Counts& counts) {
  const DeviceProblem d(p);
  const std::vector<unsigned char> want_f32 = run_reference(p, Int8ConvOutput::f32);
  std::vector<int> want(p.y_elements(), kSentinel8);
  for (int px = 0; px < p.out_pixels(); ++px) {
    for (int c = 0; c < p.s.out_c; ++c) {
      const std::size_t i = static_cast<std::size_t>(px) * p.y_stride + p.y_before + c;
      const float vf = read_f32(want_f32, i);
      want[i] = ex3_code(vf, p.y_scale);
      const float t = vf / p.y_scale;
      ++counts.elements;
      if (std::fabs(t) < 127.0f && t - std::floor(t) == 0.5f) ++counts.ties;
      if (t >= 127.0f) ++counts.saturated_up;
      if (t <= -127.0f) ++counts.saturated_down;
    }
  }
  for (int tile = -1; tile < static_cast<int>(int8_conv_tiles().size()); ++tile) {
    const GpuRun r = run_gpu(p, d, Int8ConvOutput::int8, tile);
    const std::string name = tile < 0 ? "automatic" : int8_conv_tiles()[tile].name;
    for (std::size_t i = 0; i < want.size(); ++i) {
      const int got = static_cast<std::int8_t>(r.y[i]);
      if (got == want[i]) continue;
      const int c = static_cast<int>(i % p.y_stride) - p.y_before;
      INFO(what << ", tile " << name << ": pixel " << i / p.y_stride << " channel " << c << ": GPU "
                << got << ", expected " << want[i]);
      REQUIRE(c >= 0);  // outside the view: a sentinel was overwritten
      REQUIRE(c < p.s.out_c);
      REQUIRE(p.act == 1);  // only SiLU's exp may differ in the last bit
      const float vf = read_f32(want_f32, i);
      const float up = std::nextafter(vf, std::numeric_limits<float>::infinity());
      const float down = std::nextafter(vf, -std::numeric_limits<float>::infinity());
      REQUIRE((got == ex3_code(up, p.y_scale) || got == ex3_code(down, p.y_scale)));
      ++counts.explained;
    }
  }
}

}  // namespace

TEST_CASE("exercise 3: the INT8 epilogue equals conv_int8_reference where rounding decides",
          "[gpu][ex3][int8gpu][small]") {
  Ex3Counts counts;
  std::mt19937 rng(1313);
  // Exact ties and saturation of both signs: power-of-two scales make v = acc / 128 exactly, so
  // with y_scale 1/64 every odd sum is a tie k + 1/2, and with 1/1024 most sums saturate.
  {
    std::uniform_int_distribution<int> tiny(-3, 3);
    const Shape s{"3x3 16->32, power-of-two scales", 1, 9, 9, 16, 32, 3, 1, 1};
    Problem p = make_problem(s, 0, false, Int8ConvOutput::int8, 2, rng);
    for (std::int8_t& v : p.x_buf) {
      if (v != kSentinel8) v = static_cast<std::int8_t>(tiny(rng));
    }
    for (std::int8_t& v : p.w) v = static_cast<std::int8_t>(tiny(rng));
    p.x_scale = 1.0f / 16;
    std::fill(p.w_scale.begin(), p.w_scale.end(), 1.0f / 8);
    std::fill(p.bias.begin(), p.bias.end(), 0.0f);
    p.y_scale = 1.0f / 64;
    ex3_check(p, "ties", counts);
    const long long ties = counts.ties;
    p.y_scale = 1.0f / 1024;
    ex3_check(p, "saturation", counts);
    CHECK(ties > 100);
  }
  // Trained-like layers: SiLU with a residual at an odd channel offset (scalar stores) and a
  // y_scale that saturates a tenth or so of the outputs; SiLU alone at an even offset (pairs).
  {
    const Shape s{"3x3 s2 32->24, 6x5, batch 2, SiLU + residual", 2, 6, 5, 32, 24, 3, 2, 1};
    Problem p = make_problem(s, 1, true, Int8ConvOutput::int8, 3, rng);
    set_y_scale(p);
    p.y_scale *= 0.5f;
    ex3_check(p, s.what, counts);
  }
  {
    const Shape s{"1x1 48->40, 7x9, SiLU", 1, 7, 9, 48, 40, 1, 1, 0};
    Problem p = make_problem(s, 1, false, Int8ConvOutput::int8, 2, rng);
    set_y_scale(p);
    ex3_check(p, s.what, counts);
  }
  INFO(counts.elements << " elements: " << counts.ties << " ties, " << counts.saturated_up
                       << " saturated at +127, " << counts.saturated_down << " at -127; "
                       << counts.explained << " differ by the exp last-bit effect");
  // The cases exercise what they claim to, and the exp effect stays rare.
  CHECK(counts.saturated_up > 50);
  CHECK(counts.saturated_down > 50);
  CHECK(counts.explained <= 2);
}

TEST_CASE("conv_int8_gpu: batch 0 launches nothing; memory the GPU cannot read is refused",
          "[gpu][int8gpu][small]") {
  if (!int8_tensor_cores()) return;
  std::mt19937 rng(1304);
  Problem p = make_problem(kShapes[1], 1, true, Int8ConvOutput::int8, 2, rng);
  const DeviceProblem d(p);
  course::DeviceBuffer<std::int8_t> y(p.y_elements());
  Int8ConvArgs a = args_for(p, d.x.data(), d.w.data(), d.bias.data(), d.w_scale.data(),
                            d.res.data(), y.data(), Int8ConvOutput::int8);
  a.batch = 0;
  CHECK_NOTHROW(conv_int8_gpu(a, nullptr));
  a.batch = 1;
  std::vector<std::int8_t> host_y(p.y_elements());  // pageable host memory
  a.y = host_y.data() + 2;
  CHECK_THROWS_WITH(conv_int8_gpu(a, nullptr), Contains("y is not memory the GPU can access"));
  a.y = y.data() + 2;
  alignas(16) static std::int8_t host_x[1 << 16];
  a.x = host_x + kXBefore;
  CHECK_THROWS_WITH(conv_int8_gpu(a, nullptr), Contains("x is not memory the GPU can access"));
}

TEST_CASE("the kernel's requantisation equals exercise 1's quantize_int8",
          "[gpu][int8gpu][small]") {
  std::vector<float> x;
  for (int m = -2100; m <= 2100; ++m) x.push_back(m / 8.0f);  // every multiple of 1/8: ties
  const float inf = std::numeric_limits<float>::infinity();
  for (float v :
       {0.0f, -0.0f, 126.5f, -126.5f, 127.0f, 127.5f, -127.5f, -128.0f, 1e30f, -1e30f, inf, -inf,
        std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::denorm_min(),
        std::numeric_limits<float>::max(), 0.49999997f, 0.50000006f, 2.4999998f, 2.5000002f})
    x.push_back(v);
  std::mt19937 rng(1305);
  std::uniform_real_distribution<float> u(-300.0f, 300.0f);
  for (int i = 0; i < 20000; ++i) x.push_back(u(rng));
  course::DeviceBuffer<float> dx(x.size());
  course::DeviceBuffer<std::int8_t> dq(x.size());
  CUDA_CHECK(cudaMemcpy(dx.data(), x.data(), dx.bytes(), cudaMemcpyHostToDevice));
  for (float scale : {1.0f, 0.5f, 0.1f, 3.0f / 127.0f, 1.0f / 3.0f, 7.25f, 1e-30f}) {
    quantize_int8_gpu(dx.data(), static_cast<int>(x.size()), scale, dq.data(), nullptr);
    std::vector<std::int8_t> q(x.size());
    CUDA_CHECK(cudaMemcpy(q.data(), dq.data(), dq.bytes(), cudaMemcpyDeviceToHost));
    for (std::size_t i = 0; i < x.size(); ++i) {
      INFO("x = " << x[i] << ", scale = " << scale);
      REQUIRE(int(q[i]) == int(quantize_int8(x[i], scale)));
    }
  }
  CHECK_THROWS_AS(quantize_int8_gpu(nullptr, 1, 1.0f, dq.data(), nullptr), std::invalid_argument);
}

TEST_CASE("quantize.hpp's FP8 conversions give the same bits on the GPU as on the host",
          "[gpu][int8gpu][small]") {
  // All 256 codes to float, and floats around every rounding boundary to codes.
  std::vector<std::uint8_t> codes(256);
  for (int c = 0; c < 256; ++c) codes[c] = static_cast<std::uint8_t>(c);
  std::vector<float> x;
  for (int c = 0; c < 256; ++c) {
    const float v = fp8_e4m3_to_float(static_cast<std::uint8_t>(c));
    if (std::isnan(v)) continue;
    x.push_back(v);
    float next = v;
    for (int k = 0; k < 3; ++k) {  // one, two, three floats either side
      next = std::nextafter(next, std::numeric_limits<float>::infinity());
      x.push_back(next);
      x.push_back(-next);
    }
  }
  for (int c = 0; c + 1 < 128; ++c) {  // midpoints between neighbours (ties to even)
    const float a = fp8_e4m3_to_float(static_cast<std::uint8_t>(c));
    const float b = fp8_e4m3_to_float(static_cast<std::uint8_t>(c + 1));
    if (std::isnan(a) || std::isnan(b)) continue;
    x.push_back((a + b) / 2);
    x.push_back(-(a + b) / 2);
  }
  for (float v : {464.0f, 480.0f, 1e6f, std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                  0.0f, -0.0f, std::ldexp(1.0f, -10), std::ldexp(1.0f, -11)})
    x.push_back(v);
  course::DeviceBuffer<std::uint8_t> dcodes(256), dout_codes(x.size());
  course::DeviceBuffer<float> dvals(256), dx(x.size());
  CUDA_CHECK(cudaMemcpy(dcodes.data(), codes.data(), 256, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(dx.data(), x.data(), dx.bytes(), cudaMemcpyHostToDevice));
  fp8_e4m3_to_float_gpu(dcodes.data(), 256, dvals.data(), nullptr);
  fp8_e4m3_from_float_gpu(dx.data(), static_cast<int>(x.size()), dout_codes.data(), nullptr);
  std::vector<float> vals(256);
  std::vector<std::uint8_t> out_codes(x.size());
  CUDA_CHECK(cudaMemcpy(vals.data(), dvals.data(), dvals.bytes(), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(out_codes.data(), dout_codes.data(), x.size(), cudaMemcpyDeviceToHost));
  for (int c = 0; c < 256; ++c) {
    const float want = fp8_e4m3_to_float(static_cast<std::uint8_t>(c));
    INFO("code " << c);
    if (std::isnan(want)) {
      CHECK(std::isnan(vals[c]));
    } else {
      std::uint32_t a, b;
      std::memcpy(&a, &vals[c], 4);
      std::memcpy(&b, &want, 4);
      CHECK(a == b);  // signed zeros too
    }
  }
  for (std::size_t i = 0; i < x.size(); ++i) {
    INFO("x = " << x[i]);
    REQUIRE(int(out_codes[i]) == int(fp8_e4m3_from_float(x[i])));
  }
}

// ------------------------------------------------------------- the first layer, input fused

namespace {

// The first layer's problem: float NCHW images, and in the Problem's x view their codes
// quantize_int8(v, x_scale) computed on the host (exercise 1), so that conv_int8_reference on
// that view is the oracle of conv_int8_image_gpu, which quantises on the device.
struct ImageProblem {
  Problem p;
  std::vector<float> images;
};

// Images in [0, 1] as the network's input (x_scale 1/127: 1.0 -> 127), with values that test the
// fused quantisation: near-ties (k + 1/2) x_scale, values beyond 1 (saturation), negatives, and a
// few NaN and infinities. y_after = 0 and y_before a multiple of 16 give an output view whose
// 16-channel groups are 16-byte aligned (the vector store); others take the scalar stores.
ImageProblem make_image_problem(const Shape& s, int act, int y_before, int y_after,
                                std::mt19937& rng) {
  ImageProblem ip;
  ip.p = make_problem(s, act, false, Int8ConvOutput::int8, y_before, rng);
  Problem& p = ip.p;
  p.y_after = y_after;
  p.y_stride = y_before + s.out_c + y_after;
  p.x_scale = 1.0f / 127.0f;
  std::uniform_real_distribution<float> unit(0.0f, 1.0f), wide(-2.0f, 3.0f);
  std::uniform_int_distribution<int> pick(0, 999), code(-127, 127);
  const float inf = std::numeric_limits<float>::infinity();
  const std::size_t plane = static_cast<std::size_t>(s.in_h) * s.in_w;
  ip.images.resize(static_cast<std::size_t>(s.batch) * s.in_c * plane);
  for (float& v : ip.images) {
    const int r = pick(rng);
    if (r < 850)
      v = unit(rng);
    else if (r < 950)
      v = (static_cast<float>(code(rng)) + 0.5f) * p.x_scale;
    else if (r < 995)
      v = wide(rng);
    else
      v = r == 995 ? std::numeric_limits<float>::quiet_NaN() : (r < 998 ? inf : -inf);
  }
  for (int n = 0; n < s.batch; ++n) {
    for (int c = 0; c < s.in_c; ++c) {
      for (std::size_t i = 0; i < plane; ++i) {
        const float v = ip.images[(static_cast<std::size_t>(n) * s.in_c + c) * plane + i];
        p.x_buf[(n * plane + i) * p.x_stride + kXBefore + c] = quantize_int8(v, p.x_scale);
      }
    }
  }
  set_y_scale(p);
  return ip;
}

GpuRun run_image_gpu(const ImageProblem& ip, const DeviceProblem& d,
                     const course::DeviceBuffer<float>& images, Int8ConvOutput t,
                     Int8Epilogue epilogue = Int8Epilogue::exact) {
  return run_with(ip.p, d, t, [&](const Int8ConvArgs& conv, unsigned long long* counter) {
    Int8ImageConvArgs a{images.data(), conv};
    a.conv.x = nullptr;  // the kernel reads the floats
    a.conv.x_stride = 0;
    conv_int8_image_gpu(a, nullptr, counter, epilogue);
  });
}

// First layers: YOLOv8n's model.0 with tails in both directions of the 8 x 32 output tile, one
// input channel, four, a 16-channel group tail, three groups, a large stride and kernel, a 1x1
// image.
const std::vector<Shape> kImageShapes = {
    {"model.0: 3x3 s2 3->16, 37x70, batch 2", 2, 37, 70, 3, 16, 3, 2, 1},
    {"1x1 1->20 (a group tail), 9x40", 1, 9, 40, 1, 20, 1, 1, 0},
    {"5x5 pad 2 4->40 (three groups), 11x33", 1, 11, 33, 4, 40, 5, 1, 2},
    {"7x7 s4 pad 3 3->8, 30x47", 1, 30, 47, 3, 8, 7, 4, 3},
    {"3x3 2->16 on a 1x1 image", 1, 1, 1, 2, 16, 3, 1, 1},
};

}  // namespace

TEST_CASE("conv_int8_image_gpu: refuses what it cannot run, before any CUDA call", "[int8gpu]") {
  alignas(16) static std::int8_t w[4096], y[4096];
  alignas(16) static float images[4096], bias[64], w_scale[64];
  Int8ImageConvArgs good{};
  good.images = images;
  Int8ConvArgs& c = good.conv;
  c.w = w;
  c.bias = bias;
  c.y = y;
  c.y_stride = 16;
  c.batch = 1;
  c.in_h = c.in_w = 8;
  c.in_c = 3;
  c.out_h = c.out_w = 4;
  c.out_c = 16;
  c.kernel = 3;
  c.stride = 2;
  c.pad = 1;
  c.act = 1;
  c.x_scale = 1.0f / 127.0f;
  c.w_scale = w_scale;  // not read on the host
  c.y_scale = 0.05f;
  c.y_type = Int8ConvOutput::int8;
  CHECK_NOTHROW(check_int8_image_conv_args(good));
  auto bad = [&](auto edit, const char* message) {
    Int8ImageConvArgs a = good;
    edit(a);
    INFO(message);
    CHECK_THROWS_WITH(check_int8_image_conv_args(a), Contains(message));
    CHECK_THROWS_WITH(conv_int8_image_gpu(a, nullptr), Contains("conv_int8_image_gpu: "));
    CHECK_THROWS_AS(conv_int8_image_gpu(a, nullptr), std::invalid_argument);
  };
  bad([](Int8ImageConvArgs& a) { a.images = nullptr; }, "images must not be null");
  bad([](Int8ImageConvArgs& a) { a.conv.x = w; }, "conv.x and conv.res must be null");
  bad([](Int8ImageConvArgs& a) { a.conv.res = w; }, "conv.x and conv.res must be null");
  bad([](Int8ImageConvArgs& a) { a.conv.in_c = 5; }, "in_c = 5 exceeds 4");
  bad([](Int8ImageConvArgs& a) { a.conv.x_scale = 0.0f; }, "x_scale must be a positive normal");
  bad([](Int8ImageConvArgs& a) { a.conv.y_scale = -1.0f; }, "y_scale");
  bad([](Int8ImageConvArgs& a) { a.conv.out_h = 3; }, "is not what a 3x3 stride 2 pad 1");
  bad([](Int8ImageConvArgs& a) { a.conv.bias = nullptr; }, "must not be null");
  bad([](Int8ImageConvArgs& a) { a.conv.act = 2; }, "act must be");
  bad([](Int8ImageConvArgs& a) { a.conv.batch = 70000; }, "exceeds 65535");
  bad(
      [](Int8ImageConvArgs& a) {
        a.conv.out_c = 512;  // 49 taps x 512 channels x 4 bytes of weights
        a.conv.kernel = 7;
        a.conv.pad = 3;
        a.conv.y_stride = 512;
      },
      "bytes of shared memory");
  bad([](Int8ImageConvArgs& a) { a.conv.y_type = static_cast<Int8ConvOutput>(9); },
      "unknown output type");
}

TEST_CASE("conv_int8_image_gpu equals conv_int8_reference on the host-quantised image",
          "[gpu][int8gpu][image]") {
  if (!int8_tensor_cores()) return;
  std::mt19937 rng(1311);
  int explained = 0;
  unsigned long long fallbacks = 0, int8_elements = 0, fast_differ = 0;
  for (const Shape& s : kImageShapes) {
    for (int variant = 0; variant < 2; ++variant) {
      // variant 0: SiLU, the output a 16-byte aligned view (y at channel 16 of out_c + 16);
      // variant 1: no activation, y at channel 3 of a wider buffer (the scalar stores).
      const int act = variant == 0 ? 1 : 0;
      const int y_before = variant == 0 ? 16 : 3, y_after = variant == 0 ? 0 : 5;
      const ImageProblem ip = make_image_problem(s, act, y_before, y_after, rng);
      const Problem& p = ip.p;
      const DeviceProblem d(p);
      course::DeviceBuffer<float> images(ip.images.size());
      CUDA_CHECK(
          cudaMemcpy(images.data(), ip.images.data(), images.bytes(), cudaMemcpyHostToDevice));
      const std::vector<unsigned char> want_f32 = run_reference(p, Int8ConvOutput::f32);
      for (Int8ConvOutput t : {Int8ConvOutput::int8, Int8ConvOutput::f32, Int8ConvOutput::f16}) {
        std::ostringstream what;
        what << s.what << ", act " << act << ", y at channel " << y_before << " of " << p.y_stride
             << ", " << type_name(t) << " output";
        INFO(what.str());
        const std::vector<unsigned char> want = run_reference(p, t);
        const GpuRun r = run_image_gpu(ip, d, images, t);
        explained += compare(p, t, r.y, want, want_f32, what.str());
        if (t == Int8ConvOutput::int8) {
          fallbacks += r.fallbacks;
          int8_elements += static_cast<unsigned long long>(p.out_pixels()) * s.out_c;
          fast_differ += static_cast<unsigned long long>(
              compare_fast(p, run_image_gpu(ip, d, images, t, Int8Epilogue::fast).y, want, want_f32,
                           what.str() + ", fast"));
        } else {
          CHECK(r.fallbacks == 0);
        }
      }
    }
  }
  INFO(explained << " elements differ by the documented exp last-bit effect; " << fallbacks
                 << " of " << int8_elements << " INT8 outputs took the double fallback; "
                 << fast_differ << " fast-epilogue codes one step away");
  CHECK(explained <= 2);
  CHECK(fallbacks * 100 < int8_elements);
}

TEST_CASE("conv_int8_image_gpu on a small first layer (the sanitizers' run); batch 0, host memory",
          "[gpu][int8gpu][image][small]") {
  if (!int8_tensor_cores()) return;
  std::mt19937 rng(1312);
  const Shape s = {"3x3 s2 3->24, 9x35, batch 2", 2, 9, 35, 3, 24, 3, 2, 1};
  const ImageProblem ip = make_image_problem(s, 1, 0, 0, rng);
  const Problem& p = ip.p;
  const DeviceProblem d(p);
  course::DeviceBuffer<float> images(ip.images.size());
  CUDA_CHECK(cudaMemcpy(images.data(), ip.images.data(), images.bytes(), cudaMemcpyHostToDevice));
  const std::vector<unsigned char> want_f32 = run_reference(p, Int8ConvOutput::f32);
  int explained = 0;
  for (Int8ConvOutput t : {Int8ConvOutput::int8, Int8ConvOutput::f32, Int8ConvOutput::f16}) {
    INFO(type_name(t));
    const std::vector<unsigned char> want = run_reference(p, t);
    explained += compare(p, t, run_image_gpu(ip, d, images, t).y, want, want_f32, s.what);
    if (t == Int8ConvOutput::int8) {
      compare_fast(p, run_image_gpu(ip, d, images, t, Int8Epilogue::fast).y, want, want_f32,
                   s.what);
    }
  }
  CHECK(explained <= 2);

  course::DeviceBuffer<std::int8_t> y(p.y_elements());
  Int8ImageConvArgs a{images.data(),
                      args_for(p, d.x.data(), d.w.data(), d.bias.data(), d.w_scale.data(), nullptr,
                               y.data(), Int8ConvOutput::int8)};
  a.conv.x = nullptr;
  a.conv.batch = 0;
  CHECK_NOTHROW(conv_int8_image_gpu(a, nullptr));
  a.conv.batch = 1;
  std::vector<float> host_images(ip.images);  // pageable host memory
  a.images = host_images.data();
  CHECK_THROWS_WITH(conv_int8_image_gpu(a, nullptr),
                    Contains("images is not memory the GPU can access"));
}

// ------------------------------------------------------------------------ the wgmma path

namespace {

// The wgmma path runs on compute capability 9.0 only, and only in a build for 90 (sm_90a): its
// GPU tests skip elsewhere, with a warning.
bool wgmma_runs_here() {
  if (int8_wgmma_available()) return true;
  WARN("the wgmma path needs compute capability 9.0 and a build for 90 (sm_90a): skipped");
  return false;
}

// YOLOv8n's 1x1 layers (and the edges of the wgmma kernel): K tails inside one 128-byte K tile
// (in_c 16, 48), two K tiles (144: the second one partial), more K tiles than the ring's 4 stages
// (640: it wraps once; 1040: twice, the last tile partial); out_c tails (6, 40, 72) and more
// channels than one 256-wide tile (300); M tails (35, 442 pixels), batch 2.
const std::vector<Shape> kWgmmaShapes = {
    {"model.2.cv1: 1x1 32->32, 12x20", 1, 12, 20, 32, 32, 1, 1, 0},
    {"model.2.cv2: 1x1 48->32 (a concatenation), odd image, batch 2", 2, 13, 17, 48, 32, 1, 1, 0},
    {"model.22.cv3.0.2: 1x1 64->6 (class logits), out_c tail", 1, 5, 7, 64, 6, 1, 1, 0},
    {"model.9.cv1: 1x1 256->128", 1, 5, 5, 256, 128, 1, 1, 0},
    {"1x1 16->72, out_c tail", 1, 9, 11, 16, 72, 1, 1, 0},
    {"1x1 144->40: two K tiles, the second partial", 1, 6, 7, 144, 40, 1, 1, 0},
    {"1x1 640->256: five K tiles, the ring wraps", 1, 4, 9, 640, 256, 1, 1, 0},
    {"1x1 1040->300: nine K tiles, two tile columns of 256", 1, 3, 5, 1040, 300, 1, 1, 0},
};

}  // namespace

TEST_CASE("the wgmma path: which layers, which tiles, and what it refuses without a GPU",
          "[int8gpu][wgmma]") {
  const std::vector<Int8ConvTile>& tiles = int8_wgmma_tiles();
  REQUIRE(tiles.size() == 3);
  const int widths[3] = {256, 128, 64};
  for (int i = 0; i < 3; ++i) {
    const Int8ConvTile& t = tiles[i];
    CHECK(std::string(t.name) == "wgmma 128x" + std::to_string(widths[i]));
    CHECK(t.tile_m == 128);
    CHECK(t.tile_n == widths[i]);
    CHECK(t.threads == 384);
    // 1024 bytes of alignment slack, the larger of the 4-stage ring (128 + tile_n rows of 128
    // bytes each) and the staged int32 tile, 3 floats per channel, 8 mbarriers.
    CHECK(t.smem_bytes == 1024 + std::max(4 * (128 + t.tile_n) * 128, 128 * (t.tile_n + 8) * 4) +
                              3 * t.tile_n * 4 + 64);
    CHECK(t.smem_bytes <= 227 * 1024);
  }
  Int8ConvArgs a{};
  a.kernel = 1;
  a.stride = 1;
  CHECK(int8_wgmma_eligible(a));
  a.stride = 2;
  CHECK_FALSE(int8_wgmma_eligible(a));
  a.stride = 1;
  a.kernel = 3;
  a.pad = 1;
  CHECK_FALSE(int8_wgmma_eligible(a));
  // The tile rule: 128x64 for every layer.
  a.batch = 1;
  a.out_h = a.out_w = 80;  // 6400 pixels: 50 tile rows
  for (const int out_c : {6, 72, 128, 256, 300}) {
    a.out_c = out_c;
    CHECK(std::string(int8_wgmma_tiles()[int8_wgmma_auto_tile(a)].name) == "wgmma 128x64");
  }
  // When the automatic path takes it: a whole 128-byte K tile and a full wave of 128-row tiles.
  a.in_c = 128;
  CHECK(int8_wgmma_pays(a, 50));        // 6400 pixels >= 128 x 50
  CHECK_FALSE(int8_wgmma_pays(a, 51));  // 6528 needed
  a.in_c = 112;
  CHECK_FALSE(int8_wgmma_pays(a, 8));
  CHECK_THROWS_AS(int8_wgmma_pays(a, 0), std::invalid_argument);

  // Forcing the path on a layer it does not compute, or with a tile it does not have, fails
  // before any CUDA call (host addresses that look right stand in for device memory).
  Int8ConvArgs good = host_args();
  good.kernel = 1;
  good.pad = 0;
  CHECK_THROWS_WITH(
      conv_int8_gpu(good, nullptr, 3, nullptr, Int8Epilogue::exact, Int8ConvPath::wgmma),
      Contains("tile 3 is neither -1 (automatic) nor an index of int8_wgmma_tiles()"));
  CHECK_THROWS_WITH(
      conv_int8_gpu(host_args(), nullptr, -1, nullptr, Int8Epilogue::exact, Int8ConvPath::wgmma),
      Contains("1x1 convolutions with stride 1 and pad 0 only"));
  // The mma.sync path keeps its own tile list.
  CHECK_THROWS_WITH(
      conv_int8_gpu(good, nullptr, 4, nullptr, Int8Epilogue::exact, Int8ConvPath::mma_sync),
      Contains("int8_conv_tiles()"));
}

TEST_CASE("the wgmma path equals conv_int8_reference on YOLOv8n's 1x1 shapes, every wgmma tile",
          "[gpu][int8gpu][wgmma]") {
  if (!wgmma_runs_here()) return;
  std::mt19937 rng(1321);
  const std::vector<Int8ConvTile>& tiles = int8_wgmma_tiles();
  int explained = 0;
  unsigned long long fallbacks = 0, int8_elements = 0, fast_differ = 0;
  for_each_case(
      kWgmmaShapes, 4, rng,
      [&](const Problem& p, const DeviceProblem& d, const std::vector<unsigned char>& want_f32,
          const std::string& case_what) {
        for (Int8ConvOutput t : {Int8ConvOutput::int8, Int8ConvOutput::f32, Int8ConvOutput::f16}) {
          const std::vector<unsigned char> want = run_reference(p, t);
          // The same int32 sums through the same epilogue code: the mma.sync path's bytes and
          // fallback count, exactly (the exp exception included: both run the device's exp).
          const GpuRun mma = run_gpu(p, d, t, -1, Int8Epilogue::exact, Int8ConvPath::mma_sync);
          const GpuRun mma_fast = run_gpu(p, d, t, -1, Int8Epilogue::fast, Int8ConvPath::mma_sync);
          for (int tile = -1; tile < static_cast<int>(tiles.size()); ++tile) {
            const std::string what = case_what + ", " + type_name(t) + " output, " +
                                     (tile < 0 ? "automatic wgmma tile" : tiles[tile].name);
            INFO(what);
            const GpuRun r = run_gpu(p, d, t, tile, Int8Epilogue::exact, Int8ConvPath::wgmma);
            explained += compare(p, t, r.y, want, want_f32, what);
            CHECK(r.y == mma.y);
            CHECK(r.fallbacks == mma.fallbacks);
            if (t != Int8ConvOutput::int8) {
              CHECK(r.fallbacks == 0);
              continue;
            }
            fallbacks += r.fallbacks;
            int8_elements += static_cast<unsigned long long>(p.out_pixels()) * p.s.out_c;
            const GpuRun f = run_gpu(p, d, t, tile, Int8Epilogue::fast, Int8ConvPath::wgmma);
            CHECK(f.fallbacks == 0);
            fast_differ += compare_fast(p, f.y, want, want_f32, what + ", fast");
            CHECK(f.y == mma_fast.y);
          }
        }
        // The default call (tile -1, the automatic path: wgmma where int8_wgmma_pays, mma.sync
        // on these small shapes otherwise): the same bits either way.
        const GpuRun r = run_gpu(p, d, Int8ConvOutput::int8, -1);
        explained += compare(p, Int8ConvOutput::int8, r.y, run_reference(p, Int8ConvOutput::int8),
                             want_f32, case_what + ", automatic path");
      });
  INFO(explained << " elements differ by the documented exp last-bit effect; " << fallbacks
                 << " of " << int8_elements << " INT8 outputs took the double fallback; "
                 << fast_differ << " fast outputs one code away");
  CHECK(explained <= 2);
  CHECK(fallbacks * 100 < int8_elements);
  CHECK(fast_differ * 1000 < int8_elements);
}

TEST_CASE("the wgmma path: exact int32 sums with unit scales, -128 included, K up to 2304",
          "[gpu][int8gpu][wgmma]") {
  if (!wgmma_runs_here()) return;
  std::mt19937 rng(1322);
  std::vector<Shape> shapes = kWgmmaShapes;
  shapes.push_back({"1x1 2304->32: eighteen K tiles", 1, 3, 3, 2304, 32, 1, 1, 0});
  for (const Shape& s : shapes) {
    const Problem p = unit_scale_problem(s, rng);
    const DeviceProblem d(p);
    const std::vector<unsigned char> want = run_reference(p, Int8ConvOutput::f32);
    for (int tile = 0; tile < static_cast<int>(int8_wgmma_tiles().size()); ++tile) {
      INFO(s.what << ", " << int8_wgmma_tiles()[tile].name);
      CHECK(run_gpu(p, d, Int8ConvOutput::f32, tile, Int8Epilogue::exact, Int8ConvPath::wgmma).y ==
            want);
    }
  }
  check_extreme_sums(
      extreme_sum_problem({"1x1 2304->32 saturated", 1, 2, 2, 2304, 32, 1, 1, 0}, rng),
      [](const Problem& p, const DeviceProblem& d) {
        return run_gpu(p, d, Int8ConvOutput::f32, -1, Int8Epilogue::exact, Int8ConvPath::wgmma);
      });
}

TEST_CASE("the wgmma path on small shapes, every tile (the sanitizers' run)",
          "[gpu][int8gpu][wgmma][small]") {
  if (!wgmma_runs_here()) return;
  // Few launches, every code path: an M and out_c tail in one K tile, a residual at an odd
  // offset (scalar stores); a ring that wraps (5 K tiles, 4 stages) with SiLU at an even offset.
  const std::vector<Shape> small = {
      {"1x1 48->40 + residual, 3x5", 1, 3, 5, 48, 40, 1, 1, 0},
      {"1x1 640->24, 2x3, batch 2: the ring wraps", 2, 2, 3, 640, 24, 1, 1, 0},
  };
  std::mt19937 rng(1323);
  int explained = 0, index = 0;
  for (const Shape& s : small) {
    const bool residual = index == 0;
    const int y_before = index == 0 ? 3 : 4;
    ++index;
    Problem p = make_problem(s, 1, residual, Int8ConvOutput::int8, y_before, rng);
    set_y_scale(p);
    const DeviceProblem d(p);
    const std::vector<unsigned char> want_f32 = run_reference(p, Int8ConvOutput::f32);
    for (Int8ConvOutput t : {Int8ConvOutput::int8, Int8ConvOutput::f32, Int8ConvOutput::f16}) {
      const std::vector<unsigned char> want = run_reference(p, t);
      for (int tile = 0; tile < static_cast<int>(int8_wgmma_tiles().size()); ++tile) {
        if (t != Int8ConvOutput::int8 && tile != 2) continue;  // float outputs: one tile
        const std::string what =
            std::string(s.what) + ", " + type_name(t) + ", " + int8_wgmma_tiles()[tile].name;
        INFO(what);
        explained +=
            compare(p, t, run_gpu(p, d, t, tile, Int8Epilogue::exact, Int8ConvPath::wgmma).y, want,
                    want_f32, what);
        if (t == Int8ConvOutput::int8) {
          compare_fast(p, run_gpu(p, d, t, tile, Int8Epilogue::fast, Int8ConvPath::wgmma).y, want,
                       want_f32, what);
        }
      }
    }
  }
  CHECK(explained <= 2);
}
