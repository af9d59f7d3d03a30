// Lesson 13: the INT8 (and FP8) engine (quantized_engine.hpp): the plan of launches and its
// enqueue. Host code; the engine's own kernels are in quantized_engine.cu.
#include "quantized_engine.hpp"

#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include "calibrate_graph.hpp"  // calibration_tensor_names, kInputTensorName
#include "common/cuda_check.hpp"
#include "common/memory.hpp"
#include "common/stream.hpp"
#include "fp8_conv.hpp"
#include "fp8_conv_gpu.hpp"
#include "int8_conv_gpu.hpp"
#include "kernel_library.hpp"  // lesson 12
#include "launch.hpp"          // lesson 12: launch_conv_kernel
#include "plan.hpp"            // lesson 12: convert_weights
#include "quantize.hpp"

namespace lesson13 {

using lesson12::ConvKernelInfo;
using lesson12::DType;
using lesson12::EngineGraph;
using lesson12::FusedOp;
using lesson12::OpKind;
using lesson12::View;

const char* to_string(BufferStorage s) {
  switch (s) {
    case BufferStorage::int8:
      return "int8";
    case BufferStorage::f16:
      return "fp16";
    case BufferStorage::f32:
      return "fp32";
    case BufferStorage::fp8_e4m3:
      return "fp8";
  }
  return "?";
}

std::size_t storage_bytes(BufferStorage s) {
  switch (s) {
    case BufferStorage::int8:
    case BufferStorage::fp8_e4m3:
      return 1;
    case BufferStorage::f16:
      return 2;
    default:
      return 4;
  }
}

namespace {

constexpr int kPaddedInputChannels = kInt8ConvChannelMultiple;  // the INT8 model.0's in_c

std::size_t align256(std::size_t x) {
  return (x + 255) / 256 * 256;
}

bool positive_normal(float s) {
  return std::isnormal(s) && s > 0;
}

bool quantized(BufferStorage s) {
  return s == BufferStorage::int8 || s == BufferStorage::fp8_e4m3;
}

// The FP8 scale of a tensor whose table scale is s8: the table's amax = 127 s8 (exact in
// double), over 448, rounded to float. FakeQuantGraph's constructor (fake_quant.cpp) computes it
// in a local lambda; this is the same expression, so that the two agree bit for bit.
float fp8_scale_from_table(float s8) {
  return static_cast<float>(static_cast<double>(s8) * kInt8Max / kFp8E4M3Max);
}

BufferStorage storage_of(DType t) {
  return t == DType::f16 ? BufferStorage::f16 : BufferStorage::f32;
}

const char* dtype_name(DType t) {
  return t == DType::f16 ? "FP16" : "FP32";
}

Int8ConvOutput conv_output_of(BufferStorage s) {
  switch (s) {
    case BufferStorage::int8:
      return Int8ConvOutput::int8;
    case BufferStorage::f16:
      return Int8ConvOutput::f16;
    default:
      return Int8ConvOutput::f32;
  }
}

Fp8ConvOutput fp8_output_of(BufferStorage s) {
  switch (s) {
    case BufferStorage::fp8_e4m3:
      return Fp8ConvOutput::fp8;
    case BufferStorage::f16:
      return Fp8ConvOutput::f16;
    default:
      return Fp8ConvOutput::f32;
  }
}

// An op's weights quantised exactly as FakeQuantGraph's constructor quantises them
// (fake_quant.cpp), so that the two can be compared bit for bit.
void quantize_weights(const FusedOp& op, WeightScales ws, std::vector<std::int8_t>& q,
                      std::vector<float>& scale) {
  if (ws == WeightScales::per_channel) {
    PerChannelInt8 pc = quantize_int8_per_channel(op.weight, op.out_channels);
    q = std::move(pc.q);
    scale = std::move(pc.scale);
    return;
  }
  double amax = 0;
  for (float w : op.weight) {
    if (!std::isfinite(w)) {
      throw std::invalid_argument("QuantizedEngine: op '" + op.name +
                                  "' has a weight that is not finite");
    }
    amax = std::max(amax, std::fabs(static_cast<double>(w)));
  }
  const float s = amax > 0 ? int8_scale(amax) : 1.0f;
  q = quantize_int8_per_tensor(op.weight, s);
  scale.assign(static_cast<std::size_t>(op.out_channels), s);
}

enum class StepKind {
  quantize_input,
  reformat,
  int8_conv,
  int8_image_conv,
  int8_pool,
  fp8_conv,
  fp8_pool,
  fp_conv,
  fp_pool,
  detect
};

// One launch of enqueue, its arguments resolved at construction for max_batch; enqueue patches
// the batch and the bound tensors.
struct Step {
  StepKind kind = StepKind::reformat;
  int op = -1;  // the graph op it belongs to (-1: the input quantisation)
  std::string label;
  detail::QuantizeInputArgs quantize_input{};
  detail::ReformatArgs reformat{};
  long long pixels_per_image = 0;  // reformat: pixels = batch * this
  Int8ConvArgs int8_conv{};
  Int8ImageConvArgs int8_image_conv{};  // images: enqueue's
  detail::Int8PoolArgs int8_pool{};
  Fp8ConvArgs fp8_conv{};
  detail::Fp8PoolArgs fp8_pool{};
  lesson12::ConvArgs conv{};
  bool reads_images = false;                   // fp_conv: x = the network input
  std::vector<const ConvKernelInfo*> kernels;  // fp_conv: the lesson 12 kernels that can run it
  lesson12::PoolArgs pool{};
  std::string symbol;  // fp_pool
  lesson12::DetectArgs detect{};
};

// What an op reads and writes, decided before any memory exists: whether each of its views goes
// through a scratch buffer (a reformat).
struct OpPlan {
  bool x_scratch = false, res_scratch = false, y_scratch = false;
};

}  // namespace

struct QuantizedEngine::Impl {
  EngineGraph graph;
  QuantizedEngineConfig config;
  bool fp8 = false;                           // config.precision == fp8_e4m3
  BufferStorage qtype = BufferStorage::int8;  // the storage of quantised buffers
  std::vector<bool> int8;                     // per op: quantised (INT8 or FP8)
  std::vector<BufferStorage> storage;         // per buffer
  std::vector<float> scale;  // per buffer: the table's, or its FP8 scale (0 where unused)
  float images_scale = 0;
  bool quantize_input = false;  // a separate kernel quantises "images" (into 16 channels)
  bool fused_input = false;     // the op reading "images" quantises them itself (INT8)
  std::vector<OpPlan> plans;
  std::vector<std::size_t> offset;  // per buffer, bytes into the arena
  std::size_t images_q_offset = 0, arena_bytes = 0;
  std::size_t scratch_x_bytes = 0, scratch_res_bytes = 0, scratch_y_bytes = 0;
  course::DeviceBuffer<std::uint8_t> arena, scratch_x, scratch_res, scratch_y, weights;
  std::size_t weight_bytes = 0;
  std::unique_ptr<lesson12::KernelLibrary> lib;
  std::vector<Step> steps;
  int reformats = 0;
  int sm = 0, sm_count = 0;

  void validate_and_decide(const CalibrationTable& table, const std::string& network);
  void build_steps(const std::vector<std::size_t>& w_off, const std::vector<std::size_t>& ws_off,
                   const std::vector<std::size_t>& b_off);
  std::uint8_t* view_ptr(const View& v) {
    return arena.data() + offset[static_cast<std::size_t>(v.buffer)] +
           static_cast<std::size_t>(v.channel_offset) *
               storage_bytes(storage[static_cast<std::size_t>(v.buffer)]);
  }
  int buffer_channels(const View& v) const {
    return graph.buffers[static_cast<std::size_t>(v.buffer)].channels;
  }
};

// ------------------------------------------------------------------ checks, storage, scratch

void QuantizedEngine::Impl::validate_and_decide(const CalibrationTable& table,
                                                const std::string& network) {
  const QuantizedEngineConfig& c = config;
  if (c.precision != QuantPrecision::int8 && c.precision != QuantPrecision::fp8_e4m3) {
    throw std::invalid_argument("QuantizedEngine: unknown precision " +
                                std::to_string(static_cast<int>(c.precision)) +
                                ": expected QuantPrecision::int8 or fp8_e4m3");
  }
  fp8 = c.precision == QuantPrecision::fp8_e4m3;
  qtype = fp8 ? BufferStorage::fp8_e4m3 : BufferStorage::int8;
  const std::string qname = to_string(c.precision);  // "INT8", "FP8 E4M3"
  if (c.max_batch < 1 || c.max_batch > QuantizedEngineConfig::kMaxBatch) {
    throw std::invalid_argument("QuantizedEngine: expected max_batch in [1, " +
                                std::to_string(QuantizedEngineConfig::kMaxBatch) + "], got " +
                                std::to_string(c.max_batch));
  }
  const std::size_t n_ops = graph.ops.size(), n_buf = graph.buffers.size();
  int8.assign(n_ops, false);
  for (std::size_t i = 0; i < n_ops; ++i) int8[i] = graph.ops[i].kind != OpKind::detect;
  for (const std::string& name : c.keep) {
    bool found = false;
    for (std::size_t i = 0; i < n_ops; ++i) {
      if (graph.ops[i].name != name) continue;
      if (graph.ops[i].kind == OpKind::detect) {
        throw std::invalid_argument("QuantizedEngine: the keep list names '" + name +
                                    "', the detect op, which always runs in float");
      }
      int8[i] = false;
      found = true;
    }
    if (!found) {
      throw std::invalid_argument("QuantizedEngine: the keep list names '" + name +
                                  "', which is no op of the graph");
    }
  }
  // The table: the network it was calibrated for and every tensor (std::runtime_error).
  check_calibration_table(table, network, calibration_tensor_names(graph));

  // Who reads each buffer.
  std::vector<bool> by_detect(n_buf, false), by_int8(n_buf, false), by_fp(n_buf, false);
  std::vector<bool> by_int8_producer(n_buf, false);
  bool input_read_int8 = false;
  for (std::size_t i = 0; i < n_ops; ++i) {
    const FusedOp& op = graph.ops[i];
    const auto read = [&](const View& v) {
      if (v.buffer == View::kNetworkInput) return;
      const std::size_t b = static_cast<std::size_t>(v.buffer);
      if (b >= n_buf) {
        throw std::invalid_argument("QuantizedEngine: op '" + op.name + "' reads buffer " +
                                    std::to_string(v.buffer) + ", which the graph does not have");
      }
      if (op.kind == OpKind::detect) {
        by_detect[b] = true;
      } else if (int8[i]) {
        by_int8[b] = true;
      } else {
        by_fp[b] = true;
      }
    };
    if (op.kind == OpKind::detect) {
      if (op.box.size() != 3 || op.cls.size() != 3 || op.strides.size() != 3) {
        throw std::invalid_argument("QuantizedEngine: the detect op '" + op.name +
                                    "' must have 3 levels (lesson 12's decode kernel), got " +
                                    std::to_string(op.box.size()));
      }
      for (const View& v : op.box) read(v);
      for (const View& v : op.cls) read(v);
      for (const View& v : op.box) {
        if (v.buffer == View::kNetworkInput) {
          throw std::invalid_argument("QuantizedEngine: the detect op reads the network input");
        }
      }
      for (const View& v : op.cls) {
        if (v.buffer == View::kNetworkInput) {
          throw std::invalid_argument("QuantizedEngine: the detect op reads the network input");
        }
      }
      continue;
    }
    read(op.input);
    if (op.has_residual) read(op.residual);
    if (op.output.buffer < 0 || static_cast<std::size_t>(op.output.buffer) >= n_buf) {
      throw std::invalid_argument("QuantizedEngine: op '" + op.name +
                                  "' writes no buffer of the graph");
    }
    if (int8[i]) by_int8_producer[static_cast<std::size_t>(op.output.buffer)] = true;
    if (op.has_residual && op.residual.buffer == View::kNetworkInput) {
      throw std::invalid_argument("QuantizedEngine: op '" + op.name +
                                  "' adds the network input as a residual: not supported");
    }
    if (op.input.buffer == View::kNetworkInput) {
      if (op.kind != OpKind::conv) {
        throw std::invalid_argument("QuantizedEngine: op '" + op.name + "' (" +
                                    lesson12::to_string(op.kind) +
                                    ") reads the network input: only a convolution may");
      }
      if (op.input.channel_offset != 0 || op.input.channels != graph.input_c ||
          op.input.h != graph.input_h || op.input.w != graph.input_w) {
        throw std::invalid_argument("QuantizedEngine: op '" + op.name +
                                    "' reads part of the network input: expected all of it");
      }
      if (int8[i]) {
        if (graph.input_c > kPaddedInputChannels) {
          throw std::invalid_argument(
              "QuantizedEngine: op '" + op.name + "' reads a network input of " +
              std::to_string(graph.input_c) + " channels in " + qname + "; at most " +
              std::to_string(kPaddedInputChannels) + " (keep it in the fallback list)");
        }
        input_read_int8 = true;
      }
    } else if (int8[i] && op.kind == OpKind::conv &&
               op.in_channels % kInt8ConvChannelMultiple != 0) {
      throw std::invalid_argument(
          "QuantizedEngine: op '" + op.name + "' has " + std::to_string(op.in_channels) +
          " input channels, not a multiple of " + std::to_string(kInt8ConvChannelMultiple) +
          " (the " + qname + " tensor-core kernel's requirement): keep it in the fallback list");
    }
  }

  // Storage: decided by the readers (quantized_engine.hpp).
  const BufferStorage fb = storage_of(c.fallback);
  storage.assign(n_buf, qtype);
  scale.assign(n_buf, 0.0f);
  for (std::size_t b = 0; b < n_buf; ++b) {
    if (by_detect[b]) {
      storage[b] = BufferStorage::f32;
    } else if (by_int8[b]) {
      storage[b] = qtype;
    } else if (by_fp[b]) {
      storage[b] = fb;
    } else {
      storage[b] = by_int8_producer[b] ? qtype : fb;  // read by nobody
    }
  }
  // The scale of a tensor's codes: the table's (INT8), or the FP8 scale derived from it, with
  // FakeQuantGraph's checks and messages.
  const auto table_scale = [&](const std::string& name) {
    const float s = table.scale(name);
    if (!positive_normal(s)) {
      throw std::invalid_argument("QuantizedEngine: the scale of tensor '" + name + "' is " +
                                  std::to_string(s) + ", expected a positive normal float");
    }
    if (!fp8) return s;
    const float s_fp8 = fp8_scale_from_table(s);
    if (!positive_normal(s_fp8)) {
      throw std::invalid_argument("QuantizedEngine: the scale of tensor '" + name + "' (" +
                                  std::to_string(s) +
                                  ") gives an FP8 scale that is not a positive normal float");
    }
    return s_fp8;
  };
  for (std::size_t b = 0; b < n_buf; ++b) {
    if (quantized(storage[b]) || by_int8[b]) {
      scale[b] = table_scale(graph.buffers[b].name);
    }
  }
  // INT8 with fuse_input: the op reading the input runs conv_int8_image_gpu on the floats.
  fused_input = input_read_int8 && !fp8 && c.fuse_input && graph.input_c <= kInt8ImageMaxChannels;
  quantize_input = input_read_int8 && !fused_input;
  if (input_read_int8) images_scale = table_scale(kInputTensorName);

  // Which views go through scratch, and how large each scratch buffer must be.
  plans.assign(n_ops, OpPlan{});
  const std::size_t mb = static_cast<std::size_t>(c.max_batch);
  for (std::size_t i = 0; i < n_ops; ++i) {
    const FusedOp& op = graph.ops[i];
    if (op.kind == OpKind::detect) continue;  // its buffers are f32: read directly
    OpPlan& p = plans[i];
    const BufferStorage want = int8[i] ? qtype : fb;
    const std::size_t es = storage_bytes(want);
    if (op.input.buffer != View::kNetworkInput) {
      const std::size_t xb = static_cast<std::size_t>(op.input.buffer);
      const int stride = graph.buffers[xb].channels;
      // The INT8 / FP8 kernel moves 16 channels per 16-byte copy: the view must start and step
      // on 16.
      const bool aligned = !(int8[i] && op.kind == OpKind::conv) ||
                           (stride % kInt8ConvChannelMultiple == 0 &&
                            op.input.channel_offset % kInt8ConvChannelMultiple == 0);
      p.x_scratch = storage[xb] != want || !aligned;
      if (p.x_scratch) {
        scratch_x_bytes =
            std::max(scratch_x_bytes, mb * op.input.h * op.input.w *
                                          static_cast<std::size_t>(op.input.channels) * es);
      }
    }
    const std::size_t out_elems =
        mb * op.output.h * op.output.w * static_cast<std::size_t>(op.output.channels);
    if (op.has_residual) {
      p.res_scratch = storage[static_cast<std::size_t>(op.residual.buffer)] != want;
      if (p.res_scratch) scratch_res_bytes = std::max(scratch_res_bytes, out_elems * es);
    }
    // An INT8 op writes any storage itself; a fallback op writes its own dtype only.
    p.y_scratch = !int8[i] && storage[static_cast<std::size_t>(op.output.buffer)] != fb;
    if (p.y_scratch) scratch_y_bytes = std::max(scratch_y_bytes, out_elems * es);
  }

  // The arena: every buffer its own bytes, 256-byte aligned; then the quantised input.
  offset.assign(n_buf, 0);
  std::size_t total = 0;
  for (std::size_t b = 0; b < n_buf; ++b) {
    offset[b] = total;
    total =
        align256(total + mb * graph.buffers[b].elements_per_image() * storage_bytes(storage[b]));
  }
  images_q_offset = total;
  if (quantize_input) {
    total = align256(total + mb * graph.input_h * graph.input_w *
                                 static_cast<std::size_t>(kPaddedInputChannels));
  }
  arena_bytes = std::max<std::size_t>(total, 256);
}

// ------------------------------------------------------------------ the launches

void QuantizedEngine::Impl::build_steps(const std::vector<std::size_t>& w_off,
                                        const std::vector<std::size_t>& ws_off,
                                        const std::vector<std::size_t>& b_off) {
  const int mb = config.max_batch;
  const DType fdt = config.fallback;
  const BufferStorage fb = storage_of(fdt);
  steps.clear();
  reformats = 0;
  if (quantize_input) {
    Step s;
    s.kind = StepKind::quantize_input;
    s.label = std::string("quantize ") + kInputTensorName + " (float NCHW -> " + to_string(qtype) +
              " NHWC, " + std::to_string(kPaddedInputChannels) + " channels)";
    s.quantize_input = {
        nullptr,       arena.data() + images_q_offset, mb,           graph.input_c, graph.input_h,
        graph.input_w, kPaddedInputChannels,           images_scale, qtype};
    steps.push_back(std::move(s));
  }
  // A reformat of `channels` channels of h x w pixels per image between two views.
  const auto add_reformat = [&](int op, const std::string& what, const void* x, int x_stride,
                                BufferStorage xt, float xs, void* y, int y_stride, BufferStorage yt,
                                float ys, int h, int w, int channels) {
    Step s;
    s.kind = StepKind::reformat;
    s.op = op;
    s.label = "reformat " + what + " " + to_string(xt) + " -> " + to_string(yt);
    s.pixels_per_image = static_cast<long long>(h) * w;
    s.reformat = {x,
                  y,
                  x_stride,
                  y_stride,
                  s.pixels_per_image * mb,
                  channels,
                  xt,
                  yt,
                  quantized(xt) ? xs : 1.0f,
                  quantized(yt) ? ys : 1.0f};
    steps.push_back(std::move(s));
    ++reformats;
  };
  const auto weights_at = [&](std::size_t off) { return weights.data() + off; };

  for (std::size_t i = 0; i < graph.ops.size(); ++i) {
    const FusedOp& op = graph.ops[i];
    const int oi = static_cast<int>(i);
    const OpPlan& p = plans[i];
    if (op.kind == OpKind::detect) {
      Step s;
      s.kind = StepKind::detect;
      s.op = oi;
      s.label = "detect " + op.name + " (lesson 12's decode, fp32)";
      lesson12::DetectArgs& d = s.detect;
      for (int l = 0; l < 3; ++l) {
        d.box[l] = view_ptr(op.box[static_cast<std::size_t>(l)]);
        d.cls[l] = view_ptr(op.cls[static_cast<std::size_t>(l)]);
        d.box_stride[l] = buffer_channels(op.box[static_cast<std::size_t>(l)]);
        d.cls_stride[l] = buffer_channels(op.cls[static_cast<std::size_t>(l)]);
        d.h[l] = op.box[static_cast<std::size_t>(l)].h;
        d.w[l] = op.box[static_cast<std::size_t>(l)].w;
        d.level_stride[l] = op.strides[static_cast<std::size_t>(l)];
      }
      d.batch = mb;
      d.num_classes = op.num_classes;
      d.reg_max = op.reg_max;
      d.num_candidates = graph.num_candidates;
      d.out = nullptr;  // enqueue's output
      steps.push_back(std::move(s));
      continue;
    }
    const std::size_t xb = static_cast<std::size_t>(op.input.buffer);  // unless network input
    const std::size_t yb = static_cast<std::size_t>(op.output.buffer);
    const BufferStorage want = int8[i] ? qtype : fb;
    const int out_c = op.output.channels;
    // The input view as the op reads it: the buffer's view, or the scratch it was reformatted
    // into (dense: stride = its channels).
    const void* x = nullptr;
    int x_stride = 0;
    if (op.input.buffer != View::kNetworkInput) {
      if (p.x_scratch) {
        add_reformat(oi, "input of " + op.name, view_ptr(op.input), buffer_channels(op.input),
                     storage[xb], scale[xb], scratch_x.data(), op.input.channels, want, scale[xb],
                     op.input.h, op.input.w, op.input.channels);
        x = scratch_x.data();
        x_stride = op.input.channels;
      } else {
        x = view_ptr(op.input);
        x_stride = buffer_channels(op.input);
      }
    }
    const void* res = nullptr;
    int res_stride = 0;
    float res_scale = 0;
    if (op.has_residual) {
      const std::size_t rb = static_cast<std::size_t>(op.residual.buffer);
      res_scale = scale[rb];
      if (p.res_scratch) {
        add_reformat(oi, "residual of " + op.name, view_ptr(op.residual),
                     buffer_channels(op.residual), storage[rb], scale[rb], scratch_res.data(),
                     out_c, want, scale[rb], op.residual.h, op.residual.w, out_c);
        res = scratch_res.data();
        res_stride = out_c;
      } else {
        res = view_ptr(op.residual);
        res_stride = buffer_channels(op.residual);
      }
    }
    // The output as the op writes it: the buffer's view, or (fallback ops only) the scratch
    // that a reformat after the op moves into the buffer.
    void* y = p.y_scratch ? static_cast<void*>(scratch_y.data()) : view_ptr(op.output);
    const int y_stride = p.y_scratch ? out_c : buffer_channels(op.output);

    Step s;
    s.op = oi;
    if (fp8 && int8[i] && op.kind == OpKind::conv) {
      s.kind = StepKind::fp8_conv;
      s.label = "fp8 conv " + op.name + " -> " + to_string(storage[yb]);
      Fp8ConvArgs& a = s.fp8_conv;
      lesson12::set_conv_geometry(op, mb, a);
      if (op.input.buffer == View::kNetworkInput) {
        a.x = arena.data() + images_q_offset;
        a.x_stride = kPaddedInputChannels;
        a.in_c = kPaddedInputChannels;  // model.0's weights are padded alike
        a.x_scale = images_scale;
      } else {
        a.x = static_cast<const std::uint8_t*>(x);
        a.x_stride = x_stride;
        a.x_scale = scale[xb];
      }
      a.w = weights_at(w_off[i]);
      a.w_scale = reinterpret_cast<const float*>(weights_at(ws_off[i]));
      a.bias = reinterpret_cast<const float*>(weights_at(b_off[i]));
      a.res = static_cast<const std::uint8_t*>(res);
      a.res_stride = res_stride;
      a.res_scale = op.has_residual ? res_scale : 0.0f;
      a.y = y;
      a.y_stride = y_stride;
      a.y_type = fp8_output_of(storage[yb]);
      a.y_scale = storage[yb] == BufferStorage::fp8_e4m3 ? scale[yb] : 1.0f;
      try {
        check_fp8_conv_gpu_args(a);  // what conv_fp8_gpu would refuse, now
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument("QuantizedEngine: op '" + op.name + "': " + e.what());
      }
    } else if (fp8 && int8[i]) {  // max pool, upsample, copy on E4M3 codes
      s.kind = StepKind::fp8_pool;
      s.label = std::string("fp8 ") + lesson12::to_string(op.kind) + " " + op.name + " -> " +
                to_string(storage[yb]);
      detail::Fp8PoolArgs& a = s.fp8_pool;
      a.x = static_cast<const std::uint8_t*>(x);
      a.y = y;
      a.x_stride = x_stride;
      a.y_stride = y_stride;
      a.batch = mb;
      a.in_h = op.input.h;
      a.in_w = op.input.w;
      a.channels = out_c;
      a.out_h = op.output.h;
      a.out_w = op.output.w;
      a.kernel = op.kind == OpKind::max_pool ? op.kernel : 1;
      a.stride = op.kind == OpKind::max_pool ? op.stride : 1;
      a.pad = op.kind == OpKind::max_pool ? op.pad : 0;
      a.upsample = op.kind == OpKind::upsample ? 1 : 0;
      a.x_scale = scale[xb];
      a.y_type = storage[yb];
      a.y_scale = storage[yb] == BufferStorage::fp8_e4m3 ? scale[yb] : 1.0f;
    } else if (int8[i] && op.kind == OpKind::conv && op.input.buffer == View::kNetworkInput &&
               fused_input) {
      s.kind = StepKind::int8_image_conv;
      s.label = "int8 conv " + op.name + " -> " + to_string(storage[yb]) +
                " (quantises the float images itself)";
      Int8ImageConvArgs& ia = s.int8_image_conv;
      Int8ConvArgs& a = ia.conv;
      lesson12::set_conv_geometry(op, mb, a);
      a.x = nullptr;  // the kernel reads the images: enqueue's pointer
      a.x_stride = 0;
      a.x_scale = images_scale;
      a.w = reinterpret_cast<const std::int8_t*>(weights_at(w_off[i]));
      a.w_scale = reinterpret_cast<const float*>(weights_at(ws_off[i]));
      a.bias = reinterpret_cast<const float*>(weights_at(b_off[i]));
      a.res = nullptr;  // validate_and_decide refused a residual from the network input
      a.y = y;
      a.y_stride = y_stride;
      a.y_type = conv_output_of(storage[yb]);
      a.y_scale = storage[yb] == BufferStorage::int8 ? scale[yb] : 1.0f;
      // Checked now, a placeholder standing in for the images (enqueue supplies them; the
      // check never reads through the pointer).
      static const float placeholder = 0.0f;
      ia.images = &placeholder;
      try {
        check_int8_image_conv_args(ia);
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument("QuantizedEngine: op '" + op.name + "': " + e.what());
      }
      ia.images = nullptr;
    } else if (int8[i] && op.kind == OpKind::conv) {
      s.kind = StepKind::int8_conv;
      s.label = "int8 conv " + op.name + " -> " + to_string(storage[yb]);
      Int8ConvArgs& a = s.int8_conv;
      lesson12::set_conv_geometry(op, mb, a);
      if (op.input.buffer == View::kNetworkInput) {
        a.x = reinterpret_cast<const std::int8_t*>(arena.data() + images_q_offset);
        a.x_stride = kPaddedInputChannels;
        a.in_c = kPaddedInputChannels;  // model.0's weights are padded alike
        a.x_scale = images_scale;
      } else {
        a.x = static_cast<const std::int8_t*>(x);
        a.x_stride = x_stride;
        a.x_scale = scale[xb];
      }
      a.w = reinterpret_cast<const std::int8_t*>(weights_at(w_off[i]));
      a.w_scale = reinterpret_cast<const float*>(weights_at(ws_off[i]));
      a.bias = reinterpret_cast<const float*>(weights_at(b_off[i]));
      a.res = static_cast<const std::int8_t*>(res);
      a.res_stride = res_stride;
      a.res_scale = op.has_residual ? res_scale : 0.0f;
      a.y = y;
      a.y_stride = y_stride;
      a.y_type = conv_output_of(storage[yb]);
      a.y_scale = storage[yb] == BufferStorage::int8 ? scale[yb] : 1.0f;
      try {
        check_int8_conv_gpu_args(a);  // what conv_int8_gpu would refuse, now
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument("QuantizedEngine: op '" + op.name + "': " + e.what());
      }
    } else if (int8[i]) {  // max pool, upsample, copy on codes
      s.kind = StepKind::int8_pool;
      s.label = std::string("int8 ") + lesson12::to_string(op.kind) + " " + op.name + " -> " +
                to_string(storage[yb]);
      detail::Int8PoolArgs& a = s.int8_pool;
      a.x = static_cast<const std::int8_t*>(x);
      a.y = y;
      a.x_stride = x_stride;
      a.y_stride = y_stride;
      a.batch = mb;
      a.in_h = op.input.h;
      a.in_w = op.input.w;
      a.channels = out_c;
      a.out_h = op.output.h;
      a.out_w = op.output.w;
      a.kernel = op.kind == OpKind::max_pool ? op.kernel : 1;
      a.stride = op.kind == OpKind::max_pool ? op.stride : 1;
      a.pad = op.kind == OpKind::max_pool ? op.pad : 0;
      a.upsample = op.kind == OpKind::upsample ? 1 : 0;
      a.x_scale = scale[xb];
      a.y_type = storage[yb];
      a.y_scale = storage[yb] == BufferStorage::int8 ? scale[yb] : 1.0f;
    } else if (op.kind == OpKind::conv) {
      s.kind = StepKind::fp_conv;
      s.label = std::string(dtype_name(fdt)) + " conv " + op.name + " (lesson 12's kernels)";
      lesson12::ConvArgs& a = s.conv;
      lesson12::set_conv_geometry(op, mb, a);
      s.reads_images = op.input.buffer == View::kNetworkInput;
      a.x = x;  // null for the network input: enqueue's images
      a.x_stride = s.reads_images ? graph.input_c : x_stride;
      a.w = weights_at(w_off[i]);
      a.bias = reinterpret_cast<const float*>(weights_at(b_off[i]));
      a.res = res;
      a.res_stride = res_stride;
      a.y = y;
      a.y_stride = y_stride;
      int count = 0;
      const ConvKernelInfo* table = lesson12::conv_kernels(&count);
      for (int k = 0; k < count; ++k) {
        const ConvKernelInfo& info = table[k];
        // Split-K kernels need thread-block clusters: left out to keep the fallback simple.
        if (info.dtype == fdt && info.split_k <= 1 && lesson12::conv_kernel_runs_on(info, sm) &&
            lesson12::conv_kernel_supports(info, a, s.reads_images)) {
          s.kernels.push_back(&info);
        }
      }
      if (s.kernels.empty()) {
        throw std::invalid_argument("QuantizedEngine: no " + std::string(dtype_name(fdt)) +
                                    " kernel of lesson 12 can run the fallback op '" + op.name +
                                    "' (" + lesson12::describe(op) + ")");
      }
    } else {  // fallback max pool, upsample, copy: lesson 12's kernels (a copy is a 1x1 pool)
      s.kind = StepKind::fp_pool;
      s.label = std::string(dtype_name(fdt)) + " " + lesson12::to_string(op.kind) + " " + op.name +
                " (lesson 12's kernel)";
      s.symbol = op.kind == OpKind::upsample ? lesson12::upsample_symbol(fdt)
                                             : lesson12::max_pool_symbol(fdt);
      lesson12::PoolArgs& a = s.pool;
      a.x = x;
      a.y = y;
      a.x_stride = x_stride;
      a.y_stride = y_stride;
      a.batch = mb;
      a.in_h = op.input.h;
      a.in_w = op.input.w;
      a.channels = out_c;
      a.out_h = op.output.h;
      a.out_w = op.output.w;
      a.kernel = op.kind == OpKind::max_pool ? op.kernel : (op.kind == OpKind::upsample ? 2 : 1);
      a.stride = op.kind == OpKind::max_pool ? op.stride : (op.kind == OpKind::upsample ? 2 : 1);
      a.pad = op.kind == OpKind::max_pool ? op.pad : 0;
      lib->kernel(s.symbol);  // resolve now: a missing kernel fails here, not at enqueue
    }
    steps.push_back(std::move(s));
    if (p.y_scratch) {
      add_reformat(oi, "output of " + op.name, scratch_y.data(), out_c, fb, 0.0f,
                   view_ptr(op.output), buffer_channels(op.output), storage[yb], scale[yb],
                   op.output.h, op.output.w, out_c);
    }
  }
}

// ------------------------------------------------------------------ construction

QuantizedEngine::QuantizedEngine(EngineGraph graph, const CalibrationTable& table,
                                 const std::string& network, const QuantizedEngineConfig& config)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.graph = std::move(graph);
  m.config = config;
  m.validate_and_decide(table, network);  // no CUDA call before this returns

  // Weights on the host, as the device will hold them: per op its (INT8 or fallback) weights,
  // INT8 weight scales and bias, each 256-byte aligned (the kernels load 16-byte chunks).
  const std::size_t n_ops = m.graph.ops.size();
  std::vector<std::size_t> w_off(n_ops, 0), ws_off(n_ops, 0), b_off(n_ops, 0);
  std::vector<std::uint8_t> staging;
  const auto append = [&](const void* p, std::size_t bytes) {
    const std::size_t at = align256(staging.size());
    staging.resize(at + bytes);
    if (bytes > 0) std::memcpy(staging.data() + at, p, bytes);
    return at;
  };
  for (std::size_t i = 0; i < n_ops; ++i) {
    const FusedOp& op = m.graph.ops[i];
    if (op.kind != OpKind::conv) continue;
    if (m.int8[i] && m.fp8) {
      // As FakeQuantGraph's FP8 mode: quantize_fp8_e4m3_weights, per channel or per tensor.
      Fp8Weights fw = quantize_fp8_e4m3_weights(op.weight, op.out_channels,
                                                m.config.weights == WeightScales::per_channel);
      if (op.input.buffer == View::kNetworkInput) {
        // [out][k][k][in_c] -> [out][k][k][16]: code 0x00 (+0) for the input's zero channels.
        const std::size_t taps = static_cast<std::size_t>(op.out_channels) * op.kernel * op.kernel;
        std::vector<std::uint8_t> padded(taps * kPaddedInputChannels, 0);
        for (std::size_t t = 0; t < taps; ++t) {
          for (int c = 0; c < op.in_channels; ++c) {
            padded[t * kPaddedInputChannels + c] = fw.q[t * op.in_channels + c];
          }
        }
        fw.q = std::move(padded);
      }
      w_off[i] = append(fw.q.data(), fw.q.size());
      ws_off[i] = append(fw.scale.data(), fw.scale.size() * sizeof(float));
    } else if (m.int8[i]) {
      std::vector<std::int8_t> q;
      std::vector<float> ws;
      quantize_weights(op, m.config.weights, q, ws);
      if (op.input.buffer == View::kNetworkInput && !m.fused_input) {
        // [out][k][k][in_c] -> [out][k][k][16]: zero weights for the input's zero channels.
        const std::size_t taps = static_cast<std::size_t>(op.out_channels) * op.kernel * op.kernel;
        std::vector<std::int8_t> padded(taps * kPaddedInputChannels, 0);
        for (std::size_t t = 0; t < taps; ++t) {
          for (int c = 0; c < op.in_channels; ++c) {
            padded[t * kPaddedInputChannels + c] = q[t * op.in_channels + c];
          }
        }
        q = std::move(padded);
      }
      w_off[i] = append(q.data(), q.size());
      ws_off[i] = append(ws.data(), ws.size() * sizeof(float));
    } else {
      const std::vector<std::uint8_t> w = lesson12::convert_weights(op.weight, m.config.fallback);
      w_off[i] = append(w.data(), w.size());
    }
    b_off[i] = append(op.bias.data(), op.bias.size() * sizeof(float));
  }
  m.weight_bytes = staging.size();

  // The device: the INT8 kernel needs compute capability 8.0, the FP8 one 8.9 (mma.sync with
  // E4M3 operands); refused here, before any allocation or launch.
  int dev = 0, major = 0, minor = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&m.sm_count, cudaDevAttrMultiProcessorCount, dev));
  m.sm = major * 10 + minor;
  const int needed = m.fp8 ? 89 : 80;
  if (int8_ops() > 0 && m.sm < needed) {
    throw std::invalid_argument(
        "QuantizedEngine: this GPU has compute capability " + std::to_string(major) + "." +
        std::to_string(minor) + "; the " + to_string(m.config.precision) + " convolution needs " +
        std::to_string(needed / 10) + "." + std::to_string(needed % 10) + " or newer");
  }
  CUDA_CHECK(cudaFree(nullptr));  // the primary context, before the Driver API loads code
  m.lib = std::make_unique<lesson12::KernelLibrary>(lesson12::built_kernel_image());
  m.arena = course::DeviceBuffer<std::uint8_t>(m.arena_bytes);
  // Zeros, so that a buffer read before anything wrote it reads the same every time.
  CUDA_CHECK(cudaMemset(m.arena.data(), 0, m.arena.bytes()));
  m.scratch_x = course::DeviceBuffer<std::uint8_t>(m.scratch_x_bytes);
  m.scratch_res = course::DeviceBuffer<std::uint8_t>(m.scratch_res_bytes);
  m.scratch_y = course::DeviceBuffer<std::uint8_t>(m.scratch_y_bytes);
  m.weights = course::to_device(staging);
  m.build_steps(w_off, ws_off, b_off);
  m.lib->kernel(lesson12::detect_symbol(DType::f32));
}

QuantizedEngine::~QuantizedEngine() = default;

// ------------------------------------------------------------------ enqueue

namespace {

// The fallback convolution's kernel at this batch: among the kernels that can run it (table
// order: tensor-core tiles largest first, then the others), the first whose grid gives every SM
// a block; if none does, the last of them, the smallest tile. No timing: lesson 12's builder
// times tactics; a fallback layer is few of the launches.
const ConvKernelInfo& pick_kernel(const Step& s, const lesson12::ConvArgs& a, int sm_count) {
  const long long m = static_cast<long long>(a.batch) * a.out_h * a.out_w;
  const lesson12::ConvFamily family = s.kernels.front()->family;
  const ConvKernelInfo* last = s.kernels.front();
  for (const ConvKernelInfo* k : s.kernels) {
    if (k->family != family) continue;  // the first family listed: the implicit GEMM if any
    last = k;
    const long long blocks =
        ((m + k->tile_m - 1) / k->tile_m) * ((a.out_c + k->tile_n - 1) / k->tile_n);
    if (blocks >= sm_count) return *k;
  }
  return *last;
}

}  // namespace

void QuantizedEngine::enqueue_steps(
    const float* images, int batch, float* output, cudaStream_t stream,
    const std::function<void(std::size_t, cudaStream_t)>& step_done) {
  Impl& m = *impl_;
  if (images == nullptr || output == nullptr) {
    throw std::invalid_argument(std::string("QuantizedEngine::enqueue: ") +
                                (images == nullptr ? "images" : "output") +
                                " is null: expected a device pointer");
  }
  if (batch < 1 || batch > m.config.max_batch) {
    throw std::invalid_argument("QuantizedEngine::enqueue: batch " + std::to_string(batch) +
                                " is outside [1, " + std::to_string(m.config.max_batch) +
                                "] (the engine's max_batch)");
  }
  for (std::size_t i = 0; i < m.steps.size(); ++i) {
    if (step_done != nullptr) step_done(i, stream);
    const Step& s = m.steps[i];
    try {
      switch (s.kind) {
        case StepKind::quantize_input: {
          detail::QuantizeInputArgs a = s.quantize_input;
          a.images = images;
          a.batch = batch;
          detail::launch_quantize_input(a, stream);
          break;
        }
        case StepKind::reformat: {
          detail::ReformatArgs a = s.reformat;
          a.pixels = s.pixels_per_image * batch;
          detail::launch_reformat(a, stream);
          break;
        }
        case StepKind::int8_conv: {
          Int8ConvArgs a = s.int8_conv;
          a.batch = batch;
          // The automatic path: on compute capability 9.0 a 1x1 layer takes the wgmma kernel.
          conv_int8_gpu(a, stream, -1, nullptr, m.config.epilogue);
          break;
        }
        case StepKind::int8_image_conv: {
          Int8ImageConvArgs a = s.int8_image_conv;
          a.images = images;
          a.conv.batch = batch;
          conv_int8_image_gpu(a, stream, nullptr, m.config.epilogue);
          break;
        }
        case StepKind::int8_pool: {
          detail::Int8PoolArgs a = s.int8_pool;
          a.batch = batch;
          detail::launch_int8_pool(a, stream);
          break;
        }
        case StepKind::fp8_conv: {
          Fp8ConvArgs a = s.fp8_conv;
          a.batch = batch;
          conv_fp8_gpu(a, stream, fp8_conv_auto_tile(a, m.sm_count));
          break;
        }
        case StepKind::fp8_pool: {
          detail::Fp8PoolArgs a = s.fp8_pool;
          a.batch = batch;
          detail::launch_fp8_pool(a, stream);
          break;
        }
        case StepKind::fp_conv: {
          lesson12::ConvArgs a = s.conv;
          a.batch = batch;
          if (s.reads_images) a.x = images;
          lesson12::launch_conv_kernel(*m.lib, pick_kernel(s, a, m.sm_count), a, stream);
          break;
        }
        case StepKind::fp_pool: {
          lesson12::PoolArgs a = s.pool;
          a.batch = batch;
          m.lib->launch(s.symbol, lesson12::pool_grid(a), dim3(lesson12::kPoolThreads), 0, stream,
                        a);
          break;
        }
        case StepKind::detect: {
          lesson12::DetectArgs a = s.detect;
          a.batch = batch;
          a.out = output;
          m.lib->launch(lesson12::detect_symbol(DType::f32), lesson12::detect_grid(a),
                        dim3(lesson12::kDetectThreads), 0, stream, a);
          break;
        }
      }
    } catch (const std::exception& e) {
      throw std::runtime_error("QuantizedEngine::enqueue: " + s.label + ": " + e.what());
    }
  }
  if (step_done != nullptr) step_done(m.steps.size(), stream);
}

void QuantizedEngine::enqueue(const float* images, int batch, float* output, cudaStream_t stream) {
  enqueue_steps(images, batch, output, stream, nullptr);
}

std::vector<LaunchTime> QuantizedEngine::profile(const float* images, int batch, float* output,
                                                 cudaStream_t stream) {
  const std::vector<std::string> names = launches();
  std::vector<course::Event> events(names.size() + 1);
  enqueue(images, batch, output, stream);  // warm-up (first launches, L2)
  enqueue_steps(images, batch, output, stream,
                [&](std::size_t i, cudaStream_t st) { events[i].record(st); });
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<LaunchTime> t(names.size());
  for (std::size_t i = 0; i < names.size(); ++i)
    t[i] = {names[i], course::elapsed_ms(events[i], events[i + 1]) * 1e3};
  return t;
}

// ------------------------------------------------------------------ inspection

BufferContents QuantizedEngine::read_buffer(int index, int batch) const {
  const Impl& m = *impl_;
  if (index < 0 || index >= static_cast<int>(m.graph.buffers.size())) {
    throw std::invalid_argument("QuantizedEngine::read_buffer: buffer " + std::to_string(index) +
                                " outside [0, " + std::to_string(m.graph.buffers.size()) + ")");
  }
  if (batch < 1 || batch > m.config.max_batch) {
    throw std::invalid_argument("QuantizedEngine::read_buffer: batch " + std::to_string(batch) +
                                " is outside [1, " + std::to_string(m.config.max_batch) + "]");
  }
  const std::size_t b = static_cast<std::size_t>(index);
  BufferContents out;
  out.storage = m.storage[b];
  const std::size_t n = static_cast<std::size_t>(batch) * m.graph.buffers[b].elements_per_image();
  std::vector<std::uint8_t> raw(n * storage_bytes(out.storage));
  CUDA_CHECK(cudaDeviceSynchronize());
  if (!raw.empty()) {
    CUDA_CHECK(
        cudaMemcpy(raw.data(), m.arena.data() + m.offset[b], raw.size(), cudaMemcpyDeviceToHost));
  }
  out.values.resize(n);
  switch (out.storage) {
    case BufferStorage::int8:
      out.scale = m.scale[b];
      out.codes.resize(n);
      std::memcpy(out.codes.data(), raw.data(), n);
      for (std::size_t i = 0; i < n; ++i) out.values[i] = dequantize_int8(out.codes[i], out.scale);
      break;
    case BufferStorage::fp8_e4m3:
      out.scale = m.scale[b];
      out.e4m3 = std::move(raw);
      for (std::size_t i = 0; i < n; ++i)
        out.values[i] = dequantize_fp8_e4m3(out.e4m3[i], out.scale);
      break;
    case BufferStorage::f16:
      for (std::size_t i = 0; i < n; ++i) {
        __half h;
        std::memcpy(&h, raw.data() + 2 * i, 2);
        out.values[i] = __half2float(h);
      }
      break;
    case BufferStorage::f32:
      std::memcpy(out.values.data(), raw.data(), n * sizeof(float));
      break;
  }
  return out;
}

const EngineGraph& QuantizedEngine::graph() const {
  return impl_->graph;
}
int QuantizedEngine::max_batch() const {
  return impl_->config.max_batch;
}
QuantPrecision QuantizedEngine::precision() const {
  return impl_->config.precision;
}
bool QuantizedEngine::is_int8(int op) const {
  return impl_->int8.at(static_cast<std::size_t>(op));
}
BufferStorage QuantizedEngine::storage(int buffer) const {
  return impl_->storage.at(static_cast<std::size_t>(buffer));
}
float QuantizedEngine::scale(int buffer) const {
  return impl_->scale.at(static_cast<std::size_t>(buffer));
}
int QuantizedEngine::int8_ops() const {
  return static_cast<int>(std::count(impl_->int8.begin(), impl_->int8.end(), true));
}
int QuantizedEngine::reformat_launches() const {
  return impl_->reformats;
}
bool QuantizedEngine::quantizes_input() const {
  return impl_->quantize_input;
}
std::size_t QuantizedEngine::activation_bytes() const {
  const Impl& m = *impl_;
  return m.arena_bytes + m.scratch_x_bytes + m.scratch_res_bytes + m.scratch_y_bytes;
}
std::size_t QuantizedEngine::weight_bytes() const {
  return impl_->weight_bytes;
}

std::vector<std::string> QuantizedEngine::launches() const {
  std::vector<std::string> out;
  for (const Step& s : impl_->steps) out.push_back(s.label);
  return out;
}

std::string QuantizedEngine::describe() const {
  const Impl& m = *impl_;
  int fallback = 0;
  std::string kept;
  for (std::size_t i = 0; i < m.graph.ops.size(); ++i) {
    if (m.int8[i] || m.graph.ops[i].kind == OpKind::detect) continue;
    ++fallback;
    kept += (kept.empty() ? "" : ", ") + m.graph.ops[i].name;
  }
  const char* q = to_string(m.config.precision);  // "INT8", "FP8 E4M3"
  std::ostringstream s;
  s << q << " engine " << m.graph.input_w << "x" << m.graph.input_h << ", "
    << to_string(m.config.weights) << " weights: " << int8_ops() << " ops " << q << ", " << fallback
    << " " << dtype_name(m.config.fallback) << (kept.empty() ? "" : " (" + kept + ")")
    << ", detect FP32; " << m.steps.size() << " launches per run, " << m.reformats
    << " of them reformats"
    << (m.quantize_input ? " (+1 input quantisation)"
        : m.fused_input  ? " (the first conv quantises the input)"
                         : "")
    << "; activations " << activation_bytes() / (1024 * 1024) << " MiB at batch "
    << m.config.max_batch << ", weights " << m.weight_bytes / 1024 << " KiB";
  return s.str();
}

}  // namespace lesson13
