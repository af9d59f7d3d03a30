// Lesson 13: calibration on lesson 12's CPU reference (calibrate_graph.hpp). Host code.
#include "calibrate_graph.hpp"

#include <cstdio>
#include <cstring>
#include <set>
#include <stdexcept>

#include "quantize.hpp"
#include "evaluate.hpp"  // lesson12::scene_input

namespace lesson13 {

std::vector<std::string> calibration_tensor_names(const lesson12::EngineGraph& graph) {
  std::vector<std::string> names{kInputTensorName};
  std::set<std::string> seen{kInputTensorName};
  for (const lesson12::BufferDesc& b : graph.buffers) {
    if (!seen.insert(b.name).second) {
      throw std::invalid_argument("calibration_tensor_names: two tensors are named '" + b.name +
                                  "'");
    }
    names.push_back(b.name);
  }
  return names;
}

std::vector<std::vector<float>> calibration_images(std::uint64_t first_seed, int count, int width,
                                                   int height) {
  if (count < 0) {
    throw std::invalid_argument("calibration_images: expected count >= 0, got " +
                                std::to_string(count));
  }
  if (width <= 0 || height <= 0) {  // scene_input would size its buffer from them first
    throw std::invalid_argument("calibration_images: expected a positive size, got " +
                                std::to_string(width) + "x" + std::to_string(height));
  }
  std::vector<std::vector<float>> images;
  for (int i = 0; i < count; ++i) {
    images.push_back(
        lesson12::scene_input(first_seed + static_cast<std::uint64_t>(i), width, height));
  }
  return images;
}

std::vector<TensorObservation> observe_engine_graph(const lesson12::EngineGraph& graph,
                                                    const std::vector<std::vector<float>>& images,
                                                    int bins) {
  if (images.empty()) {
    throw std::invalid_argument(
        "observe_engine_graph: the calibration set is empty (expected at least one image)");
  }
  const std::size_t input_size =
      static_cast<std::size_t>(graph.input_c) * graph.input_h * graph.input_w;
  for (std::size_t i = 0; i < images.size(); ++i) {
    if (images[i].size() != input_size) {
      throw std::invalid_argument(
          "observe_engine_graph: image " + std::to_string(i) + " has " +
          std::to_string(images[i].size()) + " values, expected [" + std::to_string(graph.input_c) +
          ", " + std::to_string(graph.input_h) + ", " + std::to_string(graph.input_w) + "]");
    }
  }
  const std::vector<std::string> names = calibration_tensor_names(graph);
  std::vector<TensorObservation> obs;
  obs.reserve(names.size());
  for (const std::string& n : names) obs.push_back({n, ActivationObserver(bins)});
  std::vector<std::vector<float>> buffers;
  for (const std::vector<float>& image : images) {
    obs[0].observer.observe(image);
    lesson12::run_engine_graph_reference(graph, image, &buffers);
    for (std::size_t b = 0; b < buffers.size(); ++b) obs[b + 1].observer.observe(buffers[b]);
  }
  return obs;
}

CalibrationTable make_calibration_table(const std::vector<TensorObservation>& observations,
                                        const CalibratorConfig& config,
                                        const std::string& network) {
  if (observations.empty()) {
    throw std::invalid_argument("make_calibration_table: no tensor to calibrate");
  }
  CalibrationTable table;
  table.network = network;
  table.calibrator = calibrator_name(config);
  for (const TensorObservation& o : observations) {
    const double amax = calibrate_amax(o.observer, config);
    if (!(amax > 0)) {
      throw std::runtime_error("make_calibration_table: tensor '" + o.name + "' was 0 in all " +
                               std::to_string(o.observer.count()) +
                               " values of the calibration set: no scale can be derived "
                               "(calibrate on images that exercise it)");
    }
    try {
      table.tensors.push_back({o.name, int8_scale(amax)});
    } catch (const std::invalid_argument& e) {
      throw std::runtime_error("make_calibration_table: tensor '" + o.name + "': " + e.what());
    }
  }
  return table;
}

namespace {

// FNV-1a, 64 bits (Fowler, Noll, Vo): a byte at a time, xor then multiply by the FNV prime.
struct Fnv1a64 {
  std::uint64_t h = 0xcbf29ce484222325ull;
  void bytes(const void* p, std::size_t n) {
    const unsigned char* c = static_cast<const unsigned char*>(p);
    for (std::size_t i = 0; i < n; ++i) {
      h ^= c[i];
      h *= 0x100000001b3ull;
    }
  }
  void i32(int v) { bytes(&v, sizeof v); }
  void str(const std::string& s) {
    i32(static_cast<int>(s.size()));
    bytes(s.data(), s.size());
  }
  void floats(const std::vector<float>& v) {
    i32(static_cast<int>(v.size()));
    bytes(v.data(), v.size() * sizeof(float));
  }
  void view(const lesson12::View& v) {
    i32(v.buffer);
    i32(v.channel_offset);
    i32(v.channels);
  }
};

}  // namespace

std::string network_id(const std::string& model, const lesson12::EngineGraph& graph) {
  if (model.empty() || model.find_first_of(" \t\r\n") != std::string::npos) {
    throw std::invalid_argument("network_id: expected a model name of one word, got '" + model +
                                "'");
  }
  Fnv1a64 f;
  f.i32(graph.input_c);
  f.i32(graph.num_classes);
  f.i32(static_cast<int>(graph.buffers.size()));
  for (const lesson12::BufferDesc& b : graph.buffers) {
    f.str(b.name);
    f.i32(b.channels);
  }
  f.i32(static_cast<int>(graph.ops.size()));
  for (const lesson12::FusedOp& op : graph.ops) {
    f.i32(static_cast<int>(op.kind));
    f.str(op.name);
    f.view(op.input);
    f.view(op.output);
    for (int v : {op.out_channels, op.in_channels, op.kernel, op.stride, op.pad,
                  static_cast<int>(op.act), op.has_residual ? 1 : 0, op.reg_max, op.num_classes}) {
      f.i32(v);
    }
    if (op.has_residual) f.view(op.residual);
    f.floats(op.weight);
    f.floats(op.bias);
    for (const lesson12::View& v : op.box) f.view(v);
    for (const lesson12::View& v : op.cls) f.view(v);
    for (int s : op.strides) f.i32(s);
  }
  char hex[24];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(f.h));
  return model + "-" + hex;
}

}  // namespace lesson13
