// Lesson 12 tests: the weights file, the YOLOv8n definition and the CPU reference (CPU only).
// Oracles: IEEE binary16 bit patterns and a formula for every one of the 65536; hand-computed
// layers on tiny tensors; YOLOv8n's tensor table (test_weights.hpp); and the golden
// outputs train/train_detector.py computed with PyTorch from the committed weights.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/testing.hpp"
#include "network.hpp"
#include "scenes.hpp"
#include "test_weights.hpp"

using namespace lesson12;
using course::testing::Approx;
using course::testing::Contains;

namespace {

std::uint32_t bits_of(float f) {
  std::uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

std::vector<std::uint8_t> bytes_of(const std::string& s) {
  return {s.begin(), s.end()};
}

WeightsFile small_weights() {
  WeightsFile w;
  w.model = "yolov8n";
  w.num_classes = 6;
  w.reg_max = 16;
  w.bn_eps = 1e-3f;
  w.input_h = 640;
  w.input_w = 480;
  w.class_names = {"red", "green", "blue", "yellow", "magenta", "cyan"};
  w.seed = 12345678901ull;
  w.tensors["a.weight"] = {{2, 1, 3, 3}, {}};
  for (int i = 0; i < 18; ++i) w.tensors["a.weight"].data.push_back(0.25f * i - 2.0f);
  w.tensors["b"] = {{3}, {1.0f, -0.0f, 3.0e-39f}};  // a subnormal float survives too
  w.tensors["c.bias"] = {{1}, {std::numeric_limits<float>::infinity()}};
  return w;
}

// A one-layer definition on an input of c x h x w; returns the layer for the caller to fill.
Layer& one_layer(NetworkDefinition& net, LayerKind kind, int c, int h, int w, int out_c, int out_h,
                 int out_w) {
  net.tensors = {{"x", c, h, w}, {"y", out_c, out_h, out_w}};
  net.input = 0;
  net.output = 1;
  Layer l;
  l.kind = kind;
  l.name = "layer";
  l.inputs = {0};
  l.output = 1;
  net.layers = {l};
  return net.layers[0];
}

}  // namespace

// ------------------------------------------------------------------------------------ f16

TEST_CASE("half_to_float: known bit patterns", "[network]") {
  CHECK(bits_of(half_to_float(0x0000)) == 0x00000000u);
  CHECK(bits_of(half_to_float(0x8000)) == 0x80000000u);  // -0 keeps its sign
  CHECK(half_to_float(0x3c00) == 1.0f);
  CHECK(half_to_float(0xc000) == -2.0f);
  CHECK(half_to_float(0x3555) == 0.333251953125f);
  CHECK(half_to_float(0x7bff) == 65504.0f);                  // largest finite
  CHECK(half_to_float(0x0400) == std::ldexp(1.0f, -14));     // smallest normal
  CHECK(half_to_float(0x0001) == std::ldexp(1.0f, -24));     // smallest subnormal
  CHECK(half_to_float(0x03ff) == std::ldexp(1023.0f, -24));  // largest subnormal
  CHECK(half_to_float(0x8200) == -std::ldexp(1.0f, -15));    // negative subnormal
  CHECK(half_to_float(0x7c00) == std::numeric_limits<float>::infinity());
  CHECK(half_to_float(0xfc00) == -std::numeric_limits<float>::infinity());
  CHECK(bits_of(half_to_float(0x7e00)) == 0x7fc00000u);  // quiet NaN
  CHECK(bits_of(half_to_float(0x7c01)) == 0x7f802000u);  // signalling NaN, payload kept
  CHECK(bits_of(half_to_float(0xfe01)) == 0xffc02000u);
}

TEST_CASE("half_to_float: all 65536 patterns equal (-1)^s 2^(e-15) (1 + m/1024)", "[network]") {
  for (std::uint32_t h = 0; h < 0x10000u; ++h) {
    const int s = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    const float got = half_to_float(static_cast<std::uint16_t>(h));
    if (e == 31) {
      REQUIRE(std::isnan(got) == (m != 0));
      REQUIRE(std::signbit(got) == (s != 0));
      continue;
    }
    const double v = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
    const double expected = s ? -v : v;
    INFO("half 0x" << std::hex << h);
    REQUIRE(static_cast<double>(got) == expected);
    REQUIRE(std::signbit(got) == (s != 0));
  }
}

// ----------------------------------------------------------------------------- weights file

TEST_CASE("weights file: serialize and parse round trip, bit exact", "[network]") {
  const WeightsFile w = small_weights();
  const std::vector<std::uint8_t> bytes = serialize_weights(w);
  const std::string head(bytes.begin(), bytes.begin() + 40);
  CHECK(head.rfind("course-detector-weights 1\nmodel yolov8n\n", 0) == 0);
  const WeightsFile r = parse_weights(bytes, "roundtrip");
  CHECK(r.path == "roundtrip");
  CHECK(r.model == w.model);
  CHECK(r.num_classes == 6);
  CHECK(r.reg_max == 16);
  CHECK(r.bn_eps == w.bn_eps);
  CHECK(r.input_h == 640);
  CHECK(r.input_w == 480);
  CHECK(r.class_names == w.class_names);
  CHECK(r.seed == w.seed);
  REQUIRE(r.tensors.size() == w.tensors.size());
  for (const auto& [name, t] : w.tensors) {
    const WeightTensor& got = r.get(name, t.shape);
    REQUIRE(got.data.size() == t.data.size());
    for (std::size_t i = 0; i < t.data.size(); ++i)
      CHECK(bits_of(got.data[i]) == bits_of(t.data[i]));
  }
}

TEST_CASE("weights file: f16 tensors are converted, offsets honoured", "[network]") {
  // Two tensors, the f16 one second at a 64-byte offset, as the exporter writes them.
  std::string text =
      "course-detector-weights 1\nmodel yolov8n\nnum_classes 6\nreg_max 16\nbn_eps 0.001\n"
      "input 640 640\nclasses red green blue yellow magenta cyan\nseed 7\nextra_key ignored\n"
      "tensors 2\nb f32 1 2 0\nw f16 2 2 2 64\ndata 72\n";
  std::vector<std::uint8_t> bytes = bytes_of(text);
  std::vector<std::uint8_t> data(72, 0xee);
  const float b[2] = {0.5f, -3.25f};
  std::memcpy(data.data(), b, 8);  // little-endian host
  const std::uint16_t halves[4] = {0x3c00, 0x0001, 0xfc00, 0xb800};
  for (int i = 0; i < 4; ++i) {
    data[64 + 2 * i] = static_cast<std::uint8_t>(halves[i] & 0xff);
    data[64 + 2 * i + 1] = static_cast<std::uint8_t>(halves[i] >> 8);
  }
  bytes.insert(bytes.end(), data.begin(), data.end());
  const WeightsFile w = parse_weights(bytes, "f16 file");
  CHECK(w.seed == 7);
  CHECK(w.get("b", {2}).data == std::vector<float>{0.5f, -3.25f});
  const auto& t = w.get("w", {2, 2}).data;
  CHECK(t[0] == 1.0f);
  CHECK(t[1] == std::ldexp(1.0f, -24));
  CHECK(t[2] == -std::numeric_limits<float>::infinity());
  CHECK(t[3] == -0.5f);
}

TEST_CASE("weights file: every bad file names the file and what was expected", "[network]") {
  const std::vector<std::uint8_t> good = serialize_weights(small_weights());
  SECTION("missing file") {
    CHECK_THROWS_WITH(read_weights("/nonexistent/dir/x.weights"),
                      Contains("/nonexistent/dir/x.weights") && Contains("cannot open"));
  }
  SECTION("wrong first line") {
    std::vector<std::uint8_t> bad = good;
    bad[0] = 'C';
    CHECK_THROWS_AS(parse_weights(bad, "bad.weights"), std::runtime_error);
    CHECK_THROWS_WITH(parse_weights(bad, "bad.weights"),
                      Contains("bad.weights") &&
                          Contains("expected first line \"course-detector-weights 1\"") &&
                          Contains("Course-detector"));
    CHECK_THROWS_WITH(parse_weights({}, "empty.weights"), Contains("expected first line"));
  }
  SECTION("truncated data block") {
    std::vector<std::uint8_t> bad(good.begin(), good.end() - 5);
    CHECK_THROWS_WITH(parse_weights(bad, "short.weights"),
                      Contains("short.weights") && Contains("truncated") &&
                          Contains("bytes of data after the header"));
  }
  SECTION("truncated header") {
    std::vector<std::uint8_t> bad(good.begin(), good.begin() + 60);
    CHECK_THROWS_WITH(parse_weights(bad, "cut.weights"),
                      Contains("cut.weights") && Contains("truncated header"));
  }
  SECTION("bytes after the data block") {
    std::vector<std::uint8_t> bad = good;
    bad.push_back(0);
    CHECK_THROWS_WITH(parse_weights(bad, "long.weights"),
                      Contains("expected the file to end after"));
  }
  SECTION("a tensor outside the data block") {
    const std::string text =
        "course-detector-weights 1\ntensors 1\nw f32 1 4 64\ndata 64\n" + std::string(64, '\0');
    CHECK_THROWS_WITH(parse_weights(bytes_of(text), "out.weights"),
                      Contains("tensor w") && Contains("outside the data block of 64 bytes"));
  }
  SECTION("a malformed tensor line") {
    const std::string text =
        "course-detector-weights 1\ntensors 1\nw f64 1 4 0\ndata 16\n" + std::string(16, '\0');
    CHECK_THROWS_WITH(parse_weights(bytes_of(text), "dtype.weights"),
                      Contains("f16|f32") && Contains("line 3"));
  }
  SECTION("missing tensor") {
    const WeightsFile w = parse_weights(good, "small.weights");
    CHECK_THROWS_WITH(w.get("model.0.conv.weight", {16, 3, 3, 3}),
                      Contains("small.weights") && Contains("missing tensor model.0.conv.weight") &&
                          Contains("[16, 3, 3, 3]"));
    // yolov8n() reports the first tensor it needs and does not find.
    CHECK_THROWS_WITH(yolov8n(w, 64, 64), Contains("missing tensor model.0.conv.weight"));
  }
  SECTION("wrong shape") {
    const WeightsFile w = parse_weights(good, "small.weights");
    CHECK_THROWS_WITH(w.get("a.weight", {2, 1, 1, 3}),
                      Contains("small.weights") &&
                          Contains("tensor a.weight has shape [2, 1, 3, 3]") &&
                          Contains("expected [2, 1, 1, 3]"));
    WeightsFile y = testing::random_yolov8n_weights(1);
    y.tensors["model.5.bn.running_var"].shape = {127};
    y.tensors["model.5.bn.running_var"].data.resize(127);
    CHECK_THROWS_WITH(yolov8n(y, 64, 64),
                      Contains("model.5.bn.running_var has shape [127], expected [128]"));
  }
}

// --------------------------------------------------------------------------- the definition

TEST_CASE("yolov8n: the README's tensors, sizes and candidate count", "[network]") {
  const WeightsFile w = testing::random_yolov8n_weights(3);
  const auto shapes = testing::yolov8n_shapes(kNumClasses);
  CHECK(shapes.size() == 297);
  std::size_t params = 0;
  for (const auto& [name, shape] : shapes) {
    if (name.find("running_") != std::string::npos) continue;
    std::size_t n = 1;
    for (int d : shape) n *= static_cast<std::size_t>(d);
    params += n;
  }
  CHECK(params == 3'012'002);  // Ultralytics: 3,012,018 with the DFL's 16 fixed weights
  CHECK(num_candidates(640, 640) == 8400);
  CHECK(num_candidates(96, 128) == 12 * 16 + 6 * 8 + 3 * 4);

  const NetworkDefinition net = yolov8n(w, 96, 128);
  CHECK(net.num_classes == 6);
  const TensorDesc& out = net.tensors.at(static_cast<std::size_t>(net.output));
  CHECK(out.c == 10);
  CHECK(out.w == num_candidates(96, 128));
  int convs = 0, bns = 0;
  std::size_t conv_weights = 0;
  for (const Layer& l : net.layers) {
    convs += l.kind == LayerKind::conv;
    bns += l.kind == LayerKind::batch_norm;
    conv_weights += l.weight.size();
  }
  CHECK(convs == 63);  // 64 in Ultralytics' count, with the DFL's
  CHECK(bns == 57);
  std::size_t stored = 0;
  for (const auto& [name, shape] : shapes) {
    if (shape.size() == 4) stored += w.tensors.at(name).data.size();
  }
  CHECK(conv_weights == stored);  // every conv weight is read
  // P3, P4, P5 at strides 8, 16, 32.
  for (const Layer& l : net.layers) {
    if (l.kind != LayerKind::detect) continue;
    CHECK(net.tensors[static_cast<std::size_t>(l.inputs[0])].h == 12);
    CHECK(net.tensors[static_cast<std::size_t>(l.inputs[2])].w == 8);
    CHECK(net.tensors[static_cast<std::size_t>(l.inputs[5])].c == 6);
  }
  CHECK_THROWS_AS(yolov8n(w, 100, 128), std::invalid_argument);
  CHECK_THROWS_AS(yolov8n(w, 0, 0), std::invalid_argument);
}

// ---------------------------------------------------------------- reference, layer by layer

TEST_CASE("run_reference: convolution by hand (padding, stride, bias, two channels)", "[network]") {
  NetworkDefinition net;
  Layer& l = one_layer(net, LayerKind::conv, 2, 3, 3, 1, 3, 3);
  l.kernel = 3;
  l.pad = 1;
  l.weight.assign(18, 1.0f);
  for (int i = 9; i < 18; ++i) l.weight[i] = -1.0f;  // channel 1 subtracts
  l.bias = {0.5f};
  // Channel 0: 1..9, channel 1: all 1.
  std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  // Neighbourhood sums of 1..9 minus the count of in-image taps, plus 0.5.
  const std::vector<float> expected = {12 - 4 + 0.5f, 21 - 6 + 0.5f, 16 - 4 + 0.5f,
                                       27 - 6 + 0.5f, 45 - 9 + 0.5f, 33 - 6 + 0.5f,
                                       24 - 4 + 0.5f, 39 - 6 + 0.5f, 28 - 4 + 0.5f};
  CHECK(run_reference(net, x) == expected);

  // Stride 2 of the same: output 2 x 2 at input pixels (0,0), (0,2), (2,0), (2,2).
  net.tensors[1].h = net.tensors[1].w = 2;
  net.layers[0].stride = 2;
  CHECK(run_reference(net, x) ==
        std::vector<float>{expected[0], expected[2], expected[6], expected[8]});

  // 1x1 convolution without bias mixing two channels into two: y_o = sum_c w[o][c] x_c.
  NetworkDefinition one;
  Layer& p = one_layer(one, LayerKind::conv, 2, 1, 2, 2, 1, 2);
  p.weight = {1.0f, 2.0f, -3.0f, 0.25f};
  CHECK(run_reference(one, {1, 2, 10, 20}) == std::vector<float>{21, 42, -0.5f, -1});
}

TEST_CASE("run_reference: BatchNorm, SiLU, add, slice, concat by hand", "[network]") {
  NetworkDefinition bn;
  Layer& b = one_layer(bn, LayerKind::batch_norm, 2, 1, 2, 2, 1, 2);
  b.gamma = {2.0f, 1.0f};
  b.beta = {0.5f, -1.0f};
  b.mean = {1.0f, 0.0f};
  b.var = {3.0f, 0.0f};
  b.eps = 1.0f;
  // Channel 0: (x - 1) / 2 * 2 + 0.5; channel 1: x / 1 - 1.
  CHECK(run_reference(bn, {1, 3, 4, -4}) == std::vector<float>{0.5f, 2.5f, 3, -5});

  NetworkDefinition act;
  one_layer(act, LayerKind::silu, 1, 1, 3, 1, 1, 3);
  const auto s = run_reference(act, {0.0f, 1.0f, -1.0f});
  CHECK(s[0] == 0.0f);
  CHECK(s[1] == Approx(0.7310585786300049).epsilon(1e-7));
  CHECK(s[2] == Approx(-0.2689414213699951).epsilon(1e-7));

  // x -> slice [1, 3) -> s; add(s, s) and concat(x, s).
  NetworkDefinition net;
  net.tensors = {{"x", 3, 1, 1}, {"s", 2, 1, 1}, {"sum", 2, 1, 1}, {"cat", 5, 1, 1}};
  Layer slice;
  slice.kind = LayerKind::slice;
  slice.inputs = {0};
  slice.output = 1;
  slice.channel_begin = 1;
  slice.channel_end = 3;
  Layer add;
  add.kind = LayerKind::add;
  add.inputs = {1, 1};
  add.output = 2;
  Layer cat;
  cat.kind = LayerKind::concat;
  cat.inputs = {0, 1};
  cat.output = 3;
  net.layers = {slice, add, cat};
  net.output = 3;
  std::vector<std::vector<float>> tensors;
  CHECK(run_reference(net, {1, 2, 3}, &tensors) == std::vector<float>{1, 2, 3, 2, 3});
  CHECK(tensors[2] == std::vector<float>{4, 6});
}

TEST_CASE("run_reference: max pool 5x5 (padding never wins) and nearest upsample", "[network]") {
  NetworkDefinition pool;
  Layer& p = one_layer(pool, LayerKind::max_pool, 1, 3, 3, 1, 3, 3);
  p.kernel = 5;
  p.stride = 1;
  p.pad = 2;
  // All negative: zero padding would win if padding were taken as a value.
  CHECK(run_reference(pool, {-9, -8, -7, -6, -5, -4, -3, -2, -1}) == std::vector<float>(9, -1.0f));
  NetworkDefinition pool3;
  Layer& q = one_layer(pool3, LayerKind::max_pool, 1, 1, 5, 1, 1, 5);
  q.kernel = 3;
  q.stride = 1;
  q.pad = 1;
  CHECK(run_reference(pool3, {-1, -5, -2, -7, -3}) == std::vector<float>{-1, -1, -2, -2, -3});

  NetworkDefinition up;
  one_layer(up, LayerKind::upsample, 1, 2, 2, 1, 4, 4);
  CHECK(run_reference(up, {1, 2, 3, 4}) ==
        std::vector<float>{1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4});
}

TEST_CASE("run_reference: detect decode by hand (DFL softmax, anchors, stride, sigmoid)",
          "[network]") {
  // One level, stride 8, a 1 x 2 grid, reg_max 4, one class. The box and class logits are
  // slices of the one input: channels 0..15 and 16.
  NetworkDefinition net;
  net.tensors = {{"in", 17, 1, 2}, {"box", 16, 1, 2}, {"cls", 1, 1, 2}, {"out", 5, 1, 2}};
  Layer d;
  d.kind = LayerKind::detect;
  d.strides = {8};
  d.reg_max = 4;
  d.num_classes = 1;
  Layer box, cls;
  box.kind = cls.kind = LayerKind::slice;
  box.inputs = cls.inputs = {0};
  box.output = 1;
  box.channel_begin = 0;
  box.channel_end = 16;
  cls.output = 2;
  cls.channel_begin = 16;
  cls.channel_end = 17;
  d.inputs = {1, 2};
  d.output = 3;
  net.layers = {box, cls, d};
  net.output = 3;
  // Pixel x = 1 (anchor 1.5, 0.5); pixel 0 all zero (every distance 1.5).
  //   l: uniform -> 1.5;   t: logit 50 at bin 2, 0 elsewhere -> ~2
  //   r: [0, ln 3, 0, 0] -> p = [1, 3, 1, 1] / 6 -> 8/6;   b: all 1000 -> 1.5 (needs the max)
  std::vector<float> in(34, 0.0f);
  auto set = [&](int channel, int x, float v) {
    in[static_cast<std::size_t>(channel) * 2 + x] = v;
  };
  set(4 + 2, 1, 50.0f);
  set(8 + 1, 1, static_cast<float>(std::log(3.0)));
  for (int i = 0; i < 4; ++i) set(12 + i, 1, 1000.0f);
  set(16, 0, 0.0f);
  set(16, 1, static_cast<float>(std::log(3.0)));
  const auto out = run_reference(net, in);
  REQUIRE(out.size() == 10);
  // Pixel 0: box (0.5 - 1.5, 0.5 - 1.5, 0.5 + 1.5, 0.5 + 1.5) * 8.
  CHECK(out[0] == Approx(4.0).epsilon(1e-7));   // cx
  CHECK(out[2] == Approx(4.0).epsilon(1e-7));   // cy
  CHECK(out[4] == Approx(24.0).epsilon(1e-7));  // w
  CHECK(out[6] == Approx(24.0).epsilon(1e-7));  // h
  CHECK(out[8] == 0.5f);
  // Pixel 1: x1 = 0, y1 = -1.5, x2 = 1.5 + 8/6, y2 = 2.
  const double t = 2.0;  // 50 logits above the rest: p = 1 - 3e-22
  CHECK(out[1] == Approx((0.0 + 1.5 + 8.0 / 6.0) / 2 * 8).epsilon(1e-6));
  CHECK(out[3] == Approx((0.5 - t + 0.5 + 1.5) / 2 * 8).epsilon(1e-6));
  CHECK(out[5] == Approx((1.5 + 8.0 / 6.0) * 8).epsilon(1e-6));
  CHECK(out[7] == Approx((t + 1.5) * 8).epsilon(1e-6));
  CHECK(out[9] == Approx(0.75).epsilon(1e-7));
  CHECK(std::isfinite(out[7]));
}

TEST_CASE("run_reference: YOLOv8n at 64 x 64 runs and gives sane output", "[network]") {
  const NetworkDefinition net = yolov8n(testing::random_yolov8n_weights(5), 64, 64);
  std::vector<float> input(3 * 64 * 64);
  for (std::size_t i = 0; i < input.size(); ++i)
    input[i] = static_cast<float>((i * 37) % 256) / 255;
  std::vector<std::vector<float>> tensors;
  const auto out = run_reference(net, input, &tensors);
  const int n = num_candidates(64, 64);
  REQUIRE(out.size() == static_cast<std::size_t>(10 * n));
  CHECK(tensors.size() == net.tensors.size());
  for (int i = 0; i < n; ++i) {
    CHECK(out[static_cast<std::size_t>(2 * n + i)] > 0.0f);  // widths are positive
    for (int k = 4; k < 10; ++k) {
      const float p = out[static_cast<std::size_t>(k * n + i)];
      CHECK((p >= 0.0f && p <= 1.0f));
    }
  }
  CHECK_THROWS_AS(run_reference(net, std::vector<float>(10)), std::invalid_argument);
}

// ------------------------------------------------------------------------------- golden test

namespace {

struct GoldenCase {
  std::string name;
  std::uint64_t seed = 0;
  int h = 0, w = 0, rows = 0, cols = 0;
  std::vector<float> output;
};

// golden.bin (train/train_detector.py): "course-detector-golden 1", one line per case
// "case NAME SEED HEIGHT WIDTH OUT_ROWS OUT_COLS OFFSET", "data BYTES", '\n', float32 data.
std::vector<GoldenCase> read_golden(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw std::runtime_error(path +
                             " is missing: train/train_detector.py writes it next to "
                             "yolov8n_scenes.weights, and both are committed with the lesson");
  }
  std::string line;
  std::getline(in, line);
  if (line != "course-detector-golden 1") {
    throw std::runtime_error(path + ": expected first line \"course-detector-golden 1\"");
  }
  std::vector<GoldenCase> cases;
  std::vector<std::size_t> offsets;
  std::size_t bytes = 0;
  while (std::getline(in, line)) {
    std::istringstream s(line);
    std::string key;
    s >> key;
    if (key == "data") {
      s >> bytes;
      break;
    }
    GoldenCase c;
    std::size_t offset = 0;
    s >> c.name >> c.seed >> c.h >> c.w >> c.rows >> c.cols >> offset;
    if (key != "case" || s.fail()) throw std::runtime_error(path + ": bad line \"" + line + "\"");
    cases.push_back(c);
    offsets.push_back(offset);
  }
  std::vector<char> data(bytes);
  in.read(data.data(), static_cast<std::streamsize>(bytes));
  if (static_cast<std::size_t>(in.gcount()) != bytes) {
    throw std::runtime_error(path + ": truncated data block");
  }
  for (std::size_t k = 0; k < cases.size(); ++k) {
    GoldenCase& c = cases[k];
    c.output.resize(static_cast<std::size_t>(c.rows) * c.cols);
    if (offsets[k] + c.output.size() * 4 > bytes)
      throw std::runtime_error(path + ": case outside data");
    std::memcpy(c.output.data(), data.data() + offsets[k],
                c.output.size() * 4);  // little-endian host
  }
  return cases;
}

}  // namespace

TEST_CASE("run_reference: the trained weights reproduce PyTorch's golden outputs",
          "[network][golden]") {
  // The golden outputs are PyTorch's forward in float64 rounded to float32, from exactly the
  // stored (f16-rounded) weights. The reference accumulates in double but stores float between
  // layers; the difference measured is about 1e-7 relative, 1e-4 leaves a wide margin.
  const std::string dir = LESSON12_DATA_DIR;
  const WeightsFile weights = read_weights(dir + "/yolov8n_scenes.weights");
  CHECK(weights.num_classes == kNumClasses);
  CHECK(weights.class_names ==
        std::vector<std::string>{"red", "green", "blue", "yellow", "magenta", "cyan"});
  const std::vector<GoldenCase> cases = read_golden(dir + "/golden.bin");
  REQUIRE(cases.size() >= 2);
  for (const GoldenCase& c : cases) {
    INFO("case " << c.name << " (scene " << c.seed << ", " << c.w << " x " << c.h << ")");
    REQUIRE(c.rows == 4 + kNumClasses);
    REQUIRE(c.cols == num_candidates(c.h, c.w));
    std::vector<std::uint8_t> rgb(static_cast<std::size_t>(c.h) * c.w * 3);
    render_scene(c.seed, c.w, c.h, rgb.data());
    std::vector<float> input(rgb.size());
    const std::size_t plane = static_cast<std::size_t>(c.h) * c.w;
    for (std::size_t p = 0; p < plane; ++p) {
      for (int ch = 0; ch < 3; ++ch) input[ch * plane + p] = rgb[p * 3 + ch] / 255.0f;
    }
    const std::vector<float> out = run_reference(yolov8n(weights, c.h, c.w), input);
    REQUIRE(out.size() == c.output.size());
    double worst = 0.0;
    std::size_t at = 0;
    for (std::size_t i = 0; i < out.size(); ++i) {
      const double e = std::abs(static_cast<double>(out[i]) - c.output[i]) /
                       std::max(1.0, std::abs(static_cast<double>(c.output[i])));
      if (e > worst) {
        worst = e;
        at = i;
      }
    }
    std::printf("golden %-12s %4d x %-4d max error %.3g (row %zu, candidate %zu)\n", c.name.c_str(),
                c.w, c.h, worst, at / c.cols, at % c.cols);
    CHECK(worst < 1e-4);
  }
}
