// The weights file, YOLOv8n's network definition, and the CPU reference that runs it.
//
//   half_to_float, parse_weights, read_weights, serialize_weights     the file (network.hpp)
//   WeightsFile::get                                                   shape-checked lookup
//   yolov8n()        Ultralytics' modules (Conv, C2f, Bottleneck, SPPF, Detect) spelled out as
//                    primitive layers, named after the state_dict keys they read
//   run_reference()  layer by layer, NCHW, double accumulation, float between layers
//
// Host code only.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "network.hpp"

namespace lesson12 {

// ------------------------------------------------------------------------------ weights file

float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu;
  std::uint32_t mantissa = h & 0x3ffu;
  std::uint32_t bits = 0;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);  // inf, or NaN with its payload
  } else if (exponent != 0) {
    bits = sign | ((exponent - 15 + 127) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;  // +-0
  } else {
    // Subnormal half: mantissa * 2^-24. Every one is a normal float: shift the leading one into
    // the implicit bit's place and lower the exponent once per shift.
    int e = -14;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --e;
    }
    bits = sign | (static_cast<std::uint32_t>(e + 127) << 23) | ((mantissa & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

namespace {

std::string shape_string(const std::vector<int>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

[[noreturn]] void bad_file(const std::string& path, const std::string& what) {
  throw std::runtime_error("weights file " + path + ": " + what);
}

constexpr const char* kMagic = "course-detector-weights 1";

}  // namespace

const WeightTensor& WeightsFile::get(const std::string& name, const std::vector<int>& shape) const {
  const auto it = tensors.find(name);
  if (it == tensors.end()) {
    bad_file(path, "missing tensor " + name + " (expected shape " + shape_string(shape) + ")");
  }
  if (it->second.shape != shape) {
    bad_file(path, "tensor " + name + " has shape " + shape_string(it->second.shape) +
                       ", expected " + shape_string(shape));
  }
  return it->second;
}

WeightsFile parse_weights(const std::vector<std::uint8_t>& bytes, const std::string& name) {
  WeightsFile file;
  file.path = name;
  std::size_t pos = 0;
  int line_number = 0;
  // The header is text up to and including the "data BYTES" line; the data block follows its '\n'.
  auto next_line = [&](const char* expected) {
    const auto begin = bytes.begin() + static_cast<std::ptrdiff_t>(pos);
    const auto end = std::find(begin, bytes.end(), static_cast<std::uint8_t>('\n'));
    if (end == bytes.end()) {
      bad_file(name, std::string("truncated header: expected ") + expected + " at line " +
                         std::to_string(line_number + 1));
    }
    pos = static_cast<std::size_t>(end - bytes.begin()) + 1;
    ++line_number;
    return std::string(begin, end);
  };
  auto where = [&]() { return " (line " + std::to_string(line_number) + ")"; };

  const std::string first = bytes.empty() ? std::string() : next_line("the first line");
  if (first != kMagic) {
    bad_file(name, std::string("expected first line \"") + kMagic + "\", found \"" +
                       first.substr(0, 60) + "\"");
  }
  long long tensor_count = -1;
  std::vector<std::pair<std::string, std::pair<std::string, std::size_t>>>
      entries;  // dtype, offset
  std::vector<std::vector<int>> shapes;
  long long data_bytes = -1;
  while (data_bytes < 0) {
    std::istringstream line(next_line("\"data BYTES\""));
    std::string key;
    line >> key;
    if (key == "model") {
      line >> file.model;
    } else if (key == "num_classes") {
      line >> file.num_classes;
    } else if (key == "reg_max") {
      line >> file.reg_max;
    } else if (key == "bn_eps") {
      line >> file.bn_eps;
    } else if (key == "input") {
      line >> file.input_h >> file.input_w;
    } else if (key == "classes") {
      file.class_names.assign(std::istream_iterator<std::string>(line), {});
      line.clear();
    } else if (key == "seed") {
      line >> file.seed;
    } else if (key == "tensors") {
      line >> tensor_count;
      if (line.fail() || tensor_count < 0) bad_file(name, "expected \"tensors COUNT\"" + where());
      for (long long t = 0; t < tensor_count; ++t) {
        std::istringstream tl(next_line("a tensor line \"NAME DTYPE NDIM DIMS... OFFSET\""));
        std::string tname, dtype;
        int ndim = -1;
        tl >> tname >> dtype >> ndim;
        if (tl.fail() || (dtype != "f16" && dtype != "f32") || ndim < 0 || ndim > 8) {
          bad_file(name, "expected \"NAME f16|f32 NDIM DIMS... OFFSET\"" + where());
        }
        std::vector<int> shape(static_cast<std::size_t>(ndim));
        for (int& d : shape) tl >> d;
        long long offset = -1;
        tl >> offset;
        if (tl.fail() || offset < 0 ||
            std::any_of(shape.begin(), shape.end(), [](int d) { return d <= 0; })) {
          bad_file(name,
                   "tensor " + tname + ": expected positive dimensions and an offset" + where());
        }
        entries.push_back({tname, {dtype, static_cast<std::size_t>(offset)}});
        shapes.push_back(shape);
      }
      continue;  // the tensor lines were checked one by one
    } else if (key == "data") {
      line >> data_bytes;
      if (line.fail() || data_bytes < 0) bad_file(name, "expected \"data BYTES\"" + where());
      continue;
    } else if (key.empty()) {
      bad_file(name, "empty header line" + where());
    }
    // Another key: written by a newer exporter, not needed here.
    if (line.fail()) bad_file(name, "malformed \"" + key + "\" line" + where());
  }
  if (tensor_count < 0) bad_file(name, "expected a \"tensors COUNT\" line before \"data\"");
  const std::size_t available = bytes.size() - pos;
  if (available < static_cast<std::size_t>(data_bytes)) {
    bad_file(name, "truncated: expected " + std::to_string(data_bytes) +
                       " bytes of data after the header, found " + std::to_string(available));
  }
  if (available > static_cast<std::size_t>(data_bytes)) {
    bad_file(name, "expected the file to end after " + std::to_string(data_bytes) +
                       " bytes of data, found " + std::to_string(available - data_bytes) + " more");
  }
  const std::uint8_t* data = bytes.data() + pos;
  for (std::size_t t = 0; t < entries.size(); ++t) {
    const std::string& tname = entries[t].first;
    const bool f16 = entries[t].second.first == "f16";
    const std::size_t offset = entries[t].second.second;
    WeightTensor tensor;
    tensor.shape = shapes[t];
    // The element count, checked against the data block as it grows: a crafted shape must not
    // wrap the product around to a small number.
    std::size_t count = 1;
    for (int d : tensor.shape) {
      if (d < 0 ||
          (d > 0 && count > static_cast<std::size_t>(data_bytes) / static_cast<std::size_t>(d))) {
        bad_file(name, "tensor " + tname + " has a shape larger than the data block of " +
                           std::to_string(data_bytes) + " bytes");
      }
      count *= static_cast<std::size_t>(d);
    }
    const std::size_t size = count * (f16 ? 2 : 4);
    if (offset > static_cast<std::size_t>(data_bytes) ||
        size > static_cast<std::size_t>(data_bytes) - offset) {
      bad_file(name, "tensor " + tname + " (" + std::to_string(size) + " bytes at offset " +
                         std::to_string(offset) + ") lies outside the data block of " +
                         std::to_string(data_bytes) + " bytes");
    }
    tensor.data.resize(count);
    const std::uint8_t* src = data + offset;
    for (std::size_t i = 0; i < count; ++i) {  // little-endian, whatever the host's order
      if (f16) {
        tensor.data[i] =
            half_to_float(static_cast<std::uint16_t>(src[2 * i] | src[2 * i + 1] << 8));
      } else {
        const std::uint32_t bits = static_cast<std::uint32_t>(src[4 * i]) |
                                   static_cast<std::uint32_t>(src[4 * i + 1]) << 8 |
                                   static_cast<std::uint32_t>(src[4 * i + 2]) << 16 |
                                   static_cast<std::uint32_t>(src[4 * i + 3]) << 24;
        std::memcpy(&tensor.data[i], &bits, 4);
      }
    }
    if (!file.tensors.emplace(tname, std::move(tensor)).second) {
      bad_file(name, "tensor " + tname + " appears twice");
    }
  }
  return file;
}

WeightsFile read_weights(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) bad_file(path, "cannot open (expected a file written by train/train_detector.py)");
  std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                  std::istreambuf_iterator<char>());
  return parse_weights(bytes, path);
}

std::vector<std::uint8_t> serialize_weights(const WeightsFile& weights) {
  std::ostringstream header;
  header << kMagic << "\n";
  header << "model " << weights.model << "\n";
  header << "num_classes " << weights.num_classes << "\n";
  header << "reg_max " << weights.reg_max << "\n";
  header.precision(std::numeric_limits<float>::max_digits10);
  header << "bn_eps " << weights.bn_eps << "\n";
  header << "input " << weights.input_h << " " << weights.input_w << "\n";
  header << "classes";
  for (const auto& c : weights.class_names) header << " " << c;
  header << "\n";
  header << "seed " << weights.seed << "\n";
  header << "tensors " << weights.tensors.size() << "\n";
  std::size_t offset = 0;
  for (const auto& [name, tensor] : weights.tensors) {
    header << name << " f32 " << tensor.shape.size();
    for (int d : tensor.shape) header << " " << d;
    header << " " << offset << "\n";
    offset += (tensor.data.size() * 4 + 63) / 64 * 64;  // 64-aligned, as the exporter writes
  }
  header << "data " << offset << "\n";
  const std::string text = header.str();
  std::vector<std::uint8_t> bytes(text.begin(), text.end());
  const std::size_t data_start = bytes.size();
  bytes.resize(data_start + offset, 0);
  std::size_t at = data_start;
  for (const auto& entry : weights.tensors) {
    const auto& tensor = entry.second;
    for (std::size_t i = 0; i < tensor.data.size(); ++i) {
      std::uint32_t bits;
      std::memcpy(&bits, &tensor.data[i], 4);
      for (int b = 0; b < 4; ++b)
        bytes[at + 4 * i + b] = static_cast<std::uint8_t>(bits >> (8 * b));
    }
    at += (tensor.data.size() * 4 + 63) / 64 * 64;
  }
  return bytes;
}

// ------------------------------------------------------------------------ network definition

int num_candidates(int input_h, int input_w) {
  return (input_h / 8) * (input_w / 8) + (input_h / 16) * (input_w / 16) +
         (input_h / 32) * (input_w / 32);
}

namespace {

// Builds the definition module by module; every helper returns its output tensor id.
class Builder {
 public:
  Builder(const WeightsFile& weights, NetworkDefinition& net) : weights_(weights), net_(net) {}

  int tensor(const std::string& name, int c, int h, int w) {
    net_.tensors.push_back({name, c, h, w});
    return static_cast<int>(net_.tensors.size()) - 1;
  }
  const TensorDesc& desc(int t) const { return net_.tensors[static_cast<std::size_t>(t)]; }

  int add_layer(Layer layer, int c, int h, int w) {
    layer.output = tensor(layer.name, c, h, w);
    net_.layers.push_back(std::move(layer));
    return net_.layers.back().output;
  }

  // nn.Conv2d(in, out, k, stride, padding k/2); weight OIHW from `prefix.weight`.
  int conv2d(const std::string& prefix, int x, int out, int k, int stride, bool bias) {
    const TensorDesc in = desc(x);
    Layer l;
    l.kind = LayerKind::conv;
    l.name = prefix;
    l.inputs = {x};
    l.kernel = k;
    l.stride = stride;
    l.pad = k / 2;
    l.weight = weights_.get(prefix + ".weight", {out, in.c, k, k}).data;
    if (bias) l.bias = weights_.get(prefix + ".bias", {out}).data;
    const int oh = (in.h + 2 * l.pad - k) / stride + 1, ow = (in.w + 2 * l.pad - k) / stride + 1;
    return add_layer(std::move(l), out, oh, ow);
  }

  // Ultralytics' Conv: conv (no bias) -> BatchNorm -> SiLU.
  int conv_block(const std::string& prefix, int x, int out, int k, int stride) {
    const int y = conv2d(prefix + ".conv", x, out, k, stride, false);
    Layer bn;
    bn.kind = LayerKind::batch_norm;
    bn.name = prefix + ".bn";
    bn.inputs = {y};
    bn.gamma = weights_.get(bn.name + ".weight", {out}).data;
    bn.beta = weights_.get(bn.name + ".bias", {out}).data;
    bn.mean = weights_.get(bn.name + ".running_mean", {out}).data;
    bn.var = weights_.get(bn.name + ".running_var", {out}).data;
    bn.eps = weights_.bn_eps;
    const TensorDesc d = desc(y);
    const int z = add_layer(std::move(bn), d.c, d.h, d.w);
    Layer act;
    act.kind = LayerKind::silu;
    act.name = prefix + ".act";
    act.inputs = {z};
    return add_layer(std::move(act), d.c, d.h, d.w);
  }

  int simple(LayerKind kind, const std::string& name, std::vector<int> inputs, int c, int h,
             int w) {
    Layer l;
    l.kind = kind;
    l.name = name;
    l.inputs = std::move(inputs);
    return add_layer(std::move(l), c, h, w);
  }

  int slice(const std::string& name, int x, int begin, int end) {
    Layer l;
    l.kind = LayerKind::slice;
    l.name = name;
    l.inputs = {x};
    l.channel_begin = begin;
    l.channel_end = end;
    const TensorDesc d = desc(x);
    return add_layer(std::move(l), end - begin, d.h, d.w);
  }

  int concat(const std::string& name, const std::vector<int>& inputs) {
    int c = 0;
    for (int t : inputs) c += desc(t).c;
    return simple(LayerKind::concat, name, inputs, c, desc(inputs[0]).h, desc(inputs[0]).w);
  }

  int max_pool(const std::string& name, int x, int k) {
    Layer l;
    l.kind = LayerKind::max_pool;
    l.name = name;
    l.inputs = {x};
    l.kernel = k;
    l.stride = 1;
    l.pad = k / 2;
    const TensorDesc d = desc(x);
    return add_layer(std::move(l), d.c, d.h, d.w);
  }

  int upsample(const std::string& name, int x) {
    const TensorDesc d = desc(x);
    return simple(LayerKind::upsample, name, {x}, d.c, 2 * d.h, 2 * d.w);
  }

  // C2f(c1, c2, n, shortcut): cv1 -> split in two -> n bottlenecks on the last half -> concat
  // of every half -> cv2.
  int c2f(const std::string& p, int x, int c2, int n, bool shortcut) {
    const int c = c2 / 2;
    const int y = conv_block(p + ".cv1", x, 2 * c, 1, 1);
    std::vector<int> parts = {slice(p + ".split0", y, 0, c), slice(p + ".split1", y, c, 2 * c)};
    for (int k = 0; k < n; ++k) {
      const std::string m = p + ".m." + std::to_string(k);
      const int in = parts.back();
      const int a = conv_block(m + ".cv1", in, c, 3, 1);
      int b = conv_block(m + ".cv2", a, c, 3, 1);
      if (shortcut) {
        const TensorDesc d = desc(b);
        b = simple(LayerKind::add, m + ".add", {in, b}, d.c, d.h, d.w);
      }
      parts.push_back(b);
    }
    return conv_block(p + ".cv2", concat(p + ".cat", parts), c2, 1, 1);
  }

  // SPPF(c1, c2, 5): cv1 -> three chained 5x5 max pools -> concat of all four -> cv2.
  int sppf(const std::string& p, int x, int c2) {
    const int y = conv_block(p + ".cv1", x, desc(x).c / 2, 1, 1);
    std::vector<int> parts = {y};
    for (int k = 1; k <= 3; ++k) {
      parts.push_back(max_pool(p + ".m (pool " + std::to_string(k) + ")", parts.back(), 5));
    }
    return conv_block(p + ".cv2", concat(p + ".cat", parts), c2, 1, 1);
  }

 private:
  const WeightsFile& weights_;
  NetworkDefinition& net_;
};

}  // namespace

NetworkDefinition yolov8n(const WeightsFile& weights, int input_h, int input_w) {
  if (input_h < 32 || input_w < 32 || input_h % 32 != 0 || input_w % 32 != 0) {
    throw std::invalid_argument("yolov8n: expected an input size of multiples of 32 (>= 32), got " +
                                std::to_string(input_h) + " x " + std::to_string(input_w));
  }
  if (weights.num_classes < 1 || weights.reg_max < 1) {
    throw std::runtime_error(
        "weights file " + weights.path + ": expected num_classes >= 1 and reg_max >= 1, got " +
        std::to_string(weights.num_classes) + " and " + std::to_string(weights.reg_max));
  }
  NetworkDefinition net;
  net.num_classes = weights.num_classes;
  Builder b(weights, net);
  net.input = b.tensor("images", 3, input_h, input_w);

  // Backbone.
  int x = b.conv_block("model.0", net.input, 16, 3, 2);
  x = b.conv_block("model.1", x, 32, 3, 2);
  x = b.c2f("model.2", x, 32, 1, true);
  x = b.conv_block("model.3", x, 64, 3, 2);
  const int p4_in = b.c2f("model.4", x, 64, 2, true);  // stride 8, to the head's model.14
  x = b.conv_block("model.5", p4_in, 128, 3, 2);
  const int p6 = b.c2f("model.6", x, 128, 2, true);  // stride 16, to model.11
  x = b.conv_block("model.7", p6, 256, 3, 2);
  x = b.c2f("model.8", x, 256, 1, true);
  const int p9 = b.sppf("model.9", x, 256);  // stride 32, to model.20

  // Neck (PAN): top-down, then bottom-up.
  x = b.upsample("model.10", p9);
  x = b.concat("model.11", {x, p6});
  const int p12 = b.c2f("model.12", x, 128, 1, false);
  x = b.upsample("model.13", p12);
  x = b.concat("model.14", {x, p4_in});
  const int p3 = b.c2f("model.15", x, 64, 1, false);
  x = b.conv_block("model.16", p3, 64, 3, 2);
  x = b.concat("model.17", {x, p12});
  const int p4 = b.c2f("model.18", x, 128, 1, false);
  x = b.conv_block("model.19", p4, 128, 3, 2);
  x = b.concat("model.20", {x, p9});
  const int p5 = b.c2f("model.21", x, 256, 1, false);

  // Detect: per level a box branch (cv2: 4 * reg_max DFL logits) and a class branch (cv3).
  const int levels[3] = {p3, p4, p5};
  const int c = weights.num_classes, reg = weights.reg_max;
  const int c2 = std::max({16, b.desc(p3).c / 4, 4 * reg});
  const int c3 = std::max(b.desc(p3).c, std::min(c, 100));
  Layer detect;
  detect.kind = LayerKind::detect;
  detect.name = "model.22";
  detect.strides = {8, 16, 32};
  detect.reg_max = reg;
  detect.num_classes = c;
  for (int i = 0; i < 3; ++i) {
    const std::string cv2 = "model.22.cv2." + std::to_string(i);
    const std::string cv3 = "model.22.cv3." + std::to_string(i);
    int box = b.conv_block(cv2 + ".0", levels[i], c2, 3, 1);
    box = b.conv_block(cv2 + ".1", box, c2, 3, 1);
    box = b.conv2d(cv2 + ".2", box, 4 * reg, 1, 1, true);
    int cls = b.conv_block(cv3 + ".0", levels[i], c3, 3, 1);
    cls = b.conv_block(cv3 + ".1", cls, c3, 3, 1);
    cls = b.conv2d(cv3 + ".2", cls, c, 1, 1, true);
    detect.inputs.push_back(box);
    detect.inputs.push_back(cls);
  }
  net.output = b.add_layer(std::move(detect), 4 + c, 1, num_candidates(input_h, input_w));
  return net;
}

// ------------------------------------------------------------------------------ CPU reference

void parallel_for(int count, double cost_per_item, const std::function<void(int, int)>& body) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int chunks = std::min(count, cores);
  if (chunks <= 1 || count * cost_per_item < 1e6) {
    if (count > 0) body(0, count);
    return;
  }
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(chunks));
  for (int t = 0; t < chunks; ++t) {
    const int begin = static_cast<int>(static_cast<long long>(count) * t / chunks);
    const int end = static_cast<int>(static_cast<long long>(count) * (t + 1) / chunks);
    threads.emplace_back(body, begin, end);
  }
  for (auto& t : threads) t.join();
}

void decode_box(const double* logits, int reg_max, double ax, double ay, double stride,
                double box[4]) {
  double dist[4];
  for (int side = 0; side < 4; ++side) {
    const double* l = logits + side * reg_max;
    const double m = *std::max_element(l, l + reg_max);  // exp never overflows
    double sum = 0.0, expectation = 0.0;
    for (int i = 0; i < reg_max; ++i) {
      const double p = std::exp(l[i] - m);
      sum += p;
      expectation += i * p;
    }
    dist[side] = expectation / sum;
  }
  const double x1 = ax - dist[0], y1 = ay - dist[1], x2 = ax + dist[2], y2 = ay + dist[3];
  box[0] = (x1 + x2) / 2 * stride;
  box[1] = (y1 + y2) / 2 * stride;
  box[2] = (x2 - x1) * stride;
  box[3] = (y2 - y1) * stride;
}

namespace {

int floor_div(int a, int b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

// NCHW convolution. Per output channel, the output plane accumulates in double one (input
// channel, tap) at a time: the inner loop walks a row of input and output contiguously (stride
// 1) and the tap's valid column range is computed once, so there is no bounds test inside it.
void conv_nchw(const Layer& l, const TensorDesc& in_d, const TensorDesc& out_d, const float* x,
               float* y) {
  const int cin = in_d.c, h = in_d.h, w = in_d.w, oh = out_d.h, ow = out_d.w;
  const int k = l.kernel, s = l.stride, p = l.pad;
  const double macs = static_cast<double>(cin) * k * k * oh * ow;
  parallel_for(out_d.c, macs, [&](int o_begin, int o_end) {
    std::vector<double> acc(static_cast<std::size_t>(oh) * ow);
    for (int o = o_begin; o < o_end; ++o) {
      std::fill(acc.begin(), acc.end(), l.bias.empty() ? 0.0 : static_cast<double>(l.bias[o]));
      for (int c = 0; c < cin; ++c) {
        const float* plane = x + static_cast<std::size_t>(c) * h * w;
        for (int r = 0; r < k; ++r) {
          for (int q = 0; q < k; ++q) {
            const double wv = l.weight[((static_cast<std::size_t>(o) * cin + c) * k + r) * k + q];
            // Output columns whose input column ox*s - p + q lies in [0, w).
            const int ox_begin = std::max(0, floor_div(p - q + s - 1, s));
            const int ox_end = std::min(ow, floor_div(w - 1 + p - q, s) + 1);
            const int shift = q - p;
            for (int oy = 0; oy < oh; ++oy) {
              const int iy = oy * s - p + r;
              if (iy < 0 || iy >= h) continue;
              const float* row = plane + static_cast<std::size_t>(iy) * w;
              double* out = acc.data() + static_cast<std::size_t>(oy) * ow;
              if (s == 1) {
                for (int ox = ox_begin; ox < ox_end; ++ox) out[ox] += wv * row[ox + shift];
              } else {
                for (int ox = ox_begin; ox < ox_end; ++ox) out[ox] += wv * row[ox * s + shift];
              }
            }
          }
        }
      }
      float* dst = y + static_cast<std::size_t>(o) * oh * ow;
      for (std::size_t i = 0; i < acc.size(); ++i) dst[i] = static_cast<float>(acc[i]);
    }
  });
}

double silu(double v) {
  return v / (1.0 + std::exp(-v));
}
double sigmoid(double v) {
  return 1.0 / (1.0 + std::exp(-v));
}

void check_tensor_size(const NetworkDefinition& net, int t, const std::vector<float>& data,
                       const std::string& layer) {
  const TensorDesc& d = net.tensors[static_cast<std::size_t>(t)];
  if (data.size() != static_cast<std::size_t>(d.c) * d.h * d.w) {
    throw std::invalid_argument("run_reference: layer " + layer + " reads tensor " + d.name +
                                " before it is computed");
  }
}

}  // namespace

std::vector<float> run_reference(const NetworkDefinition& net, const std::vector<float>& input,
                                 std::vector<std::vector<float>>* tensors_out) {
  const TensorDesc& in_d = net.tensors.at(static_cast<std::size_t>(net.input));
  const std::size_t in_size = static_cast<std::size_t>(in_d.c) * in_d.h * in_d.w;
  if (input.size() != in_size) {
    throw std::invalid_argument("run_reference: expected an input of [" + std::to_string(in_d.c) +
                                ", " + std::to_string(in_d.h) + ", " + std::to_string(in_d.w) +
                                "] = " + std::to_string(in_size) + " floats, got " +
                                std::to_string(input.size()));
  }
  std::vector<std::vector<float>> t(net.tensors.size());
  t[static_cast<std::size_t>(net.input)] = input;
  // Frees a tensor once its last reader has run (640 x 640 holds about 1 GB otherwise).
  std::vector<int> last_use(net.tensors.size(), -1);
  for (std::size_t i = 0; i < net.layers.size(); ++i) {
    for (int id : net.layers[i].inputs)
      last_use[static_cast<std::size_t>(id)] = static_cast<int>(i);
  }

  for (std::size_t li = 0; li < net.layers.size(); ++li) {
    const Layer& l = net.layers[li];
    for (int id : l.inputs) check_tensor_size(net, id, t[static_cast<std::size_t>(id)], l.name);
    const TensorDesc& od = net.tensors[static_cast<std::size_t>(l.output)];
    const TensorDesc& id0 = net.tensors[static_cast<std::size_t>(l.inputs.at(0))];
    const std::vector<float>& x = t[static_cast<std::size_t>(l.inputs[0])];
    std::vector<float> y(static_cast<std::size_t>(od.c) * od.h * od.w);
    const std::size_t plane = static_cast<std::size_t>(id0.h) * id0.w;
    switch (l.kind) {
      case LayerKind::conv:
        conv_nchw(l, id0, od, x.data(), y.data());
        break;
      case LayerKind::batch_norm:
        for (int c = 0; c < od.c; ++c) {
          const double scale = l.gamma[c] / std::sqrt(static_cast<double>(l.var[c]) + l.eps);
          for (std::size_t i = 0; i < plane; ++i) {
            const std::size_t at = c * plane + i;
            y[at] =
                static_cast<float>((x[at] - static_cast<double>(l.mean[c])) * scale + l.beta[c]);
          }
        }
        break;
      case LayerKind::silu:
        for (std::size_t i = 0; i < y.size(); ++i) y[i] = static_cast<float>(silu(x[i]));
        break;
      case LayerKind::add: {
        const std::vector<float>& x1 = t[static_cast<std::size_t>(l.inputs.at(1))];
        for (std::size_t i = 0; i < y.size(); ++i) {
          y[i] = static_cast<float>(static_cast<double>(x[i]) + x1[i]);
        }
        break;
      }
      case LayerKind::concat: {
        std::size_t at = 0;
        for (int id : l.inputs) {
          const auto& src = t[static_cast<std::size_t>(id)];
          std::copy(src.begin(), src.end(), y.begin() + static_cast<std::ptrdiff_t>(at));
          at += src.size();
        }
        break;
      }
      case LayerKind::slice:
        std::copy(x.begin() + static_cast<std::ptrdiff_t>(l.channel_begin * plane),
                  x.begin() + static_cast<std::ptrdiff_t>(l.channel_end * plane), y.begin());
        break;
      case LayerKind::max_pool:
        for (int c = 0; c < od.c; ++c) {
          for (int oy = 0; oy < od.h; ++oy) {
            for (int ox = 0; ox < od.w; ++ox) {
              float m = -std::numeric_limits<float>::infinity();  // padding never wins
              for (int r = 0; r < l.kernel; ++r) {
                const int iy = oy * l.stride - l.pad + r;
                if (iy < 0 || iy >= id0.h) continue;
                for (int q = 0; q < l.kernel; ++q) {
                  const int ix = ox * l.stride - l.pad + q;
                  if (ix < 0 || ix >= id0.w) continue;
                  m = std::max(m, x[c * plane + static_cast<std::size_t>(iy) * id0.w + ix]);
                }
              }
              y[(static_cast<std::size_t>(c) * od.h + oy) * od.w + ox] = m;
            }
          }
        }
        break;
      case LayerKind::upsample:
        for (int c = 0; c < od.c; ++c) {
          for (int oy = 0; oy < od.h; ++oy) {
            for (int ox = 0; ox < od.w; ++ox) {
              y[(static_cast<std::size_t>(c) * od.h + oy) * od.w + ox] =
                  x[c * plane + static_cast<std::size_t>(oy / 2) * id0.w + ox / 2];
            }
          }
        }
        break;
      case LayerKind::detect: {
        const int n_total = od.w, reg = l.reg_max, classes = l.num_classes;
        int n = 0;
        std::vector<double> logits(static_cast<std::size_t>(4 * reg));
        for (std::size_t level = 0; level < l.strides.size(); ++level) {
          const int box_id = l.inputs.at(2 * level), cls_id = l.inputs.at(2 * level + 1);
          const TensorDesc& bd = net.tensors[static_cast<std::size_t>(box_id)];
          const auto& box = t[static_cast<std::size_t>(box_id)];
          const auto& cls = t[static_cast<std::size_t>(cls_id)];
          const std::size_t lp = static_cast<std::size_t>(bd.h) * bd.w;
          for (int gy = 0; gy < bd.h; ++gy) {
            for (int gx = 0; gx < bd.w; ++gx, ++n) {
              const std::size_t pix = static_cast<std::size_t>(gy) * bd.w + gx;
              for (int j = 0; j < 4 * reg; ++j) logits[j] = box[j * lp + pix];
              double b[4];
              decode_box(logits.data(), reg, gx + 0.5, gy + 0.5, l.strides[level], b);
              for (int r = 0; r < 4; ++r) {
                y[static_cast<std::size_t>(r) * n_total + n] = static_cast<float>(b[r]);
              }
              for (int k = 0; k < classes; ++k) {
                y[static_cast<std::size_t>(4 + k) * n_total + n] =
                    static_cast<float>(sigmoid(cls[k * lp + pix]));
              }
            }
          }
        }
        if (n != n_total) {
          throw std::invalid_argument("run_reference: detect layer " + l.name + " has " +
                                      std::to_string(n) + " candidates, its output " +
                                      std::to_string(n_total));
        }
        break;
      }
    }
    t[static_cast<std::size_t>(l.output)] = std::move(y);
    if (!tensors_out) {
      for (int id : l.inputs) {
        if (last_use[static_cast<std::size_t>(id)] == static_cast<int>(li) && id != net.output) {
          std::vector<float>().swap(t[static_cast<std::size_t>(id)]);
        }
      }
    }
  }
  std::vector<float> out = t.at(static_cast<std::size_t>(net.output));
  if (tensors_out) *tensors_out = std::move(t);
  return out;
}

}  // namespace lesson12
