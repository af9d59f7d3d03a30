// Lesson 13: simulated quantisation of lesson 12's engine graph, and its accuracy (fake_quant.hpp).
// Host code.
#include "fake_quant.hpp"

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <set>
#include <stdexcept>
#include <thread>

#include "calibrate_graph.hpp"  // kInputTensorName
#include "common/letterbox.cuh"
#include "evaluate.hpp"  // scene_input, eval_config, deploy_config
#include "fp8_conv.hpp"
#include "int8_conv.hpp"
#include "network.hpp"  // decode_box
#include "quantize.hpp"

namespace lesson13 {

using lesson12::EngineGraph;
using lesson12::FusedOp;
using lesson12::OpKind;
using lesson12::View;
using lesson12::ViewElements;

const char* to_string(WeightScales w) {
  return w == WeightScales::per_channel ? "per-channel" : "per-tensor";
}

const char* to_string(QuantPrecision p) {
  return p == QuantPrecision::int8 ? "INT8" : "FP8 E4M3";
}

namespace {

bool positive_normal(float s) {
  return std::isnormal(s) && s > 0;
}

std::string tensor_name(const EngineGraph& g, const View& v) {
  return v.buffer == View::kNetworkInput ? std::string(kInputTensorName)
                                         : g.buffers.at(static_cast<std::size_t>(v.buffer)).name;
}

// A view as a packed INT8 NHWC array [h][w][channels]: quantize_int8(x, scale) of each element.
std::vector<std::int8_t> gather_int8(const ViewElements& a, const View& v, float scale) {
  std::vector<std::int8_t> q(static_cast<std::size_t>(v.h) * v.w * v.channels);
  std::size_t i = 0;
  for (int y = 0; y < v.h; ++y) {
    for (int x = 0; x < v.w; ++x) {
      const float* p = a.at(y, x);
      for (int c = 0; c < v.channels; ++c) q[i++] = quantize_int8(p[c * a.channel], scale);
    }
  }
  return q;
}

// The same as E4M3 codes: quantize_fp8_e4m3(x, scale) of each element.
std::vector<std::uint8_t> gather_fp8(const ViewElements& a, const View& v, float scale) {
  std::vector<std::uint8_t> q(static_cast<std::size_t>(v.h) * v.w * v.channels);
  std::size_t i = 0;
  for (int y = 0; y < v.h; ++y) {
    for (int x = 0; x < v.w; ++x) {
      const float* p = a.at(y, x);
      for (int c = 0; c < v.channels; ++c) q[i++] = quantize_fp8_e4m3(p[c * a.channel], scale);
    }
  }
  return q;
}

// A quantised convolution's float output, packed [h][w][out_channels], into its view.
void scatter(const std::vector<float>& yf, const FusedOp& op, const ViewElements& y) {
  std::size_t j = 0;
  for (int oy = 0; oy < op.output.h; ++oy) {
    for (int ox = 0; ox < op.output.w; ++ox) {
      float* dst = y.at(oy, ox);
      for (int o = 0; o < op.out_channels; ++o) dst[o * y.channel] = yf[j++];
    }
  }
}

// The FP32 convolution: run_engine_graph_reference's loop, in its order (bias first, then per
// tap a double sum over the input channels of float weight x double pixel, SiLU in double, the
// residual added after it, one rounding to float), without its threads.
void conv_fp32(const FusedOp& op, const ViewElements& x, const ViewElements& y,
               const ViewElements* res) {
  const int k = op.kernel, cin = op.in_channels;
  std::vector<double> acc(static_cast<std::size_t>(op.out_channels));
  std::vector<double> pixel(static_cast<std::size_t>(cin));
  for (int oy = 0; oy < op.output.h; ++oy) {
    for (int ox = 0; ox < op.output.w; ++ox) {
      for (int o = 0; o < op.out_channels; ++o) acc[o] = op.bias[static_cast<std::size_t>(o)];
      for (int r = 0; r < k; ++r) {
        const int iy = oy * op.stride - op.pad + r;
        if (iy < 0 || iy >= op.input.h) continue;
        for (int s = 0; s < k; ++s) {
          const int ix = ox * op.stride - op.pad + s;
          if (ix < 0 || ix >= op.input.w) continue;
          const float* src = x.at(iy, ix);
          for (int c = 0; c < cin; ++c) pixel[c] = src[c * x.channel];
          for (int o = 0; o < op.out_channels; ++o) {
            const float* w =
                op.weight.data() + ((static_cast<std::size_t>(o) * k + r) * k + s) * cin;
            double sum = 0.0;
            for (int c = 0; c < cin; ++c) sum += w[c] * pixel[c];
            acc[o] += sum;
          }
        }
      }
      float* dst = y.at(oy, ox);
      const float* rsd = res ? res->at(oy, ox) : nullptr;
      for (int o = 0; o < op.out_channels; ++o) {
        double v = acc[o];
        if (op.act == lesson12::Activation::silu) v = v / (1.0 + std::exp(-v));
        if (rsd) v += rsd[o * res->channel];
        dst[o * y.channel] = static_cast<float>(v);
      }
    }
  }
}

}  // namespace

FakeQuantGraph::FakeQuantGraph(EngineGraph graph, const CalibrationTable& table,
                               const FakeQuantConfig& config)
    : graph_(std::move(graph)), precision_(config.precision) {
  const std::size_t n_ops = graph_.ops.size();
  if (!config.keep_fp32.empty() && !config.int8_only.empty()) {
    throw std::invalid_argument(
        "FakeQuantGraph: give keep_fp32 or int8_only, not both (int8_only already keeps every "
        "other op in FP32)");
  }
  const auto find_op = [&](const std::string& name, const char* list) {
    for (std::size_t i = 0; i < n_ops; ++i) {
      if (graph_.ops[i].name != name) continue;
      if (graph_.ops[i].kind == OpKind::detect) {
        throw std::invalid_argument(std::string("FakeQuantGraph: ") + list + " names '" + name +
                                    "', the detect op, which always runs in FP32");
      }
      return i;
    }
    throw std::invalid_argument(std::string("FakeQuantGraph: ") + list + " names '" + name +
                                "', which is no op of the graph");
  };
  int8_.assign(n_ops, false);
  if (!config.all_fp32) {
    if (!config.int8_only.empty()) {
      for (const std::string& n : config.int8_only) int8_[find_op(n, "int8_only")] = true;
    } else {
      for (std::size_t i = 0; i < n_ops; ++i) int8_[i] = graph_.ops[i].kind != OpKind::detect;
      for (const std::string& n : config.keep_fp32) int8_[find_op(n, "keep_fp32")] = false;
    }
  }
  const bool fp8 = precision_ == QuantPrecision::fp8_e4m3;
  if (!fp8 && precision_ != QuantPrecision::int8) {
    throw std::invalid_argument("FakeQuantGraph: unknown precision");
  }
  const auto scale_of = [&](const View& v, const FusedOp& op) {
    const std::string name = tensor_name(graph_, v);
    const TensorScale* t = table.find(name);
    if (t == nullptr) {
      throw std::runtime_error("FakeQuantGraph: the calibration table (network '" + table.network +
                               "') has no scale for tensor '" + name + "', which op '" + op.name +
                               "' reads in " + to_string(precision_));
    }
    if (!positive_normal(t->scale)) {
      throw std::invalid_argument("FakeQuantGraph: the scale of tensor '" + name + "' is " +
                                  std::to_string(t->scale) + ", expected a positive normal float");
    }
    if (!fp8) return t->scale;
    // The table's amax = 127 s8 (exact in double), over 448, rounded to float.
    const float s = static_cast<float>(static_cast<double>(t->scale) * kInt8Max / kFp8E4M3Max);
    if (!positive_normal(s)) {
      throw std::invalid_argument("FakeQuantGraph: the scale of tensor '" + name + "' (" +
                                  std::to_string(t->scale) +
                                  ") gives an FP8 scale that is not a positive normal float");
    }
    return s;
  };
  scales_.resize(n_ops);
  for (std::size_t i = 0; i < n_ops; ++i) {
    if (!int8_[i]) continue;
    const FusedOp& op = graph_.ops[i];
    OpScales& s = scales_[i];
    s.x = scale_of(op.input, op);
    if (op.kind != OpKind::conv) continue;
    if (op.has_residual) s.res = scale_of(op.residual, op);
    if (fp8) {
      Fp8Weights q = quantize_fp8_e4m3_weights(op.weight, op.out_channels,
                                               config.weights == WeightScales::per_channel);
      s.w8 = std::move(q.q);
      s.w_scale = std::move(q.scale);
    } else if (config.weights == WeightScales::per_channel) {
      PerChannelInt8 q = quantize_int8_per_channel(op.weight, op.out_channels);
      s.wq = std::move(q.q);
      s.w_scale = std::move(q.scale);
    } else {
      double amax = 0;
      for (float w : op.weight) {
        if (!std::isfinite(w)) {
          throw std::invalid_argument("FakeQuantGraph: op '" + op.name +
                                      "' has a weight that is not finite");
        }
        amax = std::max(amax, std::fabs(static_cast<double>(w)));
      }
      const float scale = amax > 0 ? int8_scale(amax) : 1.0f;
      s.wq = quantize_int8_per_tensor(op.weight, scale);
      s.w_scale.assign(static_cast<std::size_t>(op.out_channels), scale);
    }
  }
}

int FakeQuantGraph::int8_ops() const {
  return static_cast<int>(std::count(int8_.begin(), int8_.end(), true));
}

std::vector<float> FakeQuantGraph::run(const std::vector<float>& input,
                                       std::vector<std::vector<float>>* buffers_out) const {
  std::vector<std::vector<float>> buffers(graph_.buffers.size());
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    buffers[i].assign(graph_.buffers[i].elements_per_image(), 0.0f);
  }
  std::vector<float> out = run_from(0, input, buffers);
  if (buffers_out) *buffers_out = std::move(buffers);
  return out;
}

std::vector<float> FakeQuantGraph::run_from(int first_op, const std::vector<float>& input,
                                            std::vector<std::vector<float>>& buffers) const {
  const EngineGraph& graph = graph_;
  const std::size_t in_size =
      static_cast<std::size_t>(graph.input_c) * graph.input_h * graph.input_w;
  if (input.size() != in_size) {
    throw std::invalid_argument(
        "FakeQuantGraph: expected an input of [" + std::to_string(graph.input_c) + ", " +
        std::to_string(graph.input_h) + ", " + std::to_string(graph.input_w) + "] floats, got " +
        std::to_string(input.size()));
  }
  if (first_op < 0 || first_op > static_cast<int>(graph.ops.size())) {
    throw std::invalid_argument("FakeQuantGraph::run_from: op " + std::to_string(first_op) +
                                " is outside [0, " + std::to_string(graph.ops.size()) + "]");
  }
  if (buffers.size() != graph.buffers.size()) {
    throw std::invalid_argument("FakeQuantGraph::run_from: expected " +
                                std::to_string(graph.buffers.size()) + " buffers, got " +
                                std::to_string(buffers.size()));
  }
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    if (buffers[i].size() != graph.buffers[i].elements_per_image()) {
      throw std::invalid_argument("FakeQuantGraph::run_from: buffer " + graph.buffers[i].name +
                                  " has " + std::to_string(buffers[i].size()) +
                                  " values, expected " +
                                  std::to_string(graph.buffers[i].elements_per_image()));
    }
  }
  const int n_total = graph.num_candidates;
  std::vector<float> out(static_cast<std::size_t>(4 + graph.num_classes) * n_total);
  const auto elements = [&](const View& v) {
    return lesson12::view_elements(graph, buffers, input, v, "FakeQuantGraph");
  };
  for (std::size_t i = static_cast<std::size_t>(first_op); i < graph.ops.size(); ++i) {
    const FusedOp& op = graph.ops[i];
    const bool int8 = int8_[i];
    switch (op.kind) {
      case OpKind::conv: {
        const ViewElements x = elements(op.input);
        const ViewElements y = elements(op.output);
        const ViewElements res = op.has_residual ? elements(op.residual) : ViewElements{};
        if (!int8) {
          conv_fp32(op, x, y, op.has_residual ? &res : nullptr);
          break;
        }
        const OpScales& s = scales_[i];
        std::vector<float> yf(static_cast<std::size_t>(op.output.h) * op.output.w *
                              op.out_channels);
        if (precision_ == QuantPrecision::fp8_e4m3) {
          const std::vector<std::uint8_t> xq = gather_fp8(x, op.input, s.x);
          std::vector<std::uint8_t> rq;
          if (op.has_residual) rq = gather_fp8(res, op.residual, s.res);
          Fp8ConvArgs a{};
          a.x = xq.data();
          a.w = s.w8.data();
          a.bias = op.bias.data();
          a.res = op.has_residual ? rq.data() : nullptr;
          a.y = yf.data();
          a.x_stride = op.in_channels;
          a.res_stride = op.out_channels;
          a.y_stride = op.out_channels;
          lesson12::set_conv_geometry(op, 1, a);
          a.x_scale = s.x;
          a.w_scale = s.w_scale.data();
          a.res_scale = s.res;
          a.y_scale = 1.0f;  // unused: float output
          a.y_type = Fp8ConvOutput::f32;
          conv_fp8_reference(a);
          scatter(yf, op, y);
          break;
        }
        const std::vector<std::int8_t> xq = gather_int8(x, op.input, s.x);
        std::vector<std::int8_t> rq;
        if (op.has_residual) rq = gather_int8(res, op.residual, s.res);
        Int8ConvArgs a{};
        a.x = xq.data();
        a.w = s.wq.data();
        a.bias = op.bias.data();
        a.res = op.has_residual ? rq.data() : nullptr;
        a.y = yf.data();
        a.x_stride = op.in_channels;
        a.res_stride = op.out_channels;
        a.y_stride = op.out_channels;
        lesson12::set_conv_geometry(op, 1, a);
        a.x_scale = s.x;
        a.w_scale = s.w_scale.data();
        a.res_scale = s.res;
        a.y_scale = 1.0f;  // unused: float output
        a.y_type = Int8ConvOutput::f32;
        conv_int8_reference(a);
        scatter(yf, op, y);
        break;
      }
      case OpKind::max_pool:
      case OpKind::upsample:
      case OpKind::copy: {
        const ViewElements x = elements(op.input);
        const ViewElements y = elements(op.output);
        const float xs = int8 ? scales_[i].x : 0.0f;
        const bool fp8 = precision_ == QuantPrecision::fp8_e4m3;
        // The input as the op reads it: quantised and dequantised in INT8 or FP8, as is in FP32.
        const auto read = [&](int iy, int ix, int c) {
          const float v = x.at(iy, ix)[c * x.channel];
          if (!int8) return v;
          return fp8 ? dequantize_fp8_e4m3(quantize_fp8_e4m3(v, xs), xs)
                     : dequantize_int8(quantize_int8(v, xs), xs);
        };
        for (int oy = 0; oy < op.output.h; ++oy) {
          for (int ox = 0; ox < op.output.w; ++ox) {
            float* dst = y.at(oy, ox);
            for (int c = 0; c < op.output.channels; ++c) {
              float v;
              if (op.kind == OpKind::copy) {
                v = read(oy, ox, c);
              } else if (op.kind == OpKind::upsample) {
                v = read(oy / 2, ox / 2, c);
              } else {
                v = -std::numeric_limits<float>::infinity();  // padding never wins
                for (int r = 0; r < op.kernel; ++r) {
                  const int iy = oy * op.stride - op.pad + r;
                  if (iy < 0 || iy >= op.input.h) continue;
                  for (int s = 0; s < op.kernel; ++s) {
                    const int ix = ox * op.stride - op.pad + s;
                    if (ix >= 0 && ix < op.input.w) v = std::max(v, read(iy, ix, c));
                  }
                }
              }
              dst[c * y.channel] = v;
            }
          }
        }
        break;
      }
      case OpKind::detect: {  // run_engine_graph_reference's decode, always FP32
        int n = 0;
        std::vector<double> logits(static_cast<std::size_t>(4 * op.reg_max));
        for (std::size_t level = 0; level < op.box.size(); ++level) {
          const ViewElements box = elements(op.box[level]);
          const ViewElements cls = elements(op.cls[level]);
          for (int gy = 0; gy < op.box[level].h; ++gy) {
            for (int gx = 0; gx < op.box[level].w; ++gx, ++n) {
              if (n >= n_total) throw std::invalid_argument("detect: more candidates than N");
              for (int j = 0; j < 4 * op.reg_max; ++j) logits[j] = box.at(gy, gx)[j * box.channel];
              double b[4];
              lesson12::decode_box(logits.data(), op.reg_max, gx + 0.5, gy + 0.5, op.strides[level],
                                   b);
              for (int r = 0; r < 4; ++r)
                out[static_cast<std::size_t>(r) * n_total + n] = static_cast<float>(b[r]);
              for (int c = 0; c < op.num_classes; ++c) {
                const double v = cls.at(gy, gx)[c * cls.channel];
                out[static_cast<std::size_t>(4 + c) * n_total + n] =
                    static_cast<float>(1.0 / (1.0 + std::exp(-v)));
              }
            }
          }
        }
        if (n != n_total) throw std::invalid_argument("detect: fewer candidates than N");
        break;
      }
    }
  }
  return out;
}

// ------------------------------------------------------------------------------- evaluation

HeldOutScenes held_out_scenes(std::uint64_t first_seed, int count, int width, int height) {
  if (count < 0) {
    throw std::invalid_argument("held_out_scenes: expected count >= 0, got " +
                                std::to_string(count));
  }
  if (width < lesson12::kSceneMinSize || height < lesson12::kSceneMinSize ||
      width > lesson12::kSceneMaxSize || height > lesson12::kSceneMaxSize) {
    throw std::invalid_argument("held_out_scenes: expected a size within [32, 4096], got " +
                                std::to_string(width) + "x" + std::to_string(height));
  }
  HeldOutScenes s;
  s.width = width;
  s.height = height;
  s.first_seed = first_seed;
  s.images.resize(static_cast<std::size_t>(count));
  s.truth.resize(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) {
    s.images[i] = lesson12::scene_input(first_seed + static_cast<std::uint64_t>(i), width, height,
                                        &s.truth[i]);
  }
  return s;
}

namespace {

// body(i) for i in [0, count) on `threads` threads, each taking every threads-th index; the
// first exception (lowest thread) is rethrown after all have joined.
void for_each_index(int count, int threads, const std::function<void(int)>& body) {
  if (threads < 1) {
    throw std::invalid_argument("expected threads >= 1, got " + std::to_string(threads));
  }
  threads = std::max(1, std::min(threads, count));
  if (threads == 1) {
    for (int i = 0; i < count; ++i) body(i);
    return;
  }
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(threads));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      try {
        for (int i = t; i < count; i += threads) body(i);
      } catch (...) {
        errors[static_cast<std::size_t>(t)] = std::current_exception();
      }
    });
  }
  for (std::thread& th : pool) th.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

void postprocess_into(const std::vector<float>& y, const HeldOutScenes& scenes, int num_classes,
                      int i, SceneDetections& d) {
  const int n = lesson12::num_candidates(scenes.height, scenes.width);
  const lesson08::OutputSpec spec{lesson08::Layout::yolov8, n, num_classes};
  if (y.size() != spec.elements()) {
    throw std::invalid_argument("detect_scenes: scene " + std::to_string(i) + "'s output has " +
                                std::to_string(y.size()) + " values, expected " +
                                std::to_string(spec.elements()));
  }
  const auto lb = course::make_letterbox(scenes.width, scenes.height, scenes.width, scenes.height);
  d.eval[i] =
      lesson08::postprocess_cpu(y.data(), y.size(), spec, lb, lesson12::eval_config()).detections;
  d.deploy[i] =
      lesson08::postprocess_cpu(y.data(), y.size(), spec, lb, lesson12::deploy_config()).detections;
}

}  // namespace

SceneDetections detect_scenes(const NetworkFn& net, const HeldOutScenes& scenes, int num_classes,
                              int threads) {
  if (threads < 1) {
    throw std::invalid_argument("detect_scenes: expected threads >= 1, got " +
                                std::to_string(threads));
  }
  const int count = static_cast<int>(scenes.images.size());
  SceneDetections d;
  d.eval.resize(scenes.images.size());
  d.deploy.resize(scenes.images.size());
  for_each_index(count, threads, [&](int i) {
    postprocess_into(net(scenes.images[static_cast<std::size_t>(i)]), scenes, num_classes, i, d);
  });
  return d;
}

Accuracy score_detections(const SceneDetections& run, const HeldOutScenes& scenes, int num_classes,
                          const SceneDetections* reference) {
  const std::size_t n = scenes.truth.size();
  if (run.eval.size() != n || run.deploy.size() != n ||
      (reference && (reference->eval.size() != n || reference->deploy.size() != n))) {
    throw std::invalid_argument("score_detections: expected detections of " + std::to_string(n) +
                                " scenes (one entry per scene, run and reference)");
  }
  std::vector<lesson12::FrameEval> frames(n);
  for (std::size_t i = 0; i < n; ++i) frames[i] = {scenes.truth[i], run.eval[i]};
  const lesson12::MapResult m = lesson12::mean_average_precision(frames, num_classes);
  Accuracy a;
  a.map50 = m.map50;
  a.map50_95 = m.map50_95;
  a.truth_boxes = m.truth_boxes;
  a.frames = static_cast<int>(n);
  a.changed = -1;
  if (reference) {
    a.changed = 0;
    for (std::size_t i = 0; i < n; ++i) {
      a.changed += !lesson12::same_detections(run.deploy[i], reference->deploy[i], 0.9f);
    }
  }
  return a;
}

std::vector<LayerSensitivity> layer_sensitivity(const EngineGraph& graph,
                                                const CalibrationTable& table, WeightScales weights,
                                                const HeldOutScenes& scenes,
                                                const SceneDetections& reference, int threads) {
  // The FP32 buffers of every scene, once: a run with layer L in INT8 resumes from them at L.
  FakeQuantConfig fp32;
  fp32.all_fp32 = true;
  const FakeQuantGraph base(graph, table, fp32);
  const int count = static_cast<int>(scenes.images.size());
  std::vector<std::vector<std::vector<float>>> fp32_buffers(static_cast<std::size_t>(count));
  for_each_index(count, threads, [&](int i) {
    base.run(scenes.images[static_cast<std::size_t>(i)],
             &fp32_buffers[static_cast<std::size_t>(i)]);
  });
  std::vector<LayerSensitivity> rows;
  for (std::size_t op = 0; op < graph.ops.size(); ++op) {
    if (graph.ops[op].kind != OpKind::conv) continue;
    FakeQuantConfig c;
    c.weights = weights;
    c.int8_only = {graph.ops[op].name};
    const FakeQuantGraph g(graph, table, c);
    SceneDetections d;
    d.eval.resize(static_cast<std::size_t>(count));
    d.deploy.resize(static_cast<std::size_t>(count));
    for_each_index(count, threads, [&](int i) {
      std::vector<std::vector<float>> buffers = fp32_buffers[static_cast<std::size_t>(i)];
      const std::vector<float> y =
          g.run_from(static_cast<int>(op), scenes.images[static_cast<std::size_t>(i)], buffers);
      postprocess_into(y, scenes, graph.num_classes, i, d);
    });
    rows.push_back(
        {graph.ops[op].name, score_detections(d, scenes, graph.num_classes, &reference)});
  }
  return rows;
}

}  // namespace lesson13
