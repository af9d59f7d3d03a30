// Lesson 12: running the engine on scenes and turning its output into detections.
//
//   scene_input      a scene (scenes.hpp) as the network input: RGB uint8 -> float CHW / 255
//   run_detector     held-out scenes through an execution context in batches, decoded and NMS'd
//                    by lesson 08's GPU postprocess: detections per scene
//   eval_config / deploy_config   the two postprocess settings the lesson uses: the validator's
//                    (conf 0.001, NMS IoU 0.7, 300 boxes; for mAP) and a deployment's (conf 0.25,
//                    IoU 0.45)
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "engine.hpp"
#include "postprocess.cuh"
#include "scenes.hpp"

namespace lesson12 {

// Scene `seed` at width x height as [3, height, width] float in [0, 1]; its truth in *truth.
std::vector<float> scene_input(std::uint64_t seed, int width, int height,
                               std::vector<SceneBox>* truth = nullptr);

// How far an engine's output [4 + C, N] (one image) is from a reference's, in the terms that
// matter for boxes: the largest class-score difference over all candidates, and the largest
// box-coordinate difference over the candidates the reference scores above `min_score` (a
// background candidate's box is never used), in pixels and in grid cells of the candidate's level
// (strides 8, 16, 32 for an input_h x input_w image). Throws std::invalid_argument if the sizes
// differ from (4 + num_classes) x num_candidates(input_h, input_w).
struct OutputError {
  double max_score = 0;      // |score - reference|
  double max_box_px = 0;     // |cx, cy, w or h - reference|, pixels
  double max_box_cells = 0;  // the same over the level's stride
  int confident = 0;         // candidates compared for their boxes
};
OutputError compare_outputs(const std::vector<float>& got, const std::vector<float>& ref,
                            int num_classes, int input_h, int input_w, float min_score = 0.1f);

lesson08::PostprocessConfig eval_config();
lesson08::PostprocessConfig deploy_config();

// Scenes first_seed .. first_seed + count - 1 at the engine's input size, `batch` at a time
// (the last batch may be smaller), on `stream`. Returns the detections of each scene (network
// input pixels: the scenes are rendered at the input size) and their truth in *truth.
// Throws std::invalid_argument for count < 0 or a batch outside the engine's profile.
std::vector<std::vector<lesson08::Detection>> run_detector(
    const Engine& engine, ExecutionContext& context, std::uint64_t first_seed, int count, int batch,
    const lesson08::PostprocessConfig& config, cudaStream_t stream,
    std::vector<std::vector<SceneBox>>* truth = nullptr);

}  // namespace lesson12
