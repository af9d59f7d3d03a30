// Synthetic detector outputs with a known answer, for the tests, the benchmark and the binary.
//
// A real engine needs weights and images; the postprocess only needs a tensor. So we write the
// tensor a detector would produce for known objects: each object gets several overlapping
// candidates (the exact box with the best score, jittered copies with lower scores), every other
// candidate slot gets background noise. Decode + NMS must give the objects back.
// Everything is deterministic for a given seed, on every platform (see Rng).
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "postprocess.cuh"

namespace lesson08 {

// Deterministic random numbers. std::mt19937's output sequence is fixed by the C++ standard, but
// std::uniform_real_distribution's is not (libstdc++ and libc++ differ), so the raw 32-bit
// output is mapped to numbers here: the same tensors everywhere.
class Rng {
 public:
  explicit Rng(std::uint32_t seed) : engine_(seed) {}
  float uniform() { return static_cast<float>(engine_() >> 8) * (1.0f / 16777216.0f); }  // [0,1)
  float uniform(float lo, float hi) { return lo + (hi - lo) * uniform(); }
  // An integer in [0, n), n >= 1 (multiply-shift: no modulo bias worth mentioning for small n).
  int below(int n) {
    return static_cast<int>(
        (static_cast<std::uint64_t>(engine_()) * static_cast<std::uint64_t>(n)) >> 32);
  }

 private:
  std::mt19937 engine_;
};

// An object in the source image: its box (source pixels, continuous coordinates) and class.
struct GroundTruth {
  Box box;
  int class_id;
};

struct SceneConfig {
  int src_w = 1280, src_h = 720;  // source image size, pixels
  int num_objects = 12;
  int num_classes = 80;
  float min_size = 24.0f, max_size = 160.0f;  // object width and height range, source pixels
  std::uint32_t seed = 8;
};

// Random objects inside the image whose boxes overlap pairwise by IoU <= 0.05, so that NMS with
// any threshold >= 0.05 keeps them all. Throws std::invalid_argument for a bad config and
// std::runtime_error if the objects do not fit (too many, too large).
std::vector<GroundTruth> make_scene(const SceneConfig& config);

struct GeneratorConfig {
  int candidates_per_object = 20;  // the exact box + (candidates_per_object - 1) jittered copies
  float jitter = 0.06f;            // centre shift and size change, as a fraction of the size
  std::uint32_t seed = 1;
};

// The detector output tensor for `objects` (source-image boxes, letterboxed into the network
// input by `letterbox`), laid out as `spec` says; spec.elements() floats. Per object:
//   - candidate 0: the exact box, objectness in [0.80, 0.95], class score in [0.85, 0.98];
//   - the others: the box with centre and size jittered by up to `jitter`, and objectness
//     scaled by [0.40, 0.95], so their scores are strictly lower; every jittered copy overlaps
//     the exact box by IoU > 0.6;
//   - the other classes score below 0.05.
// Every other slot is background noise: a random box, objectness below 0.02, except one slot in
// 20 whose class score is high (0.5 to 1) with objectness 0.05 to 0.2. No noise scores above 0.2.
// yolov8 has no objectness: each class channel holds objectness x class score, computed in float
// exactly as yolov5 decoding computes it, so both layouts decode to the same detections.
// Objects take random distinct slots. Throws std::invalid_argument if the spec or the letterbox
// is invalid (validate), a class id is out of range or N < objects x candidates_per_object.
std::vector<float> make_detector_output(const OutputSpec& spec, const Letterbox& letterbox,
                                        const std::vector<GroundTruth>& objects,
                                        const GeneratorConfig& config);

// n detections for NMS tests and benchmarks, index = position. They come in clusters of
// boxes_per_cluster jittered boxes of one random class (like a detector's candidates around an
// object), inside an image_size x image_size image. score_levels > 0 draws scores from that many
// distinct values (many ties); 0 draws them from (0, 1]. Coordinates lie on a quarter-pixel grid,
// so every area, intersection and union is exact in float: a float IoU and OpenCV's double IoU
// then only round the final division, and agree on IoU > t for t = 0.5, 0.375, 0.25.
// Throws std::invalid_argument unless n >= 0, num_classes >= 1, image_size >= 16,
// boxes_per_cluster >= 1 and score_levels >= 0.
std::vector<Detection> random_detections(int n, int num_classes, int image_size,
                                         int boxes_per_cluster, int score_levels,
                                         std::uint32_t seed);

// The NMS benchmark's boxes (bench_postprocess.cpp's nms/<n> rows, lesson08 --dump-boxes and
// tools/torchvision_nms_check.py all use this one set): random_detections(n, 80 classes, 640 px,
// clusters of 25, continuous scores, seed 7 + n).
std::vector<Detection> benchmark_nms_boxes(int n);

// rows x cols logits, row-major, uniform in [-scale, scale) (scale >= 0; not checked). Throws
// std::invalid_argument for rows or cols < 0.
std::vector<float> random_logits(int rows, int cols, float scale, std::uint32_t seed);

// How many objects have a detection of their class whose four coordinates are all within
// tolerance_px of the object's box (each detection matches at most one object).
int count_recovered(const std::vector<GroundTruth>& objects,
                    const std::vector<Detection>& detections, float tolerance_px);

// Draws the scene (the objects as filled rectangles on a background) and the detections (boxes
// with class and score) and writes a PNG to `path`. Throws std::runtime_error if it cannot be
// written.
void write_detections_png(const std::string& path, int width, int height,
                          const std::vector<GroundTruth>& objects,
                          const std::vector<Detection>& detections);

}  // namespace lesson08
