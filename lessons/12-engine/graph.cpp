// The builder's graph passes (graph.hpp) and the CPU run of their result.
//
//   optimize()                   1. fusion: conv [-> BatchNorm] [-> SiLU] [-> residual add] as one
//                                   op, the BatchNorm folded into the weights and bias
//                                2. placement: concatenations become buffers their inputs'
//                                   producers write into; channel slices become views
//                                3. ops in launch order, KRSC weights, buffer liveness
//   plan_memory()                offsets in one arena: first fit, largest buffer first
//   run_engine_graph_reference() the optimized graph on the CPU, NHWC, double accumulation
//   describe()                   one line per op for the lesson's tables
//
// Host code only.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "graph.hpp"

#include "exercises.hpp"

namespace lesson12 {

namespace {

// A conv with the epilogue layers fused into it, or a single pool / upsample / detect layer.
struct Group {
  std::vector<int> layers;  // definition layer ids, in order
  int conv = -1, bn = -1, silu = -1, add = -1;
  int residual = -1;  // tensor id: the add's other operand
  int output = -1;    // tensor id the op produces
};

// Where a tensor lives before buffers are numbered: `offset` channels into tensor `parent`.
struct Alias {
  int parent = -1;
  int offset = 0;
};

const char* layer_kind_name(LayerKind kind) {
  switch (kind) {
    case LayerKind::conv:
      return "convolution";
    case LayerKind::batch_norm:
      return "BatchNorm";
    case LayerKind::silu:
      return "SiLU";
    case LayerKind::add:
      return "add";
    case LayerKind::concat:
      return "concat";
    case LayerKind::slice:
      return "slice";
    case LayerKind::max_pool:
      return "max pool";
    case LayerKind::upsample:
      return "upsample";
    case LayerKind::detect:
      return "detect";
  }
  return "layer";
}

std::string strip_suffix(const std::string& name, const std::string& suffix) {
  if (name.size() > suffix.size() &&
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
    return name.substr(0, name.size() - suffix.size());
  }
  return name;
}

std::size_t aligned_bytes(const BufferDesc& b, int max_batch, std::size_t element_size) {
  const std::size_t bytes =
      b.elements_per_image() * static_cast<std::size_t>(max_batch) * element_size;
  return (bytes + 255) / 256 * 256;
}

void check_batch(int max_batch, std::size_t element_size, const char* who) {
  if (max_batch < 1 || element_size == 0) {
    throw std::invalid_argument(std::string(who) +
                                ": expected max_batch >= 1 and element_size > 0, got " +
                                std::to_string(max_batch) + " and " + std::to_string(element_size));
  }
}

}  // namespace

const char* to_string(OpKind kind) {
  switch (kind) {
    case OpKind::conv:
      return "conv";
    case OpKind::max_pool:
      return "max_pool";
    case OpKind::upsample:
      return "upsample";
    case OpKind::detect:
      return "detect";
    case OpKind::copy:
      return "copy";
  }
  return "unknown";
}

EngineGraph optimize(const NetworkDefinition& net) {
  const int num_tensors = static_cast<int>(net.tensors.size());
  const int num_layers = static_cast<int>(net.layers.size());
  std::vector<std::vector<int>> consumers(static_cast<std::size_t>(num_tensors));
  std::vector<int> producer(static_cast<std::size_t>(num_tensors), -1);
  for (int i = 0; i < num_layers; ++i) {
    const Layer& l = net.layers[static_cast<std::size_t>(i)];
    for (int t : l.inputs) consumers.at(static_cast<std::size_t>(t)).push_back(i);
    producer.at(static_cast<std::size_t>(l.output)) = i;
  }
  auto tensor = [&](int t) -> const TensorDesc& {
    return net.tensors[static_cast<std::size_t>(t)];
  };
  auto layer = [&](int i) -> const Layer& { return net.layers[static_cast<std::size_t>(i)]; };
  // The one layer that reads t, or -1 (none, several, or t is the network's output).
  auto only_consumer = [&](int t) {
    const auto& c = consumers[static_cast<std::size_t>(t)];
    return c.size() == 1 && t != net.output ? c[0] : -1;
  };
  if (net.output < 0 || producer[static_cast<std::size_t>(net.output)] < 0 ||
      layer(producer[static_cast<std::size_t>(net.output)]).kind != LayerKind::detect) {
    throw std::invalid_argument("optimize: expected the network's output to be a detect layer's");
  }

  // ---- 1. Fusion: walk each conv's single-consumer chain. ----
  std::vector<Group> groups;
  std::vector<int> group_of_layer(static_cast<std::size_t>(num_layers), -1);
  for (int i = 0; i < num_layers; ++i) {
    const Layer& l = layer(i);
    if (group_of_layer[static_cast<std::size_t>(i)] >= 0) continue;
    Group g;
    g.layers = {i};
    g.output = l.output;
    switch (l.kind) {
      case LayerKind::conv: {
        g.conv = i;
        for (;;) {
          const int next = only_consumer(g.output);
          if (next < 0) break;
          const Layer& n = layer(next);
          if (n.kind == LayerKind::batch_norm && g.bn < 0 && g.silu < 0 && g.add < 0) {
            g.bn = next;
          } else if (n.kind == LayerKind::silu && g.silu < 0 && g.add < 0) {
            g.silu = next;
          } else if (n.kind == LayerKind::add && g.add < 0 && n.inputs.size() == 2 &&
                     n.inputs[0] != n.inputs[1]) {
            g.add = next;
            g.residual = n.inputs[0] == g.output ? n.inputs[1] : n.inputs[0];
          } else {
            break;
          }
          g.layers.push_back(next);
          g.output = n.output;
        }
        break;
      }
      case LayerKind::max_pool:
      case LayerKind::upsample:
      case LayerKind::detect:
        break;
      case LayerKind::concat:
      case LayerKind::slice:
        continue;  // placement, not ops
      case LayerKind::batch_norm:
      case LayerKind::silu:
      case LayerKind::add:
        throw std::invalid_argument(
            std::string("optimize: cannot fuse ") + layer_kind_name(l.kind) + " layer " + l.name +
            ": expected it to follow a convolution whose output only it reads (conv -> "
            "BatchNorm -> SiLU -> residual add)");
    }
    for (int id : g.layers)
      group_of_layer[static_cast<std::size_t>(id)] = static_cast<int>(groups.size());
    groups.push_back(std::move(g));
  }

  // Tensors the engine materializes: the input, every op's output, slices and concatenations.
  std::vector<bool> materialized(static_cast<std::size_t>(num_tensors), false);
  materialized[static_cast<std::size_t>(net.input)] = true;
  for (const Group& g : groups) materialized[static_cast<std::size_t>(g.output)] = true;
  for (const Layer& l : net.layers) {
    if (l.kind == LayerKind::concat || l.kind == LayerKind::slice) {
      materialized[static_cast<std::size_t>(l.output)] = true;
    }
  }

  // ---- 2. Placement. ----
  // A tensor can be written straight into a concatenation's channels if an op of ours (or
  // another concatenation, a buffer of its own) produces it.
  auto placeable = [&](int t) {
    const int p = producer[static_cast<std::size_t>(t)];
    if (p < 0 || t == net.output) return false;
    const LayerKind k = layer(p).kind;
    return k != LayerKind::slice && k != LayerKind::detect;
  };
  std::vector<Alias> alias(static_cast<std::size_t>(num_tensors));
  struct Copy {
    int layer, src, dst, offset;
  };
  std::vector<Copy> copies;
  // Following parents never loops back: a tensor is only aliased to a concat that reads it
  // (or, for a slice, to the tensor it reads), so parents come later / earlier consistently.
  for (int i = 0; i < num_layers; ++i) {
    const Layer& l = layer(i);
    if (l.kind != LayerKind::concat) continue;
    const int out = l.output;
    // Channel range of each input inside the concat.
    std::vector<int> begin(l.inputs.size());
    int at = 0;
    for (std::size_t k = 0; k < l.inputs.size(); ++k) {
      begin[k] = at;
      at += tensor(l.inputs[k]).c;
    }
    for (std::size_t k = 0; k < l.inputs.size(); ++k) {
      const int u = l.inputs[k];
      const int pu = producer[static_cast<std::size_t>(u)];
      bool placed = false;
      if (pu >= 0 && layer(pu).kind == LayerKind::slice) {
        // A channel slice of S: place all of S so that this slice lands at begin[k]. Needs S's
        // whole range inside the concat, covered only by slices of S that line up the same way
        // (C2f's cat(chunk(cv1(x), 2) + ...) is exactly this).
        const Layer& sl = layer(pu);
        const int s = sl.inputs[0];
        const int s_at = begin[k] - sl.channel_begin;
        const Alias& as = alias[static_cast<std::size_t>(s)];
        bool ok = placeable(s) && s_at >= 0 && s_at + tensor(s).c <= tensor(out).c &&
                  (as.parent < 0 || (as.parent == out && as.offset == s_at));
        for (std::size_t j = 0; ok && j < l.inputs.size(); ++j) {
          const int lo = begin[j], hi = begin[j] + tensor(l.inputs[j]).c;
          if (hi <= s_at || lo >= s_at + tensor(s).c) continue;  // outside S's range
          const int pj = producer[static_cast<std::size_t>(l.inputs[j])];
          ok = pj >= 0 && layer(pj).kind == LayerKind::slice && layer(pj).inputs[0] == s &&
               s_at + layer(pj).channel_begin == lo;
        }
        if (ok) {
          alias[static_cast<std::size_t>(s)] = {out, s_at};
          placed = true;
        }
      } else if (placeable(u) && alias[static_cast<std::size_t>(u)].parent < 0) {
        alias[static_cast<std::size_t>(u)] = {out, begin[k]};
        placed = true;
      }
      if (!placed) copies.push_back({i, u, out, begin[k]});
    }
  }
  for (const Layer& l : net.layers) {
    if (l.kind == LayerKind::slice) {
      alias[static_cast<std::size_t>(l.output)] = {l.inputs[0], l.channel_begin};
    }
  }

  // Roots get buffers, numbered in the order their tensors appear.
  EngineGraph graph;
  const TensorDesc& in_d = tensor(net.input);
  graph.input_h = in_d.h;
  graph.input_w = in_d.w;
  graph.input_c = in_d.c;
  graph.num_classes = net.num_classes;
  graph.num_candidates = tensor(net.output).w;
  std::vector<int> buffer_of_root(static_cast<std::size_t>(num_tensors), -1);
  auto root_of = [&](int t, int* offset) {
    *offset = 0;
    for (int guard = 0; alias[static_cast<std::size_t>(t)].parent >= 0; ++guard) {
      if (guard > num_tensors) throw std::logic_error("optimize: alias cycle");
      *offset += alias[static_cast<std::size_t>(t)].offset;
      t = alias[static_cast<std::size_t>(t)].parent;
    }
    return t;
  };
  for (int t = 0; t < num_tensors; ++t) {
    if (!materialized[static_cast<std::size_t>(t)] || t == net.output) continue;
    int offset;
    const int root = root_of(t, &offset);
    if (root == net.input || buffer_of_root[static_cast<std::size_t>(root)] >= 0) continue;
    const TensorDesc& d = tensor(root);
    BufferDesc b;
    const int p = producer[static_cast<std::size_t>(root)];
    const int g = group_of_layer[static_cast<std::size_t>(p)];
    b.name = g >= 0 && groups[static_cast<std::size_t>(g)].conv >= 0
                 ? strip_suffix(layer(groups[static_cast<std::size_t>(g)].conv).name, ".conv")
                 : layer(p).name;
    b.channels = d.c;
    b.h = d.h;
    b.w = d.w;
    buffer_of_root[static_cast<std::size_t>(root)] = static_cast<int>(graph.buffers.size());
    graph.buffers.push_back(b);
  }
  auto view = [&](int t) {
    if (!materialized[static_cast<std::size_t>(t)]) {
      throw std::logic_error("optimize: tensor " + tensor(t).name + " is fused away but read");
    }
    View v;
    const int root = root_of(t, &v.channel_offset);
    v.buffer =
        root == net.input ? View::kNetworkInput : buffer_of_root[static_cast<std::size_t>(root)];
    v.channels = tensor(t).c;
    v.h = tensor(t).h;
    v.w = tensor(t).w;
    return v;
  };

  // ---- 3. Ops in launch order: a group at its last layer, a copy at its concat. ----
  auto add_copies_of = [&](int concat_layer) {
    for (const Copy& c : copies) {
      if (c.layer != concat_layer) continue;
      FusedOp op;
      op.kind = OpKind::copy;
      op.name = layer(concat_layer).name + " (copy of " + tensor(c.src).name + ")";
      op.fused = {layer(concat_layer).name};
      op.input = view(c.src);
      op.output = view(c.dst);
      op.output.channel_offset += c.offset;
      op.output.channels = op.input.channels;
      graph.ops.push_back(std::move(op));
    }
  };
  std::vector<int> last_layer_of_group(groups.size());
  for (std::size_t g = 0; g < groups.size(); ++g) {
    last_layer_of_group[g] = *std::max_element(groups[g].layers.begin(), groups[g].layers.end());
  }
  for (int i = 0; i < num_layers; ++i) {
    if (layer(i).kind == LayerKind::concat) add_copies_of(i);
    const int gi = group_of_layer[static_cast<std::size_t>(i)];
    if (gi < 0 || last_layer_of_group[static_cast<std::size_t>(gi)] != i) continue;
    const Group& g = groups[static_cast<std::size_t>(gi)];
    FusedOp op;
    for (int id : g.layers) op.fused.push_back(layer(id).name);
    const Layer& first = layer(g.layers[0]);
    op.name = first.name;
    switch (first.kind) {
      case LayerKind::conv: {
        op.kind = OpKind::conv;
        op.name = strip_suffix(first.name, ".conv");
        op.input = view(first.inputs.at(0));
        op.output = view(g.output);
        const TensorDesc& x = tensor(first.inputs[0]);
        const int out_c = tensor(first.output).c, in_c = x.c, k = first.kernel;
        if (first.weight.size() != static_cast<std::size_t>(out_c) * in_c * k * k) {
          throw std::invalid_argument("optimize: convolution " + first.name + " has " +
                                      std::to_string(first.weight.size()) + " weights, expected " +
                                      std::to_string(out_c * in_c * k * k));
        }
        op.out_channels = out_c;
        op.in_channels = in_c;
        op.kernel = k;
        op.stride = first.stride;
        op.pad = first.pad;
        // OIHW -> KRSC (each output channel's row stays contiguous), then fold the BatchNorm
        // into it (exercise 1): y = (conv(x) + b - mean) * gamma / sqrt(var + eps) + beta is
        // the convolution with weights w * scale and bias beta + (b - mean) * scale.
        op.weight.resize(first.weight.size());
        for (int o = 0; o < out_c; ++o) {
          for (int r = 0; r < k; ++r) {
            for (int s = 0; s < k; ++s) {
              for (int c = 0; c < in_c; ++c) {
                op.weight[((static_cast<std::size_t>(o) * k + r) * k + s) * in_c + c] =
                    first.weight[((static_cast<std::size_t>(o) * in_c + c) * k + r) * k + s];
              }
            }
          }
        }
        op.bias = first.bias.empty() ? std::vector<float>(static_cast<std::size_t>(out_c), 0.0f)
                                     : first.bias;
        if (g.bn >= 0) {
          const Layer& bn = layer(g.bn);
          fold_batch_norm(op.weight, op.bias, bn.gamma, bn.beta, bn.mean, bn.var, bn.eps);
        }
        op.act = g.silu >= 0 ? Activation::silu : Activation::none;
        if (g.add >= 0) {
          op.has_residual = true;
          op.residual = view(g.residual);
        }
        break;
      }
      case LayerKind::max_pool:
      case LayerKind::upsample:
        op.kind = first.kind == LayerKind::max_pool ? OpKind::max_pool : OpKind::upsample;
        op.input = view(first.inputs.at(0));
        op.output = view(g.output);
        op.kernel = first.kind == LayerKind::max_pool ? first.kernel : 2;
        op.stride = first.kind == LayerKind::max_pool ? first.stride : 2;
        op.pad = first.kind == LayerKind::max_pool ? first.pad : 0;
        break;
      case LayerKind::detect:
        op.kind = OpKind::detect;
        if (first.inputs.size() != 2 * first.strides.size()) {
          throw std::invalid_argument("optimize: detect layer " + first.name +
                                      " expected a box and a class input per stride");
        }
        for (std::size_t level = 0; level < first.strides.size(); ++level) {
          op.box.push_back(view(first.inputs[2 * level]));
          op.cls.push_back(view(first.inputs[2 * level + 1]));
        }
        op.strides = first.strides;
        op.reg_max = first.reg_max;
        op.num_classes = first.num_classes;
        break;
      default:
        throw std::logic_error("optimize: unexpected group");
    }
    graph.ops.push_back(std::move(op));
  }

  // Liveness: from the first op that writes a buffer to the last op that reads or writes it.
  for (int i = 0; i < static_cast<int>(graph.ops.size()); ++i) {
    const FusedOp& op = graph.ops[static_cast<std::size_t>(i)];
    auto touch = [&](const View& v) {
      if (v.buffer == View::kNetworkInput) return;
      BufferDesc& b = graph.buffers.at(static_cast<std::size_t>(v.buffer));
      b.last_op = std::max(b.last_op, i);
    };
    if (op.kind == OpKind::detect) {
      for (const View& v : op.box) touch(v);
      for (const View& v : op.cls) touch(v);
    } else {
      touch(op.input);
      touch(op.output);
      BufferDesc& out = graph.buffers.at(static_cast<std::size_t>(op.output.buffer));
      if (out.first_op < 0) out.first_op = i;
      if (op.has_residual) touch(op.residual);
    }
  }
  for (const BufferDesc& b : graph.buffers) {
    if (b.first_op < 0) throw std::logic_error("optimize: buffer " + b.name + " is never written");
  }
  return graph;
}

// ------------------------------------------------------------------------------ memory plan

std::size_t plan_memory(EngineGraph& graph, int max_batch, std::size_t element_size,
                        const std::vector<int>& hold_until) {
  check_batch(max_batch, element_size, "plan_memory");
  if (!hold_until.empty() && hold_until.size() != graph.buffers.size()) {
    throw std::invalid_argument("plan_memory: hold_until has " + std::to_string(hold_until.size()) +
                                " entries for " + std::to_string(graph.buffers.size()) +
                                " buffers");
  }
  // The planner is exercise 2 (assign_offsets: first fit, largest first in the solution).
  std::vector<LiveRange> ranges;
  for (std::size_t i = 0; i < graph.buffers.size(); ++i) {
    const BufferDesc& b = graph.buffers[i];
    int last = b.last_op;
    if (!hold_until.empty()) {
      if (hold_until[i] < b.last_op) {
        throw std::invalid_argument("plan_memory: hold_until[" + std::to_string(i) +
                                    "] = " + std::to_string(hold_until[i]) +
                                    " ends before buffer " + b.name + "'s last reader (op " +
                                    std::to_string(b.last_op) + ")");
      }
      last = hold_until[i];
    }
    ranges.push_back({aligned_bytes(b, max_batch, element_size), b.first_op, last});
  }
  const std::vector<std::size_t> offsets = assign_offsets(ranges, 256);
  std::size_t arena = 0;
  for (std::size_t i = 0; i < graph.buffers.size(); ++i) {
    graph.buffers[i].offset = offsets[i];
    arena = std::max(arena, offsets[i] + ranges[i].bytes);
  }
  graph.arena_bytes = arena;
  return arena;
}

std::size_t arena_without_reuse(const EngineGraph& graph, int max_batch, std::size_t element_size) {
  check_batch(max_batch, element_size, "arena_without_reuse");
  std::size_t total = 0;
  for (const BufferDesc& b : graph.buffers) total += aligned_bytes(b, max_batch, element_size);
  return total;
}

// ------------------------------------------------------------------------------ CPU run

ViewElements view_elements(const EngineGraph& g, std::vector<std::vector<float>>& buffers,
                           const std::vector<float>& input, const View& v, const char* who) {
  ViewElements a;
  a.w = v.w;
  if (v.buffer == View::kNetworkInput) {
    const std::size_t plane = static_cast<std::size_t>(g.input_h) * g.input_w;
    a.base = const_cast<float*>(input.data()) + v.channel_offset * plane;
    a.pixel = 1;
    a.channel = plane;
  } else {
    const BufferDesc& b = g.buffers.at(static_cast<std::size_t>(v.buffer));
    if (v.channel_offset < 0 || v.channel_offset + v.channels > b.channels || v.h != b.h ||
        v.w != b.w) {
      throw std::invalid_argument(std::string(who) + ": a view does not fit buffer " + b.name);
    }
    a.base = buffers[static_cast<std::size_t>(v.buffer)].data() + v.channel_offset;
    a.pixel = static_cast<std::size_t>(b.channels);
    a.channel = 1;
  }
  return a;
}

std::vector<float> run_engine_graph_reference(const EngineGraph& graph,
                                              const std::vector<float>& input,
                                              std::vector<std::vector<float>>* buffers_out) {
  const std::size_t in_size =
      static_cast<std::size_t>(graph.input_c) * graph.input_h * graph.input_w;
  if (input.size() != in_size) {
    throw std::invalid_argument(
        "run_engine_graph_reference: expected an input of [" + std::to_string(graph.input_c) +
        ", " + std::to_string(graph.input_h) + ", " + std::to_string(graph.input_w) +
        "] floats, got " + std::to_string(input.size()));
  }
  std::vector<std::vector<float>> buffers(graph.buffers.size());
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    buffers[i].assign(graph.buffers[i].elements_per_image(), 0.0f);
  }
  const int n_total = graph.num_candidates;
  std::vector<float> out(static_cast<std::size_t>(4 + graph.num_classes) * n_total);
  const auto elements = [&](const View& v) {
    return view_elements(graph, buffers, input, v, "run_engine_graph_reference");
  };
  for (const FusedOp& op : graph.ops) {
    switch (op.kind) {
      case OpKind::conv: {
        const ViewElements x = elements(op.input);
        const ViewElements y = elements(op.output);
        const ViewElements res = op.has_residual ? elements(op.residual) : ViewElements{};
        const int k = op.kernel, cin = op.in_channels;
        const double macs = static_cast<double>(op.out_channels) * cin * k * k * op.output.w;
        parallel_for(op.output.h, macs, [&](int y_begin, int y_end) {
          std::vector<double> acc(static_cast<std::size_t>(op.out_channels));
          std::vector<double> pixel(static_cast<std::size_t>(cin));
          for (int oy = y_begin; oy < y_end; ++oy) {
            for (int ox = 0; ox < op.output.w; ++ox) {
              for (int o = 0; o < op.out_channels; ++o)
                acc[o] = op.bias[static_cast<std::size_t>(o)];
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
              const float* rsd = op.has_residual ? res.at(oy, ox) : nullptr;
              for (int o = 0; o < op.out_channels; ++o) {
                double v = acc[o];
                if (op.act == Activation::silu) v = v / (1.0 + std::exp(-v));
                if (rsd) v += rsd[o * res.channel];
                dst[o * y.channel] = static_cast<float>(v);
              }
            }
          }
        });
        break;
      }
      case OpKind::max_pool:
      case OpKind::upsample:
      case OpKind::copy: {
        const ViewElements x = elements(op.input);
        const ViewElements y = elements(op.output);
        for (int oy = 0; oy < op.output.h; ++oy) {
          for (int ox = 0; ox < op.output.w; ++ox) {
            float* dst = y.at(oy, ox);
            for (int c = 0; c < op.output.channels; ++c) {
              float v;
              if (op.kind == OpKind::copy) {
                v = x.at(oy, ox)[c * x.channel];
              } else if (op.kind == OpKind::upsample) {
                v = x.at(oy / 2, ox / 2)[c * x.channel];
              } else {
                v = -std::numeric_limits<float>::infinity();  // padding never wins
                for (int r = 0; r < op.kernel; ++r) {
                  const int iy = oy * op.stride - op.pad + r;
                  if (iy < 0 || iy >= op.input.h) continue;
                  for (int s = 0; s < op.kernel; ++s) {
                    const int ix = ox * op.stride - op.pad + s;
                    if (ix >= 0 && ix < op.input.w) v = std::max(v, x.at(iy, ix)[c * x.channel]);
                  }
                }
              }
              dst[c * y.channel] = v;
            }
          }
        }
        break;
      }
      case OpKind::detect: {
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
              decode_box(logits.data(), op.reg_max, gx + 0.5, gy + 0.5, op.strides[level], b);
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
  if (buffers_out) *buffers_out = std::move(buffers);
  return out;
}

// ------------------------------------------------------------------------------ describe

std::string describe(const FusedOp& op) {
  std::ostringstream s;
  auto where = [](const View& v) {
    std::ostringstream w;
    if (v.buffer == View::kNetworkInput) {
      w << "input";
    } else {
      w << "buf" << v.buffer;
    }
    w << "[" << v.channel_offset << ":" << v.channel_offset + v.channels << ") " << v.h << "x"
      << v.w;
    return w.str();
  };
  switch (op.kind) {
    case OpKind::conv:
      s << "conv " << op.kernel << "x" << op.kernel << " s" << op.stride << " " << op.in_channels
        << "->" << op.out_channels << (op.act == Activation::silu ? " +SiLU" : "")
        << (op.has_residual ? " +residual " + where(op.residual) : "") << "  " << where(op.input)
        << " -> " << where(op.output);
      break;
    case OpKind::max_pool:
      s << "max pool " << op.kernel << "x" << op.kernel << " s" << op.stride << "  "
        << where(op.input) << " -> " << where(op.output);
      break;
    case OpKind::upsample:
      s << "upsample x2 nearest  " << where(op.input) << " -> " << where(op.output);
      break;
    case OpKind::copy:
      s << "copy  " << where(op.input) << " -> " << where(op.output);
      break;
    case OpKind::detect:
      s << "detect (DFL " << op.reg_max << ", " << op.num_classes << " classes)";
      for (std::size_t i = 0; i < op.box.size(); ++i) {
        s << "  box " << where(op.box[i]) << " cls " << where(op.cls[i]);
      }
      break;
  }
  return s.str();
}

}  // namespace lesson12
