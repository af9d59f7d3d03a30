// Lesson 09: the host half of the detector pipeline, which needs no GPU and is tested on the CPU.
//
//   SyntheticVideo   the "camera": 1080p BGR frames with one moving box per class, in class
//                    colours, whose true boxes are known (the tests' oracle)
//   SlotRing         the pinned-slot ring's state machine: free -> writing -> filled -> in flight
//                    -> free, with the back-pressure policy (block / drop oldest) and the
//                    dynamic batcher's wait (batch_to_take, exercise 1)
//   PipelineConfig   what a run is; validate() throws std::invalid_argument before any thread
//   LatencySummary   p50/p90/p99/max (nearest rank)
//   Bound            the slowest stage, from measured per-stage rates, and the % reached
//   TraceEvent       the measured timeline as Chrome trace-event JSON (Perfetto opens it)
//   check_frame      one frame's detections against its truth: IoU >= 0.9, right class, nothing
//                    extra
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/letterbox.cuh"
#include "postprocess.cuh"  // lesson 08: Detection, PostprocessConfig

namespace lesson09 {

using course::Box;
using course::Letterbox;
using Clock = std::chrono::steady_clock;

// --------------------------------------------------------------------------- synthetic video

// The most classes the palette has colours for.
constexpr int kMaxClasses = 6;

// Class c's colour, B, G, R (uint8). Every colour has a channel >= 220 that the background
// (channels in [16, 64]), the letterbox padding (114) and every other class colour keep at
// least 150 grey levels away from: a pixel is of class c when each channel is within
// kColourTolerance of it (ColorEngine), and bilinear blends at an object's edge count only
// when they are mostly the object.
struct Bgr {
  std::uint8_t b, g, r;
};
Bgr class_colour(int class_id);       // throws std::invalid_argument outside [0, kMaxClasses)
constexpr int kColourTolerance = 48;  // grey levels, per channel

// One object of a frame: its class and its box in source pixels (continuous coordinates:
// pixel columns x1 .. x2-1 are painted, so the box is [x1, x2] x [y1, y2]).
struct TruthBox {
  int class_id = 0;
  Box box{};
};

// How a frame is laid out in a slot and on the GPU. bgr: height rows of 3 x width bytes, B G R.
// nv12 (what hardware decoders such as NVDEC write): a Y plane of height rows of width bytes,
// then the interleaved U V plane of height / 2 rows of width bytes (U and V of each 2x2 block),
// BT.601 limited range; half the bytes of bgr. Even width and height only.
enum class FrameFormat { bgr, nv12 };
const char* to_string(FrameFormat format);

// A synthetic video: frame k is a fixed dark textured background and, for each class c, one
// filled rectangle in c's colour inside horizontal lane c (lanes never overlap, so no object
// hides another), sliding left and right and changing size with k. Class c is absent from
// frames where (k + 3c) % 11 == 5, so "nothing extra" is tested too. Deterministic in k.
class SyntheticVideo {
 public:
  // Throws std::invalid_argument unless 1 <= num_classes <= kMaxClasses, width >= 64 and
  // height >= 48 * num_classes (each lane must hold a box the engine can find at 640x640), and
  // both are <= course::kMaxImageDimension; with nv12, unless both are even.
  SyntheticVideo(int width, int height, int num_classes, FrameFormat format = FrameFormat::bgr);

  int width() const { return width_; }
  int height() const { return height_; }
  int num_classes() const { return num_classes_; }
  FrameFormat format() const { return format_; }
  // The bytes of one row of the frame's first plane (the pitch of a packed frame): 3 x width
  // for bgr, width for nv12.
  std::size_t row_bytes() const {
    return static_cast<std::size_t>(width_) * (format_ == FrameFormat::bgr ? 3 : 1);
  }
  // A packed frame: 3 x width x height bytes for bgr, 3 / 2 of width x height for nv12.
  std::size_t frame_bytes() const {
    return format_ == FrameFormat::bgr ? row_bytes() * height_ : row_bytes() * height_ * 3 / 2;
  }

  // The true boxes of frame k (k >= 0), in class order.
  std::vector<TruthBox> truth(std::int64_t frame) const;
  // Draws frame k into dst in the video's format: row y of the first plane at dst + y * pitch
  // (pitch >= row_bytes()); with nv12, chroma row r at dst + (height + r) * pitch. Returns
  // truth(frame). The whole frame: the background is one memcpy per row from a precomputed
  // image (about one frame-sized copy, 6.2 MB of BGR at 1080p), then the boxes (nv12: each
  // box's Y rectangle, and the U V of every 2x2 block it touches). Throws
  // std::invalid_argument for a null dst or a pitch below row_bytes().
  std::vector<TruthBox> render(std::int64_t frame, std::uint8_t* dst, std::size_t pitch) const;
  // The same frame, drawn into a buffer that already holds frame `previous` of this video (as
  // render or update left it, same pitch): the background goes back under previous's boxes and
  // frame k's boxes are drawn, so only the pixels that change are written (the boxes of a
  // 1080p frame with 4 classes cover about 8% of it, so old and new about 17%), as a camera's
  // frame buffer or a decoder's reference frame is updated rather than rebuilt. previous = -1: the
  // buffer holds anything, and the whole frame is drawn (render). The result equals render(frame,
  // ...) byte for byte. Returns truth(frame). Throws as render does, and std::invalid_argument for
  // previous < -1.
  std::vector<TruthBox> update(std::int64_t frame, std::int64_t previous, std::uint8_t* dst,
                               std::size_t pitch) const;

 private:
  // Copies the background into the rectangles of `boxes` (nv12: their chroma blocks too), or
  // paints them in their class colours.
  void restore_boxes(const std::vector<TruthBox>& boxes, std::uint8_t* dst,
                     std::size_t pitch) const;
  void draw_boxes(const std::vector<TruthBox>& boxes, std::uint8_t* dst, std::size_t pitch) const;
  int width_, height_, num_classes_;
  FrameFormat format_;
  std::vector<std::uint8_t> background_;  // the background in the video's format, packed
  std::uint8_t yuv_[kMaxClasses][3]{};    // nv12: each class colour's Y, U, V
};

// ------------------------------------------------------------------ back-pressure and slots

// What the producer does when every slot is taken: wait for a worker (a file or a recorded
// stream: no frame may be lost), or reuse the oldest frame nobody has started (live video: a
// stale frame is worth less than a fresh one). Dropped frames are counted and listed.
enum class Backpressure { block, drop_oldest };
const char* to_string(Backpressure policy);

// EXERCISE 1. The dynamic batcher's decision: how many frames a worker takes now (0: keep
// waiting). `queued` frames are ready, the oldest has waited `oldest_wait_us`; the worker runs
// batches of at most `max_batch`, and no frame should wait longer than `max_wait_us` for its
// batch to fill. `closing`: no more frames will come.
//   - nothing queued: 0;
//   - a full batch is ready: max_batch;
//   - the oldest frame has waited max_wait_us or longer, or closing: all queued (<= max_batch);
//   - otherwise 0 (wait for more frames or for the deadline).
// max_wait_us = 0 therefore takes whatever is there at once. Preconditions (not checked, it is
// called under the ring's lock): queued >= 0, max_batch >= 1, max_wait_us >= 0.
int batch_to_take(int queued, double oldest_wait_us, int max_batch, double max_wait_us,
                  bool closing);

// The state of the pinned-slot ring (the buffers themselves belong to the pipeline). Thread-safe.
//   producer:  s = acquire();  draw into slot s;  publish(s, frame, captured)
//   worker:    slots = take(max_batch, max_wait_us, poll);  enqueue the H2D copies;
//              after the copies' event has completed: release(each slot)
// A slot is never handed to the producer while a worker holds it (taken, not yet released): the
// GPU may still be copying out of it. That is the whole point of the event wait before release.
class SlotRing {
 public:
  enum class State { free, writing, filled, in_flight };
  struct Taken {
    int slot;
    std::int64_t frame;
    Clock::time_point captured;
  };

  // Throws std::invalid_argument unless depth >= 1.
  SlotRing(int depth, Backpressure policy);

  // Producer. A free slot (state -> writing); with drop_oldest and none free, the oldest filled
  // slot, whose frame is counted as dropped; otherwise blocks. nullopt once close() or abort()
  // was called.
  std::optional<int> acquire();
  // Producer: slot (writing) now holds `frame`, captured at `captured` (state -> filled).
  // Throws std::logic_error if the slot is not in state writing.
  void publish(int slot, std::int64_t frame, Clock::time_point captured);
  // Producer: no more frames. Workers drain what is filled, then take() returns empty.
  void close();
  // Anyone: stop now (a failure). Every wait returns; acquire gives nullopt, take empty.
  void abort();

  // Worker. Waits at most `poll` for batch_to_take(...) to say go, then returns those frames
  // (oldest first; state -> in_flight). Empty when nothing was ready within `poll`, or at the
  // end (check finished()).
  std::vector<Taken> take(int max_batch, double max_wait_us, std::chrono::microseconds poll);
  // Worker: the GPU is done reading the slot (state in_flight -> free). Throws std::logic_error
  // if the slot is not in flight.
  void release(int slot);

  // True once closed (or aborted) and nothing is filled: a worker may leave.
  bool finished() const;
  bool aborted() const;
  std::vector<std::int64_t> dropped() const;  // frames dropped by drop_oldest, in drop order
  State state(int slot) const;
  int depth() const { return static_cast<int>(slots_.size()); }

 private:
  struct Slot {
    State state = State::free;
    std::int64_t frame = -1;
    std::uint64_t sequence = 0;  // publish order
    Clock::time_point captured{};
  };
  int oldest_filled_locked() const;  // -1 if none
  int count_filled_locked() const;

  Backpressure policy_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Slot> slots_;
  std::vector<std::int64_t> dropped_;
  std::uint64_t next_sequence_ = 0;
  bool closed_ = false, aborted_ = false;
};

// EXERCISE 3. The slot-reuse wait. A worker has enqueued the H2D copies of `slots` on a stream
// and recorded `copied` after them; the producer may overwrite those pinned slots only once the
// copy engine has read them. Wait for the event (cudaEventSynchronize), then ring.release each
// slot. Releasing before the wait is the race the tests catch (test_skip_slot_wait); waiting for
// the whole stream or device instead also waits for the engine queued after the copies, which a
// test catches too. Throws course::CudaError if the wait reports an error (the slots stay in
// flight).
void release_after_copy(SlotRing& ring, const std::vector<int>& slots, cudaEvent_t copied);

// EXERCISE 4. The batch's event protocol between the copy stream and the compute stream. A
// worker has queued the H2D copies of a batch on `copy` and nothing after them yet; `work(s)`
// enqueues the batch's device work (letterbox, engine, postprocess and the D2H of its results,
// or the CUDA graph of them) on the stream s it is given. Records `copied` on `copy` after the
// copies (release_after_copy waits for it), makes the work on `compute` start only after it
// without this thread waiting (the GPU waits), calls work(compute), then records `done` on
// `compute` (the worker reads the results and reuses the batch's buffers once it completes).
// Returns without waiting for the GPU. `copy` and `compute` may be the same stream (no copy
// stream). Throws course::CudaError for a failed call; an exception from work propagates
// (`done` is then not recorded).
void enqueue_after_copy(cudaStream_t copy, cudaStream_t compute, cudaEvent_t copied,
                        cudaEvent_t done, const std::function<void(cudaStream_t)>& work);

// EXERCISE 2. Per-thread device binding: a worker thread calls this first, before it creates a
// stream or allocates anything. The current device is per host thread (Programming Guide,
// "Device Selection"): a new thread starts on device 0, so a worker for GPU 1 that forgets this
// allocates on GPU 0 and its stream and buffers fail with "invalid resource handle" or worse.
// cudaSetDevice(device), then confirm with cudaGetDevice. Throws std::invalid_argument for a
// negative ordinal (before any CUDA call; its message contains ">= 0", which the test checks),
// course::CudaError if the runtime refuses: an ordinal past the last device reaches
// cudaSetDevice, whose cudaErrorInvalidDevice is the CudaError's code() (the test checks it).
void bind_worker_device(int device);

// ------------------------------------------------------------------------------ configuration

// The network input a letterbox writes and an engine reads: [batch, 3, height, width] float.
struct TensorShape {
  int batch = 1, channels = 3, height = 640, width = 640;
};

struct PipelineConfig {
  int workers = 2;              // worker threads, each with its own streams, buffers, engine
  std::vector<int> devices{0};  // worker i binds devices[i % size] (cudaSetDevice)
  int batch = 1;                // frames per engine call, at most (dynamic batching below)
  double max_wait_us = 0;       // a batch waits at most this long to fill (0: take what's there)
  int queue_depth = 8;          // pinned host slots in the ring
  int inflight = 2;             // batches in flight per worker (buffer sets): 1 or 2
  bool copy_stream = true;      // H2D on a stream of its own (overlaps the previous batch)
  int frame_width = 1920, frame_height = 1080;  // the camera's frames, BGR uint8
  // A camera whose resolution changes mid-stream (a decoder reconfigured, a source switched):
  // frames >= resize_at are resize_width x resize_height. -1: never. Workers learn the new size
  // from the frame itself: new postprocess letterboxes, and with graphs a re-capture
  // (cudaGraphExecUpdate into the executable graph, re-instantiated if the update is refused).
  std::int64_t resize_at = -1;
  int resize_width = 1280, resize_height = 720;
  int input_width = 640, input_height = 640;  // the network input
  // The input tensor's element type, which the engine's input binding fixes (EngineSpec): f16,
  // what an engine built in FP16 takes (the letterbox writes half the bytes and the engine reads
  // half), or f32.
  lesson08::DType input_dtype = lesson08::DType::f16;
  int num_classes = 4;
  // The camera's frames: bgr, or nv12 as a hardware decoder writes them (half the bytes to
  // upload; lesson 06's NV12 letterbox converts the colours on the GPU).
  FrameFormat format = FrameFormat::bgr;
  std::int64_t frames = 1000;  // frames the producer sends
  double rate_fps = 0;         // open loop at this rate; 0: closed loop (as fast as possible)
  Backpressure backpressure = Backpressure::block;
  bool graphs = false;  // replay letterbox + engine + postprocess as a CUDA graph
  bool warmup = true;   // one batch of every size through each worker before serving
  bool trace = false;   // time every stage with events (for the timeline and JSON)
  // A worker's waits (the copies' event before a slot release, a batch's `done`) sleep instead
  // of spinning: its events are made with cudaEventBlockingSync (the per-event form of
  // cudaDeviceScheduleBlockingSync). Less CPU per frame, a later wake-up.
  bool blocking_sync = false;
  // Slots go back to the producer from a host function on the copy stream (cudaLaunchHostFunc,
  // run by the driver's thread once the copies are done) instead of the worker waiting for the
  // copies' event (exercise 3's release_after_copy), so the worker never blocks on the copy.
  // Without copy_stream the host function follows the batch's work on the one stream, so the
  // slots come back later than with the event wait.
  bool release_by_callback = false;
  lesson08::PostprocessConfig post{};
  // Called once, on run_pipeline's thread, when every worker has warmed up, before serving and
  // its clock (RunReport::wall_s) start; may block, and an exception from it ends the run (it
  // propagates from run_pipeline after every thread is joined). Lesson 11 lines up replicas on
  // several GPUs here, so that they serve together and no replica's setup is timed. Empty: none.
  std::function<void()> before_serving;
  // Test only: release a slot as soon as its copy is ENQUEUED, not when its event completes.
  // The race the event wait prevents; a test proves that the checks catch it.
  bool test_skip_slot_wait = false;
  // Test only: with graphs, the batch that holds this frame launches an executable graph that
  // was never instantiated (a null cudaGraphExec_t), so cudaGraphLaunch fails: the path of a
  // graph launch the runtime refuses. -1: never.
  std::int64_t test_fail_graph_launch_at = -1;
};

// Throws std::invalid_argument, saying what was expected, for: workers < 1 or > 64, no devices
// or a negative ordinal, batch < 1 or > 32 (lesson 06's batched letterbox limit), max_wait_us
// < 0 or not finite, queue_depth < batch (a batch could never fill... and < 1), inflight not 1
// or 2, a frame, resize or input size outside [1, kMaxImageDimension] (or a frame too small for
// the synthetic video), resize_at < -1, num_classes outside [1, kMaxClasses], frames < 0,
// rate_fps < 0 or not finite, an nv12 frame or resize size that is not even, an input_dtype
// other than f32 or f16, and a postprocess config lesson 08's validate() rejects or whose NMS
// is not greedy (v2 or v3: the batched postprocess's).
void validate(const PipelineConfig& config);

// The frame size of frame k of a run: frame_width x frame_height, or the resize size from
// frame resize_at on.
struct FrameSize {
  int width = 0, height = 0;
  FrameFormat format = FrameFormat::bgr;
  std::size_t bytes() const {
    const std::size_t pixels = static_cast<std::size_t>(width) * height;
    return format == FrameFormat::bgr ? 3 * pixels : pixels * 3 / 2;
  }
  bool operator==(const FrameSize& o) const { return width == o.width && height == o.height; }
  bool operator!=(const FrameSize& o) const { return !(*this == o); }
};
FrameSize frame_size(const PipelineConfig& config, std::int64_t frame);
// The largest frame of a run, in bytes: what a pinned slot and a device frame buffer hold.
std::size_t max_frame_bytes(const PipelineConfig& config);

// The camera of a run: its SyntheticVideo, and from resize_at on a second one at the new size.
// video(k) draws and knows the truth of frame k. Throws as SyntheticVideo does.
class Camera {
 public:
  explicit Camera(const PipelineConfig& config);
  const SyntheticVideo& video(std::int64_t frame) const {
    return resize_at_ >= 0 && frame >= resize_at_ && after_ ? *after_ : before_;
  }

 private:
  SyntheticVideo before_;
  std::optional<SyntheticVideo> after_;
  std::int64_t resize_at_;
};

// Throws std::invalid_argument unless an engine of input shape `engine` can serve `config`:
// batch >= config.batch, 3 channels, height and width equal to the config's input size.
void validate_engine_shape(const PipelineConfig& config, const TensorShape& engine);

// Throws std::invalid_argument unless every ordinal in config.devices names one of the
// `device_count` devices there are (cudaGetDeviceCount()), with a message that names the bad
// ordinal and the valid range: "... device ordinal 2 is out of range: cudaGetDeviceCount() = 2,
// the valid ordinals are 0 to 1". run_pipeline, run_serial_tutorial and measure_gpu_us_per_frame
// call it after validate() (which needs no GPU), before any thread starts: a worker would
// otherwise meet cudaErrorInvalidDevice in cudaSetDevice, on its own thread.
void validate_devices(const PipelineConfig& config, int device_count);

// -------------------------------------------------------------------------------- statistics

// Nearest-rank percentiles of a sample (the p-th percentile is the ceil(p n / 100)-th smallest),
// in the sample's unit. count 0 and zeros for an empty sample.
struct LatencySummary {
  std::size_t count = 0;
  double p50 = 0, p90 = 0, p99 = 0, max = 0, mean = 0;
};
LatencySummary summarize(std::vector<double> sample);
// One nearest-rank percentile; throws std::invalid_argument for an empty sample or p outside
// [0, 100] (p = 0 gives the minimum).
double percentile(std::vector<double> sample, double p);

// ------------------------------------------------------------------------------------ bounds

// What each stage could sustain alone, frames per second. The stages run concurrently on
// different engines (copy engine, SMs, CPU), so the pipeline can at best run at the slowest:
//   upload: the PCIe copy engine, frame_bytes at the measured pinned H2D bandwidth
//   gpu:    the SMs, one frame's measured GPU busy time (letterbox + engine + postprocess)
//   host:   the CPU work per frame that cannot overlap with itself (the producer's drawing)
struct StageRates {
  double upload_fps = 0, gpu_fps = 0, host_fps = 0;
};
struct Bound {
  std::string stage;  // "upload", "gpu" or "host"
  double fps = 0;
};
// Throws std::invalid_argument unless every rate is > 0 and finite.
Bound bound_of(const StageRates& rates);
// frames/s a stage sustains: 1e6 / us_per_frame; throws unless us_per_frame > 0 and finite.
double fps_from_us(double us_per_frame);
// frames/s of `bytes` per frame at `gbps` (1e9 bytes/s); throws unless both > 0 and finite.
double fps_from_bandwidth(double gbps, std::size_t bytes);
// 100 * fps / bound.fps.
double percent_of_bound(double fps, const Bound& bound);

// ------------------------------------------------------------------------------------ timeline

// One bar of the timeline: a stage of one batch, on one worker's lane, in microseconds since
// the run started (host steady clock).
struct TraceEvent {
  std::string name;  // "H2D", "letterbox", "engine", "postprocess+D2H", "produce", ...
  int worker = 0;    // the lane: -1 for the producer
  double start_us = 0, duration_us = 0;
  std::int64_t first_frame = -1;
  int frames = 0;
};
// The Chrome trace-event format (JSON object format, "X" complete events, ts/dur in us; one
// thread per worker, named), which chrome://tracing and ui.perfetto.dev open.
std::string chrome_trace_json(const std::vector<TraceEvent>& events);

// ------------------------------------------------------------------------------------ checks

// One frame's detections against its truth: every true box matched by exactly one detection of
// its class with IoU >= min_iou (lesson 08's iou, source pixels), and no other detection.
// Returns "" when right, otherwise what is wrong (for the test's message).
std::string check_frame(const std::vector<TruthBox>& truth,
                        const std::vector<lesson08::Detection>& detections, double min_iou = 0.9);

}  // namespace lesson09
