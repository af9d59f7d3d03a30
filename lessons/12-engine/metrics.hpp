// Lesson 12: how good the detector is — mean average precision against the scenes' truth.
//
// COCO's protocol (the one Ultralytics' validator and pycocotools report), written out:
//   - per class, detections of all frames sorted by score (descending); a detection is a true
//     positive at IoU threshold t when its best-IoU unmatched truth box of the same class in the
//     same frame has IoU >= t (greedy, in score order), otherwise a false positive;
//   - the precision/recall curve made monotone (precision at recall r = the best precision at any
//     recall >= r), sampled at the 101 recalls 0, 0.01, ..., 1 and averaged: AP;
//   - mAP@0.5 = the mean AP over classes with at least one truth box at t = 0.5;
//     mAP@0.5:0.95 = the mean over t = 0.50, 0.55, ..., 0.95 of that mean.
// Detections are what lesson 08's postprocess returns (conf 0.001, NMS IoU 0.7, class-aware, at
// most 300 per frame: the validator's settings, so low-score detections count, as in COCO).
// Host code only; CPU-tested.
#pragma once

#include <vector>

#include "postprocess.cuh"  // lesson 08: Detection
#include "scenes.hpp"

namespace lesson12 {

struct FrameEval {
  std::vector<SceneBox> truth;
  std::vector<lesson08::Detection> detections;
};

struct MapResult {
  double map50 = 0, map50_95 = 0;
  std::vector<double> ap50_per_class;  // -1 for a class with no truth box
  int truth_boxes = 0, detections = 0;
};

// Throws std::invalid_argument if num_classes < 1 or a class id is outside [0, num_classes).
MapResult mean_average_precision(const std::vector<FrameEval>& frames, int num_classes);

// AP of one class at one IoU threshold, from detections already marked (score, true positive)
// and the number of truth boxes: the 101-point interpolated area. 0 if there is no truth box.
double average_precision(std::vector<std::pair<float, bool>> scored, int truth_count);

// Whether two frames' detections are "the same": equal count, and each detection of `a` has a
// detection of `b` with the same class and IoU >= iou_min (in NMS order, one to one).
bool same_detections(const std::vector<lesson08::Detection>& a,
                     const std::vector<lesson08::Detection>& b, float iou_min);

}  // namespace lesson12
