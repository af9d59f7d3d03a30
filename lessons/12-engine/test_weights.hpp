// Test support for lesson 12: YOLOv8n's tensor names and shapes written out by hand from
// Ultralytics' layout (model.0 .. model.22, as train/model.py names them; an oracle independent
// of network.cpp's builder), and random weights with those
// shapes for tests that need a whole network before (or without) the trained file.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "network.hpp"

namespace lesson12::testing {

using Shapes = std::map<std::string, std::vector<int>>;

inline void conv_shapes(Shapes& s, const std::string& p, int c1, int c2, int k) {
  s[p + ".conv.weight"] = {c2, c1, k, k};
  for (const char* n : {".bn.weight", ".bn.bias", ".bn.running_mean", ".bn.running_var"}) {
    s[p + n] = {c2};
  }
}

inline void c2f_shapes(Shapes& s, const std::string& p, int c1, int c2, int n) {
  const int c = c2 / 2;
  conv_shapes(s, p + ".cv1", c1, 2 * c, 1);
  for (int k = 0; k < n; ++k) {
    conv_shapes(s, p + ".m." + std::to_string(k) + ".cv1", c, c, 3);
    conv_shapes(s, p + ".m." + std::to_string(k) + ".cv2", c, c, 3);
  }
  conv_shapes(s, p + ".cv2", (2 + n) * c, c2, 1);
}

// Every tensor of Ultralytics' YOLOv8n state_dict for `classes` classes (reg_max 16), without
// BatchNorm's num_batches_tracked and the DFL's fixed arange convolution.
inline Shapes yolov8n_shapes(int classes) {
  Shapes s;
  conv_shapes(s, "model.0", 3, 16, 3);
  conv_shapes(s, "model.1", 16, 32, 3);
  c2f_shapes(s, "model.2", 32, 32, 1);
  conv_shapes(s, "model.3", 32, 64, 3);
  c2f_shapes(s, "model.4", 64, 64, 2);
  conv_shapes(s, "model.5", 64, 128, 3);
  c2f_shapes(s, "model.6", 128, 128, 2);
  conv_shapes(s, "model.7", 128, 256, 3);
  c2f_shapes(s, "model.8", 256, 256, 1);
  conv_shapes(s, "model.9.cv1", 256, 128, 1);
  conv_shapes(s, "model.9.cv2", 512, 256, 1);
  c2f_shapes(s, "model.12", 384, 128, 1);
  c2f_shapes(s, "model.15", 192, 64, 1);
  conv_shapes(s, "model.16", 64, 64, 3);
  c2f_shapes(s, "model.18", 192, 128, 1);
  conv_shapes(s, "model.19", 128, 128, 3);
  c2f_shapes(s, "model.21", 384, 256, 1);
  const int ch[3] = {64, 128, 256};
  for (int i = 0; i < 3; ++i) {
    const std::string cv2 = "model.22.cv2." + std::to_string(i);
    const std::string cv3 = "model.22.cv3." + std::to_string(i);
    conv_shapes(s, cv2 + ".0", ch[i], 64, 3);
    conv_shapes(s, cv2 + ".1", 64, 64, 3);
    s[cv2 + ".2.weight"] = {64, 64, 1, 1};
    s[cv2 + ".2.bias"] = {64};
    conv_shapes(s, cv3 + ".0", ch[i], 64, 3);
    conv_shapes(s, cv3 + ".1", 64, 64, 3);
    s[cv3 + ".2.weight"] = {classes, 64, 1, 1};
    s[cv3 + ".2.bias"] = {classes};
  }
  return s;
}

// Random YOLOv8n weights: conv weights uniform with variance 1 / fan_in (activations neither
// blow up nor vanish over 60 layers), BatchNorm statistics in ranges a trained network has.
inline WeightsFile random_yolov8n_weights(std::uint32_t seed, int classes = kNumClasses) {
  WeightsFile w;
  w.path = "random weights (seed " + std::to_string(seed) + ")";
  w.model = "yolov8n";
  w.num_classes = classes;
  w.reg_max = kRegMax;
  w.bn_eps = 1e-3f;
  w.input_h = w.input_w = kInputSize;
  w.class_names = {"red", "green", "blue", "yellow", "magenta", "cyan"};
  w.class_names.resize(static_cast<std::size_t>(classes), "extra");
  w.seed = seed;
  std::mt19937 rng(seed);
  auto uniform = [&](double lo, double hi) {
    return static_cast<float>(lo + (hi - lo) * (rng() / 4294967296.0));
  };
  for (const auto& [name, shape] : yolov8n_shapes(classes)) {
    WeightTensor t;
    t.shape = shape;
    std::size_t count = 1;
    for (int d : shape) count *= static_cast<std::size_t>(d);
    t.data.resize(count);
    auto ends_with = [&](const std::string& suffix) {
      return name.size() >= suffix.size() &&
             name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    double lo = -0.3, hi = 0.3;  // biases, BatchNorm beta and mean
    if (shape.size() == 4) {
      const double a = std::sqrt(3.0 / (shape[1] * shape[2] * shape[3]));
      lo = -a;
      hi = a;
    } else if (ends_with("bn.weight")) {
      lo = 0.5;
      hi = 1.5;
    } else if (ends_with("running_var")) {
      lo = 0.3;
      hi = 2.0;
    }
    for (float& v : t.data) v = uniform(lo, hi);
    w.tensors[name] = std::move(t);
  }
  return w;
}

}  // namespace lesson12::testing
