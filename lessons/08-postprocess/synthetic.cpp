// Synthetic detector outputs (synthetic.hpp). Host code only.
#include "synthetic.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

namespace lesson08 {

namespace {

// IoU in double, for placing objects (not the code under test).
double iou_double(const Box& a, const Box& b) {
  const double iw = std::max(0.0, std::min<double>(a.x2, b.x2) - std::max<double>(a.x1, b.x1));
  const double ih = std::max(0.0, std::min<double>(a.y2, b.y2) - std::max<double>(a.y1, b.y1));
  const double inter = iw * ih;
  const double uni =
      double(a.x2 - a.x1) * (a.y2 - a.y1) + double(b.x2 - b.x1) * (b.y2 - b.y1) - inter;
  return uni > 0.0 ? inter / uni : 0.0;
}

float quarter(float v) {
  return std::round(v * 4.0f) / 4.0f;
}

// Where one candidate's values go in the tensor.
struct Writer {
  const OutputSpec& spec;
  std::vector<float>& out;

  // cx, cy, w, h (network-input pixels), objectness, and the class scores (num_classes values).
  void put(int slot, const Box& b, float objectness, const float* class_scores) const {
    const float cx = 0.5f * (b.x1 + b.x2), cy = 0.5f * (b.y1 + b.y2);
    const float w = b.x2 - b.x1, h = b.y2 - b.y1;
    const int C = spec.num_classes;
    if (spec.layout == Layout::yolov5) {
      float* row = out.data() + static_cast<std::size_t>(slot) * spec.attributes();
      row[0] = cx;
      row[1] = cy;
      row[2] = w;
      row[3] = h;
      row[4] = objectness;
      for (int c = 0; c < C; ++c) row[5 + c] = class_scores[c];
    } else {
      const std::size_t N = static_cast<std::size_t>(spec.num_candidates);
      out[0 * N + slot] = cx;
      out[1 * N + slot] = cy;
      out[2 * N + slot] = w;
      out[3 * N + slot] = h;
      // The product yolov5 decoding computes (one float multiply), so both layouts agree.
      for (int c = 0; c < C; ++c) out[(4 + c) * N + slot] = objectness * class_scores[c];
    }
  }
};

}  // namespace

std::vector<GroundTruth> make_scene(const SceneConfig& config) {
  if (config.src_w < 1 || config.src_h < 1 || config.num_objects < 0 || config.num_classes < 1 ||
      !(config.min_size > 0.0f) || !(config.max_size >= config.min_size)) {
    throw std::invalid_argument(
        "make_scene: expected a positive image size, num_objects >= 0, num_classes >= 1 and "
        "0 < min_size <= max_size");
  }
  Rng rng(config.seed);
  std::vector<GroundTruth> objects;
  const float max_w = std::min(config.max_size, static_cast<float>(config.src_w));
  const float max_h = std::min(config.max_size, static_cast<float>(config.src_h));
  const float min_w = std::min(config.min_size, max_w), min_h = std::min(config.min_size, max_h);
  for (int attempts = 0; static_cast<int>(objects.size()) < config.num_objects; ++attempts) {
    if (attempts > 1000 * (config.num_objects + 1)) {
      throw std::runtime_error("make_scene: could not place " + std::to_string(config.num_objects) +
                               " objects without overlap; use fewer or smaller ones");
    }
    const float w = rng.uniform(min_w, max_w), h = rng.uniform(min_h, max_h);
    const float x1 = rng.uniform(0.0f, config.src_w - w), y1 = rng.uniform(0.0f, config.src_h - h);
    const GroundTruth candidate{{x1, y1, x1 + w, y1 + h}, rng.below(config.num_classes)};
    const bool overlaps = std::any_of(objects.begin(), objects.end(), [&](const GroundTruth& o) {
      return iou_double(o.box, candidate.box) > 0.05;
    });
    if (!overlaps) objects.push_back(candidate);
  }
  return objects;
}

std::vector<float> make_detector_output(const OutputSpec& spec, const Letterbox& letterbox,
                                        const std::vector<GroundTruth>& objects,
                                        const GeneratorConfig& config) {
  validate(spec);
  validate(letterbox);
  if (config.candidates_per_object < 1 || !(config.jitter >= 0.0f && config.jitter <= 0.1f)) {
    throw std::invalid_argument(
        "make_detector_output: expected candidates_per_object >= 1 and jitter in [0, 0.1]");
  }
  const long long needed = static_cast<long long>(objects.size()) * config.candidates_per_object;
  if (needed > spec.num_candidates) {
    throw std::invalid_argument("make_detector_output: " + std::to_string(objects.size()) +
                                " objects x " + std::to_string(config.candidates_per_object) +
                                " candidates need N >= " + std::to_string(needed) +
                                ", got N = " + std::to_string(spec.num_candidates));
  }
  for (const GroundTruth& o : objects) {
    if (o.class_id < 0 || o.class_id >= spec.num_classes) {
      throw std::invalid_argument("make_detector_output: class id " + std::to_string(o.class_id) +
                                  " is not in [0, " + std::to_string(spec.num_classes) + ")");
    }
  }

  Rng rng(config.seed);
  std::vector<float> out(spec.elements());
  const Writer writer{spec, out};
  const int C = spec.num_classes;
  std::vector<float> scores(static_cast<std::size_t>(C));

  // Random distinct slots for the objects' candidates: the first `needed` entries of a partial
  // Fisher-Yates shuffle.
  std::vector<int> slots(static_cast<std::size_t>(spec.num_candidates));
  std::iota(slots.begin(), slots.end(), 0);
  for (long long k = 0; k < needed; ++k) {
    const int j = static_cast<int>(k) + rng.below(spec.num_candidates - static_cast<int>(k));
    std::swap(slots[static_cast<std::size_t>(k)], slots[static_cast<std::size_t>(j)]);
  }
  std::vector<bool> used(static_cast<std::size_t>(spec.num_candidates), false);

  int next = 0;
  for (const GroundTruth& o : objects) {
    const Box exact = letterbox_box(o.box, letterbox);
    const float w = exact.x2 - exact.x1, h = exact.y2 - exact.y1;
    const float best_objectness = rng.uniform(0.80f, 0.95f);
    for (int c = 0; c < C; ++c) scores[static_cast<std::size_t>(c)] = rng.uniform(0.0f, 0.05f);
    scores[static_cast<std::size_t>(o.class_id)] = rng.uniform(0.85f, 0.98f);
    for (int k = 0; k < config.candidates_per_object; ++k) {
      Box b = exact;
      float objectness = best_objectness;
      if (k > 0) {
        const float j = config.jitter;
        const float dx = rng.uniform(-j, j) * w, dy = rng.uniform(-j, j) * h;
        const float sw = 1.0f + rng.uniform(-j, j), sh = 1.0f + rng.uniform(-j, j);
        const float cx = 0.5f * (exact.x1 + exact.x2) + dx, cy = 0.5f * (exact.y1 + exact.y2) + dy;
        b = {cx - 0.5f * w * sw, cy - 0.5f * h * sh, cx + 0.5f * w * sw, cy + 0.5f * h * sh};
        objectness = best_objectness * rng.uniform(0.40f, 0.95f);
      }
      const int slot = slots[static_cast<std::size_t>(next++)];
      used[static_cast<std::size_t>(slot)] = true;
      writer.put(slot, b, objectness, scores.data());
    }
  }

  // Background: every other slot.
  const float dst_w = static_cast<float>(letterbox.dst_w),
              dst_h = static_cast<float>(letterbox.dst_h);
  for (int slot = 0; slot < spec.num_candidates; ++slot) {
    if (used[static_cast<std::size_t>(slot)]) continue;
    const float w = rng.uniform(4.0f, 0.3f * dst_w), h = rng.uniform(4.0f, 0.3f * dst_h);
    const float cx = rng.uniform(0.0f, dst_w), cy = rng.uniform(0.0f, dst_h);
    const Box b{cx - 0.5f * w, cy - 0.5f * h, cx + 0.5f * w, cy + 0.5f * h};
    for (int c = 0; c < C; ++c) scores[static_cast<std::size_t>(c)] = rng.uniform(0.0f, 0.1f);
    float objectness = rng.uniform(0.0f, 0.02f);
    if (rng.below(20) == 0) {  // confident about the class, not about there being an object
      scores[static_cast<std::size_t>(rng.below(C))] = rng.uniform(0.5f, 1.0f);
      objectness = rng.uniform(0.05f, 0.2f);
    }
    writer.put(slot, b, objectness, scores.data());
  }
  return out;
}

std::vector<Detection> random_detections(int n, int num_classes, int image_size,
                                         int boxes_per_cluster, int score_levels,
                                         std::uint32_t seed) {
  if (n < 0 || num_classes < 1 || image_size < 16 || boxes_per_cluster < 1 || score_levels < 0) {
    throw std::invalid_argument(
        "random_detections: expected n >= 0, num_classes >= 1, image_size >= 16, "
        "boxes_per_cluster >= 1, score_levels >= 0");
  }
  Rng rng(seed);
  std::vector<Detection> boxes;
  boxes.reserve(static_cast<std::size_t>(n));
  const float size = static_cast<float>(image_size);
  const float max_side = std::min(100.0f, size / 2.0f);
  while (static_cast<int>(boxes.size()) < n) {
    const float w = rng.uniform(8.0f, max_side), h = rng.uniform(8.0f, max_side);
    const float cx = rng.uniform(w / 2.0f, size - w / 2.0f),
                cy = rng.uniform(h / 2.0f, size - h / 2.0f);
    const int class_id = rng.below(num_classes);
    for (int k = 0; k < boxes_per_cluster && static_cast<int>(boxes.size()) < n; ++k) {
      const float x = cx + rng.uniform(-0.2f, 0.2f) * w, y = cy + rng.uniform(-0.2f, 0.2f) * h;
      const float bw = w * rng.uniform(0.8f, 1.2f), bh = h * rng.uniform(0.8f, 1.2f);
      Detection d;
      d.box = {quarter(std::max(0.0f, x - bw / 2)), quarter(std::max(0.0f, y - bh / 2)),
               quarter(std::min(size, x + bw / 2)), quarter(std::min(size, y + bh / 2))};
      d.score = score_levels > 0 ? static_cast<float>(1 + rng.below(score_levels)) /
                                       static_cast<float>(score_levels)
                                 : 1.0f - rng.uniform();  // (0, 1]
      d.class_id = class_id;
      d.index = static_cast<int>(boxes.size());
      boxes.push_back(d);
    }
  }
  return boxes;
}

std::vector<float> random_logits(int rows, int cols, float scale, std::uint32_t seed) {
  if (rows < 0 || cols < 0) throw std::invalid_argument("random_logits: expected rows, cols >= 0");
  Rng rng(seed);
  std::vector<float> v(static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols));
  for (float& x : v) x = rng.uniform(-scale, scale);
  return v;
}

int count_recovered(const std::vector<GroundTruth>& objects,
                    const std::vector<Detection>& detections, float tolerance_px) {
  std::vector<bool> taken(detections.size(), false);
  int recovered = 0;
  for (const GroundTruth& o : objects) {
    for (std::size_t i = 0; i < detections.size(); ++i) {
      const Detection& d = detections[i];
      const bool close = std::abs(d.box.x1 - o.box.x1) <= tolerance_px &&
                         std::abs(d.box.y1 - o.box.y1) <= tolerance_px &&
                         std::abs(d.box.x2 - o.box.x2) <= tolerance_px &&
                         std::abs(d.box.y2 - o.box.y2) <= tolerance_px;
      if (!taken[i] && d.class_id == o.class_id && close) {
        taken[i] = true;
        ++recovered;
        break;
      }
    }
  }
  return recovered;
}

std::vector<Detection> benchmark_nms_boxes(int n) {
  return random_detections(n, 80, 640, 25, 0, 7u + static_cast<std::uint32_t>(n));
}

}  // namespace lesson08
