// Lesson 13: the INT8 engine. Lesson 12's optimised graph run on the GPU with a precision per op:
// INT8 (or FP8 E4M3, QuantizedEngineConfig::precision) where the calibration table allows it,
// lesson 12's FP16 (or FP32) kernels for the ops the caller keeps in higher precision, and the
// reformats between them.
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
// scale. In INT8 (Config::fuse_input, the default) model.0 does it itself: it runs
// conv_int8_image_gpu (int8_conv_gpu.hpp), which quantises the pixels each block needs as it
// loads them, so the codes never exist in memory. Otherwise (fuse_input false, and always in
// FP8) one kernel quantises the input into an NHWC buffer padded to 16 channels (the 13 extra
// channels zero, and model.0's weights padded with zero input channels), so that model.0 runs on
// the tensor-core kernel (in_c % 16 == 0): one more pass over memory, and 16 channels of work for
// 3. Either way the zeros add nothing to the int32 sums, so the result is FakeQuantGraph's
// exactly. Kept in the fallback list, model.0 reads the float input directly with lesson 12's
// first-layer kernel.
//
// Equal to FakeQuantGraph (fake_quant.hpp) with the same table and weight scales when every op
// runs in INT8: each INT8 buffer's codes are quantize_int8(FakeQuantGraph's float, scale) (the
// consumer's quantisation of fake_quant.hpp is exactly the producer's requantisation here), and
// the detect inputs are the same floats, up to the one-ulp exp difference of SiLU layers that
// int8_conv_gpu.hpp documents. With a fallback list it is close, not equal: the fallback runs in
// FP16 (or FP32 with float sums in another order), and its INT8 readers read the quantised value
// where FakeQuantGraph's FP32 readers read the float.
//
// FP8 E4M3 (precision = QuantPrecision::fp8_e4m3; compute capability 8.9 or newer): the same
// plan with E4M3 codes in place of INT8 codes, as FakeQuantGraph's FP8 mode runs it. Every
// "int8" buffer above is an fp8_e4m3 buffer (one byte per element, so the memory layout is the
// same): codes c, the value e4m3(c) * s with s = float(127 s8 / 448), computed in double from the
// table's INT8 scale s8 (the table's amax 127 s8 mapped to E4M3's 448: FakeQuantGraph's rule,
// reproduced here expression for expression, since fake_quant.cpp keeps it in a local lambda).
// Weights are quantize_fp8_e4m3_weights' (per channel or per tensor, max |w| / 448). The
// convolutions are conv_fp8_gpu's (fp8_conv_gpu.hpp: E4M3 codes at the consumer's scale, float
// for the detect inputs, half or float for a fallback reader); the input is quantised into 16
// channels of E4M3 codes (the padding is code 0x00, +0, with zero weight codes); max pool /
// upsample / copy decode the codes to floats (fl(e4m3(c) * s)), take the maximum in
// FakeQuantGraph's order and store the winning code, or requantise the float when the output
// buffer's scale differs, exactly what FakeQuantGraph's next FP8 reader computes from its stored
// float. The reformats convert E4M3 <-> FP16 / FP32 at fallback boundaries. Not equal to
// FakeQuantGraph, but close: the tensor core's FP8 accumulation rounds (fp8_conv_gpu.hpp), so a
// convolution's output lands on the oracle's code or, near a rounding boundary, on a neighbour,
// and those differences propagate. Config::epilogue is an INT8 option and is ignored in FP8 (the
// FP8 kernel has one epilogue, in float).
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
#include "fake_quant.hpp"      // WeightScales, QuantPrecision
#include "graph.hpp"
#include "int8_conv_gpu.hpp"  // Int8Epilogue

namespace lesson13 {

// fp8_e4m3: E4M3 codes (quantize.hpp), the storage of an FP8 engine's quantised buffers.
enum class BufferStorage { int8 = 0, f16 = 1, f32 = 2, fp8_e4m3 = 3 };
const char* to_string(BufferStorage s);      // "int8", "fp16", "fp32", "fp8"
std::size_t storage_bytes(BufferStorage s);  // 1, 2, 4, 1

struct QuantizedEngineConfig {
  // The number format of the quantised ops: INT8 (conv_int8_gpu) or FP8 E4M3 (conv_fp8_gpu,
  // compute capability 8.9 or newer). "INT8" in the rest of this header then reads "FP8".
  QuantPrecision precision = QuantPrecision::int8;
  WeightScales weights = WeightScales::per_channel;
  // The fallback list: ops (FusedOp::name) that run in `fallback` precision on lesson 12's
  // kernels instead of INT8 (or FP8). The detect op always runs in float and may not be named.
  std::vector<std::string> keep;
  lesson12::DType fallback = lesson12::DType::f16;
  int max_batch = 1;  // 1 .. kMaxBatch: the device buffers are sized for it
  static constexpr int kMaxBatch = 256;
  // How the INT8 convolutions round their INT8 outputs (int8_conv_gpu.hpp): exact (equal to
  // conv_int8_reference, and so to FakeQuantGraph) or fast (one code off at most, and only for
  // the elements at a rounding boundary: a few in 10 000 are at risk). INT8 only: ignored in
  // FP8 (conv_fp8_gpu has one epilogue).
  Int8Epilogue epilogue = Int8Epilogue::exact;
  // INT8 only: the op that reads the network input quantises the float images itself
  // (conv_int8_image_gpu), or, false, a separate kernel quantises them into 16 padded channels
  // for the tensor-core kernel first (what the FP8 engine always does). The lesson times both.
  bool fuse_input = true;
};

// One buffer copied to the host (read_buffer): `batch` images, NHWC, the buffer's channel count.
struct BufferContents {
  BufferStorage storage = BufferStorage::int8;
  float scale = 0;                 // int8: value = code * scale; fp8_e4m3: e4m3(code) * scale;
                                   // otherwise 0
  std::vector<std::int8_t> codes;  // int8 storage: the codes as stored; otherwise empty
  std::vector<std::uint8_t> e4m3;  // fp8_e4m3 storage: the E4M3 codes as stored; otherwise empty
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
  // for a tensor of zeros; in FP8 quantize_fp8_e4m3_weights), so the two can be compared bit for
  // bit (INT8) or code for code given equal inputs (FP8, up to the accumulation's rounding).
  // Throws (every check before any CUDA call, so they need no GPU):
  //   std::invalid_argument: an unknown precision; max_batch outside [1, kMaxBatch]; a name in
  //     `keep` that is no op of the graph, or the detect op; a scale an INT8 op uses that is not a
  //     positive normal float, or in FP8 a table scale s8 whose FP8 scale 127 s8 / 448 is not
  //     (naming the tensor); an INT8 convolution whose input is not the network input and has a
  //     channel count that is not a multiple of 16 (keep it, naming the op); an op that reads the
  //     network input and is not a convolution, or a view of the input that is not all of it
  //   std::runtime_error: the table check above (another network, a missing or extra tensor)
  // then, on the current device: std::invalid_argument for a GPU older than compute capability
  // 8.0 (INT8) or 8.9 (FP8) when an op runs quantised, before anything is allocated or launched;
  // for a fallback layer no kernel of lesson 12 can run and for a quantised convolution
  // conv_int8_gpu / conv_fp8_gpu would refuse (naming the op); course::CudaError /
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
  QuantPrecision precision() const;
  bool is_int8(int op) const;  // whether op runs quantised (INT8 or FP8): false for the fallback
                               // ops and detect
  BufferStorage storage(int buffer) const;
  // The scale of the buffer's codes (0 if none is used): the table's (INT8), or the FP8 scale
  // derived from it (FP8, above).
  float scale(int buffer) const;
  int int8_ops() const;           // ops that run quantised
  int reformat_launches() const;  // reformat kernels per enqueue (input quantisation aside)
  bool quantizes_input() const;   // whether enqueue quantises "images" for model.0 in a kernel of
                                  // its own (false when model.0 does it, or runs in fallback)
  std::size_t activation_bytes() const;  // device memory of buffers and scratch at max batch
  std::size_t weight_bytes() const;
  // One line per launch of enqueue, in order: "int8 conv model.1 -> int8", "fp8 conv model.1 ->
  // fp8", "reformat ...".
  std::vector<std::string> launches() const;
  // One line: the precision, ops quantised / fallback, reformats, memory.
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
// y_type fp8_e4m3: E4M3 codes quantize_fp8_e4m3(images[n, c, y, x], scale), code 0x00 (+0) for
// the padding. y: 16-byte aligned, [batch, h, w, padded_channels] bytes.
struct QuantizeInputArgs {
  const float* images;
  void* y;  // std::int8_t (int8) or std::uint8_t E4M3 codes (fp8_e4m3)
  int batch, channels, h, w, padded_channels;
  float scale;
  BufferStorage y_type = BufferStorage::int8;  // int8 or fp8_e4m3
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

// The same on E4M3 codes, as FakeQuantGraph's FP8 mode computes it: each input code decoded to
// fl(e4m3(c) * x_scale) (dequantize_fp8_e4m3), the maximum taken in the order (r, s) row by row
// with "replace if the best so far is below" (std::max's rule: of equal values, -0 and +0, the
// first stays; a NaN code never wins; upsample and a copy, a 1x1 pool of stride 1, take their
// one input as it is). Output
// as y_type: fp8_e4m3 -> the winning code itself if y_scale == x_scale (a code decoded and
// quantised again with the same scale is itself: fake_quant.hpp), else quantize_fp8_e4m3(v,
// y_scale) of the float v; f32 -> v; f16 -> half(v).
struct Fp8PoolArgs {
  const std::uint8_t* x;
  void* y;
  int x_stride, y_stride;
  int batch, in_h, in_w, channels, out_h, out_w;
  int kernel, stride, pad, upsample;
  float x_scale, y_scale;
  BufferStorage y_type;
};
void launch_fp8_pool(const Fp8PoolArgs& a, cudaStream_t stream);

// Reformat `pixels` pixels of `channels` channels: read as x_type (int8: fl(q * x_scale);
// fp8_e4m3: fl(e4m3(c) * x_scale)), written as y_type (int8: quantize_int8(v, y_scale);
// fp8_e4m3: quantize_fp8_e4m3(v, y_scale); half: round to nearest even). int8 -> int8 or
// fp8_e4m3 -> fp8_e4m3 with equal scales copies the codes.
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
