#include "metrics.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace lesson12 {
namespace {

double box_iou(const lesson08::Detection& d, const SceneBox& t) {
  const double ix =
      std::max(0.0, std::min<double>(d.box.x2, t.x2) - std::max<double>(d.box.x1, t.x1));
  const double iy =
      std::max(0.0, std::min<double>(d.box.y2, t.y2) - std::max<double>(d.box.y1, t.y1));
  const double inter = ix * iy;
  const double a =
      (static_cast<double>(d.box.x2) - d.box.x1) * (static_cast<double>(d.box.y2) - d.box.y1);
  const double b = (static_cast<double>(t.x2) - t.x1) * (static_cast<double>(t.y2) - t.y1);
  const double uni = a + b - inter;
  return uni > 0 ? inter / uni : 0.0;
}

}  // namespace

double average_precision(std::vector<std::pair<float, bool>> scored, int truth_count) {
  if (truth_count <= 0) return 0.0;
  std::stable_sort(scored.begin(), scored.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<double> precision, recall;
  int tp = 0, fp = 0;
  for (const auto& s : scored) {
    (s.second ? tp : fp) += 1;
    precision.push_back(static_cast<double>(tp) / (tp + fp));
    recall.push_back(static_cast<double>(tp) / truth_count);
  }
  // Monotone envelope, right to left.
  for (int i = static_cast<int>(precision.size()) - 2; i >= 0; --i) {
    precision[i] = std::max(precision[i], precision[i + 1]);
  }
  double sum = 0;
  std::size_t j = 0;
  for (int k = 0; k <= 100; ++k) {
    const double r = k / 100.0;
    while (j < recall.size() && recall[j] < r) ++j;
    if (j < recall.size()) sum += precision[j];
  }
  return sum / 101.0;
}

MapResult mean_average_precision(const std::vector<FrameEval>& frames, int num_classes) {
  if (num_classes < 1) {
    throw std::invalid_argument("mean_average_precision: num_classes must be >= 1, got " +
                                std::to_string(num_classes));
  }
  MapResult out;
  std::vector<int> truth_count(static_cast<std::size_t>(num_classes), 0);
  for (const FrameEval& f : frames) {
    for (const SceneBox& t : f.truth) {
      if (t.class_id < 0 || t.class_id >= num_classes) {
        throw std::invalid_argument("mean_average_precision: truth class " +
                                    std::to_string(t.class_id) + " outside [0, " +
                                    std::to_string(num_classes) + ")");
      }
      ++truth_count[static_cast<std::size_t>(t.class_id)];
      ++out.truth_boxes;
    }
    for (const lesson08::Detection& d : f.detections) {
      if (d.class_id < 0 || d.class_id >= num_classes) {
        throw std::invalid_argument("mean_average_precision: detection class " +
                                    std::to_string(d.class_id) + " outside [0, " +
                                    std::to_string(num_classes) + ")");
      }
      ++out.detections;
    }
  }
  out.ap50_per_class.assign(static_cast<std::size_t>(num_classes), -1.0);
  double sum_over_t = 0;
  for (int ti = 0; ti < 10; ++ti) {
    const double thr = 0.5 + 0.05 * ti;
    double sum = 0;
    int classes = 0;
    for (int c = 0; c < num_classes; ++c) {
      if (truth_count[static_cast<std::size_t>(c)] == 0) continue;
      std::vector<std::pair<float, bool>> scored;
      for (const FrameEval& f : frames) {
        // This frame's detections of class c in score order, matched greedily.
        std::vector<const lesson08::Detection*> dets;
        for (const auto& d : f.detections) {
          if (d.class_id == c) dets.push_back(&d);
        }
        std::stable_sort(dets.begin(), dets.end(),
                         [](const auto* a, const auto* b) { return a->score > b->score; });
        std::vector<bool> used(f.truth.size(), false);
        for (const lesson08::Detection* d : dets) {
          int best = -1;
          double best_iou = thr;
          for (std::size_t k = 0; k < f.truth.size(); ++k) {
            if (used[k] || f.truth[k].class_id != c) continue;
            const double iou = box_iou(*d, f.truth[k]);
            if (iou >= best_iou) {
              best_iou = iou;
              best = static_cast<int>(k);
            }
          }
          if (best >= 0) used[static_cast<std::size_t>(best)] = true;
          scored.emplace_back(d->score, best >= 0);
        }
      }
      const double ap = average_precision(scored, truth_count[static_cast<std::size_t>(c)]);
      if (ti == 0) out.ap50_per_class[static_cast<std::size_t>(c)] = ap;
      sum += ap;
      ++classes;
    }
    const double m = classes > 0 ? sum / classes : 0.0;
    if (ti == 0) out.map50 = m;
    sum_over_t += m;
  }
  out.map50_95 = sum_over_t / 10.0;
  return out;
}

bool same_detections(const std::vector<lesson08::Detection>& a,
                     const std::vector<lesson08::Detection>& b, float iou_min) {
  if (a.size() != b.size()) return false;
  std::vector<bool> used(b.size(), false);
  for (const lesson08::Detection& d : a) {
    bool found = false;
    for (std::size_t k = 0; k < b.size() && !found; ++k) {
      if (used[k] || b[k].class_id != d.class_id) continue;
      if (lesson08::iou(d.box, b[k].box) >= iou_min) {
        used[k] = true;
        found = true;
      }
    }
    if (!found) return false;
  }
  return true;
}

}  // namespace lesson12
