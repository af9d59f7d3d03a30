// Lesson 12: the detector as a network definition, its weights file, and its CPU reference.
//
//   WeightsFile          the file train/train_detector.py writes (format at read_weights)
//   NetworkDefinition    primitive layers in topological order, what an ONNX parser hands
//                        TensorRT's builder: convolution, BatchNorm, SiLU, add, concat, channel
//                        slice, max pool, upsample, and the detect head's decode
//   yolov8n()            builds YOLOv8n's definition from a weights file (Ultralytics' layer names)
//   run_reference()      runs a definition on the CPU: NCHW, FP64 accumulation; the oracle
//
// Host code only; the CPU tests cover it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace lesson12 {

constexpr int kNumClasses = 6;  // lesson 09's palette: red, green, blue, yellow, magenta, cyan
constexpr int kRegMax = 16;     // DFL bins per box side
constexpr int kInputSize = 640;

// ------------------------------------------------------------------------------ weights file

struct WeightTensor {
  std::vector<int> shape;
  std::vector<float> data;  // converted to float whatever the stored dtype
  std::size_t elements() const { return data.size(); }
};

struct WeightsFile {
  std::string path;
  std::string model;  // "yolov8n"
  int num_classes = 0, reg_max = 0, input_h = 0, input_w = 0;
  float bn_eps = 1e-3f;
  std::vector<std::string> class_names;
  std::uint64_t seed = 0;
  std::map<std::string, WeightTensor> tensors;
  // The tensor `name` with exactly `shape`; throws std::runtime_error naming the file, the
  // tensor and the expected and found shapes.
  const WeightTensor& get(const std::string& name, const std::vector<int>& shape) const;
};

// Reads the weights file: a text header, then raw little-endian data.
//   course-detector-weights 1
//   model yolov8n / num_classes 6 / reg_max 16 / bn_eps 0.001 / input 640 640
//   classes red green ... / seed S / tensors COUNT
//   NAME DTYPE NDIM D0 .. Dn-1 OFFSET      (COUNT lines; DTYPE f16 or f32; OFFSET: bytes into data)
//   data BYTES
// then one '\n' and BYTES of data. Throws std::runtime_error naming the path and what was
// expected: a missing file, another first line, a truncated block, a tensor outside the block.
WeightsFile read_weights(const std::string& path);
WeightsFile parse_weights(const std::vector<std::uint8_t>& bytes, const std::string& name);
// Writes the same format (every tensor f32); for tests.
std::vector<std::uint8_t> serialize_weights(const WeightsFile& weights);

// IEEE 754 binary16 bits -> float, exactly (every half is a float): subnormals, infinities and
// NaN payloads included. By hand, so the host code needs no half type.
float half_to_float(std::uint16_t bits);

// ------------------------------------------------------------------------ network definition

enum class LayerKind { conv, batch_norm, silu, add, concat, slice, max_pool, upsample, detect };

// A tensor of the definition: one image's shape (the batch is dynamic), NCHW.
struct TensorDesc {
  std::string name;
  int c = 0, h = 0, w = 0;
};

struct Layer {
  LayerKind kind = LayerKind::conv;
  std::string name;         // "model.2.m.0.cv1.conv", "model.2.m.0.cv1.bn", ...
  std::vector<int> inputs;  // tensor ids
  int output = -1;          // tensor id
  // conv: weight [out][in][k][k] (OIHW), bias [out] or empty
  int kernel = 1, stride = 1, pad = 0;
  std::vector<float> weight, bias;
  // batch_norm: y = (x - mean) / sqrt(var + eps) * gamma + beta
  std::vector<float> gamma, beta, mean, var;
  float eps = 1e-3f;
  // slice: channels [channel_begin, channel_end) of inputs[0]
  int channel_begin = 0, channel_end = 0;
  // max_pool: kernel, stride, pad; upsample: nearest, x2
  // detect: inputs = box0, cls0, box1, cls1, box2, cls2; output [4 + C, N]
  std::vector<int> strides;
  int reg_max = kRegMax, num_classes = 0;
};

struct NetworkDefinition {
  std::vector<TensorDesc> tensors;  // tensor 0: the input [3, H, W]
  std::vector<Layer> layers;        // topological order
  int input = 0;
  int output = -1;  // the detect layer's output, [4 + C, N] (stored as c = 4 + C, h = 1, w = N)
  int num_classes = 0;
};

// YOLOv8n for an input of input_h x input_w (multiples of 32, >= 32). Throws
// std::invalid_argument for another size, std::runtime_error for a tensor missing from or shaped
// differently in the weights file.
NetworkDefinition yolov8n(const WeightsFile& weights, int input_h, int input_w);

// Candidates of an input_h x input_w image: 8400 at 640 x 640.
int num_candidates(int input_h, int input_w);

// Runs the definition on one image: input [3, H, W] float (RGB in [0, 1]); returns the output
// tensor ([4 + C, N], row-major). Every layer accumulates in double and stores float. With
// `tensors` non-null, it receives every tensor of the definition (index = tensor id), NCHW.
std::vector<float> run_reference(const NetworkDefinition& net, const std::vector<float>& input,
                                 std::vector<std::vector<float>>* tensors = nullptr);

// The detect head's decode of one candidate, shared by both CPU references: box_logits[side *
// reg_max + i] (side: l, t, r, b), anchor (ax, ay) in grid cells. Writes cx, cy, w, h in input
// pixels to box[0..3]. DFL: softmax over each side's reg_max logits (the max subtracted first),
// then the expectation sum(i * p_i).
void decode_box(const double* box_logits, int reg_max, double ax, double ay, double stride,
                double box[4]);

// Runs body(begin, end) on consecutive chunks of [0, count) on the machine's cores (std::thread);
// inline when the work is small (count * cost_per_item below about a million) or one core.
void parallel_for(int count, double cost_per_item, const std::function<void(int, int)>& body);

}  // namespace lesson12
