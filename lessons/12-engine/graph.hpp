// Lesson 12: what the builder does to the network before it chooses a single kernel.
//
//   optimize()      the network definition (network.hpp: primitive layers, as a parser produces
//                   them) -> the engine graph: BatchNorm folded into the convolution before it,
//                   SiLU and the residual add fused into the convolution's epilogue, concatenations
//                   and channel splits turned into views of one buffer (no copy), NHWC layouts.
//   plan_memory()   gives every activation buffer an offset in one arena, reusing the memory of
//                   buffers whose last reader has run (liveness over the topological order, first
//                   fit): the size TensorRT reports as the context's device memory.
//
// Host code only; the CPU tests cover it.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "network.hpp"

namespace lesson12 {

enum class Activation { none = 0, silu = 1 };

// A per-image activation buffer, NHWC: pixel (n, y, x) channel k of the buffer sits at element
// ((n * h + y) * w + x) * channels + k. One buffer may hold several tensors side by side in its
// channels (what a concatenation becomes).
struct BufferDesc {
  std::string name;
  int channels = 0, h = 0, w = 0;
  std::size_t offset = 0;  // bytes from the arena's start (plan_memory fills it)
  int first_op = -1;       // first op that writes it
  int last_op = -1;        // last op that reads it
  std::size_t elements_per_image() const {
    return static_cast<std::size_t>(channels) * static_cast<std::size_t>(h) *
           static_cast<std::size_t>(w);
  }
};

// Where a tensor lives: channels [channel_offset, channel_offset + channels) of a buffer.
// buffer == kNetworkInput: the engine's input, NCHW float [B, 3, H, W] (not in the arena).
struct View {
  static constexpr int kNetworkInput = -1;
  int buffer = kNetworkInput;
  int channel_offset = 0;
  int channels = 0;
  int h = 0, w = 0;
};

// copy: the fallback of a concatenation input that cannot be written in place (the network input,
// a tensor two concatenations want, a channel slice that does not line up): input -> output.
// optimize() emits none for YOLOv8n.
enum class OpKind { conv, max_pool, upsample, detect, copy };

// One kernel launch's worth of work (before a tactic is chosen for it).
struct FusedOp {
  OpKind kind = OpKind::conv;
  std::string name;                // "model.2.m.0.cv2", "model.9.m (pool 1)", ...
  std::vector<std::string> fused;  // the primitive layers it replaces, in order
  View input;                      // conv, pool, upsample, copy
  View output;                     // conv, pool, upsample, copy
  // conv: y = act(conv(x, weight) + bias) (+ residual, added after the activation)
  int out_channels = 0, in_channels = 0, kernel = 1, stride = 1, pad = 0;
  std::vector<float> weight;  // [out_channels][kernel][kernel][in_channels] (KRSC), BN folded
  std::vector<float> bias;    // [out_channels], BN folded
  Activation act = Activation::none;
  bool has_residual = false;
  View residual;  // same shape as output
  // max_pool: kernel, stride, pad above; upsample: nearest, factor 2
  // detect: inputs box[i] (4 * reg_max channels) and cls[i] (num_classes channels) per level
  std::vector<View> box, cls;
  std::vector<int> strides;  // 8, 16, 32
  int reg_max = 16, num_classes = 0;
};

// A conv op's geometry as kernel arguments: sets batch, in_h, in_w, in_c, out_h, out_w, out_c,
// kernel, stride, pad and act (0 none, 1 SiLU) of `a`, any struct with those int fields: lesson
// 12's ConvArgs (launch.cpp's conv_args), lesson 13's Int8ConvArgs. The pointers and strides
// are the caller's.
template <class Args>
void set_conv_geometry(const FusedOp& op, int batch, Args& a) {
  a.batch = batch;
  a.in_h = op.input.h;
  a.in_w = op.input.w;
  a.in_c = op.in_channels;
  a.out_h = op.output.h;
  a.out_w = op.output.w;
  a.out_c = op.out_channels;
  a.kernel = op.kernel;
  a.stride = op.stride;
  a.pad = op.pad;
  a.act = static_cast<int>(op.act);
}

struct EngineGraph {
  int input_h = 0, input_w = 0;  // network input, per image [input_c, input_h, input_w] float
  int input_c = 3;
  int num_classes = 0, num_candidates = 0;
  std::vector<BufferDesc> buffers;
  std::vector<FusedOp> ops;     // topological order: the order the engine launches them
  std::size_t arena_bytes = 0;  // plan_memory's result for (max_batch, element_size)
};

// Folds, fuses and places (see the top of this file). Throws std::invalid_argument if the
// definition holds a pattern it cannot fuse (a BatchNorm not after a convolution, ...).
EngineGraph optimize(const NetworkDefinition& net);

// Assigns BufferDesc::offset for a batch of `max_batch` images of `element_size` bytes per
// element (2: FP16, 4: FP32), each buffer aligned to 256 bytes; returns and stores the arena
// size. Two buffers share bytes only if their [first_op, last_op] intervals do not overlap.
// Heuristic: largest buffer first, each at the lowest offset clear of the buffers already placed
// that are live at the same time (first fit). For YOLOv8n it lands within 7% of the lower bound
// (the most bytes live at one op). `hold_until` (optional, per buffer): keep a buffer's bytes
// until that op instead of its last_op, so that ops which may run concurrently never share memory
// (concurrent_hold_until in schedule.hpp, for auxiliary streams). Throws std::invalid_argument
// for max_batch < 1, element_size 0, or a hold_until of another length than buffers or ending
// before a buffer's last_op.
std::size_t plan_memory(EngineGraph& graph, int max_batch, std::size_t element_size,
                        const std::vector<int>& hold_until = {});

// The arena a naive runtime would need: every buffer its own memory (what liveness saves).
std::size_t arena_without_reuse(const EngineGraph& graph, int max_batch, std::size_t element_size);

// Runs the optimized graph on the CPU, one image: input [input_c, input_h, input_w] float NCHW;
// returns the output [4 + C, N] row-major. Every op accumulates in double and stores float, NHWC.
// With `buffers` non-null it receives every buffer (index = buffer id, NHWC, one image): the per-op
// oracle of the GPU tests. Throws std::invalid_argument for an input of another size.
std::vector<float> run_engine_graph_reference(const EngineGraph& graph,
                                              const std::vector<float>& input,
                                              std::vector<std::vector<float>>* buffers = nullptr);

// A view's elements in one image's float tensors, as run_engine_graph_reference (and lesson 13's
// fake quantisation) walks them: element (y, x, c) of the view is at(y, x)[c * channel]. In a
// buffer (NHWC) a pixel steps `pixel` elements, the buffer's channel count (a view may be a
// channel slice of a wider buffer), and a channel steps 1; in the network input (NCHW) a pixel
// steps 1 and a channel h * w. base points at the view's first channel.
struct ViewElements {
  float* base = nullptr;
  std::size_t pixel = 0, channel = 0;  // the steps, in elements, to the next pixel / channel
  int w = 0;                           // the view's width
  float* at(int y, int x) const {
    return base + (static_cast<std::size_t>(y) * static_cast<std::size_t>(w) + x) * pixel;
  }
};

// The elements of view `v` of graph `g`: in buffers[v.buffer] (one vector per buffer of g, each
// elements_per_image() floats, NHWC: what run_engine_graph_reference's `buffers` receives), or
// for View::kNetworkInput in `input` ([input_c, input_h, input_w], NCHW; read only, although
// base is not const). Throws std::invalid_argument, the message starting with `who`, if the view
// does not fit its buffer (a channel range outside the buffer's, another h or w), and
// std::out_of_range for a buffer index g does not have.
ViewElements view_elements(const EngineGraph& g, std::vector<std::vector<float>>& buffers,
                           const std::vector<float>& input, const View& v, const char* who);

// One line for tables: "conv 3x3 s2 3->16 silu  input -> model.0[0:16) 32x32", ...
std::string describe(const FusedOp& op);
const char* to_string(OpKind kind);

}  // namespace lesson12
