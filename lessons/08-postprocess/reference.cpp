// The CPU reference of the postprocess, and the host-side checks every entry point shares.
// Host code only: plain loops over the same per-element functions the kernels call (iou,
// decode_candidate), so that GPU and CPU results can be compared exactly.
#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "postprocess.cuh"

namespace lesson08 {

const char* to_string(Layout layout) {
  return layout == Layout::yolov5 ? "YOLOv5 [N, 5+C]" : "YOLOv8 [4+C, N]";
}

const char* to_string(NmsVersion version) {
  switch (version) {
    case NmsVersion::v1_fast_parallel:
      return "v1 fast parallel";
    case NmsVersion::v2_bitmask_greedy:
      return "v2 bitmask greedy";
    case NmsVersion::v3_bitmask_smem:
      return "v3 bitmask smem";
  }
  return "unknown NmsVersion";
}

void validate(const OutputSpec& spec) {
  if (spec.layout != Layout::yolov5 && spec.layout != Layout::yolov8) {
    throw std::invalid_argument("OutputSpec: unknown layout");
  }
  if (spec.num_candidates < 0 || spec.num_classes < 1) {
    throw std::invalid_argument(
        "OutputSpec: expected num_candidates >= 0 and num_classes >= 1, got N = " +
        std::to_string(spec.num_candidates) + ", C = " + std::to_string(spec.num_classes));
  }
  if (static_cast<long long>(spec.num_classes) + 5 > 0x7fffffffLL ||
      static_cast<long long>(spec.num_candidates) * spec.attributes() > 0x7fffffffLL) {
    throw std::invalid_argument("OutputSpec: N x (attributes) must be below 2^31 elements");
  }
}

void validate_threshold(float t, const char* name) {
  if (!(t >= 0.0f && t <= 1.0f)) {  // also rejects NaN
    // Every digit a float needs, in %g style: std::to_string's fixed "%f" shows -1e-7 as
    // -0.000000 and 1.0000001 as 1.000000, values that look valid.
    std::ostringstream msg;
    msg.precision(std::numeric_limits<float>::max_digits10);
    msg << name << " must be in [0, 1], got " << t;
    throw std::invalid_argument(msg.str());
  }
}

void validate(const PostprocessConfig& config) {
  validate_threshold(config.conf_threshold, "conf_threshold");
  validate_threshold(config.iou_threshold, "iou_threshold");
  if (config.max_candidates < 1 || config.max_candidates > kMaxNmsBoxes) {
    throw std::invalid_argument("max_candidates must be in [1, " + std::to_string(kMaxNmsBoxes) +
                                "], got " + std::to_string(config.max_candidates));
  }
  if (config.max_detections < 1 || config.max_detections > kMaxNmsBoxes) {
    throw std::invalid_argument("max_detections must be in [1, " + std::to_string(kMaxNmsBoxes) +
                                "], got " + std::to_string(config.max_detections));
  }
  if (config.nms != NmsVersion::v1_fast_parallel && config.nms != NmsVersion::v2_bitmask_greedy &&
      config.nms != NmsVersion::v3_bitmask_smem) {
    throw std::invalid_argument("unknown NmsVersion");
  }
}

void validate(const Letterbox& lb) {
  if (lb.src_w < 1 || lb.src_h < 1 || !(lb.scale > 0.0) || !std::isfinite(lb.scale) ||
      !std::isfinite(lb.pad_x) || !std::isfinite(lb.pad_y)) {
    throw std::invalid_argument(
        "Letterbox: expected a positive source size and scale (use make_letterbox)");
  }
}

void validate_nms_input(const std::vector<Detection>& boxes, const char* who) {
  std::vector<int> indices;
  indices.reserve(boxes.size());
  for (const Detection& b : boxes) {
    if (std::isnan(b.score)) throw std::invalid_argument(std::string(who) + ": a score is NaN");
    indices.push_back(b.index);
  }
  // Repeats found in a sorted copy, not a hash set: 4x cheaper on 10,000 boxes, so the check
  // stays a small part of the CPU NMS the benchmark times.
  std::sort(indices.begin(), indices.end());
  const auto repeat = std::adjacent_find(indices.begin(), indices.end());
  if ((!indices.empty() && indices.front() < 0) || repeat != indices.end()) {
    const int bad = !indices.empty() && indices.front() < 0 ? indices.front() : *repeat;
    throw std::invalid_argument(
        std::string(who) +
        ": Detection::index must be >= 0 and unique (ties in score are broken by it); index " +
        std::to_string(bad) + " is not");
  }
}

void sort_for_nms(std::vector<Detection>& boxes) {
  std::sort(boxes.begin(), boxes.end(), nms_before);
}

std::vector<Detection> nms_cpu(std::vector<Detection> boxes, float iou_threshold,
                               bool class_agnostic) {
  validate_threshold(iou_threshold, "iou_threshold");
  validate_nms_input(boxes, "nms_cpu");
  sort_for_nms(boxes);
  std::vector<Detection> kept;
  for (const Detection& candidate : boxes) {
    bool keep = true;
    for (const Detection& k : kept) {
      if ((class_agnostic || k.class_id == candidate.class_id) &&
          iou(k.box, candidate.box) > iou_threshold) {
        keep = false;
        break;
      }
    }
    if (keep) kept.push_back(candidate);
  }
  return kept;
}

std::vector<Detection> fast_nms_cpu(std::vector<Detection> boxes, float iou_threshold,
                                    bool class_agnostic) {
  validate_threshold(iou_threshold, "iou_threshold");
  validate_nms_input(boxes, "fast_nms_cpu");
  sort_for_nms(boxes);
  std::vector<Detection> kept;
  for (std::size_t i = 0; i < boxes.size(); ++i) {
    bool keep = true;
    for (std::size_t j = 0; j < i && keep; ++j) {  // every higher box, kept or not
      keep = !((class_agnostic || boxes[j].class_id == boxes[i].class_id) &&
               iou(boxes[j].box, boxes[i].box) > iou_threshold);
    }
    if (keep) kept.push_back(boxes[i]);
  }
  return kept;
}

DecodeResult decode_cpu(const float* output, std::size_t elements, const OutputSpec& spec,
                        const Letterbox& letterbox, float conf_threshold, int max_candidates) {
  validate(spec);
  validate(letterbox);
  validate_threshold(conf_threshold, "conf_threshold");
  if (elements != spec.elements()) {
    throw std::invalid_argument(
        "decode_cpu: expected " + std::to_string(spec.elements()) + " floats for a " +
        to_string(spec.layout) + " output with N = " + std::to_string(spec.num_candidates) +
        ", C = " + std::to_string(spec.num_classes) + ", got " + std::to_string(elements));
  }
  if (output == nullptr && elements > 0) {
    throw std::invalid_argument("decode_cpu: the output pointer is null");
  }
  if (max_candidates < 1) throw std::invalid_argument("decode_cpu: max_candidates must be >= 1");
  DecodeResult r;
  for (int i = 0; i < spec.num_candidates; ++i) {
    Detection d;
    if (decode_candidate(output, spec, i, conf_threshold, letterbox, &d)) r.candidates.push_back(d);
  }
  r.num_above_threshold = static_cast<int>(r.candidates.size());
  sort_for_nms(r.candidates);
  if (r.num_above_threshold > max_candidates) {
    r.candidates.resize(static_cast<std::size_t>(max_candidates));
    r.num_dropped = r.num_above_threshold - max_candidates;
  }
  return r;
}

PostprocessResult postprocess_cpu(const float* output, std::size_t elements, const OutputSpec& spec,
                                  const Letterbox& letterbox, const PostprocessConfig& config) {
  validate(config);
  DecodeResult decoded =
      decode_cpu(output, elements, spec, letterbox, config.conf_threshold, config.max_candidates);
  PostprocessResult r;
  r.num_above_threshold = decoded.num_above_threshold;
  r.num_dropped = decoded.num_dropped;
  r.detections =
      config.nms == NmsVersion::v1_fast_parallel
          ? fast_nms_cpu(std::move(decoded.candidates), config.iou_threshold, config.class_agnostic)
          : nms_cpu(std::move(decoded.candidates), config.iou_threshold, config.class_agnostic);
  if (static_cast<int>(r.detections.size()) > config.max_detections) {
    r.detections.resize(static_cast<std::size_t>(config.max_detections));
  }
  return r;
}

std::vector<PostprocessResult> postprocess_batch_cpu(const float* output, std::size_t elements,
                                                     const BatchSpec& spec,
                                                     const std::vector<Letterbox>& letterboxes,
                                                     const PostprocessConfig& config) {
  validate(spec);
  if (elements != spec.elements()) {
    throw std::invalid_argument("postprocess_batch_cpu: expected " +
                                std::to_string(spec.elements()) + " elements, got " +
                                std::to_string(elements));
  }
  if (letterboxes.size() != 1 && letterboxes.size() != static_cast<std::size_t>(spec.batch)) {
    throw std::invalid_argument("postprocess_batch_cpu: expected 1 or B letterboxes, got " +
                                std::to_string(letterboxes.size()));
  }
  if (output == nullptr && elements > 0) {
    throw std::invalid_argument("postprocess_batch_cpu: the output pointer is null");
  }
  const std::size_t per_image = spec.image.elements();
  std::vector<PostprocessResult> out;
  for (int b = 0; b < spec.batch; ++b) {
    const Letterbox& lb = letterboxes[letterboxes.size() == 1 ? 0 : static_cast<std::size_t>(b)];
    out.push_back(postprocess_cpu(output + static_cast<std::size_t>(b) * per_image, per_image,
                                  spec.image, lb, config));
  }
  return out;
}

EfficientNmsHost to_efficient_nms(const std::vector<PostprocessResult>& results,
                                  int max_output_boxes) {
  if (max_output_boxes < 1) {
    throw std::invalid_argument("to_efficient_nms: max_output_boxes must be >= 1, got " +
                                std::to_string(max_output_boxes));
  }
  EfficientNmsHost h;
  h.batch = static_cast<int>(results.size());
  h.max_output_boxes = max_output_boxes;
  const std::size_t k = static_cast<std::size_t>(max_output_boxes);
  h.num_detections.assign(results.size(), 0);
  h.detection_boxes.assign(results.size() * k * 4, 0.0f);  // zero padding, as the plugin's
  h.detection_scores.assign(results.size() * k, 0.0f);     // memsets leave it
  h.detection_classes.assign(results.size() * k, 0);
  for (std::size_t b = 0; b < results.size(); ++b) {
    const std::vector<Detection>& d = results[b].detections;
    const std::size_t count = std::min(d.size(), k);
    h.num_detections[b] = static_cast<int>(count);
    for (std::size_t j = 0; j < count; ++j) {
      const std::size_t o = b * k + j;
      h.detection_boxes[4 * o + 0] = d[j].box.x1;
      h.detection_boxes[4 * o + 1] = d[j].box.y1;
      h.detection_boxes[4 * o + 2] = d[j].box.x2;
      h.detection_boxes[4 * o + 3] = d[j].box.y2;
      h.detection_scores[o] = d[j].score;
      h.detection_classes[o] = d[j].class_id;
    }
  }
  return h;
}

std::vector<Detection> detections_of(const EfficientNmsView& v, int image) {
  if (v.num_detections == nullptr || v.detection_boxes == nullptr ||
      v.detection_scores == nullptr || v.detection_classes == nullptr) {
    throw std::invalid_argument("detections_of: every output pointer must be non-null");
  }
  if (v.max_output_boxes < 1 || image < 0) {
    throw std::invalid_argument("detections_of: expected K >= 1 and image >= 0, got K = " +
                                std::to_string(v.max_output_boxes) +
                                ", image = " + std::to_string(image));
  }
  const int count = v.num_detections[image];
  if (count < 0 || count > v.max_output_boxes) {
    throw std::invalid_argument(
        "detections_of: image " + std::to_string(image) + " has " + std::to_string(count) +
        " detections, outside [0, K = " + std::to_string(v.max_output_boxes) + "]");
  }
  std::vector<Detection> out(static_cast<std::size_t>(count));
  const std::size_t base = static_cast<std::size_t>(image) * v.max_output_boxes;
  for (int k = 0; k < count; ++k) {
    const std::size_t o = base + static_cast<std::size_t>(k);
    const float* b = v.detection_boxes + 4 * o;
    out[static_cast<std::size_t>(k)] = {
        {b[0], b[1], b[2], b[3]}, v.detection_scores[o], v.detection_classes[o], k};
  }
  return out;
}

}  // namespace lesson08
