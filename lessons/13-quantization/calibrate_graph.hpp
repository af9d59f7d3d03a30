// Lesson 13: calibrating lesson 12's engine graph on the CPU.
//
//   calibration_tensor_names   the tensors an INT8 engine needs an activation scale for:
//                              "images" (the network input) and every activation buffer
//   calibration_images         held-out scenes as network inputs (lesson 12's scene_input)
//   observe_engine_graph       runs the optimised graph's CPU reference on each image and feeds
//                              every buffer to an ActivationObserver: one pass, every method
//   make_calibration_table     observers + a calibrator -> the table (scale = amax / 127)
//   network_id                 names a network and its weights for the table's header
//
// Why buffers and not the definition's tensors: after lesson 12's graph passes a concatenation
// is one buffer its producers write side by side, and C2f's split is two views of one buffer.
// One buffer read by one kernel with one scale means one scale per buffer: the producers of a
// concatenation must requantise to the same scale (TensorRT imposes the same on the inputs of a
// concatenation it eliminates). SiLU and the residual add are fused into the convolutions, so a
// buffer holds exactly what the next kernel reads.
//
// The network is fully convolutional: a small input (e.g. 96 x 128) calibrates the same
// weights; the statistics of small scenes are close to those of 640 x 640 ones but not equal
// (the objects are larger relative to the receptive field), which the GPU work should measure.
//
// Host code only (the CPU reference is lesson 12's run_engine_graph_reference, FP64
// accumulation).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "calibrate.hpp"
#include "calibration_table.hpp"
#include "graph.hpp"

namespace lesson13 {

constexpr const char* kInputTensorName = "images";  // the network input's name in the ONNX export

// "images", then graph.buffers[i].name for every buffer in id order. Throws std::invalid_argument
// if two buffers share a name (the table could not tell them apart).
std::vector<std::string> calibration_tensor_names(const lesson12::EngineGraph& graph);

// Scenes first_seed .. first_seed + count - 1 rendered at width x height (lesson 12's scenes.hpp,
// held-out seeds: the training draws its own), each as [3, height, width] float RGB in [0, 1],
// planar: lesson12::scene_input of each seed. Throws std::invalid_argument for count < 0 and as
// render_scene does for sizes outside [32, 4096].
std::vector<std::vector<float>> calibration_images(std::uint64_t first_seed, int count, int width,
                                                   int height);

struct TensorObservation {
  std::string name;
  ActivationObserver observer;
};

// One observer per calibration_tensor_names(graph) entry, in that order, fed with every value of
// that tensor on every image (the input as given, each buffer as run_engine_graph_reference
// leaves it). images: each [graph.input_c, graph.input_h, graph.input_w] float. Throws
// std::invalid_argument for an empty calibration set or an image of another size (naming it),
// and as ActivationObserver::observe does for a non-finite value.
std::vector<TensorObservation> observe_engine_graph(const lesson12::EngineGraph& graph,
                                                    const std::vector<std::vector<float>>& images,
                                                    int bins = ActivationObserver::kDefaultBins);

// The table: for each observation, in order, amax = calibrate_amax(observer, config) and scale
// = int8_scale(amax). Throws std::invalid_argument for no observation, and std::runtime_error
// naming the tensor if its amax is zero (every value seen was 0: the calibration set does not
// exercise it) or gives no normal scale.
CalibrationTable make_calibration_table(const std::vector<TensorObservation>& observations,
                                        const CalibratorConfig& config, const std::string& network);

// "<model>-<16 hex digits>": the digits are a 64-bit FNV-1a hash of everything the scales depend
// on: the ops (kind, name, shape, stride, padding, activation, residual), their views and their
// folded weights and biases (bits), and the buffers (name, channels). The input size is left
// out (the graph is fully convolutional: a table from 96 x 128 scenes serves 640 x 640), so are
// arena offsets. Two graphs with different weights get different ids; the same weights file
// gives the same id at any input size. Throws std::invalid_argument if model is not one word.
std::string network_id(const std::string& model, const lesson12::EngineGraph& graph);

}  // namespace lesson13
