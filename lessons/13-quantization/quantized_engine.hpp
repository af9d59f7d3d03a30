// Lesson 13: the INT8 engine. Lesson 12's optimised graph run on the GPU with a precision per op:
// INT8 where the calibration table allows it, lesson 12's FP16 (or FP32) kernels for the ops
// the caller keeps in higher precision, and the reformats between them.
//
//   QuantizedEngine   the graph, a calibration table and a fallback list -> weights quantised on
//                     the host and uploaded, one device buffer per activation buffer, and
//                     enqueue(): every launch of one inference on one stream
//
// What each buffer holds (BufferStorage), decided once from the ops that READ it:
//   f32    the buffers the detect op reads (the head's last convolutions): the decode runs in
//          float on their float output (Int8ConvOutput::f32), lesson 12's detect_decode_f32
//   int8   any other buffer an INT8 op reads: codes q, the value q * s with s the table's scale
//          of the buffer (one scale per buffer: calibrate_graph.hpp says why)
//   f16 / f32 (the fallback precision)   a buffer only fallback ops read
// Every op then writes its output view in that storage. An INT8 convolution writes any of the
// three itself (conv_int8_gpu's y_type: requantised to the buffer's scale, float or half); an
// INT8 max pool / upsample / copy (this lesson's own small kernels, quantized_engine.cu) reads
// codes and writes codes (requantised when the output buffer has another scale: only upsample's
// does in YOLOv8n), half or float. A fallback op runs lesson 12's kernel of its precision
// (loaded from lesson 12's fatbinary through the Driver API, kernel_library.hpp) on views of its
// own dtype; where a view is stored otherwise, a REFORMAT kernel converts it into a scratch
// buffer before the op (dequantise INT8 -> FP16) or after it (quantise FP16 -> INT8). Those
// extra passes over memory are why an engine with many INT8/FP16 boundaries can end up slower
// than the plain FP16 engine; reformat_launches() counts them.
//
// The network input "images" (float NCHW [B, 3, H, W]) is quantised with the table's "images"
// scale by one kernel into an INT8 NHWC buffer padded to 16 channels (the 13 extra channels
// zero, and model.0's weights padded with zero input channels), so that model.0 runs on the INT8
// tensor-core kernel (in_c % 16 == 0): the zeros add nothing to the int32 sums, so the result is
// FakeQuantGraph's exactly. Kept in the fallback list, model.0 reads the float input directly
// with lesson 12's first-layer kernel.
//
// Equal to FakeQuantGraph (fake_quant.hpp) with the same table and weight scales when every op
// runs in INT8: each INT8 buffer's codes are quantize_int8(FakeQuantGraph's float, scale) (the
// consumer's quantisation of fake_quant.hpp is exactly the producer's requantisation here), and
// the detect inputs are the same floats, up to the one-ulp exp difference of SiLU layers that
// int8_conv_gpu.hpp documents. With a fallback list it is close, not equal: the fallback runs in
// FP16 (or FP32 with float sums in another order), and its INT8 readers read the quantised value
// where FakeQuantGraph's FP32 readers read the float.
//
// Memory: every buffer has its own device memory (no reuse across the network, as lesson 12's
// keep_all_buffers), so that every buffer can be read after a run (read_buffer);
// activation_bytes() says how much that is.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "calibration_table.hpp"
#include "engine_kernels.cuh"  // lesson 12: DType
#include "fake_quant.hpp"      // WeightScales
#include "graph.hpp"
#include "int8_conv_gpu.hpp"  // Int8Epilogue

namespace lesson13 {

enum class BufferStorage { int8 = 0, f16 = 1, f32 = 2 };
const char* to_string(BufferStorage s);
std::size_t storage_bytes(BufferStorage s);  // 1, 2, 4

struct QuantizedEngineConfig {
  WeightScales weights = WeightScales::per_channel;
  // The fallback list: ops (FusedOp::name) that run in `fallback` precision on lesson 12's
  // kernels instead of INT8. The detect op always runs in float and may not be named.
  std::vector<std::string> keep;
  lesson12::DType fallback = lesson12::DType::f16;
  int max_batch = 1;  // 1 .. kMaxBatch: the device buffers are sized for it
  static constexpr int kMaxBatch = 256;
  // How the INT8 convolutions round their INT8 outputs (int8_conv_gpu.hpp): exact (equal to
  // conv_int8_reference, and so to FakeQuantGraph) or fast (one code off at a rounding boundary,
  // a few in 10 000 elements).
  Int8Epilogue epilogue = Int8Epilogue::exact;
};

// One buffer copied to the host (read_buffer): `batch` images, NHWC, the buffer's channel count.
struct BufferContents {
  BufferStorage storage = BufferStorage::int8;
  float scale = 0;                 // int8 storage: value = code * scale; otherwise 0
  std::vector<std::int8_t> codes;  // int8 storage: the codes as stored; otherwise empty
  std::vector<float> values;       // every storage: the values the buffer represents (code *
                                   // scale as a float product, half -> float, float)
};

struct LaunchTime {
  std::string launch;  // a launches() line
  double us = 0;
};

class QuantizedEngine {
 public:
  // `graph`: lesson 12's optimize() of the network, at the input size the engine will run (the
  // graph is fully convolutional: a table calibrated at another size serves). `table`: checked
  // with check_calibration_table(table, network, calibration_tensor_names(graph)), i.e. it must
  // be calibrated for `network` (network_id of the caller's model and graph) and hold a scale
  // for "images" and every buffer, and nothing else. Weights are quantised as FakeQuantGraph
  // quantises them (per channel: quantize_int8_per_channel; per tensor: int8_scale(max |w|), 1
  // for a tensor of zeros), so the two can be compared bit for bit.
  // Throws (every check before any CUDA call, so they need no GPU):
  //   std::invalid_argument: max_batch outside [1, kMaxBatch]; a name in `keep` that is no op of
  //     the graph, or the detect op; a scale an INT8 op uses that is not a positive normal float
  //     (naming the tensor); an INT8 convolution whose input is not the network input and has a
  //     channel count that is not a multiple of 16 (keep it, naming the op); an op that reads the
  //     network input and is not a convolution, or a view of the input that is not all of it
  //   std::runtime_error: the table check above (another network, a missing or extra tensor)
  // then, on the current device: std::invalid_argument for a GPU older than compute capability
  // 8.0 when an op runs in INT8, for a fallback layer no kernel of lesson 12 can run and for an
  // INT8 convolution conv_int8_gpu would refuse (naming the op); course::CudaError /
  // course::DriverError for CUDA failures.
  QuantizedEngine(lesson12::EngineGraph graph, const CalibrationTable& table,
                  const std::string& network, const QuantizedEngineConfig& config);
  ~QuantizedEngine();
  QuantizedEngine(const QuantizedEngine&) = delete;
  QuantizedEngine& operator=(const QuantizedEngine&) = delete;

  // One inference of `batch` images on `stream`, asynchronous. images: device, float NCHW
  // [batch, 3, H, W] (RGB in [0, 1], as lesson 12's "images"); output: device, float
  // [batch, 4 + C, N] (lesson 12's "output0"). No allocation and no synchronisation inside, so
  // that it can be captured into a CUDA graph (run it once uncaptured first: the first launch of
  // a kernel may set its shared-memory limit). The device current at construction must be
  // current; the engine is not thread-safe (one stream at a time: the scratch buffers are shared).
  // Throws std::invalid_argument for a null pointer or a batch outside [1, max_batch], before
  // launching anything; course::CudaError / course::DriverError for launch failures, and
  // std::runtime_error naming the op if a launch is refused.
  void enqueue(const float* images, int batch, float* output, cudaStream_t stream);

  // Each launch of one enqueue timed on its own: an event recorded before every launch and after
  // the last, after one unmeasured enqueue (so the L2 is warm, as in a stream of inferences).
  // One entry per launches() line, in order; us = GPU time between the events around it (each
  // includes the event's own cost, under a microsecond). Synchronises the stream. Throws as
  // enqueue does.
  std::vector<LaunchTime> profile(const float* images, int batch, float* output,
                                  cudaStream_t stream);

  // Buffer `index` of the graph after a run, its first `batch` images (synchronises the device
  // first). Throws std::invalid_argument for an index or batch out of range.
  BufferContents read_buffer(int index, int batch) const;

  const lesson12::EngineGraph& graph() const;
  int max_batch() const;
  bool is_int8(int op) const;  // false for the fallback ops and detect
  BufferStorage storage(int buffer) const;
  float scale(int buffer) const;  // the table's scale of the buffer (0 if none is used)
  int int8_ops() const;
  int reformat_launches() const;         // reformat kernels per enqueue (input quantisation aside)
  bool quantizes_input() const;          // whether enqueue quantises "images" for model.0
  std::size_t activation_bytes() const;  // device memory of buffers and scratch at max batch
  std::size_t weight_bytes() const;
  // One line per launch of enqueue, in order: "int8 conv model.1 (tile auto)", "reformat ...".
  std::vector<std::string> launches() const;
  // One line: ops in INT8 / fallback, reformats, memory.
  std::string describe() const;

  struct Impl;

 private:
  // enqueue's launches; step_done(i, stream), if set, is called before launch i and, with
  // i = the number of launches, after the last.
  void enqueue_steps(const float* images, int batch, float* output, cudaStream_t stream,
                     const std::function<void(std::size_t, cudaStream_t)>& step_done);
  std::unique_ptr<Impl> impl_;
};

// ------------------------------------------------------------------------ the engine's kernels
//
// quantized_engine.cu; raw launches, no argument checks (the engine builds the arguments). All
// views are NHWC as lesson 12's: element (n, y, x, c) of a view at ((n * h + y) * w + x) * stride
// + c from its pointer (which points at the view's first channel).
namespace detail {

// Network input -> INT8 NHWC: y[n, y, x, c] = quantize_int8(images[n, c, y, x], scale) for c <
// channels, 0 for channels <= c < padded_channels. images: float NCHW [batch, channels, h, w].
struct QuantizeInputArgs {
  const float* images;
  std::int8_t* y;
  int batch, channels, h, w, padded_channels;
  float scale;
};
void launch_quantize_input(const QuantizeInputArgs& a, cudaStream_t stream);

// Max pool (kernel, stride, pad; padding never wins), nearest x2 upsample (upsample = 1: input
// pixel (y / 2, x / 2)) or copy (a 1x1 pool) on INT8 codes, one thread per output element.
// The maximum of the codes is the code of the maximum (q -> q * s is monotone). Output as
// y_type: int8 -> the code itself if y_scale == x_scale, else quantize_int8(fl(q * x_scale),
// y_scale) (what FakeQuantGraph's next INT8 reader computes from its stored float); f32 ->
// fl(q * x_scale); f16 -> half(fl(q * x_scale)).
struct Int8PoolArgs {
  const std::int8_t* x;
  void* y;
  int x_stride, y_stride;
  int batch, in_h, in_w, channels, out_h, out_w;
  int kernel, stride, pad, upsample;
  float x_scale, y_scale;
  BufferStorage y_type;
};
void launch_int8_pool(const Int8PoolArgs& a, cudaStream_t stream);

// Reformat `pixels` pixels of `channels` channels: read as x_type (int8: fl(q * x_scale)),
// written as y_type (int8: quantize_int8(v, y_scale); half: round to nearest even). int8 -> int8
// with equal scales copies the codes.
struct ReformatArgs {
  const void* x;
  void* y;
  int x_stride, y_stride;
  long long pixels;
  int channels;
  BufferStorage x_type, y_type;
  float x_scale, y_scale;
};
void launch_reformat(const ReformatArgs& a, cudaStream_t stream);

}  // namespace detail

}  // namespace lesson13
