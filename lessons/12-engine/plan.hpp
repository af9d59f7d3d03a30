// Lesson 12: the plan file, what build_plan writes and Engine::deserialize reads.
//
// Layout (all integers little-endian; strings as u32 length + bytes):
//   magic "CDLPLAN\n"                 8 bytes: not a plan otherwise
//   u32 format version (kPlanFormat)  a plan of another format is refused
//   string course version             kCourseVersion of the build that wrote it
//   string GPU name, i32 cc major, i32 cc minor, i32 SM count     the GPU it was built on
//   u64 body bytes, then the body:
//     precision, profile (min/opt/max), input H, W, classes, candidates, arena bytes, workspace
//     bytes; the buffers (name, channels, h, w, offset); the ops (kind, name, views, shape,
//     activation, residual, detect's views) each with its tactic (kernel symbol or cuDNN
//     algorithm) and its weights (converted to the precision) and bias (float);
//     the kernels' targets and code (the fatbinary)
//   u32 CRC-32 (IEEE 802.3 polynomial) of every byte before it
// A plan holds SASS for the GPU it was built on: like TensorRT's, it is refused on another
// compute capability (TensorRT also refuses other device models unless built hardware-compatible).
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine.hpp"
#include "graph.hpp"

namespace lesson12 {

constexpr std::uint32_t kPlanFormat = 1;

// A plan that cannot be used here: the message says what was expected and what was found.
class PlanError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct PlanTactic {
  enum class Kind : std::int32_t { kernel = 0, cudnn = 1 } kind = Kind::kernel;
  std::string symbol;  // kernel: extern "C" name in the code
  int cudnn_algo = -1;
  std::string label;  // as the tactic table printed it
};

struct PlanOp {
  FusedOp op;  // op.weight / op.bias empty: the converted values are below
  PlanTactic tactic;
  std::vector<std::uint8_t> weight;  // [out][k][k][in] in the plan's precision
  std::vector<float> bias;
};

struct Plan {
  std::uint32_t format = kPlanFormat;
  std::string course_version = kCourseVersion;
  std::string gpu_name;
  int cc_major = 0, cc_minor = 0, sm_count = 0;
  DType precision = DType::f16;
  OptimizationProfile profile;
  EngineGraph graph;  // buffers and ops (ops without weights); arena_bytes for max batch
  std::size_t workspace_bytes = 0;
  std::vector<PlanOp> ops;  // one per graph op
  std::string code_targets;
  std::vector<std::uint8_t> code;
};

std::vector<std::uint8_t> serialize_plan(const Plan& plan);
// Parses and checks the format, course version and checksum (not the GPU: check_plan_device).
// Throws PlanError: "not a plan" (magic), another format or course version, "truncated plan"
// (naming what was being read, at which offset, of how many bytes), "corrupted plan" (checksum).
Plan parse_plan(const std::vector<std::uint8_t>& bytes);
// The consistency a parsed plan must have before any kernel runs on it (parse_plan calls it):
// the profile is ordered, every buffer fits the arena at the largest batch, every view lies
// inside its buffer and agrees with its op's shape, the detect op's levels and classes are
// coherent. Throws PlanError("inconsistent plan: ...") naming the op or buffer.
void validate_plan(const Plan& plan);

// Throws PlanError naming both GPUs unless `device` has the plan's compute capability.
void check_plan_device(const Plan& plan, int device);

std::uint32_t crc32(const std::uint8_t* data, std::size_t size);

// Converts float weights to the precision's bytes (FP16: round to nearest even).
std::vector<std::uint8_t> convert_weights(const std::vector<float>& w, DType precision);

}  // namespace lesson12
