// Lesson 09: the host half of the pipeline (pipeline_host.hpp). No CUDA here but lesson 08's IoU.
#include "pipeline_host.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <limits>
#include <sstream>
#include <stdexcept>

namespace lesson09 {

// --------------------------------------------------------------------------- synthetic video

Bgr class_colour(int class_id) {
  // Saturated colours: each has a channel >= 220 where the background (<= 63) and the padding
  // (114) are far, and any two differ by >= 170 in some channel.
  static const Bgr palette[kMaxClasses] = {
      {40, 40, 230},   // red
      {40, 220, 40},   // green
      {230, 60, 40},   // blue
      {40, 220, 230},  // yellow
      {220, 40, 220},  // magenta
      {230, 230, 40},  // cyan
  };
  if (class_id < 0 || class_id >= kMaxClasses) {
    throw std::invalid_argument("class_colour: class must be in [0, " +
                                std::to_string(kMaxClasses) + "), got " + std::to_string(class_id));
  }
  return palette[class_id];
}

const char* to_string(FrameFormat format) {
  return format == FrameFormat::bgr ? "BGR" : "NV12";
}

namespace {
// BT.601 limited range, RGB -> Y, U, V rounded to nearest (the inverse of lesson 06's NV12
// conversion: Y = 16 + 219 luma, U and V = 128 + 224 x the colour differences' ranges).
void bgr_to_yuv(double b, double g, double r, std::uint8_t out[3]) {
  const double y = 16.0 + (65.481 * r + 128.553 * g + 24.966 * b) / 255.0;
  const double u = 128.0 + (-37.797 * r - 74.203 * g + 112.0 * b) / 255.0;
  const double v = 128.0 + (112.0 * r - 93.786 * g - 18.214 * b) / 255.0;
  for (const auto& [i, x] : {std::pair{0, y}, std::pair{1, u}, std::pair{2, v}}) {
    out[i] = static_cast<std::uint8_t>(std::clamp(std::lround(x), 0L, 255L));
  }
}
}  // namespace

SyntheticVideo::SyntheticVideo(int width, int height, int num_classes, FrameFormat format)
    : width_(width), height_(height), num_classes_(num_classes), format_(format) {
  if (num_classes < 1 || num_classes > kMaxClasses) {
    throw std::invalid_argument("SyntheticVideo: num_classes must be in [1, " +
                                std::to_string(kMaxClasses) + "], got " +
                                std::to_string(num_classes));
  }
  if (width < 64 || height < 48 * num_classes || width > course::kMaxImageDimension ||
      height > course::kMaxImageDimension) {
    throw std::invalid_argument(
        "SyntheticVideo: expected width in [64, " + std::to_string(course::kMaxImageDimension) +
        "] and height in [48 x num_classes = " + std::to_string(48 * num_classes) + ", " +
        std::to_string(course::kMaxImageDimension) + "], got " + std::to_string(width) + "x" +
        std::to_string(height));
  }
  if (format == FrameFormat::nv12 && (width % 2 != 0 || height % 2 != 0)) {
    throw std::invalid_argument("SyntheticVideo: NV12 frames need an even width and height, got " +
                                std::to_string(width) + "x" + std::to_string(height));
  }
  std::vector<std::uint8_t> bgr(static_cast<std::size_t>(width) * height * 3);
  for (int y = 0; y < height; ++y) {
    std::uint8_t* row = bgr.data() + static_cast<std::size_t>(y) * width * 3;
    for (int x = 0; x < width; ++x) {
      row[3 * x + 0] = static_cast<std::uint8_t>(16 + (x * 7 + y * 3) % 48);
      row[3 * x + 1] = static_cast<std::uint8_t>(16 + (x * 5 + y * 11) % 48);
      row[3 * x + 2] = static_cast<std::uint8_t>(16 + (x * 3 + y * 7) % 48);
    }
  }
  if (format == FrameFormat::bgr) {
    background_ = std::move(bgr);
    return;
  }
  // NV12: each pixel's Y; each 2x2 block's U and V from the block's mean colour.
  background_.resize(frame_bytes());
  const std::size_t w = static_cast<std::size_t>(width);
  std::uint8_t* uv_plane = background_.data() + w * height;
  for (int y = 0; y < height; y += 2) {
    for (int x = 0; x < width; x += 2) {
      double mean[3] = {0, 0, 0};
      for (int dy = 0; dy < 2; ++dy) {
        for (int dx = 0; dx < 2; ++dx) {
          const std::uint8_t* p = bgr.data() + ((y + dy) * w + x + dx) * 3;
          std::uint8_t yuv[3];
          bgr_to_yuv(p[0], p[1], p[2], yuv);
          background_[(y + dy) * w + x + dx] = yuv[0];
          for (int c = 0; c < 3; ++c) mean[c] += 0.25 * p[c];
        }
      }
      std::uint8_t yuv[3];
      bgr_to_yuv(mean[0], mean[1], mean[2], yuv);
      uv_plane[(y / 2) * w + x] = yuv[1];
      uv_plane[(y / 2) * w + x + 1] = yuv[2];
    }
  }
  for (int c = 0; c < num_classes; ++c) {
    const Bgr k = class_colour(c);
    bgr_to_yuv(k.b, k.g, k.r, yuv_[c]);
  }
}

std::vector<TruthBox> SyntheticVideo::truth(std::int64_t frame) const {
  if (frame < 0) throw std::invalid_argument("SyntheticVideo::truth: frame must be >= 0");
  std::vector<TruthBox> boxes;
  const int lane = height_ / num_classes_;
  for (int c = 0; c < num_classes_; ++c) {
    if ((frame + 3 * c) % 11 == 5) continue;  // absent from this frame
    const std::int64_t k = frame;
    const int w = std::max<int>(
        24, width_ * (10 + 2 * c) / 100 + static_cast<int>((k * 3 + 17 * c) % (width_ / 20 + 1)));
    const int h =
        std::max<int>(24, lane * 55 / 100 + static_cast<int>((k * 2 + 11 * c) % (lane / 10 + 1)));
    const int travel = std::max(1, width_ - w);
    // Fast enough (W / 80 + 7c px per frame, 24+ at 1080p) that a box two frames apart has IoU
    // well below 0.9 with this one: a frame copied from the wrong slot cannot pass the checks.
    const std::int64_t speed = width_ / 80 + 7 * c;
    const int pos = static_cast<int>((k * speed + 97 * c) % (2 * travel));
    const int x1 = pos < travel ? pos : 2 * travel - pos;
    const int bob = static_cast<int>((k + 5 * c) % 9) - 4;
    const int y1 = std::clamp(c * lane + (lane - h) / 2 + bob, c * lane, (c + 1) * lane - h);
    boxes.push_back({c, Box{static_cast<float>(x1), static_cast<float>(y1),
                            static_cast<float>(x1 + w), static_cast<float>(y1 + h)}});
  }
  return boxes;
}

std::vector<TruthBox> SyntheticVideo::render(std::int64_t frame, std::uint8_t* dst,
                                             std::size_t pitch) const {
  return update(frame, -1, dst, pitch);
}

std::vector<TruthBox> SyntheticVideo::update(std::int64_t frame, std::int64_t previous,
                                             std::uint8_t* dst, std::size_t pitch) const {
  if (dst == nullptr || pitch < row_bytes()) {
    throw std::invalid_argument(
        std::string("SyntheticVideo::") + (previous == -1 ? "render" : "update") +
        ": expected a destination with pitch >= " + std::to_string(row_bytes()) + " bytes");
  }
  if (previous < -1) {
    throw std::invalid_argument(
        "SyntheticVideo::update: previous must be a frame >= 0, or -1 for a buffer that holds "
        "no frame of this video; got " +
        std::to_string(previous));
  }
  std::vector<TruthBox> boxes = truth(frame);
  const std::size_t rows =
      format_ == FrameFormat::bgr ? height_ : static_cast<std::size_t>(height_) * 3 / 2;
  if (previous < 0) {
    if (pitch == row_bytes()) {
      std::memcpy(dst, background_.data(), background_.size());
    } else {
      for (std::size_t y = 0; y < rows; ++y) {
        std::memcpy(dst + y * pitch, background_.data() + y * row_bytes(), row_bytes());
      }
    }
  } else {
    // Only the rectangles the previous frame painted differ from the background.
    restore_boxes(truth(previous), dst, pitch);
  }
  draw_boxes(boxes, dst, pitch);
  return boxes;
}

namespace {
// The pixel rectangles a box covers in each plane: {first byte, bytes, first row, end row}.
// bgr: one; nv12: its Y rectangle, then the chroma rows of every 2x2 block it touches (offset by
// the Y plane's height, in rows of the same pitch).
struct PlaneRect {
  std::size_t byte0, bytes;
  int row0, row1;
  int plane;  // 0: Y (or BGR), 1: U V
};
std::vector<PlaneRect> plane_rects(const Box& b, FrameFormat format) {
  const int x1 = static_cast<int>(b.x1), x2 = static_cast<int>(b.x2);
  const int y1 = static_cast<int>(b.y1), y2 = static_cast<int>(b.y2);
  if (format == FrameFormat::bgr) {
    return {{3 * static_cast<std::size_t>(x1), 3 * static_cast<std::size_t>(x2 - x1), y1, y2, 0}};
  }
  const int cx1 = x1 / 2, cx2 = (x2 + 1) / 2;  // the chroma blocks it touches
  return {{static_cast<std::size_t>(x1), static_cast<std::size_t>(x2 - x1), y1, y2, 0},
          {2 * static_cast<std::size_t>(cx1), 2 * static_cast<std::size_t>(cx2 - cx1), y1 / 2,
           (y2 + 1) / 2, 1}};
}
}  // namespace

void SyntheticVideo::restore_boxes(const std::vector<TruthBox>& boxes, std::uint8_t* dst,
                                   std::size_t pitch) const {
  for (const TruthBox& t : boxes) {
    for (const PlaneRect& r : plane_rects(t.box, format_)) {
      const int row_offset = r.plane == 0 ? 0 : height_;
      for (int y = r.row0; y < r.row1; ++y) {
        const std::size_t row = static_cast<std::size_t>(y + row_offset);
        std::memcpy(dst + row * pitch + r.byte0, background_.data() + row * row_bytes() + r.byte0,
                    r.bytes);
      }
    }
  }
}

void SyntheticVideo::draw_boxes(const std::vector<TruthBox>& boxes, std::uint8_t* dst,
                                std::size_t pitch) const {
  std::vector<std::uint8_t> row;  // one row of a box's rectangle, copied into each of its rows
  for (const TruthBox& t : boxes) {
    const Bgr colour = class_colour(t.class_id);
    for (const PlaneRect& r : plane_rects(t.box, format_)) {
      row.resize(r.bytes);
      if (format_ == FrameFormat::bgr) {
        for (std::size_t i = 0; i + 2 < row.size(); i += 3) {
          row[i + 0] = colour.b;
          row[i + 1] = colour.g;
          row[i + 2] = colour.r;
        }
      } else if (r.plane == 0) {
        std::fill(row.begin(), row.end(), yuv_[t.class_id][0]);
      } else {
        for (std::size_t i = 0; i + 1 < row.size(); i += 2) {
          row[i + 0] = yuv_[t.class_id][1];
          row[i + 1] = yuv_[t.class_id][2];
        }
      }
      const int row_offset = r.plane == 0 ? 0 : height_;
      for (int y = r.row0; y < r.row1; ++y) {
        std::memcpy(dst + static_cast<std::size_t>(y + row_offset) * pitch + r.byte0, row.data(),
                    row.size());
      }
    }
  }
}

// ------------------------------------------------------------------ back-pressure and slots

const char* to_string(Backpressure policy) {
  return policy == Backpressure::block ? "block" : "drop-oldest";
}

SlotRing::SlotRing(int depth, Backpressure policy) : policy_(policy) {
  if (depth < 1) {
    throw std::invalid_argument("SlotRing: depth must be >= 1, got " + std::to_string(depth));
  }
  slots_.resize(static_cast<std::size_t>(depth));
}

int SlotRing::oldest_filled_locked() const {
  int best = -1;
  for (int i = 0; i < depth(); ++i) {
    if (slots_[i].state == State::filled &&
        (best < 0 || slots_[i].sequence < slots_[best].sequence)) {
      best = i;
    }
  }
  return best;
}

int SlotRing::count_filled_locked() const {
  return static_cast<int>(std::count_if(slots_.begin(), slots_.end(),
                                        [](const Slot& s) { return s.state == State::filled; }));
}

std::optional<int> SlotRing::acquire() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    if (aborted_ || closed_) return std::nullopt;
    for (int i = 0; i < depth(); ++i) {
      if (slots_[i].state == State::free) {
        slots_[i].state = State::writing;
        return i;
      }
    }
    if (policy_ == Backpressure::drop_oldest) {
      const int oldest = oldest_filled_locked();
      if (oldest >= 0) {  // nobody has started it: the frame is dropped, counted, listed
        dropped_.push_back(slots_[oldest].frame);
        slots_[oldest].state = State::writing;
        slots_[oldest].frame = -1;
        return oldest;
      }
    }
    changed_.wait(lock);  // all slots in flight (or being written): wait for a release
  }
}

void SlotRing::publish(int slot, std::int64_t frame, Clock::time_point captured) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (slot < 0 || slot >= depth() || slots_[slot].state != State::writing) {
      throw std::logic_error("SlotRing::publish: slot " + std::to_string(slot) +
                             " is not being written");
    }
    Slot& s = slots_[slot];
    s.state = State::filled;
    s.frame = frame;
    s.captured = captured;
    s.sequence = next_sequence_++;
  }
  changed_.notify_all();
}

void SlotRing::close() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
  }
  changed_.notify_all();
}

void SlotRing::abort() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    aborted_ = true;
  }
  changed_.notify_all();
}

std::vector<SlotRing::Taken> SlotRing::take(int max_batch, double max_wait_us,
                                            std::chrono::microseconds poll) {
  std::unique_lock<std::mutex> lock(mutex_);
  const Clock::time_point deadline = Clock::now() + poll;
  for (;;) {
    if (aborted_) return {};
    const int queued = count_filled_locked();
    if (closed_ && queued == 0) return {};
    const Clock::time_point now = Clock::now();
    const int oldest = oldest_filled_locked();
    const double waited_us =
        oldest < 0
            ? 0.0
            : std::chrono::duration<double, std::micro>(now - slots_[oldest].captured).count();
    const int n = batch_to_take(queued, waited_us, max_batch, max_wait_us, closed_);
    if (n > 0) {
      std::vector<Taken> taken;
      for (int i = 0; i < n; ++i) {
        const int s = oldest_filled_locked();
        slots_[s].state = State::in_flight;
        taken.push_back({s, slots_[s].frame, slots_[s].captured});
      }
      return taken;
    }
    if (now >= deadline) return {};
    Clock::time_point wake = deadline;
    if (oldest >= 0) {
      const auto due =
          slots_[oldest].captured + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double, std::micro>(max_wait_us));
      wake = std::min(wake, std::max(due, now));
    }
    changed_.wait_until(lock, wake);
  }
}

void SlotRing::release(int slot) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (slot < 0 || slot >= depth() || slots_[slot].state != State::in_flight) {
      throw std::logic_error("SlotRing::release: slot " + std::to_string(slot) +
                             " is not in flight");
    }
    slots_[slot].state = State::free;
    slots_[slot].frame = -1;
  }
  changed_.notify_all();
}

bool SlotRing::finished() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return aborted_ || (closed_ && count_filled_locked() == 0);
}

bool SlotRing::aborted() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return aborted_;
}

std::vector<std::int64_t> SlotRing::dropped() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return dropped_;
}

SlotRing::State SlotRing::state(int slot) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (slot < 0 || slot >= depth()) {
    throw std::invalid_argument("SlotRing::state: no slot " + std::to_string(slot));
  }
  return slots_[slot].state;
}

// ------------------------------------------------------------------------------ configuration

namespace {

void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("PipelineConfig: " + what);
}

std::string size_text(int w, int h) {
  return std::to_string(w) + "x" + std::to_string(h);
}

}  // namespace

void validate(const PipelineConfig& c) {
  require(c.workers >= 1 && c.workers <= 64,
          "workers must be in [1, 64], got " + std::to_string(c.workers));
  require(!c.devices.empty(), "devices must name at least one GPU ordinal");
  for (int d : c.devices) {
    require(d >= 0, "device ordinals must be >= 0 (valid: 0 to cudaGetDeviceCount() - 1), got " +
                        std::to_string(d));
  }
  require(
      c.batch >= 1 && c.batch <= 32,
      "batch must be in [1, 32] (lesson 06's batched letterbox), got " + std::to_string(c.batch));
  require(std::isfinite(c.max_wait_us) && c.max_wait_us >= 0,
          "max_wait_us must be finite and >= 0, got " + std::to_string(c.max_wait_us));
  require(c.queue_depth >= 1, "queue_depth must be >= 1, got " + std::to_string(c.queue_depth));
  require(c.queue_depth >= c.batch, "queue_depth (" + std::to_string(c.queue_depth) +
                                        ") must be >= batch (" + std::to_string(c.batch) +
                                        "), or a batch could never fill");
  require(c.inflight == 1 || c.inflight == 2,
          "inflight must be 1 or 2, got " + std::to_string(c.inflight));
  const int max_dim = course::kMaxImageDimension;
  require(c.frame_width >= 1 && c.frame_height >= 1 && c.frame_width <= max_dim &&
              c.frame_height <= max_dim,
          "frame size must be in [1, " + std::to_string(max_dim) + "] per side, got " +
              size_text(c.frame_width, c.frame_height));
  require(c.resize_at >= -1,
          "resize_at must be >= 0 (the first frame of the new size) or -1 (never), got " +
              std::to_string(c.resize_at));
  if (c.resize_at >= 0) {
    require(c.resize_width >= 1 && c.resize_height >= 1 && c.resize_width <= max_dim &&
                c.resize_height <= max_dim,
            "resize size must be in [1, " + std::to_string(max_dim) + "] per side, got " +
                size_text(c.resize_width, c.resize_height));
  }
  require(c.input_width >= 1 && c.input_height >= 1 && c.input_width <= max_dim &&
              c.input_height <= max_dim,
          "input size must be in [1, " + std::to_string(max_dim) + "] per side, got " +
              size_text(c.input_width, c.input_height));
  require(c.num_classes >= 1 && c.num_classes <= kMaxClasses,
          "num_classes must be in [1, " + std::to_string(kMaxClasses) + "], got " +
              std::to_string(c.num_classes));
  require(c.format == FrameFormat::bgr ||
              (c.frame_width % 2 == 0 && c.frame_height % 2 == 0 &&
               (c.resize_at < 0 || (c.resize_width % 2 == 0 && c.resize_height % 2 == 0))),
          "NV12 frames need an even width and height (each 2x2 block shares its U and V), got " +
              size_text(c.frame_width, c.frame_height) +
              (c.resize_at >= 0 ? " and " + size_text(c.resize_width, c.resize_height) : ""));
  require(c.input_dtype == lesson08::DType::f32 || c.input_dtype == lesson08::DType::f16,
          "input_dtype must be f32 or f16");
  require(c.post.nms != lesson08::NmsVersion::v1_fast_parallel,
          "post.nms must be greedy (v2_bitmask_greedy or v3_bitmask_smem): the workers run "
          "lesson 08's batched postprocess, which has no v1");
  require(c.frames >= 0, "frames must be >= 0, got " + std::to_string(c.frames));
  require(std::isfinite(c.rate_fps) && c.rate_fps >= 0,
          "rate_fps must be finite and >= 0 (0: closed loop), got " + std::to_string(c.rate_fps));
  try {
    SyntheticVideo(c.frame_width, c.frame_height, c.num_classes);
    if (c.resize_at >= 0) SyntheticVideo(c.resize_width, c.resize_height, c.num_classes);
    lesson08::validate(c.post);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("PipelineConfig: ") + e.what());
  }
}

FrameSize frame_size(const PipelineConfig& c, std::int64_t frame) {
  if (c.resize_at >= 0 && frame >= c.resize_at) return {c.resize_width, c.resize_height, c.format};
  return {c.frame_width, c.frame_height, c.format};
}

std::size_t max_frame_bytes(const PipelineConfig& c) {
  const std::size_t before = FrameSize{c.frame_width, c.frame_height, c.format}.bytes();
  return c.resize_at >= 0
             ? std::max(before, FrameSize{c.resize_width, c.resize_height, c.format}.bytes())
             : before;
}

Camera::Camera(const PipelineConfig& c)
    : before_(c.frame_width, c.frame_height, c.num_classes, c.format), resize_at_(c.resize_at) {
  if (c.resize_at >= 0) after_.emplace(c.resize_width, c.resize_height, c.num_classes, c.format);
}

void validate_engine_shape(const PipelineConfig& config, const TensorShape& e) {
  if (e.batch < config.batch || e.channels != 3 || e.height != config.input_height ||
      e.width != config.input_width) {
    throw std::invalid_argument(
        "engine input shape [" + std::to_string(e.batch) + ", " + std::to_string(e.channels) +
        ", " + std::to_string(e.height) + ", " + std::to_string(e.width) +
        "] does not match the pipeline: expected batch >= " + std::to_string(config.batch) +
        " and [*, 3, " + std::to_string(config.input_height) + ", " +
        std::to_string(config.input_width) + "]");
  }
}

void validate_devices(const PipelineConfig& config, int device_count) {
  require(device_count >= 1, "no CUDA device: cudaGetDeviceCount() = " +
                                 std::to_string(device_count) + ", so no device ordinal is valid");
  for (int d : config.devices) {
    require(d >= 0 && d < device_count,
            "device ordinal " + std::to_string(d) +
                " is out of range: cudaGetDeviceCount() = " + std::to_string(device_count) +
                ", the valid ordinals are 0 to " + std::to_string(device_count - 1));
  }
}

// -------------------------------------------------------------------------------- statistics

double percentile(std::vector<double> sample, double p) {
  if (sample.empty()) throw std::invalid_argument("percentile: empty sample");
  if (!(p >= 0.0 && p <= 100.0)) {
    throw std::invalid_argument("percentile: p must be in [0, 100], got " + std::to_string(p));
  }
  std::sort(sample.begin(), sample.end());
  const double rank = std::ceil(p / 100.0 * static_cast<double>(sample.size()));
  const std::size_t i = rank < 1.0 ? 0 : static_cast<std::size_t>(rank) - 1;
  return sample[std::min(i, sample.size() - 1)];
}

LatencySummary summarize(std::vector<double> sample) {
  LatencySummary s;
  s.count = sample.size();
  if (sample.empty()) return s;
  std::sort(sample.begin(), sample.end());
  s.p50 = percentile(sample, 50);
  s.p90 = percentile(sample, 90);
  s.p99 = percentile(sample, 99);
  s.max = sample.back();
  double sum = 0;
  for (double v : sample) sum += v;
  s.mean = sum / static_cast<double>(sample.size());
  return s;
}

// ------------------------------------------------------------------------------------ bounds

namespace {
void require_rate(double v, const char* what) {
  if (!(std::isfinite(v) && v > 0)) {
    throw std::invalid_argument(std::string(what) + " must be > 0 and finite, got " +
                                std::to_string(v));
  }
}
}  // namespace

double fps_from_us(double us_per_frame) {
  require_rate(us_per_frame, "fps_from_us: us_per_frame");
  return 1e6 / us_per_frame;
}

double fps_from_bandwidth(double gbps, std::size_t bytes) {
  require_rate(gbps, "fps_from_bandwidth: gbps");
  require_rate(static_cast<double>(bytes), "fps_from_bandwidth: bytes");
  return gbps * 1e9 / static_cast<double>(bytes);
}

Bound bound_of(const StageRates& r) {
  require_rate(r.upload_fps, "bound_of: upload_fps");
  require_rate(r.gpu_fps, "bound_of: gpu_fps");
  require_rate(r.host_fps, "bound_of: host_fps");
  Bound b{"upload", r.upload_fps};
  if (r.gpu_fps < b.fps) b = {"gpu", r.gpu_fps};
  if (r.host_fps < b.fps) b = {"host", r.host_fps};
  return b;
}

double percent_of_bound(double fps, const Bound& bound) {
  return 100.0 * fps / bound.fps;
}

// ------------------------------------------------------------------------------------ timeline

namespace {
std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", ch);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}
}  // namespace

std::string chrome_trace_json(const std::vector<TraceEvent>& events) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(3);
  o << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[";
  std::vector<int> lanes;
  for (const TraceEvent& e : events) {
    if (std::find(lanes.begin(), lanes.end(), e.worker) == lanes.end()) lanes.push_back(e.worker);
  }
  std::sort(lanes.begin(), lanes.end());
  bool first = true;
  for (int lane : lanes) {  // metadata: a readable name per lane
    o << (first ? "" : ",")
      << "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":" << lane + 1
      << ",\"args\":{\"name\":"
      << json_string(lane < 0 ? std::string("producer") : "worker " + std::to_string(lane)) << "}}";
    first = false;
  }
  for (const TraceEvent& e : events) {
    o << (first ? "" : ",") << "{\"name\":" << json_string(e.name)
      << ",\"ph\":\"X\",\"pid\":1,\"tid\":" << e.worker + 1 << ",\"ts\":" << e.start_us
      << ",\"dur\":" << e.duration_us << ",\"args\":{\"first_frame\":" << e.first_frame
      << ",\"frames\":" << e.frames << "}}";
    first = false;
  }
  o << "]}\n";
  return o.str();
}

// ------------------------------------------------------------------------------------ checks

std::string check_frame(const std::vector<TruthBox>& truth,
                        const std::vector<lesson08::Detection>& detections, double min_iou) {
  std::ostringstream why;
  std::vector<int> matched(truth.size(), 0);
  for (const lesson08::Detection& d : detections) {
    bool found = false;
    for (std::size_t t = 0; t < truth.size(); ++t) {
      if (truth[t].class_id == d.class_id && lesson08::iou(truth[t].box, d.box) >= min_iou) {
        ++matched[t];
        found = true;
      }
    }
    if (!found) {
      why << "extra or misplaced detection: class " << d.class_id << " (" << d.box.x1 << ", "
          << d.box.y1 << ", " << d.box.x2 << ", " << d.box.y2 << ") score " << d.score << "; ";
    }
  }
  for (std::size_t t = 0; t < truth.size(); ++t) {
    if (matched[t] != 1) {
      why << "true box of class " << truth[t].class_id << " (" << truth[t].box.x1 << ", "
          << truth[t].box.y1 << ", " << truth[t].box.x2 << ", " << truth[t].box.y2 << ") matched "
          << matched[t] << " times; ";
    }
  }
  return why.str();
}

}  // namespace lesson09

// The exercise solutions that are host code (batch_to_take): compiled here in the lesson build;
// the exercise build leaves them out and exercise.cu supplies them.
#ifndef LESSON_EXERCISE_BUILD
#include "solutions.cuh"
#endif
