// Lesson 12: tests of the engine's kernels (engine_kernels.cu), loaded the way the runtime loads
// them: from the embedded fatbinary through KernelLibrary (cuLibraryLoadData).
//
// CPU: the kernel table (unique symbols, tiles, what each family requires), conv_kernel_supports,
// conv_kernel_runs_on and the launch geometry.
//
// GPU ([gpu][kernels]): every convolution kernel of the table against a double-precision CPU
// convolution computed from the same rounded inputs, on every case it supports: images that are
// not multiples of the tiles, out_c of 5, 6, 24, 40, 72 (tails of every N tile), K tails (K = 216,
// 136, 9 * 24 ...), in_c 8, 12, 16 and 3, stride 1 and 2, kernels 1, 3, 5, a 1x1 image (every tap
// but the centre is padding), views with channel offsets and pixel strides larger than the
// channel count, odd output strides (the scalar store path), residuals, batches 1, 2, 3. Every
// output element is checked against a bound derived below (conv_error_bound), and every element
// of the output buffer outside the view must keep its sentinel. Max pool and upsample are exact;
// the detect decode is checked against a double-precision decode.
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/cuda_check.hpp"
#include "common/memory.hpp"
#include "common/testing.hpp"
#include "engine_kernels.cuh"
#include "kernel_library.hpp"
#include "launch.hpp"

using course::testing::Contains;
using namespace lesson12;

namespace {

// ---------------------------------------------------------------- data

std::uint64_t mix64(std::uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
// Uniform in [lo, hi), a function of (seed, index) only.
float uniform(std::uint64_t seed, std::size_t i, float lo, float hi) {
  const double u =
      static_cast<double>(mix64(seed * 0x100000001b3ull + i) >> 11) / 9007199254740992.0;
  return static_cast<float>(lo + (hi - lo) * u);
}
float round_to(DType t, float v) {
  return t == DType::f16 ? __half2float(__float2half_rn(v)) : v;
}
std::vector<float> random_values(DType t, std::size_t n, std::uint64_t seed, float lo, float hi) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = round_to(t, uniform(seed, i, lo, hi));
  return v;
}

// Host values (exact in the dtype) <-> the device's bytes.
std::vector<unsigned char> encode(DType t, const std::vector<float>& v) {
  std::vector<unsigned char> bytes(v.size() * element_size(t));
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (t == DType::f16) {
      const __half h = __float2half_rn(v[i]);
      std::memcpy(bytes.data() + 2 * i, &h, 2);
    } else {
      std::memcpy(bytes.data() + 4 * i, &v[i], 4);
    }
  }
  return bytes;
}
std::vector<float> decode(DType t, const std::vector<unsigned char>& bytes) {
  std::vector<float> v(bytes.size() / element_size(t));
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (t == DType::f16) {
      __half h;
      std::memcpy(&h, bytes.data() + 2 * i, 2);
      v[i] = __half2float(h);
    } else {
      std::memcpy(&v[i], bytes.data() + 4 * i, 4);
    }
  }
  return v;
}
course::DeviceBuffer<unsigned char> upload(DType t, const std::vector<float>& v) {
  return course::to_device(encode(t, v));
}
std::vector<float> download(DType t, const course::DeviceBuffer<unsigned char>& d) {
  return decode(t, course::to_host(d));
}
const char* dtype_name(DType t) {
  return t == DType::f16 ? "f16" : "f32";
}

// The current GPU's compute capability * 10.
int device_sm() {
  int device = 0, major = 0, minor = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return major * 10 + minor;
}

// ---------------------------------------------------------------- the convolution cases

struct ConvCase {
  const char* name;
  int batch, in_h, in_w, in_c, out_c, kernel, stride, pad;
  int x_stride, x_offset;  // input view: channels [x_offset, x_offset + in_c) of x_stride
  int y_stride, y_offset;  // output view
  bool residual;
  int res_stride, res_offset;
  bool bias;
  int act;
  int out_h() const { return (in_h + 2 * pad - kernel) / stride + 1; }
  int out_w() const { return (in_w + 2 * pad - kernel) / stride + 1; }
};

// NHWC cases (every family but the first layer's). Channel offsets are multiples of 8 where the
// tensor-core kernels should run (16-byte chunks), as the engine's concatenation slices are.
const std::vector<ConvCase>& nhwc_cases() {
  static const std::vector<ConvCase> cases = {
      // name                                     b   h   w  in out k s p  xs xo  ys yo  res rs ro
      // bias act
      {"3x3 s1 16->16, 13x11 (M tail)", 1, 13, 11, 16, 16, 3, 1, 1, 16, 0, 16, 0, false, 0, 0, true,
       1},
      {"3x3 s2 32->64, 17x15, batch 3", 3, 17, 15, 32, 64, 3, 2, 1, 32, 0, 64, 0, false, 0, 0, true,
       1},
      {"1x1 64->6 class head (bias, no act)", 3, 7, 9, 64, 6, 1, 1, 0, 64, 0, 6, 0, false, 0, 0,
       true, 0},
      {"3x3 s1 views + residual", 3, 11, 10, 16, 24, 3, 1, 1, 48, 16, 40, 8, true, 32, 8, true, 1},
      {"3x3 s2 24->40 (K = 216: K tail)", 2, 9, 13, 24, 40, 3, 2, 1, 24, 0, 40, 0, false, 0, 0,
       true, 1},
      {"1x1 136->72 (K and N tails), view out", 1, 21, 19, 136, 72, 1, 1, 0, 136, 0, 88, 8, false,
       0, 0, true, 1},
      {"3x3 64->128, 20x20, residual", 2, 20, 20, 64, 128, 3, 1, 1, 64, 0, 128, 0, true, 128, 0,
       true, 1},
      {"1x1 256->128 from a concat view, residual", 3, 10, 10, 256, 128, 1, 1, 0, 384, 128, 128, 0,
       true, 256, 128, true, 1},
      {"3x3 s1 8->16 (in_c 8)", 1, 6, 5, 8, 16, 3, 1, 1, 8, 0, 16, 0, false, 0, 0, true, 1},
      {"3x3 s1 16->16 on a 1x1 image", 1, 1, 1, 16, 16, 3, 1, 1, 16, 0, 16, 0, true, 16, 0, true,
       1},
      {"5x5 s1 p2 16->16", 2, 9, 9, 16, 16, 5, 1, 2, 16, 0, 16, 0, false, 0, 0, true, 1},
      {"1x1 32->5, odd output strides (scalar stores)", 2, 6, 7, 32, 5, 1, 1, 0, 32, 0, 7, 1, true,
       5, 0, true, 1},
      {"3x3 s2 64->64, no bias, 40x40 (many M tiles)", 1, 40, 40, 64, 64, 3, 2, 1, 64, 0, 64, 0,
       false, 0, 0, false, 1},
      {"3x3 s2 12->20 (in_c 12: no 16-byte chunks)", 2, 9, 7, 12, 20, 3, 2, 1, 12, 0, 20, 0, false,
       0, 0, true, 1},
      {"3x3 s1 3->6 NHWC, x_stride 5", 3, 8, 9, 3, 6, 3, 1, 1, 5, 1, 6, 0, true, 6, 0, true, 1},
  };
  return cases;
}

// First-layer cases: x is the float NCHW network input [batch, in_c, in_h, in_w] (x_stride and
// x_offset unused).
const std::vector<ConvCase>& first_layer_cases() {
  static const std::vector<ConvCase> cases = {
      {"first layer 3->16 s2, 34x30, batch 3", 3, 34, 30, 3, 16, 3, 2, 1, 0, 0, 16, 0, false, 0, 0,
       true, 1},
      {"first layer 3->6 s2, 9x13, view out", 1, 9, 13, 3, 6, 3, 2, 1, 0, 0, 8, 2, false, 0, 0,
       true, 1},
      {"first layer 3->24 s1, 7x6, residual", 2, 7, 6, 3, 24, 3, 1, 1, 0, 0, 24, 0, true, 24, 0,
       true, 1},
  };
  return cases;
}

// The bound on |computed - exact| for one output element (exact: the double-precision
// convolution of the same rounded inputs). With S = sum |x w| over the K terms, b the bias,
// a = act(pre-activation), r the residual and ref = a + r:
//  - the accumulation: FP32, at most K + 1 roundings of relative size 2^-23 each (2^-23, not
//    2^-24: the tensor cores' adder may truncate, lesson 10) over partial sums bounded by
//    S + |b| (gamma_n bound, Higham 3.1). FP16 x FP16 products are exact in FP32; FP32 products
//    (SIMT, direct FP32, the first layer's float input) round once each, inside the same count.
//  - SiLU is 1.1-Lipschitz (max |d/dv v sigma(v)| = 1.0998), so the accumulation error grows by
//    at most 1.1; evaluating it (__expf: a few ulp for the |v| < 20 of these tests, one
//    division) adds at most 2^-20 |a|.
//  - adding the residual in FP32 rounds once: 2^-24 (|a| + |r|).
//  - the output rounds to the dtype: 2^-11 |ref| for FP16 (+ 2^-25, half the subnormal step),
//    2^-24 |ref| for FP32.
// The sum is doubled for second-order terms (products of two of these relative errors).
double conv_error_bound(DType out, int K, double abs_sum, double bias, double act_value, double res,
                        double ref) {
  const double u23 = std::ldexp(1.0, -23), u24 = std::ldexp(1.0, -24);
  const double u_out = out == DType::f16 ? std::ldexp(1.0, -11) : u24;
  const double sub = out == DType::f16 ? std::ldexp(1.0, -25) : 0.0;
  const double e = 1.1 * (K + 1) * u23 * (abs_sum + std::fabs(bias)) +
                   std::ldexp(1.0, -20) * std::fabs(act_value) +
                   u24 * (std::fabs(act_value) + std::fabs(res)) + u_out * std::fabs(ref) + sub;
  return 2.0 * e;
}

double silu(double v) {
  return v / (1.0 + std::exp(-v));
}

// One case's data for one dtype, its reference and bound per output element.
struct ConvData {
  ConvCase c;
  DType dtype;
  bool first_layer;
  std::vector<float> x, w, bias, res;
  std::vector<double> ref, tol;               // [batch * out_h * out_w][out_c]
  static constexpr float kSentinel = -77.0f;  // exact in FP16 and FP32; never a result here
  std::size_t y_elements() const {
    return static_cast<std::size_t>(c.batch) * c.out_h() * c.out_w() * c.y_stride;
  }
};

ConvData make_conv_data(const ConvCase& c, DType t, bool first_layer, std::uint64_t seed) {
  ConvData d{c, t, first_layer, {}, {}, {}, {}, {}, {}};
  const int K = c.kernel * c.kernel * c.in_c;
  const std::size_t pixels = static_cast<std::size_t>(c.batch) * c.out_h() * c.out_w();
  if (first_layer)  // the network input: float RGB in [0, 1], not rounded to the dtype
    d.x = random_values(DType::f32, static_cast<std::size_t>(c.batch) * c.in_c * c.in_h * c.in_w,
                        seed, 0.0f, 1.0f);
  else  // every channel of the buffer, inside the view or not
    d.x = random_values(t, static_cast<std::size_t>(c.batch) * c.in_h * c.in_w * c.x_stride, seed,
                        -1.0f, 1.0f);
  // Weights scaled so that pre-activations are O(1): SiLU's both sides are exercised.
  const float ws = 2.0f / std::sqrt(static_cast<float>(K));
  d.w = random_values(t, static_cast<std::size_t>(c.out_c) * K, seed + 1, -ws, ws);
  if (c.bias) d.bias = random_values(DType::f32, c.out_c, seed + 2, -0.5f, 0.5f);
  if (c.residual) d.res = random_values(t, pixels * c.res_stride, seed + 3, -1.0f, 1.0f);

  d.ref.resize(pixels * c.out_c);
  d.tol.resize(pixels * c.out_c);
  for (int n = 0; n < c.batch; ++n)
    for (int oy = 0; oy < c.out_h(); ++oy)
      for (int ox = 0; ox < c.out_w(); ++ox) {
        const std::size_t m = (static_cast<std::size_t>(n) * c.out_h() + oy) * c.out_w() + ox;
        for (int k = 0; k < c.out_c; ++k) {
          double sum = 0.0, abs_sum = 0.0;
          for (int r = 0; r < c.kernel; ++r) {
            const int iy = oy * c.stride - c.pad + r;
            if (iy < 0 || iy >= c.in_h) continue;
            for (int s = 0; s < c.kernel; ++s) {
              const int ix = ox * c.stride - c.pad + s;
              if (ix < 0 || ix >= c.in_w) continue;
              for (int ci = 0; ci < c.in_c; ++ci) {
                const double xv =
                    first_layer
                        ? d.x[((static_cast<std::size_t>(n) * c.in_c + ci) * c.in_h + iy) * c.in_w +
                              ix]
                        : d.x[((static_cast<std::size_t>(n) * c.in_h + iy) * c.in_w + ix) *
                                  c.x_stride +
                              c.x_offset + ci];
                const double wv =
                    d.w[((static_cast<std::size_t>(k) * c.kernel + r) * c.kernel + s) * c.in_c +
                        ci];
                sum += xv * wv;
                abs_sum += std::fabs(xv * wv);
              }
            }
          }
          const double b = c.bias ? d.bias[k] : 0.0;
          const double a = c.act == 1 ? silu(sum + b) : sum + b;
          const double rv = c.residual ? d.res[m * c.res_stride + c.res_offset + k] : 0.0;
          d.ref[m * c.out_c + k] = a + rv;
          d.tol[m * c.out_c + k] = conv_error_bound(t, K, abs_sum, b, a, rv, a + rv);
        }
      }
  return d;
}

// Runs kernel `k` on `d` and checks every element of the output buffer. Returns a description of
// the first few mismatches (empty: all correct).
std::string run_and_check(KernelLibrary& lib, const ConvKernelInfo& k, const ConvData& d) {
  const ConvCase& c = d.c;
  const DType t = d.dtype;
  const std::size_t es = element_size(t);
  course::DeviceBuffer<unsigned char> x = d.first_layer ? upload(DType::f32, d.x) : upload(t, d.x);
  course::DeviceBuffer<unsigned char> w = upload(t, d.w);
  course::DeviceBuffer<float> bias = course::to_device(d.bias);
  course::DeviceBuffer<unsigned char> res = upload(t, d.res);
  course::DeviceBuffer<unsigned char> y =
      upload(t, std::vector<float>(d.y_elements(), ConvData::kSentinel));

  ConvArgs a{};
  a.x = d.first_layer ? x.data() : x.data() + c.x_offset * es;
  a.w = w.data();
  a.bias = c.bias ? bias.data() : nullptr;
  a.res = c.residual ? res.data() + c.res_offset * es : nullptr;
  a.y = y.data() + c.y_offset * es;
  a.x_stride = d.first_layer ? c.in_c : c.x_stride;
  a.res_stride = c.res_stride;
  a.y_stride = c.y_stride;
  a.batch = c.batch, a.in_h = c.in_h, a.in_w = c.in_w, a.in_c = c.in_c;
  a.out_h = c.out_h(), a.out_w = c.out_w(), a.out_c = c.out_c;
  a.kernel = c.kernel, a.stride = c.stride, a.pad = c.pad;
  a.act = c.act;
  REQUIRE(conv_kernel_supports(k, a, d.first_layer));

  launch_conv_kernel(lib, k, a, nullptr);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> out = download(t, y);

  std::ostringstream bad;
  int mismatches = 0;
  double worst = 0.0;  // max |err| / tol
  const std::size_t pixels = static_cast<std::size_t>(c.batch) * c.out_h() * c.out_w();
  for (std::size_t m = 0; m < pixels; ++m)
    for (int ch = 0; ch < c.y_stride; ++ch) {
      const float got = out[m * c.y_stride + ch];
      const int k_out = ch - c.y_offset;
      if (k_out < 0 || k_out >= c.out_c) {
        if (got != ConvData::kSentinel && mismatches++ < 5)
          bad << "  pixel " << m << " channel " << ch
              << " outside the view was overwritten: " << got << "\n";
        continue;
      }
      const double ref = d.ref[m * c.out_c + k_out], tol = d.tol[m * c.out_c + k_out];
      const double err = std::fabs(got - ref);
      worst = std::max(worst, err / tol);
      if (!(err <= tol) && mismatches++ < 5)
        bad << "  pixel " << m << " channel " << k_out << ": got " << got << ", expected " << ref
            << " (|err| " << err << " > bound " << tol << ")\n";
    }
  if (mismatches == 0) return {};
  std::ostringstream msg;
  msg << k.symbol << " on '" << c.name << "' (" << dtype_name(t) << "): " << mismatches
      << " bad elements, worst |err| / bound = " << worst << "\n"
      << bad.str();
  return msg.str();
}

// Every kernel of the table whose family is in `families` against every case it supports.
void check_conv_family(const std::vector<ConvFamily>& families, const std::vector<ConvCase>& cases,
                       bool first_layer, int min_cases_per_kernel) {
  CUDA_CHECK(cudaFree(nullptr));
  KernelLibrary lib(built_kernel_image());
  const int sm = device_sm();
  int count = 0;
  const ConvKernelInfo* table = conv_kernels(&count);
  std::map<std::string, int> cases_run;
  std::uint64_t seed = 1000;
  for (const ConvCase& c : cases) {
    for (DType t : {DType::f16, DType::f32}) {
      bool any = false;
      for (int i = 0; i < count; ++i)
        any = any || (table[i].dtype == t && std::find(families.begin(), families.end(),
                                                       table[i].family) != families.end());
      if (!any) continue;
      const ConvData d = make_conv_data(c, t, first_layer, seed += 10);
      for (int i = 0; i < count; ++i) {
        const ConvKernelInfo& k = table[i];
        if (k.dtype != t || !conv_kernel_runs_on(k, sm)) continue;
        if (std::find(families.begin(), families.end(), k.family) == families.end()) continue;
        ConvArgs probe{};  // what supports() looks at: the shapes (addresses are aligned)
        probe.in_c = c.in_c, probe.out_c = c.out_c, probe.kernel = c.kernel,
        probe.stride = c.stride;
        probe.x_stride = first_layer ? c.in_c : c.x_stride;
        if (!conv_kernel_supports(k, probe, first_layer)) continue;
        // The offset view must then be 16-byte aligned too: the cases keep x_offset a multiple
        // of 8 channels wherever x_stride is.
        INFO(k.symbol << " on '" << c.name << "' (" << dtype_name(t) << ")");
        const std::string failure = run_and_check(lib, k, d);
        CHECK(failure == "");
        ++cases_run[k.symbol];
      }
    }
  }
  // Every kernel of these families that this GPU can run was exercised on enough cases.
  for (int i = 0; i < count; ++i) {
    const ConvKernelInfo& k = table[i];
    if (std::find(families.begin(), families.end(), k.family) == families.end()) continue;
    if (!conv_kernel_runs_on(k, sm)) {
      WARN(k.symbol << " needs compute capability " << k.min_sm / 10 << "." << k.min_sm % 10
                    << ": not run on this GPU");
      continue;
    }
    INFO(k.symbol);
    CHECK(cases_run[k.symbol] >= min_cases_per_kernel);
  }
}

}  // namespace

// ==================================================================================== CPU tests

TEST_CASE("kernel table: unique symbols, sane tiles, each family present", "[kernels]") {
  int count = 0;
  const ConvKernelInfo* table = conv_kernels(&count);
  REQUIRE(count > 0);
  std::set<std::string> symbols;
  std::map<ConvFamily, int> per_family;
  for (int i = 0; i < count; ++i) {
    const ConvKernelInfo& k = table[i];
    INFO(k.symbol);
    CHECK(symbols.insert(k.symbol).second);
    CHECK(std::string(k.symbol).rfind("conv_", 0) == 0);
    CHECK(std::string(k.tactic).size() > 0);
    CHECK(k.threads % 32 == 0);
    CHECK(k.threads <= 1024);
    CHECK(k.tile_m > 0);
    CHECK(k.tile_n > 0);
    CHECK(k.smem_bytes >= 0);
    CHECK(k.smem_bytes <= 227 * 1024);
    ++per_family[k.family];
    switch (k.family) {
      case ConvFamily::igemm_mma:
        CHECK(k.dtype == DType::f16);
        CHECK(k.in_c_multiple == 8);
        if (k.split_k > 1) {
          // Clusters (compute capability 9.0); the shared memory also holds the FP32 tile.
          CHECK(k.min_sm == 90);
          CHECK(k.split_k <= 8);  // the portable cluster size
          CHECK(k.smem_bytes ==
                std::max(mma_smem_bytes(k.tile_m, k.tile_n), 4 * k.tile_m * k.tile_n));
          CHECK(std::string(k.tactic).rfind("split-K", 0) == 0);
        } else {
          CHECK(k.min_sm == 80);
          CHECK(k.smem_bytes == mma_smem_bytes(k.tile_m, k.tile_n));
        }
        break;
      case ConvFamily::igemm_simt:
        CHECK(k.dtype == DType::f32);
        CHECK(k.in_c_multiple == 4);
        CHECK(k.min_sm == 0);
        break;
      default:
        CHECK(k.in_c_multiple == 1);
        CHECK(k.min_sm == 0);
        CHECK(k.max_k > 0);  // weights staged in shared memory
    }
    if (k.family != ConvFamily::direct && k.family != ConvFamily::first_layer) CHECK(k.max_k == 0);
  }
  CHECK(per_family[ConvFamily::igemm_mma] >= 3);
  CHECK(per_family[ConvFamily::igemm_simt] >= 1);
  CHECK(per_family[ConvFamily::direct] == 2);       // f16 and f32
  CHECK(per_family[ConvFamily::first_layer] == 2);  // f16 and f32
  int n = -1;
  CHECK(conv_kernels(&n) == table);
  CHECK(n == count);
}

namespace {
const ConvKernelInfo& kernel_named(const std::string& symbol) {
  int count = 0;
  const ConvKernelInfo* table = conv_kernels(&count);
  for (int i = 0; i < count; ++i)
    if (symbol == table[i].symbol) return table[i];
  FAIL("no kernel " << symbol << " in the table");
  return table[0];
}
ConvArgs shape_args(int in_c, int x_stride, int out_c) {
  ConvArgs a{};
  a.in_c = in_c, a.x_stride = x_stride, a.out_c = out_c;
  a.kernel = 3, a.stride = 1, a.pad = 1;
  a.batch = 1, a.in_h = a.in_w = a.out_h = a.out_w = 8;
  return a;
}
}  // namespace

TEST_CASE("conv_kernel_supports: channel multiples, strides, alignment, first layer", "[kernels]") {
  const ConvKernelInfo& mma = kernel_named("conv_igemm_mma_f16_128x64");
  const ConvKernelInfo& simt = kernel_named("conv_igemm_simt_f32_128x64");
  const ConvKernelInfo& direct = kernel_named("conv_direct_f16");
  const ConvKernelInfo& first = kernel_named("conv_first_nchw_f16");

  CHECK(conv_kernel_supports(mma, shape_args(16, 16, 6), false));
  CHECK(conv_kernel_supports(mma, shape_args(16, 48, 24), false));  // a view of 48 channels
  CHECK(conv_kernel_supports(mma, shape_args(8, 8, 16), false));
  CHECK_FALSE(conv_kernel_supports(mma, shape_args(12, 12, 16), false));  // in_c % 8
  CHECK_FALSE(conv_kernel_supports(mma, shape_args(16, 20, 16), false));  // pixel stride % 8
  CHECK_FALSE(conv_kernel_supports(mma, shape_args(3, 3, 16), false));
  CHECK_FALSE(conv_kernel_supports(mma, shape_args(16, 16, 16), true));  // not the first layer

  CHECK(conv_kernel_supports(simt, shape_args(12, 12, 16), false));
  CHECK(conv_kernel_supports(simt, shape_args(12, 20, 16), false));
  CHECK_FALSE(conv_kernel_supports(simt, shape_args(6, 6, 16), false));
  CHECK_FALSE(conv_kernel_supports(simt, shape_args(12, 14, 16), false));

  CHECK(conv_kernel_supports(direct, shape_args(3, 5, 6), false));
  CHECK(conv_kernel_supports(direct, shape_args(64, 64, 6), false));        // K = 576
  CHECK_FALSE(conv_kernel_supports(direct, shape_args(72, 72, 6), false));  // K = 648 > max_k
  CHECK(conv_kernel_supports(mma, shape_args(256, 256, 64), false));        // no K limit
  CHECK_FALSE(conv_kernel_supports(direct, shape_args(3, 3, 16), true));
  CHECK(conv_kernel_supports(first, shape_args(3, 3, 16), true));
  CHECK_FALSE(conv_kernel_supports(first, shape_args(16, 16, 16), false));

  // 16-byte chunks need 16-byte aligned views: a channel offset of 4 halves (8 bytes) is refused.
  alignas(16) static const unsigned char storage[64] = {};
  ConvArgs a = shape_args(16, 16, 16);
  a.x = storage + 16;
  a.w = storage;
  CHECK(conv_kernel_supports(mma, a, false));
  a.x = storage + 8;
  CHECK_FALSE(conv_kernel_supports(mma, a, false));
  CHECK(conv_kernel_supports(direct, a, false));  // the direct kernel reads element by element
  a.x = storage;
  a.w = storage + 4;
  CHECK_FALSE(conv_kernel_supports(mma, a, false));
}

// The PTX ISA's fragment tables for mma.m16n8k16 (f16 inputs), "Matrix Fragments for
// mma.m16n8k16 with floating point type", written out independently of the kernels:
// lane = 4 group + t; A element i (0..7) at row group + 8 ((i >> 1) & 1), column 2t + (i & 1) +
// 8 (i >> 2); B element i (0..3) at k 2t + (i & 1) + 8 (i >> 1), n group.
TEST_CASE("ldmatrix addresses deliver mma.m16n8k16's A and B fragments", "[kernels]") {
  for (int lane = 0; lane < 32; ++lane) {
    const int group = lane / 4, t = lane % 4;
    for (int reg = 0; reg < 4; ++reg)
      for (int h = 0; h < 2; ++h) {
        INFO("lane " << lane << " register " << reg << " half " << h);
        // ldmatrix: register `reg` of lane l holds row l / 4, columns 2 (l % 4) + h of matrix
        // `reg`, whose row l / 4 was addressed by lane 8 reg + l / 4.
        const TileRC a_row = mma_ldmatrix_a(8 * reg + lane / 4);
        const TileRC b_row = mma_ldmatrix_b(8 * reg + lane / 4);
        const int a_elem = 2 * reg + h;  // A's registers hold elements 2 reg, 2 reg + 1
        CHECK(a_row.row == group + 8 * ((a_elem >> 1) & 1));
        CHECK(a_row.col + 2 * t + h == 2 * t + (a_elem & 1) + 8 * (a_elem >> 2));
        // B: registers 0, 1 = b0, b1 of the fragment of channels 0..7, 2, 3 of channels 8..15.
        const int frag = reg / 2, b_elem = 2 * (reg % 2) + h;
        CHECK(b_row.row == 8 * frag + group);                                      // n
        CHECK(b_row.col + 2 * t + h == 2 * t + (b_elem & 1) + 8 * (b_elem >> 1));  // k
      }
  }
}

TEST_CASE("the padded stage rows: ldmatrix phases and cp.async writes are conflict-free",
          "[kernels]") {
  // One ldmatrix phase reads the 8 rows of one matrix (lanes 8j .. 8j + 7): 16 bytes each, in
  // 8 different 16-byte bank groups, for any warp origin row and k step.
  for (int origin = 0; origin < 128; origin += 16)
    for (int ks = 0; ks < kMmaBK / 16; ++ks)
      for (int j = 0; j < 4; ++j) {
        std::set<int> groups_a, groups_b;
        for (int l = 8 * j; l < 8 * j + 8; ++l) {
          const TileRC a = mma_ldmatrix_a(l), b = mma_ldmatrix_b(l);
          groups_a.insert(mma_tile_offset(origin + a.row, 16 * ks + a.col) / 16 % 8);
          groups_b.insert(mma_tile_offset(origin + b.row, 16 * ks + b.col) / 16 % 8);
        }
        CHECK(groups_a.size() == 8);
        CHECK(groups_b.size() == 8);
      }
  // cp.async: thread tid writes chunk tid % 4 of row tid / 4: a warp's 32 chunks (512 bytes)
  // fill each bank group exactly 4 times, the minimum of 4 wavefronts.
  std::map<int, int> per_group;
  for (int tid = 0; tid < 32; ++tid) ++per_group[mma_tile_offset(tid / 4, (tid % 4) * 8) / 16 % 8];
  CHECK(per_group.size() == 8);
  for (const auto& g : per_group) CHECK(g.second == 4);
  CHECK(mma_tile_offset(1, 0) % 16 == 0);  // rows stay 16-byte aligned for cp.async
}

TEST_CASE("conv_tap: K ordered (r, s, c), 8-channel chunks never straddle two taps", "[kernels]") {
  for (int kernel : {1, 3, 5})
    for (int in_c : {8, 16, 24, 136}) {
      const int K = kernel * kernel * in_c;
      for (int k = 0; k < K; ++k) {
        const ConvTap tp = conv_tap(k, in_c, kernel);
        INFO("kernel " << kernel << " in_c " << in_c << " k " << k);
        CHECK((tp.r * kernel + tp.s) * in_c + tp.c == k);
        CHECK(tp.r < kernel);
        CHECK(tp.s < kernel);
        if (k % 8 == 0) CHECK(tp.c + 8 <= in_c);
      }
    }
}

TEST_CASE("conv_kernel_runs_on: the tensor-core kernels need compute capability 8.0, clusters 9.0",
          "[kernels]") {
  int count = 0;
  const ConvKernelInfo* table = conv_kernels(&count);
  int split = 0;
  for (int i = 0; i < count; ++i) {
    INFO(table[i].symbol);
    const bool mma = table[i].family == ConvFamily::igemm_mma;
    const bool cluster = table[i].split_k > 1;
    split += cluster;
    CHECK(conv_kernel_runs_on(table[i], 75) == !mma);
    CHECK(conv_kernel_runs_on(table[i], 80) == !cluster);
    CHECK(conv_kernel_runs_on(table[i], 90));
  }
  CHECK(split >= 2);
}

TEST_CASE("conv_grid: M = batch * out_h * out_w pixels by out_c channels, in tiles", "[kernels]") {
  const ConvKernelInfo& t128x64 = kernel_named("conv_igemm_mma_f16_128x64");
  const ConvKernelInfo& t128x16 = kernel_named("conv_igemm_mma_f16_128x16");
  const ConvKernelInfo& t64x64 = kernel_named("conv_igemm_mma_f16_64x64");
  const ConvKernelInfo& direct = kernel_named("conv_direct_f32");
  ConvArgs a = shape_args(32, 32, 64);
  a.batch = 3, a.out_h = 9, a.out_w = 8;  // M = 216
  dim3 g = conv_grid(t128x64, a);
  CHECK(g.x == 2);
  CHECK(g.y == 1);
  CHECK(g.z == 1);
  a.out_c = 6;
  g = conv_grid(t128x16, a);
  CHECK(g.x == 2);
  CHECK(g.y == 1);
  a.out_c = 130;
  g = conv_grid(t64x64, a);
  CHECK(g.x == 4);
  CHECK(g.y == 3);
  a.out_c = 6;
  g = conv_grid(direct, a);
  CHECK(g.x == 2);  // 128 pixels per block
  CHECK(g.y == 1);  // 8 channels per thread
  // The network's largest layer at batch 32: 32 * 320 * 320 pixels.
  a.batch = 32, a.out_h = 320, a.out_w = 320, a.out_c = 16;
  g = conv_grid(t128x16, a);
  CHECK(g.x == 32u * 320 * 320 / 128);
  CHECK(g.y == 1);
  // Split-K: the grid's z is the cluster of blocks sharing one tile's K.
  const ConvKernelInfo& split4 = kernel_named("conv_igemm_mma_f16_32x32_splitk4");
  a.batch = 1, a.out_h = 20, a.out_w = 20, a.out_c = 128;
  g = conv_grid(split4, a);
  CHECK(g.x == 13);
  CHECK(g.y == 4);
  CHECK(g.z == 4);
  a.in_c = 128, a.kernel = 3;  // K = 1152: 36 slices, the ring's 3 stages, or the FP32 tile
  CHECK(conv_smem_bytes(split4, a) == static_cast<std::size_t>(mma_smem_bytes(32, 32)));
  a.in_c = 8, a.kernel = 1;  // one slice: one stage, 5120 bytes, more than the 4096-byte tile
  CHECK(conv_smem_bytes(split4, a) == static_cast<std::size_t>(mma_smem_bytes(32, 32, 1)));
  const ConvKernelInfo& split2_64 = kernel_named("conv_igemm_mma_f16_32x64_splitk2");
  CHECK(conv_smem_bytes(split2_64, a) == 4u * 32 * 64);  // the FP32 tile is larger than 1 stage
  a.batch = 0;
  CHECK_THROWS_AS(conv_grid(t128x64, a), std::invalid_argument);
  a.batch = 1, a.out_c = 0;
  CHECK_THROWS_AS(conv_grid(t128x64, a), std::invalid_argument);
}

TEST_CASE("pool_grid, detect_grid and the symbols", "[kernels]") {
  PoolArgs p{};
  p.batch = 2, p.out_h = 20, p.out_w = 20, p.channels = 128;  // 800 pixels x 16 groups of 8
  CHECK(pool_grid(p).x == 800 * 16 / kPoolThreads);
  p.channels = 13;  // 2 groups, the second partial
  CHECK(pool_grid(p).x == (800 * 2 + kPoolThreads - 1) / kPoolThreads);
  DetectArgs d{};
  d.batch = 3, d.num_candidates = 8400;
  CHECK(detect_grid(d).x == (3 * 8400 + kDetectThreads - 1) / kDetectThreads);
  CHECK(std::string(max_pool_symbol(DType::f16)) == "max_pool_nhwc_f16");
  CHECK(std::string(max_pool_symbol(DType::f32)) == "max_pool_nhwc_f32");
  CHECK(std::string(upsample_symbol(DType::f16)) == "upsample2x_nhwc_f16");
  CHECK(std::string(upsample_symbol(DType::f32)) == "upsample2x_nhwc_f32");
  CHECK(std::string(detect_symbol(DType::f16)) == "detect_decode_f16");
  CHECK(std::string(detect_symbol(DType::f32)) == "detect_decode_f32");
}

TEST_CASE("the FP16 error bound: output rounding dominates, and it is not vacuous", "[kernels]") {
  // An output of 1.0 from K = 576 terms of total magnitude 10: 2 * 2^-11 of output rounding plus
  // 1.5e-3 of worst-case accumulation: about 2.5 FP16 ulps at 1.0, while a dropped or doubled
  // tap (|x w| ~ 10 / 576 on average, and many elements per case) is far outside it.
  const double tol16 = conv_error_bound(DType::f16, 576, 10.0, 0.1, 1.0, 0.0, 1.0);
  CHECK(tol16 > std::ldexp(1.0, -11));
  CHECK(tol16 < 3e-3);
  const double tol32 = conv_error_bound(DType::f32, 576, 10.0, 0.1, 1.0, 0.0, 1.0);
  CHECK(tol32 < 2e-3);
  CHECK(tol32 > 1e-5);
}

// ==================================================================================== GPU tests

TEST_CASE("tensor-core implicit GEMM kernels match the FP64 convolution", "[gpu][kernels]") {
  check_conv_family({ConvFamily::igemm_mma}, nhwc_cases(), false, 10);
}

TEST_CASE("FP32 SIMT implicit GEMM kernels match the FP64 convolution", "[gpu][kernels]") {
  check_conv_family({ConvFamily::igemm_simt}, nhwc_cases(), false, 10);
}

TEST_CASE("direct convolution kernels match the FP64 convolution", "[gpu][kernels]") {
  check_conv_family({ConvFamily::direct}, nhwc_cases(), false, 15);
}

TEST_CASE("first-layer kernels (NCHW float in, NHWC out) match the FP64 convolution",
          "[gpu][kernels]") {
  check_conv_family({ConvFamily::first_layer}, first_layer_cases(), true, 3);
}

namespace {

struct PoolCase {
  const char* name;
  int batch, in_h, in_w, channels, x_stride, x_offset, y_stride, y_offset;
  int kernel, stride, pad;  // max pool; upsample ignores them
};

// Runs max pool (upsample == false) or upsample on `pc` and compares exactly with the CPU.
void check_pool(KernelLibrary& lib, DType t, const PoolCase& pc, bool upsample) {
  INFO((upsample ? "upsample " : "max pool ") << pc.name << " (" << dtype_name(t) << ")");
  const int out_h = upsample ? 2 * pc.in_h : (pc.in_h + 2 * pc.pad - pc.kernel) / pc.stride + 1;
  const int out_w = upsample ? 2 * pc.in_w : (pc.in_w + 2 * pc.pad - pc.kernel) / pc.stride + 1;
  // Values in [-4, -1): an all-negative input, so a padding tap read as 0 would win and show.
  const std::vector<float> xh = random_values(
      t, static_cast<std::size_t>(pc.batch) * pc.in_h * pc.in_w * pc.x_stride, 77, -4.0f, -1.0f);
  const float kSentinel = 55.0f;
  const std::size_t y_count = static_cast<std::size_t>(pc.batch) * out_h * out_w * pc.y_stride;
  course::DeviceBuffer<unsigned char> x = upload(t, xh);
  course::DeviceBuffer<unsigned char> y = upload(t, std::vector<float>(y_count, kSentinel));
  const std::size_t es = element_size(t);
  PoolArgs a{};
  a.x = x.data() + pc.x_offset * es;
  a.y = y.data() + pc.y_offset * es;
  a.x_stride = pc.x_stride, a.y_stride = pc.y_stride;
  a.batch = pc.batch, a.in_h = pc.in_h, a.in_w = pc.in_w, a.channels = pc.channels;
  a.out_h = out_h, a.out_w = out_w;
  a.kernel = pc.kernel, a.stride = pc.stride, a.pad = pc.pad;
  lib.launch(upsample ? upsample_symbol(t) : max_pool_symbol(t), pool_grid(a), dim3(kPoolThreads),
             0, nullptr, a);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> out = download(t, y);
  int bad = 0;
  for (int n = 0; n < pc.batch; ++n)
    for (int oy = 0; oy < out_h; ++oy)
      for (int ox = 0; ox < out_w; ++ox)
        for (int ch = 0; ch < pc.y_stride; ++ch) {
          const std::size_t o =
              ((static_cast<std::size_t>(n) * out_h + oy) * out_w + ox) * pc.y_stride + ch;
          const int c = ch - pc.y_offset;
          float expect = kSentinel;
          if (c >= 0 && c < pc.channels) {
            const auto at = [&](int iy, int ix) {
              return xh[((static_cast<std::size_t>(n) * pc.in_h + iy) * pc.in_w + ix) *
                            pc.x_stride +
                        pc.x_offset + c];
            };
            if (upsample) {
              expect = at(oy / 2, ox / 2);
            } else {
              expect = -std::numeric_limits<float>::infinity();
              for (int r = 0; r < pc.kernel; ++r)
                for (int s = 0; s < pc.kernel; ++s) {
                  const int iy = oy * pc.stride - pc.pad + r, ix = ox * pc.stride - pc.pad + s;
                  if (iy >= 0 && iy < pc.in_h && ix >= 0 && ix < pc.in_w)
                    expect = std::max(expect, at(iy, ix));
                }
            }
          }
          if (out[o] != expect && bad++ < 5)
            FAIL_CHECK("image " << n << " (" << oy << ", " << ox << ") channel " << ch << ": got "
                                << out[o] << ", expected " << expect);
        }
  CHECK(bad == 0);
}

const std::vector<PoolCase>& pool_cases() {
  static const std::vector<PoolCase> cases = {
      // name                               b  h   w   c  xs  xo  ys  yo  k  s  p
      {"k5 s1 p2, views (16-byte path)", 3, 7, 9, 24, 40, 8, 32, 8, 5, 1, 2},
      {"k3 s2 p1, 13 channels (scalar path)", 2, 10, 11, 13, 13, 0, 13, 0, 3, 2, 1},
      {"k5 s1 p2, SPPF 20x20x128", 2, 20, 20, 128, 128, 0, 512, 128, 5, 1, 2},
      {"k5 s1 p2, 3x2 image (kernel larger than it)", 1, 3, 2, 16, 16, 0, 16, 0, 5, 1, 2},
      {"k2 s2 p0, odd stride 12 (scalar path)", 2, 6, 5, 8, 12, 2, 8, 0, 2, 2, 0},
  };
  return cases;
}

}  // namespace

TEST_CASE("max pool and nearest upsample are exact, on views", "[gpu][kernels]") {
  CUDA_CHECK(cudaFree(nullptr));
  KernelLibrary lib(built_kernel_image());
  for (DType t : {DType::f16, DType::f32})
    for (const PoolCase& pc : pool_cases()) {
      check_pool(lib, t, pc, false);
      check_pool(lib, t, pc, true);
    }
}

TEST_CASE("detect decode matches an FP64 decode", "[gpu][kernels]") {
  CUDA_CHECK(cudaFree(nullptr));
  KernelLibrary lib(built_kernel_image());
  const int kC = 6, kBatch = 3;
  const int hs[3] = {6, 3, 2}, ws[3] = {5, 3, 2}, strides[3] = {8, 16, 32};
  const int box_stride = 80, cls_stride = 6;  // box: a view into 80 channels
  // (reg_max, box view's channel offset): the network's 16 bins from 16-byte aligned views (the
  // vector path), then a misaligned view and another bin count (the scalar path).
  const int configs[3][2] = {{16, 8}, {16, 2}, {8, 8}};
  for (const auto& config : configs)
    for (DType t : {DType::f16, DType::f32}) {
      const int kReg = config[0], box_offset = config[1];
      INFO(dtype_name(t) << ", reg_max " << kReg << ", box channel offset " << box_offset);
      const std::size_t es = element_size(t);
      std::vector<std::vector<float>> box(3), cls(3);
      std::vector<course::DeviceBuffer<unsigned char>> box_d, cls_d;
      DetectArgs a{};
      int n_total = 0;
      for (int l = 0; l < 3; ++l) {
        const std::size_t pix = static_cast<std::size_t>(kBatch) * hs[l] * ws[l];
        // Logits in [-6, 6): the softmax's maximum subtraction matters for FP16 inputs' range.
        box[l] = random_values(t, pix * box_stride, 500 + l, -6.0f, 6.0f);
        cls[l] = random_values(t, pix * cls_stride, 600 + l, -8.0f, 8.0f);
        box_d.push_back(upload(t, box[l]));
        cls_d.push_back(upload(t, cls[l]));
        a.box[l] = box_d.back().data() + box_offset * es;
        a.cls[l] = cls_d.back().data();
        a.box_stride[l] = box_stride, a.cls_stride[l] = cls_stride;
        a.h[l] = hs[l], a.w[l] = ws[l], a.level_stride[l] = strides[l];
        n_total += hs[l] * ws[l];
      }
      a.batch = kBatch, a.num_classes = kC, a.reg_max = kReg, a.num_candidates = n_total;
      const std::size_t out_count = static_cast<std::size_t>(kBatch) * (4 + kC) * n_total;
      course::DeviceBuffer<float> out(out_count);
      CUDA_CHECK(cudaMemset(out.data(), 0xff, out.bytes()));  // NaN: an unwritten element shows
      a.out = out.data();
      lib.launch(detect_symbol(t), detect_grid(a), dim3(kDetectThreads), 0, nullptr, a);
      CUDA_CHECK(cudaGetLastError());
      CUDA_CHECK(cudaDeviceSynchronize());
      const std::vector<float> got = course::to_host(out);

      int bad = 0;
      for (int b = 0; b < kBatch; ++b) {
        int cand = 0;
        for (int l = 0; l < 3; ++l)
          for (int y = 0; y < hs[l]; ++y)
            for (int x = 0; x < ws[l]; ++x, ++cand) {
              const std::size_t pixel = (static_cast<std::size_t>(b) * hs[l] + y) * ws[l] + x;
              double dist[4];
              for (int side = 0; side < 4; ++side) {
                const float* lg = &box[l][pixel * box_stride + box_offset + side * kReg];
                double mx = lg[0];
                for (int i = 1; i < kReg; ++i) mx = std::max(mx, static_cast<double>(lg[i]));
                double sum = 0.0, ex = 0.0;
                for (int i = 0; i < kReg; ++i) {
                  const double e = std::exp(lg[i] - mx);
                  sum += e;
                  ex += i * e;
                }
                dist[side] = ex / sum;
              }
              const double ax = x + 0.5, ay = y + 0.5, s = strides[l];
              const double x1 = ax - dist[0], y1 = ay - dist[1], x2 = ax + dist[2],
                           y2 = ay + dist[3];
              double expect[4 + kC] = {(x1 + x2) / 2 * s, (y1 + y2) / 2 * s, (x2 - x1) * s,
                                       (y2 - y1) * s};
              for (int c = 0; c < kC; ++c)
                expect[4 + c] =
                    1.0 / (1.0 + std::exp(-static_cast<double>(cls[l][pixel * cls_stride + c])));
              // Bounds. A distance is a ratio of two sums of 16 positive terms, each exp() within
              // a few ulp in FP32 (arguments <= 12 in magnitude, rounded once): relative error
              // below 1e-6, so |error| < 1.5e-5 grid cells for distances < 15. The coordinates
              // (< w + 16 cells) round once or twice more (2^-23 relative each), then * stride:
              //   box rows: stride * (1e-4 + 1e-6 * (w + h + reg_max)),  generous by ~4x.
              // Sigmoid: 1 / (1 + expf(-v)) is within 1e-6 absolute.
              const double box_tol = s * (1e-4 + 1e-6 * (ws[l] + hs[l] + kReg));
              for (int row = 0; row < 4 + kC; ++row) {
                const float g =
                    got[(static_cast<std::size_t>(b) * (4 + kC) + row) * n_total + cand];
                const double tol = row < 4 ? box_tol : 1e-6;
                if (!(std::fabs(g - expect[row]) <= tol) && bad++ < 5)
                  FAIL_CHECK("image " << b << " candidate " << cand << " row " << row << ": got "
                                      << g << ", expected " << expect[row]);
              }
            }
      }
      CHECK(bad == 0);
    }
}
