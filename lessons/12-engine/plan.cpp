#include "plan.hpp"

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <array>
#include <cstring>
#include <limits>

#include "common/cuda_check.hpp"

namespace lesson12 {
namespace {

constexpr char kMagic[8] = {'C', 'D', 'L', 'P', 'L', 'A', 'N', '\n'};

// ------------------------------------------------------------------------------------ writer

class Writer {
 public:
  void u32(std::uint32_t v) { raw(&v, sizeof v); }
  void i32(std::int32_t v) { raw(&v, sizeof v); }
  void u64(std::uint64_t v) { raw(&v, sizeof v); }
  void f32(float v) { raw(&v, sizeof v); }
  void str(const std::string& s) {
    u32(static_cast<std::uint32_t>(s.size()));
    raw(s.data(), s.size());
  }
  void bytes(const std::vector<std::uint8_t>& b) {
    u64(b.size());
    raw(b.data(), b.size());
  }
  void floats(const std::vector<float>& f) {
    u64(f.size());
    raw(f.data(), f.size() * sizeof(float));
  }
  void raw(const void* p, std::size_t n) {
    const auto* b = static_cast<const std::uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  }
  std::vector<std::uint8_t> out;
};

// ------------------------------------------------------------------------------------ reader

class Reader {
 public:
  Reader(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  std::uint32_t u32(const char* what) { return pod<std::uint32_t>(what); }
  std::int32_t i32(const char* what) { return pod<std::int32_t>(what); }
  std::uint64_t u64(const char* what) { return pod<std::uint64_t>(what); }
  float f32(const char* what) { return pod<float>(what); }
  std::string str(const char* what) {
    const std::uint32_t n = u32(what);
    need(n, what);
    std::string s(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return s;
  }
  std::vector<std::uint8_t> bytes(const char* what) {
    const std::uint64_t n = u64(what);
    need(n, what);
    std::vector<std::uint8_t> b(data_ + pos_, data_ + pos_ + n);
    pos_ += n;
    return b;
  }
  std::vector<float> floats(const char* what) {
    const std::uint64_t n = u64(what);
    if (n > size_ / sizeof(float)) need(std::numeric_limits<std::uint64_t>::max(), what);
    need(n * sizeof(float), what);
    std::vector<float> f(n);
    std::memcpy(f.data(), data_ + pos_, n * sizeof(float));
    pos_ += n * sizeof(float);
    return f;
  }
  // An int that must lie in [lo, hi]: a corrupted count must not allocate gigabytes.
  int count(const char* what, int lo, int hi) {
    const std::int32_t v = i32(what);
    if (v < lo || v > hi) {
      throw PlanError("corrupted plan: " + std::string(what) + " is " + std::to_string(v) +
                      ", expected a value in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                      "]");
    }
    return v;
  }
  std::size_t pos() const { return pos_; }

 private:
  template <class T>
  T pod(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  void need(std::uint64_t n, const char* what) const {
    if (n > size_ - pos_) {
      throw PlanError("truncated plan: reading " + std::string(what) + " at byte " +
                      std::to_string(pos_) + " needs " + std::to_string(n) +
                      " more bytes, the plan has " + std::to_string(size_ - pos_) + " left");
    }
  }
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

void write_view(Writer& w, const View& v) {
  w.i32(v.buffer);
  w.i32(v.channel_offset);
  w.i32(v.channels);
  w.i32(v.h);
  w.i32(v.w);
}

View read_view(Reader& r, int buffers) {
  View v;
  v.buffer = r.count("a view's buffer", View::kNetworkInput, buffers - 1);
  v.channel_offset = r.count("a view's channel offset", 0, 1 << 16);
  v.channels = r.count("a view's channels", 0, 1 << 16);
  v.h = r.count("a view's height", 0, 1 << 16);
  v.w = r.count("a view's width", 0, 1 << 16);
  return v;
}

}  // namespace

std::uint32_t crc32(const std::uint8_t* data, std::size_t size) {
  // The reflected CRC-32 of zlib / PNG / Ethernet (polynomial 0xEDB88320), one table lookup per
  // byte.
  static const std::array<std::uint32_t, 256> table = [] {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1u) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  std::uint32_t c = 0xFFFFFFFFu;
  for (std::size_t i = 0; i < size; ++i) c = table[(c ^ data[i]) & 0xFFu] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

std::vector<std::uint8_t> convert_weights(const std::vector<float>& w, DType precision) {
  std::vector<std::uint8_t> out(w.size() * element_size(precision));
  if (precision == DType::f32) {
    std::memcpy(out.data(), w.data(), out.size());
  } else {
    for (std::size_t i = 0; i < w.size(); ++i) {
      const __half h = __float2half_rn(w[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}

std::vector<std::uint8_t> serialize_plan(const Plan& plan) {
  if (plan.ops.size() != plan.graph.ops.size()) {
    throw std::invalid_argument("serialize_plan: one PlanOp per graph op expected");
  }
  Writer w;
  w.raw(kMagic, sizeof kMagic);
  w.u32(plan.format);
  w.str(plan.course_version);
  w.str(plan.gpu_name);
  w.i32(plan.cc_major);
  w.i32(plan.cc_minor);
  w.i32(plan.sm_count);

  Writer b;
  const EngineGraph& g = plan.graph;
  b.i32(static_cast<int>(plan.precision));
  b.i32(plan.profile.min_batch);
  b.i32(plan.profile.opt_batch);
  b.i32(plan.profile.max_batch);
  b.i32(g.input_h);
  b.i32(g.input_w);
  b.i32(g.num_classes);
  b.i32(g.num_candidates);
  b.u64(g.arena_bytes);
  b.u64(plan.workspace_bytes);
  b.i32(static_cast<int>(g.buffers.size()));
  for (const BufferDesc& d : g.buffers) {
    b.str(d.name);
    b.i32(d.channels);
    b.i32(d.h);
    b.i32(d.w);
    b.u64(d.offset);
    b.i32(d.first_op);
    b.i32(d.last_op);
  }
  b.i32(static_cast<int>(plan.ops.size()));
  for (const PlanOp& p : plan.ops) {
    const FusedOp& op = p.op;
    b.i32(static_cast<int>(op.kind));
    b.str(op.name);
    b.i32(static_cast<int>(op.fused.size()));
    for (const std::string& f : op.fused) b.str(f);
    write_view(b, op.input);
    write_view(b, op.output);
    b.i32(op.out_channels);
    b.i32(op.in_channels);
    b.i32(op.kernel);
    b.i32(op.stride);
    b.i32(op.pad);
    b.i32(static_cast<int>(op.act));
    b.i32(op.has_residual ? 1 : 0);
    write_view(b, op.residual);
    b.i32(static_cast<int>(op.box.size()));
    for (std::size_t i = 0; i < op.box.size(); ++i) {
      write_view(b, op.box[i]);
      write_view(b, op.cls[i]);
      b.i32(op.strides[i]);
    }
    b.i32(op.reg_max);
    b.i32(op.num_classes);
    b.i32(static_cast<int>(p.tactic.kind));
    b.str(p.tactic.symbol);
    b.i32(p.tactic.cudnn_algo);
    b.str(p.tactic.label);
    b.bytes(p.weight);
    b.floats(p.bias);
  }
  b.str(plan.code_targets);
  b.bytes(plan.code);

  w.bytes(b.out);
  w.u32(crc32(w.out.data(), w.out.size()));
  return std::move(w.out);
}

Plan parse_plan(const std::vector<std::uint8_t>& bytes) {
  if (bytes.size() < sizeof kMagic || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) {
    throw PlanError("not a plan: expected a file starting with the bytes \"CDLPLAN\\n\" (" +
                    std::to_string(bytes.size()) + " bytes given)");
  }
  Reader r(bytes.data() + sizeof kMagic, bytes.size() - sizeof kMagic);
  Plan plan;
  plan.format = r.u32("the format version");
  if (plan.format != kPlanFormat) {
    throw PlanError("plan format " + std::to_string(plan.format) + ", this runtime reads format " +
                    std::to_string(kPlanFormat) + ": rebuild the plan");
  }
  plan.course_version = r.str("the course version");
  if (plan.course_version != kCourseVersion) {
    throw PlanError("plan built by \"" + plan.course_version + "\", this runtime is \"" +
                    kCourseVersion + "\": rebuild the plan with this version");
  }
  plan.gpu_name = r.str("the GPU name");
  plan.cc_major = r.i32("the compute capability");
  plan.cc_minor = r.i32("the compute capability");
  plan.sm_count = r.i32("the SM count");
  // The checksum covers everything before it; check it before trusting the body's counts.
  const std::size_t body_start = sizeof kMagic + r.pos();
  {
    Reader peek(bytes.data() + body_start, bytes.size() - body_start);
    const std::uint64_t body = peek.u64("the body size");
    if (body > bytes.size() - body_start - 8 || bytes.size() - body_start - 8 - body < 4) {
      throw PlanError("truncated plan: the header announces a " + std::to_string(body) +
                      "-byte body and a checksum, the file has " +
                      std::to_string(bytes.size() - body_start - 8) + " bytes after the header");
    }
    const std::size_t end = body_start + 8 + body;
    std::uint32_t stored;
    std::memcpy(&stored, bytes.data() + end, 4);
    if (crc32(bytes.data(), end) != stored) {
      throw PlanError("corrupted plan: its CRC-32 does not match its contents");
    }
    if (end + 4 != bytes.size()) {
      throw PlanError("corrupted plan: " + std::to_string(bytes.size() - end - 4) +
                      " bytes after the checksum");
    }
  }
  r.u64("the body size");
  Plan& p = plan;
  const int precision = r.count("the precision", 0, 1);
  p.precision = static_cast<DType>(precision);
  p.profile.min_batch = r.count("the profile's min batch", 1, 4096);
  p.profile.opt_batch = r.count("the profile's opt batch", 1, 4096);
  p.profile.max_batch = r.count("the profile's max batch", 1, 4096);
  EngineGraph& g = p.graph;
  g.input_h = r.count("the input height", 32, 1 << 14);
  g.input_w = r.count("the input width", 32, 1 << 14);
  g.num_classes = r.count("the class count", 1, 4096);
  g.num_candidates = r.count("the candidate count", 1, 1 << 24);
  g.arena_bytes = r.u64("the arena size");
  p.workspace_bytes = r.u64("the workspace size");
  const int buffers = r.count("the buffer count", 0, 4096);
  g.buffers.resize(buffers);
  for (BufferDesc& d : g.buffers) {
    d.name = r.str("a buffer name");
    d.channels = r.count("a buffer's channels", 1, 1 << 16);
    d.h = r.count("a buffer's height", 1, 1 << 16);
    d.w = r.count("a buffer's width", 1, 1 << 16);
    d.offset = r.u64("a buffer's offset");
    d.first_op = r.i32("a buffer's first op");
    d.last_op = r.i32("a buffer's last op");
  }
  const int ops = r.count("the op count", 1, 4096);
  p.ops.resize(ops);
  for (PlanOp& po : p.ops) {
    FusedOp& op = po.op;
    op.kind = static_cast<OpKind>(r.count("an op kind", 0, 4));
    op.name = r.str("an op name");
    const int fused = r.count("an op's fused layer count", 0, 64);
    for (int i = 0; i < fused; ++i) op.fused.push_back(r.str("a fused layer name"));
    op.input = read_view(r, buffers);
    op.output = read_view(r, buffers);
    op.out_channels = r.count("out channels", 0, 1 << 16);
    op.in_channels = r.count("in channels", 0, 1 << 16);
    op.kernel = r.count("a kernel size", 0, 64);
    op.stride = r.count("a stride", 0, 64);
    op.pad = r.count("a padding", 0, 64);
    op.act = static_cast<Activation>(r.count("an activation", 0, 1));
    op.has_residual = r.count("the residual flag", 0, 1) == 1;
    op.residual = read_view(r, buffers);
    const int levels = r.count("the detect level count", 0, 8);
    for (int i = 0; i < levels; ++i) {
      op.box.push_back(read_view(r, buffers));
      op.cls.push_back(read_view(r, buffers));
      op.strides.push_back(r.count("a level stride", 1, 1024));
    }
    op.reg_max = r.count("reg_max", 0, 1024);
    op.num_classes = r.count("the op's class count", 0, 4096);
    po.tactic.kind = static_cast<PlanTactic::Kind>(r.count("a tactic kind", 0, 1));
    po.tactic.symbol = r.str("a tactic's kernel");
    po.tactic.cudnn_algo = r.i32("a tactic's cuDNN algorithm");
    po.tactic.label = r.str("a tactic's label");
    po.weight = r.bytes("an op's weights");
    po.bias = r.floats("an op's bias");
    const std::size_t expect_w = static_cast<std::size_t>(op.out_channels) * op.kernel * op.kernel *
                                 op.in_channels * element_size(p.precision);
    if (op.kind == OpKind::conv && (po.weight.size() != expect_w ||
                                    po.bias.size() != static_cast<std::size_t>(op.out_channels))) {
      throw PlanError("corrupted plan: op " + op.name + " holds " +
                      std::to_string(po.weight.size()) + " weight bytes and " +
                      std::to_string(po.bias.size()) + " biases, expected " +
                      std::to_string(expect_w) + " and " + std::to_string(op.out_channels));
    }
    g.ops.push_back(op);
  }
  p.code_targets = r.str("the code's targets");
  p.code = r.bytes("the kernels' code");
  validate_plan(plan);
  return plan;
}

void validate_plan(const Plan& p) {
  // A checksum catches accidents, not a plan written by hand; these are the facts the kernels'
  // addresses rest on, so that no enqueue of a parsed plan reads or writes outside its memory.
  auto fail = [](const std::string& what) { throw PlanError("inconsistent plan: " + what); };
  const OptimizationProfile& pr = p.profile;
  if (!(1 <= pr.min_batch && pr.min_batch <= pr.opt_batch && pr.opt_batch <= pr.max_batch &&
        pr.max_batch <= 256)) {
    fail("profile min " + std::to_string(pr.min_batch) + ", opt " + std::to_string(pr.opt_batch) +
         ", max " + std::to_string(pr.max_batch) + " (expected 1 <= min <= opt <= max <= 256)");
  }
  const EngineGraph& g = p.graph;
  const std::size_t es = element_size(p.precision);
  for (const BufferDesc& d : g.buffers) {
    const std::size_t bytes = d.elements_per_image() * pr.max_batch * es;
    if (d.offset > g.arena_bytes || bytes > g.arena_bytes - d.offset) {
      fail("buffer " + d.name + " (" + std::to_string(bytes) + " bytes at offset " +
           std::to_string(d.offset) + ") does not fit the " + std::to_string(g.arena_bytes) +
           "-byte arena");
    }
  }
  if (g.num_candidates != num_candidates(g.input_h, g.input_w)) {
    fail(std::to_string(g.num_candidates) + " candidates for a " + std::to_string(g.input_h) + "x" +
         std::to_string(g.input_w) + " input (expected " +
         std::to_string(num_candidates(g.input_h, g.input_w)) + ")");
  }
  auto check_view = [&](const View& v, const std::string& op, const char* which) {
    if (v.buffer == View::kNetworkInput) {
      if (v.channel_offset != 0 || v.h != g.input_h || v.w != g.input_w || v.channels > 3) {
        fail(op + ": its " + which + " is not the network input's shape");
      }
      return;
    }
    const BufferDesc& d = g.buffers[static_cast<std::size_t>(v.buffer)];
    if (v.channel_offset + v.channels > d.channels || v.h != d.h || v.w != d.w) {
      fail(op + ": its " + which + " (channels " + std::to_string(v.channel_offset) + ".." +
           std::to_string(v.channel_offset + v.channels) + ", " + std::to_string(v.h) + "x" +
           std::to_string(v.w) + ") lies outside buffer " + d.name + " (" +
           std::to_string(d.channels) + " channels, " + std::to_string(d.h) + "x" +
           std::to_string(d.w) + ")");
    }
  };
  for (const PlanOp& po : p.ops) {
    const FusedOp& op = po.op;
    switch (op.kind) {
      case OpKind::conv:
        check_view(op.input, op.name, "input");
        check_view(op.output, op.name, "output");
        if (op.has_residual) check_view(op.residual, op.name, "residual");
        if (op.input.channels != op.in_channels || op.output.channels != op.out_channels ||
            op.kernel < 1 || op.stride < 1 || op.pad < 0 ||
            (op.has_residual && op.residual.channels != op.out_channels)) {
          fail(op.name + ": its shape disagrees with its views");
        }
        break;
      case OpKind::max_pool:
      case OpKind::upsample:
      case OpKind::copy:
        check_view(op.input, op.name, "input");
        check_view(op.output, op.name, "output");
        if (op.input.channels != op.output.channels) fail(op.name + ": channels in != out");
        break;
      case OpKind::detect:
        if (op.box.size() != 3 || op.reg_max < 1 || op.reg_max > 32 ||
            op.num_classes != g.num_classes) {
          fail(op.name + ": expected 3 levels, reg_max in [1, 32] and " +
               std::to_string(g.num_classes) + " classes");
        }
        for (std::size_t i = 0; i < op.box.size(); ++i) {
          check_view(op.box[i], op.name, "box logits");
          check_view(op.cls[i], op.name, "class logits");
          if (op.box[i].channels != 4 * op.reg_max || op.cls[i].channels != op.num_classes) {
            fail(op.name + ": a level's logits have the wrong channel count");
          }
        }
        break;
    }
  }
}

void check_plan_device(const Plan& plan, int device) {
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  if (prop.major != plan.cc_major || prop.minor != plan.cc_minor) {
    throw PlanError("plan built for " + plan.gpu_name + " (compute capability " +
                    std::to_string(plan.cc_major) + "." + std::to_string(plan.cc_minor) +
                    "); this GPU is " + prop.name + " (compute capability " +
                    std::to_string(prop.major) + "." + std::to_string(prop.minor) +
                    "): build the plan on this GPU");
  }
}

}  // namespace lesson12
