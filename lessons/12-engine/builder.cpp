// The builder: optimize, time the tactics of every layer, keep the fastest, write the plan.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>

#include "common/cuda_check.hpp"
#include "common/memory.hpp"
#include "common/stream.hpp"
#include "common/timing.hpp"
#include "engine.hpp"
#include "launch.hpp"
#include "plan.hpp"
#include "schedule.hpp"

namespace lesson12 {
namespace {

double op_gflop(const FusedOp& op) {
  if (op.kind != OpKind::conv) return 0.0;
  return 2.0 * op.output.h * op.output.w * op.out_channels * op.kernel * op.kernel *
         op.in_channels / 1e9;
}

std::string op_shape(const FusedOp& op) {
  std::ostringstream s;
  switch (op.kind) {
    case OpKind::conv:
      s << op.kernel << "x" << op.kernel << " s" << op.stride << " " << op.in_channels << "->"
        << op.out_channels << " @" << op.output.h << "x" << op.output.w;
      if (op.act == Activation::silu) s << " +SiLU";
      if (op.has_residual) s << " +res";
      break;
    case OpKind::max_pool:
      s << "maxpool " << op.kernel << "x" << op.kernel << " " << op.input.channels << "ch @"
        << op.output.h << "x" << op.output.w;
      break;
    case OpKind::upsample:
      s << "upsample x2 " << op.input.channels << "ch @" << op.output.h << "x" << op.output.w;
      break;
    case OpKind::detect:
      s << "DFL decode, " << op.num_classes << " classes";
      break;
    case OpKind::copy:
      s << "copy " << op.input.channels << "ch @" << op.output.h << "x" << op.output.w;
      break;
  }
  return s.str();
}

// GPU time of one launch of `fn`, microseconds: `iters` launches queued behind a held stream
// (common/timing.hpp: launch latency excluded), median of 3 windows.
template <class F>
double time_us(cudaStream_t stream, int iters, F&& fn) {
  fn();  // warm-up: the kernel's first launch in this context loads it
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> samples;
  for (int r = 0; r < 3; ++r) {
    samples.push_back(course::gpu_time_ms(stream,
                                          [&] {
                                            for (int i = 0; i < iters; ++i) fn();
                                          }) *
                      1e3 / iters);
  }
  return course::median(samples);
}

const char* simple_symbol(OpKind kind, DType t) {
  switch (kind) {
    case OpKind::max_pool:
      return max_pool_symbol(t);
    case OpKind::upsample:
      return upsample_symbol(t);
    case OpKind::detect:
      return detect_symbol(t);
    default:
      return "";
  }
}

}  // namespace

std::vector<std::uint8_t> build_plan(const NetworkDefinition& net, const BuilderConfig& config,
                                     BuildReport* report) {
  const OptimizationProfile& p = config.profile;
  if (!(1 <= p.min_batch && p.min_batch <= p.opt_batch && p.opt_batch <= p.max_batch &&
        p.max_batch <= 256)) {
    throw std::invalid_argument(
        "build_plan: the profile must satisfy 1 <= min <= opt <= max <= "
        "256, got min " +
        std::to_string(p.min_batch) + ", opt " + std::to_string(p.opt_batch) + ", max " +
        std::to_string(p.max_batch));
  }
  if (config.timing_iterations < 1) {
    throw std::invalid_argument("build_plan: timing_iterations must be >= 1");
  }
  if ((config.tactic_sources & kAllTactics) == 0) {
    throw std::invalid_argument("build_plan: no tactic source enabled");
  }
  const auto t0 = std::chrono::steady_clock::now();
  BuildReport local;
  BuildReport& rep = report ? *report : local;
  rep = BuildReport{};

  const DType dt = config.precision;
  const std::size_t es = element_size(dt);
  Plan plan;
  plan.precision = dt;
  plan.profile = p;
  plan.graph = optimize(net);
  EngineGraph& g = plan.graph;
  // For auxiliary streams, buffers hold their bytes while ops that may run beside their
  // readers are running (schedule.hpp); with none, plain liveness over the launch order.
  plan_memory(g, p.max_batch, es,
              config.max_aux_streams > 0 ? concurrent_hold_until(g) : std::vector<int>{});
  if (config.keep_all_buffers) {
    std::size_t offset = 0;
    for (BufferDesc& d : g.buffers) {
      d.offset = offset;
      offset += (d.elements_per_image() * p.max_batch * es + 255) / 256 * 256;
    }
    g.arena_bytes = offset;
  }
  rep.primitive_layers = static_cast<int>(net.layers.size());
  rep.fused_ops = static_cast<int>(g.ops.size());
  rep.arena_bytes = g.arena_bytes;
  rep.arena_without_reuse = arena_without_reuse(g, p.max_batch, es);

  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  plan.gpu_name = prop.name;
  plan.cc_major = prop.major;
  plan.cc_minor = prop.minor;
  plan.sm_count = prop.multiProcessorCount;
  plan.code = built_kernel_image();
  plan.code_targets = built_kernel_targets();

  KernelLibrary lib(plan.code);
  course::Stream stream;
  // Timing buffers at the opt batch: the arena (planned for max batch, so big enough), the
  // input and the output. Their contents do not matter for speed; a fixed small pattern.
  course::DeviceBuffer<std::uint8_t> arena(std::max<std::size_t>(g.arena_bytes, 256));
  course::DeviceBuffer<float> images(static_cast<std::size_t>(p.opt_batch) * 3 * g.input_h *
                                     g.input_w);
  course::DeviceBuffer<float> output(static_cast<std::size_t>(p.opt_batch) * (4 + g.num_classes) *
                                     g.num_candidates);
  CUDA_CHECK(cudaMemset(arena.data(), 0x21, arena.bytes()));
  CUDA_CHECK(cudaMemset(images.data(), 0x21, images.bytes()));
  Bindings b{arena.data(), images.data(), output.data(), p.opt_batch, dt};
  course::DeviceBuffer<std::uint8_t> workspace;

  int kernel_count = 0;
  const ConvKernelInfo* table = conv_kernels(&kernel_count);
  const bool use_course = (config.tactic_sources & kCourseKernels) != 0;
  const bool use_cudnn = (config.tactic_sources & kCudnn) != 0 && cudnn_available();

  for (const FusedOp& op : g.ops) {
    PlanOp po;
    po.op = op;
    po.op.weight.clear();
    po.op.bias.clear();
    LayerDecision d;
    d.layer = op.name;
    d.shape = op_shape(op);
    d.gflop = op_gflop(op);
    std::vector<PlanTactic> tactics;

    if (op.kind == OpKind::conv) {
      po.weight = convert_weights(op.weight, dt);
      po.bias = op.bias;
      course::DeviceBuffer<std::uint8_t> w_dev = course::to_device(po.weight);
      course::DeviceBuffer<float> b_dev = course::to_device(po.bias);
      const ConvArgs a = conv_args(op, g, b, OpWeights{w_dev.data(), b_dev.data()});
      const bool first = op.input.buffer == View::kNetworkInput;
      // cuDNN is offered dense NHWC tensors only. A view inside a concatenation's buffer (a
      // pixel stride wider than its channels) is legal for its descriptors, but on the H200
      // cuDNN 9 offered no algorithm for some such layers and failed others at run time with
      // CUDNN_STATUS_BAD_PARAM, so it is not a candidate there. Nor for the first layer: it
      // cannot read the float NCHW input and write FP16 NHWC in one call. Where cuDNN is no
      // candidate, the course's kernels are (TensorRT too keeps a layer on another tactic
      // source when the requested one has nothing for it).
      const bool dense = a.x_stride == a.in_c && a.y_stride == a.out_c &&
                         (a.res == nullptr || a.res_stride == a.out_c);
      const bool cudnn_here = use_cudnn && !first && dense;
      const bool course_here = use_course || !cudnn_here;
      auto time_course_kernels = [&] {
        for (int k = 0; k < kernel_count; ++k) {
          const ConvKernelInfo& info = table[k];
          if (info.dtype != dt) continue;
          TacticTiming t;
          t.tactic = info.tactic;
          if (!conv_kernel_runs_on(info, prop.major * 10 + prop.minor) ||
              !conv_kernel_supports(info, a, first)) {
            continue;  // not a candidate for this shape (the table lists only candidates)
          } else {
            LaunchOp lo;
            lo.kind = OpKind::conv;
            lo.kernel = &info;
            lo.conv = a;
            lo.tactic.symbol = info.symbol;
            t.us = time_us(stream.get(), config.timing_iterations,
                           [&] { launch(lib, lo, stream.get(), nullptr, 0); });
            t.ran = true;
          }
          PlanTactic pt;
          pt.kind = PlanTactic::Kind::kernel;
          pt.symbol = info.symbol;
          pt.label = info.tactic;
          d.candidates.push_back(t);
          tactics.push_back(pt);
        }
      };
      if (course_here) time_course_kernels();
      if (use_cudnn && !cudnn_here) {
        TacticTiming t;
        t.tactic = "cudnn";
        t.why_not = first ? "not for the NCHW float input" : "needs dense NHWC, not a slice";
        d.candidates.push_back(t);
        tactics.push_back(PlanTactic{PlanTactic::Kind::cudnn, "", -1, "cudnn"});
      }
      if (cudnn_here) {
        try {
          auto conv = std::make_shared<CudnnConv>(a, dt);
          for (int algo : conv->algorithms()) {
            TacticTiming t;
            t.tactic = CudnnConv::algorithm_name(algo);
            try {
              const std::size_t ws = conv->workspace_bytes(algo);
              if (ws > (std::size_t{256} << 20)) {
                t.why_not = "workspace " + std::to_string(ws >> 20) + " MiB > 256 MiB";
              } else {
                if (workspace.bytes() < ws) workspace = course::DeviceBuffer<std::uint8_t>(ws);
                LaunchOp lo;
                lo.kind = OpKind::conv;
                lo.tactic.kind = PlanTactic::Kind::cudnn;
                lo.tactic.cudnn_algo = algo;
                lo.conv = a;
                lo.cudnn = conv;
                t.us = time_us(stream.get(), config.timing_iterations, [&] {
                  launch(lib, lo, stream.get(), workspace.data(), workspace.bytes());
                });
                t.ran = true;
              }
            } catch (const std::exception& e) {
              CUDA_CHECK(cudaStreamSynchronize(stream.get()));
              t.why_not = e.what();
            }
            PlanTactic pt;
            pt.kind = PlanTactic::Kind::cudnn;
            pt.cudnn_algo = algo;
            pt.label = t.tactic;
            d.candidates.push_back(t);
            tactics.push_back(pt);
          }
        } catch (const std::exception& e) {
          TacticTiming t;
          t.tactic = "cudnn";
          t.why_not = e.what();
          d.candidates.push_back(t);
          tactics.push_back(PlanTactic{PlanTactic::Kind::cudnn, "", -1, "cudnn"});
        }
      }
      // cuDNN alone was asked for and none of its algorithms ran: the course's kernels.
      bool any_ran = false;
      for (const TacticTiming& t : d.candidates) any_ran |= t.ran;
      if (!any_ran && !course_here) time_course_kernels();
    } else {
      // One kernel for these layers; still timed, so the table accounts for the whole network.
      LaunchOp lo;
      lo.kind = op.kind;
      lo.tactic.symbol = simple_symbol(op.kind, dt);
      lo.tactic.label = op.kind == OpKind::copy ? "cudaMemcpy2DAsync" : lo.tactic.symbol;
      lo.dtype = dt;
      if (op.kind == OpKind::detect) {
        lo.detect = detect_args(op, g, b);
      } else {
        lo.pool = pool_args(op, g, b);
      }
      TacticTiming t;
      t.tactic = lo.tactic.label;
      t.us = time_us(stream.get(), config.timing_iterations,
                     [&] { launch(lib, lo, stream.get(), nullptr, 0); });
      t.ran = true;
      d.candidates.push_back(t);
      tactics.push_back(lo.tactic);
    }

    // only_tactic: keep the matching candidates when at least one of them ran.
    bool narrowed = false;
    auto matches = [&](const TacticTiming& t) {
      return t.ran && t.tactic.compare(0, config.only_tactic.size(), config.only_tactic) == 0;
    };
    if (!config.only_tactic.empty()) {
      for (const TacticTiming& t : d.candidates) narrowed |= matches(t);
    }
    for (std::size_t i = 0; i < d.candidates.size(); ++i) {
      if (!d.candidates[i].ran || (narrowed && !matches(d.candidates[i]))) continue;
      if (d.chosen < 0 ||
          d.candidates[i].us < d.candidates[static_cast<std::size_t>(d.chosen)].us) {
        d.chosen = static_cast<int>(i);
      }
    }
    if (d.chosen < 0) {
      throw std::runtime_error("build_plan: no tactic can run layer " + op.name + " (" + d.shape +
                               ")");
    }
    po.tactic = tactics[static_cast<std::size_t>(d.chosen)];
    rep.sum_of_chosen_us += d.candidates[static_cast<std::size_t>(d.chosen)].us;
    if (po.tactic.kind == PlanTactic::Kind::cudnn) {
      // The context's workspace must hold the chosen algorithm at every batch of the profile:
      // cuDNN's need is not monotonic in the batch (at batch 32 an algorithm may need less than
      // at batch 1), and a context runs any batch in [min, max]. Too little workspace is
      // CUDNN_STATUS_BAD_PARAM at enqueue.
      for (int batch = p.min_batch; batch <= p.max_batch; ++batch) {
        Bindings bb = b;
        bb.batch = batch;
        CudnnConv at(conv_args(op, g, bb, OpWeights{}), dt);
        plan.workspace_bytes =
            std::max(plan.workspace_bytes, at.workspace_bytes(po.tactic.cudnn_algo));
      }
    }
    rep.weight_bytes += po.weight.size() + po.bias.size() * sizeof(float);
    plan.ops.push_back(std::move(po));
    rep.layers.push_back(std::move(d));
  }
  CUDA_CHECK(cudaStreamSynchronize(stream.get()));

  std::vector<std::uint8_t> bytes = serialize_plan(plan);
  rep.plan_bytes = bytes.size();
  rep.build_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return bytes;
}

std::string format_tactic_table(const BuildReport& r) {
  std::ostringstream s;
  char line[512];
  std::snprintf(line, sizeof line, "  %-22s %-30s %7s  %-24s %9s  %s\n", "layer", "shape", "GFLOP",
                "chosen tactic", "us", "other candidates (us)");
  s << line;
  for (const LayerDecision& d : r.layers) {
    const TacticTiming& c = d.candidates[static_cast<std::size_t>(d.chosen)];
    std::ostringstream others;
    for (std::size_t i = 0; i < d.candidates.size(); ++i) {
      if (static_cast<int>(i) == d.chosen) continue;
      const TacticTiming& t = d.candidates[i];
      if (others.tellp() > 0) others << ", ";
      if (t.ran) {
        char v[64];
        std::snprintf(v, sizeof v, "%.1f", t.us);
        others << t.tactic << " " << v;
      } else {
        others << t.tactic << " ("
               << (t.why_not.size() > 40 ? t.why_not.substr(0, 40) + "..." : t.why_not) << ")";
      }
    }
    std::snprintf(line, sizeof line, "  %-22s %-30s %7.3f  %-24s %9.1f  ", d.layer.c_str(),
                  d.shape.c_str(), d.gflop, c.tactic.c_str(), c.us);
    s << line << others.str() << "\n";
  }
  return s.str();
}

}  // namespace lesson12
