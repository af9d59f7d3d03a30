// Lesson 13: what INT8 costs in boxes, measured on the CPU by simulated quantisation.
//
//   FakeQuantGraph       lesson 12's optimised engine graph run on the CPU with chosen ops in INT8:
//                        every activation an INT8 op reads is quantised with its tensor's scale
//                        from a calibration table, its weights per output channel or per tensor,
//                        and each INT8 convolution is computed by conv_int8_reference (int32
//                        accumulation, the exact double epilogue). The other ops run exactly as
//                        lesson 12's run_engine_graph_reference runs them (FP64 accumulation).
//   held_out_scenes      lesson 12's held-out scenes (rendered at the graph's input size) and truth
//   detect_scenes        a network function over those scenes -> detections (lesson 08's CPU
//                        postprocess, lesson 12's validator and deployment settings)
//   score_detections     mAP@0.5, mAP@0.5:0.95 (lesson 12's metrics) and the frames whose
//                        deployment detections differ from a reference run's
//   layer_sensitivity    each convolution alone in INT8: its mAP cost
//
// Where the quantisation happens (TensorRT's explicit quantisation: a Q/DQ pair on every input of
// a quantised layer, weights included). An op that runs in INT8 reads each activation it takes,
// its input view and its residual, as q = quantize_int8(x, s), s = the scale of the tensor the
// view lies in: the network input "images" or the buffer (calibrate_graph.hpp: one scale per
// buffer). Its output is stored as the float its epilogue produces; the ops that read it quantise
// it again on their way in. When every op is INT8 this is the same as an engine whose producers
// requantise their output to the buffer's scale (conv_int8_reference with y_type int8), because
// the consumer's quantize_int8(float(v), s) is exactly that requantisation and a value already on
// the grid quantises to itself (q s rounded to float, divided by s and rounded, is within 2^-16
// of q, far from a rounding boundary). Where precisions mix, an FP32 op reads the unquantised
// float, as in a network whose FP32 layer has no Q/DQ in front of it.
//
//   conv (INT8)       x, residual: Q with their tensors' scales; weights: Q per output channel
//                     (scale max|w_k| / 127) or per tensor (max|w| / 127); conv_int8_reference
//                     with float output. The result is conv_int8_reference's bit for bit: it IS
//                     that function, fed the gathered INT8 view (not a double convolution of the
//                     dequantised values, which would differ in the last bits, since q s rounded
//                     to float is not q s).
//   max pool, upsample, copy (INT8)   the input quantised and dequantised with its scale, then
//                     the same selection as in FP32 (max and nearest copy commute with a monotone
//                     quantiser, so this is the INT8 op on INT8 data); a consumer whose buffer has
//                     another scale requantises, as an engine must (lesson 12 puts SPPF's pools
//                     in one buffer, so only upsample's output changes scale).
//   detect            always FP32: the decode reads the head's last convolutions' float output
//                     (an INT8 engine gives them float output, Int8ConvOutput::f32), and the
//                     sigmoid / DFL run in float. Its inputs are never quantised.
//   FP32 op           exactly run_engine_graph_reference's arithmetic, in its order (double sums
//                     per tap, SiLU in double, one rounding to float), so a graph with every op in
//                     FP32 gives its output and buffers bit for bit (test_fake_quant.cpp).
//
// FP8 E4M3 instead of INT8 (FakeQuantConfig::precision): the same ops, the same Q/DQ places,
// with E4M3 codes (quantize_fp8_e4m3) in place of INT8 steps; "INT8" above and in the names
// keep_fp32, int8_only, is_int8 and int8_ops then reads "FP8".
//   activations       per tensor, scale amax / 448 with the table's amax: a table stores
//                     s8 = amax / 127 (calibration_table.hpp), so amax = 127 s8 and the FP8 scale
//                     is float(127 s8 / 448), computed in double (127 s8 is exact there) and
//                     rounded to float. The amax is the table's float s8 times 127, within 2^-24
//                     of the calibrator's. Max scaling (min-max calibration) is the usual FP8
//                     recipe: E4M3's relative step (2^-4 to 2^-3) is the same in every normal
//                     binade, so clipping outliers buys little; any calibrator's table works.
//   conv (FP8)        weights per output channel (scale max|w_k| / 448) or per tensor
//                     (quantize_fp8_e4m3_weights), conv_fp8_reference with float output (exact
//                     sums, the same double epilogue).
//   max pool, upsample, copy (FP8)   quantised and dequantised with the buffer's FP8 scale, as
//                     in INT8 (E4M3 rounding is monotone too).
// A float output quantised again by its consumer is, as in INT8, an engine whose producer stores
// E4M3 at the buffer's scale: a value on the E4M3 grid comes back within about 2^-22 of its code,
// far from a rounding boundary (half a step is 2^-4 of the value, or 2^-10 of the scale).
//
// Host code only, one thread per run (detect_scenes spreads scenes over threads).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "calibration_table.hpp"
#include "graph.hpp"
#include "metrics.hpp"
#include "postprocess.cuh"
#include "scenes.hpp"

namespace lesson13 {

enum class WeightScales { per_channel, per_tensor };
const char* to_string(WeightScales w);

// The number format of the quantised ops: INT8 (conv_int8_reference) or FP8 E4M3
// (conv_fp8_reference). to_string gives "INT8" or "FP8 E4M3".
enum class QuantPrecision { int8, fp8_e4m3 };
const char* to_string(QuantPrecision p);

struct FakeQuantConfig {
  WeightScales weights = WeightScales::per_channel;
  // Which ops run in INT8. By default every conv, max pool, upsample and copy; the ops named
  // (FusedOp::name) in keep_fp32 stay FP32 (the fallback, e.g. the first layer or the head).
  // If int8_only is not empty, exactly the ops it names run in INT8 and everything else in FP32
  // (the sensitivity table: one layer at a time). At most one of the two may be non-empty.
  std::vector<std::string> keep_fp32;
  std::vector<std::string> int8_only;
  // Every op FP32 (the table is then not read): the reference run, through the same code.
  bool all_fp32 = false;
  // The format of the ops that are not FP32 (the header comment's FP8 paragraph).
  QuantPrecision precision = QuantPrecision::int8;
};

class FakeQuantGraph {
 public:
  // Resolves every scale an INT8 op needs and quantises the weights of the INT8 convolutions
  // (quantize_int8_per_channel, or one int8_scale(max |w|) for per_tensor; a weight tensor of
  // zeros gets scale 1); in FP8, the FP8 scales and quantize_fp8_e4m3_weights. The table is
  // checked for the tensors actually read in INT8 only: the network id is the caller's to check
  // (check_calibration_table with network_id()).
  // Throws std::invalid_argument if a name in keep_fp32 / int8_only is no op of the graph or is
  // the detect op, if both lists are non-empty, or if a scale the INT8 ops need is not a positive
  // normal float (naming the tensor: a hand-built table can hold 0 or NaN; a parsed one cannot;
  // in FP8, also if 127 s8 / 448 is not: an s8 below 448 / 127 times the smallest normal);
  // std::runtime_error if the table has no scale for a tensor an INT8 op reads (naming the
  // tensor, the op and the table's network).
  FakeQuantGraph(lesson12::EngineGraph graph, const CalibrationTable& table,
                 const FakeQuantConfig& config);

  // One image: input [input_c, input_h, input_w] float NCHW, as run_engine_graph_reference takes
  // it; returns the output [4 + C, N] row-major (empty for a graph without a detect op). With
  // `buffers` non-null it receives every buffer as stored (index = buffer id, NHWC, one image).
  // Throws std::invalid_argument for an input of another size. Const and thread-safe.
  std::vector<float> run(const std::vector<float>& input,
                         std::vector<std::vector<float>>* buffers = nullptr) const;

  // The same, from op `first_op` on: `buffers` (one per buffer, NHWC, one image) must hold what
  // ops 0 .. first_op - 1 wrote (e.g. another run's buffers, when those ops are FP32 in both);
  // they are updated in place. Throws std::invalid_argument for first_op outside [0, ops] or
  // buffers of the wrong count or sizes, and as run does.
  std::vector<float> run_from(int first_op, const std::vector<float>& input,
                              std::vector<std::vector<float>>& buffers) const;

  const lesson12::EngineGraph& graph() const { return graph_; }
  // Whether op runs quantised (in INT8 or FP8, as precision() says), and how many do.
  bool is_int8(int op) const { return int8_.at(static_cast<std::size_t>(op)); }
  int int8_ops() const;
  QuantPrecision precision() const { return precision_; }

 private:
  struct OpScales {
    float x = 0, res = 0;          // activation scales (quantised ops)
    std::vector<std::int8_t> wq;   // INT8 convolutions: KRSC, as FusedOp::weight
    std::vector<std::uint8_t> w8;  // FP8 convolutions: E4M3 codes, KRSC
    std::vector<float> w_scale;    // [out_channels]
  };
  lesson12::EngineGraph graph_;
  QuantPrecision precision_ = QuantPrecision::int8;
  std::vector<bool> int8_;
  std::vector<OpScales> scales_;
};

// ------------------------------------------------------------------------------- evaluation

// Scenes first_seed .. first_seed + count - 1 at width x height: lesson12::scene_input of each
// (planar RGB floats in [0, 1]) and its truth boxes. Lesson 12 evaluates on seeds 0 .. N-1; this
// lesson calibrates on seeds from 1000 (main.cu), so the two sets are disjoint. Throws
// std::invalid_argument for count < 0 and as render_scene does for sizes outside [32, 4096].
struct HeldOutScenes {
  int width = 0, height = 0;
  std::uint64_t first_seed = 0;
  std::vector<std::vector<float>> images;
  std::vector<std::vector<lesson12::SceneBox>> truth;
};
HeldOutScenes held_out_scenes(std::uint64_t first_seed, int count, int width, int height);

// Per scene, the detections of lesson 08's CPU postprocess (postprocess_cpu: decode, greedy NMS)
// of the network's output, with lesson 12's eval_config() (conf 0.001, NMS IoU 0.7, 300 boxes:
// what mAP is computed on) and deploy_config() (conf 0.25, IoU 0.45: what a deployment keeps).
struct SceneDetections {
  std::vector<std::vector<lesson08::Detection>> eval, deploy;
};

// A network: one image [3, H, W] -> output [4 + C, N]; called concurrently from `threads`
// threads (FakeQuantGraph::run and run_engine_graph_reference are safe to).
using NetworkFn = std::function<std::vector<float>(const std::vector<float>&)>;

// Runs every scene through `net` and postprocesses its output (num_classes C, N = lesson 12's
// num_candidates of the scenes' size; the scenes are the network input, so the letterbox is the
// identity). Scenes are spread over `threads` std::threads (>= 1); the result does not depend on
// it. Throws std::invalid_argument for threads < 1 or an output of the wrong size (naming the
// scene), and passes on what `net` throws.
SceneDetections detect_scenes(const NetworkFn& net, const HeldOutScenes& scenes, int num_classes,
                              int threads = 1);

struct Accuracy {
  double map50 = 0, map50_95 = 0;  // lesson12::mean_average_precision of the eval detections
  int truth_boxes = 0;
  int frames = 0;
  int changed = 0;  // frames whose deployment detections are not the reference's (-1: none given)
};

// mAP against the scenes' truth; `changed` counts frames where lesson12::same_detections(run,
// reference, 0.9) (lesson 12's FP16-vs-FP32 criterion: the same count and one-to-one matches of
// the same class with IoU >= 0.9) fails, -1 without a reference. Throws std::invalid_argument
// if the detections do not have one entry per scene (or the reference does not).
Accuracy score_detections(const SceneDetections& run, const HeldOutScenes& scenes, int num_classes,
                          const SceneDetections* reference = nullptr);

// The sensitivity table: for each conv op of the graph, the accuracy when it alone runs in INT8
// (FakeQuantConfig::int8_only = {its name}, `weights` as given), against `reference` (the FP32
// run of the same scenes). One entry per conv op, in graph order. Each run resumes from the FP32
// buffers of the ops before the layer (they cannot change), so a layer near the head costs less
// than a whole run. Throws as FakeQuantGraph and score_detections do.
struct LayerSensitivity {
  std::string op;
  Accuracy accuracy;
};
std::vector<LayerSensitivity> layer_sensitivity(const lesson12::EngineGraph& graph,
                                                const CalibrationTable& table, WeightScales weights,
                                                const HeldOutScenes& scenes,
                                                const SceneDetections& reference, int threads = 1);

}  // namespace lesson13
